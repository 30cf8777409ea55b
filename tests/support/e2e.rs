//! Shared by the end-to-end suites: the gating variables, clients for the API server and moto,
//! and a `/metrics` scraper.

#![allow(dead_code)]

use std::collections::BTreeMap;

use aws_config::{BehaviorVersion, Region, SdkConfig};
use k8s_openapi::api::core::v1::Node;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};
use serde_json::json;

/// Kubeconfig of the e2e API server.
pub const KUBECONFIG: &str = "SPOTS_BOOSTER_E2E_KUBECONFIG";
/// The moto endpoint.
pub const AWS_ENDPOINT: &str = "SPOTS_BOOSTER_E2E_AWS_ENDPOINT";

/// The kubeconfig and moto endpoint. The suites are `#[ignore]`d, run with `--include-ignored`;
/// one run so without the variables fails, naming the one missing.
pub fn env() -> (String, String) {
    let var = |name: &str| {
        std::env::var(name).unwrap_or_else(|_| {
            panic!("{name} is not set: the e2e suites need a real API server and moto (docs/development.md, \"End-to-end suite\")")
        })
    };
    (var(KUBECONFIG), var(AWS_ENDPOINT))
}

/// A client for the e2e API server.
pub async fn kube_client(path: &str) -> Client {
    let file = Kubeconfig::read_from(path).expect("read the e2e kubeconfig");
    let config = Config::from_custom_kubeconfig(file, &KubeConfigOptions::default()).await.expect("kubeconfig");
    Client::try_from(config).expect("client")
}

/// SDK configuration for the e2e moto.
pub async fn aws(endpoint: &str) -> SdkConfig {
    aws_config::defaults(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .endpoint_url(endpoint)
        .credentials_provider(aws_sdk_autoscaling::config::Credentials::new("test", "test", None, None, "e2e"))
        .load()
        .await
}

/// A free loopback port.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// The text of `/metrics` (empty while nothing listens).
pub async fn scrape(port: u16) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(mut s) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await else { return String::new() };
    let _ = s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await;
    let mut out = String::new();
    let _ = s.read_to_string(&mut out).await;
    out
}

/// One sample, 0 when absent.
pub fn metric(text: &str, name_and_labels: &str) -> f64 {
    text.lines()
        .find(|l| l.strip_prefix(name_and_labels).is_some_and(|rest| rest.starts_with(' ')))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

/// Waits up to a minute for the booster serving metrics on `port` to report its watches synced,
/// failing if it exits first.
pub async fn await_synced(port: u16, booster: &mut tokio::process::Child) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while metric(&scrape(port).await, "spots_booster_synced") < 1.0 {
        assert!(booster.try_wait().unwrap().is_none(), "spots-booster exited early");
        assert!(std::time::Instant::now() < deadline, "spots-booster never synced");
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    }
}

/// Plays kubelet for one instance: registers its Node (providerID `aws:///<zone>/<id>`, labelled
/// `spots-booster-e2e=<run>`) and reports it Ready with a fresh heartbeat.
pub async fn register_node(kube: &Client, name: &str, zone: &str, instance: &str, run: &str) {
    let nodes: Api<Node> = Api::all(kube.clone());
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"spots-booster-e2e": run, "topology.kubernetes.io/zone": zone}},
        "spec": {"providerID": format!("aws:///{zone}/{instance}")}
    }))
    .unwrap();
    match nodes.create(&PostParams::default(), &node).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => panic!("create node {name}: {e}"),
    }
    let now = jiff::Timestamp::now().to_string();
    let status = json!({"status": {
        "capacity": {"cpu": "4", "memory": "16Gi", "pods": "110"},
        "allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"},
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                        "lastHeartbeatTime": now, "lastTransitionTime": now}]}});
    let _ = nodes.patch_status(name, &PatchParams::default(), &Patch::Merge(&status)).await;
}

