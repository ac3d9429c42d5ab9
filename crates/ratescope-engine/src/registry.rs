//! One limiter per key: a host, or a host plus a path prefix (longest prefix wins).
//!
//! Limits come from a table; limiters are created on first use. A request whose
//! host has no entry passes straight through, costing one shard's read lock and a hash lookup.

use std::fmt;
use std::str::FromStr;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

use dashmap::DashMap;
use dashmap::mapref::entry::Entry;
use smol_str::SmolStr;

use super::ConfigError;
use super::config::LimiterConfig;
use super::limiter::Limiter;

/// What a limiter is keyed on: `api.example.com`, `localhost:8787`, or `api.example.com/search`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LimitKey {
    /// Lower-case host, with `:port` when the key is for one port only.
    pub host: String,
    /// A path prefix such as `/search`, matched on whole segments; `None` for the whole host.
    pub path_prefix: Option<String>,
}

impl LimitKey {
    /// The key for a whole host.
    pub fn host(host: &str) -> Result<Self, ConfigError> {
        host.parse()
    }

    /// Whether requests to `path` on this key's host fall under it (the whole host, or its
    /// prefix on a segment boundary).
    #[must_use]
    pub fn covers_path(&self, path: &str) -> bool {
        self.path_prefix.as_deref().is_none_or(|prefix| Self::covers(prefix, path))
    }

    /// Whether `path` lies under this key's prefix (on a segment boundary).
    fn covers(prefix: &str, path: &str) -> bool {
        path.strip_prefix(prefix).is_some_and(|rest| rest.is_empty() || rest.starts_with('/') || prefix.ends_with('/'))
    }
}

impl FromStr for LimitKey {
    type Err = ConfigError;

    /// Accepts `host`, `host:port`, `host/prefix`, with or without an `http(s)://` scheme.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let bad = || ConfigError::BadKey(text.to_owned());
        let trimmed = text.trim();
        let rest = trimmed.strip_prefix("https://").or_else(|| trimmed.strip_prefix("http://")).unwrap_or(trimmed);
        let (host, path) = match rest.find('/') {
            Some(slash) => rest.split_at(slash),
            None => (rest, ""),
        };
        let host_valid = !host.is_empty()
            && host.chars().all(|c| c.is_ascii_alphanumeric() || "-._:[]".contains(c))
            && !host.starts_with(':');
        if !host_valid || path.contains(['?', '#', ' ']) {
            return Err(bad());
        }
        let path = path.trim_end_matches('/');
        Ok(Self { host: host.to_ascii_lowercase(), path_prefix: (!path.is_empty()).then(|| path.to_owned()) })
    }
}

impl fmt::Display for LimitKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.host, self.path_prefix.as_deref().unwrap_or(""))
    }
}

/// One key's limiter, created on first use, and the key and limits it is made from.
#[derive(Debug)]
struct Slot {
    key: LimitKey,
    config: LimiterConfig,
    limiter: OnceLock<Limiter>,
}

impl Slot {
    fn new(key: LimitKey, config: LimiterConfig) -> Self {
        Self { key, config, limiter: OnceLock::new() }
    }

    fn limiter(&self) -> Limiter {
        // The config was validated when it entered the table.
        self.limiter.get_or_init(|| Limiter::from_valid(self.key.to_string(), self.config.clone())).clone()
    }
}

/// Rules of one host: for the whole host and per path prefix, longest prefix first.
#[derive(Debug, Default)]
struct HostRules {
    whole: Option<Slot>,
    prefixes: Vec<(String, Slot)>,
}

impl HostRules {
    fn find(&self, path: &str) -> Option<&Slot> {
        self.prefixes
            .iter()
            .find(|(prefix, _)| LimitKey::covers(prefix, path))
            .map(|(_, slot)| slot)
            .or(self.whole.as_ref())
    }

    fn slot_mut(&mut self, prefix: Option<&str>) -> Option<&mut Slot> {
        match prefix {
            None => self.whole.as_mut(),
            Some(prefix) => self.prefixes.iter_mut().find(|(p, _)| p == prefix).map(|(_, slot)| slot),
        }
    }

