//! Kubernetes Events (events.k8s.io/v1) on Nodes, through kube's recorder (which folds repeats
//! into a series). Publishing is best effort: a failure is logged, never returned.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::Client;
use tracing::warn;

use crate::k8s::watch::KubeCluster;
use crate::ports::{EventSeverity, EventSink, NodeEvent};

/// The controller name Events carry.
pub(crate) const REPORTING_CONTROLLER: &str = "spots-booster";

/// Events through the API server.
#[derive(Clone)]
pub struct KubeEvents {
    recorder: Recorder,
    cluster: KubeCluster,
}

impl std::fmt::Debug for KubeEvents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeEvents").finish_non_exhaustive()
    }
}

impl KubeEvents {
    /// Events reported by `instance` (the pod name), about nodes `cluster` knows.
    pub fn new(client: Client, instance: Option<String>, cluster: KubeCluster) -> Self {
        let reporter = Reporter { controller: REPORTING_CONTROLLER.to_string(), instance };
        KubeEvents { recorder: Recorder::new(client, reporter), cluster }
    }
}

/// The reference an Event about `node` carries: with the node's UID, `kubectl describe node`
/// lists it.
pub(crate) fn node_reference(node: &str, uid: Option<String>) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".to_string()),
        kind: Some("Node".to_string()),
        name: Some(node.to_string()),
        uid,
        ..ObjectReference::default()
    }
}

impl EventSink for KubeEvents {
    async fn publish(&self, event: NodeEvent) {
        let reference = node_reference(event.node.as_str(), self.cluster.node_uid(&event.node));
        let ev = Event {
            type_: match event.reason.severity() {
                EventSeverity::Normal => EventType::Normal,
                EventSeverity::Warning => EventType::Warning,
            },
            reason: event.reason.as_str().to_string(),
            // The API rejects notes over 1 kB.
            note: Some(event.note.chars().take(1000).collect()),
            action: event.reason.action().to_string(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&ev, &reference).await {
            warn!(node = %event.node, reason = event.reason.as_str(), error = %e, "could not publish an Event");
        }
    }
}
