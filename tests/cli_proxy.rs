//! `ratescope proxy` as a user runs it (real time): bad input is refused with a clear error,
//! the key is injected but never printed, and Ctrl+C (SIGINT) or SIGTERM drains a request in flight.

use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStderr, Command, Stdio};
use std::sync::Arc;

use axum::Router;
use axum::http::HeaderMap;
use axum::routing::get;
use tokio::sync::{Notify, mpsc};

const KEY: &str = "sk-cli-test-9f8e7d6c5b4a";

fn ratescope(args: &[&str]) -> (i32, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_ratescope")).args(args).output().unwrap();
    (output.status.code().unwrap_or(-1), String::from_utf8_lossy(&output.stderr).into_owned())
}

#[test]
fn bad_routes_and_remote_addresses_are_refused_with_a_reason() {
    let (code, stderr) = ratescope(&["proxy", "--route", "nonsense"]);
    assert_ne!(code, 0);
    assert!(stderr.contains("is not PREFIX=UPSTREAM"), "{stderr}");
    let (code, stderr) = ratescope(&["proxy", "--route", "a=ftp://x"]);
    assert_ne!(code, 0);
    assert!(stderr.contains("must start with http:// or https://"), "{stderr}");
    let (code, stderr) = ratescope(&["proxy", "--listen", "0.0.0.0:0", "--route", "a=http://127.0.0.1:9"]);
    assert_ne!(code, 0);
    assert!(stderr.contains("not a loopback address") && stderr.contains("--allow-remote"), "{stderr}");
    let (code, stderr) = ratescope(&["proxy", "--route", "a=http://127.0.0.1:9", "--max-queue", "0"]);
    assert_ne!(code, 0);
    assert!(stderr.contains("--max-queue must be between 1"), "{stderr}");
    for threads in ["0", "1025"] {
        let (code, stderr) = ratescope(&["proxy", "--route", "a=http://127.0.0.1:9", "--threads", threads]);
        assert_ne!(code, 0);
        assert!(stderr.contains("--threads must be between 1 and 1024") && !stderr.contains("panicked"), "{stderr}");
    }
    let (code, stderr) = ratescope(&["proxy", "--route", "a=http://127.0.0.1:9", "--threads=-1"]);
    assert_ne!(code, 0);
    assert!(stderr.contains("invalid value '-1' for '--threads"), "{stderr}");
    let (code, stderr) =
        ratescope(&["proxy", "--route", "a=http://127.0.0.1:9", "--secret-env", "x-api-key=RATESCOPE_SURELY_UNSET"]);
    assert_ne!(code, 0);
    assert!(stderr.contains("'RATESCOPE_SURELY_UNSET' is not set"), "{stderr}");
}

