//! Wave pacing: which of a pass's boosts are written now and which wait for the next pass, so a
//! burst of signals costs one write per group. NTH handles a group's nodes one API call after
//! another (cordon, taint, Event), so the nodes of one group become at risk tens to hundreds of
//! milliseconds apart; a boost written at the first of them would be written again for each.
//!
//! A lone signal, or the end of a wave, finds the cluster quiet and is written at once. While a
//! wave arrives each group waits for its own quiet, and a group whose burst ended is written
//! while the others' signals still arrive.

use std::collections::BTreeMap;
use std::time::Duration;

use super::boost::Boost;
use super::model::{InstanceId, Timestamp};
use super::signals::AtRiskSet;

/// The times pacing works with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BurstTimes {
    /// Nodes are still becoming at risk somewhere while one did less than this long ago.
    pub coalesce_quiet: Duration,
    /// A group's burst has ended once no node of it became at risk for this long (the floor: a
    /// wave that shows wider gaps between its nodes waits longer).
    pub group_quiet: Duration,
    /// …but a group's write never waits longer than this after its first signal.
    pub coalesce_max: Duration,
}

/// What pacing remembers from one pass to the next: how far apart NTH's calls landed in the last
/// wave that showed it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WavePace {
    /// The widest gap between two nodes of one group the last wave to show one had.
    last_wave_gap: Duration,
}

impl WavePace {
    /// Removes from `boosts` those whose group is still in the middle of its burst at `now` and
    /// returns how many: they are planned again at the next pass. `first_seen` is when each
    /// instance first became at risk.
    pub fn hold_back_settling(
        &mut self,
        boosts: &mut Vec<Boost>,
        at_risk: &AtRiskSet,
        first_seen: &BTreeMap<InstanceId, Timestamp>,
        now: Timestamp,
        times: &BurstTimes,
    ) -> usize {
        if boosts.is_empty() {
            return 0;
        }
        let before = boosts.len();
        let quiet = self.group_quiet_in_wave(at_risk, first_seen, now, times);
        // A wave whose groups came slowly is not over at the cluster's first lull: a loaded API
        // server hands the watches their events in clumps, tens of milliseconds apart.
        if wave_arriving(first_seen, now, times) || quiet > times.group_quiet {
            boosts.retain(|b| !settling(b, first_seen, now, quiet, times));
        }
        before - boosts.len()
    }

    /// How long a group must go without a new at-risk node before its burst counts as ended, in
    /// the wave arriving now: `group_quiet`, or half again the widest gap this wave has shown
    /// between two nodes of one group if that is longer, never past `coalesce_max`. A busy API
    /// server spaces NTH's calls further apart (86–185 ms on a loaded two-core control plane,
    /// against the 50 ms that suits a quiet one), and a fixed quiet wrote such groups once per
    /// node. Until a wave of several groups shows a second node of one, the last wave's widest
    /// gap stands in for its own: at a wave's head no group has had the time to show one, and the
    /// floor wrote the first groups once per node. A lone group's signals are never held for an
    /// earlier wave's pace.
    fn group_quiet_in_wave(
        &mut self,
        at_risk: &AtRiskSet,
        first_seen: &BTreeMap<InstanceId, Timestamp>,
        now: Timestamp,
        times: &BurstTimes,
    ) -> Duration {
        let BurstTimes { group_quiet, coalesce_max, .. } = *times;
        let this_wave = |t: &Timestamp| *t <= now && now.since(*t) < coalesce_max * 2;
        let mut groups_in_wave = 0usize;
        let widest = at_risk
            .by_group
            .values()
            .filter_map(|instances| {
                let mut seen: Vec<Timestamp> =
                    instances.keys().filter_map(|i| first_seen.get(i)).copied().filter(this_wave).collect();
                groups_in_wave += usize::from(!seen.is_empty());
                seen.sort_unstable();
                // A gap past `coalesce_max` parts two bursts of the group, not two nodes of one.
                seen.windows(2).map(|w| w[1].since(w[0])).filter(|gap| *gap < coalesce_max).max()
            })
            .max()
            .unwrap_or_default();
        let gap = if !widest.is_zero() {
            self.last_wave_gap = widest;
            widest
        } else if groups_in_wave > 1 {
            self.last_wave_gap
        } else {
            Duration::ZERO
        };
        (gap * 3 / 2).min(coalesce_max).max(group_quiet)
    }
}

/// Whether nodes are still becoming at risk somewhere: one did less than `coalesce_quiet` ago
/// (the pass came at the settle limit, not after a pause).
fn wave_arriving(first_seen: &BTreeMap<InstanceId, Timestamp>, now: Timestamp, times: &BurstTimes) -> bool {
    first_seen.values().filter(|t| **t <= now).max().is_some_and(|newest| now.since(*newest) < times.coalesce_quiet)
}

