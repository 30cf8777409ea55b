//! Where moto cannot go: Auto Scaling's scaling activities (moto answers
//! `DescribeScalingActivities` with nothing, and launches every instance). A loopback server
//! answers the way Auto Scaling does: its XML, newest first, in pages linked by `NextToken`, with
//! failed launches worded as AWS words them. The adapter must read no further back than asked,
//! and the core must tell a pool without capacity from a broken configuration.

use std::io::Write;
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

use aws_config::{BehaviorVersion, Region};
use aws_sdk_autoscaling::config::Credentials;
use spots_booster::aws::AwsPorts;
use spots_booster::core::{classify, GroupName, LaunchFailure, Timestamp};
use spots_booster::ports::AutoScaling;
use support::read_request_body;

#[path = "support/aws_loopback.rs"]
mod support;

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
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let asked = Arc::new(Mutex::new(Vec::new()));
    let record = asked.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let body = String::from_utf8_lossy(&read_request_body(&stream)).to_string();
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
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Type: text/xml\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{xml}",
                xml.len()
            );
        }
    });
    (endpoint, asked)
}

#[tokio::test]
async fn failed_launches_since_a_boost_are_read_and_classified() {
    let (endpoint, asked) = autoscaling_server();
    let config = aws_config::defaults(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .endpoint_url(endpoint)
        .credentials_provider(Credentials::new("test", "test", None, None, "static"))
        .load()
        .await;
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
