//! The cluster as the workers see it (the pruned, synced view) and the writes they make to it:
//! cordons, evictions, scale-down protection. Implemented on kube in `k8s/`.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;

use thiserror::Error;

use super::BoxError;
use crate::core::{CaGroupView, GroupName, InstanceId, Node, NodeName, PendingPod, Pod, Signal, Timestamp};

/// Where EKS maps IAM roles to Kubernetes users (namespace, name): the InstanceGroup half maps
/// its node roles there, and the startup check asks for the right to.
pub const AWS_AUTH_CONFIGMAP: (&str, &str) = ("kube-system", "aws-auth");

/// The cluster as the watches see it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ClusterState {
    /// Nodes, each with its group when known. Pods are attached to the nodes that have a signal
    /// or are cordoned ([`pods_in_view`]), and to those [`ClusterView::attach_pods`] is asked for;
    /// [`Node::pods_known`] says which.
    pub nodes: BTreeMap<NodeName, Node>,
    /// NTH signals.
    pub signals: Vec<Signal>,
    /// Cluster Autoscaler's view per group, from its status ConfigMap.
    pub ca: BTreeMap<GroupName, CaGroupView>,
    /// Nodes carrying the booster's scale-down protection (see [`ClusterWrites::protect_from_scale_down`]).
    pub protected: BTreeSet<NodeName>,
    /// When the watch first saw each signalled instance, on the injected [`super::Clock`]: the
    /// start of the reaction time measured up to the AWS write.
    pub first_seen: BTreeMap<InstanceId, Timestamp>,
}

/// Whether a view carries a node's pods: only a signalled or cordoned node's, the ones sizing
/// and draining look at, so a view of a large cluster does not copy every pod. A node counts as
/// signalled when a signal names it or its instance, whichever Node the signal came through:
/// the core decides which Node runs a claimed instance, and that one's pods must be seen. The
/// fakes and `simulate` follow the same rule, so tests see the partial view the daemon sees.
pub fn pods_in_view(node: &Node, signalled: &Signalled<'_>) -> bool {
    node.cordoned
        || signalled.nodes.contains(&node.name)
        || node.instance.as_ref().is_some_and(|i| signalled.instances.contains(i))
}

/// The nodes and instances a set of signals names, for [`pods_in_view`].
#[derive(Debug, Default)]
pub struct Signalled<'s> {
    nodes: BTreeSet<&'s NodeName>,
    instances: BTreeSet<&'s InstanceId>,
}

impl<'s> Signalled<'s> {
    /// What `signals` name.
    pub fn by(signals: impl IntoIterator<Item = &'s Signal>) -> Self {
        let mut named = Signalled::default();
        for s in signals {
            named.nodes.insert(&s.node);
            named.instances.insert(&s.instance);
        }
        named
    }
}

impl ClusterState {
    /// Leaves out the pods a view does not carry ([`pods_in_view`]) and marks the rest known.
    pub fn prune_pods(&mut self) {
        let signalled = Signalled::by(self.signals.iter());
        for node in self.nodes.values_mut() {
            node.pods_known = pods_in_view(node, &signalled);
            if !node.pods_known {
                node.pods = Vec::new();
            }
        }
    }
}

/// Where the workers read the cluster from.
pub trait ClusterView: Send + Sync {
    /// The cluster now, or `None` while some watch has not synced: nothing is decided on a
    /// partial view.
    fn current(&self) -> Option<ClusterState>;

    /// Attaches their pods, as the watches hold them, to the nodes among `nodes` whose pods the
    /// view left out and whose names are in `names` (the plan needs them: see
    /// [`crate::core::pods_needed`]), and marks them known.
    fn attach_pods(&self, nodes: &mut BTreeMap<NodeName, Node>, names: &BTreeSet<NodeName>);

    /// The pods with a controller and no node, and those seen bound or gone in the last minute
    /// with when: what the capacity gap counts. Whatever the view's sync state.
    fn pending_pods(&self) -> Vec<PendingPod>;
}

/// A pod to evict: its eviction is conditioned on the UID, so a pod recreated under the same name
/// is never evicted by mistake.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PodRef {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// UID.
    pub uid: String,
    /// The controller that recreates it: what its replacement is known by.
    pub owner: Option<crate::core::OwnerUid>,
}

impl From<&crate::core::PodToEvict> for PodRef {
    fn from(p: &crate::core::PodToEvict) -> PodRef {
        PodRef {
            namespace: p.namespace.to_string(),
            name: p.name.to_string(),
            uid: p.uid.to_string(),
            owner: p.owner.clone(),
        }
    }
}

impl std::fmt::Display for PodRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// How an eviction ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EvictOutcome {
    /// Accepted (201).
    Evicted,
    /// The pod is gone or is another pod now (404, 409 on the UID precondition): done.
    Gone,
    /// A PodDisruptionBudget allows no disruption now (429): back off and retry.
    Blocked {
        /// The budget, as the API server's refusal names it (`The disruption budget <name> …`).
        budget: Option<String>,
    },
}

