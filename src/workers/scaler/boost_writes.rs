//! A pass's boost writes, from the guarded `SetDesiredCapacity` calls to the ledger's answer. The
//! scaler's loop sends them apart from the pass that planned them ([`Flight`]), so the next pass
//! plans while AWS answers: a group whose burst ends during a slow write is written then, not
//! after it. The groups of writes in flight are planned again only once they land.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};

use super::error::ScalerError;
use super::guarded::{send_and_answer, Answered, Direction, LostAnswer};
use super::settings::Pacing;
use super::stages::Stages;
use super::Scaler;
use crate::core::{
    Boost, BoostLedger, BoostReason, GroupName, InstanceId, LedgerEdit, NodeName, ScalingPlan, Snapshot, Timestamp,
    WriteAnswer,
};
use crate::metrics::BoostOutcome;
use crate::ports::{AwsError, DesiredWrite, NodeEvent, WriteOutcome};
use crate::workers::{Ports, WorkerContext};

/// One boost whose record is saved, and what its write needs to be told and measured.
pub(super) struct BoostWrite {
    pub(super) boost: Boost,
    /// The edit that opened its record (answered by its confirmation or its undoing).
    pub(super) open: LedgerEdit,
    /// The Nodes of its at-risk instances, told of the write.
    pub(super) nodes: Vec<NodeName>,
    /// When each of its instances was first seen at risk, for the reaction histogram.
    pub(super) seen: Vec<Timestamp>,
}

/// What AWS answered to a pass's boost writes.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Landed {
    /// `(group, from, to)` of every write that applied (or would have, in dry run).
    pub(super) raised: Vec<(GroupName, u32, u32)>,
    /// Groups whose write lost a race; re-planned.
    pub(super) raced: Vec<GroupName>,
    /// Groups whose write failed, with the error category.
    pub(super) failed: Vec<(GroupName, &'static str)>,
}

/// Boost writes sent from the scaler's loop and not answered yet.
pub(super) struct Flight {
    groups: BTreeSet<GroupName>,
    /// [`FLYING`], [`WANTED`] (a pass ran while they flew and left something for after their
    /// answer) or [`LANDED`]: one word, so a pass asking for a wake-up and the task ending never
    /// miss each other.
    state: Arc<AtomicU8>,
    task: JoinHandle<()>,
}

const FLYING: u8 = 0;
const WANTED: u8 = 1;
const LANDED: u8 = 2;

impl Flight {
    /// Sends `writes` on their own task. Once they are answered it wakes the scaler when a write
    /// raced, when a group raised is in `replan_once_raised` (failing for want of capacity: its
    /// nodes move to a fallback at once), or when a pass waited for them ([`Flight::want`]); not
    /// merely because a write failed, which would retry it in a loop.
    pub(super) fn send<P: Ports>(
        ctx: Arc<WorkerContext<P>>,
        writes: Vec<BoostWrite>,
        replan_once_raised: BTreeSet<GroupName>,
        stages: Stages,
        wake: Arc<Notify>,
    ) -> Flight {
        let groups = writes.iter().map(|w| w.boost.group.clone()).collect();
        let state = Arc::new(AtomicU8::new(FLYING));
        let task = {
            let state = state.clone();
            tokio::spawn(async move {
                let again = match write_and_answer(&ctx, writes, stages).await {
                    Ok(landed) => {
                        !landed.raced.is_empty() || landed.raised.iter().any(|(g, ..)| replan_once_raised.contains(g))
                    }
                    Err(e) => {
                        crate::workers::report_failed_pass("scaler", &ctx.metrics, &e);
                        false
                    }
                };
                if state.swap(LANDED, Ordering::AcqRel) == WANTED || again {
                    wake.notify_one();
                }
            })
        };
        Flight { groups, state, task }
    }

    /// Asks for a pass once its writes are answered; false when they already are (no pass
    /// follows for this asking, and its groups are free to plan).
    pub(super) fn want(&self) -> bool {
        match self.state.compare_exchange(FLYING, WANTED, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => true,
            Err(state) => state == WANTED,
        }
    }

    /// Whether its writes are answered (or its task ended otherwise).
    pub(super) fn landed(&self) -> bool {
        self.state.load(Ordering::Acquire) == LANDED || self.task.is_finished()
    }

