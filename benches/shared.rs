//! Shared budgets through Redis: decisions per second with 1 and 8 concurrent clients, and round trips per decision.
//!
//! Needs a Redis server (`RATESCOPE_REDIS_URL`, default redis://127.0.0.1:6379); without one
//! it says so and measures nothing. Run: `cargo bench --bench shared`.
//!
//! Each client is its own `RedisStore` (its own connection), as separate processes would be.
//! The budget is a window large enough never to deny, so every decision is one admission:
//! what is measured is the cost of deciding, not of waiting. Round trips are counted by the
//! server itself (`INFO commandstats`: EVALSHA + EVAL + SCRIPT calls) and divided by decisions.

use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use ratescope::engine::BudgetSpec;
use ratescope::store::{FailPolicy, RedisStore, SharedGate, SharedSpec, StoreHealth};

fn redis_url() -> String {
    std::env::var("RATESCOPE_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned())
}

fn budgets() -> Vec<BudgetSpec> {
    vec![
        BudgetSpec::sliding_window("minute", 1_000_000, Duration::from_secs(60)).expect("valid window"),
        BudgetSpec::token_bucket("rate", 1_000_000, "1000000/1s".parse().expect("valid rate")).expect("valid bucket"),
    ]
}

/// Script calls the server has served so far.
async fn script_calls(connection: &mut redis::aio::MultiplexedConnection) -> u64 {
    let info: String = redis::cmd("INFO").arg("commandstats").query_async(connection).await.unwrap_or_default();
    info.lines()
        .filter(|line| {
            ["cmdstat_evalsha:", "cmdstat_eval:", "cmdstat_script|load:", "cmdstat_script:"]
                .iter()
                .any(|p| line.starts_with(p))
        })
        .filter_map(|line| line.split("calls=").nth(1)?.split(',').next()?.parse::<u64>().ok())
        .sum()
}

fn shared_decisions(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    let url = redis_url();
    let prefix = format!("ratescope-bench:{:016x}", rand::random::<u64>());
    let stores: Vec<RedisStore> = match runtime.block_on(async {
        let mut stores = Vec::new();
        for _ in 0..8 {
            stores.push(RedisStore::connect(&url, &prefix).await?);
        }
        Ok::<_, ratescope::store::StoreError>(stores)
    }) {
        Ok(stores) => stores,
        Err(err) => {
            eprintln!("NOTICE: no Redis at {url} ({err}); the shared-budget benchmark measures nothing");
            return;
        }
    };
    let Ok(mut raw) =
        runtime.block_on(async { redis::Client::open(url.as_str())?.get_multiplexed_async_connection().await })
    else {
        return;
    };
    let specs: Vec<SharedSpec> = budgets().iter().map(|spec| SharedSpec::try_from(spec).expect("shareable")).collect();

    let mut group = c.benchmark_group("redis_shared");
    for clients in [1usize, 8] {
        group.throughput(Throughput::Elements(clients as u64));
        // The store alone: one EVALSHA per decision over both budgets.
        group.bench_with_input(BenchmarkId::new("store_acquire_all", clients), &clients, |b, &clients| {
            b.to_async(&runtime).iter_custom(|iters| {
                let stores = stores[..clients].to_vec();
                let specs = specs.clone();
                async move {
                    let start = Instant::now();
                    let mut tasks = tokio::task::JoinSet::new();
                    for store in stores {
                        let specs = specs.clone();
                        tasks.spawn(async move {
                            for _ in 0..iters {
                                let decision = store.acquire_all("bench", &specs, 1).await.expect("a decision");
                                assert!(decision.allowed);
                            }
                        });
                    }
                    tasks.join_all().await;
                    start.elapsed()
                }
            });
        });
        // Through the gate, as the client uses it (one asker per key and process).
        group.bench_with_input(BenchmarkId::new("gate_admit", clients), &clients, |b, &clients| {
            let gates: Vec<SharedGate> = stores[..clients]
                .iter()
                .map(|store| {
                    SharedGate::new(store.clone(), StoreHealth::new(), "bench-gate", &budgets(), FailPolicy::Closed)
                        .expect("gate")
                })
                .collect();
            b.to_async(&runtime).iter_custom(|iters| {
                let gates = gates.clone();
                async move {
                    let start = Instant::now();
                    let mut tasks = tokio::task::JoinSet::new();
                    for gate in gates {
                        tasks.spawn(async move {
                            for _ in 0..iters {
                                gate.admit(1).await.expect("admitted");
                            }
                        });
                    }
                    tasks.join_all().await;
                    start.elapsed()
                }
            });
        });
    }
    group.finish();

    // Round trips per decision, counted by the server.
    let (decisions, calls) = runtime.block_on(async {
        let before = script_calls(&mut raw).await;
        let decisions = 10_000u64;
        let mut tasks = tokio::task::JoinSet::new();
        for store in stores.clone() {
            let specs = specs.clone();
            tasks.spawn(async move {
                for _ in 0..decisions / 8 {
                    store.acquire_all("bench-trips", &specs, 1).await.expect("a decision");
                }
            });
        }
        tasks.join_all().await;
        (decisions, script_calls(&mut raw).await - before)
    });
    println!(
        "round trips per decision: {:.4} ({calls} script calls on the server for {decisions} decisions)",
        calls as f64 / decisions as f64
    );
    runtime.block_on(async {
        let keys: Vec<String> =
            redis::cmd("KEYS").arg(format!("{{{prefix}:*")).query_async(&mut raw).await.unwrap_or_default();
        if !keys.is_empty() {
            let _: Result<(), _> = redis::cmd("DEL").arg(keys).query_async(&mut raw).await;
        }
    });
}

criterion_group!(benches, shared_decisions);
criterion_main!(benches);
