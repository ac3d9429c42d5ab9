//! Property: for random server budgets, concurrencies, request counts and starting points
//! inside a window, adaptive mode never sends more than the server's remaining allows once
//! the first answer is in: a fixed-window server (a model on paused time, real sockets)
//! refuses nothing, and every request succeeds.

mod support;

use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use ratescope::engine::{LimitKey, LimiterConfig, Registry};
use ratescope::http::{Adaptive, LimitedClient};
use support::TestServer;

async fn burst(limit: u64, window_s: u64, concurrency: usize, requests: usize, offset_ms: u64) -> (usize, usize) {
    let server = TestServer::start(limit, Duration::from_secs(window_s), 0).await;
    // Start somewhere inside the server's window, as a client that meets an API mid-window.
    tokio::time::sleep(Duration::from_millis(offset_ms)).await;
    let key: LimitKey = server.key().parse().expect("a key");
    let registry =
        Arc::new(Registry::from_table([(key, LimiterConfig::new().with_concurrency(concurrency))]).expect("valid"));
    let client = LimitedClient::builder()
        .registry(registry)
        .adaptive(Adaptive::All)
        .without_timers()
        .seed(7)
        .build()
        .expect("a client");
    let tasks: Vec<_> = (0..requests)
        .map(|_| {
            let (client, url) = (client.clone(), server.url("/limited"));
            tokio::spawn(async move { client.get(url).await.map(|response| response.status.as_u16()) })
        })
        .collect();
    let mut succeeded = 0;
    for task in tasks {
        if matches!(task.await.expect("no panic"), Ok(200)) {
            succeeded += 1;
        }
    }
    (succeeded, server.count_status(429))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn adaptive_mode_never_overruns_what_the_server_says_remains(
        limit in 1u64..15,
        window_s in 1u64..10,
        concurrency in 1usize..30,
        requests in 1usize..50,
        offset_fraction in 0.0f64..1.0,
    ) {
        let offset_ms = (offset_fraction * window_s as f64 * 1000.0) as u64;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .expect("a paused runtime");
        let (succeeded, refused) = runtime.block_on(burst(limit, window_s, concurrency, requests, offset_ms));
        prop_assert_eq!(refused, 0, "the server refused requests");
        prop_assert_eq!(succeeded, requests);
    }
}
