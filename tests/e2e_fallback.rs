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
    desired_capacity, env, free_port, kube_client, live_instances, metric, nth_cordon_and_taint, one_app_pod_on,
    pod_ready, register_node, report_pod_ready, run_suffix, schedulable_nodes, scrape, start_booster, LONE_DRAINER,
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
    one_app_pod_on(&kube, &ns, &node).await;
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

/// One round of kubelet and scheduler for `groups`: every live instance's Node is Ready, a Node
/// whose instance left goes (with its pods), and unbound `app=app` pods are bound to the
/// emptiest schedulable Node and reported Ready.
async fn play(kube: &kube::Client, aws: &aws_config::SdkConfig, (ns, suffix): (&str, &str), groups: &[&String]) {
    use k8s_openapi::api::core::v1::{Node, Pod};
    use kube::api::{DeleteParams, ListParams};
    let nodes: kube::Api<Node> = kube::Api::all(kube.clone());
    let pods: kube::Api<Pod> = kube::Api::namespaced(kube.clone(), ns);
    let mut live = std::collections::BTreeSet::new();
    for group in groups {
        for (id, zone) in live_instances(aws, group).await {
            let name = format!("{id}.{suffix}.e2e.internal");
            register_node(kube, &name, &zone, &id, suffix).await;
            live.insert(name);
        }
    }
    let all = pods.list(&ListParams::default().labels("app=app")).await.unwrap().items;
    let ours = nodes.list(&ListParams::default().labels(&format!("spots-booster-e2e={suffix}"))).await.unwrap();
    for n in ours.items {
        let name = n.metadata.name.clone().unwrap();
        if !live.contains(&name) {
            for pod in all.iter().filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(&name)) {
                let _ =
                    pods.delete(pod.metadata.name.as_deref().unwrap(), &DeleteParams::default().grace_period(0)).await;
            }
            let _ = nodes.delete(&name, &DeleteParams::default()).await;
        }
    }
    let schedulable: Vec<String> =
        schedulable_nodes(kube, suffix).await.into_iter().filter(|n| live.contains(n.as_str())).collect();
    let all = pods.list(&ListParams::default().labels("app=app")).await.unwrap().items;
    let mut on: BTreeMap<String, usize> = schedulable.iter().map(|n| (n.clone(), 0)).collect();
    for pod in &all {
        if let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) {
            *on.entry(node).or_default() += 1;
        }
    }
    for pod in &all {
        let name = pod.metadata.name.clone().unwrap();
        match pod.spec.as_ref().and_then(|s| s.node_name.clone()) {
            None => {
                let target = on.iter().filter(|(n, _)| schedulable.contains(n)).min_by_key(|(_, k)| **k);
                if let Some(target) = target.map(|(n, _)| n.clone()) {
                    bind_pod(&pods, &name, &target).await;
                    *on.entry(target).or_default() += 1;
                }
            }
            Some(_) if !pod_ready(pod) => report_pod_ready(&pods, &name).await,
            Some(_) => {}
        }
    }
}

/// A starved group and its fallback, as the return-to-spot cases start: `spot` and `od` (2 of
/// 6 each, `od` named as `spot`'s fallback), an app of two pods with a one-at-a-time budget, the
/// booster started with a 20 s `--return-to-spot-interval` and a 10 s `--capacity-cooldown`, and
/// a notice on one of spot's nodes. spot's pool is dry until the booster gives its raise back
/// (the move to od); from then on it launches again, and Auto Scaling says nothing more of it.
struct Starved {
    kube: kube::Client,
    aws: aws_config::SdkConfig,
    ns: String,
    suffix: String,
    spot: String,
    od: String,
    port: u16,
    booster: tokio::process::Child,
    recovered: Arc<std::sync::atomic::AtomicBool>,
    /// The schedulable nodes before the notice.
    before: Vec<String>,
}

