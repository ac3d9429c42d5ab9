//! The simulator: a [`BurstSpec`] run in virtual time against a model of a server.
//!
//! Nothing here re-implements a limiter, a retry loop or a server. A simulation is a real
//! [`Burst`] through a real [`LimitedClient`](crate::http::LimitedClient) (limiter, priority
//! lanes, retry policy, pauses on 429, adaptive limits), whose transport is the demo API's own
//! handler ([`MockService`]) called in the same process instead of over a socket. It runs on a
//! current-thread tokio runtime whose clock is paused: whenever every task waits, the clock
//! jumps to the next timer, so a burst that takes minutes takes milliseconds, and the
//! [`Summary`] is the one a real burst against `ratescope mock` with the same config prints.
//!
//! Determinism: the server's jitter and faults use the config's `seed` (or
//! [`SimOptions::seed`] when it has none), the client's jitter uses [`SimOptions::seed`].
//! A simulation is a pure function of the config, the spec and the options.
//!
//! The burst-spec file format is documented in [`mod@file`]; recorded traffic is replayed
//! through the same machinery by [`mod@replay`].

pub mod file;
pub mod model;
pub mod replay;

use std::sync::Arc;
use std::time::Duration;

use thiserror::Error;
use tokio::time::Instant;

use crate::engine::Snapshot;
use crate::http::{Event, EventSink};
use crate::mock::{Arrival, MockConfig, MockError, MockService};
use crate::run::{Burst, BurstSpec, RequestResult, SpecError, Summary};

pub use file::{DEFAULT_BASE_URL, burst_from_file, burst_from_toml};

/// Events kept from one simulation at most (about a million requests' worth).
const MAX_EVENTS: usize = 8_000_000;

/// How a simulation runs.
#[derive(Debug, Clone, PartialEq)]
pub struct SimOptions {
    /// Seeds the client's jitter, and the server's when its config has no seed.
    pub seed: u64,
    /// Keep every client event and sample the limiters' snapshots (for charts).
    pub record: bool,
    /// With `record`: how often (virtual time) the limiters are sampled.
    pub sample_every: Duration,
}

impl Default for SimOptions {
    fn default() -> Self {
        Self { seed: 0x5eed, record: false, sample_every: Duration::from_millis(50) }
    }
}

/// What a simulated burst did.
#[derive(Debug)]
pub struct Simulation {
    /// The same summary a real burst prints.
    pub summary: Summary,
    /// Every request's result, in burst order.
    pub results: Vec<RequestResult>,
    /// Every request the server model saw (up to the mock's arrival-log capacity).
    pub arrivals: Vec<Arrival>,
    /// With [`SimOptions::record`]: every client event, in order.
    pub events: Vec<Event>,
    /// With [`SimOptions::record`]: the limiters' snapshots, every `sample_every`.
    pub snapshots: Vec<Vec<Snapshot>>,
    /// The virtual instant the burst started (the origin of `events` and `snapshots`).
    pub origin: Instant,
    /// Wall-clock time the simulation took.
    pub real_time: Duration,
}

/// Why a simulation could not run.
#[derive(Debug, Error)]
pub enum SimError {
    /// The server model's config is refused.
    #[error(transparent)]
    Server(#[from] MockError),
    /// The burst spec is refused.
    #[error(transparent)]
    Spec(#[from] SpecError),
    /// The simulator's runtime could not start.
    #[error("the simulator could not start: {0}")]
    Runtime(String),
    /// More requests than one simulation runs.
    #[error(
        "{0} requests is more than the simulator runs ({MAX_SIM_REQUESTS}): it keeps every request's record, about 4 KB each"
    )]
    TooManyRequests(usize),
}

/// The most requests one simulation runs. Every request's record is kept for the summary and
/// the charts: 100,000 requests peaked at 370 MB of memory (BENCHMARKS.md, "Simulator memory"),
/// so this cap keeps a simulation under about a gigabyte.
pub const MAX_SIM_REQUESTS: usize = 250_000;

/// Runs `spec` against a server configured by `server`, in virtual time.
///
/// Blocking: it runs on a thread of its own (any runtime of the caller is left alone), so
/// call it from async code through `spawn_blocking`.
pub fn simulate(server: &MockConfig, spec: BurstSpec, options: &SimOptions) -> Result<Simulation, SimError> {
    spec.validate()?;
    let planned = spec.planned_requests();
    if planned > MAX_SIM_REQUESTS {
        return Err(SimError::TooManyRequests(planned));
    }
    let mut config = server.clone();
    config.server.seed.get_or_insert(options.seed);
    config.validate()?;
    let options = options.clone();
    std::thread::scope(|scope| {
        let worker = scope.spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .start_paused(true)
                .build()
                .map_err(|err| SimError::Runtime(err.to_string()))?;
            runtime.block_on(run(config, spec, options))
        });
        worker.join().unwrap_or_else(|_| Err(SimError::Runtime("the simulation panicked".into())))
    })
}

async fn run(config: MockConfig, spec: BurstSpec, options: SimOptions) -> Result<Simulation, SimError> {
    let started = std::time::Instant::now();
    let service = MockService::new(config)?;
    let (sink, mut receiver) = if options.record {
        let capacity = spec.planned_requests().saturating_mul(16).clamp(1024, MAX_EVENTS);
        let (sink, receiver) = EventSink::channel(capacity);
        (sink, Some(receiver))
    } else {
        (EventSink::none(), None)
    };
    let client = spec
        .client_builder(sink)?
        .transport(Arc::new(service.clone()))
        .seed(options.seed)
        .build()
        .map_err(SpecError::from)?;
    let registry = Arc::clone(client.registry());
    let origin = Instant::now();
    let burst = Burst::start(spec, client)?;
    let (mut events, mut snapshots) = (Vec::new(), Vec::new());
    if options.record {
        let every = options.sample_every.max(Duration::from_millis(1));
        let mut next = origin;
        while !burst.is_finished() {
            snapshots.push(registry.active().iter().map(|limiter| limiter.snapshot()).collect());
            if let Some(receiver) = &mut receiver {
                while let Ok(event) = receiver.try_recv() {
                    events.push(event);
                }
            }
            next += every;
            tokio::time::sleep_until(next).await;
        }
        snapshots.push(registry.active().iter().map(|limiter| limiter.snapshot()).collect());
    }
    let (summary, results) = burst.finish().await;
    if let Some(receiver) = &mut receiver {
        while let Ok(event) = receiver.try_recv() {
            events.push(event);
        }
    }
    Ok(Simulation {
        summary,
        results,
        arrivals: service.arrivals(),
        events,
        snapshots,
        origin,
        real_time: started.elapsed(),
    })
}
