//! Every metric the daemon exports, on one non-global registry. Labels carry groups and small fixed
//! sets of outcomes, never node or pod names, so cardinality stays bounded by the number of groups.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

mod drainer;
mod market;
mod scaler;
mod writes;

pub use drainer::DrainerMetrics;
pub use market::MarketMetrics;
pub use scaler::ScalerMetrics;
pub(crate) use writes::WriteLabel;
pub use writes::WriteMetrics;

use prometheus::core::Collector;
use prometheus::{
    Encoder, GaugeVec, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
};

/// A hook run just before every scrape, for values read from elsewhere (AWS call counts, the CA
/// status age).
pub(crate) type ScrapeHook = Box<dyn Fn(&Metrics) + Send + Sync>;

/// Counters an AWS operation has reached so far, as the call counter reports them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct AwsCounts {
    /// Operations made.
    pub calls: u64,
    /// Operations that failed.
    pub errors: u64,
    /// Of those, throttled.
    pub throttles: u64,
}

/// Declares a label enum: its values, each with the one string it exports as.
macro_rules! labels {
    ($(#[$doc:meta])* $name:ident { $($(#[$vdoc:meta])* $variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum $name {
            $($(#[$vdoc])* $variant),+
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The label value.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text),+
                }
            }
        }
    };
}

labels!(
    /// `boosts_total{outcome}`.
    BoostOutcome {
        /// Desired capacity raised.
        Written => "written",
        /// `--dry-run` kept the write back.
        DryRun => "dry-run",
        /// Desired changed since the plan; re-planned.
        Raced => "raced",
        /// The write failed.
        Failed => "failed",
        /// The group could not grow (MaxSize, backoff, budget).
        Held => "held",
        /// The at-risk pods fit elsewhere.
        NoNodeNeeded => "no-node-needed",
        /// The ledger held at its save already covered one of its instances (another replica's
        /// or an earlier pass's boost): not opened, not written.
        Covered => "covered",
        /// A follower left it to the leader.
        NotLeader => "not-leader",
        /// Replacements not Ready within `--replacement-timeout`.
        ExpiredReplacementTimeout => "expired-replacement-timeout",
        /// Replacements Ready, but a pod's opt-out still deferred the drain at `--replacement-timeout`.
        ExpiredDrainDeferred => "expired-drain-deferred",
        /// Open longer than `--max-boost-age`.
        ExpiredMaxAge => "expired-max-age",
        /// Nodes its group could not launch moved to a fallback group (counted under the fallback).
        FellBack => "fell-back",
        /// Every group it may use failed to launch its nodes: parked until a retry, counted under
        /// its own group.
        FallbackExhausted => "fallback-exhausted",
    }
);

labels!(
    /// `give_backs_total{outcome}`.
    GiveBackOutcome {
        /// A node of the group was chosen to be drained and terminated with decrement.
        NodeChosen => "node-chosen",
        /// The chosen node was drained and terminated with decrement: the node is given back.
        Written => "written",
        /// The group is at its floor already, or the boost returned all it added.
        AtFloor => "at-floor",
        /// No node could be drained for it: the capacity is left to Cluster Autoscaler.
        LeftToClusterAutoscaler => "left-to-cluster-autoscaler",
        /// A follower left it to the leader.
        NotLeader => "not-leader",
    }
);

labels!(
    /// `skipped_not_leader_total{action}`.
    SkippedAction {
        /// Raising or lowering desired capacity.
        SetDesiredCapacity => "set-desired-capacity",
        /// Cordoning and evicting.
        Drain => "drain",
        /// Terminating a drained instance.
        Terminate => "terminate",
        /// Suspending or resuming `AZRebalance`.
        SuspendProcesses => "suspend-processes",
        /// Adding or removing a replacement's scale-down protection.
        ScaleDownProtection => "scale-down-protection",
        /// A Kubernetes Event.
        Event => "event",
        /// Saving the boost ledger.
        LedgerSave => "ledger-save",
    }
);

