//! The scaler's one entry point: everything a planning pass decides about desired capacity, from
//! one snapshot. Give-backs for instances AWS took first come first (their settlements let records
//! close in the same pass), then boosts that stop waiting, then the ledger without the boosts that
//! are finished, and last the new boosts, planned against that ledger.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::back_to_spot::{plan_back_to_spot, BackToSpotPlan};
use super::boost::{plan_boosts, BoostPlan};
use super::drain_batches::close_finished_boosts;
use super::expiry::{expire_boosts, Expired};
use super::fallback::{failing, plan_fallbacks, refused_fallbacks, Exhausted, Fallback, FallbackPlan, RefusedFallback};
use super::give_back::{plan_give_backs, GiveBack};
use super::ledger_edit::Forgotten;
use super::ledger_edit::{apply_all, LedgerEdit};
use super::model::{BoostLedger, GroupName, Snapshot, Timestamp};
use super::policy::Policy;
use super::pool_mates::{plan_pool_mates, release_quiet_pools};
use super::signals::{fold_signals_with_nodes, AtRiskSet};
use super::standby::{choose_standby, lapse_quiet_standbys, readmit_lapsed, Readmits, RebalanceChoice};

/// Who plans, and so which of its decisions are meant to be carried out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Acting {
    /// The leader: its give-backs and expiries are carried out, and the rest is planned on the
    /// ledger as they leave it.
    Leader,
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
    /// The ledger the boosts were planned on: give-backs noted, expiries marked and finished
    /// boosts closed. The new boosts' records are in `boosts`, not here: they are saved before
    /// their write.
    pub ledger: BoostLedger,
    /// The finished boosts to close (and the spent replacements to forget), as edits of whatever
    /// ledger is held when they are saved.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub closes: Vec<LedgerEdit>,
    /// Boosts to make and instances held.
    pub boosts: BoostPlan,
    /// Nodes of boosts whose group has no capacity, moved to a fallback group.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fallbacks: Vec<Fallback>,
    /// Nodes of boosts that every group allowed failed to launch, parked until a retry (their
    /// groups lowered by them as take-backs).
    pub exhausted: Vec<Exhausted>,
    /// Groups named as fallbacks of a failing group that may not take its nodes (to report).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub refused_fallbacks: Vec<RefusedFallback>,
    /// Fallback nodes whose return to their own group begins or is abandoned now, and the edits
    /// that note it (saved with the closes).
    #[serde(skip)]
    pub back_to_spot: BackToSpotPlan,
    /// Returns that end now: their boost closes with the fallback node terminated.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub returned_to_spot: Vec<ReturnedToSpot>,
    /// Groups boosted now that failed to launch for want of capacity and name fallbacks: they
    /// will not launch these nodes either, so once a group's raise is written the scaler plans
    /// again at once and the nodes move to its fallback without waiting for the next failed
    /// activity.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub replan_once_raised: BTreeSet<GroupName>,
    /// How the boosts for rebalance recommendations answer them (see [`super::standby`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rebalance_choices: Vec<RebalanceChoice>,
    /// Nodes whose rebalance recommendation lapsed, cordoned for it (NTH cordons on one): made
    /// schedulable again once the lapse is saved, since they keep serving; and the lapsing nodes
    /// whose cordon is someone else's, which keep it.
    #[serde(default, skip_serializing_if = "Readmits::is_empty")]
    pub readmit: Readmits,
}

/// A return that ends: the nodes given back by its fallback, now in their own group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReturnedToSpot {
    /// The group they went back to.
    pub home: GroupName,
    /// The fallback they left.
    pub from: GroupName,
    /// Nodes the fallback gave back (terminated with decrement).
    pub nodes: u32,
    /// When their capacity had moved to the fallback.
    pub since: Timestamp,
}

/// The returns among `closes` (on `ledger`, before they apply).
fn returned_to_spot(ledger: &BoostLedger, closes: &[LedgerEdit]) -> Vec<ReturnedToSpot> {
    closes
        .iter()
        .filter_map(|c| match c {
            LedgerEdit::Close { id, .. } => ledger.records.iter().find(|r| r.is(id)),
            _ => None,
        })
        .filter(|r| r.returned > 0 && ledger.is_return(r))
        .filter_map(|r| {
            let returning = r.instances.iter().find_map(|i| ledger.returning.get(i))?;
            let (home, from, since) = (returning.home.clone(), returning.from.clone(), returning.since);
            Some(ReturnedToSpot { home, from, nodes: r.returned, since })
        })
        .collect()
}

