//! The probe against the demo API configured with each kind of policy, with and without
//! headers, on paused tokio time over loopback: the suggestion is within 10% of the configured
//! limits, and no more than one request is refused per limit the probe discovers.

use std::net::SocketAddr;
use std::process::Command;

use ratescope::http::LimitedClient;
use ratescope::mock::{MockConfig, MockServer, Outcome, PolicyKind};
use ratescope::probe::{Confidence, ProbeOptions, ProbeReport, SuggestedBudget, probe};

/// A route `/api` with `dialect` headers, a 5 ms latency, and `policies` (TOML tables).
fn api(dialect: &str, policies: &str) -> MockConfig {
    let text =
        format!("[[routes]]\nprefix = \"/api\"\ndialect = \"{dialect}\"\nlatency = {{ fixed = \"5ms\" }}\n{policies}");
    MockConfig::from_toml(&text).unwrap()
}

fn bucket(name: &str, capacity: u64, rate: &str) -> String {
    format!(
        "[[routes.policies]]\nname = \"{name}\"\nkind = \"token_bucket\"\ncapacity = {capacity}\nrate = \"{rate}\"\n"
    )
}

fn window(kind: &str, name: &str, limit: u64, window: &str) -> String {
    format!("[[routes.policies]]\nname = \"{name}\"\nkind = \"{kind}\"\nlimit = {limit}\nwindow = \"{window}\"\n")
}

/// Probes `config` over loopback; returns the report and the requests the server refused.
async fn run(config: MockConfig, max_requests: usize) -> (ProbeReport, usize, MockConfig) {
    let server = MockServer::start(config.clone(), SocketAddr::from(([127, 0, 0, 1], 0))).await.unwrap();
    let url = server.url().join("/api").unwrap();
    let options = ProbeOptions { max_requests, ..ProbeOptions::default() };
    let report = probe(LimitedClient::builder().without_timers(), &url, &options).await.unwrap();
    let refused = server.arrivals().iter().filter(|a| matches!(a.outcome, Outcome::Limited(_))).count();
    assert!(server.arrivals().len() <= max_requests, "never more than --max-requests");
    assert_eq!(report.requests_used, server.arrivals().len());
    (report, refused, config)
}

/// The configured limits as (burst, sustained per second).
fn configured(config: &MockConfig) -> Vec<(f64, f64)> {
    config.routes[0]
        .policies
        .iter()
        .filter_map(|policy| match policy.kind {
            PolicyKind::TokenBucket { capacity, rate } => Some((capacity as f64, rate.per_second())),
            PolicyKind::FixedWindow { limit, window } | PolicyKind::SlidingWindow { limit, window } => {
                Some((limit as f64, limit as f64 / window.as_secs_f64()))
            }
            PolicyKind::Concurrency { .. } => None,
        })
        .collect()
}

/// Every configured limit is matched, in order, by a suggestion within 10% (burst and rate),
/// never above it, and no more requests were refused than limits discovered.
fn assert_close(report: &ProbeReport, refused: usize, config: &MockConfig) {
    let wanted = configured(config);
    let got: Vec<(f64, f64)> =
        report.suggested.budgets.iter().map(|b| (b.burst() as f64, b.sustained_per_s())).collect();
    assert_eq!(got.len(), wanted.len(), "{report}");
    for ((burst, rate), (want_burst, want_rate)) in got.iter().zip(&wanted) {
        for (value, want, what) in [(burst, want_burst, "burst"), (rate, want_rate, "rate")] {
            assert!(*value <= want * 1.0001, "{what} {value} above the configured {want}\n{report}");
            assert!(*value >= want * 0.9, "{what} {value} not within 10% of {want}\n{report}");
        }
    }
    assert_eq!(report.found.budgets.len(), got.len(), "found and suggested side by side\n{report}");
    for (found, suggested) in report.found.budgets.iter().zip(&report.suggested.budgets) {
        assert!(
            suggested.sustained_per_s() < found.sustained_per_s(),
            "the margin lies below what was found\n{report}"
        );
        let expected = found.with_margin(0.05);
        let (rate, want) = (suggested.sustained_per_s(), expected.sustained_per_s());
        assert!((rate - want).abs() <= want * 0.01, "the suggestion is what was found less 5%\n{report}");
        assert_eq!(suggested.burst(), expected.burst(), "{report}");
    }
    assert!(refused <= report.discovered, "{refused} refused for {} discovered\n{report}", report.discovered);
    assert_eq!(refused, report.throttled);
    assert!(report.limiter_config().is_ok(), "the suggestion is a valid limiter config");
}

