//! The drainer's give-backs, its terminations around `AZRebalance`, and its notices' deadlines.

use super::*;

#[tokio::test(start_paused = true)]
async fn a_termination_with_decrement_where_az_rebalance_is_active_is_warned_about() {
    let (rig, ctx, mut scaler, mut drainer) = rebalanced(policy()).await;
    let _ = rig.aws.clone().with_az_rebalance("a");
    scaler.tick().await.unwrap();
    join(&rig, &ctx, "r1");
    drainer.tick().await.unwrap();
    drainer.tick().await.unwrap();
    assert_eq!(terminations(&rig.aws), vec![("i-n1".into(), true)]);
    assert_eq!(
        rig.events.reasons_for("n1"),
        vec!["BoostRequested", "DrainStarted", "InstanceTerminated", "AZRebalanceRisk"]
    );
    let text = ctx.metrics.encode();
    assert!(text.contains("spots_booster_az_rebalance_exposed_terminations_total{group=\"a\"} 1"), "{text}");
}

#[tokio::test(start_paused = true)]
async fn with_suspend_az_rebalance_it_is_suspended_before_the_termination_and_resumed_without_it() {
    let (rig, ctx, mut scaler, _) = rebalanced(policy()).await;
    let _ = rig.aws.clone().with_az_rebalance("a");
    let settings = DrainerSettings { suspend_az_rebalance: true, ..DrainerSettings::default() };
    let mut drainer = Drainer::new(ctx.clone(), settings);
    scaler.tick().await.unwrap();
    join(&rig, &ctx, "r1");
    drainer.tick().await.unwrap();
    drainer.tick().await.unwrap();
    let calls = rig.aws.calls();
    let suspended = calls.iter().position(|c| *c == AsgCall::AzRebalance("a".into(), true)).expect("suspended");
    let terminated = calls.iter().position(|c| matches!(c, AsgCall::Terminate(_, true))).expect("terminated");
    assert!(suspended < terminated, "suspended before the termination: {calls:?}");
    assert!(!rig.aws.az_rebalance("a"));
    let by = rig.aws.tags("a").get(AZ_REBALANCE_SUSPENDED_TAG).cloned();
    assert_eq!(by.as_deref(), Some(crate::fakes::CLUSTER), "the tag names the cluster that suspended it");
    assert_eq!(
        rig.events.reasons_for("n1"),
        vec!["BoostRequested", "DrainStarted", "AZRebalanceSuspended", "InstanceTerminated"]
    );

    // The next run goes without the flag: what the booster suspended is resumed, once.
    let mut without = Drainer::new(ctx.clone(), DrainerSettings::default());
    without.tick().await.unwrap();
    without.tick().await.unwrap();
    assert!(rig.aws.az_rebalance("a"));
    assert!(!rig.aws.tags("a").contains_key(AZ_REBALANCE_SUSPENDED_TAG));
    let resumes = rig.aws.calls().iter().filter(|c| **c == AsgCall::AzRebalance("a".into(), false)).count();
    assert_eq!(resumes, 1);
}

