//! End-to-end: the real `spots-booster run --connection-mode kubectl` binary against a real API
//! server and moto. Ignored unless run with `--include-ignored` and
//! `SPOTS_BOOSTER_E2E_KUBECONFIG` and `SPOTS_BOOSTER_E2E_AWS_ENDPOINT` set.
//!
//! The API server may have no kubelet and no scheduler (see docs/development.md, "End-to-end suite"), so the
//! test plays both: it registers a Node per moto instance (providerID `aws:///<az>/<id>`, Ready
//! through `nodes/status`, heartbeats renewed), binds the Deployment's pods through the binding
//! subresource (they name a scheduler nobody runs, so kind's or k3d's own scheduler leaves them
//! alone) and marks them Running and Ready. Everything lives in a namespace of its own, and the
//! Nodes carry a per-run suffix, so the suite also passes on a shared kind or k3d cluster.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_config::SdkConfig;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Pod};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{json, Value};
use support::e2e::{
    aws, bind_pod, booster_events_on, create_group, create_namespace, env, free_port, kube_client, metric,
    nth_cordon_and_taint, nth_rebalance_event, pod_ready, register_node, report_pod_ready, run_suffix,
    schedulable_nodes, scrape, start_booster,
};

use crate::support;

/// What the test saw while playing kubelet and scheduler.
#[derive(Debug, Default, Clone)]
struct Observed {
    /// When each node was first marked Ready by the test.
    ready_at: BTreeMap<String, Instant>,
    /// When the first pod left the at-risk node.
    first_pod_left_at_risk: Option<Instant>,
    /// Fewest Ready pods seen once the booster runs (never below the PDB's minAvailable).
    min_ready: Option<usize>,
    /// Pods Ready last round.
    ready: usize,
    /// Pods on the at-risk node last round.
    on_at_risk: usize,
    /// Set when the signal is sent: from then on the minimum and the first departure count.
    watching: bool,
    /// No disruption controller runs: the test keeps the PDB's status.
    play_disruption_controller: bool,
    /// Highest desired capacity seen.
    max_desired: i32,
}

struct Run {
    ns: String,
    suffix: String,
    group: String,
    kube: Client,
    aws: SdkConfig,
}

impl Run {
    fn node_name(&self, instance: &str) -> String {
        format!("{instance}.{}.e2e.internal", self.suffix)
    }

    async fn instances(&self) -> Vec<(String, String, String)> {
        let asg = aws_sdk_autoscaling::Client::new(&self.aws);
        let out = asg.describe_auto_scaling_groups().auto_scaling_group_names(&self.group).send().await.unwrap();
        let g = &out.auto_scaling_groups()[0];
        g.instances()
            .iter()
            .map(|i| {
                (
                    i.instance_id().unwrap().to_string(),
                    i.availability_zone().unwrap().to_string(),
                    i.lifecycle_state().map(|s| s.as_str().to_string()).unwrap_or_default(),
                )
            })
            .collect()
    }

    async fn desired(&self) -> i32 {
        let asg = aws_sdk_autoscaling::Client::new(&self.aws);
        let out = asg.describe_auto_scaling_groups().auto_scaling_group_names(&self.group).send().await.unwrap();
        out.auto_scaling_groups()[0].desired_capacity().unwrap()
    }

    /// Registers a Node for the instance and makes it Ready (a kubelet would).
    async fn register(&self, instance: &str, zone: &str) {
        register_node(&self.kube, &self.node_name(instance), zone, instance, &self.suffix).await;
    }

