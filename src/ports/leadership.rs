//! Whether this replica may write: set by leader election, checked before every write.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Whether this replica holds the lease: only the leader writes. Cheap to clone and to read;
/// the elector flips it the moment the lease is lost, and every write checks it just before
/// going out.
#[derive(Debug, Clone)]
pub struct Leadership(Arc<AtomicBool>);

impl Leadership {
    /// A replica that leads from the start (leader election off).
    pub fn always() -> Self {
        Leadership(Arc::new(AtomicBool::new(true)))
    }

    /// A replica that leads only once the elector says so.
    pub fn follower() -> Self {
        Leadership(Arc::new(AtomicBool::new(false)))
    }

    /// Whether writes may go out now.
    pub fn is_leader(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }

    /// Sets the state; returns the previous one.
    pub fn set(&self, leading: bool) -> bool {
        self.0.swap(leading, Ordering::SeqCst)
    }
}
