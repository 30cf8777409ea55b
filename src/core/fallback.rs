//! Falling back when a pool has no capacity. A boost raised its group's desired capacity, but
//! the group's scaling activities say its launches fail for want of capacity (see
//! [`super::launch_failures`]): its at-risk nodes would keep their pods until AWS takes them. The nodes
//! the boost still misses move to the first of the group's fallbacks (the ASG tag
//! `spots-booster.io/fallback-groups`) that is not failing itself, has room below its MaxSize
//! and its boost budget, and is not in Cluster Autoscaler's backoff.
//!
//! A move is recorded on the boost's own ledger record ([`MovedPart`]): the nodes leave the
//! record's `added` (so the at-risk terminations in the failing group decrement only for what it
//! launched), their replacements are claimed in the fallback, and no node is ever moved twice.
//! One move per fallback group per pass, so each is one guarded write. The failing group's
//! desired capacity goes back down by what moved only while no instance of it can be terminated
//! by that (the workers re-read before the write).
//!
//! Among the usable fallbacks, the order is chosen at each move from what pool memory knows of
//! them ([`FallbackRank`]): a group whose pools failed to launch lately (past the cool-down, which
//! skips it outright) comes after one whose pools did not, then the one whose pools EC2 interrupted
//! less, then the tag's order. With no memory of them, the tag's order stands.
//!
//! A fallback must be a group this daemon serves and, for a group made for an InstanceGroup, one
//! made for the same namespace: the tag is only a list of names, and a name may belong to another
//! cluster, to a group `--asg-tag-filter` leaves out, or (names join cluster, namespace and name
//! with dashes) to another tenant. Such a candidate is refused ([`RefusedFallback`]) and the boost
//! waits as if the tag did not name it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::ledger_edit::Pending;
use super::ledger_edit::{BoostId, LedgerEdit};
use super::model::{BoostLedger, BoostRecord, Group, GroupName, MovedPart, Parked, PoolHistory, Snapshot, Timestamp};
use super::policy::Policy;

/// Nodes of one boost moved to a fallback group (or back to its own, on a retry).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fallback {
    /// The boost whose nodes move.
    pub record: BoostId,
    /// The group the nodes leave, which failed to launch them: lowered by them once the move is
    /// written, if no instance can be terminated by that. `None` for parked nodes retried,
    /// which no group counts.
    pub left: Option<GroupName>,
    /// The part of the boost they move on from (a fallback that failed too, or parked nodes);
    /// `None`: the boost's own nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<Timestamp>,
    /// The group they move to.
    pub to: GroupName,
    /// Its desired capacity the move starts from.
    pub to_desired: u32,
    /// Nodes moved.
    pub nodes: u32,
    /// What placed `to` first among those usable.
    #[serde(default)]
    pub rank: FallbackRank,
}

impl Fallback {
    /// The move as recorded on the boost's record at `at`, before the fallback's write: its
    /// nodes leave the record's `added` (or the part they move on from), and the write is
    /// unanswered until confirmed.
    pub fn moving(&self, at: Timestamp) -> LedgerEdit {
        let part = MovedPart {
            group: self.to.clone(),
            added: self.nodes,
            at,
            raising_to: Some(self.to_desired.saturating_add(self.nodes)),
            // Parked nodes are counted by no group: nothing is lowered for them.
            taken_back: self.left.is_none(),
            lowering_to: None,
            from: self.from,
            parked: None,
        };
        LedgerEdit::Move(self.record.clone(), part)
    }
}

/// Nodes of a boost that every group allowed to take them failed to launch: asked of none until
/// a retry, while the at-risk nodes they replace keep serving.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Exhausted {
    /// The boost.
    pub record: BoostId,
    /// The group they leave, lowered by them as a take-back; `None` for parked nodes whose
    /// retry found every group failing again.
    pub left: Option<GroupName>,
    /// The part they leave; `None`: the boost's own nodes.
    pub from: Option<Timestamp>,
    /// Nodes parked.
    pub nodes: u32,
    /// Every group tried since the boost began or its last retry, in the order tried, then
    /// those failing without being tried.
    pub tried: Vec<GroupName>,
    /// When they move to the best-ranked group again.
    pub retry_at: Timestamp,
}

impl Exhausted {
    /// Its record on the boost at `at`: a part asked of no group.
    pub fn parking(&self, at: Timestamp) -> LedgerEdit {
        let part = MovedPart {
            group: self.left.clone().unwrap_or_else(|| self.record.group.clone()),
            added: self.nodes,
            at,
            raising_to: None,
            taken_back: self.left.is_none(),
            lowering_to: None,
            from: self.from,
            parked: Some(Parked { retry_at: self.retry_at, tried: self.tried.clone() }),
        };
        LedgerEdit::Move(self.record.clone(), part)
    }
}

/// What to do now about nodes no group launched.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FallbackPlan {
    /// Moves to a group that can take the nodes, each one write.
    pub moves: Vec<Fallback>,
    /// Nodes every group allowed failed to launch, parked until a retry.
    pub exhausted: Vec<Exhausted>,
}

/// Why a group a fallback tag names is never used as one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FallbackRefusal {
    /// Its tags name another cluster, or none.
    NotThisCluster,
    /// `--asg-tag-filter` leaves it out.
    NotSelected,
    /// It was made for an InstanceGroup of another namespace than the failing group's.
    OtherNamespace,
    /// It backs an EKS managed node group, whose size is EKS's.
    EksManaged,
}

impl FallbackRefusal {
    /// The metric label and the word an Event uses.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NotThisCluster => "not-this-cluster",
            Self::NotSelected => "not-selected",
            Self::OtherNamespace => "other-namespace",
            Self::EksManaged => "eks-managed",
        }
    }

    /// What the refusal says of the group, for an Event's note.
    pub fn explain(self) -> &'static str {
        match self {
            Self::NotThisCluster => "its tags do not name this cluster",
            Self::NotSelected => "--asg-tag-filter leaves it out",
            Self::OtherNamespace => "it was made for an InstanceGroup of another namespace",
            Self::EksManaged => "it backs an EKS managed node group, whose size is EKS's",
        }
    }
}

/// A group a failing group's fallback tag names, refused while the failing group's boost misses
/// nodes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefusedFallback {
    /// The oldest boost that would have moved there; its group is the failing one.
    pub record: BoostId,
    /// The group refused.
    pub to: GroupName,
    /// Why.
    pub reason: FallbackRefusal,
}

