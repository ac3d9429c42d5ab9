//! Adaptive mode: the server's published budgets tighten a key's limiter, never loosen it.
//!
//! Rules: a budget with nothing remaining pauses the key until its reset; a budget
//! counting requests with a known limit and window becomes an exact sliding window
//! named `server:<name>`, added beside the configured budgets (so the tighter of the
//! two always governs). Budgets in other units (tokens, points) only ever pause.

use std::time::Duration;

use tokio::time::Instant;

use super::headers::RateLimitInfo;
use crate::engine::{BudgetKind, BudgetSpec, Limiter, LimiterConfig, format_wait};

/// Prefix of budgets learned from the server.
pub const SERVER_BUDGET_PREFIX: &str = "server:";

/// The longest pause adaptive mode applies from a reported reset (guards against absurd resets).
pub const MAX_ADAPTIVE_PAUSE: Duration = Duration::from_secs(24 * 3600);

/// The config a key should have after seeing `info`, if it differs from `current`.
pub fn learned_config(current: &LimiterConfig, info: &RateLimitInfo) -> Option<LimiterConfig> {
    let mut next = current.clone();
    for budget in &info.budgets {
        let (Some(limit), Some(window)) = (budget.limit, budget.window) else { continue };
        if budget.unit != "requests" || limit < 1.0 || window.is_zero() {
            continue;
        }
        let name = format!("{SERVER_BUDGET_PREFIX}{}", budget.name);
        let Ok(spec) = BudgetSpec::sliding_window(&name, limit.floor() as u64, window) else { continue };
        match next.budgets.iter_mut().find(|existing| existing.name == name) {
            Some(existing) => *existing = spec,
            None => next.budgets.push(spec),
        }
    }
    (next != *current && next.validate().is_ok()).then_some(next)
}

/// When the key must pause: the latest reset of an exhausted budget, and why.
pub fn exhausted_until(info: &RateLimitInfo) -> Option<(Duration, String)> {
    info.budgets
        .iter()
        .filter(|budget| budget.remaining.is_some_and(|remaining| remaining < 1.0))
        .filter_map(|budget| Some((budget.reset_after?.min(MAX_ADAPTIVE_PAUSE), budget)))
        .filter(|(reset, _)| !reset.is_zero())
        .max_by_key(|(reset, _)| *reset)
        .map(|(reset, budget)| {
            (reset, format!("server budget '{}' exhausted, resets in {}", budget.name, format_wait(reset)))
        })
}

/// Applies `info` to `limiter`; returns what it did, for events and logs.
pub fn apply(limiter: &Limiter, info: &RateLimitInfo, now: Instant) -> Vec<String> {
    let mut actions = Vec::new();
    if let Some((pause, reason)) = exhausted_until(info) {
        limiter.pause_until(now + pause, reason.clone());
        actions.push(reason);
    }
    if let Some(config) = learned_config(&limiter.config(), info) {
        let learned: Vec<String> = config
            .budgets
            .iter()
            .filter(|spec| spec.name.starts_with(SERVER_BUDGET_PREFIX))
            .filter(|spec| matches!(spec.kind, BudgetKind::SlidingWindow { .. }))
            .map(BudgetSpec::describe)
            .collect();
        if limiter.reconfigure(config).is_ok() {
            actions.push(format!("limits learned from the server: {}", learned.join(", ")));
        }
    }
    actions
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::headers::ServerBudget;

    fn info(limit: f64, remaining: f64, reset: u64, window: Option<u64>) -> RateLimitInfo {
        RateLimitInfo {
            status: Some(200),
            budgets: vec![ServerBudget {
                name: "minute".into(),
                limit: Some(limit),
                remaining: Some(remaining),
                reset_after: Some(Duration::from_secs(reset)),
                window: window.map(Duration::from_secs),
                unit: "requests".into(),
                source: "ietf-draft".into(),
            }],
            retry_after: None,
            throttled: false,
            warnings: vec![],
        }
    }

    #[test]
    fn a_published_policy_becomes_a_sliding_window_beside_configured_budgets() {
        let configured =
            LimiterConfig::new().with_budget(BudgetSpec::token_bucket("rate", 10, "10/1s".parse().unwrap()).unwrap());
        let learned = learned_config(&configured, &info(100.0, 50.0, 30, Some(60))).unwrap();
        assert_eq!(learned.budgets.len(), 2);
        assert_eq!(learned.budgets[1].describe(), "window 100/1m");
        assert_eq!(learned.budgets[1].name, "server:minute");
        assert!(learned_config(&learned, &info(100.0, 10.0, 5, Some(60))).is_none(), "nothing new to learn");
        assert!(learned_config(&configured, &info(100.0, 50.0, 30, None)).is_none(), "no window, no budget");
    }

    #[test]
    fn an_exhausted_budget_pauses_until_its_reset() {
        let (pause, reason) = exhausted_until(&info(100.0, 0.0, 12, Some(60))).unwrap();
        assert_eq!(pause, Duration::from_secs(12));
        assert_eq!(reason, "server budget 'minute' exhausted, resets in 12.0s");
        assert!(exhausted_until(&info(100.0, 3.0, 12, Some(60))).is_none());
        assert_eq!(exhausted_until(&info(1.0, 0.0, 10_000_000, None)).unwrap().0, MAX_ADAPTIVE_PAUSE);
    }
}
