//! [`RetryOnThrottle`]: a `tower::retry::Policy` that sends a throttled request again after
//! the wait its answer asks for, and [`ReplayBody`]: which request bodies can be sent twice.

use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http_body_util::{Empty, Full};
use tokio::time::Sleep;
use tower::retry::Policy;

use crate::http::RetryPolicy;
use crate::http::headers::RateLimitInfo;
use crate::http::retry::{Decision, Outcome};

/// A request body that may be copied for another attempt. A body that cannot (a stream)
/// answers `None`, and its request is never retried.
pub trait ReplayBody: Sized {
    /// A copy of the body as it was before it was sent, or `None` when none can be made.
    fn try_clone_body(&self) -> Option<Self>;
}

impl<D: Clone> ReplayBody for Full<D> {
    fn try_clone_body(&self) -> Option<Self> {
        Some(self.clone())
    }
}

impl<D> ReplayBody for Empty<D> {
    fn try_clone_body(&self) -> Option<Self> {
        Some(Empty::new())
    }
}

impl ReplayBody for String {
    fn try_clone_body(&self) -> Option<Self> {
        Some(self.clone())
    }
}

impl ReplayBody for Bytes {
    fn try_clone_body(&self) -> Option<Self> {
        Some(self.clone())
    }
}

impl ReplayBody for hyper::body::Incoming {
    fn try_clone_body(&self) -> Option<Self> {
        None
    }
}

impl<D, E> ReplayBody for http_body_util::combinators::BoxBody<D, E> {
    fn try_clone_body(&self) -> Option<Self> {
        None
    }
}

impl<D, E> ReplayBody for http_body_util::combinators::UnsyncBoxBody<D, E> {
    fn try_clone_body(&self) -> Option<Self> {
        None
    }
}

/// Retries a response whose status the [`RetryPolicy`] retries (429 and 503 by default) after
/// the server's `Retry-After` when it sends one (it always wins over the backoff; one longer
/// than `max_retry_after` gives up at once), else after the policy's backoff with jitter;
/// at most `max_attempts` attempts in all; non-idempotent methods only when the policy says so.
/// A request whose body is not a [`ReplayBody`] copy is never retried; an error (no response)
/// is never retried either. Place it outside the rate-limit layer, so each retry waits for
/// the limiter again:
/// `ServiceBuilder::new().layer(RetryLayer::new(RetryOnThrottle::default())).layer(rate_limit)`.
#[derive(Debug, Clone)]
pub struct RetryOnThrottle {
    policy: RetryPolicy,
    /// Attempts made of the current request (tower clones the policy per request).
    attempt: u32,
    previous_delay: Option<Duration>,
}

impl RetryOnThrottle {
    /// Retries as `policy` says.
    pub fn new(policy: RetryPolicy) -> Self {
        Self { policy, attempt: 1, previous_delay: None }
    }

    /// The policy it follows.
    pub fn policy(&self) -> &RetryPolicy {
        &self.policy
    }

    /// What to do after the current attempt ended with `status` and `headers`.
    fn decide(&mut self, method: &http::Method, status: http::StatusCode, headers: &http::HeaderMap) -> Decision {
        let info = RateLimitInfo::parse(Some(status.as_u16()), headers, None, SystemTime::now());
        let outcome = Outcome::Status { status: status.as_u16(), retry_after: info.retry_after };
        // The thread's generator: tower clones the policy per request, so a stored one would
        // give every request the same jitter.
        self.policy.decide(self.attempt, &outcome, method, self.previous_delay, &mut rand::rng())
    }
}

impl Default for RetryOnThrottle {
    /// [`RetryPolicy::default`]: 5 attempts, 429 and 503, full jitter, `Retry-After` up to 5 minutes.
    fn default() -> Self {
        Self::new(RetryPolicy::default())
    }
}

impl<B: ReplayBody, RB, E> Policy<http::Request<B>, http::Response<RB>, E> for RetryOnThrottle {
    type Future = Sleep;

