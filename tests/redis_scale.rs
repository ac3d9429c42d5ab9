//! The scale bench of shared budgets (issue #19): decisions per second with 1, 8 and 32 clients against one Redis node and a 3-master Cluster, over 100 keys and over one hot key, with round trips per decision counted by the servers.
//!
//! A measurement, not a check, so it is ignored in a normal run. Run it on an idle machine:
//! `cargo test --release --test redis_scale -- --ignored --nocapture`. Both topologies are
//! private servers started from Debian's `redis-server` on loopback (no persistence).
//! Each client is its own `RedisStore` (its own connection), as separate processes would be;
//! the budget never denies, so what is measured is the cost of a decision, not of waiting.

mod redis_support;

use std::time::{Duration, Instant};

use ratescope::store::{FailPolicy, RedisStore, SHARED_PREFIX, SharedBudget, SharedGate, SharedSpec, StoreHealth};
use redis_support::PrivateRedis;
use redis_support::topology::PrivateCluster;

const SECONDS: f64 = 3.0;

/// Script calls (EVALSHA + EVAL) the server on `port` has served.
async fn script_calls(port: u16) -> u64 {
    let (evalsha, eval) = redis_support::topology::script_calls(port).await;
    evalsha + eval
}

/// Runs each client until `SECONDS` have passed, each calling `decide` in a loop; returns
/// (decisions/s, round trips/decision) with round trips counted by the servers on `ports`.
async fn measure<C, F, Fut>(ports: &[u16], clients: Vec<C>, decide: F) -> (f64, f64)
where
    C: Send + 'static,
    F: Fn(C, u64) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = C> + Send,
{
    let calls = async || futures_util::future::join_all(ports.iter().map(|port| script_calls(*port))).await;
    let before: u64 = calls().await.iter().sum();
    let started = Instant::now();
    let deadline = started + Duration::from_secs_f64(SECONDS);
    let mut tasks = tokio::task::JoinSet::new();
    for (index, client) in clients.into_iter().enumerate() {
        let decide = decide.clone();
        tasks.spawn(async move {
            let (mut client, mut decisions) = (client, 0u64);
            while Instant::now() < deadline {
                client = decide(client, index as u64 + decisions).await;
                decisions += 1;
            }
            decisions
        });
    }
    let decisions: u64 = tasks.join_all().await.iter().sum();
    let elapsed = started.elapsed().as_secs_f64();
    let after: u64 = calls().await.iter().sum();
    (decisions as f64 / elapsed, (after - before) as f64 / decisions as f64)
}

/// `clients` stores deciding over `keys` keys (a window and a bucket each).
async fn run(url: &str, ports: &[u16], clients: usize, keys: usize) -> (f64, f64) {
    let prefix = format!("ratescope-scale:{:08x}", rand::random::<u32>());
    let mut stores = Vec::new();
    for _ in 0..clients {
        stores.push(RedisStore::connect(url, &prefix).await.unwrap());
    }
    let spec =
        SharedSpec::new("window", SharedBudget::sliding_window(1_000_000, Duration::from_secs(1)).unwrap()).unwrap();
    let bucket_rate = ratescope::engine::Rate::new(1_000_000, Duration::from_secs(1)).unwrap();
    let bucket = SharedSpec::new("rate", SharedBudget::token_bucket(1_000_000, bucket_rate).unwrap()).unwrap();
    let specs = std::sync::Arc::new(vec![spec, bucket]);
    measure(ports, stores, move |store: RedisStore, i| {
        let specs = std::sync::Arc::clone(&specs);
        async move {
            let key = format!("key-{}", i % keys as u64);
            assert!(store.acquire_all(&key, &specs, 1).await.expect("a decision").allowed);
            store
        }
    })
    .await
}

/// `clients` gates (each its own store) on one hot key taking `lease` requests' worth per round trip.
async fn run_gates(url: &str, ports: &[u16], clients: usize, lease: u64) -> (f64, f64) {
    let key = format!("hot-{:08x}", rand::random::<u32>());
    let rate = ratescope::engine::Rate::new(1_000_000, Duration::from_secs(1)).unwrap();
    let budgets = [ratescope::engine::BudgetSpec::token_bucket("rate", 1_000_000, rate).unwrap()];
    let mut gates = Vec::new();
    for _ in 0..clients {
        let store = RedisStore::connect(url, SHARED_PREFIX).await.unwrap();
        let gate = SharedGate::new(store, StoreHealth::new(), &key, &budgets, FailPolicy::Closed).unwrap();
        gates.push(gate.with_lease(lease, Duration::from_secs(1)).unwrap());
    }
    measure(ports, gates, |gate: SharedGate, _| async move {
        gate.admit(1).await.expect("an admission");
        gate
    })
    .await
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "a benchmark: run with --release --ignored --nocapture"]
async fn scale_table() {
    let Some(node) = PrivateRedis::start().await else { return };
    let Some(cluster) = PrivateCluster::start(3, 0).await else { return };
    let cluster_ports: Vec<u16> = cluster.nodes.iter().map(|node| node.port).collect();
    println!("| store | keys | clients | decisions/s | round trips/decision |");
    println!("|---|---|---:|---:|---:|");
    for (name, url, ports) in
        [("one node", node.url(), vec![node.port]), ("3-master cluster", cluster.url(), cluster_ports.clone())]
    {
        for keys in [100, 1] {
            for clients in [1, 8, 32] {
                let (rate, round_trips) = run(&url, &ports, clients, keys).await;
                let keys = if keys == 1 { "1 (hot)".to_owned() } else { keys.to_string() };
                println!("| {name} | {keys} | {clients} | {rate:.0} | {round_trips:.3} |");
            }
        }
    }
    println!();
    println!("| store | hot key through gates | clients | admissions/s | round trips/admission |");
    println!("|---|---|---:|---:|---:|");
    for (name, url, ports) in
        [("one node", node.url(), vec![node.port]), ("3-master cluster", cluster.url(), cluster_ports)]
    {
        for lease in [1, 10] {
            for clients in [1, 8, 32] {
                let (rate, round_trips) = run_gates(&url, &ports, clients, lease).await;
                let how = if lease == 1 { "no lease".to_owned() } else { format!("lease {lease}") };
                println!("| {name} | {how} | {clients} | {rate:.0} | {round_trips:.3} |");
            }
        }
    }
}
