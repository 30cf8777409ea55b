//! How the scaler paces itself, and what one tick of it did.

use super::*;

/// How the scaler paces itself.
#[derive(Debug, Clone)]
pub struct ScalerSettings {
    /// A wake-up waits this long for quiet before planning, so a burst is planned together.
    pub coalesce_quiet: Duration,
    /// A group's burst has ended once no node of it became at risk for this long: its write
    /// waits for that, so a burst costs one write per group. Longer than `coalesce_quiet`: NTH
    /// handles a group's nodes one after another (cordon, taint, Event), tens of milliseconds
    /// apart on a busy API server.
    pub(crate) group_quiet: Duration,
    /// …but a group's write never waits longer than this after its first signal.
    pub(crate) coalesce_max: Duration,
    /// …and a plan never waits longer than this after a wake-up: groups whose burst has ended
    /// are written then, while the others' signals still arrive.
    pub(crate) settle_max: Duration,
    /// Plan at least this often even without signals.
    pub(crate) resync: Duration,
}

impl ScalerSettings {
    /// The times wave pacing works with.
    pub(super) fn burst(&self) -> BurstTimes {
        BurstTimes {
            coalesce_quiet: self.coalesce_quiet,
            group_quiet: self.group_quiet,
            coalesce_max: self.coalesce_max,
        }
    }
}

impl Default for ScalerSettings {
    fn default() -> Self {
        ScalerSettings {
            coalesce_quiet: Duration::from_millis(20),
            group_quiet: Duration::from_millis(50),
            coalesce_max: Duration::from_millis(250),
            settle_max: Duration::from_millis(60),
            resync: Duration::from_secs(30),
        }
    }
}

/// What one tick did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct TickReport {
    /// Groups whose desired capacity was raised (or would have been, in dry run): `(group, from, to)`.
    pub(crate) raised: Vec<(GroupName, u32, u32)>,
    /// Groups whose write lost a race; re-planned at once.
    pub(crate) raced: Vec<GroupName>,
    /// Boosts left to the next pass: their group's signals were still arriving.
    pub(crate) settling: usize,
    /// Groups whose write failed, with the error category.
    pub failed: Vec<(GroupName, &'static str)>,
    /// At-risk instances held (at max, backoff, …).
    pub held: usize,
    /// Boosts a follower left to the leader.
    pub(crate) not_leader: usize,
    /// Nodes moved from a group without capacity to its fallback: `(from, to, nodes)`.
    pub fell_back: Vec<(GroupName, GroupName, u32)>,
}

/// Which of a pass's boosts are written in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Pacing {
    /// Every one (a pass called directly).
    Now,
    /// Those whose group's burst has ended (the worker's loop, which passes again soon).
    PerGroup,
}
