//! The drainer: every tick (and whenever woken) it asks the core's `plan_draining` what to do and
//! carries it out, folding what happened (starts that failed, eviction outcomes) back into the
//! core's drain state. It decides nothing itself.
//!
//! For each batch the core starts: cordon if needed, then evict the node's pods through the
//! Eviction API in the core's order (ordinary pods first, critical ones once no ordinary pod is
//! left), with the pod UID as precondition. 404, and a 409 on the UID precondition, mean done (any
//! other 409 is tried again); 429 (a PodDisruptionBudget) backs off with the core's doubling delay.
//! Once no evictable pod is left on the node, the instance is terminated through Auto Scaling,
//! with decrement when the core says it gives a boosted node back, and the return is noted in the
//! ledger. Drains past the core's deadline stop; replacement nodes
//! the core claims carry Cluster Autoscaler's scale-down protection until their drain is done.
//!
//! Only the leader acts. A replica that loses the lease drops its drains at once; the new leader
//! re-plans them (the nodes are still cordoned and at risk).

mod ending;
mod evicting;
mod report;
mod starting;
mod terminating;

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::stream::{self, StreamExt};
use thiserror::Error;
use tokio::sync::watch;
use tokio::task::Id;
use tracing::{debug, info, warn};

use evicting::{within, Sequenced};
pub use report::{DrainReport, DrainerError, DrainerSettings};
use terminating::PendingTermination;

use super::evictions::{EvictionAnswer, EvictionsInFlight};
use super::told_once::ToldOnce;
use super::{Observation, Ports, WorkerContext};
use crate::core::{
    answer_terminations, decide_terminations, eviction_order, eviction_sequence, plan_draining, Answer, BatchPlan,
    Displaced, DrainState, DrainTarget, DrainWait, DrainingPlan, EndedDrain, EvictionResult, EvictionRound,
    ForcedDeletion, GapMeter, Group, GroupName, HeldAtDeadline, HowDrainEnded, InstanceId, JoiningGiveBack, LedgerEdit,
    Made, Node, NodeName, OwnerUid, Pod, Snapshot, Termination, TerminationAnswer, Timestamp, Write,
};
use crate::metrics::{DrainOutcome, EvictionOutcome, GiveBackOutcome, SkippedAction};
use crate::ports::{
    AutoScaling, AwsError, ClusterView, ClusterWrites, EventSink, GroupDescription, LedgerError, NodeEvent, PodRef,
    TagFilter, AZ_REBALANCE_SUSPENDED_TAG,
};
use crate::supervise::{Heartbeat, Heartbeats, WORKER_SILENCE_LIMIT};

/// How long a pass woken by a new signal waits for the rest of its burst: NTH taints a storm's
/// nodes over a second or so, and each pass reads the whole cluster.
const SIGNAL_COALESCE: Duration = Duration::from_millis(300);

/// The drain worker.
pub struct Drainer<P: Ports> {
    ctx: Arc<WorkerContext<P>>,
    settings: DrainerSettings,
    drains: DrainState,
    to_terminate: BTreeMap<InstanceId, PendingTermination>,
    heartbeat: Option<Heartbeat>,
    /// Nodes whose opt-out wait was told, so it is told once.
    told_opted_out: ToldOnce<NodeName>,
    /// Groups whose `AZRebalance` process is active, as last described.
    az_rebalance: HashSet<GroupName>,
    /// Without `--suspend-az-rebalance`: the groups tagged as suspended by a booster, listed once
    /// (`None` until then), that are still to be resumed once this cluster is seen to serve them.
    az_rebalance_to_resume: Option<BTreeSet<GroupName>>,
    /// A live read found a drained node empty: another pass follows at once, to end its drain
    /// while the read is fresh.
    pass_again: bool,
    /// The scaler, woken when EC2 newly confirms an interruption (its pool-mates are boosted
    /// ahead) or an at-risk node goes by itself (AWS took it: its boost is given back).
    scaler: Option<Arc<tokio::sync::Notify>>,
    /// The interruptions EC2 confirmed as of the last pass.
    confirmed: BTreeSet<InstanceId>,
    /// Evictions sent and not yet answered.
    evictions: EvictionsInFlight,
    /// Notified when a signal is new or changed: a notice's drain starts without waiting out the
    /// tick.
    signals: Option<Arc<tokio::sync::Notify>>,
    /// The pods this drainer displaced, paired with their Pending replacements.
    gap: GapMeter,
    /// Fallback nodes on their way back to their own group, by instance, with the fallback they
    /// run in: their drain is planned in their own group, but they are terminated (and
    /// decremented) in the fallback.
    returning_from: BTreeMap<InstanceId, GroupName>,
}

