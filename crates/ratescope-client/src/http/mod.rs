//! The client side of HTTP: header dialects, retries, the limited client.
pub mod adaptive;
pub mod admission;
pub mod answer;
pub mod attempts;
pub mod batch;
pub mod cache;
pub mod client;
pub mod coalesce;
pub mod cost;
pub mod events;
pub mod extensions;
pub mod header_cap;
pub mod headers;
pub mod http1;
pub mod mirror;
pub mod policy;
pub mod redirect;
pub mod report;
pub mod retry;
pub mod transport;
pub mod unit_mirror;

pub use crate::redact::redact_url;
pub use batch::{BatchError, BatchFormat, BatchPlan, BatchSettings, BatchTemplate, Batcher, IdsQuery};
#[cfg(feature = "middleware")]
pub use client::middleware::RateLimitMiddleware;
pub use client::{
    Adaptive, AttemptRecord, ClientBuilder, ClientError, LimitedClient, LimitedResponse, RequestSpec, Settlement,
    install_tls_provider,
};
pub use cost::{CostRule, RemainingMemory};
pub use events::{Event, EventKind, EventSink};
pub use extensions::{CostRules, RequestCost};
pub use headers::{RateLimitInfo, ServerBudget};
pub use http1::{Http1Pool, Http1Transport, PooledBody, RequestBody, origin_of, origin_request, target_request};
pub use policy::Policy;
pub use redirect::RedirectPolicy;
pub use retry::{Jitter, RetryPolicy};
pub use transport::{Exchanged, Transport, TransportError};
