//! One request's reporter, the same under every face (client, middleware, proxy, tower layer):
//! its events, built only when someone listens; and the shared budget's two round trips,
//! reported alike by every face (its admission and its settlement).

use std::sync::atomic::{AtomicU64, Ordering};

use tokio::time::Instant;

use crate::engine::Cost;
use crate::http::events::{Event, EventKind, EventSink};
use crate::store::{Reservation, SharedGate, StoreError};

/// Reports one request's events under its id and limiter key.
#[derive(Debug)]
pub struct Reporter<'a> {
    sink: &'a EventSink,
    id: u64,
    key: Option<String>,
}

impl<'a> Reporter<'a> {
    /// The reporter of a new request of limiter key `key`. Its id (the next of `ids`) and its
    /// copy of the key are taken only when someone listens: without a listener a request
    /// reports nothing, and pays for nothing.
    pub fn new(sink: &'a EventSink, ids: &AtomicU64, key: Option<&str>) -> Self {
        if !sink.is_enabled() {
            return Self { sink, id: 0, key: None };
        }
        Self { sink, id: ids.fetch_add(1, Ordering::Relaxed), key: key.map(str::to_owned) }
    }

    /// Whether anything listens: when not, events need not be built.
    pub fn listening(&self) -> bool {
        self.sink.is_enabled()
    }

    /// Reports `kind` now, if anything listens.
    pub fn emit(&self, kind: EventKind) {
        if self.listening() {
            self.sink.emit(Event { request_id: self.id, key: self.key.clone(), at: Instant::now(), kind });
        }
    }
}

/// Waits until the key's shared budgets (`gate`) admit `estimate` for `attempt`, or its fail
/// policy lets it through, and reports how: the store's state when it changed, then
/// `SharedAdmitted` with the way through. Returns what the store reserved for this attempt
/// alone, to settle once its actual cost is known.
pub async fn admit_shared(
    gate: &SharedGate,
    estimate: &Cost,
    attempt: u32,
    report: &Reporter<'_>,
) -> Result<Option<Reservation>, StoreError> {
    // Boxed: a store round trip is a large future most requests never make.
    let admission = Box::pin(gate.admit_cost(estimate)).await?;
    if let Some(state) = admission.state_change {
        report.emit(EventKind::StoreState { state });
    }
    let (via, waited, remaining) = (admission.via, admission.waited, admission.remaining);
    report.emit(EventKind::SharedAdmitted { attempt, via, waited, remaining });
    Ok(admission.reservation)
}

/// A shared budget's settlement an attempt still owes: the gate, what it reserved, and what
/// the attempt actually spent.
#[derive(Debug)]
pub struct SharedDue {
    /// The key's shared budget.
    pub gate: SharedGate,
    /// What its admission reserved.
    pub reservation: Reservation,
    /// What the answer says the attempt spent.
    pub actual: Cost,
}

/// Corrects the shared store's reservation to what the attempt spent (one round trip,
/// bounded by the store's command timeout), reporting the store's state when it changed. A
/// store that is away loses the settlement (the gate counts and logs it; the estimate stands)
/// and never fails the request.
pub async fn settle_shared(due: SharedDue, report: &Reporter<'_>) {
    let SharedDue { gate, mut reservation, actual } = due;
    // Boxed like the admission: a store round trip is a large future.
    match Box::pin(gate.settle(&mut reservation, &actual)).await {
        Ok(settlement) => {
            if let Some(state) = settlement.state_change {
                report.emit(EventKind::StoreState { state });
            }
        }
        Err(err) => tracing::warn!(key = gate.key(), %err, "the shared budget store refused a settlement"),
    }
}
