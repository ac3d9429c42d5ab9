//! `LimitedClient`: reqwest behind the registry's limiters, the retry policy, the response
//! cache and adaptive limits, reporting every step as an `Event`.
//!
//! A request's path: cache lookup (a fresh hit returns at once and never touches the
//! limiter) → the limiter of its key (priority lane, concurrency slot) → the wire →
//! header interpretation → adaptive limits → on 429/503 the whole key pauses → the retry
//! policy decides: done, retry after a delay (the slot is released while waiting), or give up.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{HeaderMap, Method, StatusCode};
use parking_lot::Mutex;
use rand::SeedableRng;
use rand::rngs::StdRng;
use thiserror::Error;
use tokio::time::Instant;
use url::Url;

use super::adaptive;
use super::cache::{CacheConfig, CacheStats, CachedResponse, Lookup, ResponseCache};
use super::events::{Event, EventKind, EventSink};
use super::headers::RateLimitInfo;
use super::http1::Http1Transport;
use super::redirect::{self, RedirectPolicy};
use super::retry::{Decision, GiveUpReason, Outcome, RetryPolicy};
use super::transport::{Exchanged, Transport, TransportError};
use crate::engine::{AcquireError, LimitKey, Limiter, LimiterConfig, Permit, Priority, Registry, format_wait};
use crate::store::{SharedGate, SharedHandle, StoreError, local_part};

/// One request to send.
#[derive(Debug, Clone)]
pub struct RequestSpec {
    pub method: Method,
    pub url: Url,
    pub headers: HeaderMap,
    pub body: Option<Bytes>,
    pub priority: Priority,
    /// What this request spends in each budget (usually 1).
    pub cost: u64,
}

impl RequestSpec {
    /// A GET of `url` in the normal lane, costing 1.
    pub fn get(url: Url) -> Self {
        Self::new(Method::GET, url)
    }

    pub fn new(method: Method, url: Url) -> Self {
        Self { method, url, headers: HeaderMap::new(), body: None, priority: Priority::Normal, cost: 1 }
    }

    pub fn with_priority(mut self, priority: Priority) -> Self {
        self.priority = priority;
        self
    }
}

/// A response, with what it took to get it.
#[derive(Debug, Clone)]
pub struct LimitedResponse {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
    pub rate_limit: RateLimitInfo,
    /// HTTP attempts sent (0 for a fresh cache hit).
    pub attempts: u32,
    pub from_cache: bool,
    /// Time spent waiting in the limiter, over all attempts.
    pub queue_wait: Duration,
    /// Send to response, of the last attempt.
    pub service_time: Duration,
    /// First queued to final response.
    pub total: Duration,
}

/// One HTTP attempt of a request, for summaries and per-attempt CSV.
#[derive(Debug, Clone, PartialEq)]
pub struct AttemptRecord {
    pub attempt: u32,
    /// When it went on the wire.
    pub sent_at: Instant,
    /// Time in the limiter before this attempt.
    pub queue_wait: Duration,
    /// Send to response (or to the error).
    pub service_time: Duration,
    pub status: Option<u16>,
    /// The transport error, when there was no response.
    pub error: Option<String>,
    /// The wait before the next attempt, when one was scheduled.
    pub retry_delay: Option<Duration>,
    /// What the server said is left of its most restrictive budget.
    pub server_remaining: Option<f64>,
    pub retry_after: Option<Duration>,
}

