//! The limited client against a real axum server on 127.0.0.1, on paused tokio time.

mod support;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use ratescope::engine::{LimitKey, LimiterConfig, Priority, Registry};
use ratescope::http::retry::GiveUpReason;
use ratescope::http::{
    Adaptive, ClientError, EventKind, EventSink, LimitedClient, RedirectPolicy, RequestSpec, RetryPolicy,
};
use support::TestServer;
use tokio::time::Instant;

fn registry_for(server: &TestServer, config: LimiterConfig) -> Arc<Registry> {
    let key: LimitKey = server.key().parse().unwrap();
    Arc::new(Registry::from_table([(key, config)]).unwrap())
}

fn client(registry: Arc<Registry>, retry: RetryPolicy) -> LimitedClient {
    LimitedClient::builder().registry(registry).retry(retry).without_timers().seed(1).build().unwrap()
}

#[tokio::test(start_paused = true)]
async fn retry_after_is_honoured_to_the_millisecond() {
    let server = TestServer::start(100, Duration::from_secs(60), 1).await;
    let client = client(registry_for(&server, LimiterConfig::new()), RetryPolicy::default());
    let response = client.get(server.url("/throttle-once")).await.unwrap();
    assert_eq!(response.status, 200);
    assert_eq!(response.attempts, 2);
    let arrivals = server.arrivals();
    assert_eq!(arrivals.len(), 2);
    let gap = arrivals[1].at - arrivals[0].at;
    assert!(gap >= Duration::from_secs(2) && gap <= Duration::from_millis(2001), "retried after {gap:?}");
}

#[tokio::test(start_paused = true)]
async fn one_429_pauses_every_waiter_of_the_key() {
    let server = TestServer::start(100, Duration::from_secs(60), 1).await;
    let client = client(registry_for(&server, LimiterConfig::new().with_concurrency(1)), RetryPolicy::default());
    let first = tokio::spawn({
        let (client, url) = (client.clone(), server.url("/throttle-once"));
        async move { client.get(url).await }
    });
    // Let the first request take the only slot, then queue two more behind it.
    while server.arrivals().is_empty() && !first.is_finished() {
        tokio::task::yield_now().await;
    }
    let others: Vec<_> = (0..2)
        .map(|_| {
            let (client, url) = (client.clone(), server.url("/ok"));
            tokio::spawn(async move { client.get(url).await })
        })
        .collect();
    assert_eq!(first.await.unwrap().unwrap().status, 200);
    for other in others {
        assert_eq!(other.await.unwrap().unwrap().status, 200);
    }
    let arrivals = server.arrivals();
    assert_eq!(arrivals[0].status, 429);
    assert!(
        arrivals[1..].iter().all(|a| a.at >= Duration::from_secs(2)),
        "nothing of the key was sent during the 2 s pause: {:?}",
        arrivals.iter().map(|a| (a.path.as_str(), a.at)).collect::<Vec<_>>()
    );
    assert_eq!(arrivals.len(), 4);
}

#[tokio::test(start_paused = true)]
async fn retries_stop_at_the_maximum_with_an_error_naming_the_last_status() {
    let server = TestServer::start(100, Duration::from_secs(60), 0).await;
    let retry = RetryPolicy { max_attempts: 3, ..RetryPolicy::default() };
    let client = client(registry_for(&server, LimiterConfig::new()), retry);
    let err = client.get(server.url("/always-429")).await.unwrap_err();
    assert!(matches!(
        &err,
        ClientError::GaveUp { reason: GiveUpReason::AttemptsExhausted { attempts: 3, .. }, last_status: Some(429), .. }
    ));
    assert_eq!(err.to_string(), "gave up after 3 attempts; last: 429 Too Many Requests");
    assert_eq!(server.count_status(429), 3);
}

