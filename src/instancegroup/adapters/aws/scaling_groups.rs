//! Auto Scaling: an InstanceGroup's group, read with its hooks and warm pool, created, changed
//! setting by setting (never its desired capacity), force-deleted.

use std::collections::BTreeMap;

use aws_sdk_autoscaling::types as asg;

use super::{not_found, AwsNodeGroups};
use crate::core::{GroupName, InstanceId};
use crate::instancegroup::cloud::CloudError;
use crate::instancegroup::design::{LifecycleHook, MixedInstances, WarmPool};
use crate::instancegroup::launch::{AsgChanges, AsgDesign, AsgFacts, GroupInstance};

impl AwsNodeGroups {
    pub(super) async fn scaling_group(&self, name: &GroupName) -> Result<Option<AsgFacts>, CloudError> {
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
            capacity_rebalance: group.capacity_rebalance().unwrap_or(false),
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

    pub(super) async fn create_scaling_group(&self, design: &AsgDesign) -> Result<(), CloudError> {
        let name = design.name.as_str();
        let mut request = self
            .autoscaling
            .create_auto_scaling_group()
            .auto_scaling_group_name(name)
            .min_size(design.min_size)
            .max_size(design.max_size)
            .desired_capacity(design.min_size)
            .capacity_rebalance(design.capacity_rebalance)
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

    pub(super) async fn update_scaling_group(
        &self,
        design: &AsgDesign,
        changes: &AsgChanges,
    ) -> Result<(), CloudError> {
        let name = design.name.as_str();
        if changes.update {
            let mut request = self
                .autoscaling
                .update_auto_scaling_group()
                .auto_scaling_group_name(name)
                .min_size(design.min_size)
                .max_size(design.max_size)
                .capacity_rebalance(design.capacity_rebalance)
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
    pub(super) async fn delete_scaling_group(&self, name: &GroupName) -> Result<(), CloudError> {
        let request = self.autoscaling.delete_auto_scaling_group().auto_scaling_group_name(name.as_str());
        match request.force_delete(true).send().await {
            Ok(_) => Ok(()),
            Err(e) if not_found(&e) => Ok(()),
            Err(_) if self.scaling_group(name).await?.is_none() => Ok(()),
            Err(e) => Err(self.call("autoscaling:DeleteAutoScalingGroup", name.as_str(), e)),
        }
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

fn asg_tag(group: &str, key: &str, value: &str) -> asg::Tag {
    asg::Tag::builder()
        .resource_id(group)
        .resource_type("auto-scaling-group")
        .key(key)
        .value(value)
        .propagate_at_launch(true)
        .build()
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

#[cfg(test)]
mod tests {
    use super::*;

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