#[tokio::test(start_paused = true)]
async fn without_the_flag_only_the_suspended_groups_this_cluster_serves_are_resumed() {
    let aws = FakeAutoScaling::default()
        .with_group("a", 3, 10)
        .with_instance("a", "i-n1")
        .with_tag("a", AZ_REBALANCE_SUSPENDED_TAG, crate::fakes::CLUSTER)
        .with_tag("a", "team", "batch")
        .with_group("legacy", 3, 10)
        .with_instance("legacy", "i-l1")
        .with_tag("legacy", AZ_REBALANCE_SUSPENDED_TAG, "true")
        .with_tag("legacy", "team", "batch")
        .with_group("shared", 3, 10)
        .with_instance("shared", "i-s1")
        .with_tag("shared", AZ_REBALANCE_SUSPENDED_TAG, "other-cluster")
        .with_tag("shared", "team", "batch")
        .with_group("unselected", 3, 10)
        .with_instance("unselected", "i-u1")
        .with_tag("unselected", AZ_REBALANCE_SUSPENDED_TAG, "true")
        .with_group("other-cluster", 3, 10)
        .with_instance("other-cluster", "i-o1")
        .with_tag("other-cluster", AZ_REBALANCE_SUSPENDED_TAG, "true");
    let rig = FakeRig::new(aws);
    let ctx = rig.context(policy(), paused_clock(), Arc::new(Metrics::new())).await;
    ctx.groups.discover(&rig.aws, &["team=batch".parse().unwrap()]).await.unwrap();
    let mut drainer = Drainer::new(ctx.clone(), DrainerSettings::default());
    drainer.tick().await.unwrap();
    assert!(rig.aws.calls().iter().all(|c| !matches!(c, AsgCall::AzRebalance(..))), "no node of a is known yet");

    for (name, group) in [("n1", "a"), ("l1", "legacy"), ("s1", "shared"), ("u1", "unselected")] {
        let mut node = Node::test(name, group);
        node.group = None; // resolved through Auto Scaling, as in the daemon
        rig.cluster.put_node(node);
    }
    for _ in 0..3 {
        drainer.tick().await.unwrap();
    }
    let resumed: Vec<_> = rig.aws.calls().into_iter().filter(|c| matches!(c, AsgCall::AzRebalance(..))).collect();
    assert_eq!(resumed.len(), 2, "once each, and only the groups it serves and suspended: {resumed:?}");
    for group in ["a", "legacy"] {
        assert!(resumed.contains(&AsgCall::AzRebalance(group.into(), false)), "{group}: {resumed:?}");
    }
    assert!(rig.aws.tags("shared").contains_key(AZ_REBALANCE_SUSPENDED_TAG), "another booster's suspension is kept");
    assert!(rig.aws.tags("other-cluster").contains_key(AZ_REBALANCE_SUSPENDED_TAG), "another cluster's is left");
    assert!(rig.aws.tags("unselected").contains_key(AZ_REBALANCE_SUSPENDED_TAG), "--asg-tag-filter leaves it out");
}

#[tokio::test(start_paused = true)]
async fn an_instance_aws_took_between_drain_and_termination_is_given_back_through_drained_nodes() {
    let (rig, ctx, mut scaler, mut drainer) = two_at_risk(policy()).await;
    drainer.tick().await.unwrap();
    rig.aws.reclaim("i-n2", "i-r9");
    rig.aws.reclaim("i-n1", "i-r8");
    let report = drainer.tick().await.unwrap();
    assert!(report.terminated.is_empty(), "{report:?}");
    assert!(rig.ledger.saved().records[0].settled.is_empty(), "not ours: the scaler gives them back");
    rig.cluster.remove_node("n1");
    rig.cluster.remove_node("n2");
    tokio::time::advance(Duration::from_secs(61)).await;
    scaler.tick().await.unwrap();
    assert!(rig.ledger.saved().records[0].giving_back.is_empty(), "the group's replacements are still joining");
    // They join, and pods land on them.
    for name in ["r8", "r9"] {
        let mut node = Node::test(name, "a").with_pods(3, 500, 1 << 30);
        node.created = (ctx.clock)();
        node.group = None;
        rig.cluster.put_node(node);
    }
    scaler.tick().await.unwrap();
    assert_eq!(rig.aws.desired("a"), 6, "nothing lowered without naming the instance it removes");
    let chosen: Vec<NodeName> =
        rig.ledger.saved().records[0].giving_back.values().filter_map(|g| g.node.clone()).collect();
    assert_eq!(chosen, vec![NodeName::from("r8"), NodeName::from("r9")], "as busy as the rest, and newest");

    let report = drainer.tick().await.unwrap();
    assert_eq!(report.started, vec![NodeName::from("r8"), NodeName::from("r9")]);
    assert!(rig.writes.calls().contains(&ClusterCall::Cordon("r8".into())), "cordoned before any eviction");
    assert_eq!(report.evicted, 6, "every pod leaves through the Eviction API");
    let report = drainer.tick().await.unwrap();
    assert_eq!(report.terminated, vec![("i-r8".into(), true), ("i-r9".into(), true)]);
    assert_eq!(rig.aws.desired("a"), 4, "both boosted nodes given back");
    let saved = rig.ledger.saved();
    assert_eq!((saved.records[0].returned, saved.records[0].giving_back.len()), (2, 0));
    assert_eq!(rig.events.reasons_for("r8"), vec!["DrainStarted", "InstanceTerminated"]);

    rig.cluster.remove_node("r8");
    rig.cluster.remove_node("r9");
    scaler.tick().await.unwrap();
    assert!(rig.ledger.saved().records.is_empty(), "the boost closes");
    let text = ctx.metrics.encode();
    assert!(text.contains("spots_booster_give_backs_total{group=\"a\",outcome=\"written\"} 2"), "{text}");
}

