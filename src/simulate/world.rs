//! The in-memory cluster `simulate` runs: Auto Scaling Groups that launch instances which join as
//! Ready nodes after their boot delay, pods placed by a first-fit scheduler, PodDisruptionBudgets
//! checked on eviction, and the counters the report is built from.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde::Serialize;

use super::market::Rng;
use super::scenario::{ClusterTimings, GroupSpec, Scenario, Workload};
use crate::core::{self, GroupName, InstanceId, NodeName, PodClass, Resources, Signal, Snapshot, Timestamp};

/// One line of the timeline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TimelineEntry {
    /// Seconds since the start.
    pub at_seconds: u64,
    /// `aws`, `nth`, `ca` or `booster`.
    pub actor: &'static str,
    /// What it did.
    pub action: String,
    /// The group or node it did it to.
    pub target: String,
    /// Numbers and reasons.
    pub detail: String,
}

/// What happened to pods and nodes, counted over a run.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub(crate) struct Counters {
    /// Pod-seconds that evicted or displaced pods spent unschedulable (Pending without a node).
    pub capacity_gap_pod_seconds: u64,
    /// Ready pods removed while their PodDisruptionBudget allowed no disruption.
    pub pdb_violations: u32,
    /// Successful evictions.
    pub evictions: u32,
    /// Evictions refused by a PodDisruptionBudget.
    pub(crate) evictions_blocked: u32,
    /// Pods that died with their node instead of being evicted.
    pub pods_killed: u32,
    /// Of those, pods on nodes the booster terminated itself.
    pub pods_killed_by_booster: u32,
    /// Nodes whose evictable pods all left through eviction.
    pub drained_nodes: u32,
    /// Pods a budget refused, deleted gracefully before their instance went
    /// (`--interruption-force-at-deadline`).
    pub pods_force_deleted: u32,
    /// Nodes with a notice whose instance went before any of their pods left.
    pub undrained_at_interruption: u32,
    /// Most pods Pending at once.
    pub(crate) peak_pending_pods: u32,
    /// Nodes drained whose instance had a recommendation the market never follows.
    pub(crate) needless_drains: u32,
    /// Market recommendations sent.
    pub(crate) recommendations: u32,
    /// Market interruptions that came.
    pub(crate) interruptions: u32,
}

/// The plotted values at one moment; a new one is taken only when a value changes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Sample {
    /// Seconds since the start.
    pub at_seconds: u64,
    /// Pods without a node, before the scheduler's pass (as the capacity gap counts them).
    pub(crate) pending_pods: u32,
    /// Ready, schedulable (uncordoned) nodes per group, in group-name order.
    pub(crate) ready_nodes: Vec<u32>,
    /// Desired capacity per group, in group-name order.
    pub desired: Vec<u32>,
}

/// An Auto Scaling Group's live state.
#[derive(Debug, Clone)]
pub struct Asg {
    /// Its definition.
    pub spec: GroupSpec,
    /// DesiredCapacity.
    pub desired: u32,
    /// Highest desired seen.
    pub peak_desired: u32,
    next_index: u32,
}

/// An EC2 instance.
#[derive(Debug, Clone)]
pub struct Instance {
    /// Its group.
    pub group: String,
    /// The node it becomes.
    pub node: String,
    /// When it launched.
    pub launched: Timestamp,
    /// When its Node joins Ready.
    pub ready_at: Timestamp,
    /// When a spot interruption ends it.
    pub(crate) ends_at: Option<Timestamp>,
}

/// A Node (it exists from the moment it is Ready).
#[derive(Debug, Clone)]
pub struct SimNode {
    /// Its instance.
    pub instance: String,
    /// Its group.
    pub group: String,
    /// When it joined.
    pub created: Timestamp,
    /// `spec.unschedulable`.
    pub cordoned: bool,
    /// When it was cordoned, as the daemon's watch dates a cordon it saw made.
    pub cordoned_at: Option<Timestamp>,
    /// Allocatable.
    pub allocatable: Resources,
}

/// A pod of a workload.
#[derive(Debug, Clone)]
pub struct SimPod {
    /// UID (unique per incarnation).
    pub uid: String,
    /// Name.
    pub name: String,
    /// Index into the workloads.
    pub(crate) workload: usize,
    /// Bound node.
    pub node: Option<String>,
    /// When it was bound; while Pending, when it was created.
    pub since: Timestamp,
    /// When it was created.
    pub(crate) created: Timestamp,
    /// Whether it replaces a pod that was evicted or lost with its node.
    pub(crate) displaced: bool,
}

