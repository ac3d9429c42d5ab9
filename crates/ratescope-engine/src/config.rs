//! What one limiter enforces: its budgets, a concurrency cap and the starvation guard of its lanes.

use std::collections::HashSet;
use std::time::Duration;

use super::ConfigError;
use super::budget::BudgetSpec;
use super::unit::{Cost, Unit};

/// The largest concurrency cap accepted.
pub const MAX_CONCURRENCY: usize = 1 << 30;

/// The default age after which a waiting request is served before younger ones of higher lanes.
pub const DEFAULT_STARVATION_GUARD: Duration = Duration::from_secs(30);

/// Settings of one limiter. A request is admitted only when every budget allows it
/// and a concurrency slot is free.
#[derive(Debug, Clone, PartialEq)]
pub struct LimiterConfig {
    /// Every budget a request must fit; none means only the concurrency cap applies.
    pub budgets: Vec<BudgetSpec>,
    /// Most requests in flight at once; `None` for no cap.
    pub concurrency: Option<usize>,
    /// A waiter older than this is promoted ahead of younger, higher-priority ones; `None` for strict lanes.
    pub starvation_guard: Option<Duration>,
}

impl Default for LimiterConfig {
    fn default() -> Self {
        Self { budgets: Vec::new(), concurrency: None, starvation_guard: Some(DEFAULT_STARVATION_GUARD) }
    }
}

impl LimiterConfig {
    /// No budgets, no cap: admits everything at once.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a budget.
    pub fn with_budget(mut self, budget: BudgetSpec) -> Self {
        self.budgets.push(budget);
        self
    }

    /// Caps requests in flight.
    pub fn with_concurrency(mut self, limit: usize) -> Self {
        self.concurrency = Some(limit);
        self
    }

    /// Sets (or with `None` disables) the starvation guard.
    pub fn with_starvation_guard(mut self, after: Option<Duration>) -> Self {
        self.starvation_guard = after;
        self
    }

