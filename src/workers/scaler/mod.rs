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
use tracing::{debug_span, warn, Instrument};

mod boost_writes;
mod error;
mod execute;
mod guarded;
mod market;
mod settings;
mod stages;
mod tell;

use super::told_once::ToldOnce;
pub use super::{system_clock, Clock};
use super::{Observation, Ports, WorkerContext};
use crate::core::pool_memory::sightings;
use crate::core::{
    plan_scaling, Acting, BoostPlan, BurstTimes, GroupName, InstanceId, ScalingPlan, Snapshot, Timestamp, WavePace,
};
use crate::ports::TagFilter;
use crate::supervise::{Heartbeat, Heartbeats, WORKER_SILENCE_LIMIT};
use boost_writes::{write_and_answer, Flight, Landed, LANDING_ON_SHUTDOWN};
pub use error::ScalerError;
use settings::Pacing;
pub use settings::{ScalerSettings, TickReport};
use stages::Stages;

/// The scaler worker.
pub struct Scaler<P: Ports> {
    ctx: Arc<WorkerContext<P>>,
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
    /// How far apart the last wave's nodes came, for pacing the next.
    pace: WavePace,
    heartbeat: Option<Heartbeat>,
    /// When boost node-seconds were last counted.
    market_counted_at: Option<Timestamp>,
    /// The conversion estimates were reported since this replica leads: after that, only when
    /// something was learnt.
    conversions_reported: bool,
}

impl<P: Ports> Scaler<P> {
    /// A scaler over the shared context.
    pub fn new(ctx: Arc<WorkerContext<P>>, settings: ScalerSettings) -> Self {
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
            pace: WavePace::default(),
            heartbeat: None,
            market_counted_at: None,
            conversions_reported: false,
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

    /// Waits for a burst of wake-ups to pause: until no wake-up came for `coalesce_quiet`, or
    /// `settle_max` passed.
    async fn settle(&self) {
        super::settle(&self.wake, self.settings.coalesce_quiet, self.settings.settle_max).await;
    }

    /// One planning pass and all its writes.
    pub async fn tick(&mut self) -> Result<TickReport, ScalerError> {
        self.pass(Pacing::Now).await
    }

    /// One planning pass and the writes `pacing` lets through now: observe, plan (one core call),
    /// carry the plan out, report.
    async fn pass(&mut self, pacing: Pacing) -> Result<TickReport, ScalerError> {
        let mut stages = Stages::start();
        let ctx = self.ctx.clone();
        let leading = self.lead().await?;
        let flying = self.land(pacing).await;
        if !self.unknown_outcomes_resolved(leading, &flying).await? {
            return Ok(TickReport::default());
        }
        let now = (ctx.clock)();
        let Observation { mut snapshot, first_seen, .. } =
            ctx.observe(false).await.map_err(ScalerError::Describe)?.ok_or(ScalerError::NotSynced)?;
        let memory = ctx.ledger.pools().await;
        snapshot.market = memory.histories(&ctx.policy.memory, now);
        stages.mark("observe");
        self.report_view(leading, &snapshot, now);
        let acting = if leading { Acting::Leader } else { Acting::Follower };
        let plan = plan_scaling(&snapshot, &ctx.policy, now, acting);
        stages.mark("plan");
        self.count_untrusted(&plan.at_risk);
        if !leading {
            self.market_counted_at = None;
            self.conversions_reported = false;
            return Ok(self.follow(&plan));
        }
        // Learnt once the pass has acted: the boosts' writes come first.
        let seen = sightings(&snapshot, &plan.at_risk, &memory);
        let choices = plan.rebalance_choices.clone();
        let acted = self.act(&snapshot, plan, (&first_seen, &flying), pacing, stages, now).await;
        self.learn_market(&snapshot, &seen, &choices, now).await;
        acted
    }

    /// The leader's part of a pass, once planned: the ledger changes, the boosts' records and
    /// writes, and the readmissions of lapsed nodes.
    async fn act(
        &mut self,
        snapshot: &Snapshot,
        plan: ScalingPlan,
        (first_seen, flying): (&BTreeMap<InstanceId, Timestamp>, &BTreeSet<GroupName>),
        pacing: Pacing,
        mut stages: Stages,
        now: Timestamp,
    ) -> Result<TickReport, ScalerError> {
        let ctx = self.ctx.clone();
        if !flying.is_empty() && Self::beyond_boosts(&plan, &snapshot.ledger, flying) {
            // Give-backs, expiries and fallbacks change the ledger the boosts were planned on,
            // and may touch the groups in flight: all wait for the landing, which wakes the loop.
            return Ok(TickReport::default());
        }
        let mut report = self.carry_out_ledger_changes(snapshot, &plan, flying).await?;
        let ScalingPlan {
            closes,
            boosts: BoostPlan { mut boosts, .. },
            at_risk,
            replan_once_raised,
            readmit: plan_readmit,
            back_to_spot,
            returned_to_spot,
            ..
        } = plan;
        if pacing == Pacing::PerGroup {
            report.settling =
                self.pace.hold_back_settling(&mut boosts, &at_risk, first_seen, now, &self.settings.burst());
        }
        // A group's next write waits for its last one's answer: planned from the size before it,
        // it would undo it. Its landing wakes the loop.
        boosts.retain(|b| !flying.contains(&b.group));
        let writes = self.open_boosts(snapshot, first_seen, &boosts, &closes).await?;
        stages.mark("ledger-save");
        self.tell_back_to_spot(&back_to_spot, &returned_to_spot, now).await;
        if !back_to_spot.begun.is_empty() {
            // A return's node is at risk from now: its boost is planned at once.
            self.wake.notify_one();
        }
        self.readmit(&plan_readmit).await;
        if writes.is_empty() {
            return Ok(report);
        }
        let replan: BTreeSet<GroupName> =
            writes.iter().map(|w| &w.boost.group).filter(|g| replan_once_raised.contains(*g)).cloned().collect();
        if pacing == Pacing::Now {
            let Landed { raised, raced, failed } = write_and_answer(&ctx, writes, stages).await?;
            if raised.iter().any(|(g, ..)| replan.contains(g)) {
                self.wake.notify_one();
            }
            report.raised = raised;
            report.raced = raced;
            report.failed.extend(failed);
        } else {
            self.flights.push(Flight::send(ctx.clone(), writes, replan, stages, self.wake.clone()));
        }
        Ok(report)
    }

    /// Whether this replica leads, reloading the ledger first when it follows (its copy is stale)
    /// or has just become the leader (it must see what the last one saved).
    async fn lead(&mut self) -> Result<bool, ScalerError> {
        let leading = self.ctx.leadership.is_leader();
        if !leading || !self.was_leader {
            self.ctx.ledger.reload().await?;
        }
        if leading && !self.was_leader {
            self.ctx.ledger.reload_pools().await;
        }
        self.was_leader = leading;
        Ok(leading)
    }
}

impl<P: Ports> super::Worker for Scaler<P> {
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
mod tests;
