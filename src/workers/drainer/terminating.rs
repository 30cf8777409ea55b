//! Terminating drained instances through the executor, with the ledger's intent before the call
//! and its answer after; `AZRebalance` suspended before, or resumed where an earlier run did.

use super::*;

/// A drained (or timed-out) instance still to terminate: kept until AWS confirms.
#[derive(Debug, Clone)]
pub(super) struct PendingTermination {
    pub(super) group: GroupName,
    /// Its node; `None` for an instance given back while still joining.
    pub(super) node: Option<NodeName>,
    pub(super) instance: InstanceId,
    pub(super) decrement: bool,
    /// The instance AWS took first whose boosted node this termination gives back.
    pub(super) gives_back: Option<InstanceId>,
}

impl PendingTermination {
    /// What the core decides and answers it as.
    pub(super) fn termination(&self) -> Termination {
        Termination { instance: self.instance.clone(), decrement: self.decrement, gives_back: self.gives_back.clone() }
    }
}

/// One termination, handed back with what it was for.
pub(super) async fn terminate<P: Ports>(
    ctx: &WorkerContext<P>,
    p: PendingTermination,
    decrement: bool,
) -> (PendingTermination, Answer) {
    let outcome = ctx.executor().run(&Write::Terminate { instance: p.instance.clone(), decrement }).await;
    (p, outcome)
}

impl<P: Ports> Drainer<P> {
    /// Terminates drained instances, all at once; a failed termination is retried next tick.
    /// Each is noted as settled in the ledger before the call (its departure is ours, not a
    /// reclaim to give back), and decrements only while its boost still has a node to return.
    pub(super) async fn terminate_drained(&mut self, report: &mut DrainReport) -> Result<(), DrainerError> {
        if self.to_terminate.is_empty() {
            return Ok(());
        }
        let pending: Vec<PendingTermination> = self.to_terminate.values().cloned().collect();
        if self.settings.suspend_az_rebalance {
            self.suspend_az_rebalance_first(&pending).await;
        }
        // A give-back's own node was chosen only while its boost had a node to return; settling
        // the instance AWS took before the call keeps a restart from choosing a second node. A
        // decrement is counted before the call too (intent, then outcome): an answer lost to a
        // crash or a timeout never lets another termination decrement for the same node.
        let terminations: Vec<Termination> = pending.iter().map(PendingTermination::termination).collect();
        let decisions = self.ctx.executor().save_decided(|l| decide_terminations(l, &terminations)).await?;
        let ctx = &*self.ctx;
        let mut retried_of = BTreeMap::new();
        let calls: Vec<_> = pending
            .into_iter()
            .zip(decisions)
            .map(|(p, decided)| {
                retried_of.insert(p.instance.clone(), decided.retried);
                terminate(ctx, p, decided.decrement)
            })
            .collect();
        let outcomes: Vec<_> =
            stream::iter(calls).buffer_unordered(self.settings.evictions_in_flight.max(1)).collect().await;
        let mut answered: Vec<(Termination, TerminationAnswer)> = Vec::new();
        let mut done = Vec::new();
        for (p, outcome) in outcomes {
            let node = p.node.as_ref().map_or_else(|| "(joining)".to_string(), ToString::to_string);
            // A failed call is made again at the next pass; any other answer ends it.
            if outcome.is_ok() {
                self.to_terminate.remove(&p.instance);
            }
            let answer = match outcome {
                Ok(Made::Terminated { decremented }) => TerminationAnswer::Terminated { decremented },
                // An earlier call whose answer was lost asked for this termination: gone now, it
                // is taken as ours (counted once; at worst the group stays one node larger).
                Ok(Made::AlreadyGone) if retried_of.get(&p.instance).copied().unwrap_or(false) => {
                    TerminationAnswer::Terminated { decremented: true }
                }
                Ok(Made::AlreadyGone) => TerminationAnswer::TakenFirst,
                Ok(Made::DryRun) => {
                    info!(%node, instance = %p.instance, "dry run: instance not terminated");
                    TerminationAnswer::NotMade
                }
                Ok(other) => {
                    warn!(%node, instance = %p.instance, answer = ?other, "a termination answered as no termination does; retrying");
                    TerminationAnswer::NotMade
                }
                Err(e) => {
                    warn!(%node, instance = %p.instance, error = %e, "terminating a drained instance failed; retrying");
                    // Refused before anything changed: the count is taken back and retried.
                    if e.may_have_applied {
                        TerminationAnswer::Unknown
                    } else {
                        TerminationAnswer::NotMade
                    }
                }
            };
            answered.push((p.termination(), answer));
            if let TerminationAnswer::Terminated { decremented } = answer {
                done.push((p, decremented));
            }
        }
        let edits = answer_terminations(answered.iter().map(|(t, a)| (t, *a)));
        self.ctx.executor().save(&edits).await?;
        for (p, decremented) in done {
            if p.gives_back.is_some() && decremented {
                self.ctx.metrics.scaler.give_back(p.group.as_str(), GiveBackOutcome::Written);
            }
            self.ctx.metrics.drainer.terminated(p.group.as_str(), decremented);
            match &p.node {
                Some(node) => {
                    info!(%node, instance = %p.instance, decremented, "instance terminated");
                    let event = NodeEvent::instance_terminated(node, &p.instance, p.gives_back.as_ref(), decremented);
                    self.publish(event).await;
                }
                // No Node to tell: it never joined.
                None => {
                    info!(group = %p.group, instance = %p.instance, gives_back = ?p.gives_back, decremented, "joining instance terminated before it served")
                }
            }
            if decremented && self.az_rebalance.contains(&p.group) {
                self.warn_az_rebalance(p.node.as_ref(), &p.group).await;
            }
            report.terminated.push((p.instance, decremented));
        }
        Ok(())
    }

