//! Request coalescing in the limited client, against a real axum server on 127.0.0.1, on
//! paused tokio time: identical GETs in flight share one upstream exchange.

mod support;

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use ratescope::engine::{LimitKey, LimiterConfig, Registry};
use ratescope::http::{EventKind, EventSink, LimitedClient, RequestSpec, RetryPolicy};
use ratescope::run::{Burst, BurstSpec};
use support::TestServer;

fn client(server: &TestServer, coalesce: bool) -> LimitedClient {
    let key: LimitKey = server.key().parse().unwrap();
    let registry = Arc::new(Registry::from_table([(key, LimiterConfig::new().with_concurrency(4))]).unwrap());
    LimitedClient::builder().registry(registry).coalesce(coalesce).without_timers().seed(1).build().unwrap()
}

async fn identical_gets(client: &LimitedClient, url: url::Url, n: usize) -> Vec<ratescope::http::LimitedResponse> {
    let sends = (0..n).map(|_| {
        let (client, url) = (client.clone(), url.clone());
        tokio::spawn(async move { client.get(url).await })
    });
    join_all(sends).await.into_iter().map(|joined| joined.unwrap().unwrap()).collect()
}

#[tokio::test(start_paused = true)]
async fn ten_identical_gets_in_flight_make_one_upstream_request() {
    let server = TestServer::start(100, Duration::from_secs(60), 0).await;
    let responses = identical_gets(&client(&server, true), server.url("/slow"), 10).await;
    assert_eq!(server.arrivals().len(), 1, "one exchange for ten identical requests");
    assert!(responses.iter().all(|response| response.status == 200 && response.body == "slow"));
    assert_eq!(responses.iter().filter(|response| response.coalesced).count(), 9);
    assert_eq!(responses.iter().filter(|response| response.coalesced).map(|r| r.attempts).sum::<u32>(), 0);
}

#[tokio::test(start_paused = true)]
async fn without_coalescing_each_request_goes_upstream() {
    let server = TestServer::start(100, Duration::from_secs(60), 0).await;
    let responses = identical_gets(&client(&server, false), server.url("/slow"), 10).await;
    assert_eq!(server.arrivals().len(), 10);
    assert!(responses.iter().all(|response| !response.coalesced));
}

#[tokio::test(start_paused = true)]
async fn requests_that_differ_in_a_header_or_method_or_body_do_not_share() {
    let server = TestServer::start(100, Duration::from_secs(60), 0).await;
    let client = client(&server, true);
    let url = server.url("/slow");
    let with_header = |value: &'static str| {
        let mut spec = RequestSpec::get(url.clone());
        spec.headers.insert("authorization", http::HeaderValue::from_static(value));
        spec
    };
    let mut with_body = RequestSpec::get(url.clone());
    with_body.body = Some(bytes::Bytes::from_static(b"x"));
    let specs = [with_header("Bearer one"), with_header("Bearer two"), with_body.clone(), with_body];
    let sends = specs.into_iter().map(|spec| {
        let client = client.clone();
        tokio::spawn(async move { client.send(spec).await })
    });
    for joined in join_all(sends).await {
        assert!(!joined.unwrap().unwrap().coalesced);
    }
    assert_eq!(server.arrivals().len(), 4);
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_leader_hands_its_flight_to_a_follower() {
    let server = TestServer::start(100, Duration::from_secs(60), 0).await;
    let client = client(&server, true);
    let url = server.url("/slow");
    let leader = tokio::spawn({
        let (client, url) = (client.clone(), url.clone());
        async move { client.get(url).await }
    });
    while server.arrivals().is_empty() {
        tokio::task::yield_now().await;
    }
    let follower = tokio::spawn({
        let (client, url) = (client.clone(), url.clone());
        async move { client.get(url).await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    leader.abort();
    let response = follower.await.unwrap().unwrap();
    assert_eq!(response.status, 200);
    assert!(!response.coalesced, "the follower led a new flight of its own");
    assert_eq!(server.arrivals().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn followers_report_coalesced_and_a_burst_counts_what_coalescing_saved() {
    let server = TestServer::start(100, Duration::from_secs(60), 0).await;
    let (sink, mut events) = EventSink::channel(1024);
    let spec = BurstSpec {
        limits: Some(LimiterConfig::new().with_concurrency(2)),
        retry: RetryPolicy::default(),
        coalesce: true,
        ..BurstSpec::get(server.url("/slow"), 12)
    };
    let client = spec.client_builder(sink).unwrap().without_timers().build().unwrap();
    let (summary, _) = Burst::start(spec, client).unwrap().finish().await;
    assert_eq!(summary.succeeded, 12);
    assert_eq!(summary.coalesced, 11, "{summary}");
    assert_eq!(summary.sent, 1);
    assert!(summary.to_string().contains("saved:         0 by cache, 11 by coalescing"), "{summary}");
    let mut coalesced = 0;
    while let Ok(event) = events.try_recv() {
        coalesced += usize::from(event.kind == EventKind::Coalesced);
    }
    assert_eq!(coalesced, 11);
}
