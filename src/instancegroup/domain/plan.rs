//! The InstanceGroup reconciler's decisions, without I/O. Given a validated design and what AWS
//! and the cluster hold, these say what to do to the launch template and the Auto Scaling group,
//! which nodes to rotate, what a deletion does next, and the state, conditions and requeue that
//! follow. `instancegroup::reconciler` observes, asks, and carries the steps out; the order is the
//! one observation needs: resources first (a new template version is numbered by AWS), then nodes
//! against the version now latest.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use super::api::{Condition, InstanceGroupStatus};
use super::crd_strategy::CrdStep;
use super::design::{CrdPlan, GroupDesign, Strategy};
use super::events::GroupEventReason;
use super::launch::{
    asg_changes, asg_design, drift, launch_template_data, AsgChanges, AsgDesign, AsgFacts, LaunchTemplateData,
    Resolved, TemplateFacts,
};
use super::ownership::foreign_owner;
use super::rolling::{self, NodeFacts, RollingInput, RollingStep};
use crate::core::{InstanceId, Node, NodeName, Signal, SignalKind, Timestamp};

/// Non-terminal states are looked at again after this long (upstream's fixed requeue).
pub const REQUEUE: Duration = Duration::from_secs(10);
/// Terminal states are re-checked this often, so out-of-band AWS edits are reverted.
pub const RESYNC: Duration = Duration::from_secs(600);

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

/// `at` as the RFC 3339 text conditions carry.
pub(crate) fn rfc3339(at: Timestamp) -> String {
    jiff::Timestamp::from_millisecond(at.as_millis()).map(|t| t.to_string()).unwrap_or_default()
}

/// Sets a condition, keeping its transition time when its status did not change.
pub(crate) fn set_condition(
    status: &mut InstanceGroupStatus,
    kind: &str,
    ok: bool,
    reason: &str,
    message: String,
    now: Timestamp,
) {
    let value = if ok { "True" } else { "False" };
    let previous = status.conditions.iter().find(|c| c.condition_type == kind);
    let since = match previous {
        Some(c) if c.status == value => c.last_transition_time.clone(),
        _ => rfc3339(now),
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

/// An AWS resource under an InstanceGroup's name whose tags name another owner.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} {name} belongs to {owner}: not adopted, changed or deleted")]
pub struct Owned {
    /// `launch template`, `Auto Scaling group`.
    pub what: &'static str,
    /// Its name.
    pub name: String,
    /// Whose it is, by its tags.
    pub owner: String,
}

/// Refuses what AWS holds under `prefix` when its tags name another owner than `ours`.
pub(crate) fn owned(
    ours: &BTreeMap<String, String>,
    prefix: &str,
    template: Option<&TemplateFacts>,
    group: Option<&AsgFacts>,
) -> Result<(), Owned> {
    if let Some(owner) = group.and_then(|g| foreign_owner(&g.tags, ours, true)) {
        return Err(Owned { what: "Auto Scaling group", name: prefix.to_string(), owner });
    }
    if let Some(t) = template {
        if let Some(owner) = foreign_owner(&t.tags, ours, false) {
            return Err(Owned { what: "launch template", name: t.name.clone(), owner });
        }
    }
    Ok(())
}

/// What the launch template needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TemplateStep {
    /// There is none: create it.
    Create(LaunchTemplateData),
    /// Its latest version differs in these fields: add a version.
    NewVersion(LaunchTemplateData, Vec<&'static str>),
    /// Its latest version is the design's.
    Current(String),
}

/// The template's step: compared with its latest version, field by field.
pub(crate) fn template_step(
    design: &GroupDesign,
    resolved: &Resolved,
    current: Option<&TemplateFacts>,
) -> TemplateStep {
    let data = launch_template_data(design, resolved);
    match current {
        None => TemplateStep::Create(data),
        Some(current) => {
            let drifted = drift(&current.data, &data);
            if drifted.is_empty() {
                TemplateStep::Current(current.latest_version.clone())
            } else {
                TemplateStep::NewVersion(data, drifted)
            }
        }
    }
}

/// What the Auto Scaling group needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum GroupStep<'f> {
    /// There is none: create it (then map the role; see [`created`]).
    Create(AsgDesign),
    /// It exists as `facts` say: apply these changes (none when it matches); DesiredCapacity is
    /// never among them.
    Update(AsgDesign, Box<AsgChanges>, &'f AsgFacts),
}

/// The status once the group was created: `InitCreate`, and a look again soon.
pub(crate) fn created(status: &InstanceGroupStatus, group: &str, now: Timestamp) -> (InstanceGroupStatus, Requeue) {
    let mut status = status.clone();
    status.current_state = State::InitCreate.into();
    set_condition(&mut status, "Reconciled", true, "Created", format!("Auto Scaling Group {group} created"), now);
    (status, Requeue::After(REQUEUE))
}

/// The status once the template (at `version`) and the group match the spec.
pub(crate) fn applied(status: &InstanceGroupStatus, version: &str, now: Timestamp) -> InstanceGroupStatus {
    let mut status = status.clone();
    let message = format!("launch template version {version} and the Auto Scaling Group match the spec");
    set_condition(&mut status, "Reconciled", true, "Applied", message, now);
    status
}

/// The group's step. The instance types running now stay in the mixed policy's overrides, so a
/// changed type list never strands running nodes outside the group's policy.
pub(crate) fn group_step<'f>(design: &GroupDesign, resolved: &Resolved, facts: Option<&'f AsgFacts>) -> GroupStep<'f> {
    let running = facts.iter().flat_map(|f| &f.instances).filter_map(|i| i.instance_type.clone()).collect();
    let wanted = asg_design(design, resolved, &running);
    match facts {
        None => GroupStep::Create(wanted),
        Some(facts) => {
            let changes = asg_changes(facts, &wanted);
            GroupStep::Update(wanted, Box::new(changes), facts)
        }
    }
}

