//! "Never twice, never less" through lost answers and crashes: the scaler and the drainer run a
//! rebalance wave (group `a` of four nodes, two at risk) to its end against the fakes, once
//! cleanly to count its steps, saves and writes, then once per fault: a crash after each step
//! (every in-memory state lost, the ledger re-read from its store), each ledger save applied but
//! answered with an error (with and without the read after it failing), and each AWS write
//! applied but answered with an error whose re-read fails (with and without a crash right
//! after). Whatever the fault, desired capacity never goes above the size before the wave plus
//! the nodes at risk (never boosted twice) nor below the size before (never less), Auto Scaling
//! never has to pick a victim, and the wave ends where the clean run ends: both at-risk
//! instances terminated, the group back at its size.
//!
//! The same wave runs again with `a`'s pool out of capacity: its launches fail, and the boost's
//! nodes move to its fallback `b` (the launch watcher runs too). Then `b` is never raised twice
//! for them, `a` is lowered at most once for them and never below its size, and the wave ends
//! with `b` holding the moved nodes.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::drainer::{Drainer, DrainerSettings};
use super::launch_watcher::{LaunchWatchSettings, LaunchWatcher};
use super::scaler::{Scaler, ScalerSettings};
use super::Clock;
use crate::core::{Evidence, InstanceId, Node, NodeName, Policy, Signal, SignalKind, SizingMode, Timestamp};
use crate::fakes::{FakeAutoScaling, FakePorts, FakeRig};
use crate::metrics::Metrics;

type TestScaler = Scaler<FakePorts>;
type TestDrainer = Drainer<FakePorts>;
type TestWatcher = LaunchWatcher<FakePorts>;

const BEFORE: u32 = 4;
/// The fallback group's size before the wave.
const BEFORE_B: u32 = 2;
const NO_CAPACITY: &str = "Could not launch Spot Instances. InsufficientInstanceCapacity - There is no Spot capacity \
                           available that matches your request. Launching EC2 instance failed.";
const AT_RISK: [&str; 2] = ["n1", "n2"];
const ROUNDS: usize = 40;
/// Steps per round: launch watcher, scaler, launch, drainer, reap.
const STEPS: usize = 5;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Fault {
    None,
    /// The process dies after this step (0-based, counted over the whole run).
    CrashAfter(usize),
    /// This ledger save (1-based) applies, then answers an error; optionally the read after it
    /// fails too.
    LedgerAnswerLost {
        save: u32,
        read_fails: bool,
    },
    /// This AWS write (1-based) applies, then answers an error, and the re-read after it fails;
    /// optionally the process dies right after that step.
    WriteAnswerLost {
        write: u32,
        then_crash: bool,
    },
}

/// What a run did, for the assertions.
#[derive(Debug)]
struct Run {
    steps: usize,
    saves: u32,
    writes: u32,
    lowest: u32,
    highest: u32,
    victims: Vec<InstanceId>,
    final_desired: u32,
    at_risk_left: Vec<InstanceId>,
    /// The fallback group's highest and final desired capacity.
    highest_b: u32,
    final_b: u32,
}

struct World {
    /// `a`'s pool has no capacity; `b` is its fallback.
    exhausted: bool,
    sizing: SizingMode,
    rig: FakeRig,
    clock: Clock,
    launched: u32,
    victims: Vec<InstanceId>,
}

impl World {
    fn new(sizing: SizingMode, exhausted: bool) -> World {
        let mut aws = FakeAutoScaling::default()
            .with_group("a", BEFORE, 20)
            .with_tag("a", crate::ports::FALLBACK_GROUPS_TAG, "b")
            .with_group("b", BEFORE_B, 20);
        for k in 1..=BEFORE {
            aws = aws.with_instance("a", &format!("i-n{k}"));
        }
        for k in 1..=BEFORE_B {
            aws = aws.with_instance("b", &format!("i-m{k}"));
        }
        let rig = FakeRig::new(aws);
        for k in 1..=BEFORE {
            let mut node = Node::test(&format!("n{k}"), "a").with_pods(3, 500, 1 << 30);
            node.group = None;
            rig.cluster.put_node(node);
        }
        for k in 1..=BEFORE_B {
            let mut node = Node::test(&format!("m{k}"), "b");
            node.group = None;
            rig.cluster.put_node(node);
        }
        let start = Instant::now();
        let clock: Clock =
            Arc::new(move || Timestamp::from_millis(1_000_000 + i64::try_from(start.elapsed().as_millis()).unwrap()));
        for name in AT_RISK {
            rig.cluster.edit(|s| s.nodes.get_mut(&NodeName::from(name)).unwrap().cordoned = true);
            rig.cluster.signal(Signal {
                instance: InstanceId::from(format!("i-{name}")),
                node: name.into(),
                kind: SignalKind::Rebalance,
                observed_at: clock(),
                evidence: Evidence::Event,
                notice_deadline: None,
            });
        }
        World { exhausted, sizing, rig, clock, launched: 0, victims: Vec::new() }
    }