labels!(
    /// `parse_errors_total{source}`.
    ParseSource {
        /// Cluster Autoscaler's status ConfigMap.
        CaStatus => "ca-status",
        /// An Event about a Node.
        NthEvent => "nth-event",
        /// A Node object.
        Node => "node",
        /// A Pod object.
        Pod => "pod",
    }
);

labels!(
    /// `drains_total{outcome}` and `drain_duration_seconds{outcome}`.
    DrainOutcome {
        /// A batch started on the node.
        Started => "started",
        /// A node with an interruption notice started draining before its replacements were
        /// Ready: its deadline left no more time to wait.
        StartedBeforeReplacements => "started-before-replacements",
        /// Every evictable pod left.
        Drained => "drained",
        /// `--drain-timeout` passed first.
        TimedOut => "timed-out",
    }
);

labels!(
    /// `evictions_total{outcome}`.
    EvictionOutcome {
        /// The pod is evicted.
        Evicted => "evicted",
        /// The pod was already gone (404 or another UID).
        Gone => "gone",
        /// A PodDisruptionBudget refused (429).
        BlockedByPdb => "blocked-by-pdb",
        /// Any other error; retried next round.
        Failed => "failed",
    }
);

labels!(
    /// `instancegroup_reconciles_total{result}`.
    ReconcileResult {
        /// Reconciled (or waiting as planned).
        Ok => "ok",
        /// The spec is invalid; the status says why.
        Invalid => "invalid",
        /// Failed; retried with backoff.
        Failed => "failed",
        /// Failed on something that passes (throttling, a conflict); retried soon.
        Transient => "transient",
    }
);

labels!(
    /// `leader_transitions_total{change}`.
    LeaseChange {
        /// This replica took the lease.
        Acquired => "acquired",
        /// This replica lost or released it.
        Lost => "lost",
    }
);

/// The daemon's metrics: one registry, and one struct per component that reports, each holding
/// only its own families and writing them through typed methods.
pub struct Metrics {
    registry: Registry,
    /// NTH signals and the notices not believed (the watch and the scaler).
    pub signals: SignalMetrics,
    /// Boosts, give-backs and the group sizes the scaler acts on.
    pub scaler: ScalerMetrics,
    /// Drains, evictions and terminations.
    pub drainer: DrainerMetrics,
    /// The watches and what they parse.
    pub cluster: ClusterMetrics,
    /// The lease, and the writes a follower leaves to the leader.
    pub lease: LeaseMetrics,
    /// The boost ledger's store.
    pub ledger: LedgerMetrics,
    /// AWS operations, as the call counter reports them.
    pub aws: AwsMetrics,
    /// The InstanceGroup reconciler.
    pub instancegroups: InstanceGroupMetrics,
    /// Pool memory, and what interruptions cost.
    pub market: MarketMetrics,
    /// Every write the executor made, by kind and answer.
    pub writes: WriteMetrics,
    /// Always 1; its labels say which build runs.
    build_info: IntGaugeVec,
    hooks: Mutex<Vec<ScrapeHook>>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

const PREFIX: &str = "spots_booster";

fn counter(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    let c = IntCounterVec::new(Opts::new(name, help).namespace(PREFIX), labels).expect("valid counter");
    registry.register(Box::new(c.clone())).expect("unique metric");
    c
}

fn gauge_vec(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
    let g = IntGaugeVec::new(Opts::new(name, help).namespace(PREFIX), labels).expect("valid gauge");
    registry.register(Box::new(g.clone())).expect("unique metric");
    g
}

fn int_gauge(registry: &Registry, name: &str, help: &str) -> IntGauge {
    let g = IntGauge::with_opts(Opts::new(name, help).namespace(PREFIX)).expect("valid gauge");
    registry.register(Box::new(g.clone())).expect("unique metric");
    g
}

fn histogram_vec(registry: &Registry, name: &str, help: &str, buckets: Vec<f64>, labels: &[&str]) -> HistogramVec {
    let h = HistogramVec::new(HistogramOpts::new(name, help).namespace(PREFIX).buckets(buckets), labels)
        .expect("valid histogram");
    registry.register(Box::new(h.clone())).expect("unique metric");
    h
}

/// The standard `process_*` families (CPU seconds, resident memory, open file descriptors, start
/// time), where the platform has them.
fn register_process_metrics(registry: &Registry) {
    #[cfg(target_os = "linux")]
    registry.register(Box::new(prometheus::process_collector::ProcessCollector::for_self())).expect("unique metric");
    #[cfg(not(target_os = "linux"))]
    let _ = registry;
}

/// NTH signals first seen, and the notices not acted on because nothing vouches for them.
pub struct SignalMetrics {
    /// NTH signals first seen, by group and kind.
    seen: IntCounterVec,
    /// Interruption notices not acted on, by reason (see [`crate::core::Distrust`]); each counted once.
    untrusted: IntCounterVec,
    /// Signals that made no instance at risk, by the core's reason; each counted once.
    dropped: IntCounterVec,
    /// Nodes an operator opted out, as the leader last saw them.
    opted_out: IntGauge,
}

impl SignalMetrics {
    fn register(r: &Registry) -> Self {
        SignalMetrics {
            seen: counter(r, "signals_total", "NTH signals first seen, by group and kind.", &["group", "kind"]),
            untrusted: counter(
                r,
                "signals_untrusted_total",
                "Interruption notices not acted on because nothing vouches for them, by reason.",
                &["reason"],
            ),
            dropped: counter(
                r,
                "signals_dropped_total",
                "Signals that made no instance at risk, by reason (the untrusted ones included).",
                &["reason"],
            ),
            opted_out: int_gauge(
                r,
                "nodes_opted_out",
                "Nodes an operator opted out with spots-booster.io/disabled=true (the leader's count; 0 on a follower).",
            ),
        }
    }

