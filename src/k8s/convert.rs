//! Nodes and Pods off the wire, pruned to the domain values the core decides on: a watched cluster
//! of 50,000 pods keeps a few hundred bytes per pod, not the full objects.

use k8s_openapi::api::core::v1::{Container, Node as KubeNode, Pod as KubePod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use thiserror::Error;

use crate::core::{Node, NodeName, OptOut, OwnerUid, Pod, PodClass, Resources, SignalKind, Timestamp, NODE_OPT_OUT};
use crate::k8s::nth::instance_from_provider_id;
use crate::units::{parse_cpu_millis, parse_memory_bytes};

/// Cluster Autoscaler's per-node opt-out of scale-down.
pub(crate) const SCALE_DOWN_DISABLED: &str = "cluster-autoscaler.kubernetes.io/scale-down-disabled";
/// Our marker next to it: only annotations we set are ever removed by us.
pub(crate) const PROTECTED_BY_US: &str = "spots-booster.io/scale-down-protected";
/// Node annotation the InstanceGroup rolling update sets on a drifted node it retires; the value
/// is when (RFC 3339). The node then counts as at risk with [`SignalKind::Rotation`].
pub(crate) const ROTATE_ANNOTATION: &str = "spots-booster.io/rotate";
/// Cluster Autoscaler's taint on nodes it is deleting.
pub(crate) const CA_DELETION_TAINT: &str = "ToBeDeletedByClusterAutoscaler";
/// The kubelet's annotation on a static pod's mirror.
pub(crate) const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";
/// Pods at or above this priority are system-critical (`system-cluster-critical` is 2·10⁹).
pub(crate) const CRITICAL_PRIORITY: i32 = 2_000_000_000;
/// Karpenter's per-pod opt-out of voluntary disruption.
pub(crate) const DO_NOT_DISRUPT: &str = "karpenter.sh/do-not-disrupt";
/// Cluster Autoscaler's per-pod opt-out of scale-down.
pub(crate) const SAFE_TO_EVICT: &str = "cluster-autoscaler.kubernetes.io/safe-to-evict";

/// A watched object that cannot be used.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum ConvertError {
    /// The object has no name.
    #[error("{kind} without metadata.name")]
    NoName {
        /// Node or Pod.
        kind: &'static str,
    },
    /// A quantity did not parse.
    #[error("{kind} {name}: {field} {value:?} is not a valid quantity")]
    Quantity {
        /// Node or Pod.
        kind: &'static str,
        /// `namespace/name` or the node name.
        name: String,
        /// The field path.
        field: String,
        /// The text.
        value: String,
    },
}

/// A node as the watch keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchedNode {
    /// The domain node (no pods: they are kept apart).
    pub node: Node,
    /// Carries our scale-down protection.
    pub protected: bool,
    /// `metadata.uid`: Events about the node name it, so `kubectl describe node` finds them.
    pub uid: Option<String>,
    /// An NTH taint (`taintNode: true`): the kind it announces and when it was added.
    pub(crate) nth_taint: Option<(SignalKind, Option<Timestamp>)>,
    /// Our rotation annotation ([`ROTATE_ANNOTATION`]) and when it was set.
    pub rotation: Option<(SignalKind, Option<Timestamp>)>,
}

impl WatchedNode {
    /// The signal the node itself carries: an NTH taint first (it is the more urgent news), else
    /// a rotation.
    pub(crate) fn node_signal(&self) -> Option<(SignalKind, Option<Timestamp>)> {
        self.nth_taint.or(self.rotation)
    }
}

/// NTH's taints and the kind each announces.
pub(crate) const NTH_TAINTS: &[(&str, SignalKind)] = &[
    ("aws-node-termination-handler/rebalance-recommendation", SignalKind::Rebalance),
    ("aws-node-termination-handler/spot-itn", SignalKind::SpotInterruption),
    ("aws-node-termination-handler/scheduled-maintenance", SignalKind::Scheduled),
    ("aws-node-termination-handler/asg-lifecycle-termination", SignalKind::AsgLifecycle),
];

