//! `kube-system/aws-auth` `mapRoles` edits: upsert a node role, remove it. Everything else in the
//! ConfigMap (other roles, `mapUsers`, `mapAccounts`, unknown keys of an entry) is kept as it was,
//! so a node group we do not manage never loses its mapping.

use std::collections::BTreeMap;

use serde_yaml::{Mapping, Value};

/// The ConfigMap's namespace.
pub const NAMESPACE: &str = "kube-system";
/// The ConfigMap's name.
pub const NAME: &str = "aws-auth";
const MAP_ROLES: &str = "mapRoles";
const NODE_USERNAME: &str = "system:node:{{EC2PrivateDNSName}}";
const NODE_GROUPS: &[&str] = &["system:bootstrappers", "system:nodes"];

/// `mapRoles` is not a YAML list of mappings.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("kube-system/aws-auth data.mapRoles is not a YAML list of role mappings: {0}")]
pub struct EditAwsAuthError(String);

fn roles(data: &BTreeMap<String, String>) -> Result<Vec<Value>, EditAwsAuthError> {
    match data.get(MAP_ROLES).filter(|s| !s.trim().is_empty()) {
        None => Ok(Vec::new()),
        Some(text) => match serde_yaml::from_str::<Value>(text).map_err(|e| EditAwsAuthError(e.to_string()))? {
            Value::Sequence(items) if items.iter().all(Value::is_mapping) => Ok(items),
            Value::Null => Ok(Vec::new()),
            _ => Err(EditAwsAuthError("expected a list of mappings".into())),
        },
    }
}

fn write(data: &mut BTreeMap<String, String>, roles: Vec<Value>) {
    let text = serde_yaml::to_string(&Value::Sequence(roles)).expect("YAML values always serialise");
    data.insert(MAP_ROLES.to_string(), text);
}

fn is_role(entry: &Value, arn: &str) -> bool {
    entry.get("rolearn").and_then(Value::as_str) == Some(arn)
}

/// Maps `role_arn` as a node role. Returns whether the data changed.
pub fn upsert_node_role(data: &mut BTreeMap<String, String>, role_arn: &str) -> Result<bool, EditAwsAuthError> {
    let mut roles = roles(data)?;
    let groups = Value::Sequence(NODE_GROUPS.iter().map(|g| Value::String(g.to_string())).collect());
    let mut changed = false;
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

/// Unmaps `role_arn`. Returns whether the data changed.
pub fn remove_role(data: &mut BTreeMap<String, String>, role_arn: &str) -> Result<bool, EditAwsAuthError> {
    let mut roles = roles(data)?;
    let before = roles.len();
    roles.retain(|e| !is_role(e, role_arn));
    if roles.len() == before {
        return Ok(false);
    }
    write(data, roles);
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
        assert!(upsert_node_role(&mut data, "arn:aws:iam::1:role/nodes").unwrap());
        assert!(!upsert_node_role(&mut data, "arn:aws:iam::1:role/nodes").unwrap(), "idempotent");
        let roles = roles(&data).unwrap();
        assert_eq!(roles.len(), 3);
        assert_eq!(roles[1]["username"], "admin", "other roles untouched");
        assert_eq!(roles[2]["groups"][1], "system:nodes");
        assert!(data["mapUsers"].contains("userarn"), "mapUsers untouched");
    }

    #[test]
    fn upsert_repairs_an_edited_entry_and_remove_takes_only_ours() {
        let mut data = BTreeMap::from([(
            MAP_ROLES.to_string(),
            "- rolearn: arn:aws:iam::1:role/nodes\n  username: someone\n  groups: []\n".to_string(),
        )]);
        assert!(upsert_node_role(&mut data, "arn:aws:iam::1:role/nodes").unwrap());
        assert_eq!(roles(&data).unwrap()[0]["username"], NODE_USERNAME);
        let mut both = BTreeMap::from([(MAP_ROLES.to_string(), EXISTING.to_string())]);
        assert!(remove_role(&mut both, "arn:aws:iam::1:role/other").unwrap());
        assert!(!remove_role(&mut both, "arn:aws:iam::1:role/other").unwrap());
        let left = roles(&both).unwrap();
        assert_eq!(left.len(), 1);
        assert_eq!(left[0]["rolearn"], "arn:aws:iam::1:role/admin");
    }

    #[test]
    fn a_broken_map_roles_is_an_error_not_an_overwrite() {
        let mut data = BTreeMap::from([(MAP_ROLES.to_string(), "rolearn: not-a-list".to_string())]);
        let err = upsert_node_role(&mut data, "arn:aws:iam::1:role/nodes").unwrap_err();
        assert!(err.to_string().contains("kube-system/aws-auth data.mapRoles"));
        assert_eq!(data[MAP_ROLES], "rolearn: not-a-list", "left as it was");
        let mut empty = BTreeMap::new();
        assert!(upsert_node_role(&mut empty, "arn:aws:iam::1:role/nodes").unwrap(), "a missing key starts a list");
    }
}
