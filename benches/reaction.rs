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
//! Last, waves spread over a quarter second as NTH sends them through a busy API server, against
//! the loopback Auto Scaling answering each request in 150 ms: a pass's writes must not hold back
//! the groups whose burst ends while AWS answers them.
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

    let mut aws = AwsPorts::new(&config, false);
    aws.autoscaling = aws.autoscaling.reusing_guard_reads(GUARD_READ_MAX_AGE, system_clock());
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
    wave(Duration::from_millis(150)).await;
}

const BURSTS: usize = 5;
const GROUP_SIZE: i32 = 20;

/// The scaler and the learner as the daemon runs them, over groups named `wave-NN` (of
/// `GROUP_SIZE` running instances each) reached through `config`, once the learner has learnt
/// every node's group and every group's size.
struct Daemon {
    aws: AwsPorts,
    cluster: spots_booster::fakes::InMemoryCluster,
    /// Each group's nodes and their instances.
    members: Vec<Vec<(NodeName, InstanceId)>>,
    wake: Arc<Notify>,
    metrics: Arc<Metrics>,
    stop: watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// `--guard-read-max-age`'s default: the bench measures the daemon as it runs.
const GUARD_READ_MAX_AGE: Duration = Duration::from_secs(1);

/// The reads the reaction path may make.
const READS: [&str; 3] = ["DescribeAutoScalingGroups", "DescribeAutoScalingInstances", "DescribeInstances"];

impl Daemon {
    async fn start(config: &aws_config::SdkConfig) -> Daemon {
        let mut aws = AwsPorts::new(config, false);
        aws.autoscaling = aws.autoscaling.reusing_guard_reads(GUARD_READ_MAX_AGE, system_clock());
        aws.stats.keep_send_times(4096);
        let rig = FakeRig::new(FakeAutoScaling::default());
        let cluster = rig.cluster.clone();
        let waves: Vec<GroupName> = (0..GROUPS).map(|g| format!("wave-{g:02}").into()).collect();
        let members = named_instances(&aws, &waves).await;
        for (name, id) in members.iter().flatten() {
            // As the watches see it: the node does not name its group.
            cluster.put_node(ready_node(name.to_string(), id.clone(), None));
        }
        let policy = Policy { sizing: SizingMode::Count, max_boost_per_group: 1000, ..Policy::default() };
        let metrics = Arc::new(Metrics::new());
        let ctx = rig.context_with(aws.autoscaling.clone(), policy, system_clock(), metrics.clone()).await;
        let learner = NodeLearner::new(ctx.clone(), Arc::new(Notify::new()), LearnerSettings::default());
        let scaler = Scaler::new(ctx, ScalerSettings::default());
        let wake = scaler.waker();
        let (stop, shutdown) = watch::channel(false);
        let learning = {
            let shutdown = shutdown.clone();
            tokio::spawn(learner.run(shutdown))
        };
        let scaling = tokio::spawn(async move { drop(scaler.run(shutdown).await) });
        let daemon = Daemon { aws, cluster, members, wake, metrics, stop, tasks: vec![learning, scaling] };
        // The daemon has been running when a burst comes: its learner's reads are over. A read
        // still waiting on moto counts too: a burst that began under it looked its nodes up
        // itself (5 reads and a 3.4–3.9 s p99 in two runs of four).
        let mut last = u64::MAX;
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let now = daemon.reads();
            if (std::mem::replace(&mut last, now) == now && daemon.reads_unanswered() == 0) || Instant::now() > deadline
            {
                break;
            }
        }
        daemon
    }

    /// Reads answered (or failed).
    fn reads(&self) -> u64 {
        READS.iter().map(|r| self.aws.stats.calls(r)).sum()
    }

    /// Reads sent and not answered yet (a retried read keeps this above zero: the wait then ends
    /// at its deadline).
    fn reads_unanswered(&self) -> u64 {
        let stats = self.aws.stats.snapshot();
        READS.iter().filter_map(|r| stats.get(*r)).map(|s| s.attempts.saturating_sub(s.calls)).sum()
    }

    /// NTH's taint on the `k`th node of group `g`.
    fn signal(&self, g: usize, k: usize) {
        let (name, instance) = self.members[g][k].clone();
        self.cluster.edit(|s| s.nodes.get_mut(&name).unwrap().cordoned = true);
        self.cluster.signal(Signal {
            instance,
            node: name,
            kind: SignalKind::Rebalance,
            observed_at: system_clock()(),
            evidence: Evidence::NodeTaint,
            notice_deadline: None,
        });
        self.wake.notify_one();
    }

    /// Prints the scaler's stage histogram and stops.
    async fn stop(self) {
        for line in self.metrics.encode().lines().filter(|l| {
            l.starts_with("spots_booster_scaler_stage_seconds_sum")
                || l.starts_with("spots_booster_scaler_stage_seconds_count")
        }) {
            println!("  {line}");
        }
        self.stop.send(true).unwrap();
        for task in self.tasks {
            let _ = task.await;
        }
    }
}

