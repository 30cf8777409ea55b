//! The scaler and the lease: the ledger saved before every write, a follower that plans and
//! writes nothing, a lease lost between the save and the write, and a ledger that cannot be saved.

use super::*;
use crate::core::BoostLedger;

#[tokio::test(start_paused = true)]
async fn the_ledger_is_saved_before_the_write_and_a_restart_never_boosts_twice() {
    let rig = FakeRig::new(FakeAutoScaling::default().with_group("a", 3, 50));
    rebalance(&rig.cluster, "n1", "a");
    let mut first = scaler(&rig).await;
    first.start(&[]).await.unwrap();
    first.tick().await.unwrap();
    assert_eq!(rig.aws.desired("a"), 4);

    // A restart loads the ledger and finds nothing left to do.
    let mut second = scaler(&rig).await;
    second.start(&[]).await.unwrap();
    let report = second.tick().await.unwrap();
    assert_eq!(report, TickReport::default());
    assert_eq!(rig.aws.desired("a"), 4);
    assert_eq!(raises(&rig.aws).len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_follower_plans_but_writes_nothing_and_a_new_leader_never_boosts_twice() {
    let rig = FakeRig::new(FakeAutoScaling::default().with_group("a", 3, 50));
    let follower_rig = FakeRig { leadership: Leadership::follower(), ..rig.clone() };
    let mut leader = scaler(&rig).await;
    let mut follower = scaler(&follower_rig).await;
    rebalance(&rig.cluster, "n1", "a");

    let report = follower.tick().await.unwrap();
    assert_eq!(report.not_leader, 1);
    assert!(raises(&rig.aws).is_empty());
    assert_eq!(rig.ledger.saves(), 0, "a follower does not write the ledger either");

    leader.tick().await.unwrap();
    assert_eq!(rig.aws.desired("a"), 4);
    // The leader loses the lease (its writes stop at once) and the follower takes over.
    rig.leadership.set(false);
    rebalance(&rig.cluster, "n2", "a");
    assert_eq!(leader.tick().await.unwrap().not_leader, 1);
    follower_rig.leadership.set(true);
    // Its cached description is stale: the guard catches it and the next plan uses the live value.
    assert_eq!(follower.tick().await.unwrap().raced, vec![GroupName::from("a")]);
    let report = follower.tick().await.unwrap();
    assert_eq!(report.raised, vec![(GroupName::from("a"), 4, 5)], "only n2: n1 is in the saved ledger");
    assert_eq!(rig.aws.desired("a"), 5);
}

/// The fakes, with a ledger that ends the lease as it saves.
type LosingPorts = crate::workers::PortSet<
    FakeAutoScaling,
    InMemoryCluster,
    LeaseGoesOnSave,
    crate::fakes::FakeClusterWrites,
    crate::fakes::RecordedEvents,
>;

/// A ledger store whose saves end this replica's lease once they are made.
struct LeaseGoesOnSave {
    saved: crate::fakes::MemoryLedger,
    leadership: Leadership,
}

impl LedgerStore for LeaseGoesOnSave {
    async fn load(&self) -> Result<BoostLedger, LedgerError> {
        self.saved.load().await
    }

    async fn save(&self, ledger: &BoostLedger) -> Result<(), LedgerError> {
        self.saved.save(ledger).await?;
        self.leadership.set(false);
        Ok(())
    }

    async fn load_pools(&self) -> Result<crate::core::PoolMemory, LedgerError> {
        self.saved.load_pools().await
    }

    async fn save_pools(&self, memory: &crate::core::PoolMemory) -> Result<(), LedgerError> {
        self.saved.save_pools(memory).await
    }
}

#[tokio::test(start_paused = true)]
async fn a_lease_lost_after_the_ledger_save_stops_the_write_and_the_next_leader_boosts_once() {
    let rig = FakeRig::new(FakeAutoScaling::default().with_group("a", 3, 50));
    let metrics = Arc::new(Metrics::new());
    let ports = crate::workers::PortSet {
        aws: rig.aws.clone(),
        cluster: rig.cluster.clone(),
        ledger: LeaseGoesOnSave { saved: rig.ledger.clone(), leadership: rig.leadership.clone() },
        writes: rig.writes.clone(),
        events: rig.events.clone(),
    };
    let groups = Arc::new(crate::workers::groups::GroupBook::new(
        crate::fakes::CLUSTER,
        Duration::from_secs(60),
        Duration::from_secs(3600),
        paused_clock(),
    ));
    let ctx = WorkerContext::<LosingPorts>::new(
        ports,
        groups,
        rig.leadership.clone(),
        metrics.clone(),
        count_policy(),
        paused_clock(),
    )
    .await
    .unwrap();
    let mut losing = Scaler::new(ctx, ScalerSettings::default());
    rebalance(&rig.cluster, "n1", "a");

    // Leading when the pass began; the lease goes as the boost's record is saved.
    let err = losing.tick().await.unwrap_err();
    assert!(crate::workers::PassError::lost_lease(&err), "{err}");
    assert!(raises(&rig.aws).is_empty(), "the gate dropped the write");
    assert_eq!(rig.aws.desired("a"), 3);
    let saved = rig.ledger.saved();
    assert_eq!(saved.records.len(), 1, "the record stays: its withdrawal was a write too");
    assert_eq!(saved.records[0].raising_to, Some(4), "unanswered: the next leader reads the group first");
    let skipped = metrics.encode();
    assert!(skipped.contains("spots_booster_skipped_not_leader_total{action=\"set-desired-capacity\"} 1"), "{skipped}");
    assert!(skipped.contains("spots_booster_skipped_not_leader_total{action=\"ledger-save\"} 1"), "{skipped}");

    // A new leader resolves the unanswered record and boosts once.
    rig.leadership.set(true);
    let mut next = scaler(&rig).await;
    let report = next.tick().await.unwrap();
    assert_eq!(report.raised, vec![(GroupName::from("a"), 3, 4)]);
    assert_eq!(raises(&rig.aws).len(), 1);
    assert_eq!(next.tick().await.unwrap().raised, vec![], "boosted once");
    assert_eq!(rig.aws.desired("a"), 4);
}

#[tokio::test(start_paused = true)]
async fn only_the_leader_reports_group_sizes_and_signals() {
    let rig = FakeRig::new(FakeAutoScaling::default().with_group("a", 3, 50));
    let follower_rig = FakeRig { leadership: Leadership::follower(), ..rig.clone() };
    let (leader_metrics, follower_metrics) = (Arc::new(Metrics::new()), Arc::new(Metrics::new()));
    let mut leader = Scaler::new(
        rig.context(count_policy(), paused_clock(), leader_metrics.clone()).await,
        ScalerSettings::default(),
    );
    let mut follower = Scaler::new(
        follower_rig.context(count_policy(), paused_clock(), follower_metrics.clone()).await,
        ScalerSettings::default(),
    );
    rebalance(&rig.cluster, "n1", "a");
    leader.tick().await.unwrap();
    follower.tick().await.unwrap();
    let (led, followed) = (leader_metrics.encode(), follower_metrics.encode());
    assert!(led.contains("spots_booster_asg_desired_capacity{group=\"a\"} 4"), "{led}");
    assert!(led.contains("spots_booster_signals_total{group=\"a\",kind=\"rebalance\"} 1"), "{led}");
    assert!(!followed.contains("asg_desired_capacity{"), "{followed}");
    assert!(!followed.contains("signals_total{"), "two replicas never double a group's numbers: {followed}");

    // The leader loses the lease: its gauges go with it.
    rig.leadership.set(false);
    leader.tick().await.unwrap();
    assert!(!leader_metrics.encode().contains("asg_desired_capacity{"));
}

#[tokio::test(start_paused = true)]
async fn nothing_is_written_when_the_ledger_cannot_be_saved() {
    let rig = FakeRig::new(FakeAutoScaling::default().with_group("a", 3, 50));
    rebalance(&rig.cluster, "n1", "a");
    let mut s = scaler(&rig).await;
    rig.ledger.fail_saves(true);
    assert!(matches!(s.tick().await, Err(ScalerError::Ledger(_))));
    assert!(raises(&rig.aws).is_empty());
    rig.ledger.fail_saves(false);
    s.tick().await.unwrap();
    assert_eq!(rig.aws.desired("a"), 4);
}
