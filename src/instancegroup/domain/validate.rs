//! Turns an InstanceGroup into a [`GroupDesign`], or into every field error at once. Pure: the
//! spec is never mutated (upstream's validation edits the object in place, with order-dependent
//! results), nothing is silently dropped, and every error names its field path.

use std::collections::{BTreeMap, BTreeSet};

use base64::Engine;

use super::api::{EksConfiguration, InstanceGroupSpec, IntOrString, NodeVolume, UpgradeStrategy};
use super::design::*;
use super::events::GroupEventReason;

/// Annotation: add cluster-autoscaler discovery tags.
pub(crate) const ANNOTATION_CA_ENABLED: &str = "instancemgr.keikoproj.io/cluster-autoscaler-enabled";
/// Annotation: IRSA runs the CNI, so the node role needs no CNI policy.
pub(crate) const ANNOTATION_IRSA: &str = "instancemgr.keikoproj.io/irsa-enabled";
/// Annotation: the image's OS family.
pub(crate) const ANNOTATION_OS_FAMILY: &str = "instancemgr.keikoproj.io/os-family";
/// Annotation: `k=v,k2=v2` replaces the default role labels.
pub(crate) const ANNOTATION_DEFAULT_LABELS: &str = "instancemgr.keikoproj.io/default-labels";
/// Annotation: stop in `Locked` instead of rotating nodes.
/// Annotation naming, comma-separated and in order, the InstanceGroups of the same namespace a
/// boost falls back to when this one's pool has no capacity: written on the ASG as the tag
/// `spots-booster.io/fallback-groups` with their Auto Scaling Group names.
pub(crate) const ANNOTATION_FALLBACKS: &str = "spots-booster.io/fallback-instancegroups";
pub(crate) const ANNOTATION_LOCK_UPGRADES: &str = "instancemgr.keikoproj.io/lock-upgrades";

/// Every process `suspendProcesses: [All]` stands for.
pub(crate) const ALL_PROCESSES: &[&str] = &[
    "Launch",
    "Terminate",
    "AddToLoadBalancer",
    "AlarmNotification",
    "AZRebalance",
    "HealthCheck",
    "InstanceRefresh",
    "ReplaceUnhealthy",
    "ScheduledActions",
];

/// Every group metric `metricsCollection: [all]` stands for.
pub(crate) const ALL_METRICS: &[&str] = &[
    "GroupMinSize",
    "GroupMaxSize",
    "GroupDesiredCapacity",
    "GroupInServiceInstances",
    "GroupPendingInstances",
    "GroupStandbyInstances",
    "GroupTerminatingInstances",
    "GroupTotalInstances",
    "GroupInServiceCapacity",
    "GroupPendingCapacity",
    "GroupStandbyCapacity",
    "GroupTerminatingCapacity",
    "GroupTotalCapacity",
];

const VOLUME_TYPES: &[&str] = &["gp2", "gp3", "io1", "io2", "sc1", "st1"];
const TAG_RESOURCE_TYPES: &[&str] = &["instance", "volume", "network-interface", "spot-instances-request"];
const TAINT_EFFECTS: &[&str] = &["NoSchedule", "PreferNoSchedule", "NoExecute"];
const AWS_MANAGED_POLICY_PREFIX: &str = "arn:aws:iam::aws:policy/";

/// Whether a field is wrong or asks for something spots-booster does not do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldErrorKind {
    /// The value is invalid.
    Invalid,
    /// The value is valid upstream but not supported here (the status says so).
    Unsupported,
}

/// One problem, with the field path it is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// Path such as `spec.eks.configuration.volumes[0].iops`.
    pub field: String,
    /// What is wrong.
    pub message: String,
    /// Invalid or unsupported.
    pub kind: FieldErrorKind,
}

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// Validation of an InstanceGroup failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid InstanceGroup {namespace}/{name}: {}", .errors.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
pub struct ValidateError {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Every problem found.
    pub errors: Vec<FieldError>,
}

impl ValidateError {
    /// `Unsupported` when everything wrong is something we do not do, else `InvalidSpec`.
    pub(crate) fn reason(&self) -> GroupEventReason {
        if self.errors.iter().all(|e| e.kind == FieldErrorKind::Unsupported) {
            GroupEventReason::Unsupported
        } else {
            GroupEventReason::InvalidSpec
        }
    }
}

/// What an InstanceGroup may ask of IAM. The operator decides, never whoever writes the object:
/// its userdata runs with the node role, so a policy it could attach is a policy it holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IamRules {
    /// Policy ARNs an InstanceGroup may attach beyond the node defaults (worker node, ECR
    /// read-only, CNI).
    pub(crate) allowed_policies: BTreeSet<String>,
    /// Whether `roleName` / `instanceProfileName` may name an existing role or profile.
    pub existing_roles: bool,
    /// Set as the permissions boundary of every role the daemon creates.
    pub(crate) permissions_boundary: Option<String>,
    /// The region the daemon's groups are in: part of every created role's name and tags, since
    /// IAM is one for the account and EKS names clusters uniquely per region only.
    pub(crate) region: String,
}

impl IamRules {
    /// Rules allowing `policies` (ARNs, or names of AWS managed policies).
    pub fn new(policies: &[String], existing_roles: bool, permissions_boundary: Option<String>) -> Self {
        IamRules {
            allowed_policies: policies.iter().filter(|p| !p.trim().is_empty()).map(|p| policy_arn(p.trim())).collect(),
            existing_roles,
            permissions_boundary: permissions_boundary.filter(|b| !b.is_empty()),
            region: String::new(),
        }
    }

    /// The same rules for a daemon whose groups are in `region`.
    pub fn in_region(mut self, region: &str) -> Self {
        self.region = region.to_string();
        self
    }

    /// Whose the role this daemon creates for the InstanceGroup `info` of cluster `cluster` is.
    pub(crate) fn role_owner(&self, cluster: &str, info: &ObjectInfo<'_>) -> RoleOwner {
        RoleOwner {
            region: self.region.clone(),
            cluster: cluster.to_string(),
            namespace: info.namespace.to_string(),
            name: info.name.to_string(),
            uid: info.uid.filter(|u| !u.is_empty()).map(String::from),
        }
    }
}

/// An ARN as given, or the AWS managed policy of that name.
fn policy_arn(policy: &str) -> String {
    if policy.starts_with("arn:") {
        policy.to_string()
    } else {
        format!("{AWS_MANAGED_POLICY_PREFIX}{policy}")
    }
}

/// The policies every created node role gets.
pub(crate) fn default_node_policies(irsa: bool) -> BTreeSet<String> {
    let mut names = vec!["AmazonEKSWorkerNodePolicy", "AmazonEC2ContainerRegistryReadOnly"];
    if !irsa {
        names.push("AmazonEKS_CNI_Policy");
    }
    names.into_iter().map(policy_arn).collect()
}

/// What validation needs to know about the object besides its spec.
#[derive(Debug, Clone, Default)]
pub struct ObjectInfo<'a> {
    /// Namespace.
    pub namespace: &'a str,
    /// Name.
    pub name: &'a str,
    /// Annotations.
    pub annotations: Option<&'a BTreeMap<String, String>>,
    /// `metadata.uid`: written on what the reconciler creates, so a later InstanceGroup of the
    /// same name (or one whose AWS names collide) cannot take it over.
    pub uid: Option<&'a str>,
    /// The cluster this daemon serves (`--cluster-name`): an InstanceGroup may build nodes for it
    /// alone.
    pub cluster: &'a str,
}

/// Every field error found so far.
pub(super) struct Errors(pub(super) Vec<FieldError>);

impl Errors {
    pub(super) fn invalid(&mut self, field: impl Into<String>, message: impl Into<String>) {
        self.0.push(FieldError { field: field.into(), message: message.into(), kind: FieldErrorKind::Invalid });
    }

    pub(super) fn unsupported(&mut self, field: impl Into<String>, message: impl Into<String>) {
        self.0.push(FieldError { field: field.into(), message: message.into(), kind: FieldErrorKind::Unsupported });
    }