    /// A new process: every in-memory state starts afresh; the ledger is loaded from its store.
    async fn workers(&self) -> (TestWatcher, TestScaler, TestDrainer) {
        let policy = Policy {
            sizing: self.sizing,
            max_boost_per_group: 100,
            drain_timeout: Duration::from_secs(300),
            eviction_backoff_initial: Duration::from_secs(5),
            eviction_backoff_max: Duration::from_secs(60),
            // One node at a time, so the terminations (and the faults between them) are apart.
            max_concurrent_drains: 1,
            ..Policy::default()
        };
        let ctx = self.rig.context(policy, self.clock.clone(), Arc::new(Metrics::new())).await;
        let scaler = Scaler::new(ctx.clone(), ScalerSettings::default());
        (
            LaunchWatcher::new(ctx.clone(), LaunchWatchSettings::default()).waking(scaler.waker()),
            scaler,
            Drainer::new(ctx, DrainerSettings::default()),
        )
    }

    /// Auto Scaling brings the group to its desired capacity: new instances join as Ready nodes;
    /// a group above it terminates its newest instance, whatever runs there.
    fn launch(&mut self) {
        for group in ["a", "b"] {
            let aws = self.rig.aws.clone();
            let desired = aws.desired(group) as usize;
            if self.exhausted && group == "a" && aws.instances(group).len() < desired {
                aws.fail_launch(group, NO_CAPACITY, (self.clock)());
            }
            while aws.instances(group).len() < desired && !(self.exhausted && group == "a") {
                self.launched += 1;
                let name = format!("r{}", self.launched);
                aws.clone().with_instance(group, &format!("i-{name}"));
                let mut node = Node::test(&name, group);
                node.group = None;
                node.created = (self.clock)();
                self.rig.cluster.put_node(node);
            }
            while aws.instances(group).len() > desired {
                let victim = aws.instances(group).pop().unwrap();
                aws.remove_instance(&victim);
                self.victims.push(victim);
            }
        }
    }

    /// A terminated instance's node leaves the cluster.
    fn reap(&self) {
        let mut members = self.rig.aws.instances("a");
        members.extend(self.rig.aws.instances("b"));
        self.rig.cluster.edit(|s| {
            s.nodes.retain(|_, n| n.instance.as_ref().is_none_or(|i| members.contains(i)));
        });
    }
}

