//! A profile's limits held against what a probe found: each budget confirmed, too high (expect
//! refusals: lower it) or well below what the server allows, with what to write instead.

use std::fmt;

use serde::Serialize;

use super::report::{ProbeReport, SuggestedBudget, trim};
use crate::engine::{BudgetKind, BudgetSpec, LimitKey, LimiterConfig, Unit};

/// A profile may allow up to this much more than was found before it counts as too high: a
/// limit measured without headers is only known to a few percent.
const TOLERANCE: f64 = 1.05;
/// A profile allowing less than this share of what was found leaves most of the budget unused.
const CONSERVATIVE: f64 = 0.5;

/// How one of the profile's limits compares with the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Within what the server allows, and not far below it.
    Confirmed,
    /// Above what the server allows: expect refusals.
    TooHigh,
    /// Well below what the server allows: slower than it needs to be.
    Conservative,
    /// The probe saw nothing to compare it with.
    Unseen,
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Confirmed => "confirmed",
            Self::TooHigh => "too high",
            Self::Conservative => "below",
            Self::Unseen => "unseen",
        })
    }
}

/// One comparison: what the profile says, what the server showed, the verdict and the advice.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LimitCheck {
    /// The profile's side: `'minute' window 100/1m`, `concurrency 4`, or `no limit`.
    pub profile: String,
    /// The server's side, as found (before the margin), when seen.
    pub server: Option<String>,
    /// Confirmed, too high, below what the server allows, or not seen by the probe.
    pub verdict: Verdict,
    /// What to change, in a sentence.
    pub advice: String,
}

/// Every limit of the profile's key for the probed URL, held against the probe's findings.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProfileCheck {
    /// The profile's name.
    pub profile: String,
    /// The profile's host the URL belongs to.
    pub host: String,
    /// The limiter key whose limits apply to the probed URL.
    pub key: String,
    /// One verdict per limit of that key.
    pub checks: Vec<LimitCheck>,
}

impl ProfileCheck {
    /// Compares `config` (the limits the profile gives the probed URL's key) with `report`.
    pub fn new(profile: &str, host: &str, key: &LimitKey, config: &LimiterConfig, report: &ProbeReport) -> Self {
        let requests: Vec<&BudgetSpec> = config.budgets.iter().filter(|b| b.unit == Unit::Requests).collect();
        let slowest = report.found.budgets.iter().map(SuggestedBudget::sustained_per_s).fold(f64::INFINITY, f64::min);
        let mut checks: Vec<LimitCheck> = report
            .found
            .budgets
            .iter()
            .zip(&report.suggested.budgets)
            .map(|(f, s)| request_check(&requests, f, s, f.sustained_per_s() <= slowest))
            .collect();
        if report.found.budgets.is_empty() {
            checks.extend(requests.iter().map(|budget| unseen(budget, report.requests_used)));
        }
        checks.extend(concurrency_check(config.concurrency, report.found.concurrency));
        for budget in config.budgets.iter().filter(|b| b.unit != Unit::Requests) {
            checks.push(unit_check(budget, report));
        }
        Self { profile: profile.to_owned(), host: host.to_owned(), key: key.to_string(), checks }
    }

    /// Whether any limit is above what the server allows.
    pub fn too_high(&self) -> bool {
        self.checks.iter().any(|check| check.verdict == Verdict::TooHigh)
    }
}

impl fmt::Display for ProfileCheck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "profile '{}', host '{}' (key {}):", self.profile, self.host, self.key)?;
        if self.checks.is_empty() {
            writeln!(f, "  nothing to compare: the profile sets no limit and the probe found none")?;
        }
        for check in &self.checks {
            let server = check.server.as_deref().map(|s| format!("; server: {s}")).unwrap_or_default();
            writeln!(f, "  {:<10} {}{server}: {}", check.verdict.to_string(), check.profile, check.advice)?;
        }
        Ok(())
    }
}

