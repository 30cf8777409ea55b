//! The two actors every simulated cluster has besides AWS: AWS Node Termination Handler and
//! Cluster Autoscaler, modelled from their documented behaviour (shared/reference).

use std::collections::BTreeMap;

use super::scenario::{SpotEvent, SpotEventKind, Targets};
use super::world::{Eviction, World};
use crate::core::{Evidence, Policy, Resources, Signal, SignalKind, SizingMode, Timestamp};

/// NTH: on a rebalance recommendation it emits the Event and cordons (and, as NTH's queue mode
/// or `enableRebalanceDraining` do, drains when deployed without the booster); on a spot
/// interruption notice it emits and cordons, and drains unless set up for the booster to cordon
/// only (`cluster.nth-mode`): without the booster, NTH always drains the notices it gets. The
/// instance ends after the notice.
#[derive(Debug)]
pub(crate) struct Nth {
    drain_on_rebalance: bool,
    drains: BTreeMap<String, NthDrain>,
}

#[derive(Debug)]
struct NthDrain {
    started: Timestamp,
    next_try: Timestamp,
}

impl Nth {
    /// NTH as set up for the booster (`without_booster: false`: cordon only on a
    /// recommendation) or as commonly deployed without it (`true`: cordon and drain every notice).
    pub fn new(without_booster: bool) -> Nth {
        Nth { drain_on_rebalance: without_booster, drains: BTreeMap::new() }
    }

    /// Applies a scenario event.
    pub(crate) fn on_event(&mut self, world: &mut World, event: &SpotEvent) {
        let kind = match event.kind {
            SpotEventKind::Rebalance => SignalKind::Rebalance,
            SpotEventKind::Interrupt => SignalKind::SpotInterruption,
        };
        let nodes = match &event.targets {
            Targets::Oldest(n) => {
                let hit = world.signalled(kind);
                world.nodes_of(&event.group).into_iter().filter(|n| !hit.contains(n)).take(*n as usize).collect()
            }
            Targets::Named(names) => names.iter().filter(|n| world.nodes.contains_key(*n)).cloned().collect::<Vec<_>>(),
        };
        if nodes.is_empty() {
            world.log(
                "nth",
                "nothing to hit",
                &event.group,
                format!("{}: the named nodes are already gone", kind.as_str()),
            );
        }
        for node in nodes {
            let instance = world.nodes[&node].instance.clone();
            // NTH's Event says when a spot interruption takes the instance.
            let notice = event.notice.unwrap_or(world.timings.interruption_notice);
            let notice_deadline = (kind == SignalKind::SpotInterruption).then(|| world.now.plus(notice));
            world.signals.push(Signal {
                instance: instance.as_str().into(),
                node: node.as_str().into(),
                kind,
                observed_at: world.now,
                evidence: Evidence::Event,
                notice_deadline,
            });
            world.log("nth", format!("{} Event", kind.as_str()), &node, instance.clone());
            world.cordon(&node);
            let drain = match kind {
                SignalKind::SpotInterruption => {
                    world.interrupt(&instance, notice);
                    world.timings.nth_drains_interruptions || self.drain_on_rebalance
                }
                _ => self.drain_on_rebalance,
            };
            if drain && !self.drains.contains_key(&node) {
                world.log("nth", "drain started", &node, "cordon and drain");
                self.drains.insert(node, NthDrain { started: world.now, next_try: world.now });
            }
        }
    }

    /// Retries evictions on the nodes NTH drains (the kubectl drain helper: every evictable pod,
    /// PDB refusals retried every few seconds, until its timeout).
    pub fn step(&mut self, world: &mut World) {
        let now = world.now;
        let mut finished = Vec::new();
        for (node, drain) in self.drains.iter_mut() {
            if !world.nodes.contains_key(node) {
                finished.push((node.clone(), None));
                continue;
            }
            if now < drain.next_try {
                continue;
            }
            let uids: Vec<String> = world.pods_on(node).iter().map(|p| p.uid.clone()).collect();
            let mut blocked = 0;
            for uid in uids {
                if matches!(world.evict(&uid), Eviction::Blocked { .. }) {
                    blocked += 1;
                }
            }
            if blocked == 0 {
                finished.push((node.clone(), Some("drained")));
            } else if now.since(drain.started) >= world.timings.nth_drain_timeout {
                finished.push((node.clone(), Some("drain timed out")));
            } else {
                drain.next_try = now.plus(world.timings.nth_eviction_retry);
            }
        }
        for (node, outcome) in finished {
            self.drains.remove(&node);
            match outcome {
                Some("drained") => {
                    world.counters.drained_nodes += 1;
                    world.note_drained(&node);
                    world.log("nth", "drained", &node, "every pod evicted");
                }
                Some(other) => {
                    let left = world.pods_on(&node).len();
                    world.log("nth", other, &node, format!("{left} pods left, PDB-blocked"));
                }
                None => {}
            }
        }
    }
}

