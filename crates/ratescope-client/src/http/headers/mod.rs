//! Rate-limit header interpretation: one [`RateLimitInfo`] from a response's
//! status, headers and optional body, whichever dialect the server speaks.
//!
//! Dialects, each in its own module with the documentation it was checked
//! against:
//!
//! - `ietf`: the IETF draft `RateLimit` / `RateLimit-Policy` structured fields,
//!   the draft-07 dictionary form and the older `RateLimit-Limit/-Remaining/-Reset`
//!   trio (including GitLab's flavour of it);
//! - `xratelimit`: `X-RateLimit-*` / `X-Rate-Limit-*` (GitHub, X/Twitter with its
//!   24-hour limits, Okta, Reddit, Discord, and unknown vendors);
//! - `suffixed`: OpenAI's `x-ratelimit-*-{requests,tokens}` and Anthropic's
//!   `anthropic-ratelimit-*` multi-budget families;
//! - `usedlimit`: used/limit forms (Shopify, Salesforce, HubSpot, and Shopify's
//!   GraphQL cost in the body);
//! - `retry_after`: `Retry-After` and retry hints in JSON bodies.
//!
//! How reset values are read (per dialect, and the rule for unknown vendors) and
//! how the `Date` header corrects clock skew is documented in `time`.
//!
//! Malformed values are ignored one header at a time and reported in
//! [`RateLimitInfo::warnings`]; the other headers are still used. Numbers must be
//! finite and non-negative. The parser never panics and never reads the clock:
//! the caller passes `now`.

pub mod explain;
mod ietf;
mod publish;
mod retry_after;
mod suffixed;
mod time;
mod usedlimit;
mod xratelimit;

use std::fmt::Display;
use std::time::{Duration, SystemTime};

use http::HeaderMap;
use serde::Serialize;

pub use explain::{HeadError, ParsedHead, explain_json, explain_table, parse_response_head};
pub use publish::{PublishedPolicy, write_ietf};

/// Everything a response says about the client's rate limits.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RateLimitInfo {
    /// The response's status code, if known.
    pub status: Option<u16>,
    /// Every budget the server advertised, in the order the dialects found them.
    pub budgets: Vec<ServerBudget>,
    /// How long the server asks the client to wait (header, else body hint).
    pub retry_after: Option<Duration>,
    /// 429, 503 with a retry hint, or a dialect's explicit throttling signal.
    pub throttled: bool,
    /// One line per ignored value, naming the header and the reason.
    pub warnings: Vec<String>,
    /// How far the client's clock was past the start of the response's `Date` second, when the
    /// two agree (see `time`): the server answered within `[now - lag, now - lag + 1 s)`.
    #[serde(skip)]
    pub date_lag: Option<Duration>,
}

/// One quota the server enforces, as of this response.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ServerBudget {
    /// E.g. `default`, `requests`, `tokens`, a GitHub resource, an IETF policy id.
    pub name: String,
    /// The quota per window, in `unit`s.
    pub limit: Option<f64>,
    /// What is left of the quota, in `unit`s.
    pub remaining: Option<f64>,
    /// Time until the quota is restored, measured from the response (never negative).
    pub reset_after: Option<Duration>,
    /// The length of the quota's window.
    pub window: Option<Duration>,
    /// What the quota counts: `requests` unless the dialect says otherwise.
    pub unit: String,
    /// The dialect that produced this budget, e.g. `ietf-draft`, `github`, `openai`.
    pub source: String,
    /// How coarsely the reset was written: the true reset may be up to this much earlier
    /// (servers round up). Zero when there is no reset or it is exact.
    #[serde(skip)]
    pub reset_precision: Duration,
}

impl ServerBudget {
    /// Whether the budget refills continuously and its reset says when it is whole again
    /// (OpenAI's and Anthropic's, and Shopify's leaky buckets, as their documentation
    /// describes them), not when a window ends: its reset measures no window.
    pub fn refills_continuously(&self) -> bool {
        matches!(self.source.as_str(), "openai" | "anthropic" | "shopify")
    }

