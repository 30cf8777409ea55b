//! The `eks-managed` provisioner's reconcile and clean-up: an InstanceGroup becomes an EKS
//! managed node group. EKS owns the node group's Auto Scaling group and drains the nodes it
//! replaces or removes, so nothing here touches either; the decisions are `node_group`'s.

use tracing::{info, warn};

use crate::instancegroup::api::{InstanceGroup, InstanceGroupStatus};
use crate::instancegroup::cloud::{CloudError, NodeGroupCloud};
use crate::instancegroup::design::RoleChoice;
use crate::instancegroup::events::GroupEventReason;
use crate::instancegroup::node_group::{
    foreign_node_group, node_group_outcome, node_group_step, NodeGroupDesign, NodeGroupResolved, NodeGroupStep,
    NodeRole,
};
use crate::instancegroup::ownership::owner_tags_of;
use crate::instancegroup::plan::{Owned, Requeue, State, REQUEUE};
use crate::instancegroup::reconciler::{InstanceGroupReconciler, ReconcileError};
use crate::instancegroup::store::InstanceGroupStore;
use crate::ports::ClusterView;

impl<C, S, V> InstanceGroupReconciler<C, S, V>
where
    C: NodeGroupCloud,
    S: InstanceGroupStore,
    V: ClusterView,
{
    /// Brings the node group to `design`, one step per pass.
    pub(crate) async fn apply_node_group(
        &self,
        ig: &InstanceGroup,
        design: &NodeGroupDesign,
        status: &mut InstanceGroupStatus,
    ) -> Result<Requeue, ReconcileError> {
        status.strategy = "managed".into();
        status.lifecycle = design.lifecycle.as_str().to_string();
        status.active_scaling_group_name = design.name.clone();
        status.active_launch_template_name.clear();
        status.latest_template_version.clear();
        let owner =
            owner_tags_of(&design.cluster_name, &design.namespace, &design.instance_group, design.uid.as_deref());
        // Before anything under this name is touched (its role included): whose is it?
        let facts = self.cloud.node_group(&design.cluster_name, &design.name).await?;
        if let Some(owner) = facts.as_ref().and_then(|f| foreign_node_group(f, &owner)) {
            return Err(Owned { what: "EKS node group", name: design.name.clone(), owner }.into());
        }
        let cluster = self.cloud.cluster(&design.cluster_name).await?;
        let role_arn = match &design.role {
            NodeRole::Brought(arn) => arn.clone(),
            NodeRole::Created(choice) => {
                let role = self.cloud.ensure_role(choice).await?;
                let name = match choice {
                    RoleChoice::Managed { name, .. } => name.clone(),
                    RoleChoice::Existing { profile_name, .. } => profile_name.clone(),
                };
                role.role_arn.ok_or(CloudError::NotFound { what: "IAM role", name, scope: None })?
            }
        };
        let vpc = cluster.vpc_id.as_deref();
        let subnets = self.cloud.subnet_ids(vpc, &design.subnets).await?;
        let ssh_security_groups = match &design.ssh {
            Some((_, groups)) if !groups.is_empty() => self.cloud.security_group_ids(vpc, groups).await?,
            _ => Vec::new(),
        };
        let resolved = NodeGroupResolved { role_arn: role_arn.clone(), subnets, ssh_security_groups };
        status.nodes_instance_role_arn = role_arn;
        status.current_min = Some(design.min_size.into());
        status.current_max = Some(design.max_size.into());
        let step = node_group_step(design, &resolved, &owner, facts.as_ref());
        match &step {
            NodeGroupStep::Create(wanted) => {
                self.cloud.create_node_group(wanted).await?;
                info!(node_group = %design.name, "EKS node group created");
            }
            NodeGroupStep::Update(changes) => {
                // Planned only for a node group EKS described.
                if let Some(facts) = &facts {
                    self.cloud.update_node_group(&design.cluster_name, &design.name, facts, changes).await?;
                }
            }
            NodeGroupStep::Upgrade { version, release_version } => {
                self.cloud
                    .upgrade_node_group(
                        &design.cluster_name,
                        &design.name,
                        version.as_deref(),
                        release_version.as_deref(),
                    )
                    .await?;
            }
            NodeGroupStep::Wait(_)
            | NodeGroupStep::Failed(_)
            | NodeGroupStep::Immutable(_)
            | NodeGroupStep::Converged => {}
        }
        let (written, requeue, note) =
            node_group_outcome(&step, design, facts.as_ref(), (ig.status.as_ref(), status), self.now());
        *status = written;
        self.tell(ig, note).await;
        Ok(requeue)
    }

    /// Deletes the node group (EKS drains and terminates its nodes), then a role the daemon
    /// created once EKS no longer needs it. The node group's name follows from this cluster, the
    /// namespace and the name alone, never from the status.
    pub(crate) async fn delete_node_group(
        &self,
        ig: &InstanceGroup,
        status: &mut InstanceGroupStatus,
        all: &[InstanceGroup],
    ) -> Result<Requeue, ReconcileError> {
        let (namespace, name) = super::reconciler::key(ig);
        let prefix = format!("{}-{namespace}-{name}", self.cluster);
        let ours = owner_tags_of(&self.cluster, &namespace, &name, ig.metadata.uid.as_deref());
        let configuration = ig.spec.eks_managed.as_ref().map(|m| &m.configuration);
        if let Some(facts) = self.cloud.node_group(&self.cluster, &prefix).await? {
            if let Some(owner) = foreign_node_group(&facts, &ours) {
                let message = format!("EKS node group {prefix} belongs to {owner}: left as it is");
                warn!(%namespace, %name, %message, "InstanceGroup deleted without its node group");
                self.event(ig, GroupEventReason::ReconcileFailed, &message).await;
                status.current_state = State::Deleted.into();
                self.write_deleted(&namespace, &name, status).await?;
                return Ok(Requeue::OnChange);
            }
            if facts.status != "DELETING" {
                self.cloud.delete_node_group(&self.cluster, &prefix).await?;
                let message = format!("EKS node group {prefix} deleting; EKS drains its nodes");
                self.event(ig, GroupEventReason::InstanceGroupDeleting, &message).await;
            }
            status.current_state = State::Deleting.into();
            return Ok(Requeue::After(REQUEUE));
        }
        let role_arn = status.nodes_instance_role_arn.clone();
        let created_role = configuration.is_some_and(|c| c.node_role.as_deref().unwrap_or("").is_empty());
        let shared = all.iter().any(|other| {
            super::reconciler::key(other) != (namespace.clone(), name.clone())
                && other.status.as_ref().is_some_and(|s| !role_arn.is_empty() && s.nodes_instance_role_arn == role_arn)
        });
        if created_role && !shared {
            self.delete_created_role(ig).await?;
        }
        status.current_state = State::Deleted.into();
        self.write_deleted(&namespace, &name, status).await?;
        let message = format!("EKS node group {prefix} and its role are gone");
        self.event(ig, GroupEventReason::InstanceGroupDeleted, &message).await;
        Ok(Requeue::OnChange)
    }
}

