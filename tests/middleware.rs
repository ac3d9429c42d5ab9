//! `RateLimitMiddleware` in a real `reqwest_middleware` chain, against a real axum server on
//! 127.0.0.1 (paused tokio time) and against express-rate-limit (real time): pacing across
//! tasks, Retry-After, slots released on panics, streams and cancellation, coalescing, a
//! place among other middlewares, and the direct path (a client with nothing to read in a
//! plain answer) handing every other answer to the client's steps.

mod support;
#[path = "thirdparty/mod.rs"]
mod thirdparty;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures_util::future::join_all;
use http::Extensions;
use ratescope::engine::{LimitKey, Limiter, LimiterConfig, Priority, Registry};
use ratescope::http::{Adaptive, EventSink, LimitedClient, RateLimitMiddleware, RequestCost, RetryPolicy};
use reqwest_middleware::{ClientBuilder, ClientWithMiddleware, Middleware, Next};
use support::TestServer;
use thirdparty::ThirdParty;

/// A limited client whose only limits are `limits` on `key`.
fn limited(key: &str, limits: &str) -> LimitedClient {
    let key: LimitKey = key.parse().unwrap();
    let registry = Registry::from_table([(key, LimiterConfig::parse_described(limits).unwrap())]).unwrap();
    LimitedClient::builder().registry(Arc::new(registry)).without_timers().seed(7).build().unwrap()
}

/// reqwest without timers of its own (paused time would fire them), then the middleware.
fn chain(middleware: RateLimitMiddleware) -> ClientWithMiddleware {
    let reqwest = reqwest::Client::builder().pool_idle_timeout(None).build().unwrap();
    ClientBuilder::new(reqwest).with(middleware).build()
}

fn limiter_of(client: &LimitedClient, server: &TestServer) -> Limiter {
    client.registry().limiter_for("127.0.0.1", Some(server.addr.port()), "/").unwrap()
}

#[tokio::test(start_paused = true)]
async fn pacing_holds_across_eight_concurrent_tasks() {
    let server = TestServer::start(100, Duration::from_secs(60), 0).await;
    let http = chain(RateLimitMiddleware::new(limited(&server.key(), "bucket 1 @ 5/1s")));
    let tasks = (0..8).map(|_| {
        let (http, url) = (http.clone(), server.url("/ok"));
        tokio::spawn(async move {
            for _ in 0..5 {
                assert_eq!(http.get(url.clone()).send().await.unwrap().status(), 200);
            }
        })
    });
    join_all(tasks).await.into_iter().for_each(|joined| joined.unwrap());
    server.assert_paced(40, Duration::from_millis(200));
}

#[tokio::test(start_paused = true)]
async fn retry_after_is_honoured_and_pauses_the_whole_key() {
    let server = TestServer::start(100, Duration::from_secs(60), 1).await;
    let http = chain(RateLimitMiddleware::new(limited(&server.key(), "concurrency 4")));
    let throttled = tokio::spawn({
        let (http, url) = (http.clone(), server.url("/throttle-once"));
        async move { http.get(url).send().await }
    });
    while server.arrivals().is_empty() {
        tokio::task::yield_now().await;
    }
    tokio::time::sleep(Duration::from_millis(10)).await;
    let other = http.get(server.url("/ok")).send().await.unwrap();
    let response = throttled.await.unwrap().unwrap();
    assert_eq!((response.status(), response.text().await.unwrap()), (reqwest::StatusCode::OK, "fine".to_owned()));
    assert_eq!(other.status(), 200);
    let arrivals = server.arrivals();
    let retry = arrivals.iter().filter(|a| a.path == "/throttle-once").nth(1).expect("a retry").at;
    let ok = arrivals.iter().find(|a| a.path == "/ok").expect("the other request").at;
    let first = arrivals[0].at;
    assert!(retry - first >= Duration::from_secs(2) && retry - first <= Duration::from_millis(2001), "{retry:?}");
    assert!(ok - first >= Duration::from_secs(2), "the 429 paused the key: /ok went at {ok:?}");
}