    /// Checks every setting; the engine calls this before using a config.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let mut names = HashSet::new();
        for budget in &self.budgets {
            budget.validate()?;
            if !names.insert(budget.name.as_str()) {
                return Err(ConfigError::DuplicateBudget(budget.name.clone()));
            }
        }
        match self.concurrency {
            Some(0) => return Err(ConfigError::ZeroConcurrency),
            Some(limit) if limit > MAX_CONCURRENCY => return Err(ConfigError::ConcurrencyTooLarge(limit)),
            _ => {}
        }
        if self.starvation_guard.is_some_and(|age| age.is_zero()) {
            return Err(ConfigError::ZeroDuration);
        }
        Ok(())
    }

    /// The most of `unit` one request is ever counted as spending here: the largest capacity,
    /// in `unit`, of the budgets that count it (a real budget of that size would have refused a
    /// request spending more, so an answer saying more is wrong); `None` when none counts it.
    pub fn settle_bound(&self, unit: &Unit) -> Option<u64> {
        self.budgets.iter().filter(|budget| budget.unit == *unit).map(|budget| budget.capacity() / budget.cost).max()
    }

    /// `cost` as a settlement counts it: each unit's amount (a unit named twice added up) at
    /// most its [`settle_bound`](Self::settle_bound).
    pub fn capped(&self, cost: &Cost) -> Cost {
        let cap = |unit: &Unit, amount: u64| self.settle_bound(unit).map_or(amount, |bound| amount.min(bound));
        let mut capped = Cost::requests(cap(&Unit::Requests, cost.requests));
        for (index, (unit, _)) in cost.units.iter().enumerate() {
            if cost.units[..index].iter().all(|(earlier, _)| earlier != unit) {
                capped = capped.with(unit.clone(), cap(unit, cost.of(unit)));
            }
        }
        capped
    }

    /// The first budget that can never hold a request of `cost`, and what the request spends
    /// in it (more than its capacity).
    pub fn never_fits(&self, cost: &Cost) -> Option<(&BudgetSpec, u64)> {
        self.budgets.iter().find_map(|budget| {
            let spent = cost.of(&budget.unit).saturating_mul(budget.cost);
            (spent > budget.capacity()).then_some((budget, spent))
        })
    }

    /// Reads the one-line form [`describe`](Self::describe) writes: `bucket 5 @ 3/1s, window
    /// 100/1m, concurrency 4` (parts in any order, separated by commas; `no limits` for none).
    /// Buckets are named `rate`, windows `window`, `window2`, ...
    pub fn parse_described(text: &str) -> Result<Self, ConfigError> {
        let mut config = Self::new();
        let text = text.trim();
        if text.is_empty() || text.eq_ignore_ascii_case("no limits") {
            return Ok(config);
        }
        let syntax = |part: &str| {
            ConfigError::Syntax(format!("'{part}' is not one of: bucket 5 @ 5/1s, window 100/1m, concurrency 4"))
        };
        let mut windows = 0;
        for part in text.split(',').map(str::trim) {
            let (word, rest) = part.split_once(char::is_whitespace).ok_or_else(|| syntax(part))?;
            let rest = rest.trim();
            match word.to_ascii_lowercase().as_str() {
                "bucket" => {
                    let (capacity, rate) = rest.split_once('@').ok_or_else(|| syntax(part))?;
                    let capacity = capacity.trim().parse().map_err(|_| syntax(part))?;
                    let name = if config.budgets.iter().any(|b| b.name == "rate") { "rate2" } else { "rate" };
                    config.budgets.push(BudgetSpec::token_bucket(name, capacity, rate.trim().parse()?)?);
                }
                "window" => {
                    let (limit, window) = rest.split_once('/').ok_or_else(|| syntax(part))?;
                    windows += 1;
                    let name = if windows == 1 { "window".to_owned() } else { format!("window{windows}") };
                    let limit = limit.trim().parse().map_err(|_| syntax(part))?;
                    config.budgets.push(BudgetSpec::sliding_window(name, limit, super::parse_duration(window)?)?);
                }
                "concurrency" => config.concurrency = Some(rest.parse().map_err(|_| syntax(part))?),
                _ => return Err(syntax(part)),
            }
        }
        config.validate()?;
        Ok(config)
    }

    /// One line such as `bucket 5 @ 3/1s, window 100/1m, concurrency 4`.
    pub fn describe(&self) -> String {
        let mut parts: Vec<String> = self.budgets.iter().map(BudgetSpec::describe).collect();
        if let Some(limit) = self.concurrency {
            parts.push(format!("concurrency {limit}"));
        }
        if parts.is_empty() { "no limits".to_owned() } else { parts.join(", ") }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_settlement_is_capped_at_the_largest_capacity_counting_its_unit() {
        let rate = "10/1s".parse().unwrap();
        let config = LimiterConfig::new()
            .with_budget(BudgetSpec::token_bucket("rate", 10, rate).unwrap())
            .with_budget(
                BudgetSpec::sliding_window("tpm", 1000, Duration::from_secs(60)).unwrap().with_unit(Unit::tokens()),
            )
            .with_budget(
                BudgetSpec::sliding_window("tpd", 5000, Duration::from_secs(86_400)).unwrap().with_unit(Unit::tokens()),
            )
            .with_budget(
                BudgetSpec::sliding_window("pts", 100, Duration::from_secs(60))
                    .unwrap()
                    .with_unit(Unit::points())
                    .with_cost(3)
                    .unwrap(),
            );
        assert_eq!(config.settle_bound(&Unit::tokens()), Some(5000));
        assert_eq!(config.settle_bound(&Unit::points()), Some(33), "capacity 100 at 3 per point");
        assert_eq!(config.settle_bound(&Unit::named("credits")), None);
        let said = Cost::requests(u64::MAX)
            .with(Unit::tokens(), u64::MAX)
            .with(Unit::tokens(), 7)
            .with(Unit::points(), 20)
            .with(Unit::named("credits"), u64::MAX);
        let expected = Cost::requests(10)
            .with(Unit::tokens(), 5000)
            .with(Unit::points(), 20)
            .with(Unit::named("credits"), u64::MAX);
        assert_eq!(config.capped(&said), expected);
        assert_eq!(
            config.never_fits(&Cost::requests(1).with(Unit::points(), 34)).map(|(b, n)| (b.name.as_str(), n)),
            Some(("pts", 102))
        );
        assert_eq!(config.never_fits(&Cost::requests(1).with(Unit::points(), 33)), None);
    }

    #[test]
    fn the_described_form_reads_back() {
        let text = "bucket 5 @ 3/1s, window 100/1m, window 1000/1h, concurrency 4";
        let config = LimiterConfig::parse_described(text).unwrap();
        assert_eq!(config.describe(), text);
        assert_eq!(config.budgets[2].name, "window2");
        assert_eq!(LimiterConfig::parse_described("no limits").unwrap(), LimiterConfig::new());
        for bad in ["bucket 5", "window 10 per minute", "speed 3", "concurrency 0", "bucket 0 @ 1/1s"] {
            assert!(LimiterConfig::parse_described(bad).is_err(), "{bad}");
        }
    }
}