/// Plays the kubelet's heartbeat for a registered Node: renews its Lease in `kube-node-lease`
/// (created by the same apply), as kubelets do every 10 s while they write the Node's status only
/// when it changes. kube-controller-manager keeps the Node Ready on the Lease alone.
pub async fn renew_lease(kube: &Client, name: &str) {
    use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
    let leases: Api<Lease> = Api::namespaced(kube.clone(), "kube-node-lease");
    let lease = Lease {
        metadata: kube::api::ObjectMeta { name: Some(name.to_string()), ..Default::default() },
        spec: Some(LeaseSpec {
            holder_identity: Some(name.to_string()),
            lease_duration_seconds: Some(40),
            renew_time: Some(MicroTime(jiff::Timestamp::now())),
            ..Default::default()
        }),
    };
    let mut apply = serde_json::to_value(&lease).unwrap();
    apply["apiVersion"] = json!("coordination.k8s.io/v1");
    apply["kind"] = json!("Lease");
    let _ = leases.patch(name, &PatchParams::apply("spots-booster-e2e-kubelet").force(), &Patch::Apply(&apply)).await;
}

/// A per-run suffix (milliseconds since the epoch, hex), for names that never collide.
pub fn run_suffix() -> String {
    format!("{:x}", std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis())
}

/// Creates namespace `ns` and its `default` ServiceAccount (in case no controller does).
pub async fn create_namespace(kube: &Client, ns: &str) {
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(kube.clone());
    let namespace = serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap();
    namespaces.create(&PostParams::default(), &namespace).await.expect("create the namespace");
    let sas: Api<k8s_openapi::api::core::v1::ServiceAccount> = Api::namespaced(kube.clone(), ns);
    let sa = serde_json::from_value(json!({"metadata": {"name": "default"}})).unwrap();
    let _ = sas.create(&PostParams::default(), &sa).await;
}

/// Whether the pod reports Ready.
pub fn pod_ready(pod: &k8s_openapi::api::core::v1::Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Plays the scheduler for one pod: binds it to `node`.
pub async fn bind_pod(pods: &Api<k8s_openapi::api::core::v1::Pod>, name: &str, node: &str) {
    let binding = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node}});
    let _: Result<serde_json::Value, _> =
        pods.create_subresource("binding", name, &PostParams::default(), &binding).await;
}

