//! IAM: the node role and its instance profile, created and deleted for managed roles, read for
//! the ones an InstanceGroup brings.

use std::collections::BTreeSet;
use std::time::Duration;

use aws_sdk_autoscaling::error::ProvideErrorMetadata;
use tracing::info;

use super::AwsNodeGroups;
use crate::instancegroup::cloud::{CloudError, RoleFacts};
use crate::instancegroup::design::{RoleChoice, RoleOwner};

/// The IAM path of every role and instance profile the daemon creates: `iam:PassRole` is granted
/// on this path only, so no other role can be handed to an instance.
const NODE_ROLE_PATH: &str = "/spots-booster/";

/// Trust policy of a created node role.
const EC2_TRUST_POLICY: &str = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"ec2.amazonaws.com"},"Action":"sts:AssumeRole"}]}"#;

impl AwsNodeGroups {
    pub(super) async fn ensure_role(&self, role: &RoleChoice) -> Result<RoleFacts, CloudError> {
        match role {
            RoleChoice::Managed { name, owner, policies, boundary } => {
                self.ensure_managed_role(name, policies, boundary.as_deref(), owner).await
            }
            RoleChoice::Existing { role_name, profile_name } => {
                let (profile_arn, roles) = self.profile_arn_with_role(profile_name).await?.ok_or_else(|| {
                    CloudError::NotFound { what: "instance profile", name: profile_name.clone(), scope: None }
                })?;
                let role = role_name.clone().or_else(|| roles.first().cloned());
                let role_arn = match role {
                    Some(name) => Some(self.role_arn(&name).await?.ok_or(CloudError::NotFound {
                        what: "IAM role",
                        name,
                        scope: None,
                    })?),
                    None => None,
                };
                Ok(RoleFacts { role_arn, profile_arn })
            }
        }
    }

    pub(super) async fn delete_role(&self, owner: &RoleOwner) -> Result<(), CloudError> {
        let name = &owner.role_name();
        // Both looked at before either is touched: a name this owner would use, held by
        // someone else, is left whole.
        let profile = self.profile(name).await?;
        if let Some(p) = &profile {
            refuse_foreign("instance profile", name, &p.owner, owner)?;
        }
        let role = self.role(name).await?;
        if let Some(r) = &role {
            refuse_foreign("IAM role", name, &r.owner, owner)?;
        }
        if let Some(Found { roles, .. }) = profile {
            for role in roles {
                self.iam
                    .remove_role_from_instance_profile()
                    .instance_profile_name(name)
                    .role_name(&role)
                    .send()
                    .await
                    .map_err(|e| self.call("iam:RemoveRoleFromInstanceProfile", name, e))?;
            }
            self.iam
                .delete_instance_profile()
                .instance_profile_name(name)
                .send()
                .await
                .map_err(|e| self.call("iam:DeleteInstanceProfile", name, e))?;
        }
        if role.is_none() {
            return Ok(());
        }
        for arn in self.attached_policies(name).await? {
            self.detach_policy(name, &arn).await?;
        }
        match self.iam.delete_role().role_name(name).send().await {
            Ok(_) => Ok(()),
            Err(e) if e.code() == Some("NoSuchEntity") => Ok(()),
            Err(e) => Err(self.call("iam:DeleteRole", name, e)),
        }
    }

    /// The ARNs of the managed policies attached to role `name`.
    async fn attached_policies(&self, name: &str) -> Result<BTreeSet<String>, CloudError> {
        Ok(self
            .iam
            .list_attached_role_policies()
            .role_name(name)
            .send()
            .await
            .map_err(|e| self.call("iam:ListAttachedRolePolicies", name, e))?
            .attached_policies()
            .iter()
            .filter_map(|p| p.policy_arn().map(String::from))
            .collect())
    }

    async fn detach_policy(&self, name: &str, arn: &str) -> Result<(), CloudError> {
        self.iam
            .detach_role_policy()
            .role_name(name)
            .policy_arn(arn)
            .send()
            .await
            .map_err(|e| self.call("iam:DetachRolePolicy", name, e))?;
        Ok(())
    }

    async fn profile_arn_with_role(&self, profile: &str) -> Result<Option<(String, Vec<String>)>, CloudError> {
        Ok(self.profile(profile).await?.map(|p| (p.arn, p.roles)))
    }

