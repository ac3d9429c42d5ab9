//! Limiter flags shared by commands: `--rate`, `--burst`, `--window`, `-c`.

use anyhow::Context;
use clap::Args;

use crate::engine::{BudgetSpec, LimiterConfig, Rate, Unit, parse_duration};

/// The limit flags shared by `burst`, `pace` and `proxy`: a bucket, windows and a concurrency cap.
#[derive(Debug, Clone, Args)]
pub struct LimitArgs {
    /// Token bucket refill, e.g. 10/1s or 600/1m.
    #[arg(long, value_name = "N/DURATION")]
    pub rate: Option<Rate>,
    /// Token bucket capacity (the burst let through at once); defaults to the rate's amount.
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
                "--window {} counts {}, but {command} spends only requests (it has no cost rules), so it would never hold anything back: count requests, e.g. --window 1000/1h",
                budget.describe(),
                budget.unit
            );
        }
        Ok(config)
    }

    fn build(&self) -> anyhow::Result<LimiterConfig> {
        let mut config = LimiterConfig::new();
        if let Some(rate) = self.rate {
            let capacity = self.burst.unwrap_or(rate.amount().max(1));
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
