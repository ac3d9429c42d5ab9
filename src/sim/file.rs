//! The burst-spec file of `ratescope sim --burst FILE`: a [`BurstSpec`] written as TOML.
//!
//! Every field is optional except the endpoint; `assets/sim-burst.toml` is a commented example.
//!
//! ```toml
//! base_url = "http://127.0.0.1:8787"  # endpoints given as paths are joined to it (the default)
//! path = "/items"                     # one endpoint: a path, or `url = "http://..."`;
//!                                     # several: endpoints = [{ path = "/items", weight = 3 }, ...]
//! requests = 120                      # how many [200]
//! method = "GET"
//! headers = { "x-api-key" = "alice" }
//! arrival_rate = "10/1s"              # arrivals at a fixed rate (absent: all at once) ...
//! duration = "30s"                    # ... for this long (the count follows)
//! ramp = "1:50:30s"                   # or a linear ramp FROM:TO:OVER, requests per second
//! high = 0.2                          # shares of the high and low priority lanes
//! low = 0.1
//! adaptive = false                    # follow the limits the server publishes
//! raw_concurrency = 10                # without [limits]: most requests in flight
//!
//! [limits]                            # absent: raw sending, no limiter
//! concurrency = 4
//! budgets = [{ name = "rate", kind = "token_bucket", capacity = 5, rate = "5/1s" }]
//!
//! [retry]                             # as in a profile; absent fields keep the defaults
//! max_attempts = 5
//! ```
//!
//! `[limits]` and `[retry]` are written exactly like a profile host's budgets and retry table
//! (see [`crate::profile`]), so settings move between the two by copy and paste.

use std::collections::BTreeMap;
use std::path::Path;

use http::{HeaderMap, HeaderName, HeaderValue, Method};
use serde::Deserialize;
use url::Url;

use crate::engine::{Rate, parse_duration};
use crate::http::RetryPolicy;
use crate::profile::{BudgetEntry, FieldPath, RetryEntry};
use crate::run::{ArrivalPattern, BurstSpec, Endpoint, PriorityMix};

/// Where relative endpoints point when the file names no `base_url`: the demo API's address.
pub const DEFAULT_BASE_URL: &str = "http://127.0.0.1:8787";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BurstFile {
    base_url: Option<String>,
    path: Option<String>,
    url: Option<String>,
    #[serde(default)]
    endpoints: Vec<EndpointEntry>,
    requests: Option<usize>,
    method: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    arrival_rate: Option<String>,
    duration: Option<String>,
    ramp: Option<String>,
    #[serde(default)]
    high: f64,
    #[serde(default)]
    low: f64,
    #[serde(default)]
    adaptive: bool,
    raw_concurrency: Option<usize>,
    limits: Option<LimitsEntry>,
    retry: Option<RetryEntry>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct EndpointEntry {
    path: Option<String>,
    url: Option<String>,
    #[serde(default = "one")]
    weight: u32,
}

fn one() -> u32 {
    1
}

/// The limits, written like a profile host's: budgets and a concurrency cap.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsEntry {
    /// Most requests in flight (absent: no cap).
    pub concurrency: Option<usize>,
    /// The budgets.
    #[serde(default)]
    pub budgets: Vec<BudgetEntry>,
}

/// Reads a burst-spec file; errors name the file and what is wrong.
pub fn burst_from_file(path: &Path) -> Result<BurstSpec, String> {
    let bytes = crate::files::read_capped(path, crate::files::MAX_CONFIG_BYTES).map_err(|err| err.to_string())?;
    let text = String::from_utf8(bytes).map_err(|_| format!("{}: the file is not UTF-8 text", path.display()))?;
    burst_from_toml(&text).map_err(|err| format!("{}: {err}", path.display()))
}

/// A burst spec from TOML text (the format in this module's documentation), validated.
pub fn burst_from_toml(text: &str) -> Result<BurstSpec, String> {
    let file: BurstFile = toml::from_str(text).map_err(|err| err.to_string().trim_end().to_owned())?;
    let spec = file.into_spec()?;
    spec.validate().map_err(|err| err.to_string())?;
    Ok(spec)
}

