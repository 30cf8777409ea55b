//! What the workers know of Auto Scaling Groups, shared by the scaler and the drainer: which group
//! each node belongs to, and a description of each group holding one.
//!
//! All of it is learnt before any signal needs it (by the learner, as nodes join), so a signal
//! resolves from memory. Every instance a described group lists gives its node the group. A node
//! no description lists yet (it just joined) is looked up once, in one batched
//! `DescribeAutoScalingInstances` for all such nodes, and the answer is cached (instances never change group; the TTL only bounds
//! memory of instances long gone, and "in no group" is asked again after five minutes). Every
//! group holding a node is described and re-described once its description is `refresh` old, a
//! call per 50 groups: a group's Ready count and size never depend on which nodes were signalled.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use std::sync::{Mutex, MutexGuard};

use tracing::warn;

use crate::core::{
    facts_needed, scheduled_events_needed, spot_interruptions_needed, BoostLedger, Group, GroupName, InstanceFacts,
    InstanceId, Node, NodeName, Snapshot, Timestamp,
};
use crate::ports::{AutoScaling, AwsError, Clock, ClusterState, GroupDescription, GroupScope, TagFilter};

/// The caches are only touched between calls, never across one, so a poisoned lock holds data
/// as good as it was.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Every instance a described group lists is its member, so every node of the group is known,
/// not only the signalled ones and recent joiners: the group's Ready count (CA's unready
/// tolerance) and sizing see the whole group.
fn set_groups_from_members(described: &BTreeMap<GroupName, (GroupDescription, Timestamp)>, state: &mut ClusterState) {
    let membership: HashMap<&InstanceId, &GroupName> =
        described.values().flat_map(|(g, _)| g.members().map(move |i| (i, &g.name))).collect();
    for node in state.nodes.values_mut().filter(|n| n.group.is_none()) {
        if let Some(group) = node.instance.as_ref().and_then(|i| membership.get(i)) {
            node.group = Some((*group).clone());
        }
    }
}

/// Caches AWS's answer for each id asked (absent ones included), stamped `now`.
fn remember<V>(
    cache: &Mutex<HashMap<InstanceId, (V, Timestamp)>>,
    asked: Vec<InstanceId>,
    mut answer: impl FnMut(&InstanceId) -> V,
    now: Timestamp,
) {
    let mut cache = lock(cache);
    for id in asked {
        let value = answer(&id);
        cache.insert(id, (value, now));
    }
}

/// How long "in no group" is believed: an instance asked about the moment it launched may not
/// be listed yet, and every node is asked about once it joins, long before any signal.
const NO_GROUP_TTL: Duration = Duration::from_secs(300);

/// A TTL cache in front of [`AutoScaling::groups_of`].
pub struct InstanceGroupCache {
    ttl: Duration,
    entries: Mutex<HashMap<InstanceId, (Option<GroupName>, Timestamp)>>,
    clock: Clock,
}

impl std::fmt::Debug for InstanceGroupCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InstanceGroupCache").field("ttl", &self.ttl).finish_non_exhaustive()
    }
}

impl InstanceGroupCache {
    /// A cache whose answers live `ttl` on `clock`.
    pub fn new(ttl: Duration, clock: Clock) -> Self {
        InstanceGroupCache { ttl, entries: Mutex::new(HashMap::new()), clock }
    }

    /// How long an answer is believed: a group for the TTL, "in no group" for less.
    fn lasts(&self, group: &Option<GroupName>) -> Duration {
        if group.is_some() {
            self.ttl
        } else {
            self.ttl.min(NO_GROUP_TTL)
        }
    }

    /// Those of `instances` whose group is not cached.
    pub(crate) fn uncached(&self, instances: &[InstanceId]) -> Vec<InstanceId> {
        let now = (self.clock)();
        let entries = lock(&self.entries);
        instances
            .iter()
            .filter(|i| entries.get(*i).is_none_or(|(group, at)| now.since(*at) >= self.lasts(group)))
            .cloned()
            .collect()
    }

