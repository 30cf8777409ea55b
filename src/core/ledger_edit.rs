//! Changes to the boost ledger as values. The core decides them; the workers save them to the
//! ledger held when they save, which another replica's save, a conflict's re-read or a restart
//! may have changed since the plan. So an edit names its record by [`BoostId`], never by
//! position, and an opening is refused when a record already covers one of its instances: an
//! instance is never boosted twice, whatever happened between the plan and the save.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::model::{BoostExpiry, BoostLedger, BoostRecord, GroupName, InstanceId, MovedPart, NodeName, Timestamp};

/// Which boost a record is: its group, its at-risk instances and when it was decided. No two
/// records share one, and a plan made by any replica names the same boost the same way.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct BoostId {
    /// The boosted group.
    pub group: GroupName,
    /// The at-risk instances the boost replaces.
    pub instances: BTreeSet<InstanceId>,
    /// When the boost was decided.
    pub at: Timestamp,
}

impl BoostRecord {
    /// This record's identity.
    pub fn id(&self) -> BoostId {
        BoostId { group: self.group.clone(), instances: self.instances.clone(), at: self.at }
    }

    /// Whether this record is the boost `id` names.
    pub fn is(&self, id: &BoostId) -> bool {
        self.at == id.at && self.group == id.group && self.instances == id.instances
    }
}

impl BoostLedger {
    /// The record `id` names, if the ledger still holds it.
    pub(crate) fn find_mut(&mut self, id: &BoostId) -> Option<&mut BoostRecord> {
        self.records.iter_mut().find(|r| r.is(id))
    }
}

/// One change to the ledger.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LedgerEdit {
    /// A new boost, saved before its write (its `raising_to` marks the write unanswered).
    /// Refused when a record already covers one of its instances.
    Open(BoostRecord),
    /// AWS answered the boost's write: it applied.
    Confirm(BoostId),
    /// The boost's write was not made: the record goes, so its instances are planned again.
    Withdraw(BoostId),
    /// The boost stops waiting (the first reason given stays).
    Expire(BoostId, BoostExpiry),
    /// The boost is finished: its record goes, and the replacements it claimed are never claimed
    /// again.
    Close {
        /// The boost.
        id: BoostId,
        /// Its replacements.
        spent: Vec<NodeName>,
    },
    /// Replacements no longer remembered as spent: their nodes are gone.
    ForgetSpent(Vec<NodeName>),
    /// Some of the boost's nodes move to a fallback group, saved before the fallback's write.
    /// Refused unless the boost still has that many nodes and no unanswered write.
    Move(BoostId, MovedPart),
    /// The fallback's write applied.
    ConfirmMove {
        /// The boost.
        id: BoostId,
        /// The fallback group.
        to: GroupName,
        /// When the nodes moved.
        at: Timestamp,
    },
    /// The fallback's write was not made: the nodes are the boost's own again.
    UndoMove {
        /// The boost.
        id: BoostId,
        /// The fallback group.
        to: GroupName,
        /// When the nodes moved.
        at: Timestamp,
    },
}

impl LedgerEdit {
    /// The boost this edit is about, if one.
    pub fn boost(&self) -> Option<&BoostId> {
        match self {
            LedgerEdit::Open(_) | LedgerEdit::ForgetSpent(_) => None,
            LedgerEdit::Confirm(id)
            | LedgerEdit::Withdraw(id)
            | LedgerEdit::Expire(id, _)
            | LedgerEdit::Close { id, .. }
            | LedgerEdit::Move(id, _)
            | LedgerEdit::ConfirmMove { id, .. }
            | LedgerEdit::UndoMove { id, .. } => Some(id),
        }
    }

    /// Applies the edit to `ledger`. Returns whether it applied: `false` for a refused opening or
    /// move, or an edit whose record is no longer there.
    pub fn apply(&self, ledger: &mut BoostLedger) -> bool {
        match self {
            LedgerEdit::Open(record) => {
                if ledger.records.iter().any(|r| !r.instances.is_disjoint(&record.instances)) {
                    return false;
                }
                ledger.records.push(record.clone());
                true
            }
            LedgerEdit::Confirm(id) => ledger.find_mut(id).map(|r| r.raising_to = None).is_some(),
            LedgerEdit::Withdraw(id) | LedgerEdit::Close { id, .. } => {
                let Some(k) = ledger.records.iter().position(|r| r.is(id)) else { return false };
                ledger.records.remove(k);
                if let LedgerEdit::Close { spent, .. } = self {
                    ledger.spent.extend(spent.iter().cloned());
                }
                true
            }
            LedgerEdit::Expire(id, why) => ledger.find_mut(id).map(|r| r.expired.get_or_insert(*why)).is_some(),
            LedgerEdit::ForgetSpent(nodes) => {
                let before = ledger.spent.len();
                nodes.iter().for_each(|n| {
                    ledger.spent.remove(n);
                });
                ledger.spent.len() != before
            }
            LedgerEdit::Move(id, part) => {
                let Some(r) = ledger.find_mut(id) else { return false };
                if r.added.saturating_sub(r.returned) < part.added || r.unconfirmed().is_some() {
                    return false;
                }
                r.added -= part.added;
                r.moved.push(part.clone());
                true
            }
            LedgerEdit::ConfirmMove { id, to, at } => {
                let part = ledger.find_mut(id).and_then(|r| r.moved.iter_mut().find(|p| &p.group == to && p.at == *at));
                part.map(|p| p.raising_to = None).is_some()
            }
            LedgerEdit::UndoMove { id, to, at } => {
                let Some(r) = ledger.find_mut(id) else { return false };
                let Some(k) = r.moved.iter().position(|p| &p.group == to && p.at == *at) else { return false };
                r.added = r.added.saturating_add(r.moved.remove(k).added);
                true
            }
        }
    }