/// Whether `boost`'s group is still in the middle of its burst: a node of it became at risk less
/// than `group_quiet` ago, and its first less than `coalesce_max` ago. A time ahead of `now`
/// (another clock) never holds a write back.
fn settling(
    boost: &Boost,
    first_seen: &BTreeMap<InstanceId, Timestamp>,
    now: Timestamp,
    group_quiet: Duration,
    times: &BurstTimes,
) -> bool {
    let seen = || boost.record.instances.iter().filter_map(|i| first_seen.get(i)).copied();
    match (seen().max(), seen().min()) {
        (Some(newest), Some(oldest)) => {
            newest <= now && now.since(newest) < group_quiet && now.since(oldest) < times.coalesce_max
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::model::{BoostRecord, GroupName};
    use crate::core::signals::AtRisk;
    use crate::core::BoostReason;

    const TIMES: BurstTimes = BurstTimes {
        coalesce_quiet: Duration::from_millis(20),
        group_quiet: Duration::from_millis(50),
        coalesce_max: Duration::from_millis(250),
    };

    fn at(ms: i64) -> Timestamp {
        Timestamp::from_millis(ms)
    }

    fn at_risk_since(instance: &str, ms: i64) -> AtRisk {
        AtRisk {
            instance: InstanceId::from(instance),
            node: format!("node-{instance}").as_str().into(),
            kinds: Default::default(),
            first_seen: at(ms),
            evidence: Default::default(),
            deadline: None,
            confirmed: false,
        }
    }

    /// Boosts of each group for its instances, and when each instance was first seen at risk.
    fn wave(groups: &[(&str, &[(&str, i64)])]) -> (Vec<Boost>, AtRiskSet, BTreeMap<InstanceId, Timestamp>) {
        let mut at_risk = AtRiskSet::default();
        let mut first_seen = BTreeMap::new();
        let mut boosts = Vec::new();
        for (group, instances) in groups {
            let ids: Vec<&str> = instances.iter().map(|(i, _)| *i).collect();
            let by = at_risk.by_group.entry(GroupName::from(*group)).or_default();
            for (instance, seen) in *instances {
                by.insert(InstanceId::from(*instance), at_risk_since(instance, *seen));
                first_seen.insert(InstanceId::from(*instance), at(*seen));
            }
            boosts.push(Boost {
                group: GroupName::from(*group),
                from: 3,
                to: 3 + u32::try_from(ids.len()).unwrap(),
                reason: BoostReason::ReplaceAtRisk { needed: 1, at_risk: 1 },
                record: BoostRecord::test(group, &ids, 1, 0),
            });
        }
        (boosts, at_risk, first_seen)
    }

    fn held(pace: &mut WavePace, groups: &[(&str, &[(&str, i64)])], now: i64) -> Vec<String> {
        let (mut boosts, at_risk, first_seen) = wave(groups);
        let all: Vec<String> = boosts.iter().map(|b| b.group.to_string()).collect();
        let count = pace.hold_back_settling(&mut boosts, &at_risk, &first_seen, at(now), &TIMES);
        assert_eq!(count, all.len() - boosts.len());
        all.into_iter().filter(|g| !boosts.iter().any(|b| b.group.as_str() == g)).collect()
    }

    #[test]
    fn a_lone_signal_on_a_quiet_cluster_is_written_at_once() {
        assert!(held(&mut WavePace::default(), &[("a", &[("i-1", 1_000)])], 1_030).is_empty());
    }

    #[test]
    fn while_a_wave_arrives_a_group_waits_for_its_own_quiet_and_one_whose_burst_ended_goes() {
        // b's node came 10 ms ago (the wave still arrives); a's last came 60 ms ago.
        let groups: &[(&str, &[(&str, i64)])] = &[("a", &[("i-a1", 1_000)]), ("b", &[("i-b1", 1_050)])];
        assert_eq!(held(&mut WavePace::default(), groups, 1_060), ["b"]);
        // Past coalesce_max since its first node, even a group still arriving is written.
        let slow: &[(&str, &[(&str, i64)])] = &[("a", &[("i-a1", 1_000), ("i-a2", 1_240)])];
        assert!(held(&mut WavePace::default(), slow, 1_250).is_empty());
    }

    #[test]
    fn a_wave_whose_nodes_come_far_apart_waits_half_again_its_widest_gap() {
        // a's nodes came 120 ms apart: a group is quiet only after 180 ms, so a at 100 ms after its
        // last node still waits though the cluster is quiet.
        let groups: &[(&str, &[(&str, i64)])] = &[("a", &[("i-a1", 1_000), ("i-a2", 1_120)])];
        let mut pace = WavePace::default();
        assert_eq!(held(&mut pace, groups, 1_220), ["a"]);
        assert!(held(&mut pace, groups, 1_310).is_empty(), "180 ms quiet, and past coalesce_max");
    }

    #[test]
    fn the_next_wave_s_head_waits_for_the_gap_the_last_one_showed_but_a_lone_group_does_not() {
        let mut pace = WavePace::default();
        let first: &[(&str, &[(&str, i64)])] = &[("a", &[("i-a1", 1_000), ("i-a2", 1_120)])];
        held(&mut pace, first, 1_130);
        // Ten seconds later two groups' first nodes arrive; neither has shown a gap yet.
        let head: &[(&str, &[(&str, i64)])] = &[("b", &[("i-b1", 11_000)]), ("c", &[("i-c1", 11_030)])];
        assert_eq!(held(&mut pace, head, 11_100), ["b", "c"], "quiet of 180 ms from the last wave");
        let lone: &[(&str, &[(&str, i64)])] = &[("d", &[("i-d1", 21_000)])];
        assert!(held(&mut pace, lone, 21_060).is_empty(), "a lone group is never held for an earlier wave's pace");
    }

    #[test]
    fn a_time_ahead_of_now_never_holds_a_write_back() {
        let groups: &[(&str, &[(&str, i64)])] = &[("a", &[("i-a1", 2_000)])];
        assert!(held(&mut WavePace::default(), groups, 1_000).is_empty());
    }
}
