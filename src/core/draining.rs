//! The drainer's one entry point: everything a draining pass decides, from one snapshot and the
//! drains under way. Which drains time out and which batches start (`next_batches`), which
//! replacement nodes gain or lose the scale-down protection, which drains end (drained, or stopped
//! by an operator's uncordon), which pods are due for eviction on every draining node (none while
//! its backoff runs), and the drain state once all that is carried out. The worker executes the
//! plan and folds what happened back in with [`DrainingPlan::withdraw`] and
//! [`DrainState::record_round`]; it decides nothing itself.

use std::cell::OnceCell;
use std::collections::BTreeSet;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::drain_batches::{eviction_backoff, eviction_order_of, next_batches, BatchPlan, DrainView, TimedOutDrain};
use super::drain_state::{DrainStarted, DrainState, FinishedDrain, NodeEvictions};
use super::identity;
use super::model::{
    GroupName, InstanceId, Namespace, Node, NodeName, OwnerUid, Pod, PodClass, PodName, PodUid, SignalKind, Snapshot,
    Timestamp, INTERRUPTION_NOTICE,
};
use super::policy::Policy;
use super::signals::fold_signals_with_nodes;

/// One pod to evict, named as its eviction is: conditioned on the UID.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodToEvict {
    /// Namespace.
    pub namespace: Namespace,
    /// Name.
    pub name: PodName,
    /// UID.
    pub uid: PodUid,
    /// The controller that recreates it.
    #[serde(default)]
    pub owner: Option<OwnerUid>,
}

impl PodToEvict {
    /// The eviction of `pod`.
    pub fn of(pod: &Pod) -> PodToEvict {
        PodToEvict {
            namespace: pod.namespace.clone(),
            name: pod.name.clone(),
            uid: pod.uid.clone(),
            owner: pod.owner.clone(),
        }
    }
}

/// The evictions due on one draining node in this pass: ordinary pods first, critical ones once
/// no ordinary pod is left, never one already evicted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EvictionRound {
    /// The node.
    pub node: NodeName,
    /// Its group.
    pub group: GroupName,
    /// The pods, in eviction order.
    pub pods: Vec<PodToEvict>,
    /// How many of the drain's pods are already evicted or deleted: `pods[0]` is the node's pod
    /// of that rank in its whole drain, which is how its turn compares with other nodes' pods.
    #[serde(default)]
    pub gone: usize,
    /// When the node's instance goes, for a drain against a notice: rounds are sent nearest
    /// deadline first, across nodes and groups.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<Timestamp>,
}

/// A pod a PodDisruptionBudget still refused on a node whose instance goes at a deadline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldPod {
    /// The pod, named as its deletion is: conditioned on the UID.
    pub pod: PodToEvict,
    /// The budget that refused its last eviction, as the API server named it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<String>,
}

/// A pod to delete gracefully before its instance goes (`--interruption-force-at-deadline`): a
/// DELETE with its grace period, never shorter than the time left allows, not an eviction.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForcedDeletion {
    /// The node.
    pub node: NodeName,
    /// Its group.
    pub group: GroupName,
    /// The pod and the budget that held it.
    pub held: HeldPod,
    /// The grace period the DELETE gives: the pod's own, cut to end `--interruption-force-margin`
    /// before the deadline.
    pub grace_seconds: u32,
    /// When the instance goes.
    pub deadline: Timestamp,
}

/// The pods still on a node when its deadline came, each with the budget that last refused it
/// (none for a pod still waiting out its node's backoff): what the instance's end kills, told
/// once per drain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldAtDeadline {
    /// The node.
    pub node: NodeName,
    /// Its group.
    pub group: GroupName,
    /// The pods, each with the budget that held it.
    pub pods: Vec<HeldPod>,
}

/// How a drain ends in this pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "how")]
pub enum HowDrainEnded {
    /// No evictable pod is left.
    Drained {
        /// The node is still there, so its instance is terminated.
        terminate: bool,
        /// That termination gives a boosted node back.
        decrement: bool,
    },
    /// An operator uncordoned the node mid-drain: the drain stops for good and the instance is
    /// kept (noted in the ledger, so no later plan drains it again).
    Uncordoned,
    /// An operator opted the node out mid-drain ([`crate::core::NODE_OPT_OUT`]): the drain stops
    /// and the instance is kept, as for an uncordon.
    OptedOut,
}

/// A drain that ends in this pass.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndedDrain {
    /// The node.
    pub node: NodeName,
    /// Its group.
    pub group: GroupName,
    /// Its instance.
    pub instance: InstanceId,
    /// When the drain started.
    pub started_at: Timestamp,
    /// The instance AWS took first whose boosted node this drain gives back.
    pub gives_back: Option<InstanceId>,
    /// How it ends.
    pub(crate) ending: HowDrainEnded,
    /// It was drained for a rebalance recommendation alone: no interruption notice for its
    /// instance by now (what `needless_drains_total` counts).
    #[serde(default)]
    pub recommendation_only: bool,
}

/// Everything one draining pass decided.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DrainingPlan {
    /// Batches to start, drains past their deadline, groups that wait, replacement claims.
    pub drains: BatchPlan,
    /// Claimed replacement nodes to protect from Cluster Autoscaler's scale-down (recorded in the
    /// ledger before the patch: [`crate::core::LedgerEdit::Protect`]).
    pub protect: Vec<NodeName>,
    /// Nodes the booster protected that no open boost claims any more: their protection is
    /// lifted, then forgotten ([`crate::core::LedgerEdit::Unprotect`]).
    pub(crate) unprotect: Vec<NodeName>,
    /// Drains that end, in node order.
    pub ended: Vec<EndedDrain>,
    /// Evictions due now, nearest deadline first, then in node order (the batches started in this
    /// pass included).
    pub evictions: Vec<EvictionRound>,
    /// Pods to delete gracefully before their instance goes (`--interruption-force-at-deadline`).
    pub force: Vec<ForcedDeletion>,
    /// Pods budgets held on nodes whose deadline has come, told once per drain.
    pub held_at_deadline: Vec<HeldAtDeadline>,
    /// Drains with nothing left to evict as far as the view shows: no drain ends before a live
    /// read of its node's pods, made after its cordon, finds none. The worker reads each and
    /// folds it in with [`DrainState::record_live_read`] for the next pass.
    pub verify: Vec<NodeName>,
    /// The drain state once every decision above is carried out.
    pub next: DrainState,
}

