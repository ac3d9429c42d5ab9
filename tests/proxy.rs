//! The proxy over loopback with the demo API as its upstream, on paused tokio time: pacing
//! without upstream 429s, secret injection, load shedding, retries, the cache, streamed
//! bodies, 502/504, the graceful drain, and callers that misbehave on the wire (malformed
//! chunked bodies, request heads that never finish).

mod support;

use std::io::Write;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::routing::post;
use parking_lot::Mutex;
use ratescope::engine::{BudgetSpec, LimitKey, LimiterConfig, Registry};
use ratescope::http::{EventKind, EventSink, Policy, RetryPolicy};
use ratescope::mock::{MockConfig, MockServer, Outcome};
use ratescope::proxy::{ProxyConfig, ProxyServer, Route, Shedding};
use ratescope::telemetry::RetryRates;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// The upstream: `/items` refuses a 6th request in any second; `/search` counts per API key;
/// `/slow` answers after 1 s; `/catalog` is cacheable.
const UPSTREAM: &str = r#"
[server]
api_key_header = "x-api-key"

[[routes]]
prefix = "/items"
status = 429
  [[routes.policies]]
  name = "second"
  kind = "sliding_window"
  limit = 5
  window = "1s"

[[routes]]
prefix = "/search"
count_by = "key"

[[routes]]
prefix = "/slow"
latency = { fixed = "1s" }

[[routes]]
prefix = "/catalog"
cache = true
max_age = "30s"
"#;

const SECRET: &str = "sk-live-0123456789abcdef";

async fn upstream() -> MockServer {
    MockServer::start(MockConfig::from_toml(UPSTREAM).unwrap(), SocketAddr::from(([127, 0, 0, 1], 0))).await.unwrap()
}

fn loopback() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

/// A proxy with the route `/api` to `upstream`, limited by `limits` on the upstream's key.
fn config(upstream: &MockServer, limits: Option<LimiterConfig>) -> ProxyConfig {
    let route = Route::new("api", upstream.url().as_str()).unwrap();
    let registry = Registry::new();
    if let Some(limits) = limits {
        registry.set(LimitKey::host(&upstream.addr().to_string()).unwrap(), limits).unwrap();
    }
    ProxyConfig {
        listen: loopback(),
        policy: Policy { registry: Arc::new(registry), ..Policy::default() },
        shedding: Shedding { max_queue_wait: Duration::from_secs(3600), max_queue_len: 10_000 },
        ..ProxyConfig::new(vec![route]).without_timers()
    }
}

fn window(limit: u64, seconds: u64) -> LimiterConfig {
    LimiterConfig::new().with_budget(BudgetSpec::sliding_window("second", limit, Duration::from_secs(seconds)).unwrap())
}

fn bucket(capacity: u64, rate: &str) -> LimiterConfig {
    LimiterConfig::new().with_budget(BudgetSpec::token_bucket("rate", capacity, rate.parse().unwrap()).unwrap())
}

/// A caller with no timers of its own (paused time would fire them mid-read).
fn caller() -> reqwest::Client {
    ratescope::http::install_tls_provider();
    reqwest::Client::builder().pool_idle_timeout(None).build().unwrap()
}

fn limited(server: &MockServer) -> usize {
    server.arrivals().iter().filter(|arrival| matches!(arrival.outcome, Outcome::Limited(_))).count()
}

#[tokio::test(start_paused = true)]
async fn two_hundred_concurrent_callers_are_paced_and_the_upstream_never_says_429() {
    let server = upstream().await;
    let proxy = ProxyServer::start(config(&server, Some(window(5, 1)))).await.unwrap();
    let client = caller();
    let mut callers = tokio::task::JoinSet::new();
    for i in 0..200 {
        let url = format!("{}api/items/{i}", proxy.url());
        let client = client.clone();
        callers.spawn(async move {
            let response = client.get(url).send().await.unwrap();
            (response.status().as_u16(), response.text().await.unwrap())
        });
    }
    let mut statuses = Vec::new();
    while let Some(result) = callers.join_next().await {
        statuses.push(result.unwrap().0);
    }
    assert_eq!(statuses.len(), 200, "every caller got an answer");
    assert!(statuses.iter().all(|status| *status == 200), "every answer is a 200: {statuses:?}");
    assert_eq!(limited(&server), 0, "the upstream refused nothing");
    let arrivals: Vec<Duration> = server.arrivals().iter().map(|arrival| arrival.at).collect();
    assert_eq!(arrivals.len(), 200);
    for (i, at) in arrivals.iter().enumerate().skip(5) {
        assert!(*at >= arrivals[i - 5] + Duration::from_secs(1), "a 6th request within 1 s at #{i}");
    }
    // Paced, not throttled: the 200th is sent as soon as the window allows (39 s after the first).
    assert_eq!(arrivals[199] - arrivals[0], Duration::from_secs(39));
}

