//! Time series for the live charts: bounded ring buffers, min/max decimation to screen
//! resolution, and a recorder that turns events and limiter snapshots into series and a request log.

mod recorder;
mod series;

pub use recorder::{LogRow, Telemetry};
pub use series::{OutcomeRates, Series};
