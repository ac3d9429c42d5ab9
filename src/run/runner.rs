//! Runs a `BurstSpec` on the tokio runtime through a `LimitedClient`: launches requests on
//! their arrival schedule, can be cancelled mid-way, and collects one result per request.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use rand::SeedableRng;
use rand::distr::{Distribution, weighted::WeightedIndex};
use rand::rngs::StdRng;
use tokio::task::JoinSet;

use super::turnstile::Turnstile;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::batched::{self, BatchRole, Item};
use super::schedule::arrival_offsets;
use super::spec::{ArrivalPattern, BurstSpec, SpecError};
use super::stop::Cancellation;
use super::summary::Summary;
use crate::engine::{Priority, Registry};
use crate::http::{AttemptRecord, BatchError, Batcher, ClientError, LimitedClient, RequestSpec};

/// How one request ended.
#[derive(Debug, Clone, PartialEq)]
pub enum RequestOutcome {
    /// A final response below 400.
    Succeeded {
        /// The final status.
        status: u16,
    },
    /// A final response of 400 or more, or no usable response.
    Failed {
        /// The final status, when there was a response.
        status: Option<u16>,
        /// Why, for counting failures by cause.
        kind: Failure,
        /// The full message.
        error: String,
    },
    /// Dropped by cancellation (queued or in flight).
    Cancelled,
}

/// Why a request failed, for counting failures by cause.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// The last answer was an error status the retry policy did not retry (or retried out).
    FinalStatus,
    /// Anything else, in a few stable words ([`ClientError::kind`], "panicked", ...).
    Cause(&'static str),
}

impl Failure {
    /// The cause as counted in a summary: `final status 404` (with the status) or its words.
    pub fn counted_as(self, status: Option<u16>) -> String {
        match (self, status) {
            (Self::FinalStatus, Some(status)) => format!("final status {status}"),
            (Self::FinalStatus, None) => "final status".to_owned(),
            (Self::Cause(words), _) => words.to_owned(),
        }
    }
}

/// One request of a burst.
#[derive(Debug, Clone)]
pub struct RequestResult {
    /// Its place in the burst, from 0.
    pub index: usize,
    /// The method it was sent with.
    pub method: http::Method,
    /// Path only: the query string may hold secrets. Shared by every request to the endpoint.
    pub path: Arc<str>,
    /// The lane it waited in.
    pub priority: Priority,
    /// When the burst started (arrival and attempt times count from it).
    pub burst_start: Instant,
    /// When it arrived (was handed to the client).
    pub arrived: Instant,
    /// First queued to final response.
    pub total: Duration,
    /// Every HTTP attempt, in order (none for a cache hit or a cancellation before sending).
    pub attempts: Vec<AttemptRecord>,
    /// Served from the response cache.
    pub from_cache: bool,
    /// Answered with a copy of an identical request's response in flight (it sent nothing).
    pub coalesced: bool,
    /// Its item went upstream in a batch (see [`BatchRole`]); `None` for a request of its own.
    pub batch: Option<BatchRole>,
    /// How it ended.
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
    /// Requests the burst will send.
    pub planned: usize,
    /// Requests handed to the client so far.
    pub launched: usize,
    /// Requests that ended (any outcome).
    pub done: usize,
    /// Of those, the ones that failed.
    pub failed: usize,
}

/// One shard of a burst's live counters. Each load thread counts in a shard of its own
/// (aligned apart, so threads never contend for a cache line); progress adds them up.
#[derive(Debug, Default)]
#[repr(align(128))]
pub(super) struct Counters {
    launched: AtomicUsize,
    done: AtomicUsize,
    failed: AtomicUsize,
}

/// Shard 0 for the driver's own runtime, one per possible load thread after it.
fn counter_shards() -> Arc<[Counters]> {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    std::iter::repeat_with(Counters::default).take(cores + 1).collect()
}