/// A `tracing` writer collecting every log line of the test.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn the_secret_reaches_the_upstream_replaces_the_callers_and_is_never_logged() {
    let logs = Captured::default();
    let writer = logs.clone();
    // Everything the proxy process logs (its own lines, hyper, reqwest, axum) at every level;
    // the demo API stands in for the provider's server, whose logs are not the proxy's (it
    // logs the key it was sent, as a provider's access log would).
    let subscriber = tracing_subscriber::fmt()
        .with_env_filter("trace,ratescope::mock=off")
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let _logging = tracing::subscriber::set_default(subscriber);

    let server = upstream().await;
    let (events, mut receiver) = EventSink::channel(1024);
    let mut config = config(&server, Some(bucket(5, "5/1s")));
    config.policy.events = events;
    config.routes[0] =
        config.routes[0].clone().with_secret("x-api-key".parse().unwrap(), SECRET.parse().unwrap()).unwrap();
    assert!(!format!("{config:?}").contains(SECRET), "Debug of the config hides the value");
    let proxy = ProxyServer::start(config).await.unwrap();
    let client = caller();
    let url = format!("{}api/search?q=rust", proxy.url());
    let plain = client.get(&url).send().await.unwrap();
    let guessed = client.get(&url).header("x-api-key", "caller-guess").send().await.unwrap();
    assert_eq!((plain.status().as_u16(), guessed.status().as_u16()), (200, 200));
    let body = guessed.text().await.unwrap();
    assert!(!body.contains("caller-guess"));

    let keys: Vec<Option<String>> = server.arrivals().into_iter().map(|arrival| arrival.key).collect();
    assert_eq!(keys, [Some(SECRET.to_owned()), Some(SECRET.to_owned())], "the upstream got the key, only the key");
    let mut seen = 0;
    while let Ok(event) = receiver.try_recv() {
        assert!(!format!("{event:?}").contains(SECRET), "an event shows the key: {event:?}");
        seen += 1;
    }
    assert!(seen >= 8, "events were emitted ({seen})");
    drop(_logging);
    let logs = String::from_utf8(logs.0.lock().clone()).unwrap();
    let forwarded = logs.lines().filter(|line| line.contains("forwarded")).collect::<Vec<_>>();
    assert_eq!(forwarded.len(), 2, "the proxy logged each request once:\n{logs}");
    for line in forwarded {
        assert!(line.contains("path=\"/api/search\"") && line.contains("status=200"), "{line}");
        assert!(!line.contains("q=rust"), "no query in a log line: {line}");
    }
    assert!(!logs.contains(SECRET), "a log line shows the key:\n{logs}");
}

/// The upstream, a proxy in front of it with `limits` and `shedding`, a caller, and the URL
/// of `/items` through the proxy.
async fn shedding_proxy(
    limits: LimiterConfig,
    shedding: Shedding,
) -> (MockServer, ProxyServer, reqwest::Client, String) {
    let server = upstream().await;
    let config = ProxyConfig { shedding, ..config(&server, Some(limits)) };
    let proxy = ProxyServer::start(config).await.unwrap();
    let url = format!("{}api/items", proxy.url());
    (server, proxy, caller(), url)
}

