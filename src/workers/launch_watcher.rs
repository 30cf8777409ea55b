//! The launch watcher: while a boost's nodes may still be launching, it reads the group's scaling
//! activities every few seconds and says at once when a launch failed, instead of letting the
//! boost wait out `--replacement-timeout` in silence. A pool without capacity
//! (`CapacityUnavailable`) and a broken configuration (`LaunchFailed`) are told apart; a group
//! that shows no new instance within `--launch-timeout`, whatever AWS says, is `LaunchStalled`
//! and counts as without capacity, so its boost falls back too.
//! Each is a Warning Event on the boost's at-risk nodes, a log line and
//! `spots_booster_launch_failures_total`.
//!
//! Bounded: only groups with a boost in flight whose live desired capacity is above the instances
//! they list (nodes still to launch), one batched describe and one activities read per such group
//! per pass, only the activities since the group's oldest open boost. Only the leader reads.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tracing::warn;

use super::told_once::ToldOnce;
use super::{Ports, WorkerContext};
use crate::core::{
    classify, failed_pool, launching_groups, stalled_boosts, GroupName, InstanceId, LaunchFailure, NodeName, PoolKey,
    ScalingActivity, Sighting, Timestamp,
};
use crate::ports::{AutoScaling, AwsError, ClusterView, NodeEvent};
use crate::supervise::{Heartbeat, Heartbeats, WORKER_SILENCE_LIMIT};

/// How the watcher paces itself.
#[derive(Debug, Clone)]
pub struct LaunchWatchSettings {
    /// How often groups with nodes still to launch are read.
    pub poll: Duration,
    /// A boosted group with nodes still to launch this long after its boost is told stalled.
    pub launch_timeout: Duration,
}

impl Default for LaunchWatchSettings {
    fn default() -> Self {
        LaunchWatchSettings { poll: Duration::from_secs(5), launch_timeout: Duration::from_secs(180) }
    }
}

/// What one pass found.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct LaunchReport {
    /// Groups read (nodes still to launch).
    pub read: Vec<GroupName>,
    /// New failed launches, by group.
    pub failed: Vec<(GroupName, LaunchFailure)>,
    /// Groups newly told stalled.
    pub stalled: Vec<GroupName>,
}

/// The launch watcher worker.
pub struct LaunchWatcher<P: Ports> {
    ctx: Arc<WorkerContext<P>>,
    settings: LaunchWatchSettings,
    /// Failed activities already told, by id.
    told: ToldOnce<String>,
    /// Boosts already told stalled, by group and decision time.
    stalled: BTreeSet<(GroupName, Timestamp)>,
    /// Since when each group has listed fewer instances than its desired capacity, without a
    /// break: a moment's gap (an instance terminated, its replacement not listed yet) is no stall.
    short_since: BTreeMap<GroupName, Timestamp>,
    heartbeat: Option<Heartbeat>,
    /// Woken when a pool runs out of capacity, so the scaler moves the boost at once.
    scaler: Option<Arc<tokio::sync::Notify>>,
}

impl<P: Ports> LaunchWatcher<P> {
    /// A watcher over `ctx`.
    pub fn new(ctx: Arc<WorkerContext<P>>, settings: LaunchWatchSettings) -> Self {
        LaunchWatcher {
            ctx,
            settings,
            told: ToldOnce::default(),
            stalled: BTreeSet::new(),
            short_since: BTreeMap::new(),
            heartbeat: None,
            scaler: None,
        }
    }

    /// Wakes `scaler` when a pool runs out of capacity.
    pub fn waking(mut self, scaler: Arc<tokio::sync::Notify>) -> Self {
        self.scaler = Some(scaler);
        self
    }

    /// Registers the watcher's heartbeat with `beats`.
    pub(crate) fn beating(mut self, beats: &Heartbeats) -> Self {
        self.heartbeat = Some(beats.register("worker:launches", self.settings.poll + WORKER_SILENCE_LIMIT));
        self
    }

    /// Runs until `shutdown` turns true: a pass at once, then every `poll`.
    pub(crate) async fn run(self, shutdown: watch::Receiver<bool>) -> Self {
        super::run_worker(self, shutdown).await
    }

