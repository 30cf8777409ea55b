use tokio::time::Instant;

use super::*;
use crate::core::FinishedDrain;
use crate::core::{Evidence, PendingPod, Policy, Signal, SignalKind, SizingMode};
use crate::fakes::{AsgCall, ClusterCall, FakeAutoScaling, FakeContext, FakeRig};
use crate::metrics::Metrics;
use crate::ports::Leadership;
use crate::workers::scaler::{Scaler, ScalerSettings};
use crate::workers::Clock;

mod ends_and_deadlines;

type Rigged<T> = (FakeRig, Arc<FakeContext>, Scaler<crate::fakes::FakePorts>, T);

type TestDrainer = Drainer<crate::fakes::FakePorts>;

/// `now` follows tokio's (paused) clock from 1,000 s.
fn paused_clock() -> Clock {
    let start = Instant::now();
    Arc::new(move || Timestamp::from_millis(1_000_000 + start.elapsed().as_millis() as i64))
}

fn policy() -> Policy {
    Policy {
        sizing: SizingMode::Count,
        max_boost_per_group: 100,
        drain_timeout: Duration::from_secs(300),
        eviction_backoff_initial: Duration::from_secs(5),
        eviction_backoff_max: Duration::from_secs(60),
        ..Policy::default()
    }
}

/// Group `a` (desired 3) with n1..n3; n1 is cordoned by NTH with three pods and at risk.
async fn rebalanced(policy: Policy) -> Rigged<TestDrainer> {
    let aws = FakeAutoScaling::default()
        .with_group("a", 3, 10)
        .with_instance("a", "i-n1")
        .with_instance("a", "i-n2")
        .with_instance("a", "i-n3");
    let rig = FakeRig::new(aws);
    for name in ["n1", "n2", "n3"] {
        let mut node = Node::test(name, "a").with_pods(3, 500, 1 << 30);
        node.group = None; // resolved through Auto Scaling, as in the daemon
        rig.cluster.put_node(node);
    }
    rig.cluster.edit(|s| s.nodes.get_mut(&NodeName::from("n1")).unwrap().cordoned = true);
    let ctx = rig.context(policy, paused_clock(), Arc::new(Metrics::new())).await;
    rig.cluster.signal(Signal {
        instance: "i-n1".into(),
        node: "n1".into(),
        kind: SignalKind::Rebalance,
        observed_at: (ctx.clock)(),
        // NTH's Event, believed because NTH cordoned n1 and its instance is spot.
        evidence: Evidence::Event,
        notice_deadline: None,
    });
    let scaler = Scaler::new(ctx.clone(), ScalerSettings::default());
    let drainer = Drainer::new(ctx.clone(), DrainerSettings::default());
    (rig, ctx, scaler, drainer)
}

/// A replacement joins group `a`, Ready.
fn join(rig: &FakeRig, ctx: &FakeContext, name: &str) {
    let mut node = Node::test(name, "a");
    node.created = (ctx.clock)();
    rig.cluster.put_node(node);
}

#[tokio::test(start_paused = true)]
async fn the_replacements_of_the_pods_it_evicts_count_their_pending_time_as_the_capacity_gap() {
    let (rig, ctx, mut scaler, mut drainer) = rebalanced(policy()).await;
    scaler.tick().await.unwrap();
    join(&rig, &ctx, "r1");
    assert_eq!(drainer.tick().await.unwrap().evicted, 3);
    // The ReplicaSet makes three new pods; the scheduler has not placed them yet.
    let since = (ctx.clock)();
    let replacements = |ended: Option<Timestamp>| {
        (0..3)
            .map(|k| PendingPod { uid: format!("new-{k}").as_str().into(), owner: "uid-owner".into(), since, ended })
            .collect::<Vec<_>>()
    };
    rig.cluster.set_pending(replacements(None));
    tokio::time::advance(Duration::from_secs(10)).await;
    drainer.tick().await.unwrap();
    let gap = ctx.metrics.market.capacity_gap_total();
    assert!((gap - 30.0).abs() < 0.5, "three pods Pending for 10 s: {gap}");

    rig.cluster.set_pending(replacements(Some(since.plus(Duration::from_secs(12)))));
    tokio::time::advance(Duration::from_secs(10)).await;
    drainer.tick().await.unwrap();
    drainer.tick().await.unwrap();
    let gap = ctx.metrics.market.capacity_gap_total();
    assert!((gap - 36.0).abs() < 0.5, "bound 12 s after they appeared: {gap}");
    assert!(ctx.metrics.encode().contains("spots_booster_capacity_gap_pod_seconds_total{group=\"a\"}"));
}