#[tokio::test(start_paused = true)]
async fn a_full_queue_is_shed_with_429_retry_after_and_draft_headers() {
    let shedding = Shedding { max_queue_wait: Duration::from_secs(3600), max_queue_len: 2 };
    let (server, proxy, client, url) = shedding_proxy(bucket(1, "1/1s"), shedding).await;
    assert_eq!(client.get(&url).send().await.unwrap().status(), 200, "the bucket's one token");
    let mut queued = tokio::task::JoinSet::new();
    for _ in 0..2 {
        let (client, url) = (client.clone(), url.clone());
        queued.spawn(async move { client.get(url).send().await.unwrap().status().as_u16() });
    }
    while proxy.in_flight() < 2 {
        tokio::task::yield_now().await;
    }
    let shed = client.get(&url).send().await.unwrap();
    assert_eq!(shed.status(), 429);
    // Two wait ahead at 1/s with an empty bucket: this one would be let in 3 s from now.
    assert_eq!(shed.headers()["retry-after"], "3");
    assert_eq!(shed.headers()["ratelimit-policy"], "\"rate\";q=1;w=1");
    assert_eq!(shed.headers()["ratelimit"], "\"rate\";r=0;t=1");
    assert!(shed.text().await.unwrap().contains("2 requests already wait"));
    let mut statuses: Vec<u16> = queued.join_all().await;
    statuses.sort_unstable();
    assert_eq!(statuses, [200, 200], "the queued ones were served");
    assert_eq!(server.arrivals().len(), 3, "the shed request never reached the upstream");
}

#[tokio::test(start_paused = true)]
async fn a_wait_longer_than_the_maximum_is_shed_at_once_with_an_honest_retry_after() {
    let shedding = Shedding { max_queue_wait: Duration::from_secs(5), max_queue_len: 100 };
    let (_server, _proxy, client, url) = shedding_proxy(bucket(1, "1/10s"), shedding).await;
    assert_eq!(client.get(&url).send().await.unwrap().status(), 200);
    let started = tokio::time::Instant::now();
    let shed = client.get(&url).send().await.unwrap();
    assert_eq!(shed.status(), 429);
    assert_eq!(started.elapsed(), Duration::ZERO, "refused without waiting");
    assert_eq!(shed.headers()["retry-after"], "10");
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(client.get(&url).send().await.unwrap().status(), 200, "after Retry-After it is let in");
}

#[tokio::test(start_paused = true)]
async fn a_429_pauses_the_key_and_is_retried_after_retry_after() {
    let server = support::TestServer::start(10, Duration::from_secs(1), 1).await;
    let route = Route::new("t", &format!("http://{}", server.addr)).unwrap();
    let registry = Registry::new();
    registry.set(LimitKey::host(&server.key()).unwrap(), bucket(10, "10/1s")).unwrap();
    let config = ProxyConfig {
        listen: loopback(),
        policy: Policy {
            registry: Arc::new(registry),
            retry: RetryPolicy { max_attempts: 3, ..RetryPolicy::default() },
            ..Policy::default()
        },
        ..ProxyConfig::new(vec![route]).without_timers()
    };
    let proxy = ProxyServer::start(config).await.unwrap();
    let response = caller().get(format!("{}t/throttle-once", proxy.url())).send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.text().await.unwrap(), "fine");
    let times: Vec<Duration> = server.arrivals().iter().map(|arrival| arrival.at).collect();
    assert_eq!(times.len(), 2);
    assert_eq!(times[1] - times[0], Duration::from_secs(2), "Retry-After: 2 was honoured exactly");
}

#[tokio::test(start_paused = true)]
async fn the_cache_answers_repeats_without_the_upstream() {
    let server = upstream().await;
    let mut config = config(&server, None);
    config.cache = Some(Default::default());
    let proxy = ProxyServer::start(config).await.unwrap();
    let client = caller();
    let url = format!("{}api/catalog", proxy.url());
    let first = client.get(&url).send().await.unwrap().text().await.unwrap();
    let second = client.get(&url).send().await.unwrap().text().await.unwrap();
    assert_eq!(first, second);
    assert_eq!(server.arrivals().len(), 1, "the repeat came from the cache");
    assert_eq!(proxy.cache_stats().hits, 1);
}

#[tokio::test(start_paused = true)]
async fn large_bodies_stream_both_ways_and_are_sent_once() {
    let calls = Arc::new(Mutex::new(0usize));
    let counter = Arc::clone(&calls);
    let echo = Router::new().route(
        "/echo",
        post(move |body: Body| {
            *counter.lock() += 1;
            async move { Body::from_stream(body.into_data_stream()) }
        }),
    );
    let listener = tokio::net::TcpListener::bind(loopback()).await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, echo).await });
    let route = Route::new("e", &format!("http://{addr}")).unwrap();
    let config =
        ProxyConfig { listen: loopback(), replay_limit: 1024, ..ProxyConfig::new(vec![route]).without_timers() };
    let proxy = ProxyServer::start(config).await.unwrap();
    let payload: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> = payload.chunks(10_000).map(|c| Ok(c.to_vec())).collect();
    let response = caller()
        .post(format!("{}e/echo", proxy.url()))
        .body(reqwest::Body::wrap_stream(futures_util::stream::iter(chunks)))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.bytes().await.unwrap().as_ref(), payload.as_slice());
    assert_eq!(*calls.lock(), 1);
}