/// Why `to` may not take `from`'s missing nodes, if it may not.
fn refusal(from: &Group, to: &Group) -> Option<FallbackRefusal> {
    if to.foreign {
        Some(FallbackRefusal::NotThisCluster)
    } else if to.excluded {
        Some(FallbackRefusal::NotSelected)
    } else if to.eks_node_group.is_some() {
        Some(FallbackRefusal::EksManaged)
    } else if from.tenant_namespace.is_some() && to.tenant_namespace != from.tenant_namespace {
        Some(FallbackRefusal::OtherNamespace)
    } else {
        None
    }
}

/// The groups named as fallbacks that are refused, for every failing group whose boosts miss
/// nodes now (those whose nodes a move would carry), once each.
pub(crate) fn refused_fallbacks(
    snapshot: &Snapshot,
    ledger: &BoostLedger,
    policy: &Policy,
    now: Timestamp,
) -> Vec<RefusedFallback> {
    let mut refused = Vec::new();
    if snapshot.capacity_failures.is_empty() {
        return refused;
    }
    for (name, records) in records_by_group(ledger) {
        let Some(group) = snapshot.groups.get(name) else { continue };
        if group.fallbacks.is_empty() || !failing(snapshot, name, policy, now) || missing(group, ledger) == 0 {
            continue;
        }
        let Some(oldest) = records.iter().filter(|r| r.expired.is_none()).min_by_key(|r| r.at) else { continue };
        for to in group.fallbacks.iter().filter(|f| **f != group.name) {
            let Some(reason) = snapshot.groups.get(to).and_then(|g| refusal(group, g)) else { continue };
            if !refused.iter().any(|r: &RefusedFallback| r.record.group == *name && r.to == *to) {
                refused.push(RefusedFallback { record: oldest.id(), to: to.clone(), reason });
            }
        }
    }
    refused
}

fn records_by_group(ledger: &BoostLedger) -> BTreeMap<&GroupName, Vec<&BoostRecord>> {
    let mut by_group: BTreeMap<&GroupName, Vec<&BoostRecord>> = BTreeMap::new();
    for r in &ledger.records {
        by_group.entry(&r.group).or_default().push(r);
    }
    by_group
}

/// The nodes `group` is asked for and does not list: desired beyond what it lists, less the
/// nodes that left it for another group (or were parked) and that it still counts until lowered.
fn missing(group: &Group, ledger: &BoostLedger) -> u32 {
    let Some(members) = group.members.as_ref() else { return 0 };
    let listed = u32::try_from(members.len()).unwrap_or(u32::MAX);
    let left: u32 = ledger
        .records
        .iter()
        .flat_map(|r| {
            r.moved.iter().filter(|p| !p.taken_back && r.left_group(p) == Some(&group.name)).map(|p| r.left_with(p))
        })
        .fold(0, u32::saturating_add);
    group.desired.saturating_sub(listed).saturating_sub(left)
}

/// Whether `group` failed to launch for want of capacity within `policy.capacity_cooldown`.
pub(crate) fn failing(snapshot: &Snapshot, group: &GroupName, policy: &Policy, now: Timestamp) -> bool {
    snapshot.capacity_failures.get(group).is_some_and(|at| now.since(*at) < policy.capacity_cooldown)
}

/// Nodes in flight per group: boosts' nodes not given back, and the nodes moved there.
fn in_flight(ledger: &BoostLedger) -> BTreeMap<&GroupName, u32> {
    let mut counts: BTreeMap<&GroupName, u32> = BTreeMap::new();
    for r in ledger.records.iter().filter(|r| r.expired.is_none()) {
        let own = counts.entry(&r.group).or_default();
        *own = own.saturating_add(r.added.saturating_sub(r.returned));
        for part in r.moved.iter().filter(|p| p.asked()) {
            let moved = counts.entry(&part.group).or_default();
            *moved = moved.saturating_add(part.added);
        }
    }
    counts
}

/// Nodes of one boost that some group was asked for and did not launch, or that wait parked.
struct Claim<'l> {
    record: &'l BoostRecord,
    /// Its boost returns fallback nodes to their own group: tried there only.
    returning: bool,
    /// The part holding them; `None`: the boost's own.
    part: Option<&'l MovedPart>,
    /// How many it holds.
    nodes: u32,
    /// When they were asked for: the oldest claim on a group is served first.
    at: Timestamp,
}

impl Claim<'_> {
    /// Whether every write of its boost is answered, so it can move.
    fn settled(&self) -> bool {
        let r = self.record;
        r.expired.is_none()
            && r.raising_to.is_none()
            && r.moved.iter().all(|p| p.raising_to.is_none() && p.lowering_to.is_none())
    }

    /// The groups its boost tried since it began or since its nodes were last parked.
    fn tried(&self) -> Vec<GroupName> {
        let r = self.record;
        let last_park = r.moved.iter().filter(|p| !p.asked()).map(|p| p.at).max();
        let mut tried: Vec<GroupName> = Vec::new();
        let own = last_park.is_none().then_some(&r.group);
        let since = r.moved.iter().filter(|p| p.asked() && last_park.is_none_or(|at| p.at > at)).map(|p| &p.group);
        for group in own.into_iter().chain(since) {
            if !tried.contains(group) {
                tried.push(group.clone());
            }
        }
        tried
    }
}

