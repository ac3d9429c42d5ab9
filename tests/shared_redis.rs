//! Budgets shared through a real Redis: several processes, skewed clocks, a Redis restart mid-burst, `SCRIPT FLUSH` mid-run, token leases.
//!
//! Processes are this test binary started again in the `child_role` test (which does nothing
//! unless `RATESCOPE_SHARED_CHILD` is set), some under `faketime` with a clock hours or days
//! off. Tests that stop Redis use a private `redis-server` on a free port. Without Redis
//! (or `redis-server`, or `faketime`) tests print a NOTICE and pass, unless
//! `RATESCOPE_REQUIRE_REDIS=1` makes them fail.

mod redis_support;

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::Duration;

use ratescope::engine::{BudgetSpec, LimiterConfig, Rate};
use ratescope::mock::{MockConfig, MockServer};
use ratescope::run::{Burst, BurstSpec};
use ratescope::store::{FailPolicy, RedisStore, SHARED_PREFIX, SharedGate, SharedSettings, StoreHealth, StoreState};
use redis::AsyncCommands;
use redis_support::{PrivateRedis, faketime_available, redis_url, shared_server_up, skip_or_fail};
use url::Url;

/// The budgets of a scenario, the same in every process.
fn scenario_budgets(scenario: &str) -> Vec<BudgetSpec> {
    let window = BudgetSpec::sliding_window("minute", 12, Duration::from_secs(60)).unwrap();
    match scenario {
        "window" => vec![window],
        // A bucket of 8 (one token back every 10 minutes) beside a window of 5 a minute:
        // the window binds, and a request the window refuses must not spend a token.
        "stacked" => vec![
            BudgetSpec::token_bucket("bucket", 8, Rate::new(1, Duration::from_secs(600)).unwrap()).unwrap(),
            BudgetSpec::sliding_window("minute", 5, Duration::from_secs(60)).unwrap(),
        ],
        other => panic!("unknown scenario {other}"),
    }
}

/// Not a test of its own: the body of a child process (see the module doc), ignored in a
/// normal run so it never counts as a pass; the parents run it with `--ignored --exact`.
#[test]
#[ignore = "the body of the child processes that the other tests start"]
fn child_role() {
    let scenario = std::env::var("RATESCOPE_SHARED_CHILD").expect("run by a parent test, which sets the scenario");
    let key = std::env::var("CHILD_KEY").unwrap();
    let want: usize = std::env::var("CHILD_WANT").unwrap().parse().unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let admitted = runtime.block_on(async {
        let store = RedisStore::connect(&redis_url(), SHARED_PREFIX).await.unwrap();
        let gate =
            SharedGate::new(store, StoreHealth::new(), key, &scenario_budgets(&scenario), FailPolicy::Closed).unwrap();
        // Keep asking for two seconds: long enough for every process to overlap, far shorter
        // than any budget takes to refill.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
        let mut admitted = 0;
        for _ in 0..want {
            match tokio::time::timeout_at(deadline, gate.admit(1)).await {
                Ok(admission) => {
                    admission.unwrap();
                    admitted += 1;
                }
                Err(_) => break,
            }
        }
        admitted
    });
    println!("ADMITTED {admitted}");
}

