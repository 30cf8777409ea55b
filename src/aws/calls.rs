//! Counts every AWS operation and attempt as it leaves, through an SDK interceptor, and the
//! errors and throttles the adapters see: the numbers behind the metrics and the call-count tests.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use aws_sdk_autoscaling::config::interceptors::{BeforeTransmitInterceptorContextRef, FinalizerInterceptorContextRef};
use aws_sdk_autoscaling::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::orchestrator::Metadata;
use serde::Serialize;

use crate::ports::FailureKind;

/// What one operation did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct OperationStats {
    /// Operations made (each counted once, whatever its retries).
    pub calls: u64,
    /// HTTP attempts sent (retries included).
    pub attempts: u64,
    /// Operations that failed in the end.
    pub errors: u64,
    /// Of those, throttled.
    pub throttles: u64,
    /// Writes `--dry-run` kept back.
    pub dry_run_skips: u64,
}

#[derive(Debug, Default)]
struct Inner {
    by_operation: BTreeMap<String, OperationStats>,
    /// Send times of the most recent attempts, kept only when a measurement asks for them.
    sent: VecDeque<(String, Instant)>,
    sent_kept: usize,
}

/// Shared statistics, keyed by operation name (`SetDesiredCapacity`, …).
#[derive(Debug, Clone, Default)]
pub struct CallStats(Arc<Mutex<Inner>>);

impl CallStats {
    /// The interceptor to install on every client.
    pub(crate) fn interceptor(&self) -> CountingInterceptor {
        CountingInterceptor(self.clone())
    }

    /// A copy of the counts.
    pub fn snapshot(&self) -> BTreeMap<String, OperationStats> {
        self.lock().by_operation.clone()
    }

    /// Operations started under `name`.
    pub fn calls(&self, name: &str) -> u64 {
        self.lock().by_operation.get(name).map_or(0, |s| s.calls)
    }

    /// Keeps the send times of the last `attempts` attempts of all operations, for reaction-time
    /// measurements (`benches/reaction.rs`); the daemon keeps none.
    pub fn keep_send_times(&self, attempts: usize) {
        self.lock().sent_kept = attempts;
    }

    /// When each recent attempt of `name` left, oldest first (see [`CallStats::keep_send_times`]).
    pub fn sent_at(&self, name: &str) -> Vec<Instant> {
        self.lock().sent.iter().filter(|(n, _)| n == name).map(|(_, t)| *t).collect()
    }

    /// Records a failure the adapter saw.
    pub(crate) fn record_failure(&self, operation: &str, kind: FailureKind) {
        let mut inner = self.lock();
        let stats = inner.by_operation.entry(operation.to_string()).or_default();
        stats.errors += 1;
        if kind == FailureKind::Throttled {
            stats.throttles += 1;
        }
    }

    /// Records a write kept back by `--dry-run`.
    pub(crate) fn record_dry_run(&self, operation: &str) {
        self.lock().by_operation.entry(operation.to_string()).or_default().dry_run_skips += 1;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic elsewhere while holding the lock leaves counts that are still worth reading.
        self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Counts operations and attempts per operation name.
#[derive(Debug)]
pub(crate) struct CountingInterceptor(CallStats);

fn operation(cfg: &ConfigBag) -> String {
    cfg.load::<Metadata>().map_or_else(|| "unknown".to_string(), |m| m.name().to_string())
}

impl Intercept for CountingInterceptor {
    fn name(&self) -> &'static str {
        "spots-booster call counter"
    }

    // The operation's name is not in the bag yet before execution; after it, every operation
    // passes here exactly once, failed or not.
    fn read_after_execution(
        &self,
        _context: &FinalizerInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let name = operation(cfg);
        self.0.lock().by_operation.entry(name).or_default().calls += 1;
        Ok(())
    }

    fn read_before_transmit(
        &self,
        _context: &BeforeTransmitInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let name = operation(cfg);
        let mut inner = self.0.lock();
        inner.by_operation.entry(name.clone()).or_default().attempts += 1;
        if inner.sent_kept > 0 {
            if inner.sent.len() >= inner.sent_kept {
                inner.sent.pop_front();
            }
            inner.sent.push_back((name, Instant::now()));
        }
        Ok(())
    }
}
