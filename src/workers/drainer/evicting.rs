//! Evictions in the core's order, sent as each node's cordon lands and folded back into the
//! drains as they are answered; the live reads that end a drain; deletions at a deadline.

use super::*;

/// A pod and what its eviction answered.
pub(super) type EvictionResultOf = (PodRef, Answer);

/// A pass's evictions in the core's order (nearest deadline first, one pod of every node of a
/// wave at a time: [`eviction_sequence`]), sent node by node as each node's drain may go on. One
/// node's refused or slow pod never holds another back: every eviction is one call with a
/// deadline, running beside the passes (see [`EvictionsInFlight`]), and a pod whose call still
/// runs is not sent again.
pub(super) struct Sequenced {
    pub(super) rounds: Vec<EvictionRound>,
    /// Each node's pods as (place in the sequence, round, pod).
    pub(super) places: BTreeMap<NodeName, Vec<(usize, usize, usize)>>,
    /// The calls sent.
    pub(super) sent: HashSet<Id>,
}

impl Sequenced {
    pub(super) fn new(rounds: Vec<EvictionRound>) -> Self {
        let sequence = eviction_sequence(&rounds);
        let mut places: BTreeMap<NodeName, Vec<(usize, usize, usize)>> = BTreeMap::new();
        for (place, (k, p)) in sequence.iter().enumerate() {
            places.entry(rounds[*k].node.clone()).or_default().push((place, *k, *p));
        }
        let first: Vec<String> = sequence.iter().take(3).map(|(k, p)| format!("{}#{p}", rounds[*k].node)).collect();
        debug!(rounds = rounds.len(), pods = sequence.len(), ?first, "evictions sequenced");
        Sequenced { rounds, places, sent: HashSet::new() }
    }

    /// The nodes with evictions due.
    pub(super) fn nodes(&self) -> impl Iterator<Item = NodeName> + '_ {
        self.places.keys().cloned()
    }

    /// Sends `node`'s evictions in their places, once.
    pub(super) fn send<P: Ports>(
        &mut self,
        evictions: &mut EvictionsInFlight,
        ctx: &Arc<WorkerContext<P>>,
        deadline: Duration,
        node: &NodeName,
    ) {
        for (place, k, p) in self.places.remove(node).unwrap_or_default() {
            let (round, evicted) = (&self.rounds[k], self.rounds[k].pods[p].clone());
            let pod = PodRef::from(&evicted);
            let ctx = ctx.clone();
            let call = async move { ctx.executor().within(deadline).run(&Write::Evict(evicted)).await };
            self.sent.extend(evictions.send(place, &round.node, &round.group, pod, call));
        }
    }
}

/// One live read of a node's pods with a deadline.
pub(super) async fn read_within<W: ClusterWrites>(
    writes: &W,
    deadline: Duration,
    node: NodeName,
) -> (NodeName, Result<Vec<Pod>, String>) {
    let read = within(deadline, writes.live_pods(&node)).await;
    (node, read)
}

impl<P: Ports> Drainer<P> {
    /// Tells which budget held which pod on each node whose deadline came: what the instance's
    /// end kills.
    pub(super) async fn tell_held_at_deadline(&mut self, held: &[HeldAtDeadline], now: Timestamp) {
        for h in held {
            let pods: Vec<String> = h.pods.iter().map(|p| format!("{}/{}", p.pod.namespace, p.pod.name)).collect();
            let budgets: Vec<&str> = h.pods.iter().map(|p| p.budget.as_deref().unwrap_or("?")).collect();
            warn!(node = %h.node, group = %h.group, pods = %pods.join(","), budgets = %budgets.join(","), "interruption deadline came with pods held by their budgets");
            self.ctx.metrics.drainer.held_at_deadline(h.group.as_str(), h.pods.len());
            self.ctx.metrics.market.pods_killed(h.group.as_str(), h.pods.len() as u64);
            for p in &h.pods {
                self.displaced(p.pod.uid.as_str(), p.pod.owner.as_ref(), &h.group, now);
            }
            self.publish(NodeEvent::pods_held_at_deadline(h)).await;
        }
    }

