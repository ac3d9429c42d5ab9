//! What one limiter enforces: its budgets, a concurrency cap and the starvation guard of its lanes.

use std::collections::HashSet;
use std::time::Duration;

use super::ConfigError;
use super::budget::BudgetSpec;

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
