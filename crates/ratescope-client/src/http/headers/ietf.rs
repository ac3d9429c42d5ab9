//! The IETF `RateLimit` header fields, in the three shapes servers send.
//!
//! Checked against:
//! - draft-ietf-httpapi-ratelimit-headers-10 (27 Sep 2025) §3-4
//!   (<https://datatracker.ietf.org/doc/draft-ietf-httpapi-ratelimit-headers/10/>), and -11:
//!   `RateLimit-Policy` is a List of policy Items named by a String, with `q` (quota,
//!   required), `qu` (quota unit, default `requests`), `w` (window seconds), `pk`
//!   (partition key, a byte sequence); `RateLimit` is a List of Items naming a policy,
//!   with `r` (remaining, required), `t` (seconds until more quota) and `pk`.
//!   Malformed fields MUST be ignored. Items are matched to policies by name.
//! - draft-07 §3: `RateLimit: limit=100, remaining=50, reset=5` (a Dictionary) with
//!   `RateLimit-Policy: 100;w=10` (Integer items; the one whose value is the limit
//!   gives the window).
//! - draft-06 and earlier: `RateLimit-Limit` (`100` or `100, 100;w=60, 1000;w=3600`),
//!   `RateLimit-Remaining`, `RateLimit-Reset` (delta seconds).
//! - GitLab's "User and IP rate limits" docs
//!   (<https://docs.gitlab.com/ee/administration/settings/user_and_ip_rate_limits.html>):
//!   the same trio, but `RateLimit-Reset` is Unix time, plus `RateLimit-Observed`
//!   (used), `RateLimit-ResetTime` (HTTP-date), `RateLimit-Name` (the throttle) and a
//!   limit expressed per minute. GitLab is recognised by those extra headers; without
//!   them the trio's reset is read with the magnitude rule (`time::ResetKind::Auto`),
//!   which reads a delta as a delta and a Unix time as a Unix time.
//!
//! Policy items whose name is a Token rather than a String are accepted too.

use std::time::Duration;

use sfv::{BareItem, Dictionary, List, ListEntry, Parameters, Parser};

use super::time::{ResetKind, parse_number, seconds};
use super::{Ctx, ServerBudget, quoted};

const SOURCE: &str = "ietf-draft";

/// A `RateLimit-Policy` item.
#[derive(Debug, Default)]
struct QuotaPolicy {
    /// `None` for draft-07 Integer policies.
    name: Option<String>,
    quota: Option<f64>,
    window: Option<Duration>,
    unit: Option<String>,
}

pub(super) fn parse(ctx: &mut Ctx) {
    let mut policies = policies(ctx);
    if let Some(text) = ctx.list_text("ratelimit") {
        service_limits(ctx, &text, &mut policies);
    }
    // Policies that no RateLimit item mentioned still describe a quota.
    let unnamed = policies.iter().filter(|p| p.name.is_none()).count();
    for (i, policy) in policies.into_iter().enumerate() {
        let name = match policy.name {
            Some(name) => name,
            None if unnamed == 1 => "default".into(),
            None => format!("policy-{}", i + 1),
        };
        ctx.push(ServerBudget {
            limit: policy.quota,
            window: policy.window,
            unit: policy.unit.unwrap_or_else(|| "requests".into()),
            ..ServerBudget::new(name, SOURCE)
        });
    }
    trio(ctx);
}

