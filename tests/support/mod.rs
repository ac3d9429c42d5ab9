//! A small rate-limited axum server on 127.0.0.1 for client tests, on the test's own (paused) clock.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use parking_lot::Mutex;
use tokio::time::Instant;

pub mod cli;
pub mod llm;

/// A demo API config with one route like the demo's `/items`: bursts of 5, 5 per second and
/// 100 per clock minute, IETF headers, 429 with Retry-After; `extra` adds route settings
/// (a latency, say) as TOML lines.
pub fn items_config(extra: &str) -> ratescope::mock::MockConfig {
    let text = format!(
        r#"
[[routes]]
prefix = "/items"
dialect = "ietf"
status = 429
retry_after = true
{extra}

  [[routes.policies]]
  name = "burst"
  kind = "token_bucket"
  capacity = 5
  rate = "5/1s"

  [[routes.policies]]
  name = "minute"
  kind = "fixed_window"
  limit = 100
  window = "1m"
"#
    );
    ratescope::mock::MockConfig::from_toml(&text).unwrap()
}

/// One request the server saw.
#[derive(Debug, Clone)]
pub struct Arrival {
    pub at: Duration,
    pub path: String,
    pub status: u16,
    pub headers: HeaderMap,
}

#[derive(Debug)]
struct Inner {
    start: Instant,
    arrivals: Vec<Arrival>,
    /// `/limited`: fixed window of `limit` per `window`, start of the current window and count.
    limit: u64,
    window: Duration,
    window_start: Instant,
    count: u64,
    /// `/throttle-once`: how many 429s remain to be served.
    throttles_left: u32,
}

#[derive(Debug, Clone)]
pub struct TestServer {
    pub addr: SocketAddr,
    inner: Arc<Mutex<Inner>>,
}

impl TestServer {
    /// Starts the server: `/limited` allows `limit` per `window` (fixed windows, IETF draft headers),
    /// `/throttle-once` answers the first `throttles` requests with 429 and `Retry-After: 2`.
    pub async fn start(limit: u64, window: Duration, throttles: u32) -> Self {
        let now = Instant::now();
        let inner = Arc::new(Mutex::new(Inner {
            start: now,
            arrivals: Vec::new(),
            limit,
            window,
            window_start: now,
            count: 0,
            throttles_left: throttles,
        }));
        let app = Router::new()
            .route("/limited", get(limited))
            .route("/throttle-once", get(throttle_once))
            .route("/always-429", get(always_429))
            .route("/go-away", get(go_away))
            .route("/spent-403", get(spent_403))
            .route("/cached", get(cached))
            .route("/ok", get(ok))
            .route("/slow", get(slow))
            .route("/panic", get(panics))
            .route("/stream", get(stream))
            .with_state(Arc::clone(&inner));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self { addr, inner }
    }

    pub fn url(&self, path: &str) -> url::Url {
        format!("http://{}{path}", self.addr).parse().unwrap()
    }

    pub fn key(&self) -> String {
        self.addr.to_string()
    }

    pub fn arrivals(&self) -> Vec<Arrival> {
        self.inner.lock().arrivals.clone()
    }

    /// Asserts `count` arrivals, the k-th no earlier than `k × interval` (1 ms of slack) and
    /// at most 50 ms after it: a schedule paced at one per `interval` from the first.
    pub fn assert_paced(&self, count: usize, interval: Duration) {
        let mut arrivals: Vec<Duration> = self.arrivals().iter().map(|arrival| arrival.at).collect();
        arrivals.sort();
        assert_eq!(arrivals.len(), count);
        for (k, at) in arrivals.iter().enumerate() {
            let due = interval * k as u32;
            assert!(*at + Duration::from_millis(1) >= due, "request {k} arrived at {at:?}, before {due:?}");
            assert!(*at <= due + Duration::from_millis(50), "request {k} arrived at {at:?}, long after {due:?}");
        }
    }

    pub fn count_status(&self, status: u16) -> usize {
        self.inner.lock().arrivals.iter().filter(|a| a.status == status).count()
    }
}

type ServerState = State<Arc<Mutex<Inner>>>;

fn record(inner: &mut Inner, path: &str, status: StatusCode, headers: &HeaderMap) {
    let at = inner.start.elapsed();
    inner.arrivals.push(Arrival { at, path: path.to_owned(), status: status.as_u16(), headers: headers.clone() });
}

