//! Reconciles InstanceGroups into launch templates, Auto Scaling Groups, node roles and aws-auth
//! entries, with upstream's states and status fields. Rotations go through the booster (the node
//! is marked; the scaler and drainer replace, drain and terminate it), so nodes are drained before
//! they are terminated and a rotation never races the booster's own drains. The decisions are
//! `instancegroup::plan`'s; this observes what AWS and the cluster hold, asks it, and makes the
//! calls its steps name.

use std::collections::BTreeMap;
use std::sync::Arc;

use tracing::{info, warn};

use crate::core::{GroupName, Timestamp};
use crate::instancegroup::api::{InstanceGroup, InstanceGroupSpec, InstanceGroupStatus};
use crate::instancegroup::boundaries::InstanceManagerConfig;
use crate::instancegroup::cloud::{CloudError, NodeGroupCloud};
use crate::instancegroup::crd_strategy::{self, CrdStep};
use crate::instancegroup::design::RoleOwner;
use crate::instancegroup::design::{CrdPlan, GroupDesign};
use crate::instancegroup::events::GroupEventReason;
use crate::instancegroup::launch::{owner_tags, AsgFacts, Resolved};
use crate::instancegroup::ownership::owner_tags_of;
use crate::instancegroup::plan::{
    applied, cleanup_step, converge, crd_outcome, created, fail, group_step, owned, refuse, template_step, CleanupSeen,
    CleanupStep, CrdResource, GroupStep, NodeStep, NodesSeen, Note, Owned, TemplateStep,
};
pub use crate::instancegroup::plan::{Requeue, State, REQUEUE, RESYNC};
use crate::instancegroup::provisioner::{validate_design, Design};
use crate::instancegroup::store::{GroupRef, InstanceGroupStore, StoreError};
use crate::instancegroup::validate::{FieldError, FieldErrorKind, IamRules, ObjectInfo, ValidateError};
use crate::metrics::{Metrics, ReconcileResult};
use crate::ports::Clock;
use crate::ports::{ClusterView, Leadership};

/// Reconciling one InstanceGroup failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReconcileError {
    /// An AWS call.
    #[error(transparent)]
    Cloud(#[from] CloudError),
    /// A Kubernetes call.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// An AWS resource under this InstanceGroup's name belongs to another.
    #[error(transparent)]
    Owned(#[from] Owned),
}

impl ReconcileError {
    fn transient(&self) -> bool {
        match self {
            ReconcileError::Cloud(e) => e.is_transient(),
            // Refused, not failed: retrying changes nothing until someone acts.
            ReconcileError::Store(StoreError::AwsAuth(_)) | ReconcileError::Owned(_) => false,
            ReconcileError::Store(_) => true,
        }
    }
}

/// Where a deletion stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cleanup {
    /// Everything the group made is gone (or was never its own): its finalizer may go.
    Done,
    /// Not yet (its Auto Scaling group is going, or a step failed): look again.
    Again(Requeue),
}

