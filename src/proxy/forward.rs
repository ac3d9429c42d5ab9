//! One forwarded request: route, admission (limiter, load shedding), the upstream exchange with
//! bodies streamed both ways, retries with the key paused on 429/503, the cache, 502/504.
//!
//! The request body is read before admission, up to `replay_limit`: a body that fits is kept
//! (every bodiless GET's does) and can be sent again on a retry; a larger one is streamed through
//! once, what was read first and then the rest, and its request is never retried (the
//! upstream's answer, even a 429, goes back as is). A body the caller breaks (malformed chunked
//! framing, a connection cut mid-body) is answered 400; within the first `replay_limit` bytes
//! that happens before the limiter is asked, so it costs no token.
//! Response bodies are always streamed, except when the cache keeps a copy; the limiter's
//! permit (a concurrency slot) is held until the caller has the whole body.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use axum::body::{Body, HttpBody};
use axum::extract::Request;
use axum::response::Response;
use bytes::Bytes;
use futures_util::StreamExt;
use http::header::CONTENT_TYPE;
use http::{HeaderMap, HeaderValue, Method, StatusCode};
use http_body_util::BodyExt;
use parking_lot::Mutex;
use rand::SeedableRng;
use rand::rngs::StdRng;
use tokio::sync::watch;
use tokio::time::Instant;
use url::Url;

use super::config::ProxyConfig;
use super::error::ProxyError;
use super::hop::{caller_response_headers, upstream_request_headers};
use super::shed::{Shed, shed};
use crate::engine::{Cost, Limiter, Overload, Permit, Priority, QueueCounts, format_wait};
use crate::http::adaptive;
use crate::http::admission::Admission;
use crate::http::answer::{Answer, wait_to_retry};
use crate::http::cache::{CachedResponse, ResponseCache};
use crate::http::client::{ResponseHead, error_chain};
use crate::http::policy::Routed;
use crate::http::report::{Reporter, admit_shared};
use crate::http::retry::Decision;
use crate::http::{EventKind, RetryPolicy};
use crate::store::{SharedGate, SharedHandle};

/// The proxy's state, one for all its requests: its settings, the upstream client, the cache and counters.
#[derive(Debug)]
pub(crate) struct Proxy {
    pub(crate) config: ProxyConfig,
    http: reqwest::Client,
    pub(crate) cache: Option<ResponseCache>,
    /// Shared budgets (Redis) by limiter key, awaited after the local permit.
    gates: HashMap<String, SharedGate>,
    pub(crate) shared: Option<SharedHandle>,
    queues: QueueCounts,
    next_id: AtomicU64,
    rng: Mutex<StdRng>,
    pub(crate) in_flight: AtomicUsize,
    /// Set when the drain deadline passed: unfinished requests are answered 503 at once.
    pub(crate) cut_off: watch::Sender<bool>,
}

/// The request body: kept for retries, or streamed through once.
enum RequestBody {
    Replayable(Bytes),
    Streaming {
        body: Option<Body>,
        /// Why the caller's body failed while it was streamed upstream, if it did.
        broken: Arc<Mutex<Option<String>>>,
    },
}

impl RequestBody {
    /// Reads `body` up to `limit` bytes: all of it (replayable), or more than `limit` (the
    /// part read, then the rest, streamed). A known size above `limit` is streamed at once.
    /// Fails with the reason when the caller's body is malformed or cut off.
    async fn read(mut body: Body, limit: usize) -> Result<Self, String> {
        let streaming = |body: Body| RequestBody::Streaming { body: Some(body), broken: Arc::default() };
        if HttpBody::size_hint(&body).lower() > limit as u64 {
            return Ok(streaming(body));
        }
        let mut read: Vec<Bytes> = Vec::new();
        let mut size = 0usize;
        while let Some(frame) = body.frame().await {
            // Trailers are dropped: the upstream request carries none either way.
            let Ok(data) = frame.map_err(|err| error_chain(&err))?.into_data() else { continue };
            size += data.len();
            read.push(data);
            if size > limit {
                let read = futures_util::stream::iter(read.into_iter().map(Ok));
                return Ok(streaming(Body::from_stream(read.chain(body.into_data_stream()))));
            }
        }
        Ok(match read.len() {
            0 => RequestBody::Replayable(Bytes::new()),
            1 => RequestBody::Replayable(read.swap_remove(0)),
            _ => RequestBody::Replayable(read.concat().into()),
        })
    }

