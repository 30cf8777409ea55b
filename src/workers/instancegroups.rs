//! Reconciles InstanceGroups into launch templates, Auto Scaling Groups, node roles and aws-auth
//! entries, with upstream's states and status fields. Rotations go through the booster (the node
//! is marked; the scaler and drainer replace, drain and terminate it), so nodes are drained before
//! they are terminated and a rotation never races the booster's own drains.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use tracing::{info, warn};

use crate::core::{GroupName, InstanceId, NodeName, SignalKind, Timestamp};
use crate::instancegroup::api::{Condition, InstanceGroup, InstanceGroupSpec, InstanceGroupStatus};
use crate::instancegroup::boundaries::InstanceManagerConfig;
use crate::instancegroup::crd_strategy::{self, CrdStep};
use crate::instancegroup::design::{CrdPlan, GroupDesign, Strategy};
use crate::instancegroup::launch::{
    asg_changes, asg_design, drift, foreign_owner, launch_template_data, owner_tags, owner_tags_of, AsgFacts, Resolved,
};
use crate::instancegroup::rolling::{self, NodeFacts, RollingInput, RollingStep};
use crate::instancegroup::validate::{
    managed_role_name, validate, FieldError, FieldErrorKind, IamRules, ObjectInfo, ValidateError,
};
use crate::metrics::{Metrics, ReconcileResult};
use crate::ports::instancegroups::{InstanceGroupStore, StoreError};
use crate::ports::nodegroups::{CloudError, NodeGroupCloud, TemplateFacts};
use crate::ports::{ClusterView, Leadership};
use crate::workers::Clock;

/// Non-terminal states are looked at again after this long (upstream's fixed requeue).
pub(crate) const REQUEUE: Duration = Duration::from_secs(10);
/// Terminal states are re-checked this often, so out-of-band AWS edits are reverted.
pub(crate) const RESYNC: Duration = Duration::from_secs(600);

/// The states upstream writes to `status.currentState`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum State {
    /// Being created.
    InitCreate,
    /// AWS resources being changed.
    ReconcileModifying,
    /// Nodes being rotated.
    InitUpgrade,
    /// Everything matches and every node is Ready.
    Ready,
    /// Invalid spec or a failed step.
    Error,
    /// A rotation is needed but upgrades are locked.
    Locked,
    /// The ASG is being deleted.
    Deleting,
    /// Everything is gone; the finalizer is removed.
    Deleted,
}

impl State {
    /// Every state.
    pub const ALL: [State; 8] = [
        State::InitCreate,
        State::ReconcileModifying,
        State::InitUpgrade,
        State::Ready,
        State::Error,
        State::Locked,
        State::Deleting,
        State::Deleted,
    ];

    /// The name upstream writes.
    pub fn as_str(self) -> &'static str {
        match self {
            State::InitCreate => "InitCreate",
            State::ReconcileModifying => "ReconcileModifying",
            State::InitUpgrade => "InitUpgrade",
            State::Ready => "Ready",
            State::Error => "Error",
            State::Locked => "Locked",
            State::Deleting => "Deleting",
            State::Deleted => "Deleted",
        }
    }

    /// The state a status names, `None` for one no version writes.
    pub fn parse(text: &str) -> Option<State> {
        State::ALL.into_iter().find(|s| s.as_str() == text)
    }
}

impl From<State> for String {
    fn from(state: State) -> String {
        state.as_str().to_string()
    }
}

impl PartialEq<State> for String {
    fn eq(&self, state: &State) -> bool {
        self == state.as_str()
    }
}

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
    #[error("{what} {name} belongs to {owner}: not adopted, changed or deleted")]
    Owned {
        /// `launch template`, `Auto Scaling group`.
        what: &'static str,
        /// Its name.
        name: String,
        /// Whose it is, by its tags.
        owner: String,
    },
}

