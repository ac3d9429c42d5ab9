//! `Retry-After`, and retry hints in JSON bodies when the header gives none.
//!
//! - Header: RFC 9110 §10.2.3, delay-seconds or an HTTP-date in any of the three
//!   forms of §5.6.7 (IMF-fixdate, RFC 850, asctime). A fractional delay
//!   (`2.0`, as Shopify documents) is tolerated. A date is measured against the
//!   response's `Date`, like every absolute time here (see `time`).
//! - Body, used only when the header is absent or unusable — a header always wins:
//!   1. Google's error model (cloud.google.com/apis/design/errors, and the
//!      `google.rpc.RetryInfo` reference): an `error.details[]` entry whose `@type`
//!      ends in `google.rpc.RetryInfo`, with `retryDelay` a proto3 JSON Duration
//!      (`"1.5s"`);
//!   2. otherwise the shallowest `retry_after_ms` (milliseconds) or `retry_after`
//!      (seconds, possibly fractional, as in Discord's documented 429 body) at the
//!      top level or nested anywhere in the document.
//!
//!   Bodies that are not JSON are ignored silently; they are usually HTML.

use std::collections::VecDeque;
use std::time::Duration;

use serde_json::Value;

use super::time::{non_negative, parse_number, parse_timestamp, seconds, text_seconds};
use super::{Ctx, quoted};

/// Bounds on the body search, so a hostile body cannot make it slow.
const MAX_DEPTH: usize = 16;
const MAX_NODES: usize = 10_000;

pub(super) fn parse(ctx: &mut Ctx) -> Option<Duration> {
    if let Some(text) = ctx.text("retry-after") {
        let delay = if text.parse::<f64>().is_ok() {
            text_seconds(text)
        } else {
            parse_timestamp(text)
                .map(|at| ctx.clock.until(at))
                .map_err(|_| format!("{} is neither delay-seconds nor an HTTP-date", quoted(text)))
        };
        if let Some(delay) = ctx.check("retry-after", delay) {
            return Some(delay);
        }
    }
    let hint = ctx.body.as_ref().and_then(|body| google_retry_info(body).or_else(|| search(body)));
    let (what, delay) = hint?;
    ctx.check(&format!("body {what}"), delay)
}

