//! Where moto cannot go: `IncludeInstances`. Moto ignores it and lists every instance; Auto
//! Scaling leaves the list out when asked to. The raise guard compares sizes only, so its re-read
//! asks for no instances, and must write from an answer that has none; the guard of a lowering,
//! which counts the instances, must still ask for them.

use std::sync::{Arc, Mutex};

use aws_loopback::serve;
use spots_booster::aws::AwsPorts;
use spots_booster::ports::{AutoScaling, DesiredWrite, WriteOutcome};

use crate::support::{aws_fleet, aws_loopback};

/// Answers as Auto Scaling does: `spot-a` at desired 2 (min 0, max 10) running two instances,
/// listed only when the request does not say `IncludeInstances=false`. Records every body.
fn autoscaling_server() -> (String, Arc<Mutex<Vec<String>>>) {
    let asked = Arc::new(Mutex::new(Vec::new()));
    let record = asked.clone();
    let endpoint = serve(move |body| {
        record.lock().unwrap().push(body.clone());
        let xml = if body.contains("Action=SetDesiredCapacity") {
            "<SetDesiredCapacityResponse xmlns=\"http://autoscaling.amazonaws.com/doc/2011-01-01/\">\
             <ResponseMetadata><RequestId>7a62c49f-0000-4fc4-9331-000000000002</RequestId></ResponseMetadata>\
             </SetDesiredCapacityResponse>"
                .to_string()
        } else {
            let instance = |id: &str| {
                format!(
                    "<member><InstanceId>{id}</InstanceId><InstanceType>m5.large</InstanceType>\
                     <AvailabilityZone>us-east-1a</AvailabilityZone><LifecycleState>InService</LifecycleState>\
                     <HealthStatus>Healthy</HealthStatus><ProtectedFromScaleIn>false</ProtectedFromScaleIn></member>"
                )
            };
            let instances = if body.contains("IncludeInstances=false") {
                String::new()
            } else {
                format!("<Instances>{}{}</Instances>", instance("i-0a"), instance("i-0b"))
            };
            format!(
                "<DescribeAutoScalingGroupsResponse xmlns=\"http://autoscaling.amazonaws.com/doc/2011-01-01/\">\
                 <DescribeAutoScalingGroupsResult><AutoScalingGroups><member>\
                 <AutoScalingGroupName>spot-a</AutoScalingGroupName><MinSize>0</MinSize><MaxSize>10</MaxSize>\
                 <DesiredCapacity>2</DesiredCapacity><DefaultCooldown>300</DefaultCooldown>\
                 <AvailabilityZones><member>us-east-1a</member></AvailabilityZones>\
                 <HealthCheckType>EC2</HealthCheckType><CreatedTime>2026-11-25T09:00:00Z</CreatedTime>\
                 {instances}</member></AutoScalingGroups></DescribeAutoScalingGroupsResult>\
                 <ResponseMetadata><RequestId>7a62c49f-0000-4fc4-9331-000000000001</RequestId></ResponseMetadata>\
                 </DescribeAutoScalingGroupsResponse>"
            )
        };
        ("200 OK", xml)
    });
    (endpoint, asked)
}

fn describes(asked: &Mutex<Vec<String>>) -> Vec<String> {
    asked.lock().unwrap().iter().filter(|b| b.contains("Action=DescribeAutoScalingGroups")).cloned().collect()
}

#[tokio::test]
async fn the_raise_guard_reads_sizes_without_instances_and_writes_from_them() {
    let (endpoint, asked) = autoscaling_server();
    let aws = AwsPorts::new(&aws_loopback::sdk_loader(endpoint).load().await, false);

    let outcomes = aws.autoscaling.raise_desired(&[DesiredWrite { group: "spot-a".into(), expected: 2, to: 3 }]).await;

    let outcomes = outcomes.expect("guarded write");
    assert_eq!(outcomes.len(), 1);
    assert_eq!(outcomes[0].1.as_ref().ok(), Some(&WriteOutcome::Written { from: 2, to: 3 }), "{outcomes:?}");
    let reads = describes(&asked);
    assert_eq!(reads.len(), 1, "one guard read: {reads:?}");
    assert!(reads[0].contains("IncludeInstances=false"), "{}", reads[0]);
    let writes: Vec<String> =
        asked.lock().unwrap().iter().filter(|b| b.contains("Action=SetDesiredCapacity")).cloned().collect();
    assert_eq!(writes.len(), 1);
    assert!(writes[0].contains("DesiredCapacity=3") && writes[0].contains("AutoScalingGroupName=spot-a"));
}

