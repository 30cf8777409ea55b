//! The Helm chart (charts/spots-booster): `helm lint --strict` passes, its default render is the
//! kustomize base object by object, its schema refuses misspelled and mistyped values and names
//! every flag of `spots-booster run`, the arguments it renders are ones the binary parses, and the
//! values that move objects (namespaces, names, opt-in monitoring) move them consistently.
//!
//! helm and kubectl are installed on first use by `scripts/install-helm.sh`.

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use clap::{CommandFactory, Parser};
use serde::Deserialize;
use serde_json::{json, Value};
use spots_booster::config::Cli;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// Flags of `run` the chart sets itself rather than through `config`: the kubeconfig ones have no
/// meaning in a pod, the identity is the pod's name, the state lives in the release's namespace
/// the listeners' addresses follow `metrics.port` and `probes.port`, and the cluster is the
/// top-level `clusterName` (the IAM policy needs it too).
const SET_BY_THE_CHART: [&str; 7] = [
    "kubeconfig",
    "context",
    "identity",
    "state-namespace",
    "metrics-bind-address",
    "probe-bind-address",
    "cluster-name",
];

/// Labels and annotations only Helm adds: its bookkeeping, not a difference between the installs.
const HELM_ONLY: [&str; 5] = [
    "app.kubernetes.io/instance",
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/version",
    "helm.sh/chart",
    "helm.sh/resource-policy",
];

fn chart() -> PathBuf {
    Path::new(ROOT).join("charts/spots-booster")
}

fn tool(name: &str) -> &'static Path {
    static HELM: OnceLock<PathBuf> = OnceLock::new();
    static KUBECTL: OnceLock<PathBuf> = OnceLock::new();
    let cell = if name == "helm" { &HELM } else { &KUBECTL };
    cell.get_or_init(|| support::tools::install("install-helm.sh", &[name], "helm.lock"))
}

