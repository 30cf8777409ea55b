//! The booster inside a simulation: every tick it takes a snapshot of the simulated cluster, runs
//! the real scaling core, and carries out the decisions the way the daemon's workers do: guarded
//! desired-capacity writes, evictions in the core's order with PDB backoff, terminate with
//! decrement once a node is drained.

use std::collections::BTreeMap;

use super::world::{Eviction, World};
use crate::core::{
    self, close_finished_boosts, eviction_backoff, eviction_order, fold_signals, next_batches, plan_boosts,
    BoostLedger, DrainEnd, DrainStarted, DrainState, DrainView, InstanceId, NodeName, PodClass, Policy, Timestamp,
};

/// The booster's state across ticks.
#[derive(Debug)]
pub struct Booster {
    policy: Policy,
    ledger: BoostLedger,
    drains: DrainState,
    /// Per draining node: PDB refusals in a row, and when to try again.
    refusals: BTreeMap<String, (u32, Timestamp)>,
    boosted: BTreeMap<InstanceId, u32>,
    last_hold: BTreeMap<String, String>,
    last_wait: BTreeMap<String, String>,
}

impl Booster {
    /// A booster with `policy` and nothing done yet.
    pub fn new(policy: Policy) -> Booster {
        Booster {
            policy,
            ledger: BoostLedger::default(),
            drains: DrainState::default(),
            refusals: BTreeMap::new(),
            boosted: BTreeMap::new(),
            last_hold: BTreeMap::new(),
            last_wait: BTreeMap::new(),
        }
    }

    /// Distinct instances ever covered by a boost.
    pub fn boosted_instances(&self) -> u32 {
        self.boosted.len() as u32
    }

    /// Instances covered by more than one boost (must stay 0).
    pub fn double_boosts(&self) -> u32 {
        self.boosted.values().filter(|n| **n > 1).count() as u32
    }

    /// One tick: plan, then act.
    pub fn step(&mut self, world: &mut World) {
        let now = world.now;
        let mut snapshot = world.snapshot(&self.ledger);
        // One fold serves every stage: closing drops only records whose instances are gone, and
        // their signals fold out as NodeGone either way.
        let at_risk = fold_signals(&snapshot, &self.policy, now);
        self.ledger = close_finished_boosts(&snapshot, &at_risk);
        snapshot.ledger = self.ledger.clone();
        let plan = core::Plan {
            boosts: plan_boosts(&snapshot, &at_risk, &self.policy, now),
            drains: next_batches(
                &DrainView { snapshot: &snapshot, at_risk: &at_risk, state: &self.drains },
                &self.policy,
                now,
            ),
            at_risk,
        };

        for boost in plan.boosts.boosts {
            let group = boost.group.to_string();
            let nodes: Vec<String> = boost
                .record
                .instances
                .iter()
                .filter_map(|i| world.instances.get(i.as_str()).map(|x| x.node.clone()))
                .collect();
            if boost.writes() {
                // The guarded write: re-read live desired, never lower it.
                let live = world.groups[&group].desired;
                let set = world.set_desired(&group, boost.to.max(live));
                world.log(
                    "booster",
                    "boost",
                    &group,
                    format!("desired {live} -> {set} for {}: {}", nodes.join(", "), boost.reason),
                );
            } else {
                world.log(
                    "booster",
                    "no boost needed",
                    &group,
                    format!("{}: their pods fit without a new node", nodes.join(", ")),
                );
            }
            for i in &boost.record.instances {
                *self.boosted.entry(i.clone()).or_default() += 1;
            }
            self.ledger.record(boost.record);
        }
        for held in plan.boosts.held {
            let said = format!(
                "{}: {}",
                held.instances.iter().map(|i| i.as_str()).collect::<Vec<_>>().join(", "),
                held.reason
            );
            if self.last_hold.get(held.group.as_str()) != Some(&said) {
                world.log("booster", "boost held", held.group.as_str(), said.clone());
                self.last_hold.insert(held.group.to_string(), said);
            }
        }
        for waiting in plan.drains.waiting {
            let said = waiting.reason.to_string();
            if self.last_wait.get(waiting.group.as_str()) != Some(&said) {
                if matches!(waiting.reason, core::DrainWait::ReplacementNotReady { .. }) {
                    world.log("booster", "drain waits", waiting.group.as_str(), said.clone());
                }
                self.last_wait.insert(waiting.group.to_string(), said);
            }
        }
        for timed_out in plan.drains.timed_out {
            self.drains.in_progress.remove(&timed_out.node);
            self.drains.finished.insert(timed_out.instance.clone(), DrainEnd::TimedOut);
            let left = world.pods_on(timed_out.node.as_str()).len();
            world.log(
                "booster",
                "drain timed out",
                timed_out.node.as_str(),
                format!("{left} pods left; node stays cordoned"),
            );
            if timed_out.terminate {
                self.terminate(world, &timed_out.instance, timed_out.node.as_str(), timed_out.decrement);
                world.log(
                    "booster",
                    "terminate after timeout",
                    timed_out.node.as_str(),
                    "--terminate-after-drain-timeout",
                );
            }
        }
        for batch in plan.drains.batches {
            self.drains.last_batch_at.insert(batch.group.clone(), now);
            for target in batch.nodes {
                if target.cordon {
                    world.cordon(target.node.as_str());
                }
                world.log(
                    "booster",
                    "drain started",
                    target.node.as_str(),
                    format!("replacements Ready in {}", batch.group),
                );
                self.drains.in_progress.insert(
                    target.node.clone(),
                    DrainStarted {
                        group: batch.group.clone(),
                        instance: target.instance,
                        started_at: now,
                        decrement: target.decrement,
                    },
                );
            }
        }
        self.progress_drains(world, &snapshot);
    }

