//! Batching (`http::batch`) against the demo API over real loopback sockets, on paused tokio
//! time: a full batch and a timed-out partial batch each go as one `/items?ids=...` request,
//! a refused batch fails only its own callers, a caller that stops waiting leaves the rest
//! untouched, the limiter paces batches rather than items, and `burst --batch` saves requests.

mod support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use support::cli::ratescope;

use ratescope::engine::{LimitKey, LimiterConfig, Registry};
use ratescope::http::batch::{BatchSettingsError, MAX_BATCH_WAIT};
use ratescope::http::{
    BatchError, BatchFormat, BatchPlan, BatchSettings, BatchTemplate, Batcher, IdsQuery, LimitedClient, RetryPolicy,
};
use ratescope::mock::{MockServer, Outcome};
use serde_json::Value;
use tokio::time::Instant;

async fn demo() -> MockServer {
    MockServer::start(support::items_config(""), SocketAddr::from(([127, 0, 0, 1], 0))).await.unwrap()
}

/// A client limited by `limits` on the demo's host, without retries or timers (paused time).
fn client(server: &MockServer, limits: &str) -> LimitedClient {
    let key: LimitKey = server.addr().to_string().parse().unwrap();
    let registry = Registry::from_table([(key, LimiterConfig::parse_described(limits).unwrap())]).unwrap();
    LimitedClient::builder()
        .registry(Arc::new(registry))
        .retry(RetryPolicy::none())
        .without_timers()
        .seed(1)
        .build()
        .unwrap()
}

fn batcher(server: &MockServer, limits: &str, size: usize, wait: Duration) -> Batcher<String, Value> {
    let url = server.url().join("items").unwrap();
    let template = BatchTemplate::new(url, IdsQuery::comma("ids").unwrap(), BatchFormat::items_by_id());
    template.batcher(client(server, limits), BatchSettings::new(size, wait).unwrap()).unwrap()
}

/// Submits ids in this order (each enters the batch in turn) and waits for every answer.
async fn submit_all(batcher: &Batcher<String, Value>, ids: &[&str]) -> Vec<Result<Value, BatchError>> {
    futures_util::future::join_all(ids.iter().map(|id| batcher.submit((*id).to_owned()))).await
}

fn id_of(answer: &Result<Value, BatchError>) -> u64 {
    answer.as_ref().unwrap()["id"].as_u64().unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_full_batch_goes_at_once_as_one_request_counted_once() {
    let server = demo().await;
    let batcher = batcher(&server, "no limits", 4, Duration::from_secs(1));
    let started = Instant::now();
    let answers = submit_all(&batcher, &["3", "1", "4", "2"]).await;
    assert!(started.elapsed() < Duration::from_secs(1), "a full batch does not wait: {:?}", started.elapsed());
    assert_eq!(answers.iter().map(id_of).collect::<Vec<_>>(), [3, 1, 4, 2], "each caller gets its own item");
    assert_eq!(answers[1].as_ref().unwrap()["name"], "item 1");
    let arrivals = server.arrivals();
    assert_eq!(arrivals.len(), 1, "{arrivals:?}");
    assert_eq!(arrivals[0].outcome, Outcome::Served(200));
    assert_eq!(batcher.counts().saved(), 3);
    // The demo's bucket of 5 spent one token for the four items: four more single requests pass.
    let single = batcher.clone();
    for id in 5..9 {
        assert!(single.submit(id.to_string()).await.is_ok());
    }
    assert!(server.arrivals().iter().all(|arrival| arrival.outcome == Outcome::Served(200)));
}

#[tokio::test(start_paused = true)]
async fn a_partial_batch_goes_when_its_wait_is_over() {
    let server = demo().await;
    let batcher = batcher(&server, "no limits", 10, Duration::from_millis(50));
    let started = Instant::now();
    let answers = submit_all(&batcher, &["7", "8", "9"]).await;
    assert_eq!(answers.iter().map(id_of).collect::<Vec<_>>(), [7, 8, 9]);
    assert_eq!(started.elapsed(), Duration::from_millis(50), "sent max_wait after the first item");
    let arrivals = server.arrivals();
    assert_eq!(arrivals.len(), 1);
    assert_eq!(arrivals[0].at, Duration::from_millis(50));
}

#[tokio::test(start_paused = true)]
async fn a_refused_batch_fails_only_its_own_callers() {
    let server = demo().await;
    let batcher = batcher(&server, "no limits", 3, Duration::from_millis(20));
    // Two batches in flight together: the first holds a malformed id, the second is fine.
    let answers = submit_all(&batcher, &["1", "x", "3", "4", "5", "6"]).await;
    for failed in &answers[..3] {
        let err = failed.as_ref().unwrap_err();
        assert!(matches!(err, BatchError::Batch(_)), "{err:?}");
        assert!(err.to_string().contains("400") && err.to_string().contains("is not an item id"), "{err}");
    }
    assert_eq!(answers[3..].iter().map(id_of).collect::<Vec<_>>(), [4, 5, 6]);
    let mut outcomes: Vec<Outcome> = server.arrivals().iter().map(|arrival| arrival.outcome).collect();
    outcomes.sort_by_key(|outcome| format!("{outcome:?}"));
    assert_eq!(outcomes, [Outcome::Served(200), Outcome::Served(400)]);
}

#[tokio::test(start_paused = true)]
async fn an_unknown_id_is_a_clear_400_for_its_batch() {
    let server = demo().await;
    let batcher = batcher(&server, "no limits", 2, Duration::from_millis(20));
    let answers = submit_all(&batcher, &["2", "0"]).await;
    let err = answers[0].as_ref().unwrap_err().to_string();
    assert!(err.contains("unknown item 0"), "{err}");
}

#[tokio::test(start_paused = true)]
async fn a_caller_that_stops_waiting_does_not_break_its_batch() {
    let server = demo().await;
    let batcher = batcher(&server, "no limits", 3, Duration::from_millis(20));
    let spawn = |id: &'static str| {
        let batcher = batcher.clone();
        tokio::spawn(async move { batcher.submit(id.to_owned()).await })
    };
    let (first, quitter) = (spawn("1"), spawn("2"));
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    quitter.abort();
    let third = spawn("3");
    assert_eq!(id_of(&first.await.unwrap()), 1);
    assert_eq!(id_of(&third.await.unwrap()), 3);
    assert!(quitter.await.unwrap_err().is_cancelled());
    assert_eq!(server.arrivals().len(), 1);
    assert_eq!(batcher.counts().items, 2, "the item nobody waits for is left out");
}

