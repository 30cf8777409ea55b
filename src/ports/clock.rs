//! The one time source. The core takes `now` as a value; everything else that needs the time
//! (workers, the watch's first sighting of a signal, caches' ages) reads this injected clock, so a
//! test or `simulate` that moves it moves every reader at once.
//!
//! What is not the world's time stays on the process's monotonic timers, on purpose: how long a
//! task has been silent (`/livez`), how long ago this replica saw the lease renewed (a step of the
//! wall clock must never hand a live lease to a second leader), a call's own deadline or retry
//! pause, and how fast a progress line redraws.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use crate::core::Timestamp;

/// Wall-clock `now`, injected.
pub type Clock = Arc<dyn Fn() -> Timestamp + Send + Sync>;

/// The system's wall clock, never going back: a step back of the host clock (NTP) reads as time
/// standing still until the clock catches up, so no age, deadline or reaction time turns negative
/// or starts over.
pub fn system_clock() -> Clock {
    let latest = Arc::new(AtomicI64::new(i64::MIN));
    Arc::new(move || {
        let wall = jiff::Timestamp::now().as_millisecond();
        let before = latest.fetch_max(wall, Ordering::Relaxed);
        Timestamp::from_millis(before.max(wall))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_system_clock_reads_wall_time_and_never_goes_back() {
        let clock = system_clock();
        let wall = jiff::Timestamp::now().as_millisecond();
        let first = clock().as_millis();
        assert!((first - wall).abs() < 5_000, "{first} vs {wall}");
        let mut last = first;
        for _ in 0..1_000 {
            let next = clock().as_millis();
            assert!(next >= last);
            last = next;
        }
    }
}
