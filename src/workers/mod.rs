//! Loops that take a view of the cluster, call the core, and execute its decisions through the
//! ports. Nothing here decides; nothing here sees an SDK type.
//!
//! The scaler and the drainer share one [`WorkerContext`]: the ports, the ledger, the group book,
//! the leadership flag and the metrics. Every replica runs both and plans; only the leader writes.

pub mod drainer;
mod evictions;
pub(crate) mod execute;
pub mod groups;
pub mod launch_watcher;
pub mod leader_only;
pub mod learner;
pub mod ledger;
#[cfg(test)]
mod lost_answers;
mod node_events;
pub mod scaler;
mod told_once;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::core::{BoostLedger, Evidence, InstanceId, NodeName, Policy, Signal, SignalKind, Snapshot, Timestamp};
use crate::metrics::Metrics;
use crate::ports::{
    AutoScaling, AwsError, ClusterState, ClusterView, ClusterWrites, EventSink, Leadership, LedgerError, LedgerStore,
    NodeEvent,
};
use crate::supervise::Heartbeat;
use groups::GroupBook;
use leader_only::LeaderOnly;
use ledger::SharedLedger;
use tokio::sync::watch;
use tracing::{debug, info, warn};

pub use crate::ports::{system_clock, Clock};

/// The ports the workers act through, named once: every worker, and the context they share, is
/// generic over one `P: Ports` rather than over each port.
pub trait Ports: Send + Sync + 'static {
    /// Auto Scaling (and the EC2 reads beside it).
    type Aws: AutoScaling + 'static;
    /// The watched cluster.
    type Cluster: ClusterView + 'static;
    /// Where the ledger is saved.
    type Ledger: LedgerStore + 'static;
    /// Writes to the cluster.
    type Writes: ClusterWrites + 'static;
    /// Kubernetes Events.
    type Events: EventSink + 'static;
}

/// The ports a [`WorkerContext`] is built from, before the leadership gate; as a type, it names
/// them for [`Ports`].
pub struct PortSet<A, C, L, W, E> {
    /// Auto Scaling.
    pub aws: A,
    /// The watched cluster.
    pub cluster: C,
    /// Where the ledger is saved.
    pub ledger: L,
    /// Writes to the cluster.
    pub writes: W,
    /// Kubernetes Events.
    pub events: E,
}

impl<A, C, L, W, E> Ports for PortSet<A, C, L, W, E>
where
    A: AutoScaling + 'static,
    C: ClusterView + 'static,
    L: LedgerStore + 'static,
    W: ClusterWrites + 'static,
    E: EventSink + 'static,
{
    type Aws = A;
    type Cluster = C;
    type Ledger = L;
    type Writes = W;
    type Events = E;
}

/// The port values a [`WorkerContext`] over `P` is built from: `P` itself when `P` is a
/// [`PortSet`].
pub type PortValues<P> =
    PortSet<<P as Ports>::Aws, <P as Ports>::Cluster, <P as Ports>::Ledger, <P as Ports>::Writes, <P as Ports>::Events>;

