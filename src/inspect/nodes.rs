//! `spots-booster inspect nodes`: what the booster reads of each Node (`kubectl get nodes -o
//! yaml|json`, one Node or a list): its instance, whether it is Ready or cordoned, the signal it
//! carries itself (an NTH taint, a rotation), and whether the booster may act on it at all: an
//! operator's opt-out (`spots-booster.io/disabled=true`) and Cluster Autoscaler's deletion keep it
//! out of boosting and draining.

use k8s_openapi::api::core::v1::Node as KubeNode;
use serde::Serialize;

use crate::config::OutputFormat;
use crate::core::NODE_OPT_OUT;
use crate::inspect::{objects, InspectError};
use crate::k8s::convert::node_from_kube;
use crate::output::{structured, table, table_width};

/// One Node as the booster reads it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct InspectedNode {
    /// `metadata.name`.
    pub node: String,
    /// The instance `spec.providerID` names.
    pub instance: Option<String>,
    /// NodeReady is True.
    pub ready: bool,
    /// `spec.unschedulable`.
    pub cordoned: bool,
    /// The signal the Node carries itself (an NTH taint, else a rotation), by kind.
    pub signal: Option<&'static str>,
    /// `managed`, or why the booster leaves the node alone.
    pub booster: String,
}

/// Reads Nodes (a Node, several documents, or a List) and says what the booster makes of each.
pub(crate) fn inspect_nodes(input: &str) -> Result<Vec<InspectedNode>, InspectError> {
    let items = objects(input).map_err(|(index, message)| InspectError::NotANode { index, message })?;
    if items.is_empty() {
        return Err(InspectError::NoNodes);
    }
    items
        .into_iter()
        .enumerate()
        .map(|(i, item)| {
            let index = i + 1;
            let kind = item.get("kind").and_then(|k| k.as_str()).unwrap_or("Node").to_string();
            if kind != "Node" {
                return Err(InspectError::NotANode { index, message: format!("kind is {kind:?}") });
            }
            // Deserializing from text (not from the Value) keeps the field path in the message.
            let text = serde_yaml::to_string(&item).expect("a parsed value serializes");
            let node: KubeNode =
                serde_yaml::from_str(&text).map_err(|e| InspectError::NotANode { index, message: e.to_string() })?;
            let watched =
                node_from_kube(&node).map_err(|e| InspectError::NotANode { index, message: e.to_string() })?;
            let n = &watched.node;
            let booster = if n.opted_out {
                format!("opted out: {NODE_OPT_OUT}=true; never boosted for, drained nor chosen to give back")
            } else if n.deleting_by_ca {
                "left alone: Cluster Autoscaler is deleting it".to_string()
            } else if n.instance.is_none() {
                "left alone: spec.providerID names no EC2 instance".to_string()
            } else {
                "managed".to_string()
            };
            Ok(InspectedNode {
                node: n.name.to_string(),
                instance: n.instance.as_ref().map(ToString::to_string),
                ready: n.ready,
                cordoned: n.cordoned,
                signal: watched.node_signal().map(|(kind, _)| kind.as_str()),
                booster,
            })
        })
        .collect()
}

/// Prints the Nodes in the order given.
pub(crate) fn render_nodes(nodes: &[InspectedNode], output: OutputFormat) -> String {
    let Some(width) = table_width(output) else { return structured(&nodes, output == OutputFormat::Yaml) };
    let yes_no = |b: bool| if b { "yes" } else { "no" }.to_string();
    let header = ["NODE", "INSTANCE", "READY", "CORDONED", "SIGNAL", "BOOSTER"];
    let rows: Vec<Vec<String>> = nodes
        .iter()
        .map(|n| {
            vec![
                n.node.clone(),
                n.instance.clone().unwrap_or("-".into()),
                yes_no(n.ready),
                yes_no(n.cordoned),
                n.signal.unwrap_or("-").to_string(),
                n.booster.clone(),
            ]
        })
        .collect();
    table(&header, &rows, width)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NODES: &str = r#"
apiVersion: v1
kind: List
items:
  - apiVersion: v1
    kind: Node
    metadata:
      name: ip-10-0-1-1.ec2.internal
      labels: {spots-booster.io/disabled: "true"}
    spec: {providerID: "aws:///eu-west-1a/i-0aaa", unschedulable: true}
    status: {conditions: [{type: Ready, status: "True"}]}
  - apiVersion: v1
    kind: Node
    metadata:
      name: ip-10-0-1-2.ec2.internal
    spec:
      providerID: aws:///eu-west-1a/i-0bbb
      taints: [{key: aws-node-termination-handler/spot-itn, effect: NoSchedule}]
    status: {conditions: [{type: Ready, status: "True"}]}
  - apiVersion: v1
    kind: Node
    metadata: {name: kind-worker}
    spec: {providerID: "kind://docker/kind/kind-worker"}
"#;

    #[test]
    fn an_opted_out_node_says_so_and_the_others_say_what_they_carry() {
        let nodes = inspect_nodes(NODES).unwrap();
        assert_eq!(nodes.len(), 3);
        assert!(nodes[0].booster.starts_with("opted out: spots-booster.io/disabled=true"), "{:?}", nodes[0]);
        assert_eq!((nodes[0].instance.as_deref(), nodes[0].cordoned), (Some("i-0aaa"), true));
        assert_eq!((nodes[1].booster.as_str(), nodes[1].signal), ("managed", Some("spot-interruption")));
        assert_eq!(nodes[2].booster, "left alone: spec.providerID names no EC2 instance");
        let table = render_nodes(&nodes, OutputFormat::Table);
        assert!(table.lines().nth(1).unwrap().contains("opted out"), "{table}");
        let json: serde_json::Value = serde_json::from_str(&render_nodes(&nodes, OutputFormat::Json)).unwrap();
        assert_eq!(json[0]["booster"], nodes[0].booster.as_str());
    }

    #[test]
    fn what_is_not_a_node_is_an_error_naming_the_document() {
        let event = "apiVersion: v1\nkind: Event\nmetadata: {name: e}\n";
        let err = inspect_nodes(&format!("{NODES}---\n{event}")).unwrap_err().to_string();
        assert!(err.contains("document 2") || err.contains("document 4"), "{err}");
        let bad = "kind: Node\nmetadata: {name: n}\nstatus: {allocatable: {cpu: lots}}\n";
        let err = inspect_nodes(bad).unwrap_err().to_string();
        assert!(err.contains("status.allocatable.cpu") && err.contains("lots"), "{err}");
        assert!(matches!(inspect_nodes("# nothing\n"), Err(InspectError::NoNodes)));
    }
}
