//! Parses Cluster Autoscaler's status (`data.status` of `kube-system/cluster-autoscaler-status`) in
//! every format CA has written: the legacy text of CA ≤ 1.29 (with or without `longNotStarted`
//! and the nested `(resourceUnready=…)`), the yaml.v2 YAML of 1.30–1.35 and the sorted-key YAML
//! with `null` times of ≥ 1.36, plus `Initializing` in each.

use std::sync::OnceLock;

use regex::Regex;
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::core::{CaGroupView, Timestamp};
use crate::timefmt::{parse_go_time, parse_rfc3339};

/// A status that could not be understood, with where.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum ParseCaStatusError {
    /// The status is empty.
    #[error("the status is empty")]
    Empty,
    /// Larger than any status CA writes (a ConfigMap holds at most 1 MiB).
    #[error("the status is {bytes} bytes, more than the {limit} a ConfigMap can hold")]
    TooLarge {
        /// Its size.
        bytes: usize,
        /// [`MAX_STATUS_BYTES`].
        limit: usize,
    },
    /// Brackets nested deeper than CA's flat layout ever needs: refused before the YAML parser,
    /// which spends quadratic time on deep flow nesting.
    #[error("brackets nested more than {limit} deep")]
    TooDeep {
        /// [`MAX_FLOW_DEPTH`].
        limit: usize,
    },
    /// A line of the legacy text is not part of the grammar.
    #[error("line {line}: {problem}: {text:?}")]
    Text {
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        problem: String,
        /// The line.
        text: String,
    },
    /// A field of the legacy text has a value that is not a count.
    #[error("line {line}: field {field}: {value:?} is not a count")]
    TextCount {
        /// 1-based line number.
        line: usize,
        /// The field.
        field: String,
        /// The value found.
        value: String,
    },
    /// The YAML does not deserialize into CA's status struct.
    #[error("YAML {location}: {message}")]
    Yaml {
        /// `line L column C` when known.
        location: String,
        /// serde's message, which names the field path.
        message: String,
    },
    /// A time field holds something that is not a time.
    #[error("field {field}: {source}")]
    Time {
        /// The field.
        field: &'static str,
        /// Why.
        #[source]
        source: crate::timefmt::ParseTimeError,
    },
    /// YAML that has none of CA's top-level fields.
    #[error("not a Cluster Autoscaler status: none of time, autoscalerStatus, clusterWide or nodeGroups is present")]
    NotCaStatus,
}

/// Which format the status was written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CaStatusFormat {
    /// CA ≤ 1.29 human-readable text.
    LegacyText,
    /// CA ≥ 1.30 YAML.
    Yaml,
}

/// Node counts as CA reports them (absent counts are 0).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct NodeCounts {
    /// Registered nodes (`registered.total`).
    pub registered: u32,
    /// Ready.
    pub ready: u32,
    /// Not yet started (registered less than 15 min ago, not Ready).
    pub(crate) not_started: u32,
    /// Unready.
    pub unready: u32,
    /// Unready for a missing resource (GPU …).
    pub(crate) resource_unready: u32,
    /// Being deleted by CA.
    pub(crate) being_deleted: u32,
    /// Suspended (CA ≥ 1.36).
    pub(crate) suspended: u32,
    /// Instances without a Node.
    pub(crate) unregistered: u32,
    /// Instances without a Node for longer than `max-node-provision-time`.
    pub(crate) long_unregistered: u32,
    /// CA ≤ 1.20 only (later always 0).
    pub(crate) long_not_started: u32,
}

/// A scale-up backoff as CA reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Backoff {
    /// `backoffInfo.errorCode` (YAML only), e.g. `placeholder-cannot-be-fulfilled`.
    pub code: Option<String>,
    /// `backoffInfo.errorMessage`.
    pub message: Option<String>,
}

