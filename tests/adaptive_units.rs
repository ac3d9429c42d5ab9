//! Adaptive mode against budgets in tokens (#17 point 4): with no tokens budget configured,
//! the client learns the server's from its OpenAI-style headers and holds a request whose
//! estimate is above what the server has left, so the demo LLM route never refuses; without
//! cost rules (the requests spend no tokens as far as the client knows) the same traffic meets
//! 429s. On paused tokio time through the demo API's own handler (`MockService`).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use ratescope::engine::Unit;
use ratescope::http::{Adaptive, CostRule, LimitedClient, RequestSpec, RetryPolicy};
use ratescope::mock::{
    Api, Dialect, Latency, MockConfig, MockService, Outcome, PolicyKind, PolicySpec, RouteConfig, ServerSettings,
};
use tokio::time::Instant;

const TPM: u64 = 6_000;
const SPAN: Duration = Duration::from_secs(120);
const SEED: u64 = 4;

fn bucket(name: &str, per_minute: u64) -> PolicySpec {
    let rate = format!("{per_minute}/1m").parse().unwrap();
    PolicySpec::new(name, PolicyKind::TokenBucket { capacity: per_minute, rate })
}

fn server() -> MockService {
    let route = RouteConfig {
        api: Api::Llm,
        dialect: Dialect::OpenAi,
        latency: Latency { fixed: Duration::from_millis(400), jitter: Duration::ZERO },
        policies: vec![bucket("requests", 1000), bucket("tokens", TPM).counting(Unit::tokens())],
        ..RouteConfig::new("/v1/chat/completions")
    };
    let settings = ServerSettings { seed: Some(SEED), ..ServerSettings::default() };
    MockService::new(MockConfig { server: settings, routes: vec![route] }).unwrap()
}

/// An adaptive client with no limits of its own: what it knows of tokens comes from the headers.
fn client(service: &MockService) -> LimitedClient {
    LimitedClient::builder()
        .adaptive(Adaptive::All)
        .retry(RetryPolicy { max_attempts: 1, ..RetryPolicy::default() })
        .transport(Arc::new(service.clone()))
        .without_timers()
        .build()
        .unwrap()
}

/// A chat request reserving the prompt and all of `max_tokens`, settled from `usage` (or no
/// rule at all).
fn request(rng: &mut StdRng, with_rule: bool, n: u64) -> RequestSpec {
    let prompt = "w".repeat(rng.random_range(100..1200));
    let max_tokens = rng.random_range(100..=500u64);
    let body = serde_json::json!({"messages": [{"role": "user", "content": format!("{n} {prompt}")}], "max_tokens": max_tokens})
        .to_string();
    let url = "http://llm.test/v1/chat/completions".parse().unwrap();
    let mut spec = RequestSpec::new(http::Method::POST, url);
    if with_rule {
        let rule: CostRule = "tokens=body/4+field:max_tokens->field:usage.total_tokens".parse().unwrap();
        spec = spec.with_cost_rules(vec![rule]);
    }
    spec.body = Some(Bytes::from(body));
    spec
}

#[derive(Debug, Default)]
struct Run {
    served: u64,
    refused: u64,
    tokens: u64,
}

/// Six workers send back to back for the span; the server's log says what it served and refused.
async fn run(with_rule: bool) -> Run {
    let service = server();
    let client = client(&service);
    let start = Instant::now();
    let workers: Vec<_> = (0..6u64)
        .map(|worker| {
            let client = client.clone();
            tokio::spawn(async move {
                let mut rng = StdRng::seed_from_u64(SEED * 100 + worker);
                let mut tokens = 0;
                for n in 0.. {
                    if start.elapsed() >= SPAN {
                        break;
                    }
                    let Ok(response) = client.send(request(&mut rng, with_rule, n)).await else { continue };
                    if response.status == 200 {
                        let json: serde_json::Value = serde_json::from_slice(&response.body).unwrap();
                        tokens += json["usage"]["total_tokens"].as_u64().unwrap();
                    }
                }
                tokens
            })
        })
        .collect();
    let mut result = Run::default();
    for worker in workers {
        result.tokens += worker.await.unwrap();
    }
    for arrival in service.arrivals().iter() {
        match arrival.outcome {
            Outcome::Served(200) => result.served += 1,
            Outcome::Limited(_) => result.refused += 1,
            other => panic!("unexpected {other:?}"),
        }
    }
    result
}

#[tokio::test(start_paused = true)]
async fn adaptive_mode_holds_requests_whose_token_estimate_the_server_has_no_room_for() {
    let held = run(true).await;
    let control = run(false).await;
    println!("with cost rules: {held:?}\nwithout: {control:?}");
    assert_eq!(held.refused, 0, "the learned tokens budget keeps every request inside it: {held:?}");
    assert!(control.refused > 0, "without estimates the same traffic meets 429s: {control:?}");
    // The bucket starts full and refills TPM a minute: the span's allowance.
    let allowance = TPM + TPM * SPAN.as_secs() / 60;
    assert!(
        held.tokens * 10 >= allowance * 9,
        "waiting for the reset between reports still uses the allowance: {} of {allowance}",
        held.tokens
    );
    assert!(held.tokens >= control.tokens, "and no less of it than the refused traffic: {held:?} {control:?}");
}
