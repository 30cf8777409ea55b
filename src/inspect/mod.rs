//! `spots-booster inspect`: shows what the daemon understands of a CA status or an NTH Event,
//! from whatever the user has at hand. Scaling activities (`activities`) and Nodes (`nodes`) have
//! their own files.

pub(crate) mod activities;
pub(crate) mod nodes;
pub(crate) mod pools;

use std::io::Read;
use std::path::Path;

use k8s_openapi::api::core::v1::Event;
use serde::Serialize;
use thiserror::Error;

use crate::config::OutputFormat;
use crate::core::{SignalKind, Timestamp};
use crate::k8s::ca_status::{
    check_size_and_depth, flow_depth, parse_ca_status, CaStatus, CaStatusFormat, ParseCaStatusError, MAX_FLOW_DEPTH,
};
use crate::k8s::nth::{classify_event, Classification};
use crate::output::{structured, table, table_width};
use crate::timefmt::{format_rfc3339, parse_go_time};

/// CA's annotation with the time of the last status write.
pub(crate) const LAST_UPDATED_ANNOTATION: &str = "cluster-autoscaler.kubernetes.io/last-updated";

/// Why `inspect` could not show anything.
#[derive(Debug, Error)]
pub enum InspectError {
    /// The input could not be read.
    #[error("cannot read {path}")]
    Read {
        /// The file (`-` for standard input).
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A ConfigMap without `data.status`.
    #[error("the ConfigMap has no data.status: is it the cluster-autoscaler-status ConfigMap?")]
    NoStatusKey,
    /// Another kind of object (an Event, say) where a CA status was expected.
    #[error("the input is a {0}, not the cluster-autoscaler-status ConfigMap or its status (for an NTH Event: inspect nth-event)")]
    NotACaStatus(String),
    /// The status did not parse.
    #[error("invalid Cluster Autoscaler status")]
    CaStatus(#[source] ParseCaStatusError),
    /// A document that is not an Event.
    #[error("document {index}: not a core/v1 Event: {message}")]
    NotAnEvent {
        /// 1-based document (or list item) number.
        index: usize,
        /// The deserializer's message, naming the field.
        message: String,
    },
    /// Nothing to classify.
    #[error("the input holds no Event")]
    NoEvents,
    /// A document that is not a Node.
    #[error("document {index}: not a core/v1 Node: {message}")]
    NotANode {
        /// 1-based document (or list item) number.
        index: usize,
        /// What is wrong, naming the field.
        message: String,
    },
    /// Nothing to show.
    #[error("the input holds no Node")]
    NoNodes,
    /// Not the ledger ConfigMap nor its pool memory.
    #[error("not the pool memory (the ledger ConfigMap or its data.pools.json): {0}")]
    NotPools(String),
    /// Not what `aws autoscaling describe-scaling-activities` prints.
    #[error("not the output of aws autoscaling describe-scaling-activities: {0}")]
    NotActivities(String),
}

/// Reads a file, or standard input for `-`.
pub(crate) fn read_input(path: &Path) -> Result<String, InspectError> {
    let shown = path.display().to_string();
    if shown == "-" {
        let mut text = String::new();
        std::io::stdin().read_to_string(&mut text).map_err(|source| InspectError::Read { path: shown, source })?;
        Ok(text)
    } else {
        std::fs::read_to_string(path).map_err(|source| InspectError::Read { path: shown, source })
    }
}

/// A parsed status with the ConfigMap's last-updated time when the input was a ConfigMap.
#[derive(Debug, Serialize)]
pub(crate) struct InspectedCaStatus {
    /// `cluster-autoscaler.kubernetes.io/last-updated`, when present.
    pub(crate) last_updated: Option<Timestamp>,
    /// The status.
    pub status: CaStatus,
}

/// Accepts a ConfigMap (YAML or JSON) or the bare `data.status` text.
pub(crate) fn inspect_ca_status(input: &str) -> Result<InspectedCaStatus, InspectError> {
    let mut last_updated = None;
    let mut text = input.to_string();
    check_size_and_depth(input).map_err(InspectError::CaStatus)?;
    if let Ok(serde_yaml::Value::Mapping(map)) = serde_yaml::from_str::<serde_yaml::Value>(input) {
        if let Some(kind) = map.get("kind").and_then(|k| k.as_str()).filter(|k| *k != "ConfigMap") {
            return Err(InspectError::NotACaStatus(kind.to_string()));
        }
        let is_config_map = map.get("kind").and_then(|k| k.as_str()) == Some("ConfigMap") || map.contains_key("data");
        if is_config_map {
            text = map
                .get("data")
                .and_then(|d| d.get("status"))
                .and_then(|s| s.as_str())
                .ok_or(InspectError::NoStatusKey)?
                .to_string();
            last_updated = map
                .get("metadata")
                .and_then(|m| m.get("annotations"))
                .and_then(|a| a.get(LAST_UPDATED_ANNOTATION))
                .and_then(|t| t.as_str())
                .and_then(|t| parse_go_time(t).ok().flatten());
        }
    }
    let status = parse_ca_status(&text).map_err(InspectError::CaStatus)?;
    Ok(InspectedCaStatus { last_updated, status })
}

/// Renders an inspected status.
pub(crate) fn render_ca_status(inspected: &InspectedCaStatus, output: OutputFormat) -> String {
    let Some(width) = table_width(output) else { return structured(inspected, output == OutputFormat::Yaml) };
    let s = &inspected.status;
    let format = match s.format {
        CaStatusFormat::LegacyText => "legacy text (CA <= 1.29)",
        CaStatusFormat::Yaml => "YAML (CA >= 1.30)",
    };
    let mut out = format!("format:       {format}\nautoscaler:   {:?}\n", s.autoscaler_status);
    out += &format!("written at:   {}\n", s.time.map_or("-".into(), format_rfc3339));
    if let Some(t) = inspected.last_updated {
        out += &format!("last-updated: {}\n", format_rfc3339(t));
    }
    if let Some(cw) = &s.cluster_wide {
        let c = &cw.counts;
        out += &format!(
            "cluster-wide: health={} ready={} registered={} notStarted={} unready={} unregistered={}\n",
            cw.health.as_deref().unwrap_or("-"),
            c.ready,
            c.registered,
            c.not_started,
            c.unready,
            c.unregistered,
        );
        out += &format!(
            "              scaleUp={} scaleDown={}\n",
            cw.scale_up.as_deref().unwrap_or("-"),
            cw.scale_down.as_deref().unwrap_or("-"),
        );
    }
    if s.node_groups.is_empty() {
        out += "node groups:  none reported\n";
        return out;
    }
    let wide = output == OutputFormat::Wide;
    let columns: &[(&str, bool)] = &[
        ("GROUP", true),
        ("HEALTH", true),
        ("READY", true),
        ("REG", false),
        ("NOT-STARTED", false),
        ("UNREADY", true),
        ("DELETING", false),
        ("UNREG", false),
        ("LONG-UNREG", false),
        ("TARGET", true),
        ("MIN", true),
        ("MAX", true),
        ("SCALE-UP", true),
        ("BACKOFF", true),
    ];
    let shown = |i: usize| wide || columns[i].1;
    let header: Vec<&str> = columns.iter().enumerate().filter(|(i, _)| shown(*i)).map(|(_, c)| c.0).collect();
    let rows = s
        .node_groups
        .iter()
        .map(|g| {
            let c = &g.counts;
            let cells = [
                g.name.clone(),
                g.health.clone().unwrap_or("-".into()),
                c.ready.to_string(),
                c.registered.to_string(),
                c.not_started.to_string(),
                c.unready.to_string(),
                c.being_deleted.to_string(),
                c.unregistered.to_string(),
                c.long_unregistered.to_string(),
                g.cloud_provider_target.to_string(),
                g.min_size.to_string(),
                g.max_size.to_string(),
                g.scale_up.clone().unwrap_or("-".into()),
                g.backoff.as_ref().map_or("-".into(), |b| {
                    let code = b.code.clone().unwrap_or("backoff".into());
                    b.message.as_ref().map_or(code.clone(), |m| format!("{code}: {m}"))
                }),
            ];
            cells.into_iter().enumerate().filter(|(i, _)| shown(*i)).map(|(_, c)| c).collect()
        })
        .collect::<Vec<_>>();
    out + "\n" + &table(&header, &rows, width)
}

/// One classified Event.
#[derive(Debug, Serialize)]
pub(crate) struct InspectedEvent {
    /// `metadata.name`.
    pub event: String,
    /// The classification.
    #[serde(flatten)]
    pub(crate) classification: Classification,
    /// For a signal the booster acts on, what must also hold before it does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) acted_on_when: Option<String>,
    /// For a notice NTH understands but the booster leaves alone, why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) ignored_because: Option<String>,
    /// Whether the booster acts on this Event (once the trust rule holds). `result` says what
    /// the Event is; a `signal` of a kind the booster leaves alone is not acted on.
    pub acted_on: bool,
}

impl InspectedEvent {
    /// `signal` when the booster acts on it (once trusted), else `ignored`.
    pub fn result(&self) -> &'static str {
        match (&self.classification, &self.ignored_because) {
            (Classification::Signal(_), None) => "signal",
            _ => "ignored",
        }
    }
}

/// Why the booster leaves a notice of this kind alone, when it does.
fn not_acted_on(kind: SignalKind) -> Option<&'static str> {
    if kind.calls_for_replacement() {
        return None;
    }
    Some(match kind {
        SignalKind::AsgLifecycle => {
            "an ASG lifecycle termination: the group removes the instance itself, nothing to boost"
        }
        SignalKind::StateChange => {
            "an EC2 state change: the instance was stopped or terminated on purpose, nothing to boost"
        }
        _ => "a notice NTH could not name: nothing to boost",
    })
}

