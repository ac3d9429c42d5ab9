//! Reloading the proxy's routes and limits under load, on paused tokio time over loopback: a
//! burst running through a reload that halves the rate loses no request and is admitted at
//! the new rate from then on; a refused configuration changes nothing; `/metrics` counts both.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use ratescope::engine::{BudgetSpec, LimitKey, LimiterConfig, Registry};
use ratescope::http::Policy;
use ratescope::mock::{MockConfig, MockServer};
use ratescope::proxy::{ProxyConfig, ProxyServer, Route, Shedding};
use tokio::time::Instant;

/// An upstream with no limits of its own.
const UPSTREAM: &str = "[[routes]]\nprefix = \"/items\"\n";

fn loopback() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

/// The proxy's settings: `/api` to `upstream`, one request at a time at `rate`.
fn config(upstream: &MockServer, rate: &str) -> ProxyConfig {
    let registry = Registry::new();
    let bucket = BudgetSpec::token_bucket("rate", 1, rate.parse().unwrap()).unwrap();
    registry
        .set(LimitKey::host(&upstream.addr().to_string()).unwrap(), LimiterConfig::new().with_budget(bucket))
        .unwrap();
    ProxyConfig {
        listen: loopback(),
        admin: Some(loopback()),
        policy: Policy { registry: Arc::new(registry), ..Policy::default() },
        shedding: Shedding { max_queue_wait: Duration::from_secs(3600), max_queue_len: 10_000 },
        ..ProxyConfig::new(vec![Route::new("api", upstream.url().as_str()).unwrap()]).without_timers()
    }
}

#[tokio::test(start_paused = true)]
async fn a_burst_through_a_reload_that_halves_the_rate_loses_nothing_and_slows_down() {
    let upstream = MockServer::start(MockConfig::from_toml(UPSTREAM).unwrap(), loopback()).await.unwrap();
    let epoch = Instant::now();
    let proxy = Arc::new(ProxyServer::start(config(&upstream, "10/1s")).await.unwrap());
    ratescope::http::install_tls_provider();
    let caller = reqwest::Client::builder().pool_idle_timeout(None).build().unwrap();
    let requests: Vec<_> = (0..30)
        .map(|i| {
            let (caller, url) = (caller.clone(), format!("{}api/items/{i}", proxy.url()));
            tokio::spawn(async move { caller.get(url).send().await.unwrap().status().as_u16() })
        })
        .collect();
    while upstream.arrivals().len() < 10 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // A configuration the proxy refuses (no routes): nothing changes.
    let refused = proxy.reload(ProxyConfig { routes: Vec::new(), ..config(&upstream, "1/1s") });
    assert!(refused.is_err());
    let reloaded_at = Instant::now();
    let reloaded = proxy.reload(config(&upstream, "5/1s")).unwrap();
    assert_eq!((reloaded.routes, reloaded.keys), (1, 1));
    assert!(reloaded.kept.is_empty(), "the same listen, admin and shedding settings: {reloaded:?}");
    for request in requests {
        assert_eq!(request.await.unwrap(), 200, "no request was dropped by the reload");
    }
    let arrivals: Vec<_> = upstream.arrivals().iter().map(|arrival| arrival.at).collect();
    assert_eq!(arrivals.len(), 30, "each request sent once");
    let before: Vec<_> = arrivals.windows(2).take(8).map(|pair| pair[1] - pair[0]).collect();
    assert!(before.iter().all(|gap| *gap == Duration::from_millis(100)), "10/s before: {before:?}");
    // From the second admission after the reload on, one every 200 ms.
    let reloaded_after = reloaded_at - epoch;
    let after: Vec<_> =
        arrivals.windows(2).filter(|pair| pair[0] > reloaded_after).skip(1).map(|pair| pair[1] - pair[0]).collect();
    assert!(after.len() >= 15, "{after:?}");
    assert!(after.iter().all(|gap| *gap == Duration::from_millis(200)), "5/s after: {after:?}");

    let admin = proxy.admin_addr().unwrap();
    let text = caller.get(format!("http://{admin}/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(text.contains("ratescope_proxy_reloads_total{result=\"applied\"} 1"), "{text}");
    assert!(text.contains("ratescope_proxy_reloads_total{result=\"refused\"} 1"), "{text}");
    // POST /reload without a reloader: refused, said so, counted.
    let posted = caller.post(format!("http://{admin}/reload")).send().await.unwrap();
    assert_eq!(posted.status().as_u16(), 422);
    assert!(posted.text().await.unwrap().contains("the old configuration stays"));
}

#[tokio::test(start_paused = true)]
async fn post_reload_rereads_through_the_reloader_and_new_routes_serve_new_requests() {
    let upstream = MockServer::start(MockConfig::from_toml(UPSTREAM).unwrap(), loopback()).await.unwrap();
    let proxy = ProxyServer::start(config(&upstream, "10/1s")).await.unwrap();
    let next = {
        let mut next = config(&upstream, "10/1s");
        next.routes.push(Route::new("other", upstream.url().as_str()).unwrap());
        next
    };
    proxy.set_reloader(ratescope::proxy::Reloader::new(move || Ok(next.clone())));
    ratescope::http::install_tls_provider();
    let caller = reqwest::Client::builder().pool_idle_timeout(None).build().unwrap();
    let status = |path: &str| {
        let (caller, url) = (caller.clone(), format!("{}{path}", proxy.url()));
        async move { caller.get(url).send().await.unwrap().status().as_u16() }
    };
    assert_eq!(status("other/items/1").await, 404, "no such route yet");
    let admin = proxy.admin_addr().unwrap();
    let posted = caller.post(format!("http://{admin}/reload")).send().await.unwrap();
    assert_eq!(posted.status().as_u16(), 200);
    assert_eq!(posted.text().await.unwrap(), "reloaded: 2 route(s), 1 limited key(s)\n");
    assert_eq!(status("other/items/1").await, 200, "the new route serves");
    assert_eq!(proxy.routes().len(), 2);
}
