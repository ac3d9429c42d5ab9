//! `SharedSettings`: where budgets are shared (a Redis URL and a name) and how a client's limits move there.
//!
//! Sharing a client's limits moves every configured budget of every limiter key into the
//! store, under the Redis key `NAME/LIMIT-KEY` (for example `team-a/api.github.com/search`):
//! processes that use the same name and address the API by the same host share the budget.
//! The local limiter of each key keeps its priority lanes and concurrency cap, which stay
//! per process. Budgets learned from a server at run time (adaptive mode) stay local too.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use super::{
    FailPolicy, MAX_LEASE, RedisStore, RedisStoreOptions, SharedCounts, SharedGate, StoreAddress, StoreError,
    StoreHealth,
};
use ratescope_engine::{LimitKey, LimiterConfig, Registry};

/// How long what is left of a lease stays usable before it is dropped.
pub const LEASE_HOLD: Duration = Duration::from_secs(1);

/// The prefix of every Redis key ratescope writes for shared budgets.
pub const SHARED_PREFIX: &str = "ratescope";

/// Where and how a client's budgets are shared.
#[derive(Clone, PartialEq)]
pub struct SharedSettings {
    /// `redis://[user:password@]host[:port][/db]`, `rediss://` (TLS), `redis+cluster://host:port[,host:port]`
    /// or a comma-separated list of cluster nodes ([`StoreAddress::parse`]); never printed.
    pub url: String,
    /// PEM file of the certificate authorities that sign a `rediss://` server's certificate
    /// (instead of the system's); read when the store is opened.
    pub ca_file: Option<PathBuf>,
    /// The name every sharing process uses: one per account or API key.
    pub name: String,
    /// What acts while the store is away (fail-closed by default).
    pub policy: FailPolicy,
    /// Timeouts and reconnection for the store.
    pub options: RedisStoreOptions,
    /// Requests' worth each process takes per round trip (1: none); see [`SharedGate::with_lease`].
    pub lease: u64,
}

impl fmt::Debug for SharedSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedSettings")
            .field("url", &redacted_url(&self.url))
            .field("ca_file", &self.ca_file)
            .field("name", &self.name)
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

impl SharedSettings {
    /// Settings with the default fail policy (fail-closed) and timeouts, checked.
    pub fn new(url: impl Into<String>, name: impl Into<String>) -> Result<Self, StoreError> {
        let settings = Self {
            url: url.into(),
            ca_file: None,
            name: name.into(),
            policy: FailPolicy::default(),
            options: RedisStoreOptions::default(),
            lease: 1,
        };
        settings.validate()?;
        Ok(settings)
    }

    /// The same settings with another fail policy, checked (`local/0` is refused).
    pub fn with_policy(mut self, policy: FailPolicy) -> Result<Self, StoreError> {
        policy.validate()?;
        self.policy = policy;
        Ok(self)
    }

    /// Leases `size` requests' worth per round trip, each lease usable for [`LEASE_HOLD`]: fewer
    /// round trips on a hot key for an overshoot of at most `size − 1` per process.
    pub fn with_lease(mut self, size: u64) -> Result<Self, StoreError> {
        if !(1..=MAX_LEASE).contains(&size) {
            return Err(StoreError::InvalidSettings(format!("a lease is 1 to {MAX_LEASE} requests, not {size}")));
        }
        self.lease = size;
        Ok(self)
    }

    /// Trusts the CAs in this PEM file for a `rediss://` store (checked now, read again when opened).
    pub fn with_ca_file(mut self, path: impl Into<PathBuf>) -> Result<Self, StoreError> {
        let path = path.into();
        StoreAddress::parse(&self.url)?.with_ca_file(&path)?;
        self.ca_file = Some(path);
        Ok(self)
    }

    /// The parsed address, with the CA file read.
    pub fn address(&self) -> Result<StoreAddress, StoreError> {
        self.validate()?;
        let address = StoreAddress::parse(&self.url)?;
        match &self.ca_file {
            Some(path) => address.with_ca_file(path),
            None => Ok(address),
        }
    }

    /// Refuses an empty or unusable name, a URL that is not Redis, and a bad policy.
    pub fn validate(&self) -> Result<(), StoreError> {
        let name = &self.name;
        if name.trim().is_empty() || name.len() > 100 || name.chars().any(|c| c.is_control() || "{}".contains(c)) {
            return Err(StoreError::InvalidSettings(format!(
                "the shared key name {name:?} must be 1 to 100 characters, without braces or control characters"
            )));
        }
        StoreAddress::parse(&self.url).map_err(|err| match err {
            StoreError::InvalidSettings(why) => {
                StoreError::InvalidSettings(format!("'{}': {why}", redacted_url(&self.url)))
            }
            other => other,
        })?;
        self.policy.validate()
    }

    /// The store key of a limiter key: `NAME/host[:port][/prefix]`.
    pub fn key_for(&self, key: &LimitKey) -> String {
        format!("{}/{key}", self.name)
    }

    /// The URL with any password replaced by `***`, for messages.
    pub fn display_url(&self) -> String {
        redacted_url(&self.url)
    }

    /// Connects to the store once and asks for a PING (within the connect timeout), to find a
    /// store that is not there before any work starts rather than wait for it forever.
    pub async fn check_reachable(&self) -> Result<(), StoreError> {
        RedisStore::connect_to(&self.address()?, SHARED_PREFIX, self.options).await.map(drop)
    }

