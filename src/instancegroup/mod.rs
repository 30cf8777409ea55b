//! InstanceGroup reconciliation (`instancemgr.keikoproj.io/v1alpha1`, keikoproj instance-manager
//! compatible). [`api`] is the custom resource. The rest is pure: [`boundaries`] applies the
//! `instance-manager` ConfigMap, [`validate`] turns the object into a [`design::GroupDesign`],
//! [`launch`] and [`userdata`] say what AWS should hold and diff it against what it holds,
//! `rolling` plans node replacement, and `plan` decides each reconcile's steps, state,
//! conditions and requeue from what AWS and the cluster hold. `workers::instancegroups` observes
//! and carries the steps out, through the ports `ports::nodegroups` (AWS) and
//! `ports::instancegroups` (Kubernetes).

pub mod api;
pub mod aws_auth;
pub mod boundaries;
pub(crate) mod crd_strategy;
pub mod design;
pub mod launch;
pub(crate) mod plan;
pub(crate) mod rolling;
pub mod userdata;
pub mod validate;

pub use api::{InstanceGroup, InstanceGroupSpec, InstanceGroupStatus};
