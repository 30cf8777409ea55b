//! End-to-end: two clusters' groups in one account. The real binary, a real API server and moto.
//! Ignored unless run with `--include-ignored` and `SPOTS_BOOSTER_E2E_KUBECONFIG` and
//! `SPOTS_BOOSTER_E2E_AWS_ENDPOINT` set.
//!
//! Three groups had `AZRebalance` suspended by a booster: ours by this cluster's, theirs by the
//! other cluster's, and one of ours by the other cluster's booster (the record names who). The
//! booster under test runs without `--suspend-az-rebalance`: it resumes only the one its own
//! cluster's booster suspended. A Node naming an instance of the other cluster's group (any kubelet may
//! register one), cordoned and tainted as NTH does, moves nothing: no boost, no drain, no
//! termination in a group whose tags name another cluster.

use std::time::{Duration, Instant};

use aws_config::SdkConfig;
use support::e2e::{
    await_synced, aws, booster_events_on, create_group, create_namespace, desired_capacity, env, free_port,
    kube_client, live_instances, metric, nth_cordon_and_taint, one_app_pod_on, register_node, run_suffix, scrape,
    start_booster, CLUSTER,
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
    let lent = format!("lent-{suffix}");
    create_group(&aws, &lent, 2, 6).await;
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
    for (group, by) in [(&ours, CLUSTER), (&theirs, other.as_str()), (&lent, other.as_str())] {
        asg.suspend_processes().auto_scaling_group_name(group).scaling_processes("AZRebalance").send().await.unwrap();
        asg.create_or_update_tags().tags(group_tag(group, SUSPENDED_TAG, by)).send().await.unwrap();
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
    let (lent_suspended, lent_tags) = az_rebalance_suspended(&aws, &lent).await;
    assert!(lent_suspended && lent_tags.iter().any(|t| t == SUSPENDED_TAG), "another booster's suspension is kept");
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

/// The other cluster's group, retagged from [`create_group`]'s cluster to `other`.
async fn hand_to(aws: &SdkConfig, group: &str, other: &str) {
    let asg = aws_sdk_autoscaling::Client::new(aws);
    let ours = group_tag(group, &format!("kubernetes.io/cluster/{CLUSTER}"), "owned");
    asg.delete_tags().tags(ours).send().await.unwrap();
    let theirs = group_tag(group, &format!("kubernetes.io/cluster/{other}"), "owned");
    asg.create_or_update_tags().tags(theirs).send().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real API server and moto: set SPOTS_BOOSTER_E2E_KUBECONFIG and SPOTS_BOOSTER_E2E_AWS_ENDPOINT, pass --include-ignored"]
async fn a_fallback_of_another_cluster_or_another_tenant_is_refused_told_and_passed_over() {
    use std::collections::BTreeMap;
    use std::sync::{Arc, Mutex};

    use support::aws_intercept::{
        activities_answer, intercepting_proxy, set_desired_capacity_answer, with_desired, Answer, Hook,
    };

    let (kubeconfig, endpoint) = env();
    let suffix = run_suffix();
    let kube = kube_client(&kubeconfig).await;
    let aws = aws(&endpoint).await;
    let ns = format!("sb-e2e-fallback-{suffix}");
    create_namespace(&kube, &ns).await;
    let asg = aws_sdk_autoscaling::Client::new(&aws);

    // `spot` and `od` were made for InstanceGroups of namespace `team`, `tenant` for one of
    // `team-a`; `theirs` is another cluster's. `spot` names all three as fallbacks.
    let (spot, theirs, tenant, od) =
        (format!("spot-{suffix}"), format!("theirs-{suffix}"), format!("team-a-gpu-{suffix}"), format!("od-{suffix}"));
    for group in [&spot, &theirs, &tenant, &od] {
        create_group(&aws, group, 2, 6).await;
    }
    hand_to(&aws, &theirs, &format!("other-{suffix}")).await;
    let namespace = "instancegroups.keikoproj.io/Namespace";
    for (group, key, value) in [
        (&spot, namespace, "team".to_string()),
        (&od, namespace, "team".to_string()),
        (&tenant, namespace, "team-a".to_string()),
        (&spot, "spots-booster.io/fallback-groups", format!("{theirs}, {tenant}, {od}")),
    ] {
        asg.create_or_update_tags().tags(group_tag(group, key, &value)).send().await.unwrap();
    }
    // Only the at-risk node is registered: no other node has room for its pod, so its drain waits
    // for a replacement that never comes in `spot`.
    let (at_risk, zone) = live_instances(&aws, &spot).await.remove(0);
    register_node(&kube, &format!("{at_risk}.{suffix}.e2e.internal"), &zone, &at_risk, &suffix).await;

    // `spot`'s pool is dry: what the booster writes to it launches nothing, and its scaling
    // activities say why, as Auto Scaling does (moto would launch it).
    let written: Arc<Mutex<Option<(u32, String)>>> = Arc::default();
    let (failing, state) = (spot.clone(), written.clone());
    let hook: Hook = Arc::new(move |form: &BTreeMap<String, String>| {
        let group = form.get("AutoScalingGroupName");
        match form.get("Action").map(String::as_str) {
            Some("SetDesiredCapacity") if group == Some(&failing) => {
                let desired: u32 = form["DesiredCapacity"].parse().unwrap();
                let mut state = state.lock().unwrap();
                let failed_at = state.take().map(|(_, at)| at).unwrap_or_else(|| {
                    let later = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(1);
                    later.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
                });
                *state = Some((desired, failed_at));
                Answer::Reply(set_desired_capacity_answer())
            }
            Some("DescribeScalingActivities") if group == Some(&failing) => {
                let state = state.lock().unwrap();
                Answer::Reply(activities_answer(&failing, state.as_ref().map(|(_, at)| at.as_str())))
            }
            Some("DescribeAutoScalingGroups") => match state.lock().unwrap().clone() {
                Some((desired, _)) => {
                    let failing = failing.clone();
                    Answer::Edit(Box::new(move |xml| with_desired(xml, &failing, desired)))
                }
                None => Answer::Forward,
            },
            _ => Answer::Forward,
        }
    });
    let proxy = intercepting_proxy(&endpoint, hook).await;

    let port = free_port();
    let mut booster = start_booster(
        &kubeconfig,
        &proxy,
        &ns,
        port,
        &["--leader-elect", "false", "--instance-groups", "false", "--nth-taint-signals", "true", "--sizing", "count"],
    );
    await_synced(port, &mut booster).await;
    let node = format!("{at_risk}.{suffix}.e2e.internal");
    one_app_pod_on(&kube, &ns, &node).await;
    nth_cordon_and_taint(&kube, &node).await;

    let refused = |text: &str, reason: &str| {
        metric(text, &format!("spots_booster_fallbacks_refused_total{{group=\"{spot}\",reason=\"{reason}\"}}"))
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let text = scrape(port).await;
        let told = (refused(&text, "not-this-cluster"), refused(&text, "other-namespace"));
        let moved = desired_capacity(&aws, &od).await == 3;
        if moved && told == (1.0, 1.0) {
            break;
        }
        assert!(booster.try_wait().unwrap().is_none(), "spots-booster exited early");
        assert!(
            Instant::now() < deadline,
            "boosted: {:?}; refusals told (not-this-cluster, other-namespace): {told:?}; moved to od: {moved}",
            written.lock().unwrap()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // A few passes more: neither refused group is raised, and nothing is told twice.
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(desired_capacity(&aws, &theirs).await, 2, "the other cluster's group is never raised");
    assert_eq!(desired_capacity(&aws, &tenant).await, 2, "nor the other tenant's");
    let text = scrape(port).await;
    assert_eq!((refused(&text, "not-this-cluster"), refused(&text, "other-namespace")), (1.0, 1.0));
    let events = booster_events_on(&kube, &node).await;
    let notes: Vec<String> = events
        .iter()
        .filter(|e| e.reason.as_deref() == Some("FallbackRefused"))
        .filter_map(|e| e.note.clone())
        .collect();
    assert_eq!(notes.len(), 2, "{notes:?}");
    assert!(notes.iter().any(|n| n.contains(&format!("{theirs} is refused: its tags do not name this cluster"))));
    assert!(notes.iter().any(|n| n.contains(&format!("{tenant} is refused: it was made for an InstanceGroup"))));
    assert!(events.iter().any(|e| e.reason.as_deref() == Some("BoostFellBack")), "and it fell back to {od}");
    booster.kill().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real API server and moto: set SPOTS_BOOSTER_E2E_KUBECONFIG and SPOTS_BOOSTER_E2E_AWS_ENDPOINT, pass --include-ignored"]
async fn a_notice_in_an_eks_managed_node_group_is_left_to_eks() {
    let (kubeconfig, endpoint) = env();
    let suffix = run_suffix();
    let kube = kube_client(&kubeconfig).await;
    let aws = aws(&endpoint).await;
    let ns = format!("sb-e2e-mng-{suffix}");
    create_namespace(&kube, &ns).await;
    // This cluster's group, tagged as EKS tags the group behind a managed node group.
    let managed = format!("eks-ng-{suffix}");
    create_group(&aws, &managed, 2, 6).await;
    let asg = aws_sdk_autoscaling::Client::new(&aws);
    asg.create_or_update_tags().tags(group_tag(&managed, "eks:nodegroup-name", "batch")).send().await.unwrap();
    asg.create_or_update_tags().tags(group_tag(&managed, "eks:cluster-name", CLUSTER)).send().await.unwrap();
    for (id, zone) in live_instances(&aws, &managed).await {
        register_node(&kube, &format!("{id}.{suffix}.e2e.internal"), &zone, &id, &suffix).await;
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

    let (instance, _) = live_instances(&aws, &managed).await.remove(0);
    let node = format!("{instance}.{suffix}.e2e.internal");
    nth_cordon_and_taint(&kube, &node).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while metric(&scrape(port).await, "spots_booster_signals_dropped_total{reason=\"eks-managed\"}") < 1.0 {
        assert!(booster.try_wait().unwrap().is_none(), "spots-booster exited early");
        assert!(Instant::now() < deadline, "the notice was not left to EKS as eks-managed");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // A few passes more: nothing of the managed node group moves.
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(desired_capacity(&aws, &managed).await, 2, "never boosted");
    assert_eq!(live_instances(&aws, &managed).await.len(), 2, "never terminated");
    let text = scrape(port).await;
    let touched: Vec<&str> = text
        .lines()
        .filter(|l| l.contains(managed.as_str()))
        .filter(|l| l.starts_with("spots_booster_drains") || l.starts_with("spots_booster_boosts"))
        .collect();
    assert!(touched.is_empty(), "no boost or drain in a managed node group: {touched:?}");
    let told: Vec<_> = booster_events_on(&kube, &node)
        .await
        .into_iter()
        .filter(|e| e.reporting_controller.as_deref() == Some("spots-booster"))
        .filter_map(|e| e.reason)
        .collect();
    assert!(told.is_empty(), "no drain begun on a node EKS drains: {told:?}");
    eprintln!("e2e scope: the notice on {node} was left to EKS (signals_dropped_total{{reason=\"eks-managed\"}})");
    booster.kill().await.unwrap();
}