#[tokio::test(start_paused = true)]
async fn capacity_aws_took_first_is_given_back_through_the_newest_joining_instance_before_it_serves() {
    let (rig, ctx, mut scaler, mut drainer) = two_at_risk(policy()).await;
    drainer.tick().await.unwrap();
    // AWS takes both; the group replaces them with i-r8 and then i-r9, which have not joined.
    rig.aws.reclaim("i-n1", "i-r8");
    rig.aws.reclaim("i-n2", "i-r9");
    rig.aws.launched_at("i-r8", (ctx.clock)());
    rig.aws.launched_at("i-r9", (ctx.clock)().plus(Duration::from_secs(1)));
    rig.cluster.remove_node("n1");
    rig.cluster.remove_node("n2");
    drainer.tick().await.unwrap();
    // i-r9's kubelet registered it, not Ready yet, and a pod was bound to it anyway.
    let mut r9 = Node::test("r9", "a").with_pods(1, 500, 1 << 30);
    (r9.ready, r9.group) = (false, None);
    rig.cluster.put_node(r9);
    // The boosted instances' Nodes went: their group is described again within seconds.
    tokio::time::advance(Duration::from_secs(5)).await;
    scaler.tick().await.unwrap();
    let chosen: Vec<(Option<NodeName>, InstanceId)> =
        rig.ledger.saved().records[0].giving_back.values().map(|g| (g.node.clone(), g.instance.clone())).collect();
    assert_eq!(chosen, vec![(None, "i-r8".into())], "i-r9 carries a pod: never chosen");

    // Between the plan and the drainer, a pod lands on i-r8's Node too: checked at the moment.
    let mut r8 = Node::test("r8", "a").with_pods(1, 500, 1 << 30);
    (r8.ready, r8.group) = (false, None);
    rig.cluster.put_node(r8);
    let report = drainer.tick().await.unwrap();
    assert!(report.terminated.is_empty(), "{report:?}");
    assert!(rig.ledger.saved().records[0].giving_back.is_empty(), "unchosen, to choose again");

    // Without the pods (the live read is what counts), both go before they serve.
    rig.cluster.remove_node("r8");
    rig.cluster.edit(|s| s.nodes.get_mut(&NodeName::from("r9")).unwrap().pods.clear());
    scaler.tick().await.unwrap();
    let report = drainer.tick().await.unwrap();
    assert_eq!(report.terminated, vec![("i-r8".into(), true), ("i-r9".into(), true)], "newest first");
    assert_eq!(rig.aws.desired("a"), 4, "back at the size before the boost at once");
    let saved = rig.ledger.saved();
    assert_eq!((saved.records[0].returned, saved.records[0].giving_back.len()), (2, 0));
    let text = ctx.metrics.encode();
    assert!(text.contains("spots_booster_give_backs_total{group=\"a\",outcome=\"written\"} 2"), "{text}");
}

