//! What the scaler carries out besides boost writes, each decided by the core: give-backs and
//! expiries noted in the ledger, fallback moves and take-backs written to AWS behind a saved
//! intent, and boosts whose write's answer was lost resolved from a read of their groups.

use std::collections::{BTreeMap, BTreeSet};

use tracing::{debug, info, warn};

use super::guarded::{send_and_answer, Answered, Direction, LostAnswer};
use super::{Ports, Scaler, ScalerError, TickReport};
use crate::core::{
    plan_take_backs, resolve_raises, unresolved_groups, BoostExpiry, Exhausted, Expired, Fallback, GiveBack,
    GiveBackHow, GiveBackNode, GroupName, InstanceId, LedgerEdit, LeftWhy, ScalingPlan, Snapshot, TakeBack,
    WriteAnswer,
};
use crate::metrics::{BoostOutcome, GiveBackOutcome};
use crate::ports::{AutoScaling, DesiredWrite, EventSink, NodeEvent, WriteOutcome};

impl<P: Ports> Scaler<P> {
    /// Resolves the boosts whose write's outcome is unknown (see `core::raises`) from a fresh
    /// read of their groups. Until that read succeeds the tick writes nothing.
    pub(super) async fn resolve_unknown_raises(&self) -> Result<(), ScalerError> {
        let ctx = &self.ctx;
        let groups: Vec<GroupName> = unresolved_groups(&ctx.ledger.current().await).into_iter().collect();
        if groups.is_empty() {
            return Ok(());
        }
        for group in &groups {
            ctx.groups.invalidate(group).await;
        }
        let described = ctx.aws.describe_groups(&groups).await.map_err(ScalerError::ResolveRaises)?;
        let mut live = BTreeMap::new();
        for g in described {
            ctx.groups.note_desired(&g.name, g.desired).await;
            live.insert(g.name, g.desired);
        }
        let resolved = ctx.executor().save_decided(|l| resolve_raises(l, &live)).await?;
        for r in resolved {
            let (group, asked, kept) = (&r.group, r.asked, r.kept);
            match r.live {
                Some(live) if kept > 0 => {
                    warn!(%group, asked, live, kept, "a boost whose write's answer was lost is there: kept")
                }
                Some(live) => {
                    warn!(%group, asked, live, "a boost whose write's answer was lost never applied: planned again")
                }
                None => warn!(%group, asked, "a boost whose write's answer was lost was for a group that is gone"),
            }
        }
        Ok(())
    }

    /// Moves the nodes boosts miss in groups without capacity to their fallbacks: the move is
    /// saved on the boost's record (the fallback's write marked unconfirmed) before the guarded
    /// raise of the fallback, confirmed or undone after it ([`send_and_answer`]); then the failing
    /// group's desired capacity is lowered by what moved, if no instance can be terminated by that.
    pub(super) async fn fall_back(
        &self,
        snapshot: &Snapshot,
        moves: &[Fallback],
        report: &mut Vec<(GroupName, GroupName, u32)>,
    ) -> Result<(), ScalerError> {
        let ctx = &self.ctx;
        let now = (ctx.clock)();
        let moves: Vec<(&Fallback, LedgerEdit)> = moves.iter().map(|f| (f, f.moving(now))).collect();
        let edits: Vec<LedgerEdit> = moves.iter().map(|(_, m)| m.clone()).collect();
        let made = ctx.executor().save(&edits).await?;
        let (applied, intents): (Vec<&Fallback>, Vec<&LedgerEdit>) =
            moves.iter().zip(made).filter(|(_, made)| *made).map(|((f, m), _)| (*f, m)).unzip();
        if applied.is_empty() {
            return Ok(());
        }
        let writes: Vec<DesiredWrite> = applied
            .iter()
            .map(|f| DesiredWrite {
                group: f.to.clone(),
                expected: f.to_desired,
                to: f.to_desired.saturating_add(f.nodes),
            })
            .collect();
        let tell = |i: usize, a: &Answered| -> Vec<NodeEvent> {
            let (f, group) = (applied[i], &a.group);
            match (&a.outcome, a.answer) {
                (Ok(WriteOutcome::Written { from, to } | WriteOutcome::DryRun { from, to }), _) => {
                    let left = f.left.as_ref().map_or("", |g| g.as_str());
                    warn!(
                        boosted = %f.record.group, left, %group, nodes = f.nodes, from, to,
                        position = f.rank.position, failed_lately = f.rank.failed_lately,
                        interruptions = f.rank.interruptions,
                        "{}",
                        if f.left.is_some() {
                            "no capacity where the boost's nodes were asked for: they moved to the best-ranked group"
                        } else {
                            "parked nodes retried in the best-ranked group"
                        }
                    );
                    ctx.metrics.scaler.boost(group.as_str(), BoostOutcome::FellBack);
                    report.push((f.left.clone().unwrap_or_else(|| f.record.group.clone()), group.clone(), f.nodes));
                    let instances: Vec<&InstanceId> = f.record.instances.iter().collect();
                    let fell_back = |n: &crate::core::Node| NodeEvent::boost_fell_back(&n.name, f, (*from, *to));
                    Self::nodes_of(snapshot, &instances).into_iter().map(fell_back).collect()
                }
                // The next tick reads the fallback first (`core::raises`).
                (Err(e), WriteAnswer::Unknown) => {
                    warn!(%group, error = %e, "a fallback's write has an unknown outcome");
                    Vec::new()
                }
                (outcome, _) => {
                    warn!(%group, ?outcome, "a fallback's write was not made; planned again");
                    Vec::new()
                }
            }
        };
        send_and_answer(ctx, (&intents, &writes), (Direction::Raise, LostAnswer::ResolveNextPass), tell).await?;
        Ok(())
    }