/// What one eviction call came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EvictionResult {
    /// Evicted.
    Evicted,
    /// Already gone (or replaced by another pod under the name).
    Gone,
    /// Refused by a PodDisruptionBudget, named when the API server said which.
    Blocked {
        /// The budget.
        budget: Option<String>,
    },
    /// Failed or unanswered: tried again next round, with no backoff.
    Failed,
}

/// The backoff a round with refusals starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refusal {
    /// How long until the node's pods are tried again.
    pub wait: Duration,
    /// Some pods went: the budget is moving, so the wait starts over instead of doubling.
    pub(crate) moved: bool,
    /// The drain's first refusal (the one worth telling).
    pub first: bool,
}

/// How near two nodes' deadlines are for their evictions to go out as one wave.
const ONE_WAVE: Duration = Duration::from_secs(10);

/// The order in which to send `rounds`' evictions, as (round, pod) indexes: nearest deadline
/// first, and within a wave of nodes whose deadlines fall within [`ONE_WAVE`] of its first, every
/// node's first pod, then every node's second, and so on, counted over the whole drain (a node
/// with pods already gone waits for the others to catch up). A node's pods mostly belong to the
/// same few apps, and the API server takes the evictions of one PodDisruptionBudget one at a time
/// (a conflict on the budget's status is retried half a second later): sent node by node, a
/// storm's calls would queue on a few budgets while the others wait; and a node whose first pod
/// has not gone must not wait behind another's tenth.
pub fn eviction_sequence(rounds: &[EvictionRound]) -> Vec<(usize, usize)> {
    let mut order: Vec<usize> = (0..rounds.len()).collect();
    // No deadline (a voluntary drain) goes after every deadline.
    order.sort_by_key(|k| (rounds[*k].deadline.is_none(), rounds[*k].deadline));
    let mut sequence = Vec::with_capacity(rounds.iter().map(|r| r.pods.len()).sum());
    let mut rest = &order[..];
    while let Some(first) = rest.first() {
        let opens = rounds[*first].deadline;
        let wave_len = rest
            .iter()
            .take_while(|k| match (opens, rounds[**k].deadline) {
                (Some(opens), Some(at)) => at.since(opens) <= ONE_WAVE,
                (a, b) => a.is_none() && b.is_none(),
            })
            .count();
        let (wave, later) = rest.split_at(wave_len);
        let mut ranked: Vec<(usize, usize, usize)> = wave
            .iter()
            .enumerate()
            .flat_map(|(at, k)| (0..rounds[*k].pods.len()).map(move |p| (rounds[*k].gone + p, at, p)))
            .collect();
        ranked.sort_unstable();
        sequence.extend(ranked.into_iter().map(|(_, at, p)| (wave[at], p)));
        rest = later;
    }
    sequence
}

