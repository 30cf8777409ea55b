//! What the drainer is set to, what a tick of it did, and why a tick did nothing useful.

use super::*;

/// How the drainer paces itself.
#[derive(Debug, Clone)]
pub struct DrainerSettings {
    /// Plan and make progress at least this often (pods leaving are seen through the watch).
    pub tick: Duration,
    /// Eviction (and termination) calls in flight at once, across every draining node.
    pub(crate) evictions_in_flight: usize,
    /// One eviction call's deadline: past it the pod counts as not evicted this round, so a
    /// stalled API server never stalls the tick, the other nodes, or `--drain-timeout`.
    pub(crate) eviction_call_timeout: Duration,
    /// `--suspend-az-rebalance`: suspend `AZRebalance` on a group before terminating in it with
    /// decrement; without it, resume the groups an earlier run suspended.
    pub(crate) suspend_az_rebalance: bool,
}

impl Default for DrainerSettings {
    fn default() -> Self {
        DrainerSettings {
            tick: Duration::from_secs(2),
            evictions_in_flight: 32,
            eviction_call_timeout: Duration::from_secs(10),
            suspend_az_rebalance: false,
        }
    }
}

/// Why a tick did nothing useful.
#[derive(Debug, Error)]
pub enum DrainerError {
    /// Some watch has not synced.
    #[error("the cluster view is not synced yet")]
    NotSynced,
    /// Describing groups failed.
    #[error("describing groups failed")]
    Describe(#[source] AwsError),
    /// The ledger could not be read or saved.
    #[error(transparent)]
    Ledger(#[from] LedgerError),
}

/// What one tick did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct DrainReport {
    /// Nodes whose drain started.
    pub started: Vec<NodeName>,
    /// Pods evicted (or found gone).
    pub(crate) evicted: u32,
    /// Evictions refused by a PodDisruptionBudget.
    pub blocked: u32,
    /// Nodes fully drained (not those whose instance went first).
    pub drained: Vec<NodeName>,
    /// Nodes past the drain deadline.
    pub timed_out: Vec<NodeName>,
    /// Instances terminated, with whether desired capacity was decremented.
    pub terminated: Vec<(InstanceId, bool)>,
    /// Batches a follower left to the leader.
    pub(crate) not_leader: usize,
}

impl DrainReport {
    /// Adds what a later pass of the same tick did.
    pub(super) fn add(&mut self, later: DrainReport) {
        self.started.extend(later.started);
        self.evicted = self.evicted.saturating_add(later.evicted);
        self.blocked = self.blocked.saturating_add(later.blocked);
        self.drained.extend(later.drained);
        self.timed_out.extend(later.timed_out);
        self.terminated.extend(later.terminated);
        self.not_leader = self.not_leader.saturating_add(later.not_leader);
    }
}

impl crate::workers::PassError for DrainerError {
    fn not_synced(&self) -> bool {
        matches!(self, DrainerError::NotSynced)
    }

    fn ledger(&self) -> Option<&LedgerError> {
        match self {
            DrainerError::Ledger(l) => Some(l),
            _ => None,
        }
    }
}