/// A process's clock: true, or shifted by a faketime offset such as `+3h` (the wall clock
/// only, or the monotonic clock too).
#[derive(Clone, Copy)]
enum Clock {
    True,
    Skewed { offset: &'static str, monotonic_too: bool },
}

/// Runs one process of `scenario` on `key` per entry of `clocks`; returns what each admitted.
fn run_children(scenario: &str, key: &str, want: usize, clocks: &[Clock]) -> Vec<usize> {
    let exe = std::env::current_exe().unwrap();
    let spawned: Vec<_> = clocks
        .iter()
        .map(|clock| {
            let mut command = match *clock {
                Clock::Skewed { offset, monotonic_too } => {
                    let mut command = Command::new("faketime");
                    command.args(["-f", offset]).arg(&exe);
                    if !monotonic_too {
                        command.env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
                    }
                    command
                }
                Clock::True => Command::new(&exe),
            };
            command
                .args(["child_role", "--exact", "--ignored", "--nocapture", "--test-threads=1"])
                .env("RATESCOPE_SHARED_CHILD", scenario)
                .env("CHILD_KEY", key)
                .env("CHILD_WANT", want.to_string())
                .env("RATESCOPE_REDIS_URL", redis_url())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    spawned
        .into_iter()
        .map(|child| {
            let output = child.wait_with_output().unwrap();
            let stdout = String::from_utf8_lossy(&output.stdout);
            assert!(output.status.success(), "child failed: {stdout}\n{}", String::from_utf8_lossy(&output.stderr));
            stdout
                .lines()
                .find_map(|line| line.split("ADMITTED ").nth(1))
                .unwrap_or_else(|| panic!("no count in {stdout}"))
                .trim()
                .parse()
                .unwrap()
        })
        .collect()
}

fn unique_key(test: &str) -> String {
    format!("test-{test}-{:016x}/api.example.com", rand::random::<u64>())
}

async fn raw_connection() -> redis::aio::MultiplexedConnection {
    redis::Client::open(redis_url()).unwrap().get_multiplexed_async_connection().await.unwrap()
}

/// Deletes every Redis key of a shared key.
async fn cleanup(key: &str) {
    redis_support::delete_keys(&format!("{{{SHARED_PREFIX}:{key}}}*")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_sharing_one_window_admit_exactly_its_allowance() {
    if !shared_server_up().await {
        return skip_or_fail(&format!("no server answers at {}", redis_url()));
    }
    let key = unique_key("window");
    let counts = tokio::task::spawn_blocking({
        let key = key.clone();
        move || run_children("window", &key, 6, &[Clock::True; 4])
    })
    .await
    .unwrap();
    // 4 processes want 24; the window holds 12 a minute: exactly 12 pass, wherever they ran.
    assert_eq!(counts.iter().sum::<usize>(), 12, "per process: {counts:?}");
    let mut raw = raw_connection().await;
    let members: u64 = raw.zcard(format!("{{{SHARED_PREFIX}:{key}}}:minute:window")).await.unwrap();
    assert_eq!(members, 12);
    cleanup(&key).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stacked_budgets_are_decided_together_across_skewed_clocks() {
    if !shared_server_up().await {
        return skip_or_fail(&format!("no server answers at {}", redis_url()));
    }
    if !faketime_available() {
        return skip_or_fail("faketime (libfaketime) is not installed, so no process can run with a skewed clock");
    }
    let key = unique_key("stacked");
    // Three processes: one with a true clock, one three hours ahead (wall and monotonic
    // clocks), one two days behind (wall clock).
    let clocks = [
        Clock::True,
        Clock::Skewed { offset: "+3h", monotonic_too: true },
        Clock::Skewed { offset: "-2d", monotonic_too: false },
    ];
    let counts = tokio::task::spawn_blocking({
        let key = key.clone();
        move || run_children("stacked", &key, 6, &clocks)
    })
    .await
    .unwrap();
    assert_eq!(counts.iter().sum::<usize>(), 5, "the window of 5 binds: {counts:?}");

    // The bucket spent exactly 5 tokens of 8: refused requests spent nothing in it either.
    let mut raw = raw_connection().await;
    let tat: f64 = raw.get(format!("{{{SHARED_PREFIX}:{key}}}:bucket:tat")).await.unwrap();
    let (seconds, micros): (u64, u64) = redis::cmd("TIME").query_async(&mut raw).await.unwrap();
    let now = (seconds * 1_000_000 + micros) as f64;
    let spent = ((tat - now) / 600e6).ceil();
    assert_eq!(spent, 5.0, "tokens spent in the bucket");
    cleanup(&key).await;
}

const SERVER: &str = r#"
[[routes]]
prefix = "/items"
dialect = "none"
"#;

async fn demo_api() -> MockServer {
    MockServer::start(MockConfig::from_toml(SERVER).unwrap(), SocketAddr::from(([127, 0, 0, 1], 0))).await.unwrap()
}

/// A burst of 60 requests at 40/s through a shared window of 1000 a minute on `redis`,
/// killing Redis after 15 have finished and starting it again once the gate has seen it fail
/// `outage_probes` times.
async fn burst_through_a_redis_restart(policy: FailPolicy) -> Option<ratescope::run::Summary> {
    let mut redis = PrivateRedis::start().await?;
    let api = demo_api().await;
    let url: Url = format!("{}items", api.url()).parse().unwrap();
    let limits =
        LimiterConfig::new().with_budget(BudgetSpec::sliding_window("minute", 1000, Duration::from_secs(60)).unwrap());
    let shared = SharedSettings::new(redis.url(), "restart").unwrap().with_policy(policy).unwrap();
    let spec = BurstSpec {
        arrival: ratescope::run::ArrivalPattern::FixedRate("40/1s".parse().unwrap()),
        limits: Some(limits),
        shared: Some(shared),
        ..BurstSpec::get(url, 60)
    };
    let burst = Burst::start_with_own_client(spec).unwrap();
    let health = burst.shared_health().expect("budgets are shared");
    while burst.progress().done < 15 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    redis.stop();
    while health.counts().unavailable < 2 && !burst.is_finished() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(matches!(health.state(), StoreState::Degraded { .. }), "{}", health.state());
    redis.restart().await.unwrap();
    let (summary, _) =
        tokio::time::timeout(Duration::from_secs(30), burst.finish()).await.expect("the burst completes");
    api.shutdown().await.unwrap();
    Some(summary)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_restarted_mid_burst_fail_closed_waits_and_completes() {
    let Some(summary) = burst_through_a_redis_restart(FailPolicy::Closed).await else { return };
    assert_eq!(summary.succeeded, 60, "{summary}");
    let shared = summary.shared.expect("a shared report");
    assert!(shared.counts.unavailable >= 2, "{shared:?}");
    assert_eq!(shared.counts.admitted, 60, "fail-closed: every request decided by Redis, {shared:?}");
    assert_eq!((shared.counts.failed_open, shared.counts.local_fallback), (0, 0));
    assert_eq!(shared.state, StoreState::Connected.to_string());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_restarted_mid_burst_fail_open_sends_and_counts() {
    let Some(summary) = burst_through_a_redis_restart(FailPolicy::Open).await else { return };
    assert_eq!(summary.succeeded, 60, "{summary}");
    let shared = summary.shared.expect("a shared report");
    assert!(shared.counts.failed_open >= 1, "{shared:?}");
    assert_eq!(shared.counts.admitted + shared.counts.failed_open, 60, "{shared:?}");
    assert_eq!(shared.counts.local_fallback, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_restarted_mid_burst_local_fallback_paces_locally() {
    let Some(summary) = burst_through_a_redis_restart(FailPolicy::Local { instances: 2 }).await else { return };
    assert_eq!(summary.succeeded, 60, "{summary}");
    let shared = summary.shared.expect("a shared report");
    assert!(shared.counts.local_fallback >= 1, "{shared:?}");
    assert_eq!(shared.counts.admitted + shared.counts.local_fallback, 60, "{shared:?}");
    assert_eq!(shared.counts.failed_open, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn script_flush_mid_run_loses_no_decision() {
    let Some(redis) = PrivateRedis::start().await else { return };
    let store = RedisStore::connect(&redis.url(), SHARED_PREFIX).await.unwrap();
    let budgets = [BudgetSpec::sliding_window("minute", 40, Duration::from_secs(60)).unwrap()];
    let gate = SharedGate::new(store, StoreHealth::new(), "flush", &budgets, FailPolicy::Closed).unwrap();
    let flusher = tokio::spawn({
        let url = redis.url();
        async move {
            let mut raw = redis::Client::open(url).unwrap().get_multiplexed_async_connection().await.unwrap();
            for _ in 0..20 {
                let _: () = redis::cmd("SCRIPT").arg("FLUSH").query_async(&mut raw).await.unwrap();
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }
    });
    for _ in 0..40 {
        gate.admit(1).await.unwrap();
    }
    flusher.await.unwrap();
    let counts = gate.health().counts();
    assert_eq!((counts.admitted, counts.unavailable, counts.failed_open), (40, 0, 0), "{counts:?}");
    // The window is now full: the 41st is refused by Redis, not let through.
    assert!(tokio::time::timeout(Duration::from_millis(300), gate.admit(1)).await.is_err());
}

/// A token lease (issue #19): one round trip takes four requests' worth, the store counts all
/// four at once, and the overshoot is what the documentation says: a window may see its limit
/// plus the lease less one, never more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_takes_a_batch_per_round_trip_and_overshoots_by_at_most_its_size_less_one() {
    if !shared_server_up().await {
        return skip_or_fail(&format!("no server answers at {}", redis_url()));
    }
    let key = unique_key("lease");
    let budgets = [BudgetSpec::sliding_window("second", 10, Duration::from_secs(1)).unwrap()];
    let leasing = leasing_gate(&key, &budgets, 4).await;
    let plain = leasing_gate(&key, &budgets, 1).await;

    // One round trip, four requests' worth counted in Redis; the next three need no round trip.
    leasing.admit(1).await.unwrap();
    let mut raw = raw_connection().await;
    let window = format!("{{{SHARED_PREFIX}:{key}}}:second:window");
    assert_eq!(raw.zcard::<_, u64>(&window).await.unwrap(), 4, "the whole lease is spent in the store");
    // Another process gets only what is left: 10 - 4.
    let mut others = 0;
    while tokio::time::timeout(Duration::from_millis(100), plain.admit(1)).await.is_ok() {
        others += 1;
        assert!(others <= 10, "the plain gate ran past the window");
        if others == 6 {
            break;
        }
    }
    assert_eq!(others, 6);
    assert!(tokio::time::timeout(Duration::from_millis(100), plain.admit(1)).await.is_err(), "the window is full");

    // Once the lease's tokens have left the window, the plain gate gets a whole fresh window of
    // 10, and the leasing process still holds 3: 13 sent within moments = limit + (4 - 1).
    let mut fresh = 0;
    while fresh < 10 {
        plain.admit(1).await.unwrap();
        fresh += 1;
    }
    let round_trips = leasing.health().counts().round_trips;
    for _ in 0..3 {
        let held = tokio::time::timeout(Duration::from_millis(100), leasing.admit(1)).await;
        held.expect("a held token needs no wait").unwrap();
    }
    assert_eq!(leasing.health().counts().round_trips, round_trips, "held tokens cost no round trip");
    assert_eq!(leasing.health().counts().leased, 3);
    // The lease is used up: the next request asks the store, and the window is full.
    assert!(tokio::time::timeout(Duration::from_millis(100), leasing.admit(1)).await.is_err());
    cleanup(&key).await;
}

/// A gate of its own store (as another process would have) taking `lease` requests' worth per round trip.
async fn leasing_gate(key: &str, budgets: &[BudgetSpec], lease: u64) -> SharedGate {
    let store = RedisStore::connect(&redis_url(), SHARED_PREFIX).await.unwrap();
    let gate = SharedGate::new(store, StoreHealth::new(), key, budgets, FailPolicy::Closed).unwrap();
    gate.with_lease(lease, Duration::from_secs(30)).unwrap()
}
