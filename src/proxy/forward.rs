//! One forwarded request: route, the cache, then the attempt loop every face shares over the
//! upstream ([`Forwarding`]: admission with load shedding, the exchange with bodies streamed
//! both ways, retries with the key paused on 429/503), and the proxy's own 400/429/502/504.
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
use std::future::{Future, ready};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::task::Poll;

use axum::body::{Body, HttpBody};
use axum::response::Response;
use bytes::Bytes;
use futures_util::StreamExt;
use futures_util::future::Either;
use http::header::CONTENT_TYPE;
use http::uri::PathAndQuery;
use http::{HeaderMap, HeaderValue, Method, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use parking_lot::{Mutex, RwLock};
use rand::SeedableRng;
use rand::rngs::StdRng;
use tokio::sync::watch;
use tokio::time::Instant;

use super::config::{ProxyConfig, Route};
use super::deadlines::Answering;
use super::error::ProxyError;
use super::hop::{caller_response_headers, upstream_request_headers};
use super::metrics::{Ended, KeyMetrics, ProxyMetrics};
use super::path::lenient_readings;
use super::shed::shed;
use super::upstream::{Outgoing, Upstream, UpstreamBody, Upstreams};
use crate::engine::{Cost, Limiter, Overload, Permit, Priority, QueueCounts, format_wait};
use crate::http::admission::{Admission, AdmissionStep, Refusal};
use crate::http::answer::Answer;
use crate::http::attempts::{self, Face, Sent, Steps};
use crate::http::cache::{CachedResponse, ResponseCache};
use crate::http::client::{ResponseHead, error_chain};
use crate::http::policy::{Policy, Routed};
use crate::http::report::Reporter;
use crate::http::retry::GiveUpReason;
use crate::http::{EventKind, RetryPolicy};
use crate::store::{SharedGate, SharedHandle};

/// The proxy's state, one for all its requests: its settings, the upstream client, the cache and counters.
#[derive(Debug)]
pub(crate) struct Proxy {
    /// The settings it started with: listen addresses, shedding, timeouts, the cache, the drain.
    pub(crate) config: ProxyConfig,
    /// The settings a reload replaces (routes, limits, retry policies), read once per request:
    /// a request keeps the ones it started with; limits change in place in the one registry.
    pub(crate) live: RwLock<Arc<ProxyConfig>>,
    /// Makes the settings a reload applies (the command line rereads its profile and flags).
    pub(crate) reloader: RwLock<Option<Reloader>>,
    upstreams: Upstreams,
    pub(crate) cache: Option<ResponseCache>,
    /// Shared budgets (Redis) by limiter key, awaited after the local permit.
    gates: HashMap<String, SharedGate>,
    pub(crate) shared: Option<SharedHandle>,
    /// What every request ended as, and the rest the admin listener serves.
    pub(crate) metrics: ProxyMetrics,
    queues: QueueCounts,
    next_id: AtomicU64,
    rng: Mutex<StdRng>,
    pub(crate) in_flight: AtomicUsize,
    /// Set when the drain deadline passed: unfinished requests are answered 503 at once.
    pub(crate) cut_off: CutOff,
}

/// The drain deadline's end: once cut, every request still running is answered 503 at once.
/// A request reads the flag each time it is polled (an atomic load); the connections that
/// serve them wait on the watch (one waiter a draining connection, none a request) and, woken,
/// poll their request, which then sees the flag.
#[derive(Debug)]
pub(crate) struct CutOff {
    cut: AtomicBool,
    woken: watch::Sender<bool>,
}

impl CutOff {
    fn new() -> Self {
        Self { cut: AtomicBool::new(false), woken: watch::Sender::new(false) }
    }

    /// Cuts off every request still running.
    pub(crate) fn cut(&self) {
        self.cut.store(true, Ordering::Release);
        self.woken.send_replace(true);
    }

    fn is_cut(&self) -> bool {
        self.cut.load(Ordering::Acquire)
    }

    /// Resolves once [`cut`](Self::cut) has been called.
    pub(crate) async fn cut_at_last(&self) {
        // The sender lives as long as `self`: the wait ends only with the cut.
        let _ = self.woken.subscribe().wait_for(|cut| *cut).await;
    }
}

/// Makes the settings a reload applies, or says why it cannot (the command line rereads its
/// profile and flags).
#[derive(Clone)]
pub struct Reloader(Arc<dyn Fn() -> Result<ProxyConfig, String> + Send + Sync>);

impl Reloader {
    /// A reloader calling `make`.
    pub fn new(make: impl Fn() -> Result<ProxyConfig, String> + Send + Sync + 'static) -> Self {
        Self(Arc::new(make))
    }
}

impl std::fmt::Debug for Reloader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Reloader")
    }
}

