//! Budget stores shared across processes: one decision per request, made atomically where the state lives.
//!
//! The first store is [`RedisStore`]: each decision is one Lua script (EVALSHA) that reads
//! the time from Redis itself, so every process agrees on "now" whatever its own clock says.
//! The store only answers "may this cost pass now, and if not, how long until it may";
//! what a caller does when the store is unavailable (fail open, fail closed, fall back to
//! a local limiter) is its own policy, which [`StoreError::is_unavailable`] makes easy.
//!
//! Time inside the store is whole microseconds of the Redis clock. Periods are rounded
//! *up* to a microsecond, so a shared budget never admits faster than it was asked to.
//!
//! A [`SharedGate`] is what a client awaits after its local limiter: the key's budgets in the
//! store, with the fail policy acting while the store is away. [`SharedSettings`] names the
//! store and the shared name every process uses; [`SharedSettings::share`] makes a gate for
//! each key of a registry:
//!
//! ```
//! use ratescope_engine::{BudgetSpec, LimitKey, LimiterConfig, Registry};
//! use ratescope_redis::{FailPolicy, SharedSettings};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let registry = Registry::new();
//! let minute = BudgetSpec::sliding_window("minute", 100, std::time::Duration::from_secs(60))?;
//! registry.set(LimitKey::host("api.example.com")?, LimiterConfig::new().with_budget(minute))?;
//! // Connects lazily: a Redis that is down is the fail policy's business, not an error here.
//! let settings = SharedSettings::new("redis://127.0.0.1:6379", "team")?.with_policy(FailPolicy::Open)?;
//! let (gates, _handle) = settings.share(&registry)?;
//! assert_eq!(gates.len(), 1, "one gate per key; the local limiter keeps only lanes and concurrency");
//! # Ok(())
//! # }
//! ```

#![warn(missing_docs)]

mod endpoint;
mod gate;
mod redis;
mod settings;

use std::time::Duration;

use ratescope_engine::{AcquireError, BudgetKind, BudgetSpec, ConfigError, Cost, Rate, Unit};

pub use self::endpoint::StoreAddress;
pub use self::gate::{
    AdmittedVia, FailPolicy, MAX_INSTANCES, MAX_LEASE, PROBE_INTERVAL, REFUND_RECHECK, SharedAdmission, SharedCounts,
    SharedGate, SharedSettlement, StoreHealth, StoreState, local_share,
};
pub use self::redis::{DECIDE_SCRIPT, RedisStore, RedisStoreOptions, Reservation, SETTLE_SCRIPT, Settled};
pub use self::settings::{LEASE_HOLD, SHARED_PREFIX, SharedHandle, SharedReport, SharedSettings, local_part};

/// The longest period a shared budget may span (a window, or a full bucket's refill): ten years.
///
/// It keeps every time the scripts compute below 2^53 microseconds, where Lua's numbers are exact.
pub const MAX_SPAN: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

/// The largest sliding-window limit: the window keeps one sorted-set member per admitted
/// unit (roughly 100 bytes each in Redis), so a million is already about 100 MB per key.
pub const MAX_WINDOW_LIMIT: u64 = 1_000_000;

/// A budget whose state lives in a shared store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SharedBudget {
    /// A token bucket kept as GCRA: holds up to `capacity` tokens, one refilled every `per_token`.
    TokenBucket {
        /// The most tokens it holds.
        capacity: u64,
        /// The time one token takes to come back.
        per_token: Duration,
    },
    /// An exact sliding window: at most `limit` units in any window of length `window`.
    SlidingWindow {
        /// The most units in any window.
        limit: u64,
        /// The window's length.
        window: Duration,
    },
}

impl SharedBudget {
    /// A token bucket of `capacity` refilling `per_second` tokens a second (fractions allowed).
    pub fn token_bucket_per_second(capacity: u64, per_second: f64) -> Result<Self, StoreError> {
        if !per_second.is_finite() || per_second <= 0.0 {
            return Err(StoreError::InvalidSettings(format!(
                "a refill rate must be a positive, finite number of tokens per second, not {per_second}"
            )));
        }
        let per_token_secs = 1.0 / per_second;
        if per_token_secs > MAX_SPAN.as_secs_f64() {
            return Err(StoreError::InvalidSettings(format!(
                "a refill of {per_second} tokens per second is slower than one token in ten years"
            )));
        }
        let budget = Self::TokenBucket { capacity, per_token: Duration::from_secs_f64(per_token_secs) };
        budget.validate()?;
        Ok(budget)
    }