#[tokio::test(start_paused = true)]
async fn pods_lost_with_a_signalled_node_count_as_displaced_by_the_leader_alone() {
    for leading in [true, false] {
        let (rig, ctx, _scaler, mut drainer) = rebalanced(policy()).await;
        ctx.leadership.set(leading);
        drainer.tick().await.unwrap();
        // AWS takes n1 before any drain: its three pods go with it, and come back Pending.
        rig.cluster.remove_node("n1");
        drainer.tick().await.unwrap();
        let since = (ctx.clock)();
        rig.cluster.set_pending(
            (0..3)
                .map(|k| PendingPod {
                    uid: format!("new-{k}").as_str().into(),
                    owner: "uid-owner".into(),
                    since,
                    ended: None,
                })
                .collect(),
        );
        tokio::time::advance(Duration::from_secs(10)).await;
        drainer.tick().await.unwrap();
        let gap = ctx.metrics.market.capacity_gap_total();
        let expected = if leading { 30.0 } else { 0.0 };
        assert!((gap - expected).abs() < 0.5, "leading: {leading}: {gap}");
    }
}

fn terminations(aws: &FakeAutoScaling) -> Vec<(InstanceId, bool)> {
    aws.calls().into_iter().filter_map(|c| if let AsgCall::Terminate(i, d) = c { Some((i, d)) } else { None }).collect()
}

#[tokio::test(start_paused = true)]
async fn drains_only_once_the_replacement_is_ready_then_terminates_with_decrement() {
    let (rig, ctx, mut scaler, mut drainer) = rebalanced(policy()).await;
    scaler.tick().await.unwrap();
    assert_eq!(rig.aws.desired("a"), 4);

    tokio::time::advance(Duration::from_secs(5)).await;
    let report = drainer.tick().await.unwrap();
    assert!(report.started.is_empty(), "no replacement Ready yet: {report:?}");
    assert!(rig.writes.evicted().is_empty());

    join(&rig, &ctx, "r1");
    let report = drainer.tick().await.unwrap();
    assert_eq!(report.started, vec![NodeName::from("n1")]);
    assert_eq!(report.evicted, 3);
    assert!(rig.writes.calls().contains(&ClusterCall::Protect("r1".into(), true)), "{:?}", rig.writes.calls());
    // NTH already cordoned it: the call takes it out of load balancers.
    assert!(rig.writes.calls().contains(&ClusterCall::Cordon("n1".into())), "{:?}", rig.writes.calls());

    let report = drainer.tick().await.unwrap();
    assert_eq!(report.drained, vec![NodeName::from("n1")]);
    assert_eq!(terminations(&rig.aws), vec![("i-n1".into(), true)]);
    assert_eq!(rig.aws.desired("a"), 3, "the boost is given back");
    assert_eq!(rig.ledger.saved().records[0].returned, 1);
    assert_eq!(rig.events.reasons_for("n1"), vec!["BoostRequested", "DrainStarted", "InstanceTerminated"]);

    // The node leaves; the boost closes and the replacement's protection is lifted.
    rig.cluster.remove_node("n1");
    scaler.tick().await.unwrap();
    assert!(rig.ledger.saved().records.is_empty());
    drainer.tick().await.unwrap();
    assert!(rig.cluster.protected().is_empty());
    assert_eq!(terminations(&rig.aws).len(), 1, "terminated once");
}

