//! Drain planning: which boosted at-risk nodes to drain next, in batches, and only once the
//! replacement capacity planned for them has joined and is Ready (replace-before-drain).
//!
//! Replacement capacity is tracked per boost record: a Ready, schedulable, not-at-risk node of the
//! group, created after the boost was decided (to the second, as creationTimestamp is), is *claimed* by the oldest record that still lacks
//! nodes. A record whose `added` nodes are all claimed may drain; one with `added == 0` (its pods
//! need no new node) may drain at once. Claims are recomputed from the snapshot on every plan, so a
//! replacement that dies is replaced by the next node to join; nodes that served a closed record
//! are remembered in the ledger as spent and never serve another.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::drain_state::DrainState;
use super::fast_hash::{FastMap, FastSet};
use super::ledger_edit::Forgotten;
use super::ledger_edit::LedgerEdit;
use super::model::{
    BoostLedger, BoostRecord, GroupName, InstanceId, Node, NodeName, OptOut, Pod, PodClass, Snapshot, Timestamp,
    INTERRUPTION_NOTICE,
};
use super::policy::Policy;
use super::signals::{AtRisk, AtRiskNodes, AtRiskSet};

/// Everything drain planning looks at.
#[derive(Debug, Clone, Copy)]
pub struct DrainView<'a> {
    /// The cluster.
    pub snapshot: &'a Snapshot,
    /// Folded signals.
    pub at_risk: &'a AtRiskSet,
    /// The node of every instance at risk.
    pub(crate) nodes: &'a AtRiskNodes<'a>,
    /// The worker's progress.
    pub state: &'a DrainState,
}

/// One node to drain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DrainTarget {
    /// The node.
    pub node: NodeName,
    /// Its instance, terminated with decrement once drained.
    pub instance: InstanceId,
    /// Whether the worker must cordon it first (NTH normally has).
    pub cordon: bool,
    /// Whether terminating it gives a boosted node back (`ShouldDecrementDesiredCapacity`). Only
    /// as many of a boost's instances as it added are terminated with decrement; the others are
    /// replaced by the ASG, so the group never ends smaller than before the boost.
    pub decrement: bool,
    /// When the instance goes, for a node with an interruption notice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<Timestamp>,
    /// Started before its replacements were Ready: its deadline left no more time to wait.
    #[serde(default)]
    pub early: bool,
    /// The instance AWS took first whose boosted node this drain gives back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gives_back: Option<InstanceId>,
}

/// Nodes of one group to drain together.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DrainBatch {
    /// The group.
    pub group: GroupName,
    /// Its nodes, oldest signal first.
    pub nodes: Vec<DrainTarget>,
}

/// A drain that ran out of time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimedOutDrain {
    /// The group.
    pub group: GroupName,
    /// The node, left cordoned.
    pub node: NodeName,
    /// Its instance.
    pub instance: InstanceId,
    /// Whether to terminate it anyway (`--terminate-after-drain-timeout`).
    pub terminate: bool,
    /// Whether that termination decrements desired capacity.
    pub decrement: bool,
    /// The instance AWS took first whose boosted node this drain was to give back: its node is
    /// never terminated with pods on it, and the capacity is left to Cluster Autoscaler.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gives_back: Option<InstanceId>,
}

/// Why a group drains nothing now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum DrainWait {
    /// `--max-concurrent-drains` nodes are already draining.
    ConcurrencyLimit,
    /// `--time-between-drains` has not passed since the last batch.
    Spacing {
        /// When the next batch may start.
        until: Timestamp,
    },
    /// The boost for these instances has not got its nodes Ready yet.
    ReplacementNotReady {
        /// The waiting instances.
        instances: Vec<InstanceId>,
        /// Ready replacements claimed so far.
        ready: u32,
        /// Replacements the boost added.
        needed: u32,
        /// For nodes with an interruption notice: when they drain whether or not the
        /// replacements are Ready by then.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        drain_by: Option<Timestamp>,
    },
    /// The boost stands by for these rebalance recommendations (see [`super::standby`]): they
    /// drain on their own interruption notice, else lapse at `until`.
    Standby {
        /// The instances.
        instances: Vec<InstanceId>,
        /// When their recommendations lapse.
        until: Timestamp,
    },
    /// A pod on the node opted out of voluntary disruption, and the node's trouble is voluntary
    /// (a rebalance recommendation, a rotation): it waits for a confirmed interruption.
    OptedOut {
        /// The node.
        node: NodeName,
        /// `namespace/name` of the first pod that opted out.
        pod: String,
        /// How it opted out.
        how: OptOut,
    },
    /// A pod on the node has no controller to recreate it, and the node's trouble is one the
    /// booster itself chose (a return to spot, a rotation): it is never evicted for that.
    BarePod {
        /// The node.
        node: NodeName,
        /// `namespace/name` of the first such pod.
        pod: String,
    },
}

impl std::fmt::Display for DrainWait {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DrainWait::ConcurrencyLimit => f.write_str("--max-concurrent-drains nodes are draining"),
            DrainWait::Spacing { until } => write!(f, "--time-between-drains: next batch at {} ms", until.as_millis()),
            DrainWait::ReplacementNotReady { instances, ready, needed, drain_by } => {
                let names: Vec<&str> = instances.iter().map(InstanceId::as_str).collect();
                write!(f, "{ready} of {needed} replacement(s) Ready for {}", names.join(", "))?;
                match drain_by {
                    Some(by) => write!(f, "; the interruption notice drains them at {} ms regardless", by.as_millis()),
                    None => Ok(()),
                }
            }
            DrainWait::Standby { instances, until } => {
                let names: Vec<&str> = instances.iter().map(InstanceId::as_str).collect();
                write!(
                    f,
                    "standing by for {}: drained on an interruption notice, else the recommendation lapses at {} ms",
                    names.join(", "),
                    until.as_millis()
                )
            }
            DrainWait::OptedOut { node, pod, how } => write!(
                f,
                "{node} is not drained for a voluntary disruption: pod {pod} has {}; a confirmed interruption overrides it",
                how.annotation()
            ),
            DrainWait::BarePod { node, pod } => write!(
                f,
                "{node} is not drained for a move the booster chose: pod {pod} has no controller to recreate it"
            ),
        }
    }
}

