//! From a profile's text settings to the engine's types, refusing what makes no sense and
//! naming the host and field: limiter configs, retry policies, limiter keys, headers, the registry.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use http::{HeaderMap, HeaderName};
use url::Url;

use super::endpoint::checked_headers;
use super::error::{FieldPath, InvalidSetting, ProfileError};
use super::model::{
    BudgetEntry, BudgetEntryKind, HostProfile, LEARNED_PREFIX, PathOverride, Profile, RetryEntry, normalize_prefix,
};
use super::store::slug;
use crate::engine::{
    BudgetSpec, ConfigError, LimitKey, LimiterConfig, MAX_CONCURRENCY, Rate, Registry, Unit, parse_duration,
};
use crate::http::retry::{Jitter, RetryConfigError, RetryPolicy};
use crate::http::{Adaptive, Policy};
use crate::redact::redact_url;

/// Everything a host turns into, checked.
#[derive(Debug, Clone)]
pub(crate) struct CompiledHost {
    pub key: LimitKey,
    pub config: LimiterConfig,
    pub retry: RetryPolicy,
    /// `host/prefix` keys and their limits.
    pub paths: Vec<(LimitKey, LimiterConfig)>,
    /// The non-secret default headers.
    pub headers: HeaderMap,
}

impl Profile {
    /// Checks every setting of every host; errors name the host and field.
    pub fn validate(&self) -> Result<(), ProfileError> {
        self.compile().map(drop).map_err(ProfileError::invalid)
    }

    /// The limiter table: one key per host (`host[:port]` of its base URL) and one per path override.
    pub fn registry(&self) -> Result<Registry, ProfileError> {
        let table = self.entries()?;
        Registry::from_table(table)
            .map_err(|err| ProfileError::invalid(InvalidSetting::new(FieldPath::root().key("hosts"), err.to_string())))
    }

    /// What every face (the client, the middleware, a proxy, a tower layer) paces and retries
    /// by for this profile, made in this one place: the limiter table ([`registry`](Self::registry)),
    /// each key's retry policy (a host's, for the host and each of its paths), and the keys of
    /// hosts marked `adaptive`. Events go nowhere until the caller sets `events`.
    pub fn policy(&self) -> Result<Policy, ProfileError> {
        let hosts = self.compile().map_err(ProfileError::invalid)?;
        let mut key_retry = HashMap::new();
        let mut adaptive = HashSet::new();
        for (host, compiled) in self.hosts.iter().zip(&hosts) {
            let keys = std::iter::once(&compiled.key).chain(compiled.paths.iter().map(|(key, _)| key));
            for key in keys.map(LimitKey::to_string) {
                key_retry.insert(key.clone(), compiled.retry.clone());
                if host.adaptive {
                    adaptive.insert(key);
                }
            }
        }
        let adaptive = if adaptive.is_empty() { Adaptive::Off } else { Adaptive::Keys(adaptive) };
        Ok(Policy { registry: Arc::new(self.registry()?), adaptive, key_retry, ..Policy::default() })
    }

    /// Every limiter key of the profile and its limits, hosts first, each followed by its paths.
    pub fn entries(&self) -> Result<Vec<(LimitKey, LimiterConfig)>, ProfileError> {
        let hosts = self.compile().map_err(ProfileError::invalid)?;
        Ok(hosts.into_iter().flat_map(|host| std::iter::once((host.key, host.config)).chain(host.paths)).collect())
    }

    pub(crate) fn compile(&self) -> Result<Vec<CompiledHost>, InvalidSetting> {
        let name_path = FieldPath::root().key("name");
        if self.name.trim().is_empty() {
            return Err(InvalidSetting::new(name_path, "name: a profile needs a name"));
        }
        if let Some(shared) = &self.shared {
            shared.check()?;
        }
        if slug(&self.name).is_err() {
            return Err(InvalidSetting::new(
                name_path,
                format!("name: '{}' needs at least one ASCII letter or digit (it names the file)", self.name),
            ));
        }
        let mut names = HashSet::new();
        let mut keys: Vec<(LimitKey, &str)> = Vec::new();
        let mut compiled = Vec::with_capacity(self.hosts.len());
        for (index, host) in self.hosts.iter().enumerate() {
            let prefix = FieldPath::root().key("hosts").index(index);
            if !names.insert(host.name.as_str()) {
                return Err(InvalidSetting::new(
                    FieldPath::root().key("name"),
                    format!("name: two hosts are named '{}'", host.name),
                )
                .in_host(&host.name, &prefix));
            }
            let checked = host.compile().map_err(|err| err.in_host(&host.name, &prefix))?;
            if let Some((_, other)) = keys.iter().find(|(key, _)| *key == checked.key) {
                return Err(InvalidSetting::new(
                    FieldPath::root().key("base_url"),
                    format!("base_url: host '{other}' already has {}; one host per host and port", checked.key.host),
                )
                .in_host(&host.name, &prefix));
            }
            keys.push((checked.key.clone(), &host.name));
            compiled.push(checked);
        }
        Ok(compiled)
    }
}