/// How an eviction went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Eviction {
    /// The pod is gone; its replacement is Pending.
    Evicted,
    /// A PodDisruptionBudget refused (HTTP 429), named as the API server names it.
    Blocked {
        /// The budget: its workload's name.
        budget: String,
    },
    /// No such pod (HTTP 404): treated as done.
    Gone,
}

/// The whole simulated cluster.
#[derive(Debug, Clone)]
pub struct World {
    /// The current time.
    pub now: Timestamp,
    start: Timestamp,
    /// Cluster timings.
    pub(crate) timings: ClusterTimings,
    /// Groups by name.
    pub groups: BTreeMap<String, Asg>,
    /// Live instances by id.
    pub instances: BTreeMap<String, Instance>,
    /// Nodes by name.
    pub nodes: BTreeMap<String, SimNode>,
    /// Pods by creation sequence.
    pub pods: BTreeMap<u64, SimPod>,
    /// Workloads.
    pub(crate) workloads: Vec<Workload>,
    /// Signals NTH has emitted.
    pub signals: Vec<Signal>,
    /// Timeline.
    pub timeline: Vec<TimelineEntry>,
    /// Counters.
    pub(crate) counters: Counters,
    /// What `simulate --output html` plots.
    pub samples: Vec<Sample>,
    /// Each group's scaling activities that failed, newest first (launches without capacity).
    pub(crate) failed_launches: BTreeMap<String, Vec<core::ScalingActivity>>,
    /// When Auto Scaling first failed to launch for want of capacity.
    pub(crate) first_failed_launch: Option<Timestamp>,
    /// When each node launched after the first signal joined, in order: the replacements, whoever
    /// asked for them.
    pub(crate) replacements_ready: Vec<Timestamp>,
    /// When each instance with a notice got it, until its node's first pod leaves.
    noticed: BTreeMap<String, Timestamp>,
    /// From each notice to its node's first pod leaving (the drain's start as pods see it).
    pub(crate) drain_starts: Vec<Duration>,
    next_pod: u64,
    /// Each group's capacity pool, where the scenario's market names it.
    pub(crate) pools: BTreeMap<String, core::Pool>,
    /// Instances the market recommended, and whether it interrupts them later.
    pub(crate) recommended: BTreeMap<String, bool>,
    /// Picks the node each market recommendation hits.
    rng: Rng,
}

/// How often Auto Scaling retries a launch a pool has no capacity for, each a failed activity.
const LAUNCH_RETRY: Duration = Duration::from_secs(10);

/// The status message Auto Scaling gives a spot launch without capacity.
pub(crate) const NO_SPOT_CAPACITY: &str = "Could not launch Spot Instances. InsufficientInstanceCapacity - There is \
     no Spot capacity available that matches your request. Launching EC2 instance failed.";

impl World {
    /// The cluster at the start of `scenario`: every group at its desired size, every node Ready
    /// (named `<group>-<n>`, oldest first) and every pod placed and Ready.
    pub fn new(scenario: &Scenario) -> World {
        let start = Timestamp::from_millis(0);
        let mut world = World {
            now: start,
            start,
            timings: scenario.cluster.clone(),
            groups: BTreeMap::new(),
            instances: BTreeMap::new(),
            nodes: BTreeMap::new(),
            pods: BTreeMap::new(),
            workloads: scenario.workloads.clone(),
            signals: Vec::new(),
            timeline: Vec::new(),
            counters: Counters::default(),
            samples: Vec::new(),
            failed_launches: BTreeMap::new(),
            first_failed_launch: None,
            replacements_ready: Vec::new(),
            noticed: BTreeMap::new(),
            drain_starts: Vec::new(),
            next_pod: 0,
            pools: scenario
                .market
                .iter()
                .flat_map(|m| m.pools.iter().map(|p| (p.group.clone(), p.pool.clone())))
                .collect(),
            recommended: BTreeMap::new(),
            rng: Rng::new(scenario.market.as_ref().map_or(0, |m| m.seed) ^ 0x5EED),
        };
        for spec in &scenario.groups {
            world.groups.insert(
                spec.name.clone(),
                Asg { spec: spec.clone(), desired: spec.desired, peak_desired: spec.desired, next_index: 1 },
            );
            for k in 0..spec.desired {
                // Older nodes joined earlier: one second apart, before the start.
                let joined = Timestamp::from_millis(-1000 * i64::from(spec.desired - k));
                let id = world.launch(&spec.name, joined);
                world.register(&id, joined);
            }
        }
        for (w, workload) in scenario.workloads.iter().enumerate() {
            for _ in 0..workload.replicas {
                world.create_pod(w, false);
            }
        }
        world.schedule();
        let ready_since = Timestamp::from_millis(-(world.timings.pod_start.as_millis() as i64));
        for pod in world.pods.values_mut() {
            pod.since = ready_since;
        }
        world
    }

