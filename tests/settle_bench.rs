//! The bench of issue #17 for reserve-then-settle, on paused tokio time: clients keep the demo
//! API's LLM route busy for 3 simulated minutes, each request reserving an estimate of its
//! tokens; with settlement the answer's `usage.total_tokens` corrects it, reserve-only keeps it.
//!
//! The server is the demo API's own handler (`MockService`, the simulator's server) behind a
//! real `LimitedClient`; nothing is modelled twice. Deterministic: the same numbers every run.
//! `cargo test --test settle_bench -- --nocapture` prints the table (BENCHMARKS.md).

mod support;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use ratescope::engine::{BudgetSpec, LimitKey, LimiterConfig, Registry, Unit};
use ratescope::http::{CostRule, LimitedClient, RequestSpec};
use ratescope::mock::Usage;
use support::llm;
use tokio::time::Instant;

/// Tokens per minute, and the bucket's capacity (it starts full), as OpenAI's tiers have it.
const TPM: u64 = 20_000;
/// Requests per minute: loose, so tokens are what binds.
const RPM: u64 = 500;
const SPAN: Duration = Duration::from_secs(180);
/// How long a completion takes to come back.
const LATENCY: Duration = Duration::from_secs(1);
const SEED: u64 = 17;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Estimate {
    /// The true usage times a factor drawn uniformly from 0.7 to 1.3.
    OffBy30Percent,
    /// The prompt and all of `max_tokens`: the estimate that is never low.
    Ceiling,
}

#[derive(Debug, Clone, Copy)]
struct Scenario {
    estimate: Estimate,
    settle: bool,
    /// Requests in flight at once (one worker each, back to back).
    in_flight: usize,
}

#[derive(Debug, Default)]
struct Run {
    admitted: u64,
    refused: u64,
    /// Tokens the server admitted within the span.
    tokens: u64,
}

impl Run {
    /// The share of the span's allowance used: the full bucket plus what it refills.
    fn used(&self) -> f64 {
        let allowance = TPM + TPM * SPAN.as_secs() / 60;
        self.tokens as f64 / allowance as f64
    }
}

/// A client that knows the server's published limits, in the same units.
fn client(service: &ratescope::mock::MockService) -> LimitedClient {
    let tokens = BudgetSpec::token_bucket("tpm", TPM, format!("{TPM}/1m").parse().unwrap()).unwrap();
    let requests = BudgetSpec::token_bucket("rpm", RPM, format!("{RPM}/1m").parse().unwrap()).unwrap();
    let config = LimiterConfig::new().with_budget(requests).with_budget(tokens.with_unit(Unit::tokens()));
    let key: LimitKey = "llm.test".parse().unwrap();
    llm::client(service, LimitedClient::builder().registry(Arc::new(Registry::from_table([(key, config)]).unwrap())))
}

/// One chat request of a random size and its rule: the scenario's estimate, settled or not.
fn request(rng: &mut StdRng, scenario: Scenario, n: u64) -> RequestSpec {
    let body = llm::chat_body(rng, n, 200..2000, 200..=800);
    let usage = Usage::of(body.as_bytes(), SEED).unwrap();
    let estimate = match scenario.estimate {
        Estimate::OffBy30Percent => (usage.total_tokens() as f64 * rng.random_range(0.7..=1.3)).round() as u64,
        Estimate::Ceiling => usage.ceiling(),
    };
    let settle = if scenario.settle { "->field:usage.total_tokens" } else { "" };
    let rule: CostRule = format!("tokens={estimate}{settle}").parse().unwrap();
    let mut spec = RequestSpec::new(http::Method::POST, llm::CHAT_URL.parse().unwrap()).with_cost_rules(vec![rule]);
    spec.body = Some(Bytes::from(body));
    spec
}

/// Workers send back to back until the span is over; what the server admitted within it counts.
async fn run(scenario: Scenario) -> Run {
    let service = llm::service(RPM, TPM, LATENCY, SEED);
    let client = client(&service);
    let start = Instant::now();
    let workers: Vec<_> = (0..scenario.in_flight as u64)
        .map(|worker| {
            let client = client.clone();
            tokio::spawn(async move {
                let mut rng = StdRng::seed_from_u64(SEED * 1000 + worker);
                let mut tokens = 0;
                for n in 0.. {
                    if start.elapsed() >= SPAN {
                        break;
                    }
                    let Ok(response) = client.send(request(&mut rng, scenario, n)).await else { continue };
                    let json: serde_json::Value = serde_json::from_slice(&response.body).unwrap();
                    if Instant::now() - response.service_time < start + SPAN {
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
    (result.admitted, result.refused) = llm::served_and_refused(&service, SPAN);
    result
}

fn row(name: &str, scenario: Scenario, result: &Run) {
    println!(
        "| {name} | {} | {} | {} | {} | {:.1}% |",
        scenario.in_flight,
        result.admitted,
        result.refused,
        result.tokens,
        result.used() * 100.0
    );
}

#[tokio::test(start_paused = true)]
async fn settlement_uses_the_tokens_allowance_without_a_429_where_reserve_only_cannot() {
    println!(
        "\n3 simulated minutes against the demo LLM route: {TPM} tokens/min (a bucket, full at the start), {RPM} requests/min, {}s per completion",
        LATENCY.as_secs()
    );
    println!("| client | in flight | admitted | 429s | tokens | of the allowance |");
    println!("|---|---|---|---|---|---|");
    let scenario = |estimate, settle, in_flight| Scenario { estimate, settle, in_flight };
    let (off, ceiling) = (Estimate::OffBy30Percent, Estimate::Ceiling);
    let mut runs = Vec::new();
    for (name, scenario) in [
        ("estimates ±30%, settled", scenario(off, true, 1)),
        ("estimates ±30%, settled", scenario(off, true, 8)),
        ("estimates ±30%, reserve-only", scenario(off, false, 1)),
        ("estimates ±30%, reserve-only", scenario(off, false, 8)),
        ("ceiling (prompt + max_tokens), settled", scenario(ceiling, true, 8)),
        ("ceiling (prompt + max_tokens), reserve-only", scenario(ceiling, false, 8)),
    ] {
        let run = run(scenario).await;
        row(name, scenario, &run);
        runs.push(run);
    }
    for settled in [&runs[0], &runs[1], &runs[4]] {
        assert_eq!(settled.refused, 0, "settled: no 429: {settled:?}");
        assert!(settled.used() >= 0.95, "settled: {:.1}% of the allowance used", settled.used() * 100.0);
    }
    for (reserve_only, settled) in [(&runs[2], &runs[0]), (&runs[3], &runs[1]), (&runs[5], &runs[4])] {
        assert!(
            reserve_only.refused > 0 || reserve_only.tokens < settled.tokens,
            "reserve-only shows 429s or less goodput: {reserve_only:?} vs {settled:?}"
        );
    }
}