#[tokio::test]
async fn the_lowering_guard_and_the_group_reads_still_list_the_instances() {
    let (endpoint, asked) = autoscaling_server();
    let aws = AwsPorts::new(&aws_loopback::sdk_loader(endpoint).load().await, false);

    let groups = aws.autoscaling.describe_groups(&["spot-a".into()]).await.expect("describe");
    assert_eq!(groups[0].members().count(), 2, "membership comes from the instance list");
    // Two instances run: lowering desired to 1 would let Auto Scaling terminate one.
    let lowered =
        aws.autoscaling.lower_unlaunched(&[DesiredWrite { group: "spot-a".into(), expected: 2, to: 1 }]).await;
    assert_eq!(lowered.expect("guarded write")[0].1.as_ref().ok(), Some(&WriteOutcome::Raced { live: 2 }));

    let reads = describes(&asked);
    assert_eq!(reads.len(), 2);
    assert!(reads.iter().all(|r| r.contains("IncludeInstances=true")), "{reads:?}");
    assert!(!asked.lock().unwrap().iter().any(|b| b.contains("Action=SetDesiredCapacity")), "nothing lowered");
}

/// The loopback fleet the reaction bench measures against (`support::aws_fleet`) answers the
/// adapter as AWS does: group reads with and without instances, instance lookups in Auto Scaling
/// and EC2, and writes that change desired capacity within the group's bounds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bench_s_loopback_fleet_answers_the_adapter_as_aws_does() {
    use spots_booster::core::InstanceLifecycle;

    let fleet = aws_fleet::fleet("probe", 3, 4);
    let aws = AwsPorts::new(&aws_loopback::sdk_loader(aws_fleet::serve_fleet(fleet.clone())).load().await, false);
    let names: Vec<_> = ["probe-00", "probe-02"].map(Into::into).to_vec();

    let groups = aws.autoscaling.describe_groups(&names).await.expect("describe");
    assert_eq!(
        groups.iter().map(|g| (g.name.as_str(), g.desired, g.max)).collect::<Vec<_>>(),
        [("probe-00", 4, 1000), ("probe-02", 4, 1000)]
    );
    let members: Vec<_> = groups[1].members().cloned().collect();
    assert_eq!(members.len(), 4);
    let of = aws.autoscaling.groups_of(&members).await.expect("groups of");
    assert!(members.iter().all(|i| of[i].as_str() == "probe-02"), "{of:?}");
    let facts = aws.autoscaling.instance_facts(&members).await.expect("facts");
    assert!(
        facts.values().all(|f| f.lifecycle == InstanceLifecycle::Spot && f.private_dns_name.is_some()),
        "{facts:?}"
    );

    let writes = [
        DesiredWrite { group: "probe-00".into(), expected: 4, to: 6 },
        DesiredWrite { group: "probe-01".into(), expected: 3, to: 5 },
        DesiredWrite { group: "probe-02".into(), expected: 4, to: 1001 },
    ];
    let outcomes = aws.autoscaling.raise_desired(&writes).await.expect("guarded writes");
    assert_eq!(outcomes[0].1.as_ref().ok(), Some(&WriteOutcome::Written { from: 4, to: 6 }), "{outcomes:?}");
    assert_eq!(outcomes[1].1.as_ref().ok(), Some(&WriteOutcome::Raced { live: 4 }), "{outcomes:?}");
    assert!(outcomes[2].1.is_err(), "above max: {outcomes:?}");
    let desired: Vec<u32> = fleet.lock().unwrap().values().map(|g| g.desired).collect();
    assert_eq!(desired, [6, 4, 4]);
}

/// A clock the test moves by hand, and the adapter on the loopback fleet reusing guard reads
/// for `max_age`.
async fn reusing_fleet(
    fleet: &aws_fleet::Fleet,
    max_age: std::time::Duration,
) -> (spots_booster::aws::AwsAutoScaling, Arc<std::sync::atomic::AtomicI64>) {
    reusing_fleet_answering_in(fleet, max_age, std::time::Duration::ZERO).await
}

