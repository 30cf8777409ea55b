//! The scaler: wakes on a signal (or the resync tick), lets a burst of signals settle, plans boosts
//! with the core, persists them in the ledger, then raises desired capacity with one guarded
//! write per group.
//!
//! The ledger is saved **before** the AWS write: a crash between the two misses a boost (the next
//! plan sees the instance covered) but can never boost the same instance twice. Writes that lose
//! a race (desired changed since the plan) or fail are taken back out of the ledger and re-planned.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use thiserror::Error;
use tokio::sync::{watch, Notify};
use tokio::time::Instant;
use tracing::{info, warn};

use crate::core::{
    close_finished_boosts, fold_signals, plan_boosts, Boost, BoostLedger, GroupName, Policy, Snapshot, Timestamp,
};
use crate::ports::{
    AutoScaling, AwsError, ClusterView, DesiredWrite, GroupDescription, LedgerError, LedgerStore, TagFilter,
    WriteOutcome,
};

/// How the scaler paces itself.
#[derive(Debug, Clone)]
pub struct ScalerSettings {
    /// After a wake-up, wait until no new signal came for this long, so a burst becomes one plan.
    pub coalesce_quiet: Duration,
    /// …but never longer than this after the first one.
    pub coalesce_max: Duration,
    /// Plan at least this often even without signals.
    pub resync: Duration,
    /// Describe a group again when its cached description is older than this.
    pub group_refresh: Duration,
}

impl Default for ScalerSettings {
    fn default() -> Self {
        ScalerSettings {
            coalesce_quiet: Duration::from_millis(20),
            coalesce_max: Duration::from_millis(250),
            resync: Duration::from_secs(30),
            group_refresh: Duration::from_secs(60),
        }
    }
}