/// Why a request ended without a response to return.
#[derive(Debug, Error)]
pub enum ClientError {
    #[error("'{0}' cannot be requested: it has no host")]
    NoHost(Url),
    #[error("{reason}")]
    GaveUp { reason: GiveUpReason, last_status: Option<u16>, attempts: u32 },
    #[error("could not reach {host}: {message}")]
    Transport { host: String, message: String, attempts: u32 },
    /// Connected (or still connecting) when the request timeout ran out.
    #[error("no response from {host} within the request timeout")]
    NoResponse { host: String, attempts: u32 },
    #[error("the limiter refused the request: {0}")]
    Limiter(#[from] AcquireError),
    #[error("could not build the HTTP client: {0}")]
    Build(String),
    #[error("the shared budget refused the request: {0}")]
    Shared(#[from] StoreError),
}

impl ClientError {
    /// The cause in a few stable words, for counting failures by kind (the message may hold
    /// times and addresses that differ between requests of one cause).
    pub fn kind(&self) -> &'static str {
        match self {
            Self::NoHost(_) => "no host in the URL",
            Self::GaveUp { reason: GiveUpReason::AttemptsExhausted { .. }, .. } => "gave up after retries",
            Self::GaveUp { reason: GiveUpReason::RetryAfterTooLong { .. }, .. } => "Retry-After beyond the maximum",
            Self::GaveUp { reason: GiveUpReason::NotIdempotent { .. }, .. } => "not retried: method not idempotent",
            Self::GaveUp { reason: GiveUpReason::NotRetryable, .. } => "not retryable",
            Self::Transport { .. } => "could not connect",
            Self::NoResponse { .. } => "no response in time",
            Self::Limiter(_) => "refused by the limiter",
            Self::Build(_) => "could not build the client",
            Self::Shared(_) => "refused by the shared budget",
        }
    }

    /// The last HTTP status seen, if any.
    pub fn last_status(&self) -> Option<u16> {
        match self {
            Self::GaveUp { last_status, .. } => *last_status,
            _ => None,
        }
    }
}

/// Which keys follow the server's published budgets.
#[derive(Debug, Clone, Default)]
pub enum Adaptive {
    #[default]
    Off,
    /// Every host, including hosts with no configured limits (the server's word is the limit).
    All,
    /// Only these keys (as `LimitKey` strings: `host` or `host/prefix`).
    Keys(HashSet<String>),
}

impl Adaptive {
    /// Whether the limiter keyed `key` follows the server.
    pub fn covers(&self, key: &str) -> bool {
        match self {
            Adaptive::Off => false,
            Adaptive::All => true,
            Adaptive::Keys(keys) => keys.contains(key),
        }
    }
}

/// Settings for [`LimitedClient`].
#[derive(Debug)]
pub struct ClientBuilder {
    registry: Arc<Registry>,
    retry: RetryPolicy,
    adaptive: Adaptive,
    cache: Option<CacheConfig>,
    events: EventSink,
    default_headers: HeaderMap,
    host_headers: HashMap<String, HeaderMap>,
    redirects: HashMap<String, RedirectPolicy>,
    key_retry: HashMap<String, RetryPolicy>,
    gates: HashMap<String, SharedGate>,
    shared: Option<SharedHandle>,
    connect_timeout: Option<Duration>,
    request_timeout: Option<Duration>,
    pool_idle_timeout: Option<Duration>,
    seed: Option<u64>,
    transport: Option<Arc<dyn Transport>>,
    http1_direct: bool,
}

impl Default for ClientBuilder {
    fn default() -> Self {
        Self {
            registry: Arc::new(Registry::new()),
            retry: RetryPolicy::default(),
            adaptive: Adaptive::Off,
            cache: None,
            events: EventSink::none(),
            default_headers: HeaderMap::new(),
            host_headers: HashMap::new(),
            redirects: HashMap::new(),
            key_retry: HashMap::new(),
            gates: HashMap::new(),
            shared: None,
            connect_timeout: Some(Duration::from_secs(10)),
            request_timeout: Some(Duration::from_secs(60)),
            pool_idle_timeout: Some(Duration::from_secs(90)),
            seed: None,
            transport: None,
            http1_direct: false,
        }
    }
}

impl ClientBuilder {
    pub fn registry(mut self, registry: Arc<Registry>) -> Self {
        self.registry = registry;
        self
    }

    pub fn retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    pub fn adaptive(mut self, adaptive: Adaptive) -> Self {
        self.adaptive = adaptive;
        self
    }

    pub fn cache(mut self, config: CacheConfig) -> Self {
        self.cache = Some(config);
        self
    }

    pub fn events(mut self, sink: EventSink) -> Self {
        self.events = sink;
        self
    }

    pub fn default_headers(mut self, headers: HeaderMap) -> Self {
        self.default_headers = headers;
        self
    }

    /// Headers added to every request to `host` (`host` or `host:port`, as in the URL), after the defaults.
    pub fn host_headers(mut self, host: &str, headers: HeaderMap) -> Self {
        self.host_headers.entry(host.to_ascii_lowercase()).or_default().extend(headers);
        self
    }

    /// Which redirects requests to `host` (`host` or `host:port`) follow; the default is
    /// [`RedirectPolicy::SameOrigin`]. The same on every wire (reqwest, the HTTP/1.1 wire, a
    /// transport of the caller's).
    pub fn redirects(mut self, host: &str, policy: RedirectPolicy) -> Self {
        self.redirects.insert(host.to_ascii_lowercase(), policy);
        self
    }

    /// The retry policy for requests paced by the limiter keyed `key` (instead of the default one).
    pub fn key_retry(mut self, key: String, policy: RetryPolicy) -> Self {
        self.key_retry.insert(key, policy);
        self
    }