    fn collectors(&self) -> Vec<&dyn Collector> {
        vec![&self.seen, &self.untrusted, &self.dropped, &self.opted_out]
    }

    /// Counts one signal that made no instance at risk.
    pub(crate) fn dropped(&self, reason: &crate::core::DropReason) {
        self.dropped.with_label_values(&[reason.as_str()]).inc();
    }

    /// Sets how many nodes are opted out.
    pub(crate) fn opted_out_nodes(&self, nodes: usize) {
        self.opted_out.set(i64::try_from(nodes).unwrap_or(i64::MAX));
    }

    /// Counts a signal the first time its group is known.
    pub(crate) fn seen(&self, group: &str, kind: crate::core::SignalKind) {
        self.seen.with_label_values(&[group, kind.as_str()]).inc();
    }

    /// Counts one notice not acted on, with the core's verdict on why it is not believed.
    pub fn untrusted(&self, why: crate::core::Distrust) {
        self.untrusted.with_label_values(&[why.as_str()]).inc();
    }
}

/// What the watches report.
pub struct ClusterMetrics {
    /// Watch stream errors (each followed by a backed-off restart), by resource.
    watch_restarts: IntCounterVec,
    /// 1 once every watch has synced.
    pub synced: IntGauge,
    /// Seconds since Cluster Autoscaler last updated its status; no sample at all while the
    /// ConfigMap is missing (a `-1` would read as a fresh status to `max()` and `> 600` alike).
    ca_status_age: GaugeVec,
    /// 1 when the CA status ConfigMap exists and parses.
    ca_status_found: IntGauge,
    /// Inputs that could not be understood, by source.
    parse_errors: IntCounterVec,
    /// Kubernetes requests that waited for `--kube-api-qps`/`--kube-api-burst`.
    kube_throttled: IntCounterVec,
}

impl ClusterMetrics {
    fn register(r: &Registry) -> Self {
        let ca_status_age = GaugeVec::new(
            Opts::new(
                "ca_status_age_seconds",
                "Seconds since Cluster Autoscaler last updated its status; absent while it is missing.",
            )
            .namespace(PREFIX),
            &[],
        )
        .expect("valid gauge");
        r.register(Box::new(ca_status_age.clone())).expect("unique metric");
        ClusterMetrics {
            watch_restarts: counter(
                r,
                "watch_restarts_total",
                "Watch errors, each followed by a backed-off restart, by resource.",
                &["resource"],
            ),
            synced: int_gauge(r, "synced", "1 once every watch has synced."),
            ca_status_age,
            ca_status_found: int_gauge(r, "ca_status_found", "1 when the CA status ConfigMap exists and parses."),
            parse_errors: counter(
                r,
                "parse_errors_total",
                "Inputs that could not be understood, by source.",
                &["source"],
            ),
            kube_throttled: counter(
                r,
                "kube_requests_throttled_total",
                "Kubernetes requests that waited for the daemon's own budget (--kube-api-qps, --kube-api-burst).",
                &[],
            ),
        }
    }

