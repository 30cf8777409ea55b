//! Giving back what AWS took first. A boosted at-risk instance normally leaves its group through
//! the booster's own termination, with decrement, which returns the node the boost added. When AWS
//! reclaims it first (a spot interruption under queue mode, a short notice), the Auto Scaling Group
//! replaces it and the group would stay one node larger until Cluster Autoscaler scales it down.
//!
//! Such an instance is one that no longer appears among its group's members (as Auto Scaling
//! lists them), whose node is gone or not Ready, and that the booster never settled. Lowering
//! desired capacity would let Auto Scaling pick a running node and kill its pods, so capacity
//! leaves only through the drainer: for each such instance, while its boost still has a node to
//! return, one node of the group is chosen (Ready, schedulable, not at risk nor serving a boost,
//! no pod that opted out of disruption or that nothing recreates; fewest pods, newest first),
//! by its pods as the watch holds them (a view leaves most nodes' pods out: [`pods_needed`] names
//! the nodes whose pods are attached for this; a node whose pods are unknown is never chosen),
//! recorded in the ledger, then cordoned, drained and terminated with decrement by the drainer.
//! Never below the size the group had before its oldest open boost, nor below MinSize, and not
//! while Cluster Autoscaler's own scale-up is in flight (its target leads the live value).
//!
//! While instances of the group are still joining, no Ready node is chosen: the room they bring is
//! what the give-back removes, so draining before they are Ready would evict pods into a cluster
//! without room. The newest joining instance is given back instead, terminated with decrement
//! before it serves: one EC2 says launched last (the group's own replacement for the instance
//! taken, typically, not the boost's replacement launched at the notice), that Auto Scaling lists
//! as a member, no Ready Node claims and no pod runs on. The drainer checks all of that again at
//! the moment it terminates it. A storm whose replacements boot longer than the notice so gives
//! back as AWS takes the instances, not a boot time later.
//!
//! When every node that could be given back carries a pod that opted out or that nothing
//! recreates, or no node qualifies before `--replacement-timeout`, the capacity is left to Cluster
//! Autoscaler.

use std::cell::OnceCell;
use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::drain_batches::claim_replacements;
use super::fast_hash::FastSet;
use super::identity;
use super::ledger_edit::LedgerEdit;
use super::model::{GiveBackNode, Group, GroupName, InstanceId, Node, NodeName, Snapshot, Timestamp};
use super::policy::Policy;
use super::signals::AtRiskSet;

/// What becomes of the capacity a boost added for an instance AWS took first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "how")]
pub enum GiveBackHow {
    /// This node is drained and terminated with decrement.
    Drain(GiveBackNode),
    /// Nothing to give back: the boost returned all it added, or the group is at the size it had
    /// before (or at MinSize). The instance is only settled.
    AtFloor,
    /// No node of the group can be drained for it: Cluster Autoscaler scales the group down when
    /// it finds the room unneeded.
    LeftToClusterAutoscaler {
        /// Why no node was drained.
        why: LeftWhy,
    },
}

/// Why a give-back is left to Cluster Autoscaler.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "why")]
pub enum LeftWhy {
    /// No node of the group qualified before `--replacement-timeout`.
    NoNodeInTime,
    /// Every node that could be given back carries a pod that opted out of disruption or that
    /// nothing recreates; `node` is one, with some of those `pods`.
    PodsProtected {
        /// One such node.
        node: NodeName,
        /// Some of its pods that keep it, as `namespace/name`.
        pods: Vec<String>,
    },
}

/// One instance AWS took first, and how its boost's node is given back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GiveBack {
    /// The group.
    pub group: GroupName,
    /// The instance AWS took.
    pub reclaimed: InstanceId,
    /// How.
    pub how: GiveBackHow,
}

/// An instance AWS took first, still to be given back.
struct Taken<'s> {
    instance: &'s InstanceId,
    /// Its boost still has a node to return.
    returns: bool,
    /// When its boost was decided.
    boosted_at: Timestamp,
}

