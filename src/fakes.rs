//! In-memory implementations of the ports, for tests and `simulate`: they record every call and
//! accept injected faults.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::core::{BoostLedger, GroupName, InstanceId, Node, Signal};
use crate::ports::{
    AutoScaling, AwsError, AwsFailure, ClusterState, ClusterView, DesiredWrite, FailureKind, GroupDescription, Guard,
    LedgerError, LedgerStore, TagFilter, TerminateOutcome, WriteOutcome, WriteOutcomes,
};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A cluster view the test edits.
#[derive(Debug, Clone, Default)]
pub struct InMemoryCluster(Arc<Mutex<Option<ClusterState>>>);

impl InMemoryCluster {
    /// A synced, empty cluster.
    pub fn synced() -> Self {
        InMemoryCluster(Arc::new(Mutex::new(Some(ClusterState::default()))))
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

    /// Adds a signal.
    pub fn signal(&self, signal: Signal) {
        if let Some(state) = lock(&self.0).as_mut() {
            state.signals.push(signal);
        }
    }
}

impl ClusterView for InMemoryCluster {
    fn current(&self) -> Option<ClusterState> {
        lock(&self.0).clone()
    }
}

/// A ledger kept in memory, counting saves; `fail_saves` makes every save fail.
#[derive(Debug, Clone, Default)]
pub struct MemoryLedger {
    saved: Arc<Mutex<BoostLedger>>,
    saves: Arc<Mutex<u32>>,
    fail_saves: Arc<Mutex<bool>>,
}

impl MemoryLedger {
    /// The ledger as saved.
    pub fn saved(&self) -> BoostLedger {
        lock(&self.saved).clone()
    }

    /// How many saves succeeded.
    pub fn saves(&self) -> u32 {
        *lock(&self.saves)
    }

    /// Makes saves fail (or succeed again).
    pub fn fail_saves(&self, fail: bool) {
        *lock(&self.fail_saves) = fail;
    }
}

impl LedgerStore for MemoryLedger {
    async fn load(&self) -> Result<BoostLedger, LedgerError> {
        Ok(self.saved())
    }

    async fn save(&self, ledger: &BoostLedger) -> Result<(), LedgerError> {
        if *lock(&self.fail_saves) {
            return Err(LedgerError::Save("injected failure".into()));
        }
        *lock(&self.saved) = ledger.clone();
        *lock(&self.saves) += 1;
        Ok(())
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
}

#[derive(Debug, Default)]
struct FakeAsgState {
    groups: BTreeMap<GroupName, GroupDescription>,
    calls: Vec<AsgCall>,
    throttle_next: u32,
}

/// Auto Scaling in memory, with the same guards as the real adapter.
#[derive(Debug, Clone, Default)]
pub struct FakeAutoScaling(Arc<Mutex<FakeAsgState>>);

impl FakeAutoScaling {
    /// Adds a group of `desired` (min 0) with no instances.
    pub fn with_group(self, name: &str, desired: u32, max: u32) -> Self {
        lock(&self.0).groups.insert(
            name.into(),
            GroupDescription {
                name: name.into(),
                min: 0,
                max,
                desired,
                instances: Vec::new(),
                capacity_rebalance: false,
                mixed_instances: None,
                tags: BTreeMap::new(),
            },
        );
        self
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

    /// Makes the next `n` calls fail as throttled.
    pub fn throttle_next(&self, n: u32) {
        lock(&self.0).throttle_next = n;
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
        Ok(names.iter().filter_map(|n| s.groups.get(n).cloned()).collect())
    }

    async fn discover_groups(&self, _filters: &[TagFilter]) -> Result<Vec<GroupDescription>, AwsError> {
        Ok(lock(&self.0).groups.values().cloned().collect())
    }

    async fn raise_desired(&self, writes: &[DesiredWrite]) -> Result<WriteOutcomes, AwsError> {
        let mut s = lock(&self.0);
        s.calls.push(AsgCall::Raise(writes.to_vec()));
        if let Some(f) = Self::throttled(&mut s) {
            return Err(AwsError::DescribeGroups(f));
        }
        // Every write is guarded against the one re-read, as the real adapter does.
        let live = s.groups.clone();
        Ok(writes
            .iter()
            .map(|w| {
                let outcome = match w.guard(live.get(&w.group)) {
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

    async fn terminate_instance(&self, instance: &InstanceId, decrement: bool) -> Result<TerminateOutcome, AwsError> {
        let mut s = lock(&self.0);
        s.calls.push(AsgCall::Terminate(instance.clone(), decrement));
        Ok(TerminateOutcome::Terminated { decremented: decrement })
    }

    async fn groups_of(&self, _instances: &[InstanceId]) -> Result<BTreeMap<InstanceId, GroupName>, AwsError> {
        Ok(BTreeMap::new())
    }
}
