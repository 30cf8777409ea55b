//! The AWS emulator for tests: moto in server mode on free loopback ports, installed on first
//! use by `scripts/install-moto.sh`. A test binary keeps a small pool of servers (one per test
//! thread the machine runs, at most 4), each started on first use, leased to one test at a time and
//! reset before it; they stop when the test process exits (their stdin pipes close).

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_sdk_autoscaling::config::Credentials;
use aws_sdk_autoscaling::types::{LaunchTemplateSpecification, Tag};
use aws_sdk_ec2::types::{InstanceMarketOptionsRequest, InstanceType, MarketType, RequestLaunchTemplateData};
use futures::future::select_all;
use tokio::sync::{Mutex, MutexGuard};

/// A running moto server.
pub struct Moto {
    /// `http://127.0.0.1:<port>`.
    pub endpoint: String,
    port: u16,
    _child: Child,
}

/// One server of the pool: started on its first lease, one test at a time.
struct Slot {
    port: u16,
    /// The port held until the server starts on it.
    reserved: std::sync::Mutex<Option<TcpListener>>,
    server: OnceLock<Moto>,
    lease: Mutex<()>,
}

/// Moto serves one request at a time per server, and the tests against it wait mostly on its
/// answers: with one server for the binary, every other test thread that reached a moto test
/// waited behind it.
fn pool() -> &'static [Slot] {
    static POOL: OnceLock<Vec<Slot>> = OnceLock::new();
    POOL.get_or_init(|| {
        let servers = std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, 4);
        // Held until their server starts, the ports differ: two servers never share one.
        (0..servers)
            .map(|_| {
                let held = TcpListener::bind("127.0.0.1:0").expect("a free port");
                Slot {
                    port: held.local_addr().expect("a bound port").port(),
                    reserved: std::sync::Mutex::new(Some(held)),
                    server: OnceLock::new(),
                    lease: Mutex::const_new(()),
                }
            })
            .collect()
    })
}

/// A moto server of this binary with its state wiped; the guard keeps other tests of this binary
/// off it until dropped. A free server if there is one, else the first to be freed.
pub async fn moto() -> (&'static Moto, MutexGuard<'static, ()>) {
    // A free server's lock is taken at the first poll, in the pool's order.
    let ((slot, guard), ..) =
        select_all(pool().iter().map(|slot| Box::pin(async move { (slot, slot.lease.lock().await) }))).await;
    let moto = tokio::task::spawn_blocking(move || {
        let moto = slot.server.get_or_init(|| {
            drop(slot.reserved.lock().unwrap().take());
            Moto::start(slot.port)
        });
        moto.reset();
        moto
    })
    .await
    .expect("moto starts");
    (moto, guard)
}

fn install() -> PathBuf {
    super::tools::install("install-moto.sh", &[], "moto-venv.lock")
}

impl Moto {
    fn start(port: u16) -> Moto {
        let server = install();
        // The shell waits on our pipe: when this process exits the pipe closes and moto is killed.
        let script = format!(
            "'{}' -H 127.0.0.1 -p {port} >/dev/null 2>&1 & pid=$!; cat >/dev/null; kill $pid",
            server.display()
        );
        // AWS-managed policies (AmazonEKSWorkerNodePolicy…) exist in moto only when loaded.
        let child = Command::new("sh")
            .arg("-c")
            .arg(script)
            .env("MOTO_IAM_LOAD_MANAGED_POLICIES", "true")
            .stdin(Stdio::piped())
            .spawn()
            .expect("start moto_server");
        let moto = Moto { endpoint: format!("http://127.0.0.1:{port}"), port, _child: child };
        let deadline = Instant::now() + Duration::from_secs(60);
        while moto.request("GET", "/moto-api/").is_none() {
            assert!(Instant::now() < deadline, "moto_server did not answer on port {port}");
            std::thread::sleep(Duration::from_millis(100));
        }
        moto
    }

    /// Wipes every resource.
    pub fn reset(&self) {
        let status = self.request("POST", "/moto-api/reset").expect("moto answers");
        assert!(status.starts_with("HTTP/1.1 200") || status.starts_with("HTTP/1.0 200"), "reset: {status}");
    }

    fn request(&self, method: &str, path: &str) -> Option<String> {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        stream.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
        write!(stream, "{method} {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\r\n").ok()?;
        let mut response = String::new();
        stream.read_to_string(&mut response).ok()?;
        Some(response)
    }

    /// SDK configuration for this server: fixed region and static credentials, so nothing ever
    /// probes the instance-metadata address.
    pub async fn sdk_config(&self) -> SdkConfig {
        sdk_config_for(&self.endpoint).await
    }
}

/// SDK configuration for a moto server or a proxy in front of it at `endpoint`.
pub async fn sdk_config_for(endpoint: &str) -> SdkConfig {
    aws_config::defaults(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .endpoint_url(endpoint)
        .credentials_provider(Credentials::new("test", "test", None, None, "moto"))
        .load()
        .await
}

/// Creates launch template `nodes` (m5.large on one of moto's Amazon images); returns the image.
pub async fn launch_template(config: &SdkConfig) -> String {
    let ec2 = aws_sdk_ec2::Client::new(config);
    let images = ec2.describe_images().owners("amazon").send().await.expect("moto lists its images");
    let image = images.images()[0].image_id().expect("an image id").to_string();
    ec2.create_launch_template()
        .launch_template_name("nodes")
        .launch_template_data(
            RequestLaunchTemplateData::builder().image_id(&image).instance_type(InstanceType::M5Large).build(),
        )
        .send()
        .await
        .expect("create the launch template");
    image
}

/// The `nodes` launch template, latest version.
pub fn nodes_template() -> LaunchTemplateSpecification {
    LaunchTemplateSpecification::builder().launch_template_name("nodes").version("$Latest").build()
}

/// A group tag, propagated at launch.
pub fn group_tag(group: &str, key: &str, value: &str) -> Tag {
    Tag::builder()
        .resource_id(group)
        .resource_type("auto-scaling-group")
        .key(key)
        .value(value)
        .propagate_at_launch(true)
        .build()
}

/// Creates a group of this cluster on the `nodes` launch template in one AZ: `sizes` is (min,
/// max, desired).
pub async fn create_group(config: &SdkConfig, name: &str, sizes: (i32, i32, i32), zone: &str, tags: &[(&str, &str)]) {
    let (min, max, desired) = sizes;
    let mut request = aws_sdk_autoscaling::Client::new(config)
        .create_auto_scaling_group()
        .auto_scaling_group_name(name)
        .launch_template(nodes_template())
        .min_size(min)
        .max_size(max)
        .desired_capacity(desired)
        .availability_zones(zone);
    // This cluster's group, as the fakes' contexts serve it.
    request =
        request.tags(group_tag(name, &format!("kubernetes.io/cluster/{}", spots_booster::fakes::CLUSTER), "owned"));
    for (key, value) in tags {
        request = request.tags(group_tag(name, key, value));
    }
    request.send().await.expect("create the group");
}

/// Runs one spot instance from `image` (moto launches Auto Scaling instances on demand, whatever
/// the template says, so a spot one is run by hand). Returns its id.
pub async fn run_spot_instance(sdk: &SdkConfig, image: &str) -> String {
    let launched = aws_sdk_ec2::Client::new(sdk)
        .run_instances()
        .image_id(image)
        .instance_type(InstanceType::M5Large)
        .min_count(1)
        .max_count(1)
        .instance_market_options(InstanceMarketOptionsRequest::builder().market_type(MarketType::Spot).build())
        .send()
        .await
        .unwrap();
    launched.instances()[0].instance_id().unwrap().to_string()
}
