//! The daemon's own budget of Kubernetes requests: `--kube-api-qps` sustained, `--kube-api-burst`
//! at once, shared by every request the client sends (each retry included). kube-rs has no
//! limiter of its own, and an interruption storm (hundreds of drains, thousands of evictions, an
//! Event per decision) would otherwise reach the API server as fast as the drainer can send: the
//! server's priority and fairness would throttle the booster with everyone else's requests. A
//! request over budget waits its turn, and is counted, so the operator sees when the budget and
//! not the cluster sets the pace.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use std::sync::atomic::{AtomicU64, Ordering};

use tower::{Layer, Service};

/// How many requests the client may send: `qps` a second on average, `burst` at once.
#[derive(Debug, Clone)]
pub struct RequestBudget {
    qps: f64,
    burst: f64,
    /// Requests that waited for the budget, since the start.
    throttled: Arc<AtomicU64>,
    bucket: Arc<Mutex<Bucket>>,
}

/// A token bucket that lends ahead: a request takes its token now and waits until the bucket
/// would have held it, so requests go out in the order they came and never more than the budget.
#[derive(Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl RequestBudget {
    /// `qps` requests a second on average, `burst` at once.
    pub fn new(qps: f64, burst: u32) -> RequestBudget {
        let burst = f64::from(burst.max(1));
        let bucket = Arc::new(Mutex::new(Bucket { tokens: burst, at: Instant::now() }));
        RequestBudget { qps: qps.max(f64::MIN_POSITIVE), burst, throttled: Arc::default(), bucket }
    }

    /// Requests that waited for the budget so far (`kube_requests_throttled_total`).
    pub fn throttled(&self) -> u64 {
        self.throttled.load(Ordering::Relaxed)
    }

    /// Takes one token; returns how long the request must wait for it.
    fn take(&self) -> Duration {
        let mut bucket = self.bucket.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        let refilled = bucket.tokens + now.duration_since(bucket.at).as_secs_f64() * self.qps;
        bucket.tokens = refilled.min(self.burst) - 1.0;
        bucket.at = now;
        if bucket.tokens >= 0.0 {
            return Duration::ZERO;
        }
        Duration::try_from_secs_f64(-bucket.tokens / self.qps).unwrap_or(Duration::MAX)
    }
}

impl<S> Layer<S> for RequestBudget {
    type Service = Budgeted<S>;

    fn layer(&self, inner: S) -> Budgeted<S> {
        Budgeted { inner, budget: self.clone() }
    }
}

/// A service whose requests wait for [`RequestBudget`].
#[derive(Debug, Clone)]
pub struct Budgeted<S> {
    inner: S,
    budget: RequestBudget,
}

impl<S, R> Service<R> for Budgeted<S>
where
    S: Service<R> + Clone + Send + 'static,
    S::Future: Send + 'static,
    R: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: R) -> Self::Future {
        let wait = self.budget.take();
        if wait.is_zero() {
            return Box::pin(self.inner.call(request));
        }
        self.budget.throttled.fetch_add(1, Ordering::Relaxed);
        // The ready service goes with the request; a fresh clone waits for the next one.
        let fresh = self.inner.clone();
        let mut ready = std::mem::replace(&mut self.inner, fresh);
        Box::pin(async move {
            tokio::time::sleep(wait).await;
            ready.call(request).await
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(qps: f64, burst: u32) -> RequestBudget {
        RequestBudget::new(qps, burst)
    }

    #[test]
    fn a_burst_goes_at_once_and_the_rest_waits_its_turn_in_order() {
        let b = budget(10.0, 3);
        let waits: Vec<Duration> = (0..6).map(|_| b.take()).collect();
        assert!(waits[..3].iter().all(Duration::is_zero), "{waits:?}");
        // The fourth waits about one token's time, and each later one a token more.
        for (k, w) in waits[3..].iter().enumerate() {
            let expected = 0.1 * (k as f64 + 1.0);
            assert!((w.as_secs_f64() - expected).abs() < 0.02, "request {}: waited {w:?}", k + 3);
        }
    }

    #[tokio::test]
    async fn waiting_requests_are_counted_and_still_answered() {
        let b = budget(1000.0, 1);
        let mut service = b.layer(tower::service_fn(|n: u32| async move { Ok::<_, std::convert::Infallible>(n * 2) }));
        let mut answers = Vec::new();
        for n in 0..3 {
            futures::future::poll_fn(|cx| service.poll_ready(cx)).await.unwrap();
            answers.push(service.call(n));
        }
        let answers: Vec<u32> = futures::future::join_all(answers).await.into_iter().map(Result::unwrap).collect();
        assert_eq!(answers, vec![0, 2, 4]);
        assert_eq!(b.throttled(), 2);
    }
}
