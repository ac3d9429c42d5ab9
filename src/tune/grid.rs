//! The settings a tune sweeps: bucket capacity × rate, window limits and concurrency caps, their
//! ranges derived from the server model's policies unless the caller gives them.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use thiserror::Error;

use crate::engine::MAX_CONCURRENCY;
use crate::mock::{PolicyKind, PolicySpec};
use crate::probe::{SuggestedBudget, Suggestion};

/// The most settings one tune sweeps.
pub const MAX_CANDIDATES: usize = 20_000;
/// The most values on one axis.
pub const MAX_STEPS: usize = 200;
/// The largest capacity or window limit swept (a budget far beyond any API's).
const MAX_AMOUNT: u64 = 1 << 40;

/// An inclusive range of an axis, as `MIN..MAX` (or one value).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Span<T> {
    /// The lowest value.
    pub low: T,
    /// The highest value.
    pub high: T,
}

/// An axis range that cannot be swept.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{0}")]
pub struct SpanError(String);

impl<T: FromStr + PartialOrd + Copy + fmt::Display> FromStr for Span<T> {
    type Err = SpanError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let parse = |part: &str| {
            part.trim().parse::<T>().map_err(|_| SpanError(format!("'{}' in '{text}' is not a number", part.trim())))
        };
        let (low, high) = match text.split_once("..") {
            Some((low, high)) => (parse(low)?, parse(high.trim_start_matches('='))?),
            None => {
                let value = parse(text)?;
                (value, value)
            }
        };
        if low > high {
            return Err(SpanError(format!("'{text}': the low end {low} is above the high end {high}")));
        }
        Ok(Self { low, high })
    }
}

impl<T: fmt::Display + PartialEq> fmt::Display for Span<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.low == self.high { write!(f, "{}", self.low) } else { write!(f, "{}..{}", self.low, self.high) }
    }
}

/// What the caller sets of a sweep; every range left `None` is derived from the model.
#[derive(Debug, Clone, PartialEq)]
pub struct GridOptions {
    /// Values per axis (capacity, rate; concurrency takes at most this many too).
    pub steps: usize,
    /// The bucket's capacity.
    pub capacity: Option<Span<u64>>,
    /// The bucket's refill, requests per second.
    pub rate: Option<Span<f64>>,
    /// Each window's limit (the same range for every window of the model).
    pub window_limit: Option<Span<u64>>,
    /// The concurrency cap.
    pub concurrency: Option<Span<usize>>,
    /// The share windows are stretched by (the model's tightening), so a mirrored window keeps
    /// the margin too.
    pub margin: f64,
}

impl Default for GridOptions {
    fn default() -> Self {
        Self { steps: 20, capacity: None, rate: None, window_limit: None, concurrency: None, margin: 0.05 }
    }
}

/// Why no grid could be made.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum GridError {
    /// The model limits nothing: every setting runs unthrottled.
    #[error(
        "the server model has no limit for these requests, so every setting is as good as none: tune against a model with limits (--server, --from-probe or --profile)"
    )]
    NoLimits,
    /// A value the caller gave is out of bounds.
    #[error("{0}")]
    Bad(String),
    /// Too many settings.
    #[error("{0} settings is more than one tune sweeps ({MAX_CANDIDATES}); fewer --steps or narrower ranges")]
    TooMany(usize),
}

/// One window of the model, mirrored in every setting.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Window {
    limit: u64,
    window: Duration,
}

/// The axes of a sweep and the settings they make, in axis order (capacity outermost).
#[derive(Debug, Clone, PartialEq)]
pub struct Grid {
    /// Bucket capacities swept.
    pub capacities: Vec<u64>,
    /// Bucket rates swept (requests per second, three decimals).
    pub rates: Vec<f64>,
    /// Window limits swept (one list of factors applied to every mirrored window; empty: the
    /// model has no window).
    pub window_limits: Vec<Vec<u64>>,
    /// Concurrency caps swept (`[None]` when the model has none and none was asked).
    pub concurrency: Vec<Option<usize>>,
    windows: Vec<Window>,
}

