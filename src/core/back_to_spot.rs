//! Returning capacity to its own group. Nodes a boost moved to a fallback because its group had
//! no capacity stay there once the boost is over ([`OnFallback`], noted when the boost closes):
//! often on-demand, or in a pool the tag ranks lower. Once the group can launch again they go
//! back, replace-before-drain, through the same path as any at-risk node: a fallback node chosen
//! for it is marked returning ([`Returning`], in the ledger), which makes it at risk with
//! [`SignalKind::BackToSpot`] *in its own group*; the scaler boosts that group for it, the
//! drainer drains it once the replacement is Ready (honouring budgets and opt-outs, as for a
//! rebalance recommendation) and terminates it with decrement, so the fallback shrinks by what
//! the group grew.
//!
//! A return begins only when the group has not failed to launch for `--return-to-spot-interval`,
//! has no at-risk node and no boost of its own open, and has room below its MaxSize; at most
//! `--return-to-spot-nodes` begin per group per interval. If the group fails to launch the
//! replacement after all, its boost is parked and retried in that group only (never moved to a
//! fallback), and a boost that expires with nothing asked of any group is abandoned: the node
//! stays on the fallback for a later try.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::ledger_edit::Forgotten;
use super::ledger_edit::LedgerEdit;
use super::model::{BoostLedger, InstanceId, Node, NodeName, OnFallback, Returning, SignalKind, Snapshot, Timestamp};
use super::policy::Policy;
use super::signals::AtRiskSet;

/// A fallback node whose return begins now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackToSpot {
    /// Its instance.
    pub instance: InstanceId,
    /// The return.
    pub returning: Returning,
}

/// What to note of returns this pass.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BackToSpotPlan {
    /// Returns that begin.
    pub begun: Vec<BackToSpot>,
    /// Returns abandoned, by instance: their node stays on the fallback.
    pub abandoned: Vec<InstanceId>,
    /// Ledger edits that note all of it, to apply in order.
    pub edits: Vec<LedgerEdit>,
}