impl Starved {
    async fn start(name: &str) -> Starved {
        let (kubeconfig, endpoint) = env();
        let suffix = run_suffix();
        let kube = kube_client(&kubeconfig).await;
        let aws = aws(&endpoint).await;
        let ns = format!("sb-e2e-{name}-{suffix}");
        create_namespace(&kube, &ns).await;
        let asg = aws_sdk_autoscaling::Client::new(&aws);
        let (spot, od) = (format!("spot-{suffix}"), format!("od-{suffix}"));
        for group in [&spot, &od] {
            create_group(&aws, group, 2, 6).await;
        }
        asg.create_or_update_tags()
            .tags(group_tag(&spot, "spots-booster.io/fallback-groups", &od))
            .send()
            .await
            .unwrap();
        play(&kube, &aws, (&ns, &suffix), &[&spot, &od]).await;
        let before: Vec<String> =
            schedulable_nodes(&kube, &suffix).await.into_iter().filter(|n| !n.contains("placeholder")).collect();

        let state: Dry = Arc::default();
        let dry = dry_pools(vec![spot.clone()], state.clone());
        let recovered = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (flag, home) = (recovered.clone(), spot.clone());
        let hook: Hook = Arc::new(move |form: &BTreeMap<String, String>| {
            use std::sync::atomic::Ordering;
            if flag.load(Ordering::SeqCst) {
                return Answer::Forward;
            }
            let lowered = form.get("Action").map(String::as_str) == Some("SetDesiredCapacity")
                && form.get("AutoScalingGroupName") == Some(&home)
                && form.get("DesiredCapacity").map(String::as_str) == Some("2");
            let answer = dry(form);
            if lowered {
                flag.store(true, Ordering::SeqCst);
            }
            answer
        });
        let proxy = intercepting_proxy(&endpoint, hook).await;
        let port = free_port();
        let mut flags = LONE_DRAINER.to_vec();
        flags.extend(["--return-to-spot-interval", "20s", "--capacity-cooldown", "10s"]);
        let mut booster = start_booster(&kubeconfig, &proxy, &ns, port, &flags);
        await_synced(port, &mut booster).await;
        let mut starved = Starved { kube, aws, ns, suffix, spot, od, port, booster, recovered, before };
        deploy_with_budget(&starved.kube, &starved.ns, "app", 2, serde_json::json!({"maxUnavailable": 1})).await;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            starved.play().await;
            let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
                kube::Api::namespaced(starved.kube.clone(), &starved.ns);
            let listed = pods.list(&kube::api::ListParams::default().labels("app=app")).await.unwrap().items;
            if listed.len() == 2 && listed.iter().all(pod_ready) {
                break;
            }
            assert!(Instant::now() < deadline, "the app never became Ready");
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        let (at_risk, _) = live_instances(&starved.aws, &starved.spot).await.remove(0);
        let at_risk_node = starved.node(&at_risk);
        assert!(starved.before.contains(&at_risk_node));
        nth_cordon_and_taint(&starved.kube, &at_risk_node).await;
        assert!(starved.booster.try_wait().unwrap().is_none(), "spots-booster exited early");
        starved
    }

    fn node(&self, instance: &str) -> String {
        format!("{instance}.{}.e2e.internal", self.suffix)
    }

    async fn play(&self) {
        play(&self.kube, &self.aws, (&self.ns, &self.suffix), &[&self.spot, &self.od]).await;
    }