#[tokio::test(start_paused = true)]
async fn unreachable_upstreams_get_502_with_the_reason_and_slow_ones_504() {
    let closed = std::net::TcpListener::bind(loopback()).unwrap().local_addr().unwrap();
    let server = upstream().await;
    let routes = vec![
        Route::new("gone", &format!("http://{closed}")).unwrap(),
        Route::new("api", server.url().as_str()).unwrap(),
    ];
    let config = ProxyConfig {
        listen: loopback(),
        upstream_timeout: Some(Duration::from_millis(100)),
        ..ProxyConfig::new(routes).without_timers()
    };
    let config = ProxyConfig { upstream_timeout: Some(Duration::from_millis(100)), ..config };
    let proxy = ProxyServer::start(config).await.unwrap();
    let client = caller();
    let gone = client.get(format!("{}gone/x", proxy.url())).send().await.unwrap();
    assert_eq!(gone.status(), 502);
    let reason = gone.text().await.unwrap();
    assert!(reason.contains("could not reach 127.0.0.1") && reason.to_lowercase().contains("refused"), "{reason}");
    let slow = client.get(format!("{}api/slow", proxy.url())).send().await.unwrap();
    assert_eq!(slow.status(), 504);
    assert!(slow.text().await.unwrap().contains("did not answer in time"));
    let unknown = client.get(format!("{}nowhere", proxy.url())).send().await.unwrap();
    assert_eq!(unknown.status(), 404);
    assert!(unknown.text().await.unwrap().contains("routes: /gone, /api"));
}

#[tokio::test(start_paused = true)]
async fn shutdown_stops_accepting_and_lets_requests_in_flight_finish() {
    let server = upstream().await;
    let proxy = ProxyServer::start(config(&server, None)).await.unwrap();
    let url = format!("{}api/slow", proxy.url());
    let in_flight = tokio::spawn(caller().get(url.clone()).send());
    while server.arrivals().is_empty() {
        tokio::task::yield_now().await;
    }
    let drained = proxy.shutdown().await.unwrap();
    assert_eq!((drained.in_flight_at_start, drained.cut_off), (1, 0));
    let response = in_flight.await.unwrap().unwrap();
    assert_eq!(response.status(), 200, "the request in flight got its answer");
    assert!(caller().get(url).send().await.is_err(), "no new connections after shutdown");
}

#[tokio::test(start_paused = true)]
async fn the_drain_deadline_cuts_off_what_is_still_running() {
    let server = upstream().await;
    let config = ProxyConfig { drain_deadline: Duration::from_millis(200), ..config(&server, None) };
    let proxy = ProxyServer::start(config).await.unwrap();
    let in_flight = tokio::spawn(caller().get(format!("{}api/slow", proxy.url())).send());
    while server.arrivals().is_empty() {
        tokio::task::yield_now().await;
    }
    let started = tokio::time::Instant::now();
    let drained = proxy.shutdown().await.unwrap();
    assert_eq!(started.elapsed(), Duration::from_millis(200));
    assert_eq!((drained.in_flight_at_start, drained.cut_off), (1, 1));
    let response = in_flight.await.unwrap().unwrap();
    assert_eq!(response.status(), 503, "the cut-off caller is told");
    assert!(response.text().await.unwrap().contains("shut down before this request finished"));
}

#[tokio::test(start_paused = true)]
async fn the_drain_deadline_cuts_off_a_request_still_queued_for_its_slot_too() {
    let server = upstream().await;
    // One slot: the second caller waits in the limiter's queue behind the slow first.
    let limits = LimiterConfig::new().with_concurrency(1);
    let config = ProxyConfig { drain_deadline: Duration::from_millis(200), ..config(&server, Some(limits)) };
    let proxy = ProxyServer::start(config).await.unwrap();
    let url = format!("{}api/slow", proxy.url());
    let first = tokio::spawn(caller().get(url.clone()).send());
    while server.arrivals().is_empty() {
        tokio::task::yield_now().await;
    }
    let queued = tokio::spawn(caller().get(url).send());
    while proxy.in_flight() < 2 {
        tokio::task::yield_now().await;
    }
    let drained = proxy.shutdown().await.unwrap();
    assert_eq!((drained.in_flight_at_start, drained.cut_off), (2, 2));
    for caller in [first, queued] {
        let response = caller.await.unwrap().unwrap();
        assert_eq!(response.status(), 503, "each cut-off caller is told, queued or upstream");
    }
    assert_eq!(server.arrivals().len(), 1, "the queued request never reached the upstream");
}

