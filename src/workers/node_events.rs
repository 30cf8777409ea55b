//! What each Event on a Node says: one constructor per [`NodeEventReason`], building the note
//! from the decision value it tells. The workers choose the Nodes and publish; the words are here,
//! so a reason's note reads the same wherever it is told.

use std::time::Duration;

use crate::core::{
    Boost, BoostExpiry, DrainTarget, DrainWait, Exhausted, Expired, Fallback, ForcedDeletion, GroupName, Held,
    HeldAtDeadline, HeldPod, InstanceId, LaunchFailure, NodeName, Pod, RefusedFallback, Returning,
};
use crate::ports::{NodeEvent, NodeEventReason};

fn event(node: &NodeName, reason: NodeEventReason, note: String) -> NodeEvent {
    NodeEvent { node: node.clone(), reason, note }
}

/// `namespace/name` of each pod, comma-separated.
fn named(pods: &[&Pod]) -> String {
    pods.iter().map(|p| format!("{}/{}", p.namespace, p.name)).collect::<Vec<_>>().join(", ")
}

impl NodeEvent {
    /// `boost`'s write applied (or would have, in dry run): `from -> to`.
    pub(crate) fn boost_requested(node: &NodeName, boost: &Boost, (from, to): (u32, u32), dry_run: bool) -> NodeEvent {
        let dry = if dry_run { "dry run: " } else { "" };
        let note = format!("{dry}desired capacity of {} {from} -> {to}: {}", boost.group, boost.reason);
        event(node, NodeEventReason::BoostRequested, note)
    }

    /// The core holds `held`'s boost.
    pub(crate) fn boost_held(node: &NodeName, held: &Held) -> NodeEvent {
        event(node, NodeEventReason::BoostHeld, format!("boost of {} held: {}", held.group, held.reason))
    }

    /// The boost of `group` stopped waiting, and why.
    pub(crate) fn boost_expired(node: &NodeName, group: &GroupName, expired: &Expired) -> NodeEvent {
        let waited = match expired.why {
            BoostExpiry::ReplacementTimeout => {
                format!("{} of {} replacement(s) Ready after --replacement-timeout", expired.ready, expired.added)
            }
            BoostExpiry::DrainDeferred => {
                "its replacements are Ready but a pod's opt-out still defers the drain after --replacement-timeout"
                    .to_string()
            }
            BoostExpiry::MaxAge => "open longer than --max-boost-age".to_string(),
        };
        let note = format!(
            "{waited}: the boost of {group} stops waiting, scale-down protection is lifted and the budget \
             freed; this node is not drained for it and stays as NTH left it (uncordon it, or let the \
             interruption take it)"
        );
        event(node, NodeEventReason::BoostExpired, note)
    }

    /// `moved`'s nodes were asked of its fallback instead: `from -> to` there.
    pub(crate) fn boost_fell_back(node: &NodeName, moved: &Fallback, (from, to): (u32, u32)) -> NodeEvent {
        let note = match &moved.left {
            Some(left) => format!(
                "{} node(s) {left} could not launch (no capacity) asked of {} instead: {from} -> {to}",
                moved.nodes, moved.to
            ),
            None => format!(
                "{} parked node(s) of the {} boost retried in {}: {from} -> {to}",
                moved.nodes, moved.record.group, moved.to
            ),
        };
        event(node, NodeEventReason::BoostFellBack, note)
    }

    /// Every group `exhausted`'s nodes may go to failed: they are parked, their group lowered,
    /// and retried later.
    pub(crate) fn fallback_exhausted(node: &NodeName, exhausted: &Exhausted, retry_in: Duration) -> NodeEvent {
        let note = format!(
            "{} node(s) of the {} boost could not launch in any group it may use (tried: {}); desired capacity is taken back and they are retried in {}s while this node keeps serving",
            exhausted.nodes,
            exhausted.record.group,
            exhausted.tried.iter().map(|g| g.as_str()).collect::<Vec<_>>().join(", "),
            retry_in.as_secs()
        );
        event(node, NodeEventReason::FallbackExhausted, note)
    }

    /// A fallback node's return to its own group began.
    pub(crate) fn returning_to_spot(node: &NodeName, r: &Returning) -> NodeEvent {
        let note = if r.surplus {
            format!(
                "capacity {} could not launch runs on its fallback {}; {} launches again and has relaunched its own size: nothing is asked of it, this node is drained onto it and terminated with decrement",
                r.home, r.from, r.home
            )
        } else {
            format!(
                "capacity {} could not launch runs on its fallback {}; {} launches again: a replacement is asked of it, then this node is drained and terminated with decrement",
                r.home, r.from, r.home
            )
        };
        event(node, NodeEventReason::ReturningToSpot, note)
    }

