//! Boosts whose write's outcome is unknown. The ledger records a boost, with the desired capacity
//! it asks for (`raising_to`), before the `SetDesiredCapacity` call, and clears it once AWS
//! answers. A record still carrying it was saved but its write may or may not have applied: the
//! daemon crashed between the two, AWS's answer was lost and the re-read failed, or the ledger
//! save applied though its answer was an error. Planning from it either way breaks a guarantee:
//! taken as applied when it was not, drains decrement against capacity never added (the group
//! ends smaller than before the boost); taken as not applied when it was, its instances are
//! boosted twice. So it is resolved from the group's desired capacity, read afresh, before
//! anything else is written.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::ledger_edit::LedgerEdit;
use super::ledger_edit::Pending;
use super::model::{BoostLedger, GroupName, InstanceId};

/// What reading its group told of one boost whose write's answer never came.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResolvedRaise {
    /// The group.
    pub group: GroupName,
    /// The boost's at-risk instances.
    pub instances: BTreeSet<InstanceId>,
    /// The desired capacity the write asked for.
    pub asked: u32,
    /// The group's desired capacity as read (`None`: the group no longer exists).
    pub live: Option<u32>,
    /// Nodes of the boost the group shows, now confirmed; 0: the record was dropped and its
    /// instances are planned again.
    pub kept: u32,
}

/// The groups whose desired capacity must be read before anything is written.
pub fn unresolved_groups(ledger: &BoostLedger) -> BTreeSet<GroupName> {
    let own = ledger.records.iter().filter(|r| r.raising_to.is_some()).map(|r| r.group.clone());
    let moved =
        ledger.records.iter().flat_map(|r| &r.moved).filter(|p| p.raising_to.is_some()).map(|p| p.group.clone());
    let lowered = ledger
        .records
        .iter()
        .flat_map(|r| r.moved.iter().filter(|p| p.lowering_to.is_some()).filter_map(|p| r.left_group(p).cloned()));
    own.chain(moved).chain(lowered).collect()
}

