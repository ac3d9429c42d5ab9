//! The embedded demo API: a rate-limited HTTP server on loopback, so ratescope works with no internet.
//!
//! - [`config`]: [`MockConfig`] from TOML (`assets/demo.toml` is the built-in demo), validated;
//! - [`api`]: what a route answers: plain JSON, [`llm`] chat completions whose usage is counted
//!   in tokens (OpenAI-style headers), or [`graphql`] queries whose cost is counted in points
//!   (Shopify-style `extensions.cost`);
//! - [`policy`]: the server-side limits as pure code on nanosecond timestamps, sharing the
//!   engine's budget math, so a virtual-time simulator can reuse them;
//! - [`headers`]: the rate-limit headers of each dialect (IETF draft, `X-RateLimit-*`, GitHub);
//! - [`server`]: [`MockServer`], axum on 127.0.0.0/8 or ::1 only, with latency, faults,
//!   cacheable JSON and an arrival log; [`MockService`], the same handler without a socket
//!   (the simulator's server).
//!
//! ```no_run
//! # async fn demo() -> Result<(), ratescope::mock::MockError> {
//! use ratescope::mock::{MockConfig, MockServer};
//!
//! let server = MockServer::start(MockConfig::demo()?, std::net::SocketAddr::from(([127, 0, 0, 1], 0))).await?;
//! println!("demo API on {}", server.url());
//! server.shutdown().await
//! # }
//! ```

pub mod api;
pub mod config;
mod error;
pub mod graphql;
pub mod headers;
pub mod llm;
pub mod policy;
pub mod server;

pub use api::{Api, Work};
pub use config::{CountBy, DEMO_TOML, Faults, Latency, MockConfig, RouteConfig, ServerSettings};
pub use error::{Location, MockError};
pub use graphql::QueryCost;
pub use headers::{Dialect, go_duration, write_headers};
pub use llm::Usage;
pub use policy::{ConcurrencyGuard, Decision, PolicyKind, PolicyReport, PolicySpec, RoutePolicies, UnitCharge};
pub use server::{ARRIVAL_LOG_CAPACITY, Arrival, FaultKind, MockServer, MockService, Outcome, is_loopback};
