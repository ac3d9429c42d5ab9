//! The retry policy: after each attempt, decide whether to retry, how long to wait, or why to give up.
//!
//! This is pure policy. It holds no HTTP client and never sleeps: the client reports how an attempt
//! ended ([`Outcome`]) and gets back a [`Decision`]. Randomness comes from the caller's RNG so tests
//! (and simulations) can be deterministic.
//!
//! The rules, in the order they are applied by [`RetryPolicy::decide`]:
//!
//! 1. A status not in [`RetryPolicy::retry_statuses`] is final: [`Decision::Done`] (the caller decides
//!    whether a 404 is a failure). A connection error or timeout is retryable only when
//!    [`RetryPolicy::retry_connection_errors`] is set, else [`GiveUpReason::NotRetryable`].
//! 2. A method that is not idempotent (RFC 9110 §9.2.2: only GET, HEAD, OPTIONS, TRACE, PUT and DELETE
//!    are) is not retried unless [`RetryPolicy::retry_non_idempotent`]: [`GiveUpReason::NotIdempotent`].
//! 3. After `max_attempts` attempts: [`GiveUpReason::AttemptsExhausted`].
//! 4. A `Retry-After` longer than [`RetryPolicy::max_retry_after`] fails at once
//!    ([`GiveUpReason::RetryAfterTooLong`]) rather than hanging; otherwise it is honoured exactly.
//! 5. Otherwise the delay is the exponential backoff `min(cap, base * 2^(attempt-1))` with [`Jitter`].

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use rand::Rng;
use serde::{Deserialize, Serialize};

/// How randomness is applied to the exponential backoff (see the AWS architecture blog,
/// "Exponential Backoff And Jitter").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Jitter {
    /// Uniform in `[0, backoff]`.
    #[default]
    Full,
    /// `backoff/2` plus uniform in `[0, backoff/2]`.
    Equal,
    /// `min(cap, uniform [base, previous_delay * 3])`, independent of the attempt number.
    Decorrelated,
    /// Exactly the backoff.
    None,
}

impl Jitter {
    /// The lowercase name, as accepted by [`FromStr`] and serde.
    pub fn as_str(self) -> &'static str {
        match self {
            Jitter::Full => "full",
            Jitter::Equal => "equal",
            Jitter::Decorrelated => "decorrelated",
            Jitter::None => "none",
        }
    }
}

impl fmt::Display for Jitter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Jitter {
    type Err = RetryConfigError;

    /// Parses `full`, `equal`, `decorrelated` or `none` (ASCII case-insensitive, surrounding spaces ignored).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        [Jitter::Full, Jitter::Equal, Jitter::Decorrelated, Jitter::None]
            .into_iter()
            .find(|j| j.as_str().eq_ignore_ascii_case(t))
            .ok_or_else(|| RetryConfigError::UnknownJitter(s.to_string()))
    }
}

/// A setting of [`RetryPolicy`] that makes no sense, or a jitter name that does not exist.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RetryConfigError {
    /// `max_attempts` of zero.
    #[error("max_attempts must be at least 1 (1 means never retry)")]
    ZeroAttempts,
    /// More attempts than the policy allows.
    #[error("max_attempts is {0}, more than the allowed maximum of {max}", max = RetryPolicy::MAX_ATTEMPTS_LIMIT)]
    TooManyAttempts(u32),
    /// A base backoff of zero.
    #[error("the base backoff must be greater than zero")]
    ZeroBase,
    /// A backoff cap below the base.
    #[error("the backoff cap ({}) is smaller than the base backoff ({})", fmt_duration(*cap), fmt_duration(*base))]
    CapBelowBase {
        /// The cap given.
        cap: Duration,
        /// The base given.
        base: Duration,
    },
    /// A `max_retry_after` of zero.
    #[error("max_retry_after must be greater than zero (to never honour Retry-After, remove the statuses instead)")]
    ZeroMaxRetryAfter,
    /// A jitter name that is not full, equal, decorrelated or none.
    #[error("unknown jitter {0:?}: expected one of full, equal, decorrelated, none")]
    UnknownJitter(String),
}