/// Plans one draining pass. `marked`: the nodes that carry the booster's scale-down marker now
/// (anyone may write it: it only tells whether the booster's own protection is still in place).
pub fn plan_draining(
    snapshot: &Snapshot,
    marked: &BTreeSet<NodeName>,
    state: &DrainState,
    policy: &Policy,
    now: Timestamp,
) -> DrainingPlan {
    let (at_risk, nodes) = fold_signals_with_nodes(snapshot, policy, now);
    let mut drains = next_batches(&DrainView { snapshot, at_risk: &at_risk, nodes: &nodes, state }, policy, now);
    // Every termination verifies its Node against EC2 in the pass that decides it: a Node that
    // no longer does (EC2 names the instance otherwise, or another Node is believed for it) is
    // never terminated, whatever the ledger or the drain's start said.
    let contested = OnceCell::new();
    let verified =
        |n: &Node| identity::verify(snapshot, contested.get_or_init(|| identity::contested(snapshot)), n).is_ok();
    for t in drains.timed_out.iter_mut().filter(|t| t.terminate) {
        let node = snapshot.nodes.get(&t.node).filter(|n| n.instance.as_ref() == Some(&t.instance));
        t.terminate = node.is_none_or(&verified);
    }

    // The scale-down protection is the booster's as the ledger records it. A node already carrying
    // Cluster Autoscaler's annotation, put there by someone else, is never taken over (so never
    // stripped); one the booster protected whose marker went is protected again.
    let claimed: BTreeSet<&NodeName> = drains.claims.iter().flat_map(|c| c.nodes.iter()).collect();
    let ours = &snapshot.ledger.protected;
    let protect = claimed
        .iter()
        .filter(|n| match snapshot.nodes.get(**n) {
            Some(_) if ours.contains(**n) => !marked.contains(**n),
            Some(node) => !node.scale_down_disabled,
            None => false,
        })
        .map(|n| (*n).clone())
        .collect();
    let unprotect = ours.iter().filter(|n| !claimed.contains(n)).cloned().collect();

    let mut next = state.clone();
    for t in &drains.timed_out {
        next.in_progress.remove(&t.node);
        next.evictions.remove(&t.node);
        next.finished.insert(t.instance.clone(), FinishedDrain::TimedOut);
    }
    for batch in &drains.batches {
        next.last_batch_at.insert(batch.group.clone(), now);
        for target in &batch.nodes {
            next.in_progress.insert(
                target.node.clone(),
                DrainStarted {
                    group: batch.group.clone(),
                    instance: target.instance.clone(),
                    started_at: now,
                    decrement: target.decrement,
                    deadline: target.deadline,
                    gives_back: target.gives_back.clone(),
                },
            );
            let seen_cordoned = !target.cordon;
            next.evictions.insert(target.node.clone(), NodeEvictions { seen_cordoned, ..NodeEvictions::default() });
        }
    }

    let mut ended = Vec::new();
    let mut evictions = Vec::new();
    let mut verify = Vec::new();
    let mut force = Vec::new();
    let mut held_at_deadline = Vec::new();
    let draining: Vec<(NodeName, DrainStarted)> =
        next.in_progress.iter().map(|(n, d)| (n.clone(), d.clone())).collect();
    for (name, drain) in draining {
        // Most drains are of at-risk nodes, found by instance without a walk of the ordered map.
        let node = nodes
            .running(&drain.instance)
            .filter(|n| n.name == name)
            .or_else(|| snapshot.nodes.get(&name).filter(|n| n.instance.as_ref() == Some(&drain.instance)));
        let progress = next.evictions.entry(name.clone()).or_default();
        progress.seen_cordoned |= node.is_some_and(|n| n.cordoned);
        let recommendation_only = drain.gives_back.is_none()
            && at_risk.by_group.get(&drain.group).and_then(|m| m.get(&drain.instance)).is_some_and(|r| {
                r.deadline.is_none() && !r.kinds.is_empty() && r.kinds.iter().all(|k| k == SignalKind::Rebalance)
            });
        let end = |ending| EndedDrain {
            node: name.clone(),
            group: drain.group.clone(),
            instance: drain.instance.clone(),
            started_at: drain.started_at,
            gives_back: drain.gives_back.clone(),
            ending,
            recommendation_only,
        };
        let taken_back = match node {
            Some(n) if n.opted_out => Some(HowDrainEnded::OptedOut),
            Some(n) if progress.seen_cordoned && !n.cordoned => Some(HowDrainEnded::Uncordoned),
            _ => None,
        };
        if let Some(ending) = taken_back {
            ended.push(end(ending));
            next.in_progress.remove(&name);
            next.evictions.remove(&name);
            continue;
        }
        // A live read counts for the one pass after it: the view may change right after.
        let live = progress.live.take();
        if let Some(node) = node {
            let seen: &[Pod] = if node.pods_known { &node.pods } else { &[] };
            let left = eviction_order_of(seen, live.as_deref().unwrap_or_default());
            if !left.is_empty() {
                let read = live.as_deref().unwrap_or_default();
                let only_read = !read.is_empty() && !left.iter().any(|p| seen.iter().any(|s| s.uid == p.uid));
                let risk = at_risk.by_group.get(&drain.group).and_then(|m| m.get(&drain.instance));
                let deadline = risk.and_then(|r| r.deadline).into_iter().chain(drain.deadline).min();
                if let Some(deadline) = deadline {
                    let confirmed = risk.is_some_and(|r| r.confirmed);
                    let at_deadline = (&name, &drain.group, deadline, now);
                    // The grace is cut to the deadline only as far as the booster's own sight of
                    // the notice allows: an Event's time never shortens it.
                    let seen_by = risk.map_or(deadline, |r| deadline.max(r.first_seen.plus(INTERRUPTION_NOTICE)));
                    let may_force = (policy.force_at_deadline && confirmed).then_some((policy.force_margin, seen_by));
                    let (forced, held) = held_pods(at_deadline, &left, progress, may_force);
                    force.extend(forced);
                    held_at_deadline.extend(held);
                }
                match due(&name, left, &drain, progress, now) {
                    Some(round) => evictions.push(round),
                    // Evicted, still going: a view that carries them shows them leave; pods only
                    // a read found are read again.
                    None if only_read => verify.push(name),
                    None => {}
                }
                continue;
            }
            if live.is_none() {
                // Nothing left as far as the view knows: a live read says so, or not.
                verify.push(name);
                continue;
            }
            if !verified(node) {
                // Empty, but not the instance it names: nothing is terminated for it.
                continue;
            }
        }
        let decrement = drain.decrement
            || (node.is_some() && may_decrement_now(snapshot, (&next, &drains.timed_out, &ended), &drain));
        if decrement && !drain.decrement {
            if let Some(d) = next.in_progress.get_mut(&name) {
                d.decrement = true;
            }
        }
        ended.push(end(HowDrainEnded::Drained { terminate: node.is_some(), decrement }));
        next.in_progress.remove(&name);
        next.evictions.remove(&name);
        next.finished.insert(drain.instance.clone(), FinishedDrain::Drained);
    }
    // Ended drains are remembered only while their instance is around.
    if !next.finished.is_empty() {
        let alive = snapshot.live_instances();
        next.finished.retain(|i, _| alive.contains(i));
    }

    // Nearest deadline first: with calls in flight bounded, the pods with the least time go first.
    evictions.sort_by(|a: &EvictionRound, b: &EvictionRound| {
        (a.deadline.is_none(), a.deadline, &a.node).cmp(&(b.deadline.is_none(), b.deadline, &b.node))
    });
    DrainingPlan { drains, protect, unprotect, ended, evictions, force, held_at_deadline, verify, next }
}

/// On a node draining against `deadline`: the refused pods whose graceful deletion is due now
/// (when `force` names a margin and how far the grace may be cut: the notice is confirmed and
/// `--interruption-force-at-deadline` is on), each noted as forced so it is neither evicted nor
/// deleted again; and, once the deadline has come, the pods budgets still held there, told once.
/// A forced pod gets its own grace, or less only to end by the margin before `seen_by` (the
/// deadline, never earlier than two minutes after the booster saw the notice).
fn held_pods(
    (node, group, deadline, now): (&NodeName, &GroupName, Timestamp, Timestamp),
    left: &[&Pod],
    progress: &mut NodeEvictions,
    force: Option<(Duration, Timestamp)>,
) -> (Vec<ForcedDeletion>, Option<HeldAtDeadline>) {
    let mut forced = Vec::new();
    let mut held = Vec::new();
    for pod in left {
        if progress.forced.contains(&pod.uid) {
            continue;
        }
        // Only a pod a budget refused is forced; one still waiting out its node's backoff is told.
        let refused = progress.held.get(&pod.uid);
        let named = HeldPod { pod: PodToEvict::of(pod), budget: refused.cloned().flatten() };
        let due = refused
            .and(force)
            .map(|(margin, seen_by)| (deadline.minus(margin), seen_by.minus(margin)))
            .filter(|(end_by, _)| now >= end_by.minus(pod.grace().min(INTERRUPTION_NOTICE)));
        if let Some((_, cut_to)) = due {
            let left_secs = u32::try_from(cut_to.since(now).as_secs()).unwrap_or(u32::MAX);
            let grace_seconds = pod.grace_seconds.min(left_secs).max(1);
            progress.forced.insert(pod.uid.clone());
            forced.push(ForcedDeletion {
                node: node.clone(),
                group: group.clone(),
                held: named,
                grace_seconds,
                deadline,
            });
        } else {
            held.push(named);
        }
    }
    let tell = now >= deadline && !held.is_empty() && !progress.told_held;
    progress.told_held |= tell;
    (forced, tell.then(|| HeldAtDeadline { node: node.clone(), group: group.clone(), pods: held }))
}

