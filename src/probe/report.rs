//! What a probe found: suggested limiter settings (with a safety margin), the evidence, how
//! sure it is and why; as JSON, as text, as a limiter config or as a profile.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::engine::{BudgetSpec, ConfigError, LimiterConfig, Rate};
use crate::profile::Profile;

/// One suggested budget, as the JSON shows it (and reads it back: the name is not in the JSON,
/// so a budget read back is unnamed until [`Suggestion::name_budgets`] names it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum SuggestedBudget {
    /// `capacity` at once, refilled at `per_s` requests per second.
    TokenBucket {
        /// The name the budget gets in a limiter or a saved profile.
        #[serde(skip, default)]
        name: String,
        /// Tokens held at most.
        capacity: u64,
        /// Tokens refilled per second.
        per_s: f64,
    },
    /// At most `limit` requests in any `window_s` seconds.
    SlidingWindow {
        /// The name the budget gets in a limiter or a saved profile.
        #[serde(skip, default)]
        name: String,
        /// The most requests in any window.
        limit: u64,
        /// The window's length in seconds.
        window_s: f64,
    },
}

impl SuggestedBudget {
    /// The name it gets in a limiter or a saved profile.
    pub fn name(&self) -> &str {
        match self {
            Self::TokenBucket { name, .. } | Self::SlidingWindow { name, .. } => name,
        }
    }

    /// The engine's budget.
    pub fn to_spec(&self) -> Result<BudgetSpec, ConfigError> {
        match self {
            Self::TokenBucket { name, capacity, per_s } => BudgetSpec::token_bucket(
                name,
                *capacity,
                Rate::from_f64(round_to(*per_s, 1000.0), Duration::from_secs(1))?,
            ),
            Self::SlidingWindow { name, limit, window_s } => {
                BudgetSpec::sliding_window(name, *limit, Duration::from_millis((window_s * 1000.0).ceil() as u64))
            }
        }
    }

    /// The same budget `margin` below (to three decimals): a window allows fewer requests, or
    /// (when that rounds to the same number) lasts longer; a bucket refills slower always, and
    /// holds less when the cut is at least one whole request.
    pub fn with_margin(&self, margin: f64) -> Self {
        match self {
            Self::SlidingWindow { name, limit, window_s } => {
                let cut = (*limit as f64 * margin).floor() as u64;
                let (limit, window_s) =
                    if cut >= 1 { (limit - cut, *window_s) } else { (*limit, window_s * (1.0 + margin)) };
                Self::SlidingWindow { name: name.clone(), limit: limit.max(1), window_s: round3(window_s) }
            }
            Self::TokenBucket { name, capacity, per_s } => {
                let cut = (*capacity as f64 * margin).floor() as u64;
                Self::TokenBucket {
                    name: name.clone(),
                    capacity: capacity.saturating_sub(cut).max(1),
                    per_s: round3(per_s * (1.0 - margin)).max(0.001),
                }
            }
        }
    }

    /// Requests per second it allows in the long run.
    pub fn sustained_per_s(&self) -> f64 {
        match self {
            Self::TokenBucket { per_s, .. } => *per_s,
            Self::SlidingWindow { limit, window_s, .. } => *limit as f64 / window_s,
        }
    }

    /// Requests it allows at once.
    pub fn burst(&self) -> u64 {
        match self {
            Self::TokenBucket { capacity, .. } => *capacity,
            Self::SlidingWindow { limit, .. } => *limit,
        }
    }

    /// E.g. `bucket 10 @ 4.75/s` or `window 95/60s`.
    pub fn describe(&self) -> String {
        match self {
            Self::TokenBucket { capacity, per_s, .. } => format!("bucket {capacity} @ {}/s", trim(*per_s)),
            Self::SlidingWindow { limit, window_s, .. } => format!("window {limit}/{}s", trim(*window_s)),
        }
    }
}

/// The settings the probe suggests (or found, before the margin).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Suggestion {
    /// The budgets to pace by (none when nothing limited the probe).
    pub budgets: Vec<SuggestedBudget>,
    /// The most requests in flight, when a concurrency limit was found.
    pub concurrency: Option<usize>,
}

impl Suggestion {
    /// Names unnamed budgets (as read back from JSON) by kind and place: `rate`, `rate-2`,
    /// `window`, `window-2`, ...
    pub fn name_budgets(&mut self) {
        let (mut buckets, mut windows) = (0, 0);
        for budget in &mut self.budgets {
            let (count, base, name) = match budget {
                SuggestedBudget::TokenBucket { name, .. } => (&mut buckets, "rate", name),
                SuggestedBudget::SlidingWindow { name, .. } => (&mut windows, "window", name),
            };
            *count += 1;
            if name.is_empty() {
                *name = if *count == 1 { base.to_owned() } else { format!("{base}-{count}") };
            }
        }
    }

    /// The settings in one line: `bucket 5 @ 4.75/s, window 95/60s, concurrency 4` (empty when
    /// there are none).
    pub fn describe(&self) -> String {
        let mut parts: Vec<String> = self.budgets.iter().map(SuggestedBudget::describe).collect();
        if let Some(limit) = self.concurrency {
            parts.push(format!("concurrency {limit}"));
        }
        parts.join(", ")
    }

    /// The limiter these settings describe (checked: a zero rate or window is an error).
    pub fn limiter_config(&self) -> Result<LimiterConfig, ConfigError> {
        ProbeReport::config_of(self)
    }

    /// Every budget `margin` below; the concurrency as it is.
    pub fn with_margin(&self, margin: f64) -> Self {
        Self { budgets: self.budgets.iter().map(|b| b.with_margin(margin)).collect(), concurrency: self.concurrency }
    }
}