    /// Why the caller's streamed body failed, if it did.
    fn broken(&self) -> Option<String> {
        match self {
            RequestBody::Replayable(_) => None,
            RequestBody::Streaming { broken, .. } => broken.lock().clone(),
        }
    }
}

/// Reads one attempt's upstream answer: its rate-limit headers (a `Response` event) and, for
/// an adaptive key, what its mirror makes of them (with the permit's ticket).
fn read_answer(
    upstream: Upstream,
    attempt: u32,
    service_time: Duration,
    events: &Reporter<'_>,
    adaptive: Option<&Limiter>,
    admission: &Admission,
) -> Answer<reqwest::Response> {
    match upstream {
        Upstream::Response(response) => {
            let status = response.status();
            let head = ResponseHead { status, headers: response.headers(), body: None };
            let info = head.interpret(attempt, service_time, events);
            if let Some(limiter) = adaptive {
                let ticket = admission.permit.as_ref().and_then(Permit::ticket);
                for note in adaptive::observe(limiter, ticket, status.as_u16(), &info, Instant::now()) {
                    events.emit(EventKind::Adaptive { note });
                }
            }
            Answer::Response { status, info, held: response }
        }
        Upstream::Unreachable(message) => Answer::ConnectionError(message),
        Upstream::TimedOut => Answer::Timeout,
    }
}

/// Reads the whole upstream response, keeps it in the cache when it may be (a 304 serves the
/// cached body, reported as a revalidated cache hit), and answers the caller from it.
async fn cache_and_answer(
    cache: &ResponseCache,
    uri: &http::Uri,
    (method, headers): (&Method, &HeaderMap),
    host: &str,
    response: reqwest::Response,
    report: &Reporter<'_>,
) -> Response {
    let status = response.status();
    let response_headers = response.headers().clone();
    match response.bytes().await {
        Ok(bytes) => {
            let fresh = CachedResponse { status, headers: response_headers, body: bytes };
            cached_response(cache.keep(method, uri, headers, fresh, report).0)
        }
        Err(err) => plain(StatusCode::BAD_GATEWAY, &format!("{host}: {}", error_chain(&err))),
    }
}

/// What one attempt on the wire produced.
enum Upstream {
    Response(reqwest::Response),
    Unreachable(String),
    TimedOut,
}

/// Counts a request in flight for as long as it lives.
struct InFlight<'a>(&'a AtomicUsize);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Every request of every connection, from `peer`.
pub(crate) async fn handle(proxy: Arc<Proxy>, peer: SocketAddr, request: Request) -> Response {
    proxy.in_flight.fetch_add(1, Ordering::AcqRel);
    let _in_flight = InFlight(&proxy.in_flight);
    let mut cut_off = proxy.cut_off.subscribe();
    tokio::select! {
        response = proxy.forward(peer.ip(), request) => response,
        _ = cut_off.wait_for(|cut| *cut) => {
            plain(StatusCode::SERVICE_UNAVAILABLE, "the proxy shut down before this request finished")
        }
    }
}