/// What the give-backs start from: per group, the instances that left it without the booster,
/// and the floor (the size before its oldest open boost) and the nodes already being given back.
struct TakenFirst<'s> {
    per_group: BTreeMap<&'s GroupName, Vec<Taken<'s>>>,
    floors: BTreeMap<&'s GroupName, u32>,
    in_flight: BTreeMap<&'s GroupName, u32>,
    /// Instances with a Ready node (running, whatever the lists say).
    running: OnceCell<FastSet<&'s InstanceId>>,
}

impl<'s> TakenFirst<'s> {
    fn of(snapshot: &'s Snapshot) -> Self {
        let running = OnceCell::new();
        let mut per_group: BTreeMap<&GroupName, Vec<Taken<'_>>> = BTreeMap::new();
        let mut floors: BTreeMap<&GroupName, u32> = BTreeMap::new();
        let mut in_flight: BTreeMap<&GroupName, u32> = BTreeMap::new();
        for record in &snapshot.ledger.records {
            let Some(members) = snapshot.groups.get(&record.group).and_then(|g| g.members.as_ref()) else { continue };
            let floor = floors.entry(&record.group).or_insert(u32::MAX);
            *floor = (*floor).min(record.before);
            let giving = u32::try_from(record.giving_back.len()).unwrap_or(u32::MAX);
            *in_flight.entry(&record.group).or_default() += giving;
            // A boost whose write is not known to have applied has nothing to give back yet.
            let added = if record.raising_to.is_some() { 0 } else { record.added };
            let mut left = added.saturating_sub(record.returned).saturating_sub(giving);
            // A boost ahead for pool-mates that all stayed quiet returns its nodes as if AWS had
            // taken them, though they still run.
            let returning = record.returns_unused();
            let taken = |i: &&InstanceId| {
                !record.settled.contains(*i)
                    && !record.giving_back.contains_key(*i)
                    && (returning || (!members.contains(*i) && !running_instances(&running, snapshot).contains(*i)))
            };
            for instance in record.instances.iter().filter(taken) {
                let returns = left > 0;
                left = left.saturating_sub(1);
                per_group.entry(&record.group).or_default().push(Taken { instance, returns, boosted_at: record.at });
            }
        }
        TakenFirst { per_group, floors, in_flight, running }
    }

