//! End-to-end: who may make the daemon act. The real binary, a real API server and moto. Runs
//! only when `SPOTS_BOOSTER_E2E_KUBECONFIG` and `SPOTS_BOOSTER_E2E_AWS_ENDPOINT` are set.
//!
//! Three notices that must move nothing, then one that must: a forged Event (no source) on a
//! cordoned node; NTH's signed Event on a node NTH never cordoned; NTH's signed Event on a cordoned
//! node whose instance is on-demand (moto launches ASG instances on-demand, and EC2 sends
//! rebalance recommendations to spot instances only). Then two that lie well: a Node whose
//! EC2-shaped name is not the spot instance's it names, cordoned and announced; and NTH's Event about the
//! spot node written from another host. Then the spot instance's own Node, cordoned and announced:
//! boosted, the instance's lifecycle and names read through `DescribeInstances`.

use std::time::{Duration, Instant};

use aws_sdk_ec2::types::{InstanceMarketOptionsRequest, InstanceType, MarketType};
use k8s_openapi::api::core::v1::{Event, Node};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use support::e2e::{
    aws, create_group, create_namespace, env, free_port, kube_client, metric, nth_rebalance_event, register_node,
    run_suffix, scrape, start_booster, AWS_ENDPOINT, KUBECONFIG,
};

mod support;

async fn cordon(kube: &Client, node: &str) {
    let nodes: Api<Node> = Api::all(kube.clone());
    nodes.patch(node, &PatchParams::default(), &Patch::Merge(json!({"spec": {"unschedulable": true}}))).await.unwrap();
}