/// Plays the kubelet for one bound pod: reports it Running and Ready.
pub async fn report_pod_ready(pods: &Api<k8s_openapi::api::core::v1::Pod>, name: &str) {
    let now = jiff::Timestamp::now().to_string();
    let status = json!({"status": {"phase": "Running", "podIP": "10.0.0.1", "conditions": [
        {"type": "Ready", "status": "True", "lastTransitionTime": now},
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": now}]}});
    let _ = pods.patch_status(name, &PatchParams::default(), &Patch::Merge(&status)).await;
}

/// Plays NTH with `taintNode: true`: cordons `node` and taints it
/// `aws-node-termination-handler/rebalance-recommendation`. moto launches every ASG instance
/// on-demand, so the Event alone is rightly not believed for a rebalance (EC2 sends those to spot
/// instances only); NTH's taint vouches by itself (the daemon runs with `--nth-taint-signals`).
pub async fn nth_cordon_and_taint(kube: &Client, node: &str) {
    let nodes: Api<Node> = Api::all(kube.clone());
    let patch = json!({"spec": {"unschedulable": true, "taints": [
        {"key": "aws-node-termination-handler/rebalance-recommendation", "effect": "NoSchedule"}]}});
    nodes.patch(node, &PatchParams::default(), &Patch::Merge(patch)).await.unwrap();
}

/// Plays NTH in IMDS mode: an NTH-shaped `RebalanceRecommendation` Event for `node` in `ns`,
/// reported from the node itself (where NTH's DaemonSet pod runs).
pub async fn nth_rebalance_event(kube: &Client, ns: &str, node: &str, instance: &str) {
    let now = jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(kube.clone(), ns);
    let event = json!({
        "metadata": {"name": format!("{node}.rebalance"), "namespace": ns, "annotations": {"instance-id": instance}},
        "involvedObject": {"kind": "Node", "name": node, "namespace": ns},
        "reason": "RebalanceRecommendation",
        "message": format!("Rebalance recommendation received. Instance will be cordoned at {now} \n"),
        "type": "Normal", "count": 1, "firstTimestamp": now, "lastTimestamp": now,
        "source": {"component": "aws-node-termination-handler", "host": node},
        "reportingComponent": "aws-node-termination-handler", "reportingInstance": node});
    events.create(&PostParams::default(), &serde_json::from_value(event).unwrap()).await.expect("create the Event");
}

/// The cluster the boosters under test serve (`--cluster-name`), whose groups [`create_group`]
/// makes.
pub const CLUSTER: &str = "e2e";

/// Creates, in moto, a launch template and an ASG `name` of `desired` instances (min 1, max `max`)
/// in us-east-1a, tagged as [`CLUSTER`]'s, and returns the image the template launches.
pub async fn create_group(aws: &SdkConfig, name: &str, desired: i32, max: i32) -> String {
    create_group_in(aws, name, (desired, max), &["us-east-1a"]).await
}

/// [`create_group`] across `zones`: its pools reach beyond any one zone's.
pub async fn create_group_in(aws: &SdkConfig, name: &str, (desired, max): (i32, i32), zones: &[&str]) -> String {
    use aws_sdk_autoscaling::types::LaunchTemplateSpecification;
    use aws_sdk_ec2::types::{InstanceType, RequestLaunchTemplateData};
    let ec2 = aws_sdk_ec2::Client::new(aws);
    let image =
        ec2.describe_images().owners("amazon").send().await.unwrap().images()[0].image_id().unwrap().to_string();
    let data = RequestLaunchTemplateData::builder().image_id(&image).instance_type(InstanceType::M5Large).build();
    ec2.create_launch_template().launch_template_name(name).launch_template_data(data).send().await.unwrap();
    aws_sdk_autoscaling::Client::new(aws)
        .create_auto_scaling_group()
        .auto_scaling_group_name(name)
        .launch_template(LaunchTemplateSpecification::builder().launch_template_name(name).version("$Latest").build())
        .min_size(1)
        .max_size(max)
        .desired_capacity(desired)
        .set_availability_zones(Some(zones.iter().map(|z| z.to_string()).collect()))
        .tags(
            aws_sdk_autoscaling::types::Tag::builder()
                .resource_id(name)
                .resource_type("auto-scaling-group")
                .key(format!("kubernetes.io/cluster/{CLUSTER}"))
                .value("owned")
                .propagate_at_launch(true)
                .build(),
        )
        .send()
        .await
        .unwrap();
    image
}

/// Starts `spots-booster run` against the e2e cluster and moto, with its Events, CA status and
/// state in `ns`, metrics on `port`, JSON logs to stderr, and `extra` flags.
pub fn start_booster(kubeconfig: &str, endpoint: &str, ns: &str, port: u16, extra: &[&str]) -> tokio::process::Child {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_spots-booster"))
        .args(["run", "--connection-mode", "kubectl", "--kubeconfig", kubeconfig])
        .args(["--events-namespace", ns, "--ca-status-namespace", ns, "--state-namespace", ns])
        .args(["--aws-endpoint-url", endpoint, "--aws-region", "us-east-1", "--cluster-name", CLUSTER])
        .args(["--metrics-bind-address", &format!("127.0.0.1:{port}"), "--probe-bind-address", "127.0.0.1:0"])
        .args(["--log-format", "json"])
        .args(extra)
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("start spots-booster")
}

/// The flags of a lone booster that drains at a test's pace: no election, a drain pass every
/// second, no InstanceGroups, NTH's taints believed, one replacement per at-risk node.
pub const LONE_DRAINER: &[&str] = &[
    "--leader-elect",
    "false",
    "--drain-interval",
    "1s",
    "--instance-groups",
    "false",
    "--nth-taint-signals",
    "true",
    "--sizing",
    "count",
];

/// The instances of `group` that are not leaving: (id, zone).
pub async fn live_instances(aws: &SdkConfig, group: &str) -> Vec<(String, String)> {
    let asg = aws_sdk_autoscaling::Client::new(aws);
    let out = asg.describe_auto_scaling_groups().auto_scaling_group_names(group).send().await.unwrap();
    out.auto_scaling_groups()[0]
        .instances()
        .iter()
        .filter(|i| !i.lifecycle_state().is_some_and(|s| s.as_str().starts_with("Terminat")))
        .map(|i| (i.instance_id().unwrap().to_string(), i.availability_zone().unwrap().to_string()))
        .collect()
}

/// Each of `groups`' desired capacity and live instances (id, zone), in one call.
pub async fn groups_now(aws: &SdkConfig, groups: &[String]) -> BTreeMap<String, (i32, Vec<(String, String)>)> {
    let asg = aws_sdk_autoscaling::Client::new(aws);
    let out = asg.describe_auto_scaling_groups().set_auto_scaling_group_names(Some(groups.to_vec())).send().await;
    let out = out.unwrap();
    out.auto_scaling_groups()
        .iter()
        .map(|g| {
            let live = g
                .instances()
                .iter()
                .filter(|i| !i.lifecycle_state().is_some_and(|s| s.as_str().starts_with("Terminat")))
                .map(|i| (i.instance_id().unwrap().to_string(), i.availability_zone().unwrap().to_string()))
                .collect();
            (g.auto_scaling_group_name().unwrap().to_string(), (g.desired_capacity().unwrap(), live))
        })
        .collect()
}

/// The desired capacity of `group`.
pub async fn desired_capacity(aws: &SdkConfig, group: &str) -> i32 {
    let asg = aws_sdk_autoscaling::Client::new(aws);
    let out = asg.describe_auto_scaling_groups().auto_scaling_group_names(group).send().await.unwrap();
    out.auto_scaling_groups()[0].desired_capacity().unwrap()
}

/// A Deployment of `replicas` pods of `app` in `ns` (named scheduler nobody runs, grace period 0:
/// the test binds them), and its PodDisruptionBudget `budget` (a spec without the selector).
pub async fn deploy_with_budget(kube: &Client, ns: &str, app: &str, replicas: u32, budget: serde_json::Value) {
    deploy_requesting(kube, ns, app, replicas, budget, 500).await;
}

/// [`deploy_with_budget`] with pods requesting `cpu_millis` each.
pub async fn deploy_requesting(
    kube: &Client,
    ns: &str,
    app: &str,
    replicas: u32,
    budget: serde_json::Value,
    cpu_millis: u32,
) {
    let post = |path: String, body: serde_json::Value| {
        let kube = kube.clone();
        async move {
            let req = http::Request::post(&path)
                .header("content-type", "application/json")
                .body(serde_json::to_vec(&body).unwrap())
                .unwrap();
            kube.request::<serde_json::Value>(req).await.unwrap_or_else(|e| panic!("POST {path}: {e}"))
        }
    };
    post(
        format!("/apis/apps/v1/namespaces/{ns}/deployments"),
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": app},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": app}},
                "template": {"metadata": {"labels": {"app": app}},
                    "spec": {"schedulerName": "spots-booster-e2e", "terminationGracePeriodSeconds": 0,
                        "automountServiceAccountToken": false,
                        "containers": [{"name": app, "image": "registry.k8s.io/pause:3.9",
                            "resources": {"requests": {"cpu": format!("{cpu_millis}m"), "memory": "256Mi"}}}]}}}}),
    )
    .await;
    let mut spec = budget;
    spec["selector"] = json!({"matchLabels": {"app": app}});
    post(
        format!("/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets"),
        json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": app}, "spec": spec}),
    )
    .await;
}