/// What the cluster says about the nodes, by instance.
#[derive(Debug, Clone, Default)]
pub(crate) struct NodesSeen {
    facts: BTreeMap<InstanceId, NodeFacts>,
    names: HashMap<InstanceId, NodeName>,
}

impl NodesSeen {
    /// From the watched nodes and signals: ready, rotating (our mark), busy (cordoned, deleted by
    /// Cluster Autoscaler, or at risk for another reason).
    pub(crate) fn new<'a>(nodes: impl Iterator<Item = &'a Node>, signals: &[Signal]) -> Self {
        let mut seen = NodesSeen::default();
        for node in nodes {
            let Some(instance) = &node.instance else { continue };
            seen.names.insert(instance.clone(), node.name.clone());
            seen.facts.insert(
                instance.clone(),
                NodeFacts { ready: node.ready, rotating: false, busy: node.cordoned || node.deleting_by_ca },
            );
        }
        for signal in signals {
            if let Some(facts) = seen.facts.get_mut(&signal.instance) {
                if signal.kind == SignalKind::Rotation {
                    facts.rotating = true;
                } else {
                    facts.busy = true;
                }
            }
        }
        seen
    }
}

/// What to do about the nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum NodeStep {
    /// No node runs an older configuration.
    Converged,
    /// Some do, and upgrades are locked.
    Locked,
    /// Some do: the `crd` strategy's resource replaces them; once it succeeded the group is in
    /// the state and requeue given.
    Crd(CrdPlan, (State, Requeue)),
    /// Mark these nodes for rotation (the booster replaces, drains and terminates them); `of`
    /// drifted instances in all.
    Rotate { nodes: Vec<(InstanceId, NodeName)>, of: usize },
    /// Nothing to do now.
    Wait,
}

/// The node side of a reconcile: the status with its `NodesReady` condition and state, the step
/// and when to look again.
#[derive(Debug, Clone)]
pub(crate) struct Convergence {
    /// The status to write.
    pub status: InstanceGroupStatus,
    /// What to do.
    pub step: NodeStep,
    /// When to look again.
    pub requeue: Requeue,
}