#[tokio::test(start_paused = true)]
async fn published_stacked_windows_take_one_request() {
    let policies = bucket("burst", 5, "5/1s") + &window("fixed_window", "minute", 100, "1m");
    let (report, refused, config) = run(api("ietf", &policies), 50).await;
    assert_close(&report, refused, &config);
    assert_eq!((report.requests_used, refused), (1, 0));
    assert_eq!(report.confidence, Confidence::High);
    assert_eq!(report.discovered, 2);
    assert!(report.reasons.iter().any(|r| r.contains("stacked windows")), "{report}");
    let json = report.to_json();
    assert_eq!(json["suggested"]["budgets"][0]["kind"], "sliding_window");
    assert_eq!(json["suggested"]["budgets"][1]["limit"], 95);
    assert_eq!(json["suggested"]["budgets"][1]["window_s"], 60.0);
    assert_eq!(json["found"]["budgets"][1]["limit"], 100, "before the margin");
    assert_eq!(json["found"]["budgets"][1]["window_s"], 60.0);
    assert!(json["suggested"]["concurrency"].is_null());
    assert!(json["evidence"].as_array().is_some_and(|e| !e.is_empty()));
    assert_eq!(json["requests_used"], 1);
}

#[tokio::test(start_paused = true)]
async fn published_bucket_fixed_and_sliding_windows() {
    for policies in [
        bucket("bucket", 10, "5/1s"),
        window("fixed_window", "fixed", 20, "10s"),
        window("sliding_window", "sliding", 30, "1m"),
    ] {
        let (report, refused, config) = run(api("ietf", &policies), 50).await;
        assert_close(&report, refused, &config);
        assert_eq!(report.requests_used, 1);
    }
}

#[tokio::test(start_paused = true)]
async fn a_published_concurrency_limit_is_kept() {
    let policies = window("sliding_window", "second", 10, "1s")
        + "[[routes.policies]]\nname = \"parallel\"\nkind = \"concurrency\"\nlimit = 3\n";
    let (report, refused, config) = run(api("ietf", &policies), 50).await;
    assert_close(&report, refused, &config);
    assert_eq!(report.suggested.concurrency, Some(3));
}

#[tokio::test(start_paused = true)]
async fn limit_remaining_and_reset_without_a_window_are_drained_without_a_refusal() {
    for (dialect, policies) in [
        ("x-ratelimit", window("sliding_window", "sliding", 10, "5s")),
        ("x-ratelimit", window("fixed_window", "fixed", 20, "10s")),
        ("github", window("fixed_window", "core", 30, "1m")),
        ("x-ratelimit", bucket("bucket", 10, "2/1s")),
    ] {
        let (report, refused, config) = run(api(dialect, &policies), 100).await;
        assert_close(&report, refused, &config);
        assert_eq!(refused, 0, "{dialect}: remaining said when to stop\n{report}");
        assert_eq!(report.confidence, Confidence::Medium, "{dialect}\n{report}");
        let limit = config.routes[0].policies[0].limit() as usize;
        assert_eq!(report.requests_used, limit + 1, "the quota, then one after the reset\n{report}");
    }
    let (report, ..) = run(api("x-ratelimit", &bucket("bucket", 10, "2/1s")), 100).await;
    assert!(matches!(report.suggested.budgets[0], SuggestedBudget::TokenBucket { capacity: 10, .. }), "{report}");
}

#[tokio::test(start_paused = true)]
async fn injected_errors_and_dropped_connections_are_not_mistaken_for_limits() {
    let faults = "[server]\nseed = 7\n";
    let route = "faults = { error_rate = 0.1, error_statuses = [502], reset_rate = 0.1 }\n";
    let mut resets = 0;
    for (dialect, policies) in [
        ("x-ratelimit", window("fixed_window", "minute", 40, "1m")),
        ("none", window("fixed_window", "ten", 20, "10s")),
    ] {
        let mut config = api(dialect, &format!("{route}{policies}"));
        config.server = MockConfig::from_toml(&format!("{faults}[[routes]]\nprefix = \"/\"")).unwrap().server;
        let (report, refused, config) = run(config, 120).await;
        assert_close(&report, refused, &config);
        resets += report.evidence.iter().filter(|line| line.contains("no response")).count();
    }
    assert!(resets > 0, "dropped connections were met, noted, and passed over");
}

