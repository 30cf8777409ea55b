//! Classifies any core/v1 Event into an AWS Node Termination Handler signal, or says why it is
//! ignored. Covers IMDS mode, queue mode with `logFormatVersion: 1` (every kind reported as
//! `SQSTermination`, told apart by its message) and queue mode with `logFormatVersion: 2`.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use k8s_openapi::api::core::v1::Event;
use regex::Regex;
use serde::{Deserialize, Serialize};

use crate::core::{Evidence, InstanceId, NodeName, Signal, SignalKind, Timestamp};
use crate::timefmt::{parse_go_time, parse_imds_time, parse_rfc3339};

/// NTH's `source.component` / `reportingComponent`.
pub(crate) const NTH_COMPONENT: &str = "aws-node-termination-handler";

/// How NTH learnt of the interruption.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NthMode {
    /// The DaemonSet polling the instance metadata service.
    Imds,
    /// Queue processor, `logFormatVersion: 1`: reason `SQSTermination` for every kind.
    QueueV1,
    /// Queue processor, `logFormatVersion: 2`: one reason per kind.
    QueueV2,
}

/// Where the instance id came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum InstanceSource {
    /// The Event's `instance-id` annotation.
    Annotation,
    /// The Event's message.
    Message,
    /// The Node's `spec.providerID`.
    ProviderId,
}

/// An NTH interruption Event, understood.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NthSignal {
    /// What was announced.
    pub kind: SignalKind,
    /// How NTH learnt of it.
    pub mode: NthMode,
    /// The Event's reason.
    pub reason: String,
    /// The affected Node.
    pub node: NodeName,
    /// The instance, when the Event, its message or the Node's providerID names it.
    pub instance: Option<InstanceId>,
    /// Where `instance` came from.
    pub(crate) instance_source: Option<InstanceSource>,
    /// The time the message announces (cordon, interruption, scheduled start, state change).
    pub(crate) notice_time: Option<Timestamp>,
    /// When the Event was first recorded.
    pub observed_at: Option<Timestamp>,
    /// Extra words from the message: a state-change target state or a scheduled-event code.
    pub detail: Option<String>,
    /// `involvedObject.uid`: NTH's queue processor reads the Node and names its uid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject_uid: Option<String>,
    /// `source.host`, else `reportingInstance`: in IMDS mode NTH runs on the node it reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reported_from: Option<String>,
}

impl NthSignal {
    /// The core's signal, once the instance is known. `fallback_now` stands in for an Event that
    /// carries no timestamp at all.
    pub(crate) fn to_core(&self, fallback_now: Timestamp) -> Option<Signal> {
        Some(Signal {
            instance: self.instance.clone()?,
            node: self.node.clone(),
            kind: self.kind,
            observed_at: self.observed_at.unwrap_or(fallback_now),
            evidence: Evidence::Event,
            notice_deadline: self.deadline(),
        })
    }

    /// When the notice says the instance goes. Queue mode reports when EC2 *sent* a spot
    /// interruption, which gives two minutes; IMDS mode reports the interruption time itself, and
    /// scheduled events and lifecycle terminations name their start.
    fn deadline(&self) -> Option<Timestamp> {
        let at = self.notice_time?;
        match (self.kind, self.mode) {
            (SignalKind::SpotInterruption, NthMode::QueueV1 | NthMode::QueueV2) => {
                Some(at.plus(crate::core::INTERRUPTION_NOTICE))
            }
            (SignalKind::SpotInterruption | SignalKind::Scheduled | SignalKind::AsgLifecycle, _) => Some(at),
            _ => None,
        }
    }
}