    /// Parks the nodes every group a boost may use failed to launch: saved on its record (no
    /// write: the take-backs that follow lower the groups they left), then told on its at-risk
    /// nodes with every group tried.
    pub(super) async fn park(&self, snapshot: &Snapshot, exhausted: &[Exhausted]) -> Result<(), ScalerError> {
        let ctx = &self.ctx;
        let now = (ctx.clock)();
        let parkings: Vec<LedgerEdit> = exhausted.iter().map(|e| e.parking(now)).collect();
        let made = ctx.executor().save(&parkings).await?;
        for (e, _) in exhausted.iter().zip(made).filter(|(_, made)| *made) {
            let group = &e.record.group;
            let tried = e.tried.iter().map(|g| g.as_str()).collect::<Vec<_>>().join(",");
            let retry_in = e.retry_at.since(now);
            warn!(
                %group, nodes = e.nodes, %tried, retry_in_secs = retry_in.as_secs(),
                "no group the boost may use could launch its nodes: parked, their desired capacity taken back, retried later"
            );
            ctx.metrics.scaler.boost(group.as_str(), BoostOutcome::FallbackExhausted);
            let instances: Vec<&InstanceId> = e.record.instances.iter().collect();
            for node in Self::nodes_of(snapshot, &instances) {
                ctx.events.publish(NodeEvent::fallback_exhausted(&node.name, e, retry_in)).await;
            }
        }
        Ok(())
    }

    /// Lowers boosts' own groups by the nodes that moved to a fallback and will never launch
    /// there: the intent is saved before the guarded write (sent only while the group lists no
    /// more instances than the lowered value) and the outcome after ([`send_and_answer`]), so a
    /// group is never lowered twice for the same nodes. The core plans them on the ledger as
    /// the moves were answered: a move AWS refused is taken back, never lowered for.
    pub(super) async fn take_back_unlaunched(&self, snapshot: &Snapshot) -> Result<(), ScalerError> {
        let ctx = &self.ctx;
        let plan = plan_take_backs(snapshot, &ctx.ledger.current().await);
        if plan.is_empty() {
            return Ok(());
        }
        let writes: Vec<DesiredWrite> =
            plan.iter().map(|t| DesiredWrite { group: t.group.clone(), expected: t.from, to: t.to() }).collect();
        let intents: Vec<LedgerEdit> = plan.iter().map(TakeBack::lowering).collect();
        ctx.executor().save(&intents).await?;
        let intents: Vec<&LedgerEdit> = intents.iter().collect();
        let tell = |i: usize, a: &Answered| -> Vec<NodeEvent> {
            let group = &a.group;
            match (&a.outcome, a.answer) {
                (Ok(WriteOutcome::Written { to, .. } | WriteOutcome::DryRun { to, .. }), _) => {
                    info!(%group, nodes = plan[i].nodes, to, "desired capacity lowered by the nodes it could not launch");
                }
                // The next tick reads the group first (`core::raises`).
                (Err(e), WriteAnswer::Unknown) => warn!(%group, error = %e, "lowering a group has an unknown outcome"),
                (outcome, _) => {
                    debug!(%group, ?outcome, "desired capacity left as it is: an instance could be terminated by lowering it, or it changed");
                }
            }
            Vec::new()
        };
        send_and_answer(ctx, (&intents, &writes), (Direction::LowerUnlaunched, LostAnswer::ResolveNextPass), tell)
            .await?;
        Ok(())
    }

