//! Auto Scaling and EC2 as the booster sees them: groups, guarded writes, terminations, and how a
//! call failed. Implemented on the SDK in `aws/`.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;

use serde::Serialize;
use thiserror::Error;

use super::BoxError;
use crate::core::{
    CaGroupView, Group, GroupName, InstanceFacts, InstanceId, LaunchOptions, RebalancePolicy, Resources,
    ScalingActivity, Timestamp,
};

/// How an AWS call failed, as far as retrying and alerting care.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FailureKind {
    /// Rate limited (`Throttling`, `RequestLimitExceeded`, …): retry later.
    Throttled,
    /// AWS refused the request as invalid.
    Validation,
    /// Credentials or permissions.
    Auth,
    /// The service did not answer, or answered 5xx.
    Unavailable,
    /// Anything else.
    Other,
}

impl FailureKind {
    /// A metric label / Event reason fragment.
    pub fn as_str(self) -> &'static str {
        match self {
            FailureKind::Throttled => "throttled",
            FailureKind::Validation => "validation",
            FailureKind::Auth => "auth",
            FailureKind::Unavailable => "unavailable",
            FailureKind::Other => "other",
        }
    }
}

/// What went wrong in one AWS call.
#[derive(Debug, Error)]
#[error("{kind:?}{}", code.as_deref().map(|c| format!(" ({c})")).unwrap_or_default())]
pub struct AwsFailure {
    /// The service's error code, when it sent one.
    pub code: Option<String>,
    /// The service's error message, when it sent one.
    pub message: Option<String>,
    /// Its kind.
    pub kind: FailureKind,
    /// The SDK's error.
    #[source]
    pub source: BoxError,
}

