//! The burst runner on paused time against a real server on 127.0.0.1: summaries, live limit
//! changes, cancellation, CSV.

mod support;

use std::time::Duration;

use ratescope::engine::{BudgetSpec, LimitKey, LimiterConfig};
use ratescope::http::{EventSink, LimitedClient, RetryPolicy};
use ratescope::run::{ArrivalPattern, Burst, BurstSpec, CSV_HEADER, RequestOutcome, write_csv};
use support::TestServer;
use tokio::time::Instant;

fn bucket(capacity: u64, rate: &str) -> LimiterConfig {
    LimiterConfig::new().with_budget(BudgetSpec::token_bucket("rate", capacity, rate.parse().unwrap()).unwrap())
}

/// A client for the spec with no timers of its own, as paused time needs.
fn start(spec: BurstSpec) -> Burst {
    let registry = std::sync::Arc::new(ratescope::engine::Registry::new());
    if let Some(limits) = &spec.limits {
        for key in spec.keys() {
            registry.set(key, limits.clone()).unwrap();
        }
    }
    let client = LimitedClient::builder()
        .registry(registry)
        .retry(spec.retry.clone())
        .events(EventSink::none())
        .without_timers()
        .seed(3)
        .build()
        .unwrap();
    Burst::start(spec, client).unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_paced_burst_summarises_every_attempt() {
    let server = TestServer::start(100, Duration::from_secs(60), 1).await;
    let spec = BurstSpec { limits: Some(bucket(2, "2/1s")), ..BurstSpec::get(server.url("/throttle-once"), 6) };
    let (summary, results) = start(spec).finish().await;
    assert_eq!((summary.requests, summary.succeeded, summary.failed, summary.cancelled), (6, 6, 0, 0));
    assert_eq!(summary.sent, 7, "one 429, retried");
    assert_eq!(summary.retries, 1);
    assert_eq!(summary.status_counts.get("429"), Some(&1));
    assert_eq!(summary.status_counts.get("200"), Some(&6));
    assert_eq!(results.len(), 6);
    // A record's attempts take no more room than they need for the usual one attempt (an
    // empty Vec's first push reserved four: 864 bytes a request, a burst's biggest memory).
    let single: Vec<_> = results.iter().filter(|result| result.attempts.len() == 1).collect();
    assert_eq!(single.len(), 5, "all but the retried one");
    for result in single {
        assert_eq!(result.attempts.capacity(), 1, "request {}", result.index);
    }
    assert!(summary.queue_wait_ms.max >= 1000.0, "the bucket made later requests queue");
    assert!(summary.total_ms.max >= summary.service_ms.max);
    let json = summary.to_json();
    for field in [
        "requests",
        "sent",
        "succeeded",
        "failed",
        "status_counts",
        "retries",
        "elapsed_s",
        "achieved_rps",
        "service_ms",
        "queue_wait_ms",
        "total_ms",
    ] {
        assert!(json.get(field).is_some(), "{field} is in the JSON summary");
    }
    for field in ["p50", "p90", "p99", "max"] {
        assert!(json["total_ms"][field].is_number());
    }
}

#[tokio::test(start_paused = true)]
async fn limits_changed_mid_burst_take_effect_at_once() {
    let server = TestServer::start(1000, Duration::from_secs(60), 0).await;
    let spec = BurstSpec { limits: Some(bucket(1, "1/1s")), ..BurstSpec::get(server.url("/ok"), 21) };
    let key: LimitKey = spec.keys()[0].clone();
    let burst = start(spec);
    tokio::time::sleep(Duration::from_millis(4500)).await;
    assert_eq!(server.arrivals().len(), 5, "1/s so far");
    burst.registry().set(key, bucket(1, "10/1s")).unwrap();
    let started = Instant::now();
    let (summary, _) = burst.finish().await;
    assert_eq!(summary.succeeded, 21);
    // The remaining 16 at 10/s: 1.6 s, minus the half token already refilled.
    let rest = started.elapsed();
    assert!(rest >= Duration::from_millis(1500) && rest <= Duration::from_millis(1600), "{rest:?}");
}

/// What the CLI's progress loop relies on: the end is awaited, not found by polling, and a
/// wait dropped before the end (the other branch of a `select!`) loses nothing.
#[tokio::test(start_paused = true)]
async fn a_bursts_end_is_awaited_when_it_comes_and_a_dropped_wait_loses_nothing() {
    let server = TestServer::start(1000, Duration::from_secs(60), 0).await;
    let spec = BurstSpec { limits: Some(bucket(1, "1/1s")), ..BurstSpec::get(server.url("/ok"), 4) };
    let started = Instant::now();
    let mut burst = start(spec);
    // Given up on halfway, as a progress tick would.
    tokio::select! {
        () = burst.ended() => panic!("4 requests at 1/s cannot end within 1.5 s"),
        () = tokio::time::sleep(Duration::from_millis(1500)) => {}
    }
    assert!(!burst.is_finished());
    burst.ended().await;
    // The fourth request goes at 3 s: the end is seen then, not at the next tick of anything.
    assert_eq!(started.elapsed(), Duration::from_secs(3));
    assert!(burst.is_finished());
    burst.ended().await;
    let (summary, results) = burst.finish().await;
    assert_eq!((summary.requests, summary.succeeded), (4, 4));
    assert_eq!(results.len(), 4);
}

#[tokio::test(start_paused = true)]
async fn cancelling_mid_burst_drops_queued_requests_and_leaves_nothing_running() {
    let server = TestServer::start(1000, Duration::from_secs(60), 0).await;
    let spec =
        BurstSpec { limits: Some(bucket(1, "1/1s").with_concurrency(2)), ..BurstSpec::get(server.url("/ok"), 50) };
    let burst = start(spec);
    tokio::time::sleep(Duration::from_millis(3500)).await;
    let registry = std::sync::Arc::clone(burst.registry());
    burst.cancel();
    let (summary, results) = burst.finish().await;
    assert_eq!(summary.succeeded, 4);
    assert_eq!(summary.cancelled, 46);
    assert_eq!(results.iter().filter(|r| r.outcome == RequestOutcome::Cancelled).count(), 46);
    let limiter = registry.active().pop().unwrap();
    let snapshot = limiter.snapshot();
    assert_eq!((snapshot.queued_total(), snapshot.in_flight), (0, 0), "no request is left waiting or holding a slot");
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(server.arrivals().len(), 4, "nothing was sent after the cancellation");
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_request_keeps_the_attempts_it_made() {
    // Every answer is a 429 asking for a second: each request retries until cancelled.
    let server = TestServer::start(1000, Duration::from_secs(60), 0).await;
    let retry = RetryPolicy { max_attempts: 100, ..RetryPolicy::default() };
    let burst = start(BurstSpec { retry, ..BurstSpec::get(server.url("/always-429"), 3) });
    tokio::time::sleep(Duration::from_millis(2500)).await;
    burst.cancel();
    let (summary, results) = burst.finish().await;
    let sent = server.arrivals().len() as u64;
    assert!(sent >= 6, "each request was tried at least twice: {sent}");
    assert_eq!(summary.cancelled, 3);
    assert_eq!(summary.sent, sent, "the summary counts every attempt the server saw");
    assert_eq!(summary.status_counts.get("429"), Some(&sent), "{:?}", summary.status_counts);
    assert_eq!(results.iter().map(|r| r.attempts.len() as u64).sum::<u64>(), sent);
}

#[tokio::test(start_paused = true)]
async fn arrivals_follow_the_pattern_and_the_csv_has_a_row_per_attempt() {
    let server = TestServer::start(1000, Duration::from_secs(60), 1).await;
    let mut url = server.url("/throttle-once");
    url.set_query(Some("token=hunter2"));
    let spec = BurstSpec {
        arrival: ArrivalPattern::FixedRate("4/1s".parse().unwrap()),
        retry: RetryPolicy::default(),
        ..BurstSpec::get(url, 8)
    };
    let (summary, results) = start(spec).finish().await;
    assert_eq!(summary.succeeded, 8);
    let arrivals = server.arrivals();
    let oks: Vec<Duration> = arrivals.iter().filter(|a| a.status == 200).map(|a| a.at).collect();
    assert!(oks.contains(&Duration::from_millis(1750)), "the 8th arrives at 7/4 s: {oks:?}");
    let mut csv = Vec::new();
    write_csv(&mut csv, &results).unwrap();
    let text = String::from_utf8(csv).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], CSV_HEADER.join(","));
    assert_eq!(lines.len(), 1 + 9, "a header and one row per attempt (8 requests, one retried)");
    assert!(lines.iter().any(|line| line.contains(",429,")));
    assert!(!text.contains("hunter2"), "query strings never reach the CSV");
}