#[cfg(test)]
mod tests {
    use crate::instancegroup::api::InstanceGroup;
    use crate::instancegroup::reconciler::Cleanup;
    use crate::instancegroup::test_rig::{pass, world};

    const NAME: &str = "prod-euw1-instance-manager-batch-managed";

    fn group() -> InstanceGroup {
        let mut ig: InstanceGroup = serde_yaml::from_str(include_str!("testdata/managed-spot.yaml")).unwrap();
        ig.metadata.uid = Some("uid-1".into());
        ig
    }

    #[tokio::test]
    async fn an_eks_managed_group_is_created_waits_for_eks_and_is_ready_without_touching_an_asg_or_aws_auth() {
        let (r, cloud, store) = world();
        let (writes, events, state) = pass(&r, &cloud, &store, &group()).await;
        let role = r.role_owner(&group()).role_name();
        assert_eq!(writes, [format!("CreateRole {role}"), format!("CreateNodegroup {NAME}")]);
        assert_eq!((events.as_slice(), state.as_str()), (&["InstanceGroupCreated".to_string()][..], "InitCreate"));
        let created = cloud.state().node_groups[NAME].clone();
        assert_eq!((created.capacity_type.as_str(), created.desired_size), ("SPOT", 1));
        assert_eq!(created.node_role, format!("arn:aws:iam::123456789012:role/{role}"));
        let (writes, _, state) = pass(&r, &cloud, &store, &group()).await;
        assert!(writes.is_empty(), "nothing is written while EKS is CREATING: {writes:?}");
        assert_eq!(state, "InitCreate");
        cloud.eks_settles();
        let (writes, events, state) = pass(&r, &cloud, &store, &group()).await;
        assert!(writes.is_empty() && events.is_empty(), "{writes:?} {events:?}");
        assert_eq!(state, "Ready");
        let status = store.get("instance-manager", "batch-managed").unwrap().status.unwrap();
        assert_eq!(
            (status.strategy.as_str(), status.lifecycle.as_str(), status.provisioner.as_str()),
            ("managed", "spot", "eks-managed")
        );
        assert_eq!(status.active_scaling_group_name, NAME);
        assert!(cloud.state().groups.is_empty(), "no Auto Scaling group is created or touched");
        let aws_auth = store.0.lock().unwrap().aws_auth.clone();
        assert!(
            aws_auth.as_ref().is_some_and(|d| d.get("mapRoles").is_none()),
            "EKS maps a managed node group's role itself: {aws_auth:?}"
        );
    }

