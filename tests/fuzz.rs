//! Bounded fuzzing of every parser that reads outside input: the CA status, NTH Events, Pod and
//! Node conversion, durations, quantities and times, and scenarios. Each target mutates real
//! inputs (the fixtures and example scenarios) with hostile fragments (huge numbers, deep
//! nesting, odd suffixes, far years) and asserts only what must always hold: no panic, and a
//! refusal is an error value. `SPOTS_BOOSTER_FUZZ_CASES` sets the cases per target (CI runs the
//! default); failures print the shrunk input.

use std::path::Path;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use spots_booster::k8s::ca_status::parse_ca_status;
use spots_booster::k8s::convert::{node_from_kube, pod_from_kube};
use spots_booster::k8s::nth::classify_event;
use spots_booster::simulate::scenario::parse_scenario;
use spots_booster::timefmt::{parse_go_time, parse_imds_time, parse_rfc3339};
use spots_booster::units::{parse_cpu_millis, parse_duration, parse_memory_bytes};

fn cases() -> u32 {
    std::env::var("SPOTS_BOOSTER_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(20_000)
}

fn runner() -> TestRunner {
    TestRunner::new(Config { cases: cases(), failure_persistence: None, ..Config::default() })
}

fn files(dir: &str) -> Vec<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let mut paths: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    paths.sort();
    paths.into_iter().map(|p| std::fs::read_to_string(p).unwrap()).collect()
}

/// Pieces an attacker or a careless neighbour would try.
fn fragment() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("99999999999999999999999".to_string()),
        Just("18446744073709551616".to_string()),
        Just("-1".to_string()),
        Just("1e308".to_string()),
        Just("300000000-01-01T00:00:00Z".to_string()),
        Just("9999-12-31T23:59:59.999999999Z".to_string()),
        Just("10P".to_string()),
        Just("8Ei".to_string()),
        Just("0.000000001m".to_string()),
        Just("h".to_string()),
        "[\\[{]{1,64}".prop_map(|s| s),
        "[0-9]{1,30}(ms|s|m|h|d|Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E|m|n|u)?",
        "[ -~]{0,24}",
        any::<String>().prop_map(|s| s.chars().take(24).collect()),
    ]
}

/// `base` with a stretch replaced by a fragment.
fn mutated(bases: Vec<String>) -> impl Strategy<Value = String> {
    (prop::sample::select(bases), any::<prop::sample::Index>(), 0usize..40, fragment()).prop_map(
        |(base, at, len, piece)| {
            let chars: Vec<char> = base.chars().collect();
            let start = at.index(chars.len() + 1);
            let end = (start + len).min(chars.len());
            let mut out: String = chars[..start].iter().collect();
            out.push_str(&piece);
            out.extend(&chars[end..]);
            out
        },
    )
}

fn fuzz(strategy: impl Strategy<Value = String>, target: impl Fn(&str)) {
    runner()
        .run(&strategy, |input| {
            target(&input);
            Ok(())
        })
        .unwrap();
}

#[test]
fn ca_status_parser() {
    fuzz(prop_oneof![mutated(files("tests/fixtures/ca-status")), fragment()], |text| {
        let _ = parse_ca_status(text);
    });
}

#[test]
fn nth_event_classifier() {
    fuzz(mutated(files("tests/fixtures/nth")), |text| {
        // What the API server would refuse to store never reaches the classifier.
        if let Ok(event) = serde_yaml::from_str(text) {
            let _ = classify_event(&event, Some("aws:///eu-central-1a/i-0123456789abcdef0"));
        }
    });
}

fn pod_and_node(quantity: &str, priority: i64, time: &str) -> (serde_json::Value, serde_json::Value) {
    let pod = serde_json::json!({
        "metadata": {"name": "p", "namespace": "n", "uid": "u", "creationTimestamp": "2024-01-01T00:00:00Z"},
        "spec": {"nodeName": "n1", "priority": priority,
                 "containers": [{"name": "a", "resources": {"requests": {"cpu": quantity, "memory": quantity}}},
                                {"name": "b", "resources": {"requests": {"cpu": quantity, "memory": quantity}}}],
                 "initContainers": [{"name": "i", "resources": {"requests": {"cpu": quantity}}}],
                 "overhead": {"cpu": quantity, "memory": quantity}}
    });
    let node = serde_json::json!({
        "metadata": {"name": "n1", "creationTimestamp": "2024-01-01T00:00:00Z",
                     "annotations": {"spots-booster.io/rotate": time}},
        "spec": {"providerID": format!("aws:///zone/{quantity}"), "unschedulable": true,
                 "taints": [{"key": "aws-node-termination-handler/spot-itn", "value": quantity,
                             "effect": "NoSchedule", "timeAdded": "2024-01-01T00:00:00Z"}]},
        "status": {"allocatable": {"cpu": quantity, "memory": quantity, "pods": quantity},
                   "conditions": [{"type": "Ready", "status": "True"}]}
    });
    (pod, node)
}

#[test]
fn pod_and_node_conversion() {
    let strategy = (fragment(), any::<i32>(), fragment());
    runner()
        .run(&strategy, |(quantity, priority, time)| {
            let (pod, node) = pod_and_node(&quantity, i64::from(priority), &time);
            if let Ok(pod) = serde_json::from_value(pod) {
                let _ = pod_from_kube(&pod);
            }
            if let Ok(node) = serde_json::from_value(node) {
                let _ = node_from_kube(&node);
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn durations_quantities_and_times() {
    fuzz(fragment(), |text| {
        let _ = parse_duration(text);
        let _ = parse_cpu_millis(text);
        let _ = parse_memory_bytes(text);
        let _ = parse_rfc3339(text);
        let _ = parse_go_time(text);
        let _ = parse_imds_time(text);
    });
}

#[test]
fn scenario_parser() {
    fuzz(mutated(files("examples/scenarios")), |text| {
        let _ = parse_scenario(text);
    });
}

/// The inputs that once panicked or hung, each now a named refusal or a saturated value.
#[test]
fn the_inputs_that_once_broke_the_daemon_are_refused_by_name() {
    let year = parse_rfc3339("300000000-01-01T00:00:00Z").unwrap_err().to_string();
    assert!(year.contains("300000000"), "{year}");
    let long = parse_duration("99999999999999999999999h").unwrap_err().to_string();
    assert!(long.contains("99999999999999999999999h"), "{long}");
    assert_eq!(parse_cpu_millis("10000000000000000").map(|m| m > 0), Ok(true), "saturates, never overflows");

    let (pod, _) = pod_and_node("10000000000000000", 0, "");
    let (_, p) = pod_from_kube(&serde_json::from_value(pod).unwrap()).unwrap();
    assert_eq!(p.requests.cpu_millis, u64::MAX, "two huge containers saturate");

    let deep = format!("nodeGroups: {}", "[".repeat(200_000));
    let err = parse_ca_status(&deep).unwrap_err().to_string();
    assert!(err.contains("nested"), "{err}");

    let scenario = files("examples/scenarios")[0].replace("replicas: ", "replicas: 500000000 #");
    let _ = parse_scenario(&scenario);
}