    /// One pass: reads the groups with nodes still to launch and tells what went wrong.
    pub async fn tick(&mut self) -> Result<LaunchReport, AwsError> {
        let mut report = LaunchReport::default();
        if !self.ctx.leadership.is_leader() {
            return Ok(report);
        }
        let ledger = self.ctx.ledger.current().await;
        let launching = launching_groups(&ledger);
        if launching.is_empty() {
            self.told.clear();
        }
        self.stalled.retain(|(g, at)| {
            ledger
                .records
                .iter()
                .any(|r| (&r.group == g && r.at == *at) || r.moved.iter().any(|p| &p.group == g && p.at == *at))
        });
        self.short_since.retain(|g, _| launching.contains_key(g));
        if launching.is_empty() {
            return Ok(report);
        }
        let names: Vec<GroupName> = launching.keys().cloned().collect();
        let live = self.ctx.aws.describe_groups(&names).await?;
        let now = (self.ctx.clock)();
        for group in live {
            // One read per group, each bounded by the AWS timeouts: the beat shows the pass moves.
            if let Some(h) = &self.heartbeat {
                h.beat();
            }
            self.ctx.groups.note_desired(&group.name, group.desired).await;
            let listed = u32::try_from(group.members().count()).unwrap_or(u32::MAX);
            if group.desired <= listed {
                self.short_since.remove(&group.name);
                continue;
            }
            let short_since = *self.short_since.entry(group.name.clone()).or_insert(now);
            let since = launching[&group.name];
            report.read.push(group.name.clone());
            let activities = self.ctx.aws.scaling_activities(&group.name, since).await?;
            // Oldest first, so Events read in the order AWS failed.
            for activity in activities.iter().rev() {
                let Some(failure) = classify(activity) else { continue };
                if !self.told.first(activity.id.clone(), ()) {
                    continue;
                }
                if matches!(failure, LaunchFailure::Capacity { .. }) {
                    self.ctx.groups.note_capacity_failure(&group.name, activity.started);
                    if let Some(scaler) = &self.scaler {
                        scaler.notify_one();
                    }
                }
                self.tell_failure(&group.name, &ledger_instances(&ledger, &group.name), &failure, activity.started)
                    .await;
                let tenant = group.tags.get(crate::ports::INSTANCE_GROUP_NAMESPACE_TAG).cloned();
                self.remember_failure(&group.name, tenant, activity, &failure, now).await;
                report.failed.push((group.name.clone(), failure));
            }
            let missing = group.desired - listed;
            for stall in stalled_boosts(&ledger, &group.name, short_since, now, self.settings.launch_timeout) {
                if self.stalled.insert((group.name.clone(), stall.asked_at)) {
                    self.tell_stalled(&group.name, &stall.instances.iter().cloned().collect::<Vec<_>>(), missing).await;
                    report.stalled.push(group.name.clone());
                    self.ctx.groups.note_capacity_failure(&group.name, now);
                    if let Some(scaler) = &self.scaler {
                        scaler.notify_one();
                    }
                }
            }
        }
        Ok(report)
    }

    /// Counts the failure in its pool's memory (type or zone `unknown` where AWS did not say).
    async fn remember_failure(
        &self,
        group: &GroupName,
        tenant: Option<String>,
        activity: &ScalingActivity,
        failure: &LaunchFailure,
        now: Timestamp,
    ) {
        let (instance_type, zone) = failed_pool(activity);
        let unknown = || "unknown".to_string();
        let pool = PoolKey {
            group: group.clone(),
            instance_type: instance_type.unwrap_or_else(unknown),
            zone: zone.unwrap_or_else(unknown),
        };
        let reason = match failure {
            LaunchFailure::Capacity { code } => code.clone(),
            LaunchFailure::Configuration { .. } => "configuration".to_string(),
        };
        let seen = [Sighting::LaunchFailed { pool, reason, tenant }];
        let learned = self.ctx.ledger.learn(&seen, &|_| true, &self.ctx.policy.memory, now).await;
        self.ctx.metrics.market.learned(&learned);
    }

    async fn tell_failure(&self, group: &GroupName, instances: &[InstanceId], failure: &LaunchFailure, at: Timestamp) {
        let label = match failure {
            LaunchFailure::Capacity { code } => code.as_str(),
            LaunchFailure::Configuration { .. } => "configuration",
        };
        self.ctx.metrics.scaler.launch_failure(group.as_str(), label);
        warn!(%group, reason = label, at_ms = at.as_millis(), ?failure, "a boosted group could not launch a replacement");
        let events = self.on_nodes_of(instances, |node| NodeEvent::launch_failed(node, group, failure));
        super::publish_all(&self.ctx.events, events).await;
    }

    async fn tell_stalled(&self, group: &GroupName, instances: &[InstanceId], missing: u32) {
        let stalled = |node: &NodeName| NodeEvent::launch_stalled(node, group, missing, self.settings.launch_timeout);
        let timeout_s = self.settings.launch_timeout.as_secs();
        warn!(%group, missing, timeout_s, "a boosted group launched none of its missing instances within --launch-timeout");
        self.ctx.metrics.scaler.launch_failure(group.as_str(), "no-progress");
        let events = self.on_nodes_of(instances, stalled);
        super::publish_all(&self.ctx.events, events).await;
    }

    /// The Event `build` makes for the Node of each of `instances` the cluster still has.
    fn on_nodes_of(&self, instances: &[InstanceId], build: impl Fn(&NodeName) -> NodeEvent) -> Vec<NodeEvent> {
        let Some(state) = self.ctx.cluster.current() else { return Vec::new() };
        let by_instance: BTreeMap<&InstanceId, &crate::core::Node> =
            state.nodes.values().filter_map(|n| n.instance.as_ref().map(|i| (i, n))).collect();
        instances.iter().filter_map(|i| by_instance.get(i)).map(|node| build(&node.name)).collect()
    }
}

/// The at-risk instances of open boosts whose nodes are asked of `group` (their own or moved there).
fn ledger_instances(ledger: &crate::core::BoostLedger, group: &GroupName) -> Vec<InstanceId> {
    ledger
        .records
        .iter()
        .filter(|r| r.expired.is_none())
        .filter(|r| &r.group == group || r.moved.iter().any(|p| &p.group == group && p.asked() && p.added > 0))
        .flat_map(|r| r.instances.iter().cloned())
        .collect()
}