impl HostProfile {
    /// The limiter key of this host: the host of its base URL, with the port when one is given.
    pub fn key(&self) -> Result<LimitKey, ProfileError> {
        self.base_key().map_err(|err| ProfileError::invalid(err.in_host(&self.name, &FieldPath::root())))
    }

    /// The host's own limits (requests under a path override use that override's instead).
    pub fn limiter_config(&self) -> Result<LimiterConfig, ProfileError> {
        limits(&self.budgets, self.concurrency, &FieldPath::root())
            .map_err(|err| ProfileError::invalid(err.in_host(&self.name, &FieldPath::root())))
    }

    /// The host's retry policy ([`RetryPolicy::default`] for whatever is not set).
    pub fn retry_policy(&self) -> Result<RetryPolicy, ProfileError> {
        let policy = match &self.retry {
            Some(retry) => retry.to_policy(&FieldPath::root().key("retry")),
            None => Ok(RetryPolicy::default()),
        };
        policy.map_err(|err| ProfileError::invalid(err.in_host(&self.name, &FieldPath::root())))
    }

    /// The `host/prefix` key and limits of each path override.
    pub fn path_limits(&self) -> Result<Vec<(LimitKey, LimiterConfig)>, ProfileError> {
        self.compile()
            .map(|host| host.paths)
            .map_err(|err| ProfileError::invalid(err.in_host(&self.name, &FieldPath::root())))
    }

    /// The non-secret headers, checked.
    pub fn default_headers(&self) -> Result<HeaderMap, ProfileError> {
        self.header_map().map_err(|err| ProfileError::invalid(err.in_host(&self.name, &FieldPath::root())))
    }

    /// Paths in errors are relative to the host's table, and the host is not named yet.
    fn compile(&self) -> Result<CompiledHost, InvalidSetting> {
        let root = FieldPath::root();
        if self.name.trim().is_empty() {
            return Err(InvalidSetting::new(root.key("name"), "name: a host needs a name"));
        }
        let key = self.base_key()?;
        let config = limits(&self.budgets, self.concurrency, &root)?;
        let retry = match &self.retry {
            Some(retry) => retry.to_policy(&root.key("retry"))?,
            None => RetryPolicy::default(),
        };
        let headers = self.header_map()?;
        let mut paths: Vec<(LimitKey, LimiterConfig)> = Vec::with_capacity(self.paths.len());
        for (index, path) in self.paths.iter().enumerate() {
            let at = root.key("paths").index(index);
            let (path_key, path_config) = path.compile(&key, &at)?;
            if paths.iter().any(|(other, _)| *other == path_key) {
                let prefix = path_key.path_prefix.as_deref().unwrap_or("/");
                return Err(InvalidSetting::new(at.key("prefix"), format!("path '{prefix}': listed twice")));
            }
            paths.push((path_key, path_config));
        }
        let endpoints = self.check_endpoints()?;
        self.check_costs(&endpoints, &config, &paths)?;
        Ok(CompiledHost { key, config, retry, paths, headers })
    }

