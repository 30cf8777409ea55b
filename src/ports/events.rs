//! Kubernetes Events the booster tells about a node.

use std::future::Future;

use crate::core::NodeName;

/// Whether an Event reports progress or trouble.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventSeverity {
    /// Progress.
    Normal,
    /// Trouble worth a look.
    Warning,
}

/// Why the booster writes an Event on a Node. Each reason has one action and one severity, so a
/// worker names only the reason and the note.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum NodeEventReason {
    /// Desired capacity raised for the node's group.
    BoostRequested,
    /// The boost waits (CA backoff, group at its max, budget, …).
    BoostHeld,
    /// The boost gave up (replacements not Ready in time, or too old).
    BoostExpired,
    /// The boost's missing nodes moved to a fallback group.
    BoostFellBack,
    /// A group the failing group's fallback tag names may not take its nodes.
    FallbackRefused,
    /// Every group the boost may use failed to launch its nodes: they are parked until a retry.
    FallbackExhausted,
    /// A fallback node goes back to its own group, which launches again.
    ReturningToSpot,
    /// The group could not launch a replacement for want of capacity.
    CapacityUnavailable,
    /// The group could not launch a replacement: a configuration error.
    LaunchFailed,
    /// The group launched nothing within `--launch-timeout`.
    LaunchStalled,
    /// A voluntary drain waits for a pod that opted out.
    DrainDeferred,
    /// The drain started.
    DrainStarted,
    /// A PodDisruptionBudget refused an eviction.
    DrainBlockedByPdb,
    /// The drain passed `--drain-timeout`.
    DrainTimedOut,
    /// A pod a PodDisruptionBudget still refused was deleted gracefully before its instance went
    /// (`--interruption-force-at-deadline`).
    PdbOverridden,
    /// The notice's deadline came with pods PodDisruptionBudgets still held on the node.
    PodsHeldAtDeadline,
    /// An interruption evicts pods that opted out.
    OptOutOverridden,
    /// Pods no controller recreates are evicted.
    BarePodsEvicted,
    /// No node could be drained to give a boost back.
    GiveBackLeftToClusterAutoscaler,
    /// The drained instance was terminated.
    InstanceTerminated,
    /// AZRebalance suspended around a termination with decrement.
    AzRebalanceSuspended,
    /// A termination with decrement in a group where AZRebalance may relaunch it.
    AzRebalanceRisk,
    /// A rebalance recommendation lapsed on a node someone else had cordoned before it: the
    /// cordon stays.
    CordonKept,
}

impl NodeEventReason {
    /// Every reason.
    pub const ALL: [NodeEventReason; 23] = [
        Self::BoostRequested,
        Self::BoostHeld,
        Self::BoostExpired,
        Self::BoostFellBack,
        Self::FallbackRefused,
        Self::FallbackExhausted,
        Self::ReturningToSpot,
        Self::CapacityUnavailable,
        Self::LaunchFailed,
        Self::LaunchStalled,
        Self::DrainDeferred,
        Self::DrainStarted,
        Self::DrainBlockedByPdb,
        Self::DrainTimedOut,
        Self::PdbOverridden,
        Self::PodsHeldAtDeadline,
        Self::OptOutOverridden,
        Self::BarePodsEvicted,
        Self::GiveBackLeftToClusterAutoscaler,
        Self::InstanceTerminated,
        Self::AzRebalanceSuspended,
        Self::AzRebalanceRisk,
        Self::CordonKept,
    ];

