//! One call through the layer as named steps, top to bottom: `prepare` (the key's limiter,
//! lane and cost from the request), `admit` (the limiter, or shedding), `sent`, then
//! `answered` (the rate-limit headers read, adaptive learning, a pause on 429/503) or `failed`.

use std::convert::Infallible;
use std::time::Duration;

use http::{HeaderMap, Method, StatusCode};
use tokio::time::Instant;
use url::Url;

use super::builder::LayerState;
use super::error::RateLimitError;
use crate::engine::{Cost, Limiter, Overload, Permit, Priority, estimated_wait, format_wait};
use crate::http::admission::{AdmissionStep, Refusal};
use crate::http::answer::Answer;
use crate::http::client::ResponseHead;
use crate::http::cost;
use crate::http::events::EventKind;
use crate::http::extensions::limits_of;
use crate::http::policy::Routed;
use crate::http::report::Reporter;
use crate::http::retry::{Decision, GiveUpReason, RetryPolicy};
use crate::http::{Adaptive, Policy};

/// A call on its way: what was decided about it before admission.
pub(super) struct Call<'a> {
    state: &'a LayerState,
    limiter: Option<Limiter>,
    adaptive: bool,
    retry: &'a RetryPolicy,
    priority: Priority,
    estimate: Cost,
    method: Method,
    path: String,
    report: Reporter<'a>,
    started: Instant,
    sent_at: Instant,
}

impl<'a> Call<'a> {
    /// The request's key (its URI's host, port and path; a URI without a host has none), lane
    /// and cost. An adaptive key gets its mirror before its first admission.
    pub(super) fn prepare<B>(state: &'a LayerState, request: &http::Request<B>) -> Self {
        let Routed { limiter, adaptive, retry, report } =
            state.policy.routed(limiter_of(&state.policy, request.uri()), &state.next_id);
        let (priority, requests, rules) = limits_of(request.extensions());
        // The body is the caller's stream: estimates that read it see none.
        let estimate = cost::estimate(requests, &rules, None);
        let now = Instant::now();
        Self {
            state,
            limiter,
            adaptive,
            retry,
            priority,
            estimate,
            method: request.method().clone(),
            path: request.uri().path().to_owned(),
            report,
            started: now,
            sent_at: now,
        }
    }

    fn emit(&self, kind: EventKind) {
        self.report.emit(kind);
    }

    /// Waits for the key's limiter (lane, budgets, concurrency slot) in the admission step
    /// every face shares, or is refused by shedding. A request without a limiter goes
    /// straight on, with no permit.
    pub(super) async fn admit(&self) -> Result<Option<Permit>, RateLimitError<Infallible>> {
        let Some(limiter) = &self.limiter else { return Ok(None) };
        let state = self.state;
        let step = AdmissionStep {
            limiter,
            priority: self.priority,
            estimate: &self.estimate,
            shedding: state.shedding.as_ref().map(|shedding| (&state.queues, shedding)),
            shared: None,
        };
        let refusal = match step.admit(1, &self.report).await {
            Ok(admission) => return Ok(admission.permit),
            Err(refusal) => refusal,
        };
        let key = limiter.key().to_owned();
        let expected = || estimated_wait(&limiter.snapshot(), &limiter.config(), refusal.ahead());
        let err = match &refusal {
            Refusal::Limiter(source) | Refusal::Shed(Overload::Invalid(source)) => {
                RateLimitError::Acquire { key, source: source.clone() }
            }
            Refusal::Shed(Overload::QueueFull { waiting }) => {
                RateLimitError::Shed { key, wait: expected(), reason: format!("{waiting} requests already wait") }
            }
            Refusal::Shed(Overload::TooLong { expected, .. }) => {
                let bound = state.shedding.as_ref().map_or(Duration::ZERO, |shedding| shedding.max_queue_wait);
                let reason = format!("the wait ahead is longer than {}", format_wait(bound));
                RateLimitError::Shed { key, wait: *expected, reason }
            }
            Refusal::Shed(Overload::Waited { err, .. }) => {
                RateLimitError::Shed { key, wait: expected(), reason: err.to_string() }
            }
            // The layer has no shared budget.
            Refusal::Shared(_) | Refusal::SharedTooSlow => {
                RateLimitError::Shed { key, wait: expected(), reason: refusal.to_string() }
            }
        };
        self.emit(EventKind::Failed { error: err.to_string(), attempts: 0 });
        Err(err)
    }

