//! Budgets shared through a real Redis: several processes, skewed clocks, a Redis restart mid-burst, `SCRIPT FLUSH` mid-run, token leases, tokens reserved and settled.
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

use ratescope::engine::{BudgetSpec, Cost, LimiterConfig, Rate, Unit};
use ratescope::mock::{MockConfig, MockServer};
use ratescope::run::{Burst, BurstSpec};
use ratescope::store::{
    FailPolicy, RedisStore, SHARED_PREFIX, Settled, SharedGate, SharedSettings, StoreHealth, StoreState,
};
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
/// Starts `command` (this test binary, perhaps under faketime) as `child_role` playing
/// `scenario` on `key`, wanting `want` admissions; its output is piped back.
fn spawn_child(mut command: Command, scenario: &str, key: &str, want: &str) -> std::process::Child {
    command
        .args(["child_role", "--exact", "--ignored", "--nocapture", "--test-threads=1"])
        .env("RATESCOPE_SHARED_CHILD", scenario)
        .env("CHILD_KEY", key)
        .env("CHILD_WANT", want)
        .env("RATESCOPE_REDIS_URL", redis_url())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
#[ignore = "the body of the child processes that the other tests start"]
fn child_role() {
    let scenario = std::env::var("RATESCOPE_SHARED_CHILD").expect("run by a parent test, which sets the scenario");
    let key = std::env::var("CHILD_KEY").unwrap();
    if let Some(settle) = scenario.strip_prefix("tokens-") {
        return tokens_child(&key, settle == "settle");
    }
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
            let command = match *clock {
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
            spawn_child(command, scenario, key, &want.to_string())
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

/// The tokens-per-minute window two processes share in the settlement tests.
const TOKENS_LIMIT: u64 = 3000;
/// What every request reserves; the actual is 10 to 120, so most are over, some under.
const TOKENS_ESTIMATE: u64 = 100;
const TOKENS_ACTUAL_MAX: u64 = 120;

fn tokens_budgets() -> Vec<BudgetSpec> {
    vec![BudgetSpec::sliding_window("tpm", TOKENS_LIMIT, Duration::from_secs(60)).unwrap().with_unit(Unit::tokens())]
}

fn tokens(amount: u64) -> Cost {
    Cost::requests(1).with(Unit::tokens(), amount)
}

/// A child's requests, one after another for two seconds: reserve the estimate, "send" (1 ms),
/// then settle the actual (unless reserve-only). Prints `ADMIT number estimate` and
/// `SETTLE number after actual` (after: the last admission the store had numbered then).
fn tokens_child(key: &str, settle: bool) {
    use rand::{Rng, SeedableRng};
    let seed: u64 = std::env::var("CHILD_SEED").unwrap().parse().unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let store = RedisStore::connect(&redis_url(), SHARED_PREFIX).await.unwrap();
        let gate = SharedGate::new(store, StoreHealth::new(), key, &tokens_budgets(), FailPolicy::Closed).unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
        loop {
            let actual = rng.random_range(10..=TOKENS_ACTUAL_MAX);
            let Ok(admission) = tokio::time::timeout_at(deadline, gate.admit_cost(&tokens(TOKENS_ESTIMATE))).await
            else {
                break;
            };
            let mut reservation = admission.unwrap().reservation.expect("the store decided it alone");
            let number = reservation.number();
            println!("ADMIT {number} {TOKENS_ESTIMATE}");
            tokio::time::sleep(Duration::from_millis(1)).await;
            if settle {
                let settlement = gate.settle(&mut reservation, &tokens(actual)).await.unwrap();
                let after = match settlement.settled.expect("the store is up") {
                    Settled::Applied { after, .. } => after,
                    Settled::Unchanged => 0,
                };
                println!("SETTLE {number} {after} {actual}");
            }
        }
    });
}

/// One admission as the children reported it.
#[derive(Debug, Clone, Copy)]
struct Reported {
    estimate: u64,
    /// The last admission number the store had given when this one settled, and the actual.
    settled: Option<(u64, u64)>,
}

/// Runs two `tokens-settle` or `tokens-reserve` children on `key`; returns every admission by number.
fn run_tokens_children(key: &str, settle: bool) -> Vec<Reported> {
    let exe = std::env::current_exe().unwrap();
    let scenario = if settle { "tokens-settle" } else { "tokens-reserve" };
    let children: Vec<_> = (0..2)
        .map(|seed| {
            let mut command = Command::new(&exe);
            command.env("CHILD_SEED", seed.to_string());
            spawn_child(command, scenario, key, "0")
        })
        .collect();
    let mut admissions = std::collections::BTreeMap::new();
    for child in children {
        let output = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(output.status.success(), "child failed: {stdout}\n{}", String::from_utf8_lossy(&output.stderr));
        // libtest may print its own words before a line of ours on the same line.
        let ours = stdout.lines().filter_map(|line| line.find("ADMIT ").or(line.find("SETTLE ")).map(|at| &line[at..]));
        for line in ours {
            let fields: Vec<u64> = line.split(' ').skip(1).map(|n| n.parse().unwrap()).collect();
            match (line.split(' ').next(), fields.as_slice()) {
                (Some("ADMIT"), &[number, estimate]) => {
                    assert!(admissions.insert(number, Reported { estimate, settled: None }).is_none());
                }
                (Some("SETTLE"), &[number, after, actual]) => {
                    admissions.get_mut(&number).expect("admitted before settled").settled = Some((after, actual));
                }
                _ => {}
            }
        }
    }
    // Every admission of the key came from these two, numbered 1, 2, 3, ... by the store.
    let numbers: Vec<u64> = admissions.keys().copied().collect();
    assert_eq!(numbers, (1..=numbers.len() as u64).collect::<Vec<_>>());
    admissions.into_values().collect()
}

/// What the window counted when admission `k` (0-based) was decided, itself included: the
/// actual of every earlier admission settled before it, the estimate of every other one.
fn counted_at(admissions: &[Reported], k: usize) -> u64 {
    let number = k as u64 + 1;
    admissions[..=k]
        .iter()
        .map(|a| match a.settled {
            Some((after, actual)) if after < number => actual,
            _ => a.estimate,
        })
        .sum()
}

/// Issue #17: two processes share a tokens budget, reserving an estimate that is off (mostly
/// over, sometimes under) and settling the actual. Replayed in the store's own order of
/// admissions and settlements: no admission found the window above its limit, counting actual
/// units once settled and estimates before; the window ends counting exactly the actual units;
/// past the limit only by the underestimates still in flight at the last admission (at most one
/// per process). Reserve-only, the same requests waste budget: fewer are admitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_settling_a_shared_tokens_budget_never_overrun_it_and_use_more_of_it() {
    if !shared_server_up().await {
        return skip_or_fail(&format!("no server answers at {}", redis_url()));
    }
    let (settling_key, reserving_key) = (unique_key("tokens-settle"), unique_key("tokens-reserve"));
    let (settling, reserving) = tokio::task::spawn_blocking({
        let (settling_key, reserving_key) = (settling_key.clone(), reserving_key.clone());
        move || {
            let reserving = std::thread::spawn(move || run_tokens_children(&reserving_key, false));
            (run_tokens_children(&settling_key, true), reserving.join().unwrap())
        }
    })
    .await
    .unwrap();

    for k in 0..settling.len() {
        let counted = counted_at(&settling, k);
        assert!(counted <= TOKENS_LIMIT, "admission {} found {counted} tokens counted", k + 1);
    }
    let actual: Vec<u64> = settling.iter().map(|a| a.settled.expect("every admission settled").1).collect();
    assert!(actual.iter().any(|&n| n < TOKENS_ESTIMATE) && actual.iter().any(|&n| n > TOKENS_ESTIMATE));
    let total: u64 = actual.iter().sum();
    let mut raw = raw_connection().await;
    let window = format!("{{{SHARED_PREFIX}:{settling_key}}}:tpm:tokens:window");
    assert_eq!(raw.zcard::<_, u64>(&window).await.unwrap(), total, "refunds and charges neither lost nor doubled");
    let last = settling.len() as u64;
    let in_flight: Vec<&Reported> =
        settling.iter().filter(|a| a.settled.is_some_and(|(after, _)| after >= last)).collect();
    assert!(in_flight.len() <= 2, "at most one request in flight per process: {in_flight:?}");
    let under: u64 = in_flight.iter().map(|a| a.settled.map_or(0, |(_, n)| n.saturating_sub(a.estimate))).sum();
    assert!(total <= TOKENS_LIMIT + under, "{total} tokens, {under} underestimated in flight");
    assert!(total > TOKENS_LIMIT * 9 / 10, "settled, the window is nearly all used: {total}");

    // Reserve-only: every estimate stays counted, the window fills with 30 requests.
    let window = format!("{{{SHARED_PREFIX}:{reserving_key}}}:tpm:tokens:window");
    assert_eq!(raw.zcard::<_, u64>(&window).await.unwrap(), TOKENS_ESTIMATE * reserving.len() as u64);
    assert_eq!(reserving.len() as u64, TOKENS_LIMIT / TOKENS_ESTIMATE);
    println!("settling: {} requests, {total} tokens; reserve-only: {} requests", settling.len(), reserving.len());
    assert!(
        settling.len() > reserving.len() * 5 / 4,
        "settling admitted {} requests, reserve-only {}",
        settling.len(),
        reserving.len()
    );
    cleanup(&settling_key).await;
    cleanup(&reserving_key).await;
}

