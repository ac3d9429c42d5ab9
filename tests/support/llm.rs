//! The demo API's LLM route as a transport (`MockService`, on the test's paused clock) and the
//! chat requests the token tests send it.

use std::ops::{Range, RangeInclusive};
use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use rand::rngs::StdRng;
use ratescope::engine::Unit;
use ratescope::http::{ClientBuilder, LimitedClient, RetryPolicy};
use ratescope::mock::{
    Api, Dialect, Latency, MockConfig, MockService, Outcome, PolicyKind, PolicySpec, RouteConfig, ServerSettings,
};

/// Where the chat requests go (the host is only a name: the service answers in-process).
pub const CHAT_URL: &str = "http://llm.test/v1/chat/completions";

/// A bucket of `per_minute`, full at the start and refilling `per_minute` a minute.
fn bucket(name: &str, per_minute: u64) -> PolicySpec {
    let rate = format!("{per_minute}/1m").parse().unwrap();
    PolicySpec::new(name, PolicyKind::TokenBucket { capacity: per_minute, rate })
}

/// The LLM route with OpenAI's headers, `rpm` requests and `tpm` tokens a minute, each answer
/// `latency` after its request; usage drawn from the body and `seed`.
pub fn service(rpm: u64, tpm: u64, latency: Duration, seed: u64) -> MockService {
    let route = RouteConfig {
        api: Api::Llm,
        dialect: Dialect::OpenAi,
        latency: Latency { fixed: latency, jitter: Duration::ZERO },
        policies: vec![bucket("requests", rpm), bucket("tokens", tpm).counting(Unit::tokens())],
        ..RouteConfig::new("/v1/chat/completions")
    };
    let settings = ServerSettings { seed: Some(seed), ..ServerSettings::default() };
    MockService::new(MockConfig { server: settings, routes: vec![route] }).unwrap()
}

/// `builder` sending through `service`, one attempt a request, on the test's clock.
pub fn client(service: &MockService, builder: ClientBuilder) -> LimitedClient {
    builder
        .retry(RetryPolicy { max_attempts: 1, ..RetryPolicy::default() })
        .transport(Arc::new(service.clone()))
        .without_timers()
        .build()
        .unwrap()
}

/// The `n`th chat body of a worker: a prompt of `prompt` bytes and a `max_tokens` drawn at random.
pub fn chat_body(rng: &mut StdRng, n: u64, prompt: Range<usize>, max_tokens: RangeInclusive<u64>) -> String {
    let prompt = "w".repeat(rng.random_range(prompt));
    let max_tokens = rng.random_range(max_tokens);
    serde_json::json!({"messages": [{"role": "user", "content": format!("{n} {prompt}")}], "max_tokens": max_tokens})
        .to_string()
}

/// Requests the service served and refused before `until` (from its start).
pub fn served_and_refused(service: &MockService, until: Duration) -> (u64, u64) {
    let (mut served, mut refused) = (0, 0);
    for arrival in service.arrivals().iter().filter(|arrival| arrival.at < until) {
        match arrival.outcome {
            Outcome::Served(200) => served += 1,
            Outcome::Limited(_) => refused += 1,
            other => panic!("unexpected {other:?}"),
        }
    }
    (served, refused)
}