/// Sends `raw` bytes on a new connection and returns everything read until the proxy closes it
/// (a reset after the answer ends the read too).
async fn raw_exchange(addr: SocketAddr, raw: &[u8]) -> String {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(raw).await.unwrap();
    let mut answer = Vec::new();
    let mut chunk = [0u8; 4096];
    while let Ok(read @ 1..) = stream.read(&mut chunk).await {
        answer.extend_from_slice(&chunk[..read]);
    }
    String::from_utf8_lossy(&answer).into_owned()
}

#[tokio::test(start_paused = true)]
async fn a_malformed_chunked_body_is_a_400_and_costs_no_token() {
    let server = upstream().await;
    // Three tokens, and the next one an hour away: a token spent would show at once.
    let config = config(&server, Some(bucket(3, "1/1h")));
    let registry = Arc::clone(&config.policy.registry);
    let proxy = ProxyServer::start(config).await.unwrap();
    // A good first chunk, then a size line that is not hexadecimal.
    let raw = b"POST /api/items HTTP/1.1\r\nHost: proxy\r\nTransfer-Encoding: chunked\r\n\
                Connection: close\r\n\r\n5\r\nhello\r\nzz\r\nworld\r\n0\r\n\r\n";
    let answer = raw_exchange(proxy.addr(), raw).await;
    assert!(answer.starts_with("HTTP/1.1 400 "), "a 400, not a 502:\n{answer}");
    assert!(answer.contains("the request body is malformed or incomplete"), "{answer}");
    assert!(server.arrivals().is_empty(), "nothing reached the upstream");
    let limiter = registry.limiter_for("127.0.0.1", Some(server.addr().port()), "/items").unwrap();
    assert_eq!(limiter.snapshot().budgets[0].available, 3.0, "no token was spent");

    let client = caller();
    let started = Instant::now();
    for _ in 0..3 {
        let response = client.post(format!("{}api/items", proxy.url())).body("fine").send().await.unwrap();
        assert_eq!(response.status(), 200);
    }
    assert_eq!(started.elapsed(), Duration::ZERO, "the whole budget was still there");
}

#[tokio::test(start_paused = true)]
async fn a_body_that_breaks_after_the_replay_limit_is_a_400_not_a_502() {
    // The upstream reads the whole body before it answers.
    let sink = Router::new().route("/sink", post(|body: Bytes| async move { body.len().to_string() }));
    let listener = tokio::net::TcpListener::bind(loopback()).await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, sink).await });
    let route = Route::new("s", &format!("http://{addr}")).unwrap();
    let config = ProxyConfig { listen: loopback(), replay_limit: 16, ..ProxyConfig::new(vec![route]).without_timers() };
    let proxy = ProxyServer::start(config).await.unwrap();
    // 32 bytes (past the replay limit, so streamed upstream), then a broken size line.
    let raw = b"POST /s/sink HTTP/1.1\r\nHost: proxy\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n\
                20\r\n0123456789abcdef0123456789abcdef\r\nzz\r\n";
    let answer = raw_exchange(proxy.addr(), raw).await;
    assert!(answer.starts_with("HTTP/1.1 400 "), "the caller's fault, not the upstream's:\n{answer}");
    assert!(answer.contains("the request body is malformed or incomplete"), "{answer}");
    let whole = caller().post(format!("{}s/sink", proxy.url())).body(vec![b'x'; 100]).send().await.unwrap();
    assert_eq!(whole.text().await.unwrap(), "100", "a whole streamed body still goes through");
}

