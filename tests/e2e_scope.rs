//! End-to-end: two clusters' groups in one account. The real binary, a real API server and moto.
//! Ignored unless run with `--include-ignored` and `SPOTS_BOOSTER_E2E_KUBECONFIG` and
//! `SPOTS_BOOSTER_E2E_AWS_ENDPOINT` set.
//!
//! Both groups had `AZRebalance` suspended by a booster, each by its own cluster's. The booster
//! under test runs without `--suspend-az-rebalance`: it resumes its own group and never the
//! other cluster's. A Node naming an instance of the other cluster's group (any kubelet may
//! register one), cordoned and tainted as NTH does, moves nothing: no boost, no drain, no
//! termination in a group whose tags name another cluster.

use std::time::{Duration, Instant};

use aws_config::SdkConfig;
use support::e2e::{
    await_synced, aws, booster_events_on, create_group, create_namespace, desired_capacity, env, free_port,
    kube_client, live_instances, metric, nth_cordon_and_taint, register_node, run_suffix, scrape, start_booster,
    CLUSTER,
};
use support::moto::group_tag;

use crate::support;

const SUSPENDED_TAG: &str = "spots-booster.io/suspended-az-rebalance";

/// Whether `group` has `AZRebalance` among its suspended processes, and its tags.
async fn az_rebalance_suspended(aws: &SdkConfig, group: &str) -> (bool, Vec<String>) {
    let asg = aws_sdk_autoscaling::Client::new(aws);
    let out = asg.describe_auto_scaling_groups().auto_scaling_group_names(group).send().await.unwrap();
    let g = &out.auto_scaling_groups()[0];
    let suspended = g.suspended_processes().iter().any(|p| p.process_name() == Some("AZRebalance"));
    (suspended, g.tags().iter().filter_map(|t| t.key().map(String::from)).collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real API server and moto: set SPOTS_BOOSTER_E2E_KUBECONFIG and SPOTS_BOOSTER_E2E_AWS_ENDPOINT, pass --include-ignored"]
async fn another_clusters_group_is_never_resumed_boosted_nor_drained() {
    let (kubeconfig, endpoint) = env();
    let suffix = run_suffix();
    let kube = kube_client(&kubeconfig).await;
    let aws = aws(&endpoint).await;
    let ns = format!("sb-e2e-scope-{suffix}");
    create_namespace(&kube, &ns).await;
    let asg = aws_sdk_autoscaling::Client::new(&aws);

    let (ours, theirs) = (format!("ours-{suffix}"), format!("theirs-{suffix}"));
    create_group(&aws, &ours, 2, 6).await;
    create_group(&aws, &theirs, 2, 6).await;
    let other = format!("other-{suffix}");
    asg.delete_tags()
        .tags(group_tag(&theirs, &format!("kubernetes.io/cluster/{CLUSTER}"), "owned"))
        .send()
        .await
        .unwrap();
    asg.create_or_update_tags()
        .tags(group_tag(&theirs, &format!("kubernetes.io/cluster/{other}"), "owned"))
        .send()
        .await
        .unwrap();
    for group in [&ours, &theirs] {
        asg.suspend_processes().auto_scaling_group_name(group).scaling_processes("AZRebalance").send().await.unwrap();
        asg.create_or_update_tags().tags(group_tag(group, SUSPENDED_TAG, "true")).send().await.unwrap();
        for (id, zone) in live_instances(&aws, group).await {
            register_node(&kube, &format!("{id}.{suffix}.e2e.internal"), &zone, &id, &suffix).await;
        }
    }

    let port = free_port();
    let mut booster = start_booster(
        &kubeconfig,
        &endpoint,
        &ns,
        port,
        &["--leader-elect", "false", "--instance-groups", "false", "--nth-taint-signals", "true", "--sizing", "count"],
    );
    await_synced(port, &mut booster).await;

    // NTH, as the other node's kubelet or anyone who may patch Nodes, cordons and taints it.
    let (their_instance, _) = live_instances(&aws, &theirs).await.remove(0);
    nth_cordon_and_taint(&kube, &format!("{their_instance}.{suffix}.e2e.internal")).await;

    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let resumed = !az_rebalance_suspended(&aws, &ours).await.0;
        let dropped = metric(&scrape(port).await, "spots_booster_signals_dropped_total{reason=\"not-this-cluster\"}");
        if resumed && dropped >= 1.0 {
            break;
        }
        assert!(booster.try_wait().unwrap().is_none(), "spots-booster exited early");
        assert!(
            Instant::now() < deadline,
            "its own group resumed: {resumed}; the other cluster's notice dropped as not-this-cluster: {dropped}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // A few passes more: nothing of theirs moves.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let (suspended, tags) = az_rebalance_suspended(&aws, &theirs).await;
    assert!(suspended, "the other cluster's AZRebalance stays suspended");
    assert!(tags.iter().any(|t| t == SUSPENDED_TAG), "and its booster's tag stays: {tags:?}");
    assert!(!az_rebalance_suspended(&aws, &ours).await.1.iter().any(|t| t == SUSPENDED_TAG), "ours is untagged");
    assert_eq!(desired_capacity(&aws, &theirs).await, 2, "never boosted");
    assert_eq!(live_instances(&aws, &theirs).await.len(), 2, "never terminated");
    let text = scrape(port).await;
    let touched: Vec<&str> = text
        .lines()
        .filter(|l| l.contains(theirs.as_str()))
        .filter(|l| l.starts_with("spots_booster_drains") || l.starts_with("spots_booster_boosts"))
        .collect();
    assert!(touched.is_empty(), "no boost or drain of theirs: {touched:?}");
    let told: Vec<_> = booster_events_on(&kube, &format!("{their_instance}.{suffix}.e2e.internal"))
        .await
        .into_iter()
        .filter(|e| e.reporting_controller.as_deref() == Some("spots-booster"))
        .filter_map(|e| e.reason)
        .collect();
    assert!(told.is_empty(), "nothing said of a node the booster does not serve: {told:?}");
    booster.kill().await.unwrap();
}