/// A group waiting to drain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Waiting {
    /// The group.
    pub group: GroupName,
    /// Why.
    pub reason: DrainWait,
}

/// Replacement nodes claimed by one boost record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claim {
    /// The group.
    pub group: GroupName,
    /// The record's instances.
    pub instances: BTreeSet<InstanceId>,
    /// Nodes serving as its replacements (at most `added`).
    pub nodes: Vec<NodeName>,
    /// Replacements the record added.
    pub needed: u32,
}

impl Claim {
    /// Whether every planned replacement is Ready.
    pub(crate) fn complete(&self) -> bool {
        self.nodes.len() as u32 >= self.needed
    }
}

/// What drain planning decided.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchPlan {
    /// Batches to start now.
    pub batches: Vec<DrainBatch>,
    /// Drains past their deadline.
    pub timed_out: Vec<TimedOutDrain>,
    /// Groups that wait, and why.
    pub waiting: Vec<Waiting>,
    /// Replacement claims per open boost (the shell keeps CA from scaling these nodes down).
    pub(crate) claims: Vec<Claim>,
    /// Nodes with a confirmed notice that wait for their replacements but are not cordoned yet
    /// (NTH has not, or not yet): cordoned now, so nothing new lands on them meanwhile.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cordon_ahead: Vec<NodeName>,
    /// Instances still joining, chosen to give back boosted capacity AWS took first: terminated
    /// with decrement before they serve, once the drainer has checked again that they may go.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub give_back_joining: Vec<JoiningGiveBack>,
}

/// An instance still joining, terminated with decrement to give back the capacity a boost added
/// for an instance AWS took first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JoiningGiveBack {
    /// Its group.
    pub group: GroupName,
    /// The joining instance.
    pub instance: InstanceId,
    /// The instance AWS took.
    pub reclaimed: InstanceId,
}

/// Claims Ready replacement nodes for every ledger record, oldest record first, oldest node first.
/// One claim per record, in the ledger's order, so callers may pair them index by index.
pub(crate) fn claim_replacements(snapshot: &Snapshot, ledger: &BoostLedger, at_risk: &AtRiskSet) -> Vec<Claim> {
    let boosted = ledger.index();
    let risky = at_risk.instances();
    // Each candidate with whether a record has claimed it yet: a node is in one group's list only.
    let mut by_group: FastMap<&GroupName, Vec<(&Node, bool)>> = FastMap::default();
    for node in snapshot.nodes.values() {
        let Some(group) = node.group.as_ref() else {
            continue;
        };
        if !node.ready || node.cordoned || node.deleting_by_ca {
            continue;
        }
        let at_risk_or_boosted = node.instance.as_ref().is_some_and(|i| boosted.contains_key(i) || risky.contains(i));
        if !at_risk_or_boosted && !ledger.spent.contains(&node.name) {
            by_group.entry(group).or_default().push((node, false));
        }
    }
    for nodes in by_group.values_mut() {
        nodes.sort_by(|(a, _), (b, _)| a.created.cmp(&b.created).then_with(|| a.name.cmp(&b.name)));
    }

    let mut oldest_first: Vec<(usize, &BoostRecord)> = ledger.records.iter().enumerate().collect();
    oldest_first.sort_by_key(|(_, r)| r.at);
    let mut claims: Vec<(usize, Claim)> = oldest_first
        .into_iter()
        .map(|(k, record)| {
            // Its own group's new nodes, then those of the fallbacks its missing nodes moved to.
            // Parked nodes are needed but asked of no group: the batch waits for their retry.
            let parts = std::iter::once((&record.group, record.at, record.added, true))
                .chain(record.moved.iter().map(|p| (&p.group, p.at, p.added, p.asked())));
            let mut nodes: Vec<NodeName> = Vec::new();
            let mut needed = 0u32;
            for (group, since, added, asked) in parts {
                needed = needed.saturating_add(added);
                // An expired boost waits on nothing: it claims (and protects) no node.
                let Some(candidates) = by_group.get_mut(group).filter(|_| record.expired.is_none() && asked) else {
                    continue;
                };
                nodes.extend(
                    candidates
                        .iter_mut()
                        // creationTimestamp has whole seconds: a node that joined in the boost's
                        // own second must count, or a fast replacement would never be claimed.
                        .filter(|(n, taken)| n.created >= since.whole_second() && !*taken)
                        .take(added as usize)
                        .map(|(n, taken)| {
                            *taken = true;
                            n.name.clone()
                        }),
                );
            }
            (k, Claim { group: record.group.clone(), instances: record.instances.clone(), nodes, needed })
        })
        .collect();
    claims.sort_unstable_by_key(|(k, _)| *k);
    claims.into_iter().map(|(_, claim)| claim).collect()
}

