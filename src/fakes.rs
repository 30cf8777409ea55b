//! In-memory implementations of the ports, for tests and `simulate`: they record every call and
//! accept injected faults.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::core::{GroupName, InstanceFacts, InstanceId, InstanceLifecycle, Node, NodeName, PendingPod, Pod, Signal};
use crate::ports::{
    AutoScaling, AwsError, AwsFailure, ClusterState, ClusterView, ClusterWriteError, ClusterWrites, DesiredWrite,
    EventSink, EvictOutcome, FailureKind, GroupDescription, GroupInstance, Guard, NodeEvent, PodRef, TagFilter,
    TerminateOutcome, WriteOutcome, WriteOutcomes,
};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A cluster view the test edits.
#[derive(Debug, Clone, Default)]
pub struct InMemoryCluster(Arc<Mutex<Option<ClusterState>>>, Arc<Mutex<Vec<PendingPod>>>);

impl InMemoryCluster {
    /// A synced, empty cluster.
    pub fn synced() -> Self {
        InMemoryCluster(Arc::new(Mutex::new(Some(ClusterState::default()))), Arc::default())
    }

    /// Sets the unbound pods the watch shows.
    pub fn set_pending(&self, pending: Vec<PendingPod>) {
        *lock(&self.1) = pending;
    }

    /// Adds or replaces a node.
    pub fn put_node(&self, node: Node) {
        if let Some(state) = lock(&self.0).as_mut() {
            state.nodes.insert(node.name.clone(), node);
        }
    }

    /// Removes a node.
    pub fn remove_node(&self, name: &str) {
        if let Some(state) = lock(&self.0).as_mut() {
            state.nodes.remove(&name.into());
        }
    }

    /// Adds a signal, first seen when it was observed.
    pub fn signal(&self, signal: Signal) {
        if let Some(state) = lock(&self.0).as_mut() {
            state.first_seen.entry(signal.instance.clone()).or_insert(signal.observed_at);
            state.signals.push(signal);
        }
    }

    /// Nodes carrying the scale-down protection.
    pub fn protected(&self) -> BTreeSet<NodeName> {
        lock(&self.0).as_ref().map(|s| s.protected.clone()).unwrap_or_default()
    }

    /// Changes the state in place.
    pub fn edit<T>(&self, f: impl FnOnce(&mut ClusterState) -> T) -> Option<T> {
        lock(&self.0).as_mut().map(f)
    }
}

impl ClusterView for InMemoryCluster {
    /// As the watches show it: pods only on the nodes a view carries them for
    /// ([`crate::ports::pods_in_view`]); the rest stay in the store for [`Self::attach_pods`].
    fn current(&self) -> Option<ClusterState> {
        let mut state = lock(&self.0).clone()?;
        state.prune_pods();
        Some(state)
    }

    fn attach_pods(&self, nodes: &mut BTreeMap<NodeName, Node>, names: &BTreeSet<NodeName>) {
        let store = lock(&self.0);
        let Some(state) = store.as_ref() else { return };
        for name in names {
            if let (Some(node), Some(held)) = (nodes.get_mut(name).filter(|n| !n.pods_known), state.nodes.get(name)) {
                node.pods.clone_from(&held.pods);
                node.pods_known = true;
            }
        }
    }

    fn pending_pods(&self) -> Vec<PendingPod> {
        lock(&self.1).clone()
    }
}

/// The in-memory ledger `simulate` keeps its boosts in; tests inject save failures through it.
pub use crate::ports::MemoryLedger;

/// One recorded write to [`FakeClusterWrites`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClusterCall {
    /// `cordon`.
    Cordon(NodeName),
    /// `uncordon`.
    Uncordon(NodeName),
    /// `evict`, with what the fake answered.
    Evict(PodRef, Result<EvictOutcome, String>),
    /// `protect_from_scale_down`.
    Protect(NodeName, bool),
    /// `live_pods`.
    LivePods(NodeName),
    /// `delete_pod`, with the grace period given.
    DeletePod(PodRef, u32),
    /// `readmit_to_load_balancers`.
    Readmit(NodeName),
}

#[derive(Debug, Default)]
struct FakeWritesState {
    calls: Vec<ClusterCall>,
    /// Pods (by UID) whose eviction a PodDisruptionBudget refuses.
    blocked: BTreeSet<String>,
    /// Pods (by UID) evicted but left in place, as if their grace period were long.
    lingering: BTreeSet<String>,
    fail_evictions: bool,
    fail_cordons: bool,
    fail_pod_reads: bool,
    /// Pods bound to a node that the view has not shown yet (a watch behind the API server).
    unwatched: BTreeMap<NodeName, Vec<Pod>>,
    /// Pods (by UID) whose eviction call never answers, as with a stalled API server.
    stalled: BTreeSet<String>,
    /// Nodes whose cordon call hangs without an answer.
    stalled_cordons: BTreeSet<NodeName>,
}

/// Cluster writes applied to an [`InMemoryCluster`]: cordon marks the node, an accepted eviction
/// removes the pod (as with a zero grace period), protection is remembered.
#[derive(Debug, Clone)]
pub struct FakeClusterWrites {
    cluster: InMemoryCluster,
    state: Arc<Mutex<FakeWritesState>>,
}

impl FakeClusterWrites {
    /// Writes that act on `cluster`.
    pub fn new(cluster: &InMemoryCluster) -> Self {
        FakeClusterWrites { cluster: cluster.clone(), state: Arc::default() }
    }

    /// Every write so far.
    pub fn calls(&self) -> Vec<ClusterCall> {
        lock(&self.state).calls.clone()
    }

    /// Makes a PodDisruptionBudget refuse (or allow again) the pod's eviction.
    pub fn block(&self, uid: &str, blocked: bool) {
        let mut s = lock(&self.state);
        if blocked {
            s.blocked.insert(uid.to_string());
        } else {
            s.blocked.remove(uid);
        }
    }

    /// Makes the pod stay after its eviction is accepted (a long grace period).
    pub fn linger(&self, uid: &str) {
        lock(&self.state).lingering.insert(uid.to_string());
    }

