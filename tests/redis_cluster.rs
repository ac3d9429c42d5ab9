//! Shared budgets on a Redis Cluster of the test's own: exact counts across processes, one slot per budget, slot migration mid-run, and a master killed mid-burst under each fail policy.
//!
//! Each test starts a private cluster from Debian's `redis-server` on free loopback ports
//! (`redis_support::topology`). Processes are this test binary started again in `child_role`.
//! Without `redis-server`/`redis-cli` the tests print a NOTICE and pass, unless
//! `RATESCOPE_REQUIRE_REDIS=1` makes them fail.

mod redis_support;

use std::time::Duration;

use ratescope::engine::{BudgetSpec, Cost, Rate, Unit};
use ratescope::store::{
    FailPolicy, RedisStore, SHARED_PREFIX, Settled, SharedBudget, SharedGate, SharedSpec, StoreHealth, StoreState,
};
use redis::AsyncCommands;
use redis_support::children::{ChildCounts, ChildPlan, run_children};
use redis_support::topology::PrivateCluster;

#[test]
#[ignore = "the body of the child processes that the other tests start"]
fn child_role() {
    redis_support::children::child_main();
}

fn unique_key(test: &str) -> String {
    format!("cluster-{test}-{:016x}/api.example.com", rand::random::<u64>())
}

/// The Redis key of a child's sliding window (`window:…` budgets are named "window").
fn window_key(key: &str) -> String {
    format!("{{{SHARED_PREFIX}:{key}}}:window:window")
}

