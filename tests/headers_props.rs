//! Property tests for the rate-limit header parser: whatever the bytes, it never
//! panics, and every budget it returns holds finite, non-negative numbers.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::{HeaderMap, HeaderName, HeaderValue};
use proptest::prelude::*;
use ratescope::http::headers::{RateLimitInfo, explain_json, explain_table, parse_response_head};

/// Every header name some dialect reads.
const KNOWN: &[&str] = &[
    "date",
    "retry-after",
    "ratelimit",
    "ratelimit-policy",
    "ratelimit-limit",
    "ratelimit-remaining",
    "ratelimit-reset",
    "ratelimit-observed",
    "ratelimit-resettime",
    "ratelimit-name",
    "x-ratelimit-limit",
    "x-ratelimit-remaining",
    "x-ratelimit-reset",
    "x-ratelimit-used",
    "x-ratelimit-resource",
    "x-ratelimit-reset-after",
    "x-ratelimit-bucket",
    "x-ratelimit-global",
    "x-ratelimit-scope",
    "x-rate-limit-limit",
    "x-rate-limit-remaining",
    "x-rate-limit-reset",
    "x-app-limit-24hour-limit",
    "x-app-limit-24hour-remaining",
    "x-app-limit-24hour-reset",
    "x-user-limit-24hour-limit",
    "x-user-limit-24hour-remaining",
    "x-user-limit-24hour-reset",
    "x-ratelimit-limit-requests",
    "x-ratelimit-remaining-requests",
    "x-ratelimit-reset-requests",
    "x-ratelimit-limit-tokens",
    "x-ratelimit-remaining-tokens",
    "x-ratelimit-reset-tokens",
    "anthropic-ratelimit-requests-limit",
    "anthropic-ratelimit-requests-remaining",
    "anthropic-ratelimit-requests-reset",
    "anthropic-ratelimit-input-tokens-limit",
    "anthropic-ratelimit-input-tokens-remaining",
    "anthropic-ratelimit-input-tokens-reset",
    "x-shopify-shop-api-call-limit",
    "sforce-limit-info",
    "x-hubspot-ratelimit-daily",
    "x-hubspot-ratelimit-daily-remaining",
    "x-hubspot-ratelimit-max",
    "x-hubspot-ratelimit-remaining",
    "x-hubspot-ratelimit-interval-milliseconds",
    "x-hubspot-ratelimit-secondly",
    "x-hubspot-ratelimit-secondly-remaining",
];

/// Values shaped like the ones the dialects expect, and near misses.
fn plausible_value() -> impl Strategy<Value = String> {
    prop_oneof![
        "[-+]?[0-9]{0,20}(\\.[0-9]{0,12})?([eE][-+]?[0-9]{1,3})?",
        "(NaN|nan|inf|-inf|infinity|1e309|-0|0x10| 7 |)",
        "([0-9]{1,8}(\\.[0-9]{1,4})?(ns|us|µs|ms|s|m|h|x)){1,4}",
        "[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:[0-9]{2}(\\.[0-9]{1,12})?(Z|[+-][0-9]{2}:?[0-9]{2})?",
        "(Mon|Sun), [0-9]{2} (Nov|Feb) [0-9]{4} [0-9]{2}:[0-9]{2}:[0-9]{2} GMT",
        "\"[a-z]{1,6}\";(q|r|t|w|qu)=[-0-9a-z\"]{1,8}(;(q|r|t|w|pk)=[-:0-9a-zA-Z=]{1,8}){0,3}(, \"[a-z]{1,6}\";r=[0-9]{1,4})?",
        "(limit|remaining|reset)=[-0-9a-z]{1,6}(, (limit|remaining|reset)=[-0-9]{1,6}){0,2}",
        "[0-9]{1,6}(, [0-9]{1,6};(w|window)=[-0-9]{1,6}){0,3}",
        "[-0-9.]{0,8}/[-0-9.]{0,8}",
        "(api-usage|api-bursts|per-app-api-usage)=[0-9]{1,6}/[0-9]{0,6}(\\(appName=[a-z]{0,5}\\)?)?(; [a-z-]{1,9}=[0-9/]{1,9}){0,2}",
        "[ -~]{0,40}",
    ]
}

fn header_value() -> impl Strategy<Value = Option<HeaderValue>> {
    prop_oneof![
        3 => plausible_value().prop_map(|v| HeaderValue::from_str(&v).ok()),
        1 => proptest::collection::vec(any::<u8>(), 0..48).prop_map(|b| HeaderValue::from_bytes(&b).ok()),
    ]
}

