//! The `eks-managed` provisioner over the real AWS adapter: against moto in server mode (create,
//! Ready, a resize, labels and tags edited in EKS reverted, delete), and through a loopback proxy
//! in front of moto where moto is not EKS: moto's node groups are `ACTIVE` the moment they are
//! created and gone the moment they are deleted, it has no `UpdateNodegroupVersion`, it never
//! reports a degraded group, it tags clusters only (`TagResource` on a node group is "not
//! found"), and it describes a group created without SSH access with a key pair of its own
//! invention (`eksKeypair`). The proxy answers those as EKS does.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_config::SdkConfig;
use spots_booster::aws::CallStats;
use spots_booster::instancegroup::reconciler::{Requeue, State};
use spots_booster::instancegroup::InstanceGroup;

use crate::instancegroups_moto::{drive, reconciler, seed, Reconciler, World};
use crate::support::aws_intercept::{intercepting_proxy, Answer, Hook, REQUEST_LINE};
use crate::support::moto::{moto, sdk_config_for};
use spots_booster::fakes::FakeInstanceGroupStore;

const NS: &str = "teams";
const NAME: &str = "batch";
const NODE_GROUP: &str = "prod-teams-batch";

/// The node role the reconciler creates for the test group in moto's region.
fn node_role() -> String {
    spots_booster::instancegroup::design::RoleOwner {
        region: "us-east-1".into(),
        cluster: "prod".into(),
        namespace: NS.into(),
        name: NAME.into(),
        uid: None,
    }
    .role_name()
}

fn group(world: &World, max: i64, version: Option<&str>) -> InstanceGroup {
    let version = version.map(|v| format!("\n      version: \"{v}\"")).unwrap_or_default();
    let yaml = format!(
        r#"
apiVersion: instancemgr.keikoproj.io/v1alpha1
kind: InstanceGroup
metadata: {{name: {NAME}, namespace: {NS}}}
spec:
  provisioner: eks-managed
  strategy: {{type: managed}}
  eks-managed:
    minSize: 1
    maxSize: {max}
    configuration:
      clusterName: prod
      capacityType: SPOT
      instanceType: m6i.large
      instanceTypes: [m6a.large, m5.large]
      amiType: AL2023_x86_64_STANDARD
      volSize: 50
      subnets: [{subnet}, private-b]
      nodeLabels: {{team: batch}}
      taints: [{{key: batch, value: "true", effect: NoSchedule}}]
      tags: [{{key: team, value: batch}}]{version}
"#,
        subnet = world.subnets[0],
    );
    serde_yaml::from_str(&yaml).expect("the test group parses")
}

async fn reconcile(r: &Reconciler, store: &FakeInstanceGroupStore) -> (Requeue, String) {
    let requeue = drive(r, store, None, (NS, NAME)).await;
    let state = store.get(NS, NAME).and_then(|g| g.status).map(|s| s.current_state).unwrap_or_default();
    (requeue, state)
}

async fn describe(config: &SdkConfig) -> Option<aws_sdk_eks::types::Nodegroup> {
    let eks = aws_sdk_eks::Client::new(config);
    eks.describe_nodegroup().cluster_name("prod").nodegroup_name(NODE_GROUP).send().await.ok()?.nodegroup().cloned()
}

fn asg_calls(stats: &CallStats) -> u64 {
    stats.snapshot().keys().filter(|op| op.contains("AutoScaling") || op.contains("DesiredCapacity")).count() as u64
}