    /// When the run started.
    pub(crate) fn start(&self) -> Timestamp {
        self.start
    }

    /// Simulated time since the start.
    pub fn elapsed(&self) -> Duration {
        self.now.since(self.start)
    }

    /// Adds a timeline entry.
    pub fn log(
        &mut self,
        actor: &'static str,
        action: impl Into<String>,
        target: impl Into<String>,
        detail: impl Into<String>,
    ) {
        let at_seconds = self.elapsed().as_secs();
        self.timeline.push(TimelineEntry {
            at_seconds,
            actor,
            action: action.into(),
            target: target.into(),
            detail: detail.into(),
        });
    }

    fn launch(&mut self, group: &str, at: Timestamp) -> String {
        let asg = self.groups.get_mut(group).expect("known group");
        let node = format!("{group}-{}", asg.next_index);
        let id = format!("i-{group}-{:04}", asg.next_index);
        asg.next_index += 1;
        let ready_at = at.plus(asg.spec.boot);
        self.instances
            .insert(id.clone(), Instance { group: group.to_string(), node, launched: at, ready_at, ends_at: None });
        id
    }

    fn register(&mut self, id: &str, at: Timestamp) {
        let inst = &self.instances[id];
        if self.signals.first().is_some_and(|first| inst.launched >= first.observed_at) {
            self.replacements_ready.push(at);
        }
        let allocatable = self.groups[&inst.group].spec.node;
        self.nodes.insert(
            inst.node.clone(),
            SimNode {
                instance: id.to_string(),
                group: inst.group.clone(),
                created: at,
                cordoned: false,
                cordoned_at: None,
                allocatable,
            },
        );
    }

    /// AWS's part of a tick: launch instances up to desired, register those whose boot is over,
    /// end those whose interruption notice ran out (the ASG replaces them on the next tick).
    pub(crate) fn step_aws(&mut self) {
        let ending: Vec<String> = self
            .instances
            .iter()
            .filter(|(_, i)| i.ends_at.is_some_and(|t| t <= self.now))
            .map(|(id, _)| id.clone())
            .collect();
        for id in ending {
            let node = self.instances[&id].node.clone();
            self.log("aws", "instance interrupted", node, id.clone());
            self.remove_instance(&id);
        }
        let groups: Vec<String> = self.groups.keys().cloned().collect();
        for group in groups {
            let live = self.instances.values().filter(|i| i.group == group).count() as u32;
            let desired = self.groups[&group].desired;
            if live < desired && self.groups[&group].spec.out_of_capacity(self.elapsed()) {
                self.fail_launch(&group, desired - live);
                continue;
            }
            for _ in live..desired {
                let id = self.launch(&group, self.now);
                let node = self.instances[&id].node.clone();
                self.log("aws", "instance launched", node, format!("{id}, desired {desired}"));
            }
        }
        let joining: Vec<String> = self
            .instances
            .iter()
            .filter(|(_, i)| i.ready_at <= self.now && !self.nodes.contains_key(&i.node))
            .map(|(id, _)| id.clone())
            .collect();
        for id in joining {
            self.register(&id, self.now);
            let node = self.instances[&id].node.clone();
            self.log("aws", "node Ready", node, id);
        }
    }