    /// The request goes to the inner service now.
    pub(super) fn sent(&mut self) {
        self.sent_at = Instant::now();
        self.emit(EventKind::Sent { attempt: 1, method: self.method.to_string(), path: self.path.clone() });
    }

    /// Reads the answer's head as the client does: its rate-limit headers (any dialect), what
    /// an adaptive key learns from them, and after a 429/503 (or headers saying the budget is
    /// spent) the whole key paused for `Retry-After` (else the backoff), capped by the retry
    /// policy's `max_retry_after`. A `Retry-After` beyond that cap pauses nothing: the caller
    /// is expected to give up rather than hold every request of the key that long.
    pub(super) fn answered(&self, status: StatusCode, headers: &HeaderMap, permit: Option<&Permit>) {
        let service_time = self.sent_at.elapsed();
        let head = ResponseHead { status, headers, body: None };
        let mirror = self.limiter.as_ref().filter(|_| self.adaptive).map(|limiter| (limiter, permit));
        let info = head.interpret(1, service_time, &self.report, mirror);
        let Some(limiter) = &self.limiter else {
            self.finished(status);
            return;
        };
        let decision = match info.retry_after {
            Some(requested) if requested > self.retry.max_retry_after => {
                Decision::GiveUp(GiveUpReason::RetryAfterTooLong { requested, max: self.retry.max_retry_after })
            }
            _ => Decision::Done,
        };
        let answer = Answer::Response { status, info, held: () };
        answer.pause_key(Some(limiter), &decision, self.retry, 1, &self.report);
        self.finished(status);
    }

    fn finished(&self, status: StatusCode) {
        self.emit(EventKind::Finished { status: status.as_u16(), attempts: 1, total: self.started.elapsed() });
    }

    /// The inner service failed: reported as the request's failure.
    pub(super) fn failed(&self, error: &dyn std::fmt::Display) {
        self.emit(EventKind::Failed { error: error.to_string(), attempts: 1 });
    }
}

/// The limiter of a request to `uri`: by host (lower case), port (the scheme's default when
/// none is given) and path; in adaptive mode for every host, one made for a host without limits.
fn limiter_of(policy: &Policy, uri: &http::Uri) -> Option<Limiter> {
    let host = uri.host()?.to_ascii_lowercase();
    if !matches!(policy.adaptive, Adaptive::All) {
        let port = uri.port_u16().or_else(|| match uri.scheme_str() {
            Some("https") => Some(443),
            Some("http") => Some(80),
            _ => None,
        });
        return policy.registry.limiter_for(&host, port, uri.path());
    }
    let url = Url::parse(&uri.to_string()).ok()?;
    policy.limiter_for(&host, &url)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{LimitKey, LimiterConfig, Registry};
    use crate::layer::RateLimitLayer;
    use std::sync::Arc;

    fn layer(keys: &[&str]) -> RateLimitLayer {
        let table = keys.iter().map(|key| (key.parse::<LimitKey>().unwrap(), LimiterConfig::new().with_concurrency(1)));
        RateLimitLayer::new(Arc::new(Registry::from_table(table).unwrap()))
    }

    #[test]
    fn the_key_comes_from_the_uris_host_port_and_path() {
        let layer = layer(&["api.example.com", "api.example.com/search", "127.0.0.1:8080"]);
        let key = |uri: &str| {
            let uri: http::Uri = uri.parse().unwrap();
            limiter_of(&layer.state.policy, &uri).map(|limiter| limiter.key().to_owned())
        };
        assert_eq!(key("https://API.example.com/items").as_deref(), Some("api.example.com"));
        assert_eq!(key("https://api.example.com/search?q=1").as_deref(), Some("api.example.com/search"));
        assert_eq!(key("http://127.0.0.1:8080/x").as_deref(), Some("127.0.0.1:8080"));
        assert_eq!(key("http://127.0.0.1:8081/x"), None, "another port is another host");
        assert_eq!(key("/relative"), None, "no host, no limiter");
    }
}
