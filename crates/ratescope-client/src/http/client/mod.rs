//! `LimitedClient`: reqwest behind the registry's limiters, the retry policy, the response
//! cache and adaptive limits, reporting every step as an `Event`.
//!
//! A request's path: cache lookup (a fresh hit returns at once and never touches the
//! limiter) → the limiter of its key (priority lane, concurrency slot) → the wire →
//! header interpretation → adaptive limits → on 429/503 the whole key pauses → the retry
//! policy decides: done, retry after a delay (the slot is released while waiting), or give up.
//! `send_recorded` reads as that list: each step is a method of `request::Request`; the wire
//! (reqwest, the HTTP/1.1 wire, a transport) and redirects live in `wire`.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{HeaderMap, Method, StatusCode};
use parking_lot::Mutex;
use rand::SeedableRng;
use rand::rngs::StdRng;
use thiserror::Error;
use tokio::time::Instant;
use url::Url;

#[cfg(feature = "middleware")]
pub mod middleware;
mod request;
mod wire;

use request::Request;
use wire::proxy_configured;

use super::answer::outcome_text;
use super::cache::{CacheConfig, CacheStats, CachedResponse, ResponseCache};
use super::coalesce::{Coalescer, Role};
use super::cost::{CostRule, RemainingMemory};
use super::events::{EventKind, EventSink};
use super::headers::RateLimitInfo;
use super::http1::Http1Transport;
use super::policy::Policy;
use super::redirect::RedirectPolicy;
use super::report::Reporter;
use super::retry::{GiveUpReason, RetryPolicy};
use super::transport::Transport;
use crate::engine::{
    AcquireError, ConfigError, LimitKey, Limiter, LimiterConfig, Priority, QueueCounts, Registry, Shedding,
};
use crate::engine::{Cost, Permit, Unit};
use crate::store::{SharedGate, SharedHandle, SharedSettings, StoreError, local_part};

/// One request to send.
#[derive(Debug, Clone)]
pub struct RequestSpec {
    /// The HTTP method.
    pub method: Method,
    /// Where to send it; its host (and path) choose the limiter.
    pub url: Url,
    /// Headers of this request, over the client's defaults.
    pub headers: HeaderMap,
    /// The body, if any.
    pub body: Option<Bytes>,
    /// The lane it waits in.
    pub priority: Priority,
    /// What this request spends in each budget (usually 1).
    pub cost: u64,
    /// Estimates of other units (tokens, points) before sending, settled from the answer.
    pub cost_rules: Vec<CostRule>,
}

impl RequestSpec {
    /// A GET of `url` in the normal lane, costing 1.
    pub fn get(url: Url) -> Self {
        Self::new(Method::GET, url)
    }

    /// A request with this method and URL, no headers or body, in the normal lane, costing 1.
    pub fn new(method: Method, url: Url) -> Self {
        Self {
            method,
            url,
            headers: HeaderMap::new(),
            body: None,
            priority: Priority::Normal,
            cost: 1,
            cost_rules: Vec::new(),
        }
    }

    /// The same request in another lane.
    pub fn with_priority(mut self, priority: Priority) -> Self {
        self.priority = priority;
        self
    }

    /// The same request, reserving what `rules` estimate and settling what its answer says.
    pub fn with_cost_rules(mut self, rules: Vec<CostRule>) -> Self {
        self.cost_rules = rules;
        self
    }
}

/// A response, with what it took to get it.
#[derive(Debug, Clone)]
pub struct LimitedResponse {
    /// The final attempt's status (the caller judges 4xx and 5xx).
    pub status: StatusCode,
    /// The final response's headers.
    pub headers: HeaderMap,
    /// The whole body.
    pub body: Bytes,
    /// What the final response's rate-limit headers say.
    pub rate_limit: RateLimitInfo,
    /// HTTP attempts sent (0 for a fresh cache hit).
    pub attempts: u32,
    /// Served from the response cache.
    pub from_cache: bool,
    /// A copy of an identical request's response that was in flight at the same time: this
    /// request sent nothing (see [`ClientBuilder::coalesce`]).
    pub coalesced: bool,
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
    /// Its number, from 1.
    pub attempt: u32,
    /// When it went on the wire.
    pub sent_at: Instant,
    /// Time in the limiter before this attempt.
    pub queue_wait: Duration,
    /// Send to response (or to the error).
    pub service_time: Duration,
    /// The response's status; `None` when there was no response.
    pub status: Option<u16>,
    /// The transport error, when there was no response.
    pub error: Option<String>,
    /// The wait before the next attempt, when one was scheduled.
    pub retry_delay: Option<Duration>,
    /// What the server said is left of its most restrictive budget.
    pub server_remaining: Option<f64>,
    /// The server's `Retry-After`, when it sent one.
    pub retry_after: Option<Duration>,
    /// With cost rules: what the attempt reserved and what its answer settled.
    pub settlement: Option<Settlement>,
}

