//! Server-side rate-limit policies as pure code: time comes in as nanoseconds since the server's epoch.
//!
//! Token buckets and sliding windows reuse the engine's budget math
//! (`engine::BudgetMeter`), so the demo server and the client limiter agree to the
//! nanosecond. The fixed window (with its classic boundary burst) and the
//! concurrency limit live here. Nothing in this module reads a clock or knows
//! HTTP, so a virtual-time simulator can drive it directly.
//!
//! A policy counts a unit: requests (each costs 1), or tokens or points, whose amounts a
//! request brings as [`UnitCharge`]s: what must fit for it to be admitted, and what it is
//! then charged (more may overdraw the policy into debt, which later requests wait out).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::engine::{BudgetKind, BudgetMeter, BudgetSpec, MAX_CONCURRENCY, Rate, Unit, duration_nanos, format_period};

/// Longest policy name accepted (it appears in headers).
const MAX_NAME_LEN: usize = 40;
/// Per route, idle counting keys are forgotten once this many are tracked.
const MAX_TRACKED_KEYS: usize = 10_000;

/// What one policy enforces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyKind {
    /// `capacity` tokens refilled continuously at `rate` (the engine's GCRA).
    TokenBucket {
        /// The most tokens it holds.
        capacity: u64,
        /// How fast they refill.
        rate: Rate,
    },
    /// At most `limit` per window, windows aligned to the server's epoch: a burst of
    /// `limit` just before a boundary and another just after it both pass.
    FixedWindow {
        /// The most per window.
        limit: u64,
        /// The window's length.
        window: Duration,
    },
    /// At most `limit` in any window of length `window` (the engine's exact sliding window).
    SlidingWindow {
        /// The most in any window.
        limit: u64,
        /// The window's length.
        window: Duration,
    },
    /// At most `limit` requests in flight; a slot is held until the response body is done.
    Concurrency {
        /// The most in flight.
        limit: u64,
    },
}

/// A named policy of a route; the name appears in IETF headers and in error bodies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicySpec {
    /// Its name in headers and error bodies.
    pub name: String,
    /// What it enforces.
    pub kind: PolicyKind,
    /// What it counts: requests, or an amount each request brings (tokens, points).
    pub unit: Unit,
}

/// What a request spends of one unit other than requests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnitCharge {
    /// The unit (tokens, points, ...).
    pub unit: Unit,
    /// What a policy of this unit must hold for the request to be admitted.
    pub needed: u64,
    /// What the request is charged once admitted (above `needed`: into debt).
    pub spent: u64,
}

impl PolicySpec {
    /// A policy counting requests.
    pub fn new(name: impl Into<String>, kind: PolicyKind) -> Self {
        Self { name: name.into(), kind, unit: Unit::Requests }
    }

    /// The same policy counting `unit`.
    pub fn counting(mut self, unit: Unit) -> Self {
        self.unit = unit;
        self
    }

    /// A short description such as `bucket 5 @ 5/1s`, `fixed 100/1m`, `sliding 2/1s`,
    /// `concurrency 3`, `bucket 1000 points @ 50/1s`.
    pub fn describe(&self) -> String {
        let unit = match &self.unit {
            Unit::Requests => String::new(),
            unit => format!(" {unit}"),
        };
        match self.kind {
            PolicyKind::TokenBucket { capacity, rate } => format!("bucket {capacity}{unit} @ {rate}"),
            PolicyKind::FixedWindow { limit, window } => format!("fixed {limit}{unit}/{}", format_period(window)),
            PolicyKind::SlidingWindow { limit, window } => format!("sliding {limit}{unit}/{}", format_period(window)),
            PolicyKind::Concurrency { limit } => format!("concurrency {limit}"),
        }
    }

    /// What a request with `charges` needs and spends of this policy: (needed, spent).
    fn amounts(&self, charges: &[UnitCharge]) -> (u64, u64) {
        match &self.unit {
            Unit::Requests => (1, 1),
            unit => charges.iter().find(|charge| charge.unit == *unit).map_or((0, 0), |c| (c.needed, c.spent)),
        }
    }