    /// A rebalance recommendation lapsed on a node cordoned before it came: that cordon is
    /// someone else's, and stays.
    pub(crate) fn cordon_kept(node: &NodeName) -> NodeEvent {
        let note = "the rebalance recommendation lapsed with no interruption, but this node was cordoned before it \
                    came (or before the booster could see when): the cordon and its labels stay as they were set"
            .to_string();
        event(node, NodeEventReason::CordonKept, note)
    }

    /// The fallback the core refused, and why.
    pub(crate) fn fallback_refused(node: &NodeName, refused: &RefusedFallback) -> NodeEvent {
        let note = format!(
            "{} has no capacity, but its fallback {} is refused: {}; the boost waits as if no fallback were named",
            refused.record.group,
            refused.to,
            refused.reason.explain()
        );
        event(node, NodeEventReason::FallbackRefused, note)
    }

    /// `group` could not launch a replacement: `CapacityUnavailable` when its pool had none,
    /// `LaunchFailed` for a configuration error no other pool fixes.
    pub(crate) fn launch_failed(node: &NodeName, group: &GroupName, failure: &LaunchFailure) -> NodeEvent {
        match failure {
            LaunchFailure::Capacity { code } => event(
                node,
                NodeEventReason::CapacityUnavailable,
                format!("{group} could not launch a replacement: {code} (no capacity in its pool); the boost waits"),
            ),
            LaunchFailure::Configuration { message } => event(
                node,
                NodeEventReason::LaunchFailed,
                format!("{group} could not launch a replacement, a configuration error no other pool fixes: {message}"),
            ),
        }
    }

    /// `group` launched none of its `missing` instances within `launch_timeout`.
    pub(crate) fn launch_stalled(
        node: &NodeName,
        group: &GroupName,
        missing: u32,
        launch_timeout: Duration,
    ) -> NodeEvent {
        let timeout = launch_timeout.as_secs();
        let note =
            format!("{group} launched none of its {missing} missing instance(s) within {timeout}s (--launch-timeout)");
        event(node, NodeEventReason::LaunchStalled, note)
    }

    /// A pod's opt-out holds the node's voluntary drain back.
    pub(crate) fn drain_deferred(node: &NodeName, wait: &DrainWait) -> NodeEvent {
        event(node, NodeEventReason::DrainDeferred, wait.to_string())
    }

    /// `target`'s drain of `pods` pods in `group` started, and why now.
    pub(crate) fn drain_started(target: &DrainTarget, group: &GroupName, pods: usize) -> NodeEvent {
        let why = match target.deadline {
            _ if target.gives_back.is_some() => format!(
                "giving back the node boosted in {group} for {}, which AWS took first: cordoned; evicting \
                 {pods} pod(s), then terminating it with decrement",
                target.gives_back.as_ref().map_or("", InstanceId::as_str)
            ),
            Some(deadline) if target.early => format!(
                "the instance goes at {} and its replacement capacity is not Ready yet: draining now so \
                 every pod gets its grace period; evicting {pods} pod(s)",
                crate::timefmt::format_rfc3339(deadline),
            ),
            Some(deadline) => format!(
                "its replacement capacity is Ready and the instance goes at {}; evicting {pods} pod(s)",
                crate::timefmt::format_rfc3339(deadline)
            ),
            // The replacements may be in a fallback group: the boost's, not the node's.
            None => format!("its replacement capacity is Ready; evicting {pods} pod(s)"),
        };
        event(&target.node, NodeEventReason::DrainStarted, why)
    }

    /// A PodDisruptionBudget refused the evictions of `blocked`; retried in `wait`, doubling
    /// unless the refusal `moved` (a pod left since the last round).
    pub(crate) fn drain_blocked_by_pdb(node: &NodeName, blocked: &[String], wait: Duration, moved: bool) -> NodeEvent {
        let note = format!(
            "a PodDisruptionBudget allows no disruption of {} now; retrying in {}s{}",
            blocked.join(", "),
            wait.as_secs(),
            if moved { "" } else { ", doubling" }
        );
        event(node, NodeEventReason::DrainBlockedByPdb, note)
    }

    /// A pod its budget still refused was deleted gracefully before its instance goes.
    pub(crate) fn pdb_overridden(forced: &ForcedDeletion, deadline_in: Duration) -> NodeEvent {
        let held = &forced.held;
        let note = format!(
            "deleted pod {}/{} with a {}s grace period although {} refused its eviction: the instance goes in {}s (--interruption-force-at-deadline)",
            held.pod.namespace,
            held.pod.name,
            forced.grace_seconds,
            budget_named(held),
            deadline_in.as_secs(),
        );
        event(&forced.node, NodeEventReason::PdbOverridden, note)
    }

