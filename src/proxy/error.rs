//! What can go wrong setting up or running the proxy, as sentences a user can act on.

use std::net::SocketAddr;

use thiserror::Error;

/// Why a proxy could not be configured, started or kept serving.
#[derive(Debug, Error)]
pub enum ProxyError {
    /// A route not written `PREFIX=UPSTREAM`.
    #[error("route '{route}' is not PREFIX=UPSTREAM, e.g. github=https://api.github.com")]
    RouteSyntax {
        /// The route as written.
        route: String,
    },
    /// A route whose prefix or upstream is refused.
    #[error("route '{prefix}': {problem}")]
    BadRoute {
        /// The route's prefix.
        prefix: String,
        /// What is wrong.
        problem: String,
    },
    /// No route given.
    #[error("no routes: give at least one --route PREFIX=UPSTREAM")]
    NoRoutes,
    /// Two routes share a prefix.
    #[error("two routes use the prefix '{0}'")]
    DuplicatePrefix(String),
    /// A listen address off loopback without `allow_remote`.
    #[error(
        "{0} is not a loopback address: anyone who can reach it could spend your API key; \
         pass --allow-remote to listen there anyway"
    )]
    NotLoopback(SocketAddr),
    /// A setting outside its range.
    #[error("{setting} {problem}")]
    BadSetting {
        /// The setting's flag or name.
        setting: &'static str,
        /// What is wrong.
        problem: String,
    },
    /// The address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// The upstream client could not be built.
    #[error("cannot build the upstream HTTP client: {0}")]
    Client(String),
    /// A route's upstream is not a host of the profile it takes its limits from.
    #[error("profile '{profile}' has no host for route {prefix} ({key}); its hosts: {hosts}")]
    NotInProfile {
        /// The route's prefix.
        prefix: String,
        /// The upstream's limiter key.
        key: String,
        /// The profile.
        profile: String,
        /// The profile's hosts, listed.
        hosts: String,
    },
    /// The profile could not be loaded or used.
    #[error(transparent)]
    Profile(#[from] crate::profile::ProfileError),
    /// Serving stopped on an I/O error.
    #[error("the proxy stopped with an error: {0}")]
    Serve(std::io::Error),
}