    /// Makes the pod's eviction call hang without an answer.
    pub fn stall(&self, uid: &str) {
        lock(&self.state).stalled.insert(uid.to_string());
    }

    /// Makes every eviction fail with a server error (or succeed again).
    pub fn fail_evictions(&self, fail: bool) {
        lock(&self.state).fail_evictions = fail;
    }

    /// Makes the node's cordon call hang without an answer.
    pub fn stall_cordon(&self, node: &str) {
        lock(&self.state).stalled_cordons.insert(NodeName::from(node));
    }

    /// Makes every cordon fail with a server error (or succeed again).
    pub fn fail_cordons(&self, fail: bool) {
        lock(&self.state).fail_cordons = fail;
    }

    /// Binds `pod` to `node` where only a live read sees it: the view's watch has not caught up.
    pub fn bind_unwatched(&self, node: &str, pod: Pod) {
        lock(&self.state).unwatched.entry(node.into()).or_default().push(pod);
    }

    /// Makes every live read of a node's pods fail with a server error (or succeed again).
    pub fn fail_pod_reads(&self, fail: bool) {
        lock(&self.state).fail_pod_reads = fail;
    }

    /// UIDs of the pods evicted so far.
    pub fn evicted(&self) -> Vec<String> {
        lock(&self.state)
            .calls
            .iter()
            .filter_map(|c| match c {
                ClusterCall::Evict(pod, Ok(EvictOutcome::Evicted)) => Some(pod.uid.clone()),
                _ => None,
            })
            .collect()
    }
}

impl ClusterWrites for FakeClusterWrites {
    async fn live_pods(&self, node: &NodeName) -> Result<Vec<Pod>, ClusterWriteError> {
        let fail = {
            let mut st = lock(&self.state);
            st.calls.push(ClusterCall::LivePods(node.clone()));
            st.fail_pod_reads
        };
        if fail {
            return Err(ClusterWriteError::ListPods { node: node.clone(), source: "500 Internal Server Error".into() });
        }
        let mut pods = self.cluster.edit(|s| s.nodes.get(node).map(|n| n.pods.clone())).flatten().unwrap_or_default();
        pods.extend(lock(&self.state).unwatched.get(node).into_iter().flatten().cloned());
        Ok(pods)
    }

    async fn uncordon(&self, node: &NodeName) -> Result<(), ClusterWriteError> {
        lock(&self.state).calls.push(ClusterCall::Uncordon(node.clone()));
        self.cluster.edit(|s| {
            if let Some(n) = s.nodes.get_mut(node) {
                n.cordoned = false;
            }
        });
        Ok(())
    }

    async fn cordon(&self, node: &NodeName) -> Result<(), ClusterWriteError> {
        let (fail, stalled) = {
            let mut st = lock(&self.state);
            st.calls.push(ClusterCall::Cordon(node.clone()));
            (st.fail_cordons, st.stalled_cordons.contains(node))
        };
        if stalled {
            return std::future::pending().await;
        }
        if fail {
            return Err(ClusterWriteError::Cordon { node: node.clone(), source: "500 Internal Server Error".into() });
        }
        self.cluster.edit(|s| {
            if let Some(n) = s.nodes.get_mut(node) {
                n.cordoned = true;
            }
        });
        Ok(())
    }

    async fn evict(&self, pod: &PodRef) -> Result<EvictOutcome, ClusterWriteError> {
        if lock(&self.state).stalled.contains(&pod.uid) {
            return std::future::pending().await;
        }
        let mut st = lock(&self.state);
        let outcome = if st.fail_evictions {
            Err("500 Internal Server Error".to_string())
        } else if st.blocked.contains(&pod.uid) {
            Ok(EvictOutcome::Blocked { budget: Some(format!("{}-budget", pod.namespace)) })
        } else {
            let linger = st.lingering.contains(&pod.uid);
            let mut unwatched = false;
            for pods in st.unwatched.values_mut() {
                unwatched |= pods.iter().any(|p| p.uid.as_str() == pod.uid);
                if !linger {
                    pods.retain(|p| p.uid.as_str() != pod.uid);
                }
            }
            let found = unwatched
                || self
                    .cluster
                    .edit(|s| {
                        let mut found = false;
                        for n in s.nodes.values_mut() {
                            let before = n.pods.len();
                            if !linger {
                                n.pods.retain(|p| p.uid.as_str() != pod.uid);
                            }
                            found |= n.pods.len() != before || n.pods.iter().any(|p| p.uid.as_str() == pod.uid);
                        }
                        found
                    })
                    .unwrap_or(false);
            Ok(if found { EvictOutcome::Evicted } else { EvictOutcome::Gone })
        };
        st.calls.push(ClusterCall::Evict(pod.clone(), outcome.clone()));
        outcome.map_err(|e| ClusterWriteError::Evict { pod: pod.clone(), source: e.into() })
    }

    async fn delete_pod(&self, pod: &PodRef, grace_seconds: u32) -> Result<(), ClusterWriteError> {
        lock(&self.state).calls.push(ClusterCall::DeletePod(pod.clone(), grace_seconds));
        self.cluster.edit(|s| s.nodes.values_mut().for_each(|n| n.pods.retain(|p| p.uid.as_str() != pod.uid)));
        Ok(())
    }

    async fn readmit_to_load_balancers(&self, node: &NodeName) -> Result<(), ClusterWriteError> {
        lock(&self.state).calls.push(ClusterCall::Readmit(node.clone()));
        Ok(())
    }

    async fn protect_from_scale_down(&self, node: &NodeName, protect: bool) -> Result<(), ClusterWriteError> {
        lock(&self.state).calls.push(ClusterCall::Protect(node.clone(), protect));
        self.cluster.edit(|s| {
            if protect {
                s.protected.insert(node.clone());
            } else {
                s.protected.remove(node);
            }
            // Both annotations go on and come off together, as the adapter writes them.
            if let Some(n) = s.nodes.get_mut(node) {
                n.scale_down_disabled = protect;
            }
        });
        Ok(())
    }
}

