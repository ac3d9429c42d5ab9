//! Property test of the limiter against an independent model of its budgets, on paused time:
//! no window of any budget ever holds more than its allowance, and the limiter is
//! work-conserving (each admission comes no later than 1 ms after the earliest instant
//! every budget allowed it).

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use proptest::prelude::*;
use ratescope::engine::{BudgetKind, BudgetSpec, Limiter, LimiterConfig, Priority, Rate};
use tokio::time::Instant;

const MS: u64 = 1_000_000;

#[derive(Debug, Clone)]
struct Request {
    arrival_ms: u64,
    cost: u64,
    priority: Priority,
}

#[derive(Debug, Clone, Copy)]
struct Admission {
    at: u64,
    arrival: u64,
    cost: u64,
    priority: Priority,
}

fn budget_strategy() -> impl Strategy<Value = BudgetKind> {
    prop_oneof![
        (1u64..8, 1u64..10, 50u64..2000).prop_map(|(capacity, amount, per_ms)| BudgetKind::TokenBucket {
            capacity,
            refill: Rate::new(amount, Duration::from_millis(per_ms)).unwrap(),
        }),
        (1u64..8, 50u64..3000).prop_map(|(limit, window_ms)| BudgetKind::SlidingWindow {
            limit,
            window: Duration::from_millis(window_ms)
        }),
    ]
}

fn scenario() -> impl Strategy<Value = (Vec<BudgetKind>, Vec<Request>, Option<u64>)> {
    let budgets = prop::collection::vec(budget_strategy(), 1..4);
    let requests = prop::collection::vec(
        (0u64..4000, 1u64..4, prop::sample::select(Priority::ALL.to_vec()))
            .prop_map(|(arrival_ms, cost, priority)| Request { arrival_ms, cost, priority }),
        1..40,
    );
    let guard = prop::option::of(200u64..3000);
    (budgets, requests, guard)
}

fn capacity(kind: &BudgetKind) -> u64 {
    match *kind {
        BudgetKind::TokenBucket { capacity, .. } => capacity,
        BudgetKind::SlidingWindow { limit, .. } => limit,
    }
}

/// Runs the requests through a limiter on a paused runtime; admissions in admission order.
fn run(budgets: &[BudgetKind], requests: &[Request], guard: Option<u64>) -> Vec<Admission> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().unwrap();
    runtime.block_on(async {
        let mut config = LimiterConfig::new().with_starvation_guard(guard.map(Duration::from_millis));
        for (i, kind) in budgets.iter().enumerate() {
            config = config.with_budget(BudgetSpec {
                name: format!("b{i}"),
                kind: *kind,
                unit: Default::default(),
                cost: 1,
            });
        }
        let limiter = Limiter::new("prop", config).unwrap();
        let start = Instant::now();
        let log = Arc::new(Mutex::new(Vec::new()));
        let tasks: Vec<_> = requests
            .iter()
            .cloned()
            .map(|request| {
                let (limiter, log) = (limiter.clone(), Arc::clone(&log));
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(request.arrival_ms)).await;
                    let permit = limiter.acquire(request.priority, request.cost).await.unwrap();
                    let at = u64::try_from(start.elapsed().as_nanos()).unwrap();
                    log.lock().push(Admission {
                        at,
                        arrival: request.arrival_ms * MS,
                        cost: request.cost,
                        priority: request.priority,
                    });
                    drop(permit);
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
        Arc::try_unwrap(log).unwrap().into_inner()
    })
}

