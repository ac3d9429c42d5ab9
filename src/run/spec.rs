//! `BurstSpec`: endpoints and their weights, method, headers, count, arrival pattern,
//! priority mix and limiter settings (or none, to compare against raw sending).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::CONTENT_TYPE;
use http::{HeaderMap, HeaderValue, Method};
use thiserror::Error;
use url::Url;

use crate::engine::{ConfigError, LimitKey, LimiterConfig, Priority, Rate, Registry, Unit};
use crate::http::cache::CacheConfig;
use crate::http::cost::{self, duplicate_unit};
use crate::http::{Adaptive, BatchPlan, ClientBuilder, ClientError, CostRule, EventSink, LimitedClient, RetryPolicy};
use crate::store::{SharedSettings, StoreError};

/// The most requests one burst may plan.
pub const MAX_REQUESTS: usize = 10_000_000;

/// One target of a burst; requests are spread over endpoints by weight.
#[derive(Debug, Clone, PartialEq)]
pub struct Endpoint {
    /// Where requests go.
    pub url: Url,
    /// Its share of the requests, relative to the other endpoints' (0: none).
    pub weight: u32,
    /// This endpoint's method; `None` takes the burst's.
    pub method: Option<Method>,
    /// Headers of this endpoint, over the burst's (a name here replaces the burst's value).
    pub headers: HeaderMap,
    /// Sent with every request to this endpoint.
    pub body: Option<Bytes>,
    /// Units other than requests (tokens, points) each request reserves, settled from its answer.
    pub cost_rules: Vec<CostRule>,
    /// Each request asks for one item (request `i` for id `i + 1`), and items are sent in
    /// batches (`?ids=1,2,3`): N requests become ceil(N / max size) upstream GETs or more.
    pub batch: Option<BatchPlan>,
}

impl Endpoint {
    /// `url` with `weight`, sending the burst's method and headers and no body.
    pub fn new(url: Url, weight: u32) -> Self {
        Self { url, weight, method: None, headers: HeaderMap::new(), body: None, cost_rules: Vec::new(), batch: None }
    }

    /// The same endpoint sending `body`, with a `Content-Type` guessed from it unless one is set.
    pub fn with_body(mut self, body: Bytes) -> Self {
        if !self.headers.contains_key(CONTENT_TYPE) {
            self.headers.insert(CONTENT_TYPE, content_type_of(&body));
        }
        self.body = Some(body);
        self
    }
}

/// The media type of a body given without one: JSON when it parses as JSON, text when it is
/// UTF-8, bytes otherwise.
pub fn content_type_of(body: &[u8]) -> HeaderValue {
    if serde_json::from_slice::<serde::de::IgnoredAny>(body).is_ok() {
        HeaderValue::from_static("application/json")
    } else if std::str::from_utf8(body).is_ok() {
        HeaderValue::from_static("text/plain; charset=utf-8")
    } else {
        HeaderValue::from_static("application/octet-stream")
    }
}

/// When requests arrive.
#[derive(Debug, Clone, PartialEq)]
pub enum ArrivalPattern {
    /// Every request at once: the limiter does all the pacing.
    AllAtOnce,
    /// One request every `per / amount`.
    FixedRate(Rate),
    /// The arrival rate grows linearly from `from` to `to` requests per second over `over`, then stays.
    Ramp {
        /// Requests per second at the start.
        from: f64,
        /// Requests per second at the end.
        to: f64,
        /// How long the ramp takes.
        over: Duration,
    },
    /// At `rate` for `duration`; the request count follows from them.
    ForDuration {
        /// The arrival rate.
        rate: Rate,
        /// How long requests arrive.
        duration: Duration,
    },
    /// Each request at its own offset, to its own endpoint (a recording replayed): request `i`
    /// is `script[i]`. The offsets never decrease; the weights of the endpoints are not used.
    Scripted(Arc<[Scheduled]>),
}

/// One request of an [`ArrivalPattern::Scripted`] burst.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scheduled {
    /// When it arrives, from the burst's start.
    pub at: Duration,
    /// Its endpoint: an index into [`BurstSpec::endpoints`].
    pub endpoint: usize,
}

impl ArrivalPattern {
    /// A ramp written `FROM:TO:OVER` in requests per second, e.g. `1:50:30s`.
    pub fn parse_ramp(text: &str) -> Result<Self, String> {
        let parts: Vec<&str> = text.split(':').collect();
        let [from, to, over] = parts.as_slice() else {
            return Err(format!("ramp '{text}' is not FROM:TO:OVER, e.g. 1:50:30s"));
        };
        let number = |part: &str| part.trim().parse::<f64>().map_err(|_| format!("ramp: '{part}' is not a number"));
        let over = crate::engine::parse_duration(over).map_err(|err| format!("ramp: {err}"))?;
        Ok(Self::Ramp { from: number(from)?, to: number(to)?, over })
    }
}

