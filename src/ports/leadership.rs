//! Whether this replica may write: a deadline set by leader election, checked against the clock
//! before every write.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::time::Instant;

/// Until when this replica holds the lease: only the leader writes. Cheap to clone and to read.
/// The elector moves the deadline on each renewal (to the renew deadline, counted from when the
/// renewal was sent), and every write checks it against the clock just before going out: a stalled
/// elector, a starved runtime or a hung renewal cannot keep a replica writing past the moment
/// another may have taken the lease.
#[derive(Debug, Clone)]
pub struct Leadership(Arc<Deadline>);

#[derive(Debug)]
struct Deadline {
    base: Instant,
    /// Milliseconds after `base` until which this replica leads; 0: it does not, `u64::MAX`: for
    /// ever (leader election off).
    until: AtomicU64,
}

impl Leadership {
    fn with(until: u64) -> Self {
        Leadership(Arc::new(Deadline { base: Instant::now(), until: AtomicU64::new(until) }))
    }

    /// A replica that leads from the start (leader election off).
    pub fn always() -> Self {
        Self::with(u64::MAX)
    }

    /// A replica that leads only once the elector says so.
    pub fn follower() -> Self {
        Self::with(0)
    }

    /// Whether writes may go out now.
    pub fn is_leader(&self) -> bool {
        self.millis(Instant::now()) < self.0.until.load(Ordering::SeqCst)
    }

    /// Leads until `deadline` (a renewal succeeded); returns whether it led just before.
    pub fn lead_until(&self, deadline: Instant) -> bool {
        let was = self.is_leader();
        self.0.until.store(self.millis(deadline).max(1), Ordering::SeqCst);
        was
    }

    /// Leads for ever, or stops leading now; returns whether it led just before.
    pub fn set(&self, leading: bool) -> bool {
        let was = self.is_leader();
        self.0.until.store(if leading { u64::MAX } else { 0 }, Ordering::SeqCst);
        was
    }

    fn millis(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.0.base).as_millis()).unwrap_or(u64::MAX - 1)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn leadership_ends_at_its_deadline_whether_or_not_the_elector_runs() {
        let leadership = Leadership::follower();
        assert!(!leadership.is_leader());
        assert!(!leadership.lead_until(Instant::now() + Duration::from_secs(10)));
        assert!(leadership.is_leader());
        tokio::time::advance(Duration::from_millis(9_990)).await;
        assert!(leadership.is_leader());
        // No renewal came (the elector is stuck): writes stop on the clock alone.
        tokio::time::advance(Duration::from_millis(20)).await;
        assert!(!leadership.is_leader());
        assert!(!leadership.set(true));
        assert!(leadership.set(false));
        assert!(!leadership.is_leader());
    }
}
