//! ratescope: a client-side limiter engine and tools for exploring HTTP API rate limits.
//!
//! A request is paced on *our* side so the server's limit is never hit: token buckets for
//! rate, exact sliding windows for hour and day budgets, budgets of tokens or points settled
//! from each answer, a concurrency cap, priority lanes, and one limiter per host or host and
//! path prefix. Every item says what it promises; `ARCHITECTURE.md` says how.
//!
//! # Layers
//!
//! Each layer uses only the ones below it (a test holds the arrows).
//!
//! **[`engine`]** is the limiter itself, with no HTTP, disk or GUI: a [`Limiter`] admits a
//! request when every budget of its [`LimiterConfig`] has room and a concurrency slot is
//! free, in [`Priority`] lanes (FIFO within a lane, a starved lane still moves); a dropped
//! wait spends nothing, and a [`engine::Permit`] holds the slot until it drops. A
//! [`Registry`] keeps one limiter per [`engine::LimitKey`] (`host`, `host:port` or
//! `host/prefix`), created on first use; hosts it does not name pass straight through.
//!
//! **[`store`]** shares budgets between processes through Redis: one atomic script per
//! decision, the wait Redis computed slept exactly, and a [`store::FailPolicy`] acting while
//! Redis is away (wait, send, or a local share of the budget).
//!
//! **[`http`]** is the client side of HTTP: [`LimitedClient`] sends each request through its
//! key's limiter (and shared budget), reads every common rate-limit header dialect into one
//! [`http::RateLimitInfo`], retries with jitter where `Retry-After` always wins, pauses the key
//! after a 429, and can keep a response cache, coalesce identical GETs, follow the budgets the
//! server publishes (adaptive mode) and reserve-then-settle costs in tokens or points. Every
//! step can be watched as [`http::Event`]s. [`mock`] is the embedded demo API those clients
//! are tried against (loopback only), and [`telemetry`] keeps the series the app charts.
//!
//! **[`profile`]** turns a TOML [`Profile`] (hosts, budgets, path overrides, retry policy,
//! headers, endpoints, a `[shared]` table) into a registry, a retry policy or a ready client;
//! secret header values live apart in a [`SecretStore`], never in the profile.
//!
//! **[`run`]**, **[`probe`]**, **[`proxy`]** and **[`sim`]** are what the tools do with a
//! client: fire a burst and summarise it; discover a server's limits with few requests;
//! stand in front of an API as a rate-limiting proxy holding its key; and run a burst in
//! virtual time against a model of the server (minutes of traffic in milliseconds).
//!
//! **[`cli`]** and **`gui`** (feature `gui`) are the command line and the desktop app; they
//! add nothing a library user needs. [`files`] writes user files whole or not at all.
//!
//! # Using the library
//!
//! Without the desktop app (no eframe), in `Cargo.toml`:
//!
//! ```toml
//! [dependencies]
//! ratescope = { git = "https://example.com/ratescope.git", default-features = false }
//! # options: features = ["middleware"] (reqwest-middleware), ["tower"] (a tower layer)
//! ```
//!
//! - **The limiter alone**: a [`Limiter`] (or a [`Registry`] of them) around any client;
//!   `acquire` waits as long as the budgets say and returns the permit.
//! - **[`LimitedClient`]**: reqwest behind a registry's limiters, with retries, headers,
//!   cache and events; [`LimitedClient::send`] takes a [`RequestSpec`] (method, headers,
//!   body, lane, cost rules).
//! - **Inside an existing reqwest-middleware chain**: `http::RateLimitMiddleware` (feature
//!   `middleware`, on by default) runs a [`LimitedClient`]'s steps with the rest of the chain
//!   as the wire; a request's lane and cost ride in its extensions.
//! - **Inside a tower stack**: `ratescope::layer::RateLimitLayer` (feature `tower`, on by
//!   default) puts the same limiter in front of any tower `Service` of HTTP requests
//!   (hyper-util's client, tonic-style stacks), waiting in the call future, the slot riding on
//!   the response body; `RetryOnThrottle` retries 429/503 after `Retry-After`.
//! - **Many small calls as one**: `http::batch::Batcher` gathers items up to a size or a wait
//!   and sends them as one request through the limiter (`/items?ids=1,2,3`).
//! - **From a profile**: [`Profile::client`] or [`Profile::client_builder`] make a ready
//!   client from a profile saved by the app or written by hand.
//! - **Budgets shared by several processes**: [`http::ClientBuilder::share_budgets`] with
//!   [`store::SharedSettings`] (a Redis URL and a name every process uses).
//!
//! The examples in `examples/` run each of these against the demo API
//! (`cargo run --example limiter`, `profile_client`, `middleware_chain`, `tower_layer`,
//! `shared_redis`, `batching`).
//!
//! ## The limiter alone
//!
//! A bucket of 2 refilling 2 a second lets two requests through at once, then one every
//! half second; here on tokio's paused clock, so the doctest takes no real time:
//!
//! ```
//! use std::time::Duration;
//!
//! use ratescope::{Limiter, LimiterConfig, Priority};
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
//! let ms = |ms| Duration::from_millis(ms);
//! assert_eq!(admitted, [ms(0), ms(0), ms(500), ms(1000)]);
//! # Ok(())
//! # }
//! ```
//!
//! ## A limited client against the demo API
//!
//! The demo API's `/items` allows 5 at once and 5 a second; a client with the same bucket
//! sends 10 requests at once and none is refused (paused clock again: the client is built
//! without timers of its own):
//!
//! ```
//! use std::net::SocketAddr;
//! use std::sync::Arc;
//! use std::time::Duration;
//!
//! use ratescope::engine::LimitKey;
//! use ratescope::mock::{MockConfig, MockServer, Outcome};
//! use ratescope::{LimitedClient, LimiterConfig, Registry};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> anyhow::Result<()> {
//! let demo = MockServer::start(MockConfig::demo()?, SocketAddr::from(([127, 0, 0, 1], 0))).await?;
//! let key: LimitKey = demo.addr().to_string().parse()?; // 127.0.0.1:PORT
//! let registry = Registry::from_table([(key, LimiterConfig::parse_described("bucket 5 @ 5/1s")?)])?;
//! let client = LimitedClient::builder().registry(Arc::new(registry)).without_timers().build()?;
//!
//! let start = tokio::time::Instant::now();
//! let url = demo.url().join("items")?;
//! let sends = (0..10).map(|_| client.get(url.clone()));
//! for response in futures_util::future::join_all(sends).await {
//!     let response = response?;
//!     assert_eq!((response.status.as_u16(), response.attempts), (200, 1));
//! }
//! // The last five waited for the bucket: one every 200 ms.
//! assert!(start.elapsed() >= Duration::from_secs(1));
//! let refused = demo.arrivals().iter().filter(|arrival| matches!(arrival.outcome, Outcome::Limited(_))).count();
//! assert_eq!(refused, 0);
//! demo.shutdown().await?;
//! # Ok(())
//! # }
//! ```
//!
//! ## A profile
//!
//! A profile written by hand (or saved by the app) gives the registry, the retry policy and
//! the client; a bad setting is an error naming its line, column, host and field:
//!
//! ```
//! use ratescope::{Profile, SecretStore};
//!
//! # fn main() -> anyhow::Result<()> {
//! let profile = Profile::from_toml(
//!     r#"
//! name = "team"
//!
//! [[hosts]]
//! name = "api"
//! base_url = "https://api.example.com"
//! concurrency = 4
//! budgets = [
//!     { name = "rate", kind = "token_bucket", capacity = 10, rate = "10/1s" },
//!     { name = "hour", kind = "sliding_window", limit = 5000, window = "1h" },
//! ]
//!
//! [[hosts.paths]]
//! prefix = "/search"
//! budgets = [{ name = "search", kind = "sliding_window", limit = 30, window = "1m" }]
//! "#,
//! )?;
//! let registry = profile.registry()?;
//! let search = registry.limiter_for("api.example.com", None, "/search/code").expect("a limit for /search");
//! assert_eq!(search.snapshot().budgets[0].name, "search");
//! // The same profile as a ready client (secret headers would come from the store).
//! let _client = profile.client_builder(&SecretStore::in_memory())?.build()?;
//!
//! let broken = "name = 'team'\n[[hosts]]\nname = 'api'\nbase_url = 'https://api.example.com'\n\
//!               budgets = [{ name = 'rate', kind = 'token_bucket', capacity = 10, rate = '0/1s' }]\n";
//! let message = Profile::from_toml(broken).unwrap_err().to_string();
//! assert!(message.contains("line 5") && message.contains("a rate of zero"), "{message}");
//! # Ok(())
//! # }
//! ```
//!
//! ## In a reqwest-middleware chain, and shared through Redis
//!
//! These compile here but need the network or a Redis server to run:
//!
//! ```no_run
//! # #[cfg(feature = "middleware")]
//! # async fn chain() -> anyhow::Result<()> {
//! use ratescope::http::RateLimitMiddleware;
//! use ratescope::{Profile, SecretStore};
//!
//! let profile = Profile::from_file("team.toml".as_ref())?;
//! let limited = profile.client_builder(&SecretStore::open_default()?)?.build()?;
//! let http = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
//!     .with(RateLimitMiddleware::new(limited))
//!     .build();
//! let response = http.get("https://api.example.com/v1/items").send().await?; // paced, retried
//! println!("{}", response.status());
//! # Ok(())
//! # }
//! ```
//!
//! ```no_run
//! use std::sync::Arc;
//!
//! use ratescope::engine::LimitKey;
//! use ratescope::store::{FailPolicy, SharedSettings};
//! use ratescope::{LimitedClient, LimiterConfig, Registry};
//!
//! # async fn shared() -> anyhow::Result<()> {
//! // Every process using the name "team-a" shares one budget of 100 a minute for the host.
//! let settings = SharedSettings::new("redis://127.0.0.1:6379", "team-a")?.with_policy(FailPolicy::Closed)?;
//! let key: LimitKey = "api.example.com".parse()?;
//! let registry = Registry::from_table([(key, LimiterConfig::parse_described("window 100/1m")?)])?;
//! let (builder, handle) = LimitedClient::builder().registry(Arc::new(registry)).share_budgets(&settings)?;
//! let client = builder.build()?;
//! client.get("https://api.example.com/v1/items".parse()?).await?;
//! println!("store: {}", handle.health.state());
//! # Ok(())
//! # }
//! ```

#![warn(missing_docs)]

pub mod allocator;
pub mod cli;
/// The limiter itself: the `ratescope-engine` crate (no HTTP, disk or GUI), re-exported so
/// `ratescope::engine::…` names the same items a user of that crate alone sees.
#[doc(inline)]
pub use ratescope_engine as engine;
pub mod files;
#[cfg(feature = "gui")]
pub mod gui;
#[doc(inline)]
pub use ratescope_client::http;
#[cfg(feature = "tower")]
#[doc(inline)]
pub use ratescope_client::layer;
pub mod mock;
pub mod probe;
pub mod profile;
pub mod proxy;
#[doc(inline)]
pub use ratescope_client::redact;
pub mod run;
pub mod sim;
/// Budgets shared across processes through Redis: the `ratescope-redis` crate, re-exported so
/// `ratescope::store::…` names the same items a user of that crate alone sees.
#[doc(inline)]
pub use ratescope_redis as store;
pub mod telemetry;
pub mod tune;

pub use engine::{Limiter, LimiterConfig, Priority, Registry};
pub use http::{LimitedClient, RequestSpec};
pub use profile::{Profile, SecretStore};
