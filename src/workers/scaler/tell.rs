//! What the scaler tells: the metrics of what it sees (group sizes, open boosts, signals, signals
//! dropped or not believed) and the Events of what the core decided and it could not do (boosts
//! held, fallbacks refused), each once while it lasts.

use std::collections::{BTreeMap, BTreeSet};

use tracing::{info, warn};

use super::{Scaler, TickReport};
use crate::core::{
    AtRiskSet, BackToSpotPlan, BoostLedger, DropReason, GiveBackHow, GroupName, InstanceId, RefusedFallback,
    ReturnedToSpot, ScalingPlan, Snapshot, Timestamp,
};
use crate::metrics::{BoostOutcome, GiveBackOutcome, SkippedAction};
use crate::ports::{EventSink, NodeEvent};
use crate::workers::{publish_all, Ports};

impl<P: Ports> Scaler<P> {
    /// A follower's pass ends at the plan: it reports what the leader would write and leaves it
    /// to the leader (its ports would drop the writes anyway).
    /// Reports what the pass sees: only the leader, which acts on it. With two replicas, sums and
    /// rates of the followers' copies would double every group's numbers.
    pub(super) fn report_view(&mut self, leading: bool, snapshot: &Snapshot, now: Timestamp) {
        let metrics = self.ctx.metrics.clone();
        if leading {
            self.export_sizes(&snapshot.groups, &snapshot.ledger, now);
            self.count_signals(snapshot);
            metrics.signals.opted_out_nodes(snapshot.nodes.values().filter(|n| n.opted_out).count());
        } else {
            metrics.scaler.forget_group_sizes();
            metrics.signals.opted_out_nodes(0);
        }
    }

    pub(super) fn follow(&self, plan: &ScalingPlan) -> TickReport {
        let m = &self.ctx.metrics;
        for g in plan.give_backs.iter().filter(|g| matches!(g.how, GiveBackHow::Drain(_))) {
            m.scaler.give_back(g.group.as_str(), GiveBackOutcome::NotLeader);
        }
        for boost in &plan.boosts.boosts {
            m.scaler.boost(boost.group.as_str(), BoostOutcome::NotLeader);
            m.lease.not_leader(SkippedAction::SetDesiredCapacity);
        }
        TickReport {
            held: plan.boosts.held.iter().map(|h| h.instances.len()).sum(),
            not_leader: plan.boosts.boosts.len(),
            ..TickReport::default()
        }
    }

    pub(super) fn export_sizes(
        &self,
        groups: &BTreeMap<GroupName, crate::core::Group>,
        ledger: &BoostLedger,
        now: Timestamp,
    ) {
        let m = &self.ctx.metrics.scaler;
        // Per group: nodes added and not given back, and the oldest open boost's age.
        let mut open: BTreeMap<&str, (i64, i64)> = groups.keys().map(|g| (g.as_str(), (0, 0))).collect();
        for r in ledger.records.iter().filter(|r| r.expired.is_none()) {
            let (in_flight, oldest) = open.entry(r.group.as_str()).or_default();
            *in_flight += i64::from(r.added.saturating_sub(r.returned));
            *oldest = (*oldest).max(i64::try_from(now.since(r.at).as_secs()).unwrap_or(i64::MAX));
        }
        for (name, g) in groups {
            m.group_size(name.as_str(), g.desired, g.max);
        }
        for (group, (in_flight, oldest)) in open {
            m.open_boosts(group, in_flight, oldest);
        }
        let mut on_fallback: BTreeMap<&str, u32> = BTreeMap::new();
        for f in &ledger.on_fallback {
            let nodes = on_fallback.entry(f.group.as_str()).or_default();
            *nodes = nodes.saturating_add(f.nodes);
        }
        m.on_fallback(&on_fallback);
    }

    /// Tells the returns the pass began, abandoned and ended, once the ledger holds them.
    pub(super) async fn tell_back_to_spot(&self, plan: &BackToSpotPlan, ended: &[ReturnedToSpot], now: Timestamp) {
        let ctx = &self.ctx;
        for b in &plan.begun {
            let r = &b.returning;
            if r.surplus {
                info!(node = %r.node, instance = %b.instance, home = %r.home, fallback = %r.from, "a fallback node returns to its own group, which launches again and relaunched its own size: drained onto it, nothing raised");
            } else {
                info!(node = %r.node, instance = %b.instance, home = %r.home, fallback = %r.from, "a fallback node returns to its own group, which launches again: replaced there first, then drained");
            }
            ctx.events.publish(NodeEvent::returning_to_spot(&r.node, r)).await;
        }
        for instance in &plan.abandoned {
            info!(%instance, "a return to the node's own group is abandoned: its boost was held or expired; it stays on the fallback for a later try");
        }
        for r in ended {
            info!(home = %r.home, fallback = %r.from, nodes = r.nodes, "fallback capacity returned to its own group");
            ctx.metrics.scaler.returned_to_spot(r.home.as_str(), r.nodes, now.since(r.since));
        }
    }