    fn running(&self, snapshot: &'s Snapshot) -> &FastSet<&'s InstanceId> {
        running_instances(&self.running, snapshot)
    }
}

// An instance whose node is still Ready is running, whatever the list says: never taken. Looked
// up only for instances missing from their group's list, so built only then.
fn running_instances<'c, 's>(
    cell: &'c OnceCell<FastSet<&'s InstanceId>>,
    snapshot: &'s Snapshot,
) -> &'c FastSet<&'s InstanceId> {
    cell.get_or_init(|| snapshot.nodes.values().filter(|n| n.ready).filter_map(|n| n.instance.as_ref()).collect())
}

/// Whether `node` of `group` may be looked at to give capacity back (before its pods are).
fn may_give_back(node: &Node, group: &GroupName) -> bool {
    node.group.as_ref() == Some(group) && node.ready && !node.cordoned && !node.deleting_by_ca && !node.opted_out
}

/// The nodes whose pods the give-backs need and a view may have left out (see
/// [`Node::pods_known`]): the nodes of every group with an instance still to give back, and the
/// nodes already chosen for one. A node is chosen, and drained, only by its pods.
pub fn pods_needed(snapshot: &Snapshot) -> BTreeSet<NodeName> {
    let mut needed: BTreeSet<NodeName> = snapshot
        .ledger
        .records
        .iter()
        .flat_map(|r| r.giving_back.values().filter_map(|g| g.node.clone()))
        .filter(|n| snapshot.nodes.get(n).is_some_and(|n| !n.pods_known))
        .collect();
    let taken = TakenFirst::of(snapshot);
    for (group, _) in taken.per_group.iter().filter(|(_, t)| t.iter().any(|t| t.returns)) {
        let members = snapshot.groups.get(*group).and_then(|g| g.members.as_ref());
        // A joining instance's Node, not Ready yet, is chosen only if it is known to run no pod.
        let joining =
            |n: &Node| !n.ready && n.instance.as_ref().is_some_and(|i| members.is_some_and(|m| m.contains(i)));
        needed.extend(
            snapshot
                .nodes
                .values()
                .filter(|n| !n.pods_known && (may_give_back(n, group) || joining(n)))
                .map(|n| n.name.clone()),
        );
    }
    needed
}

/// The instances whose EC2 facts the give-backs need beyond the nodes': the members of every group
/// with an instance still to give back that no Ready node runs (those still joining), to choose
/// the newest by its launch time.
pub fn facts_needed(snapshot: &Snapshot) -> BTreeSet<InstanceId> {
    let taken = TakenFirst::of(snapshot);
    let mut needed = BTreeSet::new();
    for (group, _) in taken.per_group.iter().filter(|(_, t)| t.iter().any(|t| t.returns)) {
        let Some(members) = snapshot.groups.get(*group).and_then(|g| g.members.as_ref()) else { continue };
        needed.extend(members.iter().filter(|i| !taken.running(snapshot).contains(i)).cloned());
    }
    needed
}

/// The members of `group` still joining that may be given back before they serve, newest first:
/// EC2 knows when each launched, no Ready node runs it, every Node claiming it is known to carry
/// no pod to evict, and it is neither at risk, covered by a boost, nor already chosen.
fn joining_candidates<'s>(
    snapshot: &'s Snapshot,
    group: &'s Group,
    running: &FastSet<&InstanceId>,
    excluded: &dyn Fn(&InstanceId) -> bool,
) -> Vec<&'s InstanceId> {
    let Some(members) = group.members.as_ref() else { return Vec::new() };
    let mut joining: Vec<(Timestamp, &InstanceId)> = members
        .iter()
        .filter(|i| !running.contains(i) && !excluded(i))
        .filter(|i| {
            snapshot
                .nodes
                .values()
                .filter(|n| n.instance.as_ref() == Some(*i))
                .all(|n| !n.ready && n.pods_known && !n.pods.iter().any(|p| p.class.is_evictable()))
        })
        .filter_map(|i| snapshot.instances.get(i).and_then(|f| f.launched).map(|at| (at, i)))
        .collect();
    joining.sort_by(|a, b| b.cmp(a));
    joining.into_iter().map(|(_, i)| i).collect()
}

