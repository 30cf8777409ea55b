//! EKS managed node groups: describe, create, update config, tags and version, delete. The
//! Auto Scaling group EKS runs a node group on is never called here.

use std::collections::HashMap;

use aws_sdk_autoscaling::error::ProvideErrorMetadata;
use aws_sdk_eks::types::{
    AmiTypes, CapacityTypes, Nodegroup, NodegroupScalingConfig, RemoteAccessConfig, Taint, TaintEffect,
    UpdateLabelsPayload, UpdateTaintsPayload,
};

use super::AwsNodeGroups;
use crate::instancegroup::cloud::CloudError;
use crate::instancegroup::node_group::{NodeGroupChanges, NodeGroupFacts, NodeGroupWanted, NodeTaint};

fn sdk_taint(taint: &NodeTaint) -> Taint {
    Taint::builder()
        .key(&taint.key)
        .set_value(taint.value.clone())
        .effect(TaintEffect::from(taint.effect.as_str()))
        .build()
}

/// Our view of what EKS describes.
pub(super) fn facts(group: &Nodegroup) -> NodeGroupFacts {
    let scaling = group.scaling_config();
    let remote = group.remote_access();
    NodeGroupFacts {
        arn: group.nodegroup_arn().unwrap_or_default().to_string(),
        status: group.status().map(|s| s.as_str().to_string()).unwrap_or_default(),
        min_size: scaling.and_then(|s| s.min_size()).unwrap_or(0),
        max_size: scaling.and_then(|s| s.max_size()).unwrap_or(0),
        desired_size: scaling.and_then(|s| s.desired_size()).unwrap_or(0),
        instance_types: group.instance_types().to_vec(),
        capacity_type: group.capacity_type().map(|c| c.as_str().to_string()).unwrap_or_else(|| "ON_DEMAND".into()),
        disk_size: group.disk_size(),
        ami_type: group.ami_type().map(|a| a.as_str().to_string()),
        release_version: group.release_version().map(String::from),
        version: group.version().map(String::from),
        labels: group.labels().map(|l| l.iter().map(|(k, v)| (k.clone(), v.clone())).collect()).unwrap_or_default(),
        taints: group
            .taints()
            .iter()
            .map(|t| NodeTaint {
                key: t.key().unwrap_or_default().to_string(),
                value: t.value().filter(|v| !v.is_empty()).map(String::from),
                effect: t.effect().map(|e| e.as_str().to_string()).unwrap_or_default(),
            })
            .collect(),
        tags: group.tags().map(|t| t.iter().map(|(k, v)| (k.clone(), v.clone())).collect()).unwrap_or_default(),
        subnets: group.subnets().to_vec(),
        node_role: group.node_role().unwrap_or_default().to_string(),
        ssh_key: remote.and_then(|r| r.ec2_ssh_key()).filter(|k| !k.is_empty()).map(String::from),
        ssh_security_groups: remote.map(|r| r.source_security_groups().to_vec()).unwrap_or_default(),
        scaling_groups: group
            .resources()
            .map(|r| r.auto_scaling_groups().iter().filter_map(|g| g.name()).map(String::from).collect())
            .unwrap_or_default(),
        health: group
            .health()
            .map(|h| {
                h.issues()
                    .iter()
                    .map(|i| {
                        format!(
                            "{}: {}",
                            i.code().map(|c| c.as_str()).unwrap_or("Unknown"),
                            i.message().unwrap_or_default()
                        )
                    })
                    .collect()
            })
            .unwrap_or_default(),
    }
}

impl AwsNodeGroups {
    pub(super) async fn describe_node_group(
        &self,
        cluster: &str,
        name: &str,
    ) -> Result<Option<NodeGroupFacts>, CloudError> {
        match self.eks.describe_nodegroup().cluster_name(cluster).nodegroup_name(name).send().await {
            Ok(out) => Ok(out.nodegroup().map(facts)),
            Err(e) if e.code() == Some("ResourceNotFoundException") => Ok(None),
            Err(e) => Err(self.call("eks:DescribeNodegroup", name, e)),
        }
    }

