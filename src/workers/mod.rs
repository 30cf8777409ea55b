//! Loops that take a view of the cluster, call the core, and execute its decisions through the
//! ports. Nothing here decides; nothing here sees an SDK type.
//!
//! The scaler and the drainer share one [`WorkerContext`]: the ports, the ledger, the group book,
//! the leadership flag and the metrics. Every replica runs both and plans; only the leader writes.

pub mod drainer;
pub mod groups;
pub mod instancegroups;
pub mod launches;
pub mod learner;
pub mod ledger;
#[cfg(test)]
mod lost_answers;
pub mod scaler;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::core::{BoostLedger, Evidence, InstanceId, NodeName, Policy, Signal, SignalKind, Snapshot, Timestamp};
use crate::metrics::Metrics;
use crate::ports::{AutoScaling, AwsError, ClusterState, ClusterView, Leadership, LedgerStore};
use groups::GroupBook;
use ledger::SharedLedger;

pub use crate::ports::{system_clock, Clock};

/// Everything the workers share. `A`: Auto Scaling; `C`: the cluster view; `L`: the ledger
/// store; `W`: cluster writes; `E`: the Event sink.
pub struct WorkerContext<A, C, L, W, E> {
    /// Auto Scaling.
    pub aws: A,
    /// The watched cluster.
    pub cluster: C,
    /// Writes to the cluster.
    pub writes: W,
    /// Kubernetes Events.
    pub events: E,
    /// The boost ledger, persisted through `L`.
    pub ledger: Arc<SharedLedger<L>>,
    /// Groups and the instance → group cache.
    pub groups: Arc<GroupBook>,
    /// Whether this replica may write.
    pub leadership: Leadership,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// The policy the core decides with.
    pub policy: Policy,
    /// `now` for the core.
    pub clock: Clock,
}

/// Waits for notifications on `notify` to pause: until none came for `quiet`, or `longest`
/// passed. Timers only: the workers read the time from their clock alone.
pub(crate) async fn settle(notify: &tokio::sync::Notify, quiet: std::time::Duration, longest: std::time::Duration) {
    let longest = tokio::time::sleep(longest);
    tokio::pin!(longest);
    loop {
        tokio::select! {
            _ = &mut longest => return,
            notified = tokio::time::timeout(quiet, notify.notified()) => {
                if notified.is_err() {
                    return;
                }
            }
        }
    }
}

/// Adds a signal for every boosted instance whose node is still there but whose signal is not
/// (its Event expired, or a restart came after that): the ledger remembers it was at risk, so its
/// drain still happens and its boost is still given back.
pub(crate) fn remember_boosted(state: &mut ClusterState, ledger: &BoostLedger) {
    let signalled: BTreeSet<_> = state.signals.iter().map(|s| s.instance.clone()).collect();
    for record in &ledger.records {
        for instance in record.instances.iter().filter(|i| !signalled.contains(*i)) {
            let Some(node) = state.nodes.values().find(|n| n.instance.as_ref() == Some(instance)) else { continue };
            state.signals.push(Signal {
                instance: instance.clone(),
                node: node.name.clone(),
                kind: SignalKind::Rebalance,
                observed_at: record.at,
                evidence: Evidence::Ledger,
                notice_deadline: None,
            });
        }
    }
}

/// One consistent observation, ready for the core.
#[derive(Debug)]
pub(crate) struct Observation {
    /// Groups, nodes (with their groups), signals (with those the ledger remembers) and the ledger.
    pub snapshot: Snapshot,
    /// Nodes carrying the scale-down protection.
    pub protected: BTreeSet<NodeName>,
    /// When the watch first saw each signalled instance.
    pub first_seen: BTreeMap<InstanceId, Timestamp>,
}

impl<A: AutoScaling, C: ClusterView, L: LedgerStore, W, E> WorkerContext<A, C, L, W, E> {
    /// The cluster, the ledger and the groups as one snapshot; `None` while a watch has not
    /// synced (nothing is decided on a partial view).
    pub(crate) async fn observe(&self) -> Result<Option<Observation>, AwsError> {
        let Some(mut state) = self.cluster.current() else { return Ok(None) };
        let ledger = self.ledger.current().await;
        remember_boosted(&mut state, &ledger);
        let groups = self.groups.resolve(&self.aws, &mut state, &ledger).await?;
        let mut snapshot = Snapshot {
            groups,
            nodes: state.nodes,
            signals: state.signals,
            ledger,
            capacity_failures: self.groups.capacity_failures(),
            ..Snapshot::default()
        };
        self.groups.fill_instance_facts(&self.aws, &mut snapshot).await;
        Ok(Some(Observation { snapshot, protected: state.protected, first_seen: state.first_seen }))
    }
}