/// A failed Auto Scaling or EC2 operation, named after the operation.
#[derive(Debug, Error)]
pub enum AwsError {
    /// `DescribeAutoScalingGroups`.
    #[error("DescribeAutoScalingGroups failed")]
    DescribeGroups(#[source] AwsFailure),
    /// `SetDesiredCapacity`.
    #[error("SetDesiredCapacity on {group} failed")]
    SetDesiredCapacity {
        /// The group.
        group: GroupName,
        /// Why.
        #[source]
        failure: AwsFailure,
    },
    /// `TerminateInstanceInAutoScalingGroup`.
    #[error("TerminateInstanceInAutoScalingGroup for {instance} failed")]
    TerminateInstance {
        /// The instance.
        instance: InstanceId,
        /// Why.
        #[source]
        failure: AwsFailure,
    },
    /// `SuspendProcesses` or `ResumeProcesses` of `AZRebalance`, with its recording tag.
    #[error("{operation} AZRebalance on {group} failed")]
    AzRebalance {
        /// `SuspendProcesses` or `ResumeProcesses`.
        operation: &'static str,
        /// The group.
        group: GroupName,
        /// Why.
        #[source]
        failure: AwsFailure,
    },
    /// `DescribeAutoScalingInstances`.
    #[error("DescribeAutoScalingInstances failed")]
    DescribeAutoScalingInstances(#[source] AwsFailure),
    /// EC2 `DescribeInstances`.
    #[error("DescribeInstances failed")]
    DescribeInstances(#[source] AwsFailure),
    /// EC2 `DescribeInstanceStatus`.
    #[error("DescribeInstanceStatus failed")]
    DescribeInstanceStatus(#[source] AwsFailure),
    /// EC2 `DescribeSpotInstanceRequests`.
    #[error("DescribeSpotInstanceRequests failed")]
    DescribeSpotInstanceRequests(#[source] AwsFailure),
    /// `DescribeScalingActivities`.
    #[error("DescribeScalingActivities of {group} failed")]
    DescribeScalingActivities {
        /// The group.
        group: GroupName,
        /// Why.
        #[source]
        failure: AwsFailure,
    },
    /// A write named a group AWS does not know (checked before the call: moto answers 500).
    #[error("no Auto Scaling Group named {0}")]
    UnknownGroup(GroupName),
    /// A write left to the leader: this replica does not hold the lease (nothing was sent).
    #[error("{operation} left to the leader: this replica does not hold the lease")]
    NotLeader {
        /// The operation not made.
        operation: &'static str,
    },
    /// A desired capacity outside the group's bounds (checked before the call).
    #[error("desired capacity {requested} for {group} is outside its bounds {min}..={max}")]
    OutOfRange {
        /// The group.
        group: GroupName,
        /// What was asked.
        requested: u32,
        /// MinSize.
        min: u32,
        /// MaxSize.
        max: u32,
    },
}

impl AwsError {
    /// A bounded label for metrics and Event reasons.
    pub fn category(&self) -> &'static str {
        match self {
            AwsError::DescribeGroups(f)
            | AwsError::DescribeAutoScalingInstances(f)
            | AwsError::DescribeInstances(f)
            | AwsError::DescribeInstanceStatus(f)
            | AwsError::DescribeSpotInstanceRequests(f)
            | AwsError::DescribeScalingActivities { failure: f, .. }
            | AwsError::SetDesiredCapacity { failure: f, .. }
            | AwsError::TerminateInstance { failure: f, .. }
            | AwsError::AzRebalance { failure: f, .. } => f.kind.as_str(),
            AwsError::UnknownGroup(_) => "unknown-group",
            AwsError::NotLeader { .. } => "not-leader",
            AwsError::OutOfRange { .. } => "out-of-range",
        }
    }

    /// Whether the write may have gone through though its answer was an error (a 5xx, a lost
    /// connection, a timeout): the caller re-reads before re-planning.
    pub(crate) fn may_have_applied(&self) -> bool {
        matches!(self, AwsError::SetDesiredCapacity { failure, .. } | AwsError::TerminateInstance { failure, .. }
            if matches!(failure.kind, FailureKind::Unavailable | FailureKind::Other))
    }
}

/// An instance as its group reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GroupInstance {
    /// Its id.
    pub id: InstanceId,
    /// `Pending`, `InService`, `Terminating`, …: a terminating or detaching instance is no longer
    /// a member.
    pub lifecycle_state: String,
}

/// An Auto Scaling Group as described.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GroupDescription {
    /// Name.
    pub name: GroupName,
    /// MinSize.
    pub min: u32,
    /// MaxSize.
    pub max: u32,
    /// DesiredCapacity.
    pub desired: u32,
    /// Its instances.
    pub instances: Vec<GroupInstance>,
    /// Capacity Rebalance is on: the ASG replaces rebalance-recommended instances itself.
    pub capacity_rebalance: bool,
    /// `AZRebalance` is not among its suspended processes: after a termination with decrement
    /// unbalances its Availability Zones, Auto Scaling may launch and terminate instances of its
    /// own choosing to even them out, and those terminations drain nothing.
    pub az_rebalance: bool,
    /// Its tags.
    pub tags: BTreeMap<String, String>,
    /// The instance types and Availability Zones it launches in.
    pub launch: LaunchOptions,
}

/// The ASG tag naming the cluster an InstanceGroup's group was made for (instance-manager's
/// ownership tag; tenants' own tags may not set it).
pub const INSTANCE_GROUP_CLUSTER_TAG: &str = "instancegroups.keikoproj.io/ClusterName";

/// The ASG tag naming the namespace of the InstanceGroup a group was made for (instance-manager's
/// ownership tag; tenants' own tags may not set it).
pub const INSTANCE_GROUP_NAMESPACE_TAG: &str = "instancegroups.keikoproj.io/Namespace";

/// The ASG tag choosing how the group answers rebalance recommendations: `replace`, `standby`
/// or `auto` (see `--rebalance-policy`).
pub const REBALANCE_POLICY_TAG: &str = "spots-booster.io/rebalance-policy";

/// The tag EKS puts on the Auto Scaling group behind a managed node group, naming the node group.
pub const EKS_NODE_GROUP_TAG: &str = "eks:nodegroup-name";

/// The ASG tag naming, comma-separated and in order, where a boost's missing nodes go when the
/// group has no capacity.
pub const FALLBACK_GROUPS_TAG: &str = "spots-booster.io/fallback-groups";

impl GroupDescription {
    /// The core's view of this group, within `scope`.
    pub(crate) fn to_core(
        &self,
        node_allocatable: Option<Resources>,
        ca: Option<CaGroupView>,
        scope: &GroupScope,
    ) -> Group {
        Group {
            foreign: !scope.is_this_clusters(&self.tags),
            excluded: !scope.selects(&self.tags),
            eks_node_group: self.tags.get(EKS_NODE_GROUP_TAG).cloned(),
            fallbacks: self.fallbacks(),
            tenant_namespace: self.tags.get(INSTANCE_GROUP_NAMESPACE_TAG).cloned(),
            name: self.name.clone(),
            min: self.min,
            max: self.max,
            desired: self.desired,
            node_allocatable,
            ca,
            capacity_rebalance: self.capacity_rebalance,
            az_rebalance: self.az_rebalance,
            members: Some(self.members().cloned().collect()),
            launch: self.launch.clone(),
            rebalance_policy: self.rebalance_policy(),
        }
    }

    /// The groups its [`FALLBACK_GROUPS_TAG`] names, in order.
    pub fn fallbacks(&self) -> Vec<GroupName> {
        self.tags
            .get(FALLBACK_GROUPS_TAG)
            .map(|v| v.split(',').map(str::trim).filter(|g| !g.is_empty()).map(GroupName::from).collect())
            .unwrap_or_default()
    }

    /// How its [`REBALANCE_POLICY_TAG`] says it answers rebalance recommendations; `None` when it
    /// has no such tag. A value that names no policy is refused with a warning naming the group
    /// and the tag, and the group answers as `replace` (what it did before the tag existed).
    pub fn rebalance_policy(&self) -> Option<RebalancePolicy> {
        let value = self.tags.get(REBALANCE_POLICY_TAG)?;
        match value.parse() {
            Ok(policy) => Some(policy),
            Err(why) => {
                tracing::warn!(group = %self.name, tag = REBALANCE_POLICY_TAG, "{why}: the group answers as replace");
                Some(RebalancePolicy::Replace)
            }
        }
    }

    /// The instances that belong to the group: every listed one that is not terminating nor
    /// detaching (those are leaving, whoever asked).
    pub fn members(&self) -> impl Iterator<Item = &InstanceId> {
        self.instances
            .iter()
            .filter(|i| !i.lifecycle_state.starts_with("Terminat") && !i.lifecycle_state.starts_with("Detach"))
            .map(|i| &i.id)
    }
}

/// The tag on a group whose `AZRebalance` process the booster suspended (`--suspend-az-rebalance`).
pub const AZ_REBALANCE_SUSPENDED_TAG: &str = "spots-booster.io/suspended-az-rebalance";

/// Which Auto Scaling groups this daemon serves: this cluster's, as their tags name it, and among
/// those the ones `--asg-tag-filter` selects. Tags are written only by whoever may write Auto
/// Scaling groups, never by a tenant or a kubelet; nothing of a group outside the scope is
/// touched, whatever a Node, an Event or another group's tag names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupScope {
    cluster: String,
    selection: Vec<TagFilter>,
}

impl GroupScope {
    /// This cluster's groups (`--cluster-name`), all of them selected.
    pub fn new(cluster: impl Into<String>) -> Self {
        GroupScope { cluster: cluster.into(), selection: Vec::new() }
    }

