//! The profile as written in TOML: hosts, their budgets, path overrides, retry and headers.
//!
//! Quantities stay text here (`"5/1s"`, `"300ms"`, `"full"`), exactly as the user wrote
//! them; the `convert` module turns them into engine types and says what is wrong and where.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::engine::{BudgetKind, BudgetSpec, LimitKey, LimiterConfig, Unit, format_period};
use crate::http::{RedirectPolicy, RetryPolicy};

/// Budgets whose name starts with this were learned from a server at run time; profiles never keep them.
pub const LEARNED_PREFIX: &str = "server:";

/// A named set of hosts and the settings that work for them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    /// The profile's name; its file name is made from it.
    pub name: String,
    /// Share the hosts' budgets with other processes through Redis; absent: budgets are in-process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared: Option<SharedEntry>,
    /// The hosts it has settings for.
    #[serde(default)]
    pub hosts: Vec<HostProfile>,
}

/// `[shared]`: where the budgets live and what to do when that store is away.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SharedEntry {
    /// `redis://host:port[/db]`; a password only through `${ENV_VAR}`, never written in the file.
    pub redis: String,
    /// The name every sharing process uses (one per account or API key).
    pub key: String,
    /// `fail-closed` (default), `fail-open`, `local` or `local/N` (N expected instances).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_failure: Option<String>,
    /// PEM file of the CAs that sign a `rediss://` server's certificate (`${ENV}` allowed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<String>,
}

/// One host: where it is, how fast to go, how to retry, what to send.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostProfile {
    /// Unique within the profile; secrets are filed under it.
    pub name: String,
    /// `http(s)://host[:port][/path]`; its host and port make the limiter key.
    pub base_url: String,
    /// Most requests in flight at once; absent for no cap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<usize>,
    /// Follow the budgets the server publishes in its headers.
    #[serde(default, skip_serializing_if = "is_false")]
    pub adaptive: bool,
    /// The host's budgets; none and no concurrency means no limit.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub budgets: Vec<BudgetEntry>,
    /// Non-secret headers sent with every request to this host.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// Names of headers whose values live in the secret store.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secret_headers: Vec<String>,
    /// Absent: the default policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<RetryEntry>,
    /// Which redirects to follow: `same-origin` (default), `any-origin` (another origin gets
    /// no headers or secrets of this host) or `none`.
    #[serde(default, skip_serializing_if = "is_default")]
    pub redirects: RedirectPolicy,
    /// Limits of their own for paths under a prefix.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<PathOverride>,
    /// Requests this host serves, ready to fire: method, path, query, headers and body.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub endpoints: Vec<EndpointEntry>,
}

/// One request a host serves: `[[hosts.endpoints]]` with `name`, `method`, `path`, `query`,
/// `headers`, `body` or `body_file`, `weight`, `costs` and `batch`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EndpointEntry {
    /// Unique within the host; `burst --endpoint NAME` picks it.
    pub name: String,
    /// `GET` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    /// Under the host's base URL, starting with `/`; may carry a query (`/items?page=2`).
    pub path: String,
    /// Query parameters added to the path's own (not secrets: those go in a secret header).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub query: BTreeMap<String, String>,
    /// Non-secret headers of this endpoint, over the host's.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// The body as text (JSON or anything else); its `Content-Type` is guessed unless set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    /// Or the body read from this file when the burst is built (relative to the working directory).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_file: Option<String>,
    /// Its share of a burst over several endpoints (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<u32>,
    /// Units other than requests a request reserves and settles, one rule per unit:
    /// `"tokens=field:max_tokens+body/4->field:usage.total_tokens"` (see `http::cost`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub costs: Vec<String>,
    /// Item requests to this endpoint sent in batches: `batch = { param = "ids", max_size = 50,
    /// max_wait = "20ms" }` (see `http::batch`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<BatchEntry>,
}

/// An endpoint's batch template as written: ids joined into one query parameter.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchEntry {
    /// The query parameter that takes the ids (`ids` in `?ids=1,2,3`).
    pub param: String,
    /// The most ids in one request.
    pub max_size: usize,
    /// How long a batch waits for more ids after its first, e.g. `"20ms"`.
    pub max_wait: String,
    /// Between two ids (a comma when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub separator: Option<String>,
}

