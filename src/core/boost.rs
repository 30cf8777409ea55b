//! Boost planning: for each group, the replacement nodes its not-yet-boosted at-risk instances
//! call for, as a new desired capacity with a reason.
//!
//! Target = max(live desired, CA's cloudProviderTarget) + needed (+ `extra_nodes`), never below
//! live desired. What may be added is the least of three rooms: MaxSize, the per-group boost
//! budget, and the step CA tolerates before it calls the group Unhealthy. When the room does not
//! fit every instance, the oldest-signalled instances whose replacements fit are boosted now and
//! the rest wait for the next plan.
//!
//! When a group cannot be boosted at all (at MaxSize, budget spent, CA in scale-up backoff), its
//! at-risk instances are **held**: not recorded in the ledger, not drained by the booster, and
//! retried on every plan. Their nodes stay as NTH left them (cordoned) and keep serving their pods
//! until the instance is actually interrupted, which beats evicting pods into a group that has no
//! room for them.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::fast_hash::FastMap;
use super::model::{
    BoostLedger, BoostRecord, Group, GroupName, InstanceId, Node, Pool, Resources, Snapshot, Timestamp,
};
use super::policy::{Policy, SizingMode};
use super::signals::{AtRisk, AtRiskNodes, AtRiskSet};
use super::sizing::nodes_for_pods;

/// One boost to execute: raise `group` from `from` to `to`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Boost {
    /// The group.
    pub group: GroupName,
    /// Live desired capacity the plan started from.
    pub from: u32,
    /// Desired capacity to set (equal to `from` when no node is needed: nothing to write).
    pub to: u32,
    /// Why, and how far it got.
    pub reason: BoostReason,
    /// The ledger entry to persist with it.
    pub record: BoostRecord,
}

impl Boost {
    /// Whether executing this boost changes desired capacity.
    pub fn writes(&self) -> bool {
        self.to > self.from
    }
}

/// Why a boost has the size it has.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum BoostReason {
    /// Every at-risk instance of the group is covered.
    ReplaceAtRisk {
        /// Replacement nodes sized for them.
        needed: u32,
        /// The at-risk nodes they replace.
        #[serde(default)]
        at_risk: u32,
    },
    /// Only some instances fit; the rest are held for `limit`.
    Partial {
        /// Replacement nodes sized for the covered instances.
        needed: u32,
        /// The at-risk nodes covered (the oldest signalled).
        #[serde(default)]
        at_risk: u32,
        /// What stopped it.
        limit: HoldReason,
    },
    /// Ahead for nodes with no notice of their own, in capacity pools where EC2 confirmed an
    /// interruption (see [`super::pool_mates`]).
    AheadOfPool {
        /// New nodes sized for their pods.
        needed: u32,
        /// The pool-mates covered.
        mates: u32,
        /// The pools.
        pools: BTreeSet<Pool>,
    },
}

/// Why at-risk instances are not boosted (yet).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "kind", content = "detail")]
pub enum HoldReason {
    /// Desired (or CA's target) is already at MaxSize.
    AtMaxSize,
    /// The group's replacements in flight already reach `--max-boost-per-group`.
    BoostBudgetSpent,
    /// A bigger step would make CA call the group Unhealthy and stop scaling it.
    CaUnreadyLimit,
    /// CA reports the group's scale-up in backoff (its error code): new capacity is not coming.
    CaBackoff(String),
    /// The ASG has Capacity Rebalance on and replaces these instances itself
    /// (`--boost-capacity-rebalance-groups` opts in).
    CapacityRebalance,
}

impl std::fmt::Display for BoostReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BoostReason::ReplaceAtRisk { needed, at_risk } => {
                write!(f, "{} for {}", count(*needed, "new node"), count(*at_risk, "at-risk node"))
            }
            BoostReason::Partial { needed, at_risk, limit } => write!(
                f,
                "{} for the {} signalled first; the rest wait: {limit}",
                count(*needed, "new node"),
                count(*at_risk, "at-risk node")
            ),
            BoostReason::AheadOfPool { needed, mates, pools } => {
                let pools: Vec<String> = pools.iter().map(ToString::to_string).collect();
                write!(
                    f,
                    "{} ahead for {} in {}, where EC2 confirmed a spot interruption; nothing is drained on this \
                     risk alone",
                    count(*needed, "new node"),
                    count(*mates, "pool-mate node"),
                    pools.join(", ")
                )
            }
        }
    }
}

