//! Every boost ends. A replacement that never registers (bootstrap broken, capacity gone) would
//! otherwise keep its boost, the scale-down protection of whatever it claimed and its share of
//! `--max-boost-per-group` forever. A boost whose replacements are not all Ready within
//! `--replacement-timeout`, whose replacements are Ready but whose drain a pod's opt-out still
//! defers at `--replacement-timeout` (a tenant's `do-not-disrupt` would otherwise pin the group's
//! budget until `--max-boost-age`), or that is older than `--max-boost-age`, is marked expired: it stops
//! claiming and protecting nodes and spending the group's budget, its at-risk nodes are not
//! drained for it, and it stays in the ledger until they leave, so none is boosted twice.

use serde::{Deserialize, Serialize};

use super::drain_batches::{claim_replacements, opted_out};
use super::ledger_edit::{BoostId, LedgerEdit};
use super::model::{BoostExpiry, BoostLedger, BoostRecord, Snapshot, Timestamp};
use super::policy::Policy;
use super::signals::AtRiskSet;

/// A boost that stops waiting now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Expired {
    /// The boost.
    pub record: BoostId,
    /// Why.
    pub(crate) why: BoostExpiry,
    /// Ready replacements it had claimed, and how many it added.
    pub ready: u32,
    /// Replacements it added.
    pub added: u32,
}

impl Expired {
    /// Its mark in the ledger.
    pub fn edit(&self) -> LedgerEdit {
        LedgerEdit::Expire(self.record.clone(), self.why)
    }
}

