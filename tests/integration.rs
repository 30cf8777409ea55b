//! Every integration test in one binary (`autotests = false` in Cargo.toml): each suite is a
//! module, so the AWS SDK's generic code and `support` are compiled and linked once, not once per
//! file (most of `cargo test --release`'s build time on 2 cores). Run one suite with a filter:
//! `cargo test --release --test integration e2e_burst::`.
//!
//! `pod_identity` stays a binary of its own: it points the process's AWS credential variables at
//! a loopback agent, which every other test, and every daemon they start, would inherit.

mod support;

mod alerts;
mod architecture;
mod autoscaling_activities;
mod autoscaling_guard;
mod aws_moto;
mod aws_throttle;
mod chart;
mod cli;
mod docs;
mod e2e_burst;
mod e2e_daemon;
mod e2e_fallback;
mod e2e_fleet;
mod e2e_instancegroups;
mod e2e_interruptions;
mod e2e_market;
mod e2e_scope;
mod e2e_storm;
mod e2e_trust;
mod ec2_scheduled_events;
mod ec2_spot_requests;
mod fuzz;
mod iam_policy;
mod instancegroups_managed;
mod instancegroups_moto;
mod kube_adapters;
mod manifests;
mod scaler_moto;
mod scenarios;
mod simulate_html;

/// With `autotests = false` a new file in `tests/` is never compiled unless it is declared: each
/// must be a module above or a `[[test]]` of Cargo.toml, or its tests would silently not run.
#[test]
fn every_file_in_tests_is_compiled() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).expect("Cargo.toml");
    let modules = include_str!("integration.rs");
    let mut undeclared = Vec::new();
    for entry in std::fs::read_dir(root.join("tests")).expect("tests/") {
        let path = entry.expect("a tests/ entry").path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()).and_then(|n| n.strip_suffix(".rs")) else {
            continue;
        };
        let module = modules.lines().any(|l| l.trim() == format!("mod {name};"));
        let target = manifest.contains(&format!("path = \"tests/{name}.rs\""));
        if !module && !target {
            undeclared.push(format!("tests/{name}.rs"));
        }
    }
    assert!(
        undeclared.is_empty(),
        "not compiled: add `mod <name>;` to tests/integration.rs (or a [[test]] to Cargo.toml): {undeclared:?}"
    );
}
