//! The retry layer of the daemon's Kubernetes client, in place of kube's default.
//!
//! kube 5's default (`Config::default_retry`) retries every 429, 503 and 504 up to 15 times,
//! honouring `Retry-After`. For an eviction a 429 is an answer, not a fault: a PodDisruptionBudget
//! allows no disruption now, and kube-apiserver says so with `Retry-After: 10`. Retried inside the
//! call, one refusal holds the call for minutes, and with it the drainer's round, its other nodes
//! and `--drain-timeout`. Here a 429 on an eviction comes straight back, so the drainer's own
//! per-node backoff decides; any other 429 (API priority and fairness) is retried honouring a
//! short `Retry-After`; 503, 504 and transport errors on calls that may be repeated are retried
//! with jittered exponential backoff. A few attempts at most: every call ends within seconds.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

use http::{Method, Request, Response, StatusCode};
use kube::client::Body;
use tower::retry::Policy;
use tower::BoxError;

/// Retries after the first attempt, at most.
pub const MAX_RETRIES: u32 = 3;
/// First backoff before jitter; it doubles per attempt.
const BASE_DELAY: Duration = Duration::from_millis(200);
/// Longest backoff, and the longest `Retry-After` honoured.
const MAX_DELAY: Duration = Duration::from_secs(2);

/// The retry policy of every request the daemon's client sends.
#[derive(Debug, Clone, Default)]
pub(crate) struct ApiRetry {
    attempts: u32,
}

/// Whether the request is an eviction (`POST …/pods/NAME/eviction`).
fn is_eviction<B>(req: &Request<B>) -> bool {
    req.method() == Method::POST && req.uri().path().ends_with("/eviction")
}

/// Whether sending the request twice does no harm: reads, replacements, patches, deletes, and
/// evictions (a second eviction of an evicted pod is answered 404 or 429).
fn repeatable<B>(req: &Request<B>) -> bool {
    matches!(*req.method(), Method::GET | Method::HEAD | Method::PUT | Method::PATCH | Method::DELETE)
        || is_eviction(req)
}

/// Full jitter over the doubling backoff: uniformly within [delay/2, delay].
fn backoff(attempt: u32) -> Duration {
    let delay = BASE_DELAY.saturating_mul(1u32.checked_shl(attempt).unwrap_or(u32::MAX)).min(MAX_DELAY);
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u32(attempt);
    let half = delay / 2;
    let spread = u64::try_from(half.as_millis()).unwrap_or(u64::MAX).max(1);
    half + Duration::from_millis(hasher.finish() % spread)
}

/// The server's `Retry-After` in whole seconds, capped at [`MAX_DELAY`].
fn retry_after<B>(response: &Response<B>) -> Option<Duration> {
    let seconds: u64 = response.headers().get(http::header::RETRY_AFTER)?.to_str().ok()?.trim().parse().ok()?;
    Some(Duration::from_secs(seconds).min(MAX_DELAY))
}

impl ApiRetry {
    /// How long to wait before the next attempt, or `None` to hand the answer back as it is.
    fn delay<Res>(&self, req: &Request<Body>, result: &Result<Response<Res>, BoxError>) -> Option<Duration> {
        if self.attempts >= MAX_RETRIES {
            return None;
        }
        match result {
            Ok(response) => match response.status() {
                // A PodDisruptionBudget's refusal: the drainer backs off per node.
                StatusCode::TOO_MANY_REQUESTS if is_eviction(req) => None,
                StatusCode::TOO_MANY_REQUESTS => Some(retry_after(response).unwrap_or_else(|| backoff(self.attempts))),
                StatusCode::SERVICE_UNAVAILABLE | StatusCode::GATEWAY_TIMEOUT if repeatable(req) => {
                    Some(retry_after(response).unwrap_or_else(|| backoff(self.attempts)))
                }
                _ => None,
            },
            Err(_) if repeatable(req) => Some(backoff(self.attempts)),
            Err(_) => None,
        }
    }
}

impl<Res> Policy<Request<Body>, Response<Res>, BoxError> for ApiRetry {
    type Future = tokio::time::Sleep;

    fn retry(&mut self, req: &mut Request<Body>, result: &mut Result<Response<Res>, BoxError>) -> Option<Self::Future> {
        let delay = self.delay(req, result)?;
        self.attempts += 1;
        Some(tokio::time::sleep(delay))
    }

    fn clone_request(&mut self, req: &Request<Body>) -> Option<Request<Body>> {
        // Streaming bodies cannot be replayed; kube sends every request body in one piece.
        let body = req.body().try_clone()?;
        let mut clone = Request::builder().method(req.method().clone()).uri(req.uri().clone()).version(req.version());
        if let Some(headers) = clone.headers_mut() {
            headers.extend(req.headers().clone());
        }
        let mut clone = clone.body(body).ok()?;
        *clone.extensions_mut() = req.extensions().clone();
        Some(clone)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(method: Method, path: &str) -> Request<Body> {
        Request::builder().method(method).uri(path).body(Body::empty()).unwrap()
    }

    fn answer(status: u16, retry_after: Option<&str>) -> Result<Response<()>, BoxError> {
        let mut r = Response::builder().status(status);
        if let Some(v) = retry_after {
            r = r.header("Retry-After", v);
        }
        Ok(r.body(()).unwrap())
    }

    const EVICTION: &str = "/api/v1/namespaces/shop/pods/web-0/eviction";

    #[test]
    fn a_pdb_refusal_comes_straight_back() {
        let policy = ApiRetry::default();
        assert_eq!(policy.delay(&request(Method::POST, EVICTION), &answer(429, Some("10"))), None);
        assert_eq!(policy.delay(&request(Method::POST, EVICTION), &answer(500, None)), None, "two PDBs: an error");
        assert!(policy.delay(&request(Method::POST, EVICTION), &answer(503, None)).is_some());
    }

    #[test]
    fn other_throttles_honour_a_short_retry_after_and_writes_are_not_repeated_blindly() {
        let policy = ApiRetry::default();
        let get = request(Method::GET, "/api/v1/nodes");
        assert_eq!(policy.delay(&get, &answer(429, Some("1"))), Some(Duration::from_secs(1)));
        assert_eq!(policy.delay(&get, &answer(429, Some("600"))), Some(MAX_DELAY), "capped");
        let create = request(Method::POST, "/api/v1/namespaces/spots/configmaps");
        assert_eq!(policy.delay(&create, &answer(503, None)), None);
        assert!(policy.delay(&create, &Err::<Response<()>, BoxError>("connection reset".into())).is_none());
        assert!(policy.delay(&get, &Err::<Response<()>, BoxError>("connection reset".into())).is_some());
        assert_eq!(policy.delay(&get, &answer(404, None)), None);
    }

    #[test]
    fn attempts_and_delays_are_bounded() {
        let get = request(Method::GET, "/api/v1/nodes");
        let spent = ApiRetry { attempts: MAX_RETRIES };
        assert_eq!(spent.delay(&get, &answer(503, None)), None);
        for attempt in 0..40 {
            let d = backoff(attempt);
            assert!(d <= MAX_DELAY && d >= BASE_DELAY / 2, "{attempt}: {d:?}");
        }
    }
}
