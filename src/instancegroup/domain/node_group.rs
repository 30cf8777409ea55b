//! The `eks-managed` provisioner's decisions, pure: what an EKS managed node group should be
//! ([`NodeGroupDesign`], from `validate_managed`), what EKS holds ([`NodeGroupFacts`]), and the
//! one step that brings the second to the first ([`node_group_step`]). EKS owns the Auto Scaling
//! group behind a node group; nothing here names it except to report it.

use std::collections::{BTreeMap, BTreeSet};

use super::design::{Lifecycle, RoleChoice};
use super::events::GroupEventReason;
use super::plan::{refuse, set_condition, Note, Requeue, State, REQUEUE, RESYNC};
use crate::core::Timestamp;
use crate::instancegroup::api::InstanceGroupStatus;

/// A validated `eks-managed` InstanceGroup.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeGroupDesign {
    /// `<clusterName>-<namespace>-<name>`: the node group's name.
    pub name: String,
    /// The InstanceGroup's namespace.
    pub namespace: String,
    /// The InstanceGroup's name.
    pub instance_group: String,
    /// The InstanceGroup's `metadata.uid`, tagged on the node group.
    pub(crate) uid: Option<String>,
    /// EKS cluster name.
    pub cluster_name: String,
    /// Minimum size (and the desired size at creation).
    pub min_size: i32,
    /// Maximum size.
    pub max_size: i32,
    /// Instance types, the first choice first.
    pub instance_types: Vec<String>,
    /// `ON_DEMAND` or `SPOT`.
    pub capacity_type: &'static str,
    /// Root volume GiB.
    pub disk_size: Option<i32>,
    /// EKS AMI type.
    pub ami_type: Option<String>,
    /// AMI release version.
    pub release_version: Option<String>,
    /// Kubernetes version.
    pub version: Option<String>,
    /// Node labels.
    pub labels: BTreeMap<String, String>,
    /// Node taints, in EKS's terms.
    pub taints: BTreeSet<NodeTaint>,
    /// User tags (the ownership tags are added when it is created).
    pub tags: BTreeMap<String, String>,
    /// Subnet ids or `Name` tags, sorted.
    pub subnets: Vec<String>,
    /// SSH access: the key pair, and the security groups (ids or `Name` tags) it is open to.
    pub(crate) ssh: Option<(String, Vec<String>)>,
    /// The node role: created, or brought by ARN (`nodeRole`).
    pub role: NodeRole,
    /// `normal` or `spot`.
    pub lifecycle: Lifecycle,
}

/// The node role of a managed node group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeRole {
    /// Created (and deleted) by the daemon, with the `eks` provisioner's rules.
    Created(RoleChoice),
    /// An existing role's ARN, used as it is.
    Brought(String),
}

/// A taint as EKS takes it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeTaint {
    /// Key.
    pub key: String,
    /// Value, if any.
    pub value: Option<String>,
    /// `NO_SCHEDULE`, `NO_EXECUTE` or `PREFER_NO_SCHEDULE`.
    pub effect: String,
}

/// A managed node group as EKS describes it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeGroupFacts {
    /// Its ARN (tags are written through it).
    pub arn: String,
    /// `CREATING`, `ACTIVE`, `UPDATING`, `DELETING`, `CREATE_FAILED`, `DELETE_FAILED` or
    /// `DEGRADED`.
    pub status: String,
    /// Minimum size.
    pub min_size: i32,
    /// Maximum size.
    pub max_size: i32,
    /// Desired size.
    pub desired_size: i32,
    /// Instance types.
    pub instance_types: Vec<String>,
    /// `ON_DEMAND` or `SPOT`.
    pub capacity_type: String,
    /// Root volume GiB.
    pub disk_size: Option<i32>,
    /// AMI type.
    pub ami_type: Option<String>,
    /// AMI release version.
    pub release_version: Option<String>,
    /// Kubernetes version.
    pub version: Option<String>,
    /// Node labels.
    pub labels: BTreeMap<String, String>,
    /// Node taints.
    pub taints: BTreeSet<NodeTaint>,
    /// Tags.
    pub tags: BTreeMap<String, String>,
    /// Subnet ids.
    pub subnets: Vec<String>,
    /// Node role ARN.
    pub node_role: String,
    /// SSH key, if remote access is on.
    pub ssh_key: Option<String>,
    /// Security groups SSH is open to.
    pub ssh_security_groups: Vec<String>,
    /// The Auto Scaling groups EKS runs it on.
    pub scaling_groups: Vec<String>,
    /// Health issues EKS reports, as `code: message`.
    pub health: Vec<String>,
}

