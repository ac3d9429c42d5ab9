//! Adaptive mode: a key follows the server's own word about its limits.
//!
//! Each adaptive key's limiter gets a [`ServerMirror`] as its admission check (scouting,
//! the server's remaining as a live allowance, restore at the reset; see `mirror`). Beside
//! it, what the server publishes tightens the key's configured limits, never loosens them:
//!
//! - a request budget whose window is published or measured from its resets becomes a sliding
//!   window named `server:<name>` beside the configured budgets (so the tighter always
//!   governs), a window plus the longest exchange long: the server counts a request when it
//!   arrives, up to that much after its admission, so an exact copy of its window would meet
//!   it early whenever a request is slow on the way;
//! - budgets in other units (tokens, points) are mirrored too: a request waits while its
//!   estimate of the unit is above what the server has left (see `unit_mirror`); without a
//!   mirror, such a budget with nothing remaining pauses the key until its reset;
//! - with no published budget, the pace learned from refusals becomes a token bucket
//!   `server:paced` of one request.

use std::time::Duration;

use tokio::time::Instant;

use super::headers::RateLimitInfo;
use super::mirror::{Learned, Report, ServerMirror};
use url::Url;

use super::client::Adaptive;
use crate::engine::{BudgetSpec, LimitKey, Limiter, LimiterConfig, Rate, Registry, format_wait};

/// Prefix of budgets learned from the server.
pub const SERVER_BUDGET_PREFIX: &str = "server:";

/// Name of the token bucket that paces a key whose server publishes no budget.
pub const PACED_BUDGET: &str = "server:paced";

/// The least margin a learned window gets beyond its length: requests admitted together on
/// new connections reach the server later than ones on warm connections a window on.
const MIN_MARGIN: Duration = Duration::from_millis(25);

/// The longest pause adaptive mode applies from a reported reset (guards against absurd resets).
pub const MAX_ADAPTIVE_PAUSE: Duration = Duration::from_secs(24 * 3600);

/// The limiter of a request to `url` (on `host`, lower case). In adaptive mode for every
/// host, a host with no limits gets an empty entry (keyed `host:port` when the URL names a
/// port) on its first request, so the server's word becomes its limit from the scout on.
pub fn limiter_for(registry: &Registry, adaptive: &Adaptive, host: &str, url: &Url) -> Option<Limiter> {
    limiter_at(registry, adaptive, host, url, url.path())
}

/// [`limiter_for`] a request to `path` on `origin`'s host and port (a request target not made
/// into a URL: the proxy's).
pub fn limiter_at(registry: &Registry, adaptive: &Adaptive, host: &str, origin: &Url, path: &str) -> Option<Limiter> {
    let found = registry.limiter_for(host, origin.port_or_known_default(), path);
    if found.is_some() || !matches!(adaptive, Adaptive::All) {
        return found;
    }
    let key = match origin.port() {
        Some(port) => LimitKey::host(&format!("{host}:{port}")),
        None => LimitKey::host(host),
    };
    registry.set(key.ok()?, LimiterConfig::default()).ok()?;
    registry.limiter_for(host, origin.port_or_known_default(), path)
}

/// Makes `limiter` follow the server: installs its mirror once. Cheap after the first call.
pub fn watch(limiter: &Limiter) -> bool {
    limiter.install_check(|| Box::new(ServerMirror::new()))
}

