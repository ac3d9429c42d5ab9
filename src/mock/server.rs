//! `MockServer`: the mock API served by axum on a loopback address, with its arrival log.
//!
//! The server's clock is `tokio::time::Instant` (so paused-time tests drive it);
//! policies see nanoseconds since the server started. Wall-clock time is read only
//! for the `Date` header and GitHub's epoch resets.
//!
//! How a request is answered: the longest matching route's policies decide
//! (refused: 429/503 with headers, at once); an admitted request draws its faults
//! and latency from the seeded generator, is logged, waits out its latency, and is
//! answered. A concurrency slot is held until the body has been sent. A "reset"
//! fault fails the body stream before its first byte, so hyper drops the
//! connection without a response; a "slow body" trickles out in four chunks.

use std::collections::VecDeque;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures_util::future::BoxFuture;
use futures_util::stream;
use http::header::{ALLOW, CACHE_CONTROL, CONTENT_TYPE, ETAG, IF_NONE_MATCH};
use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri};
use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use url::Url;

use super::api::{Api, Work, bad_request, items_answer};
use super::config::{CountBy, MockConfig, RouteConfig};
use super::error::MockError;
use super::headers::write_headers;
use super::policy::{ConcurrencyGuard, Decision, RoutePolicies};
use crate::engine::duration_nanos;
use crate::http::{Exchanged, Transport};

/// The arrival log keeps this many of the latest requests.
pub const ARRIVAL_LOG_CAPACITY: usize = 100_000;
/// How long `shutdown` waits for requests in flight before it stops the server anyway.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);
/// API key values longer than this are cut (they become map keys and log entries).
const MAX_KEY_LEN: usize = 200;
/// A slow body is sent in this many chunks.
const SLOW_CHUNKS: usize = 4;

/// One request the server saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Arrival {
    /// Since the server started (tokio time).
    pub at: Duration,
    /// The prefix of the route that served it; empty when no route matched (404).
    pub route: String,
    /// The request path, without the query string.
    pub path: String,
    /// The value of the API key header, if the request had one.
    pub key: Option<String>,
    /// Admitted, refused (and by which policy), or failed on purpose.
    pub outcome: Outcome,
}

/// What became of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Answered normally (200, 304; 404 for an unknown path; 400 or 405 for a request the
    /// route's api cannot read).
    Served(u16),
    /// Refused by the route's policies (429 or 503).
    Limited(u16),
    /// Admitted, then failed on purpose.
    Fault(FaultKind),
}

/// An injected failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    /// A 5xx status.
    Error(u16),
    /// The connection was dropped without a response.
    Reset,
    /// The body trickled out slowly (the response itself is fine).
    SlowBody,
}

/// The mock API, running on a tokio task until [`MockServer::shutdown`] (or drop).
#[derive(Debug)]
pub struct MockServer {
    addr: SocketAddr,
    url: Url,
    state: Arc<ServerState>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<io::Result<()>>>,
}

/// The demo API's state behind every request: its config, policy states, generator and arrival log.
#[derive(Debug)]
struct ServerState {
    config: MockConfig,
    start: Instant,
    /// One set of policy states per route, in config order.
    policies: Vec<Mutex<RoutePolicies>>,
    rng: Mutex<StdRng>,
    arrivals: Mutex<VecDeque<Arrival>>,
}

impl MockServer {
    /// Validates `config` and serves it on `addr`, which must be a loopback address
    /// (127.0.0.0/8 or ::1; anything else is refused before binding). Port 0 picks a free port.
    pub async fn start(config: MockConfig, addr: SocketAddr) -> Result<Self, MockError> {
        if !addr.ip().to_canonical().is_loopback() {
            return Err(MockError::NotLoopback(addr));
        }
        let service = MockService::new(config)?;
        let listener = tokio::net::TcpListener::bind(addr).await.map_err(|source| MockError::Bind { addr, source })?;
        let addr = listener.local_addr().map_err(|source| MockError::Bind { addr, source })?;
        let url = Url::parse(&format!("http://{addr}/"))
            .map_err(|err| MockError::Bind { addr, source: io::Error::other(err) })?;
        let state = service.state;

        let app = Router::new().fallback(handle).with_state(Arc::clone(&state));
        let (stop, stopped) = oneshot::channel::<()>();
        let serve = axum::serve(listener, app).with_graceful_shutdown(async move {
            let _ = stopped.await;
        });
        let task = tokio::spawn(async move { serve.await });
        tracing::debug!("mock server listening on {url}");
        Ok(Self { addr, url, state, stop: Some(stop), task: Some(task) })
    }

