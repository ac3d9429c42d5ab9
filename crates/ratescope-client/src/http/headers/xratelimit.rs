//! The `X-RateLimit-*` and `X-Rate-Limit-*` families and their vendor flavours.
//!
//! One family (`x-ratelimit-` or `x-rate-limit-`) yields one budget; the flavour
//! decides its name, how its reset is read and its source:
//!
//! - **Discord**, recognised by `Bucket`, `Reset-After`, `Global` or `Scope`
//!   (docs.discord.com/developers/topics/rate-limits, "Header Format" and the
//!   exceeded-limit examples): `Reset` is epoch seconds with a fraction,
//!   `Reset-After` float seconds (preferred: it needs no clock), the bucket id
//!   names the budget, `Global: true` without a bucket names it `global`.
//! - **GitHub**, recognised by `x-ratelimit-resource`, or `used` next to `limit`
//!   (docs.github.com/en/rest/using-the-rest-api/rate-limits-for-the-rest-api,
//!   "Checking the status of your rate limit"): `reset` is UTC epoch seconds,
//!   the resource names the budget, and "if you exceed your primary rate limit,
//!   you will receive a 403 or 429 response, and the x-ratelimit-remaining header
//!   will be 0", so a 403 with remaining 0 is throttled.
//! - **Reddit**, recognised by `used` without `limit` (the Reddit admins'
//!   announcement of the headers, r/redditdev "Formal ratelimiting headers", and
//!   the API rules on the developer wiki): `used` and `remaining` are approximate
//!   (`remaining` may be fractional), `reset` is "approximate number of seconds to
//!   end of period", the window is 10 minutes; the limit is used + remaining.
//! - **X/Twitter** (docs.x.com/fundamentals/rate-limits) and **Okta**
//!   (developer.okta.com/docs/reference/rl-best-practices) send
//!   `x-rate-limit-limit/-remaining/-reset` with a Unix-time reset. X's posting
//!   endpoints add `x-app-limit-24hour-*` and `x-user-limit-24hour-*` (limit,
//!   remaining, Unix reset); that page does not list them, so their shape comes
//!   from X API clients that read them. They become the separate budgets `24h`
//!   and `user-24h` with source `x`.
//! - Anyone else: source `x-ratelimit` / `x-rate-limit`, budget `default`, reset
//!   read with the magnitude rule (`time::ResetKind::Auto`) since vendors disagree
//!   (epoch seconds, delta seconds, milliseconds, dates). A limit may carry
//!   policies (`100, 100;window=60, 10000;window=86400`, as WHOOP documents),
//!   and a 403 with remaining 0 counts as throttled, as on GitHub.

use std::time::Duration;

use super::ietf::limit_with_policies;
use super::time::ResetKind;
use super::{Ctx, ServerBudget};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flavour {
    Discord,
    GitHub,
    Reddit,
    Generic,
}

pub(super) fn parse(ctx: &mut Ctx) {
    family(ctx, "x-ratelimit-", "x-ratelimit");
    family(ctx, "x-rate-limit-", "x-rate-limit");
    twenty_four_hours(ctx, "x-app-limit-24hour-", "24h");
    twenty_four_hours(ctx, "x-user-limit-24hour-", "user-24h");
}