#[tokio::test(start_paused = true)]
async fn a_retry_after_beyond_the_maximum_fails_at_once() {
    let server = TestServer::start(100, Duration::from_secs(60), 1).await;
    let retry = RetryPolicy { max_retry_after: Duration::from_secs(1), ..RetryPolicy::default() };
    let client = client(registry_for(&server, LimiterConfig::new()), retry);
    let started = Instant::now();
    let err = client.get(server.url("/throttle-once")).await.unwrap_err();
    assert!(matches!(err, ClientError::GaveUp { reason: GiveUpReason::RetryAfterTooLong { .. }, .. }), "{err}");
    assert!(started.elapsed() < Duration::from_millis(10), "no hang: failed after {:?}", started.elapsed());
}

#[tokio::test(start_paused = true)]
async fn adaptive_mode_gets_no_429_from_a_server_that_publishes_its_budget() {
    let server = TestServer::start(5, Duration::from_secs(10), 0).await;
    let registry = registry_for(&server, LimiterConfig::new().with_concurrency(1));
    let client = LimitedClient::builder()
        .registry(registry)
        .adaptive(Adaptive::Keys(HashSet::from([server.key()])))
        .without_timers()
        .build()
        .unwrap();
    let started = Instant::now();
    let tasks: Vec<_> = (0..20)
        .map(|_| {
            let (client, url) = (client.clone(), server.url("/limited"));
            tokio::spawn(async move { client.get(url).await })
        })
        .collect();
    for task in tasks {
        assert_eq!(task.await.unwrap().unwrap().status, 200);
    }
    assert_eq!(server.count_status(429), 0, "the server's published budget was respected");
    assert_eq!(server.count_status(200), 20);
    assert!(started.elapsed() >= Duration::from_secs(30), "20 requests at 5 per 10 s span three resets");
    let learned = client.registry().limiter_for("127.0.0.1", Some(server.addr.port()), "/").unwrap().config();
    // The published window, plus a margin for a request counted on arrival rather than admission.
    assert!(learned.budgets.iter().any(|b| b.name == "server:win" && b.describe() == "window 5/10025ms"));
}

#[tokio::test(start_paused = true)]
async fn without_adaptive_mode_the_same_burst_meets_429s_and_backs_off() {
    let server = TestServer::start(5, Duration::from_secs(10), 0).await;
    let client = client(registry_for(&server, LimiterConfig::new().with_concurrency(1)), RetryPolicy::default());
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let (client, url) = (client.clone(), server.url("/limited"));
            tokio::spawn(async move { client.get(url).await })
        })
        .collect();
    for task in tasks {
        assert_eq!(task.await.unwrap().unwrap().status, 200, "backoff alone still gets every request through");
    }
    assert!(server.count_status(429) >= 1);
}

#[tokio::test(start_paused = true)]
async fn a_cache_hit_sends_nothing_and_skips_the_limiter() {
    let server = TestServer::start(100, Duration::from_secs(60), 0).await;
    let (sink, mut events) = EventSink::channel(64);
    let client = LimitedClient::builder()
        .registry(registry_for(&server, LimiterConfig::new().with_concurrency(1)))
        .cache(Default::default())
        .events(sink)
        .without_timers()
        .build()
        .unwrap();
    let first = client.get(server.url("/cached")).await.unwrap();
    let second = client.get(server.url("/cached")).await.unwrap();
    assert_eq!(server.arrivals().len(), 1, "the second GET was served from the cache");
    assert!(!first.from_cache && second.from_cache);
    assert_eq!((second.attempts, &second.body[..]), (0, &first.body[..]));
    assert_eq!(client.cache_stats().hits, 1);
    let mut kinds = Vec::new();
    while let Ok(event) = events.try_recv() {
        kinds.push((event.request_id, std::mem::discriminant(&event.kind), event.kind));
    }
    let second_events: Vec<_> = kinds.iter().filter(|(id, ..)| *id == 1).map(|(_, _, kind)| kind.clone()).collect();
    assert!(matches!(second_events[0], EventKind::CacheHit { revalidated: false }));
    assert!(second_events.iter().all(|kind| !matches!(kind, EventKind::Queued { .. } | EventKind::Sent { .. })));
}

