//! Adaptive mode against budgets in tokens (#17 point 4): with no tokens budget configured,
//! the client learns the server's from its OpenAI-style headers and holds a request whose
//! estimate is above what the server has left, so the demo LLM route never refuses; without
//! cost rules (the requests spend no tokens as far as the client knows) the same traffic meets
//! 429s. On paused tokio time through the demo API's own handler (`MockService`).

mod support;

use std::time::Duration;

use bytes::Bytes;
use rand::SeedableRng;
use rand::rngs::StdRng;
use ratescope::http::{Adaptive, CostRule, LimitedClient, RequestSpec};
use support::llm;
use tokio::time::Instant;

const TPM: u64 = 6_000;
const SPAN: Duration = Duration::from_secs(120);
const SEED: u64 = 4;

/// A chat request reserving the prompt and all of `max_tokens`, settled from `usage` (or no
/// rule at all).
fn request(rng: &mut StdRng, with_rule: bool, n: u64) -> RequestSpec {
    let body = llm::chat_body(rng, n, 100..1200, 100..=500);
    let mut spec = RequestSpec::new(http::Method::POST, llm::CHAT_URL.parse().unwrap());
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
    let service = llm::service(1000, TPM, Duration::from_millis(400), SEED);
    // An adaptive client with no limits of its own: what it knows of tokens comes from the headers.
    let client: LimitedClient = llm::client(&service, LimitedClient::builder().adaptive(Adaptive::All));
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
    (result.served, result.refused) = llm::served_and_refused(&service, Duration::MAX);
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
