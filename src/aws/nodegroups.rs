//! [`NodeGroupCloud`] on the SDK: EKS for the cluster's endpoint, EC2 for subnets, security groups
//! and launch templates, Auto Scaling for the group, IAM for the node role.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use aws_sdk_autoscaling::error::ProvideErrorMetadata;
use aws_sdk_autoscaling::types as asg;
use aws_sdk_ec2::types as ec2;
use tracing::info;

use super::calls::CallStats;
use super::errors::failure;
use crate::core::{GroupName, InstanceId};
use crate::instancegroup::design::{LifecycleHook, Metadata, MixedInstances, Placement, RoleChoice, WarmPool};
use crate::instancegroup::launch::{
    AsgChanges, AsgDesign, AsgFacts, BlockDevice, GroupInstance, LaunchTemplateData, TAG_CLUSTER_NAME,
};
use crate::instancegroup::userdata::ClusterInfo;
use crate::ports::nodegroups::{CloudError, NodeGroupCloud, RoleFacts, TemplateFacts};

/// Trust policy of a created node role.
/// The IAM path of every role and instance profile the daemon creates: `iam:PassRole` is granted
/// on this path only, so no other role can be handed to an instance.
pub(crate) const NODE_ROLE_PATH: &str = "/spots-booster/";

const EC2_TRUST_POLICY: &str = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"ec2.amazonaws.com"},"Action":"sts:AssumeRole"}]}"#;

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

    /// Ids for `refs` (ids, or `Name` tags), all in `vpc` when it is known: an id of another
    /// VPC is refused like a name that is not found, so an InstanceGroup cannot place nodes in, or
    /// open them to, someone else's network.
    async fn resolve(&self, what: &'static str, vpc: Option<&str>, refs: &[String]) -> Result<Vec<String>, CloudError> {
        let id_prefix = if what == "subnet" { "subnet-" } else { "sg-" };
        let (ids, names): (BTreeSet<String>, Vec<String>) = {
            let (ids, names): (Vec<&String>, Vec<&String>) = refs.iter().partition(|r| r.starts_with(id_prefix));
            (ids.into_iter().cloned().collect(), names.into_iter().cloned().collect())
        };
        let mut resolved = BTreeSet::new();
        if !ids.is_empty() {
            if let Some(vpc) = vpc {
                let id_filter = if what == "subnet" { "subnet-id" } else { "group-id" };
                let filter =
                    ec2::Filter::builder().name(id_filter).set_values(Some(ids.iter().cloned().collect())).build();
                let found = self.describe_in(what, vpc_filter(Some(vpc)).into_iter().chain([filter]).collect()).await?;
                let in_vpc: BTreeSet<&String> = found.iter().map(|(_, id)| id).collect();
                if let Some(stray) = ids.iter().find(|id| !in_vpc.contains(id)) {
                    return Err(CloudError::NotFound { what, name: stray.clone(), scope: Some(vpc.to_string()) });
                }
            }
            resolved.extend(ids);
        }
        if names.is_empty() {
            return Ok(resolved.into_iter().collect());
        }
        let name_filter = ec2::Filter::builder().name("tag:Name").set_values(Some(names.clone())).build();
        let found = self.describe_in(what, vpc_filter(vpc).into_iter().chain([name_filter]).collect()).await?;
        for name in names {
            match found.iter().find(|(n, _)| n.as_deref() == Some(name.as_str())) {
                Some((_, id)) => {
                    resolved.insert(id.clone());
                }
                None => return Err(CloudError::NotFound { what, name, scope: vpc.map(String::from) }),
            }
        }
        Ok(resolved.into_iter().collect())
    }

    /// Subnets or security groups matching `filters`: each one's `Name` tag (if any) and id.
    async fn describe_in(
        &self,
        what: &'static str,
        filters: Vec<ec2::Filter>,
    ) -> Result<Vec<(Option<String>, String)>, CloudError> {
        if what == "subnet" {
            let out = self
                .ec2
                .describe_subnets()
                .set_filters(Some(filters))
                .send()
                .await
                .map_err(|e| self.call("ec2:DescribeSubnets", what, e))?;
            Ok(out
                .subnets()
                .iter()
                .filter_map(|s| Some((tag_value(s.tags(), "Name"), s.subnet_id()?.to_string())))
                .collect())
        } else {
            let out = self
                .ec2
                .describe_security_groups()
                .set_filters(Some(filters))
                .send()
                .await
                .map_err(|e| self.call("ec2:DescribeSecurityGroups", what, e))?;
            Ok(out
                .security_groups()
                .iter()
                .filter_map(|g| Some((tag_value(g.tags(), "Name"), g.group_id()?.to_string())))
                .collect())
        }
    }

    async fn profile_arn_with_role(&self, profile: &str) -> Result<Option<(String, Vec<String>)>, CloudError> {
        match self.iam.get_instance_profile().instance_profile_name(profile).send().await {
            Ok(out) => Ok(out
                .instance_profile()
                .map(|p| (p.arn().to_string(), p.roles().iter().map(|r| r.role_name().to_string()).collect()))),
            Err(e) if e.code() == Some("NoSuchEntity") => Ok(None),
            Err(e) => Err(self.call("iam:GetInstanceProfile", profile, e)),
        }
    }

    async fn role_arn(&self, name: &str) -> Result<Option<String>, CloudError> {
        match self.iam.get_role().role_name(name).send().await {
            Ok(out) => Ok(out.role().map(|r| r.arn().to_string())),
            Err(e) if e.code() == Some("NoSuchEntity") => Ok(None),
            Err(e) => Err(self.call("iam:GetRole", name, e)),
        }
    }

    async fn ensure_managed_role(
        &self,
        name: &str,
        policies: &BTreeSet<String>,
        boundary: Option<&str>,
        cluster: &str,
    ) -> Result<RoleFacts, CloudError> {
        let owner = aws_sdk_iam::types::Tag::builder()
            .key(TAG_CLUSTER_NAME)
            .value(cluster)
            .build()
            .expect("key and value are set");
        let role_arn = match self.role_arn(name).await? {
            Some(arn) => arn,
            None => {
                info!(role = name, "creating node role");
                let out = self
                    .iam
                    .create_role()
                    .role_name(name)
                    .path(NODE_ROLE_PATH)
                    .assume_role_policy_document(EC2_TRUST_POLICY)
                    .description("Node role created by spots-booster for an InstanceGroup")
                    .set_permissions_boundary(boundary.map(String::from))
                    .tags(owner.clone())
                    .send()
                    .await
                    .map_err(|e| self.call("iam:CreateRole", name, e))?;
                out.role().map(|r| r.arn().to_string()).unwrap_or_default()
            }
        };
        let attached: BTreeSet<String> = self
            .iam
            .list_attached_role_policies()
            .role_name(name)
            .send()
            .await
            .map_err(|e| self.call("iam:ListAttachedRolePolicies", name, e))?
            .attached_policies()
            .iter()
            .filter_map(|p| p.policy_arn().map(String::from))
            .collect();
        for arn in policies.difference(&attached) {
            self.iam
                .attach_role_policy()
                .role_name(name)
                .policy_arn(arn)
                .send()
                .await
                .map_err(|e| self.call("iam:AttachRolePolicy", name, e))?;
        }
        for arn in attached.difference(policies) {
            self.iam
                .detach_role_policy()
                .role_name(name)
                .policy_arn(arn)
                .send()
                .await
                .map_err(|e| self.call("iam:DetachRolePolicy", name, e))?;
        }
        let (profile_arn, roles) = match self.profile_arn_with_role(name).await? {
            Some((arn, roles)) => (Some(arn), roles),
            None => {
                self.iam
                    .create_instance_profile()
                    .instance_profile_name(name)
                    .path(NODE_ROLE_PATH)
                    .tags(owner.clone())
                    .send()
                    .await
                    .map_err(|e| self.call("iam:CreateInstanceProfile", name, e))?;
                (None, Vec::new())
            }
        };
        if let Some(profile_arn) = profile_arn.filter(|_| roles.iter().any(|r| r == name)) {
            // Already in place: nothing to wait for.
            return Ok(RoleFacts { role_arn: Some(role_arn), profile_arn });
        }
        if !roles.iter().any(|r| r == name) {
            self.iam
                .add_role_to_instance_profile()
                .instance_profile_name(name)
                .role_name(name)
                .send()
                .await
                .map_err(|e| self.call("iam:AddRoleToInstanceProfile", name, e))?;
        }
        // IAM is eventually consistent: wait, bounded, until the profile reads back with its role.
        let deadline = tokio::time::Instant::now() + self.profile_wait;
        let mut pause = Duration::from_millis(200);
        loop {
            if let Some((arn, roles)) = self.profile_arn_with_role(name).await? {
                if roles.iter().any(|r| r == name) {
                    return Ok(RoleFacts { role_arn: Some(role_arn), profile_arn: arn });
                }
            }
            if tokio::time::Instant::now() + pause > deadline {
                return Err(CloudError::Timeout(format!("instance profile {name} to carry role {name}")));
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(5));
        }
    }

    async fn template_version_data(&self, name: &str, version: &str) -> Result<LaunchTemplateData, CloudError> {
        let out = self
            .ec2
            .describe_launch_template_versions()
            .launch_template_name(name)
            .versions(version)
            .send()
            .await
            .map_err(|e| self.call("ec2:DescribeLaunchTemplateVersions", name, e))?;
        let data = out.launch_template_versions().first().and_then(|v| v.launch_template_data());
        Ok(data.map(template_data_from_sdk).unwrap_or_default())
    }

    async fn hooks(&self, name: &str) -> Result<BTreeMap<String, LifecycleHook>, CloudError> {
        let out = self
            .autoscaling
            .describe_lifecycle_hooks()
            .auto_scaling_group_name(name)
            .send()
            .await
            .map_err(|e| self.call("autoscaling:DescribeLifecycleHooks", name, e))?;
        Ok(out
            .lifecycle_hooks()
            .iter()
            .filter_map(|h| {
                Some((
                    h.lifecycle_hook_name()?.to_string(),
                    LifecycleHook {
                        transition: h.lifecycle_transition().unwrap_or_default().to_string(),
                        default_result: h.default_result().unwrap_or("ABANDON").to_string(),
                        heartbeat_timeout: h.heartbeat_timeout().unwrap_or(3600),
                        notification_arn: h.notification_target_arn().map(String::from),
                        role_arn: h.role_arn().map(String::from),
                        metadata: h.notification_metadata().map(String::from),
                    },
                ))
            })
            .collect())
    }

    async fn warm_pool(&self, name: &str) -> Result<Option<WarmPool>, CloudError> {
        let out = self
            .autoscaling
            .describe_warm_pool()
            .auto_scaling_group_name(name)
            .send()
            .await
            .map_err(|e| self.call("autoscaling:DescribeWarmPool", name, e))?;
        Ok(out.warm_pool_configuration().map(|w| WarmPool {
            min_size: w.min_size().unwrap_or(0),
            max_prepared: w.max_group_prepared_capacity().filter(|m| *m >= 0),
        }))
    }

    async fn apply_group_settings(&self, design: &AsgDesign, changes: &AsgChanges) -> Result<(), CloudError> {
        let name = design.name.as_str();
        if !changes.set_tags.is_empty() {
            self.autoscaling
                .create_or_update_tags()
                .set_tags(Some(changes.set_tags.iter().map(|(k, v)| asg_tag(name, k, v)).collect()))
                .send()
                .await
                .map_err(|e| self.call("autoscaling:CreateOrUpdateTags", name, e))?;
        }
        if !changes.delete_tags.is_empty() {
            self.autoscaling
                .delete_tags()
                .set_tags(Some(changes.delete_tags.iter().map(|k| asg_tag(name, k, "")).collect()))
                .send()
                .await
                .map_err(|e| self.call("autoscaling:DeleteTags", name, e))?;
        }
        if !changes.suspend.is_empty() {
            self.autoscaling
                .suspend_processes()
                .auto_scaling_group_name(name)
                .set_scaling_processes(Some(changes.suspend.iter().cloned().collect()))
                .send()
                .await
                .map_err(|e| self.call("autoscaling:SuspendProcesses", name, e))?;
        }
        if !changes.resume.is_empty() {
            self.autoscaling
                .resume_processes()
                .auto_scaling_group_name(name)
                .set_scaling_processes(Some(changes.resume.iter().cloned().collect()))
                .send()
                .await
                .map_err(|e| self.call("autoscaling:ResumeProcesses", name, e))?;
        }
        if !changes.enable_metrics.is_empty() {
            self.autoscaling
                .enable_metrics_collection()
                .auto_scaling_group_name(name)
                .granularity("1Minute")
                .set_metrics(Some(changes.enable_metrics.iter().cloned().collect()))
                .send()
                .await
                .map_err(|e| self.call("autoscaling:EnableMetricsCollection", name, e))?;
        }
        if !changes.disable_metrics.is_empty() {
            self.autoscaling
                .disable_metrics_collection()
                .auto_scaling_group_name(name)
                .set_metrics(Some(changes.disable_metrics.iter().cloned().collect()))
                .send()
                .await
                .map_err(|e| self.call("autoscaling:DisableMetricsCollection", name, e))?;
        }
        for hook in &changes.delete_hooks {
            self.autoscaling
                .delete_lifecycle_hook()
                .auto_scaling_group_name(name)
                .lifecycle_hook_name(hook)
                .send()
                .await
                .map_err(|e| self.call("autoscaling:DeleteLifecycleHook", name, e))?;
        }
        for (hook_name, hook) in &changes.put_hooks {
            self.autoscaling
                .put_lifecycle_hook()
                .auto_scaling_group_name(name)
                .lifecycle_hook_name(hook_name)
                .lifecycle_transition(&hook.transition)
                .default_result(&hook.default_result)
                .heartbeat_timeout(hook.heartbeat_timeout)
                .set_notification_target_arn(hook.notification_arn.clone())
                .set_role_arn(hook.role_arn.clone())
                .set_notification_metadata(hook.metadata.clone())
                .send()
                .await
                .map_err(|e| self.call("autoscaling:PutLifecycleHook", name, e))?;
        }
        if changes.delete_warm_pool {
            self.autoscaling
                .delete_warm_pool()
                .auto_scaling_group_name(name)
                .force_delete(true)
                .send()
                .await
                .map_err(|e| self.call("autoscaling:DeleteWarmPool", name, e))?;
        }
        if let Some(pool) = changes.put_warm_pool {
            self.autoscaling
                .put_warm_pool()
                .auto_scaling_group_name(name)
                .min_size(pool.min_size)
                .max_group_prepared_capacity(pool.max_prepared.unwrap_or(-1))
                .send()
                .await
                .map_err(|e| self.call("autoscaling:PutWarmPool", name, e))?;
        }
        Ok(())
    }
}

