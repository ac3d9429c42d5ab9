//! Budgets: the token bucket (rate with bursts) and the exact sliding window (N per W), in exact integer math.
//!
//! Time inside a budget is nanoseconds since the owning limiter's epoch, so the
//! math is deterministic and never touches a clock itself.

use std::collections::VecDeque;
use std::time::Duration;

use super::ConfigError;
use super::rate::{MAX_AMOUNT, Rate, format_period};
use super::unit::{CompactCost, Unit};

/// What kind of limit a budget enforces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BudgetKind {
    /// Holds up to `capacity` tokens, refilled continuously at `refill`; a request spends its cost.
    TokenBucket {
        /// The most tokens it holds, and so the largest burst.
        capacity: u64,
        /// How fast spent tokens come back.
        refill: Rate,
    },
    /// At most `limit` units in any window of length `window` (no boundary bursts).
    SlidingWindow {
        /// The most units admitted in any window.
        limit: u64,
        /// The window's length.
        window: Duration,
    },
}

/// A named budget, the unit it counts and what one unit of a request's cost spends in it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BudgetSpec {
    /// Names the budget in snapshots, errors and reconfiguration (unique within a limiter).
    pub name: String,
    /// The kind of limit and its size.
    pub kind: BudgetKind,
    /// What this budget counts (requests unless named otherwise).
    pub unit: Unit,
    /// Units one unit of a request's cost spends here; a request spending `c` of the unit
    /// spends `c * cost`.
    pub cost: u64,
}

impl BudgetSpec {
    /// A token bucket holding `capacity` tokens and refilling at `refill`.
    pub fn token_bucket(name: impl Into<String>, capacity: u64, refill: Rate) -> Result<Self, ConfigError> {
        Self::checked(name.into(), BudgetKind::TokenBucket { capacity, refill })
    }

    /// An exact sliding window: at most `limit` in any `window`.
    pub fn sliding_window(name: impl Into<String>, limit: u64, window: Duration) -> Result<Self, ConfigError> {
        Self::checked(name.into(), BudgetKind::SlidingWindow { limit, window })
    }

    /// The same budget counting `unit` instead of requests.
    pub fn with_unit(mut self, unit: Unit) -> Self {
        self.unit = unit;
        self
    }

    /// What a request of `cost` spends here.
    #[inline]
    pub(crate) fn spend(&self, cost: &CompactCost) -> u64 {
        cost.of(&self.unit).saturating_mul(self.cost)
    }

    /// The same budget with a different cost per request.
    pub fn with_cost(mut self, cost: u64) -> Result<Self, ConfigError> {
        self.cost = cost;
        self.validate()?;
        Ok(self)
    }

    fn checked(name: String, kind: BudgetKind) -> Result<Self, ConfigError> {
        let spec = Self { name, kind, unit: Unit::Requests, cost: 1 };
        spec.validate()?;
        Ok(spec)
    }

    /// Refuses settings that would hang or overflow: zero capacity, zero window, absurd sizes,
    /// a per-request cost the budget can never hold.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.name.trim().is_empty() {
            return Err(ConfigError::EmptyName);
        }
        let capacity = self.capacity();
        if capacity == 0 {
            return Err(ConfigError::ZeroCapacity(self.name.clone()));
        }
        if capacity > MAX_AMOUNT {
            return Err(ConfigError::CountTooLarge(capacity));
        }
        if let BudgetKind::SlidingWindow { window, .. } = self.kind {
            // Reuse Rate's checks on the period (zero, too long).
            Rate::new(1, window)?;
        }
        if self.cost == 0 {
            return Err(ConfigError::ZeroCost(self.name.clone()));
        }
        if self.cost > capacity {
            return Err(ConfigError::CostExceedsCapacity { budget: self.name.clone(), cost: self.cost, capacity });
        }
        Ok(())
    }

    /// The most this budget can ever admit at once (bucket capacity or window limit).
    pub fn capacity(&self) -> u64 {
        match self.kind {
            BudgetKind::TokenBucket { capacity, .. } => capacity,
            BudgetKind::SlidingWindow { limit, .. } => limit,
        }
    }

    /// A short description such as `bucket 5 @ 3/1s` or `window 1000/1h`.
    pub fn describe(&self) -> String {
        let cost = if self.cost == 1 { String::new() } else { format!(" (cost {})", self.cost) };
        let unit = match &self.unit {
            Unit::Requests => String::new(),
            unit => format!(" {unit}"),
        };
        match self.kind {
            BudgetKind::TokenBucket { capacity, refill } => format!("bucket {capacity}{unit} @ {refill}{cost}"),
            BudgetKind::SlidingWindow { limit, window } => {
                format!("window {limit}{unit}/{}{cost}", format_period(window))
            }
        }
    }
}

