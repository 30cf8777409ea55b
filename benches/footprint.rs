//! Memory footprint of the daemon's watches: the real kube client, watchers and pruned store
//! (`KubeCluster`), fed over HTTP by an API server in a child process (so its memory is not
//! counted) that serves paginated lists of realistic Nodes (kubelet image lists included) and Pods
//! (managedFields included), then holds the watches open. Reports the measuring process's
//! resident memory after the initial lists (and its peak), and the time to sync.
//!
//! `cargo bench --bench footprint` (1,000 nodes / 10,000 pods and 5,000 / 50,000; goals ≤ 40 MiB
//! and ≤ 100 MiB). One cluster size per process, so the numbers do not include an earlier run.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::Client;
use serde_json::{json, Value};
use spots_booster::k8s::watch::{KubeCluster, WatchSettings};
use spots_booster::metrics::Metrics;
use spots_booster::ports::{AutoScaling, ClusterView};
use spots_booster::workers::system_clock;
use tokio::sync::Notify;

fn rss_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn node(i: usize) -> Value {
    let images: Vec<Value> = (0..40)
        .map(|k| json!({"names": [format!("123456789012.dkr.ecr.eu-west-1.amazonaws.com/team-{k}/service@sha256:{:064x}", k * 7919 + i),
                                  format!("123456789012.dkr.ecr.eu-west-1.amazonaws.com/team-{k}/service:v1.{k}.{i}")],
                        "sizeBytes": 123_456_789 + k}))
        .collect();
    let node_conditions: Vec<Value> = ["MemoryPressure", "DiskPressure", "PIDPressure", "Ready"]
        .iter()
        .map(|t| {
            json!({"type": t, "status": if *t == "Ready" { "True" } else { "False" }, "reason": "KubeletReady",
                "message": "kubelet is posting ready status", "lastHeartbeatTime": "2026-11-21T09:00:00Z",
                "lastTransitionTime": "2026-11-21T08:00:00Z"})
        })
        .collect();
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": format!("ip-10-{}-{}-{}.eu-west-1.compute.internal", i / 65536, (i / 256) % 256, i % 256),
            "uid": format!("{:08x}-0000-4000-8000-{:012x}", i, i), "resourceVersion": "1",
            "creationTimestamp": "2026-11-21T08:00:00Z",
            "labels": {"kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux", "node.kubernetes.io/instance-type": "m5.xlarge",
                "topology.kubernetes.io/region": "eu-west-1", "topology.kubernetes.io/zone": "eu-west-1a",
                "eks.amazonaws.com/capacityType": "SPOT", "eks.amazonaws.com/nodegroup": format!("spot-{}", i % 50),
                "kubernetes.io/hostname": format!("ip-{i}")},
            "annotations": {"alpha.kubernetes.io/provided-node-ip": "10.0.0.1", "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true"}},
        "spec": {"providerID": format!("aws:///eu-west-1a/i-{:017x}", i)},
        "status": {
            "capacity": {"cpu": "4", "memory": "16006852Ki", "pods": "58", "ephemeral-storage": "83873772Ki"},
            "allocatable": {"cpu": "3920m", "memory": "15316676Ki", "pods": "58", "ephemeral-storage": "76224326324"},
            "conditions": node_conditions,
            "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}, {"type": "Hostname", "address": format!("ip-{i}")}],
            "nodeInfo": {"machineID": format!("{:032x}", i), "systemUUID": format!("ec2{:029x}", i), "bootID": "b",
                "kernelVersion": "5.10.226", "osImage": "Amazon Linux 2", "containerRuntimeVersion": "containerd://1.7.22",
                "kubeletVersion": "v1.33.1", "kubeProxyVersion": "v1.33.1", "operatingSystem": "linux", "architecture": "amd64"},
            "images": images
        }
    })
}

