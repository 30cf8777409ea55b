//! `kube-system/aws-auth` `mapRoles` edits: upsert a node role, remove it. Everything else in the
//! ConfigMap (other roles, `mapUsers`, `mapAccounts`, unknown keys of an entry) is kept as it was,
//! so a node group we do not manage never loses its mapping.
//!
//! The daemon only ever edits entries it created, listed in the ConfigMap's annotation
//! [`OWNED_ANNOTATION`]: a role someone else mapped (the admin role in `system:masters`, a node
//! group of another tool) is never rewritten or removed, and an InstanceGroup naming it is refused.

use std::collections::{BTreeMap, BTreeSet};

use serde_yaml::{Mapping, Value};

/// The ConfigMap's namespace.
pub(crate) const NAMESPACE: &str = crate::ports::AWS_AUTH_CONFIGMAP.0;
/// The ConfigMap's name.
pub const NAME: &str = crate::ports::AWS_AUTH_CONFIGMAP.1;
const MAP_ROLES: &str = "mapRoles";
const NODE_USERNAME: &str = "system:node:{{EC2PrivateDNSName}}";
const NODE_GROUPS: &[&str] = &["system:bootstrappers", "system:nodes"];

/// The annotation on aws-auth listing (as a JSON array) the role ARNs the daemon mapped.
pub(crate) const OWNED_ANNOTATION: &str = "spots-booster.io/owned-roles";

/// aws-auth could not be edited safely.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EditAwsAuthError {
    /// `mapRoles` is not a YAML list of mappings.
    #[error("kube-system/aws-auth data.mapRoles is not a YAML list of role mappings: {0}")]
    NotAList(String),
    /// The role is already mapped, and not by the daemon.
    #[error(
        "role {role_arn} is already mapped in kube-system/aws-auth (username {username:?}) by someone else: \
         its entry is left alone; use a role of its own for this InstanceGroup, or hand the entry over by \
         adding the ARN to the ConfigMap's {OWNED_ANNOTATION} annotation"
    )]
    MappedBySomeoneElse {
        /// The role.
        role_arn: String,
        /// The entry's username.
        username: String,
    },
    /// There is no aws-auth to map the role in: the daemon edits it, never creates it (it holds
    /// no `create` in kube-system).
    #[error(
        "kube-system/aws-auth does not exist, so node role {role_arn} cannot be mapped (the daemon edits \
         aws-auth but never creates it): create it (EKS does with the first managed node group; \
         `eksctl create iamidentitymapping` also does), or give the role an EKS access entry of type EC2_LINUX"
    )]
    Missing {
        /// The role to map.
        role_arn: String,
    },
}

/// The roles the daemon mapped, from aws-auth's annotations.
pub(crate) fn owned_roles(annotations: Option<&BTreeMap<String, String>>) -> BTreeSet<String> {
    annotations
        .and_then(|a| a.get(OWNED_ANNOTATION))
        .and_then(|v| serde_json::from_str::<BTreeSet<String>>(v).ok())
        .unwrap_or_default()
}

/// The annotation value for `owned`.
pub(crate) fn owned_annotation(owned: &BTreeSet<String>) -> String {
    serde_json::to_string(owned).expect("strings serialise")
}

fn roles(data: &BTreeMap<String, String>) -> Result<Vec<Value>, EditAwsAuthError> {
    match data.get(MAP_ROLES).filter(|s| !s.trim().is_empty()) {
        None => Ok(Vec::new()),
        Some(text) => {
            match crate::yaml_guard::read_yaml::<Value>(text).map_err(|e| EditAwsAuthError::NotAList(e.to_string()))? {
                Value::Sequence(items) if items.iter().all(Value::is_mapping) => Ok(items),
                Value::Null => Ok(Vec::new()),
                _ => Err(EditAwsAuthError::NotAList("expected a list of mappings".into())),
            }
        }
    }
}

fn write(data: &mut BTreeMap<String, String>, roles: Vec<Value>) {
    let text = serde_yaml::to_string(&Value::Sequence(roles)).expect("YAML values always serialise");
    data.insert(MAP_ROLES.to_string(), text);
}

fn is_role(entry: &Value, arn: &str) -> bool {
    entry.get("rolearn").and_then(Value::as_str).map(mapped_arn) == Some(mapped_arn(arn))
}

