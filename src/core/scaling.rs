//! The scaler's one entry point: everything a planning pass decides about desired capacity, from
//! one snapshot. Give-backs for instances AWS took first come first (their settlements let records
//! close in the same pass), then boosts that stop waiting, then the ledger without the boosts that
//! are finished, and last the new boosts, planned against that ledger.

use serde::{Deserialize, Serialize};

use super::boost::{plan_boosts, BoostPlan};
use super::drain::close_finished_boosts;
use super::expiry::{expire_boosts, Expired};
use super::give_back::{plan_give_backs, GiveBack};
use super::model::{BoostLedger, BoostRecord, Snapshot, Timestamp};
use super::policy::Policy;
use super::signals::{fold_signals, AtRiskSet};

/// Who plans, and so which of its decisions are meant to be carried out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Acting {
    /// The leader: its give-backs and expiries are carried out, and the rest is planned on the
    /// ledger as they leave it.
    Leader,
    /// The leader, once this pass's give-backs were tried and some were not made: none is planned
    /// again, and the rest is planned on the ledger as the attempt left it.
    LeaderAfterGiveBacks,
    /// A follower: it plans what the leader would, to report it, and carries out nothing, so the
    /// ledger it plans on is the one it read.
    Follower,
}

/// Everything one scaling pass decided.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScalingPlan {
    /// The at-risk instances the decisions are about (and the signals dropped, with why).
    pub at_risk: AtRiskSet,
    /// Nodes to give back for boosted instances AWS took first.
    pub(crate) give_backs: Vec<GiveBack>,
    /// Open boosts that stop waiting now.
    pub expired: Vec<Expired>,
    /// The ledger to keep: give-backs noted, expiries marked and finished boosts closed. The new
    /// boosts' records are in `boosts`, not here: they are saved before their write.
    pub ledger: BoostLedger,
    /// Boosts to make and instances held.
    pub boosts: BoostPlan,
}

/// Plans one scaling pass over `snapshot` at `now`.
pub fn plan_scaling(snapshot: &Snapshot, policy: &Policy, now: Timestamp, acting: Acting) -> ScalingPlan {
    let at_risk = fold_signals(snapshot, policy, now);
    // The later stages plan on the ledger as the earlier ones leave it; the rest of the snapshot
    // (thousands of nodes and their pods) is never copied.
    let mut ledger = snapshot.ledger.clone();
    let give_backs = match acting {
        Acting::LeaderAfterGiveBacks => Vec::new(),
        Acting::Leader | Acting::Follower => plan_give_backs(snapshot),
    };
    if acting == Acting::Leader {
        for g in &give_backs {
            g.settled.iter().for_each(|i| ledger.note_settled(i));
            g.returned.iter().for_each(|i| ledger.note_returned(i));
        }
    }
    let expired = match acting {
        Acting::Follower => Vec::new(),
        Acting::Leader | Acting::LeaderAfterGiveBacks => expire_boosts(snapshot, &ledger, &at_risk, policy, now),
    };
    for record in &mut ledger.records {
        if let Some(e) = expired.iter().find(|e| e.names(record)) {
            record.expired.get_or_insert(e.why);
        }
    }
    let ledger = close_finished_boosts(snapshot, &ledger, &at_risk);
    let boosts = plan_boosts(snapshot, &ledger, &at_risk, policy, now);
    ScalingPlan { at_risk, give_backs, expired, ledger, boosts }
}

impl Expired {
    /// Whether `record` is the boost that expires.
    pub fn names(&self, record: &BoostRecord) -> bool {
        (&self.group, &self.instances, self.at) == (&record.group, &record.instances, record.at)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::core::model::{BoostExpiry, Group, GroupName, InstanceId, Node, Signal};

    /// Group `a` had n1 boosted by one node at 10 s; AWS then took n1 (gone from the group's
    /// members and from the cluster), and n2 is newly at risk.
    fn taken_first() -> Snapshot {
        let mut s = Snapshot::default()
            .with_group(Group::test("a").desired(4).max(10).members(["i-n2", "i-n3", "i-r1"]))
            .with_node(Node::test("n2", "a").cordoned().with_pods(2, 500, 1 << 30))
            .with_node(Node::test("n3", "a"))
            .with_node(Node::test("r1", "a").created_at(20_000))
            .with_signal(Signal::rebalance("n2", 30_000));
        s.ledger.record(BoostRecord { before: 3, ..BoostRecord::test("a", &["i-n1"], 1, 10_000) });
        s
    }

    const NOW: Timestamp = Timestamp::from_millis(60_000);

    fn count() -> Policy {
        Policy { sizing: crate::core::SizingMode::Count, ..Policy::default() }
    }

    #[test]
    fn a_leader_gives_back_closes_the_settled_boost_and_boosts_the_new_risk_in_one_pass() {
        let p = plan_scaling(&taken_first(), &count(), NOW, Acting::Leader);
        assert_eq!(p.give_backs.len(), 1);
        assert_eq!((p.give_backs[0].from, p.give_backs[0].to), (4, 3));
        assert!(p.ledger.records.is_empty(), "settled in this pass, so closed in it: {:?}", p.ledger);
        assert_eq!(p.ledger.spent, BTreeSet::from([crate::core::NodeName::from("r1")]), "its replacement is spent");
        let boosted: Vec<&InstanceId> = p.boosts.boosts.iter().flat_map(|b| &b.record.instances).collect();
        assert_eq!(boosted, vec![&InstanceId::from("i-n2")]);
    }

    #[test]
    fn a_follower_reports_the_give_back_but_plans_on_the_ledger_it_read() {
        let p = plan_scaling(&taken_first(), &count(), NOW, Acting::Follower);
        assert_eq!(p.give_backs.len(), 1, "reported");
        assert_eq!(p.ledger.records.len(), 1, "not settled by a follower, so not closed");
        assert!(p.expired.is_empty());
    }

    #[test]
    fn after_give_backs_that_were_not_made_none_is_planned_or_assumed_again() {
        let p = plan_scaling(&taken_first(), &count(), NOW, Acting::LeaderAfterGiveBacks);
        assert!(p.give_backs.is_empty());
        assert_eq!(p.ledger.records.len(), 1, "the unsettled record stays open for the next pass");
    }

    #[test]
    fn an_expired_boost_is_marked_in_the_ledger_the_plan_keeps() {
        let mut s = taken_first();
        s.groups.get_mut(&GroupName::from("a")).unwrap().members = None;
        s.nodes.insert("n1".into(), Node::test("n1", "a").cordoned());
        s.nodes.remove(&crate::core::NodeName::from("r1"));
        let policy = count();
        let late = Timestamp::from_millis(10_000).plus(policy.replacement_timeout);
        let p = plan_scaling(&s, &policy, late, Acting::Leader);
        assert_eq!(p.expired.len(), 1);
        assert_eq!(p.ledger.records[0].expired, Some(BoostExpiry::ReplacementTimeout));
        assert!(plan_scaling(&s, &policy, late, Acting::Follower).expired.is_empty(), "only the leader expires");
    }
}