/// Shares of the priority lanes (weights, need not sum to 1).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PriorityMix {
    /// Weight of the high lane.
    pub high: f64,
    /// Weight of the normal lane.
    pub normal: f64,
    /// Weight of the low lane.
    pub low: f64,
}

impl Default for PriorityMix {
    fn default() -> Self {
        Self { high: 0.0, normal: 1.0, low: 0.0 }
    }
}

impl PriorityMix {
    /// The lane of request `index`: deterministic and evenly interleaved by weight.
    pub fn lane(&self, index: usize) -> Priority {
        let total = self.high + self.normal + self.low;
        if total.is_nan() || total <= 0.0 {
            return Priority::Normal;
        }
        // A low-discrepancy walk: request i sits at fraction frac(i * golden ratio).
        let position = (index as f64 * 0.618_033_988_749_895).fract() * total;
        if position < self.high {
            Priority::High
        } else if position < self.high + self.normal {
            Priority::Normal
        } else {
            Priority::Low
        }
    }
}

/// A burst to fire.
#[derive(Debug, Clone)]
pub struct BurstSpec {
    /// The targets (at least one).
    pub endpoints: Vec<Endpoint>,
    /// The method of endpoints that name none.
    pub method: Method,
    /// Headers sent with every request.
    pub headers: HeaderMap,
    /// Requests to send (ignored for `ForDuration`, which derives it).
    pub requests: usize,
    /// When requests arrive.
    pub arrival: ArrivalPattern,
    /// How requests are spread over the priority lanes.
    pub priorities: PriorityMix,
    /// Limits applied to every endpoint's host; `None` sends raw, unpaced.
    pub limits: Option<LimiterConfig>,
    /// With `limits: None`, the most requests in flight (like oha's `-c`); `None` for unbounded.
    pub raw_concurrency: Option<usize>,
    /// How failed attempts are retried.
    pub retry: RetryPolicy,
    /// Also follow the budgets the server publishes in its headers.
    pub adaptive: bool,
    /// Share `limits`' budgets with other processes through a store (Redis); `None` keeps them in-process.
    pub shared: Option<SharedSettings>,
    /// The longest wait for each attempt's response; `None` keeps the client's default (60 s).
    pub timeout: Option<Duration>,
    /// Keep cacheable responses (HTTP caching rules): a fresh copy answers without a request.
    pub cache: bool,
    /// Identical GETs in flight at once share one exchange ([`ClientBuilder::coalesce`]).
    pub coalesce: bool,
}