fn quantity(
    q: Option<&Quantity>,
    parse: fn(&str) -> Result<u64, crate::units::ParseUnitError>,
    err: impl Fn(&str) -> ConvertError,
) -> Result<u64, ConvertError> {
    match q {
        None => Ok(0),
        Some(q) => parse(&q.0).map_err(|_| err(&q.0)),
    }
}

/// Whether an operator labelled or annotated the Node [`NODE_OPT_OUT`]`=true`.
pub(crate) fn opted_out(node: &KubeNode) -> bool {
    let set = |map: Option<&std::collections::BTreeMap<String, String>>| {
        map.and_then(|m| m.get(NODE_OPT_OUT)).is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
    };
    set(node.metadata.labels.as_ref()) || set(node.metadata.annotations.as_ref())
}

/// The domain view of a Node.
pub fn node_from_kube(node: &KubeNode) -> Result<WatchedNode, ConvertError> {
    let name = node.metadata.name.clone().ok_or(ConvertError::NoName { kind: "Node" })?;
    let spec = node.spec.as_ref();
    let status = node.status.as_ref();
    let allocatable = status.and_then(|s| s.allocatable.as_ref());
    let bad = |field: &'static str| {
        let name = name.clone();
        move |value: &str| ConvertError::Quantity {
            kind: "Node",
            name: name.clone(),
            field: field.to_string(),
            value: value.to_string(),
        }
    };
    let cpu = quantity(allocatable.and_then(|a| a.get("cpu")), parse_cpu_millis, bad("status.allocatable.cpu"))?;
    let memory =
        quantity(allocatable.and_then(|a| a.get("memory")), parse_memory_bytes, bad("status.allocatable.memory"))?;
    let ready = status
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    let annotations = node.metadata.annotations.as_ref();
    let nth_taint = spec.and_then(|s| s.taints.as_ref()).and_then(|ts| {
        ts.iter().find_map(|t| {
            let (_, kind) = NTH_TAINTS.iter().find(|(key, _)| *key == t.key)?;
            Some((*kind, t.time_added.as_ref().map(|at| Timestamp::from_millis(at.0.as_millisecond()))))
        })
    });
    let rotation = annotations.and_then(|a| a.get(ROTATE_ANNOTATION)).map(|at| {
        let at = at.parse::<jiff::Timestamp>().ok().map(|t| Timestamp::from_millis(t.as_millisecond()));
        (SignalKind::Rotation, at)
    });
    Ok(WatchedNode {
        uid: node.metadata.uid.clone(),
        nth_taint,
        rotation,
        node: Node {
            name: NodeName::from(name.as_str()),
            instance: spec.and_then(|s| s.provider_id.as_deref()).and_then(instance_from_provider_id),
            group: None,
            ready,
            cordoned: spec.and_then(|s| s.unschedulable).unwrap_or(false),
            // The watch knows when it first saw the cordon; a Node alone does not say.
            cordoned_since: None,
            deleting_by_ca: spec
                .and_then(|s| s.taints.as_ref())
                .is_some_and(|ts| ts.iter().any(|t| t.key == CA_DELETION_TAINT)),
            scale_down_disabled: annotations.is_some_and(|a| a.get(SCALE_DOWN_DISABLED).is_some_and(|v| v == "true")),
            opted_out: opted_out(node),
            created: node
                .metadata
                .creation_timestamp
                .as_ref()
                .map_or(Timestamp::EPOCH, |t| Timestamp::from_millis(t.0.as_millisecond())),
            allocatable: Resources::new(cpu, memory),
            pods: Vec::new(),
            pods_known: false,
            internal_ips: status
                .and_then(|s| s.addresses.as_ref())
                .map(|addresses| {
                    addresses.iter().filter(|a| a.type_ == "InternalIP").map(|a| a.address.clone()).take(8).collect()
                })
                .unwrap_or_default(),
        },
        protected: annotations.is_some_and(|a| a.get(PROTECTED_BY_US).is_some_and(|v| v == "true")),
    })
}