    /// The deadline came with pods their budgets still held: the instance's end kills them.
    pub(crate) fn pods_held_at_deadline(held: &HeldAtDeadline) -> NodeEvent {
        let pods: Vec<String> =
            held.pods.iter().map(|h| format!("{}/{} by {}", h.pod.namespace, h.pod.name, budget_named(h))).collect();
        let note = format!(
            "the interruption deadline came with pods still held: {} (--interruption-force-at-deadline deletes them gracefully in time)",
            pods.join(", ")
        );
        event(&held.node, NodeEventReason::PodsHeldAtDeadline, note)
    }

    /// The drain timed out with `left` pods; the instance is terminated anyway or stays cordoned.
    pub(crate) fn drain_timed_out(node: &NodeName, left: usize, terminate: bool) -> NodeEvent {
        let then =
            if terminate { "terminating it anyway (--terminate-after-drain-timeout)" } else { "it stays cordoned" };
        event(node, NodeEventReason::DrainTimedOut, format!("{left} pod(s) left; {then}"))
    }

    /// A confirmed interruption evicts pods that opted out.
    pub(crate) fn opt_out_overridden(node: &NodeName, opted_out: &[&Pod]) -> NodeEvent {
        let note = format!("the instance is being interrupted; evicting pods that opted out: {}", named(opted_out));
        event(node, NodeEventReason::OptOutOverridden, note)
    }

    /// The drain evicts pods no controller recreates.
    pub(crate) fn bare_pods_evicted(node: &NodeName, bare: &[&Pod]) -> NodeEvent {
        event(
            node,
            NodeEventReason::BarePodsEvicted,
            format!("evicting pods no controller will recreate: {}", named(bare)),
        )
    }

    /// No node of `group` was drained to give back the node boosted for `reclaimed`: each that
    /// could be carries pods that opted out or that nothing recreates (`pods`, on this node).
    pub(crate) fn give_back_pods_protected(
        node: &NodeName,
        group: &GroupName,
        reclaimed: &InstanceId,
        pods: &str,
    ) -> NodeEvent {
        let note = format!(
            "not drained to give back the node boosted in {group} for {reclaimed}, which AWS took first: \
             it carries pods that opted out of disruption or that nothing recreates ({pods}), as does \
             every other node that could be; Cluster Autoscaler removes the extra capacity when it \
             finds it unneeded"
        );
        event(node, NodeEventReason::GiveBackLeftToClusterAutoscaler, note)
    }

    /// The node chosen to give back the node boosted for `reclaimed` could not be drained
    /// (`why`): it was uncordoned.
    pub(crate) fn give_back_stopped(
        node: &NodeName,
        group: &GroupName,
        reclaimed: &InstanceId,
        why: &str,
    ) -> NodeEvent {
        let note = format!(
            "chosen to give back the node boosted for {reclaimed}, which AWS took first, but {why}: uncordoned; \
             Cluster Autoscaler removes the extra capacity of {group} when it finds it unneeded"
        );
        event(node, NodeEventReason::GiveBackLeftToClusterAutoscaler, note)
    }

    /// `instance` was terminated, with decrement or not, giving back the node boosted for
    /// `gives_back` when it was a give-back's.
    pub(crate) fn instance_terminated(
        node: &NodeName,
        instance: &InstanceId,
        gives_back: Option<&InstanceId>,
        decremented: bool,
    ) -> NodeEvent {
        let how = match (gives_back, decremented) {
            (Some(reclaimed), true) => {
                format!("with decrement: gives back the node boosted for {reclaimed}, which AWS took first")
            }
            (_, true) => "with decrement: a boosted node is given back".to_string(),
            (_, false) => "without decrement: the Auto Scaling Group replaces it".to_string(),
        };
        event(node, NodeEventReason::InstanceTerminated, format!("{instance} {how}"))
    }

    /// `AZRebalance` was suspended on `group` before a termination with decrement.
    pub(crate) fn az_rebalance_suspended(node: &NodeName, group: &GroupName) -> NodeEvent {
        let note = format!(
            "suspended Auto Scaling's AZRebalance on {group} before terminating with decrement; it is \
             resumed when spots-booster runs without --suspend-az-rebalance"
        );
        event(node, NodeEventReason::AzRebalanceSuspended, note)
    }

    /// A termination with decrement in `group`, whose `AZRebalance` is active.
    pub(crate) fn az_rebalance_risk(node: &NodeName, group: &GroupName) -> NodeEvent {
        let note = format!(
            "{group} has Auto Scaling's AZRebalance process active: after this termination with decrement it may \
             launch and terminate instances of its own choosing, undrained, to even out Availability Zones; \
             suspend AZRebalance on the group (aws autoscaling suspend-processes --scaling-processes AZRebalance)"
        );
        event(node, NodeEventReason::AzRebalanceRisk, note)
    }
}

