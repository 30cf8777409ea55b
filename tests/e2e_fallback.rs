//! End-to-end: a boost whose group and first fallback have no spot capacity lands on the second
//! fallback. The real binary, a real API server, and moto behind a proxy that answers for the
//! dry groups as Auto Scaling does (moto would launch anything). Ignored unless run with
//! `--include-ignored` and `SPOTS_BOOSTER_E2E_KUBECONFIG` and `SPOTS_BOOSTER_E2E_AWS_ENDPOINT` set.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use support::aws_intercept::{
    activities_answer, intercepting_proxy, set_desired_capacity_answer, with_desired, Answer, Hook,
};
use support::e2e::{
    await_synced, aws, bind_pod, booster_events_on, create_group, create_namespace, deploy_with_budget,
    desired_capacity, env, free_port, kube_client, live_instances, nth_cordon_and_taint, register_node,
    report_pod_ready, run_suffix, scrape, start_booster,
};
use support::moto::group_tag;

use crate::support;

/// What the dry groups were asked for: each one's desired capacity as last written, and when
/// its launch failed (RFC 3339, a second after the first write).
type Dry = Arc<Mutex<BTreeMap<String, (u32, String, Instant)>>>;

/// Answers for `dry` groups as Auto Scaling does when their pool has no capacity: a write is
/// taken (moto never sees it) and launches nothing, and the group's activities say why.
fn dry_pools(dry: Vec<String>, state: Dry) -> Hook {
    Arc::new(move |form: &BTreeMap<String, String>| {
        let group = form.get("AutoScalingGroupName").filter(|g| dry.contains(g));
        match (form.get("Action").map(String::as_str), group) {
            (Some("SetDesiredCapacity"), Some(group)) => {
                let desired: u32 = form["DesiredCapacity"].parse().unwrap();
                let mut state = state.lock().unwrap();
                let entry = state.entry(group.clone()).or_insert_with(|| {
                    let later = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(1);
                    (desired, later.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(), Instant::now())
                });
                entry.0 = desired;
                Answer::Reply(set_desired_capacity_answer())
            }
            (Some("DescribeScalingActivities"), Some(group)) => {
                let state = state.lock().unwrap();
                Answer::Reply(activities_answer(group, state.get(group).map(|(_, at, _)| at.as_str())))
            }
            (Some("DescribeAutoScalingGroups"), _) => {
                let written: Vec<(String, u32)> =
                    state.lock().unwrap().iter().map(|(g, (desired, ..))| (g.clone(), *desired)).collect();
                if written.is_empty() {
                    return Answer::Forward;
                }
                Answer::Edit(Box::new(move |xml| written.iter().fold(xml, |xml, (g, d)| with_desired(xml, g, *d))))
            }
            _ => Answer::Forward,
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real API server and moto: set SPOTS_BOOSTER_E2E_KUBECONFIG and SPOTS_BOOSTER_E2E_AWS_ENDPOINT, pass --include-ignored"]
async fn a_boost_whose_group_and_first_fallback_are_dry_lands_on_the_second_within_seconds() {
    let (kubeconfig, endpoint) = env();
    let suffix = run_suffix();
    let kube = kube_client(&kubeconfig).await;
    let aws = aws(&endpoint).await;
    let ns = format!("sb-e2e-dry-{suffix}");
    create_namespace(&kube, &ns).await;
    let asg = aws_sdk_autoscaling::Client::new(&aws);

    let (spot_a, spot_b, spot_c) = (format!("spot-a-{suffix}"), format!("spot-b-{suffix}"), format!("spot-c-{suffix}"));
    for group in [&spot_a, &spot_b, &spot_c] {
        create_group(&aws, group, 2, 6).await;
    }
    let tag = group_tag(&spot_a, "spots-booster.io/fallback-groups", &format!("{spot_b}, {spot_c}"));
    asg.create_or_update_tags().tags(tag).send().await.unwrap();
    // Only the at-risk node is registered: its pod has nowhere else to go, so its drain waits for
    // a replacement.
    let (at_risk, zone) = live_instances(&aws, &spot_a).await.remove(0);
    let node = format!("{at_risk}.{suffix}.e2e.internal");
    register_node(&kube, &node, &zone, &at_risk, &suffix).await;

    let state: Dry = Arc::default();
    let proxy = intercepting_proxy(&endpoint, dry_pools(vec![spot_a.clone(), spot_b.clone()], state.clone())).await;
    let port = free_port();
    let mut booster = start_booster(
        &kubeconfig,
        &proxy,
        &ns,
        port,
        &["--leader-elect", "false", "--instance-groups", "false", "--nth-taint-signals", "true", "--sizing", "count"],
    );
    await_synced(port, &mut booster).await;
    deploy_with_budget(&kube, &ns, "app", 1, serde_json::json!({"maxUnavailable": 1})).await;
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> = kube::Api::namespaced(kube.clone(), &ns);
    let pod = loop {
        let listed = pods.list(&kube::api::ListParams::default().labels("app=app")).await.unwrap();
        if let Some(name) = listed.items.into_iter().find_map(|p| p.metadata.name) {
            break name;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    bind_pod(&pods, &pod, &node).await;
    report_pod_ready(&pods, &pod).await;
    nth_cordon_and_taint(&kube, &node).await;

    // spot-a is raised and fails; its node moves to spot-b, which fails too; it moves on to
    // spot-c, and each dry group is given its raise back.
    let deadline = Instant::now() + Duration::from_secs(90);
    let landed = loop {
        let written = |group: &String| state.lock().unwrap().get(group).map(|(d, ..)| *d);
        let (a, b) = (written(&spot_a), written(&spot_b));
        let sizes = (a, b, desired_capacity(&aws, &spot_c).await);
        if sizes == (Some(2), Some(2), 3) {
            break Instant::now();
        }
        assert!(booster.try_wait().unwrap().is_none(), "spots-booster exited early");
        assert!(Instant::now() < deadline, "(spot-a, spot-b, spot-c) desired: {sizes:?}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let failed = state.lock().unwrap()[&spot_a].2 + Duration::from_secs(1);
    let took = landed.saturating_duration_since(failed);
    eprintln!("landed on the second fallback {:.1} s after the first failed launch", took.as_secs_f64());
    assert!(took <= Duration::from_secs(30), "{took:?} after spot-a's failed activity");

    // A few passes more: nothing is raised again, nothing moves twice.
    tokio::time::sleep(Duration::from_secs(8)).await;
    let spot_b_written = state.lock().unwrap()[&spot_b].0;
    assert_eq!((spot_b_written, desired_capacity(&aws, &spot_c).await), (2, 3));
    // kube's recorder folds a repeated reason on one Node into a series: the first move's note,
    // counted twice.
    let events = booster_events_on(&kube, &node).await;
    let fell_back: Vec<_> = events.iter().filter(|e| e.reason.as_deref() == Some("BoostFellBack")).collect();
    assert_eq!(fell_back.len(), 1, "{fell_back:?}");
    let note = fell_back[0].note.clone().unwrap_or_default();
    assert!(note.contains(&format!("{spot_a} could not launch")) && note.contains(&spot_b), "{note}");
    assert_eq!(fell_back[0].series.as_ref().map(|s| s.count), Some(2), "{fell_back:?}");
    let text = scrape(port).await;
    assert!(
        text.contains(&format!("spots_booster_boosts_total{{group=\"{spot_c}\",outcome=\"fell-back\"}} 1")),
        "{text}"
    );
    booster.kill().await.unwrap();
}