    /// Requests paced by the limiter keyed `key` also pass `gate`: the key's budgets shared
    /// with other processes (the local limiter then keeps only lanes and concurrency).
    pub fn shared_gate(mut self, key: String, gate: SharedGate) -> Self {
        self.gates.insert(key, gate);
        self
    }

    /// The store and keys behind the shared gates, for summaries and the app.
    pub fn shared_handle(mut self, handle: SharedHandle) -> Self {
        self.shared = Some(handle);
        self
    }

    /// The registry the client will obey.
    pub fn registry_handle(&self) -> &Arc<Registry> {
        &self.registry
    }

    /// Connect and whole-request timeouts (`None` for none).
    pub fn timeouts(mut self, connect: Option<Duration>, request: Option<Duration>) -> Self {
        self.connect_timeout = connect;
        self.request_timeout = request;
        self
    }

    /// The longest wait for one attempt's response (connecting included).
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = Some(timeout);
        self
    }

    /// No timers of the client's own (timeouts, idle-connection sweeps). For tests on paused
    /// tokio time, where any pending timer fires while a socket is being read.
    pub fn without_timers(self) -> Self {
        Self { pool_idle_timeout: None, ..self.timeouts(None, None) }
    }

    /// Seeds the jitter's random numbers, for reproducible runs.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// Answers every request with `transport` instead of the network (the simulator's demo API).
    pub fn transport(mut self, transport: Arc<dyn Transport>) -> Self {
        self.transport = Some(transport);
        self
    }

    /// Sends plain-`http://` requests over ratescope's own keep-alive HTTP/1.1 connections
    /// ([`Http1Transport`]) instead of reqwest: the load-generator wire of raw bursts. Ignored
    /// for a host an `http_proxy`/`all_proxy` setting would send through a proxy.
    pub fn http1_direct(mut self, on: bool) -> Self {
        self.http1_direct = on;
        self
    }

    pub fn build(self) -> Result<LimitedClient, ClientError> {
        for policy in std::iter::once(&self.retry).chain(self.key_retry.values()) {
            policy.validate().map_err(|err| ClientError::Build(err.to_string()))?;
        }
        // reqwest is built without a default TLS provider; ring is ours (ignore "already installed").
        let _ = rustls::crypto::ring::default_provider().install_default();
        // Redirects are followed by the client itself (`send_once`), alike on every wire.
        let mut http = reqwest::Client::builder()
            .pool_idle_timeout(self.pool_idle_timeout)
            .redirect(reqwest::redirect::Policy::none());
        if let Some(timeout) = self.connect_timeout {
            http = http.connect_timeout(timeout);
        }
        if let Some(timeout) = self.request_timeout {
            http = http.timeout(timeout);
        }
        let http = http.build().map_err(|err| ClientError::Build(err.to_string()))?;
        let rng = match self.seed {
            Some(seed) => StdRng::seed_from_u64(seed),
            None => StdRng::from_os_rng(),
        };
        Ok(LimitedClient {
            inner: Arc::new(Inner {
                http,
                registry: self.registry,
                retry: self.retry,
                adaptive: self.adaptive,
                cache: self.cache.map(ResponseCache::new),
                events: self.events,
                default_headers: self.default_headers,
                host_headers: self.host_headers,
                redirects: self.redirects,
                key_retry: self.key_retry,
                gates: self.gates,
                shared: self.shared,
                next_id: AtomicU64::new(0),
                rng: Mutex::new(rng),
                transport: self.transport,
                http1: self
                    .http1_direct
                    .then(|| (Http1Transport::new(self.connect_timeout, self.request_timeout), proxy_configured())),
            }),
        })
    }
}

/// An HTTP client that paces itself by the registry's limits. Cheap to clone.
#[derive(Debug, Clone)]
pub struct LimitedClient {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    http: reqwest::Client,
    registry: Arc<Registry>,
    retry: RetryPolicy,
    adaptive: Adaptive,
    cache: Option<ResponseCache>,
    events: EventSink,
    default_headers: HeaderMap,
    host_headers: HashMap<String, HeaderMap>,
    redirects: HashMap<String, RedirectPolicy>,
    key_retry: HashMap<String, RetryPolicy>,
    gates: HashMap<String, SharedGate>,
    shared: Option<SharedHandle>,
    next_id: AtomicU64,
    rng: Mutex<StdRng>,
    transport: Option<Arc<dyn Transport>>,
    /// The direct HTTP/1.1 wire, and whether a proxy is configured (then only loopback hosts use it).
    http1: Option<(Http1Transport, bool)>,
}