    /// The group of each instance (absent: in no group), asking AWS only for what is not cached.
    pub async fn groups_of<A: AutoScaling>(
        &self,
        aws: &A,
        instances: &[InstanceId],
    ) -> Result<HashMap<InstanceId, Option<GroupName>>, AwsError> {
        let now = (self.clock)();
        let missing: Vec<InstanceId> = {
            let mut entries = lock(&self.entries);
            entries.retain(|_, (group, at)| now.since(*at) < self.lasts(group));
            instances.iter().filter(|i| !entries.contains_key(*i)).cloned().collect()
        };
        // No lock across the call: a slow answer must not stall the other worker's reads.
        let mut found = if missing.is_empty() { BTreeMap::new() } else { aws.groups_of(&missing).await? };
        let mut entries = lock(&self.entries);
        for id in missing {
            let group = found.remove(&id);
            entries.insert(id, (group, now));
        }
        Ok(instances.iter().map(|i| (i.clone(), entries.get(i).and_then(|(g, _)| g.clone()))).collect())
    }
}

/// Group descriptions with their age, and the instance → group cache.
#[derive(Debug)]
pub struct GroupBook {
    refresh: Duration,
    described: Mutex<BTreeMap<GroupName, (GroupDescription, Timestamp)>>,
    /// Groups asked for that Auto Scaling did not know, and when: asked again after `refresh`.
    absent: Mutex<BTreeMap<GroupName, Timestamp>>,
    instances: InstanceGroupCache,
    /// What EC2 said of each live node's instance (fixed for an instance's life; `None`: EC2
    /// does not know it, asked again after [`UNKNOWN_INSTANCE_TTL`]) and when it was asked.
    facts: Mutex<HashMap<InstanceId, (Option<InstanceFacts>, Timestamp)>>,
    /// The `NotBefore` of the pending scheduled event EC2 listed for an instance (`None`: no
    /// event), and when it was asked.
    scheduled: Mutex<HashMap<InstanceId, (Option<Timestamp>, Timestamp)>>,
    /// Whether EC2 reported an instance's spot request interrupted, and when it was asked.
    interrupted: Mutex<HashMap<InstanceId, (bool, Timestamp)>>,
    /// `--cluster-name` and `--asg-tag-filter`: a group of another cluster, or one the filter
    /// leaves out, is described but never touched.
    scope: Mutex<GroupScope>,
    /// When each group last failed to launch for want of capacity (the launch watcher's finding).
    capacity_failures: Mutex<BTreeMap<GroupName, Timestamp>>,
    /// Nodes a pass learns beyond the signalled ones: [`LEARN_PER_PASS`], or none when the
    /// learner runs beside the passes.
    pass_share: usize,
}

/// Instances a pass learns about (group, EC2 facts) beyond those signalled: a daemon starting in
/// a large cluster learns it over a few passes, never holding a signal behind thousands of
/// lookups (200: four `DescribeAutoScalingInstances` at once, one round trip).
const LEARN_PER_PASS: usize = 200;

/// How long an instance EC2 did not know (not launched yet as far as EC2's reads go, or not an
/// EC2 instance) waits before it is asked for again.
const UNKNOWN_INSTANCE_TTL: Duration = Duration::from_secs(30);

/// How old a group's description may grow while one of its boosted instances, still listed, has
/// no Ready node (AWS may have taken it): re-described this soon, so capacity AWS took first is
/// given back within seconds, not the next `refresh`.
const SUSPECT_REFRESH: Duration = Duration::from_secs(5);

/// How long EC2's answer on an instance's scheduled events is used before it is asked again.
const SCHEDULED_EVENTS_TTL: Duration = Duration::from_secs(30);

/// How long EC2's answer that an instance's spot request is not interrupted is used before it is
/// asked again: EC2 marks the request when it sends the notice, so a genuine notice is confirmed
/// within this; a forged one costs one call per instance this often. A request EC2 marked stays
/// marked.
const NOT_INTERRUPTED_TTL: Duration = Duration::from_secs(5);

