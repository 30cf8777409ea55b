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

/// An error and every cause under it, as one line: what a port's caller logs or tells, where a
/// bare `Display` would drop the cause (the API server's message, the AWS error code).
pub(crate) fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