/// What the node group is created with: the design, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeGroupWanted {
    /// EKS cluster.
    pub cluster: String,
    /// Node group name.
    pub name: String,
    /// Node role ARN.
    pub role_arn: String,
    /// Subnet ids.
    pub subnets: Vec<String>,
    /// Minimum size, and the desired size at creation.
    pub min_size: i32,
    /// Maximum size.
    pub max_size: i32,
    /// Instance types.
    pub instance_types: Vec<String>,
    /// `ON_DEMAND` or `SPOT`.
    pub capacity_type: String,
    /// Root volume GiB.
    pub disk_size: Option<i32>,
    /// AMI type.
    pub ami_type: Option<String>,
    /// AMI release version.
    pub release_version: Option<String>,
    /// Kubernetes version.
    pub version: Option<String>,
    /// Node labels.
    pub labels: BTreeMap<String, String>,
    /// Node taints.
    pub taints: BTreeSet<NodeTaint>,
    /// User and ownership tags.
    pub tags: BTreeMap<String, String>,
    /// SSH key and the security group ids it is open to.
    pub ssh: Option<(String, Vec<String>)>,
}

/// What `UpdateNodegroupConfig` and the tag calls change on an active node group.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeGroupChanges {
    /// New (min, max, desired); desired only moves to stay within the new bounds.
    pub scaling: Option<(i32, i32, i32)>,
    /// Labels to add or change.
    pub add_labels: BTreeMap<String, String>,
    /// Labels to remove.
    pub remove_labels: BTreeSet<String>,
    /// Taints to add or change.
    pub add_taints: BTreeSet<NodeTaint>,
    /// Taints to remove.
    pub remove_taints: BTreeSet<NodeTaint>,
    /// Tags to add or change.
    pub tag: BTreeMap<String, String>,
    /// Tags to remove.
    pub untag: BTreeSet<String>,
}

impl NodeGroupChanges {
    /// Whether `UpdateNodegroupConfig` is needed.
    pub fn config(&self) -> bool {
        self.scaling.is_some()
            || !self.add_labels.is_empty()
            || !self.remove_labels.is_empty()
            || !self.add_taints.is_empty()
            || !self.remove_taints.is_empty()
    }

    /// Whether nothing changes.
    pub fn is_empty(&self) -> bool {
        !self.config() && self.tag.is_empty() && self.untag.is_empty()
    }

    /// What changes, for an Event: `scaling 1-3 → 2-5, labels, tags`.
    pub fn summary(&self, facts: &NodeGroupFacts) -> String {
        let mut parts = Vec::new();
        if let Some((min, max, _)) = self.scaling {
            parts.push(format!("size {}..{} → {min}..{max}", facts.min_size, facts.max_size));
        }
        if !self.add_labels.is_empty() || !self.remove_labels.is_empty() {
            parts.push("labels".to_string());
        }
        if !self.add_taints.is_empty() || !self.remove_taints.is_empty() {
            parts.push("taints".to_string());
        }
        if !self.tag.is_empty() || !self.untag.is_empty() {
            parts.push("tags".to_string());
        }
        parts.join(", ")
    }
}

/// What is known besides the design once names are resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeGroupResolved {
    /// Node role ARN.
    pub role_arn: String,
    /// Subnet ids, sorted.
    pub subnets: Vec<String>,
    /// Security group ids for SSH, sorted.
    pub ssh_security_groups: Vec<String>,
}

/// The one step a reconcile takes on the node group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeGroupStep {
    /// There is none: create it.
    Create(Box<NodeGroupWanted>),
    /// EKS is busy with it (`CREATING`, `UPDATING`, `DELETING`): look again.
    Wait(String),
    /// EKS reports it failed or degraded, with its health issues.
    Failed(String),
    /// Fields EKS cannot change on a node group differ: refused, naming them.
    Immutable(Vec<&'static str>),
    /// Change its configuration or tags.
    Update(Box<NodeGroupChanges>),
    /// Move it to the wanted Kubernetes or AMI release version (`UpdateNodegroupVersion`).
    Upgrade {
        /// Kubernetes version, when it differs.
        version: Option<String>,
        /// Release version, when it differs.
        release_version: Option<String>,
    },
    /// It is what the design says.
    Converged,
}

