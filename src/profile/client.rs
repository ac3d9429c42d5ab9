//! A ready [`LimitedClient`] from a profile: its registry, adaptive keys, per-host headers
//! (plain and secret) and per-host retry policies.

use super::error::ProfileError;
use super::model::Profile;
use super::secrets::SecretStore;
use crate::http::{ClientBuilder, EventSink, LimitedClient};

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
        let mut builder = LimitedClient::builder().policy(self.policy()?);
        for (host, compiled) in self.hosts.iter().zip(hosts) {
            let mut headers = compiled.headers;
            headers.extend(secrets.headers_for(&self.name, host)?);
            if !headers.is_empty() {
                builder = builder.host_headers(&compiled.key.host, headers);
            }
            builder = builder.redirects(&compiled.key.host, host.redirects);
        }
        Ok(builder)
    }
}
