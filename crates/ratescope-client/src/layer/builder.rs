//! [`RateLimitLayer`] and its builder: the limits (a registry, or a profile's hosts) and the
//! options (events, adaptive keys, shedding, the retry policy whose caps bound a pause).

use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use tower::Layer;

use super::service::RateLimitService;
use crate::engine::{QueueCounts, Registry, Shedding};
use crate::http::{Adaptive, EventSink, Policy, RetryPolicy};

/// A `tower::Layer` that paces every request of the services it wraps by the limiter of its
/// key in a [`Registry`]. Cheap to clone; clones (and every service they make) share the
/// limiters, the queues and the event sink.
///
/// ```no_run
/// # use std::sync::Arc;
/// # use ratescope_client::engine::{LimitKey, LimiterConfig, Registry};
/// # use ratescope_client::layer::RateLimitLayer;
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
    /// The limits, adaptive keys and events; its retry policies bound a pause after a 429/503
    /// (`max_retry_after`) and set it without `Retry-After`.
    pub(super) policy: Policy,
    pub(super) shedding: Option<Shedding>,
    pub(super) queues: QueueCounts,
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
        RateLimitLayerBuilder { policy: Policy { registry, ..Policy::default() }, shedding: None }
    }

    /// The options of a layer that paces and retries by `policy` (a profile's:
    /// `Profile::policy` in `ratescope`, a key per host and per path override, each host's
    /// retry policy for pauses and its `adaptive` setting). Headers and secrets are not added
    /// to requests: the wrapped client sends what it is given.
    pub fn with_policy(policy: Policy) -> RateLimitLayerBuilder {
        RateLimitLayerBuilder { policy, shedding: None }
    }

    /// The limits this layer applies; changes to them (`Registry::set`) apply at once.
    pub fn registry(&self) -> &Arc<Registry> {
        &self.state.policy.registry
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
    policy: Policy,
    shedding: Option<Shedding>,
}

impl RateLimitLayerBuilder {
    /// Reports every step of every request (queued, admitted, sent, response, paused,
    /// finished or failed) to `sink`, the same [`Event`](crate::http::Event)s the client emits.
    pub fn events(mut self, sink: EventSink) -> Self {
        self.policy.events = sink;
        self
    }

    /// Which keys follow the budgets their server publishes in its rate-limit headers
    /// (`Adaptive::All`: every host, with an empty limiter made for a host without limits).
    pub fn adaptive(mut self, adaptive: Adaptive) -> Self {
        self.policy.adaptive = adaptive;
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
        self.policy.retry = retry;
        self
    }

    /// The layer.
    pub fn build(self) -> RateLimitLayer {
        let state = LayerState {
            policy: self.policy,
            shedding: self.shedding,
            queues: QueueCounts::default(),
            next_id: AtomicU64::new(0),
        };
        RateLimitLayer { state: Arc::new(state) }
    }
}
