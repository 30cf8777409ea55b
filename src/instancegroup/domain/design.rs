//! The validated, normalised form of an InstanceGroup: what the reconciler builds from. Produced
//! only by [`super::validate::validate`], so every value here has passed its checks.

use std::collections::{BTreeMap, BTreeSet};

pub use super::ownership::RoleOwner;

/// A validated `eks` InstanceGroup.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupDesign {
    /// `<clusterName>-<namespace>-<name>`: the ASG name and the prefix of everything created.
    pub prefix: String,
    /// The InstanceGroup's namespace.
    pub namespace: String,
    /// The InstanceGroup's name.
    pub name: String,
    /// The InstanceGroup's `metadata.uid`, tagged on what it owns.
    pub(crate) uid: Option<String>,
    /// EKS cluster name.
    pub(crate) cluster_name: String,
    /// ASG MinSize (and DesiredCapacity at creation).
    pub min_size: i32,
    /// ASG MaxSize.
    pub max_size: i32,
    /// AMI id.
    pub image: String,
    /// Primary instance type.
    pub instance_type: String,
    /// Subnet ids or Name tags, deduplicated and sorted.
    pub subnets: Vec<String>,
    /// Security group ids or Name tags, deduplicated and sorted.
    pub(crate) security_groups: Vec<String>,
    /// EC2 key pair.
    pub(crate) key_pair_name: Option<String>,
    /// Block devices, sorted by device name.
    pub volumes: Vec<BlockDevice>,
    /// Processes to keep suspended.
    pub suspended_processes: BTreeSet<String>,
    /// Group metrics to collect.
    pub metrics: BTreeSet<String>,
    /// What the node's bootstrap needs.
    pub(crate) bootstrap: Bootstrap,
    /// Spot market options for the launch template (from `spotPrice`).
    pub(crate) spot_price: Option<String>,
    /// User tags for the ASG.
    pub tags: BTreeMap<String, String>,
    /// Launch-template tag specifications, by resource type.
    pub(crate) tag_specifications: BTreeMap<String, BTreeMap<String, String>>,
    /// Node role and profile.
    pub role: RoleChoice,
    /// Lifecycle hooks, by name.
    pub(crate) lifecycle_hooks: BTreeMap<String, LifecycleHook>,
    /// Spot/on-demand mix.
    pub(crate) mixed_instances: Option<MixedInstances>,
    /// Capacity Rebalance on the group (`mixedInstancesPolicy.capacityRebalance`).
    pub(crate) capacity_rebalance: bool,
    /// Licence ARNs.
    pub(crate) licenses: Vec<String>,
    /// Placement.
    pub(crate) placement: Placement,
    /// IMDS settings.
    pub metadata: Metadata,
    /// Warm pool.
    pub(crate) warm_pool: Option<WarmPool>,
    /// How drifted nodes are replaced.
    pub strategy: Strategy,
    /// `normal`, `spot` or `mixed`.
    pub lifecycle: Lifecycle,
    /// Add cluster-autoscaler discovery tags.
    pub(crate) cluster_autoscaler_tags: bool,
    /// Skip the CNI policy on a created role (IRSA runs the CNI).
    pub(crate) irsa_enabled: bool,
    /// Refuse rotations: stop in `Locked` instead.
    pub(crate) lock_upgrades: bool,
}

/// One EBS block device mapping (its mount options go to [`Bootstrap::mounts`]).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct BlockDevice {
    /// Device name.
    pub(crate) device: String,
    /// EBS volume type.
    pub volume_type: String,
    /// GiB.
    pub size: Option<i32>,
    /// Provisioned IOPS.
    pub iops: Option<i32>,
    /// MiB/s.
    pub throughput: Option<i32>,
    /// Delete with the instance (default true).
    pub(crate) delete_on_termination: bool,
    /// Encrypted.
    pub(crate) encrypted: Option<bool>,
    /// Snapshot to restore.
    pub(crate) snapshot_id: Option<String>,
}

/// Format and mount a volume at boot.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct VolumeMount {
    /// `xfs` or `ext4`.
    pub(crate) file_system: String,
    /// Mount point.
    pub path: String,
    /// Write an fstab entry.
    pub(crate) persist: bool,
}

/// The OS the image runs, which picks the userdata format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OsFamily {
    /// Amazon Linux 2: `/etc/eks/bootstrap.sh`.
    AmazonLinux2,
    /// Amazon Linux 2023: nodeadm NodeConfig.
    AmazonLinux2023,
    /// Bottlerocket: TOML settings.
    Bottlerocket,
}

/// What bootstrap is told.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Bootstrap {
    /// OS family.
    pub(crate) os_family: OsFamily,
    /// Node labels, including the role, lifecycle and image labels.
    pub labels: BTreeMap<String, String>,
    /// `key=value:Effect` taints.
    pub taints: Vec<String>,
    /// Extra kubelet flags.
    pub(crate) extra_args: Option<String>,
    /// kubelet max pods.
    pub(crate) max_pods: Option<i64>,
    /// Container runtime (AL2).
    pub(crate) container_runtime: Option<String>,
    /// Scripts run before bootstrap.
    pub(crate) pre_bootstrap: Vec<String>,
    /// Scripts run after bootstrap.
    pub(crate) post_bootstrap: Vec<String>,
    /// User NodeConfig documents (AL2023).
    pub(crate) node_config: Vec<String>,
    /// Volumes to format and mount.
    pub(crate) mounts: Vec<(String, VolumeMount)>,
}

