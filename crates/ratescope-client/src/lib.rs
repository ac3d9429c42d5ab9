//! ratescope's client side of HTTP, for a program that wants its requests paced without the
//! app, the command line or the proxy: [`http::LimitedClient`] sends each request through its
//! key's limiter (and shared budget), reads every common rate-limit header dialect, retries
//! with jitter where `Retry-After` always wins, pauses the key after a 429, and can keep a
//! response cache, coalesce identical GETs, follow the budgets the server publishes and
//! reserve-then-settle costs in tokens or points. The same request's life runs as a
//! reqwest-middleware `Middleware` (feature `middleware`) and, admission and interpretation
//! only, as a `tower::Layer` over any HTTP service (feature `tower`).
//!
//! The limiter is [`engine`] (the `ratescope-engine` crate) and shared budgets are [`store`]
//! (the `ratescope-redis` crate), re-exported so their paths read the same here as in
//! `ratescope`.
//!
//! ```
//! use std::sync::Arc;
//!
//! use ratescope_client::engine::{BudgetSpec, LimitKey, LimiterConfig, Registry};
//! use ratescope_client::http::LimitedClient;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let registry = Registry::new();
//! let rate = BudgetSpec::token_bucket("rate", 5, "5/1s".parse()?)?;
//! registry.set(LimitKey::host("api.example.com")?, LimiterConfig::new().with_budget(rate))?;
//! let client = LimitedClient::builder().registry(Arc::new(registry)).build()?;
//! assert!(client.registry().limiter_for("api.example.com", Some(443), "/").is_some());
//! # Ok(())
//! # }
//! ```

#![warn(missing_docs)]

#[doc(inline)]
pub use ratescope_engine as engine;
#[doc(inline)]
pub use ratescope_redis as store;

pub mod http;
#[cfg(feature = "tower")]
pub mod layer;
pub mod redact;
