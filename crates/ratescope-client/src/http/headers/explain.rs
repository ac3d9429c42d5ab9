//! The CLI's entry points: a raw response head as text in, an explanation out.
//!
//! [`parse_response_head`] reads what people paste: an optional status line
//! (`HTTP/1.1 429 Too Many Requests`, `HTTP/2 200`, or an HTTP/2 `:status`
//! pseudo-header), `Name: value` lines, a blank line and an optional body. It
//! tolerates CRLF, leading blank lines, `curl -v`'s `< ` prefixes and obsolete
//! folded continuation lines; lines it cannot use become warnings, not errors.

use std::fmt::Write as _;
use std::time::Duration;

use http::{HeaderMap, HeaderName, HeaderValue};
use serde_json::{Value, json};
use thiserror::Error;

use super::{RateLimitInfo, quoted};

/// A response head read from text.
#[derive(Debug, Clone, Default)]
pub struct ParsedHead {
    /// The status line's code; `None` when the text starts with headers.
    pub status: Option<u16>,
    /// The header lines that parsed.
    pub headers: HeaderMap,
    /// Everything after the blank line, if anything.
    pub body: Option<Vec<u8>>,
    /// Lines or values that were skipped; merge them into the info's warnings.
    pub warnings: Vec<String>,
}

/// Why a text is not a response head at all.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum HeadError {
    /// The text holds neither a status line nor a header line.
    #[error("no status line and no header lines found")]
    Empty,
    /// The first line looks like neither a status line nor a header.
    #[error("line {line}: {text} is not a status line like \"HTTP/1.1 429 Too Many Requests\"")]
    StatusLine {
        /// Its number, from 1.
        line: usize,
        /// The line, quoted.
        text: String,
    },
    /// More header lines than any response carries.
    #[error("line {line}: more header lines than a response can carry (at most {most})")]
    TooManyHeaders {
        /// The line where the cap was passed.
        line: usize,
        /// The most header lines accepted.
        most: usize,
    },
}

/// Reads a status line, header lines and an optional body.
pub fn parse_response_head(text: &str) -> Result<ParsedHead, HeadError> {
    let mut head = ParsedHead::default();
    // (line number, name, value) before validation, so folded lines can extend values.
    let mut fields: Vec<(usize, String, String)> = Vec::new();
    let mut offset = 0;
    let mut started = false;
    let mut body_start = None;

    for (index, raw) in text.split_inclusive('\n').enumerate() {
        let number = index + 1;
        offset += raw.len();
        let line = raw.trim_end_matches(['\n', '\r']);
        let line = match line.strip_prefix('<') {
            Some(rest) if rest.is_empty() || rest.starts_with(' ') => rest.strip_prefix(' ').unwrap_or(rest),
            _ => line,
        };
        if line.trim().is_empty() {
            if started {
                body_start = Some(offset);
                break;
            }
            continue;
        }
        let first = !started;
        started = true;

        if first && line.starts_with("HTTP/") {
            head.status =
                Some(status_line(line).ok_or_else(|| HeadError::StatusLine { line: number, text: quoted(line) })?);
            continue;
        }
        if line.starts_with([' ', '\t']) {
            match fields.last_mut() {
                Some((_, _, value)) => {
                    value.push(' ');
                    value.push_str(line.trim());
                }
                None => head
                    .warnings
                    .push(format!("line {number}: continuation {} has no header to continue", quoted(line))),
            }
            continue;
        }
        if let Some(pseudo) = line.strip_prefix(':') {
            pseudo_header(&mut head, number, pseudo);
            continue;
        }
        match line.split_once(':') {
            Some((name, value)) => fields.push((number, name.trim_end().to_owned(), value.trim().to_owned())),
            None => head.warnings.push(format!("line {number}: {} has no colon; ignored", quoted(line))),
        }
    }

    if !started {
        return Err(HeadError::Empty);
    }
    for (number, name, value) in fields {
        let Ok(name_ok) = HeaderName::from_bytes(name.as_bytes()) else {
            head.warnings.push(format!("line {number}: {} is not a valid header name", quoted(&name)));
            continue;
        };
        match HeaderValue::from_bytes(value.as_bytes()) {
            Ok(value) => {
                if head.headers.try_append(name_ok, value).is_err() {
                    return Err(HeadError::TooManyHeaders { line: number, most: head.headers.len() });
                }
            }
            Err(_) => {
                head.warnings.push(format!("line {number}: {name}: {} is not a valid header value", quoted(&value)))
            }
        }
    }
    head.body = body_start
        .and_then(|start| text.get(start..))
        .filter(|body| !body.is_empty())
        .map(|body| body.as_bytes().to_vec());
    Ok(head)
}

/// `HTTP/1.1 429 Too Many Requests` or `HTTP/2 200`: the three-digit code.
fn status_line(line: &str) -> Option<u16> {
    let mut parts = line.split_whitespace();
    parts.next()?; // the version
    let code = parts.next()?;
    if code.len() != 3 || !code.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    code.parse().ok().filter(|c| (100..=999).contains(c))
}