impl GroupBook {
    /// A book of `cluster`'s groups that re-describes a group once its description is `refresh`
    /// old and remembers an instance's group for `instance_ttl`, both aged on `clock`.
    pub fn new(cluster: &str, refresh: Duration, instance_ttl: Duration, clock: Clock) -> Self {
        GroupBook {
            refresh,
            described: Mutex::new(BTreeMap::new()),
            absent: Mutex::new(BTreeMap::new()),
            instances: InstanceGroupCache::new(instance_ttl, clock),
            facts: Mutex::new(HashMap::new()),
            scheduled: Mutex::new(HashMap::new()),
            interrupted: Mutex::new(HashMap::new()),
            scope: Mutex::new(GroupScope::new(cluster)),
            capacity_failures: Mutex::new(BTreeMap::new()),
            pass_share: LEARN_PER_PASS,
        }
    }

    /// The cluster whose groups these are (`--cluster-name`).
    pub(crate) fn cluster(&self) -> String {
        lock(&self.scope).cluster().to_string()
    }

    /// The same book with the learner running beside the passes: a pass looks up only the
    /// signalled nodes it does not know yet, never waiting behind the learner's lookups.
    pub(crate) fn with_learner(mut self) -> Self {
        self.pass_share = 0;
        self
    }

    /// Describes every group whose tags match all `filters` (none: nothing to do), and from now
    /// on leaves every group they do not match untouched.
    pub(crate) async fn discover<A: AutoScaling>(&self, aws: &A, filters: &[TagFilter]) -> Result<usize, AwsError> {
        {
            let mut scope = lock(&self.scope);
            *scope = scope.selecting(filters);
        }
        if filters.is_empty() {
            return Ok(0);
        }
        let found = aws.discover_groups(filters).await?;
        let now = (self.instances.clock)();
        let mut described = lock(&self.described);
        for g in &found {
            described.insert(g.name.clone(), (g.clone(), now));
        }
        Ok(found.len())
    }

    /// Sets the group of every node that matters in `state`, then describes the groups those
    /// nodes and the ledger name that are unknown or stale. Returns the described groups as the
    /// core sees them, each with Cluster Autoscaler's view. Nodes never looked up are, beyond
    /// the signalled ones, learnt [`LEARN_PER_PASS`] at a time unless the learner runs.
    pub(crate) async fn resolve<A: AutoScaling>(
        &self,
        aws: &A,
        state: &mut ClusterState,
        ledger: &BoostLedger,
    ) -> Result<BTreeMap<GroupName, Group>, AwsError> {
        self.resolve_learning(aws, state, ledger, self.pass_share).await
    }

    /// Learns the group and EC2's facts of every node in `state` never looked up, and describes
    /// the groups they are in: what a later signal about any of them needs is then in memory.
    pub(crate) async fn learn<A: AutoScaling>(
        &self,
        aws: &A,
        mut state: ClusterState,
        ledger: &BoostLedger,
    ) -> Result<(), AwsError> {
        state.signals.clear();
        self.resolve_learning(aws, &mut state, ledger, usize::MAX).await?;
        let live: BTreeSet<&InstanceId> = state.nodes.values().filter_map(|n| n.instance.as_ref()).collect();
        self.learn_facts(aws, &live, &BTreeSet::new(), usize::MAX).await;
        Ok(())
    }