/// A burst in progress.
#[derive(Debug)]
pub struct Burst {
    planned: usize,
    client: LimitedClient,
    counters: Arc<[Counters]>,
    cancel: CancellationToken,
    driver: Driver,
    limiter: String,
}

/// What a burst's driver hands back: every record, and when sending began and ended.
type Outcome = (Vec<RequestResult>, Instant, Instant);

/// The task sending a burst, or what it handed back once [`Burst::ended`] saw it end.
#[derive(Debug)]
enum Driver {
    Running(tokio::task::JoinHandle<Outcome>),
    Ended(Outcome),
}

/// A driver that did not hand its records back (it panicked or was aborted): none, and no time.
fn lost() -> Outcome {
    let now = Instant::now();
    (Vec::new(), now, now)
}

impl Burst {
    /// Starts `spec` through `client` (whose registry holds the limits). Must run inside a tokio runtime.
    pub fn start(spec: BurstSpec, client: LimitedClient) -> Result<Self, SpecError> {
        spec.validate()?;
        let planned = spec.planned_requests();
        let counters = counter_shards();
        let cancel = CancellationToken::new();
        let limiter = spec.limits.as_ref().map_or_else(|| "none".to_owned(), |limits| limits.describe());
        let driver = Driver::Running(tokio::spawn(drive(spec, client.clone(), Arc::clone(&counters), cancel.clone())));
        Ok(Self { planned, client, counters, cancel, driver, limiter })
    }

    /// Builds the client from the spec itself and starts.
    pub fn start_with_own_client(spec: BurstSpec) -> Result<Self, SpecError> {
        let client = spec.client(crate::http::EventSink::none())?;
        Self::start(spec, client)
    }