fn requests_of(containers: &[Container], pod: &str, path: &str) -> Result<Resources, ConvertError> {
    let mut total = Resources::default();
    for (k, c) in containers.iter().enumerate() {
        let requests = c.resources.as_ref().and_then(|r| r.requests.as_ref());
        let bad = |field: &'static str| {
            move |value: &str| ConvertError::Quantity {
                kind: "Pod",
                name: pod.to_string(),
                field: format!("{path}[{k}].resources.requests.{field}"),
                value: value.to_string(),
            }
        };
        let cpu = quantity(requests.and_then(|r| r.get("cpu")), parse_cpu_millis, bad("cpu"))?;
        let memory = quantity(requests.and_then(|r| r.get("memory")), parse_memory_bytes, bad("memory"))?;
        total = total.plus(Resources::new(cpu, memory));
    }
    Ok(total)
}

/// The domain view of a Pod and the node it is bound to (`None`: not scheduled yet).
pub fn pod_from_kube(pod: &KubePod) -> Result<(Option<NodeName>, Pod), ConvertError> {
    let name = pod.metadata.name.clone().ok_or(ConvertError::NoName { kind: "Pod" })?;
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    let full = format!("{namespace}/{name}");
    let spec = pod.spec.as_ref();
    // The scheduler's view: the larger of the containers' sum and the largest init container,
    // plus the pod overhead.
    let containers = spec.map_or(Ok(Resources::default()), |s| requests_of(&s.containers, &full, "spec.containers"))?;
    let mut init = Resources::default();
    for (k, c) in spec.and_then(|s| s.init_containers.as_ref()).into_iter().flatten().enumerate() {
        let r = requests_of(std::slice::from_ref(c), &full, &format!("spec.initContainers[{k}]"))?;
        init = Resources::new(init.cpu_millis.max(r.cpu_millis), init.memory_bytes.max(r.memory_bytes));
    }
    let mut requests =
        Resources::new(containers.cpu_millis.max(init.cpu_millis), containers.memory_bytes.max(init.memory_bytes));
    if let Some(overhead) = spec.and_then(|s| s.overhead.as_ref()) {
        let bad = |field: &'static str| {
            let full = full.clone();
            move |value: &str| ConvertError::Quantity {
                kind: "Pod",
                name: full.clone(),
                field: format!("spec.overhead.{field}"),
                value: value.to_string(),
            }
        };
        let cpu = quantity(overhead.get("cpu"), parse_cpu_millis, bad("cpu"))?;
        let memory = quantity(overhead.get("memory"), parse_memory_bytes, bad("memory"))?;
        requests = requests.plus(Resources::new(cpu, memory));
    }

    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    let owned_by_daemonset =
        pod.metadata.owner_references.iter().flatten().any(|o| o.kind == "DaemonSet" && o.controller == Some(true));
    let mirror = pod.metadata.annotations.as_ref().is_some_and(|a| a.contains_key(MIRROR_ANNOTATION));
    let critical = spec.is_some_and(|s| {
        s.priority.is_some_and(|p| p >= CRITICAL_PRIORITY)
            || matches!(s.priority_class_name.as_deref(), Some("system-cluster-critical" | "system-node-critical"))
    });
    let class = if matches!(phase, Some("Succeeded" | "Failed")) {
        PodClass::Finished
    } else if mirror {
        PodClass::Mirror
    } else if owned_by_daemonset {
        PodClass::DaemonSet
    } else if critical {
        PodClass::Critical
    } else {
        PodClass::Ordinary
    };
    let annotation = |key: &str| pod.metadata.annotations.as_ref().and_then(|a| a.get(key)).map(String::as_str);
    let opt_out = if annotation(DO_NOT_DISRUPT) == Some("true") {
        Some(OptOut::DoNotDisrupt)
    } else if annotation(SAFE_TO_EVICT) == Some("false") {
        Some(OptOut::NotSafeToEvict)
    } else {
        None
    };
    let bare = pod.metadata.owner_references.as_ref().is_none_or(Vec::is_empty);
    let owner = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true) && !o.uid.is_empty())
        .map(|o| OwnerUid::from(o.uid.as_str()));
    // A negative grace period is refused by the API server; clamp anything odd rather than fail.
    let grace_seconds = spec
        .and_then(|s| s.termination_grace_period_seconds)
        .map_or(Pod::DEFAULT_GRACE_SECONDS, |g| u32::try_from(g.max(0)).unwrap_or(u32::MAX));
    Ok((
        spec.and_then(|s| s.node_name.as_deref()).map(NodeName::from),
        Pod {
            uid: pod.metadata.uid.as_deref().unwrap_or_default().into(),
            namespace: namespace.into(),
            name: name.into(),
            requests,
            class,
            opt_out,
            bare,
            owner,
            grace_seconds,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(json: serde_json::Value) -> KubeNode {
        serde_json::from_value(json).unwrap()
    }

    fn pod(json: serde_json::Value) -> KubePod {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn a_node_keeps_what_the_core_needs() {
        let n = node(serde_json::json!({
            "metadata": {"name": "ip-10-0-1-2.ec2.internal", "creationTimestamp": "2026-11-21T10:00:00Z",
                         "annotations": {PROTECTED_BY_US: "true", SCALE_DOWN_DISABLED: "true"}},
            "spec": {"providerID": "aws:///eu-west-1a/i-0abc", "unschedulable": true,
                     "taints": [{"key": CA_DELETION_TAINT, "effect": "NoSchedule"},
                                {"key": "aws-node-termination-handler/rebalance-recommendation",
                                 "value": "rebalance-recommendation-6dab", "effect": "NoSchedule"}]},
            "status": {"allocatable": {"cpu": "3920m", "memory": "15Gi"},
                       "conditions": [{"type": "Ready", "status": "True"}]}
        }));
        let w = node_from_kube(&n).unwrap();
        assert_eq!(w.node.instance.as_ref().unwrap().as_str(), "i-0abc");
        assert!(w.node.ready && w.node.cordoned && w.node.deleting_by_ca && w.protected);
        assert_eq!(w.node.allocatable, Resources::new(3920, 15 << 30));
        assert_eq!(w.node.created.as_millis(), 1_795_255_200_000);
        assert_eq!(w.nth_taint, Some((SignalKind::Rebalance, None)));
    }

    #[test]
    fn an_operator_opts_a_node_out_by_label_or_annotation_set_to_true() {
        let with = |field: &str, value: &str| {
            node(serde_json::json!({"metadata": {"name": "n1", field: {NODE_OPT_OUT: value}}}))
        };
        for (field, value, out) in [
            ("labels", "true", true),
            ("annotations", "true", true),
            ("labels", "True", true),
            ("labels", "false", false),
            ("annotations", "", false),
            ("labels", "yes please", false),
        ] {
            assert_eq!(node_from_kube(&with(field, value)).unwrap().node.opted_out, out, "{field} {value:?}");
        }
        assert!(!node_from_kube(&node(serde_json::json!({"metadata": {"name": "n1"}}))).unwrap().node.opted_out);
    }

    #[test]
    fn the_rotation_annotation_is_a_signal_with_its_time_behind_an_nth_taint() {
        let mut n = node(serde_json::json!({
            "metadata": {"name": "n1", "annotations": {ROTATE_ANNOTATION: "2026-11-21T10:00:00Z"}},
            "spec": {"providerID": "aws:///eu-west-1a/i-0abc"}
        }));
        let w = node_from_kube(&n).unwrap();
        let at = Timestamp::from_millis(1_795_255_200_000);
        assert_eq!(w.node_signal(), Some((SignalKind::Rotation, Some(at))));
        n.spec.as_mut().unwrap().taints = Some(vec![k8s_openapi::api::core::v1::Taint {
            key: "aws-node-termination-handler/spot-itn".into(),
            effect: "NoSchedule".into(),
            ..Default::default()
        }]);
        let w = node_from_kube(&n).unwrap();
        assert_eq!(w.node_signal(), Some((SignalKind::SpotInterruption, None)), "the more urgent news wins");
        assert_eq!(w.rotation, Some((SignalKind::Rotation, Some(at))));
    }

    #[test]
    fn a_bad_quantity_names_the_object_and_field() {
        let n = node(serde_json::json!({"metadata": {"name": "n1"}, "status": {"allocatable": {"cpu": "lots"}}}));
        assert_eq!(
            node_from_kube(&n).unwrap_err().to_string(),
            "Node n1: status.allocatable.cpu \"lots\" is not a valid quantity"
        );
    }

    #[test]
    fn pod_requests_follow_the_scheduler_and_classes_follow_the_drain_rules() {
        let p = pod(serde_json::json!({
            "metadata": {"name": "web", "namespace": "shop", "uid": "u1"},
            "spec": {"nodeName": "n1",
                     "containers": [{"name": "a", "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}}},
                                    {"name": "b", "resources": {"requests": {"cpu": "250m"}}}],
                     "initContainers": [{"name": "i", "resources": {"requests": {"cpu": "1", "memory": "128Mi"}}}],
                     "overhead": {"cpu": "10m"}}
        }));
        let (node, p) = pod_from_kube(&p).unwrap();
        assert_eq!(node, Some(NodeName::from("n1")));
        assert_eq!(p.requests, Resources::new(1010, 256 << 20));
        assert_eq!((p.class, p.uid.as_str(), p.namespace.as_str()), (PodClass::Ordinary, "u1", "shop"));
        assert_eq!((p.opt_out, p.bare, p.owner), (None, true, None), "no owner: a bare pod");
        assert_eq!(p.grace_seconds, 30, "Kubernetes' default grace period");

        let grace = |g: i64| {
            let p = pod(serde_json::json!({"metadata": {"name": "g"}, "spec": {"terminationGracePeriodSeconds": g}}));
            pod_from_kube(&p).unwrap().1.grace_seconds
        };
        assert_eq!((grace(0), grace(90), grace(-5)), (0, 90, 0));
        assert_eq!(grace(i64::MAX), u32::MAX, "clamped, never wrapped");

        // Forms the API server stores as written were once dropped from the view.
        let tiny = pod(serde_json::json!({
            "metadata": {"name": "tiny", "namespace": "shop", "uid": "u2"},
            "spec": {"nodeName": "n1", "containers": [{"name": "a", "resources": {"requests": {"cpu": "100u", "memory": "1e3"}}}]}
        }));
        assert_eq!(
            pod_from_kube(&tiny).unwrap().1.requests,
            Resources::new(1, 1_000),
            "100u is kept, as one millicore"
        );

        let opted = |annotations: serde_json::Value| {
            let p = pod(serde_json::json!({"metadata": {"name": "o", "annotations": annotations, "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "x", "uid": "1", "controller": true}]}}));
            let p = pod_from_kube(&p).unwrap().1;
            assert!(!p.bare);
            assert_eq!(p.owner, Some(OwnerUid::from("1")), "the controller recreates it");
            p.opt_out
        };
        assert_eq!(opted(serde_json::json!({DO_NOT_DISRUPT: "true"})), Some(OptOut::DoNotDisrupt));
        assert_eq!(opted(serde_json::json!({SAFE_TO_EVICT: "false"})), Some(OptOut::NotSafeToEvict));
        assert_eq!(opted(serde_json::json!({SAFE_TO_EVICT: "true", DO_NOT_DISRUPT: "false"})), None);

        let class = |json| pod_from_kube(&pod(json)).unwrap().1.class;
        let ds = serde_json::json!({"metadata": {"name": "d", "ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "x", "uid": "1", "controller": true}]}});
        assert_eq!(class(ds), PodClass::DaemonSet);
        let mirror = serde_json::json!({"metadata": {"name": "m", "annotations": {MIRROR_ANNOTATION: "x"}}});
        assert_eq!(class(mirror), PodClass::Mirror);
        let done = serde_json::json!({"metadata": {"name": "j"}, "status": {"phase": "Succeeded"}});
        assert_eq!(class(done), PodClass::Finished);
        let critical = serde_json::json!({"metadata": {"name": "c"},
            "spec": {"containers": [], "priorityClassName": "system-node-critical"}});
        assert_eq!(class(critical), PodClass::Critical);
    }
}
