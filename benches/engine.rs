//! Engine benchmarks: uncontended admission beside governor, 10,000 hosts through the registry
//! beside governor's keyed limiter, stacked budgets under contention, and draining a queue of
//! waiters (time per admission and memory per waiter).

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group};
use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use governor::clock::MonotonicClock;
use governor::{Quota, RateLimiter};
use ratescope::engine::{BudgetSpec, LimitKey, Limiter, LimiterConfig, Priority, Rate, Registry};

/// Counts live heap bytes so the drain benchmark can report memory per waiter.
struct CountingAllocator;

static LIVE_BYTES: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE_BYTES.fetch_add(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE_BYTES.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE_BYTES.fetch_add(new_size as isize - layout.size() as isize, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

/// A bucket so large it never refuses: measures the cost of the decision itself.
fn never_empty_bucket(name: &str) -> BudgetSpec {
    BudgetSpec::token_bucket(name, 1 << 40, Rate::new(1 << 39, Duration::from_secs(1)).unwrap()).unwrap()
}

/// One never-empty bucket and a cap of 64.
fn capped_config() -> LimiterConfig {
    LimiterConfig::new().with_budget(never_empty_bucket("rate")).with_concurrency(64)
}

fn uncontended(c: &mut Criterion) {
    let mut group = c.benchmark_group("uncontended_admission");
    group.throughput(Throughput::Elements(1));
    let limiter = Limiter::new("bench", LimiterConfig::new().with_budget(never_empty_bucket("rate"))).unwrap();
    group.bench_function("ratescope_try_acquire", |b| {
        b.iter(|| drop(black_box(limiter.try_acquire(black_box(1)))));
    });
    // The same decision for work that holds no slot: no permit, as governor's `check`.
    group.bench_function("ratescope_try_spend", |b| {
        b.iter(|| black_box(limiter.try_spend(black_box(1))));
    });
    // The same bucket under a concurrency cap it never reaches: the cap checked on the count.
    let capped = Limiter::new("bench", capped_config()).unwrap();
    group.bench_function("ratescope_try_acquire_capped", |b| {
        b.iter(|| drop(black_box(capped.try_acquire(black_box(1)))));
    });
    // The floor under any admission that reads tokio's clock (which paused-time tests need).
    group.bench_function("tokio_instant_now", |b| {
        b.iter(|| black_box(tokio::time::Instant::now()));
    });
    let governor = RateLimiter::direct(Quota::per_second(NonZeroU32::MAX));
    group.bench_function("governor_check", |b| {
        b.iter(|| black_box(governor.check()));
    });
    // Governor on the clock ratescope reads (the OS monotonic clock under tokio's), so the two
    // decisions are compared on equal time sources.
    let on_monotonic = RateLimiter::direct_with_clock(Quota::per_second(NonZeroU32::MAX), MonotonicClock);
    group.bench_function("governor_check_monotonic_clock", |b| {
        b.iter(|| black_box(on_monotonic.check()));
    });
    group.finish();
}

/// Hosts in the keyed benchmarks.
const HOSTS: usize = 10_000;

/// Runs `iters` sweeps of `HOSTS` admissions in all (`admit(host index)`, cycling through the
/// hosts) on `threads` threads that start half the table apart. One sweep is the unit criterion
/// times, so the threads' start is spread over at least 10,000 admissions; one thread runs on
/// the bench's own thread.
fn keyed_run(threads: usize, iters: u64, admit: &(impl Fn(usize) + Sync)) -> Duration {
    let per_thread = iters as usize * HOSTS / threads;
    let run = |thread: usize| {
        let mut host = thread * HOSTS / threads;
        for _ in 0..per_thread {
            admit(host);
            host += 1;
            if host == HOSTS {
                host = 0;
            }
        }
    };
    let start = Instant::now();
    if threads == 1 {
        run(0);
    } else {
        std::thread::scope(|scope| {
            for thread in 0..threads {
                scope.spawn(move || run(thread));
            }
        });
    }
    start.elapsed()
}

/// 10,000 hosts, each with a bucket that never refuses: what a client pays per request to find
/// its host's limiter and be admitted (`Registry::limiter_for` with the URL's port and path, then
/// `try_acquire(1)`, as `LimitedClient::limiter_for` does), beside governor's keyed limiter (its default
/// DashMap store, keyed by `String`, on the OS monotonic clock) doing `check_key`. Host names are
/// built once, outside the timed loop, for both. The time criterion reports is per sweep of
/// 10,000 admissions.
/// 10,000 hosts in a registry and in governor's keyed limiter, every key warmed once.
struct Keyed {
    hosts: Vec<String>,
    registry: Registry,
    governor: KeyedGovernor,
}

/// Governor's keyed limiter on its default DashMap store, on the OS monotonic clock.
type KeyedGovernor = RateLimiter<
    String,
    governor::state::keyed::DashMapStateStore<String>,
    MonotonicClock,
    governor::middleware::NoOpMiddleware<<MonotonicClock as governor::clock::Clock>::Instant>,
>;

impl Keyed {
    fn new() -> Self {
        let hosts: Vec<String> = (0..HOSTS).map(|i| format!("h{i}.example")).collect();
        let registry = Registry::from_table(hosts.iter().map(|host| {
            let key: LimitKey = host.parse().unwrap();
            (key, LimiterConfig::new().with_budget(never_empty_bucket("rate")))
        }))
        .unwrap();
        let governor = RateLimiter::dashmap_with_clock(Quota::per_second(NonZeroU32::MAX), MonotonicClock);
        // Both create their per-key state on first use: warm every key once.
        for host in &hosts {
            drop(registry.limiter_for(host, Some(443), "/v1/items").unwrap().try_acquire(1).unwrap());
            governor.check_key(host).unwrap();
        }
        Self { hosts, registry, governor }
    }

    fn ratescope(&self, i: usize) {
        let limiter = self.registry.limiter_for(black_box(&self.hosts[i]), Some(443), "/v1/items");
        drop(black_box(limiter.map(|limiter| limiter.try_acquire(1))));
    }

    /// The same lookup, then the decision alone (`try_spend`: no permit), as `check_key` is.
    fn ratescope_spend(&self, i: usize) {
        let limiter = self.registry.limiter_for(black_box(&self.hosts[i]), Some(443), "/v1/items");
        drop(black_box(limiter.map(|limiter| limiter.try_spend(1))));
    }

    fn governor(&self, i: usize) {
        drop(black_box(self.governor.check_key(black_box(&self.hosts[i]))));
    }
}

fn keyed(c: &mut Criterion) {
    // Criterion's time is per sweep of 10,000 admissions: 1 ms per sweep is 100 ns per admission.
    let mut group = c.benchmark_group("keyed_10k_hosts");
    group.throughput(Throughput::Elements(HOSTS as u64));
    let keyed = Keyed::new();
    let ratescope = |i: usize| keyed.ratescope(i);
    let governor = |i: usize| keyed.governor(i);
    for threads in [1usize, 2] {
        group.bench_function(BenchmarkId::new("ratescope_registry_try_acquire", format!("{threads}_threads")), |b| {
            b.iter_custom(|iters| keyed_run(threads, iters, &ratescope));
        });
        group.bench_function(
            BenchmarkId::new("governor_keyed_check_monotonic_clock", format!("{threads}_threads")),
            |b| b.iter_custom(|iters| keyed_run(threads, iters, &governor)),
        );
    }
    group.finish();
}

/// A never-binding bucket, two never-binding sliding windows and a cap: every admission takes
/// the locked path and checks all three budgets.
fn stacked_config() -> LimiterConfig {
    LimiterConfig::new()
        .with_budget(never_empty_bucket("rate"))
        .with_budget(BudgetSpec::sliding_window("w10ms", 1 << 40, Duration::from_millis(10)).unwrap())
        .with_budget(BudgetSpec::sliding_window("w50ms", 1 << 40, Duration::from_millis(50)).unwrap())
        .with_concurrency(64)
}

fn stacked_contended(c: &mut Criterion) {
    let mut group = c.benchmark_group("stacked_budgets_two_threads");
    group.throughput(Throughput::Elements(1));
    let limiter = Limiter::new("bench", stacked_config()).unwrap();
    group.bench_function("3_budgets_plus_concurrency", |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            std::thread::scope(|scope| {
                for _ in 0..2 {
                    scope.spawn(|| {
                        for _ in 0..iters / 2 {
                            drop(black_box(limiter.try_acquire(1)));
                        }
                    });
                }
            });
            start.elapsed()
        });
    });
    group.finish();
}