async fn run(sizing: SizingMode, exhausted: bool, fault: Fault) -> Run {
    let mut world = World::new(sizing, exhausted);
    let (mut watcher, mut scaler, mut drainer) = world.workers().await;
    let (mut lowest, mut highest, mut highest_b) = (BEFORE, BEFORE, BEFORE_B);
    match fault {
        Fault::LedgerAnswerLost { save, read_fails } => {
            world.rig.ledger.lose_answer_of_save(save);
            if read_fails {
                world.rig.ledger.fail_next_loads(1);
            }
        }
        Fault::WriteAnswerLost { write, .. } => world.rig.aws.lose_answer_of_write(write),
        Fault::None | Fault::CrashAfter(_) => {}
    }
    let mut step = 0;
    for _ in 0..ROUNDS {
        for kind in 0..STEPS {
            let writes_before = world.rig.aws.writes_sent();
            // Errors are what the run loops log and retry at the next tick.
            match kind {
                0 => drop(watcher.tick().await),
                1 => drop(scaler.tick().await),
                2 => world.launch(),
                3 => drop(drainer.tick().await),
                _ => world.reap(),
            }
            let desired = world.rig.aws.desired("a");
            lowest = lowest.min(desired);
            highest = highest.max(desired);
            highest_b = highest_b.max(world.rig.aws.desired("b"));
            let lost_here = matches!(fault, Fault::WriteAnswerLost { write, then_crash: true }
                if writes_before < write && world.rig.aws.writes_sent() >= write);
            if fault == Fault::CrashAfter(step) || lost_here {
                (watcher, scaler, drainer) = world.workers().await;
            }
            step += 1;
        }
        tokio::time::advance(Duration::from_secs(5)).await;
    }
    let members = world.rig.aws.instances("a");
    Run {
        steps: step,
        saves: world.rig.ledger.saves(),
        writes: world.rig.aws.writes_sent(),
        lowest,
        highest,
        victims: world.victims,
        final_desired: world.rig.aws.desired("a"),
        highest_b,
        final_b: world.rig.aws.desired("b"),
        at_risk_left: AT_RISK
            .iter()
            .map(|n| InstanceId::from(format!("i-{n}")))
            .filter(|i| members.contains(i))
            .collect(),
    }
}

fn check(fault: Fault, run: &Run, added: u32, exhausted: bool) {
    let most = BEFORE + added;
    assert!(run.highest <= most, "{fault:?}: boosted twice (desired reached {}): {run:?}", run.highest);
    assert!(run.lowest >= BEFORE, "{fault:?}: below the size before the wave: {run:?}");
    assert!(run.victims.is_empty(), "{fault:?}: Auto Scaling picked a running instance: {run:?}");
    assert!(run.at_risk_left.is_empty(), "{fault:?}: the wave did not finish: {run:?}");
    assert_eq!(run.final_desired, BEFORE, "{fault:?}: the boost was not given back: {run:?}");
    // The fallback holds exactly the nodes that moved there (left to Cluster Autoscaler), or none.
    let moved = if exhausted { added } else { 0 };
    assert!(run.highest_b <= BEFORE_B + moved, "{fault:?}: the fallback raised twice: {run:?}");
    assert_eq!(run.final_b, BEFORE_B + moved, "{fault:?}: {run:?}");
}

/// Every fault against the wave sized by `sizing`, whose clean run adds `added` nodes (`exhausted`:
/// in the fallback, `a`'s pool having no capacity).
async fn every_fault(sizing: SizingMode, added: u32, exhausted: bool) {
    let clean = run(sizing, exhausted, Fault::None).await;
    check(Fault::None, &clean, added, exhausted);
    assert_eq!(clean.highest, BEFORE + added, "the clean wave's boost: {clean:?}");
    assert!(clean.writes >= 3 && clean.saves >= 4, "one raise and two terminations at least: {clean:?}");

    let mut faults = Vec::new();
    // Crashes matter while the wave runs; after it, a restart has nothing left to do.
    faults.extend((0..clean.steps / 2).map(Fault::CrashAfter));
    for save in 1..=clean.saves {
        faults.push(Fault::LedgerAnswerLost { save, read_fails: false });
        faults.push(Fault::LedgerAnswerLost { save, read_fails: true });
    }
    for write in 1..=clean.writes {
        faults.push(Fault::WriteAnswerLost { write, then_crash: false });
        faults.push(Fault::WriteAnswerLost { write, then_crash: true });
    }
    for fault in faults {
        check(fault, &run(sizing, exhausted, fault).await, added, exhausted);
    }
}

#[tokio::test(start_paused = true)]
async fn never_twice_never_less_through_lost_answers_and_crashes_at_every_step() {
    // One node per at-risk node: every termination gives one back.
    every_fault(SizingMode::Count, 2, false).await;
}

#[tokio::test(start_paused = true)]
async fn never_below_the_size_before_when_fewer_nodes_were_added_than_go() {
    // Both at-risk nodes' pods fit one new node: only one termination may decrement.
    every_fault(SizingMode::Pods, 1, false).await;
}

#[tokio::test(start_paused = true)]
async fn a_pool_without_capacity_falls_back_once_through_lost_answers_and_crashes() {
    // The boost's two nodes move to `b`; `a` is lowered back once and ends at its size.
    every_fault(SizingMode::Count, 2, true).await;
}
