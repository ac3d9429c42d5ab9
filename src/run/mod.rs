//! A burst: what to send (`BurstSpec`), when (`schedule`), running it through the limited
//! client (`runner`; capped raw bursts as a load generator in `load`; batched items in `batched`), and what happened
//! (`summary`, `export`).

mod batched;
mod export;
mod load;
mod runner;
mod schedule;
mod spec;
mod stop;
mod summary;
mod turnstile;

pub use batched::{BatchRole, MISSING_ITEM};
pub use export::{CSV_HEADER, write_csv};
pub use runner::{Burst, BurstProgress, Failure, RequestOutcome, RequestResult};
pub use schedule::arrival_offsets;
pub use spec::{ArrivalPattern, BurstSpec, Endpoint, PriorityMix, Scheduled, SpecError, content_type_of};
pub use summary::{Percentiles, Summary, UnitTotals};