/// The give-backs to start now, for instances that left their group without the booster.
pub(crate) fn plan_give_backs(
    snapshot: &Snapshot,
    at_risk: &AtRiskSet,
    policy: &Policy,
    now: Timestamp,
) -> Vec<GiveBack> {
    let taken_first = TakenFirst::of(snapshot);
    if taken_first.per_group.is_empty() {
        return Vec::new();
    }
    let running = || taken_first.running(snapshot);

    let chosen: FastSet<&NodeName> =
        snapshot.ledger.records.iter().flat_map(|r| r.giving_back.values().filter_map(|g| g.node.as_ref())).collect();
    let chosen_instances: FastSet<&InstanceId> =
        snapshot.ledger.records.iter().flat_map(|r| r.giving_back.values().map(|g| &g.instance)).collect();
    let covered = snapshot.ledger.index();
    let risky = at_risk.instances();
    let alive = snapshot.live_instances();
    // Replacements serving a boost whose at-risk nodes are still there wait for their drain
    // (those of a boost ahead returning its nodes are what it gives back).
    let serving: FastSet<NodeName> = claim_replacements(snapshot, &snapshot.ledger, at_risk)
        .into_iter()
        .zip(&snapshot.ledger.records)
        .filter(|(c, r)| c.instances.iter().any(|i| alive.contains(i)) && !r.returns_unused())
        .flat_map(|(c, _)| c.nodes)
        .collect();

    let serving_in = |group: &GroupName| {
        snapshot.nodes.values().any(|n| n.group.as_ref() == Some(group) && serving.contains(&n.name))
    };
    let contested = identity::contested(snapshot);
    let mut plan = Vec::new();
    for (name, taken) in &taken_first.per_group {
        let Some(group) = snapshot.groups.get(*name) else { continue };
        if group.ca.as_ref().is_some_and(|ca| ca.cloud_provider_target > group.desired) {
            // CA is scaling the group up: live desired is about to be CA's, not ours to lower.
            continue;
        }
        let members = group.members.as_ref();
        let joining = members.is_some_and(|m| m.iter().any(|i| !running().contains(i)));
        let floor = taken_first.floors.get(name).copied().unwrap_or(0).max(group.min);
        let in_flight = taken_first.in_flight.get(name).copied().unwrap_or(0);
        let mut room = group.desired.saturating_sub(floor).saturating_sub(in_flight);
        let eligible: Vec<(&Node, &InstanceId)> = snapshot
            .nodes
            .values()
            .filter(|n| may_give_back(n, name) && n.pods_known)
            .filter_map(|n| n.instance.as_ref().map(|i| (n, i)))
            .filter(|(_, i)| members.is_some_and(|m| m.contains(*i)) && !covered.contains_key(i) && !risky.contains(i))
            .filter(|(n, _)| !chosen.contains(&n.name) && !serving.contains(&n.name))
            // Its instance is terminated: only a node EC2 agrees is that instance.
            .filter(|(n, _)| identity::verify(snapshot, &contested, n).is_ok())
            .collect();
        // A node carrying a pod that opted out of disruption, or that nothing recreates, is never
        // given back: the capacity is Cluster Autoscaler's to remove when every node carries one.
        let (mut candidates, protecting): (Vec<_>, Vec<_>) =
            eligible.into_iter().partition(|(n, _)| n.protected_pods().is_empty());
        let evictable = |n: &Node| n.pods.iter().filter(|p| p.class.is_evictable()).count();
        candidates.sort_by(|(a, _), (b, _)| {
            evictable(a).cmp(&evictable(b)).then_with(|| b.created.cmp(&a.created)).then_with(|| a.name.cmp(&b.name))
        });
        let mut candidates = candidates.into_iter();
        let excluded = |i: &InstanceId| covered.contains_key(i) || risky.contains(i) || chosen_instances.contains(i);
        let mut joining_now = if joining {
            joining_candidates(snapshot, group, running(), &excluded).into_iter()
        } else {
            Vec::new().into_iter()
        };
        for t in taken {
            let waited_out = now.since(t.boosted_at) >= policy.replacement_timeout;
            let how = if !t.returns || room == 0 {
                GiveBackHow::AtFloor
            } else if joining && !waited_out {
                // Never a Ready node while others join; the newest joining instance, if one may go.
                let Some(instance) = joining_now.next() else { continue };
                room -= 1;
                GiveBackHow::Drain(GiveBackNode { node: None, instance: instance.clone(), chosen_at: now })
            } else if let Some((node, instance)) = candidates.next() {
                room -= 1;
                GiveBackHow::Drain(GiveBackNode {
                    node: Some(node.name.clone()),
                    instance: instance.clone(),
                    chosen_at: now,
                })
            } else if let Some((node, _)) = protecting.first().filter(|_| waited_out || !serving_in(name)) {
                // No node is freed later by a drain it serves: waiting changes nothing.
                let pods = node.protected_pods().into_iter().take(3).collect();
                GiveBackHow::LeftToClusterAutoscaler { why: LeftWhy::PodsProtected { node: node.name.clone(), pods } }
            } else if waited_out {
                GiveBackHow::LeftToClusterAutoscaler { why: LeftWhy::NoNodeInTime }
            } else {
                // The group's own replacement for the taken instance may still be joining.
                continue;
            };
            plan.push(GiveBack { group: (*name).clone(), reclaimed: t.instance.clone(), how });
        }
    }
    plan
}