    pub(super) fn int(&mut self, field: &str, value: i64, min: i64, max: i64) -> i32 {
        if value < min || value > max {
            self.invalid(field, format!("{value} is out of range {min}..={max}"));
        }
        value.clamp(min, max) as i32
    }

    pub(super) fn one_of(&mut self, field: &str, value: &str, allowed: &[&str]) -> String {
        match allowed.iter().find(|a| a.eq_ignore_ascii_case(value)) {
            Some(found) => (*found).to_string(),
            None => {
                self.invalid(field, format!("{value:?} is not one of {}", allowed.join(", ")));
                value.to_string()
            }
        }
    }
}

const CONF: &str = "spec.eks.configuration";

/// Validates and normalises an InstanceGroup of the `eks` provisioner.
pub fn validate(info: &ObjectInfo<'_>, spec: &InstanceGroupSpec, iam: &IamRules) -> Result<GroupDesign, ValidateError> {
    let mut errors = Errors(Vec::new());
    let fail = |errors: Errors| ValidateError {
        namespace: info.namespace.to_string(),
        name: info.name.to_string(),
        errors: errors.0,
    };
    match spec.provisioner.to_ascii_lowercase().as_str() {
        "eks" => {}
        "eks-managed" => errors.invalid("spec.provisioner", "eks-managed groups are validated by validate_managed"),
        "eks-fargate" => errors.unsupported(
            "spec.provisioner",
            format!("{} is not supported by spots-booster; use eks or eks-managed", spec.provisioner),
        ),
        "" => errors.invalid("spec.provisioner", "is required (eks or eks-managed)"),
        other => errors.invalid("spec.provisioner", format!("unknown provisioner {other:?}; use eks or eks-managed")),
    }
    let Some(eks) = &spec.eks else {
        if spec.provisioner.eq_ignore_ascii_case("eks") {
            errors.invalid("spec.eks", "is required with the eks provisioner");
        }
        return Err(fail(errors));
    };
    match eks.scaling_configuration.as_deref().unwrap_or("") {
        "" => {}
        t if t.eq_ignore_ascii_case("LaunchTemplate") => {}
        t if t.eq_ignore_ascii_case("LaunchConfiguration") => errors
            .unsupported("spec.eks.type", "LaunchConfiguration is retired by AWS; use LaunchTemplate (the default)"),
        t => errors.invalid("spec.eks.type", format!("{t:?} is not LaunchTemplate")),
    }
    let min_size = errors.int("spec.eks.minSize", eks.min_size.unwrap_or(0), 0, i32::MAX as i64);
    let max_size = errors.int("spec.eks.maxSize", eks.max_size.unwrap_or(0), 0, i32::MAX as i64);
    if min_size > max_size {
        errors.invalid("spec.eks.maxSize", format!("{max_size} is below minSize {min_size}"));
    }
    let config = &eks.configuration;
    let annotations = info.annotations.cloned().unwrap_or_default();
    let flag = |key: &str| annotations.get(key).is_some_and(|v| v.eq_ignore_ascii_case("true"));

    check_cluster_name(&mut errors, CONF, &config.cluster_name, info.cluster);
    check_image(&mut errors, &config.image);
    if config.instance_type.is_empty() {
        errors.invalid(format!("{CONF}.instanceType"), "is required");
    }
    let subnets = sorted_refs(&mut errors, "subnets", &config.subnets);
    let security_groups = sorted_refs(&mut errors, "securityGroups", &config.security_groups);
    let (volumes, mounts) = volumes(&mut errors, &config.volumes);
    let suspended_processes = expand(&mut errors, "suspendProcesses", &config.suspend_processes, ALL_PROCESSES);
    let metrics = expand(&mut errors, "metricsCollection", &config.metrics_collection, ALL_METRICS);
    let mixed_instances = mixed_instances(&mut errors, config);
    let spot_price = spot_price(&mut errors, config);
    let lifecycle = match (&mixed_instances, &spot_price) {
        (Some(m), _) if m.on_demand_percent_above_base < 100 => Lifecycle::Mixed,
        (_, Some(_)) => Lifecycle::Spot,
        _ => Lifecycle::Normal,
    };
    let os_family = os_family(&mut errors, &annotations, config);
    let warm_pool = eks.warm_pool.as_ref().map(|pool| {
        if config.mixed_instances_policy.is_some() || config.spot_price.is_some() {
            errors.invalid("spec.eks.warmPool", "cannot be combined with mixedInstancesPolicy or spotPrice");
        }
        if os_family == OsFamily::Bottlerocket {
            errors.unsupported("spec.eks.warmPool", "warm pools do not work with Bottlerocket");
        }
        let min_size = errors.int("spec.eks.warmPool.minSize", pool.min_size, 0, i32::MAX as i64);
        let max_prepared = match pool.max_size {
            -1 => None,
            max => Some(errors.int("spec.eks.warmPool.maxSize", max, min_size as i64, i32::MAX as i64)),
        };
        WarmPool { min_size, max_prepared }
    });
    let bootstrap = bootstrap(&mut errors, info.name, &annotations, config, os_family, lifecycle, mounts);
    let mut tags = tag_list(&mut errors, &format!("{CONF}.tags"), &config.tags);
    refuse_reserved_tags(&mut errors, &format!("{CONF}.tags"), &tags);
    if let Some(list) = annotations.get(ANNOTATION_FALLBACKS) {
        let field = format!("metadata.annotations[{ANNOTATION_FALLBACKS}]");
        let names: Vec<&str> = list.split(',').map(str::trim).filter(|n| !n.is_empty()).collect();
        // InstanceGroup names are DNS-1123 subdomains; another namespace's group is not this
        // tenant's to fill.
        let valid = |n: &str| {
            n.len() <= 253
                && n.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
                && n.starts_with(|c: char| c.is_ascii_alphanumeric())
        };
        if let Some(bad) = names.iter().find(|n| !valid(n) || **n == info.name) {
            errors.invalid(field, format!("{bad:?} is not another InstanceGroup of this namespace"));
        } else if !names.is_empty() {
            let groups: Vec<String> =
                names.iter().map(|n| format!("{}-{}-{n}", config.cluster_name, info.namespace)).collect();
            tags.insert(crate::ports::FALLBACK_GROUPS_TAG.to_string(), groups.join(","));
        }
    }
    let mut tag_specifications = BTreeMap::new();
    for (i, spec) in config.tag_specifications.iter().enumerate() {
        let field = format!("{CONF}.tagSpecifications[{i}]");
        let resource = errors.one_of(&format!("{field}.resourceType"), &spec.resource_type, TAG_RESOURCE_TYPES);
        let tags = tag_list(&mut errors, &format!("{field}.tags"), &spec.tags);
        refuse_reserved_tags(&mut errors, &format!("{field}.tags"), &tags);
        tag_specifications.entry(resource).or_insert_with(BTreeMap::new).extend(tags);
    }
    let irsa_enabled = flag(ANNOTATION_IRSA);
    let role = role(&mut errors, iam.role_owner(&config.cluster_name, info), config, irsa_enabled, iam);
    let lifecycle_hooks = lifecycle_hooks(&mut errors, config);
    for (i, licence) in config.license_specifications.iter().enumerate() {
        if !licence.starts_with("arn:") {
            errors.invalid(format!("{CONF}.licenseSpecifications[{i}]"), format!("{licence:?} is not an ARN"));
        }
    }
    let placement = placement(&mut errors, config);
    let metadata = metadata(&mut errors, config);
    let strategy = strategy(&mut errors, spec.strategy.as_ref());
    let prefix = format!("{}-{}-{}", config.cluster_name, info.namespace, info.name);
    if prefix.len() > 128 {
        errors.invalid(
            "metadata.name",
            format!("{prefix:?} is longer than the 128 characters a launch template name allows"),
        );
    }
    if !errors.0.is_empty() {
        return Err(fail(errors));
    }
    Ok(GroupDesign {
        prefix,
        namespace: info.namespace.to_string(),
        name: info.name.to_string(),
        uid: info.uid.filter(|u| !u.is_empty()).map(String::from),
        cluster_name: config.cluster_name.clone(),
        min_size,
        max_size,
        image: config.image.clone(),
        instance_type: config.instance_type.clone(),
        subnets,
        security_groups,
        key_pair_name: config.key_pair_name.clone().filter(|k| !k.is_empty()),
        volumes,
        suspended_processes,
        metrics,
        bootstrap,
        spot_price,
        tags,
        tag_specifications,
        role,
        lifecycle_hooks,
        mixed_instances,
        capacity_rebalance: config.mixed_instances_policy.as_ref().and_then(|m| m.capacity_rebalance).unwrap_or(false),
        licenses: config.license_specifications.clone(),
        placement,
        metadata,
        warm_pool,
        strategy,
        lifecycle,
        cluster_autoscaler_tags: flag(ANNOTATION_CA_ENABLED),
        irsa_enabled,
        lock_upgrades: flag(ANNOTATION_LOCK_UPGRADES),
    })
}