/// The ARN as aws-auth must name it: without the role's path (`role/spots-booster/x` is mapped
/// as `role/x`; the authenticator matches the path-less ARN it sees in the token).
pub fn mapped_arn(arn: &str) -> String {
    match arn.split_once(":role/") {
        Some((account, path_and_name)) => {
            format!("{account}:role/{}", path_and_name.rsplit('/').next().unwrap_or(path_and_name))
        }
        None => arn.to_string(),
    }
}

/// Maps `role_arn` as a node role, noting it in `owned`. Refuses a role someone else mapped.
/// Returns whether anything changed.
pub(crate) fn upsert_node_role(
    data: &mut BTreeMap<String, String>,
    owned: &mut BTreeSet<String>,
    role_arn: &str,
) -> Result<bool, EditAwsAuthError> {
    let role_arn = &mapped_arn(role_arn);
    let mut roles = roles(data)?;
    let groups = Value::Sequence(NODE_GROUPS.iter().map(|g| Value::String(g.to_string())).collect());
    let mut changed = owned.insert(role_arn.to_string());
    if changed {
        if let Some(entry) = roles.iter().find(|e| is_role(e, role_arn)) {
            owned.remove(role_arn);
            let username = entry.get("username").and_then(Value::as_str).unwrap_or_default().to_string();
            return Err(EditAwsAuthError::MappedBySomeoneElse { role_arn: role_arn.to_string(), username });
        }
    }
    match roles.iter_mut().find(|e| is_role(e, role_arn)) {
        Some(Value::Mapping(entry)) => {
            for (key, value) in [("username", Value::String(NODE_USERNAME.into())), ("groups", groups)] {
                if entry.get(key) != Some(&value) {
                    entry.insert(Value::String(key.into()), value);
                    changed = true;
                }
            }
        }
        _ => {
            let mut entry = Mapping::new();
            entry.insert("rolearn".into(), Value::String(role_arn.into()));
            entry.insert("username".into(), Value::String(NODE_USERNAME.into()));
            entry.insert("groups".into(), groups);
            roles.push(Value::Mapping(entry));
            changed = true;
        }
    }
    if changed {
        write(data, roles);
    }
    Ok(changed)
}

