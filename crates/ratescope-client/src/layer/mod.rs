//! The limiter as a `tower::Layer` (feature `tower`): [`RateLimitLayer`] wraps any
//! `Service<http::Request<B>>` client (hyper-util's legacy client, a tonic channel, another
//! layer) in the same per-key limits, priorities, costs, header reading and events as
//! [`LimitedClient`](crate::http::LimitedClient).
//!
//! Each call is one attempt, as named steps (`call`): the key's limiter from the request's
//! URI (host, port, path prefix; no limiter, no waiting), admission in the call future (never in
//! `poll_ready`, which only asks the inner service, so a waiting request holds no slot and a
//! dropped future leaves the queue), optional load shedding, the inner call, then the answer's
//! rate-limit headers read by the project's dialect parser: a 429/503 pauses the whole key for
//! its `Retry-After`, and adaptive keys learn from the headers. The response's body
//! ([`LimitedBody`]) carries the permit: the concurrency slot comes back when the body has been
//! read to its end, failed, or been dropped (a panicking caller included).
//!
//! Retries are a separate layer, outside this one so every attempt is admitted again:
//! `tower::retry::RetryLayer::new(RetryOnThrottle::default())` retries 429/503 after what
//! `Retry-After` says (else the backoff of a [`RetryPolicy`](crate::http::RetryPolicy)), for
//! requests whose body can be copied ([`ReplayBody`]).
//!
//! - `builder`: [`RateLimitLayer`] and [`RateLimitLayerBuilder`] (from a registry or a profile);
//! - `service`: [`RateLimitService`], the `Service` impl;
//! - `call`: one call's steps (limiter, admission, answer);
//! - `body`: [`LimitedBody`];
//! - `retry`: [`RetryOnThrottle`], [`ReplayBody`];
//! - `error`: [`RateLimitError`].

mod body;
mod builder;
mod call;
mod error;
mod retry;
mod service;

pub use body::LimitedBody;
pub use builder::{RateLimitLayer, RateLimitLayerBuilder};
pub use error::RateLimitError;
pub use retry::{ReplayBody, RetryOnThrottle};
pub use service::{RateLimitService, ResponseFuture};