    /// One round of kubelet, scheduler and cloud-node-lifecycle duties.
    async fn play_kubelet_and_scheduler(&self, at_risk: &str, observed: &Mutex<Observed>) {
        let nodes: Api<Node> = Api::all(self.kube.clone());
        let instances = self.instances().await;
        let live: Vec<String> = instances
            .iter()
            .filter(|(_, _, state)| !state.starts_with("Terminat"))
            .map(|(id, _, _)| self.node_name(id))
            .collect();
        for (id, zone, state) in &instances {
            if state.starts_with("Terminat") {
                continue;
            }
            self.register(id, zone).await;
            observed.lock().unwrap().ready_at.entry(self.node_name(id)).or_insert_with(Instant::now);
        }
        // Instances that left the group lose their Node (the cloud node lifecycle controller's job).
        let ours =
            nodes.list(&ListParams::default().labels(&format!("spots-booster-e2e={}", self.suffix))).await.unwrap();
        for n in ours.items {
            let name = n.metadata.name.unwrap();
            if !live.contains(&name) {
                let _ = nodes.delete(&name, &DeleteParams::default()).await;
            }
        }
        let desired = self.desired().await;
        {
            let mut o = observed.lock().unwrap();
            o.max_desired = o.max_desired.max(desired);
        }

        let pods: Api<Pod> = Api::namespaced(self.kube.clone(), &self.ns);
        let all = pods.list(&ListParams::default().labels("app=web")).await.unwrap();
        let schedulable = schedulable_nodes(&self.kube, &self.suffix).await;
        let mut ready: usize = 0;
        let mut on_at_risk = 0;
        for pod in &all.items {
            let name = pod.metadata.name.clone().unwrap();
            let node = pod.spec.as_ref().and_then(|s| s.node_name.clone());
            match node {
                None => {
                    // The scheduler: the newest schedulable node.
                    if let Some(target) = schedulable.last() {
                        bind_pod(&pods, &name, target).await;
                    }
                }
                Some(node) if !pod_ready(pod) => {
                    report_pod_ready(&pods, &name).await;
                    if node == at_risk {
                        on_at_risk += 1;
                    }
                }
                Some(node) => {
                    ready += 1;
                    if node == at_risk {
                        on_at_risk += 1;
                    }
                }
            }
        }
        let play_pdb = observed.lock().unwrap().play_disruption_controller;
        if play_pdb {
            let pdbs: Api<k8s_openapi::api::policy::v1::PodDisruptionBudget> =
                Api::namespaced(self.kube.clone(), &self.ns);
            if let Ok(pdb) = pdbs.get("web").await {
                let status = json!({"status": {"observedGeneration": pdb.metadata.generation.unwrap_or(1),
                    "disruptionsAllowed": ready.saturating_sub(1), "currentHealthy": ready, "desiredHealthy": 1,
                    "expectedPods": 2}});
                let _ = pdbs.patch_status("web", &PatchParams::default(), &Patch::Merge(&status)).await;
            }
        }
        let mut o = observed.lock().unwrap();
        (o.ready, o.on_at_risk) = (ready, on_at_risk);
        if o.watching {
            o.min_ready = Some(o.min_ready.map_or(ready, |m| m.min(ready)));
            if on_at_risk < 2 && o.first_pod_left_at_risk.is_none() {
                o.first_pod_left_at_risk = Some(Instant::now());
            }
        }
    }
}

/// Cluster Autoscaler's status (YAML, CA ≥ 1.30) for a healthy group of 2.
fn ca_status(group: &str, at: jiff::Timestamp) -> String {
    let probe = at.to_string();
    let times = format!("    lastProbeTime: \"{probe}\"\n    lastTransitionTime: \"{probe}\"\n");
    let health =
        "  health:\n    status: Healthy\n    nodeCounts:\n      registered:\n        total: 2\n        ready: 2\n";
    let activity =
        format!("  scaleUp:\n    status: NoActivity\n{times}  scaleDown:\n    status: NoCandidates\n{times}");
    format!(
        "time: {time}\nautoscalerStatus: Running\nclusterWide:\n{health}{times}{activity}nodeGroups:\n- name: {group}\n{health}    cloudProviderTarget: 2\n    minSize: 1\n    maxSize: 10\n{times}{activity}",
        time = at.strftime("%Y-%m-%d %H:%M:%S.%f +0000 UTC"),
    )
}

/// Runs everywhere: the status the e2e writes is one the booster understands.
#[test]
fn the_e2e_ca_status_parses() {
    let at: jiff::Timestamp = "2026-11-21T10:00:00.5Z".parse().unwrap();
    let status = spots_booster::k8s::ca_status::parse_ca_status(&ca_status("sb-e2e-x", at)).unwrap();
    let group = status.group("sb-e2e-x").expect("the group");
    assert_eq!(group.core_view().cloud_provider_target, 2);
    assert_eq!(status.time.unwrap().as_millis(), at.as_millisecond());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real API server and moto: set SPOTS_BOOSTER_E2E_KUBECONFIG and SPOTS_BOOSTER_E2E_AWS_ENDPOINT, pass --include-ignored"]
async fn a_rebalance_recommendation_is_boosted_drained_and_given_back() {
    boosted_drained_and_given_back(As::Admin).await;
}

/// The same, installed the way users install it: `helm template` of the chart applied to the API
/// server, and the daemon run with the chart's ServiceAccount's token, so its start-up permission
/// check and every call go through the chart's RBAC alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real API server and moto: set SPOTS_BOOSTER_E2E_KUBECONFIG and SPOTS_BOOSTER_E2E_AWS_ENDPOINT, pass --include-ignored"]
async fn installed_with_the_helm_chart_it_runs_as_the_charts_service_account() {
    boosted_drained_and_given_back(As::ChartServiceAccount).await;
}

/// Whose credentials the daemon runs with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum As {
    /// The e2e kubeconfig's (an administrator).
    Admin,
    /// The Helm chart's ServiceAccount, bound by the chart's RBAC only.
    ChartServiceAccount,
}

