//! The capacity gap as the daemon sees it live, with `simulate`'s definition: the pod-seconds
//! that the replacements of pods displaced from at-risk nodes spend Pending.
//!
//! A displaced pod comes back through its controller as a new pod of the same owner, unbound until
//! the scheduler finds it room. Displacements are known two ways: the drainer's own evictions and
//! deletions, as they are answered; and, for whatever else removes them (NTH draining, another
//! tool, the instance's end), pods seen on a node with a signal that are gone from it at the next
//! pass, or whose node is gone. The meter pairs each displacement with an unbound pod of its owner
//! first seen after it began (the oldest of each first), and counts that pod's Pending time until
//! it is bound or gone. Nothing else of the owner's is counted: a pod that was Pending before the
//! displacement waited for other reasons, and a displacement whose owner makes no new pod (it was
//! scaled down) expires uncounted.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::time::Duration;

use super::model::{GroupName, NodeName, OwnerUid, PodUid, Snapshot, Timestamp};

/// How much earlier than its displacement was recorded a replacement may be first seen: the
/// eviction's answer can come after the watch has shown the controller's new pod. A pod seen to
/// leave began to go up to its grace period before that.
const SEEN_BEFORE: Duration = Duration::from_secs(5);

/// A displacement with no replacement after this long is forgotten: its owner will not make one.
const UNREPLACED_FOR: Duration = Duration::from_secs(3600);

/// Displacements kept at once (a storm of a thousand nodes of ten pods is a tenth of it).
const MAX_WAITING: usize = 65_536;

/// How long a counted pod is remembered after its end, so its end still listed by the watch is
/// not paired again.
const FINISHED_KEPT: Duration = Duration::from_secs(300);

/// A displaced pod whose owner will replace it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Displaced {
    /// The pod.
    pub pod: PodUid,
    /// The controller that recreates it.
    pub owner: OwnerUid,
    /// The group of the node it left.
    pub group: GroupName,
    /// When it was evicted or deleted, or seen gone.
    pub at: Timestamp,
    /// The earliest its replacement can have been first seen.
    pub replaced_from: Timestamp,
}

impl Displaced {
    /// A pod the drainer evicted or deleted at `at`.
    pub fn evicted(pod: PodUid, owner: OwnerUid, group: GroupName, at: Timestamp) -> Displaced {
        Displaced { pod, owner, group, at, replaced_from: at.minus(SEEN_BEFORE) }
    }
}

/// A pod on a node with a signal, as the last pass saw it.
#[derive(Debug, Clone)]
struct AtRiskPod {
    node: NodeName,
    owner: OwnerUid,
    group: GroupName,
    grace: Duration,
}

/// A pod with a controller and no node, as the watch saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingPod {
    /// Its UID.
    pub uid: PodUid,
    /// The controller that made it.
    pub owner: OwnerUid,
    /// When the watch first saw it unbound.
    pub since: Timestamp,
    /// When the watch saw it bound or gone, if it has been.
    pub ended: Option<Timestamp>,
}

/// A replacement being counted.
#[derive(Debug, Clone)]
struct Replacing {
    group: GroupName,
    /// Counted up to here.
    counted_to: Timestamp,
}

/// Pairs displacements with their replacements and counts the replacements' Pending time.
#[derive(Debug, Default)]
pub struct GapMeter {
    /// Displacements not paired yet, per owner, oldest first.
    waiting: BTreeMap<OwnerUid, VecDeque<Displaced>>,
    waiting_count: usize,
    replacing: HashMap<PodUid, Replacing>,
    /// Pods counted to their end, and when.
    finished: HashMap<PodUid, Timestamp>,
    /// The displaced pods, when: each is counted once, however it was learnt.
    known: HashMap<PodUid, Timestamp>,
    /// The pods on nodes with a signal at the last pass.
    at_risk: HashMap<PodUid, AtRiskPod>,
}

impl GapMeter {
    /// Records a displacement. Returns false when the meter is full and it is not counted.
    pub fn displaced(&mut self, d: Displaced) -> bool {
        if self.known.contains_key(&d.pod) {
            return true;
        }
        if self.waiting_count >= MAX_WAITING {
            return false;
        }
        self.known.insert(d.pod.clone(), d.at);
        let queue = self.waiting.entry(d.owner.clone()).or_default();
        let at = queue.partition_point(|w| w.at <= d.at);
        queue.insert(at, d);
        self.waiting_count += 1;
        true
    }

