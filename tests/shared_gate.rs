//! The fail policies of `SharedGate` while its store cannot be reached (paused tokio time, no Redis needed).
//!
//! The store points at a port nothing listens on, so every ask fails as a Redis outage
//! would; what the gate does then is the policy's business, and that is what these pin down.

use std::time::Duration;

use ratescope::engine::{BudgetSpec, Rate};
use ratescope::store::{
    AdmittedVia, FailPolicy, PROBE_INTERVAL, RedisStore, RedisStoreOptions, SharedGate, StoreHealth, StoreState,
};
use tokio::time::Instant;

/// A store whose server is away (nothing listens on port 1).
fn unreachable_store() -> RedisStore {
    RedisStore::connect_lazy("redis://127.0.0.1:1", "ratescope-test", RedisStoreOptions::default()).unwrap()
}

fn gate(policy: FailPolicy, budgets: &[BudgetSpec]) -> SharedGate {
    SharedGate::new(unreachable_store(), StoreHealth::new(), "team/api.example.com", budgets, policy).unwrap()
}

fn window(limit: u64, seconds: u64) -> BudgetSpec {
    BudgetSpec::sliding_window("window", limit, Duration::from_secs(seconds)).unwrap()
}

#[tokio::test(start_paused = true)]
async fn fail_open_lets_requests_through_and_asks_the_dead_store_once_per_probe_interval() {
    let gate = gate(FailPolicy::Open, &[window(5, 60)]);
    for _ in 0..100 {
        let admission = gate.admit(1).await.unwrap();
        assert_eq!(admission.via, AdmittedVia::FailOpen);
    }
    let counts = gate.health().counts();
    assert_eq!(counts.failed_open, 100, "every request let through is counted");
    assert_eq!(counts.unavailable, 1, "within one probe interval the dead store is asked once, not per request");
    assert_eq!(counts.admitted, 0);
    assert!(
        matches!(gate.health().state(), StoreState::Degraded { policy: FailPolicy::Open, .. }),
        "{}",
        gate.health().state()
    );

    tokio::time::advance(PROBE_INTERVAL).await;
    gate.admit(1).await.unwrap();
    assert_eq!(gate.health().counts().unavailable, 2, "asked again once the interval passed");
}

#[tokio::test(start_paused = true)]
async fn local_fallback_paces_by_this_instances_share_of_each_budget() {
    // 6 per minute shared by 2 instances: this one may send 3 a minute while Redis is away.
    let gate = gate(FailPolicy::Local { instances: 2 }, &[window(6, 60)]);
    let start = Instant::now();
    let mut admitted_at = Vec::new();
    for _ in 0..5 {
        let admission = gate.admit(1).await.unwrap();
        assert_eq!(admission.via, AdmittedVia::LocalFallback);
        admitted_at.push(start.elapsed());
    }
    assert!(admitted_at[..3].iter().all(|at| *at < Duration::from_secs(1)), "{admitted_at:?}");
    assert!(
        admitted_at[3..].iter().all(|at| *at >= Duration::from_secs(60)),
        "the 4th waits for the window: {admitted_at:?}"
    );
    assert_eq!(gate.health().counts().local_fallback, 5);
    assert!(matches!(gate.health().state(), StoreState::Degraded { policy: FailPolicy::Local { instances: 2 }, .. }));
}

#[tokio::test(start_paused = true)]
async fn fail_closed_waits_and_keeps_probing_at_the_interval() {
    let gate = gate(FailPolicy::Closed, &[window(5, 60)]);
    let waited = tokio::time::timeout(Duration::from_secs(10), gate.admit(1)).await;
    assert!(waited.is_err(), "nothing passes while the store is away");
    let counts = gate.health().counts();
    assert_eq!((counts.admitted, counts.failed_open, counts.local_fallback), (0, 0, 0));
    // One probe per interval at most; each probe may itself take up to the command timeout.
    let probes = counts.unavailable;
    let most = (10_000 / PROBE_INTERVAL.as_millis()) as u64 + 1;
    let least = (10_000 / (PROBE_INTERVAL + RedisStoreOptions::default().command_timeout).as_millis()) as u64 - 1;
    assert!((least..=most).contains(&probes), "{probes} probes in 10 s, expected {least}..={most}");
    assert!(matches!(gate.health().state(), StoreState::Degraded { policy: FailPolicy::Closed, .. }));
}

#[tokio::test(start_paused = true)]
async fn costs_no_budget_can_hold_are_refused_before_any_io() {
    let rate = Rate::new(2, Duration::from_secs(1)).unwrap();
    let gate = gate(FailPolicy::Open, &[BudgetSpec::token_bucket("rate", 2, rate).unwrap()]);
    let err = gate.admit(3).await.unwrap_err();
    assert!(err.to_string().contains("never be admitted"), "{err}");
    assert_eq!(gate.health().counts().unavailable, 0, "refused before asking the store");
    assert_eq!(gate.health().state(), StoreState::Idle);
}

#[tokio::test(start_paused = true)]
async fn bad_gate_settings_are_refused() {
    let store = unreachable_store();
    let health = StoreHealth::new();
    assert!(SharedGate::new(store.clone(), health.clone(), "", &[window(5, 60)], FailPolicy::Open).is_err());
    assert!(SharedGate::new(store.clone(), health.clone(), "a{b}", &[window(5, 60)], FailPolicy::Open).is_err());
    let zero = FailPolicy::Local { instances: 0 };
    assert!(SharedGate::new(store, health, "team", &[window(5, 60)], zero).is_err());
}