    /// Deletes, gracefully and all at once, the pods budgets still refuse at their node's
    /// deadline (`--interruption-force-at-deadline`). A deletion not made is planned again.
    pub(super) async fn delete_at_deadline(&mut self, force: Vec<ForcedDeletion>, now: Timestamp) {
        if force.is_empty() {
            return;
        }
        let executor = || self.ctx.executor().within(self.settings.eviction_call_timeout);
        let calls: Vec<_> = force
            .into_iter()
            .map(|f| async move {
                let delete = Write::DeleteAtDeadline { pod: f.held.pod.clone(), grace_seconds: f.grace_seconds };
                let outcome = executor().run(&delete).await;
                (f, outcome)
            })
            .collect();
        let done: Vec<(ForcedDeletion, Answer)> =
            stream::iter(calls).buffer_unordered(self.settings.evictions_in_flight.max(1)).collect().await;
        let mut tells = Vec::new();
        for (f, outcome) in done {
            match outcome {
                Ok(_) => {
                    let budget = f.held.budget.as_deref().unwrap_or("?");
                    warn!(node = %f.node, pod = %f.held.pod.name, namespace = %f.held.pod.namespace, budget, grace = f.grace_seconds, "deleted a pod its budget still refused: the interruption deadline is near");
                    self.ctx.metrics.drainer.pdb_overridden(f.group.as_str());
                    self.displaced(f.held.pod.uid.as_str(), f.held.pod.owner.as_ref(), &f.group, now);
                    tells.push(NodeEvent::pdb_overridden(&f, f.deadline.since(now)));
                }
                Err(e) => {
                    warn!(node = %f.node, pod = %f.held.pod.name, error = %e, "could not delete a held pod at its deadline; tried again next pass");
                    self.drains.unforce(&f.node, &f.held.pod.uid);
                }
            }
        }
        crate::workers::publish_all(&self.ctx.events, tells).await;
    }

    /// Waits at most half a tick for the evictions this pass sent (the rest are answered beside
    /// the next passes, see [`EvictionsInFlight`]) and folds in every answer that came.
    pub(super) async fn await_evictions(&mut self, sent: HashSet<Id>, now: Timestamp, report: &mut DrainReport) {
        if sent.is_empty() {
            return;
        }
        let answers = self.evictions.answered_by(sent, tokio::time::Instant::now() + self.settings.tick / 2).await;
        self.fold_evictions(answers, now, report).await;
    }

    /// Folds eviction answers into the drains, node by node, and tells the first refusal of each.
    pub(super) async fn fold_evictions(
        &mut self,
        answers: Vec<EvictionAnswer>,
        now: Timestamp,
        report: &mut DrainReport,
    ) {
        if answers.is_empty() {
            return;
        }
        let mut by_node: BTreeMap<NodeName, (GroupName, Vec<EvictionResultOf>)> = BTreeMap::new();
        for a in answers {
            by_node.entry(a.node).or_insert_with(|| (a.group, Vec::new())).1.push((a.pod, a.outcome));
        }
        let mut tells = Vec::new();
        for (node, (group, results)) in by_node {
            if let Some(event) = self.settle_round(&node, &group, &results, now, report) {
                tells.push(event);
            }
        }
        crate::workers::publish_all(&self.ctx.events, tells).await;
    }

    /// Reads the live pods of the nodes whose drains look done, concurrently, each within the
    /// eviction call's deadline, and folds them in for the next pass. A read that fails or does not
    /// answer leaves its drain open. When some node was found empty, the next pass comes at once:
    /// it ends that drain while the read is fresh.
    pub(super) async fn read_live_pods(&mut self, nodes: &[NodeName]) {
        if nodes.is_empty() {
            return;
        }
        let writes = &self.ctx.writes;
        let deadline = self.settings.eviction_call_timeout;
        let calls: Vec<_> = nodes.iter().map(|node| read_within(writes, deadline, node.clone())).collect();
        let reads: Vec<(NodeName, Result<Vec<Pod>, String>)> =
            stream::iter(calls).buffer_unordered(self.settings.evictions_in_flight.max(1)).collect().await;
        for (node, read) in reads {
            match read {
                Ok(pods) => self.pass_again |= self.drains.record_live_read(&node, pods),
                Err(e) => {
                    warn!(%node, error = %e, "could not read the pods of a drained node; it is not terminated until a read shows it empty")
                }
            }
        }
    }

