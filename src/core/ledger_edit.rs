//! Changes to the boost ledger as values. The core decides them; the workers save them to the
//! ledger held when they save, which another replica's save, a conflict's re-read or a restart
//! may have changed since the plan. So an edit names its record by [`BoostId`], never by
//! position, and an opening is refused when a record already covers one of its instances: an
//! instance is never boosted twice, whatever happened between the plan and the save.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::model::{
    BoostExpiry, BoostLedger, BoostRecord, GiveBackNode, GroupName, InstanceId, MovedPart, NodeName, OnFallback,
    Returning, Timestamp,
};

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

impl BoostRecord {
    /// Gives `nodes` of a move that never applied back to where they moved from: the boost's
    /// own count, or the earlier part (`from`) they moved on from.
    fn return_nodes(&mut self, from: Option<Timestamp>, nodes: u32) {
        match from.and_then(|at| self.moved.iter_mut().find(|p| p.at == at)) {
            Some(source) => source.added = source.added.saturating_add(nodes),
            None => self.added = self.added.saturating_add(nodes),
        }
    }
}

impl BoostLedger {
    /// What closing `record` leaves on fallbacks: the nodes it asked of them stay there, counted
    /// against its own group until returned; a return that closes takes the nodes it gave back
    /// off its fallback's count.
    fn close_on_fallback(&mut self, record: &BoostRecord) {
        let returned: Vec<Returning> = record.instances.iter().filter_map(|i| self.returning.remove(i)).collect();
        if let Some(r) = returned.first() {
            let given_back = record.returned;
            if let Some(k) = self.on_fallback.iter().position(|f| f.home == r.home && f.group == r.from) {
                let left = self.on_fallback[k].nodes.saturating_sub(given_back);
                if left == 0 {
                    self.on_fallback.remove(k);
                } else {
                    self.on_fallback[k].nodes = left;
                }
            }
            return;
        }
        for part in record.moved.iter().filter(|p| p.asked() && p.added > 0 && p.group != record.group) {
            match self.on_fallback.iter_mut().find(|f| f.home == record.group && f.group == part.group) {
                Some(f) => {
                    f.nodes = f.nodes.saturating_add(part.added);
                    f.since = f.since.min(part.at);
                    f.home_before = Some(f.home_before.map_or(record.before, |b| b.max(record.before)));
                }
                None => self.on_fallback.push(OnFallback {
                    home: record.group.clone(),
                    group: part.group.clone(),
                    nodes: part.added,
                    since: part.at,
                    home_before: Some(record.before),
                }),
            }
        }
    }

    /// The record `id` names, if the ledger still holds it.
    pub(crate) fn find_mut(&mut self, id: &BoostId) -> Option<&mut BoostRecord> {
        self.records.iter_mut().find(|r| r.is(id))
    }

    /// The part of `id`'s boost that moved at `moved_at`.
    fn moved_part(&mut self, id: &BoostId, moved_at: Timestamp) -> Option<&mut MovedPart> {
        self.find_mut(id).and_then(|r| r.moved.iter_mut().find(|p| p.at == moved_at))
    }

    /// The record covering `instance`, if one does (at most one: openings never overlap).
    fn covering_mut(&mut self, instance: &InstanceId) -> Option<&mut BoostRecord> {
        self.records.iter_mut().find(|r| r.instances.contains(instance))
    }
}

/// A write whose intent the ledger holds until its answer, or a read of its group, settles it:
/// one shape for every write the ledger answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Pending {
    /// A boost's raise of its own group (its record's `raising_to`).
    Raise(BoostId),
    /// A boost's nodes moved at `at` to the fallback `to`, raised there.
    Move {
        /// The boost.
        id: BoostId,
        /// The fallback group.
        to: GroupName,
        /// When the nodes moved.
        at: Timestamp,
    },
    /// The group that nodes moving at `moved_at` left, lowered by them (they never launched).
    Lower {
        /// The boost.
        id: BoostId,
        /// When the nodes moved.
        moved_at: Timestamp,
    },
    /// A termination with decrement returning one of `boosted`'s nodes.
    Return {
        /// The boosted instance (or the one AWS took, for a give-back).
        boosted: InstanceId,
        /// The instance terminated.
        terminated: InstanceId,
    },
}

