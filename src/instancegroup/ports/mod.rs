//! What the InstanceGroup reconciler acts through, in its own values: [`cloud`] on AWS, [`store`]
//! on Kubernetes.

pub mod cloud;
pub mod store;
