//! The scenario file of `spots-booster simulate`: groups, workloads, and the spot events that hit
//! them. Parsed strictly (unknown keys are errors) and validated with errors that name the field.

use crate::yaml_guard::{flow_depth, MAX_FLOW_DEPTH};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde::Deserialize;
use thiserror::Error;

use super::market::{market, Market, RawMarket};
use crate::config::policy_from_pairs;
use crate::core::{Policy, Resources};
use crate::units::{parse_cpu_millis, parse_duration, parse_memory_bytes};

/// A scenario that cannot be run, naming the field.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum ScenarioError {
    /// Not valid YAML, or not of the scenario's shape (serde names the field and line).
    #[error("scenario: {0}")]
    Shape(String),
    /// A field with an invalid value.
    #[error("scenario field {field}: {why}")]
    Field {
        /// The field path, e.g. `groups[0].max`.
        field: String,
        /// What is wrong.
        why: String,
    },
}

fn field_error(field: impl Into<String>, why: impl std::fmt::Display) -> ScenarioError {
    ScenarioError::Field { field: field.into(), why: why.to_string() }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawScenario {
    duration: String,
    #[serde(default)]
    policy: BTreeMap<String, serde_yaml::Value>,
    groups: Vec<RawGroup>,
    #[serde(default)]
    workloads: Vec<RawWorkload>,
    #[serde(default)]
    events: Vec<RawEvent>,
    #[serde(default)]
    cluster: RawCluster,
    #[serde(default)]
    market: Option<RawMarket>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawCluster {
    pod_start: Option<String>,
    interruption_notice: Option<String>,
    ca_scan_interval: Option<String>,
    nth_drain_timeout: Option<String>,
    nth_eviction_retry: Option<String>,
    nth_mode: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGroup {
    name: String,
    min: u32,
    max: u32,
    desired: u32,
    node: RawResources,
    boot: String,
    /// The ASG tag `spots-booster.io/fallback-groups`, as a list.
    #[serde(default, rename = "fallback-groups")]
    fallback_groups: Vec<String>,
    /// When its pool has no capacity: no instance launches, each attempt is a failed activity.
    #[serde(default, rename = "no-capacity")]
    no_capacity: Option<RawWindow>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWindow {
    from: String,
    until: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawResources {
    cpu: String,
    memory: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWorkload {
    name: String,
    replicas: u32,
    requests: RawResources,
    #[serde(default)]
    pdb: Option<RawPdb>,
    groups: Vec<String>,
    #[serde(default)]
    critical: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawPdb {
    max_unavailable: Option<serde_yaml::Value>,
    min_available: Option<serde_yaml::Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEvent {
    at: String,
    rebalance: Option<RawHit>,
    interrupt: Option<RawHit>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHit {
    group: String,
    #[serde(default)]
    nodes: Option<u32>,
    #[serde(default)]
    names: Option<Vec<String>>,
    #[serde(default)]
    notice: Option<String>,
}

/// A validated scenario.
#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    /// Simulated time.
    pub duration: Duration,
    /// The booster's policy (built from the `policy:` map exactly as from run flags).
    pub policy: Policy,
    /// Auto Scaling Groups.
    pub groups: Vec<GroupSpec>,
    /// Workloads (ReplicaSet-like: an evicted pod comes back Pending at once).
    pub(crate) workloads: Vec<Workload>,
    /// Spot events in time order.
    pub events: Vec<SpotEvent>,
    /// Timings of the simulated cluster.
    pub cluster: ClusterTimings,
    /// The spot market, when the scenario describes one: its recommendations come on top of
    /// `events`, and every rebalance policy is compared on it.
    pub market: Option<Market>,
}

/// Timings of the simulated cluster; each has a documented default.
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterTimings {
    /// A bound pod turns Ready this long after binding. Default 10s.
    pub(crate) pod_start: Duration,
    /// Time from a spot interruption notice to the instance's end. Default 2m.
    pub(crate) interruption_notice: Duration,
    /// Cluster Autoscaler's `--scan-interval`. Default 10s.
    pub(crate) ca_scan_interval: Duration,
    /// How long NTH keeps trying to drain a node. Default 2m (NTH's node termination grace period).
    pub(crate) nth_drain_timeout: Duration,
    /// How often NTH retries an eviction refused by a PDB. Default 5s.
    pub(crate) nth_eviction_retry: Duration,
    /// Whether NTH drains a node on a spot interruption notice: `nth-mode: imds` (the default;
    /// the IMDS DaemonSet cordons and drains) or not, `nth-mode: queue-cordon-only` (the queue
    /// processor set up to cordon only, as the booster's README suggests).
    pub(crate) nth_drains_interruptions: bool,
}

/// One Auto Scaling Group.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupSpec {
    /// Name; nodes are named `<name>-<n>`, oldest first.
    pub name: String,
    /// MinSize.
    pub min: u32,
    /// MaxSize.
    pub max: u32,
    /// Initial DesiredCapacity (all Ready at the start).
    pub desired: u32,
    /// What one node offers pods.
    pub node: Resources,
    /// From launch to Node Ready.
    pub boot: Duration,
    /// Where a boost's missing nodes go when this group has no capacity, in order.
    pub fallbacks: Vec<String>,
    /// From when (and until when, if it returns) the group's pool has no capacity.
    pub no_capacity: Option<(Duration, Option<Duration>)>,
}

impl GroupSpec {
    /// Whether its pool has no capacity `elapsed` into the run.
    pub(crate) fn out_of_capacity(&self, elapsed: Duration) -> bool {
        self.no_capacity.is_some_and(|(from, until)| elapsed >= from && until.is_none_or(|u| elapsed < u))
    }
}

/// Most pods one workload may have: every pod is simulated, every second.
const MAX_REPLICAS: u32 = 100_000;

/// A PodDisruptionBudget, resolved against the workload's replicas.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Pdb {
    /// Pods that must stay Ready.
    pub(crate) min_healthy: u32,
}

/// A set of identical pods.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Workload {
    /// Name; pods are `<name>-<k>`.
    pub name: String,
    /// Pod count.
    pub replicas: u32,
    /// Per-pod requests.
    pub requests: Resources,
    /// Its budget, if any.
    pub pdb: Option<Pdb>,
    /// Groups it may run on, in preference order.
    pub groups: Vec<String>,
    /// Whether its pods are critical (evicted last).
    pub critical: bool,
}

/// Which nodes a spot event hits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Targets {
    /// The `n` oldest live nodes of the group not yet hit by the same kind of event.
    Oldest(u32),
    /// These nodes by name.
    Named(Vec<String>),
}

/// What happens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpotEventKind {
    /// EC2 rebalance recommendation: NTH emits the Event and cordons.
    Rebalance,
    /// Spot interruption notice: NTH emits the Event, cordons and drains; the instance ends after the notice.
    Interrupt,
}

/// A spot event at a time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpotEvent {
    /// Offset from the start.
    pub at: Duration,
    /// What.
    pub kind: SpotEventKind,
    /// The group hit.
    pub group: String,
    /// Which of its nodes.
    pub targets: Targets,
    /// For an interruption, its own notice (one that reached the cluster late), instead of
    /// `cluster.interruption-notice`.
    pub(crate) notice: Option<Duration>,
}

/// Parses and validates a scenario.
pub fn parse_scenario(text: &str) -> Result<Scenario, ScenarioError> {
    if flow_depth(text) > MAX_FLOW_DEPTH {
        return Err(ScenarioError::Shape(format!("brackets nested more than {MAX_FLOW_DEPTH} deep")));
    }
    let raw: RawScenario = serde_yaml::from_str(text).map_err(|e| ScenarioError::Shape(e.to_string()))?;
    let duration = duration_field("duration", &raw.duration)?;
    if duration.is_zero() || duration > Duration::from_secs(7 * 86_400) {
        return Err(field_error("duration", "must be longer than zero and at most 7 days"));
    }

    let pairs = raw
        .policy
        .iter()
        .map(|(k, v)| match v {
            serde_yaml::Value::String(s) => Ok((k.as_str(), s.clone())),
            serde_yaml::Value::Number(n) => Ok((k.as_str(), n.to_string())),
            serde_yaml::Value::Bool(b) => Ok((k.as_str(), b.to_string())),
            serde_yaml::Value::Sequence(items) => Ok((
                k.as_str(),
                items.iter().map(|i| i.as_str().map(String::from).unwrap_or_default()).collect::<Vec<_>>().join(","),
            )),
            _ => Err(field_error(format!("policy.{k}"), "must be a string, number, boolean or list")),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let policy = policy_from_pairs(pairs).map_err(|why| field_error("policy", why))?;

    if raw.groups.is_empty() {
        return Err(field_error("groups", "at least one group is needed"));
    }
    let mut names = BTreeSet::new();
    let groups = raw
        .groups
        .iter()
        .enumerate()
        .map(|(i, g)| {
            let f = |name: &str| format!("groups[{i}].{name}");
            if g.name.is_empty() || !g.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
                return Err(field_error(f("name"), "must be letters, digits, '-' or '_'"));
            }
            if !names.insert(g.name.clone()) {
                return Err(field_error(f("name"), format!("{:?} is used twice", g.name)));
            }
            if g.min > g.max {
                return Err(field_error(f("min"), format!("{} is above max {}", g.min, g.max)));
            }
            if g.desired < g.min || g.desired > g.max {
                return Err(field_error(
                    f("desired"),
                    format!("{} is outside min {} .. max {}", g.desired, g.min, g.max),
                ));
            }
            let no_capacity = match &g.no_capacity {
                None => None,
                Some(w) => {
                    let from = duration_field(&f("no-capacity.from"), &w.from)?;
                    let until = w.until.as_ref().map(|u| duration_field(&f("no-capacity.until"), u)).transpose()?;
                    if until.is_some_and(|u| u <= from) {
                        return Err(field_error(f("no-capacity.until"), "must be after no-capacity.from"));
                    }
                    Some((from, until))
                }
            };
            Ok(GroupSpec {
                name: g.name.clone(),
                min: g.min,
                max: g.max,
                desired: g.desired,
                node: resources(&f("node"), &g.node)?,
                boot: duration_field(&f("boot"), &g.boot)?,
                fallbacks: g.fallback_groups.clone(),
                no_capacity,
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    for (i, g) in groups.iter().enumerate() {
        if let Some(unknown) = g.fallbacks.iter().find(|f| !names.contains(*f) || **f == g.name) {
            return Err(field_error(
                format!("groups[{i}].fallback-groups"),
                format!("{unknown:?} is not another group of the scenario"),
            ));
        }
    }

    let workloads = raw
        .workloads
        .iter()
        .enumerate()
        .map(|(i, w)| {
            let f = |name: &str| format!("workloads[{i}].{name}");
            if w.groups.is_empty() {
                return Err(field_error(f("groups"), "name at least one group"));
            }
            for (k, g) in w.groups.iter().enumerate() {
                if !names.contains(g) {
                    return Err(field_error(format!("workloads[{i}].groups[{k}]"), format!("unknown group {g:?}")));
                }
            }
            if w.replicas > MAX_REPLICAS {
                return Err(field_error(
                    f("replicas"),
                    format!("{} is more than a simulation holds ({MAX_REPLICAS})", w.replicas),
                ));
            }
            let requests = resources(&f("requests"), &w.requests)?;
            if requests == Resources::default() {
                return Err(field_error(f("requests"), "a pod that requests nothing cannot displace anything"));
            }
            Ok(Workload {
                name: w.name.clone(),
                replicas: w.replicas,
                requests,
                pdb: w.pdb.as_ref().map(|p| pdb(&f("pdb"), p, w.replicas)).transpose()?,
                groups: w.groups.clone(),
                critical: w.critical,
            })
        })
        .collect::<Result<Vec<_>, _>>()?;

    let mut events = raw
        .events
        .iter()
        .enumerate()
        .map(|(i, e)| {
            let f = |name: &str| format!("events[{i}].{name}");
            let at = duration_field(&f("at"), &e.at)?;
            if at > duration {
                return Err(field_error(f("at"), "is after the scenario's duration"));
            }
            let (kind, hit, key) = match (&e.rebalance, &e.interrupt) {
                (Some(h), None) => (SpotEventKind::Rebalance, h, "rebalance"),
                (None, Some(h)) => (SpotEventKind::Interrupt, h, "interrupt"),
                _ => {
                    return Err(field_error(format!("events[{i}]"), "needs exactly one of `rebalance` or `interrupt`"))
                }
            };
            if !names.contains(&hit.group) {
                return Err(field_error(format!("events[{i}].{key}.group"), format!("unknown group {:?}", hit.group)));
            }
            let targets = match (&hit.nodes, &hit.names) {
                (Some(n), None) if *n > 0 => Targets::Oldest(*n),
                (None, Some(list)) if !list.is_empty() => Targets::Named(list.clone()),
                _ => {
                    return Err(field_error(
                        format!("events[{i}].{key}"),
                        "needs `nodes: <count above 0>` or a non-empty `names: [...]`",
                    ))
                }
            };
            let notice = match (&hit.notice, kind) {
                (None, _) => None,
                (Some(n), SpotEventKind::Interrupt) => Some(duration_field(&format!("events[{i}].{key}.notice"), n)?),
                (Some(_), SpotEventKind::Rebalance) => {
                    return Err(field_error(format!("events[{i}].{key}.notice"), "only an interruption has a notice"))
                }
            };
            Ok(SpotEvent { at, kind, group: hit.group.clone(), targets, notice })
        })
        .collect::<Result<Vec<_>, _>>()?;
    events.sort_by_key(|e| e.at);

    let timing = |name: &str, value: &Option<String>, default: u64| -> Result<Duration, ScenarioError> {
        value.as_deref().map_or(Ok(Duration::from_secs(default)), |v| duration_field(&format!("cluster.{name}"), v))
    };
    let cluster = ClusterTimings {
        pod_start: timing("pod-start", &raw.cluster.pod_start, 10)?,
        interruption_notice: timing("interruption-notice", &raw.cluster.interruption_notice, 120)?,
        ca_scan_interval: timing("ca-scan-interval", &raw.cluster.ca_scan_interval, 10)?,
        nth_drain_timeout: timing("nth-drain-timeout", &raw.cluster.nth_drain_timeout, 120)?,
        nth_eviction_retry: timing("nth-eviction-retry", &raw.cluster.nth_eviction_retry, 5)?,
        nth_drains_interruptions: match raw.cluster.nth_mode.as_deref() {
            None | Some("imds") => true,
            Some("queue-cordon-only") => false,
            Some(other) => {
                return Err(field_error("cluster.nth-mode", format!("{other:?} is neither imds nor queue-cordon-only")))
            }
        },
    };
    if cluster.ca_scan_interval < Duration::from_secs(1) {
        return Err(field_error("cluster.ca-scan-interval", "must be at least 1s"));
    }
    let group_names: Vec<String> = groups.iter().map(|g| g.name.clone()).collect();
    let market = raw
        .market
        .as_ref()
        .map(|m| market(m, &group_names, duration).map_err(|e| field_error(e.field, e.why)))
        .transpose()?;
    Ok(Scenario { duration, policy, groups, workloads, events, cluster, market })
}

fn duration_field(field: &str, value: &str) -> Result<Duration, ScenarioError> {
    parse_duration(value).map_err(|e| field_error(field, e))
}

fn resources(field: &str, raw: &RawResources) -> Result<Resources, ScenarioError> {
    Ok(Resources::new(
        parse_cpu_millis(&raw.cpu).map_err(|e| field_error(format!("{field}.cpu"), e))?,
        parse_memory_bytes(&raw.memory).map_err(|e| field_error(format!("{field}.memory"), e))?,
    ))
}

/// Resolves an int-or-percent against `replicas` (percentages of maxUnavailable round up, of
/// minAvailable round up too, as the disruption controller does).
fn int_or_percent(field: &str, value: &serde_yaml::Value, replicas: u32) -> Result<u32, ScenarioError> {
    match value {
        serde_yaml::Value::Number(n) => n
            .as_u64()
            .map(|v| u32::try_from(v).unwrap_or(u32::MAX))
            .ok_or_else(|| field_error(field, "must be a whole number")),
        serde_yaml::Value::String(s) => {
            let pct: u32 =
                s.strip_suffix('%').and_then(|p| p.parse().ok()).filter(|p| *p <= 100).ok_or_else(|| {
                    field_error(field, format!("{s:?} is neither a count nor a percentage like \"25%\""))
                })?;
            Ok(u32::try_from((u64::from(replicas) * u64::from(pct)).div_ceil(100)).unwrap_or(u32::MAX))
        }
        _ => Err(field_error(field, "must be a count or a percentage")),
    }
}

fn pdb(field: &str, raw: &RawPdb, replicas: u32) -> Result<Pdb, ScenarioError> {
    match (&raw.max_unavailable, &raw.min_available) {
        (Some(max), None) => {
            let max = int_or_percent(&format!("{field}.maxUnavailable"), max, replicas)?;
            Ok(Pdb { min_healthy: replicas.saturating_sub(max) })
        }
        (None, Some(min)) => Ok(Pdb { min_healthy: int_or_percent(&format!("{field}.minAvailable"), min, replicas)? }),
        _ => Err(field_error(field, "needs exactly one of maxUnavailable or minAvailable")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = r#"
duration: 45m
policy: { sizing: pods, max-concurrent-drains: 2 }
groups:
  - { name: spot-a, min: 1, max: 12, desired: 4, node: { cpu: "4", memory: 16Gi }, boot: 90s }
workloads:
  - { name: web, replicas: 16, requests: { cpu: 500m, memory: 1Gi }, pdb: { maxUnavailable: 1 }, groups: [spot-a] }
events:
  - { at: 12m, interrupt: { group: spot-a, nodes: 1 } }
  - { at: 5m, rebalance: { group: spot-a, nodes: 2 } }
"#;

    #[test]
    fn the_issue_example_parses() {
        let s = parse_scenario(MINIMAL).unwrap();
        assert_eq!(s.duration, Duration::from_secs(45 * 60));
        assert_eq!(s.policy.max_concurrent_drains, 2);
        assert_eq!(s.groups[0].node, Resources::new(4000, 16 << 30));
        assert_eq!(s.workloads[0].pdb, Some(Pdb { min_healthy: 15 }));
        assert_eq!(s.events[0].kind, SpotEventKind::Rebalance, "events are sorted by time");
        assert_eq!(s.events[0].targets, Targets::Oldest(2));
        assert_eq!(s.cluster.interruption_notice, Duration::from_secs(120));
    }

    #[test]
    fn invalid_scenarios_name_the_field() {
        let cases = [
            (MINIMAL.replace("max: 12", "max: 3"), "groups[0].desired"),
            (MINIMAL.replace("groups: [spot-a]", "groups: [spot-z]"), "workloads[0].groups[0]"),
            (MINIMAL.replace("rebalance: { group: spot-a", "rebalance: { group: nope"), "events[1].rebalance.group"),
            (MINIMAL.replace("memory: 16Gi", "memory: 16GB"), "groups[0].node.memory"),
            (MINIMAL.replace("boot: 90s", "boot: soon"), "groups[0].boot"),
            (MINIMAL.replace("max-concurrent-drains: 2", "max-concurrent-drains: 0"), "--max-concurrent-drains"),
            (MINIMAL.replace("maxUnavailable: 1", "maxUnavailable: \"lots\""), "workloads[0].pdb.maxUnavailable"),
            (MINIMAL.replace("at: 12m", "at: 2h"), "events[0].at"),
            (MINIMAL.replace("nodes: 1 }", "nodes: 0 }"), "events[0].interrupt"),
            (MINIMAL.replace("boot: 90s", "boot: 90s, colour: red"), "colour"),
        ];
        for (text, field) in cases {
            let err = parse_scenario(&text).unwrap_err().to_string();
            assert!(err.contains(field), "expected {field} in: {err}");
        }
    }

    #[test]
    fn huge_replicas_are_refused_naming_the_field() {
        let text = MINIMAL
            .replace("replicas: 16", "replicas: 500000000")
            .replace("maxUnavailable: 1", "maxUnavailable: \"10%\"");
        let err = parse_scenario(&text).unwrap_err().to_string();
        assert!(err.contains("workloads[0].replicas"), "{err}");
    }

    #[test]
    fn percent_budgets_resolve_against_replicas() {
        let text = MINIMAL.replace("maxUnavailable: 1", "minAvailable: \"50%\"");
        assert_eq!(parse_scenario(&text).unwrap().workloads[0].pdb, Some(Pdb { min_healthy: 8 }));
        let text = MINIMAL.replace("maxUnavailable: 1", "maxUnavailable: \"10%\"");
        assert_eq!(parse_scenario(&text).unwrap().workloads[0].pdb, Some(Pdb { min_healthy: 14 }));
    }
}
