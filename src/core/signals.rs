//! Folds raw signals into per-group sets of at-risk instances: one entry per instance however
//! many Events, modes or repeats reported it; dropped when stale, when its node is gone, or when
//! nothing should be done for it.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::fast_hash::{FastMap, FastSet};
use super::flag_set::FlagSet;
use super::identity::{self, Distrust};
use super::model::{
    BoostLedger, Evidence, Group, GroupName, InstanceFacts, InstanceId, InstanceLifecycle, Node, NodeName, Signal,
    SignalKind, Snapshot, Timestamp, INTERRUPTION_NOTICE,
};
use super::policy::Policy;

/// One instance known to be at risk.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AtRisk {
    /// The instance.
    pub instance: InstanceId,
    /// Its node.
    pub node: NodeName,
    /// Every kind reported for it.
    pub(crate) kinds: FlagSet<SignalKind>,
    /// The earliest observation.
    pub first_seen: Timestamp,
    /// What vouched for the signals.
    pub evidence: FlagSet<Evidence>,
    /// The earliest deadline its notices set (see [`crate::core::Signal::deadline`]); `None` when
    /// only warnings without one (rebalance recommendations, rotations) speak for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<Timestamp>,
    /// AWS confirms a notice with a deadline could be real: the instance is spot (for spot
    /// kinds), or EC2 lists a scheduled event for it (for scheduled maintenance). Only then may
    /// the notice override a pod's opt-out.
    #[serde(default)]
    pub confirmed: bool,
}

/// Why a signal does not make its instance at risk.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "reason", content = "detail")]
pub enum DropReason {
    /// The node is gone, or now runs another instance.
    NodeGone,
    /// An operator opted the node out (`spots-booster.io/disabled=true`).
    NodeOptedOut,
    /// The node's instance belongs to no known group.
    NoGroup,
    /// The group is listed in `--ignored-autoscaling-groups`.
    IgnoredGroup,
    /// The group's tags do not match `--asg-tag-filter`: nothing of it is touched, not even a
    /// drain or a termination.
    NotSelected,
    /// The instance belongs to another cluster's group (its tags do not name this cluster): a
    /// Node may name any instance, and matching it by address never makes it this cluster's.
    NotThisCluster,
    /// The group backs an EKS managed node group: EKS owns its size, replaces a spot node on a
    /// rebalance recommendation itself and drains the nodes it removes, so the booster holds.
    EksManaged,
    /// Older than `--signal-max-age` and never boosted.
    Expired,
    /// Only kinds that the ASG handles itself (lifecycle terminations, state changes, unknown).
    NoReplacementCalledFor,
    /// Cluster Autoscaler is already deleting the node.
    DeletingByCa,
    /// Only a rebalance recommendation speaks for it, and its standby lapsed: the node keeps
    /// running, and only an interruption notice is answered now.
    StandbyLapsed,
    /// Only Events vouch for it, and the Node or AWS does not agree.
    Untrusted(Distrust),
}

impl DropReason {
    /// The kebab-case name used in reports and metric labels.
    pub fn as_str(&self) -> &'static str {
        match self {
            DropReason::NodeGone => "node-gone",
            DropReason::NodeOptedOut => "node-opted-out",
            DropReason::NoGroup => "no-group",
            DropReason::IgnoredGroup => "ignored-group",
            DropReason::NotSelected => "not-selected",
            DropReason::NotThisCluster => "not-this-cluster",
            DropReason::EksManaged => "eks-managed",
            DropReason::Expired => "expired",
            DropReason::NoReplacementCalledFor => "no-replacement-called-for",
            DropReason::DeletingByCa => "deleting-by-ca",
            DropReason::StandbyLapsed => "standby-lapsed",
            DropReason::Untrusted(d) => d.as_str(),
        }
    }
}

/// A signal's instance that is not at risk, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dropped {
    /// The instance named by the signal.
    pub instance: InstanceId,
    /// Why it is not at risk.
    pub reason: DropReason,
}

/// At-risk instances by group and instance, plus what was dropped.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AtRiskSet {
    /// Per group, its at-risk instances.
    pub(crate) by_group: BTreeMap<GroupName, BTreeMap<InstanceId, AtRisk>>,
    /// Signals that made no instance at risk, one entry per instance.
    pub dropped: Vec<Dropped>,
}

impl AtRisk {
    /// `node`, running `instance`, as a pool-mate seen at `now`: no signal of its own, no
    /// deadline, nothing confirmed (it is never drained for this).
    pub(crate) fn pool_mate(node: &Node, instance: &InstanceId, now: Timestamp) -> AtRisk {
        AtRisk {
            instance: instance.clone(),
            node: node.name.clone(),
            kinds: FlagSet::default(),
            first_seen: now,
            evidence: FlagSet::default(),
            deadline: None,
            confirmed: false,
        }
    }
}

/// Whether only a rebalance recommendation speaks for `risk` and its standby lapsed on `ledger`.
fn lapsed_recommendation(ledger: &BoostLedger, risk: &AtRisk) -> bool {
    ledger.lapsed.contains_key(&risk.instance) && risk.kinds.iter().all(|k| k == SignalKind::Rebalance)
}

impl AtRiskSet {
    /// Drops the instances whose recommendation lapsed on `ledger` and that no open boost of it
    /// covers any more: the lapse of a pass's own stage uncovers them after the set was folded on
    /// the ledger as the pass began, and they must not be boosted again by its later stages.
    pub(crate) fn drop_lapsed(&mut self, ledger: &BoostLedger) {
        if ledger.lapsed.is_empty() {
            return;
        }
        let covered = ledger.index();
        for risks in self.by_group.values_mut() {
            let gone: Vec<InstanceId> = risks
                .values()
                .filter(|r| !covered.contains_key(&r.instance) && lapsed_recommendation(ledger, r))
                .map(|r| r.instance.clone())
                .collect();
            for instance in gone {
                risks.remove(&instance);
                self.dropped.push(Dropped { instance, reason: DropReason::StandbyLapsed });
            }
        }
        self.by_group.retain(|_, risks| !risks.is_empty());
    }