/// What one reconcile does.
#[derive(Clone, Copy)]
enum Work<'a> {
    /// Brings AWS to the spec, with the ConfigMap when it applies.
    Apply(Option<&'a InstanceManagerConfig>),
    /// Deletes what the group made; the others share aws-auth roles.
    CleanUp(&'a [InstanceGroup]),
}

/// The InstanceGroup reconciler. `C`: AWS; `S`: Kubernetes; `V`: the watched cluster (nodes).
pub struct InstanceGroupReconciler<C, S, V> {
    /// AWS.
    pub cloud: C,
    /// InstanceGroups, ConfigMaps, aws-auth, node marks, Events.
    pub store: S,
    /// Nodes and signals.
    pub view: V,
    /// Wall clock.
    pub clock: Clock,
    /// Only the leader reconciles.
    pub leadership: Leadership,
    /// Reconcile results and states.
    pub metrics: Arc<Metrics>,
    /// What an InstanceGroup may ask of IAM.
    pub iam: IamRules,
    /// The cluster this daemon serves (`--cluster-name`): an InstanceGroup naming another is
    /// refused.
    pub cluster: String,
}

pub(crate) fn key(ig: &InstanceGroup) -> (String, String) {
    (ig.metadata.namespace.clone().unwrap_or_default(), ig.metadata.name.clone().unwrap_or_default())
}

impl<C, S, V> InstanceGroupReconciler<C, S, V>
where
    C: NodeGroupCloud,
    S: InstanceGroupStore,
    V: ClusterView,
{
    pub(crate) fn now(&self) -> Timestamp {
        (self.clock)()
    }

    /// The spec with the ConfigMap applied, and the hash to record. `config` is `None` when there
    /// is none or the namespace opted out.
    fn effective_spec(
        ig: &InstanceGroup,
        config: Option<&InstanceManagerConfig>,
    ) -> (Result<InstanceGroupSpec, ValidateError>, String) {
        let (namespace, name) = key(ig);
        let Some(config) = config else { return (Ok(ig.spec.clone()), String::new()) };
        let object = serde_json::to_value(ig).expect("an InstanceGroup always serialises");
        let applied = config.apply(&object, ig.metadata.annotations.as_ref().unwrap_or(&BTreeMap::new()));
        let spec = serde_json::from_value::<InstanceGroupSpec>(applied["spec"].clone()).map_err(|e| ValidateError {
            namespace,
            name,
            errors: vec![FieldError {
                field: "spec".into(),
                message: format!("the instance-manager ConfigMap defaults do not fit the schema: {e}"),
                kind: FieldErrorKind::Invalid,
            }],
        });
        (spec, config.md5.clone())
    }

    /// Brings AWS and `status` to `ig`'s spec, with the ConfigMap `config` (unless its namespace
    /// opted out). The controller calls it once the group carries our finalizer and is not being
    /// deleted.
    pub async fn reconcile(&self, ig: &InstanceGroup, config: Option<&InstanceManagerConfig>) -> Requeue {
        let config = match config {
            Some(config) => match self.store.namespace_excluded(&key(ig).0).await {
                Ok(excluded) => Some(config).filter(|_| !excluded),
                Err(e) => {
                    warn!(error = %e, "reading the namespace's opt-out failed");
                    return Requeue::Retry;
                }
            },
            None => None,
        };
        self.reconcile_status(ig, Work::Apply(config)).await.0
    }

    /// Deletes what `ig` made (its Auto Scaling group first, then its launch template, role and
    /// aws-auth entry, unless another of `all` maps the same role) and writes `Deleted`. The
    /// controller calls it while our finalizer holds the deleted group, and removes the finalizer
    /// on [`Cleanup::Done`].
    pub async fn clean_up(&self, ig: &InstanceGroup, all: &[InstanceGroup]) -> Cleanup {
        match self.reconcile_status(ig, Work::CleanUp(all)).await {
            (Requeue::OnChange, status) if status.current_state == State::Deleted => Cleanup::Done,
            (requeue, _) => Cleanup::Again(requeue),
        }
    }

    async fn reconcile_status(&self, ig: &InstanceGroup, work: Work<'_>) -> (Requeue, InstanceGroupStatus) {
        let before = ig.status.clone().unwrap_or_default();
        let mut status = before.clone();
        let outcome = match work {
            Work::CleanUp(all) => self.delete(ig, &mut status, all).await,
            Work::Apply(config) => self.apply(ig, config, &mut status).await,
        };
        let requeue = match outcome {
            Ok(requeue) => {
                let result =
                    if status.current_state == State::Error { ReconcileResult::Invalid } else { ReconcileResult::Ok };
                self.metrics.instancegroups.reconciled(result);
                requeue
            }
            Err(err) => {
                let transient = err.transient();
                self.metrics.instancegroups.reconciled(if transient {
                    ReconcileResult::Transient
                } else {
                    ReconcileResult::Failed
                });
                let message = crate::ports::error_chain(&err);
                warn!(namespace = ?ig.metadata.namespace, name = ?ig.metadata.name, error = %message, "InstanceGroup reconcile failed");
                let note;
                (status, note) = fail(&status, transient, message, self.now());
                self.tell(ig, Some(note)).await;
                Requeue::Retry
            }
        };
        // `Deleted` was written before the finalizer went; the object may be gone now.
        if status != before && status.current_state != State::Deleted {
            let (namespace, name) = key(ig);
            if let Err(e) = self.store.patch_status(&namespace, &name, &status).await {
                warn!(%namespace, %name, error = %e, "InstanceGroup status not written");
                return (Requeue::After(REQUEUE), status);
            }
        }
        (requeue, status)
    }

    pub(crate) async fn tell(&self, ig: &InstanceGroup, note: Option<Note>) {
        if let Some(Note { reason, message }) = note {
            self.event(ig, reason, &message).await;
        }
    }

    pub(crate) async fn event(&self, ig: &InstanceGroup, reason: GroupEventReason, message: &str) {
        let (namespace, name) = key(ig);
        let group = GroupRef { namespace, name, uid: ig.metadata.uid.clone() };
        if let Err(e) = self.store.event(&group, reason.as_str(), message, reason.is_warning()).await {
            warn!(reason = reason.as_str(), error = %e, "InstanceGroup Event not recorded");
        }
    }

    async fn apply(
        &self,
        ig: &InstanceGroup,
        config: Option<&InstanceManagerConfig>,
        status: &mut InstanceGroupStatus,
    ) -> Result<Requeue, ReconcileError> {
        let (namespace, name) = key(ig);
        let (spec, md5) = Self::effective_spec(ig, config);
        status.config_md5 = md5;
        status.provisioner =
            spec.as_ref().map_or(ig.spec.provisioner.to_ascii_lowercase(), |s| s.provisioner.to_ascii_lowercase());
        if let Some(made) = switched_provisioner(ig.status.as_ref(), &status.provisioner) {
            let message = format!(
                "spec.provisioner: {} on an InstanceGroup whose {made} resources exist; a group cannot move between \
                 provisioners (create another InstanceGroup, then delete this one)",
                status.provisioner
            );
            status.provisioner = made;
            let note;
            (*status, note) = refuse(ig.status.as_ref(), status, GroupEventReason::InvalidSpec, message, self.now());
            self.tell(ig, note).await;
            return Ok(Requeue::OnChange);
        }
        let info = ObjectInfo {
            namespace: &namespace,
            name: &name,
            annotations: ig.metadata.annotations.as_ref(),
            uid: ig.metadata.uid.as_deref(),
            cluster: &self.cluster,
        };
        let design = match spec.and_then(|spec| validate_design(&info, &spec, &self.iam)) {
            Ok(Design::SelfManaged(design)) => design,
            Ok(Design::Managed(design)) => return self.apply_node_group(ig, &design, status).await,
            Err(invalid) => {
                let note;
                (*status, note) = refuse(ig.status.as_ref(), status, invalid.reason(), invalid.to_string(), self.now());
                self.tell(ig, note).await;
                return Ok(Requeue::OnChange);
            }
        };
        status.strategy = design.strategy.name().to_string();
        status.lifecycle = design.lifecycle.as_str().to_string();
        status.active_scaling_group_name = design.prefix.clone();
        status.active_launch_template_name = design.prefix.clone();
        // Before anything under this name is touched (its role included): whose is it?
        let template = self.cloud.launch_template(&design.prefix).await?;
        let group = self.cloud.scaling_group(&GroupName::from(design.prefix.as_str())).await?;
        owned(&owner_tags(&design), &design.prefix, template.as_ref(), group.as_ref())?;
        let cluster = self.cloud.cluster(&design.cluster_name).await?;
        let role = self.cloud.ensure_role(&design.role).await?;
        let vpc = cluster.vpc_id.clone();
        let subnet_ids = self.cloud.subnet_ids(vpc.as_deref(), &design.subnets).await?;
        let security_group_ids = self.cloud.security_group_ids(vpc.as_deref(), &design.security_groups).await?;
        let resolved =
            Resolved { subnet_ids, security_group_ids, instance_profile_arn: role.profile_arn.clone(), cluster };
        let version = match template_step(&design, &resolved, template.as_ref()) {
            TemplateStep::Current(version) => version,
            TemplateStep::Create(data) => {
                let version = self.cloud.create_launch_template(&design.prefix, &owner_tags(&design), &data).await?;
                info!(%namespace, %name, template = %design.prefix, "launch template created");
                version
            }
            TemplateStep::NewVersion(data, drifted) => {
                let version = self.cloud.create_template_version(&design.prefix, &data).await?;
                let message = format!("launch template version {version}: {} changed", drifted.join(", "));
                info!(%namespace, %name, %message, "launch template drift");
                self.event(ig, GroupEventReason::LaunchTemplateUpdated, &message).await;
                version
            }
        };
        status.latest_template_version = version.clone();
        status.nodes_instance_role_arn = role.role_arn.clone().unwrap_or_default();
        status.current_min = Some(design.min_size.into());
        status.current_max = Some(design.max_size.into());
        let facts = match group_step(&design, &resolved, group.as_ref()) {
            GroupStep::Create(wanted) => {
                self.cloud.create_scaling_group(&wanted).await?;
                let message = format!("Auto Scaling Group {} created", design.prefix);
                self.event(ig, GroupEventReason::InstanceGroupCreated, &message).await;
                if let Some(arn) = &role.role_arn {
                    self.store.upsert_aws_auth(arn).await?;
                }
                let requeue;
                (*status, requeue) = created(status, &design.prefix, self.now());
                return Ok(requeue);
            }
            GroupStep::Update(wanted, changes, facts) => {
                if !changes.is_empty() {
                    self.cloud.update_scaling_group(&wanted, &changes).await?;
                }
                facts
            }
        };
        // Before any readiness wait: a hand-edited aws-auth must not lock new nodes out.
        if let Some(arn) = &role.role_arn {
            self.store.upsert_aws_auth(arn).await?;
        }
        *status = applied(status, &version, self.now());
        let launch_id = format!("{}-{version}", template.map(|t| t.created).unwrap_or_default());
        self.converge_nodes(ig, &design, facts, (&version, &launch_id), status).await
    }

    /// Rotation and readiness, as [`converge`] decides them: marks the nodes to rotate, or runs
    /// the `crd` strategy's step.
    async fn converge_nodes(
        &self,
        ig: &InstanceGroup,
        design: &GroupDesign,
        facts: &AsgFacts,
        (version, launch_id): (&str, &str),
        status: &mut InstanceGroupStatus,
    ) -> Result<Requeue, ReconcileError> {
        let seen = self.view.current().map(|view| NodesSeen::new(view.nodes.values(), &view.signals));
        let convergence = converge(design, facts, version, seen.as_ref(), status, self.now());
        *status = convergence.status;
        match convergence.step {
            NodeStep::Converged | NodeStep::Locked | NodeStep::Wait => {}
            NodeStep::Crd(plan, (done_state, done_requeue)) => {
                return Ok(match self.crd_step(ig, design, &plan, launch_id, status).await? {
                    true => {
                        status.current_state = done_state.into();
                        done_requeue
                    }
                    false if status.current_state == State::Error => Requeue::OnChange,
                    false => Requeue::After(REQUEUE),
                });
            }
            NodeStep::Rotate { nodes, of } => {
                let at = crate::instancegroup::plan::rfc3339(self.now());
                for (_, node) in &nodes {
                    self.store.mark_for_rotation(node.as_str(), &at).await?;
                }
                let ids: Vec<String> = nodes.iter().map(|(id, _)| id.to_string()).collect();
                let message = format!("rotating {} of {of} drifted instances: {}", ids.len(), ids.join(", "));
                info!(namespace = ?ig.metadata.namespace, name = ?ig.metadata.name, %message);
                self.event(ig, GroupEventReason::RotatingNodes, &message).await;
            }
        }
        Ok(convergence.requeue)
    }

    /// One step of the `crd` strategy; true once its resource succeeded.
    async fn crd_step(
        &self,
        ig: &InstanceGroup,
        design: &GroupDesign,
        plan: &CrdPlan,
        launch_id: &str,
        status: &mut InstanceGroupStatus,
    ) -> Result<bool, ReconcileError> {
        let wanted = match crd_strategy::resource(plan, ig, &design.prefix, launch_id) {
            Ok(wanted) => wanted,
            Err(e) => {
                let note;
                (*status, note) = refuse(None, status, GroupEventReason::InvalidSpec, e.to_string(), self.now());
                self.tell(ig, note).await;
                return Ok(false);
            }
        };
        let kind = self.store.custom_kind(&plan.crd_name).await?;
        let namespace = wanted["metadata"]["namespace"].as_str().unwrap_or("default").to_string();
        let name = wanted["metadata"]["name"].as_str().unwrap_or_default().to_string();
        let existing = self.store.list_custom(&kind, &namespace).await?;
        let retries = u32::try_from(status.strategy_retry_count.unwrap_or(0)).unwrap_or(0);
        let step = crd_strategy::next_step(plan, wanted, &design.prefix, launch_id, &existing, retries);
        match &step {
            CrdStep::Submit(object) => self.store.create_custom(&kind, object).await?,
            CrdStep::Delete(stale) => {
                for old in stale {
                    self.store.delete_custom(&kind, &namespace, old).await?;
                }
            }
            CrdStep::Retry(failed) => self.store.delete_custom(&kind, &namespace, failed).await?,
            CrdStep::Done | CrdStep::Failed(_) | CrdStep::Wait(_) => {}
        }
        let resource = CrdResource { kind: &kind.kind, namespace: &namespace, name: &name };
        let note;
        (*status, note) = crd_outcome(&step, resource, retries, status, self.now());
        self.tell(ig, note).await;
        Ok(step == CrdStep::Done)
    }

    async fn delete(
        &self,
        ig: &InstanceGroup,
        status: &mut InstanceGroupStatus,
        all: &[InstanceGroup],
    ) -> Result<Requeue, ReconcileError> {
        // What was made goes by the provisioner that made it: a spec switched afterwards is
        // refused, and the status keeps the provisioner it was made by.
        let spec_provisioner = ig.spec.provisioner.to_ascii_lowercase();
        let made_by = switched_provisioner(Some(status), &spec_provisioner).unwrap_or(spec_provisioner);
        if made_by == "eks-managed" {
            return self.delete_node_group(ig, status, all).await;
        }
        let (namespace, name) = key(ig);
        let configuration = ig.spec.eks.as_ref().map(|e| &e.configuration);
        // Never from the status, which whoever may write `instancegroups/status` writes: the
        // names follow from this cluster, the namespace and the name alone.
        let prefix = format!("{}-{namespace}-{name}", self.cluster);
        let group = GroupName::from(prefix.as_str());
        let ours = owner_tags_of(&self.cluster, &namespace, &name, ig.metadata.uid.as_deref());
        let facts = self.cloud.scaling_group(&group).await?;
        let template = self.cloud.launch_template(&prefix).await?;
        let role_arn = status.nodes_instance_role_arn.clone();
        let own_role_name = self.role_owner(ig).role_name();
        let seen = CleanupSeen {
            ours: &ours,
            prefix: &prefix,
            group: facts.as_ref(),
            template: template.as_ref(),
            role_arn: &role_arn,
            named_role: configuration.and_then(|c| c.role_name.as_deref()).filter(|r| !r.is_empty()),
            role_shared: all.iter().any(|other| {
                key(other) != (namespace.clone(), name.clone())
                    && other
                        .status
                        .as_ref()
                        .is_some_and(|s| !role_arn.is_empty() && s.nodes_instance_role_arn == role_arn)
            }),
            own_role: configuration.is_some_and(|c| {
                c.role_name.as_deref().unwrap_or("").is_empty()
                    && c.instance_profile_name.as_deref().unwrap_or("").is_empty()
            }),
            own_role_name: &own_role_name,
        };
        let step = cleanup_step(&seen);
        // Written once the step's calls are made: a failed call leaves the state as it was.
        let state = step.state().into();
        match step {
            CleanupStep::LetGo(Owned { what, name: other, owner }) => {
                // Another InstanceGroup's: left whole, and this one lets go of its finalizer.
                let message = format!("{what} {other} belongs to {owner}: left as it is");
                warn!(%namespace, %name, %message, "InstanceGroup deleted without its AWS resources");
                self.event(ig, GroupEventReason::ReconcileFailed, &message).await;
                status.current_state = state;
                self.write_deleted(&namespace, &name, status).await?;
                return Ok(Requeue::OnChange);
            }
            CleanupStep::DeleteGroup => {
                self.cloud.delete_scaling_group(&group).await?;
                let message = format!("Auto Scaling Group {prefix} force-deleted");
                self.event(ig, GroupEventReason::InstanceGroupDeleting, &message).await;
                status.current_state = state;
                return Ok(Requeue::After(REQUEUE));
            }
            CleanupStep::WaitForGroup => {
                status.current_state = state;
                return Ok(Requeue::After(REQUEUE));
            }
            CleanupStep::DeleteRest { unmap_role, delete_role } => {
                self.cloud.delete_launch_template(&prefix).await?;
                if let Some(role_arn) = unmap_role {
                    self.store.remove_aws_auth(&role_arn).await?;
                }
                if delete_role {
                    self.delete_created_role(ig).await?;
                }
            }
        }
        status.current_state = State::Deleted.into();
        self.write_deleted(&namespace, &name, status).await?;
        let message = format!("{prefix} and its launch template, role and aws-auth entry are gone");
        self.event(ig, GroupEventReason::InstanceGroupDeleted, &message).await;
        Ok(Requeue::OnChange)
    }

    /// The owner of the role the daemon creates for `ig`.
    pub(crate) fn role_owner(&self, ig: &InstanceGroup) -> RoleOwner {
        let (namespace, name) = key(ig);
        let info = ObjectInfo {
            namespace: &namespace,
            name: &name,
            annotations: None,
            uid: ig.metadata.uid.as_deref(),
            cluster: &self.cluster,
        };
        self.iam.role_owner(&self.cluster, &info)
    }

    /// Deletes the role the daemon created for `ig`; one that is not its own by every ownership
    /// tag is left as it is, and said so.
    pub(crate) async fn delete_created_role(&self, ig: &InstanceGroup) -> Result<(), ReconcileError> {
        match self.cloud.delete_role(&self.role_owner(ig)).await {
            Ok(()) => Ok(()),
            Err(foreign @ CloudError::NotOwned { .. }) => {
                let (namespace, name) = key(ig);
                let message = format!("{foreign}: left as it is");
                warn!(%namespace, %name, %message, "InstanceGroup deleted without its node role");
                self.event(ig, GroupEventReason::ReconcileFailed, &message).await;
                Ok(())
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Writes the `Deleted` status. An object already gone was cleaned up by an earlier pass
    /// that a requeue of its last, stale copy repeats: nothing is left to write.
    pub(crate) async fn write_deleted(
        &self,
        namespace: &str,
        name: &str,
        status: &InstanceGroupStatus,
    ) -> Result<(), StoreError> {
        match self.store.patch_status(namespace, name, status).await {
            Ok(()) | Err(StoreError::Gone(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// The boundaries ConfigMap as it is now: `None` when there is none, `last` (the last good
    /// one stays in force) when it cannot be read or parsed.
    pub async fn boundaries(&self, last: Option<InstanceManagerConfig>) -> Option<InstanceManagerConfig> {
        match self.store.config_map().await {
            Ok(None) => None,
            Ok(Some(data)) => match InstanceManagerConfig::parse(&data) {
                Ok(config) => Some(config),
                Err(e) => {
                    warn!(error = %e, "instance-manager ConfigMap ignored; keeping the last good one");
                    last
                }
            },
            Err(e) => {
                warn!(error = %e, "reading the instance-manager ConfigMap failed");
                last
            }
        }
    }

    /// Reports how many InstanceGroups are in each state (`status.currentState`, `Init` before
    /// the first).
    pub fn report_states<'g>(&self, groups: impl Iterator<Item = &'g InstanceGroup>) {
        self.metrics.instancegroups.states(groups.map(|ig| {
            ig.status.as_ref().map(|s| s.current_state.as_str()).filter(|s| !s.is_empty()).unwrap_or("Init")
        }));
    }
}

/// The provisioner `before` says made this group's resources, when `wanted` is the other one.
fn switched_provisioner(before: Option<&InstanceGroupStatus>, wanted: &str) -> Option<String> {
    let before = before.filter(|s| !s.active_scaling_group_name.is_empty())?;
    let known = |p: &str| p == "eks" || p == "eks-managed";
    (known(&before.provisioner) && known(wanted) && before.provisioner != wanted).then(|| before.provisioner.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::instancegroup::ownership::TAG_CLUSTER_NAME;

    use crate::instancegroup::test_rig::{pass, world};

    /// The example InstanceGroup of the docs with a fixed image and `instance_type`.
    fn group(instance_type: &str) -> InstanceGroup {
        let mut ig: InstanceGroup = serde_yaml::from_str(include_str!("testdata/batch-spot.yaml")).unwrap();
        let configuration = &mut ig.spec.eks.as_mut().unwrap().configuration;
        configuration.image = "ami-0123456789abcdef0".into();
        configuration.instance_type = instance_type.into();
        ig.metadata.uid = Some("uid-1".into());
        ig
    }

    #[tokio::test]
    async fn a_new_instancegroup_makes_its_role_template_and_group_once_and_a_second_pass_writes_nothing() {
        let (r, cloud, store) = world();
        let (writes, events, _) = pass(&r, &cloud, &store, &group("m6i.2xlarge")).await;
        let prefix = "prod-euw1-instance-manager-batch-spot";
        let role = r.role_owner(&group("m6i.2xlarge")).role_name();
        assert!(role.starts_with(prefix) && role != prefix, "{role}");
        assert_eq!(
            writes,
            [
                format!("CreateRole {role}"),
                format!("CreateLaunchTemplate {prefix}"),
                format!("CreateAutoScalingGroup {prefix}"),
            ]
        );
        assert_eq!(events, ["InstanceGroupCreated"]);
        let asg = cloud.state().groups[&GroupName::from(prefix)].clone();
        assert_eq!(asg.tags.get(TAG_CLUSTER_NAME).map(String::as_str), Some("prod-euw1"));
        assert_eq!((asg.min_size, asg.max_size), (1, 30));
        let (writes, events, _) = pass(&r, &cloud, &store, &group("m6i.2xlarge")).await;
        assert!(writes.is_empty() && events.is_empty(), "{writes:?} {events:?}");
    }

    #[tokio::test]
    async fn a_changed_instance_type_is_one_new_template_version_and_one_group_update_told_once() {
        let (r, cloud, store) = world();
        pass(&r, &cloud, &store, &group("m6i.2xlarge")).await;
        let (writes, events, _) = pass(&r, &cloud, &store, &group("m7i.2xlarge")).await;
        // The primary type is also the mixed-instances policy's first override.
        let prefix = "prod-euw1-instance-manager-batch-spot";
        assert_eq!(
            writes,
            [format!("CreateLaunchTemplateVersion {prefix} 2"), format!("UpdateAutoScalingGroup {prefix}")]
        );
        assert_eq!(events, ["LaunchTemplateUpdated"]);
        let (writes, _, _) = pass(&r, &cloud, &store, &group("m7i.2xlarge")).await;
        assert!(writes.is_empty(), "{writes:?}");
    }

    #[tokio::test]
    async fn a_group_another_cluster_owns_under_the_same_name_is_never_changed() {
        let (r, cloud, store) = world();
        pass(&r, &cloud, &store, &group("m6i.2xlarge")).await;
        for asg in cloud.state().groups.values_mut() {
            asg.tags.insert(TAG_CLUSTER_NAME.into(), "prod-use1".into());
        }
        let (writes, events, _) = pass(&r, &cloud, &store, &group("m7i.2xlarge")).await;
        assert!(writes.is_empty(), "{writes:?}");
        assert_eq!(events, ["ReconcileFailed"]);
        let status = store.get("instance-manager", "batch-spot").and_then(|g| g.status).unwrap();
        assert_eq!(status.current_state, String::from(State::Error));
    }

    #[tokio::test]
    async fn deletion_removes_the_group_then_the_template_and_the_role_and_says_so() {
        let (r, cloud, store) = world();
        let ig = group("m6i.2xlarge");
        pass(&r, &cloud, &store, &ig).await;
        let mut passes = 0;
        loop {
            let ig = store.get("instance-manager", "batch-spot").unwrap();
            passes += 1;
            match r.clean_up(&ig, std::slice::from_ref(&ig)).await {
                Cleanup::Done => break,
                Cleanup::Again(_) if passes < 5 => {}
                Cleanup::Again(requeue) => panic!("not done after {passes} passes: {requeue:?}"),
            }
        }
        let state = cloud.state();
        assert!(state.groups.is_empty() && state.templates.is_empty() && state.roles.is_empty(), "{state:?}");
        let prefix = "prod-euw1-instance-manager-batch-spot";
        assert_eq!(
            state.writes[3..],
            [
                format!("DeleteAutoScalingGroup {prefix}"),
                format!("DeleteLaunchTemplate {prefix}"),
                format!("DeleteRole {}", r.role_owner(&group("m6i.2xlarge")).role_name()),
            ]
        );
        let reasons: Vec<String> = store.0.lock().unwrap().events.iter().map(|(_, r, ..)| r.clone()).collect();
        assert_eq!(reasons.last().map(String::as_str), Some("InstanceGroupDeleted"));
    }
}
