//! ratescope's limiter engine: budgets, one limiter per key with priority lanes, and the
//! registry of keys. A request is paced on the *client's* side so a server's limit is never hit.
//!
//! A [`Limiter`] admits a request when every budget of its [`LimiterConfig`] has room (token
//! buckets for rate with bursts, exact sliding windows for hour and day allowances, in requests
//! or in any [`Unit`] such as tokens or points) and a concurrency slot is free. Waiters queue in
//! [`Priority`] lanes, FIFO within a lane, and a starved lane still moves. A dropped wait spends
//! nothing; a [`Permit`] holds its slot until it drops, and can settle a [`Cost`] estimated
//! before the request against what the answer says it cost. A [`Registry`] keeps one limiter
//! per [`LimitKey`] (`host`, `host:port` or `host/prefix`), created on first use. A
//! [`Snapshot`] says what a limiter holds and, as a [`Blocked`], why a request waits.
//!
//! The engine reads time only through `tokio::time` (timers only: no runtime of its own is
//! started), so a paused tokio clock drives every test exactly; it knows nothing of HTTP, the
//! disk or a GUI. The `ratescope` crate builds its HTTP client, proxy, tower layer and app on
//! it and re-exports it as `ratescope::engine`.
//!
//! # Example
//!
//! A bucket of 2 refilling 2 a second lets two requests through at once, then one every half
//! second (on tokio's paused clock here, so the example takes no real time):
//!
//! ```
//! use std::time::Duration;
//!
//! use ratescope_engine::{Limiter, LimiterConfig, Priority};
//! use tokio::time::Instant;
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let limiter = Limiter::new("api.example.com", LimiterConfig::parse_described("bucket 2 @ 2/1s")?)?;
//! let start = Instant::now();
//! let mut admitted = Vec::new();
//! for _ in 0..4 {
//!     let permit = limiter.acquire(Priority::Normal, 1).await?; // waits as long as the budget says
//!     admitted.push(start.elapsed());
//!     drop(permit); // the request is done
//! }
//! let ms = Duration::from_millis;
//! assert_eq!(admitted, [ms(0), ms(0), ms(500), ms(1000)]);
//! # Ok(())
//! # }
//! ```

#![warn(missing_docs)]

/// The README's example, compiled and run as a doctest so it cannot drift from the code.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctest;

mod budget;
mod check;
mod config;
mod error;
mod fast;
mod limiter;
mod priority;
mod rate;
mod registry;
mod shed;
mod snapshot;
mod unit;

pub use budget::{BudgetKind, BudgetMeter, BudgetSpec, duration_nanos};
pub use check::{AdmissionCheck, CheckReadiness};
pub use config::{DEFAULT_STARVATION_GUARD, LimiterConfig, MAX_CONCURRENCY};
pub use error::{AcquireError, ConfigError, TryAcquireError};
pub use limiter::{Acquire, Limiter, Permit};
pub use priority::Priority;
pub use rate::{Rate, format_amount, format_number, format_period, format_wait, parse_duration};
pub use registry::{LimitKey, Registry};
pub use shed::{Overload, QueueCounts, QueuePlace, Shedding, estimated_wait};
pub use snapshot::{Blocked, BudgetSnapshot, HeadSnapshot, PauseSnapshot, Snapshot};
pub use unit::{Cost, MAX_UNIT_LEN, Unit, UnitError};