    /// Number of at-risk instances across groups.
    pub fn len(&self) -> usize {
        self.by_group.values().map(BTreeMap::len).sum()
    }

    /// Whether no instance is at risk.
    pub fn is_empty(&self) -> bool {
        self.by_group.is_empty()
    }

    /// Every at-risk instance, for passes that ask of many whether they are at risk.
    pub(crate) fn instances(&self) -> FastSet<&InstanceId> {
        let mut ids = FastSet::with_capacity_and_hasher(self.len(), Default::default());
        ids.extend(self.by_group.values().flat_map(|m| m.keys()));
        ids
    }
}

/// The node each at-risk instance runs on, as the fold found it. The later stages of one pass
/// look a node up here, by its instance id (inline, hashed without following a pointer), instead
/// of by its name in the snapshot's ordered map: a long node name costs a string compare at every
/// level of that map, each through a pointer to memory the pass has not touched yet.
/// The fold's own map of positions serves as the index: nothing more is hashed to build it.
#[derive(Debug)]
pub(crate) struct AtRiskNodes<'s> {
    position: FastMap<&'s InstanceId, usize>,
    /// By position: the node, when the instance is at risk.
    nodes: Vec<Option<&'s Node>>,
}

impl<'s> AtRiskNodes<'s> {
    /// The node `risk`'s instance runs on under the name its signals gave.
    pub(crate) fn of(&self, risk: &AtRisk) -> Option<&'s Node> {
        self.running(&risk.instance)
    }

    /// The node `instance` runs on, when the instance is at risk.
    pub(crate) fn running(&self, instance: &InstanceId) -> Option<&'s Node> {
        self.position.get(instance).and_then(|&k| self.nodes[k])
    }
}

/// Folds the snapshot's signals into at-risk sets.
#[cfg(test)]
pub(crate) fn fold_signals(snapshot: &Snapshot, policy: &Policy, now: Timestamp) -> AtRiskSet {
    fold_signals_with_nodes(snapshot, policy, now).0
}

/// [`fold_signals`], with the node of every instance at risk.
pub(crate) fn fold_signals_with_nodes<'s>(
    snapshot: &'s Snapshot,
    policy: &Policy,
    now: Timestamp,
) -> (AtRiskSet, AtRiskNodes<'s>) {
    // A small map of positions into a vector: the map stays in cache while thousands of
    // instances are looked up three times each (signals, nodes, EC2's facts).
    let mut position: FastMap<&InstanceId, usize> =
        FastMap::with_capacity_and_hasher(snapshot.signals.len(), Default::default());
    let mut merged: Vec<Folding> = Vec::with_capacity(snapshot.signals.len());
    for s in &snapshot.signals {
        let k = *position.entry(&s.instance).or_insert_with(|| {
            merged.push(Folding::new(&s.instance, &s.node, s.observed_at));
            merged.len() - 1
        });
        merged[k].fold(s);
    }
    // A fallback node on its way back is at risk as if signalled, on the ledger's word.
    for (instance, r) in &snapshot.ledger.returning {
        let k = *position.entry(instance).or_insert_with(|| {
            merged.push(Folding::new(instance, &r.node, r.at));
            merged.len() - 1
        });
        merged[k].add_returning(r.at);
    }
    // EC2's facts by instance: most instances signalled, a walk of the facts; a few, lookups.
    if merged.len().saturating_mul(8) >= snapshot.instances.len() {
        for (instance, facts) in &snapshot.instances {
            if let Some(&k) = position.get(instance) {
                merged[k].facts = Some(facts);
            }
        }
    } else {
        for folding in &mut merged {
            folding.facts = snapshot.instances.get(&folding.risk.instance);
        }
    }

    // One pass over the nodes finds how many Nodes claim each signalled instance and which of
    // them carries the name EC2 gave it: lookups by instance id, not by node name.
    for node in snapshot.nodes.values() {
        if let Some(&k) = node.instance.as_ref().and_then(|i| position.get(i)) {
            let folding = &mut merged[k];
            folding.claims += 1;
            if node.name == folding.risk.node {
                folding.node = Some(node);
            }
            // Which claimant to believe matters only once a second one shows up (rarely).
            if folding.claims == 1 {
                folding.first_claimant = Some(node);
            } else {
                if folding.claims == 2 {
                    if let Some(first) = folding.first_claimant {
                        folding.claimants.add(first, &folding.risk.instance, folding.facts);
                    }
                }
                folding.claimants.add(node, &folding.risk.instance, folding.facts);
            }
        }
    }

    let boosted = snapshot.ledger.index();
    let known: FastMap<&GroupName, &Group> = snapshot.groups.iter().collect();
    let mut by_group: FastMap<&GroupName, BTreeMap<InstanceId, AtRisk>> = FastMap::default();
    let mut set = AtRiskSet::default();
    let mut nodes = Vec::with_capacity(merged.len());
    for mut folding in merged {
        let believed = folding.believed(snapshot);
        let Folding { mut risk, facts, notices, .. } = folding;
        risk.confirmed = confirmed_by_aws(snapshot, &risk);
        risk.deadline = notice_deadline(snapshot, (&risk.instance, risk.confirmed), facts, &notices);
        let admitted = believed.and_then(|(node, believed)| {
            let seen = Seen { node, facts, claimed_twice: !believed };
            admit(snapshot, (&known, policy), now, (&risk, seen), boosted.contains_key(&risk.instance))
        });
        let admitted =
            admitted.and_then(|(group, node)| Ok((returning_home(snapshot, policy, &risk)?.unwrap_or(group), node)));
        match admitted {
            Ok((group, node)) => {
                nodes.push(Some(node));
                by_group.entry(group).or_default().insert(risk.instance.clone(), risk);
            }
            Err(reason) => {
                nodes.push(None);
                set.dropped.push(Dropped { instance: risk.instance, reason });
            }
        }
    }
    set.by_group = by_group.into_iter().map(|(g, instances)| (g.clone(), instances)).collect();
    set.dropped.sort_unstable_by(|a, b| a.instance.cmp(&b.instance));
    (set, AtRiskNodes { position, nodes })
}