    /// Moves the budgets of every limiter key of `registry` into gates (returned by limiter
    /// key), leaving lanes and concurrency in the registry. Needs a tokio runtime.
    pub fn share(&self, registry: &Registry) -> Result<(Vec<(String, SharedGate)>, SharedHandle), StoreError> {
        self.validate()?;
        let store = RedisStore::connect_lazy_to(&self.address()?, SHARED_PREFIX, self.options)?;
        let health = StoreHealth::new();
        let mut gates = Vec::new();
        let mut keys = Vec::new();
        for (key, config) in registry.entries() {
            if config.budgets.is_empty() {
                continue;
            }
            let shared_key = self.key_for(&key);
            let gate = SharedGate::new(store.clone(), Arc::clone(&health), &shared_key, &config.budgets, self.policy)?
                .with_lease(self.lease, LEASE_HOLD)?;
            registry
                .set(key.clone(), local_part(&config))
                .map_err(|err| StoreError::InvalidSettings(err.to_string()))?;
            gates.push((key.to_string(), gate));
            keys.push(shared_key);
        }
        Ok((gates, SharedHandle { health, keys, policy: self.policy, url: self.display_url() }))
    }
}

/// What stays in the local limiter of a shared key: lanes and the concurrency cap.
pub fn local_part(config: &LimiterConfig) -> LimiterConfig {
    LimiterConfig { budgets: Vec::new(), ..config.clone() }
}

/// The live side of shared budgets: the store's health and the keys in use.
#[derive(Debug, Clone)]
pub struct SharedHandle {
    /// The store's state and counts, live.
    pub health: Arc<StoreHealth>,
    /// The store keys (`NAME/LIMIT-KEY`) of the shared budgets.
    pub keys: Vec<String>,
    /// The fail policy acting while the store is away.
    pub policy: FailPolicy,
    /// The store's URL with any password hidden.
    pub url: String,
}

impl SharedHandle {
    /// The figures for a summary.
    pub fn report(&self) -> SharedReport {
        SharedReport {
            store: self.url.clone(),
            keys: self.keys.clone(),
            policy: self.policy.to_string(),
            state: self.health.state().to_string(),
            counts: self.health.counts(),
        }
    }
}

/// Shared budgets in a burst summary.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SharedReport {
    /// The store's URL, password hidden.
    pub store: String,
    /// The store keys of the shared budgets.
    pub keys: Vec<String>,
    /// The fail policy, as written on the command line.
    pub policy: String,
    /// The store's state at the end (connected, degraded, ...).
    pub state: String,
    /// Decisions, fallbacks, recoveries and settlements counted.
    pub counts: SharedCounts,
}

impl fmt::Display for SharedReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "shared:        {} in {} ({}; on failure {})",
            self.keys.join(", "),
            self.store,
            self.state,
            self.policy
        )?;
        write!(f, "               {}", self.counts)
    }
}

/// `redis://user:secret@host` → `redis://user:***@host`, and a `password` query parameter
/// masked too: the secrets a Redis URL can carry. Text that is not a URL keeps only what
/// follows its last `@` (the host).
fn redacted_url(text: &str) -> String {
    const MASK: &str = "***";
    let Ok(mut url) = url::Url::parse(text) else {
        return text.rsplit_once('@').map_or_else(|| text.to_owned(), |(_, host)| format!("{MASK}@{host}"));
    };
    if url.password().is_some() {
        // Cannot fail: a URL with a password has a host.
        let _ = url.set_password(Some(MASK));
    }
    let secret = |name: &str| name.eq_ignore_ascii_case("password");
    if url.query_pairs().any(|(name, _)| secret(&name)) {
        let pairs: Vec<(String, String)> = url
            .query_pairs()
            .map(|(name, value)| {
                let value = if secret(&name) { MASK.to_owned() } else { value.into_owned() };
                (name.into_owned(), value)
            })
            .collect();
        url.query_pairs_mut().clear().extend_pairs(pairs);
    }
    url.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_never_show() {
        assert_eq!(redacted_url("redis://:hunter2@db:6379/0"), "redis://:***@db:6379/0");
        assert_eq!(redacted_url("redis://app:hunter2@db"), "redis://app:***@db");
        assert_eq!(redacted_url("redis://db:6379"), "redis://db:6379");
        assert_eq!(
            redacted_url("rediss://db/1?password=hunter2&protocol=resp3"),
            "rediss://db/1?password=***&protocol=resp3"
        );
        assert_eq!(redacted_url("not a url:hunter2@db"), "***@db");
        let settings = SharedSettings::new("redis://:hunter2@db", "team").unwrap();
        assert!(!format!("{settings:?}").contains("hunter2"));
    }

    #[test]
    fn bad_names_and_urls_are_refused() {
        assert!(SharedSettings::new("redis://127.0.0.1", "").is_err());
        assert!(SharedSettings::new("redis://127.0.0.1", "a{b}").is_err());
        assert!(SharedSettings::new("http://127.0.0.1", "team").is_err());
        let err = SharedSettings::new("http://:pw@x", "team").unwrap_err().to_string();
        assert!(!err.contains("pw@"), "{err}");
        let settings = SharedSettings::new("redis://127.0.0.1", "team").unwrap();
        let key: LimitKey = "api.example.com/search".parse().unwrap();
        assert_eq!(settings.key_for(&key), "team/api.example.com/search");
        assert!(settings.clone().with_lease(0).is_err());
        assert!(settings.clone().with_lease(crate::MAX_LEASE + 1).is_err());
        assert_eq!(settings.with_lease(10).unwrap().lease, 10);
        let cluster = SharedSettings::new("redis+cluster://a:7000,b:7001", "team").unwrap();
        assert!(cluster.address().unwrap().is_cluster());
    }
}
