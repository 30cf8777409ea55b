//! The booster's writes as values: what each one changes and on what ([`Write`]), and how its
//! answer reads whatever port made it ([`Made`], [`Answer`]). The executor (`workers::execute`) is
//! the one place a write is made: it counts and classifies every answer by the kind named here, so
//! a new kind of write is a variant here and a call there.

use super::{GroupName, InstanceId, NodeName, PodToEvict, WriteAnswer};

/// One write, on what it changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Write {
    /// Set `spec.unschedulable` (and exclude the node from external load balancers).
    Cordon(NodeName),
    /// Clear the booster's cordon and its load-balancer label.
    Uncordon(NodeName),
    /// Remove only the booster's load-balancer exclusion.
    ReadmitToLoadBalancers(NodeName),
    /// Put Cluster Autoscaler's scale-down protection on a replacement node.
    Protect(NodeName),
    /// Lift the protection the booster put on.
    Unprotect(NodeName),
    /// Evict one pod through the Eviction API, on its UID.
    Evict(PodToEvict),
    /// Delete one pod gracefully, its budget notwithstanding, as its instance's deadline nears.
    DeleteAtDeadline {
        /// The pod.
        pod: PodToEvict,
        /// Its grace period.
        grace_seconds: u32,
    },
    /// Terminate an instance through Auto Scaling.
    Terminate {
        /// The instance.
        instance: InstanceId,
        /// Whether desired capacity goes down with it.
        decrement: bool,
    },
    /// Suspend `AZRebalance` on a group, tagged by this cluster.
    SuspendAzRebalance(GroupName),
    /// Resume the `AZRebalance` this cluster's booster suspended.
    ResumeAzRebalance(GroupName),
}

impl Write {
    /// Its kind, for metrics and logs.
    pub fn kind(&self) -> WriteKind {
        match self {
            Write::Cordon(_) => WriteKind::Cordon,
            Write::Uncordon(_) => WriteKind::Uncordon,
            Write::ReadmitToLoadBalancers(_) => WriteKind::ReadmitToLoadBalancers,
            Write::Protect(_) => WriteKind::Protect,
            Write::Unprotect(_) => WriteKind::Unprotect,
            Write::Evict(_) => WriteKind::Evict,
            Write::DeleteAtDeadline { .. } => WriteKind::DeleteAtDeadline,
            Write::Terminate { decrement: true, .. } => WriteKind::TerminateWithDecrement,
            Write::Terminate { decrement: false, .. } => WriteKind::Terminate,
            Write::SuspendAzRebalance(_) => WriteKind::SuspendProcess,
            Write::ResumeAzRebalance(_) => WriteKind::ResumeProcess,
        }
    }
}

/// The kinds of write, one label value each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum WriteKind {
    /// Desired capacity raised behind its guard (a boost, a fallback move).
    RaiseDesired,
    /// Desired capacity lowered by nodes that will never launch.
    LowerUnlaunched,
    /// See [`Write::Terminate`], keeping the capacity.
    Terminate,
    /// See [`Write::Terminate`], giving the capacity back.
    TerminateWithDecrement,
    /// See [`Write::Cordon`].
    Cordon,
    /// See [`Write::Uncordon`].
    Uncordon,
    /// See [`Write::ReadmitToLoadBalancers`].
    ReadmitToLoadBalancers,
    /// See [`Write::Protect`].
    Protect,
    /// See [`Write::Unprotect`].
    Unprotect,
    /// See [`Write::Evict`].
    Evict,
    /// See [`Write::DeleteAtDeadline`].
    DeleteAtDeadline,
    /// See [`Write::SuspendAzRebalance`].
    SuspendProcess,
    /// See [`Write::ResumeAzRebalance`].
    ResumeProcess,
}