fn vpc_filter(vpc: Option<&str>) -> Option<ec2::Filter> {
    vpc.map(|v| ec2::Filter::builder().name("vpc-id").values(v).build())
}

fn tag_value(tags: &[ec2::Tag], key: &str) -> Option<String> {
    tags.iter().find(|t| t.key() == Some(key)).and_then(|t| t.value().map(String::from))
}

fn asg_tag(group: &str, key: &str, value: &str) -> asg::Tag {
    asg::Tag::builder()
        .resource_id(group)
        .resource_type("auto-scaling-group")
        .key(key)
        .value(value)
        .propagate_at_launch(true)
        .build()
}

/// Our launch template data → the SDK request.
fn template_request(data: &LaunchTemplateData) -> ec2::RequestLaunchTemplateData {
    let mut request = ec2::RequestLaunchTemplateData::builder()
        .image_id(&data.image_id)
        .instance_type(ec2::InstanceType::from(data.instance_type.as_str()))
        .iam_instance_profile(
            ec2::LaunchTemplateIamInstanceProfileSpecificationRequest::builder()
                .arn(&data.instance_profile_arn)
                .build(),
        )
        .set_security_group_ids(Some(data.security_group_ids.clone()))
        .set_key_name(data.key_name.clone())
        .user_data(&data.user_data);
    for device in &data.block_devices {
        request = request.block_device_mappings(
            ec2::LaunchTemplateBlockDeviceMappingRequest::builder()
                .device_name(&device.device)
                .ebs(
                    ec2::LaunchTemplateEbsBlockDeviceRequest::builder()
                        .volume_type(ec2::VolumeType::from(device.volume_type.as_str()))
                        .set_volume_size(device.size)
                        .set_iops(device.iops)
                        .set_throughput(device.throughput)
                        .delete_on_termination(device.delete_on_termination)
                        .set_encrypted(device.encrypted)
                        .set_snapshot_id(device.snapshot_id.clone())
                        .build(),
                )
                .build(),
        );
    }
    request = request.metadata_options(
        ec2::LaunchTemplateInstanceMetadataOptionsRequest::builder()
            .set_http_endpoint(
                data.metadata.http_endpoint.as_deref().map(ec2::LaunchTemplateInstanceMetadataEndpointState::from),
            )
            .set_http_tokens(data.metadata.http_tokens.as_deref().map(ec2::LaunchTemplateHttpTokensState::from))
            .set_http_put_response_hop_limit(data.metadata.http_put_hop_limit)
            .instance_metadata_tags(ec2::LaunchTemplateInstanceMetadataTagsState::Disabled)
            .build(),
    );
    for (resource, tags) in &data.tag_specifications {
        request = request.tag_specifications(
            ec2::LaunchTemplateTagSpecificationRequest::builder()
                .resource_type(ec2::ResourceType::from(resource.as_str()))
                .set_tags(Some(tags.iter().map(|(k, v)| ec2::Tag::builder().key(k).value(v).build()).collect()))
                .build(),
        );
    }
    if let Some(price) = &data.spot_max_price {
        request = request.instance_market_options(
            ec2::LaunchTemplateInstanceMarketOptionsRequest::builder()
                .market_type(ec2::MarketType::Spot)
                .spot_options(ec2::LaunchTemplateSpotMarketOptionsRequest::builder().max_price(price).build())
                .build(),
        );
    }
    if data.placement != Placement::default() {
        request = request.placement(
            ec2::LaunchTemplatePlacementRequest::builder()
                .set_availability_zone(data.placement.availability_zone.clone())
                .set_host_resource_group_arn(data.placement.host_resource_group_arn.clone())
                .set_tenancy(data.placement.tenancy.as_deref().map(ec2::Tenancy::from))
                .build(),
        );
    }
    for arn in &data.licenses {
        request = request.license_specifications(
            ec2::LaunchTemplateLicenseConfigurationRequest::builder().license_configuration_arn(arn).build(),
        );
    }
    request.build()
}