/// What a reload applied, and the settings it kept because they need a restart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reloaded {
    /// Routes served now.
    pub routes: usize,
    /// Limiter keys configured now.
    pub keys: usize,
    /// Settings that changed in the new configuration but apply only after a restart.
    pub kept: Vec<&'static str>,
}

impl Reloaded {
    /// "reloaded: 2 route(s), 3 limited key(s)", and the settings kept until a restart.
    pub fn describe(&self) -> String {
        let mut text = format!("reloaded: {} route(s), {} limited key(s)", self.routes, self.keys);
        if !self.kept.is_empty() {
            text.push_str(&format!("; changed but kept until a restart: {}", self.kept.join(", ")));
        }
        text
    }
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
    /// part read, then the rest, streamed). A known size above `limit` is streamed at once;
    /// a body that has already ended (a bodiless GET's) is not read at all.
    /// Fails with the reason when the caller's body is malformed or cut off.
    async fn read(mut body: Incoming, limit: usize) -> Result<Self, String> {
        let streaming = |body: Body| RequestBody::Streaming { body: Some(body), broken: Arc::default() };
        if body.is_end_stream() {
            return Ok(RequestBody::Replayable(Bytes::new()));
        }
        if HttpBody::size_hint(&body).lower() > limit as u64 {
            return Ok(streaming(Body::new(body)));
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
                return Ok(streaming(Body::from_stream(read.chain(Body::new(body).into_data_stream()))));
            }
        }
        Ok(match read.len() {
            0 => RequestBody::Replayable(Bytes::new()),
            1 => RequestBody::Replayable(read.swap_remove(0)),
            _ => RequestBody::Replayable(read.concat().into()),
        })
    }

    /// The body of one attempt: sent again (replayable) or streamed through (once; a second
    /// attempt has none, and is never made: such a request is not replayable).
    fn outgoing(&mut self) -> Outgoing {
        match self {
            RequestBody::Replayable(bytes) if bytes.is_empty() => Outgoing::Empty,
            RequestBody::Replayable(bytes) => Outgoing::Bytes(bytes.clone()),
            RequestBody::Streaming { body, broken } => match body.take() {
                Some(body) => {
                    let broken = Arc::clone(broken);
                    let stream = body.into_data_stream().inspect(move |item| {
                        if let Err(err) = item {
                            *broken.lock() = Some(error_chain(err));
                        }
                    });
                    Outgoing::Stream(Body::from_stream(stream))
                }
                None => Outgoing::Empty,
            },
        }
    }

    /// Why the caller's streamed body failed, if it did.
    fn broken(&self) -> Option<String> {
        match self {
            RequestBody::Replayable(_) => None,
            RequestBody::Streaming { broken, .. } => broken.lock().clone(),
        }
    }
}

/// Reads the whole upstream response, keeps it in the cache when it may be (a 304 serves the
/// cached body, reported as a revalidated cache hit), and answers the caller from it.
async fn cache_and_answer(
    cache: &ResponseCache,
    uri: &http::Uri,
    (method, headers): (&Method, &HeaderMap),
    host: &str,
    response: http::Response<UpstreamBody>,
    report: &Reporter<'_>,
) -> Response {
    let (parts, body) = response.into_parts();
    match body.collect().await {
        Ok(collected) => {
            let fresh = CachedResponse { status: parts.status, headers: parts.headers, body: collected.to_bytes() };
            cached_response(cache.keep(method, uri, headers, fresh, report).0)
        }
        Err(err) => plain(StatusCode::BAD_GATEWAY, &format!("{host}: {}", error_chain(&*err))),
    }
}

