//! Groups' sizes as recent reads found them, so that one guard read serves a burst.
//!
//! A boost is written only if its group's desired capacity is still what the plan started from,
//! which takes a read of the group before the write. A wave of interruption notices reaches a
//! cluster's groups over a few hundred milliseconds and is answered in several passes; a read per
//! pass made the burst's later groups wait a round trip each time. So any read of a group's sizes
//! serves as the guard of its writes for `max_age` after it was sent, and a guard read that
//! follows another within `max_age` (a wave) asks, in the same call, for the other groups this
//! process knows. A write whose group a read in flight asks for waits for that read instead of
//! sending its own, and a group written is read again before its next write. The price is the
//! window: a change Cluster Autoscaler makes to a group within `max_age` before a boost is
//! overwritten by it, lowered to the boost's value if CA went higher (docs/design.md).
//! `--guard-read-max-age 0` reads before every write.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::watch;

use crate::core::{GroupName, Timestamp};
use crate::ports::{Clock, GroupDescription};

/// One group's sizes and when the read that found them was sent.
#[derive(Debug, Clone, Copy)]
struct Sizes {
    min: u32,
    max: u32,
    desired: u32,
    read_at: Timestamp,
}

/// Where a group's last write stands: a read sent before its answer may have been answered
/// before the write applied, so it is no guard.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum Written {
    #[default]
    Never,
    InFlight,
    AnsweredAt(Timestamp),
}

/// What is known of one group.
#[derive(Debug, Clone, Copy, Default)]
struct Known {
    /// Its sizes, until it is written.
    sizes: Option<Sizes>,
    written: Written,
}

impl Known {
    fn fresh_at(&self, now: Timestamp, max_age: Duration) -> Option<Sizes> {
        self.sizes.filter(|s| now.since(s.read_at) < max_age)
    }
}

/// What recent reads found of each group this process has described.
pub(crate) struct RecentSizes {
    max_age: Duration,
    clock: Clock,
    known: Mutex<BTreeMap<GroupName, Known>>,
    /// Reads sent and not answered yet, by a number of their own: the groups each asks for, and
    /// a channel closed once its answer is noted (or it failed).
    in_flight: Mutex<BTreeMap<u64, Asking>>,
    next_read: std::sync::atomic::AtomicU64,
    /// When the last guard read was sent: one within `max_age` of the next means a wave.
    last_guard_read: Mutex<Option<Timestamp>>,
}

/// The groups a read in flight asks for, and the channel closed once its answer is noted.
type Asking = (Vec<GroupName>, watch::Receiver<()>);

/// A read in flight, registered with [`RecentSizes::reading`]; dropping it (once its answer is
/// noted, or on failure) wakes the writes waiting for it.
pub(crate) struct ReadInFlight {
    recent: Arc<RecentSizes>,
    id: u64,
    _answered: watch::Sender<()>,
}

impl Drop for ReadInFlight {
    fn drop(&mut self) {
        lock(&self.recent.in_flight).remove(&self.id);
    }
}

/// Only touched between calls, never across one: a poisoned lock holds data as good as it was.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl std::fmt::Debug for RecentSizes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecentSizes").field("max_age", &self.max_age).finish_non_exhaustive()
    }
}

impl RecentSizes {
    /// Sizes that serve as a guard for `max_age` after their read, on `clock`; with a zero
    /// `max_age` nothing is kept and every write is read for.
    pub(crate) fn new(max_age: Duration, clock: Clock) -> Self {
        RecentSizes {
            max_age,
            clock,
            known: Mutex::new(BTreeMap::new()),
            in_flight: Mutex::new(BTreeMap::new()),
            next_read: std::sync::atomic::AtomicU64::new(0),
            last_guard_read: Mutex::new(None),
        }
    }

