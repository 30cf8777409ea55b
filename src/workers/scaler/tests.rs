use std::sync::atomic::{AtomicI64, Ordering};

use super::*;
use crate::core::{BoostExpiry, Evidence, InstanceId, Node, NodeName, Policy, Signal, SignalKind};
use crate::fakes::{AsgCall, ClusterCall, FakeAutoScaling, FakeContext, FakeRig, InMemoryCluster};
use crate::metrics::Metrics;
use crate::ports::DesiredWrite;
use crate::ports::{ClusterView, Leadership, LedgerError, LedgerStore};

mod leadership;

/// A node of `group` that NTH has cordoned.
fn node(name: &str, group: &str) -> Node {
    Node::test(name, group).cordoned()
}

fn rebalance(cluster: &InMemoryCluster, name: &str, group: &str) {
    cluster.put_node(node(name, group));
    cluster.signal(Signal {
        instance: InstanceId::from(format!("i-{name}")),
        node: name.into(),
        kind: SignalKind::Rebalance,
        observed_at: Timestamp::from_millis(1_000),
        evidence: Evidence::NodeTaint,
        notice_deadline: None,
    });
}

fn count_policy() -> Policy {
    Policy { sizing: crate::core::SizingMode::Count, max_boost_per_group: 100, ..Policy::default() }
}

/// `now` follows tokio's (paused) clock from 10 s: the time the tests move is the workers' only one.
fn paused_clock() -> Clock {
    let start = tokio::time::Instant::now();
    Arc::new(move || Timestamp::from_millis(10_000 + i64::try_from(start.elapsed().as_millis()).unwrap()))
}

type TestScaler = Scaler<crate::fakes::FakePorts>;

async fn context(rig: &FakeRig) -> Arc<FakeContext> {
    rig.context(count_policy(), paused_clock(), Arc::new(Metrics::new())).await
}

async fn scaler(rig: &FakeRig) -> TestScaler {
    Scaler::new(context(rig).await, ScalerSettings::default())
}

fn raises(aws: &FakeAutoScaling) -> Vec<Vec<DesiredWrite>> {
    aws.calls().into_iter().filter_map(|c| if let AsgCall::Raise(w) = c { Some(w) } else { None }).collect()
}

/// The Events telling a wave's nodes their groups were raised go out together: with each
/// publish taking a 20 ms round trip, 40 nodes in 20 groups cost the pass a few round trips,
/// not 40 in a row before its next step and the next pass.
#[tokio::test(start_paused = true)]
async fn a_pass_tells_a_wave_s_nodes_at_once_not_one_round_trip_after_another() {
    let mut aws = FakeAutoScaling::default();
    for g in 0..20 {
        aws = aws.with_group(&format!("g{g:02}"), 3, 50);
    }
    let rig = FakeRig::new(aws);
    let mut s = scaler(&rig).await;
    for g in 0..20 {
        for k in 0..2 {
            rebalance(&rig.cluster, &format!("n{g:02}-{k}"), &format!("g{g:02}"));
        }
    }
    let round_trip = Duration::from_millis(20);
    rig.events.taking(round_trip);
    let started = tokio::time::Instant::now();
    let report = s.tick().await.unwrap();
    let took = started.elapsed();

    assert_eq!(report.raised.len(), 20, "{report:?}");
    assert_eq!(rig.events.count(), 40, "one BoostRequested per at-risk node");
    assert_eq!(rig.events.most_in_flight(), crate::workers::EVENTS_IN_FLIGHT);
    assert!(took <= round_trip * 3, "the pass waited {took:?} for its Events (40 round trips: 800 ms)");
}