impl<P: Ports> Drainer<P> {
    /// A drainer over the shared context.
    pub fn new(ctx: Arc<WorkerContext<P>>, settings: DrainerSettings) -> Self {
        Drainer {
            ctx,
            drains: DrainState::default(),
            to_terminate: BTreeMap::new(),
            heartbeat: None,
            told_opted_out: ToldOnce::default(),
            az_rebalance: HashSet::new(),
            az_rebalance_to_resume: None,
            pass_again: false,
            scaler: None,
            confirmed: BTreeSet::new(),
            evictions: EvictionsInFlight::new(settings.evictions_in_flight),
            signals: None,
            gap: GapMeter::default(),
            returning_from: BTreeMap::new(),
            settings,
        }
    }

    /// Wakes `scaler` when EC2 newly confirms an interruption or an at-risk node goes by itself,
    /// instead of leaving it to the scaler's resync.
    pub fn waking(mut self, scaler: Arc<tokio::sync::Notify>) -> Self {
        self.scaler = Some(scaler);
        self
    }

    /// Passes as soon as `signals` is notified (a burst's notices gathered for
    /// [`SIGNAL_COALESCE`]), as well as every tick.
    pub fn woken_by(mut self, signals: Arc<tokio::sync::Notify>) -> Self {
        self.signals = Some(signals);
        self
    }

    fn wake_scaler(&self) {
        if let Some(scaler) = &self.scaler {
            scaler.notify_one();
        }
    }

    /// Registers with `beats` as `worker:drainer` and beats at every pass, for `/livez`. It counts as
    /// wedged once a pass is later than its longest wait plus [`WORKER_SILENCE_LIMIT`].
    pub(crate) fn beating(mut self, beats: &Heartbeats) -> Self {
        self.heartbeat = Some(beats.register("worker:drainer", self.settings.tick + WORKER_SILENCE_LIMIT));
        self
    }

    /// The drains as the worker tracks them.
    #[cfg(test)]
    pub(crate) fn state(&self) -> &DrainState {
        &self.drains
    }

    /// Runs until `shutdown` turns true: a pass every `tick` (the watch shows pods leaving).
    pub async fn run(self, shutdown: watch::Receiver<bool>) -> Self {
        super::run_worker(self, shutdown).await
    }

    /// One planning pass and the progress it allows; when it read a drained node's live pods and
    /// found none, a second pass right after, which ends that drain while the read is fresh.
    pub async fn tick(&mut self) -> Result<DrainReport, DrainerError> {
        let report = self.passes().await;
        self.measure_gap();
        report
    }

    async fn passes(&mut self) -> Result<DrainReport, DrainerError> {
        let mut report = self.pass(false).await?;
        if std::mem::take(&mut self.pass_again) {
            report.add(self.pass(true).await?);
        }
        Ok(report)
    }