/// Events kept in memory, each publish taking as long as an API round trip is set to.
#[derive(Debug, Clone, Default)]
pub struct RecordedEvents {
    told: Arc<Mutex<Vec<NodeEvent>>>,
    round_trip: Arc<Mutex<std::time::Duration>>,
    /// Publishes in flight now, and the most at once so far.
    in_flight: Arc<Mutex<(usize, usize)>>,
}

impl RecordedEvents {
    /// Reasons of the Events about `node`, in order.
    pub fn reasons_for(&self, node: &str) -> Vec<&'static str> {
        lock(&self.told).iter().filter(|e| e.node.as_str() == node).map(|e| e.reason.as_str()).collect()
    }

    /// Notes of the Events about `node`, in order.
    pub fn notes_for(&self, node: &str) -> Vec<String> {
        lock(&self.told).iter().filter(|e| e.node.as_str() == node).map(|e| e.note.clone()).collect()
    }

    /// Every Event published so far.
    pub fn count(&self) -> usize {
        lock(&self.told).len()
    }

    /// From now on each publish takes `round_trip` (of Tokio's time) before it is recorded.
    pub fn taking(&self, round_trip: std::time::Duration) {
        *lock(&self.round_trip) = round_trip;
    }

    /// The most publishes that were in flight at once.
    pub fn most_in_flight(&self) -> usize {
        lock(&self.in_flight).1
    }
}

impl EventSink for RecordedEvents {
    async fn publish(&self, event: NodeEvent) {
        {
            let mut at_once = lock(&self.in_flight);
            at_once.0 += 1;
            at_once.1 = at_once.1.max(at_once.0);
        }
        let round_trip = *lock(&self.round_trip);
        if !round_trip.is_zero() {
            tokio::time::sleep(round_trip).await;
        }
        lock(&self.told).push(event);
        lock(&self.in_flight).0 -= 1;
    }
}

/// One recorded call to [`FakeAutoScaling`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AsgCall {
    /// `describe_groups`.
    Describe(Vec<GroupName>),
    /// `raise_desired`.
    Raise(Vec<DesiredWrite>),
    /// `terminate_instance`.
    Terminate(InstanceId, bool),
    /// `suspend_az_rebalance` (true: suspend).
    AzRebalance(GroupName, bool),
    /// `scaling_activities`.
    Activities(GroupName),
    /// `lower_unlaunched`.
    Lower(Vec<DesiredWrite>),
}

#[derive(Debug, Default)]
struct FakeAsgState {
    groups: BTreeMap<GroupName, GroupDescription>,
    tags: BTreeMap<GroupName, BTreeMap<String, String>>,
    calls: Vec<AsgCall>,
    throttle_next: u32,
    fail_terminations: u32,
    apply_then_fail: u32,
    /// Writes sent so far (desired capacity raised, instances terminated), and the one (1-based)
    /// whose answer is lost after it applied, with the re-read after it failing.
    writes_sent: u32,
    lose_write: Option<u32>,
    fail_describes: u32,
    on_demand: BTreeSet<InstanceId>,
    dns_names: BTreeMap<InstanceId, String>,
    not_in_ec2: BTreeSet<InstanceId>,
    launched: BTreeMap<InstanceId, crate::core::Timestamp>,
    pools: BTreeMap<InstanceId, crate::core::Pool>,
    scheduled: BTreeMap<InstanceId, crate::core::Timestamp>,
    interrupted: BTreeSet<InstanceId>,
    interruption_lookups: usize,
    instance_lookups: usize,
    group_lookups: usize,
    activities: BTreeMap<GroupName, Vec<crate::core::ScalingActivity>>,
    /// How long a raise's writes apply after its guard's read (none: at once, atomically).
    write_latency: std::time::Duration,
    /// Instances each group owes: terminated without decrement, relaunched by [`FakeAutoScaling::relaunch`].
    owed: BTreeMap<GroupName, u32>,
    /// Groups whose launches fail (since a failed launch, until they launch again): they owe on.
    dry: BTreeSet<GroupName>,
    relaunched: u32,
}

/// The cluster the fakes' groups belong to (their `kubernetes.io/cluster/<name>` tag) and the
/// fake contexts serve.
pub const CLUSTER: &str = "test-cluster";

/// Auto Scaling in memory, with the same guards as the real adapter.
#[derive(Debug, Clone, Default)]
pub struct FakeAutoScaling(Arc<Mutex<FakeAsgState>>);

impl FakeAutoScaling {
    /// Adds a group of `desired` (min 0) with no instances, tagged as [`CLUSTER`]'s, as a
    /// cluster's groups are.
    pub fn with_group(self, name: &str, desired: u32, max: u32) -> Self {
        self.with_cluster_group(name, CLUSTER, desired, max)
    }

    /// Adds a group of `desired` (min 0) with no instances, tagged as `cluster`'s.
    pub fn with_cluster_group(self, name: &str, cluster: &str, desired: u32, max: u32) -> Self {
        lock(&self.0)
            .tags
            .entry(name.into())
            .or_default()
            .insert(format!("kubernetes.io/cluster/{cluster}"), "owned".into());
        lock(&self.0).groups.insert(
            name.into(),
            GroupDescription {
                name: name.into(),
                min: 0,
                max,
                desired,
                instances: Vec::new(),
                capacity_rebalance: false,
                az_rebalance: false,
                tags: BTreeMap::new(),
                launch: Default::default(),
            },
        );
        self
    }

    /// Tags a group (for discovery by tag filters).
    pub fn with_tag(self, group: &str, key: &str, value: &str) -> Self {
        lock(&self.0).tags.entry(group.into()).or_default().insert(key.into(), value.into());
        self
    }

    /// The group's tags.
    pub fn tags(&self, group: &str) -> BTreeMap<String, String> {
        lock(&self.0).tags.get(&GroupName::from(group)).cloned().unwrap_or_default()
    }

    /// Whether the group's `AZRebalance` process is active.
    pub fn az_rebalance(&self, group: &str) -> bool {
        lock(&self.0).groups.get(&GroupName::from(group)).is_some_and(|g| g.az_rebalance)
    }

