//! Conformance against server-side limiters we did not write (Flask-Limiter, express-rate-limit
//! in each header mode, nginx `limit_req`): the built `ratescope burst` over loopback, judged
//! by the server's own count of refusals and its theoretical schedule.
//!
//! These run on the real clock, as the servers do: a server's window cannot be paused. The
//! elapsed-time bound is the (≤ 1.1 × the schedule a perfect client would keep), checked
//! from the client's own summary; each case takes a few seconds. A missing server is skipped
//! with a notice, or fails when `RATESCOPE_REQUIRE_THIRDPARTY=1` (CI installs them all).

#[path = "thirdparty/mod.rs"]
mod thirdparty;

use std::process::Command;

use serde_json::Value;
use thirdparty::ThirdParty;

/// One case at a time: each asserts elapsed time against a server's schedule, and fifteen
/// servers and clients at once on two cores would measure the machine, not the client.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Runs `ratescope burst URL ARGS --json` and returns its summary; it must exit 0.
fn burst(url: &url::Url, args: &[&str]) -> Value {
    let (success, summary) = burst_status(url, args);
    assert!(success, "burst exited with an error\n{summary:#}");
    summary
}

/// Runs `ratescope burst URL ARGS --json`: whether it exited 0, and its summary.
fn burst_status(url: &url::Url, args: &[&str]) -> (bool, Value) {
    let config = tempfile::tempdir().expect("a temporary config dir");
    let output = Command::new(env!("CARGO_BIN_EXE_ratescope"))
        .arg("burst")
        .arg(url.as_str())
        .args(args)
        .arg("--json")
        .env("RATESCOPE_CONFIG_DIR", config.path())
        .output()
        .expect("the ratescope binary runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let summary = serde_json::from_str(&stdout).unwrap_or_else(|err| panic!("not JSON ({err}): {stdout}\n{stderr}"));
    (output.status.success(), summary)
}

fn status_count(summary: &Value, status: &str) -> u64 {
    summary["status_counts"][status].as_u64().unwrap_or(0)
}

/// For `requests` through a window of `limit` per `window_s` started by the first request:
/// the last batch goes out when the last window opens.
fn window_schedule(requests: u64, limit: u64, window_s: f64) -> f64 {
    requests.div_ceil(limit).saturating_sub(1) as f64 * window_s
}

/// Adaptive, no limits of our own: every request succeeds, no refusal (every server here
/// publishes its budget in the first answer), and no more than 1.1 × the schedule.
fn assert_adaptive(name: &str, server: &ThirdParty, requests: u64, concurrency: u64, limit: u64, window_s: f64) {
    let n = requests.to_string();
    let c = concurrency.to_string();
    let summary = burst(&server.url("/items"), &["-n", &n, "-c", &c, "--adaptive", "--retries", "8"]);
    let schedule = window_schedule(requests, limit, window_s);
    let elapsed = summary["elapsed_s"].as_f64().expect("elapsed_s");
    assert_eq!(summary["succeeded"], requests, "{name}: every request succeeds\n{summary:#}");
    assert_eq!(status_count(&summary, "429"), 0, "{name}: the published budget was never overrun\n{summary:#}");
    assert!(
        elapsed <= schedule * 1.1,
        "{name}: {elapsed:.3}s against a schedule of {schedule:.3}s (bound 1.1×)\n{summary:#}"
    );
    assert!(elapsed >= schedule * 0.999, "{name}: faster than the server allows? {elapsed:.3}s\n{summary:#}");
}

#[test]
fn adaptive_flask_limiter_moving_window() {
    let _serial = serial();
    let Some(server) = ThirdParty::flask_limiter("10 per 2 second", "moving-window") else { return };
    assert_adaptive("Flask-Limiter moving window 10/2s", &server, 30, 10, 10, 2.0);
}

#[test]
fn adaptive_flask_limiter_moving_window_wide_concurrency() {
    let _serial = serial();
    let Some(server) = ThirdParty::flask_limiter("15 per 2 second", "moving-window") else { return };
    assert_adaptive("Flask-Limiter moving window 15/2s at -c 50", &server, 45, 50, 15, 2.0);
}

#[test]
fn adaptive_flask_limiter_fixed_window() {
    let _serial = serial();
    let Some(server) = ThirdParty::flask_limiter("10 per 2 second", "fixed-window") else { return };
    assert_adaptive("Flask-Limiter fixed window 10/2s", &server, 30, 10, 10, 2.0);
}

#[test]
fn adaptive_express_draft8() {
    let _serial = serial();
    let Some(server) = ThirdParty::express(2000, 10, "draft-8") else { return };
    assert_adaptive("express-rate-limit draft-8 10/2s", &server, 30, 10, 10, 2.0);
}

#[test]
fn adaptive_express_draft7() {
    let _serial = serial();
    let Some(server) = ThirdParty::express(2000, 10, "draft-7") else { return };
    assert_adaptive("express-rate-limit draft-7 10/2s", &server, 30, 10, 10, 2.0);
}

#[test]
fn adaptive_express_draft6() {
    let _serial = serial();
    let Some(server) = ThirdParty::express(3000, 15, "draft-6") else { return };
    assert_adaptive("express-rate-limit draft-6 15/3s at -c 30", &server, 30, 30, 15, 3.0);
}

#[test]
fn adaptive_express_legacy_epoch_reset() {
    let _serial = serial();
    let Some(server) = ThirdParty::express(2000, 10, "legacy") else { return };
    assert_adaptive("express-rate-limit legacy X-RateLimit 10/2s", &server, 30, 10, 10, 2.0);
}

#[test]
fn paced_burst_through_nginx_limit_req_keeps_its_schedule() {
    let _serial = serial();
    let Some(server) = ThirdParty::nginx("10r/s", 5, true) else { return };
    // Our bucket of 5 at 10/s against nginx's 10 r/s with burst 5 (nodelay: 6 at once, then one
    // every 100 ms): the first 5 at once, then one per 100 ms.
    let summary = burst(&server.url("/items"), &["-n", "25", "--rate", "10/1s", "--burst", "5"]);
    let elapsed = summary["elapsed_s"].as_f64().expect("elapsed_s");
    assert_eq!(summary["succeeded"], 25, "{summary:#}");
    assert_eq!(status_count(&summary, "429"), 0, "{summary:#}");
    assert!((2.0..=2.0 * 1.1).contains(&elapsed), "20 paced at 10/s after the burst: {elapsed:.3}s\n{summary:#}");
}

#[test]
fn raw_burst_meets_nginx_refusals_that_the_summary_counts() {
    let _serial = serial();
    let Some(server) = ThirdParty::nginx("10r/s", 5, true) else { return };
    // Without a limiter 20 requests at once: nginx lets the burst (5) and one more through.
    let (success, summary) =
        burst_status(&server.url("/items"), &["-n", "20", "-c", "20", "--no-limit", "--retries", "0"]);
    assert!(!success, "refused requests make the run fail\n{summary:#}");
    let passed = status_count(&summary, "200");
    assert!((6..=7).contains(&passed), "{passed} passed\n{summary:#}");
    assert_eq!(passed + status_count(&summary, "429"), 20, "{summary:#}");
}

/// A `ratescope proxy` process, killed when dropped.
struct ProxyProcess {
    child: std::process::Child,
    url: url::Url,
    _config: tempfile::TempDir,
}

impl ProxyProcess {
    fn start(args: &[&str]) -> Self {
        use std::io::{BufRead, BufReader};
        let config = tempfile::tempdir().expect("a temporary config dir");
        let mut child = Command::new(env!("CARGO_BIN_EXE_ratescope"))
            .arg("proxy")
            .args(["--listen", "127.0.0.1:0"])
            .args(args)
            .env("RATESCOPE_CONFIG_DIR", config.path())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("the ratescope binary runs");
        let mut stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        let mut first = String::new();
        stdout.read_line(&mut first).expect("the proxy says where it listens");
        // Keep reading what it prints: a closed pipe would end it at its next line.
        std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));
        let url = first.trim().rsplit(' ').next().and_then(|url| url.parse().ok());
        let url = url.unwrap_or_else(|| panic!("no URL in {first:?}"));
        Self { child, url, _config: config }
    }
}