/// Facts the ledger no longer needs to remember.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Forgotten {
    /// Replacements once spent: their nodes are gone.
    Spent(Vec<NodeName>),
    /// Lapsed recommendations: their nodes are gone.
    Lapsed(Vec<InstanceId>),
    /// Uncordons a lapse owed: made, or the node is schedulable or gone.
    Uncordons(Vec<InstanceId>),
    /// Capacity once on a fallback that runs there no more (its nodes are gone).
    OnFallback {
        /// Its own group.
        home: GroupName,
        /// The fallback.
        group: GroupName,
    },
}

/// What a boost held for at-risk instances that never had a notice of their own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Unneeded {
    /// Nodes added ahead for pool-mates of a confirmed interruption.
    Ahead,
    /// Nodes standing by for rebalance recommendations.
    Standby,
}

/// One change to the ledger.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LedgerEdit {
    /// A new boost, saved before its write (its `raising_to` marks the write unanswered).
    /// Refused when a record already covers one of its instances.
    Open(BoostRecord),
    /// AWS answered a pending write: `applied`, or not made (taken back: a boost's record goes so
    /// its instances are planned again, moved nodes are the boost's own again, a lowering is
    /// asked again later, a return's count is taken back).
    Answer {
        /// The write.
        write: Pending,
        /// Whether it applied.
        applied: bool,
    },
    /// A raise or a move whose answer never came, resolved from its group (see `core::raises`):
    /// `kept` of its nodes are there, the rest never were. A raise that kept none takes its record
    /// with it; a move's nodes not kept are the boost's own again. Applies only while the write is
    /// still unanswered.
    Resolve {
        /// The write.
        write: Pending,
        /// The nodes the group shows.
        kept: u32,
    },
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
    /// What the ledger no longer needs to remember.
    Forget(Forgotten),
    /// A fallback node begins its return to its own group (see `core::back_to_spot`); the
    /// group's earlier returns older than `forget_before` no longer count against its budget.
    BeginBackToSpot {
        /// Its instance.
        instance: InstanceId,
        /// The return.
        returning: Returning,
        /// Returns begun before this are forgotten.
        forget_before: Timestamp,
    },
    /// A return that never got its boost (the group held it) or whose boost expired with nothing
    /// left asked of any group: forgotten, with its boost if any, so the node is the fallback's
    /// again and a later return may try.
    AbandonBackToSpot(InstanceId),
    /// A boost made ahead for pool-mates reached its window's end: these instances, which had no
    /// notice of their own, are no longer covered (a later notice boosts them afresh), and the
    /// rest is an ordinary boost.
    Release {
        /// The boost.
        id: BoostId,
        /// The instances released.
        instances: BTreeSet<InstanceId>,
    },
    /// A boost made ahead for pool-mates, or standing by for recommendations, reached its
    /// window's end with no notice in any of them: the nodes it added are given back.
    ReturnUnneeded(BoostId, Unneeded),
    /// Rebalance recommendations that lapsed: the instances leave their boost (the boost, if it
    /// still holds others, is an ordinary one from now on) and their recommendation is not
    /// answered again.
    Lapse {
        /// The boost, if it is still open.
        id: BoostId,
        /// The instances.
        instances: BTreeSet<InstanceId>,
        /// When.
        at: Timestamp,
        /// Those whose node owes its uncordon: the recommendation's own cordon.
        readmit: BTreeSet<InstanceId>,
    },
    /// Some of the boost's nodes move to a fallback group, saved before the fallback's write.
    /// Refused unless the boost still has that many nodes and no unanswered write.
    Move(BoostId, MovedPart),
    /// The group that nodes moving at `moved_at` left is about to be lowered to `to` by them (they
    /// never launched there): saved before the guarded write.
    Lowering {
        /// The boost.
        id: BoostId,
        /// When the nodes moved.
        moved_at: Timestamp,
        /// The desired capacity asked for.
        to: u32,
    },
    /// Whether the instance's departure is accounted for: the booster terminates it (saved
    /// before the call), or AWS took it and its node was given back or there is nothing to give
    /// back; `false` takes that back (the instance left without the booster after all).
    Settle(InstanceId, bool),
    /// An operator uncordoned the instance during its drain: it is never drained again.
    Keep(InstanceId),
    /// Cluster Autoscaler's scale-down protection on the node is the booster's (`true`, saved
    /// before the patch), or no longer (taken off, or the node is gone).
    Protection(NodeName, bool),
    /// A node is chosen to give back the capacity boosted for `reclaimed`, which AWS took first
    /// (saved before its cordon, so a restart resumes it instead of choosing a second one; the
    /// first node chosen stays), or with `None` the give-back ended and its node is forgotten.
    GiveBack {
        /// The boosted instance AWS took.
        reclaimed: InstanceId,
        /// The node chosen.
        node: Option<GiveBackNode>,
    },
    /// One of `boosted`'s boost nodes is returned by terminating `terminated` with decrement,
    /// counted before the call; never counted twice for one termination, never past `added`.
    BeginReturn {
        /// The boosted instance (or the one AWS took, for a give-back).
        boosted: InstanceId,
        /// The instance terminated.
        terminated: InstanceId,
    },
}

