//! What a limiter looks like at one instant, and why the request at the head of its queue waits.

use std::fmt;
use std::time::Duration;

use tokio::time::Instant;

use super::budget::BudgetKind;
use super::priority::Priority;
use super::rate::format_wait;
use super::unit::Unit;

/// A limiter's state at `at`.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    /// The limiter's key (host, host:port or host/prefix).
    pub key: String,
    /// When the snapshot was taken.
    pub at: Instant,
    /// Every budget, in the order configured.
    pub budgets: Vec<BudgetSnapshot>,
    /// Waiting requests per lane: high, normal, low.
    pub queued: [usize; 3],
    /// Permits held now (admitted, not yet dropped).
    pub in_flight: usize,
    /// The concurrency cap; `None` for none.
    pub concurrency: Option<usize>,
    /// The pause in force, if a server asked for one.
    pub paused: Option<PauseSnapshot>,
    /// The request that will be admitted next, if any waits.
    pub head: Option<HeadSnapshot>,
}

impl Snapshot {
    /// All waiting requests.
    pub fn queued_total(&self) -> usize {
        self.queued.iter().sum()
    }

    /// Waiting requests in one lane.
    pub fn queued_in(&self, priority: Priority) -> usize {
        self.queued[priority.index()]
    }
}

/// One budget's state.
#[derive(Debug, Clone, PartialEq)]
pub struct BudgetSnapshot {
    /// The budget's name.
    pub name: String,
    /// Its kind and size.
    pub kind: BudgetKind,
    /// What it counts (requests, tokens, points).
    pub unit: Unit,
    /// Units that could be spent now; fractional for a token bucket.
    pub available: f64,
    /// The most it can hold (a bucket's capacity, a window's limit).
    pub capacity: u64,
    /// Units spent inside the current window (sliding windows only).
    pub window_used: Option<u64>,
}

/// A pause the server asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct PauseSnapshot {
    /// When the pause ends.
    pub until: Instant,
    /// How long is left of it at the snapshot.
    pub remaining: Duration,
    /// What asked for it (a 429's Retry-After, a 503, ...).
    pub reason: String,
}

/// The request at the head of the queue.
#[derive(Debug, Clone, PartialEq)]
pub struct HeadSnapshot {
    /// Its lane.
    pub priority: Priority,
    /// What it costs, in requests.
    pub cost: u64,
    /// How long it has waited so far.
    pub waited: Duration,
    /// What keeps it waiting.
    pub blocked: Blocked,
}

/// What keeps a request from being admitted now.
#[derive(Debug, Clone, PartialEq)]
pub enum Blocked {
    /// Nothing: it is being admitted.
    Ready,
    /// A budget has too little left; it will have enough after `wait`.
    Budget {
        /// The budget's name.
        name: String,
        /// How long until it has room.
        wait: Duration,
    },
    /// Every concurrency slot is taken; it waits for a request to finish.
    Concurrency {
        /// The cap.
        limit: usize,
    },
    /// The key is paused (the server said to come back later).
    Paused {
        /// Why the key is paused.
        reason: String,
        /// How long is left of the pause.
        wait: Duration,
    },
    /// The server's own budget, as the client mirrors it, has no room: for `wait` when the
    /// restore instant is known, else until a response says more.
    Server {
        /// Which server budget is empty.
        reason: String,
        /// How long until it restores, when known.
        wait: Option<Duration>,
    },
}

impl fmt::Display for Blocked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Ready => f.write_str("ready"),
            Self::Budget { name, wait } => write!(f, "blocked by '{name}' for {}", format_wait(*wait)),
            Self::Concurrency { limit } => write!(f, "blocked by concurrency: all {limit} slots in flight"),
            Self::Paused { reason, wait } => write!(f, "paused for {} ({reason})", format_wait(*wait)),
            Self::Server { reason, wait: Some(wait) } => {
                write!(f, "held by the server for {} ({reason})", format_wait(*wait))
            }
            Self::Server { reason, wait: None } => write!(f, "held by the server ({reason})"),
        }
    }
}
