//! End-to-end: the two-minute path. The real `spots-booster run` binary against a real API server
//! and moto. Ignored unless run with `--include-ignored` and `SPOTS_BOOSTER_E2E_KUBECONFIG` and
//! `SPOTS_BOOSTER_E2E_AWS_ENDPOINT` set.
//!
//! NTH runs as its queue processor set up to cordon only: it cordons and taints
//! (`aws-node-termination-handler/spot-itn`, `timeAdded` when EC2 sent the notice) and drains
//! nothing. The test plays kubelet (a new instance's Node joins only after its boot time), the
//! scheduler and AWS itself: at the notice's deadline it takes the instance if it is still there,
//! and the pods still bound to its node die with it. Two cases, both with room on the other nodes:
//! replacements that boot slower than the notice, and AWS taking an instance before the booster.
//! A third has no room: the interrupted node's pods wait Pending for the replacement, and the
//! daemon's `capacity_gap_pod_seconds_total` is held to what the API server showed and to what
//! `simulate` says of the same shape.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_config::SdkConfig;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::{Api, Client};
use serde_json::json;
use spots_booster::simulate::{parse_scenario, simulate};
use support::aws_intercept::{ec2_as_aws, intercepting_proxy};
use support::e2e::{
    await_synced, aws, bind_pod, booster_events_on, create_group, create_namespace, deploy_requesting,
    deploy_with_budget, desired_capacity, env, free_port, kube_client, live_instances, metric, pod_ready,
    register_node, report_pod_ready, run_suffix, schedulable_nodes, scrape, start_booster, LONE_DRAINER,
};

use crate::support;

/// What the test saw while playing kubelet, scheduler and AWS.
#[derive(Debug, Default)]
struct Seen {
    /// When each instance first appeared in its group.
    launched: BTreeMap<String, Instant>,
    /// When each Node was first registered.
    joined: BTreeMap<String, Instant>,
    /// Pods that were still bound to a node when its instance went.
    killed: Vec<String>,
    /// Pods bound to each node when last looked.
    on: BTreeMap<String, usize>,
    /// When each watched node first held no pod.
    emptied: BTreeMap<String, Instant>,
    /// Fewest Ready pods seen once the notices went out.
    min_ready: Option<usize>,
    /// No disruption controller runs: the test keeps the PDB's status.
    play_disruption_controller: bool,
    /// When the scheduler first saw each unbound pod.
    unbound_since: BTreeMap<String, Instant>,
    /// From when the capacity gap is counted.
    gap_from: Option<Instant>,
    /// Seconds the pods first seen unbound after `gap_from` waited for the scheduler to bind them.
    pending_seconds: f64,
}

/// One test's cluster: a namespace, a group in moto, and the test's kubelet and scheduler.
struct Cluster {
    ns: String,
    suffix: String,
    group: String,
    kube: Client,
    aws: SdkConfig,
    /// How long a new instance takes to become a Ready Node.
    boot: Duration,
    /// Instances there from the start: their Nodes join at once.
    initial: BTreeSet<String>,
    /// Nodes whose emptying is timed.
    watched: BTreeSet<String>,
    /// Pods the scheduler places on one node at most (`None`: no limit).
    pods_per_node: Option<usize>,
    seen: Mutex<Seen>,
}

impl Cluster {
    fn node_name(&self, instance: &str) -> String {
        format!("{instance}.{}.e2e.internal", self.suffix)
    }

    async fn instances(&self) -> Vec<(String, String)> {
        live_instances(&self.aws, &self.group).await
    }

    async fn desired(&self) -> i32 {
        desired_capacity(&self.aws, &self.group).await
    }

    /// AWS reclaims the instance: it leaves the group, which replaces it at the same desired.
    async fn reclaim(&self, instance: &str) {
        let asg = aws_sdk_autoscaling::Client::new(&self.aws);
        let _ = asg
            .terminate_instance_in_auto_scaling_group()
            .instance_id(instance)
            .should_decrement_desired_capacity(false)
            .send()
            .await;
    }

    /// Plays NTH's queue processor for a spot interruption EC2 sent `ago`: cordon and taint.
    async fn notice(&self, node: &str, ago: Duration) {
        let nodes: Api<Node> = Api::all(self.kube.clone());
        let sent = jiff::Timestamp::now() - jiff::SignedDuration::try_from(ago).unwrap();
        let sent = sent.strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
        let patch = json!({"spec": {"unschedulable": true, "taints": [
            {"key": "aws-node-termination-handler/spot-itn", "effect": "NoSchedule", "timeAdded": sent}]}});
        nodes.patch(node, &PatchParams::default(), &Patch::Merge(patch)).await.unwrap();
    }