    fn known(&self) -> MutexGuard<'_, BTreeMap<GroupName, Known>> {
        lock(&self.known)
    }

    /// Registers a guard read of `asked` about to be sent, so writes of those groups wait for it.
    pub(crate) fn reading(self: &Arc<Self>, asked: &[GroupName]) -> Option<ReadInFlight> {
        if !self.kept() {
            return None;
        }
        let id = self.next_read.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (answered, waiting) = watch::channel(());
        lock(&self.in_flight).insert(id, (asked.to_vec(), waiting));
        Some(ReadInFlight { recent: self.clone(), id, _answered: answered })
    }

    /// A read in flight that asks for `group`: its channel closes once the answer is noted.
    pub(crate) fn read_in_flight(&self, group: &GroupName) -> Option<watch::Receiver<()>> {
        lock(&self.in_flight).values().find(|(asked, _)| asked.contains(group)).map(|(_, rx)| rx.clone())
    }

    fn kept(&self) -> bool {
        !self.max_age.is_zero()
    }

    /// The time to stamp on a read about to be sent.
    pub(crate) fn now(&self) -> Timestamp {
        (self.clock)()
    }

    /// Notes what a read sent at `read_at` for `asked` answered; a group asked for and not in
    /// the answer is forgotten (deleted, or not ours to know).
    pub(crate) fn note(&self, asked: &[GroupName], answered: &[GroupDescription], read_at: Timestamp) {
        if !self.kept() {
            return;
        }
        let mut known = self.known();
        for name in asked.iter().filter(|n| !answered.iter().any(|g| &g.name == *n)) {
            known.remove(name);
        }
        for g in answered {
            let entry = known.entry(g.name.clone()).or_default();
            let after_writes = match entry.written {
                Written::Never => true,
                Written::InFlight => false,
                Written::AnsweredAt(answer) => read_at > answer,
            };
            // A slower read sent earlier never replaces a newer one.
            let newer = entry.sizes.is_none_or(|s| s.read_at <= read_at);
            if after_writes && newer {
                entry.sizes = Some(Sizes { min: g.min, max: g.max, desired: g.desired, read_at });
            }
        }
    }

    /// `group`'s sizes, when a read sent less than `max_age` ago found them and nothing was
    /// written to it since: a description with sizes only, all the raise guard compares.
    pub(crate) fn fresh(&self, group: &GroupName) -> Option<GroupDescription> {
        if !self.kept() {
            return None;
        }
        let now = self.now();
        let sizes = self.known().get(group)?.fresh_at(now, self.max_age)?;
        Some(GroupDescription {
            name: group.clone(),
            min: sizes.min,
            max: sizes.max,
            desired: sizes.desired,
            instances: Vec::new(),
            capacity_rebalance: false,
            az_rebalance: false,
            tags: BTreeMap::new(),
            launch: Default::default(),
        })
    }

    /// Forgets `group`'s sizes as its write is sent: until the write is answered
    /// ([`RecentSizes::answered`]) no read counts, and its next write reads it again.
    pub(crate) fn writing(&self, group: &GroupName) {
        if self.kept() {
            self.known().insert(group.clone(), Known { sizes: None, written: Written::InFlight });
        }
    }

    /// `group`'s write is answered: reads sent from now on count again.
    pub(crate) fn answered(&self, group: &GroupName) {
        let now = self.now();
        if let Some(entry) = self.known().get_mut(group) {
            entry.written = Written::AnsweredAt(now);
        }
    }

    /// What a guard read about to be sent adds to its last call, so the groups a wave reaches
    /// next are read already: nothing for the first guard read in `max_age` (a lone notice reads
    /// its own group, the smallest answer), and from the second on up to `room` known groups
    /// outside `asked` whose sizes are not fresh, the longest unread first (none with a write in
    /// flight, whose read would not count, nor one a read in flight asks for).
    pub(crate) fn to_read_along(&self, asked: &[GroupName], room: usize) -> Vec<GroupName> {
        if !self.kept() {
            return Vec::new();
        }
        let now = self.now();
        let last = lock(&self.last_guard_read).replace(now);
        if room == 0 || last.is_none_or(|last| now.since(last) >= self.max_age) {
            return Vec::new();
        }
        let reading: Vec<GroupName> =
            lock(&self.in_flight).values().flat_map(|(asked, _)| asked.iter().cloned()).collect();
        let known = self.known();
        let mut stale: Vec<(Option<Timestamp>, &GroupName)> = known
            .iter()
            .filter(|(name, k)| {
                k.fresh_at(now, self.max_age).is_none()
                    && k.written != Written::InFlight
                    && !asked.contains(name)
                    && !reading.contains(name)
            })
            .map(|(name, k)| (k.sizes.map(|s| s.read_at), name))
            .collect();
        stale.sort_unstable();
        stale.into_iter().take(room).map(|(_, name)| name.clone()).collect()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicI64, Ordering};
    use std::sync::Arc;

    use super::*;

    fn group(name: &str, desired: u32) -> GroupDescription {
        GroupDescription {
            name: name.into(),
            min: 0,
            max: 10,
            desired,
            instances: Vec::new(),
            capacity_rebalance: false,
            az_rebalance: true,
            tags: BTreeMap::new(),
            launch: Default::default(),
        }
    }

    fn recent(max_age_ms: u64) -> (RecentSizes, Arc<AtomicI64>) {
        let now = Arc::new(AtomicI64::new(10_000));
        let read = now.clone();
        let clock: Clock = Arc::new(move || Timestamp::from_millis(read.load(Ordering::Relaxed)));
        (RecentSizes::new(Duration::from_millis(max_age_ms), clock), now)
    }

    fn names(v: &[&str]) -> Vec<GroupName> {
        v.iter().map(|n| GroupName::from(*n)).collect()
    }

    #[test]
    fn sizes_serve_until_max_age_after_the_read_was_sent() {
        let (r, now) = recent(1_000);
        r.note(&names(&["a"]), &[group("a", 3)], Timestamp::from_millis(9_500));
        assert_eq!(r.fresh(&"a".into()).map(|g| (g.min, g.max, g.desired)), Some((0, 10, 3)));
        now.store(10_499, Ordering::Relaxed);
        assert!(r.fresh(&"a".into()).is_some());
        now.store(10_500, Ordering::Relaxed);
        assert!(r.fresh(&"a".into()).is_none(), "a full max age after the read was sent");
        assert!(r.fresh(&"b".into()).is_none(), "never read");
    }

    #[test]
    fn a_group_written_counts_only_reads_sent_after_its_answer() {
        let (r, now) = recent(1_000);
        r.to_read_along(&[], 0); // a guard read just went: a wave is under way
        r.note(&names(&["a"]), &[group("a", 3)], Timestamp::from_millis(10_000));
        r.writing(&"a".into());
        assert!(r.fresh(&"a".into()).is_none());
        assert!(r.to_read_along(&[], 10).is_empty(), "a read while its write flies would not count");
        r.note(&names(&["a"]), &[group("a", 3)], Timestamp::from_millis(10_000));
        assert!(r.fresh(&"a".into()).is_none(), "sent while the write flew: it may predate the write");
        now.store(10_100, Ordering::Relaxed);
        r.answered(&"a".into());
        r.note(&names(&["a"]), &[group("a", 3)], Timestamp::from_millis(10_050));
        r.note(&names(&["a"]), &[group("a", 3)], Timestamp::from_millis(10_100));
        assert!(r.fresh(&"a".into()).is_none(), "sent before the answer, or in its millisecond");
        assert_eq!(r.to_read_along(&[], 10), names(&["a"]), "written, so read along first");
        r.note(&names(&["a"]), &[group("a", 4)], Timestamp::from_millis(10_101));
        assert_eq!(r.fresh(&"a".into()).map(|g| g.desired), Some(4));
    }

    #[test]
    fn a_group_gone_from_the_answer_is_forgotten() {
        let (r, _) = recent(1_000);
        r.to_read_along(&[], 0); // a guard read just went: a wave is under way
        r.note(&names(&["a", "b"]), &[group("a", 3), group("b", 2)], Timestamp::from_millis(9_000));
        r.note(&names(&["b"]), &[], Timestamp::from_millis(10_000));
        assert!(r.fresh(&"b".into()).is_none());
        assert_eq!(r.to_read_along(&[], 10), names(&["a"]), "b is gone, not asked again");
        assert!(r.fresh(&"a".into()).is_none(), "read a full max age ago");
    }

    #[test]
    fn an_older_read_answering_late_does_not_replace_a_newer_one() {
        let (r, _) = recent(1_000);
        r.note(&names(&["a"]), &[group("a", 4)], Timestamp::from_millis(9_900));
        r.note(&names(&["a"]), &[group("a", 3)], Timestamp::from_millis(9_800));
        assert_eq!(r.fresh(&"a".into()).map(|g| g.desired), Some(4));
    }

    #[test]
    fn a_read_takes_along_the_longest_unread_groups_it_has_room_for_once_a_wave_shows() {
        let (r, now) = recent(1_000);
        r.note(&[], &[group("a", 1)], Timestamp::from_millis(8_000));
        r.note(&[], &[group("b", 1)], Timestamp::from_millis(7_000));
        r.note(&[], &[group("c", 1)], Timestamp::from_millis(10_500));
        r.note(&[], &[group("d", 1)], Timestamp::from_millis(6_000));
        assert!(r.to_read_along(&[], 5).is_empty(), "the first guard read in a second: a lone notice");
        now.store(10_999, Ordering::Relaxed);
        assert_eq!(r.to_read_along(&names(&["d"]), 5), names(&["b", "a"]), "c is fresh, d asked already");
        assert_eq!(r.to_read_along(&[], 1), names(&["d"]));
        assert_eq!(r.to_read_along(&[], 0), Vec::<GroupName>::new());
        now.store(12_000, Ordering::Relaxed);
        assert!(r.to_read_along(&[], 5).is_empty(), "a second after the last: a new wave, or none");
    }

    #[tokio::test]
    async fn a_read_in_flight_is_found_by_its_groups_and_wakes_its_waiters_when_dropped() {
        let (r, _) = recent(1_000);
        let r = Arc::new(r);
        r.to_read_along(&[], 0); // a guard read just went: a wave is under way
        r.note(&[], &[group("c", 1)], Timestamp::from_millis(1_000));
        let read = r.reading(&names(&["a", "b"])).expect("kept");
        let mut waiting = r.read_in_flight(&"b".into()).expect("b is asked for");
        assert!(r.read_in_flight(&"c".into()).is_none());
        assert_eq!(r.to_read_along(&[], 10), names(&["c"]));
        r.note(&[], &[group("c", 1)], Timestamp::from_millis(10_000));
        r.note(&names(&["a", "b"]), &[group("a", 3), group("b", 2)], Timestamp::from_millis(10_000));
        drop(read);
        assert!(waiting.changed().await.is_err(), "closed: the answer is noted");
        assert!(r.read_in_flight(&"b".into()).is_none());
        assert_eq!(r.fresh(&"b".into()).map(|g| g.desired), Some(2));
    }

    #[test]
    fn with_no_max_age_nothing_is_kept() {
        let (r, _) = recent(0);
        r.note(&names(&["a"]), &[group("a", 3)], Timestamp::from_millis(10_000));
        assert!(r.fresh(&"a".into()).is_none());
        assert!(r.to_read_along(&[], 50).is_empty());
        assert!(Arc::new(r).reading(&names(&["a"])).is_none(), "no read waited for");
    }
}