/// The ownership tags in `wanted` that `facts` does not carry the same, or that name another
/// owner: a node group under this name that is not this InstanceGroup's is never changed.
pub(crate) fn foreign_node_group(facts: &NodeGroupFacts, ours: &BTreeMap<String, String>) -> Option<String> {
    super::ownership::foreign_owner(&facts.tags, ours, true)
}

/// The node group as created from `design`.
pub fn wanted(
    design: &NodeGroupDesign,
    resolved: &NodeGroupResolved,
    owner: &BTreeMap<String, String>,
) -> NodeGroupWanted {
    let mut tags = design.tags.clone();
    tags.extend(owner.iter().map(|(k, v)| (k.clone(), v.clone())));
    NodeGroupWanted {
        cluster: design.cluster_name.clone(),
        name: design.name.clone(),
        role_arn: resolved.role_arn.clone(),
        subnets: resolved.subnets.clone(),
        min_size: design.min_size,
        max_size: design.max_size,
        instance_types: design.instance_types.clone(),
        capacity_type: design.capacity_type.to_string(),
        disk_size: design.disk_size,
        ami_type: design.ami_type.clone(),
        release_version: design.release_version.clone(),
        version: design.version.clone(),
        labels: design.labels.clone(),
        taints: design.taints.clone(),
        tags,
        ssh: design.ssh.as_ref().map(|(key, _)| (key.clone(), resolved.ssh_security_groups.clone())),
    }
}

/// Tags EKS or AWS keep on a node group, which are never removed.
fn system_tag(key: &str) -> bool {
    let lower = key.to_ascii_lowercase();
    lower.starts_with("aws:") || lower.starts_with("eks:")
}

/// The step from what EKS holds (`facts`) to the design. Sizes, labels, taints and tags are
/// changed in place; a version or release is upgraded once the configuration matches; fields EKS
/// fixes at creation are refused by name, never replaced behind the user's back.
pub fn node_group_step(
    design: &NodeGroupDesign,
    resolved: &NodeGroupResolved,
    owner: &BTreeMap<String, String>,
    facts: Option<&NodeGroupFacts>,
) -> NodeGroupStep {
    let wanted = wanted(design, resolved, owner);
    let Some(facts) = facts else { return NodeGroupStep::Create(Box::new(wanted)) };
    match facts.status.as_str() {
        "ACTIVE" => {}
        "CREATING" | "UPDATING" | "DELETING" => return NodeGroupStep::Wait(facts.status.clone()),
        failed => {
            let issues =
                if facts.health.is_empty() { "no health issue reported".into() } else { facts.health.join("; ") };
            return NodeGroupStep::Failed(format!("EKS reports node group {} {failed}: {issues}", design.name));
        }
    }
    let immutable = immutable_drift(&wanted, facts);
    if !immutable.is_empty() {
        return NodeGroupStep::Immutable(immutable);
    }
    let changes = config_changes(&wanted, facts);
    if !changes.is_empty() {
        return NodeGroupStep::Update(Box::new(changes));
    }
    let version = wanted.version.clone().filter(|v| facts.version.as_ref() != Some(v));
    let release_version = wanted.release_version.clone().filter(|r| facts.release_version.as_ref() != Some(r));
    if version.is_some() || release_version.is_some() {
        return NodeGroupStep::Upgrade { version, release_version };
    }
    NodeGroupStep::Converged
}

