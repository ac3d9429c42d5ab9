//! Multi-budget families whose header names carry the budget: OpenAI and Anthropic.
//!
//! - **OpenAI**, platform.openai.com/docs/guides/rate-limits, "Rate limits in
//!   headers": `x-ratelimit-{limit,remaining,reset}-{requests,tokens}`, the resets
//!   being Go-style durations "until the rate limit resets to its initial state"
//!   (`1s`, `6m0s`, `12ms`). Any other suffix (`tokens_usage_based`, seen in
//!   responses) is a budget of its own; a bare number reset is read as seconds, as
//!   some OpenAI-compatible servers send.
//! - **Anthropic**, docs.anthropic.com/en/api/rate-limits, "Response headers":
//!   `anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-{limit,remaining,reset}`,
//!   the resets being RFC 3339 timestamps of full replenishment (so measured
//!   against the `Date` header). Budgets are named by the middle part with
//!   underscores (`input_tokens`), which is also their unit; other middles
//!   (`unified-…`) are kept, with epoch-number resets accepted too.

use std::collections::BTreeSet;

use super::time::ResetKind;
use super::{Ctx, ServerBudget};

pub(super) fn parse(ctx: &mut Ctx) {
    let names = ctx.names();

    let openai: BTreeSet<&str> = names.iter().filter_map(|n| openai_suffix(n)).collect();
    for suffix in openai {
        let h = |kind: &str| format!("x-ratelimit-{kind}-{suffix}");
        let unit = match suffix {
            "requests" | "tokens" => suffix,
            s if s.contains("token") => "tokens",
            s => s,
        };
        let budget = ServerBudget {
            limit: ctx.number(&h("limit")),
            remaining: ctx.number(&h("remaining")),
            reset_after: ctx.reset(&h("reset"), ResetKind::Duration),
            unit: unit.to_owned(),
            ..ServerBudget::new(suffix, "openai")
        };
        ctx.push(budget);
    }

    let anthropic: BTreeSet<&str> = names.iter().filter_map(|n| anthropic_middle(n)).collect();
    for middle in anthropic {
        let h = |kind: &str| format!("anthropic-ratelimit-{middle}-{kind}");
        let name = middle.replace('-', "_");
        let budget = ServerBudget {
            limit: ctx.number(&h("limit")),
            remaining: ctx.number(&h("remaining")),
            reset_after: ctx.reset(&h("reset"), ResetKind::Timestamp),
            unit: name.clone(),
            ..ServerBudget::new(name, "anthropic")
        };
        ctx.push(budget);
    }
}

/// `requests` in `x-ratelimit-limit-requests`; not Discord's `reset-after`.
fn openai_suffix(name: &str) -> Option<&str> {
    ["x-ratelimit-limit-", "x-ratelimit-remaining-", "x-ratelimit-reset-"]
        .iter()
        .find_map(|prefix| name.strip_prefix(prefix))
        .filter(|suffix| !suffix.is_empty() && *suffix != "after")
}