/// Everything the workers share: the ports (each write port behind the leadership gate), the
/// ledger, the group book, the leadership flag, the metrics, the policy and the clock.
pub struct WorkerContext<P: Ports> {
    /// Auto Scaling; writes only while leading.
    pub aws: LeaderOnly<P::Aws>,
    /// The watched cluster.
    pub cluster: P::Cluster,
    /// Writes to the cluster, made only while leading.
    pub writes: LeaderOnly<P::Writes>,
    /// Kubernetes Events, published only while leading.
    pub events: LeaderOnly<P::Events>,
    /// The boost ledger, persisted through the ledger port, saved only while leading.
    pub ledger: Arc<SharedLedger<LeaderOnly<P::Ledger>>>,
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

impl<P: Ports> WorkerContext<P> {
    /// Puts every write port behind the leadership gate and loads the ledger through it.
    pub async fn new(
        ports: PortValues<P>,
        groups: Arc<GroupBook>,
        leadership: Leadership,
        metrics: Arc<Metrics>,
        policy: Policy,
        clock: Clock,
    ) -> Result<Arc<Self>, LedgerError> {
        let PortSet { aws, cluster, ledger, writes, events } = ports;
        Ok(Arc::new(WorkerContext {
            aws: LeaderOnly::new(aws, &leadership, &metrics),
            cluster,
            writes: LeaderOnly::new(writes, &leadership, &metrics),
            events: LeaderOnly::new(events, &leadership, &metrics),
            ledger: SharedLedger::load(LeaderOnly::new(ledger, &leadership, &metrics)).await?,
            groups,
            leadership,
            metrics,
            policy,
            clock,
        }))
    }
}

/// What the loop that drives a worker asks of it: the four workers share [`run_worker`].
pub(crate) trait Worker {
    /// The error a pass may end with.
    type Error: PassError;
    /// Whether the first pass runs at once rather than after the first wait.
    const PASS_AT_START: bool;
    /// The worker's name in logs.
    const NAME: &'static str;
    /// Its `/livez` heartbeat, when registered.
    fn heartbeat(&self) -> Option<&Heartbeat>;
    /// The metrics a failed pass is counted in.
    fn metrics(&self) -> &Metrics;
    /// Returns once the next pass is due.
    async fn next_pass_due(&mut self);
    /// One pass.
    async fn pass_once(&mut self) -> Result<(), Self::Error>;
}

/// How the loop treats a failed pass.
pub(crate) trait PassError: std::fmt::Display {
    /// A watch has not synced yet: nothing to report, the next pass tries again.
    fn not_synced(&self) -> bool;
    /// The ledger failed: counted in `ledger_errors_total`.
    fn ledger(&self) -> Option<&LedgerError>;
    /// The lease went during the pass, and the gate dropped the write that ended it.
    fn lost_lease(&self) -> bool {
        matches!(self.ledger(), Some(LedgerError::NotLeader))
    }
}

/// An Auto Scaling read that failed: the launch watcher's and the learner's passes end with it.
impl PassError for AwsError {
    fn not_synced(&self) -> bool {
        false
    }

