//! What AWS should hold for a design: the launch template data and the Auto Scaling Group, in our
//! own terms (no SDK types), and the diff against what AWS holds. Launch template drift rotates
//! nodes; ASG changes (sizes, tags, hooks, processes, metrics) never do.

use std::collections::{BTreeMap, BTreeSet};

use base64::Engine;

pub use super::design::BlockDevice;
use super::design::{GroupDesign, LifecycleHook, Metadata, MixedInstances, Placement, WarmPool};
use super::userdata::{self, ClusterInfo};
use crate::core::{GroupName, InstanceId};

use super::ownership::owner_tags_of;

/// The tags that say which InstanceGroup owns a resource: cluster, namespace, name and uid.
pub(crate) fn owner_tags(design: &GroupDesign) -> BTreeMap<String, String> {
    owner_tags_of(&design.cluster_name, &design.namespace, &design.name, design.uid.as_deref())
}

/// A launch template as AWS holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateFacts {
    /// Name.
    pub name: String,
    /// Latest version number.
    pub(crate) latest_version: String,
    /// Data of the latest version.
    pub data: LaunchTemplateData,
    /// When the template was created (`YYYYMMDDhhmmss`, UTC): with the version, it names the
    /// `crd` strategy's resources.
    pub created: String,
    /// Its tags: whose it is.
    pub tags: BTreeMap<String, String>,
}

/// Cloud facts the launch template is built from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resolved {
    /// Subnet ids, sorted.
    pub(crate) subnet_ids: Vec<String>,
    /// Security group ids, sorted.
    pub(crate) security_group_ids: Vec<String>,
    /// Instance profile ARN.
    pub(crate) instance_profile_arn: String,
    /// Cluster endpoint, CA and network.
    pub cluster: ClusterInfo,
}

/// Launch template data, in the fields drift compares.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LaunchTemplateData {
    /// AMI.
    pub image_id: String,
    /// Instance type.
    pub instance_type: String,
    /// Instance profile ARN.
    pub(crate) instance_profile_arn: String,
    /// Security group ids, sorted.
    pub(crate) security_group_ids: Vec<String>,
    /// Key pair.
    pub(crate) key_name: Option<String>,
    /// Base64 userdata.
    pub user_data: String,
    /// Block devices, sorted.
    pub(crate) block_devices: Vec<BlockDevice>,
    /// IMDS options.
    pub metadata: Metadata,
    /// Tag specifications by resource type.
    pub(crate) tag_specifications: BTreeMap<String, BTreeMap<String, String>>,
    /// Spot market max price: `spotPrice` turned into real spot requests.
    pub(crate) spot_max_price: Option<String>,
    /// Placement.
    pub(crate) placement: Placement,
    /// Licence ARNs, sorted.
    pub(crate) licenses: Vec<String>,
}

/// Builds the launch template data for a design.
pub fn launch_template_data(design: &GroupDesign, resolved: &Resolved) -> LaunchTemplateData {
    let text = userdata::render(&resolved.cluster, &design.bootstrap, design.warm_pool.is_some());
    let mut security_group_ids = resolved.security_group_ids.clone();
    security_group_ids.sort();
    let mut licenses = design.licenses.clone();
    licenses.sort();
    LaunchTemplateData {
        image_id: design.image.clone(),
        instance_type: design.instance_type.clone(),
        instance_profile_arn: resolved.instance_profile_arn.clone(),
        security_group_ids,
        key_name: design.key_pair_name.clone(),
        user_data: base64::engine::general_purpose::STANDARD.encode(text),
        block_devices: design.volumes.clone(),
        metadata: design.metadata.clone(),
        tag_specifications: design.tag_specifications.clone(),
        spot_max_price: design.spot_price.clone(),
        placement: design.placement.clone(),
        licenses,
    }
}

