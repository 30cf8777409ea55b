//! spots-booster keeps Kubernetes clusters on AWS Spot capacity whole: it reads AWS Node
//! Termination Handler Events and Cluster Autoscaler's status, boosts Auto Scaling Groups ahead of
//! spot interruptions, and drains at-risk nodes once their replacements are Ready.
//!
//! The crate is a library plus a thin binary. [`core`] is the pure scaling core; [`k8s`] holds the
//! parsers for what the cluster says; [`ports`] are the traits workers act through, implemented on
//! AWS in [`aws`] (and, for tests, in memory in `fakes`, behind the `test-kit` feature);
//! [`workers`] run the core's decisions; [`instancegroup`] is the InstanceGroup half, decisions,
//! ports, reconciler and adapters in one folder; [`inspect`] and [`simulate`] are commands that
//! need no cluster.

pub(crate) mod admin;
pub mod app;
pub mod aws;
pub mod config;
pub mod core;
/// In-memory ports that record calls and inject faults: the test kit, not part of the product.
#[cfg(any(test, feature = "test-kit"))]
pub mod fakes;
pub(crate) mod inspect;
pub mod instancegroup;
pub mod k8s;
pub mod metrics;
pub(crate) mod output;
pub mod ports;
pub mod simulate;
pub(crate) mod supervise;
pub(crate) mod telemetry;
pub mod timefmt;
pub mod units;
pub mod workers;
pub(crate) mod yaml_guard;