    /// Leaves Auto Scaling's `AZRebalance` process active on the group, as AWS does by default
    /// (the fake's groups otherwise have it suspended).
    pub fn with_az_rebalance(self, name: &str) -> Self {
        if let Some(g) = lock(&self.0).groups.get_mut(&GroupName::from(name)) {
            g.az_rebalance = true;
        }
        self
    }

    /// Adds an instance to a group (in service, healthy).
    pub fn with_instance(self, group: &str, instance: &str) -> Self {
        lock(&self.0)
            .groups
            .get_mut(&GroupName::from(group))
            .expect("known group")
            .instances
            .push(GroupInstance { id: instance.into(), lifecycle_state: "InService".into() });
        self
    }

    /// Makes the next `n` terminations fail as a server error.
    pub fn fail_terminations(&self, n: u32) {
        lock(&self.0).fail_terminations = n;
    }

    /// Every call so far.
    pub fn calls(&self) -> Vec<AsgCall> {
        lock(&self.0).calls.clone()
    }

    /// A group's desired capacity.
    pub fn desired(&self, name: &str) -> u32 {
        lock(&self.0).groups[&GroupName::from(name)].desired
    }

    /// Sets a group's desired capacity, as another writer would.
    pub fn set_desired(&self, name: &str, desired: u32) {
        lock(&self.0).groups.get_mut(&GroupName::from(name)).expect("known group").desired = desired;
    }

    /// Makes the next `n` writes apply and then answer a server error (the answer was lost).
    pub fn apply_then_fail_next(&self, n: u32) {
        lock(&self.0).apply_then_fail = n;
    }

    /// Makes the `nth` write from now on (1-based; a desired capacity raised or an instance
    /// terminated) apply and then answer a server error, and the one describe after it fail: the
    /// answer is lost and re-reading cannot tell at once.
    pub fn lose_answer_of_write(&self, nth: u32) {
        let mut s = lock(&self.0);
        s.lose_write = Some(s.writes_sent + nth);
    }

    /// Writes sent so far (desired capacity raised, instances terminated).
    pub fn writes_sent(&self) -> u32 {
        lock(&self.0).writes_sent
    }

    /// Deletes a group, as its owner would; nodes it held may linger.
    pub fn delete_group(&self, name: &str) {
        lock(&self.0).groups.remove(&GroupName::from(name));
    }

    /// A group's instances.
    pub fn instances(&self, group: &str) -> Vec<InstanceId> {
        lock(&self.0)
            .groups
            .get(&GroupName::from(group))
            .map(|g| g.instances.iter().map(|i| i.id.clone()).collect())
            .unwrap_or_default()
    }

    /// Raises answer `latency` after their guard's read and apply then, as the real adapter's
    /// read and writes are two round trips: a write sent meanwhile is guarded against the size
    /// before them. Injected faults do not apply to slow raises.
    pub fn slow_writes(self, latency: std::time::Duration) -> Self {
        lock(&self.0).write_latency = latency;
        self
    }

    /// Makes the next `n` calls fail as throttled.
    pub fn throttle_next(&self, n: u32) {
        lock(&self.0).throttle_next = n;
    }

    /// `instance` is on-demand; every other instance in a group is spot.
    pub fn on_demand(&self, instance: &str) {
        lock(&self.0).on_demand.insert(instance.into());
    }

    /// How many instances were described through `instance_facts`.
    pub fn instance_lookups(&self) -> usize {
        lock(&self.0).instance_lookups
    }

    /// How many instances were asked about through `groups_of`.
    pub fn group_lookups(&self) -> usize {
        lock(&self.0).group_lookups
    }

    /// EC2 names `instance` `name` (by default instance `i-<node>` is named `<node>`, the way the
    /// test kit names nodes).
    pub fn private_dns(&self, instance: &str, name: &str) {
        lock(&self.0).dns_names.insert(instance.into(), name.into());
    }

    /// EC2 does not know `instance` (never launched, or long gone).
    pub fn hide_from_ec2(&self, instance: &str) {
        lock(&self.0).not_in_ec2.insert(instance.into());
    }

    /// Auto Scaling reports a launch in `group` that failed with `message` at `at` (newest first);
    /// the group relaunches nothing until [`FakeAutoScaling::launches_again`].
    pub fn fail_launch(&self, group: &str, message: &str, at: crate::core::Timestamp) {
        let mut s = lock(&self.0);
        s.dry.insert(group.into());
        let list = s.activities.entry(group.into()).or_default();
        // Activity ids are unique across groups, as AWS's UUIDs are.
        let id = format!("{group}-activity-{}", list.len());
        list.insert(
            0,
            crate::core::ScalingActivity {
                group: group.into(),
                id,
                status_code: "Failed".into(),
                status_message: Some(message.into()),
                description: format!("Launching a new EC2 instance.  Status Reason: {message}"),
                started: at,
            },
        );
    }

    /// `group`'s pool has capacity again: what it owes is relaunched from now on.
    pub fn launches_again(&self, group: &str) {
        lock(&self.0).dry.remove(&GroupName::from(group));
    }

    /// What Auto Scaling does for a group below its desired capacity: one instance for each
    /// terminated without decrement, unless the group's launches fail. Returns the instances
    /// `group` launched (`i-<group>-relaunch-<n>`), for the test to join as nodes.
    pub fn relaunch(&self, group: &str) -> Vec<InstanceId> {
        let mut s = lock(&self.0);
        let name = GroupName::from(group);
        if s.dry.contains(&name) {
            return Vec::new();
        }
        let owed = s.owed.remove(&name).unwrap_or(0);
        let mut launched = Vec::new();
        for _ in 0..owed {
            s.relaunched += 1;
            let id = InstanceId::from(format!("i-{group}-relaunch-{}", s.relaunched));
            let g = s.groups.get_mut(&name).expect("known group");
            g.instances.push(GroupInstance { id: id.clone(), lifecycle_state: "InService".into() });
            launched.push(id);
        }
        launched
    }