    fn collectors(&self) -> Vec<&dyn Collector> {
        vec![
            &self.watch_restarts,
            &self.synced,
            &self.ca_status_age,
            &self.ca_status_found,
            &self.parse_errors,
            &self.kube_throttled,
        ]
    }

    /// Brings `kube_requests_throttled_total` up to the client's own count.
    pub(crate) fn sync_kube_throttled(&self, total: u64) {
        let counter = self.kube_throttled.with_label_values(&[] as &[&str]);
        counter.inc_by(total.saturating_sub(counter.get()));
    }

    /// Counts one watch error (a backed-off restart follows).
    pub(crate) fn watch_restarted(&self, resource: &str) {
        self.watch_restarts.with_label_values(&[resource]).inc();
    }

    /// The parse-error counter of one source.
    pub(crate) fn parse_error(&self, source: ParseSource) -> IntCounter {
        self.parse_errors.with_label_values(&[source.as_str()])
    }

    /// Whether the CA status ConfigMap exists and parses.
    pub(crate) fn ca_status_found(&self, found: bool) {
        self.ca_status_found.set(i64::from(found));
    }

    /// Sets the CA status age, or removes the sample while there is no status.
    pub(crate) fn set_ca_status_age(&self, age: Option<f64>) {
        match age {
            Some(seconds) => self.ca_status_age.with_label_values(&[] as &[&str]).set(seconds),
            None => self.ca_status_age.reset(),
        }
    }
}

/// What leader election reports, and the writes a follower leaves to the leader.
pub struct LeaseMetrics {
    /// 1 while this replica holds the lease.
    pub leader: IntGauge,
    /// Times this replica gained or lost the lease.
    transitions: IntCounterVec,
    /// Writes a follower left to the leader, by action.
    skipped: IntCounterVec,
}

impl LeaseMetrics {
    fn register(r: &Registry) -> Self {
        LeaseMetrics {
            leader: int_gauge(r, "leader", "1 while this replica holds the lease."),
            transitions: counter(
                r,
                "leader_transitions_total",
                "Times this replica gained or lost the lease.",
                &["change"],
            ),
            skipped: counter(
                r,
                "skipped_not_leader_total",
                "Writes left to the leader by this replica, by action.",
                &["action"],
            ),
        }
    }

    fn collectors(&self) -> Vec<&dyn Collector> {
        vec![&self.leader, &self.transitions, &self.skipped]
    }

    /// Counts one gain or loss of the lease.
    pub(crate) fn change(&self, change: LeaseChange) {
        self.transitions.with_label_values(&[change.as_str()]).inc();
    }

    /// Counts one write left to the leader.
    pub(crate) fn not_leader(&self, action: SkippedAction) {
        self.skipped.with_label_values(&[action.as_str()]).inc();
    }
}

/// What the boost ledger's store reports.
pub struct LedgerMetrics {
    /// Loads and saves that failed, by operation: nothing is planned from a ledger that cannot be
    /// read, so a rise here means boosting has stopped.
    errors: IntCounterVec,
}

impl LedgerMetrics {
    fn register(r: &Registry) -> Self {
        LedgerMetrics {
            errors: counter(
                r,
                "ledger_errors_total",
                "Boost ledger loads and saves that failed, by operation.",
                &["operation"],
            ),
        }
    }

    fn collectors(&self) -> Vec<&dyn Collector> {
        vec![&self.errors]
    }