impl<P: Ports> super::Worker for LaunchWatcher<P> {
    type Error = AwsError;
    const PASS_AT_START: bool = true;
    const NAME: &'static str = "launches";

    fn heartbeat(&self) -> Option<&Heartbeat> {
        self.heartbeat.as_ref()
    }

    fn metrics(&self) -> &crate::metrics::Metrics {
        &self.ctx.metrics
    }

    async fn next_pass_due(&mut self) {
        tokio::time::sleep(self.settings.poll).await;
    }

    async fn pass_once(&mut self) -> Result<(), AwsError> {
        self.tick().await.map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::{BoostRecord, Node, Policy};
    use crate::fakes::{AsgCall, FakeAutoScaling, FakeRig};
    use crate::metrics::Metrics;

    const SPOT: &str = "Could not launch Spot Instances. InsufficientInstanceCapacity - There is no Spot capacity \
                        available that matches your request. Launching EC2 instance failed.";

    /// Group `a` boosted from 3 to 5 for n1 (at risk) at 10 s; it lists its 3 old instances only.
    async fn boosted() -> (FakeRig, Arc<crate::fakes::FakeContext>, Arc<Metrics>) {
        let aws = FakeAutoScaling::default()
            .with_group("a", 5, 10)
            .with_instance("a", "i-n1")
            .with_instance("a", "i-n2")
            .with_instance("a", "i-n3")
            .with_group("b", 3, 10)
            .with_instance("b", "i-m1");
        let rig = FakeRig::new(aws);
        for n in ["n1", "n2", "n3"] {
            rig.cluster.put_node(Node::test(n, "a"));
        }
        let metrics = Arc::new(Metrics::new());
        let start = tokio::time::Instant::now();
        let clock: crate::workers::Clock =
            Arc::new(move || Timestamp::from_millis(10_000 + i64::try_from(start.elapsed().as_millis()).unwrap()));
        let ctx = rig.context(Policy::default(), clock, metrics.clone()).await;
        let mut record = BoostRecord::test("a", &["i-n1"], 2, 10_000);
        record.before = 3;
        ctx.ledger.update(|l| l.record(record)).await.unwrap();
        (rig, ctx, metrics)
    }

    #[tokio::test(start_paused = true)]
    async fn a_pool_without_capacity_is_told_at_once_and_once() {
        let (rig, ctx, metrics) = boosted().await;
        let mut w = LaunchWatcher::new(ctx, LaunchWatchSettings::default());
        assert_eq!(w.tick().await.unwrap().failed, Vec::new(), "nothing failed yet");

        rig.aws.fail_launch("a", SPOT, Timestamp::from_millis(12_000));
        rig.aws.fail_launch("a", "an older failure, before the boost", Timestamp::from_millis(9_000));
        let report = w.tick().await.unwrap();
        assert_eq!(report.read, vec![GroupName::from("a")], "b has no boost in flight: not read");
        assert_eq!(
            report.failed,
            vec![(GroupName::from("a"), LaunchFailure::Capacity { code: "InsufficientInstanceCapacity".into() })]
        );
        assert_eq!(rig.events.reasons_for("n1"), vec!["CapacityUnavailable"]);
        assert!(rig.events.reasons_for("n2").is_empty(), "only the boost's at-risk nodes are told");
        assert!(metrics
            .encode()
            .contains("spots_booster_launch_failures_total{group=\"a\",reason=\"InsufficientInstanceCapacity\"} 1"));

        assert!(w.tick().await.unwrap().failed.is_empty(), "each failed activity is told once");
        let reads = rig.aws.calls().iter().filter(|c| matches!(c, AsgCall::Activities(_))).count();
        assert_eq!(reads, 3, "one activities read per pass for the one group with nodes to launch");
    }

    #[tokio::test(start_paused = true)]
    async fn a_broken_configuration_is_not_capacity_and_silence_past_the_launch_timeout_is_told() {
        let (rig, ctx, metrics) = boosted().await;
        let mut w = LaunchWatcher::new(ctx, LaunchWatchSettings::default());
        let broken =
            "The specified launch template, with template ID lt-0e4f, does not exist. Launching EC2 instance failed.";
        rig.aws.fail_launch("a", broken, Timestamp::from_millis(11_000));
        let report = w.tick().await.unwrap();
        assert!(matches!(&report.failed[..], [(_, LaunchFailure::Configuration { .. })]), "{report:?}");
        assert_eq!(rig.events.reasons_for("n1"), vec!["LaunchFailed"]);

        tokio::time::advance(Duration::from_secs(179)).await;
        assert!(w.tick().await.unwrap().stalled.is_empty());
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(w.tick().await.unwrap().stalled, vec![GroupName::from("a")]);
        assert!(w.tick().await.unwrap().stalled.is_empty(), "told once");
        assert_eq!(rig.events.reasons_for("n1"), vec!["LaunchFailed", "LaunchStalled"]);
        let text = metrics.encode();
        assert!(text.contains("spots_booster_launch_failures_total{group=\"a\",reason=\"configuration\"} 1"), "{text}");
        assert!(text.contains("spots_booster_launch_failures_total{group=\"a\",reason=\"no-progress\"} 1"), "{text}");

        // The instances arrive: nothing more is read.
        for i in ["i-r1", "i-r2"] {
            rig.aws.clone().with_instance("a", i);
        }
        let before = rig.aws.calls().len();
        assert!(w.tick().await.unwrap().read.is_empty());
        assert!(!rig.aws.calls()[before..].iter().any(|c| matches!(c, AsgCall::Activities(_))));
    }

    /// `rig`'s context on a clock that follows Tokio's paused time from 10 s, sizing one node per
    /// at-risk node, and a rebalance notice on `n1`, cordoned.
    async fn rebalance_on_n1(rig: &FakeRig) -> (Arc<crate::fakes::FakeContext>, Arc<Metrics>, crate::workers::Clock) {
        use crate::core::{Evidence, NodeName, Signal, SignalKind, SizingMode};
        let start = tokio::time::Instant::now();
        let clock: crate::workers::Clock =
            Arc::new(move || Timestamp::from_millis(10_000 + i64::try_from(start.elapsed().as_millis()).unwrap()));
        let policy = Policy { sizing: SizingMode::Count, ..Policy::default() };
        let metrics = Arc::new(Metrics::new());
        let ctx = rig.context(policy, clock.clone(), metrics.clone()).await;
        rig.cluster.edit(|s| s.nodes.get_mut(&NodeName::from("n1")).unwrap().cordoned = true);
        rig.cluster.signal(Signal {
            instance: "i-n1".into(),
            node: "n1".into(),
            kind: SignalKind::Rebalance,
            observed_at: clock(),
            evidence: Evidence::Event,
            notice_deadline: None,
        });
        (ctx, metrics, clock)
    }

    #[tokio::test(start_paused = true)]
    async fn fallbacks_of_another_cluster_or_another_tenant_are_refused_told_once_and_passed_over() {
        use crate::ports::INSTANCE_GROUP_NAMESPACE_TAG as NAMESPACE;
        use crate::workers::scaler::{Scaler, ScalerSettings};
        // `spot-a` was made for an InstanceGroup of namespace `team`; `team-a-gpu` for one of
        // `team-a` (the same name as `a-gpu` of `team`); `theirs` is another cluster's.
        let aws = FakeAutoScaling::default()
            .with_group("spot-a", 1, 10)
            .with_tag("spot-a", NAMESPACE, "team")
            .with_tag("spot-a", crate::ports::FALLBACK_GROUPS_TAG, "theirs, team-a-gpu, spot-b")
            .with_instance("spot-a", "i-n1")
            .with_cluster_group("theirs", "other", 0, 10)
            .with_group("team-a-gpu", 0, 10)
            .with_tag("team-a-gpu", NAMESPACE, "team-a")
            .with_group("spot-b", 0, 10)
            .with_tag("spot-b", NAMESPACE, "team");
        let rig = FakeRig::new(aws);
        let mut node = Node::test("n1", "spot-a").with_pods(2, 500, 1 << 30);
        node.group = None;
        rig.cluster.put_node(node);
        let (ctx, metrics, clock) = rebalance_on_n1(&rig).await;
        let mut scaler = Scaler::new(ctx.clone(), ScalerSettings::default());
        let mut watcher = LaunchWatcher::new(ctx.clone(), LaunchWatchSettings::default()).waking(scaler.waker());
        scaler.tick().await.unwrap();
        tokio::time::advance(Duration::from_secs(4)).await;
        rig.aws.fail_launch("spot-a", SPOT, clock());
        tokio::time::advance(Duration::from_secs(1)).await;
        watcher.tick().await.unwrap();
        for _ in 0..3 {
            scaler.tick().await.unwrap();
            tokio::time::advance(Duration::from_secs(5)).await;
            watcher.tick().await.unwrap();
        }
        assert_eq!((rig.aws.desired("theirs"), rig.aws.desired("team-a-gpu")), (0, 0), "neither is touched");
        assert_eq!(rig.aws.desired("spot-b"), 1, "the tenant's own fallback takes the node");
        let reasons = rig.events.reasons_for("n1");
        assert_eq!(reasons.iter().filter(|r| **r == "FallbackRefused").count(), 2, "told once each: {reasons:?}");
        let notes = rig.events.notes_for("n1");
        assert!(notes.iter().any(|n| n.contains("theirs is refused: its tags do not name this cluster")), "{notes:?}");
        let other = "team-a-gpu is refused: it was made for an InstanceGroup of another namespace";
        assert!(notes.iter().any(|n| n.contains(other)), "{notes:?}");
        let scrape = metrics.encode();
        for reason in ["not-this-cluster", "other-namespace"] {
            let line = format!("spots_booster_fallbacks_refused_total{{group=\"spot-a\",reason=\"{reason}\"}} 1");
            assert!(scrape.contains(&line), "{line}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_boost_into_a_pool_without_capacity_lands_in_its_fallback_once_and_drains_there() {
        use crate::core::{Evidence, NodeName, Signal, SignalKind};
        use crate::workers::drainer::{Drainer, DrainerSettings};
        use crate::workers::scaler::{Scaler, ScalerSettings};
        let aws = FakeAutoScaling::default()
            .with_group("spot-a", 3, 10)
            .with_tag("spot-a", crate::ports::FALLBACK_GROUPS_TAG, "spot-gone, spot-b")
            .with_instance("spot-a", "i-n1")
            .with_instance("spot-a", "i-n2")
            .with_instance("spot-a", "i-n3")
            .with_group("spot-b", 2, 10)
            .with_instance("spot-b", "i-m1")
            .with_instance("spot-b", "i-m2");
        let rig = FakeRig::new(aws);
        for (n, g) in [("n1", "spot-a"), ("n2", "spot-a"), ("n3", "spot-a"), ("m1", "spot-b"), ("m2", "spot-b")] {
            let mut node = Node::test(n, g).with_pods(2, 500, 1 << 30);
            node.group = None;
            rig.cluster.put_node(node);
        }
        let (ctx, metrics, clock) = rebalance_on_n1(&rig).await;
        let mut scaler = Scaler::new(ctx.clone(), ScalerSettings::default());
        let mut drainer = Drainer::new(ctx.clone(), DrainerSettings::default());
        let mut watcher = LaunchWatcher::new(ctx.clone(), LaunchWatchSettings::default()).waking(scaler.waker());

        scaler.tick().await.unwrap();
        assert_eq!(rig.aws.desired("spot-a"), 4, "boosted where the at-risk node is");
        // spot-a has no spot capacity: Auto Scaling says so a few seconds later.
        tokio::time::advance(Duration::from_secs(4)).await;
        rig.aws.fail_launch("spot-a", SPOT, clock());
        let failed_at = clock();
        tokio::time::advance(Duration::from_secs(1)).await;
        watcher.tick().await.unwrap();
        let report = scaler.tick().await.unwrap();
        let moved_at = clock();
        assert_eq!(report.fell_back, vec![(GroupName::from("spot-a"), GroupName::from("spot-b"), 1)]);
        assert!(moved_at.since(failed_at) <= Duration::from_secs(30), "within 30 s of the failed activity");
        assert_eq!(rig.aws.desired("spot-b"), 3, "the missing node is asked of the fallback");
        assert_eq!(rig.aws.desired("spot-a"), 3, "and the unlaunched one taken back: no instance could go for it");
        assert_eq!(rig.events.reasons_for("n1"), vec!["BoostRequested", "CapacityUnavailable", "BoostFellBack"]);
        let record = ctx.ledger.current().await.records[0].clone();
        assert_eq!((record.added, record.moved.len(), record.moved[0].added), (0, 1, 1));
        assert!(metrics.encode().contains("spots_booster_boosts_total{group=\"spot-b\",outcome=\"fell-back\"} 1"));

        // Nothing moves twice, and nothing more is raised while spot-b's node boots.
        for _ in 0..3 {
            tokio::time::advance(Duration::from_secs(5)).await;
            watcher.tick().await.unwrap();
            scaler.tick().await.unwrap();
        }
        assert_eq!((rig.aws.desired("spot-a"), rig.aws.desired("spot-b")), (3, 3));

        // A second notice in spot-a while it is failing: boosted there, and the scaler wakes at
        // once to move it, without waiting for another failed activity.
        let waker = scaler.waker();
        rig.cluster.edit(|s| s.nodes.get_mut(&NodeName::from("n2")).unwrap().cordoned = true);
        rig.cluster.signal(Signal {
            instance: "i-n2".into(),
            node: "n2".into(),
            kind: SignalKind::Rebalance,
            observed_at: clock(),
            evidence: Evidence::Event,
            notice_deadline: None,
        });
        scaler.tick().await.unwrap();
        assert_eq!(rig.aws.desired("spot-a"), 4);
        tokio::time::timeout(Duration::ZERO, waker.notified()).await.expect("woken to move it");
        let report = scaler.tick().await.unwrap();
        assert_eq!(report.fell_back, vec![(GroupName::from("spot-a"), GroupName::from("spot-b"), 1)]);
        assert_eq!((rig.aws.desired("spot-a"), rig.aws.desired("spot-b")), (3, 4));

        // spot-b's replacements are Ready: n1 and n2 drain onto them and go without decrement
        // (spot-a added nothing it could give back).
        for r in ["r1", "r2"] {
            rig.aws.clone().with_instance("spot-b", &format!("i-{r}"));
            let mut ready = Node::test(r, "spot-b");
            ready.group = None;
            ready.created = clock();
            rig.cluster.put_node(ready);
        }
        let mut terminated = Vec::new();
        for _ in 0..20 {
            scaler.tick().await.unwrap();
            terminated.extend(drainer.tick().await.unwrap().terminated);
            tokio::time::advance(Duration::from_secs(2)).await;
        }
        terminated.sort();
        assert_eq!(terminated, vec![(InstanceId::from("i-n1"), false), (InstanceId::from("i-n2"), false)]);
        let sizes = (rig.aws.desired("spot-a"), rig.aws.desired("spot-b"));
        assert_eq!(sizes, (3, 4), "spot-a never below its size, nothing raised twice");
    }

    /// A rig over `aws` whose groups run `nodes` (name, group), each with two pods, their groups
    /// unknown until resolved through Auto Scaling.
    fn running(aws: FakeAutoScaling, nodes: &[(&str, &str)]) -> FakeRig {
        for (n, g) in nodes {
            aws.clone().with_instance(g, &format!("i-{n}"));
        }
        let rig = FakeRig::new(aws);
        for (n, g) in nodes {
            let mut node = Node::test(n, g).with_pods(2, 500, 1 << 30);
            node.group = None;
            rig.cluster.put_node(node);
        }
        rig
    }

    type FakeScaler = crate::workers::scaler::Scaler<crate::fakes::FakePorts>;
    type FakeWatcher = LaunchWatcher<crate::fakes::FakePorts>;

    /// `spot-a` (3) falls back to `spot-b` (2), then `od` (2); n1 in spot-a has a
    /// recommendation and the scaler boosted spot-a for it.
    async fn boosted_with_two_fallbacks(
    ) -> (FakeRig, Arc<crate::fakes::FakeContext>, Arc<Metrics>, crate::workers::Clock, FakeScaler, FakeWatcher) {
        use crate::workers::scaler::{Scaler, ScalerSettings};
        let aws = FakeAutoScaling::default()
            .with_group("spot-a", 3, 10)
            .with_tag("spot-a", crate::ports::FALLBACK_GROUPS_TAG, "spot-b, od")
            .with_group("spot-b", 2, 10)
            .with_group("od", 2, 10);
        let spot = [("n1", "spot-a"), ("n2", "spot-a"), ("n3", "spot-a"), ("m1", "spot-b"), ("m2", "spot-b")];
        let rig = running(aws, &[spot.as_slice(), &[("o1", "od"), ("o2", "od")]].concat());
        let (ctx, metrics, clock) = rebalance_on_n1(&rig).await;
        let mut scaler = Scaler::new(ctx.clone(), ScalerSettings::default());
        let watcher = LaunchWatcher::new(ctx.clone(), LaunchWatchSettings::default()).waking(scaler.waker());
        scaler.tick().await.unwrap();
        assert_eq!(rig.aws.desired("spot-a"), 4);
        (rig, ctx, metrics, clock, scaler, watcher)
    }

    /// `group` fails to launch for want of spot capacity a few seconds on; the watcher reads it,
    /// and the scaler's next pass answers. Returns that pass's report and how long after the
    /// failed activity it came.
    async fn fails(
        group: &str,
        (rig, clock): (&FakeRig, &crate::workers::Clock),
        (scaler, watcher): (&mut FakeScaler, &mut FakeWatcher),
    ) -> (crate::workers::scaler::TickReport, Duration) {
        tokio::time::advance(Duration::from_secs(4)).await;
        rig.aws.fail_launch(group, SPOT, clock());
        let failed_at = clock();
        tokio::time::advance(Duration::from_secs(1)).await;
        watcher.tick().await.unwrap();
        let report = scaler.tick().await.unwrap();
        (report, clock().since(failed_at))
    }

    #[tokio::test(start_paused = true)]
    async fn a_fallback_without_capacity_passes_the_nodes_on_within_seconds_and_gives_its_raise_back() {
        let (rig, ctx, _, clock, mut scaler, mut watcher) = boosted_with_two_fallbacks().await;
        let (report, _) = fails("spot-a", (&rig, &clock), (&mut scaler, &mut watcher)).await;
        assert_eq!(report.fell_back, vec![(GroupName::from("spot-a"), GroupName::from("spot-b"), 1)]);
        assert_eq!((rig.aws.desired("spot-a"), rig.aws.desired("spot-b")), (3, 3));

        // spot-b is dry too: its missing node goes on to od, and spot-b is lowered by it.
        let (report, took) = fails("spot-b", (&rig, &clock), (&mut scaler, &mut watcher)).await;
        assert_eq!(report.fell_back, vec![(GroupName::from("spot-b"), GroupName::from("od"), 1)]);
        assert!(took <= Duration::from_secs(30), "{took:?} after spot-b's failed activity");
        let sizes = (rig.aws.desired("spot-a"), rig.aws.desired("spot-b"), rig.aws.desired("od"));
        assert_eq!(sizes, (3, 2, 3), "one node asked for, in od only");
        assert_eq!(
            rig.events.reasons_for("n1"),
            vec!["BoostRequested", "CapacityUnavailable", "BoostFellBack", "CapacityUnavailable", "BoostFellBack"]
        );
        let record = ctx.ledger.current().await.records[0].clone();
        let parts: Vec<_> = record.moved.iter().map(|p| (p.group.as_str(), p.added, p.taken_back)).collect();
        assert_eq!(parts, [("spot-b", 0, true), ("od", 1, true)]);

        // Nothing is raised again while od's node boots.
        for _ in 0..3 {
            tokio::time::advance(Duration::from_secs(5)).await;
            watcher.tick().await.unwrap();
            scaler.tick().await.unwrap();
        }
        assert_eq!((rig.aws.desired("spot-a"), rig.aws.desired("spot-b"), rig.aws.desired("od")), (3, 2, 3));
    }

    #[tokio::test(start_paused = true)]
    async fn a_fallback_that_launches_nothing_and_says_nothing_is_passed_over_at_the_launch_timeout() {
        let (rig, _, _, clock, mut scaler, mut watcher) = boosted_with_two_fallbacks().await;
        fails("spot-a", (&rig, &clock), (&mut scaler, &mut watcher)).await;
        assert_eq!(rig.aws.desired("spot-b"), 3);
        // spot-b lists nothing new and AWS records no activity, as moto and sometimes AWS do.
        let mut stalled = Vec::new();
        for _ in 0..19 {
            tokio::time::advance(Duration::from_secs(10)).await;
            stalled.extend(watcher.tick().await.unwrap().stalled);
            scaler.tick().await.unwrap();
        }
        assert_eq!(stalled, vec![GroupName::from("spot-b")], "told once, from the move");
        let sizes = (rig.aws.desired("spot-a"), rig.aws.desired("spot-b"), rig.aws.desired("od"));
        assert_eq!(sizes, (3, 2, 3), "passed on to od and taken back from spot-b");
        assert!(rig.events.reasons_for("n1").contains(&"LaunchStalled"));
    }

    #[tokio::test(start_paused = true)]
    async fn when_every_group_fails_the_boost_says_so_gives_every_raise_back_and_retries_later() {
        let (rig, _, metrics, clock, mut scaler, mut watcher) = boosted_with_two_fallbacks().await;
        fails("spot-a", (&rig, &clock), (&mut scaler, &mut watcher)).await;
        fails("spot-b", (&rig, &clock), (&mut scaler, &mut watcher)).await;
        fails("od", (&rig, &clock), (&mut scaler, &mut watcher)).await;
        let sizes = (rig.aws.desired("spot-a"), rig.aws.desired("spot-b"), rig.aws.desired("od"));
        assert_eq!(sizes, (3, 2, 2), "no group is left counting a node it cannot launch");
        let (reasons, notes) = (rig.events.reasons_for("n1"), rig.events.notes_for("n1"));
        let told: Vec<&String> =
            reasons.iter().zip(&notes).filter(|(r, _)| **r == "FallbackExhausted").map(|(_, n)| n).collect();
        assert_eq!(told.len(), 1, "{reasons:?}");
        assert!(told[0].contains("tried: spot-a, spot-b, od"), "{}", told[0]);
        assert!(metrics
            .encode()
            .contains("spots_booster_boosts_total{group=\"spot-a\",outcome=\"fallback-exhausted\"} 1"));

        // Nothing is asked while the backoff runs; then spot-a is tried again first.
        for _ in 0..10 {
            tokio::time::advance(Duration::from_secs(10)).await;
            watcher.tick().await.unwrap();
            scaler.tick().await.unwrap();
        }
        assert_eq!((rig.aws.desired("spot-a"), rig.aws.desired("spot-b"), rig.aws.desired("od")), (3, 2, 2));
        let mut retried = Vec::new();
        for _ in 0..10 {
            tokio::time::advance(Duration::from_secs(10)).await;
            watcher.tick().await.unwrap();
            retried.extend(scaler.tick().await.unwrap().fell_back);
        }
        assert_eq!(retried, vec![(GroupName::from("spot-a"), GroupName::from("spot-a"), 1)]);
        assert_eq!((rig.aws.desired("spot-a"), rig.aws.desired("spot-b"), rig.aws.desired("od")), (4, 2, 2));
    }

    #[tokio::test(start_paused = true)]
    async fn capacity_left_on_a_fallback_returns_to_its_group_once_it_relaunched_its_own_raising_nothing() {
        use crate::core::NodeName;
        use crate::workers::drainer::{Drainer, DrainerSettings};
        use crate::workers::scaler::{Scaler, ScalerSettings};
        let aws = FakeAutoScaling::default()
            .with_group("spot-a", 3, 10)
            .with_tag("spot-a", crate::ports::FALLBACK_GROUPS_TAG, "spot-b")
            .with_group("spot-b", 2, 10);
        let rig =
            running(aws, &[("n1", "spot-a"), ("n2", "spot-a"), ("n3", "spot-a"), ("m1", "spot-b"), ("m2", "spot-b")]);
        let (ctx, metrics, clock) = rebalance_on_n1(&rig).await;
        let mut scaler = Scaler::new(ctx.clone(), ScalerSettings::default());
        let mut drainer = Drainer::new(ctx.clone(), DrainerSettings::default());
        let mut watcher = LaunchWatcher::new(ctx.clone(), LaunchWatchSettings::default()).waking(scaler.waker());
        scaler.tick().await.unwrap();
        tokio::time::advance(Duration::from_secs(4)).await;
        rig.aws.fail_launch("spot-a", SPOT, clock());
        tokio::time::advance(Duration::from_secs(1)).await;
        watcher.tick().await.unwrap();
        scaler.tick().await.unwrap();
        assert_eq!((rig.aws.desired("spot-a"), rig.aws.desired("spot-b")), (3, 3), "moved to spot-b");

        // spot-b's node joins; n1 drains onto it and goes (spot-a replaces it); the boost closes.
        let join = |name: &str, group: &str| {
            rig.aws.clone().with_instance(group, &format!("i-{name}"));
            let mut node = Node::test(name, group);
            node.group = None;
            node.created = clock();
            rig.cluster.put_node(node);
        };
        join("r1", "spot-b");
        // Each group relaunches what left it without decrement, as Auto Scaling does, unless dry.
        let mut step = async |rounds: usize| {
            let mut terminated = Vec::new();
            for _ in 0..rounds {
                watcher.tick().await.unwrap();
                scaler.tick().await.unwrap();
                for (instance, decremented) in drainer.tick().await.unwrap().terminated {
                    let node = instance.as_str().trim_start_matches("i-").to_string();
                    rig.cluster.remove_node(&node);
                    terminated.push((node, decremented));
                }
                for group in ["spot-a", "spot-b"] {
                    for instance in rig.aws.relaunch(group) {
                        let mut node = Node::test(instance.as_str().trim_start_matches("i-"), group);
                        node.group = None;
                        node.created = clock();
                        rig.cluster.put_node(node);
                    }
                }
                tokio::time::advance(Duration::from_secs(5)).await;
            }
            terminated
        };
        assert_eq!(step(12).await, vec![("n1".to_string(), false)]);
        let ledger = ctx.ledger.current().await;
        assert!(ledger.records.is_empty(), "{:?}", ledger.records);
        assert_eq!((ledger.on_fallback.len(), ledger.on_fallback[0].nodes), (1, 1));
        assert!(metrics.encode().contains("spots_booster_fallback_nodes{group=\"spot-b\"} 1"));

        // Within the interval since spot-a last failed, nothing goes back, and spot-a, still dry,
        // owes the node n1 left without decrement.
        assert!(step(60).await.is_empty());
        assert!(ctx.ledger.current().await.returning.is_empty());
        assert_eq!((rig.aws.desired("spot-a"), rig.aws.desired("spot-b")), (3, 3));
        assert_eq!(rig.aws.instances("spot-a").len(), 2);

        // spot-a launches again and relaunches n1's instance itself: it is at its size, so r1
        // (launched for the move) is surplus. Ten minutes on, it is drained onto spot-a's own
        // nodes and terminated with decrement, raising nothing: both groups end at their size.
        rig.aws.launches_again("spot-a");
        let calls_before = rig.aws.calls().len();
        let terminated = step(60).await;
        assert_eq!(rig.aws.instances("spot-a").len(), 3, "relaunched by its own Auto Scaling");
        assert!(rig.events.reasons_for("r1").contains(&"ReturningToSpot"), "{:?}", rig.events.reasons_for("r1"));
        assert!(rig.cluster.protected().is_empty() || !rig.cluster.protected().contains(&NodeName::from("r1")));
        assert_eq!(terminated, vec![("r1".to_string(), true)]);
        let raised = rig.aws.calls()[calls_before..]
            .iter()
            .any(|c| matches!(c, AsgCall::Raise(w) if w.iter().any(|w| w.group.as_str() == "spot-a")));
        assert!(!raised, "the return raises nothing: {:?}", rig.aws.calls());
        assert_eq!((rig.aws.desired("spot-a"), rig.aws.desired("spot-b")), (3, 2));
        step(2).await;
        let ledger = ctx.ledger.current().await;
        assert!(
            ledger.records.is_empty() && ledger.returning.is_empty() && ledger.on_fallback.is_empty(),
            "{ledger:?}"
        );
        let text = metrics.encode();
        assert!(text.contains("spots_booster_returned_to_spot_total{group=\"spot-a\"} 1"), "{text}");
        assert!(text.contains("spots_booster_time_on_fallback_seconds_count 1"));
        assert!(
            text.contains("spots_booster_terminations_total{decrement=\"true\",group=\"spot-b\"} 1"),
            "terminated and decremented in the fallback it ran in: {text}"
        );
        assert!(!text.contains("spots_booster_fallback_nodes{group=\"spot-b\"} 1"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_group_that_launches_nothing_within_the_launch_timeout_falls_back_though_aws_says_nothing() {
        use crate::workers::scaler::{Scaler, ScalerSettings};
        let (rig, ctx, _) = boosted().await;
        rig.aws.clone().with_tag("a", crate::ports::FALLBACK_GROUPS_TAG, "b");
        let mut scaler = Scaler::new(ctx.clone(), ScalerSettings::default());
        let mut w = LaunchWatcher::new(ctx.clone(), LaunchWatchSettings::default()).waking(scaler.waker());
        w.tick().await.unwrap();
        tokio::time::advance(Duration::from_secs(181)).await;
        assert_eq!(w.tick().await.unwrap().stalled, vec![GroupName::from("a")], "no failed activity, no instance");
        let report = scaler.tick().await.unwrap();
        assert_eq!(report.fell_back, vec![(GroupName::from("a"), GroupName::from("b"), 2)]);
        assert_eq!((rig.aws.desired("a"), rig.aws.desired("b")), (3, 5));
    }

    #[tokio::test(start_paused = true)]
    async fn a_moments_gap_between_an_instance_and_its_replacement_is_no_stall() {
        let (rig, ctx, _) = boosted().await;
        for i in ["i-r1", "i-r2"] {
            rig.aws.clone().with_instance("a", i);
        }
        let mut w = LaunchWatcher::new(ctx, LaunchWatchSettings::default());
        tokio::time::advance(Duration::from_secs(600)).await;
        w.tick().await.unwrap();
        // An at-risk instance goes; its replacement is listed 5 s later.
        rig.aws.remove_instance(&"i-n1".into());
        assert!(w.tick().await.unwrap().stalled.is_empty(), "the boost is old, the gap is not");
        tokio::time::advance(Duration::from_secs(5)).await;
        rig.aws.clone().with_instance("a", "i-r3");
        assert!(w.tick().await.unwrap().stalled.is_empty());
        assert!(rig.events.reasons_for("n1").is_empty());
    }
}
