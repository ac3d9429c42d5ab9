//! `RateLimitLayer` under hyper-util's legacy client, over real loopback sockets: against the
//! test server on paused tokio time (pacing across tasks, Retry-After, panics, cancellation,
//! shedding, pass-through, bodies holding their slot, extensions, events, adaptive keys) and
//! against Flask-Limiter on the real clock (its Retry-After honoured, nothing sent before it).

mod support;
#[path = "thirdparty/mod.rs"]
mod thirdparty;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::join_all;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use parking_lot::Mutex;
use ratescope::engine::{LimitKey, Limiter, LimiterConfig, Priority, Registry, Shedding};
use ratescope::http::{Adaptive, EventKind, EventSink, RequestCost, RetryPolicy};
use ratescope::layer::{LimitedBody, RateLimitError, RateLimitLayer, RateLimitService, RetryOnThrottle};
use support::TestServer;
use thirdparty::ThirdParty;
use tower::retry::{Retry, RetryLayer};
use tower::{ServiceBuilder, ServiceExt};

type Hyper = Client<HttpConnector, Empty<Bytes>>;
type Limited = RateLimitService<Hyper>;
type Answer = Result<http::Response<LimitedBody<Incoming>>, RateLimitError<hyper_util::client::legacy::Error>>;

/// hyper-util's legacy client: no pool timer, so paused time fires nothing of its own.
fn hyper() -> Hyper {
    Client::builder(TokioExecutor::new()).build_http()
}

fn registry(key: &str, limits: &str) -> Arc<Registry> {
    let key: LimitKey = key.parse().unwrap();
    Arc::new(Registry::from_table([(key, LimiterConfig::parse_described(limits).unwrap())]).unwrap())
}

/// The hyper client under a layer whose only limits are `limits` on `server`'s key.
fn limited(server: &TestServer, limits: &str) -> (Limited, Arc<Registry>) {
    let registry = registry(&server.key(), limits);
    (ServiceBuilder::new().layer(RateLimitLayer::new(Arc::clone(&registry))).service(hyper()), registry)
}

fn limiter_of(registry: &Registry, server: &TestServer) -> Limiter {
    registry.limiter_for("127.0.0.1", Some(server.addr.port()), "/").unwrap()
}

fn get(url: url::Url) -> http::Request<Empty<Bytes>> {
    http::Request::get(url.as_str()).body(Empty::new()).unwrap()
}

/// One GET through a clone of `service`.
fn send(service: &Limited, url: url::Url) -> impl Future<Output = Answer> + Send + 'static {
    service.clone().oneshot(get(url))
}

async fn text(response: http::Response<LimitedBody<Incoming>>) -> String {
    String::from_utf8(response.into_body().collect().await.unwrap().to_bytes().to_vec()).unwrap()
}

async fn until(mut done: impl FnMut() -> bool) {
    while !done() {
        tokio::task::yield_now().await;
    }
}

#[tokio::test(start_paused = true)]
async fn pacing_holds_across_eight_concurrent_tasks() {
    let server = TestServer::start(100, Duration::from_secs(60), 0).await;
    let (service, _) = limited(&server, "bucket 1 @ 5/1s");
    let tasks = (0..8).map(|_| {
        let (service, url) = (service.clone(), server.url("/ok"));
        tokio::spawn(async move {
            for _ in 0..5 {
                let response = send(&service, url.clone()).await.unwrap();
                assert_eq!(response.status(), 200);
                assert_eq!(text(response).await, "ok");
            }
        })
    });
    join_all(tasks).await.into_iter().for_each(|joined| joined.unwrap());
    server.assert_paced(40, Duration::from_millis(200));
}