fn header_name() -> impl Strategy<Value = Option<HeaderName>> {
    prop_oneof![
        4 => proptest::sample::select(KNOWN).prop_map(|n| HeaderName::from_bytes(n.as_bytes()).ok()),
        1 => "[a-zA-Z0-9!#$%&'*+.^_`|~-]{1,30}".prop_map(|n| HeaderName::from_bytes(n.as_bytes()).ok()),
        1 => proptest::collection::vec(any::<u8>(), 1..30).prop_map(|b| HeaderName::from_bytes(&b).ok()),
    ]
}

fn header_map() -> impl Strategy<Value = HeaderMap> {
    proptest::collection::vec((header_name(), header_value()), 0..24).prop_map(|pairs| {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            if let (Some(name), Some(value)) = (name, value) {
                map.append(name, value);
            }
        }
        map
    })
}

fn body() -> impl Strategy<Value = Option<Vec<u8>>> {
    let json = prop_oneof![
        plausible_value().prop_map(|v| format!(r#"{{"retry_after": {v}}}"#)),
        plausible_value().prop_map(|v| format!(r#"{{"error": {{"retry_after_ms": "{v}"}}}}"#)),
        plausible_value().prop_map(|v| format!(
            r#"{{"error": {{"details": [{{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "{v}s"}}]}}}}"#
        )),
        (plausible_value(), plausible_value(), plausible_value()).prop_map(|(m, c, r)| format!(
            r#"{{"extensions": {{"cost": {{"throttleStatus": {{"maximumAvailable": {m}, "currentlyAvailable": {c}, "restoreRate": {r}}}}}}}}}"#
        )),
        "[\\[\\]{}\":, 0-9a-z_-]{0,60}",
    ];
    prop_oneof![
        1 => Just(None),
        3 => json.prop_map(|s| Some(s.into_bytes())),
        1 => proptest::collection::vec(any::<u8>(), 0..64).prop_map(Some),
    ]
}

fn clock() -> impl Strategy<Value = SystemTime> {
    (0u64..4_000_000_000, 0u32..1_000_000_000).prop_map(|(s, n)| UNIX_EPOCH + Duration::new(s, n))
}

fn check(info: &RateLimitInfo) {
    for b in &info.budgets {
        for (what, n) in [("limit", b.limit), ("remaining", b.remaining)] {
            if let Some(n) = n {
                assert!(n.is_finite() && n >= 0.0, "{what} {n} in {b:?}");
            }
        }
        for d in [b.reset_after, b.window].into_iter().flatten() {
            assert!(d.as_secs_f64().is_finite(), "{b:?}");
        }
        assert!(!b.name.is_empty() && !b.unit.is_empty() && !b.source.is_empty(), "{b:?}");
    }
    if let Some(most) = info.most_restrictive() {
        assert!(info.budgets.iter().any(|b| std::ptr::eq(b, most)));
    }
    assert!(info.warnings.iter().all(|w| !w.is_empty()));
    // The explanations must not panic either, and the JSON must carry every budget.
    let json = explain_json(info);
    assert_eq!(json["budgets"].as_array().map(Vec::len), Some(info.budgets.len()));
    assert!(explain_table(info).contains("throttled: "));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_headers_never_panic(
        status in proptest::option::of(any::<u16>()),
        headers in header_map(),
        body in body(),
        now in clock(),
    ) {
        let info = RateLimitInfo::parse(status, &headers, body.as_deref(), now);
        check(&info);
        prop_assert_eq!(info.status, status);
        prop_assert!(info.throttled || status != Some(429));
    }

    #[test]
    fn arbitrary_text_never_panics(text in "\\PC{0,400}", now in clock()) {
        if let Ok(head) = parse_response_head(&text) {
            let info = RateLimitInfo::parse(head.status, &head.headers, head.body.as_deref(), now);
            check(&info);
        }
    }

    #[test]
    fn response_shaped_text_never_panics(
        status in "(HTTP/1\\.1 [0-9]{3}( Too Many Requests)?|HTTP/2 [0-9]{1,4}|:status: [0-9]{3}|)",
        lines in proptest::collection::vec(
            (proptest::sample::select(KNOWN), plausible_value(), "(\r\n|\n|\n \t|\n\n)"),
            0..16,
        ),
        body in "[ -~\n]{0,80}",
        now in clock(),
    ) {
        let mut text = format!("{status}\r\n");
        for (name, value, end) in &lines {
            text.push_str(&format!("{name}: {value}{end}"));
        }
        text.push_str("\r\n");
        text.push_str(&body);
        if let Ok(head) = parse_response_head(&text) {
            let info = RateLimitInfo::parse(head.status, &head.headers, head.body.as_deref(), now);
            check(&info);
        }
    }
}