/// A demo API whose `/slow` answers after 100 ms and has no limits.
async fn slow_server() -> ratescope::mock::MockServer {
    let config = ratescope::mock::MockConfig::from_toml(
        "[[routes]]\nprefix = \"/slow\"\ndialect = \"none\"\nlatency = { fixed = \"100ms\" }\n",
    )
    .unwrap();
    ratescope::mock::MockServer::start(config, std::net::SocketAddr::from(([127, 0, 0, 1], 0))).await.unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_raw_capped_burst_keeps_the_cap_sends_in_order_and_cancels_what_is_in_flight() {
    let server = slow_server().await;
    let spec = BurstSpec { raw_concurrency: Some(3), ..BurstSpec::get(server.url().join("slow").unwrap(), 30) };
    let burst = start(spec);
    // Three at a time, 100 ms each: at 450 ms, 12 have ended and 3 are in flight.
    tokio::time::sleep(Duration::from_millis(450)).await;
    let progress = burst.progress();
    assert_eq!((progress.launched, progress.done), (15, 12));
    burst.cancel();
    let (summary, results) = burst.finish().await;
    assert_eq!((summary.succeeded, summary.cancelled), (12, 18), "3 in flight and 15 never launched");
    assert_eq!(results.len(), 15, "requests never launched have no record");
    assert!(results.iter().enumerate().all(|(position, result)| result.index == position));
    assert!(results[12..].iter().all(|result| result.outcome == RequestOutcome::Cancelled));
    // Sent in index order, three at a time: request i leaves at (i / 3) * 100 ms.
    for result in &results[..12] {
        let sent = result.attempts[0].sent_at - result.burst_start;
        assert_eq!(sent.as_millis() / 100, (result.index / 3) as u128, "request {}", result.index);
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(server.arrivals().len(), 15, "nothing was sent after the cancellation");
}

#[tokio::test(start_paused = true)]
async fn a_raw_capped_burst_spreads_its_schedule_over_the_workers() {
    let server = slow_server().await;
    // 20 arriving 10 per second with 2 workers: each request leaves at its own arrival time.
    let spec = BurstSpec {
        raw_concurrency: Some(2),
        arrival: ArrivalPattern::FixedRate("10/1s".parse().unwrap()),
        ..BurstSpec::get(server.url().join("slow").unwrap(), 20)
    };
    let started = Instant::now();
    let (summary, results) = start(spec).finish().await;
    assert_eq!(summary.succeeded, 20);
    for result in &results {
        let sent = result.attempts[0].sent_at - started;
        assert_eq!(sent.as_millis() / 100, result.index as u128, "request {} left at {sent:?}", result.index);
    }
}

/// FIFO within a lane, as the README says: on a multi-threaded runtime (the CLI's and the
/// app's) the requests of a burst fired all at once are sent in request order, although the
/// runtime starts their tasks in an order of its own. Real time: only the order is asserted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paced_burst_sends_its_requests_in_their_order() {
    let server = TestServer::start(1000, Duration::from_secs(60), 0).await;
    let spec = BurstSpec { limits: Some(bucket(1, "400/1s")), ..BurstSpec::get(server.url("/ok"), 40) };
    let (summary, results) = start(spec).finish().await;
    assert_eq!(summary.succeeded, 40);
    let mut sent: Vec<(Instant, usize)> =
        results.iter().map(|result| (result.attempts[0].sent_at, result.index)).collect();
    sent.sort();
    let order: Vec<usize> = sent.into_iter().map(|(_, index)| index).collect();
    assert_eq!(order, (0..40).collect::<Vec<_>>(), "sent in request order");
}

#[tokio::test(start_paused = true)]
async fn a_raw_burst_with_more_workers_than_are_held_inline_keeps_its_schedule() {
    let server = slow_server().await;
    // 1,500 workers (beyond the 1,024 that hold their request inline, so each request's state
    // is boxed while it is sent), 2,000 requests arriving 1,000 per second: about 100 in flight.
    let spec = BurstSpec {
        raw_concurrency: Some(1500),
        arrival: ArrivalPattern::FixedRate("1000/1s".parse().unwrap()),
        ..BurstSpec::get(server.url().join("slow").unwrap(), 2000)
    };
    let started = Instant::now();
    let (summary, results) = start(spec).finish().await;
    assert_eq!(summary.succeeded, 2000);
    for result in &results {
        let sent = result.attempts[0].sent_at - started;
        assert_eq!(sent.as_millis(), result.index as u128, "request {} left at {sent:?}", result.index);
    }
    assert_eq!(server.arrivals().len(), 2000);
}