/// A store gone at settlement time: the settlement is lost within the command timeout, counted
/// and logged, the store marked degraded; while degraded, settlements do not even ask.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_gone_at_settlement_loses_it_within_the_timeout_and_counts_it() {
    let Some(mut redis) = PrivateRedis::start().await else { return };
    let store = RedisStore::connect(&redis.url(), SHARED_PREFIX).await.unwrap();
    let timeout = store.options().command_timeout;
    let gate = SharedGate::new(store, StoreHealth::new(), "gone", &tokens_budgets(), FailPolicy::Closed).unwrap();
    let mut first = gate.admit_cost(&tokens(100)).await.unwrap().reservation.expect("the store decided");
    let mut second = gate.admit_cost(&tokens(100)).await.unwrap().reservation.expect("the store decided");
    redis.stop();

    let bound = timeout + Duration::from_secs(2);
    let settlement = tokio::time::timeout(bound, gate.settle(&mut first, &tokens(10))).await;
    let settlement = settlement.expect("bounded by the command timeout").expect("an unreachable store is no error");
    assert_eq!(settlement.settled, None);
    assert!(matches!(settlement.state_change, Some(StoreState::Degraded { .. })), "{settlement:?}");
    assert_eq!(first.units("tpm", &Unit::tokens()), Some(100), "the estimate stands");
    let again = gate.settle(&mut second, &tokens(10)).await.unwrap();
    assert_eq!((again.settled, again.state_change), (None, None));
    let counts = gate.health().counts();
    assert_eq!((counts.settles_lost, counts.settled, counts.unavailable), (2, 0, 1), "{counts:?}");
    assert!(counts.to_string().contains("0 settled, 2 settlements lost"), "{counts}");
}