    /// Records the pods that left the nodes with a signal since the last call (or whose node
    /// went), and remembers the pods on those nodes now. A node still there whose pods the view
    /// no longer carries tells nothing of them.
    pub fn observe(&mut self, snapshot: &Snapshot, now: Timestamp) {
        let signalled: HashSet<&NodeName> = snapshot.signals.iter().map(|s| &s.node).collect();
        let mut at_risk = HashMap::new();
        for node in snapshot.nodes.values().filter(|n| n.pods_known && signalled.contains(&n.name)) {
            let Some(group) = &node.group else { continue };
            for pod in node.pods.iter().filter(|p| p.class.is_evictable()) {
                let Some(owner) = &pod.owner else { continue };
                let watched = AtRiskPod {
                    node: node.name.clone(),
                    owner: owner.clone(),
                    group: group.clone(),
                    grace: pod.grace(),
                };
                at_risk.insert(pod.uid.clone(), watched);
            }
        }
        let before = std::mem::take(&mut self.at_risk);
        for (uid, was) in before {
            if at_risk.contains_key(&uid) {
                continue;
            }
            let gone = match snapshot.nodes.get(&was.node) {
                None => true,
                Some(node) => node.pods_known && !node.pods.iter().any(|p| p.uid == uid),
            };
            if gone {
                let replaced_from = now.minus(was.grace).minus(SEEN_BEFORE);
                self.displaced(Displaced { pod: uid, owner: was.owner, group: was.group, at: now, replaced_from });
            }
        }
        self.at_risk = at_risk;
    }

    /// Displacements waiting for their replacement.
    pub fn waiting(&self) -> usize {
        self.waiting_count
    }

    /// Whether some replacement is being counted.
    pub fn replacing(&self) -> bool {
        !self.replacing.is_empty()
    }

    /// Pairs the new replacements among `pending` and counts every replacement's Pending time up
    /// to `now` (or to its end): the pod-seconds added since the last measure, per group.
    pub fn measure(&mut self, pending: &[PendingPod], now: Timestamp) -> BTreeMap<GroupName, f64> {
        self.pair(pending);
        let mut added: BTreeMap<GroupName, f64> = BTreeMap::new();
        for pod in pending {
            let Some(r) = self.replacing.get_mut(&pod.uid) else { continue };
            let to = pod.ended.map_or(now, |end| end.min(now));
            let seconds = to.since(r.counted_to).as_secs_f64();
            if seconds > 0.0 {
                *added.entry(r.group.clone()).or_default() += seconds;
            }
            r.counted_to = r.counted_to.max(to);
            if pod.ended.is_some() {
                self.replacing.remove(&pod.uid);
                self.finished.insert(pod.uid.clone(), now);
            }
        }
        let listed: HashSet<&PodUid> = pending.iter().map(|p| &p.uid).collect();
        // A replacement the watch no longer lists at all ended while nobody looked: it counts
        // no further.
        self.replacing.retain(|uid, _| listed.contains(uid));
        self.finished.retain(|_, at| now.since(*at) <= FINISHED_KEPT);
        self.expire(now);
        added
    }

    /// Pairs each owner's unpaired pods, in the order first seen, with its displacements, oldest
    /// first.
    fn pair(&mut self, pending: &[PendingPod]) {
        let mut fresh: Vec<&PendingPod> = pending
            .iter()
            .filter(|p| self.waiting.contains_key(&p.owner))
            .filter(|p| !self.replacing.contains_key(&p.uid) && !self.finished.contains_key(&p.uid))
            .collect();
        fresh.sort_by(|a, b| (a.since, &a.uid).cmp(&(b.since, &b.uid)));
        for pod in fresh {
            let Some(queue) = self.waiting.get_mut(&pod.owner) else { continue };
            let Some(first) = queue.iter().position(|d| d.replaced_from <= pod.since) else { continue };
            let Some(d) = queue.remove(first) else { continue };
            if queue.is_empty() {
                self.waiting.remove(&pod.owner);
            }
            self.waiting_count -= 1;
            self.replacing.insert(pod.uid.clone(), Replacing { group: d.group, counted_to: pod.since.max(d.at) });
        }
    }