/// One node group (on AWS: one ASG).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeGroupStatus {
    /// The ASG name.
    pub name: String,
    /// `Healthy` or `Unhealthy`.
    pub health: Option<String>,
    /// Its node counts.
    pub(crate) counts: NodeCounts,
    /// CA's cached desired capacity.
    pub cloud_provider_target: u32,
    /// MinSize.
    pub min_size: u32,
    /// MaxSize.
    pub max_size: u32,
    /// `InProgress`, `Unhealthy`, `Backoff` or `NoActivity`.
    pub(crate) scale_up: Option<String>,
    /// Present when scale-up is in backoff.
    pub backoff: Option<Backoff>,
    /// `CandidatesPresent` or `NoCandidates`.
    pub(crate) scale_down: Option<String>,
}

impl NodeGroupStatus {
    /// The core's view of this group.
    pub fn core_view(&self) -> CaGroupView {
        CaGroupView {
            cloud_provider_target: self.cloud_provider_target,
            backoff: self.backoff.as_ref().map(|b| b.code.clone().unwrap_or_else(|| "backoff".into())),
            healthy: self.health.as_deref() != Some("Unhealthy"),
            ready: Some(self.counts.ready),
        }
    }
}

/// Cluster-wide conditions.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ClusterWide {
    /// `Healthy` or `Unhealthy`.
    pub health: Option<String>,
    /// Node counts over the whole cluster (including nodes of no autoscaled group).
    pub(crate) counts: NodeCounts,
    /// `InProgress` or `NoActivity`.
    pub(crate) scale_up: Option<String>,
    /// `CandidatesPresent` or `NoCandidates`.
    pub(crate) scale_down: Option<String>,
}

/// Whether CA has data yet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum AutoscalerState {
    /// Normal operation.
    Running,
    /// CA is starting: no group data yet.
    Initializing,
    /// A state this version does not know.
    Other(String),
}

/// A parsed status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CaStatus {
    /// The format it was written in.
    pub format: CaStatusFormat,
    /// When CA wrote it.
    pub time: Option<Timestamp>,
    /// Running or Initializing.
    pub(crate) autoscaler_status: AutoscalerState,
    /// Cluster-wide conditions, when present.
    pub(crate) cluster_wide: Option<ClusterWide>,
    /// Node groups in the order CA listed them.
    pub(crate) node_groups: Vec<NodeGroupStatus>,
}

impl CaStatus {
    /// The node group called `name`.
    pub fn group(&self, name: &str) -> Option<&NodeGroupStatus> {
        self.node_groups.iter().find(|g| g.name == name)
    }
}

const LEGACY_PREFIX: &str = "Cluster-autoscaler status at ";

/// Parses `data.status` in any format CA writes.
pub fn parse_ca_status(text: &str) -> Result<CaStatus, ParseCaStatusError> {
    let trimmed = text.trim_start();
    if trimmed.is_empty() {
        return Err(ParseCaStatusError::Empty);
    }
    check_size_and_depth(text)?;
    if trimmed.starts_with(LEGACY_PREFIX) {
        parse_legacy(text)
    } else {
        parse_yaml(text)
    }
}

/// The largest status accepted: a ConfigMap's limit.
pub(crate) const MAX_STATUS_BYTES: usize = 1 << 20;
pub(crate) use crate::yaml_guard::{flow_depth, MAX_FLOW_DEPTH};

/// Refuses, in one linear pass, text larger than a ConfigMap holds or nested deeper than CA ever
/// writes: serde_yaml spends quadratic time on deep flow nesting, so this runs before any YAML
/// parser sees outside text.
pub(crate) fn check_size_and_depth(text: &str) -> Result<(), ParseCaStatusError> {
    if text.len() > MAX_STATUS_BYTES {
        return Err(ParseCaStatusError::TooLarge { bytes: text.len(), limit: MAX_STATUS_BYTES });
    }
    if flow_depth(text) > MAX_FLOW_DEPTH {
        return Err(ParseCaStatusError::TooDeep { limit: MAX_FLOW_DEPTH });
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Legacy text (CA ≤ 1.29)

fn pair_regex() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| Regex::new(r"([A-Za-z]+)=([^\s,()]*)").expect("valid regex"))
}