/// Leases are for keys whose budgets all count requests: a tokens key asks the store for every
/// request (each settled on its own), and a lease's admissions have nothing to settle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tokens_key_never_leases_and_leased_admissions_have_no_reservation() {
    if !shared_server_up().await {
        return skip_or_fail(&format!("no server answers at {}", redis_url()));
    }
    let key = unique_key("tokens-lease");
    let store = RedisStore::connect(&redis_url(), SHARED_PREFIX).await.unwrap();
    let gate = SharedGate::new(store.clone(), StoreHealth::new(), &key, &tokens_budgets(), FailPolicy::Closed)
        .unwrap()
        .with_lease(4, Duration::from_secs(30))
        .unwrap();
    for _ in 0..3 {
        let mut reservation = gate.admit_cost(&tokens(100)).await.unwrap().reservation.expect("asked alone");
        assert!(matches!(
            gate.settle(&mut reservation, &tokens(50)).await.unwrap().settled,
            Some(Settled::Applied { .. })
        ));
    }
    let counts = gate.health().counts();
    assert_eq!((counts.round_trips, counts.leased, counts.settled), (6, 0, 3), "{counts:?}");
    let mut raw = raw_connection().await;
    let window = format!("{{{SHARED_PREFIX}:{key}}}:tpm:tokens:window");
    assert_eq!(raw.zcard::<_, u64>(&window).await.unwrap(), 150);

    let requests = [BudgetSpec::sliding_window("minute", 100, Duration::from_secs(60)).unwrap()];
    let leasing = SharedGate::new(store, StoreHealth::new(), &key, &requests, FailPolicy::Closed)
        .unwrap()
        .with_lease(4, Duration::from_secs(30))
        .unwrap();
    assert!(leasing.admit(1).await.unwrap().reservation.is_none(), "the lease's reservation covers four");
    assert!(leasing.admit(1).await.unwrap().reservation.is_none(), "taken from the lease");
    assert_eq!(leasing.health().counts().leased, 1);
    cleanup(&key).await;
}