/// The entry of `map` for `url`'s host: `host:port` first when the URL names a port, then `host`.
fn per_host<'a, T>(map: &'a HashMap<String, T>, url: &Url) -> Option<&'a T> {
    if map.is_empty() {
        return None;
    }
    let host = url.host_str()?.to_ascii_lowercase();
    let with_port = url.port().and_then(|port| map.get(&format!("{host}:{port}")));
    with_port.or_else(|| map.get(&host))
}

/// Whether the environment asks for an HTTP proxy (reqwest would honour it).
fn proxy_configured() -> bool {
    ["http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"]
        .iter()
        .any(|name| std::env::var_os(name).is_some_and(|value| !value.is_empty()))
}

/// What one attempt on the wire produced.
enum Attempt {
    Response { status: StatusCode, headers: HeaderMap, body: Bytes },
    ConnectionError(String),
    Timeout,
}

impl LimitedClient {
    pub fn builder() -> ClientBuilder {
        ClientBuilder::default()
    }

    /// The registry of limits this client obeys (shared: changes apply at once).
    pub fn registry(&self) -> &Arc<Registry> {
        &self.inner.registry
    }

    /// Cache counters (all zero without a cache).
    pub fn cache_stats(&self) -> CacheStats {
        self.inner.cache.as_ref().map(ResponseCache::stats).unwrap_or_default()
    }

    /// The shared gate of the limiter keyed `key`, if its budgets are shared.
    pub fn shared_gate(&self, key: &str) -> Option<&SharedGate> {
        self.inner.gates.get(key)
    }

    /// Changes the limits of `key` now: a shared key's budgets go to its gate (and so to the
    /// store), its lanes and concurrency to the local limiter.
    pub fn set_limits(&self, key: LimitKey, config: LimiterConfig) -> Result<(), ClientError> {
        match self.inner.gates.get(&key.to_string()) {
            Some(gate) => {
                gate.reconfigure(&config.budgets)?;
                self.inner.registry.set(key, local_part(&config)).map_err(|err| ClientError::Build(err.to_string()))
            }
            None => self.inner.registry.set(key, config).map_err(|err| ClientError::Build(err.to_string())),
        }
    }

    /// The shared store's handle, when budgets are shared.
    pub fn shared(&self) -> Option<&SharedHandle> {
        self.inner.shared.as_ref()
    }

    /// Every shared gate, by limiter key.
    pub fn shared_gates(&self) -> impl Iterator<Item = (&String, &SharedGate)> {
        self.inner.gates.iter()
    }

    /// Events dropped because their consumer lagged.
    pub fn events_dropped(&self) -> u64 {
        self.inner.events.dropped()
    }

    /// GET `url` in the normal lane.
    pub async fn get(&self, url: Url) -> Result<LimitedResponse, ClientError> {
        self.send(RequestSpec::get(url)).await
    }

    /// Sends one request through its key's limiter, retrying as the policy says.
    pub async fn send(&self, spec: RequestSpec) -> Result<LimitedResponse, ClientError> {
        self.send_recorded(spec, &mut Vec::new()).await
    }