/// Takes in one answer to a request admitted with `ticket` (its permit's) on an adaptive key:
/// the mirror reconciles it, learned windows and paces reach the limiter's config, and a
/// spent budget in other units pauses the key. Returns one line per thing learned, each also
/// logged at `info` (the CLI shows them on stderr).
pub fn observe(
    limiter: &Limiter,
    ticket: Option<u64>,
    status: u16,
    info: &RateLimitInfo,
    received_at: Instant,
) -> Vec<String> {
    let learned = ticket
        .and_then(|ticket| {
            limiter.update_check(|check| {
                let mirror = check.as_any_mut().downcast_mut::<ServerMirror>()?;
                Some(mirror.observe(Report { ticket, status, info, received_at }))
            })
        })
        .flatten()
        .unwrap_or_default();
    let mut notes = Vec::new();
    let mut pace = None;
    let mut measured = Vec::new();
    for item in learned {
        match item {
            Learned::Scouted(text) => notes.push(text),
            Learned::Window { name, limit, window, published, margin } => {
                if !published {
                    let per = format_wait(window);
                    notes.push(format!("window of '{name}' measured from its resets: {limit} per {per}"));
                }
                let margin = window_margin(margin, window);
                if let Ok(spec) =
                    BudgetSpec::sliding_window(format!("{SERVER_BUDGET_PREFIX}{name}"), limit, window + margin)
                {
                    measured.push(spec);
                }
            }
            Learned::Slack(slack) => {
                notes.push(format!(
                    "the server restored later than its reset said: waiting {} longer",
                    format_wait(slack)
                ));
            }
            Learned::Pace(rate) => pace = Some(rate),
        }
    }
    if let Some((pause, reason)) = exhausted_until(info, ticket.is_some()) {
        limiter.pause_until(received_at + pause, reason.clone());
        notes.push(reason);
    }
    if let Some(config) = learned_config(&limiter.config(), info, pace, measured) {
        let learned: Vec<String> = config
            .budgets
            .iter()
            .filter(|spec| spec.name.starts_with(SERVER_BUDGET_PREFIX))
            .map(BudgetSpec::describe)
            .collect();
        if limiter.reconfigure(config).is_ok() {
            notes.push(format!("limits learned from the server: {}", learned.join(", ")));
        }
    }
    for note in &notes {
        tracing::info!("{}: {note}", limiter.key());
    }
    notes
}

/// The config a key should have after seeing `info` (and a learned `pace`, and windows the
/// mirror `measured`), if it differs from `current`.
pub fn learned_config(
    current: &LimiterConfig,
    info: &RateLimitInfo,
    pace: Option<f64>,
    measured: Vec<BudgetSpec>,
) -> Option<LimiterConfig> {
    let mut next = current.clone();
    let budgets = &mut next.budgets;
    for spec in measured {
        put(budgets, spec);
    }
    for budget in &info.budgets {
        let (Some(limit), Some(window)) = (budget.limit, budget.window) else { continue };
        if budget.unit != "requests" || limit < 1.0 || window.is_zero() {
            continue;
        }
        let name = format!("{SERVER_BUDGET_PREFIX}{}", budget.name);
        // The mirror's version (with its margin) stands; a published window it did not see
        // (no remaining to mirror) joins as published.
        if budgets.iter().any(|existing| existing.name == name) {
            continue;
        }
        if let Ok(spec) = BudgetSpec::sliding_window(&name, limit.floor() as u64, window) {
            budgets.push(spec);
        }
    }
    if let Some(pace) = pace
        && let Ok(rate) = Rate::from_f64((pace * 1000.0).round().max(1.0) / 1000.0, Duration::from_secs(1))
        && let Ok(spec) = BudgetSpec::token_bucket(PACED_BUDGET, 1, rate)
    {
        put(budgets, spec);
    }
    (next != *current && next.validate().is_ok()).then_some(next)
}

/// Replaces the budget of `spec`'s name, or adds it.
fn put(budgets: &mut Vec<BudgetSpec>, spec: BudgetSpec) {
    match budgets.iter_mut().find(|existing| existing.name == spec.name) {
        Some(existing) => *existing = spec,
        None => budgets.push(spec),
    }
}

/// When the key must pause for a spent budget, and why: the latest reset of an exhausted
/// budget. With a mirror (`mirrored`), every budget reporting what remains is the mirror's
/// (requests and other units alike) and only the others pause.
pub fn exhausted_until(info: &RateLimitInfo, mirrored: bool) -> Option<(Duration, String)> {
    info.budgets
        .iter()
        .filter(|budget| !(mirrored && budget.remaining.is_some_and(f64::is_finite)))
        .filter(|budget| budget.remaining.is_some_and(|remaining| remaining < 1.0))
        .filter_map(|budget| Some((budget.reset_after?.min(MAX_ADAPTIVE_PAUSE), budget)))
        .filter(|(reset, _)| !reset.is_zero())
        .max_by_key(|(reset, _)| *reset)
        .map(|(reset, budget)| {
            (reset, format!("server budget '{}' exhausted, resets in {}", budget.name, format_wait(reset)))
        })
}