/// The SDK's launch template data → ours.
fn template_data_from_sdk(data: &ec2::ResponseLaunchTemplateData) -> LaunchTemplateData {
    let mut security_group_ids: Vec<String> = data.security_group_ids().to_vec();
    security_group_ids.sort();
    let mut block_devices: Vec<BlockDevice> = data
        .block_device_mappings()
        .iter()
        .map(|m| {
            let ebs = m.ebs();
            BlockDevice {
                device: m.device_name().unwrap_or_default().to_string(),
                volume_type: ebs.and_then(|e| e.volume_type()).map(|t| t.as_str().to_string()).unwrap_or_default(),
                size: ebs.and_then(|e| e.volume_size()),
                iops: ebs.and_then(|e| e.iops()),
                throughput: ebs.and_then(|e| e.throughput()),
                delete_on_termination: ebs.and_then(|e| e.delete_on_termination()).unwrap_or(true),
                encrypted: ebs.and_then(|e| e.encrypted()),
                snapshot_id: ebs.and_then(|e| e.snapshot_id()).map(String::from),
            }
        })
        .collect();
    block_devices.sort();
    let metadata = data
        .metadata_options()
        .map(|m| Metadata {
            http_endpoint: m.http_endpoint().map(|v| v.as_str().to_string()),
            http_tokens: m.http_tokens().map(|v| v.as_str().to_string()),
            http_put_hop_limit: m.http_put_response_hop_limit(),
        })
        .unwrap_or_default();
    let tag_specifications = data
        .tag_specifications()
        .iter()
        .filter_map(|spec| {
            let resource = spec.resource_type()?.as_str().to_string();
            // moto echoes the template's own tags here; they are not launch data.
            if resource == "launch-template" {
                return None;
            }
            let tags =
                spec.tags().iter().filter_map(|t| Some((t.key()?.to_string(), t.value()?.to_string()))).collect();
            Some((resource, tags))
        })
        .collect();
    let placement = data
        .placement()
        .map(|p| Placement {
            availability_zone: p.availability_zone().map(String::from),
            host_resource_group_arn: p.host_resource_group_arn().map(String::from),
            tenancy: p.tenancy().map(|t| t.as_str().to_string()),
        })
        .unwrap_or_default();
    let mut licenses: Vec<String> =
        data.license_specifications().iter().filter_map(|l| l.license_configuration_arn().map(String::from)).collect();
    licenses.sort();
    LaunchTemplateData {
        image_id: data.image_id().unwrap_or_default().to_string(),
        instance_type: data.instance_type().map(|t| t.as_str().to_string()).unwrap_or_default(),
        instance_profile_arn: data.iam_instance_profile().and_then(|p| p.arn()).unwrap_or_default().to_string(),
        security_group_ids,
        key_name: data.key_name().map(String::from),
        user_data: data.user_data().unwrap_or_default().to_string(),
        block_devices,
        metadata,
        tag_specifications,
        spot_max_price: data
            .instance_market_options()
            .and_then(|m| m.spot_options())
            .and_then(|s| s.max_price())
            .map(String::from),
        placement,
        licenses,
    }
}