impl LedgerEdit {
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
            LedgerEdit::Answer { write, applied } => answer(ledger, write, *applied),
            LedgerEdit::Resolve { write, kept } => resolve(ledger, write, *kept),
            LedgerEdit::Close { id, spent } => {
                let Some(k) = ledger.records.iter().position(|r| r.is(id)) else { return false };
                let record = ledger.records.remove(k);
                ledger.spent.extend(spent.iter().cloned());
                ledger.close_on_fallback(&record);
                true
            }
            LedgerEdit::Forget(what) => forget(ledger, what),
            LedgerEdit::BeginBackToSpot { instance, returning, forget_before } => {
                ledger.return_starts.retain(|(_, at)| at >= forget_before);
                if ledger.returning.contains_key(instance) || ledger.covers(instance) {
                    return false;
                }
                ledger.return_starts.push((returning.home.clone(), returning.at));
                ledger.returning.insert(instance.clone(), returning.clone());
                true
            }
            LedgerEdit::AbandonBackToSpot(instance) => {
                let removed = ledger.returning.remove(instance).is_some();
                ledger.records.retain(|r| !r.instances.contains(instance));
                removed
            }
            LedgerEdit::Release { id, instances } => ledger
                .find_mut(id)
                .map(|r| {
                    r.instances.retain(|i| !instances.contains(i));
                    r.ahead = None;
                })
                .is_some(),
            LedgerEdit::ReturnUnneeded(id, Unneeded::Ahead) => ledger
                .find_mut(id)
                .and_then(|r| r.ahead.as_mut())
                .is_some_and(|a| !std::mem::replace(&mut a.returning, true)),
            LedgerEdit::ReturnUnneeded(id, Unneeded::Standby) => ledger
                .find_mut(id)
                .and_then(|r| r.standby.as_mut())
                .is_some_and(|s| !std::mem::replace(&mut s.returning, true)),
            LedgerEdit::Lapse { id, instances, at, readmit } => {
                let mut changed = false;
                for instance in instances {
                    changed |= ledger.lapsed.insert(instance.clone(), *at).is_none();
                }
                for instance in readmit.intersection(instances) {
                    changed |= ledger.to_readmit.insert(instance.clone());
                }
                if let Some(r) = ledger.find_mut(id) {
                    r.instances.retain(|i| !instances.contains(i));
                    r.standby = None;
                    changed = true;
                }
                changed
            }
            LedgerEdit::Expire(id, why) => ledger.find_mut(id).map(|r| r.expired.get_or_insert(*why)).is_some(),
            LedgerEdit::Move(id, part) => move_nodes(ledger, id, part),
            LedgerEdit::Lowering { id, moved_at, to } => {
                ledger.moved_part(id, *moved_at).map(|p| p.lowering_to = Some(*to)).is_some()
            }
            LedgerEdit::Settle(i, true) => ledger.covering_mut(i).is_some_and(|r| r.settled.insert(i.clone())),
            LedgerEdit::Settle(i, false) => ledger.covering_mut(i).is_some_and(|r| r.settled.remove(i)),
            LedgerEdit::Keep(i) => ledger.covering_mut(i).is_some_and(|r| r.kept.insert(i.clone())),
            LedgerEdit::Protection(node, true) => ledger.protected.insert(node.clone()),
            LedgerEdit::Protection(node, false) => ledger.protected.remove(node),
            LedgerEdit::GiveBack { reclaimed, node: Some(node) } => ledger.covering_mut(reclaimed).is_some_and(|r| {
                let chosen = r.giving_back.contains_key(reclaimed);
                r.giving_back.entry(reclaimed.clone()).or_insert_with(|| node.clone());
                !chosen
            }),
            LedgerEdit::GiveBack { reclaimed, node: None } => {
                ledger.covering_mut(reclaimed).is_some_and(|r| r.giving_back.remove(reclaimed).is_some())
            }
            LedgerEdit::BeginReturn { boosted, terminated } => {
                // A surplus fallback node's return added nothing: its decrement is the point.
                let surplus = ledger.returns_surplus(terminated);
                ledger.covering_mut(boosted).is_some_and(|r| {
                    let counts = !r.returning.contains(terminated) && (r.returned < r.added || surplus);
                    if counts {
                        r.returning.insert(terminated.clone());
                        r.returned += 1;
                    }
                    counts
                })
            }
        }
    }

    /// The write this edit saves the intent of, if it is an intent.
    pub fn pending(&self) -> Option<Pending> {
        match self {
            LedgerEdit::Open(record) => Some(Pending::Raise(record.id())),
            LedgerEdit::Move(id, part) => Some(Pending::Move { id: id.clone(), to: part.group.clone(), at: part.at }),
            LedgerEdit::Lowering { id, moved_at, .. } => Some(Pending::Lower { id: id.clone(), moved_at: *moved_at }),
            LedgerEdit::BeginReturn { boosted, terminated } => {
                Some(Pending::Return { boosted: boosted.clone(), terminated: terminated.clone() })
            }
            _ => None,
        }
    }

    /// The edit that takes this one back after its write was not made, for the edits saved
    /// before a write.
    pub fn undo(&self) -> Option<LedgerEdit> {
        self.pending().map(|write| LedgerEdit::Answer { write, applied: false })
    }

    /// The edit that records AWS's answer to this one's write as applied, for the edits saved
    /// before a write.
    pub fn confirm(&self) -> Option<LedgerEdit> {
        self.pending().map(|write| LedgerEdit::Answer { write, applied: true })
    }

    /// The edit that records `answer` to the write this intent was saved for: confirmed when it
    /// applied, taken back when it was not made, and none while unknown, so the record stays
    /// unanswered until a read of its group resolves it (see [`super::raises`]).
    pub fn answered(&self, answer: WriteAnswer) -> Option<LedgerEdit> {
        match answer {
            WriteAnswer::Applied => self.confirm(),
            WriteAnswer::NotMade => self.undo(),
            WriteAnswer::Unknown => None,
        }
    }
}

