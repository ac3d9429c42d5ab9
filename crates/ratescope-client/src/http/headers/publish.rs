//! Writing the IETF draft `RateLimit-Policy` and `RateLimit` fields with sfv's serializer:
//! what the demo API publishes and what the proxy's own 429s carry.

use std::time::Duration;

use http::{HeaderMap, HeaderName, HeaderValue};
use sfv::{Integer, KeyRef, ListSerializer, StringRef};

/// One budget as the draft fields publish it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishedPolicy {
    /// The policy's name: the item that names it in both fields.
    pub name: String,
    /// The quota (bucket capacity, window limit, concurrency limit).
    pub limit: u64,
    /// What is left, in whole units.
    pub remaining: u64,
    /// Time until the quota is fully restored (zero when full or for concurrency).
    pub reset: Duration,
    /// The policy's period; `None` for concurrency.
    pub window: Option<Duration>,
    /// A concurrency limit rather than a quota over time (it has no reset).
    pub concurrency: bool,
}

/// Writes `RateLimit-Policy` (`"name";q=LIMIT;w=SECONDS`) and `RateLimit`
/// (`"name";r=REMAINING;t=SECONDS`), one list item per policy; nothing when `policies` is
/// empty. Names are sf-strings, escaped by the serializer; characters an sf-string cannot
/// carry (controls, non-ASCII) become `?`.
pub fn write_ietf(headers: &mut HeaderMap, policies: &[PublishedPolicy]) {
    let mut policy_list = ListSerializer::new();
    let mut limit_list = ListSerializer::new();
    for policy in policies {
        let name = sf_string(&policy.name);
        let name = StringRef::from_str(&name).unwrap_or(StringRef::constant("?"));
        let item = policy_list.bare_item(name).parameter(KeyRef::constant("q"), integer(policy.limit));
        if let Some(window) = policy.window {
            item.parameter(KeyRef::constant("w"), integer(ceil_secs(window).max(1)));
        }
        let item = limit_list.bare_item(name).parameter(KeyRef::constant("r"), integer(policy.remaining));
        if !policy.concurrency {
            item.parameter(KeyRef::constant("t"), integer(ceil_secs(policy.reset)));
        }
    }
    for (field, list) in [("ratelimit-policy", policy_list), ("ratelimit", limit_list)] {
        if let Some(value) = list.finish().and_then(|text| HeaderValue::from_str(&text).ok()) {
            headers.insert(HeaderName::from_static(field), value);
        }
    }
}

/// `text` with what an sf-string cannot hold (anything but printable ASCII) as `?`.
fn sf_string(text: &str) -> String {
    text.chars().map(|c| if (' '..='~').contains(&c) { c } else { '?' }).collect()
}

/// An sf-integer, saturating at the format's 15 digits.
fn integer(value: u64) -> Integer {
    Integer::try_from(value).unwrap_or(Integer::MAX)
}

fn ceil_secs(duration: Duration) -> u64 {
    duration.as_secs() + u64::from(duration.subsec_nanos() > 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::headers::RateLimitInfo;

    fn policy(name: &str, window: Option<u64>) -> PublishedPolicy {
        PublishedPolicy {
            name: name.to_owned(),
            limit: 10,
            remaining: 3,
            reset: Duration::from_millis(1500),
            window: window.map(Duration::from_secs),
            concurrency: window.is_none(),
        }
    }

    #[test]
    fn fields_are_well_formed_and_read_back_by_our_own_parser() {
        let mut headers = HeaderMap::new();
        write_ietf(&mut headers, &[policy("rate", Some(1)), policy("slots", None)]);
        assert_eq!(headers["ratelimit-policy"], r#""rate";q=10;w=1, "slots";q=10"#);
        assert_eq!(headers["ratelimit"], r#""rate";r=3;t=2, "slots";r=3"#);
        let info = RateLimitInfo::parse(Some(200), &headers, None, std::time::SystemTime::UNIX_EPOCH);
        assert!(info.budgets.iter().any(|budget| budget.limit == Some(10.0)), "{info:?}");
    }

    #[test]
    fn names_with_quotes_and_controls_stay_one_well_formed_item() {
        let mut headers = HeaderMap::new();
        write_ietf(&mut headers, &[policy("a \"quoted\" \\ name\n", Some(60)), policy("ünï", Some(60))]);
        let written = headers["ratelimit-policy"].to_str().unwrap();
        assert_eq!(written, r#""a \"quoted\" \\ name?";q=10;w=60, "?n?";q=10;w=60"#);
        let parsed: sfv::List = sfv::Parser::new(written).parse().unwrap();
        assert_eq!(parsed.len(), 2);
    }

    #[test]
    fn nothing_is_written_without_policies_and_huge_numbers_saturate() {
        let mut headers = HeaderMap::new();
        write_ietf(&mut headers, &[]);
        assert!(headers.is_empty());
        let huge = PublishedPolicy { limit: u64::MAX, ..policy("big", Some(1)) };
        write_ietf(&mut headers, &[huge]);
        assert_eq!(headers["ratelimit-policy"], r#""big";q=999999999999999;w=1"#);
    }
}