/// Cluster Autoscaler: every scan interval, pods Pending for at least one interval trigger a
/// scale-up of the first of their groups with room that is not in backoff, sized by bin packing
/// and net of upcoming nodes (CA ≤ 1.35 counts them). A scale-up whose nodes have not all
/// registered after `--max-node-provision-time` (15 min) fails: CA takes the group's target back
/// to its registered nodes and backs the group off (5 min, its initial backoff), so its pods go
/// to their next group. Scale-down is not modelled: surplus shows in `peak_desired`.
#[derive(Debug, Default)]
pub(crate) struct ClusterAutoscaler {
    next_scan: Option<Timestamp>,
    /// Scale-ups in flight: when each group was last raised.
    scale_ups: BTreeMap<String, Timestamp>,
    /// Groups in backoff, until when.
    backoff: BTreeMap<String, Timestamp>,
}

/// CA's `--max-node-provision-time` default.
const MAX_NODE_PROVISION_TIME: std::time::Duration = std::time::Duration::from_secs(15 * 60);
/// CA's initial node group backoff.
const INITIAL_BACKOFF: std::time::Duration = std::time::Duration::from_secs(5 * 60);

impl ClusterAutoscaler {
    /// One scan, when due.
    pub fn step(&mut self, world: &mut World) {
        let scan = world.timings.ca_scan_interval;
        if self.next_scan.is_some_and(|t| world.now < t) {
            return;
        }
        self.next_scan = Some(world.now.plus(scan));
        let now = world.now;
        self.backoff.retain(|_, until| now < *until);
        let timed_out: Vec<String> = self
            .scale_ups
            .iter()
            .filter(|(g, at)| world.upcoming(g) > 0 && now.since(**at) >= MAX_NODE_PROVISION_TIME)
            .map(|(g, _)| g.clone())
            .collect();
        self.scale_ups.retain(|g, _| world.upcoming(g) > 0);
        for group in timed_out {
            self.scale_ups.remove(&group);
            let registered = world.groups[&group].desired - world.upcoming(&group);
            let from = world.groups[&group].desired;
            let to = world.set_desired(&group, registered);
            self.backoff.insert(group.clone(), now.plus(INITIAL_BACKOFF));
            world.log("ca", "scale-up timed out", &group, format!("desired {from} -> {to}, backed off"));
        }
        let packing = Policy {
            sizing: SizingMode::Pods,
            over_subscription_percent: 0,
            reserved_per_node: Resources::default(),
            ..Policy::default()
        };
        let mut per_group: BTreeMap<String, Vec<crate::core::Pod>> = BTreeMap::new();
        for pod in world.pending_since(scan) {
            let w = &world.workloads[pod.workload];
            let usable =
                |g: &&String| world.groups[*g].desired < world.groups[*g].spec.max && !self.backoff.contains_key(*g);
            let Some(group) = w.groups.iter().find(usable) else {
                continue;
            };
            per_group.entry(group.clone()).or_default().push(world.core_pod(pod));
        }
        for (group, pods) in per_group {
            let node = world.groups[&group].spec.node;
            let needed = crate::core::sizing::nodes_for_pods(&pods, node, &packing);
            let add = needed.saturating_sub(world.upcoming(&group));
            if add == 0 {
                continue;
            }
            let from = world.groups[&group].desired;
            let to = world.set_desired(&group, from + add);
            if to > from {
                self.scale_ups.entry(group.clone()).or_insert(world.now);
                world.log("ca", "scale-up", &group, format!("desired {from} -> {to} for {} pending pods", pods.len()));
            }
        }
    }
}