impl Proxy {
    /// Needs a tokio runtime when budgets are shared (the store connects lazily).
    pub(crate) fn new(config: ProxyConfig) -> Result<Self, ProxyError> {
        crate::http::install_tls_provider();
        let mut http = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none());
        if let Some(timeout) = config.connect_timeout {
            http = http.connect_timeout(timeout);
        } else {
            // Paused-time tests: no idle-connection sweeps either.
            http = http.pool_idle_timeout(None);
        }
        let (gates, shared) = match &config.shared {
            Some(settings) => {
                let (gates, handle) = settings
                    .share(&config.policy.registry)
                    .map_err(|err| ProxyError::BadSetting { setting: "--redis", problem: err.to_string() })?;
                (gates.into_iter().collect(), Some(handle))
            }
            None => (HashMap::new(), None),
        };
        Ok(Self {
            cache: config.cache.map(ResponseCache::new),
            http: http.build().map_err(|err| ProxyError::Client(err.to_string()))?,
            gates,
            shared,
            config,
            queues: QueueCounts::default(),
            next_id: AtomicU64::new(0),
            rng: Mutex::new(StdRng::from_os_rng()),
            in_flight: AtomicUsize::new(0),
            cut_off: watch::Sender::new(false),
        })
    }

    /// Admission of one forwarded request: the single step between a caller and the wire.
    ///
    /// 1. The local limiter of the upstream key: admitted at once when nobody waits and the
    ///    budgets allow it; else the request queues, unless `max_queue_len` already wait or
    ///    the wait ahead is expected to exceed `max_queue_wait` (then it is shed with a 429),
    ///    and it is shed when it has waited `max_queue_wait`.
    /// 2. The shared budget (Redis, when configured) is awaited here, after the local permit, so the
    ///    local queue orders callers and the shared gate only sees admitted requests.
    ///
    /// The shared budget's answer is reported as the client reports it (`StoreState` when the
    /// store's state changed, `SharedAdmitted`), as attempt `attempt` of `report`'s request.
    pub(crate) async fn admit(
        &self,
        limiter: Option<&Limiter>,
        priority: Priority,
        attempt: u32,
        report: &Reporter<'_>,
    ) -> Result<Admission, Shed> {
        let Some(limiter) = limiter else { return Ok(Admission::at_once(None)) };
        let queued_at = Instant::now();
        let shedding = self.config.shedding;
        let admitted = self.queues.admit(limiter, priority, Cost::requests(1), &shedding).await;
        let permit = admitted.map_err(|overload| {
            let key = limiter.key();
            let ahead = overload.ahead();
            let reason = match overload {
                Overload::Invalid(err) => err.to_string(),
                Overload::QueueFull { waiting } => format!("{waiting} requests already wait for {key}"),
                Overload::TooLong { expected, .. } => format!(
                    "{key} is expected to take {} to reach this request, longer than the {} this proxy queues",
                    format_wait(expected),
                    format_wait(shedding.max_queue_wait)
                ),
                Overload::Waited { err, .. } => format!("{key}: {err}"),
            };
            shed(limiter, ahead, reason)
        })?;
        if let Some(gate) = self.gates.get(limiter.key()) {
            // The shared budget, within what is left of the queueing allowance (holding the permit).
            let deadline = queued_at + self.config.shedding.max_queue_wait;
            match tokio::time::timeout_at(deadline, admit_shared(gate, &Cost::requests(1), attempt, report)).await {
                Ok(Ok(_)) => {}
                Ok(Err(err)) => return Err(shed(limiter, 0, format!("{}: shared budget: {err}", limiter.key()))),
                Err(_) => {
                    let reason = format!(
                        "{}: the shared budget did not admit this request within {}",
                        limiter.key(),
                        format_wait(self.config.shedding.max_queue_wait)
                    );
                    return Err(shed(limiter, 0, reason));
                }
            }
        }
        // The proxy counts requests only (no cost rules): a shared reservation has nothing to settle.
        Ok(Admission { permit: Some(permit), waited: queued_at.elapsed(), shared: None })
    }

    /// One caller's request: its route and upstream URL, its body (read before admission, so a
    /// broken one costs no token), the cache, then attempts through the limiter until the
    /// retry policy is done; the answer streams back holding the concurrency slot.
    async fn forward(&self, peer: IpAddr, request: Request) -> Response {
        let started = Instant::now();
        let (mut parts, body) = request.into_parts();
        // The path is normalised and checked before anything else: the route's secrets go only
        // to a URL inside that route.
        let (url, secrets) = match self.config.upstream_for(&parts.uri) {
            Ok((route, url)) => (url, &route.secrets),
            Err(refusal) => {
                tracing::info!("{} refused: {refusal}", parts.method);
                return plain(refusal.status(), &refusal.to_string());
            }
        };
        let host = url.host_str().unwrap_or_default().to_ascii_lowercase();
        let policy = &self.config.policy;
        let Routed { limiter, adaptive, retry: key_retry, report: events } =
            policy.routed(policy.limiter_for(&host, &url), &self.next_id);
        let adaptive = limiter.as_ref().filter(|_| adaptive);
        let mut headers = upstream_request_headers(std::mem::take(&mut parts.headers), peer, secrets);
        // Before admission: a caller's broken body must not cost a token.
        let mut body = match RequestBody::read(body, self.config.replay_limit).await {
            Ok(body) => body,
            Err(reason) => return bad_body(&parts.method, parts.uri.path(), &reason),
        };
        let retry = self.retry_for(&body, key_retry);
        let cache = self.cache.as_ref().filter(|_| matches!(parts.method, Method::GET | Method::HEAD));
        let uri: Option<http::Uri> = cache.and_then(|_| url.as_str().parse().ok());
        if let (Some(cache), Some(uri)) = (cache, &uri)
            && let Some(fresh) = cache.serve(&parts.method, uri, &mut headers, &events, started)
        {
            return cached_response(fresh);
        }
        let mut attempt = 0u32;
        let mut previous_delay = None;
        loop {
            attempt += 1;
            let admission = match self.admit_attempt(limiter.as_ref(), attempt, &events).await {
                Ok(admission) => admission,
                Err(shed) => {
                    tracing::info!("{} {} -> 429 from the proxy: {}", parts.method, parts.uri.path(), shed.reason);
                    return shed.into_response();
                }
            };
            events.emit(EventKind::Sent { attempt, method: parts.method.to_string(), path: url.path().to_owned() });
            let sent_at = Instant::now();
            let upstream = self.send_once(&parts.method, &url, &headers, &mut body).await;
            let answer = read_answer(upstream, attempt, sent_at.elapsed(), &events, adaptive, &admission);
            let decision =
                retry.decide(attempt, &answer.outcome(), &parts.method, previous_delay, &mut *self.rng.lock());
            answer.pause_key(limiter.as_ref(), &decision, &retry, attempt, &events);
            if let Decision::Retry { delay, reason } = decision {
                // The response (its connection) and the slot go back before the wait.
                let cause = answer.cause();
                drop(answer);
                drop(admission);
                previous_delay = Some(delay);
                wait_to_retry(&events, attempt, delay, reason, cause).await;
                continue;
            }
            let response = match answer {
                Answer::Response { held, .. } => held,
                Answer::ConnectionError(message) => {
                    return self.failed(&parts, &host, &body, Some(message), attempt, &events);
                }
                Answer::Timeout => return self.failed(&parts, &host, &body, None, attempt, &events),
            };
            let status = response.status();
            events.emit(EventKind::Finished { status: status.as_u16(), attempts: attempt, total: started.elapsed() });
            let (method, path, queued) = (&parts.method, parts.uri.path(), format_wait(admission.waited));
            tracing::info!("{method} {path} -> {} after {attempt} attempt(s), {queued} queued", status.as_u16());
            return match (cache, &uri) {
                (Some(cache), Some(uri)) => {
                    cache_and_answer(cache, uri, (method, &headers), &host, response, &events).await
                }
                _ => streamed(response, admission.permit),
            };
        }
    }

    /// The request's retry policy: its key's (`key_retry`); a body that streams through cannot be
    /// sent twice, so it gets the default policy with one attempt.
    fn retry_for(&self, body: &RequestBody, key_retry: &RetryPolicy) -> RetryPolicy {
        match body {
            RequestBody::Replayable(_) => key_retry.clone(),
            RequestBody::Streaming { .. } => RetryPolicy { max_attempts: 1, ..self.config.policy.retry.clone() },
        }
    }

    /// Waits for the key's limiter and shared budget (reported as `Queued` and `Admitted`), or
    /// sheds the request (reported as `Failed`).
    async fn admit_attempt(
        &self,
        limiter: Option<&Limiter>,
        attempt: u32,
        events: &Reporter<'_>,
    ) -> Result<Admission, Shed> {
        if limiter.is_some() {
            events.emit(EventKind::Queued { attempt, priority: Priority::Normal });
        }
        match self.admit(limiter, Priority::Normal, attempt, events).await {
            Ok(admission) => {
                if limiter.is_some() {
                    events.emit(EventKind::Admitted { attempt, queue_wait: admission.waited });
                }
                Ok(admission)
            }
            Err(shed) => {
                events.emit(EventKind::Failed { error: format!("shed: {}", shed.reason), attempts: attempt - 1 });
                Err(shed)
            }
        }
    }

    /// The caller's answer when the last attempt got no response: 400 for a body that broke
    /// on the way, else 502 (could not reach) or 504 (no answer in time).
    fn failed(
        &self,
        parts: &http::request::Parts,
        host: &str,
        body: &RequestBody,
        failure: Option<String>,
        attempts: u32,
        events: &Reporter<'_>,
    ) -> Response {
        if let Some(reason) = body.broken() {
            events.emit(EventKind::Failed { error: format!("request body: {reason}"), attempts });
            return bad_body(&parts.method, parts.uri.path(), &reason);
        }
        let (status, message) = match failure {
            Some(message) => (StatusCode::BAD_GATEWAY, format!("could not reach {host}: {message}")),
            None => (StatusCode::GATEWAY_TIMEOUT, format!("{host} did not answer in time")),
        };
        events.emit(EventKind::Failed { error: message.clone(), attempts });
        tracing::info!("{} {} -> {}: {message}", parts.method, parts.uri.path(), status.as_u16());
        plain(status, &message)
    }

    async fn send_once(&self, method: &Method, url: &Url, headers: &HeaderMap, body: &mut RequestBody) -> Upstream {
        let mut request = self.http.request(method.clone(), url.clone()).headers(headers.clone());
        match body {
            RequestBody::Replayable(bytes) if !bytes.is_empty() => request = request.body(bytes.clone()),
            RequestBody::Replayable(_) => {}
            RequestBody::Streaming { body, broken } => {
                if let Some(body) = body.take() {
                    let broken = Arc::clone(broken);
                    let stream = body.into_data_stream().inspect(move |item| {
                        if let Err(err) = item {
                            *broken.lock() = Some(error_chain(err));
                        }
                    });
                    request = request.body(reqwest::Body::wrap_stream(stream));
                }
            }
        }
        let send = request.send();
        let result = match self.config.upstream_timeout {
            Some(timeout) => match tokio::time::timeout(timeout, send).await {
                Ok(result) => result,
                Err(_) => return Upstream::TimedOut,
            },
            None => send.await,
        };
        match result {
            Ok(response) => Upstream::Response(response),
            Err(err) if err.is_timeout() => Upstream::TimedOut,
            Err(err) => Upstream::Unreachable(error_chain(&err)),
        }
    }
}

