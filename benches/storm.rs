//! A storm through the executor: 1,000 nodes in 20 groups, 200 of them noticed for a spot
//! interruption at once (EC2 confirming every notice), drained by the real drainer through the
//! daemon's own Kubernetes client (its request budget, retry layer and timeouts) against a
//! loopback API server that answers as kube-apiserver does: node GETs and merge patches, pod
//! lists by `spec.nodeName`, and evictions, each eviction answered after 50 ms and its pod gone
//! from the cluster's view once answered.
//!
//! Two runs:
//! - evictions answered with no concurrency cap: notice → first eviction received per node, p99
//!   ≤ 1 s; notice → first pod out, p99 ≤ 2 s;
//! - the server taking at most 30 evictions a second (what this machine's real API server
//!   gives): the first-eviction p99 within 1.2 × 200 ÷ 30 s.
//!
//! `cargo bench --bench storm`.

#[path = "../tests/support/apiserver.rs"]
mod apiserver;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http::Method;
use serde_json::json;
use spots_booster::core::{Evidence, NodeName, Policy, Signal, SignalKind, Timestamp};
use spots_booster::fakes::{FakeAutoScaling, FakeRig, InMemoryCluster, MemoryLedger, RecordedEvents};
use spots_booster::k8s::writes::KubeWrites;
use spots_booster::metrics::Metrics;
use spots_booster::workers::drainer::{Drainer, DrainerSettings};
use spots_booster::workers::groups::GroupBook;
use spots_booster::workers::{PortSet, WorkerContext};
use tokio::sync::{watch, Notify};

const GROUPS: usize = 20;
const NODES_PER_GROUP: usize = 50;
const NOTICES: usize = 200;
const PODS_PER_NODE: usize = 5;
const EVICTION_LATENCY: Duration = Duration::from_millis(50);

type StormPorts = PortSet<FakeAutoScaling, InMemoryCluster, MemoryLedger, KubeWrites, RecordedEvents>;

/// When each noticed node's first eviction reached the server, and its first pod was out.
#[derive(Default)]
struct Seen {
    first_eviction: HashMap<String, Instant>,
    first_out: HashMap<String, Instant>,
    evictions: usize,
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1]
}

fn node_json(name: &str, cordoned: bool) -> serde_json::Value {
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": { "name": name, "resourceVersion": "7", "labels": {} },
        "spec": { "unschedulable": cordoned, "providerID": format!("aws:///us-east-1a/i-{name}") },
    })
}

fn pod_json(node: &str, pod: &spots_booster::core::Pod) -> serde_json::Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": pod.name.as_str(), "namespace": pod.namespace.as_str(), "uid": pod.uid.as_str(),
            "ownerReferences": [{ "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "app", "uid": "uid-owner", "controller": true }],
        },
        "spec": { "nodeName": node, "containers": [{ "name": "app", "image": "app" }] },
        "status": { "phase": "Running" },
    })
}

