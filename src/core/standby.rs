//! Standing by for rebalance recommendations. Recommendations far outnumber interruptions (one
//! operator saw 30 against 15, 21 nodes never interrupted, lead times from 17 minutes to almost
//! 9 hours), so draining every recommended node replaces many that would have run for hours.
//!
//! A group answers a recommendation by its policy (tag, else flag):
//! - `replace`: boost, wait for the replacements, drain, terminate.
//! - `standby`: boost and keep the replacements Ready (claimed and protected as for `replace`),
//!   but drain nothing until the instance's interruption notice comes; then it drains at once,
//!   onto capacity that is already Ready, with every safeguard of a notice. With no notice by the
//!   pool's learned lead time (its 90th percentile, within `--rebalance-standby-min` and
//!   `--rebalance-standby-max`), the nodes the boost added are given back as for an instance
//!   AWS took first, the recommended node keeps running, and its recommendation lapses: it is
//!   not answered again, though an interruption notice still is.
//! - `auto`: `replace` once the pool's conversion estimate is trusted (at least
//!   `--rebalance-auto-min-observations` resolved recommendations) and its upper bound reaches
//!   `--rebalance-auto-max-conversion`; `standby` below it, and while the pool is still being
//!   learnt (replacing would censor what it learns: the instance is gone before AWS could say).
//!   It stands by only while the group keeps room for another boost of the same size after this
//!   one (spares held for hours spend MaxSize and `--max-boost-per-group`); else it replaces,
//!   which frees the room within minutes.
//!
//! Only boosts whose instances carry nothing but a recommendation stand by: a notice, a rotation
//! or a scheduled event is answered as before.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::boost::BoostPlan;
use super::drain_batches::claim_replacements;
use super::identity;
use super::ledger_edit::LedgerEdit;
use super::ledger_edit::{Forgotten, Unneeded};
use super::model::{
    BoostLedger, GroupName, InstanceId, NodeName, Pool, RebalancePolicy, SignalKind, Snapshot, Standby, Timestamp,
};
use super::policy::Policy;
use super::pool_memory::{conversion, lead_time};
use super::signals::{AtRisk, AtRiskSet, CORDON_LEAD};

/// The share of followed recommendations whose lead time the standby waits out.
const LEAD_QUANTILE: f64 = 0.9;
/// Lead times a pool must have shown before its quantile sets a standby.
const LEAD_MIN_SAMPLES: usize = 3;

/// How a boost for rebalance recommendations answers them, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RebalanceChoice {
    /// The group.
    pub group: GroupName,
    /// The recommended instances the boost covers.
    pub instances: Vec<InstanceId>,
    /// The group's policy (its tag, else the flag).
    pub policy: RebalancePolicy,
    /// When the standby lapses; `None`: replaced as before.
    pub standby_until: Option<Timestamp>,
    /// Why.
    pub why: ChoiceWhy,
}

/// Why a rebalance recommendation is answered as it is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum ChoiceWhy {
    /// The group's policy is `replace` or `standby`.
    Configured,
    /// `auto`, and the pool's estimate rests on too few recommendations: it stands by to learn.
    Learning {
        /// Resolved recommendations so far (decayed, rounded down).
        observations: u32,
    },
    /// `auto`, and the pool's recommendations rarely become interruptions.
    LowConversion {
        /// The estimate's upper bound, in percent.
        high_percent: u32,
        /// Resolved recommendations it rests on.
        observations: u32,
    },
    /// `auto`, and the pool's recommendations often become interruptions.
    HighConversion {
        /// The estimate's upper bound, in percent.
        high_percent: u32,
        /// Resolved recommendations it rests on.
        observations: u32,
    },
    /// `auto`, but holding a spare would leave the group less room than this boost takes.
    NoRoom {
        /// Nodes the group could still be boosted by after this boost.
        room: u32,
    },
}