#[tokio::test(start_paused = true)]
async fn callers_that_stall_before_finishing_a_head_are_disconnected_at_the_head_timeout() {
    let server = upstream().await;
    let timeout = Duration::from_secs(5);
    let config = ProxyConfig { head_timeout: Some(timeout), ..config(&server, None) };
    let proxy = ProxyServer::start(config).await.unwrap();
    let started = Instant::now();
    // Slowloris: most of a head, then nothing. And a caller that connects and says nothing.
    let mut trickling = TcpStream::connect(proxy.addr()).await.unwrap();
    trickling.write_all(b"GET /api/items HTTP/1.1\r\nHost: proxy\r\nX-Slow: a").await.unwrap();
    let mut silent = TcpStream::connect(proxy.addr()).await.unwrap();
    while proxy.connections() < 2 {
        tokio::task::yield_now().await;
    }
    let mut byte = [0u8; 1];
    let early = tokio::time::timeout(timeout - Duration::from_millis(100), trickling.read(&mut byte)).await;
    assert!(early.is_err(), "closed before the timeout: {early:?}");
    trickling.write_all(b"b").await.unwrap();
    // The guard only keeps a broken build from hanging; the assertion is on the paused clock.
    let closed = tokio::time::timeout(Duration::from_secs(60), trickling.read(&mut byte)).await;
    assert!(matches!(closed, Ok(Ok(0)) | Ok(Err(_))), "the trickling caller is cut off: {closed:?}");
    let waited = started.elapsed();
    assert!(waited >= timeout && waited < timeout + Duration::from_millis(100), "closed after {waited:?}");
    let closed = tokio::time::timeout(Duration::from_secs(60), silent.read(&mut byte)).await;
    assert!(matches!(closed, Ok(Ok(0)) | Ok(Err(_))), "the silent caller is cut off: {closed:?}");
    assert!(started.elapsed() < timeout + Duration::from_millis(100));
    while proxy.connections() > 0 {
        tokio::task::yield_now().await;
    }
    let served = caller().get(format!("{}api/items", proxy.url())).send().await.unwrap();
    assert_eq!(served.status(), 200, "a caller that sends its head in time is served");
}

/// The proxy names what a retried attempt ended with as the client does, so its timeouts and
/// refused connections land in their own columns of the retries chart, not in "other".
#[tokio::test(start_paused = true)]
async fn retries_after_a_timeout_or_a_refused_connection_name_their_cause_as_the_client_does() {
    let closed = std::net::TcpListener::bind(loopback()).unwrap().local_addr().unwrap();
    let server = upstream().await;
    let routes = vec![
        Route::new("gone", &format!("http://{closed}")).unwrap(),
        Route::new("api", server.url().as_str()).unwrap(),
    ];
    let (events, mut receiver) = EventSink::channel(1024);
    let config = ProxyConfig {
        listen: loopback(),
        upstream_timeout: Some(Duration::from_millis(100)),
        policy: Policy {
            events,
            retry: RetryPolicy { max_attempts: 2, retry_connection_errors: true, ..RetryPolicy::default() },
            ..Policy::default()
        },
        ..ProxyConfig::new(routes).without_timers()
    };
    let proxy = ProxyServer::start(config).await.unwrap();
    let client = caller();
    assert_eq!(client.get(format!("{}gone/x", proxy.url())).send().await.unwrap().status(), 502);
    assert_eq!(client.get(format!("{}api/slow", proxy.url())).send().await.unwrap().status(), 504);
    let mut causes = Vec::new();
    while let Ok(event) = receiver.try_recv() {
        if let EventKind::RetryScheduled { cause, .. } = event.kind {
            causes.push(cause);
        }
    }
    assert!(causes.iter().any(|cause| cause.starts_with("connection error: ")), "{causes:?}");
    assert!(causes.iter().any(|cause| cause == "no response in time"), "{causes:?}");
    let mut chart = RetryRates::new(60);
    for cause in &causes {
        chart.record_cause(0.0, cause);
    }
    let counted = chart.totals();
    assert_eq!(counted[RetryRates::OTHER], 0, "every retry in its own column: {causes:?}");
    assert!(counted[RetryRates::TIMEOUT] > 0 && counted[RetryRates::CONNECTION] > 0, "{counted:?}");
}