    /// The base URL, e.g. `http://127.0.0.1:8787/`.
    pub fn url(&self) -> Url {
        self.url.clone()
    }

    /// The address actually bound (with the chosen port when 0 was asked for).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The configuration it serves.
    pub fn config(&self) -> &MockConfig {
        &self.state.config
    }

    /// The latest requests (up to [`ARRIVAL_LOG_CAPACITY`]), oldest first.
    pub fn arrivals(&self) -> Vec<Arrival> {
        self.state.arrivals.lock().iter().cloned().collect()
    }

    /// Empties the arrival log (limits keep their state).
    pub fn clear_arrivals(&self) {
        self.state.arrivals.lock().clear();
    }

    /// Stops accepting connections, lets requests in flight finish (for up to 10 s), and returns.
    pub async fn shutdown(mut self) -> Result<(), MockError> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let Some(mut task) = self.task.take() else {
            return Ok(());
        };
        match tokio::time::timeout(SHUTDOWN_GRACE, &mut task).await {
            Ok(Ok(result)) => result.map_err(MockError::Serve),
            Ok(Err(join)) => Err(MockError::Serve(io::Error::other(join))),
            Err(_elapsed) => {
                tracing::warn!("mock server: requests still in flight after {SHUTDOWN_GRACE:?}; stopping anyway");
                task.abort();
                Ok(())
            }
        }
    }
}

/// The demo API without a socket: the handler of [`MockServer`] called in this process, on
/// the current tokio clock (its epoch is when it was made). The simulator's server: in a
/// runtime with paused time, latency and slow bodies pass in virtual time. Cheap to clone.
#[derive(Debug, Clone)]
pub struct MockService {
    state: Arc<ServerState>,
}

impl MockService {
    /// Validates `config`; the policies' clock starts now.
    pub fn new(config: MockConfig) -> Result<Self, MockError> {
        config.validate()?;
        let rng = match config.server.seed {
            Some(seed) => StdRng::seed_from_u64(seed),
            None => StdRng::from_rng(&mut rand::rng()),
        };
        let policies = config.routes.iter().map(|r| Mutex::new(RoutePolicies::new(r.policies.clone()))).collect();
        let state = Arc::new(ServerState {
            config,
            start: Instant::now(),
            policies,
            rng: Mutex::new(rng),
            arrivals: Mutex::new(VecDeque::new()),
        });
        Ok(Self { state })
    }

    /// The configuration it serves.
    pub fn config(&self) -> &MockConfig {
        &self.state.config
    }

    /// The latest requests (up to [`ARRIVAL_LOG_CAPACITY`]), oldest first.
    pub fn arrivals(&self) -> Vec<Arrival> {
        self.state.arrivals.lock().iter().cloned().collect()
    }

    /// Answers one request as the server would, body included (its latency and slow body take
    /// tokio time); a connection reset fault is an `Err`.
    pub async fn call(&self, request: http::Request<Bytes>) -> Exchanged {
        let (parts, body) = request.into_parts();
        let response = handle(State(Arc::clone(&self.state)), parts.method, parts.uri, parts.headers, body).await;
        let (parts, body) = response.into_parts();
        match axum::body::to_bytes(body, usize::MAX).await {
            Ok(body) => Ok(http::Response::from_parts(parts, body)),
            Err(err) => Err(format!("the connection was closed without a response ({err})").into()),
        }
    }
}

impl Transport for MockService {
    fn exchange(&self, request: http::Request<Bytes>) -> BoxFuture<'static, Exchanged> {
        let service = self.clone();
        Box::pin(async move { service.call(request).await })
    }
}