/// Plans the next drain batches, timeouts and waits.
pub(crate) fn next_batches(view: &DrainView<'_>, policy: &Policy, now: Timestamp) -> BatchPlan {
    let DrainView { snapshot, at_risk, nodes: at_risk_nodes, state } = *view;
    let claims = claim_replacements(snapshot, &snapshot.ledger, at_risk);
    let mut claim_of: FastMap<&InstanceId, usize> =
        FastMap::with_capacity_and_hasher(claims.iter().map(|c| c.instances.len()).sum(), Default::default());
    claim_of.extend(claims.iter().enumerate().flat_map(|(k, c)| c.instances.iter().map(move |i| (i, k))));
    let records = snapshot.ledger.index();
    // Per record: terminations already promised a decrement by drains under way or planned now.
    let mut promised = vec![0u32; snapshot.ledger.records.len()];
    for d in state.in_progress.values().filter(|d| d.decrement) {
        if let Some(&k) = records.get(&d.instance) {
            promised[k] = promised[k].saturating_add(1);
        }
    }
    let mut plan = BatchPlan::default();

    for (node, started) in &state.in_progress {
        if now.since(started.started_at) >= policy.drain_timeout {
            plan.timed_out.push(TimedOutDrain {
                group: started.group.clone(),
                node: node.clone(),
                instance: started.instance.clone(),
                terminate: policy.terminate_after_drain_timeout && started.gives_back.is_none(),
                decrement: started.decrement,
                gives_back: started.gives_back.clone(),
            });
        }
    }

    let timed_out: BTreeSet<&NodeName> = plan.timed_out.iter().map(|t| &t.node).collect();
    let mut active: FastMap<&GroupName, u32> = FastMap::default();
    for (node, d) in &state.in_progress {
        if !timed_out.contains(node) {
            *active.entry(&d.group).or_default() += 1;
        }
    }

    // Hashed once: the candidates ask it for every at-risk node, and node names share long
    // prefixes that make each ordered lookup a string of byte comparisons.
    let draining: FastSet<&NodeName> = state.in_progress.keys().collect();
    for (group, instances) in &at_risk.by_group {
        let active = active.get(group).copied().unwrap_or(0);
        let mut candidates: Vec<_> = instances
            .values()
            .filter(|r| {
                !draining.contains(&r.node)
                    && !state.finished.contains_key(&r.instance)
                    && match records.get(&r.instance) {
                        Some(&k) => {
                            let record = &snapshot.ledger.records[k];
                            // A notice's deadline holds whatever became of the boost. A boost
                            // whose write's outcome is unknown waits for the scaler to read its
                            // group (its next tick): draining now could not give its node back.
                            !record.kept.contains(&r.instance)
                                && ((record.expired.is_none() && record.unconfirmed().is_none())
                                    || r.deadline.is_some())
                        }
                        // A notice no boost covers (its group is at its max, say) still drains
                        // before the instance goes; the pods land on room the cluster has.
                        None => r.deadline.is_some(),
                    }
            })
            .collect();
        // A standby drains only on the instance's own notice; its spare stays Ready meanwhile.
        let mut standing_by: BTreeMap<Timestamp, Vec<InstanceId>> = BTreeMap::new();
        candidates.retain(|r| {
            let standby = records.get(&r.instance).and_then(|&k| snapshot.ledger.records[k].standby.as_ref());
            match standby.filter(|_| r.deadline.is_none()) {
                Some(s) => {
                    standing_by.entry(s.until).or_default().push(r.instance.clone());
                    false
                }
                None => true,
            }
        });
        for (until, instances) in standing_by {
            plan.waiting.push(Waiting { group: group.clone(), reason: DrainWait::Standby { instances, until } });
        }
        candidates.retain(|r| match opted_out(at_risk_nodes.of(r), r) {
            Some(reason) => {
                plan.waiting.push(Waiting { group: group.clone(), reason });
                false
            }
            None => true,
        });
        if candidates.is_empty() {
            continue;
        }
        candidates.sort_by(|a, b| a.first_seen.cmp(&b.first_seen).then_with(|| a.instance.cmp(&b.instance)));

        // Nodes with a deadline drain as soon as their replacements are Ready, or once waiting
        // longer would leave their pods too little time; outside the voluntary-drain limits once
        // AWS confirms the notice (the instance goes anyway), within them while only a taint or an
        // Event says so. The rest wait for their replacements, within the limits.
        let mut due_now: Vec<(&AtRisk, bool)> = Vec::new();
        let mut ready: Vec<(&AtRisk, bool)> = Vec::new();
        let mut not_ready: BTreeMap<usize, (Vec<InstanceId>, &Claim, Option<Timestamp>)> = BTreeMap::new();
        for risk in candidates {
            let claim = records.get(&risk.instance).map(|&k| (claim_of[&risk.instance], k));
            let complete = claim.is_some_and(|(index, _)| claims[index].complete());
            let drain_by = risk.deadline.map(|d| latest_drain_start(at_risk_nodes.of(risk), d, policy));
            // Waiting only pays while the replacements can be Ready before the drain must start.
            let too_late = |by: Timestamp| match claim {
                Some((_, k)) => expected_ready(&snapshot.ledger.records[k], policy) > by,
                None => true,
            };
            match (complete, drain_by) {
                (true, Some(_)) if risk.confirmed => due_now.push((risk, false)),
                (true, _) => ready.push((risk, false)),
                (false, Some(by)) if (now >= by || too_late(by)) && risk.confirmed => due_now.push((risk, true)),
                (false, Some(by)) if now >= by => ready.push((risk, true)),
                (false, _) => {
                    if risk.confirmed && drain_by.is_some() && at_risk_nodes.of(risk).is_some_and(|n| !n.cordoned) {
                        plan.cordon_ahead.push(risk.node.clone());
                    }
                    if let Some((index, _)) = claim {
                        let entry = not_ready.entry(index).or_insert_with(|| (Vec::new(), &claims[index], None));
                        entry.0.push(risk.instance.clone());
                        entry.2 = match (entry.2, drain_by) {
                            (Some(a), Some(b)) => Some(a.min(b)),
                            (a, b) => a.or(b),
                        };
                    }
                }
            }
        }
        for (instances, claim, drain_by) in not_ready.into_values() {
            let reason = DrainWait::ReplacementNotReady {
                instances,
                ready: claim.nodes.len() as u32,
                needed: claim.needed,
                drain_by,
            };
            plan.waiting.push(Waiting { group: group.clone(), reason });
        }
        let mut target = |r: &AtRisk, early: bool| {
            let decrement = records.get(&r.instance).is_some_and(|&k| {
                let record = &snapshot.ledger.records[k];
                if record.returning.contains(&r.instance) || snapshot.ledger.returns_surplus(&r.instance) {
                    // Its return was counted before a call whose answer never came.
                    return true;
                }
                if record.raising_to.is_some() {
                    // Whether the boost's write applied is not known yet: nothing to return.
                    return false;
                }
                // Nodes chosen to give back for instances AWS took first hold their share too.
                let giving = u32::try_from(record.giving_back.len()).unwrap_or(u32::MAX);
                let decrement = record.returned.saturating_add(promised[k]).saturating_add(giving) < record.added;
                promised[k] = promised[k].saturating_add(u32::from(decrement));
                decrement
            });
            DrainTarget {
                node: r.node.clone(),
                instance: r.instance.clone(),
                cordon: !at_risk_nodes.of(r).is_some_and(|n| n.cordoned),
                decrement,
                deadline: r.deadline,
                early,
                gives_back: None,
            }
        };
        let mut nodes: Vec<DrainTarget> = due_now.into_iter().map(|(r, early)| target(r, early)).collect();
        if !ready.is_empty() {
            let slots = policy.max_concurrent_drains.saturating_sub(active);
            let until = state.last_batch_at.get(group).map(|last| last.plus(policy.time_between_drains));
            if slots == 0 {
                plan.waiting.push(Waiting { group: group.clone(), reason: DrainWait::ConcurrencyLimit });
            } else if let Some(until) = until.filter(|until| now < *until) {
                plan.waiting.push(Waiting { group: group.clone(), reason: DrainWait::Spacing { until } });
            } else {
                nodes.extend(ready.into_iter().take(slots as usize).map(|(r, early)| target(r, early)));
            }
        }
        if !nodes.is_empty() {
            plan.batches.push(DrainBatch { group: group.clone(), nodes });
        }
    }
    give_back_batches(snapshot, state, &mut plan);
    plan.claims = claims;
    plan
}