/// The fields of `current` that differ from `desired`: empty means no new template version.
pub fn drift(current: &LaunchTemplateData, desired: &LaunchTemplateData) -> Vec<&'static str> {
    let mut fields = Vec::new();
    let mut check = |name: &'static str, differs: bool| {
        if differs {
            fields.push(name);
        }
    };
    check("image", current.image_id != desired.image_id);
    check("instanceType", current.instance_type != desired.instance_type);
    check("instanceProfile", current.instance_profile_arn != desired.instance_profile_arn);
    check("securityGroups", current.security_group_ids != desired.security_group_ids);
    check("keyPairName", current.key_name != desired.key_name);
    check("userData", current.user_data != desired.user_data);
    check("volumes", current.block_devices != desired.block_devices);
    check("metadataOptions", current.metadata != desired.metadata);
    check("tagSpecifications", current.tag_specifications != desired.tag_specifications);
    check("spotPrice", current.spot_max_price != desired.spot_max_price);
    check("placement", current.placement != desired.placement);
    check("licenseSpecifications", current.licenses != desired.licenses);
    fields
}

/// The ASG a design asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AsgDesign {
    /// Name (the prefix).
    pub name: String,
    /// MinSize.
    pub min_size: i32,
    /// MaxSize.
    pub max_size: i32,
    /// Subnet ids, sorted.
    pub(crate) subnet_ids: Vec<String>,
    /// Every tag, all propagated at launch.
    pub tags: BTreeMap<String, String>,
    /// Launch template name (used at `$Latest`).
    pub(crate) template_name: String,
    /// Spot/on-demand mix; `None` launches the template directly.
    pub(crate) mixed_instances: Option<MixedInstances>,
    /// Capacity Rebalance: Auto Scaling replaces a rebalance-recommended spot instance itself
    /// (and the booster holds the group).
    pub capacity_rebalance: bool,
    /// Suspended processes.
    pub suspended_processes: BTreeSet<String>,
    /// Collected metrics.
    pub metrics: BTreeSet<String>,
    /// Lifecycle hooks by name.
    pub(crate) lifecycle_hooks: BTreeMap<String, LifecycleHook>,
    /// Warm pool.
    pub(crate) warm_pool: Option<WarmPool>,
}

/// The ASG tags for a design: ownership, cluster-autoscaler discovery (when annotated), user tags.
pub(crate) fn asg_tags(design: &GroupDesign) -> BTreeMap<String, String> {
    let mut tags = owner_tags(design);
    tags.extend([
        ("Name".to_string(), design.prefix.clone()),
        ("KubernetesCluster".to_string(), design.cluster_name.clone()),
        (format!("kubernetes.io/cluster/{}", design.cluster_name), "owned".to_string()),
    ]);
    if design.cluster_autoscaler_tags {
        tags.insert(format!("k8s.io/cluster-autoscaler/{}", design.cluster_name), "owned".into());
        tags.insert("k8s.io/cluster-autoscaler/enabled".into(), "true".into());
        for (key, value) in &design.bootstrap.labels {
            tags.insert(format!("k8s.io/cluster-autoscaler/node-template/label/{key}"), value.clone());
        }
        for taint in &design.bootstrap.taints {
            if let Some((key, value)) = taint.split_once('=') {
                tags.insert(format!("k8s.io/cluster-autoscaler/node-template/taint/{key}"), value.to_string());
            }
        }
    }
    tags.extend(design.tags.iter().map(|(k, v)| (k.clone(), v.clone())));
    tags
}

/// The ASG design; `running_types` are the instance types in the group now, kept as overrides so
/// a mixed policy change never strands running capacity.
pub(crate) fn asg_design(design: &GroupDesign, resolved: &Resolved, running_types: &BTreeSet<String>) -> AsgDesign {
    let mixed_instances = design.mixed_instances.clone().map(|mut mixed| {
        for running in running_types {
            if !mixed.overrides.iter().any(|(t, _)| t == running) {
                mixed.overrides.push((running.clone(), 1));
            }
        }
        mixed
    });
    AsgDesign {
        name: design.prefix.clone(),
        min_size: design.min_size,
        max_size: design.max_size,
        subnet_ids: resolved.subnet_ids.clone(),
        tags: asg_tags(design),
        template_name: design.prefix.clone(),
        capacity_rebalance: design.capacity_rebalance,
        mixed_instances,
        suspended_processes: design.suspended_processes.clone(),
        metrics: design.metrics.clone(),
        lifecycle_hooks: design.lifecycle_hooks.clone(),
        warm_pool: design.warm_pool,
    }
}

