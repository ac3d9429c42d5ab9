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

/// A loopback API whose `/chat/N` answers say `N` tokens were used, whatever was asked.
async fn lying_server() -> String {
    let app = Router::new().route(
        "/chat/{tokens}",
        post(|axum::extract::Path(tokens): axum::extract::Path<String>| async move {
            format!(r#"{{"usage": {{"total_tokens": {tokens}}}}}"#)
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr.to_string()
}

/// Sends a request estimated at 10 tokens to `/chat/{said}`; returns how long it took (all of
/// it waiting in the limiter, on paused time) and the tokens it settled at.
async fn lie(client: &LimitedClient, authority: &str, said: &str) -> (Duration, u64) {
    let rule: CostRule = "tokens=10->field:usage.total_tokens".parse().unwrap();
    let url = format!("http://{authority}/chat/{said}").parse().unwrap();
    let mut spec = RequestSpec::new(http::Method::POST, url).with_cost_rules(vec![rule]);
    spec.body = Some(Bytes::from_static(b"{}"));
    let start = tokio::time::Instant::now();
    // A stalled budget would wait for ever: give up after far longer than any bound.
    let mut log = Vec::new();
    let sent = tokio::time::timeout(Duration::from_secs(24 * 3600), client.send_recorded(spec, &mut log)).await;
    assert_eq!(sent.expect("the budget stalled").unwrap().status, 200);
    let settled = log.last().and_then(|attempt| attempt.settlement.clone()).unwrap();
    assert_eq!(settled.capped.is_empty(), said == "0", "{said}: {settled:?}");
    (start.elapsed(), settled.actual.of(&Unit::tokens()))
}

fn one_budget(
    authority: &str,
    budget: BudgetSpec,
) -> (LimitedClient, tokio::sync::mpsc::Receiver<ratescope::http::Event>) {
    let key: LimitKey = authority.parse().unwrap();
    let registry = Arc::new(Registry::from_table([(key, LimiterConfig::new().with_budget(budget))]).unwrap());
    client(registry)
}

#[tokio::test(start_paused = true)]
async fn a_lying_usage_leaves_a_bucket_at_most_one_capacity_in_debt() {
    let authority = lying_server().await;
    let bucket = BudgetSpec::token_bucket("tpm", 1000, "1000/1m".parse().unwrap()).unwrap().with_unit(Unit::tokens());
    let (client, _events) = one_budget(&authority, bucket);
    for said in ["1000000", "18446744073709551615", "1e300"] {
        // Each answer counts as the whole bucket (1000), not what it says: the next request
        // waits at most what two capacities take to refill (an empty bucket and one owed).
        let (waited, settled) = lie(&client, &authority, said).await;
        assert_eq!(settled, 1000, "{said}");
        assert!(waited <= Duration::from_secs(120), "{said}: waited {waited:?}");
    }
    let (waited, _) = lie(&client, &authority, "0").await;
    assert!(waited <= Duration::from_secs(120), "debts do not pile up: waited {waited:?}");
    assert!(waited >= Duration::from_secs(59), "but the debt is kept: waited {waited:?}");
}

#[tokio::test(start_paused = true)]
async fn a_lying_usage_of_2_pow_64_does_not_wrap_a_window() {
    let authority = lying_server().await;
    let window = BudgetSpec::sliding_window("tph", 1000, Duration::from_secs(3600)).unwrap().with_unit(Unit::tokens());
    let (client, _events) = one_budget(&authority, window);
    let (waited, settled) = lie(&client, &authority, "18446744073709551615").await;
    assert_eq!((waited, settled), (Duration::ZERO, 1000));
    // The window is shut until that admission leaves it, an hour on; not open (wrapped) and
    // not for ever.
    let (waited, settled) = lie(&client, &authority, "18446744073709551615").await;
    assert_eq!(settled, 1000);
    assert!(waited >= Duration::from_secs(3599) && waited <= Duration::from_secs(3601), "waited {waited:?}");
}

#[tokio::test(start_paused = true)]
async fn lying_answers_to_requests_in_flight_together_do_not_pile_up_debt() {
    let authority = lying_server().await;
    let bucket = BudgetSpec::token_bucket("tpm", 1000, "1000/1m".parse().unwrap()).unwrap().with_unit(Unit::tokens());
    let (client, _events) = one_budget(&authority, bucket);
    // Five requests of 10 fit at once, and each answer says a million: each counts 1000, but
    // together they leave the bucket one capacity in debt, not four.
    let lies = (0..5).map(|_| lie(&client, &authority, "1000000"));
    for (waited, settled) in futures_util::future::join_all(lies).await {
        assert_eq!((waited, settled), (Duration::ZERO, 1000));
    }
    let (waited, _) = lie(&client, &authority, "0").await;
    // One capacity owed, repaid in a minute, then the request's own 10 tokens (0.6 s).
    assert_eq!(waited, Duration::from_millis(60_600));
}
