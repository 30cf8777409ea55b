//! The port the InstanceGroup reconciler acts through on Kubernetes. Implemented on kube in
//! `k8s::instancegroups` (request shapes tested on a mocked API server) and in memory by
//! `fakes::FakeInstanceGroupStore`.

use std::collections::BTreeMap;
use std::future::Future;

use super::api::{InstanceGroup, InstanceGroupStatus};

/// A Kubernetes call made for an InstanceGroup failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The API server refused or could not be reached.
    #[error("{operation} {object} failed: {message}")]
    Api {
        /// What was attempted (`patch status of`, `list`).
        operation: &'static str,
        /// `namespace/name` or the collection.
        object: String,
        /// The API server's answer.
        message: String,
        /// 409: someone else wrote first; read again and retry.
        conflict: bool,
    },
    /// `kube-system/aws-auth` could not be edited safely.
    #[error(transparent)]
    AwsAuth(#[from] super::aws_auth::EditAwsAuthError),
}

/// The Kubernetes side of InstanceGroups.
pub trait InstanceGroupStore: Send + Sync {
    /// Every InstanceGroup in the cluster.
    fn list(&self) -> impl Future<Output = Result<Vec<InstanceGroup>, StoreError>> + Send;
    /// Replaces `status` (a merge patch on the status subresource; spec is never written).
    fn patch_status(
        &self,
        namespace: &str,
        name: &str,
        status: &InstanceGroupStatus,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Sets `metadata.finalizers`, guarded by `resource_version`.
    fn set_finalizers(
        &self,
        namespace: &str,
        name: &str,
        resource_version: Option<&str>,
        finalizers: &[String],
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// The `instance-manager` ConfigMap's data, if it exists.
    fn config_map(&self) -> impl Future<Output = Result<Option<BTreeMap<String, String>>, StoreError>> + Send;
    /// Whether the namespace opted out of the ConfigMap (`config-excluded: "true"`).
    fn namespace_excluded(&self, namespace: &str) -> impl Future<Output = Result<bool, StoreError>> + Send;
    /// Maps the node role in `kube-system/aws-auth` (created if missing).
    fn upsert_aws_auth(&self, role_arn: &str) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Unmaps the node role from `kube-system/aws-auth`.
    fn remove_aws_auth(&self, role_arn: &str) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Annotates a node for rotation: the booster replaces, drains and terminates it.
    fn mark_for_rotation(&self, node: &str, at: &str) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Records a Kubernetes Event on the InstanceGroup.
    fn event(
        &self,
        group: &InstanceGroup,
        reason: &str,
        message: &str,
        warning: bool,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
}
