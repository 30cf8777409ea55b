//! An in-memory [`NodeGroupCloud`] for the reconciler's unit tests: one EKS cluster, IAM roles
//! with the cluster that owns them, launch templates with their versions and Auto Scaling
//! Groups as AWS reports them back (a mixed-instances group names its template inside its
//! policy). Every write is noted, so a test can say what a reconcile changed. The moto suite
//! (`tests/instancegroups_moto.rs`) covers the SDK adapter; this covers the reconciler's steps.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::core::GroupName;
use crate::instancegroup::cloud::{CloudError, NodeGroupCloud, RoleFacts};
use crate::instancegroup::design::{RoleChoice, RoleOwner};
use crate::instancegroup::launch::{AsgChanges, AsgDesign, AsgFacts, LaunchTemplateData, TemplateFacts};
use crate::instancegroup::node_group::{NodeGroupChanges, NodeGroupFacts, NodeGroupWanted};
use crate::instancegroup::userdata::ClusterInfo;

/// What the cloud holds.
#[derive(Debug, Default)]
pub(crate) struct CloudState {
    /// The one EKS cluster.
    pub(crate) cluster: ClusterInfo,
    /// IAM roles (and their instance profile, same name), with the cluster that made each.
    pub(crate) roles: BTreeMap<String, String>,
    /// Launch templates by name.
    pub(crate) templates: BTreeMap<String, TemplateFacts>,
    /// Auto Scaling Groups by name.
    pub(crate) groups: BTreeMap<GroupName, AsgFacts>,
    /// EKS managed node groups by name, as EKS describes them.
    pub(crate) node_groups: BTreeMap<String, NodeGroupFacts>,
    /// Every write, as `operation name`.
    pub(crate) writes: Vec<String>,
}

/// The in-memory cloud; clones share one state.
#[derive(Debug, Clone, Default)]
pub(crate) struct InMemoryNodeGroups(pub(crate) Arc<Mutex<CloudState>>);

impl InMemoryNodeGroups {
    /// A cloud holding the EKS cluster `name`.
    pub(crate) fn with_cluster(name: &str) -> Self {
        let cloud = InMemoryNodeGroups::default();
        cloud.state().cluster = ClusterInfo {
            name: name.into(),
            endpoint: format!("https://{name}.eks.example"),
            vpc_id: Some("vpc-1".into()),
            ..ClusterInfo::default()
        };
        cloud
    }

    /// The state, for a test to arrange or look at.
    pub(crate) fn state(&self) -> MutexGuard<'_, CloudState> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn wrote(&self, what: String) {
        self.state().writes.push(what);
    }
}

fn missing_node_group(name: &str) -> CloudError {
    CloudError::NotFound { what: "EKS node group", name: name.into(), scope: None }
}

fn not_owned(what: &'static str, name: &str, owner: &str) -> CloudError {
    CloudError::NotOwned { what, name: name.into(), owner: format!("tagged for cluster {owner}") }
}

impl NodeGroupCloud for InMemoryNodeGroups {
    async fn cluster(&self, name: &str) -> Result<ClusterInfo, CloudError> {
        let state = self.state();
        if state.cluster.name != name {
            return Err(CloudError::NotFound { what: "EKS cluster", name: name.into(), scope: None });
        }
        Ok(state.cluster.clone())
    }

    async fn subnet_ids(&self, _vpc: Option<&str>, refs: &[String]) -> Result<Vec<String>, CloudError> {
        Ok(refs.to_vec())
    }

    async fn security_group_ids(&self, _vpc: Option<&str>, refs: &[String]) -> Result<Vec<String>, CloudError> {
        Ok(refs.to_vec())
    }

    async fn ensure_role(&self, role: &RoleChoice) -> Result<RoleFacts, CloudError> {
        let arn = |kind: &str, name: &str| format!("arn:aws:iam::123456789012:{kind}/{name}");
        match role {
            RoleChoice::Managed { name, owner: ours, .. } => {
                let owner = self.state().roles.get(name).cloned();
                match owner {
                    Some(owner) if owner != ours.cluster => return Err(not_owned("IAM role", name, &owner)),
                    Some(_) => {}
                    None => {
                        self.state().roles.insert(name.clone(), ours.cluster.clone());
                        self.wrote(format!("CreateRole {name}"));
                    }
                }
                Ok(RoleFacts { role_arn: Some(arn("role", name)), profile_arn: arn("instance-profile", name) })
            }
            RoleChoice::Existing { role_name, profile_name } => Ok(RoleFacts {
                role_arn: role_name.as_deref().map(|r| arn("role", r)),
                profile_arn: arn("instance-profile", profile_name),
            }),
        }
    }

    async fn delete_role(&self, ours: &RoleOwner) -> Result<(), CloudError> {
        let name = &ours.role_name();
        let owner = self.state().roles.get(name).cloned();
        match owner {
            Some(owner) if owner != ours.cluster => Err(not_owned("IAM role", name, &owner)),
            Some(_) => {
                self.state().roles.remove(name);
                self.wrote(format!("DeleteRole {name}"));
                Ok(())
            }
            None => Ok(()),
        }
    }