    fn base_key(&self) -> Result<LimitKey, InvalidSetting> {
        let at = FieldPath::root().key("base_url");
        let fail = |message: String| Err(InvalidSetting::new(at.clone(), format!("base_url: {message}")));
        let url = match Url::parse(self.base_url.trim()) {
            Ok(url) => url,
            Err(err) => {
                let shown = redact_url(&self.base_url);
                return fail(format!("'{shown}' is not a URL ({err}); try https://api.example.com"));
            }
        };
        // Credentials are checked before anything echoes the URL back.
        if !url.username().is_empty() || url.password().is_some() {
            return fail(
                "holds credentials; list the header in secret_headers and keep its value in the secret store".into(),
            );
        }
        if !matches!(url.scheme(), "http" | "https") {
            return fail(format!("'{}' must start with http:// or https://", self.base_url));
        }
        if url.query().is_some() || url.fragment().is_some() {
            return fail("must not have a query string or fragment (keys in URLs leak into exports and logs)".into());
        }
        let Some(host) = url.host_str() else {
            return fail(format!("'{}' has no host", self.base_url));
        };
        let authority = match url.port() {
            Some(port) => format!("{host}:{port}"),
            None => host.to_owned(),
        };
        LimitKey::host(&authority).or_else(|err| fail(err.to_string()))
    }

    fn header_map(&self) -> Result<HeaderMap, InvalidSetting> {
        let headers = checked_headers(&self.headers, &FieldPath::root().key("headers"), "headers")?;
        crate::http::header_cap::check_header_count(self.secret_headers.len()).map_err(|err| {
            InvalidSetting::new(FieldPath::root().key("secret_headers"), format!("secret_headers: {err}"))
        })?;
        let mut secret = HashSet::new();
        for (index, name) in self.secret_headers.iter().enumerate() {
            let at = FieldPath::root().key("secret_headers").index(index);
            let Ok(header) = HeaderName::from_bytes(name.trim().as_bytes()) else {
                return Err(InvalidSetting::new(at, format!("secret_headers: '{name}' is not a valid header name")));
            };
            if headers.contains_key(&header) {
                return Err(InvalidSetting::new(
                    at,
                    format!("secret_headers: '{header}' is also in headers; keep it in one place"),
                ));
            }
            if !secret.insert(header.clone()) {
                return Err(InvalidSetting::new(at, format!("secret_headers: '{header}' is listed twice")));
            }
        }
        Ok(headers)
    }
}

impl PathOverride {
    fn compile(&self, host: &LimitKey, at: &FieldPath) -> Result<(LimitKey, LimiterConfig), InvalidSetting> {
        let prefix = normalize_prefix(&self.prefix);
        let label = format!("path '{}'", self.prefix);
        let fail = |message: &str| Err(InvalidSetting::new(at.key("prefix"), format!("{label}: {message}")));
        if !prefix.starts_with('/') {
            return fail("a prefix is a URL path and starts with '/', such as /search");
        }
        if prefix == "/" {
            return fail("'/' covers the whole host: give the host these limits instead");
        }
        if prefix.contains(['?', '#']) || prefix.contains(char::is_whitespace) {
            return fail("a prefix is a plain path, without spaces, query string or fragment");
        }
        let Ok(key) = format!("{}{prefix}", host.host).parse::<LimitKey>() else {
            return fail("not a usable path prefix");
        };
        let config = limits(&self.budgets, self.concurrency, at)
            .map_err(|err| InvalidSetting { message: format!("{label}: {}", err.message), ..err })?;
        Ok((key, config))
    }
}

/// Budgets and a concurrency cap at `at` (a host's or a path override's table).
pub(crate) fn limits(
    budgets: &[BudgetEntry],
    concurrency: Option<usize>,
    at: &FieldPath,
) -> Result<LimiterConfig, InvalidSetting> {
    let mut config = LimiterConfig::new();
    let mut names = HashSet::new();
    for (index, budget) in budgets.iter().enumerate() {
        let budget_at = at.key("budgets").index(index);
        let spec = budget.to_spec(&budget_at)?;
        if !names.insert(spec.name.clone()) {
            return Err(InvalidSetting::new(budget_at.key("name"), format!("two budgets are named '{}'", spec.name)));
        }
        config.budgets.push(spec);
    }
    match concurrency {
        Some(0) => {
            return Err(InvalidSetting::new(
                at.key("concurrency"),
                "concurrency: 0 would never let a request through; use at least 1",
            ));
        }
        Some(limit) if limit > MAX_CONCURRENCY => {
            return Err(InvalidSetting::new(
                at.key("concurrency"),
                format!("concurrency: {limit} is more than the engine supports ({MAX_CONCURRENCY})"),
            ));
        }
        _ => config.concurrency = concurrency,
    }
    config.validate().map_err(|err| InvalidSetting::new(at.clone(), err.to_string()))?;
    Ok(config)
}

