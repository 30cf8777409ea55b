//! Where moto cannot go: Auto Scaling's scaling activities (moto answers
//! `DescribeScalingActivities` with nothing, and launches every instance). A loopback server
//! answers the way Auto Scaling does: its XML, newest first, in pages linked by `NextToken`, with
//! failed launches worded as AWS words them. The adapter must read no further back than asked,
//! and the core must tell a pool without capacity from a broken configuration.

use std::sync::{Arc, Mutex};

use aws_loopback::serve;
use spots_booster::aws::AwsPorts;
use spots_booster::core::{classify, GroupName, LaunchFailure, Timestamp};
use spots_booster::ports::AutoScaling;

use crate::support::aws_loopback;

const SPOT: &str = "Could not launch Spot Instances. InsufficientInstanceCapacity - There is no Spot capacity \
                    available that matches your request. Launching EC2 instance failed.";
const TEMPLATE: &str =
    "The specified launch template, with template ID lt-0e4f0a5e0a1b2c3d4, does not exist. Launching EC2 instance failed.";

fn activity(id: &str, status: &str, started: &str, message: Option<&str>) -> String {
    let message = message.map(|m| format!("<StatusMessage>{m}</StatusMessage>")).unwrap_or_default();
    let reason = if status == "Failed" { " Status Reason: failed." } else { "" };
    format!(
        "<member><ActivityId>{id}</ActivityId><AutoScalingGroupName>spot-a</AutoScalingGroupName>\
         <Description>Launching a new EC2 instance.{reason}</Description>\
         <Cause>At {started} an instance was started in response to a difference between desired and actual \
         capacity, increasing the capacity from 5 to 8.</Cause>\
         <StartTime>{started}</StartTime><EndTime>{started}</EndTime><StatusCode>{status}</StatusCode>{message}\
         <Progress>100</Progress><Details>{{\"Subnet ID\":\"subnet-0f77\",\"Availability Zone\":\"us-east-1a\"}}</Details>\
         </member>"
    )
}

/// Serves three pages of `spot-a`'s activities, newest first, recording each request's body.
fn autoscaling_server() -> (String, Arc<Mutex<Vec<String>>>) {
    let asked = Arc::new(Mutex::new(Vec::new()));
    let record = asked.clone();
    let endpoint = serve(move |body| {
        record.lock().unwrap().push(body.clone());
        let (members, next) = if body.contains("NextToken=page-3") {
            (activity("a5", "Successful", "2026-11-25T09:00:00Z", None), "")
        } else if body.contains("NextToken=page-2") {
            // The boost's window began at 10:00: the second activity is older.
            let older = activity("a4", "Failed", "2026-11-25T09:59:00Z", Some(SPOT));
            (activity("a3", "Successful", "2026-11-25T10:00:01Z", None) + &older, "page-3")
        } else {
            let newest = activity("a1", "Failed", "2026-11-25T10:00:09.512Z", Some(SPOT));
            (newest + &activity("a2", "Failed", "2026-11-25T10:00:05Z", Some(TEMPLATE)), "page-2")
        };
        let token = if next.is_empty() { String::new() } else { format!("<NextToken>{next}</NextToken>") };
        let xml = format!(
            "<DescribeScalingActivitiesResponse xmlns=\"http://autoscaling.amazonaws.com/doc/2011-01-01/\">\
                 <DescribeScalingActivitiesResult><Activities>{members}</Activities>{token}\
                 </DescribeScalingActivitiesResult><ResponseMetadata><RequestId>7a62c49f-0000-4fc4-9331-000000000001\
                 </RequestId></ResponseMetadata></DescribeScalingActivitiesResponse>"
        );
        ("200 OK", xml)
    });
    (endpoint, asked)
}