impl Grid {
    /// The axes for a model route's `policies`.
    pub fn new(policies: &[PolicySpec], options: &GridOptions) -> Result<Self, GridError> {
        let steps = options.steps;
        if !(1..=MAX_STEPS).contains(&steps) {
            return Err(GridError::Bad(format!("--steps {steps} must be 1 to {MAX_STEPS}")));
        }
        let margin = if options.margin.is_finite() { options.margin } else { -1.0 };
        if !(0.0..=0.5).contains(&margin) {
            return Err(GridError::Bad(format!("margin {} is not a share between 0 and 0.5", options.margin)));
        }
        let mut buckets = Vec::new();
        let mut windows = Vec::new();
        let mut concurrency_limit = None;
        for policy in policies.iter().filter(|policy| policy.unit == crate::engine::Unit::Requests) {
            match policy.kind {
                PolicyKind::TokenBucket { capacity, rate } => buckets.push((capacity, rate.per_second())),
                PolicyKind::FixedWindow { limit, window } | PolicyKind::SlidingWindow { limit, window } => {
                    windows.push(Window { limit, window: window.mul_f64(1.0 + margin) });
                }
                PolicyKind::Concurrency { limit } => {
                    concurrency_limit = Some(concurrency_limit.map_or(limit, |known: u64| known.min(limit)));
                }
            }
        }
        if buckets.is_empty() && windows.is_empty() && concurrency_limit.is_none() {
            return Err(GridError::NoLimits);
        }
        // The burst and pace the model allows in the short run: its tightest bucket's; without a
        // bucket, its tightest window's limit spread evenly over the window. (Windows are mirrored
        // in every setting, so where a long window binds, the bucket need not pace for it.)
        let (burst, pace) = if buckets.is_empty() {
            let burst = windows.iter().map(|w| w.limit).min().unwrap_or(1);
            let pace = windows.iter().map(|w| w.limit as f64 / w.window.as_secs_f64()).fold(f64::INFINITY, f64::min);
            (burst, pace)
        } else {
            let burst = buckets.iter().map(|&(capacity, _)| capacity).min().unwrap_or(1);
            (burst, buckets.iter().map(|&(_, per_s)| per_s).fold(f64::INFINITY, f64::min))
        };
        let capacity = match options.capacity {
            Some(span) => checked_span(span, 1, MAX_AMOUNT, "--capacity")?,
            None => Span { low: 1, high: burst.saturating_add(burst.div_ceil(2)).max(1) },
        };
        let rate = match options.rate {
            Some(span) => {
                if !(span.low.is_finite() && span.high.is_finite() && span.low >= 0.001 && span.high <= 1e9) {
                    return Err(GridError::Bad(format!("--rate {span}: a rate is 0.001 to 1e9 requests per second")));
                }
                span
            }
            // No bucket nor window (a concurrency limit only): the bucket never binds.
            None if !pace.is_finite() => Span { low: 1e6, high: 1e6 },
            None => Span { low: pace * 0.5, high: pace * 1.2 },
        };
        let capacities = spread_integers(capacity.low, capacity.high, steps);
        let rates = spread_rates(rate.low, rate.high, steps);
        let window_limits = windows
            .iter()
            .map(|window| match options.window_limit {
                Some(span) => checked_span(span, 1, MAX_AMOUNT, "--window-limit")
                    .map(|span| spread_integers(span.low, span.high, steps)),
                None => Ok(vec![window.limit]),
            })
            .collect::<Result<Vec<_>, _>>()?;
        let concurrency = match (options.concurrency, concurrency_limit) {
            (Some(span), _) => checked_span(span, 1, MAX_CONCURRENCY, "--concurrency")
                .map(|span| spread_integers(span.low as u64, span.high as u64, steps))?
                .into_iter()
                .map(|c| Some(c as usize))
                .collect(),
            (None, Some(limit)) => spread_integers(limit.div_ceil(2).max(1), limit, steps.min(4))
                .into_iter()
                .map(|c| Some(c as usize))
                .collect(),
            (None, None) => vec![None],
        };
        let grid = Self { capacities, rates, window_limits, concurrency, windows };
        let count = grid.len();
        if count > MAX_CANDIDATES {
            return Err(GridError::TooMany(count));
        }
        Ok(grid)
    }