impl GiveBack {
    /// This give-back in the ledger: the chosen node is recorded before its cordon; an instance
    /// with nothing to give back, or left to Cluster Autoscaler, is settled.
    pub(crate) fn edit(&self) -> LedgerEdit {
        match &self.how {
            GiveBackHow::Drain(node) => {
                LedgerEdit::GiveBack { reclaimed: self.reclaimed.clone(), node: Some(node.clone()) }
            }
            GiveBackHow::AtFloor | GiveBackHow::LeftToClusterAutoscaler { .. } => {
                LedgerEdit::Settle(self.reclaimed.clone(), true)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::core::ledger_edit::apply_all;
    use crate::core::model::{BoostRecord, Group, InstanceFacts, InstanceLifecycle};
    use crate::core::signals::fold_signals;
    use crate::core::Pending;

    const NOW: Timestamp = Timestamp::from_millis(60_000);

    fn record(instances: &[&str], added: u32, before: u32) -> BoostRecord {
        BoostRecord { before, ..BoostRecord::test("a", instances, added, 0) }
    }

    /// Group `a` listing `members`, with a Ready node `n<k>` for each `i-n<k>` member (k pods
    /// each, created at k seconds), and the ledger's `records`.
    fn snapshot(group: Group, records: Vec<BoostRecord>) -> Snapshot {
        let mut s = Snapshot::default();
        for ((k, member), created) in group.members.iter().flatten().enumerate().zip((0..).step_by(1_000)) {
            if let Some(name) = member.as_str().strip_prefix("i-") {
                s = s.with_node(Node::test(name, "a").with_pods(k % 3, 100, 1 << 20).created_at(created));
            }
        }
        s = s.with_group(group);
        s.ledger.records = records;
        s
    }

    fn plan(s: &Snapshot) -> Vec<GiveBack> {
        plan_give_backs(s, &fold_signals(s, &Policy::default(), NOW), &Policy::default(), NOW)
    }

    fn chosen(g: &GiveBack) -> Option<&str> {
        match &g.how {
            GiveBackHow::Drain(node) => node.node.as_ref().map(NodeName::as_str),
            _ => None,
        }
    }

    #[test]
    fn a_reclaimed_instance_gives_its_boosted_node_back_through_the_emptiest_newest_node() {
        // Boosted 4 → 5 for i-1; AWS took i-1 and the ASG replaced it with i-n9.
        // n2 holds 0 pods, n3 1, n4 2, n9 0 and is the newest: n9 is drained.
        let group = Group::test("a").desired(5).members(["i-n2", "i-n3", "i-n4", "i-n9"]);
        let p = plan(&snapshot(group, vec![record(&["i-1"], 1, 4)]));
        assert_eq!(p.len(), 1);
        assert_eq!((p[0].reclaimed.as_str(), chosen(&p[0])), ("i-1", Some("n9")));
    }

    #[test]
    fn at_risk_cordoned_claimed_opted_out_and_bare_nodes_are_never_chosen() {
        let group = Group::test("a").desired(6).members(["i-n1", "i-n2", "i-n3", "i-n4", "i-n5"]);
        let mut s = snapshot(group, vec![record(&["i-x"], 1, 5)]);
        s.nodes.get_mut(&NodeName::from("n1")).unwrap().cordoned = true;
        s.nodes.get_mut(&NodeName::from("n2")).unwrap().pods = Node::test("n2", "a").with_pods(1, 1, 1).pods;
        s.nodes.get_mut(&NodeName::from("n2")).unwrap().pods[0].opt_out = Some(crate::core::OptOut::DoNotDisrupt);
        s.nodes.get_mut(&NodeName::from("n3")).unwrap().pods = Node::test("n3", "a").with_pods(1, 1, 1).pods;
        s.nodes.get_mut(&NodeName::from("n3")).unwrap().pods[0].bare = true;
        s.ledger.record(BoostRecord { before: 5, ..BoostRecord::test("a", &["i-n4"], 1, 0) });
        s = s.with_signal(crate::core::Signal::rebalance("n4", 1_000));
        // n5 serves the open boost of n4 as its replacement: it waits for n4's drain.
        s.nodes.get_mut(&NodeName::from("n5")).unwrap().created = Timestamp::from_millis(10_000);
        s.ledger.records[1].at = Timestamp::from_millis(5_000);
        assert!(plan(&s).is_empty(), "no node qualifies yet: wait for the group's own replacement");

        let late = Timestamp::EPOCH.plus(Policy::default().replacement_timeout);
        let p = plan_give_backs(&s, &fold_signals(&s, &Policy::default(), late), &Policy::default(), late);
        let why = LeftWhy::PodsProtected { node: "n2".into(), pods: vec!["default/n2-p0".into()] };
        assert_eq!(p[0].how, GiveBackHow::LeftToClusterAutoscaler { why }, "after --replacement-timeout");
    }

    #[test]
    fn a_node_ec2_does_not_agree_is_its_instance_is_never_chosen() {
        // n9 (newest, empty) names i-n9, but EC2 named i-n9 otherwise: a Node registered by
        // someone else claiming a member's instance. Draining it would terminate the member.
        let group = Group::test("a").desired(5).members(["i-n2", "i-n3", "i-n9"]);
        let mut s = snapshot(group, vec![record(&["i-1"], 1, 4)]);
        s.describe(&Node::test("ip-10-0-7-7.ec2.internal", "a").with_instance("i-n9"));
        assert_eq!(chosen(&plan(&s)[0]), Some("n2"), "the emptiest verified node instead");
        // A second Node claiming i-n2: n2 carries the name EC2 gave i-n2, so it is still believed.
        s.nodes.insert("n7".into(), Node::test("n7", "a").with_instance("i-n2"));
        assert_eq!(chosen(&plan(&s)[0]), Some("n2"));
        // A third, under EC2's name too: none of them is.
        s.nodes.insert("n2.ec2.internal".into(), Node::test("n2.ec2.internal", "a").with_instance("i-n2"));
        s.instances.get_mut(&InstanceId::from("i-n2")).unwrap().private_dns_name = Some("n2.ec2.internal".into());
        assert_eq!(chosen(&plan(&s)[0]), Some("n3"));
        s.instances.clear();
        assert!(plan(&s).is_empty(), "nothing verified while EC2 is not asked: wait");
    }

    #[test]
    fn a_node_whose_pods_the_view_left_out_is_never_chosen_but_named_for_its_pods() {
        // n2 looks empty only because the view carries no pods for it (uncordoned, no signal).
        let group = Group::test("a").desired(5).members(["i-n2", "i-n3", "i-n9"]);
        let mut s = snapshot(group, vec![record(&["i-1"], 1, 4)]);
        let n2 = s.nodes.remove(&NodeName::from("n2")).unwrap().with_pods(4, 1, 1).pods_unknown();
        s.nodes.insert(n2.name.clone(), n2);
        assert_eq!(chosen(&plan(&s)[0]), Some("n3"), "the emptiest node whose pods are known");
        assert_eq!(pods_needed(&s), BTreeSet::from([NodeName::from("n2")]));

        // Nothing to give back: no pods are needed.
        let group = Group::test("a").desired(4).members(["i-n2", "i-n3"]);
        let mut s = snapshot(group, vec![]);
        s.nodes.values_mut().for_each(|n| n.pods_known = false);
        assert!(pods_needed(&s).is_empty());
    }

    #[test]
    fn when_every_node_carries_an_opted_out_or_bare_pod_the_capacity_is_left_to_ca_at_once() {
        let group = Group::test("a").desired(5).members(["i-n2", "i-n3"]);
        let mut s = snapshot(group, vec![record(&["i-1"], 1, 4)]);
        for (name, opted) in [("n2", true), ("n3", false)] {
            let node = s.nodes.get_mut(&NodeName::from(name)).unwrap();
            node.pods = Node::test(name, "a").with_pods(1, 1, 1).pods;
            if opted {
                node.pods[0].opt_out = Some(crate::core::OptOut::NotSafeToEvict);
            } else {
                node.pods[0].bare = true;
            }
        }
        let p = plan(&s);
        let why = LeftWhy::PodsProtected { node: "n2".into(), pods: vec!["default/n2-p0".into()] };
        assert_eq!(p[0].how, GiveBackHow::LeftToClusterAutoscaler { why }, "before --replacement-timeout");
        assert_eq!(p[0].edit(), LedgerEdit::Settle("i-1".into(), true), "settled: no node is chosen later");
    }

    #[test]
    fn a_node_an_operator_opted_out_is_never_chosen() {
        let group = Group::test("a").desired(5).members(["i-n2", "i-n3", "i-n9"]);
        let mut s = snapshot(group, vec![record(&["i-1"], 1, 4)]);
        assert_eq!(chosen(&plan(&s)[0]), Some("n2"), "the emptiest");
        s.nodes.get_mut(&NodeName::from("n2")).unwrap().opted_out = true;
        assert_eq!(chosen(&plan(&s)[0]), Some("n3"), "the next emptiest instead");
    }

    #[test]
    fn nothing_is_chosen_while_instances_of_the_group_are_still_joining() {
        let group = Group::test("a").desired(5).members(["i-n2", "i-n3", "i-n9"]);
        let mut s = snapshot(group, vec![record(&["i-1"], 1, 4)]);
        s.nodes.get_mut(&NodeName::from("n9")).unwrap().pods.clear();
        s.nodes.get_mut(&NodeName::from("n9")).unwrap().ready = false;
        assert!(plan(&s).is_empty(), "n9 is booting: its room is what would be given back");
        s.nodes.get_mut(&NodeName::from("n9")).unwrap().ready = true;
        assert_eq!(chosen(&plan(&s)[0]), Some("n9"), "the group's own replacement, Ready and empty");
    }

    #[test]
    fn while_instances_join_the_newest_joining_instance_without_pods_is_given_back() {
        // Boosted 4 → 7 for i-1, i-2, i-3; AWS took all three. The boost's replacement i-r1
        // launched at 10 s; the group's own replacements i-r2, i-r3, i-r4 at 100, 110 and 120 s.
        // i-r4's Node registered, not Ready, with a pod bound: never chosen.
        let group = Group::test("a").desired(7).members(["i-n2", "i-n3", "i-r1", "i-r2", "i-r3", "i-r4"]);
        let mut s = snapshot(group, vec![record(&["i-1", "i-2", "i-3"], 3, 4)]);
        for (k, launched) in [(1, 10_000), (2, 100_000), (3, 110_000), (4, 120_000)] {
            let name = NodeName::from(format!("r{k}").as_str());
            s.nodes.remove(&name);
            let instance = InstanceId::from(format!("i-r{k}").as_str());
            s.instances.entry(instance).or_insert_with(|| InstanceFacts::bought(InstanceLifecycle::Spot)).launched =
                Some(Timestamp::from_millis(launched));
        }
        let mut r4 = Node::test("r4", "a").with_pods(1, 1, 1);
        r4.ready = false;
        s.nodes.insert(r4.name.clone(), r4);
        assert_eq!(facts_needed(&s), ["i-r1", "i-r2", "i-r3", "i-r4"].map(InstanceId::from).into());
        let planned = plan(&s);
        let chosen: Vec<(Option<&str>, &str)> = planned
            .iter()
            .map(|g| match &g.how {
                GiveBackHow::Drain(n) => (n.node.as_ref().map(NodeName::as_str), n.instance.as_str()),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(chosen, vec![(None, "i-r3"), (None, "i-r2"), (None, "i-r1")], "newest first, no Ready node");

        // A joining instance EC2 gave no launch time is not chosen: wait for it.
        s.instances.values_mut().for_each(|f| f.launched = None);
        assert!(plan(&s).is_empty());
    }

    #[test]
    fn an_instance_whose_node_is_still_ready_is_not_taken() {
        let group = Group::test("a").desired(5).members(["i-n2"]);
        let s = snapshot(group, vec![record(&["i-n1"], 1, 4)]).with_node(Node::test("n1", "a"));
        assert!(plan(&s).is_empty());
    }

    #[test]
    fn members_settled_and_already_chosen_instances_are_not_reclaimed_again() {
        let group = Group::test("a").desired(5).members(["i-1", "i-n2"]);
        let mut r = record(&["i-1", "i-3", "i-4"], 3, 2);
        r.settled.insert("i-3".into());
        r.giving_back.insert(
            "i-4".into(),
            GiveBackNode { node: Some("n2".into()), instance: "i-n2".into(), chosen_at: Timestamp::EPOCH },
        );
        assert!(plan(&snapshot(group, vec![r])).is_empty());
    }

    #[test]
    fn never_more_than_the_boost_added_nor_below_the_size_before_it() {
        // Two instances covered by one added node: one node drained, the other only settles.
        let group = Group::test("a").desired(5).members(["i-n7", "i-n8"]);
        let p = plan(&snapshot(group, vec![record(&["i-1", "i-2"], 1, 4)]));
        let hows: Vec<Option<&str>> = p.iter().map(chosen).collect();
        assert_eq!(hows, vec![Some("n7"), None], "n7 holds no pod");
        assert_eq!(p[1].how, GiveBackHow::AtFloor);

        // Someone already scaled the group back to its pre-boost size: settle, drain nothing.
        let group = Group::test("a").desired(4).members(["i-n7"]);
        let p = plan(&snapshot(group, vec![record(&["i-1"], 1, 4)]));
        assert_eq!(p[0].how, GiveBackHow::AtFloor);

        // A node already chosen for another reclaimed instance holds its share of the room.
        let group = Group::test("a").desired(5).members(["i-n7", "i-n8"]);
        let mut r = record(&["i-1", "i-2"], 2, 4);
        r.giving_back.insert(
            "i-2".into(),
            GiveBackNode { node: Some("n8".into()), instance: "i-n8".into(), chosen_at: Timestamp::EPOCH },
        );
        assert_eq!(plan(&snapshot(group, vec![r]))[0].how, GiveBackHow::AtFloor);
    }

    #[test]
    fn nothing_is_given_back_while_cluster_autoscaler_scales_up_or_the_group_is_undescribed() {
        let group = Group::test("a").desired(5).ca_target(7, None).members(["i-n7"]);
        assert!(plan(&snapshot(group, vec![record(&["i-1"], 1, 4)])).is_empty());
        let undescribed = Group::test("a").desired(5);
        assert!(plan(&snapshot(undescribed, vec![record(&["i-1"], 1, 4)])).is_empty());
    }

    #[test]
    fn noting_a_give_back_records_the_chosen_node_or_settles() {
        let group = Group::test("a").desired(5).members(["i-n7"]);
        let mut s = snapshot(group, vec![record(&["i-1", "i-2"], 1, 4)]);
        for g in plan(&s) {
            g.edit().apply(&mut s.ledger);
        }
        let r = &s.ledger.records[0];
        assert_eq!(r.giving_back.keys().collect::<Vec<_>>(), vec![&InstanceId::from("i-1")]);
        assert_eq!(r.settled, BTreeSet::from([InstanceId::from("i-2")]));
        apply_all(
            &mut s.ledger,
            &[
                LedgerEdit::BeginReturn { boosted: "i-1".into(), terminated: "i-n7".into() },
                LedgerEdit::GiveBack { reclaimed: "i-1".into(), node: None },
                LedgerEdit::Answer {
                    write: Pending::Return { boosted: "i-1".into(), terminated: "i-n7".into() },
                    applied: true,
                },
            ],
        );
        assert_eq!((s.ledger.records[0].returned, s.ledger.records[0].giving_back.len()), (1, 0));
    }
}