    /// An empty budget counting requests, named `name`, read from the `source` dialect.
    pub fn new(name: impl Into<String>, source: &str) -> Self {
        ServerBudget {
            name: name.into(),
            limit: None,
            remaining: None,
            reset_after: None,
            window: None,
            unit: "requests".into(),
            source: source.into(),
            reset_precision: Duration::ZERO,
        }
    }

    /// `remaining / limit`, in `0..=1`, when it can be known.
    fn remaining_fraction(&self) -> Option<f64> {
        match (self.remaining, self.limit) {
            (Some(r), Some(l)) if l > 0.0 => Some((r / l).min(1.0)),
            (Some(0.0), _) => Some(0.0),
            _ => None,
        }
    }
}

/// Shopify's query cost in a body (searched in every body read, so built once).
static SHOPIFY_COST: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
    std::sync::LazyLock::new(|| memchr::memmem::Finder::new(b"throttleStatus"));

/// Whether a header name (lower case, as `http` keeps them) has "limit" in it: a scan for its
/// first letter, cheaper than a substring search on names this short.
fn names_a_limit(name: &str) -> bool {
    let name = name.as_bytes();
    name.iter().enumerate().any(|(at, &byte)| byte == b'l' && name[at..].starts_with(b"limit"))
}

impl RateLimitInfo {
    /// Interprets a response. `now` is the client's wall clock; absolute resets
    /// are measured against the response's `Date` header when it has one.
    pub fn parse(status: Option<u16>, headers: &HeaderMap, body: Option<&[u8]>, now: SystemTime) -> RateLimitInfo {
        Self::parse_at(status, headers, body, || now)
    }

    /// [`parse`](Self::parse) reading the clock only if the response has something to measure against it.
    pub(crate) fn parse_at(
        status: Option<u16>,
        headers: &HeaderMap,
        body: Option<&[u8]>,
        now: impl FnOnce() -> SystemTime,
    ) -> RateLimitInfo {
        // Every dialect's headers have "limit" in their name; most responses have none of them,
        // and a body is only read for retry hints on errors or for Shopify's query cost.
        let any_limit_header = headers.keys().any(|name| names_a_limit(name.as_str()));
        let shopify_cost = body.is_some_and(|body| SHOPIFY_COST.find(body).is_some());
        let wants_body = shopify_cost || status.is_some_and(|status| status >= 400);
        if !(any_limit_header || wants_body || headers.contains_key(http::header::RETRY_AFTER)) {
            // A success that says nothing about limits: the common case, with nothing to read.
            return RateLimitInfo {
                status,
                budgets: Vec::new(),
                retry_after: None,
                throttled: false,
                warnings: Vec::new(),
                date_lag: None,
            };
        }
        let mut ctx = Ctx::new(status, headers, body.filter(|_| wants_body), now());
        if any_limit_header || shopify_cost {
            ietf::parse(&mut ctx);
            xratelimit::parse(&mut ctx);
            suffixed::parse(&mut ctx);
            usedlimit::parse(&mut ctx);
        }
        let retry_after = retry_after::parse(&mut ctx);
        let throttled = ctx.throttled || status == Some(429) || (status == Some(503) && retry_after.is_some());
        let date_lag = ctx.date_lag;
        RateLimitInfo { status, budgets: ctx.budgets, retry_after, throttled, warnings: ctx.warnings, date_lag }
    }

    /// The budget closest to exhaustion: lowest `remaining / limit`, ties broken
    /// by the longest reset. A budget whose fraction cannot be known (no
    /// remaining, or no limit and a non-zero remaining) counts as full.
    pub fn most_restrictive(&self) -> Option<&ServerBudget> {
        self.budgets.iter().min_by(|a, b| {
            let fa = a.remaining_fraction().unwrap_or(1.0);
            let fb = b.remaining_fraction().unwrap_or(1.0);
            fa.total_cmp(&fb).then_with(|| b.reset_after.cmp(&a.reset_after))
        })
    }
}

