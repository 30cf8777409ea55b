//! End-to-end at production shape: the real binary against a real API server and moto, with a
//! 12-node group (bigger than Cluster Autoscaler's default unready tolerance of 3 would allow if
//! only the signalled nodes counted) and two at-risk nodes, one of them holding a pod whose
//! PodDisruptionBudget never allows a disruption. Ignored unless run with `--include-ignored`
//! and `SPOTS_BOOSTER_E2E_KUBECONFIG` and `SPOTS_BOOSTER_E2E_AWS_ENDPOINT` set; it needs kube-controller-manager's disruption
//! controller (kind, k3d, or a hand-run one), since the budgets must really be enforced.
//!
//! What it checks, each a failure seen on a real API server before:
//! - the group is boosted at once (no CA status: the Ready count comes from the group's own
//!   instance list);
//! - the normal node is drained and terminated while the stubborn one is still blocked;
//! - `DrainBlockedByPDB` is written for the stubborn node, and `--drain-timeout` fires on time.

use std::time::{Duration, Instant};

use aws_config::SdkConfig;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::api::events::v1::Event as NewEvent;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::{Api, Client};
use serde_json::{json, Value};
use support::e2e::{
    await_synced, aws, bind_pod, create_group, create_namespace, deploy_with_budget, desired_capacity, env, free_port,
    kube_client, live_instances, metric, nth_cordon_and_taint, nth_rebalance_event, pod_ready, register_node,
    report_pod_ready, run_suffix, scrape, start_booster,
};

use crate::support;

const GROUP_SIZE: i32 = 12;
const DRAIN_TIMEOUT_SECS: u64 = 40;

struct Fleet {
    ns: String,
    suffix: String,
    group: String,
    kube: Client,
    aws: SdkConfig,
}

impl Fleet {
    fn node_name(&self, instance: &str) -> String {
        format!("{instance}.{}.e2e.internal", self.suffix)
    }

    /// The group's instances that are not leaving: (id, zone).
    async fn live_instances(&self) -> Vec<(String, String)> {
        live_instances(&self.aws, &self.group).await
    }

    async fn desired(&self) -> i32 {
        desired_capacity(&self.aws, &self.group).await
    }

    async fn cordon(&self, node: &str, on: bool) {
        let nodes: Api<Node> = Api::all(self.kube.clone());
        let patch = json!({"spec": {"unschedulable": on}});
        nodes.patch(node, &PatchParams::default(), &Patch::Merge(patch)).await.unwrap();
    }

    /// One round of kubelet, scheduler and cloud-node-lifecycle duties: every live instance has a
    /// Ready Node, Nodes of gone instances are deleted, Pending pods are bound to the newest
    /// schedulable Node and bound pods are reported Running and Ready.
    async fn play_cluster(&self) {
        let nodes: Api<Node> = Api::all(self.kube.clone());
        let live: Vec<String> = {
            let mut names = Vec::new();
            for (id, zone) in self.live_instances().await {
                register_node(&self.kube, &self.node_name(&id), &zone, &id, &self.suffix).await;
                names.push(self.node_name(&id));
            }
            names
        };
        let ours = nodes.list(&ListParams::default().labels(&format!("spots-booster-e2e={}", self.suffix))).await;
        let ours = ours.unwrap().items;
        for n in &ours {
            let name = n.metadata.name.clone().unwrap();
            if !live.contains(&name) {
                let _ = nodes.delete(&name, &DeleteParams::default()).await;
            }
        }
        let mut schedulable: Vec<(String, String)> = ours
            .iter()
            .filter(|n| live.contains(n.metadata.name.as_ref().unwrap()))
            .filter(|n| !n.spec.as_ref().and_then(|s| s.unschedulable).unwrap_or(false))
            .map(|n| {
                let created = n.metadata.creation_timestamp.as_ref().map(|t| t.0.to_string()).unwrap_or_default();
                (created, n.metadata.name.clone().unwrap())
            })
            .collect();
        schedulable.sort();
        let pods: Api<Pod> = Api::namespaced(self.kube.clone(), &self.ns);
        for pod in pods.list(&ListParams::default()).await.unwrap().items {
            let name = pod.metadata.name.clone().unwrap();
            if pod.metadata.deletion_timestamp.is_some() {
                continue;
            }
            match pod.spec.as_ref().and_then(|s| s.node_name.clone()) {
                None => {
                    if let Some((_, target)) = schedulable.last() {
                        bind_pod(&pods, &name, target).await;
                    }
                }
                Some(_) if !pod_ready(&pod) => report_pod_ready(&pods, &name).await,
                Some(_) => {}
            }
        }
    }