    /// A launch the pool has no capacity for: a failed scaling activity, as Auto Scaling retries.
    fn fail_launch(&mut self, group: &str, missing: u32) {
        let now = self.now;
        let list = self.failed_launches.entry(group.to_string()).or_default();
        if list.first().is_some_and(|last| now.since(last.started) < LAUNCH_RETRY) {
            return;
        }
        // A streak of retries is one line of the timeline.
        let streak = list.first().is_some_and(|last| now.since(last.started) <= LAUNCH_RETRY * 2);
        let id = format!("{group}-activity-{}", list.len() + 1);
        self.first_failed_launch.get_or_insert(now);
        list.insert(
            0,
            core::ScalingActivity {
                group: group.into(),
                id,
                status_code: "Failed".into(),
                status_message: Some(NO_SPOT_CAPACITY.into()),
                description: format!("Launching a new EC2 instance.  Status Reason: {NO_SPOT_CAPACITY}"),
                started: now,
            },
        );
        if !streak {
            let detail = format!("InsufficientInstanceCapacity, {missing} missing; retried every 10 s");
            self.log("aws", "launch failed", group, detail);
        }
    }

    /// Sets a group's desired capacity, clamped to [min, max].
    pub(crate) fn set_desired(&mut self, group: &str, desired: u32) -> u32 {
        let asg = self.groups.get_mut(group).expect("known group");
        asg.desired = desired.clamp(asg.spec.min, asg.spec.max);
        asg.peak_desired = asg.peak_desired.max(asg.desired);
        asg.desired
    }

    /// Terminates an instance, decrementing desired when asked and allowed (AWS refuses to go
    /// below MinSize; the ASG then replaces the instance).
    pub fn terminate(&mut self, id: &str, decrement: bool) -> bool {
        let Some(inst) = self.instances.get(id) else { return false };
        if self.pods_on(&inst.node).is_empty() {
            self.note_drained_instance(id);
        }
        let Some(inst) = self.instances.get(id) else { return false };
        let group = inst.group.clone();
        let asg = self.groups.get_mut(&group).expect("known group");
        let decremented = decrement && asg.desired > asg.spec.min;
        if decremented {
            asg.desired -= 1;
        }
        let killed = self.counters.pods_killed;
        self.remove_instance(id);
        self.counters.pods_killed_by_booster += self.counters.pods_killed - killed;
        decremented
    }

    fn remove_instance(&mut self, id: &str) {
        let Some(inst) = self.instances.remove(id) else { return };
        if self.nodes.remove(&inst.node).is_none() {
            return;
        }
        let on_node: Vec<u64> =
            self.pods.iter().filter(|(_, p)| p.node.as_deref() == Some(inst.node.as_str())).map(|(k, _)| *k).collect();
        if self.noticed.remove(id).is_some() && !on_node.is_empty() {
            self.counters.undrained_at_interruption += 1;
        }
        for seq in on_node {
            if self.disruption_breaks_budget(seq) {
                self.counters.pdb_violations += 1;
            }
            self.counters.pods_killed += 1;
            self.replace_pod(seq);
        }
    }

    /// Counts `node`'s drain as needless when its instance had a recommendation the market never
    /// follows with an interruption.
    pub(crate) fn note_drained(&mut self, node: &str) {
        if let Some(id) = self.nodes.get(node).map(|n| n.instance.clone()) {
            self.note_drained_instance(&id);
        }
    }

    fn note_drained_instance(&mut self, id: &str) {
        if self.recommended.insert(id.to_string(), true) == Some(false) {
            // Counted once; the instance is going.
            self.counters.needless_drains += 1;
        }
    }

    /// The node a market recommendation hits in `group`: a live, schedulable node whose instance
    /// was never recommended nor noticed, drawn from the run's generator (EC2 recommends an
    /// instance once).
    pub(crate) fn pick_for_recommendation(&mut self, group: &str) -> Option<String> {
        let candidates: Vec<String> = self
            .nodes
            .iter()
            .filter(|(_, n)| n.group == group && !n.cordoned && !self.recommended.contains_key(&n.instance))
            .filter(|(_, n)| !self.interrupted(&n.instance))
            .map(|(name, _)| name.clone())
            .collect();
        if candidates.is_empty() {
            return None;
        }
        let k = self.rng.below(candidates.len());
        Some(candidates[k].clone())
    }

