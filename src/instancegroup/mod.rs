//! InstanceGroup reconciliation (`instancemgr.keikoproj.io/v1alpha1`, keikoproj instance-manager
//! compatible). [`api`] is the custom resource; the pure modules turn it into what AWS should look
//! like ([`validate`], [`launch`], [`userdata`], [`boundaries`]), compare ([`drift`]) and plan node
//! replacement ([`rolling`]); `workers::instancegroups` acts on them.

pub mod api;
pub mod design;
pub mod launch;
pub mod userdata;
pub mod validate;

pub use api::{InstanceGroup, InstanceGroupSpec, InstanceGroupStatus};
