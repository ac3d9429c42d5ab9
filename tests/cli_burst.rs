//! `ratescope burst` as a user runs it, against the demo API on loopback (real time, small bursts).

mod support;

use std::net::SocketAddr;
use support::cli::ratescope;

mod redis_support;

use ratescope::mock::{MockConfig, MockServer, Outcome};

const SERVER: &str = r#"
[server]
api_key_header = "x-api-key"

[[routes]]
prefix = "/items"
dialect = "ietf"
status = 429
retry_after = true
count_by = "global"

  [[routes.policies]]
  name = "burst"
  kind = "token_bucket"
  capacity = 5
  rate = "10/1s"
"#;

async fn server() -> MockServer {
    MockServer::start(MockConfig::from_toml(SERVER).unwrap(), SocketAddr::from(([127, 0, 0, 1], 0))).await.unwrap()
}

fn args(items: &[&str]) -> Vec<String> {
    items.iter().map(|item| (*item).to_owned()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paced_burst_prints_the_documented_json_and_succeeds() {
    let server = server().await;
    let dir = tempfile::tempdir().unwrap();
    let url = format!("{}items", server.url());
    let csv = dir.path().join("attempts.csv");
    let (code, stdout, stderr) = ratescope(
        dir.path(),
        args(&["burst", &url, "-n", "12", "--rate", "8/1s", "--burst", "4", "--json", "--csv", csv.to_str().unwrap()]),
    )
    .await;
    assert_eq!(code, 0, "{stderr}");
    let json: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    for field in ["requests", "sent", "succeeded", "failed", "status_counts", "retries", "elapsed_s", "achieved_rps"] {
        assert!(json.get(field).is_some(), "{field} missing from {json}");
    }
    for field in ["service_ms", "queue_wait_ms", "total_ms"] {
        for percentile in ["p50", "p90", "p99", "max"] {
            assert!(json[field][percentile].is_number(), "{field}.{percentile}");
        }
    }
    assert_eq!((json["requests"].as_u64(), json["succeeded"].as_u64()), (Some(12), Some(12)));
    assert_eq!(json["status_counts"]["200"].as_u64(), Some(12));
    assert!(json["status_counts"].get("429").is_none(), "paced below the server's limit");
    let rows = std::fs::read_to_string(&csv).unwrap();
    assert_eq!(rows.lines().count(), 13, "a header and one row per attempt");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raw_burst_meets_429s_and_exits_non_zero() {
    let server = server().await;
    let dir = tempfile::tempdir().unwrap();
    let url = format!("{}items", server.url());
    let (code, stdout, _) =
        ratescope(dir.path(), args(&["burst", &url, "-n", "20", "--no-limit", "--retries", "0", "--json"])).await;
    assert_ne!(code, 0, "requests finally failed");
    let json: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert!(json["status_counts"]["429"].as_u64().unwrap_or(0) >= 10, "{json}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_profile_is_reported_and_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("broken.toml");
    let text = "name = \"broken\"\n[[hosts]]\nname = \"x\"\nbase_url = 42\n";
    std::fs::write(&path, text).unwrap();
    let (code, _, stderr) =
        ratescope(dir.path(), args(&["burst", "http://127.0.0.1:9/items", "--profile", path.to_str().unwrap()])).await;
    assert_ne!(code, 0);
    assert!(stderr.contains("broken.toml") && stderr.contains("line 4"), "{stderr}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), text, "the file is untouched");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_reach_the_server_and_no_output() {
    let server = server().await;
    let dir = tempfile::tempdir().unwrap();
    let profile = format!(
        "name = \"team\"\n[[hosts]]\nname = \"demo\"\nbase_url = \"{}\"\nsecret_headers = [\"x-api-key\"]\nbudgets = [{{ name = \"rate\", kind = \"token_bucket\", capacity = 4, rate = \"8/1s\" }}]\n",
        server.url().as_str().trim_end_matches('/')
    );
    let profile_path = dir.path().join("team.toml");
    std::fs::write(&profile_path, profile).unwrap();
    let secrets = dir.path().join("secrets.toml");
    std::fs::write(&secrets, "[team.demo]\nx-api-key = \"sk-very-secret-value\"\n").unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&secrets, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let csv = dir.path().join("out.csv");
    let url = format!("{}items", server.url());
    let (code, stdout, stderr) = ratescope(
        dir.path(),
        args(&[
            "burst",
            &url,
            "-n",
            "6",
            "--profile",
            profile_path.to_str().unwrap(),
            "--json",
            "--csv",
            csv.to_str().unwrap(),
        ]),
    )
    .await;
    assert_eq!(code, 0, "{stderr}");
    let arrivals = server.arrivals();
    assert_eq!(arrivals.len(), 6);
    assert!(arrivals.iter().all(|a| a.key.as_deref() == Some("sk-very-secret-value")), "the server got the key");
    assert!(arrivals.iter().all(|a| matches!(a.outcome, Outcome::Served(200))));
    let everything = format!("{stdout}{stderr}{}", std::fs::read_to_string(&csv).unwrap());
    assert!(!everything.contains("sk-very-secret-value"), "the secret appears in no output");
    let (_, shown, _) = ratescope(dir.path(), args(&["profile", "show", profile_path.to_str().unwrap()])).await;
    assert!(!shown.contains("sk-very-secret-value"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_with_one_shared_key_stay_under_the_servers_limit_together() {
    if !redis_support::shared_server_up().await {
        return redis_support::skip_or_fail(&format!("no server answers at {}", redis_support::redis_url()));
    }
    let server = server().await;
    let dir = tempfile::tempdir().unwrap();
    let url = format!("{}items", server.url());
    let key = format!("cli-test-{:016x}", rand::random::<u64>());
    // The server holds 5 at once, refilling 10/s. Each process alone sends its first 4 at once
    // (8 together: 429s for some); sharing one bucket of 4 @ 8/s, they never collide. Each
    // process names itself in x-api-key, so the server's log shows whether they overlapped.
    let redis = redis_support::redis_url();
    // Shared, each sends 16: the two share about 4 s, so they overlap even when one process
    // starts a second late on a busy machine (10 each, 2 s together, once did not).
    let burst = |process: &str, shared: bool| {
        let count = if shared { "16" } else { "10" };
        let mut items = args(&["burst", &url, "-n", count, "--rate", "8/1s", "--burst", "4", "--retries", "0"]);
        items.extend(args(&["-H", &format!("x-api-key: {process}"), "--json"]));
        if shared {
            items.extend(args(&["--redis", &redis, "--shared-key", &key]));
        }
        items
    };

    // The control: the same two processes, each with its own bucket, meet the server's limit.
    let (first, second) =
        tokio::join!(ratescope(dir.path(), burst("a", false)), ratescope(dir.path(), burst("b", false)));
    let refused = server.arrivals().iter().filter(|arrival| arrival.outcome == Outcome::Limited(429)).count();
    assert!(refused > 0, "unshared, the two bursts should meet the limit:\n{}\n{}", first.1, second.1);
    server.clear_arrivals();
    // Let the server's bucket fill again (5 tokens at 10/s).
    tokio::time::sleep(std::time::Duration::from_millis(600)).await;

    let (first, second) =
        tokio::join!(ratescope(dir.path(), burst("a", true)), ratescope(dir.path(), burst("b", true)));
    for (code, stdout, stderr) in [first, second] {
        assert_eq!(code, 0, "{stdout}\n{stderr}");
        let json: serde_json::Value = serde_json::from_str(&stdout).unwrap();
        assert_eq!(json["status_counts"]["200"].as_u64(), Some(16), "{json}");
        assert_eq!(json["shared"]["counts"]["admitted"].as_u64(), Some(16), "{json}");
        assert_eq!(json["shared"]["state"], "connected");
        let host_key = format!("{key}/{}", server.addr());
        assert_eq!(json["shared"]["keys"][0].as_str(), Some(host_key.as_str()));
    }
    let arrivals = server.arrivals();
    assert_eq!(arrivals.len(), 32);
    assert!(arrivals.iter().all(|arrival| arrival.outcome == Outcome::Served(200)), "no 429 from the server");
    // They ran together: each process's requests arrived between the other's.
    let senders: Vec<&str> = arrivals.iter().map(|arrival| arrival.key.as_deref().unwrap_or("?")).collect();
    let last = |who: &str| senders.iter().rposition(|sender| *sender == who).unwrap();
    let first_of = |who: &str| senders.iter().position(|sender| *sender == who).unwrap();
    assert!(first_of("a") < last("b") && first_of("b") < last("a"), "the processes did not overlap: {senders:?}");
}

#[tokio::test]
async fn shared_flags_without_a_store_are_refused_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let (code, _, stderr) =
        ratescope(dir.path(), args(&["burst", "http://127.0.0.1:1/x", "--rate", "1/1s", "--shared-key", "team"])).await;
    assert_ne!(code, 0);
    assert!(stderr.contains("--redis"), "{stderr}");
    let (code, _, stderr) = ratescope(
        dir.path(),
        args(&[
            "burst",
            "http://127.0.0.1:1/x",
            "--rate",
            "1/1s",
            "--redis",
            "redis://127.0.0.1:1",
            "--shared-key",
            "a{b}",
        ]),
    )
    .await;
    assert_ne!(code, 0);
    assert!(stderr.contains("braces"), "{stderr}");
}

/// A server that accepts connections and never answers: `--timeout` bounds each attempt, and
/// the failure says no response came (it connected), counted by cause in the JSON.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_server_fails_as_no_response_after_the_timeout() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            open.push(stream);
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let url = format!("http://{address}/stall");
    let (code, stdout, stderr) = ratescope(
        dir.path(),
        args(&["burst", &url, "-n", "3", "--rate", "100/1s", "--retries", "0", "--timeout", "200ms", "--json"]),
    )
    .await;
    held.abort();
    assert_eq!(code, 1, "{stdout}{stderr}");
    let json: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(json["failed"], 3, "{json}");
    assert_eq!(json["errors"], serde_json::json!({ "no response in time": 3 }), "{json}");
    let example = json["error_examples"]["no response in time"].as_str().unwrap();
    assert!(example.contains("no response from 127.0.0.1") && !example.contains("could not reach"), "{example}");
    for field in ["min", "mean", "p95"] {
        assert!(json["service_ms"][field].as_f64().is_some_and(|ms| ms >= 200.0), "{field}: {json}");
    }

    let (code, _, stderr) = ratescope(dir.path(), args(&["burst", &url, "--timeout", "0s"])).await;
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("a timeout of 0"), "{stderr}");
}

/// Issue #32, finding 5: a `--csv` that cannot be written is refused before anything is sent,
/// naming the path given (not a temporary file next to it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unwritable_csv_is_refused_before_any_request() {
    let server = server().await;
    let dir = tempfile::tempdir().unwrap();
    let url = format!("{}items", server.url());
    let missing = dir.path().join("no-such-dir/attempts.csv");
    let under_a_file = dir.path().join("file");
    std::fs::write(&under_a_file, "").unwrap();
    let under_a_file = under_a_file.join("attempts.csv");
    for csv in [&missing, &under_a_file, &dir.path().to_owned()] {
        let csv = csv.to_str().unwrap();
        let (code, stdout, stderr) =
            ratescope(dir.path(), args(&["burst", &url, "-n", "5", "--rate", "50/1s", "--json", "--csv", csv])).await;
        assert_eq!(code, 2, "{csv}: {stderr}");
        assert!(stdout.is_empty(), "{stdout}");
        assert!(stderr.contains("--csv") && stderr.contains(csv), "{csv}: {stderr}");
        assert!(!stderr.contains(".ratescope-"), "a temporary file is named: {stderr}");
        assert!(server.arrivals().is_empty(), "{csv}: requests were sent");
    }
    let (code, _, stderr) = ratescope(dir.path(), args(&["burst", &url, "-n", "1", "--json", "--csv", "-"])).await;
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("standard output"), "{stderr}");
    assert!(server.arrivals().is_empty());
}

/// A `--csv` that fails only when written at the end (a full device) still leaves the summary
/// on stdout, and the exit status says the file was not written.
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_csv_that_fails_at_the_end_keeps_the_summary() {
    let dir = tempfile::tempdir().unwrap();
    let full = dir.path().join("full");
    let made = std::process::Command::new("mknod")
        .arg(&full)
        .args(["c", "1", "7"])
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    if !made {
        let notice = b"NOTICE: mknod is not allowed here (not root); the failed CSV write at the end is not tested\n";
        let _ = std::io::Write::write_all(&mut std::io::stderr(), notice);
        return;
    }
    let server = server().await;
    let url = format!("{}items", server.url());
    let csv = full.to_str().unwrap();
    let (code, stdout, stderr) =
        ratescope(dir.path(), args(&["burst", &url, "-n", "4", "--rate", "50/1s", "--json", "--csv", csv])).await;
    assert_eq!(code, 3, "{stderr}");
    let json: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(json["succeeded"], 4, "{json}");
    assert!(stderr.contains("--csv") && stderr.contains("No space left on device"), "{stderr}");
    assert_eq!(server.arrivals().len(), 4);
    let (code, stdout, _) =
        ratescope(dir.path(), args(&["burst", &url, "-n", "2", "--rate", "50/1s", "--csv", csv])).await;
    assert_eq!(code, 3);
    assert!(stdout.contains("succeeded"), "the human summary too: {stdout}");
}

/// Issue #32, finding 7: more `-H` than a request can carry is a usage error naming the cap,
/// not a panic in the header map.
#[tokio::test]
async fn too_many_headers_are_refused_naming_the_cap() {
    let dir = tempfile::tempdir().unwrap();
    let cap = ratescope::cli::MAX_HEADER_FLAGS;
    for count in [cap + 1, 24_577] {
        let mut items = args(&["burst", "http://127.0.0.1:9/x", "-n", "1"]);
        for i in 0..count {
            items.push("-H".into());
            items.push(format!("x-h{i}: v"));
        }
        let (code, _, stderr) = ratescope(dir.path(), items).await;
        assert_eq!(code, 2, "{count}: {stderr}");
        assert!(stderr.contains(&format!("at most {cap} headers")), "{stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}

/// Issue #32, finding 12: a port that speaks HTTP, not Redis, is said so in one line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_port_that_is_not_redis_is_named_in_one_line() {
    let http = server().await;
    let dir = tempfile::tempdir().unwrap();
    let redis = format!("redis://:pw-s3cret@{}", http.addr());
    let (code, stdout, stderr) = ratescope(
        dir.path(),
        args(&[
            "burst",
            "http://127.0.0.1:9/x",
            "-n",
            "1",
            "--rate",
            "1/1s",
            "--redis",
            &redis,
            "--shared-key",
            "k",
            "--json",
        ]),
    )
    .await;
    assert_ne!(code, 0, "{stdout}{stderr}");
    let everything = format!("{stdout}{stderr}");
    assert!(everything.contains(&format!("the server at {} did not answer as Redis", http.addr())), "{everything}");
    assert!(!everything.contains("Unexpected") && !everything.contains("Parse error"), "{everything}");
    assert!(!everything.contains("s3cret"), "{everything}");
}

/// Issue #32, finding 3: a URL's user-info password is never echoed by burst's messages.
#[tokio::test]
async fn a_password_in_a_burst_url_is_not_echoed() {
    let dir = tempfile::tempdir().unwrap();
    let profile = dir.path().join("p.toml");
    std::fs::write(&profile, "name = \"p\"\n[[hosts]]\nname = \"x\"\nbase_url = \"http://example.invalid\"\n").unwrap();
    let (code, _, stderr) = ratescope(
        dir.path(),
        args(&["burst", "http://alice:PW-s3cret@127.0.0.1:9/x?token=T-s3cret", "--profile", profile.to_str().unwrap()]),
    )
    .await;
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("http://alice:***@127.0.0.1:9/x?token=***"), "{stderr}");
    assert!(!stderr.contains("s3cret"), "{stderr}");
}

/// Issue #32, finding 12: a server's absurd remaining (1e308) goes into the CSV compactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_header_values_reach_the_csv_compactly() {
    let app = axum::Router::new().fallback(|| async {
        ([("x-ratelimit-limit", "1e308"), ("x-ratelimit-remaining", "1e308"), ("x-ratelimit-reset", "30")], "ok")
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("attempts.csv");
    let url = format!("http://{addr}/x");
    let (code, _, stderr) =
        ratescope(dir.path(), args(&["burst", &url, "-n", "1", "--no-limit", "--csv", csv.to_str().unwrap()])).await;
    assert_eq!(code, 0, "{stderr}");
    let rows = std::fs::read_to_string(&csv).unwrap();
    let row = rows.lines().nth(1).unwrap();
    assert!(row.contains(",1e308,"), "{row}");
    assert!(row.len() < 200, "{row}");
}

/// A shared store that is not there when a fail-closed burst starts is an error before any
/// request, not an endless wait; fail-open sends without it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_shared_store_is_an_error_before_any_request() {
    let http = server().await;
    let dir = tempfile::tempdir().unwrap();
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let redis = format!("redis://{free}");
    let url = format!("{}items", http.url());
    let base = ["burst", &url, "-n", "2", "--rate", "5/1s", "--redis", &redis, "--shared-key", "gone", "--json"];
    let (code, stdout, stderr) = ratescope(dir.path(), args(&base)).await;
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(stderr.contains(&format!("the shared budget store at {redis} cannot be reached")), "{stderr}");
    assert!(stderr.contains("--on-redis-failure fail-open"), "{stderr}");
    assert_eq!(http.arrivals().len(), 0, "nothing was sent");
    let mut open = args(&base);
    open.extend(["--on-redis-failure".to_owned(), "fail-open".to_owned()]);
    let (code, stdout, stderr) = ratescope(dir.path(), open).await;
    assert_eq!(code, 0, "{stderr}");
    let summary: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(summary["succeeded"], 2, "{summary}");
}
