//! Where moto cannot go: spot requests. moto launches Auto Scaling instances on demand, with no
//! spot request, so whether EC2 reports an interruption is answered here by a loopback server
//! the way EC2 answers `DescribeSpotInstanceRequests` (its XML; an `instance-id` filter naming
//! unknown ids answers what it finds). Only a request EC2 marked, or interrupted itself, confirms
//! a notice.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use aws_loopback::serve;
use spots_booster::aws::AwsPorts;
use spots_booster::core::InstanceId;
use spots_booster::ports::AutoScaling;

use crate::support::aws_loopback;

/// Per instance with a spot request, its status code.
type Requests = BTreeMap<&'static str, &'static str>;

fn request_item(k: usize, id: &str, code: &str) -> String {
    let state = if code.starts_with("instance-terminated") { "closed" } else { "active" };
    format!(
        "<item><spotInstanceRequestId>sir-0000{k:04}</spotInstanceRequestId><spotPrice>0.0416</spotPrice>\
         <type>one-time</type><state>{state}</state><status><code>{code}</code>\
         <updateTime>2026-11-28T01:00:00.000Z</updateTime><message>as EC2 writes it</message></status>\
         <instanceId>{id}</instanceId><instanceInterruptionBehavior>terminate</instanceInterruptionBehavior>\
         <productDescription>Linux/UNIX</productDescription></item>"
    )
}

/// Serves `DescribeSpotInstanceRequests` for `requests`, recording each call's filter values.
fn ec2_server(requests: Requests) -> (String, Arc<Mutex<Vec<Vec<String>>>>) {
    let asked = Arc::new(Mutex::new(Vec::new()));
    let record = asked.clone();
    let endpoint = serve(move |body| {
        let form: Vec<(String, String)> =
            body.split('&').filter_map(|kv| kv.split_once('=')).map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let field = |k: &str| form.iter().find(|(key, _)| key == k).map(|(_, v)| v.as_str());
        if field("Action") != Some("DescribeSpotInstanceRequests") || field("Filter.1.Name") != Some("instance-id") {
            let error =
                "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Response><Errors><Error><Code>InvalidParameterValue</Code>\
                         <Message>the loopback answers DescribeSpotInstanceRequests by instance-id only</Message>\
                         </Error></Errors><RequestID>r</RequestID></Response>";
            return ("400 Bad Request", error.to_string());
        }
        let ids: Vec<String> =
            form.iter().filter(|(k, _)| k.starts_with("Filter.1.Value.")).map(|(_, v)| v.clone()).collect();
        record.lock().unwrap().push(ids.clone());
        let items: String = requests
            .iter()
            .enumerate()
            .filter(|(_, (id, _))| ids.iter().any(|i| i == *id))
            .map(|(k, (id, code))| request_item(k, id, code))
            .collect();
        let xml = format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\
             <DescribeSpotInstanceRequestsResponse xmlns=\"http://ec2.amazonaws.com/doc/2016-11-15/\">\
             <requestId>5b4b7f5e-0000-4000-8000-000000000002</requestId>\
             <spotInstanceRequestSet>{items}</spotInstanceRequestSet></DescribeSpotInstanceRequestsResponse>"
        );
        ("200 OK", xml)
    });
    (endpoint, asked)
}

#[tokio::test]
async fn only_requests_ec2_marked_or_interrupted_confirm_a_notice() {
    let requests: Requests = BTreeMap::from([
        ("i-0000000000000aaaa", "marked-for-termination"),
        ("i-0000000000000bbbb", "fulfilled"),
        ("i-0000000000000cccc", "instance-terminated-by-user"),
        ("i-0000000000000dddd", "instance-terminated-no-capacity"),
        ("i-0000000000000eeee", "marked-for-stop"),
    ]);
    let (endpoint, asked) = ec2_server(requests);
    let config = aws_loopback::sdk_loader(endpoint).load().await;
    let aws = AwsPorts::new(&config, false);
    let mut ids: Vec<InstanceId> = ["aaaa", "bbbb", "cccc", "dddd", "eeee"]
        .iter()
        .map(|s| InstanceId::from(format!("i-0000000000000{s}").as_str()))
        .collect();
    // An on-demand instance (no spot request) and one EC2 no longer knows: simply absent.
    ids.push("i-0000000000000ffff".into());
    ids.push("i-00000000000000ee".into());
    let found = aws.autoscaling.spot_interruptions(&ids).await.unwrap();
    let expected: BTreeSet<InstanceId> = [0, 3, 4].iter().map(|&k| ids[k].clone()).collect();
    assert_eq!(found, expected, "the user's own termination and a running request confirm nothing");
    assert_eq!(asked.lock().unwrap().len(), 1, "one call for seven ids");
    assert_eq!(asked.lock().unwrap()[0].len(), 7);
    assert_eq!(aws.stats.calls("DescribeSpotInstanceRequests"), 1);
}