    /// How many settings the grid holds.
    pub fn len(&self) -> usize {
        let windows: usize = self.window_limits.iter().map(Vec::len).product();
        self.capacities
            .len()
            .saturating_mul(self.rates.len())
            .saturating_mul(windows)
            .saturating_mul(self.concurrency.len())
    }

    /// Whether it holds none (never, once made).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every setting, each with its place on the capacity and rate axes.
    pub fn settings(&self) -> Vec<Setting> {
        let mut settings = Vec::with_capacity(self.len());
        let window_choices = cartesian(&self.window_limits);
        for (capacity_index, &capacity) in self.capacities.iter().enumerate() {
            for (rate_index, &per_s) in self.rates.iter().enumerate() {
                for limits in &window_choices {
                    for &concurrency in &self.concurrency {
                        let mut budgets = vec![SuggestedBudget::TokenBucket { name: "rate".into(), capacity, per_s }];
                        for (i, (window, &limit)) in self.windows.iter().zip(limits).enumerate() {
                            let name = if i == 0 { "window".to_owned() } else { format!("window-{}", i + 1) };
                            let window_s = (window.window.as_secs_f64() * 1000.0).ceil() / 1000.0;
                            budgets.push(SuggestedBudget::SlidingWindow { name, limit, window_s });
                        }
                        settings.push(Setting {
                            limits: Suggestion { budgets, concurrency },
                            capacity_index,
                            rate_index,
                        });
                    }
                }
            }
        }
        settings
    }
}

/// One setting of the sweep.
#[derive(Debug, Clone, PartialEq)]
pub struct Setting {
    /// The limits, in the shape of `probe --json`'s `suggested`.
    pub limits: Suggestion,
    /// Its place on [`Grid::capacities`].
    pub capacity_index: usize,
    /// Its place on [`Grid::rates`].
    pub rate_index: usize,
}

fn checked_span<T: PartialOrd + Copy + fmt::Display>(
    span: Span<T>,
    low: T,
    high: T,
    flag: &str,
) -> Result<Span<T>, GridError> {
    if span.low < low || span.high > high {
        return Err(GridError::Bad(format!("{flag} {span} must lie within {low}..{high}")));
    }
    Ok(span)
}

/// Up to `steps` distinct integers from `low` to `high`, both ends included, evenly spread.
fn spread_integers(low: u64, high: u64, steps: usize) -> Vec<u64> {
    if steps <= 1 || low == high {
        return vec![high];
    }
    let span = (high - low) as f64;
    let mut values: Vec<u64> =
        (0..steps).map(|i| low + (span * i as f64 / (steps - 1) as f64).round() as u64).collect();
    values.dedup();
    values
}

/// `steps` rates from `low` to `high`, rounded to three decimals (what a flag can say), distinct.
fn spread_rates(low: f64, high: f64, steps: usize) -> Vec<f64> {
    let round = |value: f64| ((value * 1000.0).round() / 1000.0).max(0.001);
    if steps <= 1 || high - low < 0.001 {
        return vec![round(high)];
    }
    let mut values: Vec<f64> = (0..steps).map(|i| round(low + (high - low) * i as f64 / (steps - 1) as f64)).collect();
    values.dedup_by(|a, b| (*a - *b).abs() < 1e-9);
    values
}

