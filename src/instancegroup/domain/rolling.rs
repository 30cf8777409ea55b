//! The rollingUpdate strategy, one step at a time. Unlike upstream, which terminates drifted
//! instances outright, a step only marks nodes for rotation: the booster then buys replacements,
//! drains with PDBs respected, and terminates. Nodes the booster is already draining count
//! against `maxUnavailable`, so a rotation never piles onto a spot storm.

use std::collections::BTreeMap;

use super::design::MaxUnavailable;
use super::launch::GroupInstance;
use crate::core::InstanceId;

/// What the cluster says about one instance's node.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct NodeFacts {
    /// The node is Ready.
    pub ready: bool,
    /// Already marked for rotation by us.
    pub(crate) rotating: bool,
    /// Already at risk or being drained for any other reason (NTH, cordoned).
    pub(crate) busy: bool,
}

/// One step's input.
#[derive(Debug, Clone)]
pub(crate) struct RollingInput<'a> {
    /// The group's instances.
    pub instances: &'a [GroupInstance],
    /// The launch template instances should come from.
    pub(crate) template_name: &'a str,
    /// Its latest version.
    pub(crate) latest_version: &'a str,
    /// `maxUnavailable`.
    pub(crate) max_unavailable: MaxUnavailable,
    /// DesiredCapacity now (caps the batch, as upstream).
    pub desired: i32,
    /// Node facts by instance id; an instance without a node has not joined yet.
    pub nodes: &'a BTreeMap<InstanceId, NodeFacts>,
}

/// Why a step does nothing yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wait {
    /// Instances that have not become Ready nodes.
    NotReady(Vec<InstanceId>),
    /// The batch is full of rotations and drains in flight.
    BatchFull {
        /// Nodes in flight.
        in_flight: usize,
        /// The batch size.
        max: usize,
    },
}

/// The next step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RollingStep {
    /// No instance runs an older configuration.
    Done,
    /// Nothing to do now; look again later.
    Wait(Wait),
    /// Mark these instances' nodes for rotation.
    Rotate(Vec<InstanceId>),
}

/// Instances that run another template or version than the latest (launch configurations too).
pub(crate) fn drifted_instances<'a>(
    instances: &'a [GroupInstance],
    template: &str,
    version: &str,
) -> Vec<&'a GroupInstance> {
    instances
        .iter()
        .filter(|i| !i.lifecycle_state.starts_with("Terminating"))
        .filter(|i| i.template_name.as_deref() != Some(template) || i.template_version.as_deref() != Some(version))
        .collect()
}

/// The batch size: a percentage of the instances rounded up, or a count; at least 1, at most the
/// desired capacity.
pub(crate) fn batch_size(max_unavailable: MaxUnavailable, instances: usize, desired: i32) -> usize {
    let size = match max_unavailable {
        MaxUnavailable::Count(n) => n as usize,
        MaxUnavailable::Percent(p) => (instances * p as usize).div_ceil(100),
    };
    size.max(1).min(desired.max(1) as usize)
}