#[test]
fn framing_headers_and_dot_segment_prefixes_are_usage_errors() {
    for header in ["content-length", "transfer-encoding", "host", "connection"] {
        let output = Command::new(env!("CARGO_BIN_EXE_ratescope"))
            .args(["proxy", "--route", "a=http://127.0.0.1:9", "--secret-env", &format!("{header}=RATESCOPE_FRAMING")])
            .env("RATESCOPE_FRAMING", "5")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{header}: {stderr}");
        assert!(stderr.contains(&format!("'{header}' cannot be a secret header")), "{stderr}");
    }
    let (code, stderr) = ratescope(&["proxy", "--route", "a/../b=http://127.0.0.1:9"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("'.' or '..' segments"), "{stderr}");
}

/// A zero `--stats-every` is refused (it panicked in tokio's interval, exit 101).
#[test]
fn a_zero_stats_period_is_a_usage_error() {
    let (code, stderr) = ratescope(&["proxy", "--route", "a=http://127.0.0.1:9", "--stats-every", "0s"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("the period must be longer than zero") && !stderr.contains("panicked"), "{stderr}");
}

/// An upstream whose `/hold` reports each arrival (with its API key) and answers when released.
async fn holding_upstream() -> (std::net::SocketAddr, mpsc::UnboundedReceiver<Option<String>>, Arc<Notify>) {
    let (arrived, arrivals) = mpsc::unbounded_channel();
    let release = Arc::new(Notify::new());
    let gate = Arc::clone(&release);
    let app = Router::new().route(
        "/hold",
        get(move |headers: HeaderMap| {
            let key = headers.get("x-api-key").and_then(|value| value.to_str().ok()).map(str::to_owned);
            let _ = arrived.send(key);
            let gate = Arc::clone(&gate);
            async move {
                gate.notified().await;
                "done"
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, arrivals, release)
}

/// Reads `stderr` until the proxy says it is shutting down; returns that line.
async fn shutting_down(stderr: ChildStderr) -> (BufReader<ChildStderr>, String) {
    let mut stderr = BufReader::new(stderr);
    let reading = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        while stderr.read_line(&mut line).unwrap() > 0 {
            if line.contains("shutting down") {
                return (stderr, line);
            }
        }
        panic!("the proxy never said it was shutting down: {line}");
    });
    reading.await.unwrap()
}

fn signal(child: &Child, name: &str) {
    let status = Command::new("kill").args([&format!("-{name}"), &child.id().to_string()]).status().unwrap();
    assert!(status.success());
}

/// A proxy started by a test: the process, the rest of its stdout, and its first line.
struct Started {
    child: Child,
    stdout: BufReader<std::process::ChildStdout>,
    first: String,
    url: String,
}

/// Starts the proxy `command` describes, and reads the URL its first line announces.
fn spawn_proxy(command: &mut Command) -> Started {
    let mut child = command.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    stdout.read_line(&mut first).unwrap();
    let url = first.trim().strip_prefix("ratescope proxy listening on ").expect(&first).to_owned();
    Started { child, stdout, first, url }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_the_request_in_flight_as_ctrl_c_does() {
    let (upstream, mut arrivals, release) = holding_upstream().await;
    let Started { mut child, url, .. } = spawn_proxy(Command::new(env!("CARGO_BIN_EXE_ratescope")).args([
        "proxy",
        "--listen",
        "127.0.0.1:0",
        "--route",
        &format!("up=http://{upstream}"),
        "--rate",
        "10/1s",
    ]));

    ratescope::http::install_tls_provider();
    let request = tokio::spawn(reqwest::get(format!("{url}up/hold")));
    // A guard against hanging forever if the request never arrives, not a timing assertion.
    let arrived = tokio::time::timeout(std::time::Duration::from_secs(60), arrivals.recv()).await;
    assert!(arrived.unwrap().is_some(), "the request reached the upstream");

    signal(&child, "TERM");
    let (_stderr, line) = shutting_down(child.stderr.take().unwrap()).await;
    assert!(line.contains("SIGTERM") && line.contains("draining 1 request(s) in flight"), "{line}");
    release.notify_one();
    let response = request.await.unwrap().unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.text().await.unwrap(), "done", "the request in flight finished");
    let exit = tokio::task::spawn_blocking(move || child.wait().unwrap()).await.unwrap();
    assert_eq!(exit.code(), Some(0), "a clean drain exits 0: {exit:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_drains_the_request_in_flight_and_the_key_is_never_printed() {
    let (upstream, mut arrivals, release) = holding_upstream().await;
    let Started { mut child, mut stdout, first, url } = spawn_proxy(
        Command::new(env!("CARGO_BIN_EXE_ratescope"))
            .args(["proxy", "--listen", "127.0.0.1:0", "--route", &format!("up=http://{upstream}")])
            .args(["--rate", "10/1s", "--secret-env", "x-api-key=RATESCOPE_TEST_KEY"])
            .env("RATESCOPE_TEST_KEY", KEY)
            .env("RATESCOPE_LOG", "debug"),
    );

    ratescope::http::install_tls_provider();
    let request = tokio::spawn(reqwest::get(format!("{url}up/hold")));
    // A guard against hanging forever if the request never arrives, not a timing assertion.
    let arrived = tokio::time::timeout(std::time::Duration::from_secs(60), arrivals.recv()).await;
    assert_eq!(arrived.unwrap().unwrap().as_deref(), Some(KEY), "the upstream got the injected key");

    signal(&child, "INT");
    let mut printed = String::new();
    let (mut stderr, line) = shutting_down(child.stderr.take().unwrap()).await;
    assert!(line.contains("SIGINT") && line.contains("draining 1 request(s) in flight"), "{line}");
    printed.push_str(&line);

    release.notify_one();
    let response = request.await.unwrap().unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.text().await.unwrap(), "done", "the request in flight finished");
    let exit = tokio::task::spawn_blocking(move || child.wait().unwrap()).await.unwrap();
    assert!(exit.success(), "a clean drain exits 0");
    std::io::Read::read_to_string(&mut stderr, &mut printed).unwrap();
    std::io::Read::read_to_string(&mut stdout, &mut printed).unwrap();
    printed.push_str(&first);
    assert!(printed.contains("every request in flight finished"), "{printed}");
    assert!(printed.contains("adds x-api-key"), "the route lists the injected header by name: {printed}");
    assert!(!printed.contains(KEY), "the key was printed:\n{printed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_logs_are_one_object_a_line_with_the_request_and_no_secret_or_query_value() {
    let (upstream, mut arrivals, release) = holding_upstream().await;
    let Started { mut child, url, .. } = spawn_proxy(
        Command::new(env!("CARGO_BIN_EXE_ratescope"))
            .args(["proxy", "--listen", "127.0.0.1:0", "--route", &format!("up=http://{upstream}")])
            .args(["--rate", "10/1s", "--secret-env", "x-api-key=RATESCOPE_TEST_KEY", "--log-format", "json"])
            .env("RATESCOPE_TEST_KEY", KEY)
            .env_remove("RATESCOPE_LOG"),
    );
    ratescope::http::install_tls_provider();
    let query = "token=query-secret-4411&q=visible-value-7";
    let request = tokio::spawn(reqwest::get(format!("{url}up/hold?{query}")));
    let arrived = tokio::time::timeout(std::time::Duration::from_secs(60), arrivals.recv()).await;
    assert_eq!(arrived.unwrap().unwrap().as_deref(), Some(KEY));
    release.notify_one();
    assert_eq!(request.await.unwrap().unwrap().status(), 200);
    // A route that does not exist, and one that tries to leave its route: logged, refused.
    assert_eq!(reqwest::get(format!("{url}nowhere?{query}")).await.unwrap().status(), 404);

    signal(&child, "INT");
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    let exit = tokio::task::spawn_blocking(move || child.wait().unwrap()).await.unwrap();
    assert!(exit.success());
    let lines: Vec<serde_json::Value> = stderr
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|err| panic!("not a JSON line ({err}): {line}")))
        .collect();
    for line in &lines {
        assert!(line["timestamp"].is_string() && line["level"].is_string(), "{line}");
    }
    let forwarded = lines.iter().find(|line| line["message"] == "forwarded").expect("a line per forwarded request");
    assert_eq!(forwarded["level"], "INFO");
    assert_eq!(forwarded["method"], "GET");
    assert_eq!(forwarded["path"], "/up/hold");
    assert_eq!(forwarded["status"], 200);
    assert_eq!(forwarded["attempts"], 1);
    assert_eq!(forwarded["key"], format!("{upstream}"));
    assert!(forwarded["queue_wait_ms"].as_f64().is_some_and(|ms| ms >= 0.0), "{forwarded}");
    assert!(forwarded["upstream_ms"].as_f64().is_some_and(|ms| ms > 0.0), "{forwarded}");
    let refused = lines.iter().find(|line| line["message"] == "refused").expect("the unroutable request is logged");
    assert_eq!(refused["status"], 404);
    assert!(lines.iter().any(|line| line["message"].as_str().is_some_and(|text| text.contains("shutting down"))));
    for secret in [KEY, "query-secret-4411", "visible-value-7", "token="] {
        assert!(!stderr.contains(secret), "{secret} was logged:\n{stderr}");
    }
}

/// `assets/ratescope-proxy.service`'s command line starts the proxy (on a free port here), and
/// `systemd-analyze verify` finds nothing to say of the unit where systemd is installed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_systemd_units_command_line_starts_the_proxy_and_the_unit_verifies() {
    let unit_path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/ratescope-proxy.service");
    let unit = std::fs::read_to_string(&unit_path).unwrap();
    let exec = unit.lines().find_map(|line| line.strip_prefix("ExecStart=")).expect("an ExecStart line");
    let mut words = exec.split_whitespace();
    assert_eq!(words.next(), Some("/usr/local/bin/ratescope"), "cargo install --root /usr/local puts it there");
    let args: Vec<String> =
        words.map(|word| if word == "127.0.0.1:8788" { "127.0.0.1:0".to_owned() } else { word.to_owned() }).collect();
    assert!(args.iter().any(|arg| arg == "--log-format") && args.iter().any(|arg| arg == "--secret-env"));
    let Started { mut child, .. } = spawn_proxy(
        Command::new(env!("CARGO_BIN_EXE_ratescope")).args(&args).env("RATESCOPE_API_KEY", format!("Bearer {KEY}")),
    );
    signal(&child, "TERM");
    let exit = tokio::task::spawn_blocking(move || child.wait().unwrap()).await.unwrap();
    assert!(exit.success(), "{exit:?}");

    if Command::new("systemd-analyze").arg("--version").stdout(Stdio::null()).status().is_err() {
        return;
    }
    // Verified with ExecStart on this build's binary (systemd checks that it is executable).
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("ratescope-proxy.service");
    std::fs::write(&copy, unit.replace("/usr/local/bin/ratescope", env!("CARGO_BIN_EXE_ratescope"))).unwrap();
    let output = Command::new("systemd-analyze").args(["verify", "--man=no"]).arg(&copy).output().unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success() && said.trim().is_empty(), "systemd-analyze verify: {said}");
}

