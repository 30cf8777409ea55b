//! Giving back what AWS took first. A boosted at-risk instance normally leaves its group through
//! the booster's own termination, with decrement, which returns the node the boost added. When AWS
//! reclaims it first (a spot interruption under queue mode, a short notice), the Auto Scaling Group
//! replaces it and the group would stay one node larger until Cluster Autoscaler scales it down.
//!
//! Such an instance is one that no longer appears among its group's members (as Auto Scaling
//! lists them), whose node is gone or not Ready, and that the booster never settled. For each, while its boost still has a node to
//! return, desired capacity goes down by one: one guarded write per group, never below the size the
//! group had before its oldest open boost, nor below MinSize, and not while Cluster Autoscaler's
//! own scale-up is in flight (its target leads the live value).

use std::cell::OnceCell;
use std::collections::{BTreeMap, HashSet};

use serde::{Deserialize, Serialize};

use super::model::{GroupName, InstanceId, Snapshot};

/// One group's give-back: lower desired capacity from `from` to `to`, and settle the instances.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GiveBack {
    /// The group.
    pub group: GroupName,
    /// Live desired capacity the plan started from (the write is guarded on it).
    pub from: u32,
    /// Desired capacity to set; equal to `from` when nothing can be given back (the group is
    /// already at its pre-boost size): the instances are only settled.
    pub to: u32,
    /// Reclaimed instances whose boost gets one node back each (`from - to` of them).
    pub returned: Vec<InstanceId>,
    /// Every reclaimed instance this give-back settles (those in `returned` included).
    pub settled: Vec<InstanceId>,
}

impl GiveBack {
    /// Whether executing it changes desired capacity.
    pub fn writes(&self) -> bool {
        self.to < self.from
    }
}

/// Instances of `record`-style boosts that left their group without the booster, grouped per
/// group, with what may be given back for them.
pub(crate) fn plan_give_backs(snapshot: &Snapshot) -> Vec<GiveBack> {
    // An instance whose node is still Ready is running, whatever the list says: never taken.
    // Looked up only for instances missing from their group's list, so built only then.
    let running: OnceCell<HashSet<&InstanceId>> = OnceCell::new();
    let running = || {
        running
            .get_or_init(|| snapshot.nodes.values().filter(|n| n.ready).filter_map(|n| n.instance.as_ref()).collect())
    };
    let mut per_group: BTreeMap<&GroupName, Vec<(&InstanceId, bool)>> = BTreeMap::new();
    let mut floors: BTreeMap<&GroupName, u32> = BTreeMap::new();
    for record in &snapshot.ledger.records {
        let Some(members) = snapshot.groups.get(&record.group).and_then(|g| g.members.as_ref()) else { continue };
        let floor = floors.entry(&record.group).or_insert(u32::MAX);
        *floor = (*floor).min(record.before);
        let mut left = record.added.saturating_sub(record.returned);
        let taken = |i: &&InstanceId| !members.contains(*i) && !record.settled.contains(*i) && !running().contains(*i);
        for instance in record.instances.iter().filter(taken) {
            let returns = left > 0;
            left = left.saturating_sub(1);
            per_group.entry(&record.group).or_default().push((instance, returns));
        }
    }

    let mut plan = Vec::new();
    for (name, reclaimed) in per_group {
        let Some(group) = snapshot.groups.get(name) else { continue };
        if group.ca.as_ref().is_some_and(|ca| ca.cloud_provider_target > group.desired) {
            // CA is scaling the group up: live desired is about to be CA's, not ours to lower.
            continue;
        }
        let want = reclaimed.iter().filter(|(_, returns)| *returns).count();
        let want = u32::try_from(want).unwrap_or(u32::MAX);
        let floor = floors.get(name).copied().unwrap_or(0).max(group.min);
        let to = group.desired.saturating_sub(want).max(floor).min(group.desired);
        let given = usize::try_from(group.desired - to).unwrap_or(usize::MAX);
        plan.push(GiveBack {
            group: name.clone(),
            from: group.desired,
            to,
            returned: reclaimed.iter().filter(|(_, returns)| *returns).take(given).map(|(i, _)| (*i).clone()).collect(),
            settled: reclaimed.iter().map(|(i, _)| (*i).clone()).collect(),
        });
    }
    plan
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::core::model::{BoostRecord, Group, Timestamp};

    fn record(instances: &[&str], added: u32, before: u32) -> BoostRecord {
        BoostRecord {
            group: "a".into(),
            instances: instances.iter().map(|i| InstanceId::from(*i)).collect(),
            added,
            returned: 0,
            at: Timestamp::EPOCH,
            before,
            settled: BTreeSet::new(),
            kept: Default::default(),
            expired: None,
        }
    }

    fn snapshot(group: Group, records: Vec<BoostRecord>) -> Snapshot {
        let mut s = Snapshot::default().with_group(group);
        s.ledger.records = records;
        s
    }

    #[test]
    fn a_reclaimed_instance_gives_its_boosted_node_back() {
        // Boosted 4 → 5 for i-1; AWS took i-1 and the ASG replaced it with i-9.
        let group = Group::test("a").desired(5).members(["i-2", "i-3", "i-4", "i-r", "i-9"]);
        let plan = plan_give_backs(&snapshot(group, vec![record(&["i-1"], 1, 4)]));
        assert_eq!(plan.len(), 1);
        assert_eq!((plan[0].from, plan[0].to), (5, 4));
        assert_eq!(plan[0].returned, vec![InstanceId::from("i-1")]);
        assert!(plan[0].writes());
    }

    #[test]
    fn an_instance_whose_node_is_still_ready_is_not_taken() {
        let group = Group::test("a").desired(5).members(["i-2"]);
        let s = snapshot(group, vec![record(&["i-n1"], 1, 4)]).with_node(crate::core::Node::test("n1", "a"));
        assert!(plan_give_backs(&s).is_empty());
    }

    #[test]
    fn members_and_settled_instances_are_not_reclaimed() {
        let group = Group::test("a").desired(5).members(["i-1", "i-2"]);
        let mut r = record(&["i-1", "i-3"], 2, 3);
        r.settled.insert("i-3".into());
        assert!(plan_give_backs(&snapshot(group, vec![r])).is_empty());
    }

    #[test]
    fn never_more_than_the_boost_added_nor_below_the_size_before_it() {
        // Two instances covered by one added node: one give-back, the other only settles.
        let group = Group::test("a").desired(5).members(["i-7"]);
        let plan = plan_give_backs(&snapshot(group, vec![record(&["i-1", "i-2"], 1, 4)]));
        assert_eq!((plan[0].to, plan[0].returned.len(), plan[0].settled.len()), (4, 1, 2));

        // Someone already scaled the group back to its pre-boost size: settle, write nothing.
        let group = Group::test("a").desired(4).members(["i-7"]);
        let plan = plan_give_backs(&snapshot(group, vec![record(&["i-1"], 1, 4)]));
        assert!(!plan[0].writes());
        assert!(plan[0].returned.is_empty());
        assert_eq!(plan[0].settled, vec![InstanceId::from("i-1")]);
    }

    #[test]
    fn nothing_is_lowered_while_cluster_autoscaler_scales_up_or_the_group_is_undescribed() {
        let group = Group::test("a").desired(5).ca_target(7, None).members(["i-7"]);
        assert!(plan_give_backs(&snapshot(group, vec![record(&["i-1"], 1, 4)])).is_empty());
        let undescribed = Group::test("a").desired(5);
        assert!(plan_give_backs(&snapshot(undescribed, vec![record(&["i-1"], 1, 4)])).is_empty());
    }
}