impl RebalanceChoice {
    /// `standby` or `replace`, for logs and metric labels.
    pub fn answer(&self) -> &'static str {
        if self.standby_until.is_some() {
            "standby"
        } else {
            "replace"
        }
    }
}

impl ChoiceWhy {
    /// The kebab-case name used in metric labels.
    pub fn as_str(&self) -> &'static str {
        match self {
            ChoiceWhy::Configured => "configured",
            ChoiceWhy::Learning { .. } => "learning",
            ChoiceWhy::LowConversion { .. } => "low-conversion",
            ChoiceWhy::HighConversion { .. } => "high-conversion",
            ChoiceWhy::NoRoom { .. } => "no-room",
        }
    }
}

impl std::fmt::Display for ChoiceWhy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ChoiceWhy::Configured => f.write_str("the group's rebalance policy"),
            ChoiceWhy::Learning { observations } => {
                write!(f, "the pool's conversion rests on {observations} recommendation(s): standing by to learn it")
            }
            ChoiceWhy::LowConversion { high_percent, observations } => write!(
                f,
                "at most {high_percent} % of the pool's recommendations became interruptions ({observations} seen)"
            ),
            ChoiceWhy::HighConversion { high_percent, observations } => write!(
                f,
                "up to {high_percent} % of the pool's recommendations became interruptions ({observations} seen)"
            ),
            ChoiceWhy::NoRoom { room } => {
                write!(f, "a spare would leave the group room for {room} more node(s), less than this boost takes")
            }
        }
    }
}

/// Whether `risk` is a rebalance recommendation and nothing else.
fn recommendation_only(risk: &AtRisk) -> bool {
    risk.deadline.is_none() && risk.kinds.iter().all(|k| k == SignalKind::Rebalance) && !risk.kinds.is_empty()
}

/// Decides, for every boost in `boosts` that covers only rebalance recommendations, whether it
/// stands by, and marks those that do.
pub(crate) fn choose_standby(
    snapshot: &Snapshot,
    ledger: &BoostLedger,
    at_risk: &AtRiskSet,
    boosts: &mut BoostPlan,
    policy: &Policy,
    now: Timestamp,
) -> Vec<RebalanceChoice> {
    let mut choices = Vec::new();
    for boost in boosts.boosts.iter_mut().filter(|b| b.record.ahead.is_none()) {
        let Some(risks) = at_risk.by_group.get(&boost.group) else { continue };
        let only_recommended = boost.record.instances.iter().all(|i| risks.get(i).is_some_and(recommendation_only));
        let Some(group) = snapshot.groups.get(&boost.group).filter(|_| only_recommended) else { continue };
        let group_policy = group.rebalance_policy.unwrap_or(policy.rebalance_policy);
        let pools: BTreeSet<Pool> =
            boost.record.instances.iter().filter_map(|i| snapshot.instances.get(i)?.pool.clone()).collect();
        let (stand_by, why) = match group_policy {
            RebalancePolicy::Replace => (false, ChoiceWhy::Configured),
            RebalancePolicy::Standby => (true, ChoiceWhy::Configured),
            RebalancePolicy::Auto => {
                let conversion = conversion(&snapshot.market, &group.name, &pools);
                let observations = conversion.observations.floor() as u32;
                let high_percent = (conversion.high * 100.0).round() as u32;
                let in_flight: u32 = ledger
                    .records
                    .iter()
                    .filter(|r| r.group == group.name && r.expired.is_none())
                    .map(|r| r.added)
                    .fold(0, u32::saturating_add);
                let added = boost.record.added;
                let room = group
                    .max
                    .saturating_sub(boost.to)
                    .min(policy.max_boost_per_group.saturating_sub(in_flight.saturating_add(added)));
                if room < added.max(1) {
                    (false, ChoiceWhy::NoRoom { room })
                } else if observations < policy.auto_min_observations {
                    (true, ChoiceWhy::Learning { observations })
                } else if high_percent < policy.auto_max_conversion_percent {
                    (true, ChoiceWhy::LowConversion { high_percent, observations })
                } else {
                    (false, ChoiceWhy::HighConversion { high_percent, observations })
                }
            }
        };
        let standby_until = stand_by.then(|| {
            let learned = lead_time(&snapshot.market, &group.name, &pools, LEAD_QUANTILE, LEAD_MIN_SAMPLES);
            now.plus(learned.unwrap_or(policy.standby_max).clamp(policy.standby_min, policy.standby_max))
        });
        if let Some(until) = standby_until {
            let readmit = boost
                .record
                .instances
                .iter()
                .filter(|i| risks.get(*i).is_some_and(|risk| cordon_is_the_recommendation_s(snapshot, risk)))
                .cloned()
                .collect();
            boost.record.standby = Some(Standby { until, returning: false, readmit });
        }
        choices.push(RebalanceChoice {
            group: group.name.clone(),
            instances: boost.record.instances.iter().cloned().collect(),
            policy: group_policy,
            standby_until,
            why,
        });
    }
    choices
}