enum Section {
    Preamble,
    ClusterWide,
    NodeGroups,
}

fn parse_legacy(text: &str) -> Result<CaStatus, ParseCaStatusError> {
    let mut status = CaStatus {
        format: CaStatusFormat::LegacyText,
        time: None,
        autoscaler_status: AutoscalerState::Running,
        cluster_wide: None,
        node_groups: Vec::new(),
    };
    let mut section = Section::Preamble;
    let mut saw_header = false;
    for (index, raw) in text.lines().enumerate() {
        let line_no = index + 1;
        let line = raw.trim();
        let garbage =
            |problem: &str| ParseCaStatusError::Text { line: line_no, problem: problem.into(), text: raw.to_string() };
        if line.is_empty() {
            continue;
        }
        if !saw_header {
            let time = line
                .strip_prefix(LEGACY_PREFIX)
                .and_then(|t| t.strip_suffix(':'))
                .ok_or_else(|| garbage("expected the header"))?;
            status.time =
                parse_go_time(time).map_err(|source| ParseCaStatusError::Time { field: "status time", source })?;
            saw_header = true;
            continue;
        }
        match line {
            "Initializing" => {
                status.autoscaler_status = AutoscalerState::Initializing;
                continue;
            }
            "Cluster-wide:" => {
                section = Section::ClusterWide;
                status.cluster_wide = Some(ClusterWide::default());
                continue;
            }
            "NodeGroups:" => {
                section = Section::NodeGroups;
                continue;
            }
            _ => {}
        }
        let (key, value) = line.split_once(':').ok_or_else(|| garbage("expected `Key: value`"))?;
        if key.is_empty() || !key.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
            return Err(garbage("expected `Key: value`"));
        }
        let value = value.trim();
        match (&section, key) {
            (Section::NodeGroups, "Name") => {
                if value.is_empty() {
                    return Err(garbage("node group without a name"));
                }
                status.node_groups.push(NodeGroupStatus {
                    name: value.to_string(),
                    health: None,
                    counts: NodeCounts::default(),
                    cloud_provider_target: 0,
                    min_size: 0,
                    max_size: 0,
                    scale_up: None,
                    backoff: None,
                    scale_down: None,
                });
            }
            (_, "LastProbeTime" | "LastTransitionTime") => {}
            (Section::ClusterWide, "Health" | "ScaleUp" | "ScaleDown") => {
                let (state, pairs) = condition(value, line_no, raw)?;
                let cw = status.cluster_wide.get_or_insert_with(ClusterWide::default);
                match key {
                    "Health" => {
                        cw.health = Some(state);
                        cw.counts = counts(&pairs, line_no)?;
                    }
                    "ScaleUp" => cw.scale_up = Some(state),
                    _ => cw.scale_down = Some(state),
                }
            }
            (Section::NodeGroups, "Health" | "ScaleUp" | "ScaleDown") => {
                let (state, pairs) = condition(value, line_no, raw)?;
                let group = status.node_groups.last_mut().ok_or_else(|| garbage("condition before any `Name:`"))?;
                match key {
                    "Health" => {
                        group.counts = counts(&pairs, line_no)?;
                        group.cloud_provider_target = count(&pairs, "cloudProviderTarget", line_no)?;
                        group.min_size = count(&pairs, "minSize", line_no)?;
                        group.max_size = count(&pairs, "maxSize", line_no)?;
                        group.health = Some(state);
                    }
                    "ScaleUp" => {
                        if state == "Backoff" {
                            group.backoff = Some(Backoff { code: None, message: None });
                        }
                        group.scale_up = Some(state);
                    }
                    _ => group.scale_down = Some(state),
                }
            }
            (Section::Preamble, _) => return Err(garbage("expected `Cluster-wide:`, `NodeGroups:` or `Initializing`")),
            // Fields a later CA may add are tolerated.
            _ => {}
        }
    }
    if !saw_header {
        return Err(ParseCaStatusError::Empty);
    }
    Ok(status)
}