/// Counts a request in flight for as long as it lives.
struct InFlight<'a>(&'a AtomicUsize);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Every request of every connection, from the caller `forwarded_for` names.
/// `answering` marks the request in progress on its connection until its answer is handed over.
pub(crate) async fn handle(
    proxy: Arc<Proxy>,
    forwarded_for: HeaderValue,
    answering: Answering,
    request: hyper::Request<Incoming>,
) -> Response {
    proxy.in_flight.fetch_add(1, Ordering::AcqRel);
    let _in_flight = InFlight(&proxy.in_flight);
    // Made where it is pinned: a request's state is a few KiB, and each move copies all of it.
    let mut forwarding = std::pin::pin!(proxy.forward(&forwarded_for, answering, request));
    // Its connection wakes it when the drain deadline passes (`server::serve`).
    std::future::poll_fn(|cx| {
        if proxy.cut_off.is_cut() {
            proxy.metrics.ended("", Ended::CutOff);
            return Poll::Ready(plain(
                StatusCode::SERVICE_UNAVAILABLE,
                "the proxy shut down before this request finished",
            ));
        }
        forwarding.as_mut().poll(cx)
    })
    .await
}

impl Proxy {
    /// Needs a tokio runtime when budgets are shared (the store connects lazily).
    pub(crate) fn new(config: ProxyConfig) -> Result<Self, ProxyError> {
        let (gates, shared) = match &config.shared {
            Some(settings) => {
                let (gates, handle) = settings
                    .share(&config.policy.registry)
                    .map_err(|err| ProxyError::BadSetting { setting: "--redis", problem: err.to_string() })?;
                (gates.into_iter().collect(), Some(handle))
            }
            None => (HashMap::new(), None),
        };
        let store = shared.as_ref().map(|handle: &SharedHandle| Arc::clone(&handle.health));
        let metrics = ProxyMetrics::new(Arc::clone(&config.policy.registry), store);
        Ok(Self {
            live: RwLock::new(Arc::new(config.clone())),
            reloader: RwLock::new(None),
            metrics,
            cache: config.cache.map(ResponseCache::new),
            upstreams: Upstreams::new(config.connect_timeout)?,
            gates,
            shared,
            config,
            queues: QueueCounts::default(),
            next_id: AtomicU64::new(0),
            rng: Mutex::new(StdRng::from_os_rng()),
            in_flight: AtomicUsize::new(0),
            cut_off: CutOff::new(),
        })
    }

    /// Replaces the routes, limits and retry policies with `next`'s: each key's limits change
    /// in place (queued and in-flight requests go on under the new ones; keys no longer named
    /// are removed), new requests take the new routes. Settings a reload cannot change (listen
    /// addresses, shedding, timeouts, the cache, shared budgets) are kept and named in the
    /// report. Nothing changes when `next` is refused.
    pub(crate) fn reload(&self, next: ProxyConfig) -> Result<Reloaded, ProxyError> {
        let outcome = self.apply(next);
        self.metrics.reloaded(outcome.is_ok());
        outcome
    }