fn mixed_policy(template: &str, mixed: &MixedInstances) -> asg::MixedInstancesPolicy {
    let spec = asg::LaunchTemplateSpecification::builder().launch_template_name(template).version("$Latest").build();
    let overrides = mixed
        .overrides
        .iter()
        .map(|(t, w)| asg::LaunchTemplateOverrides::builder().instance_type(t).weighted_capacity(w.to_string()).build())
        .collect();
    asg::MixedInstancesPolicy::builder()
        .launch_template(
            asg::LaunchTemplate::builder().launch_template_specification(spec).set_overrides(Some(overrides)).build(),
        )
        .instances_distribution(
            asg::InstancesDistribution::builder()
                .on_demand_allocation_strategy("prioritized")
                .on_demand_base_capacity(mixed.on_demand_base)
                .on_demand_percentage_above_base_capacity(mixed.on_demand_percent_above_base)
                .spot_allocation_strategy(&mixed.spot_allocation_strategy)
                .set_spot_instance_pools(mixed.spot_pools)
                .build(),
        )
        .build()
}

fn mixed_from_sdk(policy: &asg::MixedInstancesPolicy) -> (Option<String>, MixedInstances) {
    let template = policy.launch_template();
    let name = template
        .and_then(|t| t.launch_template_specification())
        .and_then(|s| s.launch_template_name())
        .map(String::from);
    let distribution = policy.instances_distribution();
    let overrides = template
        .map(|t| t.overrides())
        .unwrap_or_default()
        .iter()
        .filter_map(|o| {
            let weight = o.weighted_capacity().and_then(|w| w.parse().ok()).unwrap_or(1);
            Some((o.instance_type()?.to_string(), weight))
        })
        .collect();
    (
        name,
        MixedInstances {
            spot_allocation_strategy: distribution
                .and_then(|d| d.spot_allocation_strategy())
                .unwrap_or("lowest-price")
                .to_string(),
            spot_pools: distribution
                .and_then(|d| d.spot_instance_pools())
                .filter(|_| distribution.and_then(|d| d.spot_allocation_strategy()) == Some("lowest-price")),
            on_demand_base: distribution.and_then(|d| d.on_demand_base_capacity()).unwrap_or(0),
            on_demand_percent_above_base: distribution
                .and_then(|d| d.on_demand_percentage_above_base_capacity())
                .unwrap_or(100),
            overrides,
        },
    )
}