    /// [`GroupBook::resolve`], learning at most `share` nodes beyond the signalled ones.
    async fn resolve_learning<A: AutoScaling>(
        &self,
        aws: &A,
        state: &mut ClusterState,
        ledger: &BoostLedger,
        share: usize,
    ) -> Result<BTreeMap<GroupName, Group>, AwsError> {
        // Instances a described group already lists need no lookup; every other node is looked
        // up once, in one batch, the first pass after it joins, so a signal later finds its
        // node's group in memory.
        set_groups_from_members(&lock(&self.described), state);
        let signalled: BTreeSet<&NodeName> = state.signals.iter().map(|s| &s.node).collect();
        let (needed, rest): (Vec<&Node>, Vec<&Node>) =
            state.nodes.values().filter(|n| n.group.is_none()).partition(|n| signalled.contains(&n.name));
        let rest: Vec<InstanceId> = rest.into_iter().filter_map(|n| n.instance.clone()).collect();
        let unknown: BTreeSet<InstanceId> = self.instances.uncached(&rest).into_iter().collect();
        let learnt: BTreeSet<&InstanceId> = unknown.iter().take(share).collect();
        let unresolved: Vec<InstanceId> = needed
            .into_iter()
            .filter_map(|n| n.instance.clone())
            .chain(rest.iter().filter(|i| !unknown.contains(*i) || learnt.contains(i)).cloned())
            .collect();
        if !unresolved.is_empty() {
            let found = self.instances.groups_of(aws, &unresolved).await?;
            for node in state.nodes.values_mut().filter(|n| n.group.is_none()) {
                if let Some(Some(group)) = node.instance.as_ref().and_then(|i| found.get(i)) {
                    node.group = Some(group.clone());
                }
            }
        }

        // Every group holding a node is kept described, so a signal finds its group's size in
        // memory too; the ledger's groups are described even once their nodes are gone.
        let wanted: BTreeSet<GroupName> = state
            .nodes
            .values()
            .filter_map(|n| n.group.clone())
            .chain(ledger.records.iter().map(|r| r.group.clone()))
            .chain(ledger.records.iter().flat_map(|r| r.moved.iter().map(|p| p.group.clone())))
            .collect();
        let now = (self.instances.clock)();
        let suspect = self.suspect_groups(state, ledger, now);
        let stale = |wanted: &BTreeSet<GroupName>| -> Vec<GroupName> {
            let (described, absent) = (lock(&self.described), lock(&self.absent));
            let recent = |at: &Timestamp| now.since(*at) < self.refresh;
            wanted
                .iter()
                .filter(|g| suspect.contains(*g) || !described.get(*g).is_some_and(|(_, at)| recent(at)))
                .filter(|g| !absent.get(*g).is_some_and(recent))
                .cloned()
                .collect()
        };
        let first = stale(&wanted);
        let fresh = if first.is_empty() { Vec::new() } else { aws.describe_groups(&first).await? };
        self.remember_described(&first, fresh, now);
        // A group without capacity: its fallbacks (named by its tag) are described too.
        let fallbacks: BTreeSet<GroupName> = {
            let failing = lock(&self.capacity_failures);
            let described = lock(&self.described);
            failing.keys().filter_map(|g| described.get(g)).flat_map(|(g, _)| g.fallbacks()).collect()
        };
        let second = stale(&fallbacks);
        let fresh = if second.is_empty() { Vec::new() } else { aws.describe_groups(&second).await? };
        self.remember_described(&second, fresh, now);
        let described = lock(&self.described);
        set_groups_from_members(&described, state);
        let scope = lock(&self.scope);
        Ok(described
            .values()
            .map(|(g, _)| (g.name.clone(), g.to_core(None, state.ca.get(&g.name).cloned(), &scope)))
            .collect())
    }

    /// The described groups, at least [`SUSPECT_REFRESH`] old, that still list a boosted instance
    /// no Ready node runs: AWS may have taken it, and its give-back waits on the group's list.
    fn suspect_groups(&self, state: &ClusterState, ledger: &BoostLedger, now: Timestamp) -> BTreeSet<GroupName> {
        if ledger.records.is_empty() {
            return BTreeSet::new();
        }
        let running: BTreeSet<&InstanceId> =
            state.nodes.values().filter(|n| n.ready).filter_map(|n| n.instance.as_ref()).collect();
        let described = lock(&self.described);
        ledger
            .records
            .iter()
            .filter(|r| {
                described.get(&r.group).is_some_and(|(g, at)| {
                    now.since(*at) >= SUSPECT_REFRESH
                        && g.members()
                            .any(|i| r.instances.contains(i) && !r.settled.contains(i) && !running.contains(i))
                })
            })
            .map(|r| r.group.clone())
            .collect()
    }

    /// Notes a desired capacity the workers wrote or saw, without a describe.
    pub(crate) async fn note_desired(&self, group: &GroupName, desired: u32) {
        if let Some((g, _)) = lock(&self.described).get_mut(group) {
            g.desired = desired;
        }
    }

