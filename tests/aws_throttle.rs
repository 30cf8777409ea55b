//! Where moto cannot go: throttling. A recording server on loopback answers every request with
//! AWS's `Throttling` error; the adapter must retry, then fail with a typed,
//! categorised error, and count calls, attempts, errors and throttles.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use aws_config::retry::RetryConfig;
use aws_loopback::serve;
use spots_booster::aws::AwsPorts;
use spots_booster::ports::{AutoScaling, AwsError, DesiredWrite, FailureKind};

use crate::support::aws_loopback;

const THROTTLED: &str = r#"<ErrorResponse xmlns="http://autoscaling.amazonaws.com/doc/2011-01-01/"><Error><Type>Sender</Type><Code>Throttling</Code><Message>Rate exceeded</Message></Error><RequestId>7a62c49f-347e-4fc4-9331-6e8eEXAMPLE</RequestId></ErrorResponse>"#;

/// Serves `THROTTLED` to every request, counting them; returns the endpoint and the count.
fn throttling_server() -> (String, Arc<AtomicUsize>) {
    let seen = Arc::new(AtomicUsize::new(0));
    let counter = seen.clone();
    let endpoint = serve(move |_| {
        counter.fetch_add(1, Ordering::SeqCst);
        ("400 Bad Request", THROTTLED.to_string())
    });
    (endpoint, seen)
}

#[tokio::test]
async fn throttles_are_retried_then_reported_as_throttled() {
    let (endpoint, seen) = throttling_server();
    let config = aws_loopback::sdk_loader(endpoint)
        // Standard mode: adaptive mode's client-side rate limiter (what `load_sdk_config` sets,
        // see its unit test) would add tens of seconds of deliberate pacing after the throttles.
        .retry_config(RetryConfig::standard().with_max_attempts(3).with_initial_backoff(Duration::from_millis(5)))
        .load()
        .await;
    let aws = AwsPorts::new(&config, false);

    let err =
        aws.autoscaling.raise_desired(&[DesiredWrite { group: "a".into(), expected: 1, to: 2 }]).await.unwrap_err();
    assert!(matches!(&err, AwsError::DescribeGroups(f) if f.kind == FailureKind::Throttled), "{err:?}");
    assert_eq!(err.category(), "throttled");
    assert_eq!(seen.load(Ordering::SeqCst), 3, "adaptive retry made every attempt");

    let stats = &aws.stats.snapshot()["DescribeAutoScalingGroups"];
    assert_eq!((stats.calls, stats.attempts, stats.errors, stats.throttles), (1, 3, 1, 1));
    assert_eq!(aws.stats.calls("SetDesiredCapacity"), 0, "no write without its guard read");
}