    /// The edit that takes this one back after its write was not made, for the edits saved
    /// before a write.
    pub fn undo(&self) -> Option<LedgerEdit> {
        match self {
            LedgerEdit::Open(record) => Some(LedgerEdit::Withdraw(record.id())),
            LedgerEdit::Move(id, part) => {
                Some(LedgerEdit::UndoMove { id: id.clone(), to: part.group.clone(), at: part.at })
            }
            _ => None,
        }
    }

    /// The edit that records AWS's answer to this one's write as applied, for the edits saved
    /// before a write.
    pub fn confirm(&self) -> Option<LedgerEdit> {
        match self {
            LedgerEdit::Open(record) => Some(LedgerEdit::Confirm(record.id())),
            LedgerEdit::Move(id, part) => {
                Some(LedgerEdit::ConfirmMove { id: id.clone(), to: part.group.clone(), at: part.at })
            }
            _ => None,
        }
    }
}

/// Applies `edits` in order; returns, for each, whether it applied.
pub fn apply_all(ledger: &mut BoostLedger, edits: &[LedgerEdit]) -> Vec<bool> {
    edits.iter().map(|e| e.apply(ledger)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ledger(records: &[BoostRecord]) -> BoostLedger {
        BoostLedger { records: records.to_vec(), ..BoostLedger::default() }
    }

    #[test]
    fn an_opening_is_refused_when_a_record_covers_one_of_its_instances() {
        let held = BoostRecord::test("a", &["i-1", "i-2"], 2, 1_000);
        let mut l = ledger(std::slice::from_ref(&held));
        assert!(!LedgerEdit::Open(BoostRecord::test("a", &["i-2", "i-3"], 2, 2_000)).apply(&mut l));
        assert!(LedgerEdit::Open(BoostRecord::test("a", &["i-3"], 1, 2_000)).apply(&mut l));
        assert_eq!(l.records.len(), 2);
    }

    #[test]
    fn an_edit_names_its_record_by_identity_not_position() {
        let (a, b) = (BoostRecord::test("a", &["i-1"], 1, 1_000), BoostRecord::test("a", &["i-2"], 1, 1_000));
        let mut l = ledger(&[a.clone(), b.clone()]);
        // Another replica's save dropped `a` and re-added it last.
        l.records.swap(0, 1);
        assert!(LedgerEdit::Expire(a.id(), BoostExpiry::MaxAge).apply(&mut l));
        assert_eq!(l.records[1].expired, Some(BoostExpiry::MaxAge));
        assert_eq!(l.records[0].expired, None);
        assert!(LedgerEdit::Close { id: b.id(), spent: vec!["n-1".into()] }.apply(&mut l));
        assert_eq!(l.records, vec![BoostRecord { expired: Some(BoostExpiry::MaxAge), ..a.clone() }]);
        assert!(l.spent.contains(&NodeName::from("n-1")));
        assert!(!LedgerEdit::Confirm(b.id()).apply(&mut l), "gone: nothing to confirm");
    }

    #[test]
    fn undo_takes_an_opening_or_a_move_back_and_confirm_clears_the_unanswered_write() {
        let record = BoostRecord { raising_to: Some(4), ..BoostRecord::test("a", &["i-1"], 3, 1_000) };
        let open = LedgerEdit::Open(record.clone());
        let mut l = BoostLedger::default();
        assert!(open.apply(&mut l));
        assert!(open.confirm().unwrap().apply(&mut l));
        assert_eq!(l.records[0].raising_to, None);
        let part = MovedPart {
            group: "b".into(),
            added: 2,
            at: Timestamp::from_millis(5_000),
            raising_to: Some(7),
            taken_back: false,
            lowering_to: None,
        };
        let moved = LedgerEdit::Move(record.id(), part);
        assert!(moved.apply(&mut l));
        assert_eq!((l.records[0].added, l.records[0].moved.len()), (1, 1));
        assert!(!LedgerEdit::Move(record.id(), l.records[0].moved[0].clone()).apply(&mut l), "one unanswered");
        assert!(moved.undo().unwrap().apply(&mut l));
        assert_eq!((l.records[0].added, l.records[0].moved.len()), (3, 0));
        assert!(open.undo().unwrap().apply(&mut l));
        assert!(l.records.is_empty());
    }
}