/// `'minute' window 100/1m`.
fn label(budget: &BudgetSpec) -> String {
    format!("'{}' {}", budget.name, budget.describe())
}

/// Requests `budget` lets through at once.
fn burst(budget: &BudgetSpec) -> f64 {
    let units = match budget.kind {
        BudgetKind::TokenBucket { capacity, .. } => capacity,
        BudgetKind::SlidingWindow { limit, .. } => limit,
    };
    units as f64 / budget.cost.max(1) as f64
}

/// Compares the profile's request budgets with one found budget on two axes: what goes at
/// once, and what goes per second in the long run (so a bucket and a window of the same size
/// and rate agree). `binding`: this found budget is the slowest in the long run, the one a
/// profile far below it leaves unused.
fn request_check(
    profile: &[&BudgetSpec],
    found: &SuggestedBudget,
    suggested: &SuggestedBudget,
    binding: bool,
) -> LimitCheck {
    let server = Some(found.describe());
    let fix = suggested.describe();
    let tightest = |axis: fn(&BudgetSpec) -> f64| profile.iter().copied().min_by(|a, b| axis(a).total_cmp(&axis(b)));
    let (Some(by_burst), Some(by_rate)) = (tightest(burst), tightest(sustained)) else {
        return LimitCheck {
            profile: "no request budget".into(),
            server,
            verdict: Verdict::TooHigh,
            advice: format!("nothing holds requests back; add {fix}"),
        };
    };
    let (ours_burst, theirs_burst) = (burst(by_burst), found.burst() as f64);
    let (ours_rate, theirs_rate) = (sustained(by_rate), found.sustained_per_s());
    let (verdict, budget, advice) = if ours_burst > theirs_burst * TOLERANCE {
        let advice = format!(
            "lets {} go at once where the server allows {}: expect refusals; use {fix}",
            trim(ours_burst),
            trim(theirs_burst)
        );
        (Verdict::TooHigh, by_burst, advice)
    } else if ours_rate > theirs_rate * TOLERANCE {
        let advice = format!(
            "allows {}/s in the long run where the server allows {}/s: expect refusals; use {fix}",
            trim(ours_rate),
            trim(theirs_rate)
        );
        (Verdict::TooHigh, by_rate, advice)
    } else if binding && ours_rate < theirs_rate * CONSERVATIVE {
        let advice =
            format!("allows {}/s of the server's {}/s: {fix} would go faster", trim(ours_rate), trim(theirs_rate));
        (Verdict::Conservative, by_rate, advice)
    } else {
        let advice = format!(
            "{} at once and {}/s, within the server's {} and {}/s",
            trim(ours_burst),
            trim(ours_rate),
            trim(theirs_burst),
            trim(theirs_rate)
        );
        (Verdict::Confirmed, by_rate, advice)
    };
    LimitCheck { profile: label(budget), server, verdict, advice }
}

/// Requests a second `budget` allows in the long run.
fn sustained(budget: &BudgetSpec) -> f64 {
    let per_s = match budget.kind {
        BudgetKind::TokenBucket { refill, .. } => refill.per_second(),
        BudgetKind::SlidingWindow { limit, window } => limit as f64 / window.as_secs_f64(),
    };
    per_s / budget.cost.max(1) as f64
}

/// The most units `budget` lets through in any span of `span_s` seconds.
fn allowance(budget: &BudgetSpec, span_s: f64) -> f64 {
    let units = match budget.kind {
        BudgetKind::TokenBucket { capacity, refill } => capacity as f64 + refill.per_second() * span_s,
        BudgetKind::SlidingWindow { limit, window } => limit as f64 * (span_s / window.as_secs_f64()).ceil().max(1.0),
    };
    units / budget.cost.max(1) as f64
}

