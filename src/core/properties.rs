//! Property tests of the core's invariants over random clusters, signals, ledgers and drain
//! progress.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use super::*;

const GI: u64 = 1 << 30;
const NOW: Timestamp = Timestamp::from_millis(3_600_000);

#[derive(Debug, Clone)]
struct Case {
    snapshot: Snapshot,
    drains: DrainState,
    policy: Policy,
}

/// One pass of both workers' entry points, exactly as the workers call them.
#[derive(Debug, PartialEq)]
struct Pass {
    scaling: ScalingPlan,
    draining: DrainingPlan,
}

fn plan(snapshot: &Snapshot, drains: &DrainState, policy: &Policy, now: Timestamp) -> Pass {
    let protected = BTreeSet::new();
    Pass {
        scaling: plan_scaling(snapshot, policy, now, Acting::Leader),
        draining: plan_draining(snapshot, &protected, drains, policy, now),
    }
}

fn node_strategy(group: usize, index: usize) -> impl Strategy<Value = Node> {
    (
        any::<bool>(),
        any::<bool>(),
        prop::bool::weighted(0.1),
        0..3_600_000i64,
        prop::collection::vec((50u64..3000, 1u64..8), 0..8),
    )
        .prop_map(move |(ready, cordoned, deleting, created, pods)| Node {
            name: NodeName::from(format!("g{group}-n{index}")),
            instance: Some(InstanceId::from(format!("i-g{group}-n{index}"))),
            group: Some(GroupName::from(format!("g{group}"))),
            ready,
            cordoned,
            deleting_by_ca: deleting,
            cordoned_since: None,
            scale_down_disabled: false,
            opted_out: false,
            created: Timestamp::from_millis(created),
            allocatable: Resources::new(4000, 16 * GI),
            pods: pods
                .into_iter()
                .enumerate()
                .map(|(k, (cpu, mem))| Pod {
                    uid: format!("u-{group}-{index}-{k}").into(),
                    namespace: "default".into(),
                    name: format!("p-{group}-{index}-{k}").into(),
                    requests: Resources::new(cpu, mem * GI / 2),
                    class: if k % 5 == 4 { PodClass::DaemonSet } else { PodClass::Ordinary },
                    opt_out: None,
                    bare: false,
                    owner: None,
                    grace_seconds: 30,
                })
                .collect(),
            internal_ips: Vec::new(),
            pods_known: true,
        })
}

fn group_strategy(index: usize) -> impl Strategy<Value = (Group, Vec<Node>)> {
    (
        0u32..4,
        0u32..20,
        0u32..20,
        prop::option::of((0u32..25, prop::option::of(Just("timeout".to_string())))),
        0usize..10,
    )
        .prop_flat_map(move |(min, desired, max_extra, ca, n_nodes)| {
            let nodes = (0..n_nodes).map(|k| node_strategy(index, k)).collect::<Vec<_>>();
            let max = min.max(desired) + max_extra % 6;
            let group = Group {
                name: GroupName::from(format!("g{index}")),
                min,
                max,
                desired: desired.min(max).max(min),
                node_allocatable: if index.is_multiple_of(2) { Some(Resources::new(4000, 16 * GI)) } else { None },
                ca: ca.map(|(target, backoff)| CaGroupView {
                    cloud_provider_target: target,
                    backoff,
                    healthy: true,
                    ready: None,
                }),
                capacity_rebalance: index % 3 == 2,
                az_rebalance: false,
                members: None,
                excluded: false,
                foreign: false,
                eks_node_group: None,
                fallbacks: Vec::new(),
                tenant_namespace: None,
                launch: Default::default(),
                rebalance_policy: None,
            };
            (Just(group), nodes)
        })
}