    fn expire(&mut self, now: Timestamp) {
        let mut dropped = 0;
        self.waiting.retain(|_, queue| {
            let before = queue.len();
            queue.retain(|d| now.since(d.at) <= UNREPLACED_FOR);
            dropped += before - queue.len();
            !queue.is_empty()
        });
        self.waiting_count -= dropped;
        self.known.retain(|_, at| now.since(*at) <= UNREPLACED_FOR);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_millis(seconds * 1000)
    }

    fn displaced(owner: &str, group: &str, seconds: i64) -> Displaced {
        let pod = format!("{owner}-{group}-{seconds}");
        Displaced::evicted(pod.as_str().into(), owner.into(), group.into(), at(seconds))
    }

    fn pending(uid: &str, owner: &str, since: i64, ended: Option<i64>) -> PendingPod {
        PendingPod { uid: uid.into(), owner: owner.into(), since: at(since), ended: ended.map(at) }
    }

    fn total(added: &BTreeMap<GroupName, f64>) -> f64 {
        added.values().sum()
    }

    #[test]
    fn a_replacement_counts_from_its_displacement_to_its_binding() {
        let mut meter = GapMeter::default();
        meter.displaced(displaced("rs-web", "spot-a", 100));
        assert_eq!(total(&meter.measure(&[pending("p1", "rs-web", 101, None)], at(103))), 2.0);
        assert_eq!(total(&meter.measure(&[pending("p1", "rs-web", 101, None)], at(110))), 7.0);
        let added = meter.measure(&[pending("p1", "rs-web", 101, Some(112))], at(113));
        assert_eq!(added.get(&GroupName::from("spot-a")), Some(&2.0), "to its end, not to the measure");
        assert!(meter.measure(&[pending("p1", "rs-web", 101, Some(112))], at(114)).is_empty(), "counted once");
    }

    #[test]
    fn a_replacement_bound_between_two_measures_still_counts() {
        let mut meter = GapMeter::default();
        meter.displaced(displaced("rs-web", "spot-a", 100));
        let added = meter.measure(&[pending("p1", "rs-web", 100, Some(101))], at(102));
        assert_eq!(total(&added), 1.0);
        assert_eq!(meter.waiting(), 0);
    }

    #[test]
    fn a_replacement_seen_before_its_eviction_was_answered_counts_from_the_eviction() {
        let mut meter = GapMeter::default();
        meter.displaced(displaced("rs-web", "spot-a", 100));
        let added = meter.measure(&[pending("p1", "rs-web", 98, None)], at(104));
        assert_eq!(total(&added), 4.0);
    }

    #[test]
    fn a_pod_pending_before_the_displacement_is_not_its_replacement() {
        let mut meter = GapMeter::default();
        meter.displaced(displaced("rs-web", "spot-a", 100));
        let old = pending("stuck", "rs-web", 10, None);
        assert!(meter.measure(std::slice::from_ref(&old), at(120)).is_empty());
        let added = meter.measure(&[old, pending("p1", "rs-web", 121, None)], at(125));
        assert_eq!(total(&added), 4.0, "the new pod is the replacement");
    }

    #[test]
    fn other_owners_pods_and_more_pods_than_displacements_are_not_counted() {
        let mut meter = GapMeter::default();
        meter.displaced(displaced("rs-web", "spot-a", 100));
        meter.displaced(displaced("rs-web", "spot-b", 101));
        let pods = [
            pending("p1", "rs-web", 102, None),
            pending("p2", "rs-web", 102, None),
            pending("p3", "rs-web", 103, None),
            pending("q1", "rs-api", 102, None),
        ];
        let added = meter.measure(&pods, at(110));
        assert_eq!(added.get(&GroupName::from("spot-a")), Some(&8.0));
        assert_eq!(added.get(&GroupName::from("spot-b")), Some(&8.0), "two displacements: two replacements");
        assert_eq!(total(&meter.measure(&pods, at(111))), 2.0);
    }

    #[test]
    fn a_replacement_that_vanished_unseen_counts_no_further() {
        let mut meter = GapMeter::default();
        meter.displaced(displaced("rs-web", "spot-a", 100));
        meter.measure(&[pending("p1", "rs-web", 100, None)], at(101));
        assert!(meter.measure(&[], at(200)).is_empty());
        assert!(meter.measure(&[pending("p1", "rs-web", 100, None)], at(201)).is_empty(), "not paired again");
    }

