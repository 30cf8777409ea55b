//! Evictions in flight beside the drainer's passes. In a storm, thousands of evictions meet an API
//! server answering slowly; a pass that waited for them all would hold back the next drains and
//! deadlines, and one that dropped the unanswered calls would send them again (with new
//! connections) to a server already behind. So each eviction runs as its own task, at most a
//! bound at once, started in the order sent (nearest deadline first) and ended by its own call
//! deadline; a pod is never sent twice while its call runs, and each pass folds in the answers
//! that came since the last.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::Arc;

use tokio::sync::Semaphore;
use tokio::task::{Id, JoinSet};

use crate::core::{GroupName, NodeName};
use crate::ports::{EvictOutcome, PodRef};

/// One eviction's answer, with the node and group it was sent for.
#[derive(Debug)]
pub(crate) struct EvictionAnswer {
    pub node: NodeName,
    pub group: GroupName,
    pub pod: PodRef,
    pub outcome: Result<EvictOutcome, String>,
}

/// What an eviction was sent for, kept until its answer comes.
struct Sent {
    node: NodeName,
    group: GroupName,
    pod: PodRef,
}

/// The evictions sent and not yet answered.
pub(crate) struct EvictionsInFlight {
    tasks: JoinSet<Result<EvictOutcome, String>>,
    sent: HashMap<Id, Sent>,
    /// The UIDs of the pods whose call runs (or waits for its turn).
    pods: HashSet<String>,
    turns: Arc<Semaphore>,
}

impl EvictionsInFlight {
    /// At most `bound` calls at once.
    pub(crate) fn new(bound: usize) -> Self {
        EvictionsInFlight {
            tasks: JoinSet::new(),
            sent: HashMap::new(),
            pods: HashSet::new(),
            turns: Arc::new(Semaphore::new(bound.max(1))),
        }
    }

    /// Whether `pod`'s eviction was sent and is not answered yet.
    #[cfg(test)]
    fn running(&self, pod: &PodRef) -> bool {
        self.pods.contains(&pod.uid)
    }