#[tokio::test]
async fn failed_launches_since_a_boost_are_read_and_classified() {
    let (endpoint, asked) = autoscaling_server();
    let config = aws_loopback::sdk_loader(endpoint).load().await;
    let aws = AwsPorts::new(&config, false);
    let since: Timestamp =
        Timestamp::from_millis("2026-11-25T10:00:00Z".parse::<jiff::Timestamp>().unwrap().as_millisecond());
    let activities = aws.autoscaling.scaling_activities(&GroupName::from("spot-a"), since).await.unwrap();

    let ids: Vec<&str> = activities.iter().map(|a| a.id.as_str()).collect();
    assert_eq!(ids, vec!["a1", "a2", "a3"], "newest first, none older than the boost");
    let bodies = asked.lock().unwrap().clone();
    assert_eq!(bodies.len(), 2, "the page holding an older activity is the last read: {bodies:?}");
    assert!(bodies.iter().all(|b| b.contains("AutoScalingGroupName=spot-a") && b.contains("MaxRecords=50")));
    assert_eq!(activities[0].started.as_millis() % 1000, 512, "milliseconds kept");

    let failures: Vec<Option<LaunchFailure>> = activities.iter().map(classify).collect();
    assert_eq!(failures[0], Some(LaunchFailure::Capacity { code: "InsufficientInstanceCapacity".into() }));
    assert_eq!(failures[1], Some(LaunchFailure::Configuration { message: TEMPLATE.into() }));
    assert_eq!(failures[2], None, "a launch that succeeded");
    assert_eq!(aws.stats.calls("DescribeScalingActivities"), 2, "one call per page read");
}

/// A group as the loopback Auto Scaling server keeps it.
struct LoopbackGroup {
    desired: u32,
    max: u32,
    instances: Vec<String>,
    tags: Vec<(String, String)>,
    /// Failed launch activities, newest first: (id, start time).
    failed: Vec<(String, String)>,
}

/// What the loopback server was asked to write: (group, desired, when).
type Writes = Arc<Mutex<Vec<(String, u32, std::time::Instant)>>>;

fn form(body: &str) -> std::collections::BTreeMap<String, String> {
    body.split('&')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.replace("%2C", ",").replace("%2F", "/").replace("%3A", ":")))
        .collect()
}

fn group_xml(name: &str, g: &LoopbackGroup) -> String {
    let instances: String = g
        .instances
        .iter()
        .map(|i| {
            format!(
                "<member><InstanceId>{i}</InstanceId><AvailabilityZone>us-east-1a</AvailabilityZone>\
                 <LifecycleState>InService</LifecycleState><HealthStatus>Healthy</HealthStatus>\
                 <ProtectedFromScaleIn>false</ProtectedFromScaleIn></member>"
            )
        })
        .collect();
    let tags: String = g
        .tags
        .iter()
        .map(|(k, v)| {
            format!(
                "<member><Key>{k}</Key><Value>{v}</Value><ResourceId>{name}</ResourceId>\
                 <ResourceType>auto-scaling-group</ResourceType><PropagateAtLaunch>false</PropagateAtLaunch></member>"
            )
        })
        .collect();
    format!(
        "<member><AutoScalingGroupName>{name}</AutoScalingGroupName>\
         <AutoScalingGroupARN>arn:aws:autoscaling:us-east-1:123456789012:autoScalingGroup:1:autoScalingGroupName/{name}</AutoScalingGroupARN>\
         <MinSize>0</MinSize><MaxSize>{}</MaxSize><DesiredCapacity>{}</DesiredCapacity><DefaultCooldown>300</DefaultCooldown>\
         <AvailabilityZones><member>us-east-1a</member></AvailabilityZones><HealthCheckType>EC2</HealthCheckType>\
         <CreatedTime>2026-11-25T09:00:00Z</CreatedTime><Instances>{instances}</Instances>\
         <SuspendedProcesses><member><ProcessName>AZRebalance</ProcessName><SuspensionReason>test</SuspensionReason></member></SuspendedProcesses>\
         <Tags>{tags}</Tags></member>",
        g.max, g.desired
    )
}