/// `Healthy (ready=5 unready=0 (resourceUnready=0) … (minSize=2, maxSize=20))` → state + pairs.
fn condition(value: &str, line: usize, raw: &str) -> Result<(String, Vec<(String, String)>), ParseCaStatusError> {
    let (state, rest) = value.split_once(char::is_whitespace).unwrap_or((value, ""));
    let rest = rest.trim();
    if state.is_empty() || !state.chars().all(|c| c.is_ascii_alphanumeric()) {
        return Err(ParseCaStatusError::Text {
            line,
            problem: "expected a condition status".into(),
            text: raw.to_string(),
        });
    }
    let parenthesised = rest.starts_with('(') && rest.ends_with(')');
    if !(rest.is_empty() || parenthesised) {
        return Err(ParseCaStatusError::Text {
            line,
            problem: "expected `(key=value …)` after the status".into(),
            text: raw.to_string(),
        });
    }
    let pairs = pair_regex().captures_iter(rest).map(|c| (c[1].to_string(), c[2].to_string())).collect();
    Ok((state.to_string(), pairs))
}

fn count(pairs: &[(String, String)], field: &str, line: usize) -> Result<u32, ParseCaStatusError> {
    match pairs.iter().find(|(k, _)| k == field) {
        None => Ok(0),
        Some((_, v)) => {
            v.parse().map_err(|_| ParseCaStatusError::TextCount { line, field: field.to_string(), value: v.clone() })
        }
    }
}

fn counts(pairs: &[(String, String)], line: usize) -> Result<NodeCounts, ParseCaStatusError> {
    Ok(NodeCounts {
        registered: count(pairs, "registered", line)?,
        ready: count(pairs, "ready", line)?,
        not_started: count(pairs, "notStarted", line)?,
        unready: count(pairs, "unready", line)?,
        resource_unready: count(pairs, "resourceUnready", line)?,
        being_deleted: count(pairs, "beingDeleted", line)?,
        suspended: 0,
        unregistered: count(pairs, "unregistered", line)?,
        long_unregistered: count(pairs, "longUnregistered", line)?,
        long_not_started: count(pairs, "longNotStarted", line)?,
    })
}

