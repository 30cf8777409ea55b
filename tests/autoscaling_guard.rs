//! Where moto cannot go: `IncludeInstances`. Moto ignores it and lists every instance; Auto
//! Scaling leaves the list out when asked to. The raise guard compares sizes only, so its re-read
//! asks for no instances, and must write from an answer that has none; the guard of a lowering,
//! which counts the instances, must still ask for them.

use std::sync::{Arc, Mutex};

use aws_loopback::serve;
use spots_booster::aws::AwsPorts;
use spots_booster::ports::{AutoScaling, DesiredWrite, WriteOutcome};

use crate::support::aws_loopback;

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

    use crate::support::aws_fleet;

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