#[tokio::test(start_paused = true)]
async fn without_headers_a_window_costs_one_refusal() {
    let (report, refused, config) = run(api("none", &window("fixed_window", "fixed", 20, "10s")), 100).await;
    assert_close(&report, refused, &config);
    assert_eq!((refused, report.discovered), (1, 1), "{report}");
    let (report, refused, config) = run(api("none", &window("sliding_window", "sliding", 15, "5s")), 100).await;
    assert_close(&report, refused, &config);
    assert_eq!(refused, 1, "{report}");
}

#[tokio::test(start_paused = true)]
async fn without_headers_a_bucket_is_found_by_its_burst_and_a_careful_ramp() {
    for policies in [bucket("bucket", 10, "4/1s"), bucket("bucket", 20, "10/1s"), bucket("slow", 6, "1/3s")] {
        let (report, refused, config) = run(api("none", &policies), 120).await;
        assert_close(&report, refused, &config);
        assert!(refused <= 2, "one refusal for the capacity, one for the rate\n{report}");
        assert!(matches!(report.suggested.budgets[0], SuggestedBudget::TokenBucket { .. }), "{report}");
    }
}

#[tokio::test(start_paused = true)]
async fn the_maximum_is_never_exceeded() {
    // A quota larger than the maximum: the probe stops at the maximum and says it is unsure.
    let (report, refused, config) = run(api("x-ratelimit", &window("fixed_window", "big", 500, "1h")), 20).await;
    assert_eq!((report.requests_used, refused), (20, 0));
    assert_eq!(report.confidence, Confidence::Low);
    assert_close(&report, refused, &config);
    let (report, refused, _) = run(api("x-ratelimit", &bucket("slow", 500, "1/1s")), 20).await;
    assert_eq!((report.requests_used, refused, report.confidence), (20, 0, Confidence::Low));
    let (burst, rate) = (report.suggested.budgets[0].burst(), report.suggested.budgets[0].sustained_per_s());
    assert!(burst <= 500 && rate <= 1.0, "on the slow side: {report}");
    let (report, refused, _) = run(api("none", &window("fixed_window", "big", 500, "1h")), 20).await;
    assert_eq!((report.requests_used, refused), (20, 0));
    assert!(report.suggested.budgets.is_empty(), "nothing was found: {report}");
}