fn check_image(errors: &mut Errors, image: &str) {
    let field = format!("{CONF}.image");
    if image.is_empty() {
        errors.invalid(field, "is required");
    } else if image == "latest" || image.starts_with("ssm://") {
        errors.unsupported(field, format!("{image:?} (an SSM-resolved AMI) is not supported; set an AMI id (ami-…)"));
    } else if !image.starts_with("ami-") {
        errors.invalid(field, format!("{image:?} is not an AMI id (ami-…)"));
    }
}

fn sorted_refs(errors: &mut Errors, name: &str, refs: &[String]) -> Vec<String> {
    if refs.is_empty() {
        errors.invalid(format!("{CONF}.{name}"), "needs at least one id or Name tag");
    }
    for (i, r) in refs.iter().enumerate() {
        if r.trim().is_empty() {
            errors.invalid(format!("{CONF}.{name}[{i}]"), "is empty");
        }
    }
    refs.iter().cloned().collect::<BTreeSet<_>>().into_iter().collect()
}

/// The block devices, sorted, and the mounts bootstrap makes.
fn volumes(errors: &mut Errors, volumes: &[NodeVolume]) -> (Vec<BlockDevice>, Vec<(String, VolumeMount)>) {
    if volumes.is_empty() {
        let root = BlockDevice {
            device: "/dev/xvda".into(),
            volume_type: "gp2".into(),
            size: Some(32),
            iops: None,
            throughput: None,
            delete_on_termination: true,
            encrypted: None,
            snapshot_id: None,
        };
        return (vec![root], Vec::new());
    }
    let mut seen = BTreeSet::new();
    let mut mounts = Vec::new();
    let mut out: Vec<BlockDevice> = volumes
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let field = format!("{CONF}.volumes[{i}]");
            if v.name.is_empty() {
                errors.invalid(format!("{field}.name"), "is required (a device name such as /dev/xvda)");
            } else if !seen.insert(v.name.as_str()) {
                errors.invalid(format!("{field}.name"), format!("device {} is listed twice", v.name));
            }
            let volume_type = errors.one_of(&format!("{field}.type"), &v.volume_type, VOLUME_TYPES);
            if v.size.is_some() && v.snapshot_id.is_some() {
                errors.invalid(format!("{field}.size"), "cannot be set together with snapshotId");
            }
            let size = v.size.map(|s| errors.int(&format!("{field}.size"), s, 1, 65_536));
            let iops = v.iops.map(|iops| {
                if !["io1", "io2", "gp3"].contains(&volume_type.as_str()) {
                    errors.invalid(
                        format!("{field}.iops"),
                        format!("only io1, io2 and gp3 take iops, not {volume_type}"),
                    );
                }
                errors.int(&format!("{field}.iops"), iops, 100, 256_000)
            });
            let throughput = v.throughput.map(|t| {
                if volume_type != "gp3" {
                    errors.invalid(
                        format!("{field}.throughput"),
                        format!("only gp3 takes throughput, not {volume_type}"),
                    );
                }
                errors.int(&format!("{field}.throughput"), t, 125, 2_000)
            });
            let mount = v.mount_options.as_ref().map(|m| {
                let file_system =
                    errors.one_of(&format!("{field}.mountOptions.fileSystem"), &m.file_system, &["xfs", "ext4"]);
                if !m.mount.starts_with('/') {
                    errors.invalid(
                        format!("{field}.mountOptions.mount"),
                        format!("{:?} is not an absolute path", m.mount),
                    );
                }
                VolumeMount { file_system, path: m.mount.clone(), persist: m.persistance.unwrap_or(true) }
            });
            if let Some(mount) = mount {
                mounts.push((v.name.clone(), mount));
            }
            BlockDevice {
                device: v.name.clone(),
                volume_type,
                size,
                iops,
                throughput,
                delete_on_termination: v.delete_on_termination.unwrap_or(true),
                encrypted: v.encrypted,
                snapshot_id: v.snapshot_id.clone(),
            }
        })
        .collect();
    out.sort();
    (out, mounts)
}

fn expand(errors: &mut Errors, name: &str, values: &[String], all: &[&str]) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (i, value) in values.iter().enumerate() {
        if value.eq_ignore_ascii_case("all") {
            out.extend(all.iter().map(|s| s.to_string()));
        } else {
            out.insert(errors.one_of(&format!("{CONF}.{name}[{i}]"), value, all));
        }
    }
    out
}

fn percent_or_int(errors: &mut Errors, field: &str, value: &IntOrString) -> (i64, bool) {
    match value {
        IntOrString::Int(n) => (*n, false),
        IntOrString::String(s) => {
            let (digits, percent) = match s.trim().strip_suffix('%') {
                Some(d) => (d, true),
                None => (s.trim(), false),
            };
            match digits.trim().parse::<i64>() {
                Ok(n) => (n, percent),
                Err(_) => {
                    errors.invalid(field, format!("{s:?} is neither a number nor a percentage"));
                    (0, percent)
                }
            }
        }
    }
}

fn mixed_instances(errors: &mut Errors, config: &EksConfiguration) -> Option<MixedInstances> {
    let policy = config.mixed_instances_policy.as_ref()?;
    let field = format!("{CONF}.mixedInstancesPolicy");
    let strategy = match policy.strategy.as_deref() {
        None if policy.spot_pools.is_some() => "lowest-price",
        None => "capacity-optimized",
        Some(s) if s.eq_ignore_ascii_case("CapacityOptimized") => "capacity-optimized",
        Some(s) if s.eq_ignore_ascii_case("LowestPrice") => "lowest-price",
        Some(s) if s.eq_ignore_ascii_case("PriceCapacityOptimized") => "price-capacity-optimized",
        Some(s) if s.eq_ignore_ascii_case("CapacityOptimizedPrioritized") => "capacity-optimized-prioritized",
        Some(s) => {
            errors.invalid(
                format!("{field}.strategy"),
                format!(
                    "{s:?} is not CapacityOptimized, PriceCapacityOptimized, CapacityOptimizedPrioritized or \
                     LowestPrice"
                ),
            );
            "capacity-optimized"
        }
    };
    let spot_pools = policy.spot_pools.map(|pools| {
        if strategy != "lowest-price" {
            errors.invalid(format!("{field}.spotPools"), "only applies with strategy LowestPrice");
        }
        errors.int(&format!("{field}.spotPools"), pools, 1, 20)
    });
    let on_demand_base =
        errors.int(&format!("{field}.baseCapacity"), policy.base_capacity.unwrap_or(0), 0, i32::MAX as i64);
    let spot_ratio = policy.spot_ratio.as_ref().map_or(0, |ratio| {
        let (n, _) = percent_or_int(errors, &format!("{field}.spotRatio"), ratio);
        errors.int(&format!("{field}.spotRatio"), n, 0, 100)
    });
    if let Some(pool) = &policy.instance_pool {
        errors.unsupported(
            format!("{field}.instancePool"),
            format!("{pool:?} is not supported; list instanceTypes instead"),
        );
    } else if policy.instance_types.is_empty() {
        errors.invalid(format!("{field}.instanceTypes"), "needs at least one instance type (or instancePool)");
    }
    let mut overrides = vec![(config.instance_type.clone(), 1)];
    for (i, t) in policy.instance_types.iter().enumerate() {
        let weight = errors.int(&format!("{field}.instanceTypes[{i}].weight"), t.weight.unwrap_or(1), 1, 999);
        if t.instance_type.is_empty() {
            errors.invalid(format!("{field}.instanceTypes[{i}].type"), "is required");
        } else if !overrides.iter().any(|(existing, _)| *existing == t.instance_type) {
            overrides.push((t.instance_type.clone(), weight));
        }
    }
    if policy.capacity_rebalance == Some(true) && spot_ratio == 0 {
        errors.invalid(format!("{field}.capacityRebalance"), "only applies to spot capacity (spotRatio above 0)");
    }
    Some(MixedInstances {
        spot_allocation_strategy: strategy.to_string(),
        spot_pools,
        on_demand_base,
        on_demand_percent_above_base: 100 - spot_ratio,
        overrides,
    })
}