/// What an attempt reserved (requests and estimates of other units) and what its answer said
/// it actually spent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settlement {
    /// What was reserved before sending.
    pub reserved: Cost,
    /// What the answer said it spent (the estimate where it said nothing), as the budgets count
    /// it: at most what the largest budget of each unit holds.
    pub actual: Cost,
    /// The units whose answer said more than that, and what it said (a broken or lying server:
    /// see `http::cost`).
    pub capped: Vec<(Unit, u64)>,
}

/// Why a request ended without a response to return.
#[derive(Debug, Clone, Error)]
pub enum ClientError {
    /// The URL has no host, so no limiter and no server.
    #[error("'{}' cannot be requested: it has no host", crate::redact::redact_url(.0))]
    NoHost(Url),
    /// The retry policy stopped with no response worth returning.
    #[error("{reason}")]
    GaveUp {
        /// Why it stopped.
        reason: GiveUpReason,
        /// The last status seen, if any.
        last_status: Option<u16>,
        /// Attempts made.
        attempts: u32,
    },
    /// The server could not be reached (DNS, connect, TLS, reset) and no retry was left.
    #[error("could not reach {host}: {message}")]
    Transport {
        /// The host.
        host: String,
        /// The transport's error.
        message: String,
        /// Attempts made.
        attempts: u32,
    },
    /// Connected (or still connecting) when the request timeout ran out.
    #[error("no response from {host} within the request timeout")]
    NoResponse {
        /// The host.
        host: String,
        /// Attempts made.
        attempts: u32,
    },
    /// The limiter refused the request (see [`AcquireError`]).
    #[error("the limiter refused the request: {0}")]
    Limiter(#[from] AcquireError),
    /// The client's settings were refused when it was built.
    #[error("could not build the HTTP client: {0}")]
    Build(String),
    /// Limits given to a running client ([`LimitedClient::set_limits`]) were refused.
    #[error("the limits were refused: {0}")]
    Limits(#[from] ConfigError),
    /// The request (its body) was already sent once, and a body that streams cannot be sent
    /// again: a middleware further down ran the request twice.
    #[error("the request's body was already sent and cannot be sent again")]
    BodyConsumed,
    /// A middleware further down the chain failed with an error of its own.
    #[error("a middleware failed: {0}")]
    Middleware(String),
    /// The shared budget store refused the request (see [`StoreError`]).
    #[error("the shared budget refused the request: {0}")]
    Shared(#[from] StoreError),
    /// Shedding refused the request instead of letting it wait ([`ClientBuilder::shedding`]).
    #[error("{key}: {reason}")]
    Shed {
        /// The limiter key.
        key: String,
        /// Why, in words (the queue was full, the wait too long, or the shared budget too slow).
        reason: String,
    },
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
            Self::Limits(_) => "limits refused",
            Self::BodyConsumed => "body already sent",
            Self::Middleware(_) => "a middleware failed",
            Self::Shared(_) => "refused by the shared budget",
            Self::Shed { .. } => "shed: waiting too long",
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
    /// No key follows the server (the default): only configured limits apply.
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
    policy: Policy,
    cache: Option<CacheConfig>,
    coalesce: bool,
    default_headers: HeaderMap,
    host_headers: HashMap<String, HeaderMap>,
    redirects: HashMap<String, RedirectPolicy>,
    gates: HashMap<String, SharedGate>,
    shared: Option<SharedHandle>,
    connect_timeout: Option<Duration>,
    request_timeout: Option<Duration>,
    pool_idle_timeout: Option<Duration>,
    seed: Option<u64>,
    transport: Option<Arc<dyn Transport>>,
    http1_direct: bool,
    shedding: Option<Shedding>,
}

impl Default for ClientBuilder {
    fn default() -> Self {
        Self {
            policy: Policy::default(),
            cache: None,
            coalesce: false,
            default_headers: HeaderMap::new(),
            host_headers: HashMap::new(),
            redirects: HashMap::new(),
            gates: HashMap::new(),
            shared: None,
            connect_timeout: Some(Duration::from_secs(10)),
            request_timeout: Some(Duration::from_secs(60)),
            pool_idle_timeout: Some(Duration::from_secs(90)),
            seed: None,
            transport: None,
            http1_direct: false,
            shedding: None,
        }
    }
}

impl ClientBuilder {
    /// Paces and retries by `policy` (limits, adaptive keys, retry policies, events), in place
    /// of everything [`registry`](Self::registry), [`retry`](Self::retry),
    /// [`adaptive`](Self::adaptive), [`key_retry`](Self::key_retry) and
    /// [`events`](Self::events) set before.
    pub fn policy(mut self, policy: Policy) -> Self {
        self.policy = policy;
        self
    }

    /// The limiters to pace requests by; hosts it does not name pass unlimited.
    pub fn registry(mut self, registry: Arc<Registry>) -> Self {
        self.policy.registry = registry;
        self
    }

    /// The retry policy for hosts without one of their own.
    pub fn retry(mut self, retry: RetryPolicy) -> Self {
        self.policy.retry = retry;
        self
    }

    /// Which keys also follow the budgets the server publishes.
    pub fn adaptive(mut self, adaptive: Adaptive) -> Self {
        self.policy.adaptive = adaptive;
        self
    }

    /// Keep a private response cache within these limits (no cache by default).
    pub fn cache(mut self, config: CacheConfig) -> Self {
        self.cache = Some(config);
        self
    }

    /// Identical `GET`/`HEAD` requests (same URL and headers, no body) in flight at the same
    /// time share one upstream exchange: the first goes through the limiter and the wire, the
    /// others wait for it and get a copy of its response or error, spending no budget. Off by
    /// default: a load test means its identical requests.
    pub fn coalesce(mut self, on: bool) -> Self {
        self.coalesce = on;
        self
    }

    /// Where the events of every request go (none by default).
    pub fn events(mut self, sink: EventSink) -> Self {
        self.policy.events = sink;
        self
    }

    /// Headers added to every request.
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
        self.policy.key_retry.insert(key, policy);
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
        &self.policy.registry
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

    /// Refuse a request instead of letting it wait when its key's queue is full or the wait
    /// ahead is longer than the bound, and give up on one that has waited that long
    /// ([`ClientError::Shed`]). Without it (the default), a request waits as long as its
    /// limiter says, the way a load test wants it.
    pub fn shedding(mut self, shedding: Shedding) -> Self {
        self.shedding = Some(shedding);
        self
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

    /// Moves the budgets of every limiter key in the registry into the store `settings` name:
    /// each key gets a [`SharedGate`] and keeps only lanes and concurrency locally. Connects
    /// lazily, so a down Redis is the fail policy's business, not an error here. Needs a tokio
    /// runtime.
    pub fn share_budgets(self, settings: &SharedSettings) -> Result<(Self, SharedHandle), StoreError> {
        let (gates, handle) = settings.share(&self.policy.registry)?;
        let builder = gates.into_iter().fold(self, |builder, (key, gate)| builder.shared_gate(key, gate));
        Ok((builder.shared_handle(handle.clone()), handle))
    }

    /// The client, or why its settings are refused (a retry policy that does not validate).
    pub fn build(self) -> Result<LimitedClient, ClientError> {
        for policy in std::iter::once(&self.policy.retry).chain(self.policy.key_retry.values()) {
            policy.validate().map_err(|err| ClientError::Build(err.to_string()))?;
        }
        install_tls_provider();
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
                policy: self.policy,
                cache: self.cache.map(ResponseCache::new),
                coalescer: self.coalesce.then(Coalescer::default),
                default_headers: self.default_headers,
                host_headers: self.host_headers,
                redirects: self.redirects,
                gates: self.gates,
                shared: self.shared,
                next_id: AtomicU64::new(0),
                remaining_seen: RemainingMemory::default(),
                rng: Mutex::new(rng),
                shedding: self.shedding,
                queues: QueueCounts::default(),
                transport: self.transport,
                http1: self
                    .http1_direct
                    .then(|| (Http1Transport::new(self.connect_timeout, self.request_timeout), proxy_configured())),
            }),
        })
    }
}