    async fn launch_template(&self, name: &str) -> Result<Option<TemplateFacts>, CloudError> {
        Ok(self.state().templates.get(name).cloned())
    }

    async fn create_launch_template(
        &self,
        name: &str,
        owner: &BTreeMap<String, String>,
        data: &LaunchTemplateData,
    ) -> Result<String, CloudError> {
        let facts = TemplateFacts {
            name: name.into(),
            latest_version: "1".into(),
            data: data.clone(),
            created: "2026-11-28T00:00:00Z".into(),
            tags: owner.clone(),
        };
        self.state().templates.insert(name.into(), facts);
        self.wrote(format!("CreateLaunchTemplate {name}"));
        Ok("1".into())
    }

    async fn create_template_version(&self, name: &str, data: &LaunchTemplateData) -> Result<String, CloudError> {
        let version = {
            let mut state = self.state();
            let facts = state.templates.get_mut(name).ok_or_else(|| CloudError::NotFound {
                what: "launch template",
                name: name.into(),
                scope: None,
            })?;
            let next = facts.latest_version.parse::<u32>().unwrap_or(0) + 1;
            facts.latest_version = next.to_string();
            facts.data = data.clone();
            facts.latest_version.clone()
        };
        self.wrote(format!("CreateLaunchTemplateVersion {name} {version}"));
        Ok(version)
    }

    async fn delete_launch_template(&self, name: &str) -> Result<(), CloudError> {
        self.state().templates.remove(name);
        self.wrote(format!("DeleteLaunchTemplate {name}"));
        Ok(())
    }

    async fn scaling_group(&self, name: &GroupName) -> Result<Option<AsgFacts>, CloudError> {
        Ok(self.state().groups.get(name).cloned())
    }

    async fn create_scaling_group(&self, design: &AsgDesign) -> Result<(), CloudError> {
        let name = GroupName::from(design.name.as_str());
        // As AWS reports it back: a mixed-instances group names its template in its policy.
        let mixed = design.mixed_instances.is_some();
        let facts = AsgFacts {
            name: name.clone(),
            min_size: design.min_size,
            max_size: design.max_size,
            desired: design.min_size,
            subnet_ids: design.subnet_ids.clone(),
            tags: design.tags.clone(),
            template_name: (!mixed).then(|| design.template_name.clone()),
            mixed_instances: design.mixed_instances.clone(),
            mixed_template: mixed.then(|| design.template_name.clone()),
            capacity_rebalance: design.capacity_rebalance,
            suspended_processes: design.suspended_processes.clone(),
            metrics: design.metrics.clone(),
            lifecycle_hooks: design.lifecycle_hooks.clone(),
            warm_pool: design.warm_pool,
            instances: Vec::new(),
            status: None,
        };
        self.state().groups.insert(name, facts);
        self.wrote(format!("CreateAutoScalingGroup {}", design.name));
        Ok(())
    }

    async fn update_scaling_group(&self, design: &AsgDesign, changes: &AsgChanges) -> Result<(), CloudError> {
        let name = GroupName::from(design.name.as_str());
        {
            let mut state = self.state();
            let facts = state.groups.get_mut(&name).ok_or_else(|| CloudError::NotFound {
                what: "Auto Scaling Group",
                name: design.name.clone(),
                scope: None,
            })?;
            if changes.update {
                facts.min_size = design.min_size;
                facts.max_size = design.max_size;
                facts.subnet_ids = design.subnet_ids.clone();
                facts.mixed_instances = design.mixed_instances.clone();
                facts.capacity_rebalance = design.capacity_rebalance;
                let mixed = design.mixed_instances.is_some();
                facts.template_name = (!mixed).then(|| design.template_name.clone());
                facts.mixed_template = mixed.then(|| design.template_name.clone());
            }
            facts.tags.extend(changes.set_tags.clone());
            facts.tags.retain(|k, _| !changes.delete_tags.contains(k));
            facts.suspended_processes.extend(changes.suspend.iter().cloned());
            facts.suspended_processes.retain(|p| !changes.resume.contains(p));
            facts.metrics.extend(changes.enable_metrics.iter().cloned());
            facts.metrics.retain(|m| !changes.disable_metrics.contains(m));
            facts.lifecycle_hooks.extend(changes.put_hooks.clone());
            facts.lifecycle_hooks.retain(|h, _| !changes.delete_hooks.contains(h));
            if let Some(pool) = changes.put_warm_pool {
                facts.warm_pool = Some(pool);
            }
            if changes.delete_warm_pool {
                facts.warm_pool = None;
            }
        }
        self.wrote(format!("UpdateAutoScalingGroup {}", design.name));
        Ok(())
    }

    async fn delete_scaling_group(&self, name: &GroupName) -> Result<(), CloudError> {
        self.state().groups.remove(name);
        self.wrote(format!("DeleteAutoScalingGroup {name}"));
        Ok(())
    }