/// One instance of the group, as Auto Scaling reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupInstance {
    /// Instance id.
    pub id: InstanceId,
    /// Launch template name it came from (None for a launch configuration).
    pub(crate) template_name: Option<String>,
    /// Template version it came from.
    pub(crate) template_version: Option<String>,
    /// Instance type.
    pub instance_type: Option<String>,
    /// `InService`, `Pending`, `Terminating`…
    pub lifecycle_state: String,
}

/// The ASG as AWS holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AsgFacts {
    /// Name.
    pub name: GroupName,
    /// MinSize.
    pub min_size: i32,
    /// MaxSize.
    pub max_size: i32,
    /// DesiredCapacity.
    pub desired: i32,
    /// Subnet ids, sorted.
    pub(crate) subnet_ids: Vec<String>,
    /// Tags.
    pub tags: BTreeMap<String, String>,
    /// Launch template name when launched directly.
    pub(crate) template_name: Option<String>,
    /// Mixed-instances policy (template name in `mixed_template`).
    pub(crate) mixed_instances: Option<MixedInstances>,
    /// Template name inside the mixed policy.
    pub(crate) mixed_template: Option<String>,
    /// Capacity Rebalance is on.
    pub capacity_rebalance: bool,
    /// Suspended processes.
    pub suspended_processes: BTreeSet<String>,
    /// Collected metrics.
    pub metrics: BTreeSet<String>,
    /// Lifecycle hooks by name.
    pub(crate) lifecycle_hooks: BTreeMap<String, LifecycleHook>,
    /// Warm pool.
    pub(crate) warm_pool: Option<WarmPool>,
    /// Instances.
    pub instances: Vec<GroupInstance>,
    /// `Delete in progress` while a delete runs.
    pub status: Option<String>,
}

/// What to change on an existing ASG. DesiredCapacity is never among them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AsgChanges {
    /// Call UpdateAutoScalingGroup (min, max, subnets, template or mixed policy).
    pub update: bool,
    /// Tags to create or overwrite.
    pub(crate) set_tags: BTreeMap<String, String>,
    /// Tags to delete.
    pub(crate) delete_tags: BTreeSet<String>,
    /// Processes to suspend.
    pub(crate) suspend: BTreeSet<String>,
    /// Processes to resume.
    pub(crate) resume: BTreeSet<String>,
    /// Metrics to enable.
    pub(crate) enable_metrics: BTreeSet<String>,
    /// Metrics to disable.
    pub(crate) disable_metrics: BTreeSet<String>,
    /// Hooks to put (new or changed).
    pub(crate) put_hooks: BTreeMap<String, LifecycleHook>,
    /// Hooks to delete.
    pub(crate) delete_hooks: BTreeSet<String>,
    /// Put this warm pool.
    pub(crate) put_warm_pool: Option<WarmPool>,
    /// Delete the warm pool.
    pub(crate) delete_warm_pool: bool,
}

impl AsgChanges {
    /// Nothing to do.
    pub fn is_empty(&self) -> bool {
        *self == AsgChanges::default()
    }
}

