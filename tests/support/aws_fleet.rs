//! A loopback Auto Scaling and EC2 over an in-memory fleet, answering as AWS does where moto
//! does not: `IncludeInstances=false` leaves the instance lists out of `DescribeAutoScalingGroups`,
//! requests are served concurrently (a thread per connection), and `SetDesiredCapacity` changes
//! the number and nothing else (moto launches or terminates its instances inside the call, one
//! call at a time). What it answers costs what its XML costs, so a measurement against it is the
//! daemon's own time.
//!
//! It answers the reads and the write the booster's reaction path makes:
//! `DescribeAutoScalingGroups`, `DescribeAutoScalingInstances`, `SetDesiredCapacity`,
//! `TerminateInstanceInAutoScalingGroup` (with decrement, or replaced under a new id),
//! `DescribeScalingActivities` (none), EC2's `DescribeInstances` (spot, with private DNS names) and
//! `DescribeInstanceStatus` (no scheduled events). Anything else is a 400 naming the action.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

use super::aws_loopback::next_request;

/// One Auto Scaling group of the fleet.
#[derive(Debug, Clone)]
pub struct FleetGroup {
    /// Its size bounds and desired capacity.
    pub min: u32,
    pub max: u32,
    pub desired: u32,
    /// Its instances, in service, with the private DNS names their Nodes carry.
    pub instances: Vec<(String, String)>,
    /// When each `SetDesiredCapacity` naming it arrived.
    pub written_at: Vec<std::time::Instant>,
    /// How many `DescribeAutoScalingGroups` named it.
    pub reads: usize,
}

/// The fleet the server answers from, by group name; tests read it to see what was written.
pub type Fleet = Arc<Mutex<BTreeMap<String, FleetGroup>>>;

/// `groups` groups named `{prefix}-{g:02}`, each running `size` spot instances (desired `size`,
/// max 1,000). Instance ids and DNS names are unique per prefix and group.
pub fn fleet(prefix: &str, groups: usize, size: usize) -> Fleet {
    let tag: u32 = prefix.bytes().map(u32::from).sum();
    let fleet = (0..groups)
        .map(|g| {
            let instances = (0..size)
                .map(|k| {
                    let id = format!("i-{tag:04x}{g:04x}{k:09x}");
                    (id.clone(), format!("ip-10-{}-{g}-{k}.ec2.internal", tag % 250))
                })
                .collect();
            let size = u32::try_from(size).unwrap();
            (
                format!("{prefix}-{g:02}"),
                FleetGroup { min: 0, max: 1000, desired: size, instances, written_at: Vec::new(), reads: 0 },
            )
        })
        .collect();
    Arc::new(Mutex::new(fleet))
}

/// Serves `fleet` on a free loopback port for the rest of the process; returns the endpoint (for
/// `--aws-endpoint-url`, or `support::aws_loopback::sdk_loader`).
pub fn serve_fleet(fleet: Fleet) -> String {
    serve_fleet_answering_in(fleet, std::time::Duration::ZERO)
}

/// As [`serve_fleet`], each request answered `latency` after it arrived (AWS's control plane
/// takes tens to hundreds of milliseconds), a write applying when it is answered. Requests on
/// separate connections wait side by side, as AWS serves them.
pub fn serve_fleet_answering_in(fleet: Fleet, latency: std::time::Duration) -> String {
    serve_fleet_answering_by(fleet, Arc::new(move |_| latency))
}

/// How long the fleet takes to answer each action.
pub type Latency = Arc<dyn Fn(&str) -> std::time::Duration + Send + Sync>;

/// As [`serve_fleet_answering_in`], each action answered after its own `latency`.
pub fn serve_fleet_answering_by(fleet: Fleet, latency: Latency) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let (fleet, latency) = (fleet.clone(), latency.clone());
            std::thread::spawn(move || serve_connection(stream, &fleet, &latency));
        }
    });
    endpoint
}

/// Answers requests on one kept-alive connection until the client closes it.
fn serve_connection(stream: TcpStream, fleet: &Fleet, latency: &Latency) {
    let _ = stream.set_nodelay(true);
    let mut reader = BufReader::new(stream.try_clone().expect("a clonable stream"));
    let mut writer = stream;
    while let Some((_, body)) = next_request(&mut reader) {
        let form = parse_form(&String::from_utf8_lossy(&body));
        if field(&form, "Action") == Some("SetDesiredCapacity") {
            let name = field(&form, "AutoScalingGroupName").unwrap_or_default();
            if let Some(g) = fleet.lock().unwrap().get_mut(name) {
                g.written_at.push(std::time::Instant::now());
            }
        }
        if field(&form, "Action") == Some("DescribeAutoScalingGroups") {
            let mut fleet = fleet.lock().unwrap();
            for name in list(&form, "AutoScalingGroupNames.") {
                if let Some(g) = fleet.get_mut(name) {
                    g.reads += 1;
                }
            }
        }
        std::thread::sleep(latency(field(&form, "Action").unwrap_or_default()));
        let (status, xml) = answer(&form, fleet);
        // One write of the whole answer: written piece by piece, Nagle's algorithm held the later
        // pieces for the client's delayed acknowledgement (40 ms), a stall AWS does not have.
        let response = format!(
            "HTTP/1.1 {status}\r\nContent-Type: text/xml;charset=UTF-8\r\nContent-Length: {}\r\n\r\n{xml}",
            xml.len()
        );
        if writer.write_all(response.as_bytes()).is_err() {
            return;
        }
    }
}

