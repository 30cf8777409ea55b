//! End-to-end burst: the real binary against a real API server and moto, 20 groups of 5 nodes,
//! and NTH's taint and Event on 2 nodes of every group within a fraction of a second. Ignored
//! unless run with `--include-ignored` and `SPOTS_BOOSTER_E2E_KUBECONFIG` and `SPOTS_BOOSTER_E2E_AWS_ENDPOINT` set.
//!
//! The daemon reaches moto through a loopback proxy that notes when each Auto Scaling request
//! arrives, so the test sees exactly what the daemon sent: one `SetDesiredCapacity` per group,
//! how long after the group's first and last signal, and how many reads the burst cost.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node;
use kube::api::{DeleteParams, ListParams};
use kube::Api;
use support::e2e::{
    await_synced, aws, create_group, env, free_port, kube_client, live_instances, metric, nth_cordon_and_taint,
    nth_rebalance_event, register_node, run_suffix, scrape, start_booster,
};
use support::recording_proxy::{recording_proxy, Sent};

use crate::support;

const GROUPS: usize = 20;
const GROUP_SIZE: i32 = 5;
const AT_RISK_PER_GROUP: i32 = 2;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real API server and moto: set SPOTS_BOOSTER_E2E_KUBECONFIG and SPOTS_BOOSTER_E2E_AWS_ENDPOINT, pass --include-ignored"]
async fn a_burst_across_twenty_groups_costs_one_write_per_group_within_a_quarter_second() {
    let (kubeconfig, endpoint) = env();
    let suffix = run_suffix();
    let ns = format!("sb-burst-{suffix}");
    let kube = kube_client(&kubeconfig).await;
    let config = aws(&endpoint).await;
    support::e2e::create_namespace(&kube, &ns).await;

    let groups: Vec<String> = (0..GROUPS).map(|g| format!("sb-burst-{suffix}-{g:02}")).collect();
    let mut members: Vec<Vec<(String, String)>> = Vec::new();
    for group in &groups {
        create_group(&config, group, GROUP_SIZE, GROUP_SIZE + 10).await;
        let instances = live_instances(&config, group).await;
        for (id, zone) in &instances {
            register_node(&kube, &format!("{id}.{suffix}.e2e.internal"), zone, id, &suffix).await;
        }
        members.push(instances);
    }

    let (proxied, log) = recording_proxy(endpoint.clone()).await;
    let port = free_port();
    let mut booster = start_booster(
        &kubeconfig,
        &proxied,
        &ns,
        port,
        &["--leader-elect", "false", "--instance-groups", "false", "--nth-taint-signals", "true", "--sizing", "count"],
    );
    await_synced(port, &mut booster).await;
    // The daemon has been running a while when a wave comes: its first passes are over.
    let mut quiet_since = (log.lock().unwrap().len(), Instant::now());
    while quiet_since.1.elapsed() < Duration::from_secs(2) {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let seen = log.lock().unwrap().len();
        if seen != quiet_since.0 {
            quiet_since = (seen, Instant::now());
        }
    }
    let before = log.lock().unwrap().len();
    let metrics_before = scrape(port).await;

    // NTH on 2 nodes of every group, the groups' turns spread over a quarter second (a wave as
    // the interruption service sends it): cordon and taint, then the Event.
    let burst_started = Instant::now();
    let signalled: Vec<(Instant, Instant)> =
        futures::future::join_all(members.iter().enumerate().map(|(g, instances)| {
            let (kube, ns, suffix) = (kube.clone(), ns.clone(), suffix.clone());
            async move {
                tokio::time::sleep(Duration::from_millis(12) * g as u32).await;
                let mut first = None;
                for (id, _) in instances.iter().take(AT_RISK_PER_GROUP as usize) {
                    let node = format!("{id}.{suffix}.e2e.internal");
                    first.get_or_insert_with(Instant::now);
                    nth_cordon_and_taint(&kube, &node).await;
                    nth_rebalance_event(&kube, &ns, &node, id).await;
                }
                (first.unwrap(), Instant::now())
            }
        }))
        .await;
    let burst_took = burst_started.elapsed();

    let deadline = Instant::now() + Duration::from_secs(20);
    let writes = loop {
        let writes: Vec<Sent> =
            log.lock().unwrap()[before..].iter().filter(|s| s.action == "SetDesiredCapacity").cloned().collect();
        if writes.len() >= GROUPS || Instant::now() > deadline {
            break writes;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // Anything more for this burst would come within the coalescing bound.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let sent: Vec<Sent> = log.lock().unwrap()[before..].to_vec();

    let mut per_group: BTreeMap<&str, Vec<Instant>> = BTreeMap::new();
    for s in sent.iter().filter(|s| s.action == "SetDesiredCapacity") {
        per_group.entry(s.group.as_deref().unwrap_or("?")).or_default().push(s.at);
    }
    let mut from_first = Vec::new();
    let mut from_last = Vec::new();
    let mut written_again = Vec::new();
    for (g, group) in groups.iter().enumerate() {
        let at = per_group.get(group.as_str()).unwrap_or_else(|| panic!("{group} was never boosted: {writes:?}"));
        if at.len() > 1 {
            written_again.push((group.as_str(), at.len()));
        }
        // From the group's first write: a second one is reported below, then fails the test.
        from_first.push(at[0].duration_since(signalled[g].0));
        from_last.push(at[0].saturating_duration_since(signalled[g].1));
    }
    for (group, instances) in groups.iter().zip(&members) {
        let desired = support::e2e::desired_capacity(&config, group).await;
        assert_eq!(desired, GROUP_SIZE + AT_RISK_PER_GROUP, "{group}: one node per at-risk node ({instances:?})");
    }
    let reads: BTreeMap<&str, usize> =
        sent.iter().filter(|s| s.action.starts_with("Describe")).fold(BTreeMap::new(), |mut m, s| {
            *m.entry(s.action.as_str()).or_default() += 1;
            m
        });
    // When each read left, from the burst's start, beside the first and last write: a read that
    // is no boosting pass's guard shows itself.
    let at = |s: &Sent| format!("{}@{:.3}s", s.action, s.at.duration_since(burst_started).as_secs_f64());
    let timeline: Vec<String> = sent
        .iter()
        .filter(|s| s.action.starts_with("Describe"))
        .map(at)
        .chain(writes.first().map(at))
        .chain(writes.last().map(at))
        .collect();
    eprintln!("e2e burst reads and first/last write: {}", timeline.join(", "));
    from_first.sort();
    from_last.sort();
    let p = |v: &[Duration], q: f64| v[((v.len() as f64 * q).ceil() as usize).clamp(1, v.len()) - 1].as_secs_f64();
    eprintln!(
        "e2e burst: {} signals in {GROUPS} groups within {:.3}s; per group, from its first signal p50 {:.3}s p99 {:.3}s, \
         from its last p50 {:.3}s p99 {:.3}s; {} writes; reads {reads:?}",
        GROUPS * AT_RISK_PER_GROUP as usize,
        burst_took.as_secs_f64(),
        p(&from_first, 0.5),
        p(&from_first, 0.99),
        p(&from_last, 0.5),
        p(&from_last, 0.99),
        per_group.values().map(Vec::len).sum::<usize>(),
    );
    // Where the time went, from the daemon's own stage histogram (boosting passes of this burst).
    let metrics_after = scrape(port).await;
    let delta = |name: &str| metric(&metrics_after, name) - metric(&metrics_before, name);
    let passes = delta("spots_booster_scaler_stage_seconds_count{stage=\"write\"}");
    let stages: Vec<String> = ["observe", "plan", "ledger-save", "write"]
        .iter()
        .map(|stage| {
            let sum = delta(&format!("spots_booster_scaler_stage_seconds_sum{{stage=\"{stage}\"}}"));
            format!("{stage} {:.1} ms", 1000.0 * sum / passes.max(1.0))
        })
        .collect();
    let reaction = delta("spots_booster_reaction_seconds_sum") / delta("spots_booster_reaction_seconds_count").max(1.0);
    eprintln!(
        "e2e burst stages: {passes} boosting passes, per pass {}; watch-seen → write answered, mean {:.3}s",
        stages.join(", "),
        reaction
    );
    assert!(written_again.is_empty(), "one write per group; written more than once: {written_again:?}");
    assert!(
        p(&from_first, 0.99) <= 0.5,
        "every group written within half a second of its first signal: {from_first:?}"
    );
    // A wave takes a pass per clump of groups whose burst ended, but its second guard read takes
    // every group along and serves the later passes' writes (`--guard-read-max-age`, 1 s); the
    // launch watcher may poll once after the writes. No node is looked up.
    let lookups: usize =
        reads.iter().filter(|(action, _)| **action != "DescribeAutoScalingGroups").map(|(_, n)| n).sum();
    assert_eq!(lookups, 0, "every node's group and instance were learnt before the burst: {reads:?}");
    assert!(reads.values().sum::<usize>() <= 3, "a burst's {passes} boosting passes share their guard read: {reads:?}");

    let _ = booster.start_kill();
    let _ = booster.wait().await;
    let nodes: Api<Node> = Api::all(kube.clone());
    for n in nodes.list(&ListParams::default().labels(&format!("spots-booster-e2e={suffix}"))).await.unwrap().items {
        let _ = nodes.delete(&n.metadata.name.unwrap(), &DeleteParams::default()).await;
    }
    let asg = aws_sdk_autoscaling::Client::new(&config);
    for group in &groups {
        let _ = asg.delete_auto_scaling_group().auto_scaling_group_name(group).force_delete(true).send().await;
    }
}