/// Bursts of two recommendations in each of 20 groups within a few milliseconds, through
/// `config`; per group, the time from the burst to its write, and the writes per burst.
async fn burst(config: &aws_config::SdkConfig, against: &str) {
    let daemon = Daemon::start(config).await;
    let mut latencies = Vec::new();
    let mut writes_per_burst = Vec::new();
    let mut reads_per_burst = Vec::new();
    for b in 0..BURSTS {
        let before = daemon.aws.stats.sent_at("SetDesiredCapacity").len();
        let reads_before = daemon.reads();
        let entered = Instant::now();
        for g in 0..GROUPS {
            daemon.signal(g, 2 * b);
            daemon.signal(g, 2 * b + 1);
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while daemon.aws.stats.sent_at("SetDesiredCapacity").len() < before + GROUPS && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
        // Anything more for this burst would come within the coalescing window.
        tokio::time::sleep(Duration::from_millis(400)).await;
        let sent = daemon.aws.stats.sent_at("SetDesiredCapacity");
        writes_per_burst.push(sent.len() - before);
        reads_per_burst.push(daemon.reads() - reads_before);
        latencies.extend(sent[before..].iter().map(|t| t.duration_since(entered)));
    }
    latencies.sort();
    let (p50, p99, max) = (percentile(&latencies, 0.50), percentile(&latencies, 0.99), *latencies.last().unwrap());
    println!(
        "burst reaction (2 signals in each of {GROUPS} groups of {GROUP_SIZE} → each group's SetDesiredCapacity sent), \
         {BURSTS} bursts against {against}:"
    );
    println!("  per group: p50 {:.1} ms   p99 {:.1} ms   max {:.1} ms", ms(p50), ms(p99), ms(max));
    println!("  writes per burst: {writes_per_burst:?} (one per group: {GROUPS})");
    println!("  reads per burst: {reads_per_burst:?} (DescribeAutoScalingGroups, -Instances, DescribeInstances)");
    daemon.stop().await;
}

const WAVES: usize = 3;
/// A wave as NTH sends it through a busy API server: the groups' turns this far apart…
const GROUP_TURNS: Duration = Duration::from_millis(12);
/// …and a group's second node this long after its first (86–185 ms on a loaded control plane).
const SECOND_NODE_AFTER: Duration = Duration::from_millis(120);

/// Waves of two recommendations per group spread over a quarter second, against the loopback
/// fleet answering every request in `latency`; per group, the time from its first signal to its
/// write arriving. The writes of one pass must not hold back the groups whose burst ends while
/// AWS answers them.
async fn wave(latency: Duration) {
    let fleet = aws_fleet::fleet("wave", GROUPS, GROUP_SIZE as usize);
    let config = aws_loopback::sdk_loader(aws_fleet::serve_fleet_answering_in(fleet.clone(), latency)).load().await;
    let daemon = Daemon::start(&config).await;
    let mut from_first = Vec::new();
    let mut writes_per_wave = Vec::new();
    let mut reads_per_wave = Vec::new();
    let mut read_times = Vec::new();
    for w in 0..WAVES {
        let reads_before = daemon.reads();
        let written_before: Vec<usize> = fleet.lock().unwrap().values().map(|g| g.written_at.len()).collect();
        let start = tokio::time::Instant::now();
        let mut turns: Vec<(Duration, usize, usize)> = (0..GROUPS)
            .flat_map(|g| {
                let first = GROUP_TURNS * g as u32;
                [(first, g, 2 * w), (first + SECOND_NODE_AFTER, g, 2 * w + 1)]
            })
            .collect();
        turns.sort();
        let mut first_signal = vec![None; GROUPS];
        for (at, g, k) in turns {
            tokio::time::sleep_until(start + at).await;
            first_signal[g].get_or_insert_with(Instant::now);
            daemon.signal(g, k);
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
        let groups = fleet.lock().unwrap();
        let mut writes = 0;
        for ((g, group), before) in groups.values().enumerate().zip(written_before) {
            let this_wave = &group.written_at[before..];
            writes += this_wave.len();
            let first = first_signal[g].expect("signalled");
            from_first.push(this_wave.first().map_or(Duration::MAX, |t| t.duration_since(first)));
        }
        writes_per_wave.push(writes);
        reads_per_wave.push(daemon.reads() - reads_before);
        let mut sent: Vec<(Instant, &str)> = READS
            .iter()
            .flat_map(|op| daemon.aws.stats.sent_at(op).into_iter().map(move |t| (t, *op)))
            .filter(|(t, _)| *t >= start.into_std())
            .collect();
        sent.sort();
        read_times.push(
            sent.iter()
                .map(|(t, op)| format!("{op}@{:.0}ms", ms(t.duration_since(start.into_std()))))
                .collect::<Vec<_>>(),
        );
    }
    assert!(from_first.iter().all(|d| *d < Duration::MAX), "every group written in every wave");
    from_first.sort();
    let (p50, p99, max) = (percentile(&from_first, 0.50), percentile(&from_first, 0.99), *from_first.last().unwrap());
    println!(
        "wave reaction (2 signals in each of {GROUPS} groups, turns {} ms apart, a group's second node {} ms after \
         its first), {WAVES} waves against a loopback Auto Scaling answering each request in {} ms:",
        GROUP_TURNS.as_millis(),
        SECOND_NODE_AFTER.as_millis(),
        latency.as_millis()
    );
    println!(
        "  per group, from its first signal to its write: p50 {:.1} ms   p99 {:.1} ms   max {:.1} ms",
        ms(p50),
        ms(p99),
        ms(max)
    );
    println!("  writes per wave: {writes_per_wave:?} (one per group: {GROUPS})");
    println!("  reads per wave: {reads_per_wave:?} (DescribeAutoScalingGroups, -Instances, DescribeInstances)");
    println!("  reads sent, from each wave's start: {read_times:?}");
    daemon.stop().await;
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
        cordoned_since: None,
        scale_down_disabled: false,
        opted_out: false,
        created: Timestamp::EPOCH,
        allocatable: Resources::new(4000, 16 << 30),
        pods: Vec::new(),
        internal_ips: Vec::new(),
        pods_known: true,
    }
}