/// The form's fields, percent-decoded, in order.
pub fn parse_form(body: &str) -> Vec<(String, String)> {
    let decode = |s: &str| {
        let bytes = s.as_bytes();
        let mut out = Vec::with_capacity(bytes.len());
        let mut i = 0;
        while i < bytes.len() {
            match bytes[i] {
                b'+' => out.push(b' '),
                b'%' if i + 2 < bytes.len() => {
                    out.push(u8::from_str_radix(&s[i + 1..i + 3], 16).unwrap_or(b'?'));
                    i += 2;
                }
                b => out.push(b),
            }
            i += 1;
        }
        String::from_utf8_lossy(&out).into_owned()
    };
    body.split('&').filter_map(|pair| pair.split_once('=')).map(|(k, v)| (decode(k), decode(v))).collect()
}

fn field<'f>(form: &'f [(String, String)], key: &str) -> Option<&'f str> {
    form.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
}

/// The values of a list parameter (`Name.member.1`, `Name.1`, …), in order.
fn list<'f>(form: &'f [(String, String)], prefix: &str) -> Vec<&'f str> {
    form.iter().filter(|(k, _)| k.starts_with(prefix)).map(|(_, v)| v.as_str()).collect()
}

const ASG_NS: &str = "http://autoscaling.amazonaws.com/doc/2011-01-01/";
const EC2_NS: &str = "http://ec2.amazonaws.com/doc/2016-11-15/";
const REQUEST_ID: &str = "7a62c49f-0000-4fc4-9331-000000000001";

fn answer(form: &[(String, String)], fleet: &Fleet) -> (&'static str, String) {
    let action = field(form, "Action").unwrap_or_default();
    let asg = |action: &str, result: String| {
        let result =
            if result.is_empty() { String::new() } else { format!("<{action}Result>{result}</{action}Result>") };
        format!(
            "<{action}Response xmlns=\"{ASG_NS}\">{result}<ResponseMetadata><RequestId>{REQUEST_ID}</RequestId>\
             </ResponseMetadata></{action}Response>"
        )
    };
    let mut fleet = fleet.lock().unwrap();
    match action {
        "DescribeAutoScalingGroups" => {
            let names = list(form, "AutoScalingGroupNames.member.");
            let with_instances = field(form, "IncludeInstances") != Some("false");
            let groups: String = fleet
                .iter()
                .filter(|(name, _)| names.is_empty() || names.contains(&name.as_str()))
                .map(|(name, g)| describe_group(name, g, with_instances))
                .collect();
            ("200 OK", asg(action, format!("<AutoScalingGroups>{groups}</AutoScalingGroups>")))
        }
        "DescribeAutoScalingInstances" => {
            let ids = list(form, "InstanceIds.member.");
            let found: String = fleet
                .iter()
                .flat_map(|(name, g)| g.instances.iter().map(move |(id, _)| (name, id)))
                .filter(|(_, id)| ids.contains(&id.as_str()))
                .map(|(name, id)| {
                    format!(
                        "<member><InstanceId>{id}</InstanceId><AutoScalingGroupName>{name}</AutoScalingGroupName>\
                         <AvailabilityZone>us-east-1a</AvailabilityZone><LifecycleState>InService</LifecycleState>\
                         <HealthStatus>HEALTHY</HealthStatus><ProtectedFromScaleIn>false</ProtectedFromScaleIn>\
                         <InstanceType>m5.large</InstanceType></member>"
                    )
                })
                .collect();
            ("200 OK", asg(action, format!("<AutoScalingInstances>{found}</AutoScalingInstances>")))
        }
        "SetDesiredCapacity" => {
            let name = field(form, "AutoScalingGroupName").unwrap_or_default();
            let desired: u32 = field(form, "DesiredCapacity").and_then(|d| d.parse().ok()).unwrap_or(0);
            match fleet.get_mut(name) {
                Some(g) if desired <= g.max && desired >= g.min => {
                    g.desired = desired;
                    ("200 OK", asg(action, String::new()))
                }
                _ => ("400 Bad Request", error(ASG_NS, "ValidationError", &format!("cannot set {name} to {desired}"))),
            }
        }
        "TerminateInstanceInAutoScalingGroup" => {
            let id = field(form, "InstanceId").unwrap_or_default();
            let decrement = field(form, "ShouldDecrementDesiredCapacity") == Some("true");
            let Some((name, g)) = fleet.iter_mut().find(|(_, g)| g.instances.iter().any(|(i, _)| i == id)) else {
                return ("400 Bad Request", error(ASG_NS, "ValidationError", &format!("Instance Id not found - {id}")));
            };
            let at = g.instances.iter().position(|(i, _)| i == id).unwrap();
            let (_, dns) = g.instances.remove(at);
            let cause = if decrement {
                g.desired -= 1;
                format!("shrinking the capacity from {} to {}", g.desired + 1, g.desired)
            } else {
                // The group replaces it, as Auto Scaling does.
                g.instances.push((format!("{id}r"), format!("r-{dns}")));
                "a replacement is launched".to_string()
            };
            let activity = format!(
                "<Activity><ActivityId>a-{id}</ActivityId><AutoScalingGroupName>{name}</AutoScalingGroupName>\
                 <Description>Terminating EC2 instance: {id}</Description><Cause>At 2026-12-04T00:00:00Z \
                 instance {id} was taken out of service in response to a user request, {cause}.</Cause>\
                 <StartTime>2026-12-04T00:00:00Z</StartTime><StatusCode>InProgress</StatusCode><Progress>0</Progress>\
                 </Activity>"
            );
            ("200 OK", asg(action, activity))
        }
        "DescribeScalingActivities" => ("200 OK", asg(action, "<Activities/>".to_string())),
        "DescribeInstances" => {
            let ids = list(form, "Filter.1.Value.");
            let items: String = fleet
                .values()
                .flat_map(|g| g.instances.iter())
                .filter(|(id, _)| ids.contains(&id.as_str()))
                .map(|(id, dns)| {
                    format!(
                        "<item><instanceId>{id}</instanceId><privateDnsName>{dns}</privateDnsName>\
                         <instanceLifecycle>spot</instanceLifecycle><instanceType>m5.large</instanceType>\
                         <instanceState><code>16</code><name>running</name></instanceState></item>"
                    )
                })
                .collect();
            let reservations = if items.is_empty() {
                String::new()
            } else {
                format!("<item><reservationId>r-1</reservationId><instancesSet>{items}</instancesSet></item>")
            };
            (
                "200 OK",
                format!(
                    "<DescribeInstancesResponse xmlns=\"{EC2_NS}\"><requestId>{REQUEST_ID}</requestId>\
                     <reservationSet>{reservations}</reservationSet></DescribeInstancesResponse>"
                ),
            )
        }
        "DescribeInstanceStatus" => (
            "200 OK",
            format!(
                "<DescribeInstanceStatusResponse xmlns=\"{EC2_NS}\"><requestId>{REQUEST_ID}</requestId>\
                 <instanceStatusSet/></DescribeInstanceStatusResponse>"
            ),
        ),
        other => {
            ("400 Bad Request", error(ASG_NS, "InvalidAction", &format!("the loopback fleet does not answer {other}")))
        }
    }
}