#[tokio::test]
async fn an_eks_managed_group_is_created_ready_resized_has_eks_side_edits_reverted_and_is_deleted() {
    let (moto, _guard) = moto().await;
    let direct = moto.sdk_config().await;
    let world = seed(&direct).await;
    let script = Arc::new(Mutex::new(AsEks { hold_deletes: true, ..AsEks::default() }));
    let config = sdk_config_for(&intercepting_proxy(&moto.endpoint, as_eks(script.clone())).await).await;
    let stats = CallStats::default();
    let (r, store, _) = reconciler(&config, stats.clone());
    store.apply(group(&world, 6, None));

    let (requeue, state) = reconcile(&r, &store).await;
    assert_eq!((requeue, state.as_str()), (Requeue::After(Duration::from_secs(10)), State::InitCreate.as_str()));
    let created = describe(&config).await.expect("the node group exists");
    assert_eq!(created.capacity_type().map(|c| c.as_str()), Some("SPOT"));
    assert_eq!(created.instance_types(), ["m6i.large", "m6a.large", "m5.large"]);
    let scaling = created.scaling_config().unwrap();
    assert_eq!((scaling.min_size(), scaling.max_size(), scaling.desired_size()), (Some(1), Some(6), Some(1)));
    assert_eq!(created.disk_size(), Some(50));
    assert_eq!(created.labels().unwrap().get("team").map(String::as_str), Some("batch"));
    assert_eq!(created.taints()[0].effect().map(|e| e.as_str()), Some("NO_SCHEDULE"));
    let tags = created.tags().unwrap();
    assert_eq!(tags.get("instancegroups.keikoproj.io/ClusterName").map(String::as_str), Some("prod"));
    assert_eq!(tags.get("team").map(String::as_str), Some("batch"));
    let mut subnets = created.subnets().to_vec();
    subnets.sort();
    let mut expected = world.subnets.clone();
    expected.sort();
    assert_eq!(subnets, expected, "the Name tag resolved to its subnet id");
    assert!(created.node_role().unwrap().ends_with(&format!("role/spots-booster/{}", node_role())));
    let iam = aws_sdk_iam::Client::new(&config);
    let policies = iam.list_attached_role_policies().role_name(node_role()).send().await.unwrap();
    assert_eq!(policies.attached_policies().len(), 3, "the eks provisioner's node defaults");
    assert!(
        store
            .state()
            .aws_auth
            .as_ref()
            .is_some_and(|d| d.get("mapRoles").is_none_or(|m| m.trim().is_empty() || m.trim() == "[]")),
        "EKS maps a managed node group's role itself: {:?}",
        store.state().aws_auth
    );

    assert_eq!(reconcile(&r, &store).await.1, State::Ready);
    assert_eq!(stats.calls("CreateNodegroup"), 1);
    // The tags as created, which the proxy keeps from here on since moto tags clusters only.
    script.lock().unwrap().tags =
        created.tags().map(|t| t.iter().map(|(k, v)| (k.clone(), v.clone().into())).collect());

    // Resized, while someone edits labels and tags in EKS: one config update, the tags set back.
    let eks = aws_sdk_eks::Client::new(&config);
    let moto_eks = aws_sdk_eks::Client::new(&direct);
    eks.update_nodegroup_config()
        .cluster_name("prod")
        .nodegroup_name(NODE_GROUP)
        .labels(aws_sdk_eks::types::UpdateLabelsPayload::builder().add_or_update_labels("by-hand", "1").build())
        .send()
        .await
        .unwrap();
    eks.tag_resource().resource_arn(created.nodegroup_arn().unwrap()).tags("stale", "1").send().await.unwrap();
    store.apply(group(&world, 9, None));
    assert_eq!(reconcile(&r, &store).await.1, State::ReconcileModifying);
    let updated = describe(&config).await.unwrap();
    assert_eq!(updated.scaling_config().unwrap().max_size(), Some(9));
    assert_eq!(updated.scaling_config().unwrap().desired_size(), Some(1), "desired stays Cluster Autoscaler's");
    assert!(!updated.labels().unwrap().contains_key("by-hand"));
    assert!(!updated.tags().unwrap().contains_key("stale"));
    assert_eq!(reconcile(&r, &store).await.1, State::Ready);
    assert_eq!(asg_calls(&stats), 0, "no Auto Scaling call: EKS owns the node group's group");

    // Delete: the node group goes first (EKS drains it; the proxy holds it DELETING until the
    // test lets moto delete it), then the role.
    store.delete(NS, NAME);
    assert_eq!(reconcile(&r, &store).await.1, State::Deleting);
    assert_eq!(script.lock().unwrap().deletes, 1);
    moto_eks.delete_nodegroup().cluster_name("prod").nodegroup_name(NODE_GROUP).send().await.expect("moto deletes it");
    reconcile(&r, &store).await;
    assert!(store.get(NS, NAME).is_none(), "Deleted removes the finalizer and the object goes");
    assert!(iam.get_role().role_name(node_role()).send().await.is_err(), "role deleted");
}