fn launch_spec(design: &AsgDesign) -> asg::LaunchTemplateSpecification {
    asg::LaunchTemplateSpecification::builder().launch_template_name(&design.template_name).version("$Latest").build()
}

impl AwsNodeGroups {
    /// The id of the launch template named `name`, `None` when there is none.
    async fn launch_template_id(&self, name: &str) -> Result<Option<String>, CloudError> {
        match self.ec2.describe_launch_templates().launch_template_names(name).send().await {
            Ok(out) => Ok(out.launch_templates().first().and_then(|t| t.launch_template_id()).map(String::from)),
            Err(e) if not_found(&e) => Ok(None),
            Err(e) => Err(self.call("ec2:DescribeLaunchTemplates", name, e)),
        }
    }
}

fn not_found(e: &impl ProvideErrorMetadata) -> bool {
    e.code().is_some_and(|c| c.contains("NotFound") || c == "NoSuchEntity")
        || e.message().is_some_and(|m| m.contains("not found") || m.contains("does not exist"))
}

impl NodeGroupCloud for AwsNodeGroups {
    async fn cluster(&self, name: &str) -> Result<ClusterInfo, CloudError> {
        let out = match self.eks.describe_cluster().name(name).send().await {
            Ok(out) => out,
            Err(e) if e.code() == Some("ResourceNotFoundException") => {
                return Err(CloudError::NotFound { what: "EKS cluster", name: name.to_string(), scope: None })
            }
            Err(e) => return Err(self.call("eks:DescribeCluster", name, e)),
        };
        let cluster = out.cluster();
        Ok(ClusterInfo {
            name: name.to_string(),
            endpoint: cluster.and_then(|c| c.endpoint()).unwrap_or_default().to_string(),
            certificate_authority: cluster
                .and_then(|c| c.certificate_authority())
                .and_then(|ca| ca.data())
                .unwrap_or_default()
                .to_string(),
            service_cidr: cluster
                .and_then(|c| c.kubernetes_network_config())
                .and_then(|n| n.service_ipv4_cidr())
                .map(String::from),
            vpc_id: cluster.and_then(|c| c.resources_vpc_config()).and_then(|v| v.vpc_id()).map(String::from),
        })
    }

    async fn subnet_ids(&self, vpc: Option<&str>, refs: &[String]) -> Result<Vec<String>, CloudError> {
        self.resolve("subnet", vpc, refs).await
    }

    async fn security_group_ids(&self, vpc: Option<&str>, refs: &[String]) -> Result<Vec<String>, CloudError> {
        self.resolve("security group", vpc, refs).await
    }

    async fn ensure_role(&self, role: &RoleChoice, cluster: &str) -> Result<RoleFacts, CloudError> {
        match role {
            RoleChoice::Managed { name, policies, boundary } => {
                self.ensure_managed_role(name, policies, boundary.as_deref(), cluster).await
            }
            RoleChoice::Existing { role_name, profile_name } => {
                let (profile_arn, roles) = self.profile_arn_with_role(profile_name).await?.ok_or_else(|| {
                    CloudError::NotFound { what: "instance profile", name: profile_name.clone(), scope: None }
                })?;
                let role = role_name.clone().or_else(|| roles.first().cloned());
                let role_arn = match role {
                    Some(name) => Some(self.role_arn(&name).await?.ok_or(CloudError::NotFound {
                        what: "IAM role",
                        name,
                        scope: None,
                    })?),
                    None => None,
                };
                Ok(RoleFacts { role_arn, profile_arn })
            }
        }
    }

