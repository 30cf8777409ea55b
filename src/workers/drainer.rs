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

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::stream::{self, StreamExt};
use thiserror::Error;
use tokio::sync::watch;
use tokio::task::Id;
use tracing::{debug, info, warn};

use super::evictions::{EvictionAnswer, EvictionsInFlight};
use super::told_once::ToldOnce;
use super::{Observation, WorkerContext};
use crate::core::{
    answer_terminations, apply_all, decide_terminations, eviction_order, eviction_sequence, plan_draining, BatchPlan,
    Displaced, DrainState, DrainTarget, DrainWait, DrainingPlan, EndedDrain, EvictionResult, EvictionRound,
    ForcedDeletion, GapMeter, Group, GroupName, HeldAtDeadline, HowDrainEnded, InstanceId, JoiningGiveBack, LedgerEdit,
    Node, NodeName, OwnerUid, Pod, Snapshot, Termination, TerminationAnswer, Timestamp,
};
use crate::metrics::{DrainOutcome, EvictionOutcome, GiveBackOutcome, SkippedAction};
use crate::ports::{
    AutoScaling, AwsError, ClusterView, ClusterWrites, EventSink, EvictOutcome, GroupDescription, LedgerError,
    LedgerStore, NodeEvent, PodRef, TagFilter, TerminateOutcome, AZ_REBALANCE_SUSPENDED_TAG,
};
use crate::supervise::{Heartbeat, Heartbeats, WORKER_SILENCE_LIMIT};

/// How long a pass woken by a new signal waits for the rest of its burst: NTH taints a storm's
/// nodes over a second or so, and each pass reads the whole cluster.
const SIGNAL_COALESCE: Duration = Duration::from_millis(300);

/// How the drainer paces itself.
#[derive(Debug, Clone)]
pub(crate) struct DrainerSettings {
    /// Plan and make progress at least this often (pods leaving are seen through the watch).
    pub tick: Duration,
    /// Eviction (and termination) calls in flight at once, across every draining node.
    pub(crate) evictions_in_flight: usize,
    /// One eviction call's deadline: past it the pod counts as not evicted this round, so a
    /// stalled API server never stalls the tick, the other nodes, or `--drain-timeout`.
    pub(crate) eviction_call_timeout: Duration,
    /// `--suspend-az-rebalance`: suspend `AZRebalance` on a group before terminating in it with
    /// decrement; without it, resume the groups an earlier run suspended.
    pub(crate) suspend_az_rebalance: bool,
}

impl Default for DrainerSettings {
    fn default() -> Self {
        DrainerSettings {
            tick: Duration::from_secs(2),
            evictions_in_flight: 32,
            eviction_call_timeout: Duration::from_secs(10),
            suspend_az_rebalance: false,
        }
    }
}

/// Why a tick did nothing useful.
#[derive(Debug, Error)]
pub(crate) enum DrainerError {
    /// Some watch has not synced.
    #[error("the cluster view is not synced yet")]
    NotSynced,
    /// Describing groups failed.
    #[error("describing groups failed")]
    Describe(#[source] AwsError),
    /// The ledger could not be read or saved.
    #[error(transparent)]
    Ledger(#[from] LedgerError),
}

/// What one tick did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct DrainReport {
    /// Nodes whose drain started.
    pub started: Vec<NodeName>,
    /// Pods evicted (or found gone).
    pub(crate) evicted: u32,
    /// Evictions refused by a PodDisruptionBudget.
    pub blocked: u32,
    /// Nodes fully drained (not those whose instance went first).
    pub drained: Vec<NodeName>,
    /// Nodes past the drain deadline.
    pub timed_out: Vec<NodeName>,
    /// Instances terminated, with whether desired capacity was decremented.
    pub terminated: Vec<(InstanceId, bool)>,
    /// Batches a follower left to the leader.
    pub(crate) not_leader: usize,
}

impl DrainReport {
    /// Adds what a later pass of the same tick did.
    fn add(&mut self, later: DrainReport) {
        self.started.extend(later.started);
        self.evicted = self.evicted.saturating_add(later.evicted);
        self.blocked = self.blocked.saturating_add(later.blocked);
        self.drained.extend(later.drained);
        self.timed_out.extend(later.timed_out);
        self.terminated.extend(later.terminated);
        self.not_leader = self.not_leader.saturating_add(later.not_leader);
    }
}

/// A drained (or timed-out) instance still to terminate: kept until AWS confirms.
#[derive(Debug, Clone)]
struct PendingTermination {
    group: GroupName,
    /// Its node; `None` for an instance given back while still joining.
    node: Option<NodeName>,
    instance: InstanceId,
    decrement: bool,
    /// The instance AWS took first whose boosted node this termination gives back.
    gives_back: Option<InstanceId>,
}

impl PendingTermination {
    /// What the core decides and answers it as.
    fn termination(&self) -> Termination {
        Termination { instance: self.instance.clone(), decrement: self.decrement, gives_back: self.gives_back.clone() }
    }
}

/// What checking a joining instance chosen to give back found, at the moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum JoiningCheck {
    /// It may be terminated.
    MayGo,
    /// It may not, for this reason: it is unchosen.
    MayNotGo(&'static str),
    /// A read failed: checked again at the next pass.
    Unknown,
}

/// One call with a deadline: its answer, or its error or how long it went unanswered, as text.
async fn within<T, E: std::fmt::Display>(
    deadline: Duration,
    call: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, String> {
    match tokio::time::timeout(deadline, call).await {
        Ok(answer) => answer.map_err(|e| e.to_string()),
        Err(_) => Err(format!("no answer within {}s", deadline.as_secs())),
    }
}

/// A pod and what its eviction call answered.
type EvictionResultOf = (PodRef, Result<EvictOutcome, String>);

/// One drain target's cordon with a deadline, handed back with the target.
async fn cordon_within<'t, W: ClusterWrites>(
    writes: &W,
    deadline: Duration,
    group: &'t GroupName,
    target: &'t DrainTarget,
) -> (&'t GroupName, &'t DrainTarget, Result<(), String>) {
    let outcome = within(deadline, writes.cordon(&target.node)).await;
    (group, target, outcome)
}

/// A pass's evictions in the core's order (nearest deadline first, one pod of every node of a
/// wave at a time: [`eviction_sequence`]), sent node by node as each node's drain may go on. One
/// node's refused or slow pod never holds another back: every eviction is one call with a
/// deadline, running beside the passes (see [`EvictionsInFlight`]), and a pod whose call still
/// runs is not sent again.
struct Sequenced {
    rounds: Vec<EvictionRound>,
    /// Each node's pods as (place in the sequence, round, pod).
    places: BTreeMap<NodeName, Vec<(usize, usize, usize)>>,
    /// The calls sent.
    sent: HashSet<Id>,
}

impl Sequenced {
    fn new(rounds: Vec<EvictionRound>) -> Self {
        let sequence = eviction_sequence(&rounds);
        let mut places: BTreeMap<NodeName, Vec<(usize, usize, usize)>> = BTreeMap::new();
        for (place, (k, p)) in sequence.iter().enumerate() {
            places.entry(rounds[*k].node.clone()).or_default().push((place, *k, *p));
        }
        let first: Vec<String> = sequence.iter().take(3).map(|(k, p)| format!("{}#{p}", rounds[*k].node)).collect();
        debug!(rounds = rounds.len(), pods = sequence.len(), ?first, "evictions sequenced");
        Sequenced { rounds, places, sent: HashSet::new() }
    }

    /// The nodes with evictions due.
    fn nodes(&self) -> impl Iterator<Item = NodeName> + '_ {
        self.places.keys().cloned()
    }

    /// Sends `node`'s evictions in their places, once.
    fn send<A, C, L, W, E>(
        &mut self,
        evictions: &mut EvictionsInFlight,
        ctx: &Arc<WorkerContext<A, C, L, W, E>>,
        deadline: Duration,
        node: &NodeName,
    ) where
        A: AutoScaling + 'static,
        C: ClusterView + 'static,
        L: LedgerStore + 'static,
        W: ClusterWrites + 'static,
        E: EventSink + 'static,
    {
        for (place, k, p) in self.places.remove(node).unwrap_or_default() {
            let (round, pod) = (&self.rounds[k], PodRef::from(&self.rounds[k].pods[p]));
            let (ctx, evicted) = (ctx.clone(), pod.clone());
            let call = async move { within(deadline, ctx.writes.evict(&evicted)).await };
            self.sent.extend(evictions.send(place, &round.node, &round.group, pod, call));
        }
    }
}

/// One live read of a node's pods with a deadline.
async fn read_within<W: ClusterWrites>(
    writes: &W,
    deadline: Duration,
    node: NodeName,
) -> (NodeName, Result<Vec<Pod>, String>) {
    let read = within(deadline, writes.live_pods(&node)).await;
    (node, read)
}

/// One termination, handed back with what it was for.
async fn terminate<A: AutoScaling>(
    aws: &A,
    p: PendingTermination,
    decrement: bool,
) -> (PendingTermination, Result<TerminateOutcome, AwsError>) {
    let outcome = aws.terminate_instance(&p.instance, decrement).await;
    (p, outcome)
}