/// A value for a warning: debug-quoted and cut to a readable length.
pub(crate) fn quoted(text: &str) -> String {
    const MAX_CHARS: usize = 60;
    if text.chars().count() <= MAX_CHARS {
        format!("{text:?}")
    } else {
        let cut: String = text.chars().take(MAX_CHARS).collect();
        format!("{cut:?}…")
    }
}

/// The state shared by the dialect parsers: the inputs and what was found so far.
pub(crate) struct Ctx<'a> {
    headers: &'a HeaderMap,
    pub(crate) status: Option<u16>,
    pub(crate) clock: time::Clock,
    /// The body, if it is JSON.
    pub(crate) body: Option<serde_json::Value>,
    pub(crate) budgets: Vec<ServerBudget>,
    pub(crate) warnings: Vec<String>,
    /// Set by a dialect's explicit throttling signal.
    pub(crate) throttled: bool,
    /// The precision of the last reset read; [`push`](Self::push) gives it to the budget.
    reset_precision: Duration,
    date_lag: Option<Duration>,
}

impl<'a> Ctx<'a> {
    fn new(status: Option<u16>, headers: &'a HeaderMap, body: Option<&[u8]>, now: SystemTime) -> Self {
        let body = body.filter(|b| !b.is_empty()).and_then(|b| serde_json::from_slice(b).ok());
        let mut ctx = Ctx {
            headers,
            status,
            clock: time::Clock::new(now, None),
            body,
            budgets: Vec::new(),
            warnings: Vec::new(),
            throttled: false,
            reset_precision: Duration::ZERO,
            date_lag: None,
        };
        if let Some(date) = ctx.text("date") {
            match httpdate::parse_http_date(date) {
                Ok(server_now) => {
                    ctx.clock = time::Clock::new(now, Some(server_now));
                    ctx.date_lag = (ctx.clock.server_now == now).then(|| now.duration_since(server_now).ok()).flatten();
                }
                Err(_) => ctx.warn("date", format!("{} is not an HTTP-date", quoted(date))),
            }
        }
        ctx
    }

    pub(crate) fn has(&self, name: &str) -> bool {
        self.headers.contains_key(name)
    }

    /// Every header name present (lower case).
    pub(crate) fn names(&self) -> Vec<&'a str> {
        let headers: &'a HeaderMap = self.headers;
        headers.keys().map(|name| name.as_str()).collect()
    }

    pub(crate) fn warn(&mut self, name: &str, message: impl Display) {
        self.warnings.push(format!("{name}: {message}"));
    }

    /// Keeps `Ok` values, turns errors into warnings about `name`.
    pub(crate) fn check<T>(&mut self, name: &str, result: Result<T, String>) -> Option<T> {
        result.map_err(|e| self.warn(name, e)).ok()
    }

    /// The first value of a scalar header, trimmed.
    pub(crate) fn text(&mut self, name: &str) -> Option<&'a str> {
        let headers: &'a HeaderMap = self.headers;
        let value = headers.get(name)?;
        let text = value.to_str().map_err(|_| {
            let lossy = String::from_utf8_lossy(value.as_bytes());
            format!("{} is not visible ASCII", quoted(&lossy))
        });
        self.check(name, text).map(str::trim)
    }

    /// All lines of a list-valued header, joined with `, ` (RFC 9110 §5.3).
    pub(crate) fn list_text(&mut self, name: &str) -> Option<String> {
        let headers: &'a HeaderMap = self.headers;
        let mut parts = Vec::new();
        for value in headers.get_all(name) {
            match value.to_str() {
                Ok(text) => parts.push(text.trim()),
                Err(_) => {
                    let lossy = String::from_utf8_lossy(value.as_bytes()).into_owned();
                    self.warn(name, format!("{} is not visible ASCII", quoted(&lossy)));
                    return None;
                }
            }
        }
        (!parts.is_empty()).then(|| parts.join(", "))
    }

    /// A finite, non-negative number.
    pub(crate) fn number(&mut self, name: &str) -> Option<f64> {
        let text = self.text(name)?;
        let number = time::parse_number(text);
        self.check(name, number)
    }

    /// A reset value, as "time until reset".
    pub(crate) fn reset(&mut self, name: &str, kind: time::ResetKind) -> Option<Duration> {
        let text = self.text(name)?;
        let reset = time::reset_after(text, kind, &self.clock);
        let reset = self.check(name, reset)?;
        self.reset_precision = time::precision(text);
        Some(reset)
    }

    /// Records a budget if the server gave at least a limit, a remaining count or
    /// a reset (a window alone may be the dialect's documented default).
    pub(crate) fn push(&mut self, mut budget: ServerBudget) {
        if budget.reset_after.is_some() && budget.reset_precision.is_zero() {
            budget.reset_precision = self.reset_precision;
        }
        if budget.limit.is_some() || budget.remaining.is_some() || budget.reset_after.is_some() {
            self.budgets.push(budget);
        }
    }
}