    /// Counters so far.
    pub fn progress(&self) -> BurstProgress {
        let total = |count: fn(&Counters) -> &AtomicUsize| -> usize {
            self.counters.iter().map(|shard| count(shard).load(Ordering::Relaxed)).sum()
        };
        BurstProgress {
            planned: self.planned,
            launched: total(|shard| &shard.launched),
            done: total(|shard| &shard.done),
            failed: total(|shard| &shard.failed),
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
        self.cancel.cancel();
    }

    /// Whether every request has ended.
    pub fn is_finished(&self) -> bool {
        match &self.driver {
            Driver::Running(task) => task.is_finished(),
            Driver::Ended(_) => true,
        }
    }

    /// Resolves as soon as every request has ended, for a caller that shows progress until
    /// then: dropped before (a `select!` beside a progress tick), it loses nothing.
    pub async fn ended(&mut self) {
        if let Driver::Running(task) = &mut self.driver {
            let outcome = task.await.unwrap_or_else(|_| lost());
            self.driver = Driver::Ended(outcome);
        }
    }

    /// Waits for the end and summarises. Every task of the burst has ended when this returns.
    pub async fn finish(self) -> (Summary, Vec<RequestResult>) {
        let (results, start, end) = match self.driver {
            Driver::Running(task) => task.await.unwrap_or_else(|_| lost()),
            Driver::Ended(outcome) => outcome,
        };
        let mut summary = Summary::from_results(self.planned, &results, end - start, self.limiter);
        summary.shared = self.client.shared().map(|shared| shared.report());
        (summary, results)
    }
}

/// What every request of a burst shares: the spec, the start, and each request's arrival
/// offset and endpoint (drawn up front, so the order of sending does not change them).
pub(super) struct Plan {
    spec: BurstSpec,
    start: Instant,
    offsets: Vec<Duration>,
    endpoints: Vec<usize>,
    /// Each endpoint's path, for the records.
    paths: Vec<Arc<str>>,
    /// Each endpoint's request, its headers merged once (the spec's, then the endpoint's): a
    /// request is a copy of it in its lane.
    requests: Vec<RequestSpec>,
    /// Each endpoint's batcher, when its items are batched.
    batchers: Vec<Option<Batcher<Item, batched::ItemPart>>>,
}

/// `endpoint`'s request in the normal lane: its method (else the spec's), the spec's headers
/// with the endpoint's in place of those of the same name, its body and cost rules.
fn endpoint_request(spec: &BurstSpec, endpoint: &super::spec::Endpoint) -> RequestSpec {
    let method = endpoint.method.clone().unwrap_or_else(|| spec.method.clone());
    let mut request = RequestSpec::new(method, endpoint.url.clone());
    request.headers.clone_from(&spec.headers);
    for name in endpoint.headers.keys() {
        request.headers.remove(name);
    }
    request.headers.extend(endpoint.headers.iter().map(|(name, value)| (name.clone(), value.clone())));
    request.body.clone_from(&endpoint.body);
    request.cost_rules.clone_from(&endpoint.cost_rules);
    request
}

/// The endpoint of each of `count` requests, drawn by weight (seeded, so a spec always sends
/// the same requests).
fn drawn_endpoints(spec: &BurstSpec, count: usize) -> Vec<usize> {
    let weights: Vec<u32> = spec.endpoints.iter().map(|endpoint| endpoint.weight).collect();
    let mut rng = StdRng::seed_from_u64(0x5eed);
    match WeightedIndex::new(&weights) {
        Ok(chooser) => (0..count).map(|_| chooser.sample(&mut rng)).collect(),
        Err(_) => vec![0; count],
    }
}

impl Plan {
    /// The plan of `spec`; its clock starts once the plan is made (drawing a large burst's
    /// endpoints is no part of its schedule).
    fn new(spec: BurstSpec, client: &LimitedClient, cancel: &CancellationToken) -> Self {
        let offsets = arrival_offsets(&spec.arrival, spec.planned_requests());
        let endpoints = match &spec.arrival {
            ArrivalPattern::Scripted(script) => script.iter().map(|step| step.endpoint).collect(),
            _ => drawn_endpoints(&spec, offsets.len()),
        };
        let paths = spec.endpoints.iter().map(|endpoint| Arc::from(endpoint.url.path())).collect();
        let requests = spec.endpoints.iter().map(|endpoint| endpoint_request(&spec, endpoint)).collect();
        let batchers = batched::batchers(&spec, client, cancel);
        Self { spec, start: Instant::now(), offsets, endpoints, paths, requests, batchers }
    }

    pub(super) fn len(&self) -> usize {
        self.offsets.len()
    }

    /// The request at `index`, or `None` if the spec has no endpoint for it.
    pub(super) fn request(&self, index: usize) -> Option<RequestSpec> {
        let request = self.requests.get(*self.endpoints.get(index)?)?;
        Some(request.clone().with_priority(self.spec.priorities.lane(index)))
    }

    /// Waits for `index`'s arrival time; `false` if the burst was cancelled first.
    pub(super) async fn arrival(&self, index: usize, cancel: &impl Cancellation) -> bool {
        if cancel.is_cancelled() {
            return false;
        }
        let offset = self.offsets.get(index).copied().unwrap_or_default();
        let due = self.start + offset;
        if offset.is_zero() || due <= Instant::now() {
            return true;
        }
        tokio::select! {
            biased;
            () = cancel.cancelled() => false,
            () = tokio::time::sleep_until(due) => true,
        }
    }