/// The moves to make now, from `ledger` (the one the pass keeps), and the nodes to park: at most
/// one per boost and one write per group per pass.
///
/// The nodes a failing group misses are claimed oldest first: its own boosts' (if its tag names
/// fallbacks), then those moved to it. Each claim goes to the best-ranked usable group among the
/// boost's own and the fallbacks its tag names that the boost has not tried since it began or
/// was last parked. When every such group failed or was tried, and at least one of them is a
/// fallback, its nodes are parked: the group lowered by them, and a retry after a backoff that
/// doubles from `--capacity-cooldown` with each parking.
pub(crate) fn plan_fallbacks<'l>(
    snapshot: &'l Snapshot,
    ledger: &'l BoostLedger,
    policy: &Policy,
    now: Timestamp,
) -> FallbackPlan {
    let mut plan = FallbackPlan::default();
    let due = |p: &&MovedPart| p.parked.as_ref().is_some_and(|k| k.retry_at <= now) && p.added > 0;
    let retries: Vec<Claim> = ledger
        .records
        .iter()
        .flat_map(|r| {
            let returning = ledger.is_return(r);
            r.moved.iter().filter(due).map(move |p| Claim {
                record: r,
                returning,
                part: Some(p),
                nodes: p.added,
                at: p.at,
            })
        })
        .collect();
    if snapshot.capacity_failures.is_empty() && retries.is_empty() {
        return plan;
    }
    let mut flight = in_flight(ledger);
    let mut moving: Vec<BoostId> = Vec::new();
    for claim in retries {
        place(snapshot, policy, now, (&claim, claim.nodes, None), (&mut flight, &mut moving), &mut plan);
    }
    for (name, failed_at) in &snapshot.capacity_failures {
        let Some(group) = snapshot.groups.get(name) else { continue };
        if !failing(snapshot, name, policy, now) || group.members.is_none() {
            continue;
        }
        let mut claims: Vec<Claim> = Vec::new();
        for r in &ledger.records {
            let returning = ledger.is_return(r);
            if &r.group == name && (!group.fallbacks.is_empty() || returning) {
                let nodes = r.added.saturating_sub(r.returned);
                claims.push(Claim { record: r, returning, part: None, nodes, at: r.at });
            }
            // A fallback's own failure since its nodes were asked for.
            let failed_since = |p: &&MovedPart| &p.group == name && p.asked() && p.added > 0 && p.at < *failed_at;
            claims.extend(r.moved.iter().filter(failed_since).map(|p| Claim {
                record: r,
                returning,
                part: Some(p),
                nodes: p.added,
                at: p.at,
            }));
        }
        claims.sort_by_key(|c| c.at);
        let mut missing = missing(group, ledger);
        for claim in claims {
            if missing == 0 {
                break;
            }
            let want = missing.min(claim.nodes);
            if want == 0 || !claim.settled() {
                continue;
            }
            missing -= place(snapshot, policy, now, (&claim, want, Some(group)), (&mut flight, &mut moving), &mut plan);
        }
    }
    plan
}

/// Plans where `want` of `claim`'s nodes go, leaving `left` (none: parked nodes retried), and
/// returns how many it placed or parked.
fn place<'l>(
    snapshot: &'l Snapshot,
    policy: &Policy,
    now: Timestamp,
    (claim, want, left): (&Claim<'l>, u32, Option<&Group>),
    (flight, moving): (&mut BTreeMap<&'l GroupName, u32>, &mut Vec<BoostId>),
    plan: &mut FallbackPlan,
) -> u32 {
    let id = claim.record.id();
    if moving.contains(&id) || !claim.settled() {
        return 0;
    }
    let Some(home) = snapshot.groups.get(&claim.record.group) else { return 0 };
    let mut tried = if left.is_some() { claim.tried() } else { Vec::new() };
    let from = claim.part.map(|p| p.at);
    let left_name = left.map(|g| g.name.clone());
    match choose(snapshot, (home, claim.returning), &tried, policy, now, flight, &plan.moves) {
        Choice::To(to, room, rank) => {
            let nodes = want.min(room);
            *flight.entry(&to.name).or_default() += nodes;
            moving.push(id.clone());
            plan.moves.push(Fallback {
                record: id,
                left: left_name,
                from,
                to: to.name.clone(),
                to_desired: to.desired,
                nodes,
                rank,
            });
            nodes
        }
        Choice::Exhausted(failing) => {
            let parkings = claim.record.moved.iter().filter(|p| !p.asked()).count();
            let backoff = policy.capacity_cooldown.saturating_mul(1 << parkings.min(6));
            for g in failing {
                if !tried.contains(&g) {
                    tried.push(g);
                }
            }
            moving.push(id.clone());
            plan.exhausted.push(Exhausted {
                record: id,
                left: left_name,
                from,
                nodes: want,
                tried,
                retry_at: now.plus(backoff),
            });
            want
        }
        Choice::Wait => 0,
    }
}

/// Where a claim's nodes can go now.
enum Choice<'s> {
    /// The best-ranked usable group, with its room and rank.
    To(&'s Group, u32, FallbackRank),
    /// None: every group allowed was tried or is failing (those failing untried, named).
    Exhausted(Vec<GroupName>),
    /// None now, but not for want of capacity: the groups are at their max, over budget or
    /// written this pass, or the boost's tag names no fallback it may use.
    Wait,
}

/// The best-ranked group `home`'s boost may move nodes to now, among `home` itself and the
/// fallbacks its tag names (`home` alone for a return to it), less those in `tried`.
fn choose<'s>(
    snapshot: &'s Snapshot,
    (home, only_home): (&Group, bool),
    tried: &[GroupName],
    policy: &Policy,
    now: Timestamp,
    flight: &BTreeMap<&GroupName, u32>,
    planned: &[Fallback],
) -> Choice<'s> {
    let mut best: Option<(&Group, u32, FallbackRank)> = None;
    let (mut failed, mut fallback_failed, mut waits) = (Vec::new(), false, false);
    let fallbacks = home.fallbacks.iter().filter(|f| **f != home.name && !only_home);
    let candidates = std::iter::once(&home.name).chain(fallbacks);
    for (position, name) in candidates.enumerate() {
        let Some(to) = snapshot.groups.get(name) else { continue };
        let own = position == 0;
        if (!own && refusal(home, to).is_some()) || policy.ignored_groups.contains(name) {
            continue;
        }
        let backed_off = to.ca.as_ref().is_some_and(|ca| ca.backoff.is_some());
        if tried.contains(name) || failing(snapshot, name, policy, now) || backed_off {
            fallback_failed |= !own || only_home;
            if !tried.contains(name) {
                failed.push(name.clone());
            }
            continue;
        }
        let base = to.desired.max(to.ca.as_ref().map_or(0, |ca| ca.cloud_provider_target));
        let budget = policy.max_boost_per_group.saturating_sub(flight.get(name).copied().unwrap_or(0));
        let room = to.max.saturating_sub(base).min(budget);
        // One write per group per pass.
        if room == 0 || planned.iter().any(|p| &p.to == name) {
            waits = true;
            continue;
        }
        let rank = FallbackRank::of(&snapshot.market, name, position);
        // The first of equals: the order (own group, then the tag's) breaks every tie.
        if best.as_ref().is_none_or(|(_, _, b)| rank.partial_cmp(b) == Some(std::cmp::Ordering::Less)) {
            best = Some((to, room, rank));
        }
    }
    match best {
        Some((to, room, rank)) => Choice::To(to, room, rank),
        None if fallback_failed && !waits => Choice::Exhausted(failed),
        None => Choice::Wait,
    }
}