impl NthSignal {
    /// What must also hold before the daemon acts on this Event, since anyone who may create
    /// Events could have written it: the Event is about the Node (its uid, or reported from it),
    /// the Node is EC2's instance, NTH's cordon (or taint) is on it, and AWS agrees the notice
    /// can be real (spot for spot-only kinds, a scheduled event for scheduled maintenance).
    pub(crate) fn trust_rule(&self) -> String {
        let about = match &self.subject_uid {
            Some(uid) => format!("involvedObject.uid {uid} is node {}'s", self.node),
            None => format!("reported from node {} itself", self.node),
        };
        let instance = self.instance.as_ref().map_or_else(|| "its instance".to_string(), |i| i.to_string());
        let mut rule = format!("{about}; EC2 names {instance} as node {}; node cordoned or NTH-tainted", self.node);
        if self.kind.spot_only() {
            rule.push_str(&format!("; EC2 says {instance} is spot"));
        } else if self.kind == SignalKind::Scheduled {
            rule.push_str(&format!("; EC2 lists a scheduled event for {instance}"));
        }
        rule
    }
}

/// Why an Event is not a signal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "kind", content = "detail")]
pub enum Ignored {
    /// Neither `source.component` nor `reportingComponent` is NTH's (NTH's recorder always sets
    /// `source.component`).
    NotFromNth(String),
    /// The Event is about a Pod, not a Node (e.g. NTH's `PodEviction`).
    NotAboutANode(String),
    /// One of NTH's action reports (`Cordon`, `CordonAndDrain`, `PreDrain`, …), not a notice.
    NthAction(String),
    /// A reason NTH does not emit for interruptions.
    UnknownReason(String),
    /// `SQSTermination` whose message matches no known queue-mode format.
    UnrecognisedQueueMessage(String),
    /// No involved object name.
    NoNodeName,
}

impl std::fmt::Display for Ignored {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Ignored::NotFromNth(c) => {
                write!(f, "not from aws-node-termination-handler (component {c:?})")
            }
            Ignored::NotAboutANode(k) => write!(f, "about a {k}, not a Node"),
            Ignored::NthAction(r) => {
                write!(f, "{r} reports an NTH action, not an interruption notice")
            }
            Ignored::UnknownReason(r) => {
                write!(f, "reason {r:?} is not an NTH interruption reason")
            }
            Ignored::UnrecognisedQueueMessage(m) => {
                write!(f, "SQSTermination message matches no known NTH format: {m:?}")
            }
            Ignored::NoNodeName => f.write_str("the Event names no Node"),
        }
    }
}

/// An Event, classified.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "result")]
pub enum Classification {
    /// An interruption notice.
    Signal(NthSignal),
    /// Not one, and why.
    Ignored {
        /// Why.
        because: Ignored,
    },
}

const ACTION_REASONS: &[&str] = &[
    "Cordon",
    "CordonError",
    "CordonAndDrain",
    "CordonAndDrainError",
    "PreDrain",
    "PreDrainError",
    "PostDrain",
    "PostDrainError",
    "CancelDrain",
    "CancelDrainError",
    "Uncordon",
    "UncordonError",
    "MonitorError",
    "PodEviction",
];

/// Reasons NTH gives its interruption notices: an Event with one of these from anyone else is
/// an impostor, counted as such.
const NOTICE_REASONS: &[&str] = &[
    "SQSTermination",
    "RebalanceRecommendation",
    "SpotInterruption",
    "ScheduledEvent",
    "ASGLifecycle",
    "StateChange",
    "UnknownInterruption",
];

/// Whether `reason` is one NTH gives an interruption notice.
pub(crate) fn is_notice_reason(reason: &str) -> bool {
    NOTICE_REASONS.contains(&reason)
}

/// The instance id at the end of an AWS providerID (`aws:///eu-central-1a/i-042377dc1ee1257a1`).
pub(crate) fn instance_from_provider_id(provider_id: &str) -> Option<InstanceId> {
    let id = provider_id.strip_prefix("aws://")?.rsplit('/').next()?;
    id.starts_with("i-").then(|| InstanceId::from(id))
}

