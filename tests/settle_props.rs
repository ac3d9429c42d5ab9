//! Property test of reserve-then-settle on paused time: requests reserve an estimate, settle
//! the actual cost later (or are cancelled while queued), and against a model of a sliding
//! window no admission ever finds the window holding more than its limit in units (actual
//! once settled, the estimate until then); once everything is settled the window counts
//! exactly the actual units, and an idle budget comes back whole (nothing lost or counted twice).
//! A settlement counts at most the budget's capacity (a lying answer), and whatever the answers
//! say, an idle budget is whole again within two refills of its capacity or one window.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use proptest::prelude::*;
use ratescope::engine::{BudgetSpec, Cost, Limiter, LimiterConfig, Priority, Rate};
use tokio::time::Instant;

#[derive(Debug, Clone)]
struct Request {
    arrival_ms: u64,
    estimate: u64,
    actual: u64,
    settle_after_ms: u64,
    /// Gives up waiting this long after arriving (never admitted then).
    patience_ms: Option<u64>,
}

/// One admitted request: when it was admitted and settled (ns since the start), the order of
/// those two events among all others (instants tie on paused time; the order does not), and
/// its units.
#[derive(Debug, Clone, Copy)]
struct Outcome {
    admitted: u64,
    admitted_step: u64,
    settled_step: u64,
    estimate: u64,
    actual: u64,
}

fn requests(limit: u64) -> impl Strategy<Value = Vec<Request>> {
    let request = (0u64..3000, 1..=limit, 0u64..=2, 0u64..1500, prop::option::weighted(0.2, 1u64..800)).prop_map(
        |(arrival_ms, estimate, shape, settle_after_ms, patience_ms)| {
            // Below, at or above the estimate (above the limit too: a debt to wait out).
            let actual = match shape {
                0 => estimate / 2,
                1 => estimate,
                _ => estimate * 3 / 2,
            };
            Request { arrival_ms, estimate, actual, settle_after_ms, patience_ms }
        },
    );
    prop::collection::vec(request, 1..30)
}

fn scenario() -> impl Strategy<Value = (u64, u64, Vec<Request>)> {
    (2u64..12, 200u64..2500).prop_flat_map(|(limit, window_ms)| (Just(limit), Just(window_ms), requests(limit)))
}