fn case_strategy() -> impl Strategy<Value = Case> {
    let groups = (1usize..4).prop_flat_map(|n| (0..n).map(group_strategy).collect::<Vec<_>>());
    (groups, prop::collection::vec((0usize..40, 0i64..3_600_000, 0u8..6), 0..30), any::<u64>(), policy_strategy())
        .prop_map(|(groups, raw_signals, seed, policy)| {
            let mut snapshot = Snapshot::default();
            let mut all_nodes = Vec::new();
            for (group, nodes) in groups {
                snapshot.groups.insert(group.name.clone(), group);
                all_nodes.extend(nodes);
            }
            for n in &all_nodes {
                snapshot.describe(n);
                snapshot.nodes.insert(n.name.clone(), n.clone());
            }
            if !all_nodes.is_empty() {
                for (pick, at, kind) in raw_signals {
                    let node = &all_nodes[pick % all_nodes.len()];
                    let kinds = [
                        SignalKind::Rebalance,
                        SignalKind::SpotInterruption,
                        SignalKind::Scheduled,
                        SignalKind::AsgLifecycle,
                        SignalKind::StateChange,
                        SignalKind::Unknown,
                    ];
                    snapshot.signals.push(Signal {
                        instance: node.instance.clone().unwrap(),
                        node: node.name.clone(),
                        kind: kinds[kind as usize],
                        observed_at: Timestamp::from_millis(at),
                        evidence: Evidence::NodeTaint,
                        notice_deadline: None,
                    });
                }
            }
            // A ledger from an earlier pass over part of the signals, and some drain progress.
            let earlier = plan(&snapshot, &DrainState::default(), &policy, Timestamp::from_millis(1_800_000));
            for (k, boost) in earlier.scaling.boosts.boosts.into_iter().enumerate() {
                if (seed >> (k % 64)) & 1 == 1 {
                    let mut record = boost.record;
                    // Some of what it added may already have been given back.
                    record.returned = (seed >> ((k + 7) % 64)) as u32 % (record.added + 1);
                    snapshot.ledger.record(record);
                }
            }
            let mut drains = DrainState::default();
            let mut reclaimed = Vec::new();
            for (k, record) in snapshot.ledger.records.iter().enumerate() {
                for (j, instance) in record.instances.iter().enumerate() {
                    let node = snapshot.nodes.values().find(|n| n.instance.as_ref() == Some(instance)).unwrap();
                    match (seed >> ((k + j) % 60)) & 3 {
                        0 => {
                            let started =
                                Timestamp::from_millis(NOW.as_millis() - i64::try_from(seed % 600).unwrap() * 1000);
                            drains.in_progress.insert(
                                node.name.clone(),
                                DrainStarted {
                                    group: record.group.clone(),
                                    instance: instance.clone(),
                                    started_at: started,
                                    decrement: k % 2 == 0,
                                    deadline: None,
                                    gives_back: None,
                                },
                            );
                            // Some pods already evicted, a backoff running, our cordon seen or not.
                            let bits = seed >> ((k + j + 3) % 60);
                            let evicted = node.pods.iter().take((bits % 3) as usize).map(|p| p.uid.clone()).collect();
                            let retry_at = (bits & 4 != 0).then(|| NOW.plus(std::time::Duration::from_secs(10)));
                            drains.evictions.insert(
                                node.name.clone(),
                                NodeEvictions { evicted, retry_at, seen_cordoned: bits & 8 != 0, ..Default::default() },
                            );
                        }
                        1 => {
                            drains.finished.insert(instance.clone(), FinishedDrain::Drained);
                        }
                        2 => {}
                        _ => reclaimed.push(node.name.clone()),
                    }
                }
            }
            // AWS took some boosted instances first: gone from the cluster and, where Auto Scaling
            // lists its members, from the group's list.
            for name in reclaimed {
                snapshot.nodes.remove(&name);
            }
            for (k, group) in snapshot.groups.values_mut().enumerate() {
                if (seed >> ((k + 50) % 64)) & 1 == 1 {
                    let name = &group.name;
                    let members = snapshot
                        .nodes
                        .values()
                        .filter(|n| n.group.as_ref() == Some(name))
                        .filter_map(|n| n.instance.clone());
                    group.members = Some(members.collect());
                }
            }
            Case { snapshot, drains, policy }
        })
}