    fn retry(&mut self, request: &mut http::Request<B>, result: &mut Result<http::Response<RB>, E>) -> Option<Sleep> {
        let response = result.as_ref().ok()?;
        match self.decide(request.method(), response.status(), response.headers()) {
            Decision::Retry { delay, .. } => {
                self.attempt += 1;
                self.previous_delay = Some(delay);
                Some(tokio::time::sleep(delay))
            }
            Decision::Done | Decision::GiveUp(_) => None,
        }
    }

    fn clone_request(&mut self, request: &http::Request<B>) -> Option<http::Request<B>> {
        let body = request.body().try_clone_body()?;
        let mut copy = http::Request::new(body);
        *copy.method_mut() = request.method().clone();
        *copy.uri_mut() = request.uri().clone();
        *copy.version_mut() = request.version();
        *copy.headers_mut() = request.headers().clone();
        *copy.extensions_mut() = request.extensions().clone();
        Some(copy)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(status: u16, retry_after: Option<&str>) -> Result<http::Response<()>, ()> {
        let mut response = http::Response::builder().status(status);
        if let Some(value) = retry_after {
            response = response.header("retry-after", value);
        }
        Ok(response.body(()).unwrap())
    }

    fn delay(
        policy: &mut RetryOnThrottle,
        request: &mut http::Request<String>,
        status: u16,
        after: Option<&str>,
    ) -> Option<Duration> {
        let sleep = Policy::<_, _, ()>::retry(policy, request, &mut answer(status, after))?;
        Some(sleep.deadline() - tokio::time::Instant::now())
    }

    #[tokio::test(start_paused = true)]
    async fn retry_after_wins_and_the_policy_bounds_the_attempts() {
        let mut policy = RetryOnThrottle::new(RetryPolicy { max_attempts: 3, ..RetryPolicy::default() });
        let mut request = http::Request::new(String::from("body"));
        assert_eq!(delay(&mut policy, &mut request, 429, Some("7")), Some(Duration::from_secs(7)));
        assert_eq!(delay(&mut policy, &mut request, 503, Some("2")), Some(Duration::from_secs(2)));
        assert_eq!(delay(&mut policy, &mut request, 429, Some("1")), None, "3 attempts made");
        let mut fresh = RetryOnThrottle::default();
        assert_eq!(delay(&mut fresh, &mut request, 200, None), None);
        assert_eq!(delay(&mut fresh, &mut request, 500, None), None, "not a status the policy retries");
        assert_eq!(delay(&mut fresh, &mut request, 429, Some("3600")), None, "longer than max_retry_after");
        let backoff = delay(&mut fresh, &mut request, 429, None).unwrap();
        assert!(backoff <= RetryPolicy::default().base, "the first backoff with full jitter: {backoff:?}");
        let errored: &mut Result<http::Response<()>, ()> = &mut Err(());
        assert!(Policy::retry(&mut fresh, &mut request, errored).is_none(), "no response, no retry");
    }

    #[test]
    fn only_a_copyable_body_makes_a_retryable_request() {
        let mut policy = RetryOnThrottle::default();
        let mut request =
            http::Request::post("http://h/x").header("x-a", "1").body(Full::new(Bytes::from("b"))).unwrap();
        request.extensions_mut().insert(crate::engine::Priority::High);
        let copy = Policy::<_, http::Response<()>, ()>::clone_request(&mut policy, &request).unwrap();
        assert_eq!((copy.method(), copy.uri()), (&http::Method::POST, request.uri()));
        assert_eq!(copy.headers()["x-a"], "1");
        assert_eq!(copy.extensions().get(), Some(&crate::engine::Priority::High));
        use http_body_util::BodyExt;
        let streamed = http::Request::new(http_body_util::combinators::BoxBody::new(
            Full::new(Bytes::from("b")).map_err(|never| match never {}),
        ));
        assert!(Policy::<_, http::Response<()>, ()>::clone_request(&mut policy, &streamed).is_none());
    }
}