/// The diff between an ASG and its design. Unknown tags are removed, as upstream does, except
/// `aws:` tags, which AWS owns.
pub(crate) fn asg_changes(facts: &AsgFacts, design: &AsgDesign) -> AsgChanges {
    let mixed_differs = match (&facts.mixed_instances, &design.mixed_instances) {
        (None, None) => facts.template_name.as_deref() != Some(design.template_name.as_str()),
        (Some(current), Some(wanted)) => {
            facts.mixed_template.as_deref() != Some(design.template_name.as_str()) || !same_mixed(current, wanted)
        }
        _ => true,
    };
    let update = facts.min_size != design.min_size
        || facts.max_size != design.max_size
        || facts.subnet_ids != design.subnet_ids
        || facts.capacity_rebalance != design.capacity_rebalance
        || mixed_differs;
    let set_tags = design
        .tags
        .iter()
        .filter(|(k, v)| facts.tags.get(*k) != Some(v))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let delete_tags =
        facts.tags.keys().filter(|k| !design.tags.contains_key(*k) && !k.starts_with("aws:")).cloned().collect();
    let put_hooks = design
        .lifecycle_hooks
        .iter()
        .filter(|(name, hook)| facts.lifecycle_hooks.get(*name) != Some(hook))
        .map(|(n, h)| (n.clone(), h.clone()))
        .collect();
    let delete_hooks =
        facts.lifecycle_hooks.keys().filter(|n| !design.lifecycle_hooks.contains_key(*n)).cloned().collect();
    AsgChanges {
        update,
        set_tags,
        delete_tags,
        suspend: design.suspended_processes.difference(&facts.suspended_processes).cloned().collect(),
        resume: facts.suspended_processes.difference(&design.suspended_processes).cloned().collect(),
        enable_metrics: design.metrics.difference(&facts.metrics).cloned().collect(),
        disable_metrics: facts.metrics.difference(&design.metrics).cloned().collect(),
        put_hooks,
        delete_hooks,
        put_warm_pool: design.warm_pool.filter(|w| facts.warm_pool != Some(*w)),
        delete_warm_pool: facts.warm_pool.is_some() && design.warm_pool.is_none(),
    }
}