fn policy_strategy() -> impl Strategy<Value = Policy> {
    (any::<bool>(), 0u32..50, 0u32..3, 1u32..12, 0u32..5, 1u32..5, any::<bool>(), 0usize..3).prop_map(
        |(count, over, extra, budget, ok, concurrent, terminate, rebalance)| Policy {
            sizing: if count { SizingMode::Count } else { SizingMode::Pods },
            over_subscription_percent: over,
            extra_nodes: extra,
            max_boost_per_group: budget,
            ca_ok_total_unready_count: ok,
            max_concurrent_drains: concurrent,
            terminate_after_drain_timeout: terminate,
            boost_capacity_rebalance_groups: count,
            rebalance_policy: RebalancePolicy::ALL[rebalance],
            ..Policy::default()
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn boosts_never_lower_desired_nor_exceed_max(case in case_strategy()) {
        let p = plan(&case.snapshot, &case.drains, &case.policy, NOW);
        for b in &p.scaling.boosts.boosts {
            let g = &case.snapshot.groups[&b.group];
            prop_assert!(b.to >= g.desired, "{b:?} lowers {g:?}");
            prop_assert!(!b.writes() || b.to <= g.max, "{b:?} exceeds max of {g:?}");
        }
    }

    #[test]
    fn no_instance_is_ever_boosted_twice(case in case_strategy()) {
        let p = plan(&case.snapshot, &case.drains, &case.policy, NOW);
        let mut seen = BTreeSet::new();
        for b in &p.scaling.boosts.boosts {
            for i in &b.record.instances {
                prop_assert!(!case.snapshot.ledger.covers(i), "{i} was already boosted");
                prop_assert!(seen.insert(i.clone()), "{i} boosted twice in one plan");
            }
        }
        // Persisting the boosts and planning again boosts none of them.
        let mut next = case.snapshot.clone();
        for b in p.scaling.boosts.boosts {
            next.ledger.record(b.record);
        }
        let again = plan(&next, &case.drains, &case.policy, NOW);
        for b in &again.scaling.boosts.boosts {
            prop_assert!(b.record.instances.iter().all(|i| !seen.contains(i)));
        }
    }

    #[test]
    fn drains_never_exceed_the_concurrency_budget(case in case_strategy()) {
        let p = plan(&case.snapshot, &case.drains, &case.policy, NOW);
        let mut per_group: BTreeMap<&GroupName, u32> = BTreeMap::new();
        for (node, d) in &case.drains.in_progress {
            if !p.draining.drains.timed_out.iter().any(|t| &t.node == node) {
                *per_group.entry(&d.group).or_default() += 1;
            }
        }
        for batch in &p.draining.drains.batches {
            prop_assert!(!batch.nodes.is_empty());
            // Notices with a deadline and give-backs are not voluntary drains: the budget is for
            // the rest.
            let voluntary = batch.nodes.iter().filter(|t| t.deadline.is_none() && t.gives_back.is_none()).count() as u32;
            let total = per_group.get(&batch.group).copied().unwrap_or(0) + voluntary;
            prop_assert!(voluntary == 0 || total <= case.policy.max_concurrent_drains, "{batch:?} over budget");
        }
    }

    #[test]
    fn no_node_drains_before_its_replacements_are_ready(case in case_strategy()) {
        let p = plan(&case.snapshot, &case.drains, &case.policy, NOW);
        let mut claimed = BTreeSet::new();
        for claim in &p.draining.drains.claims {
            let record = case.snapshot.ledger.records.iter().find(|r| r.instances == claim.instances).unwrap();
            for name in &claim.nodes {
                let n = &case.snapshot.nodes[name];
                prop_assert!(n.ready && !n.cordoned && n.created >= record.at, "{n:?} cannot replace {record:?}");
                prop_assert!(claimed.insert(name.clone()), "{name} claimed twice");
            }
        }
        for target in p.draining.drains.batches.iter().flat_map(|b| &b.nodes) {
            prop_assert!(!case.snapshot.nodes[&target.node].deleting_by_ca);
            if target.gives_back.is_some() {
                continue;
            }
            let claim = p.draining.drains.claims.iter().find(|c| c.instances.contains(&target.instance));
            match target.deadline {
                // A notice drains early only once its deadline leaves no more time to wait.
                Some(_) if target.early => prop_assert!(claim.is_none_or(|c| !c.complete()), "{target:?}"),
                _ => prop_assert!(claim.is_some_and(Claim::complete), "{target:?} drains with {claim:?}"),
            }
        }
    }

    #[test]
    fn once_an_interruption_arrives_a_standby_drains_it_no_later_than_replacing_would(case in case_strategy()) {
        // The same ledger, once as planned (standing by where the policy chose to) and once with
        // every standby answered by replacing: every node with a notice drained by the second is
        // drained by the first, in the same pass and as it would be (decrement, deadline).
        // The interruption comes for the first instance of every standby.
        let mut snapshot = case.snapshot.clone();
        let noticed: Vec<InstanceId> = snapshot
            .ledger
            .records
            .iter()
            .filter(|r| r.standby.is_some())
            .filter_map(|r| r.instances.iter().next().cloned())
            .collect();
        for instance in noticed {
            let Some(node) = snapshot.nodes.values().find(|n| n.instance.as_ref() == Some(&instance)) else { continue };
            snapshot.signals.push(Signal {
                instance: instance.clone(),
                node: node.name.clone(),
                kind: SignalKind::SpotInterruption,
                observed_at: NOW.minus(std::time::Duration::from_secs(10)),
                evidence: Evidence::NodeTaint,
                notice_deadline: None,
            });
            snapshot.spot_interrupted.insert(instance);
        }
        let mut replaced = snapshot.clone();
        replaced.ledger.records.iter_mut().for_each(|r| r.standby = None);
        let standing = plan(&snapshot, &case.drains, &case.policy, NOW).draining;
        let replacing = plan(&replaced, &case.drains, &case.policy, NOW).draining;
        let noticed = |p: &DrainingPlan| -> BTreeMap<NodeName, (bool, Option<Timestamp>)> {
            p.drains
                .batches
                .iter()
                .flat_map(|b| &b.nodes)
                .filter(|t| t.deadline.is_some())
                .map(|t| (t.node.clone(), (t.decrement, t.deadline)))
                .collect()
        };
        let (standing, replacing) = (noticed(&standing), noticed(&replacing));
        for (node, how) in &replacing {
            prop_assert_eq!(standing.get(node), Some(how), "{} drains later standing by", node);
        }
    }

    #[test]
    fn a_lapsed_recommendation_is_never_boosted_again_unless_a_new_notice_comes(case in case_strategy()) {
        // Passes a window apart, each saving what the last decided (the standbys' spares given
        // back as soon as they return), with an interruption for the first instance of every
        // standby after the first pass: an instance whose standby lapsed, and which nothing but
        // a recommendation speaks for, is never in a boost again, not even in the pass that
        // lapses it.
        let policy = Policy { rebalance_policy: RebalancePolicy::Standby, ..case.policy.clone() };
        let mut snapshot = case.snapshot.clone();
        let mut now = NOW;
        let mut lapsed: BTreeSet<InstanceId> = snapshot.ledger.lapsed.keys().cloned().collect();
        for pass in 0..5 {
            let p = plan_scaling(&snapshot, &policy, now, Acting::Leader);
            lapsed.extend(p.ledger.lapsed.keys().cloned());
            let recommended_only = |i: &InstanceId| {
                snapshot.signals.iter().filter(|s| &s.instance == i).all(|s| s.kind == SignalKind::Rebalance)
            };
            for b in &p.boosts.boosts {
                for i in &b.record.instances {
                    prop_assert!(!(lapsed.contains(i) && recommended_only(i)), "pass {}: {} boosted after its lapse", pass, i);
                }
            }
            snapshot.ledger = p.ledger.clone();
            for b in &p.boosts.boosts {
                snapshot.ledger.record(BoostRecord { raising_to: None, ..b.record.clone() });
                if let Some(g) = snapshot.groups.get_mut(&b.group) {
                    g.desired = g.desired.max(b.to);
                }
            }
            let returning: Vec<InstanceId> = snapshot
                .ledger
                .records
                .iter()
                .filter(|r| r.standby.as_ref().is_some_and(|s| s.returning))
                .flat_map(|r| r.instances.iter().cloned())
                .collect();
            for i in returning {
                LedgerEdit::Settle(i, true).apply(&mut snapshot.ledger);
            }
            if pass == 0 {
                let noticed: Vec<InstanceId> = snapshot
                    .ledger
                    .records
                    .iter()
                    .filter(|r| r.standby.is_some() && r.instances.len() > 1)
                    .filter_map(|r| r.instances.iter().next().cloned())
                    .collect();
                for instance in noticed {
                    let Some(node) = snapshot.nodes.values().find(|n| n.instance.as_ref() == Some(&instance)) else { continue };
                    let node = node.name.clone();
                    snapshot.signals.push(Signal {
                        instance: instance.clone(),
                        node,
                        kind: SignalKind::SpotInterruption,
                        observed_at: now,
                        evidence: Evidence::NodeTaint,
                        notice_deadline: None,
                    });
                    snapshot.spot_interrupted.insert(instance);
                }
            }
            now = now.plus(policy.standby_max).plus(std::time::Duration::from_secs(1));
        }
    }

    #[test]
    fn terminations_never_give_back_more_than_a_boost_added(case in case_strategy()) {
        let p = plan(&case.snapshot, &case.drains, &case.policy, NOW);
        for record in &case.snapshot.ledger.records {
            let promised = case
                .drains
                .in_progress
                .values()
                .filter(|d| d.decrement && record.instances.contains(&d.instance))
                .count() as u32;
            let planned = p
                .draining
                .drains
                .batches
                .iter()
                .flat_map(|b| &b.nodes)
                .filter(|t| t.decrement && record.instances.contains(&t.instance))
                .count() as u32;
            // Drains already under way keep the promise they were started with, and nodes chosen to
            // give back reclaimed instances hold theirs; new ones only fill what is left.
            let giving = record.giving_back.len() as u32;
            prop_assert!(planned == 0 || record.returned + promised + giving + planned <= record.added, "{record:?}");
        }
    }

    #[test]
    fn planning_is_deterministic_and_order_independent(case in case_strategy()) {
        let a = plan(&case.snapshot, &case.drains, &case.policy, NOW);
        prop_assert_eq!(&a, &plan(&case.snapshot, &case.drains, &case.policy, NOW));
        let mut reversed = case.snapshot.clone();
        reversed.signals.reverse();
        prop_assert_eq!(&a, &plan(&reversed, &case.drains, &case.policy, NOW));
    }

    #[test]
    fn the_ledger_kept_closes_only_finished_boosts(case in case_strategy()) {
        let p = plan(&case.snapshot, &case.drains, &case.policy, NOW);
        let before: BTreeSet<_> = case.snapshot.ledger.records.iter().map(BoostRecord::id).collect();
        let alive: BTreeSet<&InstanceId> = case.snapshot.nodes.values().filter_map(|n| n.instance.as_ref()).collect();
        for r in &p.scaling.ledger.records {
            prop_assert!(before.contains(&r.id()), "{r:?} appeared from nowhere");
        }
        for r in &case.snapshot.ledger.records {
            if r.instances.iter().any(|i| alive.contains(i)) {
                prop_assert!(p.scaling.ledger.records.iter().any(|k| k.is(&r.id())), "{r:?} closed with a node left");
            }
        }
        for spent in &p.scaling.ledger.spent {
            prop_assert!(case.snapshot.nodes.contains_key(spent), "{spent} is spent but gone");
        }
        let covered = case.snapshot.ledger.covered();
        let mut chosen_per_group: BTreeMap<&GroupName, u32> = BTreeMap::new();
        for g in &p.scaling.give_backs {
            let group = &case.snapshot.groups[&g.group];
            let GiveBackHow::Drain(chosen) = &g.how else { continue };
            match &chosen.node {
                Some(node) => {
                    let node = &case.snapshot.nodes[node];
                    prop_assert!(
                        node.ready && !node.cordoned && node.instance.as_ref() == Some(&chosen.instance),
                        "{node:?}"
                    );
                }
                None => {
                    // A joining instance: no Ready Node runs it, and none claiming it carries a pod.
                    let claiming = case.snapshot.nodes.values().filter(|n| n.instance.as_ref() == Some(&chosen.instance));
                    for n in claiming {
                        prop_assert!(!n.ready && !n.pods.iter().any(|p| p.class.is_evictable()), "{n:?}");
                    }
                }
            }
            prop_assert!(group.members.as_ref().is_some_and(|m| m.contains(&chosen.instance)), "{g:?} not a member");
            prop_assert!(!covered.contains(&chosen.instance), "{g:?} chose an at-risk node");
            *chosen_per_group.entry(&g.group).or_default() += 1;
        }
        for (name, chosen) in chosen_per_group {
            let group = &case.snapshot.groups[name];
            prop_assert!(group.desired.saturating_sub(chosen) >= group.min, "{chosen} chosen in {group:?}");
        }
    }

    #[test]
    fn edits_saved_on_a_ledger_that_changed_since_the_plan_never_boost_twice_nor_return_more_than_added(
        case in case_strategy(),
        other_saved_first in any::<bool>(),
        rotate in 0usize..8,
        dropped in prop::collection::vec(any::<bool>(), 0..8),
        returns in prop::collection::vec((0usize..8, 0usize..4), 0..12),
        retried in any::<bool>(),
    ) {
        let p = plan(&case.snapshot, &case.drains, &case.policy, NOW);
        // Boosts whose write's answer was lost, resolved from their groups as read.
        let live = case.snapshot.groups.values().map(|g| (g.name.clone(), g.desired)).collect();
        let (mut edits, _) = resolve_raises(&case.snapshot.ledger, &live);
        edits.extend(p.scaling.closes.iter().cloned());
        edits.extend(p.scaling.boosts.boosts.iter().map(|b| LedgerEdit::Open(b.record.clone())));
        edits.extend(p.scaling.fallbacks.iter().map(|f| f.moving(NOW)));

        // What happened to the ledger between the plan and the save.
        let mut held = case.snapshot.ledger.clone();
        if other_saved_first {
            // Another replica planned a second later and saved its boosts first.
            let other = plan(&case.snapshot, &case.drains, &case.policy, NOW.plus(std::time::Duration::from_secs(1)));
            for b in other.scaling.boosts.boosts {
                LedgerEdit::Open(b.record).apply(&mut held);
            }
        }
        // A conflict's re-read: records in another order, some closed by the other writer.
        if !held.records.is_empty() {
            let k = rotate % held.records.len();
            held.records.rotate_left(k);
        }
        let mut drop = dropped.iter().chain(std::iter::repeat(&false));
        held.records.retain(|_| !*drop.next().unwrap());
        // The drainer's returns, some of them retried after a lost answer.
        for (r, t) in &returns {
            let Some(record) = held.records.get(*r % held.records.len().max(1)) else { continue };
            let Some(boosted) = record.instances.iter().next().cloned() else { continue };
            let terminated = InstanceId::from(format!("i-replacement-{t}"));
            let pending = [Termination { instance: terminated, decrement: true, gives_back: Some(boosted) }];
            let (returning, _) = decide_terminations(&held, &pending);
            apply_all(&mut held, &returning);
        }

        apply_all(&mut held, &edits);
        if retried {
            // A save whose answer was lost, made again (a restart).
            let applied = apply_all(&mut held, &edits);
            prop_assert!(edits.iter().zip(&applied).all(|(e, a)| !a || !matches!(e, LedgerEdit::Open(_))), "reopened");
        }
        let mut covered = BTreeSet::new();
        for r in &held.records {
            prop_assert!(r.returned <= r.added, "{r:?} returns more than it added");
            for i in &r.instances {
                prop_assert!(covered.insert(i.clone()), "{i} boosted twice: {:?}", held.records);
            }
        }
    }

    #[test]
    fn evictions_wait_out_backoffs_and_never_repeat_an_eviction(case in case_strategy()) {
        let p = plan(&case.snapshot, &case.drains, &case.policy, NOW);
        for round in &p.draining.evictions {
            prop_assert!(p.draining.next.in_progress.contains_key(&round.node), "{round:?} without a drain");
            let progress = case.drains.evictions.get(&round.node).cloned().unwrap_or_default();
            prop_assert!(progress.retry_at.is_none_or(|at| at <= NOW), "{round:?} during its backoff");
            let node = &case.snapshot.nodes[&round.node];
            for pod in &round.pods {
                prop_assert!(!progress.evicted.contains(&pod.uid), "{} evicted twice", pod.uid);
                let class = node.pods.iter().find(|q| q.uid == pod.uid).map(|q| q.class);
                prop_assert!(class.is_some_and(PodClass::is_evictable), "{pod:?} is not evictable");
            }
        }
        for ended in &p.draining.ended {
            prop_assert!(!p.draining.next.in_progress.contains_key(&ended.node), "{ended:?} still draining");
        }
    }

    #[test]
    fn a_ledger_or_group_holding_any_value_plans_without_overflow(
        case in case_strategy(),
        counts in prop::collection::vec(prop::sample::select(vec![0u32, 1, u32::MAX - 1, u32::MAX]), 8),
        times in prop::collection::vec(prop::sample::select(vec![i64::MIN, -1, 0, i64::MAX]), 2),
    ) {
        // A ledger is a ConfigMap anyone with rights can edit, and a group's sizes come from AWS:
        // extreme values are refused or clamped by the arithmetic, never wrapped (release builds
        // keep overflow checks, so a wrap would panic here).
        let mut snapshot = case.snapshot.clone();
        for record in &mut snapshot.ledger.records {
            record.added = counts[0];
            record.returned = counts[1];
            record.before = counts[2];
            record.raising_to = Some(counts[3]).filter(|_| counts[4] > 0);
            record.at = Timestamp::from_millis(times[0]);
        }
        for group in snapshot.groups.values_mut() {
            (group.min, group.max, group.desired) = (counts[5], counts[6], counts[7]);
        }
        for signal in &mut snapshot.signals {
            signal.observed_at = Timestamp::from_millis(times[1]);
        }
        for now in [Timestamp::from_millis(i64::MIN), NOW, Timestamp::from_millis(i64::MAX)] {
            plan(&snapshot, &case.drains, &case.policy, now);
        }
        let live = snapshot.groups.values().map(|g| (g.name.clone(), g.desired)).collect();
        let (edits, _) = resolve_raises(&snapshot.ledger, &live);
        apply_all(&mut snapshot.ledger, &edits);
    }
}
