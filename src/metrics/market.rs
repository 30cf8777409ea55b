//! What the spot market does to the cluster, and what the daemon learnt of it: pool memory's
//! counts and conversion estimates, how recommendations were answered, and the costs `simulate`
//! also reports (boost node-seconds, needless drains, pods killed, capacity gap). Labels are
//! groups, zones and small fixed sets, never nodes or pods.

use prometheus::{CounterVec, GaugeVec, IntCounterVec, Opts, Registry};

use super::{counter, PREFIX};
use crate::core::{Conversion, Learned};

/// Pool memory and the costs of interruptions.
pub struct MarketMetrics {
    recommendations: IntCounterVec,
    interruptions: IntCounterVec,
    resolved: IntCounterVec,
    failed_launches: IntCounterVec,
    conversion: GaugeVec,
    observations: GaugeVec,
    answers: IntCounterVec,
    boost_node_seconds: CounterVec,
    needless_drains: IntCounterVec,
    pods_killed: IntCounterVec,
    capacity_gap: CounterVec,
}

fn float_counter(r: &Registry, name: &str, help: &str, labels: &[&str]) -> CounterVec {
    let c = CounterVec::new(Opts::new(name, help).namespace(PREFIX), labels).expect("valid counter");
    r.register(Box::new(c.clone())).expect("unique metric");
    c
}

fn float_gauge(r: &Registry, name: &str, help: &str, labels: &[&str]) -> GaugeVec {
    let g = GaugeVec::new(Opts::new(name, help).namespace(PREFIX), labels).expect("valid gauge");
    r.register(Box::new(g.clone())).expect("unique metric");
    g
}

impl MarketMetrics {
    pub(super) fn register(r: &Registry) -> Self {
        MarketMetrics {
            recommendations: counter(
                r,
                "rebalance_recommendations_total",
                "Trusted rebalance recommendations pool memory counted, by group and zone.",
                &["group", "zone"],
            ),
            interruptions: counter(
                r,
                "interruptions_total",
                "Spot interruptions EC2 confirmed, by group and zone.",
                &["group", "zone"],
            ),
            resolved: counter(
                r,
                "rebalance_recommendations_resolved_total",
                "Recommendations resolved: followed by their interruption within --pool-memory-window, \
                 not followed, or censored (the instance went before either).",
                &["group", "outcome"],
            ),
            failed_launches: counter(
                r,
                "pool_failed_launches_total",
                "Failed launches pool memory counted, by group, zone and reason.",
                &["group", "zone", "reason"],
            ),
            conversion: float_gauge(
                r,
                "rebalance_conversion_ratio",
                "Share of the group's recommendations followed by an interruption: the estimate and its 90 % \
                 interval (bound=estimate|low|high), decayed over --pool-memory-half-life.",
                &["group", "bound"],
            ),
            observations: float_gauge(
                r,
                "rebalance_conversion_observations",
                "Resolved recommendations (decayed) the group's conversion estimate rests on.",
                &["group"],
            ),
            answers: counter(
                r,
                "rebalance_answers_total",
                "Boosts for rebalance recommendations by how they answer them (replace or standby) and why.",
                &["group", "answer", "why"],
            ),
            boost_node_seconds: float_counter(
                r,
                "boost_node_seconds_total",
                "Node-seconds of capacity the group's open boosts added and had not given back.",
                &["group"],
            ),
            needless_drains: counter(
                r,
                "needless_drains_total",
                "Nodes drained for a rebalance recommendation alone, with no interruption notice for their \
                 instance by the end of the drain.",
                &["group"],
            ),
            pods_killed: counter(
                r,
                "pods_killed_by_interruption_total",
                "Pods still on a node when its instance's interruption deadline came.",
                &["group"],
            ),
            capacity_gap: float_counter(
                r,
                "capacity_gap_pod_seconds_total",
                "Pod-seconds the replacements of pods displaced from the group's at-risk nodes (evicted, deleted \
                 at the deadline, or left to the instance's end) spent Pending.",
                &["group"],
            ),
        }
    }

    pub(super) fn collectors(&self) -> Vec<&dyn prometheus::core::Collector> {
        vec![
            &self.recommendations,
            &self.interruptions,
            &self.resolved,
            &self.failed_launches,
            &self.conversion,
            &self.observations,
            &self.answers,
            &self.boost_node_seconds,
            &self.needless_drains,
            &self.pods_killed,
            &self.capacity_gap,
        ]
    }

    /// Counts what one round of learning changed.
    pub fn learned(&self, learned: &Learned) {
        for pool in &learned.recommendations {
            self.recommendations.with_label_values(&[pool.group.as_str(), &pool.zone]).inc();
        }
        for pool in &learned.interruptions {
            self.interruptions.with_label_values(&[pool.group.as_str(), &pool.zone]).inc();
        }
        for (pool, _) in &learned.converted {
            self.resolved.with_label_values(&[pool.group.as_str(), "followed"]).inc();
        }
        for pool in &learned.lapsed {
            self.resolved.with_label_values(&[pool.group.as_str(), "not-followed"]).inc();
        }
        for pool in &learned.censored {
            self.resolved.with_label_values(&[pool.group.as_str(), "censored"]).inc();
        }
        for (pool, reason) in &learned.failed_launches {
            self.failed_launches.with_label_values(&[pool.group.as_str(), &pool.zone, reason]).inc();
        }
    }

    /// Sets `group`'s conversion estimate.
    pub fn conversion(&self, group: &str, c: &Conversion) {
        for (bound, value) in [("estimate", c.estimate), ("low", c.low), ("high", c.high)] {
            self.conversion.with_label_values(&[group, bound]).set(value);
        }
        self.observations.with_label_values(&[group]).set(c.observations);
    }

    /// Counts one boost's answer to its recommendations.
    pub fn answered(&self, group: &str, answer: &str, why: &str) {
        self.answers.with_label_values(&[group, answer, why]).inc();
    }

    /// Adds boosted node-seconds.
    pub fn boost_node_seconds(&self, group: &str, seconds: f64) {
        if seconds > 0.0 {
            self.boost_node_seconds.with_label_values(&[group]).inc_by(seconds);
        }
    }

    /// Counts a needless drain.
    pub fn needless_drain(&self, group: &str) {
        self.needless_drains.with_label_values(&[group]).inc();
    }

    /// Adds pod-seconds of capacity gap.
    pub fn capacity_gap(&self, group: &str, pod_seconds: f64) {
        if pod_seconds > 0.0 {
            self.capacity_gap.with_label_values(&[group]).inc_by(pod_seconds);
        }
    }

    /// The capacity gap counted so far, over every group.
    pub fn capacity_gap_total(&self) -> f64 {
        use prometheus::core::Collector;
        self.capacity_gap
            .collect()
            .iter()
            .flat_map(|family| family.get_metric())
            .map(|m| m.get_counter().get_value())
            .sum()
    }

    /// Counts pods killed with their instance.
    pub fn pods_killed(&self, group: &str, pods: u64) {
        self.pods_killed.with_label_values(&[group]).inc_by(pods);
    }
}
