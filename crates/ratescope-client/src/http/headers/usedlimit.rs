//! Used/limit forms and vendor counters: Shopify, Salesforce, HubSpot.
//!
//! - **Shopify REST Admin API**, shopify.dev/docs/api/admin-rest/usage/rate-limits
//!   and shopify.dev/docs/api/usage/limits ("The leaky bucket algorithm"):
//!   `X-Shopify-Shop-Api-Call-Limit: 32/40` is requests in the bucket / bucket size;
//!   the bucket leaks at the plan's requests per second (2/s for the standard 40),
//!   and every plan's bucket is 20 s of leak, so a full bucket drains in 20 s:
//!   remaining = 40 - 32 = 8, window 20 s, reset (empty bucket) in 32 / 2 = 16 s.
//! - **Shopify GraphQL Admin API**, same pages, "calculated query cost": the JSON
//!   body's `extensions.cost.throttleStatus` has `maximumAvailable`,
//!   `currentlyAvailable` and `restoreRate` (points per second) — a budget counted
//!   in `points`.
//! - **Salesforce**, developer.salesforce.com REST API Developer Guide, "Limit Info
//!   Header": `Sforce-Limit-Info: api-usage=18/5000` (daily API calls used/limit;
//!   a rolling 24-hour limit), optionally `; api-bursts=1/750` and
//!   `per-app-api-usage=17/250(appName=sample-connected-app)`; unit `calls`. Over
//!   the limit Salesforce answers 403 (REQUEST_LIMIT_EXCEEDED), so a 403 with
//!   api-usage at its limit is throttled.
//! - **HubSpot**, the 2018-11-06 developer changelog ("rate limit information
//!   headers"): `X-HubSpot-RateLimit-Daily` / `-Daily-Remaining` (per day) and
//!   `-Secondly` / `-Secondly-Remaining`; the burst headers `-Max` / `-Remaining`
//!   per `-Interval-Milliseconds` (10 000 ms) are those of the current "API usage
//!   guidelines" page (developers.hubspot.com/docs/api/usage-details), whose copy
//!   available here did not show its header table.

use std::time::Duration;

use serde_json::Value;

use super::time::{non_negative, parse_number, seconds};
use super::{Ctx, ServerBudget, quoted};

pub(super) fn parse(ctx: &mut Ctx) {
    shopify_rest(ctx);
    shopify_graphql(ctx);
    salesforce(ctx);
    hubspot(ctx);
}

/// `32/40` as (used, limit).
fn used_limit(text: &str) -> Result<(f64, f64), String> {
    let (used, limit) = text.split_once('/').ok_or_else(|| format!("{} is not used/limit", quoted(text)))?;
    Ok((parse_number(used)?, parse_number(limit)?))
}

fn shopify_rest(ctx: &mut Ctx) {
    const FIELD: &str = "x-shopify-shop-api-call-limit";
    /// Bucket size divided by leak rate, the same for every plan.
    const DRAIN_SECS: f64 = 20.0;
    let Some(text) = ctx.text(FIELD) else { return };
    let Some((used, limit)) = ctx.check(FIELD, used_limit(text)) else {
        return;
    };
    let reset_after = (limit > 0.0).then(|| seconds(used.min(limit) / limit * DRAIN_SECS).ok()).flatten();
    ctx.push(ServerBudget {
        limit: Some(limit),
        remaining: Some((limit - used).max(0.0)),
        reset_after,
        window: Some(Duration::from_secs(20)),
        ..ServerBudget::new("rest-admin", "shopify")
    });
}

fn shopify_graphql(ctx: &mut Ctx) {
    const WHERE: &str = "body extensions.cost.throttleStatus";
    let Some(status) = ctx.body.as_ref().and_then(|b| b.pointer("/extensions/cost/throttleStatus")).cloned() else {
        return;
    };
    let mut field = |key: &str| match status.get(key) {
        None | Some(Value::Null) => None,
        Some(Value::Number(n)) => {
            let checked = n
                .as_f64()
                .ok_or_else(|| format!("{key} {n} is not a number"))
                .and_then(|v| non_negative(v, &n.to_string()).map_err(|e| format!("{key}: {e}")));
            ctx.check(WHERE, checked)
        }
        Some(other) => {
            ctx.warn(WHERE, format!("{key} {} is not a number", quoted(&other.to_string())));
            None
        }
    };
    let maximum = field("maximumAvailable");
    let current = field("currentlyAvailable");
    let rate = field("restoreRate").filter(|r| *r > 0.0);
    let reset_after = maximum.zip(current).zip(rate).and_then(|((m, c), r)| seconds((m - c).max(0.0) / r).ok());
    let window = maximum.zip(rate).and_then(|(m, r)| seconds(m / r).ok());
    ctx.push(ServerBudget {
        limit: maximum,
        remaining: current,
        reset_after,
        window,
        unit: "points".into(),
        ..ServerBudget::new("graphql-cost", "shopify")
    });
}

fn salesforce(ctx: &mut Ctx) {
    const FIELD: &str = "sforce-limit-info";
    let Some(text) = ctx.text(FIELD) else { return };
    for part in text.split([';', ',']).map(str::trim).filter(|p| !p.is_empty()) {
        let Some((key, rest)) = part.split_once('=') else {
            ctx.warn(FIELD, format!("{} is not name=used/limit", quoted(part)));
            continue;
        };
        let (counts, app) = match rest.split_once('(') {
            Some((counts, app)) => (counts, app.trim_end_matches(')').strip_prefix("appName=")),
            None => (rest, None),
        };
        let Some((used, limit)) = ctx.check(FIELD, used_limit(counts.trim())) else {
            continue;
        };
        let key = key.trim();
        let name = match app {
            Some(app) => format!("{key}:{app}"),
            None => key.to_owned(),
        };
        if key == "api-usage" && ctx.status == Some(403) && used >= limit {
            ctx.throttled = true;
        }
        ctx.push(ServerBudget {
            limit: Some(limit),
            remaining: Some((limit - used).max(0.0)),
            window: (key == "api-usage").then_some(Duration::from_secs(86_400)),
            unit: "calls".into(),
            ..ServerBudget::new(name, "salesforce")
        });
    }
}

