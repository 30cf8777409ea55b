//! Turns an `eks-managed` InstanceGroup into a [`NodeGroupDesign`], or into every field error at
//! once, naming each field. Fields this version does not know are refused by name, never dropped.

use std::collections::{BTreeMap, BTreeSet};

use super::api::{EksManagedConfiguration, InstanceGroupSpec};
use super::design::Lifecycle;
use super::node_group::{NodeGroupDesign, NodeRole, NodeTaint};
use super::validate::{
    check_cluster_name, created_role, refuse_reserved_tags, tag_list, Errors, IamRules, ObjectInfo, ValidateError,
    ANNOTATION_FALLBACKS, ANNOTATION_IRSA,
};

const SPEC: &str = "spec.eks-managed";
const CONF: &str = "spec.eks-managed.configuration";

/// EKS's node group name limit.
const NODE_GROUP_NAME_MAX: usize = 63;

/// Taints EKS takes per node group.
const TAINTS_MAX: usize = 50;

/// Validates and normalises an `eks-managed` InstanceGroup.
pub fn validate_managed(
    info: &ObjectInfo<'_>,
    spec: &InstanceGroupSpec,
    iam: &IamRules,
) -> Result<NodeGroupDesign, ValidateError> {
    let mut errors = Errors(Vec::new());
    let fail = |errors: Errors| ValidateError {
        namespace: info.namespace.to_string(),
        name: info.name.to_string(),
        errors: errors.0,
    };
    if spec.eks.is_some() {
        errors.invalid("spec.eks", "belongs to the eks provisioner; an eks-managed group is set in spec.eks-managed");
    }
    if let Some(strategy) = &spec.strategy {
        match strategy.strategy_type.as_deref().map(str::to_ascii_lowercase).as_deref() {
            None | Some("managed") => {}
            Some(other) => errors.unsupported(
                "spec.strategy.type",
                format!(
                    "{other:?}: EKS replaces a managed node group's nodes itself on a version update (use managed)"
                ),
            ),
        }
    }
    let Some(managed) = &spec.eks_managed else {
        errors.invalid(SPEC, "is required with the eks-managed provisioner");
        return Err(fail(errors));
    };
    unknown_fields(&mut errors, SPEC, &managed.unknown);
    let config = &managed.configuration;
    unknown_fields(&mut errors, CONF, &config.unknown);
    let min_size = errors.int(&format!("{SPEC}.minSize"), managed.min_size.unwrap_or(0), 0, i32::MAX as i64);
    let max_size = errors.int(&format!("{SPEC}.maxSize"), managed.max_size.unwrap_or(0), 1, i32::MAX as i64);
    if min_size > max_size {
        errors.invalid(format!("{SPEC}.maxSize"), format!("{max_size} is below minSize {min_size}"));
    }
    check_cluster_name(&mut errors, CONF, &config.cluster_name, info.cluster);
    let annotations = info.annotations.cloned().unwrap_or_default();
    if annotations.contains_key(ANNOTATION_FALLBACKS) {
        errors.invalid(
            format!("metadata.annotations[{ANNOTATION_FALLBACKS}]"),
            "spots-booster never writes an EKS managed node group's capacity, so it boosts nothing into it",
        );
    }
    let instance_types = instance_types(&mut errors, config);
    let capacity_type = match config.capacity_type.as_deref().map(str::to_ascii_uppercase).as_deref() {
        None | Some("ON_DEMAND") => "ON_DEMAND",
        Some("SPOT") => "SPOT",
        Some(other) => {
            errors.invalid(format!("{CONF}.capacityType"), format!("{other:?} is not ON_DEMAND or SPOT"));
            "ON_DEMAND"
        }
    };
    let disk_size = config.vol_size.map(|size| errors.int(&format!("{CONF}.volSize"), size, 1, 16_384));
    let ami_type = config.ami_type.clone().filter(|a| !a.is_empty());
    if let Some(ami) = &ami_type {
        if ami.eq_ignore_ascii_case("CUSTOM") {
            errors.unsupported(
                format!("{CONF}.amiType"),
                "CUSTOM needs a launch template, which eks-managed does not build",
            );
        } else if !ami.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            errors.invalid(
                format!("{CONF}.amiType"),
                format!("{ami:?} is not an EKS AMI type (AL2023_x86_64_STANDARD…)"),
            );
        }
    }
    let version = config.version.clone().filter(|v| !v.is_empty());
    if let Some(v) = &version {
        let parts: Vec<&str> = v.split('.').collect();
        if parts.len() != 2 || parts.iter().any(|p| p.is_empty() || !p.chars().all(|c| c.is_ascii_digit())) {
            errors.invalid(format!("{CONF}.version"), format!("{v:?} is not a Kubernetes minor version (1.31)"));
        }
    }
    let taints = taints(&mut errors, config);
    let tags = tag_list(&mut errors, &format!("{CONF}.tags"), &config.tags);
    refuse_reserved_tags(&mut errors, &format!("{CONF}.tags"), &tags);
    let subnets = refs(&mut errors, "subnets", &config.subnets, true);
    let security_groups = refs(&mut errors, "securityGroups", &config.security_groups, false);
    let key = config.key_pair_name.clone().filter(|k| !k.is_empty());
    let ssh = match (key, security_groups.is_empty()) {
        (Some(key), _) => Some((key, security_groups)),
        (None, true) => None,
        (None, false) => {
            errors.invalid(
                format!("{CONF}.securityGroups"),
                "EKS opens SSH to these groups and needs keyPairName for it (node security groups need a launch \
                 template, which eks-managed does not build)",
            );
            None
        }
    };
    let name = format!("{}-{}-{}", config.cluster_name, info.namespace, info.name);
    if name.len() > NODE_GROUP_NAME_MAX {
        errors.invalid(
            "metadata.name",
            format!("{name:?} is longer than the {NODE_GROUP_NAME_MAX} characters an EKS node group name allows"),
        );
    }
    let role = match config.node_role.clone().filter(|r| !r.is_empty()) {
        Some(arn) => {
            if !iam.existing_roles {
                errors.invalid(
                    format!("{CONF}.nodeRole"),
                    "naming an existing role is not allowed here: any role could be named, a more privileged one \
                     included (the operator allows it with --instancegroup-existing-roles)",
                );
            } else if !(arn.starts_with("arn:") && arn.contains(":iam::") && arn.contains(":role/")) {
                errors.invalid(format!("{CONF}.nodeRole"), format!("{arn:?} is not an IAM role ARN"));
            }
            if !config.managed_policies.is_empty() {
                errors.invalid(format!("{CONF}.managedPolicies"), "only applies to a role spots-booster creates");
            }
            NodeRole::Brought(arn)
        }
        None => {
            let irsa = annotations.get(ANNOTATION_IRSA).is_some_and(|v| v.eq_ignore_ascii_case("true"));
            let owner = iam.role_owner(&config.cluster_name, info);
            NodeRole::Created(created_role(&mut errors, CONF, owner, &config.managed_policies, irsa, iam))
        }
    };
    if !errors.0.is_empty() {
        return Err(fail(errors));
    }
    Ok(NodeGroupDesign {
        name,
        namespace: info.namespace.to_string(),
        instance_group: info.name.to_string(),
        uid: info.uid.filter(|u| !u.is_empty()).map(String::from),
        cluster_name: config.cluster_name.clone(),
        min_size,
        max_size,
        instance_types,
        capacity_type,
        disk_size,
        ami_type,
        release_version: config.release_version.clone().filter(|r| !r.is_empty()),
        version,
        labels: config.node_labels.clone(),
        taints,
        tags,
        subnets,
        ssh,
        role,
        lifecycle: if capacity_type == "SPOT" { Lifecycle::Spot } else { Lifecycle::Normal },
    })
}