/// Drains for the nodes the scaler chose to give back boosted capacity AWS took first: each is
/// cordoned, drained and terminated with decrement, like an at-risk node with its replacement
/// Ready. Resumed from the ledger after a restart.
fn give_back_batches(snapshot: &Snapshot, state: &DrainState, plan: &mut BatchPlan) {
    let mut per_group: BTreeMap<&GroupName, Vec<DrainTarget>> = BTreeMap::new();
    for record in &snapshot.ledger.records {
        for (reclaimed, chosen) in &record.giving_back {
            let Some(name) = &chosen.node else {
                if !state.finished.contains_key(&chosen.instance) {
                    plan.give_back_joining.push(JoiningGiveBack {
                        group: record.group.clone(),
                        instance: chosen.instance.clone(),
                        reclaimed: reclaimed.clone(),
                    });
                }
                continue;
            };
            let Some(node) = snapshot.nodes.get(name).filter(|n| n.instance.as_ref() == Some(&chosen.instance)) else {
                continue;
            };
            if state.in_progress.contains_key(&node.name) || state.finished.contains_key(&chosen.instance) {
                continue;
            }
            per_group.entry(&record.group).or_default().push(DrainTarget {
                node: node.name.clone(),
                instance: chosen.instance.clone(),
                cordon: !node.cordoned,
                decrement: true,
                deadline: None,
                early: false,
                gives_back: Some(reclaimed.clone()),
            });
        }
    }
    for (group, nodes) in per_group {
        match plan.batches.iter_mut().find(|b| &b.group == group) {
            Some(batch) => batch.nodes.extend(nodes),
            None => plan.batches.push(DrainBatch { group: group.clone(), nodes }),
        }
    }
}

/// The last moment an at-risk `node` may start draining and still give each of its pods its grace
/// period, plus `--interruption-drain-lead` for the evictions to be sent and retried, before
/// `deadline`. A grace period counts for at most a spot notice's two minutes: any pod's owner
/// writes it, and an hour asked for would otherwise pull every deadline drain of the node (a
/// scheduled event's days ahead included) to now; no notice gives more anyway.
pub(crate) fn latest_drain_start(node: Option<&Node>, deadline: Timestamp, policy: &Policy) -> Timestamp {
    let longest_grace =
        node.and_then(|n| n.pods.iter().filter(|p| p.class.is_evictable()).map(Pod::grace).max()).unwrap_or_default();
    deadline.minus(longest_grace.min(INTERRUPTION_NOTICE).saturating_add(policy.interruption_drain_lead))
}

/// When a boost's replacements should be Ready: `--replacement-boot-time` after its latest write
/// (a move to a fallback group starts their boot over).
pub(crate) fn expected_ready(record: &BoostRecord, policy: &Policy) -> Timestamp {
    let last_write =
        record.moved.iter().filter(|p| p.asked() && p.added > 0).map(|p| p.at).fold(record.at, Timestamp::max);
    last_write.plus(policy.replacement_boot_time)
}

/// Why a voluntary drain leaves `risk`'s node alone: a pod on it that opted out, or, where the
/// booster itself chose the move (a return to spot, a rotation), a pod nothing recreates, exactly
/// as a give-back never takes such a node. A spot interruption or a scheduled event takes the
/// instance anyway, so those drain regardless, once AWS confirmed they can be real: a notice
/// anyone could have written never overrides an opt-out.
pub(crate) fn opted_out(node: Option<&Node>, risk: &AtRisk) -> Option<DrainWait> {
    if risk.confirmed && risk.kinds.iter().any(|k| k.drained_by_nth()) {
        return None;
    }
    let node = node?;
    let evictable = || node.pods.iter().filter(|p| p.class.is_evictable());
    let named = |p: &Pod| format!("{}/{}", p.namespace, p.name);
    if let Some(pod) = evictable().find(|p| p.opt_out.is_some()) {
        return Some(DrainWait::OptedOut { node: node.name.clone(), pod: named(pod), how: pod.opt_out? });
    }
    let chosen_by_us = !risk.kinds.is_empty() && risk.kinds.iter().all(|k| k.chosen_by_booster());
    let pod = evictable().find(|p| p.bare).filter(|_| chosen_by_us)?;
    Some(DrainWait::BarePod { node: node.name.clone(), pod: named(pod) })
}

/// The boosts to close: a record closes when none of its instances has a node any more and each
/// one's departure is accounted for (settled by the booster, or gone from its group with nothing
/// left to give back; see [`super::give_back`]); its claimed replacements become spent. Spent
/// names of nodes that are gone are forgotten, so the ledger stays as small as the cluster.
pub(crate) fn close_finished_boosts(snapshot: &Snapshot, open: &BoostLedger, at_risk: &AtRiskSet) -> Vec<LedgerEdit> {
    let mut edits = Vec::new();
    if !open.records.is_empty() {
        let alive = snapshot.live_instances();
        let mut closed = Vec::new();
        for record in &open.records {
            let members = snapshot.groups.get(&record.group).and_then(|g| g.members.as_ref());
            let accounted = |i: &InstanceId| {
                record.settled.contains(i) || members.is_none_or(|m| !m.contains(i) && record.returned >= record.added)
            };
            if !record.instances.iter().any(|i| alive.contains(i) || !accounted(i)) {
                closed.push(record);
            }
        }
        // Claims cost a pass over every node: only worth it when some boost closes.
        if !closed.is_empty() {
            let claims = claim_replacements(snapshot, open, at_risk);
            for record in closed {
                let claim = claims.iter().find(|c| c.instances == record.instances && c.group == record.group);
                let spent = claim.map(|c| c.nodes.clone()).unwrap_or_default();
                edits.push(LedgerEdit::Close { id: record.id(), spent });
            }
        }
    }
    let gone: Vec<NodeName> = open.spent.iter().filter(|n| !snapshot.nodes.contains_key(*n)).cloned().collect();
    if !gone.is_empty() {
        edits.push(LedgerEdit::Forget(Forgotten::Spent(gone)));
    }
    edits
}