    pub(super) async fn create_node_group(&self, wanted: &NodeGroupWanted) -> Result<(), CloudError> {
        let scaling = NodegroupScalingConfig::builder()
            .min_size(wanted.min_size)
            .max_size(wanted.max_size)
            .desired_size(wanted.min_size)
            .build();
        let mut request = self
            .eks
            .create_nodegroup()
            .cluster_name(&wanted.cluster)
            .nodegroup_name(&wanted.name)
            .node_role(&wanted.role_arn)
            .set_subnets(Some(wanted.subnets.clone()))
            .scaling_config(scaling)
            .set_instance_types(Some(wanted.instance_types.clone()))
            .capacity_type(CapacityTypes::from(wanted.capacity_type.as_str()))
            .set_disk_size(wanted.disk_size)
            .set_ami_type(wanted.ami_type.as_deref().map(AmiTypes::from))
            .set_release_version(wanted.release_version.clone())
            .set_version(wanted.version.clone())
            .set_labels(Some(wanted.labels.iter().map(|(k, v)| (k.clone(), v.clone())).collect::<HashMap<_, _>>()))
            .set_taints(Some(wanted.taints.iter().map(sdk_taint).collect()))
            .set_tags(Some(wanted.tags.iter().map(|(k, v)| (k.clone(), v.clone())).collect::<HashMap<_, _>>()));
        if let Some((key, groups)) = &wanted.ssh {
            request = request.remote_access(
                RemoteAccessConfig::builder().ec2_ssh_key(key).set_source_security_groups(Some(groups.clone())).build(),
            );
        }
        request.send().await.map_err(|e| self.call("eks:CreateNodegroup", &wanted.name, e))?;
        Ok(())
    }

    pub(super) async fn update_node_group(
        &self,
        cluster: &str,
        name: &str,
        facts: &NodeGroupFacts,
        changes: &NodeGroupChanges,
    ) -> Result<(), CloudError> {
        if changes.config() {
            let mut request = self.eks.update_nodegroup_config().cluster_name(cluster).nodegroup_name(name);
            if let Some((min, max, desired)) = changes.scaling {
                request = request.scaling_config(
                    NodegroupScalingConfig::builder().min_size(min).max_size(max).desired_size(desired).build(),
                );
            }
            if !changes.add_labels.is_empty() || !changes.remove_labels.is_empty() {
                request = request.labels(
                    UpdateLabelsPayload::builder()
                        .set_add_or_update_labels(
                            Some(changes.add_labels.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
                                .filter(|l: &HashMap<_, _>| !l.is_empty()),
                        )
                        .set_remove_labels(
                            Some(changes.remove_labels.iter().cloned().collect()).filter(|l: &Vec<_>| !l.is_empty()),
                        )
                        .build(),
                );
            }
            if !changes.add_taints.is_empty() || !changes.remove_taints.is_empty() {
                request = request.taints(
                    UpdateTaintsPayload::builder()
                        .set_add_or_update_taints(
                            Some(changes.add_taints.iter().map(sdk_taint).collect()).filter(|t: &Vec<_>| !t.is_empty()),
                        )
                        .set_remove_taints(
                            Some(changes.remove_taints.iter().map(sdk_taint).collect())
                                .filter(|t: &Vec<_>| !t.is_empty()),
                        )
                        .build(),
                );
            }
            request.send().await.map_err(|e| self.call("eks:UpdateNodegroupConfig", name, e))?;
        }
        if !changes.tag.is_empty() {
            self.eks
                .tag_resource()
                .resource_arn(&facts.arn)
                .set_tags(Some(changes.tag.iter().map(|(k, v)| (k.clone(), v.clone())).collect()))
                .send()
                .await
                .map_err(|e| self.call("eks:TagResource", name, e))?;
        }
        if !changes.untag.is_empty() {
            self.eks
                .untag_resource()
                .resource_arn(&facts.arn)
                .set_tag_keys(Some(changes.untag.iter().cloned().collect()))
                .send()
                .await
                .map_err(|e| self.call("eks:UntagResource", name, e))?;
        }
        Ok(())
    }

    pub(super) async fn upgrade_node_group(
        &self,
        cluster: &str,
        name: &str,
        version: Option<&str>,
        release_version: Option<&str>,
    ) -> Result<(), CloudError> {
        self.eks
            .update_nodegroup_version()
            .cluster_name(cluster)
            .nodegroup_name(name)
            .set_version(version.map(String::from))
            .set_release_version(release_version.map(String::from))
            .send()
            .await
            .map_err(|e| self.call("eks:UpdateNodegroupVersion", name, e))?;
        Ok(())
    }

    pub(super) async fn delete_node_group(&self, cluster: &str, name: &str) -> Result<(), CloudError> {
        match self.eks.delete_nodegroup().cluster_name(cluster).nodegroup_name(name).send().await {
            Ok(_) => Ok(()),
            Err(e) if e.code() == Some("ResourceNotFoundException") => Ok(()),
            // Already being deleted.
            Err(e) if e.code() == Some("ResourceInUseException") => Ok(()),
            Err(e) => Err(self.call("eks:DeleteNodegroup", name, e)),
        }
    }
}