#[tokio::test(start_paused = true)]
async fn events_follow_a_request_from_queue_to_finish() {
    let server = TestServer::start(100, Duration::from_secs(60), 0).await;
    let (sink, mut events) = EventSink::channel(64);
    let client = LimitedClient::builder()
        .registry(registry_for(&server, LimiterConfig::new()))
        .events(sink)
        .without_timers()
        .build()
        .unwrap();
    let mut url = server.url("/ok");
    url.set_query(Some("api_key=secret"));
    client.send(RequestSpec::get(url).with_priority(Priority::High)).await.unwrap();
    let mut seen = Vec::new();
    while let Ok(event) = events.try_recv() {
        assert_eq!(event.key.as_deref(), Some(server.key().as_str()));
        seen.push(event.kind);
    }
    assert!(matches!(seen[0], EventKind::Queued { attempt: 1, priority: Priority::High }));
    assert!(matches!(seen[1], EventKind::Admitted { attempt: 1, .. }));
    assert!(matches!(&seen[2], EventKind::Sent { path, .. } if path == "/ok"), "no query string (secrets) in events");
    assert!(matches!(&seen[3], EventKind::Response { status: 200, .. }));
    assert!(matches!(seen[4], EventKind::Finished { status: 200, attempts: 1, .. }));
    assert!(!format!("{seen:?}").contains("secret"));
}

#[tokio::test(start_paused = true)]
async fn hosts_without_an_entry_pass_straight_through() {
    let server = TestServer::start(100, Duration::from_secs(60), 0).await;
    let (sink, mut events) = EventSink::channel(64);
    let client = LimitedClient::builder().events(sink).without_timers().build().unwrap();
    client.get(server.url("/ok")).await.unwrap();
    let first = events.try_recv().unwrap();
    assert_eq!(first.key, None);
    assert!(matches!(first.kind, EventKind::Sent { .. }), "no queueing for an unknown host");
}

#[tokio::test]
async fn an_unreachable_host_gives_a_clear_error() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    let client = LimitedClient::builder().build().unwrap();
    let err = client.get(format!("http://127.0.0.1:{port}/").parse().unwrap()).await.unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, ClientError::Transport { attempts: 1, .. }), "{text}");
    assert!(text.starts_with("could not reach 127.0.0.1: connection error:"), "{text}");
    assert!(text.contains("refused"), "the cause is named: {text}");
}