/// Bring-your-own or a created node role.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RoleChoice {
    /// Use these; never created or deleted by us.
    Existing {
        /// Role name (may be absent when only a profile is given).
        role_name: Option<String>,
        /// Instance profile name (defaults to the role name).
        profile_name: String,
    },
    /// Create (and later delete) a role and profile with this name and these policy ARNs.
    Managed {
        /// Role and profile name ([`RoleOwner::role_name`]).
        name: String,
        /// Whose it is: tagged on both, and matched in full before either is adopted or deleted.
        owner: RoleOwner,
        /// Managed policy ARNs to attach.
        policies: BTreeSet<String>,
        /// The permissions boundary the operator set (`--instancegroup-permissions-boundary`).
        boundary: Option<String>,
    },
}

/// One lifecycle hook.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LifecycleHook {
    /// `autoscaling:EC2_INSTANCE_LAUNCHING` or `…TERMINATING`.
    pub(crate) transition: String,
    /// `ABANDON` or `CONTINUE`.
    pub(crate) default_result: String,
    /// Seconds.
    pub(crate) heartbeat_timeout: i32,
    /// Notification target.
    pub(crate) notification_arn: Option<String>,
    /// Role for the target.
    pub role_arn: Option<String>,
    /// Metadata.
    pub metadata: Option<String>,
}

/// The AWS MixedInstancesPolicy, in AWS's own terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MixedInstances {
    /// `capacity-optimized`, `price-capacity-optimized`, `capacity-optimized-prioritized` or
    /// `lowest-price`.
    pub spot_allocation_strategy: String,
    /// Spot pools (lowest-price only).
    pub(crate) spot_pools: Option<i32>,
    /// On-demand base capacity.
    pub(crate) on_demand_base: i32,
    /// 100 − spotRatio.
    pub(crate) on_demand_percent_above_base: i32,
    /// Overrides: (type, weight), primary first; running types are added by the reconciler.
    pub overrides: Vec<(String, i32)>,
}

/// EC2 placement.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Placement {
    /// Availability zone.
    pub availability_zone: Option<String>,
    /// Host resource group ARN.
    pub(crate) host_resource_group_arn: Option<String>,
    /// Tenancy.
    pub(crate) tenancy: Option<String>,
}

/// IMDS settings; instance metadata tags are always disabled.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Metadata {
    /// `enabled` or `disabled`.
    pub(crate) http_endpoint: Option<String>,
    /// `required` or `optional`.
    pub(crate) http_tokens: Option<String>,
    /// Hop limit.
    pub(crate) http_put_hop_limit: Option<i32>,
}

/// Warm pool sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WarmPool {
    /// Minimum warm instances.
    pub min_size: i32,
    /// Maximum prepared capacity; `None` means the ASG's max.
    pub(crate) max_prepared: Option<i32>,
}

/// How drifted nodes are replaced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Strategy {
    /// Drain, then terminate, at most this many at a time.
    RollingUpdate {
        /// Count or percentage of the group.
        max_unavailable: MaxUnavailable,
    },
    /// Submit a custom resource and follow its status.
    Crd(CrdPlan),
}

impl Strategy {
    /// The name shown in status and the printer column.
    pub fn name(&self) -> &'static str {
        match self {
            Strategy::RollingUpdate { .. } => "rollingUpdate",
            Strategy::Crd(_) => "crd",
        }
    }
}

/// `maxUnavailable`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MaxUnavailable {
    /// This many instances.
    Count(u32),
    /// This percentage of the group, rounded up.
    Percent(u32),
}

/// The `crd` strategy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CrdPlan {
    /// `<plural>` or `<plural>.<group>`.
    pub crd_name: String,
    /// The templated resource.
    pub template: String,
    /// Dotted path to the status string.
    pub(crate) status_path: String,
    /// Done when the status equals this.
    pub success: String,
    /// Failed when the status equals this.
    pub failure: String,
    /// What to do with a still-running resource.
    pub concurrency: Concurrency,
    /// Retries; `None` is forever.
    pub max_retries: Option<u32>,
}

/// `concurrencyPolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Concurrency {
    /// Wait for running resources.
    Forbid,
    /// Submit anyway.
    Allow,
    /// Delete running resources for older configurations.
    Replace,
}

/// `status.lifecycle`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lifecycle {
    /// On-demand only.
    Normal,
    /// Spot through market options.
    Spot,
    /// A mixed-instances policy with spot above the base.
    Mixed,
}

impl Lifecycle {
    /// The status and label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Lifecycle::Normal => "normal",
            Lifecycle::Spot => "spot",
            Lifecycle::Mixed => "mixed",
        }
    }
}
