//! The binary as users run it: exit codes, standard input, and messages that say what is wrong.

use std::io::Write;
use std::process::{Command, Output, Stdio};

fn booster(args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_spots-booster"))
        .args(args)
        .env("SPOTS_BOOSTER_CLUSTER_NAME", "cli-test")
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary runs");
    if let Some(text) = stdin {
        child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    }
    drop(child.stdin.take());
    child.wait_with_output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn inspect_ca_status_reads_a_file_and_prints_a_table() {
    let out = booster(&["inspect", "ca-status", "--file", "tests/fixtures/ca-status/yaml-1.30.yaml"], None);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("YAML (CA >= 1.30)"), "{stdout}");
    assert!(stdout.contains("eks-nodes-app-spot-0ec22d5a-1d53-aa90-9a86-46470ecca2af"), "{stdout}");
}

#[test]
fn inspect_scaling_activities_says_which_launches_fall_back() {
    let file = "tests/fixtures/scaling-activities/spot-no-capacity.json";
    let out = booster(&["inspect", "scaling-activities", "--file", file], None);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("no capacity: falls back") && stdout.contains("InsufficientInstanceCapacity"), "{stdout}");
    let out = booster(&["inspect", "scaling-activities"], Some("{\"Activities\": 3}"));
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("not the output of aws autoscaling describe-scaling-activities"));
}

#[test]
fn inspect_ca_status_reads_stdin_and_prints_json() {
    let status = std::fs::read_to_string("tests/fixtures/ca-status/legacy-1.24.txt").unwrap();
    let out = booster(&["inspect", "ca-status", "--output", "json"], Some(&status));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["status"]["nodeGroups"][0]["maxSize"], 20);
}

#[test]
fn inspect_ca_status_fails_on_garbage_with_the_line() {
    let garbage = "Cluster-autoscaler status at 2024-03-11 08:41:17 +0000 UTC:\nCluster-wide:\n  ¿what is this?\n";
    let out = booster(&["inspect", "ca-status"], Some(garbage));
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(stderr.contains("line 3"), "{stderr}");
}

#[test]
fn inspect_nth_event_classifies_and_explains() {
    let out = booster(&["inspect", "nth-event", "--file", "tests/fixtures/nth/queue-v1-rebalance.yaml"], None);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("rebalance") && stdout.contains("queue-v1"), "{stdout}");

    let out =
        booster(&["inspect", "nth-event", "--file", "tests/fixtures/nth/nth-cordon.yaml", "--output", "json"], None);
    assert!(out.status.success(), "an ignored event is a success");
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json[0]["result"], "ignored");
    assert_eq!(json[0]["because"]["kind"], "nth-action");
}

#[test]
fn every_output_format_of_inspect_and_simulate() {
    let event = "tests/fixtures/nth/queue-v2-asg-lifecycle.yaml";
    let out = booster(&["inspect", "nth-event", "--file", event, "-o", "yaml"], None);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let yaml: serde_yaml::Value = serde_yaml::from_slice(&out.stdout).unwrap();
    assert_eq!(yaml[0]["acted_on"], serde_yaml::Value::Bool(false), "{}", text(&out.stdout));
    let out = booster(&["inspect", "nth-event", "--file", event], None);
    assert!(text(&out.stdout).contains("ignored"), "{}", text(&out.stdout));
    let out = booster(&["inspect", "nth-event", "--file", event, "-o", "wide"], None);
    assert!(text(&out.stdout).contains("ACTED ON WHEN"), "{}", text(&out.stdout));

    let scenario = "examples/scenarios/rebalance-wave.yaml";
    let table = booster(&["simulate", "--scenario", scenario, "--baseline", "nth-ca"], None);
    assert!(table.status.success(), "{}", text(&table.stderr));
    let table = text(&table.stdout);
    assert!(table.lines().all(|l| l.chars().count() <= 120), "{table}");
    let alias = booster(&["simulate", "--scenario", scenario, "--baseline", "nth-ca", "--output", "text"], None);
    assert_eq!(text(&alias.stdout), table, "`text` is the old name of `table`");
    let wide = text(&booster(&["simulate", "--scenario", scenario, "-o", "wide"], None).stdout);
    assert!(!wide.contains('…') && wide.lines().any(|l| l.chars().count() > 120), "{wide}");
    let json = booster(&["simulate", "--scenario", scenario, "-o", "json"], None);
    let yaml = booster(&["simulate", "--scenario", scenario, "-o", "yaml"], None);
    let json: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    let yaml: serde_json::Value = serde_yaml::from_slice(&yaml.stdout).unwrap();
    assert_eq!(json, yaml);
}

#[test]
fn inspect_nth_event_rejects_what_is_not_an_event() {
    let out = booster(&["inspect", "nth-event"], Some("kind: Pod\nmetadata: {name: x}\n"));
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("document 1"), "{}", text(&out.stderr));
    let out = booster(&["inspect", "nth-event", "--file", "no/such/file.yaml"], None);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("no/such/file.yaml"), "{}", text(&out.stderr));
}

#[test]
fn simulate_prints_both_runs_side_by_side() {
    let out =
        booster(&["simulate", "--scenario", "examples/scenarios/single-rebalance.yaml", "--baseline", "nth-ca"], None);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("== with spots-booster ==") && stdout.contains("== baseline"), "{stdout}");
    assert!(stdout.contains("METRIC") && stdout.contains("NTH+CA") && stdout.contains("RATIO"), "{stdout}");
}