/// Whether the cordon `risk`'s node may carry at its lapse is the recommendation's own: the
/// node is schedulable now (a cordon from here on answers the recommendation, as NTH does), or
/// its cordon was first seen no earlier than [`CORDON_LEAD`] before the recommendation. A cordon
/// the watch could not date (there when it began) is nobody's we know.
fn cordon_is_the_recommendation_s(snapshot: &Snapshot, risk: &AtRisk) -> bool {
    let node = snapshot.nodes.values().find(|n| n.instance.as_ref() == Some(&risk.instance));
    node.is_some_and(|n| {
        !n.cordoned || n.cordoned_since.is_some_and(|since| since.plus(CORDON_LEAD) >= risk.first_seen)
    })
}

/// What the lapses owe the nodes they leave cordoned.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Readmits {
    /// Nodes to make schedulable again, each with its instance: the recommendation's cordon,
    /// the node still runs the instance (EC2 agreeing, as for any write to a node), carries no
    /// notice and no drain of it is under way.
    pub uncordon: Vec<(NodeName, InstanceId)>,
    /// Nodes left cordoned at their lapse: the cordon was there before the recommendation, or
    /// cannot be dated, so it is someone else's (an operator's, `kubectl drain`'s).
    pub kept: Vec<NodeName>,
    /// Lapsed instances that no longer owe an uncordon: their node is schedulable or gone.
    pub settled: Vec<InstanceId>,
}

impl Readmits {
    /// Nothing owed, nothing kept.
    pub fn is_empty(&self) -> bool {
        self.uncordon.is_empty() && self.kept.is_empty() && self.settled.is_empty()
    }
}

/// The uncordons the ledger's lapses (and `edits`', this pass's) still owe, and the lapsing
/// nodes whose cordon stays.
pub(crate) fn readmit_lapsed(
    snapshot: &Snapshot,
    ledger: &BoostLedger,
    at_risk: &AtRiskSet,
    edits: &[LedgerEdit],
) -> Readmits {
    let mut owed: BTreeSet<&InstanceId> = ledger.to_readmit.iter().collect();
    let mut lapsing: BTreeSet<&InstanceId> = BTreeSet::new();
    for edit in edits {
        if let LedgerEdit::Lapse { instances, readmit, .. } = edit {
            owed.extend(readmit.intersection(instances));
            lapsing.extend(instances.difference(readmit));
        }
    }
    let mut readmits = Readmits::default();
    if owed.is_empty() && lapsing.is_empty() {
        return readmits;
    }
    let contested = identity::contested(snapshot);
    let node_of = |i: &InstanceId| snapshot.nodes.values().find(|n| n.instance.as_ref() == Some(i));
    let noticed = |i: &InstanceId| at_risk.by_group.values().any(|g| g.get(i).is_some_and(|r| r.deadline.is_some()));
    let drained = |i: &InstanceId, node: &NodeName| {
        ledger.returning.values().any(|r| r.node == *node)
            || ledger.records.iter().any(|r| r.giving_back.values().any(|g| g.instance == *i))
    };
    for instance in owed {
        match node_of(instance) {
            Some(n) if n.cordoned => {
                let safe = !noticed(instance)
                    && !drained(instance, &n.name)
                    && identity::verify(snapshot, &contested, n).is_ok();
                if safe {
                    readmits.uncordon.push((n.name.clone(), instance.clone()));
                }
            }
            _ => readmits.settled.push(instance.clone()),
        }
    }
    readmits.kept = lapsing.into_iter().filter_map(node_of).filter(|n| n.cordoned).map(|n| n.name.clone()).collect();
    readmits
}

