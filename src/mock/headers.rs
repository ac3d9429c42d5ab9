//! Rate-limit response headers in the dialect a route speaks, written from a policy [`Decision`].
//!
//! - `ietf`: draft-ietf-httpapi-ratelimit-headers-10 structured fields, one item per
//!   policy: `RateLimit-Policy: "burst";q=5;w=1` and `RateLimit: "burst";r=4;t=1`
//!   (`w` and `t` in whole seconds, rounded up; a concurrency policy has neither).
//! - `x-ratelimit`: `X-RateLimit-Limit/-Remaining/-Reset` for the most restrictive
//!   policy, the reset in delta seconds.
//! - `github`: `x-ratelimit-limit/-remaining/-used/-reset` and
//!   `x-ratelimit-resource: core`, the reset in Unix epoch seconds (measured from
//!   the same second as the `Date` header, so a client correcting skew reads it exactly).
//! - `openai`: `x-ratelimit-{limit,remaining,reset}-UNIT` per unit counted (`requests`,
//!   `tokens`), the most restrictive policy of each, the reset (time until full again) as a
//!   Go duration like OpenAI writes it (`6m0s`, `1s`, `20ms`, rounded up to the millisecond).
//! - `none`: no rate-limit headers.
//!
//! Every response gets a `Date`; a refused one gets `Retry-After` in delta seconds
//! when its route enables it.

use std::fmt;
use std::str::FromStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::header::{DATE, RETRY_AFTER};
use http::{HeaderMap, HeaderName, HeaderValue};

use super::policy::{Decision, PolicyReport};
use crate::http::headers::{PublishedPolicy, write_ietf};

/// Which family of rate-limit headers a route sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Dialect {
    /// IETF draft `RateLimit` / `RateLimit-Policy` structured fields.
    #[default]
    Ietf,
    /// `X-RateLimit-Limit/-Remaining/-Reset` (delta seconds).
    XRateLimit,
    /// GitHub's `x-ratelimit-*` with `used`, an epoch reset and a resource.
    Github,
    /// OpenAI's `x-ratelimit-{limit,remaining,reset}-{requests,tokens}`, resets as Go durations.
    OpenAi,
    /// No rate-limit headers at all.
    None,
}

impl Dialect {
    /// Every dialect's name as written in a mock config, in declaration order.
    pub const NAMES: [&'static str; 5] = ["ietf", "x-ratelimit", "github", "openai", "none"];

    /// The name a mock config uses for it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Ietf => "ietf",
            Self::XRateLimit => "x-ratelimit",
            Self::Github => "github",
            Self::OpenAi => "openai",
            Self::None => "none",
        }
    }
}

impl fmt::Display for Dialect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Dialect {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text.trim().to_ascii_lowercase().as_str() {
            "ietf" => Ok(Self::Ietf),
            "x-ratelimit" => Ok(Self::XRateLimit),
            "github" => Ok(Self::Github),
            "openai" => Ok(Self::OpenAi),
            "none" => Ok(Self::None),
            _ => Err(format!("dialect {text:?} is not one of {}", Self::NAMES.join(", "))),
        }
    }
}

/// Writes `Date`, the dialect's rate-limit headers and, when `retry_after` is true and the
/// request was refused, `Retry-After`. `now` is the server's wall clock.
pub fn write_headers(
    headers: &mut HeaderMap,
    dialect: Dialect,
    decision: &Decision,
    retry_after: bool,
    now: SystemTime,
) {
    // Date is the floor of now, as every server writes it.
    let epoch_secs = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let date = UNIX_EPOCH + Duration::from_secs(epoch_secs);
    insert(headers, DATE, httpdate::fmt_http_date(date));
    if retry_after && let Some(secs) = decision.retry_after.filter(|_| !decision.admitted) {
        insert(headers, RETRY_AFTER, secs.to_string());
    }
    match dialect {
        Dialect::Ietf => {
            let published: Vec<PublishedPolicy> = decision.policies.iter().map(PublishedPolicy::from).collect();
            write_ietf(headers, &published);
        }
        Dialect::XRateLimit => {
            if let Some(policy) = most_restrictive(&decision.policies) {
                insert(headers, name("x-ratelimit-limit"), policy.limit.to_string());
                insert(headers, name("x-ratelimit-remaining"), policy.remaining.to_string());
                insert(headers, name("x-ratelimit-reset"), ceil_secs(policy.reset).to_string());
            }
        }
        Dialect::Github => {
            if let Some(policy) = most_restrictive(&decision.policies) {
                let used = policy.limit.saturating_sub(policy.remaining);
                insert(headers, name("x-ratelimit-limit"), policy.limit.to_string());
                insert(headers, name("x-ratelimit-remaining"), policy.remaining.to_string());
                insert(headers, name("x-ratelimit-used"), used.to_string());
                // The instant of the reset rounded up, as real servers write it (never early).
                let since_epoch = now.duration_since(UNIX_EPOCH).unwrap_or_default();
                let reset = ceil_secs(since_epoch.saturating_add(policy.reset));
                insert(headers, name("x-ratelimit-reset"), reset.to_string());
                insert(headers, name("x-ratelimit-resource"), "core".to_owned());
            }
        }
        Dialect::OpenAi => write_openai(headers, &decision.policies),
        Dialect::None => {}
    }
}

