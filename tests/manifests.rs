//! What ships next to the binary: every manifest parses, RBAC grants exactly what the code uses,
//! the Deployment is locked down, the IAM policy covers exactly the AWS calls, and the dashboard
//! queries only metrics the binary exports.

use std::collections::BTreeSet;
use std::path::Path;

use serde::Deserialize;
use serde_json::Value;
use spots_booster::aws::IAM_ACTIONS;
use spots_booster::k8s::client::{Named, Scope, PERMISSIONS};
use spots_booster::metrics::Metrics;

const MANIFESTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/manifests");
const SERVICE_ACCOUNT: (&str, &str) = ("spots-booster", "spots-booster");

fn documents(file: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(file).unwrap();
    serde_yaml::Deserializer::from_str(&text)
        .map(|doc| Value::deserialize(doc).unwrap_or_else(|e| panic!("{}: {e}", file.display())))
        .filter(|v| !v.is_null())
        .collect()
}

fn all_objects() -> Vec<Value> {
    let mut objects = Vec::new();
    for entry in std::fs::read_dir(MANIFESTS).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "yaml") {
            for doc in documents(&path) {
                assert!(doc["apiVersion"].is_string() && doc["kind"].is_string(), "{}: {doc}", path.display());
                objects.push(doc);
            }
        }
    }
    objects
}

fn strs(v: &Value) -> Vec<String> {
    v.as_array().map(|a| a.iter().filter_map(|s| s.as_str().map(String::from)).collect()).unwrap_or_default()
}

#[test]
fn every_manifest_parses_and_the_kustomization_lists_them() {
    let objects = all_objects();
    assert!(objects.len() >= 10);
    let kustomization = documents(&Path::new(MANIFESTS).join("kustomization.yaml")).remove(0);
    let listed = strs(&kustomization["resources"]);
    for entry in std::fs::read_dir(MANIFESTS).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        let optional = [
            "kustomization.yaml",
            "servicemonitor.yaml",
            "prometheusrule.yaml",
            "iam-policy.json",
            "iam-policy-instancegroups.json",
            "iam-policy-instancegroups-roles.json",
            "iam-policy-eks-managed.json",
            // Opt-in kustomize components (each checked where it is built: tests/chart.rs).
            "components",
        ];
        if !optional.contains(&name.as_str()) {
            assert!(listed.contains(&name), "{name} is not in kustomization.yaml");
        }
    }
    for name in &listed {
        assert!(Path::new(MANIFESTS).join(name).exists(), "{name} listed but missing");
    }
}

/// Where each scope points in the default install.
fn namespace_of(scope: Scope) -> Option<&'static str> {
    match scope {
        Scope::Cluster => None,
        Scope::NthEvents => Some("default"),
        Scope::KubeSystem => Some("kube-system"),
        Scope::InstanceManager => Some("instance-manager"),
        Scope::CaStatus => Some("kube-system"),
        Scope::Own => Some("spots-booster"),
    }
}

fn name_of(named: Named) -> &'static str {
    match named {
        Named::CaStatus => "cluster-autoscaler-status",
        Named::Ledger => "spots-booster-ledger",
        Named::PoolMemory => "spots-booster-ledger-pools",
        Named::UnparsablePools => "spots-booster-ledger-pools-unparsable",
        Named::Lease => "spots-booster",
        Named::AwsAuth => "aws-auth",
        Named::InstanceManagerConfig => "instance-manager",
    }
}

/// Rules bound to our ServiceAccount: `(namespace or None for cluster-wide, rule)`.
fn our_rules(objects: &[Value]) -> Vec<(Option<String>, Value)> {
    let bound = |binding: &Value| {
        binding["subjects"].as_array().unwrap().iter().any(|s| {
            s["kind"] == "ServiceAccount" && s["name"] == SERVICE_ACCOUNT.1 && s["namespace"] == SERVICE_ACCOUNT.0
        })
    };
    let mut rules = Vec::new();
    for binding in objects.iter().filter(|o| o["kind"] == "ClusterRoleBinding" || o["kind"] == "RoleBinding") {
        assert!(bound(binding), "binding {} is not for our ServiceAccount", binding["metadata"]["name"]);
        let namespace = binding["metadata"]["namespace"].as_str().map(String::from);
        let role_kind = binding["roleRef"]["kind"].as_str().unwrap();
        let role = objects
            .iter()
            .find(|o| {
                o["kind"] == role_kind
                    && o["metadata"]["name"] == binding["roleRef"]["name"]
                    && o["metadata"]["namespace"].as_str() == namespace.as_deref().filter(|_| role_kind == "Role")
            })
            .unwrap_or_else(|| panic!("role of binding {}", binding["metadata"]["name"]));
        for rule in role["rules"].as_array().unwrap() {
            rules.push((namespace.clone(), rule.clone()));
        }
    }
    rules
}