    #[tokio::test]
    async fn a_new_max_size_and_labels_edited_in_eks_are_one_config_update_then_ready() {
        let (r, cloud, store) = world();
        pass(&r, &cloud, &store, &group()).await;
        cloud.eks_settles();
        pass(&r, &cloud, &store, &group()).await;
        cloud.state().node_groups.get_mut(NAME).unwrap().labels.insert("by-hand".into(), "1".into());
        let mut scaled = group();
        scaled.spec.eks_managed.as_mut().unwrap().max_size = Some(9);
        let (writes, events, state) = pass(&r, &cloud, &store, &scaled).await;
        assert_eq!(writes, [format!("UpdateNodegroupConfig {NAME}")]);
        assert_eq!((events.as_slice(), state.as_str()), (&["NodeGroupUpdated".to_string()][..], "ReconcileModifying"));
        let group = cloud.state().node_groups[NAME].clone();
        assert_eq!((group.max_size, group.desired_size), (9, 1), "desired is Cluster Autoscaler's");
        assert!(!group.labels.contains_key("by-hand"));
        cloud.eks_settles();
        assert_eq!(pass(&r, &cloud, &store, &scaled).await.2, "Ready");
    }

    #[tokio::test]
    async fn a_changed_instance_type_is_refused_by_name_and_a_version_is_one_upgrade() {
        let (r, cloud, store) = world();
        pass(&r, &cloud, &store, &group()).await;
        cloud.eks_settles();
        let mut retyped = group();
        retyped.spec.eks_managed.as_mut().unwrap().configuration.instance_type = "c6i.large".into();
        let (writes, events, state) = pass(&r, &cloud, &store, &retyped).await;
        assert!(writes.is_empty(), "{writes:?}");
        assert_eq!((events.as_slice(), state.as_str()), (&["InvalidSpec".to_string()][..], "Error"));
        let status = store.get("instance-manager", "batch-managed").unwrap().status.unwrap();
        assert!(status.conditions.iter().any(|c| c.message.contains("instanceType(s)")), "{status:?}");
        let mut upgraded = group();
        upgraded.spec.eks_managed.as_mut().unwrap().configuration.version = Some("1.32".into());
        let (writes, events, state) = pass(&r, &cloud, &store, &upgraded).await;
        assert_eq!(writes, [format!("UpdateNodegroupVersion {NAME}")]);
        assert_eq!((events.as_slice(), state.as_str()), (&["NodeGroupUpgrading".to_string()][..], "InitUpgrade"));
    }

