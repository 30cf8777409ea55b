//! The AWS adapters on real emulator state: moto in server mode, reached through the SDK's
//! endpoint override, with groups created through the SDK as a user's tooling would.

use crate::support;

use std::time::Duration;

use aws_config::SdkConfig;
use aws_sdk_autoscaling::types::{
    InstancesDistribution, LaunchTemplate, LaunchTemplateOverrides, MixedInstancesPolicy,
};
use spots_booster::aws::AwsPorts;
use spots_booster::core::{GroupName, InstanceId, InstanceLifecycle};
use spots_booster::ports::{
    AutoScaling, AwsError, DesiredWrite, TagFilter, TerminateOutcome, WriteOutcome, AZ_REBALANCE_SUSPENDED_TAG,
};
use spots_booster::workers::groups::InstanceGroupCache;
use support::moto::{create_group, group_tag, launch_template, moto, nodes_template};

const CA_TAG: &str = "k8s.io/cluster-autoscaler/enabled";

/// A launch template and two groups: `plain` (2 of 1..10) and `mixed` (3 of 0..6, a spot
/// MixedInstancesPolicy, Capacity Rebalance on).
async fn world(config: &SdkConfig) -> String {
    let image = launch_template(config).await;
    create_group(config, "plain", (1, 10, 2), "us-east-1a", &[(CA_TAG, "true"), ("team", "web")]).await;
    let policy = MixedInstancesPolicy::builder()
        .launch_template(
            LaunchTemplate::builder()
                .launch_template_specification(nodes_template())
                .overrides(LaunchTemplateOverrides::builder().instance_type("m5.large").build())
                .overrides(LaunchTemplateOverrides::builder().instance_type("m5a.large").build())
                .build(),
        )
        .instances_distribution(
            InstancesDistribution::builder()
                .on_demand_base_capacity(0)
                .on_demand_percentage_above_base_capacity(0)
                .spot_allocation_strategy("price-capacity-optimized")
                .build(),
        )
        .build();
    aws_sdk_autoscaling::Client::new(config)
        .create_auto_scaling_group()
        .auto_scaling_group_name("mixed")
        .mixed_instances_policy(policy)
        .capacity_rebalance(true)
        .min_size(0)
        .max_size(6)
        .desired_capacity(3)
        .availability_zones("us-east-1b")
        .tags(group_tag("mixed", CA_TAG, "true"))
        .tags(group_tag("mixed", "kubernetes.io/cluster/test-cluster", "owned"))
        .tags(group_tag("mixed", "team", "batch"))
        .send()
        .await
        .unwrap();
    image
}

async fn desired(config: &SdkConfig, group: &str) -> (i32, usize) {
    let out = aws_sdk_autoscaling::Client::new(config)
        .describe_auto_scaling_groups()
        .auto_scaling_group_names(group)
        .send()
        .await
        .unwrap();
    let g = &out.auto_scaling_groups()[0];
    (g.desired_capacity().unwrap(), g.instances().len())
}