/// Answers the drainer's requests as kube-apiserver does, evictions after [`EVICTION_LATENCY`]
/// and, with `per_second`, no faster than that many a second.
fn serve(mut server: apiserver::ApiServer, cluster: InMemoryCluster, seen: Arc<Mutex<Seen>>, per_second: Option<u32>) {
    let owners: Arc<HashMap<String, String>> = Arc::new(
        cluster
            .edit(|s| {
                s.nodes.values().flat_map(|n| n.pods.iter().map(|p| (p.name.to_string(), n.name.to_string()))).collect()
            })
            .unwrap_or_default(),
    );
    let next_slot = Arc::new(tokio::sync::Mutex::new(tokio::time::Instant::now()));
    tokio::spawn(async move {
        while let Some((request, responder)) = server.next_request().await {
            let path = request.uri().path().to_string();
            let query = request.uri().query().unwrap_or_default().to_string();
            let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
            match (request.method().clone(), segments.as_slice()) {
                (Method::GET, ["api", "v1", "nodes", name]) => {
                    responder.send_response(apiserver::reply(200, node_json(name, false)))
                }
                (Method::PATCH, ["api", "v1", "nodes", name]) => {
                    responder.send_response(apiserver::reply(200, node_json(name, true)))
                }
                (Method::GET, ["api", "v1", "pods"]) => {
                    let node = query
                        .split('&')
                        .find_map(|kv| kv.strip_prefix("fieldSelector="))
                        .map(|f| f.replace("%3D", "=").replace("spec.nodeName=", ""))
                        .unwrap_or_default();
                    let items: Vec<serde_json::Value> = cluster
                        .edit(|s| {
                            s.nodes
                                .get(&NodeName::from(node.as_str()))
                                .map(|n| n.pods.iter().map(|p| pod_json(&node, p)).collect())
                                .unwrap_or_default()
                        })
                        .unwrap_or_default();
                    let list = json!({ "apiVersion": "v1", "kind": "PodList", "metadata": { "resourceVersion": "9" }, "items": items });
                    responder.send_response(apiserver::reply(200, list));
                }
                (Method::POST, ["api", "v1", "namespaces", _, "pods", pod, "eviction"]) => {
                    let pod = pod.to_string();
                    let node = owners.get(&pod).cloned().unwrap_or_default();
                    {
                        let mut seen = seen.lock().unwrap();
                        seen.evictions += 1;
                        seen.first_eviction.entry(node.clone()).or_insert_with(Instant::now);
                    }
                    let (cluster, seen, next_slot) = (cluster.clone(), seen.clone(), next_slot.clone());
                    tokio::spawn(async move {
                        if let Some(per_second) = per_second {
                            // The server's own pace: one eviction each 1/per_second, queued.
                            let slot = {
                                let mut next = next_slot.lock().await;
                                let slot = (*next).max(tokio::time::Instant::now());
                                *next = slot + Duration::from_secs(1) / per_second;
                                slot
                            };
                            tokio::time::sleep_until(slot).await;
                        }
                        tokio::time::sleep(EVICTION_LATENCY).await;
                        cluster.edit(|s| {
                            if let Some(n) = s.nodes.get_mut(&NodeName::from(node.as_str())) {
                                n.pods.retain(|p| p.name.as_str() != pod);
                            }
                        });
                        seen.lock().unwrap().first_out.entry(node).or_insert_with(Instant::now);
                        let status = json!({ "kind": "Status", "apiVersion": "v1", "status": "Success" });
                        responder.send_response(apiserver::reply(201, status));
                    });
                }
                _ => responder.send_response(apiserver::reply(
                    404,
                    json!({ "kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404 }),
                )),
            }
        }
    });
}

async fn storm(label: &str, per_second: Option<u32>) -> (Duration, Duration, Duration) {
    let mut aws = FakeAutoScaling::default();
    let mut noticed = Vec::new();
    for g in 0..GROUPS {
        let group = format!("spot-{g:02}");
        aws = aws.with_group(&group, u32::try_from(NODES_PER_GROUP).unwrap(), 200);
        for k in 0..NODES_PER_GROUP {
            aws = aws.with_instance(&group, &format!("i-n{g:02}-{k:02}"));
        }
    }
    let rig = FakeRig::new(aws);
    for g in 0..GROUPS {
        for k in 0..NODES_PER_GROUP {
            let name = format!("n{g:02}-{k:02}");
            rig.cluster.put_node(spots_booster::core::Node::test(&name, &format!("spot-{g:02}")).with_pods(
                PODS_PER_NODE,
                100,
                1 << 28,
            ));
            if k < NOTICES / GROUPS {
                noticed.push(name);
            }
        }
    }
    let seen = Arc::new(Mutex::new(Seen::default()));
    // The daemon's default request budget unless the bench is told otherwise, to see what the
    // budget itself costs (`STORM_KUBE_API_QPS`, `STORM_KUBE_API_BURST`).
    let knob = |name: &str, default: u32| std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default);
    let budget = spots_booster::k8s::budget::RequestBudget::new(
        f64::from(knob("STORM_KUBE_API_QPS", spots_booster::k8s::client::DEFAULT_KUBE_API_QPS)),
        knob("STORM_KUBE_API_BURST", spots_booster::k8s::client::DEFAULT_KUBE_API_BURST),
    );
    let (client, server) = apiserver::start_with(&budget).await;
    serve(server, rig.cluster.clone(), seen.clone(), per_second);

    let started = Instant::now();
    let clock: spots_booster::workers::Clock =
        Arc::new(move || Timestamp::from_millis(1_000_000 + i64::try_from(started.elapsed().as_millis()).unwrap()));
    let metrics = Arc::new(Metrics::new());
    let groups = Arc::new(GroupBook::new(
        spots_booster::fakes::CLUSTER,
        Duration::from_secs(60),
        Duration::from_secs(3600),
        clock.clone(),
    ));
    let ports = PortSet {
        aws: rig.aws.clone(),
        cluster: rig.cluster.clone(),
        ledger: rig.ledger.clone(),
        writes: KubeWrites::new(client, false),
        events: rig.events.clone(),
    };
    let ctx = WorkerContext::<StormPorts>::new(
        ports,
        groups,
        rig.leadership.clone(),
        metrics,
        Policy::default(),
        clock.clone(),
    )
    .await
    .unwrap();
    let wake = Arc::new(Notify::new());
    let drainer = Drainer::new(ctx, DrainerSettings::default()).woken_by(wake.clone());
    let (stop, shutdown) = watch::channel(false);
    let running = tokio::spawn(drainer.run(shutdown));
    // A first pass learns the groups, as the daemon's first passes after start do.
    tokio::time::sleep(Duration::from_secs(3)).await;

    let notice_at = Instant::now();
    let now = clock();
    for name in &noticed {
        rig.aws.interrupt(&format!("i-{name}"));
        rig.cluster.signal(Signal {
            instance: format!("i-{name}").into(),
            node: name.as_str().into(),
            kind: SignalKind::SpotInterruption,
            observed_at: now,
            evidence: Evidence::NodeTaint,
            notice_deadline: Some(Timestamp::from_millis(now.as_millis() + 120_000)),
        });
    }
    wake.notify_one();
    let deadline = notice_at + Duration::from_secs(120);
    loop {
        let emptied = rig
            .cluster
            .edit(|s| {
                noticed
                    .iter()
                    .filter(|n| s.nodes.get(&NodeName::from(n.as_str())).is_none_or(|n| n.pods.is_empty()))
                    .count()
            })
            .unwrap_or(0);
        if emptied == noticed.len() || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let emptied_in = notice_at.elapsed();
    stop.send(true).unwrap();
    let _ = running.await;

    let seen = seen.lock().unwrap();
    let since = |at: &BTreeMap<&String, Duration>| {
        let mut d: Vec<Duration> = at.values().copied().collect();
        d.sort();
        d
    };
    let first: BTreeMap<&String, Duration> = noticed
        .iter()
        .filter_map(|n| seen.first_eviction.get(n).map(|t| (n, t.saturating_duration_since(notice_at))))
        .collect();
    let out: BTreeMap<&String, Duration> = noticed
        .iter()
        .filter_map(|n| seen.first_out.get(n).map(|t| (n, t.saturating_duration_since(notice_at))))
        .collect();
    let (first, out) = (since(&first), since(&out));
    assert_eq!(first.len(), NOTICES, "{label}: every noticed node's first eviction came");
    assert_eq!(out.len(), NOTICES, "{label}: every noticed node's first pod went");
    assert!(emptied_in < Duration::from_secs(120), "{label}: every noticed node emptied before its deadline");
    println!(
        "{label}: {} evictions; notice -> first eviction min {:?} p50 {:?} p99 {:?} max {:?}; first pod out p50 {:?} p99 {:?}; all {} nodes emptied in {:?}",
        seen.evictions,
        first[0],
        percentile(&first, 0.5),
        percentile(&first, 0.99),
        first.last().unwrap(),
        percentile(&out, 0.5),
        percentile(&out, 0.99),
        noticed.len(),
        emptied_in,
    );
    (percentile(&first, 0.99), percentile(&out, 0.99), emptied_in)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo test --benches` lists targets; nothing to list here.
    }
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt().with_env_filter(tracing_subscriber::EnvFilter::from_default_env()).init();
    }
    let (first, out, _) = storm("evictions in 50 ms, no cap", None).await;
    let (capped, _, _) = storm("30 evictions a second", Some(30)).await;
    let floor = Duration::from_secs_f64(NOTICES as f64 / 30.0);
    println!(
        "first eviction p99 {first:?} (goal 1 s), first pod out p99 {out:?} (goal 2 s); capped first eviction p99 {capped:?} = {:.2} x 200/30 s (goal 1.2)",
        capped.as_secs_f64() / floor.as_secs_f64()
    );
    // The timings are reported against their goals, not asserted: a shared CI machine's load
    // would fail them for reasons of its own. What must hold, holds: every noticed node's first
    // eviction came and every noticed node was emptied (asserted in `storm`).
    let goal = |met: bool| if met { "met" } else { "MISSED" };
    println!(
        "goals: first eviction p99 <= 1 s {}; first pod out p99 <= 2 s {}; capped within 1.2 x {floor:?} {}",
        goal(first <= Duration::from_secs(1)),
        goal(out <= Duration::from_secs(2)),
        goal(capped.as_secs_f64() <= 1.2 * floor.as_secs_f64()),
    );
}