    /// EC2 lists a pending scheduled event for `instance`, starting at `not_before`.
    pub fn schedule_event(&self, instance: &str, not_before: crate::core::Timestamp) {
        lock(&self.0).scheduled.insert(instance.into(), not_before);
    }

    /// EC2 marks `instance`'s spot request for termination: an interruption notice is real.
    pub fn interrupt(&self, instance: &str) {
        lock(&self.0).interrupted.insert(instance.into());
    }

    /// `DescribeSpotInstanceRequests` calls so far.
    pub fn interruption_lookups(&self) -> usize {
        lock(&self.0).interruption_lookups
    }

    /// `instance` leaves its group, desired capacity unchanged (Auto Scaling's own scale-in).
    pub fn remove_instance(&self, instance: &InstanceId) {
        for g in lock(&self.0).groups.values_mut() {
            g.instances.retain(|i| &i.id != instance);
        }
    }

    /// EC2 says `instance` launched `at`.
    pub fn launched_at(&self, instance: &str, at: crate::core::Timestamp) {
        lock(&self.0).launched.insert(instance.into(), at);
    }

    /// EC2 says `instance` runs as `instance_type` in `zone`.
    pub fn pool(&self, instance: &str, instance_type: &str, zone: &str) {
        let pool = crate::core::Pool { instance_type: instance_type.into(), zone: zone.into() };
        lock(&self.0).pools.insert(instance.into(), pool);
    }

    /// AWS takes `instance` (a spot interruption) and the group replaces it with `replacement`.
    pub fn reclaim(&self, instance: &str, replacement: &str) {
        let mut s = lock(&self.0);
        let Some(group) = s.groups.values_mut().find(|g| g.instances.iter().any(|i| i.id.as_str() == instance)) else {
            return;
        };
        let mut taken = None;
        group.instances.retain(|i| {
            let keep = i.id.as_str() != instance;
            if !keep {
                taken = Some(i.clone());
            }
            keep
        });
        if let Some(mut next) = taken {
            next.id = replacement.into();
            group.instances.push(next);
        }
    }

    /// Every write is guarded against the one re-read, as the real adapter does.
    fn guarded(
        &self,
        writes: &[DesiredWrite],
        call: AsgCall,
        guard: fn(&DesiredWrite, Option<&GroupDescription>) -> Guard,
    ) -> Result<WriteOutcomes, AwsError> {
        let mut s = lock(&self.0);
        s.calls.push(call);
        if let Some(f) = Self::throttled(&mut s) {
            return Err(AwsError::DescribeGroups(f));
        }
        let live = s.groups.clone();
        Ok(writes
            .iter()
            .map(|w| {
                let outcome = match guard(w, live.get(&w.group)) {
                    Guard::Settled(outcome) => outcome,
                    Guard::Send { from } => {
                        s.groups.get_mut(&w.group).expect("known group").desired = w.to;
                        if Self::answer_lost(&mut s) {
                            return (w.group.clone(), Err(Self::lost_answer(&w.group)));
                        }
                        if s.apply_then_fail > 0 {
                            s.apply_then_fail -= 1;
                            return (w.group.clone(), Err(Self::lost_answer(&w.group)));
                        }
                        Ok(WriteOutcome::Written { from, to: w.to })
                    }
                };
                (w.group.clone(), outcome)
            })
            .collect())
    }

    /// Counts a write that applied; whether its answer is to be lost.
    fn answer_lost(state: &mut FakeAsgState) -> bool {
        state.writes_sent += 1;
        let lost = state.lose_write == Some(state.writes_sent);
        if lost {
            state.fail_describes += 1;
        }
        lost
    }

    fn lost_answer(group: &GroupName) -> AwsError {
        AwsError::SetDesiredCapacity {
            group: group.clone(),
            failure: AwsFailure {
                code: Some("InternalFailure".into()),
                message: Some("injected: applied, answer lost".into()),
                kind: FailureKind::Unavailable,
                source: "injected".into(),
            },
        }
    }

    fn throttled(state: &mut FakeAsgState) -> Option<AwsFailure> {
        (state.throttle_next > 0).then(|| {
            state.throttle_next -= 1;
            AwsFailure {
                code: Some("Throttling".into()),
                message: Some("Rate exceeded".into()),
                kind: FailureKind::Throttled,
                source: "Rate exceeded".into(),
            }
        })
    }
}

impl AutoScaling for FakeAutoScaling {
    async fn describe_groups(&self, names: &[GroupName]) -> Result<Vec<GroupDescription>, AwsError> {
        let mut s = lock(&self.0);
        s.calls.push(AsgCall::Describe(names.to_vec()));
        if let Some(f) = Self::throttled(&mut s) {
            return Err(AwsError::DescribeGroups(f));
        }
        if s.fail_describes > 0 {
            s.fail_describes -= 1;
            return Err(AwsError::DescribeGroups(AwsFailure {
                code: Some("InternalFailure".into()),
                message: Some("injected".into()),
                kind: FailureKind::Unavailable,
                source: "injected".into(),
            }));
        }
        Ok(names
            .iter()
            .filter_map(|n| s.groups.get(n).cloned())
            .map(|mut g| {
                g.tags = s.tags.get(&g.name).cloned().unwrap_or_default();
                g
            })
            .collect())
    }

    async fn discover_groups(&self, filters: &[TagFilter]) -> Result<Vec<GroupDescription>, AwsError> {
        let s = lock(&self.0);
        let tags = |name: &GroupName| s.tags.get(name).cloned().unwrap_or_default();
        Ok(s.groups
            .values()
            .filter(|g| filters.iter().all(|f| f.matches(&tags(&g.name))))
            .map(|g| GroupDescription { tags: tags(&g.name), ..g.clone() })
            .collect())
    }