/// Makes rustls's `ring` provider the process default unless one is installed already.
/// ratescope builds reqwest without a TLS provider of its own choosing; a `reqwest::Client`
/// built in a program that has no other provider panics without this. [`ClientBuilder::build`]
/// calls it; call it yourself before building a plain `reqwest::Client` first (for a
/// middleware chain, say).
pub fn install_tls_provider() {
    // An error only says a provider is installed already, which is all we want.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// An HTTP client that paces itself by the registry's limits. Cheap to clone.
#[derive(Debug, Clone)]
pub struct LimitedClient {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    http: reqwest::Client,
    policy: Policy,
    cache: Option<ResponseCache>,
    /// Identical requests in flight, when coalescing is on.
    coalescer: Option<Coalescer<Result<LimitedResponse, ClientError>>>,
    default_headers: HeaderMap,
    host_headers: HashMap<String, HeaderMap>,
    redirects: HashMap<String, RedirectPolicy>,
    gates: HashMap<String, SharedGate>,
    shared: Option<SharedHandle>,
    next_id: AtomicU64,
    /// Each key's last remaining-units header values, for `drop:HEADER` settlements.
    remaining_seen: RemainingMemory,
    rng: Mutex<StdRng>,
    /// When requests are refused instead of queued (none by default), and the queues counted for it.
    shedding: Option<Shedding>,
    queues: QueueCounts,
    transport: Option<Arc<dyn Transport>>,
    /// The direct HTTP/1.1 wire, and whether a proxy is configured (then only loopback hosts use it).
    http1: Option<(Http1Transport, bool)>,
}

impl LimitedClient {
    /// A builder with no limits, the default retry policy, no cache and no events.
    pub fn builder() -> ClientBuilder {
        ClientBuilder::default()
    }

    /// The registry of limits this client obeys (shared: changes apply at once).
    pub fn registry(&self) -> &Arc<Registry> {
        &self.inner.policy.registry
    }

    /// What this client paces and retries by.
    pub fn policy(&self) -> &Policy {
        &self.inner.policy
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
                Ok(self.inner.policy.registry.set(key, local_part(&config))?)
            }
            None => Ok(self.inner.policy.registry.set(key, config)?),
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
        self.inner.policy.events.dropped()
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
        let mut request = Request::prepare(self, spec)?;
        if let Some(cached) = request.cached() {
            return Ok(cached);
        }
        // The flight key only when there is a coalescer to look it up in.
        let coalescing = self.inner.coalescer.as_ref().and_then(|coalescer| Some((coalescer, request.flight_key()?)));
        let Some((coalescer, key)) = coalescing else {
            return request.attempts(log).await;
        };
        let mut role = coalescer.join(key);
        loop {
            match role {
                Role::Leader(leader) => {
                    let outcome = request.attempts(log).await;
                    leader.land(&outcome);
                    return outcome;
                }
                Role::Follower(follower) => match follower.outcome().await {
                    Ok(outcome) => return request.followed(outcome),
                    // The leader was cancelled before it had an answer: lead or follow anew.
                    Err(next) => role = next,
                },
            }
        }
    }

    /// The limiter of a request to `url` (none without a host). In adaptive mode for every
    /// host, a host with no limits gets an empty entry (keyed `host:port` when the URL names a
    /// port) on its first request: the server's word becomes its limit.
    fn limiter_for(&self, url: &Url) -> Option<Limiter> {
        let host = request::lower_case(url.host_str()?, url);
        self.inner.policy.limiter_for(&host, url)
    }
}