/// Plans the next rolling-update step.
pub(crate) fn next_step(input: &RollingInput<'_>) -> RollingStep {
    let drifted = drifted_instances(input.instances, input.template_name, input.latest_version);
    if drifted.is_empty() {
        return RollingStep::Done;
    }
    let live: Vec<&GroupInstance> =
        input.instances.iter().filter(|i| !i.lifecycle_state.starts_with("Terminating")).collect();
    let facts = |id: &InstanceId| input.nodes.get(id).copied();
    let in_flight = live.iter().filter(|i| facts(&i.id).is_some_and(|f| f.rotating || f.busy)).count();
    let max = batch_size(input.max_unavailable, live.len(), input.desired);
    if in_flight >= max {
        return RollingStep::Wait(Wait::BatchFull { in_flight, max });
    }
    let not_ready: Vec<InstanceId> = live
        .iter()
        .filter(|i| !facts(&i.id).is_some_and(|f| f.ready || f.rotating || f.busy))
        .map(|i| i.id.clone())
        .collect();
    if !not_ready.is_empty() {
        return RollingStep::Wait(Wait::NotReady(not_ready));
    }
    let mut candidates: Vec<InstanceId> =
        drifted.iter().filter(|i| !facts(&i.id).is_some_and(|f| f.rotating || f.busy)).map(|i| i.id.clone()).collect();
    candidates.sort();
    candidates.truncate(max - in_flight);
    if candidates.is_empty() {
        // Every drifted node is already rotating or draining.
        return RollingStep::Wait(Wait::BatchFull { in_flight, max });
    }
    RollingStep::Rotate(candidates)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn instance(id: &str, version: &str) -> GroupInstance {
        GroupInstance {
            id: id.into(),
            template_name: Some("lt".into()),
            template_version: Some(version.into()),
            instance_type: Some("m5.large".into()),
            lifecycle_state: "InService".into(),
        }
    }

    fn ready() -> NodeFacts {
        NodeFacts { ready: true, ..Default::default() }
    }

    fn step(instances: &[GroupInstance], max: MaxUnavailable, nodes: &BTreeMap<String, NodeFacts>) -> RollingStep {
        let nodes: BTreeMap<InstanceId, NodeFacts> =
            nodes.iter().map(|(id, facts)| (InstanceId::from(id.as_str()), *facts)).collect();
        next_step(&RollingInput {
            instances,
            template_name: "lt",
            latest_version: "2",
            max_unavailable: max,
            desired: i32::try_from(instances.len()).unwrap(),
            nodes: &nodes,
        })
    }

    #[test]
    fn batch_sizes_follow_upstream_rounding_and_bounds() {
        use MaxUnavailable::*;
        let table = [
            (Count(1), 10, 10, 1),
            (Count(0), 10, 10, 1),
            (Count(5), 10, 3, 3),
            (Percent(25), 10, 10, 3),
            (Percent(30), 3, 3, 1),
            (Percent(100), 4, 4, 4),
            (Percent(10), 0, 0, 1),
        ];
        for (max, instances, desired, expected) in table {
            assert_eq!(batch_size(max, instances, desired), expected, "{max:?} of {instances} (desired {desired})");
        }
    }

    #[test]
    fn steps_rotate_in_batches_wait_for_readiness_and_finish() {
        let nodes_all_ready = |ids: &[&str]| ids.iter().map(|id| (id.to_string(), ready())).collect::<BTreeMap<_, _>>();
        let old = [instance("i-1", "1"), instance("i-2", "1"), instance("i-3", "1"), instance("i-4", "2")];

        let nodes = nodes_all_ready(&["i-1", "i-2", "i-3", "i-4"]);
        assert_eq!(step(&old, MaxUnavailable::Count(2), &nodes), RollingStep::Rotate(vec!["i-1".into(), "i-2".into()]));

        let mut rotating = nodes.clone();
        rotating.get_mut("i-1").unwrap().rotating = true;
        assert_eq!(step(&old, MaxUnavailable::Count(2), &rotating), RollingStep::Rotate(vec!["i-2".into()]));
        rotating.get_mut("i-2").unwrap().rotating = true;
        assert_eq!(
            step(&old, MaxUnavailable::Count(2), &rotating),
            RollingStep::Wait(Wait::BatchFull { in_flight: 2, max: 2 })
        );

        let mut joining = old.to_vec();
        joining.push(instance("i-5", "2"));
        assert_eq!(
            step(&joining, MaxUnavailable::Count(2), &nodes),
            RollingStep::Wait(Wait::NotReady(vec!["i-5".into()])),
            "a replacement that has not joined holds the next batch"
        );

        let fresh = [instance("i-4", "2"), instance("i-5", "2")];
        assert_eq!(step(&fresh, MaxUnavailable::Count(2), &nodes_all_ready(&["i-4", "i-5"])), RollingStep::Done);
    }

    #[test]
    fn the_boosters_own_drains_use_up_the_batch() {
        let instances = [instance("i-1", "1"), instance("i-2", "1"), instance("i-3", "2")];
        let mut nodes: BTreeMap<String, NodeFacts> =
            ["i-1", "i-2", "i-3"].iter().map(|id| (id.to_string(), ready())).collect();
        nodes.get_mut("i-3").unwrap().busy = true;
        assert_eq!(
            step(&instances, MaxUnavailable::Count(1), &nodes),
            RollingStep::Wait(Wait::BatchFull { in_flight: 1, max: 1 }),
            "an NTH drain of an up-to-date node still counts"
        );
        assert_eq!(step(&instances, MaxUnavailable::Count(2), &nodes), RollingStep::Rotate(vec!["i-1".into()]));
    }

    #[test]
    fn terminating_instances_and_launch_configurations() {
        let mut gone = instance("i-1", "1");
        gone.lifecycle_state = "Terminating:Wait".into();
        let mut from_config = instance("i-2", "2");
        from_config.template_name = None;
        let instances = [gone, from_config];
        let drifted = drifted_instances(&instances, "lt", "2");
        assert_eq!(drifted.iter().map(|i| i.id.as_str()).collect::<Vec<_>>(), ["i-2"]);
    }
}