/// Rotation and readiness against the latest template `version`: `InitUpgrade` while drifted
/// nodes remain, `Ready` once none do and every live instance is a Ready node (`nodes` is `None`
/// until the watches have synced: nothing is Ready, nothing rotates).
pub(crate) fn converge(
    design: &GroupDesign,
    facts: &AsgFacts,
    version: &str,
    nodes: Option<&NodesSeen>,
    status: &InstanceGroupStatus,
    now: Timestamp,
) -> Convergence {
    let mut status = status.clone();
    let live: Vec<_> = facts.instances.iter().filter(|i| !i.lifecycle_state.starts_with("Terminating")).collect();
    let ready = live.iter().filter(|i| nodes.and_then(|n| n.facts.get(&i.id)).is_some_and(|n| n.ready)).count();
    let all_ready = nodes.is_some() && ready == live.len() && live.len() >= design.min_size.max(0) as usize;
    set_condition(
        &mut status,
        "NodesReady",
        all_ready,
        if all_ready { "NodesReady" } else { "NodesNotReady" },
        format!("{ready} of {} instances are Ready nodes", live.len()),
        now,
    );
    let converged = if all_ready {
        (State::Ready, Requeue::OnChange)
    } else {
        (State::ReconcileModifying, Requeue::After(REQUEUE))
    };
    let drifted = rolling::drifted_instances(&facts.instances, &design.prefix, version);
    let (state, step, requeue) = if drifted.is_empty() {
        (converged.0, NodeStep::Converged, converged.1)
    } else if design.lock_upgrades {
        (State::Locked, NodeStep::Locked, Requeue::OnChange)
    } else {
        match (&design.strategy, nodes) {
            (Strategy::Crd(plan), _) => {
                (State::InitUpgrade, NodeStep::Crd(plan.clone(), converged), Requeue::After(REQUEUE))
            }
            (Strategy::RollingUpdate { .. }, None) => (State::InitUpgrade, NodeStep::Wait, Requeue::After(REQUEUE)),
            (Strategy::RollingUpdate { max_unavailable }, Some(seen)) => {
                let step = rolling::next_step(&RollingInput {
                    instances: &facts.instances,
                    template_name: &design.prefix,
                    latest_version: version,
                    max_unavailable: *max_unavailable,
                    desired: facts.desired,
                    nodes: &seen.facts,
                });
                let step = match step {
                    RollingStep::Rotate(ids) => NodeStep::Rotate {
                        nodes: ids
                            .into_iter()
                            .filter_map(|id| Some((id.clone(), seen.names.get(&id)?.clone())))
                            .collect(),
                        of: drifted.len(),
                    },
                    RollingStep::Done | RollingStep::Wait(_) => NodeStep::Wait,
                };
                (State::InitUpgrade, step, Requeue::After(REQUEUE))
            }
        }
    };
    status.current_state = state.into();
    Convergence { status, step, requeue }
}

/// A Kubernetes Event the plan asks for, about the group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Note {
    /// Its reason, which also says Warning or Normal.
    pub reason: GroupEventReason,
    /// What happened.
    pub message: String,
}

/// A spec that cannot be reconciled as it is: `Error`, and the `Reconciled` condition saying
/// why. The Event is told once per message (`told` is the status as last written), not at every
/// resync.
pub(crate) fn refuse(
    told: Option<&InstanceGroupStatus>,
    status: &InstanceGroupStatus,
    reason: GroupEventReason,
    message: String,
    now: Timestamp,
) -> (InstanceGroupStatus, Option<Note>) {
    let mut status = status.clone();
    status.current_state = State::Error.into();
    set_condition(&mut status, "Reconciled", false, reason.as_str(), message.clone(), now);
    let last = told.and_then(|s| s.conditions.iter().find(|c| c.condition_type == "Reconciled"));
    let note = (last.map(|c| &c.message) != Some(&message)).then_some(Note { reason, message });
    (status, note)
}

/// A step that failed: a transient failure (throttled, unavailable, timed out) keeps the state,
/// any other is `Error`; the `Reconciled` condition and a Warning say which.
pub(crate) fn fail(
    status: &InstanceGroupStatus,
    transient: bool,
    message: String,
    now: Timestamp,
) -> (InstanceGroupStatus, Note) {
    let mut status = status.clone();
    if !transient {
        status.current_state = State::Error.into();
    }
    let reason = if transient { GroupEventReason::TransientError } else { GroupEventReason::ReconcileFailed };
    set_condition(&mut status, "Reconciled", false, reason.as_str(), message.clone(), now);
    (status, Note { reason, message })
}

/// The `crd` strategy's resource, as the status and Events tell it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CrdResource<'a> {
    /// Its kind.
    pub kind: &'a str,
    /// Its namespace.
    pub namespace: &'a str,
    /// Its name.
    pub name: &'a str,
}