    /// A token bucket of `capacity` refilling at the engine's `refill` rate.
    pub fn token_bucket(capacity: u64, refill: Rate) -> Result<Self, StoreError> {
        let per_token_ns = refill.per().as_nanos().div_ceil(u128::from(refill.amount().max(1)));
        let per_token = Duration::from_nanos(u64::try_from(per_token_ns).unwrap_or(u64::MAX));
        let budget = Self::TokenBucket { capacity, per_token };
        budget.validate()?;
        Ok(budget)
    }

    /// An exact sliding window of at most `limit` units in any `window`.
    pub fn sliding_window(limit: u64, window: Duration) -> Result<Self, StoreError> {
        let budget = Self::SlidingWindow { limit, window };
        budget.validate()?;
        Ok(budget)
    }

    /// The most this budget admits at once: the bucket's capacity or the window's limit.
    pub fn capacity(&self) -> u64 {
        match *self {
            Self::TokenBucket { capacity, .. } => capacity,
            Self::SlidingWindow { limit, .. } => limit,
        }
    }

    /// Refuses settings the store cannot honour: zero sizes or periods, and anything so large
    /// that the microsecond arithmetic in Redis would lose precision.
    pub fn validate(&self) -> Result<(), StoreError> {
        match *self {
            Self::TokenBucket { capacity, per_token } => {
                if capacity == 0 {
                    return Err(StoreError::InvalidSettings(
                        "a token bucket of capacity 0 would never admit anything".into(),
                    ));
                }
                if per_token.is_zero() {
                    return Err(StoreError::InvalidSettings(
                        "a token bucket needs a refill period per token greater than zero".into(),
                    ));
                }
                let full = micros_ceil(per_token).saturating_mul(capacity);
                if full > micros_ceil(MAX_SPAN) {
                    return Err(StoreError::InvalidSettings(format!(
                        "a token bucket of {capacity} tokens at one per {per_token:?} takes longer than ten years to refill"
                    )));
                }
            }
            Self::SlidingWindow { limit, window } => {
                if limit == 0 {
                    return Err(StoreError::InvalidSettings(
                        "a sliding window with limit 0 would never admit anything".into(),
                    ));
                }
                if limit > MAX_WINDOW_LIMIT {
                    return Err(StoreError::InvalidSettings(format!(
                        "a sliding window limit of {limit} is above the store's maximum of {MAX_WINDOW_LIMIT}"
                    )));
                }
                if window.is_zero() {
                    return Err(StoreError::InvalidSettings("a sliding window of length 0 is not a window".into()));
                }
                if window > MAX_SPAN {
                    return Err(StoreError::InvalidSettings(format!(
                        "a sliding window of {window:?} is longer than ten years"
                    )));
                }
            }
        }
        Ok(())
    }

    /// Checks the budget and that `cost` is one it can ever admit; used before any I/O.
    pub fn check_cost(&self, cost: u64) -> Result<(), StoreError> {
        self.validate()?;
        if cost == 0 {
            return Err(StoreError::InvalidSettings("a request must cost at least 1".into()));
        }
        let capacity = self.capacity();
        if cost > capacity {
            return Err(StoreError::CostTooLarge { cost, capacity });
        }
        Ok(())
    }
}

impl TryFrom<BudgetKind> for SharedBudget {
    type Error = StoreError;

    /// The shared form of an engine budget (a bucket's refill rounded up to whole microseconds per token).
    fn try_from(kind: BudgetKind) -> Result<Self, StoreError> {
        match kind {
            BudgetKind::TokenBucket { capacity, refill } => Self::token_bucket(capacity, refill),
            BudgetKind::SlidingWindow { limit, window } => Self::sliding_window(limit, window),
        }
    }
}

/// A named budget of a shared key, decided together with the key's other budgets.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SharedSpec {
    /// Names the budget's Redis keys: every process sharing the key must use the same names.
    pub name: String,
    /// Its kind and size.
    pub budget: SharedBudget,
    /// What the budget counts; a unit other than requests is part of its Redis keys, so a
    /// requests budget and a tokens budget of one name never share state.
    pub unit: Unit,
    /// Units one unit of a request's cost spends here (as the engine's `BudgetSpec::cost`).
    pub cost: u64,
}

impl SharedSpec {
    /// A named shared budget of requests where a request of cost 1 spends one unit.
    pub fn new(name: impl Into<String>, budget: SharedBudget) -> Result<Self, StoreError> {
        let spec = Self { name: name.into(), budget, unit: Unit::Requests, cost: 1 };
        spec.units(1)?;
        Ok(spec)
    }

    /// The same budget counting `unit` (tokens, points, ...) instead of requests.
    pub fn with_unit(mut self, unit: Unit) -> Result<Self, StoreError> {
        self.unit = unit;
        self.check_names()?;
        Ok(self)
    }