    fn apply(&self, mut next: ProxyConfig) -> Result<Reloaded, ProxyError> {
        next.validate()?;
        let entries = next.policy.registry.entries();
        for (key, limits) in &entries {
            limits
                .validate()
                .map_err(|err| ProxyError::BadSetting { setting: "limits", problem: format!("{key}: {err}") })?;
        }
        let current = Arc::clone(&self.live.read());
        let registry = Arc::clone(&current.policy.registry);
        let mut kept = Vec::new();
        let started = &self.config;
        let fixed = [
            ("--listen", started.listen != next.listen),
            ("--admin", started.admin != next.admin),
            ("--max-queue-wait / --max-queue", started.shedding != next.shedding),
            ("--cache", started.cache.is_some() != next.cache.is_some()),
            ("--redis", started.shared.is_some() != next.shared.is_some()),
        ];
        kept.extend(fixed.iter().filter(|(_, changed)| *changed).map(|(setting, _)| *setting));
        let removed: Vec<_> = registry
            .entries()
            .into_iter()
            .map(|(key, _)| key)
            .filter(|key| !entries.iter().any(|(k, _)| k == key))
            .collect();
        for (key, limits) in entries.iter().cloned() {
            registry
                .set(key, limits)
                .map_err(|err| ProxyError::BadSetting { setting: "limits", problem: err.to_string() })?;
        }
        for key in &removed {
            registry.remove(key);
        }
        next.policy.registry = registry;
        // The event sink stays: whoever listens to the proxy's requests keeps listening.
        next.policy.events = current.policy.events.clone();
        let routes = next.routes.len();
        *self.live.write() = Arc::new(next);
        Ok(Reloaded { routes, keys: entries.len(), kept })
    }

    /// Reloads from the installed [`Reloader`]; fails when none is installed or it fails.
    pub(crate) fn reload_from_source(&self) -> Result<Reloaded, ProxyError> {
        let reloader = self.reloader.read().clone();
        let next = match reloader {
            Some(reloader) => (reloader.0)(),
            None => Err("this proxy has nothing to reload from".to_owned()),
        };
        match next {
            Ok(next) => self.reload(next),
            Err(problem) => {
                self.metrics.reloaded(false);
                Err(ProxyError::BadSetting { setting: "reload", problem })
            }
        }
    }

    /// One caller's request: its route and upstream URL, its body (read before admission, so a
    /// broken one costs no token), the cache, then the attempt loop every face shares, over the
    /// upstream ([`Forwarding`]); the answer streams back holding the concurrency slot.
    async fn forward(&self, peer: &HeaderValue, answering: Answering, request: hyper::Request<Incoming>) -> Response {
        let started = Instant::now();
        let (mut parts, body) = request.into_parts();
        // The path is normalised and checked before anything else: the route's secrets go only
        // with a target inside that route.
        let live = Arc::clone(&self.live.read());
        let (route, target) = match live.upstream_for(&parts.uri) {
            Ok(routed) => routed,
            Err(refusal) => {
                let status = refusal.status().as_u16();
                tracing::info!(method = %parts.method, status, reason = %refusal, "refused");
                self.metrics.ended("", Ended::Refused);
                return plain(refusal.status(), &refusal.to_string());
            }
        };
        // The target goes to the route's upstream: its host and `host[:port]` are the route's.
        let authority = route.authority();
        let policy = &live.policy;
        let limiter = limiter_of(policy, route, target.path());
        let Routed { limiter, adaptive, retry, report } = policy.routed(limiter, &self.next_id);
        // The request's key in the metrics: its limiter's, or the upstream's `host[:port]`.
        let metrics = self.metrics.key(limiter.as_ref().map_or(authority, Limiter::key));
        // A plain-HTTP upstream's `Host` is set here, once: each attempt's copy then has it.
        let host = route.origin().map(|(_, host)| host);
        let mut headers = upstream_request_headers(std::mem::take(&mut parts.headers), peer, &route.secrets, host);
        // Before admission: a caller's broken body must not cost a token.
        let body = match RequestBody::read(body, self.config.replay_limit).await {
            Ok(body) => body,
            Err(reason) => {
                metrics.ended(Ended::Refused);
                return bad_body(&parts.method, parts.uri.path(), &reason);
            }
        };
        let cache = self.cache.as_ref().filter(|_| matches!(parts.method, Method::GET | Method::HEAD));
        let cache =
            cache.and_then(|cache| Some((cache, route.url_of(&target).ok()?.as_str().parse::<http::Uri>().ok()?)));
        if let Some((cache, uri)) = &cache
            && let Some(fresh) = cache.serve(&parts.method, uri, &mut headers, &report, started)
        {
            metrics.ended(Ended::Cached);
            return cached_response(fresh);
        }
        let estimate = Cost::requests(1);
        let forwarding = Forwarding {
            proxy: self,
            parts,
            target,
            route,
            headers,
            body,
            limiter,
            adaptive,
            retry,
            report,
            cache,
            estimate,
            started,
            metrics,
            answering,
        };
        attempts::run(forwarding).await
    }
}

