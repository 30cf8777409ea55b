//! Evictions in flight beside the drainer's passes. In a storm, thousands of evictions meet an API
//! server answering slowly; a pass that waited for them all would hold back the next drains and
//! deadlines, and one that dropped the unanswered calls would send them again (with new
//! connections) to a server already behind. So each eviction runs as its own task, at most a
//! bound at once, and ended by its own call deadline; a pod is never sent twice while its call
//! runs, and each pass folds in the answers that came since the last.
//!
//! A freed turn goes to the waiting call placed first by the latest pass's sequence, not to the
//! one that waited longest: drains that start a pass later (the rest of a storm's notices) get
//! their nodes' first pods out before the earlier nodes' last ones, instead of queueing behind
//! every eviction the first pass sent.

use std::cmp::Reverse;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;
use tokio::task::{Id, JoinSet};

use crate::core::{Answer, GroupName, NodeName, WriteFailed};
use crate::ports::PodRef;

/// One eviction's answer, with the node and group it was sent for.
#[derive(Debug)]
pub(crate) struct EvictionAnswer {
    pub node: NodeName,
    pub group: GroupName,
    pub pod: PodRef,
    pub outcome: Answer,
}

/// What an eviction was sent for, kept until its answer comes.
struct Sent {
    node: NodeName,
    group: GroupName,
    pod: PodRef,
}

/// The evictions sent and not yet answered.
pub(crate) struct EvictionsInFlight {
    tasks: JoinSet<Answer>,
    sent: HashMap<Id, Sent>,
    /// The UIDs of the pods whose call runs (or waits for its turn).
    pods: HashSet<String>,
    turns: Arc<Turns>,
    /// The pass whose sequence places the calls sent now.
    pass: u64,
}

impl EvictionsInFlight {
    /// At most `bound` calls at once.
    pub(crate) fn new(bound: usize) -> Self {
        EvictionsInFlight {
            tasks: JoinSet::new(),
            sent: HashMap::new(),
            pods: HashSet::new(),
            turns: Arc::new(Turns::new(bound.max(1))),
            pass: 0,
        }
    }