    /// The same scope, selecting only the groups whose tags match every filter.
    pub(crate) fn selecting(&self, selection: &[TagFilter]) -> Self {
        GroupScope { cluster: self.cluster.clone(), selection: selection.to_vec() }
    }

    /// Whether a tag names this cluster as the group's: `kubernetes.io/cluster/<name>` (the
    /// cloud provider's), `k8s.io/cluster-autoscaler/<name>` (Cluster Autoscaler's discovery),
    /// `eks:cluster-name=<name>` (EKS managed node groups) or
    /// `instancegroups.keikoproj.io/ClusterName=<name>` (InstanceGroups'): the same tags the IAM
    /// policy (`manifests/iam-policy.json`) lets the role write to.
    pub fn is_this_clusters(&self, tags: &BTreeMap<String, String>) -> bool {
        let named = |prefix: &str| tags.keys().any(|k| k.strip_prefix(prefix) == Some(self.cluster.as_str()));
        let valued = |key: &str| tags.get(key).is_some_and(|c| *c == self.cluster);
        named("kubernetes.io/cluster/")
            || named("k8s.io/cluster-autoscaler/")
            || valued("eks:cluster-name")
            || valued(INSTANCE_GROUP_CLUSTER_TAG)
    }

    /// The cluster's name (`--cluster-name`).
    pub(crate) fn cluster(&self) -> &str {
        &self.cluster
    }