    /// Like [`send`](Self::send), and appends one [`AttemptRecord`] per HTTP attempt to `log`
    /// (nothing for a fresh cache hit). Lossless, unlike the event stream.
    pub async fn send_recorded(
        &self,
        spec: RequestSpec,
        log: &mut Vec<AttemptRecord>,
    ) -> Result<LimitedResponse, ClientError> {
        let inner = &*self.inner;
        let listening = inner.events.is_enabled();
        // Ids only name events; without a listener the shared counter is left alone.
        let id = if listening { inner.next_id.fetch_add(1, Ordering::Relaxed) } else { 0 };
        let started = Instant::now();
        let host = spec.url.host_str().ok_or_else(|| ClientError::NoHost(spec.url.clone()))?;
        // `url` lowercases the hosts of http(s) URLs already; other schemes may keep capitals.
        let host: Cow<'_, str> = if host.bytes().any(|byte| byte.is_ascii_uppercase()) {
            host.to_ascii_lowercase().into()
        } else {
            host.into()
        };
        let limiter = self.limiter_for(&host, &spec.url);
        let key = limiter.as_ref().map(|limiter| limiter.key().to_owned());
        let adaptive = limiter.as_ref().filter(|limiter| self.adaptive_for(limiter.key()));
        if let Some(limiter) = adaptive {
            // Before the first admission, so the first request of a key goes alone as its scout.
            adaptive::watch(limiter);
        }
        let emit = |kind: EventKind| {
            if listening {
                inner.events.emit(Event { request_id: id, key: key.clone(), at: Instant::now(), kind });
            }
        };
        // Only the cache needs the URL as an `http::Uri`.
        let uri: Option<http::Uri> = match &inner.cache {
            Some(_) => Some(spec.url.as_str().parse().map_err(|_| ClientError::NoHost(spec.url.clone()))?),
            None => None,
        };
        let retry = key.as_ref().and_then(|key| inner.key_retry.get(key)).unwrap_or(&inner.retry);
        let mut headers = self.headers_for(&spec.url, &spec.headers);
        if let (Some(cache), Some(uri)) = (&inner.cache, &uri) {
            match cache.lookup(&spec.method, uri, &headers, SystemTime::now()) {
                Lookup::Fresh(cached) => {
                    emit(EventKind::CacheHit { revalidated: false });
                    emit(EventKind::Finished { status: cached.status.as_u16(), attempts: 0, total: started.elapsed() });
                    let rate_limit =
                        RateLimitInfo::parse(Some(cached.status.as_u16()), &cached.headers, None, SystemTime::now());
                    return Ok(cached_response(cached, rate_limit, 0, Duration::ZERO, Duration::ZERO, started));
                }
                Lookup::Revalidate(with_validators) => headers = with_validators,
                Lookup::Miss => {}
            }
        }
        let mut attempt = 0u32;
        let mut queue_wait = Duration::ZERO;
        let mut previous_delay = None;
        loop {
            attempt += 1;
            let mut this_wait = Duration::ZERO;
            let permit = match &limiter {
                Some(limiter) => {
                    emit(EventKind::Queued { attempt, priority: spec.priority });
                    let queued_at = Instant::now();
                    let permit = match limiter.acquire(spec.priority, spec.cost).await {
                        Ok(permit) => permit,
                        Err(err) => {
                            emit(EventKind::Failed { error: err.to_string(), attempts: attempt - 1 });
                            return Err(err.into());
                        }
                    };
                    if let Some(gate) = inner.gates.get(limiter.key()) {
                        // Boxed: a store round trip is a large future most requests never make.
                        match Box::pin(gate.admit(spec.cost)).await {
                            Ok(admission) => {
                                if let Some(state) = admission.state_change {
                                    emit(EventKind::StoreState { state });
                                }
                                emit(EventKind::SharedAdmitted {
                                    attempt,
                                    via: admission.via,
                                    waited: admission.waited,
                                    remaining: admission.remaining,
                                });
                            }
                            Err(err) => {
                                emit(EventKind::Failed { error: err.to_string(), attempts: attempt - 1 });
                                return Err(err.into());
                            }
                        }
                    }
                    let waited = queued_at.elapsed();
                    queue_wait += waited;
                    this_wait = waited;
                    emit(EventKind::Admitted { attempt, queue_wait: waited });
                    Some(permit)
                }
                None => None,
            };
            emit(EventKind::Sent { attempt, method: spec.method.to_string(), path: spec.url.path().to_owned() });
            let sent_at = Instant::now();
            // Boxed: the HTTP exchange is the largest state, and only in-flight requests need it
            // (thousands may wait in the limiter with a small future each).
            let result = Box::pin(self.send_once(&spec, &headers)).await;
            let service_time = sent_at.elapsed();
            let mut error_message = String::new();
            let (status_outcome, response) = match result {
                Attempt::Response { status, headers: response_headers, body } => {
                    let head = ResponseHead { status, headers: &response_headers, body: Some(body.as_ref()) };
                    let info = head.interpret(attempt, service_time, listening, &emit);
                    if let Some(limiter) = adaptive {
                        let ticket = permit.as_ref().and_then(Permit::ticket);
                        for note in adaptive::observe(limiter, ticket, status.as_u16(), &info, Instant::now()) {
                            emit(EventKind::Adaptive { note });
                        }
                    }
                    let outcome = Outcome::Status { status: status.as_u16(), retry_after: info.retry_after };
                    (Some(outcome), Some((status, response_headers, body, info)))
                }
                Attempt::ConnectionError(message) => {
                    error_message = message;
                    (None, None)
                }
                Attempt::Timeout => (Some(Outcome::Timeout), None),
            };
            let outcome = status_outcome.unwrap_or(Outcome::ConnectionError { message: &error_message });
            let decision = retry.decide(attempt, &outcome, &spec.method, previous_delay, &mut SharedRng(&inner.rng));
            log.push(AttemptRecord {
                attempt,
                sent_at,
                queue_wait: this_wait,
                service_time,
                status: response.as_ref().map(|(status, ..)| status.as_u16()),
                error: response.is_none().then(|| outcome_text(&outcome)),
                retry_delay: match &decision {
                    Decision::Retry { delay, .. } => Some(*delay),
                    _ => None,
                },
                server_remaining: response.as_ref().and_then(|(.., info)| info.most_restrictive()?.remaining),
                retry_after: response.as_ref().and_then(|(.., info)| info.retry_after),
            });
            if let (Some(limiter), Some((status, _, _, info))) = (&limiter, &response)
                && let Some((pause, reason)) = pause_on_throttle(limiter, *status, info, &decision, retry, attempt)
            {
                emit(EventKind::KeyPaused { pause, reason });
            }
            // Released only now, after any pause and learned limit took effect (so a waiter let in
            // by this slot already sees them), and before any retry wait (which holds no slot).
            drop(permit);
            match decision {
                Decision::Retry { delay, reason } => {
                    let cause = match &response {
                        Some((status, ..)) => status_text(*status),
                        None => outcome_text(&outcome),
                    };
                    emit(EventKind::RetryScheduled { attempt, delay, reason, cause });
                    previous_delay = Some(delay);
                    tokio::time::sleep(delay).await;
                }
                Decision::Done => {
                    let Some((status, response_headers, body, info)) = response else {
                        // The policy only finishes on a response; treat anything else as given up.
                        return Err(self.give_up(GiveUpReason::NotRetryable, None, attempt, &emit));
                    };
                    let fresh = CachedResponse { status, headers: response_headers, body };
                    let (served, revalidated) = match (&inner.cache, &uri) {
                        (Some(cache), Some(uri)) => {
                            match cache.store(&spec.method, uri, &headers, &fresh, SystemTime::now()) {
                                Some(cached) => (cached, true),
                                None => (fresh, false),
                            }
                        }
                        _ => (fresh, false),
                    };
                    if revalidated {
                        emit(EventKind::CacheHit { revalidated: true });
                    }
                    emit(EventKind::Finished {
                        status: served.status.as_u16(),
                        attempts: attempt,
                        total: started.elapsed(),
                    });
                    let mut response = cached_response(served, info, attempt, queue_wait, service_time, started);
                    response.from_cache = revalidated;
                    return Ok(response);
                }
                Decision::GiveUp(GiveUpReason::NotRetryable) if response.is_none() => {
                    let host = host.into_owned();
                    let err = match outcome {
                        Outcome::Timeout => ClientError::NoResponse { host, attempts: attempt },
                        _ => ClientError::Transport { host, message: outcome_text(&outcome), attempts: attempt },
                    };
                    emit(EventKind::Failed { error: err.to_string(), attempts: attempt });
                    return Err(err);
                }
                Decision::GiveUp(reason) => {
                    let last_status = response.map(|(status, ..)| status.as_u16());
                    return Err(self.give_up(reason, last_status, attempt, &emit));
                }
            }
        }
    }

    fn give_up(
        &self,
        reason: GiveUpReason,
        last_status: Option<u16>,
        attempts: u32,
        emit: &impl Fn(EventKind),
    ) -> ClientError {
        emit(EventKind::Failed { error: reason.to_string(), attempts });
        ClientError::GaveUp { reason, last_status, attempts }
    }

    fn adaptive_for(&self, key: &str) -> bool {
        self.inner.adaptive.covers(key)
    }

    /// The limiter of a request to `url` (on `host`, lower case). In adaptive mode for every
    /// host, a host with no limits gets an empty entry (keyed `host:port` when the URL names a
    /// port) on its first request: the server's word becomes its limit.
    fn limiter_for(&self, host: &str, url: &Url) -> Option<Limiter> {
        adaptive::limiter_for(&self.inner.registry, &self.inner.adaptive, host, url)
    }

    /// The wire other than reqwest that carries a request to `url`, if any: the in-process
    /// transport when one is set, else the direct HTTP/1.1 wire for a plain-http host (a
    /// loopback one only, when a proxy is configured).
    fn wire_for(&self, url: &url::Url) -> Option<Wire<'_>> {
        if let Some(transport) = &self.inner.transport {
            return Some(Wire::InProcess(transport.as_ref()));
        }
        let (wire, proxied) = self.inner.http1.as_ref()?;
        (Http1Transport::serves(url) && (!proxied || is_loopback(url))).then_some(Wire::Http1(wire))
    }

    /// The client's headers for `url` (its defaults, then its host's), then the caller's.
    fn headers_for(&self, url: &Url, caller: &HeaderMap) -> HeaderMap {
        let inner = &*self.inner;
        let mut headers = inner.default_headers.clone();
        if let Some(extra) = per_host(&inner.host_headers, url) {
            headers.extend(extra.clone());
        }
        headers.extend(caller.clone());
        headers
    }

    /// One attempt: the request, and the redirects its host's policy follows
    /// ([`redirect::next_hop`]). A hop to another origin carries the caller's headers without
    /// credentials plus the client's headers for that origin, never the first host's.
    async fn send_once(&self, spec: &RequestSpec, headers: &HeaderMap) -> Attempt {
        let mut attempt = self.exchange_once(spec, headers).await;
        let mut hop_spec: Option<RequestSpec> = None;
        let mut hop_headers: Option<HeaderMap> = None;
        for _ in 0..redirect::MAX_REDIRECTS {
            let Attempt::Response { status, headers: answer, .. } = &attempt else { break };
            let current = hop_spec.as_ref().unwrap_or(spec);
            let policy = per_host(&self.inner.redirects, &current.url).copied().unwrap_or_default();
            let Some(hop) = redirect::next_hop(policy, &current.url, &current.method, *status, answer) else { break };
            let carried = hop_headers.as_ref().unwrap_or(headers);
            let next_headers = if hop.cross_origin {
                self.headers_for(&hop.url, &redirect::strip_credentials(&spec.headers))
            } else {
                carried.clone()
            };
            let next = RequestSpec {
                method: hop.method,
                url: hop.url,
                headers: spec.headers.clone(),
                body: if hop.keeps_body { current.body.clone() } else { None },
                priority: spec.priority,
                cost: spec.cost,
            };
            attempt = self.exchange_once(&next, &next_headers).await;
            hop_spec = Some(next);
            hop_headers = Some(next_headers);
        }
        attempt
    }

    async fn exchange_once(&self, spec: &RequestSpec, headers: &HeaderMap) -> Attempt {
        if let Some(wire) = self.wire_for(&spec.url) {
            return match wire_request(spec, headers) {
                Ok(request) => attempt_of(wire.exchange(request).await),
                Err(message) => Attempt::ConnectionError(message),
            };
        }
        let mut request = self.inner.http.request(spec.method.clone(), spec.url.clone()).headers(headers.clone());
        if let Some(body) = &spec.body {
            request = request.body(body.clone());
        }
        let response = match request.send().await {
            Ok(response) => response,
            Err(err) => return classify(&err),
        };
        let status = response.status();
        let mut response = response;
        let headers = std::mem::take(response.headers_mut());
        match response.bytes().await {
            Ok(body) => Attempt::Response { status, headers, body },
            Err(err) => classify(&err),
        }
    }
}