    fn ledger(&self) -> Option<&LedgerError> {
        None
    }
}

/// Runs `worker` until `shutdown` turns true: beat, wait for the next pass (or shutdown), pass,
/// log a failed pass and go on. Returns the worker, for tests that look at it afterwards.
pub(crate) async fn run_worker<W: Worker>(mut worker: W, mut shutdown: watch::Receiver<bool>) -> W {
    let mut first = W::PASS_AT_START;
    loop {
        if let Some(h) = worker.heartbeat() {
            h.beat();
        }
        if !std::mem::take(&mut first) {
            tokio::select! {
                _ = worker.next_pass_due() => {}
                _ = shutdown.changed() => {}
            }
        }
        if *shutdown.borrow() {
            return worker;
        }
        if let Err(e) = worker.pass_once().await {
            report_failed_pass(W::NAME, worker.metrics(), &e);
        }
    }
}

/// Tells of a failed pass of `worker` (or of the writes it sent on): nothing while a watch has
/// not synced, the lost lease as what it is, anything else as a warning, a ledger failure counted.
pub(crate) fn report_failed_pass(worker: &str, metrics: &Metrics, e: &impl PassError) {
    if e.not_synced() {
        return;
    }
    if e.lost_lease() {
        info!(worker, error = %e, "the lease went during the pass: its remaining writes are left to the new leader");
        return;
    }
    if let Some(l) = e.ledger() {
        metrics.ledger.error(l);
    }
    warn!(worker, error = %e, "pass failed; retrying at the next wake-up or tick");
}

/// Kubernetes Events a pass sends at once.
pub(crate) const EVENTS_IN_FLIGHT: usize = 16;

/// Publishes `events` concurrently, at most [`EVENTS_IN_FLIGHT`] at a time: a pass that tells the
/// nodes of 20 boosted groups waits about one API round trip for it, not 40 in a row, before its
/// next step (and its next pass).
pub(crate) async fn publish_all<E: EventSink>(sink: &E, events: Vec<NodeEvent>) {
    use futures::stream::{self, StreamExt};
    stream::iter(events).for_each_concurrent(EVENTS_IN_FLIGHT, |e| sink.publish(e)).await;
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
/// drain still happens and its boost is still given back. A boost made ahead for pool-mates
/// remembers no risk: its instances had no notice of their own, and nothing drains on the pool's
/// risk alone (one whose own notice comes is at risk through that notice).
pub(crate) fn remember_boosted(state: &mut ClusterState, ledger: &BoostLedger) {
    let signalled: BTreeSet<_> = state.signals.iter().map(|s| s.instance.clone()).collect();
    for record in ledger.records.iter().filter(|r| r.ahead.is_none()) {
        // A fallback node on its way back is at risk on the ledger's word already (`core::back_to_spot`),
        // and never as a recommendation: pool memory would learn one that never came.
        let remembered = |i: &&InstanceId| !signalled.contains(*i) && !ledger.returning.contains_key(*i);
        for instance in record.instances.iter().filter(remembered) {
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

impl<P: Ports> WorkerContext<P> {
    /// The cluster, the ledger and the groups as one snapshot; `None` while a watch has not
    /// synced (nothing is decided on a partial view). Whether EC2 reports the notices' spot
    /// interruptions is asked only `for_draining`: a boost for a notice never waits for the call,
    /// and otherwise the answers the drainer already had are used (a boost ahead for pool-mates
    /// needs one).
    pub(crate) async fn observe(&self, for_draining: bool) -> Result<Option<Observation>, AwsError> {
        let began = tokio::time::Instant::now();
        let Some(mut state) = self.cluster.current() else { return Ok(None) };
        let ledger = self.ledger.current().await;
        remember_boosted(&mut state, &ledger);
        let read = began.elapsed();
        let groups = self.groups.resolve(&self.aws, &mut state, &ledger).await?;
        let resolved = began.elapsed();
        let mut snapshot = Snapshot {
            groups,
            nodes: state.nodes,
            signals: state.signals,
            ledger,
            capacity_failures: self.groups.capacity_failures(),
            ..Snapshot::default()
        };
        self.groups.fill_instance_facts(&self.aws, &mut snapshot).await;
        let described = began.elapsed();
        if for_draining {
            self.groups.learn_spot_interruptions(&self.aws, &mut snapshot).await;
        } else {
            // What EC2 already confirmed, without a call: pool-mates are boosted on it.
            self.groups.known_spot_interruptions(&mut snapshot);
        }
        let mut needed = crate::core::pods_needed(&snapshot);
        needed.extend(crate::core::pool_mates::pods_needed(&snapshot));
        needed.extend(crate::core::back_to_spot::pods_needed(&snapshot));
        if !needed.is_empty() {
            self.cluster.attach_pods(&mut snapshot.nodes, &needed);
        }
        debug!(
            for_draining,
            read_ms = read.as_millis(),
            groups_ms = resolved.saturating_sub(read).as_millis(),
            facts_ms = described.saturating_sub(resolved).as_millis(),
            rest_ms = began.elapsed().saturating_sub(described).as_millis(),
            "observed"
        );
        Ok(Some(Observation { snapshot, protected: state.protected, first_seen: state.first_seen }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::{BoostRecord, Node, Returning};

    #[test]
    fn a_boosted_instance_is_remembered_at_risk_but_neither_a_returning_one_nor_a_pool_mate() {
        let mut state = ClusterState::default();
        for (name, group) in [("n1", "spot"), ("o9", "od")] {
            let node = Node::test(name, group);
            state.nodes.insert(node.name.clone(), node);
        }
        let mut ledger = BoostLedger::default();
        ledger.record(BoostRecord::test("spot", &["i-n1"], 1, 1_000));
        ledger.record(BoostRecord::test("spot", &["i-o9"], 1, 2_000));
        let mate = Node::test("m1", "spot");
        state.nodes.insert(mate.name.clone(), mate);
        let pools = [crate::core::Pool { instance_type: "m5.large".into(), zone: "us-east-1a".into() }].into();
        let ahead = crate::core::Ahead { pools, until: Timestamp::from_millis(9_000), returning: false };
        ledger.record(BoostRecord { ahead: Some(ahead), ..BoostRecord::test("spot", &["i-m1"], 1, 3_000) });
        ledger.returning.insert(
            "i-o9".into(),
            Returning {
                node: "o9".into(),
                home: "spot".into(),
                from: "od".into(),
                at: Timestamp::from_millis(2_000),
                since: Timestamp::from_millis(0),
                surplus: false,
            },
        );
        remember_boosted(&mut state, &ledger);
        let remembered: Vec<(&str, SignalKind)> = state.signals.iter().map(|s| (s.instance.as_str(), s.kind)).collect();
        assert_eq!(remembered, [("i-n1", SignalKind::Rebalance)]);
    }
}