// AWS echoes overrides in its own order; compare them as sets.
fn same_mixed(a: &MixedInstances, b: &MixedInstances) -> bool {
    let set = |m: &MixedInstances| m.overrides.iter().cloned().collect::<BTreeSet<_>>();
    a.spot_allocation_strategy == b.spot_allocation_strategy
        && a.spot_pools == b.spot_pools
        && a.on_demand_base == b.on_demand_base
        && a.on_demand_percent_above_base == b.on_demand_percent_above_base
        && set(a) == set(b)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::instancegroup::ownership::{
        foreign_owner, TAG_CLUSTER_NAME, TAG_INSTANCE_GROUP, TAG_INSTANCE_GROUP_UID, TAG_NAMESPACE,
    };
    use crate::instancegroup::validate::{validate, ObjectInfo};
    use crate::instancegroup::InstanceGroup;

    pub(crate) fn design() -> GroupDesign {
        let mut ig: InstanceGroup =
            serde_yaml::from_str(include_str!("../testdata/batch-spot.yaml")).expect("the example parses");
        ig.spec.eks.as_mut().unwrap().configuration.image = "ami-0123456789abcdef0".into();
        let info = ObjectInfo {
            namespace: "instance-manager",
            name: "batch-spot",
            annotations: ig.metadata.annotations.as_ref(),
            uid: None,
            cluster: "prod-euw1",
        };
        validate(&info, &ig.spec, &crate::instancegroup::validate::IamRules::default()).expect("valid")
    }

    pub(crate) fn resolved() -> Resolved {
        Resolved {
            subnet_ids: vec!["subnet-1".into(), "subnet-2".into()],
            security_group_ids: vec!["sg-2".into(), "sg-1".into()],
            instance_profile_arn: "arn:aws:iam::123456789012:instance-profile/p".into(),
            cluster: ClusterInfo { name: "prod-euw1".into(), endpoint: "https://e".into(), ..Default::default() },
        }
    }

    pub(crate) fn facts_for(asg: &AsgDesign) -> AsgFacts {
        AsgFacts {
            name: GroupName::from(asg.name.as_str()),
            min_size: asg.min_size,
            max_size: asg.max_size,
            desired: 5,
            subnet_ids: asg.subnet_ids.clone(),
            tags: asg.tags.clone(),
            template_name: None,
            mixed_instances: asg.mixed_instances.clone(),
            mixed_template: Some(asg.template_name.clone()),
            capacity_rebalance: asg.capacity_rebalance,
            suspended_processes: asg.suspended_processes.clone(),
            metrics: asg.metrics.clone(),
            lifecycle_hooks: asg.lifecycle_hooks.clone(),
            warm_pool: asg.warm_pool,
            instances: vec![],
            status: None,
        }
    }

    #[test]
    fn the_launch_template_is_stable_and_sorted() {
        let data = launch_template_data(&design(), &resolved());
        assert_eq!(data.security_group_ids, ["sg-1", "sg-2"]);
        assert_eq!(data.block_devices[0].iops, Some(3000));
        assert_eq!(data, launch_template_data(&design(), &resolved()));
        assert!(drift(&data, &data).is_empty());
    }

    #[test]
    fn drift_names_each_rotating_field() {
        let base = launch_template_data(&design(), &resolved());
        type Edit = Box<dyn Fn(&mut GroupDesign, &mut Resolved)>;
        let cases: Vec<(&str, Edit)> = vec![
            ("image", Box::new(|d, _| d.image = "ami-new".into())),
            ("instanceType", Box::new(|d, _| d.instance_type = "m7i.2xlarge".into())),
            ("instanceProfile", Box::new(|_, r| r.instance_profile_arn = "arn:other".into())),
            ("securityGroups", Box::new(|_, r| r.security_group_ids.push("sg-3".into()))),
            ("keyPairName", Box::new(|d, _| d.key_pair_name = None)),
            ("userData", Box::new(|d, _| d.bootstrap.max_pods = Some(110))),
            ("userData", Box::new(|_, r| r.cluster.endpoint = "https://other".into())),
            ("volumes", Box::new(|d, _| d.volumes[0].size = Some(200))),
            ("metadataOptions", Box::new(|d, _| d.metadata.http_tokens = Some("optional".into()))),
            ("tagSpecifications", Box::new(|d, _| d.tag_specifications.clear())),
            ("spotPrice", Box::new(|d, _| d.spot_price = Some("0.3".into()))),
            ("placement", Box::new(|d, _| d.placement.tenancy = Some("dedicated".into()))),
        ];
        for (field, edit) in cases {
            let (mut d, mut r) = (design(), resolved());
            edit(&mut d, &mut r);
            assert_eq!(drift(&base, &launch_template_data(&d, &r)), [field], "{field}");
        }
    }

    #[test]
    fn capacity_rebalance_follows_the_design_through_an_update() {
        let mut d = design();
        d.capacity_rebalance = true;
        let asg = asg_design(&d, &resolved(), &BTreeSet::new());
        assert!(asg.capacity_rebalance);
        let mut facts = facts_for(&asg);
        assert!(asg_changes(&facts, &asg).is_empty());
        facts.capacity_rebalance = false;
        assert_eq!(asg_changes(&facts, &asg), AsgChanges { update: true, ..Default::default() });
    }

    #[test]
    fn sizes_tags_hooks_and_processes_change_the_asg_but_never_desired() {
        let asg = asg_design(&design(), &resolved(), &BTreeSet::new());
        let facts = facts_for(&asg);
        assert!(asg_changes(&facts, &asg).is_empty(), "an ASG that matches needs nothing");

        let mut wanted = asg.clone();
        wanted.max_size = 40;
        let changes = asg_changes(&facts, &wanted);
        assert_eq!(changes, AsgChanges { update: true, ..Default::default() });

        let mut drifted = facts.clone();
        drifted.tags.insert("spots-booster/marker".into(), "x".into());
        drifted.tags.insert("aws:cloudformation:stack-name".into(), "s".into());
        drifted.tags.remove("team");
        drifted.suspended_processes.insert("Launch".into());
        drifted.metrics.clear();
        drifted.lifecycle_hooks.get_mut("drain-on-terminate").unwrap().heartbeat_timeout = 60;
        drifted.lifecycle_hooks.insert("old".into(), drifted.lifecycle_hooks["drain-on-terminate"].clone());
        let changes = asg_changes(&drifted, &asg);
        assert!(!changes.update, "none of these are launch settings");
        assert_eq!(changes.set_tags, BTreeMap::from([("team".to_string(), "data-platform".to_string())]));
        assert_eq!(changes.delete_tags, BTreeSet::from(["spots-booster/marker".to_string()]), "aws: tags stay");
        assert_eq!(changes.resume, BTreeSet::from(["Launch".to_string()]));
        assert_eq!(changes.enable_metrics.len(), 3);
        assert_eq!(changes.put_hooks.keys().collect::<Vec<_>>(), ["drain-on-terminate"]);
        assert_eq!(changes.delete_hooks, BTreeSet::from(["old".to_string()]));
    }

    #[test]
    fn tags_carry_ownership_and_autoscaler_discovery() {
        let tags = asg_tags(&design());
        assert_eq!(tags[TAG_CLUSTER_NAME], "prod-euw1");
        assert_eq!(tags[TAG_NAMESPACE], "instance-manager");
        assert_eq!(tags[TAG_INSTANCE_GROUP], "batch-spot");
        assert_eq!(tags["k8s.io/cluster-autoscaler/prod-euw1"], "owned");
        assert_eq!(tags["k8s.io/cluster-autoscaler/node-template/label/workload-class"], "batch");
        assert_eq!(tags["k8s.io/cluster-autoscaler/node-template/taint/workload-class"], "batch:NoSchedule");
        assert_eq!(tags["team"], "data-platform");
    }

    #[test]
    fn only_resources_whose_tags_name_this_instancegroup_are_adopted() {
        let mut ours = design();
        ours.uid = Some("uid-1".into());
        let tags = asg_tags(&ours);
        assert_eq!(tags[TAG_INSTANCE_GROUP_UID], "uid-1");
        assert_eq!(foreign_owner(&tags, &owner_tags(&ours), true), None);

        // `prod-euw1-instance-manager-batch-spot` is also InstanceGroup `instance`/`manager-batch-spot`'s name.
        let mut collides = ours.clone();
        (collides.namespace, collides.name, collides.uid) = ("instance".into(), "manager-batch-spot".into(), None);
        assert_eq!(collides.prefix, ours.prefix);
        assert_eq!(
            foreign_owner(&tags, &owner_tags(&collides), true).as_deref(),
            Some("cluster prod-euw1, InstanceGroup instance-manager/batch-spot (uid uid-1)")
        );
        // The same name recreated: another uid owns what is left of the old one.
        let mut again = ours.clone();
        again.uid = Some("uid-2".into());
        assert!(foreign_owner(&tags, &owner_tags(&again), true).is_some());
        // Upstream's groups carry no uid: adopted (and then tagged).
        let mut upstream = tags.clone();
        upstream.remove(TAG_INSTANCE_GROUP_UID);
        assert_eq!(foreign_owner(&upstream, &owner_tags(&again), true), None);
        // A group naming no owner is nobody's to take; a template of an older version, cluster only, is.
        let cluster_only = BTreeMap::from([(TAG_CLUSTER_NAME.to_string(), "prod-euw1".to_string())]);
        assert!(foreign_owner(&cluster_only, &owner_tags(&ours), true).is_some());
        assert_eq!(foreign_owner(&cluster_only, &owner_tags(&ours), false), None);
    }

    #[test]
    fn running_types_stay_in_the_overrides_and_order_does_not_count_as_drift() {
        let running = BTreeSet::from(["c5.2xlarge".to_string()]);
        let asg = asg_design(&design(), &resolved(), &running);
        let overrides = &asg.mixed_instances.as_ref().unwrap().overrides;
        assert_eq!(overrides.last().unwrap(), &("c5.2xlarge".to_string(), 1));
        let mut facts = facts_for(&asg);
        facts.mixed_instances.as_mut().unwrap().overrides.reverse();
        assert!(!asg_changes(&facts, &asg).update);
        facts.mixed_instances.as_mut().unwrap().on_demand_percent_above_base = 50;
        assert!(asg_changes(&facts, &asg).update);
    }
}