/// When and how a request is retried. [`RetryPolicy::decide`] applies it after each attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Total attempts including the first; 1 means never retry.
    pub max_attempts: u32,
    /// The backoff before the first retry (before jitter).
    pub base: Duration,
    /// The computed backoff never exceeds this (a server's `Retry-After` may).
    pub cap: Duration,
    /// How randomness is applied to the backoff.
    pub jitter: Jitter,
    /// The longest `Retry-After` honoured; a longer one gives up at once.
    pub max_retry_after: Duration,
    /// The response statuses that are retried.
    pub retry_statuses: Vec<u16>,
    /// Whether connection errors and timeouts are retried.
    pub retry_connection_errors: bool,
    /// Whether non-idempotent methods (POST, PATCH, ...) are retried.
    pub retry_non_idempotent: bool,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 5,
            base: Duration::from_millis(300),
            cap: Duration::from_secs(20),
            jitter: Jitter::Full,
            max_retry_after: Duration::from_secs(5 * 60),
            retry_statuses: vec![429, 503],
            retry_connection_errors: false,
            retry_non_idempotent: false,
        }
    }
}

/// How an attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome<'a> {
    /// A response arrived, with its `Retry-After` already parsed into a delay from now.
    Status {
        /// The status.
        status: u16,
        /// Its `Retry-After` as a delay from now, when it had one.
        retry_after: Option<Duration>,
    },
    /// The request failed before a response (DNS, connect, TLS, reset, ...).
    ConnectionError {
        /// The error, in words.
        message: &'a str,
    },
    /// No response within the client's timeout.
    Timeout,
}

/// Why a retry waits as long as it does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RetryReason {
    /// The server said so with `Retry-After`; the delay is exactly its value.
    RetryAfter,
    /// The computed exponential backoff with jitter.
    Backoff,
}

/// What the client should do after an attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Wait `delay`, then send the request again.
    Retry {
        /// How long to wait.
        delay: Duration,
        /// What chose the delay.
        reason: RetryReason,
    },
    /// Stop and report the failure.
    GiveUp(GiveUpReason),
    /// The outcome is final and not one to retry (e.g. 200, 404); the caller judges `>= 400` itself.
    Done,
}

/// Why the policy stopped retrying.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GiveUpReason {
    /// `attempts` attempts were made; `last` names the last status or error, e.g. "429 Too Many Requests".
    AttemptsExhausted {
        /// Attempts made.
        attempts: u32,
        /// The last status or error.
        last: String,
    },
    /// The server asked to wait longer than `max_retry_after`: fail at once rather than hang.
    RetryAfterTooLong {
        /// The wait the server asked for.
        requested: Duration,
        /// The policy's `max_retry_after`.
        max: Duration,
    },
    /// The method is not idempotent and the policy does not retry such methods.
    NotIdempotent {
        /// The method.
        method: String,
    },
    /// The failure is of a kind the policy does not retry (a connection error or timeout when those are off).
    NotRetryable,
}

impl fmt::Display for GiveUpReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GiveUpReason::AttemptsExhausted { attempts, last } => {
                let plural = if *attempts == 1 { "" } else { "s" };
                write!(f, "gave up after {attempts} attempt{plural}; last: {last}")
            }
            GiveUpReason::RetryAfterTooLong { requested, max } => write!(
                f,
                "the server asked to retry in {}, which is longer than the {} maximum",
                fmt_duration(*requested),
                fmt_duration(*max)
            ),
            GiveUpReason::NotIdempotent { method } => write!(
                f,
                "not retrying {method}: the method is not idempotent and retrying non-idempotent requests is off"
            ),
            GiveUpReason::NotRetryable => f.write_str("the failure is not one the retry policy retries"),
        }
    }
}

impl RetryPolicy {
    /// The largest accepted `max_attempts`.
    pub const MAX_ATTEMPTS_LIMIT: u32 = 100;

