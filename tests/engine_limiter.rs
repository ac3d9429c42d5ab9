//! Behaviour of one limiter on paused tokio time: pacing, lanes, cancellation, pauses, reconfiguration.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use ratescope::engine::{
    AcquireError, Blocked, BudgetSpec, Cost, Limiter, LimiterConfig, Priority, Rate, TryAcquireError, Unit,
};
use tokio::time::Instant;

fn rate(text: &str) -> Rate {
    text.parse().unwrap()
}

fn bucket(capacity: u64, refill: &str) -> LimiterConfig {
    LimiterConfig::new().with_budget(BudgetSpec::token_bucket("rate", capacity, rate(refill)).unwrap())
}

fn ms(duration: Duration) -> u128 {
    duration.as_millis()
}

/// Admission times (since `start`) of `n` requests that all arrive at once.
async fn burst_admissions(limiter: &Limiter, n: usize) -> Vec<Duration> {
    let start = Instant::now();
    let tasks: Vec<_> = (0..n)
        .map(|_| {
            let limiter = limiter.clone();
            tokio::spawn(async move {
                let _permit = limiter.acquire(Priority::Normal, 1).await.unwrap();
                start.elapsed()
            })
        })
        .collect();
    let mut times = Vec::new();
    for task in tasks {
        times.push(task.await.unwrap());
    }
    times.sort();
    times
}

/// Most admissions in any half-open window `[t, t + width)` that starts at or after `from`.
fn busiest_window(times: &[Duration], width: Duration, from: Duration) -> usize {
    times
        .iter()
        .filter(|t| **t >= from)
        .map(|&t| times.iter().filter(|u| **u >= t && **u < t + width).count())
        .max()
        .unwrap_or(0)
}

/// Waits (in virtual time, without advancing it) until `n` requests are queued.
async fn until_queued(limiter: &Limiter, n: usize) {
    while limiter.snapshot().queued_total() < n {
        tokio::task::yield_now().await;
    }
}