fn spot_price(errors: &mut Errors, config: &EksConfiguration) -> Option<String> {
    let price = config.spot_price.as_ref().filter(|p| !p.is_empty())?;
    let field = format!("{CONF}.spotPrice");
    match price.parse::<f64>() {
        Ok(p) if p > 0.0 && p.is_finite() => {}
        _ => errors.invalid(&field, format!("{price:?} is not a positive decimal price")),
    }
    if config.mixed_instances_policy.is_some() {
        errors.invalid(field, "cannot be combined with mixedInstancesPolicy (use spotRatio)");
    }
    Some(price.clone())
}

fn os_family(errors: &mut Errors, annotations: &BTreeMap<String, String>, config: &EksConfiguration) -> OsFamily {
    let node_config = config.user_data.iter().any(|u| u.stage.eq_ignore_ascii_case("NodeConfigYaml"));
    let field = format!("metadata.annotations[{ANNOTATION_OS_FAMILY}]");
    let family = match annotations.get(ANNOTATION_OS_FAMILY).map(|s| s.to_ascii_lowercase()).as_deref() {
        None | Some("") | Some("amazonlinux2") if node_config => OsFamily::AmazonLinux2023,
        None | Some("") | Some("amazonlinux2") => OsFamily::AmazonLinux2,
        Some("amazonlinux2023") => OsFamily::AmazonLinux2023,
        Some("bottlerocket") => OsFamily::Bottlerocket,
        Some("windows") => {
            errors.unsupported(field, "windows nodes are not supported by spots-booster");
            OsFamily::AmazonLinux2
        }
        Some(other) => {
            errors.invalid(field, format!("{other:?} is not amazonlinux2, amazonlinux2023 or bottlerocket"));
            OsFamily::AmazonLinux2
        }
    };
    if node_config && family != OsFamily::AmazonLinux2023 {
        errors.invalid(format!("{CONF}.userData"), "a NodeConfigYaml stage needs the amazonlinux2023 OS family");
    }
    family
}

fn decode_user_data(data: &str) -> String {
    let compact: String = data.split_whitespace().collect();
    base64::engine::general_purpose::STANDARD
        .decode(compact.as_bytes())
        .ok()
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .filter(|_| !compact.is_empty() && compact.len().is_multiple_of(4))
        .unwrap_or_else(|| data.to_string())
}

fn bootstrap(
    errors: &mut Errors,
    name: &str,
    annotations: &BTreeMap<String, String>,
    config: &EksConfiguration,
    os_family: OsFamily,
    lifecycle: Lifecycle,
    mounts: Vec<(String, VolumeMount)>,
) -> Bootstrap {
    let mut labels = BTreeMap::new();
    match annotations.get(ANNOTATION_DEFAULT_LABELS).filter(|s| !s.is_empty()) {
        Some(defaults) => {
            for pair in defaults.split(',') {
                match pair.split_once('=') {
                    Some((k, v)) if !k.trim().is_empty() => {
                        labels.insert(k.trim().to_string(), v.trim().to_string());
                    }
                    _ => errors.invalid(
                        format!("metadata.annotations[{ANNOTATION_DEFAULT_LABELS}]"),
                        format!("{pair:?} is not key=value"),
                    ),
                }
            }
        }
        None => {
            labels.insert("node.kubernetes.io/role".to_string(), name.to_string());
        }
    }
    labels.insert("instancemgr.keikoproj.io/lifecycle".into(), lifecycle.as_str().into());
    labels.insert("instancemgr.keikoproj.io/image".into(), config.image.clone());
    for (key, value) in &config.labels {
        let domain = key.split_once('/').map(|(d, _)| d).unwrap_or("");
        let restricted = (domain == "kubernetes.io"
            || domain.ends_with(".kubernetes.io")
            || domain == "k8s.io"
            || domain.ends_with(".k8s.io"))
            && !(domain == "node.kubernetes.io"
                || domain == "kubelet.kubernetes.io"
                || domain.ends_with(".node.kubernetes.io"));
        if restricted {
            errors.invalid(
                format!("{CONF}.labels[{key}]"),
                "kubelet may not set labels in the kubernetes.io or k8s.io domains",
            );
        }
        labels.insert(key.clone(), value.clone());
    }
    let mut taints = Vec::new();
    for (i, taint) in config.taints.iter().enumerate() {
        if taint.key.is_empty() {
            errors.invalid(format!("{CONF}.taints[{i}].key"), "is required");
        }
        let effect = errors.one_of(&format!("{CONF}.taints[{i}].effect"), &taint.effect, TAINT_EFFECTS);
        taints.push(format!("{}={}:{}", taint.key, taint.value.as_deref().unwrap_or(""), effect));
    }
    let options = config.bootstrap_options.clone().unwrap_or_default();
    let container_runtime = options.container_runtime.as_ref().map(|runtime| {
        errors.one_of(&format!("{CONF}.bootstrapOptions.containerRuntime"), runtime, &["containerd", "dockerd"])
    });
    let max_pods = options.max_pods.inspect(|&n| {
        errors.int(&format!("{CONF}.bootstrapOptions.maxPods"), n, 1, 1_000);
    });
    let (mut pre_bootstrap, mut post_bootstrap, mut node_config) = (Vec::new(), Vec::new(), Vec::new());
    for (i, stage) in config.user_data.iter().enumerate() {
        let data = decode_user_data(&stage.data);
        match stage.stage.to_ascii_lowercase().as_str() {
            "prebootstrap" => pre_bootstrap.push(data),
            "postbootstrap" => post_bootstrap.push(data),
            "nodeconfigyaml" => node_config.push(data),
            _ => errors.invalid(
                format!("{CONF}.userData[{i}].stage"),
                format!("{:?} is not PreBootstrap, PostBootstrap or NodeConfigYaml", stage.stage),
            ),
        }
    }
    Bootstrap {
        os_family,
        labels,
        taints,
        extra_args: config.bootstrap_arguments.clone().filter(|a| !a.trim().is_empty()),
        max_pods,
        container_runtime,
        pre_bootstrap,
        post_bootstrap,
        node_config,
        mounts,
    }
}