/// The drain worker.
pub(crate) struct Drainer<A, C, L, W, E> {
    ctx: Arc<WorkerContext<A, C, L, W, E>>,
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

impl<A, C, L, W, E> Drainer<A, C, L, W, E>
where
    A: AutoScaling + 'static,
    C: ClusterView + 'static,
    L: LedgerStore + 'static,
    W: ClusterWrites + 'static,
    E: EventSink + 'static,
{
    /// A drainer over the shared context.
    pub fn new(ctx: Arc<WorkerContext<A, C, L, W, E>>, settings: DrainerSettings) -> Self {
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

    /// Records a pod this drainer evicted, deleted or left to its instance's end, when a
    /// controller will replace it.
    fn displaced(&mut self, pod: &str, owner: Option<&OwnerUid>, group: &GroupName, at: Timestamp) {
        let Some(owner) = owner else { return };
        if !self.gap.displaced(Displaced::evicted(pod.into(), owner.clone(), group.clone(), at)) {
            debug!(%group, "the capacity gap meter is full; a displaced pod is not counted");
        }
    }

    /// Counts the Pending time of the displaced pods' replacements into
    /// `capacity_gap_pod_seconds_total`.
    fn measure_gap(&mut self) {
        // The leader's count alone: replicas summed would count each pod once per replica.
        if !self.ctx.leadership.is_leader() || (self.gap.waiting() == 0 && !self.gap.replacing()) {
            return;
        }
        let now = (self.ctx.clock)();
        for (group, seconds) in self.gap.measure(&self.ctx.cluster.pending_pods(), now) {
            self.ctx.metrics.market.capacity_gap(group.as_str(), seconds);
        }
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
            super::publish_all(&ctx.events, started_tells)
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

    /// Tells once per node that a pod's opt-out holds its voluntary drain back.
    async fn tell_opted_out(&mut self, plan: &BatchPlan) {
        let mut waiting = HashSet::new();
        for w in &plan.waiting {
            let (DrainWait::OptedOut { node, .. } | DrainWait::BarePod { node, .. }) = &w.reason else { continue };
            waiting.insert(node.clone());
            if self.told_opted_out.first(node.clone(), ()) {
                info!(%node, group = %w.group, reason = %w.reason, "drain deferred");
                self.publish(NodeEvent::drain_deferred(node, &w.reason)).await;
            }
        }
        self.told_opted_out.keep(|n| waiting.contains(n));
    }

    /// Before the first eviction: says which opt-outs a confirmed interruption overrides and
    /// which pods nothing will recreate.
    fn before_evicting(node: &Node) -> Vec<NodeEvent> {
        let evictable: Vec<&Pod> = node.pods.iter().filter(|p| p.class.is_evictable()).collect();
        let opted: Vec<&Pod> = evictable.iter().copied().filter(|p| p.opt_out.is_some()).collect();
        let bare: Vec<&Pod> = evictable.iter().copied().filter(|p| p.bare).collect();
        let mut tells = Vec::new();
        if !opted.is_empty() {
            tells.push(NodeEvent::opt_out_overridden(&node.name, &opted));
        }
        if !bare.is_empty() {
            tells.push(NodeEvent::bare_pods_evicted(&node.name, &bare));
        }
        tells
    }

    /// Replacement nodes keep Cluster Autoscaler's scale-down protection while their boost is
    /// open. The ledger records each protection before its patch and forgets it once lifted: the
    /// booster lifts only its own, whatever marker a Node carries.
    async fn protect_replacements(&self, plan: &DrainingPlan) {
        if !plan.protect.is_empty() {
            let recorded = self
                .ctx
                .ledger
                .update(|l| plan.protect.iter().for_each(|n| _ = LedgerEdit::Protect(n.clone()).apply(l)))
                .await;
            if let Err(e) = recorded {
                warn!(error = %e, "could not record the scale-down protection of replacement nodes; retried next pass");
            } else {
                for node in &plan.protect {
                    if let Err(e) = self.ctx.writes.protect_from_scale_down(node, true).await {
                        warn!(%node, error = %e, "could not protect a replacement node from scale-down");
                    }
                }
            }
        }
        let mut lifted = Vec::new();
        for node in &plan.unprotect {
            match self.ctx.writes.protect_from_scale_down(node, false).await {
                Ok(()) => lifted.push(node.clone()),
                Err(e) => warn!(%node, error = %e, "could not lift the scale-down protection of a node"),
            }
        }
        if !lifted.is_empty() {
            let forgotten = self
                .ctx
                .ledger
                .update(|l| lifted.into_iter().for_each(|n| _ = LedgerEdit::Unprotect(n).apply(l)))
                .await;
            if let Err(e) = forgotten {
                warn!(error = %e, "could not record lifted scale-down protections; lifted again next pass");
            }
        }
    }

    async fn end_timed_out(&mut self, plan: &BatchPlan, snapshot: &Snapshot, now: Timestamp, report: &mut DrainReport) {
        for t in &plan.timed_out {
            let started_at = self.drains.in_progress.get(&t.node).map(|d| d.started_at);
            self.observe_end(&t.group, DrainOutcome::TimedOut, started_at, now);
            let left = snapshot.nodes.get(&t.node).map_or(0, |n| eviction_order(n).len());
            let then = if t.terminate {
                "terminating it anyway (--terminate-after-drain-timeout)"
            } else {
                "it stays cordoned"
            };
            report.timed_out.push(t.node.clone());
            if let Some(reclaimed) = &t.gives_back {
                self.give_back_left_to_ca(
                    &t.group,
                    &t.node,
                    reclaimed,
                    format!("its drain timed out with {left} pod(s) left"),
                )
                .await;
                continue;
            }
            warn!(node = %t.node, left, "drain timed out; {then}");
            self.publish(NodeEvent::drain_timed_out(&t.node, left, t.terminate)).await;
            if t.terminate {
                self.to_terminate.insert(
                    t.instance.clone(),
                    PendingTermination {
                        group: self.returning_from.get(&t.instance).unwrap_or(&t.group).clone(),
                        node: Some(t.node.clone()),
                        instance: t.instance.clone(),
                        decrement: t.decrement,
                        gives_back: None,
                    },
                );
            }
        }
    }

    /// A node chosen to give back capacity AWS took first could not be drained: it is made
    /// schedulable again (the booster cordoned it) and the capacity is left to Cluster
    /// Autoscaler, which scales the group down once it finds the room unneeded.
    async fn give_back_left_to_ca(&self, group: &GroupName, node: &NodeName, reclaimed: &InstanceId, why: String) {
        if let Err(e) = self.ctx.writes.uncordon(node).await {
            warn!(%node, error = %e, "could not uncordon a node whose give-back stopped");
        }
        let ended = self
            .ctx
            .ledger
            .update(|l| {
                apply_all(l, &[LedgerEdit::Settle(reclaimed.clone()), LedgerEdit::EndGiveBack(reclaimed.clone())]);
            })
            .await;
        if let Err(e) = ended {
            warn!(%node, error = %e, "could not record the end of a give-back; the next plan retries it");
            return;
        }
        warn!(%node, %group, %reclaimed, "give-back stopped: {why}; the capacity is left to Cluster Autoscaler");
        self.ctx.metrics.scaler.give_back(group.as_str(), GiveBackOutcome::LeftToClusterAutoscaler);
        self.publish(NodeEvent::give_back_stopped(node, group, reclaimed, &why)).await;
    }

    /// Starts the planned batches: cordons where needed. Returns the targets it could not start
    /// (their cordon failed: the gate fails it once the lease is gone), and the Events of those
    /// that did, published as their first evictions go. Every node's cordon is one call with a
    /// deadline, all at once (within the in-flight bound): a storm's drains start together, not
    /// one round trip after another, and each node's evictions are sent as soon as its own cordon
    /// lands (in their places in the pass's sequence), not once every node's has.
    async fn start_batches(
        &mut self,
        plan: &BatchPlan,
        snapshot: &Snapshot,
        sequenced: &mut Sequenced,
        report: &mut DrainReport,
    ) -> (Vec<NodeName>, Vec<NodeEvent>) {
        let writes = &self.ctx.writes;
        let deadline = self.settings.eviction_call_timeout;
        let mut cordons = Vec::new();
        for batch in &plan.batches {
            // Also out of load balancers, NTH's cordon or not: traffic stops before pods go.
            cordons.extend(batch.nodes.iter().map(|target| cordon_within(writes, deadline, &batch.group, target)));
        }
        let mut cordoned = stream::iter(cordons).buffer_unordered(self.settings.evictions_in_flight.max(1));
        let (mut not_started, mut tells) = (Vec::new(), Vec::new());
        while let Some((group, target, cordon)) = cordoned.next().await {
            match cordon {
                Err(e) if target.cordon => {
                    warn!(node = %target.node, error = %e, "cordon failed; the drain waits for the next plan");
                    not_started.push(target.node.clone());
                    continue;
                }
                Err(e) => {
                    warn!(node = %target.node, error = %e, "could not exclude the cordoned node from load balancers; draining it anyway")
                }
                Ok(()) => {}
            }
            sequenced.send(&mut self.evictions, &self.ctx, deadline, &target.node);
            let pods = snapshot.nodes.get(&target.node).map_or(0, |n| eviction_order(n).len());
            info!(node = %target.node, %group, pods, "drain started");
            if let Some(node) = snapshot.nodes.get(&target.node) {
                tells.extend(Self::before_evicting(node));
            }
            if target.early {
                info!(node = %target.node, %group, "draining before the replacements are Ready: the notice's deadline is near");
            }
            tells.push(NodeEvent::drain_started(target, group, pods));
            let outcome = if target.early { DrainOutcome::StartedBeforeReplacements } else { DrainOutcome::Started };
            self.ctx.metrics.drainer.drain(group.as_str(), outcome, None);
            report.started.push(target.node.clone());
        }
        (not_started, tells)
    }

    /// Cordons nodes with a confirmed notice that wait for their replacements: nothing new lands
    /// on them meanwhile, whether or not NTH got to them.
    async fn cordon_ahead(&self, nodes: &[NodeName]) {
        for node in nodes {
            match self.ctx.writes.cordon(node).await {
                Ok(()) => info!(%node, "cordoned ahead of its drain: a confirmed notice, not cordoned yet"),
                Err(e) => {
                    warn!(%node, error = %e, "could not cordon a node with a confirmed notice; tried again next pass")
                }
            }
        }
    }

    /// Tells which budget held which pod on each node whose deadline came: what the instance's
    /// end kills.
    async fn tell_held_at_deadline(&mut self, held: &[HeldAtDeadline], now: Timestamp) {
        for h in held {
            let pods: Vec<String> = h.pods.iter().map(|p| format!("{}/{}", p.pod.namespace, p.pod.name)).collect();
            let budgets: Vec<&str> = h.pods.iter().map(|p| p.budget.as_deref().unwrap_or("?")).collect();
            warn!(node = %h.node, group = %h.group, pods = %pods.join(","), budgets = %budgets.join(","), "interruption deadline came with pods held by their budgets");
            self.ctx.metrics.drainer.held_at_deadline(h.group.as_str(), h.pods.len());
            self.ctx.metrics.market.pods_killed(h.group.as_str(), h.pods.len() as u64);
            for p in &h.pods {
                self.displaced(p.pod.uid.as_str(), p.pod.owner.as_ref(), &h.group, now);
            }
            self.publish(NodeEvent::pods_held_at_deadline(h)).await;
        }
    }

    /// Deletes, gracefully and all at once, the pods budgets still refuse at their node's
    /// deadline (`--interruption-force-at-deadline`). A deletion not made is planned again.
    async fn delete_at_deadline(&mut self, force: Vec<ForcedDeletion>, now: Timestamp) {
        if force.is_empty() {
            return;
        }
        let writes = &self.ctx.writes;
        let deadline = self.settings.eviction_call_timeout;
        let calls: Vec<_> = force
            .into_iter()
            .map(|f| async move {
                let outcome = within(deadline, writes.delete_pod(&PodRef::from(&f.held.pod), f.grace_seconds)).await;
                (f, outcome)
            })
            .collect();
        let done: Vec<(ForcedDeletion, Result<(), String>)> =
            stream::iter(calls).buffer_unordered(self.settings.evictions_in_flight.max(1)).collect().await;
        let mut tells = Vec::new();
        for (f, outcome) in done {
            match outcome {
                Ok(()) => {
                    let budget = f.held.budget.as_deref().unwrap_or("?");
                    warn!(node = %f.node, pod = %f.held.pod.name, namespace = %f.held.pod.namespace, budget, grace = f.grace_seconds, "deleted a pod its budget still refused: the interruption deadline is near");
                    self.ctx.metrics.drainer.pdb_overridden(f.group.as_str());
                    self.displaced(f.held.pod.uid.as_str(), f.held.pod.owner.as_ref(), &f.group, now);
                    tells.push(NodeEvent::pdb_overridden(&f, f.deadline.since(now)));
                }
                Err(e) => {
                    warn!(node = %f.node, pod = %f.held.pod.name, error = %e, "could not delete a held pod at its deadline; tried again next pass");
                    self.drains.unforce(&f.node, &f.held.pod.uid);
                }
            }
        }
        super::publish_all(&self.ctx.events, tells).await;
    }

    /// Carries out the drains that end: drained nodes are queued for termination; a node an
    /// operator uncordoned is remembered in the ledger as kept.
    async fn end_drains(&mut self, ended: &[EndedDrain], now: Timestamp, report: &mut DrainReport) {
        let mut kept = Vec::new();
        for e in ended {
            match e.ending {
                HowDrainEnded::Uncordoned | HowDrainEnded::OptedOut => {
                    let how = if e.ending == HowDrainEnded::OptedOut {
                        "opted out (spots-booster.io/disabled)"
                    } else {
                        "uncordoned"
                    };
                    warn!(node = %e.node, how, "an operator took the node back during its drain; drain stopped for good, instance kept");
                    if let Err(err) = self.ctx.writes.readmit_to_load_balancers(&e.node).await {
                        warn!(node = %e.node, error = %err, "could not readmit the node to load balancers");
                    }
                    if let Some(reclaimed) = &e.gives_back {
                        let why = format!("an operator {how} it");
                        self.give_back_left_to_ca(&e.group, &e.node, reclaimed, why).await;
                        continue;
                    }
                    kept.push(e.instance.clone());
                }
                HowDrainEnded::Drained { terminate, decrement } => {
                    self.observe_end(&e.group, DrainOutcome::Drained, Some(e.started_at), now);
                    if e.recommendation_only {
                        self.ctx.metrics.market.needless_drain(e.group.as_str());
                    }
                    if terminate {
                        report.drained.push(e.node.clone());
                        info!(node = %e.node, "drained");
                        self.to_terminate.insert(
                            e.instance.clone(),
                            PendingTermination {
                                group: self.returning_from.get(&e.instance).unwrap_or(&e.group).clone(),
                                node: Some(e.node.clone()),
                                instance: e.instance.clone(),
                                decrement,
                                gives_back: e.gives_back.clone(),
                            },
                        );
                    } else if e.gives_back.is_none() {
                        // It went by itself (AWS took it): its boost is given back.
                        self.wake_scaler();
                    } else if let Some(reclaimed) = &e.gives_back {
                        // The chosen node went by itself (AWS or Cluster Autoscaler took it):
                        // another is chosen at the next plan.
                        if let Err(err) =
                            self.ctx.ledger.update(|l| _ = LedgerEdit::EndGiveBack(reclaimed.clone()).apply(l)).await
                        {
                            warn!(node = %e.node, error = %err, "could not record a give-back node's departure");
                        }
                    }
                }
            }
        }
        if !kept.is_empty() {
            // Remembered in the ledger: no later plan, nor a restart, cordons and drains it again.
            if let Err(e) =
                self.ctx.ledger.update(|l| kept.iter().for_each(|i| _ = LedgerEdit::Keep(i.clone()).apply(l))).await
            {
                warn!(error = %e, "could not record an operator's uncordon; the next plan may drain again");
            }
        }
    }

    /// Waits at most half a tick for the evictions this pass sent (the rest are answered beside
    /// the next passes, see [`EvictionsInFlight`]) and folds in every answer that came.
    async fn await_evictions(&mut self, sent: HashSet<Id>, now: Timestamp, report: &mut DrainReport) {
        if sent.is_empty() {
            return;
        }
        let answers = self.evictions.answered_by(sent, tokio::time::Instant::now() + self.settings.tick / 2).await;
        self.fold_evictions(answers, now, report).await;
    }

    /// Folds eviction answers into the drains, node by node, and tells the first refusal of each.
    async fn fold_evictions(&mut self, answers: Vec<EvictionAnswer>, now: Timestamp, report: &mut DrainReport) {
        if answers.is_empty() {
            return;
        }
        let mut by_node: BTreeMap<NodeName, (GroupName, Vec<EvictionResultOf>)> = BTreeMap::new();
        for a in answers {
            by_node.entry(a.node).or_insert_with(|| (a.group, Vec::new())).1.push((a.pod, a.outcome));
        }
        let mut tells = Vec::new();
        for (node, (group, results)) in by_node {
            if let Some(event) = self.settle_round(&node, &group, &results, now, report) {
                tells.push(event);
            }
        }
        super::publish_all(&self.ctx.events, tells).await;
    }

    /// Checks again, at the moment, each joining instance chosen to give back capacity AWS took
    /// first, and queues its termination with decrement: Auto Scaling still lists it in its group
    /// (what a Node or a tenant cannot write), no Node claiming it is Ready, and a live read finds
    /// no pod to evict on any Node that does. One that fails a check is unchosen, so the next plan
    /// chooses again (a node that joined is then given back by its drain); one whose check could
    /// not be made waits for the next pass.
    async fn give_back_joining(&mut self, joining: &[JoiningGiveBack], snapshot: &Snapshot) {
        let joining: Vec<&JoiningGiveBack> =
            joining.iter().filter(|j| !self.to_terminate.contains_key(&j.instance)).collect();
        if joining.is_empty() {
            return;
        }
        let ids: Vec<InstanceId> = joining.iter().map(|j| j.instance.clone()).collect();
        let listed = match self.ctx.aws.groups_of(&ids).await {
            Ok(listed) => listed,
            Err(e) => {
                warn!(error = %e, instances = ids.len(), "could not check joining instances chosen to give back; retrying");
                return;
            }
        };
        let mut unchosen = Vec::new();
        for j in joining {
            let claiming: Vec<&Node> =
                snapshot.nodes.values().filter(|n| n.instance.as_ref() == Some(&j.instance)).collect();
            let mut check = if listed.get(&j.instance) != Some(&j.group) {
                JoiningCheck::MayNotGo("Auto Scaling no longer lists it in the group")
            } else if claiming.iter().any(|n| n.ready) {
                JoiningCheck::MayNotGo("its Node is Ready")
            } else {
                JoiningCheck::MayGo
            };
            for node in &claiming {
                if check != JoiningCheck::MayGo {
                    break;
                }
                match within(self.settings.eviction_call_timeout, self.ctx.writes.live_pods(&node.name)).await {
                    Ok(pods) if pods.iter().any(|p| p.class.is_evictable()) => {
                        check = JoiningCheck::MayNotGo("a pod runs on its Node");
                    }
                    Ok(_) => {}
                    Err(e) => {
                        warn!(node = %node.name, instance = %j.instance, error = %e, "could not read the pods of a joining instance's Node; it is not terminated until a read shows none");
                        check = JoiningCheck::Unknown;
                    }
                }
            }
            match check {
                JoiningCheck::MayGo => {
                    info!(group = %j.group, instance = %j.instance, reclaimed = %j.reclaimed, "giving back capacity AWS took first: terminating a joining instance before it serves");
                    self.to_terminate.insert(
                        j.instance.clone(),
                        PendingTermination {
                            group: j.group.clone(),
                            node: None,
                            instance: j.instance.clone(),
                            decrement: true,
                            gives_back: Some(j.reclaimed.clone()),
                        },
                    );
                }
                JoiningCheck::Unknown => {}
                JoiningCheck::MayNotGo(why) => {
                    info!(group = %j.group, instance = %j.instance, why, "a joining instance chosen to give back capacity may not go; choosing again");
                    unchosen.push(LedgerEdit::EndGiveBack(j.reclaimed.clone()));
                }
            }
        }
        if !unchosen.is_empty() {
            if let Err(e) = self.ctx.ledger.update(|l| _ = apply_all(l, &unchosen)).await {
                warn!(error = %e, "could not unchoose joining instances; retried next pass");
            }
        }
    }

    /// Reads the live pods of the nodes whose drains look done, concurrently, each within the
    /// eviction call's deadline, and folds them in for the next pass. A read that fails or does not
    /// answer leaves its drain open. When some node was found empty, the next pass comes at once:
    /// it ends that drain while the read is fresh.
    async fn read_live_pods(&mut self, nodes: &[NodeName]) {
        if nodes.is_empty() {
            return;
        }
        let writes = &self.ctx.writes;
        let deadline = self.settings.eviction_call_timeout;
        let calls: Vec<_> = nodes.iter().map(|node| read_within(writes, deadline, node.clone())).collect();
        let reads: Vec<(NodeName, Result<Vec<Pod>, String>)> =
            stream::iter(calls).buffer_unordered(self.settings.evictions_in_flight.max(1)).collect().await;
        for (node, read) in reads {
            match read {
                Ok(pods) => self.pass_again |= self.drains.record_live_read(&node, pods),
                Err(e) => {
                    warn!(%node, error = %e, "could not read the pods of a drained node; it is not terminated until a read shows it empty")
                }
            }
        }
    }

    /// Books one node's eviction outcomes: metrics, and the core's progress and backoff. Returns
    /// the `DrainBlockedByPDB` Event when this is the drain's first refusal.
    fn settle_round(
        &mut self,
        node: &NodeName,
        group: &GroupName,
        results: &[EvictionResultOf],
        now: Timestamp,
        report: &mut DrainReport,
    ) -> Option<NodeEvent> {
        let mut blocked = Vec::new();
        let mut folded = Vec::new();
        for (pod, outcome) in results {
            let (label, result) = match outcome {
                Ok(EvictOutcome::Evicted) => (EvictionOutcome::Evicted, EvictionResult::Evicted),
                Ok(EvictOutcome::Gone) => (EvictionOutcome::Gone, EvictionResult::Gone),
                Ok(EvictOutcome::Blocked { budget }) => {
                    (EvictionOutcome::BlockedByPdb, EvictionResult::Blocked { budget: budget.clone() })
                }
                Err(e) => {
                    warn!(pod = %pod, error = %e, "eviction failed; retried next round");
                    (EvictionOutcome::Failed, EvictionResult::Failed)
                }
            };
            self.ctx.metrics.drainer.eviction(group.as_str(), label);
            if let Ok(EvictOutcome::Evicted) = outcome {
                self.displaced(&pod.uid, pod.owner.as_ref(), group, now);
            }
            match result {
                EvictionResult::Evicted | EvictionResult::Gone => report.evicted = report.evicted.saturating_add(1),
                EvictionResult::Blocked { .. } => blocked.push(pod.to_string()),
                EvictionResult::Failed => {}
            }
            folded.push((pod.uid.as_str(), result));
        }
        if !self.drains.in_progress.contains_key(node) {
            // Its drain ended while the calls ran (the node went, or its deadline came).
            return None;
        }
        let refusal = self.drains.record_round(node, folded, &self.ctx.policy, now)?;
        report.blocked = report.blocked.saturating_add(u32::try_from(blocked.len()).unwrap_or(u32::MAX));
        if !refusal.first {
            return None;
        }
        info!(%node, blocked = blocked.len(), "evictions blocked by PDB");
        Some(NodeEvent::drain_blocked_by_pdb(node, &blocked, refusal.wait, refusal.moved))
    }

    /// Terminates drained instances, all at once; a failed termination is retried next tick.
    /// Each is noted as settled in the ledger before the call (its departure is ours, not a
    /// reclaim to give back), and decrements only while its boost still has a node to return.
    async fn terminate_drained(&mut self, report: &mut DrainReport) -> Result<(), DrainerError> {
        if self.to_terminate.is_empty() {
            return Ok(());
        }
        let pending: Vec<PendingTermination> = self.to_terminate.values().cloned().collect();
        if self.settings.suspend_az_rebalance {
            self.suspend_az_rebalance(&pending).await;
        }
        // A give-back's own node was chosen only while its boost had a node to return; settling
        // the instance AWS took before the call keeps a restart from choosing a second node. A
        // decrement is counted before the call too (intent, then outcome): an answer lost to a
        // crash or a timeout never lets another termination decrement for the same node.
        let terminations: Vec<Termination> = pending.iter().map(PendingTermination::termination).collect();
        let mut decisions = Vec::new();
        self.ctx
            .ledger
            .update(|l| {
                let (edits, decided) = decide_terminations(l, &terminations);
                apply_all(l, &edits);
                decisions = decided;
            })
            .await?;
        let aws = &self.ctx.aws;
        let mut retried_of = BTreeMap::new();
        let calls: Vec<_> = pending
            .into_iter()
            .zip(decisions)
            .map(|(p, decided)| {
                retried_of.insert(p.instance.clone(), decided.retried);
                terminate(aws, p, decided.decrement)
            })
            .collect();
        let outcomes: Vec<_> =
            stream::iter(calls).buffer_unordered(self.settings.evictions_in_flight.max(1)).collect().await;
        let mut answered: Vec<(Termination, TerminationAnswer)> = Vec::new();
        let mut done = Vec::new();
        for (p, outcome) in outcomes {
            let node = p.node.as_ref().map_or_else(|| "(joining)".to_string(), ToString::to_string);
            // A failed call is made again at the next pass; any other answer ends it.
            if outcome.is_ok() {
                self.to_terminate.remove(&p.instance);
            }
            let answer = match outcome {
                Ok(TerminateOutcome::Terminated { decremented }) => TerminationAnswer::Terminated { decremented },
                // An earlier call whose answer was lost asked for this termination: gone now, it
                // is taken as ours (counted once; at worst the group stays one node larger).
                Ok(TerminateOutcome::AlreadyGone) if retried_of.get(&p.instance).copied().unwrap_or(false) => {
                    TerminationAnswer::Terminated { decremented: true }
                }
                Ok(TerminateOutcome::AlreadyGone) => TerminationAnswer::TakenFirst,
                Ok(TerminateOutcome::DryRun) => {
                    info!(%node, instance = %p.instance, "dry run: instance not terminated");
                    TerminationAnswer::NotMade
                }
                Err(e) => {
                    warn!(%node, instance = %p.instance, error = %e, "terminating a drained instance failed; retrying");
                    // Refused before anything changed: the count is taken back and retried.
                    if e.may_have_applied() {
                        TerminationAnswer::Unknown
                    } else {
                        TerminationAnswer::NotMade
                    }
                }
            };
            answered.push((p.termination(), answer));
            if let TerminationAnswer::Terminated { decremented } = answer {
                done.push((p, decremented));
            }
        }
        let edits = answer_terminations(answered.iter().map(|(t, a)| (t, *a)));
        self.ctx.ledger.update(|l| _ = apply_all(l, &edits)).await?;
        for (p, decremented) in done {
            if p.gives_back.is_some() && decremented {
                self.ctx.metrics.scaler.give_back(p.group.as_str(), GiveBackOutcome::Written);
            }
            self.ctx.metrics.drainer.terminated(p.group.as_str(), decremented);
            match &p.node {
                Some(node) => {
                    info!(%node, instance = %p.instance, decremented, "instance terminated");
                    let event = NodeEvent::instance_terminated(node, &p.instance, p.gives_back.as_ref(), decremented);
                    self.publish(event).await;
                }
                // No Node to tell: it never joined.
                None => {
                    info!(group = %p.group, instance = %p.instance, gives_back = ?p.gives_back, decremented, "joining instance terminated before it served")
                }
            }
            if decremented && self.az_rebalance.contains(&p.group) {
                self.warn_az_rebalance(p.node.as_ref(), &p.group).await;
            }
            report.terminated.push((p.instance, decremented));
        }
        Ok(())
    }

    /// `--suspend-az-rebalance`: before terminating with decrement in a group whose `AZRebalance`
    /// is active, suspend it there (tagged, so a run without the flag resumes it). A suspension
    /// that fails leaves the termination to go ahead with its warning.
    async fn suspend_az_rebalance(&mut self, pending: &[PendingTermination]) {
        let mut groups: Vec<(&GroupName, Option<&NodeName>)> = Vec::new();
        for p in pending.iter().filter(|p| p.decrement && self.az_rebalance.contains(&p.group)) {
            match groups.iter_mut().find(|(g, _)| *g == &p.group) {
                Some((_, node)) => *node = node.or(p.node.as_ref()),
                None => groups.push((&p.group, p.node.as_ref())),
            }
        }
        for (group, node) in groups {
            match self.ctx.aws.suspend_az_rebalance(group, true, &self.ctx.groups.cluster()).await {
                Ok(()) => {
                    info!(%group, "AZRebalance suspended before a termination with decrement (--suspend-az-rebalance)");
                    self.az_rebalance.remove(group);
                    if let Some(node) = node {
                        self.publish(NodeEvent::az_rebalance_suspended(node, group)).await;
                    }
                }
                Err(e) => warn!(%group, error = %e, "could not suspend AZRebalance; terminating anyway"),
            }
        }
    }

    /// Without `--suspend-az-rebalance`: resumes `AZRebalance` on the groups an earlier run of
    /// this cluster's booster suspended (found once, by their tag naming this cluster), each only
    /// once this cluster is seen to serve it: it holds one of this cluster's nodes and passes
    /// `--asg-tag-filter`. Another cluster's group, suspended by its own booster, is never
    /// touched. A tag of `true` is an older release's, which named no cluster: served is enough.
    async fn resume_az_rebalance(&mut self, snapshot: &Snapshot) {
        if self.az_rebalance_to_resume.is_none() {
            let cluster = self.ctx.groups.cluster();
            let suspended = TagFilter { key: AZ_REBALANCE_SUSPENDED_TAG.into(), value: None };
            match self.ctx.aws.discover_groups(std::slice::from_ref(&suspended)).await {
                Ok(groups) => {
                    let by_us = |g: &GroupDescription| {
                        g.tags.get(AZ_REBALANCE_SUSPENDED_TAG).is_some_and(|by| *by == cluster || by == "true")
                    };
                    self.az_rebalance_to_resume = Some(groups.into_iter().filter(by_us).map(|g| g.name).collect());
                }
                Err(e) => {
                    warn!(error = %e, "could not list the groups whose AZRebalance spots-booster suspended; retrying");
                    return;
                }
            }
        }
        let Some(to_resume) = self.az_rebalance_to_resume.as_mut().filter(|r| !r.is_empty()) else { return };
        let served: BTreeSet<&GroupName> = snapshot
            .nodes
            .values()
            .filter_map(|n| n.group.as_ref())
            .filter(|g| snapshot.groups.get(*g).is_some_and(Group::served))
            .collect();
        let now_served: Vec<GroupName> = to_resume.iter().filter(|g| served.contains(g)).cloned().collect();
        if now_served.is_empty() {
            return;
        }
        let cluster = self.ctx.groups.cluster();
        for group in now_served {
            match self.ctx.aws.suspend_az_rebalance(&group, false, &cluster).await {
                Ok(()) => {
                    info!(%group, "AZRebalance resumed: --suspend-az-rebalance is off");
                    to_resume.remove(&group);
                }
                Err(e) => warn!(%group, error = %e, "could not resume AZRebalance; retrying"),
            }
        }
    }

    /// A termination with decrement in a group whose `AZRebalance` process is active: Auto
    /// Scaling may now terminate instances of its own choosing to even out its zones, and those
    /// terminations drain nothing.
    async fn warn_az_rebalance(&self, node: Option<&NodeName>, group: &GroupName) {
        let shown = node.map_or("(never joined)", NodeName::as_str);
        warn!(node = shown, %group, "terminated with decrement in a group whose AZRebalance process is active: Auto Scaling may terminate other instances, undrained, to even out its zones");
        self.ctx.metrics.drainer.az_rebalance_exposed(group.as_str());
        if let Some(node) = node {
            self.publish(NodeEvent::az_rebalance_risk(node, group)).await;
        }
    }

    fn observe_end(&self, group: &GroupName, outcome: DrainOutcome, started_at: Option<Timestamp>, now: Timestamp) {
        self.ctx.metrics.drainer.drain(group.as_str(), outcome, started_at.map(|at| now.since(at)));
    }

    fn export_progress(&self) {
        let mut per_group: BTreeMap<&str, i64> = BTreeMap::new();
        for d in self.drains.in_progress.values() {
            *per_group.entry(d.group.as_str()).or_default() += 1;
        }
        for (group, _) in self.drains.last_batch_at.iter() {
            let n = per_group.get(group.as_str()).copied().unwrap_or(0);
            self.ctx.metrics.drainer.in_progress(group.as_str(), n);
        }
    }

    async fn publish(&self, event: NodeEvent) {
        self.ctx.events.publish(event).await;
    }
}

impl super::PassError for DrainerError {
    fn not_synced(&self) -> bool {
        matches!(self, DrainerError::NotSynced)
    }

    fn ledger(&self) -> Option<&LedgerError> {
        match self {
            DrainerError::Ledger(l) => Some(l),
            _ => None,
        }
    }
}

impl<A, C, L, W, E> super::Worker for Drainer<A, C, L, W, E>
where
    A: AutoScaling + 'static,
    C: ClusterView + 'static,
    L: LedgerStore + 'static,
    W: ClusterWrites + 'static,
    E: EventSink + 'static,
{
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
mod tests {
    use tokio::time::Instant;

    use super::*;
    use crate::core::FinishedDrain;
    use crate::core::{Evidence, PendingPod, Policy, Signal, SignalKind, SizingMode};
    use crate::fakes::{AsgCall, ClusterCall, FakeAutoScaling, FakeContext, FakeRig};
    use crate::metrics::Metrics;
    use crate::ports::Leadership;
    use crate::workers::scaler::{Scaler, ScalerSettings};
    use crate::workers::Clock;

    type Rigged<T> = (
        FakeRig,
        Arc<FakeContext>,
        Scaler<
            FakeAutoScaling,
            crate::fakes::InMemoryCluster,
            crate::fakes::MemoryLedger,
            crate::fakes::FakeClusterWrites,
            crate::fakes::RecordedEvents,
        >,
        T,
    );

    type TestDrainer = Drainer<
        FakeAutoScaling,
        crate::fakes::InMemoryCluster,
        crate::fakes::MemoryLedger,
        crate::fakes::FakeClusterWrites,
        crate::fakes::RecordedEvents,
    >;

    /// `now` follows tokio's (paused) clock from 1,000 s.
    fn paused_clock() -> Clock {
        let start = Instant::now();
        Arc::new(move || Timestamp::from_millis(1_000_000 + start.elapsed().as_millis() as i64))
    }

    fn policy() -> Policy {
        Policy {
            sizing: SizingMode::Count,
            max_boost_per_group: 100,
            drain_timeout: Duration::from_secs(300),
            eviction_backoff_initial: Duration::from_secs(5),
            eviction_backoff_max: Duration::from_secs(60),
            ..Policy::default()
        }
    }

    /// Group `a` (desired 3) with n1..n3; n1 is cordoned by NTH with three pods and at risk.
    async fn rebalanced(policy: Policy) -> Rigged<TestDrainer> {
        let aws = FakeAutoScaling::default()
            .with_group("a", 3, 10)
            .with_instance("a", "i-n1")
            .with_instance("a", "i-n2")
            .with_instance("a", "i-n3");
        let rig = FakeRig::new(aws);
        for name in ["n1", "n2", "n3"] {
            let mut node = Node::test(name, "a").with_pods(3, 500, 1 << 30);
            node.group = None; // resolved through Auto Scaling, as in the daemon
            rig.cluster.put_node(node);
        }
        rig.cluster.edit(|s| s.nodes.get_mut(&NodeName::from("n1")).unwrap().cordoned = true);
        let ctx = rig.context(policy, paused_clock(), Arc::new(Metrics::new())).await;
        rig.cluster.signal(Signal {
            instance: "i-n1".into(),
            node: "n1".into(),
            kind: SignalKind::Rebalance,
            observed_at: (ctx.clock)(),
            // NTH's Event, believed because NTH cordoned n1 and its instance is spot.
            evidence: Evidence::Event,
            notice_deadline: None,
        });
        let scaler = Scaler::new(ctx.clone(), ScalerSettings::default());
        let drainer = Drainer::new(ctx.clone(), DrainerSettings::default());
        (rig, ctx, scaler, drainer)
    }

    /// A replacement joins group `a`, Ready.
    fn join(rig: &FakeRig, ctx: &FakeContext, name: &str) {
        let mut node = Node::test(name, "a");
        node.created = (ctx.clock)();
        rig.cluster.put_node(node);
    }

    #[tokio::test(start_paused = true)]
    async fn the_replacements_of_the_pods_it_evicts_count_their_pending_time_as_the_capacity_gap() {
        let (rig, ctx, mut scaler, mut drainer) = rebalanced(policy()).await;
        scaler.tick().await.unwrap();
        join(&rig, &ctx, "r1");
        assert_eq!(drainer.tick().await.unwrap().evicted, 3);
        // The ReplicaSet makes three new pods; the scheduler has not placed them yet.
        let since = (ctx.clock)();
        let replacements = |ended: Option<Timestamp>| {
            (0..3)
                .map(|k| PendingPod {
                    uid: format!("new-{k}").as_str().into(),
                    owner: "uid-owner".into(),
                    since,
                    ended,
                })
                .collect::<Vec<_>>()
        };
        rig.cluster.set_pending(replacements(None));
        tokio::time::advance(Duration::from_secs(10)).await;
        drainer.tick().await.unwrap();
        let gap = ctx.metrics.market.capacity_gap_total();
        assert!((gap - 30.0).abs() < 0.5, "three pods Pending for 10 s: {gap}");

        rig.cluster.set_pending(replacements(Some(since.plus(Duration::from_secs(12)))));
        tokio::time::advance(Duration::from_secs(10)).await;
        drainer.tick().await.unwrap();
        drainer.tick().await.unwrap();
        let gap = ctx.metrics.market.capacity_gap_total();
        assert!((gap - 36.0).abs() < 0.5, "bound 12 s after they appeared: {gap}");
        assert!(ctx.metrics.encode().contains("spots_booster_capacity_gap_pod_seconds_total{group=\"a\"}"));
    }

    #[tokio::test(start_paused = true)]
    async fn pods_lost_with_a_signalled_node_count_as_displaced_by_the_leader_alone() {
        for leading in [true, false] {
            let (rig, ctx, _scaler, mut drainer) = rebalanced(policy()).await;
            ctx.leadership.set(leading);
            drainer.tick().await.unwrap();
            // AWS takes n1 before any drain: its three pods go with it, and come back Pending.
            rig.cluster.remove_node("n1");
            drainer.tick().await.unwrap();
            let since = (ctx.clock)();
            rig.cluster.set_pending(
                (0..3)
                    .map(|k| PendingPod {
                        uid: format!("new-{k}").as_str().into(),
                        owner: "uid-owner".into(),
                        since,
                        ended: None,
                    })
                    .collect(),
            );
            tokio::time::advance(Duration::from_secs(10)).await;
            drainer.tick().await.unwrap();
            let gap = ctx.metrics.market.capacity_gap_total();
            let expected = if leading { 30.0 } else { 0.0 };
            assert!((gap - expected).abs() < 0.5, "leading: {leading}: {gap}");
        }
    }

    fn terminations(aws: &FakeAutoScaling) -> Vec<(InstanceId, bool)> {
        aws.calls()
            .into_iter()
            .filter_map(|c| if let AsgCall::Terminate(i, d) = c { Some((i, d)) } else { None })
            .collect()
    }

    #[tokio::test(start_paused = true)]
    async fn drains_only_once_the_replacement_is_ready_then_terminates_with_decrement() {
        let (rig, ctx, mut scaler, mut drainer) = rebalanced(policy()).await;
        scaler.tick().await.unwrap();
        assert_eq!(rig.aws.desired("a"), 4);

        tokio::time::advance(Duration::from_secs(5)).await;
        let report = drainer.tick().await.unwrap();
        assert!(report.started.is_empty(), "no replacement Ready yet: {report:?}");
        assert!(rig.writes.evicted().is_empty());

        join(&rig, &ctx, "r1");
        let report = drainer.tick().await.unwrap();
        assert_eq!(report.started, vec![NodeName::from("n1")]);
        assert_eq!(report.evicted, 3);
        assert!(rig.writes.calls().contains(&ClusterCall::Protect("r1".into(), true)), "{:?}", rig.writes.calls());
        // NTH already cordoned it: the call takes it out of load balancers.
        assert!(rig.writes.calls().contains(&ClusterCall::Cordon("n1".into())), "{:?}", rig.writes.calls());

        let report = drainer.tick().await.unwrap();
        assert_eq!(report.drained, vec![NodeName::from("n1")]);
        assert_eq!(terminations(&rig.aws), vec![("i-n1".into(), true)]);
        assert_eq!(rig.aws.desired("a"), 3, "the boost is given back");
        assert_eq!(rig.ledger.saved().records[0].returned, 1);
        assert_eq!(rig.events.reasons_for("n1"), vec!["BoostRequested", "DrainStarted", "InstanceTerminated"]);

        // The node leaves; the boost closes and the replacement's protection is lifted.
        rig.cluster.remove_node("n1");
        scaler.tick().await.unwrap();
        assert!(rig.ledger.saved().records.is_empty());
        drainer.tick().await.unwrap();
        assert!(rig.cluster.protected().is_empty());
        assert_eq!(terminations(&rig.aws).len(), 1, "terminated once");
    }

    #[tokio::test(start_paused = true)]
    async fn a_termination_with_decrement_where_az_rebalance_is_active_is_warned_about() {
        let (rig, ctx, mut scaler, mut drainer) = rebalanced(policy()).await;
        let _ = rig.aws.clone().with_az_rebalance("a");
        scaler.tick().await.unwrap();
        join(&rig, &ctx, "r1");
        drainer.tick().await.unwrap();
        drainer.tick().await.unwrap();
        assert_eq!(terminations(&rig.aws), vec![("i-n1".into(), true)]);
        assert_eq!(
            rig.events.reasons_for("n1"),
            vec!["BoostRequested", "DrainStarted", "InstanceTerminated", "AZRebalanceRisk"]
        );
        let text = ctx.metrics.encode();
        assert!(text.contains("spots_booster_az_rebalance_exposed_terminations_total{group=\"a\"} 1"), "{text}");
    }

    #[tokio::test(start_paused = true)]
    async fn with_suspend_az_rebalance_it_is_suspended_before_the_termination_and_resumed_without_it() {
        let (rig, ctx, mut scaler, _) = rebalanced(policy()).await;
        let _ = rig.aws.clone().with_az_rebalance("a");
        let settings = DrainerSettings { suspend_az_rebalance: true, ..DrainerSettings::default() };
        let mut drainer = Drainer::new(ctx.clone(), settings);
        scaler.tick().await.unwrap();
        join(&rig, &ctx, "r1");
        drainer.tick().await.unwrap();
        drainer.tick().await.unwrap();
        let calls = rig.aws.calls();
        let suspended = calls.iter().position(|c| *c == AsgCall::AzRebalance("a".into(), true)).expect("suspended");
        let terminated = calls.iter().position(|c| matches!(c, AsgCall::Terminate(_, true))).expect("terminated");
        assert!(suspended < terminated, "suspended before the termination: {calls:?}");
        assert!(!rig.aws.az_rebalance("a"));
        let by = rig.aws.tags("a").get(AZ_REBALANCE_SUSPENDED_TAG).cloned();
        assert_eq!(by.as_deref(), Some(crate::fakes::CLUSTER), "the tag names the cluster that suspended it");
        assert_eq!(
            rig.events.reasons_for("n1"),
            vec!["BoostRequested", "DrainStarted", "AZRebalanceSuspended", "InstanceTerminated"]
        );

        // The next run goes without the flag: what the booster suspended is resumed, once.
        let mut without = Drainer::new(ctx.clone(), DrainerSettings::default());
        without.tick().await.unwrap();
        without.tick().await.unwrap();
        assert!(rig.aws.az_rebalance("a"));
        assert!(!rig.aws.tags("a").contains_key(AZ_REBALANCE_SUSPENDED_TAG));
        let resumes = rig.aws.calls().iter().filter(|c| **c == AsgCall::AzRebalance("a".into(), false)).count();
        assert_eq!(resumes, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn without_the_flag_only_the_suspended_groups_this_cluster_serves_are_resumed() {
        let aws = FakeAutoScaling::default()
            .with_group("a", 3, 10)
            .with_instance("a", "i-n1")
            .with_tag("a", AZ_REBALANCE_SUSPENDED_TAG, crate::fakes::CLUSTER)
            .with_tag("a", "team", "batch")
            .with_group("legacy", 3, 10)
            .with_instance("legacy", "i-l1")
            .with_tag("legacy", AZ_REBALANCE_SUSPENDED_TAG, "true")
            .with_tag("legacy", "team", "batch")
            .with_group("shared", 3, 10)
            .with_instance("shared", "i-s1")
            .with_tag("shared", AZ_REBALANCE_SUSPENDED_TAG, "other-cluster")
            .with_tag("shared", "team", "batch")
            .with_group("unselected", 3, 10)
            .with_instance("unselected", "i-u1")
            .with_tag("unselected", AZ_REBALANCE_SUSPENDED_TAG, "true")
            .with_group("other-cluster", 3, 10)
            .with_instance("other-cluster", "i-o1")
            .with_tag("other-cluster", AZ_REBALANCE_SUSPENDED_TAG, "true");
        let rig = FakeRig::new(aws);
        let ctx = rig.context(policy(), paused_clock(), Arc::new(Metrics::new())).await;
        ctx.groups.discover(&rig.aws, &["team=batch".parse().unwrap()]).await.unwrap();
        let mut drainer = Drainer::new(ctx.clone(), DrainerSettings::default());
        drainer.tick().await.unwrap();
        assert!(rig.aws.calls().iter().all(|c| !matches!(c, AsgCall::AzRebalance(..))), "no node of a is known yet");

        for (name, group) in [("n1", "a"), ("l1", "legacy"), ("s1", "shared"), ("u1", "unselected")] {
            let mut node = Node::test(name, group);
            node.group = None; // resolved through Auto Scaling, as in the daemon
            rig.cluster.put_node(node);
        }
        for _ in 0..3 {
            drainer.tick().await.unwrap();
        }
        let resumed: Vec<_> = rig.aws.calls().into_iter().filter(|c| matches!(c, AsgCall::AzRebalance(..))).collect();
        assert_eq!(resumed.len(), 2, "once each, and only the groups it serves and suspended: {resumed:?}");
        for group in ["a", "legacy"] {
            assert!(resumed.contains(&AsgCall::AzRebalance(group.into(), false)), "{group}: {resumed:?}");
        }
        assert!(
            rig.aws.tags("shared").contains_key(AZ_REBALANCE_SUSPENDED_TAG),
            "another booster's suspension is kept"
        );
        assert!(rig.aws.tags("other-cluster").contains_key(AZ_REBALANCE_SUSPENDED_TAG), "another cluster's is left");
        assert!(rig.aws.tags("unselected").contains_key(AZ_REBALANCE_SUSPENDED_TAG), "--asg-tag-filter leaves it out");
    }

    #[tokio::test(start_paused = true)]
    async fn an_opt_out_defers_a_voluntary_drain_until_a_confirmed_interruption_overrides_it() {
        let (rig, ctx, mut scaler, mut drainer) = rebalanced(policy()).await;
        rig.cluster.edit(|s| {
            let pods = &mut s.nodes.get_mut(&NodeName::from("n1")).unwrap().pods;
            pods[0].opt_out = Some(crate::core::OptOut::DoNotDisrupt);
            pods[1].bare = true;
        });
        scaler.tick().await.unwrap();
        join(&rig, &ctx, "r1");
        for _ in 0..3 {
            let report = drainer.tick().await.unwrap();
            assert!(report.started.is_empty(), "a rebalance leaves an opted-out pod alone: {report:?}");
        }
        assert!(rig.writes.evicted().is_empty());
        assert_eq!(rig.events.reasons_for("n1"), vec!["BoostRequested", "DrainDeferred"], "told once");

        rig.cluster.signal(Signal {
            instance: "i-n1".into(),
            node: "n1".into(),
            kind: SignalKind::SpotInterruption,
            observed_at: (ctx.clock)(),
            evidence: Evidence::Event,
            notice_deadline: None,
        });
        scaler.tick().await.unwrap();
        assert_eq!(rig.aws.interruption_lookups(), 0, "a boost never waits for EC2's confirmation");
        let report = drainer.tick().await.unwrap();
        assert!(report.started.is_empty(), "an Event on a spot instance is a warning: {report:?}");
        assert_eq!(rig.aws.interruption_lookups(), 1, "the drain asks");
        rig.aws.interrupt("i-n1");
        assert!(drainer.tick().await.unwrap().started.is_empty(), "EC2's \"no\" is used for 5 s");
        tokio::time::advance(Duration::from_secs(5)).await;
        let report = drainer.tick().await.unwrap();
        assert_eq!(report.started, vec![NodeName::from("n1")], "EC2 marked it: the instance goes anyway");
        assert_eq!(report.evicted, 3);
        assert_eq!(
            rig.events.reasons_for("n1"),
            vec!["BoostRequested", "DrainDeferred", "OptOutOverridden", "BarePodsEvicted", "DrainStarted"]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_pdb_refusal_backs_off_and_tells_once_then_the_drain_completes() {
        let (rig, ctx, mut scaler, mut drainer) = rebalanced(policy()).await;
        rig.writes.block("uid-n1-p0", true);
        scaler.tick().await.unwrap();
        join(&rig, &ctx, "r1");
        let report = drainer.tick().await.unwrap();
        assert_eq!((report.evicted, report.blocked), (2, 1));

        // Within the backoff (5 s) nothing is retried.
        tokio::time::advance(Duration::from_secs(2)).await;
        let report = drainer.tick().await.unwrap();
        assert_eq!((report.evicted, report.blocked), (0, 0));
        tokio::time::advance(Duration::from_secs(4)).await;
        let report = drainer.tick().await.unwrap();
        assert_eq!(report.blocked, 1, "retried after the backoff");
        assert_eq!(rig.events.reasons_for("n1").iter().filter(|r| **r == "DrainBlockedByPDB").count(), 1);
        assert!(terminations(&rig.aws).is_empty(), "never terminated while a pod is left");

        rig.writes.block("uid-n1-p0", false);
        tokio::time::advance(Duration::from_secs(11)).await;
        assert_eq!(drainer.tick().await.unwrap().evicted, 1);
        assert_eq!(drainer.tick().await.unwrap().drained, vec![NodeName::from("n1")]);
        assert_eq!(terminations(&rig.aws), vec![("i-n1".into(), true)]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_drain_that_outlives_its_deadline_stops_and_leaves_the_node_cordoned() {
        let (rig, ctx, mut scaler, mut drainer) = rebalanced(policy()).await;
        rig.writes.linger("uid-n1-p2");
        scaler.tick().await.unwrap();
        join(&rig, &ctx, "r1");
        drainer.tick().await.unwrap();
        for _ in 0..10 {
            tokio::time::advance(Duration::from_secs(30)).await;
            drainer.tick().await.unwrap();
        }
        assert_eq!(drainer.state().finished.get(&InstanceId::from("i-n1")), Some(&FinishedDrain::TimedOut));
        assert!(terminations(&rig.aws).is_empty(), "--terminate-after-drain-timeout is off");
        assert!(rig.events.reasons_for("n1").contains(&"DrainTimedOut"));
        let evictions = rig.writes.calls().iter().filter(|c| matches!(c, ClusterCall::Evict(..))).count();
        assert_eq!(evictions, 3, "an evicted pod that lingers is waited for, not evicted again");
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_termination_is_retried_and_gives_back_once() {
        let (rig, ctx, mut scaler, mut drainer) = rebalanced(policy()).await;
        scaler.tick().await.unwrap();
        join(&rig, &ctx, "r1");
        drainer.tick().await.unwrap();
        rig.aws.fail_terminations(1);
        let report = drainer.tick().await.unwrap();
        assert!(report.terminated.is_empty());
        let report = drainer.tick().await.unwrap();
        assert_eq!(report.terminated, vec![("i-n1".into(), true)]);
        drainer.tick().await.unwrap();
        assert_eq!(terminations(&rig.aws).len(), 2, "one failure, one success");
        assert_eq!(rig.ledger.saved().records[0].returned, 1);
        assert_eq!(rig.aws.desired("a"), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn losing_the_lease_stops_evictions_at_once() {
        let (rig, ctx, mut scaler, mut drainer) = rebalanced(policy()).await;
        rig.writes.block("uid-n1-p0", true);
        scaler.tick().await.unwrap();
        join(&rig, &ctx, "r1");
        drainer.tick().await.unwrap();
        let before = rig.writes.calls().len();

        rig.leadership.set(false);
        rig.writes.block("uid-n1-p0", false);
        tokio::time::advance(Duration::from_secs(60)).await;
        let report = drainer.tick().await.unwrap();
        assert_eq!(report.not_leader, 0, "nothing new to start");
        assert_eq!(rig.writes.calls().len(), before, "no write after the lease is lost");
        assert!(drainer.state().in_progress.is_empty());

        // The new leader (here: the same replica, again) re-plans and finishes the drain.
        let follower = FakeRig { leadership: Leadership::always(), ..rig.clone() };
        let ctx2 = follower.context(policy(), paused_clock(), Arc::new(Metrics::new())).await;
        let mut next = Drainer::new(ctx2, DrainerSettings::default());
        assert_eq!(next.tick().await.unwrap().started, vec![NodeName::from("n1")]);
        assert_eq!(next.tick().await.unwrap().drained, vec![NodeName::from("n1")]);
        assert_eq!(terminations(&rig.aws), vec![("i-n1".into(), true)]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_drain_survives_its_signal_vanishing_and_stops_if_someone_uncordons() {
        let (rig, ctx, mut scaler, mut first) = rebalanced(policy()).await;
        rig.writes.block("uid-n1-p0", true);
        scaler.tick().await.unwrap();
        join(&rig, &ctx, "r1");
        first.tick().await.unwrap();
        // The Event expires (and the daemon restarts): the ledger still knows n1 was at risk.
        rig.cluster.edit(|s| s.signals.clear());
        let mut restarted = Drainer::new(ctx.clone(), DrainerSettings::default());
        assert_eq!(restarted.tick().await.unwrap().started, vec![NodeName::from("n1")]);
        assert!(terminations(&rig.aws).is_empty(), "a PDB still holds one pod: no termination");

        rig.cluster.edit(|s| s.nodes.get_mut(&NodeName::from("n1")).unwrap().cordoned = false);
        tokio::time::advance(Duration::from_secs(60)).await;
        rig.writes.block("uid-n1-p0", false);
        let report = restarted.tick().await.unwrap();
        assert!(report.drained.is_empty() && report.terminated.is_empty(), "{report:?}");
        assert!(terminations(&rig.aws).is_empty(), "an uncordoned node is never terminated");

        // The operator wins for good: no later plan, nor a restart, cordons and drains it again.
        for _ in 0..3 {
            tokio::time::advance(Duration::from_secs(30)).await;
            assert!(restarted.tick().await.unwrap().started.is_empty());
        }
        let mut again = Drainer::new(ctx.clone(), DrainerSettings::default());
        assert!(again.tick().await.unwrap().started.is_empty(), "a restart remembers it");
        assert!(!rig.cluster.edit(|s| s.nodes[&NodeName::from("n1")].cordoned).unwrap(), "never cordoned again");
    }

    /// NTH's taint on n1, no cordon (a rotation looks the same): the drainer cordons it itself.
    fn tainted_not_cordoned(rig: &FakeRig) {
        rig.cluster.edit(|s| {
            s.nodes.get_mut(&NodeName::from("n1")).unwrap().cordoned = false;
            for signal in &mut s.signals {
                signal.evidence = Evidence::NodeTaint;
            }
        });
    }

    #[tokio::test(start_paused = true)]
    async fn our_own_cordon_not_yet_seen_by_the_watch_is_not_an_operators_uncordon() {
        let (rig, ctx, mut scaler, mut drainer) = rebalanced(policy()).await;
        tainted_not_cordoned(&rig);
        scaler.tick().await.unwrap();
        join(&rig, &ctx, "r1");
        // The snapshot of this tick predates the cordon the drainer writes in it.
        let report = drainer.tick().await.unwrap();
        assert_eq!(report.started, vec![NodeName::from("n1")]);
        assert!(rig.writes.calls().contains(&ClusterCall::Cordon("n1".into())));
        assert_eq!(report.evicted, 3, "the drain goes on: {report:?}");
        let report = drainer.tick().await.unwrap();
        assert_eq!(report.drained, vec![NodeName::from("n1")]);
        assert_eq!(terminations(&rig.aws), vec![("i-n1".into(), true)]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_drain_whose_cordon_failed_evicts_nothing_and_starts_at_the_next_tick() {
        let (rig, ctx, mut scaler, mut drainer) = rebalanced(policy()).await;
        tainted_not_cordoned(&rig);
        scaler.tick().await.unwrap();
        join(&rig, &ctx, "r1");
        rig.writes.fail_cordons(true);
        let report = drainer.tick().await.unwrap();
        assert!(report.started.is_empty() && report.evicted == 0, "{report:?}");
        assert!(rig.writes.evicted().is_empty(), "no pod leaves a node that is not cordoned");
        assert!(drainer.state().in_progress.is_empty() && drainer.state().evictions.is_empty());

        rig.writes.fail_cordons(false);
        // The attempt counts as the group's batch: the next one keeps --time-between-drains.
        tokio::time::advance(ctx.policy.time_between_drains).await;
        let report = drainer.tick().await.unwrap();
        assert_eq!(report.started, vec![NodeName::from("n1")]);
        assert_eq!(report.evicted, 3);
    }

    /// Group `a` with n1..n4 (listed by Auto Scaling, no node naming its group); n1 and n2 are
    /// cordoned by NTH, at risk, with three pods each, and boosted with their two replacements
    /// Ready.
    async fn two_at_risk(policy: Policy) -> Rigged<TestDrainer> {
        let mut aws = FakeAutoScaling::default().with_group("a", 4, 10);
        for i in 1..=4 {
            aws = aws.with_instance("a", &format!("i-n{i}"));
        }
        let rig = FakeRig::new(aws);
        for i in 1..=4 {
            let mut node = Node::test(&format!("n{i}"), "a").with_pods(3, 500, 1 << 30);
            node.group = None;
            node.cordoned = i <= 2;
            rig.cluster.put_node(node);
        }
        let ctx = rig.context(policy, paused_clock(), Arc::new(Metrics::new())).await;
        for name in ["n1", "n2"] {
            rig.cluster.signal(Signal {
                instance: format!("i-{name}").as_str().into(),
                node: name.into(),
                kind: SignalKind::Rebalance,
                observed_at: (ctx.clock)(),
                evidence: Evidence::NodeTaint,
                notice_deadline: None,
            });
        }
        let mut scaler = Scaler::new(ctx.clone(), ScalerSettings::default());
        scaler.tick().await.unwrap();
        assert_eq!(rig.aws.desired("a"), 6);
        join(&rig, &ctx, "r1");
        join(&rig, &ctx, "r2");
        let drainer = Drainer::new(ctx.clone(), DrainerSettings::default());
        (rig, ctx, scaler, drainer)
    }

    #[tokio::test(start_paused = true)]
    async fn a_pod_whose_budget_never_allows_disruption_holds_back_only_its_own_node() {
        let (rig, ctx, _scaler, mut drainer) = two_at_risk(policy()).await;
        rig.writes.block("uid-n1-p0", true);
        let report = drainer.tick().await.unwrap();
        assert_eq!(report.started.len(), 2);
        assert_eq!((report.evicted, report.blocked), (5, 1));
        let told = vec!["BoostRequested", "DrainStarted", "DrainBlockedByPDB"];
        assert_eq!(rig.events.reasons_for("n1"), told, "told in the first round");

        let report = drainer.tick().await.unwrap();
        assert_eq!(report.drained, vec![NodeName::from("n2")]);
        assert_eq!(terminations(&rig.aws), vec![("i-n2".into(), true)], "n2 goes at once, not after n1");

        // The budget never moves: n1's drain times out on time and n1 stays, cordoned.
        let started = Instant::now();
        while drainer.state().in_progress.contains_key(&NodeName::from("n1")) {
            tokio::time::advance(Duration::from_secs(2)).await;
            drainer.tick().await.unwrap();
        }
        let waited = started.elapsed();
        assert!(waited >= ctx.policy.drain_timeout && waited <= ctx.policy.drain_timeout + Duration::from_secs(4));
        assert_eq!(drainer.state().finished.get(&InstanceId::from("i-n1")), Some(&FinishedDrain::TimedOut));
        assert!(rig.events.reasons_for("n1").contains(&"DrainTimedOut"));
        assert_eq!(terminations(&rig.aws).len(), 1);
        let told = rig.events.reasons_for("n1").iter().filter(|r| **r == "DrainBlockedByPDB").count();
        assert_eq!(told, 1, "told once per drain");
    }

    #[tokio::test(start_paused = true)]
    async fn a_new_signal_brings_the_next_pass_forward_to_its_burst_s_end() {
        use crate::workers::Worker;
        let (_rig, _ctx, _scaler, drainer) = two_at_risk(policy()).await;
        let signals = Arc::new(tokio::sync::Notify::new());
        let mut drainer = drainer.woken_by(signals.clone());
        signals.notify_one();
        let started = Instant::now();
        drainer.next_pass_due().await;
        assert_eq!(started.elapsed(), SIGNAL_COALESCE);
        let started = Instant::now();
        drainer.next_pass_due().await;
        assert_eq!(started.elapsed(), drainer.settings.tick, "no signal: the tick");
    }

    #[tokio::test(start_paused = true)]
    async fn an_eviction_call_that_never_answers_does_not_hold_the_other_node() {
        let (rig, ctx, _scaler, mut drainer) = two_at_risk(policy()).await;
        rig.writes.stall("uid-n1-p1");
        let started = Instant::now();
        let report = drainer.tick().await.unwrap();
        assert!(started.elapsed() <= DrainerSettings::default().tick, "{:?}", started.elapsed());
        assert_eq!(report.evicted, 5, "every other pod went in the same round");
        assert_eq!(drainer.tick().await.unwrap().drained, vec![NodeName::from("n2")]);
        let failed = || {
            let text = ctx.metrics.encode();
            let line = "spots_booster_evictions_total{group=\"a\",outcome=\"failed\"} ";
            text.lines().find_map(|l| l.strip_prefix(line)?.parse::<u32>().ok()).unwrap_or(0)
        };
        assert_eq!(failed(), 0, "its call still runs: not sent again, nor counted yet");

        // Failed at its own deadline (its task runs beside the passes), folded in at the next
        // pass, and sent again.
        tokio::time::advance(DrainerSettings::default().eviction_call_timeout).await;
        tokio::task::yield_now().await;
        drainer.tick().await.unwrap();
        assert_eq!(failed(), 1);
        tokio::time::advance(DrainerSettings::default().eviction_call_timeout).await;
        tokio::task::yield_now().await;
        drainer.tick().await.unwrap();
        assert_eq!(failed(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn an_instance_aws_took_between_drain_and_termination_is_given_back_through_drained_nodes() {
        let (rig, ctx, mut scaler, mut drainer) = two_at_risk(policy()).await;
        drainer.tick().await.unwrap();
        rig.aws.reclaim("i-n2", "i-r9");
        rig.aws.reclaim("i-n1", "i-r8");
        let report = drainer.tick().await.unwrap();
        assert!(report.terminated.is_empty(), "{report:?}");
        assert!(rig.ledger.saved().records[0].settled.is_empty(), "not ours: the scaler gives them back");
        rig.cluster.remove_node("n1");
        rig.cluster.remove_node("n2");
        tokio::time::advance(Duration::from_secs(61)).await;
        scaler.tick().await.unwrap();
        assert!(rig.ledger.saved().records[0].giving_back.is_empty(), "the group's replacements are still joining");
        // They join, and pods land on them.
        for name in ["r8", "r9"] {
            let mut node = Node::test(name, "a").with_pods(3, 500, 1 << 30);
            node.created = (ctx.clock)();
            node.group = None;
            rig.cluster.put_node(node);
        }
        scaler.tick().await.unwrap();
        assert_eq!(rig.aws.desired("a"), 6, "nothing lowered without naming the instance it removes");
        let chosen: Vec<NodeName> =
            rig.ledger.saved().records[0].giving_back.values().filter_map(|g| g.node.clone()).collect();
        assert_eq!(chosen, vec![NodeName::from("r8"), NodeName::from("r9")], "as busy as the rest, and newest");

        let report = drainer.tick().await.unwrap();
        assert_eq!(report.started, vec![NodeName::from("r8"), NodeName::from("r9")]);
        assert!(rig.writes.calls().contains(&ClusterCall::Cordon("r8".into())), "cordoned before any eviction");
        assert_eq!(report.evicted, 6, "every pod leaves through the Eviction API");
        let report = drainer.tick().await.unwrap();
        assert_eq!(report.terminated, vec![("i-r8".into(), true), ("i-r9".into(), true)]);
        assert_eq!(rig.aws.desired("a"), 4, "both boosted nodes given back");
        let saved = rig.ledger.saved();
        assert_eq!((saved.records[0].returned, saved.records[0].giving_back.len()), (2, 0));
        assert_eq!(rig.events.reasons_for("r8"), vec!["DrainStarted", "InstanceTerminated"]);

        rig.cluster.remove_node("r8");
        rig.cluster.remove_node("r9");
        scaler.tick().await.unwrap();
        assert!(rig.ledger.saved().records.is_empty(), "the boost closes");
        let text = ctx.metrics.encode();
        assert!(text.contains("spots_booster_give_backs_total{group=\"a\",outcome=\"written\"} 2"), "{text}");
    }

    #[tokio::test(start_paused = true)]
    async fn capacity_aws_took_first_is_given_back_through_the_newest_joining_instance_before_it_serves() {
        let (rig, ctx, mut scaler, mut drainer) = two_at_risk(policy()).await;
        drainer.tick().await.unwrap();
        // AWS takes both; the group replaces them with i-r8 and then i-r9, which have not joined.
        rig.aws.reclaim("i-n1", "i-r8");
        rig.aws.reclaim("i-n2", "i-r9");
        rig.aws.launched_at("i-r8", (ctx.clock)());
        rig.aws.launched_at("i-r9", (ctx.clock)().plus(Duration::from_secs(1)));
        rig.cluster.remove_node("n1");
        rig.cluster.remove_node("n2");
        drainer.tick().await.unwrap();
        // i-r9's kubelet registered it, not Ready yet, and a pod was bound to it anyway.
        let mut r9 = Node::test("r9", "a").with_pods(1, 500, 1 << 30);
        (r9.ready, r9.group) = (false, None);
        rig.cluster.put_node(r9);
        // The boosted instances' Nodes went: their group is described again within seconds.
        tokio::time::advance(Duration::from_secs(5)).await;
        scaler.tick().await.unwrap();
        let chosen: Vec<(Option<NodeName>, InstanceId)> =
            rig.ledger.saved().records[0].giving_back.values().map(|g| (g.node.clone(), g.instance.clone())).collect();
        assert_eq!(chosen, vec![(None, "i-r8".into())], "i-r9 carries a pod: never chosen");

        // Between the plan and the drainer, a pod lands on i-r8's Node too: checked at the moment.
        let mut r8 = Node::test("r8", "a").with_pods(1, 500, 1 << 30);
        (r8.ready, r8.group) = (false, None);
        rig.cluster.put_node(r8);
        let report = drainer.tick().await.unwrap();
        assert!(report.terminated.is_empty(), "{report:?}");
        assert!(rig.ledger.saved().records[0].giving_back.is_empty(), "unchosen, to choose again");

        // Without the pods (the live read is what counts), both go before they serve.
        rig.cluster.remove_node("r8");
        rig.cluster.edit(|s| s.nodes.get_mut(&NodeName::from("r9")).unwrap().pods.clear());
        scaler.tick().await.unwrap();
        let report = drainer.tick().await.unwrap();
        assert_eq!(report.terminated, vec![("i-r8".into(), true), ("i-r9".into(), true)], "newest first");
        assert_eq!(rig.aws.desired("a"), 4, "back at the size before the boost at once");
        let saved = rig.ledger.saved();
        assert_eq!((saved.records[0].returned, saved.records[0].giving_back.len()), (2, 0));
        let text = ctx.metrics.encode();
        assert!(text.contains("spots_booster_give_backs_total{group=\"a\",outcome=\"written\"} 2"), "{text}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_give_back_whose_drain_cannot_finish_uncordons_its_node_and_leaves_the_capacity_to_ca() {
        let (rig, ctx, mut scaler, mut drainer) = two_at_risk(policy()).await;
        rig.aws.reclaim("i-n1", "i-r8");
        rig.cluster.remove_node("n1");
        let mut r8 = Node::test("r8", "a").with_pods(3, 500, 1 << 30);
        r8.group = None;
        rig.cluster.put_node(r8);
        tokio::time::advance(Duration::from_secs(61)).await;
        scaler.tick().await.unwrap();
        let chosen = rig.ledger.saved().records[0].giving_back.values().next().unwrap().node.clone().unwrap();
        let pods = rig.cluster.edit(|s| s.nodes[&chosen].pods.clone()).unwrap();
        pods.iter().for_each(|p| rig.writes.block(p.uid.as_str(), true));

        drainer.tick().await.unwrap();
        tokio::time::advance(ctx.policy.drain_timeout).await;
        let report = drainer.tick().await.unwrap();
        assert!(report.timed_out.contains(&chosen), "{report:?}");
        assert!(!terminations(&rig.aws)
            .iter()
            .any(|(i, _)| rig.cluster.current().unwrap().nodes[&chosen].instance.as_ref() == Some(i)));
        assert!(rig.writes.calls().contains(&ClusterCall::Uncordon(chosen.clone())));
        assert!(!rig.cluster.current().unwrap().nodes[&chosen].cordoned, "serving pods again");
        let saved = rig.ledger.saved();
        assert!(saved.records[0].giving_back.is_empty() && saved.records[0].settled.contains(&"i-n1".into()));
        assert_eq!(
            rig.events.reasons_for(chosen.as_str()),
            vec!["DrainStarted", "DrainBlockedByPDB", "GiveBackLeftToClusterAutoscaler"]
        );
        scaler.tick().await.unwrap();
        assert!(rig.ledger.saved().records[0].giving_back.is_empty(), "no second node is chosen");
    }

    #[tokio::test(start_paused = true)]
    async fn an_interruption_notice_drains_before_its_deadline_though_the_replacement_is_late() {
        let (rig, _ctx, mut scaler, mut drainer) = rebalanced(policy()).await;
        rig.cluster.edit(|s| {
            s.signals[0].kind = SignalKind::SpotInterruption;
            s.signals[0].evidence = Evidence::NodeTaint;
        });
        scaler.tick().await.unwrap();
        assert_eq!(rig.aws.desired("a"), 4);

        // Two minutes' notice; pods need 30 s and the lead is 60 s: the drain starts 30 s in.
        tokio::time::advance(Duration::from_secs(29)).await;
        assert!(drainer.tick().await.unwrap().started.is_empty(), "still time for the replacement");
        tokio::time::advance(Duration::from_secs(1)).await;
        let report = drainer.tick().await.unwrap();
        assert_eq!((report.started.len(), report.evicted), (1, 3), "no replacement Ready, but the deadline is near");
        let report = drainer.tick().await.unwrap();
        assert_eq!(report.terminated, vec![("i-n1".into(), true)], "drained 90 s before AWS takes it");
        assert_eq!(rig.aws.desired("a"), 3, "the boost's node is given back with the instance; its launch goes on");
        assert!(rig.events.reasons_for("n1").contains(&"DrainStarted"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_node_s_evictions_go_as_soon_as_its_own_cordon_lands_not_once_every_node_s_has() {
        let (rig, ctx, mut scaler, drainer) = rebalanced(policy()).await;
        let now = (ctx.clock)();
        rig.cluster.edit(|s| {
            s.signals[0].kind = SignalKind::SpotInterruption;
            s.signals[0].evidence = Evidence::NodeTaint;
            s.signals[0].observed_at = now;
            s.signals.push(Signal { instance: "i-n2".into(), node: "n2".into(), ..s.signals[0].clone() });
            s.nodes.get_mut(&NodeName::from("n2")).unwrap().cordoned = true;
        });
        rig.aws.interrupt("i-n1");
        rig.aws.interrupt("i-n2");
        rig.writes.stall_cordon("n1");
        scaler.tick().await.unwrap();

        let mut drainer = drainer;
        let pass = tokio::spawn(async move { drainer.tick().await.map(|r| r.started) });
        tokio::time::sleep(Duration::from_secs(1)).await;
        let evicted: Vec<String> = rig
            .writes
            .calls()
            .into_iter()
            .filter_map(|c| match c {
                ClusterCall::Evict(pod, _) => Some(pod.uid),
                _ => None,
            })
            .collect();
        assert!(!evicted.is_empty() && evicted.iter().all(|uid| uid.starts_with("uid-n2-")), "{evicted:?}");
        // n1's cordon (which also takes it out of load balancers) is still unanswered: none of
        // its pods is evicted until its call's deadline ends the wait.
        let started = pass.await.unwrap().unwrap();
        assert_eq!(started.len(), 2, "NTH cordoned both: n1 drains without the load balancers' label");
    }

    /// n1 with a spot interruption notice EC2 confirms, one of its pods held by its budget.
    async fn held_at_notice(policy: Policy) -> Rigged<TestDrainer> {
        let rigged = rebalanced(policy).await;
        let (rig, ctx) = (&rigged.0, &rigged.1);
        rig.cluster.edit(|s| {
            s.signals[0].kind = SignalKind::SpotInterruption;
            s.signals[0].evidence = Evidence::NodeTaint;
            s.signals[0].observed_at = (ctx.clock)();
        });
        rig.aws.interrupt("i-n1");
        rig.writes.block("uid-n1-p0", true);
        rigged
    }

    #[tokio::test(start_paused = true)]
    async fn a_confirmed_notice_drains_at_once_and_a_held_pod_is_deleted_gracefully_before_the_deadline() {
        let policy = Policy { force_at_deadline: true, ..policy() };
        let (rig, ctx, mut scaler, mut drainer) = held_at_notice(policy).await;
        scaler.tick().await.unwrap();
        // No replacement could be Ready before the drain must start: it starts now.
        let report = drainer.tick().await.unwrap();
        assert_eq!((report.started.len(), report.evicted, report.blocked), (1, 2, 1), "{report:?}");
        assert!(rig.events.reasons_for("n1").contains(&"DrainBlockedByPDB"));

        // 120 s notice, 30 s grace, 10 s margin: the held pod is deleted at 80 s, with its grace.
        tokio::time::advance(Duration::from_secs(78)).await;
        drainer.tick().await.unwrap();
        assert!(!rig.writes.calls().iter().any(|c| matches!(c, ClusterCall::DeletePod(..))));
        tokio::time::advance(Duration::from_secs(2)).await;
        drainer.tick().await.unwrap();
        let deleted: Vec<(String, u32)> = rig
            .writes
            .calls()
            .iter()
            .filter_map(|c| match c {
                ClusterCall::DeletePod(pod, grace) => Some((pod.uid.clone(), *grace)),
                _ => None,
            })
            .collect();
        assert_eq!(deleted, vec![("uid-n1-p0".to_string(), 30)]);
        assert!(rig.events.reasons_for("n1").contains(&"PDBOverridden"));
        assert!(ctx.metrics.encode().contains("spots_booster_pdb_overridden_total{group=\"a\"} 1"));
        let report = drainer.tick().await.unwrap();
        assert_eq!(report.terminated, vec![("i-n1".into(), true)], "empty before the deadline: {report:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn without_the_flag_the_deadline_tells_which_budget_held_which_pod() {
        let (rig, ctx, mut scaler, mut drainer) = held_at_notice(policy()).await;
        scaler.tick().await.unwrap();
        drainer.tick().await.unwrap();
        tokio::time::advance(Duration::from_secs(120)).await;
        drainer.tick().await.unwrap();
        drainer.tick().await.unwrap();
        assert!(!rig.writes.calls().iter().any(|c| matches!(c, ClusterCall::DeletePod(..))));
        let held: Vec<&str> = rig.events.reasons_for("n1").into_iter().filter(|r| *r == "PodsHeldAtDeadline").collect();
        assert_eq!(held.len(), 1, "told once");
        let note = rig.events.notes_for("n1").into_iter().find(|n| n.contains("held")).unwrap();
        assert!(note.contains("default/n1-p0 by PodDisruptionBudget default/default-budget"), "{note}");
        assert!(ctx.metrics.encode().contains("spots_booster_pods_held_at_deadline_total{group=\"a\"} 1"));
    }

    #[tokio::test(start_paused = true)]
    async fn an_operators_uncordon_mid_drain_readmits_the_node_to_load_balancers() {
        let (rig, ctx, mut scaler, mut drainer) = rebalanced(policy()).await;
        rig.writes.block("uid-n1-p0", true);
        scaler.tick().await.unwrap();
        join(&rig, &ctx, "r1");
        drainer.tick().await.unwrap();
        rig.cluster.edit(|s| s.nodes.get_mut(&NodeName::from("n1")).unwrap().cordoned = false);
        tokio::time::advance(Duration::from_secs(30)).await;
        drainer.tick().await.unwrap();
        assert!(rig.writes.calls().contains(&ClusterCall::Readmit("n1".into())), "{:?}", rig.writes.calls());
    }

    #[tokio::test(start_paused = true)]
    async fn a_trusted_interruption_in_a_group_the_tag_filter_leaves_out_is_neither_drained_nor_terminated() {
        let (rig, _ctx, mut scaler, mut drainer) = rebalanced(policy()).await;
        rig.cluster.edit(|s| {
            s.signals[0].kind = SignalKind::SpotInterruption;
            s.signals[0].evidence = Evidence::NodeTaint;
        });
        scaler.start(&["team=batch".parse().unwrap()]).await.unwrap();
        scaler.tick().await.unwrap();
        for _ in 0..10 {
            tokio::time::advance(Duration::from_secs(15)).await;
            let report = drainer.tick().await.unwrap();
            assert!(report.started.is_empty() && report.evicted == 0, "{report:?}");
        }
        assert_eq!(rig.aws.desired("a"), 3, "never raised");
        assert!(terminations(&rig.aws).is_empty(), "never terminated");
        assert!(rig.events.reasons_for("n1").is_empty(), "nothing said of a group it does not serve");
    }

    #[tokio::test(start_paused = true)]
    async fn a_drained_node_is_terminated_only_once_a_live_read_finds_it_empty() {
        let (rig, ctx, mut scaler, mut drainer) = rebalanced(policy()).await;
        scaler.tick().await.unwrap();
        join(&rig, &ctx, "r1");
        let report = drainer.tick().await.unwrap();
        assert_eq!((report.started.len(), report.evicted), (1, 3));
        // A pod bound to n1 just before its cordon, which the watch has not delivered yet.
        rig.writes.bind_unwatched("n1", Pod::test("late", 100, 1 << 20));
        rig.writes.fail_pod_reads(true);
        assert!(drainer.tick().await.unwrap().terminated.is_empty(), "no read, no termination");
        rig.writes.fail_pod_reads(false);
        assert!(drainer.tick().await.unwrap().terminated.is_empty(), "the read found a pod");
        assert_eq!(drainer.tick().await.unwrap().evicted, 1, "the pod only the read saw is evicted");
        assert_eq!(rig.writes.evicted().last().map(String::as_str), Some("uid-late"));
        let report = drainer.tick().await.unwrap();
        assert_eq!(report.terminated, vec![("i-n1".into(), true)], "read empty, then terminated at once");
        let reads =
            rig.writes.calls().iter().filter(|c| matches!(c, ClusterCall::LivePods(n) if n.as_str() == "n1")).count();
        assert_eq!(reads, 3, "one read per pass that found the view empty");
    }

    #[tokio::test(start_paused = true)]
    async fn a_give_back_drains_its_node_by_the_pods_the_view_left_out_and_never_one_with_a_protected_pod() {
        let (rig, _ctx, mut scaler, mut drainer) = two_at_risk(policy()).await;
        rig.aws.reclaim("i-n1", "i-r8");
        rig.cluster.remove_node("n1");
        // The group's replacement r8 runs a pod; n3 runs one nothing recreates, n4 one that opted
        // out. The view shows none of their pods: uncordoned, no signal.
        let mut r8 = Node::test("r8", "a").with_pods(1, 500, 1 << 30);
        r8.group = None;
        rig.cluster.put_node(r8);
        rig.cluster.edit(|s| {
            s.nodes.get_mut(&NodeName::from("n3")).unwrap().pods[0].bare = true;
            s.nodes.get_mut(&NodeName::from("n4")).unwrap().pods[0].opt_out = Some(crate::core::OptOut::DoNotDisrupt);
        });
        tokio::time::advance(Duration::from_secs(61)).await;
        assert!(rig.cluster.current().unwrap().nodes[&NodeName::from("r8")].pods.is_empty(), "as the watch shows it");
        scaler.tick().await.unwrap();
        let chosen = rig.ledger.saved().records[0].giving_back.values().next().unwrap().node.clone().unwrap();
        assert_eq!(chosen.as_str(), "r8", "n3 and n4 carry pods a give-back must not evict");
        let held = rig.cluster.edit(|s| s.nodes[&chosen].pods.clone()).unwrap();

        let report = drainer.tick().await.unwrap();
        assert!(report.started.contains(&chosen), "{report:?}");
        assert!(report.terminated.is_empty(), "never terminated with its pods on it: {report:?}");
        let evicted = rig.writes.evicted();
        assert!(held.iter().all(|p| evicted.contains(&p.uid.to_string())), "{evicted:?}");
        let report = drainer.tick().await.unwrap();
        assert!(report.terminated.contains(&("i-r8".into(), true)), "{report:?}");
        assert_eq!(rig.events.reasons_for(chosen.as_str()), vec!["DrainStarted", "InstanceTerminated"]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_server_error_on_eviction_is_retried_next_round() {
        let (rig, ctx, mut scaler, mut drainer) = rebalanced(policy()).await;
        scaler.tick().await.unwrap();
        join(&rig, &ctx, "r1");
        rig.writes.fail_evictions(true);
        let report = drainer.tick().await.unwrap();
        assert_eq!((report.started.len(), report.evicted), (1, 0));
        rig.writes.fail_evictions(false);
        assert_eq!(drainer.tick().await.unwrap().evicted, 3);
        assert_eq!(drainer.tick().await.unwrap().drained.len(), 1);
        let text = ctx.metrics.encode();
        assert!(text.contains("spots_booster_evictions_total{group=\"a\",outcome=\"failed\"} 3"), "{text}");
        assert!(text.contains("spots_booster_terminations_total{decrement=\"true\",group=\"a\"} 1"), "{text}");
    }
}