/// Refuses every field the schema does not know, naming it.
fn unknown_fields(errors: &mut Errors, at: &str, unknown: &BTreeMap<String, serde_json::Value>) {
    for field in unknown.keys() {
        let hint = match field.as_str() {
            "labels" => "; node labels are nodeLabels here",
            "image" | "volumes" | "userData" | "metadataOptions" | "bootstrapArguments" | "launchTemplate" => {
                "; it needs a launch template, which eks-managed does not build (use the eks provisioner)"
            }
            _ => "",
        };
        errors.invalid(format!("{at}.{field}"), format!("is not a field of the eks-managed provisioner{hint}"));
    }
}

/// `instanceType` first, then `instanceTypes`, without repeats.
fn instance_types(errors: &mut Errors, config: &EksManagedConfiguration) -> Vec<String> {
    let mut types = Vec::new();
    for (field, t) in std::iter::once((format!("{CONF}.instanceType"), &config.instance_type))
        .chain(config.instance_types.iter().enumerate().map(|(i, t)| (format!("{CONF}.instanceTypes[{i}]"), t)))
    {
        if t.is_empty() {
            continue;
        }
        if !t.contains('.') || !t.chars().all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-') {
            errors.invalid(field, format!("{t:?} is not an instance type"));
        } else if !types.contains(t) {
            types.push(t.clone());
        }
    }
    if types.is_empty() && config.instance_type.is_empty() && config.instance_types.is_empty() {
        errors.invalid(format!("{CONF}.instanceType"), "is required (or instanceTypes)");
    }
    types
}

