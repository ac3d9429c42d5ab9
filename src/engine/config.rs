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

    /// One line such as `bucket 5 @ 3/1s, window 100/1m, concurrency 4`.
    pub fn describe(&self) -> String {
        let mut parts: Vec<String> = self.budgets.iter().map(BudgetSpec::describe).collect();
        if let Some(limit) = self.concurrency {
            parts.push(format!("concurrency {limit}"));
        }
        if parts.is_empty() { "no limits".to_owned() } else { parts.join(", ") }
    }
}
