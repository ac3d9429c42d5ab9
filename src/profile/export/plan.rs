//! The conservative conversion, written once for every target: a host's budgets as a list of
//! per-request token buckets ("stages") that together are never more permissive than the budgets.
//!
//! Every target library here knows token buckets (or something a bucket can be written in) and
//! none knows an exact sliding window, so:
//!
//! - a token bucket of capacity `C` refilled at `a/p`, a request spending `k`, is a bucket of
//!   `⌊C/k⌋` requests refilled one every `⌈k·p/a⌉` ns: exact when `k` divides `C`;
//! - a sliding window of `L` per `W`, a request spending `k`, is `⌊L/k⌋ = L'` requests per `W`
//!   and becomes one request every `⌈W/L'⌉` ns with no burst (capacity 1). The engine counts an
//!   admission at `t` while `now < t + W`; a bucket of one refilled every `W/L'` admits at most
//!   `1 + ⌊(W − ε)/(W/L')⌋ = L'` in any such window. A burst `B` would cost the long-run rate
//!   (`(L' − B + 1)/W`), so the export spaces requests evenly, which also keeps every run of
//!   `n·L' + 1` requests exactly as fast as the window allows.
//!
//! Limiters waited on one after another (the targets' way of stacking them) may let one request
//! more through a stage than that stage alone would: a request takes a stage's token, then waits
//! at a later stage while the earlier one refills. Stages are ordered so that this costs little:
//! buckets with a burst first, each keeping one request of its burst back (`C − 1`, never below
//! one), then the evenly spaced ones from the shortest interval to the longest; the last stage is
//! exact, and an evenly spaced last stage keeps every request at least its interval apart, which
//! is at least every other evenly spaced stage's.
//!
//! Intervals are rounded up, amounts down: each target then rounds the interval up to what it
//! can count (whole milliseconds for Bottleneck).

use std::time::Duration;

use crate::engine::{BudgetKind, BudgetSpec, LimiterConfig, Unit, format_period};

/// The longest interval a target is given: Go's `time.Duration` counts nanoseconds in an `i64`,
/// and the float targets' interval is written a little longer still (about 146 years).
pub const MAX_INTERVAL_NANOS: u128 = (i64::MAX / 2) as u128;

/// One per-request token bucket: `capacity` requests at once, one more every `interval_ns`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stage {
    /// The budget it comes from.
    pub budget: String,
    /// The budget as the profile says it (`bucket 5 @ 5/1s`, `window 100/1m`, `cost 2`).
    pub source: String,
    /// Requests it admits at once (at least 1).
    pub capacity: u64,
    /// One request's worth of refill, in nanoseconds (at least 1).
    pub interval_ns: u64,
    /// How the conversion departs from the budget, each a sentence; empty when exact.
    pub notes: Vec<String>,
}

impl Stage {
    /// Whether the stage admits exactly what its budget does.
    pub fn exact(&self) -> bool {
        self.notes.is_empty()
    }

    /// The interval rounded up to a whole number of `resolution_ns` (at least one of them).
    pub fn interval_in(&self, resolution_ns: u64) -> u64 {
        self.interval_ns.div_ceil(resolution_ns.max(1)).max(1)
    }

    /// `one every 200ms` in the profile's own words.
    pub fn describe(&self) -> String {
        let every = format_period(Duration::from_nanos(self.interval_ns));
        if self.capacity == 1 {
            format!("one request every {every}, no burst")
        } else {
            format!("a burst of {} requests, then one every {every}", self.capacity)
        }
    }
}

/// A host's (or path's) limits as the stages every target waits on, in order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Plan {
    /// Waited on first to last by each request; empty when no request budget is set.
    pub stages: Vec<Stage>,
    /// Requests in flight at most.
    pub concurrency: Option<usize>,
    /// Budgets left out (units other than requests), one sentence each.
    pub left_out: Vec<String>,
}

/// Why a budget cannot be exported.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// One request's refill is longer than any target can wait (about 146 years).
    #[error(
        "budget '{budget}': one request per more than 146 years is longer than the targets can wait; \
         give it a larger amount or a shorter period"
    )]
    TooSlow {
        /// The budget.
        budget: String,
    },
}