// ---------------------------------------------------------------------------------------------
// YAML (CA ≥ 1.30): `api.ClusterAutoscalerStatus`, every field optional.

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct RawStatus {
    time: Option<String>,
    autoscaler_status: Option<String>,
    message: Option<String>,
    cluster_wide: Option<RawClusterWide>,
    node_groups: Option<Vec<RawNodeGroup>>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct RawClusterWide {
    health: Option<RawHealth>,
    scale_up: Option<RawScaleUp>,
    scale_down: Option<RawScaleDown>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct RawNodeGroup {
    name: Option<String>,
    health: Option<RawHealth>,
    scale_up: Option<RawScaleUp>,
    scale_down: Option<RawScaleDown>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct RawHealth {
    status: Option<String>,
    node_counts: Option<RawNodeCounts>,
    cloud_provider_target: Option<u32>,
    min_size: Option<u32>,
    max_size: Option<u32>,
    last_probe_time: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct RawScaleUp {
    status: Option<String>,
    backoff_info: Option<RawBackoff>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct RawScaleDown {
    status: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct RawBackoff {
    error_code: Option<String>,
    error_message: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct RawNodeCounts {
    registered: Option<RawRegistered>,
    long_unregistered: Option<u32>,
    unregistered: Option<u32>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct RawRegistered {
    total: Option<u32>,
    ready: Option<u32>,
    not_started: Option<u32>,
    suspended: Option<u32>,
    being_deleted: Option<u32>,
    unready: Option<RawUnready>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct RawUnready {
    total: Option<u32>,
    resource_unready: Option<u32>,
}

fn parse_yaml(text: &str) -> Result<CaStatus, ParseCaStatusError> {
    let raw: Option<RawStatus> = serde_yaml::from_str(text).map_err(|e| ParseCaStatusError::Yaml {
        location: e
            .location()
            .map_or_else(|| "document".to_string(), |l| format!("line {} column {}", l.line(), l.column())),
        message: e.to_string(),
    })?;
    let raw = raw.ok_or(ParseCaStatusError::Empty)?;
    if raw.time.is_none()
        && raw.autoscaler_status.is_none()
        && raw.cluster_wide.is_none()
        && raw.node_groups.is_none()
        && raw.message.is_none()
    {
        return Err(ParseCaStatusError::NotCaStatus);
    }
    let time = match raw.time.as_deref() {
        None => None,
        Some(t) => parse_go_time(t)
            .or_else(|_| parse_rfc3339(t).map(Some))
            .map_err(|source| ParseCaStatusError::Time { field: "time", source })?,
    };
    let autoscaler_status = match raw.autoscaler_status.as_deref() {
        None | Some("Running") => AutoscalerState::Running,
        Some("Initializing") => AutoscalerState::Initializing,
        Some(other) => AutoscalerState::Other(other.to_string()),
    };
    let cluster_wide = raw.cluster_wide.map(|cw| -> Result<_, ParseCaStatusError> {
        let health = cw.health.unwrap_or_default();
        check_probe_time(&health, "clusterWide.health.lastProbeTime")?;
        Ok(ClusterWide {
            health: health.status,
            counts: yaml_counts(health.node_counts),
            scale_up: cw.scale_up.and_then(|s| s.status),
            scale_down: cw.scale_down.and_then(|s| s.status),
        })
    });
    let node_groups = raw
        .node_groups
        .unwrap_or_default()
        .into_iter()
        .enumerate()
        .map(|(i, g)| {
            let name = g.name.filter(|n| !n.is_empty()).ok_or_else(|| ParseCaStatusError::Yaml {
                location: "document".into(),
                message: format!("nodeGroups[{i}].name: missing; every node group needs its name"),
            })?;
            let health = g.health.unwrap_or_default();
            check_probe_time(&health, "nodeGroups[].health.lastProbeTime")?;
            let scale_up = g.scale_up.unwrap_or_default();
            let info = scale_up.backoff_info.unwrap_or_default();
            let in_backoff = scale_up.status.as_deref() == Some("Backoff") || info.error_code.is_some();
            Ok(NodeGroupStatus {
                name,
                health: health.status,
                counts: yaml_counts(health.node_counts),
                cloud_provider_target: health.cloud_provider_target.unwrap_or(0),
                min_size: health.min_size.unwrap_or(0),
                max_size: health.max_size.unwrap_or(0),
                scale_up: scale_up.status,
                backoff: in_backoff.then_some(Backoff { code: info.error_code, message: info.error_message }),
                scale_down: g.scale_down.and_then(|s| s.status),
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(CaStatus {
        format: CaStatusFormat::Yaml,
        time,
        autoscaler_status,
        cluster_wide: cluster_wide.transpose()?,
        node_groups,
    })
}

/// Probe times are not used for decisions, but one that is not a time means the input is not
/// what CA wrote.
fn check_probe_time(health: &RawHealth, field: &'static str) -> Result<(), ParseCaStatusError> {
    match health.last_probe_time.as_deref() {
        Some(t) => parse_rfc3339(t).map(|_| ()).map_err(|source| ParseCaStatusError::Time { field, source }),
        None => Ok(()),
    }
}

fn yaml_counts(raw: Option<RawNodeCounts>) -> NodeCounts {
    let raw = raw.unwrap_or_default();
    let reg = raw.registered.unwrap_or_default();
    let unready = reg.unready.unwrap_or_default();
    NodeCounts {
        registered: reg.total.unwrap_or(0),
        ready: reg.ready.unwrap_or(0),
        not_started: reg.not_started.unwrap_or(0),
        unready: unready.total.unwrap_or(0),
        resource_unready: unready.resource_unready.unwrap_or(0),
        being_deleted: reg.being_deleted.unwrap_or(0),
        suspended: reg.suspended.unwrap_or(0),
        unregistered: raw.unregistered.unwrap_or(0),
        long_unregistered: raw.long_unregistered.unwrap_or(0),
        long_not_started: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::timefmt::format_rfc3339;

    fn fixture(name: &str) -> String {
        let path = format!("{}/tests/fixtures/ca-status/{name}", env!("CARGO_MANIFEST_DIR"));
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    fn parse(name: &str) -> CaStatus {
        parse_ca_status(&fixture(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
    }

    #[test]
    fn legacy_1_24_with_nested_resource_unready() {
        let s = parse("legacy-1.24.txt");
        assert_eq!(s.format, CaStatusFormat::LegacyText);
        assert_eq!(format_rfc3339(s.time.unwrap()), "2024-03-11T08:41:17.905Z");
        assert_eq!(s.cluster_wide.as_ref().unwrap().counts.registered, 8);
        assert_eq!(s.node_groups.len(), 2);
        let spot = &s.node_groups[0];
        assert_eq!(spot.name, "eks-nodes-app-spot-0ec22d5a-1d53-aa90-9a86-46470ecca2af");
        assert_eq!((spot.counts.ready, spot.cloud_provider_target, spot.min_size, spot.max_size), (5, 5, 2, 20));
        assert_eq!(spot.scale_up.as_deref(), Some("NoActivity"));
        assert_eq!(s.node_groups[1].min_size, 3);
    }

    #[test]
    fn legacy_1_20_reports_real_long_not_started() {
        let s = parse("legacy-1.20.txt");
        let g = &s.node_groups[0];
        assert_eq!((g.counts.long_not_started, g.counts.not_started, g.counts.unready), (1, 2, 1));
        assert_eq!(g.health.as_deref(), Some("Unhealthy"));
        assert_eq!(g.scale_up.as_deref(), Some("InProgress"));
    }

    #[test]
    fn legacy_1_21_with_backoff_and_long_unregistered() {
        let s = parse("legacy-1.21.txt");
        let g = s.group("spot-b").unwrap();
        assert_eq!(g.backoff, Some(Backoff { code: None, message: None }));
        assert_eq!(g.core_view().backoff.as_deref(), Some("backoff"));
        assert_eq!((g.counts.unregistered, g.counts.long_unregistered, g.cloud_provider_target), (0, 2, 6));
    }

    #[test]
    fn legacy_initializing() {
        let s = parse("legacy-initializing.txt");
        assert_eq!(s.autoscaler_status, AutoscalerState::Initializing);
        assert!(s.node_groups.is_empty());
    }

    #[test]
    fn yaml_1_30_after_an_external_boost() {
        let s = parse("yaml-1.30.yaml");
        assert_eq!(s.format, CaStatusFormat::Yaml);
        assert_eq!(format_rfc3339(s.time.unwrap()), "2024-09-03T14:05:12.634Z");
        let g = &s.node_groups[0];
        assert_eq!((g.counts.registered, g.counts.ready, g.counts.not_started, g.counts.unregistered), (6, 5, 1, 1));
        assert_eq!((g.cloud_provider_target, g.min_size, g.max_size), (7, 2, 20));
        assert_eq!(g.backoff, None);
        assert_eq!(s.cluster_wide.unwrap().counts.registered, 9);
    }

    #[test]
    fn yaml_1_30_backoff_with_code() {
        let s = parse("yaml-1.30-backoff.yaml");
        let g = &s.node_groups[0];
        assert_eq!(g.scale_up.as_deref(), Some("Backoff"));
        assert_eq!(g.backoff.as_ref().unwrap().code.as_deref(), Some("placeholder-cannot-be-fulfilled"));
        assert_eq!(g.core_view().backoff.as_deref(), Some("placeholder-cannot-be-fulfilled"));
        assert_eq!((g.counts.unready, g.counts.resource_unready, g.counts.being_deleted), (2, 1, 1));
    }

    #[test]
    fn yaml_1_36_sorted_keys_nulls_empty_backoff_and_suspended() {
        let s = parse("yaml-1.36.yaml");
        let g = &s.node_groups[0];
        assert_eq!(g.backoff, None, "`backoffInfo: {{}}` is not a backoff");
        assert_eq!((g.counts.suspended, g.counts.ready, g.cloud_provider_target), (1, 4, 5));
        assert_eq!(format_rfc3339(s.time.unwrap()), "2026-08-03T10:41:07.218Z");
        assert_eq!(s.node_groups[1].backoff.as_ref().unwrap().code.as_deref(), Some("timeout"));
    }

    #[test]
    fn yaml_initializing_in_both_serializers() {
        for name in ["yaml-1.30-initializing.yaml", "yaml-1.36-initializing.yaml"] {
            let s = parse(name);
            assert_eq!(s.autoscaler_status, AutoscalerState::Initializing, "{name}");
            assert!(s.node_groups.is_empty());
        }
    }

    #[test]
    fn missing_extra_and_null_fields_are_tolerated() {
        let s = parse_ca_status("autoscalerStatus: Running\nfuture: 1\nnodeGroups:\n- name: a\n  health: null\n  scaleUp: {status: NoActivity, extra: x}\n").unwrap();
        assert_eq!(s.node_groups[0].cloud_provider_target, 0);
        assert_eq!(s.node_groups[0].scale_up.as_deref(), Some("NoActivity"));
    }

    #[test]
    fn garbage_is_rejected_with_where() {
        let err = parse_ca_status("nodeGroups:\n- name: a\n  health:\n    cloudProviderTarget: lots\n").unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("line 4") && msg.contains("cloudProviderTarget"), "{msg}");

        let legacy = fixture("legacy-1.24.txt")
            .replace("cloudProviderTarget=5 (minSize=2", "cloudProviderTarget=five (minSize=2");
        assert_eq!(
            parse_ca_status(&legacy).unwrap_err(),
            ParseCaStatusError::TextCount { line: 15, field: "cloudProviderTarget".into(), value: "five".into() }
        );

        let noise =
            "Cluster-autoscaler status at 2024-03-11 08:41:17 +0000 UTC:\nCluster-wide:\n  this is not a status line\n";
        assert!(matches!(parse_ca_status(noise), Err(ParseCaStatusError::Text { line: 3, .. })));

        assert_eq!(parse_ca_status("hello: world\n"), Err(ParseCaStatusError::NotCaStatus));
        assert!(matches!(parse_ca_status("just some words"), Err(ParseCaStatusError::Yaml { .. })));
        assert!(matches!(parse_ca_status("time: yesterday\n"), Err(ParseCaStatusError::Time { field: "time", .. })));
        assert_eq!(parse_ca_status("  \n"), Err(ParseCaStatusError::Empty));
    }

    #[test]
    fn hostile_sizes_and_nesting_are_refused_before_the_yaml_parser() {
        let deep = format!("nodeGroups: {}", "[".repeat(200_000));
        assert_eq!(parse_ca_status(&deep), Err(ParseCaStatusError::TooDeep { limit: MAX_FLOW_DEPTH }));
        let big = format!("time: x\n#{}", "a".repeat(MAX_STATUS_BYTES));
        assert!(matches!(parse_ca_status(&big), Err(ParseCaStatusError::TooLarge { .. })));
    }
}