/// `input-tokens` in `anthropic-ratelimit-input-tokens-limit`.
fn anthropic_middle(name: &str) -> Option<&str> {
    let rest = name.strip_prefix("anthropic-ratelimit-")?;
    ["-limit", "-remaining", "-reset"]
        .iter()
        .find_map(|suffix| rest.strip_suffix(suffix))
        .filter(|middle| !middle.is_empty())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::test_support::*;

    #[test]
    fn openai_documented_example_requests_and_tokens() {
        // platform.openai.com "Rate limits in headers" sample values.
        let info = parse(
            200,
            &[
                ("x-ratelimit-limit-requests", "60"),
                ("x-ratelimit-limit-tokens", "150000"),
                ("x-ratelimit-remaining-requests", "59"),
                ("x-ratelimit-remaining-tokens", "149984"),
                ("x-ratelimit-reset-requests", "1s"),
                ("x-ratelimit-reset-tokens", "6m0s"),
            ],
        );
        assert_eq!(info.budgets.len(), 2, "{:#?}", info.budgets);
        let requests = budget(&info, "requests");
        assert_eq!((requests.limit, requests.remaining, requests.reset_after), (Some(60.0), Some(59.0), secs(1)));
        assert_eq!((requests.unit.as_str(), requests.source.as_str()), ("requests", "openai"));
        let tokens = budget(&info, "tokens");
        assert_eq!((tokens.limit, tokens.remaining, tokens.reset_after), (Some(150_000.0), Some(149_984.0), secs(360)));
        assert_eq!(tokens.unit, "tokens");
    }

    #[test]
    fn openai_millisecond_and_compound_resets_and_extra_suffixes() {
        let info = parse(
            200,
            &[
                ("x-ratelimit-limit-requests", "5000"),
                ("x-ratelimit-reset-requests", "20ms"),
                ("x-ratelimit-limit-tokens", "160000"),
                ("x-ratelimit-reset-tokens", "1h2m3.5s"),
                ("x-ratelimit-limit-tokens_usage_based", "160000"),
                ("x-ratelimit-reset-tokens_usage_based", "0s"),
            ],
        );
        assert_eq!(budget(&info, "requests").reset_after, Some(Duration::from_millis(20)));
        assert_eq!(budget(&info, "tokens").reset_after, Some(Duration::from_millis(3_723_500)));
        let extra = budget(&info, "tokens_usage_based");
        assert_eq!((extra.unit.as_str(), extra.reset_after), ("tokens", Some(Duration::ZERO)));
    }

    #[test]
    fn openai_bad_duration_is_a_warning() {
        let info = parse(200, &[("x-ratelimit-remaining-tokens", "100"), ("x-ratelimit-reset-tokens", "6 minutes")]);
        assert_eq!(budget(&info, "tokens").remaining, Some(100.0));
        assert_eq!(info.warnings, [r#"x-ratelimit-reset-tokens: "6 minutes" is not a duration"#]);
    }

    #[test]
    fn anthropic_four_budgets_with_rfc3339_resets() {
        // Header set as documented at docs.anthropic.com/en/api/rate-limits,
        // values from a recorded response (Date 2025-08-21T12:40:00Z).
        let info = parse(
            200,
            &[
                ("date", "Thu, 21 Aug 2025 12:40:00 GMT"),
                ("anthropic-ratelimit-input-tokens-limit", "80000"),
                ("anthropic-ratelimit-input-tokens-remaining", "80000"),
                ("anthropic-ratelimit-input-tokens-reset", "2025-08-21T12:40:59Z"),
                ("anthropic-ratelimit-output-tokens-limit", "16000"),
                ("anthropic-ratelimit-output-tokens-remaining", "15000"),
                ("anthropic-ratelimit-output-tokens-reset", "2025-08-21T12:41:00.5Z"),
                ("anthropic-ratelimit-requests-limit", "1000"),
                ("anthropic-ratelimit-requests-remaining", "999"),
                ("anthropic-ratelimit-requests-reset", "2025-08-21T14:40:30+02:00"),
                ("anthropic-ratelimit-tokens-limit", "96000"),
                ("anthropic-ratelimit-tokens-remaining", "95000"),
                ("anthropic-ratelimit-tokens-reset", "2025-08-21T07:40:10-05:00"),
            ],
        );
        assert_eq!(info.budgets.len(), 4, "{:#?}", info.budgets);
        let input = budget(&info, "input_tokens");
        assert_eq!((input.unit.as_str(), input.source.as_str()), ("input_tokens", "anthropic"));
        assert_eq!(input.reset_after, secs(59));
        assert_eq!(budget(&info, "output_tokens").reset_after, Some(Duration::from_millis(60_500)));
        let requests = budget(&info, "requests");
        assert_eq!((requests.unit.as_str(), requests.reset_after), ("requests", secs(30)));
        assert_eq!(budget(&info, "tokens").reset_after, secs(10));
        assert!(info.warnings.is_empty(), "{:?}", info.warnings);
    }

    #[test]
    fn anthropic_reset_in_the_past_clamps_to_zero() {
        let info = parse(
            200,
            &[
                ("date", "Thu, 21 Aug 2025 12:45:00 GMT"),
                ("anthropic-ratelimit-requests-remaining", "999"),
                ("anthropic-ratelimit-requests-reset", "2025-08-21T12:40:59Z"),
            ],
        );
        assert_eq!(budget(&info, "requests").reset_after, Some(Duration::ZERO));
    }
}