/// A stale cached answer that the upstream confirms (304) is served from the cache and
/// reported as a revalidated cache hit, as the client reports it.
#[tokio::test(start_paused = true)]
async fn a_revalidated_answer_is_reported_as_a_cache_hit_like_the_clients() {
    let toml = "[[routes]]\nprefix = \"/catalog\"\ncache = true\nmax_age = \"0s\"\n";
    let server = MockServer::start(MockConfig::from_toml(toml).unwrap(), loopback()).await.unwrap();
    let (events, mut receiver) = EventSink::channel(1024);
    let mut config = config(&server, None);
    config.cache = Some(Default::default());
    config.policy.events = events;
    let proxy = ProxyServer::start(config).await.unwrap();
    let mut bodies = Vec::new();
    for _ in 0..2 {
        let response = caller().get(format!("{}api/catalog", proxy.url())).send().await.unwrap();
        assert_eq!(response.status(), 200, "the 304 is the proxy's to resolve, not the caller's");
        bodies.push(response.bytes().await.unwrap());
    }
    assert!(!bodies[1].is_empty() && bodies[0] == bodies[1], "the stored body is served");
    assert_eq!(server.arrivals().len(), 2, "stale at once (max-age=0): the repeat asked the upstream");
    let mut hits = Vec::new();
    while let Ok(event) = receiver.try_recv() {
        if let EventKind::CacheHit { revalidated } = event.kind {
            hits.push(revalidated);
        }
    }
    assert_eq!(hits, [true], "one revalidated hit, reported");
}

/// `app` served on loopback, counting the connections it accepted.
async fn counting_connections(app: Router) -> (SocketAddr, Arc<std::sync::atomic::AtomicUsize>) {
    use axum::serve::ListenerExt;
    let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = Arc::clone(&accepted);
    let listener = tokio::net::TcpListener::bind(loopback()).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let listener = listener.tap_io(move |_| {
        counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    });
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, accepted)
}

#[tokio::test]
async fn bodiless_upstream_answers_leave_their_upstream_connection_in_the_pool() {
    let app = Router::new()
        .route("/x", axum::routing::get(|| async { "x" }))
        .route("/none", axum::routing::get(|| async { axum::http::StatusCode::NO_CONTENT }));
    let (addr, accepted) = counting_connections(app).await;
    let route = Route::new("u", &format!("http://{addr}")).unwrap();
    let proxy = ProxyServer::start(ProxyConfig { listen: loopback(), ..ProxyConfig::new(vec![route]) }).await.unwrap();
    let client = caller();
    let url = |path: &str| format!("{}u/{path}", proxy.url());
    let head = client.head(url("x")).send().await.unwrap();
    assert_eq!((head.status(), head.bytes().await.unwrap().len()), (reqwest::StatusCode::OK, 0));
    assert_eq!(client.get(url("none")).send().await.unwrap().status(), reqwest::StatusCode::NO_CONTENT);
    assert_eq!(client.get(url("x")).send().await.unwrap().text().await.unwrap(), "x");
    assert_eq!(
        accepted.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "the answers to HEAD and a 204 have no body to read: their connection went back to the pool"
    );
}

/// An upstream speaking HTTP/1.1 by hand: `/early` is answered 413 at once, its body never
/// read and the connection held open; anything else `ok`, keep-alive. Returns each
/// connection's request heads.
async fn early_answering_upstream() -> (SocketAddr, Arc<Mutex<Vec<Vec<String>>>>) {
    let listener = tokio::net::TcpListener::bind(loopback()).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen: Arc<Mutex<Vec<Vec<String>>>> = Arc::default();
    let record = Arc::clone(&seen);
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let record = Arc::clone(&record);
            let connection = {
                let mut seen = record.lock();
                seen.push(Vec::new());
                seen.len() - 1
            };
            tokio::spawn(async move {
                let mut pending = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    let Some(end) = pending.windows(4).position(|window| window == b"\r\n\r\n") else {
                        match stream.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(read) => pending.extend_from_slice(&chunk[..read]),
                        }
                        continue;
                    };
                    let head = String::from_utf8_lossy(&pending[..end]).into_owned();
                    pending.drain(..end + 4);
                    record.lock()[connection].push(head.clone());
                    if head.starts_with("POST /early ") {
                        stream.write_all(b"HTTP/1.1 413 Payload Too Large\r\ncontent-length: 0\r\n\r\n").await.unwrap();
                        // Holds the connection, the rest of the body unread.
                        std::future::pending::<()>().await;
                    }
                    stream.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok").await.unwrap();
                }
            });
        }
    });
    (addr, seen)
}