fn verdict_check(profile: String, server: Option<String>, ours: f64, theirs: f64, what: &str, fix: &str) -> LimitCheck {
    let (verdict, advice) = if ours > theirs * TOLERANCE {
        (
            Verdict::TooHigh,
            format!(
                "allows {} {what} where the server allows {}: expect refusals; use {fix}",
                trim(ours),
                trim(theirs)
            ),
        )
    } else if ours < theirs * CONSERVATIVE {
        (
            Verdict::Conservative,
            format!("allows {} {what} of the server's {}: {fix} would go faster", trim(ours), trim(theirs)),
        )
    } else {
        (Verdict::Confirmed, format!("allows {} {what}, the server {}", trim(ours), trim(theirs)))
    };
    LimitCheck { profile, server, verdict, advice }
}

fn unseen(budget: &BudgetSpec, requests: usize) -> LimitCheck {
    LimitCheck {
        profile: label(budget),
        server: None,
        verdict: Verdict::Unseen,
        advice: format!("the probe met no limit in {requests} requests and read none in the headers: not confirmed"),
    }
}

fn concurrency_check(ours: Option<usize>, found: Option<usize>) -> Option<LimitCheck> {
    let theirs = found?;
    let server = Some(format!("concurrency {theirs}"));
    Some(match ours {
        None => LimitCheck {
            profile: "no concurrency cap".into(),
            server,
            verdict: Verdict::TooHigh,
            advice: format!("add concurrency = {theirs}"),
        },
        Some(ours) => verdict_check(
            format!("concurrency {ours}"),
            server,
            ours as f64,
            theirs as f64,
            "in flight",
            &format!("concurrency = {theirs}"),
        ),
    })
}