fn pseudo_header(head: &mut ParsedHead, number: usize, pseudo: &str) {
    match pseudo.split_once(':') {
        Some((name, value)) if name.trim() == "status" => {
            let value = value.trim();
            match status_line(&format!("HTTP/2 {value}")) {
                Some(code) => head.status = Some(code),
                None => head.warnings.push(format!("line {number}: :status {} is not a status code", quoted(value))),
            }
        }
        _ => {} // :authority, :path and friends say nothing about limits.
    }
}

/// The CLI's `--json` shape; durations in seconds.
pub fn explain_json(info: &RateLimitInfo) -> Value {
    let secs = |d: Option<Duration>| d.map(|d| d.as_secs_f64());
    let budgets: Vec<Value> = info
        .budgets
        .iter()
        .map(|b| {
            json!({
                "name": b.name,
                "limit": b.limit,
                "remaining": b.remaining,
                "reset_after_s": secs(b.reset_after),
                "window_s": secs(b.window),
                "unit": b.unit,
            })
        })
        .collect();
    json!({
        "status": info.status,
        "budgets": budgets,
        "retry_after_s": secs(info.retry_after),
        "throttled": info.throttled,
        "warnings": info.warnings,
    })
}

/// A short human-readable report with an aligned budget table.
pub fn explain_table(info: &RateLimitInfo) -> String {
    let mut out = String::new();
    let status = info.status.map_or("unknown".to_owned(), |s| s.to_string());
    let _ = writeln!(out, "status: {status}");
    if info.budgets.is_empty() {
        out.push_str("budgets: none advertised\n");
    } else {
        let mut rows = vec![["name", "limit", "remaining", "resets in", "window", "unit", "source"].map(String::from)];
        for b in &info.budgets {
            rows.push([
                b.name.clone(),
                b.limit.map_or("-".into(), human_number),
                b.remaining.map_or("-".into(), human_number),
                b.reset_after.map_or("-".into(), human_duration),
                b.window.map_or("-".into(), human_duration),
                b.unit.clone(),
                b.source.clone(),
            ]);
        }
        let mut widths = [0usize; 7];
        for row in &rows {
            for (width, cell) in widths.iter_mut().zip(row) {
                *width = (*width).max(cell.chars().count());
            }
        }
        for row in &rows {
            let mut line = String::new();
            for (cell, width) in row.iter().zip(widths) {
                let _ = write!(line, "{cell:<width$}  ");
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
    }
    let retry = info.retry_after.map_or("-".into(), human_duration);
    let _ = writeln!(out, "retry-after: {retry}");
    let _ = writeln!(out, "throttled: {}", if info.throttled { "yes" } else { "no" });
    if !info.warnings.is_empty() {
        out.push_str("warnings:\n");
        for warning in &info.warnings {
            let _ = writeln!(out, "  - {warning}");
        }
    }
    out
}

/// `100`, `596.5`, `0.125`, `1e308`: integers without decimals, others to three places, huge
/// ones with an exponent.
fn human_number(n: f64) -> String {
    crate::engine::format_number(n)
}

/// `20ms`, `1.5s`, `12m 3s`, `1h`, `2d 3h`.
fn human_duration(d: Duration) -> String {
    if d.is_zero() {
        return "0s".into();
    }
    if d < Duration::from_secs(1) {
        return format!("{}ms", d.as_millis());
    }
    if d < Duration::from_secs(60) {
        return format!("{}s", human_number((d.as_secs_f64() * 10.0).round() / 10.0));
    }
    let total = d.as_secs();
    let parts = [(total / 86_400, "d"), (total / 3600 % 24, "h"), (total / 60 % 60, "m"), (total % 60, "s")];
    let shown: Vec<String> = parts.iter().filter(|(n, _)| *n > 0).map(|(n, unit)| format!("{n}{unit}")).collect();
    shown.join(" ")
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{NOW, at};
    use super::*;

    const GITHUB_429: &str = "\r\n\r\nHTTP/1.1 429 Too Many Requests\r\n\
        Date: Tue, 14 Nov 2023 22:13:20 GMT\r\n\
        x-ratelimit-limit: 60\r\n\
        x-ratelimit-remaining: 0\r\n\
        x-ratelimit-used: 60\r\n\
        x-ratelimit-reset: 1700000723\r\n\
        x-ratelimit-resource: core\r\n\
        Retry-After: 30\r\n\
        \r\n\
        {\"message\": \"API rate limit exceeded\"}\r\n";

    fn explain(text: &str) -> RateLimitInfo {
        let head = parse_response_head(text).expect("a response head");
        let mut info = RateLimitInfo::parse(head.status, &head.headers, head.body.as_deref(), at(NOW));
        info.warnings.extend(head.warnings);
        info
    }

    #[test]
    fn reads_status_headers_and_body_with_crlf_and_leading_blank_lines() {
        let head = parse_response_head(GITHUB_429).expect("valid");
        assert_eq!(head.status, Some(429));
        assert_eq!(head.headers.get("x-ratelimit-remaining").map(|v| v.as_bytes()), Some(&b"0"[..]));
        assert_eq!(head.headers.len(), 7);
        assert_eq!(head.body.as_deref(), Some(&b"{\"message\": \"API rate limit exceeded\"}\r\n"[..]));
        assert!(head.warnings.is_empty(), "{:?}", head.warnings);
    }

    #[test]
    fn http2_status_lines_and_pseudo_headers() {
        assert_eq!(parse_response_head("HTTP/2 200\nx: 1\n").map(|h| h.status), Ok(Some(200)));
        assert_eq!(parse_response_head(":status: 429\nx: 1\n").map(|h| h.status), Ok(Some(429)));
        assert_eq!(parse_response_head("x-ratelimit-limit: 5\n").map(|h| h.status), Ok(None));
    }

    #[test]
    fn folded_lines_colonless_lines_and_bad_names_are_handled() {
        let text = "HTTP/1.1 200 OK\n\
            RateLimit-Policy: \"burst\";q=100;w=60,\n \"daily\";q=1000;w=86400\n\
            this line has no colon\n\
            bad name: 1\n\
            x-good: 2\n";
        let head = parse_response_head(text).expect("valid");
        assert_eq!(
            head.headers.get("ratelimit-policy").and_then(|v| v.to_str().ok()),
            Some("\"burst\";q=100;w=60, \"daily\";q=1000;w=86400")
        );
        assert_eq!(
            head.warnings,
            [
                r#"line 4: "this line has no colon" has no colon; ignored"#,
                r#"line 5: "bad name" is not a valid header name"#,
            ]
        );
        assert!(head.headers.contains_key("x-good"));
        assert_eq!(head.body, None);
    }

    #[test]
    fn curl_verbose_prefixes_are_stripped() {
        let text = "< HTTP/1.1 429 TOO MANY REQUESTS\n< Retry-After: 65\n<\n{\"retry_after\": 64.57}";
        let head = parse_response_head(text).expect("valid");
        assert_eq!(head.status, Some(429));
        assert!(head.headers.contains_key("retry-after"));
        assert_eq!(head.body.as_deref(), Some(&b"{\"retry_after\": 64.57}"[..]));
    }

    #[test]
    fn errors_for_empty_input_and_broken_status_line() {
        assert_eq!(parse_response_head("").map(|h| h.status), Err(HeadError::Empty));
        assert_eq!(parse_response_head("\r\n\n  \n").map(|h| h.status), Err(HeadError::Empty));
        assert!(matches!(parse_response_head("HTTP/1.1 four-two-nine\n"), Err(HeadError::StatusLine { line: 1, .. })));
    }

    #[test]
    fn json_has_exactly_the_documented_shape() {
        let text = "HTTP/1.1 200 OK\n\
            x-ratelimit-limit-requests: 60\n\
            x-ratelimit-remaining-requests: 59\n\
            x-ratelimit-reset-requests: 20ms\n\
            x-ratelimit-remaining-tokens: abc\n";
        let value = explain_json(&explain(text));
        assert_eq!(
            value,
            json!({
                "status": 200,
                "budgets": [{
                    "name": "requests",
                    "limit": 60.0,
                    "remaining": 59.0,
                    "reset_after_s": 0.02,
                    "window_s": null,
                    "unit": "requests",
                }],
                "retry_after_s": null,
                "throttled": false,
                "warnings": [r#"x-ratelimit-remaining-tokens: "abc" is not a number"#],
            })
        );
    }

    #[test]
    fn table_is_aligned_and_human() {
        let table = explain_table(&explain(GITHUB_429));
        let expected = "\
status: 429
name  limit  remaining  resets in  window  unit      source
core  60     0          12m 3s     -       requests  github
retry-after: 30s
throttled: yes
";
        assert_eq!(table, expected);

        let info = explain("x-ratelimit-remaining: nope\n");
        let table = explain_table(&info);
        assert!(table.starts_with("status: unknown\nbudgets: none advertised\n"), "{table}");
        assert!(table.ends_with("warnings:\n  - x-ratelimit-remaining: \"nope\" is not a number\n"), "{table}");
    }

    #[test]
    fn human_formats() {
        assert_eq!(human_duration(Duration::from_millis(20)), "20ms");
        assert_eq!(human_duration(Duration::from_millis(1500)), "1.5s");
        assert_eq!(human_duration(Duration::from_secs(723)), "12m 3s");
        assert_eq!(human_duration(Duration::from_secs(3600)), "1h");
        assert_eq!(human_duration(Duration::from_secs(86_400 + 3 * 3600)), "1d 3h");
        assert_eq!(human_duration(Duration::ZERO), "0s");
        assert_eq!(human_number(596.5), "596.5");
        assert_eq!(human_number(100.0), "100");
        assert_eq!(human_number(0.125), "0.125");
    }
}
