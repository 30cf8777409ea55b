//! Where moto cannot go: EC2's scheduled events. A loopback server answers
//! `DescribeInstanceStatus` the way EC2 does (its XML, `InvalidInstanceID.NotFound` for the
//! whole call when one id is unknown); the adapter must find the instances with a pending event
//! and not those whose events are over.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use aws_loopback::serve;
use spots_booster::aws::AwsPorts;
use spots_booster::core::{InstanceId, Timestamp};
use spots_booster::ports::AutoScaling;

use crate::support::aws_loopback;

/// Per instance, the descriptions of its scheduled events.
type Fleet = BTreeMap<&'static str, Vec<&'static str>>;

fn status_item(id: &str, events: &[&str]) -> String {
    let events: String = events
        .iter()
        .enumerate()
        .map(|(k, d)| {
            // Each later event of the list starts an hour earlier.
            let hour = 9 - k;
            format!(
                "<item><code>instance-retirement</code><description>{d}</description>\
                 <notBefore>2026-11-27T0{hour}:00:00.000Z</notBefore></item>"
            )
        })
        .collect();
    format!(
        "<item><instanceId>{id}</instanceId><availabilityZone>us-east-1a</availabilityZone>\
         <instanceState><code>16</code><name>running</name></instanceState>\
         <systemStatus><status>ok</status></systemStatus><instanceStatus><status>ok</status></instanceStatus>\
         <eventsSet>{events}</eventsSet></item>"
    )
}

/// Serves `DescribeInstanceStatus` for `fleet`, recording the ids each request asked for.
fn ec2_server(fleet: Fleet) -> (String, Arc<Mutex<Vec<Vec<String>>>>) {
    let asked = Arc::new(Mutex::new(Vec::new()));
    let record = asked.clone();
    let endpoint = serve(move |body| {
        let ids: Vec<String> = body
            .split('&')
            .filter_map(|kv| kv.split_once('='))
            .filter(|(k, _)| k.starts_with("InstanceId."))
            .map(|(_, v)| v.to_string())
            .collect();
        record.lock().unwrap().push(ids.clone());
        let (status, xml) = match ids.iter().find(|i| !fleet.contains_key(i.as_str())) {
                Some(unknown) => (
                    "400 Bad Request",
                    format!(
                        "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Response><Errors><Error>\
                         <Code>InvalidInstanceID.NotFound</Code><Message>The instance ID '{unknown}' does not exist</Message>\
                         </Error></Errors><RequestID>5b4b7f5e-0000-4000-8000-000000000000</RequestID></Response>"
                    ),
                ),
                None => {
                    let items: String = ids.iter().map(|i| status_item(i, &fleet[i.as_str()])).collect();
                    (
                        "200 OK",
                        format!(
                            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\
                             <DescribeInstanceStatusResponse xmlns=\"http://ec2.amazonaws.com/doc/2016-11-15/\">\
                             <requestId>5b4b7f5e-0000-4000-8000-000000000001</requestId>\
                             <instanceStatusSet>{items}</instanceStatusSet></DescribeInstanceStatusResponse>"
                        ),
                    )
                }
            };
        (status, xml)
    });
    (endpoint, asked)
}

#[tokio::test]
async fn only_instances_with_a_pending_scheduled_event_are_listed() {
    let fleet: Fleet = BTreeMap::from([
        ("i-0000000000000aaaa", vec!["The instance is running on degraded hardware", "Scheduled reboot"]),
        ("i-0000000000000bbbb", vec!["[Completed] The instance is running on degraded hardware"]),
        ("i-0000000000000cccc", vec!["[Canceled] Scheduled reboot"]),
        ("i-0000000000000dddd", vec![]),
    ]);
    let (endpoint, asked) = ec2_server(fleet);
    let config = aws_loopback::sdk_loader(endpoint).load().await;
    let aws = AwsPorts::new(&config, false);
    let ids: Vec<InstanceId> = ["aaaa", "bbbb", "cccc", "dddd"]
        .iter()
        .map(|s| InstanceId::from(format!("i-0000000000000{s}").as_str()))
        .collect();
    let found = aws.autoscaling.scheduled_events(&ids).await.unwrap();
    // 2026-11-27T08:00:00Z: the earlier of its two events.
    let starts = Timestamp::from_millis(1_795_766_400_000);
    assert_eq!(found, BTreeMap::from([(ids[0].clone(), starts)]), "completed and cancelled events are over");
    assert_eq!(asked.lock().unwrap().len(), 1, "one call for four ids");

    // An instance gone since its notice fails EC2's whole call: the others are still answered.
    let mut with_gone = ids.clone();
    with_gone.push("i-00000000000000ff".into());
    asked.lock().unwrap().clear();
    let found = aws.autoscaling.scheduled_events(&with_gone).await.unwrap();
    assert_eq!(found, BTreeMap::from([(ids[0].clone(), starts)]));
    assert_eq!(asked.lock().unwrap().len(), 1 + with_gone.len(), "the batch, then each id alone");
    assert_eq!(aws.stats.calls("DescribeInstanceStatus"), 7);
}