    fn is_empty(&self) -> bool {
        self.whole.is_none() && self.prefixes.is_empty()
    }

    fn slots(&self) -> impl Iterator<Item = &Slot> {
        self.whole.iter().chain(self.prefixes.iter().map(|(_, slot)| slot))
    }
}

/// Everything keyed on one host name, as the map holds it: two words, so a lookup reads one
/// small entry. Most hosts have a single rule (the whole host, any port); once its limiter
/// exists, `only` answers every lookup and the rules behind the box are not read.
#[derive(Debug, Default)]
struct HostEntry {
    /// The limiter of every request to this host: set while the host's only rule is for the
    /// whole host on any port and its limiter has been created; rebuilt from `rules` whenever
    /// they change.
    only: Option<Limiter>,
    rules: Box<PortRules>,
}

impl HostEntry {
    fn rules(&self, port: Option<u16>) -> Option<&HostRules> {
        self.rules.rules(port)
    }

    /// The rules of `port` (any port for `None`), created empty if missing. Whoever changes
    /// them calls [`refresh_only`](Self::refresh_only) afterwards.
    fn rules_mut(&mut self, port: Option<u16>) -> &mut HostRules {
        self.rules.rules_mut(port)
    }

    /// Brings `only` in line with the rules (and their limiter, if created).
    fn refresh_only(&mut self) {
        self.only = self.rules.single_whole().and_then(|slot| slot.limiter.get().cloned());
    }

    fn is_empty(&self) -> bool {
        self.rules.any_port.is_empty() && self.rules.ports.is_empty()
    }

    fn slots(&self) -> impl Iterator<Item = &Slot> {
        self.rules.any_port.slots().chain(self.rules.ports.iter().flat_map(|(_, rules)| rules.slots()))
    }
}

/// A host's rules for any port, and those for one port only (`localhost:8787`). Kept apart so a
/// lookup by host and port builds no `host:port` string.
#[derive(Debug, Default)]
struct PortRules {
    any_port: HostRules,
    ports: Vec<(u16, HostRules)>,
}

impl PortRules {
    fn rules(&self, port: Option<u16>) -> Option<&HostRules> {
        let rules = match port {
            None => &self.any_port,
            Some(port) => &self.ports.iter().find(|(p, _)| *p == port)?.1,
        };
        (!rules.is_empty()).then_some(rules)
    }

    fn rules_mut(&mut self, port: Option<u16>) -> &mut HostRules {
        let Some(port) = port else { return &mut self.any_port };
        let index = match self.ports.iter().position(|(p, _)| *p == port) {
            Some(index) => index,
            None => {
                self.ports.push((port, HostRules::default()));
                self.ports.len() - 1
            }
        };
        &mut self.ports[index].1
    }

    /// The slot that answers every lookup of the host, whatever its port and path: the host
    /// has one rule, for the whole host on any port.
    fn single_whole(&self) -> Option<&Slot> {
        (self.ports.is_empty() && self.any_port.prefixes.is_empty()).then_some(self.any_port.whole.as_ref())?
    }
}

/// A key's host as the table stores it: `localhost:8787` is the host `localhost` on port 8787
/// when the port is written as `format!("{port}")` would write it (so exactly the keys a lookup
/// by host and port used to match); anything else is a host name of its own.
fn split_port(host: &str) -> (&str, Option<u16>) {
    if !host.ends_with(|c: char| c.is_ascii_digit()) {
        return (host, None);
    }
    // A plain byte scan: hosts are short, and `rsplit_once` sets up a chunked search for each.
    let Some(colon) = host.bytes().rposition(|byte| byte == b':') else { return (host, None) };
    let (name, digits) = (&host[..colon], &host[colon + 1..]);
    if !name.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && (digits == "0" || !digits.starts_with('0'))
        && let Ok(port) = digits.parse::<u16>()
    {
        return (name, Some(port));
    }
    (host, None)
}

