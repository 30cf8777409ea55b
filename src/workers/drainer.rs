//! The drainer: every tick (and whenever woken) it asks the core's `plan_draining` what to do and
//! carries it out, folding what happened (starts that failed, eviction outcomes) back into the
//! core's drain state. It decides nothing itself.
//!
//! For each batch the core starts: cordon if needed, then evict the node's pods through the
//! Eviction API in the core's order (ordinary pods first, critical ones once no ordinary pod is
//! left), with the pod UID as precondition. 404/409 mean done; 429 (a PodDisruptionBudget) backs
//! off with the core's doubling delay. Once no evictable pod is left on the node, the instance is
//! terminated through Auto Scaling, with decrement when the core says it gives a boosted node back,
//! and the return is noted in the ledger. Drains past the core's deadline stop; replacement nodes
//! the core claims carry Cluster Autoscaler's scale-down protection until their drain is done.
//!
//! Only the leader acts. A replica that loses the lease drops its drains at once; the new leader
//! re-plans them (the nodes are still cordoned and at risk).

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use futures::stream::{self, StreamExt};
use thiserror::Error;
use tokio::sync::{watch, Notify};
use tracing::{info, warn};

use super::{Observation, WorkerContext};
use crate::core::{
    eviction_order, plan_draining, DrainEnding, DrainPlan, DrainState, DrainWait, DrainingPlan, EndedDrain,
    EvictionResult, EvictionRound, GroupName, InstanceId, Node, NodeName, Pod, Snapshot, Timestamp,
};
use crate::metrics::{DrainOutcome, EvictionOutcome, SkippedAction};
use crate::ports::{
    AutoScaling, AwsError, ClusterView, ClusterWrites, EventSeverity, EventSink, EvictOutcome, LedgerError,
    LedgerStore, NodeEvent, PodRef, TerminateOutcome,
};
use crate::supervise::{Heartbeat, Heartbeats, WORKER_SILENCE_LIMIT};

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
}