/// The label that takes a node out of external load balancers, put on when its drain starts (as
/// NTH's `excludeFromLoadBalancers` does), so traffic stops before its pods go.
pub const EXCLUDE_FROM_LOAD_BALANCERS: &str = "node.kubernetes.io/exclude-from-external-load-balancers";

/// The value the booster writes to [`EXCLUDE_FROM_LOAD_BALANCERS`]: only a label with it is
/// ever removed by the booster.
pub const EXCLUDED_BY_US: &str = "spots-booster";

/// A write to the cluster that failed.
#[derive(Debug, Error)]
pub enum ClusterWriteError {
    /// Setting `spec.unschedulable`.
    #[error("cordoning node {node} failed")]
    Cordon {
        /// The node.
        node: NodeName,
        /// Why.
        #[source]
        source: BoxError,
    },
    /// Clearing `spec.unschedulable`.
    #[error("uncordoning node {node} failed")]
    Uncordon {
        /// The node.
        node: NodeName,
        /// Why.
        #[source]
        source: BoxError,
    },
    /// The Eviction API answered something other than success, 404, 429 or a 409 on the UID
    /// precondition (an eviction's own conflicts are tried again next round).
    #[error("evicting pod {pod} failed")]
    Evict {
        /// The pod.
        pod: PodRef,
        /// Why.
        #[source]
        source: BoxError,
    },
    /// A write left to the leader: this replica does not hold the lease (nothing was sent).
    #[error("{operation} left to the leader: this replica does not hold the lease")]
    NotLeader {
        /// The operation not made.
        operation: &'static str,
    },
    /// Listing a node's pods from the API server, just before its instance is terminated.
    #[error("listing the pods of node {node} failed")]
    ListPods {
        /// The node.
        node: NodeName,
        /// Why.
        #[source]
        source: BoxError,
    },
    /// Deleting a pod gracefully at its instance's deadline.
    #[error("deleting pod {pod} failed")]
    DeletePod {
        /// The pod.
        pod: PodRef,
        /// Why.
        #[source]
        source: BoxError,
    },
    /// Removing the booster's load-balancer exclusion from a node it no longer drains.
    #[error("readmitting node {node} to load balancers failed")]
    Readmit {
        /// The node.
        node: NodeName,
        /// Why.
        #[source]
        source: BoxError,
    },
    /// Adding or removing the scale-down protection annotations.
    #[error("changing the scale-down protection of node {node} failed")]
    Protect {
        /// The node.
        node: NodeName,
        /// Why.
        #[source]
        source: BoxError,
    },
}

/// The writes the booster makes to the cluster, and the one read a termination waits for.
pub trait ClusterWrites: Send + Sync {
    /// The pods bound to the node now, read from the API server (not a watch's cache), finished
    /// ones left out: what a termination checks at the moment it would harm them. A pod that
    /// cannot be read as one fails the whole read, so a node is never taken for empty.
    fn live_pods(&self, node: &NodeName) -> impl Future<Output = Result<Vec<Pod>, ClusterWriteError>> + Send;
    /// Takes the node out of service: unschedulable, and out of external load balancers
    /// ([`EXCLUDE_FROM_LOAD_BALANCERS`]). A no-op when it already is.
    fn cordon(&self, node: &NodeName) -> impl Future<Output = Result<(), ClusterWriteError>> + Send;
    /// Marks the node schedulable again and readmits it to load balancers. Only for a node the
    /// booster cordoned itself to give capacity back, whose drain could not finish: it goes back
    /// to serving pods.
    fn uncordon(&self, node: &NodeName) -> impl Future<Output = Result<(), ClusterWriteError>> + Send;
    /// Evicts the pod through the Eviction API with its UID as precondition.
    fn evict(&self, pod: &PodRef) -> impl Future<Output = Result<EvictOutcome, ClusterWriteError>> + Send;
    /// Deletes the pod (not an eviction: no budget is asked) with `grace_seconds` and its UID as
    /// precondition; a pod already gone is done.
    fn delete_pod(
        &self,
        pod: &PodRef,
        grace_seconds: u32,
    ) -> impl Future<Output = Result<(), ClusterWriteError>> + Send;
    /// Removes the booster's [`EXCLUDE_FROM_LOAD_BALANCERS`] label (only with the booster's value)
    /// from a node an operator took back mid-drain.
    fn readmit_to_load_balancers(&self, node: &NodeName) -> impl Future<Output = Result<(), ClusterWriteError>> + Send;
    /// Adds (or removes) `cluster-autoscaler.kubernetes.io/scale-down-disabled: "true"` together
    /// with the booster's own marker, so Cluster Autoscaler keeps a replacement node until the
    /// drain it serves has finished. Only annotations carrying the marker are ever removed.
    fn protect_from_scale_down(
        &self,
        node: &NodeName,
        protect: bool,
    ) -> impl Future<Output = Result<(), ClusterWriteError>> + Send;
}