/// The open boosts that expire at `now`.
pub(crate) fn expire_boosts(
    snapshot: &Snapshot,
    ledger: &BoostLedger,
    at_risk: &AtRiskSet,
    policy: &Policy,
    now: Timestamp,
) -> Vec<Expired> {
    // Claims cost a pass over every node: only worth it once some open boost is old enough.
    let youngest_expiry = policy.replacement_timeout.min(policy.max_boost_age);
    let old_enough = |r: &BoostRecord| r.expired.is_none() && now.since(r.at) >= youngest_expiry;
    if !ledger.records.iter().any(old_enough) {
        return Vec::new();
    }
    let claims = claim_replacements(snapshot, ledger, at_risk);
    let deferred = |record: &BoostRecord| {
        at_risk.by_group.get(&record.group).is_some_and(|risks| {
            record
                .instances
                .iter()
                .filter_map(|i| risks.get(i))
                .any(|r| opted_out(snapshot.nodes.get(&r.node), r).is_some())
        })
    };
    ledger
        .records
        .iter()
        .zip(&claims)
        .filter(|(record, _)| record.expired.is_none())
        .filter_map(|(record, claim)| {
            let age = now.since(record.at);
            let why = if age >= policy.max_boost_age {
                BoostExpiry::MaxAge
            } else if age >= policy.replacement_timeout && !claim.complete() {
                BoostExpiry::ReplacementTimeout
            } else if age >= policy.replacement_timeout && deferred(record) {
                BoostExpiry::DrainDeferred
            } else {
                return None;
            };
            Some(Expired {
                record: record.id(),
                why,
                ready: u32::try_from(claim.nodes.len()).unwrap_or(u32::MAX),
                added: record.added,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::core::boost::plan_boosts;
    use crate::core::model::{BoostRecord, Group, Node};
    use crate::core::signals::{fold_signals, fold_signals_with_nodes};
    use crate::core::Signal;

    fn boosted() -> Snapshot {
        let mut s = Snapshot::default()
            .with_group(Group::test("a"))
            .with_node(Node::test("n1", "a").cordoned())
            .with_signal(Signal::rebalance("n1", 0));
        s.ledger.record(BoostRecord::test("a", &["i-n1"], 1, 0));
        s
    }

    #[test]
    fn a_replacement_that_never_registers_expires_the_boost_once_and_nothing_is_boosted_twice() {
        let policy = Policy::default();
        let mut s = boosted();
        let at_risk = fold_signals(&s, &policy, Timestamp::EPOCH);
        let before = Timestamp::EPOCH.plus(policy.replacement_timeout - Duration::from_secs(1));
        assert!(expire_boosts(&s, &s.ledger, &at_risk, &policy, before).is_empty());
        let at = Timestamp::EPOCH.plus(policy.replacement_timeout);
        let expired = expire_boosts(&s, &s.ledger, &at_risk, &policy, at);
        assert_eq!(expired.len(), 1);
        assert_eq!((expired[0].why, expired[0].ready, expired[0].added), (BoostExpiry::ReplacementTimeout, 0, 1));

        s.ledger.records[0].expired = Some(BoostExpiry::ReplacementTimeout);
        assert!(expire_boosts(&s, &s.ledger, &at_risk, &policy, at).is_empty(), "told once");
        let (at_risk, nodes) = fold_signals_with_nodes(&s, &policy, at);
        let plan = plan_boosts(&s, &s.ledger, (&at_risk, &nodes), &policy, at);
        assert!(plan.boosts.is_empty(), "its instance stays covered");
    }

    #[test]
    fn each_boost_is_judged_by_its_own_claim_whatever_the_ledgers_order() {
        // The ledger lists the newer boost (of n2, at 100 s) first. Only the older one (of n1, at
        // 0 s) has a replacement: r1, created at 20 s, before the newer boost.
        let policy = Policy::default();
        let mut s = boosted().with_node(Node::test("n2", "a").cordoned()).with_signal(Signal::rebalance("n2", 0));
        s.ledger.records.insert(0, BoostRecord::test("a", &["i-n2"], 1, 100_000));
        s = s.with_node(Node::test("r1", "a").created_at(20_000));
        let at_risk = fold_signals(&s, &policy, Timestamp::EPOCH);
        let at = Timestamp::from_millis(100_000).plus(policy.replacement_timeout);
        let expired = expire_boosts(&s, &s.ledger, &at_risk, &policy, at);
        assert_eq!(expired.len(), 1, "{expired:?}");
        assert_eq!(expired[0].record, s.ledger.records[0].id(), "the newer boost, whose replacement never came");
        assert_eq!(expired[0].ready, 0);
    }

    #[test]
    fn a_boost_whose_drain_an_opt_out_defers_ends_at_the_replacement_timeout_not_the_maximum_age() {
        let policy = Policy::default();
        let mut s = boosted().with_node(Node::test("r1", "a"));
        let mut pod = crate::core::Pod::test("pinned", 100, 1 << 20);
        pod.opt_out = Some(crate::core::OptOut::DoNotDisrupt);
        s.nodes.get_mut(&crate::core::NodeName::from("n1")).unwrap().pods.push(pod);
        let at_risk = fold_signals(&s, &policy, Timestamp::EPOCH);
        let before = Timestamp::EPOCH.plus(policy.replacement_timeout - Duration::from_secs(1));
        assert!(expire_boosts(&s, &s.ledger, &at_risk, &policy, before).is_empty());
        let at = Timestamp::EPOCH.plus(policy.replacement_timeout);
        let expired = expire_boosts(&s, &s.ledger, &at_risk, &policy, at);
        assert_eq!((expired[0].why, expired[0].ready), (BoostExpiry::DrainDeferred, 1), "its budget is freed");
    }

    #[test]
    fn a_boost_with_its_replacement_ready_expires_only_at_the_maximum_age() {
        let policy = Policy::default();
        let mut s = boosted();
        let mut r = Node::test("r1", "a");
        r.created = Timestamp::EPOCH;
        s = s.with_node(r);
        let at_risk = fold_signals(&s, &policy, Timestamp::EPOCH);
        assert!(expire_boosts(&s, &s.ledger, &at_risk, &policy, Timestamp::EPOCH.plus(policy.replacement_timeout))
            .is_empty());
        let expired = expire_boosts(&s, &s.ledger, &at_risk, &policy, Timestamp::EPOCH.plus(policy.max_boost_age));
        assert_eq!((expired[0].why, expired[0].ready), (BoostExpiry::MaxAge, 1));
    }
}