type Hint = (&'static str, Result<Duration, String>);

fn google_retry_info(body: &Value) -> Option<Hint> {
    let details = body.pointer("/error/details")?.as_array()?;
    let info = details
        .iter()
        .find(|d| d.get("@type").and_then(Value::as_str).is_some_and(|t| t.ends_with("google.rpc.RetryInfo")))?;
    const WHAT: &str = "error.details[RetryInfo].retryDelay";
    let delay = match info.get("retryDelay") {
        Some(Value::String(text)) => text
            .trim()
            .strip_suffix('s')
            .ok_or_else(|| format!("{} is not a duration like \"1.5s\"", quoted(text)))
            .and_then(parse_number)
            .and_then(seconds),
        Some(other) => Err(format!("{} is not a duration string", quoted(&other.to_string()))),
        None => return None,
    };
    Some((WHAT, delay))
}

/// Breadth-first, so the shallowest hint wins; `retry_after_ms` before
/// `retry_after` within one object.
fn search(body: &Value) -> Option<Hint> {
    let mut queue = VecDeque::from([(body, 0usize)]);
    let mut visited = 0;
    while let Some((value, depth)) = queue.pop_front() {
        visited += 1;
        if visited > MAX_NODES {
            return None;
        }
        let children: Box<dyn Iterator<Item = &Value>> = match value {
            Value::Object(map) => {
                if let Some(ms) = map.get("retry_after_ms") {
                    let delay = number(ms).and_then(|ms| seconds(ms / 1000.0));
                    return Some(("retry_after_ms", delay));
                }
                if let Some(secs) = map.get("retry_after") {
                    return Some(("retry_after", number(secs).and_then(seconds)));
                }
                Box::new(map.values())
            }
            Value::Array(items) => Box::new(items.iter()),
            _ => continue,
        };
        if depth < MAX_DEPTH {
            queue.extend(children.map(|child| (child, depth + 1)));
        }
    }
    None
}

/// A JSON number, or a string holding one.
fn number(value: &Value) -> Result<f64, String> {
    match value {
        Value::Number(n) => {
            let shown = n.to_string();
            let v = n.as_f64().ok_or_else(|| format!("{} is not a number", quoted(&shown)))?;
            non_negative(v, &shown)
        }
        Value::String(text) => parse_number(text),
        other => Err(format!("{} is not a number", quoted(&other.to_string()))),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::test_support::*;

    #[test]
    fn delay_seconds_and_all_three_http_date_forms() {
        assert_eq!(parse(429, &[("retry-after", "120")]).retry_after, secs(120));
        // RFC 9110 §5.6.7's instant, 30 s after the response's Date.
        let date = ("date", "Sun, 06 Nov 1994 08:49:07 GMT");
        for form in ["Sun, 06 Nov 1994 08:49:37 GMT", "Sunday, 06-Nov-94 08:49:37 GMT", "Sun Nov  6 08:49:37 1994"] {
            let info = parse(503, &[date, ("retry-after", form)]);
            assert_eq!(info.retry_after, secs(30), "{form}");
            assert!(info.throttled, "503 with Retry-After is throttling");
        }
    }

    #[test]
    fn http_date_in_the_past_clamps_to_zero() {
        let info =
            parse(429, &[("date", "Sun, 06 Nov 1994 09:00:00 GMT"), ("retry-after", "Sun, 06 Nov 1994 08:49:37 GMT")]);
        assert_eq!(info.retry_after, Some(Duration::ZERO));
    }

    #[test]
    fn bad_header_is_a_warning_and_the_body_is_the_fallback() {
        let info = parse_with_body(429, &[("retry-after", "-5")], r#"{"retry_after": 3}"#);
        assert_eq!(info.retry_after, secs(3));
        assert_eq!(info.warnings, [r#"retry-after: "-5" is negative"#]);

        let info = parse(429, &[("retry-after", "later")]);
        assert_eq!(info.retry_after, None);
        assert_eq!(info.warnings, [r#"retry-after: "later" is neither delay-seconds nor an HTTP-date"#]);
    }

    #[test]
    fn header_wins_over_body() {
        let info = parse_with_body(429, &[("retry-after", "7")], r#"{"retry_after": 99}"#);
        assert_eq!(info.retry_after, secs(7));
    }

    #[test]
    fn body_hints_top_level_nested_and_milliseconds() {
        let cases = [
            (r#"{"retry_after": 1.25}"#, Duration::from_millis(1250)),
            (r#"{"retry_after": "4"}"#, Duration::from_secs(4)),
            (r#"{"error": {"code": 429, "retry_after_ms": 1500}}"#, Duration::from_millis(1500)),
            (
                r#"{"errors": [{"detail": {"retry_after": 2}}], "x": {"y": {"z": {"retry_after": 9}}}}"#,
                Duration::from_secs(2),
            ),
        ];
        for (body, expected) in cases {
            assert_eq!(parse_with_body(429, &[], body).retry_after, Some(expected), "{body}");
        }
    }

    #[test]
    fn google_retry_info() {
        // google.rpc.Status as JSON, as Google APIs return on RESOURCE_EXHAUSTED.
        let body = r#"{"error": {"code": 429, "status": "RESOURCE_EXHAUSTED",
            "message": "Quota exceeded", "details": [
              {"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": []},
              {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "1.5s"}]}}"#;
        let info = parse_with_body(429, &[], body);
        assert_eq!(info.retry_after, Some(Duration::from_millis(1500)));
        assert!(info.throttled);
    }

    #[test]
    fn bad_body_hints_are_warnings_and_non_json_is_ignored() {
        let info = parse_with_body(429, &[], r#"{"retry_after": -1}"#);
        assert_eq!(info.retry_after, None);
        assert_eq!(info.warnings, [r#"body retry_after: "-1" is negative"#]);

        let info = parse_with_body(
            429,
            &[],
            r#"{"error": {"details": [{"@type": "google.rpc.RetryInfo", "retryDelay": "soon"}]}}"#,
        );
        assert_eq!(
            info.warnings,
            [r#"body error.details[RetryInfo].retryDelay: "soon" is not a duration like "1.5s""#]
        );

        let info = parse_with_body(429, &[], "<html>Too Many Requests</html>");
        assert_eq!((info.retry_after, info.warnings.len()), (None, 0));
    }
}