/// Lowering the group nodes left by those of them that will never launch there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TakeBack {
    /// The boost.
    pub record: BoostId,
    /// The group lowered: the boost's own, or a fallback its nodes moved on from.
    pub group: GroupName,
    /// Its desired capacity the plan starts from.
    pub from: u32,
    /// Nodes taken back.
    pub nodes: u32,
    /// When its nodes moved.
    pub moved_at: Timestamp,
}

impl TakeBack {
    /// Its intent, saved before the guarded write.
    pub fn lowering(&self) -> LedgerEdit {
        LedgerEdit::Lowering { id: self.record.clone(), moved_at: self.moved_at, to: self.to() }
    }

    /// AWS's answer: `lowered` when desired capacity went down.
    pub fn lowered(&self, lowered: bool) -> LedgerEdit {
        LedgerEdit::Answer {
            write: Pending::Lower { id: self.record.clone(), moved_at: self.moved_at },
            applied: lowered,
        }
    }

    /// The desired capacity it asks for.
    pub fn to(&self) -> u32 {
        self.from.saturating_sub(self.nodes)
    }
}

/// The groups to lower by nodes that left them for a fallback or were parked (one per group per
/// pass), from their desired capacity in `snapshot`. The write is guarded: sent only while the
/// group lists no more instances than the lowered value.
pub fn plan_take_backs(snapshot: &Snapshot, ledger: &BoostLedger) -> Vec<TakeBack> {
    let mut plan: Vec<TakeBack> = Vec::new();
    for r in &ledger.records {
        // Not while another write of the boost has an unknown outcome.
        if r.unconfirmed().is_some() || r.moved.iter().any(|p| p.lowering_to.is_some()) {
            continue;
        }
        for part in r.moved.iter().filter(|p| p.raising_to.is_none() && !p.taken_back) {
            let Some(group) = r.left_group(part).and_then(|g| snapshot.groups.get(g)) else { continue };
            if plan.iter().any(|t| t.group == group.name) {
                continue;
            }
            // Only when the guard would let it through: a group that lists more instances than
            // the lowered value (its capacity came back) keeps them, and is not asked again
            // every pass.
            let listed = group.members.as_ref().map_or(u32::MAX, |m| u32::try_from(m.len()).unwrap_or(u32::MAX));
            let nodes = r.left_with(part);
            let to = group.desired.saturating_sub(nodes);
            if listed <= to && to >= group.min && to < group.desired {
                plan.push(TakeBack {
                    record: r.id(),
                    group: group.name.clone(),
                    from: group.desired,
                    nodes,
                    moved_at: part.at,
                });
                break;
            }
        }
    }
    plan
}

/// Failed launches (decayed) past which a fallback's pools count as failing lately.
const FAILED_LATELY: f64 = 0.5;

/// What ranks a usable fallback: compared field by field, the least first.
#[derive(Debug, Clone, Copy, Default, PartialEq, PartialOrd, Serialize, Deserialize)]
pub struct FallbackRank {
    /// Its pools failed to launch lately (pool memory, past the cool-down).
    pub failed_lately: bool,
    /// Interruptions EC2 confirmed in its pools (decayed).
    pub interruptions: f64,
    /// Its place: 0 for the boost's own group, then the tag's order.
    pub position: usize,
}

// Its counts are sums of finite decayed counts: never NaN.
impl Eq for FallbackRank {}