/// What a step writes to the status, when to look again, and what to tell, once its call (if
/// any) is made. `told` is the status as last written, so a refusal is told once.
pub(crate) fn node_group_outcome(
    step: &NodeGroupStep,
    design: &NodeGroupDesign,
    facts: Option<&NodeGroupFacts>,
    (told, status): (Option<&InstanceGroupStatus>, &InstanceGroupStatus),
    now: Timestamp,
) -> (InstanceGroupStatus, Requeue, Option<Note>) {
    let name = &design.name;
    let upgrading = status.current_state == State::InitUpgrade.as_str();
    let mut status = status.clone();
    let mut progress = |state: State, reason: &str, message: String| {
        status.current_state = state.into();
        set_condition(&mut status, "Reconciled", true, reason, message, now);
    };
    let note = |reason, message: String| Some(Note { reason, message });
    match step {
        NodeGroupStep::Create(_) => {
            let message = format!("EKS node group {name} created");
            progress(State::InitCreate, "Created", message.clone());
            (status, Requeue::After(REQUEUE), note(GroupEventReason::InstanceGroupCreated, message))
        }
        NodeGroupStep::Wait(busy) => {
            let state = match busy.as_str() {
                "CREATING" => State::InitCreate,
                "DELETING" => State::Deleting,
                _ if upgrading => State::InitUpgrade,
                _ => State::ReconcileModifying,
            };
            progress(state, "EksBusy", format!("EKS reports node group {name} {busy}"));
            (status, Requeue::After(REQUEUE), None)
        }
        NodeGroupStep::Failed(message) => {
            let (status, note) = refuse(told, &status, GroupEventReason::ReconcileFailed, message.clone(), now);
            (status, Requeue::After(RESYNC), note)
        }
        NodeGroupStep::Immutable(fields) => {
            let message = format!(
                "spec.eks-managed.configuration {} differ from node group {name}: EKS fixes them when it creates \
                 a node group (create another InstanceGroup and delete this one to change them)",
                fields.join(", ")
            );
            let (status, note) = refuse(told, &status, GroupEventReason::InvalidSpec, message, now);
            (status, Requeue::OnChange, note)
        }
        NodeGroupStep::Update(changes) => {
            let message = match facts {
                Some(facts) => format!("node group {name}: {}", changes.summary(facts)),
                None => format!("node group {name} updated"),
            };
            progress(State::ReconcileModifying, "Updating", message.clone());
            (status, Requeue::After(REQUEUE), note(GroupEventReason::NodeGroupUpdated, message))
        }
        NodeGroupStep::Upgrade { version, release_version } => {
            let to = [
                version.as_ref().map(|v| format!("Kubernetes {v}")),
                release_version.as_ref().map(|r| format!("release {r}")),
            ]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>()
            .join(", ");
            let message = format!("node group {name} moves to {to}; EKS replaces its nodes, draining them");
            progress(State::InitUpgrade, "Upgrading", message.clone());
            (status, Requeue::After(REQUEUE), note(GroupEventReason::NodeGroupUpgrading, message))
        }
        NodeGroupStep::Converged => {
            progress(State::Ready, "Applied", format!("node group {name} matches the spec"));
            if let Some(facts) = facts {
                let message = format!(
                    "EKS reports node group {name} ACTIVE, {} desired, on {}",
                    facts.desired_size,
                    facts.scaling_groups.join(", ")
                );
                set_condition(&mut status, "NodesReady", true, "Active", message, now);
            }
            (status, Requeue::After(RESYNC), None)
        }
    }
}

/// The fields EKS sets at creation only, where the design differs, by their spec names.
fn immutable_drift(wanted: &NodeGroupWanted, facts: &NodeGroupFacts) -> Vec<&'static str> {
    let sorted = |v: &[String]| v.iter().cloned().collect::<BTreeSet<_>>();
    let mut drifted = Vec::new();
    if wanted.instance_types != facts.instance_types {
        drifted.push("instanceType(s)");
    }
    if !wanted.capacity_type.eq_ignore_ascii_case(&facts.capacity_type) {
        drifted.push("capacityType");
    }
    if wanted.disk_size.is_some_and(|d| facts.disk_size.is_some_and(|f| f != d)) {
        drifted.push("volSize");
    }
    if wanted.ami_type.as_ref().is_some_and(|a| facts.ami_type.as_ref().is_some_and(|f| f != a)) {
        drifted.push("amiType");
    }
    if sorted(&wanted.subnets) != sorted(&facts.subnets) {
        drifted.push("subnets");
    }
    if wanted.role_arn != facts.node_role {
        drifted.push("nodeRole");
    }
    let ssh = wanted.ssh.as_ref().map(|(key, groups)| (key.clone(), sorted(groups)));
    let facts_ssh = facts.ssh_key.as_ref().map(|key| (key.clone(), sorted(&facts.ssh_security_groups)));
    if ssh != facts_ssh {
        drifted.push("keyPairName/securityGroups");
    }
    drifted
}

