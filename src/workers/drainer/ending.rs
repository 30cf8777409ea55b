//! How drains end: timed out, taken back by an operator, drained (queued for termination), and
//! the give-backs whose node or joining instance is checked again at the moment.

use super::*;

/// What checking a joining instance chosen to give back found, at the moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum JoiningCheck {
    /// It may be terminated.
    MayGo,
    /// It may not, for this reason: it is unchosen.
    MayNotGo(&'static str),
    /// A read failed: checked again at the next pass.
    Unknown,
}

impl<P: Ports> Drainer<P> {
    pub(super) async fn end_timed_out(
        &mut self,
        plan: &BatchPlan,
        snapshot: &Snapshot,
        now: Timestamp,
        report: &mut DrainReport,
    ) {
        for t in &plan.timed_out {
            let started_at = self.drains.in_progress.get(&t.node).map(|d| d.started_at);
            self.observe_end(&t.group, DrainOutcome::TimedOut, started_at, now);
            let left = snapshot.nodes.get(&t.node).map_or(0, |n| eviction_order(n).len());
            let then = if t.terminate {
                "terminating it anyway (--terminate-after-drain-timeout)"
            } else {
                "it stays cordoned"
            };
            report.timed_out.push(t.node.clone());
            if let Some(reclaimed) = &t.gives_back {
                self.give_back_left_to_ca(
                    &t.group,
                    &t.node,
                    reclaimed,
                    format!("its drain timed out with {left} pod(s) left"),
                )
                .await;
                continue;
            }
            warn!(node = %t.node, left, "drain timed out; {then}");
            self.publish(NodeEvent::drain_timed_out(&t.node, left, t.terminate)).await;
            if t.terminate {
                self.to_terminate.insert(
                    t.instance.clone(),
                    PendingTermination {
                        group: self.returning_from.get(&t.instance).unwrap_or(&t.group).clone(),
                        node: Some(t.node.clone()),
                        instance: t.instance.clone(),
                        decrement: t.decrement,
                        gives_back: None,
                    },
                );
            }
        }
    }

    /// A node chosen to give back capacity AWS took first could not be drained: it is made
    /// schedulable again (the booster cordoned it) and the capacity is left to Cluster
    /// Autoscaler, which scales the group down once it finds the room unneeded.
    pub(super) async fn give_back_left_to_ca(
        &self,
        group: &GroupName,
        node: &NodeName,
        reclaimed: &InstanceId,
        why: String,
    ) {
        if let Err(e) = self.ctx.executor().run(&Write::Uncordon(node.clone())).await {
            warn!(%node, error = %e, "could not uncordon a node whose give-back stopped");
        }
        let ended = self
            .ctx
            .executor()
            .save(&[
                LedgerEdit::Settle(reclaimed.clone(), true),
                LedgerEdit::GiveBack { reclaimed: reclaimed.clone(), node: None },
            ])
            .await;
        if let Err(e) = ended {
            warn!(%node, error = %e, "could not record the end of a give-back; the next plan retries it");
            return;
        }
        warn!(%node, %group, %reclaimed, "give-back stopped: {why}; the capacity is left to Cluster Autoscaler");
        self.ctx.metrics.scaler.give_back(group.as_str(), GiveBackOutcome::LeftToClusterAutoscaler);
        self.publish(NodeEvent::give_back_stopped(node, group, reclaimed, &why)).await;
    }

    /// Carries out the drains that end: drained nodes are queued for termination; a node an
    /// operator uncordoned is remembered in the ledger as kept.
    pub(super) async fn end_drains(&mut self, ended: &[EndedDrain], now: Timestamp, report: &mut DrainReport) {
        let mut kept = Vec::new();
        for e in ended {
            match e.ending {
                HowDrainEnded::Uncordoned | HowDrainEnded::OptedOut => {
                    let how = if e.ending == HowDrainEnded::OptedOut {
                        "opted out (spots-booster.io/disabled)"
                    } else {
                        "uncordoned"
                    };
                    warn!(node = %e.node, how, "an operator took the node back during its drain; drain stopped for good, instance kept");
                    if let Err(err) = self.ctx.executor().run(&Write::ReadmitToLoadBalancers(e.node.clone())).await {
                        warn!(node = %e.node, error = %err, "could not readmit the node to load balancers");
                    }
                    if let Some(reclaimed) = &e.gives_back {
                        let why = format!("an operator {how} it");
                        self.give_back_left_to_ca(&e.group, &e.node, reclaimed, why).await;
                        continue;
                    }
                    kept.push(e.instance.clone());
                }
                HowDrainEnded::Drained { terminate, decrement } => {
                    self.observe_end(&e.group, DrainOutcome::Drained, Some(e.started_at), now);
                    if e.recommendation_only {
                        self.ctx.metrics.market.needless_drain(e.group.as_str());
                    }
                    if terminate {
                        report.drained.push(e.node.clone());
                        info!(node = %e.node, "drained");
                        self.to_terminate.insert(
                            e.instance.clone(),
                            PendingTermination {
                                group: self.returning_from.get(&e.instance).unwrap_or(&e.group).clone(),
                                node: Some(e.node.clone()),
                                instance: e.instance.clone(),
                                decrement,
                                gives_back: e.gives_back.clone(),
                            },
                        );
                    } else if e.gives_back.is_none() {
                        // It went by itself (AWS took it): its boost is given back.
                        self.wake_scaler();
                    } else if let Some(reclaimed) = &e.gives_back {
                        // The chosen node went by itself (AWS or Cluster Autoscaler took it):
                        // another is chosen at the next plan.
                        if let Err(err) = self
                            .ctx
                            .executor()
                            .save(&[LedgerEdit::GiveBack { reclaimed: reclaimed.clone(), node: None }])
                            .await
                        {
                            warn!(node = %e.node, error = %err, "could not record a give-back node's departure");
                        }
                    }
                }
            }
        }
        if !kept.is_empty() {
            // Remembered in the ledger: no later plan, nor a restart, cordons and drains it again.
            if let Err(e) =
                self.ctx.executor().save(&kept.iter().cloned().map(LedgerEdit::Keep).collect::<Vec<_>>()).await
            {
                warn!(error = %e, "could not record an operator's uncordon; the next plan may drain again");
            }
        }
    }