/// The stages for `config`: budgets counting requests become stages, others are left out.
pub fn plan(config: &LimiterConfig) -> Result<Plan, PlanError> {
    let mut stages = Vec::new();
    let mut left_out = Vec::new();
    for budget in &config.budgets {
        if budget.unit != Unit::Requests {
            left_out.push(format!(
                "budget '{}' ({}) counts {}, not requests: an exported limiter counts requests, so it is left out \
                 (pace those units in your own code, or use ratescope's client, which settles them from each answer)",
                budget.name,
                source_of(budget),
                budget.unit
            ));
            continue;
        }
        stages.push(stage_of(budget)?);
    }
    order(&mut stages);
    Ok(Plan { stages, concurrency: config.concurrency, left_out })
}

/// The budget in the profile's words: `bucket 5 @ 5/1s`, `window 100/1m`, with `cost k` when set.
fn source_of(budget: &BudgetSpec) -> String {
    let text = budget.describe();
    if budget.cost == 1 { text } else { format!("{text}, cost {} a request", budget.cost) }
}

/// One budget (counting requests) as a stage.
fn stage_of(budget: &BudgetSpec) -> Result<Stage, PlanError> {
    let cost = u128::from(budget.cost.max(1));
    let too_slow = || PlanError::TooSlow { budget: budget.name.clone() };
    let mut notes = Vec::new();
    let (capacity, interval) = match budget.kind {
        BudgetKind::TokenBucket { capacity, refill } => {
            let per = refill.per().as_nanos();
            let amount = u128::from(refill.amount());
            // k units refill in k·per/amount ns; rounded up.
            let interval = (cost * per).div_ceil(amount);
            if !(cost * per).is_multiple_of(amount) {
                notes.push("its refill interval is rounded up to a whole nanosecond".to_owned());
            }
            let requests = capacity / budget.cost.max(1);
            if !capacity.is_multiple_of(budget.cost.max(1)) {
                notes.push(format!(
                    "a capacity of {capacity} at a cost of {} holds {requests} whole requests",
                    budget.cost
                ));
            }
            (requests, interval)
        }
        BudgetKind::SlidingWindow { limit, window } => {
            let requests = limit / budget.cost.max(1);
            if !limit.is_multiple_of(budget.cost.max(1)) {
                notes.push(format!("a limit of {limit} at a cost of {} holds {requests} whole requests", budget.cost));
            }
            let window = window.as_nanos();
            let interval = window.div_ceil(u128::from(requests.max(1)));
            notes.push(format!(
                "a sliding window has no exact token-bucket form: at most {requests} in any {} becomes one request every {} \
                 with no burst, which never admits more than {requests} in any such window",
                format_period(Duration::from_nanos(u64::try_from(window).unwrap_or(u64::MAX))),
                format_period(Duration::from_nanos(u64::try_from(interval).unwrap_or(u64::MAX)))
            ));
            (1, interval)
        }
    };
    if interval > MAX_INTERVAL_NANOS {
        return Err(too_slow());
    }
    let interval_ns = u64::try_from(interval).map_err(|_| too_slow())?.max(1);
    Ok(Stage { budget: budget.name.clone(), source: source_of(budget), capacity: capacity.max(1), interval_ns, notes })
}