    /// Gives back boosted nodes whose at-risk instance AWS took first. Nothing lowers desired
    /// capacity here: the node chosen for each is recorded in the ledger and the drainer cordons,
    /// drains and terminates it with decrement; an instance with nothing to give back is settled.
    pub(super) async fn give_back(&self, plan: &[GiveBack]) -> Result<(), ScalerError> {
        let ctx = &self.ctx;
        ctx.executor().save(&plan.iter().map(GiveBack::edit).collect::<Vec<_>>()).await?;
        for g in plan {
            let (group, reclaimed) = (&g.group, &g.reclaimed);
            match &g.how {
                GiveBackHow::Drain(GiveBackNode { node: Some(node), .. }) => {
                    info!(%group, %reclaimed, %node, "AWS took a boosted at-risk instance first; draining a node to give its capacity back");
                    ctx.metrics.scaler.give_back(group.as_str(), GiveBackOutcome::NodeChosen);
                }
                GiveBackHow::Drain(GiveBackNode { node: None, instance, .. }) => {
                    info!(%group, %reclaimed, %instance, "AWS took a boosted at-risk instance first; giving its capacity back by terminating the group's newest instance before it joins");
                    ctx.metrics.scaler.give_back(group.as_str(), GiveBackOutcome::NodeChosen);
                }
                GiveBackHow::AtFloor => {
                    info!(%group, %reclaimed, "reclaimed instance settled; the group has nothing more to give back");
                    ctx.metrics.scaler.give_back(group.as_str(), GiveBackOutcome::AtFloor);
                }
                GiveBackHow::LeftToClusterAutoscaler { why: LeftWhy::NoNodeInTime } => {
                    warn!(%group, %reclaimed, "no node of the group could be drained to give back the capacity boosted for an instance AWS took first; left to Cluster Autoscaler");
                    ctx.metrics.scaler.give_back(group.as_str(), GiveBackOutcome::LeftToClusterAutoscaler);
                }
                GiveBackHow::LeftToClusterAutoscaler { why: LeftWhy::PodsProtected { node, pods } } => {
                    let pods = pods.join(", ");
                    warn!(%group, %reclaimed, %node, %pods, "every node that could give back the capacity boosted for an instance AWS took first carries a pod that opted out of disruption or that nothing recreates; left to Cluster Autoscaler");
                    ctx.metrics.scaler.give_back(group.as_str(), GiveBackOutcome::LeftToClusterAutoscaler);
                    ctx.events.publish(NodeEvent::give_back_pods_protected(node, group, reclaimed, &pods)).await;
                }
            }
        }
        Ok(())
    }

    /// Marks boosts that stopped waiting in the ledger, then tells each of their nodes why and
    /// what is left as it was.
    pub(super) async fn expire(&self, snapshot: &Snapshot, expired: &[Expired]) -> Result<(), ScalerError> {
        self.ctx.executor().save(&expired.iter().map(Expired::edit).collect::<Vec<_>>()).await?;
        for e in expired {
            self.ctx.metrics.scaler.boost(
                e.record.group.as_str(),
                match e.why {
                    BoostExpiry::ReplacementTimeout => BoostOutcome::ExpiredReplacementTimeout,
                    BoostExpiry::DrainDeferred => BoostOutcome::ExpiredDrainDeferred,
                    BoostExpiry::MaxAge => BoostOutcome::ExpiredMaxAge,
                },
            );
            warn!(group = %e.record.group, instances = e.record.instances.len(), reason = e.why.as_str(), "boost expired");
            let ids: Vec<&InstanceId> = e.record.instances.iter().collect();
            for node in Self::nodes_of(snapshot, &ids) {
                self.ctx.events.publish(NodeEvent::boost_expired(&node.name, &e.record.group, e)).await;
            }
        }
        Ok(())
    }
}

impl<P: Ports> Scaler<P> {
    /// Carries out the plan's give-backs, expiries and fallback moves, then the take-backs they
    /// allow, and tells what the plan holds or refuses. The take-backs are planned by the core on
    /// the ledger as AWS answered the moves: a move AWS refused is taken back, never lowered for.
    pub(super) async fn carry_out_ledger_changes(
        &mut self,
        snapshot: &Snapshot,
        plan: &ScalingPlan,
        flying: &BTreeSet<GroupName>,
    ) -> Result<TickReport, ScalerError> {
        let mut report =
            TickReport { held: plan.boosts.held.iter().map(|h| h.instances.len()).sum(), ..TickReport::default() };
        if !plan.give_backs.is_empty() {
            self.give_back(&plan.give_backs).await?;
        }
        if !plan.expired.is_empty() {
            self.expire(snapshot, &plan.expired).await?;
        }
        if !plan.fallbacks.is_empty() {
            self.fall_back(snapshot, &plan.fallbacks, &mut report.fell_back).await?;
        }
        if !plan.exhausted.is_empty() {
            self.park(snapshot, &plan.exhausted).await?;
        }
        if flying.is_empty() {
            self.take_back_unlaunched(snapshot).await?;
        }
        self.tell_held(snapshot, &plan.boosts.held).await;
        self.tell_refused_fallbacks(snapshot, &plan.refused_fallbacks).await;
        Ok(report)
    }

    /// Whether the pass may go on: a leader first resolves the boosts whose write's answer was
    /// lost by a read; those other than the flights' wait until the flights land (each wakes
    /// the loop).
    pub(super) async fn unknown_outcomes_resolved(
        &self,
        leading: bool,
        flying: &BTreeSet<GroupName>,
    ) -> Result<bool, ScalerError> {
        if leading && flying.is_empty() {
            self.resolve_unknown_raises().await?;
        } else if leading && !unresolved_groups(&self.ctx.ledger.current().await).is_subset(flying) {
            return Ok(false);
        }
        Ok(true)
    }
}
