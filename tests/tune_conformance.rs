//! Tune against real servers: `probe --json` → `tune --from-probe` → `burst` with the best
//! setting, against the demo API and the third-party limiters of `tests/thirdparty/`. The best
//! setting must meet no 429 from the real server and finish within 1.15× of the makespan the
//! tune predicted (either way).
//!
//! These run on the real clock, as the servers do (their windows cannot be paused); a case
//! takes the probe's few seconds, a wait for the server to forget it, and the burst's schedule.
//! A missing third-party server is skipped with a notice, or fails when
//! `RATESCOPE_REQUIRE_THIRDPARTY=1` (CI installs them all).

#[path = "thirdparty/mod.rs"]
mod thirdparty;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use thirdparty::ThirdParty;

/// The issue's bound: the real makespan within 1.15× of the prediction, either way.
const WITHIN: f64 = 1.15;

/// One case at a time: each measures elapsed time against a prediction.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Runs the built `ratescope` with `args` in a fresh config dir; it must exit 0; its stdout as JSON.
fn ratescope_json(args: &[&str]) -> Value {
    let config = tempfile::tempdir().expect("a temporary config dir");
    let output = Command::new(env!("CARGO_BIN_EXE_ratescope"))
        .args(args)
        .env("RATESCOPE_CONFIG_DIR", config.path())
        .output()
        .expect("the ratescope binary runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "ratescope {args:?} failed: {stderr}\n{stdout}");
    serde_json::from_str(&stdout).unwrap_or_else(|err| panic!("not JSON ({err}): {stdout}\n{stderr}"))
}

/// The whole flow against `url`: probe, wait until the server has forgotten the probe, tune a
/// burst of `requests` at once from the probe's findings, fire the best setting for real.
fn probe_tune_burst(name: &str, url: &url::Url, requests: usize) {
    let dir = tempfile::tempdir().expect("a temporary dir");
    let probe = ratescope_json(&["probe", url.as_str(), "--json"]);
    let probe_file = dir.path().join("probe.json");
    std::fs::write(&probe_file, probe.to_string()).expect("write the probe report");
    let spec = dir.path().join("burst.toml");
    let base = format!("{}://{}", url.scheme(), url.authority());
    std::fs::write(&spec, format!("base_url = \"{base}\"\npath = \"{}\"\nrequests = {requests}\n", url.path()))
        .expect("write the burst spec");
    let tune = ratescope_json(&["tune", "--burst", path(&spec), "--from-probe", path(&probe_file), "--json"]);
    assert!(tune["best"].is_object(), "{name}: a best setting\n{tune:#}");
    let predicted = tune["predicted"]["elapsed_s"].as_f64().expect("predicted.elapsed_s");
    assert_eq!(tune["predicted"]["status_counts"]["429"], Value::Null, "{name}: none refused in the model\n{tune:#}");
    let flags: Vec<String> = (tune["burst_flags"].as_array().expect("burst_flags").iter())
        .map(|flag| flag.as_str().expect("a flag").to_owned())
        .collect();

    // Let the server forget the probe: its longest window (or a bucket's refill), and a second.
    std::thread::sleep(forget_time(&probe) + Duration::from_secs(1));
    let requests_text = requests.to_string();
    let mut args = vec!["burst", url.as_str(), "-n", &requests_text, "--retries", "0", "--json"];
    args.extend(flags.iter().map(String::as_str));
    let summary = ratescope_json(&args);
    let elapsed = summary["elapsed_s"].as_f64().expect("elapsed_s");
    assert_eq!(summary["succeeded"], requests as u64, "{name}: every request served\n{summary:#}\n{tune:#}");
    assert_eq!(summary["status_counts"]["429"], Value::Null, "{name}: no 429\n{summary:#}\n{tune:#}");
    let ratio = elapsed / predicted;
    eprintln!("{name}: predicted {predicted:.3}s, measured {elapsed:.3}s ({ratio:.3}×) with {flags:?}");
    assert!(
        (1.0 / WITHIN..=WITHIN).contains(&ratio),
        "{name}: measured {elapsed:.3}s against a prediction of {predicted:.3}s\n{summary:#}\n{tune:#}"
    );
}

fn path(path: &Path) -> &str {
    path.to_str().expect("a UTF-8 temporary path")
}

/// How long the server the probe found takes to forget what was sent: its longest window, or a
/// bucket's time to refill from empty.
fn forget_time(probe: &Value) -> Duration {
    let budgets = probe["found"]["budgets"].as_array().cloned().unwrap_or_default();
    let seconds = budgets
        .iter()
        .map(|budget| match budget["kind"].as_str() {
            Some("sliding_window") => budget["window_s"].as_f64().unwrap_or(0.0),
            _ => budget["capacity"].as_f64().unwrap_or(0.0) / budget["per_s"].as_f64().unwrap_or(1.0),
        })
        .fold(0.0, f64::max);
    Duration::from_secs_f64(seconds.min(120.0))
}

#[test]
fn tuned_against_the_demo_api_holds_for_real() {
    let _serial = serial();
    // The demo API's /items shape (a bucket and a longer window), with a window short enough
    // that the probe's use of it is forgotten in seconds.
    let config = ratescope::mock::MockConfig::from_toml(
        r#"
[[routes]]
prefix = "/items"
latency = { fixed = "2ms" }
  [[routes.policies]]
  kind = "token_bucket"
  capacity = 8
  rate = "8/1s"
  [[routes.policies]]
  kind = "sliding_window"
  limit = 40
  window = "8s"
"#,
    )
    .expect("a valid config");
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let server = runtime
        .block_on(ratescope::mock::MockServer::start(config, "127.0.0.1:0".parse().expect("an address")))
        .expect("the demo API starts");
    probe_tune_burst("demo API bucket 8 @ 8/s + sliding 40/8s", &server.url().join("/items").expect("a URL"), 60);
}

#[test]
fn tuned_against_nginx_limit_req_holds_for_real() {
    let _serial = serial();
    let Some(server) = ThirdParty::nginx("10r/s", 5, true) else { return };
    probe_tune_burst("nginx limit_req 10r/s burst 5 nodelay", &server.url("/items"), 60);
}

#[test]
fn tuned_against_a_flask_limiter_moving_window_holds_for_real() {
    let _serial = serial();
    let Some(server) = ThirdParty::flask_limiter("10 per 2 second", "moving-window") else { return };
    probe_tune_burst("Flask-Limiter moving window 10/2s", &server.url("/items"), 60);
}

#[test]
fn tuned_against_express_rate_limit_holds_for_real() {
    let _serial = serial();
    let Some(server) = ThirdParty::express(2000, 10, "draft-8") else { return };
    probe_tune_burst("express-rate-limit draft-8 10/2s", &server.url("/items"), 60);
}
