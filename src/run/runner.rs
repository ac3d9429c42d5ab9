//! Runs a `BurstSpec` on the tokio runtime through a `LimitedClient`: launches requests on
//! their arrival schedule, can be cancelled mid-way, and collects one result per request.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use rand::SeedableRng;
use rand::distr::{Distribution, weighted::WeightedIndex};
use rand::rngs::StdRng;
use tokio::sync::{Notify, Semaphore};
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::schedule::arrival_offsets;
use super::spec::{BurstSpec, SpecError};
use super::summary::Summary;
use crate::engine::{Priority, Registry};
use crate::http::{AttemptRecord, ClientError, LimitedClient, RequestSpec};

/// How one request ended.
#[derive(Debug, Clone, PartialEq)]
pub enum RequestOutcome {
    /// A final response below 400.
    Succeeded { status: u16 },
    /// A final response of 400 or more, or no usable response.
    Failed { status: Option<u16>, error: String },
    /// Dropped by cancellation (queued or in flight).
    Cancelled,
}

/// One request of a burst.
#[derive(Debug, Clone)]
pub struct RequestResult {
    pub index: usize,
    pub method: String,
    /// Path only: the query string may hold secrets.
    pub path: String,
    pub priority: Priority,
    pub burst_start: Instant,
    /// When it arrived (was handed to the client).
    pub arrived: Instant,
    /// First queued to final response.
    pub total: Duration,
    pub attempts: Vec<AttemptRecord>,
    pub from_cache: bool,
    pub outcome: RequestOutcome,
}

impl RequestResult {
    /// Time spent waiting in the limiter over all attempts.
    pub fn queue_wait(&self) -> Duration {
        self.attempts.iter().map(|attempt| attempt.queue_wait).sum()
    }

    /// Whether it ended with a response or an error (not cancelled).
    pub fn finished(&self) -> bool {
        !matches!(self.outcome, RequestOutcome::Cancelled)
    }
}

/// Live counters of a running burst.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BurstProgress {
    pub planned: usize,
    pub launched: usize,
    pub done: usize,
    pub failed: usize,
}

#[derive(Debug, Default)]
struct Counters {
    launched: AtomicUsize,
    done: AtomicUsize,
    failed: AtomicUsize,
}

/// A burst in progress.
#[derive(Debug)]
pub struct Burst {
    planned: usize,
    client: LimitedClient,
    counters: Arc<Counters>,
    cancelled: Arc<AtomicBool>,
    cancel: Arc<Notify>,
    driver: tokio::task::JoinHandle<(Vec<RequestResult>, Instant, Instant)>,
    limiter: String,
}

impl Burst {
    /// Starts `spec` through `client` (whose registry holds the limits). Must run inside a tokio runtime.
    pub fn start(spec: BurstSpec, client: LimitedClient) -> Result<Self, SpecError> {
        spec.validate()?;
        let planned = spec.planned_requests();
        let counters = Arc::new(Counters::default());
        let cancelled = Arc::new(AtomicBool::new(false));
        let cancel = Arc::new(Notify::new());
        let limiter = spec.limits.as_ref().map_or_else(|| "none".to_owned(), |limits| limits.describe());
        let driver = tokio::spawn(drive(
            spec,
            client.clone(),
            Arc::clone(&counters),
            Arc::clone(&cancelled),
            Arc::clone(&cancel),
        ));
        Ok(Self { planned, client, counters, cancelled, cancel, driver, limiter })
    }

    /// Builds the client from the spec itself and starts.
    pub fn start_with_own_client(spec: BurstSpec) -> Result<Self, SpecError> {
        let client = spec.client(crate::http::EventSink::none())?;
        Self::start(spec, client)
    }

    /// Counters so far.
    pub fn progress(&self) -> BurstProgress {
        BurstProgress {
            planned: self.planned,
            launched: self.counters.launched.load(Ordering::Relaxed),
            done: self.counters.done.load(Ordering::Relaxed),
            failed: self.counters.failed.load(Ordering::Relaxed),
        }
    }

    /// The limits in force: change them here while the burst runs (`Registry::set`).
    pub fn registry(&self) -> &Arc<Registry> {
        self.client.registry()
    }

    /// The client the burst sends through (change limits with `LimitedClient::set_limits`).
    pub fn client(&self) -> &LimitedClient {
        &self.client
    }

    /// The shared store's health (state and counters), when the burst's budgets are shared.
    pub fn shared_health(&self) -> Option<Arc<crate::store::StoreHealth>> {
        self.client.shared().map(|shared| Arc::clone(&shared.health))
    }

    /// Stops launching; queued requests are dropped from their queues and in-flight ones aborted.
    pub fn cancel(&self) {
        self.cancelled.store(true, Ordering::SeqCst);
        self.cancel.notify_one();
    }

    /// Whether every request has ended.
    pub fn is_finished(&self) -> bool {
        self.driver.is_finished()
    }

    /// Waits for the end and summarises. Every task of the burst has ended when this returns.
    pub async fn finish(self) -> (Summary, Vec<RequestResult>) {
        let (results, start, end) = match self.driver.await {
            Ok(done) => done,
            Err(_) => (Vec::new(), Instant::now(), Instant::now()),
        };
        let mut summary = Summary::from_results(self.planned, &results, end - start, self.limiter);
        summary.shared = self.client.shared().map(|shared| shared.report());
        (summary, results)
    }
}

