//! The one protocol of every write the scaler makes to desired capacity — a boost's raise, a
//! fallback's raise, a take-back's lowering: its intent is in the ledger before the write is
//! sent, and AWS's answer is recorded after it through [`LedgerEdit::answered`]. An answer that
//! may have applied is either settled at once by a read of the group or left unanswered for the
//! next pass to resolve by one (`core::raises`); it is never guessed.

use tracing::warn;

use super::ScalerError;
use crate::core::{GroupName, LedgerEdit, WriteAnswer};
use crate::ports::{AutoScaling, AwsError, DesiredWrite, NodeEvent, WriteOutcome};
pub(super) use crate::workers::execute::Direction;
use crate::workers::{publish_all, Ports, WorkerContext};

/// What to do with an answer that may have applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum LostAnswer {
    /// Read the group now: its desired capacity tells whether the write applied.
    ReadNow,
    /// Leave the intent unanswered: the next pass reads the group before anything is written.
    ResolveNextPass,
}

/// One write and what became of it.
pub(super) struct Answered {
    /// The group written.
    pub(super) group: GroupName,
    /// AWS's answer (an error settled by a read counts as written).
    pub(super) outcome: Result<WriteOutcome, AwsError>,
    /// What the ledger records of it.
    pub(super) answer: WriteAnswer,
}

/// Sends `writes`, whose intents (`intents`, one per write, in order) the ledger holds, then
/// records each answer in the ledger while the Events `tell` makes of them are published. A batch
/// that fails as a whole was not sent (the guard's read failed, or the lease went): every intent
/// is taken back and the error returned.
pub(super) async fn send_and_answer<P: Ports>(
    ctx: &WorkerContext<P>,
    (intents, writes): (&[&LedgerEdit], &[DesiredWrite]),
    (direction, lost): (Direction, LostAnswer),
    mut tell: impl FnMut(usize, &Answered) -> Vec<NodeEvent>,
) -> Result<Vec<Answered>, ScalerError> {
    let sent = ctx.executor().set_desired(direction, writes).await;
    let outcomes = match sent {
        Ok(outcomes) => outcomes,
        Err(e) => {
            record(ctx, intents.iter().map(|i| i.answered(WriteAnswer::NotMade)), Vec::new()).await?;
            return Err(ScalerError::Raise(e));
        }
    };
    let mut answered = Vec::with_capacity(outcomes.len());
    let mut told = Vec::new();
    for (i, (group, outcome)) in outcomes.into_iter().enumerate() {
        let (outcome, answer) = match outcome {
            Ok(o @ (WriteOutcome::Written { to, .. } | WriteOutcome::DryRun { to, .. })) => {
                ctx.groups.note_desired(&group, to).await;
                (Ok(o), WriteAnswer::Applied)
            }
            Ok(WriteOutcome::Raced { live }) => {
                ctx.groups.note_desired(&group, live).await;
                (Ok(WriteOutcome::Raced { live }), WriteAnswer::NotMade)
            }
            Err(e) if e.may_have_applied() && lost == LostAnswer::ReadNow => {
                match read_back(ctx, &writes[i], direction).await {
                    Some(true) => {
                        warn!(%group, error = %e, "the write failed but the group shows it applied; kept as written");
                        let to = writes[i].to;
                        ctx.groups.note_desired(&group, to).await;
                        (Ok(WriteOutcome::Written { from: writes[i].expected, to }), WriteAnswer::Applied)
                    }
                    Some(false) => (Err(e), WriteAnswer::NotMade),
                    None => (Err(e), WriteAnswer::Unknown),
                }
            }
            Err(e) if e.may_have_applied() => (Err(e), WriteAnswer::Unknown),
            Err(e) => {
                if matches!(e, AwsError::UnknownGroup(_)) {
                    ctx.groups.invalidate(&group).await;
                }
                (Err(e), WriteAnswer::NotMade)
            }
        };
        let a = Answered { group, outcome, answer };
        told.extend(tell(i, &a));
        answered.push(a);
    }
    let edits = intents.iter().zip(&answered).map(|(intent, a)| intent.answered(a.answer));
    record(ctx, edits, told).await?;
    Ok(answered)
}

/// Saves the answers' edits, publishing `told` meanwhile: both before the groups are planned
/// again, neither waiting for the other.
async fn record<P: Ports>(
    ctx: &WorkerContext<P>,
    edits: impl Iterator<Item = Option<LedgerEdit>>,
    told: Vec<NodeEvent>,
) -> Result<(), ScalerError> {
    let edits: Vec<LedgerEdit> = edits.flatten().collect();
    let save = async {
        if edits.is_empty() {
            return Ok(());
        }
        ctx.executor().save(&edits).await.map(|_| ())
    };
    let (_, saved) = tokio::join!(publish_all(&ctx.events, told), save);
    Ok(saved?)
}

/// Re-reads `write`'s group after an answer that may have applied: `Some(true)` when its desired
/// capacity shows the write went through, `Some(false)` when it shows it did not, `None` when
/// the read failed or shows neither (gone, or moved by someone else too: resolved like a crash,
/// from the next read). Re-planning from a raised value would boost the same instances twice;
/// keeping a write that never applied would give back capacity never added.
async fn read_back<P: Ports>(ctx: &WorkerContext<P>, write: &DesiredWrite, direction: Direction) -> Option<bool> {
    ctx.groups.invalidate(&write.group).await;
    let live = ctx.aws.describe_groups(std::slice::from_ref(&write.group)).await.ok()?.first()?.desired;
    let (applied, not_made) = match direction {
        Direction::Raise => (live >= write.to, live <= write.expected),
        Direction::LowerUnlaunched => (live <= write.to, live >= write.expected),
    };
    match (applied, not_made) {
        (true, _) => Some(true),
        (_, true) => Some(false),
        _ => None,
    }
}