    /// The groups it writes.
    pub(super) fn groups(&self) -> &BTreeSet<GroupName> {
        &self.groups
    }

    /// Waits for it to land.
    pub(super) async fn land(self) {
        if let Err(e) = self.task.await {
            warn!(error = %e, "a boost write's task ended without its answer; its groups are resolved from a read");
        }
    }
}

/// Sends one guarded write per boost (concurrently, after one read of their groups), and has
/// AWS's answers recorded ([`send_and_answer`]): applied writes are confirmed, raced and failed
/// ones taken back so their instances are planned again, and an error that may have applied is
/// settled by a read of the group, or left for `core::raises` when the read cannot tell. Tells
/// each boost's Nodes.
pub(super) async fn write_and_answer<P: Ports>(
    ctx: &WorkerContext<P>,
    writes: Vec<BoostWrite>,
    mut stages: Stages,
) -> Result<Landed, ScalerError> {
    let mut landed = Landed::default();
    if writes.is_empty() {
        return Ok(landed);
    }
    let requests: Vec<DesiredWrite> = writes
        .iter()
        .map(|w| DesiredWrite { group: w.boost.group.clone(), expected: w.boost.from, to: w.boost.to })
        .collect();
    let intents: Vec<&LedgerEdit> = writes.iter().map(|w| &w.open).collect();
    let mut issued = None;
    let tell = |i: usize, a: &Answered| -> Vec<NodeEvent> {
        let issued = *issued.get_or_insert_with(|| {
            stages.mark("write");
            (ctx.clock)()
        });
        tell_answer(ctx, &writes[i], a, issued, &mut landed)
    };
    match send_and_answer(ctx, (&intents, &requests), (Direction::Raise, LostAnswer::ReadNow), tell).await {
        Ok(_) => {}
        Err(e) => {
            // Nothing was written: the guard's re-read failed, or the lease went since the
            // ledger was saved. Then the withdrawal is not saved either, and the next leader
            // resolves the unanswered records from their groups (`core::raises`).
            let lease = matches!(e, ScalerError::Raise(AwsError::NotLeader { .. }));
            let outcome = if lease { BoostOutcome::NotLeader } else { BoostOutcome::Failed };
            for w in &writes {
                ctx.metrics.scaler.boost(w.boost.group.as_str(), outcome);
            }
            return Err(e);
        }
    }
    stages.report(&ctx.metrics, &landed.raised);
    Ok(landed)
}

/// Logs, counts and tells what became of one boost's write; returns the Events for its Nodes.
fn tell_answer<P: Ports>(
    ctx: &WorkerContext<P>,
    w: &BoostWrite,
    a: &Answered,
    issued: Timestamp,
    landed: &mut Landed,
) -> Vec<NodeEvent> {
    let (boost, group) = (&w.boost, a.group.clone());
    match (&a.outcome, a.answer) {
        (Ok(outcome @ (WriteOutcome::Written { from, to } | WriteOutcome::DryRun { from, to })), _) => {
            let (from, to) = (*from, *to);
            info!(%group, from, to, instances = boost.record.instances.len(), reason = %boost.reason, "boosted");
            ctx.metrics.scaler.desired(group.as_str(), to);
            let dry = matches!(outcome, WriteOutcome::DryRun { .. });
            ctx.metrics.scaler.boost(group.as_str(), if dry { BoostOutcome::DryRun } else { BoostOutcome::Written });
            if let (BoostReason::AheadOfPool { .. }, false) = (&boost.reason, dry) {
                ctx.metrics.scaler.boosted_ahead(group.as_str(), to.saturating_sub(from));
            }
            for seen in &w.seen {
                let reaction = issued.since(*seen);
                ctx.metrics.scaler.observe_reaction(reaction);
                debug!(%group, reaction_ms = reaction.as_millis(), "signal → write");
            }
            landed.raised.push((group, from, to));
            w.nodes.iter().map(|node| NodeEvent::boost_requested(node, boost, (from, to), dry)).collect()
        }
        (Ok(WriteOutcome::Raced { live }), _) => {
            info!(%group, planned_from = boost.from, live, "desired capacity changed since the plan; re-planning");
            ctx.metrics.scaler.boost(group.as_str(), BoostOutcome::Raced);
            landed.raced.push(group);
            Vec::new()
        }
        (Err(e), WriteAnswer::Unknown) => {
            warn!(%group, error = %e, "SetDesiredCapacity's outcome is unknown; resolved from the group before anything else is written");
            ctx.metrics.scaler.boost(group.as_str(), BoostOutcome::Failed);
            landed.failed.push((group, e.category()));
            Vec::new()
        }
        (Err(e), _) => {
            warn!(%group, error = %e, category = e.category(), "boost not written");
            ctx.metrics.scaler.boost(group.as_str(), BoostOutcome::Failed);
            landed.failed.push((group, e.category()));
            Vec::new()
        }
    }
}