#[tokio::test(start_paused = true)]
async fn an_opt_out_defers_a_voluntary_drain_until_a_confirmed_interruption_overrides_it() {
    let (rig, ctx, mut scaler, mut drainer) = rebalanced(policy()).await;
    rig.cluster.edit(|s| {
        let pods = &mut s.nodes.get_mut(&NodeName::from("n1")).unwrap().pods;
        pods[0].opt_out = Some(crate::core::OptOut::DoNotDisrupt);
        pods[1].bare = true;
    });
    scaler.tick().await.unwrap();
    join(&rig, &ctx, "r1");
    for _ in 0..3 {
        let report = drainer.tick().await.unwrap();
        assert!(report.started.is_empty(), "a rebalance leaves an opted-out pod alone: {report:?}");
    }
    assert!(rig.writes.evicted().is_empty());
    assert_eq!(rig.events.reasons_for("n1"), vec!["BoostRequested", "DrainDeferred"], "told once");

    rig.cluster.signal(Signal {
        instance: "i-n1".into(),
        node: "n1".into(),
        kind: SignalKind::SpotInterruption,
        observed_at: (ctx.clock)(),
        evidence: Evidence::Event,
        notice_deadline: None,
    });
    scaler.tick().await.unwrap();
    assert_eq!(rig.aws.interruption_lookups(), 0, "a boost never waits for EC2's confirmation");
    let report = drainer.tick().await.unwrap();
    assert!(report.started.is_empty(), "an Event on a spot instance is a warning: {report:?}");
    assert_eq!(rig.aws.interruption_lookups(), 1, "the drain asks");
    rig.aws.interrupt("i-n1");
    assert!(drainer.tick().await.unwrap().started.is_empty(), "EC2's \"no\" is used for 5 s");
    tokio::time::advance(Duration::from_secs(5)).await;
    let report = drainer.tick().await.unwrap();
    assert_eq!(report.started, vec![NodeName::from("n1")], "EC2 marked it: the instance goes anyway");
    assert_eq!(report.evicted, 3);
    assert_eq!(
        rig.events.reasons_for("n1"),
        vec!["BoostRequested", "DrainDeferred", "OptOutOverridden", "BarePodsEvicted", "DrainStarted"]
    );
}

#[tokio::test(start_paused = true)]
async fn a_pdb_refusal_backs_off_and_tells_once_then_the_drain_completes() {
    let (rig, ctx, mut scaler, mut drainer) = rebalanced(policy()).await;
    rig.writes.block("uid-n1-p0", true);
    scaler.tick().await.unwrap();
    join(&rig, &ctx, "r1");
    let report = drainer.tick().await.unwrap();
    assert_eq!((report.evicted, report.blocked), (2, 1));

    // Within the backoff (5 s) nothing is retried.
    tokio::time::advance(Duration::from_secs(2)).await;
    let report = drainer.tick().await.unwrap();
    assert_eq!((report.evicted, report.blocked), (0, 0));
    tokio::time::advance(Duration::from_secs(4)).await;
    let report = drainer.tick().await.unwrap();
    assert_eq!(report.blocked, 1, "retried after the backoff");
    assert_eq!(rig.events.reasons_for("n1").iter().filter(|r| **r == "DrainBlockedByPDB").count(), 1);
    assert!(terminations(&rig.aws).is_empty(), "never terminated while a pod is left");

    rig.writes.block("uid-n1-p0", false);
    tokio::time::advance(Duration::from_secs(11)).await;
    assert_eq!(drainer.tick().await.unwrap().evicted, 1);
    assert_eq!(drainer.tick().await.unwrap().drained, vec![NodeName::from("n1")]);
    assert_eq!(terminations(&rig.aws), vec![("i-n1".into(), true)]);
}

#[tokio::test(start_paused = true)]
async fn a_drain_that_outlives_its_deadline_stops_and_leaves_the_node_cordoned() {
    let (rig, ctx, mut scaler, mut drainer) = rebalanced(policy()).await;
    rig.writes.linger("uid-n1-p2");
    scaler.tick().await.unwrap();
    join(&rig, &ctx, "r1");
    drainer.tick().await.unwrap();
    for _ in 0..10 {
        tokio::time::advance(Duration::from_secs(30)).await;
        drainer.tick().await.unwrap();
    }
    assert_eq!(drainer.state().finished.get(&InstanceId::from("i-n1")), Some(&FinishedDrain::TimedOut));
    assert!(terminations(&rig.aws).is_empty(), "--terminate-after-drain-timeout is off");
    assert!(rig.events.reasons_for("n1").contains(&"DrainTimedOut"));
    let evictions = rig.writes.calls().iter().filter(|c| matches!(c, ClusterCall::Evict(..))).count();
    assert_eq!(evictions, 3, "an evicted pod that lingers is waited for, not evicted again");
}