/// The returns to begin and abandon at `now`, and the capacity on fallbacks to forget.
pub(crate) fn plan_back_to_spot(
    snapshot: &Snapshot,
    ledger: &BoostLedger,
    at_risk: &AtRiskSet,
    policy: &Policy,
    now: Timestamp,
) -> BackToSpotPlan {
    let mut plan = BackToSpotPlan::default();
    if ledger.on_fallback.is_empty() && ledger.returning.is_empty() {
        return plan;
    }
    for f in &ledger.on_fallback {
        let runs_there = snapshot.nodes.values().any(|n| runs_on_fallback(n, f));
        let returning = ledger.returning.values().any(|r| r.home == f.home && r.from == f.group);
        if !runs_there && !returning {
            plan.edits.push(LedgerEdit::Forget(Forgotten::OnFallback { home: f.home.clone(), group: f.group.clone() }));
        }
    }
    for (instance, r) in &ledger.returning {
        let abandon = match ledger.records.iter().find(|rec| rec.instances.contains(instance)) {
            // The group held its boost (at its max, over budget) as long as a boost waits for its
            // replacements, or the node went before it was boosted.
            None => now.since(r.at) >= policy.replacement_timeout || !snapshot.nodes.contains_key(&r.node),
            // Expired with nothing still asked of any group: what it raised was taken back.
            Some(rec) => {
                rec.expired.is_some()
                    && rec.unconfirmed().is_none()
                    && rec.added <= rec.returned
                    && rec.moved.iter().all(|p| p.taken_back && p.lowering_to.is_none())
            }
        };
        if abandon {
            plan.abandoned.push(instance.clone());
            plan.edits.push(LedgerEdit::AbandonBackToSpot(instance.clone()));
        }
    }
    if policy.return_to_spot_interval.is_zero() || policy.return_to_spot_nodes == 0 {
        return plan;
    }
    let since = now.minus(policy.return_to_spot_interval);
    let at_risk_instances = at_risk.instances();
    let mut on_fallback: Vec<&OnFallback> = ledger.on_fallback.iter().collect();
    on_fallback.sort_by_key(|f| f.since);
    for f in on_fallback {
        let begun = ledger
            .return_starts
            .iter()
            .filter(|(home, at)| home == &f.home && *at > since)
            .count()
            .saturating_add(plan.begun.iter().filter(|b| b.returning.home == f.home).count());
        let mut room = (policy.return_to_spot_nodes as usize).saturating_sub(begun);
        let Some(surplus) = may_take_back(snapshot, ledger, at_risk, policy, (f, since, now)) else {
            continue;
        };
        if room == 0 {
            continue;
        }
        let on_the_way = ledger.returning.values().filter(|r| r.home == f.home && r.from == f.group).count();
        room = room.min((f.nodes as usize).saturating_sub(on_the_way));
        if let (false, Some(before), Some(home)) = (surplus, f.home_before, snapshot.groups.get(&f.home)) {
            // Raised no higher than it would be without the move, counting the raises of returns
            // begun whose boost is not confirmed yet (the group's size may not show them).
            let raising = ledger
                .returning
                .iter()
                .filter(|(_, r)| r.home == f.home && !r.surplus)
                .filter(|(i, _)| {
                    !ledger.records.iter().any(|rec| rec.instances.contains(*i) && rec.raising_to.is_none())
                })
                .count();
            room = room.min((before.saturating_sub(home.desired) as usize).saturating_sub(raising));
        }
        let launched = launched_by_move(snapshot, f);
        let mut candidates: Vec<&Node> = snapshot
            .nodes
            .values()
            .filter(|n| launched.contains(&n.name) && n.ready && !n.cordoned)
            // As any voluntary drain: never a node with a pod that opted out or that nothing
            // recreates.
            .filter(|n| n.voluntarily_drainable())
            .filter(|n| {
                n.instance.as_ref().is_some_and(|i| {
                    // Described by EC2: the node's identity is verified at every pass of its return.
                    snapshot.instances.contains_key(i)
                        && !ledger.covers(i)
                        && !ledger.returning.contains_key(i)
                        && !at_risk_instances.contains(i)
                })
            })
            .collect();
        // The emptiest first (the least to move), then the newest (launched for the boost).
        candidates.sort_by(|a, b| a.pods.len().cmp(&b.pods.len()).then(b.created.cmp(&a.created)));
        for node in candidates.into_iter().take(room) {
            let Some(instance) = node.instance.clone() else { continue };
            let returning = Returning {
                node: node.name.clone(),
                home: f.home.clone(),
                from: f.group.clone(),
                at: now,
                since: f.since,
                surplus,
            };
            plan.edits.push(LedgerEdit::BeginBackToSpot {
                instance: instance.clone(),
                returning: returning.clone(),
                forget_before: since,
            });
            plan.begun.push(BackToSpot { instance, returning });
        }
    }
    plan
}

/// The nodes whose pods a return is chosen by and a view may have left out (see
/// [`Node::pods_known`]): those the fallbacks launched for capacity still on them.
pub fn pods_needed(snapshot: &Snapshot) -> BTreeSet<NodeName> {
    let ledger = &snapshot.ledger;
    if ledger.on_fallback.is_empty() {
        return BTreeSet::new();
    }
    snapshot
        .nodes
        .values()
        .filter(|n| !n.pods_known && ledger.on_fallback.iter().any(|f| runs_on_fallback(n, f)))
        .map(|n| n.name.clone())
        .collect()
}

/// Whether `node` is of the fallback `f` names and joined since its capacity moved there.
fn runs_on_fallback(node: &Node, f: &OnFallback) -> bool {
    node.group.as_ref() == Some(&f.group) && node.created >= f.since.whole_second() && !node.deleting_by_ca
}

