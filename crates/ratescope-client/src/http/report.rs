//! One request's reporter, the same under every face (client, middleware, proxy, tower layer):
//! its events, built only when someone listens; and the steps every face reports alike (the
//! shared budget's admission).

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
