//! Fuzzes the demo API's config: text to `MockConfig::from_toml`. A config that parses must
//! pass `validate`, send each route prefix to its own route, admit exactly as many requests
//! at one instant as its tightest policy counting requests allows, and write rate-limit
//! headers that the client's header parser reads back as the same quotas.
#![no_main]

use std::time::{Duration, UNIX_EPOCH};

use http::HeaderMap;
use libfuzzer_sys::fuzz_target;
use ratescope::engine::Unit;
use ratescope::http::headers::RateLimitInfo;
use ratescope::mock::{Dialect, MockConfig, RoutePolicies, write_headers};

/// Admission at one instant is checked request by request only for limits up to this.
const MAX_COUNTED: u64 = 64;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let config = match MockConfig::from_toml(text) {
        Ok(config) => config,
        Err(err) => {
            let _ = err.to_string();
            return;
        }
    };
    config.validate().unwrap_or_else(|err| panic!("parsed but does not validate: {err}"));
    assert!(!config.routes.is_empty());
    for (index, route) in config.routes.iter().enumerate() {
        assert_eq!(config.route_for(&route.prefix), Some(index), "{:?}", route.prefix);
        assert!(!route.describe().is_empty());
        for policy in &route.policies {
            assert!(policy.limit() >= 1, "{policy:?}");
            let _ = (policy.describe(), policy.period());
        }
        if route.policies.is_empty() {
            continue;
        }

        // A fresh route at t = 0: exactly the tightest limit passes, then a refusal with a wait.
        // Requests that bring no tokens or points spend nothing of a policy counting those.
        let counting_requests = route.policies.iter().filter(|policy| policy.unit == Unit::Requests);
        let tightest = counting_requests.map(|policy| policy.limit()).min().unwrap_or(u64::MAX);
        let mut policies = RoutePolicies::new(route.policies.clone());
        let mut held = Vec::new();
        let first = policies.check(None, 0);
        assert!(first.admitted, "the first request is refused: {route:?}");
        check_headers(route.dialect, &first, &route.policies.iter().map(|p| p.limit()).collect::<Vec<_>>());
        held.push(first);
        if tightest <= MAX_COUNTED {
            for n in 1..tightest {
                let decision = policies.check(None, 0);
                assert!(decision.admitted, "request {} of {tightest} refused: {route:?}", n + 1);
                held.push(decision);
            }
            let refused = policies.check(None, 0);
            assert!(!refused.admitted, "request {} of {tightest} admitted: {route:?}", tightest + 1);
            assert!(refused.retry_after.is_some_and(|secs| secs >= 1), "{refused:?}");
            assert!(refused.denied_by().is_some(), "{refused:?}");
        }
    }
});

/// The headers written for an admitted decision read back: every quota the client finds is
/// one the route enforces, with no more remaining than its limit.
fn check_headers(dialect: Dialect, decision: &ratescope::mock::Decision, limits: &[u64]) {
    let now = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    let mut headers = HeaderMap::new();
    write_headers(&mut headers, dialect, decision, true, now);
    let info = RateLimitInfo::parse(Some(200), &headers, None, now);
    if dialect != Dialect::None {
        assert!(!info.budgets.is_empty(), "{dialect}: no quota read back from {headers:?}");
    }
    for budget in &info.budgets {
        if let Some(limit) = budget.limit {
            assert!(limits.iter().any(|l| *l as f64 == limit), "{dialect}: limit {limit} not in {limits:?}");
            if let Some(remaining) = budget.remaining {
                assert!(remaining <= limit, "{dialect}: {budget:?}");
            }
        }
    }
}