#[test]
fn the_cli_prints_the_documented_json_and_saves_a_profile() {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let policies = bucket("burst", 5, "5/1s") + &window("fixed_window", "minute", 100, "1m");
    let server =
        runtime.block_on(MockServer::start(api("ietf", &policies), SocketAddr::from(([127, 0, 0, 1], 0)))).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let url = format!("{}api", server.url());
    let output = Command::new(env!("CARGO_BIN_EXE_ratescope"))
        .args(["probe", &url, "--max-requests", "10", "--json", "--save", "found"])
        .env("RATESCOPE_CONFIG_DIR", dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    let json: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let budgets = json["suggested"]["budgets"].as_array().unwrap();
    assert_eq!(budgets.len(), 2);
    assert_eq!(budgets[0]["kind"], "sliding_window");
    assert!(budgets[0]["limit"].is_u64() && budgets[0]["window_s"].is_f64());
    assert!(json["suggested"].get("concurrency").is_some());
    assert!(json["evidence"].is_array() && json["requests_used"] == 1);
    let saved = ratescope::profile::ProfileStore::at(dir.path().join("profiles")).load("found").unwrap();
    assert_eq!(saved.hosts[0].budgets.len(), 2);
    assert_eq!(saved.hosts[0].base_url, server.url().as_str().trim_end_matches('/'));
    drop(server);
}

#[tokio::test(start_paused = true)]
async fn token_budgets_in_the_headers_are_reported_beside_the_request_suggestion() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    use axum::http::HeaderMap;

    // OpenAI's header dialect: 10 requests a minute published, and 40,000 tokens a minute of
    // which each answer uses 500.
    let count = Arc::new(AtomicU64::new(0));
    let app = axum::Router::new().route(
        "/v1/chat",
        axum::routing::get(move || {
            let count = Arc::clone(&count);
            async move {
                let n = count.fetch_add(1, Ordering::SeqCst) + 1;
                let mut headers = HeaderMap::new();
                let mut set = |name: &'static str, value: String| {
                    headers.insert(name, value.parse().unwrap());
                };
                set("x-ratelimit-limit-requests", "10".into());
                set("x-ratelimit-remaining-requests", 10u64.saturating_sub(n).to_string());
                set("x-ratelimit-reset-requests", "1m0s".into());
                set("x-ratelimit-limit-tokens", "40000".into());
                set("x-ratelimit-remaining-tokens", (40_000 - 500 * n.min(80)).to_string());
                set("x-ratelimit-reset-tokens", "6s".into());
                headers
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let url = format!("http://{addr}/v1/chat").parse().unwrap();
    let options = ProbeOptions { max_requests: 12, ..ProbeOptions::default() };
    let report = probe(LimitedClient::builder().without_timers(), &url, &options).await.unwrap();
    let tokens =
        report.unit_budgets.iter().find(|budget| budget.unit == "tokens").expect("the token budget is reported");
    assert_eq!(tokens.limit, Some(40_000.0), "{report}");
    assert!(tokens.remaining.is_some_and(|left| left < 40_000.0), "{report}");
    assert_eq!(tokens.source, "openai");
    assert!(report.to_string().contains("also counts: tokens 'tokens' 40000"), "{report}");
    assert!(report.unit_budgets.iter().all(|budget| budget.unit != "requests"), "requests are the suggestion's");
}

/// A server on loopback that answers every request 200 with `headers`; returns its address and
/// the count of requests it received.
async fn lying_server(
    headers: &'static [(&'static str, &'static str)],
) -> (SocketAddr, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let count = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&count);
    let app = axum::Router::new().fallback(move || {
        let counted = Arc::clone(&counted);
        async move {
            counted.fetch_add(1, Ordering::SeqCst);
            let mut map = axum::http::HeaderMap::new();
            for (name, value) in headers {
                map.append(*name, value.parse().unwrap());
            }
            (map, "ok")
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (addr, count)
}

/// Issue #32, finding 10: a limit of 10^23, a negative remaining and a NaN reset.
const ABSURD: &[(&str, &str)] =
    &[("x-ratelimit-limit", "99999999999999999999999"), ("x-ratelimit-remaining", "-5"), ("x-ratelimit-reset", "NaN")];
/// A request quota of 100 with a negative remaining and a negative reset: no concurrency cap.
const NEGATIVE: &[(&str, &str)] =
    &[("x-ratelimit-limit", "100"), ("x-ratelimit-remaining", "-5"), ("x-ratelimit-reset", "-100")];
/// Two dialects contradicting each other, and a remaining above its limit.
const CONTRADICTORY: &[(&str, &str)] = &[
    ("ratelimit-limit", "50"),
    ("ratelimit-remaining", "49"),
    ("ratelimit-reset", "30"),
    ("x-ratelimit-limit", "100"),
    ("x-ratelimit-remaining", "99"),
    ("x-ratelimit-reset", "30"),
];
const REMAINING_ABOVE_LIMIT: &[(&str, &str)] =
    &[("x-ratelimit-limit", "10"), ("x-ratelimit-remaining", "500"), ("x-ratelimit-reset", "60")];

#[tokio::test(start_paused = true)]
async fn impossible_headers_lower_confidence_are_named_and_never_make_a_concurrency_cap() {
    for (headers, named) in [
        (ABSURD, &["\"-5\" is negative", "\"NaN\"", "a limit of 1e23 is beyond any plausible quota"][..]),
        (NEGATIVE, &["\"-5\" is negative", "\"-100\""]),
        (CONTRADICTORY, &["says a limit of 50 where 'default' (x-ratelimit) says 100"]),
        (REMAINING_ABOVE_LIMIT, &["500 remaining is more than its limit of 10"]),
    ] {
        let (addr, count) = lying_server(headers).await;
        let url = format!("http://{addr}/x").parse().unwrap();
        let options = ProbeOptions { max_requests: 6, ..ProbeOptions::default() };
        let report = probe(LimitedClient::builder().without_timers(), &url, &options).await.unwrap();
        assert_eq!(report.confidence, Confidence::Low, "{headers:?}\n{report}");
        assert_eq!(report.suggested.concurrency, None, "a quota is never a concurrency cap\n{report}");
        assert!(report.suggested.budgets.is_empty(), "nothing was met, and the headers are not believed\n{report}");
        let reasons = report.reasons.join("\n");
        for part in named {
            assert!(reasons.contains(part), "{part} is not named:\n{report}");
        }
        assert!(report.limiter_config().is_ok(), "{report}");
        assert_eq!(count.load(std::sync::atomic::Ordering::SeqCst), report.requests_used);
    }
}

#[tokio::test(start_paused = true)]
async fn a_windowless_quota_is_measured_not_read_as_a_concurrency_cap() {
    // X-RateLimit-Limit alone (no remaining, reset or window): once read as "concurrency 100".
    let (addr, _) = lying_server(&[("x-ratelimit-limit", "100")]).await;
    let url = format!("http://{addr}/x").parse().unwrap();
    let options = ProbeOptions { max_requests: 4, ..ProbeOptions::default() };
    let report = probe(LimitedClient::builder().without_timers(), &url, &options).await.unwrap();
    assert_eq!(report.suggested.concurrency, None, "{report}");
    assert_ne!(report.confidence, Confidence::High, "{report}");
    assert!(report.reasons.iter().any(|r| r.contains("not a concurrency cap")), "{report}");
    assert_eq!(report.requests_used, 4, "it measured instead");
}

/// The probe CLI against a lying server: both outputs name the doubts, no concurrency cap is
/// suggested, and `--save` saves what is suggested.
#[test]
fn the_cli_names_impossible_headers_and_saves_what_it_suggests() {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    for headers in [ABSURD, NEGATIVE] {
        let (addr, _) = runtime.block_on(lying_server(headers));
        let dir = tempfile::tempdir().unwrap();
        let url = format!("http://{addr}/x");
        let run = |extra: &[&str]| {
            let output = Command::new(env!("CARGO_BIN_EXE_ratescope"))
                .args(["probe", &url, "--max-requests", "3"])
                .args(extra)
                .env("RATESCOPE_CONFIG_DIR", dir.path())
                .output()
                .unwrap();
            let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
            (output.status.code(), text(&output.stdout), text(&output.stderr))
        };
        let (code, stdout, stderr) = run(&["--save", "lying"]);
        assert_eq!(code, Some(0), "{stdout}\n{stderr}");
        assert!(stdout.contains("confidence: low"), "{stdout}");
        assert!(stdout.contains("\"-5\" is negative"), "{stdout}");
        let suggested = stdout.lines().find(|line| line.starts_with("suggested:")).unwrap();
        assert!(!suggested.contains("concurrency"), "{stdout}");
        assert!(!stdout.contains("18446744073709551615"), "{stdout}");
        assert!(stdout.contains("saved as profile 'lying'"), "{stdout}");
        let saved = ratescope::profile::ProfileStore::at(dir.path().join("profiles")).load("lying").unwrap();
        assert_eq!(saved.hosts.len(), 1);

        let (code, stdout, stderr) = run(&["--json", "--save", "lying"]);
        assert_eq!(code, Some(0), "{stdout}\n{stderr}");
        let json: serde_json::Value = serde_json::from_str(&stdout).unwrap();
        assert_eq!(json["confidence"], "low", "{json}");
        assert!(json["suggested"]["concurrency"].is_null(), "{json}");
        let reasons = json["reasons"].as_array().unwrap();
        assert!(reasons.iter().any(|r| r.as_str().is_some_and(|r| r.contains("\"-5\" is negative"))), "{json}");
    }
}

/// Runs the binary with its config directory in `config`: exit code, stdout, stderr.
fn cli(config: &std::path::Path, args: &[&str]) -> (Option<i32>, String, String) {
    let output =
        Command::new(env!("CARGO_BIN_EXE_ratescope")).args(args).env("RATESCOPE_CONFIG_DIR", config).output().unwrap();
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    (output.status.code(), text(&output.stdout), text(&output.stderr))
}

/// A loopback port nothing listens on.
fn dead_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

#[test]
fn a_dead_host_is_reported_unreachable_whatever_the_request_allowance() {
    let dir = tempfile::tempdir().unwrap();
    let port = dead_port();
    let url = format!("http://127.0.0.1:{port}/x");
    for max in ["2", "100"] {
        let (code, _, stderr) = cli(dir.path(), &["probe", &url, "--max-requests", max]);
        assert_eq!(code, Some(1), "{stderr}");
        assert!(stderr.contains(&format!("could not reach 127.0.0.1:{port}")), "{max}: {stderr}");
        assert!(!stderr.contains("needs at least") && !stderr.contains("did not answer"), "{max}: {stderr}");
    }
}

#[test]
fn credentials_in_the_probed_url_appear_in_no_message() {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let (addr, _) = runtime.block_on(lying_server(&[]));
    let dir = tempfile::tempdir().unwrap();
    let live = format!("http://alice:PW-s3cret@{addr}/x?api_key=KEY-s3cret&page=2");
    let dead = format!("http://alice:PW-s3cret@127.0.0.1:{}/x?access_token=KEY-s3cret", dead_port());
    for (url, json) in [(&live, false), (&live, true), (&dead, false)] {
        let mut args = vec!["probe", url.as_str(), "--max-requests", "2"];
        if json {
            args.push("--json");
        }
        let (_, stdout, stderr) = cli(dir.path(), &args);
        let everything = format!("{stdout}{stderr}");
        assert!(!everything.contains("s3cret"), "{everything}");
        if !json && url == &live {
            assert!(stderr.contains("probing http://alice:***@"), "{stderr}");
            assert!(stderr.contains("api_key=***&page=2"), "{stderr}");
        }
    }
    // A profile without the URL's host: the usage error names the URL, redacted.
    std::fs::create_dir_all(dir.path().join("profiles")).unwrap();
    let other = "name = \"other\"\n[[hosts]]\nname = \"x\"\nbase_url = \"http://example.invalid\"\n";
    std::fs::write(dir.path().join("profiles/other.toml"), other).unwrap();
    let (code, _, stderr) = cli(dir.path(), &["probe", &live, "--profile", "other"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("has no host for http://alice:***@") && !stderr.contains("s3cret"), "{stderr}");
}

#[test]
fn a_save_that_cannot_be_written_is_refused_before_any_request() {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let (addr, count) = runtime.block_on(lying_server(&[]));
    let url = format!("http://{addr}/x");
    let dir = tempfile::tempdir().unwrap();
    // The profiles directory is a file: nothing can be saved in it.
    std::fs::write(dir.path().join("profiles"), "not a directory").unwrap();
    let (code, _, stderr) = cli(dir.path(), &["probe", &url, "--max-requests", "3", "--save", "found"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("--save") && stderr.contains("profiles"), "{stderr}");
    assert_eq!(count.load(std::sync::atomic::Ordering::SeqCst), 0, "nothing was sent");
    // A name no file can have, likewise.
    let other = tempfile::tempdir().unwrap();
    let (code, _, stderr) = cli(other.path(), &["probe", &url, "--max-requests", "3", "--save", ""]);
    assert_eq!(code, Some(2), "{stderr}");
    assert_eq!(count.load(std::sync::atomic::Ordering::SeqCst), 0, "nothing was sent");
}

/// Settings the probe cannot work with are usage errors (exit 2) before the "probing" line.
#[test]
fn impossible_probe_settings_are_usage_errors_before_anything_is_sent() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("http://127.0.0.1:{}/x", dead_port());
    for (flag, value, said) in [
        ("--max-requests", "0", "at least 2 requests"),
        ("--max-requests", "1", "at least 2 requests"),
        ("--margin", "NaN", "margin NaN is not a share"),
        ("--margin", "0.9", "margin 0.9 is not a share"),
    ] {
        let (code, _, stderr) = cli(dir.path(), &["probe", &url, flag, value]);
        assert_eq!(code, Some(2), "{flag} {value}: {stderr}");
        assert!(stderr.contains(said) && !stderr.contains("probing"), "{flag} {value}: {stderr}");
    }
}