fn pod(i: usize, nodes: usize) -> Value {
    let n = i % nodes;
    let pod_conditions: Vec<Value> = ["Initialized", "Ready", "ContainersReady", "PodScheduled"]
        .iter()
        .map(|t| json!({"type": t, "status": "True", "lastTransitionTime": "2026-11-21T08:10:05Z"}))
        .collect();
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("service-{}-7f9c8d6b5-{:05x}", i % 300, i), "namespace": format!("team-{}", i % 40),
            "uid": format!("{:08x}-1111-4000-8000-{:012x}", i, i), "resourceVersion": "2",
            "creationTimestamp": "2026-11-21T08:10:00Z",
            "labels": {"app": format!("service-{}", i % 300), "pod-template-hash": "7f9c8d6b5", "team": format!("team-{}", i % 40)},
            "annotations": {"kubectl.kubernetes.io/restartedAt": "2026-11-20T10:00:00Z", "prometheus.io/scrape": "true"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": format!("service-{}-7f9c8d6b5", i % 300),
                "uid": "u", "controller": true, "blockOwnerDeletion": true}],
            "managedFields": [{"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1",
                "time": "2026-11-21T08:10:00Z", "fieldsType": "FieldsV1",
                "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:app": {}, "f:pod-template-hash": {}},
                    "f:ownerReferences": {".": {}}}, "f:spec": {"f:containers": {"k:{\"name\":\"app\"}": {".": {}, "f:image": {},
                    "f:resources": {".": {}, "f:requests": {".": {}, "f:cpu": {}, "f:memory": {}}}}}}}}]},
        "spec": {"nodeName": format!("ip-10-{}-{}-{}.eu-west-1.compute.internal", n / 65536, (n / 256) % 256, n % 256),
            "serviceAccountName": "default", "priority": 0,
            "containers": [{"name": "app", "image": format!("123456789012.dkr.ecr.eu-west-1.amazonaws.com/team/service:{i}"),
                "env": (0..8).map(|k| json!({"name": format!("ENV_{k}"), "value": format!("value-{k}-{i}")})).collect::<Vec<_>>(),
                "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                "resources": {"requests": {"cpu": "250m", "memory": "512Mi"}, "limits": {"memory": "1Gi"}},
                "volumeMounts": [{"name": "kube-api-access", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true}]}],
            "volumes": [{"name": "kube-api-access", "projected": {"sources": [{"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}}]}}],
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}]},
        "status": {"phase": "Running", "podIP": "10.1.0.1", "hostIP": "10.0.0.1", "startTime": "2026-11-21T08:10:01Z",
            "conditions": pod_conditions,
            "containerStatuses": [{"name": "app", "ready": true, "restartCount": 0, "image": "service", "imageID": "sha256:abc",
                "containerID": "containerd://abc", "started": true, "state": {"running": {"startedAt": "2026-11-21T08:10:04Z"}}}]}
    })
}

fn query_value<'a>(query: &'a str, key: &str) -> Option<&'a str> {
    query.split('&').find_map(|kv| kv.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
}

/// Serves one list page (`limit`/`continue` honoured); watches never answer (held open).
async fn api_server(
    req: http::Request<hyper::body::Incoming>,
    nodes: usize,
    pods: usize,
) -> Result<http::Response<http_body_util::Full<hyper::body::Bytes>>, Infallible> {
    let path = req.uri().path().to_string();
    let query = req.uri().query().unwrap_or("").to_string();
    if query.contains("watch=true") {
        std::future::pending::<()>().await;
    }
    let limit: usize = query_value(&query, "limit").and_then(|l| l.parse().ok()).unwrap_or(500);
    let start: usize = query_value(&query, "continue").and_then(|c| c.parse().ok()).unwrap_or(0);
    let (kind, total): (&str, usize) = match path.as_str() {
        "/api/v1/nodes" => ("NodeList", nodes),
        "/api/v1/pods" => ("PodList", pods),
        _ => ("List", 0),
    };
    let end = (start + limit).min(total);
    let items: Vec<Value> = (start..end).map(|i| if kind == "NodeList" { node(i) } else { pod(i, nodes) }).collect();
    let mut metadata = json!({"resourceVersion": "100"});
    if end < total {
        metadata["continue"] = json!(end.to_string());
    }
    let body =
        serde_json::to_vec(&json!({"apiVersion": "v1", "kind": kind, "metadata": metadata, "items": items})).unwrap();
    let mut response = http::Response::new(http_body_util::Full::new(hyper::body::Bytes::from(body)));
    response.headers_mut().insert("content-type", http::HeaderValue::from_static("application/json"));
    Ok(response)
}

/// The child: serves the API on `port` until killed.
async fn serve(port: u16, nodes: usize, pods: usize) {
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await.unwrap();
    loop {
        let (stream, _) = listener.accept().await.unwrap();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| api_server(req, nodes, pods));
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                .await;
        });
    }
}

