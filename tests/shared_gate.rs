//! The fail policies of `SharedGate` while its store cannot be reached (paused tokio time, no Redis needed).
//!
//! The store points at a port nothing listens on, so every ask fails as a Redis outage
//! would; what the gate does then is the policy's business, and that is what these pin down.

use std::time::Duration;

use ratescope::engine::{BudgetSpec, Rate};
use ratescope::store::{
    AdmittedVia, FailPolicy, PROBE_INTERVAL, RedisStore, RedisStoreOptions, SharedGate, StoreError, StoreHealth,
    StoreState,
};
use tokio::time::Instant;

mod redis_support;

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
    assert!(SharedGate::new(store.clone(), health.clone(), "team", &[window(5, 60)], zero).is_err());
    let gate = || SharedGate::new(store.clone(), health.clone(), "team", &[window(5, 60)], FailPolicy::Open).unwrap();
    assert!(gate().with_lease(0, Duration::from_secs(1)).is_err());
    assert!(gate().with_lease(2, Duration::ZERO).is_err());
    assert!(gate().with_lease(ratescope::store::MAX_LEASE + 1, Duration::from_secs(1)).is_err());
    let shared = gate();
    let _clone = shared.clone();
    assert!(shared.with_lease(2, Duration::from_secs(1)).is_err(), "a lease is set before the gate is shared");
}

/// A store that will never let us in: every request fails at once, with an error that says
/// why, instead of waiting for a store that is not coming (a wrong password under fail-closed
/// used to log a warning every half second forever). Real servers: a redis-server of the
/// test's own that wants a password, and a TCP port that answers in HTTP, not RESP.
#[tokio::test]
async fn a_store_that_refuses_us_fails_requests_at_once_whatever_the_policy() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    let server = std::process::Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
        .args(["--requirepass", "right-password"])
        .stdout(std::process::Stdio::null())
        .spawn();
    let Ok(mut server) = server else {
        redis_support::skip_or_fail("redis-server could not be started");
        return;
    };
    let not_redis = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let not_redis_url = format!("redis://{}", not_redis.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = not_redis.accept().await {
            use tokio::io::AsyncWriteExt;
            let _ = stream.write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n").await;
        }
    });
    for _ in 0..200 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let wrong_password = format!("redis://:wrong-password@127.0.0.1:{port}");
    let no_password = format!("redis://127.0.0.1:{port}");
    for url in [&wrong_password, &no_password, &not_redis_url] {
        for policy in [FailPolicy::Closed, FailPolicy::Open, FailPolicy::Local { instances: 2 }] {
            let store = RedisStore::connect_lazy(url, "ratescope-test", RedisStoreOptions::default()).unwrap();
            let gate = SharedGate::new(store, StoreHealth::new(), "team/api", &[window(5, 60)], policy).unwrap();
            // Before the fix fail-closed never returned: the guard turns that hang into a failure.
            let result = tokio::time::timeout(Duration::from_secs(20), gate.admit(1)).await;
            let err = result.unwrap_or_else(|_| panic!("{url} under {policy}: still waiting")).unwrap_err();
            assert!(matches!(err, StoreError::Refused(_)), "{url} under {policy}: {err}");
            let hint =
                if url == &not_redis_url { "did not answer as Redis" } else { "check the URL's user and password" };
            assert!(err.to_string().contains(hint), "{err}");
            assert!(!err.to_string().contains("wrong-password"), "the password leaked: {err}");
        }
    }
    let _ = server.kill();
    let _ = server.wait();
}
