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
mod e2e_fleet;
mod e2e_instancegroups;
mod e2e_interruptions;
mod e2e_trust;
mod ec2_scheduled_events;
mod fuzz;
mod instancegroups_moto;
mod kube_adapters;
mod manifests;
mod scaler_moto;
mod scenarios;
mod simulate_html;
