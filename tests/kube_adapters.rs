//! The Kubernetes adapters against a local HTTP server that answers like kube-apiserver, through
//! the daemon's own client builder (its retry layer included): every request's method, path,
//! query and body, and how each answer is understood.

use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use serde_json::{json, Value};
use spots_booster::core::{BoostLedger, BoostRecord, NodeName, SignalKind, Timestamp};
use spots_booster::k8s::events::KubeEvents;
use spots_booster::k8s::leader::{Attempt, LeaderElector, LeaseTiming};
use spots_booster::k8s::ledger::ConfigMapLedger;
use spots_booster::k8s::watch::{KubeCluster, WatchSettings};
use spots_booster::k8s::writes::KubeWrites;
use spots_booster::metrics::Metrics;
use spots_booster::ports::{
    ClusterView, ClusterWrites, EventSink, EvictOutcome, Leadership, LedgerStore, NodeEvent, NodeEventReason, PodRef,
};
use spots_booster::workers::system_clock;
use tokio::sync::Notify;

use crate::support::apiserver;
use apiserver::{pdb_refusal, reply, ApiServer};

/// The daemon's own client (`build_client`, as `run` builds it) against a local server.
async fn mocked() -> (Client, ApiServer) {
    apiserver::start().await
}

fn status(code: u16, reason: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "reason": reason, "message": reason})
}

/// One request as the server saw it.
#[derive(Debug)]
struct Seen {
    method: String,
    path: String,
    query: String,
    content_type: String,
    body: Value,
}

/// Waits for the next request, answers it, and returns what it was.
async fn answer(
    server: &mut ApiServer,
    respond: impl FnOnce(&Seen) -> http::Response<http_body_util::Full<hyper::body::Bytes>>,
) -> Seen {
    let (request, send) = tokio::time::timeout(Duration::from_secs(5), server.next_request())
        .await
        .expect("a request within 5 s")
        .expect("the client is alive");
    let (parts, bytes) = request.into_parts();
    let seen = Seen {
        method: parts.method.to_string(),
        path: parts.uri.path().to_string(),
        query: parts.uri.query().map(urldecode).unwrap_or_default(),
        content_type: parts.headers.get("content-type").map(|v| v.to_str().unwrap().to_string()).unwrap_or_default(),
        body: if bytes.is_empty() { Value::Null } else { serde_json::from_slice(&bytes).unwrap() },
    };
    send.send_response(respond(&seen));
    seen
}

fn urldecode(q: &str) -> String {
    let b = q.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            out.push(u8::from_str_radix(std::str::from_utf8(&b[i + 1..i + 3]).unwrap(), 16).unwrap());
            i += 3;
        } else {
            out.push(if b[i] == b'+' { b' ' } else { b[i] });
            i += 1;
        }
    }
    String::from_utf8(out).unwrap()
}

fn pod_ref() -> PodRef {
    PodRef { namespace: "shop".into(), name: "web-0".into(), uid: "uid-web-0".into(), owner: None }
}