impl Drop for MockServer {
    /// A server dropped without `shutdown` stops gracefully in the background.
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// An API key as the log shows it: its first four characters, then `…` (keys are secrets,
/// even in a demo server's log).
fn masked_key(key: &str) -> String {
    let shown: String = key.chars().take(4).collect();
    if key.chars().count() > 4 { format!("{shown}…") } else { "…".to_owned() }
}

impl ServerState {
    fn record(&self, arrival: Arrival) {
        tracing::info!(
            target: "ratescope::mock",
            "{:>9.3}s {} key={} -> {:?}",
            arrival.at.as_secs_f64(),
            arrival.path,
            arrival.key.as_deref().map_or_else(|| "-".to_owned(), masked_key),
            arrival.outcome
        );
        let mut log = self.arrivals.lock();
        if log.len() >= ARRIVAL_LOG_CAPACITY {
            log.pop_front();
        }
        log.push_back(arrival);
    }
}

/// What an admitted request will get, drawn at arrival from the (seeded) generator.
struct Plan {
    delay: Duration,
    fault: Option<FaultKind>,
}

impl Plan {
    fn draw(route: &RouteConfig, rng: &mut StdRng) -> Self {
        let jitter = duration_nanos(route.latency.jitter);
        let jitter = if jitter == 0 { 0 } else { rng.random_range(0..=jitter) };
        let delay = route.latency.fixed.saturating_add(Duration::from_nanos(jitter));
        let f = &route.faults;
        let fault = if chance(rng, f.error_rate) && !f.error_statuses.is_empty() {
            let status = f.error_statuses[rng.random_range(0..f.error_statuses.len())];
            Some(FaultKind::Error(status))
        } else if chance(rng, f.reset_rate) {
            Some(FaultKind::Reset)
        } else if chance(rng, f.slow_body_rate) {
            Some(FaultKind::SlowBody)
        } else {
            None
        };
        Self { delay, fault }
    }
}

/// A draw with probability `share` (never panics: shares outside 0..=1 are clamped, NaN is never).
fn chance(rng: &mut StdRng, share: f64) -> bool {
    share > 0.0 && rng.random_bool(share.min(1.0))
}

async fn handle(
    State(state): State<Arc<ServerState>>,
    method: Method,
    uri: Uri,
    request: HeaderMap,
    body: Bytes,
) -> Response {
    let at = state.start.elapsed();
    let path = uri.path().to_owned();
    let key = api_key(&request, &state.config.server.api_key_header);
    let record = |route: &str, outcome| {
        state.record(Arrival { at, route: route.to_owned(), path: path.clone(), key: key.clone(), outcome })
    };

    let Some(index) = state.config.route_for(&path) else {
        record("", Outcome::Served(404));
        let routes: Vec<&str> = state.config.routes.iter().map(|r| r.prefix.as_str()).collect();
        return json_response(
            StatusCode::NOT_FOUND,
            HeaderMap::new(),
            json!({"error": "no route", "path": path, "routes": routes}),
        );
    };
    let (Some(route), Some(policies)) = (state.config.routes.get(index), state.policies.get(index)) else {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    };
    let count_key = match route.count_by {
        CountBy::Global => None,
        CountBy::Key => Some(key.as_deref().unwrap_or("")),
    };
    let work = match read_work(route, &state.config, &method, &body) {
        Ok(work) => work,
        Err((status, message)) => {
            record(&route.prefix, Outcome::Served(status.as_u16()));
            let mut headers = HeaderMap::new();
            if status == StatusCode::METHOD_NOT_ALLOWED {
                headers.insert(ALLOW, HeaderValue::from_static("POST"));
            }
            return json_response(status, headers, bad_request(route.api, message));
        }
    };
    // `?ids=1,2,3` on a JSON route: one entry per id, and still one request to the limits.
    let items = match route.api {
        Api::Json => items_answer(uri.query()),
        _ => Ok(None),
    };
    let items = match items {
        Ok(items) => items,
        Err(message) => {
            record(&route.prefix, Outcome::Served(400));
            return json_response(StatusCode::BAD_REQUEST, HeaderMap::new(), bad_request(route.api, message));
        }
    };
    let decision = policies.lock().check_charges(count_key, duration_nanos(at), &work.charges());

    if !decision.admitted {
        let status = StatusCode::from_u16(route.status).unwrap_or(StatusCode::TOO_MANY_REQUESTS);
        record(&route.prefix, Outcome::Limited(status.as_u16()));
        return refused(route, status, &decision, &work);
    }

    let plan = Plan::draw(route, &mut state.rng.lock());
    let answer = work.answer(route, &decision).or_else(|| {
        items.map(|mut items| {
            items["route"] = json!(route.prefix);
            items["path"] = json!(path);
            items["ok"] = json!(true);
            items
        })
    });
    let content = Content::new(route, &path, &request, answer);
    let outcome = match plan.fault {
        Some(fault) => Outcome::Fault(fault),
        None => Outcome::Served(content.status.as_u16()),
    };
    record(&route.prefix, outcome);
    if !plan.delay.is_zero() {
        tokio::time::sleep(plan.delay).await;
    }
    respond(route, decision, plan.fault, content)
}

/// The answer to a request the route's limits refused: `status` with the rate-limit headers,
/// never cached, and a JSON body naming the policy, the wait and (for a query) the cost.
fn refused(route: &RouteConfig, status: StatusCode, decision: &Decision, work: &Work) -> Response {
    let mut headers = rate_headers(route, decision);
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    let mut body = json!({"error": "rate limited", "route": route.prefix});
    if let Some(policy) = decision.denied_by() {
        body["policy"] = json!(policy.name);
    }
    if route.retry_after
        && let Some(secs) = decision.retry_after
    {
        body["retry_after"] = json!(secs);
    }
    if let Work::Query(cost) = work {
        let (errors, extensions) = cost.throttled(&decision.policies, &route.policies);
        body["errors"] = errors;
        body["extensions"] = extensions;
    }
    json_response(status, headers, body)
}

/// The request as its route's API reads it; a method or body it cannot take is refused at
/// once (405, 400, with the message), before any limit counts it.
fn read_work(
    route: &RouteConfig,
    config: &MockConfig,
    method: &Method,
    body: &[u8],
) -> Result<Work, (StatusCode, String)> {
    if route.api == Api::Json {
        return Ok(Work::Plain);
    }
    if *method != Method::POST {
        let message = format!("{} answers POST requests with a JSON body", route.prefix);
        return Err((StatusCode::METHOD_NOT_ALLOWED, message));
    }
    let seed = config.server.seed.unwrap_or_default();
    Work::read(route.api, &route.policies, body, seed).map_err(|message| (StatusCode::BAD_REQUEST, message))
}

/// The value of the API key header, if any (cut to a sane length).
fn api_key(request: &HeaderMap, header: &HeaderName) -> Option<String> {
    let value = request.get(header)?;
    let text = String::from_utf8_lossy(value.as_bytes());
    Some(text.trim().chars().take(MAX_KEY_LEN).collect())
}

/// The normal answer of an admitted request: a JSON body, or 304 when the client's ETag matches.
struct Content {
    status: StatusCode,
    body: Bytes,
    etag: Option<String>,
}

impl Content {
    /// `answer` is the API's own body (a chat completion, a query's data and cost), if any.
    fn new(route: &RouteConfig, path: &str, request: &HeaderMap, answer: Option<serde_json::Value>) -> Self {
        let mut value = answer.unwrap_or_else(|| json!({"route": route.prefix, "path": path, "ok": true}));
        if route.cache.is_some() && value.get("items").is_none() {
            // Deterministic content, so its ETag is stable across requests and restarts.
            value["items"] = json!([{"id": 1, "name": "anvil"}, {"id": 2, "name": "rope"}, {"id": 3, "name": "lamp"}]);
        }
        let body = Bytes::from(value.to_string());
        let etag = route.cache.map(|_| format!("\"{:016x}\"", fnv1a(&body)));
        let not_modified = etag.as_deref().is_some_and(|etag| if_none_match(request, etag));
        let status = if not_modified { StatusCode::NOT_MODIFIED } else { StatusCode::OK };
        Self { status, body, etag }
    }
}

/// Whether `If-None-Match` lists `etag` (weak comparison) or is `*`.
fn if_none_match(request: &HeaderMap, etag: &str) -> bool {
    request.get_all(IF_NONE_MATCH).iter().filter_map(|v| v.to_str().ok()).flat_map(|v| v.split(',')).any(|tag| {
        let tag = tag.trim();
        tag == "*" || tag.strip_prefix("W/").unwrap_or(tag) == etag
    })
}

/// 64-bit FNV-1a: a stable content hash for ETags (and the LLM route's completions).
pub(super) fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &b| (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

fn rate_headers(route: &RouteConfig, decision: &Decision) -> HeaderMap {
    let mut headers = HeaderMap::new();
    write_headers(&mut headers, route.dialect, decision, route.retry_after, SystemTime::now());
    headers
}

fn respond(route: &RouteConfig, decision: Decision, fault: Option<FaultKind>, content: Content) -> Response {
    let mut headers = rate_headers(route, &decision);
    let guard = decision.guard;
    if let Some(FaultKind::Error(code)) = fault {
        let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
        let body = json!({"error": "injected fault", "route": route.prefix, "status": code}).to_string();
        return body_response(status, headers, Bytes::from(body), guard, None, Duration::ZERO);
    }
    match (&content.etag, route.cache) {
        (Some(etag), Some(max_age)) => {
            if let Ok(value) = HeaderValue::from_str(etag) {
                headers.insert(ETAG, value);
            }
            if let Ok(value) = HeaderValue::from_str(&format!("max-age={}", max_age.as_secs())) {
                headers.insert(CACHE_CONTROL, value);
            }
        }
        _ => {
            headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
        }
    }
    if content.status == StatusCode::NOT_MODIFIED && fault != Some(FaultKind::Reset) {
        // No body; the guard is released as the head goes out.
        return (content.status, headers).into_response();
    }
    body_response(content.status, headers, content.body, guard, fault, route.faults.slow_body)
}

fn json_response(status: StatusCode, mut headers: HeaderMap, body: serde_json::Value) -> Response {
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    (status, headers, body.to_string()).into_response()
}

/// A JSON response whose body holds `guard` until it has been sent, and carries out a body fault
/// (a slow body takes `slow` in all).
fn body_response(
    status: StatusCode,
    mut headers: HeaderMap,
    body: Bytes,
    guard: ConcurrencyGuard,
    fault: Option<FaultKind>,
    slow: Duration,
) -> Response {
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    let parts = SLOW_CHUNKS as u32;
    let body = match fault {
        Some(FaultKind::Reset) => reset_body(guard),
        Some(FaultKind::SlowBody) => Body::from_stream(chunks(body, SLOW_CHUNKS, slow / parts, guard)),
        _ if guard.holds_slots() => Body::from_stream(chunks(body, 1, Duration::ZERO, guard)),
        _ => Body::from(body),
    };
    (status, headers, body).into_response()
}

/// A body that fails before its first byte: hyper then closes the connection without a response.
fn reset_body(guard: ConcurrencyGuard) -> Body {
    Body::from_stream(stream::once(async move {
        drop(guard);
        Err::<Bytes, io::Error>(io::Error::new(io::ErrorKind::ConnectionReset, "injected connection reset"))
    }))
}

/// `body` in `parts` chunks, each after `pause`; `guard` is released when the stream ends or is dropped.
fn chunks(
    body: Bytes,
    parts: usize,
    pause: Duration,
    guard: ConcurrencyGuard,
) -> impl futures_util::Stream<Item = Result<Bytes, io::Error>> + Send + 'static {
    let size = body.len().div_ceil(parts.max(1)).max(1);
    let pieces: VecDeque<Bytes> =
        (0..body.len()).step_by(size).map(|at| body.slice(at..(at + size).min(body.len()))).collect();
    stream::unfold((pieces, guard), move |(mut pieces, guard)| async move {
        let piece = pieces.pop_front()?;
        if !pause.is_zero() {
            tokio::time::sleep(pause).await;
        }
        Some((Ok(piece), (pieces, guard)))
    })
}

/// Whether `ip` is one the mock server may bind (127.0.0.0/8, ::1, or ::ffff:127.x.y.z).
pub fn is_loopback(ip: IpAddr) -> bool {
    ip.to_canonical().is_loopback()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_masked_in_the_log() {
        assert_eq!(masked_key("sk-live-0123456789"), "sk-l…");
        assert_eq!(masked_key("abc"), "…");
    }
}