#[tokio::test(start_paused = true)]
async fn the_limiter_paces_batches_not_items() {
    let server = demo().await;
    // One request a second on our side: 20 items alone would take 19 s.
    let batcher = batcher(&server, "bucket 1 @ 1/1s", 5, Duration::from_millis(10));
    let started = Instant::now();
    let ids: Vec<String> = (1..=20).map(|id| id.to_string()).collect();
    let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    let answers = submit_all(&batcher, &ids).await;
    assert!(answers.iter().all(Result::is_ok));
    let arrivals = server.arrivals();
    assert_eq!(arrivals.len(), 4, "20 items in batches of 5");
    let gaps: Vec<Duration> = arrivals.windows(2).map(|pair| pair[1].at - pair[0].at).collect();
    assert!(gaps.iter().all(|gap| gap.abs_diff(Duration::from_secs(1)) <= Duration::from_millis(1)), "{gaps:?}");
    assert!(started.elapsed() < Duration::from_secs(4), "{:?}", started.elapsed());
    assert_eq!(batcher.counts().batches, 4);
}

#[test]
fn settings_that_cannot_work_are_refused_with_a_reason() {
    assert_eq!(BatchSettings::new(0, Duration::from_millis(5)), Err(BatchSettingsError::ZeroSize));
    assert_eq!(BatchSettings::new(5, Duration::ZERO), Err(BatchSettingsError::ZeroWait));
    let long = BatchSettings::new(5, MAX_BATCH_WAIT * 2).unwrap_err();
    assert!(long.to_string().contains("callers would wait that long"), "{long}");
    let err = "ids:50".parse::<BatchPlan>().unwrap_err();
    assert!(err.contains("PARAM:SIZE:WAIT"), "{err}");
    assert!("i d:5:5ms".parse::<BatchPlan>().is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_with_batch_sends_a_request_per_batch_and_says_what_it_saved() {
    let server = demo().await;
    let dir = tempfile::tempdir().unwrap();
    let url = format!("{}items", server.url());
    let (code, stdout, stderr) =
        ratescope(dir.path(), &["burst", &url, "-n", "23", "--batch", "ids:5:500ms", "--rate", "50/1s", "--json"])
            .await;
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let summary: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(summary["requests"], 23);
    assert_eq!(summary["succeeded"], 23, "{summary}");
    assert_eq!(summary["batched_items"], 23);
    assert_eq!(summary["batches"], 5, "ceil(23 / 5) upstream requests");
    assert_eq!(summary["saved_by_batching"], 18);
    assert_eq!(summary["sent"], 5, "attempts count what went upstream");
    assert_eq!(server.arrivals().len(), 5);

    let (code, stdout, _) = ratescope(dir.path(), &["burst", &url, "-n", "4", "--batch", "ids:4:1s"]).await;
    assert_eq!(code, 0, "{stdout}");
    assert!(stdout.contains("batching:      4 items in 1 upstream request (3 saved)"), "{stdout}");
    assert!(stdout.contains("3 by batching"), "{stdout}");

    let (code, _, stderr) = ratescope(dir.path(), &["burst", &url, "--batch", "ids:0:1s"]).await;
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("at least one item"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_profile_endpoints_batch_template_batches_its_burst() {
    let server = demo().await;
    let dir = tempfile::tempdir().unwrap();
    let profile = format!(
        r#"name = "shop"
[[hosts]]
name = "demo"
base_url = "{}"
budgets = [{{ name = "rate", kind = "token_bucket", capacity = 4, rate = "8/1s" }}]

[[hosts.endpoints]]
name = "items"
path = "/items"
batch = {{ param = "ids", max_size = 10, max_wait = "300ms" }}
"#,
        server.url().as_str().trim_end_matches('/')
    );
    let path = dir.path().join("shop.toml");
    std::fs::write(&path, profile).unwrap();
    let path = path.to_str().unwrap();
    let (code, stdout, stderr) =
        ratescope(dir.path(), &["burst", "--profile", path, "--endpoint", "items", "-n", "25", "--json"]).await;
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let summary: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!((summary["succeeded"].as_u64(), summary["batches"].as_u64()), (Some(25), Some(3)), "{summary}");
    assert_eq!(summary["saved_by_batching"], 22);
    let arrivals = server.arrivals();
    assert_eq!(arrivals.len(), 3, "three GETs of /items?ids=... for 25 items");
    assert!(arrivals.iter().all(|arrival| arrival.outcome == Outcome::Served(200)));
}