/// Records AWS's answer to a pending write.
fn answer(ledger: &mut BoostLedger, write: &Pending, applied: bool) -> bool {
    match write {
        Pending::Raise(id) if applied => ledger.find_mut(id).map(|r| r.raising_to = None).is_some(),
        Pending::Raise(id) => {
            let before = ledger.records.len();
            ledger.records.retain(|r| !r.is(id));
            ledger.records.len() != before
        }
        Pending::Move { id, to, at } if applied => {
            let part = ledger.find_mut(id).and_then(|r| r.moved.iter_mut().find(|p| &p.group == to && p.at == *at));
            part.map(|p| p.raising_to = None).is_some()
        }
        Pending::Move { id, to, at } => {
            let Some(r) = ledger.find_mut(id) else { return false };
            let Some(k) = r.moved.iter().position(|p| &p.group == to && p.at == *at) else { return false };
            let part = r.moved.remove(k);
            r.return_nodes(part.from, part.added);
            true
        }
        Pending::Lower { id, moved_at } => ledger
            .moved_part(id, *moved_at)
            .map(|p| {
                p.lowering_to = None;
                p.taken_back |= applied;
            })
            .is_some(),
        Pending::Return { boosted, terminated } => ledger.covering_mut(boosted).is_some_and(|r| {
            let answered = r.returning.remove(terminated);
            if answered && !applied {
                r.returned = r.returned.saturating_sub(1);
            }
            answered
        }),
    }
}

