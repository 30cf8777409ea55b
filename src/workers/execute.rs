//! The one place the workers write. Every write to the cluster or to Auto Scaling is a
//! [`Write`] value the core's plans name, run here with a deadline and behind the leadership gate
//! (the ports are [`LeaderOnly`](super::leader_only::LeaderOnly)), answered in one vocabulary
//! ([`Made`], or [`WriteFailed`] saying whether it may have applied), and counted in
//! `writes_total{kind, answer}`. The ledger's saves around the writes (the intents before, the
//! answers after) are made here too. `tests/architecture.rs` holds every other worker file to
//! calling no write port and saving nothing itself.

use std::time::Duration;

use crate::core::action::classify;
use crate::core::{apply_all, Answer, BoostLedger, LedgerEdit, Made, Write, WriteAnswer, WriteFailed, WriteKind};
use crate::metrics::WriteLabel;
use crate::ports::{
    error_chain, AutoScaling, AwsError, ClusterWriteError, ClusterWrites, DesiredWrite, EvictOutcome, LedgerError,
    PodRef, TerminateOutcome, WriteOutcome, WriteOutcomes,
};

use super::{Ports, WorkerContext};

/// The longest an Auto Scaling write may go unanswered (its SDK retries included) before it
/// counts as unknown: no pass waits for ever on one call.
pub(crate) const AWS_WRITE_DEADLINE: Duration = Duration::from_secs(60);

/// Which way a guarded desired-capacity write goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Direction {
    /// Raised, guarded by the desired capacity the plan started from.
    Raise,
    /// Lowered by nodes that never launched, guarded also by the instances the group lists.
    LowerUnlaunched,
}

/// How long a cluster write may go unanswered unless its worker says otherwise (the drainer's
/// `eviction_call_timeout`).
pub(crate) const CLUSTER_WRITE_DEADLINE: Duration = Duration::from_secs(10);

/// Runs writes for the workers sharing `ctx`, each cluster write within `deadline`.
pub(crate) struct Executor<'c, P: Ports> {
    ctx: &'c WorkerContext<P>,
    deadline: Duration,
}

impl<P: Ports> WorkerContext<P> {
    /// The executor, each cluster write bounded by [`CLUSTER_WRITE_DEADLINE`].
    pub(crate) fn executor(&self) -> Executor<'_, P> {
        Executor { ctx: self, deadline: CLUSTER_WRITE_DEADLINE }
    }
}