/// How a held pod's budget is named in a note.
fn budget_named(held: &HeldPod) -> String {
    match &held.budget {
        Some(name) => format!("PodDisruptionBudget {}/{name}", held.pod.namespace),
        None => "a PodDisruptionBudget".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::Timestamp;

    /// Every reason has its constructor, and each constructor names its own reason.
    #[test]
    fn every_reason_is_built_by_a_constructor_of_its_own() {
        let node: NodeName = "n1".into();
        let group: GroupName = "a".into();
        let i: InstanceId = "i-1".into();
        let forced = ForcedDeletion {
            node: node.clone(),
            group: group.clone(),
            held: HeldPod {
                pod: crate::core::PodToEvict {
                    namespace: "shop".into(),
                    name: "web-0".into(),
                    uid: "u".into(),
                    owner: None,
                },
                budget: Some("web".into()),
            },
            grace_seconds: 5,
            deadline: Timestamp::from_millis(0),
        };
        let built = [
            NodeEvent::launch_failed(&node, &group, &LaunchFailure::Capacity { code: "X".into() }),
            NodeEvent::launch_failed(&node, &group, &LaunchFailure::Configuration { message: "m".into() }),
            NodeEvent::launch_stalled(&node, &group, 2, Duration::from_secs(180)),
            NodeEvent::drain_blocked_by_pdb(&node, &["ns/p".into()], Duration::from_secs(5), false),
            NodeEvent::drain_timed_out(&node, 3, true),
            NodeEvent::opt_out_overridden(&node, &[]),
            NodeEvent::bare_pods_evicted(&node, &[]),
            NodeEvent::give_back_pods_protected(&node, &group, &i, "ns/p"),
            NodeEvent::instance_terminated(&node, &i, Some(&i), true),
            NodeEvent::az_rebalance_suspended(&node, &group),
            NodeEvent::az_rebalance_risk(&node, &group),
            NodeEvent::pdb_overridden(&forced, Duration::from_secs(15)),
            NodeEvent::pods_held_at_deadline(&HeldAtDeadline {
                node: node.clone(),
                group: group.clone(),
                pods: vec![forced.held.clone(), HeldPod { budget: None, ..forced.held.clone() }],
            }),
        ];
        let reasons: Vec<NodeEventReason> = built.iter().map(|e| e.reason).collect();
        assert_eq!(
            reasons,
            [
                NodeEventReason::CapacityUnavailable,
                NodeEventReason::LaunchFailed,
                NodeEventReason::LaunchStalled,
                NodeEventReason::DrainBlockedByPdb,
                NodeEventReason::DrainTimedOut,
                NodeEventReason::OptOutOverridden,
                NodeEventReason::BarePodsEvicted,
                NodeEventReason::GiveBackLeftToClusterAutoscaler,
                NodeEventReason::InstanceTerminated,
                NodeEventReason::AzRebalanceSuspended,
                NodeEventReason::AzRebalanceRisk,
                NodeEventReason::PdbOverridden,
                NodeEventReason::PodsHeldAtDeadline,
            ]
        );
        assert_eq!(
            built[11].note,
            "deleted pod shop/web-0 with a 5s grace period although PodDisruptionBudget shop/web refused its \
             eviction: the instance goes in 15s (--interruption-force-at-deadline)"
        );
        assert_eq!(
            built[12].note,
            "the interruption deadline came with pods still held: shop/web-0 by PodDisruptionBudget shop/web, \
             shop/web-0 by a PodDisruptionBudget (--interruption-force-at-deadline deletes them gracefully in time)"
        );
        assert_eq!(built[2].note, "a launched none of its 2 missing instance(s) within 180s (--launch-timeout)");
        assert_eq!(built[3].note, "a PodDisruptionBudget allows no disruption of ns/p now; retrying in 5s, doubling");
        assert_eq!(built[8].note, "i-1 with decrement: gives back the node boosted for i-1, which AWS took first");
    }

    #[test]
    fn a_drain_says_why_it_starts_now() {
        let mut target = DrainTarget {
            node: "n1".into(),
            instance: "i-1".into(),
            cordon: true,
            decrement: false,
            deadline: None,
            early: false,
            gives_back: None,
        };
        let group: GroupName = "a".into();
        assert_eq!(
            NodeEvent::drain_started(&target, &group, 2).note,
            "its replacement capacity is Ready; evicting 2 pod(s)"
        );
        target.deadline = Some(Timestamp::from_millis(0));
        target.early = true;
        assert_eq!(
            NodeEvent::drain_started(&target, &group, 2).note,
            "the instance goes at 1970-01-01T00:00:00Z and its replacement capacity is not Ready yet: draining now \
             so every pod gets its grace period; evicting 2 pod(s)"
        );
    }
}
