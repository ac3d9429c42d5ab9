//! ratescope: a client-side limiter engine and tools for exploring HTTP API rate limits.
//!
//! The [`engine`] paces requests so a server's limit is never hit: token buckets for
//! rate, exact sliding windows for hour and day budgets, a concurrency cap, priority
//! lanes, and one limiter per host or host and path prefix.

#![warn(missing_docs)]

pub mod cli;
pub mod engine;
pub mod files;
#[cfg(feature = "gui")]
pub mod gui;
pub mod http;
pub mod mock;
pub mod probe;
pub mod profile;
pub mod proxy;
pub mod run;
pub mod sim;
pub mod store;
pub mod telemetry;

pub use engine::{Limiter, LimiterConfig, Priority, Registry};
pub use http::{LimitedClient, RequestSpec};
pub use profile::{Profile, SecretStore};