fn family(ctx: &mut Ctx, prefix: &str, generic_source: &str) {
    let h = |suffix: &str| format!("{prefix}{suffix}");
    let present = |ctx: &Ctx, suffixes: &[&str]| suffixes.iter().any(|s| ctx.has(&h(s)));
    const ALL: [&str; 9] =
        ["limit", "remaining", "reset", "used", "resource", "reset-after", "bucket", "global", "scope"];
    if !present(ctx, &ALL) {
        return;
    }
    let flavour = if present(ctx, &["reset-after", "bucket", "global", "scope"]) {
        Flavour::Discord
    } else if ctx.has(&h("resource")) || (ctx.has(&h("used")) && ctx.has(&h("limit"))) {
        Flavour::GitHub
    } else if ctx.has(&h("used")) {
        Flavour::Reddit
    } else {
        Flavour::Generic
    };

    let (mut limit, window) = match ctx.text(&h("limit")) {
        Some(text) => {
            let parsed = limit_with_policies(text);
            ctx.check(&h("limit"), parsed).map_or((None, None), |(l, w)| (Some(l), w))
        }
        None => (None, None),
    };
    let used = ctx.number(&h("used"));
    let mut remaining = ctx.number(&h("remaining"));
    if remaining.is_none() {
        remaining = limit.zip(used).map(|(l, u)| (l - u).max(0.0));
    }
    if limit.is_none() && flavour == Flavour::Reddit {
        limit = used.zip(remaining).map(|(u, r)| u + r);
    }

    let reset_after = match flavour {
        Flavour::Discord => match ctx.reset(&h("reset-after"), ResetKind::Delta) {
            Some(reset) => Some(reset),
            None => ctx.reset(&h("reset"), ResetKind::Epoch),
        },
        Flavour::GitHub => ctx.reset(&h("reset"), ResetKind::Epoch),
        Flavour::Reddit => ctx.reset(&h("reset"), ResetKind::Delta),
        Flavour::Generic => ctx.reset(&h("reset"), ResetKind::Auto),
    };

    let (name, source) = match flavour {
        Flavour::Discord => {
            let global = ctx.text(&h("global")).is_some_and(|g| g.eq_ignore_ascii_case("true"));
            let bucket = ctx.text(&h("bucket")).filter(|b| !b.is_empty());
            let name = bucket.unwrap_or(if global { "global" } else { "default" });
            (name.to_owned(), "discord")
        }
        Flavour::GitHub => {
            let resource = ctx.text(&h("resource")).filter(|r| !r.is_empty());
            (resource.unwrap_or("default").to_owned(), "github")
        }
        Flavour::Reddit => ("default".to_owned(), "reddit"),
        Flavour::Generic => ("default".to_owned(), generic_source),
    };

    if flavour != Flavour::Discord && ctx.status == Some(403) && remaining == Some(0.0) {
        ctx.throttled = true;
    }
    let window = match flavour {
        Flavour::Reddit => window.or(Some(Duration::from_secs(600))),
        _ => window,
    };
    ctx.push(ServerBudget { limit, remaining, reset_after, window, ..ServerBudget::new(name, source) });
}

