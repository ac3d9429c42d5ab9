//! [`RateLimitError`]: why a call through the layer produced no response.

use std::convert::Infallible;
use std::time::Duration;

use thiserror::Error;

use crate::engine::{AcquireError, format_wait};

/// A call through [`RateLimitService`](super::RateLimitService) that ended without a response.
#[derive(Debug, Error)]
pub enum RateLimitError<E> {
    /// The inner service failed (a connection error, say); its error, unchanged.
    #[error(transparent)]
    Inner(E),
    /// The key's limiter can never admit this request (a zero cost, or more than a budget holds).
    #[error("{key}: {source}")]
    Acquire {
        /// The limiter key.
        key: String,
        /// What the limiter said.
        source: AcquireError,
    },
    /// Load shedding refused the request instead of letting it wait: the queue was full, the
    /// wait ahead was expected to exceed the bound, or it waited that long. `wait` is how long
    /// the key is expected to need before a request could go (a hint for when to come back).
    #[error("{key}: shed, {reason} (expected wait {})", format_wait(*wait))]
    Shed {
        /// The limiter key.
        key: String,
        /// The expected wait for a slot.
        wait: Duration,
        /// Why, in words.
        reason: String,
    },
}

impl<E> RateLimitError<E> {
    /// The inner service's error, when that is what this is.
    pub fn inner(&self) -> Option<&E> {
        match self {
            Self::Inner(err) => Some(err),
            _ => None,
        }
    }

    /// Whether load shedding refused the request.
    pub fn is_shed(&self) -> bool {
        matches!(self, Self::Shed { .. })
    }
}

impl<E> RateLimitError<E> {
    /// A refusal by the limiter (never an inner error) as the error of any inner service.
    pub(super) fn refused(refusal: RateLimitError<Infallible>) -> Self {
        match refusal {
            RateLimitError::Inner(never) => match never {},
            RateLimitError::Acquire { key, source } => Self::Acquire { key, source },
            RateLimitError::Shed { key, wait, reason } => Self::Shed { key, wait, reason },
        }
    }
}
