//! `MockConfig`: the routes of the demo API, read from TOML and validated into plain values.
//!
//! The TOML is first read into loose `Raw*` shapes (so every value can be judged
//! with a sentence that names its route) and then converted; see
//! `assets/demo.toml` for a commented example of every setting.

use std::path::Path;
use std::time::Duration;

use http::HeaderName;
use serde::Deserialize;
use toml::Spanned;

use super::api::Api;
use super::error::{Location, MockError};
use super::headers::Dialect;
use super::policy::{PolicyKind, PolicySpec};
use crate::engine::{Rate, Unit, format_period, parse_duration};

/// The built-in demo config, used when no file is given.
pub const DEMO_TOML: &str = include_str!("../../assets/demo.toml");

/// The longest latency or slow-body delay accepted.
const MAX_DELAY: Duration = Duration::from_secs(60);
/// The longest `max_age` accepted for a cacheable route.
const MAX_AGE_LIMIT: Duration = Duration::from_secs(365 * 86_400);
/// The longest route prefix accepted.
const MAX_PREFIX_LEN: usize = 200;

/// Everything the mock server serves.
#[derive(Debug, Clone, PartialEq)]
pub struct MockConfig {
    /// Server-wide settings: the API key header and the random seed.
    pub server: ServerSettings,
    /// Routes, matched by the longest prefix (on whole path segments).
    pub routes: Vec<RouteConfig>,
}

/// Settings shared by every route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerSettings {
    /// The request header whose value is the counting key of routes that count per key.
    pub api_key_header: HeaderName,
    /// Seeds the random latency jitter and faults, for reproducible runs.
    pub seed: Option<u64>,
}

impl Default for ServerSettings {
    fn default() -> Self {
        Self { api_key_header: HeaderName::from_static("x-api-key"), seed: None }
    }
}

/// Who shares a route's limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CountBy {
    /// Every request counts against one shared set of limits.
    #[default]
    Global,
    /// Each value of the API key header has its own limits (requests without one share a set).
    Key,
}

/// Delay before an admitted request is answered: `fixed` plus a uniform random share of `jitter`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Latency {
    /// Added to every answer.
    pub fixed: Duration,
    /// At most this much more, drawn uniformly per request.
    pub jitter: Duration,
}

/// Injected failures of admitted requests, each a share between 0 and 1.
#[derive(Debug, Clone, PartialEq)]
pub struct Faults {
    /// Share answered with a random status from `error_statuses`.
    pub error_rate: f64,
    /// The statuses of injected errors (default 500 and 502).
    pub error_statuses: Vec<u16>,
    /// Share whose connection is dropped without a response.
    pub reset_rate: f64,
    /// Share whose body trickles out in chunks over `slow_body`.
    pub slow_body_rate: f64,
    /// How long a slow body takes to trickle out.
    pub slow_body: Duration,
}

impl Default for Faults {
    fn default() -> Self {
        Self {
            error_rate: 0.0,
            error_statuses: vec![500, 502],
            reset_rate: 0.0,
            slow_body_rate: 0.0,
            slow_body: Duration::from_millis(500),
        }
    }
}

impl Faults {
    /// No fault is ever injected.
    pub fn is_none(&self) -> bool {
        self.error_rate == 0.0 && self.reset_rate == 0.0 && self.slow_body_rate == 0.0
    }
}

/// One route of the mock API.
#[derive(Debug, Clone, PartialEq)]
pub struct RouteConfig {
    /// `/items` matches `/items` and `/items/3`, not `/itemsx`; `/` matches everything.
    pub prefix: String,
    /// What it answers: plain JSON, chat completions (tokens) or GraphQL queries (points).
    pub api: Api,
    /// The rate-limit header dialect its answers carry.
    pub dialect: Dialect,
    /// The status of a refused request: 429 or 503.
    pub status: u16,
    /// Whether a refused request carries `Retry-After` (and a `retry_after` in its body).
    pub retry_after: bool,
    /// What the limits count per: everyone together or each API key.
    pub count_by: CountBy,
    /// Delay before an admitted request is answered.
    pub latency: Latency,
    /// Failures injected into admitted requests.
    pub faults: Faults,
    /// `Some(max_age)`: deterministic JSON with an `ETag`, `Cache-Control: max-age`, 304 on `If-None-Match`.
    pub cache: Option<Duration>,
    /// All must allow a request; none means no limit.
    pub policies: Vec<PolicySpec>,
}