/// The limiter of a request to `path` on `route`'s upstream: its path as sent and each other
/// reading a lenient upstream may make of it ([`lenient_readings`]: `search%2Fx`, `//search`
/// and `search;x` are under a limit on `search`) are looked up, and the most specific limit
/// wins, so a limit whose own prefix is spelled with `%2F` (GitLab's `group%2Fname`) holds too.
fn limiter_of(policy: &Policy, route: &Route, path: &str) -> Option<Limiter> {
    let look_up = |path: &str| policy.limiter_at(route.host(), &route.upstream, path);
    lenient_readings(path).iter().fold(look_up(path), |found, reading| match (found, look_up(reading)) {
        (Some(found), Some(other)) if other.key().len() > found.key().len() => Some(other),
        (found, other) => found.or(other),
    })
}

/// The proxy's face: each attempt upstream; the caller gets the upstream's answer (streamed,
/// or from the cache), the proxy's 429 when shedding turns the request away, or its 400, 502
/// or 504 when no answer came.
struct Forwarding<'p> {
    proxy: &'p Proxy,
    parts: http::request::Parts,
    /// Where it goes on the route's upstream: the path and query (origin form).
    target: PathAndQuery,
    /// Its route (the upstream's host for messages, its `host[:port]` as the request's key in
    /// the metrics when it has no limiter).
    route: &'p Route,
    /// The caller's headers as they go upstream (hop-by-hop ones out, the route's secrets in).
    headers: HeaderMap,
    body: RequestBody,
    limiter: Option<Limiter>,
    /// Whether the key follows its server.
    adaptive: bool,
    retry: &'p RetryPolicy,
    report: Reporter<'p>,
    /// The cache (GET and HEAD only) and the URL it keys on.
    cache: Option<(&'p ResponseCache, http::Uri)>,
    /// What an attempt costs: the proxy counts requests.
    estimate: Cost,
    started: Instant,
    /// Its key's series in the metrics.
    metrics: KeyMetrics<'p>,
    /// In progress on its connection (whose timer holds the attempt's upstream deadline) until
    /// the answer's body is handed over.
    answering: Answering,
}