#[tokio::test(start_paused = true)]
async fn a_failed_termination_is_retried_and_gives_back_once() {
    let (rig, ctx, mut scaler, mut drainer) = rebalanced(policy()).await;
    scaler.tick().await.unwrap();
    join(&rig, &ctx, "r1");
    drainer.tick().await.unwrap();
    rig.aws.fail_terminations(1);
    let report = drainer.tick().await.unwrap();
    assert!(report.terminated.is_empty());
    let report = drainer.tick().await.unwrap();
    assert_eq!(report.terminated, vec![("i-n1".into(), true)]);
    drainer.tick().await.unwrap();
    assert_eq!(terminations(&rig.aws).len(), 2, "one failure, one success");
    assert_eq!(rig.ledger.saved().records[0].returned, 1);
    assert_eq!(rig.aws.desired("a"), 3);
}

#[tokio::test(start_paused = true)]
async fn losing_the_lease_stops_evictions_at_once() {
    let (rig, ctx, mut scaler, mut drainer) = rebalanced(policy()).await;
    rig.writes.block("uid-n1-p0", true);
    scaler.tick().await.unwrap();
    join(&rig, &ctx, "r1");
    drainer.tick().await.unwrap();
    let before = rig.writes.calls().len();

    rig.leadership.set(false);
    rig.writes.block("uid-n1-p0", false);
    tokio::time::advance(Duration::from_secs(60)).await;
    let report = drainer.tick().await.unwrap();
    assert_eq!(report.not_leader, 0, "nothing new to start");
    assert_eq!(rig.writes.calls().len(), before, "no write after the lease is lost");
    assert!(drainer.state().in_progress.is_empty());

    // The new leader (here: the same replica, again) re-plans and finishes the drain.
    let follower = FakeRig { leadership: Leadership::always(), ..rig.clone() };
    let ctx2 = follower.context(policy(), paused_clock(), Arc::new(Metrics::new())).await;
    let mut next = Drainer::new(ctx2, DrainerSettings::default());
    assert_eq!(next.tick().await.unwrap().started, vec![NodeName::from("n1")]);
    assert_eq!(next.tick().await.unwrap().drained, vec![NodeName::from("n1")]);
    assert_eq!(terminations(&rig.aws), vec![("i-n1".into(), true)]);
}

#[tokio::test(start_paused = true)]
async fn a_drain_survives_its_signal_vanishing_and_stops_if_someone_uncordons() {
    let (rig, ctx, mut scaler, mut first) = rebalanced(policy()).await;
    rig.writes.block("uid-n1-p0", true);
    scaler.tick().await.unwrap();
    join(&rig, &ctx, "r1");
    first.tick().await.unwrap();
    // The Event expires (and the daemon restarts): the ledger still knows n1 was at risk.
    rig.cluster.edit(|s| s.signals.clear());
    let mut restarted = Drainer::new(ctx.clone(), DrainerSettings::default());
    assert_eq!(restarted.tick().await.unwrap().started, vec![NodeName::from("n1")]);
    assert!(terminations(&rig.aws).is_empty(), "a PDB still holds one pod: no termination");

    rig.cluster.edit(|s| s.nodes.get_mut(&NodeName::from("n1")).unwrap().cordoned = false);
    tokio::time::advance(Duration::from_secs(60)).await;
    rig.writes.block("uid-n1-p0", false);
    let report = restarted.tick().await.unwrap();
    assert!(report.drained.is_empty() && report.terminated.is_empty(), "{report:?}");
    assert!(terminations(&rig.aws).is_empty(), "an uncordoned node is never terminated");

    // The operator wins for good: no later plan, nor a restart, cordons and drains it again.
    for _ in 0..3 {
        tokio::time::advance(Duration::from_secs(30)).await;
        assert!(restarted.tick().await.unwrap().started.is_empty());
    }
    let mut again = Drainer::new(ctx.clone(), DrainerSettings::default());
    assert!(again.tick().await.unwrap().started.is_empty(), "a restart remembers it");
    assert!(!rig.cluster.edit(|s| s.nodes[&NodeName::from("n1")].cordoned).unwrap(), "never cordoned again");
}

/// NTH's taint on n1, no cordon (a rotation looks the same): the drainer cordons it itself.
fn tainted_not_cordoned(rig: &FakeRig) {
    rig.cluster.edit(|s| {
        s.nodes.get_mut(&NodeName::from("n1")).unwrap().cordoned = false;
        for signal in &mut s.signals {
            signal.evidence = Evidence::NodeTaint;
        }
    });
}