    /// Books one node's eviction outcomes: metrics, and the core's progress and backoff. Returns
    /// the `DrainBlockedByPDB` Event when this is the drain's first refusal.
    pub(super) fn settle_round(
        &mut self,
        node: &NodeName,
        group: &GroupName,
        results: &[EvictionResultOf],
        now: Timestamp,
        report: &mut DrainReport,
    ) -> Option<NodeEvent> {
        let mut blocked = Vec::new();
        let mut folded = Vec::new();
        for (pod, outcome) in results {
            let (label, result) = match outcome {
                Ok(Made::Done) => (EvictionOutcome::Evicted, EvictionResult::Evicted),
                Ok(Made::Gone) => (EvictionOutcome::Gone, EvictionResult::Gone),
                Ok(Made::Refused { budget }) => {
                    (EvictionOutcome::BlockedByPdb, EvictionResult::Blocked { budget: budget.clone() })
                }
                Ok(other) => {
                    warn!(pod = %pod, answer = ?other, "an eviction answered as no eviction does; retried next round");
                    (EvictionOutcome::Failed, EvictionResult::Failed)
                }
                Err(e) => {
                    warn!(pod = %pod, error = %e, "eviction failed; retried next round");
                    (EvictionOutcome::Failed, EvictionResult::Failed)
                }
            };
            self.ctx.metrics.drainer.eviction(group.as_str(), label);
            if let Ok(Made::Done) = outcome {
                self.displaced(&pod.uid, pod.owner.as_ref(), group, now);
            }
            match result {
                EvictionResult::Evicted | EvictionResult::Gone => report.evicted = report.evicted.saturating_add(1),
                EvictionResult::Blocked { .. } => blocked.push(pod.to_string()),
                EvictionResult::Failed => {}
            }
            folded.push((pod.uid.as_str(), result));
        }
        if !self.drains.in_progress.contains_key(node) {
            // Its drain ended while the calls ran (the node went, or its deadline came).
            return None;
        }
        let refusal = self.drains.record_round(node, folded, &self.ctx.policy, now)?;
        report.blocked = report.blocked.saturating_add(u32::try_from(blocked.len()).unwrap_or(u32::MAX));
        if !refusal.first {
            return None;
        }
        info!(%node, blocked = blocked.len(), "evictions blocked by PDB");
        Some(NodeEvent::drain_blocked_by_pdb(node, &blocked, refusal.wait, refusal.moved))
    }
}

/// One call with a deadline: its answer, or its error or how long it went unanswered, as text.
pub(super) async fn within<T, E: std::fmt::Display>(
    deadline: Duration,
    call: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, String> {
    match tokio::time::timeout(deadline, call).await {
        Ok(answer) => answer.map_err(|e| e.to_string()),
        Err(_) => Err(format!("no answer within {}s", deadline.as_secs())),
    }
}

impl<P: Ports> Drainer<P> {
    /// Records a pod this drainer evicted, deleted or left to its instance's end, when a
    /// controller will replace it.
    pub(super) fn displaced(&mut self, pod: &str, owner: Option<&OwnerUid>, group: &GroupName, at: Timestamp) {
        let Some(owner) = owner else { return };
        if !self.gap.displaced(Displaced::evicted(pod.into(), owner.clone(), group.clone(), at)) {
            debug!(%group, "the capacity gap meter is full; a displaced pod is not counted");
        }
    }

    /// Counts the Pending time of the displaced pods' replacements into
    /// `capacity_gap_pod_seconds_total`.
    pub(super) fn measure_gap(&mut self) {
        // The leader's count alone: replicas summed would count each pod once per replica.
        if !self.ctx.leadership.is_leader() || (self.gap.waiting() == 0 && !self.gap.replacing()) {
            return;
        }
        let now = (self.ctx.clock)();
        for (group, seconds) in self.gap.measure(&self.ctx.cluster.pending_pods(), now) {
            self.ctx.metrics.market.capacity_gap(group.as_str(), seconds);
        }
    }
}