/// Buckets with a burst first (each but the last keeping one request back), then evenly spaced
/// stages from the shortest interval to the longest (see the module's docs).
fn order(stages: &mut [Stage]) {
    // A stable sort keeps the profile's order among equals, so the output is deterministic.
    stages.sort_by_key(|stage| (stage.capacity == 1, if stage.capacity == 1 { stage.interval_ns } else { 0 }));
    let last = stages.len().saturating_sub(1);
    for stage in stages.iter_mut().take(last) {
        if stage.capacity >= 2 {
            stage.capacity -= 1;
            stage.notes.push(
                "one request of its burst is kept back: limiters waited on one after another can let one more \
                 through a limiter that is not the last"
                    .to_owned(),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Rate;

    fn bucket(name: &str, capacity: u64, rate: &str) -> BudgetSpec {
        BudgetSpec::token_bucket(name, capacity, rate.parse::<Rate>().unwrap()).unwrap()
    }

    fn window(name: &str, limit: u64, window: Duration) -> BudgetSpec {
        BudgetSpec::sliding_window(name, limit, window).unwrap()
    }

    #[test]
    fn a_bucket_alone_is_exact() {
        let plan = plan(&LimiterConfig::new().with_budget(bucket("rate", 5, "5/1s"))).unwrap();
        assert_eq!(plan.stages.len(), 1);
        let stage = &plan.stages[0];
        assert_eq!((stage.capacity, stage.interval_ns), (5, 200_000_000));
        assert!(stage.exact(), "{:?}", stage.notes);
    }

    #[test]
    fn a_window_becomes_even_spacing_and_says_so() {
        let plan = plan(&LimiterConfig::new().with_budget(window("minute", 100, Duration::from_secs(60)))).unwrap();
        let stage = &plan.stages[0];
        assert_eq!((stage.capacity, stage.interval_ns), (1, 600_000_000));
        assert!(!stage.exact());
        assert!(stage.notes[0].contains("one request every 600ms"), "{:?}", stage.notes);
    }

    #[test]
    fn costs_divide_amounts_down_and_intervals_up() {
        let spec = bucket("rate", 5, "3/1s").with_cost(2).unwrap();
        let stage = &plan(&LimiterConfig::new().with_budget(spec)).unwrap().stages[0];
        // 2 units at 3/s: one request per 666_666_666.67 ns, rounded up; 5 units hold 2 requests.
        assert_eq!((stage.capacity, stage.interval_ns), (2, 666_666_667));
        assert_eq!(stage.notes.len(), 2, "{:?}", stage.notes);
        let spec = window("w", 7, Duration::from_secs(1)).with_cost(3).unwrap();
        let stage = &plan(&LimiterConfig::new().with_budget(spec)).unwrap().stages[0];
        assert_eq!((stage.capacity, stage.interval_ns), (1, 500_000_000));
    }

    #[test]
    fn other_units_are_left_out_and_named() {
        let tokens = window("tpm", 1000, Duration::from_secs(60)).with_unit(Unit::tokens());
        let plan = plan(&LimiterConfig::new().with_budget(tokens).with_concurrency(3)).unwrap();
        assert!(plan.stages.is_empty());
        assert_eq!(plan.concurrency, Some(3));
        assert!(plan.left_out[0].contains("'tpm'") && plan.left_out[0].contains("tokens"), "{:?}", plan.left_out);
    }

    #[test]
    fn stacked_stages_put_bursts_first_and_the_longest_spacing_last() {
        let config = LimiterConfig::new()
            .with_budget(window("hour", 1000, Duration::from_secs(3600)))
            .with_budget(bucket("rate", 5, "5/1s"))
            .with_budget(window("second", 10, Duration::from_secs(1)))
            .with_budget(bucket("minute", 50, "50/1m"));
        let plan = plan(&config).unwrap();
        let names: Vec<&str> = plan.stages.iter().map(|stage| stage.budget.as_str()).collect();
        assert_eq!(names, ["rate", "minute", "second", "hour"]);
        // Buckets keep one back; evenly spaced ones have nothing to keep back.
        let capacities: Vec<u64> = plan.stages.iter().map(|stage| stage.capacity).collect();
        assert_eq!(capacities, [4, 49, 1, 1]);
        // The last bucket of a host with buckets only is exact.
        let plan = super::plan(
            &LimiterConfig::new().with_budget(bucket("a", 5, "5/1s")).with_budget(bucket("b", 50, "50/1m")),
        )
        .unwrap();
        assert_eq!(plan.stages.iter().map(|stage| stage.capacity).collect::<Vec<_>>(), [4, 50]);
    }

    #[test]
    fn an_interval_beyond_what_targets_count_is_refused() {
        let slow = bucket("decade", 1 << 40, "1/3650d").with_cost(1 << 40).unwrap();
        let err = plan(&LimiterConfig::new().with_budget(slow)).unwrap_err();
        assert!(err.to_string().contains("budget 'decade'"), "{err}");
    }

    #[test]
    fn intervals_round_up_to_a_targets_resolution() {
        let stage = &plan(&LimiterConfig::new().with_budget(bucket("r", 1, "3/1s"))).unwrap().stages[0];
        assert_eq!(stage.interval_in(1_000_000), 334);
        assert_eq!(stage.interval_in(1), 333_333_334);
    }
}
