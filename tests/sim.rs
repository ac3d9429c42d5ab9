//! The simulator against real runs: the same scenario through the demo API over loopback (on
//! paused tokio time) and in virtual time gives the same 429s and nearly the same completion
//! time; minutes of traffic take milliseconds; the CLI prints the summary of `burst`.

use std::net::SocketAddr;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use ratescope::engine::{BudgetSpec, LimiterConfig, Registry};
use ratescope::http::{LimitedClient, RetryPolicy};
use ratescope::mock::{MockConfig, MockServer, Outcome};
use ratescope::run::{ArrivalPattern, Burst, BurstSpec, Summary};
use ratescope::sim::{SimOptions, simulate};

mod support;

/// The demo's `/items` with a fixed latency and no jitter or faults, so both runs are deterministic.
fn server() -> MockConfig {
    support::items_config("latency = { fixed = \"20ms\" }")
}

const SEED: u64 = 11;

/// 130 requests at once through a bucket a little faster than the server's (so some are
/// refused and retried after Retry-After), and no mirror of the minute (so its end is met).
fn scenario(base: &url::Url) -> BurstSpec {
    let limits =
        LimiterConfig::new().with_budget(BudgetSpec::token_bucket("rate", 6, "6/1s".parse().unwrap()).unwrap());
    BurstSpec {
        limits: Some(limits),
        retry: RetryPolicy { max_attempts: 10, ..RetryPolicy::default() },
        ..BurstSpec::get(base.join("/items").unwrap(), 130)
    }
}

/// The scenario for real: the demo API on 127.0.0.1 and a burst, on paused time.
async fn real_run(config: MockConfig) -> (Summary, usize) {
    let server = MockServer::start(config, SocketAddr::from(([127, 0, 0, 1], 0))).await.unwrap();
    let spec = scenario(&server.url());
    let registry = Registry::new();
    for key in spec.keys() {
        registry.set(key, spec.limits.clone().unwrap()).unwrap();
    }
    let client = LimitedClient::builder()
        .registry(Arc::new(registry))
        .retry(spec.retry.clone())
        .without_timers()
        .seed(SEED)
        .build()
        .unwrap();
    let summary = Burst::start(spec, client).unwrap().finish().await.0;
    let refused = server.arrivals().iter().filter(|a| matches!(a.outcome, Outcome::Limited(_))).count();
    (summary, refused)
}

#[tokio::test(start_paused = true)]
async fn the_simulation_matches_a_real_run_against_the_demo_api() {
    let config = server();
    let (real, real_refused) = real_run(config.clone()).await;

    let base: url::Url = "http://127.0.0.1:8787/".parse().unwrap();
    let options = SimOptions { seed: SEED, ..SimOptions::default() };
    let simulated =
        tokio::task::spawn_blocking(move || simulate(&config, scenario(&base), &options).unwrap()).await.unwrap();
    let sim = &simulated.summary;

    assert!(real_refused > 0, "the scenario meets 429s");
    assert_eq!(real.status_counts.get("429").copied().unwrap_or(0) as usize, real_refused);
    assert_eq!(sim.status_counts.get("429"), real.status_counts.get("429"), "the same 429s: {sim:#?}\n{real:#?}");
    assert_eq!(simulated.arrivals.iter().filter(|a| matches!(a.outcome, Outcome::Limited(_))).count(), real_refused);
    assert_eq!((sim.succeeded, sim.failed), (real.succeeded, real.failed));
    let ratio = sim.elapsed_s / real.elapsed_s;
    assert!(
        (0.95..=1.05).contains(&ratio),
        "completion {:.3}s simulated against {:.3}s real",
        sim.elapsed_s,
        real.elapsed_s
    );
    assert!(real.elapsed_s > 60.0, "the minute's end was met: {:.1}s", real.elapsed_s);
}

#[test]
fn minutes_of_traffic_take_milliseconds() {
    let config = MockConfig::demo().unwrap();
    let spec = BurstSpec {
        arrival: ArrivalPattern::FixedRate("4/1s".parse().unwrap()),
        limits: Some(
            LimiterConfig::new()
                .with_budget(BudgetSpec::token_bucket("rate", 5, "5/1s".parse().unwrap()).unwrap())
                .with_budget(BudgetSpec::sliding_window("minute", 100, Duration::from_secs(60)).unwrap()),
        ),
        ..BurstSpec::get("http://127.0.0.1:8787/items".parse().unwrap(), 600)
    };
    let simulation = simulate(&config, spec, &SimOptions::default()).unwrap();
    let summary = &simulation.summary;
    assert_eq!((summary.succeeded, summary.failed), (600, 0));
    assert_eq!(summary.status_counts.get("429"), None, "the limits mirror the server's");
    assert!(summary.elapsed_s >= 5.0 * 60.0, "600 requests at 100 per minute take six minutes: {}", summary.elapsed_s);
    // Generous for unoptimised test builds on a busy machine; BENCHMARKS.md has release figures.
    assert!(simulation.real_time < Duration::from_secs(3), "{:?} of real time", simulation.real_time);
}

#[test]
fn a_simulation_is_a_pure_function_of_its_inputs_and_records_charts() {
    let config = MockConfig::demo().unwrap();
    let spec = BurstSpec::get("http://127.0.0.1:8787/flaky".parse().unwrap(), 80);
    let options = SimOptions { record: true, ..SimOptions::default() };
    let first = simulate(&config, spec.clone(), &options).unwrap();
    let second = simulate(&config, spec, &options).unwrap();
    assert_eq!(first.summary, second.summary, "seeded faults and jitter repeat exactly");
    assert!(first.summary.status_counts.contains_key("429"), "raw sending meets the minute's limit");
    assert!(!first.events.is_empty() && !first.snapshots.is_empty(), "events and limiter samples for the charts");
}

#[test]
fn the_cli_prints_the_summary_of_a_burst() {
    let output = Command::new(env!("CARGO_BIN_EXE_ratescope"))
        .args(["sim", "--burst", concat!(env!("CARGO_MANIFEST_DIR"), "/assets/sim-burst.toml"), "--json"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    let json: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    for field in ["requests", "sent", "succeeded", "failed", "status_counts", "retries", "elapsed_s", "total_ms"] {
        assert!(json.get(field).is_some(), "{field} in {json}");
    }
    assert_eq!(json["requests"], 150);
    assert_eq!(json["succeeded"], 150);

    let output = Command::new(env!("CARGO_BIN_EXE_ratescope"))
        .args(["sim", "--server", "/nonexistent.toml", "--burst", "/nonexistent-too.toml"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("nonexistent"));
}