/// The objects in what `kubectl get … -o yaml|json` prints: one object, several YAML documents,
/// or a List's items. An error names the 1-based document and why.
pub(crate) fn objects(input: &str) -> Result<Vec<serde_yaml::Value>, (usize, String)> {
    let mut values = Vec::new();
    // Lists nest a few levels; deeper is hostile, and the YAML parser is quadratic on it.
    if flow_depth(input) > MAX_FLOW_DEPTH {
        return Err((1, format!("brackets nested more than {MAX_FLOW_DEPTH} deep")));
    }
    if input.trim_start().starts_with(['{', '[']) {
        let value: serde_json::Value = serde_json::from_str(input).map_err(|e| (1, e.to_string()))?;
        values.push(serde_yaml::to_value(value).expect("JSON is YAML"));
    } else {
        for (i, doc) in serde_yaml::Deserializer::from_str(input).enumerate() {
            let value = serde::Deserialize::deserialize(doc).map_err(|e: serde_yaml::Error| (i + 1, e.to_string()))?;
            if !matches!(value, serde_yaml::Value::Null) {
                values.push(value);
            }
        }
    }
    let mut items = Vec::new();
    for value in values {
        match value.get("items").and_then(|i| i.as_sequence()) {
            Some(list) => items.extend(list.iter().cloned()),
            None => items.push(value),
        }
    }
    Ok(items)
}

