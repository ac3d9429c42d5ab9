//! Load shedding's decision, shared by the proxy and the tower layer: a request that would wait
//! in a limiter's queue is refused at once when the queue is full or the wait ahead is expected
//! to be longer than allowed, and refused when it has waited that long.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

use super::budget::BudgetKind;
use super::config::LimiterConfig;
use super::error::{AcquireError, TryAcquireError};
use super::limiter::{Limiter, Permit};
use super::priority::Priority;
use super::snapshot::Snapshot;
use super::unit::Cost;

/// How much waiting a shedding caller accepts per limiter key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shedding {
    /// A request expected to wait longer than this in its key's limiter is refused at once;
    /// one that has waited this long is refused then.
    pub max_queue_wait: Duration,
    /// Most requests waiting in one key's limiter; the next one is refused.
    pub max_queue_len: usize,
}

impl Default for Shedding {
    /// 30 s of waiting, 1000 waiting requests per key.
    fn default() -> Self {
        Self { max_queue_wait: Duration::from_secs(30), max_queue_len: 1000 }
    }
}

/// Why shedding turned a request away instead of letting it wait.
#[derive(Debug, Clone, PartialEq)]
pub enum Overload {
    /// The limiter can never admit this request (its cost is zero, or more than a budget holds).
    Invalid(AcquireError),
    /// `waiting` requests already wait for the key, as many as `max_queue_len` allows.
    QueueFull {
        /// Requests waiting when this one came.
        waiting: usize,
    },
    /// The budgets (or a pause) are expected to keep the request waiting `expected`, longer
    /// than `max_queue_wait`.
    TooLong {
        /// The estimated wait (see [`estimated_wait`]).
        expected: Duration,
        /// Requests queued ahead of this one.
        ahead: usize,
    },
    /// The request waited and was not admitted: the deadline (`max_queue_wait`) passed.
    Waited {
        /// What the limiter said.
        err: AcquireError,
        /// Requests still queued when it gave up.
        ahead: usize,
    },
}

impl Overload {
    /// How many requests were waiting ahead of the refused one (0 when it did not queue).
    pub fn ahead(&self) -> usize {
        match self {
            Self::Invalid(_) => 0,
            Self::QueueFull { waiting } => *waiting,
            Self::TooLong { ahead, .. } | Self::Waited { ahead, .. } => *ahead,
        }
    }
}

/// Requests waiting per limiter key, counted by whoever sheds (a proxy, a layer).
#[derive(Debug, Default)]
pub struct QueueCounts {
    keys: Mutex<HashMap<String, Arc<AtomicUsize>>>,
}

/// One place in a key's queue; leaving (however the request ends) frees it.
#[derive(Debug)]
pub struct QueuePlace {
    count: Arc<AtomicUsize>,
}

impl Drop for QueuePlace {
    fn drop(&mut self) {
        self.count.fetch_sub(1, Ordering::AcqRel);
    }
}

impl QueueCounts {
    /// Takes a place in `key`'s queue, or returns how many wait when `max` already do.
    pub fn enter(&self, key: &str, max: usize) -> Result<QueuePlace, usize> {
        let count = Arc::clone(self.keys.lock().entry(key.to_owned()).or_default());
        let before = count.fetch_add(1, Ordering::AcqRel);
        let place = QueuePlace { count };
        if before >= max {
            return Err(before);
        }
        Ok(place)
    }

    /// Admits a request of `cost` in `priority`'s lane of `limiter`, shedding as `shedding`
    /// says: at once when nobody waits and the budgets allow it; otherwise it queues unless
    /// the queue is full or the wait ahead is expected to exceed `max_queue_wait`, and it
    /// gives up once it has waited `max_queue_wait`. Dropping the future leaves the queue.
    pub async fn admit(
        &self,
        limiter: &Limiter,
        priority: Priority,
        cost: Cost,
        shedding: &Shedding,
    ) -> Result<Permit, Overload> {
        let queued_at = Instant::now();
        match limiter.try_acquire_cost(cost.clone()) {
            Ok(permit) => return Ok(permit),
            Err(TryAcquireError::Invalid(err)) => return Err(Overload::Invalid(err)),
            Err(TryAcquireError::WouldWait(_)) => {}
        }
        let _place =
            self.enter(limiter.key(), shedding.max_queue_len).map_err(|waiting| Overload::QueueFull { waiting })?;
        let snapshot = limiter.snapshot();
        let ahead = snapshot.queued_total();
        let expected = estimated_wait(&snapshot, &limiter.config(), ahead);
        if expected > shedding.max_queue_wait {
            return Err(Overload::TooLong { expected, ahead });
        }
        let deadline = queued_at + shedding.max_queue_wait;
        match tokio::time::timeout_at(deadline, limiter.acquire_cost(priority, cost)).await {
            Ok(Ok(permit)) => Ok(permit),
            Ok(Err(err)) => Err(Overload::Waited { err, ahead: limiter.snapshot().queued_total() }),
            Err(_) => Err(Overload::Waited {
                err: AcquireError::DeadlineExceeded { waited: queued_at.elapsed() },
                ahead: limiter.snapshot().queued_total(),
            }),
        }
    }
}

