//! Each export run in its own runtime against a server-side limiter we did not write: the
//! Bottleneck module under node against express-rate-limit, the aiolimiter module under python3
//! against Flask-Limiter, the governor function (compiled here, from a committed fixture the
//! exporter must still produce byte for byte) and the Go function against nginx `limit_req`.
//!
//! Each fires more than 60 requests at once through the exported limiter and asserts no 429 and
//! an elapsed time within 1.15 × the server's theoretical schedule (a perfect client's). The
//! profile exported holds what `ratescope probe` would save: the server's limits less the probe's
//! 5% margin (`probe::report`'s `with_margin`: a limit or capacity less ⌊5%⌋, a rate × 0.95), so
//! network jitter cannot cause a 429.
//!
//! Why these numbers: a window of L per W becomes even spacing at W/L', which takes
//! (N − 1)·W/L' against a perfect client's (⌈N/L⌉ − 1)·W. With N = k·L + 1 the two differ only
//! by L/L' (20/19: 1.053), so k = 5 windows of L = 20 (N = 101) keeps well inside 1.15 whatever
//! the runtime's timer slack. nginx at r = 20/s, burst 5 (nodelay) allows 6 at once, then one per
//! 50 ms: the schedule is (N − b − 1)/r; a bucket of 6 at 19/s takes (N − 6)/19, so N = 61 is
//! 1.053 × the schedule.
//!
//! Real clock (a server's window cannot be paused), one case at a time (a shared lock). A missing
//! tool is skipped with a NOTICE, or fails when `RATESCOPE_REQUIRE_THIRDPARTY=1`.

#[path = "thirdparty/mod.rs"]
mod thirdparty;

/// The governor export of `nginx_profile`, committed and compiled here.
mod exported {
    include!("fixtures/export/governor_nginx.rs");
}

/// The governor export of `cap_only_profile` (no budget, a cap): compiled here, unused.
mod exported_cap_only {
    #![allow(dead_code)]
    include!("fixtures/export/governor_cap_only.rs");
}

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use ratescope::profile::export::{ExportFormat, Selection, render};
use ratescope::profile::{BudgetEntry, HostProfile, Profile};
use serde_json::Value;
use thirdparty::ThirdParty;

/// The bound of the issue: at most this many times a perfect client's schedule.
const BOUND: f64 = 1.15;

fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Skips (with a visible notice) or, when third-party fixtures are required, fails.
fn missing(what: &str) {
    if thirdparty::thirdparty_required() {
        panic!("third-party runtime required (RATESCOPE_REQUIRE_THIRDPARTY=1) but {what}");
    }
    eprintln!("NOTICE: skipping export runtime test: {what} (set RATESCOPE_REQUIRE_THIRDPARTY=1 to fail instead)");
}

fn manifest_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A profile of one host at `base_url` with `budgets`.
fn profile(base_url: &str, budgets: Vec<BudgetEntry>) -> Profile {
    let mut host = HostProfile::new("server", base_url);
    host.budgets = budgets;
    let mut profile = Profile::new("export-runtime");
    profile.hosts.push(host);
    profile
}

/// What a probe of a window of 20 per second saves: 20 − ⌊20 × 5%⌋ = 19 per second.
fn window_profile(server: &ThirdParty) -> Profile {
    profile(server.base.as_str().trim_end_matches('/'), vec![BudgetEntry::sliding_window("second", 19, "1s")])
}

/// What a probe of nginx at 20 r/s, burst 5 (nodelay: 6 at once) saves: a bucket of
/// 6 − ⌊6 × 5%⌋ = 6 refilled at 20 × 0.95 = 19/s. The address is a comment only.
fn nginx_profile(base_url: &str) -> Profile {
    profile(base_url, vec![BudgetEntry::token_bucket("nginx", 6, "19/1s")])
}

/// A host with a cap of 3 in flight and no budget.
fn cap_only_profile() -> Profile {
    let mut profile = profile(FIXTURE_URL, Vec::new());
    profile.hosts[0].concurrency = Some(3);
    profile
}

/// The fixtures' address: the governor fixtures are generated for it (it only shows in a comment).
const FIXTURE_URL: &str = "http://127.0.0.1:8080";

/// `(⌈N/L⌉ − 1)·W`: a perfect client through a window of L per W started by the first request.
fn window_schedule(requests: u64, limit: u64, window_s: f64) -> f64 {
    requests.div_ceil(limit).saturating_sub(1) as f64 * window_s
}

/// `(N − b − 1)/r`: a perfect client through nginx at rate r with burst b, nodelay.
fn nginx_schedule(requests: u64, burst: u64, rate: f64) -> f64 {
    (requests - burst - 1) as f64 / rate
}

