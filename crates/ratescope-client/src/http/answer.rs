//! What one attempt's exchange ended with, on any wire, and what every face (client,
//! middleware, proxy) reads from it the same way: the retry policy's view, the cause named in
//! events and errors, the status and what the rate-limit headers say; and the two steps that
//! follow an answer everywhere, the key's pause after a throttling answer and the wait before
//! a retry.

use std::time::Duration;

use http::StatusCode;
use tokio::time::Instant;

use super::events::EventKind;
use super::headers::RateLimitInfo;
use super::report::Reporter;
use super::retry::{Decision, GiveUpReason, Outcome, RetryPolicy, RetryReason};
use crate::engine::{Limiter, format_wait};

/// An attempt's end: a response (its status, what its headers say, and the rest as the face
/// holds it: the client its headers and body, the proxy the upstream response to stream), or
/// why none came.
#[derive(Debug)]
pub enum Answer<B> {
    /// A response came.
    Response {
        /// Its status.
        status: StatusCode,
        /// What its rate-limit headers say.
        info: RateLimitInfo,
        /// The rest, as the face holds it.
        held: B,
    },
    /// The connection failed (refused, reset, TLS); the message says how.
    ConnectionError(String),
    /// No response in time.
    Timeout,
}

impl<B> Answer<B> {
    /// The answer as the retry policy sees it.
    pub fn outcome(&self) -> Outcome<'_> {
        match self {
            Self::Response { status, info, .. } => {
                Outcome::Status { status: status.as_u16(), retry_after: info.retry_after }
            }
            Self::ConnectionError(message) => Outcome::ConnectionError { message },
            Self::Timeout => Outcome::Timeout,
        }
    }

    /// The response's status, if one came.
    pub fn status(&self) -> Option<StatusCode> {
        match self {
            Self::Response { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// What the response's rate-limit headers say, if one came.
    pub fn info(&self) -> Option<&RateLimitInfo> {
        match self {
            Self::Response { info, .. } => Some(info),
            _ => None,
        }
    }

    /// What the attempt ended with, for events and give-up reasons: "429 Too Many Requests",
    /// "connection error: …", "no response in time".
    pub fn cause(&self) -> String {
        match self.status() {
            Some(status) => status_text(status),
            None => outcome_text(&self.outcome()),
        }
    }

    /// After a throttling answer (429, 503, or headers saying the budget is spent), pauses
    /// the whole key of `limiter` and reports it as `KeyPaused`.
    pub fn pause_key(
        &self,
        limiter: Option<&Limiter>,
        decision: &Decision,
        retry: &RetryPolicy,
        attempt: u32,
        report: &Reporter<'_>,
    ) {
        if let (Some(limiter), Some(status), Some(info)) = (limiter, self.status(), self.info())
            && let Some((pause, reason)) = pause_on_throttle(limiter, status, info, decision, retry, attempt)
        {
            report.emit(EventKind::KeyPaused { pause, reason });
        }
    }
}

/// Sleeps the delay the retry policy chose after attempt `attempt`, reported first as
/// `RetryScheduled` with what the attempt ended with.
pub async fn wait_to_retry(report: &Reporter<'_>, attempt: u32, delay: Duration, reason: RetryReason, cause: String) {
    report.emit(EventKind::RetryScheduled { attempt, delay, reason, cause });
    tokio::time::sleep(delay).await;
}

/// After a throttling response (429, 503, or headers saying the budget is spent), pauses the
/// whole key: for the retry delay when one was decided, else Retry-After or the backoff, capped
/// by `max_retry_after`. Returns the pause and its reason, or `None` when the response was fine.
fn pause_on_throttle(
    limiter: &Limiter,
    status: StatusCode,
    info: &RateLimitInfo,
    decision: &Decision,
    retry: &RetryPolicy,
    attempt: u32,
) -> Option<(Duration, String)> {
    if !info.throttled && !matches!(status.as_u16(), 429 | 503) {
        return None;
    }
    // A wait beyond the maximum made the request fail at once; holding every other request of
    // the key for the maximum would only make each of them wait that long to fail the same way.
    if matches!(decision, Decision::GiveUp(GiveUpReason::RetryAfterTooLong { .. })) {
        return None;
    }
    let pause = match decision {
        Decision::Retry { delay, .. } => *delay,
        _ => info.retry_after.unwrap_or_else(|| retry.raw_backoff(attempt)),
    }
    .min(retry.max_retry_after);
    let reason = format!("{} from the server, pausing {}", status_text(status), format_wait(pause));
    limiter.pause_until(Instant::now() + pause, reason.clone());
    Some((pause, reason))
}

/// `429 Too Many Requests`; a status without a reason phrase as its number.
pub fn status_text(status: StatusCode) -> String {
    match status.canonical_reason() {
        Some(reason) => format!("{} {reason}", status.as_u16()),
        None => status.as_u16().to_string(),
    }
}

/// An outcome in words, as events and errors name it.
pub fn outcome_text(outcome: &Outcome<'_>) -> String {
    match outcome {
        Outcome::Status { status, .. } => status.to_string(),
        Outcome::ConnectionError { message } => format!("connection error: {message}"),
        Outcome::Timeout => "no response in time".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use http::HeaderMap;

    use super::*;

    fn response(status: u16, headers: &[(&str, &str)]) -> Answer<()> {
        let mut map = HeaderMap::new();
        for (name, value) in headers {
            map.insert(http::HeaderName::from_bytes(name.as_bytes()).unwrap(), value.parse().unwrap());
        }
        let info = RateLimitInfo::parse(Some(status), &map, None, SystemTime::UNIX_EPOCH);
        Answer::Response { status: StatusCode::from_u16(status).unwrap(), info, held: () }
    }

    #[test]
    fn an_answer_is_what_the_retry_policy_and_the_log_see() {
        let throttled = response(429, &[("retry-after", "7")]);
        assert_eq!(throttled.outcome(), Outcome::Status { status: 429, retry_after: Some(Duration::from_secs(7)) });
        assert_eq!(throttled.cause(), "429 Too Many Requests");
        assert_eq!(throttled.status(), Some(StatusCode::TOO_MANY_REQUESTS));
        assert!(throttled.info().is_some());

        let refused: Answer<()> = Answer::ConnectionError("connection refused".into());
        assert_eq!(refused.outcome(), Outcome::ConnectionError { message: "connection refused" });
        assert_eq!(refused.cause(), "connection error: connection refused");
        assert_eq!((refused.status(), refused.info().is_none()), (None, true));

        let silent: Answer<()> = Answer::Timeout;
        assert_eq!(silent.outcome(), Outcome::Timeout);
        assert_eq!(silent.cause(), "no response in time");
        assert_eq!(status_text(StatusCode::from_u16(599).unwrap()), "599");
    }
}