fn policies(ctx: &mut Ctx) -> Vec<QuotaPolicy> {
    const FIELD: &str = "ratelimit-policy";
    let Some(text) = ctx.list_text(FIELD) else {
        return Vec::new();
    };
    let list = match Parser::new(&text).parse::<List>() {
        Ok(list) => list,
        Err(e) => {
            ctx.warn(FIELD, format!("{} is not a structured list ({e})", quoted(&text)));
            return Vec::new();
        }
    };
    let mut out = Vec::new();
    for entry in list {
        let ListEntry::Item(item) = entry else {
            ctx.warn(FIELD, "an inner list is not a quota policy");
            continue;
        };
        let mut policy = match (name_of(&item.bare_item), number(&item.bare_item, "quota")) {
            (Some(name), _) => QuotaPolicy { name: Some(name), ..QuotaPolicy::default() },
            // draft-07: the item is the quota itself.
            (None, Ok(quota)) => QuotaPolicy { quota: Some(quota), ..QuotaPolicy::default() },
            (None, Err(e)) => {
                ctx.warn(FIELD, format!("{e}; a policy is named by a string (or, in draft-07, is its quota)"));
                continue;
            }
        };
        let label = policy.name.clone().unwrap_or_else(|| "unnamed".into());
        if policy.quota.is_none() {
            match param(&item.params, "q") {
                Ok(Some(q)) => policy.quota = Some(q),
                Ok(None) => {
                    ctx.warn(FIELD, format!("policy {label:?} has no quota (q)"));
                    continue;
                }
                Err(e) => {
                    ctx.warn(FIELD, format!("policy {label:?}: {e}"));
                    continue;
                }
            }
        }
        policy.window = ctx.check(FIELD, window(&item.params).map_err(|e| format!("policy {label:?}: {e}"))).flatten();
        policy.unit = item.params.get("qu").and_then(|qu| {
            let unit = name_of(qu);
            if unit.is_none() {
                ctx.warn(FIELD, format!("policy {label:?}: qu is not a string"));
            }
            unit
        });
        out.push(policy);
    }
    out
}

/// The `RateLimit` field: the current List form, or the draft-07 Dictionary.
fn service_limits(ctx: &mut Ctx, text: &str, policies: &mut Vec<QuotaPolicy>) {
    const FIELD: &str = "ratelimit";
    let list_error = match Parser::new(text).parse::<List>() {
        Ok(list) => return service_limit_items(ctx, list, policies),
        Err(e) => e,
    };
    let Ok(dict) = Parser::new(text).parse::<Dictionary>() else {
        ctx.warn(FIELD, format!("{} is not a structured list ({list_error})", quoted(text)));
        return;
    };
    let get = |key: &str| match dict.get(key) {
        Some(ListEntry::Item(item)) => Some(number(&item.bare_item, key)),
        Some(ListEntry::InnerList(_)) => Some(Err(format!("{key} is not a number"))),
        None => None,
    };
    let (limit, remaining, reset) = (get("limit"), get("remaining"), get("reset"));
    if limit.is_none() && remaining.is_none() && reset.is_none() {
        ctx.warn(FIELD, format!("{} has no limit, remaining or reset", quoted(text)));
        return;
    }
    let limit = limit.and_then(|r| ctx.check(FIELD, r));
    let remaining = remaining.and_then(|r| ctx.check(FIELD, r));
    let reset = reset.and_then(|r| ctx.check(FIELD, r.and_then(seconds)));
    // draft-07: the Integer policy equal to the limit carries the window.
    let unnamed: Vec<usize> = policies.iter().enumerate().filter(|(_, p)| p.name.is_none()).map(|(i, _)| i).collect();
    let same_quota =
        unnamed.iter().copied().find(|&i| policies.get(i).is_some_and(|p| limit.is_some() && p.quota == limit));
    let only = match unnamed.as_slice() {
        [only] => Some(*only),
        _ => None,
    };
    let window = (same_quota.or(only)).map(|i| policies.remove(i)).and_then(|p| p.window);
    ctx.push(ServerBudget {
        limit,
        remaining,
        reset_after: reset,
        window,
        reset_precision: structured_precision(reset),
        ..ServerBudget::new("default", SOURCE)
    });
}