/// The events.k8s.io Events the booster wrote in `default` about the node `node`.
pub async fn booster_events_on(kube: &Client, node: &str) -> Vec<k8s_openapi::api::events::v1::Event> {
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(kube.clone(), "default");
    let all = events.list(&ListParams::default()).await.unwrap().items;
    all.into_iter().filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(node)).collect()
}

/// The names of this run's Nodes (labelled `spots-booster-e2e=<run>`) that are schedulable.
pub async fn schedulable_nodes(kube: &Client, run: &str) -> Vec<String> {
    let nodes: Api<Node> = Api::all(kube.clone());
    let ours = nodes.list(&ListParams::default().labels(&format!("spots-booster-e2e={run}"))).await.unwrap();
    ours.items
        .into_iter()
        .filter(|n| !n.spec.as_ref().and_then(|s| s.unschedulable).unwrap_or(false))
        .filter_map(|n| n.metadata.name)
        .collect()
}

/// Deployment `app` (one replica, `maxUnavailable: 1`) in `ns`, its pod bound to `node` and
/// reported Ready: the at-risk node's only pod, as the fallback tests need it.
pub async fn one_app_pod_on(kube: &Client, ns: &str, node: &str) {
    deploy_with_budget(kube, ns, "app", 1, json!({"maxUnavailable": 1})).await;
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(kube.clone(), ns);
    let pod = loop {
        let listed = pods.list(&ListParams::default().labels("app=app")).await.unwrap();
        if let Some(name) = listed.items.into_iter().find_map(|p| p.metadata.name) {
            break name;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    };
    bind_pod(&pods, &pod, node).await;
    report_pod_ready(&pods, &pod).await;
}
