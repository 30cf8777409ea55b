//! The scaler: wakes on a signal (or the resync tick), lets a burst of signals settle, asks the
//! core's `plan_scaling` for give-backs, expiries, the ledger to keep and boosts, persists the
//! boosts in the ledger, then raises desired capacity with one guarded write per group.
//!
//! The ledger is saved **before** the AWS write, each new record with the desired capacity it
//! asks for, and that mark is cleared once AWS answers. Writes that lose a race (desired changed
//! since the plan) or fail before anything changed are taken back out of the ledger and
//! re-planned. A record whose write's outcome stayed unknown (a crash between the two, a lost
//! answer whose re-read failed, a ledger save applied though answered with an error) is resolved
//! from a fresh read of its group before anything else is written (`core::raises`): never boosted
//! twice, never given back for capacity that was not added.
//! A follower plans too (its metrics stay meaningful) but saves and writes nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{watch, Notify};
use tracing::{debug, debug_span, info, warn, Instrument};

use super::boost_writes::{write_and_answer, BoostWrite, Flight, Landed, LANDING_ON_SHUTDOWN};
pub use super::scaler_error::ScalerError;
use super::stages::Stages;
use super::told_once::ToldOnce;
use super::{publish_all, Observation, WorkerContext};
pub use super::{system_clock, Clock};
use crate::core::{
    apply_all, plan_scaling, plan_take_backs, resolve_raises, unresolved_groups, Acting, AtRiskSet, Boost, BoostExpiry,
    BoostLedger, DropReason, Expired, Fallback, GiveBack, GiveBackHow, GroupName, InstanceId, LedgerEdit, LeftWhy,
    RefusedFallback, ScalingPlan, Snapshot, TakeBack, Timestamp,
};
use crate::metrics::{BoostOutcome, GiveBackOutcome, SkippedAction};
use crate::ports::{
    AutoScaling, ClusterView, ClusterWrites, DesiredWrite, EventSink, LedgerStore, NodeEvent, NodeEventReason,
    TagFilter, WriteOutcome,
};
use crate::supervise::{Heartbeat, Heartbeats, WORKER_SILENCE_LIMIT};

/// How the scaler paces itself.
#[derive(Debug, Clone)]
pub struct ScalerSettings {
    /// A wake-up waits this long for quiet before planning, so a burst is planned together.
    pub coalesce_quiet: Duration,
    /// A group's burst has ended once no node of it became at risk for this long: its write
    /// waits for that, so a burst costs one write per group. Longer than `coalesce_quiet`: NTH
    /// handles a group's nodes one after another (cordon, taint, Event), tens of milliseconds
    /// apart on a busy API server.
    pub(crate) group_quiet: Duration,
    /// …but a group's write never waits longer than this after its first signal.
    pub(crate) coalesce_max: Duration,
    /// …and a plan never waits longer than this after a wake-up: groups whose burst has ended
    /// are written then, while the others' signals still arrive.
    pub(crate) settle_max: Duration,
    /// Plan at least this often even without signals.
    pub(crate) resync: Duration,
}

impl Default for ScalerSettings {
    fn default() -> Self {
        ScalerSettings {
            coalesce_quiet: Duration::from_millis(20),
            group_quiet: Duration::from_millis(50),
            coalesce_max: Duration::from_millis(250),
            settle_max: Duration::from_millis(60),
            resync: Duration::from_secs(30),
        }
    }
}

/// What one tick did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct TickReport {
    /// Groups whose desired capacity was raised (or would have been, in dry run): `(group, from, to)`.
    pub(crate) raised: Vec<(GroupName, u32, u32)>,
    /// Groups whose write lost a race; re-planned at once.
    pub(crate) raced: Vec<GroupName>,
    /// Boosts left to the next pass: their group's signals were still arriving.
    pub(crate) settling: usize,
    /// Groups whose write failed, with the error category.
    pub failed: Vec<(GroupName, &'static str)>,
    /// At-risk instances held (at max, backoff, …).
    pub held: usize,
    /// Boosts a follower left to the leader.
    pub(crate) not_leader: usize,
    /// Nodes moved from a group without capacity to its fallback: `(from, to, nodes)`.
    pub fell_back: Vec<(GroupName, GroupName, u32)>,
}

/// Which of a pass's boosts are written in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pacing {
    /// Every one (a pass called directly).
    Now,
    /// Those whose group's burst has ended (the worker's loop, which passes again soon).
    PerGroup,
}