/// Classifies `event`. `provider_id` is the affected Node's `spec.providerID`, when the caller
/// has it: the last resort for the instance id.
pub fn classify_event(event: &Event, provider_id: Option<&str>) -> Classification {
    let ignored = |because| Classification::Ignored { because };
    let reason = event.reason.clone().unwrap_or_default();
    let component = event.source.as_ref().and_then(|s| s.component.clone()).filter(|c| !c.is_empty());
    let reporting = event.reporting_component.clone().filter(|c| !c.is_empty());
    let from_nth = component.as_deref() == Some(NTH_COMPONENT) || reporting.as_deref() == Some(NTH_COMPONENT);
    if !from_nth {
        return ignored(Ignored::NotFromNth(component.or(reporting).unwrap_or_default()));
    }
    let object_kind = event.involved_object.kind.clone().unwrap_or_default();
    if object_kind != "Node" {
        return ignored(Ignored::NotAboutANode(if object_kind.is_empty() {
            "object of no kind".into()
        } else {
            object_kind
        }));
    }
    if ACTION_REASONS.contains(&reason.as_str()) {
        return ignored(Ignored::NthAction(reason));
    }
    let Some(node) = event.involved_object.name.clone().filter(|n| !n.is_empty()) else {
        return ignored(Ignored::NoNodeName);
    };
    let message = event.message.clone().unwrap_or_default();
    let parsed = match reason.as_str() {
        "SQSTermination" => match parse_queue_message(&message) {
            Some(p) => (NthMode::QueueV1, p),
            None => return ignored(Ignored::UnrecognisedQueueMessage(message.trim_end().to_string())),
        },
        "RebalanceRecommendation"
        | "SpotInterruption"
        | "ScheduledEvent"
        | "ASGLifecycle"
        | "StateChange"
        | "UnknownInterruption" => {
            let kind = kind_of_reason(&reason);
            match (parse_queue_message(&message), parse_imds_message(&message)) {
                (Some(p), _) => (NthMode::QueueV2, Parsed { kind, ..p }),
                (None, Some(p)) => (NthMode::Imds, Parsed { kind, ..p }),
                (None, None) => (mode_from_shape(event, &reason), Parsed { kind, ..Parsed::default() }),
            }
        }
        _ => return ignored(Ignored::UnknownReason(reason)),
    };
    let (mode, parsed) = parsed;

    let annotated =
        annotations(event).get("instance-id").filter(|v| v.starts_with("i-")).map(|v| InstanceId::from(v.as_str()));
    let (instance, instance_source) =
        match (annotated, parsed.instance, provider_id.and_then(instance_from_provider_id)) {
            (Some(i), _, _) => (Some(i), Some(InstanceSource::Annotation)),
            (None, Some(i), _) => (Some(i), Some(InstanceSource::Message)),
            (None, None, Some(i)) => (Some(i), Some(InstanceSource::ProviderId)),
            (None, None, None) => (None, None),
        };
    let observed_at = event
        .first_timestamp
        .as_ref()
        .map(|t| t.0)
        .or_else(|| event.event_time.as_ref().map(|t| t.0))
        .or_else(|| event.last_timestamp.as_ref().map(|t| t.0))
        .or_else(|| event.metadata.creation_timestamp.as_ref().map(|t| t.0))
        .map(|t| Timestamp::from_millis(t.as_millisecond()));

    Classification::Signal(NthSignal {
        kind: parsed.kind,
        mode,
        reason,
        node: NodeName::from(node),
        instance,
        instance_source,
        notice_time: parsed.notice_time,
        observed_at,
        detail: parsed.detail,
        subject_uid: event.involved_object.uid.clone().filter(|u| !u.is_empty()),
        reported_from: event
            .source
            .as_ref()
            .and_then(|s| s.host.clone())
            .filter(|h| !h.is_empty())
            .or_else(|| event.reporting_instance.clone().filter(|h| !h.is_empty())),
    })
}

fn annotations(event: &Event) -> BTreeMap<String, String> {
    event.metadata.annotations.clone().unwrap_or_default()
}

fn kind_of_reason(reason: &str) -> SignalKind {
    match reason {
        "RebalanceRecommendation" => SignalKind::Rebalance,
        "SpotInterruption" => SignalKind::SpotInterruption,
        "ScheduledEvent" => SignalKind::Scheduled,
        "ASGLifecycle" => SignalKind::AsgLifecycle,
        "StateChange" => SignalKind::StateChange,
        _ => SignalKind::Unknown,
    }
}