/// `1 new node`, `2 new nodes`.
fn count(n: u32, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

impl std::fmt::Display for HoldReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HoldReason::AtMaxSize => f.write_str("the group is at MaxSize"),
            HoldReason::BoostBudgetSpent => f.write_str("--max-boost-per-group replacements are already in flight"),
            HoldReason::CaUnreadyLimit => {
                f.write_str("a bigger step would make Cluster Autoscaler call the group Unhealthy")
            }
            HoldReason::CaBackoff(code) => {
                write!(f, "Cluster Autoscaler reports the group in scale-up backoff ({code})")
            }
            HoldReason::CapacityRebalance => f.write_str(
                "the ASG has Capacity Rebalance on and replaces them itself (--boost-capacity-rebalance-groups)",
            ),
        }
    }
}

/// At-risk instances of a group that were not boosted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Held {
    /// The group.
    pub group: GroupName,
    /// The waiting instances.
    pub instances: Vec<InstanceId>,
    /// Why.
    pub reason: HoldReason,
}

/// What boost planning decided.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BoostPlan {
    /// Boosts to execute, one per group at most.
    pub boosts: Vec<Boost>,
    /// Instances waiting, with the reason.
    pub held: Vec<Held>,
}

/// What boost planning needs per group, gathered in one pass over nodes and ledger.
#[derive(Default, Clone, Copy)]
pub(crate) struct GroupFacts {
    /// Ready nodes CA counts (not being deleted by CA): CA's own `registered.ready` when its
    /// status gives it, else the Ready nodes of the group's members (every node is resolved
    /// against the group's own instance list, not only the signalled ones).
    ready: u32,
    /// Replacement nodes the group's open boosts still count against its budget.
    in_flight: u32,
    /// The nodes the group's boosts added (their writes applied) and have not given back yet, a
    /// return whose termination is not answered yet counted as not given back: its decrement is
    /// not in the desired capacity the plan starts from (the adapter never lets one land between
    /// a raise's guard read and its write). The desired capacity without them is the size a new
    /// boost must never be given back below.
    outstanding: u32,
    /// The lowest size before any of the group's open boosts: a new boost's is never above it, so
    /// however the earlier ones close, the floor the give-backs keep stays the group's baseline.
    floor: Option<u32>,
}