/// The nodes of `f`'s fallback its move launched: the first `f.nodes` to join after the move
/// (those its raise launched at once). Nodes that joined later are the fallback's own, Cluster
/// Autoscaler's for pods that may need them (on-demand-only ones, say): a return never takes
/// them.
fn launched_by_move<'a>(snapshot: &'a Snapshot, f: &OnFallback) -> BTreeSet<&'a NodeName> {
    let mut joined: Vec<&Node> = snapshot.nodes.values().filter(|n| runs_on_fallback(n, f)).collect();
    joined.sort_by(|a, b| a.created.cmp(&b.created).then_with(|| a.name.cmp(&b.name)));
    joined.into_iter().take(f.nodes as usize).map(|n| &n.name).collect()
}

/// Whether `f`'s own group may take a node back now, and how: `Some(false)` to raise it for the
/// node, `Some(true)` when its own Auto Scaling already relaunched what the move replaced (it is
/// at its size from before the move, every node of it Ready and serving), so the node is surplus
/// and only leaves the fallback. The group is one this daemon serves, with room for a raise, that
/// has not failed to launch since `since` (nor within `--capacity-cooldown`, while it counts as
/// failing), has no notice open and no boost of its own.
fn may_take_back(
    snapshot: &Snapshot,
    ledger: &BoostLedger,
    at_risk: &AtRiskSet,
    policy: &Policy,
    (f, since, now): (&OnFallback, Timestamp, Timestamp),
) -> Option<bool> {
    let (Some(home), Some(fallback)) = (snapshot.groups.get(&f.home), snapshot.groups.get(&f.group)) else {
        return None;
    };
    let regained = f.home_before.is_some_and(|before| home.desired >= before);
    if regained {
        let serving = snapshot
            .nodes
            .values()
            .filter(|n| n.group.as_ref() == Some(&home.name) && n.ready && !n.cordoned && !n.deleting_by_ca)
            .count();
        // Still relaunching: it takes nothing yet, and a raise would make it larger than before.
        if serving < home.desired as usize {
            return None;
        }
    }
    let serves = |g: &super::model::Group| g.served() && !policy.ignored_groups.contains(&g.name);
    let failed_lately = snapshot.capacity_failures.get(&f.home).is_some_and(|at| *at > since)
        || super::fallback::failing(snapshot, &f.home, policy, now);
    let notice_open = at_risk
        .by_group
        .get(&f.home)
        .is_some_and(|risks| risks.values().any(|r| r.kinds.iter().any(|k| k != SignalKind::BackToSpot)));
    let own_boost = ledger.records.iter().any(|r| r.group == f.home && r.expired.is_none() && !ledger.is_return(r));
    let room = regained || home.desired < home.max;
    (serves(home) && serves(fallback) && room && !failed_lately && !notice_open && !own_boost).then_some(regained)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::model::{BoostRecord, Group, GroupName, InstanceFacts, InstanceLifecycle, NodeName};
    use crate::core::signals::fold_signals;

    const NOW: Timestamp = Timestamp::from_millis(10_000_000);

    /// `spot` (desired 3) lent 2 nodes to `od` at 1,000 s; `od` runs them (`o3`, `o4`) and two of
    /// its own (`o1`, `o2`).
    fn lent() -> Snapshot {
        let mut s = Snapshot::default();
        let mut spot = Group::test("spot").desired(3).members(["i-s1", "i-s2", "i-s3"]);
        spot.max = 10;
        spot.fallbacks = vec!["od".into()];
        let mut od = Group::test("od").desired(4).members(["i-o1", "i-o2", "i-o3", "i-o4"]);
        od.max = 10;
        s.groups.insert(spot.name.clone(), spot);
        s.groups.insert(od.name.clone(), od);
        for (name, group, created) in
            [("s1", "spot", 0), ("s2", "spot", 0), ("s3", "spot", 0), ("o1", "od", 0), ("o2", "od", 0)]
                .into_iter()
                .chain([("o3", "od", 1_100_000), ("o4", "od", 1_200_000)])
        {
            let mut node = Node::test(name, group).with_pods(if name == "o4" { 1 } else { 2 }, 100, 1 << 20);
            node.created = Timestamp::from_millis(created);
            let mut facts = InstanceFacts::bought(InstanceLifecycle::Spot);
            facts.private_dns_name = Some(format!("{name}.ec2.internal"));
            s.instances.insert(node.instance.clone().unwrap(), facts);
            s.nodes.insert(node.name.clone(), node);
        }
        s.ledger.on_fallback.push(OnFallback {
            home: "spot".into(),
            group: "od".into(),
            nodes: 2,
            since: Timestamp::from_millis(1_000_000),
            home_before: None,
        });
        s
    }

    fn plan(s: &Snapshot, policy: &Policy, now: Timestamp) -> BackToSpotPlan {
        plan_back_to_spot(s, &s.ledger, &fold_signals(s, policy, now), policy, now)
    }

    fn begun(p: &BackToSpotPlan) -> Vec<&str> {
        p.begun.iter().map(|b| b.returning.node.as_str()).collect()
    }

    #[test]
    fn a_node_the_fallback_launched_for_the_group_goes_back_one_per_interval() {
        let mut s = lent();
        let policy = Policy::default();
        let p = plan(&s, &policy, NOW);
        assert_eq!(begun(&p), ["o4"], "one per interval: the emptiest of those launched for it");
        let r = &p.begun[0].returning;
        assert_eq!((r.home.as_str(), r.from.as_str(), r.since), ("spot", "od", Timestamp::from_millis(1_000_000)));
        assert!(p.edits.iter().all(|e| e.apply(&mut s.ledger)));

        // It is at risk now, in its own group, and nothing more begins within the interval.
        let at_risk = fold_signals(&s, &policy, NOW);
        assert!(at_risk.dropped.is_empty(), "{:?}", at_risk.dropped);
        let risk = &at_risk.by_group[&GroupName::from("spot")][&InstanceId::from("i-o4")];
        assert_eq!(risk.kinds.iter().collect::<Vec<_>>(), [SignalKind::BackToSpot]);
        assert!(!at_risk.by_group.contains_key(&GroupName::from("od")));
        assert!(plan(&s, &policy, NOW.plus(policy.return_to_spot_interval / 2)).begun.is_empty());

        // Once the interval has passed, the next (its own o1 and o2 are never taken); o4's return
        // waits for its boost meanwhile.
        let next = plan(&s, &policy, NOW.plus(policy.return_to_spot_interval));
        assert_eq!(begun(&next), ["o3"]);
    }

    #[test]
    fn no_return_begins_while_the_group_failed_lately_has_a_notice_or_a_boost_or_no_room() {
        let policy = Policy::default();
        let mut failed = lent();
        failed.capacity_failures.insert("spot".into(), NOW.minus(policy.return_to_spot_interval / 2));
        assert!(plan(&failed, &policy, NOW).begun.is_empty());
        failed.capacity_failures.insert("spot".into(), NOW.minus(policy.return_to_spot_interval));
        assert_eq!(begun(&plan(&failed, &policy, NOW)), ["o4"], "an interval since its last failure");

        let mut noticed = lent();
        noticed.signals.push(crate::core::model::Signal {
            instance: "i-s1".into(),
            node: "s1".into(),
            kind: SignalKind::SpotInterruption,
            observed_at: NOW,
            evidence: crate::core::model::Evidence::NodeTaint,
            notice_deadline: None,
        });
        noticed.nodes.get_mut(&NodeName::from("s1")).unwrap().cordoned = true;
        assert!(plan(&noticed, &policy, NOW).begun.is_empty(), "a notice is open in the group");

        let mut boosted = lent();
        boosted.ledger.record(BoostRecord::test("spot", &["i-s2"], 1, 9_000_000));
        assert!(plan(&boosted, &policy, NOW).begun.is_empty(), "its own boost is open");

        let mut full = lent();
        full.groups.get_mut(&GroupName::from("spot")).unwrap().max = 3;
        assert!(plan(&full, &policy, NOW).begun.is_empty(), "no room below its max");

        let mut foreign = lent();
        foreign.groups.get_mut(&GroupName::from("spot")).unwrap().foreign = true;
        assert!(plan(&foreign, &policy, NOW).begun.is_empty(), "not a group this cluster serves");

        let off = Policy { return_to_spot_interval: std::time::Duration::ZERO, ..Policy::default() };
        assert!(plan(&lent(), &off, NOW).begun.is_empty(), "turned off");
    }

    #[test]
    fn a_node_with_a_pod_that_opted_out_or_at_risk_itself_is_not_chosen_and_gone_capacity_is_forgotten() {
        let policy = Policy::default();
        let mut s = lent();
        s.nodes.get_mut(&NodeName::from("o4")).unwrap().pods[0].opt_out =
            Some(crate::core::model::OptOut::DoNotDisrupt);
        s.nodes.get_mut(&NodeName::from("o3")).unwrap().cordoned = true;
        assert!(plan(&s, &policy, NOW).begun.is_empty());

        // The fallback's nodes for it are gone (Cluster Autoscaler removed them): forgotten.
        let mut gone = lent();
        gone.nodes.retain(|n, _| !["o3", "o4"].contains(&n.as_str()));
        let p = plan(&gone, &policy, NOW);
        assert!(p.begun.is_empty());
        assert_eq!(p.edits, [LedgerEdit::Forget(Forgotten::OnFallback { home: "spot".into(), group: "od".into() })]);
    }

    #[test]
    fn a_return_takes_only_nodes_the_move_launched_and_never_one_with_a_bare_pod() {
        let policy = Policy::default();
        let mut s = lent();
        // o5 joined the fallback later, empty: Cluster Autoscaler's, for pods of its own.
        let mut o5 = Node::test("o5", "od");
        o5.created = Timestamp::from_millis(1_300_000);
        o5.pods_known = true;
        s.instances.insert("i-o5".into(), s.instances[&InstanceId::from("i-o4")].clone());
        s.instances.get_mut(&InstanceId::from("i-o5")).unwrap().private_dns_name = Some("o5.ec2.internal".into());
        s.groups.get_mut(&GroupName::from("od")).unwrap().members.as_mut().unwrap().insert("i-o5".into());
        s.nodes.insert(o5.name.clone(), o5);
        assert_eq!(begun(&plan(&s, &policy, NOW)), ["o4"], "the emptiest the move launched, never o5");

        // A pod nothing recreates keeps o4 where it is, as it keeps a give-back off a node.
        s.nodes.get_mut(&NodeName::from("o4")).unwrap().pods[0].bare = true;
        assert_eq!(begun(&plan(&s, &policy, NOW)), ["o3"]);
        s.nodes.get_mut(&NodeName::from("o3")).unwrap().pods[1].bare = true;
        assert!(plan(&s, &policy, NOW).begun.is_empty(), "o5 is never the move's");
    }

    #[test]
    fn a_return_whose_boost_never_came_or_expired_with_nothing_asked_is_abandoned() {
        let policy = Policy::default();
        let mut s = lent();
        let p = plan(&s, &policy, NOW);
        assert!(p.edits.iter().all(|e| e.apply(&mut s.ledger)));
        // Held as long as a boost waits for its replacements: abandoned, and the node is od's again.
        assert!(plan(&s, &policy, NOW.plus(policy.return_to_spot_interval)).abandoned.is_empty());
        let later = plan(&s, &policy, NOW.plus(policy.replacement_timeout));
        assert_eq!(later.abandoned, [InstanceId::from("i-o4")]);

        // Boosted, then expired with its node parked and taken back: abandoned too.
        let mut record = BoostRecord::test("spot", &["i-o4"], 0, NOW.as_millis());
        record.expired = Some(crate::core::model::BoostExpiry::ReplacementTimeout);
        s.ledger.record(record.clone());
        assert_eq!(plan(&s, &policy, NOW).abandoned, [InstanceId::from("i-o4")]);
        let mut l = s.ledger.clone();
        assert!(LedgerEdit::AbandonBackToSpot("i-o4".into()).apply(&mut l));
        assert!(l.records.is_empty() && l.returning.is_empty() && l.on_fallback.len() == 1);

        // Still asking its group for a node: kept.
        s.ledger.records[0].added = 1;
        assert!(plan(&s, &policy, NOW).abandoned.is_empty());
    }
}