    /// Counts a load or save that failed.
    pub(crate) fn error(&self, error: &crate::ports::LedgerError) {
        self.errors.with_label_values(&[error.operation()]).inc();
    }
}

/// AWS operations, brought up to the call counter's totals at every scrape.
pub struct AwsMetrics {
    calls: IntCounterVec,
    errors: IntCounterVec,
    throttles: IntCounterVec,
    seen: Mutex<BTreeMap<String, AwsCounts>>,
}

impl AwsMetrics {
    fn register(r: &Registry) -> Self {
        AwsMetrics {
            calls: counter(r, "aws_calls_total", "AWS operations by name.", &["operation"]),
            errors: counter(r, "aws_errors_total", "Failed AWS operations by name.", &["operation"]),
            throttles: counter(r, "aws_throttles_total", "Throttled AWS operations by name.", &["operation"]),
            seen: Mutex::new(BTreeMap::new()),
        }
    }

    fn collectors(&self) -> Vec<&dyn Collector> {
        vec![&self.calls, &self.errors, &self.throttles]
    }

    /// Brings the counters up to the call counter's totals.
    pub(crate) fn sync(&self, totals: &BTreeMap<String, AwsCounts>) {
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        for (operation, now) in totals {
            let before = seen.get(operation).copied().unwrap_or_default();
            let labels = [operation.as_str()];
            self.calls.with_label_values(&labels).inc_by(now.calls.saturating_sub(before.calls));
            self.errors.with_label_values(&labels).inc_by(now.errors.saturating_sub(before.errors));
            self.throttles.with_label_values(&labels).inc_by(now.throttles.saturating_sub(before.throttles));
            seen.insert(operation.clone(), *now);
        }
    }
}

/// What the InstanceGroup reconciler reports.
pub struct InstanceGroupMetrics {
    /// Reconciles by result.
    pub reconciles: IntCounterVec,
    /// InstanceGroups by `status.currentState`.
    pub states: IntGaugeVec,
}

impl InstanceGroupMetrics {
    fn register(r: &Registry) -> Self {
        InstanceGroupMetrics {
            reconciles: counter(
                r,
                "instancegroup_reconciles_total",
                "InstanceGroup reconciles by result.",
                &["result"],
            ),
            states: gauge_vec(r, "instancegroups", "InstanceGroups by state.", &["state"]),
        }
    }

    fn collectors(&self) -> Vec<&dyn Collector> {
        vec![&self.reconciles, &self.states]
    }

    /// Counts one reconcile.
    pub(crate) fn reconciled(&self, result: ReconcileResult) {
        self.reconciles.with_label_values(&[result.as_str()]).inc();
    }