    /// Keeps the descriptions of the groups `asked`, and notes those Auto Scaling does not know
    /// (deleted while nodes it once held linger), so they are not asked for again each pass.
    fn remember_described(&self, asked: &[GroupName], fresh: Vec<GroupDescription>, now: Timestamp) {
        let (mut described, mut absent) = (lock(&self.described), lock(&self.absent));
        for name in asked {
            absent.insert(name.clone(), now);
        }
        for g in fresh {
            absent.remove(&g.name);
            described.insert(g.name.clone(), (g, now));
        }
    }

    /// Notes that `group` failed to launch for want of capacity at `at` (the latest is kept).
    pub(crate) fn note_capacity_failure(&self, group: &GroupName, at: Timestamp) {
        let mut failures = lock(&self.capacity_failures);
        let last = failures.entry(group.clone()).or_insert(at);
        *last = (*last).max(at);
    }

    /// When each group last failed to launch for want of capacity.
    pub(crate) fn capacity_failures(&self) -> BTreeMap<GroupName, Timestamp> {
        lock(&self.capacity_failures).clone()
    }

    /// Forgets a group's description, so the next plan describes it again.
    pub(crate) async fn invalidate(&self, group: &GroupName) {
        lock(&self.described).remove(group);
        lock(&self.absent).remove(group);
    }

    /// Asks EC2 about the `live` instances never described: the `signalled` ones, then at most
    /// `share` others. Forgets what it knew of instances no longer live.
    async fn learn_facts<A: AutoScaling>(
        &self,
        aws: &A,
        live: &BTreeSet<&InstanceId>,
        signalled: &BTreeSet<&InstanceId>,
        share: usize,
    ) {
        let now = (self.instances.clock)();
        let missing: Vec<InstanceId> = {
            let mut cache = lock(&self.facts);
            cache.retain(|i, (facts, at)| {
                live.contains(i) && (facts.is_some() || now.since(*at) < UNKNOWN_INSTANCE_TTL)
            });
            let (needed, rest): (Vec<&InstanceId>, Vec<&InstanceId>) =
                live.iter().copied().filter(|i| !cache.contains_key(*i)).partition(|i| signalled.contains(i));
            needed.into_iter().chain(rest.into_iter().take(share)).cloned().collect()
        };
        if missing.is_empty() {
            return;
        }
        match aws.instance_facts(&missing).await {
            Ok(mut found) => remember(&self.facts, missing, |id| found.remove(id), now),
            Err(e) => {
                warn!(error = %e, instances = missing.len(), "instances not described; their nodes stay unverified")
            }
        }
    }

    /// Fills `snapshot.instances` with what EC2 says of every node's instance (and of the joining
    /// instances a give-back may choose among), asking only for instances never described (facts
    /// are fixed for an instance's life, so a node costs one batched lookup when it joins) and
    /// `snapshot.scheduled_events` for the instances a scheduled-maintenance notice names. A
    /// failed lookup leaves them unknown, so unverified and unconfirmed, until the next pass:
    /// nothing is believed because AWS could not be asked.
    pub(crate) async fn fill_instance_facts<A: AutoScaling>(&self, aws: &A, snapshot: &mut Snapshot) {
        let joining = facts_needed(snapshot);
        let mut live: BTreeSet<&InstanceId> = snapshot.nodes.values().filter_map(|n| n.instance.as_ref()).collect();
        live.extend(&joining);
        let mut signalled: BTreeSet<&InstanceId> = snapshot.signals.iter().map(|s| &s.instance).collect();
        signalled.extend(&joining);
        self.learn_facts(aws, &live, &signalled, self.pass_share).await;
        let now = (self.instances.clock)();
        snapshot.instances = {
            let cache = lock(&self.facts);
            live.iter()
                .filter_map(|i| cache.get(*i).and_then(|(f, _)| f.as_ref()).map(|f| ((*i).clone(), f.clone())))
                .collect()
        };
        self.learn_scheduled_events(aws, snapshot, now).await;
    }

