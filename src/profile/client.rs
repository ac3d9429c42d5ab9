//! A ready [`LimitedClient`] from a profile: its registry, adaptive keys, per-host headers
//! (plain and secret) and per-host retry policies.

use std::collections::HashSet;
use std::sync::Arc;

use super::error::{FieldPath, InvalidSetting, ProfileError};
use super::model::Profile;
use super::secrets::SecretStore;
use crate::engine::Registry;
use crate::http::{Adaptive, ClientBuilder, EventSink, LimitedClient};

impl Profile {
    /// A client that paces, retries and authenticates every host as this profile says.
    pub fn client(&self, secrets: &SecretStore, events: EventSink) -> Result<LimitedClient, ProfileError> {
        Ok(self.client_builder(secrets)?.events(events).build()?)
    }

    /// The builder behind [`client`](Self::client), to add a cache, timeouts or a seed first.
    ///
    /// Requests to hosts outside the profile pass through unpaced with the default retry policy
    /// and no profile headers.
    pub fn client_builder(&self, secrets: &SecretStore) -> Result<ClientBuilder, ProfileError> {
        let hosts = self.compile()?;
        let table = hosts
            .iter()
            .flat_map(|host| std::iter::once((host.key.clone(), host.config.clone())).chain(host.paths.clone()));
        let registry = Registry::from_table(table).map_err(|err| {
            ProfileError::invalid(InvalidSetting::new(FieldPath::root().key("hosts"), err.to_string()))
        })?;
        let mut builder = LimitedClient::builder().registry(Arc::new(registry));
        let mut adaptive = HashSet::new();
        for (host, compiled) in self.hosts.iter().zip(hosts) {
            let mut headers = compiled.headers;
            headers.extend(secrets.headers_for(&self.name, host)?);
            if !headers.is_empty() {
                builder = builder.host_headers(&compiled.key.host, headers);
            }
            builder = builder.redirects(&compiled.key.host, host.redirects);
            let keys: Vec<String> = std::iter::once(compiled.key.to_string())
                .chain(compiled.paths.iter().map(|(key, _)| key.to_string()))
                .collect();
            for key in &keys {
                builder = builder.key_retry(key.clone(), compiled.retry.clone());
            }
            if host.adaptive {
                adaptive.extend(keys);
            }
        }
        let adaptive = if adaptive.is_empty() { Adaptive::Off } else { Adaptive::Keys(adaptive) };
        Ok(builder.adaptive(adaptive))
    }
}