fn plan(cluster: &PrivateCluster, key: &str, budget: &str, want: usize, seconds: f64, pace_ms: u64) -> ChildPlan {
    ChildPlan {
        url: cluster.url(),
        ca_file: None,
        key: key.to_owned(),
        budget: budget.to_owned(),
        want,
        seconds,
        pace_ms,
        policy: FailPolicy::Closed,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_sharing_one_window_on_a_cluster_admit_exactly_its_allowance() {
    let Some(cluster) = PrivateCluster::start(3, 0).await else { return };
    let key = unique_key("window");
    let plans = vec![plan(&cluster, &key, "window:12:60", 6, 2.0, 0); 4];
    let counts = tokio::task::spawn_blocking(move || run_children(&plans)).await.unwrap();
    // 4 processes want 24; the window holds 12 a minute: exactly 12 pass, through the cluster.
    let admitted: u64 = counts.iter().map(ChildCounts::through).sum();
    assert_eq!(admitted, 12, "per process: {counts:?}");
    assert!(counts.iter().all(|c| c.unavailable == 0), "{counts:?}");
    let owner = cluster.master_of(&window_key(&key)).await;
    let mut node = cluster.node_connection(owner).await;
    let members: u64 = node.zcard(window_key(&key)).await.unwrap();
    assert_eq!(members, 12, "the window lives on the master that owns its slot");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_key_of_a_budget_shares_one_slot_and_a_hundred_budgets_spread_over_every_master() {
    let Some(cluster) = PrivateCluster::start(3, 0).await else { return };
    let store = RedisStore::connect(&cluster.url(), SHARED_PREFIX).await.unwrap();
    assert!(store.is_cluster());
    let rate = Rate::new(10, Duration::from_secs(1)).unwrap();
    let specs = [
        SharedSpec::new("bucket", SharedBudget::token_bucket(10, rate).unwrap()).unwrap(),
        SharedSpec::new("hour", SharedBudget::sliding_window(100, Duration::from_secs(3600)).unwrap()).unwrap(),
    ];
    let mut connection = cluster.node_connection(cluster.nodes[0].port).await;
    let mut owners = std::collections::BTreeSet::new();
    let tag = format!("{:08x}", rand::random::<u32>());
    let before = cluster.script_calls().await;
    for i in 0..100 {
        let key = format!("spread-{tag}-{i}/api.example.com");
        let keys: Vec<String> = specs.iter().flat_map(|spec| store.spec_keys(&key, spec)).collect();
        assert_eq!(keys.len(), 3, "a bucket key, a window and its counter");
        let mut slots = std::collections::BTreeSet::new();
        for name in &keys {
            let slot: u16 = redis::cmd("CLUSTER").arg("KEYSLOT").arg(name).query_async(&mut connection).await.unwrap();
            slots.insert(slot);
        }
        assert_eq!(slots.len(), 1, "every key of {key}'s budgets in one slot: {keys:?}");
        // Each decision is one script on the slot's master, wherever the seeds pointed first.
        let decision = store.acquire_all(&key, &specs, 1).await.unwrap();
        assert!(decision.allowed && decision.remaining == 9, "{decision:?}");
        owners.insert(cluster.master_of(&keys[0]).await);
    }
    assert_eq!(owners.len(), 3, "100 budgets land on all three masters: {owners:?}");
    let after = cluster.script_calls().await;
    // One EVALSHA per decision, sent straight to the slot's master; EVAL only the first time
    // each master is asked (its NOSCRIPT), so at most once per master.
    assert_eq!(after.0 - before.0, 100, "EVALSHA calls for 100 decisions");
    assert!(after.1 - before.1 <= 3, "EVAL calls: {}", after.1 - before.1);
}

/// Moves `slot` from its master to `to` the way `redis-cli --cluster reshard` does:
/// importing/migrating marks, MIGRATE of its keys, then the new owner announced.
async fn migrate_slot(cluster: &PrivateCluster, slot: u16, from: u16, to: u16) {
    let mut source = cluster.node_connection(from).await;
    let mut target = cluster.node_connection(to).await;
    let id = |port: u16| async move {
        let mut connection = cluster.node_connection(port).await;
        redis::cmd("CLUSTER").arg("MYID").query_async::<String>(&mut connection).await.unwrap()
    };
    let (source_id, target_id) = (id(from).await, id(to).await);
    let setslot = |state: &str, node: &str| {
        let mut command = redis::cmd("CLUSTER");
        command.arg("SETSLOT").arg(slot).arg(state).arg(node);
        command
    };
    let _: () = setslot("IMPORTING", &source_id).query_async(&mut target).await.unwrap();
    let _: () = setslot("MIGRATING", &target_id).query_async(&mut source).await.unwrap();
    loop {
        let keys: Vec<String> =
            redis::cmd("CLUSTER").arg("GETKEYSINSLOT").arg(slot).arg(100).query_async(&mut source).await.unwrap();
        if keys.is_empty() {
            break;
        }
        let _: () = redis::cmd("MIGRATE")
            .arg("127.0.0.1")
            .arg(to)
            .arg("")
            .arg(0)
            .arg(5000)
            .arg("KEYS")
            .arg(&keys)
            .query_async(&mut source)
            .await
            .unwrap();
    }
    for node in &cluster.nodes {
        let mut connection = cluster.node_connection(node.port).await;
        let _: () = setslot("NODE", &target_id).query_async(&mut connection).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_migrated_mid_run_keeps_the_count_exact() {
    let Some(cluster) = PrivateCluster::start(3, 0).await else { return };
    let store = RedisStore::connect(&cluster.url(), SHARED_PREFIX).await.unwrap();
    let key = unique_key("migrate");
    let budgets = [BudgetSpec::sliding_window("window", 60, Duration::from_secs(60)).unwrap()];
    let gate = SharedGate::new(store, StoreHealth::new(), &key, &budgets, FailPolicy::Closed).unwrap();
    for _ in 0..30 {
        gate.admit(1).await.unwrap();
    }
    let from = cluster.master_of(&window_key(&key)).await;
    let to = cluster.nodes.iter().map(|node| node.port).find(|port| *port != from).unwrap();
    let mut connection = cluster.node_connection(from).await;
    let slot: u16 =
        redis::cmd("CLUSTER").arg("KEYSLOT").arg(window_key(&key)).query_async(&mut connection).await.unwrap();
    // Decisions keep coming while the slot moves: ASK during the move, MOVED after it.
    let asking = tokio::spawn({
        let gate = gate.clone();
        async move {
            for _ in 0..30 {
                gate.admit(1).await.unwrap();
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }
    });
    migrate_slot(&cluster, slot, from, to).await;
    asking.await.unwrap();
    assert_eq!(cluster.master_of(&window_key(&key)).await, to, "the slot moved");
    let counts = gate.health().counts();
    assert_eq!(counts.admitted, 60, "{counts:?}");
    // The window is full on its new owner: the 61st is refused by Redis, not let through.
    assert!(tokio::time::timeout(Duration::from_millis(300), gate.admit(1)).await.is_err());
    let mut owner = cluster.node_connection(to).await;
    let members: u64 = owner.zcard(window_key(&key)).await.unwrap();
    assert_eq!(members, 60);
}

/// The bound on extra admissions a policy documents, beyond the limit and what the promoted
/// replica lost (see ARCHITECTURE.md, "Failover").
#[derive(Debug)]
struct Outcome {
    counts: Vec<ChildCounts>,
    /// Units on the promoted master's window counter: every admission it knows of.
    known_to_new_master: u64,
    /// Members in the promoted master's window now.
    in_window: u64,
}

impl Outcome {
    fn store(&self) -> u64 {
        self.counts.iter().map(|c| c.store).sum()
    }

    /// Admissions the processes acted on that the promoted replica never received.
    fn lost(&self) -> u64 {
        self.store().saturating_sub(self.known_to_new_master)
    }
}

const LIMIT: u64 = 400;
const PROCESSES: usize = 3;

/// Three processes ask 50 times a second each for 10 s against a window of 400 a minute; once
/// 100 have been admitted the master owning the window is killed (SIGKILL). Its replica takes
/// over about two seconds later and the run goes on.
async fn master_killed_mid_burst(policy: FailPolicy) -> Option<Outcome> {
    let mut cluster = PrivateCluster::start(3, 1).await?;
    let key = unique_key("failover");
    let plans: Vec<ChildPlan> = (0..PROCESSES)
        .map(|_| ChildPlan { policy, ..plan(&cluster, &key, &format!("window:{LIMIT}:60"), 500, 10.0, 20) })
        .collect();
    let children = tokio::task::spawn_blocking(move || run_children(&plans));
    let master = cluster.master_of(&window_key(&key)).await;
    let mut connection = cluster.node_connection(master).await;
    // Killed once 100 are in and the replica has every write so far: what the kill loses is
    // then only what replication had in flight at that moment, not a replica still syncing
    // (or reconnecting) on a machine loaded by other tests.
    let patience = std::time::Instant::now() + Duration::from_secs(8);
    loop {
        assert!(std::time::Instant::now() < patience, "the replica never caught up while the burst ran");
        let members: u64 = connection.zcard(window_key(&key)).await.unwrap();
        if members >= 100 && cluster.replica_caught_up(master).await {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    cluster.kill(master);
    let counts = children.await.unwrap();
    cluster.wait_until_healthy(3).await.expect("the replica took over");
    let promoted = cluster.master_of(&window_key(&key)).await;
    assert_ne!(promoted, master, "a replica was promoted");
    let mut connection = cluster.node_connection(promoted).await;
    let in_window: u64 = connection.zcard(window_key(&key)).await.unwrap();
    let counter: Option<u64> = connection.get(format!("{{{SHARED_PREFIX}:{key}}}:window:seq")).await.unwrap();
    let outcome = Outcome { counts, known_to_new_master: counter.unwrap_or(0), in_window };
    redis_support::notice(&format!("failover under {policy}: {outcome:?}, lost {}", outcome.lost()));
    assert!(outcome.in_window <= LIMIT, "the promoted master's window never holds more than the limit: {outcome:?}");
    assert!(outcome.counts.iter().all(|c| c.unavailable >= 1), "every process saw the outage: {outcome:?}");
    assert!(outcome.counts.iter().all(|c| c.recoveries >= 1), "and the switch back to the store: {outcome:?}");
    // Loopback replication lags well under a millisecond; 15 is 100 ms of this demand.
    assert!(outcome.lost() <= 15, "{outcome:?}");
    Some(outcome)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn master_killed_mid_burst_fail_closed_admits_at_most_the_limit_plus_what_the_replica_lost() {
    let Some(outcome) = master_killed_mid_burst(FailPolicy::Closed).await else { return };
    assert!(outcome.counts.iter().all(|c| c.open == 0 && c.local == 0), "{outcome:?}");
    assert!(outcome.store() <= LIMIT + outcome.lost(), "{outcome:?}");
    // The budget goes on after the failover: the demand outlasts it, so the window fills.
    assert_eq!(outcome.in_window, LIMIT, "{outcome:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn master_killed_mid_burst_fail_open_sends_through_the_outage_and_counts_it() {
    let Some(outcome) = master_killed_mid_burst(FailPolicy::Open).await else { return };
    let open: u64 = outcome.counts.iter().map(|c| c.open).sum();
    assert!(open >= 1, "{outcome:?}");
    assert!(outcome.counts.iter().all(|c| c.local == 0), "{outcome:?}");
    // The store's share stays within the limit; what fail-open let through is on top, counted.
    assert!(outcome.store() <= LIMIT + outcome.lost(), "{outcome:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn master_killed_mid_burst_local_fallback_stays_within_each_processes_share() {
    let policy = FailPolicy::Local { instances: PROCESSES as u32 };
    let Some(outcome) = master_killed_mid_burst(policy).await else { return };
    let share = LIMIT / PROCESSES as u64;
    assert!(outcome.counts.iter().any(|c| c.local >= 1), "{outcome:?}");
    assert!(outcome.counts.iter().all(|c| c.local <= share && c.open == 0), "{outcome:?}");
    assert!(outcome.store() <= LIMIT + outcome.lost(), "{outcome:?}");
    let through: u64 = outcome.counts.iter().map(ChildCounts::through).sum();
    assert!(through <= LIMIT + outcome.lost() + PROCESSES as u64 * share, "{outcome:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_that_is_not_there_is_unavailable_not_an_error() {
    let store = RedisStore::connect_lazy(
        "redis+cluster://127.0.0.1:1,127.0.0.1:2",
        SHARED_PREFIX,
        ratescope::store::RedisStoreOptions::default(),
    )
    .unwrap();
    let budgets = [BudgetSpec::sliding_window("window", 5, Duration::from_secs(60)).unwrap()];
    let gate = SharedGate::new(store, StoreHealth::new(), "nobody", &budgets, FailPolicy::Open).unwrap();
    let admission = tokio::time::timeout(Duration::from_secs(5), gate.admit(1)).await.expect("no hang").unwrap();
    assert_eq!(admission.via, ratescope::store::AdmittedVia::FailOpen);
    assert!(matches!(gate.health().state(), StoreState::Degraded { .. }));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_line_shares_budgets_on_a_cluster() {
    let Some(cluster) = PrivateCluster::start(3, 0).await else { return };
    let api = redis_support::children::items_api().await;
    let key = format!("cli-cluster-{:08x}", rand::random::<u32>());
    let target = format!("{}items", api.url());
    let url = cluster.url();
    let args = ["burst", &target, "-n", "3", "--window", "3/1m", "--redis", &url, "--shared-key", &key, "--json"];
    let (code, stdout, stderr) =
        redis_support::children::ratescope_cli(args.iter().map(|arg| (*arg).to_owned()).collect()).await;
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let json: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(json["shared"]["counts"]["admitted"].as_u64(), Some(3), "{json}");
    assert_eq!(json["shared"]["counts"]["round_trips"].as_u64(), Some(3), "{json}");
    assert_eq!(json["shared"]["state"], "connected");
}

/// Issue #17 on a cluster: a tokens budget's settlement is one script on the slot's master, and
/// refunds and charges land there exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settlement_on_a_cluster_is_one_script_on_the_slots_master() {
    let Some(cluster) = PrivateCluster::start(3, 0).await else { return };
    let store = RedisStore::connect(&cluster.url(), SHARED_PREFIX).await.unwrap();
    let window = SharedBudget::sliding_window(1000, Duration::from_secs(60)).unwrap();
    let bucket = SharedBudget::token_bucket(1000, Rate::new(1000, Duration::from_secs(60)).unwrap()).unwrap();
    let specs = [
        SharedSpec::new("tpm", window).unwrap().with_unit(Unit::tokens()).unwrap(),
        SharedSpec::new("burst", bucket).unwrap().with_unit(Unit::tokens()).unwrap(),
    ];
    let tokens = |amount| Cost::requests(1).with(Unit::tokens(), amount);
    let before = cluster.script_calls().await;
    let mut keys = Vec::new();
    for i in 0..10 {
        let key = unique_key(&format!("settle-{i}"));
        let (decision, reservation) = store.reserve_all(&key, &specs, &tokens(100)).await.unwrap();
        assert!(decision.allowed);
        let mut reservation = reservation.expect("admitted");
        let settled = store.settle(&mut reservation, &tokens(if i % 2 == 0 { 40 } else { 130 })).await.unwrap();
        assert!(matches!(settled, Settled::Applied { after: 1, .. }), "{settled:?}");
        keys.push(key);
    }
    let after = cluster.script_calls().await;
    assert_eq!(after.0 - before.0, 20, "one EVALSHA per decision and one per settlement");
    assert!(after.1 - before.1 <= 6, "EVAL only on a master's first NOSCRIPT of each script");
    for (i, key) in keys.iter().enumerate() {
        let window_key = store.spec_keys(key, &specs[0])[0].clone();
        let mut node = cluster.node_connection(cluster.master_of(&window_key).await).await;
        let members: u64 = node.zcard(&window_key).await.unwrap();
        assert_eq!(members, if i % 2 == 0 { 40 } else { 130 }, "{window_key}");
    }
}