    /// Pods of `app` Ready on `node`.
    async fn ready_on(&self, app: &str, node: &str) -> usize {
        let pods: Api<Pod> = Api::namespaced(self.kube.clone(), &self.ns);
        let list = pods.list(&ListParams::default().labels(&format!("app={app}"))).await.unwrap();
        list.items
            .iter()
            .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node))
            .filter(|p| pod_ready(p))
            .count()
    }

    /// A Deployment of `replicas` pods of `app` (bound by the test's scheduler), and its budget.
    async fn deploy(&self, app: &str, replicas: u32, budget: Value) {
        deploy_with_budget(&self.kube, &self.ns, app, replicas, budget).await;
    }

    /// Plays the cluster until `want` pods of `app` are Ready on `node`.
    async fn settle(&self, app: &str, node: &str, want: usize) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.ready_on(app, node).await < want {
            assert!(Instant::now() < deadline, "{app} never became Ready on {node}");
            self.play_cluster().await;
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }

    /// Waits until the disruption controller has computed the budget.
    async fn budget_computed(&self, app: &str) {
        let pdbs: Api<PodDisruptionBudget> = Api::namespaced(self.kube.clone(), &self.ns);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let pdb = pdbs.get(app).await.unwrap();
            let status = pdb.status.unwrap_or_default();
            if status.expected_pods > 0 && status.observed_generation == pdb.metadata.generation {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "PDB {app} never computed: this suite needs kube-controller-manager's disruption controller"
            );
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }

    async fn nth_rebalance(&self, node: &str, instance: &str) {
        nth_cordon_and_taint(&self.kube, node).await;
        nth_rebalance_event(&self.kube, &self.ns, node, instance).await;
    }

    /// Reasons of the booster's Events about `node`.
    async fn reasons(&self, node: &str) -> Vec<String> {
        let events: Api<NewEvent> = Api::namespaced(self.kube.clone(), "default");
        let list = events.list(&ListParams::default()).await.unwrap().items;
        list.into_iter()
            .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(node))
            .filter_map(|e| e.reason)
            .collect()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real API server and moto: set SPOTS_BOOSTER_E2E_KUBECONFIG and SPOTS_BOOSTER_E2E_AWS_ENDPOINT, pass --include-ignored"]
