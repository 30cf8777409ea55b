//! What the scaler reports: boosts by outcome, the reaction time, group sizes, give-backs,
//! fallbacks and the stages of a boosting pass.

use super::*;

/// What the scaler reports: boosts, give-backs, reaction time, and (leader only) the sizes of the
/// groups it acts on.
pub struct ScalerMetrics {
    /// Boost decisions by group and outcome.
    boosts: IntCounterVec,
    /// Replacement nodes added by open boosts and not given back yet.
    boosted_nodes_in_flight: IntGaugeVec,
    /// Desired capacity per group, as last described or written.
    asg_desired: IntGaugeVec,
    /// MaxSize per group.
    asg_max: IntGaugeVec,
    /// Signal first seen by the watch → AWS answering the write for it.
    reaction: Histogram,
    /// How long each stage of a scaler pass that wrote took: where a reaction's time goes.
    stages: HistogramVec,
    /// Boosted nodes given back because AWS took their at-risk instance first.
    give_backs: IntCounterVec,
    /// Age of the oldest open boost per group, in seconds: a boost that waits this long for Ready
    /// replacements, or for its drains, is holding capacity the group pays for.
    oldest_boost_age: IntGaugeVec,
    /// Launches of boosted groups that failed or made no progress, by group and reason.
    launch_failures: IntCounterVec,
    /// Fallback groups refused for a failing group, by the failing group and why.
    fallbacks_refused: IntCounterVec,
    /// Nodes added ahead for pool-mates of a confirmed interruption, by group.
    boosted_ahead: IntCounterVec,
    /// Nodes that run on a fallback for boosts now over, by the fallback.
    fallback_nodes: IntGaugeVec,
    /// Fallback nodes given back to their own group, by that group.
    returned_to_spot: IntCounterVec,
    /// How long capacity returned to its own group had run on a fallback.
    time_on_fallback: Histogram,
}

impl ScalerMetrics {
    pub(super) fn register(r: &Registry) -> Self {
        let reaction = Histogram::with_opts(
            HistogramOpts::new("reaction_seconds", "Signal first seen by the watch to AWS answering the write for it.")
                .namespace(PREFIX)
                .buckets(vec![0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0]),
        )
        .expect("valid histogram");
        r.register(Box::new(reaction.clone())).expect("unique metric");
        let time_on_fallback = Histogram::with_opts(
            HistogramOpts::new(
                "time_on_fallback_seconds",
                "How long capacity a boost moved to a fallback ran there before it returned to its own group.",
            )
            .namespace(PREFIX)
            .buckets(vec![
                300.0,
                600.0,
                1800.0,
                3600.0,
                3.0 * 3600.0,
                6.0 * 3600.0,
                12.0 * 3600.0,
                24.0 * 3600.0,
            ]),
        )
        .expect("valid histogram");
        r.register(Box::new(time_on_fallback.clone())).expect("unique metric");
        ScalerMetrics {
            fallback_nodes: gauge_vec(
                r,
                "fallback_nodes",
                "Nodes that run on a fallback group for boosts now over, until they return to their own group.",
                &["group"],
            ),
            returned_to_spot: counter(
                r,
                "returned_to_spot_total",
                "Fallback nodes replaced in their own group, drained and terminated with decrement, by that group.",
                &["group"],
            ),
            time_on_fallback,
            boosts: counter(r, "boosts_total", "Boost decisions by group and outcome.", &["group", "outcome"]),
            boosted_nodes_in_flight: gauge_vec(
                r,
                "boosted_nodes_in_flight",
                "Nodes added by open boosts and not given back yet.",
                &["group"],
            ),
            asg_desired: gauge_vec(r, "asg_desired_capacity", "Desired capacity per group.", &["group"]),
            asg_max: gauge_vec(r, "asg_max_size", "MaxSize per group.", &["group"]),
            reaction,
            stages: histogram_vec(
                r,
                "scaler_stage_seconds",
                "Duration of each stage of a scaler pass that boosted (observe, plan, ledger-save, write).",
                vec![0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5],
                &["stage"],
            ),
            boosted_ahead: counter(
                r,
                "pool_mate_boosted_nodes_total",
                "Nodes added ahead for nodes sharing a capacity pool with a confirmed spot interruption, by group.",
                &["group"],
            ),
            give_backs: counter(
                r,
                "give_backs_total",
                "Boosted nodes given back after AWS reclaimed their at-risk instance first, by group and outcome.",
                &["group", "outcome"],
            ),
            oldest_boost_age: gauge_vec(
                r,
                "oldest_boost_age_seconds",
                "Age of the oldest open boost per group (leader only).",
                &["group"],
            ),
            launch_failures: counter(
                r,
                "launch_failures_total",
                "Launches of boosted groups that failed (reason: EC2's capacity code, or configuration) or made no \
                 progress within --launch-timeout (no-progress), by group.",
                &["group", "reason"],
            ),
            fallbacks_refused: counter(
                r,
                "fallbacks_refused_total",
                "Groups a failing group's spots-booster.io/fallback-groups tag names that may not take its nodes \
                 (not-this-cluster, not-selected, other-namespace, eks-managed), by the failing group; the boost waits instead.",
                &["group", "reason"],
            ),
        }
    }

