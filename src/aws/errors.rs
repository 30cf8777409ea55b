//! Turns SDK errors into the ports' SDK-free [`AwsFailure`], classified for retries and metrics.

use aws_sdk_autoscaling::error::ProvideErrorMetadata;
use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use aws_smithy_runtime_api::client::result::SdkError;

use crate::ports::{AwsFailure, FailureKind};

const THROTTLE_CODES: &[&str] = &[
    "Throttling",
    "ThrottlingException",
    "RequestLimitExceeded",
    "TooManyRequestsException",
    "RequestThrottled",
    "SlowDown",
];

/// Classifies an SDK error by its code and HTTP status.
pub fn failure<E>(err: SdkError<E, HttpResponse>) -> AwsFailure
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    let code = ProvideErrorMetadata::code(&err).map(str::to_string);
    let message = ProvideErrorMetadata::message(&err).map(str::to_string);
    let kind = match &err {
        SdkError::TimeoutError(_) | SdkError::DispatchFailure(_) => FailureKind::Unavailable,
        SdkError::ConstructionFailure(_) => FailureKind::Other,
        _ => classify(code.as_deref(), err.raw_response().map(|r| r.status().as_u16())),
    };
    AwsFailure { code, message, kind, source: Box::new(err) }
}

/// The kind of a failure from its error code, or its HTTP status when it has no code.
pub(crate) fn classify(code: Option<&str>, status: Option<u16>) -> FailureKind {
    match code {
        Some(c) if THROTTLE_CODES.contains(&c) => FailureKind::Throttled,
        Some(c)
            if c.starts_with("AccessDenied")
                || c.starts_with("UnauthorizedOperation")
                || c.contains("Token")
                || c == "InvalidClientTokenId" =>
        {
            FailureKind::Auth
        }
        Some("ServiceUnavailable" | "InternalFailure" | "InternalError" | "ServiceUnavailableException") => {
            FailureKind::Unavailable
        }
        Some(c) if c.starts_with("Validation") || c.starts_with("Invalid") || c.ends_with("NotFound") => {
            FailureKind::Validation
        }
        _ => match status {
            Some(429) => FailureKind::Throttled,
            Some(401 | 403) => FailureKind::Auth,
            Some(s) if s >= 500 => FailureKind::Unavailable,
            Some(400) => FailureKind::Validation,
            _ => FailureKind::Other,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_win_over_statuses() {
        assert_eq!(classify(Some("Throttling"), Some(400)), FailureKind::Throttled);
        assert_eq!(classify(Some("RequestLimitExceeded"), Some(503)), FailureKind::Throttled);
        assert_eq!(classify(Some("ValidationError"), Some(400)), FailureKind::Validation);
        assert_eq!(classify(Some("AccessDenied"), Some(403)), FailureKind::Auth);
        assert_eq!(classify(Some("InvalidInstanceID.NotFound"), Some(400)), FailureKind::Validation);
        assert_eq!(classify(None, Some(500)), FailureKind::Unavailable);
        assert_eq!(classify(None, Some(429)), FailureKind::Throttled);
        assert_eq!(classify(None, None), FailureKind::Other);
    }
}
