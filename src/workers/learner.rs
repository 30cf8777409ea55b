//! Learns every node's group, its group's size and EC2's facts about its instance as nodes join,
//! beside the scaler's and the drainer's passes: a signal then resolves from memory, and no pass
//! waits for a large cluster's lookups (a pass still learns a few hundred nodes when the learner
//! is behind, so nothing depends on it for correctness).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{watch, Notify};
use tracing::debug;

use super::{Ports, WorkerContext};
use crate::ports::{AwsError, ClusterView};
use crate::supervise::{Heartbeat, Heartbeats, WORKER_SILENCE_LIMIT};

/// How the learner paces itself.
#[derive(Debug, Clone)]
pub struct LearnerSettings {
    /// Nodes joining together are learnt together: a join waits this long for more...
    pub join_quiet: Duration,
    /// ...but never longer than this, while nodes keep joining.
    pub join_max: Duration,
    /// Learns at least this often (nodes whose lookup failed, groups whose description aged).
    pub every: Duration,
}

impl Default for LearnerSettings {
    fn default() -> Self {
        LearnerSettings {
            join_quiet: Duration::from_millis(50),
            join_max: Duration::from_secs(1),
            every: Duration::from_secs(30),
        }
    }
}

/// Learns what the workers will need about nodes as they join.
pub struct NodeLearner<P: Ports> {
    ctx: Arc<WorkerContext<P>>,
    joined: Arc<Notify>,
    settings: LearnerSettings,
    heartbeat: Option<Heartbeat>,
}

impl<P: Ports> NodeLearner<P> {
    /// A learner woken by `joined` (the watch notifies it when a node joins or changes instance).
    pub fn new(ctx: Arc<WorkerContext<P>>, joined: Arc<Notify>, settings: LearnerSettings) -> Self {
        NodeLearner { ctx, joined, settings, heartbeat: None }
    }

    /// Reports to `beats`: wedged once a round is later than its longest wait plus
    /// [`WORKER_SILENCE_LIMIT`].
    pub(crate) fn beating(mut self, beats: &Heartbeats) -> Self {
        self.heartbeat = Some(beats.register("worker:learner", self.settings.every + WORKER_SILENCE_LIMIT));
        self
    }

    /// Learns at once, then after every join and every `every`, until `shutdown` turns true.
    pub async fn run(self, shutdown: watch::Receiver<bool>) {
        super::run_worker(self, shutdown).await;
    }

    /// Waits until no node joined for `join_quiet`, or `join_max` passed.
    async fn settle(&self) {
        super::settle(&self.joined, self.settings.join_quiet, self.settings.join_max).await;
    }

    /// Learns every node not yet known; a failure is retried at the next round.
    async fn round(&self) -> Result<(), AwsError> {
        let Some(state) = self.ctx.cluster.current() else { return Ok(()) };
        let nodes = state.nodes.len();
        let ledger = self.ctx.ledger.current().await;
        self.ctx.groups.learn(&self.ctx.aws, state, &ledger).await?;
        debug!(nodes, "nodes learnt");
        Ok(())
    }
}

impl<P: Ports> super::Worker for NodeLearner<P> {
    type Error = AwsError;
    const PASS_AT_START: bool = true;
    const NAME: &'static str = "learner";

    fn heartbeat(&self) -> Option<&Heartbeat> {
        self.heartbeat.as_ref()
    }

    fn metrics(&self) -> &crate::metrics::Metrics {
        &self.ctx.metrics
    }

    async fn next_pass_due(&mut self) {
        tokio::select! {
            _ = self.joined.notified() => self.settle().await,
            _ = tokio::time::sleep(self.settings.every) => {}
        }
    }

    async fn pass_once(&mut self) -> Result<(), AwsError> {
        self.round().await
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;
    use crate::core::{GroupName, Node, NodeName, Policy, Signal, SizingMode};
    use crate::fakes::{AsgCall, FakeAutoScaling, FakeRig};
    use crate::metrics::Metrics;
    use crate::ports::system_clock;
    use crate::workers::scaler::{Scaler, ScalerSettings};

    const NODES: usize = 450;

    async fn until(what: &str, done: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while !done() {
            assert!(Instant::now() < deadline, "{what} never happened");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    #[tokio::test]
    async fn nodes_are_learnt_as_they_join_so_a_signal_costs_no_lookup() {
        // 450 nodes whose Nodes do not name their group (more than a pass learns), and a 451st
        // instance that joins later.
        let mut aws = FakeAutoScaling::default().with_group("a", NODES as u32 + 1, 1000);
        for k in 0..=NODES {
            aws = aws.with_instance("a", &format!("i-n{k:03}"));
        }
        let rig = FakeRig::new(aws);
        let unnamed = |k: usize| {
            let mut node = Node::test(&format!("n{k:03}"), "a");
            node.group = None;
            node
        };
        for k in 0..NODES {
            rig.cluster.put_node(unnamed(k));
        }
        let policy = Policy { sizing: SizingMode::Count, ..Policy::default() };
        let ctx = rig.context(policy, system_clock(), Arc::new(Metrics::new())).await;
        let joined = Arc::new(Notify::new());
        let (stop, shutdown) = watch::channel(false);
        let learner =
            tokio::spawn(NodeLearner::new(ctx.clone(), joined.clone(), LearnerSettings::default()).run(shutdown));

        until("learning the cluster", || rig.aws.instance_lookups() == NODES && rig.aws.group_lookups() == NODES).await;
        rig.cluster.put_node(unnamed(NODES));
        joined.notify_one();
        until("learning the joined node", || rig.aws.instance_lookups() == NODES + 1).await;
        assert_eq!(rig.aws.group_lookups(), NODES, "its group's description already listed it");
        stop.send(true).unwrap();
        learner.await.unwrap();

        // The signal's pass resolves from memory: no lookup, only the guard read and the write.
        let calls_before = rig.aws.calls().len();
        rig.cluster.edit(|s| s.nodes.get_mut(&NodeName::from("n450")).unwrap().cordoned = true);
        rig.cluster.signal(Signal { observed_at: system_clock()(), ..Signal::rebalance("n450", 0) });
        let report = Scaler::new(ctx, ScalerSettings::default()).tick().await.unwrap();
        assert_eq!(report.raised, vec![(GroupName::from("a"), NODES as u32 + 1, NODES as u32 + 2)]);
        assert_eq!((rig.aws.instance_lookups(), rig.aws.group_lookups()), (NODES + 1, NODES));
        let pass: Vec<AsgCall> = rig.aws.calls().split_off(calls_before);
        assert!(pass.iter().all(|c| matches!(c, AsgCall::Raise(_))), "the pass only wrote: {pass:?}");
    }
}