/// Spawns a request that records `label` when admitted and holds its permit for `hold`.
fn spawn_labelled(
    limiter: &Limiter,
    priority: Priority,
    label: &'static str,
    log: &Arc<Mutex<Vec<(&'static str, Duration)>>>,
    start: Instant,
) -> tokio::task::JoinHandle<()> {
    let (limiter, log) = (limiter.clone(), Arc::clone(log));
    tokio::spawn(async move {
        let _permit = limiter.acquire(priority, 1).await.unwrap();
        log.lock().push((label, start.elapsed()));
    })
}

#[tokio::test(start_paused = true)]
async fn bucket_of_three_lets_three_through_then_spaces_the_rest() {
    let limiter = Limiter::new("api", bucket(3, "3/1s")).unwrap();
    let times = burst_admissions(&limiter, 12).await;
    assert_eq!(&times[..3], &[Duration::ZERO; 3], "the burst of three goes at once");
    for pair in times[3..].windows(2) {
        let gap = pair[1] - pair[0];
        assert!((332..=335).contains(&ms(gap)), "spaced by a third of a second, got {gap:?}");
    }
    // Once the initial burst is spent, no one-second window holds a fourth.
    assert_eq!(busiest_window(&times, Duration::from_secs(1), Duration::from_millis(1)), 3);
    // Counting the burst itself, a token bucket admits at most capacity + rate * window.
    assert!(busiest_window(&times, Duration::from_secs(1), Duration::ZERO) <= 3 + 3);
}

#[tokio::test(start_paused = true)]
async fn bucket_stacked_with_a_window_never_lets_a_fourth_into_any_second() {
    let config =
        bucket(3, "3/1s").with_budget(BudgetSpec::sliding_window("second", 3, Duration::from_secs(1)).unwrap());
    let limiter = Limiter::new("api", config).unwrap();
    let times = burst_admissions(&limiter, 12).await;
    assert_eq!(&times[..3], &[Duration::ZERO; 3]);
    assert_eq!(busiest_window(&times, Duration::from_secs(1), Duration::ZERO), 3);
    assert_eq!(times[11], Duration::from_secs(3), "the window, not the bucket, sets the pace here");
}

#[tokio::test(start_paused = true)]
async fn twenty_concurrent_callers_are_paced_as_one_group() {
    let limiter = Limiter::new("api", bucket(5, "5/1s")).unwrap();
    let times = burst_admissions(&limiter, 20).await;
    // (20 - capacity) / rate = 15 / 5 = 3 s, however many callers share the bucket.
    let last = *times.last().unwrap();
    assert!(ms(last) >= 3000 && ms(last) <= 3001, "last admission at {last:?}");
    assert_eq!(times.iter().filter(|t| t.is_zero()).count(), 5);
}

#[tokio::test(start_paused = true)]
async fn errors_panics_and_cancellations_leave_every_permit_free() {
    let cap = 8;
    let limiter = Limiter::new("api", bucket(50, "500/1s").with_concurrency(cap)).unwrap();
    let mut rng = StdRng::seed_from_u64(7);
    let mut tasks = Vec::new();
    for i in 0..1000u64 {
        let limiter = limiter.clone();
        let fate = rng.random_range(0..6u8);
        let work = Duration::from_millis(rng.random_range(1..40));
        let arrival = Duration::from_millis(rng.random_range(0..2000));
        let task = tokio::spawn(async move {
            tokio::time::sleep(arrival).await;
            let permit = limiter.acquire(Priority::ALL[(i % 3) as usize], 1).await?;
            tokio::time::sleep(work).await;
            match fate {
                0 => Err(AcquireError::ZeroCost), // the request failed: an early return drops the permit
                1 => panic!("request {i} panicked while holding its permit"),
                _ => {
                    drop(permit);
                    Ok(())
                }
            }
        });
        tasks.push((fate, task));
    }
    // Cancel the fate-2 third at random moments: while queued, or mid-request.
    for (fate, task) in &tasks {
        if *fate == 2 {
            tokio::time::sleep(Duration::from_micros(1500)).await;
            task.abort();
        }
    }
    let mut outcomes = [0usize; 3];
    for (_, task) in tasks {
        match task.await {
            Ok(Ok(())) => outcomes[0] += 1,
            Ok(Err(_)) => outcomes[1] += 1,
            Err(_) => outcomes[2] += 1, // panicked or cancelled
        }
    }
    assert!(outcomes.iter().all(|count| *count > 100), "every kind of ending happened: {outcomes:?}");
    let snapshot = limiter.snapshot();
    assert_eq!((snapshot.in_flight, snapshot.queued_total()), (0, 0));
    tokio::time::sleep(Duration::from_secs(1)).await;
    let held: Vec<_> = (0..cap).map(|_| limiter.try_acquire(1).expect("every slot is free again")).collect();
    assert!(matches!(limiter.try_acquire(1), Err(TryAcquireError::WouldWait(Blocked::Concurrency { limit: 8 }))));
    drop(held);
}

#[tokio::test(start_paused = true)]
async fn lanes_are_fifo_and_higher_lanes_go_first() {
    let limiter = Limiter::new("api", bucket(1, "10/1s")).unwrap();
    let _spent = limiter.try_acquire(1).unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for (i, (priority, label)) in [
        (Priority::Low, "low1"),
        (Priority::Normal, "normal1"),
        (Priority::Low, "low2"),
        (Priority::High, "high1"),
        (Priority::Normal, "normal2"),
        (Priority::High, "high2"),
    ]
    .into_iter()
    .enumerate()
    {
        tasks.push(spawn_labelled(&limiter, priority, label, &log, start));
        until_queued(&limiter, i + 1).await;
    }
    assert_eq!(limiter.snapshot().queued, [2, 2, 2]);
    for task in tasks {
        task.await.unwrap();
    }
    let order: Vec<_> = log.lock().iter().map(|(label, _)| *label).collect();
    assert_eq!(order, ["high1", "high2", "normal1", "normal2", "low1", "low2"]);
}

#[tokio::test(start_paused = true)]
async fn starvation_guard_promotes_an_old_low_request() {
    let config = bucket(1, "10/1s").with_starvation_guard(Some(Duration::from_secs(1)));
    let limiter = Limiter::new("api", config).unwrap();
    let _spent = limiter.try_acquire(1).unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    let start = Instant::now();
    let low = spawn_labelled(&limiter, Priority::Low, "low", &log, start);
    until_queued(&limiter, 1).await;
    // Fifty high-priority requests would keep the low one waiting for 5 s without the guard.
    let highs: Vec<_> = (0..50).map(|_| spawn_labelled(&limiter, Priority::High, "high", &log, start)).collect();
    low.await.unwrap();
    let admitted = log.lock().iter().find(|(label, _)| *label == "low").map(|(_, at)| *at).unwrap();
    assert!(ms(admitted) >= 1000 && ms(admitted) <= 1101, "low admitted at {admitted:?}, right after its promotion");
    for high in highs {
        high.await.unwrap();
    }
    let position = log.lock().iter().position(|(label, _)| *label == "low").unwrap();
    assert!((9..=12).contains(&position), "low went ahead of the remaining highs (position {position})");
}

#[tokio::test(start_paused = true)]
async fn strict_lanes_without_guard_let_low_wait() {
    let config = bucket(1, "10/1s").with_starvation_guard(None);
    let limiter = Limiter::new("api", config).unwrap();
    let _spent = limiter.try_acquire(1).unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    let start = Instant::now();
    let low = spawn_labelled(&limiter, Priority::Low, "low", &log, start);
    until_queued(&limiter, 1).await;
    let highs: Vec<_> = (0..20).map(|_| spawn_labelled(&limiter, Priority::High, "high", &log, start)).collect();
    low.await.unwrap();
    for high in highs {
        high.await.unwrap();
    }
    assert_eq!(log.lock().last().map(|(label, _)| *label), Some("low"));
}

#[tokio::test(start_paused = true)]
async fn reconfiguring_mid_queue_keeps_order_and_applies_at_once() {
    let limiter = Limiter::new("api", bucket(1, "1/1s")).unwrap();
    let _spent = limiter.try_acquire(1).unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    let start = Instant::now();
    let labels = ["a", "b", "c", "d", "e"];
    let mut tasks = Vec::new();
    for (i, label) in labels.into_iter().enumerate() {
        tasks.push(spawn_labelled(&limiter, Priority::Normal, label, &log, start));
        until_queued(&limiter, i + 1).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(log.lock().is_empty());
    // Ten times faster, same capacity: the half token refilled so far is kept, and the
    // other half takes 50 ms at the new rate.
    limiter.reconfigure(bucket(1, "10/1s")).unwrap();
    for task in tasks {
        task.await.unwrap();
    }
    let log = log.lock();
    let order: Vec<_> = log.iter().map(|(label, _)| *label).collect();
    assert_eq!(order, labels);
    let times: Vec<u128> = log.iter().map(|(_, at)| ms(*at)).collect();
    assert_eq!(times, [550, 650, 750, 850, 950], "re-evaluated at once at 500 ms, then 10/s");
}

#[tokio::test(start_paused = true)]
async fn raising_concurrency_admits_waiters_at_once_and_lowering_it_drains_gently() {
    let limiter = Limiter::new("api", LimiterConfig::new().with_concurrency(1)).unwrap();
    let held = limiter.try_acquire(1).unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    let start = Instant::now();
    let (limiter2, log2) = (limiter.clone(), Arc::clone(&log));
    let holders: Vec<_> = (0..3)
        .map(|i| {
            let (limiter, log) = (limiter2.clone(), Arc::clone(&log2));
            tokio::spawn(async move {
                let permit = limiter.acquire(Priority::Normal, 1).await.unwrap();
                log.lock().push((i, start.elapsed()));
                permit
            })
        })
        .collect();
    until_queued(&limiter, 3).await;
    limiter.reconfigure(LimiterConfig::new().with_concurrency(3)).unwrap();
    let mut permits = Vec::new();
    for holder in holders.into_iter().take(2) {
        permits.push(holder.await.unwrap());
    }
    assert_eq!(limiter.in_flight(), 3);
    assert_eq!(limiter.snapshot().queued_total(), 1);
    // Lower the cap below what is in flight: nothing is revoked, but nothing new goes
    // until in-flight requests drop under the new cap.
    limiter.reconfigure(LimiterConfig::new().with_concurrency(1)).unwrap();
    drop(held);
    drop(permits.pop());
    tokio::task::yield_now().await;
    assert_eq!(limiter.snapshot().queued_total(), 1, "still 1 in flight, at the cap of 1");
    drop(permits.pop());
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert_eq!(limiter.snapshot().queued_total(), 0, "the last waiter went once the cap allowed it");
    let order: Vec<_> = log.lock().iter().map(|(i, _)| *i).collect();
    assert_eq!(order, [0, 1, 2]);
}

#[tokio::test(start_paused = true)]
async fn pause_until_holds_every_waiter_of_the_key() {
    let limiter = Limiter::new("api", bucket(10, "10/1s")).unwrap();
    let start = Instant::now();
    limiter.pause_until(start + Duration::from_secs(5), "429 from server");
    limiter.pause_until(start + Duration::from_secs(2), "an earlier pause never shortens");
    let times = {
        let waiting = burst_admissions(&limiter, 4);
        tokio::pin!(waiting);
        tokio::select! {
            times = &mut waiting => times,
            _ = tokio::time::sleep(Duration::from_secs(1)) => {
                let snapshot = limiter.snapshot();
                assert_eq!(snapshot.queued_total(), 4);
                let head = snapshot.head.unwrap();
                assert!(matches!(&head.blocked, Blocked::Paused { reason, .. } if reason == "429 from server"));
                assert_eq!(head.blocked.to_string(), "paused for 4.0s (429 from server)");
                waiting.await
            }
        }
    };
    assert!(times.iter().all(|t| ms(*t) == 5000), "all four admitted when the pause ended: {times:?}");
}

#[tokio::test(start_paused = true)]
async fn snapshot_names_the_budget_that_blocks_and_for_how_long() {
    let config =
        bucket(100, "100/1s").with_budget(BudgetSpec::sliding_window("hour", 2, Duration::from_secs(3600)).unwrap());
    let limiter = Limiter::new("api", config).unwrap();
    drop(limiter.try_acquire(1).unwrap());
    drop(limiter.try_acquire(1).unwrap());
    tokio::time::sleep(Duration::from_secs(47 * 60 + 57)).await;
    let waiter = tokio::spawn({
        let limiter = limiter.clone();
        async move { limiter.acquire(Priority::High, 1).await.map(drop) }
    });
    until_queued(&limiter, 1).await;
    let snapshot = limiter.snapshot();
    let head = snapshot.head.clone().unwrap();
    assert_eq!(head.blocked.to_string(), "blocked by 'hour' for 12m 3s");
    assert_eq!(head.priority, Priority::High);
    assert_eq!(snapshot.queued, [1, 0, 0]);
    assert_eq!(snapshot.budgets[1].window_used, Some(2));
    assert_eq!(snapshot.budgets[1].available, 0.0);
    assert!((snapshot.budgets[0].available - 100.0).abs() < 1e-9);
    waiter.await.unwrap().unwrap();
    assert_eq!(Instant::now() - snapshot.at, Duration::from_secs(12 * 60 + 3));
}

#[tokio::test(start_paused = true)]
async fn try_acquire_never_waits_and_deadlines_fail_cleanly() {
    let limiter = Limiter::new("api", bucket(1, "1/1s")).unwrap();
    let first = limiter.try_acquire(1).unwrap();
    let Err(TryAcquireError::WouldWait(Blocked::Budget { name, wait })) = limiter.try_acquire(1) else {
        panic!("expected to be told to wait")
    };
    assert_eq!((name.as_str(), wait), ("rate", Duration::from_secs(1)));
    drop(first);
    let start = Instant::now();
    let deadline = start + Duration::from_millis(300);
    let err = limiter.acquire_until(Priority::Normal, 1, deadline).await.unwrap_err();
    assert_eq!(err, AcquireError::DeadlineExceeded { waited: Duration::from_millis(300) });
    assert_eq!(start.elapsed(), Duration::from_millis(300));
    assert_eq!(limiter.snapshot().queued_total(), 0, "the expired request left the queue");
    // Nothing was spent by the expired request: the token arrives at exactly 1 s.
    let _permit = limiter.acquire(Priority::Normal, 1).await.unwrap();
    assert_eq!(start.elapsed(), Duration::from_secs(1));
}

#[tokio::test(start_paused = true)]
async fn dropping_a_waiting_request_spends_nothing_and_frees_its_place() {
    let limiter = Limiter::new("api", bucket(2, "1/1s")).unwrap();
    let _spent = (limiter.try_acquire(1).unwrap(), limiter.try_acquire(1).unwrap());
    let start = Instant::now();
    let first = tokio::spawn({
        let limiter = limiter.clone();
        async move { limiter.acquire(Priority::Normal, 1).await.map(drop) }
    });
    until_queued(&limiter, 1).await;
    let second = tokio::spawn({
        let limiter = limiter.clone();
        async move { limiter.acquire(Priority::Normal, 1).await.map(|_| start.elapsed()) }
    });
    until_queued(&limiter, 2).await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    first.abort();
    assert!(first.await.unwrap_err().is_cancelled());
    assert_eq!(limiter.snapshot().queued_total(), 1);
    // The second request inherits the head of the queue and the token the first never spent.
    assert_eq!(second.await.unwrap().unwrap(), Duration::from_secs(1));
}

#[tokio::test(start_paused = true)]
async fn requests_that_can_never_fit_are_refused_at_once() {
    let limiter = Limiter::new("api", bucket(5, "1/1s")).unwrap();
    assert!(matches!(
        limiter.acquire(Priority::Normal, 6).await,
        Err(AcquireError::CostExceedsCapacity { cost: 6, capacity: 5, .. })
    ));
    assert_eq!(limiter.acquire(Priority::Normal, 0).await.unwrap_err(), AcquireError::ZeroCost);
    // A waiter whose cost stops fitting after a reconfiguration is released with the error.
    let _all = limiter.acquire(Priority::Normal, 5).await.unwrap();
    let big = tokio::spawn({
        let limiter = limiter.clone();
        async move { limiter.acquire(Priority::Normal, 4).await.map(drop) }
    });
    until_queued(&limiter, 1).await;
    limiter.reconfigure(bucket(2, "1/1s")).unwrap();
    assert!(matches!(big.await.unwrap(), Err(AcquireError::CostExceedsCapacity { capacity: 2, .. })));
    assert_eq!(limiter.snapshot().queued_total(), 0);
}

#[tokio::test(start_paused = true)]
async fn run_returns_the_slot_even_when_the_work_panics() {
    let limiter = Limiter::new("api", LimiterConfig::new().with_concurrency(1)).unwrap();
    let crashed = tokio::spawn({
        let limiter = limiter.clone();
        async move {
            limiter
                .run(Priority::Normal, 1, async {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    panic!("work failed")
                })
                .await
        }
    });
    assert!(crashed.await.unwrap_err().is_panic());
    assert_eq!(limiter.in_flight(), 0);
    assert_eq!(limiter.run(Priority::Normal, 1, async { 42 }).await, Ok(42));
}

#[test]
fn absurd_settings_are_refused_at_construction() {
    let refused = [
        LimiterConfig::new().with_concurrency(0),
        LimiterConfig::new().with_concurrency(usize::MAX),
        LimiterConfig::new().with_starvation_guard(Some(Duration::ZERO)),
        bucket(1, "1/1s").with_budget(BudgetSpec::token_bucket("rate", 2, rate("1/1s")).unwrap()),
    ];
    for config in refused {
        assert!(Limiter::new("api", config.clone()).is_err(), "{config:?} should be refused");
    }
    for text in ["0/1s", "-3/1s", "NaN/1s", "inf/1s", "1/0s"] {
        assert!(text.parse::<Rate>().is_err(), "{text} should be refused");
    }
}

/// A lone uncapped bucket admits without the lock while idle; these cover every hand-over
/// between that path and the locked one.
#[tokio::test(start_paused = true)]
async fn lock_free_admissions_hand_over_to_pauses_caps_and_queues() {
    let limiter = Limiter::new("api", bucket(3, "1/1s")).unwrap();
    let held: Vec<_> = (0..3).map(|_| limiter.try_acquire(1).unwrap()).collect();
    assert_eq!(limiter.in_flight(), 3, "lock-free permits are counted in flight");
    assert!((limiter.snapshot().budgets[0].available).abs() < 1e-9, "the snapshot sees the spent tokens");
    assert!(matches!(limiter.try_acquire(1), Err(TryAcquireError::WouldWait(Blocked::Budget { .. }))));

    // A cap below what is in flight holds the next admission until permits come back.
    limiter.reconfigure(bucket(3, "1/1s").with_concurrency(2)).unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(matches!(limiter.try_acquire(1), Err(TryAcquireError::WouldWait(Blocked::Concurrency { limit: 2 }))));
    drop(held);
    limiter.reconfigure(bucket(3, "1/1s")).unwrap();
    let start = Instant::now();
    drop(limiter.try_acquire(1).unwrap());

    // A pause stops the lock-free path too, and it resumes once the pause is over.
    limiter.pause_until(start + Duration::from_secs(2), "429");
    assert!(matches!(limiter.try_acquire(1), Err(TryAcquireError::WouldWait(Blocked::Paused { .. }))));
    let _permit = limiter.acquire(Priority::Normal, 1).await.unwrap();
    assert_eq!(start.elapsed(), Duration::from_secs(2));
    drop(limiter.try_acquire(1).unwrap());

    // Empty bucket, a waiter for two tokens and one for one: a single returned token may not
    // be taken by try_acquire past them.
    drop(limiter.try_acquire(1).unwrap());
    let waiters: Vec<_> = [2, 1]
        .into_iter()
        .map(|cost| {
            let limiter = limiter.clone();
            tokio::spawn(async move { limiter.acquire(Priority::Normal, cost).await.map(|_| Instant::now()) })
        })
        .collect();
    until_queued(&limiter, 2).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!((limiter.snapshot().budgets[0].available - 1.0).abs() < 1e-9);
    assert!(limiter.try_acquire(1).is_err(), "queued requests keep their turn");
    let mut admitted = Vec::new();
    for waiter in waiters {
        admitted.push(waiter.await.unwrap().unwrap() - start);
    }
    assert_eq!(admitted, [Duration::from_secs(4), Duration::from_secs(5)]);
    // Idle again: the next token (at 6 s) is taken without waiting in line.
    tokio::time::sleep_until(start + Duration::from_secs(6)).await;
    drop(limiter.try_acquire(1).unwrap());
    assert!(limiter.try_acquire(1).is_err());
}

/// A lone bucket with a cap admits without the lock too: the cap is checked on the in-flight
/// count, the bucket is charged, and a request at the cap waits for a returned permit.
#[tokio::test(start_paused = true)]
async fn a_capped_bucket_admits_up_to_its_cap_and_a_returned_permit_lets_the_next_in() {
    let limiter = Limiter::new("api", bucket(10, "1/1s").with_concurrency(2)).unwrap();
    let first = limiter.try_acquire(1).unwrap();
    let second = limiter.try_acquire(1).unwrap();
    assert_eq!(limiter.in_flight(), 2);
    assert!(matches!(limiter.try_acquire(1), Err(TryAcquireError::WouldWait(Blocked::Concurrency { limit: 2 }))));
    assert_eq!(limiter.in_flight(), 2, "a refused attempt gives its count back");
    assert!((limiter.snapshot().budgets[0].available - 8.0).abs() < 1e-9, "two tokens spent, the refusal none");
    let start = Instant::now();
    let waiter = tokio::spawn({
        let limiter = limiter.clone();
        async move { limiter.acquire(Priority::Normal, 1).await.map(|permit| (Instant::now(), permit)) }
    });
    until_queued(&limiter, 1).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    drop(first);
    let (admitted, _third) = waiter.await.unwrap().unwrap();
    assert_eq!(admitted - start, Duration::from_secs(3), "admitted when the permit came back, not before");
    drop(second);
    // Lowered below what is in flight: the next admission waits until enough came back.
    limiter.reconfigure(bucket(10, "1/1s").with_concurrency(1)).unwrap();
    assert!(matches!(limiter.try_acquire(1), Err(TryAcquireError::WouldWait(Blocked::Concurrency { limit: 1 }))));
}

/// `try_spend` is `try_acquire` with the permit dropped at once, on the lock-free path and the
/// locked one alike: budgets, cap and queue decide; nothing stays in flight.
#[tokio::test(start_paused = true)]
async fn try_spend_decides_as_an_admission_that_finishes_at_once() {
    let limiter = Limiter::new("api", bucket(3, "3/1s").with_concurrency(1)).unwrap();
    for _ in 0..3 {
        limiter.try_spend(1).unwrap();
    }
    assert_eq!(limiter.in_flight(), 0, "a spend holds no slot, so a cap of one let three through");
    let Err(TryAcquireError::WouldWait(Blocked::Budget { name, wait })) = limiter.try_spend(1) else {
        panic!("an empty bucket refuses")
    };
    assert_eq!((name.as_str(), wait), ("rate", Duration::from_nanos(333_333_334)));
    tokio::time::sleep(wait).await;
    // A held slot fills the cap: a spend is refused as a permit would be, and spends nothing.
    let held = limiter.try_acquire(1).unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(matches!(limiter.try_spend(1), Err(TryAcquireError::WouldWait(Blocked::Concurrency { limit: 1 }))));
    drop(held);
    assert!((limiter.snapshot().budgets[0].available - 3.0).abs() < 1e-9, "the refused spend took no token");
    let emptied = Instant::now();
    limiter.try_spend(3).unwrap();
    assert!(matches!(limiter.try_spend(0), Err(TryAcquireError::Invalid(AcquireError::ZeroCost))));
    assert!(matches!(limiter.try_spend(4), Err(TryAcquireError::Invalid(AcquireError::CostExceedsCapacity { .. }))));

    // Someone queued keeps their turn: a spend may not take the token they wait for.
    let waiter = tokio::spawn({
        let limiter = limiter.clone();
        async move { limiter.acquire(Priority::Normal, 1).await.map(|_| Instant::now()) }
    });
    until_queued(&limiter, 1).await;
    assert!(limiter.try_spend(1).is_err());
    let admitted = waiter.await.unwrap().unwrap();
    // The first token back, a third of a second later (on the timer's millisecond).
    assert_eq!(admitted - emptied, Duration::from_millis(334));

    // Stacked budgets take the locked path: the window counts the spend, nothing is in flight.
    let stacked =
        bucket(5, "5/1s").with_budget(BudgetSpec::sliding_window("minute", 2, Duration::from_secs(60)).unwrap());
    let limiter = Limiter::new("stacked", stacked).unwrap();
    limiter.try_spend(1).unwrap();
    limiter.try_spend(1).unwrap();
    assert!(
        matches!(limiter.try_spend(1), Err(TryAcquireError::WouldWait(Blocked::Budget { name, .. })) if name == "minute")
    );
    assert_eq!(limiter.in_flight(), 0);
}

/// Threads racing lock-free admissions against locked ones (a snapshot takes the lock and
/// parks the bucket's word) never hold more permits than the cap at once.
#[test]
fn a_cap_holds_while_lock_free_and_locked_admissions_race() {
    const CAP: usize = 2;
    let limiter = Limiter::new("api", bucket(1_000_000, "1000000/1s").with_concurrency(CAP)).unwrap();
    let holding = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (most, refused) = (Arc::new(std::sync::atomic::AtomicUsize::new(0)), Arc::new(Mutex::new(0u64)));
    let threads: Vec<_> = (0..6)
        .map(|thread| {
            let (limiter, holding, most, refused) =
                (limiter.clone(), Arc::clone(&holding), Arc::clone(&most), Arc::clone(&refused));
            std::thread::spawn(move || {
                use std::sync::atomic::Ordering::SeqCst;
                for round in 0..50_000u32 {
                    match limiter.try_acquire(1) {
                        Ok(permit) => {
                            let now = holding.fetch_add(1, SeqCst) + 1;
                            most.fetch_max(now, SeqCst);
                            // Held across a yield, so other threads try while it is held.
                            std::thread::yield_now();
                            holding.fetch_sub(1, SeqCst);
                            drop(permit);
                        }
                        Err(TryAcquireError::WouldWait(Blocked::Concurrency { limit: CAP })) => *refused.lock() += 1,
                        Err(other) => panic!("only the cap may refuse: {other:?}"),
                    }
                    if (round + thread) % 3 == 0 {
                        let _ = limiter.snapshot();
                    }
                }
            })
        })
        .collect();
    threads.into_iter().for_each(|thread| thread.join().unwrap());
    let most = most.load(std::sync::atomic::Ordering::SeqCst);
    assert!(most <= CAP, "{most} permits were held at once under a cap of {CAP}");
    assert_eq!(most, CAP, "the threads did reach the cap");
    assert!(*refused.lock() > 0, "the cap refused some attempts");
    assert_eq!(limiter.in_flight(), 0, "every count was given back");
}

#[tokio::test(start_paused = true)]
async fn a_bucket_settled_below_its_estimate_refills_by_the_difference_and_above_it_goes_into_debt() {
    // 10 tokens refilled at 10/s; the lock-free path serves this limiter while it is idle.
    let limiter = Limiter::new("llm", bucket(10, "10/1s")).unwrap();
    let mut estimate = limiter.try_acquire(8).unwrap();
    assert!(limiter.try_acquire(3).is_err(), "the estimate holds 8 of 10");
    estimate.settle(Cost::requests(2));
    assert_eq!(estimate.charged(), Cost::requests(2));
    let six = limiter.try_acquire(6).unwrap();
    assert!(limiter.try_acquire(3).is_err(), "exactly the difference came back, no more");
    drop(six);
    // Settled above its estimate: 2 of debt, so the next token comes 0.3 s later, not 0.1 s.
    let mut over = limiter.try_acquire(2).unwrap();
    over.settle(Cost::requests(4));
    let start = Instant::now();
    let _next = limiter.acquire(Priority::Normal, 1).await.unwrap();
    assert_eq!(start.elapsed(), Duration::from_millis(300));
    // A refund never fills the bucket past its capacity.
    tokio::time::sleep(Duration::from_secs(5)).await;
    estimate.settle(Cost::requests(0));
    assert!(limiter.try_acquire(10).is_ok());
    assert!(limiter.try_acquire(1).is_err(), "a refund on a full bucket adds nothing");
}

#[tokio::test(start_paused = true)]
async fn a_window_settles_in_the_admissions_slot_and_a_refund_wakes_the_queue() {
    let config =
        LimiterConfig::new().with_budget(BudgetSpec::sliding_window("tokens", 10, Duration::from_secs(60)).unwrap());
    let limiter = Limiter::new("llm", config).unwrap();
    let mut first = limiter.try_acquire(6).unwrap();
    let waiter = {
        let limiter = limiter.clone();
        tokio::spawn(async move {
            let start = Instant::now();
            let _permit = limiter.acquire(Priority::Normal, 7).await.unwrap();
            start.elapsed()
        })
    };
    until_queued(&limiter, 1).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    first.settle(Cost::requests(3));
    assert_eq!(waiter.await.unwrap(), Duration::from_secs(1), "admitted the moment the refund came");
    // The window now holds 3 + 7 = 10. A settlement above the estimate overfills it: the next
    // unit waits for the first admission (now 4 units) to leave, 60 s after it.
    first.settle(Cost::requests(4));
    let start = Instant::now();
    let _late = limiter.acquire(Priority::Normal, 1).await.unwrap();
    assert_eq!(start.elapsed(), Duration::from_secs(59));
    // Once an admission left the window, settling it changes nothing.
    first.settle(Cost::requests(0));
    assert!(limiter.try_acquire(2).is_ok());
    assert!(limiter.try_acquire(1).is_err(), "7 + 1 + 2 = 10: nothing was refunded twice");
}

#[tokio::test(start_paused = true)]
async fn an_unsettled_permit_keeps_its_estimate_after_it_is_dropped() {
    let config =
        LimiterConfig::new().with_budget(BudgetSpec::sliding_window("tokens", 10, Duration::from_secs(60)).unwrap());
    let limiter = Limiter::new("llm", config).unwrap();
    drop(limiter.try_acquire(7).unwrap());
    assert!(limiter.try_acquire(4).is_err(), "dropping is not a refund");
    assert!(limiter.try_acquire(3).is_ok());
}

#[tokio::test(start_paused = true)]
async fn budgets_of_different_units_stack_on_one_key_and_tokens_settle() {
    // 3 requests per minute and 1000 tokens per minute, as an LLM API publishes them.
    let config = LimiterConfig::new()
        .with_budget(BudgetSpec::sliding_window("requests", 3, Duration::from_secs(60)).unwrap())
        .with_budget(
            BudgetSpec::sliding_window("tokens", 1000, Duration::from_secs(60)).unwrap().with_unit(Unit::tokens()),
        );
    let limiter = Limiter::new("llm", config).unwrap();
    let prompt = |tokens| Cost::requests(1).with(Unit::tokens(), tokens);
    let mut big = limiter.try_acquire_cost(prompt(800)).unwrap();
    let err = limiter.try_acquire_cost(prompt(300)).unwrap_err();
    assert!(matches!(err, TryAcquireError::WouldWait(Blocked::Budget { ref name, .. }) if name == "tokens"), "{err:?}");
    // The answer used 350 tokens: 450 come back, and the requests budget is untouched.
    big.settle(prompt(350));
    let _second = limiter.try_acquire_cost(prompt(650)).unwrap();
    let err = limiter.try_acquire_cost(prompt(1)).unwrap_err();
    assert!(matches!(err, TryAcquireError::WouldWait(Blocked::Budget { ref name, .. }) if name == "tokens"), "{err:?}");
    let _third = limiter.try_acquire(1).unwrap();
    let err = limiter.try_acquire(1).unwrap_err();
    assert!(
        matches!(err, TryAcquireError::WouldWait(Blocked::Budget { ref name, .. }) if name == "requests"),
        "{err:?}"
    );
    let over = limiter.try_acquire_cost(prompt(1001)).unwrap_err();
    assert!(matches!(over, TryAcquireError::Invalid(AcquireError::CostExceedsCapacity { .. })), "{over:?}");
}

#[tokio::test(start_paused = true)]
async fn a_budgets_cost_per_request_bounds_the_requests_one_admission_may_count() {
    // Capacity 5 at 2 a request: two requests fit in one admission, three (6) never do.
    let per_request = |capacity| {
        let rate = Rate::new(1, Duration::from_secs(1)).unwrap();
        LimiterConfig::new()
            .with_budget(BudgetSpec::token_bucket("pricey", capacity, rate).unwrap().with_cost(2).unwrap())
            .with_concurrency(8)
    };
    let limiter = Limiter::new("api", per_request(5)).unwrap();
    assert!(limiter.try_acquire(2).is_ok());
    assert!(matches!(
        limiter.try_acquire(3),
        Err(TryAcquireError::Invalid(AcquireError::CostExceedsCapacity { cost: 6, capacity: 5, .. }))
    ));
    // A smaller capacity from a reconfiguration lowers the bound at once.
    limiter.reconfigure(per_request(3)).unwrap();
    assert!(matches!(
        limiter.try_acquire(2),
        Err(TryAcquireError::Invalid(AcquireError::CostExceedsCapacity { cost: 4, capacity: 3, .. }))
    ));
    assert!(matches!(limiter.acquire(Priority::Normal, 2).await, Err(AcquireError::CostExceedsCapacity { .. })));
}