#[test]
fn rbac_grants_exactly_what_the_code_uses_and_no_wildcard() {
    let objects = all_objects();
    let rules = our_rules(&objects);
    for (_, rule) in &rules {
        for field in ["apiGroups", "resources", "verbs", "resourceNames"] {
            assert!(!strs(&rule[field]).iter().any(|v| v.contains('*')), "wildcard in {rule}");
        }
    }
    // Every permission the code uses is granted where it is used …
    // The manifests grant the default run; --interruption-force-at-deadline needs its own rule
    // (the chart adds it with the value: tests/chart.rs).
    for p in PERMISSIONS.iter().filter(|p| !p.force_only()) {
        let namespace = namespace_of(p.scope);
        let granted = rules.iter().any(|(ns, rule)| {
            let names = strs(&rule["resourceNames"]);
            ns.as_deref() == namespace
                && strs(&rule["apiGroups"]).contains(&p.group.to_string())
                && strs(&rule["resources"]).contains(&p.resource.to_string())
                && strs(&rule["verbs"]).contains(&p.verb.to_string())
                && (names.is_empty() || p.name.is_some_and(|n| names.contains(&name_of(n).to_string())))
        });
        assert!(granted, "not granted: {p:?} in {namespace:?}");
    }
    // … and nothing else is.
    for (ns, rule) in &rules {
        for group in strs(&rule["apiGroups"]) {
            for resource in strs(&rule["resources"]) {
                for verb in strs(&rule["verbs"]) {
                    let used = PERMISSIONS.iter().any(|p| {
                        p.group == group
                            && p.resource == resource
                            && p.verb == verb
                            && namespace_of(p.scope) == ns.as_deref()
                    });
                    assert!(used, "granted but unused: {verb} {group}/{resource} in {ns:?}");
                }
            }
        }
    }
}

#[test]
fn the_deployment_is_locked_down_and_elects_a_leader() {
    let objects = all_objects();
    let d = objects.iter().find(|o| o["kind"] == "Deployment").unwrap();
    assert_eq!(d["spec"]["replicas"], 2);
    let pod = &d["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], SERVICE_ACCOUNT.1);
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(pod["securityContext"]["seccompProfile"]["type"], "RuntimeDefault");
    let c = &pod["containers"][0];
    assert!(strs(&c["args"]).contains(&"--connection-mode=incluster".to_string()));
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);
    assert_eq!(strs(&c["securityContext"]["capabilities"]["drop"]), vec!["ALL"]);
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/livez");
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    // The probes have a listener of their own: scrapers holding every metrics slot fail no probe.
    assert_eq!(c["livenessProbe"]["httpGet"]["port"], "probes");
    assert_eq!(c["readinessProbe"]["httpGet"]["port"], "probes");
    let port = |name: &str| {
        let ports = c["ports"].as_array().unwrap();
        ports.iter().find(|p| p["name"] == name).unwrap_or_else(|| panic!("a port named {name}"))["containerPort"]
            .clone()
    };
    let args = strs(&c["args"]);
    assert!(args.contains(&format!("--probe-bind-address=0.0.0.0:{}", port("probes"))), "{args:?}");
    assert!(args.contains(&format!("--metrics-bind-address=0.0.0.0:{}", port("metrics"))), "{args:?}");
    assert!(c["resources"]["requests"]["memory"].is_string() && c["resources"]["limits"]["memory"].is_string());
    let pdb = objects.iter().find(|o| o["kind"] == "PodDisruptionBudget").unwrap();
    assert_eq!(pdb["spec"]["selector"], d["spec"]["selector"]);
    assert!(objects.iter().any(|o| o["kind"] == "ServiceMonitor"));
    assert!(objects.iter().any(|o| o["kind"] == "PrometheusRule"));
}

