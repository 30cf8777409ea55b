//! Terminations as the ledger sees them: what each one decides before its call (the instance
//! settled, the boost's return counted for a decrement) and what its answer edits after it.

use super::ledger_edit::{apply_all, LedgerEdit, Pending};
use super::model::{BoostLedger, InstanceId};

/// A drained instance about to be terminated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Termination {
    /// The instance.
    pub instance: InstanceId,
    /// Whether its drain was planned to end in a termination with decrement.
    pub decrement: bool,
    /// The instance AWS took first whose boosted node this termination gives back.
    pub gives_back: Option<InstanceId>,
}

/// What a termination does, as decided on the ledger held before the call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TerminationDecision {
    /// Terminate with decrement: its boost's return is already counted for it, or the boost is
    /// confirmed and has a node left to return.
    pub decrement: bool,
    /// An earlier call for it was never answered: an instance already gone was ours.
    pub retried: bool,
}

/// Decides each termination in order on `ledger` as it is held now, each seeing the returns the
/// ones before it counted, and returns the edits to save before the calls: the instance (and the
/// one it gives back for) settled, and the return counted for those that decrement.
pub fn decide_terminations(
    ledger: &BoostLedger,
    pending: &[Termination],
) -> (Vec<LedgerEdit>, Vec<TerminationDecision>) {
    let mut held = ledger.clone();
    let mut edits = Vec::new();
    let mut decisions = Vec::with_capacity(pending.len());
    for t in pending {
        let boosted = t.boosted();
        let decision = TerminationDecision {
            decrement: t.decrement && held.may_return(boosted, &t.instance),
            retried: held.is_returning(boosted, &t.instance),
        };
        let mut these = vec![LedgerEdit::Settle(t.instance.clone(), true)];
        these.extend(t.gives_back.iter().map(|r| LedgerEdit::Settle(r.clone(), true)));
        if decision.decrement {
            these.push(LedgerEdit::BeginReturn { boosted: boosted.clone(), terminated: t.instance.clone() });
        }
        apply_all(&mut held, &these);
        edits.extend(these);
        decisions.push(decision);
    }
    (edits, decisions)
}

/// What became of a termination whose intent [`decide_terminations`] saved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TerminationAnswer {
    /// AWS terminated it, decrementing desired capacity or not (an instance already gone after an
    /// earlier call whose answer was lost counts as ours, decremented).
    Terminated {
        /// Whether desired capacity went down with it.
        decremented: bool,
    },
    /// It was gone before the call: AWS took it first, so it gave nothing back.
    TakenFirst,
    /// Not made (refused before anything changed, or a dry run).
    NotMade,
    /// It may or may not have applied: the return stays counted and the call is made again.
    Unknown,
}

impl Termination {
    /// The instance whose boost the termination returns a node of.
    pub fn boosted(&self) -> &InstanceId {
        self.gives_back.as_ref().unwrap_or(&self.instance)
    }

    /// The edits that record `answer` to this termination's call: the return counted before it
    /// ends (kept only when desired capacity went down); an instance AWS took first is unsettled
    /// (it was not our departure, so the scaler may give its node back), and so is the one a
    /// give-back was for, which gave nothing back either; a give-back that ended, whichever way,
    /// is no longer in progress. Edits of one kind come before the next kind's across
    /// terminations (see [`answer_terminations`]).
    fn answered(&self, answer: TerminationAnswer) -> Vec<LedgerEdit> {
        let end = |decremented| LedgerEdit::Answer {
            write: Pending::Return { boosted: self.boosted().clone(), terminated: self.instance.clone() },
            applied: decremented,
        };
        let ended_give_back = self.gives_back.iter().map(|r| LedgerEdit::GiveBack { reclaimed: r.clone(), node: None });
        match answer {
            TerminationAnswer::Terminated { decremented } => {
                std::iter::once(end(decremented)).chain(ended_give_back).collect()
            }
            TerminationAnswer::TakenFirst => std::iter::once(end(false))
                .chain(std::iter::once(LedgerEdit::Settle(self.instance.clone(), false)))
                .chain(self.gives_back.iter().map(|r| LedgerEdit::Settle(r.clone(), false)))
                .chain(ended_give_back)
                .collect(),
            TerminationAnswer::NotMade => vec![end(false)],
            TerminationAnswer::Unknown => Vec::new(),
        }
    }
}