    /// Sends request `index` and records how it ended. A cancellation ends it where it is
    /// (queued, in flight or waiting to retry) and keeps the attempts it made.
    pub(super) async fn perform(
        &self,
        client: &LimitedClient,
        index: usize,
        request: RequestSpec,
        arrived: Instant,
        cancel: &impl Cancellation,
    ) -> RequestResult {
        if let Some(batcher) = self.batcher(index) {
            return self.perform_batched(batcher, index, request, arrived, cancel).await;
        }
        // Room for the one attempt most requests make: an empty Vec's first push reserves four
        // (864 bytes a request, every page of it new to the process in a long burst).
        let mut attempts = Vec::with_capacity(1);
        let sent = tokio::select! {
            biased;
            () = cancel.cancelled() => None,
            sent = client.send_recorded(request, &mut attempts) => Some(sent),
        };
        let Some(sent) = sent else {
            return RequestResult { attempts, ..self.unfinished(index, arrived, RequestOutcome::Cancelled) };
        };
        let (outcome, from_cache, coalesced) = match sent {
            Ok(response) if response.status.as_u16() < 400 => (
                RequestOutcome::Succeeded { status: response.status.as_u16() },
                response.from_cache,
                response.coalesced,
            ),
            Ok(response) => (
                RequestOutcome::Failed {
                    status: Some(response.status.as_u16()),
                    kind: Failure::FinalStatus,
                    error: format!("final status {}", response.status),
                },
                response.from_cache,
                response.coalesced,
            ),
            Err(err) => (failure(&err), false, false),
        };
        RequestResult { attempts, from_cache, coalesced, ..self.unfinished(index, arrived, outcome) }
    }

    /// The batcher of request `index`'s endpoint, if it batches.
    fn batcher(&self, index: usize) -> Option<&Batcher<Item, batched::ItemPart>> {
        self.batchers.get(*self.endpoints.get(index)?)?.as_ref()
    }

    /// Sends request `index`'s item in a batch and records how it ended; a cancellation
    /// leaves the batch (the others in it are answered as usual).
    async fn perform_batched(
        &self,
        batcher: &Batcher<Item, batched::ItemPart>,
        index: usize,
        request: RequestSpec,
        arrived: Instant,
        cancel: &impl Cancellation,
    ) -> RequestResult {
        let item = Item { index, headers: request.headers, priority: request.priority };
        let part = tokio::select! {
            biased;
            () = cancel.cancelled() => None,
            part = batcher.submit(item) => Some(part),
        };
        match part {
            None => self.unfinished(index, arrived, RequestOutcome::Cancelled),
            Some(Ok(part)) => RequestResult {
                attempts: part.attempts,
                from_cache: part.from_cache,
                coalesced: part.coalesced,
                batch: Some(part.role),
                ..self.unfinished(index, arrived, part.outcome)
            },
            Some(Err(err)) => {
                let outcome = batch_failure(&err);
                RequestResult { batch: Some(BatchRole::Member), ..self.unfinished(index, arrived, outcome) }
            }
        }
    }