/// Live state of one budget.
#[derive(Debug)]
pub(crate) enum BudgetState {
    Bucket(TokenBucket),
    Window(SlidingWindow),
}

impl BudgetState {
    pub(crate) fn new(kind: &BudgetKind) -> Self {
        match *kind {
            BudgetKind::TokenBucket { capacity, refill } => Self::Bucket(TokenBucket::new(capacity, refill)),
            BudgetKind::SlidingWindow { limit, window } => Self::Window(SlidingWindow::new(limit, window)),
        }
    }

    /// Earliest instant (ns, never before `now`) at which `cost` fits.
    pub(crate) fn ready_at(&mut self, cost: u64, now: u64) -> u64 {
        match self {
            Self::Bucket(bucket) => bucket.ready_at(cost, now),
            Self::Window(window) => window.ready_at(cost, now),
        }
    }

    /// Spends `cost` at `now`; the caller has checked `ready_at(cost, now) <= now`.
    pub(crate) fn consume(&mut self, cost: u64, now: u64) {
        match self {
            Self::Bucket(bucket) => bucket.consume(cost, now),
            Self::Window(window) => window.consume(cost, now),
        }
    }

    /// Gives back `units` spent by an admission at `admitted` (a settlement below the estimate).
    pub(crate) fn refund(&mut self, units: u64, admitted: u64, now: u64) {
        match self {
            Self::Bucket(bucket) => bucket.refund(units, now),
            Self::Window(window) => window.refund(units, admitted, now),
        }
    }

    /// Spends `units` more for an admission at `admitted` (a settlement above the estimate),
    /// into debt if the budget holds less, but never more than [`MAX_DEBT`] in debt: a lying
    /// answer can delay the next admissions by at most what a whole budget takes to come back
    /// (a bucket's refill of its capacity, a window's length), as a `Retry-After` is bounded.
    pub(crate) fn charge(&mut self, units: u64, admitted: u64, now: u64) {
        match self {
            Self::Bucket(bucket) => bucket.charge(units, now),
            Self::Window(window) => window.charge(units, admitted, now),
        }
    }

    /// Units that could be spent right now (fractional for buckets).
    pub(crate) fn available(&mut self, now: u64) -> f64 {
        match self {
            Self::Bucket(bucket) => bucket.available(now),
            Self::Window(window) => window.available(now) as f64,
        }
    }

    /// The token bucket inside, if this is one.
    pub(crate) fn bucket_mut(&mut self) -> Option<&mut TokenBucket> {
        match self {
            Self::Bucket(bucket) => Some(bucket),
            Self::Window(_) => None,
        }
    }

    /// Units spent inside the current window (windows only).
    pub(crate) fn window_used(&mut self, now: u64) -> Option<u64> {
        match self {
            Self::Bucket(_) => None,
            Self::Window(window) => {
                window.prune(now);
                Some(window.used)
            }
        }
    }

    /// State for a new kind of the same budget, carrying over what was spent.
    pub(crate) fn reconfigured(mut self, kind: &BudgetKind, now: u64) -> Self {
        match (&mut self, *kind) {
            (Self::Bucket(old), BudgetKind::TokenBucket { capacity, refill }) => {
                let available = old.available(now).min(capacity as f64);
                Self::Bucket(TokenBucket::with_available(capacity, refill, available, now))
            }
            (Self::Window(old), BudgetKind::SlidingWindow { limit, window }) => {
                old.limit = limit;
                old.window = duration_nanos(window);
                old.prune(now);
                self
            }
            _ => Self::new(kind),
        }
    }
}

/// One budget's spending on its own, clock-free: every instant is nanoseconds since an epoch
/// the caller keeps. A [`Limiter`](crate::Limiter) keeps one per budget; the demo API's
/// server-side policies use the same one, so a server and a client with the same
/// [`BudgetKind`] agree to the nanosecond on what fits when.
#[derive(Debug)]
pub struct BudgetMeter(BudgetState);

impl BudgetMeter {
    /// A full budget of `kind`: nothing spent yet.
    #[must_use]
    pub fn new(kind: &BudgetKind) -> Self {
        Self(BudgetState::new(kind))
    }

