//! Pool-mates: spot capacity is reclaimed pool by pool (an instance type in one Availability
//! Zone), and most interruptions in one pool come within three minutes of its first. So the first
//! interruption in a pool that EC2 confirms (the spot request marked, which no tenant or kubelet
//! can write) raises the risk of that pool's other nodes: their groups are boosted ahead, sized
//! for those nodes' pods like a boost for at-risk nodes, within the group's own rooms and within
//! `--pool-mate-boost-budget` nodes across the cluster. The Auto Scaling Group places the new nodes
//! as its mixed-instances policy allows; a group that may launch only in the interrupted pools is
//! not boosted ahead, as its new nodes would land where capacity is being reclaimed.
//!
//! Nothing is drained on that risk alone. A pool-mate whose own notice comes while the boost is
//! open drains onto capacity that is already there. At `--pool-mate-window` after the boost, when
//! none was noticed, the nodes it added are given back as for instances AWS took first (see
//! [`super::give_back`]) and the boost closes; when some were, the others are released (a later
//! notice boosts them afresh) and the capacity they did not use is left to Cluster Autoscaler.

use super::ledger_edit::Unneeded;
use std::collections::{BTreeMap, BTreeSet};
#[cfg(test)]
use std::time::Duration;

use super::boost::{group_facts, plan_ahead, Boost, BoostPlan, BoostReason};
use super::drain_batches::claim_replacements;
use super::identity;
use super::ledger_edit::LedgerEdit;
use super::model::{
    Ahead, BoostLedger, GroupName, InstanceLifecycle, Node, NodeName, Pool, SignalKind, Snapshot, Timestamp,
};
use super::policy::Policy;
use super::signals::{AtRisk, AtRiskSet};

/// The pools in which a spot interruption notice is confirmed by EC2 now, on a node still Ready:
/// one whose instance went and whose Node lingers raises no risk again once its boost closed.
pub(crate) fn interrupted_pools(snapshot: &Snapshot) -> BTreeSet<&Pool> {
    snapshot
        .signals
        .iter()
        .filter(|s| s.kind == SignalKind::SpotInterruption && snapshot.spot_interrupted.contains(&s.instance))
        .filter(|s| snapshot.nodes.get(&s.node).is_some_and(|n| n.ready && n.instance.as_ref() == Some(&s.instance)))
        .filter_map(|s| snapshot.instances.get(&s.instance)?.pool.as_ref())
        .collect()
}

/// When each pool's first confirmed interruption (of those [`interrupted_pools`] finds) was seen:
/// its pool-mates are the nodes already there then. Nodes that joined since are new capacity,
/// often what a boost (ahead, or for the interrupted node) launched into the same pool; counted
/// as pool-mates, each boost ahead would buy the next.
fn interrupted_since(snapshot: &Snapshot) -> BTreeMap<&Pool, Timestamp> {
    let mut since: BTreeMap<&Pool, Timestamp> = BTreeMap::new();
    for s in snapshot.signals.iter().filter(|s| s.kind == SignalKind::SpotInterruption) {
        let Some(pool) = snapshot.instances.get(&s.instance).and_then(|f| f.pool.as_ref()) else { continue };
        if snapshot.spot_interrupted.contains(&s.instance) {
            since.entry(pool).and_modify(|t| *t = (*t).min(s.observed_at)).or_insert(s.observed_at);
        }
    }
    since
}

/// The nodes whose pods boosts ahead are sized by and a view may have left out (see
/// [`Node::pods_known`]): the Ready, schedulable nodes of every pool with a confirmed interruption.
pub fn pods_needed(snapshot: &Snapshot) -> BTreeSet<NodeName> {
    let pools = interrupted_pools(snapshot);
    if pools.is_empty() {
        return BTreeSet::new();
    }
    snapshot
        .nodes
        .values()
        .filter(|n| n.ready && !n.cordoned && !n.pods_known)
        .filter(|n| {
            n.instance
                .as_ref()
                .and_then(|i| snapshot.instances.get(i)?.pool.as_ref())
                .is_some_and(|p| pools.contains(p))
        })
        .map(|n| n.name.clone())
        .collect()
}