#[cfg(test)]
mod properties {
    use std::collections::BTreeSet;
    use std::time::Duration;

    use proptest::prelude::*;

    use super::*;
    use crate::core::ledger_edit::apply_all;
    use crate::core::model::{BoostRecord, Group, GroupName, InstanceFacts, InstanceLifecycle};
    use crate::core::terminations::{answer_terminations, decide_terminations, Termination, TerminationAnswer};
    use crate::core::{plan_draining, plan_scaling, Acting, DrainState};

    /// What EC2 says of node `name`'s instance: a spot instance whose private DNS name is the node's.
    fn described(name: &str) -> InstanceFacts {
        let mut facts = InstanceFacts::bought(InstanceLifecycle::Spot);
        facts.private_dns_name = Some(format!("{name}.ec2.internal"));
        facts
    }

    /// `spot` was `before` nodes when a boost moved `lent` of them to `od` (2 nodes of its own);
    /// it is `desired` now, `relaunching` of them not Ready yet.
    fn world(before: u32, desired: u32, relaunching: u32, lent: u32, max: u32) -> Snapshot {
        let mut s = Snapshot::default();
        let mut spot = Group::test("spot").desired(desired);
        spot.max = max.max(desired);
        spot.fallbacks = vec!["od".into()];
        let mut od = Group::test("od").desired(2 + lent);
        od.max = 40;
        let join = |s: &mut Snapshot, name: String, group: &str, created: i64, ready: bool| {
            let mut node = Node::test(&name, group).with_pods(1, 100, 1 << 20);
            node.created = Timestamp::from_millis(created);
            node.ready = ready;
            s.instances.insert(node.instance.clone().unwrap(), described(&name));
            s.nodes.insert(node.name.clone(), node);
        };
        for k in 0..desired {
            join(&mut s, format!("s{k}"), "spot", 0, k >= relaunching);
        }
        for k in 0..2 + lent {
            join(&mut s, format!("o{k}"), "od", if k < 2 { 0 } else { 1_100_000 }, true);
        }
        spot.members = Some(
            s.nodes.values().filter(|n| n.name.as_str().starts_with('s')).filter_map(|n| n.instance.clone()).collect(),
        );
        od.members = Some(
            s.nodes.values().filter(|n| n.name.as_str().starts_with('o')).filter_map(|n| n.instance.clone()).collect(),
        );
        s.groups.insert(spot.name.clone(), spot);
        s.groups.insert(od.name.clone(), od);
        s.ledger.on_fallback.push(OnFallback {
            home: "spot".into(),
            group: "od".into(),
            nodes: lent,
            since: Timestamp::from_millis(1_000_000),
            home_before: Some(before),
        });
        s
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

        /// Whatever the home group's size since the move, how much of it its own Auto Scaling
        /// relaunched, how many nodes were lent and how many may go back per interval, a return
        /// never leaves the group above the size it would have without the move (or above the
        /// size it already had), and the fallback never below its own nodes; once the group is
        /// whole again, every lent node is back.
        #[test]
        fn a_return_never_leaves_a_group_above_the_size_it_would_have_without_the_move(
            before in 1u32..7,
            shortfall in 0u32..3,
            grown in 0u32..2,
            relaunching in 0u32..3,
            lent in 1u32..5,
            per_interval in 1u32..4,
            headroom in 0u32..4,
            extra in 0u32..2,
        ) {
            let desired = (before + grown).saturating_sub(shortfall).max(1);
            let relaunching = relaunching.min(desired);
            let mut s = world(before, desired, relaunching, lent, before + headroom);
            let policy = Policy { return_to_spot_nodes: per_interval, extra_nodes: extra, ..Policy::default() };
            let ceiling = before.max(desired) + extra;
            let home = GroupName::from("spot");
            let fallback = GroupName::from("od");
            let mut now = Timestamp::from_millis(10_000_000);
            let mut launched = 0;
            // Passes 10 s apart, as the scaler's resync: a return is boosted in the pass after it
            // begins, long before its boost could time out.
            for pass in 0..300 {
                let p = plan_scaling(&s, &policy, now, Acting::Leader);
                s.ledger = p.ledger.clone();
                for b in &p.boosts.boosts {
                    s.ledger.record(BoostRecord { raising_to: None, ..b.record.clone() });
                    let g = s.groups.get_mut(&b.group).unwrap();
                    let raised = b.to.saturating_sub(g.desired);
                    g.desired = g.desired.max(b.to);
                    // Auto Scaling launches what a raise asked for, Ready at once.
                    for _ in 0..raised {
                        launched += 1;
                        let mut node = Node::test(&format!("l{launched}"), b.group.as_str());
                        node.created = now;
                        let instance = node.instance.clone().unwrap();
                        s.instances.insert(instance.clone(), described(node.name.as_str()));
                        s.groups.get_mut(&b.group).unwrap().members.as_mut().unwrap().insert(instance);
                        s.nodes.insert(node.name.clone(), node);
                    }
                }
                prop_assert!(s.groups[&home].desired <= ceiling, "pass {}: spot at {} above {}", pass, s.groups[&home].desired, ceiling);
                // Drained nodes are terminated at once, as the drainer would once their pods left.
                let d = plan_draining(&s, &BTreeSet::new(), &DrainState::default(), &policy, now);
                let pending: Vec<Termination> = d.drains.batches.iter().flat_map(|b| b.nodes.iter()).map(|t| Termination {
                    instance: t.instance.clone(),
                    decrement: t.decrement,
                    gives_back: None,
                }).collect();
                let (edits, decisions) = decide_terminations(&s.ledger, &pending);
                apply_all(&mut s.ledger, &edits);
                let mut answers = Vec::new();
                for (t, decision) in pending.iter().zip(&decisions) {
                    let Some(node) = s.nodes.values().find(|n| n.instance.as_ref() == Some(&t.instance)).cloned() else { continue };
                    let group = node.group.clone().unwrap();
                    s.nodes.remove(&node.name);
                    let g = s.groups.get_mut(&group).unwrap();
                    g.members.as_mut().unwrap().remove(&t.instance);
                    if decision.decrement {
                        g.desired -= 1;
                    }
                    answers.push((t, TerminationAnswer::Terminated { decremented: decision.decrement }));
                }
                apply_all(&mut s.ledger, &answer_terminations(answers));
                prop_assert!(s.groups[&home].desired <= ceiling, "pass {}: spot at {} above {}", pass, s.groups[&home].desired, ceiling);
                prop_assert!(s.groups[&fallback].desired >= 2, "pass {}: od below its own nodes", pass);
                // Its own Auto Scaling finishes relaunching after the first pass.
                if pass == 0 {
                    s.nodes.values_mut().for_each(|n| n.ready = true);
                }
                now = now.plus(Duration::from_secs(10));
            }
            prop_assert_eq!(s.groups[&fallback].desired, 2, "every lent node is back: {:?}", s.ledger);
            if extra == 0 {
                prop_assert_eq!(s.groups[&home].desired, before.max(desired).min(desired + lent), "{:?}", s.ledger);
            }
        }
    }
}