/// Every choice of one value per list.
fn cartesian(lists: &[Vec<u64>]) -> Vec<Vec<u64>> {
    lists.iter().fold(vec![Vec::new()], |choices, list| {
        choices
            .iter()
            .flat_map(|choice| {
                list.iter().map(move |&value| {
                    let mut next = choice.clone();
                    next.push(value);
                    next
                })
            })
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Rate;

    fn bucket(capacity: u64, per_s: u64) -> PolicySpec {
        PolicySpec::new(
            "b",
            PolicyKind::TokenBucket { capacity, rate: Rate::new(per_s, Duration::from_secs(1)).unwrap() },
        )
    }

    #[test]
    fn a_bucket_model_sweeps_around_its_burst_and_rate() {
        let grid = Grid::new(&[bucket(20, 10)], &GridOptions::default()).unwrap();
        assert_eq!(grid.capacities.first(), Some(&1));
        assert_eq!(grid.capacities.last(), Some(&30));
        assert_eq!(grid.capacities.len(), 20);
        assert_eq!(grid.rates.first(), Some(&5.0));
        assert_eq!(grid.rates.last(), Some(&12.0));
        assert_eq!(grid.len(), 400, "the default sweep is 20 × 20");
        assert_eq!(grid.settings().len(), 400);
        assert_eq!(grid.concurrency, vec![None]);
    }

    #[test]
    fn windows_are_mirrored_stretched_by_the_margin_and_concurrency_swept_up_to_the_limit() {
        let window = PolicySpec::new("m", PolicyKind::FixedWindow { limit: 100, window: Duration::from_secs(60) });
        let cap = PolicySpec::new("c", PolicyKind::Concurrency { limit: 8 });
        let grid = Grid::new(&[bucket(5, 5), window, cap], &GridOptions::default()).unwrap();
        assert_eq!(grid.concurrency, vec![Some(4), Some(5), Some(7), Some(8)]);
        let setting = &grid.settings()[0];
        assert_eq!(
            setting.limits.budgets[1],
            SuggestedBudget::SlidingWindow { name: "window".into(), limit: 100, window_s: 63.0 }
        );
    }

    #[test]
    fn small_bursts_give_fewer_distinct_capacities() {
        let grid = Grid::new(&[bucket(2, 1)], &GridOptions::default()).unwrap();
        assert_eq!(grid.capacities, vec![1, 2, 3]);
    }

    #[test]
    fn given_ranges_replace_the_derived_ones() {
        let options = GridOptions {
            steps: 3,
            capacity: Some("4..8".parse().unwrap()),
            rate: Some("2..3".parse().unwrap()),
            concurrency: Some("1..5".parse().unwrap()),
            ..GridOptions::default()
        };
        let grid = Grid::new(&[bucket(5, 5)], &options).unwrap();
        assert_eq!(grid.capacities, vec![4, 6, 8]);
        assert_eq!(grid.rates, vec![2.0, 2.5, 3.0]);
        assert_eq!(grid.concurrency, vec![Some(1), Some(3), Some(5)]);
        assert_eq!(grid.len(), 27);
    }

    #[test]
    fn absurd_ranges_and_models_are_refused_with_a_reason() {
        assert_eq!(Grid::new(&[], &GridOptions::default()), Err(GridError::NoLimits));
        let bad = |options: GridOptions| Grid::new(&[bucket(5, 5)], &options).unwrap_err().to_string();
        assert!(bad(GridOptions { steps: 0, ..GridOptions::default() }).contains("--steps"));
        assert!(bad(GridOptions { margin: f64::NAN, ..GridOptions::default() }).contains("margin"));
        assert!(
            bad(GridOptions { capacity: Some(Span { low: 0, high: 3 }), ..GridOptions::default() })
                .contains("--capacity")
        );
        assert!(
            bad(GridOptions { rate: Some(Span { low: f64::NAN, high: 3.0 }), ..GridOptions::default() })
                .contains("--rate")
        );
        assert!(
            bad(GridOptions { rate: Some(Span { low: 0.0, high: 3.0 }), ..GridOptions::default() }).contains("--rate")
        );
        let many = GridOptions {
            steps: 200,
            capacity: Some("1..1000".parse().unwrap()),
            concurrency: Some("1..1000".parse().unwrap()),
            ..GridOptions::default()
        };
        assert!(matches!(Grid::new(&[bucket(5, 5)], &many), Err(GridError::TooMany(_))));
        assert!("5..2".parse::<Span<u64>>().unwrap_err().to_string().contains("above"));
        assert!("x..2".parse::<Span<u64>>().unwrap_err().to_string().contains("not a number"));
        assert_eq!("3".parse::<Span<u64>>().unwrap(), Span { low: 3, high: 3 });
        assert_eq!("1..=4".parse::<Span<u64>>().unwrap(), Span { low: 1, high: 4 });
    }
}
