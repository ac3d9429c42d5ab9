//! Fuzzes the CLI path: raw text to `parse_response_head`, then `RateLimitInfo::parse`.
#![no_main]

use std::time::{Duration, UNIX_EPOCH};

use libfuzzer_sys::fuzz_target;
use ratescope::http::headers::{RateLimitInfo, explain_json, explain_table, parse_response_head};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let Ok(head) = parse_response_head(&text) else { return };
    let now = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    let info = RateLimitInfo::parse(head.status, &head.headers, head.body.as_deref(), now);
    for budget in &info.budgets {
        for n in [budget.limit, budget.remaining].into_iter().flatten() {
            assert!(n.is_finite() && n >= 0.0, "{budget:?}");
        }
    }
    let _ = info.most_restrictive();
    let _ = explain_json(&info);
    let _ = explain_table(&info);
});