    /// The nodes of od that carry a `ReturningToSpot` Event.
    async fn returning(&self) -> Vec<String> {
        let mut told = Vec::new();
        for (instance, _) in live_instances(&self.aws, &self.od).await {
            let node = self.node(&instance);
            let events = booster_events_on(&self.kube, &node).await;
            if events.iter().any(|e| e.reason.as_deref() == Some("ReturningToSpot")) {
                told.push(node);
            }
        }
        told
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real API server and moto: set SPOTS_BOOSTER_E2E_KUBECONFIG and SPOTS_BOOSTER_E2E_AWS_ENDPOINT, pass --include-ignored"]
async fn capacity_on_the_fallback_returns_to_its_group_once_that_group_launches_again() {
    let mut w = Starved::start("return").await;
    // The boost fails in spot, moves to od, the at-risk node drains there and goes.
    let deadline = Instant::now() + Duration::from_secs(180);
    let mut moved_at = None;
    let mut returning = None;
    let mut back = None;
    let (od_size, spot_size) = loop {
        w.play().await;
        let text = scrape(w.port).await;
        let (od_size, spot_size) = (desired_capacity(&w.aws, &w.od).await, desired_capacity(&w.aws, &w.spot).await);
        if moved_at.is_none() && od_size == 3 {
            moved_at = Some(Instant::now());
        }
        if returning.is_none() {
            returning = w.returning().await.into_iter().next().map(|node| (node, Instant::now()));
        }
        let returned = format!("spots_booster_returned_to_spot_total{{group=\"{}\"}}", w.spot);
        if back.is_none() && metric(&text, &returned) == 1.0 {
            back = Some(Instant::now());
            break (od_size, spot_size);
        }
        assert!(w.booster.try_wait().unwrap().is_none(), "spots-booster exited early");
        assert!(
            Instant::now() < deadline,
            "od {od_size}, spot {spot_size}; moved: {moved_at:?}; returning: {returning:?}; recovered: {}",
            w.recovered.load(std::sync::atomic::Ordering::SeqCst)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let (moved_at, (node, began), back) =
        (moved_at.unwrap(), returning.expect("a ReturningToSpot Event"), back.unwrap());
    eprintln!(
        "moved to od, then its node {node} began its return {:.1} s later and was back {:.1} s after that",
        began.duration_since(moved_at).as_secs_f64(),
        back.duration_since(began).as_secs_f64()
    );
    assert_eq!(od_size, 2, "od gave back the node it launched for spot (terminated with decrement)");
    assert_eq!(spot_size, 2, "spot relaunched the at-risk node's instance itself: the return raised nothing");
    assert!(w.before.iter().all(|n| n != &node), "the node returned was one od launched for the boost");
    // The next pass shows nothing left on od.
    let deadline = Instant::now() + Duration::from_secs(90);
    let away = format!("spots_booster_fallback_nodes{{group=\"{}\"}}", w.od);
    while metric(&scrape(w.port).await, &away) != 0.0 {
        assert!(Instant::now() < deadline, "od still shows capacity away");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let told = booster_events_on(&w.kube, &node).await;
    assert!(told.iter().any(|e| e.reason.as_deref() == Some("ReturningToSpot")), "{told:?}");
    w.booster.kill().await.unwrap();
}

/// The same starved group, but the only node od launched for the move runs a pod no controller
/// recreates, and od then grows by one of its own (Cluster Autoscaler, for pods that need it):
/// once spot launches again, no return takes either node, the bare pod is never evicted, and the
/// capacity stays on od.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real API server and moto: set SPOTS_BOOSTER_E2E_KUBECONFIG and SPOTS_BOOSTER_E2E_AWS_ENDPOINT, pass --include-ignored"]
async fn a_return_to_spot_never_evicts_a_bare_pod_nor_takes_a_node_the_move_did_not_launch() {
    use k8s_openapi::api::core::v1::Pod;
    let mut w = Starved::start("bare").await;
    let pods: kube::Api<Pod> = kube::Api::namespaced(w.kube.clone(), &w.ns);
    let deadline = Instant::now() + Duration::from_secs(120);
    // The node od launched for the move, once Ready: a bare pod goes on it.
    let launched = loop {
        w.play().await;
        let od_nodes: Vec<String> = live_instances(&w.aws, &w.od).await.into_iter().map(|(i, _)| w.node(&i)).collect();
        let schedulable = schedulable_nodes(&w.kube, &w.suffix).await;
        if let Some(n) = od_nodes.into_iter().find(|n| !w.before.contains(n) && schedulable.contains(n)) {
            break n;
        }
        assert!(Instant::now() < deadline, "od never launched a node for the move");
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let lonely = serde_json::json!({"metadata": {"name": "lonely", "labels": {"app": "lonely"}},
        "spec": {"nodeName": launched, "terminationGracePeriodSeconds": 0, "automountServiceAccountToken": false,
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.9"}]}});
    pods.create(&Default::default(), &serde_json::from_value(lonely).unwrap()).await.unwrap();
    report_pod_ready(&pods, "lonely").await;
    let asg = aws_sdk_autoscaling::Client::new(&w.aws);
    let grown = desired_capacity(&w.aws, &w.od).await + 1;
    asg.set_desired_capacity().auto_scaling_group_name(&w.od).desired_capacity(grown).send().await.unwrap();

    // spot recovers when the booster gives its raise back; a return could begin 20 s after its
    // last failure. Watched for a minute and a half beyond that.
    let deadline = Instant::now() + Duration::from_secs(180);
    while !w.recovered.load(std::sync::atomic::Ordering::SeqCst) {
        w.play().await;
        assert!(Instant::now() < deadline, "spot's raise was never given back");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let watched = Instant::now();
    while watched.elapsed() < Duration::from_secs(90) {
        w.play().await;
        let pod = pods.get_opt("lonely").await.unwrap();
        assert!(
            pod.is_some_and(|p| p.metadata.deletion_timestamp.is_none()),
            "the bare pod was evicted {:?} after spot recovered",
            watched.elapsed()
        );
        let returning = w.returning().await;
        assert!(returning.is_empty(), "a return began for {returning:?}");
        assert!(w.booster.try_wait().unwrap().is_none(), "spots-booster exited early");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let text = scrape(w.port).await;
    let returned = metric(&text, &format!("spots_booster_returned_to_spot_total{{group=\"{}\"}}", w.spot));
    let od_size = desired_capacity(&w.aws, &w.od).await;
    eprintln!("e2e bare pod on the move's node {launched}: od at {od_size}, {returned} returned to spot");
    assert_eq!(returned, 0.0);
    assert_eq!(od_size, grown, "od keeps the move's node and its own");
    w.booster.kill().await.unwrap();
}