    /// `snapshot.scheduled_events`: EC2's pending events for the instances a scheduled-maintenance
    /// notice names, asked again every [`SCHEDULED_EVENTS_TTL`].
    async fn learn_scheduled_events<A: AutoScaling>(&self, aws: &A, snapshot: &mut Snapshot, now: Timestamp) {
        let named = scheduled_events_needed(snapshot);
        let stale: Vec<InstanceId> = {
            let mut cache = lock(&self.scheduled);
            cache.retain(|i, (_, at)| named.contains(i) && now.since(*at) < SCHEDULED_EVENTS_TTL);
            named.iter().filter(|i| !cache.contains_key(*i)).cloned().collect()
        };
        if !stale.is_empty() {
            match aws.scheduled_events(&stale).await {
                Ok(found) => remember(&self.scheduled, stale, |id| found.get(id).copied(), now),
                Err(e) => {
                    warn!(error = %e, instances = stale.len(), "scheduled events not read; their notices stay unconfirmed")
                }
            }
        }
        snapshot.scheduled_events =
            lock(&self.scheduled).iter().filter_map(|(i, (at, _))| at.map(|at| (i.clone(), at))).collect();
    }

    /// `snapshot.spot_interrupted`: the instances a spot-interruption notice names whose spot
    /// request EC2 reports interrupted; a "no" is asked again after [`NOT_INTERRUPTED_TTL`].
    pub(crate) async fn learn_spot_interruptions<A: AutoScaling>(&self, aws: &A, snapshot: &mut Snapshot) {
        let now = (self.instances.clock)();
        let named = spot_interruptions_needed(snapshot);
        let stale: Vec<InstanceId> = {
            let mut cache = lock(&self.interrupted);
            cache.retain(|i, (marked, at)| named.contains(i) && (*marked || now.since(*at) < NOT_INTERRUPTED_TTL));
            named.iter().filter(|i| !cache.contains_key(*i)).cloned().collect()
        };
        if !stale.is_empty() {
            match aws.spot_interruptions(&stale).await {
                Ok(found) => remember(&self.interrupted, stale, |id| found.contains(id), now),
                Err(e) => {
                    warn!(error = %e, instances = stale.len(), "spot requests not read; their interruption notices stay unconfirmed")
                }
            }
        }
        self.known_spot_interruptions(snapshot);
    }

    /// `snapshot.spot_interrupted` as EC2 last answered, without asking: the instances of the
    /// snapshot's notices whose spot requests it reported interrupted.
    pub(crate) fn known_spot_interruptions(&self, snapshot: &mut Snapshot) {
        let named = spot_interruptions_needed(snapshot);
        snapshot.spot_interrupted = lock(&self.interrupted)
            .iter()
            .filter(|(i, (marked, _))| *marked && named.contains(*i))
            .map(|(i, _)| i.clone())
            .collect();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicI64, Ordering};
    use std::sync::Arc;

    use super::*;
    use crate::core::Signal;
    use crate::fakes::{AsgCall, FakeAutoScaling};
    use crate::ports::system_clock;

    fn describes(aws: &FakeAutoScaling) -> Vec<Vec<GroupName>> {
        aws.calls().into_iter().filter_map(|c| if let AsgCall::Describe(g) = c { Some(g) } else { None }).collect()
    }