/// When the message fits neither format: IMDS mode builds the Node reference with namespace
/// `default` and no uid and fills `account-id`; queue mode fetches the Node (uid present) and
/// leaves `account-id` empty.
fn mode_from_shape(event: &Event, reason: &str) -> NthMode {
    if matches!(reason, "StateChange" | "UnknownInterruption") {
        return NthMode::QueueV2;
    }
    let has_uid = event.involved_object.uid.as_deref().is_some_and(|u| !u.is_empty());
    let account = annotations(event).get("account-id").cloned().unwrap_or_default();
    if has_uid && account.is_empty() {
        NthMode::QueueV2
    } else {
        NthMode::Imds
    }
}

struct Parsed {
    kind: SignalKind,
    instance: Option<InstanceId>,
    notice_time: Option<Timestamp>,
    detail: Option<String>,
}

impl Default for Parsed {
    fn default() -> Self {
        Parsed { kind: SignalKind::Unknown, instance: None, notice_time: None, detail: None }
    }
}

struct Pattern {
    regex: Regex,
    kind: SignalKind,
}

fn queue_patterns() -> &'static [Pattern] {
    static P: OnceLock<Vec<Pattern>> = OnceLock::new();
    P.get_or_init(|| {
        let p = |re: &str, kind| Pattern { regex: Regex::new(re).expect("valid regex"), kind };
        vec![
            p(r"^Rebalance recommendation event received\. Instance (?P<i>i-[0-9a-f]+) will be cordoned at (?P<t>.+?)\s*$", SignalKind::Rebalance),
            p(r"^Spot Interruption notice for instance (?P<i>i-[0-9a-f]+) was sent at (?P<t>.+?)\s*$", SignalKind::SpotInterruption),
            p(r"^ASG Lifecycle Termination event received\. Instance will be interrupted at (?P<t>.+?)\s*$", SignalKind::AsgLifecycle),
            p(r"^EC2 State Change event received\. Instance (?P<i>i-[0-9a-f]+) went into (?P<d>\S+) at (?P<t>.+?)\s*$", SignalKind::StateChange),
            p(r"^AWS Health scheduled change event received\. Instance (?P<i>i-[0-9a-f]+) will be interrupted at (?P<t>.+?)\s*$", SignalKind::Scheduled),
            p(r"^ASG Lifecycle Launch event received\. Instance was started at (?P<t>.+?)\s*$", SignalKind::Unknown),
        ]
    })
}

fn imds_patterns() -> &'static [Pattern] {
    static P: OnceLock<Vec<Pattern>> = OnceLock::new();
    P.get_or_init(|| {
        let p = |re: &str, kind| Pattern { regex: Regex::new(re).expect("valid regex"), kind };
        vec![
            p(
                r"^Rebalance recommendation received\. Instance will be cordoned at (?P<r>\S+)\s*$",
                SignalKind::Rebalance,
            ),
            p(r"^Spot ITN received\. Instance will be interrupted at (?P<r>\S+)\s*$", SignalKind::SpotInterruption),
            p(
                r"(?s)^(?P<d>\S+) will occur between (?P<m>.+?) and (?P<n>.+?) because (?P<why>.*?)\s*$",
                SignalKind::Scheduled,
            ),
            p(r"^AST target lifecycle state received\. Instance will be terminated\s*$", SignalKind::AsgLifecycle),
        ]
    })
}

/// Queue-mode messages; times are Go `time.Time` printed with `%s`.
fn parse_queue_message(message: &str) -> Option<Parsed> {
    queue_patterns().iter().find_map(|p| {
        let c = p.regex.captures(message)?;
        Some(Parsed {
            kind: p.kind,
            instance: c.name("i").map(|m| InstanceId::from(m.as_str())),
            notice_time: c.name("t").and_then(|t| parse_go_time(t.as_str()).ok().flatten()),
            detail: c.name("d").map(|d| d.as_str().to_string()),
        })
    })
}

