//! The booster's writes to the cluster: cordon, evict (UID precondition; 404/409 done, 429
//! blocked), and the scale-down protection annotations on replacement nodes; and the live read of
//! a node's pods a termination waits for.

use k8s_openapi::api::core::v1::{Node as KubeNode, Pod as KubePod};
use k8s_openapi::api::policy::v1::Eviction;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{DeleteOptions, Preconditions};
use kube::api::{DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

use crate::core::{NodeName, Pod};
use crate::k8s::convert::{pod_from_kube, PROTECTED_BY_US, SCALE_DOWN_DISABLED};
use crate::ports::{
    BoxError, ClusterWriteError, ClusterWrites, EvictOutcome, PodRef, EXCLUDED_BY_US, EXCLUDE_FROM_LOAD_BALANCERS,
};

/// The field manager our patches are recorded under.
pub(crate) const FIELD_MANAGER: &str = "spots-booster";

/// Cluster writes through the API server.
#[derive(Clone)]
pub struct KubeWrites {
    client: Client,
    dry_run: bool,
}

impl std::fmt::Debug for KubeWrites {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeWrites").field("dry_run", &self.dry_run).finish_non_exhaustive()
    }
}

impl KubeWrites {
    /// Writes through `client`; with `dry_run` every write is sent with `dryRun=All`, so the API
    /// server validates it (RBAC, PDBs) without applying it.
    pub fn new(client: Client, dry_run: bool) -> Self {
        KubeWrites { client, dry_run }
    }

    fn patch_params(&self) -> PatchParams {
        PatchParams { field_manager: Some(FIELD_MANAGER.to_string()), dry_run: self.dry_run, ..PatchParams::default() }
    }
}

/// Whether a 409 is kube-apiserver's answer to a UID precondition that no longer holds (the
/// eviction's own conflicts, on the pod or its budget, are worth another try).
fn uid_precondition_failed(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(status) if status.message.contains("the UID in the precondition"))
}

fn api_code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}

/// The budget kube-apiserver names in an eviction's refusal: its `DisruptionBudget` cause reads
/// `The disruption budget <name> needs …`.
fn refusing_budget(e: &kube::Error) -> Option<String> {
    let kube::Error::Api(status) = e else { return None };
    let details = status.details.as_ref()?;
    details.causes.iter().filter(|c| c.reason == "DisruptionBudget").find_map(|c| {
        let name = c.message.strip_prefix("The disruption budget ")?.split_whitespace().next()?;
        Some(name.to_string())
    })
}

/// How many times a cordon reads the node again after another writer changed it in between.
const CORDON_TRIES: usize = 3;

impl KubeWrites {
    /// Makes the node unschedulable and adds the load-balancer exclusion label with the
    /// booster's value, unless the label is there already: someone else's value (an operator's,
    /// NTH's) is never overwritten, so it is never the booster's to remove. The patch carries the
    /// resourceVersion it read, so a label set in between is seen on the next read, never
    /// overwritten.
    async fn take_out_of_service(&self, node: &NodeName) -> Result<(), kube::Error> {
        let nodes: Api<KubeNode> = Api::all(self.client.clone());
        let mut tries = 0;
        loop {
            tries += 1;
            let read = nodes.get(node.as_str()).await?;
            let labelled = read.metadata.labels.as_ref().is_some_and(|l| l.contains_key(EXCLUDE_FROM_LOAD_BALANCERS));
            let cordoned = read.spec.as_ref().and_then(|s| s.unschedulable).unwrap_or(false);
            if labelled && cordoned {
                return Ok(());
            }
            let mut patch = json!({
                "metadata": { "resourceVersion": read.metadata.resource_version },
                "spec": { "unschedulable": true },
            });
            if !labelled {
                patch["metadata"]["labels"] = json!({ EXCLUDE_FROM_LOAD_BALANCERS: EXCLUDED_BY_US });
            }
            match nodes.patch(node.as_str(), &self.patch_params(), &Patch::Merge(&patch)).await {
                Ok(_) => return Ok(()),
                Err(e) if api_code(&e) == Some(409) && tries < CORDON_TRIES => continue,
                Err(e) => return Err(e),
            }
        }
    }
}

impl ClusterWrites for KubeWrites {
    async fn live_pods(&self, node: &NodeName) -> Result<Vec<Pod>, ClusterWriteError> {
        let failed = |source: BoxError| ClusterWriteError::ListPods { node: node.clone(), source };
        let pods: Api<KubePod> = Api::all(self.client.clone());
        // No resourceVersion: a consistent read, never an older cache's.
        let fields = format!("spec.nodeName={node},status.phase!=Succeeded,status.phase!=Failed");
        let listed = pods.list(&ListParams::default().fields(&fields)).await.map_err(|e| failed(e.into()))?;
        listed.items.iter().map(|p| pod_from_kube(p).map(|(_, pod)| pod).map_err(|e| failed(e.into()))).collect()
    }

    async fn cordon(&self, node: &NodeName) -> Result<(), ClusterWriteError> {
        self.take_out_of_service(node)
            .await
            .map_err(|e| ClusterWriteError::Cordon { node: node.clone(), source: e.into() })
    }

