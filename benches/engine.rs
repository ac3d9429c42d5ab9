//! Engine benchmarks: uncontended admission beside governor, stacked budgets under contention,
//! and draining a queue of waiters (time per admission and memory per waiter).

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use governor::clock::MonotonicClock;
use governor::{Quota, RateLimiter};
use ratescope::engine::{BudgetSpec, Limiter, LimiterConfig, Priority, Rate};

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

fn uncontended(c: &mut Criterion) {
    let mut group = c.benchmark_group("uncontended_admission");
    group.throughput(Throughput::Elements(1));
    let limiter = Limiter::new("bench", LimiterConfig::new().with_budget(never_empty_bucket("rate"))).unwrap();
    group.bench_function("ratescope_try_acquire", |b| {
        b.iter(|| drop(black_box(limiter.try_acquire(black_box(1)))));
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

fn stacked_contended(c: &mut Criterion) {
    let mut group = c.benchmark_group("stacked_budgets_two_threads");
    group.throughput(Throughput::Elements(1));
    let config = LimiterConfig::new()
        .with_budget(never_empty_bucket("rate"))
        .with_budget(BudgetSpec::sliding_window("w10ms", 1 << 40, Duration::from_millis(10)).unwrap())
        .with_budget(BudgetSpec::sliding_window("w50ms", 1 << 40, Duration::from_millis(50)).unwrap())
        .with_concurrency(64);
    let limiter = Limiter::new("bench", config).unwrap();
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

criterion_group!(benches, uncontended, stacked_contended, queue_drain);
criterion_main!(benches);