/// As [`reusing_fleet`], the fleet answering each request `latency` after it arrived.
async fn reusing_fleet_answering_in(
    fleet: &aws_fleet::Fleet,
    max_age: std::time::Duration,
    latency: std::time::Duration,
) -> (spots_booster::aws::AwsAutoScaling, Arc<std::sync::atomic::AtomicI64>) {
    use spots_booster::core::Timestamp;
    let now = Arc::new(std::sync::atomic::AtomicI64::new(1_000_000));
    let read = now.clone();
    let clock: spots_booster::ports::Clock =
        Arc::new(move || Timestamp::from_millis(read.load(std::sync::atomic::Ordering::Relaxed)));
    let endpoint = aws_fleet::serve_fleet_answering_in(fleet.clone(), latency);
    let aws = AwsPorts::new(&aws_loopback::sdk_loader(endpoint).load().await, false);
    (aws.autoscaling.reusing_guard_reads(max_age, clock), now)
}

fn reads_and_writes(fleet: &aws_fleet::Fleet) -> Vec<(usize, usize)> {
    fleet.lock().unwrap().values().map(|g| (g.reads, g.written_at.len())).collect()
}

/// A wave reaches three groups one after another. The first guard read, alone in its second (a
/// lone notice, as far as anyone can tell), reads its own group; the second takes the other two
/// along, so the third group's write, and the first group's next one, go without a read while
/// that read is younger than the max age. A second later a read is alone again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_guard_read_serves_a_wave_s_later_groups_for_the_max_age() {
    use std::sync::atomic::Ordering::Relaxed;

    let fleet = aws_fleet::fleet("wave", 3, 4);
    let (asg, now) = reusing_fleet(&fleet, std::time::Duration::from_secs(1)).await;
    let names: Vec<_> = ["wave-00", "wave-01", "wave-02"].map(Into::into).to_vec();
    asg.describe_groups(&names).await.expect("the book's sync read");
    now.fetch_add(60_000, Relaxed);
    let raise = |group: &str, expected, to| vec![DesiredWrite { group: group.into(), expected, to }];
    let written = |from, to| Some(WriteOutcome::Written { from, to });

    let first = asg.raise_desired(&raise("wave-00", 4, 5)).await.expect("raise");
    assert_eq!(first[0].1.as_ref().ok(), written(4, 5).as_ref());
    assert_eq!(reads_and_writes(&fleet), [(2, 1), (1, 0), (1, 0)], "a lone guard read reads its group alone");

    now.fetch_add(200, Relaxed);
    let second = asg.raise_desired(&raise("wave-01", 4, 6)).await.expect("raise");
    assert_eq!(second[0].1.as_ref().ok(), written(4, 6).as_ref());
    assert_eq!(reads_and_writes(&fleet), [(3, 1), (2, 1), (2, 0)], "a wave: the others taken along");

    now.fetch_add(100, Relaxed);
    let third = asg.raise_desired(&raise("wave-02", 4, 5)).await.expect("raise");
    assert_eq!(third[0].1.as_ref().ok(), written(4, 5).as_ref());
    assert_eq!(reads_and_writes(&fleet), [(3, 1), (2, 1), (2, 1)], "written from the read 100 ms old");

    now.fetch_add(100, Relaxed);
    let again = asg.raise_desired(&raise("wave-00", 5, 6)).await.expect("raise");
    assert_eq!(again[0].1.as_ref().ok(), written(5, 6).as_ref());
    assert_eq!(reads_and_writes(&fleet)[0], (3, 2), "read along after its first write was answered");

    now.fetch_add(1_000, Relaxed);
    let late = asg.raise_desired(&raise("wave-01", 6, 7)).await.expect("raise");
    assert_eq!(late[0].1.as_ref().ok(), written(6, 7).as_ref());
    assert_eq!(reads_and_writes(&fleet), [(3, 2), (3, 2), (2, 1)], "its last read a second old; read alone");
    let desired: Vec<u32> = fleet.lock().unwrap().values().map(|g| g.desired).collect();
    assert_eq!(desired, [6, 7, 5]);
}

