//! [`RateLimitLayer`] and its builder: the limits (a registry, or a profile's hosts) and the
//! options (events, adaptive keys, shedding, the retry policy whose caps bound a pause).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use tower::Layer;

use super::service::RateLimitService;
use crate::engine::{QueueCounts, Registry, Shedding};
use crate::http::{Adaptive, EventSink, RetryPolicy};
use crate::profile::{Profile, ProfileError};

/// A `tower::Layer` that paces every request of the services it wraps by the limiter of its
/// key in a [`Registry`]. Cheap to clone; clones (and every service they make) share the
/// limiters, the queues and the event sink.
///
/// ```no_run
/// # use std::sync::Arc;
/// # use ratescope::engine::{LimitKey, LimiterConfig, Registry};
/// # use ratescope::layer::RateLimitLayer;
/// let key: LimitKey = "api.example.com".parse()?;
/// let registry = Registry::from_table([(key, LimiterConfig::parse_described("bucket 5 @ 5/1s")?)])?;
/// let layer = RateLimitLayer::new(Arc::new(registry));
/// let service = tower::ServiceBuilder::new().layer(layer).service_fn(|request: http::Request<String>| async move {
///     Ok::<_, std::convert::Infallible>(http::Response::new(request.into_body()))
/// });
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct RateLimitLayer {
    pub(super) state: Arc<LayerState>,
}

/// What every service of one layer shares.
#[derive(Debug)]
pub(super) struct LayerState {
    pub(super) registry: Arc<Registry>,
    pub(super) adaptive: Adaptive,
    pub(super) events: EventSink,
    pub(super) shedding: Option<Shedding>,
    pub(super) queues: QueueCounts,
    /// Bounds a pause after a 429/503 (`max_retry_after`) and sets it without `Retry-After`.
    pub(super) retry: RetryPolicy,
    pub(super) key_retry: HashMap<String, RetryPolicy>,
    pub(super) next_id: AtomicU64,
}

impl RateLimitLayer {
    /// A layer with `registry`'s limits and the default options (no events, no adaptive
    /// keys, no shedding, the default retry policy's pause bounds).
    pub fn new(registry: Arc<Registry>) -> Self {
        Self::builder(registry).build()
    }

    /// The options of a layer over `registry`.
    pub fn builder(registry: Arc<Registry>) -> RateLimitLayerBuilder {
        RateLimitLayerBuilder {
            registry,
            adaptive: Adaptive::Off,
            events: EventSink::none(),
            shedding: None,
            retry: RetryPolicy::default(),
            key_retry: HashMap::new(),
        }
    }

    /// The options of a layer with `profile`'s limits: a key per host and per path override,
    /// each host's retry policy (for pauses) and its `adaptive` setting. The profile's headers
    /// and secrets are not added to requests (the wrapped client sends what it is given).
    pub fn from_profile(profile: &Profile) -> Result<RateLimitLayerBuilder, ProfileError> {
        let hosts = profile.compile().map_err(ProfileError::invalid)?;
        let mut key_retry = HashMap::new();
        let mut adaptive = HashSet::new();
        for (host, compiled) in profile.hosts.iter().zip(hosts) {
            let keys: Vec<String> = std::iter::once(compiled.key.to_string())
                .chain(compiled.paths.iter().map(|(key, _)| key.to_string()))
                .collect();
            for key in &keys {
                key_retry.insert(key.clone(), compiled.retry.clone());
            }
            if host.adaptive {
                adaptive.extend(keys);
            }
        }
        let registry = profile.registry()?;
        let mut builder = Self::builder(Arc::new(registry));
        builder.key_retry = key_retry;
        builder.adaptive = if adaptive.is_empty() { Adaptive::Off } else { Adaptive::Keys(adaptive) };
        Ok(builder)
    }

    /// The limits this layer applies; changes to them (`Registry::set`) apply at once.
    pub fn registry(&self) -> &Arc<Registry> {
        &self.state.registry
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimitService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimitService::new(inner, Arc::clone(&self.state))
    }
}

/// Options of a [`RateLimitLayer`]; [`build`](Self::build) makes it.
#[derive(Debug)]
pub struct RateLimitLayerBuilder {
    registry: Arc<Registry>,
    adaptive: Adaptive,
    events: EventSink,
    shedding: Option<Shedding>,
    retry: RetryPolicy,
    key_retry: HashMap<String, RetryPolicy>,
}

impl RateLimitLayerBuilder {
    /// Reports every step of every request (queued, admitted, sent, response, paused,
    /// finished or failed) to `sink`, the same [`Event`](crate::http::Event)s the client emits.
    pub fn events(mut self, sink: EventSink) -> Self {
        self.events = sink;
        self
    }

    /// Which keys follow the budgets their server publishes in its rate-limit headers
    /// (`Adaptive::All`: every host, with an empty limiter made for a host without limits).
    pub fn adaptive(mut self, adaptive: Adaptive) -> Self {
        self.adaptive = adaptive;
        self
    }

    /// Refuses a request with [`RateLimitError::Shed`](super::RateLimitError::Shed) instead of
    /// queueing it when its key's queue is full or its wait is expected to exceed
    /// `max_queue_wait`, and once it has waited that long. Without it, requests wait as long
    /// as their limiter says.
    pub fn shedding(mut self, shedding: Shedding) -> Self {
        self.shedding = Some(shedding);
        self
    }

    /// The policy whose `max_retry_after` caps a pause after a 429/503 and whose backoff is
    /// the pause when the answer has no `Retry-After` (per-key policies of a profile win).
    pub fn retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// The layer.
    pub fn build(self) -> RateLimitLayer {
        let state = LayerState {
            registry: self.registry,
            adaptive: self.adaptive,
            events: self.events,
            shedding: self.shedding,
            queues: QueueCounts::default(),
            retry: self.retry,
            key_retry: self.key_retry,
            next_id: AtomicU64::new(0),
        };
        RateLimitLayer { state: Arc::new(state) }
    }
}