/// A wire other than reqwest.
enum Wire<'a> {
    InProcess(&'a dyn Transport),
    /// Awaited directly, without the boxed future of [`Transport::exchange`].
    Http1(&'a Http1Transport),
}

impl Wire<'_> {
    async fn exchange(self, request: http::Request<Bytes>) -> Exchanged {
        match self {
            Wire::InProcess(transport) => transport.exchange(request).await,
            Wire::Http1(wire) => wire.exchange_within_deadline(request).await,
        }
    }
}

/// The client's seeded generator, locked only when a decision draws from it (a backoff's
/// jitter), not for every response.
struct SharedRng<'a>(&'a Mutex<StdRng>);

impl rand::RngCore for SharedRng<'_> {
    fn next_u32(&mut self) -> u32 {
        self.0.lock().next_u32()
    }

    fn next_u64(&mut self) -> u64 {
        self.0.lock().next_u64()
    }

    fn fill_bytes(&mut self, destination: &mut [u8]) {
        self.0.lock().fill_bytes(destination);
    }
}

fn is_loopback(url: &url::Url) -> bool {
    match url.host() {
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        Some(url::Host::Domain(name)) => name.eq_ignore_ascii_case("localhost"),
        None => false,
    }
}

/// The request of one attempt for a transport other than reqwest, or why it cannot be sent.
fn wire_request(spec: &RequestSpec, headers: &HeaderMap) -> Result<http::Request<Bytes>, String> {
    let mut request = http::Request::new(spec.body.clone().unwrap_or_default());
    *request.method_mut() = spec.method.clone();
    *request.headers_mut() = headers.clone();
    match spec.url.as_str().parse() {
        Ok(uri) => *request.uri_mut() = uri,
        Err(err) => return Err(format!("'{}' is not a URI: {err}", spec.url)),
    }
    Ok(request)
}

