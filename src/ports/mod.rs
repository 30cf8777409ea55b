//! The small traits workers call to act on the world, with the domain values they exchange, one
//! file per concern. No SDK or kube type crosses them: `aws/` and `k8s/` implement them, `simulate`
//! implements them over its world, and the `test-kit` feature's `fakes` in memory.

mod aws;
mod clock;
mod cluster;
mod events;
mod leadership;
mod ledger;
mod memory_ledger;

pub use aws::*;
pub use clock::*;
pub use cluster::*;
pub use events::*;
pub use leadership::*;
pub use ledger::*;
pub use memory_ledger::MemoryLedger;

/// Any error from below a port, without its SDK type.
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;
