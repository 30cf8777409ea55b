//! Starting drains: the cordons (all at once, each within its deadline), the opt-outs told
//! once, and the scale-down protection of the replacements the drains wait for.

use super::*;

/// One drain target's cordon with a deadline, handed back with the target.
pub(super) async fn cordon_within<'t, P: Ports>(
    ctx: &WorkerContext<P>,
    deadline: Duration,
    group: &'t GroupName,
    target: &'t DrainTarget,
) -> (&'t GroupName, &'t DrainTarget, Answer) {
    let outcome = ctx.executor().within(deadline).run(&Write::Cordon(target.node.clone())).await;
    (group, target, outcome)
}

impl<P: Ports> Drainer<P> {
    /// Tells once per node that a pod's opt-out holds its voluntary drain back.
    pub(super) async fn tell_opted_out(&mut self, plan: &BatchPlan) {
        let mut waiting = HashSet::new();
        for w in &plan.waiting {
            let (DrainWait::OptedOut { node, .. } | DrainWait::BarePod { node, .. }) = &w.reason else { continue };
            waiting.insert(node.clone());
            if self.told_opted_out.first(node.clone(), ()) {
                info!(%node, group = %w.group, reason = %w.reason, "drain deferred");
                self.publish(NodeEvent::drain_deferred(node, &w.reason)).await;
            }
        }
        self.told_opted_out.keep(|n| waiting.contains(n));
    }

    /// Before the first eviction: says which opt-outs a confirmed interruption overrides and
    /// which pods nothing will recreate.
    pub(super) fn before_evicting(node: &Node) -> Vec<NodeEvent> {
        let evictable: Vec<&Pod> = node.pods.iter().filter(|p| p.class.is_evictable()).collect();
        let opted: Vec<&Pod> = evictable.iter().copied().filter(|p| p.opt_out.is_some()).collect();
        let bare: Vec<&Pod> = evictable.iter().copied().filter(|p| p.bare).collect();
        let mut tells = Vec::new();
        if !opted.is_empty() {
            tells.push(NodeEvent::opt_out_overridden(&node.name, &opted));
        }
        if !bare.is_empty() {
            tells.push(NodeEvent::bare_pods_evicted(&node.name, &bare));
        }
        tells
    }

    /// Replacement nodes keep Cluster Autoscaler's scale-down protection while their boost is
    /// open. The ledger records each protection before its patch and forgets it once lifted: the
    /// booster lifts only its own, whatever marker a Node carries.
    pub(super) async fn protect_replacements(&self, plan: &DrainingPlan) {
        if !plan.protect.is_empty() {
            let recorded = self
                .ctx
                .executor()
                .save(&plan.protect.iter().map(|n| LedgerEdit::Protection(n.clone(), true)).collect::<Vec<_>>())
                .await;
            if let Err(e) = recorded {
                warn!(error = %e, "could not record the scale-down protection of replacement nodes; retried next pass");
            } else {
                for node in &plan.protect {
                    if let Err(e) = self.ctx.executor().run(&Write::Protect(node.clone())).await {
                        warn!(%node, error = %e, "could not protect a replacement node from scale-down");
                    }
                }
            }
        }
        let mut lifted = Vec::new();
        for node in &plan.unprotect {
            match self.ctx.executor().run(&Write::Unprotect(node.clone())).await {
                Ok(_) => lifted.push(node.clone()),
                Err(e) => warn!(%node, error = %e, "could not lift the scale-down protection of a node"),
            }
        }
        if !lifted.is_empty() {
            let forgotten = self
                .ctx
                .executor()
                .save(&lifted.into_iter().map(|n| LedgerEdit::Protection(n, false)).collect::<Vec<_>>())
                .await;
            if let Err(e) = forgotten {
                warn!(error = %e, "could not record lifted scale-down protections; lifted again next pass");
            }
        }
    }

    /// Starts the planned batches: cordons where needed. Returns the targets it could not start
    /// (their cordon failed: the gate fails it once the lease is gone), and the Events of those
    /// that did, published as their first evictions go. Every node's cordon is one call with a
    /// deadline, all at once (within the in-flight bound): a storm's drains start together, not
    /// one round trip after another, and each node's evictions are sent as soon as its own cordon
    /// lands (in their places in the pass's sequence), not once every node's has.
    pub(super) async fn start_batches(
        &mut self,
        plan: &BatchPlan,
        snapshot: &Snapshot,
        sequenced: &mut Sequenced,
        report: &mut DrainReport,
    ) -> (Vec<NodeName>, Vec<NodeEvent>) {
        let ctx = &*self.ctx;
        let deadline = self.settings.eviction_call_timeout;
        let mut cordons = Vec::new();
        for batch in &plan.batches {
            // Also out of load balancers, NTH's cordon or not: traffic stops before pods go.
            cordons.extend(batch.nodes.iter().map(|target| cordon_within(ctx, deadline, &batch.group, target)));
        }
        let mut cordoned = stream::iter(cordons).buffer_unordered(self.settings.evictions_in_flight.max(1));
        let (mut not_started, mut tells) = (Vec::new(), Vec::new());
        while let Some((group, target, cordon)) = cordoned.next().await {
            match cordon {
                Err(e) if target.cordon => {
                    warn!(node = %target.node, error = %e, "cordon failed; the drain waits for the next plan");
                    not_started.push(target.node.clone());
                    continue;
                }
                Err(e) => {
                    warn!(node = %target.node, error = %e, "could not exclude the cordoned node from load balancers; draining it anyway")
                }
                Ok(_) => {}
            }
            sequenced.send(&mut self.evictions, &self.ctx, deadline, &target.node);
            let pods = snapshot.nodes.get(&target.node).map_or(0, |n| eviction_order(n).len());
            info!(node = %target.node, %group, pods, "drain started");
            if let Some(node) = snapshot.nodes.get(&target.node) {
                tells.extend(Self::before_evicting(node));
            }
            if target.early {
                info!(node = %target.node, %group, "draining before the replacements are Ready: the notice's deadline is near");
            }
            tells.push(NodeEvent::drain_started(target, group, pods));
            let outcome = if target.early { DrainOutcome::StartedBeforeReplacements } else { DrainOutcome::Started };
            self.ctx.metrics.drainer.drain(group.as_str(), outcome, None);
            report.started.push(target.node.clone());
        }
        (not_started, tells)
    }

    /// Cordons nodes with a confirmed notice that wait for their replacements: nothing new lands
    /// on them meanwhile, whether or not NTH got to them.
    pub(super) async fn cordon_ahead(&self, nodes: &[NodeName]) {
        for node in nodes {
            match self.ctx.executor().run(&Write::Cordon(node.clone())).await {
                Ok(_) => info!(%node, "cordoned ahead of its drain: a confirmed notice, not cordoned yet"),
                Err(e) => {
                    warn!(%node, error = %e, "could not cordon a node with a confirmed notice; tried again next pass")
                }
            }
        }
    }
}