/// Resolves every boost whose write's outcome is unknown, from `live` (desired capacity of each
/// group just read; a group absent from it no longer exists). The part of the raise the group
/// shows is kept: all of it when desired reached what was asked, none when desired is at most
/// what the group had without it (the record is dropped and its instances planned again), and in
/// between the part above that (the rest was never added, or someone else lowered it since:
/// either way it is not there to give back). Returns the edits that resolve them, to apply in
/// order, and what each raise came to.
pub fn resolve_raises(ledger: &BoostLedger, live: &BTreeMap<GroupName, u32>) -> (Vec<LedgerEdit>, Vec<ResolvedRaise>) {
    let mut edits = Vec::new();
    let mut resolved = Vec::new();
    let mut tell = |group: &GroupName, instances: &BTreeSet<InstanceId>, asked: u32, added: u32| {
        let desired = live.get(group).copied();
        let without = asked.saturating_sub(added);
        let kept = desired.map_or(0, |d| d.saturating_sub(without).min(added));
        resolved.push(ResolvedRaise { group: group.clone(), instances: instances.clone(), asked, live: desired, kept });
        kept
    };
    for r in &ledger.records {
        let id = r.id();
        // A lowering of the group nodes left applied when desired is at most what it asked for;
        // else it is planned again (its guard re-reads).
        for part in &r.moved {
            if let Some(asked) = part.lowering_to {
                let desired = r.left_group(part).and_then(|g| live.get(g).copied());
                let lowered = desired.is_none_or(|d| d <= asked);
                edits.push(LedgerEdit::Answer {
                    write: Pending::Lower { id: id.clone(), moved_at: part.at },
                    applied: lowered,
                });
            }
        }
        // Moves to a fallback first: what did not apply goes back to the boost's own group.
        let mut added = r.added;
        for part in &r.moved {
            let Some(asked) = part.raising_to else { continue };
            let kept = tell(&part.group, &r.instances, asked, part.added);
            added = added.saturating_add(part.added - kept);
            edits.push(LedgerEdit::Resolve {
                write: Pending::Move { id: id.clone(), to: part.group.clone(), at: part.at },
                kept,
            });
        }
        if let Some(asked) = r.raising_to {
            let kept = tell(&r.group, &r.instances, asked, added);
            edits.push(LedgerEdit::Resolve { write: Pending::Raise(id), kept });
        }
    }
    (edits, resolved)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::model::BoostRecord;

    fn pending(added: u32, asked: u32) -> BoostLedger {
        let mut record = BoostRecord::test("a", &["i-1", "i-2"], added, 0);
        record.raising_to = Some(asked);
        BoostLedger { records: vec![record, BoostRecord::test("b", &["i-3"], 1, 0)], ..Default::default() }
    }

    /// Resolves `ledger` in place, as the scaler does: the edits applied in order.
    fn resolve(ledger: &mut BoostLedger, live: &BTreeMap<GroupName, u32>) -> Vec<ResolvedRaise> {
        let (edits, resolved) = resolve_raises(ledger, live);
        assert!(edits.iter().all(|e| e.apply(ledger)), "every edit applies to the ledger it came from");
        resolved
    }

    fn live(desired: u32) -> BTreeMap<GroupName, u32> {
        BTreeMap::from([(GroupName::from("a"), desired), (GroupName::from("b"), 9)])
    }

    #[test]
    fn a_raise_the_group_shows_is_confirmed_and_one_it_does_not_is_dropped_to_be_planned_again() {
        let mut ledger = pending(2, 7);
        assert_eq!(unresolved_groups(&ledger), BTreeSet::from([GroupName::from("a")]));
        let resolved = resolve(&mut ledger, &live(7));
        assert_eq!(resolved.iter().map(|r| r.kept).collect::<Vec<_>>(), vec![2]);
        assert_eq!((ledger.records[0].added, ledger.records[0].raising_to), (2, None));
        assert!(unresolved_groups(&ledger).is_empty());

        let mut ledger = pending(2, 7);
        let resolved = resolve(&mut ledger, &live(5));
        assert_eq!(resolved[0].kept, 0, "desired is what it was without the boost: never applied");
        assert_eq!(ledger.records.len(), 1, "dropped; the other group's record is untouched");
        assert_eq!(ledger.records[0].group, GroupName::from("b"));
    }

    #[test]
    fn only_the_part_of_a_raise_the_group_shows_can_be_given_back() {
        let mut ledger = pending(3, 8);
        let resolved = resolve(&mut ledger, &live(6));
        assert_eq!((resolved[0].kept, ledger.records[0].added), (1, 1));

        let mut ledger = pending(3, 8);
        resolve(&mut ledger, &live(12));
        assert_eq!(ledger.records[0].added, 3, "raised further by someone else: all of ours is there");

        let mut ledger = pending(3, 8);
        let resolved = resolve(&mut ledger, &BTreeMap::new());
        assert_eq!((resolved.len(), resolved[0].live, ledger.records.len()), (1, None, 1), "group a is gone");
    }

    #[test]
    fn a_lowering_whose_answer_was_lost_is_resolved_from_the_group() {
        use crate::core::model::{MovedPart, Timestamp};
        let moved = |lowering_to| MovedPart {
            group: "b".into(),
            added: 2,
            at: Timestamp::from_millis(5),
            raising_to: None,
            taken_back: false,
            lowering_to,
            from: None,
            parked: None,
        };
        let mut ledger = pending(0, 0);
        ledger.records[0].raising_to = None;
        ledger.records[0].moved.push(moved(Some(3)));
        assert_eq!(unresolved_groups(&ledger), BTreeSet::from([GroupName::from("a")]));
        resolve(&mut ledger, &live(3));
        assert!(ledger.records[0].moved[0].taken_back, "desired is what the lowering asked: it applied");

        let mut ledger = pending(0, 0);
        ledger.records[0].raising_to = None;
        ledger.records[0].moved.push(moved(Some(3)));
        resolve(&mut ledger, &live(5));
        let part = &ledger.records[0].moved[0];
        assert!(!part.taken_back && part.lowering_to.is_none(), "not applied: planned again, never twice");

        // Nodes that moved on from b: b is the group lowered, and the one read.
        let mut ledger = pending(0, 0);
        ledger.records[0].raising_to = None;
        ledger.records[0].moved.push(MovedPart { taken_back: true, ..moved(None) });
        ledger.records[0].moved.push(MovedPart {
            group: "c".into(),
            at: Timestamp::from_millis(6),
            from: Some(Timestamp::from_millis(5)),
            ..moved(Some(7))
        });
        assert_eq!(unresolved_groups(&ledger), BTreeSet::from([GroupName::from("b")]));
        resolve(&mut ledger, &BTreeMap::from([(GroupName::from("a"), 1), (GroupName::from("b"), 7)]));
        assert!(ledger.records[0].moved[1].taken_back, "b shows what the lowering asked");
    }
}