/// Six lines anyone who may create Events can write.
async fn forged_interruption(kube: &Client, ns: &str, node: &str) {
    let events: Api<Event> = Api::namespaced(kube.clone(), ns);
    let event = json!({"metadata": {"name": format!("{node}.forged")},
        "involvedObject": {"kind": "Node", "name": node, "namespace": ns}, "reason": "SpotInterruption"});
    events.create(&PostParams::default(), &serde_json::from_value(event).unwrap()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_unconfirmed_and_on_demand_notices_move_nothing_and_a_spot_one_is_boosted() {
    let Some((kubeconfig, endpoint)) = env() else {
        eprintln!("e2e skipped: set {KUBECONFIG} and {AWS_ENDPOINT} to run it (see docs/development.md, \"End-to-end suite\")");
        return;
    };
    let suffix = run_suffix();
    let (ns, group) = (format!("sb-trust-{suffix}"), format!("sb-trust-{suffix}"));
    let kube = kube_client(&kubeconfig).await;
    let sdk = aws(&endpoint).await;
    create_namespace(&kube, &ns).await;

    let ec2 = aws_sdk_ec2::Client::new(&sdk);
    let asg = aws_sdk_autoscaling::Client::new(&sdk);
    let image = create_group(&sdk, &group, 3, 10).await;
    let desired = || async {
        let out = asg.describe_auto_scaling_groups().auto_scaling_group_names(&group).send().await.unwrap();
        out.auto_scaling_groups()[0].desired_capacity().unwrap()
    };
    let described = asg.describe_auto_scaling_groups().auto_scaling_group_names(&group).send().await.unwrap();
    let ids: Vec<String> =
        described.auto_scaling_groups()[0].instances().iter().map(|i| i.instance_id().unwrap().to_string()).collect();
    assert_eq!(ids.len(), 3);
    let name = |id: &str| format!("{id}.{suffix}.e2e.internal");
    for id in &ids {
        register_node(&kube, &name(id), "us-east-1a", id, &suffix).await;
    }

    let port = free_port();
    // One replacement per at-risk node: these nodes hold no pods, which `pods` sizing would
    // rightly replace with none.
    let mut booster = start_booster(
        &kubeconfig,
        &endpoint,
        &ns,
        port,
        &["--leader-elect", "false", "--instance-groups", "false", "--sizing", "count"],
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    while metric(&scrape(port).await, "spots_booster_synced") < 1.0 {
        assert!(booster.try_wait().unwrap().is_none(), "spots-booster exited early");
        assert!(Instant::now() < deadline, "spots-booster never synced");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }

    // 1. A forged interruption on a cordoned node. 2. NTH's Event, no cordon. 3. NTH's Event and
    // cordon, on-demand instance.
    cordon(&kube, &name(&ids[0])).await;
    forged_interruption(&kube, &ns, &name(&ids[0])).await;
    nth_rebalance_event(&kube, &ns, &name(&ids[1]), &ids[1]).await;
    cordon(&kube, &name(&ids[2])).await;
    nth_rebalance_event(&kube, &ns, &name(&ids[2]), &ids[2]).await;

    let untrusted = |text: &str, reason: &str| {
        metric(text, &format!("spots_booster_signals_untrusted_total{{reason=\"{reason}\"}}"))
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let text = scrape(port).await;
        let seen = [untrusted(&text, "not-from-nth"), untrusted(&text, "not-cordoned"), untrusted(&text, "not-spot")];
        if seen == [1.0, 1.0, 1.0] {
            break;
        }
        assert!(Instant::now() < deadline, "each notice should be refused once with its reason: {seen:?}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    // Give the scaler every chance to act on them anyway.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(desired().await, 3, "nothing is boosted for a notice nothing vouches for");
    assert_eq!(metric(&scrape(port).await, "spots_booster_aws_calls_total{operation=\"SetDesiredCapacity\"}"), 0.0);

    // A spot instance in the group, cordoned by NTH and announced: believed and boosted.
    let spot = ec2
        .run_instances()
        .image_id(&image)
        .instance_type(InstanceType::M5Large)
        .min_count(1)
        .max_count(1)
        .instance_market_options(InstanceMarketOptionsRequest::builder().market_type(MarketType::Spot).build())
        .send()
        .await
        .unwrap();
    let spot = spot.instances()[0].instance_id().unwrap().to_string();
    asg.attach_instances().auto_scaling_group_name(&group).instance_ids(&spot).send().await.unwrap();
    let before = desired().await;

    // 4. A kubelet registered as itself (an EC2-shaped name that is not the spot instance's)
    // names the spot instance, cordons itself and writes NTH's Event from itself. 5. NTH's Event
    // about the spot instance's own node, written from another host.
    let impostor = format!("ip-10-250-{}-{}.ec2.internal", suffix.len(), before);
    register_node(&kube, &impostor, "us-east-1a", &spot, &suffix).await;
    cordon(&kube, &impostor).await;
    nth_rebalance_event(&kube, &ns, &impostor, &spot).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while untrusted(&scrape(port).await, "identity-mismatch") < 1.0 {
        assert!(Instant::now() < deadline, "the impostor's claim was never refused");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    Api::<Node>::all(kube.clone()).delete(&impostor, &Default::default()).await.unwrap();
    register_node(&kube, &name(&spot), "us-east-1a", &spot, &suffix).await;
    cordon(&kube, &name(&spot)).await;
    let events: Api<Event> = Api::namespaced(kube.clone(), &ns);
    let elsewhere = json!({"metadata": {"name": format!("{}.elsewhere", name(&spot))},
        "involvedObject": {"kind": "Node", "name": name(&spot), "namespace": ns},
        "reason": "RebalanceRecommendation", "message": "Rebalance recommendation received. \n",
        "source": {"component": "aws-node-termination-handler", "host": name(&ids[0])}});
    events.create(&PostParams::default(), &serde_json::from_value(elsewhere).unwrap()).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while untrusted(&scrape(port).await, "reporter-mismatch") < 1.0 {
        assert!(Instant::now() < deadline, "the Event from another host was never refused");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(desired().await, before, "neither lie is boosted");

    // The spot instance's own Node, cordoned, and NTH's Event from it: believed and boosted.
    cordon(&kube, &name(&spot)).await;
    let announced = Instant::now();
    nth_rebalance_event(&kube, &ns, &name(&spot), &spot).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while desired().await == before {
        assert!(Instant::now() < deadline, "the spot instance's notice was never boosted");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(desired().await, before + 1);
    eprintln!("e2e trust: five notices refused by reason; the spot one boosted {:.2}s after its Event", {
        announced.elapsed().as_secs_f64()
    });
    let text = scrape(port).await;
    assert!(metric(&text, "spots_booster_aws_calls_total{operation=\"DescribeInstances\"}") >= 2.0, "{text}");
    assert!(booster.try_wait().unwrap().is_none(), "still running");
    booster.kill().await.unwrap();
}
