//! Server models for the simulator: what a probe found, or a limiter's settings, written as the
//! demo API's config (one route `/` whose policies are those limits).
//!
//! `tune` and `replay` run against such a model when there is no server config of the API's
//! own: `probe --json` output (its `found` budgets and concurrency, before the margin: the
//! server's truth as measured), or a profile host's limits (what the user knows of the server).
//! [`tightened`] makes a model a margin stricter, so a setting judged against it keeps that
//! margin against the real server.

use std::path::Path;

use thiserror::Error;

use crate::engine::{BudgetKind, ConfigError, LimiterConfig, Rate, Unit};
use crate::mock::{Latency, MockConfig, MockError, PolicyKind, PolicySpec, RouteConfig};
use crate::probe::Suggestion;

/// Why a server model could not be made.
#[derive(Debug, Error)]
pub enum ModelError {
    /// The probe report could not be read.
    #[error("cannot read the probe report {path}: {message}")]
    Read {
        /// The file.
        path: std::path::PathBuf,
        /// What went wrong.
        message: String,
    },
    /// The text is not `probe --json` output.
    #[error(
        "{source_name} is not `ratescope probe --json` output ({message}); make one with `ratescope probe URL --json > probe.json`"
    )]
    NotAProbeReport {
        /// Where the text came from.
        source_name: String,
        /// What the JSON reader said.
        message: String,
    },
    /// A budget of the report or the limits is impossible (zero rate, zero window, ...).
    #[error("{source_name}: {source}")]
    Limits {
        /// Where the limits came from.
        source_name: String,
        /// What is wrong with them.
        source: ConfigError,
    },
    /// The model the limits make is refused by the demo API's checks.
    #[error(transparent)]
    Server(#[from] MockError),
}

/// The probe report's fields a model needs.
#[derive(serde::Deserialize)]
struct ProbeJson {
    found: Suggestion,
}

/// The server a `probe --json` report describes: its `found` limits (not the suggestion: the
/// margin is the client's to keep), answering 429 with `Retry-After` and IETF headers.
pub fn from_probe_json(text: &str, source_name: &str) -> Result<MockConfig, ModelError> {
    let report: ProbeJson = serde_json::from_str(text)
        .map_err(|err| ModelError::NotAProbeReport { source_name: source_name.to_owned(), message: err.to_string() })?;
    let mut found = report.found;
    found.name_budgets();
    let limits =
        found.limiter_config().map_err(|source| ModelError::Limits { source_name: source_name.to_owned(), source })?;
    from_limits(&limits)
}

/// [`from_probe_json`] of a file (size-capped like every config file).
pub fn from_probe_file(path: &Path) -> Result<MockConfig, ModelError> {
    let read_error = |message: String| ModelError::Read { path: path.to_owned(), message };
    let bytes =
        crate::files::read_capped(path, crate::files::MAX_CONFIG_BYTES).map_err(|err| read_error(err.to_string()))?;
    let text = String::from_utf8(bytes).map_err(|_| read_error("the file is not UTF-8 text".to_owned()))?;
    from_probe_json(&text, &path.display().to_string())
}

/// A server enforcing `limits` on every path: each budget counting requests becomes a policy
/// (a bucket stays a bucket, a window a sliding window), the concurrency cap a concurrency
/// policy. Budgets in other units (tokens, points) are left out: a model counts requests.
pub fn from_limits(limits: &LimiterConfig) -> Result<MockConfig, ModelError> {
    let mut route = RouteConfig::new("/");
    for budget in limits.budgets.iter().filter(|budget| budget.unit == Unit::Requests) {
        let kind = match budget.kind {
            BudgetKind::TokenBucket { capacity, refill } => PolicyKind::TokenBucket { capacity, rate: refill },
            BudgetKind::SlidingWindow { limit, window } => PolicyKind::SlidingWindow { limit, window },
        };
        route.policies.push(PolicySpec::new(policy_name(&budget.name, route.policies.len()), kind));
    }
    if let Some(limit) = limits.concurrency {
        route.policies.push(PolicySpec::new("concurrency", PolicyKind::Concurrency { limit: limit as u64 }));
    }
    let config = MockConfig { server: Default::default(), routes: vec![route] };
    config.validate()?;
    Ok(config)
}

/// A policy name the demo API accepts (it is sent in headers): the budget's, or `limit-N`.
fn policy_name(name: &str, index: usize) -> String {
    let named = PolicySpec::new(name, PolicyKind::Concurrency { limit: 1 });
    if named.validate().is_ok() { name.to_owned() } else { format!("limit-{}", index + 1) }
}

/// Every route of `config` with `latency` (a probe does not say how slow the server answers).
pub fn with_latency(mut config: MockConfig, latency: Latency) -> MockConfig {
    for route in &mut config.routes {
        route.latency = latency;
    }
    config
}