impl FallbackRank {
    /// `to`'s rank at `position`, from pool memory's `histories`.
    pub fn of(histories: &[PoolHistory], to: &GroupName, position: usize) -> Self {
        let (failed, interruptions) = histories
            .iter()
            .filter(|h| &h.group == to)
            .fold((0.0, 0.0), |(f, i), h| (f + h.failed_launches, i + h.interruptions));
        FallbackRank { failed_lately: failed >= FAILED_LATELY, interruptions, position }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::core::model::{BoostRecord, MovedPart};

    const NOW: Timestamp = Timestamp::from_millis(600_000);

    fn moves(s: &Snapshot, ledger: &BoostLedger, policy: &Policy, now: Timestamp) -> Vec<Fallback> {
        plan_fallbacks(s, ledger, policy, now).moves
    }

    /// `spot-a` boosted 5 → 8 for three at-risk nodes, none launched; it falls back to `spot-b`,
    /// then `od`.
    fn exhausted() -> Snapshot {
        let mut s = Snapshot::default();
        let mut a = Group::test("spot-a").desired(8).members(["i-1", "i-2", "i-3", "i-4", "i-5"]);
        a.max = 20;
        a.fallbacks = vec!["spot-b".into(), "od".into()];
        s.groups.insert(a.name.clone(), a);
        for (name, desired) in [("spot-b", 4), ("od", 2)] {
            let mut g = Group::test(name).desired(desired);
            g.max = 20;
            s.groups.insert(g.name.clone(), g);
        }
        let mut record = BoostRecord::test("spot-a", &["i-1", "i-2", "i-3"], 3, 100_000);
        record.before = 5;
        s.ledger.record(record);
        s.capacity_failures.insert("spot-a".into(), Timestamp::from_millis(590_000));
        s
    }

    #[test]
    fn the_nodes_a_boost_misses_move_to_the_first_fallback_that_can_launch() {
        let s = exhausted();
        let plan = moves(&s, &s.ledger, &Policy::default(), NOW);
        assert_eq!(plan.len(), 1);
        let f = &plan[0];
        assert_eq!(
            (f.record.group.as_str(), f.left.as_ref().map(|g| g.as_str()), f.to.as_str(), f.nodes, f.to_desired),
            ("spot-a", Some("spot-a"), "spot-b", 3, 4)
        );

        // spot-b failed too: od takes them.
        let mut both = s.clone();
        both.capacity_failures.insert("spot-b".into(), Timestamp::from_millis(595_000));
        assert_eq!(moves(&both, &both.ledger, &Policy::default(), NOW)[0].to.as_str(), "od");

        // A failure older than the cool-down is forgotten.
        let later = Timestamp::from_millis(590_000 + 180_000);
        assert!(moves(&s, &s.ledger, &Policy::default(), later).is_empty());
    }

    fn history(group: &str, failed_launches: f64, interruptions: f64) -> PoolHistory {
        PoolHistory {
            group: group.into(),
            pool: crate::core::model::Pool { instance_type: "m5.large".into(), zone: "us-east-1a".into() },
            converted: 0.0,
            lapsed: 0.0,
            lead_seconds: Vec::new(),
            interruptions,
            failed_launches,
        }
    }

    #[test]
    fn the_fallback_is_chosen_by_what_pool_memory_knows_then_by_the_tag() {
        let to = |s: &Snapshot| moves(s, &s.ledger, &Policy::default(), NOW)[0].to.to_string();
        let mut s = exhausted();
        s.market = vec![history("spot-b", 0.0, 0.0), history("od", 0.0, 0.0)];
        assert_eq!(to(&s), "spot-b", "nothing known against either: the tag's order");

        // spot-b's pools failed to launch an hour ago (past the cool-down): od first.
        s.market = vec![history("spot-b", 2.0, 0.0)];
        assert_eq!(to(&s), "od");

        // Both failed lately: the one EC2 interrupted less.
        s.market = vec![history("spot-b", 1.0, 1.0), history("od", 3.0, 6.0)];
        assert_eq!(to(&s), "spot-b");
        s.market = vec![history("spot-b", 0.0, 4.0), history("od", 0.0, 0.5)];
        assert_eq!(to(&s), "od", "no failures: fewer interruptions first");

        // A failure almost decayed away no longer counts.
        s.market = vec![history("spot-b", 0.1, 0.0)];
        assert_eq!(to(&s), "spot-b");

        // Ranking never brings back a fallback the plan skips outright.
        s.market = vec![history("od", 5.0, 5.0)];
        s.capacity_failures.insert("spot-b".into(), Timestamp::from_millis(595_000));
        assert_eq!(to(&s), "od");
    }

    #[test]
    fn nodes_are_never_moved_twice_nor_more_than_are_missing() {
        let mut s = exhausted();
        // One of the three launched after all.
        s.groups.get_mut(&GroupName::from("spot-a")).unwrap().members.as_mut().unwrap().insert("i-6".into());
        let plan = moves(&s, &s.ledger, &Policy::default(), NOW);
        assert_eq!(plan[0].nodes, 2);

        // Once moved (and spot-a not lowered yet), nothing more moves.
        let r = &mut s.ledger.records[0];
        r.added = 1;
        r.moved.push(MovedPart {
            group: "spot-b".into(),
            added: 2,
            at: NOW,
            raising_to: None,
            taken_back: false,
            lowering_to: None,
            from: None,
            parked: None,
        });
        assert!(moves(&s, &s.ledger, &Policy::default(), NOW).is_empty());

        // A move whose write's outcome is unknown is resolved first.
        let mut pending = exhausted();
        pending.ledger.records[0].moved.push(MovedPart {
            group: "spot-b".into(),
            added: 1,
            at: NOW,
            raising_to: Some(5),
            taken_back: false,
            lowering_to: None,
            from: None,
            parked: None,
        });
        pending.ledger.records[0].added = 2;
        assert!(moves(&pending, &pending.ledger, &Policy::default(), NOW).is_empty());
    }

    #[test]
    fn a_fallback_at_its_max_budget_or_backoff_is_skipped_and_none_is_no_move() {
        let mut s = exhausted();
        s.groups.get_mut(&GroupName::from("spot-b")).unwrap().max = 5;
        let plan = moves(&s, &s.ledger, &Policy::default(), NOW);
        assert_eq!((plan[0].to.as_str(), plan[0].nodes), ("spot-b", 1), "its room only");

        s.groups.get_mut(&GroupName::from("spot-b")).unwrap().max = 4;
        s.groups.get_mut(&GroupName::from("od")).unwrap().ca = Some(crate::core::model::CaGroupView {
            cloud_provider_target: 2,
            backoff: Some("InstanceLimitExceeded".into()),
            healthy: true,
            ready: None,
        });
        assert!(moves(&s, &s.ledger, &Policy::default(), NOW).is_empty(), "nowhere to go");

        let mut no_tag = exhausted();
        no_tag.groups.get_mut(&GroupName::from("spot-a")).unwrap().fallbacks.clear();
        assert!(moves(&no_tag, &no_tag.ledger, &Policy::default(), NOW).is_empty());
    }

    #[test]
    fn a_fallback_this_daemon_does_not_serve_is_never_used_whatever_the_tag_names() {
        // The tag may name any group in the region: another cluster's, or one the filter leaves out.
        for (why, edit) in [
            ("another cluster's", (|g: &mut Group| g.foreign = true) as fn(&mut Group)),
            ("left out by --asg-tag-filter", |g: &mut Group| g.excluded = true),
            ("an EKS managed node group's", |g: &mut Group| g.eks_node_group = Some("ng".into())),
        ] {
            let mut s = exhausted();
            edit(s.groups.get_mut(&GroupName::from("spot-b")).unwrap());
            let plan = moves(&s, &s.ledger, &Policy::default(), NOW);
            assert_eq!(plan[0].to.as_str(), "od", "spot-b is {why}: the next one this daemon serves");
            edit(s.groups.get_mut(&GroupName::from("od")).unwrap());
            assert!(moves(&s, &s.ledger, &Policy::default(), NOW).is_empty(), "{why}: nowhere to go");
        }
    }

    #[test]
    fn an_instancegroup_s_group_falls_back_only_within_its_namespace_and_says_what_it_refused() {
        // `a-gpu` in namespace `team` and `gpu` in namespace `team-a` are both `prod-team-a-gpu`.
        let mut s = exhausted();
        let tenant = |s: &mut Snapshot, group: &str, ns: &str| {
            s.groups.get_mut(&GroupName::from(group)).unwrap().tenant_namespace = Some(ns.into());
        };
        tenant(&mut s, "spot-a", "team");
        tenant(&mut s, "spot-b", "team-a");
        tenant(&mut s, "od", "team");
        let plan = moves(&s, &s.ledger, &Policy::default(), NOW);
        assert_eq!(plan[0].to.as_str(), "od", "the other tenant's group is passed over");
        let refused = refused_fallbacks(&s, &s.ledger, &Policy::default(), NOW);
        assert_eq!(refused.len(), 1, "{refused:?}");
        assert_eq!((refused[0].to.as_str(), refused[0].reason), ("spot-b", FallbackRefusal::OtherNamespace));
        assert_eq!(refused[0].record.group.as_str(), "spot-a");

        // An operator's group (no InstanceGroup) is no fallback of a tenant's either.
        s.groups.get_mut(&GroupName::from("od")).unwrap().tenant_namespace = None;
        assert!(moves(&s, &s.ledger, &Policy::default(), NOW).is_empty(), "the boost waits");
        assert_eq!(refused_fallbacks(&s, &s.ledger, &Policy::default(), NOW).len(), 2);

        // Nothing is refused while nothing is missing, or the group launches.
        let mut launched = s.clone();
        launched.capacity_failures.clear();
        assert!(refused_fallbacks(&launched, &launched.ledger, &Policy::default(), NOW).is_empty());
        let mut full = s.clone();
        full.groups.get_mut(&GroupName::from("spot-a")).unwrap().desired = 5;
        assert!(refused_fallbacks(&full, &full.ledger, &Policy::default(), NOW).is_empty());
    }

    #[test]
    fn a_refused_fallback_names_its_reason_for_another_cluster_s_and_an_unselected_group() {
        let mut s = exhausted();
        s.groups.get_mut(&GroupName::from("spot-b")).unwrap().foreign = true;
        s.groups.get_mut(&GroupName::from("od")).unwrap().excluded = true;
        let reasons: Vec<_> =
            refused_fallbacks(&s, &s.ledger, &Policy::default(), NOW).into_iter().map(|r| (r.to, r.reason)).collect();
        assert_eq!(
            reasons,
            vec![("spot-b".into(), FallbackRefusal::NotThisCluster), ("od".into(), FallbackRefusal::NotSelected)]
        );
        let od = s.groups.get_mut(&GroupName::from("od")).unwrap();
        (od.excluded, od.eks_node_group) = (false, Some("od-managed".into()));
        let refused = refused_fallbacks(&s, &s.ledger, &Policy::default(), NOW);
        assert_eq!((refused[1].reason, refused[1].reason.as_str()), (FallbackRefusal::EksManaged, "eks-managed"));
    }

    /// `exhausted()` after its three nodes moved to spot-b at 595 s, the move answered and
    /// spot-a lowered by them; spot-b (4 → 7) lists none of them.
    fn moved_to_spot_b() -> Snapshot {
        let mut s = exhausted();
        let id = s.ledger.records[0].id();
        let mut ledger = s.ledger.clone();
        let moving = Fallback {
            record: id.clone(),
            left: Some("spot-a".into()),
            from: None,
            to: "spot-b".into(),
            to_desired: 4,
            nodes: 3,
            rank: FallbackRank::default(),
        }
        .moving(Timestamp::from_millis(595_000));
        assert!(moving.apply(&mut ledger));
        assert!(moving.confirm().unwrap().apply(&mut ledger));
        let take_back = TakeBack {
            record: id,
            group: "spot-a".into(),
            from: 8,
            nodes: 3,
            moved_at: Timestamp::from_millis(595_000),
        };
        assert!(take_back.lowering().apply(&mut ledger) && take_back.lowered(true).apply(&mut ledger));
        s.ledger = ledger;
        s.groups.get_mut(&GroupName::from("spot-a")).unwrap().desired = 5;
        s.groups.get_mut(&GroupName::from("spot-b")).unwrap().desired = 7;
        s.groups.get_mut(&GroupName::from("spot-b")).unwrap().members =
            Some(["i-b1", "i-b2", "i-b3", "i-b4"].into_iter().map(Into::into).collect());
        s.groups.get_mut(&GroupName::from("od")).unwrap().members =
            Some(["i-o1", "i-o2"].into_iter().map(Into::into).collect());
        s
    }

    #[test]
    fn a_fallback_that_fails_too_passes_its_nodes_on_to_the_next_group_and_is_lowered_by_them() {
        let mut s = moved_to_spot_b();
        assert!(moves(&s, &s.ledger, &Policy::default(), NOW).is_empty(), "spot-b has not failed: its nodes wait");

        // spot-b failed before the nodes were asked of it: not about them.
        s.capacity_failures.insert("spot-b".into(), Timestamp::from_millis(594_000));
        assert!(moves(&s, &s.ledger, &Policy::default(), NOW).is_empty());

        s.capacity_failures.insert("spot-b".into(), Timestamp::from_millis(598_000));
        let plan = moves(&s, &s.ledger, &Policy::default(), NOW);
        assert_eq!(plan.len(), 1, "{plan:?}");
        let f = &plan[0];
        assert_eq!(
            (f.left.as_ref().map(|g| g.as_str()), f.from, f.to.as_str(), f.nodes),
            (Some("spot-b"), Some(Timestamp::from_millis(595_000)), "od", 3),
            "spot-a was tried and fails still: the next untried group takes them"
        );
        let mut ledger = s.ledger.clone();
        assert!(f.moving(NOW).apply(&mut ledger) && f.moving(NOW).confirm().unwrap().apply(&mut ledger));
        let r = &ledger.records[0];
        assert_eq!(r.moved.iter().map(|p| (p.group.as_str(), p.added)).collect::<Vec<_>>(), [("spot-b", 0), ("od", 3)]);

        // spot-b still counts the three in its desired capacity: lowered by them, once.
        let plan = plan_take_backs(&s, &ledger);
        assert_eq!(plan.len(), 1, "{plan:?}");
        assert_eq!((plan[0].group.as_str(), plan[0].from, plan[0].to(), plan[0].moved_at), ("spot-b", 7, 4, NOW));
        s.ledger = ledger;
        assert!(moves(&s, &s.ledger, &Policy::default(), NOW).is_empty(), "nothing is missing in spot-b any more");
    }

    #[test]
    fn nodes_no_group_launches_are_parked_their_group_lowered_then_retried_after_a_backoff_that_grows() {
        let mut s = moved_to_spot_b();
        s.capacity_failures.insert("spot-b".into(), Timestamp::from_millis(598_000));
        s.capacity_failures.insert("od".into(), Timestamp::from_millis(599_000));
        let plan = plan_fallbacks(&s, &s.ledger, &Policy::default(), NOW);
        assert!(plan.moves.is_empty());
        assert_eq!(plan.exhausted.len(), 1, "{plan:?}");
        let e = &plan.exhausted[0];
        let cooldown = Policy::default().capacity_cooldown;
        assert_eq!((e.left.as_ref().map(|g| g.as_str()), e.nodes), (Some("spot-b"), 3));
        assert_eq!(e.tried, ["spot-a", "spot-b", "od"].map(GroupName::from), "every group tried, in order");
        assert_eq!(e.retry_at, NOW.plus(cooldown));

        let mut ledger = s.ledger.clone();
        assert!(e.parking(NOW).apply(&mut ledger));
        // The parked nodes are asked of no group, and spot-b is lowered by them.
        assert!(in_flight(&ledger).get(&GroupName::from("spot-b")).is_none_or(|n| *n == 0));
        let take_back = plan_take_backs(&s, &ledger);
        assert_eq!((take_back[0].group.as_str(), take_back[0].to()), ("spot-b", 4));
        assert!(take_back[0].lowering().apply(&mut ledger) && take_back[0].lowered(true).apply(&mut ledger));
        s.ledger = ledger;
        s.groups.get_mut(&GroupName::from("spot-b")).unwrap().desired = 4;
        assert_eq!(plan_fallbacks(&s, &s.ledger, &Policy::default(), NOW), FallbackPlan::default(), "they wait");

        // At the retry every failure is past the cool-down: the boost's own group, first in order.
        let retry = NOW.plus(cooldown);
        let plan = plan_fallbacks(&s, &s.ledger, &Policy::default(), retry);
        assert_eq!(plan.moves.len(), 1, "{plan:?}");
        let f = &plan.moves[0];
        assert_eq!(
            (f.left.as_ref(), f.from, f.to.as_str(), f.nodes, f.rank.position),
            (None, Some(NOW), "spot-a", 3, 0)
        );
        assert!(
            match f.moving(retry) {
                LedgerEdit::Move(_, part) => part.taken_back,
                _ => false,
            },
            "no group counts parked nodes: nothing to lower for them"
        );

        // Still failing everywhere at the retry: parked again, the backoff doubled.
        for group in ["spot-a", "spot-b", "od"] {
            s.capacity_failures.insert(group.into(), retry.minus(Duration::from_secs(1)));
        }
        let plan = plan_fallbacks(&s, &s.ledger, &Policy::default(), retry);
        assert!(plan.moves.is_empty());
        assert_eq!(plan.exhausted.len(), 1, "{plan:?}");
        let again = &plan.exhausted[0];
        assert_eq!((again.left.as_ref(), again.from, again.retry_at), (None, Some(NOW), retry.plus(cooldown * 2)));
        assert_eq!(
            again.tried,
            ["spot-a", "spot-b", "od"].map(GroupName::from),
            "those failing, untried since the retry"
        );
    }

    #[test]
    fn a_return_whose_own_group_fails_is_parked_and_retried_there_never_moved_to_a_fallback() {
        // od's node o9 returns to spot-a: spot-a (5 → 6) fails to launch its replacement.
        let mut s = exhausted();
        s.ledger.records.clear();
        s.groups.get_mut(&GroupName::from("spot-a")).unwrap().desired = 6;
        let mut record = BoostRecord::test("spot-a", &["i-o9"], 1, 595_000);
        record.before = 5;
        s.ledger.record(record);
        s.ledger.returning.insert(
            "i-o9".into(),
            crate::core::model::Returning {
                node: "o9".into(),
                home: "spot-a".into(),
                from: "od".into(),
                at: Timestamp::from_millis(595_000),
                since: Timestamp::from_millis(1_000),
                surplus: false,
            },
        );
        s.capacity_failures.insert("spot-a".into(), Timestamp::from_millis(598_000));
        let plan = plan_fallbacks(&s, &s.ledger, &Policy::default(), NOW);
        assert!(plan.moves.is_empty(), "{plan:?}");
        assert_eq!(plan.exhausted.len(), 1);
        assert_eq!((plan.exhausted[0].tried.clone(), plan.exhausted[0].nodes), (vec![GroupName::from("spot-a")], 1));
        // Even with spot-a's own tag emptied, the return is still parked, not left counted.
        s.groups.get_mut(&GroupName::from("spot-a")).unwrap().fallbacks.clear();
        assert_eq!(plan_fallbacks(&s, &s.ledger, &Policy::default(), NOW).exhausted.len(), 1);

        // Its retry goes to spot-a alone.
        let mut ledger = s.ledger.clone();
        assert!(plan.exhausted[0].parking(NOW).apply(&mut ledger));
        s.ledger = ledger;
        let retry = NOW.plus(Policy::default().capacity_cooldown);
        let again = plan_fallbacks(&s, &s.ledger, &Policy::default(), retry);
        assert_eq!(again.moves.iter().map(|m| m.to.as_str()).collect::<Vec<_>>(), ["spot-a"]);
    }

    #[test]
    fn a_boost_with_no_fallback_it_may_use_waits_instead_of_parking() {
        // The tag names only a group at its max: the boost waits for room, it is not parked.
        let mut s = moved_to_spot_b();
        s.capacity_failures.insert("spot-b".into(), Timestamp::from_millis(598_000));
        s.groups.get_mut(&GroupName::from("od")).unwrap().max = 2;
        assert_eq!(plan_fallbacks(&s, &s.ledger, &Policy::default(), NOW), FallbackPlan::default());

        // Every fallback refused: the own group's failure alone parks nothing.
        let mut s = exhausted();
        s.groups.get_mut(&GroupName::from("spot-b")).unwrap().foreign = true;
        s.groups.get_mut(&GroupName::from("od")).unwrap().excluded = true;
        assert_eq!(plan_fallbacks(&s, &s.ledger, &Policy::default(), NOW), FallbackPlan::default());
    }

    #[test]
    fn a_moved_part_takes_its_group_back_once_and_not_while_a_write_is_unknown() {
        let mut s = exhausted();
        let part = |raising_to, taken_back, lowering_to| MovedPart {
            group: "spot-b".into(),
            added: 3,
            at: NOW,
            raising_to,
            taken_back,
            lowering_to,
            from: None,
            parked: None,
        };
        s.ledger.records[0].added = 0;
        s.ledger.records[0].moved.push(part(None, false, None));
        let plan = plan_take_backs(&s, &s.ledger);
        assert_eq!(plan.len(), 1);
        assert_eq!((plan[0].record.group.as_str(), plan[0].from, plan[0].nodes), ("spot-a", 8, 3));

        // Its capacity came back and it launched them: nothing to take back, nothing asked.
        let mut back = s.clone();
        let members = back.groups.get_mut(&GroupName::from("spot-a")).unwrap().members.as_mut().unwrap();
        members.extend(["i-6".into(), "i-7".into(), "i-8".into()]);
        assert!(plan_take_backs(&back, &back.ledger).is_empty());

        for (raising, taken, lowering) in [(Some(7), false, None), (None, true, None), (None, false, Some(5))] {
            s.ledger.records[0].moved[0] = part(raising, taken, lowering);
            assert!(plan_take_backs(&s, &s.ledger).is_empty(), "{:?}", s.ledger.records[0].moved[0]);
        }
    }
}

#[cfg(test)]
mod properties {
    use std::collections::BTreeSet;
    use std::time::Duration;