/// Statuses and elapsed seconds from a runner's JSON line.
fn outcome(name: &str, stdout: &[u8], stderr: &[u8]) -> (Value, f64) {
    let text = String::from_utf8_lossy(stdout);
    let value: Value = serde_json::from_str(text.trim())
        .unwrap_or_else(|err| panic!("{name}: not JSON ({err}): {text}\n{}", String::from_utf8_lossy(stderr)));
    let elapsed = value["elapsed_s"].as_f64().expect("elapsed_s");
    (value["statuses"].clone(), elapsed)
}

fn assert_kept(name: &str, statuses: &Value, elapsed: f64, requests: u64, schedule: f64) {
    eprintln!(
        "{name}: {requests} requests in {elapsed:.3}s, schedule {schedule:.3}s ({:.3}×): {statuses}",
        elapsed / schedule
    );
    let ok = statuses["200"].as_u64().unwrap_or(0);
    let refused = statuses["429"].as_u64().unwrap_or(0);
    assert_eq!(refused, 0, "{name}: {refused} × 429 in {statuses}");
    assert_eq!(ok, requests, "{name}: every request answered 200: {statuses}");
    assert!(elapsed <= schedule * BOUND, "{name}: {elapsed:.3}s against a schedule of {schedule:.3}s (bound {BOUND}×)");
    assert!(elapsed >= schedule * 0.99, "{name}: faster than the server allows? {elapsed:.3}s against {schedule:.3}s");
}

fn write_export(dir: &Path, file: &str, profile: &Profile, format: ExportFormat) -> PathBuf {
    let text = render(profile, Selection::default(), format).expect("the profile exports");
    let path = dir.join(file);
    std::fs::write(&path, text).expect("the export is written");
    path
}

fn tool_runs(program: &str, args: &[&str]) -> Result<(), String> {
    match Command::new(program).args(args).output() {
        Err(err) => Err(format!("{program} cannot run ({err})")),
        Ok(output) if !output.status.success() => {
            let why = String::from_utf8_lossy(&output.stderr);
            Err(format!("`{program} {}` failed: {}", args.join(" "), why.trim().lines().last().unwrap_or("")))
        }
        Ok(_) => Ok(()),
    }
}

#[test]
fn bottleneck_module_keeps_express_rate_limits_window() {
    let _serial = serial();
    let modules = manifest_dir().join("tests/thirdparty/node_modules");
    if !modules.join("bottleneck/package.json").is_file() {
        return missing(&format!("{} lacks bottleneck; run `npm ci --prefix tests/thirdparty`", modules.display()));
    }
    let Some(server) = ThirdParty::express(1000, 20, "draft-7") else { return };
    let dir = tempfile::tempdir().unwrap();
    let module = write_export(dir.path(), "limits.js", &window_profile(&server), ExportFormat::Bottleneck);
    let requests = 101;
    let output = Command::new("node")
        .arg(manifest_dir().join("tests/export_runtimes/bottleneck_runner.js"))
        .arg(&module)
        .arg(server.url("/items").as_str())
        .arg(requests.to_string())
        .env("NODE_PATH", &modules)
        .output()
        .expect("node runs");
    assert!(output.status.success(), "node failed: {}", String::from_utf8_lossy(&output.stderr));
    let (statuses, elapsed) = outcome("bottleneck", &output.stdout, &output.stderr);
    let schedule = window_schedule(requests, 20, 1.0);
    assert_kept("Bottleneck vs express-rate-limit 20/1s", &statuses, elapsed, requests, schedule);
}

#[test]
fn aiolimiter_module_keeps_flask_limiters_moving_window() {
    let _serial = serial();
    if let Err(why) = tool_runs("python3", &["-c", "import aiolimiter"]) {
        return missing(&format!("{why}; run `python3 -m pip install -r tests/thirdparty/requirements.txt`"));
    }
    let Some(server) = ThirdParty::flask_limiter("20 per 1 second", "moving-window") else { return };
    let dir = tempfile::tempdir().unwrap();
    let module = write_export(dir.path(), "limits.py", &window_profile(&server), ExportFormat::Aiolimiter);
    let requests = 101;
    let output = Command::new("python3")
        .arg(manifest_dir().join("tests/export_runtimes/aiolimiter_runner.py"))
        .arg(&module)
        .arg(server.url("/items").as_str())
        .arg(requests.to_string())
        .output()
        .expect("python3 runs");
    assert!(output.status.success(), "python3 failed: {}", String::from_utf8_lossy(&output.stderr));
    let (statuses, elapsed) = outcome("aiolimiter", &output.stdout, &output.stderr);
    let schedule = window_schedule(requests, 20, 1.0);
    assert_kept("aiolimiter vs Flask-Limiter moving window 20/1s", &statuses, elapsed, requests, schedule);
}