    async fn delete_role(&self, name: &str) -> Result<(), CloudError> {
        if let Some((_, roles)) = self.profile_arn_with_role(name).await? {
            for role in roles {
                self.iam
                    .remove_role_from_instance_profile()
                    .instance_profile_name(name)
                    .role_name(&role)
                    .send()
                    .await
                    .map_err(|e| self.call("iam:RemoveRoleFromInstanceProfile", name, e))?;
            }
            self.iam
                .delete_instance_profile()
                .instance_profile_name(name)
                .send()
                .await
                .map_err(|e| self.call("iam:DeleteInstanceProfile", name, e))?;
        }
        if self.role_arn(name).await?.is_none() {
            return Ok(());
        }
        let attached = self
            .iam
            .list_attached_role_policies()
            .role_name(name)
            .send()
            .await
            .map_err(|e| self.call("iam:ListAttachedRolePolicies", name, e))?;
        for policy in attached.attached_policies() {
            if let Some(arn) = policy.policy_arn() {
                self.iam
                    .detach_role_policy()
                    .role_name(name)
                    .policy_arn(arn)
                    .send()
                    .await
                    .map_err(|e| self.call("iam:DetachRolePolicy", name, e))?;
            }
        }
        match self.iam.delete_role().role_name(name).send().await {
            Ok(_) => Ok(()),
            Err(e) if e.code() == Some("NoSuchEntity") => Ok(()),
            Err(e) => Err(self.call("iam:DeleteRole", name, e)),
        }
    }

    async fn launch_template(&self, name: &str) -> Result<Option<TemplateFacts>, CloudError> {
        let out = match self.ec2.describe_launch_templates().launch_template_names(name).send().await {
            Ok(out) => out,
            Err(e) if not_found(&e) => return Ok(None),
            Err(e) => return Err(self.call("ec2:DescribeLaunchTemplates", name, e)),
        };
        let Some(template) = out.launch_templates().first() else { return Ok(None) };
        let latest = template.latest_version_number().unwrap_or(1).to_string();
        let data = self.template_version_data(name, &latest).await?;
        let created = template
            .create_time()
            .and_then(|t| jiff::Timestamp::from_second(t.secs()).ok())
            .map(|t| t.strftime("%Y%m%d%H%M%S").to_string())
            .unwrap_or_default();
        let tags = template
            .tags()
            .iter()
            .filter_map(|t| Some((t.key()?.to_string(), t.value().unwrap_or_default().to_string())))
            .collect();
        Ok(Some(TemplateFacts { name: name.to_string(), latest_version: latest, data, created, tags }))
    }

    async fn create_launch_template(
        &self,
        name: &str,
        owner: &BTreeMap<String, String>,
        data: &LaunchTemplateData,
    ) -> Result<String, CloudError> {
        let tags = owner.iter().map(|(k, v)| ec2::Tag::builder().key(k).value(v).build());
        let out = self
            .ec2
            .create_launch_template()
            .launch_template_name(name)
            .tag_specifications(
                ec2::TagSpecification::builder()
                    .resource_type(ec2::ResourceType::LaunchTemplate)
                    .set_tags(Some(tags.collect()))
                    .build(),
            )
            .version_description("spots-booster")
            .launch_template_data(template_request(data))
            .send()
            .await
            .map_err(|e| self.call("ec2:CreateLaunchTemplate", name, e))?;
        Ok(out.launch_template().and_then(|t| t.latest_version_number()).unwrap_or(1).to_string())
    }

    async fn create_template_version(&self, name: &str, data: &LaunchTemplateData) -> Result<String, CloudError> {
        let out = self
            .ec2
            .create_launch_template_version()
            .launch_template_name(name)
            .version_description("spots-booster")
            .launch_template_data(template_request(data))
            .send()
            .await
            .map_err(|e| self.call("ec2:CreateLaunchTemplateVersion", name, e))?;
        Ok(out.launch_template_version().and_then(|v| v.version_number()).map(|v| v.to_string()).unwrap_or_default())
    }

    /// Idempotent: a template already gone is done, whatever the service answers for a missing
    /// name (moto answers `MissingParameter`), so its existence is read before and after.
    async fn delete_launch_template(&self, name: &str) -> Result<(), CloudError> {
        let Some(id) = self.launch_template_id(name).await? else { return Ok(()) };
        match self.ec2.delete_launch_template().launch_template_id(&id).send().await {
            Ok(_) => Ok(()),
            Err(_) if self.launch_template_id(name).await?.is_none() => Ok(()),
            Err(e) => Err(self.call("ec2:DeleteLaunchTemplate", name, e)),
        }
    }

    async fn scaling_group(&self, name: &GroupName) -> Result<Option<AsgFacts>, CloudError> {
        let out = self
            .autoscaling
            .describe_auto_scaling_groups()
            .auto_scaling_group_names(name.as_str())
            .send()
            .await
            .map_err(|e| self.call("autoscaling:DescribeAutoScalingGroups", name.as_str(), e))?;
        let Some(group) = out.auto_scaling_groups().first() else { return Ok(None) };
        let (mixed_template, mixed_instances) = match group.mixed_instances_policy().map(mixed_from_sdk) {
            Some((template, mixed)) => (template, Some(mixed)),
            None => (None, None),
        };
        let mut subnet_ids: Vec<String> = group
            .vpc_zone_identifier()
            .unwrap_or_default()
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect();
        subnet_ids.sort();
        let deleting = group.status().is_some_and(|s| s.contains("Delete"));
        Ok(Some(AsgFacts {
            name: name.clone(),
            min_size: group.min_size().unwrap_or(0),
            max_size: group.max_size().unwrap_or(0),
            desired: group.desired_capacity().unwrap_or(0),
            subnet_ids,
            tags: group
                .tags()
                .iter()
                .filter_map(|t| Some((t.key()?.to_string(), t.value().unwrap_or("").to_string())))
                .collect(),
            template_name: group.launch_template().and_then(|t| t.launch_template_name()).map(String::from),
            mixed_instances,
            mixed_template,
            suspended_processes: group
                .suspended_processes()
                .iter()
                .filter_map(|p| p.process_name().map(String::from))
                .collect(),
            metrics: group.enabled_metrics().iter().filter_map(|m| m.metric().map(String::from)).collect(),
            lifecycle_hooks: if deleting { BTreeMap::new() } else { self.hooks(name.as_str()).await? },
            warm_pool: if deleting { None } else { self.warm_pool(name.as_str()).await? },
            instances: group
                .instances()
                .iter()
                .map(|i| GroupInstance {
                    id: InstanceId::from(i.instance_id().unwrap_or_default()),
                    template_name: i.launch_template().and_then(|t| t.launch_template_name()).map(String::from),
                    template_version: i.launch_template().and_then(|t| t.version()).map(String::from),
                    instance_type: i.instance_type().map(String::from),
                    lifecycle_state: i.lifecycle_state().map(|s| s.as_str().to_string()).unwrap_or_default(),
                })
                .collect(),
            status: group.status().map(String::from),
        }))
    }

