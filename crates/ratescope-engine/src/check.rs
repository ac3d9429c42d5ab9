//! An admission check: a question the limiter asks under its own lock, beside its budgets,
//! for limits the engine does not own (the server's budget as the client mirrors it).
//!
//! The engine only asks "may one request of this cost go at `now`, and if not, until when?",
//! tells the check which request it admitted (a ticket, in admission order) and with what
//! estimate, what it actually spent once its permit is settled, and when its permit ends.
//! What the check believes, and how it learns, is the caller's.

use std::any::Any;
use std::fmt::Debug;

use tokio::time::Instant;

use super::Cost;

/// Whether the check lets one request through now.
#[derive(Debug, Clone, PartialEq)]
pub enum CheckReadiness {
    /// The request may go now.
    Ready,
    /// Not before `at` (the check will be asked again then).
    At {
        /// The earliest instant to ask again.
        at: Instant,
        /// Why it must wait, for snapshots.
        reason: String,
    },
    /// Not until the check learns something: it is asked again whenever its owner updates it
    /// through [`Limiter::update_check`](super::Limiter::update_check) or a checked permit ends.
    Wait {
        /// Why it must wait, for snapshots.
        reason: String,
    },
}

/// A check beside the budgets. Every method runs under the limiter's lock, so it must be quick
/// and must not call back into the limiter.
pub trait AdmissionCheck: Send + Debug {
    /// Whether one request spending `cost` may be admitted at `now`. May update time-driven state.
    fn readiness(&mut self, now: Instant, cost: &Cost) -> CheckReadiness;

    /// One request spending `cost` was admitted at `now` (the check said `Ready` under the same
    /// lock); returns its ticket, which the permit carries.
    fn admit(&mut self, now: Instant, cost: &Cost) -> u64;

    /// The request holding `ticket` actually spent `actual` (its permit was settled).
    fn settle(&mut self, ticket: u64, actual: &Cost) {
        let _ = (ticket, actual);
    }

    /// The permit holding `ticket` ended (answered, failed or cancelled).
    fn release(&mut self, ticket: u64);

    /// For the owner to reach its concrete type.
    fn as_any_mut(&mut self) -> &mut dyn Any;
}
