//! Raw bursts with a concurrency cap, driven like a load generator: a fixed set of workers
//! on single-threaded runtimes (one per core), sharing no hot cache line.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use futures_util::FutureExt;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::runner::{Counters, Plan, RequestResult, panicked};
use super::stop::WorkerStop;
use crate::http::LimitedClient;

/// Raw sending with a cap works like a load generator: `cap` workers each send the next
/// request when their last one has ended, so no task is spawned per request. On a
/// multi-threaded runtime the workers are spread over the load threads' single-threaded
/// runtimes ([`load_threads`]), each with its own connections, so a request and its
/// connection never change threads. Returns the records and when the last request ended.
pub(super) async fn drive_workers(
    plan: &Arc<Plan>,
    client: &LimitedClient,
    counters: &Arc<[Counters]>,
    cancel: &CancellationToken,
    cap: usize,
    slots: Slots,
) -> (Vec<RequestResult>, Instant) {
    // Made for the count the spec planned: another count (a script's) gets its own now.
    let slots = if slots.0.len() == plan.len() { slots } else { Slots::new(plan.len()) };
    let workers = Workers {
        plan: Arc::clone(plan),
        client: client.clone(),
        counters: Arc::clone(counters),
        shard: 0,
        cancel: cancel.clone(),
        next: Arc::new(AtomicUsize::new(0)),
        slots: Arc::new(slots.0),
    };
    let count = cap.min(plan.len());
    let runtimes = load_runtimes(load_threads().min(count));
    if runtimes.is_empty() {
        workers.clone().run(count).await;
    } else {
        let threads = runtimes.len();
        let mut running = Vec::with_capacity(threads);
        for (thread, runtime) in runtimes.into_iter().enumerate() {
            let share = count / threads + usize::from(thread < count % threads);
            let workers = Workers { shard: (thread + 1) % counters.len(), ..workers.clone() };
            running.push(tokio::task::spawn_blocking(move || runtime.block_on(workers.run(share))));
        }
        for thread in running {
            // A worker catches its requests' panics; a thread that failed anyway leaves its
            // requests without a record, as a panicking task would.
            if let Err(err) = thread.await {
                tracing::error!("a load thread failed: {err}");
            }
        }
    }
    let end = Instant::now();
    let results = match Arc::try_unwrap(workers.slots) {
        Ok(slots) => slots.into_iter().filter_map(OnceLock::into_inner).collect(),
        // Every worker has ended, so nobody else holds the slots; copy them out if that changes.
        Err(slots) => slots.iter().filter_map(|slot| slot.get().cloned()).collect(),
    };
    (results, end)
}

/// One record slot per request of a capped raw burst, filled by whichever worker sends it: no
/// lists to grow, merge or sort afterwards, and no lock (a burst may hold millions).
pub(super) struct Slots(Vec<OnceLock<RequestResult>>);

impl Slots {
    pub(super) fn new(count: usize) -> Self {
        Self(std::iter::repeat_with(OnceLock::new).take(count).collect())
    }
}

/// How many load threads a burst sends from: one per core, as oha has (one per physical core).
/// Half the cores for a server on this machine was tried and measured both ways on two VMs
/// (3% ahead on one, 5-7% behind on the next: BENCHMARKS.md), so the plain rule stands.
fn load_threads() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

/// `threads` single-threaded runtimes when called on a multi-threaded runtime (none on a
/// single-threaded one, such as a test's paused clock, or when they cannot be built).
fn load_runtimes(threads: usize) -> Vec<tokio::runtime::Runtime> {
    let flavor = tokio::runtime::Handle::try_current().map(|runtime| runtime.runtime_flavor());
    if !matches!(flavor, Ok(tokio::runtime::RuntimeFlavor::MultiThread)) {
        return Vec::new();
    }
    let built: Result<Vec<_>, _> =
        (0..threads).map(|_| tokio::runtime::Builder::new_current_thread().enable_all().build()).collect();
    built.unwrap_or_else(|err| {
        tracing::warn!("sending from the shared runtime: load threads could not start: {err}");
        Vec::new()
    })
}

/// What the workers of a raw capped burst share.
#[derive(Clone)]
struct Workers {
    plan: Arc<Plan>,
    client: LimitedClient,
    counters: Arc<[Counters]>,
    /// This runtime's counter shard.
    shard: usize,
    cancel: CancellationToken,
    /// The next request index to send.
    next: Arc<AtomicUsize>,
    slots: Arc<Vec<OnceLock<RequestResult>>>,
}

impl Workers {
    /// Runs `count` workers on the current runtime until the plan is sent or cancelled. The
    /// runtime watches the burst's token once and raises each worker's stop when it is
    /// cancelled: a worker checks its own flag for every request, not the token's lock.
    async fn run(self, count: usize) {
        let stops: Vec<Arc<WorkerStop>> = std::iter::repeat_with(Arc::default).take(count).collect();
        let mut running = JoinSet::new();
        for stop in &stops {
            if count <= INLINE_WORKERS_AT_MOST {
                running.spawn(self.clone().work::<Inline>(Arc::clone(stop)));
            } else {
                running.spawn(self.clone().work::<Boxed>(Arc::clone(stop)));
            }
        }
        let ended = async { while running.join_next().await.is_some() {} };
        tokio::pin!(ended);
        tokio::select! {
            biased;
            () = &mut ended => return,
            () = self.cancel.cancelled() => {}
        }
        for stop in &stops {
            stop.raise();
        }
        ended.await;
    }

    async fn work<H: Hold>(self, stop: Arc<WorkerStop>) {
        let Self { plan, client, counters, shard, next, slots, .. } = self;
        let cancel = &*stop;
        let Some(counters) = counters.get(shard) else { return };
        loop {
            let index = next.fetch_add(1, Ordering::Relaxed);
            if index >= plan.len() || !plan.arrival(index, cancel).await {
                break;
            }
            let Some(request) = plan.request(index) else { continue };
            counters.launched();
            let arrived = Instant::now();
            // A cancellation ends the request inside `perform`, keeping its attempts.
            let sending = AssertUnwindSafe(H::hold(plan.perform(&client, index, request, arrived, cancel)));
            let result = sending.catch_unwind().await.unwrap_or_else(|_| plan.unfinished(index, arrived, panicked()));
            counters.finished(&result);
            if let Some(slot) = slots.get(index) {
                // Each index is taken by one worker only, so the slot is empty.
                let _ = slot.set(result);
            }
        }
    }
}

/// Up to this many workers on a runtime hold their request's state inline (a few KiB each);
/// beyond, each request's state is boxed while it is sent, so a worker waiting for a later
/// arrival stays small (a paced raw burst may have many thousands of workers waiting).
const INLINE_WORKERS_AT_MOST: usize = 1024;

/// Where a worker keeps the request it is sending: in its own state, or boxed.
trait Hold {
    fn hold<F: Future + Send>(sending: F) -> impl Future<Output = F::Output> + Send;
}

/// In the worker's own state: no allocation and no copy of the state per request.
struct Inline;

impl Hold for Inline {
    fn hold<F: Future + Send>(sending: F) -> impl Future<Output = F::Output> + Send {
        sending
    }
}

/// Boxed for the time it is sent.
struct Boxed;

impl Hold for Boxed {
    fn hold<F: Future + Send>(sending: F) -> impl Future<Output = F::Output> + Send {
        Box::pin(sending)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_sends_from_one_thread_per_core() {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        assert_eq!(load_threads(), cores);
        assert!(load_threads() >= 1);
    }
}
