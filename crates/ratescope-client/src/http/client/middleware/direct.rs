//! The middleware's direct path: a request that needs none of the client's steps but its key's
//! permit goes down the chain at once, and a plain answer goes back to the caller untouched.
//!
//! The steps read every answer for a listener, a cache, cost rules or an adaptive key, and
//! act on an answer only when it is an error or a status the retry policy retries. A client
//! with none of those has nothing to do with a 2xx (or a 3xx it does not retry): interpreting
//! its headers, deciding, recording and finishing would all come to "pass it on". The direct
//! path skips them; an answer that needs them continues through the steps as the request's
//! first attempt, so what the caller gets is the same either way.

use http::StatusCode;

use super::super::{LimitedClient, RequestSpec};
use crate::engine::{Cost, Permit};
use crate::http::retry::RetryPolicy;

/// A request admitted on the direct path: its key's permit (none without a limiter) and the
/// retry policy that says which answers go through the steps.
pub(super) struct Direct<'c> {
    pub(super) permit: Option<Permit>,
    retry: &'c RetryPolicy,
}

impl<'c> Direct<'c> {
    /// Admits `spec` at once, or `None` when it needs what the direct path skips: the client
    /// has a cache, coalescing or a listener; the request has cost rules (settled from the
    /// answer); the client adds headers for its host; its key is adaptive (it learns from every
    /// answer) or shares its budget through a store; or the limiter would make it wait.
    pub(super) fn admit(client: &'c LimitedClient, spec: &RequestSpec) -> Option<Self> {
        let inner = &*client.inner;
        let steps_read_answers = inner.cache.is_some() || inner.coalescer.is_some() || inner.policy.events.is_enabled();
        if steps_read_answers || !spec.cost_rules.is_empty() || client.adds_headers_for(&spec.url) {
            return None;
        }
        // A URL without a host is the steps' to refuse.
        spec.url.host_str()?;
        let Some(limiter) = client.limiter_for(&spec.url) else {
            return Some(Self { permit: None, retry: client.inner.policy.retry_for(None) });
        };
        let key = limiter.key();
        if inner.policy.adaptive.covers(key) || inner.gates.contains_key(key) {
            return None;
        }
        // A refusal (it would wait, or never fits) is the steps' to wait out or report.
        let permit = limiter.try_acquire_cost(Cost::requests(spec.cost)).ok()?;
        Some(Self { permit: Some(permit), retry: client.inner.policy.retry_for(Some(limiter.key())) })
    }

    /// Whether the steps would only pass an answer of `status` on: it is not an error (a 403
    /// may be a dialect's throttling signal), and the retry policy does not retry it.
    pub(super) fn passes_on(&self, status: StatusCode) -> bool {
        status.as_u16() < 400 && !self.retry.retry_statuses.contains(&status.as_u16())
    }
}