/// The cluster every fleet group is tagged for (the fakes' contexts serve it).
const CLUSTER: &str = "test-cluster";

fn describe_group(name: &str, g: &FleetGroup, with_instances: bool) -> String {
    let instances: String = if with_instances {
        g.instances
            .iter()
            .map(|(id, _)| {
                format!(
                    "<member><InstanceId>{id}</InstanceId><InstanceType>m5.large</InstanceType>\
                     <AvailabilityZone>us-east-1a</AvailabilityZone><LifecycleState>InService</LifecycleState>\
                     <HealthStatus>Healthy</HealthStatus><ProtectedFromScaleIn>false</ProtectedFromScaleIn></member>"
                )
            })
            .collect()
    } else {
        String::new()
    };
    format!(
        "<member><AutoScalingGroupName>{name}</AutoScalingGroupName>\
         <AutoScalingGroupARN>arn:aws:autoscaling:us-east-1:123456789012:autoScalingGroup:0:autoScalingGroupName/{name}</AutoScalingGroupARN>\
         <MinSize>{}</MinSize><MaxSize>{}</MaxSize><DesiredCapacity>{}</DesiredCapacity><DefaultCooldown>300</DefaultCooldown>\
         <AvailabilityZones><member>us-east-1a</member></AvailabilityZones><HealthCheckType>EC2</HealthCheckType>\
         <CreatedTime>2026-11-01T00:00:00Z</CreatedTime><Instances>{instances}</Instances>\
         <SuspendedProcesses/><Tags><member><Key>kubernetes.io/cluster/{CLUSTER}</Key><Value>owned</Value>\
         <ResourceId>{name}</ResourceId><ResourceType>auto-scaling-group</ResourceType>\
         <PropagateAtLaunch>true</PropagateAtLaunch></member></Tags><CapacityRebalance>false</CapacityRebalance></member>",
        g.min, g.max, g.desired
    )
}

fn error(namespace: &str, code: &str, message: &str) -> String {
    format!(
        "<ErrorResponse xmlns=\"{namespace}\"><Error><Type>Sender</Type><Code>{code}</Code>\
         <Message>{message}</Message></Error><RequestId>{REQUEST_ID}</RequestId></ErrorResponse>"
    )
}