    async fn profile(&self, name: &str) -> Result<Option<Found>, CloudError> {
        match self.iam.get_instance_profile().instance_profile_name(name).send().await {
            Ok(out) => Ok(out.instance_profile().map(|p| Found {
                arn: p.arn().to_string(),
                owner: Owner::of(p.path(), p.tags().iter().map(|t| (t.key(), t.value()))),
                roles: p.roles().iter().map(|r| r.role_name().to_string()).collect(),
            })),
            Err(e) if e.code() == Some("NoSuchEntity") => Ok(None),
            Err(e) => Err(self.call("iam:GetInstanceProfile", name, e)),
        }
    }

    async fn role_arn(&self, name: &str) -> Result<Option<String>, CloudError> {
        Ok(self.role(name).await?.map(|r| r.arn))
    }

    async fn role(&self, name: &str) -> Result<Option<Found>, CloudError> {
        match self.iam.get_role().role_name(name).send().await {
            Ok(out) => Ok(out.role().map(|r| Found {
                arn: r.arn().to_string(),
                owner: Owner::of(r.path(), r.tags().iter().map(|t| (t.key(), t.value()))),
                roles: Vec::new(),
            })),
            Err(e) if e.code() == Some("NoSuchEntity") => Ok(None),
            Err(e) => Err(self.call("iam:GetRole", name, e)),
        }
    }

    async fn ensure_managed_role(
        &self,
        name: &str,
        policies: &BTreeSet<String>,
        boundary: Option<&str>,
        owner: &RoleOwner,
    ) -> Result<RoleFacts, CloudError> {
        let tags: Vec<aws_sdk_iam::types::Tag> = owner
            .tags()
            .into_iter()
            .filter_map(|(key, value)| aws_sdk_iam::types::Tag::builder().key(key).value(value).build().ok())
            .collect();
        // Both looked at before either is touched, as for deletion.
        let profile = self.profile(name).await?;
        if let Some(p) = &profile {
            refuse_foreign("instance profile", name, &p.owner, owner)?;
        }
        let role_arn = match self.role(name).await? {
            Some(found) => {
                refuse_foreign("IAM role", name, &found.owner, owner)?;
                found.arn
            }
            None => {
                info!(role = name, "creating node role");
                let out = self
                    .iam
                    .create_role()
                    .role_name(name)
                    .path(NODE_ROLE_PATH)
                    .assume_role_policy_document(EC2_TRUST_POLICY)
                    .description("Node role created by spots-booster for an InstanceGroup")
                    .set_permissions_boundary(boundary.map(String::from))
                    .set_tags(Some(tags.clone()))
                    .send()
                    .await
                    .map_err(|e| self.call("iam:CreateRole", name, e))?;
                out.role().map(|r| r.arn().to_string()).unwrap_or_default()
            }
        };
        let attached = self.attached_policies(name).await?;
        for arn in policies.difference(&attached) {
            self.iam
                .attach_role_policy()
                .role_name(name)
                .policy_arn(arn)
                .send()
                .await
                .map_err(|e| self.call("iam:AttachRolePolicy", name, e))?;
        }
        for arn in attached.difference(policies) {
            self.detach_policy(name, arn).await?;
        }
        let (profile_arn, roles) = match profile {
            Some(Found { arn, roles, .. }) => (Some(arn), roles),
            None => {
                self.iam
                    .create_instance_profile()
                    .instance_profile_name(name)
                    .path(NODE_ROLE_PATH)
                    .set_tags(Some(tags.clone()))
                    .send()
                    .await
                    .map_err(|e| self.call("iam:CreateInstanceProfile", name, e))?;
                (None, Vec::new())
            }
        };
        if let Some(profile_arn) = profile_arn.filter(|_| roles.iter().any(|r| r == name)) {
            // Already in place: nothing to wait for.
            return Ok(RoleFacts { role_arn: Some(role_arn), profile_arn });
        }
        if !roles.iter().any(|r| r == name) {
            self.iam
                .add_role_to_instance_profile()
                .instance_profile_name(name)
                .role_name(name)
                .send()
                .await
                .map_err(|e| self.call("iam:AddRoleToInstanceProfile", name, e))?;
        }
        // IAM is eventually consistent: wait, bounded, until the profile reads back with its role.
        let deadline = tokio::time::Instant::now() + self.profile_wait;
        let mut pause = Duration::from_millis(200);
        loop {
            if let Some((arn, roles)) = self.profile_arn_with_role(name).await? {
                if roles.iter().any(|r| r == name) {
                    return Ok(RoleFacts { role_arn: Some(role_arn), profile_arn: arn });
                }
            }
            if tokio::time::Instant::now() + pause > deadline {
                return Err(CloudError::Timeout(format!("instance profile {name} to carry role {name}")));
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(5));
        }
    }
}