#[test]
fn the_governor_fixtures_are_what_the_exporter_writes() {
    let fixtures = [("governor_nginx.rs", nginx_profile(FIXTURE_URL)), ("governor_cap_only.rs", cap_only_profile())];
    for (file, profile) in fixtures {
        let text = render(&profile, Selection::default(), ExportFormat::Governor).unwrap();
        let path = manifest_dir().join("tests/fixtures/export").join(file);
        if std::env::var_os("RATESCOPE_BLESS").is_some() {
            std::fs::write(&path, &text).unwrap();
        }
        let fixture = std::fs::read_to_string(&path).unwrap();
        assert!(
            fixture == text,
            "tests/fixtures/export/{file} is not what the exporter writes now; if the change is intended, run \
             `RATESCOPE_BLESS=1 cargo test --test export_runtimes the_governor_fixtures` and review the diff\n{text}"
        );
    }
}

#[test]
fn governor_function_keeps_nginx_limit_req() {
    let _serial = serial();
    let Some(server) = ThirdParty::nginx("20r/s", 5, true) else { return };
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let requests: u64 = 61;
    let (counts, elapsed) = runtime.block_on(fire_through_governor(server.url("/items"), requests));
    let schedule = nginx_schedule(requests, 5, 20.0);
    assert_kept("governor vs nginx 20r/s burst 5", &Value::Object(counts), elapsed, requests, schedule);
}

/// Fires `requests` GETs at once, each after `until_ready`: the statuses and elapsed seconds.
async fn fire_through_governor(url: url::Url, requests: u64) -> (serde_json::Map<String, Value>, f64) {
    // reqwest is built without a default TLS provider; plain HTTP still wants one installed.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::new();
    let limits = Arc::new(exported::host_limits());
    let started = Instant::now();
    let tasks: Vec<_> = (0..requests)
        .map(|_| {
            let (limits, client, url) = (limits.clone(), client.clone(), url.clone());
            tokio::spawn(async move {
                let _permit = limits.until_ready().await;
                client.get(url).send().await.expect("nginx answers").status().as_u16()
            })
        })
        .collect();
    let mut counts = serde_json::Map::new();
    for task in tasks {
        let status = task.await.expect("the request task ends").to_string();
        let count = counts.get(&status).and_then(Value::as_u64).unwrap_or(0);
        counts.insert(status, Value::from(count + 1));
    }
    (counts, started.elapsed().as_secs_f64())
}

#[test]
fn go_function_keeps_nginx_limit_req() {
    let _serial = serial();
    let gocode = Path::new("/usr/share/gocode");
    if let Err(why) = tool_runs("go", &["version"]) {
        return missing(&format!("{why}; run `apt-get install -y golang-go golang-golang-x-time-dev`"));
    }
    if !gocode.join("src/golang.org/x/time/rate/rate.go").is_file() {
        return missing(
            "no golang.org/x/time/rate in /usr/share/gocode; run `apt-get install -y golang-golang-x-time-dev`",
        );
    }
    let Some(server) = ThirdParty::nginx("20r/s", 5, true) else { return };
    let dir = tempfile::tempdir().unwrap();
    let gopath = dir.path().join("gopath");
    for package in ["ratelimits", "runner"] {
        std::fs::create_dir_all(gopath.join("src").join(package)).unwrap();
    }
    write_export(&gopath.join("src/ratelimits"), "limits.go", &nginx_profile(server.base.as_str()), ExportFormat::Go);
    std::fs::copy(manifest_dir().join("tests/export_runtimes/go_runner.go"), gopath.join("src/runner/main.go"))
        .unwrap();
    let binary = dir.path().join("runner");
    let paths = std::env::join_paths([gopath.as_path(), gocode]).unwrap();
    let build = Command::new("go")
        .args(["build", "-o"])
        .arg(&binary)
        .arg("runner")
        .env("GO111MODULE", "off")
        .env("GOPATH", &paths)
        .env("GOCACHE", dir.path().join("cache"))
        .env("GOFLAGS", "")
        .output()
        .expect("go runs");
    assert!(build.status.success(), "the Go export does not build: {}", String::from_utf8_lossy(&build.stderr));
    let requests: u64 = 61;
    let output = Command::new(&binary).arg(server.url("/items").as_str()).arg(requests.to_string()).output().unwrap();
    assert!(output.status.success(), "the Go runner failed: {}", String::from_utf8_lossy(&output.stderr));
    let (statuses, elapsed) = outcome("go", &output.stdout, &output.stderr);
    let schedule = nginx_schedule(requests, 5, 20.0);
    assert_kept("Go x/time/rate vs nginx 20r/s burst 5", &statuses, elapsed, requests, schedule);
}