/// Tags a tenant may not set: the ownership the reconciler writes, and those that say which
/// cluster a group or instance belongs to (another cluster's Cluster Autoscaler or cloud provider
/// would take it for its own; `Name` and `KubernetesCluster` are the reconciler's). Cluster
/// Autoscaler's node-template hints stay the tenant's.
pub(super) fn refuse_reserved_tags(errors: &mut Errors, field: &str, tags: &BTreeMap<String, String>) {
    let reserved = |key: &str| {
        let lower = key.to_ascii_lowercase();
        ["instancegroups.keikoproj.io/", "spots-booster.io/", "kubernetes.io/cluster/", "eks:", "aws:"]
            .iter()
            .any(|p| lower.starts_with(p))
            || (lower.starts_with("k8s.io/cluster-autoscaler/")
                && !lower.starts_with("k8s.io/cluster-autoscaler/node-template/"))
            || lower == "name"
            || lower == "kubernetescluster"
    };
    for key in tags.keys().filter(|k| reserved(k)) {
        errors.invalid(field, format!("{key} is set by the reconciler: it says which cluster owns the resource"));
    }
}

pub(super) fn tag_list(
    errors: &mut Errors,
    field: &str,
    tags: &[BTreeMap<String, String>],
) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for (i, tag) in tags.iter().enumerate() {
        match tag.get("key").filter(|k| !k.is_empty()) {
            Some(key) => {
                out.insert(key.clone(), tag.get("value").cloned().unwrap_or_default());
            }
            None => errors.invalid(format!("{field}[{i}].key"), "is required"),
        }
    }
    out
}

/// `{conf}.clusterName` must be the cluster this daemon serves: an InstanceGroup builds nodes for
/// the cluster it lives in.
pub(super) fn check_cluster_name(errors: &mut Errors, conf: &str, name: &str, cluster: &str) {
    if name.is_empty() {
        errors.invalid(format!("{conf}.clusterName"), "is required");
    } else if name != cluster {
        errors.invalid(
            format!("{conf}.clusterName"),
            format!(
                "{name:?} is not this cluster ({cluster:?}): an InstanceGroup builds nodes for the cluster it lives in"
            ),
        );
    }
}

fn role(errors: &mut Errors, owner: RoleOwner, config: &EksConfiguration, irsa: bool, iam: &IamRules) -> RoleChoice {
    let role_name = config.role_name.clone().filter(|r| !r.is_empty());
    let profile = config.instance_profile_name.clone().filter(|p| !p.is_empty());
    if role_name.is_some() || profile.is_some() {
        if !iam.existing_roles {
            let field = if role_name.is_some() { "roleName" } else { "instanceProfileName" };
            errors.invalid(
                format!("{CONF}.{field}"),
                "naming an existing role or instance profile is not allowed here: any role could be named, \
                 a more privileged one included (the operator allows it with --instancegroup-existing-roles)",
            );
        }
        if !config.managed_policies.is_empty() {
            errors.invalid(
                format!("{CONF}.managedPolicies"),
                "only applies to a role spots-booster creates (no roleName)",
            );
        }
        let profile_name = profile.or_else(|| role_name.clone()).unwrap_or_default();
        return RoleChoice::Existing { role_name, profile_name };
    }
    created_role(errors, CONF, owner, &config.managed_policies, irsa, iam)
}

/// The role the daemon creates for `owner`: the node defaults, and `managed_policies` (at
/// `{conf}.managedPolicies`) when the operator allows each, under the operator's boundary.
pub(super) fn created_role(
    errors: &mut Errors,
    conf: &str,
    owner: RoleOwner,
    managed_policies: &[String],
    irsa: bool,
    iam: &IamRules,
) -> RoleChoice {
    let defaults = default_node_policies(false);
    let mut policies = default_node_policies(irsa);
    for (i, policy) in managed_policies.iter().enumerate().filter(|(_, p)| !p.trim().is_empty()) {
        let arn = policy_arn(policy.trim());
        if defaults.contains(&arn) || iam.allowed_policies.contains(&arn) {
            policies.insert(arn);
        } else {
            errors.invalid(
                format!("{conf}.managedPolicies[{i}]"),
                format!(
                    "{policy} is not in the operator's allow-list: the node role's policies are the \
                     InstanceGroup author's, through the userdata (--instancegroup-allowed-policies)"
                ),
            );
        }
    }
    RoleChoice::Managed { name: owner.role_name(), owner, policies, boundary: iam.permissions_boundary.clone() }
}

fn lifecycle_hooks(errors: &mut Errors, config: &EksConfiguration) -> BTreeMap<String, LifecycleHook> {
    let mut out = BTreeMap::new();
    for (i, hook) in config.lifecycle_hooks.iter().enumerate() {
        let field = format!("{CONF}.lifecycleHooks[{i}]");
        let transition = match hook.lifecycle.to_ascii_lowercase().as_str() {
            "launch" => "autoscaling:EC2_INSTANCE_LAUNCHING",
            "terminate" => "autoscaling:EC2_INSTANCE_TERMINATING",
            other => {
                errors.invalid(format!("{field}.lifecycle"), format!("{other:?} is not launch or terminate"));
                ""
            }
        };
        let default_result = errors.one_of(
            &format!("{field}.defaultResult"),
            hook.default_result.as_deref().unwrap_or("abandon"),
            &["ABANDON", "CONTINUE"],
        );
        let heartbeat_timeout =
            errors.int(&format!("{field}.heartbeatTimeout"), hook.heartbeat_timeout.unwrap_or(300), 30, 7_200);
        for (name, arn) in [("notificationArn", &hook.notification_arn), ("roleArn", &hook.role_arn)] {
            if arn.as_ref().is_some_and(|a| !a.starts_with("arn:")) {
                errors.invalid(format!("{field}.{name}"), "is not an ARN");
            }
        }
        if hook.name.is_empty() {
            errors.invalid(format!("{field}.name"), "is required");
        }
        let previous = out.insert(
            hook.name.clone(),
            LifecycleHook {
                transition: transition.to_string(),
                default_result,
                heartbeat_timeout,
                notification_arn: hook.notification_arn.clone(),
                role_arn: hook.role_arn.clone(),
                metadata: hook.metadata.clone(),
            },
        );
        if previous.is_some() {
            errors.invalid(format!("{field}.name"), format!("hook {} is listed twice", hook.name));
        }
    }
    out
}

fn placement(errors: &mut Errors, config: &EksConfiguration) -> Placement {
    let Some(p) = &config.placement else { return Placement::default() };
    let tenancy = p
        .tenancy
        .as_ref()
        .map(|t| errors.one_of(&format!("{CONF}.placement.tenancy"), t, &["default", "dedicated", "host"]));
    if p.host_resource_group_arn.is_some() && tenancy.as_deref() != Some("host") {
        errors.invalid(format!("{CONF}.placement.hostResourceGroupArn"), "requires tenancy host");
    }
    Placement {
        availability_zone: p.availability_zone.clone(),
        host_resource_group_arn: p.host_resource_group_arn.clone(),
        tenancy,
    }
}

fn metadata(errors: &mut Errors, config: &EksConfiguration) -> Metadata {
    let Some(m) = &config.metadata_options else { return Metadata::default() };
    let field = format!("{CONF}.metadataOptions");
    Metadata {
        http_endpoint: m
            .http_endpoint
            .as_ref()
            .map(|v| errors.one_of(&format!("{field}.httpEndpoint"), v, &["enabled", "disabled"])),
        http_tokens: m
            .http_tokens
            .as_ref()
            .map(|v| errors.one_of(&format!("{field}.httpTokens"), v, &["required", "optional"])),
        http_put_hop_limit: m.http_put_hop_limit.map(|v| errors.int(&format!("{field}.httpPutHopLimit"), v, 1, 64)),
    }
}