    async fn suspend_az_rebalance(&self, group: &GroupName, suspend: bool, cluster: &str) -> Result<(), AwsError> {
        let mut s = lock(&self.0);
        s.calls.push(AsgCall::AzRebalance(group.clone(), suspend));
        let Some(g) = s.groups.get_mut(group) else { return Err(AwsError::UnknownGroup(group.clone())) };
        g.az_rebalance = !suspend;
        let tags = s.tags.entry(group.clone()).or_default();
        if suspend {
            tags.insert(crate::ports::AZ_REBALANCE_SUSPENDED_TAG.into(), cluster.into());
        } else {
            tags.remove(crate::ports::AZ_REBALANCE_SUSPENDED_TAG);
        }
        Ok(())
    }

    async fn raise_desired(&self, writes: &[DesiredWrite]) -> Result<WriteOutcomes, AwsError> {
        let latency = lock(&self.0).write_latency;
        if latency.is_zero() {
            return self.guarded(writes, AsgCall::Raise(writes.to_vec()), DesiredWrite::guard);
        }
        let live = {
            let mut s = lock(&self.0);
            s.calls.push(AsgCall::Raise(writes.to_vec()));
            s.groups.clone()
        };
        tokio::time::sleep(latency).await;
        let mut s = lock(&self.0);
        Ok(writes
            .iter()
            .map(|w| {
                let outcome = match DesiredWrite::guard(w, live.get(&w.group)) {
                    Guard::Settled(outcome) => outcome,
                    Guard::Send { from } => {
                        s.groups.get_mut(&w.group).expect("known group").desired = w.to;
                        Ok(WriteOutcome::Written { from, to: w.to })
                    }
                };
                (w.group.clone(), outcome)
            })
            .collect())
    }

    async fn lower_unlaunched(&self, writes: &[DesiredWrite]) -> Result<WriteOutcomes, AwsError> {
        self.guarded(writes, AsgCall::Lower(writes.to_vec()), DesiredWrite::unlaunched_guard)
    }

    async fn terminate_instance(&self, instance: &InstanceId, decrement: bool) -> Result<TerminateOutcome, AwsError> {
        let mut s = lock(&self.0);
        s.calls.push(AsgCall::Terminate(instance.clone(), decrement));
        if s.fail_terminations > 0 {
            s.fail_terminations -= 1;
            return Err(AwsError::TerminateInstance {
                instance: instance.clone(),
                failure: AwsFailure {
                    code: Some("InternalFailure".into()),
                    message: Some("injected".into()),
                    kind: FailureKind::Unavailable,
                    source: "injected".into(),
                },
            });
        }
        let Some(group) = s.groups.values_mut().find(|g| g.instances.iter().any(|i| &i.id == instance)) else {
            return Ok(TerminateOutcome::AlreadyGone);
        };
        group.instances.retain(|i| &i.id != instance);
        // As the real adapter: never a decrement below MinSize.
        let decremented = decrement && group.desired > group.min;
        if decremented {
            group.desired -= 1;
        } else {
            let name = group.name.clone();
            *s.owed.entry(name).or_default() += 1;
        }
        if Self::answer_lost(&mut s) {
            return Err(AwsError::TerminateInstance {
                instance: instance.clone(),
                failure: AwsFailure {
                    code: Some("InternalFailure".into()),
                    message: Some("injected: applied, answer lost".into()),
                    kind: FailureKind::Unavailable,
                    source: "injected".into(),
                },
            });
        }
        Ok(TerminateOutcome::Terminated { decremented })
    }

    async fn groups_of(&self, instances: &[InstanceId]) -> Result<BTreeMap<InstanceId, GroupName>, AwsError> {
        let mut s = lock(&self.0);
        s.group_lookups += instances.len();
        Ok(instances
            .iter()
            .filter_map(|id| {
                s.groups
                    .values()
                    .find(|g| g.instances.iter().any(|i| &i.id == id))
                    .map(|g| (id.clone(), g.name.clone()))
            })
            .collect())
    }

    async fn instance_facts(&self, instances: &[InstanceId]) -> Result<BTreeMap<InstanceId, InstanceFacts>, AwsError> {
        let mut s = lock(&self.0);
        s.instance_lookups += instances.len();
        // EC2 knows instances in no group too: every id the test kit names runs, unless hidden.
        Ok(instances
            .iter()
            .filter(|id| !s.not_in_ec2.contains(*id))
            .map(|id| {
                let lifecycle =
                    if s.on_demand.contains(id) { InstanceLifecycle::OnDemand } else { InstanceLifecycle::Spot };
                let dns = s.dns_names.get(id).cloned().or_else(|| id.as_str().strip_prefix("i-").map(String::from));
                let (launched, pool) = (s.launched.get(id).copied(), s.pools.get(id).cloned());
                let facts = InstanceFacts { private_dns_name: dns, launched, pool, ..InstanceFacts::bought(lifecycle) };
                (id.clone(), facts)
            })
            .collect())
    }

    async fn scaling_activities(
        &self,
        group: &GroupName,
        since: crate::core::Timestamp,
    ) -> Result<Vec<crate::core::ScalingActivity>, AwsError> {
        let mut s = lock(&self.0);
        s.calls.push(AsgCall::Activities(group.clone()));
        Ok(s.activities.get(group).into_iter().flatten().filter(|a| a.started >= since).cloned().collect())
    }

    async fn scheduled_events(
        &self,
        instances: &[InstanceId],
    ) -> Result<BTreeMap<InstanceId, crate::core::Timestamp>, AwsError> {
        let s = lock(&self.0);
        Ok(instances.iter().filter_map(|i| s.scheduled.get(i).map(|at| (i.clone(), *at))).collect())
    }

    async fn spot_interruptions(&self, instances: &[InstanceId]) -> Result<BTreeSet<InstanceId>, AwsError> {
        let mut s = lock(&self.0);
        s.interruption_lookups += 1;
        Ok(instances.iter().filter(|i| s.interrupted.contains(*i)).cloned().collect())
    }
}

/// Every fake, wired into one worker context: what worker tests and `simulate` run on.
#[derive(Debug, Clone)]
pub struct FakeRig {
    /// Auto Scaling.
    pub aws: FakeAutoScaling,
    /// The cluster.
    pub cluster: InMemoryCluster,
    /// The persisted ledger.
    pub ledger: MemoryLedger,
    /// Cluster writes (acting on `cluster`).
    pub writes: FakeClusterWrites,
    /// Events.
    pub events: RecordedEvents,
    /// Leadership.
    pub leadership: crate::ports::Leadership,
}