/// What the proxy tells of the node group, where moto cannot.
#[derive(Default)]
pub(crate) struct AsEks {
    /// Answer `DeleteNodegroup` as EKS does (`DELETING` for minutes) until the test deletes it in
    /// moto; otherwise moto deletes it at once.
    hold_deletes: bool,
    /// The status EKS reports instead of moto's `ACTIVE`.
    status: Option<&'static str>,
    /// Health issues EKS reports.
    issue: Option<(&'static str, &'static str)>,
    /// The version an `UpdateNodegroupVersion` moved it to, once EKS finished.
    version: Option<String>,
    /// Bodies of the `UpdateNodegroupVersion` requests.
    upgrades: Vec<String>,
    /// `DeleteNodegroup` requests answered (moto never sees them until EKS "finishes").
    deletes: u32,
    /// The node group's tags as `TagResource` and `UntagResource` left them (`None`: as created).
    tags: Option<serde_json::Map<String, serde_json::Value>>,
}

/// `%3A` → `:` and the like, in a request path or query.
fn unescape(text: &str) -> String {
    let mut out = Vec::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match (bytes[i], text.get(i + 1..i + 3).and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn as_eks(script: Arc<Mutex<AsEks>>) -> Hook {
    as_eks_for("prod", NODE_GROUP, script)
}

/// The proxy's hook for node group `node_group` of `cluster`.
pub(crate) fn as_eks_for(cluster: &str, node_group: &str, script: Arc<Mutex<AsEks>>) -> Hook {
    let (cluster, node_group) = (cluster.to_string(), node_group.to_string());
    let path = format!("/clusters/{cluster}/node-groups/{node_group}");
    Arc::new(move |form| {
        let line = form.get(REQUEST_LINE).cloned().unwrap_or_default();
        let mut eks = script.lock().unwrap();
        if line == format!("POST {path}/update-version") {
            eks.upgrades.push(form.get(":body").cloned().unwrap_or_default());
            eks.status = Some("UPDATING");
            return Answer::ReplyJson(
                r#"{"update":{"id":"u-1","status":"InProgress","type":"VersionUpdate","params":[]}}"#.into(),
            );
        }
        if line == format!("DELETE {path}") && eks.hold_deletes {
            eks.deletes += 1;
            eks.status = Some("DELETING");
            return Answer::ReplyJson(format!(
                r#"{{"nodegroup":{{"nodegroupName":"{node_group}","status":"DELETING"}}}}"#
            ));
        }
        let (method, target) = line.split_once(' ').unwrap_or_default();
        if target.starts_with("/tags/") && unescape(target).contains(&format!(":nodegroup/{cluster}/{node_group}/")) {
            let tags = eks.tags.get_or_insert_with(Default::default);
            if method == "POST" {
                let body: serde_json::Value =
                    serde_json::from_str(form.get(":body").map_or("{}", String::as_str)).unwrap();
                tags.extend(body["tags"].as_object().cloned().unwrap_or_default());
            } else {
                let query = target.split_once('?').map_or("", |(_, q)| q);
                for key in query.split('&').filter_map(|kv| kv.strip_prefix("tagKeys=")) {
                    tags.remove(&unescape(key));
                }
            }
            return Answer::ReplyJson("{}".into());
        }
        if line == format!("GET {path}") {
            let (status, issue, version, tags) = (eks.status, eks.issue, eks.version.clone(), eks.tags.clone());
            return Answer::Edit(Box::new(move |body| {
                let Ok(mut json) = serde_json::from_str::<serde_json::Value>(&body) else { return body };
                let group = &mut json["nodegroup"];
                if group.is_object() {
                    if group["remoteAccess"]["ec2SshKey"] == "eksKeypair" {
                        group.as_object_mut().map(|g| g.remove("remoteAccess"));
                    }
                    if let Some(status) = status {
                        group["status"] = status.into();
                    }
                    if let Some((code, message)) = issue {
                        group["health"] = serde_json::json!({"issues": [{"code": code, "message": message}]});
                    }
                    if let Some(version) = version {
                        group["version"] = version.into();
                    }
                    if let Some(tags) = tags {
                        group["tags"] = serde_json::Value::Object(tags);
                    }
                }
                json.to_string()
            }));
        }
        Answer::Forward
    })
}

#[tokio::test]
async fn creating_degraded_upgrading_and_deleting_node_groups_are_waited_for_as_eks_reports_them() {
    let (moto, _guard) = moto().await;
    let direct = moto.sdk_config().await;
    let world = seed(&direct).await;
    let script = Arc::new(Mutex::new(AsEks { status: Some("CREATING"), hold_deletes: true, ..AsEks::default() }));
    let endpoint = intercepting_proxy(&moto.endpoint, as_eks(script.clone())).await;
    let config = sdk_config_for(&endpoint).await;
    let stats = CallStats::default();
    let (r, store, _) = reconciler(&config, stats.clone());
    store.apply(group(&world, 6, None));

    // EKS takes minutes to create a node group: nothing is created twice meanwhile.
    assert_eq!(reconcile(&r, &store).await.1, State::InitCreate);
    assert_eq!(reconcile(&r, &store).await, (Requeue::After(Duration::from_secs(10)), State::InitCreate.into()));
    assert_eq!(stats.calls("CreateNodegroup"), 1);
    script.lock().unwrap().status = None;
    assert_eq!(reconcile(&r, &store).await.1, State::Ready);

    // Degraded: Error with EKS's own words, told once; Ready again when EKS recovers.
    {
        let mut eks = script.lock().unwrap();
        eks.status = Some("DEGRADED");
        eks.issue = Some(("Ec2SecurityGroupNotFound", "the security group sg-1 was deleted"));
    }
    assert_eq!(reconcile(&r, &store).await.1, State::Error);
    reconcile(&r, &store).await;
    let status = store.get(NS, NAME).unwrap().status.unwrap();
    let reconciled = status.conditions.iter().find(|c| c.condition_type == "Reconciled").unwrap();
    assert!(reconciled.message.contains("DEGRADED: Ec2SecurityGroupNotFound"), "{reconciled:?}");
    let warnings = store.state().events.iter().filter(|(_, reason, ..)| reason == "ReconcileFailed").count();
    assert_eq!(warnings, 1, "told once, not at every look");
    *script.lock().unwrap() = AsEks { hold_deletes: true, ..AsEks::default() };
    assert_eq!(reconcile(&r, &store).await.1, State::Ready);

    // A new Kubernetes version: one UpdateNodegroupVersion, then wait while EKS replaces nodes.
    store.apply(group(&world, 6, Some("1.33")));
    assert_eq!(reconcile(&r, &store).await.1, State::InitUpgrade);
    assert_eq!(reconcile(&r, &store).await.1, State::InitUpgrade, "EKS reports UPDATING");
    let upgrades = script.lock().unwrap().upgrades.clone();
    assert_eq!(upgrades.len(), 1, "{upgrades:?}");
    assert!(upgrades[0].contains(r#""version":"1.33""#), "{}", upgrades[0]);
    {
        let mut eks = script.lock().unwrap();
        eks.status = None;
        eks.version = Some("1.33".into());
    }
    assert_eq!(reconcile(&r, &store).await.1, State::Ready);

    // Deleting takes EKS minutes too: one DeleteNodegroup, and the role stays until it is gone.
    store.delete(NS, NAME);
    assert_eq!(reconcile(&r, &store).await.1, State::Deleting);
    assert_eq!(reconcile(&r, &store).await.1, State::Deleting);
    assert_eq!(script.lock().unwrap().deletes, 1);
    let iam = aws_sdk_iam::Client::new(&direct);
    assert!(iam.get_role().role_name(node_role()).send().await.is_ok(), "EKS still uses the role");
    let eks = aws_sdk_eks::Client::new(&direct);
    eks.delete_nodegroup().cluster_name("prod").nodegroup_name(NODE_GROUP).send().await.unwrap();
    reconcile(&r, &store).await;
    assert!(store.get(NS, NAME).is_none());
    assert!(iam.get_role().role_name(node_role()).send().await.is_err(), "role deleted once the group is gone");
}
