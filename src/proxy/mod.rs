//! The rate-limiting proxy: holds the API key, paces every caller's requests through the
//! engine's limiters, sheds load with honest 429s, and streams bodies both ways.
//!
//! - [`config`]: routes `PREFIX=UPSTREAM`, listen address, shedding, timeouts, validated;
//! - `forward`: one request's path (admission, upstream, retries, cache, 502/504);
//! - `deadlines`: a caller connection's head and upstream deadlines on its one timer;
//! - `hop`: hop-by-hop headers (RFC 9110) and forwarding headers;
//! - [`path`]: a caller's path normalised, and refused when it could leave its route;
//! - `profile`: routes, limits, retries and secrets from a profile;
//! - `shed`: queue lengths, expected waits, the 429 with draft `RateLimit` headers;
//! - [`server`]: [`ProxyServer`], HTTP/1.1 on loopback by default, a deadline for request heads,
//!   graceful drain;
//! - [`metrics`]: what requests ended as, upstream answers, waits and latencies, live gauges;
//! - `admin`: the admin listener (`/metrics`, `/healthz`, `/readyz`).

mod admin;
pub mod config;
mod deadlines;
mod error;
mod forward;
mod hop;
pub mod metrics;
pub mod path;
mod profile;
pub mod server;
mod shed;
mod upstream;

pub use config::{
    DEFAULT_HEAD_TIMEOUT, DEFAULT_LISTEN, DEFAULT_REPLAY_LIMIT, ProxyConfig, Route, Shedding, Unroutable,
};
pub use error::ProxyError;
pub use forward::{Reloaded, Reloader};
pub use profile::profile_routes;
pub use server::{Drained, ProxyServer};
pub use shed::Shed;
