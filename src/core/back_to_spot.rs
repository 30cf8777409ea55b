//! Returning capacity to its own group. Nodes a boost moved to a fallback because its group had
//! no capacity stay there once the boost is over ([`OnFallback`], noted when the boost closes):
//! often on-demand, or in a pool the tag ranks lower. Once the group can launch again they go
//! back, replace-before-drain, through the same path as any at-risk node: a fallback node chosen
//! for it is marked returning ([`Returning`], in the ledger), which makes it at risk with
//! [`SignalKind::BackToSpot`] *in its own group*; the scaler boosts that group for it, the
//! drainer drains it once the replacement is Ready (honouring budgets and opt-outs, as for a
//! rebalance recommendation) and terminates it with decrement, so the fallback shrinks by what
//! the group grew.
//!
//! A return begins only when the group has not failed to launch for `--return-to-spot-interval`,
//! has no at-risk node and no boost of its own open, and has room below its MaxSize; at most
//! `--return-to-spot-nodes` begin per group per interval. If the group fails to launch the
//! replacement after all, its boost is parked and retried in that group only (never moved to a
//! fallback), and a boost that expires with nothing asked of any group is abandoned: the node
//! stays on the fallback for a later try.

use serde::{Deserialize, Serialize};

use super::ledger_edit::LedgerEdit;
use super::model::{BoostLedger, InstanceId, Node, OnFallback, Returning, SignalKind, Snapshot, Timestamp};
use super::policy::Policy;
use super::signals::AtRiskSet;

/// A fallback node whose return begins now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackToSpot {
    /// Its instance.
    pub instance: InstanceId,
    /// The return.
    pub returning: Returning,
}

/// What to note of returns this pass.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BackToSpotPlan {
    /// Returns that begin.
    pub begun: Vec<BackToSpot>,
    /// Returns abandoned, by instance: their node stays on the fallback.
    pub abandoned: Vec<InstanceId>,
    /// Ledger edits that note all of it, to apply in order.
    pub edits: Vec<LedgerEdit>,
}

/// The returns to begin and abandon at `now`, and the capacity on fallbacks to forget.
pub(crate) fn plan_back_to_spot(
    snapshot: &Snapshot,
    ledger: &BoostLedger,
    at_risk: &AtRiskSet,
    policy: &Policy,
    now: Timestamp,
) -> BackToSpotPlan {
    let mut plan = BackToSpotPlan::default();
    if ledger.on_fallback.is_empty() && ledger.returning.is_empty() {
        return plan;
    }
    for f in &ledger.on_fallback {
        let runs_there = snapshot.nodes.values().any(|n| runs_on_fallback(n, f));
        let returning = ledger.returning.values().any(|r| r.home == f.home && r.from == f.group);
        if !runs_there && !returning {
            plan.edits.push(LedgerEdit::ForgetOnFallback { home: f.home.clone(), group: f.group.clone() });
        }
    }
    for (instance, r) in &ledger.returning {
        let abandon = match ledger.records.iter().find(|rec| rec.instances.contains(instance)) {
            // The group held its boost (at its max, over budget) as long as a boost waits for its
            // replacements, or the node went before it was boosted.
            None => now.since(r.at) >= policy.replacement_timeout || !snapshot.nodes.contains_key(&r.node),
            // Expired with nothing still asked of any group: what it raised was taken back.
            Some(rec) => {
                rec.expired.is_some()
                    && rec.unconfirmed().is_none()
                    && rec.added <= rec.returned
                    && rec.moved.iter().all(|p| p.taken_back && p.lowering_to.is_none())
            }
        };
        if abandon {
            plan.abandoned.push(instance.clone());
            plan.edits.push(LedgerEdit::AbandonBackToSpot(instance.clone()));
        }
    }
    if policy.return_to_spot_interval.is_zero() || policy.return_to_spot_nodes == 0 {
        return plan;
    }
    let since = now.minus(policy.return_to_spot_interval);
    let at_risk_instances = at_risk.instances();
    let mut on_fallback: Vec<&OnFallback> = ledger.on_fallback.iter().collect();
    on_fallback.sort_by_key(|f| f.since);
    for f in on_fallback {
        let begun = ledger
            .return_starts
            .iter()
            .filter(|(home, at)| home == &f.home && *at > since)
            .count()
            .saturating_add(plan.begun.iter().filter(|b| b.returning.home == f.home).count());
        let mut room = (policy.return_to_spot_nodes as usize).saturating_sub(begun);
        if room == 0 || !may_take_back(snapshot, ledger, at_risk, policy, (f, since, now)) {
            continue;
        }
        let on_the_way = ledger.returning.values().filter(|r| r.home == f.home && r.from == f.group).count();
        room = room.min((f.nodes as usize).saturating_sub(on_the_way));
        let mut candidates: Vec<&Node> = snapshot
            .nodes
            .values()
            .filter(|n| runs_on_fallback(n, f) && n.ready && !n.cordoned && !n.opted_out)
            .filter(|n| n.pods_known && n.pods.iter().all(|p| p.opt_out.is_none()))
            .filter(|n| {
                n.instance.as_ref().is_some_and(|i| {
                    // Described by EC2: the node's identity is verified at every pass of its return.
                    snapshot.instances.contains_key(i)
                        && !ledger.covers(i)
                        && !ledger.returning.contains_key(i)
                        && !at_risk_instances.contains(i)
                })
            })
            .collect();
        // The emptiest first (the least to move), then the newest (launched for the boost).
        candidates.sort_by(|a, b| a.pods.len().cmp(&b.pods.len()).then(b.created.cmp(&a.created)));
        for node in candidates.into_iter().take(room) {
            let Some(instance) = node.instance.clone() else { continue };
            let returning = Returning {
                node: node.name.clone(),
                home: f.home.clone(),
                from: f.group.clone(),
                at: now,
                since: f.since,
            };
            plan.edits.push(LedgerEdit::BeginBackToSpot {
                instance: instance.clone(),
                returning: returning.clone(),
                forget_before: since,
            });
            plan.begun.push(BackToSpot { instance, returning });
        }
    }
    plan
}