impl BudgetEntry {
    /// The engine's budget this entry describes; errors name the budget and the field.
    pub fn to_budget(&self) -> Result<BudgetSpec, ProfileError> {
        self.to_spec(&FieldPath::root()).map_err(ProfileError::invalid)
    }

    /// The engine's budget; errors name the budget and the field (`at` is the budget's table).
    fn to_spec(&self, at: &FieldPath) -> Result<BudgetSpec, InvalidSetting> {
        let label = format!("budget '{}'", self.name);
        let fail = |field: &str, message: String| InvalidSetting::new(at.key(field), format!("{label}: {message}"));
        if self.name.trim().is_empty() {
            return Err(InvalidSetting::new(at.key("name"), "a budget needs a name"));
        }
        if self.name.starts_with(LEARNED_PREFIX) {
            return Err(fail(
                "name",
                format!("names starting with '{LEARNED_PREFIX}' are kept for limits learned from servers"),
            ));
        }
        let spec = match self.kind {
            BudgetEntryKind::TokenBucket => self.bucket_spec(at, &label)?,
            BudgetEntryKind::SlidingWindow => self.window_spec(at, &label)?,
        };
        let spec = match self.unit.as_deref() {
            None => spec,
            Some(unit) => spec.with_unit(Unit::parse(unit).map_err(|err| fail("unit", err.to_string()))?),
        };
        match self.cost {
            None => Ok(spec),
            Some(cost) => spec.with_cost(cost).map_err(|err| fail("cost", format!("cost {cost}: {err}"))),
        }
    }

    /// A token bucket's capacity and rate, checked (`at` is the budget's table).
    fn bucket_spec(&self, at: &FieldPath, label: &str) -> Result<BudgetSpec, InvalidSetting> {
        let fail = |field: &str, message: String| InvalidSetting::new(at.key(field), format!("{label}: {message}"));
        if self.limit.is_some() || self.window.is_some() {
            let field = if self.limit.is_some() { "limit" } else { "window" };
            return Err(fail(
                field,
                "limit and window belong to sliding windows; a token bucket has capacity and rate".into(),
            ));
        }
        let capacity = self.capacity.ok_or_else(|| {
            InvalidSetting::new(at.clone(), format!("{label}: a token bucket needs a capacity (the burst it allows)"))
        })?;
        if capacity == 0 {
            return Err(fail("capacity", "capacity 0 would never let a request through; use at least 1".into()));
        }
        let text = self.rate.as_deref().ok_or_else(|| {
            InvalidSetting::new(at.clone(), format!("{label}: a token bucket needs a rate, such as rate = \"10/1s\""))
        })?;
        let rate: Rate = text.parse().map_err(|err| {
            // "0/1s" parses as a non-positive amount; say what that means for a bucket.
            let err = match err {
                ConfigError::NotPositive(0.0) => ConfigError::ZeroRate,
                other => other,
            };
            fail("rate", format!("rate \"{text}\": {err}"))
        })?;
        BudgetSpec::token_bucket(&self.name, capacity, rate).map_err(|err| fail("capacity", err.to_string()))
    }

    /// A sliding window's limit and length, checked (`at` is the budget's table).
    fn window_spec(&self, at: &FieldPath, label: &str) -> Result<BudgetSpec, InvalidSetting> {
        let fail = |field: &str, message: String| InvalidSetting::new(at.key(field), format!("{label}: {message}"));
        if self.capacity.is_some() || self.rate.is_some() {
            let field = if self.capacity.is_some() { "capacity" } else { "rate" };
            return Err(fail(
                field,
                "capacity and rate belong to token buckets; a sliding window has limit and window".into(),
            ));
        }
        let limit = self.limit.ok_or_else(|| {
            InvalidSetting::new(at.clone(), format!("{label}: a sliding window needs a limit (requests per window)"))
        })?;
        if limit == 0 {
            return Err(fail("limit", "limit 0 would never let a request through; use at least 1".into()));
        }
        let text = self.window.as_deref().ok_or_else(|| {
            InvalidSetting::new(
                at.clone(),
                format!("{label}: a sliding window needs a window, such as window = \"1m\""),
            )
        })?;
        let window = parse_duration(text).map_err(|err| fail("window", format!("window: {err}")))?;
        BudgetSpec::sliding_window(&self.name, limit, window)
            .map_err(|err| fail("window", format!("window \"{text}\": {err}")))
    }
}