/// The group a fallback node on its way back is at risk in: its own, where it is replaced, while
/// this daemon serves it. `None` for any other instance.
fn returning_home<'s>(
    snapshot: &'s Snapshot,
    policy: &Policy,
    risk: &AtRisk,
) -> Result<Option<&'s GroupName>, DropReason> {
    let Some(r) = snapshot.ledger.returning.get(&risk.instance) else { return Ok(None) };
    let home = snapshot.groups.get(&r.home).ok_or(DropReason::NoGroup)?;
    if home.foreign {
        return Err(DropReason::NotThisCluster);
    }
    if policy.ignored_groups.contains(&home.name) {
        return Err(DropReason::IgnoredGroup);
    }
    if home.excluded {
        return Err(DropReason::NotSelected);
    }
    if home.eks_node_group.is_some() {
        return Err(DropReason::EksManaged);
    }
    Ok(Some(&home.name))
}

/// A signalled instance while its signals fold: the node that runs it under the name the first
/// signal gave, EC2's facts, how many Nodes claim it, and, once several do, how strongly each
/// claims it (see [`identity::Claimants`]).
struct Folding<'s> {
    risk: AtRisk,
    node: Option<&'s Node>,
    facts: Option<&'s InstanceFacts>,
    claims: u32,
    /// The first Node claiming it.
    first_claimant: Option<&'s Node>,
    /// The claimants, tallied once a second one shows up.
    claimants: identity::Claimants<'s>,
    /// Its signals of kinds that take the instance at a set time.
    notices: Vec<&'s Signal>,
    /// Whether a Node's own word (an Event about it, its taint or rotation mark) came through
    /// another Node than the first signal's.
    carriers_differ: bool,
}

impl<'s> Folding<'s> {
    /// `instance` on `node`, first seen at `first_seen`, before anything is folded in.
    fn new(instance: &InstanceId, node: &NodeName, first_seen: Timestamp) -> Self {
        Folding {
            risk: AtRisk {
                instance: instance.clone(),
                node: node.clone(),
                kinds: FlagSet::default(),
                first_seen,
                evidence: FlagSet::default(),
                deadline: None,
                confirmed: false,
            },
            node: None,
            facts: None,
            claims: 0,
            first_claimant: None,
            claimants: identity::Claimants::default(),
            notices: Vec::new(),
            carriers_differ: false,
        }
    }

    /// Folds `signal` in, noting whether it came through another Node than the first.
    fn fold(&mut self, signal: &'s Signal) {
        if signal.evidence != Evidence::Ledger && signal.node != self.risk.node {
            self.carriers_differ = true;
        }
        self.add(signal);
    }

    fn add(&mut self, signal: &'s Signal) {
        if signal.kind.has_deadline() {
            self.notices.push(signal);
        }
        self.risk.kinds.insert(signal.kind);
        self.risk.evidence.insert(signal.evidence);
        self.risk.first_seen = self.risk.first_seen.min(signal.observed_at);
    }

    /// A fallback node on its way back: at risk as if signalled, on the ledger's word.
    fn add_returning(&mut self, at: Timestamp) {
        self.risk.kinds.insert(SignalKind::BackToSpot);
        self.risk.evidence.insert(Evidence::Ledger);
        self.risk.first_seen = self.risk.first_seen.min(at);
    }

    /// The Node believed to run the instance (its sole claimant, or of several the one EC2
    /// named, or with custom names the one reporting EC2's address for it), with the instance's signals narrowed to those that Node carries and the
    /// ledger's. A Node may name any instance in its providerID, and an Event about it, its taint
    /// or its rotation mark speak for that Node alone: one that claims another's instance never
    /// puts the real node at risk. `(node, true)` when believed; `(the first signal's node,
    /// false)` when several claim it and none, or more than one, holds the strongest claim.
    fn believed(&mut self, snapshot: &'s Snapshot) -> Result<(Option<&'s Node>, bool), DropReason> {
        let believed = match self.claims {
            1 => self.first_claimant,
            n if n > 1 && self.claimants.believed().is_some() => self.claimants.believed(),
            _ => return Ok((self.node, self.claims <= 1)),
        };
        let Some(believed) = believed else { return Ok((None, true)) };
        if !self.carriers_differ && believed.name == self.risk.node {
            return Ok((Some(believed), true));
        }
        // Rarely: the signals came through other Nodes too. Only the believed one's count.
        self.risk.kinds = FlagSet::default();
        self.risk.evidence = FlagSet::default();
        self.risk.first_seen = Timestamp::from_millis(i64::MAX);
        self.notices.clear();
        let instance = &self.risk.instance;
        let counted: Vec<&'s Signal> = snapshot
            .signals
            .iter()
            .filter(|s| &s.instance == instance && (s.evidence == Evidence::Ledger || s.node == believed.name))
            .collect();
        for signal in counted {
            self.add(signal);
        }
        if let Some(r) = snapshot.ledger.returning.get(&self.risk.instance) {
            self.add_returning(r.at);
        }
        if self.risk.kinds.is_empty() {
            return Err(match self.claims {
                1 => DropReason::NodeGone,
                _ => DropReason::Untrusted(Distrust::IdentityMismatch),
            });
        }
        self.risk.node = believed.name.clone();
        Ok((Some(believed), true))
    }
}

/// What the snapshot holds about a signalled instance.
#[derive(Clone, Copy)]
struct Seen<'s> {
    node: Option<&'s Node>,
    facts: Option<&'s InstanceFacts>,
    claimed_twice: bool,
}