/// IMDS-mode messages; times are RFC 3339, scheduled events use the IMDS layout.
fn parse_imds_message(message: &str) -> Option<Parsed> {
    imds_patterns().iter().find_map(|p| {
        let c = p.regex.captures(message)?;
        let notice_time = c
            .name("r")
            .and_then(|t| parse_rfc3339(t.as_str()).ok())
            .or_else(|| c.name("m").and_then(|t| parse_imds_time(t.as_str()).ok()));
        Some(Parsed { kind: p.kind, instance: None, notice_time, detail: c.name("d").map(|d| d.as_str().to_string()) })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::timefmt::format_rfc3339;

    fn fixture(name: &str) -> Event {
        let path = format!("{}/tests/fixtures/nth/{name}", env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    fn signal(name: &str) -> NthSignal {
        match classify_event(&fixture(name), None) {
            Classification::Signal(s) => s,
            other => panic!("{name}: {other:?}"),
        }
    }

    fn notice(s: &NthSignal) -> String {
        format_rfc3339(s.notice_time.expect("notice time"))
    }

    #[test]
    fn imds_rebalance_from_the_reference() {
        let s = signal("imds-rebalance.yaml");
        assert_eq!((s.kind, s.mode), (SignalKind::Rebalance, NthMode::Imds));
        assert_eq!(s.node.as_str(), "ip-10-0-12-34.eu-central-1.compute.internal");
        assert_eq!(s.instance, Some("i-0a1b2c3d4e5f67890".into()));
        assert_eq!(s.instance_source, Some(InstanceSource::Annotation));
        assert_eq!(notice(&s), "2024-05-14T09:12:29Z");
        assert_eq!(format_rfc3339(s.observed_at.unwrap()), "2024-05-14T09:12:31Z");
    }

    #[test]
    fn imds_spot_scheduled_and_lifecycle() {
        let s = signal("imds-spot-itn.yaml");
        assert_eq!(
            (s.kind, s.mode, notice(&s).as_str()),
            (SignalKind::SpotInterruption, NthMode::Imds, "2024-05-14T09:14:31Z")
        );
        let s = signal("imds-scheduled.yaml");
        assert_eq!(
            (s.kind, s.detail.as_deref(), notice(&s).as_str()),
            (SignalKind::Scheduled, Some("instance-stop"), "2019-01-21T09:00:43Z")
        );
        let s = signal("imds-asg-lifecycle.yaml");
        assert_eq!((s.kind, s.mode, s.notice_time), (SignalKind::AsgLifecycle, NthMode::Imds, None));
    }

    #[test]
    fn a_notice_carries_the_deadline_it_announces() {
        let deadline = |name: &str| {
            let core = signal(name).to_core(Timestamp::EPOCH).expect("an instance");
            (core.notice_deadline.map(format_rfc3339), core.deadline().map(format_rfc3339))
        };
        // IMDS says when the instance is interrupted; queue mode when EC2 sent the notice.
        let at = |t: &str| Some(t.to_string());
        let imds = signal("imds-spot-itn.yaml");
        let imds_core = NthSignal { instance: Some("i-1".into()), ..imds }.to_core(Timestamp::EPOCH).unwrap();
        assert_eq!(imds_core.deadline().map(format_rfc3339), at("2024-05-14T09:14:31Z"));
        assert_eq!(deadline("queue-v2-spot-itn.yaml"), (at("2024-05-14T09:14:29Z"), at("2024-05-14T09:14:29Z")));
        assert_eq!(deadline("queue-v1-spot-itn.yaml").1, at("2024-05-14T09:14:29Z"));
        assert_eq!(deadline("queue-v2-scheduled.yaml").1, at("2024-05-14T09:12:29Z"), "the window's start");
        assert_eq!(deadline("queue-v2-rebalance.yaml"), (None, None), "a recommendation has no deadline");
    }

    #[test]
    fn queue_v1_is_told_apart_by_its_message() {
        let cases = [
            ("queue-v1-rebalance.yaml", SignalKind::Rebalance),
            ("queue-v1-spot-itn.yaml", SignalKind::SpotInterruption),
            ("queue-v1-asg-termination.yaml", SignalKind::AsgLifecycle),
            ("queue-v1-state-change.yaml", SignalKind::StateChange),
            ("queue-v1-scheduled.yaml", SignalKind::Scheduled),
            ("queue-v1-asg-launch.yaml", SignalKind::Unknown),
        ];
        for (name, kind) in cases {
            let s = signal(name);
            assert_eq!((s.kind, s.mode), (kind, NthMode::QueueV1), "{name}");
            assert_eq!(notice(&s), "2024-05-14T09:12:29Z", "{name}");
            // Queue mode fills `instance-id` from the providerID, so the annotation wins when present.
            assert_eq!(s.instance, Some("i-0b2c3d4e5f6a78901".into()), "{name}");
        }
        assert_eq!(signal("queue-v1-state-change.yaml").detail.as_deref(), Some("stopping"));
    }

    #[test]
    fn queue_v2_reasons_with_queue_messages() {
        for (name, kind) in [
            ("queue-v2-rebalance.yaml", SignalKind::Rebalance),
            ("queue-v2-spot-itn.yaml", SignalKind::SpotInterruption),
            ("queue-v2-scheduled.yaml", SignalKind::Scheduled),
            ("queue-v2-asg-lifecycle.yaml", SignalKind::AsgLifecycle),
        ] {
            let s = signal(name);
            assert_eq!((s.kind, s.mode), (kind, NthMode::QueueV2), "{name}");
            assert_eq!(notice(&s), "2024-05-14T09:12:29Z", "{name}");
        }
        let s = signal("queue-v2-state-change.yaml");
        assert_eq!((s.kind, s.mode), (SignalKind::StateChange, NthMode::QueueV2));
        let s = signal("queue-v2-unknown.yaml");
        assert_eq!((s.kind, s.mode), (SignalKind::Unknown, NthMode::QueueV2));
    }

    #[test]
    fn instance_falls_back_to_message_then_provider_id() {
        let mut e = fixture("queue-v1-rebalance.yaml");
        e.metadata.annotations = None;
        let Classification::Signal(s) = classify_event(&e, None) else { panic!() };
        assert_eq!(
            (s.instance.unwrap().as_str(), s.instance_source),
            ("i-0b2c3d4e5f6a78901", Some(InstanceSource::Message))
        );

        let mut e = fixture("imds-rebalance.yaml");
        e.metadata.annotations = None;
        let Classification::Signal(s) = classify_event(&e, Some("aws:///eu-central-1a/i-042377dc1ee1257a1")) else {
            panic!()
        };
        assert_eq!(
            (s.instance.unwrap().as_str(), s.instance_source),
            ("i-042377dc1ee1257a1", Some(InstanceSource::ProviderId))
        );
        assert_eq!(instance_from_provider_id("gce://p/z/n"), None);
    }

    #[test]
    fn an_unsigned_notice_is_not_nths() {
        // The six-line forgery: a notice reason, no source, any node.
        let forged: Event = serde_yaml::from_str(
            "involvedObject: {kind: Node, name: ip-10-0-1-1}\nreason: SpotInterruption\nmetadata: {name: x, namespace: default}\n",
        )
        .unwrap();
        assert_eq!(
            classify_event(&forged, None),
            Classification::Ignored { because: Ignored::NotFromNth(String::new()) }
        );
        assert!(is_notice_reason("SpotInterruption") && !is_notice_reason("NodeReady"));
        let mut e = fixture("imds-rebalance.yaml");
        e.source = None;
        assert!(matches!(classify_event(&e, None), Classification::Signal(_)), "reportingComponent alone is enough");
    }

    #[test]
    fn ignored_events_say_why() {
        let why = |name: &str| match classify_event(&fixture(name), None) {
            Classification::Ignored { because } => because,
            other => panic!("{name}: {other:?}"),
        };
        assert_eq!(why("nth-cordon.yaml"), Ignored::NthAction("Cordon".into()));
        assert_eq!(why("nth-pod-eviction.yaml"), Ignored::NotAboutANode("Pod".into()));
        assert_eq!(why("kubelet-node-ready.yaml"), Ignored::NotFromNth("kubelet".into()));
        assert!(matches!(why("queue-v1-garbled.yaml"), Ignored::UnrecognisedQueueMessage(_)));
        let mut e = fixture("imds-rebalance.yaml");
        e.reason = Some("SomethingNew".into());
        assert!(matches!(classify_event(&e, None), Classification::Ignored { because: Ignored::UnknownReason(_) }));
    }
}