#[tokio::test(start_paused = true)]
async fn retry_after_is_honoured_and_pauses_the_whole_key() {
    let server = TestServer::start(100, Duration::from_secs(60), 1).await;
    let registry = registry(&server.key(), "concurrency 4");
    let (sink, mut events) = EventSink::channel(256);
    let layer = RateLimitLayer::builder(Arc::clone(&registry)).events(sink).build();
    let service: Retry<RetryOnThrottle, Limited> =
        ServiceBuilder::new().layer(RetryLayer::new(RetryOnThrottle::default())).layer(layer).service(hyper());
    let throttled = tokio::spawn(service.clone().oneshot(get(server.url("/throttle-once"))));
    until(|| !server.arrivals().is_empty()).await;
    tokio::time::sleep(Duration::from_millis(10)).await;
    let other = service.clone().oneshot(get(server.url("/ok"))).await.unwrap();
    let response = throttled.await.unwrap().unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(text(response).await, "fine");
    assert_eq!(other.status(), 200);
    let arrivals = server.arrivals();
    let first = arrivals[0].at;
    let retry = arrivals.iter().filter(|a| a.path == "/throttle-once").nth(1).expect("a retry").at;
    let ok = arrivals.iter().find(|a| a.path == "/ok").expect("the other request").at;
    assert!(retry - first >= Duration::from_secs(2) && retry - first <= Duration::from_millis(2001), "{retry:?}");
    assert!(ok - first >= Duration::from_secs(2), "the 429 paused the key: /ok went at {ok:?}");
    let mut kinds = Vec::new();
    while let Ok(event) = events.try_recv() {
        if event.request_id == 0 {
            kinds.push(event.kind);
        }
    }
    assert!(matches!(kinds[0], EventKind::Queued { attempt: 1, priority: Priority::Normal }), "{kinds:?}");
    assert!(matches!(kinds[1], EventKind::Admitted { .. }), "{kinds:?}");
    assert!(matches!(&kinds[2], EventKind::Sent { path, .. } if path == "/throttle-once"), "{kinds:?}");
    assert!(
        matches!(&kinds[3], EventKind::Response { status: 429, info, .. } if info.retry_after == Some(Duration::from_secs(2)))
    );
    assert!(matches!(&kinds[4], EventKind::KeyPaused { pause, .. } if *pause == Duration::from_secs(2)), "{kinds:?}");
    assert!(matches!(kinds[5], EventKind::Finished { status: 429, attempts: 1, .. }), "{kinds:?}");
}

