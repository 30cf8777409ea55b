//! The scaler worker over the real Auto Scaling adapter and moto: a storm of rebalance signals
//! becomes one guarded write per group, with the AWS calls counted at the SDK.

use crate::support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use spots_booster::aws::AwsPorts;
use spots_booster::core::{
    Evidence, InstanceId, Node, NodeName, Pod, PodClass, Policy, Resources, Signal, SignalKind, Timestamp,
};
use spots_booster::fakes::{FakeAutoScaling, FakeRig};
use spots_booster::metrics::Metrics;
use spots_booster::ports::AutoScaling;
use spots_booster::workers::scaler::{system_clock, Scaler, ScalerSettings};
use support::moto::{create_group, launch_template, moto};
use tokio::sync::watch;

const GROUPS: usize = 20;
const SIGNALS_PER_GROUP: usize = 50;

async fn groups(config: &aws_config::SdkConfig) {
    launch_template(config).await;
    for g in 0..GROUPS {
        create_group(
            config,
            &format!("spot-{g:02}"),
            (1, 200, i32::try_from(SIGNALS_PER_GROUP).unwrap()),
            "us-east-1a",
            &[("k8s.io/cluster-autoscaler/enabled", "true")],
        )
        .await;
    }
}

/// The node of a group's `k`th instance, at risk, carrying one 500m / 1 GiB pod, named after its
/// instance as resource-name hostnames are (`<instance-id>.<domain>`): moto draws private
/// addresses at random, and two of a thousand instances sometimes share a private DNS name,
/// which the booster rightly refuses to believe for either.
fn at_risk(group: usize, k: usize, instance: InstanceId, name: String) -> (Node, Signal) {
    let node = Node {
        name: NodeName::from(name.clone()),
        instance: Some(instance.clone()),
        group: Some(format!("spot-{group:02}").into()),
        ready: true,
        cordoned: true,
        deleting_by_ca: false,
        cordoned_since: None,
        scale_down_disabled: false,
        opted_out: false,
        created: Timestamp::EPOCH,
        allocatable: Resources::new(4000, 16 << 30),
        pods: vec![Pod {
            uid: format!("uid-{group}-{k}").into(),
            namespace: "shop".into(),
            name: format!("web-{group}-{k}").into(),
            requests: Resources::new(500, 1 << 30),
            class: PodClass::Ordinary,
            opt_out: None,
            bare: false,
            owner: None,
            grace_seconds: 30,
        }],
        internal_ips: Vec::new(),
        pods_known: true,
    };
    let now = system_clock()();
    (
        node,
        Signal {
            instance,
            node: NodeName::from(name),
            kind: SignalKind::Rebalance,
            observed_at: now,
            evidence: Evidence::NodeTaint,
            notice_deadline: None,
        },
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_storm_of_1000_signals_across_20_groups_is_20_writes() {
    let (moto, _guard) = moto().await;
    let config = moto.sdk_config().await;
    groups(&config).await;
    let aws = AwsPorts::new(&config, false);
    let rig = FakeRig::new(FakeAutoScaling::default());
    let (cluster, ledger) = (rig.cluster.clone(), rig.ledger.clone());
    let policy = Policy { max_boost_per_group: 100, ..Policy::default() };
    let ctx = rig.context_with(aws.autoscaling.clone(), policy, system_clock(), Arc::new(Metrics::new())).await;
    let mut scaler = Scaler::new(ctx, ScalerSettings::default());
    scaler.start(&["k8s.io/cluster-autoscaler/enabled=true".parse().unwrap()]).await.unwrap();
    let names: Vec<_> = (0..GROUPS).map(|g| format!("spot-{g:02}").into()).collect();
    let mut instances = Vec::new();
    for g in aws.autoscaling.describe_groups(&names).await.unwrap() {
        let ids: Vec<InstanceId> = g.members().cloned().collect();
        instances.push(ids.into_iter().map(|i| (format!("{i}.us-east-1.compute.internal"), i)).collect::<Vec<_>>());
    }
    let describes_before = aws.stats.calls("DescribeAutoScalingGroups");
    let wake = scaler.waker();
    let (stop, shutdown) = watch::channel(false);
    let task = tokio::spawn(scaler.run(shutdown));

    let storm = Instant::now();
    // Interleaved across groups, as a wave arrives.
    for k in 0..SIGNALS_PER_GROUP {
        for (g, group) in instances.iter().enumerate() {
            let (name, instance) = group[k].clone();
            let (node, signal) = at_risk(g, k, instance, name);
            cluster.put_node(node);
            cluster.signal(signal);
            wake.notify_one();
        }
    }
    let storm = storm.elapsed();
    assert!(storm < Duration::from_secs(1), "the storm must arrive within one second, took {storm:?}");

    let deadline = Instant::now() + Duration::from_secs(60);
    while aws.stats.calls("SetDesiredCapacity") < GROUPS as u64 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Let any further tick happen: it must find nothing left to do.
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.send(true).unwrap();
    task.await.unwrap();

    let sets = aws.stats.calls("SetDesiredCapacity");
    let describes = aws.stats.calls("DescribeAutoScalingGroups") - describes_before;
    eprintln!(
        "storm of {} signals in {storm:?}: {sets} SetDesiredCapacity, {describes} DescribeAutoScalingGroups",
        GROUPS * SIGNALS_PER_GROUP
    );
    assert_eq!(sets, GROUPS as u64, "one write per group");
    assert_eq!(describes, 1, "one guard read for 20 (≤ 50) groups in the one tick");
    assert_eq!(
        ledger.saved().covered().len(),
        GROUPS * SIGNALS_PER_GROUP,
        "every at-risk instance boosted exactly once"
    );

    // 50 pods of 550m (10% over-subscription) in 3.9 CPU (100m reserved): 7 per node, 8 nodes.
    let live = aws.autoscaling.describe_groups(&names).await.unwrap();
    for g in live {
        assert_eq!((g.desired, g.instances.len()), (58, 58), "{}", g.name);
    }
}
