//! A loopback proxy in front of moto that answers some Query-API requests itself, or edits moto's
//! answer, where moto cannot play AWS: it launches every instance and reports no scaling
//! activity, so a pool that runs dry has to be answered here (`DescribeScalingActivities` with a
//! failed launch worded as Auto Scaling words it, a `SetDesiredCapacity` that launches nothing).
//! Everything else goes to moto, one request per upstream connection. Requests that change a
//! group's desired capacity go to moto one at a time: moto reads, changes and writes it back
//! without a lock, so two decrements at once lose one, where Auto Scaling applies both. And a
//! `TerminateInstanceInAutoScalingGroup` for an instance no group holds any more (AWS took it)
//! gets Auto Scaling's `ValidationError`, where moto fails with a 500.

#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The key under which the hook finds the request line (`POST /clusters/prod/node-groups/x`),
/// for the REST-JSON services (EKS), whose operation is in the path rather than the form.
pub const REQUEST_LINE: &str = ":request";

/// What the proxy does with one request.
pub enum Answer {
    /// Send it to moto and pass moto's answer back.
    Forward,
    /// Answer `200 OK` with this XML body; moto never sees the request.
    Reply(String),
    /// Answer `200 OK` with this JSON body (a REST-JSON service); moto never sees the request.
    ReplyJson(String),
    /// Send it to moto and pass back moto's body as edited.
    Edit(Box<dyn FnOnce(String) -> String + Send>),
}

/// Decides each request from its form (`Action`, `AutoScalingGroupName`, …).
pub type Hook = Arc<dyn Fn(&BTreeMap<String, String>) -> Answer + Send + Sync>;

/// Starts the proxy to `upstream` (`http://host:port`) and returns its own endpoint.
pub async fn intercepting_proxy(upstream: &str, hook: Hook) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = format!("http://{}", listener.local_addr().unwrap());
    let upstream = upstream.trim_start_matches("http://").to_string();
    tokio::spawn(async move {
        loop {
            let Ok((client, _)) = listener.accept().await else { return };
            tokio::spawn(serve(client, upstream.clone(), hook.clone()));
        }
    });
    address
}

/// The Auto Scaling actions that read and write a group's desired capacity in moto.
const DESIRED_WRITES: [&str; 4] =
    ["TerminateInstanceInAutoScalingGroup", "SetDesiredCapacity", "UpdateAutoScalingGroup", "DetachInstances"];

const TERMINATE: &str = "TerminateInstanceInAutoScalingGroup";

static DESIRED_WRITE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn serve(mut client: TcpStream, upstream: String, hook: Hook) {
    let mut pending = Vec::new();
    while let Some((head, body)) = read_request(&mut client, &mut pending).await {
        let mut form = form(&body);
        let line = head.lines().next().unwrap_or_default();
        form.insert(REQUEST_LINE.to_string(), line.rsplit_once(' ').map_or(line, |(l, _)| l).to_string());
        if header(&head, "content-type").is_some_and(|t| t.contains("json")) {
            form.insert(":body".to_string(), String::from_utf8_lossy(&body).into_owned());
        }
        let writes_desired = form.get("Action").is_some_and(|a| DESIRED_WRITES.contains(&a.as_str()));
        let response = match hook(&form) {
            Answer::Reply(xml) => ok(&xml),
            Answer::ReplyJson(json) => format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{json}",
                json.len()
            )
            .into_bytes(),
            Answer::Forward if writes_desired => {
                let _one_at_a_time = DESIRED_WRITE.lock().await;
                let answered = forward(&upstream, &head, &body).await;
                match form.get("InstanceId") {
                    Some(instance) if form.get("Action").map(String::as_str) == Some(TERMINATE) => {
                        as_aws_terminate(&upstream, &head, answered, instance).await
                    }
                    _ => answered,
                }
            }
            Answer::Forward => forward(&upstream, &head, &body).await,
            Answer::Edit(edit) => {
                let answered = forward(&upstream, &head, &body).await;
                edited(&answered, edit)
            }
        };
        if client.write_all(&response).await.is_err() {
            return;
        }
    }
}

/// One HTTP request (head, body) off the connection; `None` once the client closes it.
async fn read_request(client: &mut TcpStream, pending: &mut Vec<u8>) -> Option<(String, Vec<u8>)> {
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        if let Some(end) = find(pending, b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&pending[..end]).into_owned();
            let length = header(&head, "content-length").and_then(|v| v.parse::<usize>().ok()).unwrap_or(0);
            assert!(header(&head, "transfer-encoding").is_none(), "the SDK sends Query requests with a length");
            if pending.len() >= end + 4 + length {
                let body = pending[end + 4..end + 4 + length].to_vec();
                pending.drain(..end + 4 + length);
                return Some((head, body));
            }
        }
        let n = client.read(&mut buffer).await.ok().filter(|n| *n > 0)?;
        pending.extend_from_slice(&buffer[..n]);
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn header(head: &str, name: &str) -> Option<String> {
    head.lines().skip(1).find_map(|line| {
        let (key, value) = line.split_once(':')?;
        key.trim().eq_ignore_ascii_case(name).then(|| value.trim().to_string())
    })
}

