//! The proxy's admin listener over loopback, on paused tokio time: `/metrics` counts every
//! request a test sends exactly once (forwarded, cached, shed, failed, refused), agrees with
//! what the upstream saw (answers by class, 429s, retries), speaks Prometheus text or
//! OpenMetrics as asked, and passes `promtool check metrics` where promtool is installed;
//! `/healthz` and `/readyz` answer.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use ratescope::engine::{BudgetSpec, LimitKey, LimiterConfig, Registry};
use ratescope::http::cache::CacheConfig;
use ratescope::http::{Policy, RetryPolicy};
use ratescope::mock::{MockConfig, MockServer, Outcome};
use ratescope::proxy::{ProxyConfig, ProxyServer, Route, Shedding};

/// `/items` refuses a 4th request in any second (429 with Retry-After); `/catalog` is cacheable.
const UPSTREAM: &str = r#"
[[routes]]
prefix = "/items"
status = 429
  [[routes.policies]]
  name = "second"
  kind = "sliding_window"
  limit = 3
  window = "1s"

[[routes]]
prefix = "/catalog"
cache = true
max_age = "30s"
"#;

fn loopback() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

async fn upstream() -> MockServer {
    MockServer::start(MockConfig::from_toml(UPSTREAM).unwrap(), loopback()).await.unwrap()
}

/// The samples of a Prometheus text exposition: `name{labels}` to value.
fn samples(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.trim().is_empty())
        .map(|line| {
            let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("not a sample: {line}"));
            (series.to_owned(), value.parse().unwrap_or_else(|_| panic!("not a number: {line}")))
        })
        .collect()
}

/// The sum of every sample of `name` whose labels contain each of `labels` (`key="v"`).
fn sum(samples: &BTreeMap<String, f64>, name: &str, labels: &[&str]) -> f64 {
    samples
        .iter()
        .filter(|(series, _)| {
            let (metric, rest) = series.split_once('{').unwrap_or((series, ""));
            metric == name && labels.iter().all(|label| rest.contains(label))
        })
        .map(|(_, value)| value)
        .sum()
}

