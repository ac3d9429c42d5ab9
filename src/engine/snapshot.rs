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
    pub key: String,
    pub at: Instant,
    pub budgets: Vec<BudgetSnapshot>,
    /// Waiting requests per lane: high, normal, low.
    pub queued: [usize; 3],
    pub in_flight: usize,
    pub concurrency: Option<usize>,
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
    pub name: String,
    pub kind: BudgetKind,
    /// What it counts (requests, tokens, points).
    pub unit: Unit,
    /// Units that could be spent now; fractional for a token bucket.
    pub available: f64,
    pub capacity: u64,
    /// Units spent inside the current window (sliding windows only).
    pub window_used: Option<u64>,
}

/// A pause the server asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct PauseSnapshot {
    pub until: Instant,
    pub remaining: Duration,
    pub reason: String,
}

/// The request at the head of the queue.
#[derive(Debug, Clone, PartialEq)]
pub struct HeadSnapshot {
    pub priority: Priority,
    pub cost: u64,
    pub waited: Duration,
    pub blocked: Blocked,
}

/// What keeps a request from being admitted now.
#[derive(Debug, Clone, PartialEq)]
pub enum Blocked {
    /// Nothing: it is being admitted.
    Ready,
    /// A budget has too little left; it will have enough after `wait`.
    Budget { name: String, wait: Duration },
    /// Every concurrency slot is taken; it waits for a request to finish.
    Concurrency { limit: usize },
    /// The key is paused (the server said to come back later).
    Paused { reason: String, wait: Duration },
    /// The server's own budget, as the client mirrors it, has no room: for `wait` when the
    /// restore instant is known, else until a response says more.
    Server { reason: String, wait: Option<Duration> },
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
