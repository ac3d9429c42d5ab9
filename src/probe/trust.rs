//! What a probe believes of a server's rate-limit headers: values no server can mean (a quota
//! beyond any plausible one, more remaining than the limit, a window or reset of years, values
//! the parser had to drop as negative or not numbers) and dialects that contradict each other
//! are named as doubts; the request budgets they touch are not used for the suggestion.

use std::time::Duration;

use super::report::trim;
use crate::engine::format_wait;
use crate::http::{RateLimitInfo, ServerBudget};

/// The largest request quota believed: a billion requests in one window is beyond any API's
/// published limit (and well inside what a limiter holds, 2^40).
pub(super) const MAX_PLAUSIBLE_LIMIT: f64 = 1e9;

/// The longest window or reset believed: a year (the limiter holds ten).
pub(super) const MAX_PLAUSIBLE_PERIOD: Duration = Duration::from_secs(366 * 86_400);

/// The most doubts a report lists; a server that lies differently on every answer would
/// otherwise fill it.
const MAX_DOUBTS: usize = 8;

/// The doubts met so far, each said once, at most [`MAX_DOUBTS`] of them (and how many more).
#[derive(Debug, Default)]
pub(super) struct Doubts {
    said: Vec<String>,
    more: usize,
}

impl Doubts {
    /// Notes what `info` (one answer) gives reason to doubt.
    pub(super) fn note(&mut self, info: &RateLimitInfo) {
        for doubt in doubts(info) {
            if self.said.contains(&doubt) {
                continue;
            }
            if self.said.len() < MAX_DOUBTS { self.said.push(doubt) } else { self.more += 1 }
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.said.is_empty()
    }

    /// The reasons they give for a low confidence, one sentence each.
    pub(super) fn reasons(&self) -> Vec<String> {
        if self.said.is_empty() {
            return Vec::new();
        }
        let mut reasons = vec![
            "the headers hold impossible or contradictory values, so confidence is low and the budgets they touch are not used"
                .to_owned(),
        ];
        reasons.extend(self.said.iter().map(|doubt| format!("doubt: {doubt}")));
        if self.more > 0 {
            reasons.push(format!("and {} more doubts of the same kind", self.more));
        }
        reasons
    }
}

/// Whether a request budget's values are possible: a limit of at least one and at most
/// [`MAX_PLAUSIBLE_LIMIT`], no more remaining than the limit, a window longer than zero, a
/// window and reset of at most [`MAX_PLAUSIBLE_PERIOD`].
pub(super) fn plausible(budget: &ServerBudget) -> bool {
    problem(budget).is_none()
}

/// What makes `budget` impossible, in a phrase.
fn problem(budget: &ServerBudget) -> Option<String> {
    if let Some(limit) = budget.limit {
        if limit > MAX_PLAUSIBLE_LIMIT {
            return Some(format!(
                "a limit of {} is beyond any plausible quota (at most {})",
                trim(limit),
                trim(MAX_PLAUSIBLE_LIMIT)
            ));
        }
        if limit < 1.0 {
            return Some(format!("a limit of {} lets no request through", trim(limit)));
        }
        if let Some(remaining) = budget.remaining.filter(|remaining| *remaining > limit) {
            return Some(format!("{} remaining is more than its limit of {}", trim(remaining), trim(limit)));
        }
    }
    if budget.window.is_some_and(|window| window.is_zero()) {
        return Some("a window of 0s holds no request".to_owned());
    }
    for (what, period) in [("window", budget.window), ("reset", budget.reset_after)] {
        if let Some(period) = period.filter(|period| *period > MAX_PLAUSIBLE_PERIOD) {
            return Some(format!("a {what} of {} is beyond any plausible period (a year)", format_wait(period)));
        }
    }
    None
}

/// The request budgets of `info` that can be believed: possible ones no other dialect contradicts.
pub(super) fn trusted(info: &RateLimitInfo) -> Vec<&ServerBudget> {
    let requests: Vec<&ServerBudget> = info.budgets.iter().filter(|b| b.unit == "requests").collect();
    requests
        .iter()
        .copied()
        .filter(|budget| plausible(budget) && !requests.iter().any(|other| contradicts(budget, other)))
        .collect()
}

/// Two dialects' budgets for the same window (or both without one) whose limits differ: one of
/// them is wrong, and nothing says which.
fn contradicts(a: &ServerBudget, b: &ServerBudget) -> bool {
    a.source != b.source && a.window == b.window && a.limit.zip(b.limit).is_some_and(|(x, y)| x.floor() != y.floor())
}

/// What one answer gives reason to doubt: values the header parser dropped, impossible
/// request budgets, and dialects contradicting each other.
fn doubts(info: &RateLimitInfo) -> Vec<String> {
    let mut doubts: Vec<String> = info.warnings.iter().map(|warning| format!("{warning} (ignored)")).collect();
    let requests: Vec<&ServerBudget> = info.budgets.iter().filter(|b| b.unit == "requests").collect();
    for budget in &requests {
        if let Some(problem) = problem(budget) {
            doubts.push(format!("{}: {problem}", label(budget)));
        }
    }
    for (i, a) in requests.iter().enumerate() {
        for b in requests.iter().skip(i + 1).filter(|b| contradicts(a, b)) {
            let (x, y) = (a.limit.unwrap_or_default(), b.limit.unwrap_or_default());
            doubts.push(format!(
                "{} says a limit of {} where {} says {}, for the same window",
                label(a),
                trim(x),
                label(b),
                trim(y)
            ));
        }
    }
    doubts
}

/// `'default' (x-ratelimit)`.
pub(super) fn label(budget: &ServerBudget) -> String {
    format!("'{}' ({})", budget.name, budget.source)
}

/// Whether `budget` is a concurrency limit as the demo API publishes one: a structured
/// `RateLimit-Policy` item with a quota and no window, whose `RateLimit` item gives a remaining
/// and no reset (the draft itself has no concurrency limits). A quota from any other dialect,
/// `X-RateLimit-Limit` above all, is a quota over a time the headers do not say, never a cap on
/// requests in flight.
/// `structured`: the answer had a `RateLimit-Policy` field and not the older `RateLimit-Limit`.
pub(super) fn published_concurrency(budget: &ServerBudget, structured: bool) -> bool {
    structured
        && budget.source == "ietf-draft"
        && budget.limit.is_some()
        && budget.remaining.is_some()
        && budget.window.is_none()
        && budget.reset_after.is_none()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(source: &str, limit: f64, remaining: Option<f64>, window: Option<u64>) -> ServerBudget {
        let mut budget = ServerBudget::new("default", source);
        budget.limit = Some(limit);
        budget.remaining = remaining;
        budget.window = window.map(Duration::from_secs);
        budget
    }

    fn info(budgets: Vec<ServerBudget>, warnings: &[&str]) -> RateLimitInfo {
        RateLimitInfo {
            status: Some(200),
            budgets,
            retry_after: None,
            throttled: false,
            warnings: warnings.iter().map(|w| (*w).to_owned()).collect(),
            date_lag: None,
        }
    }

    #[test]
    fn impossible_values_are_doubted_and_their_budgets_not_trusted() {
        let lying = info(
            vec![budget("x-ratelimit", 1e23, None, None), budget("github", 10.0, Some(50.0), None)],
            &[r#"x-ratelimit-remaining: "-5" is negative"#],
        );
        assert!(trusted(&lying).is_empty());
        let mut doubts = Doubts::default();
        doubts.note(&lying);
        let reasons = doubts.reasons().join("\n");
        for part in [
            "\"-5\" is negative",
            "a limit of 1e23 is beyond any plausible quota",
            "50 remaining is more than its limit of 10",
        ] {
            assert!(reasons.contains(part), "{part}: {reasons}");
        }
        for (window, said) in
            [(0, "a window of 0s"), (400 * 86_400, "a window of 400d 0h is beyond any plausible period")]
        {
            let odd = info(vec![budget("ietf-draft", 10.0, None, Some(window))], &[]);
            assert!(trusted(&odd).is_empty());
            let mut doubts = Doubts::default();
            doubts.note(&odd);
            assert!(doubts.reasons().iter().any(|r| r.contains(said)), "{:?}", doubts.reasons());
        }
        let honest = info(vec![budget("x-ratelimit", 100.0, Some(99.0), None)], &[]);
        assert_eq!(trusted(&honest).len(), 1);
        let mut none = Doubts::default();
        none.note(&honest);
        assert!(none.is_empty());
    }

    #[test]
    fn dialects_that_disagree_on_one_window_are_both_doubted() {
        let both = info(vec![budget("ietf-draft", 50.0, None, None), budget("x-ratelimit", 100.0, None, None)], &[]);
        assert!(trusted(&both).is_empty());
        let mut doubts = Doubts::default();
        doubts.note(&both);
        assert!(doubts.reasons().iter().any(|r| r.contains("says a limit of 50 where")), "{:?}", doubts.reasons());
        // Agreeing dialects, and stacked windows of one dialect, are believed.
        let agree = info(vec![budget("ietf-draft", 50.0, None, None), budget("x-ratelimit", 50.0, None, None)], &[]);
        assert_eq!(trusted(&agree).len(), 2);
        let stacked =
            info(vec![budget("ietf-draft", 5.0, None, Some(1)), budget("ietf-draft", 100.0, None, Some(60))], &[]);
        assert_eq!(trusted(&stacked).len(), 2);
    }

    #[test]
    fn a_server_lying_on_every_answer_fills_a_bounded_list() {
        let mut doubts = Doubts::default();
        for i in 0..100 {
            doubts.note(&info(Vec::new(), &[&format!("x-ratelimit-remaining: \"-{i}\" is negative")]));
        }
        let reasons = doubts.reasons();
        assert_eq!(reasons.len(), MAX_DOUBTS + 2, "{reasons:?}");
        assert!(reasons.last().is_some_and(|last| last.contains("92 more")), "{reasons:?}");
    }
}