#[cfg(test)]
pub(crate) mod test_support {
    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    use http::{HeaderMap, HeaderName, HeaderValue};

    use super::{RateLimitInfo, ServerBudget};

    /// 2023-11-14T22:13:20Z, a round client clock for tests.
    pub(crate) const NOW: u64 = 1_700_000_000;

    pub(crate) fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    pub(crate) fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(
                HeaderName::from_bytes(name.as_bytes()).expect("test header name"),
                HeaderValue::from_str(value).expect("test header value"),
            );
        }
        map
    }

    pub(crate) fn parse(status: u16, pairs: &[(&str, &str)]) -> RateLimitInfo {
        RateLimitInfo::parse(Some(status), &headers(pairs), None, at(NOW))
    }

    pub(crate) fn parse_with_body(status: u16, pairs: &[(&str, &str)], body: &str) -> RateLimitInfo {
        RateLimitInfo::parse(Some(status), &headers(pairs), Some(body.as_bytes()), at(NOW))
    }

    pub(crate) fn budget<'a>(info: &'a RateLimitInfo, name: &str) -> &'a ServerBudget {
        info.budgets
            .iter()
            .find(|b| b.name == name)
            .unwrap_or_else(|| panic!("no budget {name:?} in {:#?}", info.budgets))
    }

    pub(crate) fn secs(s: u64) -> Option<Duration> {
        Some(Duration::from_secs(s))
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::*;
    use super::*;

    #[test]
    fn a_limit_anywhere_in_a_name_is_found() {
        for name in ["ratelimit", "x-ratelimit-remaining", "ratelimit-policy", "limit", "x-shopify-shop-api-call-limit"]
        {
            assert!(names_a_limit(name), "{name}");
        }
        for name in ["content-type", "date", "retry-after", "x-limi", "l", "", "lllimi", "x-rate-lim-it"] {
            assert!(!names_a_limit(name), "{name}");
        }
    }

    #[test]
    fn date_header_corrects_skew_for_epoch_resets() {
        // The server's clock runs an hour ahead of the client's; its reset is
        // 60 s after its own Date, so the client must wait 60 s, not 3660 s.
        let server_now = NOW + 3600;
        let date = httpdate::fmt_http_date(at(server_now));
        let reset = (server_now + 60).to_string();
        let info = parse(
            200,
            &[
                ("date", &date),
                ("x-ratelimit-limit", "5000"),
                ("x-ratelimit-remaining", "4999"),
                ("x-ratelimit-used", "1"),
                ("x-ratelimit-reset", &reset),
                ("x-ratelimit-resource", "core"),
            ],
        );
        assert_eq!(budget(&info, "core").reset_after, secs(60));
        assert!(info.warnings.is_empty(), "{:?}", info.warnings);
    }

    #[test]
    fn without_date_the_client_clock_is_used() {
        let reset = (NOW + 90).to_string();
        let info = parse(200, &[("x-rate-limit-limit", "900"), ("x-rate-limit-reset", &reset)]);
        assert_eq!(info.budgets[0].reset_after, secs(90));
    }

    #[test]
    fn invalid_date_is_a_warning_and_falls_back_to_now() {
        let reset = (NOW + 30).to_string();
        let info = parse(200, &[("date", "yesterday"), ("x-rate-limit-limit", "900"), ("x-rate-limit-reset", &reset)]);
        assert_eq!(info.budgets[0].reset_after, secs(30));
        assert_eq!(info.warnings, [r#"date: "yesterday" is not an HTTP-date"#]);
    }

    #[test]
    fn throttled_on_429_and_on_503_with_retry_after_only() {
        assert!(parse(429, &[]).throttled);
        assert!(parse(503, &[("retry-after", "10")]).throttled);
        assert!(!parse(503, &[]).throttled);
        assert!(!parse(200, &[("retry-after", "10")]).throttled);
    }

    #[test]
    fn most_restrictive_is_lowest_fraction_then_longest_reset() {
        let info = parse(
            200,
            &[
                ("x-ratelimit-limit-requests", "100"),
                ("x-ratelimit-remaining-requests", "10"),
                ("x-ratelimit-reset-requests", "1s"),
                ("x-ratelimit-limit-tokens", "1000"),
                ("x-ratelimit-remaining-tokens", "100"),
                ("x-ratelimit-reset-tokens", "6m0s"),
            ],
        );
        // Both at 10 %: the one that takes longer to come back wins.
        assert_eq!(info.most_restrictive().map(|b| b.name.as_str()), Some("tokens"));

        let info = parse(
            200,
            &[
                ("x-ratelimit-limit-requests", "100"),
                ("x-ratelimit-remaining-requests", "5"),
                ("x-ratelimit-reset-requests", "1s"),
                ("x-ratelimit-limit-tokens", "1000"),
                ("x-ratelimit-remaining-tokens", "100"),
                ("x-ratelimit-reset-tokens", "6m0s"),
            ],
        );
        assert_eq!(info.most_restrictive().map(|b| b.name.as_str()), Some("requests"));
        assert_eq!(parse(200, &[]).most_restrictive(), None);
    }

    #[test]
    fn non_ascii_values_are_warnings() {
        let mut map = HeaderMap::new();
        map.insert(
            "x-ratelimit-remaining",
            http::HeaderValue::from_bytes(b"\xff12").expect("obs-text is a valid value"),
        );
        map.insert("x-ratelimit-limit", http::HeaderValue::from_static("60"));
        let info = RateLimitInfo::parse(Some(200), &map, None, at(NOW));
        assert_eq!(info.budgets[0].limit, Some(60.0));
        assert_eq!(info.budgets[0].remaining, None);
        assert_eq!(info.warnings, [r#"x-ratelimit-remaining: "�12" is not visible ASCII"#]);
    }

    #[test]
    fn a_dialect_whose_values_are_all_invalid_yields_no_budget() {
        let info = parse(200, &[("x-app-limit-24hour-limit", "lots"), ("x-hubspot-ratelimit-secondly", "-1")]);
        assert!(info.budgets.is_empty(), "{:?}", info.budgets);
        assert_eq!(info.warnings.len(), 2);
    }

    #[test]
    fn long_values_are_cut_in_warnings() {
        let long = "x".repeat(500);
        let info = parse(200, &[("x-ratelimit-remaining", &long)]);
        let warning = &info.warnings[0];
        assert!(warning.len() < 120, "{warning}");
        assert!(warning.contains("xxx\"… is not a number"), "{warning}");
    }
}