async fn boosted_drained_and_given_back(who: As) {
    let (kubeconfig, endpoint) = env();
    let suffix = run_suffix();
    let run = Arc::new(Run {
        ns: format!("sb-e2e-{suffix}"),
        group: format!("sb-e2e-{suffix}"),
        suffix: suffix.clone(),
        kube: kube_client(&kubeconfig).await,
        aws: aws(&endpoint).await,
    });

    create_namespace(&run.kube, &run.ns).await;
    let namespaces: Api<Namespace> = Api::all(run.kube.clone());

    // The group: 2 instances of 10.
    create_group(&run.aws, &run.group, 2, 10).await;
    let instances = run.instances().await;
    assert_eq!(instances.len(), 2);
    for (id, zone, _) in &instances {
        run.register(id, zone).await;
    }
    let (at_risk_instance, _, _) = instances[0].clone();
    let at_risk = run.node_name(&at_risk_instance);

    // A Deployment of 2 pods on the at-risk node, a PDB allowing one disruption, CA's status.
    let kube = run.kube.clone();
    let apply = |api_path: &'static str, body: Value| {
        let kube = kube.clone();
        async move {
            let req = http::Request::post(api_path)
                .header("content-type", "application/json")
                .body(serde_json::to_vec(&body).unwrap())
                .unwrap();
            kube.request::<Value>(req).await.unwrap_or_else(|e| panic!("POST {api_path}: {e}"))
        }
    };
    let ns = run.ns.clone();
    let deployments: &'static str = Box::leak(format!("/apis/apps/v1/namespaces/{ns}/deployments").into_boxed_str());
    apply(
        deployments,
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"schedulerName": "spots-booster-e2e", "terminationGracePeriodSeconds": 0,
                    "automountServiceAccountToken": false,
                    "containers": [{"name": "web", "image": "registry.k8s.io/pause:3.9",
                        "resources": {"requests": {"cpu": "500m", "memory": "256Mi"}}}]}}}}),
    )
    .await;
    let pdbs: &'static str =
        Box::leak(format!("/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets").into_boxed_str());
    apply(
        pdbs,
        json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "web"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}}}),
    )
    .await;
    let ca_status = ca_status(&run.group, jiff::Timestamp::now());
    let cms: Api<ConfigMap> = Api::namespaced(run.kube.clone(), &run.ns);
    cms.create(
        &PostParams::default(),
        &serde_json::from_value(
            json!({"metadata": {"name": "cluster-autoscaler-status"}, "data": {"status": ca_status}}),
        )
        .unwrap(),
    )
    .await
    .unwrap();

    // Pods start on the at-risk node: it is the only schedulable one for a moment.
    let nodes: Api<Node> = Api::all(run.kube.clone());
    let other = run.node_name(&instances[1].0);
    nodes
        .patch(&other, &PatchParams::default(), &Patch::Merge(json!({"spec": {"unschedulable": true}})))
        .await
        .unwrap();
    let observed = Arc::new(Mutex::new(Observed::default()));
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        run.play_kubelet_and_scheduler(&at_risk, &observed).await;
        let (ready, on) = {
            let o = observed.lock().unwrap();
            (o.ready, o.on_at_risk)
        };
        if on == 2 && ready == 2 {
            break;
        }
        assert!(Instant::now() < deadline, "the Deployment's pods never became Ready on {at_risk}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    nodes
        .patch(&other, &PatchParams::default(), &Patch::Merge(json!({"spec": {"unschedulable": false}})))
        .await
        .unwrap();
    // Without a disruption controller the PDB's status is never computed; the test then plays it.
    let pdb_api: Api<k8s_openapi::api::policy::v1::PodDisruptionBudget> = Api::namespaced(run.kube.clone(), &run.ns);
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        let pdb = pdb_api.get("web").await.unwrap();
        if pdb.status.as_ref().is_some_and(|s| s.expected_pods > 0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let computed = pdb_api.get("web").await.unwrap().status.is_some_and(|s| s.expected_pods > 0);
    observed.lock().unwrap().play_disruption_controller = !computed;
    run.play_kubelet_and_scheduler(&at_risk, &observed).await;

    // The booster.
    let port = free_port();
    let kubeconfig = match who {
        As::Admin => kubeconfig,
        As::ChartServiceAccount => chart::install(&run.kube, &kubeconfig, &run.ns, &suffix).await,
    };
    // tests/e2e_instancegroups.rs covers the reconciler; this run needs no CRD.
    let mut booster = start_booster(
        &kubeconfig,
        &endpoint,
        &run.ns,
        port,
        &[
            "--leader-elect",
            "true",
            "--leader-elect-retry-period",
            "1s",
            "--drain-interval",
            "1s",
            "--instance-groups",
            "false",
            "--nth-taint-signals",
            "true",
        ],
    );

    // Wait until it is ready and leading.
    let deadline = Instant::now() + Duration::from_secs(60);
    while metric(&scrape(port).await, "spots_booster_leader") < 1.0
        || metric(&scrape(port).await, "spots_booster_synced") < 1.0
    {
        assert!(booster.try_wait().unwrap().is_none(), "spots-booster exited early");
        assert!(Instant::now() < deadline, "spots-booster never became ready and leader");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    // NTH: cordon and taint, then the RebalanceRecommendation Event.
    nth_cordon_and_taint(&run.kube, &at_risk).await;
    nth_rebalance_event(&run.kube, &run.ns, &at_risk, &at_risk_instance).await;
    let signalled = Instant::now();
    observed.lock().unwrap().watching = true;

    // Play kubelet and scheduler until the at-risk instance is gone.
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        run.play_kubelet_and_scheduler(&at_risk, &observed).await;
        let gone = !run
            .instances()
            .await
            .iter()
            .any(|(id, _, state)| *id == at_risk_instance && !state.starts_with("Terminat"));
        if gone {
            break;
        }
        assert!(booster.try_wait().unwrap().is_none(), "spots-booster exited");
        assert!(Instant::now() < deadline, "the at-risk instance was never terminated");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    run.play_kubelet_and_scheduler(&at_risk, &observed).await;
    let text = scrape(port).await;
    let group = &run.group;
    let observed = observed.lock().unwrap().clone();

    assert_eq!(observed.max_desired, 3, "desired rose once, by the one node the two pods need");
    assert_eq!(
        metric(&text, &format!("spots_booster_boosts_total{{group=\"{group}\",outcome=\"written\"}}")),
        1.0,
        "{text}"
    );
    let replacement_ready = observed
        .ready_at
        .iter()
        .filter(|(name, _)| **name != at_risk && **name != other)
        .map(|(_, at)| *at)
        .min()
        .expect("a replacement node joined");
    let drained = observed.first_pod_left_at_risk.expect("pods left the at-risk node");
    assert!(
        replacement_ready > signalled && drained > replacement_ready,
        "drained only after the replacement was Ready"
    );
    assert!(observed.min_ready.unwrap() >= 1, "the PDB (minAvailable 1) was never violated");
    assert_eq!(run.desired().await, 2, "terminated with decrement: the boost was given back");
    assert_eq!(
        metric(&text, &format!("spots_booster_terminations_total{{decrement=\"true\",group=\"{group}\"}}")),
        1.0,
        "{text}"
    );
    assert!(metric(&text, "spots_booster_reaction_seconds_count") >= 1.0, "{text}");

    let reasons: Vec<String> =
        booster_events_on(&run.kube, &at_risk).await.into_iter().filter_map(|e| e.reason).collect();
    for reason in ["BoostRequested", "DrainStarted", "InstanceTerminated"] {
        assert!(reasons.iter().any(|r| r == reason), "Event {reason} on {at_risk}: {reasons:?}");
    }

    // Stop (the lease is released) and clean up what can be.
    let _ = booster.start_kill();
    let _ = booster.wait().await;
    let ours = nodes.list(&ListParams::default().labels(&format!("spots-booster-e2e={suffix}"))).await.unwrap();
    for n in ours.items {
        let _ = nodes.delete(&n.metadata.name.unwrap(), &DeleteParams::default()).await;
    }
    let _ = aws_sdk_autoscaling::Client::new(&run.aws)
        .delete_auto_scaling_group()
        .auto_scaling_group_name(&run.group)
        .force_delete(true)
        .send()
        .await;
    let _ = namespaces.delete(&run.ns, &DeleteParams::default()).await;
    if who == As::ChartServiceAccount {
        chart::uninstall(&run.kube, &suffix).await;
    }
}

/// The chart on the e2e API server.
mod chart {
    use std::path::Path;
    use std::process::Stdio;

    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
    use kube::api::DeleteParams;
    use kube::{Api, Client};
    use serde_json::{json, Value};
    use tokio::io::AsyncWriteExt;

    use super::support::tools::install as install_tool;

    fn release(suffix: &str) -> String {
        format!("sb-e2e-{suffix}")
    }

    /// `helm template` of the chart for a release in `ns` (cluster-scoped names made unique by the
    /// run's suffix, the flags the e2e daemon runs with), applied with kubectl but for the
    /// Deployment (no kubelet runs it here; the test runs the binary itself). Returns a kubeconfig
    /// that authenticates as the chart's ServiceAccount.
    pub async fn install(kube: &Client, kubeconfig: &str, ns: &str, suffix: &str) -> String {
        let helm = install_tool("install-helm.sh", &["helm"], "helm.lock");
        let kubectl = install_tool("install-helm.sh", &["kubectl"], "helm.lock");
        let chart = Path::new(env!("CARGO_MANIFEST_DIR")).join("charts/spots-booster");
        let release = release(suffix);
        let values = json!({
            "fullnameOverride": release,
            "instanceManagerNamespace": {"create": false},
            "clusterName": crate::support::e2e::CLUSTER,
            "config": {
                "eventsNamespace": ns,
                "caStatusNamespace": ns,
                "instanceGroups": false,
                "nthTaintSignals": true,
            },
        });
        let mut template = std::process::Command::new(&helm);
        template.args(["template", &release, &chart.display().to_string(), "--namespace", ns]);
        for (key, value) in values.as_object().unwrap() {
            template.arg("--set-json").arg(format!("{key}={value}"));
        }
        let rendered = template.output().expect("helm template");
        assert!(rendered.status.success(), "helm template: {}", String::from_utf8_lossy(&rendered.stderr));
        let objects: Vec<Value> = serde_yaml::Deserializer::from_slice(&rendered.stdout)
            .map(|d| serde::Deserialize::deserialize(d).unwrap())
            .filter(|v: &Value| !v.is_null() && v["kind"] != "Deployment")
            .collect();
        let kinds: Vec<&str> = objects.iter().filter_map(|o| o["kind"].as_str()).collect();
        for kind in ["ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Service"] {
            assert!(kinds.contains(&kind), "the chart renders a {kind}: {kinds:?}");
        }
        let list = json!({"apiVersion": "v1", "kind": "List", "items": objects});
        let mut apply = tokio::process::Command::new(&kubectl)
            .args(["--kubeconfig", kubeconfig, "apply", "--server-side", "--field-manager", "helm", "-f", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("kubectl apply");
        apply.stdin.take().unwrap().write_all(list.to_string().as_bytes()).await.unwrap();
        let applied = apply.wait_with_output().await.unwrap();
        assert!(applied.status.success(), "kubectl apply: {}", String::from_utf8_lossy(&applied.stderr));
        eprintln!("e2e chart: applied {}", String::from_utf8_lossy(&applied.stdout).trim().replace('\n', "; "));

        // A token for the ServiceAccount, as the kubelet would mount it.
        let request = http::Request::post(format!("/api/v1/namespaces/{ns}/serviceaccounts/{release}/token"))
            .header("content-type", "application/json")
            .body(
                serde_json::to_vec(&json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                    "spec": {"expirationSeconds": 3600}}))
                .unwrap(),
            )
            .unwrap();
        let answer: Value = kube.request(request).await.expect("a token for the chart's ServiceAccount");
        let token = answer["status"]["token"].as_str().expect("status.token").to_string();

        // The e2e kubeconfig's cluster, with the ServiceAccount as its only user.
        let mut config: Value = serde_yaml::from_str(&std::fs::read_to_string(kubeconfig).unwrap()).unwrap();
        config["users"] = json!([{"name": "chart-service-account", "user": {"token": token}}]);
        for context in config["contexts"].as_array_mut().expect("contexts") {
            context["context"]["user"] = json!("chart-service-account");
        }
        let path = std::env::temp_dir().join(format!("spots-booster-e2e-chart-{suffix}.kubeconfig"));
        std::fs::write(&path, serde_yaml::to_string(&config).unwrap()).unwrap();
        path.display().to_string()
    }

    /// Deletes the chart's cluster-scoped objects (the namespaced ones go with the namespace).
    pub async fn uninstall(kube: &Client, suffix: &str) {
        let name = release(suffix);
        let _ = Api::<ClusterRoleBinding>::all(kube.clone()).delete(&name, &DeleteParams::default()).await;
        let _ = Api::<ClusterRole>::all(kube.clone()).delete(&name, &DeleteParams::default()).await;
    }
}