    /// Cordons a node.
    pub fn cordon(&mut self, node: &str) -> bool {
        let now = self.now;
        match self.nodes.get_mut(node) {
            Some(n) if !n.cordoned => {
                n.cordoned = true;
                n.cordoned_at = Some(now);
                true
            }
            _ => false,
        }
    }

    /// Makes a node schedulable again.
    pub(crate) fn uncordon(&mut self, node: &str) {
        if let Some(n) = self.nodes.get_mut(node) {
            n.cordoned = false;
            n.cordoned_at = None;
        }
    }

    /// Whether the instance has an interruption notice (EC2 marked its spot request).
    pub(crate) fn interrupted(&self, id: &str) -> bool {
        self.instances.get(id).is_some_and(|i| i.ends_at.is_some())
    }

    /// Marks an instance to end after its interruption notice.
    pub(crate) fn interrupt(&mut self, id: &str, notice: Duration) {
        if let Some(inst) = self.instances.get_mut(id) {
            if inst.ends_at.is_none() {
                self.noticed.insert(id.to_string(), self.now);
            }
            inst.ends_at.get_or_insert(self.now.plus(notice));
        }
    }

    fn create_pod(&mut self, workload: usize, displaced: bool) {
        let seq = self.next_pod;
        self.next_pod += 1;
        let name = format!("{}-{seq}", self.workloads[workload].name);
        self.pods.insert(
            seq,
            SimPod {
                uid: format!("uid-{seq}"),
                name,
                workload,
                node: None,
                since: self.now,
                created: self.now,
                displaced,
            },
        );
    }

    fn replace_pod(&mut self, seq: u64) {
        if let Some(pod) = self.pods.remove(&seq) {
            self.create_pod(pod.workload, true);
        }
    }

    /// Whether the pod is bound and past its start-up time.
    pub(crate) fn is_ready(&self, pod: &SimPod) -> bool {
        pod.node.is_some() && self.now >= pod.since.plus(self.timings.pod_start)
    }

    fn healthy(&self, workload: usize) -> u32 {
        self.pods.values().filter(|p| p.workload == workload && self.is_ready(p)).count() as u32
    }

    /// Removing this pod now would take its workload below its budget.
    fn disruption_breaks_budget(&self, seq: u64) -> bool {
        let pod = &self.pods[&seq];
        let Some(pdb) = self.workloads[pod.workload].pdb else { return false };
        self.is_ready(pod) && self.healthy(pod.workload) <= pdb.min_healthy
    }

    /// Evicts a pod through the (simulated) Eviction API, which checks its budget.
    pub fn evict(&mut self, uid: &str) -> Eviction {
        let Some(seq) = self.pod_seq(uid) else { return Eviction::Gone };
        if self.disruption_breaks_budget(seq) {
            self.counters.evictions_blocked += 1;
            let budget = self.workloads[self.pods[&seq].workload].name.clone();
            return Eviction::Blocked { budget };
        }
        self.counters.evictions += 1;
        self.note_drain_start(seq);
        self.replace_pod(seq);
        Eviction::Evicted
    }

    /// Deletes a pod outright, whatever its budget says (a DELETE, not an eviction). Returns
    /// whether it was there.
    pub(crate) fn delete_pod(&mut self, uid: &str) -> bool {
        let Some(seq) = self.pod_seq(uid) else { return false };
        self.counters.pods_force_deleted += 1;
        self.note_drain_start(seq);
        self.replace_pod(seq);
        true
    }

    /// The first pod to leave a node with a notice starts its drain: the time from the notice is
    /// kept for the report.
    fn note_drain_start(&mut self, seq: u64) {
        let Some(node) = self.pods[&seq].node.as_deref() else { return };
        let Some(instance) = self.nodes.get(node).map(|n| n.instance.as_str()) else { return };
        if let Some(noticed) = self.noticed.remove(instance) {
            self.drain_starts.push(self.now.since(noticed));
        }
    }

    /// The live pod with this UID: a UID names its creation sequence (`uid-<seq>`).
    fn pod_seq(&self, uid: &str) -> Option<u64> {
        let seq = uid.strip_prefix("uid-")?.parse().ok()?;
        self.pods.get(&seq).filter(|p| p.uid == uid).map(|_| seq)
    }

