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

#[tokio::test(start_paused = true)]
async fn the_answers_usage_replaces_the_estimate_and_a_refusal_spends_no_tokens() {
    let authority = server().await;
    let tokens = BudgetSpec::sliding_window("tpm", 1000, Duration::from_secs(60)).unwrap().with_unit(Unit::tokens());
    let requests = BudgetSpec::sliding_window("rpm", 100, Duration::from_secs(60)).unwrap();
    let key: LimitKey = authority.parse().unwrap();
    let registry = Arc::new(
        Registry::from_table([(key, LimiterConfig::new().with_budget(requests).with_budget(tokens))]).unwrap(),
    );
    let (events, mut receiver) = EventSink::channel(64);
    let client = LimitedClient::builder()
        .registry(Arc::clone(&registry))
        .retry(RetryPolicy { max_attempts: 1, ..RetryPolicy::default() })
        .events(events)
        .without_timers()
        .build()
        .unwrap();
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