/// Sizes read along disagree with the plan (someone changed the group, and the plan knew):
/// settled as raced with no write, and the group is read before the write planned again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_that_disagrees_with_a_recent_read_is_raced_and_read_again() {
    let fleet = aws_fleet::fleet("race", 2, 4);
    let (asg, _) = reusing_fleet(&fleet, std::time::Duration::from_secs(1)).await;
    asg.describe_groups(&["race-00".into(), "race-01".into()]).await.expect("read");
    fleet.lock().unwrap().get_mut("race-01").unwrap().desired = 7;

    let raised = asg.raise_desired(&[DesiredWrite { group: "race-01".into(), expected: 7, to: 8 }]).await;
    assert_eq!(raised.expect("raise")[0].1.as_ref().ok(), Some(&WriteOutcome::Raced { live: 4 }));
    assert_eq!(reads_and_writes(&fleet)[1], (1, 0), "no write from a read that disagrees");

    let replanned = asg.raise_desired(&[DesiredWrite { group: "race-01".into(), expected: 7, to: 8 }]).await;
    assert_eq!(replanned.expect("raise")[0].1.as_ref().ok(), Some(&WriteOutcome::Written { from: 7, to: 8 }));
    assert_eq!(reads_and_writes(&fleet)[1], (2, 1));
}

/// `--guard-read-max-age 0`, and every adapter built without it: each raise reads its group.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_no_max_age_every_raise_reads_its_groups_alone() {
    let fleet = aws_fleet::fleet("zero", 2, 4);
    let (asg, _) = reusing_fleet(&fleet, std::time::Duration::ZERO).await;
    asg.describe_groups(&["zero-00".into(), "zero-01".into()]).await.expect("read");
    for (to, group) in [(5, "zero-00"), (5, "zero-01")] {
        let raised = asg.raise_desired(&[DesiredWrite { group: group.into(), expected: 4, to }]).await;
        assert_eq!(raised.expect("raise")[0].1.as_ref().ok(), Some(&WriteOutcome::Written { from: 4, to }));
    }
    assert_eq!(reads_and_writes(&fleet), [(2, 1), (2, 1)], "a read of its own before each write, none along");
}

/// Two passes of a wave a moment apart, against an Auto Scaling answering in 200 ms: the second
/// pass's group is in the first pass's guard read (the wave's second, so it takes the others
/// along), still in flight, so its write waits for that answer instead of sending a read of its
/// own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_whose_group_a_read_in_flight_asks_for_waits_for_that_read() {
    use std::sync::atomic::Ordering::Relaxed;

    let fleet = aws_fleet::fleet("slow", 3, 4);
    let (asg, now) =
        reusing_fleet_answering_in(&fleet, std::time::Duration::from_secs(1), std::time::Duration::from_millis(200))
            .await;
    asg.describe_groups(&["slow-00".into(), "slow-01".into(), "slow-02".into()]).await.expect("the book's sync read");
    now.fetch_add(60_000, Relaxed);
    let head = asg.raise_desired(&[DesiredWrite { group: "slow-02".into(), expected: 4, to: 5 }]).await;
    assert_eq!(head.expect("raise")[0].1.as_ref().ok(), Some(&WriteOutcome::Written { from: 4, to: 5 }));

    let first = {
        let asg = asg.clone();
        tokio::spawn(
            async move { asg.raise_desired(&[DesiredWrite { group: "slow-00".into(), expected: 4, to: 5 }]).await },
        )
    };
    tokio::time::sleep(std::time::Duration::from_millis(60)).await;
    let second = asg.raise_desired(&[DesiredWrite { group: "slow-01".into(), expected: 4, to: 6 }]).await;
    let first = first.await.expect("first pass");
    assert_eq!(first.expect("raise")[0].1.as_ref().ok(), Some(&WriteOutcome::Written { from: 4, to: 5 }));
    assert_eq!(second.expect("raise")[0].1.as_ref().ok(), Some(&WriteOutcome::Written { from: 4, to: 6 }));
    assert_eq!(reads_and_writes(&fleet), [(2, 1), (2, 1), (3, 1)], "one guard read for both passes");
}