/// A spec that cannot run.
#[derive(Debug, Error)]
pub enum SpecError {
    /// No endpoint given.
    #[error("a burst needs at least one endpoint")]
    NoEndpoints,
    /// A batched endpoint that is not a plain GET.
    #[error(
        "endpoint {0}: batched items are fetched with one GET; a batch cannot carry a method other than GET or a body"
    )]
    BatchNotGet(Url),
    /// An endpoint URL without a host.
    #[error("endpoint {0} has no host")]
    NoHost(Url),
    /// An endpoint whose host cannot key a limiter.
    #[error("endpoint {0}: its host is not one a limiter can be keyed by (letters, digits, '-', '.', '_')")]
    BadHost(Url),
    /// An endpoint that is neither http nor https.
    #[error("endpoint {0} is not http or https")]
    Scheme(Url),
    /// Every endpoint weighs 0, so none would be chosen.
    #[error("every endpoint has weight 0")]
    ZeroWeights,
    /// More requests than a burst may send.
    #[error("{0} requests is more than a burst may send ({MAX_REQUESTS})")]
    TooManyRequests(usize),
    /// A burst of zero requests.
    #[error("a burst of 0 requests sends nothing")]
    NoRequests,
    /// An arrival pattern that cannot be scheduled; the message says why.
    #[error("{0}")]
    Arrival(String),
    /// A raw concurrency of zero.
    #[error("a concurrency of 0 would never send anything")]
    ZeroConcurrency,
    /// A request timeout of zero.
    #[error("a timeout of 0 would fail every request before it is sent")]
    ZeroTimeout,
    /// An endpoint with two cost rules for one unit (their estimates would add up and each
    /// settlement count twice).
    #[error(
        "endpoint {url} has two cost rules for {unit}: give one rule per unit (add terms with +, e.g. {unit}=500+body/4)"
    )]
    DuplicateCostRule {
        /// The endpoint.
        url: Url,
        /// The unit ruled twice.
        unit: Unit,
    },
    /// A budget counting a unit no request of the burst spends: it would never bind.
    #[error(
        "budget '{budget}' counts {unit}, but no request of the burst spends {unit}{}, so it would never hold anything back",
        unspent_hint(unit, spent, closest.as_ref())
    )]
    UnspentUnit {
        /// The budget's name.
        budget: String,
        /// Its unit.
        unit: Unit,
        /// The units the endpoints' cost rules do spend.
        spent: Vec<Unit>,
        /// Of those, the one the budget's unit most likely misspells.
        closest: Option<Unit>,
    },
    /// An endpoint whose every request is estimated above what a budget can ever hold.
    #[error(
        "endpoint {url}: each request is estimated at {estimate} in budget '{budget}', which holds at most {capacity}, so none could ever be sent"
    )]
    EstimateAboveCapacity {
        /// The endpoint's URL.
        url: String,
        /// The budget's name.
        budget: String,
        /// What a request spends in it.
        estimate: u64,
        /// The most it holds.
        capacity: u64,
    },
    /// The limits are refused.
    #[error(transparent)]
    Limits(#[from] ConfigError),
    /// The client could not be built.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// The shared budget store's settings are refused.
    #[error(transparent)]
    Shared(#[from] StoreError),
}

/// What [`SpecError::UnspentUnit`] adds: the units that are spent, and the likely intended one.
fn unspent_hint(unit: &Unit, spent: &[Unit], closest: Option<&Unit>) -> String {
    let names: Vec<&str> = spent.iter().map(Unit::as_str).collect();
    match (closest, names.is_empty()) {
        (Some(closest), _) => format!(" (its cost rules spend {}: did you mean {closest}?)", names.join(", ")),
        (None, true) => format!(" (give the requests a cost rule such as {unit}=ESTIMATE->field:PATH)"),
        (None, false) => format!(" (its cost rules spend {})", names.join(", ")),
    }
}

impl BurstSpec {
    /// `requests` GETs of `url`, all at once, with no limits.
    pub fn get(url: Url, requests: usize) -> Self {
        Self {
            endpoints: vec![Endpoint::new(url, 1)],
            method: Method::GET,
            headers: HeaderMap::new(),
            requests,
            arrival: ArrivalPattern::AllAtOnce,
            priorities: PriorityMix::default(),
            limits: None,
            raw_concurrency: None,
            retry: RetryPolicy::default(),
            adaptive: false,
            shared: None,
            timeout: None,
            cache: false,
            coalesce: false,
        }
    }

    /// The number of requests this spec sends.
    pub fn planned_requests(&self) -> usize {
        match &self.arrival {
            ArrivalPattern::ForDuration { rate, duration } => {
                (rate.per_second() * duration.as_secs_f64()).floor().max(0.0).min(MAX_REQUESTS as f64 + 1.0) as usize
            }
            ArrivalPattern::Scripted(script) => script.len(),
            _ => self.requests,
        }
    }

    /// Checks everything before a single request is sent.
    pub fn validate(&self) -> Result<(), SpecError> {
        if self.endpoints.is_empty() {
            return Err(SpecError::NoEndpoints);
        }
        for endpoint in &self.endpoints {
            if !matches!(endpoint.url.scheme(), "http" | "https") {
                return Err(SpecError::Scheme(endpoint.url.clone()));
            }
            if endpoint.url.host_str().is_none() {
                return Err(SpecError::NoHost(endpoint.url.clone()));
            }
            // Otherwise `keys` would leave the host out and its requests would go unlimited.
            if key_of(&endpoint.url).is_none() {
                return Err(SpecError::BadHost(endpoint.url.clone()));
            }
            let method = endpoint.method.as_ref().unwrap_or(&self.method);
            if endpoint.batch.is_some() && (method != Method::GET || endpoint.body.is_some()) {
                return Err(SpecError::BatchNotGet(endpoint.url.clone()));
            }
            if let Some(unit) = duplicate_unit(&endpoint.cost_rules) {
                return Err(SpecError::DuplicateCostRule { url: endpoint.url.clone(), unit: unit.clone() });
            }
        }
        if self.endpoints.iter().all(|endpoint| endpoint.weight == 0) {
            return Err(SpecError::ZeroWeights);
        }
        match self.planned_requests() {
            0 => return Err(SpecError::NoRequests),
            n if n > MAX_REQUESTS => return Err(SpecError::TooManyRequests(n)),
            _ => {}
        }
        if let ArrivalPattern::Ramp { from, to, over } = self.arrival
            && (!from.is_finite() || !to.is_finite() || from < 0.0 || to <= 0.0 || over.is_zero())
        {
            return Err(SpecError::Arrival(format!(
                "a ramp needs finite rates (from {from} >= 0 to {to} > 0 per second) over a positive duration"
            )));
        }
        if let ArrivalPattern::Scripted(script) = &self.arrival {
            check_script(script, self.endpoints.len())?;
        }
        if self.timeout.is_some_and(|timeout| timeout.is_zero()) {
            return Err(SpecError::ZeroTimeout);
        }
        if self.raw_concurrency == Some(0) {
            return Err(SpecError::ZeroConcurrency);
        }
        if let Some(limits) = &self.limits {
            limits.validate()?;
        }
        self.retry.validate().map_err(|err| SpecError::Arrival(err.to_string()))?;
        if let Some(shared) = &self.shared {
            shared.validate()?;
        }
        Ok(())
    }

    /// With `limits` on every endpoint (the spec's own [`client`](Self::client)): every budget
    /// in a unit other than requests is spent by some endpoint's cost rules (else it would never
    /// bind: a typo such as `token` for `tokens`), and every endpoint's estimate fits every
    /// budget (else its requests could never be sent). Nothing else spends such a unit: servers'
    /// headers about tokens only mirror the server's budgets (adaptive mode), they charge none.
    pub fn check_costs(&self) -> Result<(), SpecError> {
        let Some(limits) = &self.limits else { return Ok(()) };
        let spent = cost::units_spent(self.endpoints.iter().flat_map(|endpoint| &endpoint.cost_rules));
        for budget in &limits.budgets {
            if budget.unit != Unit::Requests && !spent.contains(&budget.unit) {
                let closest = budget.unit.closest(&spent).cloned();
                return Err(SpecError::UnspentUnit {
                    budget: budget.name.clone(),
                    unit: budget.unit.clone(),
                    spent: spent.clone(),
                    closest,
                });
            }
        }
        for endpoint in &self.endpoints {
            let estimate = cost::estimate(1, &endpoint.cost_rules, endpoint.body.as_deref());
            if let Some((budget, estimate)) = limits.never_fits(&estimate) {
                return Err(SpecError::EstimateAboveCapacity {
                    url: endpoint.url.to_string(),
                    budget: budget.name.clone(),
                    estimate,
                    capacity: budget.capacity(),
                });
            }
        }
        Ok(())
    }

    /// The limiter keys of the endpoints' hosts (`host:port`), deduplicated.
    pub fn keys(&self) -> Vec<LimitKey> {
        let mut keys: Vec<LimitKey> = self.endpoints.iter().filter_map(|endpoint| key_of(&endpoint.url)).collect();
        keys.sort();
        keys.dedup();
        keys
    }

    /// A client for this spec: `limits` on every endpoint's host, its retry policy, adaptive if
    /// asked, budgets shared if asked (which needs a tokio runtime: the store connects lazily).
    pub fn client(&self, events: EventSink) -> Result<LimitedClient, SpecError> {
        Ok(self.client_builder(events)?.build()?)
    }

    /// The settings of [`client`](Self::client), to add to (a seed, a transport) before building.
    pub fn client_builder(&self, events: EventSink) -> Result<ClientBuilder, SpecError> {
        self.check_costs()?;
        let registry = Registry::new();
        if let Some(limits) = &self.limits {
            for key in self.keys() {
                registry.set(key, limits.clone())?;
            }
        }
        let adaptive = if self.adaptive {
            Adaptive::Keys(self.keys().iter().map(ToString::to_string).collect())
        } else {
            Adaptive::Off
        };
        let mut builder = LimitedClient::builder()
            .registry(Arc::new(registry))
            .retry(self.retry.clone())
            .adaptive(adaptive)
            .events(events)
            // Raw bursts are load generation: plain-http hosts get the lean HTTP/1.1 wire.
            .http1_direct(self.limits.is_none());
        if let Some(timeout) = self.timeout {
            builder = builder.request_timeout(timeout);
        }
        builder = self.savings(builder);
        if let Some(shared) = &self.shared {
            builder = builder.share_budgets(shared)?.0;
        }
        Ok(builder)
    }
}

impl BurstSpec {
    /// `builder` with the requests this spec saves: a response cache, coalescing.
    pub fn savings(&self, builder: ClientBuilder) -> ClientBuilder {
        let builder = builder.coalesce(self.coalesce);
        if self.cache { builder.cache(CacheConfig::default()) } else { builder }
    }
}

/// A script's offsets never decrease (requests launch in order) and each names an endpoint.
fn check_script(script: &[Scheduled], endpoints: usize) -> Result<(), SpecError> {
    if let Some((index, step)) = script.iter().enumerate().find(|(_, step)| step.endpoint >= endpoints) {
        return Err(SpecError::Arrival(format!(
            "scripted request {index} names endpoint {} of {endpoints}",
            step.endpoint
        )));
    }
    if let Some(index) = script.windows(2).position(|pair| pair[1].at < pair[0].at) {
        return Err(SpecError::Arrival(format!(
            "scripted request {} arrives before the one ahead of it: sort the script by offset",
            index + 1
        )));
    }
    Ok(())
}

/// The limiter key (`host:port`) of requests to `url`.
fn key_of(url: &Url) -> Option<LimitKey> {
    let host = url.host_str()?;
    let port = url.port_or_known_default()?;
    format!("{host}:{port}").parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn priority_mix_interleaves_by_weight() {
        let mix = PriorityMix { high: 1.0, normal: 2.0, low: 1.0 };
        let lanes: Vec<Priority> = (0..1000).map(|i| mix.lane(i)).collect();
        let count = |p| lanes.iter().filter(|l| **l == p).count();
        assert!((240..=260).contains(&count(Priority::High)), "{}", count(Priority::High));
        assert!((490..=510).contains(&count(Priority::Normal)));
        assert!(lanes[..8].contains(&Priority::High) && lanes[..8].contains(&Priority::Low), "interleaved early");
        assert_eq!(PriorityMix { high: 0.0, normal: 0.0, low: 0.0 }.lane(3), Priority::Normal);
    }

    #[test]
    fn bad_specs_are_refused_before_sending() {
        let url: Url = "http://127.0.0.1:1/x".parse().unwrap();
        let ok = BurstSpec::get(url.clone(), 10);
        assert!(ok.validate().is_ok());
        assert!(matches!(BurstSpec { requests: 0, ..ok.clone() }.validate(), Err(SpecError::NoRequests)));
        assert!(BurstSpec { requests: MAX_REQUESTS + 1, ..ok.clone() }.validate().is_err());
        assert!(BurstSpec { endpoints: vec![], ..ok.clone() }.validate().is_err());
        let ramp = ArrivalPattern::Ramp { from: f64::NAN, to: 1.0, over: Duration::from_secs(1) };
        assert!(BurstSpec { arrival: ramp, ..ok.clone() }.validate().is_err());
        let ftp = Endpoint::new("ftp://h/x".parse().unwrap(), 1);
        assert!(BurstSpec { endpoints: vec![ftp], ..ok.clone() }.validate().is_err());
        assert!(BurstSpec { raw_concurrency: Some(0), ..ok }.validate().is_err());
    }

    #[test]
    fn a_host_no_limiter_can_key_is_refused() {
        // Found by fuzz/sim_burst (`url = "http:&"`): URLs accept '&' in a host, limiter keys
        // do not, so the host's requests were sent without the spec's limits.
        let odd: Url = "http://&/x".parse().unwrap();
        assert_eq!(odd.host_str(), Some("&"));
        let spec = BurstSpec::get(odd, 10);
        assert!(spec.keys().is_empty());
        assert!(matches!(spec.validate(), Err(SpecError::BadHost(_))), "{:?}", spec.validate());
        for fine in ["http://a_b.example/x", "https://[::1]:8443/", "http://xn--bcher-kva.example/"] {
            let spec = BurstSpec::get(fine.parse().unwrap(), 10);
            assert!(spec.validate().is_ok(), "{fine}: {:?}", spec.validate());
            assert_eq!(spec.keys().len(), 1, "{fine}");
        }
    }

    #[test]
    fn for_duration_derives_the_count() {
        let url: Url = "http://127.0.0.1:1/x".parse().unwrap();
        let spec = BurstSpec {
            arrival: ArrivalPattern::ForDuration { rate: "10/1s".parse().unwrap(), duration: Duration::from_secs(3) },
            ..BurstSpec::get(url, 0)
        };
        assert_eq!(spec.planned_requests(), 30);
        assert_eq!(spec.keys()[0].to_string(), "127.0.0.1:1");
    }
}