#[tokio::test(start_paused = true)]
async fn the_last_429_reaches_the_caller_as_a_response() {
    let server = TestServer::start(100, Duration::from_secs(60), 0).await;
    let client = LimitedClient::builder()
        .registry(Arc::new(Registry::new()))
        .retry(RetryPolicy { max_attempts: 2, ..RetryPolicy::default() })
        .adaptive(Adaptive::All)
        .without_timers()
        .build()
        .unwrap();
    let response = chain(RateLimitMiddleware::new(client)).get(server.url("/always-429")).send().await.unwrap();
    assert_eq!(response.status(), 429);
    assert_eq!(response.headers()["retry-after"], "1");
    assert_eq!(response.text().await.unwrap(), "no");
    assert_eq!(server.count_status(429), 2, "the first attempt and one retry");
}

#[tokio::test(start_paused = true)]
async fn a_panicking_handler_releases_its_slot() {
    let server = TestServer::start(100, Duration::from_secs(60), 0).await;
    let client = limited(&server.key(), "concurrency 1");
    let http = chain(RateLimitMiddleware::new(client.clone()));
    let failed = http.get(server.url("/panic")).send().await;
    assert!(failed.is_err(), "no response from a handler that panicked");
    let next = tokio::time::timeout(Duration::from_secs(30), http.get(server.url("/ok")).send()).await;
    assert_eq!(next.expect("the slot was released").unwrap().status(), 200);
    assert_eq!(limiter_of(&client, &server).in_flight(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_caller_that_panics_holding_a_streamed_response_releases_its_slot() {
    let server = TestServer::start(100, Duration::from_secs(60), 0).await;
    let client = limited(&server.key(), "concurrency 1");
    let http = chain(RateLimitMiddleware::new(client.clone()));
    let holder = tokio::spawn({
        let (http, url) = (http.clone(), server.url("/stream"));
        async move {
            let response = http.get(url).send().await.unwrap();
            assert_eq!(response.status(), 200);
            panic!("the caller panics before reading the body");
        }
    });
    assert!(holder.await.unwrap_err().is_panic());
    let next = tokio::time::timeout(Duration::from_secs(30), http.get(server.url("/ok")).send()).await;
    assert_eq!(next.expect("the slot was released").unwrap().status(), 200);
}

#[tokio::test(start_paused = true)]
async fn a_streamed_body_holds_its_slot_until_it_is_read() {
    let server = TestServer::start(100, Duration::from_secs(60), 0).await;
    let client = limited(&server.key(), "concurrency 1");
    let http = chain(RateLimitMiddleware::new(client.clone()));
    let streamed = http.get(server.url("/stream")).send().await.unwrap();
    let limiter = limiter_of(&client, &server);
    assert_eq!(limiter.in_flight(), 1, "the unread body holds the slot");
    let waiting = tokio::spawn({
        let (http, url) = (http.clone(), server.url("/ok"));
        async move { http.get(url).send().await.map(|response| response.status()) }
    });
    let body = streamed.text().await.unwrap();
    assert_eq!(body, "chunk 0;chunk 1;chunk 2;");
    assert_eq!(waiting.await.unwrap().unwrap(), 200);
    let arrivals = server.arrivals();
    let ok = arrivals.iter().find(|a| a.path == "/ok").unwrap().at;
    assert!(ok - arrivals[0].at >= Duration::from_secs(2), "/ok waited for the stream's end: {ok:?}");
}

#[tokio::test(start_paused = true)]
async fn cancelled_callers_leave_the_queue() {
    let server = TestServer::start(100, Duration::from_secs(60), 0).await;
    let client = limited(&server.key(), "concurrency 1");
    let http = chain(RateLimitMiddleware::new(client.clone()));
    let holder = tokio::spawn({
        let (http, url) = (http.clone(), server.url("/slow"));
        async move { http.get(url).send().await.map(|response| response.status()) }
    });
    while server.arrivals().is_empty() {
        tokio::task::yield_now().await;
    }
    let queued: Vec<_> = (0..3)
        .map(|_| {
            let (http, url) = (http.clone(), server.url("/ok"));
            tokio::spawn(async move { http.get(url).send().await.map(|response| response.status()) })
        })
        .collect();
    let limiter = limiter_of(&client, &server);
    while limiter.snapshot().queued_total() < 3 {
        tokio::task::yield_now().await;
    }
    queued.iter().for_each(tokio::task::JoinHandle::abort);
    for task in queued {
        assert!(task.await.unwrap_err().is_cancelled());
    }
    assert_eq!(limiter.snapshot().queued_total(), 0, "cancelled callers left the queue");
    assert_eq!(holder.await.unwrap().unwrap(), 200);
    assert_eq!(http.get(server.url("/ok")).send().await.unwrap().status(), 200);
    assert_eq!(server.arrivals().len(), 2, "none of the cancelled requests was sent");
}

#[tokio::test(start_paused = true)]
async fn identical_gets_through_the_chain_share_one_exchange() {
    let server = TestServer::start(100, Duration::from_secs(60), 0).await;
    let client = LimitedClient::builder().coalesce(true).without_timers().build().unwrap();
    let http = chain(RateLimitMiddleware::new(client));
    let sends = (0..10).map(|_| {
        let (http, url) = (http.clone(), server.url("/slow"));
        tokio::spawn(async move { http.get(url).send().await.unwrap().text().await.unwrap() })
    });
    let bodies: Vec<String> = join_all(sends).await.into_iter().map(Result::unwrap).collect();
    assert!(bodies.iter().all(|body| body == "slow"), "{bodies:?}");
    assert_eq!(server.arrivals().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn cost_and_priority_come_from_the_request_extensions() {
    let server = TestServer::start(100, Duration::from_secs(60), 0).await;
    let http = chain(RateLimitMiddleware::new(limited(&server.key(), "bucket 3 @ 1/1s")));
    let heavy = http.get(server.url("/ok")).with_extension(RequestCost(3)).with_extension(Priority::High);
    assert_eq!(heavy.send().await.unwrap().status(), 200);
    assert_eq!(http.get(server.url("/ok")).send().await.unwrap().status(), 200);
    let arrivals = server.arrivals();
    assert!(arrivals[1].at - arrivals[0].at >= Duration::from_secs(1), "the first request spent all 3 tokens");
}

/// Counts what passes it and keeps the statuses it sees: outside the limiter it sees each
/// request once, inside it sees every attempt.
#[derive(Clone, Default)]
struct Counting(Arc<AtomicUsize>, Arc<parking_lot::Mutex<Vec<u16>>>);

#[async_trait::async_trait]
impl Middleware for Counting {
    async fn handle(
        &self,
        request: reqwest::Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        self.0.fetch_add(1, Ordering::SeqCst);
        let response = next.run(request, extensions).await;
        if let Ok(response) = &response {
            self.1.lock().push(response.status().as_u16());
        }
        response
    }
}

#[tokio::test(start_paused = true)]
async fn it_works_between_other_middlewares_and_inner_ones_see_every_attempt() {
    let server = TestServer::start(100, Duration::from_secs(60), 1).await;
    let (outer, inner) = (Counting::default(), Counting::default());
    // Built first: the client installs the TLS provider reqwest needs (a test runs alone
    // under nextest, with no other test's client to have installed it).
    let middleware = RateLimitMiddleware::new(limited(&server.key(), "concurrency 2"));
    let reqwest = reqwest::Client::builder().pool_idle_timeout(None).build().unwrap();
    let http = ClientBuilder::new(reqwest).with(outer.clone()).with(middleware).with(inner.clone()).build();
    let response = http.get(server.url("/throttle-once")).header("x-caller", "kept").send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!((outer.0.load(Ordering::SeqCst), inner.0.load(Ordering::SeqCst)), (1, 2));
    assert!(server.arrivals().iter().all(|arrival| arrival.headers["x-caller"] == "kept"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adaptive_chain_keeps_express_draft8_without_a_refusal() {
    let Some(server) = ThirdParty::express(2000, 10, "draft-8") else { return };
    let client = LimitedClient::builder().adaptive(Adaptive::All).retry(RetryPolicy::default()).build().unwrap();
    let wire = Counting::default();
    let http =
        ClientBuilder::new(reqwest::Client::new()).with(RateLimitMiddleware::new(client)).with(wire.clone()).build();
    let started = std::time::Instant::now();
    let tasks = (0..10).map(|_| {
        let (http, url) = (http.clone(), server.url("/items"));
        tokio::spawn(async move {
            let mut statuses = Vec::new();
            for _ in 0..3 {
                statuses.push(http.get(url.clone()).send().await.unwrap().status().as_u16());
            }
            statuses
        })
    });
    let statuses: Vec<u16> = join_all(tasks).await.into_iter().flat_map(Result::unwrap).collect();
    let elapsed = started.elapsed().as_secs_f64();
    assert_eq!(statuses.len(), 30);
    assert!(statuses.iter().all(|status| *status == 200), "{statuses:?}");
    let on_the_wire = wire.1.lock().clone();
    assert_eq!(on_the_wire.len(), 30, "no attempt was refused and retried: {on_the_wire:?}");
    // 30 requests at 10 per 2 s: two full windows after the first.
    assert!((4.0..=4.4).contains(&elapsed), "took {elapsed:.3}s against a schedule of 4 s");
}

#[tokio::test(start_paused = true)]
async fn the_clients_headers_for_the_host_join_the_callers_on_every_attempt() {
    let server = TestServer::start(100, Duration::from_secs(60), 1).await;
    let mut defaults = http::HeaderMap::new();
    defaults.insert("user-agent", "ratescope-test".parse().unwrap());
    let mut secret = http::HeaderMap::new();
    secret.insert("authorization", "Bearer for-this-host-only".parse().unwrap());
    let client = LimitedClient::builder()
        .registry(Arc::new(Registry::new()))
        .default_headers(defaults)
        .host_headers(&server.key(), secret)
        .without_timers()
        .build()
        .unwrap();
    let http = chain(RateLimitMiddleware::new(client));
    let response = http.get(server.url("/throttle-once")).header("x-caller", "kept").send().await.unwrap();
    assert_eq!(response.status(), 200);
    let arrivals = server.arrivals();
    assert_eq!(arrivals.len(), 2, "the 429 and its retry");
    for arrival in &arrivals {
        assert_eq!(arrival.headers["authorization"], "Bearer for-this-host-only");
        assert_eq!(arrival.headers["user-agent"], "ratescope-test");
        assert_eq!(arrival.headers["x-caller"], "kept");
    }
}

/// Notes what each attempt carries when it reaches the rest of the chain (method, body, the
/// caller's header, reqwest's per-request timeout, HTTP version), then drops the timeout so
/// paused time cannot fire it.
#[derive(Clone, Default)]
struct Attempts(Arc<parking_lot::Mutex<Vec<Seen>>>);

/// One attempt as the rest of the chain received it.
#[derive(Debug, Clone, PartialEq)]
struct Seen {
    method: String,
    body: Vec<u8>,
    caller: String,
    timeout: Option<Duration>,
    version: http::Version,
}

#[async_trait::async_trait]
impl Middleware for Attempts {
    async fn handle(
        &self,
        mut request: reqwest::Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        let body = request.body().and_then(reqwest::Body::as_bytes).unwrap_or_default().to_vec();
        let caller = request.headers().get("x-caller").map(|v| v.to_str().unwrap().to_owned()).unwrap_or_default();
        let (method, timeout, version) = (request.method().to_string(), request.timeout().copied(), request.version());
        self.0.lock().push(Seen { method, body, caller, timeout, version });
        *request.timeout_mut() = None;
        next.run(request, extensions).await
    }
}

#[tokio::test(start_paused = true)]
async fn a_retry_sends_the_callers_method_body_headers_timeout_and_version_again() {
    let server = TestServer::start(100, Duration::from_secs(60), 1).await;
    let attempts = Attempts::default();
    // Built first: the client installs the TLS provider reqwest needs.
    let middleware = RateLimitMiddleware::new(limited(&server.key(), "concurrency 2"));
    let reqwest = reqwest::Client::builder().pool_idle_timeout(None).build().unwrap();
    let http = ClientBuilder::new(reqwest).with(middleware).with(attempts.clone()).build();
    let response = http
        .get(server.url("/throttle-once"))
        .header("x-caller", "kept")
        .body("the same bytes")
        .timeout(Duration::from_secs(30))
        .version(http::Version::HTTP_11)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "the 429 was retried");
    // The streamed answer's headers, lent to the client's steps, came back with it.
    assert_eq!(response.headers()["content-type"], "text/plain; charset=utf-8");
    assert_eq!(response.text().await.unwrap(), "fine");
    let seen = attempts.0.lock().clone();
    assert_eq!(seen.len(), 2, "{seen:?}");
    let expected = Seen {
        method: "GET".to_owned(),
        body: b"the same bytes".to_vec(),
        caller: "kept".to_owned(),
        timeout: Some(Duration::from_secs(30)),
        version: http::Version::HTTP_11,
    };
    assert_eq!(seen, vec![expected.clone(), expected]);
}

#[tokio::test(start_paused = true)]
async fn a_403_saying_the_budget_is_spent_pauses_the_key_on_the_direct_path() {
    let server = TestServer::start(100, Duration::from_secs(60), 0).await;
    // No cache, coalescing or listener, a plain key: the direct path, which must hand a 403 on.
    let http = chain(RateLimitMiddleware::new(limited(&server.key(), "concurrency 4")));
    let refused = http.get(server.url("/spent-403")).send().await.unwrap();
    assert_eq!(refused.status(), 403, "a status the policy does not retry goes back as it came");
    assert_eq!(refused.text().await.unwrap(), "API rate limit exceeded");
    assert_eq!(http.get(server.url("/ok")).send().await.unwrap().status(), 200);
    let arrivals = server.arrivals();
    let waited = arrivals[1].at - arrivals[0].at;
    assert!(waited >= Duration::from_secs(3), "the spent budget paused the key for its Retry-After: {waited:?}");
}

#[tokio::test(start_paused = true)]
async fn a_success_the_policy_retries_is_retried_on_the_direct_path() {
    let server = TestServer::start(100, Duration::from_secs(60), 0).await;
    let key: LimitKey = server.key().parse().unwrap();
    let registry = Registry::from_table([(key, LimiterConfig::parse_described("concurrency 4").unwrap())]).unwrap();
    // The user's word, however odd: a 200 is worth retrying, up to three attempts.
    let retry = RetryPolicy { retry_statuses: vec![200], max_attempts: 3, ..RetryPolicy::default() };
    let client = LimitedClient::builder().registry(Arc::new(registry)).retry(retry).without_timers().build().unwrap();
    let response = chain(RateLimitMiddleware::new(client)).get(server.url("/ok")).send().await.unwrap();
    assert_eq!((response.status(), response.text().await.unwrap()), (reqwest::StatusCode::OK, "ok".to_owned()));
    assert_eq!(server.arrivals().len(), 3, "the first answer and two retries, the last given back");
}

#[tokio::test(start_paused = true)]
async fn a_response_keeps_its_url_remote_address_and_slot_on_either_path() {
    let server = TestServer::start(100, Duration::from_secs(60), 0).await;
    for listening in [false, true] {
        let key: LimitKey = server.key().parse().unwrap();
        let registry = Registry::from_table([(key, LimiterConfig::parse_described("concurrency 1").unwrap())]);
        let (sink, _events) = EventSink::channel(64);
        let builder = LimitedClient::builder().registry(Arc::new(registry.unwrap())).without_timers();
        // A listener sends the request through the client's steps; none, down the direct path.
        let client = if listening { builder.events(sink) } else { builder }.build().unwrap();
        let http = chain(RateLimitMiddleware::new(client.clone()));
        let response = http.get(server.url("/ok")).send().await.unwrap();
        assert_eq!(response.url(), &server.url("/ok"), "listening: {listening}");
        assert_eq!(response.remote_addr(), Some(server.addr), "listening: {listening}");
        assert_eq!(limiter_of(&client, &server).in_flight(), 1, "the unread body holds the slot");
        assert_eq!(response.text().await.unwrap(), "ok");
        assert_eq!(limiter_of(&client, &server).in_flight(), 0, "listening: {listening}");
    }
}