    /// Every node's bound pods, in creation order: one walk over the pods for a whole snapshot.
    pub(crate) fn pods_by_node(&self) -> BTreeMap<&str, Vec<&SimPod>> {
        let mut by_node: BTreeMap<&str, Vec<&SimPod>> = BTreeMap::new();
        for pod in self.pods.values() {
            if let Some(node) = pod.node.as_deref() {
                by_node.entry(node).or_default().push(pod);
            }
        }
        by_node
    }

    /// Pods bound to `node`, in creation order.
    pub(crate) fn pods_on(&self, node: &str) -> Vec<&SimPod> {
        self.pods.values().filter(|p| p.node.as_deref() == Some(node)).collect()
    }

    /// Pending pods that have waited at least `for_at_least`.
    pub(crate) fn pending_since(&self, for_at_least: Duration) -> Vec<&SimPod> {
        self.pods.values().filter(|p| p.node.is_none() && self.now.since(p.since) >= for_at_least).collect()
    }

    /// First-fit scheduler: Pending pods in creation order onto the first schedulable node (oldest
    /// first) of the first group of their workload that has room.
    pub fn schedule(&mut self) {
        let mut free: BTreeMap<&str, Resources> =
            self.nodes.iter().map(|(name, n)| (name.as_str(), n.allocatable)).collect();
        for pod in self.pods.values() {
            if let Some(node) = &pod.node {
                if let Some(f) = free.get_mut(node.as_str()) {
                    *f = f.saturating_sub(self.workloads[pod.workload].requests);
                }
            }
        }
        let mut by_group: BTreeMap<&str, Vec<(&Timestamp, &str)>> = BTreeMap::new();
        for (name, n) in &self.nodes {
            if !n.cordoned {
                by_group.entry(n.group.as_str()).or_default().push((&n.created, name.as_str()));
            }
        }
        for nodes in by_group.values_mut() {
            nodes.sort();
        }
        let mut bindings = Vec::new();
        for (seq, pod) in self.pods.iter().filter(|(_, p)| p.node.is_none()) {
            let workload = &self.workloads[pod.workload];
            let target = workload
                .groups
                .iter()
                .flat_map(|g| by_group.get(g.as_str()).into_iter().flatten())
                .map(|(_, name)| *name)
                .find(|name| workload.requests.fits_in(free[name]));
            if let Some(name) = target {
                let f = free.get_mut(name).expect("known node");
                *f = f.saturating_sub(workload.requests);
                bindings.push((*seq, name.to_string()));
            }
        }
        for (seq, node) in bindings {
            let pod = self.pods.get_mut(&seq).expect("known pod");
            pod.node = Some(node);
            pod.since = self.now;
        }
    }

    /// Counts one tick of `dt` for every displaced pod still Pending.
    pub(crate) fn account(&mut self, dt: Duration) {
        let pending = self.pods.values().filter(|p| p.node.is_none()).count() as u32;
        let displaced = self.pods.values().filter(|p| p.node.is_none() && p.displaced).count() as u64;
        self.counters.capacity_gap_pod_seconds += displaced * dt.as_secs();
        self.counters.peak_pending_pods = self.counters.peak_pending_pods.max(pending);
    }

    /// Records the plotted values when one changed since the last sample, or when `force`d (the
    /// last moment of a run, so every line reaches the end).
    pub fn sample(&mut self, force: bool) {
        let index: BTreeMap<&str, usize> = self.groups.keys().enumerate().map(|(i, g)| (g.as_str(), i)).collect();
        let mut ready_nodes = vec![0u32; index.len()];
        for node in self.nodes.values().filter(|n| !n.cordoned) {
            if let Some(i) = index.get(node.group.as_str()) {
                ready_nodes[*i] += 1;
            }
        }
        let sample = Sample {
            at_seconds: self.elapsed().as_secs(),
            pending_pods: self.pods.values().filter(|p| p.node.is_none()).count() as u32,
            ready_nodes,
            desired: self.groups.values().map(|g| g.desired).collect(),
        };
        let changed = self.samples.last().is_none_or(|last| {
            (last.pending_pods, &last.ready_nodes, &last.desired)
                != (sample.pending_pods, &sample.ready_nodes, &sample.desired)
        });
        if changed || force {
            self.samples.push(sample);
        }
    }