fn strategy(errors: &mut Errors, strategy: Option<&UpgradeStrategy>) -> Strategy {
    let default = UpgradeStrategy::default();
    let strategy = strategy.unwrap_or(&default);
    match strategy.strategy_type.as_deref().unwrap_or("rollingUpdate").to_ascii_lowercase().as_str() {
        "rollingupdate" => {
            let field = "spec.strategy.rollingUpdate.maxUnavailable";
            let max_unavailable = match strategy.rolling_update.as_ref().and_then(|r| r.max_unavailable.as_ref()) {
                None => MaxUnavailable::Count(1),
                Some(value) => match percent_or_int(errors, field, value) {
                    (n, true) => MaxUnavailable::Percent(errors.int(field, n, 1, 100) as u32),
                    (n, false) => MaxUnavailable::Count(errors.int(field, n, 0, i32::MAX as i64).max(1) as u32),
                },
            };
            Strategy::RollingUpdate { max_unavailable }
        }
        "crd" => {
            let Some(crd) = &strategy.crd else {
                errors.invalid("spec.strategy.crd", "is required with type crd");
                return Strategy::RollingUpdate { max_unavailable: MaxUnavailable::Count(1) };
            };
            for (name, value) in [
                ("crdName", &crd.crd_name),
                ("spec", &crd.spec),
                ("statusJSONPath", &crd.status_json_path),
                ("statusSuccessString", &crd.status_success_string),
                ("statusFailureString", &crd.status_failure_string),
            ] {
                if value.trim().is_empty() {
                    errors.invalid(format!("spec.strategy.crd.{name}"), "is required with type crd");
                }
            }
            let concurrency = match crd.concurrency_policy.as_deref().map(str::to_ascii_lowercase).as_deref() {
                None | Some("forbid") => Concurrency::Forbid,
                Some("allow") => Concurrency::Allow,
                Some("replace") => Concurrency::Replace,
                Some(other) => {
                    errors.invalid(
                        "spec.strategy.crd.concurrencyPolicy",
                        format!("{other:?} is not forbid, allow or replace"),
                    );
                    Concurrency::Forbid
                }
            };
            let max_retries = match crd.max_retries.unwrap_or(3) {
                -1 => None,
                n => Some(errors.int("spec.strategy.crd.maxRetries", n, 0, 1_000) as u32),
            };
            Strategy::Crd(CrdPlan {
                crd_name: crd.crd_name.clone(),
                template: crd.spec.clone(),
                status_path: crd.status_json_path.clone(),
                success: crd.status_success_string.clone(),
                failure: crd.status_failure_string.clone(),
                concurrency,
                max_retries,
            })
        }
        "managed" => {
            errors.unsupported("spec.strategy.type", "managed only applies to eks-managed and eks-fargate");
            Strategy::RollingUpdate { max_unavailable: MaxUnavailable::Count(1) }
        }
        other => {
            errors.invalid("spec.strategy.type", format!("{other:?} is not rollingUpdate or crd"));
            Strategy::RollingUpdate { max_unavailable: MaxUnavailable::Count(1) }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::instancegroup::api::{InstanceGroup, TagSpecification};

    /// The cluster of the reference example, which the tests' daemon serves.
    pub(crate) const CLUSTER: &str = "prod-euw1";

    pub(crate) fn example() -> InstanceGroup {
        let mut ig: InstanceGroup = serde_yaml::from_str(include_str!("../testdata/batch-spot.yaml")).unwrap();
        ig.spec.eks.as_mut().unwrap().configuration.image = "ami-0123456789abcdef0".into();
        ig
    }

    fn run(ig: &InstanceGroup) -> Result<GroupDesign, ValidateError> {
        let info = ObjectInfo {
            namespace: ig.metadata.namespace.as_deref().unwrap_or("default"),
            name: ig.metadata.name.as_deref().unwrap_or(""),
            annotations: ig.metadata.annotations.as_ref(),
            uid: None,
            cluster: CLUSTER,
        };
        validate(&info, &ig.spec, &IamRules::default())
    }

    fn run_with(ig: &InstanceGroup, iam: &IamRules) -> Result<GroupDesign, ValidateError> {
        let info = ObjectInfo {
            namespace: "t",
            name: "a",
            annotations: ig.metadata.annotations.as_ref(),
            uid: None,
            cluster: CLUSTER,
        };
        validate(&info, &ig.spec, iam)
    }

    #[test]
    fn fallback_instancegroups_become_the_asgs_fallback_tag_within_the_namespace() {
        let mut ig = example();
        ig.metadata.annotations =
            Some([(ANNOTATION_FALLBACKS.to_string(), "batch-ondemand, batch-spot-b".to_string())].into());
        let design = run(&ig).unwrap();
        let cluster = &ig.spec.eks.as_ref().unwrap().configuration.cluster_name;
        let ns = ig.metadata.namespace.as_deref().unwrap_or("default");
        assert_eq!(
            design.tags.get(crate::ports::FALLBACK_GROUPS_TAG),
            Some(&format!("{cluster}-{ns}-batch-ondemand,{cluster}-{ns}-batch-spot-b"))
        );
        for bad in ["Other/Namespace", "batch,../x", ig.metadata.name.clone().unwrap().as_str()] {
            ig.metadata.annotations = Some([(ANNOTATION_FALLBACKS.to_string(), bad.to_string())].into());
            let err = run(&ig).unwrap_err();
            assert_eq!(err.errors[0].field, format!("metadata.annotations[{ANNOTATION_FALLBACKS}]"), "{bad}");
        }
    }

    #[test]
    fn an_instancegroup_cannot_hand_its_node_role_more_than_the_operator_allows() {
        let mut ig = example();
        config(&mut ig).managed_policies =
            vec!["AdministratorAccess".into(), "arn:aws:iam::1:policy/tenant".into(), "AmazonEKS_CNI_Policy".into()];
        let err = run(&ig).unwrap_err();
        let fields: Vec<&str> = err.errors.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(
            fields,
            vec!["spec.eks.configuration.managedPolicies[0]", "spec.eks.configuration.managedPolicies[1]"],
            "the defaults stay allowed; anything else needs the operator"
        );
        assert!(err.to_string().contains("AdministratorAccess is not in the operator's allow-list"), "{err}");

        let iam =
            IamRules::new(&["arn:aws:iam::1:policy/tenant".into()], false, Some("arn:aws:iam::1:policy/b".into()));
        config(&mut ig).managed_policies = vec!["arn:aws:iam::1:policy/tenant".into()];
        let RoleChoice::Managed { policies, boundary, .. } = run_with(&ig, &iam).unwrap().role else { panic!() };
        assert!(policies.contains("arn:aws:iam::1:policy/tenant"));
        assert_eq!(boundary.as_deref(), Some("arn:aws:iam::1:policy/b"), "created roles carry the boundary");
    }

    #[test]
    fn an_instancegroup_builds_nodes_only_for_the_cluster_the_daemon_serves() {
        let mut ig = example();
        config(&mut ig).cluster_name = "staging".into();
        let err = run(&ig).unwrap_err();
        assert_eq!(err.errors.len(), 1, "{err}");
        assert_eq!(err.errors[0].field, "spec.eks.configuration.clusterName");
        assert!(err.to_string().contains("\"staging\" is not this cluster (\"prod-euw1\")"), "{err}");
    }

    #[test]
    fn tags_that_say_which_cluster_owns_a_resource_are_the_reconcilers() {
        let tag = |k: &str, v: &str| {
            BTreeMap::from([("key".to_string(), k.to_string()), ("value".to_string(), v.to_string())])
        };
        for key in [
            "k8s.io/cluster-autoscaler/other-cluster",
            "k8s.io/cluster-autoscaler/enabled",
            "kubernetes.io/cluster/other-cluster",
            "Name",
            "KubernetesCluster",
            "eks:cluster-name",
            "instancegroups.keikoproj.io/ClusterName",
            "spots-booster.io/fallback-groups",
        ] {
            let mut ig = example();
            config(&mut ig).tags = vec![tag(key, "x")];
            let err = run(&ig).unwrap_err();
            assert_eq!(err.errors[0].field, "spec.eks.configuration.tags", "{key}: {err}");
            assert!(err.to_string().contains(&format!("{key} is set by the reconciler")), "{err}");
            let mut ig = example();
            config(&mut ig).tag_specifications =
                vec![TagSpecification { resource_type: "instance".into(), tags: vec![tag(key, "x")] }];
            let err = run(&ig).unwrap_err();
            assert_eq!(err.errors[0].field, "spec.eks.configuration.tagSpecifications[0].tags", "{key}: {err}");
        }
        let mut ig = example();
        config(&mut ig).tags =
            vec![tag("team", "batch"), tag("k8s.io/cluster-autoscaler/node-template/label/team", "batch")];
        let design = run(&ig).expect("a tenant's own tags and Cluster Autoscaler's node-template hints pass");
        assert_eq!(design.tags["team"], "batch");
    }

    #[test]
    fn an_existing_role_or_profile_needs_the_operators_consent() {
        let mut ig = example();
        config(&mut ig).role_name = Some("cluster-admin".into());
        let err = run(&ig).unwrap_err();
        assert_eq!(err.errors[0].field, "spec.eks.configuration.roleName");
        assert!(err.to_string().contains("--instancegroup-existing-roles"), "{err}");
        let mut ig = example();
        config(&mut ig).instance_profile_name = Some("admin-profile".into());
        assert_eq!(run(&ig).unwrap_err().errors[0].field, "spec.eks.configuration.instanceProfileName");
        let allowed = IamRules { existing_roles: true, ..IamRules::default() };
        assert!(matches!(run_with(&ig, &allowed).unwrap().role, RoleChoice::Existing { .. }));
    }

    fn errors_of(edit: impl FnOnce(&mut InstanceGroup)) -> Vec<(String, FieldErrorKind)> {
        let mut ig = example();
        edit(&mut ig);
        run(&ig).expect_err("the edit is invalid").errors.into_iter().map(|e| (e.field, e.kind)).collect()
    }

    fn config(ig: &mut InstanceGroup) -> &mut EksConfiguration {
        &mut ig.spec.eks.as_mut().unwrap().configuration
    }

    #[test]
    fn the_newer_spot_allocation_strategies_and_capacity_rebalance_map_to_aws_terms() {
        for (strategy, aws) in [
            ("PriceCapacityOptimized", "price-capacity-optimized"),
            ("capacityOptimizedPrioritized", "capacity-optimized-prioritized"),
        ] {
            let mut ig = example();
            let policy = config(&mut ig).mixed_instances_policy.as_mut().unwrap();
            policy.strategy = Some(strategy.into());
            policy.capacity_rebalance = Some(true);
            let design = run(&ig).unwrap();
            assert_eq!(design.mixed_instances.unwrap().spot_allocation_strategy, aws);
            assert!(design.capacity_rebalance);
        }
        let on_demand = errors_of(|ig| {
            let policy = config(ig).mixed_instances_policy.as_mut().unwrap();
            policy.spot_ratio = Some(IntOrString::Int(0));
            policy.capacity_rebalance = Some(true);
        });
        assert_eq!(
            on_demand,
            [("spec.eks.configuration.mixedInstancesPolicy.capacityRebalance".to_string(), FieldErrorKind::Invalid)]
        );
        assert!(!run(&example()).unwrap().capacity_rebalance, "off unless asked");
    }

    #[test]
    fn the_reference_example_becomes_a_mixed_spot_design() {
        let design = run(&example()).unwrap();
        assert_eq!(design.prefix, "prod-euw1-instance-manager-batch-spot");
        assert_eq!((design.min_size, design.max_size), (1, 30));
        assert_eq!(design.lifecycle, Lifecycle::Mixed);
        let mixed = design.mixed_instances.unwrap();
        assert_eq!(mixed.on_demand_percent_above_base, 10);
        assert_eq!(mixed.on_demand_base, 1);
        assert_eq!(mixed.spot_allocation_strategy, "capacity-optimized");
        assert_eq!(mixed.overrides[0], ("m6i.2xlarge".to_string(), 1), "the primary type comes first");
        assert_eq!(mixed.overrides.len(), 5);
        assert!(design.irsa_enabled && design.cluster_autoscaler_tags);
        match design.role {
            RoleChoice::Managed { name, owner, policies, .. } => {
                assert!(name.starts_with("prod-euw1-instance-manager-batch-spot-"), "{name}");
                assert_eq!(name, owner.role_name());
                assert_eq!((owner.namespace.as_str(), owner.name.as_str()), ("instance-manager", "batch-spot"));
                assert!(
                    !policies.iter().any(|p| p.ends_with("AmazonEKS_CNI_Policy")),
                    "irsa-enabled drops the CNI policy"
                );
                assert_eq!(policies.len(), 2);
            }
            other => panic!("expected a managed role, got {other:?}"),
        }
        assert_eq!(design.strategy, Strategy::RollingUpdate { max_unavailable: MaxUnavailable::Percent(25) });
        assert_eq!(design.bootstrap.taints, ["workload-class=batch:NoSchedule"]);
        assert_eq!(design.bootstrap.labels["node.kubernetes.io/role"], "batch-spot");
        assert_eq!(design.bootstrap.labels["instancemgr.keikoproj.io/lifecycle"], "mixed");
        assert_eq!(design.lifecycle_hooks["drain-on-terminate"].transition, "autoscaling:EC2_INSTANCE_TERMINATING");
        assert_eq!(design.lifecycle_hooks["drain-on-terminate"].default_result, "CONTINUE");
        assert_eq!(design.tag_specifications["volume"]["team"], "data-platform");
        assert!(design.suspended_processes.contains("AZRebalance"));
    }

    #[test]
    fn every_invalid_field_is_named_and_reported_at_once() {
        use FieldErrorKind::*;
        type Edit = Box<dyn FnOnce(&mut InstanceGroup)>;
        type Expected = Vec<(&'static str, FieldErrorKind)>;
        let table: Vec<(&str, Edit, Expected)> = vec![
            ("no provisioner", Box::new(|ig| ig.spec.provisioner.clear()), vec![("spec.provisioner", Invalid)]),
            ("managed", Box::new(|ig| ig.spec.provisioner = "eks-managed".into()), vec![("spec.provisioner", Invalid)]),
            (
                "fargate",
                Box::new(|ig| ig.spec.provisioner = "EKS-Fargate".into()),
                vec![("spec.provisioner", Unsupported)],
            ),
            (
                "launch configuration",
                Box::new(|ig| ig.spec.eks.as_mut().unwrap().scaling_configuration = Some("LaunchConfiguration".into())),
                vec![("spec.eks.type", Unsupported)],
            ),
            (
                "min above max",
                Box::new(|ig| ig.spec.eks.as_mut().unwrap().min_size = Some(31)),
                vec![("spec.eks.maxSize", Invalid)],
            ),
            (
                "latest image",
                Box::new(|ig| config(ig).image = "latest".into()),
                vec![("spec.eks.configuration.image", Unsupported)],
            ),
            (
                "bad image",
                Box::new(|ig| config(ig).image = "ubuntu".into()),
                vec![("spec.eks.configuration.image", Invalid)],
            ),
            (
                "no subnets",
                Box::new(|ig| config(ig).subnets.clear()),
                vec![("spec.eks.configuration.subnets", Invalid)],
            ),
            (
                "iops on gp2",
                Box::new(|ig| config(ig).volumes[0].volume_type = "gp2".into()),
                vec![
                    ("spec.eks.configuration.volumes[0].iops", Invalid),
                    ("spec.eks.configuration.volumes[0].throughput", Invalid),
                ],
            ),
            (
                "size and snapshot",
                Box::new(|ig| config(ig).volumes[0].snapshot_id = Some("snap-1".into())),
                vec![("spec.eks.configuration.volumes[0].size", Invalid)],
            ),
            (
                "unknown process",
                Box::new(|ig| config(ig).suspend_processes.push("Nap".into())),
                vec![("spec.eks.configuration.suspendProcesses[1]", Invalid)],
            ),
            (
                "spot pools with capacity optimized",
                Box::new(|ig| config(ig).mixed_instances_policy.as_mut().unwrap().spot_pools = Some(25)),
                vec![
                    ("spec.eks.configuration.mixedInstancesPolicy.spotPools", Invalid),
                    ("spec.eks.configuration.mixedInstancesPolicy.spotPools", Invalid),
                ],
            ),
            (
                "spot ratio over 100",
                Box::new(|ig| {
                    config(ig).mixed_instances_policy.as_mut().unwrap().spot_ratio =
                        Some(IntOrString::String("120%".into()))
                }),
                vec![("spec.eks.configuration.mixedInstancesPolicy.spotRatio", Invalid)],
            ),
            (
                "sub-family pool",
                Box::new(|ig| {
                    config(ig).mixed_instances_policy.as_mut().unwrap().instance_pool = Some("SubFamilyFlexible".into())
                }),
                vec![("spec.eks.configuration.mixedInstancesPolicy.instancePool", Unsupported)],
            ),
            (
                "spot price with a mixed policy",
                Box::new(|ig| config(ig).spot_price = Some("0.2".into())),
                vec![("spec.eks.configuration.spotPrice", Invalid)],
            ),
            (
                "bad taint",
                Box::new(|ig| config(ig).taints[0].effect = "Never".into()),
                vec![("spec.eks.configuration.taints[0].effect", Invalid)],
            ),
            (
                "restricted label",
                Box::new(|ig| {
                    config(ig).labels.insert("kubernetes.io/role".into(), "x".into());
                }),
                vec![("spec.eks.configuration.labels[kubernetes.io/role]", Invalid)],
            ),
            (
                "role arn checked as role arn",
                Box::new(|ig| config(ig).lifecycle_hooks[0].role_arn = Some("not-an-arn".into())),
                vec![("spec.eks.configuration.lifecycleHooks[0].roleArn", Invalid)],
            ),
            (
                "hook lifecycle",
                Box::new(|ig| config(ig).lifecycle_hooks[0].lifecycle = "boot".into()),
                vec![("spec.eks.configuration.lifecycleHooks[0].lifecycle", Invalid)],
            ),
            (
                "hop limit",
                Box::new(|ig| config(ig).metadata_options.as_mut().unwrap().http_put_hop_limit = Some(65)),
                vec![("spec.eks.configuration.metadataOptions.httpPutHopLimit", Invalid)],
            ),
            (
                "warm pool with mixed",
                Box::new(|ig| ig.spec.eks.as_mut().unwrap().warm_pool = Some(Default::default())),
                vec![("spec.eks.warmPool", Invalid)],
            ),
            (
                "windows",
                Box::new(|ig| {
                    ig.metadata.annotations.as_mut().unwrap().insert(ANNOTATION_OS_FAMILY.into(), "windows".into());
                }),
                vec![("metadata.annotations[instancemgr.keikoproj.io/os-family]", Unsupported)],
            ),
            (
                "crd without fields",
                Box::new(|ig| {
                    ig.spec.strategy = Some(UpgradeStrategy { strategy_type: Some("crd".into()), ..Default::default() })
                }),
                vec![("spec.strategy.crd", Invalid)],
            ),
            (
                "bad percent",
                Box::new(|ig| {
                    ig.spec.strategy.as_mut().unwrap().rolling_update.as_mut().unwrap().max_unavailable =
                        Some(IntOrString::String("a lot".into()))
                }),
                vec![("spec.strategy.rollingUpdate.maxUnavailable", Invalid)],
            ),
        ];
        for (case, edit, expected) in table {
            let expected: Vec<(String, FieldErrorKind)> =
                expected.into_iter().map(|(f, k)| (f.to_string(), k)).collect();
            assert_eq!(errors_of(edit), expected, "{case}");
        }
    }

    #[test]
    fn several_errors_come_back_together_and_name_the_object() {
        let mut ig = example();
        config(&mut ig).instance_type.clear();
        config(&mut ig).security_groups.clear();
        let err = run(&ig).unwrap_err();
        assert_eq!(err.errors.len(), 2);
        let text = err.to_string();
        assert!(text.starts_with("invalid InstanceGroup instance-manager/batch-spot: "), "{text}");
        assert!(text.contains("spec.eks.configuration.instanceType: is required"), "{text}");
        assert_eq!(err.reason(), GroupEventReason::InvalidSpec);
    }

    #[test]
    fn defaults_apply_where_the_spec_is_silent() {
        let mut ig = example();
        let c = config(&mut ig);
        c.volumes.clear();
        c.mixed_instances_policy = None;
        c.lifecycle_hooks = vec![crate::instancegroup::api::LifecycleHookSpec {
            name: "h".into(),
            lifecycle: "Launch".into(),
            ..Default::default()
        }];
        ig.spec.strategy = None;
        ig.metadata.annotations = None;
        let design = run(&ig).unwrap();
        assert_eq!(design.volumes.len(), 1);
        assert_eq!(
            (design.volumes[0].device.as_str(), design.volumes[0].volume_type.as_str(), design.volumes[0].size),
            ("/dev/xvda", "gp2", Some(32))
        );
        assert_eq!(design.lifecycle, Lifecycle::Normal);
        assert_eq!(design.strategy, Strategy::RollingUpdate { max_unavailable: MaxUnavailable::Count(1) });
        assert_eq!(design.lifecycle_hooks["h"].default_result, "ABANDON");
        assert_eq!(design.lifecycle_hooks["h"].heartbeat_timeout, 300);
        let RoleChoice::Managed { policies, .. } = design.role else { panic!("managed role") };
        assert!(policies.contains("arn:aws:iam::aws:policy/AmazonEKS_CNI_Policy"));
    }

    #[test]
    fn spot_price_becomes_spot_lifecycle_and_long_prefixes_fit_the_role_name() {
        let mut ig = example();
        config(&mut ig).mixed_instances_policy = None;
        config(&mut ig).spot_price = Some("0.25".into());
        ig.metadata.name = Some("a-very-long-instance-group-name-that-pushes-the-prefix-past-63".into());
        let design = run(&ig).unwrap();
        assert_eq!(design.lifecycle, Lifecycle::Spot);
        assert_eq!(design.spot_price.as_deref(), Some("0.25"));
        let RoleChoice::Managed { name, .. } = design.role else { panic!("managed role") };
        assert_eq!(name.len(), 64, "cut to IAM's 64 characters, the owner's hash kept: {name}");
        assert!(name.starts_with("prod-euw1-instance-manager-a-very-long"), "{name}");
    }

    #[test]
    fn no_two_owners_share_a_role_name_and_every_part_is_tagged() {
        let owner = |region: &str, namespace: &str, name: &str| RoleOwner {
            region: region.into(),
            cluster: "prod".into(),
            namespace: namespace.into(),
            name: name.into(),
            uid: Some("uid-1".into()),
        };
        // A tenant's `team/a-gpu` joins to `team-a/gpu`'s dashes; a same-name cluster in another
        // region would share IAM's one account-wide namespace.
        let victim = owner("eu-west-1", "team-a", "gpu");
        for other in [owner("eu-west-1", "team", "a-gpu"), owner("us-east-1", "team-a", "gpu")] {
            assert_ne!(victim.role_name(), other.role_name(), "{other:?}");
            assert!(victim.foreign(&other.tags()).is_some(), "{other:?} would be adopted");
        }
        assert_eq!(victim.role_name(), owner("eu-west-1", "team-a", "gpu").role_name(), "stable");
        assert!(victim.role_name().len() <= 64);
        assert_eq!(victim.foreign(&victim.tags()), None);
        let tags = victim.tags();
        for key in [
            "instancegroups.keikoproj.io/ClusterName",
            "instancegroups.keikoproj.io/Namespace",
            "instancegroups.keikoproj.io/InstanceGroup",
            "spots-booster.io/instancegroup-uid",
            "spots-booster.io/cluster-region",
        ] {
            assert!(tags.contains_key(key), "{key}: {tags:?}");
        }
    }

    #[test]
    fn base64_user_data_is_decoded_and_plain_text_kept() {
        assert_eq!(decode_user_data("ZWNobyBoaQ=="), "echo hi");
        assert_eq!(decode_user_data("echo hi"), "echo hi");
        assert_eq!(decode_user_data("abcd"), "abcd", "base64 that is not UTF-8 text is taken as text");
    }
}