/// A lone signal waits for the wake-up's quiet only; a group's own quiet (longer) is for a
/// wave whose signals still arrive.
#[tokio::test(start_paused = true)]
async fn a_lone_signal_is_written_once_the_cluster_is_quiet() {
    let rig = FakeRig::new(FakeAutoScaling::default().with_group("a", 3, 50));
    let ctx = rig.context(count_policy(), paused_clock(), Arc::new(Metrics::new())).await;
    let settings = ScalerSettings::default();
    assert!(settings.group_quiet > settings.coalesce_quiet + Duration::from_millis(10));
    let s = Scaler::new(ctx.clone(), settings.clone());
    let wake = s.waker();
    let (stop, shutdown) = watch::channel(false);
    let task = tokio::spawn(s.run(shutdown));
    tokio::time::sleep(Duration::from_millis(1)).await;
    rig.cluster.put_node(node("a0", "a"));
    rig.cluster.signal(Signal { observed_at: (ctx.clock)(), ..Signal::rebalance("a0", 0) });
    wake.notify_one();
    tokio::time::sleep(settings.coalesce_quiet + Duration::from_millis(5)).await;
    assert_eq!(rig.aws.desired("a"), 4, "written after the wake-up's quiet: {:?}", rig.aws.calls());
    stop.send(true).unwrap();
    task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_burst_of_signals_becomes_one_write_per_group() {
    let rig = FakeRig::new(FakeAutoScaling::default().with_group("a", 3, 50).with_group("b", 3, 50));
    let metrics = Arc::new(Metrics::new());
    let ctx = rig.context(count_policy(), paused_clock(), metrics.clone()).await;
    let s = Scaler::new(ctx.clone(), ScalerSettings::default());
    let wake = s.waker();
    let (stop, shutdown) = watch::channel(false);
    let task = tokio::spawn(s.run(shutdown));
    tokio::time::sleep(Duration::from_millis(1)).await; // its first pass, before any signal
    for k in 0..10 {
        rebalance(&rig.cluster, &format!("a{k}"), "a");
        rebalance(&rig.cluster, &format!("b{k}"), "b");
        wake.notify_one();
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.send(true).unwrap();
    task.await.unwrap();

    assert_eq!(raises(&rig.aws).len(), 1, "one guarded batch: {:?}", rig.aws.calls());
    assert_eq!(raises(&rig.aws)[0].len(), 2, "one write per group");
    assert_eq!((rig.aws.desired("a"), rig.aws.desired("b")), (13, 13));
    assert_eq!(ctx.ledger.current().await.covered().len(), 20);
    assert_eq!(rig.ledger.saved(), ctx.ledger.current().await, "persisted");
    // Reaction: the first signal waited for the burst to settle (95 ms of signals + 20 ms quiet).
    let text = metrics.encode();
    assert!(text.contains("spots_booster_reaction_seconds_count 20"), "{text}");
    for stage in ["observe", "plan", "ledger-save", "write"] {
        let count = format!("spots_booster_scaler_stage_seconds_count{{stage=\"{stage}\"}} 1");
        assert!(text.contains(&count), "one boosting pass timed: {text}");
    }
    assert!(text.contains("spots_booster_boosts_total{group=\"a\",outcome=\"written\"} 1"), "{text}");
    assert!(text.contains("spots_booster_signals_total{group=\"a\",kind=\"rebalance\"} 10"), "{text}");
    assert!(text.contains("spots_booster_asg_desired_capacity{group=\"a\"} 13"), "{text}");
    assert_eq!(rig.events.reasons_for("a0"), vec!["BoostRequested"]);
}

#[tokio::test(start_paused = true)]
async fn a_group_whose_burst_ended_is_written_while_another_s_signals_still_arrive() {
    let (rig, signal_now, stop, task) = looping_scaler(Duration::ZERO).await;
    // `a`: two signals 5 ms apart. `b`: one every 10 ms for 150 ms.
    let mut written_a_at = None;
    for k in 0..16 {
        match k {
            0 => signal_now("a0", "a"),
            1 => signal_now("a1", "a"),
            _ => {}
        }
        signal_now(&format!("b{k}"), "b");
        tokio::time::sleep(Duration::from_millis(if k == 0 { 5 } else { 10 })).await;
        if written_a_at.is_none() && rig.aws.desired("a") > 3 {
            written_a_at = Some(k);
            assert_eq!(rig.aws.desired("b"), 3, "b's burst is still arriving");
        }
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.send(true).unwrap();
    task.await.unwrap();

    let written_a_at = written_a_at.expect("a written while b's signals arrive");
    assert!(written_a_at <= 7, "a waited for quiet, not for b's burst: written after b's signal {written_a_at}");
    let per_group = |g: &str| raises(&rig.aws).iter().flatten().filter(|w| w.group.as_str() == g).count();
    assert_eq!((per_group("a"), per_group("b")), (1, 1), "one write per group: {:?}", rig.aws.calls());
    assert_eq!((rig.aws.desired("a"), rig.aws.desired("b")), (5, 19));
}

/// The worker's loop over groups `a` and `b` (desired 3, max 50), raises taking `latency` to
/// answer (AWS under load; zero: at once); returns the rig, a way to signal a node now, and
/// the loop's stop switch and task.
async fn looping_scaler(
    latency: Duration,
) -> (FakeRig, impl Fn(&str, &str), watch::Sender<bool>, tokio::task::JoinHandle<TestScaler>) {
    let rig =
        FakeRig::new(FakeAutoScaling::default().with_group("a", 3, 50).with_group("b", 3, 50).slow_writes(latency));
    let ctx = rig.context(count_policy(), paused_clock(), Arc::new(Metrics::new())).await;
    let s = Scaler::new(ctx.clone(), ScalerSettings::default());
    let wake = s.waker();
    let (stop, shutdown) = watch::channel(false);
    let task = tokio::spawn(s.run(shutdown));
    tokio::time::sleep(Duration::from_millis(1)).await;
    let cluster = rig.cluster.clone();
    let signal_now = move |name: &str, group: &str| {
        cluster.put_node(node(name, group));
        cluster.signal(Signal { observed_at: (ctx.clock)(), ..Signal::rebalance(name, 0) });
        wake.notify_one();
    };
    (rig, signal_now, stop, task)
}

#[tokio::test(start_paused = true)]
async fn a_group_whose_burst_ends_during_another_s_slow_write_is_written_before_that_write_answers() {
    let (rig, signal_now, stop, task) = looping_scaler(Duration::from_millis(500)).await;
    signal_now("a0", "a");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(raises(&rig.aws).len(), 1, "a's write is out: {:?}", rig.aws.calls());
    signal_now("b0", "b");
    tokio::time::sleep(Duration::from_millis(150)).await;
    let sent = raises(&rig.aws);
    assert_eq!(sent.len(), 2, "b is written while a's write is unanswered: {sent:?}");
    assert_eq!(sent[1].iter().map(|w| w.group.as_str()).collect::<Vec<_>>(), ["b"]);
    assert_eq!(rig.aws.desired("a"), 3, "a's write has not applied yet");
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.send(true).unwrap();
    task.await.unwrap();
    assert_eq!((rig.aws.desired("a"), rig.aws.desired("b")), (4, 4));
    assert_eq!(raises(&rig.aws).len(), 2, "one write per group: {:?}", rig.aws.calls());
    assert!(rig.ledger.saved().records.iter().all(|r| r.raising_to.is_none()), "both answered");
}

#[tokio::test(start_paused = true)]
async fn a_group_at_risk_again_during_its_slow_write_is_written_after_it_answers_from_the_size_it_raised() {
    let (rig, signal_now, stop, task) = looping_scaler(Duration::from_millis(500)).await;
    signal_now("a0", "a");
    tokio::time::sleep(Duration::from_millis(100)).await;
    signal_now("a1", "a");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(raises(&rig.aws).len(), 1, "a's next write waits for the answer: {:?}", rig.aws.calls());
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.send(true).unwrap();
    task.await.unwrap();
    let sent = raises(&rig.aws);
    assert_eq!(sent.len(), 2, "{sent:?}");
    assert_eq!((sent[1][0].expected, sent[1][0].to), (4, 5), "planned from the size the first write made");
    assert_eq!(rig.aws.desired("a"), 5, "one node per at-risk node, none undone");
}

#[tokio::test(start_paused = true)]
async fn a_write_that_keeps_failing_is_tried_again_at_the_next_signal_not_in_a_loop() {
    let (rig, signal_now, stop, task) = looping_scaler(Duration::ZERO).await;
    signal_now("a0", "a");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(rig.aws.desired("a"), 4, "a's size is known");
    rig.aws.throttle_next(u32::MAX);
    signal_now("a1", "a");
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(raises(&rig.aws).len(), 2, "one failed attempt, then quiet: {:?}", rig.aws.calls());
    signal_now("a2", "a");
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(raises(&rig.aws).len(), 3, "the next signal's pass tries again: {:?}", rig.aws.calls());
    rig.aws.throttle_next(0);
    tokio::time::sleep(ScalerSettings::default().resync).await;
    stop.send(true).unwrap();
    task.await.unwrap();
    assert_eq!(rig.aws.desired("a"), 6, "the resync's pass wrote both");
}

#[tokio::test(start_paused = true)]
async fn a_write_in_flight_at_shutdown_is_answered_before_the_loop_ends() {
    let (rig, signal_now, stop, task) = looping_scaler(Duration::from_millis(500)).await;
    signal_now("a0", "a");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(rig.ledger.saved().records[0].raising_to, Some(4), "saved before the write");
    stop.send(true).unwrap();
    task.await.unwrap();
    assert_eq!(rig.aws.desired("a"), 4);
    assert_eq!(rig.ledger.saved().records[0].raising_to, None, "answered, not left to a read after a restart");
}

/// A busy API server: NTH's calls for one group's two nodes land 100–130 ms apart, while
/// `c`'s nodes keep the wave arriving every 10 ms but for a 40 ms lull. Once `d` has shown a
/// 100 ms gap, `b` (quiet for 80 ms, past the 50 ms floor, and the cluster quiet for 20 ms
/// in the lull) waits for its second node instead of being written twice.
#[tokio::test(start_paused = true)]
async fn a_wave_whose_groups_come_slowly_waits_as_long_as_they_take() {
    let rig =
        FakeRig::new(FakeAutoScaling::default().with_group("b", 3, 50).with_group("c", 3, 50).with_group("d", 3, 50));
    let ctx = rig.context(count_policy(), paused_clock(), Arc::new(Metrics::new())).await;
    let settings = ScalerSettings::default();
    assert_eq!(settings.group_quiet, Duration::from_millis(50), "the floor this wave outlasts");
    let s = Scaler::new(ctx.clone(), settings);
    let wake = s.waker();
    let (stop, shutdown) = watch::channel(false);
    let task = tokio::spawn(s.run(shutdown));
    tokio::time::sleep(Duration::from_millis(1)).await;
    let mut arrivals: Vec<(u64, String, &str)> =
        vec![(0, "d0".into(), "d"), (100, "d1".into(), "d"), (40, "b0".into(), "b"), (170, "b1".into(), "b")];
    arrivals.extend((0..=30).filter(|k| !(12..=14).contains(k)).map(|k| (k * 10, format!("c{k}"), "c")));
    arrivals.sort();
    let mut at = 0;
    for (t, name, group) in arrivals {
        tokio::time::sleep(Duration::from_millis(t - at)).await;
        at = t;
        rig.cluster.put_node(node(&name, group));
        rig.cluster.signal(Signal { observed_at: (ctx.clock)(), ..Signal::rebalance(&name, 0) });
        wake.notify_one();
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.send(true).unwrap();
    task.await.unwrap();

    let per_group = |g: &str| raises(&rig.aws).iter().flatten().filter(|w| w.group.as_str() == g).count();
    assert_eq!(per_group("b"), 1, "b written once, with both nodes: {:?}", rig.aws.calls());
    assert_eq!((rig.aws.desired("b"), rig.aws.desired("c"), rig.aws.desired("d")), (5, 31, 5));
}

/// On that busy API server a wave's head groups are written before any group has shown its
/// second node: the first wave, with nothing to go on but the floor, writes `a` and `b` once
/// per node. The next wave's head waits for the spacing the first one showed and writes each
/// group once; a lone signal after it is written at the cluster's quiet, not held for it.
#[tokio::test(start_paused = true)]
async fn the_next_wave_waits_for_the_spacing_the_last_one_showed() {
    let (rig, arrive, stop, task) = looping_scaler(Duration::ZERO).await;
    let writes_to = |g: &str| raises(&rig.aws).iter().flatten().filter(|w| w.group.as_str() == g).count();
    let mut per_wave = Vec::new();
    for wave in [0, 1] {
        // Each group's second node 100 ms after its first, `b` 10 ms behind `a`.
        let names = |group: &str, k: usize| format!("{group}{}", 2 * wave + k);
        arrive(&names("a", 0), "a");
        tokio::time::sleep(Duration::from_millis(10)).await;
        arrive(&names("b", 0), "b");
        tokio::time::sleep(Duration::from_millis(90)).await;
        arrive(&names("a", 1), "a");
        tokio::time::sleep(Duration::from_millis(10)).await;
        arrive(&names("b", 1), "b");
        tokio::time::sleep(Duration::from_secs(2)).await;
        per_wave.push((writes_to("a"), writes_to("b")));
    }
    let desired_after_waves = (rig.aws.desired("a"), rig.aws.desired("b"));
    arrive("a4", "a");
    tokio::time::sleep(ScalerSettings::default().coalesce_quiet + Duration::from_millis(5)).await;
    let lone_written = rig.aws.desired("a");
    stop.send(true).unwrap();
    task.await.unwrap();

    assert_eq!(per_wave[0], (2, 2), "the first wave, at the floor: once per node: {:?}", rig.aws.calls());
    assert_eq!(per_wave[1], (3, 3), "the next wave, at the first one's pace: once: {:?}", rig.aws.calls());
    assert_eq!(desired_after_waves, (7, 7));
    assert_eq!(lone_written, 8, "a lone signal is written at the cluster's quiet: {:?}", rig.aws.calls());
}

/// Group `a` of `size` Ready nodes n1..n<size>, listed by Auto Scaling as its instances; as
/// the watches see them, no node names its group.
fn fleet(size: usize, desired: u32, max: u32) -> FakeRig {
    let mut aws = FakeAutoScaling::default().with_group("a", desired, max);
    for i in 1..=size {
        aws = aws.with_instance("a", &format!("i-n{i}"));
    }
    let rig = FakeRig::new(aws);
    for i in 1..=size {
        let mut n = Node::test(&format!("n{i}"), "a");
        n.group = None;
        rig.cluster.put_node(n);
    }
    rig
}

/// NTH's Event about `name`, which NTH has cordoned.
fn signal(rig: &FakeRig, name: &str) {
    rig.cluster.edit(|s| s.nodes.get_mut(&NodeName::from(name)).unwrap().cordoned = true);
    event(rig, name, SignalKind::Rebalance);
}

fn event(rig: &FakeRig, name: &str, kind: SignalKind) {
    rig.cluster.signal(Signal {
        instance: InstanceId::from(format!("i-{name}")),
        node: name.into(),
        kind,
        observed_at: Timestamp::from_millis(1_000),
        evidence: Evidence::Event,
        notice_deadline: None,
    });
}

#[tokio::test(start_paused = true)]
async fn a_replacement_that_never_registers_expires_its_boost_once_and_says_so() {
    let rig = fleet(10, 10, 100);
    signal(&rig, "n1");
    let now = Arc::new(AtomicI64::new(10_000));
    let clock: Clock = {
        let now = now.clone();
        Arc::new(move || Timestamp::from_millis(now.load(Ordering::Relaxed)))
    };
    let metrics = Arc::new(Metrics::new());
    let ctx = rig.context(count_policy(), clock, metrics.clone()).await;
    let mut s = Scaler::new(ctx.clone(), ScalerSettings::default());
    assert_eq!(s.tick().await.unwrap().raised.len(), 1);
    now.fetch_add(60_000, Ordering::Relaxed);
    assert!(s.tick().await.unwrap().raised.is_empty());
    let text = metrics.encode();
    assert!(text.contains("spots_booster_oldest_boost_age_seconds{group=\"a\"} 60\n"), "{text}");

    let timeout = i64::try_from(ctx.policy.replacement_timeout.as_millis()).unwrap();
    now.fetch_add(timeout - 60_000, Ordering::Relaxed);
    for _ in 0..3 {
        assert!(s.tick().await.unwrap().raised.is_empty(), "its instance is never boosted twice");
    }
    let saved = rig.ledger.saved();
    assert_eq!(saved.records.len(), 1, "kept until the instance leaves");
    assert_eq!(saved.records[0].expired, Some(BoostExpiry::ReplacementTimeout));
    assert_eq!(rig.events.reasons_for("n1"), vec!["BoostRequested", "BoostExpired"], "told once");
    let text = metrics.encode();
    assert!(text.contains("outcome=\"expired-replacement-timeout\"} 1"), "{text}");
    assert!(text.contains("spots_booster_boosted_nodes_in_flight{group=\"a\"} 0"), "{text}");
    assert!(text.contains("spots_booster_oldest_boost_age_seconds{group=\"a\"} 0\n"), "expired: {text}");
}

#[tokio::test(start_paused = true)]
async fn a_forged_event_moves_nothing_until_the_node_and_aws_agree() {
    let rig = fleet(10, 10, 100);
    rig.aws.on_demand("i-n2");
    let metrics = Arc::new(Metrics::new());
    let mut s =
        Scaler::new(rig.context(count_policy(), paused_clock(), metrics.clone()).await, ScalerSettings::default());
    // Anyone may write an Event: about an uncordoned node it is not believed.
    event(&rig, "n1", SignalKind::SpotInterruption);
    event(&rig, "n2", SignalKind::SpotInterruption);
    assert!(s.tick().await.unwrap().raised.is_empty());
    assert_eq!(rig.aws.instance_lookups(), 10, "every node's instance is described once, in one batch");
    // Cordoned, but on-demand: EC2 sends no interruption notice to on-demand instances.
    rig.cluster.edit(|s| s.nodes.get_mut(&NodeName::from("n2")).unwrap().cordoned = true);
    assert!(s.tick().await.unwrap().raised.is_empty());
    assert!(s.tick().await.unwrap().raised.is_empty());
    assert_eq!(rig.aws.instance_lookups(), 10, "an instance is described once");
    let text = metrics.encode();
    assert!(text.contains("spots_booster_signals_untrusted_total{reason=\"not-cordoned\"} 2"), "{text}");
    assert!(text.contains("spots_booster_signals_untrusted_total{reason=\"not-spot\"} 1"), "{text}");
    assert!(raises(&rig.aws).is_empty());
    // NTH's cordon on the spot node: now it is believed.
    rig.cluster.edit(|s| s.nodes.get_mut(&NodeName::from("n1")).unwrap().cordoned = true);
    assert_eq!(s.tick().await.unwrap().raised, vec![(GroupName::from("a"), 10, 11)]);
}

#[tokio::test(start_paused = true)]
async fn a_large_group_is_boosted_though_only_its_signalled_node_was_resolved() {
    for size in [10, 50] {
        let size_u32 = u32::try_from(size).unwrap();
        let rig = fleet(size, size_u32, 100);
        signal(&rig, "n3");
        let mut s = scaler(&rig).await;
        let report = s.tick().await.unwrap();
        assert_eq!(report.raised, vec![(GroupName::from("a"), size_u32, size_u32 + 1)], "{size} nodes");
        assert_eq!(report.held, 0);
    }
}

/// n1 of a 4-node group is boosted (desired 5); then a spot interruption under queue mode:
/// AWS takes i-n1 before any drain, the group replaces it, the node goes away, and the group's
/// description is old enough to be read again.
async fn boosted_then_taken_first(rig: &FakeRig) -> TestScaler {
    signal(rig, "n1");
    let mut s = scaler(rig).await;
    s.tick().await.unwrap();
    assert_eq!(rig.aws.desired("a"), 5);
    rig.aws.reclaim("i-n1", "i-r1");
    rig.cluster.remove_node("n1");
    rig.cluster.edit(|st| st.signals.clear());
    tokio::time::advance(Duration::from_secs(61)).await;
    s
}

fn chosen(rig: &FakeRig) -> Vec<(InstanceId, NodeName)> {
    rig.ledger
        .saved()
        .records
        .iter()
        .flat_map(|r| r.giving_back.iter().filter_map(|(i, g)| Some((i.clone(), g.node.clone()?))))
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_boost_whose_instance_aws_took_first_is_given_back_through_one_chosen_node() {
    let rig = fleet(4, 4, 10);
    rig.cluster.edit(|st| {
        // n2 runs more pods than n3 and n4; n4 is the newest: it is the one given back.
        st.nodes.get_mut(&NodeName::from("n2")).unwrap().pods = Node::test("n2", "a").with_pods(2, 1, 1).pods;
        st.nodes.get_mut(&NodeName::from("n4")).unwrap().created = Timestamp::from_millis(5_000);
    });
    let mut s = boosted_then_taken_first(&rig).await;
    s.tick().await.unwrap();
    assert!(chosen(&rig).is_empty(), "the group's replacement for i-n1 is still joining");

    // It joins, busy already: n4 stays the emptiest, newest node.
    let mut r1 = Node::test("r1", "a").with_pods(1, 1, 1).created_at(3_000);
    r1.group = None;
    rig.cluster.put_node(r1);
    s.tick().await.unwrap();
    assert_eq!(rig.aws.desired("a"), 5, "desired capacity is never lowered by a write that names no instance");
    assert_eq!(raises(&rig.aws).len(), 1, "the boost was the only write");
    assert_eq!(chosen(&rig), vec![(InstanceId::from("i-n1"), NodeName::from("n4"))]);

    tokio::time::advance(Duration::from_secs(61)).await;
    s.tick().await.unwrap();
    assert_eq!(chosen(&rig).len(), 1, "one node per instance taken, however many passes");
    let text = s.ctx.metrics.encode();
    assert!(text.contains("spots_booster_give_backs_total{group=\"a\",outcome=\"node-chosen\"} 1"), "{text}");
}

#[tokio::test(start_paused = true)]
async fn no_node_that_opted_out_or_would_lose_a_bare_pod_is_chosen_and_ca_is_left_it_with_an_event() {
    let rig = fleet(4, 4, 10);
    rig.cluster.edit(|st| {
        for name in ["n2", "n4"] {
            let mut opted = Node::test(name, "a").with_pods(1, 1, 1).pods;
            opted[0].opt_out = Some(crate::core::OptOut::DoNotDisrupt);
            st.nodes.get_mut(&NodeName::from(name)).unwrap().pods = opted;
        }
        let mut bare = Node::test("n3", "a").with_pods(1, 1, 1).pods;
        bare[0].bare = true;
        st.nodes.get_mut(&NodeName::from("n3")).unwrap().pods = bare;
    });
    let mut s = boosted_then_taken_first(&rig).await;
    let mut r1 = Node::test("r1", "a").with_pods(1, 1, 1);
    r1.pods[0].opt_out = Some(crate::core::OptOut::NotSafeToEvict);
    r1.group = None;
    rig.cluster.put_node(r1);
    // The view shows none of these pods (no node is signalled or cordoned): the give-back
    // looks them up, and every node carries one it must not evict.
    assert!(rig.cluster.current().unwrap().nodes.values().all(|n| n.pods.is_empty()));
    s.tick().await.unwrap();
    assert!(chosen(&rig).is_empty());
    assert!(rig.ledger.saved().records.is_empty(), "nothing to wait for: settled at once, and closed");
    assert_eq!(rig.aws.desired("a"), 5, "left to Cluster Autoscaler, not lowered");
    assert_eq!(rig.events.reasons_for("n2"), vec!["GiveBackLeftToClusterAutoscaler"], "saying why, on one such node");
    let text = s.ctx.metrics.encode();
    let left = "spots_booster_give_backs_total{group=\"a\",outcome=\"left-to-cluster-autoscaler\"} 1";
    assert!(text.contains(left), "{text}");
}

#[tokio::test(start_paused = true)]
async fn a_give_back_never_goes_below_the_size_before_the_boost() {
    let rig = fleet(4, 4, 10);
    signal(&rig, "n1");
    let mut s = scaler(&rig).await;
    s.tick().await.unwrap();
    // Cluster Autoscaler scaled the group down meanwhile; then AWS takes the at-risk instance.
    rig.aws.set_desired("a", 4);
    rig.aws.reclaim("i-n1", "i-r1");
    rig.cluster.remove_node("n1");
    tokio::time::advance(Duration::from_secs(61)).await;
    s.tick().await.unwrap();
    assert_eq!(rig.aws.desired("a"), 4);
    assert!(chosen(&rig).is_empty(), "nothing to give back");
    assert!(rig.ledger.saved().records.is_empty(), "settled and closed");
}

#[tokio::test(start_paused = true)]
async fn every_dropped_signal_is_counted_once_by_its_reason() {
    let rig = fleet(2, 2, 10);
    // NTH's Event on a node nobody cordoned, and one about an instance whose node is gone.
    event(&rig, "n1", SignalKind::SpotInterruption);
    rig.cluster.signal(Signal {
        instance: InstanceId::from("i-gone"),
        node: "gone".into(),
        kind: SignalKind::Rebalance,
        observed_at: Timestamp::from_millis(1_000),
        evidence: Evidence::NodeTaint,
        notice_deadline: None,
    });
    let mut s = scaler(&rig).await;
    s.tick().await.unwrap();
    s.tick().await.unwrap();
    let text = s.ctx.metrics.encode();
    for reason in ["not-cordoned", "node-gone"] {
        let line = format!("spots_booster_signals_dropped_total{{reason=\"{reason}\"}} 1");
        assert!(text.contains(&line), "{line} in {text}");
    }
    assert!(text.contains("spots_booster_signals_untrusted_total{reason=\"not-cordoned\"} 1"), "{text}");
}

#[tokio::test(start_paused = true)]
async fn an_instancegroup_rotation_is_boosted_like_a_rebalance() {
    let rig = FakeRig::new(FakeAutoScaling::default().with_group("a", 3, 50));
    // The reconciler only annotates; nobody has cordoned the node yet.
    rig.cluster.put_node(Node::test("n1", "a"));
    rig.cluster.signal(Signal {
        instance: InstanceId::from("i-n1"),
        node: "n1".into(),
        kind: SignalKind::Rotation,
        observed_at: Timestamp::from_millis(1_000),
        evidence: Evidence::NodeTaint,
        notice_deadline: None,
    });
    let mut s = scaler(&rig).await;
    s.start(&[]).await.unwrap();
    s.tick().await.unwrap();
    assert_eq!(rig.aws.desired("a"), 4, "a replacement is bought before the drain");
    assert!(rig.ledger.saved().covered().contains(&InstanceId::from("i-n1")));
}

#[tokio::test(start_paused = true)]
async fn a_stale_plan_is_replanned_from_the_live_value_never_lowered() {
    let rig = FakeRig::new(FakeAutoScaling::default().with_group("a", 3, 50).with_tag("a", "k", "v"));
    let mut s = scaler(&rig).await;
    s.start(&["k=v".parse().unwrap()]).await.unwrap();
    rig.aws.set_desired("a", 6); // Cluster Autoscaler, after our describe…
    for k in 0..6 {
        let mut ready = node(&format!("r{k}"), "a"); // …and its nodes have joined.
        ready.cordoned = false;
        rig.cluster.put_node(ready);
    }
    rebalance(&rig.cluster, "n1", "a");

    let report = s.tick().await.unwrap();
    assert_eq!(report.raced, vec![GroupName::from("a")]);
    assert_eq!(rig.aws.desired("a"), 6, "never lowered");
    assert!(rig.ledger.saved().records.is_empty(), "the raced boost is taken back");
    let report = s.tick().await.unwrap();
    assert_eq!(report.raised, vec![(GroupName::from("a"), 6, 7)]);
}

#[tokio::test(start_paused = true)]
async fn only_groups_matching_the_tag_filter_are_boosted() {
    let aws = FakeAutoScaling::default()
        .with_group("a", 3, 50)
        .with_tag("a", "k8s.io/cluster-autoscaler/enabled", "true")
        .with_group("b", 3, 50)
        .with_tag("b", "k8s.io/cluster-autoscaler/enabled", "false");
    let rig = FakeRig::new(aws);
    let mut s = scaler(&rig).await;
    s.start(&["k8s.io/cluster-autoscaler/enabled=true".parse().unwrap()]).await.unwrap();
    rebalance(&rig.cluster, "a1", "a");
    rebalance(&rig.cluster, "b1", "b");
    let report = s.tick().await.unwrap();
    assert_eq!(report.raised, vec![(GroupName::from("a"), 3, 4)]);
    assert_eq!(report.held, 0, "b's notice puts nothing at risk: it is not held, it is dropped");
    assert_eq!(rig.aws.desired("b"), 3, "b's tags do not match --asg-tag-filter");
    assert!(rig.events.reasons_for("b1").is_empty());
    assert!(!rig.ledger.saved().covers(&"i-b1".into()));
}

#[tokio::test(start_paused = true)]
async fn a_throttled_write_is_retried_and_boosts_once() {
    let rig = FakeRig::new(FakeAutoScaling::default().with_group("a", 3, 50).with_tag("a", "k", "v"));
    let mut s = scaler(&rig).await;
    s.start(&["k=v".parse().unwrap()]).await.unwrap();
    rebalance(&rig.cluster, "n1", "a");
    rig.aws.throttle_next(1);
    let err = s.tick().await.unwrap_err();
    assert!(matches!(&err, ScalerError::Raise(e) if e.category() == "throttled"), "{err}");
    assert!(rig.ledger.saved().records.is_empty());
    s.tick().await.unwrap();
    assert_eq!(rig.aws.desired("a"), 4);
    s.tick().await.unwrap();
    assert_eq!(rig.aws.desired("a"), 4, "boosted once");
}

#[tokio::test(start_paused = true)]
async fn a_write_that_applied_but_answered_an_error_is_not_boosted_again() {
    let rig = FakeRig::new(FakeAutoScaling::default().with_group("a", 3, 50));
    let mut s = scaler(&rig).await;
    rebalance(&rig.cluster, "n1", "a");
    rig.aws.apply_then_fail_next(1);
    let report = s.tick().await.unwrap();
    assert_eq!(report.raised, vec![(GroupName::from("a"), 3, 4)], "kept as written: {report:?}");
    assert_eq!(rig.aws.desired("a"), 4);
    assert_eq!(rig.ledger.saved().records.len(), 1, "the boost stays in the ledger");
    s.tick().await.unwrap();
    assert_eq!(rig.aws.desired("a"), 4, "never boosted twice");
}

#[tokio::test(start_paused = true)]
async fn a_group_at_max_is_held_and_told_once() {
    let rig = FakeRig::new(FakeAutoScaling::default().with_group("a", 5, 5));
    let mut s = scaler(&rig).await;
    rebalance(&rig.cluster, "n1", "a");
    for _ in 0..3 {
        assert_eq!(s.tick().await.unwrap().held, 1);
    }
    assert!(raises(&rig.aws).is_empty());
    assert_eq!(rig.events.reasons_for("n1"), vec!["BoostHeld"]);
}

#[tokio::test(start_paused = true)]
async fn nothing_is_decided_on_a_partial_view() {
    let rig = FakeRig { cluster: InMemoryCluster::default(), ..FakeRig::new(FakeAutoScaling::default()) };
    let mut s = scaler(&rig).await;
    assert!(matches!(s.tick().await, Err(ScalerError::NotSynced)));
    assert!(rig.aws.calls().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_confirmed_interruption_boosts_its_pool_mates_groups_ahead_and_drains_none_of_them() {
    let rig = fleet(4, 4, 100);
    for i in 1..=3 {
        rig.aws.pool(&format!("i-n{i}"), "m5.large", "us-east-1a");
    }
    rig.aws.pool("i-n4", "m5.large", "us-east-1b");
    // n1's pods stay (their budget refuses): its drain, at once on EC2's word, goes on meanwhile.
    let n1 = Node::test("n1", "a").cordoned().with_pods(2, 100, 1 << 20);
    n1.pods.iter().for_each(|p| rig.writes.block(p.uid.as_str(), true));
    rig.cluster.put_node(Node { group: None, ..n1 });
    event(&rig, "n1", SignalKind::SpotInterruption);
    let metrics = Arc::new(Metrics::new());
    let ctx = rig.context(count_policy(), paused_clock(), metrics.clone()).await;
    let mut scaler = Scaler::new(ctx.clone(), ScalerSettings::default());
    let mut drainer = crate::workers::drainer::Drainer::new(ctx.clone(), Default::default());
    assert_eq!(scaler.tick().await.unwrap().raised, vec![(GroupName::from("a"), 4, 5)], "n1's own boost");
    drainer.tick().await.unwrap();
    assert!(scaler.tick().await.unwrap().raised.is_empty(), "EC2 has not confirmed the notice: NTH's word only");

    rig.aws.interrupt("i-n1");
    tokio::time::advance(Duration::from_secs(5)).await;
    drainer.tick().await.unwrap();
    assert_eq!(scaler.tick().await.unwrap().raised, vec![(GroupName::from("a"), 5, 7)], "n2 and n3, not n4");
    let text = metrics.encode();
    assert!(text.contains("spots_booster_pool_mate_boosted_nodes_total{group=\"a\"} 2"), "{text}");
    assert_eq!(rig.events.reasons_for("n2"), vec!["BoostRequested"]);
    assert!(rig.events.reasons_for("n4").is_empty());

    // Their replacements join; nothing drains n2 or n3 on the pool's risk alone.
    for name in ["r1", "r2", "r3"] {
        let mut node = Node::test(name, "a");
        node.created = (ctx.clock)();
        rig.cluster.put_node(node);
    }
    drainer.tick().await.unwrap();
    let draining = drainer.state().in_progress.keys().cloned().collect::<Vec<_>>();
    assert_eq!(draining, vec![NodeName::from("n1")]);
    assert!(rig.events.reasons_for("n3") == vec!["BoostRequested"], "nothing else is done to n3");

    // Passes go on through the workers' own observation (which remembers what the ledger boosted),
    // within the window and past it: a pool-mate is never taken for an at-risk node.
    for _ in 0..12 {
        tokio::time::advance(Duration::from_secs(20)).await;
        scaler.tick().await.unwrap();
        drainer.tick().await.unwrap();
    }
    let mates = [NodeName::from("n2"), NodeName::from("n3")];
    let touched: Vec<_> =
        rig.writes.calls().into_iter().filter(|c| matches!(c, ClusterCall::Cordon(n) if mates.contains(n))).collect();
    assert!(touched.is_empty(), "pool-mates cordoned: {touched:?}");
    let terminated: Vec<_> = rig
        .aws
        .calls()
        .into_iter()
        .filter(|c| matches!(c, AsgCall::Terminate(i, _) if i.as_str() == "i-n2" || i.as_str() == "i-n3"))
        .collect();
    assert!(terminated.is_empty(), "pool-mates terminated: {terminated:?}");
    assert!(drainer.state().in_progress.keys().all(|n| !mates.contains(n)));
}

/// Pool memory learns from the leader's passes, is saved beside the ledger, survives a restart,
/// and a replica that becomes leader picks up what the last one learnt.
#[tokio::test(start_paused = true)]
async fn pool_memory_learns_a_conversion_survives_a_restart_and_a_leader_change() {
    let rig = FakeRig::new(FakeAutoScaling::default().with_group("a", 3, 50));
    let policy = Policy { rebalance_policy: crate::core::RebalancePolicy::Auto, ..count_policy() };
    let metrics = Arc::new(Metrics::new());
    let ctx = rig.context(policy.clone(), paused_clock(), metrics.clone()).await;
    let mut s = Scaler::new(ctx.clone(), ScalerSettings::default());
    rig.aws.pool("i-n1", "m5.large", "us-east-1a");
    rebalance(&rig.cluster, "n1", "a");
    let report = s.tick().await.unwrap();
    assert_eq!(report.raised.len(), 1, "{report:?}");
    let text = metrics.encode();
    assert!(
        text.contains(r#"spots_booster_rebalance_answers_total{answer="standby",group="a",why="learning"} 1"#),
        "{text}"
    );
    assert!(text.contains(r#"spots_booster_rebalance_recommendations_total{group="a",zone="us-east-1a"} 1"#), "{text}");

    // EC2 confirms the interruption ten minutes on (609 s after the recommendation): it was followed.
    tokio::time::advance(Duration::from_secs(600)).await;
    rig.cluster.signal(Signal {
        instance: "i-n1".into(),
        node: "n1".into(),
        kind: SignalKind::SpotInterruption,
        observed_at: (ctx.clock)(),
        evidence: Evidence::NodeTaint,
        notice_deadline: None,
    });
    rig.aws.interrupt("i-n1");
    // The drainer's pass asks EC2; the scaler learns from what it confirmed.
    ctx.observe(true).await.unwrap();
    s.tick().await.unwrap();
    let saved = rig.ledger.saved_pools();
    let pool = &saved.pools[0];
    assert_eq!(
        (pool.instance_type.as_str(), pool.zone.as_str(), pool.lead_seconds.as_slice()),
        ("m5.large", "us-east-1a", &[609][..])
    );
    // It resolves as followed when its window closes.
    tokio::time::advance(policy.memory.window).await;
    s.tick().await.unwrap();
    assert!(metrics.encode().contains(r#"spots_booster_rebalance_conversion_ratio{bound="estimate",group="a"} 0.666"#));
    let saved = rig.ledger.saved_pools();

    // A restart loads it; a follower that becomes leader reloads what the leader saved.
    let restarted = rig.context(policy.clone(), paused_clock(), Arc::new(Metrics::new())).await;
    assert_eq!(restarted.ledger.pools().await, saved);
    rig.leadership.set(false);
    let follower_ctx = rig.context(policy, paused_clock(), Arc::new(Metrics::new())).await;
    let mut follower = Scaler::new(follower_ctx.clone(), ScalerSettings::default());
    follower.tick().await.unwrap();
    let mut later = saved.clone();
    later.pools[0].recommendations = 42.0;
    LedgerStore::save_pools(&rig.ledger, &later).await.unwrap();
    rig.leadership.set(true);
    follower.tick().await.unwrap();
    assert_eq!(follower_ctx.ledger.pools().await.pools[0].recommendations, 42.0, "the new leader read the store");
}