    /// Whether `--asg-tag-filter` selects a group with these tags.
    pub(crate) fn selects(&self, tags: &BTreeMap<String, String>) -> bool {
        self.selection.iter().all(|f| f.matches(tags))
    }
}

/// A tag filter for group discovery: `key` alone matches any value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TagFilter {
    /// Tag key.
    pub key: String,
    /// Tag value, if it must match.
    pub value: Option<String>,
}

impl TagFilter {
    /// Whether `tags` carry this key (with this value, when one is given).
    pub(crate) fn matches(&self, tags: &BTreeMap<String, String>) -> bool {
        tags.get(&self.key).is_some_and(|v| self.value.as_ref().is_none_or(|want| want == v))
    }
}

impl std::str::FromStr for TagFilter {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (key, value) = match s.split_once('=') {
            Some((k, v)) => (k.trim(), Some(v.trim().to_string())),
            None => (s.trim(), None),
        };
        if key.is_empty() {
            return Err(format!("{s:?}: expected KEY or KEY=VALUE"));
        }
        Ok(TagFilter { key: key.to_string(), value })
    }
}

/// One guarded raise of desired capacity: written only if the group's live desired still equals
/// `expected` (what the plan started from) and `to` is within its bounds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DesiredWrite {
    /// The group.
    pub group: GroupName,
    /// Desired capacity the plan was made from.
    pub expected: u32,
    /// Desired capacity to set.
    pub to: u32,
}

/// What a guarded write must do once its group has been re-read.
#[derive(Debug)]
pub enum Guard {
    /// Send it: the group is unchanged since the plan and the new value is within bounds.
    Send {
        /// Live desired capacity.
        from: u32,
    },
    /// Settled without a write: raced, out of range, or no such group.
    Settled(Result<WriteOutcome, AwsError>),
}

impl DesiredWrite {
    /// The guard every implementation of [`AutoScaling::raise_desired`] applies to the group's
    /// live description (`None`: AWS does not know the group).
    pub fn guard(&self, live: Option<&GroupDescription>) -> Guard {
        match live {
            None => Guard::Settled(Err(AwsError::UnknownGroup(self.group.clone()))),
            Some(g) if g.desired != self.expected || self.to <= g.desired => {
                Guard::Settled(Ok(WriteOutcome::Raced { live: g.desired }))
            }
            Some(g) if self.to > g.max || self.to < g.min => Guard::Settled(Err(AwsError::OutOfRange {
                group: self.group.clone(),
                requested: self.to,
                min: g.min,
                max: g.max,
            })),
            Some(g) => Guard::Send { from: g.desired },
        }
    }

    /// The guard of [`AutoScaling::lower_unlaunched`]: sent only if the group is unchanged since
    /// the plan and lists no more instances than the lowered value, so Auto Scaling has none to
    /// terminate for it; otherwise settled as raced (not written).
    pub fn unlaunched_guard(&self, live: Option<&GroupDescription>) -> Guard {
        match live {
            None => Guard::Settled(Err(AwsError::UnknownGroup(self.group.clone()))),
            Some(g)
                if g.desired != self.expected
                    || self.to >= g.desired
                    || self.to < g.min
                    || u32::try_from(g.members().count()).unwrap_or(u32::MAX) > self.to =>
            {
                Guard::Settled(Ok(WriteOutcome::Raced { live: g.desired }))
            }
            Some(g) => Guard::Send { from: g.desired },
        }
    }
}

