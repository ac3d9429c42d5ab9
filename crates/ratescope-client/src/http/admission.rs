//! Admission: the limiter's (and the shared store's) yes for one attempt, the same for the
//! client, the middleware and the proxy.

use std::time::Duration;

use crate::engine::Permit;
use crate::store::{Reservation, SharedGate};

/// The limiter's (and the shared store's) yes for one attempt.
#[derive(Debug)]
pub struct Admission {
    /// The limiter's permit (the slot, until dropped); `None` when no limiter paces the request.
    pub permit: Option<Permit>,
    /// How long the attempt waited for its permit (and the shared store).
    pub waited: Duration,
    /// The shared gate and what it reserved for this attempt alone, settled with the permit;
    /// `None` without a shared budget or with nothing to settle.
    pub shared: Option<(SharedGate, Reservation)>,
}

impl Admission {
    /// Admitted without waiting and without a shared budget: `permit` from the limiter, if any.
    pub fn at_once(permit: Option<Permit>) -> Self {
        Self { permit, waited: Duration::ZERO, shared: None }
    }
}