/// The table of limits and the limiters created from it.
///
/// A sharded map keyed on the host name alone: a lookup hashes the borrowed host, takes one
/// shard's read lock and allocates nothing; lookups of hosts in other shards never touch the
/// same lock word. A host name of up to 23 bytes is kept inside the map's entry, so comparing
/// it reads no other memory.
///
/// Hosts with no entry at all (a raw burst's) are answered from one counter, read by every
/// thread without a write: no shard lock is taken.
#[derive(Debug, Default)]
pub struct Registry {
    hosts: DashMap<SmolStr, HostEntry, foldhash::fast::RandomState>,
    /// How many hosts have an entry: raised under the shard's lock as one is made, lowered as
    /// one is taken out, so it is never 0 while an entry exists.
    held: AtomicUsize,
}

impl Registry {
    /// An empty registry: everything passes through.
    pub fn new() -> Self {
        Self::default()
    }

    /// A registry from a table of keys and their limits.
    pub fn from_table(table: impl IntoIterator<Item = (LimitKey, LimiterConfig)>) -> Result<Self, ConfigError> {
        let registry = Self::new();
        for (key, config) in table {
            registry.set(key, config)?;
        }
        Ok(registry)
    }

    /// Adds or changes the limits of `key`. A limiter already in use is reconfigured in
    /// place, so its waiters keep their order and its budgets keep what was spent.
    pub fn set(&self, key: LimitKey, config: LimiterConfig) -> Result<(), ConfigError> {
        config.validate()?;
        let (name, port) = split_port(&key.host);
        let mut entry = match self.hosts.entry(SmolStr::new(name)) {
            Entry::Occupied(held) => held.into_ref(),
            Entry::Vacant(vacant) => {
                self.held.fetch_add(1, Ordering::AcqRel);
                vacant.insert(HostEntry::default())
            }
        };
        let rules = entry.rules_mut(port);
        if let Some(slot) = rules.slot_mut(key.path_prefix.as_deref()) {
            if let Some(limiter) = slot.limiter.get() {
                limiter.reconfigure(config.clone())?;
            }
            slot.config = config;
            return Ok(());
        }
        match key.path_prefix.clone() {
            None => rules.whole = Some(Slot::new(key, config)),
            Some(prefix) => {
                rules.prefixes.push((prefix, Slot::new(key, config)));
                rules.prefixes.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then_with(|| a.0.cmp(&b.0)));
            }
        }
        entry.refresh_only();
        Ok(())
    }

    /// Removes the limits of `key`; requests under it pass through (or fall back to a shorter prefix).
    pub fn remove(&self, key: &LimitKey) -> bool {
        let (name, port) = split_port(&key.host);
        let Some(mut entry) = self.hosts.get_mut(name) else { return false };
        let rules = entry.rules_mut(port);
        let removed = match &key.path_prefix {
            None => rules.whole.take().is_some(),
            Some(prefix) => {
                let before = rules.prefixes.len();
                rules.prefixes.retain(|(p, _)| p != prefix);
                rules.prefixes.len() != before
            }
        };
        entry.rules.ports.retain(|(_, rules)| !rules.is_empty());
        entry.refresh_only();
        let empty = entry.is_empty();
        // The shard's lock is released before the entry is taken out under it again.
        drop(entry);
        if empty && self.hosts.remove_if(name, |_, entry| entry.is_empty()).is_some() {
            self.held.fetch_sub(1, Ordering::AcqRel);
        }
        removed
    }

    /// The limiter for a request to `host` (lower case, as URLs give it), optional `port` and `path`;
    /// `None` when no entry covers it and the request should pass straight through.
    pub fn limiter_for(&self, host: &str, port: Option<u16>, path: &str) -> Option<Limiter> {
        if self.held.load(Ordering::Acquire) == 0 {
            return None;
        }
        let entry = self.hosts.get(host);
        if let Some(only) = entry.as_deref().and_then(|entry| entry.only.clone()) {
            return Some(only);
        }
        // The rules for this port, else those for the host as given (which may name a port itself).
        if let Some(rules) = entry.as_deref().and_then(|entry| port.and_then(|port| entry.rules(Some(port)))) {
            return rules.find(path).map(Slot::limiter);
        }
        match split_port(host) {
            (_, None) => {
                let entry = entry?;
                let limiter = entry.rules(None)?.find(path).map(Slot::limiter)?;
                if entry.rules.single_whole().is_some() {
                    // The host's first request: from now on `only` answers. A write lock, once.
                    drop(entry);
                    if let Some(mut entry) = self.hosts.get_mut(host) {
                        entry.refresh_only();
                    }
                }
                Some(limiter)
            }
            (name, port) => {
                drop(entry);
                self.hosts.get(name)?.rules(port)?.find(path).map(Slot::limiter)
            }
        }
    }

    /// The table: every key and its limits, sorted by key.
    pub fn entries(&self) -> Vec<(LimitKey, LimiterConfig)> {
        let mut entries: Vec<_> = self
            .hosts
            .iter()
            .flat_map(|entry| entry.slots().map(|slot| (slot.key.clone(), slot.config.clone())).collect::<Vec<_>>())
            .collect();
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        entries
    }

    /// The limiters created so far (keys that have seen traffic).
    pub fn active(&self) -> Vec<Limiter> {
        let mut limiters: Vec<Limiter> = self
            .hosts
            .iter()
            .flat_map(|entry| entry.slots().filter_map(|slot| slot.limiter.get().cloned()).collect::<Vec<_>>())
            .collect();
        limiters.sort_by(|a, b| a.key().cmp(b.key()));
        limiters
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{BudgetSpec, Rate};

    fn config(capacity: u64) -> LimiterConfig {
        let rate: Rate = "1/1s".parse().unwrap();
        LimiterConfig::new().with_budget(BudgetSpec::token_bucket("rate", capacity, rate).unwrap())
    }

    #[test]
    fn hosts_are_found_whatever_was_added_and_removed_before() {
        let registry = Registry::new();
        assert!(registry.limiter_for("a.example", None, "/").is_none());
        let key = |text: &str| text.parse::<LimitKey>().unwrap();
        registry.set(key("a.example"), config(1)).unwrap();
        registry.set(key("a.example/search"), config(2)).unwrap();
        registry.set(key("b.example:8080"), config(3)).unwrap();
        // Two keys on one host, one on another: removing one of a host's keys keeps the host.
        assert!(registry.remove(&key("a.example/search")));
        assert!(registry.limiter_for("a.example", None, "/search/x").is_some());
        assert!(registry.remove(&key("a.example")));
        assert!(registry.limiter_for("a.example", None, "/").is_none());
        assert!(registry.limiter_for("b.example", Some(8080), "/").is_some(), "the other host is still found");
        assert!(!registry.remove(&key("a.example")), "nothing left to remove");
        assert!(registry.remove(&key("b.example:8080")));
        assert!(registry.limiter_for("b.example", Some(8080), "/").is_none());
        registry.set(key("a.example"), config(1)).unwrap();
        assert!(registry.limiter_for("a.example", None, "/").is_some(), "found again after the registry emptied");
    }

    #[test]
    fn keys_parse_and_normalise() {
        let key: LimitKey = "https://API.Example.com/search/".parse().unwrap();
        assert_eq!(key.host, "api.example.com");
        assert_eq!(key.path_prefix.as_deref(), Some("/search"));
        assert_eq!(key.to_string(), "api.example.com/search");
        assert_eq!("localhost:8787".parse::<LimitKey>().unwrap().host, "localhost:8787");
        for bad in ["", "/only/path", "a b", "host/p?q", ":80"] {
            assert!(bad.parse::<LimitKey>().is_err(), "{bad:?} should be refused");
        }
    }

    #[test]
    fn longest_prefix_wins_on_segment_boundaries() {
        let registry = Registry::from_table([
            ("api.x.com".parse().unwrap(), config(1)),
            ("api.x.com/search".parse().unwrap(), config(2)),
            ("api.x.com/search/deep".parse().unwrap(), config(3)),
        ])
        .unwrap();
        let key = |path| registry.limiter_for("api.x.com", None, path).map(|l| l.key().to_owned());
        assert_eq!(key("/search/deep/x").as_deref(), Some("api.x.com/search/deep"));
        assert_eq!(key("/search?q=1").as_deref(), Some("api.x.com"), "query strings are not part of the path");
        assert_eq!(key("/search/q").as_deref(), Some("api.x.com/search"));
        assert_eq!(key("/searchy").as_deref(), Some("api.x.com"));
        assert_eq!(key("/").as_deref(), Some("api.x.com"));
        assert!(registry.limiter_for("other.com", None, "/search").is_none());
    }

    #[test]
    fn limiters_are_created_once_and_never_shared_between_keys() {
        let registry =
            Registry::from_table([("a.com".parse().unwrap(), config(1)), ("b.com".parse().unwrap(), config(1))])
                .unwrap();
        assert!(registry.active().is_empty(), "nothing is created before first use");
        let a = registry.limiter_for("a.com", None, "/").unwrap();
        let b = registry.limiter_for("b.com", None, "/").unwrap();
        let _held = a.try_acquire(1).unwrap();
        assert!(a.try_acquire(1).is_err(), "a.com's single token is spent");
        assert!(b.try_acquire(1).is_ok(), "b.com has its own budget");
        assert!(registry.limiter_for("a.com", None, "/x").unwrap().try_acquire(1).is_err(), "same limiter on reuse");
        assert_eq!(registry.active().len(), 2);
    }

    #[test]
    fn port_specific_keys_take_precedence() {
        let registry = Registry::from_table([
            ("localhost".parse().unwrap(), config(1)),
            ("localhost:8787".parse().unwrap(), config(2)),
        ])
        .unwrap();
        assert_eq!(registry.limiter_for("localhost", Some(8787), "/").unwrap().key(), "localhost:8787");
        assert_eq!(registry.limiter_for("localhost", Some(9000), "/").unwrap().key(), "localhost");
    }

    #[test]
    fn ports_match_as_the_host_port_string_would() {
        let registry = Registry::from_table([
            ("[::1]".parse().unwrap(), config(1)),
            ("[::1]:8080".parse().unwrap(), config(1)),
            ("odd:08080".parse().unwrap(), config(1)),
            ("zero:0".parse().unwrap(), config(1)),
            ("localhost:8787/api".parse().unwrap(), config(1)),
            ("localhost".parse().unwrap(), config(1)),
        ])
        .unwrap();
        let key = |host, port, path| registry.limiter_for(host, port, path).map(|l| l.key().to_owned());
        assert_eq!(key("[::1]", Some(8080), "/").as_deref(), Some("[::1]:8080"));
        assert_eq!(key("[::1]", Some(443), "/").as_deref(), Some("[::1]"));
        assert_eq!(key("odd", Some(8080), "/"), None, "a port written with a leading zero is a name of its own");
        assert_eq!(key("odd:08080", Some(443), "/").as_deref(), Some("odd:08080"));
        assert_eq!(key("zero", Some(0), "/").as_deref(), Some("zero:0"));
        // A host that names its port itself finds the port's rules, as `hosts.get(host)` did.
        assert_eq!(key("localhost:8787", None, "/api/x").as_deref(), Some("localhost:8787/api"));
        assert_eq!(key("localhost:8787", Some(1), "/api").as_deref(), Some("localhost:8787/api"));
        // A port's rules that cover nothing do not fall back to the host's.
        assert_eq!(key("localhost", Some(8787), "/other"), None);
        assert_eq!(key("localhost", Some(9000), "/other").as_deref(), Some("localhost"));
        assert!(registry.remove(&"[::1]:8080".parse().unwrap()));
        assert!(!registry.remove(&"[::1]:8080".parse().unwrap()), "removed once");
        assert_eq!(key("[::1]", Some(8080), "/").as_deref(), Some("[::1]"), "the host's rules remain");
        assert_eq!(registry.entries().len(), 5);
    }

    #[test]
    fn a_hosts_lone_rule_answers_every_lookup_until_its_rules_change() {
        let registry = Registry::from_table([("a.com".parse().unwrap(), config(1))]).unwrap();
        let whole = registry.limiter_for("a.com", Some(443), "/x").unwrap();
        assert!(
            registry.hosts.get("a.com").unwrap().only.is_some(),
            "the first lookup made the lone rule's limiter the answer"
        );
        let _spent = whole.try_acquire(1).unwrap();
        assert!(
            registry.limiter_for("a.com", Some(8080), "/y").unwrap().try_acquire(1).is_err(),
            "the same limiter on any port and path"
        );
        // A prefix, then a port of its own: lookups see both at once.
        registry.set("a.com/search".parse().unwrap(), config(2)).unwrap();
        assert_eq!(registry.limiter_for("a.com", Some(443), "/search/q").unwrap().key(), "a.com/search");
        assert_eq!(registry.limiter_for("a.com", Some(443), "/x").unwrap().key(), "a.com");
        assert!(registry.remove(&"a.com/search".parse().unwrap()));
        registry.set("a.com:8080".parse().unwrap(), config(2)).unwrap();
        assert_eq!(registry.limiter_for("a.com", Some(8080), "/x").unwrap().key(), "a.com:8080");
        assert_eq!(registry.limiter_for("a.com", Some(443), "/x").unwrap().key(), "a.com");
        assert!(registry.remove(&"a.com:8080".parse().unwrap()));
        // Alone again: the next lookup finds the same limiter, with what it spent.
        assert!(registry.limiter_for("a.com", Some(8080), "/x").unwrap().try_acquire(1).is_err());
        assert!(registry.hosts.get("a.com").unwrap().only.is_some());
        assert!(registry.remove(&"a.com".parse().unwrap()));
        assert!(registry.limiter_for("a.com", Some(443), "/x").is_none(), "a removed rule answers nothing");
        assert!(registry.hosts.get("a.com").is_none());
    }

    #[test]
    fn host_names_too_long_to_keep_inline_are_found_alike() {
        let long = "generativelanguage.googleapis.com";
        assert!(long.len() > 23, "longer than a name kept inside the entry");
        let registry = Registry::from_table([
            (long.parse().unwrap(), config(1)),
            (format!("{long}:8443/v1").parse().unwrap(), config(2)),
            ("short.io".parse().unwrap(), config(3)),
        ])
        .unwrap();
        assert_eq!(registry.limiter_for(long, Some(443), "/v1").unwrap().key(), long);
        assert_eq!(registry.limiter_for(long, Some(8443), "/v1/models").unwrap().key(), format!("{long}:8443/v1"));
        assert_eq!(registry.limiter_for("short.io", None, "/").unwrap().key(), "short.io");
        assert!(registry.limiter_for("generativelanguage.googleapis.co", Some(443), "/").is_none());
        assert_eq!(registry.entries().len(), 3);
    }

    #[test]
    fn set_reconfigures_live_limiters_and_remove_passes_through() {
        let registry = Registry::from_table([("a.com".parse().unwrap(), config(1))]).unwrap();
        let limiter = registry.limiter_for("a.com", None, "/").unwrap();
        let _spent = limiter.try_acquire(1).unwrap();
        registry.set("a.com".parse().unwrap(), config(5)).unwrap();
        assert_eq!(limiter.config(), config(5), "the live limiter took the new settings");
        let snapshot = limiter.snapshot();
        assert_eq!(snapshot.budgets[0].capacity, 5, "the live limiter took the new capacity");
        assert!(snapshot.budgets[0].available < 0.5, "raising capacity grants no burst: what was left carries over");
        assert!(registry.set("a.com".parse().unwrap(), LimiterConfig::new().with_concurrency(0)).is_err());
        assert!(registry.remove(&"a.com".parse().unwrap()));
        assert!(registry.limiter_for("a.com", None, "/").is_none());
    }
}
