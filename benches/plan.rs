//! One full planning pass over a large cluster (5,000 nodes in 500 groups with 50,000 pods): the
//! scaler's and the drainer's entry points, `plan_scaling` and `plan_draining`, as the workers call
//! them. Target: ≤ 5 ms on one core.
//!
//! And the drainer's pass in a storm: 1,000 nodes of 2,000 (50 groups) with confirmed
//! interruption notices, all draining, their pods part evicted and part held by budgets, with
//! `--interruption-force-at-deadline`. Target: ≤ 10 ms per pass.
//!
//! `cargo bench --bench plan`

use std::collections::BTreeSet;
use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use spots_booster::core::{
    plan_draining, plan_scaling, Acting, BoostRecord, DrainStarted, DrainState, DrainingPlan, EvictionResult, Evidence,
    Group, GroupName, InstanceFacts, InstanceId, InstanceLifecycle, Node, NodeName, Pod, PodClass, Policy, Resources,
    ScalingPlan, Signal, SignalKind, Snapshot, Timestamp,
};

const GROUPS: usize = 500;
const NODES_PER_GROUP: usize = 10;
const PODS_PER_NODE: usize = 10;
const GI: u64 = 1 << 30;

/// A cluster where every `at_risk_every`-th node has a signal (twice: IMDS and a repeat), half of
/// the at-risk nodes are already boosted with their replacements joined, and some drains run.
fn cluster(at_risk_every: usize) -> (Snapshot, DrainState) {
    let mut s = Snapshot::default();
    let mut drains = DrainState::default();
    for g in 0..GROUPS {
        let name = GroupName::from(format!("spot-{g:03}"));
        // 4-CPU/16-GiB nodes, min 1, no CA view: the core's test group.
        s.groups.insert(name.clone(), Group::test(name.as_str()).desired(NODES_PER_GROUP as u32).max(40));
        let mut boosted = BTreeSet::new();
        for n in 0..NODES_PER_GROUP {
            let node = NodeName::from(format!("ip-10-{g}-{n}.eu-central-1.compute.internal"));
            let instance = ec2_id((g * NODES_PER_GROUP + n) as u64);
            let pods = (0..PODS_PER_NODE)
                .map(|p| Pod {
                    uid: format!("{g}-{n}-{p}").into(),
                    namespace: "shop".into(),
                    name: format!("web-{g}-{n}-{p}").into(),
                    requests: Resources::new(100 + 30 * p as u64, (1 + p as u64 % 3) * GI / 2),
                    class: if p == 0 { PodClass::DaemonSet } else { PodClass::Ordinary },
                    opt_out: None,
                    bare: false,
                    owner: None,
                    grace_seconds: 30,
                })
                .collect();
            let k = g * NODES_PER_GROUP + n;
            let at_risk = k.is_multiple_of(at_risk_every);
            add_node(&mut s, (&node, &instance, &name), k, at_risk, pods);
            if at_risk {
                for (kind, at) in [(SignalKind::Rebalance, 60_000), (SignalKind::Rebalance, 90_000)] {
                    s.signals.push(Signal {
                        instance: instance.clone(),
                        node: node.clone(),
                        kind,
                        observed_at: Timestamp::from_millis(at),
                        evidence: Evidence::NodeTaint,
                        notice_deadline: None,
                    });
                }
                if g % 2 == 0 {
                    boosted.insert(instance.clone());
                    if g % 4 == 0 && n % 3 == 0 {
                        drains.in_progress.insert(
                            node,
                            DrainStarted {
                                group: name.clone(),
                                instance,
                                started_at: Timestamp::from_millis(200_000),
                                decrement: true,
                                deadline: None,
                                gives_back: None,
                            },
                        );
                    }
                }
            }
        }
        if !boosted.is_empty() {
            let added = boosted.len();
            s.ledger.records.push(boost(name.clone(), boosted, 100_000, 0));
            for r in 0..added {
                let node = NodeName::from(format!("ip-10-{g}-new{r}.eu-central-1.compute.internal"));
                let instance = ec2_id(1_000_000 + (g * 100 + r) as u64);
                s.instances.insert(instance.clone(), described(&node));
                s.nodes.insert(
                    node.clone(),
                    ready_node(node, instance, name.clone(), Timestamp::from_millis(150_000), false, Vec::new()),
                );
            }
        }
    }
    (s, drains)
}

