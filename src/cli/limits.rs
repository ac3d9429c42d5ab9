//! Limiter flags shared by commands: `--rate`, `--burst`, `--window`, `-c`.

use std::str::FromStr;

use anyhow::Context;
use clap::Args;

use crate::engine::{BudgetSpec, ConfigError, LimiterConfig, Rate, Unit, parse_duration};

/// `--rate` as written: the rate, and the burst it lets through by default, its amount as
/// written rounded up to whole requests (`1.5/1s`: 2, although the rate is kept as `3/2s`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateFlag {
    /// The refill.
    pub rate: Rate,
    /// The amount as written, rounded up (at least 1).
    pub amount: u64,
}

impl FromStr for RateFlag {
    type Err = ConfigError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let rate: Rate = text.parse()?;
        // It parsed, so the amount before the '/' is a number no larger than the engine's cap.
        let written = text.split_once('/').and_then(|(amount, _)| amount.trim().parse::<f64>().ok());
        let amount = written.map_or(rate.amount(), |amount| amount.ceil() as u64).max(1);
        Ok(Self { rate, amount })
    }
}

/// The limit flags shared by `burst`, `pace` and `proxy`: a bucket, windows and a concurrency cap.
#[derive(Debug, Clone, Args)]
pub struct LimitArgs {
    /// Token bucket refill, e.g. 10/1s or 600/1m.
    #[arg(long, value_name = "N/DURATION")]
    pub rate: Option<RateFlag>,
    /// Token bucket capacity (the burst let through at once); defaults to the rate's amount as
    /// written, rounded up (10/1s: 10, 1.5/1s: 2).
    #[arg(long, value_name = "B")]
    pub burst: Option<u64>,
    /// Exact sliding window, e.g. 1000/1h; repeat for several. A unit other than requests
    /// after a colon: 200000/1m:tokens (with --cost saying what a request spends of it).
    #[arg(long = "window", value_name = "N/DURATION")]
    pub windows: Vec<String>,
    /// Most requests in flight at once.
    #[arg(short = 'c', long = "concurrency", value_name = "C")]
    pub concurrency: Option<usize>,
}

impl LimitArgs {
    /// The limiter these flags describe; an impossible one is a usage error.
    pub fn to_config(&self) -> anyhow::Result<LimiterConfig> {
        self.build().map_err(super::as_usage)
    }

    /// [`to_config`](Self::to_config) for a command whose requests spend only requests (no cost
    /// rules): a budget in another unit would never bind, so it is a usage error.
    pub fn to_requests_config(&self, command: &str) -> anyhow::Result<LimiterConfig> {
        let config = self.to_config()?;
        if let Some(budget) = config.budgets.iter().find(|budget| budget.unit != Unit::Requests) {
            usage!(
                "{} counts {}, but {command} spends only requests (it has no cost rules), so it would never hold anything back: count requests, e.g. --window 1000/1h",
                budget.describe(),
                budget.unit
            );
        }
        Ok(config)
    }

    fn build(&self) -> anyhow::Result<LimiterConfig> {
        let mut config = LimiterConfig::new();
        if let Some(RateFlag { rate, amount }) = self.rate {
            let capacity = self.burst.unwrap_or(amount);
            config = config.with_budget(BudgetSpec::token_bucket("rate", capacity, rate).context("--rate/--burst")?);
        } else if self.burst.is_some() {
            usage!("--burst needs --rate (the bucket's refill)");
        }
        for (i, text) in self.windows.iter().enumerate() {
            let (limit, window) = text
                .split_once('/')
                .with_context(|| format!("--window '{text}' is not of the form N/DURATION, e.g. 1000/1h"))?;
            let limit: u64 =
                limit.trim().parse().with_context(|| format!("--window '{text}': '{limit}' is not a whole number"))?;
            let (window, unit) = match window.split_once(':') {
                Some((window, unit)) => (window, Unit::parse(unit).with_context(|| format!("--window '{text}'"))?),
                None => (window, Unit::Requests),
            };
            let window = parse_duration(window).with_context(|| format!("--window '{text}'"))?;
            let name = if self.windows.len() == 1 { "window".to_owned() } else { format!("window{}", i + 1) };
            config = config.with_budget(
                BudgetSpec::sliding_window(name, limit, window)
                    .with_context(|| format!("--window '{text}'"))?
                    .with_unit(unit),
            );
        }
        if let Some(limit) = self.concurrency {
            config = config.with_concurrency(limit);
        }
        config.validate()?;
        Ok(config)
    }
}