/// Why a tick did nothing useful.
#[derive(Debug, Error)]
pub enum ScalerError {
    /// Some watch has not synced.
    #[error("the cluster view is not synced yet")]
    NotSynced,
    /// Describing groups failed.
    #[error("describing groups failed")]
    Describe(#[source] AwsError),
    /// The guarded write could not even re-read the groups.
    #[error("raising desired capacity failed")]
    Raise(#[source] AwsError),
    /// The ledger could not be saved, so nothing was written to AWS.
    #[error(transparent)]
    Ledger(#[from] LedgerError),
}

/// What one tick did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct TickReport {
    /// Groups whose desired capacity was raised (or would have been, in dry run): `(group, from, to)`.
    pub raised: Vec<(GroupName, u32, u32)>,
    /// Groups whose write lost a race; re-planned at once.
    pub raced: Vec<GroupName>,
    /// Groups whose write failed, with the error category.
    pub failed: Vec<(GroupName, &'static str)>,
    /// At-risk instances held (at max, backoff, …).
    pub held: usize,
}

/// Wall-clock `now` for the core; injected so tests control it.
pub type Clock = Arc<dyn Fn() -> Timestamp + Send + Sync>;

/// The system clock.
pub fn system_clock() -> Clock {
    Arc::new(|| {
        let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        Timestamp::from_millis(i64::try_from(since.as_millis()).unwrap_or(i64::MAX))
    })
}

/// The scaler worker.
pub struct Scaler<A, C, L> {
    aws: A,
    cluster: C,
    ledger_store: L,
    policy: Policy,
    settings: ScalerSettings,
    clock: Clock,
    wake: Arc<Notify>,
    ledger: BoostLedger,
    groups: BTreeMap<GroupName, (GroupDescription, Instant)>,
}

impl<A: AutoScaling, C: ClusterView, L: LedgerStore> Scaler<A, C, L> {
    /// A scaler over these ports.
    pub fn new(aws: A, cluster: C, ledger_store: L, policy: Policy, settings: ScalerSettings, clock: Clock) -> Self {
        Scaler {
            aws,
            cluster,
            ledger_store,
            policy,
            settings,
            clock,
            wake: Arc::new(Notify::new()),
            ledger: BoostLedger::default(),
            groups: BTreeMap::new(),
        }
    }

    /// Notifying this wakes the scaler (the signal watch calls it for every new signal).
    pub fn waker(&self) -> Arc<Notify> {
        self.wake.clone()
    }

    /// The ledger as the scaler holds it.
    pub fn ledger(&self) -> &BoostLedger {
        &self.ledger
    }

    /// Loads the persisted ledger and describes the groups that match `filters`.
    pub async fn start(&mut self, filters: &[TagFilter]) -> Result<(), ScalerError> {
        self.ledger = self.ledger_store.load().await?;
        if !filters.is_empty() {
            let now = Instant::now();
            for g in self.aws.discover_groups(filters).await.map_err(ScalerError::Describe)? {
                self.groups.insert(g.name.clone(), (g, now));
            }
        }
        Ok(())
    }

    /// Runs until `shutdown` turns true.
    pub async fn run(mut self, mut shutdown: watch::Receiver<bool>) -> Self {
        loop {
            tokio::select! {
                _ = self.wake.notified() => self.settle().await,
                _ = tokio::time::sleep(self.settings.resync) => {}
                _ = shutdown.changed() => {}
            }
            if *shutdown.borrow() {
                return self;
            }
            match self.tick().await {
                Ok(report) if !report.raced.is_empty() => self.wake.notify_one(),
                Ok(_) => {}
                Err(ScalerError::NotSynced) => {}
                Err(e) => warn!(error = %e, "scaler tick failed; retrying at the next wake-up or resync"),
            }
        }
    }

    /// Waits for a burst of wake-ups to end.
    async fn settle(&self) {
        let deadline = Instant::now() + self.settings.coalesce_max;
        while Instant::now() < deadline {
            let quiet = self.settings.coalesce_quiet.min(deadline - Instant::now());
            if tokio::time::timeout(quiet, self.wake.notified()).await.is_err() {
                return;
            }
        }
    }

    /// One planning pass and its writes.
    pub async fn tick(&mut self) -> Result<TickReport, ScalerError> {
        let state = self.cluster.current().ok_or(ScalerError::NotSynced)?;
        let now = (self.clock)();

        // Describe only groups never seen or gone stale; the guarded write re-reads the rest.
        let named: BTreeSet<GroupName> =
            state.signals.iter().filter_map(|s| state.nodes.get(&s.node).and_then(|n| n.group.clone())).collect();
        let refresh_before = Instant::now().checked_sub(self.settings.group_refresh);
        let stale: Vec<GroupName> = named
            .iter()
            .filter(|g| match (self.groups.get(*g), refresh_before) {
                (None, _) => true,
                (Some((_, at)), Some(limit)) => *at < limit,
                (Some(_), None) => false,
            })
            .cloned()
            .collect();
        if !stale.is_empty() {
            let described = self.aws.describe_groups(&stale).await.map_err(ScalerError::Describe)?;
            let at = Instant::now();
            for g in described {
                self.groups.insert(g.name.clone(), (g, at));
            }
        }

        let mut snapshot = Snapshot {
            groups: self
                .groups
                .values()
                .map(|(g, _)| (g.name.clone(), g.to_core(None, state.ca.get(&g.name).cloned())))
                .collect(),
            nodes: state.nodes,
            signals: state.signals,
            ledger: self.ledger.clone(),
        };
        let at_risk = fold_signals(&snapshot, &self.policy, now);
        let closed = close_finished_boosts(&snapshot, &at_risk);
        snapshot.ledger = closed.clone();
        let plan = plan_boosts(&snapshot, &at_risk, &self.policy, now);
        let mut report =
            TickReport { held: plan.held.iter().map(|h| h.instances.len()).sum(), ..TickReport::default() };

        let mut ledger = closed;
        for boost in &plan.boosts {
            ledger.record(boost.record.clone());
        }
        if ledger != self.ledger {
            self.ledger_store.save(&ledger).await?;
            self.ledger = ledger;
        }
        let writes: Vec<(&Boost, DesiredWrite)> = plan
            .boosts
            .iter()
            .filter(|b| b.writes())
            .map(|b| (b, DesiredWrite { group: b.group.clone(), expected: b.from, to: b.to }))
            .collect();
        if writes.is_empty() {
            return Ok(report);
        }
        let requests: Vec<DesiredWrite> = writes.iter().map(|(_, w)| w.clone()).collect();
        let outcomes = match self.aws.raise_desired(&requests).await {
            Ok(outcomes) => outcomes,
            Err(e) => {
                self.take_back(writes.iter().map(|(b, _)| *b)).await?;
                return Err(ScalerError::Raise(e));
            }
        };

        let mut undone = Vec::new();
        for ((boost, _), (group, outcome)) in writes.iter().zip(outcomes) {
            match outcome {
                Ok(WriteOutcome::Written { from, to } | WriteOutcome::DryRun { from, to }) => {
                    info!(%group, from, to, instances = boost.record.instances.len(), reason = %boost.reason, "boosted");
                    self.set_cached_desired(&group, to);
                    report.raised.push((group, from, to));
                }
                Ok(WriteOutcome::Raced { live }) => {
                    info!(%group, planned_from = boost.from, live, "desired capacity changed since the plan; re-planning");
                    self.set_cached_desired(&group, live);
                    report.raced.push(group);
                    undone.push(*boost);
                }
                Err(e) => {
                    warn!(%group, error = %e, category = e.category(), "boost not written");
                    report.failed.push((group, e.category()));
                    undone.push(*boost);
                }
            }
        }
        self.take_back(undone.into_iter()).await?;
        Ok(report)
    }

    fn set_cached_desired(&mut self, group: &GroupName, desired: u32) {
        if let Some((g, _)) = self.groups.get_mut(group) {
            g.desired = desired;
        }
    }

    /// Removes the records of boosts that were not written, so they are planned again.
    async fn take_back<'b>(&mut self, boosts: impl Iterator<Item = &'b Boost>) -> Result<(), ScalerError> {
        let undone: Vec<&Boost> = boosts.collect();
        if undone.is_empty() {
            return Ok(());
        }
        let mut ledger = self.ledger.clone();
        ledger.records.retain(|r| !undone.iter().any(|b| b.record == *r));
        self.ledger_store.save(&ledger).await?;
        self.ledger = ledger;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicI64, Ordering};

    use super::*;
    use crate::core::{InstanceId, Node, NodeName, Resources, Signal, SignalKind};
    use crate::fakes::{AsgCall, FakeAutoScaling, InMemoryCluster, MemoryLedger};

    fn node(name: &str, group: &str) -> Node {
        Node {
            name: NodeName::from(name),
            instance: Some(InstanceId(format!("i-{name}"))),
            group: Some(group.into()),
            ready: true,
            cordoned: true,
            deleting_by_ca: false,
            created: Timestamp::EPOCH,
            allocatable: Resources::new(4000, 16 << 30),
            pods: Vec::new(),
        }
    }

    fn rebalance(cluster: &InMemoryCluster, name: &str, group: &str) {
        cluster.put_node(node(name, group));
        cluster.signal(Signal {
            instance: InstanceId(format!("i-{name}")),
            node: name.into(),
            kind: SignalKind::Rebalance,
            observed_at: Timestamp::from_millis(1_000),
        });
    }

    fn count_policy() -> Policy {
        Policy { sizing: crate::core::SizingMode::Count, max_boost_per_group: 100, ..Policy::default() }
    }

    fn fixed_clock() -> Clock {
        let now = Arc::new(AtomicI64::new(10_000));
        Arc::new(move || Timestamp::from_millis(now.load(Ordering::Relaxed)))
    }

    fn scaler(
        aws: &FakeAutoScaling,
        cluster: &InMemoryCluster,
        ledger: &MemoryLedger,
    ) -> Scaler<FakeAutoScaling, InMemoryCluster, MemoryLedger> {
        Scaler::new(
            aws.clone(),
            cluster.clone(),
            ledger.clone(),
            count_policy(),
            ScalerSettings::default(),
            fixed_clock(),
        )
    }

    fn raises(aws: &FakeAutoScaling) -> Vec<Vec<crate::ports::DesiredWrite>> {
        aws.calls().into_iter().filter_map(|c| if let AsgCall::Raise(w) = c { Some(w) } else { None }).collect()
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_of_signals_becomes_one_write_per_group() {
        let aws = FakeAutoScaling::default().with_group("a", 3, 50).with_group("b", 3, 50);
        let (cluster, ledger) = (InMemoryCluster::synced(), MemoryLedger::default());
        let s = scaler(&aws, &cluster, &ledger);
        let wake = s.waker();
        let (stop, shutdown) = watch::channel(false);
        let task = tokio::spawn(s.run(shutdown));
        for k in 0..10 {
            rebalance(&cluster, &format!("a{k}"), "a");
            rebalance(&cluster, &format!("b{k}"), "b");
            wake.notify_one();
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        stop.send(true).unwrap();
        let s = task.await.unwrap();

        assert_eq!(raises(&aws).len(), 1, "one guarded batch: {:?}", aws.calls());
        assert_eq!(raises(&aws)[0].len(), 2, "one write per group");
        assert_eq!((aws.desired("a"), aws.desired("b")), (13, 13));
        assert_eq!(s.ledger().covered().len(), 20);
        assert_eq!(ledger.saved(), *s.ledger(), "persisted");
    }

    #[tokio::test(start_paused = true)]
    async fn the_ledger_is_saved_before_the_write_and_a_restart_never_boosts_twice() {
        let aws = FakeAutoScaling::default().with_group("a", 3, 50);
        let (cluster, ledger) = (InMemoryCluster::synced(), MemoryLedger::default());
        rebalance(&cluster, "n1", "a");
        let mut first = scaler(&aws, &cluster, &ledger);
        first.start(&[]).await.unwrap();
        first.tick().await.unwrap();
        assert_eq!(aws.desired("a"), 4);

        // A new leader (or a restart) loads the ledger and finds nothing left to do.
        let mut second = scaler(&aws, &cluster, &ledger);
        second.start(&[]).await.unwrap();
        let report = second.tick().await.unwrap();
        assert_eq!(report, TickReport::default());
        assert_eq!(aws.desired("a"), 4);
        assert_eq!(raises(&aws).len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn nothing_is_written_when_the_ledger_cannot_be_saved() {
        let aws = FakeAutoScaling::default().with_group("a", 3, 50);
        let (cluster, ledger) = (InMemoryCluster::synced(), MemoryLedger::default());
        rebalance(&cluster, "n1", "a");
        ledger.fail_saves(true);
        let mut s = scaler(&aws, &cluster, &ledger);
        assert!(matches!(s.tick().await, Err(ScalerError::Ledger(_))));
        assert!(raises(&aws).is_empty());
        ledger.fail_saves(false);
        s.tick().await.unwrap();
        assert_eq!(aws.desired("a"), 4);
    }

    #[tokio::test(start_paused = true)]
    async fn a_stale_plan_is_replanned_from_the_live_value_never_lowered() {
        let aws = FakeAutoScaling::default().with_group("a", 3, 50);
        let (cluster, ledger) = (InMemoryCluster::synced(), MemoryLedger::default());
        let mut s = scaler(&aws, &cluster, &ledger);
        s.start(&["k=v".parse().unwrap()]).await.unwrap();
        aws.set_desired("a", 6); // Cluster Autoscaler, after our describe…
        for k in 0..6 {
            let mut ready = node(&format!("r{k}"), "a"); // …and its nodes have joined.
            ready.cordoned = false;
            cluster.put_node(ready);
        }
        rebalance(&cluster, "n1", "a");

        let report = s.tick().await.unwrap();
        assert_eq!(report.raced, vec![GroupName::from("a")]);
        assert_eq!(aws.desired("a"), 6, "never lowered");
        assert!(s.ledger().records.is_empty(), "the raced boost is taken back");
        let report = s.tick().await.unwrap();
        assert_eq!(report.raised, vec![(GroupName::from("a"), 6, 7)]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_throttled_write_is_retried_and_boosts_once() {
        let aws = FakeAutoScaling::default().with_group("a", 3, 50);
        let (cluster, ledger) = (InMemoryCluster::synced(), MemoryLedger::default());
        let mut s = scaler(&aws, &cluster, &ledger);
        s.start(&["k=v".parse().unwrap()]).await.unwrap();
        rebalance(&cluster, "n1", "a");
        aws.throttle_next(1);
        let err = s.tick().await.unwrap_err();
        assert!(matches!(&err, ScalerError::Raise(e) if e.category() == "throttled"), "{err}");
        assert!(s.ledger().records.is_empty());
        s.tick().await.unwrap();
        assert_eq!(aws.desired("a"), 4);
        s.tick().await.unwrap();
        assert_eq!(aws.desired("a"), 4, "boosted once");
    }

    #[tokio::test(start_paused = true)]
    async fn nothing_is_decided_on_a_partial_view() {
        let aws = FakeAutoScaling::default().with_group("a", 3, 50);
        let mut s = Scaler::new(
            aws.clone(),
            InMemoryCluster::default(),
            MemoryLedger::default(),
            count_policy(),
            ScalerSettings::default(),
            fixed_clock(),
        );
        assert!(matches!(s.tick().await, Err(ScalerError::NotSynced)));
        assert!(aws.calls().is_empty());
    }
}