/// How long a request joining behind `ahead` waiting ones will probably wait: the slowest of
/// its budgets to have room for all of them, or the key's pause. Concurrency waits are unknown
/// (they end when a response does) and count as zero.
pub fn estimated_wait(snapshot: &Snapshot, config: &LimiterConfig, ahead: usize) -> Duration {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::BudgetSpec;

    fn bucket(capacity: u64, rate: &str) -> Limiter {
        let spec = BudgetSpec::token_bucket("rate", capacity, rate.parse().unwrap()).unwrap();
        Limiter::new("k", LimiterConfig::new().with_budget(spec)).unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn the_estimate_counts_the_queue_ahead() {
        let limiter = bucket(2, "2/1s");
        let _a = limiter.acquire(Priority::Normal, 1).await.unwrap();
        let _b = limiter.acquire(Priority::Normal, 1).await.unwrap();
        // Empty bucket at 2/s: the 1st waiter needs 0.5 s, one behind 4 others 2.5 s.
        let config = limiter.config();
        assert_eq!(estimated_wait(&limiter.snapshot(), &config, 0), Duration::from_millis(500));
        assert_eq!(estimated_wait(&limiter.snapshot(), &config, 4), Duration::from_millis(2500));
    }

    #[test]
    fn a_full_queue_refuses_and_leaving_frees_a_place() {
        let counts = QueueCounts::default();
        let first = counts.enter("k", 1).unwrap();
        assert_eq!(counts.enter("k", 1).err(), Some(1));
        drop(first);
        assert!(counts.enter("k", 1).is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn admission_sheds_a_wait_longer_than_allowed_and_queues_a_shorter_one() {
        let limiter = bucket(1, "1/1s");
        let counts = QueueCounts::default();
        let shedding = Shedding { max_queue_wait: Duration::from_millis(1500), max_queue_len: 10 };
        let admit = || counts.admit(&limiter, Priority::Normal, Cost::requests(1), &shedding);
        let _now = admit().await.unwrap();
        let started = Instant::now();
        let _second = admit().await.expect("1 s ahead is within 1.5 s");
        assert_eq!(started.elapsed(), Duration::from_secs(1));
        // Two ahead of a 1/s bucket that is empty: 2 s expected.
        let queued = tokio::spawn({
            let limiter = limiter.clone();
            async move { limiter.acquire(Priority::Normal, 1).await.map(drop) }
        });
        tokio::task::yield_now().await;
        assert_eq!(admit().await.unwrap_err(), Overload::TooLong { expected: Duration::from_secs(2), ahead: 1 });
        queued.await.unwrap().unwrap();
        assert!(matches!(
            counts.admit(&limiter, Priority::Normal, Cost::requests(0), &shedding).await,
            Err(Overload::Invalid(AcquireError::ZeroCost))
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn admission_sheds_when_the_queue_is_full_or_the_deadline_passes() {
        let limiter = Limiter::new("k", LimiterConfig::new().with_concurrency(1)).unwrap();
        let counts = QueueCounts::default();
        let shedding = Shedding { max_queue_wait: Duration::from_secs(2), max_queue_len: 1 };
        let _held = limiter.try_acquire(1).unwrap();
        let waiting = counts.admit(&limiter, Priority::Normal, Cost::requests(1), &shedding);
        let refused = async {
            tokio::task::yield_now().await;
            counts.admit(&limiter, Priority::Normal, Cost::requests(1), &shedding).await
        };
        let (waited, refused) = tokio::join!(waiting, refused);
        assert_eq!(refused.unwrap_err(), Overload::QueueFull { waiting: 1 });
        let err = waited.unwrap_err();
        assert_eq!(
            err,
            Overload::Waited { err: AcquireError::DeadlineExceeded { waited: Duration::from_secs(2) }, ahead: 0 }
        );
    }
}
