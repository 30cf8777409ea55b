//! Reaction time against moto: from a rebalance signal entering the scaler (the watch notifies it)
//! to the `SetDesiredCapacity` request leaving the SDK (its transmit hook). Goal: p99 ≤ 100 ms.
//!
//! `cargo bench --bench reaction` (installs and starts moto like the tests do).

#[path = "../tests/support/moto.rs"]
mod moto;

use std::sync::Arc;
use std::time::{Duration, Instant};

use spots_booster::aws::AwsPorts;
use spots_booster::core::{InstanceId, Node, NodeName, Policy, Resources, Signal, SignalKind, SizingMode, Timestamp};
use spots_booster::fakes::{FakeAutoScaling, FakeRig};
use spots_booster::metrics::Metrics;
use spots_booster::workers::scaler::{system_clock, Scaler, ScalerSettings};
use tokio::sync::watch;

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
        moto::create_group(&config, &format!("spot-{g:02}"), (0, 1000, 0), "us-east-1a", &[]).await;
    }

    let aws = AwsPorts::new(&config, false);
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
    let scaler = Scaler::new(ctx, ScalerSettings::default());
    let wake = scaler.waker();
    let (stop, shutdown) = watch::channel(false);
    let task = tokio::spawn(scaler.run(shutdown));

    let mut latencies = Vec::with_capacity(SAMPLES);
    for i in 0..SAMPLES {
        let (g, k) = (i % GROUPS, i / GROUPS);
        let at_risk = node(g, k, true);
        let signal = Signal {
            instance: at_risk.instance.clone().unwrap(),
            node: at_risk.name.clone(),
            kind: SignalKind::Rebalance,
            observed_at: system_clock()(),
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
    let _ = task.await;

    latencies.sort();
    let (p50, p99, max) = (percentile(&latencies, 0.50), percentile(&latencies, 0.99), *latencies.last().unwrap());
    println!("reaction (signal → SetDesiredCapacity sent), {SAMPLES} signals against moto:");
    println!("  p50 {:.1} ms   p99 {:.1} ms   max {:.1} ms", ms(p50), ms(p99), ms(max));
    println!("  of which the scaler's coalescing quiet period: {:.0} ms", ms(ScalerSettings::default().coalesce_quiet));
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn node(group: usize, k: usize, at_risk: bool) -> Node {
    let name = format!("ip-10-{group}-{k}.ec2.internal");
    Node {
        name: NodeName(name),
        instance: Some(InstanceId(format!("i-0{group:04x}{k:012x}"))),
        group: Some(format!("spot-{group:02}").into()),
        ready: true,
        cordoned: at_risk,
        deleting_by_ca: false,
        created: Timestamp::EPOCH,
        allocatable: Resources::new(4000, 16 << 30),
        pods: Vec::new(),
    }
}