#[tokio::test(start_paused = true)]
async fn every_request_is_counted_once_and_the_counts_agree_with_the_upstream() {
    let api = upstream().await;
    let tight = upstream().await;
    let registry = Registry::new();
    // One request an hour to the second upstream: its second caller is shed at once.
    let hourly = BudgetSpec::token_bucket("hourly", 1, "1/1h".parse().unwrap()).unwrap();
    registry.set(LimitKey::host(&tight.addr().to_string()).unwrap(), LimiterConfig::new().with_budget(hourly)).unwrap();
    let routes = vec![
        Route::new("api", api.url().as_str()).unwrap(),
        Route::new("tight", tight.url().as_str()).unwrap(),
        // Nothing listens on port 9 of loopback: every attempt fails to connect.
        Route::new("dead", "http://127.0.0.1:9").unwrap(),
    ];
    let retry = RetryPolicy { max_attempts: 6, ..RetryPolicy::default() };
    let config = ProxyConfig {
        listen: loopback(),
        admin: Some(loopback()),
        policy: Policy { registry: Arc::new(registry), retry, ..Policy::default() },
        shedding: Shedding { max_queue_wait: Duration::from_secs(30), max_queue_len: 100 },
        cache: Some(CacheConfig::default()),
        ..ProxyConfig::new(routes).without_timers()
    };
    let proxy = ProxyServer::start(config).await.unwrap();
    let admin = proxy.admin_addr().expect("an admin listener");
    ratescope::http::install_tls_provider();
    let caller = reqwest::Client::builder().pool_idle_timeout(None).build().unwrap();
    let get = |path: String| {
        let (caller, url) = (caller.clone(), format!("{}{path}", proxy.url()));
        async move { caller.get(url).send().await.unwrap().status().as_u16() }
    };

    // Eight at once where the upstream takes three a second: 429s, retried until each is served.
    let items: Vec<_> = (0..8).map(|i| tokio::spawn(get(format!("api/items/{i}")))).collect();
    for item in items {
        assert_eq!(item.await.unwrap(), 200);
    }
    assert_eq!(get("api/catalog".into()).await, 200);
    assert_eq!(get("api/catalog".into()).await, 200, "from the cache");
    assert_eq!(get("tight/items/1".into()).await, 200);
    assert_eq!(get("tight/items/2".into()).await, 429, "shed: an hour's wait");
    assert_eq!(get("dead/x".into()).await, 502);
    assert_eq!(get("nowhere".into()).await, 404);
    let sent = 8 + 2 + 2 + 1 + 1;

    let scrape = caller.get(format!("http://{admin}/metrics")).send().await.unwrap();
    assert_eq!(scrape.headers()["content-type"], "text/plain; version=0.0.4; charset=utf-8");
    let text = scrape.text().await.unwrap();
    let found = samples(&text);
    let requests = "ratescope_proxy_requests_total";
    assert_eq!(sum(&found, requests, &[]), f64::from(sent), "every request counted once:\n{text}");
    let api_key = format!("key=\"{}\"", api.addr());
    let tight_key = format!("key=\"{}\"", tight.addr());
    assert_eq!(sum(&found, requests, &[&api_key, "outcome=\"forwarded\""]), 9.0, "{text}");
    assert_eq!(sum(&found, requests, &[&api_key, "outcome=\"cached\""]), 1.0, "{text}");
    assert_eq!(sum(&found, requests, &[&tight_key, "outcome=\"forwarded\""]), 1.0, "{text}");
    assert_eq!(sum(&found, requests, &[&tight_key, "outcome=\"shed\""]), 1.0, "{text}");
    assert_eq!(sum(&found, "ratescope_proxy_shed_total", &[&tight_key, "reason=\"wait_too_long\""]), 1.0);
    assert_eq!(sum(&found, requests, &["key=\"127.0.0.1:9\"", "outcome=\"failed\""]), 1.0, "{text}");
    assert_eq!(sum(&found, requests, &["outcome=\"refused\""]), 1.0, "{text}");

    // What the upstream saw: every answer counted by class, its 429s, and one retry per 429.
    let refused = api.arrivals().iter().filter(|arrival| matches!(arrival.outcome, Outcome::Limited(_))).count();
    assert!(refused > 0, "the burst met the upstream's limit");
    let answers = sum(&found, "ratescope_proxy_upstream_responses_total", &[&api_key]);
    assert_eq!(answers, api.arrivals().len() as f64, "{text}");
    assert_eq!(sum(&found, "ratescope_proxy_upstream_responses_total", &[&api_key, "class=\"4xx\""]), refused as f64);
    assert_eq!(sum(&found, "ratescope_proxy_upstream_throttled_total", &[&api_key]), refused as f64);
    let dead_retries = sum(&found, "ratescope_proxy_retries_total", &["key=\"127.0.0.1:9\""]);
    assert_eq!(sum(&found, "ratescope_proxy_retries_total", &[&api_key]), refused as f64, "{text}");
    assert_eq!(
        sum(&found, "ratescope_proxy_upstream_unanswered_total", &["key=\"127.0.0.1:9\""]),
        dead_retries + 1.0,
        "each attempt at the dead upstream went unanswered"
    );
    // Latency per answered attempt; queue waits per admitted attempt of a limited key.
    assert_eq!(sum(&found, "ratescope_proxy_upstream_latency_seconds_count", &[&api_key]), answers);
    assert_eq!(sum(&found, "ratescope_proxy_queue_wait_seconds_count", &[&tight_key]), 1.0);
    // The live gauges of the limited key: nothing queued or in flight now, its budget spent.
    assert_eq!(sum(&found, "ratescope_proxy_queued", &[&tight_key]), 0.0);
    assert_eq!(sum(&found, "ratescope_proxy_in_flight", &[&tight_key]), 0.0);
    let remaining =
        sum(&found, "ratescope_proxy_budget_remaining", &[&tight_key, "budget=\"hourly\"", "unit=\"requests\""]);
    assert!(remaining < 1.0, "{text}");

    let promtool_here = std::process::Command::new("promtool").arg("--version").output().is_ok();
    assert!(
        promtool_here || std::env::var_os("RATESCOPE_REQUIRE_THIRDPARTY").is_none(),
        "promtool required (RATESCOPE_REQUIRE_THIRDPARTY=1): apt-get install prometheus"
    );
    if let Ok(mut promtool) = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
    {
        use std::io::Write;
        promtool.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
        let output = promtool.wait_with_output().unwrap();
        let said = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
        assert!(output.status.success() && said.trim().is_empty(), "promtool check metrics:\n{said}\n{text}");
    }

    let openmetrics = caller
        .get(format!("http://{admin}/metrics"))
        .header("accept", "application/openmetrics-text;version=1.0.0,text/plain;q=0.5")
        .send()
        .await
        .unwrap();
    assert!(openmetrics.headers()["content-type"].to_str().unwrap().starts_with("application/openmetrics-text"));
    let open_text = openmetrics.text().await.unwrap();
    assert!(open_text.ends_with("# EOF\n"), "{open_text}");
    assert!(open_text.contains("ratescope_proxy_requests_total{"), "{open_text}");

    let health = caller.get(format!("http://{admin}/healthz")).send().await.unwrap();
    assert_eq!((health.status().as_u16(), health.text().await.unwrap()), (200, "ok\n".to_owned()));
    let ready = caller.get(format!("http://{admin}/readyz")).send().await.unwrap();
    assert_eq!(ready.status().as_u16(), 200, "routes loaded, no shared store to wait for");
    // The callers' listener serves none of it.
    assert_eq!(get("metrics".into()).await, 404);
}