/// What a `crd` step writes to the status and tells, once its calls are made; `retries` are the
/// retries used before it.
pub(crate) fn crd_outcome(
    step: &CrdStep,
    resource: CrdResource<'_>,
    retries: u32,
    status: &InstanceGroupStatus,
    now: Timestamp,
) -> (InstanceGroupStatus, Option<Note>) {
    let mut status = status.clone();
    let CrdResource { kind, namespace, name } = resource;
    let note = |reason, message| Some(Note { reason, message });
    let told = match step {
        CrdStep::Done => {
            status.strategy_retry_count = Some(0);
            None
        }
        CrdStep::Submit(_) => {
            status.strategy_resource_name = name.to_string();
            status.strategy_resource_namespace = namespace.to_string();
            note(GroupEventReason::UpgradeSubmitted, format!("{kind} {namespace}/{name} submitted"))
        }
        CrdStep::Delete(stale) => {
            note(GroupEventReason::UpgradeReplaced, format!("deleted {} for an older configuration", stale.join(", ")))
        }
        CrdStep::Retry(failed) => {
            status.strategy_retry_count = Some(i64::from(retries) + 1);
            note(GroupEventReason::UpgradeRetried, format!("{failed} failed; retry {}", retries.saturating_add(1)))
        }
        CrdStep::Failed(message) => {
            status.current_state = State::Error.into();
            set_condition(&mut status, "Reconciled", false, "UpgradeFailed", message.clone(), now);
            note(GroupEventReason::InstanceGroupUpgradeFailed, message.clone())
        }
        CrdStep::Wait(_) => None,
    };
    (status, told)
}

/// What a deletion does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CleanupStep {
    /// A resource under the name belongs to another InstanceGroup: leave everything as it is
    /// and let the object go.
    LetGo(Owned),
    /// Force-delete the Auto Scaling group (its instances go with it), then look again.
    DeleteGroup,
    /// The group is still going: look again.
    WaitForGroup,
    /// The group is gone: delete the template, unmap the role unless another group maps it,
    /// delete the role when we created it; then the object may go.
    DeleteRest {
        /// The role ARN to unmap from aws-auth.
        unmap_role: Option<String>,
        /// Whether the role is ours to delete.
        delete_role: bool,
    },
}

impl CleanupStep {
    /// The state the group is in once the step is carried out.
    pub(crate) fn state(&self) -> State {
        match self {
            CleanupStep::DeleteGroup | CleanupStep::WaitForGroup => State::Deleting,
            CleanupStep::LetGo(_) | CleanupStep::DeleteRest { .. } => State::Deleted,
        }
    }
}

/// What a deletion finds: the resources under the group's name and whose they are.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CleanupSeen<'a> {
    /// The tags that name this InstanceGroup.
    pub ours: &'a BTreeMap<String, String>,
    /// The name of the group (and, by default, of the template).
    pub prefix: &'a str,
    /// The Auto Scaling group, if it exists.
    pub group: Option<&'a AsgFacts>,
    /// The launch template, if it exists.
    pub template: Option<&'a TemplateFacts>,
    /// The role the status says is mapped (may be empty). The status is written by whoever may
    /// write `instancegroups/status`: it is unmapped only when it names this group's own role.
    pub role_arn: &'a str,
    /// The existing role the spec names (`roleName`), if any.
    pub named_role: Option<&'a str>,
    /// Whether another InstanceGroup's status names the same role.
    pub role_shared: bool,
    /// Whether the spec names neither a role nor a profile (the role is the one we created).
    pub own_role: bool,
    /// The name of the role the daemon creates for this InstanceGroup.
    pub own_role_name: &'a str,
}

/// The deletion's next step.
pub(crate) fn cleanup_step(seen: &CleanupSeen<'_>) -> CleanupStep {
    if let Err(owned) = owned(seen.ours, seen.prefix, seen.template, seen.group) {
        return CleanupStep::LetGo(owned);
    }
    match seen.group {
        // A status means a deletion is under way already.
        Some(group) if group.status.is_none() => CleanupStep::DeleteGroup,
        Some(_) => CleanupStep::WaitForGroup,
        None => CleanupStep::DeleteRest {
            unmap_role: Some(seen.role_arn.to_string())
                .filter(|r| !r.is_empty() && !seen.role_shared && names_this_groups_role(r, seen)),
            // Never one another InstanceGroup's nodes run with.
            delete_role: seen.own_role && !seen.role_shared,
        },
    }
}