    /// Checks the settings; [`decide`](Self::decide) does not, and stays total (never panics) on any of them.
    pub fn validate(&self) -> Result<(), RetryConfigError> {
        if self.max_attempts == 0 {
            return Err(RetryConfigError::ZeroAttempts);
        }
        if self.max_attempts > Self::MAX_ATTEMPTS_LIMIT {
            return Err(RetryConfigError::TooManyAttempts(self.max_attempts));
        }
        if self.base.is_zero() {
            return Err(RetryConfigError::ZeroBase);
        }
        if self.cap < self.base {
            return Err(RetryConfigError::CapBelowBase { cap: self.cap, base: self.base });
        }
        if self.max_retry_after.is_zero() {
            return Err(RetryConfigError::ZeroMaxRetryAfter);
        }
        Ok(())
    }

    /// A policy that never retries (`max_attempts` 1), otherwise the defaults.
    pub fn none() -> Self {
        Self { max_attempts: 1, ..Self::default() }
    }

    /// What to do after attempt number `attempt` (1-based; 0 is treated as 1) ended with `outcome`.
    ///
    /// `previous_delay` is the delay actually waited before this attempt (used by
    /// [`Jitter::Decorrelated`]; `None` for the first attempt, which then defaults to `base`).
    pub fn decide(
        &self,
        attempt: u32,
        outcome: &Outcome<'_>,
        method: &http::Method,
        previous_delay: Option<Duration>,
        rng: &mut impl Rng,
    ) -> Decision {
        let attempt = attempt.max(1);
        let retry_after = match *outcome {
            Outcome::Status { status, retry_after } => {
                if !self.retry_statuses.contains(&status) {
                    return Decision::Done;
                }
                retry_after
            }
            Outcome::ConnectionError { .. } | Outcome::Timeout => {
                if !self.retry_connection_errors {
                    return Decision::GiveUp(GiveUpReason::NotRetryable);
                }
                None
            }
        };
        if !method.is_idempotent() && !self.retry_non_idempotent {
            return Decision::GiveUp(GiveUpReason::NotIdempotent { method: method.as_str().to_string() });
        }
        if attempt >= self.max_attempts {
            return Decision::GiveUp(GiveUpReason::AttemptsExhausted { attempts: attempt, last: describe(outcome) });
        }
        if let Some(requested) = retry_after {
            if requested > self.max_retry_after {
                return Decision::GiveUp(GiveUpReason::RetryAfterTooLong { requested, max: self.max_retry_after });
            }
            return Decision::Retry { delay: requested, reason: RetryReason::RetryAfter };
        }
        Decision::Retry { delay: self.backoff(attempt, previous_delay, rng), reason: RetryReason::Backoff }
    }

    /// The backoff before retrying after attempt `attempt`, with jitter applied.
    pub fn backoff(&self, attempt: u32, previous_delay: Option<Duration>, rng: &mut impl Rng) -> Duration {
        match self.jitter {
            Jitter::None => self.raw_backoff(attempt),
            Jitter::Full => uniform(rng, Duration::ZERO, self.raw_backoff(attempt)),
            Jitter::Equal => {
                let raw = self.raw_backoff(attempt);
                let half = raw / 2;
                half + uniform(rng, Duration::ZERO, raw - half)
            }
            Jitter::Decorrelated => {
                let prev = previous_delay.unwrap_or(self.base);
                let high = prev.checked_mul(3).unwrap_or(Duration::MAX).max(self.base);
                uniform(rng, self.base, high).min(self.cap)
            }
        }
    }

    /// `min(cap, base * 2^(attempt-1))` without jitter; saturating, so any attempt number is safe.
    pub fn raw_backoff(&self, attempt: u32) -> Duration {
        let mut value = self.base.min(self.cap);
        let mut doublings = attempt.saturating_sub(1);
        // Each step multiplies by up to 2^31, so a nonzero value reaches any cap within four steps.
        while doublings > 0 && !value.is_zero() && value < self.cap {
            let step = doublings.min(31);
            value = value.checked_mul(1u32 << step).map_or(self.cap, |v| v.min(self.cap));
            doublings -= step;
        }
        value
    }
}