/// The upstream response streamed to the caller; `permit` is held until the body is done.
fn streamed(mut response: reqwest::Response, permit: Option<Permit>) -> Response {
    let status = response.status();
    let headers = caller_response_headers(std::mem::take(response.headers_mut()));
    let body = response.bytes_stream().map(move |chunk| {
        let _held = &permit;
        chunk
    });
    let mut reply = Response::new(Body::from_stream(body));
    *reply.status_mut() = status;
    *reply.headers_mut() = headers;
    reply
}

fn cached_response(cached: CachedResponse) -> Response {
    let mut reply = Response::new(Body::from(cached.body));
    *reply.status_mut() = cached.status;
    *reply.headers_mut() = caller_response_headers(cached.headers);
    reply
}

/// 400 for a request body the caller broke (malformed chunked framing, cut off mid-body).
fn bad_body(method: &Method, path: &str, reason: &str) -> Response {
    tracing::info!("{method} {path} -> 400: the request body is malformed or incomplete: {reason}");
    plain(StatusCode::BAD_REQUEST, &format!("the request body is malformed or incomplete: {reason}"))
}

/// A short plain-text answer from the proxy itself.
fn plain(status: StatusCode, message: &str) -> Response {
    let mut reply = Response::new(Body::from(format!("ratescope proxy: {message}\n")));
    *reply.status_mut() = status;
    reply.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    reply
}
