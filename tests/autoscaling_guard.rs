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