/// Accepts one Event, several YAML documents, or a List (`kubectl get events -o yaml|json`).
pub(crate) fn inspect_nth_events(input: &str, provider_id: Option<&str>) -> Result<Vec<InspectedEvent>, InspectError> {
    let items = objects(input).map_err(|(index, message)| InspectError::NotAnEvent { index, message })?;
    if items.is_empty() {
        return Err(InspectError::NoEvents);
    }
    items
        .into_iter()
        .enumerate()
        .map(|(i, item)| {
            let kind = item.get("kind").and_then(|k| k.as_str()).unwrap_or("Event").to_string();
            if kind != "Event" {
                return Err(InspectError::NotAnEvent { index: i + 1, message: format!("kind is {kind:?}") });
            }
            // Deserializing from text (not from the Value) keeps the field path in the message.
            let text = serde_yaml::to_string(&item).expect("a parsed value serializes");
            let event: Event = serde_yaml::from_str(&text)
                .map_err(|e| InspectError::NotAnEvent { index: i + 1, message: e.to_string() })?;
            let classification = classify_event(&event, provider_id);
            let (acted_on_when, ignored_because) = match &classification {
                Classification::Signal(s) => match not_acted_on(s.kind) {
                    Some(why) => (None, Some(why.to_string())),
                    None => (Some(s.trust_rule()), None),
                },
                Classification::Ignored { .. } => (None, None),
            };
            Ok(InspectedEvent {
                event: event.metadata.name.clone().unwrap_or_default(),
                acted_on: acted_on_when.is_some(),
                classification,
                acted_on_when,
                ignored_because,
            })
        })
        .collect()
}