/// Runs every request; returns the admitted ones.
async fn run(limiter: &Limiter, requests: &[Request]) -> Vec<Outcome> {
    let start = Instant::now();
    let outcomes = Arc::new(Mutex::new(Vec::new()));
    // One task runs at a time (current-thread runtime) and an admission happens in the poll that
    // returns it, so counting right after each admission and settlement orders them exactly.
    let steps = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = requests
        .iter()
        .cloned()
        .map(|request| {
            let (limiter, outcomes, steps) = (limiter.clone(), Arc::clone(&outcomes), Arc::clone(&steps));
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(request.arrival_ms)).await;
                let acquired = match request.patience_ms {
                    Some(patience) => {
                        let deadline = Instant::now() + Duration::from_millis(patience);
                        limiter.acquire_until(Priority::Normal, request.estimate, deadline).await
                    }
                    None => limiter.acquire(Priority::Normal, request.estimate).await,
                };
                let Ok(mut permit) = acquired else { return };
                let admitted_step = steps.fetch_add(1, Ordering::SeqCst);
                let admitted = start.elapsed().as_nanos() as u64;
                tokio::time::sleep(Duration::from_millis(request.settle_after_ms)).await;
                permit.settle(Cost::requests(request.actual));
                let settled_step = steps.fetch_add(1, Ordering::SeqCst);
                let (estimate, actual) = (request.estimate, request.actual);
                outcomes.lock().push(Outcome { admitted, admitted_step, settled_step, estimate, actual });
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    outcomes.lock().clone()
}

/// What `outcome` counts when the admission at `step` happens: its actual cost once settled
/// (at most the budget's `limit`), its estimate before.
fn counted(outcome: &Outcome, step: u64, limit: u64) -> u64 {
    if outcome.settled_step < step { outcome.actual.min(limit) } else { outcome.estimate }
}

/// Requests whose answers say anything: nothing, the estimate, far beyond the limit, 2^64 - 1.
fn lying(limit: u64) -> impl Strategy<Value = Vec<Request>> {
    let said =
        prop_oneof![Just(0), Just(1), Just(limit), Just(limit + 1), Just(limit * 1000), Just(u64::MAX), any::<u64>()];
    // Arrivals close together, so answers of requests admitted together pile up their debts.
    let request =
        (0u64..500, 1..=limit, said, 0u64..1500).prop_map(|(arrival_ms, estimate, actual, settle_after_ms)| Request {
            arrival_ms,
            estimate,
            actual,
            settle_after_ms,
            patience_ms: None,
        });
    prop::collection::vec(request, 1..30)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn a_settled_window_never_admits_past_its_limit_and_ends_exact((limit, window_ms, requests) in scenario()) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().unwrap();
        runtime.block_on(async {
            let window = Duration::from_millis(window_ms);
            let window_ns = window.as_nanos() as u64;
            let config = LimiterConfig::new().with_budget(BudgetSpec::sliding_window("tokens", limit, window).unwrap());
            let limiter = Limiter::new("llm", config).unwrap();
            let start = Instant::now();
            let outcomes = run(&limiter, &requests).await;
            for (k, admission) in outcomes.iter().enumerate() {
                let inside = outcomes.iter().enumerate().filter(|(j, other)| {
                    *j != k && other.admitted_step < admission.admitted_step && other.admitted + window_ns > admission.admitted
                });
                let held: u64 = inside.map(|(_, other)| counted(other, admission.admitted_step, limit)).sum();
                prop_assert!(
                    held + admission.estimate <= limit,
                    "admitted at {} ms: the window held {held} + {} > {limit}\n{outcomes:?}",
                    admission.admitted, admission.estimate
                );
            }
            // Everything settled: the window counts exactly the actual units still inside it.
            let now = start.elapsed().as_nanos() as u64;
            let expected: u64 = outcomes.iter().filter(|o| o.admitted + window_ns > now).map(|o| o.actual.min(limit)).sum();
            let used = limiter.snapshot().budgets[0].window_used.unwrap();
            prop_assert_eq!(used, expected, "the window counts what the settlements say");
            // Idle for a window: whole again, and not more than whole.
            tokio::time::sleep(window).await;
            prop_assert!(limiter.try_acquire(limit).is_ok(), "a whole window after the last admission");
            prop_assert!(limiter.try_acquire(1).is_err());
            Ok(())
        })?;
    }

    #[test]
    fn a_settled_bucket_comes_back_exactly_whole((capacity, _, requests) in scenario()) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().unwrap();
        runtime.block_on(async {
            let refill = Rate::new(capacity, Duration::from_secs(1)).unwrap();
            let config = LimiterConfig::new().with_budget(BudgetSpec::token_bucket("tokens", capacity, refill).unwrap());
            let limiter = Limiter::new("llm", config).unwrap();
            let outcomes = run(&limiter, &requests).await;
            let admitted = requests.iter().filter(|r| r.patience_ms.is_none()).count();
            prop_assert!(outcomes.len() >= admitted, "every patient request got through");
            // Long idle: full, never fuller (a refund on a full bucket adds nothing).
            let debt: u64 = outcomes.iter().map(|o| o.actual.min(capacity)).sum();
            tokio::time::sleep(Duration::from_secs(debt / capacity + 2)).await;
            prop_assert!(limiter.try_acquire(capacity).is_ok());
            prop_assert!(limiter.try_acquire(1).is_err());
            Ok(())
        })?;
    }

    #[test]
    fn lying_settlements_never_stall_a_budget_past_one_capacity_of_debt(
        (limit, window_ms, requests) in (2u64..12, 200u64..2500).prop_flat_map(|(limit, window_ms)| (Just(limit), Just(window_ms), lying(limit))),
        bucket in any::<bool>(),
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().unwrap();
        runtime.block_on(async {
            let window = Duration::from_millis(window_ms);
            let (budget, whole_after) = if bucket {
                // A bucket refilling its capacity in `window`: two refills, an empty bucket and one owed.
                let refill = Rate::new(limit, window).unwrap();
                (BudgetSpec::token_bucket("tokens", limit, refill).unwrap(), window * 2)
            } else {
                (BudgetSpec::sliding_window("tokens", limit, window).unwrap(), window)
            };
            let limiter = Limiter::new("llm", LimiterConfig::new().with_budget(budget)).unwrap();
            let outcomes = run(&limiter, &requests).await;
            prop_assert_eq!(outcomes.len(), requests.len(), "every request got through, none stalled for ever");
            if let Some(used) = limiter.snapshot().budgets[0].window_used {
                prop_assert!(used <= 2 * limit, "a window counts at most its limit twice: {}", used);
            }
            tokio::time::sleep(whole_after).await;
            prop_assert!(limiter.try_acquire(limit).is_ok(), "whole again {:?} after the last settlement", whole_after);
            Ok(())
        })?;
    }
}
