//! Errors of the engine: settings refused at construction, and acquisitions that cannot succeed.

use std::time::Duration;

use thiserror::Error;

use super::rate::format_amount;
use super::snapshot::Blocked;

/// A setting the engine refuses, because it would hang, overflow or mean nothing.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum ConfigError {
    /// A rate whose amount is zero.
    #[error("a rate of zero never refills: use a positive amount such as 10/1s")]
    ZeroRate,
    /// A window or refill period of zero.
    #[error("a duration of zero is not a window or a refill period")]
    ZeroDuration,
    /// A window or period longer than ten years.
    #[error("a period of {0:?} is longer than ten years")]
    DurationTooLong(Duration),
    /// An amount above the engine's maximum (2^40).
    #[error("{} is too large (the most a budget can hold is 2^40, {max})", format_amount(*.0), max = super::rate::MAX_AMOUNT)]
    AmountTooLarge(f64),
    /// A whole count (a capacity, a rate's amount) above the engine's maximum (2^40).
    #[error("{0} is too large (the most a budget can hold is 2^40, {max})", max = super::rate::MAX_AMOUNT)]
    CountTooLarge(u64),
    /// An amount that is NaN or infinite.
    #[error("{} is not a finite number", format_amount(*.0))]
    NotFinite(f64),
    /// An amount that is zero or negative where it must be positive.
    #[error("{} must be greater than zero", format_amount(*.0))]
    NotPositive(f64),
    /// A positive amount that rounds to zero at the decimals a rate keeps.
    #[error("{}", super::rate::too_fine(*amount, *per))]
    TooFine {
        /// The amount given.
        amount: f64,
        /// The period it was given over.
        per: Duration,
    },
    /// Text that does not parse as a rate, duration or limit description; the message says why.
    #[error("{0}")]
    Syntax(String),
    /// A budget with an empty name.
    #[error("a budget needs a name")]
    EmptyName,
    /// A budget (named) that could never admit anything.
    #[error("budget '{0}' has capacity 0, so nothing could ever pass")]
    ZeroCapacity(String),
    /// A budget (named) whose per-request cost is zero.
    #[error("budget '{0}' has a cost of 0 per request")]
    ZeroCost(String),
    /// A budget that cannot hold even one request's cost.
    #[error("budget '{budget}' can hold at most {capacity}, less than the {cost} one request costs")]
    CostExceedsCapacity {
        /// The budget's name.
        budget: String,
        /// What one request costs in it.
        cost: u64,
        /// The most it can hold.
        capacity: u64,
    },
    /// Two budgets of one limiter share a name.
    #[error("two budgets are named '{0}'")]
    DuplicateBudget(String),
    /// A concurrency cap of zero.
    #[error("a concurrency limit of 0 would never let a request through")]
    ZeroConcurrency,
    /// A concurrency cap above what the engine supports.
    #[error("a concurrency limit of {0} is larger than the engine supports ({max})", max = super::config::MAX_CONCURRENCY)]
    ConcurrencyTooLarge(usize),
    /// Text that is not a limiter key (host, host:port or host/prefix).
    #[error(
        "'{0}' is not a limiter key: use a host such as api.example.com or a host and path prefix such as api.example.com/search"
    )]
    BadKey(String),
}

/// Why an acquisition did not return a permit.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum AcquireError {
    /// A request that costs nothing.
    #[error("a request cost of 0 is not meaningful")]
    ZeroCost,
    /// A request whose cost one budget can never hold, however long it waits.
    #[error("this request costs {cost} in budget '{budget}', which can hold at most {capacity}")]
    CostExceedsCapacity {
        /// The budget's name.
        budget: String,
        /// What the request costs in it.
        cost: u64,
        /// The most it can hold.
        capacity: u64,
    },
    /// The caller's deadline passed before the request was admitted; nothing was spent.
    #[error("the deadline passed after waiting {}", super::rate::format_wait(*waited))]
    DeadlineExceeded {
        /// How long it waited.
        waited: Duration,
    },
}

/// Why `try_acquire` could not admit a request immediately.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum TryAcquireError {
    /// Admission now is impossible; the request would have waited for what is named.
    #[error("would wait: {0}")]
    WouldWait(Blocked),
    /// The request could never be admitted (see [`AcquireError`]).
    #[error(transparent)]
    Invalid(#[from] AcquireError),
}
