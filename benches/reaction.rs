//! Reaction time: from a rebalance signal entering the scaler (the watch notifies it)
//! to the `SetDesiredCapacity` request leaving the SDK (its transmit hook). Lone signals: p99 ≤ 100 ms.
//!
//! Two parts: lone signals, one at a time; then bursts across 20 groups (two recommendations per
//! group within a few milliseconds), over nodes that, as the watches see them, do not name their
//! group: every group must get exactly one write per burst. The bursts run twice:
//! - against moto, whose instances really run. Moto lists every instance of every group whatever
//!   `IncludeInstances` says, so the guard read before the writes costs what rendering 400
//!   instances costs in moto (70–300 ms here);
//! - against a loopback Auto Scaling and EC2 that answer as AWS does (`tests/support/aws_fleet.rs`:
//!   no instance lists when not asked, requests served concurrently), so what is measured is the
//!   daemon's own time from signal to write. Goal: per group p99 ≤ 60 ms.
//!
//! `cargo bench --bench reaction` (installs and starts moto like the tests do).

#[path = "../tests/support/aws_fleet.rs"]
mod aws_fleet;
#[path = "../tests/support/aws_loopback.rs"]
mod aws_loopback;
#[path = "../tests/support/moto.rs"]
mod moto;
#[path = "../tests/support/tools.rs"]
mod tools;

use std::sync::Arc;
use std::time::{Duration, Instant};

use spots_booster::aws::AwsPorts;
use spots_booster::core::{
    Evidence, GroupName, InstanceId, Node, NodeName, Policy, Resources, Signal, SignalKind, SizingMode, Timestamp,
};
use spots_booster::fakes::{FakeAutoScaling, FakeRig};
use spots_booster::metrics::Metrics;
use spots_booster::ports::AutoScaling;
use spots_booster::workers::learner::{LearnerSettings, NodeLearner};
use spots_booster::workers::scaler::{system_clock, Scaler, ScalerSettings};
use tokio::sync::{watch, Notify};