    /// The core's view of this cluster.
    pub fn snapshot(&self, ledger: &core::BoostLedger) -> Snapshot {
        let mut snapshot = Snapshot { ledger: ledger.clone(), signals: self.signals.clone(), ..Snapshot::default() };
        for (name, asg) in &self.groups {
            snapshot.groups.insert(
                GroupName::from(name.as_str()),
                core::Group {
                    name: name.as_str().into(),
                    min: asg.spec.min,
                    max: asg.spec.max,
                    desired: asg.desired,
                    node_allocatable: Some(asg.spec.node),
                    ca: Some(core::CaGroupView {
                        cloud_provider_target: asg.desired,
                        backoff: None,
                        healthy: true,
                        ready: None,
                    }),
                    capacity_rebalance: false,
                    az_rebalance: false,
                    members: None,
                    excluded: false,
                    foreign: false,
                    eks_node_group: None,
                    fallbacks: Vec::new(),
                    tenant_namespace: None,
                    launch: Default::default(),
                    rebalance_policy: None,
                },
            );
        }
        let mut by_node = self.pods_by_node();
        for (name, n) in &self.nodes {
            let pods =
                by_node.remove(name.as_str()).unwrap_or_default().into_iter().map(|p| self.core_pod(p)).collect();
            snapshot.nodes.insert(
                NodeName::from(name.as_str()),
                core::Node {
                    name: name.as_str().into(),
                    instance: Some(InstanceId::from(n.instance.as_str())),
                    group: Some(n.group.as_str().into()),
                    ready: true,
                    cordoned: n.cordoned,
                    deleting_by_ca: false,
                    cordoned_since: n.cordoned_at,
                    scale_down_disabled: false,
                    opted_out: false,
                    created: n.created,
                    allocatable: n.allocatable,
                    pods,
                    internal_ips: Vec::new(),
                    pods_known: true,
                },
            );
        }
        snapshot
    }

    /// The core's view of a pod.
    pub(crate) fn core_pod(&self, pod: &SimPod) -> core::Pod {
        let w = &self.workloads[pod.workload];
        core::Pod {
            uid: pod.uid.as_str().into(),
            namespace: "default".into(),
            name: pod.name.as_str().into(),
            requests: w.requests,
            class: if w.critical { PodClass::Critical } else { PodClass::Ordinary },
            opt_out: None,
            bare: false,
            owner: Some(Self::owner_of(w)),
            grace_seconds: 30,
        }
    }

    /// The UID of a workload's controller, as its pods name it.
    pub(crate) fn owner_of(workload: &Workload) -> core::OwnerUid {
        format!("owner-{}", workload.name).as_str().into()
    }

    /// The pods without a node, and those bound in the last minute with when, as the pod watch
    /// shows them ([`crate::ports::ClusterView::pending_pods`]). The scheduler binds at the end
    /// of a tick: a pod bound in the tick it was created was Pending for that tick, as
    /// [`World::account`] counts it.
    pub(crate) fn pending_pods(&self, tick: Duration) -> Vec<core::PendingPod> {
        let recent = Duration::from_secs(60);
        self.pods
            .values()
            .filter(|p| p.node.is_none() || self.now.since(p.since) <= recent)
            .map(|p| core::PendingPod {
                uid: p.uid.as_str().into(),
                owner: Self::owner_of(&self.workloads[p.workload]),
                since: p.created,
                ended: p.node.is_some().then(|| p.since.plus(tick)),
            })
            .collect()
    }

    /// Live nodes of a group, oldest first.
    pub(crate) fn nodes_of(&self, group: &str) -> Vec<String> {
        let mut nodes: Vec<(&Timestamp, &String)> =
            self.nodes.iter().filter(|(_, n)| n.group == group).map(|(name, n)| (&n.created, name)).collect();
        nodes.sort();
        nodes.into_iter().map(|(_, name)| name.clone()).collect()
    }

    /// Instances launched whose nodes have not joined yet, per group.
    pub(crate) fn upcoming(&self, group: &str) -> u32 {
        let asg = &self.groups[group];
        let registered = self.nodes.values().filter(|n| n.group == group).count() as u32;
        asg.desired.saturating_sub(registered)
    }

    /// Nodes already named by a signal of `kind`.
    pub fn signalled(&self, kind: core::SignalKind) -> BTreeSet<String> {
        self.signals.iter().filter(|s| s.kind == kind).map(|s| s.node.to_string()).collect()
    }
}
