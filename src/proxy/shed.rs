//! Load shedding: per-key queue lengths, an honest estimate of the wait ahead, and the 429 the
//! proxy answers with (`Retry-After` plus its own IETF draft `RateLimit`/`RateLimit-Policy`).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::body::Body;
use axum::response::Response;
use http::header::{CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderValue, StatusCode};
use parking_lot::Mutex;

use crate::engine::{BudgetKind, Limiter, LimiterConfig, Snapshot};
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

/// Requests waiting per limiter key.
#[derive(Debug, Default)]
pub(crate) struct QueueCounts {
    keys: Mutex<HashMap<String, Arc<AtomicUsize>>>,
}

/// One place in a key's queue; leaving (however the request ends) frees it.
#[derive(Debug)]
pub(crate) struct QueuePlace {
    count: Arc<AtomicUsize>,
}

impl Drop for QueuePlace {
    fn drop(&mut self) {
        self.count.fetch_sub(1, Ordering::AcqRel);
    }
}

impl QueueCounts {
    /// Takes a place in `key`'s queue, or returns how many wait when `max` already do.
    pub(crate) fn enter(&self, key: &str, max: usize) -> Result<QueuePlace, usize> {
        let count = Arc::clone(self.keys.lock().entry(key.to_owned()).or_default());
        let before = count.fetch_add(1, Ordering::AcqRel);
        let place = QueuePlace { count };
        if before >= max {
            return Err(before);
        }
        Ok(place)
    }
}

/// How long a request joining behind `ahead` waiting ones will probably wait: the slowest of
/// its budgets to have room for all of them, or the key's pause. Concurrency waits are unknown
/// (they end when a response does) and count as zero.
pub(crate) fn estimated_wait(snapshot: &Snapshot, config: &LimiterConfig, ahead: usize) -> Duration {
    let mut wait = snapshot.paused.as_ref().map_or(Duration::ZERO, |pause| pause.remaining);
    for spec in &config.budgets {
        let Some(state) = snapshot.budgets.iter().find(|budget| budget.name == spec.name) else { continue };
        let need = (ahead as f64 + 1.0) * spec.cost as f64;
        let budget_wait = match &spec.kind {
            BudgetKind::TokenBucket { refill, .. } => {
                let deficit = need - state.available;
                if deficit <= 0.0 { 0.0 } else { deficit / refill.per_second() }
            }
            BudgetKind::SlidingWindow { limit, window } => {
                let over = state.window_used.unwrap_or(0) as f64 + need - *limit as f64;
                if over <= 0.0 { 0.0 } else { (over / (*limit).max(1) as f64).ceil() * window.as_secs_f64() }
            }
        };
        if budget_wait.is_finite() {
            wait = wait.max(Duration::from_secs_f64(budget_wait.min(86_400.0)));
        }
    }
    wait
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
    async fn the_estimate_counts_the_queue_ahead() {
        let config =
            LimiterConfig::new().with_budget(BudgetSpec::token_bucket("rate", 2, "2/1s".parse().unwrap()).unwrap());
        let limiter = Limiter::new("k", config.clone()).unwrap();
        let _a = limiter.acquire(Priority::Normal, 1).await.unwrap();
        let _b = limiter.acquire(Priority::Normal, 1).await.unwrap();
        // Empty bucket at 2/s: the 1st waiter needs 0.5 s, one behind 4 others 2.5 s.
        assert_eq!(estimated_wait(&limiter.snapshot(), &config, 0), Duration::from_millis(500));
        assert_eq!(estimated_wait(&limiter.snapshot(), &config, 4), Duration::from_millis(2500));
        let response = shed(&limiter, 4, "queue full".into()).into_response();
        assert_eq!(response.status(), 429);
        assert_eq!(response.headers()["retry-after"], "3");
        assert_eq!(response.headers()["ratelimit-policy"], "\"rate\";q=2;w=1");
        assert_eq!(response.headers()["ratelimit"], "\"rate\";r=0;t=1");
    }

    #[test]
    fn a_full_queue_refuses_and_leaving_frees_a_place() {
        let counts = QueueCounts::default();
        let first = counts.enter("k", 1).unwrap();
        assert_eq!(counts.enter("k", 1).err(), Some(1));
        drop(first);
        assert!(counts.enter("k", 1).is_ok());
    }
}