/// Resolves a raise or a move whose answer never came from what its group shows.
fn resolve(ledger: &mut BoostLedger, write: &Pending, kept: u32) -> bool {
    match write {
        Pending::Raise(id) => {
            let Some(k) = ledger.records.iter().position(|r| r.is(id) && r.raising_to.is_some()) else {
                return false;
            };
            let r = &mut ledger.records[k];
            r.raising_to = None;
            r.added = kept.min(r.added);
            r.returned = r.returned.min(r.added);
            if r.added == 0 {
                ledger.records.remove(k);
            }
            true
        }
        Pending::Move { id, to, at } => {
            let Some(r) = ledger.find_mut(id) else { return false };
            let Some(k) = r.moved.iter().position(|p| &p.group == to && p.at == *at && p.raising_to.is_some()) else {
                return false;
            };
            let part = &mut r.moved[k];
            let kept = kept.min(part.added);
            let back = part.added - kept;
            let from = part.from;
            part.raising_to = None;
            part.added = kept;
            if kept == 0 {
                r.moved.remove(k);
            }
            r.return_nodes(from, back);
            true
        }
        Pending::Lower { .. } | Pending::Return { .. } => false,
    }
}

/// Forgets what the ledger no longer needs.
fn forget(ledger: &mut BoostLedger, what: &Forgotten) -> bool {
    match what {
        Forgotten::Spent(nodes) => {
            let before = ledger.spent.len();
            nodes.iter().for_each(|n| {
                ledger.spent.remove(n);
            });
            ledger.spent.len() != before
        }
        Forgotten::Lapsed(instances) => {
            let before = (ledger.lapsed.len(), ledger.to_readmit.len());
            instances.iter().for_each(|i| {
                ledger.lapsed.remove(i);
                ledger.to_readmit.remove(i);
            });
            (ledger.lapsed.len(), ledger.to_readmit.len()) != before
        }
        Forgotten::Uncordons(instances) => {
            let before = ledger.to_readmit.len();
            instances.iter().for_each(|i| {
                ledger.to_readmit.remove(i);
            });
            ledger.to_readmit.len() != before
        }
        Forgotten::OnFallback { home, group } => {
            let before = ledger.on_fallback.len();
            ledger.on_fallback.retain(|f| !(&f.home == home && &f.group == group));
            ledger.on_fallback.len() != before
        }
    }
}

/// Moves some of a boost's nodes to a fallback (see [`LedgerEdit::Move`]).
fn move_nodes(ledger: &mut BoostLedger, id: &BoostId, part: &MovedPart) -> bool {
    let Some(r) = ledger.find_mut(id) else { return false };
    if r.unconfirmed().is_some() || r.moved.iter().any(|p| p.at == part.at) {
        return false;
    }
    let taken = match part.from {
        None if r.added.saturating_sub(r.returned) >= part.added => {
            r.added -= part.added;
            true
        }
        None => false,
        Some(at) => r
            .moved
            .iter_mut()
            .find(|p| p.at == at && p.added >= part.added && p.lowering_to.is_none())
            .map(|p| p.added -= part.added)
            .is_some(),
    };
    if taken {
        r.moved.push(part.clone());
    }
    taken
}