    /// The record of request `index` that ended with `outcome` and no attempt on record
    /// (cancelled, or its task panicked).
    pub(super) fn unfinished(&self, index: usize, arrived: Instant, outcome: RequestOutcome) -> RequestResult {
        let endpoint = self.endpoints.get(index).copied();
        let path = endpoint.and_then(|endpoint| self.paths.get(endpoint));
        let method = endpoint.and_then(|endpoint| self.spec.endpoints.get(endpoint)?.method.clone());
        RequestResult {
            index,
            method: method.unwrap_or_else(|| self.spec.method.clone()),
            path: path.map_or_else(|| Arc::from(""), Arc::clone),
            priority: self.spec.priorities.lane(index),
            burst_start: self.start,
            arrived,
            total: arrived.elapsed(),
            attempts: Vec::new(),
            from_cache: false,
            coalesced: false,
            batch: None,
            outcome,
        }
    }
}

impl Counters {
    pub(super) fn launched(&self) {
        self.launched.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn finished(&self, result: &RequestResult) {
        self.done.fetch_add(1, Ordering::Relaxed);
        if matches!(result.outcome, RequestOutcome::Failed { .. }) {
            self.failed.fetch_add(1, Ordering::Relaxed);
        }
    }
}

pub(super) fn panicked() -> RequestOutcome {
    RequestOutcome::Failed {
        status: None,
        kind: Failure::Cause("panicked"),
        error: "the request task panicked".to_owned(),
    }
}

async fn drive(
    spec: BurstSpec,
    client: LimitedClient,
    counters: Arc<[Counters]>,
    cancel: CancellationToken,
) -> (Vec<RequestResult>, Instant, Instant) {
    // A capped raw burst's records go in slots made before the plan's clock starts: hundreds of
    // bytes a request, tens of megabytes in a large burst, each page touched as it is made.
    let raw_cap = match (&spec.limits, spec.raw_concurrency) {
        (None, Some(cap)) => Some((cap, super::load::Slots::new(spec.planned_requests()))),
        _ => None,
    };
    let plan = Arc::new(Plan::new(spec, &client, &cancel));
    // The burst ends with its last request: gathering the records afterwards is not part of it.
    let (mut results, end) = match raw_cap {
        Some((cap, slots)) => super::load::drive_workers(&plan, &client, &counters, &cancel, cap, slots).await,
        _ => {
            let results = drive_tasks(&plan, &client, &counters[0], &cancel).await;
            (results, Instant::now())
        }
    };
    if !results.is_sorted_by_key(|result| result.index) {
        results.sort_by_key(|result| result.index);
    }
    (results, plan.start, end)
}

/// One task per request, each launched at its arrival time: limited bursts (every request
/// waits in the limiter, so its queue is real) and raw bursts without a cap.
async fn drive_tasks(
    plan: &Arc<Plan>,
    client: &LimitedClient,
    counters: &Counters,
    cancel: &CancellationToken,
) -> Vec<RequestResult> {
    let mut tasks = JoinSet::new();
    // Who each task is, for the record of a task that panicked or was aborted.
    let mut launched: HashMap<tokio::task::Id, (usize, Instant)> = HashMap::new();
    let mut results = Vec::with_capacity(plan.len());
    let mut collect = |joined: Result<(tokio::task::Id, RequestResult), tokio::task::JoinError>,
                       launched: &mut HashMap<tokio::task::Id, (usize, Instant)>| {
        let result = match joined {
            Ok((id, result)) => {
                launched.remove(&id);
                result
            }
            Err(err) => {
                let Some((index, arrived)) = launched.remove(&err.id()) else { return };
                let outcome = if err.is_cancelled() { RequestOutcome::Cancelled } else { panicked() };
                plan.unfinished(index, arrived, outcome)
            }
        };
        counters.finished(&result);
        results.push(result);
    };
    // Requests queue in the limiter in their order (FIFO within a lane); a raw burst has no
    // queue to keep in order, and skips the chain.
    let mut turnstile = plan.spec.limits.is_some().then(Turnstile::default);
    for index in 0..plan.len() {
        if !plan.arrival(index, cancel).await {
            break;
        }
        while let Some(joined) = tasks.try_join_next_with_id() {
            collect(joined, &mut launched);
        }
        let Some(request) = plan.request(index) else { continue };
        let (plan, client, cancel) = (Arc::clone(plan), client.clone(), cancel.clone());
        let arrived = Instant::now();
        let place = turnstile.as_mut().map(Turnstile::next_place);
        let handle = tasks.spawn(async move {
            let work = plan.perform(&client, index, request, arrived, &cancel);
            match place {
                Some(place) => place.run(work).await,
                None => work.await,
            }
        });
        launched.insert(handle.id(), (index, arrived));
        counters.launched();
    }
    // A cancelled task ends itself at once, with the attempts it made.
    while let Some(joined) = tasks.join_next_with_id().await {
        collect(joined, &mut launched);
    }
    results
}

pub(super) fn failure(err: &ClientError) -> RequestOutcome {
    RequestOutcome::Failed { status: err.last_status(), kind: Failure::Cause(err.kind()), error: err.to_string() }
}

/// A request whose batch ended without an answer for it (the batcher stopped).
fn batch_failure(err: &BatchError) -> RequestOutcome {
    RequestOutcome::Failed { status: None, kind: Failure::Cause("batch failed"), error: err.to_string() }
}