    use proptest::prelude::*;

    use super::*;
    use crate::core::model::BoostRecord;

    const SIZE: u32 = 5;

    /// `g0` boosted by `added` for one at-risk node, its tag naming `fallbacks` more groups, every
    /// group listing `SIZE` instances and launching nothing more.
    fn world(fallbacks: usize, added: u32) -> Snapshot {
        let mut s = Snapshot::default();
        for k in 0..=fallbacks {
            let name = format!("g{k}");
            let members: Vec<String> = (0..SIZE).map(|i| format!("i-{name}-{i}")).collect();
            let mut g = Group::test(&name).desired(SIZE).members(members.iter().map(String::as_str));
            g.max = 40;
            if k == 0 {
                g.fallbacks = (1..=fallbacks).map(|f| GroupName::from(format!("g{f}").as_str())).collect();
                g.desired = SIZE + added;
            }
            s.groups.insert(g.name.clone(), g);
        }
        let mut record = BoostRecord::test("g0", &["i-g0-0"], added, 0);
        record.before = SIZE;
        s.ledger.record(record);
        s
    }

    /// What each group's desired capacity must count beyond its own `SIZE`: the nodes asked of
    /// it, and those that left it and it was not lowered for yet.
    fn counted(r: &BoostRecord, group: &GroupName) -> u32 {
        let own = if &r.group == group { r.added } else { 0 };
        let asked: u32 = r.moved.iter().filter(|p| p.asked() && &p.group == group).map(|p| p.added).sum();
        let left: u32 =
            r.moved.iter().filter(|p| !p.taken_back && r.left_group(p) == Some(group)).map(|p| r.left_with(p)).sum();
        own + asked + left
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

        /// Whatever fails when, every node a boost asked for is counted by exactly the groups
        /// that should count it: none is lost, none is asked twice, no group is left counting a
        /// node it could not launch once lowered, and none goes below its size.
        #[test]
        fn moving_on_parking_and_retrying_keep_every_node_counted_once(
            fallbacks in 1usize..4,
            added in 1u32..4,
            steps in proptest::collection::vec(
                (proptest::collection::vec(any::<bool>(), 4), 1u64..400, any::<bool>()),
                1..14,
            ),
        ) {
            let mut s = world(fallbacks, added);
            let policy = Policy::default();
            let mut now = Timestamp::from_millis(1_000_000);
            for (failing, wait, lowered) in steps {
                now = now.plus(Duration::from_secs(wait));
                for (k, fails) in failing.iter().enumerate().take(fallbacks + 1) {
                    if *fails {
                        s.capacity_failures.insert(GroupName::from(format!("g{k}").as_str()), now.minus(Duration::from_secs(1)));
                    }
                }
                let plan = plan_fallbacks(&s, &s.ledger, &policy, now);
                let boosts: BTreeSet<&BoostId> = plan.moves.iter().map(|m| &m.record).chain(plan.exhausted.iter().map(|e| &e.record)).collect();
                prop_assert_eq!(boosts.len(), plan.moves.len() + plan.exhausted.len(), "one step per boost per pass");
                let mut ledger = s.ledger.clone();
                for m in &plan.moves {
                    let tried: Vec<GroupName> =
                        Claim { record: &ledger.records[0], returning: false, part: None, nodes: 0, at: now }.tried();
                    prop_assert!(m.left.is_none() || !tried.contains(&m.to), "{:?} was tried: {:?}", m.to, tried);
                    let moving = m.moving(now);
                    prop_assert!(moving.apply(&mut ledger));
                    prop_assert!(moving.confirm().unwrap().apply(&mut ledger));
                    s.groups.get_mut(&m.to).unwrap().desired += m.nodes;
                }
                for e in &plan.exhausted {
                    prop_assert!(e.parking(now).apply(&mut ledger));
                }
                s.ledger = ledger;
                // A lowering AWS refuses (the group changed) is planned again later, perhaps
                // after its nodes moved on.
                for t in plan_take_backs(&s, &s.ledger) {
                    let mut ledger = s.ledger.clone();
                    prop_assert!(t.lowering().apply(&mut ledger) && t.lowered(lowered).apply(&mut ledger));
                    s.ledger = ledger;
                    if lowered {
                        s.groups.get_mut(&t.group).unwrap().desired = t.to();
                    }
                }
                let r = &s.ledger.records[0];
                let held: u32 = r.added + r.moved.iter().map(|p| p.added).sum::<u32>();
                prop_assert_eq!(held, added, "every node is somewhere: {:?}", r.moved);
                for g in s.groups.values() {
                    prop_assert!(g.desired >= SIZE, "{} below its size", g.name);
                    prop_assert_eq!(g.desired - SIZE, counted(r, &g.name), "{}: {:?}", g.name, r.moved);
                }
            }
            // Once AWS takes the lowerings, every group nodes left is lowered for them.
            for _ in 0..=fallbacks + 1 {
                for t in plan_take_backs(&s, &s.ledger) {
                    prop_assert!(t.lowering().apply(&mut s.ledger) && t.lowered(true).apply(&mut s.ledger));
                    s.groups.get_mut(&t.group).unwrap().desired = t.to();
                }
            }
            let r = &s.ledger.records[0];
            let still = r.moved.iter().filter(|p| !p.taken_back && r.left_group(p).is_some()).count();
            prop_assert_eq!(still, 0, "a group still counts nodes that left it: {:?}", r.moved);
        }
    }
}