/// The nodes whose pods a return is chosen by and a view may have left out (see
/// [`Node::pods_known`]): those the fallbacks launched for capacity still on them.
pub fn pods_needed(snapshot: &Snapshot) -> std::collections::BTreeSet<super::model::NodeName> {
    let ledger = &snapshot.ledger;
    if ledger.on_fallback.is_empty() {
        return std::collections::BTreeSet::new();
    }
    snapshot
        .nodes
        .values()
        .filter(|n| !n.pods_known && ledger.on_fallback.iter().any(|f| runs_on_fallback(n, f)))
        .map(|n| n.name.clone())
        .collect()
}

/// Whether `node` is of the fallback `f` names and joined since its capacity moved there.
fn runs_on_fallback(node: &Node, f: &OnFallback) -> bool {
    node.group.as_ref() == Some(&f.group) && node.created >= f.since.whole_second() && !node.deleting_by_ca
}

/// Whether `f`'s own group may take a node back now: one this daemon serves, with room, that
/// has not failed to launch since `since` (nor within `--capacity-cooldown`, while it counts as
/// failing), has no notice open and no boost of its own.
fn may_take_back(
    snapshot: &Snapshot,
    ledger: &BoostLedger,
    at_risk: &AtRiskSet,
    policy: &Policy,
    (f, since, now): (&OnFallback, Timestamp, Timestamp),
) -> bool {
    let (Some(home), Some(fallback)) = (snapshot.groups.get(&f.home), snapshot.groups.get(&f.group)) else {
        return false;
    };
    let serves = |g: &super::model::Group| g.served() && !policy.ignored_groups.contains(&g.name);
    let failed_lately = snapshot.capacity_failures.get(&f.home).is_some_and(|at| *at > since)
        || super::fallback::failing(snapshot, &f.home, policy, now);
    let notice_open = at_risk
        .by_group
        .get(&f.home)
        .is_some_and(|risks| risks.values().any(|r| r.kinds.iter().any(|k| k != SignalKind::BackToSpot)));
    let own_boost = ledger.records.iter().any(|r| r.group == f.home && r.expired.is_none() && !ledger.is_return(r));
    serves(home) && serves(fallback) && home.desired < home.max && !failed_lately && !notice_open && !own_boost
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::model::{BoostRecord, Group, GroupName, InstanceFacts, InstanceLifecycle, NodeName};
    use crate::core::signals::fold_signals;

    const NOW: Timestamp = Timestamp::from_millis(10_000_000);

    /// `spot` (desired 3) lent 2 nodes to `od` at 1,000 s; `od` runs them (`o3`, `o4`) and two of
    /// its own (`o1`, `o2`).
    fn lent() -> Snapshot {
        let mut s = Snapshot::default();
        let mut spot = Group::test("spot").desired(3).members(["i-s1", "i-s2", "i-s3"]);
        spot.max = 10;
        spot.fallbacks = vec!["od".into()];
        let mut od = Group::test("od").desired(4).members(["i-o1", "i-o2", "i-o3", "i-o4"]);
        od.max = 10;
        s.groups.insert(spot.name.clone(), spot);
        s.groups.insert(od.name.clone(), od);
        for (name, group, created) in
            [("s1", "spot", 0), ("s2", "spot", 0), ("s3", "spot", 0), ("o1", "od", 0), ("o2", "od", 0)]
                .into_iter()
                .chain([("o3", "od", 1_100_000), ("o4", "od", 1_200_000)])
        {
            let mut node = Node::test(name, group).with_pods(if name == "o4" { 1 } else { 2 }, 100, 1 << 20);
            node.created = Timestamp::from_millis(created);
            let mut facts = InstanceFacts::bought(InstanceLifecycle::Spot);
            facts.private_dns_name = Some(format!("{name}.ec2.internal"));
            s.instances.insert(node.instance.clone().unwrap(), facts);
            s.nodes.insert(node.name.clone(), node);
        }
        s.ledger.on_fallback.push(OnFallback {
            home: "spot".into(),
            group: "od".into(),
            nodes: 2,
            since: Timestamp::from_millis(1_000_000),
        });
        s
    }

    fn plan(s: &Snapshot, policy: &Policy, now: Timestamp) -> BackToSpotPlan {
        plan_back_to_spot(s, &s.ledger, &fold_signals(s, policy, now), policy, now)
    }

    fn begun(p: &BackToSpotPlan) -> Vec<&str> {
        p.begun.iter().map(|b| b.returning.node.as_str()).collect()
    }

    #[test]
    fn a_node_the_fallback_launched_for_the_group_goes_back_one_per_interval() {
        let mut s = lent();
        let policy = Policy::default();
        let p = plan(&s, &policy, NOW);
        assert_eq!(begun(&p), ["o4"], "one per interval: the emptiest of those launched for it");
        let r = &p.begun[0].returning;
        assert_eq!((r.home.as_str(), r.from.as_str(), r.since), ("spot", "od", Timestamp::from_millis(1_000_000)));
        assert!(p.edits.iter().all(|e| e.apply(&mut s.ledger)));

        // It is at risk now, in its own group, and nothing more begins within the interval.
        let at_risk = fold_signals(&s, &policy, NOW);
        assert!(at_risk.dropped.is_empty(), "{:?}", at_risk.dropped);
        let risk = &at_risk.by_group[&GroupName::from("spot")][&InstanceId::from("i-o4")];
        assert_eq!(risk.kinds.iter().collect::<Vec<_>>(), [SignalKind::BackToSpot]);
        assert!(!at_risk.by_group.contains_key(&GroupName::from("od")));
        assert!(plan(&s, &policy, NOW.plus(policy.return_to_spot_interval / 2)).begun.is_empty());

        // Once the interval has passed, the next (its own o1 and o2 are never taken); o4's return
        // waits for its boost meanwhile.
        let next = plan(&s, &policy, NOW.plus(policy.return_to_spot_interval));
        assert_eq!(begun(&next), ["o3"]);
    }

    #[test]
    fn no_return_begins_while_the_group_failed_lately_has_a_notice_or_a_boost_or_no_room() {
        let policy = Policy::default();
        let mut failed = lent();
        failed.capacity_failures.insert("spot".into(), NOW.minus(policy.return_to_spot_interval / 2));
        assert!(plan(&failed, &policy, NOW).begun.is_empty());
        failed.capacity_failures.insert("spot".into(), NOW.minus(policy.return_to_spot_interval));
        assert_eq!(begun(&plan(&failed, &policy, NOW)), ["o4"], "an interval since its last failure");

        let mut noticed = lent();
        noticed.signals.push(crate::core::model::Signal {
            instance: "i-s1".into(),
            node: "s1".into(),
            kind: SignalKind::SpotInterruption,
            observed_at: NOW,
            evidence: crate::core::model::Evidence::NodeTaint,
            notice_deadline: None,
        });
        noticed.nodes.get_mut(&NodeName::from("s1")).unwrap().cordoned = true;
        assert!(plan(&noticed, &policy, NOW).begun.is_empty(), "a notice is open in the group");

        let mut boosted = lent();
        boosted.ledger.record(BoostRecord::test("spot", &["i-s2"], 1, 9_000_000));
        assert!(plan(&boosted, &policy, NOW).begun.is_empty(), "its own boost is open");

        let mut full = lent();
        full.groups.get_mut(&GroupName::from("spot")).unwrap().max = 3;
        assert!(plan(&full, &policy, NOW).begun.is_empty(), "no room below its max");

        let mut foreign = lent();
        foreign.groups.get_mut(&GroupName::from("spot")).unwrap().foreign = true;
        assert!(plan(&foreign, &policy, NOW).begun.is_empty(), "not a group this cluster serves");

        let off = Policy { return_to_spot_interval: std::time::Duration::ZERO, ..Policy::default() };
        assert!(plan(&lent(), &off, NOW).begun.is_empty(), "turned off");
    }

    #[test]
    fn a_node_with_a_pod_that_opted_out_or_at_risk_itself_is_not_chosen_and_gone_capacity_is_forgotten() {
        let policy = Policy::default();
        let mut s = lent();
        s.nodes.get_mut(&NodeName::from("o4")).unwrap().pods[0].opt_out =
            Some(crate::core::model::OptOut::DoNotDisrupt);
        s.nodes.get_mut(&NodeName::from("o3")).unwrap().cordoned = true;
        assert!(plan(&s, &policy, NOW).begun.is_empty());

        // The fallback's nodes for it are gone (Cluster Autoscaler removed them): forgotten.
        let mut gone = lent();
        gone.nodes.retain(|n, _| !["o3", "o4"].contains(&n.as_str()));
        let p = plan(&gone, &policy, NOW);
        assert!(p.begun.is_empty());
        assert_eq!(p.edits, [LedgerEdit::ForgetOnFallback { home: "spot".into(), group: "od".into() }]);
    }

    #[test]
    fn a_return_whose_boost_never_came_or_expired_with_nothing_asked_is_abandoned() {
        let policy = Policy::default();
        let mut s = lent();
        let p = plan(&s, &policy, NOW);
        assert!(p.edits.iter().all(|e| e.apply(&mut s.ledger)));
        // Held as long as a boost waits for its replacements: abandoned, and the node is od's again.
        assert!(plan(&s, &policy, NOW.plus(policy.return_to_spot_interval)).abandoned.is_empty());
        let later = plan(&s, &policy, NOW.plus(policy.replacement_timeout));
        assert_eq!(later.abandoned, [InstanceId::from("i-o4")]);

        // Boosted, then expired with its node parked and taken back: abandoned too.
        let mut record = BoostRecord::test("spot", &["i-o4"], 0, NOW.as_millis());
        record.expired = Some(crate::core::model::BoostExpiry::ReplacementTimeout);
        s.ledger.record(record.clone());
        assert_eq!(plan(&s, &policy, NOW).abandoned, [InstanceId::from("i-o4")]);
        let mut l = s.ledger.clone();
        assert!(LedgerEdit::AbandonBackToSpot("i-o4".into()).apply(&mut l));
        assert!(l.records.is_empty() && l.returning.is_empty() && l.on_fallback.len() == 1);

        // Still asking its group for a node: kept.
        s.ledger.records[0].added = 1;
        assert!(plan(&s, &policy, NOW).abandoned.is_empty());
    }
}