impl RouteConfig {
    /// A route with no limits, IETF headers, 429 + Retry-After, and no latency, faults or caching.
    pub fn new(prefix: impl Into<String>) -> Self {
        Self {
            prefix: prefix.into(),
            api: Api::Json,
            dialect: Dialect::Ietf,
            status: 429,
            retry_after: true,
            count_by: CountBy::Global,
            latency: Latency::default(),
            faults: Faults::default(),
            cache: None,
            policies: Vec::new(),
        }
    }

    /// Whether this route serves `path` (prefix on whole segments).
    pub fn matches(&self, path: &str) -> bool {
        self.prefix == "/"
            || path.strip_prefix(self.prefix.as_str()).is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    }

    /// E.g. `bucket 5 @ 5/1s + fixed 100/1m  headers: ietf  429 + Retry-After  latency 20ms ± 10ms`.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if self.policies.is_empty() {
            parts.push("no limit".to_owned());
        } else {
            let policies: Vec<String> = self.policies.iter().map(PolicySpec::describe).collect();
            parts.push(policies.join(" + "));
        }
        if self.api != Api::Json {
            parts.push(format!("api: {}", self.api));
        }
        parts.push(format!("headers: {}", self.dialect));
        if !self.policies.is_empty() {
            let retry = if self.retry_after { " + Retry-After" } else { "" };
            parts.push(format!("{}{retry}", self.status));
            if self.count_by == CountBy::Key {
                parts.push("per API key".to_owned());
            }
        }
        let Latency { fixed, jitter } = self.latency;
        match (fixed.is_zero(), jitter.is_zero()) {
            (true, true) => {}
            (false, true) => parts.push(format!("latency {}", format_period(fixed))),
            (true, false) => parts.push(format!("latency 0-{}", format_period(jitter))),
            (false, false) => parts.push(format!("latency {} + 0-{}", format_period(fixed), format_period(jitter))),
        }
        let f = &self.faults;
        let mut faults = Vec::new();
        if f.error_rate > 0.0 {
            let statuses: Vec<String> = f.error_statuses.iter().map(u16::to_string).collect();
            faults.push(format!("{} {}", percent(f.error_rate), statuses.join("/")));
        }
        if f.reset_rate > 0.0 {
            faults.push(format!("{} resets", percent(f.reset_rate)));
        }
        if f.slow_body_rate > 0.0 {
            faults.push(format!("{} slow bodies ({})", percent(f.slow_body_rate), format_period(f.slow_body)));
        }
        if !faults.is_empty() {
            parts.push(format!("faults: {}", faults.join(", ")));
        }
        if let Some(max_age) = self.cache {
            parts.push(format!("cacheable: ETag, max-age={}", max_age.as_secs()));
        }
        parts.join("  ")
    }

    /// Refuses settings that mean nothing or would hang; the message names the setting.
    pub fn validate(&self) -> Result<(), String> {
        let prefix = &self.prefix;
        if !prefix.starts_with('/') {
            return Err("a prefix must start with '/'".into());
        }
        if prefix.len() > MAX_PREFIX_LEN {
            return Err(format!("a prefix longer than {MAX_PREFIX_LEN} bytes is refused"));
        }
        if prefix.chars().any(|c| c.is_whitespace() || c.is_control() || c == '?' || c == '#') {
            return Err("a prefix is a path: no spaces, '?' or '#'".into());
        }
        if prefix.len() > 1 && prefix.ends_with('/') {
            return Err("a prefix must not end with '/' (write /items, which also matches /items/3)".into());
        }
        if !matches!(self.status, 429 | 503) {
            return Err(format!("status {} is not 429 or 503, the statuses that mean \"slow down\"", self.status));
        }
        for (what, delay) in [("latency.fixed", self.latency.fixed), ("latency.jitter", self.latency.jitter)] {
            if delay > MAX_DELAY {
                return Err(format!("{what} {} is longer than {}", format_period(delay), format_period(MAX_DELAY)));
            }
        }
        let f = &self.faults;
        for (what, share) in
            [("error_rate", f.error_rate), ("reset_rate", f.reset_rate), ("slow_body_rate", f.slow_body_rate)]
        {
            if !(0.0..=1.0).contains(&share) {
                return Err(format!("faults.{what} {share} is not a share between 0 and 1 (0.05 means 5%)"));
            }
        }
        if f.error_rate > 0.0 && f.error_statuses.is_empty() {
            return Err("faults.error_statuses is empty but error_rate is not 0".into());
        }
        if let Some(status) = f.error_statuses.iter().find(|s| !(500..=599).contains(*s)) {
            return Err(format!("faults.error_statuses: {status} is not a 5xx status"));
        }
        if f.slow_body > MAX_DELAY {
            return Err(format!("faults.slow_body {} is longer than {}", format_period(f.slow_body), "60s"));
        }
        if f.slow_body_rate > 0.0 && f.slow_body.is_zero() {
            return Err("faults.slow_body must be longer than 0 when slow_body_rate is not 0".into());
        }
        if self.cache.is_some() && self.api != Api::Json {
            return Err(format!("cache = true is for api = \"json\" routes, not {}", self.api));
        }
        if let Some(max_age) = self.cache
            && max_age > MAX_AGE_LIMIT
        {
            return Err(format!("max_age {} is longer than a year", format_period(max_age)));
        }
        for (i, policy) in self.policies.iter().enumerate() {
            policy.validate()?;
            self.api.check_policy(policy)?;
            if self.policies[..i].iter().any(|p| p.name == policy.name) {
                return Err(format!("two policies are named '{}'; give each a distinct name", policy.name));
            }
        }
        Ok(())
    }
}