impl ReconcileError {
    fn transient(&self) -> bool {
        match self {
            ReconcileError::Cloud(e) => e.is_transient(),
            // Refused, not failed: retrying changes nothing until someone acts.
            ReconcileError::Store(StoreError::AwsAuth(_)) | ReconcileError::Owned { .. } => false,
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

/// When to look at a group again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Requeue {
    /// After this long.
    After(Duration),
    /// Only when it changes (or at the next resync).
    OnChange,
    /// A step failed: again with exponential backoff, as controller-runtime does.
    Retry,
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
}

fn rfc3339(at: Timestamp) -> String {
    jiff::Timestamp::from_millisecond(at.as_millis()).map(|t| t.to_string()).unwrap_or_default()
}

fn key(ig: &InstanceGroup) -> (String, String) {
    (ig.metadata.namespace.clone().unwrap_or_default(), ig.metadata.name.clone().unwrap_or_default())
}

/// Sets a condition, keeping its transition time when its status did not change.
fn set_condition(status: &mut InstanceGroupStatus, kind: &str, ok: bool, reason: &str, message: String, now: &str) {
    let value = if ok { "True" } else { "False" };
    let previous = status.conditions.iter().find(|c| c.condition_type == kind);
    let since = match previous {
        Some(c) if c.status == value => c.last_transition_time.clone(),
        _ => now.to_string(),
    };
    status.conditions.retain(|c| c.condition_type != kind);
    status.conditions.push(Condition {
        condition_type: kind.to_string(),
        status: value.to_string(),
        reason: reason.to_string(),
        message,
        last_transition_time: since,
    });
    status.conditions.sort_by(|a, b| a.condition_type.cmp(&b.condition_type));
}

impl<C, S, V> InstanceGroupReconciler<C, S, V>
where
    C: NodeGroupCloud,
    S: InstanceGroupStore,
    V: ClusterView,
{
    fn now(&self) -> String {
        rfc3339((self.clock)())
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
                let message = error_chain(&err);
                warn!(namespace = ?ig.metadata.namespace, name = ?ig.metadata.name, error = %message, "InstanceGroup reconcile failed");
                if !transient {
                    status.current_state = State::Error.into();
                }
                let reason = if transient { "TransientError" } else { "ReconcileFailed" };
                set_condition(&mut status, "Reconciled", false, reason, message.clone(), &self.now());
                self.event(ig, reason, &message, true).await;
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

    async fn event(&self, ig: &InstanceGroup, reason: &str, message: &str, warning: bool) {
        if let Err(e) = self.store.event(ig, reason, message, warning).await {
            warn!(reason, error = %e, "InstanceGroup Event not recorded");
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
        let info = ObjectInfo {
            namespace: &namespace,
            name: &name,
            annotations: ig.metadata.annotations.as_ref(),
            uid: ig.metadata.uid.as_deref(),
        };
        let design = match spec.and_then(|spec| validate(&info, &spec, &self.iam)) {
            Ok(design) => design,
            Err(invalid) => {
                let message = invalid.to_string();
                status.current_state = State::Error.into();
                set_condition(status, "Reconciled", false, invalid.reason(), message.clone(), &self.now());
                if ig
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.iter().find(|c| c.condition_type == "Reconciled"))
                    .map(|c| &c.message)
                    != Some(&message)
                {
                    self.event(ig, invalid.reason(), &message, true).await;
                }
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
        let role = self.cloud.ensure_role(&design.role, &design.cluster_name).await?;
        let vpc = cluster.vpc_id.clone();
        let subnet_ids = self.cloud.subnet_ids(vpc.as_deref(), &design.subnets).await?;
        let security_group_ids = self.cloud.security_group_ids(vpc.as_deref(), &design.security_groups).await?;
        let resolved =
            Resolved { subnet_ids, security_group_ids, instance_profile_arn: role.profile_arn.clone(), cluster };
        let data = launch_template_data(&design, &resolved);
        let mut template_created = String::new();
        let version = match template {
            None => {
                let version = self.cloud.create_launch_template(&design.prefix, &owner_tags(&design), &data).await?;
                info!(%namespace, %name, template = %design.prefix, "launch template created");
                version
            }
            Some(current) => {
                template_created = current.created.clone();
                let drifted = drift(&current.data, &data);
                if drifted.is_empty() {
                    current.latest_version
                } else {
                    let version = self.cloud.create_template_version(&design.prefix, &data).await?;
                    let message = format!("launch template version {version}: {} changed", drifted.join(", "));
                    info!(%namespace, %name, %message, "launch template drift");
                    self.event(ig, "LaunchTemplateUpdated", &message, false).await;
                    version
                }
            }
        };
        status.latest_template_version = version.clone();
        status.nodes_instance_role_arn = role.role_arn.clone().unwrap_or_default();

        let facts = group;
        let running = facts.iter().flat_map(|f| &f.instances).filter_map(|i| i.instance_type.clone()).collect();
        let wanted = asg_design(&design, &resolved, &running);
        status.current_min = Some(design.min_size.into());
        status.current_max = Some(design.max_size.into());
        let facts = match facts {
            None => {
                self.cloud.create_scaling_group(&wanted).await?;
                self.event(ig, "InstanceGroupCreated", &format!("Auto Scaling Group {} created", design.prefix), false)
                    .await;
                if let Some(arn) = &role.role_arn {
                    self.store.upsert_aws_auth(arn).await?;
                }
                status.current_state = State::InitCreate.into();
                set_condition(
                    status,
                    "Reconciled",
                    true,
                    "Created",
                    format!("Auto Scaling Group {} created", design.prefix),
                    &self.now(),
                );
                return Ok(Requeue::After(REQUEUE));
            }
            Some(facts) => facts,
        };
        let changes = asg_changes(&facts, &wanted);
        if !changes.is_empty() {
            self.cloud.update_scaling_group(&wanted, &changes).await?;
        }
        // Before any readiness wait: a hand-edited aws-auth must not lock new nodes out.
        if let Some(arn) = &role.role_arn {
            self.store.upsert_aws_auth(arn).await?;
        }
        set_condition(
            status,
            "Reconciled",
            true,
            "Applied",
            format!("launch template version {version} and the Auto Scaling Group match the spec"),
            &self.now(),
        );
        let launch_id = format!("{template_created}-{version}");
        self.converge_nodes(ig, &design, &facts, (&version, &launch_id), status).await
    }

    /// Rotation and readiness: `InitUpgrade` while drifted nodes remain, `Ready` once none do
    /// and every instance is a Ready node.
    async fn converge_nodes(
        &self,
        ig: &InstanceGroup,
        design: &GroupDesign,
        facts: &AsgFacts,
        (version, launch_id): (&str, &str),
        status: &mut InstanceGroupStatus,
    ) -> Result<Requeue, ReconcileError> {
        let view = self.view.current();
        let mut nodes: BTreeMap<InstanceId, NodeFacts> = BTreeMap::new();
        let mut node_names: HashMap<InstanceId, NodeName> = HashMap::new();
        if let Some(view) = &view {
            for node in view.nodes.values() {
                let Some(instance) = &node.instance else { continue };
                node_names.insert(instance.clone(), node.name.clone());
                nodes.insert(
                    instance.clone(),
                    NodeFacts { ready: node.ready, rotating: false, busy: node.cordoned || node.deleting_by_ca },
                );
            }
            for signal in &view.signals {
                if let Some(facts) = nodes.get_mut(&signal.instance) {
                    if signal.kind == SignalKind::Rotation {
                        facts.rotating = true;
                    } else {
                        facts.busy = true;
                    }
                }
            }
        }
        let live: Vec<_> = facts.instances.iter().filter(|i| !i.lifecycle_state.starts_with("Terminating")).collect();
        let ready = live.iter().filter(|i| nodes.get(&i.id).is_some_and(|n| n.ready)).count();
        let all_ready = view.is_some() && ready == live.len() && live.len() >= design.min_size as usize;
        set_condition(
            status,
            "NodesReady",
            all_ready,
            if all_ready { "NodesReady" } else { "NodesNotReady" },
            format!("{ready} of {} instances are Ready nodes", live.len()),
            &self.now(),
        );
        let converged = |status: &mut InstanceGroupStatus| {
            status.current_state = if all_ready { State::Ready } else { State::ReconcileModifying }.into();
            Ok(if all_ready { Requeue::OnChange } else { Requeue::After(REQUEUE) })
        };
        let drifted = rolling::drifted_instances(&facts.instances, &design.prefix, version);
        if drifted.is_empty() {
            return converged(status);
        }
        if design.lock_upgrades {
            status.current_state = State::Locked.into();
            return Ok(Requeue::OnChange);
        }
        status.current_state = State::InitUpgrade.into();
        let max_unavailable = match &design.strategy {
            Strategy::RollingUpdate { max_unavailable } => *max_unavailable,
            Strategy::Crd(plan) => {
                return match self.crd_step(ig, design, plan, launch_id, status).await? {
                    true => converged(status),
                    false => Ok(if status.current_state == State::Error {
                        Requeue::OnChange
                    } else {
                        Requeue::After(REQUEUE)
                    }),
                };
            }
        };
        if view.is_none() {
            return Ok(Requeue::After(REQUEUE));
        }
        let step = rolling::next_step(&RollingInput {
            instances: &facts.instances,
            template_name: &design.prefix,
            latest_version: version,
            max_unavailable,
            desired: facts.desired,
            nodes: &nodes,
        });
        if let RollingStep::Rotate(ids) = step {
            let at = self.now();
            for id in &ids {
                if let Some(node) = node_names.get(id) {
                    self.store.mark_for_rotation(node.as_str(), &at).await?;
                }
            }
            let message = format!(
                "rotating {} of {} drifted instances: {}",
                ids.len(),
                drifted.len(),
                ids.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
            );
            info!(namespace = ?ig.metadata.namespace, name = ?ig.metadata.name, %message);
            self.event(ig, "RotatingNodes", &message, false).await;
        }
        Ok(Requeue::After(REQUEUE))
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
                status.current_state = State::Error.into();
                set_condition(status, "Reconciled", false, "InvalidSpec", e.to_string(), &self.now());
                self.event(ig, "InvalidSpec", &e.to_string(), true).await;
                return Ok(false);
            }
        };
        let kind = self.store.custom_kind(&plan.crd_name).await?;
        let namespace = wanted["metadata"]["namespace"].as_str().unwrap_or("default").to_string();
        let name = wanted["metadata"]["name"].as_str().unwrap_or_default().to_string();
        let existing = self.store.list_custom(&kind, &namespace).await?;
        let retries = u32::try_from(status.strategy_retry_count.unwrap_or(0)).unwrap_or(0);
        match crd_strategy::next_step(plan, wanted, &design.prefix, launch_id, &existing, retries) {
            CrdStep::Done => {
                status.strategy_retry_count = Some(0);
                return Ok(true);
            }
            CrdStep::Submit(object) => {
                self.store.create_custom(&kind, &object).await?;
                status.strategy_resource_name = name.clone();
                status.strategy_resource_namespace = namespace.clone();
                self.event(ig, "UpgradeSubmitted", &format!("{} {namespace}/{name} submitted", kind.kind), false).await;
            }
            CrdStep::Delete(stale) => {
                for old in &stale {
                    self.store.delete_custom(&kind, &namespace, old).await?;
                }
                self.event(
                    ig,
                    "UpgradeReplaced",
                    &format!("deleted {} for an older configuration", stale.join(", ")),
                    false,
                )
                .await;
            }
            CrdStep::Retry(failed) => {
                self.store.delete_custom(&kind, &namespace, &failed).await?;
                status.strategy_retry_count = Some(i64::from(retries) + 1);
                self.event(
                    ig,
                    "UpgradeRetried",
                    &format!("{failed} failed; retry {}", retries.saturating_add(1)),
                    true,
                )
                .await;
            }
            CrdStep::Failed(message) => {
                status.current_state = State::Error.into();
                set_condition(status, "Reconciled", false, "UpgradeFailed", message.clone(), &self.now());
                self.event(ig, "InstanceGroupUpgradeFailed", &message, true).await;
            }
            CrdStep::Wait(_) => {}
        }
        Ok(false)
    }

    async fn delete(
        &self,
        ig: &InstanceGroup,
        status: &mut InstanceGroupStatus,
        all: &[InstanceGroup],
    ) -> Result<Requeue, ReconcileError> {
        let (namespace, name) = key(ig);
        let configuration = ig.spec.eks.as_ref().map(|e| &e.configuration);
        let prefix = match (&status.active_scaling_group_name, configuration) {
            (asg, _) if !asg.is_empty() => asg.clone(),
            (_, Some(c)) if !c.cluster_name.is_empty() => format!("{}-{namespace}-{name}", c.cluster_name),
            _ => String::new(),
        };
        if !prefix.is_empty() {
            let group = GroupName::from(prefix.as_str());
            let cluster = configuration.map_or("", |c| c.cluster_name.as_str());
            let ours = owner_tags_of(cluster, &namespace, &name, ig.metadata.uid.as_deref());
            let template_name = if status.active_launch_template_name.is_empty() {
                &prefix
            } else {
                &status.active_launch_template_name
            };
            let facts = self.cloud.scaling_group(&group).await?;
            let template = self.cloud.launch_template(template_name).await?;
            if let Err(ReconcileError::Owned { what, name: other, owner }) =
                owned(&ours, &prefix, template.as_ref(), facts.as_ref())
            {
                // Another InstanceGroup's: left whole, and this one lets go of its finalizer.
                let message = format!("{what} {other} belongs to {owner}: left as it is");
                warn!(%namespace, %name, %message, "InstanceGroup deleted without its AWS resources");
                self.event(ig, "ReconcileFailed", &message, true).await;
                status.current_state = State::Deleted.into();
                self.write_deleted(&namespace, &name, status).await?;
                return Ok(Requeue::OnChange);
            }
            if let Some(facts) = facts {
                if facts.status.is_none() {
                    self.cloud.delete_scaling_group(&group).await?;
                    self.event(
                        ig,
                        "InstanceGroupDeleting",
                        &format!("Auto Scaling Group {prefix} force-deleted"),
                        false,
                    )
                    .await;
                }
                status.current_state = State::Deleting.into();
                return Ok(Requeue::After(REQUEUE));
            }
            self.cloud.delete_launch_template(template_name).await?;
            let role_arn = &status.nodes_instance_role_arn;
            let shared = all.iter().any(|other| {
                key(other) != (namespace.clone(), name.clone())
                    && other.status.as_ref().is_some_and(|s| &s.nodes_instance_role_arn == role_arn)
            });
            if !role_arn.is_empty() && !shared {
                self.store.remove_aws_auth(role_arn).await?;
            }
            let own_role = configuration.is_some_and(|c| {
                c.role_name.as_deref().unwrap_or("").is_empty()
                    && c.instance_profile_name.as_deref().unwrap_or("").is_empty()
            });
            if own_role {
                self.cloud.delete_role(&managed_role_name(&prefix)).await?;
            }
        }
        status.current_state = State::Deleted.into();
        self.write_deleted(&namespace, &name, status).await?;
        self.event(
            ig,
            "InstanceGroupDeleted",
            &format!("{prefix} and its launch template, role and aws-auth entry are gone"),
            false,
        )
        .await;
        Ok(Requeue::OnChange)
    }

    /// Writes the `Deleted` status. An object already gone was cleaned up by an earlier pass
    /// that a requeue of its last, stale copy repeats: nothing is left to write.
    async fn write_deleted(&self, namespace: &str, name: &str, status: &InstanceGroupStatus) -> Result<(), StoreError> {
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

/// Refuses what AWS holds under `prefix` when its tags name another owner than `ours`.
fn owned(
    ours: &BTreeMap<String, String>,
    prefix: &str,
    template: Option<&TemplateFacts>,
    group: Option<&AsgFacts>,
) -> Result<(), ReconcileError> {
    if let Some(owner) = group.and_then(|g| foreign_owner(&g.tags, ours, true)) {
        return Err(ReconcileError::Owned { what: "Auto Scaling group", name: prefix.to_string(), owner });
    }
    if let Some(t) = template {
        if let Some(owner) = foreign_owner(&t.tags, ours, false) {
            return Err(ReconcileError::Owned { what: "launch template", name: t.name.clone(), owner });
        }
    }
    Ok(())
}

fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