impl Face for Forwarding<'_> {
    type Held = http::Response<UpstreamBody>;
    type Output = Response;

    fn steps(&self) -> Steps<'_> {
        Steps {
            limiter: self.limiter.as_ref(),
            retry: self.retry,
            method: &self.parts.method,
            report: &self.report,
            rng: &self.proxy.rng,
        }
    }

    /// A body that streamed through cannot be sent twice: its answer, even a 429, goes back as is.
    fn replayable(&self) -> bool {
        matches!(self.body, RequestBody::Replayable(_))
    }

    /// The key's limiter within the shedding bounds, then its shared budget (within what is
    /// left of the queueing allowance); a refusal is the proxy's 429, reported as `Failed`.
    async fn admit(&mut self, attempt: u32) -> Result<Admission, Response> {
        let Some(limiter) = &self.limiter else { return Ok(Admission::at_once(None)) };
        let proxy = self.proxy;
        let shedding = &proxy.config.shedding;
        let step = AdmissionStep {
            limiter,
            priority: Priority::Normal,
            estimate: &self.estimate,
            shedding: Some((&proxy.queues, shedding)),
            shared: proxy.gates.get(limiter.key()),
        };
        let refusal = match step.admit(attempt, &self.report).await {
            // The proxy counts requests only (no cost rules): a shared reservation has nothing to settle.
            Ok(admission) => {
                self.metrics.admitted(admission.waited);
                return Ok(Admission { shared: None, ..admission });
            }
            Err(refusal) => refusal,
        };
        let key = limiter.key();
        let bound = format_wait(shedding.max_queue_wait);
        let reason = match &refusal {
            Refusal::Limiter(err) | Refusal::Shed(Overload::Invalid(err)) => err.to_string(),
            Refusal::Shed(Overload::QueueFull { waiting }) => format!("{waiting} requests already wait for {key}"),
            Refusal::Shed(Overload::TooLong { expected, .. }) => format!(
                "{key} is expected to take {} to reach this request, longer than the {bound} this proxy queues",
                format_wait(*expected)
            ),
            Refusal::Shed(Overload::Waited { err, .. }) => format!("{key}: {err}"),
            Refusal::Shared(err) => format!("{key}: shared budget: {err}"),
            Refusal::SharedTooSlow => format!("{key}: the shared budget did not admit this request within {bound}"),
        };
        self.metrics.shed(&refusal);
        let shed = shed(limiter, refusal.ahead(), reason);
        self.report.emit(EventKind::Failed { error: format!("shed: {}", shed.reason), attempts: attempt - 1 });
        let (method, path) = (&self.parts.method, self.parts.uri.path());
        tracing::info!(key, %method, path, status = 429, attempts = attempt - 1, reason = %shed.reason, "shed");
        Err(shed.into_response())
    }

    async fn send(&mut self, attempt: u32, admission: &Admission) -> Sent<Self::Held> {
        if self.report.listening() {
            let (method, path) = (self.parts.method.to_string(), self.target.path().to_owned());
            self.report.emit(EventKind::Sent { attempt, method, path });
        }
        let sent_at = Instant::now();
        let (method, body) = (&self.parts.method, self.body.outgoing());
        // Pinned where it is made: the exchange is most of a request's state.
        let exchange = std::pin::pin!(self.proxy.upstreams.send(method, self.route, &self.target, &self.headers, body));
        let upstream =
            self.answering.deadlines().within_upstream_timeout(sent_at, exchange).await.unwrap_or(Upstream::TimedOut);
        let service_time = sent_at.elapsed();
        let answer = match upstream {
            Upstream::Response(response) => {
                let status = response.status();
                let head = ResponseHead { status, headers: response.headers(), body: None };
                let mirror =
                    self.limiter.as_ref().filter(|_| self.adaptive).map(|limiter| (limiter, admission.permit.as_ref()));
                let info = head.interpret(attempt, service_time, &self.report, mirror);
                Answer::Response { status, info, held: response }
            }
            Upstream::Unreachable(message) => Answer::ConnectionError(message),
            Upstream::TimedOut => Answer::Timeout,
        };
        self.metrics.answered(answer.status().map(|status| status.as_u16()), service_time);
        Sent { sent_at, service_time, answer }
    }

    fn retrying(&mut self) {
        self.metrics.retried();
    }

    /// The upstream's answer goes back (from the cache when it keeps a copy), reported as
    /// `Finished`; no answer is a 400, 502 or 504 ([`failed`](Self::failed)).
    ///
    /// Not an async fn: everything but the cache's read of the whole body is done at the call,
    /// so a request carries (and copies) no state for it but the answer, and the cache's rare
    /// wait is boxed.
    fn finish(
        self,
        attempt: u32,
        sent: Sent<Self::Held>,
        admission: Admission,
    ) -> impl Future<Output = Response> + Send {
        let upstream_ms = millis(sent.service_time);
        let response = match sent.answer {
            Answer::Response { held, .. } => held,
            Answer::ConnectionError(message) => return Either::Left(ready(self.failed(Some(message), attempt))),
            Answer::Timeout => return Either::Left(ready(self.failed(None, attempt))),
        };
        let status = response.status();
        if self.report.listening() {
            let total = self.started.elapsed();
            self.report.emit(EventKind::Finished { status: status.as_u16(), attempts: attempt, total });
        }
        self.metrics.ended(Ended::Forwarded);
        let (method, path, status) = (&self.parts.method, self.parts.uri.path(), status.as_u16());
        let (key, queue_wait_ms) = (self.limiter.as_ref().map_or("", Limiter::key), millis(admission.waited));
        // The caller's path without its query (whose values may be secrets), never a header.
        tracing::info!(key, %method, path, status, attempts = attempt, queue_wait_ms, upstream_ms, "forwarded");
        let Some((cache, uri)) = self.cache else {
            return Either::Left(ready(streamed(response, (admission.permit, self.answering))));
        };
        let Self { parts, headers, route, report, answering, .. } = self;
        Either::Right(Box::pin(async move {
            let answer =
                cache_and_answer(cache, &uri, (&parts.method, &headers), route.host(), response, &report).await;
            // The slot is held until the whole body has been read, and the request is in
            // progress on its connection until then (no head timeout runs meanwhile).
            drop((admission, answering));
            answer
        }))
    }

    /// As [`finish`](Self::finish): the caller gets the last answer (a 429 after the last
    /// retry is still the upstream's answer).
    fn give_up(
        self,
        attempt: u32,
        sent: Sent<Self::Held>,
        admission: Admission,
        _reason: GiveUpReason,
    ) -> impl Future<Output = Response> + Send {
        self.finish(attempt, sent, admission)
    }
}