    /// Evicts what may go now on every draining node; terminates drained instances with decrement.
    fn progress_drains(&mut self, world: &mut World, snapshot: &core::Snapshot) {
        let now = world.now;
        let draining: Vec<(NodeName, DrainStarted)> =
            self.drains.in_progress.iter().map(|(n, d)| (n.clone(), d.clone())).collect();
        for (node, drain) in draining {
            let Some(view) = snapshot.nodes.get(&node).filter(|_| world.nodes.contains_key(node.as_str())) else {
                // The instance went first (interrupted): nothing left to drain.
                self.drains.in_progress.remove(&node);
                self.drains.finished.insert(drain.instance.clone(), DrainEnd::Drained);
                continue;
            };
            let order = eviction_order(view);
            let ordinary_left = order.iter().any(|p| p.class == PodClass::Ordinary);
            let mut left = order.len();
            let mut newly_blocked = Vec::new();
            let mut wait = None;
            for pod in order {
                if pod.class == PodClass::Critical && ordinary_left {
                    continue;
                }
                if self.refusals.get(node.as_str()).is_some_and(|(_, next)| now < *next) {
                    break;
                }
                match world.evict(&pod.uid) {
                    Eviction::Evicted | Eviction::Gone => {
                        left -= 1;
                        self.refusals.remove(node.as_str());
                        world.log("booster", "evicted", node.as_str(), pod.name.clone());
                    }
                    Eviction::Blocked => newly_blocked.push(pod.name.clone()),
                }
            }
            if !newly_blocked.is_empty() {
                let (count, _) = self.refusals.get(node.as_str()).copied().unwrap_or((0, now));
                let next = eviction_backoff(count + 1, &self.policy);
                self.refusals.insert(node.to_string(), (count + 1, now.plus(next)));
                wait = Some((count, next));
            }
            if let Some((0, next)) = wait {
                let detail = format!(
                    "{} pod(s) ({}): retry in {}s, doubling",
                    newly_blocked.len(),
                    newly_blocked.join(", "),
                    next.as_secs()
                );
                world.log("booster", "evictions blocked by PDB", node.as_str(), detail);
            }
            if left == 0 {
                self.drains.in_progress.remove(&node);
                self.drains.finished.insert(drain.instance.clone(), DrainEnd::Drained);
                world.counters.drained_nodes += 1;
                self.terminate(world, &drain.instance, node.as_str(), drain.decrement);
            }
        }
    }

    /// Terminates a drained instance, with decrement when the core says it gives a boosted node
    /// back, and notes the return in the ledger.
    fn terminate(&mut self, world: &mut World, instance: &InstanceId, node: &str, decrement: bool) {
        let decremented = world.terminate(instance.as_str(), decrement);
        if decremented {
            self.ledger.note_returned(instance);
        }
        let how = match (decrement, decremented) {
            (true, true) => "with decrement: a boosted node is given back",
            (true, false) => "at MinSize: the ASG replaces it",
            (false, _) => "without decrement: its boost added no node for it, the ASG replaces it",
        };
        world.log("booster", "terminated", node, format!("{instance} {how}"));
    }
}