    #[tokio::test]
    async fn every_node_s_group_is_learnt_before_a_signal_and_a_deleted_group_is_not_asked_for_each_pass() {
        let aws = FakeAutoScaling::default()
            .with_group("a", 2, 10)
            .with_instance("a", "i-n1")
            .with_instance("a", "i-n2")
            .with_group("b", 1, 10)
            .with_instance("b", "i-m1");
        let millis = Arc::new(AtomicI64::new(1_000));
        let at = millis.clone();
        let book = GroupBook::new(
            crate::fakes::CLUSTER,
            Duration::from_secs(60),
            Duration::from_secs(3600),
            Arc::new(move || Timestamp::from_millis(at.load(Ordering::SeqCst))),
        );
        let mut state = ClusterState::default();
        for (name, instance) in [("n1", "i-n1"), ("n2", "i-n2"), ("m1", "i-m1")] {
            let mut node = Node::test(name, "a");
            node.group = None;
            node.instance = Some(instance.into());
            state.nodes.insert(name.into(), node);
        }

        // No signal at all: every node's group and every group's size are learnt anyway.
        let groups = book.resolve(&aws, &mut state.clone(), &BoostLedger::default()).await.unwrap();
        assert_eq!(groups.keys().map(GroupName::as_str).collect::<Vec<_>>(), vec!["a", "b"]);
        assert_eq!(describes(&aws), vec![vec![GroupName::from("a"), GroupName::from("b")]]);
        // A later pass asks nothing: the descriptions list every node's instance.
        book.resolve(&aws, &mut state.clone(), &BoostLedger::default()).await.unwrap();
        assert_eq!(describes(&aws).len(), 1, "{:?}", aws.calls());

        // `b` is deleted while m1 lingers: asked for once per refresh, not once per pass.
        aws.delete_group("b");
        millis.fetch_add(61_000, Ordering::SeqCst);
        for _ in 0..3 {
            book.resolve(&aws, &mut state.clone(), &BoostLedger::default()).await.unwrap();
        }
        let asked_for_b = describes(&aws).iter().filter(|d| d.contains(&GroupName::from("b"))).count();
        assert_eq!(asked_for_b, 2, "{:?}", describes(&aws));
    }

    #[tokio::test]
    async fn a_large_cluster_is_learnt_over_a_few_passes_and_never_holds_a_signal_back() {
        let aws = FakeAutoScaling::default().with_group("a", 1, 10);
        let book =
            GroupBook::new(crate::fakes::CLUSTER, Duration::from_secs(60), Duration::from_secs(3600), system_clock());
        let mut snapshot = Snapshot::default();
        for k in 0..450 {
            let name = format!("n{k:03}");
            snapshot.nodes.insert(name.as_str().into(), Node::test(&name, "a"));
        }
        snapshot.signals.push(Signal::rebalance("n449", 0));

        book.fill_instance_facts(&aws, &mut snapshot).await;
        assert_eq!(aws.instance_lookups(), LEARN_PER_PASS + 1, "the signalled node and a pass's share");
        assert!(snapshot.instances.contains_key(&InstanceId::from("i-n449")), "the signalled node is described first");
        book.fill_instance_facts(&aws, &mut snapshot).await;
        book.fill_instance_facts(&aws, &mut snapshot).await;
        assert_eq!(aws.instance_lookups(), 450, "every node learnt, each once");
        assert_eq!(snapshot.instances.len(), 450);
    }

    #[tokio::test]
    async fn with_the_learner_beside_it_a_pass_looks_up_only_its_signalled_nodes() {
        let mut aws = FakeAutoScaling::default().with_group("a", 300, 400);
        let mut state = ClusterState::default();
        for k in 0..300 {
            let name = format!("n{k:03}");
            aws = aws.with_instance("a", &format!("i-{name}"));
            let mut node = Node::test(&name, "a");
            node.group = None;
            state.nodes.insert(name.as_str().into(), node);
        }
        state.signals.push(Signal::rebalance("n299", 0));
        let book =
            GroupBook::new(crate::fakes::CLUSTER, Duration::from_secs(60), Duration::from_secs(3600), system_clock())
                .with_learner();

        let groups = book.resolve(&aws, &mut state, &BoostLedger::default()).await.unwrap();
        assert_eq!(aws.group_lookups(), 1, "the signalled node only");
        assert!(groups.contains_key(&GroupName::from("a")));
        assert!(state.nodes.values().all(|n| n.group.is_some()), "its group's description names every member");
        let mut snapshot =
            Snapshot { nodes: state.nodes.clone(), signals: state.signals.clone(), ..Snapshot::default() };
        book.fill_instance_facts(&aws, &mut snapshot).await;
        assert_eq!(aws.instance_lookups(), 1, "the signalled node only");

        book.learn(&aws, state, &BoostLedger::default()).await.unwrap();
        assert_eq!((aws.group_lookups(), aws.instance_lookups()), (1, 300), "the learner asks EC2 about the rest");
    }
}