/// A response as it arrived, for [`interpret`](Self::interpret).
pub struct ResponseHead<'a> {
    /// Its status.
    pub status: StatusCode,
    /// Its headers.
    pub headers: &'a HeaderMap,
    /// The body when it was read (retry hints, Shopify's query cost); `None` while it streams.
    pub body: Option<&'a [u8]>,
}

impl ResponseHead<'_> {
    /// What the rate-limit headers say (every dialect), reported as a `Response` event when
    /// anyone listens; for a key that follows its server (`mirror`: its limiter, and the
    /// attempt's permit, whose ticket tells which of the key's requests this answers), what
    /// the mirror makes of them, reported as `Adaptive`. The one place a face reads an answer.
    pub fn interpret(
        &self,
        attempt: u32,
        service_time: Duration,
        report: &Reporter<'_>,
        mirror: Option<(&Limiter, Option<&Permit>)>,
    ) -> RateLimitInfo {
        let info = RateLimitInfo::parse_at(Some(self.status.as_u16()), self.headers, self.body, SystemTime::now);
        if report.listening() {
            report.emit(EventKind::Response {
                attempt,
                status: self.status.as_u16(),
                service_time,
                info: Box::new(info.clone()),
                headers: Box::new(masked(self.headers)),
            });
        }
        if let Some((limiter, permit)) = mirror {
            let ticket = permit.and_then(Permit::ticket);
            for note in super::adaptive::observe(limiter, ticket, self.status.as_u16(), &info, Instant::now()) {
                report.emit(EventKind::Adaptive { note });
            }
        }
        info
    }
}

/// The whole chain of an error, `outer: inner: innermost` ("error sending request" alone says
/// nothing about why); a cause whose text is already in the message (an error that prints its
/// source itself) is not repeated. The one place the project joins an error's causes.
pub fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut message = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !message.contains(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
        source = cause.source();
    }
    message
}

fn cached_response(
    cached: CachedResponse,
    rate_limit: RateLimitInfo,
    attempts: u32,
    queue_wait: Duration,
    service_time: Duration,
    total: Duration,
) -> LimitedResponse {
    LimitedResponse {
        status: cached.status,
        headers: cached.headers,
        body: cached.body,
        rate_limit,
        attempts,
        from_cache: true,
        coalesced: false,
        queue_wait,
        service_time,
        total,
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