impl Forwarding<'_> {
    /// The caller's answer when the last attempt got no response: 400 for a body that broke
    /// on the way, else 502 (could not reach) or 504 (no answer in time).
    fn failed(&self, failure: Option<String>, attempts: u32) -> Response {
        self.metrics.ended(Ended::Failed);
        let (parts, host) = (&self.parts, self.route.host());
        if let Some(reason) = self.body.broken() {
            self.report.emit(EventKind::Failed { error: format!("request body: {reason}"), attempts });
            return bad_body(&parts.method, parts.uri.path(), &reason);
        }
        let (status, message) = match failure {
            Some(message) => (StatusCode::BAD_GATEWAY, format!("could not reach {host}: {message}")),
            None => (StatusCode::GATEWAY_TIMEOUT, format!("{host} did not answer in time")),
        };
        self.report.emit(EventKind::Failed { error: message.clone(), attempts });
        let (method, path, key) = (&parts.method, parts.uri.path(), self.limiter.as_ref().map_or("", Limiter::key));
        tracing::info!(key, %method, path, status = status.as_u16(), attempts, reason = %message, "failed");
        plain(status, &message)
    }
}

/// The upstream response streamed to the caller; `held` (the permit, the request's place on its
/// connection) is held until the body is done.
fn streamed(response: http::Response<UpstreamBody>, held: (Option<Permit>, Answering)) -> Response {
    let (mut parts, body) = response.into_parts();
    parts.headers = caller_response_headers(std::mem::take(&mut parts.headers));
    // The caller's hop is HTTP/1.1 whatever the upstream's was (an HTTP/2 or HTTP/1.0 upstream,
    // a reason phrase of its own): only the status, headers and body go on.
    parts.version = http::Version::HTTP_11;
    parts.extensions = http::Extensions::new();
    let body = body.map_frame(move |frame| {
        let _held = &held;
        frame
    });
    Response::from_parts(parts, Body::new(body))
}

fn cached_response(cached: CachedResponse) -> Response {
    let mut reply = Response::new(Body::from(cached.body));
    *reply.status_mut() = cached.status;
    *reply.headers_mut() = caller_response_headers(cached.headers);
    reply
}

/// 400 for a request body the caller broke (malformed chunked framing, cut off mid-body).
fn bad_body(method: &Method, path: &str, reason: &str) -> Response {
    tracing::info!(%method, path, status = 400, reason, "the request body is malformed or incomplete");
    plain(StatusCode::BAD_REQUEST, &format!("the request body is malformed or incomplete: {reason}"))
}

/// `duration` in milliseconds, to the microsecond, for log fields.
fn millis(duration: std::time::Duration) -> f64 {
    (duration.as_secs_f64() * 1e6).round() / 1e3
}

/// A short plain-text answer from the proxy itself.
fn plain(status: StatusCode, message: &str) -> Response {
    let mut reply = Response::new(Body::from(format!("ratescope proxy: {message}\n")));
    *reply.status_mut() = status;
    reply.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    reply
}