#[test]
fn an_admin_address_off_loopback_needs_allow_remote() {
    let route = Route::new("api", "http://127.0.0.1:9").unwrap();
    let config = ProxyConfig { admin: Some(SocketAddr::from(([0, 0, 0, 0], 9100))), ..ProxyConfig::new(vec![route]) };
    let err = config.validate().unwrap_err().to_string();
    assert!(err.contains("0.0.0.0:9100"), "{err}");
    let allowed = ProxyConfig { allow_remote: true, ..config };
    allowed.validate().unwrap();
}

/// A proxy sharing its budget through a store nobody answers for (port 1 of loopback):
/// `fail-closed` makes it unready once the store has failed; `fail-open` keeps it ready.
async fn proxy_with_a_dead_store(policy: ratescope::store::FailPolicy) -> (ProxyServer, MockServer) {
    let upstream = upstream().await;
    let registry = Registry::new();
    let window = BudgetSpec::sliding_window("minute", 10, Duration::from_secs(60)).unwrap();
    registry
        .set(LimitKey::host(&upstream.addr().to_string()).unwrap(), LimiterConfig::new().with_budget(window))
        .unwrap();
    let shared =
        ratescope::store::SharedSettings::new("redis://127.0.0.1:1", "readyz").unwrap().with_policy(policy).unwrap();
    let config = ProxyConfig {
        listen: loopback(),
        admin: Some(loopback()),
        policy: Policy { registry: Arc::new(registry), ..Policy::default() },
        shedding: Shedding { max_queue_wait: Duration::from_millis(500), max_queue_len: 100 },
        shared: Some(shared),
        ..ProxyConfig::new(vec![Route::new("api", upstream.url().as_str()).unwrap()])
    };
    (ProxyServer::start(config).await.unwrap(), upstream)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_says_not_ready_while_the_store_is_away_under_fail_closed_only() {
    use ratescope::store::FailPolicy;
    ratescope::http::install_tls_provider();
    for (policy, ready) in [(FailPolicy::Closed, false), (FailPolicy::Open, true)] {
        let (proxy, _upstream) = proxy_with_a_dead_store(policy).await;
        let admin = proxy.admin_addr().unwrap();
        let readyz = || async move { reqwest::get(format!("http://{admin}/readyz")).await.unwrap() };
        assert_eq!(readyz().await.status(), 200, "{policy:?}: the store has not been asked yet");
        // One request makes the proxy ask the store, which cannot answer.
        let status = reqwest::get(format!("{}api/items/1", proxy.url())).await.unwrap().status().as_u16();
        let answer = readyz().await;
        let (code, text) = (answer.status().as_u16(), answer.text().await.unwrap());
        if ready {
            assert_eq!((status, code), (200, 200), "{policy:?}: let through, and ready: {text}");
            assert!(text.contains("going on by its fail policy"), "{text}");
        } else {
            assert_eq!((status, code), (429, 503), "{policy:?}: shed, and not ready: {text}");
            assert!(text.contains("not ready: the shared store is away"), "{text}");
        }
        let metrics = reqwest::get(format!("http://{admin}/metrics")).await.unwrap().text().await.unwrap();
        assert!(metrics.contains("ratescope_proxy_store_up 0"), "{metrics}");
    }
}