/// A profile for the proxy: the upstream at `upstream` paced at `rate`.
fn proxy_profile(upstream: std::net::SocketAddr, rate: &str) -> String {
    format!(
        "name = \"reload\"\n[[hosts]]\nname = \"up\"\nbase_url = \"http://{upstream}\"\n\
         budgets = [{{ name = \"rate\", kind = \"token_bucket\", capacity = 1, rate = \"{rate}\" }}]\n"
    )
}

/// Reads `stderr` lines until one contains `text`; returns it.
fn line_with(stderr: &mut BufReader<ChildStderr>, text: &str) -> String {
    let mut line = String::new();
    loop {
        line.clear();
        assert!(stderr.read_line(&mut line).unwrap() > 0, "stderr ended before a line with {text:?}");
        if line.contains(text) {
            return line;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_rereads_the_profile_and_a_broken_one_keeps_the_old_limits() {
    let (upstream, _arrivals, _release) = holding_upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let profile = dir.path().join("reload.toml");
    std::fs::write(&profile, proxy_profile(upstream, "10/1s")).unwrap();
    let Started { mut child, url, .. } = spawn_proxy(
        Command::new(env!("CARGO_BIN_EXE_ratescope"))
            .args(["proxy", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--route"])
            .arg(format!("up=http://{upstream}"))
            .arg("--profile")
            .arg(&profile),
    );
    let mut stderr = BufReader::new(child.stderr.take().unwrap());

    // A file broken mid-edit: refused, the old limits stay, the proxy serves on.
    std::fs::write(&profile, "name = \"reload\"\n[[hosts]\n").unwrap();
    signal(&child, "HUP");
    let refused = tokio::task::spawn_blocking(move || {
        let line = line_with(&mut stderr, "SIGHUP");
        (stderr, line)
    });
    let (mut stderr, line) = refused.await.unwrap();
    assert!(line.contains("reload refused, the old configuration stays") && line.contains("reload.toml"), "{line}");
    ratescope::http::install_tls_provider();
    let metrics = |path: &'static str| {
        let url = url.clone();
        async move { reqwest::get(format!("{url}{path}")).await.unwrap().status().as_u16() }
    };
    assert_eq!(metrics("nowhere").await, 404, "still serving");

    // Fixed: applied.
    std::fs::write(&profile, proxy_profile(upstream, "5/1s")).unwrap();
    signal(&child, "HUP");
    let (mut stderr, line) = tokio::task::spawn_blocking(move || {
        let line = line_with(&mut stderr, "SIGHUP");
        (stderr, line)
    })
    .await
    .unwrap();
    assert!(line.contains("SIGHUP: reloaded: 1 route(s), 1 limited key(s)"), "{line}");
    signal(&child, "TERM");
    // Read to the end: a closed pipe would fail the proxy's last words.
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut rest).unwrap();
    let exit = tokio::task::spawn_blocking(move || child.wait().unwrap()).await.unwrap();
    assert!(exit.success(), "{exit:?}: {rest}");
}