    pub(super) fn collectors(&self) -> Vec<&dyn Collector> {
        vec![
            &self.boosts,
            &self.boosted_nodes_in_flight,
            &self.asg_desired,
            &self.asg_max,
            &self.reaction,
            &self.stages,
            &self.give_backs,
            &self.oldest_boost_age,
            &self.launch_failures,
            &self.fallbacks_refused,
            &self.fallback_nodes,
            &self.returned_to_spot,
            &self.time_on_fallback,
        ]
    }

    /// Exports the nodes running on each fallback for boosts now over (the leader's view).
    pub(crate) fn on_fallback(&self, by_group: &BTreeMap<&str, u32>) {
        self.fallback_nodes.reset();
        for (group, nodes) in by_group {
            self.fallback_nodes.with_label_values(&[group]).set(i64::from(*nodes));
        }
    }

    /// Fallback nodes returned to their own group so far, every group together.
    pub fn returned_to_spot_total(&self) -> u64 {
        self.returned_to_spot
            .collect()
            .iter()
            .flat_map(|family| family.get_metric())
            .map(|m| m.get_counter().get_value() as u64)
            .sum()
    }

    /// Counts `nodes` returned to `group` after `on_fallback` on a fallback.
    pub(crate) fn returned_to_spot(&self, group: &str, nodes: u32, on_fallback: Duration) {
        self.returned_to_spot.with_label_values(&[group]).inc_by(u64::from(nodes));
        for _ in 0..nodes {
            self.time_on_fallback.observe(on_fallback.as_secs_f64());
        }
    }

    /// Counts one fallback refused for `group` (told once while the refusal lasts).
    pub(crate) fn fallback_refused(&self, group: &str, reason: crate::core::FallbackRefusal) {
        self.fallbacks_refused.with_label_values(&[group, reason.as_str()]).inc();
    }

    /// Counts one failed or stalled launch of a boosted group.
    pub(crate) fn launch_failure(&self, group: &str, reason: &str) {
        self.launch_failures.with_label_values(&[group, reason]).inc();
    }

    /// Counts one boost outcome.
    pub fn boost(&self, group: &str, outcome: BoostOutcome) {
        self.boosts.with_label_values(&[group, outcome.as_str()]).inc();
    }

    /// Counts `nodes` added ahead for pool-mates in `group`.
    pub(crate) fn boosted_ahead(&self, group: &str, nodes: u32) {
        self.boosted_ahead.with_label_values(&[group]).inc_by(u64::from(nodes));
    }

    /// Counts one give-back outcome.
    pub(crate) fn give_back(&self, group: &str, outcome: GiveBackOutcome) {
        self.give_backs.with_label_values(&[group, outcome.as_str()]).inc();
    }

    /// Records one reaction time.
    pub(crate) fn observe_reaction(&self, d: Duration) {
        self.reaction.observe(d.as_secs_f64());
    }

    /// Records how long one stage of a boosting pass took.
    pub(crate) fn observe_stage(&self, stage: &str, d: Duration) {
        self.stages.with_label_values(&[stage]).observe(d.as_secs_f64());
    }

    /// Notes a desired capacity just written or seen.
    pub(crate) fn desired(&self, group: &str, desired: u32) {
        self.asg_desired.with_label_values(&[group]).set(i64::from(desired));
    }

    /// Exports a group's desired capacity and MaxSize (the leader's view).
    pub(crate) fn group_size(&self, group: &str, desired: u32, max: u32) {
        self.asg_desired.with_label_values(&[group]).set(i64::from(desired));
        self.asg_max.with_label_values(&[group]).set(i64::from(max));
    }

    /// Exports a group's open boosts: nodes added and not given back yet, and the age of the
    /// oldest, in seconds (0 without one).
    pub(crate) fn open_boosts(&self, group: &str, in_flight: i64, oldest_age_seconds: i64) {
        self.boosted_nodes_in_flight.with_label_values(&[group]).set(in_flight);
        self.oldest_boost_age.with_label_values(&[group]).set(oldest_age_seconds);
    }

    /// Drops every group's sizes: only the leader reports what it acts on (with two replicas,
    /// sums and rates of a follower's copies would double every group's numbers).
    pub(crate) fn forget_group_sizes(&self) {
        for family in [
            &self.asg_desired,
            &self.asg_max,
            &self.boosted_nodes_in_flight,
            &self.oldest_boost_age,
            &self.fallback_nodes,
        ] {
            family.reset();
        }
    }
}