/// How a guarded write ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "outcome")]
pub enum WriteOutcome {
    /// Sent.
    Written {
        /// Live desired before.
        from: u32,
        /// Desired after.
        to: u32,
    },
    /// `--dry-run`: logged and counted, not sent.
    DryRun {
        /// Live desired.
        from: u32,
        /// What would have been set.
        to: u32,
    },
    /// Someone else changed desired since the plan was made (Cluster Autoscaler, a human): not
    /// written; the caller re-plans from `live`.
    Raced {
        /// Live desired now.
        live: u32,
    },
}

/// How terminating a drained instance ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "outcome")]
pub enum TerminateOutcome {
    /// Terminated; `decremented` when desired capacity went down with it.
    Terminated {
        /// Whether `ShouldDecrementDesiredCapacity` was sent.
        decremented: bool,
    },
    /// Already gone, or no longer in a group: nothing to do.
    AlreadyGone,
    /// `--dry-run`.
    DryRun,
}

/// Each guarded write's group and how it ended.
pub(crate) type WriteOutcomes = Vec<(GroupName, Result<WriteOutcome, AwsError>)>;

/// Auto Scaling: the only writes the booster makes to AWS.
pub trait AutoScaling: Send + Sync {
    /// Describes groups by name, batched to 50 names per call and paginated; unknown names are
    /// simply absent from the answer.
    fn describe_groups(
        &self,
        names: &[GroupName],
    ) -> impl Future<Output = Result<Vec<GroupDescription>, AwsError>> + Send;

    /// Describes every group whose tags match all `filters`.
    fn discover_groups(
        &self,
        filters: &[TagFilter],
    ) -> impl Future<Output = Result<Vec<GroupDescription>, AwsError>> + Send;

    /// Guarded raises: one batched re-read of every named group, then one `SetDesiredCapacity`
    /// (`HonorCooldown=false`) per write whose group is unchanged. A write lower than the live
    /// value or beyond the group's bounds is never sent.
    fn raise_desired(&self, writes: &[DesiredWrite]) -> impl Future<Output = Result<WriteOutcomes, AwsError>> + Send;

    /// Lowers desired capacity by nodes that never launched (their boost moved to a fallback):
    /// one batched re-read, then one `SetDesiredCapacity` per write whose group is unchanged and
    /// lists no more instances than the new value ([`DesiredWrite::unlaunched_guard`]), so no
    /// running instance is ever terminated by it.
    fn lower_unlaunched(&self, writes: &[DesiredWrite])
        -> impl Future<Output = Result<WriteOutcomes, AwsError>> + Send;

    /// Terminates a drained instance, decrementing desired capacity when asked. An instance that
    /// is gone or no longer in a group counts as done.
    fn terminate_instance(
        &self,
        instance: &InstanceId,
        decrement: bool,
    ) -> impl Future<Output = Result<TerminateOutcome, AwsError>> + Send;

    /// Suspends (or resumes) Auto Scaling's `AZRebalance` process on `group`, and records the
    /// suspension with the tag [`AZ_REBALANCE_SUSPENDED_TAG`] whose value is `cluster`, the one
    /// suspending it (deleted on resume), so that a run without `--suspend-az-rebalance` resumes
    /// exactly the groups its own cluster's booster suspended.
    fn suspend_az_rebalance(
        &self,
        group: &GroupName,
        suspend: bool,
        cluster: &str,
    ) -> impl Future<Output = Result<(), AwsError>> + Send;

    /// The group of each instance that is in one (batched to 50 ids per call).
    fn groups_of(
        &self,
        instances: &[InstanceId],
    ) -> impl Future<Output = Result<BTreeMap<InstanceId, GroupName>, AwsError>> + Send;

    /// What EC2 says of each instance that exists (`DescribeInstances`): spot or on-demand, which
    /// the Auto Scaling API does not say, and its private DNS name and address, which a Node
    /// claiming it must match. Unknown ids are simply absent.
    fn instance_facts(
        &self,
        instances: &[InstanceId],
    ) -> impl Future<Output = Result<BTreeMap<InstanceId, InstanceFacts>, AwsError>> + Send;

