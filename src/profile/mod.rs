//! Profiles: named sets of hosts and the limits, retry policy and headers that work for them,
//! stored as TOML files, with secret header values kept apart.
//!
//! # The format
//!
//! ```toml
//! name = "demo"                         # the file is <slug>.toml: "demo API" -> demo-api.toml
//!
//! [shared]                             # optional: share the budgets through Redis
//! redis = "${REDIS_URL}"                # redis://host:port; a password only via ${ENV}
//! key = "team-a"                        # every sharing process uses the same key
//! on_failure = "local/3"                # fail-closed (default) | fail-open | local/N
//!
//! [[hosts]]                             # one table per host
//! name = "demo API"                     # unique in the profile; secrets are filed under it
//! base_url = "http://127.0.0.1:8787"    # http(s); its host[:port] is the limiter key
//! concurrency = 4                       # most requests in flight (absent: no cap)
//! adaptive = true                       # follow the budgets the server publishes (default false)
//! redirects = "same-origin"             # same-origin (default) | any-origin | none; another
//!                                       # origin never gets this host's headers or secrets
//! budgets = [
//!     # a token bucket: `capacity` at once, refilled at `rate` (AMOUNT/DURATION)
//!     { name = "rate", kind = "token_bucket", capacity = 5, rate = "5/1s" },
//!     # an exact sliding window: at most `limit` in any `window`
//!     { name = "minute", kind = "sliding_window", limit = 100, window = "1m" },
//! ]                                     # each budget may also set `cost` (default 1) and
//!                                       # `unit`: requests (default), tokens, points, ...
//! headers = { "accept" = "application/json" }   # non-secret headers sent to this host
//! secret_headers = ["x-api-key"]        # names only; values live in the secret store
//!
//! [hosts.retry]                         # every field optional; absent ones take the defaults shown
//! max_attempts = 5                      # attempts in all, 1 = never retry
//! base = "300ms"                        # backoff min(cap, base * 2^(n-1)) ...
//! cap = "20s"
//! jitter = "full"                       # full | equal | decorrelated | none
//! max_retry_after = "5m"                # a longer Retry-After fails at once instead of hanging
//! retry_statuses = [429, 503]
//! retry_connection_errors = false
//! retry_non_idempotent = false          # POST, PATCH, ...
//!
//! [[hosts.paths]]                       # requests under /search use these limits instead of
//! prefix = "/search"                    # the host's (key 127.0.0.1:8787/search); the host's
//! concurrency = 1                       # retry, headers and `adaptive` still apply
//! budgets = [{ name = "search", kind = "sliding_window", limit = 2, window = "1s" }]
//!
//! [[hosts.endpoints]]                   # a request ready to fire: `burst --endpoint "create item"`
//! name = "create item"                  # unique in the host
//! method = "POST"                       # default GET
//! path = "/items?dry_run=1"             # under base_url, may carry a query
//! query = { page = "2" }                # more query parameters (never secrets)
//! headers = { "content-type" = "application/json" }   # over the host's (never secrets)
//! body = '{"name": "widget"}'           # or body_file = "payload.json"; Content-Type guessed
//! weight = 3                            # its share of a burst over several endpoints
//! costs = ["tokens=field:max_tokens+body/4->field:usage.total_tokens"]  # reserve, then settle
//! ```
//!
//! Durations are written like `500ms`, `1s`, `1m`, `1h`, `1d`, or `1m30s`. Unknown fields are
//! refused, so a typo is an error rather than a silently ignored setting. Budget names starting
//! with `server:` are kept for limits learned from servers at run time and are never stored.
//! Headers that look secret (`authorization`, `cookie`, `x-api-key`, `private-token`, ... by the
//! one rule of [`crate::redact::looks_secret`]) are refused in `headers`: they belong in
//! `secret_headers`; so is a query parameter that looks secret and holds a value.
//!
//! Every error names the file, the line and column, the host and the field:
//! `demo.toml: line 9, column 72: host 'demo API': budget 'rate': rate "0/1s": a rate of zero ...`.
//!
//! # Where things live
//!
//! The config directory is `$RATESCOPE_CONFIG_DIR` when set, else the platform's
//! (`~/.config/ratescope` on Linux). Profiles are `profiles/<slug>.toml` inside it, written
//! atomically with the previous version kept as `<slug>.toml.bak`; a save over a file keeps its
//! comments and layout wherever the settings did not change. Secrets are in `secrets.toml`
//! (see [`SecretStore`]), readable by the user only.

pub mod catalog;
mod client;
mod convert;
mod curl;
mod demo;
mod endpoint;
mod error;
pub mod export;
mod keep;
mod model;
mod secrets;
mod shared;
mod store;
mod text;

use std::path::PathBuf;

pub use catalog::{AddedEntry, CatalogEntry, CatalogError, CatalogInfo};
pub(crate) use convert::limits;
pub use curl::{CurlError, CurlImport, Imported, MAX_INLINE_BODY, ReadFile, parse_curl, parse_curl_with};
pub use demo::DEMO_TOML;
pub use endpoint::{MAX_BODY_BYTES, ResolvedEndpoint};
pub use error::{FieldPath, InvalidSetting, Position, ProfileError, Segment};
pub use model::{
    BatchEntry, BudgetEntry, BudgetEntryKind, EndpointEntry, HostProfile, LEARNED_PREFIX, PathOverride, Profile,
    RetryEntry, SharedEntry,
};
pub use secrets::{Filed, SecretStatus, SecretStore};
pub use store::{ProfileStore, ProfileSummary, slug};

/// The environment variable that overrides the config directory (tests and CI set it).
pub const CONFIG_DIR_ENV: &str = "RATESCOPE_CONFIG_DIR";

/// The config directory: `$RATESCOPE_CONFIG_DIR` when set and not empty, else the platform's
/// (`directories::ProjectDirs::from("dev", "ratescope", "ratescope")`).
pub fn config_dir() -> Result<PathBuf, ProfileError> {
    if let Some(dir) = std::env::var_os(CONFIG_DIR_ENV).filter(|dir| !dir.is_empty()) {
        return Ok(PathBuf::from(dir));
    }
    directories::ProjectDirs::from("dev", "ratescope", "ratescope")
        .map(|dirs| dirs.config_dir().to_owned())
        .ok_or(ProfileError::NoConfigDir)
}
