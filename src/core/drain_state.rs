//! What the drainer keeps between passes: the drains under way, their eviction progress, and the
//! drains that ended. The planners (`drain` for the next batches, `draining` for a whole pass)
//! read it; only a draining pass returns its next version.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::model::{GroupName, InstanceId, NodeName, Pod, PodUid, Timestamp};

/// A drain the worker has started.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DrainStarted {
    /// The group.
    pub group: GroupName,
    /// The node's instance.
    pub instance: InstanceId,
    /// When the batch started.
    pub started_at: Timestamp,
    /// Terminate with decrement once drained (see [`super::drain_batches::DrainTarget::decrement`]).
    #[serde(default)]
    pub decrement: bool,
    /// When the instance goes, for a node with an interruption notice: its pods are evicted all
    /// at once, longest grace period first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<Timestamp>,
    /// The instance AWS took first whose boosted node this drain gives back (see
    /// [`super::give_back`]): never terminated unless fully drained.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gives_back: Option<InstanceId>,
}

/// How a drain ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FinishedDrain {
    /// Every evictable pod left.
    Drained,
    /// `--drain-timeout` passed first.
    TimedOut,
}

/// What the drain worker has done so far (kept by the worker, passed back to every plan).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DrainState {
    /// Drains under way, by node.
    pub in_progress: BTreeMap<NodeName, DrainStarted>,
    /// Drains that ended, by instance (a node name may come back with a new instance).
    pub finished: BTreeMap<InstanceId, FinishedDrain>,
    /// When each group's last batch started.
    pub(crate) last_batch_at: BTreeMap<GroupName, Timestamp>,
    /// Eviction progress per draining node.
    #[serde(default)]
    pub evictions: BTreeMap<NodeName, NodeEvictions>,
}

/// Eviction progress on one draining node.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeEvictions {
    /// PodDisruptionBudget refusals in a row.
    pub(crate) refusals: u32,
    /// No eviction on the node before this (the backoff after a refusal).
    pub(crate) retry_at: Option<Timestamp>,
    /// UIDs of the pods already evicted: they may take their grace period to go.
    pub(crate) evicted: BTreeSet<PodUid>,
    /// Whether this drain's first refusal was reported.
    pub(crate) told_blocked: bool,
    /// Pods a PodDisruptionBudget refused and that have not gone since, with the budget named.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) held: BTreeMap<PodUid, Option<String>>,
    /// Pods deleted gracefully at the deadline: never evicted nor deleted again.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub(crate) forced: BTreeSet<PodUid>,
    /// Whether the pods held at the deadline were told.
    #[serde(default)]
    pub(crate) told_held: bool,
    /// The watch has shown the node cordoned since the drain started. Until then an uncordoned
    /// node is the drain's own cordon not seen yet, not an operator's uncordon.
    pub(crate) seen_cordoned: bool,
    /// The evictable pods a live read of the node found, since the last pass: the next pass
    /// evicts those the view lacks and ends the drain only if the read found none. It counts for
    /// that one pass.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) live: Option<Vec<Pod>>,
}

impl DrainState {
    /// Folds a live read of a draining node's pods (asked for by
    /// [`super::DrainingPlan::verify`]) into its progress, for the next pass. Returns whether the
    /// read found no evictable pod, so the next pass may end the drain.
    pub fn record_live_read(&mut self, node: &NodeName, pods: Vec<Pod>) -> bool {
        if !self.in_progress.contains_key(node) {
            return false;
        }
        let evictable: Vec<Pod> = pods.into_iter().filter(|p| p.class.is_evictable()).collect();
        let empty = evictable.is_empty();
        self.evictions.entry(node.clone()).or_default().live = Some(evictable);
        empty
    }

    /// Takes back a graceful deletion that was not made (the call failed or was not answered):
    /// the next pass plans it again.
    pub fn unforce(&mut self, node: &NodeName, uid: &PodUid) {
        if let Some(progress) = self.evictions.get_mut(node) {
            progress.forced.remove(uid);
        }
    }
}
