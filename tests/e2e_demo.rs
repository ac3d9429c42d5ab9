//! End to end over loopback against the embedded demo API, on paused tokio time: paced bursts
//! get no 429s at nearly the rate the server allows, raw bursts meet 429s, stacked windows hold.

use std::net::SocketAddr;
use std::time::Duration;

use ratescope::engine::{BudgetSpec, LimiterConfig, Registry};
use ratescope::http::{EventSink, LimitedClient, RetryPolicy};
use ratescope::mock::{MockServer, Outcome};
use ratescope::run::{Burst, BurstSpec};

mod support;

async fn demo_server() -> MockServer {
    MockServer::start(support::items_config(""), SocketAddr::from(([127, 0, 0, 1], 0))).await.unwrap()
}

fn limits(windows: &[(u64, u64)]) -> LimiterConfig {
    let mut config =
        LimiterConfig::new().with_budget(BudgetSpec::token_bucket("rate", 5, "5/1s".parse().unwrap()).unwrap());
    for (i, (limit, seconds)) in windows.iter().enumerate() {
        let window = BudgetSpec::sliding_window(format!("w{i}"), *limit, Duration::from_secs(*seconds)).unwrap();
        config = config.with_budget(window);
    }
    config
}

/// Runs `spec` with a client that has no timers of its own (paused time would fire them mid-read).
async fn run(spec: BurstSpec) -> ratescope::run::Summary {
    let registry = Registry::new();
    if let Some(limits) = &spec.limits {
        for key in spec.keys() {
            registry.set(key, limits.clone()).unwrap();
        }
    }
    let client = LimitedClient::builder()
        .registry(std::sync::Arc::new(registry))
        .retry(spec.retry.clone())
        .events(EventSink::none())
        .without_timers()
        .seed(11)
        .build()
        .unwrap();
    Burst::start(spec, client).unwrap().finish().await.0
}

fn limited(server: &MockServer) -> usize {
    server.arrivals().iter().filter(|arrival| matches!(arrival.outcome, Outcome::Limited(_))).count()
}

#[tokio::test(start_paused = true)]
async fn matching_limits_get_no_429_at_nearly_the_allowed_rate() {
    let server = demo_server().await;
    let spec = BurstSpec { limits: Some(limits(&[])), ..BurstSpec::get(server.url().join("/items").unwrap(), 60) };
    let summary = run(spec).await;
    assert_eq!(limited(&server), 0, "no request was refused");
    assert_eq!((summary.succeeded, summary.failed, summary.retries), (60, 0, 0));
    // The server allows 5 at once and then 5 per second: 55 more take 11 s at its pace.
    let allowed_rate = 55.0 / 11.0;
    let achieved = 55.0 / summary.elapsed_s;
    assert!(achieved >= 0.95 * allowed_rate, "achieved {achieved:.2}/s against {allowed_rate:.2}/s allowed");
}

#[tokio::test(start_paused = true)]
async fn raw_sending_meets_429s_and_backoff_alone_still_gets_everything_through() {
    let server = demo_server().await;
    let url = server.url().join("/items").unwrap();
    let no_retries = RetryPolicy { max_attempts: 1, ..RetryPolicy::default() };
    let summary = run(BurstSpec { retry: no_retries, ..BurstSpec::get(url.clone(), 20) }).await;
    assert_eq!(summary.status_counts.get("429"), Some(&15), "only the first 5 fit the bucket");
    assert_eq!(summary.failed, 15);

    let server = demo_server().await;
    let url = server.url().join("/items").unwrap();
    let patient = RetryPolicy { max_attempts: 20, ..RetryPolicy::default() };
    let summary = run(BurstSpec { retry: patient, ..BurstSpec::get(url, 20) }).await;
    assert!(limited(&server) > 0, "raw sending still meets 429s");
    assert_eq!((summary.succeeded, summary.failed), (20, 0), "backoff with Retry-After gets every request through");
    assert!(summary.retries > 0);
}

#[tokio::test(start_paused = true)]
async fn stacked_windows_are_respected() {
    let server = demo_server().await;
    // The server's 100 per minute beside its 5 per second; the client mirrors both.
    let spec =
        BurstSpec { limits: Some(limits(&[(100, 60)])), ..BurstSpec::get(server.url().join("/items").unwrap(), 110) };
    let summary = run(spec).await;
    assert_eq!(limited(&server), 0);
    assert_eq!(summary.succeeded, 110);
    let arrivals = server.arrivals();
    let mut times: Vec<Duration> = arrivals.iter().map(|arrival| arrival.at).collect();
    times.sort();
    assert!(times[100] >= Duration::from_secs(60), "the 101st waited for the minute: {:?}", times[100]);
    for (i, at) in times.iter().enumerate() {
        let in_minute = times[i..].iter().take_while(|later| **later < *at + Duration::from_secs(60)).count();
        assert!(in_minute <= 100, "{in_minute} requests in the minute from {at:?}");
    }
}