#[test]
fn the_iam_policies_allow_exactly_the_aws_calls() {
    // What each statement reaches is `tests/iam_policy.rs`'s table; here, that the two files name
    // every call the adapters make and nothing more.
    let mut allowed = BTreeSet::new();
    for file in crate::iam_policy::FILES {
        let policy: Value =
            serde_json::from_str(&std::fs::read_to_string(Path::new(MANIFESTS).join(file)).unwrap()).unwrap();
        for statement in policy["Statement"].as_array().unwrap() {
            let actions = match statement["Action"].as_str() {
                Some(one) => vec![one.to_string()],
                None => strs(&statement["Action"]),
            };
            if statement["Effect"] == "Deny" {
                continue;
            }
            assert!(actions.iter().all(|a| !a.contains('*')), "{file}: no wildcard grants: {statement}");
            // IAM writes reach only the roles and profiles the daemon creates, under its path.
            let read = |a: &String| [":Describe", ":Get", ":List"].iter().any(|verb| a.contains(verb));
            if actions.iter().any(|a| a.starts_with("iam:") && !read(a)) {
                let resources = match statement["Resource"].as_str() {
                    Some(one) => vec![one.to_string()],
                    None => strs(&statement["Resource"]),
                };
                assert!(
                    resources
                        .iter()
                        .all(|r| r.contains(":role/spots-booster/") || r.contains(":instance-profile/spots-booster/")),
                    "{statement}"
                );
            }
            allowed.extend(actions);
        }
    }
    let used: BTreeSet<String> = IAM_ACTIONS.iter().map(|a| a.to_string()).collect();
    assert_eq!(allowed, used);
}

#[test]
fn every_dashboard_query_uses_metrics_the_binary_exports() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/dashboards/spots-booster.json");
    let dashboard: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let exported: BTreeSet<String> = Metrics::new().names().into_iter().collect();
    let metric = regex::Regex::new(r"spots_booster_[a-z_]+").unwrap();
    let process_metric = regex::Regex::new(r"process_[a-z_]+").unwrap();
    let scrape = Metrics::new().encode();
    let mut queries = 0;
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            let expr = target["expr"].as_str().unwrap();
            queries += 1;
            for m in metric.find_iter(expr) {
                let name = m.as_str();
                let base = ["_bucket", "_count", "_sum"]
                    .iter()
                    .find_map(|s| name.strip_suffix(s).filter(|b| exported.contains(*b)))
                    .unwrap_or(name);
                assert!(exported.contains(base), "panel {:?} queries {name}, which is not exported", panel["title"]);
            }
            for m in process_metric.find_iter(expr) {
                let family = format!("\n# TYPE {} ", m.as_str());
                assert!(
                    scrape.contains(&family),
                    "panel {:?} queries {}, which is not exported",
                    panel["title"],
                    m.as_str()
                );
            }
        }
    }
    assert!(queries >= 20);
    let variables: Vec<&str> =
        dashboard["templating"]["list"].as_array().unwrap().iter().map(|v| v["name"].as_str().unwrap()).collect();
    assert_eq!(variables, vec!["datasource", "group"]);
}

#[test]
fn the_crd_manifest_is_what_the_binary_generates() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_spots-booster")).arg("crd").output().unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let generated = String::from_utf8(output.stdout).unwrap();
    let shipped = std::fs::read_to_string(Path::new(MANIFESTS).join("crd.yaml")).unwrap();
    assert!(
        generated == shipped,
        "manifests/crd.yaml is stale: regenerate it with `cargo run --release -- crd > manifests/crd.yaml`"
    );
    let crd = &documents(&Path::new(MANIFESTS).join("crd.yaml"))[0];
    assert_eq!(crd["kind"], "CustomResourceDefinition");
    assert_eq!(crd["spec"]["names"]["shortNames"][0], "ig");
}
