//! Admission, the one step where an attempt waits before it may go, the same under every face
//! (client, middleware, proxy, tower layer): its key's limiter (in its priority lane, shed
//! when the face sheds), then its key's shared budget; and the yes it ends with.

use std::time::Duration;

use thiserror::Error;
use tokio::time::Instant;

use super::events::EventKind;
use super::report::{Reporter, admit_shared};
use crate::engine::{AcquireError, Cost, Limiter, Overload, Permit, Priority, QueueCounts, Shedding, format_wait};
use crate::store::{Reservation, SharedGate, StoreError};

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

/// Where the attempts of one request wait: its key's limiter and lane, what each attempt
/// reserves, the face's shedding and the key's shared budget.
#[derive(Debug, Clone, Copy)]
pub struct AdmissionStep<'a> {
    /// The key's limiter.
    pub limiter: &'a Limiter,
    /// The request's lane.
    pub priority: Priority,
    /// What an attempt reserves in every budget.
    pub estimate: &'a Cost,
    /// The face's queue counts and shedding bounds; `None`: an attempt waits as long as the
    /// limiter says (a caller's deadline or cancellation ends the wait).
    pub shedding: Option<(&'a QueueCounts, &'a Shedding)>,
    /// The key's shared budget (Redis), asked after the local permit so the local queue
    /// orders callers and the store sees only admitted attempts.
    pub shared: Option<&'a SharedGate>,
}

/// Why an attempt was not admitted.
#[derive(Debug, Clone, Error)]
pub enum Refusal {
    /// The limiter can never admit it (a zero cost, more than a budget holds), or its wait
    /// ended unadmitted.
    #[error("{0}")]
    Limiter(AcquireError),
    /// Shedding turned it away instead of letting it wait (or wait longer).
    #[error("shed: {}", overload_text(.0))]
    Shed(Overload),
    /// The shared budget's store refused it, and its fail policy does not let it through.
    #[error("shared budget: {0}")]
    Shared(StoreError),
    /// The shared budget did not admit it within what was left of the shedding bound.
    #[error("the shared budget did not admit this request in time")]
    SharedTooSlow,
}

impl Refusal {
    /// Requests waiting ahead of the refused one when it was refused (0 when it did not queue).
    pub fn ahead(&self) -> usize {
        match self {
            Self::Shed(overload) => overload.ahead(),
            _ => 0,
        }
    }
}

/// Why shedding refused a request, in words without its key (each face adds it).
pub fn overload_text(overload: &Overload) -> String {
    match overload {
        Overload::Invalid(err) => err.to_string(),
        Overload::QueueFull { waiting } => format!("{waiting} requests already wait"),
        Overload::TooLong { expected, .. } => {
            format!("the wait ahead is expected to take {}, longer than the queueing bound", format_wait(*expected))
        }
        Overload::Waited { err, .. } => err.to_string(),
    }
}

impl AdmissionStep<'_> {
    /// Attempt `attempt` admitted now, without a wait: room in every budget, a free slot,
    /// nobody queued ahead, and no shared budget to ask (a round trip). Reported as `Queued`
    /// and `Admitted`. `None`: [`wait`](Self::wait), which also reports a refusal's cause.
    pub fn at_once(&self, attempt: u32, report: &Reporter<'_>) -> Option<Admission> {
        if self.shared.is_some() {
            return None;
        }
        // A refusal (would wait, or never fits) is for `wait` to wait out or report.
        let permit = self.limiter.try_acquire_cost(self.estimate.clone()).ok()?;
        report.emit(EventKind::Queued { attempt, priority: self.priority });
        report.emit(EventKind::Admitted { attempt, queue_wait: Duration::ZERO });
        Some(Admission::at_once(Some(permit)))
    }

    /// Waits for attempt `attempt`'s permit (shed as the face says), then for the shared
    /// budget (within what is left of the shedding bound), reported as `Queued`, the store's
    /// events, then `Admitted` with the whole wait. A refusal is the face's to report: each
    /// names it in its own terms (an error, a 429).
    pub async fn wait(&self, attempt: u32, report: &Reporter<'_>) -> Result<Admission, Refusal> {
        report.emit(EventKind::Queued { attempt, priority: self.priority });
        let queued_at = Instant::now();
        let (limiter, cost) = (self.limiter, self.estimate.clone());
        let permit = match self.shedding {
            Some((queues, shedding)) => {
                queues.admit(limiter, self.priority, cost, shedding).await.map_err(Refusal::Shed)?
            }
            None => limiter.acquire_cost(self.priority, cost).await.map_err(Refusal::Limiter)?,
        };
        let mut shared = None;
        if let Some(gate) = self.shared {
            let asked = admit_shared(gate, self.estimate, attempt, report);
            let answer = match self.shedding {
                Some((_, shedding)) => tokio::time::timeout_at(queued_at + shedding.max_queue_wait, asked)
                    .await
                    .map_err(|_| Refusal::SharedTooSlow)?,
                None => asked.await,
            };
            shared = answer.map_err(Refusal::Shared)?.map(|reservation| (gate.clone(), reservation));
        }
        let waited = queued_at.elapsed();
        report.emit(EventKind::Admitted { attempt, queue_wait: waited });
        Ok(Admission { permit: Some(permit), waited, shared })
    }

    /// [`at_once`](Self::at_once), else [`wait`](Self::wait).
    pub async fn admit(&self, attempt: u32, report: &Reporter<'_>) -> Result<Admission, Refusal> {
        match self.at_once(attempt, report) {
            Some(admission) => Ok(admission),
            // Boxed: the wait's state (the limiter's queue, the shared budget's round trip) is
            // most of an admission's, and every attempt, admitted at once or not, would carry
            // and copy it; one that waits can afford an allocation.
            None => Box::pin(self.wait(attempt, report)).await,
        }
    }
}