fn percent(share: f64) -> String {
    format!("{}%", (share * 1000.0).round() / 10.0)
}

impl MockConfig {
    /// The built-in demo API (`assets/demo.toml`).
    pub fn demo() -> Result<Self, MockError> {
        Self::parse(DEMO_TOML, Location::new("the built-in demo config (assets/demo.toml)"))
    }

    /// A config from TOML text.
    pub fn from_toml(text: &str) -> Result<Self, MockError> {
        Self::parse(text, Location::new("mock config"))
    }

    /// A config from a TOML file; errors name the file and, when they can, the line.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, MockError> {
        let path = path.as_ref();
        let bytes = crate::files::read_capped(path, crate::files::MAX_CONFIG_BYTES).map_err(|err| match err {
            crate::files::FileError::Io { source, .. } => MockError::Read { path: path.to_owned(), source },
            too_large => too_large.into(),
        })?;
        let text = String::from_utf8(bytes).map_err(|_| MockError::Read {
            path: path.to_owned(),
            source: std::io::Error::new(std::io::ErrorKind::InvalidData, "the file is not UTF-8 text"),
        })?;
        Self::parse(&text, Location::new(path.display().to_string()))
    }

    /// The route serving `path`: the longest matching prefix.
    pub fn route_for(&self, path: &str) -> Option<usize> {
        (self.routes.iter().enumerate())
            .filter(|(_, route)| route.matches(path))
            .max_by_key(|(_, route)| if route.prefix == "/" { 0 } else { route.prefix.len() })
            .map(|(i, _)| i)
    }

    /// Checks every route and the whole (e.g. after editing fields in code).
    pub fn validate(&self) -> Result<(), MockError> {
        let location = Location::new("mock config");
        if self.routes.is_empty() {
            return Err(MockError::Config { location, message: "no routes: add at least one [[routes]] table".into() });
        }
        for (i, route) in self.routes.iter().enumerate() {
            let error = |message| MockError::Route { location: location.clone(), route: route.prefix.clone(), message };
            route.validate().map_err(error)?;
            if self.routes[..i].iter().any(|r| r.prefix == route.prefix) {
                return Err(error("two routes have this prefix".into()));
            }
        }
        Ok(())
    }

    fn parse(text: &str, location: Location) -> Result<Self, MockError> {
        let raw: RawConfig = toml::from_str(text).map_err(|err| {
            let location = match err.span() {
                Some(span) => location.at(text, span.start),
                None => location.clone(),
            };
            MockError::Toml { location, message: err.message().trim().to_owned() }
        })?;
        let at = |span: std::ops::Range<usize>| location.at(text, span.start);

        let mut server = ServerSettings { seed: raw.server.seed, ..ServerSettings::default() };
        if let Some(header) = raw.server.api_key_header {
            server.api_key_header =
                HeaderName::from_bytes(header.get_ref().trim().as_bytes()).map_err(|_| MockError::Config {
                    location: at(header.span()),
                    message: format!("api_key_header {:?} is not a header name", header.get_ref()),
                })?;
        }

        if raw.routes.is_empty() {
            return Err(MockError::Config {
                location,
                message: "no routes: add at least one [[routes]] table with a prefix".into(),
            });
        }
        let mut routes: Vec<RouteConfig> = Vec::with_capacity(raw.routes.len());
        for raw_route in raw.routes {
            let prefix_span = raw_route.prefix.span();
            let name = raw_route.prefix.get_ref().clone();
            let route = raw_route.convert().map_err(|(span, message)| MockError::Route {
                location: at(span.unwrap_or_else(|| prefix_span.clone())),
                route: name.clone(),
                message,
            })?;
            let error = |message| MockError::Route { location: at(prefix_span.clone()), route: name.clone(), message };
            route.validate().map_err(error)?;
            if routes.iter().any(|r| r.prefix == route.prefix) {
                return Err(error("two routes have this prefix".into()));
            }
            routes.push(route);
        }
        Ok(Self { server, routes })
    }
}