    /// The earliest instant (ns, never before `now`) at which `cost` units fit; `now` itself when
    /// they fit already. Instants passed in must never go backwards.
    pub fn ready_at(&mut self, cost: u64, now: u64) -> u64 {
        self.0.ready_at(cost, now)
    }

    /// Spends `cost` units at `now`. Call it only when [`ready_at`](Self::ready_at)`(cost, now)`
    /// returned `now`: this does not check that they fit.
    pub fn consume(&mut self, cost: u64, now: u64) {
        self.0.consume(cost, now);
    }

    /// The units that could be spent at `now` (fractional for a token bucket refilling).
    pub fn available(&mut self, now: u64) -> f64 {
        self.0.available(now)
    }
}

/// The most debt a settlement leaves in a budget, in capacities: a bucket holds at most one
/// capacity less than empty (whole again one refill of its capacity after it was empty), a window
/// counts at most its limit twice (every charge leaves with its admission, within one window).
pub const MAX_DEBT: u64 = 1;

/// Nanoseconds of a duration, saturating at `u64::MAX` (about 584 years): the unit of
/// [`BudgetMeter`]'s instants.
#[must_use]
pub fn duration_nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

/// A rate of `amount` per `per_ns` nanoseconds as (ticks per ns, ticks per token), reduced by
/// their greatest common divisor so tick counts stay small. One tick is `1 / ticks_per_ns` ns.
pub(crate) fn reduced_ticks(amount: u64, per_ns: u128) -> (u128, u128) {
    let amount = u128::from(amount);
    let divisor = gcd(amount, per_ns).max(1);
    (amount / divisor, per_ns / divisor)
}

fn gcd(mut a: u128, mut b: u128) -> u128 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// A token bucket kept as a GCRA "theoretical arrival time" in scaled ticks.
///
/// One tick is `1 / amount` ns, so one token is exactly `per_ns` ticks and no
/// rounding ever accumulates: `tat` is when the bucket would be full again.
/// `amount` and `per_ns` are reduced by their common divisor, so ticks are the same
/// unit as in `fast::FastBucket` and the two can hand the state to each other.
#[derive(Debug)]
pub(crate) struct TokenBucket {
    amount: u128,
    per_ns: u128,
    /// Capacity in ticks (`capacity * per_ns`).
    tolerance: u128,
    tat: u128,
}

impl TokenBucket {
    fn new(capacity: u64, refill: Rate) -> Self {
        let (amount, per_ns) = reduced_ticks(refill.amount(), refill.per().as_nanos());
        Self { amount, per_ns, tolerance: u128::from(capacity) * per_ns, tat: 0 }
    }

    /// The theoretical arrival time in ticks (what the lock-free path keeps in its atomic word).
    pub(crate) fn tat(&self) -> u128 {
        self.tat
    }

    pub(crate) fn set_tat(&mut self, tat: u128) {
        self.tat = tat;
    }

    fn with_available(capacity: u64, refill: Rate, available: f64, now: u64) -> Self {
        let mut bucket = Self::new(capacity, refill);
        let missing = (capacity as f64 - available).max(0.0);
        bucket.tat = bucket.ticks(now) + (missing * bucket.per_ns as f64).ceil() as u128;
        bucket
    }

    fn ticks(&self, ns: u64) -> u128 {
        u128::from(ns) * self.amount
    }

    fn ready_at(&self, cost: u64, now: u64) -> u64 {
        let now_ticks = self.ticks(now);
        let needed = self.tat.max(now_ticks) + u128::from(cost) * self.per_ns;
        if needed <= now_ticks + self.tolerance {
            return now; // the common case, without a 128-bit division
        }
        let earliest_ticks = needed.saturating_sub(self.tolerance);
        let earliest = earliest_ticks.div_ceil(self.amount);
        u64::try_from(earliest).unwrap_or(u64::MAX).max(now)
    }

    fn consume(&mut self, cost: u64, now: u64) {
        self.tat = self.tat.max(self.ticks(now)) + u128::from(cost) * self.per_ns;
    }