/// Auto Scaling (and EC2's DescribeInstances, answered with nothing) as the real service answers
/// a group whose pool has no capacity: desired raised, no instance listed, failed activities.
fn stateful_server(groups: std::collections::BTreeMap<String, LoopbackGroup>) -> (String, Writes) {
    let writes: Writes = Arc::default();
    let record = writes.clone();
    let groups = Arc::new(Mutex::new(groups));
    let endpoint = serve(move |body| {
        let f = form(&body);
        let action = f.get("Action").cloned().unwrap_or_default();
        let mut groups = groups.lock().unwrap();
        let ns = "xmlns=\"http://autoscaling.amazonaws.com/doc/2011-01-01/\"";
        let meta = "<ResponseMetadata><RequestId>7a62c49f-0000-4fc4-9331-000000000002</RequestId></ResponseMetadata>";
        let xml = match action.as_str() {
            "DescribeAutoScalingGroups" => {
                let names: Vec<&String> =
                    f.iter().filter(|(k, _)| k.starts_with("AutoScalingGroupNames.member.")).map(|(_, v)| v).collect();
                let members: String = groups
                    .iter()
                    .filter(|(n, _)| names.is_empty() || names.contains(n))
                    .map(|(n, g)| group_xml(n, g))
                    .collect();
                format!(
                    "<DescribeAutoScalingGroupsResponse {ns}><DescribeAutoScalingGroupsResult>\
                         <AutoScalingGroups>{members}</AutoScalingGroups></DescribeAutoScalingGroupsResult>{meta}\
                         </DescribeAutoScalingGroupsResponse>"
                )
            }
            "SetDesiredCapacity" => {
                let name = f["AutoScalingGroupName"].clone();
                let desired: u32 = f["DesiredCapacity"].parse().unwrap();
                groups.get_mut(&name).unwrap().desired = desired;
                record.lock().unwrap().push((name, desired, std::time::Instant::now()));
                format!("<SetDesiredCapacityResponse {ns}>{meta}</SetDesiredCapacityResponse>")
            }
            "DescribeScalingActivities" => {
                let g = &groups[&f["AutoScalingGroupName"]];
                let members: String = g.failed.iter().map(|(id, at)| activity(id, "Failed", at, Some(SPOT))).collect();
                format!(
                    "<DescribeScalingActivitiesResponse {ns}><DescribeScalingActivitiesResult>\
                         <Activities>{members}</Activities></DescribeScalingActivitiesResult>{meta}\
                         </DescribeScalingActivitiesResponse>"
                )
            }
            "DescribeInstances" => "<DescribeInstancesResponse xmlns=\"http://ec2.amazonaws.com/doc/2016-11-15/\">\
                     <requestId>5b4b7f5e-0000-4000-8000-000000000003</requestId><reservationSet/>\
                     </DescribeInstancesResponse>"
                .to_string(),
            other => panic!("the loopback server does not answer {other}: {body}"),
        };
        ("200 OK", xml)
    });
    (endpoint, writes)
}

