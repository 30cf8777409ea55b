//! What the leader's scaler pass learns of the spot market: the pass's trusted recommendations
//! and confirmed interruptions go into pool memory (saved beside the ledger), the groups'
//! conversion estimates into the metrics, and the capacity its open boosts hold into boost
//! node-seconds.

use std::collections::BTreeMap;
use std::time::Duration;

use tracing::{info, warn};

use super::Scaler;
use crate::core::pool_memory::conversion;
use crate::core::{
    Forgotten, GroupName, LedgerEdit, Pool, Readmits, RebalanceChoice, Sighting, Snapshot, Timestamp, Write,
};
use crate::ports::NodeEvent;
use crate::workers::{publish_all, Ports};

/// Pool memory is saved at most this often (what a crash loses at most).
pub(crate) const POOLS_SAVE_EVERY: Duration = Duration::from_secs(30);

impl<P: Ports> Scaler<P> {
    /// Learns what the pass `seen` (leader only), reports the estimates when they moved and how
    /// the boosts opened answered their recommendations, and saves the memory when due.
    pub(super) async fn learn_market(
        &mut self,
        snapshot: &Snapshot,
        seen: &[Sighting],
        choices: &[RebalanceChoice],
        now: Timestamp,
    ) {
        let ctx = self.ctx.clone();
        let live = snapshot.live_instances();
        let is_live = |i: &crate::core::InstanceId| live.contains(i);
        let learned = ctx.ledger.learn(seen, &is_live, &ctx.policy.memory, now).await;
        ctx.metrics.market.learned(&learned);
        for (pool, lead) in &learned.converted {
            info!(group = %pool.group, instance_type = %pool.instance_type, zone = %pool.zone,
                lead_s = lead.as_secs(), "a rebalance recommendation was followed by its interruption");
        }
        if !learned.is_empty() || !self.conversions_reported {
            let memory = ctx.ledger.pools().await;
            let histories = memory.histories(&ctx.policy.memory, now);
            let all = std::collections::BTreeSet::<Pool>::new();
            for group in memory.groups() {
                ctx.metrics.market.conversion(group.as_str(), &conversion(&histories, group, &all));
            }
            self.conversions_reported = true;
        }
        if !choices.is_empty() {
            // Told once, by the pass whose boost opened: a boost held back is planned again.
            let ledger = ctx.ledger.current().await;
            let opened = |c: &RebalanceChoice| {
                ledger
                    .records
                    .iter()
                    .any(|r| r.group == c.group && r.at == now && c.instances.iter().all(|i| r.instances.contains(i)))
            };
            for choice in choices.iter().filter(|c| opened(c)) {
                ctx.metrics.market.answered(choice.group.as_str(), choice.answer(), choice.why.as_str());
                info!(group = %choice.group, policy = choice.policy.as_str(), answer = choice.answer(),
                    until_ms = ?choice.standby_until.map(|t| t.as_millis()), instances = ?choice.instances,
                    why = %choice.why, "rebalance recommendation answered");
            }
        }
        self.count_boost_node_seconds(snapshot, now);
        // Not a ledger error: boosting goes on without it, and the memory is tried again.
        if let Err(e) = ctx.ledger.save_pools_due(now, POOLS_SAVE_EVERY).await {
            warn!(error = %e, cause = ?std::error::Error::source(&e), "pool memory not saved; kept for the next pass");
        }
    }

    /// Makes the nodes whose recommendation lapsed schedulable again where the cordon is the
    /// recommendation's (the lapse saved first, so a failure here leaves a cordoned node that the
    /// next pass tries again, never a lapse forgotten), and tells where it is someone else's.
    pub(super) async fn readmit(&self, readmits: &Readmits) {
        let mut done = Vec::new();
        for (node, instance) in &readmits.uncordon {
            match self.ctx.executor().run(&Write::Uncordon(node.clone())).await {
                Ok(_) => {
                    info!(%node, "rebalance recommendation lapsed with no interruption: node schedulable again");
                    done.push(instance.clone());
                }
                Err(e) => {
                    warn!(%node, error = %e, "could not make the node schedulable again after its recommendation lapsed; tried again next pass")
                }
            }
        }
        if !done.is_empty() {
            let edit = LedgerEdit::Forget(Forgotten::Uncordons(done));
            if let Err(e) = self.ctx.executor().save(&[edit]).await {
                warn!(error = %e, "could not record the uncordons; the next pass makes them again");
            }
        }
        let kept: Vec<NodeEvent> = readmits.kept.iter().map(NodeEvent::cordon_kept).collect();
        for node in &readmits.kept {
            info!(%node, "rebalance recommendation lapsed on a node cordoned before it: the cordon stays");
        }
        publish_all(&self.ctx.events, kept).await;
    }

    /// Adds, per group, the nodes its open boosts added and have not given back, times the time
    /// since the last pass that counted.
    fn count_boost_node_seconds(&mut self, snapshot: &Snapshot, now: Timestamp) {
        let since = self.market_counted_at.replace(now);
        let Some(since) = since else { return };
        let seconds = now.since(since).as_secs_f64();
        let mut held: BTreeMap<&GroupName, u32> = BTreeMap::new();
        for r in snapshot.ledger.records.iter().filter(|r| r.raising_to.is_none()) {
            *held.entry(&r.group).or_default() += r.added.saturating_sub(r.returned);
        }
        for (group, nodes) in held {
            self.ctx.metrics.market.boost_node_seconds(group.as_str(), f64::from(nodes) * seconds);
        }
    }
}