fn admit<'s>(
    snapshot: &Snapshot,
    (known, policy): (&FastMap<&GroupName, &Group>, &Policy),
    now: Timestamp,
    (risk, seen): (&AtRisk, Seen<'s>),
    boosted: bool,
) -> Result<(&'s GroupName, &'s Node), DropReason> {
    let node = seen.node.ok_or(DropReason::NodeGone)?;
    if node.opted_out {
        return Err(DropReason::NodeOptedOut);
    }
    // The ledger vouches for a notice, never for a Node: a boosted instance's Node is verified
    // against EC2 at every pass, so a Node registered later under its providerID takes nothing.
    identity::verify_against(node, seen.facts, seen.claimed_twice).map_err(DropReason::Untrusted)?;
    if !boosted {
        trusted(snapshot, (risk, seen.facts), node).map_err(DropReason::Untrusted)?;
    }
    let group = node.group.as_ref().ok_or(DropReason::NoGroup)?;
    let described = known.get(group).ok_or(DropReason::NoGroup)?;
    if described.foreign {
        return Err(DropReason::NotThisCluster);
    }
    if policy.ignored_groups.contains(group) {
        return Err(DropReason::IgnoredGroup);
    }
    if described.excluded {
        return Err(DropReason::NotSelected);
    }
    if described.eks_node_group.is_some() {
        return Err(DropReason::EksManaged);
    }
    if node.deleting_by_ca {
        return Err(DropReason::DeletingByCa);
    }
    if !risk.kinds.iter().any(|k| k.calls_for_replacement()) {
        return Err(DropReason::NoReplacementCalledFor);
    }
    if !boosted && lapsed_recommendation(&snapshot.ledger, risk) {
        return Err(DropReason::StandbyLapsed);
    }
    // An old recommendation never ages out a notice whose deadline is still ahead.
    if !boosted && now.since(risk.first_seen) > policy.signal_max_age && risk.deadline.is_none_or(|d| d <= now) {
        return Err(DropReason::Expired);
    }
    Ok((group, node))
}

/// How long before an instance's first notice its node's cordon may have been seen and still
/// count as NTH's answer to it (NTH cordons right after it writes its Event; the Event's own
/// time may run up to a minute behind the watch).
pub const CORDON_LEAD: Duration = Duration::from_secs(60);

/// An at-risk instance only Events speak for counts once its node is cordoned in answer to the
/// notice (NTH's first act: a cordon the watch saw more than [`CORDON_LEAD`] before the first
/// notice is someone else's, an operator's, and vouches for nothing unless EC2 confirms the
/// notice) and AWS agrees the notice could be real: spot-only kinds about a spot instance,
/// scheduled maintenance about an instance EC2 lists a scheduled event for. Taints, rotations
/// and the ledger vouch by themselves: only those allowed to patch Nodes or write the ledger
/// could have made them. Either way the Node has been verified as the instance first (see
/// [`identity`]).
fn trusted(snapshot: &Snapshot, (risk, facts): (&AtRisk, Option<&InstanceFacts>), node: &Node) -> Result<(), Distrust> {
    if risk.evidence.iter().any(|e| e != Evidence::Event) {
        return Ok(());
    }
    if !node.cordoned {
        return Err(Distrust::NotCordoned);
    }
    if node.cordoned_since.is_some_and(|since| since.plus(CORDON_LEAD) < risk.first_seen) && !risk.confirmed {
        return Err(Distrust::CordonedBeforeNotice);
    }
    if risk.kinds.iter().any(|k| k.spot_only()) {
        match facts.map(|f| f.lifecycle) {
            Some(InstanceLifecycle::Spot) => {}
            Some(InstanceLifecycle::OnDemand) => return Err(Distrust::NotSpot),
            None => return Err(Distrust::InstanceNotDescribed),
        }
    }
    if risk.kinds.contains(&SignalKind::Scheduled) && !snapshot.scheduled_events.contains_key(&risk.instance) {
        return Err(Distrust::NoScheduledEvent);
    }
    Ok(())
}

/// Whether AWS confirms every kind with a deadline reported for `risk` (and there is one): EC2
/// lists a pending scheduled event, or reports the spot instance interrupted. A notice only an
/// Event or a taint speaks for is a warning: it boosts, but neither overrides opt-outs nor drains
/// outside the voluntary-drain limits.
fn confirmed_by_aws(snapshot: &Snapshot, risk: &AtRisk) -> bool {
    let mut deadline_kinds = risk.kinds.iter().filter(|k| k.has_deadline()).peekable();
    deadline_kinds.peek().is_some()
        && deadline_kinds.all(|k| match k {
            SignalKind::Scheduled => snapshot.scheduled_events.contains_key(&risk.instance),
            SignalKind::SpotInterruption => snapshot.spot_interrupted.contains(&risk.instance),
            _ => false,
        })
}

/// When the instance goes: the deadline of the first notice seen whose kind passed its own
/// check (one a taint, rotation mark or the ledger vouches for before any Event), so a later
/// notice never brings it forward. A scheduled event's is EC2's `NotBefore`
/// (none while EC2 lists no event); a spot interruption's counts when a taint or the ledger
/// vouches for it or EC2 says the instance is spot; an Event's word on any other kind sets none.
/// An Event's own time shortens a notice's two minutes only once AWS confirms the interruption:
/// until then its deadline is two minutes after the booster saw it, so a notice dated in the
/// past never drains a node ahead of its replacements.
fn notice_deadline(
    snapshot: &Snapshot,
    (instance, confirmed): (&InstanceId, bool),
    facts: Option<&InstanceFacts>,
    notices: &[&Signal],
) -> Option<Timestamp> {
    let spot = facts.is_some_and(|f| f.lifecycle == InstanceLifecycle::Spot);
    notices
        .iter()
        .filter_map(|n| {
            let deadline = match n.kind {
                SignalKind::Scheduled => snapshot.scheduled_events.get(instance).copied(),
                SignalKind::SpotInterruption if n.evidence != Evidence::Event => n.deadline(),
                SignalKind::SpotInterruption if confirmed => n.deadline(),
                SignalKind::SpotInterruption if spot => {
                    n.deadline().map(|d| d.max(n.observed_at.plus(INTERRUPTION_NOTICE)))
                }
                _ if n.evidence != Evidence::Event => n.deadline(),
                _ => None,
            };
            // What a Node's patchers wrote (a taint, a rotation mark) or the ledger holds
            // outranks any Event: an Event's time is the author's word, and the watch dates an
            // Event up to a minute before it saw it, so a later forged one would otherwise pass
            // for the first notice.
            deadline.map(|d| (n.evidence == Evidence::Event, n.observed_at, d))
        })
        .min()
        .map(|(_, _, d)| d)
}