/// Whether `arn` is the role this InstanceGroup's nodes run with: the one the reconciler created
/// (under `/spots-booster/`, named after the prefix) or the existing one its spec names. Anything
/// else in the status was written by someone else, and unmapping it would cut another group's
/// nodes off the cluster.
fn names_this_groups_role(arn: &str, seen: &CleanupSeen<'_>) -> bool {
    let Some((_, path_and_name)) = arn.split_once(":role/") else { return false };
    if seen.own_role {
        return path_and_name == format!("spots-booster/{}", seen.own_role_name);
    }
    seen.named_role.is_some_and(|named| {
        let named = named.rsplit(['/', ':']).next().unwrap_or(named);
        path_and_name.rsplit('/').next() == Some(named)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::instancegroup::design::MaxUnavailable;
    use crate::instancegroup::launch::tests::{design, facts_for, resolved};
    use crate::instancegroup::launch::{owner_tags, GroupInstance};

    const NOW: Timestamp = Timestamp::from_millis(1_795_255_200_000);

    fn instance(id: &str, version: &str) -> GroupInstance {
        GroupInstance {
            id: id.into(),
            template_name: Some(design().prefix),
            template_version: Some(version.into()),
            instance_type: None,
            lifecycle_state: "InService".into(),
        }
    }

    /// The design's group, running `instances`, desired as many.
    fn running(instances: Vec<GroupInstance>) -> AsgFacts {
        let d = design();
        let wanted = asg_design(&d, &resolved(), &Default::default());
        let desired = i32::try_from(instances.len()).expect("a few instances");
        AsgFacts { instances, desired, ..facts_for(&wanted) }
    }

    fn nodes(names: &[&str]) -> NodesSeen {
        let nodes: Vec<Node> = names.iter().map(|n| Node::test(n, "g")).collect();
        NodesSeen::new(nodes.iter(), &[])
    }

    fn template(version: &str, data: LaunchTemplateData) -> TemplateFacts {
        TemplateFacts {
            name: design().prefix,
            latest_version: version.into(),
            data,
            created: "20261126000000".into(),
            tags: owner_tags(&design()),
        }
    }

    #[test]
    fn a_template_is_created_kept_or_versioned_by_its_drift() {
        let (d, r) = (design(), resolved());
        let data = launch_template_data(&d, &r);
        assert_eq!(template_step(&d, &r, None), TemplateStep::Create(data.clone()));
        assert_eq!(template_step(&d, &r, Some(&template("3", data.clone()))), TemplateStep::Current("3".into()));
        let old = LaunchTemplateData { image_id: "ami-old".into(), ..data.clone() };
        assert_eq!(template_step(&d, &r, Some(&template("3", old))), TemplateStep::NewVersion(data, vec!["image"]));
    }

    #[test]
    fn a_group_is_created_or_updated_and_its_running_types_stay_in_its_policy() {
        let (d, r) = (design(), resolved());
        assert!(matches!(group_step(&d, &r, None), GroupStep::Create(_)));
        let mut facts = running(vec![instance("i-1", "1")]);
        let GroupStep::Update(_, changes, _) = group_step(&d, &r, Some(&facts)) else { panic!("the group exists") };
        assert!(changes.is_empty(), "{changes:?}");
        facts.instances[0].instance_type = Some("c5.9xlarge".into());
        let GroupStep::Update(wanted, ..) = group_step(&d, &r, Some(&facts)) else { panic!("the group exists") };
        let overrides = &wanted.mixed_instances.expect("a spot design is mixed").overrides;
        assert!(overrides.iter().any(|(t, _)| t == "c5.9xlarge"), "{overrides:?}");
    }

    #[test]
    fn ready_when_every_live_instance_is_a_ready_node_and_none_drifted() {
        let d = design();
        let facts = running(vec![instance("i-a", "2"), instance("i-b", "2")]);
        let before = InstanceGroupStatus::default();
        let c = converge(&d, &facts, "2", Some(&nodes(&["a", "b"])), &before, NOW);
        assert_eq!(
            (c.status.current_state.as_str(), c.step, c.requeue),
            ("Ready", NodeStep::Converged, Requeue::OnChange)
        );
        let ready = c.status.conditions.iter().find(|c| c.condition_type == "NodesReady").unwrap();
        assert_eq!((ready.status.as_str(), ready.message.as_str()), ("True", "2 of 2 instances are Ready nodes"));

        let c = converge(&d, &facts, "2", Some(&nodes(&["a"])), &before, NOW);
        assert_eq!((c.status.current_state.as_str(), c.requeue), ("ReconcileModifying", Requeue::After(REQUEUE)));
        let c = converge(&d, &facts, "2", None, &before, NOW);
        assert_eq!(c.status.current_state, State::ReconcileModifying, "nothing is Ready before the watches sync");
    }

    #[test]
    fn drifted_nodes_rotate_a_batch_at_a_time_by_name_unless_upgrades_are_locked() {
        let mut d = design();
        d.strategy = Strategy::RollingUpdate { max_unavailable: MaxUnavailable::Count(1) };
        let facts = running(vec![instance("i-a", "1"), instance("i-b", "1"), instance("i-c", "2")]);
        let seen = nodes(&["a", "b", "c"]);
        let c = converge(&d, &facts, "2", Some(&seen), &InstanceGroupStatus::default(), NOW);
        assert_eq!(c.status.current_state, State::InitUpgrade);
        assert_eq!(c.step, NodeStep::Rotate { nodes: vec![("i-a".into(), "a".into())], of: 2 });

        let c = converge(&d, &facts, "2", None, &InstanceGroupStatus::default(), NOW);
        assert_eq!((c.step, c.requeue), (NodeStep::Wait, Requeue::After(REQUEUE)), "no node marked before the sync");

        d.lock_upgrades = true;
        let c = converge(&d, &facts, "2", Some(&seen), &InstanceGroupStatus::default(), NOW);
        assert_eq!(
            (c.status.current_state.as_str(), c.step, c.requeue),
            ("Locked", NodeStep::Locked, Requeue::OnChange)
        );
    }

    #[test]
    fn a_deletion_deletes_the_group_waits_for_it_then_the_rest_and_never_another_owners() {
        let ours = owner_tags(&design());
        let facts = running(vec![]);
        let seen = |group, role_shared| CleanupSeen {
            ours: &ours,
            prefix: "p",
            group,
            template: None,
            role_arn: "arn:aws:iam::1:role/spots-booster/p",
            named_role: None,
            role_shared,
            own_role: true,
            own_role_name: "p",
        };
        assert_eq!(cleanup_step(&seen(Some(&facts), false)), CleanupStep::DeleteGroup);
        let going = AsgFacts { status: Some("Delete in progress".into()), ..facts.clone() };
        assert_eq!(cleanup_step(&seen(Some(&going), false)), CleanupStep::WaitForGroup);
        assert_eq!(
            (CleanupStep::DeleteGroup.state(), CleanupStep::WaitForGroup.state()),
            (State::Deleting, State::Deleting)
        );
        assert_eq!(
            cleanup_step(&seen(None, false)),
            CleanupStep::DeleteRest {
                unmap_role: Some("arn:aws:iam::1:role/spots-booster/p".into()),
                delete_role: true
            }
        );
        assert_eq!(cleanup_step(&seen(None, false)).state(), State::Deleted);
        assert_eq!(
            cleanup_step(&seen(None, true)),
            CleanupStep::DeleteRest { unmap_role: None, delete_role: false },
            "a role another group runs with stays mapped, and stays"
        );
        let mut theirs = facts.clone();
        theirs.tags.insert(crate::instancegroup::ownership::TAG_NAMESPACE.into(), "other".into());
        assert!(matches!(
            cleanup_step(&seen(Some(&theirs), false)),
            CleanupStep::LetGo(Owned { what: "Auto Scaling group", .. })
        ));
    }

    #[test]
    fn a_deletion_unmaps_only_the_role_its_nodes_ran_with_whatever_the_status_names() {
        let ours = owner_tags(&design());
        let seen = |role_arn, own_role, named_role| CleanupSeen {
            ours: &ours,
            prefix: "prod-team-batch",
            group: None,
            template: None,
            role_arn,
            named_role,
            role_shared: false,
            own_role,
            own_role_name: "prod-team-batch",
        };
        let unmapped = |s: CleanupSeen<'_>| match cleanup_step(&s) {
            CleanupStep::DeleteRest { unmap_role, .. } => unmap_role,
            other => panic!("{other:?}"),
        };
        let created = "arn:aws:iam::1:role/spots-booster/prod-team-batch";
        assert_eq!(unmapped(seen(created, true, None)).as_deref(), Some(created));
        // A status a tenant rewrote: the platform's shared node role, or another group's.
        for forged in [
            "arn:aws:iam::1:role/eks-shared-nodes",
            "arn:aws:iam::1:role/spots-booster/prod-team-other",
            "arn:aws:iam::1:role/spots-booster/prod-team-batch-2",
            "not an arn",
        ] {
            assert_eq!(unmapped(seen(forged, true, None)), None, "{forged}");
        }
        // An existing role the spec names (by name or ARN) is the one its nodes ran with.
        let existing = "arn:aws:iam::1:role/platform/batch-nodes";
        assert_eq!(unmapped(seen(existing, false, Some("batch-nodes"))).as_deref(), Some(existing));
        assert_eq!(unmapped(seen(existing, false, Some(existing))).as_deref(), Some(existing));
        assert_eq!(unmapped(seen("arn:aws:iam::1:role/eks-shared-nodes", false, Some("batch-nodes"))), None);
    }

    #[test]
    fn a_refusal_is_an_error_told_once_per_message() {
        let before = InstanceGroupStatus { current_state: "Ready".into(), ..Default::default() };
        let (status, note) = refuse(Some(&before), &before, GroupEventReason::InvalidSpec, "spec.x: bad".into(), NOW);
        assert_eq!(status.current_state, State::Error);
        assert_eq!(note.map(|n| (n.reason.as_str(), n.reason.is_warning())), Some(("InvalidSpec", true)));
        let (_, again) = refuse(Some(&status), &status, GroupEventReason::InvalidSpec, "spec.x: bad".into(), NOW);
        assert_eq!(again, None, "a resync of the same refusal tells nobody again");
        let (_, changed) = refuse(Some(&status), &status, GroupEventReason::InvalidSpec, "spec.y: bad".into(), NOW);
        assert!(changed.is_some(), "a new reason is told");
    }

    #[test]
    fn a_transient_failure_keeps_the_state_and_any_other_is_an_error() {
        let before = InstanceGroupStatus { current_state: "Ready".into(), ..Default::default() };
        let (status, note) = fail(&before, true, "throttled".into(), NOW);
        assert_eq!((status.current_state.as_str(), note.reason.as_str()), ("Ready", "TransientError"));
        let (status, note) = fail(&before, false, "denied".into(), NOW);
        assert_eq!((status.current_state.as_str(), note.reason.as_str()), ("Error", "ReconcileFailed"));
        let reconciled = status.conditions.iter().find(|c| c.condition_type == "Reconciled").unwrap();
        assert_eq!((reconciled.status.as_str(), reconciled.message.as_str()), ("False", "denied"));
    }

    #[test]
    fn each_crd_step_writes_its_status_and_tells_what_it_did() {
        let resource = CrdResource { kind: "Workflow", namespace: "argo", name: "rotate-1" };
        let before = InstanceGroupStatus { strategy_retry_count: Some(1), ..Default::default() };
        let (status, note) = crd_outcome(&CrdStep::Submit(serde_json::Value::Null), resource, 1, &before, NOW);
        assert_eq!(
            (status.strategy_resource_namespace.as_str(), status.strategy_resource_name.as_str()),
            ("argo", "rotate-1")
        );
        assert_eq!(note.unwrap().message, "Workflow argo/rotate-1 submitted");
        let (status, note) = crd_outcome(&CrdStep::Retry("rotate-1".into()), resource, 1, &before, NOW);
        assert_eq!(status.strategy_retry_count, Some(2));
        assert_eq!(note.map(|n| (n.reason.as_str(), n.reason.is_warning())), Some(("UpgradeRetried", true)));
        let (status, note) = crd_outcome(&CrdStep::Failed("out of retries".into()), resource, 3, &before, NOW);
        assert_eq!(
            (status.current_state.as_str(), note.unwrap().reason.as_str()),
            ("Error", "InstanceGroupUpgradeFailed")
        );
        let (status, note) = crd_outcome(&CrdStep::Done, resource, 1, &before, NOW);
        assert_eq!((status.strategy_retry_count, note), (Some(0), None));
        let (status, note) = crd_outcome(&CrdStep::Wait("running".into()), resource, 1, &before, NOW);
        assert_eq!((status, note), (before, None));
    }
}