/// How long the scaler's loop waits for writes in flight when it stops: long enough for an AWS
/// answer and a ledger save, so a restart finds them answered rather than resolving them by a read.
pub(super) const LANDING_ON_SHUTDOWN: Duration = Duration::from_secs(10);

impl<P: Ports> Scaler<P> {
    /// Saves the boosts' records (and the plan's closes) in the ledger held now, and returns the
    /// writes of those it opened: the drainer may have noted returns, settlements or an
    /// operator's uncordon since the plan, and a record covering one of a boost's instances
    /// refuses its opening.
    pub(super) async fn open_boosts(
        &self,
        snapshot: &Snapshot,
        first_seen: &BTreeMap<InstanceId, Timestamp>,
        boosts: &[Boost],
        closes: &[LedgerEdit],
    ) -> Result<Vec<BoostWrite>, ScalerError> {
        let ctx = &self.ctx;
        let opens: Vec<LedgerEdit> = boosts.iter().map(|b| LedgerEdit::Open(b.record.clone())).collect();
        let edits: Vec<LedgerEdit> = closes.iter().chain(&opens).cloned().collect();
        let opened = ctx.executor().save(&edits).await?.split_off(closes.len());
        let mut writes = Vec::new();
        for ((boost, open), opened) in boosts.iter().zip(opens).zip(opened) {
            if !opened {
                warn!(group = %boost.group, instances = boost.record.instances.len(), "a boost's instances are already covered by the ledger held now; not written");
                ctx.metrics.scaler.boost(boost.group.as_str(), BoostOutcome::Covered);
            } else if !boost.writes() {
                ctx.metrics.scaler.boost(boost.group.as_str(), BoostOutcome::NoNodeNeeded);
            } else {
                let instances: Vec<&InstanceId> = boost.record.instances.iter().collect();
                writes.push(BoostWrite {
                    nodes: Self::nodes_of(snapshot, &instances).into_iter().map(|n| n.name.clone()).collect(),
                    seen: instances.iter().filter_map(|i| first_seen.get(*i)).copied().collect(),
                    boost: boost.clone(),
                    open,
                });
            }
        }
        Ok(writes)
    }

    /// Records the answers of the flights that landed (all of them, waiting, when `pacing` is
    /// `Now`) and returns the groups of those still wanting an answer. Whatever this pass leaves
    /// for them (boosts of their groups, give-backs, expiries, fallbacks, take-backs, lost
    /// answers) is planned once they land; one that landed since is not in flight.
    pub(super) async fn land(&mut self, pacing: Pacing) -> BTreeSet<GroupName> {
        if pacing == Pacing::Now {
            self.land_all().await;
        }
        let (landed, flying): (Vec<Flight>, Vec<Flight>) =
            std::mem::take(&mut self.flights).into_iter().partition(Flight::landed);
        self.flights = flying;
        for flight in landed {
            flight.land().await;
        }
        self.flights.iter().filter(|f| f.want()).flat_map(|f| f.groups().iter().cloned()).collect()
    }
}

impl<P: Ports> Scaler<P> {
    /// Whether `plan` asks for more than boosts and closes of records outside `flying`.
    pub(super) fn beyond_boosts(plan: &ScalingPlan, ledger: &BoostLedger, flying: &BTreeSet<GroupName>) -> bool {
        let in_flight =
            |id: &crate::core::BoostId| ledger.records.iter().any(|r| r.id() == *id && flying.contains(&r.group));
        !plan.give_backs.is_empty()
            || !plan.expired.is_empty()
            || !plan.fallbacks.is_empty()
            || !plan.exhausted.is_empty()
            || plan.closes.iter().any(|c| matches!(c, LedgerEdit::Close { id, .. } if in_flight(id)))
    }
}