/// The kind of a budget, as written in `kind = "..."`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BudgetEntryKind {
    /// `capacity` tokens refilled at `rate`.
    TokenBucket,
    /// At most `limit` in any `window`.
    SlidingWindow,
}

/// One budget: `{ name = "rate", kind = "token_bucket", capacity = 5, rate = "5/1s" }`
/// or `{ name = "hour", kind = "sliding_window", limit = 1000, window = "1h" }`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BudgetEntry {
    /// The budget's name, unique in its host or path.
    pub name: String,
    /// `token_bucket` or `sliding_window`.
    pub kind: BudgetEntryKind,
    /// Token bucket: tokens held at most (the burst let through at once).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<u64>,
    /// Token bucket: refill, `AMOUNT/DURATION` such as `5/1s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<String>,
    /// Sliding window: most requests in any window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
    /// Sliding window: its length, such as `1m`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<String>,
    /// What one request spends here (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<u64>,
    /// What the budget counts: `requests` (the default), `tokens`, `points` or a name of your own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unit: Option<String>,
}

/// Limits for requests whose path starts with `prefix` (on whole segments). They replace the
/// host's limits for those requests; the host's retry, headers and `adaptive` still apply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PathOverride {
    /// A URL path such as `/search`.
    pub prefix: String,
    /// Most requests in flight under the prefix (absent: no cap).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<usize>,
    /// The budgets under the prefix.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub budgets: Vec<BudgetEntry>,
}

/// The retry policy of a host; each absent field keeps [`RetryPolicy::default`]'s value.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetryEntry {
    /// Attempts in all; 1 never retries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<u32>,
    /// The first backoff, such as `300ms`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base: Option<String>,
    /// The longest backoff, such as `20s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cap: Option<String>,
    /// `full`, `equal`, `decorrelated` or `none`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jitter: Option<String>,
    /// A longer `Retry-After` fails at once instead of waiting, such as `5m`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_retry_after: Option<String>,
    /// Statuses that are retried.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_statuses: Option<Vec<u16>>,
    /// Whether connection errors and timeouts are retried.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_connection_errors: Option<bool>,
    /// Whether POST, PATCH and other non-idempotent methods are retried.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_non_idempotent: Option<bool>,
}

fn is_default<T: Default + PartialEq>(value: &T) -> bool {
    *value == T::default()
}

fn is_false(value: &bool) -> bool {
    !*value
}

impl Profile {
    /// An empty profile.
    pub fn new(name: impl Into<String>) -> Self {
        Self { name: name.into(), shared: None, hosts: Vec::new() }
    }

    /// A profile of one host with the limits of `config` (learned `server:` budgets left out).
    pub fn from_limiter_config(
        name: impl Into<String>,
        host_name: impl Into<String>,
        base_url: impl Into<String>,
        config: &LimiterConfig,
    ) -> Self {
        let mut host = HostProfile::new(host_name, base_url);
        host.set_limits(config);
        Self { name: name.into(), shared: None, hosts: vec![host] }
    }

    /// The host named `name`.
    pub fn host(&self, name: &str) -> Option<&HostProfile> {
        self.hosts.iter().find(|host| host.name == name)
    }

    /// The host named `name`, to edit.
    pub fn host_mut(&mut self, name: &str) -> Option<&mut HostProfile> {
        self.hosts.iter_mut().find(|host| host.name == name)
    }

    /// Stores edited limits of a registry key back into the host it belongs to: the host's own
    /// limits for a host key, a path override (created if needed) for a `host/prefix` key.
    /// Returns `false` when no host of the profile has that key.
    pub fn set_key_limits(&mut self, key: &LimitKey, config: &LimiterConfig) -> bool {
        let host_key = LimitKey { host: key.host.clone(), path_prefix: None };
        let Some(host) = self.hosts.iter_mut().find(|host| host.key().is_ok_and(|own| own == host_key)) else {
            return false;
        };
        match &key.path_prefix {
            None => host.set_limits(config),
            Some(prefix) => host.set_path_limits(prefix, config),
        }
        true
    }
}