/// The form-encoded body, decoded.
fn form(body: &[u8]) -> BTreeMap<String, String> {
    super::aws_fleet::parse_form(&String::from_utf8_lossy(body)).into_iter().collect()
}

fn ok(xml: &str) -> Vec<u8> {
    format!("HTTP/1.1 200 OK\r\nContent-Type: text/xml\r\nContent-Length: {}\r\n\r\n{xml}", xml.len()).into_bytes()
}

/// Sends the request to moto on a connection of its own, closed after the answer.
async fn forward(upstream: &str, head: &str, body: &[u8]) -> Vec<u8> {
    let mut server = TcpStream::connect(upstream).await.expect("moto answers");
    let mut lines: Vec<&str> =
        head.split("\r\n").filter(|l| !l.to_ascii_lowercase().starts_with("connection:")).collect();
    lines.push("Connection: close");
    let mut request = lines.join("\r\n").into_bytes();
    request.extend_from_slice(b"\r\n\r\n");
    request.extend_from_slice(body);
    server.write_all(&request).await.unwrap();
    let mut answer = Vec::new();
    server.read_to_end(&mut answer).await.unwrap();
    answer
}

/// moto's answer to a termination or, where moto failed with a 500 because no group holds the
/// instance any more (its lookup runs dry), the `ValidationError` Auto Scaling answers then.
async fn as_aws_terminate(upstream: &str, head: &str, answer: Vec<u8>, instance: &str) -> Vec<u8> {
    if !answer.starts_with(b"HTTP/1.1 500") && !answer.starts_with(b"HTTP/1.0 500") {
        return answer;
    }
    // Asked of moto with the same signed head: Auto Scaling's instances, by id.
    let ask = format!("Action=DescribeAutoScalingInstances&Version=2011-01-01&InstanceIds.member.1={instance}");
    let head: String = head
        .split("\r\n")
        .map(|l| {
            if l.to_ascii_lowercase().starts_with("content-length:") {
                format!("Content-Length: {}", ask.len())
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\r\n");
    let listed = forward(upstream, &head, ask.as_bytes()).await;
    if find(&listed, format!("<InstanceId>{instance}</InstanceId>").as_bytes()).is_some() {
        return answer;
    }
    let xml = format!(
        "<ErrorResponse xmlns=\"http://autoscaling.amazonaws.com/doc/2011-01-01/\"><Error><Type>Sender</Type>\
         <Code>ValidationError</Code><Message>Instance Id not found - No managed instance found for instance ID: \
         {instance}</Message></Error><RequestId>2c1f7d7e-0000-4b6a-8e00-000000000003</RequestId></ErrorResponse>"
    );
    format!("HTTP/1.1 400 Bad Request\r\nContent-Type: text/xml\r\nContent-Length: {}\r\n\r\n{xml}", xml.len())
        .into_bytes()
}

/// moto's answer with its body edited and its length set again.
fn edited(answer: &[u8], edit: Box<dyn FnOnce(String) -> String + Send>) -> Vec<u8> {
    let end = find(answer, b"\r\n\r\n").expect("an HTTP answer");
    let head = String::from_utf8_lossy(&answer[..end]).into_owned();
    assert!(header(&head, "transfer-encoding").is_none(), "moto answers with a length");
    let body = edit(String::from_utf8_lossy(&answer[end + 4..]).into_owned());
    let lines: Vec<String> = head
        .split("\r\n")
        .filter(|l| !l.to_ascii_lowercase().starts_with("content-length:"))
        .map(String::from)
        .chain([format!("Content-Length: {}", body.len())])
        .collect();
    format!("{}\r\n\r\n{body}", lines.join("\r\n")).into_bytes()
}

/// `DescribeAutoScalingGroups`' XML with `group`'s DesiredCapacity set to `desired` (moto lists a
/// group's name before its sizes).
pub fn with_desired(xml: String, group: &str, desired: u32) -> String {
    let name = format!("<AutoScalingGroupName>{group}</AutoScalingGroupName>");
    let Some(at) = xml.find(&name) else { return xml };
    let open = "<DesiredCapacity>";
    let start = at + xml[at..].find(open).expect("the group has a desired capacity") + open.len();
    let end = start + xml[start..].find('<').unwrap();
    format!("{}{desired}{}", &xml[..start], &xml[end..])
}

/// Auto Scaling's answer to `SetDesiredCapacity`.
pub fn set_desired_capacity_answer() -> String {
    "<SetDesiredCapacityResponse xmlns=\"http://autoscaling.amazonaws.com/doc/2011-01-01/\"><ResponseMetadata>\
     <RequestId>1d6b2c4a-0000-4c3e-9f00-000000000001</RequestId></ResponseMetadata></SetDesiredCapacityResponse>"
        .to_string()
}

/// Auto Scaling's answer to `DescribeScalingActivities` for `group`: one launch that failed for
/// want of spot capacity at `at` (RFC 3339), or none.
pub fn activities_answer(group: &str, failed_at: Option<&str>) -> String {
    // Activity ids are UUIDs, unique across groups: one per group here.
    let id = group.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
    let members = failed_at
        .map(|at| {
            format!(
                "<member><ActivityId>5e0f9a62-0000-4a8e-b000-{:012x}</ActivityId>\
                 <AutoScalingGroupName>{group}</AutoScalingGroupName>\
                 <Description>Launching a new EC2 instance.  Status Reason: Could not launch Spot Instances. \
                 InsufficientInstanceCapacity - There is no Spot capacity available that matches your request. \
                 Launching EC2 instance failed.</Description>\
                 <Cause>At {at} an instance was started in response to a difference between desired and actual \
                 capacity, increasing the capacity from 2 to 3.</Cause><StartTime>{at}</StartTime><EndTime>{at}</EndTime>\
                 <StatusCode>Failed</StatusCode><StatusMessage>Could not launch Spot Instances. \
                 InsufficientInstanceCapacity - There is no Spot capacity available that matches your request. \
                 Launching EC2 instance failed.</StatusMessage><Progress>100</Progress>\
                 <Details>{{\"Subnet ID\":\"subnet-0f77\",\"Availability Zone\":\"us-east-1a\"}}</Details></member>",
                id & 0xffff_ffff_ffff
            )
        })
        .unwrap_or_default();
    format!(
        "<DescribeScalingActivitiesResponse xmlns=\"http://autoscaling.amazonaws.com/doc/2011-01-01/\">\
         <DescribeScalingActivitiesResult><Activities>{members}</Activities></DescribeScalingActivitiesResult>\
         <ResponseMetadata><RequestId>7a62c49f-0000-4fc4-9331-000000000002</RequestId></ResponseMetadata>\
         </DescribeScalingActivitiesResponse>"
    )
}

/// EC2 as it would answer for these instances: all spot, the marked ones' requests
/// `marked-for-termination`; everything else goes to moto.
pub fn ec2_as_aws(marked: Arc<Mutex<BTreeSet<String>>>) -> Hook {
    Arc::new(move |form: &BTreeMap<String, String>| match form.get("Action").map(String::as_str) {
        Some("DescribeInstances") => Answer::Edit(Box::new(|xml| {
            xml.replace("</instanceId>", "</instanceId><instanceLifecycle>spot</instanceLifecycle>")
        })),
        Some("DescribeSpotInstanceRequests") => {
            let marked = marked.lock().unwrap();
            let items: String = form
                .iter()
                .filter(|(k, _)| k.starts_with("Filter.1.Value."))
                .map(|(_, id)| id)
                .filter(|id| marked.contains(*id))
                .enumerate()
                .map(|(k, id)| {
                    format!(
                        "<item><spotInstanceRequestId>sir-{k:08}</spotInstanceRequestId><spotPrice>0.0416</spotPrice>\
                         <type>one-time</type><state>active</state><status><code>marked-for-termination</code>\
                         <updateTime>2026-11-28T01:00:00.000Z</updateTime><message>Spot Instance terminated due to \
                         EC2 capacity needs</message></status><instanceId>{id}</instanceId>\
                         <instanceInterruptionBehavior>terminate</instanceInterruptionBehavior>\
                         <productDescription>Linux/UNIX</productDescription></item>"
                    )
                })
                .collect();
            Answer::Reply(format!(
                "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\
                 <DescribeSpotInstanceRequestsResponse xmlns=\"http://ec2.amazonaws.com/doc/2016-11-15/\">\
                 <requestId>5b4b7f5e-0000-4000-8000-000000000002</requestId>\
                 <spotInstanceRequestSet>{items}</spotInstanceRequestSet></DescribeSpotInstanceRequestsResponse>"
            ))
        }
        _ => Answer::Forward,
    })
}