    /// Starts a pass's sequence: the calls sent from now on, and those still waiting that it
    /// sends again, take their turns before every call an earlier pass placed, in the order sent.
    pub(crate) fn new_sequence(&mut self) {
        self.pass += 1;
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

    /// Sends `call` for `pod` of `node`, at `position` in the pass's sequence, once its turn
    /// comes; returns its task's id, or `None` when the pod's eviction is already sent (a call
    /// still waiting takes its new place).
    pub(crate) fn send<F>(
        &mut self,
        position: usize,
        node: &NodeName,
        group: &GroupName,
        pod: PodRef,
        call: F,
    ) -> Option<Id>
    where
        F: Future<Output = Answer> + Send + 'static,
    {
        let place = Place { pass: Reverse(self.pass), position };
        if !self.pods.insert(pod.uid.clone()) {
            self.turns.move_to(&pod.uid, place);
            return None;
        }
        let ticket = self.turns.take(&pod.uid, place);
        let (uid, on) = (pod.uid.clone(), node.clone());
        let handle = self.tasks.spawn(async move {
            let sent = tokio::time::Instant::now();
            let _turn = match ticket {
                Ticket::Now(turn) => turn,
                Ticket::Wait(next) => next
                    .await
                    .map_err(|_| WriteFailed { message: "its turn never came".into(), may_have_applied: false })?,
            };
            let turn_came = sent.elapsed();
            let outcome = call.await;
            let waited_ms = turn_came.as_millis();
            let call_ms = sent.elapsed().saturating_sub(turn_came).as_millis();
            tracing::debug!(node = %on, pod = uid, waited_ms, call_ms, ?outcome, "eviction answered");
            outcome
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
        self.turns.forget_waiting();
        self.sent.clear();
        self.pods.clear();
    }

    /// A joined task as an answer; a task that panicked answers as a failed call.
    fn answer(&mut self, joined: Result<(Id, Answer), tokio::task::JoinError>) -> Option<(Id, EvictionAnswer)> {
        let (id, outcome) = match joined {
            Ok((id, outcome)) => (id, outcome),
            Err(e) => {
                let message = format!("the eviction's task ended: {e}");
                (e.id(), Err(WriteFailed { message, may_have_applied: true }))
            }
        };
        let sent = self.sent.remove(&id)?;
        self.pods.remove(&sent.pod.uid);
        Some((id, EvictionAnswer { node: sent.node, group: sent.group, pod: sent.pod, outcome }))
    }
}

/// A waiting call's place: the latest pass first, then the order that pass sent in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Place {
    pass: Reverse<u64>,
    position: usize,
}

/// The turns to call, handed out by place rather than by arrival.
struct Turns {
    state: Mutex<TurnsState>,
}

struct TurnsState {
    free: usize,
    waiting: BTreeMap<Place, (String, oneshot::Sender<Turn>)>,
    /// Each waiting pod's place, by UID.
    places: HashMap<String, Place>,
}

/// A call's turn: given to the best-placed waiting call (or freed) when dropped, however its
/// task ends.
struct Turn {
    turns: Option<Arc<Turns>>,
}

/// A turn at once, or one to wait for.
enum Ticket {
    Now(Turn),
    Wait(oneshot::Receiver<Turn>),
}

impl Turns {
    fn new(bound: usize) -> Self {
        Turns { state: Mutex::new(TurnsState { free: bound, waiting: BTreeMap::new(), places: HashMap::new() }) }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, TurnsState> {
        // Nothing panics while holding it; a poisoned lock's state is still whole.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn take(self: &Arc<Self>, uid: &str, place: Place) -> Ticket {
        let mut state = self.state();
        if state.free > 0 {
            state.free -= 1;
            return Ticket::Now(Turn { turns: Some(self.clone()) });
        }
        let (tx, rx) = oneshot::channel();
        state.waiting.insert(place, (uid.to_owned(), tx));
        state.places.insert(uid.to_owned(), place);
        Ticket::Wait(rx)
    }

    /// Places `uid`'s call again, if it still waits for its turn.
    fn move_to(&self, uid: &str, place: Place) {
        let mut state = self.state();
        let Some(old) = state.places.get_mut(uid).map(|at| std::mem::replace(at, place)) else {
            return;
        };
        if let Some(waiter) = state.waiting.remove(&old) {
            state.waiting.insert(place, waiter);
        }
    }

    fn give_back(self: &Arc<Self>) {
        let mut state = self.state();
        while let Some((_, (uid, next))) = state.waiting.pop_first() {
            state.places.remove(&uid);
            match next.send(Turn { turns: Some(self.clone()) }) {
                Ok(()) => return,
                // Its task was aborted: the turn goes on to the next, not back through this lock.
                Err(mut unused) => drop(unused.turns.take()),
            }
        }
        state.free += 1;
    }

    fn forget_waiting(&self) {
        let mut state = self.state();
        state.waiting.clear();
        state.places.clear();
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        if let Some(turns) = self.turns.take() {
            turns.give_back();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::core::Made;

    fn pod(uid: &str) -> PodRef {
        PodRef { namespace: "default".into(), name: uid.into(), uid: uid.into(), owner: None }
    }

    async fn after(secs: u64, outcome: Answer) -> Answer {
        tokio::time::sleep(Duration::from_secs(secs)).await;
        outcome
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_call_is_neither_waited_for_past_the_pass_nor_sent_twice_and_its_answer_comes_later() {
        let mut calls = EvictionsInFlight::new(8);
        let (node, group) = (NodeName::from("n1"), GroupName::from("a"));
        let fast = calls.send(0, &node, &group, pod("p1"), after(0, Ok(Made::Done))).unwrap();
        let slow = calls.send(0, &node, &group, pod("p2"), after(5, Ok(Made::Gone))).unwrap();
        let start = tokio::time::Instant::now();
        let answers = calls.answered_by([fast, slow].into(), start + Duration::from_secs(1)).await;
        assert_eq!(start.elapsed(), Duration::from_secs(1));
        assert_eq!(answers.iter().map(|a| a.pod.uid.as_str()).collect::<Vec<_>>(), ["p1"]);
        assert!(calls.running(&pod("p2")));
        assert_eq!(calls.send(0, &node, &group, pod("p2"), after(0, Ok(Made::Done))), None, "never twice");

        tokio::time::advance(Duration::from_secs(4)).await;
        tokio::task::yield_now().await;
        let answers = calls.answered();
        assert_eq!(answers.len(), 1);
        assert!(matches!(answers[0].outcome, Ok(Made::Gone)));
        assert!(!calls.running(&pod("p2")) && calls.len() == 0);
    }

    #[tokio::test(start_paused = true)]
    async fn calls_take_their_turns_in_the_order_sent_at_most_the_bound_at_once() {
        let mut calls = EvictionsInFlight::new(2);
        let (node, group) = (NodeName::from("n1"), GroupName::from("a"));
        let ids: HashSet<Id> = (0..5)
            .filter_map(|k| calls.send(k, &node, &group, pod(&format!("p{k}")), after(1, Ok(Made::Done))))
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
    async fn a_freed_turn_goes_to_the_latest_pass_s_first_call_not_to_the_longest_waiting() {
        let mut calls = EvictionsInFlight::new(1);
        let (node, group) = (NodeName::from("n1"), GroupName::from("a"));
        let send = |calls: &mut EvictionsInFlight, position: usize, uid: &str| {
            calls.send(position, &node, &group, pod(uid), after(1, Ok(Made::Done)))
        };
        calls.new_sequence();
        let mut ids: HashSet<Id> =
            ["p0", "p1", "p2"].iter().enumerate().filter_map(|(k, u)| send(&mut calls, k, u)).collect();
        calls.new_sequence();
        ids.extend(send(&mut calls, 0, "p3"));
        assert_eq!(send(&mut calls, 1, "p2"), None, "still waiting: placed again, not sent twice");
        let start = tokio::time::Instant::now();
        let mut order = Vec::new();
        for second in 1..=4 {
            let answers = calls.answered_by(ids.clone(), start + Duration::from_millis(second * 1_000 + 500)).await;
            order.extend(answers.into_iter().map(|a| a.pod.uid));
        }
        assert_eq!(order, ["p0", "p3", "p2", "p1"]);
    }

    #[tokio::test(start_paused = true)]
    async fn an_aborted_waiting_call_passes_its_turn_on() {
        let mut calls = EvictionsInFlight::new(1);
        let (node, group) = (NodeName::from("n1"), GroupName::from("a"));
        calls.send(0, &node, &group, pod("p0"), after(1, Ok(Made::Done)));
        calls.send(0, &node, &group, pod("p1"), after(1, Ok(Made::Done)));
        calls.abort_all();
        let id = calls.send(0, &node, &group, pod("p2"), after(1, Ok(Made::Done))).unwrap();
        let start = tokio::time::Instant::now();
        let answers = calls.answered_by([id].into(), start + Duration::from_secs(5)).await;
        assert_eq!(answers.iter().map(|a| a.pod.uid.as_str()).collect::<Vec<_>>(), ["p2"]);
        assert_eq!(start.elapsed(), Duration::from_secs(1), "the aborted calls' turns came back at once");
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_whose_task_panicked_answers_as_failed_and_may_be_sent_again() {
        let mut calls = EvictionsInFlight::new(2);
        let (node, group) = (NodeName::from("n1"), GroupName::from("a"));
        let id = calls.send(0, &node, &group, pod("p1"), async { panic!("a bug in the call") }).unwrap();
        let answers = calls.answered_by([id].into(), tokio::time::Instant::now() + Duration::from_secs(1)).await;
        assert!(
            matches!(&answers[..], [a] if a.outcome.as_ref().is_err_and(|e| e.message.contains("task ended") && e.may_have_applied))
        );
        assert!(calls.send(0, &node, &group, pod("p1"), after(0, Ok(Made::Done))).is_some());
    }
}
