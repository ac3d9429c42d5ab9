//! Errors of the engine: settings refused at construction, and acquisitions that cannot succeed.

use std::time::Duration;

use thiserror::Error;

use super::snapshot::Blocked;

/// A setting the engine refuses, because it would hang, overflow or mean nothing.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum ConfigError {
    #[error("a rate of zero never refills: use a positive amount such as 10/1s")]
    ZeroRate,
    #[error("a duration of zero is not a window or a refill period")]
    ZeroDuration,
    #[error("a period of {0:?} is longer than ten years")]
    DurationTooLong(Duration),
    #[error("{0} is too large (the most a budget can hold is 2^40)")]
    AmountTooLarge(f64),
    #[error("{0} is not a finite number")]
    NotFinite(f64),
    #[error("{0} must be greater than zero")]
    NotPositive(f64),
    #[error("{0}")]
    Syntax(String),
    #[error("a budget needs a name")]
    EmptyName,
    #[error("budget '{0}' has capacity 0, so nothing could ever pass")]
    ZeroCapacity(String),
    #[error("budget '{0}' has a cost of 0 per request")]
    ZeroCost(String),
    #[error("budget '{budget}' can hold at most {capacity}, less than the {cost} one request costs")]
    CostExceedsCapacity { budget: String, cost: u64, capacity: u64 },
    #[error("two budgets are named '{0}'")]
    DuplicateBudget(String),
    #[error("a concurrency limit of 0 would never let a request through")]
    ZeroConcurrency,
    #[error("a concurrency limit of {0} is larger than the engine supports ({max})", max = super::config::MAX_CONCURRENCY)]
    ConcurrencyTooLarge(usize),
    #[error(
        "'{0}' is not a limiter key: use a host such as api.example.com or a host and path prefix such as api.example.com/search"
    )]
    BadKey(String),
}

/// Why an acquisition did not return a permit.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum AcquireError {
    #[error("a request cost of 0 is not meaningful")]
    ZeroCost,
    #[error("this request costs {cost} in budget '{budget}', which can hold at most {capacity}")]
    CostExceedsCapacity { budget: String, cost: u64, capacity: u64 },
    #[error("the deadline passed after waiting {}", super::rate::format_wait(*waited))]
    DeadlineExceeded { waited: Duration },
}

/// Why `try_acquire` could not admit a request immediately.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum TryAcquireError {
    #[error("would wait: {0}")]
    WouldWait(Blocked),
    #[error(transparent)]
    Invalid(#[from] AcquireError),
}
