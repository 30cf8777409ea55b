//! One supervisor for every long-lived task of the daemon (watches, workers, elector, admin
//! server). A task that ends before shutdown, or panics, is a daemon that no longer does its job
//! while it may still look healthy: the supervisor reports it by name, and `run` exits non-zero so
//! Kubernetes restarts the pod.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use thiserror::Error;
use tokio::task::{Id, JoinSet};
use tokio::time::Instant;

/// How long a worker may go without a beat before `/livez` fails: longer than any pass takes
/// with every AWS and Kubernetes call at its deadline, so only a wedged worker exceeds it.
pub(crate) const WORKER_SILENCE_LIMIT: Duration = Duration::from_secs(300);

/// When each worker last showed progress. A task that is alive but stuck (a lock never released,
/// a call that never returns) is not caught by the supervisor; its silence is, through `/livez`.
#[derive(Debug, Clone, Default)]
pub(crate) struct Heartbeats(Arc<Mutex<BTreeMap<&'static str, (Instant, Duration)>>>);

impl Heartbeats {
    /// Starts watching `name`, which must beat at least every `limit`.
    pub fn register(&self, name: &'static str, limit: Duration) -> Heartbeat {
        self.lock().insert(name, (Instant::now(), limit));
        Heartbeat { beats: self.clone(), name }
    }

    /// The workers silent past their limit, with how long, as one line; `Ok` when none is.
    pub fn check(&self) -> Result<(), String> {
        let now = Instant::now();
        let silent: Vec<String> = self
            .lock()
            .iter()
            .filter(|(_, (last, limit))| now.saturating_duration_since(*last) > *limit)
            .map(|(name, (last, _))| format!("{name} silent for {}s", now.saturating_duration_since(*last).as_secs()))
            .collect();
        if silent.is_empty() {
            Ok(())
        } else {
            Err(silent.join(", "))
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<&'static str, (Instant, Duration)>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// One worker's beat.
#[derive(Debug, Clone)]
pub(crate) struct Heartbeat {
    beats: Heartbeats,
    name: &'static str,
}

impl Heartbeat {
    /// Notes progress now.
    pub(crate) fn beat(&self) {
        if let Some((last, _)) = self.beats.lock().get_mut(self.name) {
            *last = Instant::now();
        }
    }
}

/// Whether a task is expected to end once shutdown is asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lifetime {
    /// Runs until the process stops (watches, the admin server): ending is always a failure.
    Forever,
    /// Stops by itself on shutdown (workers, the elector): shutdown waits for it.
    UntilShutdown,
}

/// A task that ended when it should not have.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[error("task {task} {how}")]
pub struct TaskEnded {
    /// The task's name.
    pub task: &'static str,
    /// `panicked: <message>`, `returned` or `was cancelled`.
    pub how: String,
}

/// The daemon's tasks, by name.
#[derive(Debug, Default)]
pub(crate) struct Supervisor {
    tasks: JoinSet<()>,
    names: HashMap<Id, (&'static str, Lifetime)>,
}

impl Supervisor {
    /// Runs `task` under supervision.
    pub fn spawn(&mut self, name: &'static str, lifetime: Lifetime, task: impl Future<Output = ()> + Send + 'static) {
        let handle = self.tasks.spawn(task);
        self.names.insert(handle.id(), (name, lifetime));
    }

    /// Waits for the first task to end, and says which and how. Pending forever when there is
    /// no task.
    pub(crate) async fn first_end(&mut self) -> TaskEnded {
        let Some(ended) = self.tasks.join_next_with_id().await else {
            return std::future::pending().await;
        };
        let (id, how) = match ended {
            Ok((id, ())) => (id, "returned".to_string()),
            Err(e) if e.is_panic() => {
                let id = e.id();
                let payload = e.into_panic();
                let message = payload
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_string())
                    .or_else(|| payload.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "(no message)".to_string());
                (id, format!("panicked: {message}"))
            }
            Err(e) => (e.id(), "was cancelled".to_string()),
        };
        let (task, _) = self.names.remove(&id).unwrap_or(("unknown", Lifetime::Forever));
        TaskEnded { task, how }
    }

    /// After shutdown was asked for: waits until every [`Lifetime::UntilShutdown`] task has
    /// ended, then stops the rest. Returns the tasks that failed on the way (panicked).
    pub(crate) async fn shut_down(mut self) -> Vec<TaskEnded> {
        let mut failed = Vec::new();
        while self.names.values().any(|(_, lifetime)| *lifetime == Lifetime::UntilShutdown) {
            let ended = self.first_end().await;
            if ended.how != "returned" {
                failed.push(ended);
            }
        }
        self.tasks.shutdown().await;
        failed
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_silent_worker_fails_the_liveness_check_by_name() {
        let beats = Heartbeats::default();
        let scaler = beats.register("worker:scaler", Duration::from_secs(60));
        let _drainer = beats.register("worker:drainer", Duration::from_secs(60));
        tokio::time::sleep(Duration::from_secs(45)).await;
        scaler.beat();
        assert_eq!(beats.check(), Ok(()));
        tokio::time::sleep(Duration::from_secs(30)).await;
        assert_eq!(beats.check(), Err("worker:drainer silent for 75s".to_string()));
    }

    #[tokio::test]
    async fn a_panic_or_an_early_return_is_reported_by_name() {
        let mut s = Supervisor::default();
        s.spawn("watch:pods", Lifetime::Forever, std::future::pending());
        s.spawn("worker:drainer", Lifetime::UntilShutdown, async { panic!("injected") });
        assert_eq!(s.first_end().await, TaskEnded { task: "worker:drainer", how: "panicked: injected".into() });
        s.spawn("admin-server", Lifetime::Forever, async {});
        assert_eq!(s.first_end().await, TaskEnded { task: "admin-server", how: "returned".into() });
        let still = tokio::time::timeout(Duration::from_millis(50), s.first_end()).await;
        assert!(still.is_err(), "the pending watch is still running");
    }

    #[tokio::test]
    async fn shutdown_waits_for_the_workers_and_stops_the_watches() {
        let mut s = Supervisor::default();
        let (stop, mut stopped) = tokio::sync::watch::channel(false);
        s.spawn("watch:nodes", Lifetime::Forever, std::future::pending());
        s.spawn("worker:scaler", Lifetime::UntilShutdown, async move {
            let _ = stopped.changed().await;
        });
        stop.send(true).unwrap();
        let failed = tokio::time::timeout(Duration::from_secs(1), s.shut_down()).await.expect("shut down");
        assert!(failed.is_empty());
    }
}