/// How much to trust a suggestion.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Confidence {
    /// The server published every limit with its window.
    High,
    /// Measured, or read from headers that leave something to infer.
    Medium,
    /// Too little to go on: a guess that errs on the slow side, or nothing.
    Low,
}

impl fmt::Display for Confidence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::High => "high",
            Self::Medium => "medium",
            Self::Low => "low",
        })
    }
}

/// Everything a probe found.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProbeReport {
    /// What to configure: what was found, less the margin.
    pub suggested: Suggestion,
    /// What was found, before the margin (the same shape).
    pub found: Suggestion,
    /// What was observed, one line per fact, in order.
    pub evidence: Vec<String>,
    /// Requests sent, never more than the maximum given.
    pub requests_used: usize,
    /// How sure the suggestion is, and why.
    pub confidence: Confidence,
    /// The reasons for the confidence, one sentence each.
    pub reasons: Vec<String>,
    /// Refusals (429, or 503 with Retry-After) the probe met.
    pub throttled: usize,
    /// Limits found: each published policy, or a measured window, or a bucket's capacity and its rate.
    pub discovered: usize,
    /// How long the probe took (seconds).
    pub elapsed_s: f64,
    /// Budgets the headers report in units other than requests (tokens, points), as last seen:
    /// the suggestion paces requests, these say what else the API counts.
    pub unit_budgets: Vec<UnitBudget>,
}

/// A budget counting tokens, points or another unit, as the server's headers last reported it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct UnitBudget {
    /// The server's name for the budget.
    pub name: String,
    /// What it counts (`tokens`, `points`, ...).
    pub unit: String,
    /// Its limit, when reported.
    pub limit: Option<f64>,
    /// What was left, when reported.
    pub remaining: Option<f64>,
    /// Seconds until it restores, when reported.
    pub resets_in_s: Option<f64>,
    /// Its window in seconds, when reported.
    pub window_s: Option<f64>,
    /// The header dialect that reported it (`openai`, `anthropic`, ...).
    pub source: String,
}

impl UnitBudget {
    /// `tokens 'tokens' 200000 per 1m, 199000 left (openai)`.
    pub fn describe(&self) -> String {
        let mut text = format!("{} '{}'", self.unit, self.name);
        if let Some(limit) = self.limit {
            text.push_str(&format!(" {}", trim(limit)));
            if let Some(window) = self.window_s {
                text.push_str(&format!(" per {}s", trim(window)));
            }
        }
        if let Some(remaining) = self.remaining {
            text.push_str(&format!(", {} left", trim(remaining)));
        }
        if let Some(reset) = self.resets_in_s {
            text.push_str(&format!(", full in {}s", trim(reset)));
        }
        format!("{text} ({})", self.source)
    }
}

impl ProbeReport {
    /// The JSON form (as a value; serializing the report itself keeps the field order):
    /// `{"suggested": {"budgets": [...], "concurrency": n|null}, "found": {...the same shape,
    /// before the margin}, "evidence": [...],
    /// "requests_used": n, "confidence": "high|medium|low", "reasons": [...], "throttled": n,
    /// "discovered": n, "elapsed_s": x, "unit_budgets": [...]}`.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }

    /// The suggestion as limiter settings.
    pub fn limiter_config(&self) -> Result<LimiterConfig, ConfigError> {
        Self::config_of(&self.suggested)
    }

    /// `suggestion` as limiter settings.
    pub(super) fn config_of(suggestion: &Suggestion) -> Result<LimiterConfig, ConfigError> {
        let mut config = LimiterConfig::new();
        for budget in &suggestion.budgets {
            config = config.with_budget(budget.to_spec()?);
        }
        if let Some(limit) = suggestion.concurrency {
            config = config.with_concurrency(limit);
        }
        config.validate()?;
        Ok(config)
    }

    /// A profile of one host (`base_url`) with the suggested limits.
    pub fn to_profile(&self, name: &str, base_url: &str) -> Result<Profile, ConfigError> {
        let config = self.limiter_config()?;
        Ok(Profile::from_limiter_config(name, host_name(base_url), base_url, &config))
    }
}

/// A host's name in a profile: its `host[:port]`.
fn host_name(base_url: &str) -> String {
    url::Url::parse(base_url)
        .ok()
        .and_then(|url| {
            let host = url.host_str()?.to_owned();
            Some(url.port().map_or(host.clone(), |port| format!("{host}:{port}")))
        })
        .unwrap_or_else(|| "api".to_owned())
}

impl fmt::Display for ProbeReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let suggested = match self.suggested.describe() {
            text if text.is_empty() => "no limits found".to_owned(),
            text => text,
        };
        writeln!(f, "suggested:  {suggested}")?;
        writeln!(f, "confidence: {}", self.confidence)?;
        for reason in &self.reasons {
            writeln!(f, "  - {reason}")?;
        }
        writeln!(f, "requests:   {} sent, {} refused, {:.1}s", self.requests_used, self.throttled, self.elapsed_s)?;
        for budget in &self.unit_budgets {
            writeln!(f, "also counts: {}", budget.describe())?;
        }
        writeln!(f, "evidence:")?;
        for line in &self.evidence {
            writeln!(f, "  {line}")?;
        }
        Ok(())
    }
}

/// A number with at most three decimals and no trailing zeros (an exponent from 10^15 on).
pub(crate) fn trim(value: f64) -> String {
    crate::engine::format_number(value)
}

fn round3(value: f64) -> f64 {
    round_to(value, 1000.0)
}

fn round_to(value: f64, scale: f64) -> f64 {
    (value * scale).round() / scale
}
