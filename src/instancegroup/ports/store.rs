//! The ports the InstanceGroup reconciler acts through on Kubernetes, one trait per concern (the
//! group's status and Events, the boundaries ConfigMap, aws-auth, rotations, the `crd` strategy's
//! resources), in our own values: no kube object crosses them. Implemented on kube in
//! `instancegroup::k8s` (request shapes tested on a mocked API server) and in memory by
//! `fakes::FakeInstanceGroupStore`.

use std::collections::BTreeMap;
use std::future::Future;

use crate::instancegroup::api::InstanceGroupStatus;

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
    /// The InstanceGroup is gone from the API server (deleted once its finalizers went).
    #[error("InstanceGroup {0} is gone")]
    Gone(String),
    /// The `crd` strategy's CustomResourceDefinition does not exist.
    #[error("spec.strategy.crd.crdName: no CustomResourceDefinition {0:?}")]
    NoSuchCrd(String),
    /// `kube-system/aws-auth` could not be edited safely.
    #[error(transparent)]
    AwsAuth(#[from] crate::instancegroup::aws_auth::EditAwsAuthError),
}

/// The InstanceGroup an Event is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupRef {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// Its uid: which incarnation of the name.
    pub uid: Option<String>,
}

/// A custom resource kind the `crd` strategy submits, resolved from its CRD.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CustomKind {
    /// API group.
    pub group: String,
    /// Served version used.
    pub version: String,
    /// Kind.
    pub kind: String,
    /// Plural.
    pub plural: String,
}

/// What the user sees of a reconcile: the status subresource and Events on the object.
pub trait GroupStatus: Send + Sync {
    /// Replaces `status` (a merge patch on the status subresource; spec is never written).
    /// [`StoreError::Gone`] when the object no longer exists.
    fn patch_status(
        &self,
        namespace: &str,
        name: &str,
        status: &InstanceGroupStatus,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Records a Kubernetes Event on the InstanceGroup.
    fn event(
        &self,
        group: &GroupRef,
        reason: &str,
        message: &str,
        warning: bool,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
}

/// The `instance-manager` ConfigMap (the platform's defaults and restrictions) and the namespaces opted out of it.
pub trait Boundaries: Send + Sync {
    /// The `instance-manager` ConfigMap's data, if it exists.
    fn config_map(&self) -> impl Future<Output = Result<Option<BTreeMap<String, String>>, StoreError>> + Send;
    /// Whether the namespace opted out of the ConfigMap (`config-excluded: "true"`).
    fn namespace_excluded(&self, namespace: &str) -> impl Future<Output = Result<bool, StoreError>> + Send;
}

/// The node role's entry in `kube-system/aws-auth`, which lets the group's nodes join.
pub trait AwsAuth: Send + Sync {
    /// Maps the node role in `kube-system/aws-auth` (created if missing).
    fn upsert_aws_auth(&self, role_arn: &str) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Unmaps the node role from `kube-system/aws-auth`.
    fn remove_aws_auth(&self, role_arn: &str) -> impl Future<Output = Result<(), StoreError>> + Send;
}

/// Nodes handed to the booster to replace, drain and terminate.
pub trait Rotations: Send + Sync {
    /// Annotates a node for rotation: the booster replaces, drains and terminates it.
    fn mark_for_rotation(&self, node: &str, at: &str) -> impl Future<Output = Result<(), StoreError>> + Send;
}

/// The `crd` upgrade strategy's resources, of a kind resolved from its CustomResourceDefinition.
pub trait CustomResources: Send + Sync {
    /// Resolves `<plural>` or `<plural>.<group>` through its CustomResourceDefinition.
    fn custom_kind(&self, crd_name: &str) -> impl Future<Output = Result<CustomKind, StoreError>> + Send;
    /// Every resource of the kind in the namespace, as JSON.
    fn list_custom(
        &self,
        kind: &CustomKind,
        namespace: &str,
    ) -> impl Future<Output = Result<Vec<serde_json::Value>, StoreError>> + Send;
    /// Creates the resource (`metadata.namespace` set); AlreadyExists is success.
    fn create_custom(
        &self,
        kind: &CustomKind,
        object: &serde_json::Value,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Deletes a resource; NotFound is success.
    fn delete_custom(
        &self,
        kind: &CustomKind,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
}

/// The Kubernetes side of InstanceGroups: every concern above, as one adapter provides them.
pub trait InstanceGroupStore: GroupStatus + Boundaries + AwsAuth + Rotations + CustomResources {}

impl<T: GroupStatus + Boundaries + AwsAuth + Rotations + CustomResources> InstanceGroupStore for T {}