/// Whether a drain that started without a decrement may terminate with one now. It started
/// without because its boost's share was not there to return then: the boost's write was still
/// in flight (a notice's deadline does not wait for the answer), or another drain held the share
/// and has since ended without returning it. Its boost still has a node to give back if what was
/// returned, what other drains under way promised and the nodes chosen for give-backs leave some.
fn may_decrement_now(
    snapshot: &Snapshot,
    (state, timed_out, ended): (&DrainState, &[TimedOutDrain], &[EndedDrain]),
    drain: &DrainStarted,
) -> bool {
    let Some(record) = snapshot.ledger.records.iter().find(|r| r.instances.contains(&drain.instance)) else {
        return false;
    };
    if record.raising_to.is_some() || drain.gives_back.is_some() {
        return false;
    }
    let ours = |i: &InstanceId| *i != drain.instance && record.instances.contains(i);
    // Under way, or ended in this pass (their returns are not in the ledger yet).
    let under_way = state.in_progress.values().filter(|d| d.decrement && ours(&d.instance)).count();
    let timed_out = timed_out.iter().filter(|t| t.terminate && t.decrement && ours(&t.instance)).count();
    let ended = ended
        .iter()
        .filter(|e| {
            matches!(e.ending, HowDrainEnded::Drained { terminate: true, decrement: true }) && ours(&e.instance)
        })
        .count();
    let promised = under_way.saturating_add(timed_out).saturating_add(ended);
    let giving = record.giving_back.len();
    let spoken_for = u32::try_from(promised.saturating_add(giving)).unwrap_or(u32::MAX);
    record.returned.saturating_add(spoken_for) < record.added
}

/// The pods of node `name` that may be evicted now, of those `left` in eviction order (none
/// while its backoff runs). A drain against a deadline evicts every pod at once, longest grace
/// period first, so each has its grace period before the instance goes; others evict critical
/// pods only once no ordinary one is left.
fn due(
    name: &NodeName,
    mut order: Vec<&Pod>,
    drain: &DrainStarted,
    progress: &NodeEvictions,
    now: Timestamp,
) -> Option<EvictionRound> {
    if progress.retry_at.is_some_and(|at| now < at) {
        return None;
    }
    let ordinary_left = order.iter().any(|p| p.class == PodClass::Ordinary);
    let hold_critical = ordinary_left && drain.deadline.is_none();
    if drain.deadline.is_some() {
        order.sort_by_key(|p| std::cmp::Reverse(p.grace_seconds));
    }
    let mut pods: Vec<PodToEvict> = Vec::with_capacity(order.len());
    pods.extend(
        order
            .iter()
            .filter(|p| !(p.class == PodClass::Critical && hold_critical))
            .filter(|p| !progress.evicted.contains(&p.uid) && !progress.forced.contains(&p.uid))
            .map(|p| PodToEvict::of(p)),
    );
    let (deadline, gone) = (drain.deadline, progress.evicted.len() + progress.forced.len());
    (!pods.is_empty()).then(|| EvictionRound { node: name.clone(), group: drain.group.clone(), pods, gone, deadline })
}

impl DrainingPlan {
    /// Takes back a batch target the worker did not start (its cordon failed, or the lease went
    /// first): no drain of it is under way, so nothing planned after its start happens either.
    pub(crate) fn withdraw(&mut self, node: &NodeName) {
        if let Some(d) = self.next.in_progress.remove(node) {
            self.next.finished.remove(&d.instance);
        }
        if let Some(ended) = self.ended.iter().find(|e| &e.node == node) {
            self.next.finished.remove(&ended.instance);
        }
        self.next.evictions.remove(node);
        self.ended.retain(|e| &e.node != node);
        self.evictions.retain(|r| &r.node != node);
        self.verify.retain(|n| n != node);
    }
}