/// One header triple per unit, from the unit's most restrictive policy (over time, unless the
/// route has only a concurrency limit).
fn write_openai(headers: &mut HeaderMap, policies: &[PolicyReport]) {
    let timed = policies.iter().any(|p| !p.concurrency);
    let shown: Vec<&PolicyReport> = policies.iter().filter(|p| !timed || !p.concurrency).collect();
    let mut units: Vec<&str> = shown.iter().map(|p| p.unit.as_str()).collect();
    units.sort_unstable();
    units.dedup();
    for unit in units {
        let of_unit: Vec<PolicyReport> =
            shown.iter().filter(|p| p.unit.as_str() == unit).map(|p| (*p).clone()).collect();
        let Some(policy) = most_restrictive(&of_unit) else { continue };
        for (kind, value) in [
            ("limit", policy.limit.to_string()),
            ("remaining", policy.remaining.to_string()),
            ("reset", go_duration(policy.reset)),
        ] {
            match HeaderName::try_from(format!("x-ratelimit-{kind}-{unit}")) {
                Ok(header) => insert(headers, header, value),
                Err(err) => tracing::warn!("mock server: no header for unit {unit}: {err}"),
            }
        }
    }
}

/// A duration as Go prints one, rounded up to the millisecond: `0s`, `20ms`, `1s`, `1.5s`,
/// `6m0s`, `1h0m0s`.
pub fn go_duration(duration: Duration) -> String {
    let millis = duration.as_nanos().div_ceil(1_000_000);
    if millis == 0 {
        return "0s".to_owned();
    }
    if millis < 1000 {
        return format!("{millis}ms");
    }
    let (hours, minutes) = (millis / 3_600_000, millis / 60_000 % 60);
    let (secs, fraction) = (millis / 1000 % 60, millis % 1000);
    let mut seconds = secs.to_string();
    if fraction > 0 {
        seconds = format!("{seconds}.{}", format!("{fraction:03}").trim_end_matches('0'));
    }
    match (hours, minutes) {
        (0, 0) => format!("{seconds}s"),
        (0, m) => format!("{m}m{seconds}s"),
        (h, m) => format!("{h}h{m}m{seconds}s"),
    }
}

/// The policy closest to exhaustion (lowest remaining share, then the longest reset); quotas
/// over time are preferred to a concurrency limit, which has no reset.
fn most_restrictive(policies: &[PolicyReport]) -> Option<&PolicyReport> {
    let timed = policies.iter().any(|p| !p.concurrency);
    policies.iter().filter(|p| !timed || !p.concurrency).min_by(|a, b| {
        let share = |p: &PolicyReport| p.remaining as f64 / p.limit.max(1) as f64;
        share(a).total_cmp(&share(b)).then_with(|| b.reset.cmp(&a.reset))
    })
}

fn ceil_secs(duration: Duration) -> u64 {
    duration.as_secs() + u64::from(duration.subsec_nanos() > 0)
}

fn name(text: &'static str) -> HeaderName {
    HeaderName::from_static(text)
}