/// What a transport's exchange means for the attempt.
fn attempt_of(exchanged: Exchanged) -> Attempt {
    match exchanged {
        Ok(response) => {
            let (parts, body) = response.into_parts();
            Attempt::Response { status: parts.status, headers: parts.headers, body }
        }
        Err(TransportError::TimedOut) => Attempt::Timeout,
        Err(TransportError::Failed(message)) => Attempt::ConnectionError(message),
    }
}

/// A connection that could not be made (a connect timeout included) is a connection error; a
/// timeout after that is a missing response.
fn classify(err: &reqwest::Error) -> Attempt {
    if err.is_timeout() && !err.is_connect() {
        return Attempt::Timeout;
    }
    Attempt::ConnectionError(error_chain(err))
}

/// A response as it arrived, for [`interpret`](Self::interpret).
pub(crate) struct ResponseHead<'a> {
    pub status: StatusCode,
    pub headers: &'a HeaderMap,
    /// The body when it was read (retry hints, Shopify's query cost); `None` while it streams.
    pub body: Option<&'a [u8]>,
}

impl ResponseHead<'_> {
    /// What the rate-limit headers say, reported as a `Response` event when anyone listens.
    pub(crate) fn interpret(
        &self,
        attempt: u32,
        service_time: Duration,
        listening: bool,
        emit: &impl Fn(EventKind),
    ) -> RateLimitInfo {
        let info = RateLimitInfo::parse_at(Some(self.status.as_u16()), self.headers, self.body, SystemTime::now);
        if listening {
            emit(EventKind::Response {
                attempt,
                status: self.status.as_u16(),
                service_time,
                info: Box::new(info.clone()),
                headers: Box::new(masked(self.headers)),
            });
        }
        info
    }
}