/// Unmaps `role_arn` when the daemon mapped it (it is in `owned`); anyone else's entry stays.
/// Returns whether anything changed.
pub(crate) fn remove_role(
    data: &mut BTreeMap<String, String>,
    owned: &mut BTreeSet<String>,
    role_arn: &str,
) -> Result<bool, EditAwsAuthError> {
    let role_arn = &mapped_arn(role_arn);
    if !owned.remove(role_arn) {
        return Ok(false);
    }
    let mut roles = roles(data)?;
    let before = roles.len();
    roles.retain(|e| !is_role(e, role_arn));
    if roles.len() != before {
        write(data, roles);
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXISTING: &str = "- rolearn: arn:aws:iam::1:role/other\n  username: system:node:{{EC2PrivateDNSName}}\n  groups: [system:bootstrappers, system:nodes]\n- rolearn: arn:aws:iam::1:role/admin\n  username: admin\n  groups: [system:masters]\n";

    #[test]
    fn upsert_appends_once_and_keeps_every_other_mapping() {
        let mut data = BTreeMap::from([
            (MAP_ROLES.to_string(), EXISTING.to_string()),
            ("mapUsers".to_string(), "- userarn: arn:aws:iam::1:user/ops\n  username: ops\n".to_string()),
        ]);
        let mut owned = BTreeSet::new();
        assert!(upsert_node_role(&mut data, &mut owned, "arn:aws:iam::1:role/nodes").unwrap());
        assert!(!upsert_node_role(&mut data, &mut owned, "arn:aws:iam::1:role/nodes").unwrap(), "idempotent");
        assert_eq!(owned, BTreeSet::from(["arn:aws:iam::1:role/nodes".to_string()]));
        let roles = roles(&data).unwrap();
        assert_eq!(roles.len(), 3);
        assert_eq!(roles[1]["username"], "admin", "other roles untouched");
        assert_eq!(roles[2]["groups"][1], "system:nodes");
        assert!(data["mapUsers"].contains("userarn"), "mapUsers untouched");
        assert_eq!(
            owned_roles(Some(&BTreeMap::from([(OWNED_ANNOTATION.to_string(), owned_annotation(&owned))]))),
            owned
        );
    }

    #[test]
    fn a_role_someone_else_mapped_is_refused_and_never_rewritten_or_removed() {
        let mut data = BTreeMap::from([(MAP_ROLES.to_string(), EXISTING.to_string())]);
        let mut owned = BTreeSet::new();
        let err = upsert_node_role(&mut data, &mut owned, "arn:aws:iam::1:role/admin").unwrap_err();
        assert_eq!(
            err,
            EditAwsAuthError::MappedBySomeoneElse {
                role_arn: "arn:aws:iam::1:role/admin".into(),
                username: "admin".into()
            }
        );
        assert!(owned.is_empty());
        assert_eq!(data[MAP_ROLES], EXISTING, "the admin mapping is left as it was");
        assert!(!remove_role(&mut data, &mut owned, "arn:aws:iam::1:role/admin").unwrap(), "not ours: kept");
        assert_eq!(roles(&data).unwrap().len(), 2);
    }

    #[test]
    fn upsert_repairs_our_edited_entry_and_remove_takes_only_ours() {
        let mut data = BTreeMap::from([(
            MAP_ROLES.to_string(),
            "- rolearn: arn:aws:iam::1:role/nodes\n  username: someone\n  groups: []\n".to_string(),
        )]);
        let mut owned = BTreeSet::from(["arn:aws:iam::1:role/nodes".to_string()]);
        assert!(upsert_node_role(&mut data, &mut owned, "arn:aws:iam::1:role/nodes").unwrap());
        assert_eq!(roles(&data).unwrap()[0]["username"], NODE_USERNAME);
        let mut both = BTreeMap::from([(MAP_ROLES.to_string(), EXISTING.to_string())]);
        let mut ours = BTreeSet::from(["arn:aws:iam::1:role/other".to_string()]);
        assert!(remove_role(&mut both, &mut ours, "arn:aws:iam::1:role/other").unwrap());
        assert!(!remove_role(&mut both, &mut ours, "arn:aws:iam::1:role/other").unwrap());
        let left = roles(&both).unwrap();
        assert_eq!(left.len(), 1);
        assert_eq!(left[0]["rolearn"], "arn:aws:iam::1:role/admin");
    }

    #[test]
    fn a_role_path_is_dropped_from_the_mapping() {
        assert_eq!(mapped_arn("arn:aws:iam::1:role/spots-booster/nodes"), "arn:aws:iam::1:role/nodes");
        assert_eq!(mapped_arn("arn:aws:iam::1:role/nodes"), "arn:aws:iam::1:role/nodes");
        let (mut data, mut owned) = (BTreeMap::new(), BTreeSet::new());
        upsert_node_role(&mut data, &mut owned, "arn:aws:iam::1:role/spots-booster/nodes").unwrap();
        assert_eq!(roles(&data).unwrap()[0]["rolearn"], "arn:aws:iam::1:role/nodes");
        assert!(remove_role(&mut data, &mut owned, "arn:aws:iam::1:role/spots-booster/nodes").unwrap());
        assert!(roles(&data).unwrap().is_empty());
    }

    #[test]
    fn a_broken_map_roles_is_an_error_not_an_overwrite() {
        let mut data = BTreeMap::from([(MAP_ROLES.to_string(), "rolearn: not-a-list".to_string())]);
        let err = upsert_node_role(&mut data, &mut BTreeSet::new(), "arn:aws:iam::1:role/nodes").unwrap_err();
        assert!(err.to_string().contains("kube-system/aws-auth data.mapRoles"));
        assert_eq!(data[MAP_ROLES], "rolearn: not-a-list", "left as it was");
        let mut empty = BTreeMap::new();
        assert!(upsert_node_role(&mut empty, &mut BTreeSet::new(), "arn:aws:iam::1:role/nodes").unwrap());

        let deep = format!("- rolearn: {}", "[".repeat(100_000));
        let mut data = BTreeMap::from([(MAP_ROLES.to_string(), deep)]);
        let err = upsert_node_role(&mut data, &mut BTreeSet::new(), "arn:aws:iam::1:role/nodes").unwrap_err();
        assert!(
            err.to_string().contains("data.mapRoles is not a YAML list of role mappings: nested 100000 levels"),
            "{err}"
        );
    }
}