const GROUPS: usize = 20;
const SAMPLES: usize = 300;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo test --benches` lists targets; nothing to list here.
    }
    let (moto, _guard) = moto::moto().await;
    let config = moto.sdk_config().await;
    moto::launch_template(&config).await;
    for g in 0..GROUPS {
        let at_risk = i32::try_from(SAMPLES / GROUPS).unwrap();
        moto::create_group(&config, &format!("spot-{g:02}"), (0, 1000, at_risk), "us-east-1a", &[]).await;
    }

    let aws = AwsPorts::new(&config, false);
    let spot: Vec<GroupName> = (0..GROUPS).map(|g| format!("spot-{g:02}").into()).collect();
    let instances = named_instances(&aws, &spot).await;
    aws.stats.keep_send_times(4096);
    let rig = FakeRig::new(FakeAutoScaling::default());
    let cluster = rig.cluster.clone();
    // Healthy Ready nodes so Cluster Autoscaler's unready tolerance never holds a boost back.
    for g in 0..GROUPS {
        for k in 0..40 {
            cluster.put_node(node(g, 100_000 + k, false));
        }
    }
    let policy = Policy { sizing: SizingMode::Count, max_boost_per_group: 1000, ..Policy::default() };
    let ctx = rig.context_with(aws.autoscaling.clone(), policy, system_clock(), Arc::new(Metrics::new())).await;
    // The daemon as it runs: the learner beside the scaler.
    let learner = NodeLearner::new(ctx.clone(), Arc::new(Notify::new()), LearnerSettings::default());
    let scaler = Scaler::new(ctx, ScalerSettings::default());
    let wake = scaler.waker();
    let (stop, shutdown) = watch::channel(false);
    let learning = tokio::spawn(learner.run(shutdown.clone()));
    let task = tokio::spawn(scaler.run(shutdown));

    let mut latencies = Vec::with_capacity(SAMPLES);
    for i in 0..SAMPLES {
        let (g, k) = (i % GROUPS, i / GROUPS);
        let (name, instance) = instances[g][k].clone();
        let mut at_risk = ready_node(name.to_string(), instance, Some(spot[g].clone()));
        at_risk.cordoned = true;
        let signal = Signal {
            instance: at_risk.instance.clone().unwrap(),
            node: at_risk.name.clone(),
            kind: SignalKind::Rebalance,
            observed_at: system_clock()(),
            evidence: Evidence::NodeTaint,
            notice_deadline: None,
        };
        cluster.put_node(at_risk);
        let entered = Instant::now();
        cluster.signal(signal);
        wake.notify_one();
        let sent = loop {
            if let Some(t) = aws.stats.sent_at("SetDesiredCapacity").get(i) {
                break *t;
            }
            tokio::time::sleep(Duration::from_micros(200)).await;
        };
        latencies.push(sent.duration_since(entered));
        // Quiet between samples, so each one is a lone signal rather than part of a burst.
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    stop.send(true).unwrap();
    let _ = tokio::join!(task, learning);

    latencies.sort();
    let (p50, p99, max) = (percentile(&latencies, 0.50), percentile(&latencies, 0.99), *latencies.last().unwrap());
    println!("reaction (signal → SetDesiredCapacity sent), {SAMPLES} signals against moto:");
    println!("  p50 {:.1} ms   p99 {:.1} ms   max {:.1} ms", ms(p50), ms(p99), ms(max));
    println!("  of which the scaler's coalescing quiet period: {:.0} ms", ms(ScalerSettings::default().coalesce_quiet));

    moto.reset();
    let config = moto.sdk_config().await;
    moto::launch_template(&config).await;
    for g in 0..GROUPS {
        moto::create_group(&config, &format!("wave-{g:02}"), (0, 1000, GROUP_SIZE), "us-east-1a", &[]).await;
    }
    burst(&config, "moto").await;

    let fleet = aws_fleet::fleet("wave", GROUPS, GROUP_SIZE as usize);
    let config = aws_loopback::sdk_loader(aws_fleet::serve_fleet(fleet.clone())).load().await;
    burst(&config, "a loopback Auto Scaling answering as AWS does").await;
    let written: Vec<u32> = fleet.lock().unwrap().values().map(|g| g.desired).collect();
    assert!(
        written.iter().all(|d| *d == GROUP_SIZE as u32 + 2 * BURSTS as u32),
        "every group raised by two nodes per burst: {written:?}"
    );
}

const BURSTS: usize = 5;
const GROUP_SIZE: i32 = 20;

/// Bursts of two recommendations in each of 20 groups named `wave-NN` (of `GROUP_SIZE` running
/// instances each) reached through `config`; per group, the time from the burst to its write, and
/// the number of writes per burst.
async fn burst(config: &aws_config::SdkConfig, against: &str) {
    let aws = AwsPorts::new(config, false);
    aws.stats.keep_send_times(4096);
    let rig = FakeRig::new(FakeAutoScaling::default());
    let cluster = rig.cluster.clone();
    let waves: Vec<GroupName> = (0..GROUPS).map(|g| format!("wave-{g:02}").into()).collect();
    let mut members: Vec<Vec<(NodeName, InstanceId)>> = Vec::new();
    for nodes in named_instances(&aws, &waves).await {
        for (name, id) in &nodes {
            // As the watches see it: the node does not name its group.
            cluster.put_node(ready_node(name.to_string(), id.clone(), None));
        }
        members.push(nodes);
    }
    let policy = Policy { sizing: SizingMode::Count, max_boost_per_group: 1000, ..Policy::default() };
    let metrics = Arc::new(Metrics::new());
    let ctx = rig.context_with(aws.autoscaling.clone(), policy, system_clock(), metrics.clone()).await;
    // The daemon as it runs: the learner beside the scaler.
    let learner = NodeLearner::new(ctx.clone(), Arc::new(Notify::new()), LearnerSettings::default());
    let scaler = Scaler::new(ctx, ScalerSettings::default());
    let wake = scaler.waker();
    let (stop, shutdown) = watch::channel(false);
    let learning = tokio::spawn(learner.run(shutdown.clone()));
    let task = tokio::spawn(scaler.run(shutdown));
    // The daemon has been running when a burst comes: its learner has learnt every node's group
    // and every group's size.
    let reads = ["DescribeAutoScalingGroups", "DescribeAutoScalingInstances", "DescribeInstances"];
    let mut last = u64::MAX;
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now: u64 = reads.iter().map(|r| aws.stats.calls(r)).sum();
        if std::mem::replace(&mut last, now) == now {
            break;
        }
    }

    let mut latencies = Vec::new();
    let mut writes_per_burst = Vec::new();
    let mut reads_per_burst = Vec::new();
    for b in 0..BURSTS {
        let before = aws.stats.sent_at("SetDesiredCapacity").len();
        let reads_before: u64 = reads.iter().map(|r| aws.stats.calls(r)).sum();
        let entered = Instant::now();
        for nodes in &members {
            for k in [2 * b, 2 * b + 1] {
                let (name, instance) = nodes[k].clone();
                cluster.edit(|s| s.nodes.get_mut(&name).unwrap().cordoned = true);
                cluster.signal(Signal {
                    instance,
                    node: name,
                    kind: SignalKind::Rebalance,
                    observed_at: system_clock()(),
                    evidence: Evidence::NodeTaint,
                    notice_deadline: None,
                });
                wake.notify_one();
            }
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while aws.stats.sent_at("SetDesiredCapacity").len() < before + GROUPS && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
        // Anything more for this burst would come within the coalescing window.
        tokio::time::sleep(Duration::from_millis(400)).await;
        let sent = aws.stats.sent_at("SetDesiredCapacity");
        writes_per_burst.push(sent.len() - before);
        reads_per_burst.push(reads.iter().map(|r| aws.stats.calls(r)).sum::<u64>() - reads_before);
        latencies.extend(sent[before..].iter().map(|t| t.duration_since(entered)));
    }
    stop.send(true).unwrap();
    let _ = tokio::join!(task, learning);

    latencies.sort();
    let (p50, p99, max) = (percentile(&latencies, 0.50), percentile(&latencies, 0.99), *latencies.last().unwrap());
    println!(
        "burst reaction (2 signals in each of {GROUPS} groups of {GROUP_SIZE} → each group's SetDesiredCapacity sent), \
         {BURSTS} bursts against {against}:"
    );
    println!("  per group: p50 {:.1} ms   p99 {:.1} ms   max {:.1} ms", ms(p50), ms(p99), ms(max));
    println!("  writes per burst: {writes_per_burst:?} (one per group: {GROUPS})");
    println!("  reads per burst: {reads_per_burst:?} (DescribeAutoScalingGroups, -Instances, DescribeInstances)");
    for line in metrics.encode().lines().filter(|l| {
        l.starts_with("spots_booster_scaler_stage_seconds_sum")
            || l.starts_with("spots_booster_scaler_stage_seconds_count")
    }) {
        println!("  {line}");
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// A node no signal names, on an instance EC2 does not know.
fn node(group: usize, k: usize, at_risk: bool) -> Node {
    let instance = InstanceId::from(format!("i-0{group:04x}{k:012x}"));
    let mut node =
        ready_node(format!("ip-10-{group}-{k}.ec2.internal"), instance, Some(format!("spot-{group:02}").into()));
    node.cordoned = at_risk;
    node
}

/// Each group's instances with the names EC2 gave them, which their Nodes carry (as on EKS).
async fn named_instances(aws: &AwsPorts, groups: &[GroupName]) -> Vec<Vec<(NodeName, InstanceId)>> {
    let mut named = Vec::new();
    for g in aws.autoscaling.describe_groups(groups).await.expect("describe the groups") {
        let ids: Vec<InstanceId> = g.members().cloned().collect();
        let facts = aws.autoscaling.instance_facts(&ids).await.expect("describe the instances");
        named.push(
            ids.into_iter()
                .map(|i| (NodeName::from(facts[&i].private_dns_name.clone().expect("a private DNS name")), i))
                .collect(),
        );
    }
    named
}

fn ready_node(name: String, instance: InstanceId, group: Option<GroupName>) -> Node {
    Node {
        name: NodeName::from(name),
        instance: Some(instance),
        group,
        ready: true,
        cordoned: false,
        deleting_by_ca: false,
        opted_out: false,
        created: Timestamp::EPOCH,
        allocatable: Resources::new(4000, 16 << 30),
        pods: Vec::new(),
        internal_ips: Vec::new(),
    }
}
