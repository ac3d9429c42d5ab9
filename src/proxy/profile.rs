//! A proxy from a profile: each route's upstream takes its host's limits, retry policy and
//! secret headers; the app's Proxy tab also takes its routes (one per host).

use super::config::{ProxyConfig, Route};
use super::error::ProxyError;
use crate::engine::LimitKey;
use crate::http::Adaptive;
use crate::profile::{Profile, ProfileError, SecretStore, slug};

impl Route {
    /// The limiter key of the upstream: `host`, or `host:port` when its URL names a port
    /// (the key a profile's host with that base URL has).
    pub fn key(&self) -> Result<LimitKey, ProxyError> {
        let host = self.upstream.host_str().unwrap_or_default();
        let authority = match self.upstream.port() {
            Some(port) => format!("{host}:{port}"),
            None => host.to_owned(),
        };
        LimitKey::host(&authority)
            .map_err(|err| ProxyError::BadRoute { prefix: self.prefix.clone(), problem: err.to_string() })
    }
}

impl ProxyConfig {
    /// The profile's limits (its registry), per-host retry policies, and each route's secret
    /// headers. A route whose upstream the profile does not know is refused: it would go out
    /// unpaced and without its key.
    pub fn with_profile(mut self, profile: &Profile, secrets: &SecretStore) -> Result<Self, ProxyError> {
        // The profile's limits, retry policies and adaptive keys (`Profile::policy`), over
        // what was set before: the default retry policy, the events, and adaptive mode for
        // every host (`--adaptive`), which a profile's adaptive hosts do not narrow.
        let from_profile = profile.policy()?;
        self.policy.registry = from_profile.registry;
        self.policy.key_retry.extend(from_profile.key_retry);
        self.policy.adaptive = match (std::mem::take(&mut self.policy.adaptive), from_profile.adaptive) {
            (Adaptive::All, _) | (_, Adaptive::All) => Adaptive::All,
            (Adaptive::Keys(mut keys), Adaptive::Keys(more)) => {
                keys.extend(more);
                Adaptive::Keys(keys)
            }
            (Adaptive::Off, other) | (other, Adaptive::Off) => other,
        };
        let compiled = profile.compile().map_err(ProfileError::invalid)?;
        for route in &mut self.routes {
            let key = route.key()?;
            let Some((host, _)) = profile.hosts.iter().zip(&compiled).find(|(_, checked)| checked.key == key) else {
                let hosts: Vec<&str> = profile.hosts.iter().map(|host| host.base_url.as_str()).collect();
                return Err(ProxyError::NotInProfile {
                    prefix: route.prefix.clone(),
                    key: key.to_string(),
                    profile: profile.name.clone(),
                    hosts: hosts.join(", "),
                });
            };
            let mut current: Option<http::HeaderName> = None;
            for (name, value) in secrets.headers_for(&profile.name, host)? {
                current = name.or(current);
                if let Some(name) = &current {
                    route.add_secret(name.clone(), value)?;
                }
            }
        }
        Ok(self)
    }
}

/// One route per host of `profile`: the host's name as the prefix (`demo API` -> `/demo-api`)
/// to its base URL.
pub fn profile_routes(profile: &Profile) -> Result<Vec<Route>, ProxyError> {
    profile
        .hosts
        .iter()
        .map(|host| {
            let prefix = slug(&host.name)
                .map_err(|err| ProxyError::BadRoute { prefix: host.name.clone(), problem: err.to_string() })?;
            Route::new(&prefix, &host.base_url)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_demo_profile_gives_a_paced_route_with_its_secret() {
        let profile = Profile::from_toml(crate::profile::DEMO_TOML).unwrap();
        let routes = profile_routes(&profile).unwrap();
        assert_eq!(routes.iter().map(|r| r.prefix.as_str()).collect::<Vec<_>>(), ["/demo-api"]);
        let mut secrets = SecretStore::in_memory();
        let mut with_secret = profile.clone();
        with_secret.hosts[0].secret_headers = vec!["x-api-key".into()];
        secrets.set("demo", "demo API", "x-api-key", "k-123");
        let config = ProxyConfig::new(routes.clone()).with_profile(&with_secret, &secrets).unwrap();
        assert_eq!(config.routes[0].secrets["x-api-key"], "k-123");
        assert!(config.policy.registry.limiter_for("127.0.0.1", Some(8787), "/items").is_some());
        assert!(config.policy.key_retry.contains_key("127.0.0.1:8787/search"));
        let elsewhere = vec![Route::new("x", "http://example.com").unwrap()];
        let refused = ProxyConfig::new(elsewhere).with_profile(&profile, &secrets).unwrap_err();
        assert!(refused.to_string().contains("has no host for route /x"), "{refused}");
    }

    #[test]
    fn adaptive_mode_for_every_host_stays_on_with_a_profile_and_keeps_the_default_retry() {
        let mut profile = Profile::from_toml(crate::profile::DEMO_TOML).unwrap();
        profile.hosts[0].adaptive = true;
        let routes = profile_routes(&profile).unwrap();
        let mut config = ProxyConfig::new(routes.clone());
        config.policy.adaptive = Adaptive::All;
        config.policy.retry.max_attempts = 7;
        let config = config.with_profile(&profile, &SecretStore::in_memory()).unwrap();
        assert!(matches!(config.policy.adaptive, Adaptive::All), "--adaptive is not narrowed to the profile's hosts");
        assert_eq!(config.policy.retry.max_attempts, 7, "the command line's default retry policy stays");

        let narrowed = ProxyConfig::new(routes).with_profile(&profile, &SecretStore::in_memory()).unwrap();
        assert!(narrowed.policy.adaptive.covers("127.0.0.1:8787"), "the profile's adaptive host follows its server");
        assert!(!narrowed.policy.adaptive.covers("example.com"));
    }
}