#[tokio::test(start_paused = true)]
async fn a_request_whose_body_cannot_be_copied_is_never_retried() {
    let server = TestServer::start(100, Duration::from_secs(60), 1).await;
    let registry = registry(&server.key(), "concurrency 4");
    let client: Client<HttpConnector, BoxBody<Bytes, Infallible>> = Client::builder(TokioExecutor::new()).build_http();
    let service = ServiceBuilder::new()
        .layer(RetryLayer::new(RetryOnThrottle::default()))
        .layer(RateLimitLayer::new(registry))
        .service(client);
    let body = BoxBody::new(Full::new(Bytes::from_static(b"once")));
    let request = http::Request::get(server.url("/throttle-once").as_str()).body(body).unwrap();
    let response = service.oneshot(request).await.unwrap();
    assert_eq!(response.status(), 429, "the 429 comes back as it came");
    assert_eq!(server.arrivals().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_panicking_handler_releases_its_slot() {
    let server = TestServer::start(100, Duration::from_secs(60), 0).await;
    let (service, registry) = limited(&server, "concurrency 1");
    let failed = send(&service, server.url("/panic")).await;
    assert!(matches!(failed, Err(RateLimitError::Inner(_))), "no response from a handler that panicked");
    let next = tokio::time::timeout(Duration::from_secs(30), send(&service, server.url("/ok"))).await;
    assert_eq!(next.expect("the slot was released").unwrap().status(), 200);
    assert_eq!(limiter_of(&registry, &server).in_flight(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_panicking_inner_service_releases_its_slot() {
    let registry = registry("api.example.com", "concurrency 1");
    let service = ServiceBuilder::new().layer(RateLimitLayer::new(Arc::clone(&registry))).service_fn(
        |request: http::Request<String>| async move {
            if request.uri().path() == "/panic" {
                panic!("the inner service panics on purpose");
            }
            Ok::<_, Infallible>(http::Response::new(Full::new(Bytes::from("fine"))))
        },
    );
    let call = |path: &str| {
        let request = http::Request::get(format!("https://api.example.com{path}")).body(String::new()).unwrap();
        service.clone().oneshot(request)
    };
    let panicked = tokio::spawn(call("/panic")).await.unwrap_err();
    assert!(panicked.is_panic());
    let limiter = registry.limiter_for("api.example.com", Some(443), "/").unwrap();
    assert_eq!(limiter.in_flight(), 0, "the unwinding call future dropped its permit");
    let next = tokio::time::timeout(Duration::from_secs(1), call("/ok")).await.expect("the slot is free");
    assert_eq!(next.unwrap().status(), 200);
}

#[tokio::test(start_paused = true)]
async fn cancelled_callers_leave_the_queue() {
    let server = TestServer::start(100, Duration::from_secs(60), 0).await;
    let (service, registry) = limited(&server, "concurrency 1");
    let holder = tokio::spawn({
        let (service, url) = (service.clone(), server.url("/slow"));
        async move { text(send(&service, url).await.unwrap()).await }
    });
    until(|| !server.arrivals().is_empty()).await;
    let queued: Vec<_> = (0..3)
        .map(|_| {
            let (service, url) = (service.clone(), server.url("/ok"));
            tokio::spawn(async move { send(&service, url).await.map(|response| response.status()) })
        })
        .collect();
    let limiter = limiter_of(&registry, &server);
    until(|| limiter.snapshot().queued_total() == 3).await;
    queued.iter().for_each(tokio::task::JoinHandle::abort);
    for task in queued {
        assert!(task.await.unwrap_err().is_cancelled());
    }
    assert_eq!(limiter.snapshot().queued_total(), 0, "cancelled callers left the queue");
    assert_eq!(holder.await.unwrap(), "slow");
    assert_eq!(send(&service, server.url("/ok")).await.unwrap().status(), 200);
    assert_eq!(server.arrivals().len(), 2, "none of the cancelled requests was sent");
}

#[tokio::test(start_paused = true)]
async fn shedding_refuses_a_wait_longer_than_the_bound() {
    let server = TestServer::start(100, Duration::from_secs(60), 0).await;
    let registry = registry(&server.key(), "bucket 1 @ 1/1s");
    let shedding = Shedding { max_queue_wait: Duration::from_millis(500), max_queue_len: 10 };
    let service = ServiceBuilder::new()
        .layer(RateLimitLayer::builder(Arc::clone(&registry)).shedding(shedding).build())
        .service(hyper());
    assert_eq!(send(&service, server.url("/ok")).await.unwrap().status(), 200);
    let started = tokio::time::Instant::now();
    match send(&service, server.url("/ok")).await {
        Err(RateLimitError::Shed { wait, key, .. }) => {
            assert_eq!(key, server.key());
            assert!(wait > Duration::from_millis(500) && wait <= Duration::from_secs(1), "{wait:?}");
        }
        other => panic!("expected a shed, got {:?}", other.map(|response| response.status())),
    }
    assert_eq!(started.elapsed(), Duration::ZERO, "refused at once, not after waiting");
    assert_eq!(server.arrivals().len(), 1, "the shed request was never sent");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(send(&service, server.url("/ok")).await.unwrap().status(), 200, "a short wait is not shed");
}

#[tokio::test(start_paused = true)]
async fn shedding_refuses_when_the_queue_is_full() {
    let server = TestServer::start(100, Duration::from_secs(60), 0).await;
    let registry = registry(&server.key(), "concurrency 1");
    let shedding = Shedding { max_queue_wait: Duration::from_secs(30), max_queue_len: 1 };
    let service = ServiceBuilder::new()
        .layer(RateLimitLayer::builder(Arc::clone(&registry)).shedding(shedding).build())
        .service(hyper());
    let holder = tokio::spawn(send(&service, server.url("/slow")));
    until(|| !server.arrivals().is_empty()).await;
    let queued = tokio::spawn(send(&service, server.url("/ok")));
    let limiter = limiter_of(&registry, &server);
    until(|| limiter.snapshot().queued_total() == 1).await;
    let refused = send(&service, server.url("/ok")).await;
    assert!(refused.as_ref().is_err_and(RateLimitError::is_shed), "one waits already: the next is shed");
    assert_eq!(holder.await.unwrap().unwrap().status(), 200);
    assert_eq!(queued.await.unwrap().unwrap().status(), 200);
    assert_eq!(server.arrivals().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_request_without_a_matching_limiter_passes_through() {
    let server = TestServer::start(100, Duration::from_secs(60), 0).await;
    let registry = registry("api.example.com", "concurrency 1");
    let service = ServiceBuilder::new().layer(RateLimitLayer::new(Arc::clone(&registry))).service(hyper());
    let started = tokio::time::Instant::now();
    let sends = (0..3).map(|_| send(&service, server.url("/slow")));
    let responses: Vec<_> = join_all(sends).await.into_iter().map(Result::unwrap).collect();
    assert!(responses.iter().all(|response| response.status() == 200 && !response.body().holds_permit()));
    assert_eq!(started.elapsed(), Duration::from_secs(1), "all three at once, not one at a time");
    assert!(server.arrivals().iter().all(|arrival| arrival.at == Duration::ZERO));
    assert!(registry.active().is_empty(), "no limiter was made for the test server");
}

#[tokio::test(start_paused = true)]
async fn a_streamed_body_holds_its_slot_until_it_ends() {
    let server = TestServer::start(100, Duration::from_secs(60), 0).await;
    let (service, registry) = limited(&server, "concurrency 1");
    let streamed = send(&service, server.url("/stream")).await.unwrap();
    let limiter = limiter_of(&registry, &server);
    assert!(streamed.body().holds_permit());
    assert_eq!(limiter.in_flight(), 1, "the unread body holds the slot");
    let waiting = tokio::spawn(send(&service, server.url("/ok")));
    assert_eq!(text(streamed).await, "chunk 0;chunk 1;chunk 2;");
    assert_eq!(waiting.await.unwrap().unwrap().status(), 200);
    let arrivals = server.arrivals();
    let ok = arrivals.iter().find(|a| a.path == "/ok").unwrap().at;
    assert!(ok - arrivals[0].at >= Duration::from_secs(2), "/ok waited for the stream's end: {ok:?}");
    // A dropped body gives its slot back too.
    let dropped = send(&service, server.url("/stream")).await.unwrap();
    assert_eq!(limiter.in_flight(), 1);
    drop(dropped);
    assert_eq!(limiter.in_flight(), 0);
}

#[tokio::test(start_paused = true)]
async fn cost_and_priority_come_from_the_request_extensions() {
    let server = TestServer::start(100, Duration::from_secs(60), 0).await;
    let (service, _) = limited(&server, "bucket 3 @ 1/1s");
    let mut heavy = get(server.url("/ok"));
    heavy.extensions_mut().insert(RequestCost(3));
    assert_eq!(service.clone().oneshot(heavy).await.unwrap().status(), 200);
    // Two wait for the refill; the high lane goes first although it asked second.
    let normal = tokio::spawn(send(&service, server.url("/ok")));
    tokio::task::yield_now().await;
    let mut urgent = get(server.url("/limited"));
    urgent.extensions_mut().insert(Priority::High);
    let urgent = tokio::spawn(service.clone().oneshot(urgent));
    assert_eq!(normal.await.unwrap().unwrap().status(), 200);
    assert_eq!(urgent.await.unwrap().unwrap().status(), 200);
    let arrivals = server.arrivals();
    assert_eq!(arrivals[1].path, "/limited", "the high lane went first");
    assert!(arrivals[1].at - arrivals[0].at >= Duration::from_secs(1), "the first request spent all 3 tokens");
}

#[tokio::test(start_paused = true)]
async fn an_adaptive_key_learns_the_servers_budget_from_its_headers() {
    // /limited: 3 per 10 s, published in IETF draft headers; no limits configured here.
    let server = TestServer::start(3, Duration::from_secs(10), 0).await;
    let layer = RateLimitLayer::builder(Arc::new(Registry::new())).adaptive(Adaptive::All).build();
    let service = ServiceBuilder::new().layer(layer).service(hyper());
    for _ in 0..6 {
        let response = send(&service, server.url("/limited")).await.unwrap();
        assert_eq!(response.status(), 200);
        drop(text(response).await);
    }
    assert_eq!(server.count_status(429), 0, "the published budget was never overrun");
    let arrivals = server.arrivals();
    assert!(arrivals[3].at >= Duration::from_secs(10), "the 4th waited for the reset: {:?}", arrivals[3].at);
}

/// One attempt as the wire saw it: sent at, status, Retry-After.
type OnTheWire = (std::time::Instant, u16, Option<Duration>);

/// Flask-Limiter counts on the real clock: a fixed window of 3 per 2 s. The fourth request's
/// 429 says when the window resets; the retry and a request started meanwhile wait for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flask_limiters_retry_after_is_honoured() {
    let Some(server) = ThirdParty::flask_limiter("3 per 2 second", "fixed-window") else { return };
    let key = format!("127.0.0.1:{}", server.port());
    let registry = registry(&key, "concurrency 8");
    let wire: Arc<Mutex<Vec<OnTheWire>>> = Arc::default();
    let client = hyper();
    let recording = tower::service_fn({
        let wire = Arc::clone(&wire);
        move |request: http::Request<Empty<Bytes>>| {
            let (client, wire) = (client.clone(), Arc::clone(&wire));
            async move {
                let sent = std::time::Instant::now();
                let response = client.request(request).await?;
                let retry_after = response
                    .headers()
                    .get("retry-after")
                    .and_then(|value| value.to_str().ok()?.parse::<u64>().ok().map(Duration::from_secs));
                wire.lock().push((sent, response.status().as_u16(), retry_after));
                Ok::<_, hyper_util::client::legacy::Error>(response)
            }
        }
    });
    let retry = RetryOnThrottle::new(RetryPolicy { max_attempts: 3, ..RetryPolicy::default() });
    let service =
        ServiceBuilder::new().layer(RetryLayer::new(retry)).layer(RateLimitLayer::new(registry)).service(recording);
    // Until the window's budget runs out (the first requests may straddle a window's end).
    for _ in 0..10 {
        let response = service.clone().oneshot(get(server.url("/items"))).await.unwrap();
        assert_eq!(response.status(), 200);
        drop(response.into_body().collect().await.unwrap());
        let refused = wire.lock().iter().any(|(_, status, _)| *status == 429);
        if refused {
            break;
        }
    }
    let after = service.clone().oneshot(get(server.url("/items"))).await.unwrap();
    assert_eq!(after.status(), 200);
    let wire = wire.lock().clone();
    let refusals: Vec<_> = wire.iter().filter(|(_, status, _)| *status == 429).collect();
    assert_eq!(refusals.len(), 1, "one 429, then nothing before the reset: {wire:?}");
    let (refused_at, _, retry_after) = refusals[0];
    let retry_after = retry_after.expect("Flask-Limiter sends Retry-After");
    let later: Vec<_> = wire.iter().filter(|(sent, _, _)| sent > refused_at).collect();
    assert_eq!(later.len(), 2, "the retry and the next request: {wire:?}");
    for (sent, status, _) in later {
        assert_eq!(*status, 200);
        assert!(
            *sent >= *refused_at + retry_after,
            "sent {:?} after the 429, asked {retry_after:?}",
            *sent - *refused_at
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_profile_gives_the_layer_its_hosts_and_paths() {
    let server = TestServer::start(100, Duration::from_secs(60), 0).await;
    // The demo profile at the test server: the host a bucket of 5 at 5/s, /search its own key.
    let profile = ratescope::Profile::demo_at(&server.url("/")).unwrap();
    let layer = RateLimitLayer::with_policy(profile.policy().unwrap()).build();
    let search = layer.registry().limiter_for("127.0.0.1", Some(server.addr.port()), "/search/x").unwrap();
    assert_eq!(search.key(), format!("{}/search", server.key()));
    let service = ServiceBuilder::new().layer(layer).service(hyper());
    for _ in 0..7 {
        assert_eq!(send(&service, server.url("/ok")).await.unwrap().status(), 200);
    }
    let arrivals: Vec<Duration> = server.arrivals().iter().map(|arrival| arrival.at).collect();
    assert!(arrivals[4] < Duration::from_millis(200), "a burst of 5: {arrivals:?}");
    assert!(arrivals[5] >= Duration::from_millis(200) && arrivals[6] >= Duration::from_millis(400), "{arrivals:?}");
}
