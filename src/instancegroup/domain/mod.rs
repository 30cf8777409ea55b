//! The InstanceGroup half's decisions, pure: no I/O crate, the same rule as `core/`. The custom
//! resource, the ConfigMap's boundaries, validation into a design, what AWS should hold and the
//! diff against what it holds, userdata, rolling and `crd` strategies, aws-auth edits, the
//! Events' reasons, and `plan`, which decides each reconcile's steps.

pub mod api;
pub mod aws_auth;
pub mod boundaries;
pub(crate) mod crd_strategy;
pub mod design;
pub(crate) mod events;
pub mod launch;
pub mod node_group;
pub mod ownership;
pub(crate) mod plan;
pub mod provisioner;
pub(crate) mod rolling;
pub mod userdata;
pub mod validate;
pub mod validate_managed;