#[tokio::test(start_paused = true)]
async fn a_give_back_whose_drain_cannot_finish_uncordons_its_node_and_leaves_the_capacity_to_ca() {
    let (rig, ctx, mut scaler, mut drainer) = two_at_risk(policy()).await;
    rig.aws.reclaim("i-n1", "i-r8");
    rig.cluster.remove_node("n1");
    let mut r8 = Node::test("r8", "a").with_pods(3, 500, 1 << 30);
    r8.group = None;
    rig.cluster.put_node(r8);
    tokio::time::advance(Duration::from_secs(61)).await;
    scaler.tick().await.unwrap();
    let chosen = rig.ledger.saved().records[0].giving_back.values().next().unwrap().node.clone().unwrap();
    let pods = rig.cluster.edit(|s| s.nodes[&chosen].pods.clone()).unwrap();
    pods.iter().for_each(|p| rig.writes.block(p.uid.as_str(), true));

    drainer.tick().await.unwrap();
    tokio::time::advance(ctx.policy.drain_timeout).await;
    let report = drainer.tick().await.unwrap();
    assert!(report.timed_out.contains(&chosen), "{report:?}");
    assert!(!terminations(&rig.aws)
        .iter()
        .any(|(i, _)| rig.cluster.current().unwrap().nodes[&chosen].instance.as_ref() == Some(i)));
    assert!(rig.writes.calls().contains(&ClusterCall::Uncordon(chosen.clone())));
    assert!(!rig.cluster.current().unwrap().nodes[&chosen].cordoned, "serving pods again");
    let saved = rig.ledger.saved();
    assert!(saved.records[0].giving_back.is_empty() && saved.records[0].settled.contains(&"i-n1".into()));
    assert_eq!(
        rig.events.reasons_for(chosen.as_str()),
        vec!["DrainStarted", "DrainBlockedByPDB", "GiveBackLeftToClusterAutoscaler"]
    );
    scaler.tick().await.unwrap();
    assert!(rig.ledger.saved().records[0].giving_back.is_empty(), "no second node is chosen");
}

#[tokio::test(start_paused = true)]
async fn an_interruption_notice_drains_before_its_deadline_though_the_replacement_is_late() {
    let (rig, _ctx, mut scaler, mut drainer) = rebalanced(policy()).await;
    rig.cluster.edit(|s| {
        s.signals[0].kind = SignalKind::SpotInterruption;
        s.signals[0].evidence = Evidence::NodeTaint;
    });
    scaler.tick().await.unwrap();
    assert_eq!(rig.aws.desired("a"), 4);

    // Two minutes' notice; pods need 30 s and the lead is 60 s: the drain starts 30 s in.
    tokio::time::advance(Duration::from_secs(29)).await;
    assert!(drainer.tick().await.unwrap().started.is_empty(), "still time for the replacement");
    tokio::time::advance(Duration::from_secs(1)).await;
    let report = drainer.tick().await.unwrap();
    assert_eq!((report.started.len(), report.evicted), (1, 3), "no replacement Ready, but the deadline is near");
    let report = drainer.tick().await.unwrap();
    assert_eq!(report.terminated, vec![("i-n1".into(), true)], "drained 90 s before AWS takes it");
    assert_eq!(rig.aws.desired("a"), 3, "the boost's node is given back with the instance; its launch goes on");
    assert!(rig.events.reasons_for("n1").contains(&"DrainStarted"));
}

/// n1 with a spot interruption notice EC2 confirms, one of its pods held by its budget.
async fn held_at_notice(policy: Policy) -> Rigged<TestDrainer> {
    let rigged = rebalanced(policy).await;
    let (rig, ctx) = (&rigged.0, &rigged.1);
    rig.cluster.edit(|s| {
        s.signals[0].kind = SignalKind::SpotInterruption;
        s.signals[0].evidence = Evidence::NodeTaint;
        s.signals[0].observed_at = (ctx.clock)();
    });
    rig.aws.interrupt("i-n1");
    rig.writes.block("uid-n1-p0", true);
    rigged
}

#[tokio::test(start_paused = true)]
async fn a_confirmed_notice_drains_at_once_and_a_held_pod_is_deleted_gracefully_before_the_deadline() {
    let policy = Policy { force_at_deadline: true, ..policy() };
    let (rig, ctx, mut scaler, mut drainer) = held_at_notice(policy).await;
    scaler.tick().await.unwrap();
    // No replacement could be Ready before the drain must start: it starts now.
    let report = drainer.tick().await.unwrap();
    assert_eq!((report.started.len(), report.evicted, report.blocked), (1, 2, 1), "{report:?}");
    assert!(rig.events.reasons_for("n1").contains(&"DrainBlockedByPDB"));

    // 120 s notice, 30 s grace, 10 s margin: the held pod is deleted at 80 s, with its grace.
    tokio::time::advance(Duration::from_secs(78)).await;
    drainer.tick().await.unwrap();
    assert!(!rig.writes.calls().iter().any(|c| matches!(c, ClusterCall::DeletePod(..))));
    tokio::time::advance(Duration::from_secs(2)).await;
    drainer.tick().await.unwrap();
    let deleted: Vec<(String, u32)> = rig
        .writes
        .calls()
        .iter()
        .filter_map(|c| match c {
            ClusterCall::DeletePod(pod, grace) => Some((pod.uid.clone(), *grace)),
            _ => None,
        })
        .collect();
    assert_eq!(deleted, vec![("uid-n1-p0".to_string(), 30)]);
    assert!(rig.events.reasons_for("n1").contains(&"PDBOverridden"));
    assert!(ctx.metrics.encode().contains("spots_booster_pdb_overridden_total{group=\"a\"} 1"));
    let report = drainer.tick().await.unwrap();
    assert_eq!(report.terminated, vec![("i-n1".into(), true)], "empty before the deadline: {report:?}");
}

