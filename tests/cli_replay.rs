//! `ratescope replay` as a user runs it: each recording format, `--json`'s schema, the host
//! picked and said, `--profile` and `--from-probe`, and errors: 2 for usage, 1 otherwise.

use std::path::{Path, PathBuf};

mod support;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/replay");

fn fixture(name: &str) -> String {
    format!("{FIXTURES}/{name}")
}

/// A server model allowing 5 requests a second on every path, and the config directory.
fn setup() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let server = dir.path().join("api.toml");
    std::fs::write(
        &server,
        "[[routes]]\nprefix = \"/\"\n[[routes.policies]]\nkind = \"token_bucket\"\ncapacity = 5\nrate = \"5/1s\"\n",
    )
    .unwrap();
    (dir, server)
}

fn run(config: &Path, args: &[&str]) -> (i32, String, String) {
    support::cli::run(Some(config), args, "")
}

fn json(stdout: &str) -> serde_json::Value {
    serde_json::from_str(stdout).unwrap_or_else(|err| panic!("{err}: {stdout}"))
}

#[test]
fn a_browser_har_through_a_limiter_meets_no_refusal_and_says_what_was_left_out() {
    let (dir, server) = setup();
    let server = server.to_str().unwrap();
    for name in ["firefox-esr-153.har", "chromium-156.har"] {
        let har = fixture(name);
        let (code, stdout, stderr) = run(dir.path(), &["replay", &har, "--server", server, "--rate", "5/1s", "--json"]);
        assert_eq!(code, 0, "{name}: {stderr}");
        let summary = json(&stdout);
        assert_eq!(summary["host"], "127.0.0.1");
        assert_eq!(summary["format"], "har");
        assert_eq!(summary["refused"], 0, "{summary:#}");
        assert_eq!(summary["served"], summary["requests"]);
        assert!(summary["delayed"].as_u64().unwrap() > 0, "the page's burst of 12 waits: {summary:#}");
        assert!(summary["added_delay_ms"]["max"].as_f64().unwrap() > 1000.0, "{summary:#}");
        assert_eq!(summary["skipped"]["other_hosts"], 2);
        assert!(
            stderr.contains("replaying 127.0.0.1") && stderr.contains("not replayed: localhost (2)"),
            "{name}: {stderr}"
        );
    }
}

#[test]
fn the_json_has_bursts_schema_and_the_replays_own_keys() {
    let (dir, server) = setup();
    let har = fixture("firefox-esr-153.har");
    let (code, stdout, stderr) = run(
        dir.path(),
        &["replay", &har, "--server", server.to_str().unwrap(), "--no-limit", "--retries", "0", "--json"],
    );
    assert_eq!(code, 1, "refusals are failures, as for sim: {stderr}");
    let summary = json(&stdout);
    for key in [
        "requests",
        "sent",
        "succeeded",
        "failed",
        "cancelled",
        "status_counts",
        "retries",
        "elapsed_s",
        "achieved_rps",
        "service_ms",
        "queue_wait_ms",
        "total_ms",
        "service_histogram",
        "errors",
        "limiter",
        "host",
        "format",
        "recorded_span_s",
        "served",
        "refused",
        "failed_other",
        "delayed",
        "added_delay_ms",
        "skipped",
    ] {
        assert!(summary.get(key).is_some(), "no {key}: {summary:#}");
    }
    for key in ["min", "mean", "p50", "p90", "p95", "p99", "max"] {
        assert!(summary["added_delay_ms"][key].is_number(), "added_delay_ms.{key}: {summary:#}");
    }
    // Raw, the page's burst of 12 meets the server's 5: the model refuses what the recording met.
    assert!(summary["refused"].as_u64().unwrap() >= 7, "{summary:#}");
    assert_eq!(summary["status_counts"]["429"], summary["refused"]);
    assert_eq!(summary["delayed"], 0);
    assert_eq!(summary["limiter"], "none");
}