#[tokio::test]
async fn an_upstream_connection_answered_before_its_request_body_was_sent_is_not_used_again() {
    let (addr, seen) = early_answering_upstream().await;
    let route = Route::new("u", &format!("http://{addr}")).unwrap();
    let config = ProxyConfig {
        listen: loopback(),
        replay_limit: 16,
        upstream_timeout: Some(Duration::from_secs(5)),
        ..ProxyConfig::new(vec![route])
    };
    let proxy = ProxyServer::start(config).await.unwrap();
    // A caller that sends 32 bytes of a 100,000-byte body (past the replay limit, so streamed
    // upstream as it comes) and then stalls.
    let mut uploading = TcpStream::connect(proxy.addr()).await.unwrap();
    uploading
        .write_all(
            b"POST /u/early HTTP/1.1\r\nHost: proxy\r\nContent-Length: 100000\r\n\r\n0123456789abcdef0123456789abcdef",
        )
        .await
        .unwrap();
    let mut answer = Vec::new();
    let mut chunk = [0u8; 1024];
    while !answer.windows(4).any(|window| window == b"\r\n\r\n") {
        let read = uploading.read(&mut chunk).await.unwrap();
        assert!(read > 0, "the proxy hung up before answering: {}", String::from_utf8_lossy(&answer));
        answer.extend_from_slice(&chunk[..read]);
    }
    assert!(answer.starts_with(b"HTTP/1.1 413 "), "{}", String::from_utf8_lossy(&answer));
    // The next request must not go on the connection still owing the upstream a body.
    let next = caller().get(format!("{}u/ok", proxy.url())).send().await.unwrap();
    assert_eq!(next.status(), 200, "not stuck behind the unsent body");
    assert_eq!(next.text().await.unwrap(), "ok");
    let seen = seen.lock().clone();
    assert_eq!(seen.len(), 2, "a fresh connection for the next request: {seen:?}");
    assert!(seen[1][0].starts_with("GET /ok HTTP/1.1"), "{seen:?}");
    drop(uploading);
}

#[tokio::test(start_paused = true)]
async fn an_upstream_connection_idle_past_ninety_seconds_is_not_used_again() {
    let (addr, accepted) = counting_connections(Router::new().route("/x", axum::routing::get(|| async { "x" }))).await;
    let route = Route::new("u", &format!("http://{addr}")).unwrap();
    let proxy =
        ProxyServer::start(ProxyConfig { listen: loopback(), ..ProxyConfig::new(vec![route]).without_timers() })
            .await
            .unwrap();
    let client = caller();
    let url = format!("{}u/x", proxy.url());
    let connections = || accepted.load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(client.get(&url).send().await.unwrap().text().await.unwrap(), "x");
    tokio::time::advance(Duration::from_secs(89)).await;
    assert_eq!(client.get(&url).send().await.unwrap().text().await.unwrap(), "x");
    assert_eq!(connections(), 1, "idle for 89 s: the same connection");
    tokio::time::advance(Duration::from_secs(91)).await;
    assert_eq!(client.get(&url).send().await.unwrap().text().await.unwrap(), "x");
    assert_eq!(connections(), 2, "idle for 91 s: closed, a new one made");
}

#[tokio::test(start_paused = true)]
async fn an_http_1_0_upstream_with_its_own_reason_phrase_is_answered_as_http_1_1() {
    let upstream = tokio::net::TcpListener::bind(loopback()).await.unwrap();
    let addr = upstream.local_addr().unwrap();
    tokio::spawn(async move {
        // Each connection: read a head, answer in HTTP/1.0 with a reason phrase of its own, close.
        while let Ok((mut stream, _)) = upstream.accept().await {
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).await.is_ok_and(|read| read == 1) {
                head.push(byte[0]);
            }
            let _ = stream.write_all(b"HTTP/1.0 200 Fine Thanks\r\ncontent-length: 2\r\n\r\nok").await;
        }
    });
    let route = Route::new("old", &format!("http://{addr}")).unwrap();
    let proxy =
        ProxyServer::start(ProxyConfig { listen: loopback(), ..ProxyConfig::new(vec![route]).without_timers() })
            .await
            .unwrap();
    let answer = raw_exchange(proxy.addr(), b"GET /old/x HTTP/1.1\r\nhost: p\r\nconnection: close\r\n\r\n").await;
    assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
    assert!(answer.ends_with("\r\n\r\nok"), "{answer}");
    // The upstream closed each connection: the next request gets a new one, on the same caller connection.
    let client = caller();
    for _ in 0..3 {
        let response = client.get(format!("{}old/x", proxy.url())).send().await.unwrap();
        assert_eq!(response.version(), reqwest::Version::HTTP_11);
        assert_eq!(response.text().await.unwrap(), "ok");
    }
}