#[tokio::test(start_paused = true)]
async fn a_request_waiting_to_retry_holds_no_concurrency_slot() {
    let server = TestServer::start(100, Duration::from_secs(60), 1).await;
    let registry = registry_for(&server, LimiterConfig::new().with_concurrency(1));
    let client = client(Arc::clone(&registry), RetryPolicy::default());
    let request = tokio::spawn({
        let (client, url) = (client.clone(), server.url("/throttle-once"));
        async move { client.get(url).await }
    });
    while server.arrivals().is_empty() {
        tokio::task::yield_now().await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let snapshot = registry.limiter_for("127.0.0.1", Some(server.addr.port()), "/").unwrap().snapshot();
    assert_eq!(snapshot.in_flight, 0, "the 429'd request sleeps without its slot");
    let pause = snapshot.paused.expect("the whole key is paused meanwhile");
    assert_eq!(pause.remaining, Duration::from_secs(1));
    assert_eq!(pause.reason, "429 Too Many Requests from the server, pausing 2.0s");
    assert_eq!(request.await.unwrap().unwrap().status, 200);
}

#[tokio::test(start_paused = true)]
async fn adaptive_mode_gives_an_unconfigured_host_the_servers_limits() {
    let server = TestServer::start(3, Duration::from_secs(10), 0).await;
    let client = LimitedClient::builder().adaptive(Adaptive::All).without_timers().build().unwrap();
    for _ in 0..7 {
        assert_eq!(client.get(server.url("/limited")).await.unwrap().status, 200);
    }
    assert_eq!(server.count_status(429), 0, "learned from the first response, paused at remaining 0");
    let port = Some(server.addr.port());
    let limiter = client.registry().limiter_for("127.0.0.1", port, "/limited").expect("a limiter was created");
    assert_eq!(limiter.key(), format!("127.0.0.1:{}", server.addr.port()), "keyed on the port the URL names");
    assert!(client.registry().limiter_for("127.0.0.1", None, "/limited").is_none(), "not every port of the host");
    assert_eq!(limiter.config().describe(), "window 3/10025ms", "published, plus a 25 ms margin");
}

#[tokio::test(start_paused = true)]
async fn per_host_headers_and_per_key_retry_policies_apply() {
    let server = TestServer::start(100, Duration::from_secs(60), 0).await;
    let mut headers = http::HeaderMap::new();
    headers.insert("x-api-key", "k1".parse().unwrap());
    let client = LimitedClient::builder()
        .registry(registry_for(&server, LimiterConfig::new()))
        .host_headers(&server.key(), headers)
        .key_retry(server.key(), RetryPolicy { max_attempts: 1, ..RetryPolicy::default() })
        .without_timers()
        .build()
        .unwrap();
    client.get(server.url("/ok")).await.unwrap();
    assert_eq!(server.arrivals()[0].headers.get("x-api-key").unwrap(), "k1");
    let err = client.get(server.url("/always-429")).await.unwrap_err();
    assert!(matches!(err, ClientError::GaveUp { attempts: 1, .. }), "the key's own policy: one attempt");
}

/// A server on 127.0.0.1 whose `/away` redirects to `elsewhere`, and whose `/hop` redirects
/// to its own `/landed`.
async fn redirecting_server(elsewhere: url::Url) -> std::net::SocketAddr {
    use axum::response::Redirect;
    use axum::routing::get;
    let app = axum::Router::new()
        .route("/away", get(move || async move { Redirect::temporary(elsewhere.as_str()) }))
        .route("/hop", get(|| async { Redirect::temporary("/landed") }))
        .route("/landed", get(|| async { "landed" }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

/// Both wires (reqwest, and the HTTP/1.1 wire of raw bursts) answer 3xx alike: same-origin
/// redirects are followed, another origin's is the answer unless the host's policy allows it,
/// and then the other origin gets the caller's headers without credentials, never the host's.
#[tokio::test(start_paused = true)]
async fn redirects_follow_the_host_policy_alike_on_both_wires() {
    for http1_wire in [false, true] {
        let other = TestServer::start(100, Duration::from_secs(60), 0).await;
        let addr = redirecting_server(other.url("/ok")).await;
        let base = url::Url::parse(&format!("http://{addr}/")).unwrap();
        let mut secret = http::HeaderMap::new();
        secret.insert("x-api-key", "k1".parse().unwrap());
        let builder = || {
            LimitedClient::builder()
                .host_headers(&addr.to_string(), secret.clone())
                .http1_direct(http1_wire)
                .without_timers()
        };
        let mut caller = http::HeaderMap::new();
        caller.insert("authorization", "Bearer caller-token".parse().unwrap());
        caller.insert("x-trace", "t1".parse().unwrap());
        let request =
            |path: &str| RequestSpec { headers: caller.clone(), ..RequestSpec::get(base.join(path).unwrap()) };

        let client = builder().build().unwrap();
        let response = client.send(request("away")).await.unwrap();
        assert_eq!(response.status, 307, "wire {http1_wire}: the cross-origin redirect is the answer");
        assert!(other.arrivals().is_empty(), "wire {http1_wire}: the other origin received nothing, and so no key");
        let response = client.send(request("hop")).await.unwrap();
        assert_eq!(
            (response.status.as_u16(), response.body.as_ref()),
            (200, b"landed".as_ref()),
            "wire {http1_wire}: same origin is followed"
        );

        let client = builder().redirects(&addr.to_string(), RedirectPolicy::AnyOrigin).build().unwrap();
        let response = client.send(request("away")).await.unwrap();
        assert_eq!(response.status, 200, "wire {http1_wire}: allowed, the redirect is followed");
        let arrivals = other.arrivals();
        assert_eq!(arrivals.len(), 1);
        let sent = &arrivals[0].headers;
        assert!(sent.get("x-api-key").is_none(), "wire {http1_wire}: the host's key went to another origin");
        assert!(sent.get("authorization").is_none(), "wire {http1_wire}: credentials went to another origin");
        assert_eq!(sent.get("x-trace").unwrap(), "t1", "wire {http1_wire}: the caller's other headers go along");

        let client = builder().redirects(&addr.to_string(), RedirectPolicy::None).build().unwrap();
        assert_eq!(client.send(request("hop")).await.unwrap().status, 307, "wire {http1_wire}: policy none");
    }
}

#[tokio::test(start_paused = true)]
async fn a_retry_after_beyond_the_maximum_does_not_hold_the_rest_of_the_key() {
    let server = TestServer::start(100, Duration::from_secs(60), 0).await;
    let client = client(registry_for(&server, LimiterConfig::new().with_concurrency(1)), RetryPolicy::default());
    let started = Instant::now();
    let tasks: Vec<_> = (0..6)
        .map(|_| {
            let (client, url) = (client.clone(), server.url("/go-away"));
            tokio::spawn(async move { client.get(url).await })
        })
        .collect();
    for task in tasks {
        let err = task.await.unwrap().unwrap_err();
        assert!(matches!(err, ClientError::GaveUp { reason: GiveUpReason::RetryAfterTooLong { .. }, .. }), "{err}");
    }
    assert_eq!(server.count_status(429), 6, "each asked once and was told the same");
    assert!(started.elapsed() < Duration::from_secs(1), "no 5-minute pause per request: {:?}", started.elapsed());
}

#[tokio::test]
async fn limits_refused_on_a_running_client_are_a_typed_error_and_change_nothing() {
    let registry = Arc::new(Registry::new());
    let client = LimitedClient::builder().registry(Arc::clone(&registry)).build().unwrap();
    let key: LimitKey = "api.example.com".parse().unwrap();
    client.set_limits(key.clone(), LimiterConfig::new().with_concurrency(2)).unwrap();
    let err = client.set_limits(key, LimiterConfig::new().with_concurrency(0)).unwrap_err();
    assert!(matches!(err, ClientError::Limits(_)), "not a build error: {err}");
    assert_eq!(err.kind(), "limits refused");
    assert!(err.to_string().contains("concurrency"), "{err}");
    let kept = registry.limiter_for("api.example.com", Some(443), "/").unwrap().snapshot();
    assert_eq!(kept.concurrency, Some(2), "the refused limits changed nothing");
}

#[tokio::test(start_paused = true)]
async fn a_shedding_client_refuses_a_request_that_would_wait_too_long_and_sends_nothing() {
    use ratescope::engine::{BudgetSpec, Shedding};
    let server = TestServer::start(100, Duration::from_secs(60), 1).await;
    // One request per 10 s; the client queues at most 2 s of waiting.
    let bucket = BudgetSpec::token_bucket("rate", 1, "6/min".parse().unwrap()).unwrap();
    let registry = registry_for(&server, LimiterConfig::new().with_budget(bucket));
    let shedding = Shedding { max_queue_wait: Duration::from_secs(2), max_queue_len: 10 };
    let shedder = LimitedClient::builder().registry(registry).shedding(shedding).without_timers().build().unwrap();
    assert_eq!(shedder.get(server.url("/ok")).await.unwrap().status, 200);
    let started = Instant::now();
    let err = shedder.get(server.url("/ok")).await.unwrap_err();
    assert!(matches!(&err, ClientError::Shed { key, .. } if key == &server.key()), "{err:?}");
    assert!(err.to_string().contains("longer than the queueing bound"), "{err}");
    assert_eq!(started.elapsed(), Duration::ZERO, "refused at once, not after waiting");
    assert_eq!(server.arrivals().len(), 1, "the refused request was never sent");
    // A client without shedding waits its turn instead.
    let patient = client(
        registry_for(
            &server,
            LimiterConfig::new().with_budget(BudgetSpec::token_bucket("rate", 1, "6/min".parse().unwrap()).unwrap()),
        ),
        RetryPolicy::default(),
    );
    patient.get(server.url("/ok")).await.unwrap();
    let waited = Instant::now();
    assert_eq!(patient.get(server.url("/ok")).await.unwrap().status, 200);
    assert!(waited.elapsed() >= Duration::from_secs(9), "waited {:?}", waited.elapsed());
}
