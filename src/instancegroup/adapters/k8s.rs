//! [`InstanceGroupStore`] on the API server: InstanceGroups (status through the status
//! subresource only), the `instance-manager` ConfigMap, namespace opt-outs, `kube-system/aws-auth`
//! (optimistic concurrency on its resourceVersion), rotation marks on Nodes and Events.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node as KubeNode, ObjectReference};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Api, Client, Resource};
use serde_json::json;

use crate::instancegroup::api::{InstanceGroup, InstanceGroupStatus};
use crate::instancegroup::aws_auth::{self, EditAwsAuthError};
use crate::instancegroup::boundaries::ANNOTATION_CONFIG_EXCLUDED;
use crate::instancegroup::store::{
    AwsAuth, Boundaries, CustomKind, CustomResources, GroupRef, GroupStatus, Rotations, StoreError,
};
use crate::k8s::convert::ROTATE_ANNOTATION;
use crate::k8s::events::REPORTING_CONTROLLER;
use crate::k8s::writes::FIELD_MANAGER;

/// Attempts at an aws-auth edit when someone else writes it at the same time.
const AWS_AUTH_ATTEMPTS: usize = 5;

/// InstanceGroups and what goes with them, through the API server.
#[derive(Clone)]
pub struct KubeInstanceGroups {
    client: Client,
    recorder: Recorder,
    config_namespace: String,
    config_name: String,
}

impl std::fmt::Debug for KubeInstanceGroups {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeInstanceGroups").field("config_namespace", &self.config_namespace).finish_non_exhaustive()
    }
}

fn api_error(operation: &'static str, object: impl Into<String>, e: kube::Error) -> StoreError {
    let conflict = matches!(&e, kube::Error::Api(status) if status.code == 409);
    StoreError::Api { operation, object: object.into(), message: e.to_string(), conflict }
}

fn api_resource(kind: &CustomKind) -> ApiResource {
    ApiResource {
        group: kind.group.clone(),
        version: kind.version.clone(),
        api_version: format!("{}/{}", kind.group, kind.version),
        kind: kind.kind.clone(),
        plural: kind.plural.clone(),
    }
}

fn params() -> PatchParams {
    PatchParams { field_manager: Some(FIELD_MANAGER.to_string()), ..PatchParams::default() }
}

impl KubeInstanceGroups {
    /// Reads the boundaries ConfigMap `config_namespace/config_name`; Events are reported by
    /// `instance` (the pod name).
    pub fn new(client: Client, instance: Option<String>, config_namespace: String, config_name: String) -> Self {
        let reporter = Reporter { controller: REPORTING_CONTROLLER.to_string(), instance };
        KubeInstanceGroups { recorder: Recorder::new(client.clone(), reporter), client, config_namespace, config_name }
    }

    /// Whether the InstanceGroup CRD is served (one cheap list), to fail fast when it is missing.
    pub async fn crd_installed(&self) -> Result<bool, kube::Error> {
        let api: Api<InstanceGroup> = Api::all(self.client.clone());
        match api.list(&ListParams::default().limit(1)).await {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Applies `edit` to aws-auth's data and writes it back guarded by its resourceVersion,
    /// reading again on a conflict. A missing ConfigMap is never created (no `create` in
    /// kube-system): `missing` says what that is.
    async fn edit_aws_auth(
        &self,
        missing: impl Fn() -> Result<(), StoreError>,
        edit: impl Fn(&mut BTreeMap<String, String>, &mut BTreeSet<String>) -> Result<bool, EditAwsAuthError>,
    ) -> Result<(), StoreError> {
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), aws_auth::NAMESPACE);
        let object = format!("{}/{}", aws_auth::NAMESPACE, aws_auth::NAME);
        for attempt in 1..=AWS_AUTH_ATTEMPTS {
            let current = api.get_opt(aws_auth::NAME).await.map_err(|e| api_error("get", object.clone(), e))?;
            let result = match current {
                None => return missing(),
                Some(mut cm) => {
                    let mut data = cm.data.take().unwrap_or_default();
                    let mut owned = aws_auth::owned_roles(cm.metadata.annotations.as_ref());
                    if !edit(&mut data, &mut owned)? {
                        return Ok(());
                    }
                    cm.data = Some(data);
                    cm.metadata
                        .annotations
                        .get_or_insert_with(BTreeMap::new)
                        .insert(aws_auth::OWNED_ANNOTATION.to_string(), aws_auth::owned_annotation(&owned));
                    api.replace(aws_auth::NAME, &PostParams::default(), &cm).await.map(|_| ())
                }
            };
            match result {
                Ok(()) => return Ok(()),
                Err(kube::Error::Api(status)) if status.code == 409 && attempt < AWS_AUTH_ATTEMPTS => continue,
                Err(e) => return Err(api_error("update", object, e)),
            }
        }
        unreachable!("the last attempt returns")
    }
}

impl GroupStatus for KubeInstanceGroups {
    async fn patch_status(&self, namespace: &str, name: &str, status: &InstanceGroupStatus) -> Result<(), StoreError> {
        let api: Api<InstanceGroup> = Api::namespaced(self.client.clone(), namespace);
        let patch = json!({ "status": status });
        api.patch_status(name, &params(), &Patch::Merge(&patch)).await.map(|_| ()).map_err(|e| match e {
            kube::Error::Api(status) if status.code == 404 => StoreError::Gone(format!("{namespace}/{name}")),
            e => api_error("patch status of", format!("{namespace}/{name}"), e),
        })
    }

