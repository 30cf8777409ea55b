//! The port the InstanceGroup reconciler acts through on AWS, in our own terms. Implemented on the
//! SDK in `instancegroup::aws` (tested against moto) and in memory by tests.

use std::collections::BTreeMap;
use std::future::Future;

use crate::core::GroupName;
use crate::instancegroup::design::{RoleChoice, RoleOwner};
pub use crate::instancegroup::launch::TemplateFacts;
use crate::instancegroup::launch::{AsgChanges, AsgDesign, AsgFacts, LaunchTemplateData};
use crate::instancegroup::node_group::{NodeGroupChanges, NodeGroupFacts, NodeGroupWanted};
use crate::instancegroup::userdata::ClusterInfo;
use crate::ports::{AwsFailure, FailureKind};

/// The node role and instance profile in use.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RoleFacts {
    /// Role ARN (what aws-auth maps), when a role is known.
    pub role_arn: Option<String>,
    /// Instance profile ARN (what the launch template names).
    pub(crate) profile_arn: String,
}

/// An AWS call made for an InstanceGroup failed.
#[derive(Debug, thiserror::Error)]
pub enum CloudError {
    /// One API operation failed.
    #[error("{operation} for {target} failed")]
    Call {
        /// API operation, as IAM names it (`ec2:CreateLaunchTemplate`).
        operation: &'static str,
        /// What it was about.
        target: String,
        /// Why.
        #[source]
        failure: AwsFailure,
    },
    /// Something the spec names does not exist.
    #[error("{what} {name:?} not found{}", .scope.as_ref().map(|s| format!(" in {s}")).unwrap_or_default())]
    NotFound {
        /// Subnet, security group, cluster, role, instance profile.
        what: &'static str,
        /// The name or id.
        name: String,
        /// Where it was looked for (a VPC).
        scope: Option<String>,
    },
    /// A bounded wait ran out.
    #[error("gave up waiting for {0}")]
    Timeout(String),
    /// A resource under the name the daemon would create is not this cluster's: not adopted,
    /// changed or deleted.
    #[error("{what} {name} is {owner}, not one this cluster's spots-booster created: not adopted, changed or deleted")]
    NotOwned {
        /// `IAM role`, `instance profile`.
        what: &'static str,
        /// Its name.
        name: String,
        /// Whose it is, as far as its path and tags say.
        owner: String,
    },
}

impl CloudError {
    /// Throttles and outages: retry later without calling the spec wrong.
    pub(crate) fn is_transient(&self) -> bool {
        match self {
            CloudError::Call { failure, .. } => {
                matches!(failure.kind, FailureKind::Throttled | FailureKind::Unavailable)
            }
            CloudError::Timeout(_) => true,
            CloudError::NotFound { .. } | CloudError::NotOwned { .. } => false,
        }
    }
}

/// The AWS side of an InstanceGroup.
pub trait NodeGroupCloud: Send + Sync {
    /// EKS DescribeCluster: endpoint, CA, service CIDR and VPC.
    fn cluster(&self, name: &str) -> impl Future<Output = Result<ClusterInfo, CloudError>> + Send;
    /// Subnet ids for ids or `Name` tags, sorted, within the VPC when known.
    fn subnet_ids(
        &self,
        vpc: Option<&str>,
        refs: &[String],
    ) -> impl Future<Output = Result<Vec<String>, CloudError>> + Send;
    /// Security group ids for ids or `Name` tags, sorted, within the VPC when known.
    fn security_group_ids(
        &self,
        vpc: Option<&str>,
        refs: &[String],
    ) -> impl Future<Output = Result<Vec<String>, CloudError>> + Send;
    /// Makes sure the role and profile exist (creating a managed one, with its policies, tagged
    /// with its [`RoleOwner`]) and returns their ARNs. Bounded wait until a new profile carries
    /// the role. A managed role or profile that exists but is not its owner's (another path, or an
    /// ownership tag missing or naming another cluster, region or InstanceGroup) is
    /// [`CloudError::NotOwned`], untouched.
    fn ensure_role(&self, role: &RoleChoice) -> impl Future<Output = Result<RoleFacts, CloudError>> + Send;
    /// Deletes `owner`'s managed role and its profile (policies detached first) when both are its
    /// own by every ownership tag; one that is not is [`CloudError::NotOwned`], untouched. Gone
    /// already is fine.
    fn delete_role(&self, owner: &RoleOwner) -> impl Future<Output = Result<(), CloudError>> + Send;
    /// The launch template and its latest version, if it exists.
    fn launch_template(&self, name: &str) -> impl Future<Output = Result<Option<TemplateFacts>, CloudError>> + Send;
    /// Creates the template tagged with `owner` (its cluster, which the IAM policy's conditions
    /// rely on, and its InstanceGroup); returns its version ("1").
    fn create_launch_template(
        &self,
        name: &str,
        owner: &BTreeMap<String, String>,
        data: &LaunchTemplateData,
    ) -> impl Future<Output = Result<String, CloudError>> + Send;
    /// Adds a version; returns it. The group launches `$Latest`, so the default version is left
    /// alone.
    fn create_template_version(
        &self,
        name: &str,
        data: &LaunchTemplateData,
    ) -> impl Future<Output = Result<String, CloudError>> + Send;
    /// Deletes the template. Gone already is fine.
    fn delete_launch_template(&self, name: &str) -> impl Future<Output = Result<(), CloudError>> + Send;
    /// The group, its instances, hooks and warm pool, if it exists.
    fn scaling_group(&self, name: &GroupName) -> impl Future<Output = Result<Option<AsgFacts>, CloudError>> + Send;
    /// Creates the group with DesiredCapacity = MinSize, then its processes, metrics, hooks and
    /// warm pool.
    fn create_scaling_group(&self, design: &AsgDesign) -> impl Future<Output = Result<(), CloudError>> + Send;
    /// Applies the changes. Never sends DesiredCapacity.
    fn update_scaling_group(
        &self,
        design: &AsgDesign,
        changes: &AsgChanges,
    ) -> impl Future<Output = Result<(), CloudError>> + Send;
    /// Force-deletes the group (its instances go with it). Gone already is fine.
    fn delete_scaling_group(&self, name: &GroupName) -> impl Future<Output = Result<(), CloudError>> + Send;
    /// The EKS managed node group `name` of `cluster`, if it exists.
    fn node_group(
        &self,
        cluster: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<NodeGroupFacts>, CloudError>> + Send;
    /// Creates the managed node group, its desired size at its minimum.
    fn create_node_group(&self, wanted: &NodeGroupWanted) -> impl Future<Output = Result<(), CloudError>> + Send;
    /// `UpdateNodegroupConfig` for sizes, labels and taints when `changes` has any, then the tag
    /// changes on `facts.arn`. Never anything else.
    fn update_node_group(
        &self,
        cluster: &str,
        name: &str,
        facts: &NodeGroupFacts,
        changes: &NodeGroupChanges,
    ) -> impl Future<Output = Result<(), CloudError>> + Send;
    /// `UpdateNodegroupVersion` to this Kubernetes version and/or AMI release; EKS replaces the
    /// nodes, draining them.
    fn upgrade_node_group(
        &self,
        cluster: &str,
        name: &str,
        version: Option<&str>,
        release_version: Option<&str>,
    ) -> impl Future<Output = Result<(), CloudError>> + Send;
    /// Deletes the managed node group (EKS drains and terminates its nodes). Gone already is fine.
    fn delete_node_group(&self, cluster: &str, name: &str) -> impl Future<Output = Result<(), CloudError>> + Send;
}