/// A Ready 4-CPU/16-GiB node of `group`.
fn ready_node(
    name: NodeName,
    instance: InstanceId,
    group: GroupName,
    created: Timestamp,
    cordoned: bool,
    pods: Vec<Pod>,
) -> Node {
    Node {
        name,
        instance: Some(instance),
        group: Some(group),
        ready: true,
        cordoned,
        deleting_by_ca: false,
        cordoned_since: None,
        scale_down_disabled: false,
        opted_out: false,
        created,
        allocatable: Resources::new(4000, 16 * GI),
        pods,
        internal_ips: Vec::new(),
        pods_known: true,
    }
}

/// Adds `node` of `group`, running `instance` as EC2 describes it, the `k`-th to join.
fn add_node(
    s: &mut Snapshot,
    (node, instance, group): (&NodeName, &InstanceId, &GroupName),
    k: usize,
    cordoned: bool,
    pods: Vec<Pod>,
) {
    s.instances.insert(instance.clone(), described(node));
    let created = Timestamp::from_millis(i64::try_from(k).expect("a small index"));
    s.nodes.insert(node.clone(), ready_node(node.clone(), instance.clone(), group.clone(), created, cordoned, pods));
}

/// An open boost of `group` for `instances`, decided at `at` ms.
fn boost(group: GroupName, instances: BTreeSet<InstanceId>, at: i64, before: u32) -> BoostRecord {
    let added = instances.len() as u32;
    BoostRecord {
        group,
        instances,
        added,
        returned: 0,
        at: Timestamp::from_millis(at),
        before,
        settled: Default::default(),
        kept: Default::default(),
        expired: None,
        giving_back: Default::default(),
        raising_to: None,
        returning: Default::default(),
        moved: Vec::new(),
        ahead: None,
        standby: None,
    }
}

/// EC2 instance ids are 17 random hex digits; a counter would give every key a long common
/// prefix and measure `memcmp` instead of planning.
/// EC2's description of a spot instance whose private DNS name is its node's.
fn described(node: &NodeName) -> InstanceFacts {
    InstanceFacts { private_dns_name: Some(node.to_string()), ..InstanceFacts::bought(InstanceLifecycle::Spot) }
}

fn ec2_id(k: u64) -> InstanceId {
    let mut x = k.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    InstanceId::from(format!("i-0{:016x}", x ^ (x >> 31)))
}

fn bench_plan(c: &mut Criterion) {
    let now = Timestamp::from_millis(300_000);
    let policy = Policy::default();
    for (label, every) in [("10% at risk", 10), ("every node at risk", 1)] {
        let (snapshot, drains) = cluster(every);
        let pods: usize = snapshot.nodes.values().map(|n| n.pods.len()).sum();
        assert!(snapshot.groups.len() == GROUPS && snapshot.nodes.len() >= GROUPS * NODES_PER_GROUP && pods == 50_000);
        let protected = BTreeSet::new();
        let pass = || -> (ScalingPlan, DrainingPlan) {
            (
                plan_scaling(black_box(&snapshot), black_box(&policy), now, Acting::Leader),
                plan_draining(black_box(&snapshot), &protected, black_box(&drains), black_box(&policy), now),
            )
        };
        let (scaling, draining) = pass();
        assert!(
            !scaling.boosts.boosts.is_empty() && !draining.drains.batches.is_empty() && !draining.evictions.is_empty(),
            "the benchmark must exercise every stage"
        );
        c.bench_function(&format!("plan 5000 nodes / 500 groups / 50000 pods, {label}"), |b| b.iter(pass));
        c.bench_function(&format!("plan_scaling alone, {label}"), |b| {
            b.iter(|| plan_scaling(black_box(&snapshot), black_box(&policy), now, Acting::Leader))
        });
        c.bench_function(&format!("plan_draining alone, {label}"), |b| {
            b.iter(|| plan_draining(black_box(&snapshot), &protected, black_box(&drains), black_box(&policy), now))
        });
    }
}