    async fn event(&self, group: &GroupRef, reason: &str, message: &str, warning: bool) -> Result<(), StoreError> {
        let reference = ObjectReference {
            api_version: Some(InstanceGroup::api_version(&()).to_string()),
            kind: Some(InstanceGroup::kind(&()).to_string()),
            namespace: Some(group.namespace.clone()),
            name: Some(group.name.clone()),
            uid: group.uid.clone(),
            ..ObjectReference::default()
        };
        let event = Event {
            type_: if warning { EventType::Warning } else { EventType::Normal },
            reason: reason.to_string(),
            note: Some(message.chars().take(1000).collect()),
            action: "Reconcile".to_string(),
            secondary: None,
        };
        self.recorder
            .publish(&event, &reference)
            .await
            .map_err(|e| api_error("publish event about", format!("{}/{}", group.namespace, group.name), e))
    }
}

impl Boundaries for KubeInstanceGroups {
    async fn config_map(&self) -> Result<Option<BTreeMap<String, String>>, StoreError> {
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), &self.config_namespace);
        let cm = api
            .get_opt(&self.config_name)
            .await
            .map_err(|e| api_error("get", format!("{}/{}", self.config_namespace, self.config_name), e))?;
        Ok(cm.map(|cm| cm.data.unwrap_or_default()))
    }

    async fn namespace_excluded(&self, namespace: &str) -> Result<bool, StoreError> {
        let api: Api<Namespace> = Api::all(self.client.clone());
        let ns = api.get_opt(namespace).await.map_err(|e| api_error("get namespace", namespace, e))?;
        Ok(ns
            .and_then(|n| n.metadata.annotations)
            .and_then(|a| a.get(ANNOTATION_CONFIG_EXCLUDED).cloned())
            .is_some_and(|v| v.eq_ignore_ascii_case("true")))
    }
}

impl AwsAuth for KubeInstanceGroups {
    async fn upsert_aws_auth(&self, role_arn: &str) -> Result<(), StoreError> {
        let missing = || Err(EditAwsAuthError::Missing { role_arn: role_arn.to_string() }.into());
        self.edit_aws_auth(missing, |data, owned| aws_auth::upsert_node_role(data, owned, role_arn)).await
    }

    async fn remove_aws_auth(&self, role_arn: &str) -> Result<(), StoreError> {
        self.edit_aws_auth(|| Ok(()), |data, owned| aws_auth::remove_role(data, owned, role_arn)).await
    }
}

impl Rotations for KubeInstanceGroups {
    async fn mark_for_rotation(&self, node: &str, at: &str) -> Result<(), StoreError> {
        let api: Api<KubeNode> = Api::all(self.client.clone());
        let patch = json!({ "metadata": { "annotations": { ROTATE_ANNOTATION: at } } });
        api.patch(node, &params(), &Patch::Merge(&patch))
            .await
            .map(|_| ())
            .map_err(|e| api_error("annotate node", node, e))
    }
}

impl CustomResources for KubeInstanceGroups {
    async fn custom_kind(&self, crd_name: &str) -> Result<CustomKind, StoreError> {
        let api: Api<CustomResourceDefinition> = Api::all(self.client.clone());
        let crd = if crd_name.contains('.') {
            api.get_opt(crd_name).await.map_err(|e| api_error("get CRD", crd_name, e))?
        } else {
            let all = api.list(&ListParams::default()).await.map_err(|e| api_error("list", "CRDs", e))?;
            all.items.into_iter().find(|c| c.spec.names.plural == crd_name)
        };
        let crd = crd.ok_or_else(|| StoreError::NoSuchCrd(crd_name.to_string()))?;
        let version = crd
            .spec
            .versions
            .iter()
            .find(|v| v.storage)
            .or_else(|| crd.spec.versions.iter().find(|v| v.served))
            .map(|v| v.name.clone())
            .ok_or_else(|| StoreError::NoSuchCrd(crd_name.to_string()))?;
        Ok(CustomKind { group: crd.spec.group, version, kind: crd.spec.names.kind, plural: crd.spec.names.plural })
    }

    async fn list_custom(&self, kind: &CustomKind, namespace: &str) -> Result<Vec<serde_json::Value>, StoreError> {
        let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), namespace, &api_resource(kind));
        let list = api.list(&ListParams::default()).await.map_err(|e| api_error("list", kind.plural.clone(), e))?;
        Ok(list.items.into_iter().map(|o| serde_json::to_value(o).expect("a listed object serialises")).collect())
    }

    async fn create_custom(&self, kind: &CustomKind, object: &serde_json::Value) -> Result<(), StoreError> {
        let namespace = object["metadata"]["namespace"].as_str().unwrap_or("default");
        let name = object["metadata"]["name"].as_str().unwrap_or_default().to_string();
        let dynamic: DynamicObject = serde_json::from_value(object.clone()).map_err(|e| StoreError::Api {
            operation: "build",
            object: name.clone(),
            message: e.to_string(),
            conflict: false,
        })?;
        let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), namespace, &api_resource(kind));
        match api.create(&PostParams::default(), &dynamic).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
            Err(e) => Err(api_error("create", format!("{namespace}/{name}"), e)),
        }
    }

    async fn delete_custom(&self, kind: &CustomKind, namespace: &str, name: &str) -> Result<(), StoreError> {
        let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), namespace, &api_resource(kind));
        match api.delete(name, &Default::default()).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
            Err(e) => Err(api_error("delete", format!("{namespace}/{name}"), e)),
        }
    }
}
