//! What the drainer reports: drains by outcome and how long they took, evictions, terminations,
//! the drains in progress, and what a notice's deadline held or overrode.

use super::*;

/// What the drainer reports.
pub struct DrainerMetrics {
    /// Drains by group and outcome.
    drains: IntCounterVec,
    /// Evictions by group and outcome.
    evictions: IntCounterVec,
    /// Nodes draining now, by group.
    in_progress: IntGaugeVec,
    /// How long drains took, by outcome.
    duration: HistogramVec,
    /// Instances terminated by group and whether desired capacity was decremented.
    terminations: IntCounterVec,
    /// Terminations with decrement in groups whose `AZRebalance` process is active.
    az_rebalance_exposed: IntCounterVec,
    /// Pods deleted past their budget at an interruption's deadline, by group.
    pdb_overridden: IntCounterVec,
    /// Pods budgets still held when an interruption's deadline came, by group.
    held_at_deadline: IntCounterVec,
}

impl DrainerMetrics {
    pub(super) fn register(r: &Registry) -> Self {
        DrainerMetrics {
            drains: counter(r, "drains_total", "Drains by group and outcome.", &["group", "outcome"]),
            evictions: counter(r, "evictions_total", "Evictions by group and outcome.", &["group", "outcome"]),
            in_progress: gauge_vec(r, "drains_in_progress", "Nodes draining now.", &["group"]),
            duration: histogram_vec(
                r,
                "drain_duration_seconds",
                "Drain start to its end, by outcome.",
                vec![5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 3600.0],
                &["outcome"],
            ),
            terminations: counter(
                r,
                "terminations_total",
                "Drained instances terminated, by group and whether desired capacity was decremented.",
                &["group", "decrement"],
            ),
            pdb_overridden: counter(
                r,
                "pdb_overridden_total",
                "Pods a PodDisruptionBudget still refused, deleted gracefully before their instance's interruption \
                 (--interruption-force-at-deadline), by group.",
                &["group"],
            ),
            held_at_deadline: counter(
                r,
                "pods_held_at_deadline_total",
                "Pods PodDisruptionBudgets still held on a node when its interruption deadline came, by group: \
                 the instance's end kills them.",
                &["group"],
            ),
            az_rebalance_exposed: counter(
                r,
                "az_rebalance_exposed_terminations_total",
                "Terminations with decrement in groups whose AZRebalance process is active: Auto Scaling may \
                 then terminate instances of its own choosing, undrained, to even out Availability Zones.",
                &["group"],
            ),
        }
    }

    pub(super) fn collectors(&self) -> Vec<&dyn Collector> {
        vec![
            &self.drains,
            &self.evictions,
            &self.in_progress,
            &self.duration,
            &self.terminations,
            &self.az_rebalance_exposed,
            &self.pdb_overridden,
            &self.held_at_deadline,
        ]
    }

    /// Counts a termination with decrement in a group whose `AZRebalance` process is active.
    pub(crate) fn az_rebalance_exposed(&self, group: &str) {
        self.az_rebalance_exposed.with_label_values(&[group]).inc();
    }

    /// Counts one drain outcome, and how long an ended drain took.
    pub fn drain(&self, group: &str, outcome: DrainOutcome, took: Option<Duration>) {
        self.drains.with_label_values(&[group, outcome.as_str()]).inc();
        if let Some(took) = took {
            self.duration.with_label_values(&[outcome.as_str()]).observe(took.as_secs_f64());
        }
    }

    /// Counts one eviction outcome.
    pub fn eviction(&self, group: &str, outcome: EvictionOutcome) {
        self.evictions.with_label_values(&[group, outcome.as_str()]).inc();
    }

    /// Counts one pod deleted past its budget at an interruption's deadline.
    pub(crate) fn pdb_overridden(&self, group: &str) {
        self.pdb_overridden.with_label_values(&[group]).inc();
    }

    /// Counts the pods budgets held on a node when its interruption deadline came.
    pub(crate) fn held_at_deadline(&self, group: &str, pods: usize) {
        self.held_at_deadline.with_label_values(&[group]).inc_by(pods as u64);
    }

    /// Counts one termination of a drained instance, and whether it gave a boosted node back.
    pub(crate) fn terminated(&self, group: &str, decremented: bool) {
        self.terminations.with_label_values(&[group, if decremented { "true" } else { "false" }]).inc();
    }

    /// Sets how many nodes of `group` are draining.
    pub(crate) fn in_progress(&self, group: &str, nodes: i64) {
        self.in_progress.with_label_values(&[group]).set(nodes);
    }

    /// Drops the drains in progress: a follower runs none.
    pub(crate) fn forget_in_progress(&self) {
        self.in_progress.reset();
    }
}