#[tokio::test(start_paused = true)]
async fn without_the_flag_the_deadline_tells_which_budget_held_which_pod() {
    let (rig, ctx, mut scaler, mut drainer) = held_at_notice(policy()).await;
    scaler.tick().await.unwrap();
    drainer.tick().await.unwrap();
    tokio::time::advance(Duration::from_secs(120)).await;
    drainer.tick().await.unwrap();
    drainer.tick().await.unwrap();
    assert!(!rig.writes.calls().iter().any(|c| matches!(c, ClusterCall::DeletePod(..))));
    let held: Vec<&str> = rig.events.reasons_for("n1").into_iter().filter(|r| *r == "PodsHeldAtDeadline").collect();
    assert_eq!(held.len(), 1, "told once");
    let note = rig.events.notes_for("n1").into_iter().find(|n| n.contains("held")).unwrap();
    assert!(note.contains("default/n1-p0 by PodDisruptionBudget default/default-budget"), "{note}");
    assert!(ctx.metrics.encode().contains("spots_booster_pods_held_at_deadline_total{group=\"a\"} 1"));
}

#[tokio::test(start_paused = true)]
async fn a_give_back_drains_its_node_by_the_pods_the_view_left_out_and_never_one_with_a_protected_pod() {
    let (rig, _ctx, mut scaler, mut drainer) = two_at_risk(policy()).await;
    rig.aws.reclaim("i-n1", "i-r8");
    rig.cluster.remove_node("n1");
    // The group's replacement r8 runs a pod; n3 runs one nothing recreates, n4 one that opted
    // out. The view shows none of their pods: uncordoned, no signal.
    let mut r8 = Node::test("r8", "a").with_pods(1, 500, 1 << 30);
    r8.group = None;
    rig.cluster.put_node(r8);
    rig.cluster.edit(|s| {
        s.nodes.get_mut(&NodeName::from("n3")).unwrap().pods[0].bare = true;
        s.nodes.get_mut(&NodeName::from("n4")).unwrap().pods[0].opt_out = Some(crate::core::OptOut::DoNotDisrupt);
    });
    tokio::time::advance(Duration::from_secs(61)).await;
    assert!(rig.cluster.current().unwrap().nodes[&NodeName::from("r8")].pods.is_empty(), "as the watch shows it");
    scaler.tick().await.unwrap();
    let chosen = rig.ledger.saved().records[0].giving_back.values().next().unwrap().node.clone().unwrap();
    assert_eq!(chosen.as_str(), "r8", "n3 and n4 carry pods a give-back must not evict");
    let held = rig.cluster.edit(|s| s.nodes[&chosen].pods.clone()).unwrap();

    let report = drainer.tick().await.unwrap();
    assert!(report.started.contains(&chosen), "{report:?}");
    assert!(report.terminated.is_empty(), "never terminated with its pods on it: {report:?}");
    let evicted = rig.writes.evicted();
    assert!(held.iter().all(|p| evicted.contains(&p.uid.to_string())), "{evicted:?}");
    let report = drainer.tick().await.unwrap();
    assert!(report.terminated.contains(&("i-r8".into(), true)), "{report:?}");
    assert_eq!(rig.events.reasons_for(chosen.as_str()), vec!["DrainStarted", "InstanceTerminated"]);
}