/// A read with instances (the group book's) is not waited for: its answer can take longer than a
/// read of sizes, so a raise sends its own guard read beside it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raise_does_not_wait_for_a_read_with_instances() {
    use std::sync::atomic::Ordering::Relaxed;

    let fleet = aws_fleet::fleet("book", 1, 4);
    let (asg, now) =
        reusing_fleet_answering_in(&fleet, std::time::Duration::from_secs(1), std::time::Duration::from_millis(200))
            .await;
    asg.describe_groups(&["book-00".into()]).await.expect("the book's sync read");
    now.fetch_add(60_000, Relaxed);

    let refresh = {
        let asg = asg.clone();
        tokio::spawn(async move { asg.describe_groups(&["book-00".into()]).await })
    };
    tokio::time::sleep(std::time::Duration::from_millis(60)).await;
    let raised = asg.raise_desired(&[DesiredWrite { group: "book-00".into(), expected: 4, to: 5 }]).await;
    assert_eq!(raised.expect("raise")[0].1.as_ref().ok(), Some(&WriteOutcome::Written { from: 4, to: 5 }));
    refresh.await.expect("refresh").expect("read");
    assert_eq!(reads_and_writes(&fleet), [(3, 1)], "the sync read, the book's refresh and the guard's own");
}

/// The adapter on a fleet whose reads answer in 50 ms, terminations in 300 ms and writes of
/// desired capacity in 600 ms (each applying when answered), with `race-00`'s first instance.
async fn racing_fleet() -> (spots_booster::aws::AwsAutoScaling, aws_fleet::Fleet, spots_booster::core::InstanceId) {
    use std::time::Duration;
    let fleet = aws_fleet::fleet("race", 1, 4);
    let latency: aws_fleet::Latency = Arc::new(|action| match action {
        "TerminateInstanceInAutoScalingGroup" => Duration::from_millis(300),
        "SetDesiredCapacity" => Duration::from_millis(600),
        _ => Duration::from_millis(50),
    });
    let endpoint = aws_fleet::serve_fleet_answering_by(fleet.clone(), latency);
    let aws = AwsPorts::new(&aws_loopback::sdk_loader(endpoint).load().await, false);
    let first = fleet.lock().unwrap()["race-00"].instances[0].0.clone();
    (aws.autoscaling, fleet, first.as_str().into())
}

/// `SetDesiredCapacity` writes a number; a termination with decrement lowers it by one. A
/// decrement landing between a raise's guard read and its write would be overwritten, and the
/// boost it returned a node for would leave the group one node larger for good. A raise sent
/// while a decrement is on its way reads after it, and is raced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raise_sent_during_a_decrement_reads_after_it_and_never_overwrites_it() {
    let (asg, fleet, first) = racing_fleet().await;
    let terminating = {
        let asg = asg.clone();
        tokio::spawn(async move { asg.terminate_instance(&first, true).await })
    };
    tokio::time::sleep(std::time::Duration::from_millis(150)).await;
    let raised = asg.raise_desired(&[DesiredWrite { group: "race-00".into(), expected: 4, to: 5 }]).await;
    assert_eq!(raised.expect("raise")[0].1.as_ref().ok(), Some(&WriteOutcome::Raced { live: 3 }));
    assert_eq!(
        terminating.await.expect("task").expect("terminated"),
        spots_booster::ports::TerminateOutcome::Terminated { decremented: true }
    );
    assert_eq!(fleet.lock().unwrap()["race-00"].desired, 3, "the decrement stands");
}

/// The other order: a decrement sent while a raise is on its way lands after the raise.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decrement_sent_during_a_raise_lands_after_it() {
    let (asg, fleet, first) = racing_fleet().await;
    let raising = {
        let asg = asg.clone();
        tokio::spawn(
            async move { asg.raise_desired(&[DesiredWrite { group: "race-00".into(), expected: 4, to: 5 }]).await },
        )
    };
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    let terminated = asg.terminate_instance(&first, true).await.expect("terminated");
    assert_eq!(terminated, spots_booster::ports::TerminateOutcome::Terminated { decremented: true });
    let raised = raising.await.expect("task").expect("raise");
    assert_eq!(raised[0].1.as_ref().ok(), Some(&WriteOutcome::Written { from: 4, to: 5 }));
    assert_eq!(fleet.lock().unwrap()["race-00"].desired, 4, "raised to 5, then one node returned");
}