    async fn node_group(&self, cluster: &str, name: &str) -> Result<Option<NodeGroupFacts>, CloudError> {
        self.cluster(cluster).await?;
        Ok(self.state().node_groups.get(name).cloned())
    }

    async fn create_node_group(&self, wanted: &NodeGroupWanted) -> Result<(), CloudError> {
        self.cluster(&wanted.cluster).await?;
        // As EKS answers: created, and `CREATING` until it is looked at again.
        let facts = NodeGroupFacts {
            arn: format!("arn:aws:eks:eu-west-1:123456789012:nodegroup/{}/{}/1", wanted.cluster, wanted.name),
            status: "CREATING".into(),
            min_size: wanted.min_size,
            max_size: wanted.max_size,
            desired_size: wanted.min_size,
            instance_types: wanted.instance_types.clone(),
            capacity_type: wanted.capacity_type.clone(),
            disk_size: wanted.disk_size.or(Some(20)),
            ami_type: wanted.ami_type.clone().or(Some("AL2023_x86_64_STANDARD".into())),
            release_version: wanted.release_version.clone().or(Some("1.31.0-20261101".into())),
            version: wanted.version.clone().or(Some("1.31".into())),
            labels: wanted.labels.clone(),
            taints: wanted.taints.clone(),
            tags: wanted.tags.clone(),
            subnets: wanted.subnets.clone(),
            node_role: wanted.role_arn.clone(),
            ssh_key: wanted.ssh.as_ref().map(|(k, _)| k.clone()),
            ssh_security_groups: wanted.ssh.as_ref().map(|(_, g)| g.clone()).unwrap_or_default(),
            scaling_groups: vec![format!("eks-{}-1", wanted.name)],
            health: vec![],
        };
        self.state().node_groups.insert(wanted.name.clone(), facts);
        self.wrote(format!("CreateNodegroup {}", wanted.name));
        Ok(())
    }

    async fn update_node_group(
        &self,
        _cluster: &str,
        name: &str,
        _facts: &NodeGroupFacts,
        changes: &NodeGroupChanges,
    ) -> Result<(), CloudError> {
        {
            let mut state = self.state();
            let facts = state.node_groups.get_mut(name).ok_or_else(|| missing_node_group(name))?;
            if let Some((min, max, desired)) = changes.scaling {
                (facts.min_size, facts.max_size, facts.desired_size) = (min, max, desired);
            }
            facts.labels.extend(changes.add_labels.clone());
            facts.labels.retain(|k, _| !changes.remove_labels.contains(k));
            facts.taints.retain(|t| !changes.remove_taints.contains(t));
            facts.taints.retain(|t| !changes.add_taints.iter().any(|a| a.key == t.key && a.effect == t.effect));
            facts.taints.extend(changes.add_taints.iter().cloned());
            facts.tags.extend(changes.tag.clone());
            facts.tags.retain(|k, _| !changes.untag.contains(k));
            if changes.config() {
                facts.status = "UPDATING".into();
            }
        }
        if changes.config() {
            self.wrote(format!("UpdateNodegroupConfig {name}"));
        }
        if !changes.tag.is_empty() {
            self.wrote(format!("TagResource {name}"));
        }
        if !changes.untag.is_empty() {
            self.wrote(format!("UntagResource {name}"));
        }
        Ok(())
    }

    async fn upgrade_node_group(
        &self,
        _cluster: &str,
        name: &str,
        version: Option<&str>,
        release_version: Option<&str>,
    ) -> Result<(), CloudError> {
        {
            let mut state = self.state();
            let facts = state.node_groups.get_mut(name).ok_or_else(|| missing_node_group(name))?;
            if let Some(v) = version {
                facts.version = Some(v.into());
            }
            facts.release_version = Some(
                release_version
                    .map_or_else(|| format!("{}.0-latest", facts.version.clone().unwrap_or_default()), String::from),
            );
            facts.status = "UPDATING".into();
        }
        self.wrote(format!("UpdateNodegroupVersion {name}"));
        Ok(())
    }

    async fn delete_node_group(&self, _cluster: &str, name: &str) -> Result<(), CloudError> {
        let deleting = {
            let mut state = self.state();
            match state.node_groups.get_mut(name) {
                Some(facts) if facts.status != "DELETING" => {
                    facts.status = "DELETING".into();
                    true
                }
                _ => false,
            }
        };
        if deleting {
            self.wrote(format!("DeleteNodegroup {name}"));
        }
        Ok(())
    }
}

impl InMemoryNodeGroups {
    /// EKS finishes what it was busy with: `CREATING` and `UPDATING` become `ACTIVE`, and a
    /// `DELETING` node group is gone.
    pub(crate) fn eks_settles(&self) {
        let mut state = self.state();
        state.node_groups.retain(|_, g| g.status != "DELETING");
        for group in state.node_groups.values_mut() {
            if group.status == "CREATING" || group.status == "UPDATING" {
                group.status = "ACTIVE".into();
            }
        }
    }
}