    async fn create_scaling_group(&self, design: &AsgDesign) -> Result<(), CloudError> {
        let name = design.name.as_str();
        let mut request = self
            .autoscaling
            .create_auto_scaling_group()
            .auto_scaling_group_name(name)
            .min_size(design.min_size)
            .max_size(design.max_size)
            .desired_capacity(design.min_size)
            .vpc_zone_identifier(design.subnet_ids.join(","))
            .set_tags(Some(design.tags.iter().map(|(k, v)| asg_tag(name, k, v)).collect()));
        request = match &design.mixed_instances {
            Some(mixed) => request.mixed_instances_policy(mixed_policy(&design.template_name, mixed)),
            None => request.launch_template(launch_spec(design)),
        };
        request.send().await.map_err(|e| self.call("autoscaling:CreateAutoScalingGroup", name, e))?;
        let changes = AsgChanges {
            suspend: design.suspended_processes.clone(),
            enable_metrics: design.metrics.clone(),
            put_hooks: design.lifecycle_hooks.clone(),
            put_warm_pool: design.warm_pool,
            ..Default::default()
        };
        self.apply_group_settings(design, &changes).await
    }

    async fn update_scaling_group(&self, design: &AsgDesign, changes: &AsgChanges) -> Result<(), CloudError> {
        let name = design.name.as_str();
        if changes.update {
            let mut request = self
                .autoscaling
                .update_auto_scaling_group()
                .auto_scaling_group_name(name)
                .min_size(design.min_size)
                .max_size(design.max_size)
                .vpc_zone_identifier(design.subnet_ids.join(","));
            request = match &design.mixed_instances {
                Some(mixed) => request.mixed_instances_policy(mixed_policy(&design.template_name, mixed)),
                None => request.launch_template(launch_spec(design)),
            };
            request.send().await.map_err(|e| self.call("autoscaling:UpdateAutoScalingGroup", name, e))?;
        }
        self.apply_group_settings(design, changes).await
    }