    #[tokio::test]
    async fn deletion_deletes_the_node_group_waits_until_eks_has_removed_it_then_the_role() {
        let (r, cloud, store) = world();
        pass(&r, &cloud, &store, &group()).await;
        cloud.eks_settles();
        pass(&r, &cloud, &store, &group()).await;
        let ig = store.get("instance-manager", "batch-managed").unwrap();
        assert!(matches!(r.clean_up(&ig, std::slice::from_ref(&ig)).await, Cleanup::Again(_)));
        assert!(matches!(r.clean_up(&ig, std::slice::from_ref(&ig)).await, Cleanup::Again(_)), "EKS still deleting");
        assert_eq!(cloud.state().writes.iter().filter(|w| w.starts_with("DeleteNodegroup")).count(), 1);
        let role = r.role_owner(&ig).role_name();
        assert!(cloud.state().roles.contains_key(&role), "the role stays while EKS deletes the node group");
        cloud.eks_settles();
        assert_eq!(r.clean_up(&ig, std::slice::from_ref(&ig)).await, Cleanup::Done);
        let state = cloud.state();
        assert!(state.node_groups.is_empty() && state.roles.is_empty(), "{state:?}");
        assert_eq!(state.writes.last().map(String::as_str), Some(format!("DeleteRole {role}").as_str()));
    }

    #[tokio::test]
    async fn a_made_group_cannot_switch_provisioner_and_is_still_deleted_as_made() {
        let (r, cloud, store) = world();
        pass(&r, &cloud, &store, &group()).await;
        cloud.eks_settles();
        let mut switched = group();
        switched.spec.provisioner = "eks".into();
        let (writes, events, state) = pass(&r, &cloud, &store, &switched).await;
        assert!(writes.is_empty(), "{writes:?}");
        assert_eq!((events.as_slice(), state.as_str()), (&["InvalidSpec".to_string()][..], "Error"));
        let ig = store.get("instance-manager", "batch-managed").unwrap();
        assert_eq!(ig.status.as_ref().unwrap().provisioner, "eks-managed", "the status keeps what made it");
        let mut switched = ig.clone();
        switched.spec.provisioner = "eks".into();
        assert!(matches!(r.clean_up(&switched, std::slice::from_ref(&switched)).await, Cleanup::Again(_)));
        assert_eq!(cloud.state().writes.last().map(String::as_str), Some(format!("DeleteNodegroup {NAME}").as_str()));
    }

    #[tokio::test]
    async fn a_node_group_another_instancegroup_owns_under_the_name_is_never_changed_or_deleted() {
        let (r, cloud, store) = world();
        pass(&r, &cloud, &store, &group()).await;
        cloud.eks_settles();
        cloud
            .state()
            .node_groups
            .get_mut(NAME)
            .unwrap()
            .tags
            .insert("instancegroups.keikoproj.io/Namespace".into(), "other".into());
        let mut scaled = group();
        scaled.spec.eks_managed.as_mut().unwrap().max_size = Some(9);
        let (writes, events, state) = pass(&r, &cloud, &store, &scaled).await;
        assert!(writes.is_empty(), "{writes:?}");
        assert_eq!((events.as_slice(), state.as_str()), (&["ReconcileFailed".to_string()][..], "Error"));
        let ig = store.get("instance-manager", "batch-managed").unwrap();
        assert_eq!(r.clean_up(&ig, std::slice::from_ref(&ig)).await, Cleanup::Done);
        assert!(cloud.state().node_groups.contains_key(NAME), "left as it is");
        assert!(
            cloud.state().roles.contains_key(&r.role_owner(&ig).role_name()),
            "and so is the role it may still use"
        );
    }
}