    /// Refuses names that cannot appear in a header and limits that would never (or always) admit.
    pub fn validate(&self) -> Result<(), String> {
        let name = &self.name;
        let name_ok = !name.is_empty()
            && name.len() <= MAX_NAME_LEN
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
        if !name_ok {
            return Err(format!(
                "policy name {name:?} must be 1 to {MAX_NAME_LEN} letters, digits, '-', '_' or '.' (it is sent in headers)"
            ));
        }
        let budget = match self.kind {
            PolicyKind::TokenBucket { capacity, rate } => BudgetSpec::token_bucket(name, capacity, rate).map(drop),
            PolicyKind::FixedWindow { limit, window } | PolicyKind::SlidingWindow { limit, window } => {
                BudgetSpec::sliding_window(name, limit, window).map(drop)
            }
            PolicyKind::Concurrency { .. } if self.unit != Unit::Requests => {
                return Err(format!("policy '{name}': a concurrency limit counts requests, not {}", self.unit));
            }
            PolicyKind::Concurrency { limit } => {
                if limit == 0 {
                    return Err(format!("policy '{name}': a concurrency limit of 0 would never let a request through"));
                }
                if limit > MAX_CONCURRENCY as u64 {
                    return Err(format!("policy '{name}': a concurrency limit of {limit} is above {MAX_CONCURRENCY}"));
                }
                Ok(())
            }
        };
        budget.map_err(|err| format!("policy '{name}': {err}"))
    }

    /// The period after which a spent quota is fully restored: the window, or the bucket's time to refill from empty.
    pub fn period(&self) -> Option<Duration> {
        match self.kind {
            PolicyKind::TokenBucket { capacity, rate } => {
                let nanos = u128::from(capacity) * rate.per().as_nanos() / u128::from(rate.amount().max(1));
                Some(Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX)))
            }
            PolicyKind::FixedWindow { window, .. } | PolicyKind::SlidingWindow { window, .. } => Some(window),
            PolicyKind::Concurrency { .. } => None,
        }
    }

    /// The most this policy admits at once.
    pub fn limit(&self) -> u64 {
        match self.kind {
            PolicyKind::TokenBucket { capacity: limit, .. }
            | PolicyKind::FixedWindow { limit, .. }
            | PolicyKind::SlidingWindow { limit, .. }
            | PolicyKind::Concurrency { limit } => limit,
        }
    }
}

/// One policy's state as of a decision: what the rate-limit headers report.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyReport {
    /// The policy's name.
    pub name: String,
    /// The quota (bucket capacity, window limit, concurrency limit).
    pub limit: u64,
    /// What is left after this request (whole units).
    pub remaining: u64,
    /// Time until the quota is fully restored (zero when it is full; always zero for concurrency).
    pub reset: Duration,
    /// The policy's period ([`PolicySpec::period`]); `None` for concurrency.
    pub window: Option<Duration>,
    /// Whether this policy alone would have refused the request.
    pub denied: bool,
    /// A concurrency limit rather than a quota over time.
    pub concurrency: bool,
    /// What the policy counts.
    pub unit: Unit,
}

impl From<&PolicyReport> for crate::http::headers::PublishedPolicy {
    fn from(report: &PolicyReport) -> Self {
        Self {
            name: report.name.clone(),
            limit: report.limit,
            remaining: report.remaining,
            reset: report.reset,
            window: report.window,
            concurrency: report.concurrency,
        }
    }
}

/// The answer for one request.
#[derive(Debug)]
pub struct Decision {
    /// Every policy allowed it, and it was charged to all of them.
    pub admitted: bool,
    /// One report per policy, in the route's order.
    pub policies: Vec<PolicyReport>,
    /// On denial: whole seconds until every policy would allow it, rounded up (at least 1).
    pub retry_after: Option<u64>,
    /// On denial: the earliest instant (ns) all time-based policies allow it, when it is known.
    pub ready_at: Option<u64>,
    /// Held while the request is in flight; dropping it frees its concurrency slots.
    pub guard: ConcurrencyGuard,
}

impl Decision {
    /// The first policy that refused the request.
    pub fn denied_by(&self) -> Option<&PolicyReport> {
        self.policies.iter().find(|p| p.denied)
    }
}

