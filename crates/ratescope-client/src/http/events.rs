//! What the limited client reports: one `Event` per step of a request, over a channel that never blocks.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use http::HeaderMap;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::headers::RateLimitInfo;
use super::retry::RetryReason;
use crate::engine::{Cost, Priority};
use crate::store::{AdmittedVia, StoreState};

/// One step in the life of one request.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// Unique per client, in the order requests were started.
    pub request_id: u64,
    /// The limiter key that paced it, or `None` when no limit applied.
    pub key: Option<String>,
    /// When it happened.
    pub at: Instant,
    /// What happened.
    pub kind: EventKind,
}

/// What happened. Attempts count from 1.
#[derive(Debug, Clone, PartialEq)]
pub enum EventKind {
    /// Waiting for the limiter.
    Queued {
        /// The attempt, from 1.
        attempt: u32,
        /// Its lane.
        priority: Priority,
    },
    /// Let through by the limiter after `queue_wait`.
    Admitted {
        /// The attempt, from 1.
        attempt: u32,
        /// How long it waited.
        queue_wait: Duration,
    },
    /// Let through by the key's shared budget (in a store such as Redis) after `waited`,
    /// or by its fail policy while the store was away.
    SharedAdmitted {
        /// The attempt, from 1.
        attempt: u32,
        /// The store, or the fail policy that let it through.
        via: AdmittedVia,
        /// How long it waited.
        waited: Duration,
        /// What the store said is left, when it decided.
        remaining: Option<u64>,
    },
    /// The shared store's state changed (connected, or degraded with a policy acting).
    StoreState {
        /// The new state.
        state: StoreState,
    },
    /// On the wire. `path` never carries the query string (it may hold secrets).
    Sent {
        /// The attempt, from 1.
        attempt: u32,
        /// The method.
        method: String,
        /// The URL's path, without the query.
        path: String,
    },
    /// A response arrived after `service_time` (send to response), with what its headers say.
    /// `headers` are the response's own, with cookie values masked.
    Response {
        /// The attempt, from 1.
        attempt: u32,
        /// The status.
        status: u16,
        /// Send to response.
        service_time: Duration,
        /// What its rate-limit headers say.
        info: Box<RateLimitInfo>,
        /// Its headers, cookie values masked.
        headers: Box<HeaderMap>,
    },
    /// The request will be sent again after `delay`.
    RetryScheduled {
        /// The attempt that failed, from 1.
        attempt: u32,
        /// How long until the next attempt.
        delay: Duration,
        /// Whether `Retry-After` or the backoff chose the delay.
        reason: RetryReason,
        /// What failed: a status or an error.
        cause: String,
    },
    /// The key was paused: nothing of it is sent for `pause`.
    KeyPaused {
        /// How long the key is paused.
        pause: Duration,
        /// Why (a 429's Retry-After, a 503, ...).
        reason: String,
    },
    /// The answer told the request's true cost: its budgets now count `actual`, not `reserved`.
    Settled {
        /// The attempt, from 1.
        attempt: u32,
        /// What it reserved before sending.
        reserved: Cost,
        /// What the answer said it spent.
        actual: Cost,
    },
    /// Adaptive mode learned something about the server's limits (scouting, a window, a pace).
    Adaptive {
        /// What was learned, in words.
        note: String,
    },
    /// Served from the response cache without touching the limiter (`revalidated`: after a 304).
    CacheHit {
        /// True when a 304 from the server confirmed the stored response.
        revalidated: bool,
    },
    /// An identical request was in flight: this one shares its answer and sends nothing.
    Coalesced,
    /// The request ended with a response (any status).
    Finished {
        /// The final status.
        status: u16,
        /// Attempts sent (0 from the cache).
        attempts: u32,
        /// First queued to final response.
        total: Duration,
    },
    /// The request ended without a usable response.
    Failed {
        /// Why, in words.
        error: String,
        /// Attempts sent.
        attempts: u32,
    },
    /// The consumer was too slow: this many events were dropped before this one.
    Lagged {
        /// Events lost.
        dropped: u64,
    },
}

/// The sending side: bounded, never waits, counts what it had to drop.
#[derive(Debug, Clone, Default)]
pub struct EventSink {
    inner: Option<Arc<SinkInner>>,
}

#[derive(Debug)]
struct SinkInner {
    sender: mpsc::Sender<Event>,
    dropped: AtomicU64,
}

impl EventSink {
    /// A sink and its receiver, holding at most `capacity` undelivered events.
    pub fn channel(capacity: usize) -> (Self, mpsc::Receiver<Event>) {
        let (sender, receiver) = mpsc::channel(capacity.max(1));
        (Self { inner: Some(Arc::new(SinkInner { sender, dropped: AtomicU64::new(0) })) }, receiver)
    }

    /// A sink that discards everything.
    pub fn none() -> Self {
        Self::default()
    }

    /// Events dropped because the consumer lagged since the last `Lagged` report (the count
    /// starts again from zero each time one is delivered).
    pub fn dropped(&self) -> u64 {
        self.inner.as_ref().map_or(0, |inner| inner.dropped.load(Ordering::Relaxed))
    }

    /// Whether anything listens: when not, callers can skip building events at all.
    pub fn is_enabled(&self) -> bool {
        self.inner.is_some()
    }

    /// Delivers `event` if there is room, else counts it as dropped; first reports earlier drops.
    pub fn emit(&self, event: Event) {
        let Some(inner) = &self.inner else { return };
        let dropped = inner.dropped.swap(0, Ordering::AcqRel);
        if dropped > 0 {
            let lagged = Event { kind: EventKind::Lagged { dropped }, ..event.clone() };
            if inner.sender.try_send(lagged).is_err() {
                inner.dropped.fetch_add(dropped + 1, Ordering::AcqRel);
                return;
            }
        }
        if inner.sender.try_send(event).is_err() {
            inner.dropped.fetch_add(1, Ordering::AcqRel);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(id: u64) -> Event {
        Event { request_id: id, key: None, at: Instant::now(), kind: EventKind::CacheHit { revalidated: false } }
    }

    #[test]
    fn a_full_channel_drops_and_counts_then_reports_the_gap() {
        let (sink, mut receiver) = EventSink::channel(2);
        for id in 0..5 {
            sink.emit(event(id));
        }
        assert_eq!(sink.dropped(), 3);
        assert_eq!(receiver.try_recv().unwrap().request_id, 0);
        assert_eq!(receiver.try_recv().unwrap().request_id, 1);
        sink.emit(event(5));
        assert_eq!(receiver.try_recv().unwrap().kind, EventKind::Lagged { dropped: 3 });
        assert_eq!(receiver.try_recv().unwrap().request_id, 5);
        assert_eq!(sink.dropped(), 0);
    }

    #[test]
    fn a_closed_receiver_never_blocks_the_sender() {
        let (sink, receiver) = EventSink::channel(1);
        drop(receiver);
        for id in 0..100 {
            sink.emit(event(id));
        }
        assert_eq!(sink.dropped(), 100);
        EventSink::none().emit(event(0));
    }
}