#[tokio::test(start_paused = true)]
async fn our_own_cordon_not_yet_seen_by_the_watch_is_not_an_operators_uncordon() {
    let (rig, ctx, mut scaler, mut drainer) = rebalanced(policy()).await;
    tainted_not_cordoned(&rig);
    scaler.tick().await.unwrap();
    join(&rig, &ctx, "r1");
    // The snapshot of this tick predates the cordon the drainer writes in it.
    let report = drainer.tick().await.unwrap();
    assert_eq!(report.started, vec![NodeName::from("n1")]);
    assert!(rig.writes.calls().contains(&ClusterCall::Cordon("n1".into())));
    assert_eq!(report.evicted, 3, "the drain goes on: {report:?}");
    let report = drainer.tick().await.unwrap();
    assert_eq!(report.drained, vec![NodeName::from("n1")]);
    assert_eq!(terminations(&rig.aws), vec![("i-n1".into(), true)]);
}

#[tokio::test(start_paused = true)]
async fn a_drain_whose_cordon_failed_evicts_nothing_and_starts_at_the_next_tick() {
    let (rig, ctx, mut scaler, mut drainer) = rebalanced(policy()).await;
    tainted_not_cordoned(&rig);
    scaler.tick().await.unwrap();
    join(&rig, &ctx, "r1");
    rig.writes.fail_cordons(true);
    let report = drainer.tick().await.unwrap();
    assert!(report.started.is_empty() && report.evicted == 0, "{report:?}");
    assert!(rig.writes.evicted().is_empty(), "no pod leaves a node that is not cordoned");
    assert!(drainer.state().in_progress.is_empty() && drainer.state().evictions.is_empty());

    rig.writes.fail_cordons(false);
    // The attempt counts as the group's batch: the next one keeps --time-between-drains.
    tokio::time::advance(ctx.policy.time_between_drains).await;
    let report = drainer.tick().await.unwrap();
    assert_eq!(report.started, vec![NodeName::from("n1")]);
    assert_eq!(report.evicted, 3);
}

/// Group `a` with n1..n4 (listed by Auto Scaling, no node naming its group); n1 and n2 are
/// cordoned by NTH, at risk, with three pods each, and boosted with their two replacements
/// Ready.
async fn two_at_risk(policy: Policy) -> Rigged<TestDrainer> {
    let mut aws = FakeAutoScaling::default().with_group("a", 4, 10);
    for i in 1..=4 {
        aws = aws.with_instance("a", &format!("i-n{i}"));
    }
    let rig = FakeRig::new(aws);
    for i in 1..=4 {
        let mut node = Node::test(&format!("n{i}"), "a").with_pods(3, 500, 1 << 30);
        node.group = None;
        node.cordoned = i <= 2;
        rig.cluster.put_node(node);
    }
    let ctx = rig.context(policy, paused_clock(), Arc::new(Metrics::new())).await;
    for name in ["n1", "n2"] {
        rig.cluster.signal(Signal {
            instance: format!("i-{name}").as_str().into(),
            node: name.into(),
            kind: SignalKind::Rebalance,
            observed_at: (ctx.clock)(),
            evidence: Evidence::NodeTaint,
            notice_deadline: None,
        });
    }
    let mut scaler = Scaler::new(ctx.clone(), ScalerSettings::default());
    scaler.tick().await.unwrap();
    assert_eq!(rig.aws.desired("a"), 6);
    join(&rig, &ctx, "r1");
    join(&rig, &ctx, "r2");
    let drainer = Drainer::new(ctx.clone(), DrainerSettings::default());
    (rig, ctx, scaler, drainer)
}

#[tokio::test(start_paused = true)]
async fn a_pod_whose_budget_never_allows_disruption_holds_back_only_its_own_node() {
    let (rig, ctx, _scaler, mut drainer) = two_at_risk(policy()).await;
    rig.writes.block("uid-n1-p0", true);
    let report = drainer.tick().await.unwrap();
    assert_eq!(report.started.len(), 2);
    assert_eq!((report.evicted, report.blocked), (5, 1));
    let told = vec!["BoostRequested", "DrainStarted", "DrainBlockedByPDB"];
    assert_eq!(rig.events.reasons_for("n1"), told, "told in the first round");

    let report = drainer.tick().await.unwrap();
    assert_eq!(report.drained, vec![NodeName::from("n2")]);
    assert_eq!(terminations(&rig.aws), vec![("i-n2".into(), true)], "n2 goes at once, not after n1");

    // The budget never moves: n1's drain times out on time and n1 stays, cordoned.
    let started = Instant::now();
    while drainer.state().in_progress.contains_key(&NodeName::from("n1")) {
        tokio::time::advance(Duration::from_secs(2)).await;
        drainer.tick().await.unwrap();
    }
    let waited = started.elapsed();
    assert!(waited >= ctx.policy.drain_timeout && waited <= ctx.policy.drain_timeout + Duration::from_secs(4));
    assert_eq!(drainer.state().finished.get(&InstanceId::from("i-n1")), Some(&FinishedDrain::TimedOut));
    assert!(rig.events.reasons_for("n1").contains(&"DrainTimedOut"));
    assert_eq!(terminations(&rig.aws).len(), 1);
    let told = rig.events.reasons_for("n1").iter().filter(|r| **r == "DrainBlockedByPDB").count();
    assert_eq!(told, 1, "told once per drain");
}