/// Runs `tool args`: its stdout, or its stderr as the error.
fn run(tool_name: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new(tool(tool_name)).args(args).output().unwrap_or_else(|e| panic!("run {tool_name}: {e}"));
    if out.status.success() {
        Ok(String::from_utf8(out.stdout).expect("utf-8"))
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

fn documents(text: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(text)
        .map(|doc| Value::deserialize(doc).expect("YAML document"))
        .filter(|v| !v.is_null())
        .collect()
}

/// `helm template` of the chart with `sets` (`--set-json` pairs), CRDs included.
fn render(release: &str, sets: &[(&str, Value)]) -> Result<Vec<Value>, String> {
    let chart = chart();
    let mut args = vec![
        "template".to_string(),
        release.into(),
        chart.display().to_string(),
        "--namespace".into(),
        "spots-booster".into(),
    ];
    args.push("--include-crds".into());
    // Required; the kustomize base's placeholder unless a test names another.
    if !sets.iter().any(|(key, _)| *key == "clusterName") {
        args.extend(["--set".into(), "clusterName=CLUSTER_NAME".into()]);
    }
    for (key, value) in sets {
        args.push("--set-json".into());
        args.push(format!("{key}={value}"));
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    run("helm", &args).map(|text| documents(&text))
}

fn render_ok(sets: &[(&str, Value)]) -> Vec<Value> {
    render("spots-booster", sets).unwrap_or_else(|e| panic!("helm template {sets:?}: {e}"))
}

type Key = (String, String, String);

fn key(o: &Value) -> Key {
    let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
    (s(&o["kind"]), s(&o["metadata"]["namespace"]), s(&o["metadata"]["name"]))
}

/// The object without Helm's bookkeeping labels and annotations (and maps left empty by that).
fn without_helm(mut o: Value) -> Value {
    let metadata = o["metadata"].as_object_mut().expect("metadata");
    for field in ["labels", "annotations"] {
        if let Some(map) = metadata.get_mut(field).and_then(Value::as_object_mut) {
            map.retain(|k, _| !HELM_ONLY.contains(&k.as_str()));
            if map.is_empty() {
                metadata.remove(field);
            }
        }
    }
    o
}

fn by_key(objects: Vec<Value>) -> BTreeMap<Key, Value> {
    let mut map = BTreeMap::new();
    for o in objects {
        assert!(map.insert(key(&o), o.clone()).is_none(), "rendered twice: {:?}", key(&o));
    }
    map
}

fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} in {:?}", objects.iter().map(key).collect::<Vec<_>>()))
}

fn args(objects: &[Value]) -> Vec<String> {
    let deployment = objects.iter().find(|o| o["kind"] == "Deployment").expect("a Deployment");
    deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .expect("args")
        .iter()
        .map(|a| a.as_str().expect("string arg").to_string())
        .collect()
}

fn schema() -> Value {
    serde_json::from_str(&std::fs::read_to_string(chart().join("values.schema.json")).unwrap()).unwrap()
}

#[test]
fn helm_lint_strict_passes() {
    let chart = chart();
    let lint = |sets: &[&str]| {
        let mut args = vec!["lint", "--strict"];
        args.extend(sets);
        let chart = chart.display().to_string();
        args.push(&chart);
        run("helm", &args)
    };
    let out = lint(&["--set", "clusterName=prod-euw1"]).unwrap_or_else(|e| panic!("{e}"));
    assert!(out.contains("0 chart(s) failed"), "{out}");
    let refused = render("spots-booster", &[("clusterName", json!(""))]).unwrap_err();
    assert!(refused.contains("clusterName: set your cluster's name"), "the cluster is never guessed: {refused}");
    let refused = render("spots-booster", &[("clusterName", json!("prod/euw1"))]).unwrap_err();
    assert!(refused.contains("clusterName"), "{refused}");
}

#[test]
fn the_default_render_is_the_kustomize_base_object_by_object() {
    let manifests = Path::new(ROOT).join("manifests");
    // The comparison is with what kustomize builds: if the base ever gains patches or
    // generators, they are applied here too.
    let kustomized = run("kubectl", &["kustomize", &manifests.display().to_string()]).unwrap_or_else(|e| panic!("{e}"));
    let mut base = by_key(documents(&kustomized));
    // The release's namespace belongs to Helm (`--create-namespace`), not to the chart.
    let release_namespace = base.remove(&("Namespace".into(), String::new(), "spots-booster".into()));
    assert!(release_namespace.is_some(), "the base creates its namespace");
    let chart = by_key(render_ok(&[]).into_iter().map(without_helm).collect());
    assert_eq!(
        base.keys().collect::<Vec<_>>(),
        chart.keys().collect::<Vec<_>>(),
        "the same objects (kind, namespace, name)"
    );
    for (key, object) in &base {
        assert_eq!(object, &chart[key], "{key:?} differs between the kustomize base and the chart's default render");
    }
}

#[test]
fn the_chart_ships_the_same_alerts_and_dashboard_as_the_repository() {
    let rules: Value =
        serde_yaml::from_str(&std::fs::read_to_string(chart().join("files/prometheus-rules.yaml")).unwrap()).unwrap();
    let manifest = documents(&std::fs::read_to_string(Path::new(ROOT).join("manifests/prometheusrule.yaml")).unwrap());
    assert_eq!(rules, manifest[0]["spec"], "files/prometheus-rules.yaml is manifests/prometheusrule.yaml's spec");
    let read_json = |p: PathBuf| -> Value { serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap() };
    assert_eq!(
        read_json(chart().join("files/dashboard.json")),
        read_json(Path::new(ROOT).join("dashboards/spots-booster.json")),
        "files/dashboard.json is dashboards/spots-booster.json"
    );

    let objects = render_ok(&[
        ("prometheusRule.enabled", json!(true)),
        ("prometheusRule.labels", json!({"release": "kube-prometheus"})),
        ("serviceMonitor.enabled", json!(true)),
        ("serviceMonitor.interval", json!("15s")),
        ("dashboard.enabled", json!(true)),
        ("dashboard.namespace", json!("monitoring")),
    ]);
    let rule = find(&objects, "PrometheusRule", "spots-booster");
    assert_eq!(rule["spec"], manifest[0]["spec"], "the alerts' Prometheus templates are not expanded by Helm");
    assert_eq!(rule["metadata"]["labels"]["release"], "kube-prometheus");
    let monitor = find(&objects, "ServiceMonitor", "spots-booster");
    assert_eq!(monitor["spec"]["endpoints"][0], json!({"port": "metrics", "interval": "15s"}));
    assert_eq!(monitor["spec"]["selector"]["matchLabels"], json!({"app.kubernetes.io/name": "spots-booster"}));
    let dashboard = find(&objects, "ConfigMap", "spots-booster-dashboard");
    assert_eq!(dashboard["metadata"]["namespace"], "monitoring");
    assert_eq!(dashboard["metadata"]["labels"]["grafana_dashboard"], "1", "what Grafana's sidecar looks for");
    let shipped: Value = serde_json::from_str(dashboard["data"]["spots-booster.json"].as_str().unwrap()).unwrap();
    assert_eq!(shipped, read_json(Path::new(ROOT).join("dashboards/spots-booster.json")));
    for off in render_ok(&[]) {
        assert!(
            !["PrometheusRule", "ServiceMonitor", "ConfigMap"].contains(&off["kind"].as_str().unwrap()),
            "opt-in: {off}"
        );
    }
}

/// Builds the kustomize base with `component` in an overlay as a user writes one, and checks it is
/// the chart rendered with `switch` on, object by object; the kinds it holds.
fn assert_the_component_is_the_chart_with(component: &str, switch: &str) -> BTreeSet<String> {
    // Kustomize refuses an overlay inside the base it builds on.
    let overlay = Path::new(ROOT).join(format!("target/{component}-overlay"));
    std::fs::create_dir_all(&overlay).unwrap();
    let kustomization = format!(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n\
         resources:\n  - ../../manifests\ncomponents:\n  - ../../manifests/components/{component}\n"
    );
    std::fs::write(overlay.join("kustomization.yaml"), kustomization).unwrap();
    let kustomized = run("kubectl", &["kustomize", &overlay.display().to_string()]).unwrap_or_else(|e| panic!("{e}"));
    let mut overlay = by_key(documents(&kustomized));
    // The release's namespace belongs to Helm (`--create-namespace`), not to the chart.
    overlay.remove(&("Namespace".into(), String::new(), "spots-booster".into()));
    let chart = by_key(render_ok(&[(switch, json!(true))]).into_iter().map(without_helm).collect());
    assert_eq!(overlay.keys().collect::<Vec<_>>(), chart.keys().collect::<Vec<_>>(), "the same objects");
    for (key, object) in &overlay {
        assert_eq!(object, &chart[key], "{key:?} differs between the kustomize overlay with {component} and the chart");
    }
    overlay.keys().map(|(kind, _, _)| kind.clone()).collect()
}

/// The role's policies as the chart renders them into its ConfigMap, one per file.
fn rendered_iam_policies(sets: &[(&str, Value)]) -> Vec<String> {
    let mut sets = sets.to_vec();
    sets.push(("iamPolicy.enabled", json!(true)));
    sets.push(("iamPolicy.region", json!(crate::iam_policy::REGION)));
    sets.push(("iamPolicy.accountId", json!(crate::iam_policy::ACCOUNT)));
    sets.push(("iamPolicy.vpcId", json!(crate::iam_policy::VPC)));
    let objects = render_ok(&sets);
    let config_map = objects
        .iter()
        .find(|o| o["kind"] == "ConfigMap" && o["metadata"]["name"] == "spots-booster-iam-policy")
        .expect("the chart renders the IAM policies");
    crate::iam_policy::FILES.iter().map(|f| config_map["data"][f].as_str().expect("each file").to_string()).collect()
}

#[test]
fn the_chart_renders_the_repository_s_iam_policies_for_its_cluster_and_they_reach_only_it() {
    use crate::support::iam::Policy;
    let rendered = rendered_iam_policies(&[("clusterName", json!("blue"))]);
    for (file, text) in crate::iam_policy::FILES.iter().zip(&rendered) {
        let repository = std::fs::read_to_string(Path::new(ROOT).join("manifests").join(file)).unwrap();
        let ours: Value = serde_json::from_str(&crate::iam_policy::filled(&repository, "blue")).unwrap();
        assert_eq!(serde_json::from_str::<Value>(text).unwrap(), ours, "{file}");
        let copy = std::fs::read_to_string(chart().join("files").join(file)).unwrap();
        assert_eq!(copy, repository, "the chart's files/{file} is manifests/{file}");
    }
    let policy = Policy::union(&rendered.iter().map(|t| Policy::parse(t)).collect::<Vec<_>>());
    crate::iam_policy::assert_scoped(&policy, "blue", "green", true, &[]);
    assert!(render("spots-booster", &[("iamPolicy.enabled", json!(true)), ("clusterName", json!(""))]).is_err());
    // Without where the cluster runs, nothing is rendered: a wildcard would reach a same-name
    // cluster in another region or VPC.
    for missing in ["iamPolicy.region", "iamPolicy.accountId", "iamPolicy.vpcId"] {
        let mut sets = vec![
            ("iamPolicy.enabled", json!(true)),
            ("clusterName", json!("blue")),
            ("iamPolicy.region", json!("eu-west-1")),
            ("iamPolicy.accountId", json!("111122223333")),
            ("iamPolicy.vpcId", json!("vpc-0a1b2c3d")),
        ];
        sets.retain(|(k, _)| *k != missing);
        assert!(render("spots-booster", &sets).is_err(), "rendered without {missing}");
    }
}

#[test]
fn one_role_shared_through_pod_identity_lets_each_cluster_reach_only_its_own_resources() {
    use crate::support::iam::{Decision, Policy, Request, Resource};
    let rendered =
        rendered_iam_policies(&[("clusterName", json!("blue")), ("iamPolicy.sharedAcrossClusters", json!(true))]);
    assert!(rendered.iter().all(|t| !t.contains("blue")), "no cluster named: the session tag names it");
    let policy = Policy::union(&rendered.iter().map(|t| Policy::parse(t)).collect::<Vec<_>>());
    // The same role, its sessions tagged by EKS with the pod's cluster; groups named only in a
    // tag key are out of its reach (documented: such a cluster needs a role of its own).
    use crate::iam_policy::{as_principal, session_of, REGION};
    crate::iam_policy::assert_scoped(&policy, "blue", "green", false, &as_principal(&session_of("blue", REGION)));
    crate::iam_policy::assert_scoped(&policy, "green", "blue", false, &as_principal(&session_of("green", REGION)));
    // A cluster in another region associated with the same role reaches nothing: the role is
    // pinned to one region.
    let twin = session_of("blue", "us-east-1");
    let group = Resource::new(
        format!(
            "arn:aws:autoscaling:us-east-1:{}:autoScalingGroup:x:autoScalingGroupName/g",
            crate::iam_policy::ACCOUNT
        ),
        [("instancegroups.keikoproj.io/ClusterName".to_string(), "blue".to_string())].into(),
    );
    let write = Request::new("autoscaling:SetDesiredCapacity", vec![group]).made_by(&as_principal(&twin));
    assert_ne!(policy.decide(&write), Decision::Allowed);
    // Without Pod Identity's session tag (IRSA), nothing is written at all.
    let group = Resource::new(
        format!(
            "arn:aws:autoscaling:eu-west-1:{}:autoScalingGroup:x:autoScalingGroupName/g",
            crate::iam_policy::ACCOUNT
        ),
        [("instancegroups.keikoproj.io/ClusterName".to_string(), "blue".to_string())].into(),
    );
    let write = Request::new("autoscaling:SetDesiredCapacity", vec![group]);
    assert_eq!(policy.decide(&write), Decision::ImplicitlyDenied);
}

#[test]
fn the_node_vouching_policy_is_the_kustomize_components_named_for_the_release() {
    let read = |p: PathBuf| std::fs::read_to_string(p).unwrap();
    assert_eq!(
        read(chart().join("files/node-vouching-policy.yaml")),
        read(Path::new(ROOT).join("manifests/components/node-vouching/node-vouching-policy.yaml")),
        "files/node-vouching-policy.yaml is the kustomize component's policy"
    );
    let kinds = assert_the_component_is_the_chart_with("node-vouching", "nodeVouchingPolicy.enabled");
    assert!(kinds.contains("ValidatingAdmissionPolicy"), "{kinds:?}");

    let objects = render(
        "prod",
        &[
            ("nodeVouchingPolicy.enabled", json!(true)),
            ("nodeVouchingPolicy.allowedWriters", json!(["system:serviceaccount:nth:handler"])),
        ],
    )
    .unwrap();
    let policy = find(&objects, "ValidatingAdmissionPolicy", "prod-spots-booster-node-vouching");
    let allowed = policy["spec"]["variables"].as_array().unwrap().iter().find(|v| v["name"] == "allowed").unwrap();
    assert_eq!(
        allowed["expression"],
        "['system:serviceaccount:spots-booster:prod-spots-booster', 'system:serviceaccount:nth:handler']",
        "the release's own ServiceAccount, whatever its name"
    );
    assert_eq!(policy["spec"]["matchConstraints"]["resourceRules"][0]["resources"], json!(["nodes", "nodes/status"]));
    let binding = find(&objects, "ValidatingAdmissionPolicyBinding", "prod-spots-booster-node-vouching");
    assert_eq!(binding["spec"]["policyName"], "prod-spots-booster-node-vouching");
    assert!(render_ok(&[]).iter().all(|o| o["kind"] != "ValidatingAdmissionPolicy"), "opt-in");
    let err = render("spots-booster", &[("nodeVouchingPolicy.allowedWriters", json!(["a'b"]))]).unwrap_err();
    assert!(err.contains("allowedWriters"), "a quote would break the expression: {err}");
}

#[test]
fn the_network_policy_admits_only_its_scrapers_to_metrics_and_no_pod_to_the_probes() {
    let kinds = assert_the_component_is_the_chart_with("network-policy", "networkPolicy.enabled");
    assert!(kinds.contains("NetworkPolicy"), "{kinds:?}");
    let scrapers = json!([{"namespaceSelector": {"matchLabels": {"team": "observability"}}, "podSelector": {"matchLabels": {"app": "prometheus"}}}]);
    let objects =
        render("prod", &[("networkPolicy.enabled", json!(true)), ("networkPolicy.metricsFrom", scrapers.clone())])
            .unwrap();
    let policy = find(&objects, "NetworkPolicy", "prod-spots-booster");
    let deployment = find(&objects, "Deployment", "prod-spots-booster");
    assert_eq!(policy["spec"]["podSelector"], deployment["spec"]["selector"], "it selects the booster's pods");
    assert_eq!(policy["spec"]["policyTypes"], json!(["Ingress"]));
    assert_eq!(
        policy["spec"]["ingress"],
        json!([{"from": scrapers, "ports": [{"port": "metrics", "protocol": "TCP"}]}]),
        "one rule, for the metrics port only: the probes' port is reachable from the pod's node alone"
    );
    // No peers must refuse everyone: an empty `from` would admit every source.
    let objects =
        render("prod", &[("networkPolicy.enabled", json!(true)), ("networkPolicy.metricsFrom", json!([]))]).unwrap();
    assert_eq!(find(&objects, "NetworkPolicy", "prod-spots-booster")["spec"]["ingress"], json!([]));
    assert!(render_ok(&[]).iter().all(|o| o["kind"] != "NetworkPolicy"), "opt-in");
    let err = render("prod", &[("networkPolicy.metricsFrom", json!([{"namespaceSelecter": {}}]))]).unwrap_err();
    assert!(err.contains("namespaceSelecter"), "a misspelt peer is refused: {err}");
}

/// Every long flag of `spots-booster run`, kebab-case.
fn run_flags() -> BTreeSet<String> {
    let cli = Cli::command();
    let run = cli.find_subcommand("run").expect("a run subcommand");
    run.get_arguments().filter_map(|a| a.get_long()).filter(|l| *l != "help").map(String::from).collect()
}

fn camel(kebab: &str) -> String {
    let mut out = String::new();
    for (i, part) in kebab.split('-').enumerate() {
        let mut chars = part.chars();
        match (i, chars.next()) {
            (0, Some(c)) => out.extend(std::iter::once(c).chain(chars)),
            (_, Some(c)) => out.extend(c.to_uppercase().chain(chars)),
            (_, None) => {}
        }
    }
    out
}

#[test]
fn the_schema_names_every_flag_of_run_and_nothing_else() {
    let schema = schema();
    let config: BTreeSet<String> =
        schema["properties"]["config"]["properties"].as_object().expect("config properties").keys().cloned().collect();
    let flags: BTreeSet<String> =
        run_flags().into_iter().filter(|f| !SET_BY_THE_CHART.contains(&f.as_str())).map(|f| camel(&f)).collect();
    assert_eq!(config, flags, "values.schema.json's config keys are run's flags (less those the chart sets itself)");
    assert_eq!(schema["properties"]["config"]["additionalProperties"], false);
    assert_eq!(schema["additionalProperties"], false);
}

/// A value the schema accepts for `property`, as a user would write it.
fn example(name: &str, property: &Value) -> Value {
    if let Some(first) = property["enum"].as_array().and_then(|e| e.first()) {
        return first.clone();
    }
    match (name, property["type"].as_str()) {
        ("asgTagFilter", _) => json!(["k8s.io/cluster-autoscaler/enabled=true", "team"]),
        (_, Some("array")) => json!(["first", "second"]),
        (_, Some("boolean")) => json!(true),
        (_, Some("integer")) => json!(7),
        ("reservedCpu", _) => json!("250m"),
        ("reservedMemory", _) => json!("512Mi"),
        ("awsEndpointUrl", _) => json!("http://127.0.0.1:5000"),
        ("logLevel", _) => json!("spots_booster=debug,kube=warn"),
        _ if property["pattern"].as_str().is_some_and(|p| p.contains("ms|s|m|h|d")) => json!("90s"),
        _ => json!("example"),
    }
}

#[test]
fn every_value_of_config_renders_a_flag_the_binary_parses() {
    let schema = schema();
    let properties = schema["properties"]["config"]["properties"].as_object().unwrap();
    let config: serde_json::Map<String, Value> = properties.iter().map(|(k, p)| (k.clone(), example(k, p))).collect();
    let objects = render_ok(&[("config", Value::Object(config.clone()))]);
    let rendered = args(&objects);
    for (key, value) in &config {
        let flag = format!(
            "--{}=",
            key.chars().fold(String::new(), |mut s, c| {
                if c.is_uppercase() {
                    s.push('-');
                    s.extend(c.to_lowercase());
                } else {
                    s.push(c);
                }
                s
            })
        );
        let expected = match value {
            Value::Array(items) => items.iter().map(|i| i.as_str().unwrap().to_string()).collect::<Vec<_>>().join(","),
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        assert!(rendered.contains(&format!("{flag}{expected}")), "{key} → {flag}{expected} in {rendered:?}");
    }
    let argv: Vec<&str> = std::iter::once("spots-booster").chain(rendered.iter().map(String::as_str)).collect();
    if let Err(e) = Cli::try_parse_from(&argv) {
        panic!("the binary refuses the chart's arguments {rendered:?}: {e}");
    }
}

#[test]
fn the_schema_refuses_a_misspelled_or_mistyped_value_naming_it() {
    for (set, named) in [
        (("config.dryRn", json!(true)), "dryRn"),
        (("config.drainTimeout", json!(300)), "drainTimeout"),
        (("config.drainTimeout", json!("5 minutes")), "drainTimeout"),
        (("config.sizing", json!("bins")), "sizing"),
        (("config.maxConcurrentDrains", json!(-1)), "maxConcurrentDrains"),
        (("config.reservedMemory", json!("lots")), "reservedMemory"),
        (("replicas", json!("two")), "replicas"),
        (("serviceMonitor.enable", json!(true)), "enable"),
        (("serviceAccount.annotations", json!({"eks.amazonaws.com/role-arn": 12})), "role-arn"),
    ] {
        let err = render("spots-booster", std::slice::from_ref(&set)).expect_err(&format!("{set:?} must be refused"));
        assert!(err.contains(named), "the error for {set:?} names {named}: {err}");
    }
}

#[test]
fn rbac_follows_the_namespaces_and_names_the_flags_move() {
    let objects = render_ok(&[(
        "config",
        json!({
            "connectionMode": "incluster",
            "eventsNamespace": "nth",
            "caStatusNamespace": "autoscaler",
            "caStatusName": "ca-status",
            "ledgerConfigmap": "boosts",
            "leaderElectLeaseName": "booster-leader",
            "instanceManagerNamespace": "im",
            "instanceManagerConfigmap": "im-config",
        }),
    )]);
    let role = |name: &str| find(&objects, "Role", name);
    assert_eq!(role("spots-booster")["metadata"]["namespace"], "nth");
    assert_eq!(role("spots-booster-ca-status")["metadata"]["namespace"], "autoscaler");
    assert_eq!(role("spots-booster-ca-status")["rules"][0]["resourceNames"], json!(["ca-status"]));
    assert_eq!(role("spots-booster-state")["metadata"]["namespace"], "spots-booster");
    assert_eq!(
        role("spots-booster-state")["rules"][0]["resourceNames"],
        json!(["boosts", "boosts-pools", "boosts-pools-unparsable"])
    );
    assert_eq!(role("spots-booster-state")["rules"][2]["resourceNames"], json!(["booster-leader"]));
    assert_eq!(role("spots-booster-instance-manager")["metadata"]["namespace"], "im");
    assert_eq!(role("spots-booster-instance-manager")["rules"][0]["resourceNames"], json!(["im-config"]));
    assert_eq!(find(&objects, "Namespace", "im")["metadata"]["name"], "im");
    for binding in objects.iter().filter(|o| o["kind"] == "RoleBinding") {
        let name = binding["metadata"]["name"].as_str().unwrap();
        assert_eq!(
            binding["metadata"]["namespace"],
            role(name)["metadata"]["namespace"],
            "{name} binds beside its Role"
        );
    }

    // Without InstanceGroups, none of their permissions.
    let objects = render_ok(&[("config.instanceGroups", json!(false))]);
    let cluster_role = find(&objects, "ClusterRole", "spots-booster");
    let groups: Vec<&Value> =
        cluster_role["rules"].as_array().unwrap().iter().flat_map(|r| r["apiGroups"].as_array().unwrap()).collect();
    assert!(!groups.contains(&&json!("instancemgr.keikoproj.io")), "{cluster_role}");
    assert!(objects.iter().all(|o| !o["metadata"]["name"].as_str().unwrap().ends_with("-aws-auth")));
    assert!(args(&objects).contains(&"--instance-groups=false".to_string()));

    // Pods are deleted only with --interruption-force-at-deadline, and only then granted.
    let pod_verbs = |objects: &[Value]| -> Vec<Value> {
        let cluster_role = find(objects, "ClusterRole", "spots-booster");
        let rules = cluster_role["rules"].as_array().unwrap().clone();
        let pods = rules.iter().find(|r| r["resources"] == json!(["pods"])).unwrap();
        pods["verbs"].as_array().unwrap().clone()
    };
    assert!(!pod_verbs(&render_ok(&[])).contains(&json!("delete")));
    let forced = render_ok(&[("config.interruptionForceAtDeadline", json!(true))]);
    assert!(pod_verbs(&forced).contains(&json!("delete")));
    assert!(args(&forced).contains(&"--interruption-force-at-deadline=true".to_string()));
}

#[test]
fn another_release_name_and_service_account_stay_bound_together() {
    let objects = render(
        "prod",
        &[
            ("serviceAccount.annotations", json!({"eks.amazonaws.com/role-arn": "arn:aws:iam::111122223333:role/booster"})),
            ("replicas", json!(3)),
            ("topologySpreadConstraints", json!([{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "spots-booster"}}}])),
            ("metrics.port", json!(9090)),
            ("probes.port", json!(9091)),
        ],
    )
    .unwrap();
    let account = find(&objects, "ServiceAccount", "prod-spots-booster");
    assert_eq!(
        account["metadata"]["annotations"]["eks.amazonaws.com/role-arn"],
        "arn:aws:iam::111122223333:role/booster"
    );
    for binding in objects.iter().filter(|o| o["kind"] == "RoleBinding" || o["kind"] == "ClusterRoleBinding") {
        assert_eq!(
            binding["subjects"],
            json!([{"kind": "ServiceAccount", "name": "prod-spots-booster", "namespace": "spots-booster"}])
        );
        assert!(binding["roleRef"]["name"].as_str().unwrap().starts_with("prod-spots-booster"));
    }
    let deployment = find(&objects, "Deployment", "prod-spots-booster");
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], "prod-spots-booster");
    assert_eq!(deployment["spec"]["replicas"], 3);
    assert_eq!(pod["topologySpreadConstraints"][0]["topologyKey"], "topology.kubernetes.io/zone");
    assert_eq!(pod["containers"][0]["ports"][0]["containerPort"], 9090);
    assert_eq!(pod["containers"][0]["ports"][1], json!({"name": "probes", "containerPort": 9091, "protocol": "TCP"}));
    assert!(args(&objects).contains(&"--metrics-bind-address=0.0.0.0:9090".to_string()));
    assert!(args(&objects).contains(&"--probe-bind-address=0.0.0.0:9091".to_string()));
    assert_eq!(find(&objects, "Service", "prod-spots-booster-metrics")["spec"]["ports"][0]["port"], 9090);
}

/// Every key of values.yaml (dotted, down to the documented level) and every `config` key.
fn documented_keys() -> BTreeSet<String> {
    let values: Value = serde_yaml::from_str(&std::fs::read_to_string(chart().join("values.yaml")).unwrap()).unwrap();
    let mut keys = BTreeSet::new();
    for (top, v) in values.as_object().unwrap() {
        match v.as_object() {
            Some(inner)
                if top != "config"
                    && !inner.is_empty()
                    && !["resources", "podSecurityContext", "securityContext", "affinity"].contains(&top.as_str()) =>
            {
                keys.extend(inner.keys().map(|k| format!("{top}.{k}")));
            }
            _ => {
                keys.insert(top.clone());
            }
        }
    }
    let schema = schema();
    keys.extend(
        schema["properties"]["config"]["properties"].as_object().unwrap().keys().map(|k| format!("config.{k}")),
    );
    keys
}

#[test]
fn the_chart_readme_lists_every_value() {
    let readme = std::fs::read_to_string(chart().join("README.md")).unwrap();
    let missing: Vec<String> = documented_keys().into_iter().filter(|k| !readme.contains(&format!("`{k}`"))).collect();
    assert!(missing.is_empty(), "charts/spots-booster/README.md does not list {missing:?}");
}