impl WriteKind {
    /// Every kind, in label order.
    pub const ALL: [WriteKind; 13] = [
        WriteKind::RaiseDesired,
        WriteKind::LowerUnlaunched,
        WriteKind::Terminate,
        WriteKind::TerminateWithDecrement,
        WriteKind::Cordon,
        WriteKind::Uncordon,
        WriteKind::ReadmitToLoadBalancers,
        WriteKind::Protect,
        WriteKind::Unprotect,
        WriteKind::Evict,
        WriteKind::DeleteAtDeadline,
        WriteKind::SuspendProcess,
        WriteKind::ResumeProcess,
    ];

    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            WriteKind::RaiseDesired => "raise_desired",
            WriteKind::LowerUnlaunched => "lower_unlaunched",
            WriteKind::Terminate => "terminate",
            WriteKind::TerminateWithDecrement => "terminate_with_decrement",
            WriteKind::Cordon => "cordon",
            WriteKind::Uncordon => "uncordon",
            WriteKind::ReadmitToLoadBalancers => "readmit_to_load_balancers",
            WriteKind::Protect => "protect",
            WriteKind::Unprotect => "unprotect",
            WriteKind::Evict => "evict",
            WriteKind::DeleteAtDeadline => "delete_at_deadline",
            WriteKind::SuspendProcess => "suspend_process",
            WriteKind::ResumeProcess => "resume_process",
        }
    }
}

/// What a write that was answered did, whatever port made it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Made {
    /// It applied.
    Done,
    /// The pod is gone, or is another pod now: an eviction with nothing left to do.
    Gone,
    /// A PodDisruptionBudget refused the eviction (named, when the refusal says which).
    Refused {
        /// The budget.
        budget: Option<String>,
    },
    /// Terminated; `decremented` when desired capacity went down with it.
    Terminated {
        /// Whether the decrement was sent.
        decremented: bool,
    },
    /// The instance was already gone, or in no group any more.
    AlreadyGone,
    /// `--dry-run`: nothing was sent.
    DryRun,
}

/// How a write ended: answered, or failed with what the failure may have left behind.
pub type Answer = Result<Made, WriteFailed>;

/// A write with no answer to act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteFailed {
    /// What failed, as text for logs and Events.
    pub message: String,
    /// Whether it may have applied anyway (a timeout, a server error after the request went out).
    pub may_have_applied: bool,
}

impl std::fmt::Display for WriteFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// What the ledger and the metrics make of an answer: applied (a refusal or a dry run is an
/// answer, not an application), not made, or unknown.
pub fn classify(answer: &Answer) -> WriteAnswer {
    match answer {
        Ok(Made::Done | Made::Gone | Made::Terminated { .. } | Made::AlreadyGone) => WriteAnswer::Applied,
        Ok(Made::Refused { .. } | Made::DryRun) => WriteAnswer::NotMade,
        Err(WriteFailed { may_have_applied: true, .. }) => WriteAnswer::Unknown,
        Err(_) => WriteAnswer::NotMade,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_its_own_label_and_a_termination_names_its_decrement() {
        let labels: std::collections::BTreeSet<&str> = WriteKind::ALL.iter().map(|k| k.as_str()).collect();
        assert_eq!(labels.len(), WriteKind::ALL.len());
        let terminate = |decrement| Write::Terminate { instance: "i-1".into(), decrement }.kind();
        assert_eq!((terminate(true), terminate(false)), (WriteKind::TerminateWithDecrement, WriteKind::Terminate));
    }

    #[test]
    fn a_refusal_is_not_made_and_a_failure_that_may_have_applied_is_unknown() {
        let failed = |may_have_applied| Err(WriteFailed { message: "x".into(), may_have_applied });
        assert_eq!(classify(&Ok(Made::Done)), WriteAnswer::Applied);
        assert_eq!(classify(&Ok(Made::AlreadyGone)), WriteAnswer::Applied);
        assert_eq!(classify(&Ok(Made::Refused { budget: None })), WriteAnswer::NotMade);
        assert_eq!(classify(&Ok(Made::DryRun)), WriteAnswer::NotMade);
        assert_eq!(classify(&failed(true)), WriteAnswer::Unknown);
        assert_eq!(classify(&failed(false)), WriteAnswer::NotMade);
    }
}