/// Uniform in `[low, high]` (inclusive) at nanosecond resolution; `low` when `high <= low`.
fn uniform(rng: &mut impl Rng, low: Duration, high: Duration) -> Duration {
    if high <= low {
        return low;
    }
    let nanos = rng.random_range(low.as_nanos()..=high.as_nanos());
    let secs = u64::try_from(nanos / 1_000_000_000).unwrap_or(u64::MAX);
    // The remainder is below 10^9, so it fits in a u32.
    Duration::new(secs, (nanos % 1_000_000_000) as u32)
}

/// Names an outcome for [`GiveUpReason::AttemptsExhausted`]: "429 Too Many Requests", "timeout", ...
fn describe(outcome: &Outcome<'_>) -> String {
    match outcome {
        Outcome::Status { status, .. } => {
            match http::StatusCode::from_u16(*status).ok().and_then(|s| s.canonical_reason()) {
                Some(reason) => format!("{status} {reason}"),
                None => status.to_string(),
            }
        }
        Outcome::ConnectionError { message } => format!("connection error: {message}"),
        Outcome::Timeout => "timeout".to_string(),
    }
}

fn fmt_duration(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Method;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    const DRAWS: usize = 10_000;

    fn rng() -> StdRng {
        StdRng::seed_from_u64(0x5eed_1234)
    }

    fn status(status: u16) -> Outcome<'static> {
        Outcome::Status { status, retry_after: None }
    }

    fn policy(jitter: Jitter) -> RetryPolicy {
        RetryPolicy { jitter, max_attempts: 100, ..RetryPolicy::default() }
    }

    fn delay_of(d: Decision) -> (Duration, RetryReason) {
        match d {
            Decision::Retry { delay, reason } => (delay, reason),
            other => panic!("expected a retry, got {other:?}"),
        }
    }

    #[test]
    fn defaults_are_as_documented_and_valid() {
        let p = RetryPolicy::default();
        assert_eq!(p.max_attempts, 5);
        assert_eq!(p.base, Duration::from_millis(300));
        assert_eq!(p.cap, Duration::from_secs(20));
        assert_eq!(p.jitter, Jitter::Full);
        assert_eq!(p.max_retry_after, Duration::from_secs(300));
        assert_eq!(p.retry_statuses, vec![429, 503]);
        assert!(!p.retry_connection_errors);
        assert!(!p.retry_non_idempotent);
        assert_eq!(p.validate(), Ok(()));
        assert_eq!(RetryPolicy::none().max_attempts, 1);
        assert_eq!(RetryPolicy::none().validate(), Ok(()));
    }

    #[test]
    fn raw_backoff_doubles_then_caps() {
        let p = policy(Jitter::None);
        assert_eq!(p.raw_backoff(1), Duration::from_millis(300));
        assert_eq!(p.raw_backoff(2), Duration::from_millis(600));
        assert_eq!(p.raw_backoff(3), Duration::from_millis(1200));
        assert_eq!(p.raw_backoff(7), Duration::from_millis(19_200));
        assert_eq!(p.raw_backoff(8), Duration::from_secs(20));
        assert_eq!(p.raw_backoff(0), Duration::from_millis(300));
    }

    #[test]
    fn cap_holds_at_huge_attempt_numbers_without_overflow() {
        let mut r = rng();
        for jitter in [Jitter::Full, Jitter::Equal, Jitter::Decorrelated, Jitter::None] {
            let p = policy(jitter);
            for attempt in [33, 64, 65, 1000, u32::MAX] {
                assert_eq!(p.raw_backoff(attempt), p.cap, "{jitter} attempt {attempt}");
                let d = p.backoff(attempt, Some(Duration::MAX), &mut r);
                assert!(d <= p.cap, "{jitter} attempt {attempt}: {d:?}");
            }
        }
        // A tiny base with a huge cap needs more than 32 doublings: still exact, still capped.
        let p = RetryPolicy {
            base: Duration::from_nanos(1),
            cap: Duration::from_secs(1 << 40),
            jitter: Jitter::None,
            ..RetryPolicy::default()
        };
        assert_eq!(p.raw_backoff(41), Duration::from_nanos(1 << 40));
        assert_eq!(p.raw_backoff(1000), Duration::from_secs(1 << 40));
        let p = RetryPolicy { cap: Duration::MAX, ..p };
        assert_eq!(p.raw_backoff(u32::MAX), Duration::MAX);
    }

    #[test]
    fn decide_at_attempt_1000_is_capped() {
        let p = RetryPolicy { max_attempts: u32::MAX, jitter: Jitter::None, ..RetryPolicy::default() };
        let d = p.decide(1000, &status(503), &Method::GET, None, &mut rng());
        assert_eq!(d, Decision::Retry { delay: p.cap, reason: RetryReason::Backoff });
    }

    #[test]
    fn full_jitter_stays_within_zero_and_raw() {
        let p = policy(Jitter::Full);
        let mut r = rng();
        for attempt in 1..=10 {
            let raw = p.raw_backoff(attempt);
            let draws: Vec<_> = (0..DRAWS).map(|_| p.backoff(attempt, None, &mut r)).collect();
            assert!(draws.iter().all(|d| *d <= raw), "attempt {attempt}");
            // Spread over the whole range, not stuck at one end.
            assert!(draws.iter().any(|d| *d < raw / 4), "attempt {attempt}");
            assert!(draws.iter().any(|d| *d > raw * 3 / 4), "attempt {attempt}");
        }
    }

    #[test]
    fn equal_jitter_stays_within_half_raw_and_raw() {
        let p = policy(Jitter::Equal);
        let mut r = rng();
        for attempt in 1..=10 {
            let raw = p.raw_backoff(attempt);
            let draws: Vec<_> = (0..DRAWS).map(|_| p.backoff(attempt, None, &mut r)).collect();
            assert!(draws.iter().all(|d| *d >= raw / 2 && *d <= raw), "attempt {attempt}");
            assert!(draws.iter().any(|d| *d < raw * 5 / 8), "attempt {attempt}");
            assert!(draws.iter().any(|d| *d > raw * 7 / 8), "attempt {attempt}");
        }
    }

    #[test]
    fn decorrelated_jitter_stays_within_base_and_three_times_previous() {
        let p = policy(Jitter::Decorrelated);
        let mut r = rng();
        for prev_ms in [100, 300, 1000, 5000, 9000, 60_000] {
            let prev = Duration::from_millis(prev_ms);
            let high = (prev * 3).min(p.cap).max(p.base);
            for _ in 0..DRAWS {
                let d = p.backoff(1, Some(prev), &mut r);
                assert!(d >= p.base && d <= high, "prev {prev:?}: {d:?}");
            }
        }
        // No previous delay: defaults to base, so within [base, 3*base].
        for _ in 0..DRAWS {
            let d = p.backoff(1, None, &mut r);
            assert!(d >= p.base && d <= p.base * 3, "{d:?}");
        }
        // A chain fed back into itself never escapes [base, cap].
        let mut prev = None;
        for _ in 0..DRAWS {
            let d = p.backoff(1, prev, &mut r);
            assert!(d >= p.base && d <= p.cap, "{d:?}");
            prev = Some(d);
        }
    }

    #[test]
    fn no_jitter_is_exact() {
        let p = policy(Jitter::None);
        let mut r = rng();
        for attempt in 1..=12 {
            for _ in 0..100 {
                assert_eq!(p.backoff(attempt, None, &mut r), p.raw_backoff(attempt));
            }
        }
    }

    #[test]
    fn seeded_rng_is_deterministic() {
        let p = policy(Jitter::Full);
        let a: Vec<_> = {
            let mut r = rng();
            (1..=20).map(|n| p.decide(n, &status(429), &Method::GET, None, &mut r)).collect()
        };
        let b: Vec<_> = {
            let mut r = rng();
            (1..=20).map(|n| p.decide(n, &status(429), &Method::GET, None, &mut r)).collect()
        };
        assert_eq!(a, b);
    }

    #[test]
    fn retry_after_wins_exactly() {
        let p = policy(Jitter::Full);
        let mut r = rng();
        // Longer than the cap, still honoured exactly (no jitter).
        let wait = Duration::from_secs(42);
        let outcome = Outcome::Status { status: 429, retry_after: Some(wait) };
        for attempt in 1..10 {
            assert_eq!(
                delay_of(p.decide(attempt, &outcome, &Method::GET, None, &mut r)),
                (wait, RetryReason::RetryAfter)
            );
        }
        // Zero means retry immediately.
        let outcome = Outcome::Status { status: 503, retry_after: Some(Duration::ZERO) };
        assert_eq!(
            delay_of(p.decide(1, &outcome, &Method::GET, None, &mut r)),
            (Duration::ZERO, RetryReason::RetryAfter)
        );
        // Exactly the maximum is still honoured.
        let outcome = Outcome::Status { status: 503, retry_after: Some(p.max_retry_after) };
        assert_eq!(
            delay_of(p.decide(1, &outcome, &Method::GET, None, &mut r)),
            (p.max_retry_after, RetryReason::RetryAfter)
        );
    }

    #[test]
    fn retry_after_on_a_non_retryable_status_is_ignored() {
        let p = RetryPolicy::default();
        let outcome = Outcome::Status { status: 500, retry_after: Some(Duration::from_secs(1)) };
        assert_eq!(p.decide(1, &outcome, &Method::GET, None, &mut rng()), Decision::Done);
    }

    #[test]
    fn retry_after_above_maximum_gives_up_at_once() {
        let p = RetryPolicy::default();
        let requested = Duration::from_secs(1_000_000_000_000);
        let outcome = Outcome::Status { status: 429, retry_after: Some(requested) };
        let d = p.decide(1, &outcome, &Method::GET, None, &mut rng());
        let reason = GiveUpReason::RetryAfterTooLong { requested, max: Duration::from_secs(300) };
        assert_eq!(d, Decision::GiveUp(reason.clone()));
        let text = reason.to_string();
        assert!(text.starts_with("the server asked to retry in 31688years 1month 1day 15h 13m 4s,"), "{text}");
        assert!(text.ends_with(", which is longer than the 5m maximum"), "{text}");

        let just_over = Duration::from_secs(301);
        let outcome = Outcome::Status { status: 503, retry_after: Some(just_over) };
        let d = p.decide(1, &outcome, &Method::GET, None, &mut rng());
        assert_eq!(
            d,
            Decision::GiveUp(GiveUpReason::RetryAfterTooLong { requested: just_over, max: p.max_retry_after })
        );
        assert_eq!(
            GiveUpReason::RetryAfterTooLong { requested: just_over, max: p.max_retry_after }.to_string(),
            "the server asked to retry in 5m 1s, which is longer than the 5m maximum"
        );
    }

    #[test]
    fn attempts_exhausted_names_the_last_status() {
        let p = RetryPolicy::default();
        let mut r = rng();
        for attempt in 1..5 {
            assert!(matches!(p.decide(attempt, &status(429), &Method::GET, None, &mut r), Decision::Retry { .. }));
        }
        let d = p.decide(5, &status(429), &Method::GET, None, &mut r);
        let reason = GiveUpReason::AttemptsExhausted { attempts: 5, last: "429 Too Many Requests".to_string() };
        assert_eq!(d, Decision::GiveUp(reason.clone()));
        assert_eq!(reason.to_string(), "gave up after 5 attempts; last: 429 Too Many Requests");

        let d = p.decide(5, &status(503), &Method::GET, None, &mut r);
        assert_eq!(
            d,
            Decision::GiveUp(GiveUpReason::AttemptsExhausted { attempts: 5, last: "503 Service Unavailable".into() })
        );
        // Retry-After does not extend the attempt budget.
        let outcome = Outcome::Status { status: 429, retry_after: Some(Duration::from_secs(1)) };
        assert!(matches!(
            p.decide(5, &outcome, &Method::GET, None, &mut r),
            Decision::GiveUp(GiveUpReason::AttemptsExhausted { attempts: 5, .. })
        ));
    }

    #[test]
    fn attempts_exhausted_names_errors_and_unknown_statuses() {
        let p = RetryPolicy {
            max_attempts: 1,
            retry_connection_errors: true,
            retry_statuses: vec![599],
            ..RetryPolicy::default()
        };
        let mut r = rng();
        let give_up = |d: Decision| match d {
            Decision::GiveUp(reason) => reason.to_string(),
            other => panic!("expected give up, got {other:?}"),
        };
        assert_eq!(
            give_up(p.decide(
                1,
                &Outcome::ConnectionError { message: "connection refused" },
                &Method::GET,
                None,
                &mut r
            )),
            "gave up after 1 attempt; last: connection error: connection refused"
        );
        assert_eq!(
            give_up(p.decide(1, &Outcome::Timeout, &Method::GET, None, &mut r)),
            "gave up after 1 attempt; last: timeout"
        );
        assert_eq!(
            give_up(p.decide(1, &status(599), &Method::GET, None, &mut r)),
            "gave up after 1 attempt; last: 599"
        );
    }

    #[test]
    fn none_policy_never_retries() {
        let p = RetryPolicy::none();
        assert!(matches!(
            p.decide(1, &status(429), &Method::GET, None, &mut rng()),
            Decision::GiveUp(GiveUpReason::AttemptsExhausted { attempts: 1, .. })
        ));
    }

    #[test]
    fn post_and_patch_are_not_retried_unless_opted_in() {
        let p = RetryPolicy::default();
        let mut r = rng();
        for method in [Method::POST, Method::PATCH] {
            let d = p.decide(1, &status(503), &method, None, &mut r);
            let reason = GiveUpReason::NotIdempotent { method: method.to_string() };
            assert_eq!(d, Decision::GiveUp(reason.clone()));
            assert!(reason.to_string().starts_with(&format!("not retrying {method}: ")));
            // A non-retryable outcome is still just Done.
            assert_eq!(p.decide(1, &status(201), &method, None, &mut r), Decision::Done);
        }
        for method in [Method::GET, Method::HEAD, Method::OPTIONS, Method::TRACE, Method::PUT, Method::DELETE] {
            assert!(matches!(p.decide(1, &status(503), &method, None, &mut r), Decision::Retry { .. }), "{method}");
        }
        let opted_in = RetryPolicy { retry_non_idempotent: true, ..RetryPolicy::default() };
        for method in [Method::POST, Method::PATCH] {
            assert!(matches!(opted_in.decide(1, &status(503), &method, None, &mut r), Decision::Retry { .. }));
        }
    }

    #[test]
    fn connection_errors_and_timeouts_only_when_enabled() {
        let off = RetryPolicy::default();
        let on = RetryPolicy { retry_connection_errors: true, ..RetryPolicy::default() };
        let mut r = rng();
        let err = Outcome::ConnectionError { message: "reset by peer" };
        for outcome in [err, Outcome::Timeout] {
            assert_eq!(
                off.decide(1, &outcome, &Method::GET, None, &mut r),
                Decision::GiveUp(GiveUpReason::NotRetryable)
            );
            let (delay, reason) = delay_of(on.decide(1, &outcome, &Method::GET, None, &mut r));
            assert_eq!(reason, RetryReason::Backoff);
            assert!(delay <= on.base);
            // Still subject to idempotency.
            assert!(matches!(
                on.decide(1, &outcome, &Method::POST, None, &mut r),
                Decision::GiveUp(GiveUpReason::NotIdempotent { .. })
            ));
        }
    }

    #[test]
    fn success_and_non_retryable_errors_are_done() {
        let p = RetryPolicy::default();
        let mut r = rng();
        for s in [200, 204, 301, 304, 400, 401, 404, 500, 502] {
            assert_eq!(p.decide(1, &status(s), &Method::GET, None, &mut r), Decision::Done, "{s}");
            assert_eq!(p.decide(5, &status(s), &Method::GET, None, &mut r), Decision::Done, "{s}");
        }
        let custom = RetryPolicy { retry_statuses: vec![500, 502], ..RetryPolicy::default() };
        assert!(matches!(custom.decide(1, &status(502), &Method::GET, None, &mut r), Decision::Retry { .. }));
        assert_eq!(custom.decide(1, &status(429), &Method::GET, None, &mut r), Decision::Done);
    }

    #[test]
    fn validate_rejects_each_absurd_setting() {
        let ok = RetryPolicy::default();
        let cases = [
            (RetryPolicy { max_attempts: 0, ..ok.clone() }, RetryConfigError::ZeroAttempts),
            (RetryPolicy { max_attempts: 101, ..ok.clone() }, RetryConfigError::TooManyAttempts(101)),
            (RetryPolicy { base: Duration::ZERO, ..ok.clone() }, RetryConfigError::ZeroBase),
            (
                RetryPolicy { cap: Duration::from_millis(299), ..ok.clone() },
                RetryConfigError::CapBelowBase { cap: Duration::from_millis(299), base: Duration::from_millis(300) },
            ),
            (RetryPolicy { max_retry_after: Duration::ZERO, ..ok.clone() }, RetryConfigError::ZeroMaxRetryAfter),
        ];
        for (policy, expected) in cases {
            assert_eq!(policy.validate(), Err(expected));
        }
        assert_eq!(RetryPolicy { max_attempts: 100, ..ok.clone() }.validate(), Ok(()));
        assert_eq!(RetryPolicy { cap: ok.base, ..ok.clone() }.validate(), Ok(()));
    }

    #[test]
    fn validate_messages_are_clear() {
        assert_eq!(
            RetryConfigError::TooManyAttempts(101).to_string(),
            "max_attempts is 101, more than the allowed maximum of 100"
        );
        assert_eq!(
            RetryConfigError::CapBelowBase { cap: Duration::from_millis(299), base: Duration::from_millis(300) }
                .to_string(),
            "the backoff cap (299ms) is smaller than the base backoff (300ms)"
        );
        assert!(RetryConfigError::ZeroAttempts.to_string().contains("at least 1"));
        assert!(RetryConfigError::ZeroBase.to_string().contains("greater than zero"));
        assert!(RetryConfigError::ZeroMaxRetryAfter.to_string().contains("greater than zero"));
    }

    #[test]
    fn invalid_settings_never_panic_in_decide() {
        let mut r = rng();
        for jitter in [Jitter::Full, Jitter::Equal, Jitter::Decorrelated, Jitter::None] {
            let p = RetryPolicy {
                max_attempts: 0,
                base: Duration::ZERO,
                cap: Duration::ZERO,
                max_retry_after: Duration::ZERO,
                jitter,
                ..RetryPolicy::default()
            };
            for attempt in [0, 1, u32::MAX] {
                let _ = p.decide(attempt, &status(429), &Method::GET, Some(Duration::MAX), &mut r);
                assert_eq!(p.backoff(attempt, Some(Duration::MAX), &mut r), Duration::ZERO);
            }
        }
    }

    #[test]
    fn jitter_parses_and_serializes_lowercase() {
        for (text, jitter) in [
            ("full", Jitter::Full),
            ("equal", Jitter::Equal),
            ("decorrelated", Jitter::Decorrelated),
            ("none", Jitter::None),
        ] {
            assert_eq!(text.parse::<Jitter>(), Ok(jitter));
            assert_eq!(jitter.to_string(), text);
            assert_eq!(serde_json::to_string(&jitter).ok(), Some(format!("\"{text}\"")));
            assert_eq!(serde_json::from_str::<Jitter>(&format!("\"{text}\"")).ok(), Some(jitter));
        }
        assert_eq!(" Full ".parse::<Jitter>(), Ok(Jitter::Full));
        let err = "exponential".parse::<Jitter>();
        assert_eq!(err, Err(RetryConfigError::UnknownJitter("exponential".into())));
        assert!(err.is_err_and(|e| e.to_string().contains("expected one of full, equal, decorrelated, none")));
        assert!(serde_json::from_str::<Jitter>("\"Full\"").is_err());
    }
}
