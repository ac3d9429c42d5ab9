//! The limiter engine: budgets, one limiter per key with priority lanes, and the registry of keys.
//!
//! The engine reads time only through `tokio::time`, so paused tokio time drives
//! every test, and it knows nothing of HTTP, the disk or the GUI.

mod budget;
mod config;
mod error;
mod fast;
mod gate;
mod limiter;
mod priority;
mod rate;
mod registry;
mod shed;
mod snapshot;
mod unit;

pub use budget::{BudgetKind, BudgetSpec};
pub(crate) use budget::{BudgetState, duration_nanos};
pub use config::{DEFAULT_STARVATION_GUARD, LimiterConfig, MAX_CONCURRENCY};
pub use error::{AcquireError, ConfigError, TryAcquireError};
pub use gate::{AdmissionGate, GateReadiness};
pub use limiter::{Acquire, Limiter, Permit};
pub use priority::Priority;
pub use rate::{Rate, format_amount, format_number, format_period, format_wait, parse_duration};
pub use registry::{LimitKey, Registry};
pub use shed::{Overload, QueueCounts, QueuePlace, Shedding, estimated_wait};
pub use snapshot::{Blocked, BudgetSnapshot, HeadSnapshot, PauseSnapshot, Snapshot};
pub use unit::{Cost, MAX_UNIT_LEN, Unit, UnitError};