/// The edits that end the standbys whose window is over: one with no notice in any of its
/// instances starts giving its nodes back, and once each instance is settled it closes and its
/// recommendations lapse; in one where some were noticed, the others lapse now and the rest is
/// an ordinary boost. Lapsed instances whose node is gone are forgotten.
pub(crate) fn lapse_quiet_standbys(
    snapshot: &Snapshot,
    open: &BoostLedger,
    at_risk: &AtRiskSet,
    now: Timestamp,
) -> Vec<LedgerEdit> {
    let mut edits = Vec::new();
    if !open.lapsed.is_empty() {
        let live = snapshot.live_instances();
        let gone: Vec<InstanceId> = open.lapsed.keys().filter(|i| !live.contains(i)).cloned().collect();
        if !gone.is_empty() {
            edits.push(LedgerEdit::Forget(Forgotten::Lapsed(gone)));
        }
    }
    let over = open.windows_over(now, |r| r.standby.as_ref().map(|s| s.until));
    if over.is_empty() {
        return edits;
    }
    let noticed: BTreeSet<&InstanceId> = at_risk
        .by_group
        .values()
        .flat_map(|g| g.values())
        .filter(|r| r.deadline.is_some())
        .map(|r| &r.instance)
        .collect();
    let claims = claim_replacements(snapshot, open, at_risk);
    for k in over {
        let record = &open.records[k];
        let returning = record.standby.as_ref().is_some_and(|s| s.returning);
        let quiet: BTreeSet<InstanceId> =
            record.instances.iter().filter(|i| !noticed.contains(i) && record.unaccounted(i)).cloned().collect();
        let readmit = record.standby.as_ref().map(|s| s.readmit.clone()).unwrap_or_default();
        if !returning && quiet.len() == record.instances.len() {
            edits.push(LedgerEdit::ReturnUnneeded(record.id(), Unneeded::Standby));
        } else if !returning {
            let readmit = readmit.intersection(&quiet).cloned().collect();
            edits.push(LedgerEdit::Lapse { id: record.id(), instances: quiet, at: now, readmit });
        } else if record.giving_back.is_empty() && record.instances.iter().all(|i| record.settled.contains(i)) {
            edits.push(LedgerEdit::Close { id: record.id(), spent: claims[k].nodes.clone() });
            let readmit = readmit.intersection(&record.instances).cloned().collect();
            edits.push(LedgerEdit::Lapse { id: record.id(), instances: record.instances.clone(), at: now, readmit });
        }
    }
    edits
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::core::draining::plan_draining;
    use crate::core::model::PoolHistory;
    use crate::core::model::{BoostRecord, Group, Node, NodeName, Signal};
    use crate::core::scaling::{plan_scaling, Acting, ScalingPlan};
    use crate::core::{DrainState, DrainWait, DropReason, GiveBackHow};

    const NOW: Timestamp = Timestamp::from_millis(60_000);

    fn pool() -> Pool {
        Pool { instance_type: "m5.large".into(), zone: "us-east-1a".into() }
    }

    /// Group `a` (4 of at most 20): n1 carries a rebalance recommendation seen at 50 s; two pods
    /// on each node, all in m5.large/us-east-1a.
    fn recommended() -> Snapshot {
        let mut s = Snapshot::default()
            .with_group(Group::test("a").desired(4).max(20))
            .with_signal(Signal::rebalance("n1", 50_000));
        for name in ["n1", "n2", "n3", "n4"] {
            s = s.with_node(Node::test(name, "a").with_pods(2, 500, 2 << 30));
            s.instances.get_mut(&format!("i-{name}").as_str().into()).unwrap().pool = Some(pool());
        }
        cordon(&mut s, "n1", Some(50_000));
        s
    }

    /// Cordons `node`, as the watch saw it: at `since`, or before the watch began (`None`).
    fn cordon(s: &mut Snapshot, node: &str, since: Option<i64>) {
        let n = s.nodes.get_mut(&NodeName::from(node)).unwrap();
        n.cordoned = true;
        n.cordoned_since = since.map(Timestamp::from_millis);
    }

    fn with(policy: RebalancePolicy) -> Policy {
        Policy { rebalance_policy: policy, ..Policy::default() }
    }

    /// The pass's boost for `a`, saved as its write applied, with its replacement r1 Ready.
    fn boosted(mut s: Snapshot, p: &ScalingPlan) -> Snapshot {
        let boost = &p.boosts.boosts[0];
        s.ledger.record(BoostRecord { raising_to: None, ..boost.record.clone() });
        let group = s.groups.get_mut(&GroupName::from("a")).unwrap();
        group.desired = boost.to;
        group.members = Some(["i-n1", "i-n2", "i-n3", "i-n4", "i-r1"].map(InstanceId::from).into());
        s.with_node(Node::test("r1", "a").created_at(NOW.as_millis() + 1_000))
    }

    fn drains(s: &Snapshot, at: Timestamp) -> crate::core::DrainingPlan {
        plan_draining(s, &BTreeSet::new(), &DrainState::default(), &Policy::default(), at)
    }

    #[test]
    fn a_standby_keeps_its_spare_ready_and_drains_only_on_the_interruption_notice() {
        let s = recommended();
        let p = plan_scaling(&s, &with(RebalancePolicy::Standby), NOW, Acting::Leader);
        let until = NOW.plus(Policy::default().standby_max);
        let readmit = ["i-n1"].map(InstanceId::from).into();
        assert_eq!(p.boosts.boosts[0].record.standby, Some(Standby { until, returning: false, readmit }));
        assert_eq!(p.rebalance_choices[0].answer(), "standby");
        assert_eq!(p.rebalance_choices[0].why, ChoiceWhy::Configured);

        let mut s = boosted(s, &p);
        let later = NOW.plus(Duration::from_secs(600));
        let d = drains(&s, later);
        assert!(d.drains.batches.is_empty(), "{d:?}");
        assert!(d
            .drains
            .waiting
            .iter()
            .any(|w| matches!(&w.reason, DrainWait::Standby { until: u, .. } if *u == until)));
        assert_eq!(d.drains.claims[0].nodes, vec![NodeName::from("r1")], "the spare is claimed, so protected");

        // The notice comes: the node drains at once onto the spare, giving the boost back.
        s = s.with_signal(Signal::interruption("n1", later.as_millis()));
        s.spot_interrupted.insert("i-n1".into());
        let d = drains(&s, later);
        let target = &d.drains.batches[0].nodes[0];
        assert_eq!((target.node.as_str(), target.decrement), ("n1", true), "{d:?}");
    }

    #[test]
    fn a_quiet_standby_gives_its_spare_back_and_its_recommendation_lapses_but_a_notice_is_still_answered() {
        let s = recommended();
        let policy = with(RebalancePolicy::Standby);
        let p = plan_scaling(&s, &policy, NOW, Acting::Leader);
        let mut s = boosted(s, &p);
        let until = NOW.plus(policy.standby_max);
        let before = until.minus(Duration::from_secs(1));
        assert!(plan_scaling(&s, &policy, before, Acting::Leader).closes.is_empty());
        let p = plan_scaling(&s, &policy, until, Acting::Leader);
        assert!(matches!(p.closes[..], [LedgerEdit::ReturnUnneeded(_, Unneeded::Standby)]), "{:?}", p.closes);
        p.closes.iter().for_each(|e| _ = e.apply(&mut s.ledger));

        // The spare goes back, never the recommended node itself.
        let p = plan_scaling(&s, &policy, until, Acting::Leader);
        let chosen: Vec<_> = p.give_backs.iter().map(|g| g.how.clone()).collect();
        assert!(matches!(&chosen[..], [GiveBackHow::Drain(n)] if n.node == Some("r1".into())), "{chosen:?}");
        s.ledger.records[0].settled.insert("i-n1".into());
        let p = plan_scaling(&s, &policy, until, Acting::Leader);
        assert!(matches!(p.closes[..], [LedgerEdit::Close { .. }, LedgerEdit::Lapse { .. }]), "{:?}", p.closes);
        let uncordon = vec![(NodeName::from("n1"), InstanceId::from("i-n1"))];
        assert_eq!(p.readmit.uncordon, uncordon, "NTH's cordon is lifted: the node keeps serving");
        assert!(p.boosts.boosts.is_empty(), "the pass that lapses it never buys its spare again: {p:?}");
        p.closes.iter().for_each(|e| _ = e.apply(&mut s.ledger));
        assert!(s.ledger.records.is_empty() && s.ledger.lapsed.contains_key(&InstanceId::from("i-n1")));

        // The recommendation is not answered again; an interruption notice is, afresh.
        let p = plan_scaling(&s, &policy, until, Acting::Leader);
        assert!(p.boosts.boosts.is_empty());
        assert!(p.at_risk.dropped.iter().any(|d| d.reason == DropReason::StandbyLapsed), "{:?}", p.at_risk.dropped);
        s = s.with_signal(Signal::interruption("n1", until.as_millis()));
        s.spot_interrupted.insert("i-n1".into());
        let p = plan_scaling(&s, &policy, until, Acting::Leader);
        assert_eq!(p.boosts.boosts.len(), 1, "{p:?}");
        assert_eq!(p.boosts.boosts[0].record.standby, None, "a notice is never stood by");

        // Once its node is gone, the lapse is forgotten.
        s.nodes.remove(&NodeName::from("n1"));
        let p = plan_scaling(&s, &policy, until, Acting::Leader);
        assert!(p.closes.contains(&LedgerEdit::Forget(Forgotten::Lapsed(vec!["i-n1".into()]))), "{:?}", p.closes);
    }

    #[test]
    fn a_standby_with_a_notice_in_some_instances_lets_the_quiet_ones_lapse_and_is_an_ordinary_boost() {
        let mut s = recommended().with_signal(Signal::rebalance("n2", 50_000));
        cordon(&mut s, "n2", Some(50_000));
        let policy = with(RebalancePolicy::Standby);
        let p = plan_scaling(&s, &policy, NOW, Acting::Leader);
        let mut s = boosted(s, &p);
        s = s.with_signal(Signal::interruption("n2", 70_000));
        s.spot_interrupted.insert("i-n2".into());
        let p = plan_scaling(&s, &policy, NOW.plus(policy.standby_max), Acting::Leader);
        let record = &p.ledger.records[0];
        assert_eq!(record.instances, ["i-n2"].map(InstanceId::from).into());
        assert_eq!(record.standby, None);
        assert!(p.ledger.lapsed.contains_key(&InstanceId::from("i-n1")));
        let again: Vec<_> = p.boosts.boosts.iter().flat_map(|b| &b.record.instances).collect();
        assert!(
            !again.contains(&&InstanceId::from("i-n1")),
            "the lapse uncovers n1, never to boost it again: {again:?}"
        );
        assert!(
            p.at_risk
                .dropped
                .iter()
                .any(|d| d.instance == InstanceId::from("i-n1") && d.reason == DropReason::StandbyLapsed),
            "{:?}",
            p.at_risk.dropped
        );
    }

    /// Plays a standby over n1 to n4's recommendations to its lapse: the window ends, the spare
    /// goes back, every instance settles. Returns the lapsing pass's plan and the snapshot it
    /// was planned on.
    fn lapse(s: Snapshot, nodes: &[&str]) -> (ScalingPlan, Snapshot) {
        let policy = with(RebalancePolicy::Standby);
        let p = plan_scaling(&s, &policy, NOW, Acting::Leader);
        let mut s = boosted(s, &p);
        let until = NOW.plus(policy.standby_max);
        let p = plan_scaling(&s, &policy, until, Acting::Leader);
        p.closes.iter().for_each(|e| _ = e.apply(&mut s.ledger));
        for n in nodes {
            s.ledger.records[0].settled.insert(format!("i-{n}").as_str().into());
        }
        (plan_scaling(&s, &policy, until, Acting::Leader), s)
    }

    #[test]
    fn a_lapse_lifts_only_the_recommendation_s_own_cordon_and_tells_of_the_others() {
        // n1: NTH's cordon, as it came. n2: an operator's, an hour before. n3: cordoned before the
        // daemon's watch began, so undated. n4: schedulable when the standby began, cordoned
        // after (by NTH, late).
        let mut s = recommended();
        for n in ["n2", "n3", "n4"] {
            s = s.with_signal(Signal::rebalance(n, 50_000));
        }
        cordon(&mut s, "n2", Some(50_000 - 3_600_000));
        cordon(&mut s, "n3", None);
        let standby = plan_scaling(&s, &with(RebalancePolicy::Standby), NOW, Acting::Leader);
        let readmit: BTreeSet<InstanceId> = ["i-n1", "i-n4"].map(InstanceId::from).into();
        assert_eq!(standby.boosts.boosts[0].record.standby.as_ref().map(|s| &s.readmit), Some(&readmit));
        cordon(&mut s, "n4", Some(NOW.as_millis() + 5_000));

        let (p, mut s) = lapse(s, &["n1", "n2", "n3", "n4"]);
        let uncordon: Vec<_> = p.readmit.uncordon.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(uncordon, ["n1", "n4"]);
        let kept: Vec<_> = p.readmit.kept.iter().map(NodeName::as_str).collect();
        assert_eq!(kept, ["n2", "n3"], "someone else's cordon stays, and is told");
        p.closes.iter().for_each(|e| _ = e.apply(&mut s.ledger));
        assert_eq!(s.ledger.to_readmit, readmit, "owed until made");

        // The uncordon of n4 failed (or the daemon restarted before it): the next pass tries again,
        // and tells of nothing twice.
        let policy = with(RebalancePolicy::Standby);
        let later = NOW.plus(policy.standby_max).plus(Duration::from_secs(5));
        s.nodes.get_mut(&NodeName::from("n1")).unwrap().cordoned = false;
        let p = plan_scaling(&s, &policy, later, Acting::Leader);
        assert_eq!(p.readmit.uncordon, vec![(NodeName::from("n4"), InstanceId::from("i-n4"))]);
        assert!(p.readmit.kept.is_empty());
        assert!(
            p.closes.contains(&LedgerEdit::Forget(Forgotten::Uncordons(vec!["i-n1".into()]))),
            "n1 serves: nothing owed"
        );

        // n4 gets a notice of its own: it is drained, not readmitted.
        s = s.with_signal(Signal::interruption("n4", later.as_millis()));
        s.spot_interrupted.insert("i-n4".into());
        let p = plan_scaling(&s, &policy, later, Acting::Leader);
        assert!(p.readmit.uncordon.is_empty(), "{:?}", p.readmit);
    }

    #[test]
    fn a_lapsed_node_chosen_to_give_capacity_back_is_never_uncordoned_under_its_drain() {
        let (p, mut s) = lapse(recommended(), &["n1"]);
        assert_eq!(p.readmit.uncordon.len(), 1);
        p.closes.iter().for_each(|e| _ = e.apply(&mut s.ledger));
        // Another boost gives back through n1 (AWS took i-n2 first).
        let mut record = BoostRecord::test("a", &["i-n2"], 1, NOW.as_millis());
        record.giving_back.insert(
            "i-n2".into(),
            crate::core::model::GiveBackNode { node: Some("n1".into()), instance: "i-n1".into(), chosen_at: NOW },
        );
        s.ledger.record(record);
        let policy = with(RebalancePolicy::Standby);
        let p = plan_scaling(&s, &policy, NOW.plus(policy.standby_max), Acting::Leader);
        assert!(p.readmit.uncordon.is_empty(), "{:?}", p.readmit);
    }

    fn market(converted: f64, lapsed: f64, leads: &[u64]) -> Vec<PoolHistory> {
        vec![PoolHistory {
            group: "a".into(),
            pool: pool(),
            converted,
            lapsed,
            lead_seconds: leads.to_vec(),
            interruptions: 0.0,
            failed_launches: 0.0,
        }]
    }

    fn auto_choice(s: &Snapshot) -> RebalanceChoice {
        plan_scaling(s, &with(RebalancePolicy::Auto), NOW, Acting::Leader).rebalance_choices.remove(0)
    }

    #[test]
    fn auto_learns_by_standing_by_then_follows_the_pool_s_conversion() {
        let mut s = recommended();
        let choice = auto_choice(&s);
        assert_eq!((choice.answer(), choice.why), ("standby", ChoiceWhy::Learning { observations: 0 }));

        s.market = market(1.0, 19.0, &[300, 900, 1500]);
        let choice = auto_choice(&s);
        assert!(matches!(choice.why, ChoiceWhy::LowConversion { observations: 20, .. }), "{choice:?}");
        assert_eq!(choice.standby_until, Some(NOW.plus(Duration::from_secs(1500))), "the learned lead time's p90");

        s.market = market(15.0, 5.0, &[]);
        let choice = auto_choice(&s);
        assert!(matches!(choice.why, ChoiceWhy::HighConversion { observations: 20, .. }), "{choice:?}");
        assert_eq!(choice.standby_until, None);

        // A group whose spare would leave no room for the next boost replaces.
        s.market = market(1.0, 19.0, &[]);
        s.groups.get_mut(&GroupName::from("a")).unwrap().max = 5;
        let choice = auto_choice(&s);
        assert_eq!((choice.answer(), choice.why), ("replace", ChoiceWhy::NoRoom { room: 0 }));
    }

    #[test]
    fn the_group_s_tag_wins_over_the_flag_and_notices_and_rotations_are_never_stood_by() {
        let mut s = recommended();
        s.groups.get_mut(&GroupName::from("a")).unwrap().rebalance_policy = Some(RebalancePolicy::Replace);
        let p = plan_scaling(&s, &with(RebalancePolicy::Standby), NOW, Acting::Leader);
        assert_eq!(
            (p.boosts.boosts[0].record.standby.clone(), p.rebalance_choices[0].policy),
            (None, RebalancePolicy::Replace)
        );

        let mut s = recommended().with_signal(Signal::interruption("n1", 55_000));
        s.spot_interrupted.insert("i-n1".into());
        let p = plan_scaling(&s, &with(RebalancePolicy::Standby), NOW, Acting::Leader);
        assert!(p.rebalance_choices.is_empty() && p.boosts.boosts[0].record.standby.is_none());
    }
}