/// A role or instance profile as IAM describes it.
struct Found {
    arn: String,
    owner: Owner,
    /// A profile's roles (none for a role).
    roles: Vec<String>,
}

/// What a role's or profile's path and tags say of whose it is.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Owner {
    path: String,
    tags: std::collections::BTreeMap<String, String>,
}

impl Owner {
    fn of<'t>(path: &str, tags: impl Iterator<Item = (&'t str, &'t str)>) -> Self {
        Owner { path: path.to_string(), tags: tags.map(|(k, v)| (k.to_string(), v.to_string())).collect() }
    }
}

/// A managed role's name held by anything but what this daemon created for `ours` (under its
/// path, every ownership tag naming this cluster, its region and the InstanceGroup) is refused:
/// adopting it would attach and detach its policies and map it in aws-auth; deleting it would take
/// another cluster's, another region's, another InstanceGroup's or an administrator's role away.
fn refuse_foreign(what: &'static str, name: &str, found: &Owner, ours: &RoleOwner) -> Result<(), CloudError> {
    let refused = |owner: String| Err(CloudError::NotOwned { what, name: name.to_string(), owner });
    if found.path != NODE_ROLE_PATH {
        return refused(format!("under path {}", found.path));
    }
    match ours.foreign(&found.tags) {
        Some(owner) => refused(owner),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::instancegroup::ownership::TAG_CLUSTER_NAME;

    fn ours() -> RoleOwner {
        RoleOwner {
            region: "eu-west-1".into(),
            cluster: "prod".into(),
            namespace: "team-a".into(),
            name: "gpu".into(),
            uid: Some("uid-1".into()),
        }
    }

    #[test]
    fn only_a_role_under_the_path_whose_every_tag_names_this_owner_is_ours() {
        let owner = |path: &str, tags: &[(&str, &str)]| Owner::of(path, tags.iter().copied());
        let mut tags: Vec<(String, String)> = ours().tags().into_iter().collect();
        fn view(tags: &[(String, String)]) -> Vec<(&str, &str)> {
            tags.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
        }
        assert!(refuse_foreign("IAM role", "r", &owner(NODE_ROLE_PATH, &view(&tags)), &ours()).is_ok());
        let swap = |tags: &mut Vec<(String, String)>, key: &str, value: &str| {
            tags.iter_mut().find(|(k, _)| k == key).unwrap().1 = value.to_string();
        };
        let mut region = tags.clone();
        swap(&mut region, crate::instancegroup::ownership::TAG_CLUSTER_REGION, "us-east-1");
        let mut tenant = tags.clone();
        swap(&mut tenant, crate::instancegroup::ownership::TAG_NAMESPACE, "team");
        swap(&mut tenant, crate::instancegroup::ownership::TAG_INSTANCE_GROUP, "a-gpu");
        let mut later = tags.clone();
        swap(&mut later, crate::instancegroup::ownership::TAG_INSTANCE_GROUP_UID, "uid-0");
        tags.retain(|(k, _)| k == TAG_CLUSTER_NAME);
        for (found, says) in [
            (owner(NODE_ROLE_PATH, &view(&region)), "cluster prod in us-east-1"),
            (owner(NODE_ROLE_PATH, &view(&tenant)), "InstanceGroup team/a-gpu"),
            (owner(NODE_ROLE_PATH, &view(&later)), "(uid uid-0)"),
            (owner(NODE_ROLE_PATH, &view(&tags)), "untagged"),
            (owner(NODE_ROLE_PATH, &[("team", "a")]), "untagged"),
            (owner("/", &view(&ours().tags().into_iter().collect::<Vec<_>>())), "under path /"),
        ] {
            let refused = refuse_foreign("IAM role", "r", &found, &ours()).unwrap_err();
            assert!(matches!(refused, CloudError::NotOwned { .. }), "{found:?}");
            assert!(refused.to_string().contains(says), "{refused}");
            assert!(!refused.is_transient());
        }
    }
}