    /// Counts each signal once, under its node's group.
    pub(super) fn count_signals(&mut self, snapshot: &Snapshot) {
        let live: BTreeSet<(InstanceId, &'static str)> =
            snapshot.signals.iter().map(|s| (s.instance.clone(), s.kind.as_str())).collect();
        for s in &snapshot.signals {
            if self.counted.contains(&(s.instance.clone(), s.kind.as_str())) {
                continue;
            }
            let group = snapshot.nodes.get(&s.node).and_then(|n| n.group.as_ref()).map_or("unknown", |g| g.as_str());
            if group == "unknown" {
                // Counted once the group is known, at a later tick.
                continue;
            }
            self.ctx.metrics.signals.seen(group, s.kind);
            self.counted.insert((s.instance.clone(), s.kind.as_str()));
        }
        self.counted.retain(|k| live.contains(k));
    }

    /// Counts each instance whose signals made it no risk once per reason (`signals_dropped_total`),
    /// and those whose Events are not believed also by why (`signals_untrusted_total`), saying so.
    pub(super) fn count_untrusted(&mut self, at_risk: &AtRiskSet) {
        let mut live = BTreeSet::new();
        for d in &at_risk.dropped {
            live.insert((d.instance.clone(), d.reason.as_str()));
            if !self.untrusted.insert((d.instance.clone(), d.reason.as_str())) {
                continue;
            }
            self.ctx.metrics.signals.dropped(&d.reason);
            if d.reason == DropReason::EksManaged {
                info!(instance = %d.instance, "left to EKS: its managed node group replaces and drains the node itself");
            }
            if let DropReason::Untrusted(why) = d.reason {
                self.ctx.metrics.signals.untrusted(why);
                info!(instance = %d.instance, reason = why.as_str(), "an Event's interruption notice is not believed yet");
            }
        }
        self.untrusted.retain(|k| live.contains(k));
    }

    pub(super) fn nodes_of<'s>(snapshot: &'s Snapshot, instances: &[&InstanceId]) -> Vec<&'s crate::core::Node> {
        snapshot.nodes.values().filter(|n| n.instance.as_ref().is_some_and(|i| instances.contains(&i))).collect()
    }

    /// Reports each fallback the core refused (metric and a Warning on the boost's at-risk nodes),
    /// once while the refusal lasts: the boost waits as if the tag did not name the group.
    pub(super) async fn tell_refused_fallbacks(&mut self, snapshot: &Snapshot, refused: &[RefusedFallback]) {
        let mut told = Vec::new();
        for r in refused {
            if !self.told_refused.first((r.record.group.clone(), r.to.clone()), ()) {
                continue;
            }
            warn!(group = %r.record.group, fallback = %r.to, reason = r.reason.as_str(), "a fallback the group's tag names is refused");
            self.ctx.metrics.scaler.fallback_refused(r.record.group.as_str(), r.reason);
            let instances: Vec<&InstanceId> = r.record.instances.iter().collect();
            told.extend(
                Self::nodes_of(snapshot, &instances).into_iter().map(|n| NodeEvent::fallback_refused(&n.name, r)),
            );
        }
        self.told_refused.keep(|(from, to)| refused.iter().any(|r| r.record.group == *from && r.to == *to));
        publish_all(&self.ctx.events, told).await;
    }

    pub(super) async fn tell_held(&mut self, snapshot: &Snapshot, held: &[crate::core::Held]) {
        let mut told = Vec::new();
        for h in held {
            let instances: Vec<&InstanceId> = h.instances.iter().collect();
            for node in Self::nodes_of(snapshot, &instances) {
                let Some(instance) = node.instance.clone() else { continue };
                let event = NodeEvent::boost_held(&node.name, h);
                // Told again when the reason changes.
                if !self.told_held.first(instance, event.note.clone()) {
                    continue;
                }
                self.ctx.metrics.scaler.boost(h.group.as_str(), BoostOutcome::Held);
                told.push(event);
            }
        }
        let still: BTreeSet<&InstanceId> = held.iter().flat_map(|h| h.instances.iter()).collect();
        self.told_held.keep(|i| still.contains(i));
        publish_all(&self.ctx.events, told).await;
    }
}
