//! `ratescope burst --profile demo --endpoint chat|products` against the demo API on loopback
//! (real time, small bursts): the demo profile's cost rules reserve tokens and points, the
//! answers settle them, and no request is refused.

mod support;

use support::cli::ratescope;

use ratescope::mock::{MockConfig, MockServer, QueryCost, Usage};
use ratescope::profile::DEMO_TOML;

/// The demo API on a free port, and a config directory whose `demo` profile points at it.
async fn demo() -> (MockServer, tempfile::TempDir) {
    let server = MockServer::start(MockConfig::demo().unwrap(), "127.0.0.1:0".parse().unwrap()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let profiles = dir.path().join("profiles");
    std::fs::create_dir_all(&profiles).unwrap();
    let profile = DEMO_TOML.replace("127.0.0.1:8787", &format!("127.0.0.1:{}", server.addr().port()));
    std::fs::write(profiles.join("demo.toml"), profile).unwrap();
    (server, dir)
}

/// The demo profile's body of endpoint `name`.
fn body_of(name: &str) -> Vec<u8> {
    let profile = ratescope::profile::Profile::demo().unwrap();
    profile.hosts[0].endpoint(name).unwrap().body.unwrap().to_vec()
}

async fn burst(dir: &tempfile::TempDir, endpoint: &str, count: &str) -> serde_json::Value {
    let args = ["burst", "--profile", "demo", "--endpoint", endpoint, "-n", count, "--json"];
    let (code, stdout, stderr) = ratescope(dir.path(), &args).await;
    assert_eq!(code, 0, "{stderr}");
    let summary: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(summary["status_counts"].get("429"), None, "no request refused: {summary:#}");
    assert_eq!(summary["retries"], 0, "{summary:#}");
    summary
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_requests_reserve_their_ceiling_and_settle_to_the_usage_without_a_429() {
    let (server, dir) = demo().await;
    let summary = burst(&dir, "chat", "12").await;
    assert_eq!(summary["succeeded"], 12, "{summary:#}");
    let usage = Usage::of(&body_of("chat"), 0).unwrap();
    let tokens = &summary["units"]["tokens"];
    assert_eq!(tokens["reserved"], 12 * usage.ceiling(), "{summary:#}");
    assert_eq!(tokens["settled"], 12 * usage.total_tokens());
    assert_eq!(tokens["refunded"], 12 * (usage.ceiling() - usage.total_tokens()));
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graphql_queries_beyond_the_window_run_without_a_429_as_refunds_come_back() {
    let (server, dir) = demo().await;
    // 30 queries reserve 30 × 54 = 1620 points of a window of 1000 per 22 s; settled at 29 each
    // they spend 870, which fits at once as refunds come back (reserve-only, the last 11 would
    // wait 22 s for the window).
    let summary = burst(&dir, "products", "30").await;
    assert_eq!(summary["succeeded"], 30, "{summary:#}");
    let cost = QueryCost::of(&body_of("products")).unwrap();
    let points = &summary["units"]["points"];
    assert_eq!(points["reserved"], 30 * cost.requested, "{summary:#}");
    assert_eq!(points["settled"], 30 * cost.actual);
    assert_eq!(points["refunded"], 30 * (cost.requested - cost.actual));
    server.shutdown().await.unwrap();
}