async fn drive(
    spec: BurstSpec,
    client: LimitedClient,
    counters: Arc<Counters>,
    cancelled: Arc<AtomicBool>,
    cancel: Arc<Notify>,
) -> (Vec<RequestResult>, Instant, Instant) {
    let start = Instant::now();
    let offsets = arrival_offsets(spec.arrival, spec.planned_requests());
    let raw_slots = match (&spec.limits, spec.raw_concurrency) {
        (None, Some(limit)) => Some(Arc::new(Semaphore::new(limit))),
        _ => None,
    };
    let weights: Vec<u32> = spec.endpoints.iter().map(|endpoint| endpoint.weight).collect();
    let chooser = WeightedIndex::new(&weights).ok();
    let mut rng = StdRng::seed_from_u64(0x5eed);
    let mut tasks = JoinSet::new();
    let mut meta: HashMap<tokio::task::Id, (usize, Priority, String, Instant)> = HashMap::new();
    let mut results = Vec::with_capacity(offsets.len());
    let collect = |joined: Result<(tokio::task::Id, RequestResult), tokio::task::JoinError>,
                   meta: &mut HashMap<tokio::task::Id, (usize, Priority, String, Instant)>,
                   results: &mut Vec<RequestResult>| {
        let result = match joined {
            Ok((id, result)) => {
                meta.remove(&id);
                result
            }
            Err(err) => {
                let Some((index, priority, path, arrived)) = meta.remove(&err.id()) else { return };
                RequestResult {
                    index,
                    method: spec.method.to_string(),
                    path,
                    priority,
                    burst_start: start,
                    arrived,
                    total: arrived.elapsed(),
                    attempts: Vec::new(),
                    from_cache: false,
                    outcome: if err.is_cancelled() {
                        RequestOutcome::Cancelled
                    } else {
                        RequestOutcome::Failed { status: None, error: "the request task panicked".to_owned() }
                    },
                }
            }
        };
        counters.done.fetch_add(1, Ordering::Relaxed);
        if matches!(result.outcome, RequestOutcome::Failed { .. }) {
            counters.failed.fetch_add(1, Ordering::Relaxed);
        }
        results.push(result);
    };
    for (index, offset) in offsets.into_iter().enumerate() {
        let due = start + offset;
        tokio::select! {
            biased;
            () = cancel.notified() => break,
            () = tokio::time::sleep_until(due) => {}
        }
        if cancelled.load(Ordering::SeqCst) {
            break;
        }
        // Raw sending with a cap works like a load generator: a request starts when a slot
        // is free, so at most `cap` tasks exist at once (not one parked task per request).
        let slot = match &raw_slots {
            Some(slots) => tokio::select! {
                biased;
                () = cancel.notified() => break,
                slot = Arc::clone(slots).acquire_owned() => slot.ok(),
            },
            None => None,
        };
        while let Some(joined) = tasks.try_join_next_with_id() {
            collect(joined, &mut meta, &mut results);
        }
        let endpoint = chooser.as_ref().map_or(0, |chooser| chooser.sample(&mut rng));
        let Some(endpoint) = spec.endpoints.get(endpoint) else { continue };
        let priority = spec.priorities.lane(index);
        let mut request = RequestSpec::new(spec.method.clone(), endpoint.url.clone()).with_priority(priority);
        request.headers = spec.headers.clone();
        let path = endpoint.url.path().to_owned();
        let (client, method) = (client.clone(), spec.method.to_string());
        let arrived = Instant::now();
        let handle = tasks.spawn({
            let path = path.clone();
            async move {
                let _slot = slot;
                let mut attempts = Vec::new();
                let sent = client.send_recorded(request, &mut attempts).await;
                let (outcome, from_cache) = match sent {
                    Ok(response) if response.status.as_u16() < 400 => {
                        (RequestOutcome::Succeeded { status: response.status.as_u16() }, response.from_cache)
                    }
                    Ok(response) => (
                        RequestOutcome::Failed {
                            status: Some(response.status.as_u16()),
                            error: format!("final status {}", response.status),
                        },
                        response.from_cache,
                    ),
                    Err(err) => (failure(&err), false),
                };
                RequestResult {
                    index,
                    method,
                    path,
                    priority,
                    burst_start: start,
                    arrived,
                    total: arrived.elapsed(),
                    attempts,
                    from_cache,
                    outcome,
                }
            }
        });
        meta.insert(handle.id(), (index, priority, path, arrived));
        counters.launched.fetch_add(1, Ordering::Relaxed);
    }
    loop {
        if cancelled.load(Ordering::SeqCst) {
            tasks.abort_all();
        }
        tokio::select! {
            biased;
            () = cancel.notified(), if !cancelled.load(Ordering::SeqCst) => {}
            joined = tasks.join_next_with_id() => match joined {
                Some(joined) => collect(joined, &mut meta, &mut results),
                None => break,
            },
        }
    }
    let end = Instant::now();
    results.sort_by_key(|result| result.index);
    (results, start, end)
}

fn failure(err: &ClientError) -> RequestOutcome {
    RequestOutcome::Failed { status: err.last_status(), error: err.to_string() }
}