/// Queues `n` waiters behind a held concurrency slot, then releases it and times the drain.
fn drain(n: usize) -> (Duration, isize) {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
    runtime.block_on(async {
        let limiter = Limiter::new("bench", LimiterConfig::new().with_concurrency(1)).unwrap();
        let held = limiter.try_acquire(1).unwrap();
        let mut waiters: FuturesUnordered<_> = (0..n)
            .map(|i| {
                let acquire = limiter.acquire(Priority::ALL[i % 3], 1);
                async move { drop(acquire.await) }
            })
            .collect();
        // Only what the limiter itself allocates while they queue (slab + lanes); the futures
        // and the harness's task nodes are allocated above.
        let before = LIVE_BYTES.load(Ordering::Relaxed);
        // One poll each puts every waiter in the queue.
        futures_util::future::poll_fn(|cx| {
            let _ = waiters.poll_next_unpin(cx);
            std::task::Poll::Ready(())
        })
        .await;
        while limiter.snapshot().queued_total() < n {
            futures_util::future::poll_fn(|cx| {
                let _ = waiters.poll_next_unpin(cx);
                std::task::Poll::Ready(())
            })
            .await;
        }
        let per_waiter = (LIVE_BYTES.load(Ordering::Relaxed) - before) / n as isize;
        let start = Instant::now();
        drop(held);
        while waiters.next().await.is_some() {}
        (start.elapsed(), per_waiter)
    })
}