    /// Exports how many InstanceGroups are in each state, replacing the last count.
    pub(crate) fn states<'s>(&self, states: impl IntoIterator<Item = &'s str>) {
        self.states.reset();
        for state in states {
            self.states.with_label_values(&[state]).inc();
        }
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Every metric, registered on a registry of its own.
    pub fn new() -> Self {
        let r = Registry::new();
        let build_info = gauge_vec(&r, "build_info", "Always 1; labels name the running build.", &["version"]);
        build_info.with_label_values(&[env!("CARGO_PKG_VERSION")]).set(1);
        register_process_metrics(&r);
        Metrics {
            signals: SignalMetrics::register(&r),
            scaler: ScalerMetrics::register(&r),
            drainer: DrainerMetrics::register(&r),
            cluster: ClusterMetrics::register(&r),
            lease: LeaseMetrics::register(&r),
            ledger: LedgerMetrics::register(&r),
            aws: AwsMetrics::register(&r),
            instancegroups: InstanceGroupMetrics::register(&r),
            market: MarketMetrics::register(&r),
            writes: WriteMetrics::register(&r),
            build_info,
            registry: r,
            hooks: Mutex::new(Vec::new()),
        }
    }

    /// Adds a hook run before every scrape.
    pub(crate) fn on_scrape(&self, hook: ScrapeHook) {
        self.hooks.lock().unwrap_or_else(|p| p.into_inner()).push(hook);
    }

    /// The Prometheus text exposition of every metric, after running the scrape hooks.
    pub fn encode(&self) -> String {
        for hook in self.hooks.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            hook(self);
        }
        let mut out = Vec::new();
        // Encoding only fails on a writer error; a Vec never fails.
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut out);
        String::from_utf8(out).unwrap_or_default()
    }

    /// Names of every metric family exported (with the prefix), whether or not it has a value yet.
    pub fn names(&self) -> Vec<String> {
        let mut collectors: Vec<&dyn Collector> = vec![&self.build_info];
        collectors.extend(self.signals.collectors());
        collectors.extend(self.scaler.collectors());
        collectors.extend(self.drainer.collectors());
        collectors.extend(self.cluster.collectors());
        collectors.extend(self.lease.collectors());
        collectors.extend(self.ledger.collectors());
        collectors.extend(self.aws.collectors());
        collectors.extend(self.instancegroups.collectors());
        collectors.extend(self.market.collectors());
        collectors.extend(self.writes.collectors());
        let mut names: Vec<String> =
            collectors.iter().flat_map(|c| c.desc().into_iter().map(|d| d.fq_name.clone())).collect();
        names.sort();
        names.dedup();
        names
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aws_counters_follow_the_totals_without_double_counting() {
        let m = Metrics::new();
        let mut totals = BTreeMap::new();
        totals.insert("SetDesiredCapacity".to_string(), AwsCounts { calls: 3, errors: 1, throttles: 1 });
        m.aws.sync(&totals);
        m.aws.sync(&totals);
        totals.insert("SetDesiredCapacity".to_string(), AwsCounts { calls: 5, errors: 1, throttles: 1 });
        m.aws.sync(&totals);
        let text = m.encode();
        assert!(text.contains("spots_booster_aws_calls_total{operation=\"SetDesiredCapacity\"} 5"), "{text}");
        assert!(text.contains("spots_booster_aws_throttles_total{operation=\"SetDesiredCapacity\"} 1"), "{text}");
    }

    #[test]
    fn every_name_has_the_prefix_and_counters_end_in_total() {
        let m = Metrics::new();
        m.scaler.boost("g", BoostOutcome::Written);
        m.signals.seen("g", crate::core::SignalKind::Rebalance);
        m.drainer.drain("g", DrainOutcome::Started, None);
        m.drainer.eviction("g", EvictionOutcome::Evicted);
        m.scaler.observe_reaction(Duration::from_millis(30));
        for name in m.names() {
            assert!(name.starts_with("spots_booster_"), "{name}");
        }
        let text = m.encode();
        for line in text.lines().filter(|l| l.starts_with("# TYPE") && l.ends_with("counter")) {
            assert!(line.split(' ').nth(2).unwrap().ends_with("_total"), "{line}");
        }
        assert!(text.contains("spots_booster_reaction_seconds_count 1"), "{text}");
    }

    #[test]
    fn names_lists_every_registered_family_even_before_a_value() {
        let m = Metrics::new();
        let registered = m.registry.gather().len();
        assert!(m.names().len() >= registered);
        for name in [
            "spots_booster_evictions_total",
            "spots_booster_reaction_seconds",
            "spots_booster_leader",
            "spots_booster_writes_total",
        ] {
            assert!(m.names().contains(&name.to_string()), "{name}");
        }
        assert_eq!(m.names().len(), 53);
    }

    #[test]
    fn build_info_and_process_metrics_are_exported() {
        let text = Metrics::new().encode();
        let version = env!("CARGO_PKG_VERSION");
        assert!(text.contains(&format!("spots_booster_build_info{{version=\"{version}\"}} 1")), "{text}");
        #[cfg(target_os = "linux")]
        for family in ["process_resident_memory_bytes", "process_cpu_seconds_total", "process_start_time_seconds"] {
            assert!(text.contains(&format!("\n{family} ")), "{family} missing from {text}");
        }
    }

    #[test]
    fn scrape_hooks_run_before_encoding() {
        let m = Metrics::new();
        m.on_scrape(Box::new(|m| m.cluster.set_ca_status_age(Some(42.0))));
        assert!(m.encode().contains("spots_booster_ca_status_age_seconds 42"));
        let missing = Metrics::new();
        missing.on_scrape(Box::new(|m| m.cluster.set_ca_status_age(None)));
        assert!(!missing.encode().contains("spots_booster_ca_status_age_seconds "), "absent, not -1");
    }
}