/// `config` a `margin` (0 to 0.5) stricter: buckets refill `margin` slower, windows last
/// `margin` longer; capacities and concurrency stay. A client that meets no refusal from the
/// tightened model keeps that margin against the real server, for its network jitter and for a
/// measurement a little off.
pub fn tightened(config: &MockConfig, margin: f64) -> MockConfig {
    let margin = if margin.is_finite() { margin.clamp(0.0, 0.5) } else { 0.0 };
    let mut config = config.clone();
    for policy in config.routes.iter_mut().flat_map(|route| route.policies.iter_mut()) {
        policy.kind = match policy.kind {
            PolicyKind::TokenBucket { capacity, rate } => {
                PolicyKind::TokenBucket { capacity, rate: slower(rate, 1.0 - margin) }
            }
            PolicyKind::FixedWindow { limit, window } => {
                PolicyKind::FixedWindow { limit, window: window.mul_f64(1.0 + margin) }
            }
            PolicyKind::SlidingWindow { limit, window } => {
                PolicyKind::SlidingWindow { limit, window: window.mul_f64(1.0 + margin) }
            }
            concurrency @ PolicyKind::Concurrency { .. } => concurrency,
        };
    }
    config
}

/// `rate` times `factor` (below 1): the same amount over a longer period, so a whole-number
/// rate stays exact.
fn slower(rate: Rate, factor: f64) -> Rate {
    if factor >= 1.0 {
        return rate;
    }
    Rate::new(rate.amount(), rate.per().div_f64(factor.max(0.5))).unwrap_or(rate)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const NGINX_PROBE: &str = r#"{
        "suggested": {"budgets": [{"kind": "token_bucket", "capacity": 5, "per_s": 9.5}], "concurrency": null},
        "found": {"budgets": [{"kind": "token_bucket", "capacity": 6, "per_s": 10.0},
                              {"kind": "sliding_window", "limit": 100, "window_s": 60.0}], "concurrency": 4},
        "evidence": [], "requests_used": 40, "confidence": "medium", "reasons": [], "throttled": 2,
        "discovered": 1, "elapsed_s": 3.2, "unit_budgets": []
    }"#;

    #[test]
    fn a_probe_report_becomes_its_found_limits_on_every_path() {
        let config = from_probe_json(NGINX_PROBE, "probe.json").unwrap();
        assert_eq!(config.routes.len(), 1);
        let route = &config.routes[0];
        assert!(route.matches("/anything/at/all"));
        let kinds: Vec<PolicyKind> = route.policies.iter().map(|p| p.kind).collect();
        assert_eq!(
            kinds,
            vec![
                PolicyKind::TokenBucket { capacity: 6, rate: Rate::new(10, Duration::from_secs(1)).unwrap() },
                PolicyKind::SlidingWindow { limit: 100, window: Duration::from_secs(60) },
                PolicyKind::Concurrency { limit: 4 },
            ]
        );
        let names: Vec<&str> = route.policies.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["rate", "window", "concurrency"]);
    }

    #[test]
    fn what_is_not_a_probe_report_says_how_to_make_one() {
        for text in ["", "{}", "[1,2]", r#"{"found": {"budgets": [{"kind": "leaky"}]}}"#] {
            let err = from_probe_json(text, "x.json").unwrap_err().to_string();
            assert!(err.contains("x.json") && err.contains("ratescope probe URL --json"), "{err}");
        }
    }

    #[test]
    fn impossible_found_limits_are_refused_with_the_reason() {
        for budget in [
            r#"{"kind": "token_bucket", "capacity": 5, "per_s": 0}"#,
            r#"{"kind": "token_bucket", "capacity": 0, "per_s": 3}"#,
            r#"{"kind": "sliding_window", "limit": 10, "window_s": -1}"#,
            r#"{"kind": "token_bucket", "capacity": 5, "per_s": 1e308}"#,
        ] {
            let text = format!(r#"{{"found": {{"budgets": [{budget}], "concurrency": null}}}}"#);
            let err = from_probe_json(&text, "p.json").unwrap_err();
            assert!(matches!(err, ModelError::Limits { .. } | ModelError::Server(_)), "{budget}: {err}");
        }
    }

    #[test]
    fn a_report_that_found_nothing_is_a_server_without_limits() {
        let config = from_probe_json(r#"{"found": {"budgets": [], "concurrency": null}}"#, "p").unwrap();
        assert!(config.routes[0].policies.is_empty());
    }

    #[test]
    fn tightening_slows_buckets_and_stretches_windows_by_the_margin() {
        let config = tightened(&from_probe_json(NGINX_PROBE, "p").unwrap(), 0.05);
        let kinds: Vec<PolicyKind> = config.routes[0].policies.iter().map(|p| p.kind).collect();
        let PolicyKind::TokenBucket { capacity: 6, rate } = kinds[0] else { panic!("{kinds:?}") };
        assert!((rate.per_second() - 9.5).abs() < 1e-6, "{rate}");
        assert_eq!(kinds[1], PolicyKind::SlidingWindow { limit: 100, window: Duration::from_secs(63) });
        assert_eq!(kinds[2], PolicyKind::Concurrency { limit: 4 });
        assert_eq!(tightened(&config, f64::NAN), config, "NaN is no margin");
    }
}
