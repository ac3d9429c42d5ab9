//! `burst --cost`, `--window N/D:UNIT` and `proxy --window` as a user types them: rules and
//! units that could never work are refused before anything is sent (exit 2, saying why), and an
//! answer that lies about its usage is capped, not believed, in the summary.

mod redis_support;
mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::extract::{Path, State};
use axum::routing::post;
use support::cli::ratescope;

/// A loopback API whose `/chat/N` answers say `N` tokens were used; counts the requests it got.
async fn lying_server() -> (String, Arc<AtomicUsize>) {
    let requests = Arc::new(AtomicUsize::new(0));
    let app = Router::new()
        .route(
            "/chat/{tokens}",
            post(|State(count): State<Arc<AtomicUsize>>, Path(tokens): Path<String>| async move {
                count.fetch_add(1, Ordering::SeqCst);
                format!(r#"{{"usage": {{"total_tokens": {tokens}}}}}"#)
            }),
        )
        .with_state(Arc::clone(&requests));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}"), requests)
}

/// Runs `burst` with `args` against the lying server; returns its exit code, stderr and how
/// many requests reached the server.
async fn burst(args: &[&str]) -> (i32, String, usize) {
    let (base, requests) = lying_server().await;
    let dir = tempfile::tempdir().unwrap();
    let url = format!("{base}/chat/5");
    let mut all = vec!["burst", url.as_str(), "-d", r#"{"q": 1}"#, "-n", "2"];
    all.extend_from_slice(args);
    let (code, _, stderr) = ratescope(dir.path(), &all).await;
    (code, stderr, requests.load(Ordering::SeqCst))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_cost_rules_for_one_unit_are_refused_before_sending() {
    let (code, stderr, sent) = burst(&["--cost", "tokens=5", "--cost", "Tokens=6"]).await;
    assert_eq!((code, sent), (2, 0), "{stderr}");
    assert!(stderr.contains("two rules for tokens") && stderr.contains("tokens=500+body/4"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_in_a_unit_nothing_spends_is_refused_with_the_likely_name() {
    let (code, stderr, sent) = burst(&["--window", "10/1h:token", "--cost", "tokens=5"]).await;
    assert_eq!((code, sent), (2, 0), "{stderr}");
    assert!(stderr.contains("counts token") && stderr.contains("did you mean tokens?"), "{stderr}");

    let (code, stderr, sent) = burst(&["--window", "10/1h:tokens", "--adaptive"]).await;
    assert_eq!((code, sent), (2, 0), "{stderr}");
    assert!(stderr.contains("no request of the burst spends tokens"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn units_are_identifiers() {
    for args in [
        ["--window", "10/1h:tok ens", "--cost", "tokens=5"],
        ["--window", "10/1h:../x", "--cost", "tokens=5"],
        ["--window", "10/1h:", "--cost", "tokens=5"],
        ["--window", "10/1h:tokens", "--cost", "🪙=5"],
        ["--window", "10/1h:tokens", "--cost", "../x=5"],
    ] {
        let (code, stderr, sent) = burst(&args).await;
        assert_eq!((code, sent), (2, 0), "{args:?}: {stderr}");
        assert!(stderr.contains("unit"), "{args:?}: {stderr}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_estimate_above_a_budgets_capacity_is_refused_before_sending() {
    let (code, stderr, sent) = burst(&["--window", "10/1h:tokens", "--cost", "tokens=50"]).await;
    assert_eq!((code, sent), (2, 0), "{stderr}");
    assert!(stderr.contains("estimated at 50 in budget 'window', which holds at most 10"), "{stderr}");
}

/// A burst of one request estimated at 10 tokens under a window of 1000 tokens an hour (plus
/// `extra` flags), whose answer says 2^64 - 1 tokens: the summary's tokens.
async fn lie_once(extra: &[&str]) -> serde_json::Value {
    let (base, requests) = lying_server().await;
    let dir = tempfile::tempdir().unwrap();
    let url = format!("{base}/chat/18446744073709551615");
    let args = [
        "burst",
        url.as_str(),
        "-d",
        r#"{"q": 1}"#,
        "-n",
        "1",
        "--window",
        "1000/1h:tokens",
        "--cost",
        "tokens=10->field:usage.total_tokens",
        "--json",
    ];
    let (code, stdout, stderr) = ratescope(dir.path(), args.iter().chain(extra)).await;
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(requests.load(Ordering::SeqCst), 1);
    let summary: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    summary["units"]["tokens"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lying_usage_is_capped_at_the_budget_and_counted_in_the_summary() {
    check_capped(&lie_once(&[]).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lying_usage_is_capped_at_a_budget_shared_in_redis_too() {
    let Some(redis) = redis_support::PrivateRedis::start().await else { return };
    let url = redis.url();
    check_capped(&lie_once(&["--redis", &url, "--shared-key", "lying"]).await);
}

/// Counted as the whole budget (1000 tokens), not 2^64 - 1, and said so.
fn check_capped(tokens: &serde_json::Value) {
    assert_eq!(tokens["reserved"], 10, "{tokens:#}");
    assert_eq!(tokens["settled"], 1000, "{tokens:#}");
    assert_eq!(tokens["charged_more"], 990, "{tokens:#}");
    assert_eq!(tokens["capped"], 1, "{tokens:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_refuses_a_budget_in_a_unit_it_never_spends() {
    let dir = tempfile::tempdir().unwrap();
    // Not loopback: without the check the proxy would stop at that instead of listening forever.
    let args = ["proxy", "--listen", "192.0.2.1:9", "--route", "a=http://127.0.0.1:9", "--window", "2/1h:tokens"];
    let (code, _, stderr) = ratescope(dir.path(), &args).await;
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("counts tokens, but the proxy spends only requests"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_estimate_above_a_profiles_budget_is_refused_before_sending() {
    let (base, requests) = lying_server().await;
    let dir = tempfile::tempdir().unwrap();
    let profile = dir.path().join("p.toml");
    let budget = r#"{ name = "tph", kind = "sliding_window", limit = 10, window = "1h", unit = "tokens" }"#;
    std::fs::write(
        &profile,
        format!("name = \"p\"\n\n[[hosts]]\nname = \"api\"\nbase_url = \"{base}\"\nbudgets = [{budget}]\n"),
    )
    .unwrap();
    let url = format!("{base}/chat/5");
    let args = ["burst", &url, "-d", "{}", "-n", "2", "--profile", profile.to_str().unwrap(), "--cost", "tokens=50"];
    let (code, _, stderr) = ratescope(dir.path(), &args).await;
    assert_eq!((code, requests.load(Ordering::SeqCst)), (2, 0), "{stderr}");
    assert!(stderr.contains("estimated at 50 in budget 'tph' of profile 'p', which holds at most 10"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pace_refuses_a_budget_in_a_unit_it_never_spends() {
    let dir = tempfile::tempdir().unwrap();
    let (code, stdout, stderr) = ratescope(dir.path(), ["pace", "-n", "3", "--window", "2/1h:tokens"]).await;
    assert_eq!(code, 2, "{stdout}{stderr}");
    assert!(stderr.contains("counts tokens, but pace spends only requests"), "{stderr}");
}