    /// How many calls are sent and unanswered.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.sent.len()
    }

    /// Sends `call` for `pod` of `node`, once its turn comes; returns its task's id, or `None`
    /// when the pod's eviction is already running.
    pub(crate) fn send<F>(&mut self, node: &NodeName, group: &GroupName, pod: PodRef, call: F) -> Option<Id>
    where
        F: Future<Output = Result<EvictOutcome, String>> + Send + 'static,
    {
        if !self.pods.insert(pod.uid.clone()) {
            return None;
        }
        let turns = self.turns.clone();
        let handle = self.tasks.spawn(async move {
            let _turn = turns.acquire_owned().await.map_err(|e| e.to_string())?;
            call.await
        });
        self.sent.insert(handle.id(), Sent { node: node.clone(), group: group.clone(), pod });
        Some(handle.id())
    }

    /// The answers that came, without waiting.
    pub(crate) fn answered(&mut self) -> Vec<EvictionAnswer> {
        let mut answers = Vec::new();
        while let Some(joined) = self.tasks.try_join_next_with_id() {
            answers.extend(self.answer(joined).map(|(_, a)| a));
        }
        answers
    }

    /// Waits until every call in `ids` is answered or `until` comes, and returns every answer that
    /// came meanwhile (others' included).
    pub(crate) async fn answered_by(
        &mut self,
        mut ids: HashSet<Id>,
        until: tokio::time::Instant,
    ) -> Vec<EvictionAnswer> {
        let mut answers = Vec::new();
        while !ids.is_empty() {
            match tokio::time::timeout_at(until, self.tasks.join_next_with_id()).await {
                Ok(Some(joined)) => {
                    if let Some((id, answer)) = self.answer(joined) {
                        ids.remove(&id);
                        answers.push(answer);
                    }
                }
                Ok(None) | Err(_) => break,
            }
        }
        answers.extend(self.answered());
        answers
    }

    /// Stops every call (the lease went: the new leader plans its own).
    pub(crate) fn abort_all(&mut self) {
        self.tasks.abort_all();
        self.tasks.detach_all();
        self.sent.clear();
        self.pods.clear();
    }

    /// A joined task as an answer; a task that panicked answers as a failed call.
    fn answer(
        &mut self,
        joined: Result<(Id, Result<EvictOutcome, String>), tokio::task::JoinError>,
    ) -> Option<(Id, EvictionAnswer)> {
        let (id, outcome) = match joined {
            Ok((id, outcome)) => (id, outcome),
            Err(e) => (e.id(), Err(format!("the eviction's task ended: {e}"))),
        };
        let sent = self.sent.remove(&id)?;
        self.pods.remove(&sent.pod.uid);
        Some((id, EvictionAnswer { node: sent.node, group: sent.group, pod: sent.pod, outcome }))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn pod(uid: &str) -> PodRef {
        PodRef { namespace: "default".into(), name: uid.into(), uid: uid.into() }
    }

    async fn after(secs: u64, outcome: Result<EvictOutcome, String>) -> Result<EvictOutcome, String> {
        tokio::time::sleep(Duration::from_secs(secs)).await;
        outcome
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_call_is_neither_waited_for_past_the_pass_nor_sent_twice_and_its_answer_comes_later() {
        let mut calls = EvictionsInFlight::new(8);
        let (node, group) = (NodeName::from("n1"), GroupName::from("a"));
        let fast = calls.send(&node, &group, pod("p1"), after(0, Ok(EvictOutcome::Evicted))).unwrap();
        let slow = calls.send(&node, &group, pod("p2"), after(5, Ok(EvictOutcome::Gone))).unwrap();
        let start = tokio::time::Instant::now();
        let answers = calls.answered_by([fast, slow].into(), start + Duration::from_secs(1)).await;
        assert_eq!(start.elapsed(), Duration::from_secs(1));
        assert_eq!(answers.iter().map(|a| a.pod.uid.as_str()).collect::<Vec<_>>(), ["p1"]);
        assert!(calls.running(&pod("p2")));
        assert_eq!(calls.send(&node, &group, pod("p2"), after(0, Ok(EvictOutcome::Evicted))), None, "never twice");

        tokio::time::advance(Duration::from_secs(4)).await;
        tokio::task::yield_now().await;
        let answers = calls.answered();
        assert_eq!(answers.len(), 1);
        assert!(matches!(answers[0].outcome, Ok(EvictOutcome::Gone)));
        assert!(!calls.running(&pod("p2")) && calls.len() == 0);
    }

    #[tokio::test(start_paused = true)]
    async fn calls_take_their_turns_in_the_order_sent_at_most_the_bound_at_once() {
        let mut calls = EvictionsInFlight::new(2);
        let (node, group) = (NodeName::from("n1"), GroupName::from("a"));
        let ids: HashSet<Id> = (0..5)
            .filter_map(|k| calls.send(&node, &group, pod(&format!("p{k}")), after(1, Ok(EvictOutcome::Evicted))))
            .collect();
        let start = tokio::time::Instant::now();
        let first = calls.answered_by(ids.clone(), start + Duration::from_millis(1_500)).await;
        let mut uids: Vec<String> = first.iter().map(|a| a.pod.uid.clone()).collect();
        uids.sort();
        assert_eq!(uids, ["p0", "p1"], "two at once, the first two sent first");
        let rest = calls.answered_by(ids, start + Duration::from_secs(10)).await;
        assert_eq!(rest.len(), 3);
        assert_eq!(start.elapsed(), Duration::from_secs(3));
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_whose_task_panicked_answers_as_failed_and_may_be_sent_again() {
        let mut calls = EvictionsInFlight::new(2);
        let (node, group) = (NodeName::from("n1"), GroupName::from("a"));
        let id = calls.send(&node, &group, pod("p1"), async { panic!("a bug in the call") }).unwrap();
        let answers = calls.answered_by([id].into(), tokio::time::Instant::now() + Duration::from_secs(1)).await;
        assert!(matches!(&answers[..], [a] if a.outcome.as_ref().is_err_and(|e| e.contains("task ended"))));
        assert!(calls.send(&node, &group, pod("p1"), after(0, Ok(EvictOutcome::Evicted))).is_some());
    }
}