/// Concurrency slots taken by an admitted request, returned when it is dropped.
#[derive(Debug, Default)]
pub struct ConcurrencyGuard {
    slots: Vec<Arc<AtomicU64>>,
}

impl ConcurrencyGuard {
    /// Whether the request holds any slot (its route has a concurrency policy).
    pub fn holds_slots(&self) -> bool {
        !self.slots.is_empty()
    }
}

impl Drop for ConcurrencyGuard {
    fn drop(&mut self) {
        for slot in &self.slots {
            slot.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// A fixed window aligned to the server's epoch: window `i` is `[i·W, (i+1)·W)`.
#[derive(Debug)]
struct FixedWindow {
    limit: u64,
    window: u64,
    index: u64,
    count: u64,
}

impl FixedWindow {
    fn new(limit: u64, window: Duration) -> Self {
        Self { limit, window: duration_nanos(window).max(1), index: 0, count: 0 }
    }

    fn roll(&mut self, now: u64) {
        let index = now / self.window;
        if index != self.index {
            self.index = index;
            self.count = 0;
        }
    }

    fn window_end(&self) -> u64 {
        self.index.saturating_add(1).saturating_mul(self.window)
    }

    fn ready_at(&mut self, needed: u64, now: u64) -> u64 {
        self.roll(now);
        if self.count.saturating_add(needed) <= self.limit { now } else { self.window_end() }
    }
}

#[derive(Debug)]
enum PolicyState {
    Budget(BudgetMeter),
    Fixed(FixedWindow),
    Concurrency { limit: u64, in_flight: Arc<AtomicU64> },
}

impl PolicyState {
    fn new(kind: &PolicyKind) -> Self {
        match *kind {
            PolicyKind::TokenBucket { capacity, rate } => {
                Self::Budget(BudgetMeter::new(&BudgetKind::TokenBucket { capacity, refill: rate }))
            }
            PolicyKind::SlidingWindow { limit, window } => {
                Self::Budget(BudgetMeter::new(&BudgetKind::SlidingWindow { limit, window }))
            }
            PolicyKind::FixedWindow { limit, window } => Self::Fixed(FixedWindow::new(limit, window)),
            PolicyKind::Concurrency { limit } => Self::Concurrency { limit, in_flight: Arc::new(AtomicU64::new(0)) },
        }
    }

    /// When `needed` more fits: `Some(now)` if it fits now, `None` if no instant is known (concurrency).
    fn ready_at(&mut self, needed: u64, now: u64) -> Option<u64> {
        match self {
            Self::Budget(budget) => Some(budget.ready_at(needed, now)),
            Self::Fixed(fixed) => Some(fixed.ready_at(needed, now)),
            Self::Concurrency { limit, in_flight } => (in_flight.load(Ordering::Acquire) < *limit).then_some(now),
        }
    }

    /// A state that behaves exactly like a fresh one, so it can be forgotten.
    fn is_idle(&mut self, spec: &PolicySpec, now: u64) -> bool {
        match self {
            Self::Budget(budget) => budget.ready_at(spec.limit(), now) <= now,
            Self::Fixed(fixed) => {
                fixed.roll(now);
                fixed.count == 0
            }
            Self::Concurrency { in_flight, .. } => in_flight.load(Ordering::Acquire) == 0,
        }
    }

    fn report(&mut self, spec: &PolicySpec, now: u64, denied: bool) -> PolicyReport {
        let limit = spec.limit();
        let (remaining, reset, concurrency) = match self {
            Self::Budget(budget) => {
                // Small epsilon: a bucket holding exactly 4 tokens may compute as 3.9999999.
                let remaining = (budget.available(now) + 1e-9).floor().max(0.0) as u64;
                let full_at = budget.ready_at(limit, now);
                (remaining, full_at.saturating_sub(now), false)
            }
            Self::Fixed(fixed) => {
                fixed.roll(now);
                let reset = if fixed.count == 0 { 0 } else { fixed.window_end().saturating_sub(now) };
                (fixed.limit.saturating_sub(fixed.count), reset, false)
            }
            Self::Concurrency { limit, in_flight } => {
                (limit.saturating_sub(in_flight.load(Ordering::Acquire)), 0, true)
            }
        };
        PolicyReport {
            name: spec.name.clone(),
            limit,
            remaining: remaining.min(limit),
            reset: Duration::from_nanos(reset),
            window: spec.period(),
            denied,
            concurrency,
            unit: spec.unit.clone(),
        }
    }
}

#[derive(Debug)]
struct KeyState {
    states: Vec<PolicyState>,
}

impl KeyState {
    fn new(specs: &[PolicySpec]) -> Self {
        Self { states: specs.iter().map(|spec| PolicyState::new(&spec.kind)).collect() }
    }

    fn is_idle(&mut self, specs: &[PolicySpec], now: u64) -> bool {
        self.states.iter_mut().zip(specs).all(|(state, spec)| state.is_idle(spec, now))
    }
}

/// The policies of one route and their state per counting key.
///
/// A request is admitted only if every policy allows it; it is then charged to
/// all of them. A refused request is charged nothing.
#[derive(Debug)]
pub struct RoutePolicies {
    specs: Vec<PolicySpec>,
    /// `None` is the global counter; `Some(key)` one API key's counters.
    keys: HashMap<Option<String>, KeyState>,
}

impl RoutePolicies {
    /// Fresh counters for these policies (everything full, nothing in flight).
    pub fn new(specs: Vec<PolicySpec>) -> Self {
        Self { specs, keys: HashMap::new() }
    }

    /// The policies, as given.
    pub fn specs(&self) -> &[PolicySpec] {
        &self.specs
    }

    /// Number of counting keys currently tracked.
    pub fn tracked_keys(&self) -> usize {
        self.keys.len()
    }

    /// Decides one request at `now` (ns since the server's epoch), counted under `key`
    /// (`None` for a route that counts globally).
    pub fn check(&mut self, key: Option<&str>, now: u64) -> Decision {
        self.check_charges(key, now, &[])
    }

    /// [`check`](Self::check) for a request that also spends `charges` (tokens, points): a
    /// policy of such a unit admits it when it holds `needed` and is then charged `spent`.
    pub fn check_charges(&mut self, key: Option<&str>, now: u64, charges: &[UnitCharge]) -> Decision {
        let lookup = key.map(str::to_owned);
        if !self.keys.contains_key(&lookup) && self.keys.len() >= MAX_TRACKED_KEYS {
            let specs = &self.specs;
            self.keys.retain(|_, state| !state.is_idle(specs, now));
        }
        let specs = &self.specs;
        let state = self.keys.entry(lookup).or_insert_with(|| KeyState::new(specs));

        let readiness: Vec<Option<u64>> =
            state.states.iter_mut().zip(specs).map(|(s, spec)| s.ready_at(spec.amounts(charges).0, now)).collect();
        let admitted = readiness.iter().all(|ready| ready.is_some_and(|at| at <= now));

        let mut guard = ConcurrencyGuard::default();
        if admitted {
            for (policy, spec) in state.states.iter_mut().zip(specs) {
                let spent = spec.amounts(charges).1;
                match policy {
                    PolicyState::Budget(budget) => budget.consume(spent, now),
                    PolicyState::Fixed(fixed) => fixed.count = fixed.count.saturating_add(spent),
                    PolicyState::Concurrency { in_flight, .. } => {
                        in_flight.fetch_add(1, Ordering::AcqRel);
                        guard.slots.push(Arc::clone(in_flight));
                    }
                }
            }
        }

        let policies = (state.states.iter_mut().zip(specs).zip(&readiness))
            .map(|((policy, spec), ready)| {
                let denied = !ready.is_some_and(|at| at <= now);
                policy.report(spec, now, denied)
            })
            .collect();

        let (retry_after, ready_at) = if admitted {
            (None, None)
        } else {
            let unknown = readiness.iter().any(Option::is_none);
            let latest = readiness.iter().flatten().copied().max().unwrap_or(now).max(now);
            let wait = latest - now;
            let secs = wait.div_ceil(1_000_000_000).max(1);
            (Some(secs), (!unknown).then_some(latest))
        };
        Decision { admitted, policies, retry_after, ready_at, guard }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;
    const SEC: u64 = 1_000_000_000;

    fn bucket(name: &str, capacity: u64, rate: &str) -> PolicySpec {
        PolicySpec::new(name, PolicyKind::TokenBucket { capacity, rate: rate.parse().unwrap() })
    }

    fn fixed(name: &str, limit: u64, secs: u64) -> PolicySpec {
        PolicySpec::new(name, PolicyKind::FixedWindow { limit, window: Duration::from_secs(secs) })
    }

    fn sliding(name: &str, limit: u64, secs: u64) -> PolicySpec {
        PolicySpec::new(name, PolicyKind::SlidingWindow { limit, window: Duration::from_secs(secs) })
    }

    fn admitted_at(policies: &mut RoutePolicies, key: Option<&str>, now: u64, n: usize) -> usize {
        (0..n).filter(|_| policies.check(key, now).admitted).count()
    }

    #[test]
    fn token_bucket_admits_its_capacity_then_one_per_refill() {
        let mut p = RoutePolicies::new(vec![bucket("burst", 5, "5/1s")]);
        assert_eq!(admitted_at(&mut p, None, 0, 5), 5);
        let sixth = p.check(None, 0);
        assert!(!sixth.admitted);
        assert_eq!(sixth.retry_after, Some(1), "200 ms rounds up to one second");
        assert_eq!(sixth.ready_at, Some(200 * MS));
        assert_eq!(sixth.policies[0].remaining, 0);
        assert!(!p.check(None, 200 * MS - 1).admitted);
        assert!(p.check(None, 200 * MS).admitted);
    }

    #[test]
    fn fixed_window_allows_a_burst_across_the_boundary() {
        let mut p = RoutePolicies::new(vec![fixed("minute", 100, 60)]);
        assert_eq!(admitted_at(&mut p, None, 59_900 * MS, 101), 100);
        let denied = p.check(None, 59_900 * MS);
        assert_eq!(denied.ready_at, Some(60 * SEC));
        assert_eq!(denied.policies[0].reset, Duration::from_millis(100));
        // A new window: another full burst 100 ms later, 200 within 0.1 s.
        assert_eq!(admitted_at(&mut p, None, 60 * SEC, 101), 100);
    }

    #[test]
    fn sliding_window_refuses_the_boundary_burst() {
        let mut p = RoutePolicies::new(vec![sliding("minute", 100, 60)]);
        assert_eq!(admitted_at(&mut p, None, 59_900 * MS, 101), 100);
        assert_eq!(admitted_at(&mut p, None, 60 * SEC, 10), 0);
        let denied = p.check(None, 60 * SEC);
        assert_eq!(denied.ready_at, Some(119_900 * MS));
        assert_eq!(denied.retry_after, Some(60), "59.9 s rounds up");
        assert_eq!(admitted_at(&mut p, None, 119_900 * MS, 101), 100);
    }

    #[test]
    fn stacked_policies_deny_if_either_denies_and_charge_nothing_then() {
        let mut p = RoutePolicies::new(vec![bucket("burst", 5, "5/1s"), fixed("minute", 7, 60)]);
        assert_eq!(admitted_at(&mut p, None, 0, 10), 5, "the bucket denies first");
        let denied = p.check(None, 0);
        assert_eq!(denied.denied_by().map(|r| r.name.as_str()), Some("burst"));
        assert_eq!(denied.policies[1].remaining, 2, "denials did not spend the window");
        assert!(!denied.policies[1].denied);
        // Bucket full again at 1 s; the window has 2 left, so the window denies the third.
        assert_eq!(admitted_at(&mut p, None, SEC, 5), 2);
        let denied = p.check(None, SEC);
        assert_eq!(denied.denied_by().map(|r| r.name.as_str()), Some("minute"));
        assert_eq!(denied.policies[0].remaining, 3, "the bucket was not charged for window denials");
        assert_eq!(denied.retry_after, Some(59));
        assert_eq!(denied.ready_at, Some(60 * SEC));
    }

    #[test]
    fn retry_after_waits_for_every_policy() {
        let mut p = RoutePolicies::new(vec![bucket("burst", 1, "1/1s"), sliding("slow", 1, 10)]);
        assert!(p.check(None, 0).admitted);
        let denied = p.check(None, 0);
        assert_eq!(denied.retry_after, Some(10));
        assert!(denied.policies.iter().all(|r| r.denied));
    }

    #[test]
    fn per_key_counting_keeps_keys_apart() {
        let mut p = RoutePolicies::new(vec![bucket("burst", 2, "1/1s")]);
        assert_eq!(admitted_at(&mut p, Some("alice"), 0, 3), 2);
        assert_eq!(admitted_at(&mut p, Some("bob"), 0, 3), 2);
        assert_eq!(admitted_at(&mut p, None, 0, 3), 2, "the keyless counter is separate too");
        assert_eq!(p.tracked_keys(), 3);
        assert_eq!(admitted_at(&mut p, Some("alice"), 0, 1), 0);
    }

    #[test]
    fn concurrency_slot_is_freed_when_the_guard_drops() {
        let spec = PolicySpec::new("parallel", PolicyKind::Concurrency { limit: 2 });
        let mut p = RoutePolicies::new(vec![spec]);
        let first = p.check(None, 0);
        let second = p.check(None, 0);
        assert!(first.admitted && second.admitted && first.guard.holds_slots());
        assert_eq!(second.policies[0].remaining, 0);
        let third = p.check(None, 0);
        assert!(!third.admitted);
        assert_eq!(third.retry_after, Some(1));
        assert_eq!(third.ready_at, None, "nobody knows when a slot frees");
        drop(third);
        drop(first);
        let fourth = p.check(None, 0);
        assert!(fourth.admitted);
        assert_eq!(fourth.policies[0].remaining, 0);
    }

    #[test]
    fn reports_give_limit_remaining_reset_and_window() {
        let mut p = RoutePolicies::new(vec![bucket("burst", 5, "5/1s"), fixed("minute", 100, 60)]);
        let d = p.check(None, 30 * SEC);
        let burst = &d.policies[0];
        assert_eq!((burst.limit, burst.remaining), (5, 4));
        assert_eq!(burst.reset, Duration::from_millis(200), "one token to refill");
        assert_eq!(burst.window, Some(Duration::from_secs(1)));
        let minute = &d.policies[1];
        assert_eq!((minute.limit, minute.remaining), (100, 99));
        assert_eq!(minute.reset, Duration::from_secs(30));
        assert_eq!(minute.window, Some(Duration::from_secs(60)));
    }

    #[test]
    fn idle_keys_are_forgotten_when_too_many_are_tracked() {
        let mut p = RoutePolicies::new(vec![bucket("burst", 1, "1/1s")]);
        for i in 0..MAX_TRACKED_KEYS {
            p.check(Some(&i.to_string()), 0);
        }
        assert_eq!(p.tracked_keys(), MAX_TRACKED_KEYS);
        // Two seconds later every bucket is full again: the newcomer evicts them all.
        assert!(p.check(Some("new"), 2 * SEC).admitted);
        assert_eq!(p.tracked_keys(), 1);
    }

    #[test]
    fn validation_names_the_policy_and_the_problem() {
        assert!(bucket("burst", 5, "5/1s").validate().is_ok());
        let err = bucket("burst", 0, "5/1s").validate().unwrap_err();
        assert!(err.contains("'burst'") && err.contains("capacity 0"), "{err}");
        assert!(fixed("w", 0, 60).validate().is_err());
        let zero = PolicySpec::new("c", PolicyKind::Concurrency { limit: 0 });
        assert!(zero.validate().is_err());
        assert!(bucket("has space", 1, "1/1s").validate().unwrap_err().contains("letters"));
        assert!(bucket("quote\"", 1, "1/1s").validate().is_err());
    }

    #[test]
    fn descriptions_are_short() {
        assert_eq!(bucket("b", 5, "5/1s").describe(), "bucket 5 @ 5/1s");
        assert_eq!(fixed("f", 100, 60).describe(), "fixed 100/1m");
        assert_eq!(sliding("s", 2, 1).describe(), "sliding 2/1s");
        assert_eq!(bucket("b", 10, "1/1s").period(), Some(Duration::from_secs(10)));
    }
}