    /// What a request of `cost` requests spends here, refused when the budget can never hold it.
    pub fn units(&self, cost: u64) -> Result<u64, StoreError> {
        self.spend(&Cost::requests(cost))
    }

    /// What a request of `cost` spends here (its amount of this budget's unit times the
    /// budget's cost), refused when the budget can never hold it. A request spends at least
    /// one unit of a requests budget, and may spend none of another unit.
    pub fn spend(&self, cost: &Cost) -> Result<u64, StoreError> {
        self.check_names()?;
        let amount = cost.of(&self.unit);
        let units = amount
            .checked_mul(self.cost)
            .ok_or(StoreError::CostTooLarge { cost: amount, capacity: self.budget.capacity() })?;
        if units == 0 && self.unit != Unit::Requests {
            self.budget.validate()?;
            return Ok(0);
        }
        self.budget.check_cost(units)?;
        Ok(units)
    }

    /// The most a settlement counts here for one request: a window one unit above its limit
    /// (one member per unit; one above already holds the window shut, even to a request that
    /// spends none of it, until the request leaves it); a bucket its capacity, as the engine's
    /// budgets count it (`LimiterConfig::settle_bound`): a real budget of that size would have
    /// refused a request spending more, and one settlement then delays the next admissions by at
    /// most one refill of the capacity.
    pub fn settle_cap(&self) -> u64 {
        match self.budget {
            SharedBudget::SlidingWindow { limit, .. } => limit + 1,
            SharedBudget::TokenBucket { capacity, .. } => capacity,
        }
    }

    /// The budget's name and unit become Redis key parts: visible ASCII without braces or ':'.
    fn check_names(&self) -> Result<(), StoreError> {
        let key_part = |text: &str| {
            !text.is_empty()
                && text.len() <= 64
                && text.bytes().all(|b| b.is_ascii_graphic() && !matches!(b, b'{' | b'}' | b':'))
        };
        if !key_part(&self.name) {
            return Err(StoreError::InvalidSettings(format!(
                "the shared budget name {:?} must be 1 to 64 visible characters without braces or ':' (it names Redis keys)",
                self.name
            )));
        }
        if !key_part(self.unit.as_str()) {
            return Err(StoreError::InvalidSettings(format!(
                "the unit {:?} of shared budget '{}' must be 1 to 64 visible characters without braces or ':' (it names Redis keys)",
                self.unit.as_str(),
                self.name
            )));
        }
        Ok(())
    }
}

impl TryFrom<&BudgetSpec> for SharedSpec {
    type Error = StoreError;

    /// The shared form of an engine budget, under the same name, unit and cost.
    fn try_from(spec: &BudgetSpec) -> Result<Self, StoreError> {
        let shared = Self {
            name: spec.name.clone(),
            budget: SharedBudget::try_from(spec.kind)?,
            unit: spec.unit.clone(),
            cost: spec.cost,
        };
        // One unit of whatever the budget counts must fit.
        shared.spend(&Cost::requests(0).with(spec.unit.clone(), 1))?;
        Ok(shared)
    }
}

/// The answer for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreDecision {
    /// Whether the cost was admitted (and spent).
    pub allowed: bool,
    /// Units left right now: after this request when admitted, before it when denied.
    pub remaining: u64,
    /// When denied: how long until this same cost would fit (sleep exactly this, then ask again).
    /// `None` when admitted.
    pub retry_after: Option<Duration>,
    /// When denied by [`RedisStore::acquire_all`]: the index of the budget that needs the longest wait.
    pub blocked_by: Option<usize>,
}

/// Why a store could not decide.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// The store could not be reached: connection refused or dropped, DNS, a server still
    /// loading or down. The request was not decided; apply the caller's fail policy.
    #[error("the budget store is unreachable: {0}")]
    Unreachable(String),
    /// The store did not answer in time. The request was not decided (though a script that
    /// was already running may still have spent the cost); apply the caller's fail policy.
    #[error("the budget store did not answer within {after:?} ({operation})")]
    Timeout {
        /// What was asked (`decide`, `settle`, `connect`, ...).
        operation: &'static str,
        /// The timeout that ran out.
        after: Duration,
    },
    /// The store will not let us in however long we wait: a wrong password, a user whose ACL
    /// lacks the commands, or a server that does not speak Redis. Every request fails at once,
    /// whatever the fail policy: retrying would only hide a configuration error. The message
    /// says which, and what to check.
    #[error("{0}")]
    Refused(String),
    /// The store answered with an error or an unexpected reply (a key of the wrong type, a
    /// script bug, no permission to run scripts).
    #[error("the budget script failed: {0}")]
    Script(String),
    /// The cost can never fit in the budget, however long one waits; refused before any I/O.
    #[error("a cost of {cost} can never be admitted by a budget that holds at most {capacity}")]
    CostTooLarge {
        /// The request's cost.
        cost: u64,
        /// The most the budget holds.
        capacity: u64,
    },
    /// A setting the store refuses: zero, not a number, too large, a malformed URL or prefix.
    #[error("invalid store settings: {0}")]
    InvalidSettings(String),
    /// The engine refused the limits of the local fallback (a budget's share, a changed
    /// config): the shared budgets as given cannot be split or applied.
    #[error("the shared budgets' local limits were refused: {0}")]
    Limits(#[from] ConfigError),
    /// The local fallback's limiter refused the request (it can never fit, or was cancelled).
    #[error("the local fallback refused the request: {0}")]
    FallbackRefused(#[from] AcquireError),
}

impl StoreError {
    /// True when the store could not be asked (unreachable or timed out), so a fail-open,
    /// fail-closed or local-fallback policy applies; false when the request itself is at fault.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, Self::Unreachable(_) | Self::Timeout { .. })
    }
}