fn service_limit_items(ctx: &mut Ctx, list: List, policies: &mut Vec<QuotaPolicy>) {
    const FIELD: &str = "ratelimit";
    for entry in list {
        let ListEntry::Item(item) = entry else {
            ctx.warn(FIELD, "an inner list is not a service limit");
            continue;
        };
        let Some(name) = name_of(&item.bare_item) else {
            ctx.warn(FIELD, "a service limit must name its policy with a string");
            continue;
        };
        let remaining = match param(&item.params, "r") {
            Ok(Some(r)) => r,
            Ok(None) => {
                ctx.warn(FIELD, format!("policy {name:?} has no remaining quota (r)"));
                continue;
            }
            Err(e) => {
                ctx.warn(FIELD, format!("policy {name:?}: {e}"));
                continue;
            }
        };
        let reset = param(&item.params, "t")
            .and_then(|t| t.map(seconds).transpose())
            .map_err(|e| format!("policy {name:?}: {e}"));
        let reset_after = ctx.check(FIELD, reset).flatten();
        let policy = policies
            .iter()
            .position(|p| p.name.as_deref() == Some(name.as_str()))
            .map(|i| policies.remove(i))
            .unwrap_or_default();
        ctx.push(ServerBudget {
            limit: policy.quota,
            remaining: Some(remaining),
            reset_after,
            window: policy.window,
            unit: policy.unit.unwrap_or_else(|| "requests".into()),
            reset_precision: structured_precision(reset_after),
            ..ServerBudget::new(name, SOURCE)
        });
    }
}

/// How coarsely a structured-field reset was written: an Integer is whole seconds, a Decimal
/// has three fraction digits.
fn structured_precision(reset: Option<Duration>) -> Duration {
    match reset {
        Some(reset) if reset.subsec_nanos() == 0 => Duration::from_secs(1),
        Some(_) => Duration::from_millis(1),
        None => Duration::ZERO,
    }
}

/// The pre-structured-field trio, and GitLab's version of it.
fn trio(ctx: &mut Ctx) {
    const FIELDS: [&str; 5] =
        ["ratelimit-limit", "ratelimit-remaining", "ratelimit-reset", "ratelimit-observed", "ratelimit-resettime"];
    if !FIELDS.iter().any(|f| ctx.has(f)) {
        return;
    }
    let gitlab = ["ratelimit-observed", "ratelimit-resettime", "ratelimit-name"].iter().any(|f| ctx.has(f));
    let (limit, policy_window) = match ctx.text("ratelimit-limit") {
        Some(text) => {
            let parsed = limit_with_policies(text);
            ctx.check("ratelimit-limit", parsed).map_or((None, None), |(l, w)| (Some(l), w))
        }
        None => (None, None),
    };
    let mut remaining = ctx.number("ratelimit-remaining");
    let mut budget = if gitlab {
        let observed = ctx.number("ratelimit-observed");
        if remaining.is_none() {
            remaining = limit.zip(observed).map(|(l, o)| (l - o).max(0.0));
        }
        let reset = match ctx.reset("ratelimit-reset", ResetKind::Epoch) {
            Some(reset) => Some(reset),
            None => ctx.reset("ratelimit-resettime", ResetKind::Timestamp),
        };
        let name = ctx.text("ratelimit-name").filter(|n| !n.is_empty()).unwrap_or("default");
        ServerBudget {
            reset_after: reset,
            // "The request quota for the client each minute."
            window: policy_window.or(Some(Duration::from_secs(60))),
            ..ServerBudget::new(name, "gitlab")
        }
    } else {
        ServerBudget {
            reset_after: ctx.reset("ratelimit-reset", ResetKind::Auto),
            window: policy_window,
            ..ServerBudget::new("default", SOURCE)
        }
    };
    budget.limit = limit;
    budget.remaining = remaining;
    ctx.push(budget);
}

/// A limit that may carry quota policies: `100`, `100, 100;w=60, 1000;w=3600`
/// (IETF drafts up to -06) or `100, 100;window=60` (seen in the wild). The first
/// number is the limit; the policy with the same quota gives the window.
pub(super) fn limit_with_policies(text: &str) -> Result<(f64, Option<Duration>), String> {
    if let Ok(limit) = parse_number(text) {
        return Ok((limit, None));
    }
    let invalid = || format!("{} is not a number or a quota policy list", quoted(text));
    let list = Parser::new(text).parse::<List>().map_err(|_| invalid())?;
    let items: Vec<_> = list
        .iter()
        .filter_map(|entry| match entry {
            ListEntry::Item(item) => Some(item),
            ListEntry::InnerList(_) => None,
        })
        .collect();
    let first = items.first().ok_or_else(invalid)?;
    let limit = number(&first.bare_item, "limit").map_err(|_| invalid())?;
    let mut window = None;
    for item in &items {
        if number(&item.bare_item, "quota").ok() == Some(limit)
            && let Some(w) = window_param(&item.params)?
        {
            window = Some(w);
            break;
        }
    }
    Ok((limit, window))
}