    /// Those of `instances` EC2 lists a scheduled event for that has neither completed nor been
    /// cancelled (`DescribeInstanceStatus`), each with the earliest such event's `NotBefore`.
    fn scheduled_events(
        &self,
        instances: &[InstanceId],
    ) -> impl Future<Output = Result<BTreeMap<InstanceId, Timestamp>, AwsError>> + Send;

    /// Those of `instances` whose spot request EC2 reports interrupted
    /// (`DescribeSpotInstanceRequests`): marked for termination, stop or hibernation, or already
    /// interrupted for price, capacity or a constraint. What confirms a spot-interruption notice:
    /// only AWS writes it. Instances with no spot request are simply absent.
    fn spot_interruptions(
        &self,
        instances: &[InstanceId],
    ) -> impl Future<Output = Result<BTreeSet<InstanceId>, AwsError>> + Send;

    /// `group`'s scaling activities that started at or after `since`, newest first
    /// (`DescribeScalingActivities`, paginated, read no further back than `since`).
    fn scaling_activities(
        &self,
        group: &GroupName,
        since: Timestamp,
    ) -> impl Future<Output = Result<Vec<ScalingActivity>, AwsError>> + Send;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_is_this_clusters_only_when_a_tag_names_the_cluster() {
        let scope = GroupScope::new("prod");
        let tags = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
        };
        for ours in [
            tags(&[("kubernetes.io/cluster/prod", "owned")]),
            tags(&[("kubernetes.io/cluster/prod", "shared")]),
            tags(&[("k8s.io/cluster-autoscaler/prod", "owned")]),
            tags(&[("eks:cluster-name", "prod")]),
            tags(&[(INSTANCE_GROUP_CLUSTER_TAG, "prod")]),
        ] {
            assert!(scope.is_this_clusters(&ours), "{ours:?}");
        }
        for theirs in [
            tags(&[]),
            tags(&[("kubernetes.io/cluster/prod-2", "owned")]),
            tags(&[("kubernetes.io/cluster/pro", "owned")]),
            tags(&[("k8s.io/cluster-autoscaler/enabled", "true")]),
            tags(&[("eks:cluster-name", "staging")]),
            tags(&[(INSTANCE_GROUP_CLUSTER_TAG, "prod-2")]),
            tags(&[("KubernetesCluster", "prod"), ("Name", "prod-nodes")]),
        ] {
            assert!(!scope.is_this_clusters(&theirs), "{theirs:?}");
        }
        let selected = scope.selecting(&["team=batch".parse().unwrap()]);
        let ours = tags(&[("kubernetes.io/cluster/prod", "owned"), ("team", "batch")]);
        assert!(selected.selects(&ours) && selected.is_this_clusters(&ours));
        assert!(!selected.selects(&tags(&[("kubernetes.io/cluster/prod", "owned")])));
        let described = GroupDescription {
            name: "g".into(),
            min: 0,
            max: 3,
            desired: 1,
            instances: Vec::new(),
            capacity_rebalance: false,
            az_rebalance: false,
            tags: tags(&[("kubernetes.io/cluster/staging", "owned")]),
            launch: Default::default(),
        };
        let core = described.to_core(None, None, &selected);
        assert!(core.foreign && core.excluded && !core.served());
        // EKS tags the group behind a managed node group: this cluster's, and still not served.
        let managed = GroupDescription {
            tags: tags(&[("eks:cluster-name", "prod"), ("eks:nodegroup-name", "batch"), ("team", "batch")]),
            ..described
        };
        let core = managed.to_core(None, None, &selected);
        assert!(!core.foreign && !core.excluded && !core.served());
        assert_eq!(core.eks_node_group.as_deref(), Some("batch"));
    }

    #[test]
    fn tag_filters_parse() {
        let f: TagFilter = "k8s.io/cluster-autoscaler/enabled=true".parse().unwrap();
        assert_eq!((f.key.as_str(), f.value.as_deref()), ("k8s.io/cluster-autoscaler/enabled", Some("true")));
        let f: TagFilter = "k8s.io/cluster-autoscaler/my-cluster".parse().unwrap();
        assert_eq!(f.value, None);
        assert!("=x".parse::<TagFilter>().is_err());
    }
}
