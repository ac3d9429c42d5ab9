//! Time series for the live charts: points held in full and summarised, min/max decimation
//! to screen resolution, counts per second, and a recorder that turns events and limiter snapshots into series and a request log.

mod per_second;
mod recorder;
mod series;

pub use per_second::{OutcomeRates, PerSecond, RetryRates};
pub use recorder::{LogRow, Telemetry};
pub use series::Series;

static PROCESS_START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();

/// When the process started, as near as ratescope knows: the first call of this (the command
/// line calls it first thing; a library user's first call is the app's start), for the app's
/// time-to-first-frame report.
pub fn process_start() -> std::time::Instant {
    *PROCESS_START.get_or_init(std::time::Instant::now)
}