    /// Checks again, at the moment, each joining instance chosen to give back capacity AWS took
    /// first, and queues its termination with decrement: Auto Scaling still lists it in its group
    /// (what a Node or a tenant cannot write), no Node claiming it is Ready, and a live read finds
    /// no pod to evict on any Node that does. One that fails a check is unchosen, so the next plan
    /// chooses again (a node that joined is then given back by its drain); one whose check could
    /// not be made waits for the next pass.
    pub(super) async fn give_back_joining(&mut self, joining: &[JoiningGiveBack], snapshot: &Snapshot) {
        let joining: Vec<&JoiningGiveBack> =
            joining.iter().filter(|j| !self.to_terminate.contains_key(&j.instance)).collect();
        if joining.is_empty() {
            return;
        }
        let ids: Vec<InstanceId> = joining.iter().map(|j| j.instance.clone()).collect();
        let listed = match self.ctx.aws.groups_of(&ids).await {
            Ok(listed) => listed,
            Err(e) => {
                warn!(error = %e, instances = ids.len(), "could not check joining instances chosen to give back; retrying");
                return;
            }
        };
        let mut unchosen = Vec::new();
        for j in joining {
            let claiming: Vec<&Node> =
                snapshot.nodes.values().filter(|n| n.instance.as_ref() == Some(&j.instance)).collect();
            let mut check = if listed.get(&j.instance) != Some(&j.group) {
                JoiningCheck::MayNotGo("Auto Scaling no longer lists it in the group")
            } else if claiming.iter().any(|n| n.ready) {
                JoiningCheck::MayNotGo("its Node is Ready")
            } else {
                JoiningCheck::MayGo
            };
            for node in &claiming {
                if check != JoiningCheck::MayGo {
                    break;
                }
                match within(self.settings.eviction_call_timeout, self.ctx.writes.live_pods(&node.name)).await {
                    Ok(pods) if pods.iter().any(|p| p.class.is_evictable()) => {
                        check = JoiningCheck::MayNotGo("a pod runs on its Node");
                    }
                    Ok(_) => {}
                    Err(e) => {
                        warn!(node = %node.name, instance = %j.instance, error = %e, "could not read the pods of a joining instance's Node; it is not terminated until a read shows none");
                        check = JoiningCheck::Unknown;
                    }
                }
            }
            match check {
                JoiningCheck::MayGo => {
                    info!(group = %j.group, instance = %j.instance, reclaimed = %j.reclaimed, "giving back capacity AWS took first: terminating a joining instance before it serves");
                    self.to_terminate.insert(
                        j.instance.clone(),
                        PendingTermination {
                            group: j.group.clone(),
                            node: None,
                            instance: j.instance.clone(),
                            decrement: true,
                            gives_back: Some(j.reclaimed.clone()),
                        },
                    );
                }
                JoiningCheck::Unknown => {}
                JoiningCheck::MayNotGo(why) => {
                    info!(group = %j.group, instance = %j.instance, why, "a joining instance chosen to give back capacity may not go; choosing again");
                    unchosen.push(LedgerEdit::GiveBack { reclaimed: j.reclaimed.clone(), node: None });
                }
            }
        }
        if !unchosen.is_empty() {
            if let Err(e) = self.ctx.executor().save(&unchosen).await {
                warn!(error = %e, "could not unchoose joining instances; retried next pass");
            }
        }
    }

    /// Counts a drain's end, and how long it ran when its start is known.
    pub(super) fn observe_end(
        &self,
        group: &GroupName,
        outcome: DrainOutcome,
        started_at: Option<Timestamp>,
        now: Timestamp,
    ) {
        self.ctx.metrics.drainer.drain(group.as_str(), outcome, started_at.map(|at| now.since(at)));
    }

    /// Reports the drains in progress per group, zero for a group whose last one ended.
    pub(super) fn export_progress(&self) {
        let mut per_group: BTreeMap<&str, i64> = BTreeMap::new();
        for d in self.drains.in_progress.values() {
            *per_group.entry(d.group.as_str()).or_default() += 1;
        }
        for (group, _) in self.drains.last_batch_at.iter() {
            let n = per_group.get(group.as_str()).copied().unwrap_or(0);
            self.ctx.metrics.drainer.in_progress(group.as_str(), n);
        }
    }
}
