//! InstanceGroup reconciliation (`instancemgr.keikoproj.io/v1alpha1`, keikoproj instance-manager
//! compatible), the whole half in one folder, in the booster's shape.
//!
//! - **Decisions, pure** (no I/O crate, the same rule as `core/`): [`api`] is the custom
//!   resource; [`boundaries`] applies the `instance-manager` ConfigMap; [`validate`] turns the
//!   object into a [`design::GroupDesign`]; [`launch`] and [`userdata`] say what AWS should hold
//!   and diff it against what it holds; `rolling` plans node replacement; `crd_strategy` the
//!   custom-resource strategy; [`aws_auth`] edits the `aws-auth` ConfigMap's text; and `plan`
//!   decides each reconcile's steps, state, conditions and requeue from what AWS and the cluster
//!   hold.
//! - **Ports**: [`cloud`] (what AWS holds and the calls that change it) and [`store`] (the
//!   object's status and Events, the ConfigMaps, rotations, custom resources), with no SDK or kube
//!   type crossing them.
//! - **Execution**: [`reconciler`] observes through the ports, asks the plan, and makes its calls;
//!   `controller` drives it on kube-runtime's `Controller` and `finalizer()`.
//! - **Adapters**: [`aws`] implements [`cloud`] on the SDKs (tested against moto); [`k8s`]
//!   implements [`store`] on kube (tested through the production client against a loopback API
//!   server). Neither imports the other.

pub mod api;
pub mod aws;
pub mod aws_auth;
pub mod boundaries;
pub mod cloud;
pub(crate) mod controller;
pub(crate) mod crd_strategy;
pub mod design;
pub(crate) mod events;
pub mod k8s;
pub mod launch;
pub(crate) mod plan;
pub mod reconciler;
pub(crate) mod rolling;
pub mod store;
pub mod userdata;
pub mod validate;

pub use api::{InstanceGroup, InstanceGroupSpec, InstanceGroupStatus};