#[tokio::test]
async fn an_eviction_posts_the_uid_precondition_and_maps_every_answer() {
    for (code, expected) in [
        (201, Some(EvictOutcome::Evicted)),
        (429, Some(EvictOutcome::Blocked { budget: None })),
        (404, Some(EvictOutcome::Gone)),
        (409, Some(EvictOutcome::Gone)),
        (500, None),
    ] {
        let (client, mut server) = mocked().await;
        let writes = KubeWrites::new(client, false);
        let evict = tokio::spawn(async move { writes.evict(&pod_ref()).await });
        let seen = answer(&mut server, |_| match code {
            201 => reply(201, json!({"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201})),
            // kube-apiserver's words (registry/core/pod/storage/eviction.go).
            409 => reply(
                409,
                json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 409,
                "reason": "Conflict", "message": "Operation cannot be fulfilled on Pod \"web-0\": the UID in the \
                precondition (uid-web-0) does not match the UID in record (uid-new). The object might have been \
                deleted and then recreated"}),
            ),
            _ => reply(code, status(code, "TooManyRequests")),
        })
        .await;
        assert_eq!((seen.method.as_str(), seen.path.as_str()), ("POST", "/api/v1/namespaces/shop/pods/web-0/eviction"));
        assert_eq!(seen.body["apiVersion"], "policy/v1");
        assert_eq!(seen.body["kind"], "Eviction");
        assert_eq!(seen.body["metadata"]["name"], "web-0");
        assert_eq!(seen.body["deleteOptions"]["preconditions"]["uid"], "uid-web-0");
        let outcome = evict.await.unwrap();
        match expected {
            Some(e) => assert_eq!(outcome.unwrap(), e, "HTTP {code}"),

            None => {
                let err = outcome.unwrap_err();
                assert!(matches!(err, spots_booster::ports::ClusterWriteError::Evict { .. }), "{err}");
                assert_eq!(err.to_string(), "evicting pod shop/web-0 failed");
            }
        }
    }
}

#[tokio::test]
async fn a_nodes_live_pods_are_a_consistent_list_by_field_selector_and_an_unreadable_pod_fails_the_read() {
    let pod = |name: &str, owner: Option<&str>| {
        let mut p = json!({"metadata": {"name": name, "namespace": "shop", "uid": format!("uid-{name}")},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "resources": {"requests": {"cpu": "100m"}}}]},
            "status": {"phase": "Running"}});
        if let Some(kind) = owner {
            p["metadata"]["ownerReferences"] =
                json!([{"apiVersion": "apps/v1", "kind": kind, "name": "x", "uid": "o", "controller": true}]);
        }
        p
    };
    let (client, mut server) = mocked().await;
    let writes = KubeWrites::new(client, false);
    let read = tokio::spawn(async move { writes.live_pods(&"n1".into()).await });
    // A 503 first: the client's retry layer tries again.
    answer(&mut server, |_| reply(503, status(503, "ServiceUnavailable"))).await;
    let seen = answer(&mut server, |_| {
        let items = json!([pod("web-0", Some("ReplicaSet")), pod("agent", Some("DaemonSet"))]);
        reply(
            200,
            json!({"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "42"}, "items": items}),
        )
    })
    .await;
    assert_eq!((seen.method.as_str(), seen.path.as_str()), ("GET", "/api/v1/pods"));
    assert!(
        seen.query.contains("fieldSelector=spec.nodeName=n1,status.phase!=Succeeded,status.phase!=Failed"),
        "{}",
        seen.query
    );
    assert!(!seen.query.contains("resourceVersion"), "a consistent read, not a cache's: {}", seen.query);
    let pods = read.await.unwrap().unwrap();
    let names: Vec<(&str, spots_booster::core::PodClass)> = pods.iter().map(|p| (p.name.as_str(), p.class)).collect();
    assert_eq!(
        names,
        vec![("web-0", spots_booster::core::PodClass::Ordinary), ("agent", spots_booster::core::PodClass::DaemonSet)]
    );

    // A pod that cannot be read as one (a request no quantity) fails the read: never "empty".
    let (client, mut server) = mocked().await;
    let writes = KubeWrites::new(client, false);
    let read = tokio::spawn(async move { writes.live_pods(&"n1".into()).await });
    answer(&mut server, |_| {
        let mut bad = pod("web-1", Some("ReplicaSet"));
        bad["spec"]["containers"][0]["resources"]["requests"]["cpu"] = json!("lots");
        reply(200, json!({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": [bad]}))
    })
    .await;
    let err = read.await.unwrap().unwrap_err();
    assert_eq!(err.to_string(), "listing the pods of node n1 failed");
}

#[tokio::test]
async fn a_conflict_that_is_not_the_uid_precondition_is_tried_again_never_taken_as_gone() {
    let (client, mut server) = mocked().await;
    let writes = KubeWrites::new(client, false);
    let evict = tokio::spawn(async move { writes.evict(&pod_ref()).await });
    answer(&mut server, |_| {
        reply(
            409,
            json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 409, "reason": "Conflict",
                "message": "Operation cannot be fulfilled on poddisruptionbudgets.policy \"web\": the object has \
                been modified; please apply your changes to the latest version and try again"}),
        )
    })
    .await;
    let err = evict.await.unwrap().unwrap_err();
    assert!(matches!(err, spots_booster::ports::ClusterWriteError::Evict { .. }), "{err}");
}

#[tokio::test]
async fn a_pdb_refusal_comes_back_at_once_whatever_retry_after_says() {
    let (client, mut server) = mocked().await;
    let writes = KubeWrites::new(client, false);
    let started = std::time::Instant::now();
    let evict = tokio::spawn(async move { writes.evict(&pod_ref()).await });
    answer(&mut server, |_| pdb_refusal()).await;
    // kube's default client would wait the 10 s and ask again, up to 15 times.
    let outcome = tokio::time::timeout(Duration::from_secs(3), evict).await.expect("the refusal comes back at once");
    // The budget is named as kube-apiserver's DisruptionBudget cause names it.
    assert_eq!(outcome.unwrap().unwrap(), EvictOutcome::Blocked { budget: Some("web".into()) });
    assert!(started.elapsed() < Duration::from_secs(2), "not retried inside the call: {:?}", started.elapsed());
    let again = tokio::time::timeout(Duration::from_millis(300), server.next_request()).await;
    assert!(again.is_err(), "no second attempt");
    assert_eq!(server.hits(), 1);
}

#[tokio::test]
async fn a_pod_under_two_budgets_is_an_error_and_an_unavailable_server_is_retried() {
    let (client, mut server) = mocked().await;
    let writes = KubeWrites::new(client, false);
    let w = writes.clone();
    let evict = tokio::spawn(async move { w.evict(&pod_ref()).await });
    // kube-apiserver answers 500 when more than one PodDisruptionBudget selects the pod.
    answer(&mut server, |_| {
        reply(500, json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 500,
            "reason": "InternalError",
            "message": "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."}))
    })
    .await;
    let err = evict.await.unwrap().unwrap_err();
    assert_eq!(err.to_string(), "evicting pod shop/web-0 failed");
    assert_eq!(server.hits(), 1, "not retried");

    let evict = tokio::spawn(async move { writes.evict(&pod_ref()).await });
    answer(&mut server, |_| reply(503, status(503, "ServiceUnavailable"))).await;
    answer(&mut server, |_| {
        reply(201, json!({"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201}))
    })
    .await;
    assert_eq!(evict.await.unwrap().unwrap(), EvictOutcome::Evicted);
    assert_eq!(server.hits(), 3, "the 503 was retried once");
}

#[tokio::test]
async fn a_throttled_read_honours_retry_after_within_bounds() {
    let (client, mut server) = mocked().await;
    let store = ConfigMapLedger::new(client, "spots", "spots-booster-ledger");
    let started = std::time::Instant::now();
    let load = tokio::spawn(async move { store.load().await });
    answer(&mut server, |_| {
        let mut r = reply(429, status(429, "TooManyRequests"));
        r.headers_mut().insert("Retry-After", "1".parse().unwrap());
        r
    })
    .await;
    answer(&mut server, |_| reply(404, status(404, "NotFound"))).await;
    assert_eq!(load.await.unwrap().unwrap(), BoostLedger::default());
    assert!(started.elapsed() >= Duration::from_secs(1), "waited as asked");

    // A server that keeps failing gets a bounded number of attempts, then the error.
    let (client, mut server) = mocked().await;
    let store = ConfigMapLedger::new(client, "spots", "spots-booster-ledger");
    let load = tokio::spawn(async move { store.load().await });
    for _ in 0..=spots_booster::k8s::retry::MAX_RETRIES {
        answer(&mut server, |_| reply(503, status(503, "ServiceUnavailable"))).await;
    }
    assert!(load.await.unwrap().is_err());
    assert_eq!(server.hits(), 1 + spots_booster::k8s::retry::MAX_RETRIES as usize);
}

#[tokio::test]
async fn dry_run_evictions_and_patches_ask_the_server_to_validate_only() {
    let (client, mut server) = mocked().await;
    let writes = KubeWrites::new(client, true);
    let w = writes.clone();
    tokio::spawn(async move { w.evict(&pod_ref()).await });
    let seen = answer(&mut server, |_| reply(201, json!({"kind": "Status", "code": 201}))).await;
    assert!(seen.query.contains("dryRun=All"), "{}", seen.query);
    assert_eq!(seen.body["deleteOptions"]["dryRun"], json!(["All"]));
    tokio::spawn(async move { writes.cordon(&NodeName::from("n1")).await });
    let read = answer(&mut server, |_| reply(200, node_object("7", false, None))).await;
    assert_eq!(read.method, "GET", "a read is never dry");
    let seen = answer(&mut server, |_| reply(200, json!({"metadata": {"name": "n1"}}))).await;
    assert_eq!(seen.method, "PATCH");
    assert!(seen.query.contains("dryRun=All"), "{}", seen.query);
}

/// A Node as kube-apiserver returns it: `resourceVersion`, whether it is unschedulable, and its
/// load-balancer exclusion label's value, if any.
fn node_object(rv: &str, unschedulable: bool, excluded: Option<&str>) -> Value {
    let mut labels = json!({"kubernetes.io/hostname": "ip-10-0-1-2"});
    if let Some(v) = excluded {
        labels["node.kubernetes.io/exclude-from-external-load-balancers"] = json!(v);
    }
    json!({"apiVersion": "v1", "kind": "Node",
           "metadata": {"name": "ip-10-0-1-2.ec2.internal", "resourceVersion": rv, "labels": labels},
           "spec": {"unschedulable": unschedulable}})
}

#[tokio::test]
async fn cordon_and_scale_down_protection_are_merge_patches_on_the_node() {
    let (client, mut server) = mocked().await;
    let writes = KubeWrites::new(client, false);
    let node = NodeName::from("ip-10-0-1-2.ec2.internal");
    let path = "/api/v1/nodes/ip-10-0-1-2.ec2.internal";

    // The cordon reads the node, then patches it at the version it read.
    let (w, n) = (writes.clone(), node.clone());
    let cordon = tokio::spawn(async move { w.cordon(&n).await });
    let seen = answer(&mut server, |_| reply(200, node_object("41", false, None))).await;
    assert_eq!((seen.method.as_str(), seen.path.as_str()), ("GET", path));
    let seen = answer(&mut server, |_| reply(200, node_object("42", true, Some("spots-booster")))).await;
    assert_eq!((seen.method.as_str(), seen.path.as_str()), ("PATCH", path));
    assert_eq!(seen.content_type, "application/merge-patch+json");
    assert!(seen.query.contains("fieldManager=spots-booster"), "{}", seen.query);
    // Out of external load balancers too, as NTH's excludeFromLoadBalancers does.
    assert_eq!(
        seen.body,
        json!({"metadata": {"resourceVersion": "41",
                            "labels": {"node.kubernetes.io/exclude-from-external-load-balancers": "spots-booster"}},
               "spec": {"unschedulable": true}})
    );
    cordon.await.unwrap().unwrap();

    // An operator labelled the node between the read and the patch: the API server refuses the
    // stale version, and the cordon reads again and leaves the operator's value alone.
    let (w, n) = (writes.clone(), node.clone());
    let cordon = tokio::spawn(async move { w.cordon(&n).await });
    answer(&mut server, |_| reply(200, node_object("50", false, None))).await;
    let conflict = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 409, "reason": "Conflict",
        "message": "Operation cannot be fulfilled on nodes \"ip-10-0-1-2.ec2.internal\": the object has been modified; please apply your changes to the latest version and try again"});
    let seen = answer(&mut server, |_| reply(409, conflict.clone())).await;
    assert_eq!(seen.method, "PATCH");
    let seen = answer(&mut server, |_| reply(200, node_object("51", false, Some("true")))).await;
    assert_eq!(seen.method, "GET");
    let seen = answer(&mut server, |_| reply(200, node_object("52", true, Some("true")))).await;
    assert_eq!(seen.body, json!({"metadata": {"resourceVersion": "51"}, "spec": {"unschedulable": true}}));
    cordon.await.unwrap().unwrap();
    // Already out of service, whoever set it: nothing to write.
    let (w, n) = (writes.clone(), node.clone());
    let cordon = tokio::spawn(async move { w.cordon(&n).await });
    answer(&mut server, |_| reply(200, node_object("52", true, Some("true")))).await;
    cordon.await.unwrap().unwrap();

    // A node chosen to give capacity back whose drain could not finish is made schedulable again;
    // the label goes only with the booster's value (a JSON patch that tests it first).
    let (w, n) = (writes.clone(), node.clone());
    let uncordon = tokio::spawn(async move { w.uncordon(&n).await });
    let seen = answer(&mut server, |_| reply(200, node_object("60", false, Some("true")))).await;
    assert_eq!((seen.method.as_str(), seen.path.as_str()), ("PATCH", path));
    assert_eq!(seen.content_type, "application/merge-patch+json");
    assert_eq!(seen.body, json!({"spec": {"unschedulable": null}}));
    let seen = answer(&mut server, |_| reply(422, status(422, "Invalid"))).await;
    assert_eq!(seen.content_type, "application/json-patch+json");
    assert_eq!(
        seen.body,
        json!([{"op": "test", "path": "/metadata/labels/node.kubernetes.io~1exclude-from-external-load-balancers", "value": "spots-booster"},
               {"op": "remove", "path": "/metadata/labels/node.kubernetes.io~1exclude-from-external-load-balancers"}])
    );
    uncordon.await.unwrap().expect("someone else's label stays, and that is no failure");
    let (w, n) = (writes.clone(), node.clone());
    let failed = tokio::spawn(async move { w.uncordon(&n).await });
    answer(&mut server, |_| reply(403, status(403, "Forbidden"))).await;
    let err = failed.await.unwrap().unwrap_err();
    assert_eq!(err.to_string(), "uncordoning node ip-10-0-1-2.ec2.internal failed");

    let (w, n) = (writes.clone(), node.clone());
    let protect = tokio::spawn(async move { w.protect_from_scale_down(&n, true).await });
    let seen = answer(&mut server, |_| reply(200, json!({"metadata": {"name": "x"}}))).await;
    assert_eq!(
        seen.body,
        json!({"metadata": {"annotations": {
            "cluster-autoscaler.kubernetes.io/scale-down-disabled": "true",
            "spots-booster.io/scale-down-protected": "true"}}})
    );
    protect.await.unwrap().unwrap();

    let (w, n) = (writes.clone(), node.clone());
    let lift = tokio::spawn(async move { w.protect_from_scale_down(&n, false).await });
    let seen = answer(&mut server, |_| reply(404, status(404, "NotFound"))).await;
    assert_eq!(
        seen.body,
        json!({"metadata": {"annotations": {
            "cluster-autoscaler.kubernetes.io/scale-down-disabled": null,
            "spots-booster.io/scale-down-protected": null}}})
    );
    lift.await.unwrap().expect("a node that left needs no protection lifted");
}

fn ledger() -> BoostLedger {
    let mut l = BoostLedger::default();
    l.record(BoostRecord {
        group: "spot-a".into(),
        instances: ["i-0abc".into()].into(),
        added: 1,
        returned: 0,
        at: Timestamp::from_millis(1_000),
        before: 0,
        settled: Default::default(),
        kept: Default::default(),
        expired: None,
        giving_back: Default::default(),
        raising_to: None,
        returning: Default::default(),
        moved: Vec::new(),
        ahead: None,
        standby: None,
    });
    l
}

const LEDGER_PATH: &str = "/api/v1/namespaces/spots/configmaps/spots-booster-ledger";
const POOLS_PATH: &str = "/api/v1/namespaces/spots/configmaps/spots-booster-ledger-pools";
const CREATE_PATH: &str = "/api/v1/namespaces/spots/configmaps";

fn pool_memory() -> spots_booster::core::PoolMemory {
    serde_json::from_value(json!({"pools": [{
        "group": "spot-a", "instance_type": "m5.large", "zone": "us-east-1a", "recommendations": 2.0,
        "converted": 1.0, "lapsed": 1.0, "lead_seconds": [900], "as_of": 0}]}))
    .unwrap()
}

/// Answers a write with what was written, at `version`.
fn written_at(version: &str) -> impl FnOnce(&Seen) -> http::Response<http_body_util::Full<hyper::body::Bytes>> {
    let version = version.to_string();
    move |seen| {
        let mut written = seen.body.clone();
        written["metadata"]["resourceVersion"] = json!(version);
        reply(if seen.method == "POST" { 201 } else { 200 }, written)
    }
}

/// Pool memory lives in a ConfigMap of its own: saving it never writes the ledger's object, and
/// reading it never moves the ledger's resourceVersion, so a writer that saved the ledger in
/// between still makes this one's save conflict (409) instead of being overwritten.
#[tokio::test]
async fn pool_memory_has_its_own_configmap_and_reading_it_keeps_the_ledgers_concurrency_check() {
    let (client, mut server) = mocked().await;
    let store = Arc::new(ConfigMapLedger::new(client, "spots", "spots-booster-ledger"));
    let ledger_text = serde_json::to_string(&ledger()).unwrap();

    let s = store.clone();
    let load = tokio::spawn(async move { s.load().await });
    let text = ledger_text.clone();
    answer(&mut server, move |_| {
        reply(200, json!({"metadata": {"name": "spots-booster-ledger", "resourceVersion": "3"}, "data": {"ledger.json": text}}))
    })
    .await;
    assert_eq!(load.await.unwrap().unwrap(), ledger());

    // Another replica saves the ledger (now at 7) and the pool memory; this one re-reads the
    // pool memory only.
    let s = store.clone();
    let load = tokio::spawn(async move { s.load_pools().await });
    let memory_text = serde_json::to_string(&pool_memory()).unwrap();
    let seen = answer(&mut server, move |_| {
        reply(
            200,
            json!({"metadata": {"name": "spots-booster-ledger-pools", "resourceVersion": "8"},
                          "data": {"pools.json": memory_text}}),
        )
    })
    .await;
    assert_eq!((seen.method.as_str(), seen.path.as_str()), ("GET", POOLS_PATH));
    assert_eq!(load.await.unwrap().unwrap(), pool_memory());

    let s = store.clone();
    let save = tokio::spawn(async move { s.save(&BoostLedger::default()).await });
    let seen = answer(&mut server, |_| reply(409, status(409, "Conflict"))).await;
    assert_eq!((seen.method.as_str(), seen.path.as_str()), ("PUT", LEDGER_PATH));
    assert_eq!(seen.body["metadata"]["resourceVersion"], "3", "the version the ledger was read at, not a newer one");
    assert!(seen.body["data"].get("pools.json").is_none(), "the ledger's object holds the ledger only: {}", seen.body);
    assert!(save.await.unwrap().is_err(), "the other writer's ledger is not overwritten");

    // A pool save goes to the pool memory's object, on its own version, without a finalizer.
    let s = store.clone();
    let save = tokio::spawn(async move { s.save_pools(&pool_memory()).await });
    let seen = answer(&mut server, written_at("9")).await;
    assert_eq!((seen.method.as_str(), seen.path.as_str()), ("PUT", POOLS_PATH));
    assert_eq!(seen.body["metadata"]["resourceVersion"], "8");
    assert!(seen.body["metadata"].get("finalizers").is_none_or(|f| f.is_null()), "{}", seen.body);
    assert!(seen.body["data"].get("ledger.json").is_none());
    save.await.unwrap().unwrap();
}

/// A pool memory saved beside the ledger (before it moved out) is read from there until the
/// pool memory's own object exists, and kept by ledger saves until then; after the first pool
/// save, the ledger's object no longer carries it.
#[tokio::test]
async fn pool_memory_kept_beside_the_ledger_moves_to_its_own_configmap() {
    let (client, mut server) = mocked().await;
    let store = Arc::new(ConfigMapLedger::new(client, "spots", "spots-booster-ledger"));
    let ledger_text = serde_json::to_string(&ledger()).unwrap();
    let memory_text = serde_json::to_string(&pool_memory()).unwrap();

    let s = store.clone();
    let load = tokio::spawn(async move { s.load().await });
    let (l, m) = (ledger_text.clone(), memory_text.clone());
    answer(&mut server, move |_| {
        reply(
            200,
            json!({"metadata": {"name": "spots-booster-ledger", "resourceVersion": "3"},
                          "data": {"ledger.json": l, "pools.json": m}}),
        )
    })
    .await;
    load.await.unwrap().unwrap();
    let s = store.clone();
    let load = tokio::spawn(async move { s.load_pools().await });
    let seen = answer(&mut server, |_| reply(404, status(404, "NotFound"))).await;
    assert_eq!(seen.path, POOLS_PATH);
    assert_eq!(load.await.unwrap().unwrap(), pool_memory(), "read from beside the ledger");

    let s = store.clone();
    let save = tokio::spawn(async move { s.save(&ledger()).await });
    let seen = answer(&mut server, written_at("4")).await;
    assert_eq!(seen.body["data"]["pools.json"].as_str(), Some(memory_text.as_str()), "kept until it has moved");
    save.await.unwrap().unwrap();

    let s = store.clone();
    let save = tokio::spawn(async move { s.save_pools(&pool_memory()).await });
    let seen = answer(&mut server, written_at("1")).await;
    assert_eq!((seen.method.as_str(), seen.path.as_str()), ("POST", CREATE_PATH));
    assert_eq!(seen.body["metadata"]["name"], "spots-booster-ledger-pools");
    save.await.unwrap().unwrap();

    let s = store.clone();
    let save = tokio::spawn(async move { s.save(&ledger()).await });
    let seen = answer(&mut server, written_at("5")).await;
    assert_eq!((seen.path.as_str(), &seen.body["metadata"]["resourceVersion"]), (LEDGER_PATH, &json!("4")));
    assert!(seen.body["data"].get("pools.json").is_none(), "moved: {}", seen.body);
    save.await.unwrap().unwrap();
}

/// A pool memory that does not parse is an error naming its object and key, and the next save
/// first copies it to `…-pools-unparsable` (annotated with where it came from) and only then
/// replaces it; if the copy fails, nothing is overwritten.
#[tokio::test]
async fn an_unparsable_pool_memory_is_set_aside_before_it_is_overwritten() {
    let (client, mut server) = mocked().await;
    let store = Arc::new(ConfigMapLedger::new(client, "spots", "spots-booster-ledger"));
    let s = store.clone();
    let load = tokio::spawn(async move { s.load_pools().await });
    answer(&mut server, |_| {
        reply(
            200,
            json!({"metadata": {"name": "spots-booster-ledger-pools", "resourceVersion": "6"},
                          "data": {"pools.json": "{oops"}}),
        )
    })
    .await;
    let err = load.await.unwrap().unwrap_err();
    let chain = format!("{err}: {}", std::error::Error::source(&err).unwrap());
    assert!(chain.contains("spots-booster-ledger-pools: data.pools.json is not a pool memory"), "{chain}");
    assert!(chain.contains("kept aside in spots-booster-ledger-pools-unparsable"), "{chain}");

    // The copy is refused (RBAC, say): the save fails and the bad text is not overwritten.
    let s = store.clone();
    let save = tokio::spawn(async move { s.save_pools(&pool_memory()).await });
    let seen = answer(&mut server, |_| reply(404, status(404, "NotFound"))).await;
    assert_eq!(seen.path, format!("{POOLS_PATH}-unparsable"));
    let seen = answer(&mut server, |_| reply(403, status(403, "Forbidden"))).await;
    assert_eq!((seen.method.as_str(), seen.body["data"]["pools.json"].as_str()), ("POST", Some("{oops")));
    assert!(save.await.unwrap().is_err());

    let s = store.clone();
    let save = tokio::spawn(async move { s.save_pools(&pool_memory()).await });
    answer(&mut server, |_| reply(404, status(404, "NotFound"))).await;
    let seen = answer(&mut server, written_at("1")).await;
    assert_eq!(seen.body["metadata"]["name"], "spots-booster-ledger-pools-unparsable");
    assert_eq!(
        seen.body["metadata"]["annotations"]["spots-booster.io/set-aside-from"],
        "spots/spots-booster-ledger-pools@6"
    );
    let seen = answer(&mut server, written_at("7")).await;
    assert_eq!((seen.method.as_str(), seen.path.as_str()), ("PUT", POOLS_PATH));
    assert_eq!(seen.body["metadata"]["resourceVersion"], "6");
    save.await.unwrap().unwrap();

    // Set aside once: the next save goes straight to the pool memory.
    let s = store.clone();
    let save = tokio::spawn(async move { s.save_pools(&pool_memory()).await });
    let seen = answer(&mut server, written_at("8")).await;
    assert_eq!((seen.method.as_str(), seen.path.as_str()), ("PUT", POOLS_PATH));
    save.await.unwrap().unwrap();
}

/// At its count bounds, with the longest names Auto Scaling allows, the pool memory is far past
/// a ConfigMap's 1 MiB; what is saved stays within `POOLS_MAX_BYTES`, every tenant keeps pools,
/// and a ledger save that follows is untouched by it.
#[tokio::test]
async fn a_pool_memory_past_its_byte_cap_is_saved_cut_fairly_and_the_ledger_saves_regardless() {
    use spots_booster::core::pool_memory::{MAX_POOLS, MAX_TRACKED};
    use spots_booster::k8s::ledger::POOLS_MAX_BYTES;
    let long = |tenant: &str, k: usize| format!("{tenant}-{}-{k}", "g".repeat(230));
    let pools: Vec<Value> = (0..MAX_POOLS)
        .map(|k| {
            let tenant = if k < 40 { "team-b" } else { "team-a" };
            json!({"group": long(tenant, k), "instance_type": "m5.24xlarge", "zone": "ap-southeast-4a",
                   "recommendations": 3.0, "interruptions": 2.0, "converted": 1.0, "lapsed": 1.0,
                   "failed_launches": {"InsufficientInstanceCapacity": 4.0, "MaxSpotInstanceCountExceeded": 1.0},
                   "lead_seconds": vec![86_399; 64], "as_of": 1_700_000_000_000u64, "tenant": tenant})
        })
        .collect();
    let tracked: serde_json::Map<String, Value> = (0..MAX_TRACKED)
        .map(|k| {
            let tenant = if k < 100 { "team-b" } else { "team-a" };
            (
                format!("i-{k:017x}"),
                json!({"pool": {"group": long(tenant, k % MAX_POOLS), "instance_type": "m5.24xlarge",
                "zone": "ap-southeast-4a"}, "recommended": 1_700_000_000_000u64, "resolved": false, "tenant": tenant}),
            )
        })
        .collect();
    let memory: spots_booster::core::PoolMemory =
        serde_json::from_value(json!({"pools": pools, "tracked": tracked})).unwrap();
    assert!(serde_json::to_vec(&memory).unwrap().len() > 1 << 20, "the case is past a ConfigMap's limit");

    let (client, mut server) = mocked().await;
    let store = Arc::new(ConfigMapLedger::new(client, "spots", "spots-booster-ledger"));
    let s = store.clone();
    let save = tokio::spawn(async move { s.save_pools(&memory).await });
    let seen = answer(&mut server, written_at("1")).await;
    save.await.unwrap().unwrap();
    let text = seen.body["data"]["pools.json"].as_str().unwrap();
    assert!(text.len() <= POOLS_MAX_BYTES, "{} bytes", text.len());
    let saved: spots_booster::core::PoolMemory = serde_json::from_str(text).unwrap();
    let of = |tenant: &str| saved.pools.iter().filter(|p| p.tenant.as_deref() == Some(tenant)).count();
    assert_eq!(of("team-b"), 40, "the small tenant keeps every pool");
    assert!(of("team-a") > 0 && saved.pools.len() < MAX_POOLS, "{} pools", saved.pools.len());

    let s = store.clone();
    let save = tokio::spawn(async move { s.save(&ledger()).await });
    let seen = answer(&mut server, written_at("1")).await;
    assert_eq!((seen.method.as_str(), seen.body["metadata"]["name"].as_str()), ("POST", Some("spots-booster-ledger")));
    save.await.unwrap().unwrap();
}

#[tokio::test]
async fn the_ledger_configmap_is_created_then_replaced_with_its_resource_version() {
    let (client, mut server) = mocked().await;
    let store = Arc::new(ConfigMapLedger::new(client, "spots", "spots-booster-ledger"));

    let s = store.clone();
    let load = tokio::spawn(async move { s.load().await });
    let seen = answer(&mut server, |_| reply(404, status(404, "NotFound"))).await;
    assert_eq!(
        (seen.method.as_str(), seen.path.as_str()),
        ("GET", "/api/v1/namespaces/spots/configmaps/spots-booster-ledger")
    );
    assert_eq!(load.await.unwrap().unwrap(), BoostLedger::default());

    let s = store.clone();
    let save = tokio::spawn(async move { s.save(&ledger()).await });
    let seen = answer(&mut server, |seen| {
        let mut created = seen.body.clone();
        created["metadata"]["resourceVersion"] = json!("7");
        reply(201, created)
    })
    .await;
    assert_eq!((seen.method.as_str(), seen.path.as_str()), ("POST", "/api/v1/namespaces/spots/configmaps"));
    let saved: BoostLedger = serde_json::from_str(seen.body["data"]["ledger.json"].as_str().unwrap()).unwrap();
    assert_eq!(saved, ledger());
    assert_eq!(seen.body["metadata"]["finalizers"], json!(["spots-booster.io/ledger"]), "fails closed across restarts");
    save.await.unwrap().unwrap();

    let s = store.clone();
    let save = tokio::spawn(async move { s.save(&BoostLedger::default()).await });
    let seen = answer(&mut server, |_| reply(409, status(409, "Conflict"))).await;
    assert_eq!(
        (seen.method.as_str(), seen.path.as_str()),
        ("PUT", "/api/v1/namespaces/spots/configmaps/spots-booster-ledger")
    );
    assert_eq!(seen.body["metadata"]["resourceVersion"], "7", "optimistic concurrency");
    assert!(save.await.unwrap().is_err(), "a conflicting writer makes the save fail");

    let s = store.clone();
    let load = tokio::spawn(async move { s.load().await });
    answer(&mut server, |_| {
        reply(
            200,
            json!({"metadata": {"name": "spots-booster-ledger", "resourceVersion": "9"},
                          "data": {"ledger.json": "{not json"}}),
        )
    })
    .await;
    let err = load.await.unwrap().unwrap_err();
    let chain = format!("{err}: {}", std::error::Error::source(&err).unwrap());
    assert!(chain.contains("data.ledger.json is not a ledger"), "{chain}");

    // Deleted after it existed: an error, never an empty ledger (every instance would be boosted
    // again).
    let s = store.clone();
    let load = tokio::spawn(async move { s.load().await });
    answer(&mut server, |_| reply(404, status(404, "NotFound"))).await;
    let err = load.await.unwrap().unwrap_err();
    let chain = format!("{err}: {}", std::error::Error::source(&err).unwrap());
    assert!(chain.contains("ConfigMap spots/spots-booster-ledger was deleted"), "{chain}");

    // A fresh process: the finalizer kept the deleted ConfigMap, so the deletion is seen and
    // refused though this process never saw it exist.
    let (client, mut server) = mocked().await;
    let fresh = ConfigMapLedger::new(client, "spots", "spots-booster-ledger");
    let load = tokio::spawn(async move { fresh.load().await });
    answer(&mut server, |_| {
        reply(
            200,
            json!({"metadata": {"name": "spots-booster-ledger", "resourceVersion": "11",
                                "deletionTimestamp": "2026-11-23T10:00:00Z",
                                "finalizers": ["spots-booster.io/ledger"]},
                   "data": {"ledger.json": serde_json::to_string(&ledger()).unwrap()}}),
        )
    })
    .await;
    let err = load.await.unwrap().unwrap_err();
    let chain = format!("{err}: {}", std::error::Error::source(&err).unwrap());
    assert!(chain.contains("is being deleted") && chain.contains("remove its finalizer"), "{chain}");
}

#[tokio::test]
async fn a_candidate_creates_a_missing_lease_and_respects_a_live_holder() {
    let timing = LeaseTiming {
        lease_duration: Duration::from_secs(15),
        renew_deadline: Duration::from_secs(10),
        retry_period: Duration::from_secs(2),
    };
    let (client, mut server) = mocked().await;
    let mut me = LeaderElector::new(
        client,
        "spots",
        "spots-booster",
        "pod-a",
        timing.clone(),
        Leadership::follower(),
        Arc::new(Metrics::new()),
    );
    let attempt = tokio::spawn(async move {
        let first = me.try_acquire_or_renew().await.unwrap();
        (me, first)
    });
    let seen = answer(&mut server, |_| reply(404, status(404, "NotFound"))).await;
    assert_eq!(seen.path, "/apis/coordination.k8s.io/v1/namespaces/spots/leases/spots-booster");
    let seen = answer(&mut server, |seen| reply(201, seen.body.clone())).await;
    assert_eq!((seen.method.as_str(), seen.body["spec"]["holderIdentity"].as_str()), ("POST", Some("pod-a")));
    assert_eq!(seen.body["spec"]["leaseDurationSeconds"], 15);
    let (mut me, first) = attempt.await.unwrap();
    assert_eq!(first, Attempt::Leading);

    // Someone else holds a live lease: no write, we follow.
    let attempt = tokio::spawn(async move { me.try_acquire_or_renew().await.unwrap() });
    answer(&mut server, |_| {
        reply(200, json!({"metadata": {"name": "spots-booster", "resourceVersion": "3"},
            "spec": {"holderIdentity": "pod-b", "leaseDurationSeconds": 15, "renewTime": "2026-11-21T10:00:00.000000Z"}}))
    })
    .await;
    assert_eq!(attempt.await.unwrap(), Attempt::Following(Some("pod-b".into())));
    let next = tokio::time::timeout(Duration::from_millis(100), server.next_request()).await;
    assert!(matches!(next, Err(_) | Ok(None)), "a follower does not write");
}

#[tokio::test]
async fn events_name_the_node_with_its_uid_so_kubectl_describe_finds_them() {
    let (client, mut server) = mocked().await;
    let cluster = KubeCluster::new(settings(), Arc::new(Notify::new()), Arc::new(Metrics::new()), system_clock());
    let events = KubeEvents::new(client, Some("pod-a".into()), cluster);
    let publish = tokio::spawn(async move {
        events
            .publish(NodeEvent {
                node: "n1".into(),
                reason: NodeEventReason::BoostRequested,
                note: "desired capacity of spot-a 3 -> 4".into(),
            })
            .await
    });
    let seen = answer(&mut server, |seen| reply(201, seen.body.clone())).await;
    assert_eq!(
        (seen.method.as_str(), seen.path.as_str()),
        ("POST", "/apis/events.k8s.io/v1/namespaces/default/events")
    );
    assert_eq!(seen.body["regarding"]["kind"], "Node");
    assert_eq!(seen.body["regarding"]["name"], "n1");
    assert_eq!(seen.body["reason"], "BoostRequested");
    assert_eq!(
        (seen.body["action"].as_str(), seen.body["type"].as_str()),
        (Some("SetDesiredCapacity"), Some("Normal"))
    );
    assert_eq!(seen.body["reportingController"], "spots-booster");
    assert_eq!(seen.body["reportingInstance"], "pod-a");
    publish.await.unwrap();
}

fn settings() -> WatchSettings {
    WatchSettings {
        events_namespace: "default".into(),
        ca_status_namespace: "kube-system".into(),
        ca_status_name: "cluster-autoscaler-status".into(),
        nth_taints: false,
        signal_grace: spots_booster::k8s::watch::SIGNAL_GRACE,
        ca_status_max_age: spots_booster::k8s::watch::CA_STATUS_MAX_AGE,
    }
}

const CA_STATUS: &str = include_str!("fixtures/ca-status/yaml-1.30.yaml");

fn list(kind: &str, items: Value) -> Value {
    json!({"kind": kind, "apiVersion": "v1", "metadata": {"resourceVersion": "100"}, "items": items})
}

#[tokio::test]
async fn the_watches_use_server_side_selectors_and_sync_into_one_view() {
    let (client, mut server) = mocked().await;
    let wake = Arc::new(Notify::new());
    let metrics = Arc::new(Metrics::new());
    let cluster = KubeCluster::new(settings(), wake.clone(), metrics.clone(), system_clock());
    cluster.spawn_watches(&client);
    assert!(cluster.current().is_none());

    let node = json!({"metadata": {"name": "n1", "uid": "node-uid-1", "creationTimestamp": "2026-11-21T09:00:00Z"},
        "spec": {"providerID": "aws:///eu-central-1a/i-0a1b2c3d4e5f67890", "unschedulable": true},
        "status": {"allocatable": {"cpu": "4", "memory": "16Gi"}, "conditions": [{"type": "Ready", "status": "True"}],
                   "addresses": [{"type": "InternalIP", "address": "10.0.1.2"}, {"type": "Hostname", "address": "n1"}]}});
    let pod = json!({"metadata": {"name": "web-0", "namespace": "shop", "uid": "uid-web-0"},
        "spec": {"nodeName": "n1", "containers": [{"name": "c", "resources": {"requests": {"cpu": "500m"}}}]},
        "status": {"phase": "Running"}});
    let event = json!({"metadata": {"name": "n1.17d", "namespace": "default", "uid": "ev-1"},
        "involvedObject": {"kind": "Node", "name": "n1", "namespace": "default"},
        "reason": "RebalanceRecommendation",
        "message": "Rebalance recommendation received. Instance will be cordoned at 2026-11-21T09:59:00Z \n",
        "firstTimestamp": "2026-11-21T09:59:01Z", "lastTimestamp": "2026-11-21T09:59:01Z", "type": "Normal",
        "source": {"component": "aws-node-termination-handler", "host": "n1"}});
    // Written by a running CA: a status older than --ca-status-max-age would not be used.
    let written = jiff::Timestamp::now().strftime("time: %Y-%m-%d %H:%M:%S.%f +0000 UTC").to_string();
    let status = CA_STATUS.replacen("time: 2024-09-03 14:05:12.634471023 +0000 UTC", &written, 1);
    let ca = json!({"metadata": {"name": "cluster-autoscaler-status", "namespace": "kube-system"},
        "data": {"status": status}});

    let mut lists = Vec::new();
    for _ in 0..4 {
        let seen = answer(&mut server, |seen| match seen.path.as_str() {
            "/api/v1/nodes" => reply(200, list("NodeList", json!([node]))),
            "/api/v1/pods" => reply(200, list("PodList", json!([pod]))),
            "/api/v1/namespaces/default/events" => reply(200, list("EventList", json!([event]))),
            "/api/v1/namespaces/kube-system/configmaps" => reply(200, list("ConfigMapList", json!([ca]))),
            other => panic!("unexpected request {other}"),
        })
        .await;
        lists.push(seen);
    }
    let query = |path: &str| lists.iter().find(|s| s.path == path).unwrap().query.clone();
    assert!(
        query("/api/v1/pods").contains("fieldSelector=status.phase!=Succeeded,status.phase!=Failed"),
        "unbound pods too: the capacity gap counts their Pending time"
    );
    assert!(query("/api/v1/namespaces/default/events").contains("fieldSelector=involvedObject.kind=Node"));
    assert!(query("/api/v1/namespaces/kube-system/configmaps")
        .contains("fieldSelector=metadata.name=cluster-autoscaler-status"));
    assert!(!query("/api/v1/nodes").contains("watch=true"), "a list first");

    tokio::time::timeout(Duration::from_secs(5), cluster.wait_synced()).await.expect("synced");
    let state = cluster.current().expect("synced view");
    assert_eq!(state.signals.len(), 1);
    let signal = &state.signals[0];
    assert_eq!((signal.instance.as_str(), signal.kind), ("i-0a1b2c3d4e5f67890", SignalKind::Rebalance));
    let n1 = &state.nodes[&NodeName::from("n1")];
    assert!(n1.cordoned && n1.ready);
    assert_eq!(n1.internal_ips, vec!["10.0.1.2".to_string()], "the address a custom-named node is verified by");
    assert_eq!(n1.pods.len(), 1, "pods are attached to signalled nodes");
    assert_eq!(n1.pods[0].uid.as_str(), "uid-web-0");
    assert!(!state.ca.is_empty(), "CA's groups are known");
    assert!(state.first_seen.contains_key(&signal.instance));
    assert_eq!(cluster.node_uid(&NodeName::from("n1")).as_deref(), Some("node-uid-1"));
    assert!(metrics.encode().contains("spots_booster_synced 1"));
}

#[tokio::test]
async fn an_unbound_pod_with_a_controller_is_kept_for_the_capacity_gap_until_the_watch_sees_it_bound() {
    let (client, mut server) = mocked().await;
    let cluster = KubeCluster::new(settings(), Arc::new(Notify::new()), Arc::new(Metrics::new()), system_clock());
    cluster.spawn_watches(&client);
    let owned = |name: &str, node: Option<&str>| {
        json!({"metadata": {"name": name, "namespace": "shop", "uid": format!("uid-{name}"), "resourceVersion": "101",
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-5d8f",
                                     "uid": "rs-uid-web", "controller": true}]},
               "spec": {"nodeName": node, "containers": [{"name": "c"}]}, "status": {"phase": "Pending"}})
    };
    let bare = json!({"metadata": {"name": "debug", "namespace": "shop", "uid": "uid-debug"},
        "spec": {"containers": [{"name": "c"}]}, "status": {"phase": "Pending"}});
    let before = system_clock()();
    let mut held = Vec::new();
    let mut watched_pods = false;
    while !watched_pods {
        let (request, send) = tokio::time::timeout(Duration::from_secs(5), server.next_request())
            .await
            .expect("a request within 5 s")
            .expect("the client is alive");
        let (path, query) = (request.uri().path().to_string(), request.uri().query().unwrap_or_default().to_string());
        let watch = query.contains("watch=true");
        match (path.as_str(), watch) {
            ("/api/v1/nodes", false) => send.send_response(reply(200, list("NodeList", json!([])))),
            ("/api/v1/pods", false) => send.send_response(reply(
                200,
                list("PodList", json!([owned("web-new", None), owned("web-old", Some("n1")), bare])),
            )),
            ("/api/v1/namespaces/default/events", false) => {
                send.send_response(reply(200, list("EventList", json!([]))))
            }
            ("/api/v1/namespaces/kube-system/configmaps", false) => {
                send.send_response(reply(200, list("ConfigMapList", json!([]))))
            }
            ("/api/v1/pods", true) => {
                tokio::time::timeout(Duration::from_secs(5), cluster.wait_synced()).await.expect("synced");
                let pending = cluster.pending_pods();
                assert_eq!(pending.len(), 1, "only the unbound pod a controller will have replaced: {pending:?}");
                let p = &pending[0];
                assert_eq!((p.uid.as_str(), p.owner.as_str(), p.ended), ("uid-web-new", "rs-uid-web", None));
                assert!(p.since >= before, "since the watch first saw it");
                // The scheduler binds it: kube-apiserver's watch says so in a MODIFIED event.
                let event = json!({"type": "MODIFIED", "object": owned("web-new", Some("n2"))});
                let body = format!("{event}\n");
                send.send_response(
                    http::Response::builder()
                        .status(200)
                        .header("content-type", "application/json")
                        .body(http_body_util::Full::new(hyper::body::Bytes::from(body)))
                        .unwrap(),
                );
                watched_pods = true;
            }
            // The other watches stay open, as kube-apiserver holds them.
            _ => held.push(send),
        }
    }
    let ended = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            if let Some(end) = cluster.pending_pods().first().and_then(|p| p.ended) {
                return end;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the binding is seen");
    assert!(ended >= cluster.pending_pods()[0].since);
    drop(held);
}