    /// One pass. A `second` pass of a tick evicts only on the nodes whose drain it starts: the
    /// others' evictions were just sent (a stalled call would be waited for twice).
    async fn pass(&mut self, second: bool) -> Result<DrainReport, DrainerError> {
        let ctx = self.ctx.clone();
        let now = (ctx.clock)();
        let began = tokio::time::Instant::now();
        let mut report = DrainReport::default();
        let Observation { snapshot, protected, .. } =
            ctx.observe(true).await.map_err(DrainerError::Describe)?.ok_or(DrainerError::NotSynced)?;
        let observed = began.elapsed();
        // Answers that came since the last pass, before planning: a refusal's backoff holds.
        let answers = self.evictions.answered();
        self.fold_evictions(answers, now, &mut report).await;
        let mut plan = plan_draining(&snapshot, &protected, &self.drains, &ctx.policy, now);
        self.az_rebalance = snapshot.groups.values().filter(|g| g.az_rebalance).map(|g| g.name.clone()).collect();
        self.returning_from = snapshot.ledger.returning.iter().map(|(i, r)| (i.clone(), r.from.clone())).collect();
        if !snapshot.spot_interrupted.is_subset(&self.confirmed) {
            self.wake_scaler();
            if ctx.leadership.is_leader() {
                let memory = ctx.ledger.pools().await;
                let seen = crate::core::pool_memory::interruption_sightings(&snapshot, &memory);
                let learned = ctx.ledger.learn(&seen, &|_| true, &ctx.policy.memory, now).await;
                ctx.metrics.market.learned(&learned);
            }
        }
        self.confirmed.clone_from(&snapshot.spot_interrupted);
        if ctx.leadership.is_leader() {
            self.gap.observe(&snapshot, now);
        }

        if !ctx.leadership.is_leader() {
            if !self.drains.in_progress.is_empty() || !self.to_terminate.is_empty() {
                warn!(drains = self.drains.in_progress.len(), "lost the lease: dropping drains for the new leader");
            }
            self.drains = DrainState::default();
            self.to_terminate.clear();
            self.evictions.abort_all();
            // The leader counts the gap; what this replica half-counted would be stale if it led again.
            self.gap = GapMeter::default();
            // The new leader reports the drains it runs; a follower reports none.
            ctx.metrics.drainer.forget_in_progress();
            report.not_leader = plan.drains.batches.len();
            for _ in &plan.drains.batches {
                ctx.metrics.lease.not_leader(SkippedAction::Drain);
            }
            return Ok(report);
        }

        if !self.settings.suspend_az_rebalance {
            self.resume_az_rebalance(&snapshot).await;
        }
        self.tell_opted_out(&plan.drains).await;
        self.protect_replacements(&plan).await;
        self.end_timed_out(&plan.drains, &snapshot, now, &mut report).await;
        let starting = began.elapsed();
        let beginning: HashSet<NodeName> =
            plan.drains.batches.iter().flat_map(|b| b.nodes.iter().map(|t| t.node.clone())).collect();
        if second {
            plan.evictions.retain(|r| beginning.contains(&r.node));
        }
        let mut sequenced = Sequenced::new(std::mem::take(&mut plan.evictions));
        self.evictions.new_sequence();
        for node in sequenced.nodes().filter(|n| !beginning.contains(n)).collect::<Vec<_>>() {
            sequenced.send(&mut self.evictions, &self.ctx, self.settings.eviction_call_timeout, &node);
        }
        let (not_started, started_tells) =
            self.start_batches(&plan.drains, &snapshot, &mut sequenced, &mut report).await;
        for node in not_started {
            plan.withdraw(&node);
        }
        let started = began.elapsed();
        self.cordon_ahead(&plan.drains.cordon_ahead).await;
        self.drains = plan.next;
        self.end_drains(&plan.ended, now, &mut report).await;
        self.tell_held_at_deadline(&plan.held_at_deadline, now).await;
        self.delete_at_deadline(plan.force, now).await;
        // The drains' Events go out while their first evictions are answered: a storm's hundreds
        // of Events would otherwise hold the pass back.
        tokio::join!(
            self.await_evictions(sequenced.sent, now, &mut report),
            crate::workers::publish_all(&ctx.events, started_tells)
        );
        self.read_live_pods(&plan.verify).await;
        self.give_back_joining(&plan.drains.give_back_joining, &snapshot).await;
        self.terminate_drained(&mut report).await?;
        self.export_progress();
        debug!(
            observe_ms = observed.as_millis(),
            plan_ms = starting.saturating_sub(observed).as_millis(),
            starts_ms = started.saturating_sub(starting).as_millis(),
            rest_ms = began.elapsed().saturating_sub(started).as_millis(),
            drains_started = report.started.len(),
            "drainer pass"
        );
        Ok(report)
    }

    async fn publish(&self, event: NodeEvent) {
        self.ctx.events.publish(event).await;
    }
}

impl<P: Ports> super::Worker for Drainer<P> {
    type Error = DrainerError;
    const PASS_AT_START: bool = false;
    const NAME: &'static str = "drainer";

    fn heartbeat(&self) -> Option<&Heartbeat> {
        self.heartbeat.as_ref()
    }

    fn metrics(&self) -> &crate::metrics::Metrics {
        &self.ctx.metrics
    }

    async fn next_pass_due(&mut self) {
        let Some(signals) = self.signals.clone() else {
            return tokio::time::sleep(self.settings.tick).await;
        };
        tokio::select! {
            () = tokio::time::sleep(self.settings.tick) => {}
            () = signals.notified() => tokio::time::sleep(SIGNAL_COALESCE).await,
        }
    }

    async fn pass_once(&mut self) -> Result<(), DrainerError> {
        self.tick().await.map(|_| ())
    }
}

#[cfg(test)]
mod tests;
