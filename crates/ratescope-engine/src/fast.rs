//! Lock-free admission for the commonest limiter: one token bucket, with or without a
//! concurrency cap.
//!
//! While such a limiter is idle enough (nobody queued, no pause), its bucket lives
//! in one atomic word holding the GCRA "theoretical arrival time" in the bucket's
//! ticks, and an admission is a clock read and a compare-and-swap (a cap is checked on the
//! limiter's atomic in-flight count, which the lock-free path increments before it spends). Whenever the
//! limiter's lock is taken, the word is swapped to [`PARKED`] and its value moved
//! into the locked state, so the locked path and the atomic path never both own
//! the bucket; the lock hands it back on release when the limiter is idle again.

use std::sync::atomic::{AtomicU64, Ordering};

use super::budget::{BudgetKind, reduced_ticks};
use super::config::LimiterConfig;
use super::unit::Unit;

/// The word's value while the locked state owns the bucket.
pub(crate) const PARKED: u64 = u64::MAX;

/// One token bucket's constants in the bucket's own ticks (see `budget::TokenBucket`).
///
/// In declaration order (`repr(C)`): an admission counting requests reads the first 24 bytes
/// ([`HOT_BYTES`]), and `counts_requests` gives `Option<FastBucket>` its tag for free.
#[derive(Debug, Clone, PartialEq, Eq)]
#[repr(C)]
pub(crate) struct FastBucket {
    /// Ticks per nanosecond (a rate whose reduced amount needs more takes the locked path).
    ticks_per_ns: u32,
    /// Whether `unit` is requests, read without looking at the unit.
    counts_requests: bool,
    /// Ticks one unit of request cost spends (the budget's cost per request included).
    step: u64,
    /// The bucket's capacity in ticks.
    tolerance: u64,
    /// What the bucket counts: a request spends its amount of this unit.
    unit: Unit,
}

/// The bytes at the start of a [`FastBucket`] that an admission counting requests reads.
#[cfg(test)]
pub(crate) const HOT_BYTES: usize = std::mem::offset_of!(FastBucket, tolerance) + size_of::<u64>();

impl FastBucket {
    /// The fast parameters of `config`, if it qualifies: exactly one budget, a token bucket,
    /// and tick counts that fit in 64 bits. Its concurrency cap, if any, is not part of them:
    /// the limiter keeps it in an atomic the lock-free path reads.
    pub(crate) fn for_config(config: &LimiterConfig) -> Option<Self> {
        let [spec] = config.budgets.as_slice() else { return None };
        let BudgetKind::TokenBucket { capacity, refill } = spec.kind else { return None };
        let (ticks_per_ns, ticks_per_token) = reduced_ticks(refill.amount(), refill.per().as_nanos());
        Some(Self {
            counts_requests: spec.unit == Unit::Requests,
            unit: spec.unit.clone(),
            ticks_per_ns: u32::try_from(ticks_per_ns).ok()?,
            step: u64::try_from(ticks_per_token.checked_mul(u128::from(spec.cost))?).ok()?,
            tolerance: u64::try_from(ticks_per_token.checked_mul(u128::from(capacity))?).ok()?,
        })
    }

    /// The unit the bucket counts.
    #[inline]
    pub(crate) fn unit(&self) -> &Unit {
        &self.unit
    }

    /// Whether the bucket counts requests.
    #[inline]
    pub(crate) fn counts_requests(&self) -> bool {
        self.counts_requests
    }

    /// Spends `cost` at `now_ns` if the bucket holds it now. `false` means "ask the locked
    /// path": the bucket is parked, empty, or the numbers leave 64 bits.
    pub(crate) fn try_spend(&self, word: &AtomicU64, cost: u64, now_ns: u64) -> bool {
        // A zero cost is an error only the locked path reports.
        let spend = cost.checked_mul(self.step).filter(|spend| *spend > 0);
        let (Some(now), Some(spend)) = (now_ns.checked_mul(u64::from(self.ticks_per_ns)), spend) else {
            return false;
        };
        let mut current = word.load(Ordering::Acquire);
        loop {
            if current == PARKED {
                return false;
            }
            let Some(next) = current.max(now).checked_add(spend).filter(|next| *next != PARKED) else {
                return false;
            };
            if next - now > self.tolerance {
                return false;
            }
            match word.compare_exchange_weak(current, next, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return true,
                Err(actual) => current = actual,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::{BudgetSpec, Rate};

    fn bucket_config(capacity: u64, amount: u64, per: Duration) -> LimiterConfig {
        LimiterConfig::new()
            .with_budget(BudgetSpec::token_bucket("b", capacity, Rate::new(amount, per).unwrap()).unwrap())
    }

    #[test]
    fn only_a_lone_bucket_qualifies_whatever_its_cap() {
        let one = bucket_config(5, 3, Duration::from_secs(1));
        assert!(FastBucket::for_config(&one).is_some());
        let capped = FastBucket::for_config(&one.clone().with_concurrency(4));
        assert_eq!(capped, FastBucket::for_config(&one), "a cap changes nothing of the bucket's constants");
        let two = one.with_budget(BudgetSpec::sliding_window("w", 10, Duration::from_secs(60)).unwrap());
        assert!(FastBucket::for_config(&two).is_none());
        assert!(FastBucket::for_config(&LimiterConfig::new()).is_none());
    }

    #[test]
    fn spends_like_the_locked_bucket_and_refuses_when_empty_or_parked() {
        // Capacity 3 at 3/s: three at once, the fourth a third of a second later.
        let fast = FastBucket::for_config(&bucket_config(3, 3, Duration::from_secs(1))).unwrap();
        let word = AtomicU64::new(0);
        for _ in 0..3 {
            assert!(fast.try_spend(&word, 1, 0));
        }
        assert!(!fast.try_spend(&word, 1, 0));
        assert!(!fast.try_spend(&word, 1, 333_333_333));
        assert!(fast.try_spend(&word, 1, 333_333_334));
        assert!(!fast.try_spend(&word, 4, 10_000_000_000), "more than the capacity never fits");
        assert!(!fast.try_spend(&word, 0, 10_000_000_000), "a zero cost is left to the locked path");
        word.store(PARKED, Ordering::SeqCst);
        assert!(!fast.try_spend(&word, 1, 10_000_000_000));
        assert_eq!(word.load(Ordering::SeqCst), PARKED, "a parked word is left alone");
    }
}