/// A tokens or points budget against the same unit's budget in the headers (its limit, and its
/// window when both are known).
fn unit_check(budget: &BudgetSpec, report: &ProbeReport) -> LimitCheck {
    let Some(seen) = report.unit_budgets.iter().find(|seen| seen.unit == budget.unit.as_str() && seen.limit.is_some())
    else {
        return LimitCheck {
            profile: label(budget),
            server: None,
            verdict: Verdict::Unseen,
            advice: format!("no answer reported a {} budget: not confirmed", budget.unit),
        };
    };
    let theirs = seen.limit.unwrap_or_default();
    let (ours, span) = match (budget.kind, seen.window_s) {
        (_, Some(window_s)) => (allowance(budget, window_s), format!("in {}s", trim(window_s))),
        (BudgetKind::TokenBucket { capacity, .. }, None) => (capacity as f64, "at once".to_owned()),
        (BudgetKind::SlidingWindow { limit, .. }, None) => (limit as f64, "per window".to_owned()),
    };
    let fix = format!("a {} budget of {}", budget.unit, trim(theirs));
    verdict_check(label(budget), Some(seen.describe()), ours, theirs, &format!("{} {span}", budget.unit), &fix)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::{Confidence, Suggestion, UnitBudget};
    use std::time::Duration;

    fn report(found: Vec<SuggestedBudget>, unit_budgets: Vec<UnitBudget>) -> ProbeReport {
        let found = Suggestion { budgets: found, concurrency: None };
        ProbeReport {
            suggested: found.with_margin(0.05),
            found,
            evidence: Vec::new(),
            requests_used: 10,
            confidence: Confidence::High,
            reasons: Vec::new(),
            throttled: 0,
            discovered: 1,
            elapsed_s: 1.0,
            unit_budgets,
        }
    }

    fn window(limit: u64, window_s: f64) -> SuggestedBudget {
        SuggestedBudget::SlidingWindow { name: "w".into(), limit, window_s }
    }

    fn config(budgets: Vec<BudgetSpec>) -> LimiterConfig {
        budgets.into_iter().fold(LimiterConfig::new(), LimiterConfig::with_budget)
    }

    fn verdicts(config: &LimiterConfig, report: &ProbeReport) -> Vec<Verdict> {
        let key = LimitKey::host("api.example.com").unwrap();
        ProfileCheck::new("p", "h", &key, config, report).checks.iter().map(|check| check.verdict).collect()
    }

    #[test]
    fn a_window_above_the_servers_is_too_high_and_one_at_it_confirmed() {
        let found = report(vec![window(10, 60.0)], Vec::new());
        let minute = Duration::from_secs(60);
        let high = config(vec![BudgetSpec::sliding_window("minute", 100, minute).unwrap()]);
        assert_eq!(verdicts(&high, &found), [Verdict::TooHigh]);
        let right = config(vec![BudgetSpec::sliding_window("minute", 10, minute).unwrap()]);
        assert_eq!(verdicts(&right, &found), [Verdict::Confirmed]);
        let low = config(vec![BudgetSpec::sliding_window("minute", 2, minute).unwrap()]);
        assert_eq!(verdicts(&low, &found), [Verdict::Conservative]);
        assert_eq!(verdicts(&LimiterConfig::new(), &found), [Verdict::TooHigh], "no limit at all is too high");
        let text = ProfileCheck::new("p", "h", &LimitKey::host("a.example").unwrap(), &high, &found).to_string();
        assert!(text.contains("too high   'minute' window 100/1m"), "{text}");
        assert!(text.contains("lets 100 go at once where the server allows 10"), "{text}");
    }

    #[test]
    fn the_tightest_budget_speaks_for_the_profile() {
        let found = report(vec![window(10, 60.0)], Vec::new());
        let stacked = config(vec![
            BudgetSpec::token_bucket("rate", 5, crate::engine::Rate::new(5, Duration::from_secs(1)).unwrap()).unwrap(),
            BudgetSpec::sliding_window("minute", 10, Duration::from_secs(60)).unwrap(),
        ]);
        assert_eq!(verdicts(&stacked, &found), [Verdict::Confirmed]);
    }

    #[test]
    fn a_bucket_of_a_windows_size_and_rate_agrees_with_it_and_a_lax_minute_is_caught() {
        // The demo API publishes 5 per second and 100 per minute; its profile holds a bucket of
        // 5 at 5/s beside a minute window.
        let found = report(vec![window(5, 1.0), window(100, 60.0)], Vec::new());
        let rate = crate::engine::Rate::new(5, Duration::from_secs(1)).unwrap();
        let profile = |minute| {
            config(vec![
                BudgetSpec::token_bucket("rate", 5, rate).unwrap(),
                BudgetSpec::sliding_window("minute", minute, Duration::from_secs(60)).unwrap(),
            ])
        };
        assert_eq!(verdicts(&profile(100), &found), [Verdict::Confirmed, Verdict::Confirmed]);
        assert_eq!(verdicts(&profile(1000), &found), [Verdict::Confirmed, Verdict::TooHigh]);
        let key = LimitKey::host("a.example").unwrap();
        let text = ProfileCheck::new("p", "h", &key, &profile(1000), &found).to_string();
        assert!(text.contains("allows 5/s in the long run where the server allows 1.667/s"), "{text}");
    }

    #[test]
    fn token_budgets_are_held_against_the_headers_and_unseen_ones_said_so() {
        let tokens = UnitBudget {
            name: "tokens".into(),
            unit: "tokens".into(),
            limit: Some(40_000.0),
            remaining: Some(39_000.0),
            resets_in_s: Some(1.0),
            window_s: None,
            source: "openai".into(),
        };
        let found = report(Vec::new(), vec![tokens]);
        let budget = |limit| {
            BudgetSpec::sliding_window("tokens", limit, Duration::from_secs(60)).unwrap().with_unit(Unit::tokens())
        };
        assert_eq!(verdicts(&config(vec![budget(200_000)]), &found), [Verdict::TooHigh]);
        assert_eq!(verdicts(&config(vec![budget(40_000)]), &found), [Verdict::Confirmed]);
        let points = BudgetSpec::sliding_window("p", 10, Duration::from_secs(1)).unwrap().with_unit(Unit::points());
        let minute = BudgetSpec::sliding_window("minute", 10, Duration::from_secs(60)).unwrap();
        assert_eq!(verdicts(&config(vec![minute, points]), &found), [Verdict::Unseen, Verdict::Unseen]);
    }
}