impl<P: Ports> Executor<'_, P> {
    /// The same executor, each cluster write bounded by `deadline` instead.
    pub(crate) fn within(self, deadline: Duration) -> Self {
        Executor { deadline, ..self }
    }

    /// Makes `write` and answers it; a call past its deadline may have applied.
    pub(crate) async fn run(&self, write: &Write) -> Answer {
        let deadline = match write {
            Write::Terminate { .. } | Write::SuspendAzRebalance(_) | Write::ResumeAzRebalance(_) => AWS_WRITE_DEADLINE,
            _ => self.deadline,
        };
        let answer = match tokio::time::timeout(deadline, self.call(write)).await {
            Ok(answer) => answer,
            Err(_) => Err(WriteFailed {
                message: format!("no answer within {}s", deadline.as_secs()),
                may_have_applied: true,
            }),
        };
        self.count(write.kind(), &answer);
        answer
    }

    async fn call(&self, write: &Write) -> Answer {
        let (cluster, aws) = (&self.ctx.writes, &self.ctx.aws);
        match write {
            Write::Cordon(node) => done(cluster.cordon(node).await),
            Write::Uncordon(node) => done(cluster.uncordon(node).await),
            Write::ReadmitToLoadBalancers(node) => done(cluster.readmit_to_load_balancers(node).await),
            Write::Protect(node) => done(cluster.protect_from_scale_down(node, true).await),
            Write::Unprotect(node) => done(cluster.protect_from_scale_down(node, false).await),
            Write::Evict(pod) => match cluster.evict(&PodRef::from(pod)).await {
                Ok(EvictOutcome::Evicted) => Ok(Made::Done),
                Ok(EvictOutcome::Gone) => Ok(Made::Gone),
                Ok(EvictOutcome::Blocked { budget }) => Ok(Made::Refused { budget }),
                Err(e) => Err(cluster_failed(&e)),
            },
            Write::DeleteAtDeadline { pod, grace_seconds } => {
                done(cluster.delete_pod(&PodRef::from(pod), *grace_seconds).await)
            }
            Write::Terminate { instance, decrement } => match aws.terminate_instance(instance, *decrement).await {
                Ok(TerminateOutcome::Terminated { decremented }) => Ok(Made::Terminated { decremented }),
                Ok(TerminateOutcome::AlreadyGone) => Ok(Made::AlreadyGone),
                Ok(TerminateOutcome::DryRun) => Ok(Made::DryRun),
                Err(e) => Err(aws_failed(&e)),
            },
            Write::SuspendAzRebalance(group) => {
                aws_done(aws.suspend_az_rebalance(group, true, &self.ctx.groups.cluster()).await)
            }
            Write::ResumeAzRebalance(group) => {
                aws_done(aws.suspend_az_rebalance(group, false, &self.ctx.groups.cluster()).await)
            }
        }
    }

    /// Sends guarded desired-capacity writes, batched as the adapter sends them (one write per
    /// group), and counts each one's answer. A batch that fails as a whole was not sent.
    pub(crate) async fn set_desired(
        &self,
        direction: Direction,
        writes: &[DesiredWrite],
    ) -> Result<WriteOutcomes, AwsError> {
        let kind = match direction {
            Direction::Raise => WriteKind::RaiseDesired,
            Direction::LowerUnlaunched => WriteKind::LowerUnlaunched,
        };
        let sent = match direction {
            Direction::Raise => self.ctx.aws.raise_desired(writes).await,
            Direction::LowerUnlaunched => self.ctx.aws.lower_unlaunched(writes).await,
        };
        match &sent {
            Ok(outcomes) => {
                for (_, outcome) in outcomes {
                    let label = match outcome {
                        Ok(WriteOutcome::Written { .. }) => WriteLabel::Applied,
                        Ok(WriteOutcome::DryRun { .. }) => WriteLabel::DryRun,
                        Ok(WriteOutcome::Raced { .. }) => WriteLabel::NotMade,
                        Err(e) if e.may_have_applied() => WriteLabel::Unknown,
                        Err(_) => WriteLabel::Failed,
                    };
                    self.ctx.metrics.writes.answered(kind, label);
                }
            }
            Err(_) => writes.iter().for_each(|_| self.ctx.metrics.writes.answered(kind, WriteLabel::Failed)),
        }
        sent
    }

    /// Saves `edits` to the ledger in order, in one save (an intent before its write, an answer
    /// after it, or what a pass learnt); returns whether each applied. Nothing is saved when none
    /// changes the ledger.
    pub(crate) async fn save(&self, edits: &[LedgerEdit]) -> Result<Vec<bool>, LedgerError> {
        self.saving(|_| (edits.to_vec(), ())).await.map(|((), applied)| applied)
    }

    /// Saves the edits `decide` makes of the ledger as held at the moment of the save (no other
    /// save comes between the reading and the writing), and returns what it decided with them.
    pub(crate) async fn save_decided<T>(
        &self,
        decide: impl FnOnce(&BoostLedger) -> (Vec<LedgerEdit>, T),
    ) -> Result<T, LedgerError> {
        self.saving(decide).await.map(|(decided, _)| decided)
    }

    /// The one save the workers make.
    async fn saving<T>(
        &self,
        decide: impl FnOnce(&BoostLedger) -> (Vec<LedgerEdit>, T),
    ) -> Result<(T, Vec<bool>), LedgerError> {
        let mut decided = None;
        self.ctx
            .ledger
            .update(|held| {
                let (edits, what) = decide(held);
                decided = Some((what, apply_all(held, &edits)));
            })
            .await?;
        Ok(decided.expect("the change runs once on every save"))
    }

    fn count(&self, kind: WriteKind, answer: &Answer) {
        let label = match (answer, classify(answer)) {
            (Ok(Made::DryRun), _) => WriteLabel::DryRun,
            (_, WriteAnswer::Applied) => WriteLabel::Applied,
            (Ok(_), _) => WriteLabel::NotMade,
            (Err(_), WriteAnswer::Unknown) => WriteLabel::Unknown,
            (Err(_), _) => WriteLabel::Failed,
        };
        self.ctx.metrics.writes.answered(kind, label);
    }
}

fn done(answer: Result<(), ClusterWriteError>) -> Answer {
    answer.map(|()| Made::Done).map_err(|e| cluster_failed(&e))
}

fn aws_done(answer: Result<(), AwsError>) -> Answer {
    answer.map(|()| Made::Done).map_err(|e| aws_failed(&e))
}

