//! InstanceGroup reconciliation (`instancemgr.keikoproj.io/v1alpha1`, keikoproj instance-manager
//! compatible), the whole half in one folder, in the booster's shape, one section per folder:
//! `domain/`, `ports/`, the reconciler and its controller, `adapters/`.
//!
//! - **Decisions, pure** (`domain/`) (no I/O crate, the same rule as `core/`): [`api`] is the custom
//!   resource; [`boundaries`] applies the `instance-manager` ConfigMap; [`validate`] turns the
//!   object into a [`design::GroupDesign`]; [`launch`] and [`userdata`] say what AWS should hold
//!   and diff it against what it holds; `rolling` plans node replacement; `crd_strategy` the
//!   custom-resource strategy; [`aws_auth`] edits the `aws-auth` ConfigMap's text; and `plan`
//!   decides each reconcile's steps, state, conditions and requeue from what AWS and the cluster
//!   hold.
//! - **Ports** (`ports/`): [`cloud`] (what AWS holds and the calls that change it) and [`store`] (the
//!   object's status and Events, the ConfigMaps, rotations, custom resources), with no SDK or kube
//!   type crossing them.
//! - **Execution**: [`reconciler`] observes through the ports, asks the plan, and makes its calls;
//!   `controller` drives it on kube-runtime's `Controller` and `finalizer()`.
//! - **Adapters** (`adapters/`): [`aws`] implements [`cloud`] on the SDKs (tested against moto); [`k8s`]
//!   implements [`store`] on kube (tested through the production client against a loopback API
//!   server); `memory_cloud` implements [`cloud`] in memory for the reconciler's unit tests.
//!   Neither imports the other.

pub mod adapters;
pub(crate) mod controller;
pub mod domain;
pub mod ports;
mod reconcile_managed;
pub mod reconciler;
#[cfg(test)]
mod test_rig;

// The sections' modules by their own names, as the rest of the crate and the tests know them.
pub use adapters::{aws, k8s};
pub use domain::{
    api, aws_auth, boundaries, design, launch, node_group, ownership, provisioner, userdata, validate, validate_managed,
};
pub(crate) use domain::{crd_strategy, events, plan};
pub use ports::{cloud, store};

pub use api::{InstanceGroup, InstanceGroupSpec, InstanceGroupStatus};