    async fn uncordon(&self, node: &NodeName) -> Result<(), ClusterWriteError> {
        let nodes: Api<KubeNode> = Api::all(self.client.clone());
        // null removes the field, as `kubectl uncordon` leaves it. The label goes only with the
        // booster's value.
        let patch = json!({ "spec": { "unschedulable": null } });
        nodes
            .patch(node.as_str(), &self.patch_params(), &Patch::Merge(&patch))
            .await
            .map_err(|e| ClusterWriteError::Uncordon { node: node.clone(), source: e.into() })?;
        self.readmit_to_load_balancers(node).await
    }

    async fn evict(&self, pod: &PodRef) -> Result<EvictOutcome, ClusterWriteError> {
        let pods: Api<KubePod> = Api::namespaced(self.client.clone(), &pod.namespace);
        // Built by hand rather than with `Api::evict`: kube 5 serialises the delete options as
        // `delete_options`, a field the API server drops, and with it the UID precondition.
        let eviction = Eviction {
            metadata: ObjectMeta {
                name: Some(pod.name.clone()),
                namespace: Some(pod.namespace.clone()),
                ..ObjectMeta::default()
            },
            delete_options: Some(DeleteOptions {
                preconditions: Some(Preconditions { uid: Some(pod.uid.clone()), resource_version: None }),
                dry_run: self.dry_run.then(|| vec!["All".to_string()]),
                ..DeleteOptions::default()
            }),
        };
        let params = PostParams { dry_run: self.dry_run, field_manager: None };
        let sent: Result<serde_json::Value, kube::Error> =
            pods.create_subresource("eviction", &pod.name, &params, &eviction).await;
        match sent {
            Ok(_) => Ok(EvictOutcome::Evicted),
            Err(e) => match api_code(&e) {
                // 404: gone. A 409 on the UID precondition: a new pod took the name, ours is gone.
                Some(404) => Ok(EvictOutcome::Gone),
                Some(409) if uid_precondition_failed(&e) => Ok(EvictOutcome::Gone),
                // A PodDisruptionBudget allows no disruption now (or the server asks us to slow down).
                Some(429) => Ok(EvictOutcome::Blocked { budget: refusing_budget(&e) }),
                _ => Err(ClusterWriteError::Evict { pod: pod.clone(), source: e.into() }),
            },
        }
    }

    async fn delete_pod(&self, pod: &PodRef, grace_seconds: u32) -> Result<(), ClusterWriteError> {
        let pods: Api<KubePod> = Api::namespaced(self.client.clone(), &pod.namespace);
        let params = DeleteParams {
            grace_period_seconds: Some(grace_seconds),
            preconditions: Some(kube::api::Preconditions { uid: Some(pod.uid.clone()), resource_version: None }),
            dry_run: self.dry_run,
            ..DeleteParams::default()
        };
        match pods.delete(&pod.name, &params).await {
            Ok(_) => Ok(()),
            Err(e) if api_code(&e) == Some(404) => Ok(()),
            Err(e) if api_code(&e) == Some(409) && uid_precondition_failed(&e) => Ok(()),
            Err(e) => Err(ClusterWriteError::DeletePod { pod: pod.clone(), source: e.into() }),
        }
    }

    async fn readmit_to_load_balancers(&self, node: &NodeName) -> Result<(), ClusterWriteError> {
        let nodes: Api<KubeNode> = Api::all(self.client.clone());
        // `~1` is `/` in a JSON pointer. The test makes someone else's label (NTH's, an
        // operator's) stay: the patch then fails with 422 and nothing changes.
        let path = format!("/metadata/labels/{}", EXCLUDE_FROM_LOAD_BALANCERS.replace('/', "~1"));
        let patch: json_patch::Patch = serde_json::from_value(json!([
            { "op": "test", "path": path, "value": EXCLUDED_BY_US },
            { "op": "remove", "path": path },
        ]))
        .expect("a well-formed JSON patch");
        match nodes.patch(node.as_str(), &self.patch_params(), &Patch::<()>::Json(patch)).await {
            Ok(_) => Ok(()),
            Err(e) if matches!(api_code(&e), Some(404 | 422)) => Ok(()),
            Err(e) => Err(ClusterWriteError::Readmit { node: node.clone(), source: e.into() }),
        }
    }

    async fn protect_from_scale_down(&self, node: &NodeName, protect: bool) -> Result<(), ClusterWriteError> {
        let nodes: Api<KubeNode> = Api::all(self.client.clone());
        let value = if protect { json!("true") } else { json!(null) };
        let patch = json!({ "metadata": { "annotations": { SCALE_DOWN_DISABLED: value, PROTECTED_BY_US: value } } });
        match nodes.patch(node.as_str(), &self.patch_params(), &Patch::Merge(&patch)).await {
            Ok(_) => Ok(()),
            // A node that left needs no protection lifted.
            Err(e) if !protect && api_code(&e) == Some(404) => Ok(()),
            Err(e) => Err(ClusterWriteError::Protect { node: node.clone(), source: e.into() }),
        }
    }
}