/// Renders classified Events.
pub(crate) fn render_nth_events(events: &[InspectedEvent], output: OutputFormat) -> String {
    let Some(width) = table_width(output) else { return structured(&events, output == OutputFormat::Yaml) };
    let text = |v: serde_json::Value| v.as_str().map(String::from).unwrap_or_default();
    if output == OutputFormat::Table {
        // The Event's name (the node's plus a hash) is in `wide`: the node names it here.
        let header = ["RESULT", "KIND", "NODE", "INSTANCE", "ACTED ON WHEN / IGNORED BECAUSE"];
        let rows = events
            .iter()
            .map(|e| match &e.classification {
                Classification::Signal(s) => vec![
                    e.result().into(),
                    format!("{} ({})", s.kind.as_str(), serde_json::to_value(s.mode).map(text).unwrap_or_default()),
                    s.node.to_string(),
                    s.instance.as_ref().map_or("unknown: pass --provider-id".into(), ToString::to_string),
                    e.ignored_because.clone().or(e.acted_on_when.clone()).unwrap_or_default(),
                ],
                Classification::Ignored { because } => {
                    vec![e.result().into(), "-".into(), "-".into(), "-".into(), because.to_string()]
                }
            })
            .collect::<Vec<_>>();
        return table(&header, &rows, width);
    }
    let header =
        ["EVENT", "RESULT", "KIND", "MODE", "NODE", "INSTANCE", "NOTICE", "OBSERVED", "DETAIL", "ACTED ON WHEN"];
    let rows = events
        .iter()
        .map(|e| match &e.classification {
            Classification::Signal(s) => vec![
                e.event.clone(),
                e.result().into(),
                s.kind.as_str().into(),
                serde_json::to_value(s.mode).map(text).unwrap_or_default(),
                s.node.to_string(),
                match (&s.instance, s.instance_source) {
                    (Some(i), Some(src)) => {
                        format!("{i} (from {})", serde_json::to_value(src).map(text).unwrap_or_default())
                    }
                    _ => "unknown: pass --provider-id".into(),
                },
                s.notice_time.map_or("-".into(), format_rfc3339),
                s.observed_at.map_or("-".into(), format_rfc3339),
                e.ignored_because.clone().or(s.detail.clone()).unwrap_or("-".into()),
                e.acted_on_when.clone().unwrap_or("never".into()),
            ],
            Classification::Ignored { because } => {
                let mut row = vec![e.event.clone(), e.result().into()];
                row.extend(std::iter::repeat_n("-".to_string(), 6));
                row.extend([because.to_string(), "never".into()]);
                row
            }
        })
        .collect::<Vec<_>>();
    table(&header, &rows, width)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(path: &str) -> String {
        std::fs::read_to_string(format!("{}/tests/fixtures/{path}", env!("CARGO_MANIFEST_DIR"))).unwrap()
    }

    fn config_map(status: &str) -> String {
        let indented: String = status.lines().map(|l| format!("    {l}\n")).collect();
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cluster-autoscaler-status\n  namespace: kube-system\n  annotations:\n    {LAST_UPDATED_ANNOTATION}: 2024-03-11 08:41:17.905318467 +0000 UTC\ndata:\n  status: |+\n{indented}\n"
        )
    }

    #[test]
    fn a_config_map_and_its_bare_status_give_the_same_answer() {
        let bare = fixture("ca-status/legacy-1.24.txt");
        let from_cm = inspect_ca_status(&config_map(&bare)).unwrap();
        let from_text = inspect_ca_status(&bare).unwrap();
        assert_eq!(from_cm.status, from_text.status);
        assert_eq!(from_cm.last_updated.map(format_rfc3339).as_deref(), Some("2024-03-11T08:41:17.905Z"));
        let yaml = fixture("ca-status/yaml-1.30.yaml");
        assert_eq!(inspect_ca_status(&config_map(&yaml)).unwrap().status.node_groups.len(), 2);
    }

    #[test]
    fn json_config_maps_are_accepted() {
        let bare = fixture("ca-status/yaml-1.36.yaml");
        let json = serde_json::json!({"kind": "ConfigMap", "data": {"status": bare}}).to_string();
        let table = render_ca_status(&inspect_ca_status(&json).unwrap(), OutputFormat::Table);
        assert!(table.contains("spot-b") && table.contains("timeout: Scale-up timed out"), "{table}");
    }

    #[test]
    fn a_config_map_without_status_is_an_error() {
        assert!(matches!(inspect_ca_status("kind: ConfigMap\ndata: {other: x}\n"), Err(InspectError::NoStatusKey)));
    }

    #[test]
    fn an_nth_event_is_not_read_as_a_running_status() {
        let event = fixture("nth/imds-rebalance.yaml");
        let err = inspect_ca_status(&event).unwrap_err();
        assert!(matches!(&err, InspectError::NotACaStatus(kind) if kind == "Event"), "{err}");
        assert!(err.to_string().contains("inspect nth-event"), "{err}");
    }

    #[test]
    fn hostile_nesting_is_refused_before_any_yaml_parser() {
        let deep = format!("nodeGroups: {}", "[".repeat(200_000));
        let started = std::time::Instant::now();
        assert!(matches!(inspect_ca_status(&deep), Err(InspectError::CaStatus(ParseCaStatusError::TooDeep { .. }))));
        assert!(matches!(inspect_nth_events(&deep, None), Err(InspectError::NotAnEvent { index: 1, .. })));
        assert!(started.elapsed() < std::time::Duration::from_secs(1), "linear, not quadratic");
    }

    #[test]
    fn event_lists_and_multi_document_yaml() {
        let a = fixture("nth/imds-rebalance.yaml");
        let b = fixture("nth/nth-cordon.yaml");
        let multi = format!("{a}---\n{b}");
        let events = inspect_nth_events(&multi, None).unwrap();
        assert_eq!(events.len(), 2);
        assert!(matches!(events[0].classification, Classification::Signal(_)));
        assert!(matches!(events[1].classification, Classification::Ignored { .. }));
        assert_eq!(
            events[0].acted_on_when.as_deref(),
            Some(
                "reported from node ip-10-0-12-34.eu-central-1.compute.internal itself; EC2 names i-0a1b2c3d4e5f67890 \
                 as node ip-10-0-12-34.eu-central-1.compute.internal; node cordoned or NTH-tainted; \
                 EC2 says i-0a1b2c3d4e5f67890 is spot"
            )
        );
        assert_eq!(events[1].acted_on_when, None);

        let list = serde_json::json!({
            "apiVersion": "v1", "kind": "List",
            "items": [serde_yaml::from_str::<serde_json::Value>(&a).unwrap()]
        });
        let events = inspect_nth_events(&list.to_string(), None).unwrap();
        assert_eq!(events.len(), 1);
        let rendered = render_nth_events(&events, OutputFormat::Wide);
        assert!(
            rendered.contains("rebalance") && rendered.contains("i-0a1b2c3d4e5f67890 (from annotation)"),
            "{rendered}"
        );
    }

    fn fixtures(dir: &str) -> Vec<String> {
        let root = format!("{}/tests/fixtures/{dir}", env!("CARGO_MANIFEST_DIR"));
        let mut names: Vec<String> =
            std::fs::read_dir(root).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        names.sort();
        names.into_iter().map(|n| fixture(&format!("{dir}/{n}"))).collect()
    }

    #[test]
    fn tables_fit_120_columns_and_wide_cuts_nothing() {
        let statuses: Vec<_> = fixtures("ca-status").iter().filter_map(|f| inspect_ca_status(f).ok()).collect();
        assert!(statuses.len() >= 8);
        for status in &statuses {
            let out = render_ca_status(status, OutputFormat::Table);
            assert!(out.lines().all(|l| l.chars().count() <= 120), "{out}");
            assert!(!render_ca_status(status, OutputFormat::Wide).contains('…'));
        }
        let events: Vec<_> = fixtures("nth")
            .iter()
            .flat_map(|f| inspect_nth_events(f, Some("aws:///eu-west-1a/i-0123")).unwrap())
            .collect();
        let out = render_nth_events(&events, OutputFormat::Table);
        assert!(out.lines().all(|l| l.chars().count() <= 120), "{out}");
        let wide = render_nth_events(&events, OutputFormat::Wide);
        assert!(wide.lines().any(|l| l.chars().count() > 120) && !wide.contains('…'), "{wide}");
    }

    #[test]
    fn json_and_yaml_say_the_same() {
        let events = inspect_nth_events(&fixture("nth/imds-rebalance.yaml"), None).unwrap();
        let json: serde_json::Value = serde_json::from_str(&render_nth_events(&events, OutputFormat::Json)).unwrap();
        let yaml: serde_json::Value = serde_yaml::from_str(&render_nth_events(&events, OutputFormat::Yaml)).unwrap();
        assert_eq!(json, yaml);
        let status = inspect_ca_status(&fixture("ca-status/yaml-1.36.yaml")).unwrap();
        let json: serde_json::Value = serde_json::from_str(&render_ca_status(&status, OutputFormat::Json)).unwrap();
        let yaml: serde_json::Value = serde_yaml::from_str(&render_ca_status(&status, OutputFormat::Yaml)).unwrap();
        assert_eq!(json, yaml);
    }

    #[test]
    fn notices_the_booster_leaves_alone_say_ignored_and_why() {
        for (name, words) in [
            ("nth/imds-asg-lifecycle.yaml", "ASG lifecycle termination"),
            ("nth/queue-v1-state-change.yaml", "EC2 state change"),
            ("nth/queue-v2-unknown.yaml", "could not name"),
        ] {
            let events = inspect_nth_events(&fixture(name), Some("aws:///eu-west-1a/i-0123")).unwrap();
            assert_eq!(events[0].result(), "ignored", "{name}");
            assert_eq!(events[0].acted_on_when, None, "{name}");
            let out = render_nth_events(&events, OutputFormat::Table);
            assert!(out.contains("ignored") && out.contains(words), "{name}: {out}");
            let json = render_nth_events(&events, OutputFormat::Json);
            assert!(json.contains("\"ignored_because\"") && json.contains("\"acted_on\": false"), "{json}");
        }
        let events = inspect_nth_events(&fixture("nth/imds-spot-itn.yaml"), None).unwrap();
        assert_eq!(events[0].result(), "signal");
    }

    #[test]
    fn non_events_are_errors_that_say_which_document() {
        let err = inspect_nth_events("kind: Event\ninvolvedObject: 5\n", None).unwrap_err().to_string();
        assert!(err.starts_with("document 1:") && err.contains("involvedObject"), "{err}");
        let err = inspect_nth_events("kind: Pod\n", None).unwrap_err().to_string();
        assert!(err.contains("\"Pod\""), "{err}");
        assert!(matches!(inspect_nth_events("", None), Err(InspectError::NoEvents)));
    }
}