#[tokio::test(start_paused = true)]
async fn a_new_signal_brings_the_next_pass_forward_to_its_burst_s_end() {
    use crate::workers::Worker;
    let (_rig, _ctx, _scaler, drainer) = two_at_risk(policy()).await;
    let signals = Arc::new(tokio::sync::Notify::new());
    let mut drainer = drainer.woken_by(signals.clone());
    signals.notify_one();
    let started = Instant::now();
    drainer.next_pass_due().await;
    assert_eq!(started.elapsed(), SIGNAL_COALESCE);
    let started = Instant::now();
    drainer.next_pass_due().await;
    assert_eq!(started.elapsed(), drainer.settings.tick, "no signal: the tick");
}

#[tokio::test(start_paused = true)]
async fn an_eviction_call_that_never_answers_does_not_hold_the_other_node() {
    let (rig, ctx, _scaler, mut drainer) = two_at_risk(policy()).await;
    rig.writes.stall("uid-n1-p1");
    let started = Instant::now();
    let report = drainer.tick().await.unwrap();
    assert!(started.elapsed() <= DrainerSettings::default().tick, "{:?}", started.elapsed());
    assert_eq!(report.evicted, 5, "every other pod went in the same round");
    assert_eq!(drainer.tick().await.unwrap().drained, vec![NodeName::from("n2")]);
    let failed = || {
        let text = ctx.metrics.encode();
        let line = "spots_booster_evictions_total{group=\"a\",outcome=\"failed\"} ";
        text.lines().find_map(|l| l.strip_prefix(line)?.parse::<u32>().ok()).unwrap_or(0)
    };
    assert_eq!(failed(), 0, "its call still runs: not sent again, nor counted yet");

    // Failed at its own deadline (its task runs beside the passes), folded in at the next
    // pass, and sent again.
    tokio::time::advance(DrainerSettings::default().eviction_call_timeout).await;
    tokio::task::yield_now().await;
    drainer.tick().await.unwrap();
    assert_eq!(failed(), 1);
    tokio::time::advance(DrainerSettings::default().eviction_call_timeout).await;
    tokio::task::yield_now().await;
    drainer.tick().await.unwrap();
    assert_eq!(failed(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_node_s_evictions_go_as_soon_as_its_own_cordon_lands_not_once_every_node_s_has() {
    let (rig, ctx, mut scaler, drainer) = rebalanced(policy()).await;
    let now = (ctx.clock)();
    rig.cluster.edit(|s| {
        s.signals[0].kind = SignalKind::SpotInterruption;
        s.signals[0].evidence = Evidence::NodeTaint;
        s.signals[0].observed_at = now;
        s.signals.push(Signal { instance: "i-n2".into(), node: "n2".into(), ..s.signals[0].clone() });
        s.nodes.get_mut(&NodeName::from("n2")).unwrap().cordoned = true;
    });
    rig.aws.interrupt("i-n1");
    rig.aws.interrupt("i-n2");
    rig.writes.stall_cordon("n1");
    scaler.tick().await.unwrap();

    let mut drainer = drainer;
    let pass = tokio::spawn(async move { drainer.tick().await.map(|r| r.started) });
    tokio::time::sleep(Duration::from_secs(1)).await;
    let evicted: Vec<String> = rig
        .writes
        .calls()
        .into_iter()
        .filter_map(|c| match c {
            ClusterCall::Evict(pod, _) => Some(pod.uid),
            _ => None,
        })
        .collect();
    assert!(!evicted.is_empty() && evicted.iter().all(|uid| uid.starts_with("uid-n2-")), "{evicted:?}");
    // n1's cordon (which also takes it out of load balancers) is still unanswered: none of
    // its pods is evicted until its call's deadline ends the wait.
    let started = pass.await.unwrap().unwrap();
    assert_eq!(started.len(), 2, "NTH cordoned both: n1 drains without the load balancers' label");
}

#[tokio::test(start_paused = true)]
async fn an_operators_uncordon_mid_drain_readmits_the_node_to_load_balancers() {
    let (rig, ctx, mut scaler, mut drainer) = rebalanced(policy()).await;
    rig.writes.block("uid-n1-p0", true);
    scaler.tick().await.unwrap();
    join(&rig, &ctx, "r1");
    drainer.tick().await.unwrap();
    rig.cluster.edit(|s| s.nodes.get_mut(&NodeName::from("n1")).unwrap().cordoned = false);
    tokio::time::advance(Duration::from_secs(30)).await;
    drainer.tick().await.unwrap();
    assert!(rig.writes.calls().contains(&ClusterCall::Readmit("n1".into())), "{:?}", rig.writes.calls());
}

#[tokio::test(start_paused = true)]
async fn a_trusted_interruption_in_a_group_the_tag_filter_leaves_out_is_neither_drained_nor_terminated() {
    let (rig, _ctx, mut scaler, mut drainer) = rebalanced(policy()).await;
    rig.cluster.edit(|s| {
        s.signals[0].kind = SignalKind::SpotInterruption;
        s.signals[0].evidence = Evidence::NodeTaint;
    });
    scaler.start(&["team=batch".parse().unwrap()]).await.unwrap();
    scaler.tick().await.unwrap();
    for _ in 0..10 {
        tokio::time::advance(Duration::from_secs(15)).await;
        let report = drainer.tick().await.unwrap();
        assert!(report.started.is_empty() && report.evicted == 0, "{report:?}");
    }
    assert_eq!(rig.aws.desired("a"), 3, "never raised");
    assert!(terminations(&rig.aws).is_empty(), "never terminated");
    assert!(rig.events.reasons_for("n1").is_empty(), "nothing said of a group it does not serve");
}

#[tokio::test(start_paused = true)]
async fn a_drained_node_is_terminated_only_once_a_live_read_finds_it_empty() {
    let (rig, ctx, mut scaler, mut drainer) = rebalanced(policy()).await;
    scaler.tick().await.unwrap();
    join(&rig, &ctx, "r1");
    let report = drainer.tick().await.unwrap();
    assert_eq!((report.started.len(), report.evicted), (1, 3));
    // A pod bound to n1 just before its cordon, which the watch has not delivered yet.
    rig.writes.bind_unwatched("n1", Pod::test("late", 100, 1 << 20));
    rig.writes.fail_pod_reads(true);
    assert!(drainer.tick().await.unwrap().terminated.is_empty(), "no read, no termination");
    rig.writes.fail_pod_reads(false);
    assert!(drainer.tick().await.unwrap().terminated.is_empty(), "the read found a pod");
    assert_eq!(drainer.tick().await.unwrap().evicted, 1, "the pod only the read saw is evicted");
    assert_eq!(rig.writes.evicted().last().map(String::as_str), Some("uid-late"));
    let report = drainer.tick().await.unwrap();
    assert_eq!(report.terminated, vec![("i-n1".into(), true)], "read empty, then terminated at once");
    let reads =
        rig.writes.calls().iter().filter(|c| matches!(c, ClusterCall::LivePods(n) if n.as_str() == "n1")).count();
    assert_eq!(reads, 3, "one read per pass that found the view empty");
}

#[tokio::test(start_paused = true)]
async fn a_server_error_on_eviction_is_retried_next_round() {
    let (rig, ctx, mut scaler, mut drainer) = rebalanced(policy()).await;
    scaler.tick().await.unwrap();
    join(&rig, &ctx, "r1");
    rig.writes.fail_evictions(true);
    let report = drainer.tick().await.unwrap();
    assert_eq!((report.started.len(), report.evicted), (1, 0));
    rig.writes.fail_evictions(false);
    assert_eq!(drainer.tick().await.unwrap().evicted, 3);
    assert_eq!(drainer.tick().await.unwrap().drained.len(), 1);
    let text = ctx.metrics.encode();
    assert!(text.contains("spots_booster_evictions_total{group=\"a\",outcome=\"failed\"} 3"), "{text}");
    assert!(text.contains("spots_booster_terminations_total{decrement=\"true\",group=\"a\"} 1"), "{text}");
}