fn queue_drain(c: &mut Criterion) {
    let mut group = c.benchmark_group("queue_drain");
    for n in [1_000usize, 10_000, 100_000] {
        let (_, bytes) = drain(n);
        let future = std::mem::size_of::<ratescope::engine::Acquire>();
        eprintln!(
            "queue_drain/{n}: {bytes} bytes per waiter in the limiter's queue + {future} bytes of Acquire future"
        );
        group.throughput(Throughput::Elements(n as u64));
        group.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, &n| {
            b.iter_custom(|iters| (0..iters).map(|_| drain(n).0).sum());
        });
    }
    group.finish();
}

criterion_group!(benches, uncontended, keyed, stacked_contended, queue_drain);

/// Rounds in which ratescope and governor (on the monotonic clock) take turns at the same work,
/// the one going first alternating; prints the median over rounds of ratescope's time over
/// governor's in the same round, with its quartiles. On a shared machine whose speed drifts
/// between runs (and within one), turns side by side are the fair comparison; criterion's
/// separate figures for the two can be minutes apart.
fn interleaved() {
    const ROUNDS: usize = 61;
    const UNKEYED: usize = 200_000;
    // Enough sweeps that the first, which refills the caches the other limiter's turn emptied,
    // weighs little.
    const SWEEPS: u64 = 30;
    let keyed = Keyed::new();
    let limiter = Limiter::new("bench", LimiterConfig::new().with_budget(never_empty_bucket("rate"))).unwrap();
    let governor = RateLimiter::direct_with_clock(Quota::per_second(NonZeroU32::MAX), MonotonicClock);
    fn timed(admit: impl Fn()) -> Duration {
        let start = Instant::now();
        for _ in 0..UNKEYED {
            admit();
        }
        start.elapsed()
    }
    type Work<'a> = Box<dyn Fn() -> Duration + 'a>;
    let pairs: [(&str, Work, Work); 5] = [
        (
            "unkeyed, try_acquire (a permit)",
            Box::new(|| timed(|| drop(black_box(limiter.try_acquire(black_box(1)))))),
            Box::new(|| timed(|| drop(black_box(governor.check())))),
        ),
        (
            "unkeyed, try_spend (no permit)",
            Box::new(|| timed(|| drop(black_box(limiter.try_spend(black_box(1)))))),
            Box::new(|| timed(|| drop(black_box(governor.check())))),
        ),
        (
            "keyed, 10,000 hosts, one thread",
            Box::new(|| keyed_run(1, SWEEPS, &|i| keyed.ratescope(i))),
            Box::new(|| keyed_run(1, SWEEPS, &|i| keyed.governor(i))),
        ),
        (
            "keyed, one thread, try_spend",
            Box::new(|| keyed_run(1, SWEEPS, &|i| keyed.ratescope_spend(i))),
            Box::new(|| keyed_run(1, SWEEPS, &|i| keyed.governor(i))),
        ),
        (
            "keyed, 10,000 hosts, two threads",
            Box::new(|| keyed_run(2, SWEEPS, &|i| keyed.ratescope(i))),
            Box::new(|| keyed_run(2, SWEEPS, &|i| keyed.governor(i))),
        ),
    ];
    println!("interleaved, {ROUNDS} rounds: ratescope's time over governor's (monotonic clock), median of rounds");
    for (name, ours, theirs) in &pairs {
        let mut ratios: Vec<f64> = (0..ROUNDS)
            .map(|round| {
                let (ours, theirs) = if round % 2 == 0 {
                    let ours = ours();
                    (ours, theirs())
                } else {
                    let theirs = theirs();
                    (ours(), theirs)
                };
                ours.as_secs_f64() / theirs.as_secs_f64()
            })
            .collect();
        ratios.sort_by(f64::total_cmp);
        let (low, median, high) = (ratios[ROUNDS / 4], ratios[ROUNDS / 2], ratios[3 * ROUNDS / 4]);
        println!("  {name:<34} {median:.3}×  (quartiles {low:.3}–{high:.3})");
    }
}