impl Default for DrainerSettings {
    fn default() -> Self {
        DrainerSettings {
            tick: Duration::from_secs(2),
            evictions_in_flight: 32,
            eviction_call_timeout: Duration::from_secs(10),
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

/// A drained (or timed-out) instance still to terminate: kept until AWS confirms.
#[derive(Debug, Clone)]
struct PendingTermination {
    group: GroupName,
    instance: InstanceId,
    decrement: bool,
}

/// One eviction with a deadline; `k` names the round it belongs to.
async fn evict_within<W: ClusterWrites>(
    writes: &W,
    deadline: Duration,
    k: usize,
    pod: PodRef,
) -> (usize, PodRef, Result<EvictOutcome, String>) {
    let outcome = match tokio::time::timeout(deadline, writes.evict(&pod)).await {
        Ok(outcome) => outcome.map_err(|e| e.to_string()),
        Err(_) => Err(format!("no answer within {}s", deadline.as_secs())),
    };
    (k, pod, outcome)
}

/// One termination, handed back with what it was for.
async fn terminate<A: AutoScaling>(
    aws: &A,
    node: NodeName,
    p: PendingTermination,
    decrement: bool,
) -> (NodeName, PendingTermination, Result<TerminateOutcome, AwsError>) {
    let outcome = aws.terminate_instance(&p.instance, decrement).await;
    (node, p, outcome)
}

/// The drain worker.
pub(crate) struct Drainer<A, C, L, W, E> {
    ctx: Arc<WorkerContext<A, C, L, W, E>>,
    settings: DrainerSettings,
    wake: Arc<Notify>,
    drains: DrainState,
    to_terminate: BTreeMap<NodeName, PendingTermination>,
    heartbeat: Option<Heartbeat>,
    /// Nodes whose opt-out wait was told, so it is told once.
    told_opted_out: HashSet<NodeName>,
}

impl<A, C, L, W, E> Drainer<A, C, L, W, E>
where
    A: AutoScaling,
    C: ClusterView,
    L: LedgerStore,
    W: ClusterWrites,
    E: EventSink,
{
    /// A drainer over the shared context.
    pub fn new(ctx: Arc<WorkerContext<A, C, L, W, E>>, settings: DrainerSettings) -> Self {
        Drainer {
            ctx,
            settings,
            wake: Arc::new(Notify::new()),
            drains: DrainState::default(),
            to_terminate: BTreeMap::new(),
            heartbeat: None,
            told_opted_out: HashSet::new(),
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

    /// Runs until `shutdown` turns true.
    pub async fn run(mut self, mut shutdown: watch::Receiver<bool>) -> Self {
        loop {
            if let Some(h) = &self.heartbeat {
                h.beat();
            }
            tokio::select! {
                _ = self.wake.notified() => {}
                _ = tokio::time::sleep(self.settings.tick) => {}
                _ = shutdown.changed() => {}
            }
            if *shutdown.borrow() {
                return self;
            }
            match self.tick().await {
                Ok(_) | Err(DrainerError::NotSynced) => {}
                Err(e) => {
                    if let DrainerError::Ledger(l) = &e {
                        self.ctx.metrics.ledger.error(l);
                    }
                    warn!(error = %e, "drainer tick failed; retrying at the next tick");
                }
            }
        }
    }

    /// One planning pass and the progress it allows.
    pub async fn tick(&mut self) -> Result<DrainReport, DrainerError> {
        let ctx = self.ctx.clone();
        let now = (ctx.clock)();
        let mut report = DrainReport::default();
        let Observation { snapshot, protected, .. } =
            ctx.observe().await.map_err(DrainerError::Describe)?.ok_or(DrainerError::NotSynced)?;
        let mut plan = plan_draining(&snapshot, &protected, &self.drains, &ctx.policy, now);

        if !ctx.leadership.is_leader() {
            if !self.drains.in_progress.is_empty() || !self.to_terminate.is_empty() {
                warn!(drains = self.drains.in_progress.len(), "lost the lease: dropping drains for the new leader");
            }
            self.drains = DrainState::default();
            self.to_terminate.clear();
            // The new leader reports the drains it runs; a follower reports none.
            ctx.metrics.drainer.forget_in_progress();
            report.not_leader = plan.drains.batches.len();
            for _ in &plan.drains.batches {
                ctx.metrics.lease.not_leader(SkippedAction::Drain);
            }
            return Ok(report);
        }

        self.tell_opted_out(&plan.drains).await;
        self.protect_replacements(&plan).await;
        self.end_timed_out(&plan.drains, &snapshot, now, &mut report).await;
        for node in self.start_batches(&plan.drains, &snapshot, &mut report).await {
            plan.withdraw(&node);
        }
        self.drains = plan.next;
        self.end_drains(&plan.ended, now, &mut report).await;
        self.evict(plan.evictions, now, &mut report).await;
        self.terminate_drained(&mut report).await?;
        self.export_progress();
        Ok(report)
    }

    /// Tells once per node that a pod's opt-out holds its voluntary drain back.
    async fn tell_opted_out(&mut self, plan: &DrainPlan) {
        let mut waiting = HashSet::new();
        for w in &plan.waiting {
            let DrainWait::OptedOut { node, .. } = &w.reason else { continue };
            waiting.insert(node.clone());
            if self.told_opted_out.insert(node.clone()) {
                info!(%node, group = %w.group, reason = %w.reason, "drain deferred");
                self.tell(node, "DrainDeferred", "Drain", EventSeverity::Normal, w.reason.to_string()).await;
            }
        }
        self.told_opted_out.retain(|n| waiting.contains(n));
    }

    /// Before the first eviction: says which opt-outs a confirmed interruption overrides and
    /// which pods nothing will recreate.
    async fn tell_before_evicting(&self, node: &Node) {
        let named =
            |pods: Vec<&Pod>| pods.iter().map(|p| format!("{}/{}", p.namespace, p.name)).collect::<Vec<_>>().join(", ");
        let evictable: Vec<&Pod> = node.pods.iter().filter(|p| p.class.is_evictable()).collect();
        let opted: Vec<&Pod> = evictable.iter().copied().filter(|p| p.opt_out.is_some()).collect();
        if !opted.is_empty() {
            let note = format!("the instance is being interrupted; evicting pods that opted out: {}", named(opted));
            self.tell(&node.name, "OptOutOverridden", "Drain", EventSeverity::Warning, note).await;
        }
        let bare: Vec<&Pod> = evictable.iter().copied().filter(|p| p.bare).collect();
        if !bare.is_empty() {
            let note = format!("evicting pods no controller will recreate: {}", named(bare));
            self.tell(&node.name, "BarePodsEvicted", "Drain", EventSeverity::Warning, note).await;
        }
    }

    /// Replacement nodes keep Cluster Autoscaler's scale-down protection while their boost is open.
    async fn protect_replacements(&self, plan: &DrainingPlan) {
        if !self.ctx.leadership.is_leader() {
            return;
        }
        for node in &plan.protect {
            if let Err(e) = self.ctx.writes.protect_from_scale_down(node, true).await {
                warn!(%node, error = %e, "could not protect a replacement node from scale-down");
            }
        }
        for node in &plan.unprotect {
            if let Err(e) = self.ctx.writes.protect_from_scale_down(node, false).await {
                warn!(%node, error = %e, "could not lift the scale-down protection of a node");
            }
        }
    }

    async fn end_timed_out(&mut self, plan: &DrainPlan, snapshot: &Snapshot, now: Timestamp, report: &mut DrainReport) {
        for t in &plan.timed_out {
            let started_at = self.drains.in_progress.get(&t.node).map(|d| d.started_at);
            self.observe_end(&t.group, DrainOutcome::TimedOut, started_at, now);
            let left = snapshot.nodes.get(&t.node).map_or(0, |n| eviction_order(n).len());
            let then = if t.terminate {
                "terminating it anyway (--terminate-after-drain-timeout)"
            } else {
                "it stays cordoned"
            };
            warn!(node = %t.node, left, "drain timed out; {then}");
            self.tell(&t.node, "DrainTimedOut", "Drain", EventSeverity::Warning, format!("{left} pod(s) left; {then}"))
                .await;
            if t.terminate {
                self.to_terminate.insert(
                    t.node.clone(),
                    PendingTermination { group: t.group.clone(), instance: t.instance.clone(), decrement: t.decrement },
                );
            }
            report.timed_out.push(t.node.clone());
        }
    }

    /// Starts the planned batches: cordons where needed and tells. Returns the targets it could
    /// not start (their cordon failed, or the lease went first).
    async fn start_batches(&self, plan: &DrainPlan, snapshot: &Snapshot, report: &mut DrainReport) -> Vec<NodeName> {
        let mut not_started = Vec::new();
        let mut lost_lease = false;
        for batch in &plan.batches {
            for target in &batch.nodes {
                if !lost_lease && !self.ctx.leadership.is_leader() {
                    self.ctx.metrics.lease.not_leader(SkippedAction::Drain);
                    lost_lease = true;
                }
                if lost_lease {
                    not_started.push(target.node.clone());
                    continue;
                }
                if target.cordon {
                    if let Err(e) = self.ctx.writes.cordon(&target.node).await {
                        warn!(node = %target.node, error = %e, "cordon failed; the drain waits for the next plan");
                        not_started.push(target.node.clone());
                        continue;
                    }
                }
                let pods = snapshot.nodes.get(&target.node).map_or(0, |n| eviction_order(n).len());
                info!(node = %target.node, group = %batch.group, pods, "drain started");
                if let Some(node) = snapshot.nodes.get(&target.node) {
                    self.tell_before_evicting(node).await;
                }
                self.tell(
                    &target.node,
                    "DrainStarted",
                    "Drain",
                    EventSeverity::Normal,
                    format!("replacement capacity in {} is Ready; evicting {pods} pod(s)", batch.group),
                )
                .await;
                self.ctx.metrics.drainer.drain(batch.group.as_str(), DrainOutcome::Started, None);
                report.started.push(target.node.clone());
            }
        }
        not_started
    }

    /// Carries out the drains that end: drained nodes are queued for termination; a node an
    /// operator uncordoned is remembered in the ledger as kept.
    async fn end_drains(&mut self, ended: &[EndedDrain], now: Timestamp, report: &mut DrainReport) {
        let mut kept = Vec::new();
        for e in ended {
            match e.ending {
                DrainEnding::Uncordoned => {
                    warn!(node = %e.node, "node uncordoned during its drain; drain stopped for good, instance kept");
                    kept.push(e.instance.clone());
                }
                DrainEnding::Drained { terminate, decrement } => {
                    self.observe_end(&e.group, DrainOutcome::Drained, Some(e.started_at), now);
                    if terminate {
                        report.drained.push(e.node.clone());
                        info!(node = %e.node, "drained");
                        self.to_terminate.insert(
                            e.node.clone(),
                            PendingTermination { group: e.group.clone(), instance: e.instance.clone(), decrement },
                        );
                    }
                }
            }
        }
        if !kept.is_empty() {
            // Remembered in the ledger: no later plan, nor a restart, cordons and drains it again.
            if let Err(e) = self.ctx.ledger.update(|l| kept.iter().for_each(|i| l.note_kept(i))).await {
                warn!(error = %e, "could not record an operator's uncordon; the next plan may drain again");
            }
        }
    }

    /// Evicts what the plan says is due, all nodes at once. One node's refused or slow pod never
    /// holds another node back: every eviction is one call with a deadline, and the calls of every
    /// node run concurrently (at most `evictions_in_flight` at a time).
    async fn evict(&mut self, rounds: Vec<EvictionRound>, now: Timestamp, report: &mut DrainReport) {
        if rounds.is_empty() || !self.ctx.leadership.is_leader() {
            return;
        }
        let writes = &self.ctx.writes;
        let deadline = self.settings.eviction_call_timeout;
        let calls: Vec<_> = rounds
            .iter()
            .enumerate()
            .flat_map(|(k, round)| {
                round.pods.iter().map(move |p| {
                    let pod = PodRef { namespace: p.namespace.clone(), name: p.name.clone(), uid: p.uid.clone() };
                    evict_within(writes, deadline, k, pod)
                })
            })
            .collect();
        let outcomes: Vec<(usize, PodRef, Result<EvictOutcome, String>)> =
            stream::iter(calls).buffer_unordered(self.settings.evictions_in_flight.max(1)).collect().await;
        let mut results: Vec<Vec<(PodRef, Result<EvictOutcome, String>)>> = rounds.iter().map(|_| Vec::new()).collect();
        for (k, pod, outcome) in outcomes {
            results[k].push((pod, outcome));
        }
        let mut tells = Vec::new();
        for (round, results) in rounds.iter().zip(results) {
            if let Some(event) = self.settle_round(round, &results, now, report) {
                tells.push(event);
            }
        }
        join_all(tells.into_iter().map(|e| self.ctx.events.publish(e))).await;
    }

    /// Books one node's eviction outcomes: metrics, and the core's progress and backoff. Returns
    /// the `DrainBlockedByPDB` Event when this is the drain's first refusal.
    fn settle_round(
        &mut self,
        round: &EvictionRound,
        results: &[(PodRef, Result<EvictOutcome, String>)],
        now: Timestamp,
        report: &mut DrainReport,
    ) -> Option<NodeEvent> {
        let mut blocked = Vec::new();
        let mut folded = Vec::new();
        for (pod, outcome) in results {
            let (label, result) = match outcome {
                Ok(EvictOutcome::Evicted) => (EvictionOutcome::Evicted, EvictionResult::Evicted),
                Ok(EvictOutcome::Gone) => (EvictionOutcome::Gone, EvictionResult::Gone),
                Ok(EvictOutcome::Blocked) => (EvictionOutcome::BlockedByPdb, EvictionResult::Blocked),
                Err(e) => {
                    warn!(pod = %pod, error = %e, "eviction failed; retried next round");
                    (EvictionOutcome::Failed, EvictionResult::Failed)
                }
            };
            self.ctx.metrics.drainer.eviction(round.group.as_str(), label);
            match result {
                EvictionResult::Evicted | EvictionResult::Gone => report.evicted = report.evicted.saturating_add(1),
                EvictionResult::Blocked => blocked.push(pod.to_string()),
                EvictionResult::Failed => {}
            }
            folded.push((pod.uid.as_str(), result));
        }
        let refusal = self.drains.record_round(&round.node, folded, &self.ctx.policy, now)?;
        report.blocked = report.blocked.saturating_add(u32::try_from(blocked.len()).unwrap_or(u32::MAX));
        if !refusal.first {
            return None;
        }
        info!(node = %round.node, blocked = blocked.len(), "evictions blocked by PDB");
        let note = format!(
            "a PodDisruptionBudget allows no disruption of {} now; retrying in {}s{}",
            blocked.join(", "),
            refusal.wait.as_secs(),
            if refusal.moved { "" } else { ", doubling" }
        );
        Some(NodeEvent {
            node: round.node.clone(),
            reason: "DrainBlockedByPDB",
            action: "Evict",
            severity: EventSeverity::Warning,
            note,
        })
    }

    /// Terminates drained instances, all at once; a failed termination is retried next tick.
    /// Each is noted as settled in the ledger before the call (its departure is ours, not a
    /// reclaim to give back), and decrements only while its boost still has a node to return.
    async fn terminate_drained(&mut self, report: &mut DrainReport) -> Result<(), DrainerError> {
        if self.to_terminate.is_empty() {
            return Ok(());
        }
        if !self.ctx.leadership.is_leader() {
            self.ctx.metrics.lease.not_leader(SkippedAction::Terminate);
            return Ok(());
        }
        let pending: Vec<(NodeName, PendingTermination)> =
            self.to_terminate.iter().map(|(n, p)| (n.clone(), p.clone())).collect();
        self.ctx.ledger.update(|l| pending.iter().for_each(|(_, p)| l.note_settled(&p.instance))).await?;
        let ledger = self.ctx.ledger.current().await;
        let aws = &self.ctx.aws;
        let calls: Vec<_> = pending
            .into_iter()
            .map(|(node, p)| {
                let decrement = p.decrement && ledger.may_return(&p.instance);
                terminate(aws, node, p, decrement)
            })
            .collect();
        let outcomes: Vec<_> =
            stream::iter(calls).buffer_unordered(self.settings.evictions_in_flight.max(1)).collect().await;
        let mut returned = Vec::new();
        let mut taken_first = Vec::new();
        let mut done = Vec::new();
        for (node, p, outcome) in outcomes {
            let decremented = match outcome {
                Ok(TerminateOutcome::Terminated { decremented }) => decremented,
                Ok(TerminateOutcome::AlreadyGone) => {
                    // AWS took it first: not our departure, so the scaler may give its node back.
                    taken_first.push(p.instance.clone());
                    self.to_terminate.remove(&node);
                    continue;
                }
                Ok(TerminateOutcome::DryRun) => {
                    info!(%node, instance = %p.instance, "dry run: instance not terminated");
                    self.to_terminate.remove(&node);
                    continue;
                }
                Err(e) => {
                    warn!(%node, instance = %p.instance, error = %e, "terminating a drained instance failed; retrying");
                    continue;
                }
            };
            self.to_terminate.remove(&node);
            if decremented {
                returned.push(p.instance.clone());
            }
            done.push((node, p, decremented));
        }
        self.ctx
            .ledger
            .update(|l| {
                returned.iter().for_each(|i| l.note_returned(i));
                taken_first.iter().for_each(|i| l.note_unsettled(i));
            })
            .await?;
        for (node, p, decremented) in done {
            let how = if decremented {
                "with decrement: a boosted node is given back"
            } else {
                "without decrement: the Auto Scaling Group replaces it"
            };
            info!(%node, instance = %p.instance, decremented, "instance terminated");
            self.ctx.metrics.drainer.terminated(p.group.as_str(), decremented);
            self.tell(&node, "InstanceTerminated", "Terminate", EventSeverity::Normal, format!("{} {how}", p.instance))
                .await;
            report.terminated.push((p.instance, decremented));
        }
        Ok(())
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

    async fn tell(
        &self,
        node: &NodeName,
        reason: &'static str,
        action: &'static str,
        severity: EventSeverity,
        note: String,
    ) {
        self.ctx.events.publish(NodeEvent { node: node.clone(), reason, action, severity, note }).await;
    }
}

#[cfg(test)]
mod tests {
    use tokio::time::Instant;

    use super::*;
    use crate::core::DrainEnd;
    use crate::core::{Evidence, Policy, Signal, SignalKind, SizingMode};
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
        assert!(!rig.writes.calls().iter().any(|c| matches!(c, ClusterCall::Cordon(_))), "NTH already cordoned");

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
        });
        let report = drainer.tick().await.unwrap();
        assert_eq!(report.started, vec![NodeName::from("n1")], "the interruption takes the instance anyway");
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
        assert_eq!(drainer.state().finished.get(&InstanceId::from("i-n1")), Some(&DrainEnd::TimedOut));
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
        assert_eq!(drainer.state().finished.get(&InstanceId::from("i-n1")), Some(&DrainEnd::TimedOut));
        assert!(rig.events.reasons_for("n1").contains(&"DrainTimedOut"));
        assert_eq!(terminations(&rig.aws).len(), 1);
        let told = rig.events.reasons_for("n1").iter().filter(|r| **r == "DrainBlockedByPDB").count();
        assert_eq!(told, 1, "told once per drain");
    }

    #[tokio::test(start_paused = true)]
    async fn an_eviction_call_that_never_answers_does_not_hold_the_other_node() {
        let (rig, ctx, _scaler, mut drainer) = two_at_risk(policy()).await;
        rig.writes.stall("uid-n1-p1");
        let started = Instant::now();
        let report = drainer.tick().await.unwrap();
        assert!(started.elapsed() <= DrainerSettings::default().eviction_call_timeout, "{:?}", started.elapsed());
        assert_eq!(report.evicted, 5, "every other pod went in the same round");
        assert_eq!(drainer.tick().await.unwrap().drained, vec![NodeName::from("n2")]);
        let text = ctx.metrics.encode();
        // Tried again in the second round, and again given up at its deadline.
        assert!(text.contains("spots_booster_evictions_total{group=\"a\",outcome=\"failed\"} 2"), "{text}");
    }

    #[tokio::test(start_paused = true)]
    async fn an_instance_aws_took_between_drain_and_termination_is_left_to_the_give_back() {
        let (rig, _ctx, mut scaler, mut drainer) = two_at_risk(policy()).await;
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
        assert_eq!(rig.aws.desired("a"), 4, "both boosted nodes given back");
        assert!(rig.ledger.saved().records.is_empty());
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