#[tokio::test]
async fn a_dry_run_ledger_reads_the_cluster_but_never_writes_it() {
    let (client, mut server) = mocked().await;
    let store = Arc::new(ConfigMapLedger::new(client, "spots", "spots-booster-ledger").read_only());
    let s = store.clone();
    let load = tokio::spawn(async move { s.load().await });
    answer(&mut server, |_| reply(404, status(404, "NotFound"))).await;
    assert_eq!(load.await.unwrap().unwrap(), BoostLedger::default());
    store.save(&ledger()).await.unwrap();
    assert_eq!(store.load().await.unwrap(), ledger(), "kept in memory");
    let next = tokio::time::timeout(Duration::from_millis(100), server.next_request()).await;
    assert!(matches!(next, Err(_) | Ok(None)), "nothing written to the cluster");
}

/// Answers the elector's requests until `until`: GET returns the lease as `holder` holds it;
/// every write gets `write_status`.
async fn serve_lease(server: &mut ApiServer, holder: &str, write_status: u16, until: std::time::Instant) -> Vec<Seen> {
    let mut seen = Vec::new();
    while std::time::Instant::now() < until {
        let Ok(Some((request, send))) = tokio::time::timeout(Duration::from_millis(100), server.next_request()).await
        else {
            continue;
        };
        let method = request.method().to_string();
        let body = request.into_body();
        let lease = json!({"metadata": {"name": "spots-booster", "resourceVersion": "5"},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": 3, "renewTime": "2026-11-21T10:00:00.000000Z"}});
        send.send_response(match method.as_str() {
            "GET" => reply(200, lease),
            _ if write_status < 300 => reply(write_status, serde_json::from_slice(&body).unwrap()),
            _ => reply(write_status, status(write_status, "InternalError")),
        });
        seen.push(Seen {
            method,
            path: String::new(),
            query: String::new(),
            content_type: String::new(),
            body: serde_json::from_slice(&body).unwrap_or(Value::Null),
        });
    }
    seen
}

#[tokio::test]
async fn a_leader_that_cannot_renew_steps_down_at_its_deadline_and_releases_on_shutdown() {
    let timing = LeaseTiming {
        lease_duration: Duration::from_secs(3),
        renew_deadline: Duration::from_millis(1500),
        retry_period: Duration::from_millis(300),
    };
    let metrics = Arc::new(Metrics::new());
    let leadership = Leadership::follower();
    let (client, mut server) = mocked().await;
    let elector =
        LeaderElector::new(client, "spots", "spots-booster", "pod-a", timing, leadership.clone(), metrics.clone());
    let (stop, shutdown) = tokio::sync::watch::channel(false);
    let task = tokio::spawn(elector.run(shutdown));

    // It creates the lease and leads.
    answer(&mut server, |_| reply(404, status(404, "NotFound"))).await;
    answer(&mut server, |seen| reply(201, seen.body.clone())).await;
    let start = std::time::Instant::now();
    // Renewals succeed for a while …
    serve_lease(&mut server, "pod-a", 200, start + Duration::from_millis(700)).await;
    assert!(leadership.is_leader());
    // … then fail: it keeps leading until the renew deadline, then stops at once.
    let failing = std::time::Instant::now();
    serve_lease(&mut server, "pod-a", 500, failing + Duration::from_millis(900)).await;
    assert!(leadership.is_leader(), "within the renew deadline");
    serve_lease(&mut server, "pod-a", 500, failing + Duration::from_millis(2200)).await;
    assert!(!leadership.is_leader(), "past the renew deadline");
    let text = metrics.encode();
    assert!(text.contains("spots_booster_leader_transitions_total{change=\"lost\"} 1"), "{text}");

    // Renewals work again: it leads again; on shutdown it gives the lease up.
    serve_lease(&mut server, "pod-a", 200, std::time::Instant::now() + Duration::from_millis(700)).await;
    assert!(leadership.is_leader());
    stop.send(true).unwrap();
    let writes = serve_lease(&mut server, "pod-a", 200, std::time::Instant::now() + Duration::from_millis(500)).await;
    task.await.unwrap();
    let release = writes.iter().rev().find(|s| s.method == "PUT").expect("a release");
    assert!(release.body["spec"]["holderIdentity"].is_null(), "{}", release.body);
    assert!(!leadership.is_leader());
}

fn instance_groups(client: Client) -> Arc<spots_booster::instancegroup::k8s::KubeInstanceGroups> {
    Arc::new(spots_booster::instancegroup::k8s::KubeInstanceGroups::new(
        client,
        Some("spots-booster-0".into()),
        "instance-manager".into(),
        "instance-manager".into(),
    ))
}

#[tokio::test]
async fn instancegroup_status_goes_to_the_subresource_as_a_merge_patch() {
    use spots_booster::instancegroup::store::GroupStatus;
    use spots_booster::instancegroup::InstanceGroupStatus;
    let (client, mut server) = mocked().await;
    let store = instance_groups(client);

    let s = store.clone();
    let ready = InstanceGroupStatus { current_state: "Ready".into(), current_min: Some(1), ..Default::default() };
    let patch = tokio::spawn(async move { s.patch_status("t", "a", &ready).await });
    let seen = answer(&mut server, |seen| reply(200, json!({"apiVersion": "instancemgr.keikoproj.io/v1alpha1", "kind": "InstanceGroup", "metadata": {"name": "a"}, "spec": {}, "status": seen.body["status"].clone()}))).await;
    assert_eq!(
        (seen.method.as_str(), seen.path.as_str(), seen.content_type.as_str()),
        (
            "PATCH",
            "/apis/instancemgr.keikoproj.io/v1alpha1/namespaces/t/instancegroups/a/status",
            "application/merge-patch+json"
        )
    );
    assert_eq!(seen.body, json!({"status": {"currentState": "Ready", "currentMin": 1}}), "status only, never spec");
    patch.await.unwrap().unwrap();
}

#[tokio::test]
async fn an_instancegroup_event_names_the_object_by_kind_namespace_name_and_uid() {
    use spots_booster::instancegroup::store::{GroupRef, GroupStatus};
    let (client, mut server) = mocked().await;
    let store = instance_groups(client);
    let group = GroupRef { namespace: "tenant-a".into(), name: "batch".into(), uid: Some("uid-1".into()) };
    let publish = tokio::spawn(async move { store.event(&group, "RotatingNodes", "rotating 1 of 3", false).await });
    let seen = answer(&mut server, |seen| reply(201, seen.body.clone())).await;
    assert_eq!(
        (seen.method.as_str(), seen.path.as_str()),
        ("POST", "/apis/events.k8s.io/v1/namespaces/tenant-a/events"),
        "in the object's namespace, where `kubectl describe` looks"
    );
    assert_eq!(
        seen.body["regarding"],
        json!({"apiVersion": "instancemgr.keikoproj.io/v1alpha1", "kind": "InstanceGroup",
               "namespace": "tenant-a", "name": "batch", "uid": "uid-1"})
    );
    assert_eq!((seen.body["reason"].as_str(), seen.body["type"].as_str()), (Some("RotatingNodes"), Some("Normal")));
    publish.await.unwrap().unwrap();
}

#[tokio::test]
async fn aws_auth_is_never_created_and_is_replaced_with_its_resource_version_after_a_conflict() {
    use spots_booster::instancegroup::store::AwsAuth;
    let (client, mut server) = mocked().await;
    let store = instance_groups(client);
    let arn = "arn:aws:iam::1:role/nodes";

    // Missing: an error saying what to do, and no write (the daemon has no `create` in
    // kube-system).
    let s = store.clone();
    let upsert = tokio::spawn(async move { s.upsert_aws_auth(arn).await });
    let seen = answer(&mut server, |_| reply(404, status(404, "NotFound"))).await;
    assert_eq!(
        (seen.method.as_str(), seen.path.as_str()),
        ("GET", "/api/v1/namespaces/kube-system/configmaps/aws-auth")
    );
    let err = upsert.await.unwrap().unwrap_err();
    assert!(err.to_string().contains("kube-system/aws-auth does not exist") && err.to_string().contains(arn), "{err}");
    let next = tokio::time::timeout(Duration::from_millis(100), server.next_request()).await;
    assert!(matches!(next, Err(_) | Ok(None)), "nothing created");

    let existing = json!({"metadata": {"name": "aws-auth", "namespace": "kube-system", "resourceVersion": "5"},
                          "data": {"mapRoles": "- rolearn: arn:aws:iam::1:role/admin\n  username: admin\n  groups: [system:masters]\n",
                                   "mapUsers": "[]"}});
    let s = store.clone();
    let upsert = tokio::spawn(async move { s.upsert_aws_auth(arn).await });
    answer(&mut server, |_| reply(200, existing.clone())).await;
    let seen = answer(&mut server, |_| reply(409, status(409, "Conflict"))).await;
    assert_eq!((seen.method.as_str(), seen.body["metadata"]["resourceVersion"].as_str()), ("PUT", Some("5")));
    let mut newer = existing.clone();
    newer["metadata"]["resourceVersion"] = json!("6");
    answer(&mut server, |_| reply(200, newer.clone())).await;
    let seen = answer(&mut server, |seen| reply(200, seen.body.clone())).await;
    assert_eq!(seen.body["metadata"]["resourceVersion"], "6", "read again after the conflict");
    let roles = seen.body["data"]["mapRoles"].as_str().unwrap();
    assert!(roles.contains("role/admin") && roles.contains(arn), "{roles}");
    assert_eq!(seen.body["data"]["mapUsers"], "[]");
    assert_eq!(
        seen.body["metadata"]["annotations"]["spots-booster.io/owned-roles"],
        json!(format!("[\"{arn}\"]")),
        "the daemon marks the entries it made"
    );
    upsert.await.unwrap().unwrap();

    // The admin role is someone else's: refused, nothing written.
    let before = server.hits();
    let s = store.clone();
    let upsert = tokio::spawn(async move { s.upsert_aws_auth("arn:aws:iam::1:role/admin").await });
    answer(&mut server, |_| reply(200, existing.clone())).await;
    let err = upsert.await.unwrap().unwrap_err();
    assert!(err.to_string().contains("already mapped in kube-system/aws-auth"), "{err}");
    let s = store.clone();
    let remove = tokio::spawn(async move { s.remove_aws_auth("arn:aws:iam::1:role/admin").await });
    answer(&mut server, |_| reply(200, existing.clone())).await;
    remove.await.unwrap().unwrap();
    assert_eq!(server.hits(), before + 2, "two reads, no write: the admin entry is neither rewritten nor removed");

    let s = store.clone();
    let remove = tokio::spawn(async move { s.remove_aws_auth(arn).await });
    answer(&mut server, |_| reply(404, status(404, "NotFound"))).await;
    remove.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_rotation_is_a_node_annotation_and_the_boundaries_come_from_their_configmap() {
    use spots_booster::instancegroup::store::{Boundaries, Rotations};
    let (client, mut server) = mocked().await;
    let store = instance_groups(client);

    let s = store.clone();
    let mark = tokio::spawn(async move { s.mark_for_rotation("ip-10-0-0-1", "2026-11-21T10:00:00Z").await });
    let seen = answer(&mut server, |_| reply(200, json!({"metadata": {"name": "ip-10-0-0-1"}}))).await;
    assert_eq!((seen.method.as_str(), seen.path.as_str()), ("PATCH", "/api/v1/nodes/ip-10-0-0-1"));
    assert_eq!(seen.body, json!({"metadata": {"annotations": {"spots-booster.io/rotate": "2026-11-21T10:00:00Z"}}}));
    mark.await.unwrap().unwrap();

    let s = store.clone();
    let config = tokio::spawn(async move { s.config_map().await });
    let seen = answer(&mut server, |_| {
        reply(200, json!({"metadata": {"name": "instance-manager"}, "data": {"defaults": "spec: {}"}}))
    })
    .await;
    assert_eq!(seen.path, "/api/v1/namespaces/instance-manager/configmaps/instance-manager");
    assert_eq!(config.await.unwrap().unwrap().unwrap()["defaults"], "spec: {}");

    let s = store.clone();
    let excluded = tokio::spawn(async move { s.namespace_excluded("team").await });
    let seen = answer(&mut server, |_| {
        reply(
            200,
            json!({"metadata": {"name": "team", "annotations": {"instancemgr.keikoproj.io/config-excluded": "true"}}}),
        )
    })
    .await;
    assert_eq!(seen.path, "/api/v1/namespaces/team");
    assert!(excluded.await.unwrap().unwrap());

    let s = store.clone();
    let installed = tokio::spawn(async move { s.crd_installed().await });
    answer(&mut server, |_| reply(404, status(404, "NotFound"))).await;
    assert!(!installed.await.unwrap().unwrap(), "a 404 on the list means the CRD is not installed");
}

#[tokio::test]
async fn a_missing_permission_is_named_with_its_object_namespace_and_flag() {
    use spots_booster::k8s::client::{check_permissions, ConnectError, Namespaces};
    let (client, mut server) = mocked().await;
    let namespaces = Namespaces {
        events: "default".into(),
        ca_status: "kube-system".into(),
        own: "spots-booster".into(),
        ca_status_name: "cluster-autoscaler-status".into(),
        ledger_name: "spots-booster-ledger".into(),
        lease_name: "spots-booster".into(),
        instance_manager: "instance-manager".into(),
        instance_manager_name: "instance-manager".into(),
    };
    let check = tokio::spawn(async move { check_permissions(&client, &namespaces, |_| false).await });
    let mut reviews = 0;
    while !check.is_finished() {
        let Ok(Some((request, send))) = tokio::time::timeout(Duration::from_millis(500), server.next_request()).await
        else {
            continue;
        };
        reviews += 1;
        assert_eq!(request.uri().path(), "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews");
        let mut review: Value = serde_json::from_slice(request.body()).unwrap();
        let a = review["spec"]["resourceAttributes"].clone();
        let refused = (a["resource"] == "configmaps" && a["name"] == "spots-booster-ledger" && a["verb"] == "update")
            || (a["resource"] == "nodes" && a["verb"] == "patch")
            || (a["resource"] == "pods" && a["subresource"] == "eviction")
            || (a["resource"] == "instancegroups" && a["subresource"] == "status");
        review["status"] = json!({"allowed": !refused});
        send.send_response(reply(201, review));
    }
    let err = check.await.unwrap().unwrap_err();
    assert!(matches!(err, ConnectError::Forbidden(ref missing) if missing.len() == 4), "{err}");
    assert!(reviews > 20, "every permission is asked for: {reviews}");
    let message = err.to_string();
    assert!(
        message.contains("update configmaps \"spots-booster-ledger\" (--ledger-configmap) in namespace spots-booster"),
        "{message}"
    );
    assert!(message.contains("\n  patch nodes cluster-wide\n"), "one per line: {message}");
    assert!(message.contains("create pods/eviction cluster-wide"), "{message}");
    assert!(message.contains("patch instancegroups.instancemgr.keikoproj.io/status cluster-wide"), "{message}");
}

#[tokio::test]
async fn a_deletion_at_the_deadline_is_a_delete_with_its_grace_and_uid_and_a_gone_pod_is_done() {
    for (code, ok) in [(200, true), (404, true), (409, true), (500, false)] {
        let (client, mut server) = mocked().await;
        let writes = KubeWrites::new(client, false);
        let delete = tokio::spawn(async move { writes.delete_pod(&pod_ref(), 25).await });
        let seen = answer(&mut server, |_| match code {
            200 => reply(200, json!({"kind": "Pod", "apiVersion": "v1", "metadata": {"name": "web-0"}})),
            409 => reply(
                409,
                json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 409, "reason": "Conflict",
                    "message": "Operation cannot be fulfilled on Pod \"web-0\": Precondition failed: the UID in the \
                    precondition (uid-web-0) does not match the UID in record (uid-new)"}),
            ),
            _ => reply(code, status(code, "InternalError")),
        })
        .await;
        // A DELETE of the pod, never an eviction: its budget is not asked.
        assert_eq!((seen.method.as_str(), seen.path.as_str()), ("DELETE", "/api/v1/namespaces/shop/pods/web-0"));
        assert_eq!(seen.body["gracePeriodSeconds"], 25, "{}", seen.body);
        assert_eq!(seen.body["preconditions"]["uid"], "uid-web-0", "{}", seen.body);
        let outcome = delete.await.unwrap();
        if ok {
            outcome.unwrap_or_else(|e| panic!("HTTP {code}: {e}"));
        } else {
            assert_eq!(outcome.unwrap_err().to_string(), "deleting pod shop/web-0 failed");
        }
    }
}

#[tokio::test]
async fn readmitting_removes_only_the_boosters_own_exclusion_label() {
    let node = NodeName::from("ip-10-0-1-2.ec2.internal");
    for (code, ok) in [(200, true), (422, true), (404, true), (500, false)] {
        let (client, mut server) = mocked().await;
        let writes = KubeWrites::new(client, false);
        let n = node.clone();
        let readmit = tokio::spawn(async move { writes.readmit_to_load_balancers(&n).await });
        let seen = answer(&mut server, |_| match code {
            200 => reply(200, json!({"metadata": {"name": "x"}})),
            // kube-apiserver's answer when the test operation fails: someone else's label.
            422 => reply(422, status(422, "Invalid")),
            _ => reply(code, status(code, "NotFound")),
        })
        .await;
        assert_eq!(seen.method, "PATCH");
        assert_eq!(seen.content_type, "application/json-patch+json");
        let path = "/metadata/labels/node.kubernetes.io~1exclude-from-external-load-balancers";
        assert_eq!(
            seen.body,
            json!([{"op": "test", "path": path, "value": "spots-booster"}, {"op": "remove", "path": path}])
        );
        assert_eq!(readmit.await.unwrap().is_ok(), ok, "HTTP {code}");
    }
}

#[tokio::test]
async fn requests_over_the_daemons_budget_wait_their_turn_through_the_production_client() {
    use spots_booster::k8s::budget::RequestBudget;
    let budget = RequestBudget::new(20.0, 2);
    let (client, mut server) = apiserver::start_with(&budget).await;
    let writes = KubeWrites::new(client, false);
    let started = std::time::Instant::now();
    let cordons: Vec<_> = (0..6)
        .map(|k| {
            let w = writes.clone();
            tokio::spawn(
                async move { w.protect_from_scale_down(&NodeName::from(format!("n{k}").as_str()), true).await },
            )
        })
        .collect();
    let mut arrivals = Vec::new();
    for _ in 0..6 {
        answer(&mut server, |_| reply(200, json!({"metadata": {"name": "x"}}))).await;
        arrivals.push(started.elapsed());
    }
    for c in cordons {
        c.await.unwrap().unwrap();
    }
    // Two at once, then one every 50 ms: the sixth comes about 200 ms after the start.
    assert!(arrivals[1] < Duration::from_millis(40), "{arrivals:?}");
    assert!(arrivals[5] >= Duration::from_millis(180), "{arrivals:?}");
    assert_eq!(budget.throttled(), 4);
}

/// A Node a compromised kubelet may register (`ip-10-255-0-1`), naming in its providerID the
/// instance behind the real node `ip-172-31-0-9` and carrying the rotation mark, plus a forged
/// SpotInterruption Event (no source) on the real node, which runs a Deployment's pod and is
/// neither cordoned nor tainted. Seen through the daemon's own client and watches, then planned
/// by the core's own entry points: nothing is boosted or drained, the real node's pods are in
/// the view (a plan about it counts them), and the refusal is `identity-mismatch`.
#[tokio::test]
async fn a_node_claiming_another_nodes_instance_with_a_rotation_mark_moves_nothing() {
    use spots_booster::core::{
        plan_draining, plan_scaling, Acting, DrainState, DropReason, Group, InstanceFacts, InstanceLifecycle, Policy,
        Snapshot,
    };
    let (client, mut server) = mocked().await;
    let cluster = KubeCluster::new(settings(), Arc::new(Notify::new()), Arc::new(Metrics::new()), system_clock());
    cluster.spawn_watches(&client);

    let real = "ip-172-31-0-9.eu-central-1.compute.internal";
    let spoof = "ip-10-255-0-1.eu-central-1.compute.internal";
    let instance = "i-0feedface0000001";
    let node = |name: &str, uid: &str, annotations: Value| {
        json!({"metadata": {"name": name, "uid": uid, "creationTimestamp": "2026-11-21T09:00:00Z", "annotations": annotations},
            "spec": {"providerID": format!("aws:///eu-central-1a/{instance}")},
            "status": {"allocatable": {"cpu": "4", "memory": "16Gi"}, "conditions": [{"type": "Ready", "status": "True"}]}})
    };
    let nodes = json!([
        node(real, "uid-real", json!({})),
        node(spoof, "uid-spoof", json!({"spots-booster.io/rotate": "2026-11-21T09:58:00Z"})),
    ]);
    let pod = json!({"metadata": {"name": "web-7d9f-abcde", "namespace": "shop", "uid": "uid-web",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d9f", "uid": "rs-1", "controller": true}]},
        "spec": {"nodeName": real, "containers": [{"name": "c", "resources": {"requests": {"cpu": "500m"}}}]},
        "status": {"phase": "Running"}});
    let forged = json!({"metadata": {"name": "forged.1", "namespace": "default", "uid": "ev-forged"},
        "involvedObject": {"kind": "Node", "name": real, "namespace": "default"},
        "reason": "SpotInterruption",
        "message": "Spot ITN received. Instance will be interrupted at 2026-11-21T10:01:00Z \n",
        "firstTimestamp": "2026-11-21T09:59:01Z", "lastTimestamp": "2026-11-21T09:59:01Z", "type": "Normal"});
    for _ in 0..4 {
        answer(&mut server, |seen| match seen.path.as_str() {
            "/api/v1/nodes" => reply(200, list("NodeList", nodes.clone())),
            "/api/v1/pods" => reply(200, list("PodList", json!([pod]))),
            "/api/v1/namespaces/default/events" => reply(200, list("EventList", json!([forged]))),
            "/api/v1/namespaces/kube-system/configmaps" => reply(200, list("ConfigMapList", json!([]))),
            other => panic!("unexpected request {other}"),
        })
        .await;
    }
    tokio::time::timeout(Duration::from_secs(5), cluster.wait_synced()).await.expect("synced");
    let state = cluster.current().expect("synced view");
    let real_node = &state.nodes[&NodeName::from(real)];
    assert!(real_node.pods_known && real_node.pods.len() == 1, "the claimed instance's real node shows its pod");

    // Auto Scaling resolves the group; EC2 names the instance `ip-172-31-0-9`.
    let mut snapshot = Snapshot::default().with_group(Group::test("spot-b").desired(1).members([instance]));
    snapshot.nodes = state.nodes.clone();
    for n in snapshot.nodes.values_mut() {
        n.group = Some("spot-b".into());
    }
    snapshot.signals = state.signals.clone();
    let mut facts = InstanceFacts::bought(InstanceLifecycle::Spot);
    facts.private_dns_name = Some(real.into());
    snapshot.instances.insert(instance.into(), facts);
    let now = Timestamp::from_millis(jiff::Timestamp::now().as_millisecond());
    let policy = Policy::default();

    let scaling = plan_scaling(&snapshot, &policy, now, Acting::Leader);
    assert!(scaling.at_risk.is_empty(), "put at risk: {:?}", scaling.at_risk);
    assert!(scaling.boosts.boosts.is_empty(), "boosted: {:?}", scaling.boosts.boosts);
    assert_eq!(
        scaling.at_risk.dropped.iter().map(|d| d.reason.clone()).collect::<Vec<_>>(),
        [DropReason::Untrusted(spots_booster::core::Distrust::IdentityMismatch)],
        "the rotation mark came through the impostor, the forged Event finds the real node uncordoned"
    );
    let draining = plan_draining(&snapshot, &Default::default(), &DrainState::default(), &policy, now);
    assert!(draining.drains.batches.is_empty(), "drained: {:?}", draining.drains.batches);
    assert!(draining.evictions.is_empty() && draining.force.is_empty());
}