type Span = std::ops::Range<usize>;
/// A conversion failure: where (if more precise than the route) and what.
type RawError = (Option<Span>, String);

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    server: RawServer,
    #[serde(default)]
    routes: Vec<RawRoute>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawServer {
    api_key_header: Option<Spanned<String>>,
    seed: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRoute {
    prefix: Spanned<String>,
    api: Option<Spanned<String>>,
    dialect: Option<Spanned<String>>,
    status: Option<Spanned<i64>>,
    retry_after: Option<bool>,
    count_by: Option<Spanned<String>>,
    latency: Option<RawLatency>,
    faults: Option<RawFaults>,
    cache: Option<bool>,
    max_age: Option<Spanned<String>>,
    #[serde(default)]
    policies: Vec<Spanned<RawPolicy>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLatency {
    fixed: Option<Spanned<String>>,
    jitter: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFaults {
    error_rate: Option<f64>,
    error_statuses: Option<Vec<i64>>,
    reset_rate: Option<f64>,
    slow_body_rate: Option<f64>,
    slow_body: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPolicy {
    kind: String,
    name: Option<String>,
    unit: Option<String>,
    capacity: Option<i64>,
    rate: Option<String>,
    limit: Option<i64>,
    window: Option<String>,
}

fn duration(value: &Spanned<String>, what: &str) -> Result<Duration, RawError> {
    parse_duration(value.get_ref()).map_err(|err| (Some(value.span()), format!("{what}: {err}")))
}

impl RawRoute {
    fn convert(self) -> Result<RouteConfig, RawError> {
        let mut route = RouteConfig::new(self.prefix.get_ref().trim());
        if let Some(api) = &self.api {
            route.api = api.get_ref().parse().map_err(|e| (Some(api.span()), e))?;
        }
        if let Some(dialect) = &self.dialect {
            route.dialect = dialect.get_ref().parse().map_err(|e| (Some(dialect.span()), e))?;
        }
        if let Some(status) = &self.status {
            route.status = u16::try_from(*status.get_ref())
                .ok()
                .filter(|s| matches!(s, 429 | 503))
                .ok_or_else(|| (Some(status.span()), format!("status {} is not 429 or 503", status.get_ref())))?;
        }
        if let Some(retry_after) = self.retry_after {
            route.retry_after = retry_after;
        }
        if let Some(count_by) = &self.count_by {
            route.count_by = match count_by.get_ref().trim() {
                "global" => CountBy::Global,
                "key" => CountBy::Key,
                other => {
                    return Err((Some(count_by.span()), format!("count_by {other:?} is not \"global\" or \"key\"")));
                }
            };
        }
        if let Some(latency) = &self.latency {
            if let Some(fixed) = &latency.fixed {
                route.latency.fixed = duration(fixed, "latency.fixed")?;
            }
            if let Some(jitter) = &latency.jitter {
                route.latency.jitter = duration(jitter, "latency.jitter")?;
            }
        }
        if let Some(faults) = self.faults {
            let f = &mut route.faults;
            f.error_rate = faults.error_rate.unwrap_or(0.0);
            f.reset_rate = faults.reset_rate.unwrap_or(0.0);
            f.slow_body_rate = faults.slow_body_rate.unwrap_or(0.0);
            if let Some(statuses) = faults.error_statuses {
                f.error_statuses = statuses
                    .into_iter()
                    .map(|s| {
                        u16::try_from(s).map_err(|_| (None, format!("faults.error_statuses: {s} is not a status")))
                    })
                    .collect::<Result<_, _>>()?;
            }
            if let Some(slow) = &faults.slow_body {
                f.slow_body = duration(slow, "faults.slow_body")?;
            }
        }
        let cache = self.cache.unwrap_or(false);
        route.cache = match (&self.max_age, cache) {
            (Some(max_age), true) => Some(duration(max_age, "max_age")?),
            (None, true) => Some(Duration::from_secs(30)),
            (Some(max_age), false) => {
                return Err((Some(max_age.span()), "max_age is only used with cache = true".into()));
            }
            (None, false) => None,
        };
        for policy in &self.policies {
            route.policies.push(policy.get_ref().convert().map_err(|message| (Some(policy.span()), message))?);
        }
        Ok(route)
    }
}

impl RawPolicy {
    fn convert(&self) -> Result<PolicySpec, String> {
        let kind = self.kind.trim();
        let (default_name, takes): (&str, &[&str]) = match kind {
            "token_bucket" => ("bucket", &["capacity", "rate"]),
            "fixed_window" => ("fixed", &["limit", "window"]),
            "sliding_window" => ("sliding", &["limit", "window"]),
            "concurrency" => ("concurrency", &["limit"]),
            other => {
                return Err(format!(
                    "policy kind {other:?} is not one of token_bucket, fixed_window, sliding_window, concurrency"
                ));
            }
        };
        let given = [
            ("capacity", self.capacity.is_some()),
            ("rate", self.rate.is_some()),
            ("limit", self.limit.is_some()),
            ("window", self.window.is_some()),
        ];
        if let Some((field, _)) = given.iter().find(|(field, set)| *set && !takes.contains(field)) {
            return Err(format!("a {kind} policy takes {}, not {field}", takes.join(" and ")));
        }
        if let Some(field) = takes.iter().find(|field| !given.iter().any(|(f, set)| f == *field && *set)) {
            return Err(format!("a {kind} policy needs {} (missing {field})", takes.join(" and ")));
        }
        let count = |field: &str, value: Option<i64>| -> Result<u64, String> {
            let value = value.unwrap_or(0);
            u64::try_from(value).ok().filter(|v| *v > 0).ok_or_else(|| format!("{field} {value} must be at least 1"))
        };
        let window = || -> Result<Duration, String> {
            parse_duration(self.window.as_deref().unwrap_or_default()).map_err(|e| format!("window: {e}"))
        };
        let kind = match kind {
            "token_bucket" => {
                let rate: Rate = self.rate.as_deref().unwrap_or_default().parse().map_err(|e| format!("rate: {e}"))?;
                PolicyKind::TokenBucket { capacity: count("capacity", self.capacity)?, rate }
            }
            "fixed_window" => PolicyKind::FixedWindow { limit: count("limit", self.limit)?, window: window()? },
            "sliding_window" => PolicyKind::SlidingWindow { limit: count("limit", self.limit)?, window: window()? },
            _ => PolicyKind::Concurrency { limit: count("limit", self.limit)? },
        };
        let name = self.name.as_deref().map(str::trim).unwrap_or(default_name).to_owned();
        let unit =
            self.unit.as_deref().map_or(Ok(Unit::Requests), Unit::parse).map_err(|err| format!("unit: {err}"))?;
        let spec = PolicySpec { name, kind, unit };
        spec.validate()?;
        Ok(spec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route_error(text: &str) -> (Option<usize>, String) {
        match MockConfig::from_toml(text) {
            Err(err @ MockError::Route { .. }) => {
                let MockError::Route { location, .. } = &err else { unreachable!() };
                (location.line, err.to_string())
            }
            other => panic!("expected a route error, got {other:?}"),
        }
    }

    #[test]
    fn the_demo_config_loads_with_its_documented_routes() {
        let demo = MockConfig::demo().unwrap();
        let prefixes: Vec<&str> = demo.routes.iter().map(|r| r.prefix.as_str()).collect();
        assert_eq!(
            prefixes,
            ["/items", "/search", "/slow", "/flaky", "/catalog", "/v1/chat/completions", "/graphql", "/open"]
        );
        let items = &demo.routes[0];
        assert_eq!(
            items.describe(),
            "bucket 5 @ 5/1s + fixed 100/1m  headers: ietf  429 + Retry-After  latency 20ms + 0-10ms"
        );
        let search = &demo.routes[1];
        assert_eq!((search.dialect, search.count_by), (Dialect::Github, CountBy::Key));
        assert_eq!(demo.routes[4].cache, Some(Duration::from_secs(30)));
        assert_eq!(
            demo.routes[5].describe(),
            "bucket 60 @ 60/1m + bucket 20000 tokens @ 20000/1m  api: llm  headers: openai  429 + Retry-After  latency 300ms + 0-200ms"
        );
        assert_eq!(
            demo.routes[6].describe(),
            "bucket 1000 points @ 50/1s  api: graphql  headers: none  429 + Retry-After  latency 50ms"
        );
        assert!(demo.routes[7].policies.is_empty());
        assert_eq!(demo.server.api_key_header, "x-api-key");
        demo.validate().unwrap();
    }

    #[test]
    fn longest_prefix_wins_on_whole_segments() {
        let config = MockConfig::from_toml(
            r#"
            [[routes]]
            prefix = "/"
            [[routes]]
            prefix = "/items"
            [[routes]]
            prefix = "/items/special"
            "#,
        )
        .unwrap();
        assert_eq!(config.route_for("/items"), Some(1));
        assert_eq!(config.route_for("/items/3"), Some(1));
        assert_eq!(config.route_for("/items/special/1"), Some(2));
        assert_eq!(config.route_for("/itemsx"), Some(0));
        assert_eq!(config.route_for("/"), Some(0));
        let without_root = MockConfig::from_toml("[[routes]]\nprefix = \"/a\"").unwrap();
        assert_eq!(without_root.route_for("/b"), None);
    }

    #[test]
    fn broken_toml_names_the_line() {
        let err = MockConfig::from_toml("[[routes]]\nprefix = \"/a\"\nstatus = \n").unwrap_err();
        let MockError::Toml { location, .. } = &err else { panic!("{err:?}") };
        assert_eq!(location.line, Some(3), "{err}");
        assert!(err.to_string().starts_with("mock config:3:"), "{err}");
    }

    #[test]
    fn unknown_fields_are_refused_with_their_line() {
        let err = MockConfig::from_toml("[[routes]]\nprefix = \"/a\"\nlimit = 5\n").unwrap_err();
        assert!(err.to_string().contains("unknown field `limit`"), "{err}");
        assert!(err.to_string().starts_with("mock config:3:"), "{err}");
    }

    #[test]
    fn absurd_values_are_refused_naming_the_route() {
        let cases = [
            ("dialect = \"soap\"", "dialect \"soap\" is not one of ietf, x-ratelimit, github, openai, none"),
            ("status = 418", "status 418 is not 429 or 503"),
            ("count_by = \"ip\"", "count_by \"ip\" is not \"global\" or \"key\""),
            ("faults = { error_rate = nan }", "faults.error_rate NaN is not a share between 0 and 1"),
            ("faults = { reset_rate = -0.1 }", "faults.reset_rate -0.1 is not a share"),
            ("faults = { slow_body_rate = 1.5 }", "faults.slow_body_rate 1.5 is not a share"),
            ("faults = { error_rate = 0.1, error_statuses = [404] }", "404 is not a 5xx status"),
            ("latency = { fixed = \"soon\" }", "latency.fixed: 'soon' is not a duration"),
            ("latency = { fixed = \"2h\" }", "latency.fixed 2h is longer than 1m"),
            ("max_age = \"30s\"", "max_age is only used with cache = true"),
            ("api = \"soap\"", "api \"soap\" is not one of json, llm, graphql"),
            ("api = \"llm\"\ncache = true", "cache = true is for api = \"json\" routes"),
        ];
        for (line, expected) in cases {
            let (at, message) = route_error(&format!("[[routes]]\nprefix = \"/x\"\n{line}\n"));
            assert!(message.contains("route '/x'") && message.contains(expected), "{line}: {message}");
            assert!(at.is_some(), "{line}: {message}");
        }
    }

    #[test]
    fn absurd_policies_are_refused_naming_route_and_line() {
        let policy = |body: &str| format!("[[routes]]\nprefix = \"/x\"\n\n[[routes.policies]]\n{body}\n");
        let cases = [
            ("kind = \"leaky\"", "policy kind \"leaky\" is not one of"),
            ("kind = \"token_bucket\"\ncapacity = 0\nrate = \"1/1s\"", "capacity 0 must be at least 1"),
            ("kind = \"token_bucket\"\ncapacity = -3\nrate = \"1/1s\"", "capacity -3 must be at least 1"),
            ("kind = \"token_bucket\"\ncapacity = 5\nrate = \"0/1s\"", "rate: 0 must be greater than zero"),
            ("kind = \"token_bucket\"\ncapacity = 5\nrate = \"NaN/1s\"", "rate: NaN is not a finite number"),
            ("kind = \"token_bucket\"\ncapacity = 5", "needs capacity and rate (missing rate)"),
            ("kind = \"fixed_window\"\nlimit = 5\nwindow = \"0s\"", "a duration of zero"),
            (
                "kind = \"sliding_window\"\nlimit = 5\nwindow = \"1m\"\nrate = \"1/1s\"",
                "takes limit and window, not rate",
            ),
            ("kind = \"concurrency\"\nlimit = 0", "limit 0 must be at least 1"),
            ("kind = \"concurrency\"\nlimit = 1\nunit = \"tok ens\"", "unit: 'tok ens' is not a unit"),
        ];
        for (body, expected) in cases {
            let (at, message) = route_error(&policy(body));
            assert!(message.contains("route '/x'") && message.contains(expected), "{body}: {message}");
            assert_eq!(at, Some(4), "the line of the [[routes.policies]] header: {message}");
        }
        let units = |api: &str, policy: &str| {
            format!("[[routes]]\nprefix = \"/x\"\napi = \"{api}\"\n\n[[routes.policies]]\n{policy}\n")
        };
        for (text, expected) in [
            (
                units("json", "kind = \"token_bucket\"\nunit = \"tokens\"\ncapacity = 5\nrate = \"5/1s\""),
                "counts tokens, but an api = \"json\" route measures requests only",
            ),
            (
                units("llm", "kind = \"token_bucket\"\nunit = \"points\"\ncapacity = 5\nrate = \"5/1s\""),
                "measures requests and tokens",
            ),
            (
                units("graphql", "kind = \"concurrency\"\nunit = \"points\"\nlimit = 2"),
                "a concurrency limit counts requests, not points",
            ),
        ] {
            let (_, message) = route_error(&text);
            assert!(message.contains("route '/x'") && message.contains(expected), "{text}: {message}");
        }
        let twice = "kind = \"concurrency\"\nlimit = 1\n[[routes.policies]]\nkind = \"concurrency\"\nlimit = 2";
        assert!(route_error(&policy(twice)).1.contains("two policies are named 'concurrency'"));
    }

    #[test]
    fn route_level_mistakes_are_refused() {
        assert!(route_error("[[routes]]\nprefix = \"items\"").1.contains("must start with '/'"));
        assert!(route_error("[[routes]]\nprefix = \"/a/\"").1.contains("must not end with '/'"));
        let (line, message) = route_error("[[routes]]\nprefix = \"/a\"\n[[routes]]\nprefix = \"/a\"");
        assert!(message.contains("two routes have this prefix"));
        assert_eq!(line, Some(4));
        let err = MockConfig::from_toml("[server]\napi_key_header = \"x-api-key\"\n").unwrap_err();
        assert!(err.to_string().contains("no routes"), "{err}");
        let err =
            MockConfig::from_toml("[server]\napi_key_header = \"bad header\"\n[[routes]]\nprefix = \"/\"").unwrap_err();
        assert!(err.to_string().contains("mock config:2:") && err.to_string().contains("not a header name"), "{err}");
    }

    #[test]
    fn validate_catches_fields_edited_in_code() {
        let mut config = MockConfig::demo().unwrap();
        config.routes[0].faults.error_rate = f64::NAN;
        let err = config.validate().unwrap_err();
        assert!(err.to_string().contains("route '/items': faults.error_rate NaN"), "{err}");
        config.routes.clear();
        assert!(config.validate().is_err());
    }
}