    /// Spends `units` after admission, into debt down to [`MAX_DEBT`] capacities below empty
    /// (a debt already deeper, left by a smaller capacity before a reconfiguration, is kept).
    fn charge(&mut self, units: u64, now: u64) {
        let now_ticks = self.ticks(now);
        let deepest = now_ticks.saturating_add(self.tolerance.saturating_mul(u128::from(MAX_DEBT) + 1));
        let charged = self.tat.max(now_ticks).saturating_add(u128::from(units).saturating_mul(self.per_ns));
        self.tat = charged.min(deepest.max(self.tat));
    }

    /// Refills by `units`, never past full.
    fn refund(&mut self, units: u64, now: u64) {
        let full_at = self.tat.min(self.ticks(now));
        self.tat = self.tat.saturating_sub(u128::from(units) * self.per_ns).max(full_at);
    }

    fn available(&self, now: u64) -> f64 {
        let debt = self.tat.saturating_sub(self.ticks(now)).min(self.tolerance);
        (self.tolerance - debt) as f64 / self.per_ns as f64
    }
}

/// An exact sliding window: every admission is remembered until it leaves the window.
///
/// Admissions at the same instant share one entry, so memory is bounded by the
/// number of distinct admission instants inside one window.
#[derive(Debug)]
pub(crate) struct SlidingWindow {
    limit: u64,
    window: u64,
    entries: VecDeque<(u64, u64)>,
    used: u64,
}

impl SlidingWindow {
    fn new(limit: u64, window: Duration) -> Self {
        Self { limit, window: duration_nanos(window), entries: VecDeque::new(), used: 0 }
    }

    /// Forgets admissions that left the window: one admitted at `t` counts while `now < t + window`.
    fn prune(&mut self, now: u64) {
        while let Some(&(at, cost)) = self.entries.front() {
            if at.saturating_add(self.window) > now {
                break;
            }
            self.used -= cost;
            self.entries.pop_front();
        }
    }

    fn ready_at(&mut self, cost: u64, now: u64) -> u64 {
        self.prune(now);
        let total = self.used + cost;
        if total <= self.limit {
            return now;
        }
        let mut to_free = total - self.limit;
        for &(at, spent) in &self.entries {
            if spent >= to_free {
                return at.saturating_add(self.window);
            }
            to_free -= spent;
        }
        // Only reachable for a cost above the limit, which validation refuses.
        u64::MAX
    }

    fn consume(&mut self, cost: u64, now: u64) {
        self.used += cost;
        match self.entries.back_mut() {
            Some((at, spent)) if *at == now => *spent += cost,
            _ => self.entries.push_back((now, cost)),
        }
    }

    fn available(&mut self, now: u64) -> u64 {
        self.prune(now);
        self.limit.saturating_sub(self.used)
    }

    /// The slot of admissions at `admitted`, if the window still counts them.
    fn slot(&mut self, admitted: u64, now: u64) -> Result<usize, usize> {
        self.prune(now);
        self.entries.binary_search_by_key(&admitted, |(at, _)| *at)
    }

    /// Forgets `units` of the admissions at `admitted`; nothing if they left the window.
    fn refund(&mut self, units: u64, admitted: u64, now: u64) {
        if let Ok(index) = self.slot(admitted, now) {
            let spent = &mut self.entries[index].1;
            let freed = units.min(*spent);
            *spent -= freed;
            self.used -= freed;
        }
    }