/// The scaler worker.
pub struct Scaler<A, C, L, W, E> {
    ctx: Arc<WorkerContext<A, C, L, W, E>>,
    settings: ScalerSettings,
    wake: Arc<Notify>,
    /// Signals already counted in the metrics, by instance.
    counted: BTreeSet<(InstanceId, &'static str)>,
    /// Instances whose Events are not believed, with why, already counted.
    untrusted: BTreeSet<(InstanceId, &'static str)>,
    /// The last hold reason published per instance, so a held boost is told once, not per plan.
    told_held: ToldOnce<InstanceId, String>,
    /// The refused fallbacks told (failing group, fallback), so each is told once while it lasts.
    told_refused: ToldOnce<(GroupName, GroupName)>,
    was_leader: bool,
    /// Boost writes sent from the loop and not answered yet.
    flights: Vec<Flight>,
    /// The widest gap between two nodes of one group that the last wave to show one had: how
    /// far apart NTH's calls land on this API server, until the wave arriving shows its own.
    last_wave_gap: Duration,
    heartbeat: Option<Heartbeat>,
}

impl<A, C, L, W, E> Scaler<A, C, L, W, E>
where
    A: AutoScaling + 'static,
    C: ClusterView + 'static,
    L: LedgerStore + 'static,
    W: ClusterWrites + 'static,
    E: EventSink + 'static,
{
    /// A scaler over the shared context.
    pub fn new(ctx: Arc<WorkerContext<A, C, L, W, E>>, settings: ScalerSettings) -> Self {
        Scaler {
            ctx,
            settings,
            wake: Arc::new(Notify::new()),
            counted: BTreeSet::new(),
            untrusted: BTreeSet::new(),
            told_held: ToldOnce::default(),
            told_refused: ToldOnce::default(),
            was_leader: false,
            flights: Vec::new(),
            last_wave_gap: Duration::ZERO,
            heartbeat: None,
        }
    }

    /// Registers with `beats` as `worker:scaler` and beats at every pass, for `/livez`. It counts as
    /// wedged once a pass is later than its longest wait plus [`WORKER_SILENCE_LIMIT`].
    pub(crate) fn beating(mut self, beats: &Heartbeats) -> Self {
        self.heartbeat = Some(
            beats.register("worker:scaler", self.settings.resync + self.settings.coalesce_max + WORKER_SILENCE_LIMIT),
        );
        self
    }

    /// Makes `wake` the scaler's waker (the watches are built before the scaler).
    pub(crate) fn woken_by(mut self, wake: Arc<Notify>) -> Self {
        self.wake = wake;
        self
    }

    /// Notifying this wakes the scaler (the signal watch calls it for every new signal).
    pub fn waker(&self) -> Arc<Notify> {
        self.wake.clone()
    }

    /// Describes the groups that match `filters`, so their sizes are known before any signal.
    pub async fn start(&mut self, filters: &[TagFilter]) -> Result<(), ScalerError> {
        self.ctx.groups.discover(&self.ctx.aws, filters).await.map_err(ScalerError::Describe)?;
        Ok(())
    }

    /// Runs until `shutdown` turns true. The first pass runs at once: it learns every node's
    /// group and every group's size before a signal needs them, and acts on signals that came
    /// while no replica ran.
    pub async fn run(self, shutdown: watch::Receiver<bool>) -> Self {
        let mut scaler = super::run_worker(self, shutdown).await;
        if tokio::time::timeout(LANDING_ON_SHUTDOWN, scaler.land_all()).await.is_err() {
            warn!("boost writes still unanswered at shutdown; the next leader resolves them by a read");
        }
        scaler
    }

    /// Waits for every write in flight to be answered.
    async fn land_all(&mut self) {
        for flight in std::mem::take(&mut self.flights) {
            flight.land().await;
        }
    }

    /// Whether `plan` asks for more than boosts and closes of records outside `flying`.
    fn beyond_boosts(plan: &ScalingPlan, ledger: &BoostLedger, flying: &BTreeSet<GroupName>) -> bool {
        let in_flight =
            |id: &crate::core::BoostId| ledger.records.iter().any(|r| r.id() == *id && flying.contains(&r.group));
        !plan.give_backs.is_empty()
            || !plan.expired.is_empty()
            || !plan.fallbacks.is_empty()
            || plan.closes.iter().any(|c| matches!(c, LedgerEdit::Close { id, .. } if in_flight(id)))
    }

    /// Waits for a burst of wake-ups to pause: until no wake-up came for `coalesce_quiet`, or
    /// `settle_max` passed.
    async fn settle(&self) {
        super::settle(&self.wake, self.settings.coalesce_quiet, self.settings.settle_max).await;
    }

    /// One planning pass and all its writes.
    pub async fn tick(&mut self) -> Result<TickReport, ScalerError> {
        self.pass(Pacing::Now).await
    }

    /// One planning pass and the writes `pacing` lets through now.
    async fn pass(&mut self, pacing: Pacing) -> Result<TickReport, ScalerError> {
        let mut stages = Stages::start();
        let ctx = self.ctx.clone();
        let leading = ctx.leadership.is_leader();
        if !leading || !self.was_leader {
            // A follower's copy is stale, and a new leader must see what the last one saved.
            ctx.ledger.reload().await?;
        }
        self.was_leader = leading;
        if pacing == Pacing::Now {
            self.land_all().await;
        }
        let (landed, flying): (Vec<Flight>, Vec<Flight>) =
            std::mem::take(&mut self.flights).into_iter().partition(Flight::landed);
        self.flights = flying;
        for flight in landed {
            flight.land().await;
        }
        // Whatever this pass leaves for the flights still in the air (boosts of their groups,
        // give-backs, expiries, fallbacks, take-backs, lost answers) is planned once they land;
        // one that landed since the line above is not in flight.
        let flying: BTreeSet<GroupName> =
            self.flights.iter().filter(|f| f.want()).flat_map(|f| f.groups().iter().cloned()).collect();
        if leading && flying.is_empty() {
            self.resolve_unknown_raises().await?;
        } else if leading && !unresolved_groups(&ctx.ledger.current().await).is_subset(&flying) {
            // Unanswered writes other than those in flight are resolved by a read first, once
            // the flights land (each wakes the loop).
            return Ok(TickReport::default());
        }
        let now = (ctx.clock)();
        let Observation { snapshot, first_seen, .. } =
            ctx.observe(false).await.map_err(ScalerError::Describe)?.ok_or(ScalerError::NotSynced)?;
        stages.mark("observe");
        if leading {
            self.export_sizes(&snapshot.groups, &snapshot.ledger, now);
            self.count_signals(&snapshot);
            ctx.metrics.signals.opted_out_nodes(snapshot.nodes.values().filter(|n| n.opted_out).count());
        } else {
            // Only the leader reports what it acts on: with two replicas, sums and rates of the
            // followers' copies would double every group's numbers.
            ctx.metrics.scaler.forget_group_sizes();
            ctx.metrics.signals.opted_out_nodes(0);
        }

        let acting = if leading { Acting::Leader } else { Acting::Follower };
        let plan = plan_scaling(&snapshot, &ctx.policy, now, acting);
        stages.mark("plan");
        self.count_untrusted(&plan.at_risk);
        if !leading {
            return Ok(self.follow(&plan));
        }
        if !flying.is_empty() && Self::beyond_boosts(&plan, &snapshot.ledger, &flying) {
            // Give-backs, expiries and fallbacks change the ledger the boosts were planned on,
            // and may touch the groups in flight: all wait for the landing, which wakes the loop.
            return Ok(TickReport::default());
        }
        let mut report_fallbacks = Vec::new();
        if !plan.give_backs.is_empty() {
            self.give_back(&plan.give_backs).await?;
        }
        if !plan.expired.is_empty() {
            self.expire(&snapshot, &plan.expired).await?;
        }
        if !plan.fallbacks.is_empty() {
            self.fall_back(&snapshot, &plan.fallbacks, &mut report_fallbacks).await?;
        }
        if flying.is_empty() {
            self.take_back_unlaunched(&snapshot).await?;
        }
        let ScalingPlan { closes, boosts: plan, at_risk, refused_fallbacks, .. } = plan;
        let mut report = TickReport {
            held: plan.held.iter().map(|h| h.instances.len()).sum(),
            fell_back: report_fallbacks,
            ..TickReport::default()
        };
        self.tell_held(&snapshot, &plan.held).await;
        self.tell_refused_fallbacks(&snapshot, &refused_fallbacks).await;

        let mut plan = plan;
        let before = plan.boosts.len();
        if pacing == Pacing::PerGroup && !plan.boosts.is_empty() {
            let quiet = self.group_quiet_in_wave(&at_risk, &first_seen, now);
            // A wave whose groups came slowly is not over at the cluster's first lull: a loaded
            // API server hands the watches their events in clumps, tens of milliseconds apart.
            if self.wave_arriving(&first_seen, now) || quiet > self.settings.group_quiet {
                plan.boosts.retain(|b| !self.settling(b, &first_seen, now, quiet));
            }
        }
        report.settling = before - plan.boosts.len();
        // A group's next write waits for its last one's answer: planned from the size before it,
        // it would undo it. Its landing wakes the loop.
        plan.boosts.retain(|b| !flying.contains(&b.group));

        let opens: Vec<LedgerEdit> = plan.boosts.iter().map(|b| LedgerEdit::Open(b.record.clone())).collect();
        let mut opened = Vec::new();
        ctx.ledger
            .update(|held| {
                // Edits of the ledger held now: the drainer may have noted returns, settlements or
                // an operator's uncordon since the plan, and a record covering one of a boost's
                // instances refuses its opening.
                apply_all(held, &closes);
                opened = apply_all(held, &opens);
            })
            .await?;
        let mut boosts = Vec::with_capacity(plan.boosts.len());
        for ((boost, open), opened) in plan.boosts.iter().zip(&opens).zip(opened) {
            if opened {
                boosts.push((boost, open));
            } else {
                warn!(group = %boost.group, instances = boost.record.instances.len(), "a boost's instances are already covered by the ledger held now; not written");
                ctx.metrics.scaler.boost(boost.group.as_str(), BoostOutcome::Covered);
            }
        }
        stages.mark("ledger-save");
        for (boost, _) in boosts.iter().filter(|(b, _)| !b.writes()) {
            ctx.metrics.scaler.boost(boost.group.as_str(), BoostOutcome::NoNodeNeeded);
        }
        let writes: Vec<BoostWrite> = boosts
            .into_iter()
            .filter(|(b, _)| b.writes())
            .map(|(boost, open)| {
                let instances: Vec<&InstanceId> = boost.record.instances.iter().collect();
                BoostWrite {
                    nodes: Self::nodes_of(&snapshot, &instances).into_iter().map(|n| n.name.clone()).collect(),
                    seen: instances.iter().filter_map(|i| first_seen.get(*i)).copied().collect(),
                    boost: boost.clone(),
                    open: open.clone(),
                }
            })
            .collect();
        if writes.is_empty() {
            return Ok(report);
        }
        // A group that failed for want of capacity will not launch these either: once raised it
        // is planned again at once, so they move to its fallback without waiting for the next
        // failed activity.
        let failing: BTreeSet<GroupName> = writes
            .iter()
            .map(|w| &w.boost.group)
            .filter(|g| {
                crate::core::fallback::failing(&snapshot, g, &ctx.policy, now)
                    && snapshot.groups.get(*g).is_some_and(|g| !g.fallbacks.is_empty())
            })
            .cloned()
            .collect();
        if pacing == Pacing::Now {
            let landed = write_and_answer(&ctx, writes, stages).await?;
            if landed.raised.iter().any(|(g, ..)| failing.contains(g)) {
                self.wake.notify_one();
            }
            let Landed { raised, raced, failed } = landed;
            report.raised = raised;
            report.raced = raced;
            report.failed.extend(failed);
        } else {
            self.flights.push(Flight::send(ctx.clone(), writes, failing, stages, self.wake.clone()));
        }
        Ok(report)
    }

    /// Whether nodes are still becoming at risk somewhere: one did less than `coalesce_quiet`
    /// ago (the pass came at `settle_max`, not after a pause). A lone signal, or the end of a
    /// wave, finds the cluster quiet and is written at once; during a wave each group waits for
    /// its own quiet.
    fn wave_arriving(&self, first_seen: &BTreeMap<InstanceId, Timestamp>, now: Timestamp) -> bool {
        first_seen
            .values()
            .filter(|t| **t <= now)
            .max()
            .is_some_and(|newest| now.since(*newest) < self.settings.coalesce_quiet)
    }

    /// How long a group must go without a new at-risk node before its burst counts as ended, in
    /// the wave arriving now: `group_quiet`, or half again the widest gap this wave has shown
    /// between two nodes of one group if that is longer, never past `coalesce_max`. NTH handles a
    /// group's nodes one API call after another, so a busy API server spaces them further apart
    /// (86–185 ms on a loaded two-core control plane, against the 50 ms that suits a quiet one),
    /// and a fixed quiet wrote such groups once per node. Until a wave of several groups shows a
    /// second node of one, the last wave's widest gap stands in for its own: at a wave's head no
    /// group has had the time to show one, and the floor wrote the first groups once per node. A
    /// lone group's signals are never held for an earlier wave's pace.
    fn group_quiet_in_wave(
        &mut self,
        at_risk: &AtRiskSet,
        first_seen: &BTreeMap<InstanceId, Timestamp>,
        now: Timestamp,
    ) -> Duration {
        let ScalerSettings { group_quiet, coalesce_max, .. } = self.settings;
        let this_wave = |t: &Timestamp| *t <= now && now.since(*t) < coalesce_max * 2;
        let mut groups_in_wave = 0usize;
        let widest = at_risk
            .by_group
            .values()
            .filter_map(|instances| {
                let mut seen: Vec<Timestamp> =
                    instances.keys().filter_map(|i| first_seen.get(i)).copied().filter(this_wave).collect();
                groups_in_wave += usize::from(!seen.is_empty());
                seen.sort_unstable();
                // A gap past `coalesce_max` parts two bursts of the group, not two nodes of one.
                seen.windows(2).map(|w| w[1].since(w[0])).filter(|gap| *gap < coalesce_max).max()
            })
            .max()
            .unwrap_or_default();
        let gap = if !widest.is_zero() {
            self.last_wave_gap = widest;
            widest
        } else if groups_in_wave > 1 {
            self.last_wave_gap
        } else {
            Duration::ZERO
        };
        (gap * 3 / 2).min(coalesce_max).max(group_quiet)
    }

    /// Whether `boost`'s group is still in the middle of its burst: a node of it became at risk
    /// less than `group_quiet` ago (see [`Self::group_quiet_in_wave`]), and its first less than
    /// `coalesce_max` ago. Its write waits for the next pass, so the burst costs one write; the
    /// other groups' writes do not wait for it. A time ahead of `now` (another clock) never holds
    /// a write back.
    fn settling(
        &self,
        boost: &Boost,
        first_seen: &BTreeMap<InstanceId, Timestamp>,
        now: Timestamp,
        group_quiet: Duration,
    ) -> bool {
        let seen = || boost.record.instances.iter().filter_map(|i| first_seen.get(i)).copied();
        match (seen().max(), seen().min()) {
            (Some(newest), Some(oldest)) => {
                newest <= now && now.since(newest) < group_quiet && now.since(oldest) < self.settings.coalesce_max
            }
            _ => false,
        }
    }

    /// Resolves the boosts whose write's outcome is unknown (see `core::raises`) from a fresh
    /// read of their groups. Until that read succeeds the tick writes nothing.
    async fn resolve_unknown_raises(&self) -> Result<(), ScalerError> {
        let ctx = &self.ctx;
        let groups: Vec<GroupName> = unresolved_groups(&ctx.ledger.current().await).into_iter().collect();
        if groups.is_empty() {
            return Ok(());
        }
        for group in &groups {
            ctx.groups.invalidate(group).await;
        }
        let described = ctx.aws.describe_groups(&groups).await.map_err(ScalerError::ResolveRaises)?;
        let mut live = BTreeMap::new();
        for g in described {
            ctx.groups.note_desired(&g.name, g.desired).await;
            live.insert(g.name, g.desired);
        }
        let mut resolved = Vec::new();
        ctx.ledger
            .update(|l| {
                let edits;
                (edits, resolved) = resolve_raises(l, &live);
                apply_all(l, &edits);
            })
            .await?;
        for r in resolved {
            let (group, asked, kept) = (&r.group, r.asked, r.kept);
            match r.live {
                Some(live) if kept > 0 => {
                    warn!(%group, asked, live, kept, "a boost whose write's answer was lost is there: kept")
                }
                Some(live) => {
                    warn!(%group, asked, live, "a boost whose write's answer was lost never applied: planned again")
                }
                None => warn!(%group, asked, "a boost whose write's answer was lost was for a group that is gone"),
            }
        }
        Ok(())
    }

    /// Moves the nodes boosts miss in groups without capacity to their fallbacks: the move is
    /// saved on the boost's record (the fallback's write marked unconfirmed) before the guarded
    /// raise of the fallback, confirmed or undone after it; then the failing group's desired
    /// capacity is lowered by what moved, if no instance can be terminated by that.
    async fn fall_back(
        &self,
        snapshot: &Snapshot,
        moves: &[Fallback],
        report: &mut Vec<(GroupName, GroupName, u32)>,
    ) -> Result<(), ScalerError> {
        let ctx = &self.ctx;
        let now = (ctx.clock)();
        let moves: Vec<(&Fallback, LedgerEdit)> = moves.iter().map(|f| (f, f.moving(now))).collect();
        let mut made = Vec::new();
        ctx.ledger.update(|l| made = moves.iter().map(|(_, m)| m.apply(l)).collect()).await?;
        let applied: Vec<&(&Fallback, LedgerEdit)> =
            moves.iter().zip(made).filter(|(_, made)| *made).map(|(m, _)| m).collect();
        if applied.is_empty() {
            return Ok(());
        }
        let undo = |l: &mut BoostLedger, (_, m): &(&Fallback, LedgerEdit)| {
            m.undo().map(|u| u.apply(l));
        };
        let writes: Vec<DesiredWrite> = applied
            .iter()
            .map(|(f, _)| DesiredWrite {
                group: f.to.clone(),
                expected: f.to_desired,
                to: f.to_desired.saturating_add(f.nodes),
            })
            .collect();
        let outcomes = match ctx.aws.raise_desired(&writes).await {
            Ok(outcomes) => outcomes,
            Err(e) => {
                ctx.ledger.update(|l| applied.iter().for_each(|m| undo(l, m))).await?;
                return Err(ScalerError::Raise(e));
            }
        };
        let (mut confirmed, mut undone, mut told) = (Vec::new(), Vec::new(), Vec::new());
        for (m, (group, outcome)) in applied.iter().zip(outcomes) {
            let f = m.0;
            match outcome {
                Ok(WriteOutcome::Written { from, to } | WriteOutcome::DryRun { from, to }) => {
                    warn!(from_group = %f.record.group, %group, nodes = f.nodes, from, to, "no capacity in the boosted group: its missing nodes moved to its fallback");
                    ctx.groups.note_desired(&group, to).await;
                    ctx.metrics.scaler.boost(group.as_str(), BoostOutcome::FellBack);
                    let note = format!(
                        "{} node(s) {} could not launch (no capacity) asked of {group} instead: {from} -> {to}",
                        f.nodes, f.record.group
                    );
                    let instances: Vec<&InstanceId> = f.record.instances.iter().collect();
                    told.extend(Self::node_events(snapshot, &instances, NodeEventReason::BoostFellBack, &note));
                    report.push((f.record.group.clone(), group.clone(), f.nodes));
                    confirmed.push(*m);
                }
                // Unknown: the next tick reads the fallback first (`core::raises`).
                Err(e) if e.may_have_applied() => {
                    warn!(%group, error = %e, "a fallback's write has an unknown outcome")
                }
                other => {
                    warn!(%group, outcome = ?other, "a fallback's write was not made; planned again");
                    undone.push(*m);
                }
            }
        }
        let answered = ctx.ledger.update(|l| {
            undone.iter().for_each(|m| undo(l, m));
            confirmed.iter().for_each(|(_, m)| {
                m.confirm().map(|c| c.apply(l));
            });
        });
        let (_, saved) = tokio::join!(publish_all(&ctx.events, told), answered);
        saved?;
        Ok(())
    }

    /// Lowers boosts' own groups by the nodes that moved to a fallback and will never launch
    /// there: the intent is saved before the guarded write (sent only while the group lists no
    /// more instances than the lowered value) and the outcome after, so a group is never
    /// lowered twice for the same nodes.
    async fn take_back_unlaunched(&self, snapshot: &Snapshot) -> Result<(), ScalerError> {
        let ctx = &self.ctx;
        let plan = plan_take_backs(snapshot, &ctx.ledger.current().await);
        if plan.is_empty() {
            return Ok(());
        }
        let writes: Vec<DesiredWrite> =
            plan.iter().map(|t| DesiredWrite { group: t.record.group.clone(), expected: t.from, to: t.to() }).collect();
        let intents: Vec<LedgerEdit> = plan.iter().map(TakeBack::lowering).collect();
        ctx.ledger.update(|l| _ = apply_all(l, &intents)).await?;
        let outcomes = match ctx.aws.lower_unlaunched(&writes).await {
            Ok(outcomes) => outcomes,
            Err(e) => {
                // The re-read failed: nothing was written.
                let undone: Vec<LedgerEdit> = intents.iter().filter_map(LedgerEdit::undo).collect();
                ctx.ledger.update(|l| _ = apply_all(l, &undone)).await?;
                return Err(ScalerError::Raise(e));
            }
        };
        let mut settled: Vec<LedgerEdit> = Vec::new();
        for (t, (group, outcome)) in plan.iter().zip(outcomes) {
            match outcome {
                Ok(WriteOutcome::Written { to, .. } | WriteOutcome::DryRun { to, .. }) => {
                    info!(%group, nodes = t.nodes, to, "desired capacity lowered by the nodes it could not launch");
                    ctx.groups.note_desired(&group, to).await;
                    settled.push(t.lowered(true));
                }
                // Unknown: the next tick reads the group first (`core::raises`).
                Err(e) if e.may_have_applied() => warn!(%group, error = %e, "lowering a group has an unknown outcome"),
                other => {
                    debug!(%group, outcome = ?other, "desired capacity left as it is: an instance could be terminated by lowering it, or it changed");
                    if let Ok(WriteOutcome::Raced { live }) = other {
                        ctx.groups.note_desired(&group, live).await;
                    }
                    settled.push(t.lowered(false));
                }
            }
        }
        ctx.ledger.update(|l| _ = apply_all(l, &settled)).await?;
        Ok(())
    }

    /// A follower's pass ends at the plan: it reports what the leader would write and leaves it
    /// to the leader (its ports would drop the writes anyway).
    fn follow(&self, plan: &ScalingPlan) -> TickReport {
        let m = &self.ctx.metrics;
        for g in plan.give_backs.iter().filter(|g| matches!(g.how, GiveBackHow::Drain(_))) {
            m.scaler.give_back(g.group.as_str(), GiveBackOutcome::NotLeader);
        }
        for boost in &plan.boosts.boosts {
            m.scaler.boost(boost.group.as_str(), BoostOutcome::NotLeader);
            m.lease.not_leader(SkippedAction::SetDesiredCapacity);
        }
        TickReport {
            held: plan.boosts.held.iter().map(|h| h.instances.len()).sum(),
            not_leader: plan.boosts.boosts.len(),
            ..TickReport::default()
        }
    }

    /// Gives back boosted nodes whose at-risk instance AWS took first. Nothing lowers desired
    /// capacity here: the node chosen for each is recorded in the ledger and the drainer cordons,
    /// drains and terminates it with decrement; an instance with nothing to give back is settled.
    async fn give_back(&self, plan: &[GiveBack]) -> Result<(), ScalerError> {
        let ctx = &self.ctx;
        ctx.ledger
            .update(|l| {
                plan.iter().for_each(|g| {
                    g.edit().apply(l);
                });
            })
            .await?;
        for g in plan {
            let (group, reclaimed) = (&g.group, &g.reclaimed);
            match &g.how {
                GiveBackHow::Drain(chosen) => {
                    info!(%group, %reclaimed, node = %chosen.node, "AWS took a boosted at-risk instance first; draining a node to give its capacity back");
                    ctx.metrics.scaler.give_back(group.as_str(), GiveBackOutcome::NodeChosen);
                }
                GiveBackHow::AtFloor => {
                    info!(%group, %reclaimed, "reclaimed instance settled; the group has nothing more to give back");
                    ctx.metrics.scaler.give_back(group.as_str(), GiveBackOutcome::AtFloor);
                }
                GiveBackHow::LeftToClusterAutoscaler { why: LeftWhy::NoNodeInTime } => {
                    warn!(%group, %reclaimed, "no node of the group could be drained to give back the capacity boosted for an instance AWS took first; left to Cluster Autoscaler");
                    ctx.metrics.scaler.give_back(group.as_str(), GiveBackOutcome::LeftToClusterAutoscaler);
                }
                GiveBackHow::LeftToClusterAutoscaler { why: LeftWhy::PodsProtected { node, pods } } => {
                    let pods = pods.join(", ");
                    warn!(%group, %reclaimed, %node, %pods, "every node that could give back the capacity boosted for an instance AWS took first carries a pod that opted out of disruption or that nothing recreates; left to Cluster Autoscaler");
                    ctx.metrics.scaler.give_back(group.as_str(), GiveBackOutcome::LeftToClusterAutoscaler);
                    let note = format!(
                        "not drained to give back the node boosted in {group} for {reclaimed}, which AWS took first: \
                         it carries pods that opted out of disruption or that nothing recreates ({pods}), as does \
                         every other node that could be; Cluster Autoscaler removes the extra capacity when it \
                         finds it unneeded"
                    );
                    let event = NodeEvent {
                        node: node.clone(),
                        reason: NodeEventReason::GiveBackLeftToClusterAutoscaler,
                        note,
                    };
                    ctx.events.publish(event).await;
                }
            }
        }
        Ok(())
    }

    fn export_sizes(&self, groups: &BTreeMap<GroupName, crate::core::Group>, ledger: &BoostLedger, now: Timestamp) {
        let m = &self.ctx.metrics.scaler;
        // Per group: nodes added and not given back, and the oldest open boost's age.
        let mut open: BTreeMap<&str, (i64, i64)> = groups.keys().map(|g| (g.as_str(), (0, 0))).collect();
        for r in ledger.records.iter().filter(|r| r.expired.is_none()) {
            let (in_flight, oldest) = open.entry(r.group.as_str()).or_default();
            *in_flight += i64::from(r.added.saturating_sub(r.returned));
            *oldest = (*oldest).max(i64::try_from(now.since(r.at).as_secs()).unwrap_or(i64::MAX));
        }
        for (name, g) in groups {
            m.group_size(name.as_str(), g.desired, g.max);
        }
        for (group, (in_flight, oldest)) in open {
            m.open_boosts(group, in_flight, oldest);
        }
    }

    /// Counts each signal once, under its node's group.
    fn count_signals(&mut self, snapshot: &Snapshot) {
        let live: BTreeSet<(InstanceId, &'static str)> =
            snapshot.signals.iter().map(|s| (s.instance.clone(), s.kind.as_str())).collect();
        for s in &snapshot.signals {
            if self.counted.contains(&(s.instance.clone(), s.kind.as_str())) {
                continue;
            }
            let group = snapshot.nodes.get(&s.node).and_then(|n| n.group.as_ref()).map_or("unknown", |g| g.as_str());
            if group == "unknown" {
                // Counted once the group is known, at a later tick.
                continue;
            }
            self.ctx.metrics.signals.seen(group, s.kind);
            self.counted.insert((s.instance.clone(), s.kind.as_str()));
        }
        self.counted.retain(|k| live.contains(k));
    }

    /// Marks boosts that stopped waiting in the ledger, then tells each of their nodes why and
    /// what is left as it was.
    async fn expire(&self, snapshot: &Snapshot, expired: &[Expired]) -> Result<(), ScalerError> {
        self.ctx
            .ledger
            .update(|held| {
                expired.iter().for_each(|e| {
                    e.edit().apply(held);
                });
            })
            .await?;
        for e in expired {
            self.ctx.metrics.scaler.boost(
                e.record.group.as_str(),
                match e.why {
                    BoostExpiry::ReplacementTimeout => BoostOutcome::ExpiredReplacementTimeout,
                    BoostExpiry::DrainDeferred => BoostOutcome::ExpiredDrainDeferred,
                    BoostExpiry::MaxAge => BoostOutcome::ExpiredMaxAge,
                },
            );
            let waited = match e.why {
                BoostExpiry::ReplacementTimeout => {
                    format!("{} of {} replacement(s) Ready after --replacement-timeout", e.ready, e.added)
                }
                BoostExpiry::DrainDeferred => {
                    "its replacements are Ready but a pod's opt-out still defers the drain after --replacement-timeout"
                        .to_string()
                }
                BoostExpiry::MaxAge => "open longer than --max-boost-age".to_string(),
            };
            warn!(group = %e.record.group, instances = e.record.instances.len(), reason = e.why.as_str(), "boost expired");
            let ids: Vec<&InstanceId> = e.record.instances.iter().collect();
            for node in Self::nodes_of(snapshot, &ids) {
                let note = format!(
                    "{waited}: the boost of {} stops waiting, scale-down protection is lifted and the budget \
                     freed; this node is not drained for it and stays as NTH left it (uncordon it, or let the \
                     interruption take it)",
                    e.record.group
                );
                self.ctx
                    .events
                    .publish(NodeEvent { node: node.name.clone(), reason: NodeEventReason::BoostExpired, note })
                    .await;
            }
        }
        Ok(())
    }

    /// Counts each instance whose signals made it no risk once per reason (`signals_dropped_total`),
    /// and those whose Events are not believed also by why (`signals_untrusted_total`), saying so.
    fn count_untrusted(&mut self, at_risk: &AtRiskSet) {
        let mut live = BTreeSet::new();
        for d in &at_risk.dropped {
            live.insert((d.instance.clone(), d.reason.as_str()));
            if !self.untrusted.insert((d.instance.clone(), d.reason.as_str())) {
                continue;
            }
            self.ctx.metrics.signals.dropped(&d.reason);
            if let DropReason::Untrusted(why) = d.reason {
                self.ctx.metrics.signals.untrusted(why.into());
                info!(instance = %d.instance, reason = why.as_str(), "an Event's interruption notice is not believed yet");
            }
        }
        self.untrusted.retain(|k| live.contains(k));
    }

    fn nodes_of<'s>(snapshot: &'s Snapshot, instances: &[&InstanceId]) -> Vec<&'s crate::core::Node> {
        snapshot.nodes.values().filter(|n| n.instance.as_ref().is_some_and(|i| instances.contains(&i))).collect()
    }

    /// An Event of `reason` saying `note` on the Node of each of `instances` the snapshot has.
    fn node_events(
        snapshot: &Snapshot,
        instances: &[&InstanceId],
        reason: NodeEventReason,
        note: &str,
    ) -> Vec<NodeEvent> {
        Self::nodes_of(snapshot, instances)
            .into_iter()
            .map(|node| NodeEvent { node: node.name.clone(), reason, note: note.to_string() })
            .collect()
    }

    /// Reports each fallback the core refused (metric and a Warning on the boost's at-risk nodes),
    /// once while the refusal lasts: the boost waits as if the tag did not name the group.
    async fn tell_refused_fallbacks(&mut self, snapshot: &Snapshot, refused: &[RefusedFallback]) {
        let mut told = Vec::new();
        for r in refused {
            if !self.told_refused.first((r.record.group.clone(), r.to.clone()), ()) {
                continue;
            }
            warn!(group = %r.record.group, fallback = %r.to, reason = r.reason.as_str(), "a fallback the group's tag names is refused");
            self.ctx.metrics.scaler.fallback_refused(r.record.group.as_str(), r.reason);
            let note = format!(
                "{} has no capacity, but its fallback {} is refused: {}; the boost waits as if no fallback were named",
                r.record.group,
                r.to,
                r.reason.explain()
            );
            let instances: Vec<&InstanceId> = r.record.instances.iter().collect();
            told.extend(Self::node_events(snapshot, &instances, NodeEventReason::FallbackRefused, &note));
        }
        self.told_refused.keep(|(from, to)| refused.iter().any(|r| r.record.group == *from && r.to == *to));
        publish_all(&self.ctx.events, told).await;
    }

    async fn tell_held(&mut self, snapshot: &Snapshot, held: &[crate::core::Held]) {
        let mut told = Vec::new();
        for h in held {
            let note = format!("boost of {} held: {}", h.group, h.reason);
            let instances: Vec<&InstanceId> = h.instances.iter().collect();
            for node in Self::nodes_of(snapshot, &instances) {
                let Some(instance) = node.instance.clone() else { continue };
                if !self.told_held.first(instance, note.clone()) {
                    continue;
                }
                self.ctx.metrics.scaler.boost(h.group.as_str(), BoostOutcome::Held);
                told.push(NodeEvent {
                    node: node.name.clone(),
                    reason: NodeEventReason::BoostHeld,
                    note: note.clone(),
                });
            }
        }
        let still: BTreeSet<&InstanceId> = held.iter().flat_map(|h| h.instances.iter()).collect();
        self.told_held.keep(|i| still.contains(i));
        publish_all(&self.ctx.events, told).await;
    }
}

impl<A, C, L, W, E> super::Worker for Scaler<A, C, L, W, E>
where
    A: AutoScaling + 'static,
    C: ClusterView + 'static,
    L: LedgerStore + 'static,
    W: ClusterWrites + 'static,
    E: EventSink + 'static,
{
    type Error = ScalerError;
    const PASS_AT_START: bool = true;
    const NAME: &'static str = "scaler";

    fn heartbeat(&self) -> Option<&Heartbeat> {
        self.heartbeat.as_ref()
    }

    fn metrics(&self) -> &crate::metrics::Metrics {
        &self.ctx.metrics
    }

    /// A wake-up (a new signal) and the pause after its burst, or the resync.
    async fn next_pass_due(&mut self) {
        tokio::select! {
            _ = self.wake.notified() => self.settle().await,
            _ = tokio::time::sleep(self.settings.resync) => {}
        }
    }

    /// A pass that lets each group's write go once its burst ended; one that left writes for
    /// later (settling) wakes the loop again.
    async fn pass_once(&mut self) -> Result<(), ScalerError> {
        let report = self.pass(Pacing::PerGroup).instrument(debug_span!("scaler_pass")).await?;
        // A raced write wakes the loop from its flight, which alone knows of it.
        if report.settling > 0 {
            self.wake.notify_one();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicI64, Ordering};

    use super::*;
    use crate::core::{Evidence, InstanceId, Node, NodeName, Policy, Signal, SignalKind};
    use crate::fakes::{AsgCall, FakeAutoScaling, FakeContext, FakeRig, InMemoryCluster};
    use crate::metrics::Metrics;
    use crate::ports::{Leadership, LedgerError};

    /// A node of `group` that NTH has cordoned.
    fn node(name: &str, group: &str) -> Node {
        Node::test(name, group).cordoned()
    }

    fn rebalance(cluster: &InMemoryCluster, name: &str, group: &str) {
        cluster.put_node(node(name, group));
        cluster.signal(Signal {
            instance: InstanceId::from(format!("i-{name}")),
            node: name.into(),
            kind: SignalKind::Rebalance,
            observed_at: Timestamp::from_millis(1_000),
            evidence: Evidence::NodeTaint,
            notice_deadline: None,
        });
    }

    fn count_policy() -> Policy {
        Policy { sizing: crate::core::SizingMode::Count, max_boost_per_group: 100, ..Policy::default() }
    }

    /// `now` follows tokio's (paused) clock from 10 s: the time the tests move is the workers' only one.
    fn paused_clock() -> Clock {
        let start = tokio::time::Instant::now();
        Arc::new(move || Timestamp::from_millis(10_000 + i64::try_from(start.elapsed().as_millis()).unwrap()))
    }

    type TestScaler = Scaler<
        FakeAutoScaling,
        InMemoryCluster,
        crate::fakes::MemoryLedger,
        crate::fakes::FakeClusterWrites,
        crate::fakes::RecordedEvents,
    >;

    async fn context(rig: &FakeRig) -> Arc<FakeContext> {
        rig.context(count_policy(), paused_clock(), Arc::new(Metrics::new())).await
    }

    async fn scaler(rig: &FakeRig) -> TestScaler {
        Scaler::new(context(rig).await, ScalerSettings::default())
    }

    fn raises(aws: &FakeAutoScaling) -> Vec<Vec<DesiredWrite>> {
        aws.calls().into_iter().filter_map(|c| if let AsgCall::Raise(w) = c { Some(w) } else { None }).collect()
    }

    /// The Events telling a wave's nodes their groups were raised go out together: with each
    /// publish taking a 20 ms round trip, 40 nodes in 20 groups cost the pass a few round trips,
    /// not 40 in a row before its next step and the next pass.
    #[tokio::test(start_paused = true)]
    async fn a_pass_tells_a_wave_s_nodes_at_once_not_one_round_trip_after_another() {
        let mut aws = FakeAutoScaling::default();
        for g in 0..20 {
            aws = aws.with_group(&format!("g{g:02}"), 3, 50);
        }
        let rig = FakeRig::new(aws);
        let mut s = scaler(&rig).await;
        for g in 0..20 {
            for k in 0..2 {
                rebalance(&rig.cluster, &format!("n{g:02}-{k}"), &format!("g{g:02}"));
            }
        }
        let round_trip = Duration::from_millis(20);
        rig.events.taking(round_trip);
        let started = tokio::time::Instant::now();
        let report = s.tick().await.unwrap();
        let took = started.elapsed();

        assert_eq!(report.raised.len(), 20, "{report:?}");
        assert_eq!(rig.events.count(), 40, "one BoostRequested per at-risk node");
        assert_eq!(rig.events.most_in_flight(), crate::workers::EVENTS_IN_FLIGHT);
        assert!(took <= round_trip * 3, "the pass waited {took:?} for its Events (40 round trips: 800 ms)");
    }

    /// A lone signal waits for the wake-up's quiet only; a group's own quiet (longer) is for a
    /// wave whose signals still arrive.
    #[tokio::test(start_paused = true)]
    async fn a_lone_signal_is_written_once_the_cluster_is_quiet() {
        let rig = FakeRig::new(FakeAutoScaling::default().with_group("a", 3, 50));
        let ctx = rig.context(count_policy(), paused_clock(), Arc::new(Metrics::new())).await;
        let settings = ScalerSettings::default();
        assert!(settings.group_quiet > settings.coalesce_quiet + Duration::from_millis(10));
        let s = Scaler::new(ctx.clone(), settings.clone());
        let wake = s.waker();
        let (stop, shutdown) = watch::channel(false);
        let task = tokio::spawn(s.run(shutdown));
        tokio::time::sleep(Duration::from_millis(1)).await;
        rig.cluster.put_node(node("a0", "a"));
        rig.cluster.signal(Signal { observed_at: (ctx.clock)(), ..Signal::rebalance("a0", 0) });
        wake.notify_one();
        tokio::time::sleep(settings.coalesce_quiet + Duration::from_millis(5)).await;
        assert_eq!(rig.aws.desired("a"), 4, "written after the wake-up's quiet: {:?}", rig.aws.calls());
        stop.send(true).unwrap();
        task.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_of_signals_becomes_one_write_per_group() {
        let rig = FakeRig::new(FakeAutoScaling::default().with_group("a", 3, 50).with_group("b", 3, 50));
        let metrics = Arc::new(Metrics::new());
        let ctx = rig.context(count_policy(), paused_clock(), metrics.clone()).await;
        let s = Scaler::new(ctx.clone(), ScalerSettings::default());
        let wake = s.waker();
        let (stop, shutdown) = watch::channel(false);
        let task = tokio::spawn(s.run(shutdown));
        tokio::time::sleep(Duration::from_millis(1)).await; // its first pass, before any signal
        for k in 0..10 {
            rebalance(&rig.cluster, &format!("a{k}"), "a");
            rebalance(&rig.cluster, &format!("b{k}"), "b");
            wake.notify_one();
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        stop.send(true).unwrap();
        task.await.unwrap();

        assert_eq!(raises(&rig.aws).len(), 1, "one guarded batch: {:?}", rig.aws.calls());
        assert_eq!(raises(&rig.aws)[0].len(), 2, "one write per group");
        assert_eq!((rig.aws.desired("a"), rig.aws.desired("b")), (13, 13));
        assert_eq!(ctx.ledger.current().await.covered().len(), 20);
        assert_eq!(rig.ledger.saved(), ctx.ledger.current().await, "persisted");
        // Reaction: the first signal waited for the burst to settle (95 ms of signals + 20 ms quiet).
        let text = metrics.encode();
        assert!(text.contains("spots_booster_reaction_seconds_count 20"), "{text}");
        for stage in ["observe", "plan", "ledger-save", "write"] {
            let count = format!("spots_booster_scaler_stage_seconds_count{{stage=\"{stage}\"}} 1");
            assert!(text.contains(&count), "one boosting pass timed: {text}");
        }
        assert!(text.contains("spots_booster_boosts_total{group=\"a\",outcome=\"written\"} 1"), "{text}");
        assert!(text.contains("spots_booster_signals_total{group=\"a\",kind=\"rebalance\"} 10"), "{text}");
        assert!(text.contains("spots_booster_asg_desired_capacity{group=\"a\"} 13"), "{text}");
        assert_eq!(rig.events.reasons_for("a0"), vec!["BoostRequested"]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_group_whose_burst_ended_is_written_while_another_s_signals_still_arrive() {
        let (rig, signal_now, stop, task) = looping_scaler(Duration::ZERO).await;
        // `a`: two signals 5 ms apart. `b`: one every 10 ms for 150 ms.
        let mut written_a_at = None;
        for k in 0..16 {
            match k {
                0 => signal_now("a0", "a"),
                1 => signal_now("a1", "a"),
                _ => {}
            }
            signal_now(&format!("b{k}"), "b");
            tokio::time::sleep(Duration::from_millis(if k == 0 { 5 } else { 10 })).await;
            if written_a_at.is_none() && rig.aws.desired("a") > 3 {
                written_a_at = Some(k);
                assert_eq!(rig.aws.desired("b"), 3, "b's burst is still arriving");
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        stop.send(true).unwrap();
        task.await.unwrap();

        let written_a_at = written_a_at.expect("a written while b's signals arrive");
        assert!(written_a_at <= 7, "a waited for quiet, not for b's burst: written after b's signal {written_a_at}");
        let per_group = |g: &str| raises(&rig.aws).iter().flatten().filter(|w| w.group.as_str() == g).count();
        assert_eq!((per_group("a"), per_group("b")), (1, 1), "one write per group: {:?}", rig.aws.calls());
        assert_eq!((rig.aws.desired("a"), rig.aws.desired("b")), (5, 19));
    }

    /// The worker's loop over groups `a` and `b` (desired 3, max 50), raises taking `latency` to
    /// answer (AWS under load; zero: at once); returns the rig, a way to signal a node now, and
    /// the loop's stop switch and task.
    async fn looping_scaler(
        latency: Duration,
    ) -> (FakeRig, impl Fn(&str, &str), watch::Sender<bool>, tokio::task::JoinHandle<TestScaler>) {
        let rig =
            FakeRig::new(FakeAutoScaling::default().with_group("a", 3, 50).with_group("b", 3, 50).slow_writes(latency));
        let ctx = rig.context(count_policy(), paused_clock(), Arc::new(Metrics::new())).await;
        let s = Scaler::new(ctx.clone(), ScalerSettings::default());
        let wake = s.waker();
        let (stop, shutdown) = watch::channel(false);
        let task = tokio::spawn(s.run(shutdown));
        tokio::time::sleep(Duration::from_millis(1)).await;
        let cluster = rig.cluster.clone();
        let signal_now = move |name: &str, group: &str| {
            cluster.put_node(node(name, group));
            cluster.signal(Signal { observed_at: (ctx.clock)(), ..Signal::rebalance(name, 0) });
            wake.notify_one();
        };
        (rig, signal_now, stop, task)
    }

    #[tokio::test(start_paused = true)]
    async fn a_group_whose_burst_ends_during_another_s_slow_write_is_written_before_that_write_answers() {
        let (rig, signal_now, stop, task) = looping_scaler(Duration::from_millis(500)).await;
        signal_now("a0", "a");
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(raises(&rig.aws).len(), 1, "a's write is out: {:?}", rig.aws.calls());
        signal_now("b0", "b");
        tokio::time::sleep(Duration::from_millis(150)).await;
        let sent = raises(&rig.aws);
        assert_eq!(sent.len(), 2, "b is written while a's write is unanswered: {sent:?}");
        assert_eq!(sent[1].iter().map(|w| w.group.as_str()).collect::<Vec<_>>(), ["b"]);
        assert_eq!(rig.aws.desired("a"), 3, "a's write has not applied yet");
        tokio::time::sleep(Duration::from_secs(1)).await;
        stop.send(true).unwrap();
        task.await.unwrap();
        assert_eq!((rig.aws.desired("a"), rig.aws.desired("b")), (4, 4));
        assert_eq!(raises(&rig.aws).len(), 2, "one write per group: {:?}", rig.aws.calls());
        assert!(rig.ledger.saved().records.iter().all(|r| r.raising_to.is_none()), "both answered");
    }

    #[tokio::test(start_paused = true)]
    async fn a_group_at_risk_again_during_its_slow_write_is_written_after_it_answers_from_the_size_it_raised() {
        let (rig, signal_now, stop, task) = looping_scaler(Duration::from_millis(500)).await;
        signal_now("a0", "a");
        tokio::time::sleep(Duration::from_millis(100)).await;
        signal_now("a1", "a");
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(raises(&rig.aws).len(), 1, "a's next write waits for the answer: {:?}", rig.aws.calls());
        tokio::time::sleep(Duration::from_secs(2)).await;
        stop.send(true).unwrap();
        task.await.unwrap();
        let sent = raises(&rig.aws);
        assert_eq!(sent.len(), 2, "{sent:?}");
        assert_eq!((sent[1][0].expected, sent[1][0].to), (4, 5), "planned from the size the first write made");
        assert_eq!(rig.aws.desired("a"), 5, "one node per at-risk node, none undone");
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_that_keeps_failing_is_tried_again_at_the_next_signal_not_in_a_loop() {
        let (rig, signal_now, stop, task) = looping_scaler(Duration::ZERO).await;
        signal_now("a0", "a");
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(rig.aws.desired("a"), 4, "a's size is known");
        rig.aws.throttle_next(u32::MAX);
        signal_now("a1", "a");
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(raises(&rig.aws).len(), 2, "one failed attempt, then quiet: {:?}", rig.aws.calls());
        signal_now("a2", "a");
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(raises(&rig.aws).len(), 3, "the next signal's pass tries again: {:?}", rig.aws.calls());
        rig.aws.throttle_next(0);
        tokio::time::sleep(ScalerSettings::default().resync).await;
        stop.send(true).unwrap();
        task.await.unwrap();
        assert_eq!(rig.aws.desired("a"), 6, "the resync's pass wrote both");
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_in_flight_at_shutdown_is_answered_before_the_loop_ends() {
        let (rig, signal_now, stop, task) = looping_scaler(Duration::from_millis(500)).await;
        signal_now("a0", "a");
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(rig.ledger.saved().records[0].raising_to, Some(4), "saved before the write");
        stop.send(true).unwrap();
        task.await.unwrap();
        assert_eq!(rig.aws.desired("a"), 4);
        assert_eq!(rig.ledger.saved().records[0].raising_to, None, "answered, not left to a read after a restart");
    }

    /// A busy API server: NTH's calls for one group's two nodes land 100–130 ms apart, while
    /// `c`'s nodes keep the wave arriving every 10 ms but for a 40 ms lull. Once `d` has shown a
    /// 100 ms gap, `b` (quiet for 80 ms, past the 50 ms floor, and the cluster quiet for 20 ms
    /// in the lull) waits for its second node instead of being written twice.
    #[tokio::test(start_paused = true)]
    async fn a_wave_whose_groups_come_slowly_waits_as_long_as_they_take() {
        let rig = FakeRig::new(
            FakeAutoScaling::default().with_group("b", 3, 50).with_group("c", 3, 50).with_group("d", 3, 50),
        );
        let ctx = rig.context(count_policy(), paused_clock(), Arc::new(Metrics::new())).await;
        let settings = ScalerSettings::default();
        assert_eq!(settings.group_quiet, Duration::from_millis(50), "the floor this wave outlasts");
        let s = Scaler::new(ctx.clone(), settings);
        let wake = s.waker();
        let (stop, shutdown) = watch::channel(false);
        let task = tokio::spawn(s.run(shutdown));
        tokio::time::sleep(Duration::from_millis(1)).await;
        let mut arrivals: Vec<(u64, String, &str)> =
            vec![(0, "d0".into(), "d"), (100, "d1".into(), "d"), (40, "b0".into(), "b"), (170, "b1".into(), "b")];
        arrivals.extend((0..=30).filter(|k| !(12..=14).contains(k)).map(|k| (k * 10, format!("c{k}"), "c")));
        arrivals.sort();
        let mut at = 0;
        for (t, name, group) in arrivals {
            tokio::time::sleep(Duration::from_millis(t - at)).await;
            at = t;
            rig.cluster.put_node(node(&name, group));
            rig.cluster.signal(Signal { observed_at: (ctx.clock)(), ..Signal::rebalance(&name, 0) });
            wake.notify_one();
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        stop.send(true).unwrap();
        task.await.unwrap();

        let per_group = |g: &str| raises(&rig.aws).iter().flatten().filter(|w| w.group.as_str() == g).count();
        assert_eq!(per_group("b"), 1, "b written once, with both nodes: {:?}", rig.aws.calls());
        assert_eq!((rig.aws.desired("b"), rig.aws.desired("c"), rig.aws.desired("d")), (5, 31, 5));
    }

    /// On that busy API server a wave's head groups are written before any group has shown its
    /// second node: the first wave, with nothing to go on but the floor, writes `a` and `b` once
    /// per node. The next wave's head waits for the spacing the first one showed and writes each
    /// group once; a lone signal after it is written at the cluster's quiet, not held for it.
    #[tokio::test(start_paused = true)]
    async fn the_next_wave_waits_for_the_spacing_the_last_one_showed() {
        let (rig, arrive, stop, task) = looping_scaler(Duration::ZERO).await;
        let writes_to = |g: &str| raises(&rig.aws).iter().flatten().filter(|w| w.group.as_str() == g).count();
        let mut per_wave = Vec::new();
        for wave in [0, 1] {
            // Each group's second node 100 ms after its first, `b` 10 ms behind `a`.
            let names = |group: &str, k: usize| format!("{group}{}", 2 * wave + k);
            arrive(&names("a", 0), "a");
            tokio::time::sleep(Duration::from_millis(10)).await;
            arrive(&names("b", 0), "b");
            tokio::time::sleep(Duration::from_millis(90)).await;
            arrive(&names("a", 1), "a");
            tokio::time::sleep(Duration::from_millis(10)).await;
            arrive(&names("b", 1), "b");
            tokio::time::sleep(Duration::from_secs(2)).await;
            per_wave.push((writes_to("a"), writes_to("b")));
        }
        let desired_after_waves = (rig.aws.desired("a"), rig.aws.desired("b"));
        arrive("a4", "a");
        tokio::time::sleep(ScalerSettings::default().coalesce_quiet + Duration::from_millis(5)).await;
        let lone_written = rig.aws.desired("a");
        stop.send(true).unwrap();
        task.await.unwrap();

        assert_eq!(per_wave[0], (2, 2), "the first wave, at the floor: once per node: {:?}", rig.aws.calls());
        assert_eq!(per_wave[1], (3, 3), "the next wave, at the first one's pace: once: {:?}", rig.aws.calls());
        assert_eq!(desired_after_waves, (7, 7));
        assert_eq!(lone_written, 8, "a lone signal is written at the cluster's quiet: {:?}", rig.aws.calls());
    }

    /// Group `a` of `size` Ready nodes n1..n<size>, listed by Auto Scaling as its instances; as
    /// the watches see them, no node names its group.
    fn fleet(size: usize, desired: u32, max: u32) -> FakeRig {
        let mut aws = FakeAutoScaling::default().with_group("a", desired, max);
        for i in 1..=size {
            aws = aws.with_instance("a", &format!("i-n{i}"));
        }
        let rig = FakeRig::new(aws);
        for i in 1..=size {
            let mut n = Node::test(&format!("n{i}"), "a");
            n.group = None;
            rig.cluster.put_node(n);
        }
        rig
    }

    /// NTH's Event about `name`, which NTH has cordoned.
    fn signal(rig: &FakeRig, name: &str) {
        rig.cluster.edit(|s| s.nodes.get_mut(&NodeName::from(name)).unwrap().cordoned = true);
        event(rig, name, SignalKind::Rebalance);
    }

    fn event(rig: &FakeRig, name: &str, kind: SignalKind) {
        rig.cluster.signal(Signal {
            instance: InstanceId::from(format!("i-{name}")),
            node: name.into(),
            kind,
            observed_at: Timestamp::from_millis(1_000),
            evidence: Evidence::Event,
            notice_deadline: None,
        });
    }

    #[tokio::test(start_paused = true)]
    async fn a_replacement_that_never_registers_expires_its_boost_once_and_says_so() {
        let rig = fleet(10, 10, 100);
        signal(&rig, "n1");
        let now = Arc::new(AtomicI64::new(10_000));
        let clock: Clock = {
            let now = now.clone();
            Arc::new(move || Timestamp::from_millis(now.load(Ordering::Relaxed)))
        };
        let metrics = Arc::new(Metrics::new());
        let ctx = rig.context(count_policy(), clock, metrics.clone()).await;
        let mut s = Scaler::new(ctx.clone(), ScalerSettings::default());
        assert_eq!(s.tick().await.unwrap().raised.len(), 1);
        now.fetch_add(60_000, Ordering::Relaxed);
        assert!(s.tick().await.unwrap().raised.is_empty());
        let text = metrics.encode();
        assert!(text.contains("spots_booster_oldest_boost_age_seconds{group=\"a\"} 60\n"), "{text}");

        let timeout = i64::try_from(ctx.policy.replacement_timeout.as_millis()).unwrap();
        now.fetch_add(timeout - 60_000, Ordering::Relaxed);
        for _ in 0..3 {
            assert!(s.tick().await.unwrap().raised.is_empty(), "its instance is never boosted twice");
        }
        let saved = rig.ledger.saved();
        assert_eq!(saved.records.len(), 1, "kept until the instance leaves");
        assert_eq!(saved.records[0].expired, Some(BoostExpiry::ReplacementTimeout));
        assert_eq!(rig.events.reasons_for("n1"), vec!["BoostRequested", "BoostExpired"], "told once");
        let text = metrics.encode();
        assert!(text.contains("outcome=\"expired-replacement-timeout\"} 1"), "{text}");
        assert!(text.contains("spots_booster_boosted_nodes_in_flight{group=\"a\"} 0"), "{text}");
        assert!(text.contains("spots_booster_oldest_boost_age_seconds{group=\"a\"} 0\n"), "expired: {text}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_forged_event_moves_nothing_until_the_node_and_aws_agree() {
        let rig = fleet(10, 10, 100);
        rig.aws.on_demand("i-n2");
        let metrics = Arc::new(Metrics::new());
        let mut s =
            Scaler::new(rig.context(count_policy(), paused_clock(), metrics.clone()).await, ScalerSettings::default());
        // Anyone may write an Event: about an uncordoned node it is not believed.
        event(&rig, "n1", SignalKind::SpotInterruption);
        event(&rig, "n2", SignalKind::SpotInterruption);
        assert!(s.tick().await.unwrap().raised.is_empty());
        assert_eq!(rig.aws.instance_lookups(), 10, "every node's instance is described once, in one batch");
        // Cordoned, but on-demand: EC2 sends no interruption notice to on-demand instances.
        rig.cluster.edit(|s| s.nodes.get_mut(&NodeName::from("n2")).unwrap().cordoned = true);
        assert!(s.tick().await.unwrap().raised.is_empty());
        assert!(s.tick().await.unwrap().raised.is_empty());
        assert_eq!(rig.aws.instance_lookups(), 10, "an instance is described once");
        let text = metrics.encode();
        assert!(text.contains("spots_booster_signals_untrusted_total{reason=\"not-cordoned\"} 2"), "{text}");
        assert!(text.contains("spots_booster_signals_untrusted_total{reason=\"not-spot\"} 1"), "{text}");
        assert!(raises(&rig.aws).is_empty());
        // NTH's cordon on the spot node: now it is believed.
        rig.cluster.edit(|s| s.nodes.get_mut(&NodeName::from("n1")).unwrap().cordoned = true);
        assert_eq!(s.tick().await.unwrap().raised, vec![(GroupName::from("a"), 10, 11)]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_large_group_is_boosted_though_only_its_signalled_node_was_resolved() {
        for size in [10, 50] {
            let size_u32 = u32::try_from(size).unwrap();
            let rig = fleet(size, size_u32, 100);
            signal(&rig, "n3");
            let mut s = scaler(&rig).await;
            let report = s.tick().await.unwrap();
            assert_eq!(report.raised, vec![(GroupName::from("a"), size_u32, size_u32 + 1)], "{size} nodes");
            assert_eq!(report.held, 0);
        }
    }

    /// n1 of a 4-node group is boosted (desired 5); then a spot interruption under queue mode:
    /// AWS takes i-n1 before any drain, the group replaces it, the node goes away, and the group's
    /// description is old enough to be read again.
    async fn boosted_then_taken_first(rig: &FakeRig) -> TestScaler {
        signal(rig, "n1");
        let mut s = scaler(rig).await;
        s.tick().await.unwrap();
        assert_eq!(rig.aws.desired("a"), 5);
        rig.aws.reclaim("i-n1", "i-r1");
        rig.cluster.remove_node("n1");
        rig.cluster.edit(|st| st.signals.clear());
        tokio::time::advance(Duration::from_secs(61)).await;
        s
    }

    fn chosen(rig: &FakeRig) -> Vec<(InstanceId, NodeName)> {
        rig.ledger
            .saved()
            .records
            .iter()
            .flat_map(|r| r.giving_back.iter().map(|(i, g)| (i.clone(), g.node.clone())))
            .collect()
    }

    #[tokio::test(start_paused = true)]
    async fn a_boost_whose_instance_aws_took_first_is_given_back_through_one_chosen_node() {
        let rig = fleet(4, 4, 10);
        rig.cluster.edit(|st| {
            // n2 runs more pods than n3 and n4; n4 is the newest: it is the one given back.
            st.nodes.get_mut(&NodeName::from("n2")).unwrap().pods = Node::test("n2", "a").with_pods(2, 1, 1).pods;
            st.nodes.get_mut(&NodeName::from("n4")).unwrap().created = Timestamp::from_millis(5_000);
        });
        let mut s = boosted_then_taken_first(&rig).await;
        s.tick().await.unwrap();
        assert!(chosen(&rig).is_empty(), "the group's replacement for i-n1 is still joining");

        // It joins, busy already: n4 stays the emptiest, newest node.
        let mut r1 = Node::test("r1", "a").with_pods(1, 1, 1).created_at(3_000);
        r1.group = None;
        rig.cluster.put_node(r1);
        s.tick().await.unwrap();
        assert_eq!(rig.aws.desired("a"), 5, "desired capacity is never lowered by a write that names no instance");
        assert_eq!(raises(&rig.aws).len(), 1, "the boost was the only write");
        assert_eq!(chosen(&rig), vec![(InstanceId::from("i-n1"), NodeName::from("n4"))]);

        tokio::time::advance(Duration::from_secs(61)).await;
        s.tick().await.unwrap();
        assert_eq!(chosen(&rig).len(), 1, "one node per instance taken, however many passes");
        let text = s.ctx.metrics.encode();
        assert!(text.contains("spots_booster_give_backs_total{group=\"a\",outcome=\"node-chosen\"} 1"), "{text}");
    }

    #[tokio::test(start_paused = true)]
    async fn no_node_that_opted_out_or_would_lose_a_bare_pod_is_chosen_and_ca_is_left_it_with_an_event() {
        let rig = fleet(4, 4, 10);
        rig.cluster.edit(|st| {
            for name in ["n2", "n4"] {
                let mut opted = Node::test(name, "a").with_pods(1, 1, 1).pods;
                opted[0].opt_out = Some(crate::core::OptOut::DoNotDisrupt);
                st.nodes.get_mut(&NodeName::from(name)).unwrap().pods = opted;
            }
            let mut bare = Node::test("n3", "a").with_pods(1, 1, 1).pods;
            bare[0].bare = true;
            st.nodes.get_mut(&NodeName::from("n3")).unwrap().pods = bare;
        });
        let mut s = boosted_then_taken_first(&rig).await;
        let mut r1 = Node::test("r1", "a").with_pods(1, 1, 1);
        r1.pods[0].opt_out = Some(crate::core::OptOut::NotSafeToEvict);
        r1.group = None;
        rig.cluster.put_node(r1);
        // The view shows none of these pods (no node is signalled or cordoned): the give-back
        // looks them up, and every node carries one it must not evict.
        assert!(rig.cluster.current().unwrap().nodes.values().all(|n| n.pods.is_empty()));
        s.tick().await.unwrap();
        assert!(chosen(&rig).is_empty());
        assert!(rig.ledger.saved().records.is_empty(), "nothing to wait for: settled at once, and closed");
        assert_eq!(rig.aws.desired("a"), 5, "left to Cluster Autoscaler, not lowered");
        assert_eq!(
            rig.events.reasons_for("n2"),
            vec!["GiveBackLeftToClusterAutoscaler"],
            "saying why, on one such node"
        );
        let text = s.ctx.metrics.encode();
        let left = "spots_booster_give_backs_total{group=\"a\",outcome=\"left-to-cluster-autoscaler\"} 1";
        assert!(text.contains(left), "{text}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_give_back_never_goes_below_the_size_before_the_boost() {
        let rig = fleet(4, 4, 10);
        signal(&rig, "n1");
        let mut s = scaler(&rig).await;
        s.tick().await.unwrap();
        // Cluster Autoscaler scaled the group down meanwhile; then AWS takes the at-risk instance.
        rig.aws.set_desired("a", 4);
        rig.aws.reclaim("i-n1", "i-r1");
        rig.cluster.remove_node("n1");
        tokio::time::advance(Duration::from_secs(61)).await;
        s.tick().await.unwrap();
        assert_eq!(rig.aws.desired("a"), 4);
        assert!(chosen(&rig).is_empty(), "nothing to give back");
        assert!(rig.ledger.saved().records.is_empty(), "settled and closed");
    }

    #[tokio::test(start_paused = true)]
    async fn every_dropped_signal_is_counted_once_by_its_reason() {
        let rig = fleet(2, 2, 10);
        // NTH's Event on a node nobody cordoned, and one about an instance whose node is gone.
        event(&rig, "n1", SignalKind::SpotInterruption);
        rig.cluster.signal(Signal {
            instance: InstanceId::from("i-gone"),
            node: "gone".into(),
            kind: SignalKind::Rebalance,
            observed_at: Timestamp::from_millis(1_000),
            evidence: Evidence::NodeTaint,
            notice_deadline: None,
        });
        let mut s = scaler(&rig).await;
        s.tick().await.unwrap();
        s.tick().await.unwrap();
        let text = s.ctx.metrics.encode();
        for reason in ["not-cordoned", "node-gone"] {
            let line = format!("spots_booster_signals_dropped_total{{reason=\"{reason}\"}} 1");
            assert!(text.contains(&line), "{line} in {text}");
        }
        assert!(text.contains("spots_booster_signals_untrusted_total{reason=\"not-cordoned\"} 1"), "{text}");
    }

    #[tokio::test(start_paused = true)]
    async fn an_instancegroup_rotation_is_boosted_like_a_rebalance() {
        let rig = FakeRig::new(FakeAutoScaling::default().with_group("a", 3, 50));
        // The reconciler only annotates; nobody has cordoned the node yet.
        rig.cluster.put_node(Node::test("n1", "a"));
        rig.cluster.signal(Signal {
            instance: InstanceId::from("i-n1"),
            node: "n1".into(),
            kind: SignalKind::Rotation,
            observed_at: Timestamp::from_millis(1_000),
            evidence: Evidence::NodeTaint,
            notice_deadline: None,
        });
        let mut s = scaler(&rig).await;
        s.start(&[]).await.unwrap();
        s.tick().await.unwrap();
        assert_eq!(rig.aws.desired("a"), 4, "a replacement is bought before the drain");
        assert!(rig.ledger.saved().covered().contains(&InstanceId::from("i-n1")));
    }

    #[tokio::test(start_paused = true)]
    async fn the_ledger_is_saved_before_the_write_and_a_restart_never_boosts_twice() {
        let rig = FakeRig::new(FakeAutoScaling::default().with_group("a", 3, 50));
        rebalance(&rig.cluster, "n1", "a");
        let mut first = scaler(&rig).await;
        first.start(&[]).await.unwrap();
        first.tick().await.unwrap();
        assert_eq!(rig.aws.desired("a"), 4);

        // A restart loads the ledger and finds nothing left to do.
        let mut second = scaler(&rig).await;
        second.start(&[]).await.unwrap();
        let report = second.tick().await.unwrap();
        assert_eq!(report, TickReport::default());
        assert_eq!(rig.aws.desired("a"), 4);
        assert_eq!(raises(&rig.aws).len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_follower_plans_but_writes_nothing_and_a_new_leader_never_boosts_twice() {
        let rig = FakeRig::new(FakeAutoScaling::default().with_group("a", 3, 50));
        let follower_rig = FakeRig { leadership: Leadership::follower(), ..rig.clone() };
        let mut leader = scaler(&rig).await;
        let mut follower = scaler(&follower_rig).await;
        rebalance(&rig.cluster, "n1", "a");

        let report = follower.tick().await.unwrap();
        assert_eq!(report.not_leader, 1);
        assert!(raises(&rig.aws).is_empty());
        assert_eq!(rig.ledger.saves(), 0, "a follower does not write the ledger either");

        leader.tick().await.unwrap();
        assert_eq!(rig.aws.desired("a"), 4);
        // The leader loses the lease (its writes stop at once) and the follower takes over.
        rig.leadership.set(false);
        rebalance(&rig.cluster, "n2", "a");
        assert_eq!(leader.tick().await.unwrap().not_leader, 1);
        follower_rig.leadership.set(true);
        // Its cached description is stale: the guard catches it and the next plan uses the live value.
        assert_eq!(follower.tick().await.unwrap().raced, vec![GroupName::from("a")]);
        let report = follower.tick().await.unwrap();
        assert_eq!(report.raised, vec![(GroupName::from("a"), 4, 5)], "only n2: n1 is in the saved ledger");
        assert_eq!(rig.aws.desired("a"), 5);
    }

    /// A ledger store whose saves end this replica's lease once they are made.
    struct LeaseGoesOnSave {
        saved: crate::fakes::MemoryLedger,
        leadership: Leadership,
    }

    impl LedgerStore for LeaseGoesOnSave {
        async fn load(&self) -> Result<BoostLedger, LedgerError> {
            self.saved.load().await
        }

        async fn save(&self, ledger: &BoostLedger) -> Result<(), LedgerError> {
            self.saved.save(ledger).await?;
            self.leadership.set(false);
            Ok(())
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_lease_lost_after_the_ledger_save_stops_the_write_and_the_next_leader_boosts_once() {
        let rig = FakeRig::new(FakeAutoScaling::default().with_group("a", 3, 50));
        let metrics = Arc::new(Metrics::new());
        let ports = crate::workers::Ports {
            aws: rig.aws.clone(),
            cluster: rig.cluster.clone(),
            ledger: LeaseGoesOnSave { saved: rig.ledger.clone(), leadership: rig.leadership.clone() },
            writes: rig.writes.clone(),
            events: rig.events.clone(),
        };
        let groups = Arc::new(crate::workers::groups::GroupBook::new(
            crate::fakes::CLUSTER,
            Duration::from_secs(60),
            Duration::from_secs(3600),
            paused_clock(),
        ));
        let ctx =
            WorkerContext::new(ports, groups, rig.leadership.clone(), metrics.clone(), count_policy(), paused_clock())
                .await
                .unwrap();
        let mut losing = Scaler::new(ctx, ScalerSettings::default());
        rebalance(&rig.cluster, "n1", "a");

        // Leading when the pass began; the lease goes as the boost's record is saved.
        let err = losing.tick().await.unwrap_err();
        assert!(super::super::PassError::lost_lease(&err), "{err}");
        assert!(raises(&rig.aws).is_empty(), "the gate dropped the write");
        assert_eq!(rig.aws.desired("a"), 3);
        let saved = rig.ledger.saved();
        assert_eq!(saved.records.len(), 1, "the record stays: its withdrawal was a write too");
        assert_eq!(saved.records[0].raising_to, Some(4), "unanswered: the next leader reads the group first");
        let skipped = metrics.encode();
        assert!(
            skipped.contains("spots_booster_skipped_not_leader_total{action=\"set-desired-capacity\"} 1"),
            "{skipped}"
        );
        assert!(skipped.contains("spots_booster_skipped_not_leader_total{action=\"ledger-save\"} 1"), "{skipped}");

        // A new leader resolves the unanswered record and boosts once.
        rig.leadership.set(true);
        let mut next = scaler(&rig).await;
        let report = next.tick().await.unwrap();
        assert_eq!(report.raised, vec![(GroupName::from("a"), 3, 4)]);
        assert_eq!(raises(&rig.aws).len(), 1);
        assert_eq!(next.tick().await.unwrap().raised, vec![], "boosted once");
        assert_eq!(rig.aws.desired("a"), 4);
    }

    #[tokio::test(start_paused = true)]
    async fn only_the_leader_reports_group_sizes_and_signals() {
        let rig = FakeRig::new(FakeAutoScaling::default().with_group("a", 3, 50));
        let follower_rig = FakeRig { leadership: Leadership::follower(), ..rig.clone() };
        let (leader_metrics, follower_metrics) = (Arc::new(Metrics::new()), Arc::new(Metrics::new()));
        let mut leader = Scaler::new(
            rig.context(count_policy(), paused_clock(), leader_metrics.clone()).await,
            ScalerSettings::default(),
        );
        let mut follower = Scaler::new(
            follower_rig.context(count_policy(), paused_clock(), follower_metrics.clone()).await,
            ScalerSettings::default(),
        );
        rebalance(&rig.cluster, "n1", "a");
        leader.tick().await.unwrap();
        follower.tick().await.unwrap();
        let (led, followed) = (leader_metrics.encode(), follower_metrics.encode());
        assert!(led.contains("spots_booster_asg_desired_capacity{group=\"a\"} 4"), "{led}");
        assert!(led.contains("spots_booster_signals_total{group=\"a\",kind=\"rebalance\"} 1"), "{led}");
        assert!(!followed.contains("asg_desired_capacity{"), "{followed}");
        assert!(!followed.contains("signals_total{"), "two replicas never double a group's numbers: {followed}");

        // The leader loses the lease: its gauges go with it.
        rig.leadership.set(false);
        leader.tick().await.unwrap();
        assert!(!leader_metrics.encode().contains("asg_desired_capacity{"));
    }

    #[tokio::test(start_paused = true)]
    async fn nothing_is_written_when_the_ledger_cannot_be_saved() {
        let rig = FakeRig::new(FakeAutoScaling::default().with_group("a", 3, 50));
        rebalance(&rig.cluster, "n1", "a");
        let mut s = scaler(&rig).await;
        rig.ledger.fail_saves(true);
        assert!(matches!(s.tick().await, Err(ScalerError::Ledger(_))));
        assert!(raises(&rig.aws).is_empty());
        rig.ledger.fail_saves(false);
        s.tick().await.unwrap();
        assert_eq!(rig.aws.desired("a"), 4);
    }

    #[tokio::test(start_paused = true)]
    async fn a_stale_plan_is_replanned_from_the_live_value_never_lowered() {
        let rig = FakeRig::new(FakeAutoScaling::default().with_group("a", 3, 50).with_tag("a", "k", "v"));
        let mut s = scaler(&rig).await;
        s.start(&["k=v".parse().unwrap()]).await.unwrap();
        rig.aws.set_desired("a", 6); // Cluster Autoscaler, after our describe…
        for k in 0..6 {
            let mut ready = node(&format!("r{k}"), "a"); // …and its nodes have joined.
            ready.cordoned = false;
            rig.cluster.put_node(ready);
        }
        rebalance(&rig.cluster, "n1", "a");

        let report = s.tick().await.unwrap();
        assert_eq!(report.raced, vec![GroupName::from("a")]);
        assert_eq!(rig.aws.desired("a"), 6, "never lowered");
        assert!(rig.ledger.saved().records.is_empty(), "the raced boost is taken back");
        let report = s.tick().await.unwrap();
        assert_eq!(report.raised, vec![(GroupName::from("a"), 6, 7)]);
    }

    #[tokio::test(start_paused = true)]
    async fn only_groups_matching_the_tag_filter_are_boosted() {
        let aws = FakeAutoScaling::default()
            .with_group("a", 3, 50)
            .with_tag("a", "k8s.io/cluster-autoscaler/enabled", "true")
            .with_group("b", 3, 50)
            .with_tag("b", "k8s.io/cluster-autoscaler/enabled", "false");
        let rig = FakeRig::new(aws);
        let mut s = scaler(&rig).await;
        s.start(&["k8s.io/cluster-autoscaler/enabled=true".parse().unwrap()]).await.unwrap();
        rebalance(&rig.cluster, "a1", "a");
        rebalance(&rig.cluster, "b1", "b");
        let report = s.tick().await.unwrap();
        assert_eq!(report.raised, vec![(GroupName::from("a"), 3, 4)]);
        assert_eq!(report.held, 0, "b's notice puts nothing at risk: it is not held, it is dropped");
        assert_eq!(rig.aws.desired("b"), 3, "b's tags do not match --asg-tag-filter");
        assert!(rig.events.reasons_for("b1").is_empty());
        assert!(!rig.ledger.saved().covers(&"i-b1".into()));
    }

    #[tokio::test(start_paused = true)]
    async fn a_throttled_write_is_retried_and_boosts_once() {
        let rig = FakeRig::new(FakeAutoScaling::default().with_group("a", 3, 50).with_tag("a", "k", "v"));
        let mut s = scaler(&rig).await;
        s.start(&["k=v".parse().unwrap()]).await.unwrap();
        rebalance(&rig.cluster, "n1", "a");
        rig.aws.throttle_next(1);
        let err = s.tick().await.unwrap_err();
        assert!(matches!(&err, ScalerError::Raise(e) if e.category() == "throttled"), "{err}");
        assert!(rig.ledger.saved().records.is_empty());
        s.tick().await.unwrap();
        assert_eq!(rig.aws.desired("a"), 4);
        s.tick().await.unwrap();
        assert_eq!(rig.aws.desired("a"), 4, "boosted once");
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_that_applied_but_answered_an_error_is_not_boosted_again() {
        let rig = FakeRig::new(FakeAutoScaling::default().with_group("a", 3, 50));
        let mut s = scaler(&rig).await;
        rebalance(&rig.cluster, "n1", "a");
        rig.aws.apply_then_fail_next(1);
        let report = s.tick().await.unwrap();
        assert_eq!(report.raised, vec![(GroupName::from("a"), 3, 4)], "kept as written: {report:?}");
        assert_eq!(rig.aws.desired("a"), 4);
        assert_eq!(rig.ledger.saved().records.len(), 1, "the boost stays in the ledger");
        s.tick().await.unwrap();
        assert_eq!(rig.aws.desired("a"), 4, "never boosted twice");
    }

    #[tokio::test(start_paused = true)]
    async fn a_group_at_max_is_held_and_told_once() {
        let rig = FakeRig::new(FakeAutoScaling::default().with_group("a", 5, 5));
        let mut s = scaler(&rig).await;
        rebalance(&rig.cluster, "n1", "a");
        for _ in 0..3 {
            assert_eq!(s.tick().await.unwrap().held, 1);
        }
        assert!(raises(&rig.aws).is_empty());
        assert_eq!(rig.events.reasons_for("n1"), vec!["BoostHeld"]);
    }

    #[tokio::test(start_paused = true)]
    async fn nothing_is_decided_on_a_partial_view() {
        let rig = FakeRig { cluster: InMemoryCluster::default(), ..FakeRig::new(FakeAutoScaling::default()) };
        let mut s = scaler(&rig).await;
        assert!(matches!(s.tick().await, Err(ScalerError::NotSynced)));
        assert!(rig.aws.calls().is_empty());
    }
}