/// The pods a drain evicts, in order: ordinary pods first, critical ones last; DaemonSet, mirror
/// and finished pods are left alone.
pub(crate) fn eviction_order(node: &Node) -> Vec<&Pod> {
    eviction_order_of(&node.pods, &[])
}

/// [`eviction_order`] of a node's pods as a view shows them (`seen`) and as a live read found
/// them (`read`), each pod once.
pub(crate) fn eviction_order_of<'p>(seen: &'p [Pod], read: &'p [Pod]) -> Vec<&'p Pod> {
    // Sized for every pod: growing it pod by pod costs more than the sort, over thousands of nodes.
    let mut pods: Vec<&Pod> = Vec::with_capacity(seen.len() + read.len());
    pods.extend(seen.iter().filter(|p| p.class.is_evictable()));
    pods.extend(read.iter().filter(|p| p.class.is_evictable() && !seen.iter().any(|s| s.uid == p.uid)));
    pods.sort_by(|a, b| {
        (a.class == PodClass::Critical)
            .cmp(&(b.class == PodClass::Critical))
            .then_with(|| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)))
    });
    pods
}

/// How long to wait before retrying an eviction a PodDisruptionBudget refused `refusals` times
/// in a row: doubling from `--eviction-backoff-initial`, capped at `--eviction-backoff-max`.
/// Callers reset the count when an eviction on the same node succeeds: the budget is moving.
pub(crate) fn eviction_backoff(refusals: u32, policy: &Policy) -> Duration {
    let factor = 1u32.checked_shl(refusals.saturating_sub(1)).unwrap_or(u32::MAX);
    policy.eviction_backoff_initial.saturating_mul(factor).min(policy.eviction_backoff_max)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::drain_state::{DrainStarted, FinishedDrain};
    use crate::core::flag_set::FlagSet;
    use crate::core::ledger_edit::apply_all;
    use crate::core::model::{Evidence, Group, Signal, SignalKind};
    use crate::core::signals::{fold_signals, fold_signals_with_nodes};
    use crate::core::Pending;

    const NOW: Timestamp = Timestamp::from_millis(600_000);

    impl DrainStarted {
        /// A drain of `instance` in group `a`, started at `at`.
        fn test(instance: &str, at: Timestamp, decrement: bool) -> DrainStarted {
            DrainStarted {
                group: "a".into(),
                instance: instance.into(),
                started_at: at,
                decrement,
                deadline: None,
                gives_back: None,
            }
        }
    }

    /// Group `a` with n1..n4 (created at 0), n1 and n2 at risk and boosted at 10s by `added`.
    fn boosted(added: u32) -> Snapshot {
        let mut s = Snapshot::default().with_group(Group::test("a").desired(4 + added));
        for i in 1..=4 {
            s = s.with_node(Node::test(&format!("n{i}"), "a").with_pods(2, 500, 1 << 30));
        }
        s = s.with_signal(Signal::rebalance("n1", 1_000)).with_signal(Signal::rebalance("n2", 2_000));
        s.nodes.get_mut(&NodeName::from("n1")).unwrap().cordoned = true;
        s.ledger.record(BoostRecord { before: 4, ..BoostRecord::test("a", &["i-n1", "i-n2"], added, 10_000) });
        s
    }

    fn plan(s: &Snapshot, state: &DrainState, policy: &Policy) -> BatchPlan {
        let (at_risk, nodes) = fold_signals_with_nodes(s, policy, NOW);
        next_batches(&DrainView { snapshot: s, at_risk: &at_risk, nodes: &nodes, state }, policy, NOW)
    }

    #[test]
    fn a_replacement_created_in_the_boosts_own_second_is_claimed() {
        // creationTimestamp 10 s flat; the boost was decided at 10.4 s.
        let mut s = boosted(1);
        s.ledger.records[0].at = Timestamp::from_millis(10_400);
        s = s.with_node(Node::test("r1", "a").created_at(10_000));
        let at_risk = fold_signals(&s, &Policy::default(), NOW);
        let claims = claim_replacements(&s, &s.ledger, &at_risk);
        assert_eq!(claims[0].nodes, vec![NodeName::from("r1")]);
    }

    #[test]
    fn waits_until_every_planned_replacement_is_ready() {
        let mut s = boosted(2).with_node(Node::test("new1", "a").created_at(20_000));
        s = s.with_node(Node::test("new2", "a").created_at(20_000).not_ready());
        let p = plan(&s, &DrainState::default(), &Policy::default());
        assert!(p.batches.is_empty());
        assert_eq!(
            p.waiting[0].reason,
            DrainWait::ReplacementNotReady {
                instances: vec!["i-n1".into(), "i-n2".into()],
                ready: 1,
                needed: 2,
                drain_by: None
            }
        );

        s.nodes.get_mut(&NodeName::from("new2")).unwrap().ready = true;
        let p = plan(&s, &DrainState::default(), &Policy::default());
        assert_eq!(p.batches.len(), 1);
        let targets: Vec<_> = p.batches[0].nodes.iter().map(|t| (t.node.as_str(), t.cordon)).collect();
        assert_eq!(targets, vec![("n1", false), ("n2", true)]);
    }

    /// Group `a` with n1..n4; n1 has a spot interruption notice observed at `at` (two minutes'
    /// warning) and a boost of one node for it; no replacement has joined.
    fn interrupted(at: i64) -> Snapshot {
        let mut s = Snapshot::default().with_group(Group::test("a").desired(5));
        for i in 1..=4 {
            s = s.with_node(Node::test(&format!("n{i}"), "a").with_pods(2, 500, 1 << 30));
        }
        s = s.with_signal(Signal::interruption("n1", at));
        s.nodes.get_mut(&NodeName::from("n1")).unwrap().cordoned = true;
        // Decided a second after the notice: the nodes already there are not its replacements.
        s.ledger.record(BoostRecord { before: 4, ..BoostRecord::test("a", &["i-n1"], 1, at + 1_000) });
        s
    }

    fn plan_at(s: &Snapshot, state: &DrainState, policy: &Policy, now: Timestamp) -> BatchPlan {
        let (at_risk, nodes) = fold_signals_with_nodes(s, policy, now);
        next_batches(&DrainView { snapshot: s, at_risk: &at_risk, nodes: &nodes, state }, policy, now)
    }

    #[test]
    fn a_move_the_booster_chose_never_evicts_a_pod_nothing_recreates_but_aws_s_notice_does() {
        let mut node = Node::test("n1", "a").with_pods(2, 100, 1 << 20);
        node.pods[1].bare = true;
        let risk = |kinds: &[SignalKind], confirmed: bool| {
            let mut set = FlagSet::default();
            kinds.iter().for_each(|k| set.insert(*k));
            AtRisk {
                instance: "i-n1".into(),
                node: "n1".into(),
                kinds: set,
                first_seen: Timestamp::EPOCH,
                evidence: FlagSet::default(),
                deadline: None,
                confirmed,
            }
        };
        for kind in [SignalKind::BackToSpot, SignalKind::Rotation] {
            let wait = opted_out(Some(&node), &risk(&[kind], false));
            assert!(
                matches!(&wait, Some(DrainWait::BarePod { pod, .. }) if pod.ends_with(node.pods[1].name.as_str())),
                "{wait:?}"
            );
        }
        // AWS's warning or notice about the instance: the pod goes with it either way, evicted first.
        assert_eq!(opted_out(Some(&node), &risk(&[SignalKind::Rebalance], false)), None);
        assert_eq!(opted_out(Some(&node), &risk(&[SignalKind::BackToSpot, SignalKind::SpotInterruption], true)), None);
    }

    #[test]
    fn only_a_notice_aws_confirmed_overrides_an_opt_out() {
        let mut s = interrupted(0);
        s.nodes.get_mut(&NodeName::from("n1")).unwrap().pods[0].opt_out = Some(OptOut::DoNotDisrupt);
        let late = Timestamp::from_millis(60_000);
        let p = plan_at(&s, &DrainState::default(), &Policy::default(), late);
        assert!(p.batches.is_empty(), "spot, but only NTH's taint says it is interrupted: a warning");
        s.spot_interrupted.insert("i-n1".into());
        let p = plan_at(&s, &DrainState::default(), &Policy::default(), late);
        assert_eq!(p.batches.len(), 1, "EC2 marked its spot request: the opt-out yields: {p:?}");

        // The same taint on an instance EC2 says is on-demand (it has no spot request to mark).
        s.instances.get_mut(&InstanceId::from("i-n1")).unwrap().lifecycle = crate::core::InstanceLifecycle::OnDemand;
        s.spot_interrupted.clear();
        let p = plan_at(&s, &DrainState::default(), &Policy::default(), late);
        assert!(p.batches.is_empty(), "{p:?}");
        assert!(matches!(p.waiting[0].reason, DrainWait::OptedOut { .. }), "{p:?}");
    }

    #[test]
    fn an_interrupted_node_drains_before_its_deadline_when_the_replacement_is_late() {
        // Notice at 0: the instance goes at 120 s. Pods take 30 s (the default grace) and the
        // lead is 60 s, so the drain must start by 30 s, replacement or not.
        let s = interrupted(0);
        let policy = Policy::default();
        let p = plan_at(&s, &DrainState::default(), &policy, Timestamp::from_millis(29_999));
        assert!(p.batches.is_empty(), "{p:?}");
        assert_eq!(
            p.waiting[0].reason,
            DrainWait::ReplacementNotReady {
                instances: vec!["i-n1".into()],
                ready: 0,
                needed: 1,
                drain_by: Some(Timestamp::from_millis(30_000)),
            }
        );
        let p = plan_at(&s, &DrainState::default(), &policy, Timestamp::from_millis(30_000));
        let target = &p.batches[0].nodes[0];
        assert_eq!((target.node.as_str(), target.early, target.decrement), ("n1", true, true));
        assert_eq!(target.deadline, Some(Timestamp::from_millis(120_000)));
    }

    #[test]
    fn a_confirmed_notice_drains_at_once_when_its_replacements_cannot_be_ready_in_time() {
        // Boost at 1 s; a replacement takes 60 s to be Ready, after the 30 s the drain must start
        // by: waiting would only take time from the pods.
        let mut s = interrupted(0);
        s.spot_interrupted.insert("i-n1".into());
        let p = plan_at(&s, &DrainState::default(), &Policy::default(), Timestamp::from_millis(1_500));
        let target = &p.batches[0].nodes[0];
        assert_eq!((target.node.as_str(), target.early, target.decrement), ("n1", true, true), "{p:?}");

        // Replacements that boot in 20 s are Ready by 21 s: worth the wait, and NTH's cordon not
        // there yet is ours meanwhile.
        let quick = Policy { replacement_boot_time: Duration::from_secs(20), ..Policy::default() };
        s.nodes.get_mut(&NodeName::from("n1")).unwrap().cordoned = false;
        let p = plan_at(&s, &DrainState::default(), &quick, Timestamp::from_millis(1_500));
        assert!(p.batches.is_empty(), "{p:?}");
        assert_eq!(p.cordon_ahead, vec![NodeName::from("n1")]);
        // A notice only NTH's taint vouches for is never cordoned ahead nor drained early.
        s.spot_interrupted.clear();
        let p = plan_at(&s, &DrainState::default(), &Policy::default(), Timestamp::from_millis(1_500));
        assert!(p.batches.is_empty() && p.cordon_ahead.is_empty(), "{p:?}");
    }

    #[test]
    fn a_confirmed_notice_no_boost_covers_drains_at_once() {
        let mut s = interrupted(0);
        s.ledger.records.clear();
        s.spot_interrupted.insert("i-n1".into());
        let p = plan_at(&s, &DrainState::default(), &Policy::default(), Timestamp::from_millis(1_000));
        let target = &p.batches[0].nodes[0];
        assert!(target.early && !target.decrement, "nothing is coming: {target:?}");
    }

    #[test]
    fn a_longer_grace_period_starts_the_drain_earlier() {
        let mut s = interrupted(0);
        s.nodes.get_mut(&NodeName::from("n1")).unwrap().pods[1].grace_seconds = 50;
        assert!(plan_at(&s, &DrainState::default(), &Policy::default(), Timestamp::from_millis(9_999))
            .batches
            .is_empty());
        let p = plan_at(&s, &DrainState::default(), &Policy::default(), Timestamp::from_millis(10_000));
        assert_eq!(p.batches[0].nodes[0].node.as_str(), "n1", "120 - 50 - 60 = 10 s: due");
    }

    #[test]
    fn a_grace_period_counts_for_at_most_a_notice_s_two_minutes() {
        // A scheduled event an hour ahead; a tenant's pod asks a day to stop.
        let mut s = interrupted(0);
        s.signals[0].kind = SignalKind::Scheduled;
        s.scheduled_events.insert("i-n1".into(), Timestamp::from_millis(3_600_000));
        s.nodes.get_mut(&NodeName::from("n1")).unwrap().pods[1].grace_seconds = 86_400;
        let by = Timestamp::from_millis(3_600_000 - 120_000 - 60_000);
        let before = Timestamp::from_millis(by.as_millis() - 1);
        assert!(plan_at(&s, &DrainState::default(), &Policy::default(), before).batches.is_empty());
        assert_eq!(plan_at(&s, &DrainState::default(), &Policy::default(), by).batches.len(), 1);
    }

    #[test]
    fn the_notices_own_time_is_the_deadline() {
        // NTH said the instance goes at 45 s: due at 45 - 30 - 60 < 0, so at once.
        let mut s = interrupted(0);
        s.signals[0].notice_deadline = Some(Timestamp::from_millis(45_000));
        let p = plan_at(&s, &DrainState::default(), &Policy::default(), Timestamp::from_millis(1_000));
        assert!(p.batches[0].nodes[0].early);
    }

    #[test]
    fn an_unconfirmed_event_dated_in_the_past_waits_for_its_replacement() {
        // An Event alone, dated so its deadline has passed (the watch clamps it to two minutes
        // before it saw it), on a cordoned spot node with no opted-out pod, boosted, its
        // replacement not Ready: EC2 has not confirmed it, so its time moves nothing forward.
        let mut s = interrupted(0);
        let seen = Timestamp::from_millis(200_000);
        s.signals[0].evidence = Evidence::Event;
        s.signals[0].observed_at = seen;
        s.signals[0].notice_deadline = Some(seen.minus(INTERRUPTION_NOTICE));
        s.instances.get_mut(&InstanceId::from("i-n1")).unwrap().lifecycle = crate::core::InstanceLifecycle::Spot;
        s.ledger.records[0].at = seen;
        let soon = seen.plus(Duration::from_secs(1));
        let p = plan_at(&s, &DrainState::default(), &Policy::default(), soon);
        assert!(p.batches.is_empty(), "drained ahead of its replacement on an Event's word: {p:?}");
        // Two minutes after it was seen, less the grace and the lead, it drains as any notice.
        let by =
            latest_drain_start(s.nodes.get(&NodeName::from("n1")), seen.plus(INTERRUPTION_NOTICE), &Policy::default());
        assert_eq!(plan_at(&s, &DrainState::default(), &Policy::default(), by).batches.len(), 1);
        // Once EC2 confirms it, the Event's time stands: it drains at once.
        s.spot_interrupted.insert("i-n1".into());
        let p = plan_at(&s, &DrainState::default(), &Policy::default(), soon);
        assert!(p.batches[0].nodes[0].early, "{p:?}");
    }

    #[test]
    fn a_rebalance_recommendation_still_waits_for_its_replacement() {
        let p = plan_at(&boosted(1), &DrainState::default(), &Policy::default(), Timestamp::from_millis(3_600_000));
        assert!(p.batches.is_empty());
        assert!(matches!(p.waiting[0].reason, DrainWait::ReplacementNotReady { drain_by: None, .. }));
    }

    #[test]
    fn only_a_notice_aws_confirms_drains_outside_the_voluntary_drain_limits() {
        let mut s = interrupted(0);
        let policy = Policy { max_concurrent_drains: 1, ..Policy::default() };
        let mut state = DrainState::default();
        state.in_progress.insert("n3".into(), DrainStarted::test("i-n3", NOW, false));
        state.last_batch_at.insert("a".into(), Timestamp::from_millis(29_000));
        // NTH's taint alone (or an Event): a warning, drained within the limits.
        let p = plan_at(&s, &state, &policy, Timestamp::from_millis(30_000));
        assert!(p.batches.is_empty(), "{p:?}");
        assert_eq!(p.waiting[0].reason, DrainWait::ConcurrencyLimit);
        state.in_progress.clear();
        let p = plan_at(&s, &state, &policy, Timestamp::from_millis(31_000));
        assert!(p.batches.is_empty(), "--time-between-drains holds it too: {p:?}");
        // EC2 marked the spot request for termination: the instance goes whatever the limits say.
        state.in_progress.insert("n3".into(), DrainStarted::test("i-n3", NOW, false));
        s.spot_interrupted.insert("i-n1".into());
        let p = plan_at(&s, &state, &policy, Timestamp::from_millis(30_000));
        assert_eq!(p.batches[0].nodes[0].node.as_str(), "n1");
        assert!(p.batches[0].nodes[0].early);
    }

    #[test]
    fn a_notice_no_boost_covers_still_drains_by_its_deadline_without_decrement() {
        let mut s = interrupted(0);
        s.ledger.records.clear();
        assert!(plan_at(&s, &DrainState::default(), &Policy::default(), Timestamp::from_millis(1_000))
            .batches
            .is_empty());
        let p = plan_at(&s, &DrainState::default(), &Policy::default(), Timestamp::from_millis(30_000));
        let target = &p.batches[0].nodes[0];
        assert!(target.early && !target.decrement, "{target:?}");
    }

    #[test]
    fn a_ready_replacement_drains_an_interrupted_node_at_once() {
        let s = interrupted(0).with_node(Node::test("r1", "a").created_at(30_000));
        let p = plan_at(&s, &DrainState::default(), &Policy::default(), Timestamp::from_millis(31_000));
        let target = &p.batches[0].nodes[0];
        assert!(!target.early && target.decrement && target.deadline.is_some());
    }

    #[test]
    fn only_as_many_terminations_decrement_as_the_boost_added() {
        let mut s = boosted(1).with_node(Node::test("new1", "a").created_at(20_000));
        let p = plan(&s, &DrainState::default(), &Policy::default());
        let decrements: Vec<bool> = p.batches[0].nodes.iter().map(|t| t.decrement).collect();
        assert_eq!(decrements, vec![true, false]);

        apply_all(
            &mut s.ledger,
            &[
                LedgerEdit::BeginReturn { boosted: "i-n1".into(), terminated: "i-n1".into() },
                LedgerEdit::Answer {
                    write: Pending::Return { boosted: "i-n1".into(), terminated: "i-n1".into() },
                    applied: true,
                },
            ],
        );
        s.nodes.remove(&NodeName::from("n1"));
        let p = plan(&s, &DrainState::default(), &Policy::default());
        assert!(!p.batches[0].nodes[0].decrement, "the one node added was already given back");
    }

    #[test]
    fn nodes_older_than_the_boost_are_not_replacements() {
        let s = boosted(1).with_node(Node::test("old", "a").created_at(5_000));
        assert!(plan(&s, &DrainState::default(), &Policy::default()).batches.is_empty());
    }

    #[test]
    fn a_boost_that_added_nothing_drains_at_once() {
        let p = plan(&boosted(0), &DrainState::default(), &Policy::default());
        assert_eq!(p.batches[0].nodes.len(), 2);
    }

    #[test]
    fn batches_respect_concurrency_and_spacing() {
        let s = boosted(0);
        let policy = Policy { max_concurrent_drains: 1, ..Policy::default() };
        let p = plan(&s, &DrainState::default(), &policy);
        assert_eq!(p.batches[0].nodes.len(), 1);

        let mut state = DrainState::default();
        state.in_progress.insert("n1".into(), DrainStarted::test("i-n1", NOW, true));
        state.last_batch_at.insert("a".into(), NOW);
        assert_eq!(plan(&s, &state, &policy).waiting[0].reason, DrainWait::ConcurrencyLimit);

        state.in_progress.clear();
        state.finished.insert("i-n1".into(), FinishedDrain::Drained);
        let until = NOW.plus(policy.time_between_drains);
        assert_eq!(plan(&s, &state, &policy).waiting[0].reason, DrainWait::Spacing { until });
    }

    #[test]
    fn timed_out_drains_are_reported_and_terminated_only_when_asked() {
        let s = boosted(0);
        let mut state = DrainState::default();
        let started = Timestamp::from_millis(NOW.as_millis() - 600_000);
        state.in_progress.insert("n1".into(), DrainStarted::test("i-n1", started, false));
        let p = plan(&s, &state, &Policy::default());
        assert_eq!(p.timed_out.len(), 1);
        assert!(!p.timed_out[0].terminate);
        assert_eq!(p.batches[0].nodes.len(), 1, "the timed-out slot is free again");
        let p = plan(&s, &state, &Policy { terminate_after_drain_timeout: true, ..Policy::default() });
        assert!(p.timed_out[0].terminate);
    }

    #[test]
    fn ca_deletions_are_never_drained() {
        let mut s = boosted(0);
        s.nodes.get_mut(&NodeName::from("n2")).unwrap().deleting_by_ca = true;
        let p = plan(&s, &DrainState::default(), &Policy::default());
        assert_eq!(p.batches[0].nodes.len(), 1);
        assert_eq!(p.batches[0].nodes[0].node.as_str(), "n1");
    }

    #[test]
    fn a_hand_edited_ledger_with_huge_counts_plans_without_overflow() {
        let mut s = boosted(1).with_node(Node::test("new1", "a").created_at(20_000));
        s.ledger.records[0].added = u32::MAX;
        s.ledger.records[0].returned = u32::MAX - 1;
        let mut state = DrainState::default();
        state.in_progress.insert("n3".into(), DrainStarted::test("i-n1", NOW, true));
        let p = plan(&s, &state, &Policy::default());
        assert!(p.waiting.iter().any(|w| matches!(w.reason, DrainWait::ReplacementNotReady { .. })), "{p:?}");
    }

    #[test]
    fn closing_a_boost_spends_its_replacements() {
        let mut s = boosted(1).with_node(Node::test("new1", "a").created_at(20_000));
        s.nodes.remove(&NodeName::from("n1"));
        s.nodes.remove(&NodeName::from("n2"));
        let at_risk = fold_signals(&s, &Policy::default(), NOW);
        let edits = close_finished_boosts(&s, &s.ledger, &at_risk);
        assert_eq!(edits, vec![LedgerEdit::Close { id: s.ledger.records[0].id(), spent: vec!["new1".into()] }]);
        let mut ledger = s.ledger.clone();
        apply_all(&mut ledger, &edits);
        assert!(ledger.records.is_empty());
        assert_eq!(ledger.spent, BTreeSet::from(["new1".into()]));
    }

    #[test]
    fn eviction_order_and_backoff() {
        let mut node = Node::test("n", "a");
        node.pods = vec![
            Pod::test("z-critical", 1, 1).class(PodClass::Critical),
            Pod::test("b", 1, 1),
            Pod::test("ds", 1, 1).class(PodClass::DaemonSet),
            Pod::test("a", 1, 1),
            Pod::test("mirror", 1, 1).class(PodClass::Mirror),
            Pod::test("done", 1, 1).class(PodClass::Finished),
        ];
        let names: Vec<_> = eviction_order(&node).iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, vec!["a", "b", "z-critical"]);

        let p = Policy::default();
        let waits: Vec<u64> = (1..=6).map(|n| eviction_backoff(n, &p).as_secs()).collect();
        assert_eq!(waits, vec![1, 2, 4, 8, 10, 10]);
        assert_eq!(eviction_backoff(200, &p), p.eviction_backoff_max);
    }
}