impl Drop for ProxyProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn adaptive_proxy_keeps_express_draft8_without_a_refusal() {
    let _serial = serial();
    let Some(server) = ThirdParty::express(2000, 10, "draft-8") else { return };
    let upstream = format!("/api={}", server.base.as_str().trim_end_matches('/'));
    // No retries anywhere: an upstream 429 would reach the client and be counted.
    let proxy = ProxyProcess::start(&["--route", &upstream, "--adaptive", "--retries", "0"]);
    let target = proxy.url.join("api/items").expect("a proxied URL");
    let summary = burst(&target, &["-n", "30", "-c", "10", "--retries", "0"]);
    let elapsed = summary["elapsed_s"].as_f64().expect("elapsed_s");
    let schedule = window_schedule(30, 10, 2.0);
    assert_eq!(summary["succeeded"], 30, "{summary:#}");
    assert_eq!(status_count(&summary, "429"), 0, "{summary:#}");
    assert!((schedule..=schedule * 1.1).contains(&elapsed), "{elapsed:.3}s against {schedule}s\n{summary:#}");
}

/// Runs `ratescope probe URL --json` and returns its report.
fn probe(url: &url::Url) -> Value {
    let config = tempfile::tempdir().expect("a temporary config dir");
    let output = Command::new(env!("CARGO_BIN_EXE_ratescope"))
        .args(["probe", url.as_str(), "--json"])
        .env("RATESCOPE_CONFIG_DIR", config.path())
        .output()
        .expect("the ratescope binary runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "probe failed: {}\n{stdout}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_str(&stdout).unwrap_or_else(|err| panic!("not JSON ({err}): {stdout}"))
}

/// Requests per second a reported budget allows in the long run.
fn sustained(budget: &Value) -> f64 {
    match budget["kind"].as_str() {
        Some("sliding_window") => budget["limit"].as_f64().unwrap_or(0.0) / budget["window_s"].as_f64().unwrap_or(1.0),
        _ => budget["per_s"].as_f64().unwrap_or(0.0),
    }
}

/// The probe finds `limit` per `window_s` to within 5%, never faster, suggests below it, and
/// meets no refusal.
fn assert_probe_finds(name: &str, server: &ThirdParty, limit: u64, window_s: f64) {
    let report = probe(&server.url("/items"));
    let truth = limit as f64 / window_s;
    let found = sustained(&report["found"]["budgets"][0]);
    let suggested = sustained(&report["suggested"]["budgets"][0]);
    assert_eq!(report["found"]["budgets"][0]["limit"], limit, "{name}\n{report:#}");
    assert!(found <= truth * 1.0001 && found >= truth * 0.95, "{name}: found {found}/s for {truth}/s\n{report:#}");
    assert!(suggested < found, "{name}: the suggestion keeps a margin\n{report:#}");
    assert_eq!(report["throttled"], 0, "{name}: no refusal\n{report:#}");
}

#[test]
fn probe_measures_a_flask_limiter_moving_window_from_whole_second_resets() {
    let _serial = serial();
    let Some(server) = ThirdParty::flask_limiter("10 per 2 second", "moving-window") else { return };
    assert_probe_finds("Flask-Limiter moving window 10/2s", &server, 10, 2.0);
}

#[test]
fn probe_measures_a_flask_limiter_fixed_window() {
    let _serial = serial();
    let Some(server) = ThirdParty::flask_limiter("10 per 3 second", "fixed-window") else { return };
    assert_probe_finds("Flask-Limiter fixed window 10/3s", &server, 10, 3.0);
}

#[test]
fn probe_measures_express_legacy_epoch_resets() {
    let _serial = serial();
    let Some(server) = ThirdParty::express(2000, 10, "legacy") else { return };
    assert_probe_finds("express-rate-limit legacy 10/2s", &server, 10, 2.0);
}

#[test]
fn probe_reads_express_draft8_policy() {
    let _serial = serial();
    let Some(server) = ThirdParty::express(2000, 10, "draft-8") else { return };
    assert_probe_finds("express-rate-limit draft-8 10/2s", &server, 10, 2.0);
}

#[test]
fn adaptive_without_headers_ramps_and_paces_against_nginx() {
    let _serial = serial();
    let Some(server) = ThirdParty::nginx("10r/s", 5, true) else { return };
    // nginx says nothing but 429: the first refusal ends the ramp, and the pace searches around
    // the hidden rate. Far from the published-budget bounds, but every request gets through with
    // a few refusals, where plain retries meet one for nearly every request.
    let adaptive = burst(&server.url("/items"), &["-n", "60", "-c", "10", "--adaptive", "--retries", "8"]);
    let schedule = (60.0 - 6.0) / 10.0;
    let elapsed = adaptive["elapsed_s"].as_f64().expect("elapsed_s");
    assert_eq!(adaptive["succeeded"], 60, "{adaptive:#}");
    assert!(status_count(&adaptive, "429") <= 12, "a few refusals\n{adaptive:#}");
    assert!(elapsed <= schedule * 2.0, "{elapsed:.3}s against a schedule of {schedule}s\n{adaptive:#}");
}

#[test]
fn probe_measures_nginx_limit_req_without_headers() {
    let _serial = serial();
    let Some(server) = ThirdParty::nginx("10r/s", 5, true) else { return };
    // nginx answers 429 and nothing else: the burst shows the capacity (5 + the one in hand),
    // a careful ramp the rate; a bucket costs two refusals to find.
    let report = probe(&server.url("/items"));
    let found = &report["found"]["budgets"][0];
    assert_eq!(found["kind"], "token_bucket", "{report:#}");
    assert_eq!(found["capacity"], 6, "{report:#}");
    let rate = sustained(found);
    assert!((9.5..=10.0).contains(&rate), "found {rate}/s for 10/s\n{report:#}");
    assert!(sustained(&report["suggested"]["budgets"][0]) < rate, "{report:#}");
    assert_eq!(report["throttled"], 2, "{report:#}");
}