    #[test]
    fn a_displacement_never_replaced_expires() {
        let mut meter = GapMeter::default();
        meter.displaced(displaced("rs-web", "spot-a", 100));
        meter.measure(&[], at(100 + 3601));
        assert_eq!(meter.waiting(), 0);
        assert!(meter.measure(&[pending("p1", "rs-web", 3702, None)], at(3710)).is_empty());
    }

    #[test]
    fn the_meter_is_bounded() {
        let mut meter = GapMeter::default();
        for i in 0..MAX_WAITING {
            assert!(meter.displaced(displaced(&format!("rs-{i}"), "spot-a", 100)));
        }
        assert!(meter.displaced(displaced("rs-0", "spot-a", 100)), "known already");
        assert!(!meter.displaced(displaced("rs-last", "spot-a", 100)));
        assert_eq!(meter.waiting(), MAX_WAITING);
    }

    #[test]
    fn a_displacement_learnt_twice_is_counted_once() {
        let mut meter = GapMeter::default();
        meter.displaced(displaced("rs-web", "spot-a", 100));
        meter.displaced(displaced("rs-web", "spot-a", 100));
        assert_eq!(meter.waiting(), 1);
    }

    mod seen_leaving {
        use super::*;
        use crate::core::model::{Evidence, Node, Signal, SignalKind};

        fn snapshot(nodes: Vec<Node>, signalled: &[&str]) -> Snapshot {
            let signals = signalled
                .iter()
                .map(|n| Signal {
                    instance: format!("i-{n}").as_str().into(),
                    node: (*n).into(),
                    kind: SignalKind::Rebalance,
                    observed_at: at(0),
                    evidence: Evidence::NodeTaint,
                    notice_deadline: None,
                })
                .collect();
            Snapshot {
                nodes: nodes
                    .into_iter()
                    .map(|mut n| {
                        n.pods_known = true;
                        (n.name.clone(), n)
                    })
                    .collect(),
                signals,
                ..Snapshot::default()
            }
        }

        fn node(name: &str, pods: usize) -> Node {
            let mut n = Node::test(name, "spot-a").with_pods(pods, 100, 1 << 20);
            for (k, p) in n.pods.iter_mut().enumerate() {
                p.owner = Some(format!("rs-{k}").as_str().into());
            }
            n
        }

        #[test]
        fn pods_gone_from_a_signalled_node_are_displaced_and_their_replacements_counted() {
            let mut meter = GapMeter::default();
            meter.observe(&snapshot(vec![node("n1", 2), node("n2", 2)], &["n1"]), at(100));
            let mut n1 = node("n1", 2);
            n1.pods.remove(0);
            meter.observe(&snapshot(vec![n1, node("n2", 2)], &["n1"]), at(110));
            assert_eq!(meter.waiting(), 1, "n1's first pod left; n2 has no signal");
            // Replaced while the old pod spent its grace period terminating.
            let added = meter.measure(&[pending("new", "rs-0", 90, None)], at(112));
            assert_eq!(total(&added), 2.0, "counted from when the pod was seen gone");
        }

        #[test]
        fn a_signalled_node_that_goes_displaces_its_pods() {
            let mut meter = GapMeter::default();
            meter.observe(&snapshot(vec![node("n1", 3)], &["n1"]), at(100));
            meter.observe(&snapshot(vec![], &[]), at(101));
            assert_eq!(meter.waiting(), 3);
        }

        #[test]
        fn a_node_whose_signal_ended_tells_nothing_of_its_pods() {
            let mut meter = GapMeter::default();
            meter.observe(&snapshot(vec![node("n1", 3)], &["n1"]), at(100));
            let mut quiet = node("n1", 0);
            quiet.pods_known = false;
            let mut view = snapshot(vec![], &[]);
            view.nodes.insert(quiet.name.clone(), quiet);
            meter.observe(&view, at(101));
            assert_eq!(meter.waiting(), 0);
        }

        #[test]
        fn a_pod_the_drainer_evicted_is_not_counted_again_when_it_is_seen_gone() {
            let mut meter = GapMeter::default();
            let n1 = node("n1", 1);
            let uid = n1.pods[0].uid.clone();
            meter.observe(&snapshot(vec![n1], &["n1"]), at(100));
            meter.displaced(Displaced::evicted(uid, "rs-0".into(), "spot-a".into(), at(101)));
            meter.observe(&snapshot(vec![node("n1", 0)], &["n1"]), at(130));
            assert_eq!(meter.waiting(), 1);
        }
    }
}