#[test]
fn simulate_rejects_an_invalid_scenario_naming_the_field() {
    let dir = std::env::temp_dir().join(format!("spots-booster-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("bad.yaml");
    std::fs::write(
        &path,
        "duration: 10m\ngroups:\n  - { name: a, min: 1, max: 2, desired: 5, node: { cpu: \"4\", memory: 16Gi }, boot: 90s }\n",
    )
    .unwrap();
    let out = booster(&["simulate", "--scenario", path.to_str().unwrap()], None);
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(stderr.contains("groups[0].desired"), "{stderr}");
}

#[test]
fn run_fails_fast_and_names_what_is_wrong() {
    let dir = std::env::temp_dir().join(format!("sb-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();

    let out = booster(&["run", "--connection-mode", "kubectl", "--kubeconfig", "/nonexistent/kubeconfig"], None);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("cannot use kubeconfig /nonexistent/kubeconfig"), "{stderr}");

    // A kubeconfig whose server refuses connections.
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters:\n- name: k\n  cluster:\n    server: http://127.0.0.1:1\n\
         contexts:\n- name: c\n  context:\n    cluster: k\n    user: u\nusers:\n- name: u\n  user:\n    token: t\n",
    )
    .unwrap();
    let k = kubeconfig.to_str().unwrap();
    let out = booster(&["run", "--connection-mode", "kubectl", "--kubeconfig", k], None);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("the API server at http://127.0.0.1:1/ is unreachable"), "{stderr}");

    // Logs into a pipe (a pod's log, a file) carry no colour codes.
    let out = booster(&["run", "--connection-mode", "kubectl", "--kubeconfig", k, "--log-level", "debug"], None);
    let stderr = text(&out.stderr);
    assert!(stderr.contains(" DEBUG "), "text log lines were written: {stderr}");
    assert!(!stderr.contains('\x1b'), "no ANSI escapes off a terminal: {stderr:?}");

    // Bad flags are caught before any connection.
    let out = booster(
        &["run", "--connection-mode", "kubectl", "--kubeconfig", k, "--leader-elect-renew-deadline", "20s"],
        None,
    );
    let stderr = text(&out.stderr);
    assert!(stderr.contains("--leader-elect-renew-deadline must be shorter"), "{stderr}");
    let out = booster(&["run", "--connection-mode", "sideways"], None);
    assert_eq!(out.status.code(), Some(2), "clap's usage error");
    let out = booster(&["run", "--cluster-name", "prod/euw1"], None);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("\"prod/euw1\" is not a cluster name"), "{}", text(&out.stderr));
    // No cluster, no run: which groups it may touch is never guessed.
    let out = Command::new(env!("CARGO_BIN_EXE_spots-booster"))
        .args(["run", "--connection-mode", "kubectl"])
        .env_remove("SPOTS_BOOSTER_CLUSTER_NAME")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("--cluster-name"), "{}", text(&out.stderr));
    let out = booster(&["run", "--help"], None);
    let help = text(&out.stdout);
    for flag in
        ["--namespace", "--configmap", "--events-namespace", "--metrics-bind-address", "--leader-elect", "--dry-run"]
    {
        assert!(help.contains(flag), "{flag} in --help");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn every_flag_of_run_is_documented() {
    let help = text(&booster(&["run", "--help"], None).stdout);
    // The flag tables are in operations.md; the AWS flags with the adapters in design.md.
    let docs = concat!(env!("CARGO_MANIFEST_DIR"), "/docs");
    let readme =
        ["operations.md", "design.md"].map(|f| std::fs::read_to_string(format!("{docs}/{f}")).unwrap()).join("\n");
    // Flags are the lines that start with one (descriptions also mention CA's own flags).
    let flag = regex::Regex::new(r"^\s+(?:-[a-zA-Z], )?(--[a-z][a-z0-9-]+)").unwrap();
    let mut checked = 0;
    let flags = help.lines().filter_map(|l| flag.captures(l)).map(|c| c.get(1).unwrap().as_str());
    for f in flags.filter(|f| !["--help", "--version"].contains(f)) {
        // The election timing flags share one row.
        let row = f.strip_prefix("--leader-elect-").map(|rest| format!("`-{rest}`"));
        assert!(
            readme.contains(&format!("`{f}`")) || row.is_some_and(|r| readme.contains(&r)),
            "{f} is in `run --help` but not in docs/operations.md or docs/design.md"
        );
        checked += 1;
    }
    assert!(checked > 30, "{checked} flags");
}

#[test]
fn the_state_namespace_defaults_to_the_pods_own() {
    let help = |pod_namespace: Option<&str>| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_spots-booster"));
        command.args(["run", "--help"]).env_remove("POD_NAMESPACE").env_remove("SPOTS_BOOSTER_STATE_NAMESPACE");
        if let Some(ns) = pod_namespace {
            command.env("POD_NAMESPACE", ns);
        }
        let out = command.output().expect("the binary runs");
        let help = text(&out.stdout);
        let start = help.find("--state-namespace <").expect("the flag is listed");
        help[start..].split("\n      --").next().unwrap_or_default().to_string()
    };
    assert!(help(Some("team-a")).contains("[default: team-a]"), "{}", help(Some("team-a")));
    assert!(help(None).contains("[default: kube-system]"), "{}", help(None));
}
