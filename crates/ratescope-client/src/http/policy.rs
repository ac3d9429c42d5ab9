//! The settings every face of the client side shares (the limits, which keys follow their
//! server, the retry policies, where events go) as one value, and what every face decides
//! with it about a request before its first admission: its limiter, whether it follows the
//! server, its retry policy and its reporter.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use url::Url;

use super::adaptive;
use super::client::Adaptive;
use super::events::EventSink;
use super::report::Reporter;
use super::retry::RetryPolicy;
use crate::engine::{Limiter, Registry};

/// What a [`LimitedClient`](super::LimitedClient), a [`RateLimitMiddleware`](super::RateLimitMiddleware),
/// a proxy and a `RateLimitLayer` pace and retry requests by. A profile makes one with
/// `Profile::policy`.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    /// The limiters to pace requests by; hosts it does not name pass unlimited (unless
    /// `adaptive` is [`Adaptive::All`], which makes an empty one that follows the server).
    pub registry: Arc<Registry>,
    /// Which keys also follow the budgets their server publishes.
    pub adaptive: Adaptive,
    /// The retry policy of requests whose key has none of its own.
    pub retry: RetryPolicy,
    /// Retry policies per limiter key (`host`, `host:port` or `host/prefix`), over `retry`.
    pub key_retry: HashMap<String, RetryPolicy>,
    /// Where the events of every request go.
    pub events: EventSink,
}

/// What a request is, decided once before its first admission.
#[derive(Debug)]
pub struct Routed<'p> {
    /// Its key's limiter, if the registry has one.
    pub limiter: Option<Limiter>,
    /// Whether the key follows its server (its mirror is installed, so the key's first
    /// request goes alone as a scout).
    pub adaptive: bool,
    /// The key's retry policy.
    pub retry: &'p RetryPolicy,
    /// Its events.
    pub report: Reporter<'p>,
}

impl Policy {
    /// The retry policy of requests under the limiter keyed `key`: the key's own, else `retry`.
    pub fn retry_for(&self, key: Option<&str>) -> &RetryPolicy {
        key.and_then(|key| self.key_retry.get(key)).unwrap_or(&self.retry)
    }

    /// The limiter of a request to `url` (on `host`, lower case); in adaptive mode for every
    /// host, one made for a host without limits.
    pub fn limiter_for(&self, host: &str, url: &Url) -> Option<Limiter> {
        adaptive::limiter_for(&self.registry, &self.adaptive, host, url)
    }

    /// [`limiter_for`](Self::limiter_for) a request to `path` on `origin`'s host and port (a
    /// request target not made into a URL: the proxy's).
    pub fn limiter_at(&self, host: &str, origin: &Url, path: &str) -> Option<Limiter> {
        adaptive::limiter_at(&self.registry, &self.adaptive, host, origin, path)
    }

    /// A request under `limiter`, its events numbered from `ids`: whether it follows the
    /// server (installing the mirror), its retry policy and its reporter.
    pub fn routed(&self, limiter: Option<Limiter>, ids: &AtomicU64) -> Routed<'_> {
        let key = limiter.as_ref().map(Limiter::key);
        let adaptive = key.is_some_and(|key| self.adaptive.covers(key));
        if let (true, Some(limiter)) = (adaptive, &limiter) {
            adaptive::watch(limiter);
        }
        let retry = self.retry_for(key);
        let report = Reporter::new(&self.events, ids, key);
        Routed { limiter, adaptive, retry, report }
    }
}