fn names(list: &[&str]) -> Vec<GroupName> {
    list.iter().map(|n| GroupName::from(*n)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn describe_maps_what_the_booster_reads_and_discovery_filters_by_tag() {
    let (moto, _guard) = moto().await;
    let config = moto.sdk_config().await;
    world(&config).await;
    let aws = AwsPorts::new(&config, false);

    let groups = aws.autoscaling.describe_groups(&names(&["plain", "mixed", "no-such-group"])).await.unwrap();
    assert_eq!(groups.len(), 2, "unknown names are absent, not errors");
    let plain = groups.iter().find(|g| g.name.as_str() == "plain").unwrap();
    assert_eq!((plain.min, plain.max, plain.desired, plain.instances.len()), (1, 10, 2, 2));
    assert!(!plain.capacity_rebalance);
    assert_eq!(plain.instances[0].lifecycle_state, "InService");
    assert_eq!(plain.members().count(), 2);

    let mixed = groups.iter().find(|g| g.name.as_str() == "mixed").unwrap();
    assert!(mixed.capacity_rebalance);
    assert_eq!(mixed.tags.get("team").map(String::as_str), Some("batch"), "tags are described: {:?}", mixed.tags);
    assert_eq!(plain.tags.get("team").map(String::as_str), Some("web"));

    let by = |f: &str| f.parse::<TagFilter>().unwrap();
    let found = aws.autoscaling.discover_groups(&[by("k8s.io/cluster-autoscaler/enabled=true")]).await.unwrap();
    assert_eq!(found.len(), 2);
    let found = aws.autoscaling.discover_groups(&[by(CA_TAG), by("team=batch")]).await.unwrap();
    assert_eq!(found.iter().map(|g| g.name.as_str()).collect::<Vec<_>>(), vec!["mixed"]);
    assert!(aws.autoscaling.discover_groups(&[by("team=nobody")]).await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn az_rebalance_is_suspended_with_its_tag_and_resumed_without_it() {
    let (moto, _guard) = moto().await;
    let config = moto.sdk_config().await;
    world(&config).await;
    let aws = AwsPorts::new(&config, false);
    let plain = || async { aws.autoscaling.describe_groups(&names(&["plain"])).await.unwrap().remove(0) };
    let recorded = TagFilter { key: AZ_REBALANCE_SUSPENDED_TAG.into(), value: Some("blue".into()) };
    assert!(plain().await.az_rebalance, "active, as AWS has it by default");

    aws.autoscaling.suspend_az_rebalance(&"plain".into(), true, "blue").await.unwrap();
    assert!(!plain().await.az_rebalance);
    let found = aws.autoscaling.discover_groups(std::slice::from_ref(&recorded)).await.unwrap();
    assert_eq!(
        found.iter().map(|g| g.name.as_str()).collect::<Vec<_>>(),
        vec!["plain"],
        "recorded by its tag, naming the cluster"
    );

    aws.autoscaling.suspend_az_rebalance(&"plain".into(), false, "blue").await.unwrap();
    assert!(plain().await.az_rebalance);
    assert!(aws.autoscaling.discover_groups(&[recorded]).await.unwrap().is_empty(), "the tag goes with it");
    assert_eq!((aws.stats.calls("SuspendProcesses"), aws.stats.calls("ResumeProcesses")), (1, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guarded_raise_boosts_and_instances_appear() {
    let (moto, _guard) = moto().await;
    let config = moto.sdk_config().await;
    world(&config).await;
    let aws = AwsPorts::new(&config, false);

    let out =
        aws.autoscaling.raise_desired(&[DesiredWrite { group: "plain".into(), expected: 2, to: 5 }]).await.unwrap();
    assert!(matches!(out[0].1, Ok(WriteOutcome::Written { from: 2, to: 5 })), "{out:?}");
    assert_eq!(desired(&config, "plain").await, (5, 5), "moto launches the boosted instances");
    assert_eq!(aws.stats.calls("SetDesiredCapacity"), 1);
    assert_eq!(aws.stats.calls("DescribeAutoScalingGroups"), 1, "one batched re-read guards the write");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn taking_back_unlaunched_nodes_never_lets_auto_scaling_terminate_a_running_instance() {
    let (moto, _guard) = moto().await;
    let config = moto.sdk_config().await;
    world(&config).await;
    let aws = AwsPorts::new(&config, false);
    // Both of plain's instances run: lowering it to 1 would make Auto Scaling terminate one.
    let out =
        aws.autoscaling.lower_unlaunched(&[DesiredWrite { group: "plain".into(), expected: 2, to: 1 }]).await.unwrap();
    assert!(matches!(out[0].1, Ok(WriteOutcome::Raced { live: 2 })), "{out:?}");
    assert_eq!(desired(&config, "plain").await, (2, 2), "nothing written, nothing terminated");
    assert_eq!(aws.stats.calls("SetDesiredCapacity"), 0);
    assert_eq!(aws.stats.calls("DescribeAutoScalingGroups"), 1, "the re-read before the write");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_range_and_unknown_groups_are_typed_errors_before_any_write() {
    let (moto, _guard) = moto().await;
    let config = moto.sdk_config().await;
    world(&config).await;
    let aws = AwsPorts::new(&config, false);

    let out = aws
        .autoscaling
        .raise_desired(&[
            DesiredWrite { group: "plain".into(), expected: 2, to: 11 },
            DesiredWrite { group: "ghost".into(), expected: 1, to: 2 },
        ])
        .await
        .unwrap();
    assert!(matches!(&out[0].1, Err(AwsError::OutOfRange { requested: 11, max: 10, .. })), "{out:?}");
    assert!(matches!(&out[1].1, Err(AwsError::UnknownGroup(g)) if g.as_str() == "ghost"), "{out:?}");
    assert_eq!(out[0].1.as_ref().unwrap_err().category(), "out-of-range");
    // moto would have accepted 11 (it does not validate) and answered 500 for the ghost.
    assert_eq!(aws.stats.calls("SetDesiredCapacity"), 0);
    assert_eq!(desired(&config, "plain").await.0, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_read_raced_by_a_second_writer_never_lowers_desired() {
    let (moto, _guard) = moto().await;
    let config = moto.sdk_config().await;
    world(&config).await;
    let aws = AwsPorts::new(&config, false);

    // Cluster Autoscaler scales up after our read: the plan (2 → 3) is stale.
    let ca = aws_sdk_autoscaling::Client::new(&config);
    ca.set_desired_capacity().auto_scaling_group_name("plain").desired_capacity(6).send().await.unwrap();
    let out =
        aws.autoscaling.raise_desired(&[DesiredWrite { group: "plain".into(), expected: 2, to: 3 }]).await.unwrap();
    assert!(matches!(out[0].1, Ok(WriteOutcome::Raced { live: 6 })), "{out:?}");
    assert_eq!(desired(&config, "plain").await.0, 6, "never lowered");
    assert_eq!(aws.stats.calls("SetDesiredCapacity"), 0, "the second writer's client is not ours; ours sent nothing");

    // Re-planned from the live value, the write goes through.
    let out =
        aws.autoscaling.raise_desired(&[DesiredWrite { group: "plain".into(), expected: 6, to: 7 }]).await.unwrap();
    assert!(matches!(out[0].1, Ok(WriteOutcome::Written { from: 6, to: 7 })), "{out:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminating_with_decrement_gives_the_boost_back_and_is_idempotent() {
    let (moto, _guard) = moto().await;
    let config = moto.sdk_config().await;
    world(&config).await;
    let aws = AwsPorts::new(&config, false);
    aws.autoscaling.raise_desired(&[DesiredWrite { group: "plain".into(), expected: 2, to: 3 }]).await.unwrap();

    let group = &aws.autoscaling.describe_groups(&names(&["plain"])).await.unwrap()[0];
    let victim = group.instances[0].id.clone();
    let outcome = aws.autoscaling.terminate_instance(&victim, true).await.unwrap();
    assert_eq!(outcome, TerminateOutcome::Terminated { decremented: true });
    assert_eq!(desired(&config, "plain").await, (2, 2));
    assert_eq!(aws.autoscaling.terminate_instance(&victim, true).await.unwrap(), TerminateOutcome::AlreadyGone);
    assert_eq!(
        aws.autoscaling.terminate_instance(&"i-0000000000000dead".into(), true).await.unwrap(),
        TerminateOutcome::AlreadyGone
    );

    // At MinSize a decrement would be refused by AWS (moto accepts it): terminate without, the ASG replaces.
    let mut plain = aws.autoscaling.describe_groups(&names(&["plain"])).await.unwrap().remove(0);
    let asg = aws_sdk_autoscaling::Client::new(&config);
    asg.update_auto_scaling_group().auto_scaling_group_name("plain").min_size(2).send().await.unwrap();
    let last = plain.instances.remove(0).id;
    assert_eq!(
        aws.autoscaling.terminate_instance(&last, true).await.unwrap(),
        TerminateOutcome::Terminated { decremented: false }
    );
    assert_eq!(desired(&config, "plain").await.0, 2);
}

/// The e2e proxy answers a termination of an instance AWS already took (no group holds it) as
/// Auto Scaling does, where moto fails with a 500: the adapter then knows the instance gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_e2e_proxy_answers_a_termination_of_a_taken_instance_as_auto_scaling_does() {
    use support::aws_intercept::{intercepting_proxy, Answer};
    let (moto, _guard) = moto().await;
    let config = moto.sdk_config().await;
    world(&config).await;
    let proxied = intercepting_proxy(&moto.endpoint, std::sync::Arc::new(|_: &_| Answer::Forward)).await;
    let through = support::moto::sdk_config_for(&proxied).await;
    let asg = aws_sdk_autoscaling::Client::new(&through);
    let aws = AwsPorts::new(&config, false);
    let victim = aws.autoscaling.describe_groups(&names(&["plain"])).await.unwrap()[0].instances[0].id.clone();
    let terminate = || {
        asg.terminate_instance_in_auto_scaling_group()
            .instance_id(victim.as_str())
            .should_decrement_desired_capacity(false)
            .send()
    };
    terminate().await.expect("the first termination");
    let direct = aws_sdk_autoscaling::Client::new(&config)
        .terminate_instance_in_auto_scaling_group()
        .instance_id(victim.as_str())
        .should_decrement_desired_capacity(false)
        .send()
        .await
        .unwrap_err();
    assert_eq!(direct.raw_response().map(|r| r.status().as_u16()), Some(500), "moto itself: {direct:?}");
    let again = terminate().await.unwrap_err();
    let service = again.as_service_error().expect("a service error");
    assert_eq!(aws_sdk_autoscaling::error::ProvideErrorMetadata::code(service), Some("ValidationError"));
    let message = aws_sdk_autoscaling::error::ProvideErrorMetadata::message(service).unwrap_or_default();
    assert!(message.contains("not found") && message.contains(victim.as_str()), "{message}");
    // A termination of an instance a group holds still goes to moto.
    let held = aws.autoscaling.describe_groups(&names(&["plain"])).await.unwrap()[0].instances[0].id.clone();
    asg.terminate_instance_in_auto_scaling_group()
        .instance_id(held.as_str())
        .should_decrement_desired_capacity(true)
        .send()
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_map_to_their_groups_through_a_ttl_cache() {
    let (moto, _guard) = moto().await;
    let config = moto.sdk_config().await;
    world(&config).await;
    let aws = AwsPorts::new(&config, false);
    let groups = aws.autoscaling.describe_groups(&names(&["plain", "mixed"])).await.unwrap();
    let mut ids: Vec<InstanceId> = groups.iter().flat_map(|g| g.instances.iter().map(|i| i.id.clone())).collect();
    ids.push("i-0000000000000beef".into());

    let cache = InstanceGroupCache::new(Duration::from_secs(300), spots_booster::workers::system_clock());
    let map = cache.groups_of(&aws.autoscaling, &ids).await.unwrap();
    assert_eq!(map.values().filter(|g| g.as_ref().map(GroupName::as_str) == Some("plain")).count(), 2);
    assert_eq!(map.values().filter(|g| g.as_ref().map(GroupName::as_str) == Some("mixed")).count(), 3);
    assert_eq!(map[&InstanceId::from("i-0000000000000beef")], None);
    cache.groups_of(&aws.autoscaling, &ids).await.unwrap();
    assert_eq!(aws.stats.calls("DescribeAutoScalingInstances"), 1, "the second lookup is served from the cache");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ec2_tells_spot_from_on_demand_and_names_each_instance() {
    let (moto, _guard) = moto().await;
    let config = moto.sdk_config().await;
    let image = world(&config).await;
    let aws = AwsPorts::new(&config, false);
    let ec2 = aws_sdk_ec2::Client::new(&config);
    let spot_id = InstanceId::from(support::moto::run_spot_instance(&config, &image).await.as_str());
    let on_demand = aws.autoscaling.describe_groups(&names(&["plain"])).await.unwrap()[0].instances[0].id.clone();
    let unknown = InstanceId::from("i-0000000000000cafe");

    let facts = aws.autoscaling.instance_facts(&[spot_id.clone(), on_demand.clone(), unknown.clone()]).await.unwrap();
    assert_eq!(facts[&spot_id].lifecycle, InstanceLifecycle::Spot);
    assert_eq!(facts[&on_demand].lifecycle, InstanceLifecycle::OnDemand);
    assert_eq!(facts.get(&unknown), None, "an unknown id is absent, and does not fail the call");
    // The names a Node claiming the instance must match are EC2's own.
    let described = ec2.describe_instances().instance_ids(on_demand.as_str()).send().await.unwrap();
    let raw = &described.reservations()[0].instances()[0];
    assert!(raw.private_dns_name().is_some_and(|d| d.starts_with("ip-")), "{raw:?}");
    assert_eq!(facts[&on_demand].private_dns_name.as_deref(), raw.private_dns_name());
    assert_eq!(facts[&on_demand].private_ip.as_deref(), raw.private_ip_address());
    // Its launch time (which joining instance is newest) and its capacity pool, EC2's too.
    let launched = raw.launch_time().and_then(|t| t.to_millis().ok()).expect("moto gives a launch time");
    assert_eq!(facts[&on_demand].launched.map(|t| t.as_millis()), Some(launched));
    let pool = facts[&on_demand].pool.clone().expect("a pool");
    assert_eq!(Some(pool.instance_type.as_str()), raw.instance_type().map(|t| t.as_str()));
    assert_eq!(Some(pool.zone.as_str()), raw.placement().and_then(|p| p.availability_zone()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_reads_but_never_writes() {
    let (moto, _guard) = moto().await;
    let config = moto.sdk_config().await;
    world(&config).await;
    let aws = AwsPorts::new(&config, true);

    let out =
        aws.autoscaling.raise_desired(&[DesiredWrite { group: "plain".into(), expected: 2, to: 4 }]).await.unwrap();
    assert!(matches!(out[0].1, Ok(WriteOutcome::DryRun { from: 2, to: 4 })), "{out:?}");
    let victim = aws.autoscaling.describe_groups(&names(&["plain"])).await.unwrap()[0].instances[0].id.clone();
    assert_eq!(aws.autoscaling.terminate_instance(&victim, true).await.unwrap(), TerminateOutcome::DryRun);
    assert_eq!(desired(&config, "plain").await, (2, 2), "nothing changed in moto");
    let stats = aws.stats.snapshot();
    assert_eq!(stats.get("SetDesiredCapacity").map(|s| (s.calls, s.dry_run_skips)), Some((0, 1)));
    assert_eq!(stats["TerminateInstanceInAutoScalingGroup"].dry_run_skips, 1);
}
