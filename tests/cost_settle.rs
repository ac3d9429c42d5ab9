//! Reserve then settle through the client, over a real loopback server on paused time: a
//! request reserves its rule's estimate of tokens, and the answer's usage settles it.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::http::StatusCode;
use axum::routing::post;
use ratescope::engine::{BudgetSpec, LimitKey, LimiterConfig, Registry, Unit};
use ratescope::http::{CostRule, EventKind, EventSink, LimitedClient, RequestSpec, RetryPolicy};

/// Answers with a usage block: twice the tokens the prompt's length suggests.
async fn chat(body: Bytes) -> String {
    format!(r#"{{"usage": {{"total_tokens": {}}}}}"#, body.len() / 2)
}

async fn server() -> String {
    let app = Router::new()
        .route("/chat", post(chat))
        .route("/refuse", post(|| async { (StatusCode::TOO_MANY_REQUESTS, r#"{"error": "slow down"}"#) }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr.to_string()
}

/// A client of `registry` that tries once and reports its events, for paused time.
fn client(registry: Arc<Registry>) -> (LimitedClient, tokio::sync::mpsc::Receiver<ratescope::http::Event>) {
    let (events, receiver) = EventSink::channel(256);
    let client = LimitedClient::builder()
        .registry(registry)
        .retry(RetryPolicy { max_attempts: 1, ..RetryPolicy::default() })
        .events(events)
        .without_timers()
        .build()
        .unwrap();
    (client, receiver)
}

#[tokio::test(start_paused = true)]
async fn the_answers_usage_replaces_the_estimate_and_a_refusal_spends_no_tokens() {
    let authority = server().await;
    let tokens = BudgetSpec::sliding_window("tpm", 1000, Duration::from_secs(60)).unwrap().with_unit(Unit::tokens());
    let requests = BudgetSpec::sliding_window("rpm", 100, Duration::from_secs(60)).unwrap();
    let key: LimitKey = authority.parse().unwrap();
    let registry = Arc::new(
        Registry::from_table([(key, LimiterConfig::new().with_budget(requests).with_budget(tokens))]).unwrap(),
    );
    let (client, mut receiver) = client(Arc::clone(&registry));
    let rule: CostRule = "tokens=body/4->field:usage.total_tokens".parse().unwrap();
    let prompt = Bytes::from(vec![b'x'; 40]);
    let request = |path: &str| {
        let mut spec = RequestSpec::new(http::Method::POST, format!("http://{authority}{path}").parse().unwrap())
            .with_cost_rules(vec![rule.clone()]);
        spec.body = Some(prompt.clone());
        spec
    };
    for _ in 0..3 {
        assert_eq!(client.send(request("/chat")).await.unwrap().status, 200);
    }
    let limiter =
        registry.limiter_for("127.0.0.1", authority.rsplit(':').next().and_then(|p| p.parse().ok()), "/chat").unwrap();
    let used: Vec<Option<u64>> = limiter.snapshot().budgets.iter().map(|budget| budget.window_used).collect();
    assert_eq!(used, [Some(3), Some(60)], "3 requests; 3 × 20 tokens as the answers said, not 3 × 10 estimated");

    let refused = client.send(request("/refuse")).await.unwrap_err();
    assert!(matches!(refused, ratescope::http::ClientError::GaveUp { last_status: Some(429), .. }), "{refused:?}");
    let used: Vec<Option<u64>> = limiter.snapshot().budgets.iter().map(|budget| budget.window_used).collect();
    assert_eq!(used, [Some(4), Some(60)], "the refusal counts as a request and spends no tokens");

    let mut settled = Vec::new();
    while let Ok(event) = receiver.try_recv() {
        if let EventKind::Settled { reserved, actual, .. } = event.kind {
            settled.push((reserved.of(&Unit::tokens()), actual.of(&Unit::tokens())));
        }
    }
    assert_eq!(settled, [(10, 20), (10, 20), (10, 20), (10, 0)]);
}

/// The demo API's LLM route alone: 60 requests and 10,000 tokens a minute, OpenAI's headers.
async fn llm_server() -> ratescope::mock::MockServer {
    use ratescope::mock::{Api, Dialect, MockConfig, MockServer, PolicyKind, PolicySpec, RouteConfig};
    let bucket = |name: &str, capacity: u64, rate: &str| {
        PolicySpec::new(name, PolicyKind::TokenBucket { capacity, rate: rate.parse().unwrap() })
    };
    let route = RouteConfig {
        api: Api::Llm,
        dialect: Dialect::OpenAi,
        policies: vec![bucket("requests", 60, "60/1m"), bucket("tokens", 10_000, "10000/1m").counting(Unit::tokens())],
        ..RouteConfig::new("/v1/chat/completions")
    };
    let config = MockConfig { server: Default::default(), routes: vec![route] };
    MockServer::start(config, "127.0.0.1:0".parse().unwrap()).await.unwrap()
}

#[tokio::test(start_paused = true)]
async fn the_drop_of_the_remaining_tokens_header_settles_each_answer_after_the_first() {
    let server = llm_server().await;
    let authority = format!("127.0.0.1:{}", server.addr().port());
    let tokens =
        BudgetSpec::token_bucket("tpm", 10_000, "10000/1m".parse().unwrap()).unwrap().with_unit(Unit::tokens());
    let key: LimitKey = authority.parse().unwrap();
    let registry = Arc::new(Registry::from_table([(key, LimiterConfig::new().with_budget(tokens))]).unwrap());
    let (client, mut receiver) = client(registry);
    let rule: CostRule = "tokens=500->drop:x-ratelimit-remaining-tokens".parse().unwrap();
    let url: url::Url = format!("http://{authority}/v1/chat/completions").parse().unwrap();
    let mut used = Vec::new();
    for n in 0..5 {
        if n == 3 {
            // A minute later the server's bucket is full again: its header rises.
            tokio::time::advance(Duration::from_secs(60)).await;
        }
        let body = format!(r#"{{"messages": [{{"content": "question {n}"}}], "max_tokens": 800}}"#);
        used.push(ratescope::mock::Usage::of(body.as_bytes(), 0).unwrap().total_tokens());
        let mut spec = RequestSpec::new(http::Method::POST, url.clone()).with_cost_rules(vec![rule.clone()]);
        spec.body = Some(Bytes::from(body));
        assert_eq!(client.send(spec).await.unwrap().status, 200);
    }
    let mut settled = Vec::new();
    while let Ok(event) = receiver.try_recv() {
        if let EventKind::Settled { actual, .. } = event.kind {
            settled.push(actual.of(&Unit::tokens()));
        }
    }
    // The first answer has nothing to compare with, and the fourth's value rose (a refill):
    // both keep the estimate; every other answer settles to exactly its usage.
    assert_eq!(settled, [500, used[1], used[2], 500, used[4]]);
    server.shutdown().await.unwrap();
}