/// A pool-mate: as a risk with no signal of its own, its node, and its pool.
type Mate<'s> = (AtRisk, &'s Node, &'s Pool);

/// The boosts ahead for pool-mates, one per group at most and none for a group `boosted` already
/// boosts in this pass (one write per group per burst: it is boosted ahead at the next one).
pub(crate) fn plan_pool_mates(
    snapshot: &Snapshot,
    ledger: &BoostLedger,
    at_risk: &AtRiskSet,
    boosted: &BoostPlan,
    policy: &Policy,
    now: Timestamp,
) -> Vec<Boost> {
    if policy.pool_mate_boost_budget == 0 {
        return Vec::new();
    }
    let pools = interrupted_pools(snapshot);
    if pools.is_empty() {
        return Vec::new();
    }
    let spent: u32 = ledger.records.iter().filter(|r| r.ahead.is_some()).map(|r| r.added).sum();
    let mut budget = policy.pool_mate_boost_budget.saturating_sub(spent);
    if budget == 0 {
        return Vec::new();
    }
    let covered = ledger.index();
    let risky = at_risk.instances();
    let busy: BTreeSet<&GroupName> =
        boosted.boosts.iter().map(|b| &b.group).chain(boosted.held.iter().map(|h| &h.group)).collect();
    let contested = identity::contested(snapshot);
    let since = interrupted_since(snapshot);
    let mut mates: BTreeMap<&GroupName, Vec<Mate<'_>>> = BTreeMap::new();
    for node in snapshot.nodes.values() {
        let (Some(group), Some(instance)) = (&node.group, &node.instance) else { continue };
        // Sized by its pods: one whose pods the view left out waits for the next pass.
        let usable = node.ready && node.pods_known && !node.cordoned && !node.deleting_by_ca && !node.opted_out;
        if !usable || busy.contains(group) {
            continue;
        }
        let Some(facts) = snapshot.instances.get(instance) else { continue };
        let Some(pool) = facts.pool.as_ref().filter(|p| pools.contains(p)) else { continue };
        // Creation times are whole seconds: a node created in the notice's second was there,
        // unless a boost of its group was decided by then: it may be that boost's own capacity
        // (the interrupted node's replacement, registered in the notice's second).
        if since.get(pool).is_none_or(|t| node.created > t.whole_second()) {
            continue;
        }
        if ledger.records.iter().any(|r| &r.group == group && node.created >= r.at.whole_second()) {
            continue;
        }
        if facts.lifecycle != InstanceLifecycle::Spot || covered.contains_key(instance) || risky.contains(instance) {
            continue;
        }
        if !snapshot.groups.get(group).is_some_and(|g| g.served() && g.launch.reach_beyond(&pools)) {
            continue;
        }
        if identity::verify(snapshot, &contested, node).is_err() {
            continue;
        }
        mates.entry(group).or_default().push((AtRisk::pool_mate(node, instance, now), node, pool));
    }
    let facts = group_facts(snapshot, ledger);
    let mut boosts = Vec::new();
    // The groups with the most pool-mates first, so a short budget goes where the risk is largest.
    let mut by_size: Vec<(&GroupName, Vec<Mate<'_>>)> = mates.into_iter().collect();
    by_size.sort_by(|(a, x), (b, y)| y.len().cmp(&x.len()).then_with(|| a.cmp(b)));
    for (name, mut group_mates) in by_size {
        if budget == 0 {
            break;
        }
        let Some(group) = snapshot.groups.get(name) else { continue };
        group_mates.sort_by(|(a, _, _), (b, _, _)| a.instance.cmp(&b.instance));
        let pending: Vec<(&AtRisk, Option<&Node>)> = group_mates.iter().map(|(r, n, _)| (r, Some(*n))).collect();
        let Some(mut boost) = plan_ahead(group, &facts, &pending, budget, policy, now) else { continue };
        let pools: BTreeSet<Pool> = group_mates
            .iter()
            .filter(|(r, _, _)| boost.record.instances.contains(&r.instance))
            .map(|(_, _, p)| (*p).clone())
            .collect();
        let mates = u32::try_from(boost.record.instances.len()).unwrap_or(u32::MAX);
        boost.reason = BoostReason::AheadOfPool { needed: boost.record.added, mates, pools: pools.clone() };
        boost.record.ahead = Some(Ahead { pools, until: now.plus(policy.pool_mate_window), returning: false });
        budget = budget.saturating_sub(boost.record.added);
        boosts.push(boost);
    }
    boosts
}

/// The edits that end the boosts ahead whose window is over: one whose pool-mates all stayed quiet
/// starts returning its nodes, and closes once each is settled; in one where some were noticed,
/// the others are released.
pub(crate) fn release_quiet_pools(
    snapshot: &Snapshot,
    open: &BoostLedger,
    at_risk: &AtRiskSet,
    now: Timestamp,
) -> Vec<LedgerEdit> {
    let over = open.windows_over(now, |r| r.ahead.as_ref().map(|a| a.until));
    if over.is_empty() {
        return Vec::new();
    }
    let risky = at_risk.instances();
    let claims = claim_replacements(snapshot, open, at_risk);
    let mut edits = Vec::new();
    for k in over {
        let record = &open.records[k];
        let quiet: BTreeSet<_> =
            record.instances.iter().filter(|i| !risky.contains(*i) && record.unaccounted(i)).cloned().collect();
        let returning = record.ahead.as_ref().is_some_and(|a| a.returning);
        if !returning && quiet.len() == record.instances.len() {
            edits.push(LedgerEdit::ReturnUnneeded(record.id(), Unneeded::Ahead));
        } else if !returning {
            edits.push(LedgerEdit::Release { id: record.id(), instances: quiet });
        } else if record.giving_back.is_empty() && record.instances.iter().all(|i| record.settled.contains(i)) {
            // Each pool-mate's share given back (or found nothing to give): the rest is Cluster
            // Autoscaler's, and a later notice boosts them afresh.
            edits.push(LedgerEdit::Close { id: record.id(), spent: claims[k].nodes.clone() });
        }
    }
    edits
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::draining::plan_draining;
    use crate::core::model::{BoostRecord, Group, InstanceId, NodeName, Signal};
    use crate::core::scaling::{plan_scaling, Acting};
    use crate::core::{DrainState, GiveBackHow};

    const NOW: Timestamp = Timestamp::from_millis(60_000);

    /// A boost ahead for pool-mates in m5.large/us-east-1a whose window ends `secs` after `NOW`.
    fn ahead_until(secs: u64) -> Ahead {
        Ahead { pools: [pool("us-east-1a")].into(), until: NOW.plus(Duration::from_secs(secs)), returning: false }
    }

    fn pool(zone: &str) -> Pool {
        Pool { instance_type: "m5.large".into(), zone: zone.into() }
    }

    /// Groups `a` and `b`. In m5.large/us-east-1a: a's n1 (noticed at 50 s, EC2 confirms), n2 and
    /// n3, and b's m1; a's n4 runs in us-east-1b. Two pods each, four fit a new node.
    fn storm_start() -> Snapshot {
        let mut s = Snapshot::default()
            .with_group(Group::test("a").desired(4).max(20))
            .with_group(Group::test("b").desired(1).max(20))
            .with_signal(Signal::interruption("n1", 50_000));
        for (name, group, zone) in [
            ("n1", "a", "us-east-1a"),
            ("n2", "a", "us-east-1a"),
            ("n3", "a", "us-east-1a"),
            ("n4", "a", "us-east-1b"),
            ("m1", "b", "us-east-1a"),
        ] {
            let node = Node::test(name, group).with_pods(2, 500, 2 << 30);
            s = s.with_node(node);
            let instance = InstanceId::from(format!("i-{name}").as_str());
            s.instances.get_mut(&instance).unwrap().pool = Some(pool(zone));
        }
        s.nodes.get_mut(&NodeName::from("n1")).unwrap().cordoned = true;
        s.spot_interrupted.insert("i-n1".into());
        s
    }

    fn ahead(plan: &crate::core::ScalingPlan) -> Vec<(&str, Vec<&str>, u32)> {
        plan.boosts
            .boosts
            .iter()
            .filter(|b| b.record.ahead.is_some())
            .map(|b| (b.group.as_str(), b.record.instances.iter().map(InstanceId::as_str).collect(), b.record.added))
            .collect()
    }

    #[test]
    fn a_confirmed_interruption_boosts_its_pool_mates_groups_ahead_one_write_per_group() {
        let s = storm_start();
        let p = plan_scaling(&s, &Policy::default(), NOW, Acting::Leader);
        // a is boosted for n1 in this pass: its pool-mates wait for the next one; b's m1 goes now.
        assert_eq!(p.boosts.boosts.iter().filter(|b| b.group.as_str() == "a").count(), 1);
        assert_eq!(ahead(&p), vec![("b", vec!["i-m1"], 1)]);
        let b = p.boosts.boosts.iter().find(|b| b.group.as_str() == "b").unwrap();
        assert_eq!(b.record.ahead, Some(ahead_until(180)));
        assert!(b.reason.to_string().contains("ahead for 1 pool-mate node in m5.large in us-east-1a"), "{}", b.reason);

        // Next pass, with n1's boost and b's in the ledger: a's n2 and n3, not n4 (another zone).
        let mut s = s;
        for b in &p.boosts.boosts {
            s.ledger.record(BoostRecord { raising_to: None, ..b.record.clone() });
        }
        let p = plan_scaling(&s, &Policy::default(), NOW.plus(Duration::from_secs(1)), Acting::Leader);
        assert_eq!(ahead(&p), vec![("a", vec!["i-n2", "i-n3"], 1)], "two nodes' pods fit one new node");
    }

    #[test]
    fn nodes_that_joined_after_the_interruption_are_never_pool_mates_so_no_boost_ahead_buys_the_next() {
        let mut s = storm_start();
        // m1 joined in the second the notice came (Node times are whole seconds): it was there.
        s.nodes.get_mut(&NodeName::from("m1")).unwrap().created = Timestamp::from_millis(50_000);
        s.signals[0].observed_at = Timestamp::from_millis(50_400);
        let p = plan_scaling(&s, &Policy::default(), NOW, Acting::Leader);
        assert_eq!(ahead(&p), vec![("b", vec!["i-m1"], 1)]);
        for b in &p.boosts.boosts {
            s.ledger.record(BoostRecord { raising_to: None, ..b.record.clone() });
        }
        let later = NOW.plus(Duration::from_secs(1));
        let p = plan_scaling(&s, &Policy::default(), later, Acting::Leader);
        assert_eq!(ahead(&p), vec![("a", vec!["i-n2", "i-n3"], 1)]);
        for b in &p.boosts.boosts {
            s.ledger.record(BoostRecord { raising_to: None, ..b.record.clone() });
        }
        // What those boosts launched joins, in the same pool, 30 s later: new capacity, no risk.
        for (name, group) in [("r1", "a"), ("r2", "a"), ("r3", "b")] {
            s = s.with_node(Node::test(name, group).with_pods(1, 100, 1 << 20).created_at(80_000));
            s.instances.get_mut(&InstanceId::from(format!("i-{name}").as_str())).unwrap().pool =
                Some(pool("us-east-1a"));
        }
        let p = plan_scaling(&s, &Policy::default(), NOW.plus(Duration::from_secs(30)), Acting::Leader);
        assert!(ahead(&p).is_empty(), "{:?}", ahead(&p));
    }

    #[test]
    fn the_interrupted_node_s_replacement_registered_in_the_notice_s_second_is_no_pool_mate() {
        let mut s = storm_start();
        s.signals[0].observed_at = Timestamp::from_millis(50_400);
        let p = plan_scaling(&s, &Policy::default(), NOW, Acting::Leader);
        for b in &p.boosts.boosts {
            s.ledger.record(BoostRecord { raising_to: None, at: Timestamp::from_millis(50_600), ..b.record.clone() });
        }
        // The victim's replacement joins group b's pool in the same second as the notice.
        s = s.with_node(Node::test("r9", "b").with_pods(1, 100, 1 << 20).created_at(50_000));
        s.instances.get_mut(&InstanceId::from("i-r9")).unwrap().pool = Some(pool("us-east-1a"));
        let later = NOW.plus(Duration::from_secs(1));
        let p = plan_scaling(&s, &Policy::default(), later, Acting::Leader);
        assert!(ahead(&p).iter().all(|(_, instances, _)| !instances.contains(&"i-r9")), "{:?}", ahead(&p));
    }

    #[test]
    fn a_pool_mate_whose_pods_the_view_left_out_is_named_for_them_and_boosted_once_they_are_known() {
        let mut s = storm_start();
        let m1 = s.nodes.remove(&NodeName::from("m1")).unwrap().pods_unknown();
        s.nodes.insert(m1.name.clone(), m1);
        assert_eq!(pods_needed(&s), BTreeSet::from([NodeName::from("m1")]), "n4 is in another pool");
        assert!(ahead(&plan_scaling(&s, &Policy::default(), NOW, Acting::Leader)).is_empty(), "sized by its pods");
        s.spot_interrupted.clear();
        assert!(pods_needed(&s).is_empty(), "no confirmed interruption, no pods needed");
    }

    #[test]
    fn nothing_is_boosted_ahead_on_a_notice_ec2_does_not_confirm_nor_past_the_budget() {
        let mut s = storm_start();
        s.spot_interrupted.clear();
        assert!(ahead(&plan_scaling(&s, &Policy::default(), NOW, Acting::Leader)).is_empty(), "a forged Event");

        let s = storm_start();
        let off = Policy { pool_mate_boost_budget: 0, ..Policy::default() };
        assert!(ahead(&plan_scaling(&s, &off, NOW, Acting::Leader)).is_empty());
        let mut spent = storm_start();
        let mut open = BoostRecord::test("a", &["i-n4"], 10, 0);
        open.ahead = Some(ahead_until(60));
        spent.ledger.record(open);
        assert!(ahead(&plan_scaling(&spent, &Policy::default(), NOW, Acting::Leader)).is_empty(), "10 of 10 ahead");
    }

    #[test]
    fn a_noticed_node_left_behind_once_its_instance_went_boosts_nothing_ahead_again() {
        let mut s = storm_start();
        assert_eq!(ahead(&plan_scaling(&s, &Policy::default(), NOW, Acting::Leader)).len(), 1);
        s.nodes.get_mut(&NodeName::from("n1")).unwrap().ready = false;
        assert!(ahead(&plan_scaling(&s, &Policy::default(), NOW, Acting::Leader)).is_empty());
        let m1 = s.nodes.remove(&NodeName::from("m1")).unwrap().pods_unknown();
        s.nodes.insert(m1.name.clone(), m1);
        assert!(pods_needed(&s).is_empty(), "no pool at risk, no pods needed");
    }

    #[test]
    fn a_group_that_launches_only_in_the_interrupted_pool_is_not_boosted_ahead() {
        let mut s = storm_start();
        let only_there = launching_in(&["m5.large"], &["us-east-1a"]);
        s.groups.get_mut(&GroupName::from("b")).unwrap().launch = only_there;
        assert!(ahead(&plan_scaling(&s, &Policy::default(), NOW, Acting::Leader)).is_empty());
        s.groups.get_mut(&GroupName::from("b")).unwrap().launch =
            launching_in(&["m5.large", "m5a.large"], &["us-east-1a"]);
        assert_eq!(
            ahead(&plan_scaling(&s, &Policy::default(), NOW, Acting::Leader)).len(),
            1,
            "m5a.large is another pool"
        );
    }

    fn launching_in(types: &[&str], zones: &[&str]) -> crate::core::LaunchOptions {
        crate::core::LaunchOptions {
            instance_types: types.iter().map(|t| t.to_string()).collect(),
            zones: zones.iter().map(|z| z.to_string()).collect(),
        }
    }

    #[test]
    fn pool_mates_are_never_drained_on_the_pool_s_risk_and_their_own_notice_drains_onto_the_capacity() {
        let mut s = storm_start();
        s.signals.clear();
        s.spot_interrupted.clear();
        let mut record = BoostRecord { before: 1, ..BoostRecord::test("b", &["i-m1"], 1, 60_000) };
        record.ahead = Some(ahead_until(180));
        s.ledger.record(record);
        s = s.with_node(Node::test("r1", "b").created_at(61_000));
        let later = NOW.plus(Duration::from_secs(30));
        let p = plan_draining(&s, &BTreeSet::new(), &DrainState::default(), &Policy::default(), later);
        assert!(p.drains.batches.is_empty() && p.evictions.is_empty(), "{p:?}");

        s = s.with_signal(Signal::interruption("m1", 89_000));
        s.spot_interrupted.insert("i-m1".into());
        let p = plan_draining(&s, &BTreeSet::new(), &DrainState::default(), &Policy::default(), later);
        let target = &p.drains.batches[0].nodes[0];
        assert_eq!((target.node.as_str(), target.decrement), ("m1", true), "its replacement is Ready: {p:?}");
    }

    #[test]
    fn at_the_window_s_end_quiet_pool_mates_give_their_nodes_back_and_a_noticed_one_keeps_its_own() {
        // Boosted 4 → 5 ahead of n2 and n3; r1 joined for them, empty. Neither was noticed.
        let mut s = storm_start();
        s.signals.clear();
        s.spot_interrupted.clear();
        let mut record = BoostRecord { before: 4, ..BoostRecord::test("a", &["i-n2", "i-n3"], 1, 60_000) };
        record.ahead = Some(ahead_until(180));
        s.ledger.record(record);
        s.groups.get_mut(&GroupName::from("a")).unwrap().desired = 5;
        let members = ["i-n1", "i-n2", "i-n3", "i-n4", "i-r1"];
        s.groups.get_mut(&GroupName::from("a")).unwrap().members = Some(members.map(InstanceId::from).into());
        s = s.with_node(Node::test("r1", "a").created_at(70_000));
        let before = NOW.plus(Duration::from_secs(179));
        let at = NOW.plus(Duration::from_secs(180));
        assert!(plan_scaling(&s, &Policy::default(), before, Acting::Leader).closes.is_empty());
        let p = plan_scaling(&s, &Policy::default(), at, Acting::Leader);
        assert!(matches!(p.closes[..], [LedgerEdit::ReturnUnneeded(_, Unneeded::Ahead)]), "{:?}", p.closes);

        // Returning: its node goes back through the emptiest, newest node (r1), and the other
        // pool-mate has nothing left to give; once both are settled, the boost closes.
        p.closes.iter().for_each(|e| _ = e.apply(&mut s.ledger));
        let p = plan_scaling(&s, &Policy::default(), at, Acting::Leader);
        let chosen: Vec<_> = p.give_backs.iter().map(|g| (g.reclaimed.as_str(), g.how.clone())).collect();
        assert!(
            matches!(&chosen[..], [(_, GiveBackHow::Drain(n)), (_, GiveBackHow::AtFloor)] if n.node == Some("r1".into())),
            "{chosen:?}"
        );
        p.give_backs.iter().for_each(|g| _ = g.edit().apply(&mut s.ledger));
        for i in ["i-n2", "i-n3"] {
            s.ledger.records[0].settled.insert(i.into());
        }
        s.ledger.records[0].giving_back.clear();
        let p = plan_scaling(&s, &Policy::default(), at, Acting::Leader);
        assert!(matches!(p.closes[..], [LedgerEdit::Close { .. }]), "{:?}", p.closes);

        // Had n2 got its own notice in the window, it stays covered and n3 alone is released.
        let mut s = storm_start();
        s.spot_interrupted.clear();
        s.signals = vec![Signal::interruption("n2", 100_000)];
        let mut record = BoostRecord { before: 4, ..BoostRecord::test("a", &["i-n2", "i-n3"], 1, 60_000) };
        record.ahead = Some(ahead_until(180));
        s.ledger.record(record);
        let p = plan_scaling(&s, &Policy::default(), at, Acting::Leader);
        let record = &p.ledger.records[0];
        assert_eq!(record.instances, ["i-n2"].map(InstanceId::from).into());
        assert_eq!(record.ahead, None, "an ordinary boost from now on");
    }
}
