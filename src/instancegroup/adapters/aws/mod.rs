//! [`NodeGroupCloud`] on the SDK, one file per service: EKS for the cluster's endpoint
//! (`eks`) and managed node groups (`node_groups`), EC2 for subnets and security groups (`network`) and launch templates
//! (`launch_templates`), IAM for the node role (`iam`), Auto Scaling for the group
//! (`scaling_groups`).

mod eks;
mod iam;
mod launch_templates;
mod network;
mod node_groups;
mod scaling_groups;

use std::collections::BTreeMap;
use std::time::Duration;

use aws_sdk_autoscaling::error::ProvideErrorMetadata;

use crate::aws::calls::CallStats;
use crate::aws::errors::failure;
use crate::core::GroupName;
use crate::instancegroup::cloud::{CloudError, NodeGroupCloud, RoleFacts, TemplateFacts};
use crate::instancegroup::design::{RoleChoice, RoleOwner};
use crate::instancegroup::launch::{AsgChanges, AsgDesign, AsgFacts, LaunchTemplateData};
use crate::instancegroup::node_group::{NodeGroupChanges, NodeGroupFacts, NodeGroupWanted};
use crate::instancegroup::userdata::ClusterInfo;

/// The SDK clients the reconciler uses.
#[derive(Debug, Clone)]
pub struct AwsNodeGroups {
    autoscaling: aws_sdk_autoscaling::Client,
    ec2: aws_sdk_ec2::Client,
    iam: aws_sdk_iam::Client,
    eks: aws_sdk_eks::Client,
    stats: CallStats,
    /// How long to wait for IAM to show a new profile with its role.
    pub profile_wait: Duration,
}

impl AwsNodeGroups {
    /// Builds the four clients from one SDK configuration, counting calls in `stats`.
    pub fn new(config: &aws_config::SdkConfig, stats: CallStats) -> Self {
        AwsNodeGroups {
            autoscaling: aws_sdk_autoscaling::Client::from_conf(
                aws_sdk_autoscaling::config::Builder::from(config).interceptor(stats.interceptor()).build(),
            ),
            ec2: aws_sdk_ec2::Client::from_conf(
                aws_sdk_ec2::config::Builder::from(config).interceptor(stats.interceptor()).build(),
            ),
            iam: aws_sdk_iam::Client::from_conf(
                aws_sdk_iam::config::Builder::from(config).interceptor(stats.interceptor()).build(),
            ),
            eks: aws_sdk_eks::Client::from_conf(
                aws_sdk_eks::config::Builder::from(config).interceptor(stats.interceptor()).build(),
            ),
            stats,
            profile_wait: Duration::from_secs(60),
        }
    }

    fn call<E>(
        &self,
        operation: &'static str,
        target: &str,
        err: aws_smithy_runtime_api::client::result::SdkError<
            E,
            aws_smithy_runtime_api::client::orchestrator::HttpResponse,
        >,
    ) -> CloudError
    where
        E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    {
        let failure = failure(err);
        self.stats.record_failure(operation.rsplit(':').next().unwrap_or(operation), failure.kind);
        CloudError::Call { operation, target: target.to_string(), failure }
    }
}

fn not_found(e: &impl ProvideErrorMetadata) -> bool {
    e.code().is_some_and(|c| c.contains("NotFound") || c == "NoSuchEntity")
        || e.message().is_some_and(|m| m.contains("not found") || m.contains("does not exist"))
}

impl NodeGroupCloud for AwsNodeGroups {
    async fn cluster(&self, name: &str) -> Result<ClusterInfo, CloudError> {
        self.describe_cluster(name).await
    }

    async fn subnet_ids(&self, vpc: Option<&str>, refs: &[String]) -> Result<Vec<String>, CloudError> {
        self.resolve("subnet", vpc, refs).await
    }

    async fn security_group_ids(&self, vpc: Option<&str>, refs: &[String]) -> Result<Vec<String>, CloudError> {
        self.resolve("security group", vpc, refs).await
    }

    async fn ensure_role(&self, role: &RoleChoice) -> Result<RoleFacts, CloudError> {
        AwsNodeGroups::ensure_role(self, role).await
    }

    async fn delete_role(&self, owner: &RoleOwner) -> Result<(), CloudError> {
        AwsNodeGroups::delete_role(self, owner).await
    }

    async fn launch_template(&self, name: &str) -> Result<Option<TemplateFacts>, CloudError> {
        AwsNodeGroups::launch_template(self, name).await
    }

    async fn create_launch_template(
        &self,
        name: &str,
        owner: &BTreeMap<String, String>,
        data: &LaunchTemplateData,
    ) -> Result<String, CloudError> {
        AwsNodeGroups::create_launch_template(self, name, owner, data).await
    }

    async fn create_template_version(&self, name: &str, data: &LaunchTemplateData) -> Result<String, CloudError> {
        AwsNodeGroups::create_template_version(self, name, data).await
    }

    async fn delete_launch_template(&self, name: &str) -> Result<(), CloudError> {
        AwsNodeGroups::delete_launch_template(self, name).await
    }

    async fn scaling_group(&self, name: &GroupName) -> Result<Option<AsgFacts>, CloudError> {
        AwsNodeGroups::scaling_group(self, name).await
    }

    async fn create_scaling_group(&self, design: &AsgDesign) -> Result<(), CloudError> {
        AwsNodeGroups::create_scaling_group(self, design).await
    }

    async fn update_scaling_group(&self, design: &AsgDesign, changes: &AsgChanges) -> Result<(), CloudError> {
        AwsNodeGroups::update_scaling_group(self, design, changes).await
    }

    async fn delete_scaling_group(&self, name: &GroupName) -> Result<(), CloudError> {
        AwsNodeGroups::delete_scaling_group(self, name).await
    }

    async fn node_group(&self, cluster: &str, name: &str) -> Result<Option<NodeGroupFacts>, CloudError> {
        self.describe_node_group(cluster, name).await
    }

    async fn create_node_group(&self, wanted: &NodeGroupWanted) -> Result<(), CloudError> {
        AwsNodeGroups::create_node_group(self, wanted).await
    }

    async fn update_node_group(
        &self,
        cluster: &str,
        name: &str,
        facts: &NodeGroupFacts,
        changes: &NodeGroupChanges,
    ) -> Result<(), CloudError> {
        AwsNodeGroups::update_node_group(self, cluster, name, facts, changes).await
    }

    async fn upgrade_node_group(
        &self,
        cluster: &str,
        name: &str,
        version: Option<&str>,
        release_version: Option<&str>,
    ) -> Result<(), CloudError> {
        AwsNodeGroups::upgrade_node_group(self, cluster, name, version, release_version).await
    }

    async fn delete_node_group(&self, cluster: &str, name: &str) -> Result<(), CloudError> {
        AwsNodeGroups::delete_node_group(self, cluster, name).await
    }
}