/// The ports of a [`FakeRig`], as a type.
pub type FakePorts =
    crate::workers::PortSet<FakeAutoScaling, InMemoryCluster, MemoryLedger, FakeClusterWrites, RecordedEvents>;

/// The worker context over a [`FakeRig`].
pub type FakeContext = crate::workers::WorkerContext<FakePorts>;

impl FakeRig {
    /// A synced, empty cluster whose replica leads.
    pub fn new(aws: FakeAutoScaling) -> Self {
        let cluster = InMemoryCluster::synced();
        FakeRig {
            aws,
            writes: FakeClusterWrites::new(&cluster),
            cluster,
            ledger: MemoryLedger::default(),
            events: RecordedEvents::default(),
            leadership: crate::ports::Leadership::always(),
        }
    }

    /// A worker context over these fakes (loading the persisted ledger, as a restart would).
    pub async fn context(
        &self,
        policy: crate::core::Policy,
        clock: crate::workers::Clock,
        metrics: Arc<crate::metrics::Metrics>,
    ) -> Arc<FakeContext> {
        self.context_with(self.aws.clone(), policy, clock, metrics).await
    }

    /// A worker context over these fakes but another Auto Scaling (the real adapter on moto).
    pub async fn context_with<A: AutoScaling + 'static>(
        &self,
        aws: A,
        policy: crate::core::Policy,
        clock: crate::workers::Clock,
        metrics: Arc<crate::metrics::Metrics>,
    ) -> Arc<
        crate::workers::WorkerContext<
            crate::workers::PortSet<A, InMemoryCluster, MemoryLedger, FakeClusterWrites, RecordedEvents>,
        >,
    > {
        let ports = crate::workers::PortSet {
            aws,
            cluster: self.cluster.clone(),
            ledger: self.ledger.clone(),
            writes: self.writes.clone(),
            events: self.events.clone(),
        };
        let groups = Arc::new(crate::workers::groups::GroupBook::new(
            CLUSTER,
            std::time::Duration::from_secs(60),
            std::time::Duration::from_secs(3600),
            clock.clone(),
        ));
        crate::workers::WorkerContext::<
            crate::workers::PortSet<A, InMemoryCluster, MemoryLedger, FakeClusterWrites, RecordedEvents>,
        >::new(ports, groups, self.leadership.clone(), metrics, policy, clock)
        .await
        .expect("memory ledger loads")
    }
}

/// What [`FakeInstanceGroupStore`] holds: the objects and every side effect, for assertions.
#[derive(Debug)]
pub struct InstanceGroupStoreState {
    /// InstanceGroups by `(namespace, name)`.
    pub groups: BTreeMap<(String, String), crate::instancegroup::InstanceGroup>,
    /// The `instance-manager` ConfigMap's data.
    pub config: Option<BTreeMap<String, String>>,
    /// Namespaces annotated `config-excluded: "true"`.
    pub excluded: BTreeSet<String>,
    /// `kube-system/aws-auth` data; `None` when it does not exist (as on a cluster EKS has not
    /// made one for): the daemon never creates it, so mapping a role then fails.
    pub aws_auth: Option<BTreeMap<String, String>>,
    /// The roles the daemon mapped in aws-auth (its ownership annotation).
    pub aws_auth_owned: BTreeSet<String>,
    /// Nodes marked for rotation, in order.
    pub rotations: Vec<String>,
    /// Events as `(object name, reason, message, warning)`.
    pub events: Vec<(String, String, String, bool)>,
    /// Status patches made.
    pub status_writes: usize,
    /// CustomResourceDefinitions by name (`<plural>.<group>`).
    pub crds: BTreeMap<String, crate::instancegroup::store::CustomKind>,
    /// Custom resources by `(plural, namespace, name)`.
    pub custom: BTreeMap<(String, String, String), serde_json::Value>,
}

impl Default for InstanceGroupStoreState {
    /// An empty cluster with an empty aws-auth, as EKS makes it.
    fn default() -> Self {
        InstanceGroupStoreState {
            groups: BTreeMap::new(),
            config: None,
            excluded: BTreeSet::new(),
            aws_auth: Some(BTreeMap::new()),
            aws_auth_owned: BTreeSet::new(),
            rotations: Vec::new(),
            events: Vec::new(),
            status_writes: 0,
            crds: BTreeMap::new(),
            custom: BTreeMap::new(),
        }
    }
}

/// InstanceGroups, ConfigMaps and aws-auth in memory, with the API server's finalizer semantics:
/// an object marked for deletion disappears when its last finalizer goes.
#[derive(Debug, Clone, Default)]
pub struct FakeInstanceGroupStore(pub Arc<Mutex<InstanceGroupStoreState>>);

impl FakeInstanceGroupStore {
    /// Adds or replaces an InstanceGroup, bumping its generation when the spec changed.
    pub fn apply(&self, mut group: crate::instancegroup::InstanceGroup) {
        let key =
            (group.metadata.namespace.clone().unwrap_or_default(), group.metadata.name.clone().unwrap_or_default());
        let mut state = lock(&self.0);
        let previous = state.groups.get(&key).cloned();
        let generation = previous.as_ref().and_then(|p| p.metadata.generation).unwrap_or(0);
        let changed = previous.as_ref().is_none_or(|p| p.spec != group.spec);
        group.metadata.generation = Some(if changed { generation + 1 } else { generation });
        if let Some(previous) = previous {
            group.status = previous.status;
            group.metadata.finalizers = previous.metadata.finalizers;
        }
        state.groups.insert(key, group);
    }

