//! What can go wrong setting up or running the proxy, as sentences a user can act on.

use std::net::SocketAddr;

use thiserror::Error;

#[derive(Debug, Error)]
pub enum ProxyError {
    #[error("route '{route}' is not PREFIX=UPSTREAM, e.g. github=https://api.github.com")]
    RouteSyntax { route: String },
    #[error("route '{prefix}': {problem}")]
    BadRoute { prefix: String, problem: String },
    #[error("no routes: give at least one --route PREFIX=UPSTREAM")]
    NoRoutes,
    #[error("two routes use the prefix '{0}'")]
    DuplicatePrefix(String),
    #[error(
        "{0} is not a loopback address: anyone who can reach it could spend your API key; \
         pass --allow-remote to listen there anyway"
    )]
    NotLoopback(SocketAddr),
    #[error("{setting} {problem}")]
    BadSetting { setting: &'static str, problem: String },
    #[error("cannot listen on {addr}: {source}")]
    Bind { addr: SocketAddr, source: std::io::Error },
    #[error("cannot build the upstream HTTP client: {0}")]
    Client(String),
    #[error("profile '{profile}' has no host for route {prefix} ({key}); its hosts: {hosts}")]
    NotInProfile { prefix: String, key: String, profile: String, hosts: String },
    #[error(transparent)]
    Profile(#[from] crate::profile::ProfileError),
    #[error("the proxy stopped with an error: {0}")]
    Serve(std::io::Error),
}