    /// `--suspend-az-rebalance`: before terminating with decrement in a group whose `AZRebalance`
    /// is active, suspend it there (tagged, so a run without the flag resumes it). A suspension
    /// that fails leaves the termination to go ahead with its warning.
    pub(super) async fn suspend_az_rebalance_first(&mut self, pending: &[PendingTermination]) {
        let mut groups: Vec<(&GroupName, Option<&NodeName>)> = Vec::new();
        for p in pending.iter().filter(|p| p.decrement && self.az_rebalance.contains(&p.group)) {
            match groups.iter_mut().find(|(g, _)| *g == &p.group) {
                Some((_, node)) => *node = node.or(p.node.as_ref()),
                None => groups.push((&p.group, p.node.as_ref())),
            }
        }
        for (group, node) in groups {
            match self.ctx.executor().run(&Write::SuspendAzRebalance(group.clone())).await {
                Ok(_) => {
                    info!(%group, "AZRebalance suspended before a termination with decrement (--suspend-az-rebalance)");
                    self.az_rebalance.remove(group);
                    if let Some(node) = node {
                        self.publish(NodeEvent::az_rebalance_suspended(node, group)).await;
                    }
                }
                Err(e) => warn!(%group, error = %e, "could not suspend AZRebalance; terminating anyway"),
            }
        }
    }

    /// Without `--suspend-az-rebalance`: resumes `AZRebalance` on the groups an earlier run of
    /// this cluster's booster suspended (found once, by their tag naming this cluster), each only
    /// once this cluster is seen to serve it: it holds one of this cluster's nodes and passes
    /// `--asg-tag-filter`. Another cluster's group, suspended by its own booster, is never
    /// touched. A tag of `true` is an older release's, which named no cluster: served is enough.
    pub(super) async fn resume_az_rebalance(&mut self, snapshot: &Snapshot) {
        if self.az_rebalance_to_resume.is_none() {
            let cluster = self.ctx.groups.cluster();
            let suspended = TagFilter { key: AZ_REBALANCE_SUSPENDED_TAG.into(), value: None };
            match self.ctx.aws.discover_groups(std::slice::from_ref(&suspended)).await {
                Ok(groups) => {
                    let by_us = |g: &GroupDescription| {
                        g.tags.get(AZ_REBALANCE_SUSPENDED_TAG).is_some_and(|by| *by == cluster || by == "true")
                    };
                    self.az_rebalance_to_resume = Some(groups.into_iter().filter(by_us).map(|g| g.name).collect());
                }
                Err(e) => {
                    warn!(error = %e, "could not list the groups whose AZRebalance spots-booster suspended; retrying");
                    return;
                }
            }
        }
        let Some(to_resume) = self.az_rebalance_to_resume.as_mut().filter(|r| !r.is_empty()) else { return };
        let served: BTreeSet<&GroupName> = snapshot
            .nodes
            .values()
            .filter_map(|n| n.group.as_ref())
            .filter(|g| snapshot.groups.get(*g).is_some_and(Group::served))
            .collect();
        let now_served: Vec<GroupName> = to_resume.iter().filter(|g| served.contains(g)).cloned().collect();
        if now_served.is_empty() {
            return;
        }
        for group in now_served {
            match self.ctx.executor().run(&Write::ResumeAzRebalance(group.clone())).await {
                Ok(_) => {
                    info!(%group, "AZRebalance resumed: --suspend-az-rebalance is off");
                    to_resume.remove(&group);
                }
                Err(e) => warn!(%group, error = %e, "could not resume AZRebalance; retrying"),
            }
        }
    }

    /// A termination with decrement in a group whose `AZRebalance` process is active: Auto
    /// Scaling may now terminate instances of its own choosing to even out its zones, and those
    /// terminations drain nothing.
    pub(super) async fn warn_az_rebalance(&self, node: Option<&NodeName>, group: &GroupName) {
        let shown = node.map_or("(never joined)", NodeName::as_str);
        warn!(node = shown, %group, "terminated with decrement in a group whose AZRebalance process is active: Auto Scaling may terminate other instances, undrained, to even out its zones");
        self.ctx.metrics.drainer.az_rebalance_exposed(group.as_str());
        if let Some(node) = node {
            self.publish(NodeEvent::az_rebalance_risk(node, group)).await;
        }
    }
}