/// What became of a write whose intent the ledger holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WriteAnswer {
    /// AWS applied it (or a read shows it did, though its answer was an error).
    Applied,
    /// It was not made: refused, or lost a race, before anything changed.
    NotMade,
    /// It may or may not have applied, and no read has told yet.
    Unknown,
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
        assert!(
            !LedgerEdit::Answer { write: Pending::Raise(b.id()), applied: true }.apply(&mut l),
            "gone: nothing to confirm"
        );
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
            from: None,
            parked: None,
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

    #[test]
    fn nodes_moving_on_leave_the_part_they_move_from_and_go_back_to_it_when_the_write_is_not_made() {
        let record = BoostRecord::test("a", &["i-1"], 3, 1_000);
        let mut l = BoostLedger { records: vec![record.clone()], ..Default::default() };
        let part = |group: &str, added, at, from: Option<i64>| MovedPart {
            group: GroupName::from(group),
            added,
            at: Timestamp::from_millis(at),
            raising_to: Some(9),
            taken_back: false,
            lowering_to: None,
            from: from.map(Timestamp::from_millis),
            parked: None,
        };
        let to_b = LedgerEdit::Move(record.id(), part("b", 3, 5_000, None));
        assert!(to_b.apply(&mut l) && to_b.confirm().unwrap().apply(&mut l));
        let to_c = LedgerEdit::Move(record.id(), part("c", 2, 6_000, Some(5_000)));
        assert!(!LedgerEdit::Move(record.id(), part("c", 4, 6_000, Some(5_000))).apply(&mut l), "more than b holds");
        assert!(to_c.apply(&mut l));
        let counts = |l: &BoostLedger| {
            let r = &l.records[0];
            (r.added, r.moved.iter().map(|p| p.added).collect::<Vec<_>>(), r.left_with(&r.moved[0]))
        };
        assert_eq!(counts(&l), (0, vec![1, 2], 3), "b's part still answers for the three that left a");
        assert_eq!(l.records[0].left_group(&l.records[0].moved[1]), Some(&GroupName::from("b")));
        assert!(to_c.undo().unwrap().apply(&mut l));
        assert_eq!(counts(&l).1, vec![3], "back to b's part, not to the boost's own count");

        // AWS shows one of two moved on: the other goes back to b's part.
        assert!(to_c.apply(&mut l));
        let resolve = LedgerEdit::Resolve {
            write: Pending::Move { id: record.id(), to: "c".into(), at: Timestamp::from_millis(6_000) },
            kept: 1,
        };
        assert!(resolve.apply(&mut l));
        assert_eq!(counts(&l), (0, vec![2, 1], 3));
    }

    #[test]
    fn every_intent_is_confirmed_when_applied_taken_back_when_not_made_and_left_while_unknown() {
        let record = BoostRecord::test("a", &["i-1"], 2, 0);
        let id = record.id();
        let at = Timestamp::from_millis(5);
        let part = MovedPart {
            group: "b".into(),
            added: 1,
            at,
            raising_to: Some(3),
            taken_back: false,
            lowering_to: None,
            from: None,
            parked: None,
        };
        let intents = [
            (
                LedgerEdit::Open(record.clone()),
                LedgerEdit::Answer { write: Pending::Raise(id.clone()), applied: true },
                LedgerEdit::Answer { write: Pending::Raise(id.clone()), applied: false },
            ),
            (
                LedgerEdit::Move(id.clone(), part),
                LedgerEdit::Answer { write: Pending::Move { id: id.clone(), to: "b".into(), at }, applied: true },
                LedgerEdit::Answer { write: Pending::Move { id: id.clone(), to: "b".into(), at }, applied: false },
            ),
            (
                LedgerEdit::Lowering { id: id.clone(), moved_at: at, to: 4 },
                LedgerEdit::Answer { write: Pending::Lower { id: id.clone(), moved_at: at }, applied: true },
                LedgerEdit::Answer { write: Pending::Lower { id: id.clone(), moved_at: at }, applied: false },
            ),
        ];
        for (intent, confirmed, undone) in intents {
            assert_eq!(intent.answered(WriteAnswer::Applied), Some(confirmed), "{intent:?}");
            assert_eq!(intent.answered(WriteAnswer::NotMade), Some(undone), "{intent:?}");
            assert_eq!(intent.answered(WriteAnswer::Unknown), None, "{intent:?}");
        }
    }

    #[test]
    fn a_lowering_is_saved_before_its_write_and_settled_by_the_answer() {
        let part = MovedPart {
            group: "b".into(),
            added: 2,
            at: Timestamp::from_millis(5_000),
            raising_to: None,
            taken_back: false,
            lowering_to: None,
            from: None,
            parked: None,
        };
        let record = BoostRecord { moved: vec![part.clone()], ..BoostRecord::test("a", &["i-1"], 1, 1_000) };
        let mut l = ledger(std::slice::from_ref(&record));
        let lowering = LedgerEdit::Lowering { id: record.id(), moved_at: part.at, to: 6 };
        assert!(lowering.apply(&mut l));
        assert_eq!(l.records[0].moved[0].lowering_to, Some(6));
        assert!(lowering.undo().unwrap().apply(&mut l), "not written: the intent goes");
        assert_eq!((l.records[0].moved[0].lowering_to, l.records[0].moved[0].taken_back), (None, false));
        lowering.apply(&mut l);
        assert!(LedgerEdit::Answer { write: Pending::Lower { id: record.id(), moved_at: part.at }, applied: true }
            .apply(&mut l));
        assert_eq!((l.records[0].moved[0].lowering_to, l.records[0].moved[0].taken_back), (None, true));
        let elsewhere = LedgerEdit::Lowering { id: record.id(), moved_at: Timestamp::from_millis(1), to: 6 };
        assert!(!elsewhere.apply(&mut l), "no part moved then");
    }
}