/// Whole microseconds, rounded up, saturating.
pub(crate) fn micros_ceil(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos().div_ceil(1000)).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_zero_nan_and_huge_settings() {
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY, 1e-12] {
            assert!(matches!(SharedBudget::token_bucket_per_second(3, bad), Err(StoreError::InvalidSettings(_))));
        }
        assert!(SharedBudget::sliding_window(0, Duration::from_secs(1)).is_err());
        assert!(SharedBudget::sliding_window(5, Duration::ZERO).is_err());
        assert!(SharedBudget::sliding_window(MAX_WINDOW_LIMIT + 1, Duration::from_secs(1)).is_err());
        assert!(SharedBudget::sliding_window(5, MAX_SPAN + Duration::from_secs(1)).is_err());
        assert!(SharedBudget::TokenBucket { capacity: 0, per_token: Duration::from_secs(1) }.validate().is_err());
        assert!(SharedBudget::TokenBucket { capacity: 3, per_token: Duration::ZERO }.validate().is_err());
        assert!(
            SharedBudget::TokenBucket { capacity: u64::MAX, per_token: Duration::from_secs(1) }.validate().is_err()
        );
        assert!(SharedBudget::token_bucket_per_second(3, 2.5).is_ok());
    }

    #[test]
    fn a_budget_counting_tokens_spends_the_requests_tokens() {
        let tokens =
            BudgetSpec::sliding_window("tpm", 1000, Duration::from_secs(60)).unwrap().with_unit(Unit::tokens());
        let shared = SharedSpec::try_from(&tokens).unwrap();
        assert_eq!(shared.unit, Unit::tokens());
        let cost = Cost::requests(1).with(Unit::tokens(), 300);
        assert_eq!(shared.spend(&cost).unwrap(), 300);
        assert_eq!(shared.spend(&Cost::requests(1)).unwrap(), 0, "no tokens named: none spent");
        assert!(matches!(
            shared.spend(&Cost::requests(1).with(Unit::tokens(), 1001)),
            Err(StoreError::CostTooLarge { cost: 1001, capacity: 1000 })
        ));
        let requests = SharedSpec::try_from(&tokens.with_unit(Unit::Requests)).unwrap();
        assert_eq!(requests.spend(&cost).unwrap(), 1);
        assert!(requests.spend(&Cost::requests(0)).is_err(), "a request costs at least one request");
        let odd = SharedSpec::try_from(&BudgetSpec::sliding_window("tpm", 10, Duration::from_secs(1)).unwrap())
            .unwrap()
            .with_unit(Unit::named("to:kens"));
        assert!(odd.unwrap_err().to_string().contains("unit \"to:kens\""));
    }

    #[test]
    fn cost_is_checked_against_capacity() {
        let window = SharedBudget::sliding_window(5, Duration::from_secs(2)).unwrap();
        assert!(window.check_cost(5).is_ok());
        assert!(matches!(window.check_cost(6), Err(StoreError::CostTooLarge { cost: 6, capacity: 5 })));
        assert!(matches!(window.check_cost(0), Err(StoreError::InvalidSettings(_))));
    }

    #[test]
    fn engine_rates_round_up_to_whole_microseconds() {
        let rate = Rate::new(3, Duration::from_secs(1)).unwrap();
        let SharedBudget::TokenBucket { per_token, .. } = SharedBudget::token_bucket(3, rate).unwrap() else {
            panic!("not a bucket");
        };
        assert_eq!(micros_ceil(per_token), 333_334);
        assert_eq!(micros_ceil(Duration::from_nanos(1)), 1);
    }
}