impl HostProfile {
    /// A host with no limits, no headers and the default retry policy.
    pub fn new(name: impl Into<String>, base_url: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            base_url: base_url.into(),
            concurrency: None,
            adaptive: false,
            budgets: Vec::new(),
            headers: BTreeMap::new(),
            secret_headers: Vec::new(),
            retry: None,
            redirects: RedirectPolicy::default(),
            paths: Vec::new(),
            endpoints: Vec::new(),
        }
    }

    /// Replaces this host's budgets and concurrency cap with those of `config`, leaving out
    /// budgets learned from the server (named `server:...`).
    pub fn set_limits(&mut self, config: &LimiterConfig) {
        self.budgets = entries_of(config);
        self.concurrency = config.concurrency;
    }

    /// Replaces (or adds) the override for `prefix` with the limits of `config`.
    pub fn set_path_limits(&mut self, prefix: &str, config: &LimiterConfig) {
        let prefix = normalize_prefix(prefix);
        let budgets = entries_of(config);
        match self.paths.iter_mut().find(|path| normalize_prefix(&path.prefix) == prefix) {
            Some(path) => {
                path.budgets = budgets;
                path.concurrency = config.concurrency;
            }
            None => self.paths.push(PathOverride { prefix, concurrency: config.concurrency, budgets }),
        }
    }

    /// Stores `policy` as this host's retry settings.
    pub fn set_retry(&mut self, policy: &RetryPolicy) {
        self.retry = Some(RetryEntry::from_policy(policy));
    }
}

/// `/search/` and `/search` are the same prefix.
pub(crate) fn normalize_prefix(prefix: &str) -> String {
    let trimmed = prefix.trim().trim_end_matches('/');
    if trimmed.is_empty() { "/".to_owned() } else { trimmed.to_owned() }
}

fn entries_of(config: &LimiterConfig) -> Vec<BudgetEntry> {
    config
        .budgets
        .iter()
        .filter(|budget| !budget.name.starts_with(LEARNED_PREFIX))
        .map(BudgetEntry::from_spec)
        .collect()
}

impl BudgetEntry {
    /// A token bucket entry.
    pub fn token_bucket(name: impl Into<String>, capacity: u64, rate: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            kind: BudgetEntryKind::TokenBucket,
            capacity: Some(capacity),
            rate: Some(rate.into()),
            limit: None,
            window: None,
            cost: None,
            unit: None,
        }
    }

    /// A sliding window entry.
    pub fn sliding_window(name: impl Into<String>, limit: u64, window: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            kind: BudgetEntryKind::SlidingWindow,
            capacity: None,
            rate: None,
            limit: Some(limit),
            window: Some(window.into()),
            cost: None,
            unit: None,
        }
    }

    /// The entry that describes an engine budget.
    pub fn from_spec(spec: &BudgetSpec) -> Self {
        let mut entry = match spec.kind {
            BudgetKind::TokenBucket { capacity, refill } => {
                Self::token_bucket(&spec.name, capacity, refill.to_string())
            }
            BudgetKind::SlidingWindow { limit, window } => {
                Self::sliding_window(&spec.name, limit, format_period(window))
            }
        };
        entry.cost = (spec.cost != 1).then_some(spec.cost);
        entry.unit = (spec.unit != Unit::Requests).then(|| spec.unit.to_string());
        entry
    }
}

impl RetryEntry {
    /// Every field of `policy`, written out.
    pub fn from_policy(policy: &RetryPolicy) -> Self {
        Self {
            max_attempts: Some(policy.max_attempts),
            base: Some(format_period(policy.base)),
            cap: Some(format_period(policy.cap)),
            jitter: Some(policy.jitter.as_str().to_owned()),
            max_retry_after: Some(format_period(policy.max_retry_after)),
            retry_statuses: Some(policy.retry_statuses.clone()),
            retry_connection_errors: Some(policy.retry_connection_errors),
            retry_non_idempotent: Some(policy.retry_non_idempotent),
        }
    }
}