fn taints(errors: &mut Errors, config: &EksManagedConfiguration) -> BTreeSet<NodeTaint> {
    if config.taints.len() > TAINTS_MAX {
        errors.invalid(format!("{CONF}.taints"), format!("EKS takes at most {TAINTS_MAX} taints"));
    }
    let mut out = BTreeSet::new();
    for (i, taint) in config.taints.iter().enumerate() {
        let field = format!("{CONF}.taints[{i}]");
        if taint.key.is_empty() {
            errors.invalid(format!("{field}.key"), "is required");
        }
        let effect = match taint.effect.as_str() {
            "NoSchedule" | "NO_SCHEDULE" => "NO_SCHEDULE",
            "NoExecute" | "NO_EXECUTE" => "NO_EXECUTE",
            "PreferNoSchedule" | "PREFER_NO_SCHEDULE" => "PREFER_NO_SCHEDULE",
            other => {
                errors.invalid(
                    format!("{field}.effect"),
                    format!("{other:?} is not NoSchedule, PreferNoSchedule or NoExecute"),
                );
                continue;
            }
        };
        out.insert(NodeTaint {
            key: taint.key.clone(),
            value: taint.value.clone().filter(|v| !v.is_empty()),
            effect: effect.to_string(),
        });
    }
    out
}

