//! The shipped alerts (`manifests/prometheusrule.yaml`) checked by Prometheus's own tool:
//! `promtool check rules` parses every expression and annotation template, and `promtool test
//! rules` replays series that must fire each alert and series that must not.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use serde_yaml::Value;
use spots_booster::metrics::Metrics;

use crate::support::tools;

const RULE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/manifests/prometheusrule.yaml");
const TESTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/alerts/rules-test.yaml");

fn rule() -> Value {
    serde_yaml::from_str(&std::fs::read_to_string(RULE).unwrap()).unwrap()
}

fn alerts(rule: &Value) -> Vec<&Value> {
    rule["spec"]["groups"].as_sequence().unwrap().iter().flat_map(|g| g["rules"].as_sequence().unwrap()).collect()
}

fn promtool(dir: &std::path::Path, args: &[&str]) {
    let promtool = tools::apt_tool("promtool", "prometheus");
    let out = Command::new(promtool).args(args).current_dir(dir).output().expect("run promtool");
    assert!(
        out.status.success(),
        "promtool {args:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn promtool_accepts_the_rules_and_their_templates() {
    let dir = tools::scratch_dir("alerts-check");
    std::fs::write(dir.join("rules.yaml"), serde_yaml::to_string(&rule()["spec"]).unwrap()).unwrap();
    promtool(&dir, &["check", "rules", "rules.yaml"]);
}

#[test]
fn every_alert_fires_on_its_series_and_stays_quiet_on_the_others() {
    let dir = tools::scratch_dir("alerts-test");
    let mut spec = rule()["spec"].clone();
    // The unit tests compare labels; the annotations' templates are `check rules`'s job, and
    // repeating every rendered sentence here would only test the copy.
    for group in spec["groups"].as_sequence_mut().unwrap() {
        for rule in group["rules"].as_sequence_mut().unwrap() {
            rule.as_mapping_mut().unwrap().remove("annotations");
        }
    }
    std::fs::write(dir.join("rules.yaml"), serde_yaml::to_string(&spec).unwrap()).unwrap();
    std::fs::copy(TESTS, dir.join("rules-test.yaml")).unwrap();
    promtool(&dir, &["test", "rules", "rules-test.yaml"]);
}

#[test]
fn every_alert_has_a_case_that_fires_and_one_that_does_not() {
    let tests: Value = serde_yaml::from_str(&std::fs::read_to_string(TESTS).unwrap()).unwrap();
    let mut cases: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for group in tests["tests"].as_sequence().unwrap() {
        for case in group["alert_rule_test"].as_sequence().unwrap() {
            let entry = cases.entry(case["alertname"].as_str().unwrap().to_string()).or_default();
            if case["exp_alerts"].as_sequence().unwrap().is_empty() {
                entry.1 += 1;
            } else {
                entry.0 += 1;
            }
        }
    }
    let rule = rule();
    let names: BTreeSet<String> = alerts(&rule).iter().map(|a| a["alert"].as_str().unwrap().to_string()).collect();
    assert_eq!(names.len(), 17);
    for name in &names {
        let (fires, quiet) = cases.get(name).copied().unwrap_or_default();
        assert!(fires > 0, "{name} has no case where it fires");
        assert!(quiet > 0, "{name} has no case where it stays quiet");
    }
    assert!(cases.keys().all(|c| names.contains(c)), "a test names an alert that does not exist: {cases:?}");
}

#[test]
fn alerts_query_only_metrics_the_binary_exports_and_carry_a_severity() {
    let exported: BTreeSet<String> = Metrics::new().names().into_iter().collect();
    let metric = regex::Regex::new(r"spots_booster_[a-z_]+").unwrap();
    let rule = rule();
    for alert in alerts(&rule) {
        let name = alert["alert"].as_str().unwrap();
        for m in metric.find_iter(alert["expr"].as_str().unwrap()) {
            assert!(exported.contains(m.as_str()), "{name} queries {}, which is not exported", m.as_str());
        }
        let severity = alert["labels"]["severity"].as_str().unwrap_or_default();
        assert!(["warning", "critical"].contains(&severity), "{name}: severity {severity:?}");
        assert!(alert["annotations"]["summary"].as_str().is_some_and(|s| !s.is_empty()), "{name}: no summary");
    }
}
