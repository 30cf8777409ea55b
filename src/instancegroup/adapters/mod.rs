//! The InstanceGroup half's ports on real services, and in memory for tests: [`aws`] on the
//! SDKs, [`k8s`] on kube, `memory_cloud` in memory.

pub mod aws;
pub mod k8s;
#[cfg(test)]
pub(crate) mod memory_cloud;