    /// Idempotent: a group already gone is done, whatever the error said.
    async fn delete_scaling_group(&self, name: &GroupName) -> Result<(), CloudError> {
        let request = self.autoscaling.delete_auto_scaling_group().auto_scaling_group_name(name.as_str());
        match request.force_delete(true).send().await {
            Ok(_) => Ok(()),
            Err(e) if not_found(&e) => Ok(()),
            Err(_) if self.scaling_group(name).await?.is_none() => Ok(()),
            Err(e) => Err(self.call("autoscaling:DeleteAutoScalingGroup", name.as_str(), e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data() -> LaunchTemplateData {
        LaunchTemplateData {
            image_id: "ami-0abc".into(),
            instance_type: "m5.large".into(),
            instance_profile_arn: "arn:aws:iam::123456789012:instance-profile/spots-booster/ig".into(),
            security_group_ids: vec!["sg-1".into(), "sg-2".into()],
            key_name: Some("ops".into()),
            user_data: "IyEvYmluL2Jhc2g=".into(),
            block_devices: vec![BlockDevice {
                device: "/dev/xvda".into(),
                volume_type: "gp3".into(),
                size: Some(50),
                iops: Some(3000),
                throughput: Some(125),
                delete_on_termination: true,
                encrypted: Some(true),
                snapshot_id: None,
            }],
            metadata: Metadata {
                http_endpoint: Some("enabled".into()),
                http_tokens: Some("required".into()),
                http_put_hop_limit: Some(2),
            },
            tag_specifications: BTreeMap::from([(
                "instance".to_string(),
                BTreeMap::from([("team".to_string(), "web".to_string())]),
            )]),
            spot_max_price: Some("0.05".into()),
            placement: Placement { tenancy: Some("default".into()), ..Placement::default() },
            licenses: vec!["arn:aws:license-manager:eu-west-1:123456789012:license-configuration:lic-1".into()],
        }
    }

    #[test]
    fn a_template_request_carries_every_field_of_the_launch_data() {
        let d = data();
        let r = template_request(&d);
        assert_eq!((r.image_id(), r.instance_type().map(|t| t.as_str())), (Some("ami-0abc"), Some("m5.large")));
        assert_eq!(r.iam_instance_profile().and_then(|p| p.arn()), Some(d.instance_profile_arn.as_str()));
        assert_eq!(
            (r.security_group_ids(), r.key_name()),
            (&["sg-1".to_string(), "sg-2".to_string()][..], Some("ops"))
        );
        assert_eq!(r.user_data(), Some("IyEvYmluL2Jhc2g="));
        let ebs = r.block_device_mappings()[0].ebs().unwrap();
        assert_eq!(r.block_device_mappings()[0].device_name(), Some("/dev/xvda"));
        assert_eq!(
            (ebs.volume_type().map(|t| t.as_str()), ebs.volume_size(), ebs.iops(), ebs.throughput()),
            (Some("gp3"), Some(50), Some(3000), Some(125))
        );
        assert_eq!((ebs.delete_on_termination(), ebs.encrypted(), ebs.snapshot_id()), (Some(true), Some(true), None));
        let m = r.metadata_options().unwrap();
        assert_eq!(
            (
                m.http_endpoint().map(|v| v.as_str()),
                m.http_tokens().map(|v| v.as_str()),
                m.http_put_response_hop_limit()
            ),
            (Some("enabled"), Some("required"), Some(2))
        );
        assert_eq!(m.instance_metadata_tags(), Some(&ec2::LaunchTemplateInstanceMetadataTagsState::Disabled));
        let tags = &r.tag_specifications()[0];
        assert_eq!(tags.resource_type().map(|t| t.as_str()), Some("instance"));
        assert_eq!((tags.tags()[0].key(), tags.tags()[0].value()), (Some("team"), Some("web")));
        let market = r.instance_market_options().unwrap();
        assert_eq!(market.market_type(), Some(&ec2::MarketType::Spot));
        assert_eq!(market.spot_options().and_then(|s| s.max_price()), Some("0.05"));
        assert_eq!(r.placement().and_then(|p| p.tenancy()).map(|t| t.as_str()), Some("default"));
        assert_eq!(r.license_specifications()[0].license_configuration_arn(), Some(d.licenses[0].as_str()));

        // Defaults ask for nothing: no market options, no placement.
        let plain =
            template_request(&LaunchTemplateData { spot_max_price: None, placement: Placement::default(), ..d });
        assert!(plain.instance_market_options().is_none() && plain.placement().is_none());
    }

    #[test]
    fn launch_data_read_back_from_ec2_equals_what_was_asked_and_ignores_the_templates_own_tags() {
        let d = data();
        let device = &d.block_devices[0];
        let answer = ec2::ResponseLaunchTemplateData::builder()
            .image_id(&d.image_id)
            .instance_type(ec2::InstanceType::from(d.instance_type.as_str()))
            .iam_instance_profile(
                ec2::LaunchTemplateIamInstanceProfileSpecification::builder().arn(&d.instance_profile_arn).build(),
            )
            // EC2 lists them in its own order.
            .security_group_ids("sg-2")
            .security_group_ids("sg-1")
            .key_name("ops")
            .user_data(&d.user_data)
            .block_device_mappings(
                ec2::LaunchTemplateBlockDeviceMapping::builder()
                    .device_name(&device.device)
                    .ebs(
                        ec2::LaunchTemplateEbsBlockDevice::builder()
                            .volume_type(ec2::VolumeType::Gp3)
                            .volume_size(50)
                            .iops(3000)
                            .throughput(125)
                            .delete_on_termination(true)
                            .encrypted(true)
                            .build(),
                    )
                    .build(),
            )
            .metadata_options(
                ec2::LaunchTemplateInstanceMetadataOptions::builder()
                    .http_endpoint(ec2::LaunchTemplateInstanceMetadataEndpointState::Enabled)
                    .http_tokens(ec2::LaunchTemplateHttpTokensState::Required)
                    .http_put_response_hop_limit(2)
                    .build(),
            )
            .tag_specifications(
                ec2::LaunchTemplateTagSpecification::builder()
                    .resource_type(ec2::ResourceType::Instance)
                    .tags(ec2::Tag::builder().key("team").value("web").build())
                    .build(),
            )
            .tag_specifications(
                ec2::LaunchTemplateTagSpecification::builder()
                    .resource_type(ec2::ResourceType::LaunchTemplate)
                    .tags(ec2::Tag::builder().key("owner").value("spots-booster").build())
                    .build(),
            )
            .instance_market_options(
                ec2::LaunchTemplateInstanceMarketOptions::builder()
                    .market_type(ec2::MarketType::Spot)
                    .spot_options(ec2::LaunchTemplateSpotMarketOptions::builder().max_price("0.05").build())
                    .build(),
            )
            .placement(ec2::LaunchTemplatePlacement::builder().tenancy(ec2::Tenancy::Default).build())
            .license_specifications(
                ec2::LaunchTemplateLicenseConfiguration::builder().license_configuration_arn(&d.licenses[0]).build(),
            )
            .build();
        assert_eq!(template_data_from_sdk(&answer), d);
    }

    #[test]
    fn a_mixed_instances_policy_reads_back_as_it_was_written() {
        let mixed = MixedInstances {
            spot_allocation_strategy: "lowest-price".into(),
            spot_pools: Some(3),
            on_demand_base: 1,
            on_demand_percent_above_base: 25,
            overrides: vec![("m5.large".into(), 1), ("m5.xlarge".into(), 2)],
        };
        let policy = mixed_policy("ig-web", &mixed);
        let d = policy.instances_distribution().unwrap();
        assert_eq!(d.on_demand_allocation_strategy(), Some("prioritized"));
        let spec = policy.launch_template().and_then(|t| t.launch_template_specification()).unwrap();
        assert_eq!(spec.version(), Some("$Latest"), "new template versions apply without touching the group");
        assert_eq!(mixed_from_sdk(&policy), (Some("ig-web".to_string()), mixed.clone()));

        // Spot pools mean something only to lowest-price: read back without them otherwise.
        let optimized = MixedInstances { spot_allocation_strategy: "capacity-optimized".into(), ..mixed };
        let (_, read) = mixed_from_sdk(&mixed_policy("ig-web", &optimized));
        assert_eq!(read, MixedInstances { spot_pools: None, ..optimized });
    }

    #[test]
    fn group_tags_propagate_to_the_instances_launched() {
        let tag = asg_tag("ig-web", "team", "web");
        assert_eq!((tag.resource_id(), tag.resource_type()), (Some("ig-web"), Some("auto-scaling-group")));
        assert_eq!((tag.key(), tag.value(), tag.propagate_at_launch()), (Some("team"), Some("web"), Some(true)));
    }
}
