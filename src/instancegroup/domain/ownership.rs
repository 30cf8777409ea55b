//! Whose an AWS resource is: the tags that name the cluster and the InstanceGroup owning it,
//! and the name of a created node role, which IAM keeps for the whole account.

use std::collections::BTreeMap;

/// ASG tag holding the cluster name (upstream's ownership tag).
pub(crate) const TAG_CLUSTER_NAME: &str = crate::ports::INSTANCE_GROUP_CLUSTER_TAG;
/// ASG tag holding the InstanceGroup namespace.
pub(crate) const TAG_NAMESPACE: &str = crate::ports::INSTANCE_GROUP_NAMESPACE_TAG;
/// ASG tag holding the InstanceGroup name.
pub(crate) const TAG_INSTANCE_GROUP: &str = "instancegroups.keikoproj.io/InstanceGroup";
/// Tag holding the InstanceGroup's uid: which incarnation of the name owns the resource.
pub(crate) const TAG_INSTANCE_GROUP_UID: &str = "spots-booster.io/instancegroup-uid";

/// The tags that say which InstanceGroup owns a resource (cluster, namespace, name and uid), from
/// the parts: a deleted InstanceGroup may have no valid design any more.
pub(crate) fn owner_tags_of(cluster: &str, namespace: &str, name: &str, uid: Option<&str>) -> BTreeMap<String, String> {
    let mut tags = BTreeMap::from([
        (TAG_CLUSTER_NAME.to_string(), cluster.to_string()),
        (TAG_NAMESPACE.to_string(), namespace.to_string()),
        (TAG_INSTANCE_GROUP.to_string(), name.to_string()),
    ]);
    if let Some(uid) = uid.filter(|u| !u.is_empty()) {
        tags.insert(TAG_INSTANCE_GROUP_UID.to_string(), uid.to_string());
    }
    tags
}

/// Who else owns a resource found under an InstanceGroup's name, by its tags, or `None` when it may
/// be adopted. `{cluster}-{namespace}-{name}` is upstream's naming and stays, so groups created by
/// keikoproj instance-manager are adopted; but dashes make it ambiguous (`a-b`/`c` and `a`/`b-c`),
/// so a resource is adopted, changed or deleted only when every ownership tag it carries names
/// this InstanceGroup, and an Auto Scaling group must carry cluster, namespace and name.
pub(crate) fn foreign_owner(
    tags: &BTreeMap<String, String>,
    ours: &BTreeMap<String, String>,
    group: bool,
) -> Option<String> {
    let differs = ours.iter().any(|(k, v)| tags.get(k).is_some_and(|t| t != v));
    let required = [TAG_CLUSTER_NAME, TAG_NAMESPACE, TAG_INSTANCE_GROUP];
    let unclaimed = group && required.iter().any(|k| !tags.contains_key(*k));
    (differs || unclaimed).then(|| {
        let tag = |k: &str| tags.get(k).map_or("?", String::as_str);
        let mut owner = format!(
            "cluster {}, InstanceGroup {}/{}",
            tag(TAG_CLUSTER_NAME),
            tag(TAG_NAMESPACE),
            tag(TAG_INSTANCE_GROUP)
        );
        if let Some(uid) = tags.get(TAG_INSTANCE_GROUP_UID) {
            owner.push_str(&format!(" (uid {uid})"));
        }
        owner
    })
}

/// Whose a created node role is: this daemon's cluster in its region, and one InstanceGroup. IAM
/// is global while EKS names clusters uniquely per region only, and dashes join names
/// ambiguously (`team`/`a-gpu` and `team-a`/`gpu`): the role's name carries a hash of all four
/// parts, its tags name each (and the uid), and a role is adopted or deleted only when every one
/// of them agrees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoleOwner {
    /// The AWS region the daemon's groups are in.
    pub region: String,
    /// The EKS cluster name.
    pub cluster: String,
    /// The InstanceGroup's namespace.
    pub namespace: String,
    /// The InstanceGroup's name.
    pub name: String,
    /// The InstanceGroup's uid, when known.
    pub uid: Option<String>,
}

/// Role tag holding the region of the cluster that created it.
pub(crate) const TAG_CLUSTER_REGION: &str = "spots-booster.io/cluster-region";

/// Longest IAM role name.
const ROLE_NAME_MAX: usize = 64;
/// Hex digits of the owner's hash a role name ends with.
const ROLE_HASH_DIGITS: usize = 12;

impl RoleOwner {
    /// The role's (and its profile's) name: `{cluster}-{namespace}-{name}`, cut to fit, then a
    /// hash of region, cluster, namespace and name, so no two owners share one.
    pub fn role_name(&self) -> String {
        use md5::Digest;
        let key = [&self.region, &self.cluster, &self.namespace, &self.name].map(String::as_str).join("\n");
        let hash: String = md5::Md5::digest(key.as_bytes()).iter().map(|b| format!("{b:02x}")).collect();
        let head = format!("{}-{}-{}", self.cluster, self.namespace, self.name);
        let room = ROLE_NAME_MAX - ROLE_HASH_DIGITS - 1;
        let cut = head.char_indices().map(|(i, c)| i + c.len_utf8()).take_while(|end| *end <= room).last().unwrap_or(0);
        format!("{}-{}", &head[..cut], &hash[..ROLE_HASH_DIGITS])
    }

    /// The tags that say whose the role is.
    pub(crate) fn tags(&self) -> BTreeMap<String, String> {
        let mut tags = owner_tags_of(&self.cluster, &self.namespace, &self.name, self.uid.as_deref());
        tags.insert(TAG_CLUSTER_REGION.to_string(), self.region.clone());
        tags
    }

    /// Who else holds a role or profile carrying `tags`, or `None` when it is this owner's:
    /// every ownership tag present and equal (the uid only when both know one).
    pub(crate) fn foreign(&self, tags: &BTreeMap<String, String>) -> Option<String> {
        let ours = self.tags();
        let missing = ours.keys().filter(|k| k.as_str() != TAG_INSTANCE_GROUP_UID).find(|k| !tags.contains_key(*k));
        let differs = ours.iter().find(|(k, v)| tags.get(*k).is_some_and(|t| t != *v));
        let tag = |k: &str| tags.get(k).map_or("?", String::as_str);
        let owner = || {
            format!(
                "cluster {} in {}, InstanceGroup {}/{}",
                tag(TAG_CLUSTER_NAME),
                tag(TAG_CLUSTER_REGION),
                tag(TAG_NAMESPACE),
                tag(TAG_INSTANCE_GROUP)
            )
        };
        match (missing, differs) {
            (Some(k), _) => Some(format!("untagged ({k})")),
            (None, Some((k, _))) if k == TAG_INSTANCE_GROUP_UID => Some(format!("{} (uid {})", owner(), tag(k))),
            (None, Some(_)) => Some(owner()),
            (None, None) => None,
        }
    }
}