fn refs(errors: &mut Errors, name: &str, refs: &[String], required: bool) -> Vec<String> {
    if required && refs.is_empty() {
        errors.invalid(format!("{CONF}.{name}"), "needs at least one id or Name tag");
    }
    for (i, r) in refs.iter().enumerate() {
        if r.trim().is_empty() {
            errors.invalid(format!("{CONF}.{name}[{i}]"), "is empty");
        }
    }
    refs.iter().cloned().collect::<BTreeSet<_>>().into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::instancegroup::api::InstanceGroup;
    use crate::instancegroup::design::RoleChoice;

    const SAMPLE: &str = include_str!("../testdata/managed-spot.yaml");

    fn ig() -> InstanceGroup {
        serde_yaml::from_str(SAMPLE).expect("the sample parses")
    }

    fn check(ig: &InstanceGroup, iam: &IamRules) -> Result<NodeGroupDesign, Vec<(String, String)>> {
        let info = ObjectInfo {
            namespace: "instance-manager",
            name: "batch-managed",
            annotations: ig.metadata.annotations.as_ref(),
            uid: Some("uid-1"),
            cluster: "prod-euw1",
        };
        validate_managed(&info, &ig.spec, iam).map_err(|e| e.errors.into_iter().map(|e| (e.field, e.message)).collect())
    }

    #[test]
    fn the_sample_becomes_a_spot_node_group_with_a_created_role() {
        let design = check(&ig(), &IamRules::default()).unwrap();
        assert_eq!(design.name, "prod-euw1-instance-manager-batch-managed");
        assert_eq!(design.capacity_type, "SPOT");
        assert_eq!(design.instance_types, ["m6i.large", "m6a.large", "m5.large"]);
        assert_eq!((design.min_size, design.max_size, design.disk_size), (1, 6, Some(50)));
        assert_eq!(design.labels.get("team").map(String::as_str), Some("batch"));
        assert_eq!(design.taints.iter().next().map(|t| t.effect.as_str()), Some("NO_SCHEDULE"));
        assert_eq!(design.lifecycle, Lifecycle::Spot);
        let NodeRole::Created(RoleChoice::Managed { name, policies, .. }) = &design.role else {
            panic!("{:?}", design.role)
        };
        assert!(name.starts_with("prod-euw1-instance-manager-batch-managed-"), "{name}");
        assert_eq!(policies.len(), 3, "the node defaults: {policies:?}");
    }

    #[test]
    fn every_bad_field_is_named_at_once() {
        let mut ig = ig();
        let m = ig.spec.eks_managed.as_mut().unwrap();
        m.min_size = Some(5);
        m.max_size = Some(2);
        m.unknown.insert("warmPool".into(), serde_json::json!({}));
        let c = &mut m.configuration;
        c.capacity_type = Some("RESERVED".into());
        c.cluster_name = "prod-use1".into();
        c.unknown.insert("labels".into(), serde_json::json!({"a": "b"}));
        c.unknown.insert("volumes".into(), serde_json::json!([]));
        c.taints[0].effect = "Sometimes".into();
        c.tags.push(BTreeMap::from([("key".to_string(), "eks:cluster-name".to_string())]));
        c.node_role = Some("arn:aws:iam::1:role/admin".into());
        c.key_pair_name = None;
        c.security_groups = vec!["sg-1".into()];
        c.instance_type = "m6i large".into();
        let fields: BTreeSet<String> =
            check(&ig, &IamRules::default()).unwrap_err().into_iter().map(|(f, _)| f).collect();
        let expected: BTreeSet<String> = [
            "spec.eks-managed.maxSize",
            "spec.eks-managed.warmPool",
            "spec.eks-managed.configuration.capacityType",
            "spec.eks-managed.configuration.clusterName",
            "spec.eks-managed.configuration.labels",
            "spec.eks-managed.configuration.volumes",
            "spec.eks-managed.configuration.taints[0].effect",
            "spec.eks-managed.configuration.tags",
            "spec.eks-managed.configuration.nodeRole",
            "spec.eks-managed.configuration.securityGroups",
            "spec.eks-managed.configuration.instanceType",
        ]
        .into_iter()
        .map(String::from)
        .collect();
        assert_eq!(fields, expected);
    }

    #[test]
    fn a_brought_role_needs_the_operator_and_a_long_name_is_refused() {
        let mut ig = ig();
        ig.spec.eks_managed.as_mut().unwrap().configuration.node_role = Some("arn:aws:iam::1:role/nodes".into());
        let iam = IamRules::new(&[], true, None);
        assert_eq!(check(&ig, &iam).unwrap().role, NodeRole::Brought("arn:aws:iam::1:role/nodes".into()));
        let info = ObjectInfo {
            namespace: "instance-manager",
            name: &"x".repeat(40),
            cluster: "prod-euw1",
            ..Default::default()
        };
        let err = validate_managed(&info, &ig.spec, &iam).unwrap_err();
        assert_eq!(err.errors[0].field, "metadata.name");
    }

    #[test]
    fn the_eks_spec_a_rolling_strategy_and_fallbacks_do_not_apply() {
        let mut ig = ig();
        ig.spec.eks = Some(Default::default());
        ig.spec.strategy = Some(crate::instancegroup::api::UpgradeStrategy {
            strategy_type: Some("rollingUpdate".into()),
            ..Default::default()
        });
        ig.metadata.annotations = Some(BTreeMap::from([(ANNOTATION_FALLBACKS.to_string(), "od".to_string())]));
        let fields: Vec<String> = check(&ig, &IamRules::default()).unwrap_err().into_iter().map(|(f, _)| f).collect();
        assert_eq!(
            fields,
            ["spec.eks", "spec.strategy.type", "metadata.annotations[spots-booster.io/fallback-instancegroups]"]
        );
    }
}