/// `RATESCOPE_BENCH_SEQUENTIAL=CONFIG:N` (CONFIG `bucket` for one never-empty bucket, `capped`
/// for the same under a cap, `stacked`; or `spend`, the bucket's `try_spend`, and `governor`,
/// governor's `check` on the monotonic clock) skips criterion and admits N requests one after
/// another on one thread: run under `valgrind --tool=callgrind` with N = 0 and N = 10,000, the difference
/// over 10,000 is the instructions per admission, a figure the machine's load does not move.
/// `keyed_ratescope:N`, `keyed_spend:N` and `keyed_governor:N` do the same through the 10,000 warmed hosts of
/// the keyed benchmark (cycling through them), for both limiters on one clock; with
/// `--cache-sim=yes` callgrind also counts the simulated cache misses a sweep of 10,000 keys
/// causes, which is what the keyed wall-clock figures mostly measure.
fn main() {
    if let Ok(spec) = std::env::var("RATESCOPE_BENCH_SEQUENTIAL") {
        let (config, count) = spec.split_once(':').expect("RATESCOPE_BENCH_SEQUENTIAL=CONFIG:N");
        let count = count.parse::<usize>().expect("an admission count");
        if let Some(which) = config.strip_prefix("keyed_") {
            let keyed = Keyed::new();
            for i in 0..count {
                match which {
                    "ratescope" => keyed.ratescope(i % HOSTS),
                    "spend" => keyed.ratescope_spend(i % HOSTS),
                    "governor" => keyed.governor(i % HOSTS),
                    other => panic!("unknown keyed limiter {other}"),
                }
            }
            return;
        }
        let bucket = || LimiterConfig::new().with_budget(never_empty_bucket("rate"));
        match config {
            "governor" => {
                let governor = RateLimiter::direct_with_clock(Quota::per_second(NonZeroU32::MAX), MonotonicClock);
                for _ in 0..count {
                    drop(black_box(governor.check()));
                }
            }
            "spend" => {
                let limiter = Limiter::new("bench", bucket()).unwrap();
                for _ in 0..count {
                    drop(black_box(limiter.try_spend(black_box(1))));
                }
            }
            config => {
                let config = match config {
                    "bucket" => bucket(),
                    "stacked" => stacked_config(),
                    "capped" => capped_config(),
                    other => panic!("unknown config {other}"),
                };
                let limiter = Limiter::new("bench", config).unwrap();
                for _ in 0..count {
                    drop(black_box(limiter.try_acquire(black_box(1))));
                }
            }
        }
        return;
    }
    benches();
    interleaved();
    Criterion::default().configure_from_args().final_summary();
}