/// The instances a spot-interruption notice names, on nodes still running them: whether EC2
/// reports them interrupted decides whether the notice is confirmed.
pub(crate) fn spot_interruptions_needed(snapshot: &Snapshot) -> BTreeSet<InstanceId> {
    snapshot
        .signals
        .iter()
        .filter(|s| s.kind == SignalKind::SpotInterruption)
        .filter(|s| snapshot.nodes.get(&s.node).is_some_and(|n| n.instance.as_ref() == Some(&s.instance)))
        .map(|s| s.instance.clone())
        .collect()
}

/// The instances a scheduled-maintenance notice names, on nodes still running them, not
/// boosted already: whether EC2 lists a scheduled event for them decides trust (for Events) and
/// whether the notice may override opt-outs (for every source).
pub(crate) fn scheduled_events_needed(snapshot: &Snapshot) -> BTreeSet<InstanceId> {
    snapshot
        .signals
        .iter()
        .filter(|s| s.kind == SignalKind::Scheduled)
        .filter(|s| snapshot.nodes.get(&s.node).is_some_and(|n| n.instance.as_ref() == Some(&s.instance)))
        .map(|s| s.instance.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::core::model::{BoostRecord, Group, Node};

    fn snapshot() -> Snapshot {
        Snapshot::default()
            .with_group(Group::test("spot-a"))
            .with_node(Node::test("n1", "spot-a"))
            .with_node(Node::test("n2", "spot-a"))
    }

    #[test]
    fn repeats_and_modes_fold_into_one_instance_with_the_earliest_time() {
        let mut late_itn = Signal::rebalance("n1", 5_000);
        late_itn.kind = SignalKind::SpotInterruption;
        let s = snapshot()
            .with_signal(Signal::rebalance("n1", 3_000))
            .with_signal(Signal::rebalance("n1", 1_000))
            .with_signal(late_itn);
        let set = fold_signals(&s, &Policy::default(), Timestamp::from_millis(10_000));
        assert_eq!(set.len(), 1);
        let risk = &set.by_group[&GroupName::from("spot-a")][&InstanceId::from("i-n1")];
        assert_eq!(risk.first_seen, Timestamp::from_millis(1_000));
        assert_eq!(risk.kinds, FlagSet::from_iter([SignalKind::Rebalance, SignalKind::SpotInterruption]));
    }

    #[test]
    fn gone_nodes_and_reused_names_are_cleared() {
        let mut reused = Signal::rebalance("n2", 0);
        reused.instance = InstanceId::from("i-old");
        let s = snapshot().with_signal(Signal::rebalance("gone", 0)).with_signal(reused);
        let set = fold_signals(&s, &Policy::default(), Timestamp::from_millis(1));
        assert!(set.is_empty());
        assert!(set.dropped.iter().all(|d| d.reason == DropReason::NodeGone), "{:?}", set.dropped);
    }

    #[test]
    fn a_node_an_operator_opted_out_is_never_at_risk_even_once_boosted() {
        let mut s = snapshot().with_signal(Signal::rebalance("n1", 0)).with_signal(Signal::rebalance("n2", 0));
        s.ledger.record(BoostRecord::test("spot-a", &["i-n2"], 1, 0));
        for name in ["n1", "n2"] {
            s.nodes.get_mut(&NodeName::from(name)).unwrap().opted_out = true;
        }
        let set = fold_signals(&s, &Policy::default(), Timestamp::from_millis(1));
        assert!(set.is_empty(), "{set:?}");
        assert_eq!(set.dropped.len(), 2);
        assert!(set
            .dropped
            .iter()
            .all(|d| d.reason == DropReason::NodeOptedOut && d.reason.as_str() == "node-opted-out"));
    }

    #[test]
    fn stale_signals_expire_unless_already_boosted() {
        let policy = Policy { signal_max_age: Duration::from_secs(60), ..Policy::default() };
        let mut s = snapshot().with_signal(Signal::rebalance("n1", 0)).with_signal(Signal::rebalance("n2", 0));
        s.ledger.record(BoostRecord::test("spot-a", &["i-n2"], 1, 0));
        let set = fold_signals(&s, &policy, Timestamp::from_millis(61_000));
        assert_eq!(set.dropped, vec![Dropped { instance: "i-n1".into(), reason: DropReason::Expired }]);
        assert!(set.by_group[&GroupName::from("spot-a")].contains_key(&InstanceId::from("i-n2")));
    }

    fn event(node: &str, kind: SignalKind) -> Signal {
        Signal { kind, evidence: Evidence::Event, ..Signal::rebalance(node, 0) }
    }

    fn why(s: &Snapshot) -> Option<DropReason> {
        fold_signals(s, &Policy::default(), Timestamp::EPOCH).dropped.first().map(|d| d.reason.clone())
    }

    #[test]
    fn an_event_alone_counts_once_the_node_is_cordoned_and_aws_says_spot() {
        let mut s = snapshot().with_signal(event("n1", SignalKind::SpotInterruption));
        assert_eq!(why(&s), Some(DropReason::Untrusted(Distrust::NotCordoned)));

        s.nodes.get_mut(&NodeName::from("n1")).unwrap().cordoned = true;
        s.instances.get_mut(&InstanceId::from("i-n1")).unwrap().lifecycle = InstanceLifecycle::OnDemand;
        assert_eq!(why(&s), Some(DropReason::Untrusted(Distrust::NotSpot)));
        s.instances.get_mut(&InstanceId::from("i-n1")).unwrap().lifecycle = InstanceLifecycle::Spot;
        assert_eq!(why(&s), None);
        let confirmed = |s: &Snapshot| {
            fold_signals(s, &Policy::default(), Timestamp::EPOCH).by_group[&GroupName::from("spot-a")]
                [&InstanceId::from("i-n1")]
                .confirmed
        };
        assert!(!confirmed(&s), "spot, so it may be real: a warning until EC2 reports the interruption");
        s.spot_interrupted.insert("i-n1".into());
        assert!(confirmed(&s), "EC2 marked the spot request for termination");
    }

    /// A cordon an operator set before the notice is not NTH's answer to it: an Event-only
    /// rebalance recommendation on such a node (no opt-out pod anywhere) moves nothing, one on a
    /// node cordoned right after it counts, and EC2's confirmation counts whoever cordoned.
    #[test]
    fn an_event_on_a_node_an_operator_cordoned_beforehand_moves_nothing_until_ec2_confirms() {
        let at = |secs: i64| Timestamp::from_millis(secs * 1_000);
        let mut s = snapshot().with_signal(Signal { observed_at: at(3_600), ..event("n1", SignalKind::Rebalance) });
        let n1 = s.nodes.get_mut(&NodeName::from("n1")).unwrap();
        n1.cordoned = true;
        n1.cordoned_since = Some(at(0));
        let now = at(3_601);
        let why_at = |s: &Snapshot| fold_signals(s, &Policy::default(), now).dropped.first().map(|d| d.reason.clone());
        assert_eq!(why_at(&s), Some(DropReason::Untrusted(Distrust::CordonedBeforeNotice)));
        // NTH's own cordon lands just after (or a few seconds before) its Event: it counts.
        s.nodes.get_mut(&NodeName::from("n1")).unwrap().cordoned_since = Some(at(3_600 - 30));
        assert_eq!(why_at(&s), None);
        // A spot interruption EC2 confirms counts on the operator's cordon too.
        s.nodes.get_mut(&NodeName::from("n1")).unwrap().cordoned_since = Some(at(0));
        s.signals = vec![Signal { observed_at: at(3_600), ..event("n1", SignalKind::SpotInterruption) }];
        assert_eq!(why_at(&s), Some(DropReason::Untrusted(Distrust::CordonedBeforeNotice)));
        s.spot_interrupted.insert("i-n1".into());
        assert_eq!(why_at(&s), None);
    }

    /// Found on a real API server: NTH's taint (deadline at 130 s), EC2 confirming, then a forged
    /// Event in NTH's name dated long before, which the watch dates up to a minute before it saw
    /// it. The taint's deadline stands.
    #[test]
    fn an_event_dated_before_a_taint_never_takes_its_deadline_even_once_ec2_confirms() {
        let deadline = |s: &Snapshot| {
            fold_signals(s, &Policy::default(), Timestamp::from_millis(11_000)).by_group[&GroupName::from("spot-a")]
                [&InstanceId::from("i-n1")]
                .deadline
        };
        let mut s = snapshot().with_signal(Signal::interruption("n1", 10_000));
        s.spot_interrupted.insert("i-n1".into());
        let forged = Signal {
            observed_at: Timestamp::from_millis(1_000),
            notice_deadline: Some(Timestamp::from_millis(1_000)),
            ..event("n1", SignalKind::SpotInterruption)
        };
        s.signals.push(forged);
        s.nodes.get_mut(&NodeName::from("n1")).unwrap().cordoned = true;
        assert_eq!(deadline(&s), Some(Timestamp::from_millis(130_000)));
    }

    #[test]
    fn the_first_notice_that_passed_its_check_sets_the_deadline() {
        let deadline = |s: &Snapshot| {
            fold_signals(s, &Policy::default(), Timestamp::EPOCH).by_group[&GroupName::from("spot-a")]
                [&InstanceId::from("i-n1")]
                .deadline
        };
        // NTH's taint at 10 s: the instance goes at 130 s.
        let mut s = snapshot().with_signal(Signal::interruption("n1", 10_000));
        assert_eq!(deadline(&s), Some(Timestamp::from_millis(130_000)));
        // A later Event saying it goes at 20 s brings nothing forward.
        let forged = Signal {
            observed_at: Timestamp::from_millis(15_000),
            notice_deadline: Some(Timestamp::from_millis(20_000)),
            ..event("n1", SignalKind::SpotInterruption)
        };
        s.signals.push(forged.clone());
        assert_eq!(deadline(&s), Some(Timestamp::from_millis(130_000)));
        // Alone, on an instance EC2 says is on-demand, the Event's kind fails its check: no deadline.
        let mut s = snapshot().with_signal(Signal {
            kind: SignalKind::Rotation,
            evidence: Evidence::Rotation,
            ..Signal::rebalance("n1", 0)
        });
        s.signals.push(forged);
        s.instances.get_mut(&InstanceId::from("i-n1")).unwrap().lifecycle = InstanceLifecycle::OnDemand;
        assert_eq!(deadline(&s), None);
        // An Auto Scaling lifecycle Event merged into a genuine rotation adds none either.
        let lifecycle =
            Signal { notice_deadline: Some(Timestamp::from_millis(1_000)), ..event("n1", SignalKind::AsgLifecycle) };
        s.signals.push(lifecycle);
        assert_eq!(deadline(&s), None);
        // A scheduled event goes at EC2's NotBefore, not at the notice's word.
        let scheduled = Signal {
            kind: SignalKind::Scheduled,
            notice_deadline: Some(Timestamp::from_millis(5_000)),
            ..Signal::rebalance("n1", 0)
        };
        let mut s = snapshot().with_signal(scheduled);
        assert_eq!(deadline(&s), None, "EC2 lists no event for it");
        s.scheduled_events.insert("i-n1".into(), Timestamp::from_millis(7_200_000));
        assert_eq!(deadline(&s), Some(Timestamp::from_millis(7_200_000)));
        assert_eq!(spot_interruptions_needed(&s), BTreeSet::new());
        s.signals.push(Signal::interruption("n1", 0));
        assert_eq!(spot_interruptions_needed(&s), BTreeSet::from([InstanceId::from("i-n1")]));
    }

    #[test]
    fn no_source_vouches_for_a_node_ec2_does_not_agree_is_its_instance() {
        // A taint or rotation mark vouches for the notice, never for the Node's claim.
        let mut s = snapshot().with_signal(Signal::interruption("n1", 0));
        s.instances.remove(&InstanceId::from("i-n1"));
        assert_eq!(why(&s), Some(DropReason::Untrusted(Distrust::InstanceNotDescribed)));
        s.describe(&Node::test("ip-10-0-9-9.ec2.internal", "spot-a").with_instance("i-n1"));
        assert_eq!(why(&s), Some(DropReason::Untrusted(Distrust::IdentityMismatch)));
        s.describe(&Node::test("n1", "spot-a"));
        assert_eq!(why(&s), None);
        // Once boosted, the ledger vouches for the notice, never for the Node: verified each pass.
        s.ledger.record(BoostRecord::test("spot-a", &["i-n1"], 1, 0));
        assert_eq!(why(&s), None);
        s.describe(&Node::test("ip-10-0-9-9.ec2.internal", "spot-a").with_instance("i-n1"));
        assert_eq!(why(&s), Some(DropReason::Untrusted(Distrust::IdentityMismatch)));
    }

    #[test]
    fn a_second_node_claiming_an_instance_never_silences_the_node_ec2_named() {
        // n9 names n1's instance in its providerID (kubelet's --provider-id is user data). The
        // genuine notice on n1 still counts, and only n1's: n9's own word is about n9.
        let mut s = snapshot().with_signal(Signal::interruption("n1", 0));
        s.nodes.insert("n9".into(), Node::test("n9", "spot-a").with_instance("i-n1"));
        let set = fold_signals(&s, &Policy::default(), Timestamp::EPOCH);
        assert_eq!(set.by_group[&GroupName::from("spot-a")][&InstanceId::from("i-n1")].node, NodeName::from("n1"));
        s.signals.push(Signal {
            instance: "i-n1".into(),
            kind: SignalKind::Rotation,
            evidence: Evidence::Rotation,
            ..Signal::rebalance("n9", 0)
        });
        let set = fold_signals(&s, &Policy::default(), Timestamp::EPOCH);
        let risk = &set.by_group[&GroupName::from("spot-a")][&InstanceId::from("i-n1")];
        assert_eq!(risk.kinds, FlagSet::from_iter([SignalKind::SpotInterruption]), "n9's rotation mark is not n1's");
        assert_eq!(risk.evidence, FlagSet::from_iter([Evidence::NodeTaint]));
        s.signals.remove(0);
        assert_eq!(why(&s), Some(DropReason::Untrusted(Distrust::IdentityMismatch)), "through n9 alone: nothing");
        // The ledger's word is about the boost, not about a Node: it stays with the Node EC2 named.
        s.ledger.record(BoostRecord::test("spot-a", &["i-n1"], 1, 0));
        s.signals.push(Signal { instance: "i-n1".into(), evidence: Evidence::Ledger, ..Signal::rebalance("n9", 0) });
        let set = fold_signals(&s, &Policy::default(), Timestamp::EPOCH);
        let risk = &set.by_group[&GroupName::from("spot-a")][&InstanceId::from("i-n1")];
        assert_eq!((risk.node.as_str(), risk.kinds), ("n1", FlagSet::from_iter([SignalKind::Rebalance])));
        s.ledger = Default::default();
        s.signals = vec![Signal { instance: "i-n1".into(), ..Signal::interruption("n9", 0) }];

        // Both carry EC2's name for it, or neither does: refused, and counted as such.
        s.nodes.insert("i-n1".into(), Node::test("i-n1", "spot-a").with_instance("i-n1"));
        assert_eq!(why(&s), Some(DropReason::Untrusted(Distrust::ClaimedTwice)));
        s.nodes.remove(&NodeName::from("n1"));
        s.instances.get_mut(&InstanceId::from("i-n1")).unwrap().private_dns_name =
            Some("ip-10-0-1-1.ec2.internal".into());
        s.nodes.remove(&NodeName::from("i-n1"));
        s.nodes.insert("n8".into(), Node::test("n8", "spot-a").with_instance("i-n1"));
        s.signals = vec![Signal { instance: "i-n1".into(), ..Signal::interruption("n9", 0) }];
        assert_eq!(why(&s), Some(DropReason::Untrusted(Distrust::ClaimedTwice)));
    }

    /// Custom node names: a Node naming the instance of `workers-1` (and reporting another
    /// address) does not silence it; `workers-1` reports the address EC2 gives the instance.
    #[test]
    fn with_custom_names_the_claimant_ec2_s_address_names_keeps_its_notices() {
        let mut s = snapshot();
        let facts = s.instances.get_mut(&InstanceId::from("i-n1")).unwrap();
        facts.private_dns_name = Some("ip-10-0-1-1.ec2.internal".into());
        facts.private_ip = Some("10.0.1.1".into());
        s.nodes.remove(&NodeName::from("n1"));
        let mut real = Node::test("workers-1", "spot-a").with_instance("i-n1");
        real.internal_ips = vec!["10.0.1.1".into()];
        let mut impostor = Node::test("workers-9", "spot-a").with_instance("i-n1");
        impostor.internal_ips = vec!["10.0.9.9".into()];
        s.nodes.insert(real.name.clone(), real);
        s.nodes.insert(impostor.name.clone(), impostor);
        s.signals = vec![Signal { instance: "i-n1".into(), ..Signal::interruption("workers-1", 0) }];
        assert_eq!(why(&s), None, "the real node's notice counts");
        let set = fold_signals(&s, &Policy::default(), Timestamp::EPOCH);
        assert_eq!(
            set.by_group[&GroupName::from("spot-a")][&InstanceId::from("i-n1")].node,
            NodeName::from("workers-1")
        );
        s.signals = vec![Signal { instance: "i-n1".into(), ..Signal::interruption("workers-9", 0) }];
        assert_eq!(why(&s), Some(DropReason::Untrusted(Distrust::IdentityMismatch)), "the impostor's moves nothing");
        // Both report the address: neither is believed.
        s.nodes.get_mut(&NodeName::from("workers-9")).unwrap().internal_ips = vec!["10.0.1.1".into()];
        s.signals = vec![Signal { instance: "i-n1".into(), ..Signal::interruption("workers-1", 0) }];
        assert_eq!(why(&s), Some(DropReason::Untrusted(Distrust::ClaimedTwice)));
    }

    #[test]
    fn scheduled_maintenance_counts_once_ec2_lists_the_event_and_only_then_is_confirmed() {
        let mut s = snapshot().with_signal(event("n1", SignalKind::Scheduled));
        s.nodes.get_mut(&NodeName::from("n1")).unwrap().cordoned = true;
        assert_eq!(why(&s), Some(DropReason::Untrusted(Distrust::NoScheduledEvent)), "on-demand or spot alike");
        assert_eq!(scheduled_events_needed(&s), BTreeSet::from([InstanceId::from("i-n1")]));
        s.scheduled_events.insert("i-n1".into(), Timestamp::from_millis(3_600_000));
        let set = fold_signals(&s, &Policy::default(), Timestamp::EPOCH);
        assert!(set.by_group[&GroupName::from("spot-a")][&InstanceId::from("i-n1")].confirmed);

        // NTH's taint vouches for the notice, but AWS has not confirmed it: no opt-out override.
        let tainted = Signal { kind: SignalKind::Scheduled, ..Signal::rebalance("n2", 0) };
        let s = snapshot().with_signal(tainted);
        let set = fold_signals(&s, &Policy::default(), Timestamp::EPOCH);
        assert!(!set.by_group[&GroupName::from("spot-a")][&InstanceId::from("i-n2")].confirmed);
    }

    #[test]
    fn ignored_groups_lifecycle_kinds_and_ca_deletions_are_dropped() {
        let mut lifecycle = Signal::rebalance("n2", 0);
        lifecycle.kind = SignalKind::AsgLifecycle;
        let mut s = snapshot().with_signal(lifecycle);
        let set = fold_signals(&s, &Policy::default(), Timestamp::EPOCH);
        assert_eq!(set.dropped[0].reason, DropReason::NoReplacementCalledFor);

        s.nodes.get_mut(&NodeName::from("n1")).unwrap().deleting_by_ca = true;
        s.signals = vec![Signal::rebalance("n1", 0)];
        assert_eq!(fold_signals(&s, &Policy::default(), Timestamp::EPOCH).dropped[0].reason, DropReason::DeletingByCa);

        let policy = Policy { ignored_groups: BTreeSet::from(["spot-a".into()]), ..Policy::default() };
        assert_eq!(fold_signals(&s, &policy, Timestamp::EPOCH).dropped[0].reason, DropReason::IgnoredGroup);
    }

    #[test]
    fn a_trusted_notice_in_a_group_the_tag_filter_leaves_out_puts_nothing_at_risk() {
        // NTH's taint vouches by itself: before, such a notice was held from boosting but drained.
        let tainted = Signal { kind: SignalKind::SpotInterruption, ..Signal::rebalance("n1", 0) };
        let mut s = snapshot().with_signal(tainted);
        s.groups.get_mut(&GroupName::from("spot-a")).unwrap().excluded = true;
        let set = fold_signals(&s, &Policy::default(), Timestamp::EPOCH);
        assert!(set.by_group.is_empty(), "nothing of an unselected group is at risk: {:?}", set.by_group);
        assert_eq!(set.dropped[0].reason, DropReason::NotSelected);
        assert_eq!(set.dropped[0].reason.as_str(), "not-selected");
    }

    #[test]
    fn a_notice_in_an_eks_managed_node_group_is_left_to_eks_whatever_its_kind() {
        // EKS replaces and drains a managed node group's spot nodes itself, and owns its size.
        for kind in [SignalKind::Rebalance, SignalKind::SpotInterruption] {
            let mut s = snapshot().with_signal(Signal { kind, ..Signal::rebalance("n1", 0) });
            s.groups.get_mut(&GroupName::from("spot-a")).unwrap().eks_node_group = Some("batch".into());
            let set = fold_signals(&s, &Policy::default(), Timestamp::EPOCH);
            assert!(set.by_group.is_empty(), "{kind:?}: {:?}", set.by_group);
            assert_eq!(
                (set.dropped[0].reason.clone(), set.dropped[0].reason.as_str()),
                (DropReason::EksManaged, "eks-managed")
            );
        }
    }

    #[test]
    fn a_node_matched_by_address_to_another_clusters_instance_takes_nothing() {
        // A custom hostname: the Node is matched by its address, which the kubelet reports. The
        // instance it names is real, and spot, but Auto Scaling puts it in another cluster's group.
        let tainted = Signal { kind: SignalKind::SpotInterruption, ..Signal::rebalance("worker-7", 0) };
        let mut s = snapshot().with_group(Group::test("theirs")).with_node(Node::test("worker-7", "theirs"));
        s.signals.push(tainted);
        s.groups.get_mut(&GroupName::from("theirs")).unwrap().foreign = true;
        let node = s.nodes.get_mut(&NodeName::from("worker-7")).unwrap();
        node.internal_ips = vec!["10.9.9.9".into()];
        s.instances.get_mut(&InstanceId::from("i-worker-7")).unwrap().private_ip = Some("10.9.9.9".into());
        s.instances.get_mut(&InstanceId::from("i-worker-7")).unwrap().private_dns_name =
            Some("ip-10-9-9-9.ec2.internal".into());
        let set = fold_signals(&s, &Policy::default(), Timestamp::EPOCH);
        assert!(set.by_group.is_empty(), "{:?}", set.by_group);
        assert_eq!(set.dropped[0].reason, DropReason::NotThisCluster);
        // The same Node in a group of this cluster is believed: the address alone is not the fault.
        s.groups.get_mut(&GroupName::from("theirs")).unwrap().foreign = false;
        assert_eq!(fold_signals(&s, &Policy::default(), Timestamp::EPOCH).len(), 1);
    }
}