const STORM_GROUPS: usize = 50;
const STORM_NODES: usize = 40;

/// 50 groups of 40 nodes with 10 pods each; 20 nodes of every group have a spot interruption
/// notice EC2 confirms, sent at 0 s, each group boosted by 20 nodes at 1 s (not joined yet).
fn storm() -> Snapshot {
    let mut s = Snapshot::default();
    for g in 0..STORM_GROUPS {
        let name = GroupName::from(format!("spot-{g:02}"));
        s.groups.insert(name.clone(), Group::test(name.as_str()).desired(STORM_NODES as u32).max(80));
        let mut boosted = BTreeSet::new();
        for n in 0..STORM_NODES {
            let k = g * STORM_NODES + n;
            let node = NodeName::from(format!("ip-10-{g}-{n}.eu-central-1.compute.internal"));
            let instance = ec2_id(k as u64);
            let pods = (0..PODS_PER_NODE)
                .map(|p| Pod {
                    uid: format!("{g}-{n}-{p}").into(),
                    namespace: format!("app-{g:02}").as_str().into(),
                    name: format!("web-{g}-{n}-{p}").into(),
                    requests: Resources::new(300, GI),
                    class: if p == 0 { PodClass::DaemonSet } else { PodClass::Ordinary },
                    opt_out: None,
                    bare: false,
                    owner: None,
                    grace_seconds: 30,
                })
                .collect();
            add_node(&mut s, (&node, &instance, &name), k, n % 2 == 0, pods);
            if n < STORM_NODES / 2 {
                s.signals.push(Signal {
                    instance: instance.clone(),
                    node,
                    kind: SignalKind::SpotInterruption,
                    observed_at: Timestamp::from_millis(0),
                    evidence: Evidence::NodeTaint,
                    notice_deadline: Some(Timestamp::from_millis(120_000)),
                });
                s.spot_interrupted.insert(instance.clone());
                boosted.insert(instance);
            }
        }
        s.ledger.records.push(boost(name, boosted, 1_000, STORM_NODES as u32));
    }
    s
}

fn bench_storm(c: &mut Criterion) {
    let snapshot = storm();
    let policy = Policy { force_at_deadline: true, ..Policy::default() };
    let protected = BTreeSet::new();
    // The first pass starts every drain; its evictions come back: the first three pods of each
    // node evicted, the fourth refused by its budget, the rest not tried yet.
    let start = Timestamp::from_millis(2_000);
    let first = plan_draining(&snapshot, &protected, &DrainState::default(), &policy, start);
    let started: usize = first.drains.batches.iter().map(|b| b.nodes.len()).sum();
    assert_eq!(started, STORM_GROUPS * STORM_NODES / 2, "every notice drains at once");
    let mut drains = first.next.clone();
    for round in &first.evictions {
        let results = round.pods.iter().enumerate().filter(|(k, _)| *k < 4).map(|(k, p)| {
            let result = if k < 3 {
                EvictionResult::Evicted
            } else {
                EvictionResult::Blocked { budget: Some(format!("web-{}", round.group)) }
            };
            (p.uid.as_str(), result)
        });
        drains.record_round(&round.node, results, &policy, start);
    }
    // 85 s in: the held pods are due for their graceful deletion, the others for eviction.
    let now = Timestamp::from_millis(85_000);
    let pass = plan_draining(&snapshot, &protected, &drains, &policy, now);
    assert_eq!(pass.force.len(), started, "one held pod per node is deleted at its deadline");
    assert_eq!(pass.evictions.len(), started);
    c.bench_function("plan_draining in a storm: 1000 of 2000 nodes interrupted, all draining", |b| {
        b.iter(|| plan_draining(black_box(&snapshot), &protected, black_box(&drains), black_box(&policy), now))
    });
}

criterion_group!(benches, bench_plan, bench_storm);
criterion_main!(benches);