/// The whole chain of an error: "error sending request" alone says nothing about why.
pub(crate) fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut message = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    message
}

/// After a throttling response (429, 503, or headers saying the budget is spent), pauses the
/// whole key: for the retry delay when one was decided, else Retry-After or the backoff, capped
/// by `max_retry_after`. Returns the pause and its reason, or `None` when the response was fine.
pub(crate) fn pause_on_throttle(
    limiter: &Limiter,
    status: StatusCode,
    info: &RateLimitInfo,
    decision: &Decision,
    retry: &RetryPolicy,
    attempt: u32,
) -> Option<(Duration, String)> {
    if !info.throttled && !matches!(status.as_u16(), 429 | 503) {
        return None;
    }
    // A wait beyond the maximum made the request fail at once; holding every other request of
    // the key for the maximum would only make each of them wait that long to fail the same way.
    if matches!(decision, Decision::GiveUp(GiveUpReason::RetryAfterTooLong { .. })) {
        return None;
    }
    let pause = match decision {
        Decision::Retry { delay, .. } => *delay,
        _ => info.retry_after.unwrap_or_else(|| retry.raw_backoff(attempt)),
    }
    .min(retry.max_retry_after);
    let reason = format!("{} from the server, pausing {}", status_text(status), format_wait(pause));
    limiter.pause_until(Instant::now() + pause, reason.clone());
    Some((pause, reason))
}

fn cached_response(
    cached: CachedResponse,
    rate_limit: RateLimitInfo,
    attempts: u32,
    queue_wait: Duration,
    service_time: Duration,
    started: Instant,
) -> LimitedResponse {
    LimitedResponse {
        status: cached.status,
        headers: cached.headers,
        body: cached.body,
        rate_limit,
        attempts,
        from_cache: true,
        queue_wait,
        service_time,
        total: started.elapsed(),
    }
}

/// Response headers safe to show and log: cookie values are replaced by `***`.
fn masked(headers: &HeaderMap) -> HeaderMap {
    let mut shown = headers.clone();
    for name in [http::header::SET_COOKIE, http::header::AUTHORIZATION, http::header::PROXY_AUTHENTICATE] {
        if shown.contains_key(&name) {
            shown.insert(name, http::HeaderValue::from_static("***"));
        }
    }
    shown
}

pub(crate) fn status_text(status: StatusCode) -> String {
    match status.canonical_reason() {
        Some(reason) => format!("{} {reason}", status.as_u16()),
        None => status.as_u16().to_string(),
    }
}

fn outcome_text(outcome: &Outcome<'_>) -> String {
    match outcome {
        Outcome::Status { status, .. } => status.to_string(),
        Outcome::ConnectionError { message } => format!("connection error: {message}"),
        Outcome::Timeout => "no response in time".to_owned(),
    }
}

/// The limiter a request to `url` would wait in, if any (for snapshots and charts).
pub fn limiter_for_url(registry: &Registry, url: &Url) -> Option<Limiter> {
    registry.limiter_for(&url.host_str()?.to_ascii_lowercase(), url.port_or_known_default(), url.path())
}