impl DrainState {
    /// Folds one node's eviction round into its progress: evicted (or gone) pods are not tried
    /// again; refusals start a backoff that doubles while nothing goes and starts over when some
    /// pod did (the budget is moving); a round without refusals clears it. Returns the backoff
    /// started, if any.
    pub fn record_round<'u>(
        &mut self,
        node: &NodeName,
        results: impl IntoIterator<Item = (&'u str, EvictionResult)>,
        policy: &Policy,
        now: Timestamp,
    ) -> Option<Refusal> {
        let progress = self.evictions.entry(node.clone()).or_default();
        let (mut tried, mut blocked) = (0usize, 0usize);
        for (uid, result) in results {
            tried += 1;
            match result {
                EvictionResult::Evicted | EvictionResult::Gone => {
                    progress.held.remove(&PodUid::from(uid));
                    progress.evicted.insert(PodUid::from(uid));
                }
                EvictionResult::Blocked { budget } => {
                    progress.held.insert(PodUid::from(uid), budget);
                    blocked += 1;
                }
                EvictionResult::Failed => {}
            }
        }
        if blocked == 0 {
            progress.refusals = 0;
            progress.retry_at = None;
            return None;
        }
        let moved = tried > blocked;
        progress.refusals = if moved { 1 } else { progress.refusals.saturating_add(1) };
        let wait = eviction_backoff(progress.refusals, policy);
        progress.retry_at = Some(now.plus(wait));
        let first = !progress.told_blocked;
        progress.told_blocked = true;
        Some(Refusal { wait, moved, first })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::model::{BoostRecord, Evidence, Group, Node, Pod, Signal};

    const NOW: Timestamp = Timestamp::from_millis(600_000);

    #[test]
    fn a_wave_s_evictions_take_one_pod_of_every_node_before_any_node_s_second() {
        let rounds = vec![
            eviction_round("voluntary", &["d1", "d2"], None),
            eviction_round("later", &["c1"], Some(200)),
            eviction_round("n2", &["b1", "b2"], Some(105)),
            eviction_round("n1", &["a1", "a2", "a3"], Some(100)),
        ];
        let sent: Vec<&str> =
            eviction_sequence(&rounds).into_iter().map(|(k, p)| rounds[k].pods[p].name.as_str()).collect();
        assert_eq!(sent, ["a1", "b1", "a2", "b2", "a3", "c1", "d1", "d2"]);
    }

    #[test]
    fn a_node_whose_first_pods_went_waits_for_the_wave_s_first_pods() {
        let rounds = vec![
            EvictionRound { gone: 2, ..eviction_round("n1", &["a3", "a4"], Some(100)) },
            eviction_round("n2", &["b1", "b2"], Some(100)),
            EvictionRound { gone: 1, ..eviction_round("n3", &["c2", "c3"], Some(101)) },
        ];
        let sent: Vec<&str> =
            eviction_sequence(&rounds).into_iter().map(|(k, p)| rounds[k].pods[p].name.as_str()).collect();
        assert_eq!(sent, ["b1", "b2", "c2", "a3", "c3", "a4"]);
    }

    fn eviction_round(node: &str, pods: &[&str], deadline: Option<i64>) -> EvictionRound {
        EvictionRound {
            node: node.into(),
            group: "a".into(),
            pods: pods
                .iter()
                .map(|p| PodToEvict { namespace: "default".into(), name: (*p).into(), uid: (*p).into(), owner: None })
                .collect(),
            gone: 0,
            deadline: deadline.map(|s| Timestamp::from_millis(s * 1_000)),
        }
    }

    /// Group `a`: n1 at risk, cordoned, boosted by one node at 10 s, whose replacement r1 is Ready.
    fn ready_to_drain() -> Snapshot {
        let mut s = Snapshot::default()
            .with_group(Group::test("a").desired(3))
            .with_node(Node::test("n1", "a").cordoned().with_pods(2, 500, 1 << 30))
            .with_node(Node::test("n2", "a"))
            .with_node(Node::test("r1", "a").created_at(20_000))
            .with_signal(Signal::rebalance("n1", 1_000));
        s.ledger.record(BoostRecord { before: 2, ..BoostRecord::test("a", &["i-n1"], 1, 10_000) });
        s
    }

    fn policy() -> Policy {
        Policy {
            eviction_backoff_initial: Duration::from_secs(5),
            eviction_backoff_max: Duration::from_secs(60),
            ..Policy::default()
        }
    }

    fn n1() -> NodeName {
        NodeName::from("n1")
    }

    /// `state` once a live read of `node` found no pod.
    fn read_empty(mut state: DrainState, node: &str) -> DrainState {
        assert!(state.record_live_read(&NodeName::from(node), Vec::new()), "{node} is draining");
        state
    }

    fn uids(round: &EvictionRound) -> Vec<&str> {
        round.pods.iter().map(|p| p.uid.as_str()).collect()
    }

    #[test]
    fn a_drain_ends_only_once_a_live_read_finds_its_node_empty() {
        let s = ready_to_drain();
        let started = plan_draining(&s, &BTreeSet::new(), &DrainState::default(), &policy(), NOW);
        let mut empty = s.clone();
        empty.nodes.get_mut(&n1()).unwrap().pods.clear();
        let looked = plan_draining(&empty, &BTreeSet::new(), &started.next, &policy(), NOW);
        assert!(looked.ended.is_empty(), "the view shows no pod: not enough to terminate");
        assert_eq!(looked.verify, vec![n1()]);

        // The read finds a pod the view lacks (bound just before the cordon): evicted, not ended.
        let mut state = looked.next;
        let found = vec![Pod::test("late", 100, 1 << 20), Pod::test("ds", 1, 1).class(PodClass::DaemonSet)];
        assert!(!state.record_live_read(&n1(), found));
        let p = plan_draining(&empty, &BTreeSet::new(), &state, &policy(), NOW);
        assert!(p.ended.is_empty());
        assert_eq!(uids(&p.evictions[0]), vec!["uid-late"], "the DaemonSet pod stays");

        // Evicted and still going: read again, and a read counts for one pass only.
        let mut state = p.next;
        state.record_round(&n1(), [("uid-late", EvictionResult::Evicted)], &policy(), NOW);
        let p = plan_draining(&empty, &BTreeSet::new(), &state, &policy(), NOW);
        assert!(p.ended.is_empty() && p.evictions.is_empty(), "{p:?}");
        assert_eq!(p.verify, vec![n1()]);
        let p = plan_draining(&empty, &BTreeSet::new(), &read_empty(p.next, "n1"), &policy(), NOW);
        assert_eq!(p.ended[0].ending, HowDrainEnded::Drained { terminate: true, decrement: true });
    }

    #[test]
    fn a_node_registered_later_under_a_boosted_instance_takes_no_drain() {
        // The ledger remembers i-n1 and its signal came through "a-forged", a Node someone
        // registered with i-n1's providerID (empty, cordoned). EC2 named i-n1 "n1".
        let mut s = ready_to_drain();
        s.signals = vec![Signal {
            instance: "i-n1".into(),
            evidence: Evidence::Ledger,
            ..Signal::rebalance("a-forged", 1_000)
        }];
        let forged = Node::test("a-forged", "a").with_instance("i-n1").cordoned();
        s.nodes.insert(forged.name.clone(), forged);
        let p = plan_draining(&s, &BTreeSet::new(), &DrainState::default(), &policy(), NOW);
        let started: Vec<&NodeName> = p.drains.batches.iter().flat_map(|b| b.nodes.iter().map(|t| &t.node)).collect();
        assert_eq!(started, vec![&n1()], "the Node EC2 named is the one drained");
        assert_eq!(uids(&p.evictions[0]), vec!["uid-n1-p0", "uid-n1-p1"]);

        // The real Node gone from the view: the forged one alone is still not the instance.
        s.nodes.remove(&n1());
        let p = plan_draining(&s, &BTreeSet::new(), &DrainState::default(), &policy(), NOW);
        assert!(p.drains.batches.is_empty(), "{:?}", p.drains);

        // A drain under way whose Node stops verifying is never terminated, drained or timed out.
        let s = ready_to_drain();
        let started = plan_draining(&s, &BTreeSet::new(), &DrainState::default(), &policy(), NOW);
        let mut moved = s.clone();
        moved.nodes.get_mut(&n1()).unwrap().pods.clear();
        moved.instances.get_mut(&InstanceId::from("i-n1")).unwrap().private_dns_name =
            Some("ip-10-9-9-9.ec2.internal".into());
        let p = plan_draining(&moved, &BTreeSet::new(), &read_empty(started.next.clone(), "n1"), &policy(), NOW);
        assert!(p.ended.is_empty(), "{:?}", p.ended);
        let forced = Policy { terminate_after_drain_timeout: true, ..policy() };
        let late = NOW.plus(forced.drain_timeout);
        let p = plan_draining(&moved, &BTreeSet::new(), &started.next, &forced, late);
        assert_eq!(p.drains.timed_out.len(), 1);
        assert!(!p.drains.timed_out[0].terminate, "timed out, but not the instance it names: kept");
    }

    #[test]
    fn a_node_whose_pods_the_view_left_out_is_never_taken_for_drained() {
        let s = ready_to_drain();
        let started = plan_draining(&s, &BTreeSet::new(), &DrainState::default(), &policy(), NOW);
        let mut unknown = s.clone();
        let node = unknown.nodes.remove(&n1()).unwrap().pods_unknown();
        unknown.nodes.insert(n1(), node);
        let p = plan_draining(&unknown, &BTreeSet::new(), &started.next, &policy(), NOW);
        assert!(p.ended.is_empty() && p.evictions.is_empty(), "{p:?}");
        assert_eq!(p.verify, vec![n1()]);

        // The live read finds its pods: they are evicted, though the view still lacks them.
        let mut state = p.next;
        assert!(!state.record_live_read(&n1(), s.nodes[&n1()].pods.clone()));
        let p = plan_draining(&unknown, &BTreeSet::new(), &state, &policy(), NOW);
        assert_eq!(uids(&p.evictions[0]), vec!["uid-n1-p0", "uid-n1-p1"]);
        assert!(p.ended.is_empty());
    }

    #[test]
    fn a_started_batch_is_evicted_in_the_same_pass_and_its_replacement_protected() {
        let p = plan_draining(&ready_to_drain(), &BTreeSet::new(), &DrainState::default(), &policy(), NOW);
        assert_eq!(p.drains.batches.len(), 1);
        assert_eq!(p.protect, vec![NodeName::from("r1")]);
        assert_eq!(p.evictions.len(), 1);
        assert_eq!(p.evictions[0].pods.len(), 2);
        assert_eq!(p.next.in_progress[&n1()].started_at, NOW);
        assert!(p.next.evictions[&n1()].seen_cordoned, "NTH's cordon: nothing of ours to wait for");
    }

    #[test]
    fn only_the_protection_the_ledger_records_as_the_boosters_is_ever_lifted_or_put_back() {
        let mut s = ready_to_drain();
        let p = plan_draining(&s, &BTreeSet::new(), &DrainState::default(), &policy(), NOW);
        assert_eq!(p.protect, vec![NodeName::from("r1")]);
        // An admin protected r1 already: never taken over.
        s.nodes.get_mut(&NodeName::from("r1")).unwrap().scale_down_disabled = true;
        let p = plan_draining(&s, &BTreeSet::new(), &DrainState::default(), &policy(), NOW);
        assert!(p.protect.is_empty(), "{:?}", p.protect);
        // A tenant's spoofed marker on n2, where an admin put the annotation: nothing to lift.
        s.nodes.get_mut(&NodeName::from("n2")).unwrap().scale_down_disabled = true;
        let marked = BTreeSet::from([NodeName::from("n2")]);
        let p = plan_draining(&s, &marked, &DrainState::default(), &policy(), NOW);
        assert!(p.unprotect.is_empty(), "{:?}", p.unprotect);
        // The booster's own protection of a node no boost claims any more is lifted.
        s.ledger.protected.insert(NodeName::from("n2"));
        let p = plan_draining(&s, &marked, &DrainState::default(), &policy(), NOW);
        assert_eq!(p.unprotect, vec![NodeName::from("n2")]);
        // Its own on a claimed node whose marker went is put back.
        s.ledger.protected.insert(NodeName::from("r1"));
        let p = plan_draining(&s, &marked, &DrainState::default(), &policy(), NOW);
        assert_eq!(p.protect, vec![NodeName::from("r1")]);
    }

    #[test]
    fn critical_pods_wait_for_the_ordinary_ones_and_evicted_pods_are_not_tried_again() {
        let mut s = ready_to_drain();
        let n = s.nodes.get_mut(&n1()).unwrap();
        n.pods.push(Pod::test("dns", 100, 1 << 20).class(PodClass::Critical));
        let first = plan_draining(&s, &BTreeSet::new(), &DrainState::default(), &policy(), NOW);
        let uids: Vec<&str> = first.evictions[0].pods.iter().map(|p| p.uid.as_str()).collect();
        assert_eq!(uids.len(), 2, "the critical pod waits: {uids:?}");
        let mut state = first.next.clone();
        state.record_round(&n1(), uids.iter().map(|u| (*u, EvictionResult::Evicted)), &policy(), NOW);
        let again = plan_draining(&s, &BTreeSet::new(), &state, &policy(), NOW);
        assert!(again.evictions.is_empty(), "evicted pods still terminating are not evicted twice");
    }

    #[test]
    fn refusals_back_off_doubling_and_start_over_when_the_budget_moves() {
        let s = ready_to_drain();
        let mut state = plan_draining(&s, &BTreeSet::new(), &DrainState::default(), &policy(), NOW).next;
        let r1 = state.record_round(&n1(), [("u", EvictionResult::Blocked { budget: None })], &policy(), NOW).unwrap();
        assert_eq!((r1.wait, r1.first), (Duration::from_secs(5), true));
        assert!(plan_draining(&s, &BTreeSet::new(), &state, &policy(), NOW.plus(Duration::from_secs(4)))
            .evictions
            .is_empty());
        let later = NOW.plus(Duration::from_secs(5));
        assert_eq!(plan_draining(&s, &BTreeSet::new(), &state, &policy(), later).evictions.len(), 1);
        let r2 =
            state.record_round(&n1(), [("u", EvictionResult::Blocked { budget: None })], &policy(), later).unwrap();
        assert_eq!((r2.wait, r2.first), (Duration::from_secs(10), false));
        let r3 = state
            .record_round(
                &n1(),
                [("u", EvictionResult::Blocked { budget: None }), ("v", EvictionResult::Evicted)],
                &policy(),
                later,
            )
            .unwrap();
        assert_eq!((r3.wait, r3.moved), (Duration::from_secs(5), true));
        assert_eq!(state.record_round(&n1(), [("u", EvictionResult::Evicted)], &policy(), later), None);
        assert_eq!(state.evictions[&n1()].retry_at, None);
    }

    /// Group `a`: n1 and n2 with confirmed spot notices sent at `n1_at` and `n2_at` ms (no boost
    /// covers them), each with two pods of 30 s grace.
    fn storm(n1_at: i64, n2_at: i64) -> Snapshot {
        let mut s = Snapshot::default().with_group(Group::test("a").desired(3));
        for name in ["n1", "n2", "n3"] {
            s = s.with_node(Node::test(name, "a").with_pods(2, 500, 1 << 30));
        }
        for (name, at) in [("n1", n1_at), ("n2", n2_at)] {
            s = s.with_signal(Signal::interruption(name, at));
            s.spot_interrupted.insert(format!("i-{name}").as_str().into());
        }
        s
    }

    #[test]
    fn evictions_go_nearest_deadline_first_across_nodes() {
        // n2's notice came first: its pods go first, though n1 sorts before it by name.
        let s = storm(5_000, 1_000);
        let p = plan_draining(&s, &BTreeSet::new(), &DrainState::default(), &policy(), Timestamp::from_millis(6_000));
        let order: Vec<(&str, Option<i64>)> =
            p.evictions.iter().map(|r| (r.node.as_str(), r.deadline.map(Timestamp::as_millis))).collect();
        assert_eq!(order, vec![("n2", Some(121_000)), ("n1", Some(125_000))]);
    }

    #[test]
    fn a_pod_its_budget_holds_is_deleted_gracefully_only_with_the_flag_and_in_time() {
        let s = storm(0, 0);
        let forcing = Policy { force_at_deadline: true, ..policy() };
        let mut state =
            plan_draining(&s, &BTreeSet::new(), &DrainState::default(), &forcing, Timestamp::from_millis(1_000)).next;
        let held = s.nodes[&n1()].pods[0].uid.clone();
        let budget = Some("web".to_string());
        state.record_round(
            &n1(),
            [(held.as_str(), EvictionResult::Blocked { budget: budget.clone() })],
            &forcing,
            Timestamp::from_millis(1_000),
        );
        // Deadline 120 s, margin 10 s, grace 30 s: due at 80 s, not before.
        let before = plan_draining(&s, &BTreeSet::new(), &state, &forcing, Timestamp::from_millis(79_999));
        assert!(before.force.is_empty(), "{:?}", before.force);
        let due = plan_draining(&s, &BTreeSet::new(), &state, &forcing, Timestamp::from_millis(80_000));
        assert_eq!(due.force.len(), 1, "{:?}", due.force);
        let f = &due.force[0];
        assert_eq!((f.node.as_str(), f.held.pod.uid.as_str(), f.grace_seconds), ("n1", held.as_str(), 30));
        assert_eq!(f.held.budget, budget);
        assert!(due.evictions.iter().all(|r| r.pods.iter().all(|p| p.uid != held)), "deleted, not evicted");
        // Once planned, never again; a DELETE not made is planned again.
        let again = plan_draining(&s, &BTreeSet::new(), &due.next, &forcing, Timestamp::from_millis(81_000));
        assert!(again.force.is_empty());
        let mut lost = due.next.clone();
        lost.unforce(&n1(), &held);
        // Later, the grace is cut to end by the margin: 120 - 10 - 100 = 10 s.
        let late = plan_draining(&s, &BTreeSet::new(), &lost, &forcing, Timestamp::from_millis(100_000));
        assert_eq!(late.force[0].grace_seconds, 10);

        // Without the flag, nothing is deleted; at the deadline the held pod is told, once.
        let off = policy();
        let quiet = plan_draining(&s, &BTreeSet::new(), &state, &off, Timestamp::from_millis(119_999));
        assert!(quiet.force.is_empty() && quiet.held_at_deadline.is_empty());
        let told = plan_draining(&s, &BTreeSet::new(), &state, &off, Timestamp::from_millis(120_000));
        // Every pod left on each node is told: a refused one with its budget, an untried one
        // (n2's, and n1's second) without.
        let nodes: Vec<&str> = told.held_at_deadline.iter().map(|h| h.node.as_str()).collect();
        assert_eq!(nodes, ["n1", "n2"]);
        assert!(told.held_at_deadline[1].pods.iter().all(|p| p.budget.is_none()));
        let pods = &told.held_at_deadline[0].pods;
        assert_eq!(pods.len(), 2, "{pods:?}");
        assert_eq!(pods.iter().find(|p| p.pod.uid == held).map(|p| p.budget.clone()), Some(budget.clone()));
        assert!(pods.iter().any(|p| p.pod.uid != held && p.budget.is_none()));
        let twice = plan_draining(&s, &BTreeSet::new(), &told.next, &off, Timestamp::from_millis(121_000));
        assert!(twice.held_at_deadline.is_empty());

        // A notice AWS did not confirm never overrides a budget.
        let mut unconfirmed = s.clone();
        unconfirmed.spot_interrupted.clear();
        let p = plan_draining(&unconfirmed, &BTreeSet::new(), &state, &forcing, Timestamp::from_millis(100_000));
        assert!(p.force.is_empty(), "{:?}", p.force);
    }

    #[test]
    fn an_event_dated_in_the_past_never_cuts_a_forced_pods_grace() {
        // A confirmed notice the booster saw at 100 s whose Event says the instance went at 0 s
        // (its time, as the watch clamps it, two minutes before it was seen): the deadline has
        // passed, but the held pod still gets its own 30 s, where it used to get 1 s.
        let seen = Timestamp::from_millis(100_000);
        let mut s = storm(0, 0);
        for signal in &mut s.signals {
            signal.evidence = Evidence::Event;
            signal.observed_at = seen;
            signal.notice_deadline = Some(seen.minus(Duration::from_secs(120)));
        }
        for node in s.nodes.values_mut() {
            node.cordoned = true;
        }
        for i in ["i-n1", "i-n2"] {
            s.instances.get_mut(&InstanceId::from(i)).unwrap().lifecycle = crate::core::InstanceLifecycle::Spot;
        }
        let forcing = Policy { force_at_deadline: true, ..policy() };
        let mut state = plan_draining(&s, &BTreeSet::new(), &DrainState::default(), &forcing, seen).next;
        let held = s.nodes[&n1()].pods[0].uid.clone();
        state.record_round(&n1(), [(held.as_str(), EvictionResult::Blocked { budget: None })], &forcing, seen);
        let due = plan_draining(&s, &BTreeSet::new(), &state, &forcing, seen.plus(Duration::from_secs(1)));
        let f = due.force.iter().find(|f| f.held.pod.uid == held).expect("forced at its deadline");
        assert_eq!(f.grace_seconds, 30, "{f:?}");
    }

    #[test]
    fn an_operators_uncordon_stops_the_drain_but_our_own_unseen_cordon_does_not() {
        let mut s = ready_to_drain();
        s.nodes.get_mut(&n1()).unwrap().cordoned = false;
        let started = plan_draining(&s, &BTreeSet::new(), &DrainState::default(), &policy(), NOW);
        assert!(started.drains.batches[0].nodes[0].cordon, "the worker cordons it");
        assert!(started.ended.is_empty(), "our cordon is not seen yet: {:?}", started.ended);
        s.nodes.get_mut(&n1()).unwrap().cordoned = true;
        let seen = plan_draining(&s, &BTreeSet::new(), &started.next, &policy(), NOW);
        assert!(seen.ended.is_empty());
        s.nodes.get_mut(&n1()).unwrap().cordoned = false;
        let stopped = plan_draining(&s, &BTreeSet::new(), &seen.next, &policy(), NOW);
        assert_eq!(stopped.ended[0].ending, HowDrainEnded::Uncordoned);
        assert!(stopped.next.in_progress.is_empty() && stopped.evictions.is_empty());
    }

    #[test]
    fn a_node_opted_out_mid_drain_stops_its_drain_and_is_never_drained_again() {
        let mut s = ready_to_drain();
        let started = plan_draining(&s, &BTreeSet::new(), &DrainState::default(), &policy(), NOW);
        assert_eq!(started.drains.batches.len(), 1);
        s.nodes.get_mut(&n1()).unwrap().opted_out = true;
        let stopped = plan_draining(&s, &BTreeSet::new(), &started.next, &policy(), NOW);
        assert_eq!(stopped.ended[0].ending, HowDrainEnded::OptedOut);
        assert!(stopped.next.in_progress.is_empty() && stopped.evictions.is_empty());
        let later = plan_draining(&s, &BTreeSet::new(), &stopped.next, &policy(), NOW);
        assert!(later.drains.batches.is_empty() && later.evictions.is_empty(), "{later:?}");
    }

    #[test]
    fn a_drained_node_ends_its_drain_and_is_terminated_with_decrement() {
        let s = ready_to_drain();
        let started = plan_draining(&s, &BTreeSet::new(), &DrainState::default(), &policy(), NOW);
        let mut empty = s.clone();
        empty.nodes.get_mut(&n1()).unwrap().pods.clear();
        let p = plan_draining(&empty, &BTreeSet::new(), &read_empty(started.next, "n1"), &policy(), NOW);
        assert_eq!(p.ended[0].ending, HowDrainEnded::Drained { terminate: true, decrement: true });
        assert_eq!(p.next.finished.get(&InstanceId::from("i-n1")), Some(&FinishedDrain::Drained));
    }

    #[test]
    fn a_drain_started_while_its_boost_was_in_flight_gives_the_boost_back_once_it_ends() {
        // A notice's deadline starts the drain while the boost's write has not answered yet: no
        // decrement can be promised then. By the time the node is empty the write has answered.
        let mut s = ready_to_drain();
        s.signals = vec![Signal::interruption("n1", 590_000)];
        s.ledger.records[0].raising_to = Some(3);
        let started = plan_draining(&s, &BTreeSet::new(), &DrainState::default(), &policy(), NOW);
        assert!(!started.next.in_progress[&n1()].decrement, "{:?}", started.next.in_progress);
        let mut answered = s.clone();
        answered.ledger.records[0].raising_to = None;
        answered.nodes.get_mut(&n1()).unwrap().pods.clear();
        let p = plan_draining(&answered, &BTreeSet::new(), &read_empty(started.next.clone(), "n1"), &policy(), NOW);
        assert_eq!(p.ended[0].ending, HowDrainEnded::Drained { terminate: true, decrement: true });

        // Still in flight when it ends: terminated without, the capacity stays the boost's.
        let mut unanswered = s.clone();
        unanswered.nodes.get_mut(&n1()).unwrap().pods.clear();
        let p = plan_draining(&unanswered, &BTreeSet::new(), &read_empty(started.next, "n1"), &policy(), NOW);
        assert_eq!(p.ended[0].ending, HowDrainEnded::Drained { terminate: true, decrement: false });
    }

    #[test]
    fn two_drains_ending_together_return_no_more_than_their_boost_added() {
        // One node added for n1 and n2; n1's drain holds the decrement, n2's started without.
        let mut s = ready_to_drain().with_node(Node::test("n2", "a").cordoned());
        s.ledger.records[0].instances.insert(InstanceId::from("i-n2"));
        let mut state = DrainState::default();
        for (name, decrement) in [("n1", true), ("n2", false)] {
            state.in_progress.insert(
                NodeName::from(name),
                DrainStarted {
                    group: "a".into(),
                    instance: InstanceId::from(format!("i-{name}").as_str()),
                    started_at: NOW,
                    decrement,
                    deadline: None,
                    gives_back: None,
                },
            );
        }
        s.nodes.get_mut(&n1()).unwrap().pods.clear();
        let state = read_empty(read_empty(state, "n1"), "n2");
        let p = plan_draining(&s, &BTreeSet::new(), &state, &policy(), NOW);
        let decrements: Vec<bool> =
            p.ended.iter().map(|e| matches!(e.ending, HowDrainEnded::Drained { decrement: true, .. })).collect();
        assert_eq!(decrements, vec![true, false], "{:?}", p.ended);
    }

    #[test]
    fn a_withdrawn_start_leaves_no_trace() {
        let mut p = plan_draining(&ready_to_drain(), &BTreeSet::new(), &DrainState::default(), &policy(), NOW);
        p.withdraw(&n1());
        assert!(p.next.in_progress.is_empty() && p.next.evictions.is_empty() && p.evictions.is_empty());
        assert!(p.next.finished.is_empty());
    }
}