/// X's 24-hour app and user limits on the posting endpoints.
fn twenty_four_hours(ctx: &mut Ctx, prefix: &str, name: &str) {
    let h = |suffix: &str| format!("{prefix}{suffix}");
    if !["limit", "remaining", "reset"].iter().any(|s| ctx.has(&h(s))) {
        return;
    }
    let budget = ServerBudget {
        limit: ctx.number(&h("limit")),
        remaining: ctx.number(&h("remaining")),
        reset_after: ctx.reset(&h("reset"), ResetKind::Epoch),
        window: Some(Duration::from_secs(86_400)),
        ..ServerBudget::new(name, "x")
    };
    ctx.push(budget);
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::test_support::*;

    #[test]
    fn github_documented_headers() {
        // docs.github.com "Checking the status of your rate limit" header set.
        let reset = (NOW + 1800).to_string();
        let info = parse(
            200,
            &[
                ("x-ratelimit-limit", "5000"),
                ("x-ratelimit-remaining", "4999"),
                ("x-ratelimit-used", "1"),
                ("x-ratelimit-reset", &reset),
                ("x-ratelimit-resource", "core"),
            ],
        );
        let b = budget(&info, "core");
        assert_eq!(b.source, "github");
        assert_eq!((b.limit, b.remaining, b.reset_after), (Some(5000.0), Some(4999.0), secs(1800)));
        assert!(!info.throttled);
    }

    #[test]
    fn github_403_with_zero_remaining_is_throttled() {
        // The doc's unauthenticated example: HTTP 403, limit 60, remaining 0.
        let reset = (NOW + 60).to_string();
        let pairs = [
            ("x-ratelimit-limit", "60"),
            ("x-ratelimit-remaining", "0"),
            ("x-ratelimit-used", "60"),
            ("x-ratelimit-reset", reset.as_str()),
            ("x-ratelimit-resource", "core"),
        ];
        assert!(parse(403, &pairs).throttled);
        // A 403 for another reason is not throttling.
        let mut others = pairs;
        others[1] = ("x-ratelimit-remaining", "12");
        assert!(!parse(403, &others).throttled);
    }

    #[test]
    fn x_endpoint_and_24_hour_budgets() {
        // docs.x.com: x-rate-limit-* with a Unix reset; plus the 24-hour app
        // and user limits returned by the posting endpoint.
        let endpoint_reset = (NOW + 900).to_string();
        let day_reset = (NOW + 86_000).to_string();
        let user_reset = (NOW + 40_000).to_string();
        let info = parse(
            200,
            &[
                ("x-rate-limit-limit", "900"),
                ("x-rate-limit-remaining", "847"),
                ("x-rate-limit-reset", &endpoint_reset),
                ("x-app-limit-24hour-limit", "1667"),
                ("x-app-limit-24hour-remaining", "1660"),
                ("x-app-limit-24hour-reset", &day_reset),
                ("x-user-limit-24hour-limit", "100"),
                ("x-user-limit-24hour-remaining", "1"),
                ("x-user-limit-24hour-reset", &user_reset),
            ],
        );
        assert_eq!(info.budgets.len(), 3, "{:#?}", info.budgets);
        let endpoint = budget(&info, "default");
        assert_eq!(endpoint.source, "x-rate-limit");
        assert_eq!((endpoint.limit, endpoint.remaining, endpoint.reset_after), (Some(900.0), Some(847.0), secs(900)));
        let day = budget(&info, "24h");
        assert_eq!(day.source, "x");
        assert_eq!(
            (day.limit, day.remaining, day.reset_after, day.window),
            (Some(1667.0), Some(1660.0), secs(86_000), secs(86_400))
        );
        let user = budget(&info, "user-24h");
        assert_eq!((user.remaining, user.reset_after), (Some(1.0), secs(40_000)));
        assert_eq!(info.most_restrictive().map(|b| b.name.as_str()), Some("user-24h"));
    }

    #[test]
    fn okta_documented_example() {
        // developer.okta.com rate-limit best practices example.
        let info = parse(
            200,
            &[
                ("date", "Thu, 31 Dec 2020 23:59:00 GMT"),
                ("x-rate-limit-limit", "1200"),
                ("x-rate-limit-remaining", "1199"),
                ("x-rate-limit-reset", "1609459200"),
            ],
        );
        let b = budget(&info, "default");
        assert_eq!((b.limit, b.remaining, b.reset_after), (Some(1200.0), Some(1199.0), secs(60)));
    }

    #[test]
    fn reddit_float_remaining_delta_reset_and_ten_minute_window() {
        let info =
            parse(200, &[("x-ratelimit-used", "4"), ("x-ratelimit-remaining", "596.0"), ("x-ratelimit-reset", "342")]);
        let b = budget(&info, "default");
        assert_eq!(b.source, "reddit");
        assert_eq!((b.limit, b.remaining, b.reset_after, b.window), (Some(600.0), Some(596.0), secs(342), secs(600)));
    }

    #[test]
    fn discord_bucket_prefers_reset_after() {
        // docs.discord.com "Example Exceeded User Rate Limit Response".
        let info = parse_with_body(
            429,
            &[
                ("retry-after", "65"),
                ("x-ratelimit-limit", "10"),
                ("x-ratelimit-remaining", "0"),
                ("x-ratelimit-reset", "1470173023.123"),
                ("x-ratelimit-reset-after", "64.57"),
                ("x-ratelimit-bucket", "abcd1234"),
                ("x-ratelimit-scope", "user"),
            ],
            r#"{"message": "You are being rate limited.", "retry_after": 64.57, "global": false}"#,
        );
        let b = budget(&info, "abcd1234");
        assert_eq!(b.source, "discord");
        assert_eq!((b.limit, b.remaining, b.reset_after), (Some(10.0), Some(0.0), Some(Duration::from_millis(64_570))));
        // The header wins over the body's retry_after.
        assert_eq!(info.retry_after, secs(65));
        assert!(info.throttled);
    }

    #[test]
    fn discord_epoch_float_reset_without_reset_after() {
        let info = parse(
            200,
            &[
                ("date", "Tue, 02 Aug 2016 21:23:40 GMT"),
                ("x-ratelimit-limit", "5"),
                ("x-ratelimit-remaining", "4"),
                ("x-ratelimit-reset", "1470173023.123"),
                ("x-ratelimit-bucket", "abcd1234"),
            ],
        );
        // 1470173023.123 - 1470173020 (the Date) = 3.123 s.
        assert_eq!(budget(&info, "abcd1234").reset_after, Some(Duration::from_millis(3123)));
    }

    #[test]
    fn discord_global_limit() {
        let info = parse_with_body(
            429,
            &[("x-ratelimit-global", "true"), ("x-ratelimit-scope", "global")],
            r#"{"message": "You are being rate limited.", "retry_after": 64.57, "global": true}"#,
        );
        // No counts, so no budget; the body's float retry_after is the hint.
        assert!(info.budgets.is_empty());
        assert_eq!(info.retry_after, Some(Duration::from_millis(64_570)));
    }

    #[test]
    fn generic_vendor_with_window_policies_and_reset_rule() {
        // WHOOP's documented form; reset 3 is small, so delta seconds.
        let info = parse(
            200,
            &[
                ("x-ratelimit-limit", "100, 100;window=60, 10000;window=86400"),
                ("x-ratelimit-remaining", "98"),
                ("x-ratelimit-reset", "3"),
            ],
        );
        let b = budget(&info, "default");
        assert_eq!(b.source, "x-ratelimit");
        assert_eq!((b.limit, b.remaining, b.reset_after, b.window), (Some(100.0), Some(98.0), secs(3), secs(60)));
    }

    #[test]
    fn malformed_values_leave_the_rest_parsed() {
        let reset = (NOW + 10).to_string();
        let info = parse(
            200,
            &[
                ("x-ratelimit-limit", "60"),
                ("x-ratelimit-remaining", "abc"),
                ("x-ratelimit-reset", &reset),
                ("x-rate-limit-limit", "NaN"),
                ("x-rate-limit-remaining", "-4"),
                ("x-rate-limit-reset", "inf"),
            ],
        );
        assert_eq!(
            info.warnings,
            [
                r#"x-ratelimit-remaining: "abc" is not a number"#,
                r#"x-rate-limit-limit: "NaN" is not a number or a quota policy list"#,
                r#"x-rate-limit-remaining: "-4" is negative"#,
                r#"x-rate-limit-reset: "inf" is not a finite number"#,
            ]
        );
        assert_eq!(info.budgets.len(), 1);
        let b = budget(&info, "default");
        assert_eq!((b.limit, b.remaining, b.reset_after), (Some(60.0), None, secs(10)));
    }

    #[test]
    fn past_reset_clamps_to_zero() {
        let reset = (NOW - 500).to_string();
        let info = parse(200, &[("x-ratelimit-limit", "60"), ("x-ratelimit-used", "1"), ("x-ratelimit-reset", &reset)]);
        assert_eq!(budget(&info, "default").reset_after, Some(Duration::ZERO));
        // Remaining derived from limit - used.
        assert_eq!(budget(&info, "default").remaining, Some(59.0));
    }
}