    /// Creates Deployment `web` (`replicas`, grace period 0) and its PDB (`maxUnavailable: 1`).
    async fn deploy(&self, replicas: u32) {
        deploy_with_budget(&self.kube, &self.ns, "web", replicas, json!({"maxUnavailable": 1})).await;
    }

    /// One round of kubelet, scheduler, pod garbage collector and (when no controller does it)
    /// disruption controller. `placement` pins unbound pods to nodes, in order, while it lasts.
    async fn play(&self, placement: &mut Vec<String>, watching: bool) -> usize {
        let nodes: Api<Node> = Api::all(self.kube.clone());
        let pods: Api<Pod> = Api::namespaced(self.kube.clone(), &self.ns);
        let live = self.instances().await;
        let now = Instant::now();
        let mut live_nodes = BTreeSet::new();
        for (id, zone) in &live {
            let launched = *self.seen.lock().unwrap().launched.entry(id.clone()).or_insert(now);
            if self.initial.contains(id) || now.duration_since(launched) >= self.boot {
                register_node(&self.kube, &self.node_name(id), zone, id, &self.suffix).await;
                self.seen.lock().unwrap().joined.entry(self.node_name(id)).or_insert(now);
            }
            live_nodes.insert(self.node_name(id));
        }
        let all = pods.list(&ListParams::default().labels("app=web")).await.unwrap().items;
        // An instance that left its group takes its Node, and every pod still on it, along.
        let ours = nodes.list(&ListParams::default().labels(&format!("spots-booster-e2e={}", self.suffix))).await;
        for n in ours.unwrap().items {
            let name = n.metadata.name.clone().unwrap();
            if live_nodes.contains(&name) {
                continue;
            }
            for pod in all.iter().filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(&name)) {
                let pod_name = pod.metadata.name.clone().unwrap();
                self.seen.lock().unwrap().killed.push(format!("{pod_name} on {name}"));
                let _ = pods.delete(&pod_name, &DeleteParams::default().grace_period(0)).await;
            }
            let _ = nodes.delete(&name, &DeleteParams::default()).await;
        }
        let mut schedulable = schedulable_nodes(&self.kube, &self.suffix).await;
        schedulable.retain(|n| live_nodes.contains(n.as_str()));
        let all = pods.list(&ListParams::default().labels("app=web")).await.unwrap().items;
        let mut on: BTreeMap<String, usize> = schedulable.iter().map(|n| (n.clone(), 0)).collect();
        let mut ready = 0;
        for pod in &all {
            if let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) {
                *on.entry(node).or_default() += 1;
            }
        }
        for pod in &all {
            let name = pod.metadata.name.clone().unwrap();
            match pod.spec.as_ref().and_then(|s| s.node_name.clone()) {
                None => {
                    self.seen.lock().unwrap().unbound_since.entry(name.clone()).or_insert(now);
                    // The scheduler: the pinned node first, else the emptiest schedulable one
                    // with room.
                    let room = self.pods_per_node.unwrap_or(usize::MAX);
                    let target = if placement.is_empty() {
                        on.iter()
                            .filter(|(n, k)| schedulable.contains(n) && **k < room)
                            .min_by_key(|(_, k)| **k)
                            .map(|(n, _)| n.clone())
                    } else {
                        Some(placement.remove(0))
                    };
                    if let Some(target) = target {
                        bind_pod(&pods, &name, &target).await;
                        *on.entry(target).or_default() += 1;
                        let bound = Instant::now();
                        let mut seen = self.seen.lock().unwrap();
                        if let Some(since) = seen.unbound_since.remove(&name) {
                            if seen.gap_from.is_some_and(|from| since >= from) {
                                seen.pending_seconds += bound.duration_since(since).as_secs_f64();
                            }
                        }
                    }
                }
                Some(_) if !pod_ready(pod) => report_pod_ready(&pods, &name).await,
                Some(_) => ready += 1,
            }
        }
        let play_pdb = {
            let mut seen = self.seen.lock().unwrap();
            for node in &self.watched {
                let held = on.get(node).copied().unwrap_or(0);
                if held == 0 && watching {
                    seen.emptied.entry(node.clone()).or_insert(now);
                }
            }
            seen.on = on;
            if watching {
                seen.min_ready = Some(seen.min_ready.map_or(ready, |m| m.min(ready)));
            }
            seen.play_disruption_controller
        };
        if play_pdb {
            let pdbs: Api<PodDisruptionBudget> = Api::namespaced(self.kube.clone(), &self.ns);
            let expected = all.len();
            let status = json!({"status": {"observedGeneration": 1, "disruptionsAllowed": ready.saturating_sub(expected.saturating_sub(1)),
                "currentHealthy": ready, "desiredHealthy": expected.saturating_sub(1), "expectedPods": expected}});
            let _ = pdbs.patch_status("web", &PatchParams::default(), &Patch::Merge(&status)).await;
        }
        ready
    }

    /// Plays until `replicas` pods are Ready, then decides who plays the disruption controller.
    async fn settle(&self, placement: &mut Vec<String>, replicas: usize) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.play(placement, false).await < replicas {
            assert!(Instant::now() < deadline, "the Deployment never became Ready");
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        let pdbs: Api<PodDisruptionBudget> = Api::namespaced(self.kube.clone(), &self.ns);
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut computed = false;
        while !computed && Instant::now() < deadline {
            computed = pdbs.get("web").await.unwrap().status.is_some_and(|s| s.expected_pods > 0);
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        self.seen.lock().unwrap().play_disruption_controller = !computed;
        self.play(placement, false).await;
    }

    async fn start(kubeconfig: &str, endpoint: &str, name: &str, desired: i32, boot: Duration) -> Cluster {
        let suffix = run_suffix();
        let (ns, group) = (format!("sb-{name}-{suffix}"), format!("sb-{name}-{suffix}"));
        let kube = kube_client(kubeconfig).await;
        let sdk = aws(endpoint).await;
        create_namespace(&kube, &ns).await;
        create_group(&sdk, &group, desired, 10).await;
        let mut cluster = Cluster {
            ns,
            suffix,
            group,
            kube,
            aws: sdk,
            boot,
            initial: BTreeSet::new(),
            watched: BTreeSet::new(),
            pods_per_node: None,
            seen: Mutex::new(Seen::default()),
        };
        cluster.initial = cluster.instances().await.into_iter().map(|(id, _)| id).collect();
        cluster
    }

    async fn booster(&self, kubeconfig: &str, endpoint: &str, port: u16) -> tokio::process::Child {
        let mut booster = start_booster(kubeconfig, endpoint, &self.ns, port, LONE_DRAINER);
        await_synced(port, &mut booster).await;
        booster
    }

    /// Whether the booster gave a boost back (`give_backs_total{outcome="written"}`) and desired
    /// capacity is `desired` again; fails the test if the booster exited or `deadline` passed.
    async fn given_back(
        &self,
        booster: &mut tokio::process::Child,
        port: u16,
        desired: i32,
        deadline: Instant,
    ) -> bool {
        let text = scrape(port).await;
        let given = format!("spots_booster_give_backs_total{{group=\"{}\",outcome=\"written\"}}", self.group);
        if metric(&text, &given) >= 1.0 && self.desired().await == desired {
            return true;
        }
        assert!(booster.try_wait().unwrap().is_none(), "spots-booster exited");
        assert!(Instant::now() < deadline, "the boost was never given back: {text}");
        false
    }

    /// The nodes the booster drained to give a boost back, as its `DrainStarted` Events name
    /// them, with those Events' notes.
    async fn drained_to_give_back(&self) -> Vec<(String, String)> {
        let joined: Vec<String> = self.seen.lock().unwrap().joined.keys().cloned().collect();
        let mut given = Vec::new();
        for node in joined {
            for e in booster_events_on(&self.kube, &node).await {
                let note = e.note.unwrap_or_default();
                if e.reason.as_deref() == Some("DrainStarted") && note.contains("giving back") {
                    given.push((node.clone(), note));
                }
            }
        }
        given
    }

    async fn clean_up(&self) {
        let nodes: Api<Node> = Api::all(self.kube.clone());
        let ours = nodes.list(&ListParams::default().labels(&format!("spots-booster-e2e={}", self.suffix))).await;
        for n in ours.map(|l| l.items).unwrap_or_default() {
            let _ = nodes.delete(n.metadata.name.as_deref().unwrap_or_default(), &DeleteParams::default()).await;
        }
        let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(self.kube.clone());
        let _ = namespaces.delete(&self.ns, &DeleteParams::default()).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real API server and moto: set SPOTS_BOOSTER_E2E_KUBECONFIG and SPOTS_BOOSTER_E2E_AWS_ENDPOINT, pass --include-ignored"]
async fn a_short_notice_is_drained_before_aws_takes_the_instance_though_replacements_boot_slower() {
    let (kubeconfig, endpoint) = env();
    // Replacements are Ready 90 s after launch; the notice gives 45 s.
    let mut cluster = Cluster::start(&kubeconfig, &endpoint, "itn", 3, Duration::from_secs(90)).await;
    let ids: Vec<String> = cluster.initial.iter().cloned().collect();
    let at_risk_instance = ids[0].clone();
    let at_risk = cluster.node_name(&at_risk_instance);
    cluster.watched.insert(at_risk.clone());
    cluster.deploy(8).await;
    // Two pods on the at-risk node, the rest on the others.
    let others: Vec<String> = ids[1..].iter().map(|i| cluster.node_name(i)).collect();
    let mut placement = vec![at_risk.clone(), at_risk.clone()];
    placement.extend((0..6).map(|k| others[k % others.len()].clone()));
    cluster.settle(&mut placement, 8).await;
    assert_eq!(cluster.seen.lock().unwrap().on.get(&at_risk), Some(&2));

    let port = free_port();
    let mut booster = cluster.booster(&kubeconfig, &endpoint, port).await;

    // EC2 sent the notice 75 s ago: the instance goes 45 s from now.
    cluster.notice(&at_risk, Duration::from_secs(75)).await;
    let noticed = Instant::now();
    let taken_at = noticed + Duration::from_secs(45);
    let mut reclaimed = false;
    while Instant::now() < taken_at + Duration::from_secs(10) {
        cluster.play(&mut Vec::new(), true).await;
        if !reclaimed && Instant::now() >= taken_at {
            if cluster.instances().await.iter().any(|(id, _)| *id == at_risk_instance) {
                cluster.reclaim(&at_risk_instance).await;
            }
            reclaimed = true;
        }
        assert!(booster.try_wait().unwrap().is_none(), "spots-booster exited");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    cluster.play(&mut Vec::new(), true).await;
    let text = scrape(port).await;
    let group = cluster.group.clone();
    {
        let seen = cluster.seen.lock().unwrap();
        let emptied = seen.emptied.get(&at_risk).copied().expect("the interrupted node was emptied");
        let first_replacement = seen
            .joined
            .iter()
            .filter(|(n, _)| !cluster.initial.iter().any(|i| cluster.node_name(i) == **n))
            .map(|(_, at)| *at)
            .min();
        eprintln!(
            "short notice: node empty {:.1} s after the notice (deadline 45 s), pods killed {:?}, fewest Ready {:?}, first replacement Ready {:?}",
            emptied.duration_since(noticed).as_secs_f64(),
            seen.killed,
            seen.min_ready,
            first_replacement.map(|at| at.duration_since(noticed).as_secs_f64())
        );
        assert!(emptied < taken_at, "emptied before AWS took the instance");
        assert!(first_replacement.is_none_or(|at| at > emptied), "drained before any replacement was Ready");
        assert!(seen.killed.is_empty(), "no pod died with the node: {:?}", seen.killed);
        assert!(seen.min_ready.unwrap() >= 7, "the PDB (maxUnavailable 1) held: {:?}", seen.min_ready);
    }
    let started_early =
        format!("spots_booster_drains_total{{group=\"{group}\",outcome=\"started-before-replacements\"}}");
    assert_eq!(metric(&text, &started_early), 1.0, "{text}");
    assert_eq!(
        metric(&text, &format!("spots_booster_terminations_total{{decrement=\"true\",group=\"{group}\"}}")),
        1.0,
        "the booster terminated it before AWS, giving the boost back: {text}"
    );
    assert_eq!(cluster.desired().await, 3, "the boost was given back with the instance");

    let _ = booster.start_kill();
    let _ = booster.wait().await;
    cluster.clean_up().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real API server and moto: set SPOTS_BOOSTER_E2E_KUBECONFIG and SPOTS_BOOSTER_E2E_AWS_ENDPOINT, pass --include-ignored"]
async fn a_boost_whose_instance_aws_took_first_is_given_back_through_a_drained_node() {
    let (kubeconfig, endpoint) = env();
    let mut cluster = Cluster::start(&kubeconfig, &endpoint, "reclaim", 4, Duration::from_secs(20)).await;
    let ids: Vec<String> = cluster.initial.iter().cloned().collect();
    let (first, second) = (ids[0].clone(), ids[1].clone());
    let nodes: Vec<String> = ids.iter().map(|i| cluster.node_name(i)).collect();
    cluster.watched = nodes.iter().cloned().collect();
    cluster.deploy(6).await;
    // One pod on each interrupted node, two on each untouched one.
    let mut placement = vec![nodes[0].clone(), nodes[1].clone(), nodes[2].clone(), nodes[2].clone()];
    placement.extend([nodes[3].clone(), nodes[3].clone()]);
    cluster.settle(&mut placement, 6).await;

    let port = free_port();
    let mut booster = cluster.booster(&kubeconfig, &endpoint, port).await;

    // Two notices in one group; AWS takes the first instance as soon as the boost is written and
    // the group replaces it. (A fixed 1.5 s lost the race under load: the booster drained the
    // one pod against the near deadline and terminated the instance itself 0.8 s after the boost,
    // as in the give-back test below.)
    cluster.notice(&nodes[0], Duration::from_secs(90)).await;
    cluster.notice(&nodes[1], Duration::from_secs(90)).await;
    let noticed = Instant::now();
    while cluster.desired().await < 6 {
        assert!(noticed.elapsed() < Duration::from_secs(10), "the notices were never boosted");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    cluster.reclaim(&first).await;
    let deadline = noticed + Duration::from_secs(150);
    let mut second_reclaimed = false;
    loop {
        cluster.play(&mut Vec::new(), true).await;
        if !second_reclaimed && Instant::now() >= noticed + Duration::from_secs(30) {
            if cluster.instances().await.iter().any(|(id, _)| *id == second) {
                cluster.reclaim(&second).await;
            }
            second_reclaimed = true;
        }
        if cluster.given_back(&mut booster, port, 4, deadline).await {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    for _ in 0..4 {
        cluster.play(&mut Vec::new(), true).await;
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let text = scrape(port).await;
    let group = cluster.group.clone();
    // The booster's Events say which node it chose to give back.
    let given: Vec<String> = cluster.drained_to_give_back().await.into_iter().map(|(node, _)| node).collect();
    {
        let seen = cluster.seen.lock().unwrap();
        eprintln!(
            "reclaim first: given back by draining {given:?} {:.1} s after the notices; pods killed {:?}; fewest Ready {:?}",
            noticed.elapsed().as_secs_f64(),
            seen.killed,
            seen.min_ready
        );
        assert_eq!(given.len(), 1, "one node chosen for the one instance AWS took first: {given:?}");
        assert!(given[0] != nodes[0] && given[0] != nodes[1], "an untouched node, not an interrupted one");
        assert!(!seen.on.contains_key(&given[0]), "the node given back is gone");
        let killed_elsewhere: Vec<&String> = seen.killed.iter().filter(|k| !k.ends_with(&nodes[0])).collect();
        assert!(
            killed_elsewhere.is_empty(),
            "only AWS's own reclaim may kill a pod; none on the node given back: {killed_elsewhere:?}"
        );
        assert!(seen.min_ready.unwrap() >= 4, "the PDB held save for AWS's reclaim: {:?}", seen.min_ready);
    }
    assert_eq!(cluster.desired().await, 4, "both boosted nodes given back");
    assert_eq!(
        metric(&text, "spots_booster_aws_calls_total{operation=\"SetDesiredCapacity\"}"),
        1.0,
        "desired capacity was written once, by the boost, and never lowered: {text}"
    );
    assert_eq!(
        metric(&text, &format!("spots_booster_terminations_total{{decrement=\"true\",group=\"{group}\"}}")),
        2.0,
        "{text}"
    );

    let _ = booster.start_kill();
    let _ = booster.wait().await;
    cluster.clean_up().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real API server and moto: set SPOTS_BOOSTER_E2E_KUBECONFIG and SPOTS_BOOSTER_E2E_AWS_ENDPOINT, pass --include-ignored"]
async fn a_give_back_drains_a_node_by_its_live_pods_never_one_with_an_opted_out_or_bare_pod() {
    let (kubeconfig, endpoint) = env();
    let mut cluster = Cluster::start(&kubeconfig, &endpoint, "giveback", 4, Duration::from_secs(10)).await;
    let ids: Vec<String> = cluster.initial.iter().cloned().collect();
    let nodes: Vec<String> = ids.iter().map(|i| cluster.node_name(i)).collect();
    cluster.watched = nodes.iter().cloned().collect();
    cluster.deploy(4).await;
    // web pods on the interrupted node and on nodes[3]; nodes[1] runs a pod that opted out and
    // nodes[2] one nothing recreates, and nothing else.
    let mut placement = vec![nodes[0].clone(), nodes[3].clone(), nodes[3].clone(), nodes[3].clone()];
    cluster.settle(&mut placement, 4).await;
    let pods: Api<Pod> = Api::namespaced(cluster.kube.clone(), &cluster.ns);
    for (name, node, annotations) in
        [("keep", &nodes[1], json!({"karpenter.sh/do-not-disrupt": "true"})), ("lonely", &nodes[2], json!({}))]
    {
        let pod = json!({"metadata": {"name": name, "annotations": annotations},
            "spec": {"nodeName": node, "terminationGracePeriodSeconds": 0, "automountServiceAccountToken": false,
                "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.9"}]}});
        pods.create(&Default::default(), &serde_json::from_value(pod).unwrap()).await.unwrap();
    }

    let port = free_port();
    let mut booster = cluster.booster(&kubeconfig, &endpoint, port).await;
    // A notice 30 s ahead on nodes[0]; AWS takes the instance as soon as the boost is written and
    // the group replaces it. (A fixed 1.5 s, then 0.5 s, lost the race: the booster drains the one
    // grace-0 pod against the near deadline and terminated the instance itself 0.7 s after the
    // notice.)
    cluster.notice(&nodes[0], Duration::from_secs(90)).await;
    let noticed = Instant::now();
    while cluster.desired().await < 5 {
        assert!(noticed.elapsed() < Duration::from_secs(10), "the notice was never boosted");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    cluster.reclaim(&ids[0]).await;
    let deadline = noticed + Duration::from_secs(150);
    // Each new node gets a web pod as it joins (the Deployment grows by one, pinned to it): every
    // node a give-back could take runs a pod, which a view of uncordoned nodes does not show.
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> = Api::namespaced(cluster.kube.clone(), &cluster.ns);
    let (mut replicas, mut placement, mut grown) = (4, Vec::new(), BTreeSet::new());
    loop {
        let joined: Vec<String> = cluster.seen.lock().unwrap().joined.keys().cloned().collect();
        for node in joined.into_iter().filter(|n| !nodes.contains(n)) {
            if grown.insert(node.clone()) {
                replicas += 1;
                placement.push(node);
                let scale = json!({"spec": {"replicas": replicas}});
                deployments.patch("web", &PatchParams::default(), &Patch::Merge(&scale)).await.unwrap();
            }
        }
        cluster.play(&mut placement, true).await;
        if cluster.given_back(&mut booster, port, 4, deadline).await {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    for _ in 0..4 {
        cluster.play(&mut Vec::new(), true).await;
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let (given, drain_notes): (Vec<String>, Vec<String>) = cluster.drained_to_give_back().await.into_iter().unzip();
    let killed = cluster.seen.lock().unwrap().killed.clone();
    eprintln!("give-back by live pods: {given:?} ({drain_notes:?}); pods killed {killed:?}");
    assert_eq!(given.len(), 1, "{given:?}");
    assert!(!drain_notes[0].contains("evicting 0 pod(s)"), "its pods were read: {drain_notes:?}");
    assert!(![&nodes[0], &nodes[1], &nodes[2]].contains(&&given[0]), "never a node with an opted-out or bare pod");
    let killed_elsewhere: Vec<&String> = killed.iter().filter(|k| !k.ends_with(&nodes[0])).collect();
    assert!(killed_elsewhere.is_empty(), "the node given back was drained, not killed: {killed_elsewhere:?}");
    for name in ["keep", "lonely"] {
        assert!(pods.get_opt(name).await.unwrap().is_some(), "{name} is still there");
    }
    let _ = booster.start_kill();
    let _ = booster.wait().await;
    cluster.clean_up().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real API server and moto: set SPOTS_BOOSTER_E2E_KUBECONFIG and SPOTS_BOOSTER_E2E_AWS_ENDPOINT, pass --include-ignored"]
async fn the_capacity_gap_the_daemon_counts_is_what_the_api_server_showed_and_what_simulate_predicts() {
    let (kubeconfig, endpoint) = env();
    // The shipped scenario is the shape: its group, boot time and workload.
    let text = include_str!("../examples/scenarios/interruption-no-room.yaml");
    let scenario = parse_scenario(text).unwrap();
    let spec = &scenario.groups[0];
    // simulate runs its own runtime: on a thread of its own, not inside this test's.
    let predicted = std::thread::spawn(|| simulate(&parse_scenario(text).unwrap(), None))
        .join()
        .unwrap()
        .booster
        .summary
        .capacity_gap_pod_seconds as f64;
    let desired = i32::try_from(spec.desired).unwrap();
    let mut cluster = Cluster::start(&kubeconfig, &endpoint, "gap", desired, spec.boot).await;
    // Four 1-CPU pods fill a 4-CPU node: nothing displaced fits anywhere but on the replacement.
    cluster.pods_per_node = Some(4);
    let replicas = 4 * spec.desired;
    deploy_requesting(&cluster.kube, &cluster.ns, "web", replicas, json!({"maxUnavailable": 4}), 1000).await;
    cluster.settle(&mut Vec::new(), replicas as usize).await;
    let at_risk_instance = cluster.initial.iter().next().unwrap().clone();
    let at_risk = cluster.node_name(&at_risk_instance);
    assert_eq!(cluster.seen.lock().unwrap().on.get(&at_risk), Some(&4));

    // EC2 marks the instance's spot request with its notice, as simulate's world does (moto has
    // no spot requests: a loopback proxy answers for it).
    let marked = Arc::new(Mutex::new(BTreeSet::new()));
    let proxied = intercepting_proxy(&endpoint, ec2_as_aws(marked.clone())).await;
    let port = free_port();
    let mut booster = cluster.booster(&kubeconfig, &proxied, port).await;
    cluster.watched.insert(at_risk.clone());
    marked.lock().unwrap().insert(at_risk_instance.clone());
    cluster.notice(&at_risk, Duration::ZERO).await;
    let noticed = Instant::now();
    cluster.seen.lock().unwrap().gap_from = Some(noticed);
    let (taken_at, deadline) = (noticed + Duration::from_secs(120), noticed + spec.boot + Duration::from_secs(60));
    let mut reclaimed = false;
    loop {
        let ready = cluster.play(&mut Vec::new(), true).await;
        if !reclaimed && Instant::now() >= taken_at {
            if cluster.instances().await.iter().any(|(id, _)| *id == at_risk_instance) {
                cluster.reclaim(&at_risk_instance).await;
            }
            reclaimed = true;
        }
        let (emptied, waiting) = {
            let seen = cluster.seen.lock().unwrap();
            (seen.emptied.contains_key(&at_risk), !seen.unbound_since.is_empty())
        };
        if emptied && ready == replicas as usize && !waiting {
            break;
        }
        assert!(booster.try_wait().unwrap().is_none(), "spots-booster exited");
        assert!(Instant::now() < deadline, "the displaced pods never ran again");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // The daemon's drain pass counts the last binding.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let text = scrape(port).await;
    let live = metric(&text, &format!("spots_booster_capacity_gap_pod_seconds_total{{group=\"{}\"}}", cluster.group));
    let (shown, killed) = {
        let seen = cluster.seen.lock().unwrap();
        (seen.pending_seconds, seen.killed.clone())
    };
    eprintln!(
        "capacity gap: daemon {live:.1} pod-s, API server (first seen unbound to bound) {shown:.1} pod-s, simulate {predicted:.0} pod-s; pods killed {killed:?}"
    );
    assert!(killed.is_empty(), "no pod died with the node: {killed:?}");
    assert!(shown > 100.0, "the pods waited for the replacement: {shown}");
    assert!((live - shown).abs() <= shown / 10.0, "daemon {live} against the API server's {shown}");
    assert!((live - predicted).abs() <= predicted / 10.0, "daemon {live} against simulate's {predicted}");

    let _ = booster.start_kill();
    let _ = booster.wait().await;
    cluster.clean_up().await;
}