async fn a_large_group_boosts_and_a_stubborn_budget_holds_back_only_its_own_node() {
    let (kubeconfig, endpoint) = env();
    let suffix = run_suffix();
    let fleet = Fleet {
        ns: format!("sb-fleet-{suffix}"),
        group: format!("sb-fleet-{suffix}"),
        suffix: suffix.clone(),
        kube: kube_client(&kubeconfig).await,
        aws: aws(&endpoint).await,
    };
    create_namespace(&fleet.kube, &fleet.ns).await;
    let namespaces: Api<Namespace> = Api::all(fleet.kube.clone());

    create_group(&fleet.aws, &fleet.group, GROUP_SIZE, GROUP_SIZE + 10).await;
    fleet.play_cluster().await;
    let instances = fleet.live_instances().await;
    assert_eq!(instances.len(), GROUP_SIZE as usize);
    let (stubborn_id, normal_id) = (instances[0].0.clone(), instances[1].0.clone());
    let (stubborn, normal) = (fleet.node_name(&stubborn_id), fleet.node_name(&normal_id));

    // A singleton whose budget never allows a disruption on one node; two web pods behind
    // maxUnavailable 1 on the other. Every other node is cordoned while they are placed.
    let others: Vec<String> = instances[2..].iter().map(|(id, _)| fleet.node_name(id)).collect();
    for n in &others {
        fleet.cordon(n, true).await;
    }
    fleet.cordon(&normal, true).await;
    fleet.deploy("singleton", 1, json!({"minAvailable": 1})).await;
    fleet.settle("singleton", &stubborn, 1).await;
    fleet.cordon(&stubborn, true).await;
    fleet.cordon(&normal, false).await;
    fleet.deploy("web", 2, json!({"maxUnavailable": 1})).await;
    fleet.settle("web", &normal, 2).await;
    for n in &others {
        fleet.cordon(n, false).await;
    }
    fleet.cordon(&stubborn, false).await;
    fleet.budget_computed("singleton").await;
    fleet.budget_computed("web").await;

    let port = free_port();
    let drain_timeout = format!("{DRAIN_TIMEOUT_SECS}s");
    let mut booster = start_booster(
        &kubeconfig,
        &endpoint,
        &fleet.ns,
        port,
        &[
            "--leader-elect",
            "false",
            "--drain-interval",
            "1s",
            "--drain-timeout",
            &drain_timeout,
            "--instance-groups",
            "false",
            "--nth-taint-signals",
            "true",
        ],
    );
    await_synced(port, &mut booster).await;

    fleet.nth_rebalance(&stubborn, &stubborn_id).await;
    fleet.nth_rebalance(&normal, &normal_id).await;
    let signalled = Instant::now();

    // Boosted at once, though only the two signalled nodes were ever looked up one by one.
    let deadline = signalled + Duration::from_secs(15);
    while fleet.desired().await == GROUP_SIZE {
        assert!(Instant::now() < deadline, "a {GROUP_SIZE}-node group was never boosted");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let boosted_after = signalled.elapsed();

    // The normal node drains and is terminated while the stubborn one is still blocked.
    let deadline = signalled + Duration::from_secs(90);
    let normal_gone = loop {
        fleet.play_cluster().await;
        if !fleet.live_instances().await.iter().any(|(id, _)| *id == normal_id) {
            break signalled.elapsed();
        }
        assert!(booster.try_wait().unwrap().is_none(), "spots-booster exited");
        assert!(Instant::now() < deadline, "the normal at-risk node was never terminated");
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    assert!(fleet.live_instances().await.iter().any(|(id, _)| *id == stubborn_id), "the stubborn node stays");
    let reasons = fleet.reasons(&stubborn).await;
    assert!(reasons.iter().any(|r| r == "DrainBlockedByPDB"), "{reasons:?}");

    // The stubborn drain times out on time and its node stays, cordoned.
    let deadline = signalled + Duration::from_secs(DRAIN_TIMEOUT_SECS + 60);
    while !fleet.reasons(&stubborn).await.iter().any(|r| r == "DrainTimedOut") {
        fleet.play_cluster().await;
        assert!(Instant::now() < deadline, "--drain-timeout {DRAIN_TIMEOUT_SECS}s never fired");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let timed_out = signalled.elapsed();
    assert!(fleet.live_instances().await.iter().any(|(id, _)| *id == stubborn_id), "never terminated");
    assert_eq!(fleet.ready_on("singleton", &stubborn).await, 1, "the budget was honoured");
    let text = scrape(port).await;
    let group = &fleet.group;
    assert_eq!(
        metric(&text, &format!("spots_booster_drains_total{{group=\"{group}\",outcome=\"timed-out\"}}")),
        1.0,
        "{text}"
    );
    eprintln!(
        "e2e fleet: boosted {:.2}s after the Events; normal node terminated at {:.1}s; stubborn drain timed out at {:.1}s",
        boosted_after.as_secs_f64(),
        normal_gone.as_secs_f64(),
        timed_out.as_secs_f64()
    );

    let _ = booster.start_kill();
    let _ = booster.wait().await;
    let nodes: Api<Node> = Api::all(fleet.kube.clone());
    for n in nodes.list(&ListParams::default().labels(&format!("spots-booster-e2e={suffix}"))).await.unwrap().items {
        let _ = nodes.delete(&n.metadata.name.unwrap(), &DeleteParams::default()).await;
    }
    let _ = aws_sdk_autoscaling::Client::new(&fleet.aws)
        .delete_auto_scaling_group()
        .auto_scaling_group_name(&fleet.group)
        .force_delete(true)
        .send()
        .await;
    let _ = namespaces.delete(&fleet.ns, &DeleteParams::default()).await;
}