impl BurstFile {
    fn into_spec(self) -> Result<BurstSpec, String> {
        let base_text = self.base_url.as_deref().unwrap_or(DEFAULT_BASE_URL);
        let base: Url = base_text.parse().map_err(|err| format!("base_url '{base_text}': {err}"))?;
        let single = (self.path.is_some() || self.url.is_some()).then(|| EndpointEntry {
            path: self.path.clone(),
            url: self.url.clone(),
            weight: 1,
        });
        if single.is_some() && !self.endpoints.is_empty() {
            return Err("give either path/url or endpoints, not both".into());
        }
        let entries: Vec<EndpointEntry> = single.into_iter().chain(self.endpoints).collect();
        if entries.is_empty() {
            return Err("no endpoint: set path = \"/items\" (or url, or endpoints)".into());
        }
        let endpoints = entries.iter().map(|entry| entry.resolve(&base)).collect::<Result<Vec<_>, _>>()?;
        let method = match &self.method {
            Some(text) => text.trim().to_ascii_uppercase().parse::<Method>().map_err(|_| format!("method '{text}'"))?,
            None => Method::GET,
        };
        let mut headers = HeaderMap::new();
        for (name, value) in &self.headers {
            let header: HeaderName = name.trim().parse().map_err(|_| format!("headers: '{name}' is not a name"))?;
            let value: HeaderValue =
                value.parse().map_err(|_| format!("headers: the value of '{name}' is not valid"))?;
            headers.insert(header, value);
        }
        let rate = |text: &str| text.parse::<Rate>().map_err(|err| format!("arrival_rate '{text}': {err}"));
        let arrival = match (&self.arrival_rate, &self.duration, &self.ramp) {
            (Some(_), _, Some(_)) => return Err("arrival_rate and ramp exclude each other".into()),
            (None, Some(_), _) => return Err("duration needs arrival_rate".into()),
            (Some(text), Some(duration), None) => ArrivalPattern::ForDuration {
                rate: rate(text)?,
                duration: parse_duration(duration).map_err(|err| format!("duration: {err}"))?,
            },
            (Some(text), None, None) => ArrivalPattern::FixedRate(rate(text)?),
            (None, None, Some(ramp)) => ArrivalPattern::parse_ramp(ramp)?,
            (None, None, None) => ArrivalPattern::AllAtOnce,
        };
        for (name, share) in [("high", self.high), ("low", self.low)] {
            if !(0.0..=1.0).contains(&share) {
                return Err(format!("{name} must be between 0 and 1, got {}", crate::engine::format_amount(share)));
            }
        }
        if self.high + self.low > 1.0 {
            return Err("high and low add up to more than 1".into());
        }
        let limits = match &self.limits {
            Some(entry) => Some(
                crate::profile::limits(&entry.budgets, entry.concurrency, &FieldPath::root().key("limits"))
                    .map_err(|err| format!("limits: {err}"))?,
            ),
            None => None,
        };
        if limits.is_some() && self.raw_concurrency.is_some() {
            return Err("raw_concurrency is for raw sending; with [limits], set limits.concurrency".into());
        }
        let retry = match &self.retry {
            Some(entry) => entry.to_policy(&FieldPath::root().key("retry")).map_err(|err| err.to_string())?,
            None => RetryPolicy::default(),
        };
        Ok(BurstSpec {
            endpoints,
            method,
            headers,
            requests: self.requests.unwrap_or(200),
            arrival,
            priorities: PriorityMix { high: self.high, normal: 1.0 - self.high - self.low, low: self.low },
            limits,
            raw_concurrency: self.raw_concurrency,
            retry,
            adaptive: self.adaptive,
            // A simulation's budgets are its own: virtual time cannot share Redis's clock.
            shared: None,
            timeout: None,
            cache: false,
            coalesce: false,
        })
    }
}

impl EndpointEntry {
    fn resolve(&self, base: &Url) -> Result<Endpoint, String> {
        let url = match (&self.path, &self.url) {
            (Some(path), None) => base.join(path).map_err(|err| format!("path '{path}': {err}"))?,
            (None, Some(url)) => url.parse().map_err(|err| format!("url '{url}': {err}"))?,
            _ => return Err("an endpoint has either a path or a url".into()),
        };
        Ok(Endpoint::new(url, self.weight))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_example_file_reads() {
        let spec = burst_from_toml(include_str!("../../assets/sim-burst.toml")).unwrap();
        assert_eq!(spec.endpoints[0].url.as_str(), "http://127.0.0.1:8787/items");
        assert!(spec.limits.is_some());
    }

    #[test]
    fn mistakes_are_named() {
        let cases = [
            ("requests = 3", "no endpoint"),
            ("path = \"/a\"\nspeed = 3", "unknown field `speed`"),
            ("path = \"/a\"\nduration = \"3s\"", "duration needs arrival_rate"),
            ("path = \"/a\"\nramp = \"1:2\"", "not FROM:TO:OVER"),
            ("path = \"/a\"\nhigh = 2.0", "high must be between 0 and 1"),
            (
                "path = \"/a\"\n[limits]\nbudgets = [{ name = \"r\", kind = \"token_bucket\", capacity = 0, rate = \"1/1s\" }]",
                "capacity 0",
            ),
            ("path = \"/a\"\n[retry]\nmax_attempts = 0", "max_attempts"),
            ("path = \"/a\"\nrequests = 0", "0 requests"),
        ];
        for (text, expected) in cases {
            let err = burst_from_toml(text).unwrap_err();
            assert!(err.contains(expected), "{text}: {err}");
        }
    }

    #[test]
    fn weighted_endpoints_and_arrivals() {
        let spec = burst_from_toml(
            "base_url = \"http://h:1\"\nendpoints = [{ path = \"/a\", weight = 3 }, { url = \"http://x:2/b\" }]\narrival_rate = \"10/1s\"\nduration = \"3s\"",
        )
        .unwrap();
        assert_eq!(spec.endpoints.len(), 2);
        assert_eq!((spec.endpoints[0].weight, spec.endpoints[1].weight), (3, 1));
        assert_eq!(spec.planned_requests(), 30);
        assert!(spec.limits.is_none());
    }
}