    /// The Event's `reason`, PascalCase as `kubectl describe node` shows it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::BoostRequested => "BoostRequested",
            Self::BoostHeld => "BoostHeld",
            Self::BoostExpired => "BoostExpired",
            Self::BoostFellBack => "BoostFellBack",
            Self::FallbackRefused => "FallbackRefused",
            Self::FallbackExhausted => "FallbackExhausted",
            Self::ReturningToSpot => "ReturningToSpot",
            Self::CapacityUnavailable => "CapacityUnavailable",
            Self::LaunchFailed => "LaunchFailed",
            Self::LaunchStalled => "LaunchStalled",
            Self::DrainDeferred => "DrainDeferred",
            Self::DrainStarted => "DrainStarted",
            Self::DrainBlockedByPdb => "DrainBlockedByPDB",
            Self::DrainTimedOut => "DrainTimedOut",
            Self::PdbOverridden => "PDBOverridden",
            Self::PodsHeldAtDeadline => "PodsHeldAtDeadline",
            Self::OptOutOverridden => "OptOutOverridden",
            Self::BarePodsEvicted => "BarePodsEvicted",
            Self::GiveBackLeftToClusterAutoscaler => "GiveBackLeftToClusterAutoscaler",
            Self::InstanceTerminated => "InstanceTerminated",
            Self::AzRebalanceSuspended => "AZRebalanceSuspended",
            Self::AzRebalanceRisk => "AZRebalanceRisk",
            Self::CordonKept => "CordonKept",
        }
    }

    /// The Event's `action`, PascalCase.
    pub fn action(self) -> &'static str {
        match self {
            Self::BoostRequested
            | Self::BoostHeld
            | Self::BoostFellBack
            | Self::FallbackRefused
            | Self::FallbackExhausted
            | Self::ReturningToSpot => "SetDesiredCapacity",
            Self::BoostExpired => "Boost",
            Self::CapacityUnavailable | Self::LaunchFailed | Self::LaunchStalled => "Launch",
            Self::DrainBlockedByPdb => "Evict",
            Self::PdbOverridden => "Delete",
            Self::DrainDeferred
            | Self::DrainStarted
            | Self::DrainTimedOut
            | Self::PodsHeldAtDeadline
            | Self::OptOutOverridden
            | Self::BarePodsEvicted
            | Self::GiveBackLeftToClusterAutoscaler => "Drain",
            Self::InstanceTerminated | Self::AzRebalanceSuspended | Self::AzRebalanceRisk => "Terminate",
            Self::CordonKept => "Uncordon",
        }
    }

    /// Progress or trouble.
    pub fn severity(self) -> EventSeverity {
        match self {
            Self::BoostRequested
            | Self::DrainDeferred
            | Self::DrainStarted
            | Self::InstanceTerminated
            | Self::AzRebalanceSuspended
            | Self::ReturningToSpot
            | Self::CordonKept => EventSeverity::Normal,
            _ => EventSeverity::Warning,
        }
    }

    /// How `simulate`'s timeline names it.
    pub fn timeline_label(self) -> &'static str {
        match self {
            Self::BoostRequested => "boost",
            Self::BoostHeld => "boost held",
            Self::DrainStarted => "drain started",
            Self::DrainBlockedByPdb => "evictions blocked by PDB",
            Self::DrainTimedOut => "drain timed out",
            Self::PdbOverridden => "budget overridden at deadline",
            Self::PodsHeldAtDeadline => "pods held at deadline",
            Self::InstanceTerminated => "terminated",
            other => other.as_str(),
        }
    }
}

/// A decision the booster reports as a Kubernetes Event on a Node, so `kubectl describe node`
/// tells the story.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeEvent {
    /// The node the Event is about.
    pub node: NodeName,
    /// Why; it fixes the Event's action and severity.
    pub reason: NodeEventReason,
    /// What happened, for people.
    pub note: String,
}

/// Where Events go. Publishing is best effort: a lost Event never stops a decision.
pub trait EventSink: Send + Sync {
    /// Publishes one Event.
    fn publish(&self, event: NodeEvent) -> impl Future<Output = ()> + Send;
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    #[test]
    fn every_reason_has_its_own_pascal_case_name_and_label() {
        let names: BTreeSet<&str> = NodeEventReason::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(names.len(), NodeEventReason::ALL.len());
        assert!(names.iter().all(|n| n.chars().next().is_some_and(char::is_uppercase) && !n.contains(' ')));
        let labels: BTreeSet<&str> = NodeEventReason::ALL.iter().map(|r| r.timeline_label()).collect();
        assert_eq!(labels.len(), NodeEventReason::ALL.len(), "simulate's timeline tells them apart");
        let warnings = NodeEventReason::ALL.iter().filter(|r| r.severity() == EventSeverity::Warning).count();
        assert_eq!(warnings, 16);
    }
}