/// The slack added to a measured window: the longest exchange seen, at least `MIN_MARGIN`, at
/// most a tenth of the window, in whole milliseconds rounded up (never shorter, and the learned
/// window reads "5/1032ms", not "5/1s 31ms 767us 993ns").
fn window_margin(exchange: Duration, window: Duration) -> Duration {
    let margin = exchange.max(MIN_MARGIN).min(window / 10);
    Duration::from_millis(u64::try_from(margin.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::headers::ServerBudget;

    fn info(limit: f64, remaining: f64, reset: u64, window: Option<u64>, unit: &str) -> RateLimitInfo {
        RateLimitInfo {
            status: Some(200),
            budgets: vec![ServerBudget {
                name: "minute".into(),
                limit: Some(limit),
                remaining: Some(remaining),
                reset_after: Some(Duration::from_secs(reset)),
                window: window.map(Duration::from_secs),
                unit: unit.into(),
                source: "ietf-draft".into(),
                reset_precision: Duration::from_secs(1),
            }],
            retry_after: None,
            throttled: false,
            warnings: vec![],
            date_lag: None,
        }
    }

    #[test]
    fn a_published_policy_becomes_a_sliding_window_beside_configured_budgets() {
        let configured =
            LimiterConfig::new().with_budget(BudgetSpec::token_bucket("rate", 10, "10/1s".parse().unwrap()).unwrap());
        let learned = learned_config(&configured, &info(100.0, 50.0, 30, Some(60), "requests"), None, vec![]).unwrap();
        assert_eq!(learned.budgets.len(), 2);
        assert_eq!(learned.budgets[1].describe(), "window 100/1m");
        assert_eq!(learned.budgets[1].name, "server:minute");
        let again = info(100.0, 10.0, 5, Some(60), "requests");
        assert!(learned_config(&learned, &again, None, vec![]).is_none(), "nothing new to learn");
        let no_window = info(100.0, 50.0, 30, None, "requests");
        assert!(learned_config(&configured, &no_window, None, vec![]).is_none(), "no window, no budget");
    }

    #[test]
    fn a_measured_windows_margin_is_whole_milliseconds_rounded_up() {
        let second = Duration::from_secs(1);
        let odd = Duration::from_nanos(31_767_993);
        assert_eq!(window_margin(odd, second), Duration::from_millis(32));
        assert_eq!(window_margin(Duration::ZERO, second), MIN_MARGIN);
        assert_eq!(window_margin(Duration::from_secs(5), second), Duration::from_millis(100), "a tenth at most");
        let spec = BudgetSpec::sliding_window("w", 5, second + window_margin(odd, second)).unwrap();
        assert_eq!(spec.describe(), "window 5/1032ms");
    }

    #[test]
    fn a_learned_pace_becomes_a_one_request_bucket() {
        let nothing = RateLimitInfo::parse(Some(200), &Default::default(), None, std::time::SystemTime::now());
        let learned = learned_config(&LimiterConfig::new(), &nothing, Some(2.5), vec![]).unwrap();
        assert_eq!(learned.budgets[0].name, PACED_BUDGET);
        assert_eq!(learned.budgets[0].describe(), "bucket 1 @ 5/2s");
    }

    #[test]
    fn an_exhausted_budget_pauses_until_its_reset_unless_the_mirror_counts_it() {
        let (pause, reason) = exhausted_until(&info(100.0, 0.0, 12, Some(60), "requests"), false).unwrap();
        assert_eq!(pause, Duration::from_secs(12));
        assert_eq!(reason, "server budget 'minute' exhausted, resets in 12.0s");
        assert!(exhausted_until(&info(100.0, 3.0, 12, Some(60), "requests"), false).is_none());
        assert!(exhausted_until(&info(100.0, 0.0, 12, Some(60), "requests"), true).is_none(), "the mirror holds it");
        assert!(
            exhausted_until(&info(100.0, 0.0, 12, Some(60), "tokens"), true).is_none(),
            "the mirror holds tokens too"
        );
        assert!(exhausted_until(&info(100.0, 0.0, 12, Some(60), "tokens"), false).is_some(), "without it they pause");
        assert_eq!(
            exhausted_until(&info(1.0, 0.0, 10_000_000, None, "requests"), false).unwrap().0,
            MAX_ADAPTIVE_PAUSE
        );
    }
}