    /// Counts `units` more at `admitted` while the window still holds that instant (above the
    /// limit if need be, up to [`MAX_DEBT`] limits above it: later admissions then wait until
    /// enough leaves, at most one window).
    fn charge(&mut self, units: u64, admitted: u64, now: u64) {
        if admitted.saturating_add(self.window) <= now {
            return;
        }
        self.prune(now);
        let most = self.limit.saturating_mul(MAX_DEBT + 1);
        let units = units.min(most.saturating_sub(self.used));
        if units == 0 {
            return;
        }
        match self.slot(admitted, now) {
            Ok(index) => self.entries[index].1 += units,
            Err(index) => self.entries.insert(index, (admitted, units)),
        }
        self.used += units;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: u64 = 1_000_000_000;

    fn bucket(capacity: u64, rate: &str) -> BudgetState {
        let rate = rate.parse().unwrap();
        BudgetState::new(&BudgetKind::TokenBucket { capacity, refill: rate })
    }

    #[test]
    fn ticks_are_reduced_exactly() {
        assert_eq!(reduced_ticks(1000, 1_000_000_000), (1, 1_000_000));
        assert_eq!(reduced_ticks(3, 1_000_000_000), (3, 1_000_000_000));
        assert_eq!(reduced_ticks(5000, 3_600_000_000_000), (1, 720_000_000));
    }

    #[test]
    fn bucket_starts_full_and_refills_exactly() {
        let mut b = bucket(3, "3/1s");
        for _ in 0..3 {
            assert_eq!(b.ready_at(1, 0), 0);
            b.consume(1, 0);
        }
        // A third of a second in nanoseconds, rounded up: exact, not float-approximate.
        assert_eq!(b.ready_at(1, 0), 333_333_334);
        assert_eq!(b.ready_at(3, 0), SEC);
        assert!((b.available(SEC / 2) - 1.5).abs() < 1e-9);
        assert_eq!(b.available(10 * SEC), 3.0);
    }

    #[test]
    fn window_admits_limit_then_waits_for_oldest() {
        let mut w = BudgetState::new(&BudgetKind::SlidingWindow { limit: 3, window: Duration::from_secs(10) });
        w.consume(1, 0);
        w.consume(1, 2 * SEC);
        w.consume(1, 2 * SEC);
        assert_eq!(w.ready_at(1, 3 * SEC), 10 * SEC);
        assert_eq!(w.ready_at(2, 3 * SEC), 12 * SEC);
        assert_eq!(w.window_used(10 * SEC), Some(2));
        assert_eq!(w.ready_at(1, 10 * SEC), 10 * SEC);
    }

    #[test]
    fn reconfigured_bucket_keeps_spent_tokens() {
        let mut b = bucket(10, "1/1s");
        b.consume(8, 0);
        let mut b = b.reconfigured(&BudgetKind::TokenBucket { capacity: 5, refill: "1/1s".parse().unwrap() }, 0);
        assert!((b.available(0) - 2.0).abs() < 1e-6);
        let mut b = b.reconfigured(&BudgetKind::TokenBucket { capacity: 1, refill: "1/1s".parse().unwrap() }, 0);
        assert!((b.available(0) - 1.0).abs() < 1e-6);
    }

    #[test]
    fn a_charge_leaves_a_bucket_at_most_one_capacity_in_debt() {
        let mut b = bucket(1000, "1000/1m");
        b.consume(10, 0);
        b.charge(u64::MAX, 0, 0);
        assert_eq!(b.available(0), 0.0);
        // One capacity owed: whole again two refills of its capacity later, not 2^64 tokens later.
        assert_eq!(b.ready_at(1000, 0), 120 * SEC);
        assert_eq!(b.ready_at(1, 0), 60 * SEC + 60_000_000);
        b.charge(u64::MAX, 0, 0);
        assert_eq!(b.ready_at(1000, 0), 120 * SEC, "debts do not add up past the bound");
        b.refund(500, 0, 30 * SEC);
        assert_eq!(b.ready_at(1000, 30 * SEC), 90 * SEC, "a refund still pays the debt down");
    }

    #[test]
    fn a_charge_leaves_a_window_at_most_its_limit_above_it_and_never_wraps() {
        let mut w = BudgetState::new(&BudgetKind::SlidingWindow { limit: 1000, window: Duration::from_secs(3600) });
        w.consume(10, 0);
        w.charge(u64::MAX, 0, SEC);
        assert_eq!(w.window_used(SEC), Some(2000));
        w.consume(0, SEC);
        w.charge(u64::MAX, SEC, SEC);
        assert_eq!(w.window_used(SEC), Some(2000), "no further than the bound, and no wrap");
        assert_eq!(w.ready_at(1, 2 * SEC), 3600 * SEC, "shut until the admission leaves: one window");
        assert_eq!(w.window_used(3600 * SEC), Some(0), "everything left with its admission");
    }

    #[test]
    fn validation_refuses_hanging_settings() {
        let rate: Rate = "1/1s".parse().unwrap();
        assert!(matches!(BudgetSpec::token_bucket("b", 0, rate), Err(ConfigError::ZeroCapacity(_))));
        assert!(BudgetSpec::sliding_window("w", 10, Duration::ZERO).is_err());
        assert!(BudgetSpec::sliding_window("w", 0, Duration::from_secs(1)).is_err());
        assert!(BudgetSpec::token_bucket(" ", 1, rate).is_err());
        let spec = BudgetSpec::token_bucket("b", 5, rate).unwrap();
        assert!(matches!(spec.clone().with_cost(6), Err(ConfigError::CostExceedsCapacity { .. })));
        assert!(spec.with_cost(0).is_err());
    }
}
