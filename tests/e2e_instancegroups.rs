//! End-to-end: InstanceGroup reconciliation by the real `spots-booster run` binary against a real
//! API server and moto. Ignored unless run with `--include-ignored` and
//! `SPOTS_BOOSTER_E2E_KUBECONFIG` and `SPOTS_BOOSTER_E2E_AWS_ENDPOINT` set.
//!
//! It applies the CRD from `spots-booster crd`, creates an InstanceGroup, plays kubelet for the
//! instances the group gets, and checks the `kubectl get ig` columns (the Table the API server
//! renders from the CRD's printer columns), the status, aws-auth, and a deletion that removes the
//! group, its finalizer and its aws-auth entry.
//!
//! moto must run with `MOTO_IAM_LOAD_MANAGED_POLICIES=true`: the node role gets AWS managed
//! policies, which moto only knows then. The suite checks this first and says so.

use std::process::Stdio;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::Api;
use serde_json::{json, Value};
use spots_booster::instancegroup::api::{CrdStrategy, UpgradeStrategy};
use spots_booster::instancegroup::InstanceGroup;
use support::e2e::{aws, env, free_port, kube_client, register_node};

use crate::support;

async fn wait_for<T>(what: &str, limit: Duration, mut probe: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(found) = probe().await {
            return found;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real API server and moto: set SPOTS_BOOSTER_E2E_KUBECONFIG and SPOTS_BOOSTER_E2E_AWS_ENDPOINT, pass --include-ignored"]
async fn an_instance_group_becomes_an_asg_shows_its_columns_and_is_deleted_cleanly() {
    let (kubeconfig, endpoint) = env();
    let suffix = support::e2e::run_suffix();
    let kube = kube_client(&kubeconfig).await;
    let aws = aws(&endpoint).await;
    let worker_policy = "arn:aws:iam::aws:policy/AmazonEKSWorkerNodePolicy";
    if aws_sdk_iam::Client::new(&aws).get_policy().policy_arn(worker_policy).send().await.is_err() {
        panic!(
            "moto at {endpoint} does not know AWS managed policies: start it with MOTO_IAM_LOAD_MANAGED_POLICIES=true"
        );
    }
    let ns = format!("sb-e2e-ig-{suffix}");
    let cluster = format!("e2e{suffix}");
    let asg_name = format!("{cluster}-{ns}-batch");

    // The CRD, exactly as the binary prints it, until the API server serves it.
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_spots-booster")).arg("crd").output().unwrap();
    let crd: CustomResourceDefinition = serde_yaml::from_slice(&output.stdout).expect("`spots-booster crd` is a CRD");
    let crds: Api<CustomResourceDefinition> = Api::all(kube.clone());
    crds.patch(
        "instancegroups.instancemgr.keikoproj.io",
        &PatchParams::apply("spots-booster-e2e").force(),
        &Patch::Apply(&crd),
    )
    .await
    .expect("apply the CRD");
    wait_for("the CRD to be Established", Duration::from_secs(30), async || {
        let crd = crds.get("instancegroups.instancemgr.keikoproj.io").await.ok()?;
        let conditions = crd.status?.conditions?;
        conditions.iter().any(|c| c.type_ == "Established" && c.status == "True").then_some(())
    })
    .await;

    // moto: an EKS cluster, subnets, a security group, an image.
    let ec2 = aws_sdk_ec2::Client::new(&aws);
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
    let vpc = ec2.describe_vpcs().send().await.unwrap().vpcs()[0].vpc_id().unwrap().to_string();
    let sg = ec2
        .create_security_group()
        .group_name(format!("sb-e2e-{suffix}"))
        .description("e2e nodes")
        .vpc_id(&vpc)
        .send()
        .await
        .unwrap();
    let images = ec2.describe_images().owners("amazon").send().await.unwrap();
    let image = images.images()[0].image_id().unwrap().to_string();
    let next_image = images.images()[1].image_id().unwrap().to_string();
    aws_sdk_eks::Client::new(&aws)
        .create_cluster()
        .name(&cluster)
        .role_arn("arn:aws:iam::123456789012:role/eks")
        .resources_vpc_config(
            aws_sdk_eks::types::VpcConfigRequest::builder().set_subnet_ids(Some(subnets.clone())).build(),
        )
        .send()
        .await
        .expect("seed the EKS cluster in moto");

    let namespaces: Api<Namespace> = Api::all(kube.clone());
    namespaces
        .create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap())
        .await
        .expect("create the namespace");
    let group: InstanceGroup = serde_json::from_value(json!({
        "apiVersion": "instancemgr.keikoproj.io/v1alpha1", "kind": "InstanceGroup",
        "metadata": {"name": "batch", "namespace": ns},
        "spec": {"provisioner": "eks", "strategy": {"type": "rollingUpdate", "rollingUpdate": {"maxUnavailable": "50%"}},
            "eks": {"minSize": 1, "maxSize": 3, "configuration": {
                "clusterName": cluster, "image": image, "instanceType": "m5.large",
                "subnets": subnets, "securityGroups": [sg.group_id().unwrap()],
                "labels": {"team": "batch"}}}}
    }))
    .unwrap();
    let groups: Api<InstanceGroup> = Api::namespaced(kube.clone(), &ns);
    // The API server refuses an oversized string before any replica caches the object.
    let mut oversized = group.clone();
    oversized.metadata.name = Some("oversized".into());
    oversized.spec.strategy = Some(UpgradeStrategy {
        strategy_type: Some("crd".into()),
        crd: Some(CrdStrategy { spec: "x".repeat(64 * 1024 + 1), ..CrdStrategy::default() }),
        ..UpgradeStrategy::default()
    });
    match groups.create(&PostParams::default(), &oversized).await {
        Err(kube::Error::Api(s)) if s.code == 422 && s.message.contains("spec.strategy.crd.spec") => {}
        other => panic!("a 64 KiB + 1 crd template was not refused by its field: {other:?}"),
    }
    groups.create(&PostParams::default(), &group).await.expect("create the InstanceGroup");

    let port = free_port();
    let mut booster = tokio::process::Command::new(env!("CARGO_BIN_EXE_spots-booster"))
        .args(["run", "--connection-mode", "kubectl", "--kubeconfig", &kubeconfig])
        .args(["--events-namespace", &ns, "--ca-status-namespace", &ns, "--state-namespace", &ns])
        .args(["--instance-manager-namespace", &ns, "--leader-elect", "false"])
        .args(["--aws-endpoint-url", &endpoint, "--aws-region", "us-east-1", "--cluster-name", &cluster])
        .args(["--metrics-bind-address", &format!("127.0.0.1:{port}"), "--probe-bind-address", "127.0.0.1:0"])
        .args(["--log-format", "json"])
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("start spots-booster");

    // Play kubelet for every instance of the group until the group is Ready.
    let autoscaling = aws_sdk_autoscaling::Client::new(&aws);
    let status = wait_for("the InstanceGroup to be Ready", Duration::from_secs(120), async || {
        assert!(booster.try_wait().unwrap().is_none(), "spots-booster exited");
        let out = autoscaling.describe_auto_scaling_groups().auto_scaling_group_names(&asg_name).send().await.ok()?;
        for instance in out.auto_scaling_groups().first()?.instances() {
            let id = instance.instance_id().unwrap();
            let zone = instance.availability_zone().unwrap_or("us-east-1a");
            register_node(&kube, &format!("{id}.{suffix}.e2e.internal"), zone, id, &suffix).await;
        }
        let status = groups.get("batch").await.ok()?.status?;
        (status.current_state == "Ready").then_some(status)
    })
    .await;
    assert_eq!(status.active_scaling_group_name, asg_name);
    assert_eq!((status.current_min, status.current_max), (Some(1), Some(3)));
    assert!(status.conditions.iter().any(|c| c.condition_type == "NodesReady" && c.status == "True"));
    let fetched = groups.get("batch").await.unwrap();
    assert_eq!(fetched.metadata.finalizers, Some(vec!["finalizer.instancegroups.keikoproj.io".to_string()]));

    // `kubectl get ig`: the Table the API server renders from the printer columns.
    let request = http::Request::get(format!("/apis/instancemgr.keikoproj.io/v1alpha1/namespaces/{ns}/instancegroups"))
        .header("accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
        .body(Vec::new())
        .unwrap();
    let table: Value = kube.request(request).await.expect("the Table view");
    let columns: Vec<&str> =
        table["columnDefinitions"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(columns, ["Name", "State", "Min", "Max", "Group Name", "Provisioner", "Strategy", "Lifecycle", "Age"]);
    let cells = &table["rows"][0]["cells"];
    assert_eq!(cells[0], "batch");
    assert_eq!(cells[1], "Ready");
    assert_eq!((cells[2].as_i64(), cells[3].as_i64()), (Some(1), Some(3)));
    assert_eq!(cells[4], asg_name.as_str());
    assert_eq!(
        (cells[5].as_str(), cells[6].as_str(), cells[7].as_str()),
        (Some("eks"), Some("rollingUpdate"), Some("normal"))
    );

    let configmaps: Api<ConfigMap> = Api::namespaced(kube.clone(), "kube-system");
    let aws_auth = configmaps.get("aws-auth").await.expect("aws-auth exists");
    let role = spots_booster::instancegroup::aws_auth::mapped_arn(&status.nodes_instance_role_arn);
    assert!(status.nodes_instance_role_arn.contains(":role/spots-booster/"), "{}", status.nodes_instance_role_arn);
    assert!(aws_auth.data.unwrap_or_default()["mapRoles"].contains(&role), "the node role is mapped");

    // Rotate: a new image drifts the template (version 2); the drifted instance's Node is marked
    // `spots-booster.io/rotate` and the booster takes it like a rebalance: replace, drain,
    // terminate. moto 5 cannot launch from a version made by CreateLaunchTemplateVersion (an
    // AssertionError on its userdata answers 500), so the replacement itself is not awaited here;
    // the suite checks the mark, the drain and its Event on the real API server.
    let out = autoscaling.describe_auto_scaling_groups().auto_scaling_group_names(&asg_name).send().await.unwrap();
    let drifted = out.auto_scaling_groups()[0].instances()[0].instance_id().unwrap().to_string();
    let drifted_node = format!("{drifted}.{suffix}.e2e.internal");
    let patch = json!({"spec": {"eks": {"configuration": {"image": next_image}}}});
    groups.patch("batch", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    let nodes: Api<Node> = Api::all(kube.clone());
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(kube.clone(), "default");
    wait_for("the drifted node to be marked and drained", Duration::from_secs(120), async || {
        assert!(booster.try_wait().unwrap().is_none(), "spots-booster exited");
        let status = groups.get("batch").await.ok()?.status?;
        let node = nodes.get(&drifted_node).await.ok()?;
        let marked = node.metadata.annotations.is_some_and(|a| a.contains_key("spots-booster.io/rotate"));
        let drained = events.list(&ListParams::default()).await.ok()?.items.iter().any(|e| {
            e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(drifted_node.as_str())
                && e.reason.as_deref() == Some("DrainStarted")
        });
        (status.latest_template_version == "2" && marked && drained).then_some(())
    })
    .await;
    eprintln!("e2e instancegroups: {drifted} drifted to template version 2, marked for rotation and drained");

    // Delete: the finalizer holds the object until the ASG, template, role and mapping are gone.
    groups.delete("batch", &DeleteParams::default()).await.unwrap();
    wait_for("the InstanceGroup to go", Duration::from_secs(120), async || {
        assert!(booster.try_wait().unwrap().is_none(), "spots-booster exited");
        groups.get_opt("batch").await.ok()?.is_none().then_some(())
    })
    .await;
    let out = autoscaling.describe_auto_scaling_groups().auto_scaling_group_names(&asg_name).send().await.unwrap();
    assert!(out.auto_scaling_groups().is_empty(), "the ASG is gone");
    let aws_auth = configmaps.get("aws-auth").await.unwrap();
    assert!(!aws_auth.data.unwrap_or_default().get("mapRoles").is_some_and(|m| m.contains(&role)), "unmapped");

    let _ = booster.start_kill();
    let _ = booster.wait().await;
    let nodes: Api<Node> = Api::all(kube.clone());
    let ours = nodes.list(&ListParams::default().labels(&format!("spots-booster-e2e={suffix}"))).await.unwrap();
    for n in ours.items {
        let _ = nodes.delete(&n.metadata.name.unwrap(), &DeleteParams::default()).await;
    }
    let _ = namespaces.delete(&ns, &DeleteParams::default()).await;
}