fn insert(headers: &mut HeaderMap, name: HeaderName, value: String) {
    match HeaderValue::try_from(value) {
        Ok(value) => {
            headers.insert(name, value);
        }
        Err(err) => tracing::warn!("mock server: cannot send header {name}: {err}"),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::http::headers::RateLimitInfo;
    use crate::mock::policy::{PolicyKind, PolicySpec, RoutePolicies, UnitCharge};

    const SEC: u64 = 1_000_000_000;

    fn policies() -> RoutePolicies {
        RoutePolicies::new(vec![
            PolicySpec::new("burst", PolicyKind::TokenBucket { capacity: 5, rate: "5/1s".parse().unwrap() }),
            PolicySpec::new("minute", PolicyKind::FixedWindow { limit: 100, window: Duration::from_secs(60) }),
        ])
    }

    /// Five admitted at t = 30 s, then a refused sixth: its headers, written at `now`.
    fn refused(dialect: Dialect, now: SystemTime) -> HeaderMap {
        let mut p = policies();
        for _ in 0..5 {
            assert!(p.check(None, 30 * SEC).admitted);
        }
        let decision = p.check(None, 30 * SEC);
        assert!(!decision.admitted);
        let mut headers = HeaderMap::new();
        write_headers(&mut headers, dialect, &decision, true, now);
        headers
    }

    fn now() -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(1_700_000_000_400)
    }

    #[test]
    fn ietf_round_trips_through_our_parser() {
        let headers = refused(Dialect::Ietf, now());
        assert_eq!(headers["ratelimit-policy"], r#""burst";q=5;w=1, "minute";q=100;w=60"#);
        assert_eq!(headers["ratelimit"], r#""burst";r=0;t=1, "minute";r=95;t=30"#);
        let info = RateLimitInfo::parse(Some(429), &headers, None, now());
        assert!(info.warnings.is_empty(), "{:?}", info.warnings);
        let burst = info.budgets.iter().find(|b| b.name == "burst").unwrap();
        assert_eq!((burst.limit, burst.remaining), (Some(5.0), Some(0.0)));
        assert_eq!((burst.window, burst.reset_after), (Some(Duration::from_secs(1)), Some(Duration::from_secs(1))));
        let minute = info.budgets.iter().find(|b| b.name == "minute").unwrap();
        assert_eq!((minute.limit, minute.remaining), (Some(100.0), Some(95.0)));
        assert_eq!(minute.reset_after, Some(Duration::from_secs(30)));
        assert_eq!(info.retry_after, Some(Duration::from_secs(1)));
        assert!(info.throttled);
    }

    #[test]
    fn x_ratelimit_reports_the_most_restrictive_policy_in_delta_seconds() {
        let headers = refused(Dialect::XRateLimit, now());
        let info = RateLimitInfo::parse(Some(429), &headers, None, now());
        assert!(info.warnings.is_empty(), "{:?}", info.warnings);
        let b = &info.budgets[0];
        assert_eq!((b.limit, b.remaining, b.reset_after), (Some(5.0), Some(0.0), Some(Duration::from_secs(1))));
        assert_eq!(b.source, "x-ratelimit");
    }

    #[test]
    fn github_reset_is_an_epoch_that_reads_back_against_date() {
        let headers = refused(Dialect::Github, now());
        // The reset instant rounded up: never before the true reset.
        assert_eq!(headers["x-ratelimit-reset"], "1700000002");
        assert_eq!(headers["x-ratelimit-used"], "5");
        // A client whose clock is 10 minutes off still reads the right reset, thanks to Date.
        let skewed = now() + Duration::from_secs(600);
        let info = RateLimitInfo::parse(Some(429), &headers, None, skewed);
        assert!(info.warnings.is_empty(), "{:?}", info.warnings);
        let core = info.budgets.iter().find(|b| b.name == "core").unwrap();
        assert_eq!(core.source, "github");
        assert_eq!((core.limit, core.remaining), (Some(5.0), Some(0.0)));
        // Measured from Date (the floor of the server's now): late by the rounding, never early.
        assert_eq!(core.reset_after, Some(Duration::from_secs(2)));
    }

    #[test]
    fn openai_writes_a_triple_per_unit_that_reads_back_as_budgets_with_units() {
        let mut p = RoutePolicies::new(vec![
            PolicySpec::new("requests", PolicyKind::TokenBucket { capacity: 60, rate: "60/1m".parse().unwrap() }),
            PolicySpec::new("tokens", PolicyKind::TokenBucket { capacity: 10_000, rate: "10000/1m".parse().unwrap() })
                .counting(crate::engine::Unit::tokens()),
        ]);
        let charges = [UnitCharge { unit: crate::engine::Unit::tokens(), needed: 1, spent: 2500 }];
        let decision = p.check_charges(None, 0, &charges);
        let mut headers = HeaderMap::new();
        write_headers(&mut headers, Dialect::OpenAi, &decision, true, now());
        assert_eq!(headers["x-ratelimit-remaining-requests"], "59");
        assert_eq!(headers["x-ratelimit-reset-requests"], "1s");
        assert_eq!(headers["x-ratelimit-limit-tokens"], "10000");
        assert_eq!(headers["x-ratelimit-remaining-tokens"], "7500");
        assert_eq!(headers["x-ratelimit-reset-tokens"], "15s");
        let info = RateLimitInfo::parse(Some(200), &headers, None, now());
        assert!(info.warnings.is_empty(), "{:?}", info.warnings);
        let tokens = info.budgets.iter().find(|b| b.unit == "tokens").unwrap();
        assert_eq!((tokens.limit, tokens.remaining), (Some(10_000.0), Some(7_500.0)));
        assert_eq!(tokens.reset_after, Some(Duration::from_secs(15)));
    }

    #[test]
    fn openai_on_a_concurrency_only_route_still_reports_it() {
        let mut p = RoutePolicies::new(vec![PolicySpec::new("parallel", PolicyKind::Concurrency { limit: 3 })]);
        let decision = p.check(None, 0);
        let mut headers = HeaderMap::new();
        write_headers(&mut headers, Dialect::OpenAi, &decision, true, now());
        assert_eq!(headers["x-ratelimit-remaining-requests"], "2");
        let info = RateLimitInfo::parse(Some(200), &headers, None, now());
        assert_eq!(info.budgets[0].limit, Some(3.0));
    }

    #[test]
    fn go_durations_read_back_through_our_parser() {
        for (duration, text) in [
            (Duration::ZERO, "0s"),
            (Duration::from_micros(19_001), "20ms"),
            (Duration::from_secs(1), "1s"),
            (Duration::from_millis(1500), "1.5s"),
            (Duration::from_secs(360), "6m0s"),
            (Duration::from_millis(90_250), "1m30.25s"),
            (Duration::from_secs(3600), "1h0m0s"),
        ] {
            assert_eq!(go_duration(duration), text);
            let mut headers = HeaderMap::new();
            headers.insert("x-ratelimit-remaining-tokens", HeaderValue::from_static("1"));
            headers.insert("x-ratelimit-reset-tokens", HeaderValue::from_str(text).unwrap());
            let info = RateLimitInfo::parse(Some(200), &headers, None, now());
            let read = info.budgets[0].reset_after.unwrap();
            assert!(read >= duration && read - duration < Duration::from_millis(1), "{text}: {read:?}");
        }
    }

    #[test]
    fn none_sends_only_date_and_retry_after() {
        let headers = refused(Dialect::None, now());
        let mut names: Vec<&str> = headers.keys().map(|n| n.as_str()).collect();
        names.sort_unstable();
        assert_eq!(names, ["date", "retry-after"]);
        assert_eq!(headers["date"], "Tue, 14 Nov 2023 22:13:20 GMT");
    }

    #[test]
    fn admitted_requests_get_no_retry_after() {
        let mut p = policies();
        let decision = p.check(None, 0);
        let mut headers = HeaderMap::new();
        write_headers(&mut headers, Dialect::Ietf, &decision, true, now());
        assert!(!headers.contains_key("retry-after"));
        assert_eq!(headers["ratelimit"], r#""burst";r=4;t=1, "minute";r=99;t=60"#);
    }

    #[test]
    fn dialect_names_parse_and_unknown_ones_are_named() {
        for name in Dialect::NAMES {
            assert_eq!(name.parse::<Dialect>().unwrap().name(), name);
        }
        assert!("ietf-draft".parse::<Dialect>().unwrap_err().contains("ietf-draft"));
    }
}