fn hubspot(ctx: &mut Ctx) {
    const P: &str = "x-hubspot-ratelimit-";
    let h = |suffix: &str| format!("{P}{suffix}");
    let counters = [
        ("daily", "daily", "daily-remaining", Some(86_400_000.0)),
        ("interval", "max", "remaining", None),
        ("secondly", "secondly", "secondly-remaining", Some(1000.0)),
    ];
    for (name, limit, remaining, window_ms) in counters {
        if !ctx.has(&h(limit)) && !ctx.has(&h(remaining)) {
            continue;
        }
        let window_ms = match window_ms {
            Some(ms) => Some(ms),
            None => ctx.number(&h("interval-milliseconds")),
        };
        let budget = ServerBudget {
            limit: ctx.number(&h(limit)),
            remaining: ctx.number(&h(remaining)),
            window: window_ms.and_then(|ms| seconds(ms / 1000.0).ok()),
            ..ServerBudget::new(name, "hubspot")
        };
        ctx.push(budget);
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;

    #[test]
    fn shopify_bucket_32_of_40() {
        // The brief's and Shopify's leaky bucket: 40 deep, leaking 2/s.
        let info = parse(200, &[("x-shopify-shop-api-call-limit", "32/40")]);
        let b = budget(&info, "rest-admin");
        assert_eq!(b.source, "shopify");
        assert_eq!((b.limit, b.remaining, b.reset_after, b.window), (Some(40.0), Some(8.0), secs(16), secs(20)));
    }

    #[test]
    fn shopify_full_bucket_429_with_float_retry_after() {
        let info = parse(429, &[("x-shopify-shop-api-call-limit", "40/40"), ("retry-after", "2.0")]);
        assert_eq!(budget(&info, "rest-admin").remaining, Some(0.0));
        assert_eq!(info.retry_after, secs(2));
        assert!(info.throttled);
    }

    #[test]
    fn shopify_malformed_call_limit() {
        let info = parse(200, &[("x-shopify-shop-api-call-limit", "32 of 40")]);
        assert!(info.budgets.is_empty());
        assert_eq!(info.warnings, [r#"x-shopify-shop-api-call-limit: "32 of 40" is not used/limit"#]);
    }

    #[test]
    fn shopify_graphql_cost_in_body() {
        // shopify.dev rate-limits page, GraphQL cost example.
        let body = r#"{"data": {}, "extensions": {"cost": {"requestedQueryCost": 101,
            "actualQueryCost": 46, "throttleStatus": {"maximumAvailable": 1000.0,
            "currentlyAvailable": 954, "restoreRate": 50.0}}}}"#;
        let info = parse_with_body(200, &[], body);
        let b = budget(&info, "graphql-cost");
        assert_eq!(b.unit, "points");
        assert_eq!(
            (b.limit, b.remaining, b.reset_after, b.window),
            (Some(1000.0), Some(954.0), Some(std::time::Duration::from_millis(920)), secs(20))
        );
    }

    #[test]
    fn salesforce_documented_examples() {
        // REST API Developer Guide, "Limit Info Header" examples.
        let info = parse(200, &[("sforce-limit-info", "api-usage=10018/100000; api-bursts=1/750")]);
        let usage = budget(&info, "api-usage");
        assert_eq!((usage.limit, usage.remaining, usage.window), (Some(100_000.0), Some(89_982.0), secs(86_400)));
        assert_eq!((usage.unit.as_str(), usage.source.as_str()), ("calls", "salesforce"));
        assert_eq!(budget(&info, "api-bursts").remaining, Some(749.0));

        let info = parse(
            200,
            &[("sforce-limit-info", "api-usage=25/5000; per-app-api-usage=17/250(appName=sample-connected-app)")],
        );
        assert_eq!(budget(&info, "per-app-api-usage:sample-connected-app").remaining, Some(233.0));
        assert!(!info.throttled);
    }

    #[test]
    fn salesforce_403_at_the_limit_is_throttled() {
        assert!(parse(403, &[("sforce-limit-info", "api-usage=5000/5000")]).throttled);
        assert!(!parse(403, &[("sforce-limit-info", "api-usage=18/5000")]).throttled);
    }

    #[test]
    fn hubspot_daily_interval_and_secondly() {
        let info = parse(
            200,
            &[
                ("x-hubspot-ratelimit-daily", "250000"),
                ("x-hubspot-ratelimit-daily-remaining", "249900"),
                ("x-hubspot-ratelimit-interval-milliseconds", "10000"),
                ("x-hubspot-ratelimit-max", "100"),
                ("x-hubspot-ratelimit-remaining", "97"),
                ("x-hubspot-ratelimit-secondly", "10"),
                ("x-hubspot-ratelimit-secondly-remaining", "9"),
            ],
        );
        assert_eq!(info.budgets.len(), 3, "{:#?}", info.budgets);
        let daily = budget(&info, "daily");
        assert_eq!((daily.limit, daily.remaining, daily.window), (Some(250_000.0), Some(249_900.0), secs(86_400)));
        let interval = budget(&info, "interval");
        assert_eq!((interval.limit, interval.remaining, interval.window), (Some(100.0), Some(97.0), secs(10)));
        assert_eq!(budget(&info, "secondly").window, secs(1));
        assert!(info.budgets.iter().all(|b| b.source == "hubspot"));
    }
}
