//! End-to-end: the market features keep their promises on a real API server with moto. Ignored
//! unless run with `--include-ignored` and `SPOTS_BOOSTER_E2E_KUBECONFIG` and
//! `SPOTS_BOOSTER_E2E_AWS_ENDPOINT` set.
//!
//! A spot interruption EC2 confirms, in a pool whose other nodes run in two groups: both groups
//! are boosted ahead for those pool-mates, and none of them is cordoned, drained or terminated.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node;
use kube::api::{Patch, PatchParams};
use kube::Api;
use serde_json::json;
use support::aws_intercept::{ec2_as_aws, intercepting_proxy};
use support::e2e::{
    await_synced, aws, create_group_in, create_namespace, env, free_port, kube_client, live_instances, metric,
    register_node, run_suffix, scrape, start_booster, LONE_DRAINER,
};

use crate::support;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real API server and moto: set SPOTS_BOOSTER_E2E_KUBECONFIG and SPOTS_BOOSTER_E2E_AWS_ENDPOINT, pass --include-ignored"]
async fn a_confirmed_interruption_boosts_pool_mates_in_two_groups_ahead_and_drains_none_of_them() {
    let (kubeconfig, endpoint) = env();
    let suffix = run_suffix();
    let ns = format!("sb-mates-{suffix}");
    let kube = kube_client(&kubeconfig).await;
    let sdk = aws(&endpoint).await;
    create_namespace(&kube, &ns).await;
    let groups = [format!("mates-a-{suffix}"), format!("mates-b-{suffix}")];
    // One zone: moto launches all of a group's instances in one of its zones, drawn at random, so
    // two zones left the groups sharing no pool half the time.
    for (group, size) in groups.iter().zip([4, 3]) {
        create_group_in(&sdk, group, (size, 12), &["us-east-1a"]).await;
    }
    let name = |id: &str| format!("{id}.{suffix}.e2e.internal");
    // Plays kubelet for every instance the groups list: the old ones and those boosts launch.
    let play = || async {
        let mut all = BTreeMap::new();
        for group in &groups {
            for (id, zone) in live_instances(&sdk, group).await {
                register_node(&kube, &name(&id), &zone, &id, &suffix).await;
                all.insert(id, (group.clone(), zone));
            }
        }
        all
    };
    let at_start = play().await;
    // The victim: in a zone both groups run other instances in, so its pool-mates span both.
    let in_zone = |group: &str, zone: &str| at_start.values().filter(|(g, z)| g == group && z == zone).count();
    let (victim, (victim_group, zone)) = at_start
        .iter()
        .find(|(_, (g, z))| in_zone(g, z) >= 2 && groups.iter().filter(|o| *o != g).all(|o| in_zone(o, z) >= 1))
        .map(|(id, gz)| (id.clone(), gz.clone()))
        .expect("a zone both groups run instances in");
    let mates: BTreeSet<String> =
        at_start.iter().filter(|(id, (_, z))| **id != victim && *z == zone).map(|(id, _)| id.clone()).collect();
    let mut baseline: BTreeMap<String, i32> = BTreeMap::new();
    for group in &groups {
        baseline.insert(group.clone(), support::e2e::desired_capacity(&sdk, group).await);
    }

    let marked = Arc::new(Mutex::new(BTreeSet::new()));
    let proxied = intercepting_proxy(&endpoint, ec2_as_aws(marked.clone())).await;
    let port = free_port();
    let mut flags = LONE_DRAINER.to_vec();
    flags.extend(["--pool-mate-window", "40s"]);
    let mut booster = start_booster(&kubeconfig, &proxied, &ns, port, &flags);
    await_synced(port, &mut booster).await;

    // The notice: NTH's taint and cordon, and EC2 marking the spot request.
    let nodes: Api<Node> = Api::all(kube.clone());
    let noticed = Instant::now();
    marked.lock().unwrap().insert(victim.clone());
    let now = jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    let taint = json!({"spec": {"unschedulable": true, "taints": [{"key": "aws-node-termination-handler/spot-itn",
        "effect": "NoSchedule", "timeAdded": now}]}});
    nodes.patch(&name(&victim), &PatchParams::default(), &Patch::Merge(taint)).await.unwrap();

    // Through the window and its give-back: the pool-mates stay schedulable and alive.
    let mut boosted_ahead: BTreeMap<String, f64> = BTreeMap::new();
    let mut victim_gone = None;
    while noticed.elapsed() < Duration::from_secs(100) {
        let live = play().await;
        let text = scrape(port).await;
        for group in &groups {
            let ahead = metric(&text, &format!("spots_booster_pool_mate_boosted_nodes_total{{group=\"{group}\"}}"));
            boosted_ahead.insert(group.clone(), ahead);
        }
        for mate in &mates {
            assert!(live.contains_key(mate), "pool-mate {mate} terminated {:?} after the notice", noticed.elapsed());
            let node = nodes.get(&name(mate)).await.unwrap();
            let cordoned = node.spec.as_ref().and_then(|s| s.unschedulable).unwrap_or(false);
            assert!(!cordoned, "pool-mate {mate} cordoned {:?} after the notice", noticed.elapsed());
        }
        if victim_gone.is_none() && !live.contains_key(&victim) {
            victim_gone = Some(noticed.elapsed());
        }
        assert!(booster.try_wait().unwrap().is_none(), "spots-booster exited");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    eprintln!(
        "e2e pool-mates: victim {victim} in {victim_group}/{zone}, {} pool-mates; boosted ahead {boosted_ahead:?}; \
         the victim gone {victim_gone:?} after the notice",
        mates.len()
    );
    for group in &groups {
        assert!(boosted_ahead[group] >= 1.0, "{group} was not boosted ahead: {boosted_ahead:?}");
    }
    assert!(victim_gone.is_some(), "the interrupted instance was never drained and terminated");
    // Every group ends at its baseline once the window's nodes are given back.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        play().await;
        let mut sizes = BTreeMap::new();
        for group in &groups {
            sizes.insert(group.clone(), support::e2e::desired_capacity(&sdk, group).await);
        }
        if sizes == baseline {
            break;
        }
        assert!(Instant::now() < deadline, "groups at {sizes:?}, baselines {baseline:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    booster.kill().await.unwrap();
    for n in nodes
        .list(&kube::api::ListParams::default().labels(&format!("spots-booster-e2e={suffix}")))
        .await
        .unwrap()
        .items
    {
        let _ = nodes.delete(n.metadata.name.as_deref().unwrap_or_default(), &Default::default()).await;
    }
}

/// Recommendations with no interruption after them, under `--rebalance-policy standby`: the spares
/// are bought, the nodes are never drained, and when the standby lapses the spares go back and the
/// group stays at its baseline while the recommendations' Events and taints remain. The node NTH
/// cordoned for its recommendation serves again; the one an operator quarantined before (cordon
/// and load-balancer label `true`, set before the daemon started) keeps both, with a `CordonKept`
/// Event saying so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real API server and moto: set SPOTS_BOOSTER_E2E_KUBECONFIG and SPOTS_BOOSTER_E2E_AWS_ENDPOINT, pass --include-ignored"]
async fn a_standby_that_lapses_gives_its_spare_back_and_buys_none_again_while_the_recommendation_stands() {
    let (kubeconfig, endpoint) = env();
    let suffix = run_suffix();
    let ns = format!("sb-standby-{suffix}");
    let kube = kube_client(&kubeconfig).await;
    let sdk = aws(&endpoint).await;
    create_namespace(&kube, &ns).await;
    let group = format!("standby-{suffix}");
    create_group_in(&sdk, &group, (4, 10), &["us-east-1a"]).await;
    let name = |id: &str| format!("{id}.{suffix}.e2e.internal");
    let play = || async {
        let live = live_instances(&sdk, &group).await;
        for (id, zone) in &live {
            register_node(&kube, &name(id), zone, id, &suffix).await;
        }
        live.into_iter().map(|(id, _)| id).collect::<BTreeSet<String>>()
    };
    let mut instances = play().await.into_iter();
    let (recommended, quarantined) = (instances.next().expect("an instance"), instances.next().expect("two"));
    let baseline = support::e2e::desired_capacity(&sdk, &group).await;
    let nodes: Api<Node> = Api::all(kube.clone());
    let lb_label = "node.kubernetes.io/exclude-from-external-load-balancers";
    let quarantine = json!({"metadata": {"labels": {lb_label: "true"}}, "spec": {"unschedulable": true}});
    nodes.patch(&name(&quarantined), &PatchParams::default(), &Patch::Merge(quarantine)).await.unwrap();

    let proxied = intercepting_proxy(&endpoint, ec2_as_aws(Arc::default())).await;
    let port = free_port();
    let mut flags = LONE_DRAINER.to_vec();
    let window = Duration::from_secs(30);
    flags.extend(["--rebalance-policy", "standby", "--rebalance-standby-min", "30s", "--rebalance-standby-max", "30s"]);
    let mut booster = start_booster(&kubeconfig, &proxied, &ns, port, &flags);
    await_synced(port, &mut booster).await;

    // NTH in IMDS mode with taints: cordon, taint and Event; no interruption ever follows.
    let noticed = Instant::now();
    for id in [&recommended, &quarantined] {
        support::e2e::nth_cordon_and_taint(&kube, &name(id)).await;
        support::e2e::nth_rebalance_event(&kube, &ns, &name(id), id).await;
    }

    let mut timeline: Vec<(f64, i32)> = Vec::new();
    let mut back_at = None;
    // The window, one give-back (a minute at most), then as long again with the Event standing.
    let until = window + Duration::from_secs(60) + window + Duration::from_secs(30);
    while noticed.elapsed() < until {
        let live = play().await;
        for id in [&recommended, &quarantined] {
            assert!(live.contains(id), "the recommended node {id} was terminated {:?} in", noticed.elapsed());
        }
        let desired = support::e2e::desired_capacity(&sdk, &group).await;
        if timeline.last().is_none_or(|(_, d)| *d != desired) {
            timeline.push((noticed.elapsed().as_secs_f64(), desired));
        }
        let bought = timeline.iter().any(|(_, d)| *d > baseline);
        if bought && desired == baseline && back_at.is_none() {
            back_at = Some(noticed.elapsed());
        }
        if let Some(back) = back_at {
            assert!(
                desired <= baseline,
                "bought again {:?} after the spare went back at {back:?}: {timeline:?}",
                noticed.elapsed()
            );
        }
        assert!(booster.try_wait().unwrap().is_none(), "spots-booster exited");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let node = nodes.get(&name(&recommended)).await.unwrap();
    let cordoned = node.spec.as_ref().and_then(|s| s.unschedulable).unwrap_or(false);
    let kept = nodes.get(&name(&quarantined)).await.unwrap();
    let kept_cordoned = kept.spec.as_ref().and_then(|s| s.unschedulable).unwrap_or(false);
    let kept_label = kept.metadata.labels.as_ref().and_then(|l| l.get(lb_label)).cloned();
    let kept_told: Vec<String> = support::e2e::booster_events_on(&kube, &name(&quarantined))
        .await
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("CordonKept"))
        .filter_map(|e| e.note)
        .collect();
    let text = scrape(port).await;
    let lapsed = metric(&text, "spots_booster_signals_dropped_total{reason=\"standby-lapsed\"}");
    eprintln!(
        "e2e standby: desired over time (s, desired) {timeline:?}; back at the baseline {back_at:?}; standby-lapsed \
         drops {lapsed}; NTH's node cordoned at the end: {cordoned}; the quarantined node cordoned {kept_cordoned}, \
         label {kept_label:?}, told {kept_told:?}"
    );
    assert!(timeline.iter().any(|(_, d)| *d > baseline), "no spare was bought: {timeline:?}");
    let back = back_at.expect("the spare never went back");
    assert!(back <= window + Duration::from_secs(60), "the spare went back only {back:?} after the notice");
    assert!(!cordoned, "the lapsed node does not serve: still cordoned");
    assert!(kept_cordoned, "the lapse uncordoned a node an operator had cordoned before the recommendation");
    assert_eq!(kept_label.as_deref(), Some("true"), "the operator's label value is kept");
    assert_eq!(kept_told.len(), 1, "one CordonKept Event on the quarantined node: {kept_told:?}");
    assert!(lapsed >= 1.0, "standby-lapsed drops never counted: {text}");
    booster.kill().await.unwrap();
    for n in nodes
        .list(&kube::api::ListParams::default().labels(&format!("spots-booster-e2e={suffix}")))
        .await
        .unwrap()
        .items
    {
        let _ = nodes.delete(n.metadata.name.as_deref().unwrap_or_default(), &Default::default()).await;
    }
}