#[test]
fn json_lines_and_an_access_log_replay_as_text() {
    let (dir, server) = setup();
    let server = server.to_str().unwrap();
    let lines = fixture("firefox-esr-153.jsonl");
    let (code, stdout, stderr) = run(dir.path(), &["replay", &lines, "--server", server, "--rate", "5/1s"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.starts_with("replayed:      127.0.0.1, 42 requests recorded over 4.0"), "{stdout}");
    assert!(stdout.contains("(JSON lines)") && stdout.contains("limiter:       bucket 5 @ 5/1s"), "{stdout}");
    assert!(stdout.contains("\nmet:           42 served, 0 refused"), "{stdout}");
    assert!(stdout.contains("\nadded delay "), "{stdout}");

    let log = fixture("nginx-combined.log");
    let (code, stdout, stderr) =
        run(dir.path(), &["replay", &log, "--server", server, "-c", "2", "--base-url", "https://api.example.com"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.starts_with("replayed:      api.example.com, 42 requests recorded over 4.000s (access log)"),
        "{stdout}"
    );
    assert!(!stderr.contains("joined to"), "--base-url was given: {stderr}");
    // Without --base-url the paths go to the demo API's address, and that is said.
    let (code, stdout, stderr) = run(dir.path(), &["replay", &log, "--server", server, "--rate", "10/1s", "--json"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(json(&stdout)["host"], "127.0.0.1");
    assert!(stderr.contains("42 paths joined to http://127.0.0.1:8787 (give --base-url"), "{stderr}");
    // From standard input, the format told by the content.
    let text = std::fs::read_to_string(&log).unwrap();
    let (code, stdout, stderr) =
        support::cli::run(Some(dir.path()), ["replay", "-", "--server", server, "--no-limit", "--json"], &text);
    assert_eq!(code, 1, "the raw log meets the model's 429s: {stderr}");
    assert_eq!(json(&stdout)["format"], "access-log");
}

#[test]
fn a_host_is_picked_by_host_and_an_unknown_one_lists_the_hosts() {
    let (dir, server) = setup();
    let server = server.to_str().unwrap();
    let har = fixture("chromium-156.har");
    let (code, stdout, stderr) =
        run(dir.path(), &["replay", &har, "--server", server, "--no-limit", "--host", "localhost", "--json"]);
    assert_eq!(code, 0, "{stderr}");
    let summary = json(&stdout);
    assert_eq!((summary["host"].as_str(), summary["requests"].as_u64()), (Some("localhost"), Some(2)));
    assert_eq!(summary["skipped"]["other_hosts"], 41);
    assert!(stderr.contains("replaying localhost (2 requests), as asked"), "{stderr}");
    let (code, _, stderr) =
        run(dir.path(), &["replay", &har, "--server", server, "--no-limit", "--host", "cdn.example"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("no request in the recording goes to cdn.example; its hosts: 127.0.0.1 (41), localhost (2)"),
        "{stderr}"
    );
}

#[test]
fn a_profile_and_a_probe_report_give_the_limiter_and_the_model() {
    let (dir, _) = setup();
    let profile = dir.path().join("local.toml");
    std::fs::write(
        &profile,
        "name = \"local\"\n\n[[hosts]]\nname = \"site\"\nbase_url = \"http://127.0.0.1:8000\"\n\
         budgets = [{ name = \"rate\", kind = \"token_bucket\", capacity = 4, rate = \"4/1s\" }]\n",
    )
    .unwrap();
    let probe = dir.path().join("probe.json");
    std::fs::write(
        &probe,
        r#"{"found": {"budgets": [{"kind": "token_bucket", "capacity": 5, "per_s": 5.0}], "concurrency": null}}"#,
    )
    .unwrap();
    let har = fixture("firefox-esr-153.har");
    let (profile, probe) = (profile.to_str().unwrap(), probe.to_str().unwrap());
    let (code, stdout, stderr) =
        run(dir.path(), &["replay", &har, "--from-probe", probe, "--profile", profile, "--latency", "30ms", "--json"]);
    assert_eq!(code, 0, "{stderr}");
    let summary = json(&stdout);
    assert_eq!(summary["limiter"], "bucket 4 @ 4/1s", "the profile's host's limits: {summary:#}");
    assert_eq!(summary["refused"], 0);
    assert!((summary["service_ms"]["min"].as_f64().unwrap() - 30.0).abs() < 1.0, "--latency: {summary:#}");
    // The same recording's other host is not the profile's: a usage error naming its hosts.
    let (code, _, stderr) =
        run(dir.path(), &["replay", &har, "--from-probe", probe, "--profile", profile, "--host", "localhost"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("profile 'local' has no host for") && stderr.contains("give --base-url"), "{stderr}");
}

#[test]
fn usage_errors_exit_2_and_other_errors_exit_1_each_saying_what_to_do() {
    let (dir, server) = setup();
    let server = server.to_str().unwrap();
    let har = fixture("firefox-esr-153.har");
    let garbage = dir.path().join("notes.txt");
    std::fs::write(&garbage, "GET /items HTTP/1.1\nHost: example.com\n").unwrap();
    let bad_lines = dir.path().join("bad.jsonl");
    std::fs::write(&bad_lines, "{\"t\": \"soon\", \"url\": \"http://h/\"}\n{\"url\": \"http://h/\"}\n").unwrap();
    let garbage = garbage.to_str().unwrap();
    let bad_lines = bad_lines.to_str().unwrap();
    for (args, code, says) in [
        (vec!["replay", &har, "--server", server], 2, "--no-limit"),
        (vec!["replay", &har, "--rate", "5/1s"], 2, "--server"),
        (vec!["replay", &har, "--server", server, "--no-limit", "--rate", "5/1s"], 2, "cannot be used with"),
        (
            vec!["replay", &har, "--server", server, "--no-limit", "--format", "pcap"],
            2,
            "'pcap' is not a format: har, jsonl, access-log",
        ),
        (vec!["replay", &har, "--server", server, "--window", "100/1m:tokens"], 2, "replay spends only requests"),
        (vec!["replay", &har, "--server", server, "--no-limit", "--base-url", "ftp://x/"], 2, "--base-url"),
        (vec!["replay", garbage, "--server", server, "--no-limit"], 1, "its first line: GET /items HTTP/1.1"),
        (vec!["replay", "/dev/null", "--server", server, "--no-limit"], 1, "its first line: none, the file is empty"),
        (
            vec!["replay", bad_lines, "--server", server, "--no-limit"],
            1,
            "line 1: invalid type: string \"soon\", expected f64",
        ),
        (vec!["replay", &har, "--server", server, "--no-limit", "--format", "jsonl"], 1, "line 1: not a JSON object"),
        (
            vec!["replay", &har, "--server", server, "--no-limit", "--format", "jsonl"],
            1,
            "line 2: invalid type: string \"log\", expected an object {\"t\": SECONDS",
        ),
        (vec!["replay", "/nonexistent/x.har", "--server", server, "--no-limit"], 1, "cannot read /nonexistent/x.har"),
        (vec!["replay", &har, "--server", "/nonexistent/api.toml", "--no-limit"], 1, "/nonexistent/api.toml"),
        (vec!["replay", &har, "--from-probe", garbage, "--no-limit"], 1, "is not `ratescope probe --json` output"),
    ] {
        let (actual, stdout, stderr) = run(dir.path(), &args);
        assert_eq!(actual, code, "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        assert!(stdout.is_empty(), "{args:?}: nothing on stdout: {stdout}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}