/// Plans one scaling pass over `snapshot` at `now`.
pub fn plan_scaling(snapshot: &Snapshot, policy: &Policy, now: Timestamp, acting: Acting) -> ScalingPlan {
    let (at_risk, nodes) = fold_signals_with_nodes(snapshot, policy, now);
    // The later stages plan on the ledger as the earlier ones leave it; the rest of the snapshot
    // (thousands of nodes and their pods) is never copied.
    let mut ledger = snapshot.ledger.clone();
    let give_backs = plan_give_backs(snapshot, &at_risk, policy, now);
    if acting == Acting::Leader {
        give_backs.iter().for_each(|g| {
            g.edit().apply(&mut ledger);
        });
    }
    let expired = match acting {
        Acting::Follower => Vec::new(),
        Acting::Leader => expire_boosts(snapshot, &ledger, &at_risk, policy, now),
    };
    expired.iter().for_each(|e| {
        e.edit().apply(&mut ledger);
    });
    let mut closes = close_finished_boosts(snapshot, &ledger, &at_risk);
    let returned_to_spot = returned_to_spot(&ledger, &closes);
    apply_all(&mut ledger, &closes);
    let released = release_quiet_pools(snapshot, &ledger, &at_risk, now);
    apply_all(&mut ledger, &released);
    closes.extend(released);
    let back_to_spot = match acting {
        Acting::Follower => BackToSpotPlan::default(),
        Acting::Leader => plan_back_to_spot(snapshot, &ledger, &at_risk, policy, now),
    };
    apply_all(&mut ledger, &back_to_spot.edits);
    closes.extend(back_to_spot.edits.iter().cloned());
    let lapsed = lapse_quiet_standbys(snapshot, &ledger, &at_risk, now);
    let readmit = readmit_lapsed(snapshot, &ledger, &at_risk, &lapsed);
    apply_all(&mut ledger, &lapsed);
    closes.extend(lapsed);
    if !readmit.settled.is_empty() {
        let settled = LedgerEdit::Forget(Forgotten::Uncordons(readmit.settled.clone()));
        settled.apply(&mut ledger);
        closes.push(settled);
    }
    let mut at_risk = at_risk;
    at_risk.drop_lapsed(&ledger);
    let mut boosts = plan_boosts(snapshot, &ledger, (&at_risk, &nodes), policy, now);
    // A return abandoned now is the fallback's node again: not boosted for.
    boosts.boosts.retain(|b| !b.record.instances.iter().any(|i| back_to_spot.abandoned.contains(i)));
    let rebalance_choices = choose_standby(snapshot, &ledger, &at_risk, &mut boosts, policy, now);
    let ahead = plan_pool_mates(snapshot, &ledger, &at_risk, &boosts, policy, now);
    boosts.boosts.extend(ahead);
    let (FallbackPlan { moves: fallbacks, exhausted }, refused_fallbacks) = match acting {
        Acting::Follower => (FallbackPlan::default(), Vec::new()),
        Acting::Leader => {
            (plan_fallbacks(snapshot, &ledger, policy, now), refused_fallbacks(snapshot, &ledger, policy, now))
        }
    };
    let replan_once_raised = boosts
        .boosts
        .iter()
        .map(|b| &b.group)
        .filter(|g| {
            failing(snapshot, g, policy, now) && snapshot.groups.get(*g).is_some_and(|g| !g.fallbacks.is_empty())
        })
        .cloned()
        .collect();
    ScalingPlan {
        at_risk,
        give_backs,
        expired,
        ledger,
        closes,
        boosts,
        fallbacks,
        exhausted,
        refused_fallbacks,
        back_to_spot,
        returned_to_spot,
        replan_once_raised,
        rebalance_choices,
        readmit,
    }
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::core::model::{BoostExpiry, BoostRecord, Group, GroupName, InstanceId, Node, NodeName, Signal};
    use crate::core::GiveBackHow;

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
    fn a_leader_chooses_a_node_to_give_back_and_boosts_the_new_risk_in_one_pass() {
        let p = plan_scaling(&taken_first(), &count(), NOW, Acting::Leader);
        assert_eq!(p.give_backs.len(), 1);
        let GiveBackHow::Drain(chosen) = &p.give_backs[0].how else { panic!("{:?}", p.give_backs) };
        assert_eq!(chosen.node.as_ref().map(NodeName::as_str), Some("r1"), "empty and newest; n2 is at risk");
        assert_eq!(p.ledger.records[0].giving_back.get(&InstanceId::from("i-n1")), Some(chosen));
        let boosted: Vec<&InstanceId> = p.boosts.boosts.iter().flat_map(|b| &b.record.instances).collect();
        assert_eq!(boosted, vec![&InstanceId::from("i-n2")]);
    }

    #[test]
    fn a_follower_reports_the_give_back_but_plans_on_the_ledger_it_read() {
        let p = plan_scaling(&taken_first(), &count(), NOW, Acting::Follower);
        assert_eq!(p.give_backs.len(), 1, "reported");
        assert!(p.ledger.records[0].giving_back.is_empty(), "not noted by a follower");
        assert!(p.expired.is_empty());
    }

    #[test]
    fn an_expired_boost_is_marked_in_the_ledger_the_plan_keeps() {
        let mut s = taken_first();
        s.groups.get_mut(&GroupName::from("a")).unwrap().members = None;
        s.nodes.insert("n1".into(), Node::test("n1", "a").cordoned());
        s.nodes.remove(&NodeName::from("r1"));
        let policy = count();
        let late = Timestamp::from_millis(10_000).plus(policy.replacement_timeout);
        let p = plan_scaling(&s, &policy, late, Acting::Leader);
        assert_eq!(p.expired.len(), 1);
        assert_eq!(p.ledger.records[0].expired, Some(BoostExpiry::ReplacementTimeout));
        assert!(plan_scaling(&s, &policy, late, Acting::Follower).expired.is_empty(), "only the leader expires");
    }
}