/// A policy name or quota unit: a String, or a Token as some servers send.
fn name_of(item: &BareItem) -> Option<String> {
    match item {
        BareItem::String(s) => Some(s.as_str().to_owned()),
        BareItem::Token(t) => Some(t.as_str().to_owned()),
        _ => None,
    }
}

/// A non-negative Integer or Decimal.
fn number(item: &BareItem, what: &str) -> Result<f64, String> {
    let n = match item {
        BareItem::Integer(i) => i64::from(*i) as f64,
        BareItem::Decimal(d) => f64::from(*d),
        _ => return Err(format!("{what} is not a number")),
    };
    if n < 0.0 {
        return Err(format!("{what} {n} is negative"));
    }
    Ok(n)
}

/// An optional numeric parameter.
fn param(params: &Parameters, key: &str) -> Result<Option<f64>, String> {
    params.get(key).map(|v| number(v, key)).transpose()
}

/// The `w` parameter: a positive number of seconds.
fn window(params: &Parameters) -> Result<Option<Duration>, String> {
    match param(params, "w")? {
        Some(w) if w > 0.0 => seconds(w).map(Some),
        Some(_) => Err("window (w) must be positive".into()),
        None => Ok(None),
    }
}

/// `w` or, as some servers write it, `window`.
fn window_param(params: &Parameters) -> Result<Option<Duration>, String> {
    match window(params)? {
        Some(w) => Ok(Some(w)),
        None => match param(params, "window")? {
            Some(w) if w > 0.0 => seconds(w).map(Some),
            _ => Ok(None),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;

    #[test]
    fn two_policies_matched_by_name() {
        // draft-10 §3 and §4 examples, combined.
        let info = parse(
            200,
            &[
                ("ratelimit-policy", r#""burst";q=100;w=60, "daily";q=1000;w=86400"#),
                ("ratelimit", r#""burst";r=50;t=30, "daily";r=999;t=3600"#),
            ],
        );
        assert_eq!(info.budgets.len(), 2, "{:#?}", info.budgets);
        let burst = budget(&info, "burst");
        assert_eq!(
            (burst.limit, burst.remaining, burst.reset_after, burst.window),
            (Some(100.0), Some(50.0), secs(30), secs(60))
        );
        assert_eq!(burst.source, "ietf-draft");
        let daily = budget(&info, "daily");
        assert_eq!(
            (daily.limit, daily.remaining, daily.reset_after, daily.window),
            (Some(1000.0), Some(999.0), secs(3600), secs(86400))
        );
        assert!(info.warnings.is_empty(), "{:?}", info.warnings);
    }

    #[test]
    fn fields_split_over_several_lines_combine() {
        let info = parse(
            200,
            &[
                ("ratelimit-policy", r#""permin";q=50;w=60"#),
                ("ratelimit-policy", r#""perhr";q=1000;w=3600"#),
                ("ratelimit", r#""perhr";r=10"#),
            ],
        );
        assert_eq!(budget(&info, "perhr").remaining, Some(10.0));
        assert_eq!(budget(&info, "perhr").limit, Some(1000.0));
        // A policy without a current RateLimit item is still reported.
        assert_eq!(budget(&info, "permin").limit, Some(50.0));
        assert_eq!(budget(&info, "permin").remaining, None);
    }

    #[test]
    fn quota_unit_and_partition_key() {
        // draft-10 §3.2 example.
        let info = parse(
            200,
            &[
                ("ratelimit-policy", r#""peruser";q=65535;qu="content-bytes";w=10;pk=:sdfjLJUOUH==:"#),
                ("ratelimit", r#""peruser";r=300;t=5;pk=:sdfjLJUOUH==:"#),
            ],
        );
        let b = budget(&info, "peruser");
        assert_eq!(b.unit, "content-bytes");
        assert_eq!((b.limit, b.remaining), (Some(65535.0), Some(300.0)));
    }

    #[test]
    fn ratelimit_without_policy() {
        // draft-10 §4.2 example: no window, a partition key.
        let info = parse(200, &[("ratelimit", r#""default";r=999;pk=:dHJpYWwxMjEzMjM=:"#)]);
        let b = budget(&info, "default");
        assert_eq!((b.limit, b.remaining, b.reset_after), (None, Some(999.0), None));
    }

    #[test]
    fn draft07_dictionary_with_integer_policy() {
        // draft-07 §3.5 example.
        let info = parse(200, &[("ratelimit-policy", "100;w=10"), ("ratelimit", "limit=100, remaining=50, reset=5")]);
        assert_eq!(info.budgets.len(), 1, "{:#?}", info.budgets);
        let b = budget(&info, "default");
        assert_eq!((b.limit, b.remaining, b.reset_after, b.window), (Some(100.0), Some(50.0), secs(5), secs(10)));
    }

    #[test]
    fn old_trio_with_policies_in_the_limit() {
        let info = parse(
            200,
            &[("ratelimit-limit", "10, 10;w=1, 50;w=60"), ("ratelimit-remaining", "9"), ("ratelimit-reset", "1")],
        );
        let b = budget(&info, "default");
        assert_eq!((b.limit, b.remaining, b.reset_after, b.window), (Some(10.0), Some(9.0), secs(1), secs(1)));
        assert_eq!(b.source, "ietf-draft");
    }

    #[test]
    fn gitlab_trio_with_epoch_reset_and_observed() {
        // GitLab docs example values; Date 30 s before the Unix-time reset.
        let info = parse(
            429,
            &[
                ("date", "Tue, 05 Jan 2021 10:59:30 GMT"),
                ("ratelimit-limit", "60"),
                ("ratelimit-name", "throttle_authenticated_web"),
                ("ratelimit-observed", "67"),
                ("ratelimit-remaining", "0"),
                ("ratelimit-reset", "1609844400"),
                ("ratelimit-resettime", "Tue, 05 Jan 2021 11:00:00 GMT"),
                ("retry-after", "30"),
            ],
        );
        let b = budget(&info, "throttle_authenticated_web");
        assert_eq!(b.source, "gitlab");
        assert_eq!((b.limit, b.remaining, b.reset_after, b.window), (Some(60.0), Some(0.0), secs(30), secs(60)));
        assert!(info.throttled);
        assert!(info.warnings.is_empty(), "{:?}", info.warnings);
    }

    #[test]
    fn gitlab_resettime_is_used_when_reset_is_broken() {
        let info = parse(
            200,
            &[
                ("date", "Tue, 05 Jan 2021 10:58:00 GMT"),
                ("ratelimit-limit", "600"),
                ("ratelimit-observed", "6"),
                ("ratelimit-reset", "soon"),
                ("ratelimit-resettime", "Tue, 05 Jan 2021 11:00:00 GMT"),
            ],
        );
        let b = budget(&info, "default");
        assert_eq!((b.remaining, b.reset_after), (Some(594.0), secs(120)));
        assert_eq!(info.warnings, [r#"ratelimit-reset: "soon" is not a number"#]);
    }

    #[test]
    fn malformed_structured_fields_are_ignored_with_warnings() {
        let info = parse(
            200,
            &[
                ("ratelimit-policy", r#""burst";q=100;w=60, "bad";w=10, "neg";q=-1"#),
                ("ratelimit", r#""burst";r=abc"#),
                ("x-ratelimit-limit", "60"),
            ],
        );
        // `r=abc` makes r a Token, which is not a number.
        assert!(info.warnings.iter().any(|w| w.contains(r#"policy "bad" has no quota (q)"#)));
        assert!(info.warnings.iter().any(|w| w.contains("q -1 is negative")));
        assert!(info.warnings.iter().any(|w| w.contains(r#"policy "burst": r is not a number"#)));
        // The valid policy and the unrelated header survive.
        assert_eq!(budget(&info, "burst").limit, Some(100.0));
        assert!(info.budgets.iter().any(|b| b.source == "x-ratelimit"));

        let info = parse(200, &[("ratelimit", "\"unterminated")]);
        assert!(info.budgets.is_empty());
        assert!(info.warnings[0].starts_with("ratelimit: "), "{:?}", info.warnings);
    }
}
