//! The proxy's side of load shedding (the decision is the engine's `QueueCounts::admit`): the 429
//! it answers with (`Retry-After` plus its own IETF draft `RateLimit`/`RateLimit-Policy`).

use std::time::Duration;

use axum::body::Body;
use axum::response::Response;
use http::header::{CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderValue, StatusCode};

use crate::engine::{BudgetKind, Limiter, LimiterConfig, Snapshot, estimated_wait};
use crate::http::headers::{PublishedPolicy, write_ietf};

/// Why a request was turned away, and when to come back.
#[derive(Debug, Clone, PartialEq)]
pub struct Shed {
    /// Why, in words (which queue was too long or too slow).
    pub reason: String,
    /// When the caller may try again (its `Retry-After`).
    pub retry_after: Duration,
    /// The key's budgets as the draft headers describe them.
    pub policies: Vec<PublishedPolicy>,
}

/// The key's budgets as draft `RateLimit-Policy` items: quota, window, what is left and when full.
pub(crate) fn policies(snapshot: &Snapshot, config: &LimiterConfig) -> Vec<PublishedPolicy> {
    let mut reports = Vec::new();
    for spec in &config.budgets {
        let Some(state) = snapshot.budgets.iter().find(|budget| budget.name == spec.name) else { continue };
        let (limit, window, reset) = match &spec.kind {
            BudgetKind::TokenBucket { capacity, refill } => {
                let rate = refill.per_second().max(f64::MIN_POSITIVE);
                let to_full = ((*capacity as f64 - state.available).max(0.0) / rate).min(86_400.0);
                (*capacity, Duration::from_secs_f64((*capacity as f64 / rate).min(86_400.0)), to_full)
            }
            BudgetKind::SlidingWindow { limit, window } => {
                let used = state.window_used.unwrap_or(0);
                (*limit, *window, if used == 0 { 0.0 } else { window.as_secs_f64() })
            }
        };
        reports.push(PublishedPolicy {
            name: spec.name.clone(),
            limit,
            remaining: state.available.max(0.0).floor() as u64,
            reset: Duration::from_secs_f64(reset),
            window: Some(window),
            concurrency: false,
        });
    }
    reports
}

/// A [`Shed`] for `limiter` with `ahead` requests waiting.
pub(crate) fn shed(limiter: &Limiter, ahead: usize, reason: String) -> Shed {
    let snapshot = limiter.snapshot();
    let config = limiter.config();
    Shed { reason, retry_after: estimated_wait(&snapshot, &config, ahead), policies: policies(&snapshot, &config) }
}

impl Shed {
    /// 429 Too Many Requests with `Retry-After` in whole seconds (rounded up, at least 1) and
    /// the draft headers, so a well-behaved caller slows down.
    pub fn into_response(self) -> Response {
        let seconds = self.retry_after.as_secs() + u64::from(self.retry_after.subsec_nanos() > 0);
        let mut response = Response::new(Body::from(format!("ratescope proxy: {}\n", self.reason)));
        *response.status_mut() = StatusCode::TOO_MANY_REQUESTS;
        let headers = response.headers_mut();
        headers.insert(RETRY_AFTER, HeaderValue::from(seconds.max(1)));
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
        write_ietf(headers, &self.policies);
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{BudgetSpec, Priority};

    #[tokio::test(start_paused = true)]
    async fn a_shed_request_gets_a_429_saying_when_to_come_back() {
        let config =
            LimiterConfig::new().with_budget(BudgetSpec::token_bucket("rate", 2, "2/1s".parse().unwrap()).unwrap());
        let limiter = Limiter::new("k", config.clone()).unwrap();
        let _a = limiter.acquire(Priority::Normal, 1).await.unwrap();
        let _b = limiter.acquire(Priority::Normal, 1).await.unwrap();
        // Empty bucket at 2/s: one behind 4 others waits 2.5 s, said as 3 s.
        let response = shed(&limiter, 4, "queue full".into()).into_response();
        assert_eq!(response.status(), 429);
        assert_eq!(response.headers()["retry-after"], "3");
        assert_eq!(response.headers()["ratelimit-policy"], "\"rate\";q=2;w=1");
        assert_eq!(response.headers()["ratelimit"], "\"rate\";r=0;t=1");
    }
}