/// Plans the boosts for every group with at-risk instances no boost in `ledger` covers yet.
pub(crate) fn plan_boosts(
    snapshot: &Snapshot,
    ledger: &BoostLedger,
    (at_risk, nodes): (&AtRiskSet, &AtRiskNodes<'_>),
    policy: &Policy,
    now: Timestamp,
) -> BoostPlan {
    let covered = ledger.index();
    let facts = group_facts(snapshot, ledger);
    let mut plan = BoostPlan::default();
    for (group_name, instances) in &at_risk.by_group {
        let Some(group) = snapshot.groups.get(group_name) else {
            continue;
        };
        // Each with its node, so a prefix of the instances is a prefix of their nodes.
        let mut pending: Vec<(&AtRisk, Option<&Node>)> =
            instances.values().filter(|r| !covered.contains_key(&r.instance)).map(|r| (r, nodes.of(r))).collect();
        if pending.is_empty() {
            continue;
        }
        pending.sort_by(|(a, _), (b, _)| a.first_seen.cmp(&b.first_seen).then_with(|| a.instance.cmp(&b.instance)));
        let surplus = |r: &AtRisk| ledger.returns_surplus(&r.instance);
        plan_group(group, facts_of(&facts, group), &pending, &surplus, policy, now, &mut plan);
    }
    plan
}

/// Per group: its Ready nodes and the replacements its open boosts count against its budget.
pub(crate) fn group_facts<'s>(snapshot: &'s Snapshot, ledger: &'s BoostLedger) -> FastMap<&'s GroupName, GroupFacts> {
    let mut facts: FastMap<&GroupName, GroupFacts> = FastMap::default();
    for node in snapshot.nodes.values() {
        if let (Some(group), true, false) = (&node.group, node.ready, node.deleting_by_ca) {
            let f = facts.entry(group).or_default();
            f.ready = f.ready.saturating_add(1);
        }
    }
    for record in &ledger.records {
        let f = facts.entry(&record.group).or_default();
        f.floor = Some(f.floor.map_or(record.before, |floor| floor.min(record.before)));
        if record.raising_to.is_none() {
            let in_flight = u32::try_from(record.returning.len()).unwrap_or(u32::MAX);
            let applied = record.returned.saturating_sub(in_flight);
            f.outstanding = f.outstanding.saturating_add(record.added.saturating_sub(applied));
        }
    }
    for record in ledger.records.iter().filter(|r| r.expired.is_none()) {
        let f = facts.entry(&record.group).or_default();
        f.in_flight = f.in_flight.saturating_add(record.added);
        // Nodes moved to a fallback spend that group's budget.
        for part in record.moved.iter().filter(|p| p.asked()) {
            let f = facts.entry(&part.group).or_default();
            f.in_flight = f.in_flight.saturating_add(part.added);
        }
    }
    facts
}

/// `group`'s facts, with the Ready count CA's own health check uses when its status gives it.
fn facts_of(facts: &FastMap<&GroupName, GroupFacts>, group: &Group) -> GroupFacts {
    let mut f = facts.get(&group.name).copied().unwrap_or_default();
    if let Some(ready) = group.ca.as_ref().and_then(|ca| ca.ready) {
        // What CA's health check counts is what decides whether CA calls the group Unhealthy.
        f.ready = ready;
    }
    f
}

/// A boost of `group` ahead for `mates` (nodes with no notice of their own), sized for their pods
/// like one for at-risk nodes and within the same rooms, and within `budget` more nodes; no
/// extra nodes, and nothing held: the mates that do not fit are simply not boosted ahead.
pub(crate) fn plan_ahead(
    group: &Group,
    facts: &FastMap<&GroupName, GroupFacts>,
    mates: &[(&AtRisk, Option<&Node>)],
    budget: u32,
    policy: &Policy,
    now: Timestamp,
) -> Option<Boost> {
    let f = facts_of(facts, group);
    let within = Policy {
        max_boost_per_group: policy.max_boost_per_group.min(f.in_flight.saturating_add(budget)),
        extra_nodes: 0,
        ..policy.clone()
    };
    let mut scratch = BoostPlan::default();
    plan_group(group, f, mates, &|_| false, &within, now, &mut scratch);
    scratch.boosts.pop().filter(Boost::writes)
}

/// An at-risk instance no boost covers yet, with its node where it has one.
type PendingRisk<'a> = (&'a AtRisk, Option<&'a Node>);

/// The boost of `group` for its `pending` at-risk instances, the longest prefix that fits its
/// rooms; a `surplus` one (a fallback node whose group already relaunched its capacity) needs no
/// node.
fn plan_group(
    group: &Group,
    facts: GroupFacts,
    pending: &[PendingRisk<'_>],
    surplus: &dyn Fn(&AtRisk) -> bool,
    policy: &Policy,
    now: Timestamp,
    plan: &mut BoostPlan,
) {
    let hold = |plan: &mut BoostPlan, from: usize, reason: HoldReason| {
        plan.held.push(Held {
            group: group.name.clone(),
            instances: pending[from..].iter().map(|(r, _)| r.instance.clone()).collect(),
            reason,
        });
    };
    if let Some(code) = group.ca.as_ref().and_then(|ca| ca.backoff.clone()) {
        return hold(plan, 0, HoldReason::CaBackoff(code));
    }
    if group.capacity_rebalance && !policy.boost_capacity_rebalance_groups {
        return hold(plan, 0, HoldReason::CapacityRebalance);
    }

    let base = group.desired.max(group.ca.as_ref().map_or(0, |ca| ca.cloud_provider_target));
    let rooms = [
        (group.max.saturating_sub(base), HoldReason::AtMaxSize),
        (policy.max_boost_per_group.saturating_sub(facts.in_flight), HoldReason::BoostBudgetSpent),
        (ca_tolerated_target(facts.ready, policy).saturating_sub(base), HoldReason::CaUnreadyLimit),
    ];
    let (room, binding) = rooms.iter().min_by_key(|(room, _)| *room).cloned().expect("three rooms");

    let nodes = |k: usize| pending[..k].iter().filter_map(|(_, n)| *n);
    let capacity = group.node_allocatable.unwrap_or_else(|| smallest_allocatable(nodes(pending.len())));
    let free = |k: usize| pending[..k].iter().filter(|(r, _)| surplus(r)).count();
    let needed_for = |k: usize| -> u32 {
        match policy.sizing {
            SizingMode::Count => (k - free(k)) as u32,
            SizingMode::Pods => {
                // A fallback node going back is one node here, whatever its pods: its capacity
                // is what moves.
                let returning = |r: &AtRisk| r.kinds.contains(&crate::core::SignalKind::BackToSpot);
                let others = || pending[..k].iter().filter(|(r, _)| !returning(r));
                let pods = others().filter_map(|(_, n)| *n).flat_map(|n| n.pods.iter());
                let packed = nodes_for_pods(pods, capacity, policy);
                // A node NTH drains itself counts as one at least.
                let drained_by_nth =
                    others().filter(|(r, _)| r.kinds.iter().any(|kind| kind.drained_by_nth())).count() as u32;
                let going_back = (k - others().count() - free(k)) as u32;
                packed.max(drained_by_nth).saturating_add(going_back)
            }
        }
    };

    // The whole set usually fits; otherwise the longest prefix that does, found by bisection
    // (needed grows with the prefix; only prefixes seen to fit are ever taken).
    let (mut covered, mut needed) = (pending.len(), needed_for(pending.len()));
    if needed > room {
        let (mut fits, mut too_big) = ((0, 0), pending.len());
        while too_big - fits.0 > 1 {
            let mid = (fits.0 + too_big) / 2;
            let n = needed_for(mid);
            if n <= room {
                fits = (mid, n);
            } else {
                too_big = mid;
            }
        }
        (covered, needed) = fits;
    }
    if covered == 0 {
        return hold(plan, 0, binding);
    }
    // Surplus returns alone raise nothing, extra nodes included.
    let extra = if free(covered) == covered { 0 } else { policy.extra_nodes.min(room.saturating_sub(needed)) };
    let added = needed.saturating_add(extra);
    let reason = if covered == pending.len() {
        BoostReason::ReplaceAtRisk { needed, at_risk: u32::try_from(covered).unwrap_or(u32::MAX) }
    } else {
        hold(plan, covered, binding.clone());
        BoostReason::Partial { needed, at_risk: u32::try_from(covered).unwrap_or(u32::MAX), limit: binding }
    };
    let to = if added > 0 { base.saturating_add(added) } else { group.desired };
    plan.boosts.push(Boost {
        group: group.name.clone(),
        from: group.desired,
        to,
        reason,
        record: BoostRecord {
            group: group.name.clone(),
            instances: pending[..covered].iter().map(|(r, _)| r.instance.clone()).collect::<BTreeSet<_>>(),
            added,
            returned: 0,
            at: now,
            // An older boost of the group may close first: a size that still counts its nodes
            // would keep this one from giving back all of its own.
            before: facts.floor.unwrap_or(u32::MAX).min(group.desired.saturating_sub(facts.outstanding)),
            settled: BTreeSet::new(),
            kept: Default::default(),
            expired: None,
            giving_back: Default::default(),
            raising_to: (to > group.desired).then_some(to),
            returning: Default::default(),
            moved: Vec::new(),
            ahead: None,
            standby: None,
        },
    });
}

/// The largest desired capacity whose not-yet-Ready share CA still calls healthy: the group is
/// Unhealthy once more than `ok_total_unready_count` **and** more than
/// `max_total_unready_percentage` % of its target are missing from Ready.
fn ca_tolerated_target(ready: u32, policy: &Policy) -> u32 {
    let ready = u64::from(ready);
    let ok = u64::from(policy.ca_ok_total_unready_count);
    let pct = u64::from(policy.ca_max_total_unready_percentage);
    if pct >= 100 {
        return u32::MAX;
    }
    // target − ready ≤ target·pct/100  ⇔  target ≤ ready·100/(100 − pct)
    let by_percentage = ready * 100 / (100 - pct);
    u32::try_from((ready + ok).max(by_percentage)).unwrap_or(u32::MAX)
}

fn smallest_allocatable<'n>(nodes: impl Iterator<Item = &'n Node>) -> Resources {
    nodes
        .map(|n| n.allocatable)
        .reduce(|a, b| Resources::new(a.cpu_millis.min(b.cpu_millis), a.memory_bytes.min(b.memory_bytes)))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::ledger_edit::LedgerEdit;
    use crate::core::model::{Node, Signal};
    use crate::core::signals::fold_signals_with_nodes;
    use crate::core::Pending;

    const GI: u64 = 1 << 30;
    const NOW: Timestamp = Timestamp::from_millis(60_000);

    fn plan(s: &Snapshot, policy: &Policy) -> BoostPlan {
        let (at_risk, nodes) = fold_signals_with_nodes(s, policy, NOW);
        plan_boosts(s, &s.ledger, (&at_risk, &nodes), policy, NOW)
    }

    /// A group of `size` Ready nodes n1..n<size>, each with `pods_each` 500m/1Gi pods.
    fn cluster(group: Group, size: usize, pods_each: usize) -> Snapshot {
        let mut s = Snapshot::default().with_group(group.clone());
        for i in 1..=size {
            s = s.with_node(Node::test(&format!("n{i}"), group.name.as_str()).with_pods(pods_each, 500, GI));
        }
        s
    }

    fn count_mode() -> Policy {
        Policy { sizing: SizingMode::Count, ..Policy::default() }
    }

    #[test]
    fn count_mode_adds_one_node_per_at_risk_instance() {
        let s = cluster(Group::test("a").desired(4), 4, 0)
            .with_signal(Signal::rebalance("n1", 0))
            .with_signal(Signal::rebalance("n2", 0));
        let p = plan(&s, &count_mode());
        assert_eq!(p.boosts.len(), 1);
        assert_eq!((p.boosts[0].from, p.boosts[0].to), (4, 6));
        assert_eq!(p.boosts[0].reason, BoostReason::ReplaceAtRisk { needed: 2, at_risk: 2 });
        assert_eq!(p.boosts[0].reason.to_string(), "2 new nodes for 2 at-risk nodes");
        assert_eq!(p.boosts[0].record.instances.len(), 2);
    }

    #[test]
    fn a_boost_decided_while_another_is_open_gives_back_down_to_the_size_before_both() {
        // Boosted 50 → 51 for n1; n2's notice comes while that boost is open and applied.
        let mut s = cluster(Group::test("a").desired(51).max(100), 50, 0)
            .with_signal(Signal::rebalance("n1", 0))
            .with_signal(Signal::rebalance("n2", 0));
        s.ledger.record(BoostRecord { before: 50, ..BoostRecord::test("a", &["i-n1"], 1, 0) });
        let p = plan(&s, &count_mode());
        assert_eq!((p.boosts[0].from, p.boosts[0].to), (51, 52));
        assert_eq!(p.boosts[0].record.before, 50, "n1's boost may close first, having given its node back");

        // Once n1's node is given back (desired 50 again), n2's boost starts from 50 as well.
        s.ledger.records[0].returned = 1;
        s.groups.get_mut(&GroupName::from("a")).unwrap().desired = 50;
        assert_eq!(plan(&s, &count_mode()).boosts[0].record.before, 50);
    }

    #[test]
    fn pods_mode_packs_the_at_risk_pods() {
        // Two at-risk nodes with 3 pods each (550m after over-subscription): 6 pods fit one new node.
        let s = cluster(Group::test("a").desired(4), 4, 3)
            .with_signal(Signal::rebalance("n1", 0))
            .with_signal(Signal::rebalance("n2", 0));
        let p = plan(&s, &Policy::default());
        assert_eq!(p.boosts[0].to, 5);
        assert_eq!(p.boosts[0].record.added, 1);
    }

    #[test]
    fn nodes_nth_drains_itself_count_at_least_one_each() {
        // NTH drains on a spot interruption notice: the node may be empty by the time we look.
        let mut itn = Signal::rebalance("n1", 0);
        itn.kind = crate::core::SignalKind::SpotInterruption;
        let s = cluster(Group::test("a").desired(4), 4, 0).with_signal(itn);
        let p = plan(&s, &Policy::default());
        assert_eq!((p.boosts[0].to, p.boosts[0].record.added), (5, 1));
    }

    #[test]
    fn an_empty_at_risk_node_is_recorded_without_a_write() {
        let s = cluster(Group::test("a").desired(4), 4, 0).with_signal(Signal::rebalance("n1", 0));
        let p = plan(&s, &Policy::default());
        assert!(!p.boosts[0].writes());
        assert_eq!(p.boosts[0].record.added, 0);
    }

    #[test]
    fn target_starts_from_cas_target_when_it_leads() {
        let s = cluster(Group::test("a").desired(4).ca_target(6, None), 4, 0).with_signal(Signal::rebalance("n1", 0));
        let p = plan(&s, &count_mode());
        assert_eq!((p.boosts[0].from, p.boosts[0].to), (4, 7));
    }

    #[test]
    fn capacity_rebalance_groups_are_held_unless_opted_in() {
        let mut group = Group::test("a").desired(4);
        group.capacity_rebalance = true;
        let s = cluster(group, 4, 0).with_signal(Signal::rebalance("n1", 0));
        assert_eq!(plan(&s, &count_mode()).held[0].reason, HoldReason::CapacityRebalance);
        let opted_in = Policy { boost_capacity_rebalance_groups: true, ..count_mode() };
        assert_eq!(plan(&s, &opted_in).boosts[0].to, 5);
    }

    #[test]
    fn already_boosted_instances_are_not_boosted_again() {
        let mut s = cluster(Group::test("a").desired(5), 4, 0).with_signal(Signal::rebalance("n1", 0));
        let first = plan(&s, &count_mode());
        s.ledger.record(first.boosts[0].record.clone());
        s.signals.push(Signal::rebalance("n1", 30_000));
        assert_eq!(plan(&s, &count_mode()), BoostPlan::default());
    }

    #[test]
    fn a_group_at_max_is_held_not_boosted() {
        let s = cluster(Group::test("a").desired(4).max(4), 4, 2).with_signal(Signal::rebalance("n1", 0));
        let p = plan(&s, &count_mode());
        assert!(p.boosts.is_empty());
        assert_eq!(
            p.held,
            vec![Held { group: "a".into(), instances: vec!["i-n1".into()], reason: HoldReason::AtMaxSize }]
        );
    }

    #[test]
    fn a_group_in_ca_backoff_is_held_with_the_code() {
        let s = cluster(Group::test("a").desired(4).ca_target(4, Some("placeholder-cannot-be-fulfilled")), 4, 0)
            .with_signal(Signal::rebalance("n1", 0));
        let p = plan(&s, &count_mode());
        assert_eq!(p.held[0].reason, HoldReason::CaBackoff("placeholder-cannot-be-fulfilled".into()));
    }

    #[test]
    fn room_below_max_boosts_the_oldest_signals_first() {
        let s = cluster(Group::test("a").desired(4).max(5), 4, 0)
            .with_signal(Signal::rebalance("n2", 2_000))
            .with_signal(Signal::rebalance("n1", 1_000));
        let p = plan(&s, &count_mode());
        assert_eq!(p.boosts[0].to, 5);
        assert_eq!(p.boosts[0].record.instances, BTreeSet::from(["i-n1".into()]));
        assert_eq!(p.boosts[0].reason, BoostReason::Partial { needed: 1, at_risk: 1, limit: HoldReason::AtMaxSize });
        assert_eq!(
            p.boosts[0].reason.to_string(),
            "1 new node for the 1 at-risk node signalled first; the rest wait: the group is at MaxSize"
        );
        assert_eq!(p.held[0].instances, vec![InstanceId::from("i-n2")]);
    }

    #[test]
    fn steps_stay_within_cas_unready_tolerance() {
        // 4 Ready nodes: CA tolerates max(4+3, 4·100/55=7) = 7, so at most 3 of 6 go now.
        let mut s = cluster(Group::test("a").desired(4).max(20), 4, 0);
        for i in 1..=4 {
            s = s.with_signal(Signal::rebalance(&format!("n{i}"), i));
        }
        let p = plan(&s, &count_mode());
        assert_eq!(p.boosts[0].to, 7);
        assert_eq!(p.held[0].reason, HoldReason::CaUnreadyLimit);
    }

    #[test]
    fn cas_own_ready_count_sets_the_unready_room() {
        // A 50-node group: CA counts 50 Ready, so a 2-node step is well within its tolerance even
        // though the snapshot resolved only a few of the nodes.
        let mut group = Group::test("a").desired(50).max(60).ca_target(50, None);
        group.ca.as_mut().unwrap().ready = Some(50);
        let mut s = cluster(group, 2, 0);
        for i in 1..=2 {
            s = s.with_signal(Signal::rebalance(&format!("n{i}"), i));
        }
        let p = plan(&s, &count_mode());
        assert_eq!((p.boosts[0].from, p.boosts[0].to), (50, 52), "{p:?}");
        assert!(p.held.is_empty());

        // CA counts only 1 Ready of 50: a step of 2 more would make it call the group Unhealthy.
        s.groups.get_mut(&GroupName::from("a")).unwrap().ca.as_mut().unwrap().ready = Some(1);
        assert_eq!(plan(&s, &count_mode()).held[0].reason, HoldReason::CaUnreadyLimit);
    }

    #[test]
    fn extra_nodes_are_added_once_and_within_room() {
        let policy = Policy { extra_nodes: 5, ..count_mode() };
        let s = cluster(Group::test("a").desired(4).max(7), 4, 0).with_signal(Signal::rebalance("n1", 0));
        let p = plan(&s, &policy);
        assert_eq!(p.boosts[0].to, 7, "1 needed + 2 of the 5 extra before max");
    }

    #[test]
    fn the_budget_counts_boosts_in_flight() {
        let policy = Policy { max_boost_per_group: 2, ..count_mode() };
        let mut s = cluster(Group::test("a").desired(6), 6, 0).with_signal(Signal::rebalance("n3", 0));
        s.ledger.record(BoostRecord::test("a", &["i-n1"], 2, 0));
        assert_eq!(plan(&s, &policy).held[0].reason, HoldReason::BoostBudgetSpent);
    }

    #[test]
    fn a_boost_decided_while_an_earlier_raise_is_unconfirmed_keeps_the_earlier_floor() {
        // n1's raise 50 → 51 applied, but its answer was lost: the record still waits for it.
        let mut s = cluster(Group::test("a").desired(51).max(100), 50, 0)
            .with_signal(Signal::rebalance("n1", 0))
            .with_signal(Signal::rebalance("n2", 0));
        s.ledger.record(BoostRecord { before: 50, raising_to: Some(51), ..BoostRecord::test("a", &["i-n1"], 1, 0) });
        let p = plan(&s, &count_mode());
        assert_eq!(p.boosts[0].record.before, 50, "51 would keep n2's node once n1's boost closes");
    }

    #[test]
    fn a_return_whose_termination_is_unanswered_still_counts_as_the_boost_s_node() {
        // Boosted 50 → 53; one node given back (52), a second one's termination not made yet.
        let mut s = cluster(Group::test("a").desired(52).max(100), 50, 0).with_signal(Signal::rebalance("n9", 0));
        let mut record = BoostRecord { before: u32::MAX, returned: 2, ..BoostRecord::test("a", &["i-n1"], 3, 0) };
        record.returning.insert("i-n2".into());
        s.ledger.record(record);
        assert_eq!(plan(&s, &count_mode()).boosts[0].record.before, 50);
    }

    /// One step of a group's life while boosts open, return their nodes and close, in any order
    /// the scaler, the drainer and AWS can take.
    #[derive(Debug, Clone, Copy)]
    enum Step {
        /// A new at-risk instance: the scaler plans and its raise applies at once (the guard read
        /// and the write see the same size: no decrement lands between them).
        Notice,
        /// The answer to a raise is saved.
        Confirm(usize),
        /// The drainer saves its intent to terminate one of a boost's instances with decrement.
        BeginReturn(usize),
        /// That termination applies: desired capacity goes down.
        Apply(usize),
        /// Its answer is saved.
        Answer(usize),
        /// A termination refused before anything changed: its count is taken back.
        Refused(usize),
        /// A boost whose every return applied closes.
        Close(usize),
    }

    fn step() -> impl proptest::strategy::Strategy<Value = Step> {
        use proptest::prelude::*;
        prop_oneof![
            3 => Just(Step::Notice),
            2 => any::<usize>().prop_map(Step::Confirm),
            4 => any::<usize>().prop_map(Step::BeginReturn),
            3 => any::<usize>().prop_map(Step::Apply),
            3 => any::<usize>().prop_map(Step::Answer),
            1 => any::<usize>().prop_map(Step::Refused),
            2 => any::<usize>().prop_map(Step::Close),
        ]
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 300, ..Default::default() })]

        /// However the scaler's raises, the drainer's returns and their answers interleave, a new
        /// boost's size before it is never above the group's baseline (its give-backs would stop
        /// short, leaving the group larger), and below it only by returns that applied before
        /// their answer was saved.
        #[test]
        fn a_boost_s_floor_is_never_above_the_group_s_baseline(
            baseline in 1u32..60,
            steps in proptest::collection::vec(step(), 1..60),
        ) {
            let policy = Policy { max_boost_per_group: 1_000, ..count_mode() };
            let mut s = cluster(Group::test("a").desired(baseline).max(10_000), 80, 0);
            let (mut desired, mut next, mut terminated) = (baseline, 1, 0);
            // Returns begun: (the boosted instance, the terminated one, applied).
            let mut returns: Vec<(InstanceId, InstanceId, bool)> = Vec::new();
            let mut applied_unanswered_ever = 0u32;
            for step in steps {
                let open = s.ledger.records.len();
                match step {
                    Step::Notice if next <= 80 => {
                        s = s.with_signal(Signal::rebalance(&format!("n{next}"), 0));
                        next += 1;
                        s.groups.get_mut(&GroupName::from("a")).unwrap().desired = desired;
                        let p = plan(&s, &policy);
                        if let Some(b) = p.boosts.first() {
                            proptest::prop_assert!(b.record.before <= baseline, "{} above {baseline}", b.record.before);
                            proptest::prop_assert!(
                                b.record.before + applied_unanswered_ever >= baseline,
                                "{} below {baseline} by more than {applied_unanswered_ever}", b.record.before
                            );
                            desired = b.to;
                            LedgerEdit::Open(b.record.clone()).apply(&mut s.ledger);
                        }
                    }
                    Step::Confirm(i) if open > 0 => {
                        let id = s.ledger.records[i % open].id();
                        LedgerEdit::Answer { write: Pending::Raise(id), applied: true }.apply(&mut s.ledger);
                    }
                    Step::BeginReturn(i) if open > 0 => {
                        let record = &s.ledger.records[i % open];
                        if record.raising_to.is_none() && record.returned < record.added {
                            let boosted = record.instances.iter().next().unwrap().clone();
                            terminated += 1;
                            let instance = InstanceId::from(format!("i-t{terminated}"));
                            LedgerEdit::BeginReturn { boosted: boosted.clone(), terminated: instance.clone() }
                                .apply(&mut s.ledger);
                            returns.push((boosted, instance, false));
                        }
                    }
                    Step::Apply(j) if !returns.is_empty() => {
                        let k = j % returns.len();
                        if !returns[k].2 {
                            returns[k].2 = true;
                            desired -= 1;
                            applied_unanswered_ever += 1;
                        }
                    }
                    Step::Answer(j) | Step::Refused(j) if !returns.is_empty() => {
                        let k = j % returns.len();
                        let refused = matches!(step, Step::Refused(_));
                        if returns[k].2 != refused {
                            let (boosted, terminated, decremented) = returns.remove(k);
                            LedgerEdit::Answer { write: Pending::Return { boosted, terminated }, applied: decremented }.apply(&mut s.ledger);
                        }
                    }
                    Step::Close(i) if open > 0 => {
                        let record = &s.ledger.records[i % open];
                        let unapplied = returns.iter().any(|(b, _, applied)| record.instances.contains(b) && !applied);
                        if record.raising_to.is_none() && record.returned == record.added && !unapplied {
                            let id = record.id();
                            LedgerEdit::Close { id, spent: Vec::new() }.apply(&mut s.ledger);
                        }
                    }
                    _ => {}
                }
            }
        }
    }
}