impl RetryEntry {
    /// The policy; `at` is the retry table.
    pub(crate) fn to_policy(&self, at: &FieldPath) -> Result<RetryPolicy, InvalidSetting> {
        let fail = |field: &str, message: String| InvalidSetting::new(at.key(field), format!("retry: {message}"));
        let duration = |field: &str, text: &Option<String>, default| match text {
            None => Ok(default),
            Some(text) => parse_duration(text).map_err(|err| fail(field, format!("{field}: {err}"))),
        };
        let defaults = RetryPolicy::default();
        let jitter = match &self.jitter {
            None => defaults.jitter,
            Some(text) => text.parse::<Jitter>().map_err(|err| fail("jitter", err.to_string()))?,
        };
        let retry_statuses = self.retry_statuses.clone().unwrap_or(defaults.retry_statuses);
        if let Some(status) = retry_statuses.iter().find(|status| !(100..=599).contains(*status)) {
            return Err(fail("retry_statuses", format!("retry_statuses: {status} is not an HTTP status")));
        }
        let policy = RetryPolicy {
            max_attempts: self.max_attempts.unwrap_or(defaults.max_attempts),
            base: duration("base", &self.base, defaults.base)?,
            cap: duration("cap", &self.cap, defaults.cap)?,
            jitter,
            max_retry_after: duration("max_retry_after", &self.max_retry_after, defaults.max_retry_after)?,
            retry_statuses,
            retry_connection_errors: self.retry_connection_errors.unwrap_or(defaults.retry_connection_errors),
            retry_non_idempotent: self.retry_non_idempotent.unwrap_or(defaults.retry_non_idempotent),
        };
        policy.validate().map_err(|err| {
            let field = match err {
                RetryConfigError::ZeroAttempts | RetryConfigError::TooManyAttempts(_) => "max_attempts",
                RetryConfigError::ZeroBase => "base",
                RetryConfigError::CapBelowBase { .. } => "cap",
                RetryConfigError::ZeroMaxRetryAfter => "max_retry_after",
                RetryConfigError::UnknownJitter(_) => "jitter",
            };
            fail(field, err.to_string())
        })?;
        Ok(policy)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::engine::BudgetKind;

    fn host() -> HostProfile {
        let mut host = HostProfile::new("api", "https://API.example.com:8443/v1");
        host.budgets.push(BudgetEntry::token_bucket("rate", 5, "5/1s"));
        host
    }

    #[test]
    fn the_policy_has_every_key_its_retry_policy_and_the_adaptive_hosts_keys() {
        let mut profile = Profile::from_toml(crate::profile::DEMO_TOML).unwrap();
        profile.hosts[0].adaptive = true;
        let policy = profile.policy().unwrap();
        let keys: Vec<String> = profile.entries().unwrap().into_iter().map(|(key, _)| key.to_string()).collect();
        assert!(keys.len() > 1, "the demo has path overrides: {keys:?}");
        for key in &keys {
            assert!(policy.key_retry.contains_key(key), "{key} has its host's retry policy");
            assert!(policy.adaptive.covers(key), "{key} follows its server");
            assert!(policy.registry.entries().iter().any(|(entry, _)| entry.to_string() == *key), "{key} is paced");
        }
        profile.hosts[0].adaptive = false;
        assert!(matches!(profile.policy().unwrap().adaptive, Adaptive::Off), "no adaptive host: adaptive mode is off");
    }

    #[test]
    fn a_budget_counts_its_unit_and_a_bad_unit_is_named() {
        let mut host = host();
        host.budgets
            .push(BudgetEntry { unit: Some("Tokens".into()), ..BudgetEntry::sliding_window("tpm", 200_000, "1m") });
        let config = host.limiter_config().unwrap();
        assert_eq!(config.budgets[0].unit, Unit::Requests);
        assert_eq!(config.budgets[1].unit, Unit::tokens());
        assert_eq!(BudgetEntry::from_spec(&config.budgets[1]).unit.as_deref(), Some("tokens"));
        host.budgets[1].unit = Some("to kens".into());
        let err = host.limiter_config().unwrap_err().to_string();
        assert!(err.contains("budget 'tpm'") && err.contains("'to kens' is not a unit"), "{err}");
        for bad in ["", "../x", "🪙", "1x"] {
            host.budgets[1].unit = Some(bad.into());
            assert!(host.limiter_config().unwrap_err().to_string().contains("unit"), "{bad:?}");
        }
    }

    #[test]
    fn the_key_is_the_base_urls_host_and_explicit_port() {
        assert_eq!(host().key().unwrap().to_string(), "api.example.com:8443");
        assert_eq!(HostProfile::new("a", "https://api.example.com:443/").key().unwrap().to_string(), "api.example.com");
        assert_eq!(HostProfile::new("a", "http://[::1]:8787").key().unwrap().to_string(), "[::1]:8787");
    }

    #[test]
    fn credentials_in_a_base_url_are_refused_without_echoing_them() {
        let err = HostProfile::new("a", "https://user:hunter2@api.example.com").key().unwrap_err().to_string();
        assert!(err.contains("credentials"), "{err}");
        assert!(!err.contains("hunter2"), "{err}");
        let err = HostProfile::new("a", "https://user:hunter2@[::1").key().unwrap_err().to_string();
        assert!(err.contains("not a URL") && !err.contains("hunter2"), "{err}");
        let err = HostProfile::new("a", "https://api.example.com/?key=abc").key().unwrap_err().to_string();
        assert!(err.contains("query string") && !err.contains("abc"), "{err}");
    }

    #[test]
    fn budgets_become_engine_budgets_with_their_kind_checked() {
        let mut host = host();
        host.budgets.push(BudgetEntry::sliding_window("minute", 100, "1m"));
        let config = host.limiter_config().unwrap();
        assert_eq!(config.describe(), "bucket 5 @ 5/1s, window 100/1m");
        host.budgets[1].capacity = Some(3);
        let err = host.limiter_config().unwrap_err().to_string();
        assert_eq!(
            err,
            "host 'api': budget 'minute': capacity and rate belong to token buckets; a sliding window has limit and window"
        );
        host.budgets.truncate(1);
        host.budgets.push(BudgetEntry::token_bucket("rate", 1, "1/1s"));
        assert!(host.limiter_config().unwrap_err().to_string().contains("two budgets are named 'rate'"));
    }

    #[test]
    fn retry_entries_fill_in_defaults_and_check_the_rest() {
        let mut host = host();
        host.retry = Some(RetryEntry { max_attempts: Some(2), jitter: Some("none".into()), ..Default::default() });
        let policy = host.retry_policy().unwrap();
        assert_eq!((policy.max_attempts, policy.jitter), (2, Jitter::None));
        assert_eq!(policy.base, RetryPolicy::default().base);
        host.retry = Some(RetryEntry { base: Some("1s".into()), cap: Some("10ms".into()), ..Default::default() });
        let err = host.retry_policy().unwrap_err();
        let ProfileError::Invalid { setting, .. } = &err else { panic!("{err:?}") };
        assert_eq!(setting.path.to_string(), "retry.cap");
        assert!(err.to_string().starts_with("host 'api': retry: the backoff cap"), "{err}");
        host.retry = Some(RetryEntry { retry_statuses: Some(vec![429, 42]), ..Default::default() });
        assert!(host.retry_policy().unwrap_err().to_string().contains("42 is not an HTTP status"));
    }

    #[test]
    fn a_policy_written_out_reads_back_the_same() {
        let policy = RetryPolicy {
            max_attempts: 7,
            base: Duration::from_millis(250),
            cap: Duration::from_secs(90),
            jitter: Jitter::Decorrelated,
            max_retry_after: Duration::from_secs(3600),
            retry_statuses: vec![429, 502, 503],
            retry_connection_errors: true,
            retry_non_idempotent: false,
        };
        let mut host = host();
        host.set_retry(&policy);
        assert_eq!(host.retry_policy().unwrap(), policy);
    }

    #[test]
    fn set_limits_keeps_configured_budgets_and_drops_learned_ones() {
        let rate: Rate = "2.5/1s".parse().unwrap();
        let config = LimiterConfig::new()
            .with_budget(BudgetSpec::token_bucket("rate", 3, rate).unwrap().with_cost(2).unwrap())
            .with_budget(BudgetSpec::sliding_window("server:win", 50, Duration::from_secs(60)).unwrap())
            .with_budget(BudgetSpec::sliding_window("day", 1000, Duration::from_secs(86_400)).unwrap())
            .with_concurrency(4);
        let mut host = HostProfile::new("a", "https://a.example");
        host.set_limits(&config);
        assert_eq!(host.budgets.iter().map(|b| b.name.as_str()).collect::<Vec<_>>(), ["rate", "day"]);
        let back = host.limiter_config().unwrap();
        assert_eq!(back.concurrency, Some(4));
        assert_eq!(back.budgets[0].kind, BudgetKind::TokenBucket { capacity: 3, refill: rate });
        assert_eq!(back.budgets[0].cost, 2);
        assert_eq!(back.budgets[1], config.budgets[2]);
    }

    #[test]
    fn path_overrides_need_a_real_prefix_and_get_host_slash_prefix_keys() {
        let mut host = host();
        host.paths.push(PathOverride { prefix: "/search/".into(), concurrency: Some(1), budgets: Vec::new() });
        let paths = host.path_limits().unwrap();
        assert_eq!(paths[0].0.to_string(), "api.example.com:8443/search");
        host.paths.push(PathOverride { prefix: "/search".into(), concurrency: None, budgets: Vec::new() });
        assert!(host.path_limits().unwrap_err().to_string().contains("listed twice"));
        host.paths[1].prefix = "search".into();
        assert!(host.path_limits().unwrap_err().to_string().contains("starts with '/'"));
        host.paths[1].prefix = "/".into();
        assert!(host.path_limits().unwrap_err().to_string().contains("covers the whole host"));
    }

    #[test]
    fn secret_looking_plain_headers_are_refused() {
        let mut host = host();
        host.headers.insert("Authorization".into(), "Bearer abc".into());
        let err = host.default_headers().unwrap_err().to_string();
        assert!(err.contains("secret_headers") && !err.contains("Bearer abc"), "{err}");
        host.headers.clear();
        host.headers.insert("accept".into(), "application/json".into());
        host.secret_headers = vec!["ACCEPT".into()];
        assert!(host.default_headers().unwrap_err().to_string().contains("also in headers"));
    }

    #[test]
    fn more_headers_than_a_request_may_carry_are_refused_naming_the_cap() {
        let cap = crate::http::header_cap::MAX_REQUEST_HEADERS;
        let mut host = host();
        host.secret_headers = (0..=cap).map(|index| format!("x-key-{index}")).collect();
        let err = host.default_headers().unwrap_err().to_string();
        assert!(err.contains("secret_headers") && err.contains(&format!("more than the {cap}")), "{err}");
        host.secret_headers.clear();
        host.headers = (0..40_000).map(|index| (format!("x-h{index}"), "1".to_owned())).collect();
        let err = host.default_headers().unwrap_err().to_string();
        assert!(err.contains("headers: 40000 headers are more than the"), "{err}");
    }

    #[test]
    fn two_hosts_with_one_key_are_refused() {
        let mut profile = Profile::new("p");
        profile.hosts = vec![host(), HostProfile::new("again", "https://api.example.com:8443")];
        let err = profile.validate().unwrap_err().to_string();
        assert!(err.starts_with("host 'again': base_url: host 'api' already has api.example.com:8443"), "{err}");
    }

    #[test]
    fn set_key_limits_finds_the_host_or_its_path() {
        let mut profile = Profile::new("p");
        profile.hosts.push(host());
        let config = LimiterConfig::new().with_concurrency(2);
        assert!(profile.set_key_limits(&"api.example.com:8443/search".parse().unwrap(), &config));
        assert!(profile.set_key_limits(&"api.example.com:8443".parse().unwrap(), &config));
        assert!(!profile.set_key_limits(&"other.example".parse().unwrap(), &config));
        let host = &profile.hosts[0];
        assert_eq!((host.concurrency, host.budgets.len()), (Some(2), 0));
        assert_eq!(host.paths[0].prefix, "/search");
        assert_eq!(host.paths[0].concurrency, Some(2));
    }
}