/// The daemon's AWS ports, as `run` builds them, against an HTTPS endpoint nothing listens on.
async fn aws_ports() -> spots_booster::aws::AwsPorts {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let config = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .region(aws_config::Region::new("eu-west-1"))
        .endpoint_url(format!("https://127.0.0.1:{closed}"))
        .credentials_provider(aws_sdk_autoscaling::config::Credentials::new("k", "s", None, None, "footprint"))
        .retry_config(aws_config::retry::RetryConfig::standard().with_max_attempts(1))
        .load()
        .await;
    spots_booster::aws::AwsPorts::new(&config, false)
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let sizes: Vec<(usize, usize)> = match std::env::var("FOOTPRINT_SIZE") {
        Ok(s) => {
            let (n, p) = s.split_once('/').expect("FOOTPRINT_SIZE=nodes/pods");
            vec![(n.parse().unwrap(), p.parse().unwrap())]
        }
        Err(_) => {
            // One size per process: re-run this binary for each.
            let exe = std::env::current_exe().unwrap();
            for size in ["1000/10000", "5000/50000"] {
                let status = std::process::Command::new(&exe).env("FOOTPRINT_SIZE", size).status().unwrap();
                assert!(status.success());
            }
            return;
        }
    };
    let (nodes, pods) = sizes[0];
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    if let Ok(port) = std::env::var("FOOTPRINT_SERVE") {
        runtime.block_on(serve(port.parse().unwrap(), nodes, pods));
        return;
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut server = std::process::Command::new(std::env::current_exe().unwrap())
        .env("FOOTPRINT_SERVE", port.to_string())
        .env("FOOTPRINT_SIZE", format!("{nodes}/{pods}"))
        .spawn()
        .unwrap();
    runtime.block_on(async move {
        while tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_err() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let before = rss_kib("VmRSS:");
        let config = kube::Config::new(format!("http://127.0.0.1:{port}").parse().unwrap());
        let client = Client::try_from(config).unwrap();
        let settings = WatchSettings {
            events_namespace: "default".into(),
            ca_status_namespace: "kube-system".into(),
            ca_status_name: "cluster-autoscaler-status".into(),
            nth_taints: false,
            signal_grace: spots_booster::k8s::watch::SIGNAL_GRACE,
            ca_status_max_age: spots_booster::k8s::watch::CA_STATUS_MAX_AGE,
        };
        let cluster = KubeCluster::new(settings, Arc::new(Notify::new()), Arc::new(Metrics::new()), system_clock());
        let started = Instant::now();
        cluster.spawn_watches(&client);
        tokio::time::timeout(Duration::from_secs(300), cluster.wait_synced()).await.expect("synced");
        let synced = started.elapsed();
        let state = cluster.current().expect("a view");
        assert_eq!(state.nodes.len(), nodes);
        let view_at = Instant::now();
        for _ in 0..10 {
            std::hint::black_box(cluster.current());
        }
        let view = view_at.elapsed() / 10;
        tokio::time::sleep(Duration::from_millis(200)).await;
        let after = rss_kib("VmRSS:");
        let peak = rss_kib("VmHWM:");
        println!(
            "footprint {nodes} nodes / {pods} pods: RSS {:.1} MiB after sync (process start {:.1} MiB, peak {:.1} MiB); \
             synced in {:.2} s; one cluster view {:.2} ms",
            after as f64 / 1024.0,
            before as f64 / 1024.0,
            peak as f64 / 1024.0,
            synced.as_secs_f64(),
            view.as_secs_f64() * 1000.0
        );
        // The daemon also holds the AWS clients, their HTTPS connector (TLS roots loaded on the
        // first call; here one that finds nothing listening) and their retry state.
        let aws = aws_ports().await;
        let _ = aws.autoscaling.describe_groups(&["footprint".into()]).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        let with_aws = rss_kib("VmRSS:");
        println!(
            "  with the AWS clients after their first call: RSS {:.1} MiB (+{:.1} MiB)",
            with_aws as f64 / 1024.0,
            with_aws.saturating_sub(after) as f64 / 1024.0
        );
        drop(aws);
    });
    let _ = server.kill();
    let _ = server.wait();
}