/// Earliest instant at or after `lower` when `cost` fits in the budget, given the admissions before it.
fn model_earliest(kind: &BudgetKind, before: &[Admission], cost: u64, lower: u64) -> u64 {
    match *kind {
        BudgetKind::TokenBucket { capacity, refill } => {
            // Conformance: for every i, the cost admitted from i on (plus this one) must fit in
            // capacity + what refilled since admission i.
            let (amount, per) = (u128::from(refill.amount()), refill.per().as_nanos());
            let mut earliest = u128::from(lower);
            let mut suffix = u128::from(cost);
            for admission in before.iter().rev() {
                suffix += u128::from(admission.cost);
                if suffix > u128::from(capacity) {
                    let refill_ns = ((suffix - u128::from(capacity)) * per).div_ceil(amount);
                    earliest = earliest.max(u128::from(admission.at) + refill_ns);
                }
            }
            u64::try_from(earliest).unwrap()
        }
        BudgetKind::SlidingWindow { limit, window } => {
            let window = u64::try_from(window.as_nanos()).unwrap();
            let fits = |t: u64| {
                let used: u64 = before.iter().filter(|a| a.at + window > t).map(|a| a.cost).sum();
                used + cost <= limit
            };
            std::iter::once(lower)
                .chain(before.iter().map(|a| a.at + window).filter(|t| *t > lower))
                .filter(|t| fits(*t))
                .min()
                .unwrap()
        }
    }
}

fn check(budgets: &[BudgetKind], admissions: &[Admission], guard: Option<u64>) -> Result<(), TestCaseError> {
    let mut sorted = admissions.to_vec();
    sorted.sort_by_key(|a| a.at);
    for kind in budgets {
        match *kind {
            BudgetKind::TokenBucket { capacity, refill } => {
                let (amount, per) = (u128::from(refill.amount()), refill.per().as_nanos());
                for i in 0..sorted.len() {
                    let mut spent = 0u128;
                    for j in i..sorted.len() {
                        spent += u128::from(sorted[j].cost);
                        let elapsed = u128::from(sorted[j].at - sorted[i].at);
                        // spent <= capacity + elapsed * amount / per, in integers.
                        prop_assert!(
                            spent.saturating_sub(u128::from(capacity)) * per <= elapsed * amount,
                            "bucket {kind:?} overrun between {} and {}",
                            sorted[i].at,
                            sorted[j].at
                        );
                    }
                }
            }
            BudgetKind::SlidingWindow { limit, window } => {
                let window = u64::try_from(window.as_nanos()).unwrap();
                for a in &sorted {
                    let used: u64 =
                        sorted.iter().filter(|b| b.at >= a.at && b.at < a.at + window).map(|b| b.cost).sum();
                    prop_assert!(used <= limit, "window {kind:?} holds {used} from {}", a.at);
                }
            }
        }
    }
    // Work conservation, in admission order. A request becomes eligible when it arrives and
    // the one before it has gone; one that went ahead of a higher lane already waiting must
    // have been promoted by the starvation guard, so it was eligible only from its promotion.
    for (k, admission) in admissions.iter().enumerate() {
        let before = &admissions[..k];
        let mut lower = admission.arrival.max(before.last().map_or(0, |a| a.at));
        let overtook =
            admissions[k + 1..].iter().any(|later| later.priority < admission.priority && later.arrival < admission.at);
        if overtook {
            let Some(guard) = guard else {
                return Err(TestCaseError::fail(format!(
                    "admission {k} overtook a higher lane without a starvation guard"
                )));
            };
            lower = lower.max(admission.arrival + guard * MS);
        }
        let earliest = budgets.iter().map(|kind| model_earliest(kind, before, admission.cost, lower)).max().unwrap();
        prop_assert!(admission.at >= earliest, "admitted at {} before the model allows ({earliest})", admission.at);
        prop_assert!(
            admission.at <= earliest + MS,
            "admission {k} at {} but every budget allowed it from {earliest}",
            admission.at
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    #[test]
    fn limiter_never_overruns_and_never_idles((budgets, mut requests, guard) in scenario()) {
        let smallest = budgets.iter().map(capacity).min().unwrap();
        for request in &mut requests {
            request.cost = request.cost.min(smallest);
        }
        let admissions = run(&budgets, &requests, guard);
        prop_assert_eq!(admissions.len(), requests.len());
        check(&budgets, &admissions, guard)?;
    }
}