async fn limited(State(inner): ServerState, request_headers: HeaderMap) -> impl IntoResponse {
    let mut inner = inner.lock();
    let now = Instant::now();
    while now >= inner.window_start + inner.window {
        let window = inner.window;
        inner.window_start += window;
        inner.count = 0;
    }
    let reset = (inner.window_start + inner.window - now).as_secs_f64().ceil() as u64;
    let mut headers = HeaderMap::new();
    let policy = format!("\"win\";q={};w={}", inner.limit, inner.window.as_secs());
    headers.insert("ratelimit-policy", HeaderValue::from_str(&policy).unwrap());
    let status = if inner.count < inner.limit {
        inner.count += 1;
        StatusCode::OK
    } else {
        headers.insert("retry-after", HeaderValue::from(reset));
        StatusCode::TOO_MANY_REQUESTS
    };
    let remaining = inner.limit - inner.count;
    headers.insert("ratelimit", HeaderValue::from_str(&format!("\"win\";r={remaining};t={reset}")).unwrap());
    record(&mut inner, "/limited", status, &request_headers);
    (status, headers, "limited")
}

async fn throttle_once(State(inner): ServerState, request_headers: HeaderMap) -> impl IntoResponse {
    let mut inner = inner.lock();
    let throttled = inner.throttles_left > 0;
    if throttled {
        inner.throttles_left -= 1;
        record(&mut inner, "/throttle-once", StatusCode::TOO_MANY_REQUESTS, &request_headers);
        (StatusCode::TOO_MANY_REQUESTS, [("retry-after", "2")], "slow down").into_response()
    } else {
        record(&mut inner, "/throttle-once", StatusCode::OK, &request_headers);
        (StatusCode::OK, "fine").into_response()
    }
}

async fn always_429(State(inner): ServerState, request_headers: HeaderMap) -> impl IntoResponse {
    record(&mut inner.lock(), "/always-429", StatusCode::TOO_MANY_REQUESTS, &request_headers);
    (StatusCode::TOO_MANY_REQUESTS, [("retry-after", "1")], "no")
}

/// A 429 asking for 31 years.
async fn go_away(State(inner): ServerState, request_headers: HeaderMap) -> impl IntoResponse {
    record(&mut inner.lock(), "/go-away", StatusCode::TOO_MANY_REQUESTS, &request_headers);
    (StatusCode::TOO_MANY_REQUESTS, [("retry-after", "1000000000")], "no")
}

/// GitHub's way of saying the budget is spent: a 403 with `X-RateLimit-Remaining: 0`.
async fn spent_403(State(inner): ServerState, request_headers: HeaderMap) -> impl IntoResponse {
    record(&mut inner.lock(), "/spent-403", StatusCode::FORBIDDEN, &request_headers);
    let headers = [("x-ratelimit-limit", "60"), ("x-ratelimit-remaining", "0"), ("retry-after", "3")];
    (StatusCode::FORBIDDEN, headers, "API rate limit exceeded")
}

async fn cached(State(inner): ServerState, request_headers: HeaderMap) -> impl IntoResponse {
    record(&mut inner.lock(), "/cached", StatusCode::OK, &request_headers);
    (StatusCode::OK, [("cache-control", "max-age=60"), ("etag", "\"v1\"")], "{\"items\":[1,2,3]}")
}

async fn ok(State(inner): ServerState, request_headers: HeaderMap) -> impl IntoResponse {
    record(&mut inner.lock(), "/ok", StatusCode::OK, &request_headers);
    (StatusCode::OK, "ok")
}

/// Answers after a second (of tokio time): long enough for identical requests to overlap.
async fn slow(State(inner): ServerState, request_headers: HeaderMap) -> impl IntoResponse {
    record(&mut inner.lock(), "/slow", StatusCode::OK, &request_headers);
    tokio::time::sleep(Duration::from_secs(1)).await;
    (StatusCode::OK, "slow")
}

/// The handler panics: the server drops the connection without an answer.
async fn panics(State(inner): ServerState, request_headers: HeaderMap) -> &'static str {
    record(&mut inner.lock(), "/panic", StatusCode::INTERNAL_SERVER_ERROR, &request_headers);
    panic!("the handler of /panic panics on purpose")
}

/// A body of three chunks a second apart.
async fn stream(State(inner): ServerState, request_headers: HeaderMap) -> impl IntoResponse {
    record(&mut inner.lock(), "/stream", StatusCode::OK, &request_headers);
    let chunks = futures_util::stream::unfold(0u32, |sent| async move {
        if sent == 3 {
            return None;
        }
        if sent > 0 {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        Some((Ok::<_, std::io::Error>(format!("chunk {sent};")), sent + 1))
    });
    (StatusCode::OK, axum::body::Body::from_stream(chunks))
}