    /// Marks an InstanceGroup for deletion (or removes it at once without finalizers).
    pub fn delete(&self, namespace: &str, name: &str) {
        let mut state = lock(&self.0);
        let key = (namespace.to_string(), name.to_string());
        let Some(group) = state.groups.get_mut(&key) else { return };
        if group.metadata.finalizers.as_ref().is_none_or(Vec::is_empty) {
            state.groups.remove(&key);
        } else {
            // As the API server does, marking for deletion bumps the generation.
            group.metadata.deletion_timestamp =
                Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::UNIX_EPOCH));
            group.metadata.generation = Some(group.metadata.generation.unwrap_or(0) + 1);
        }
    }

    /// Sets an InstanceGroup's finalizers, as kube-runtime's `finalizer()` does in the daemon;
    /// one marked for deletion goes with its last finalizer.
    pub fn set_finalizers(&self, namespace: &str, name: &str, finalizers: &[String]) {
        let mut state = lock(&self.0);
        let key = (namespace.to_string(), name.to_string());
        if let Some(group) = state.groups.get_mut(&key) {
            group.metadata.finalizers = Some(finalizers.to_vec());
            if finalizers.is_empty() && group.metadata.deletion_timestamp.is_some() {
                state.groups.remove(&key);
            }
        }
    }

    /// One InstanceGroup as stored.
    pub fn get(&self, namespace: &str, name: &str) -> Option<crate::instancegroup::InstanceGroup> {
        lock(&self.0).groups.get(&(namespace.to_string(), name.to_string())).cloned()
    }

    /// The state, for assertions and setup.
    pub fn state(&self) -> MutexGuard<'_, InstanceGroupStoreState> {
        lock(&self.0)
    }
}

impl crate::instancegroup::store::GroupStatus for FakeInstanceGroupStore {
    async fn patch_status(
        &self,
        namespace: &str,
        name: &str,
        status: &crate::instancegroup::InstanceGroupStatus,
    ) -> Result<(), crate::instancegroup::store::StoreError> {
        let mut state = lock(&self.0);
        let Some(group) = state.groups.get_mut(&(namespace.to_string(), name.to_string())) else {
            return Err(crate::instancegroup::store::StoreError::Gone(format!("{namespace}/{name}")));
        };
        group.status = Some(status.clone());
        state.status_writes += 1;
        Ok(())
    }

    async fn event(
        &self,
        group: &crate::instancegroup::store::GroupRef,
        reason: &str,
        message: &str,
        warning: bool,
    ) -> Result<(), crate::instancegroup::store::StoreError> {
        lock(&self.0).events.push((group.name.clone(), reason.to_string(), message.to_string(), warning));
        Ok(())
    }
}

impl crate::instancegroup::store::Boundaries for FakeInstanceGroupStore {
    async fn config_map(&self) -> Result<Option<BTreeMap<String, String>>, crate::instancegroup::store::StoreError> {
        Ok(lock(&self.0).config.clone())
    }

    async fn namespace_excluded(&self, namespace: &str) -> Result<bool, crate::instancegroup::store::StoreError> {
        Ok(lock(&self.0).excluded.contains(namespace))
    }
}

impl crate::instancegroup::store::AwsAuth for FakeInstanceGroupStore {
    async fn upsert_aws_auth(&self, role_arn: &str) -> Result<(), crate::instancegroup::store::StoreError> {
        let mut guard = lock(&self.0);
        let state = &mut *guard;
        let Some(data) = state.aws_auth.as_mut() else {
            let missing = crate::instancegroup::aws_auth::EditAwsAuthError::Missing { role_arn: role_arn.to_string() };
            return Err(missing.into());
        };
        crate::instancegroup::aws_auth::upsert_node_role(data, &mut state.aws_auth_owned, role_arn)?;
        Ok(())
    }

    async fn remove_aws_auth(&self, role_arn: &str) -> Result<(), crate::instancegroup::store::StoreError> {
        let mut guard = lock(&self.0);
        let state = &mut *guard;
        if let Some(data) = state.aws_auth.as_mut() {
            crate::instancegroup::aws_auth::remove_role(data, &mut state.aws_auth_owned, role_arn)?;
        }
        Ok(())
    }
}

impl crate::instancegroup::store::Rotations for FakeInstanceGroupStore {
    async fn mark_for_rotation(&self, node: &str, _at: &str) -> Result<(), crate::instancegroup::store::StoreError> {
        lock(&self.0).rotations.push(node.to_string());
        Ok(())
    }
}

impl crate::instancegroup::store::CustomResources for FakeInstanceGroupStore {
    async fn custom_kind(
        &self,
        crd_name: &str,
    ) -> Result<crate::instancegroup::store::CustomKind, crate::instancegroup::store::StoreError> {
        let state = lock(&self.0);
        state
            .crds
            .iter()
            .find(|(name, kind)| *name == crd_name || kind.plural == crd_name)
            .map(|(_, kind)| kind.clone())
            .ok_or_else(|| crate::instancegroup::store::StoreError::NoSuchCrd(crd_name.to_string()))
    }

    async fn list_custom(
        &self,
        kind: &crate::instancegroup::store::CustomKind,
        namespace: &str,
    ) -> Result<Vec<serde_json::Value>, crate::instancegroup::store::StoreError> {
        let state = lock(&self.0);
        Ok(state
            .custom
            .iter()
            .filter(|((plural, ns, _), _)| *plural == kind.plural && ns == namespace)
            .map(|(_, v)| v.clone())
            .collect())
    }

    async fn create_custom(
        &self,
        kind: &crate::instancegroup::store::CustomKind,
        object: &serde_json::Value,
    ) -> Result<(), crate::instancegroup::store::StoreError> {
        let namespace = object["metadata"]["namespace"].as_str().unwrap_or("default").to_string();
        let name = object["metadata"]["name"].as_str().unwrap_or_default().to_string();
        lock(&self.0).custom.entry((kind.plural.clone(), namespace, name)).or_insert_with(|| object.clone());
        Ok(())
    }

    async fn delete_custom(
        &self,
        kind: &crate::instancegroup::store::CustomKind,
        namespace: &str,
        name: &str,
    ) -> Result<(), crate::instancegroup::store::StoreError> {
        lock(&self.0).custom.remove(&(kind.plural.clone(), namespace.to_string(), name.to_string()));
        Ok(())
    }
}