/// The edits that record the answers to terminations whose intents [`decide_terminations`]
/// saved: every return ended first, then every instance unsettled, then every give-back ended.
pub fn answer_terminations<'t>(
    answers: impl IntoIterator<Item = (&'t Termination, TerminationAnswer)>,
) -> Vec<LedgerEdit> {
    let rank = |e: &LedgerEdit| match e {
        LedgerEdit::Answer { write: Pending::Return { .. }, .. } => 0,
        LedgerEdit::Settle(_, false) => 1,
        _ => 2,
    };
    let mut edits: Vec<LedgerEdit> = answers.into_iter().flat_map(|(t, a)| t.answered(a)).collect();
    edits.sort_by_key(rank);
    edits
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::BoostRecord;

    fn ledger(records: &[BoostRecord]) -> BoostLedger {
        BoostLedger { records: records.to_vec(), ..BoostLedger::default() }
    }

    #[test]
    fn termination_answers_end_returns_first_unsettle_what_aws_took_and_leave_the_unknown_counted() {
        let t = |instance: &str, gives_back: Option<&str>| Termination {
            instance: instance.into(),
            decrement: true,
            gives_back: gives_back.map(Into::into),
        };
        let (own, give_back, unknown, refused) =
            (t("i-1", None), t("i-r", Some("i-2")), t("i-3", None), t("i-4", None));
        let edits = answer_terminations([
            (&give_back, TerminationAnswer::TakenFirst),
            (&own, TerminationAnswer::Terminated { decremented: true }),
            (&unknown, TerminationAnswer::Unknown),
            (&refused, TerminationAnswer::NotMade),
        ]);
        let end = |boosted: &str, terminated: &str, decremented| LedgerEdit::Answer {
            write: Pending::Return { boosted: boosted.into(), terminated: terminated.into() },
            applied: decremented,
        };
        assert_eq!(
            edits,
            [
                end("i-2", "i-r", false),
                end("i-1", "i-1", true),
                end("i-4", "i-4", false),
                LedgerEdit::Settle("i-r".into(), false),
                LedgerEdit::Settle("i-2".into(), false),
                LedgerEdit::GiveBack { reclaimed: "i-2".into(), node: None },
            ],
            "the unknown one keeps its return counted: its call is made again"
        );
    }

    #[test]
    fn terminations_decrement_only_for_nodes_the_boost_has_left_to_return_each_counted_once() {
        let record = BoostRecord::test("a", &["i-1", "i-2"], 1, 1_000);
        let mut l = ledger(std::slice::from_ref(&record));
        let t = |i: &str| Termination { instance: i.into(), decrement: true, gives_back: None };
        let (edits, decided) = decide_terminations(&l, &[t("i-1"), t("i-2")]);
        let d = |decrement, retried| TerminationDecision { decrement, retried };
        assert_eq!(decided, vec![d(true, false), d(false, false)], "one node added, one returned");
        apply_all(&mut l, &edits);
        assert_eq!((l.records[0].returned, l.records[0].settled.len()), (1, 2));
        // The first call's answer was lost: asked again, it still decrements, and is not counted twice.
        let (again, decided) = decide_terminations(&l, &[t("i-1")]);
        assert_eq!(decided, vec![d(true, true)]);
        apply_all(&mut l, &again);
        assert_eq!(l.records[0].returned, 1);
        // AWS answered without a decrement: the count is taken back.
        let end = LedgerEdit::Answer {
            write: Pending::Return { boosted: "i-1".into(), terminated: "i-1".into() },
            applied: false,
        };
        assert!(end.apply(&mut l));
        assert_eq!(l.records[0].returned, 0);
        // A boost whose write is unanswered returns nothing.
        let unanswered = ledger(&[BoostRecord { raising_to: Some(4), ..record }]);
        assert_eq!(decide_terminations(&unanswered, &[t("i-1")]).1, vec![d(false, false)]);
    }
}
