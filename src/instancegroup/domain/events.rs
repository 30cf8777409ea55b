//! Why the InstanceGroup half writes an Event on an InstanceGroup. Each reason has one severity,
//! so the reconciler names only the reason and the message.

/// The `reason` of an Event about an InstanceGroup, as `kubectl describe instancegroup` shows it
/// (the same words keikoproj instance-manager uses where it has one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GroupEventReason {
    /// The spec cannot be reconciled as it is.
    InvalidSpec,
    /// The spec asks for something this reconciler does not support.
    Unsupported,
    /// A step failed on something that passes (throttling, a conflict); retried soon.
    TransientError,
    /// A step failed, or a resource was left as it is because another owns it.
    ReconcileFailed,
    /// A new launch template version, for the fields that drifted.
    LaunchTemplateUpdated,
    /// The Auto Scaling Group was created.
    InstanceGroupCreated,
    /// Drifted instances are marked for rotation.
    RotatingNodes,
    /// The Auto Scaling Group is being deleted.
    InstanceGroupDeleting,
    /// Everything the InstanceGroup made is gone.
    InstanceGroupDeleted,
    /// The `crd` upgrade strategy's resource was submitted.
    UpgradeSubmitted,
    /// A `crd` resource for an older configuration was deleted.
    UpgradeReplaced,
    /// A `crd` resource failed and is retried.
    UpgradeRetried,
    /// The `crd` upgrade failed past its retries.
    InstanceGroupUpgradeFailed,
    /// An EKS managed node group's sizes, labels, taints or tags were changed to the spec.
    NodeGroupUpdated,
    /// An EKS managed node group is moving to another Kubernetes version or AMI release; EKS
    /// replaces its nodes.
    NodeGroupUpgrading,
}

impl GroupEventReason {
    /// The Event's `reason`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::InvalidSpec => "InvalidSpec",
            Self::Unsupported => "Unsupported",
            Self::TransientError => "TransientError",
            Self::ReconcileFailed => "ReconcileFailed",
            Self::LaunchTemplateUpdated => "LaunchTemplateUpdated",
            Self::InstanceGroupCreated => "InstanceGroupCreated",
            Self::RotatingNodes => "RotatingNodes",
            Self::InstanceGroupDeleting => "InstanceGroupDeleting",
            Self::InstanceGroupDeleted => "InstanceGroupDeleted",
            Self::UpgradeSubmitted => "UpgradeSubmitted",
            Self::UpgradeReplaced => "UpgradeReplaced",
            Self::UpgradeRetried => "UpgradeRetried",
            Self::InstanceGroupUpgradeFailed => "InstanceGroupUpgradeFailed",
            Self::NodeGroupUpdated => "NodeGroupUpdated",
            Self::NodeGroupUpgrading => "NodeGroupUpgrading",
        }
    }

    /// Whether the Event is a Warning (trouble worth a look) rather than Normal (progress).
    pub(crate) fn is_warning(self) -> bool {
        matches!(
            self,
            Self::InvalidSpec
                | Self::Unsupported
                | Self::TransientError
                | Self::ReconcileFailed
                | Self::UpgradeRetried
                | Self::InstanceGroupUpgradeFailed
        )
    }
}