/// Sizes, labels, taints and tags to change. Desired moves only to stay within the bounds (EKS
/// refuses a desired size outside them); otherwise it is Cluster Autoscaler's.
fn config_changes(wanted: &NodeGroupWanted, facts: &NodeGroupFacts) -> NodeGroupChanges {
    let mut changes = NodeGroupChanges::default();
    if (wanted.min_size, wanted.max_size) != (facts.min_size, facts.max_size) {
        let desired = facts.desired_size.clamp(wanted.min_size, wanted.max_size);
        changes.scaling = Some((wanted.min_size, wanted.max_size, desired));
    }
    changes.add_labels = wanted
        .labels
        .iter()
        .filter(|(k, v)| facts.labels.get(*k) != Some(v))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    changes.remove_labels = facts.labels.keys().filter(|k| !wanted.labels.contains_key(*k)).cloned().collect();
    changes.add_taints = wanted.taints.difference(&facts.taints).cloned().collect();
    // A taint whose value or effect changed is re-added; EKS keys taints by key and effect.
    changes.remove_taints = facts
        .taints
        .iter()
        .filter(|t| {
            !wanted.taints.contains(*t) && !changes.add_taints.iter().any(|a| a.key == t.key && a.effect == t.effect)
        })
        .cloned()
        .collect();
    changes.tag = wanted
        .tags
        .iter()
        .filter(|(k, v)| facts.tags.get(*k) != Some(v))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    changes.untag = facts.tags.keys().filter(|k| !wanted.tags.contains_key(*k) && !system_tag(k)).cloned().collect();
    changes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn design() -> NodeGroupDesign {
        NodeGroupDesign {
            name: "prod-team-batch".into(),
            namespace: "team".into(),
            instance_group: "batch".into(),
            uid: Some("uid-1".into()),
            cluster_name: "prod".into(),
            min_size: 1,
            max_size: 3,
            instance_types: vec!["m6i.large".into(), "m5.large".into()],
            capacity_type: "SPOT",
            disk_size: Some(40),
            ami_type: Some("AL2023_x86_64_STANDARD".into()),
            release_version: None,
            version: Some("1.31".into()),
            labels: BTreeMap::from([("team".into(), "batch".into())]),
            taints: BTreeSet::from([NodeTaint { key: "batch".into(), value: None, effect: "NO_SCHEDULE".into() }]),
            tags: BTreeMap::from([("cost-centre".into(), "42".into())]),
            subnets: vec!["subnet-a".into(), "subnet-b".into()],
            ssh: None,
            role: NodeRole::Brought("arn:aws:iam::1:role/nodes".into()),
            lifecycle: Lifecycle::Spot,
        }
    }

    fn resolved() -> NodeGroupResolved {
        NodeGroupResolved {
            role_arn: "arn:aws:iam::1:role/nodes".into(),
            subnets: vec!["subnet-a".into(), "subnet-b".into()],
            ssh_security_groups: vec![],
        }
    }

    fn owner() -> BTreeMap<String, String> {
        super::super::ownership::owner_tags_of("prod", "team", "batch", Some("uid-1"))
    }

    /// What EKS describes after creating `design`.
    fn facts_of(design: &NodeGroupDesign) -> NodeGroupFacts {
        let w = wanted(design, &resolved(), &owner());
        NodeGroupFacts {
            arn: "arn:aws:eks:eu-west-1:1:nodegroup/prod/prod-team-batch/x".into(),
            status: "ACTIVE".into(),
            min_size: w.min_size,
            max_size: w.max_size,
            desired_size: w.min_size,
            instance_types: w.instance_types,
            capacity_type: w.capacity_type,
            disk_size: w.disk_size,
            ami_type: w.ami_type,
            release_version: Some("1.31.0-20250101".into()),
            version: w.version,
            labels: w.labels,
            taints: w.taints,
            tags: w.tags.into_iter().chain([("eks:nodegroup-name".to_string(), "x".to_string())]).collect(),
            subnets: w.subnets,
            node_role: w.role_arn,
            ssh_key: None,
            ssh_security_groups: vec![],
            scaling_groups: vec!["eks-x".into()],
            health: vec![],
        }
    }

    #[test]
    fn a_missing_node_group_is_created_with_its_owner_tags_and_desired_at_min() {
        let NodeGroupStep::Create(w) = node_group_step(&design(), &resolved(), &owner(), None) else { panic!() };
        assert_eq!((w.min_size, w.max_size, w.capacity_type.as_str()), (1, 3, "SPOT"));
        assert_eq!(w.tags.get("instancegroups.keikoproj.io/Namespace").map(String::as_str), Some("team"));
        assert_eq!(w.tags.get("cost-centre").map(String::as_str), Some("42"));
    }

    #[test]
    fn a_node_group_as_created_is_converged_and_eks_own_tags_stay() {
        let facts = facts_of(&design());
        assert_eq!(node_group_step(&design(), &resolved(), &owner(), Some(&facts)), NodeGroupStep::Converged);
    }

    #[test]
    fn sizes_labels_taints_and_tags_change_in_place_and_desired_only_moves_into_the_bounds() {
        let mut facts = facts_of(&design());
        facts.desired_size = 3;
        facts.labels.insert("by-hand".into(), "x".into());
        facts.tags.insert("stale".into(), "1".into());
        let mut d = design();
        d.max_size = 2;
        d.taints = BTreeSet::from([NodeTaint {
            key: "batch".into(),
            value: Some("yes".into()),
            effect: "NO_SCHEDULE".into(),
        }]);
        d.labels.insert("tier".into(), "2".into());
        let NodeGroupStep::Update(c) = node_group_step(&d, &resolved(), &owner(), Some(&facts)) else { panic!() };
        assert_eq!(c.scaling, Some((1, 2, 2)));
        assert_eq!(c.add_labels, BTreeMap::from([("tier".to_string(), "2".to_string())]));
        assert_eq!(c.remove_labels, BTreeSet::from(["by-hand".to_string()]));
        assert_eq!(c.add_taints.len(), 1);
        assert!(c.remove_taints.is_empty(), "the same key and effect is replaced, not removed: {c:?}");
        assert_eq!(c.untag, BTreeSet::from(["stale".to_string()]));
        assert_eq!(c.summary(&facts), "size 1..3 → 1..2, labels, taints, tags");
    }

    #[test]
    fn what_eks_fixes_at_creation_is_refused_by_name() {
        let facts = facts_of(&design());
        let mut d = design();
        d.instance_types = vec!["c6i.large".into()];
        d.capacity_type = "ON_DEMAND";
        d.subnets = vec!["subnet-c".into()];
        let mut r = resolved();
        r.subnets = vec!["subnet-c".into()];
        assert_eq!(
            node_group_step(&d, &r, &owner(), Some(&facts)),
            NodeGroupStep::Immutable(vec!["instanceType(s)", "capacityType", "subnets"])
        );
    }

    #[test]
    fn a_version_moves_once_the_configuration_matches_and_busy_or_failed_groups_are_not_touched() {
        let mut facts = facts_of(&design());
        let mut d = design();
        d.version = Some("1.32".into());
        assert_eq!(
            node_group_step(&d, &resolved(), &owner(), Some(&facts)),
            NodeGroupStep::Upgrade { version: Some("1.32".into()), release_version: None }
        );
        facts.status = "UPDATING".into();
        assert_eq!(node_group_step(&d, &resolved(), &owner(), Some(&facts)), NodeGroupStep::Wait("UPDATING".into()));
        facts.status = "DEGRADED".into();
        facts.health = vec!["Ec2SubnetInvalidConfiguration: no public IP".into()];
        let NodeGroupStep::Failed(message) = node_group_step(&d, &resolved(), &owner(), Some(&facts)) else { panic!() };
        assert!(message.contains("DEGRADED") && message.contains("Ec2SubnetInvalidConfiguration"), "{message}");
    }

    #[test]
    fn a_node_group_of_another_instancegroup_under_the_same_name_is_foreign() {
        let mut facts = facts_of(&design());
        assert_eq!(foreign_node_group(&facts, &owner()), None);
        facts.tags.insert("instancegroups.keikoproj.io/Namespace".into(), "team-b".into());
        assert!(foreign_node_group(&facts, &owner()).is_some_and(|o| o.contains("team-b")));
        facts.tags.clear();
        assert!(foreign_node_group(&facts, &owner()).is_some(), "an untagged node group is nobody's to adopt");
    }
}