/// The client settles a shared tokens budget from the answer's usage: the store ends counting
/// what the answers said, not the estimates.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_settles_a_shared_tokens_budget_from_the_answer() {
    if !shared_server_up().await {
        return skip_or_fail(&format!("no server answers at {}", redis_url()));
    }
    let app =
        axum::Router::new().route("/chat", axum::routing::post(|| async { r#"{"usage": {"total_tokens": 30}}"# }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let authority = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let key: ratescope::engine::LimitKey = authority.parse().unwrap();
    let registry =
        ratescope::engine::Registry::from_table([(key, LimiterConfig::new().with_budget(tokens_budgets().remove(0)))])
            .unwrap();
    let name = format!("test-client-{:016x}", rand::random::<u64>());
    let settings = SharedSettings::new(redis_url(), &name).unwrap();
    let (builder, handle) = ratescope::http::LimitedClient::builder()
        .registry(std::sync::Arc::new(registry))
        .share_budgets(&settings)
        .unwrap();
    let client = builder.build().unwrap();
    let rule: ratescope::http::CostRule = "tokens=100->field:usage.total_tokens".parse().unwrap();
    for _ in 0..3 {
        let spec =
            ratescope::http::RequestSpec::new(http::Method::POST, format!("http://{authority}/chat").parse().unwrap())
                .with_cost_rules(vec![rule.clone()]);
        assert_eq!(client.send(spec).await.unwrap().status, 200);
    }
    let shared_key = format!("{name}/{authority}");
    let mut raw = raw_connection().await;
    let window = format!("{{{SHARED_PREFIX}:{shared_key}}}:tpm:tokens:window");
    assert_eq!(raw.zcard::<_, u64>(&window).await.unwrap(), 90, "3 × 30 tokens as answered, not 3 × 100");
    let counts = handle.health.counts();
    assert_eq!((counts.admitted, counts.settled, counts.round_trips), (3, 3, 6), "{counts:?}");
    cleanup(&shared_key).await;
}

/// A request waiting on a tokens key sees another process's refund within `REFUND_RECHECK`,
/// not only when the store's retry-after (the oldest estimate leaving the window) comes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_request_sees_another_process_refund_without_waiting_out_the_window() {
    if !shared_server_up().await {
        return skip_or_fail(&format!("no server answers at {}", redis_url()));
    }
    let key = unique_key("tokens-recheck");
    let gate = || async {
        let store = RedisStore::connect(&redis_url(), SHARED_PREFIX).await.unwrap();
        SharedGate::new(store, StoreHealth::new(), &key, &tokens_budgets(), FailPolicy::Closed).unwrap()
    };
    let (first, second) = (gate().await, gate().await);
    let mut reservation =
        first.admit_cost(&tokens(TOKENS_LIMIT)).await.unwrap().reservation.expect("the store decided");
    let waiting = tokio::spawn(async move { second.admit_cost(&tokens(TOKENS_LIMIT / 2)).await.unwrap() });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!waiting.is_finished(), "the window is full");
    first.settle(&mut reservation, &tokens(TOKENS_LIMIT / 2)).await.unwrap();
    // The window's retry-after is a minute; the refund is seen at the next recheck.
    let admitted = tokio::time::timeout(ratescope::store::REFUND_RECHECK * 4, waiting).await;
    let admission = admitted.expect("admitted after the refund, long before the window moves").unwrap();
    assert_eq!(admission.remaining, Some(0));
    cleanup(&key).await;
}