/// A cluster write the API server refused, or that never reached it: the adapter retries what
/// may be retried, so what comes back changed nothing the next plan cannot see.
fn cluster_failed(e: &ClusterWriteError) -> WriteFailed {
    WriteFailed { message: error_chain(e), may_have_applied: false }
}

fn aws_failed(e: &AwsError) -> WriteFailed {
    WriteFailed { message: error_chain(e), may_have_applied: e.may_have_applied() }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::core::{Node, PodToEvict, Timestamp};
    use crate::fakes::{FakeAutoScaling, FakeRig};
    use crate::metrics::Metrics;

    async fn rigged() -> (FakeRig, Arc<crate::fakes::FakeContext>, Arc<Metrics>) {
        let aws = FakeAutoScaling::default().with_group("a", 2, 10).with_instance("a", "i-n1");
        let rig = FakeRig::new(aws);
        rig.cluster.put_node(Node::test("n1", "a").with_pods(2, 100, 1 << 20));
        let metrics = Arc::new(Metrics::new());
        let clock: crate::workers::Clock = Arc::new(|| Timestamp::from_millis(1_000));
        let ctx = rig.context(crate::core::Policy::default(), clock, metrics.clone()).await;
        (rig, ctx, metrics)
    }

    fn first_pod(rig: &FakeRig) -> PodToEvict {
        let state = crate::ports::ClusterView::current(&rig.cluster).unwrap();
        PodToEvict::of(&state.nodes[&crate::core::NodeName::from("n1")].pods[0])
    }

    #[tokio::test(start_paused = true)]
    async fn every_answer_reads_in_one_vocabulary_and_is_counted_by_kind() {
        let (rig, ctx, metrics) = rigged().await;
        let exec = ctx.executor();
        assert_eq!(exec.run(&Write::Cordon("n1".into())).await, Ok(Made::Done));
        let pod = first_pod(&rig);
        rig.writes.block(pod.uid.as_str(), true);
        assert!(matches!(exec.run(&Write::Evict(pod.clone())).await, Ok(Made::Refused { .. })));
        rig.writes.block(pod.uid.as_str(), false);
        assert_eq!(exec.run(&Write::Evict(pod)).await, Ok(Made::Done));
        let terminate = Write::Terminate { instance: "i-n1".into(), decrement: true };
        assert_eq!(exec.run(&terminate).await, Ok(Made::Terminated { decremented: true }));
        rig.aws.fail_terminations(1);
        let failed = exec.run(&Write::Terminate { instance: "i-n2".into(), decrement: false }).await;
        assert!(failed.as_ref().is_err_and(|e| !e.message.is_empty()), "{failed:?}");

        let count = |kind, label| metrics.writes.count(kind, label);
        assert_eq!(count(WriteKind::Cordon, WriteLabel::Applied), 1);
        assert_eq!(count(WriteKind::Evict, WriteLabel::NotMade), 1, "a budget's refusal changed nothing");
        assert_eq!(count(WriteKind::Evict, WriteLabel::Applied), 1);
        assert_eq!(count(WriteKind::TerminateWithDecrement, WriteLabel::Applied), 1);
        let terminate_failed =
            count(WriteKind::Terminate, WriteLabel::Unknown) + count(WriteKind::Terminate, WriteLabel::Failed);
        assert_eq!(terminate_failed, 1);
        assert!(metrics.encode().contains("spots_booster_writes_total{answer=\"applied\",kind=\"cordon\"} 1"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_past_its_deadline_may_have_applied_and_holds_no_pass() {
        let (rig, ctx, metrics) = rigged().await;
        rig.writes.stall_cordon("n1");
        let exec = ctx.executor().within(Duration::from_secs(3));
        let began = tokio::time::Instant::now();
        let answer = exec.run(&Write::Cordon("n1".into())).await;
        assert_eq!(began.elapsed(), Duration::from_secs(3));
        assert!(answer.as_ref().is_err_and(|e| e.may_have_applied && e.message.contains("3s")), "{answer:?}");
        assert_eq!(metrics.writes.count(WriteKind::Cordon, WriteLabel::Unknown), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_follower_s_write_is_not_sent_and_not_made() {
        let (rig, ctx, metrics) = rigged().await;
        rig.leadership.set(false);
        let answer = ctx.executor().run(&Write::Uncordon("n1".into())).await;
        assert!(answer.as_ref().is_err_and(|e| !e.may_have_applied), "{answer:?}");
        assert!(rig.writes.calls().is_empty(), "the gate dropped it");
        assert_eq!(metrics.writes.count(WriteKind::Uncordon, WriteLabel::Failed), 1);
    }
}