#[tokio::test]
async fn a_boost_into_a_pool_without_capacity_lands_in_its_fallback_through_the_real_adapter() {
    use spots_booster::core::{BoostRecord, InstanceId, Node, NodeName, Policy, Resources};
    use spots_booster::fakes::{FakeAutoScaling, FakeRig};
    use spots_booster::metrics::Metrics;
    use spots_booster::workers::launch_watcher::{LaunchWatchSettings, LaunchWatcher};
    use spots_booster::workers::scaler::{Scaler, ScalerSettings};

    // spot-a was boosted 3 -> 5 two seconds ago; its pool has no capacity: nothing is listed, and
    // its launch failed a second ago. Its tag names spot-b.
    let now = jiff::Timestamp::now();
    let failed_at = now - jiff::SignedDuration::from_secs(1);
    let groups = std::collections::BTreeMap::from([
        (
            "spot-a".to_string(),
            LoopbackGroup {
                desired: 5,
                max: 10,
                instances: vec!["i-0a1".into(), "i-0a2".into(), "i-0a3".into()],
                tags: vec![
                    ("spots-booster.io/fallback-groups".into(), "spot-b".into()),
                    ("kubernetes.io/cluster/test-cluster".into(), "owned".into()),
                ],
                failed: vec![("a1".into(), failed_at.to_string())],
            },
        ),
        (
            "spot-b".to_string(),
            LoopbackGroup {
                desired: 2,
                max: 10,
                instances: vec!["i-0b1".into(), "i-0b2".into()],
                tags: vec![("kubernetes.io/cluster/test-cluster".into(), "owned".into())],
                failed: Vec::new(),
            },
        ),
    ]);
    let (endpoint, writes) = stateful_server(groups);
    let config = aws_loopback::sdk_loader(endpoint).load().await;
    let aws = AwsPorts::new(&config, false);
    let rig = FakeRig::new(FakeAutoScaling::default());
    for (node, group) in [("a1", "spot-a"), ("a2", "spot-a"), ("a3", "spot-a"), ("b1", "spot-b"), ("b2", "spot-b")] {
        rig.cluster.put_node(Node {
            name: NodeName::from(node),
            instance: Some(InstanceId::from(format!("i-0{node}").as_str())),
            group: Some(GroupName::from(group)),
            ready: true,
            cordoned: false,
            deleting_by_ca: false,
            cordoned_since: None,
            scale_down_disabled: false,
            opted_out: false,
            created: Timestamp::EPOCH,
            allocatable: Resources::new(4000, 16 << 30),
            pods: Vec::new(),
            internal_ips: Vec::new(),
            pods_known: true,
        });
    }
    let ctx = rig
        .context_with(
            aws.autoscaling.clone(),
            Policy::default(),
            spots_booster::workers::system_clock(),
            Arc::new(Metrics::new()),
        )
        .await;
    let decided = Timestamp::from_millis((now - jiff::SignedDuration::from_secs(2)).as_millisecond());
    let record = BoostRecord {
        group: "spot-a".into(),
        instances: ["i-0a1".into()].into(),
        added: 2,
        returned: 0,
        at: decided,
        before: 3,
        settled: Default::default(),
        kept: Default::default(),
        expired: None,
        giving_back: Default::default(),
        raising_to: None,
        returning: Default::default(),
        moved: Vec::new(),
        ahead: None,
        standby: None,
    };
    ctx.ledger.update(|l| l.record(record)).await.unwrap();

    let mut scaler = Scaler::new(ctx.clone(), ScalerSettings::default());
    let mut watcher = LaunchWatcher::new(ctx.clone(), LaunchWatchSettings::default()).waking(scaler.waker());
    let report = watcher.tick().await.unwrap();
    assert_eq!(report.failed.len(), 1, "{report:?}");
    let report = scaler.tick().await.unwrap();
    assert_eq!(report.fell_back, vec![(GroupName::from("spot-a"), GroupName::from("spot-b"), 2)]);

    let writes = writes.lock().unwrap().clone();
    let sizes: Vec<(&str, u32)> = writes.iter().map(|(g, d, _)| (g.as_str(), *d)).collect();
    assert_eq!(sizes, vec![("spot-b", 4), ("spot-a", 3)], "the fallback raised, then the unlaunched nodes taken back");
    let since_failure = std::time::Duration::try_from(jiff::Timestamp::now() - failed_at).unwrap();
    assert!(since_failure < std::time::Duration::from_secs(30), "{since_failure:?} from the failed activity");
    let saved = ctx.ledger.current().await;
    assert_eq!((saved.records[0].added, saved.records[0].moved[0].added), (0, 2));
    assert!(saved.records[0].moved[0].taken_back);
}
