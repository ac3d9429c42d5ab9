//! `RedisStore` against a real Redis (`RATESCOPE_REDIS_URL`, default redis://127.0.0.1:6379).
//!
//! Without a reachable server each test prints a NOTICE and passes, unless
//! `RATESCOPE_REQUIRE_REDIS=1`, when it fails instead. Every test uses its own random key
//! prefix and deletes its keys at the end (keys left by a failed test expire on their own).

use std::time::{Duration, Instant};

use ratescope::store::{RedisStore, RedisStoreOptions, SharedBudget, StoreDecision, StoreError};
use redis::AsyncCommands;
use redis::aio::MultiplexedConnection;
use tokio::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

/// `SCRIPT FLUSH` is server-wide: the test that flushes holds this for writing, every other test for reading.
static SCRIPTS: RwLock<()> = RwLock::const_new(());

mod redis_support;

use redis_support::{redis_required, redis_url};

enum Guard {
    Shared(#[allow(dead_code)] RwLockReadGuard<'static, ()>),
    Exclusive(#[allow(dead_code)] RwLockWriteGuard<'static, ()>),
}

struct Fixture {
    store: RedisStore,
    raw: MultiplexedConnection,
    prefix: String,
    _guard: Guard,
}

impl Fixture {
    async fn new(test: &str) -> Option<Self> {
        Self::with_guard(test, Guard::Shared(SCRIPTS.read().await)).await
    }

    async fn exclusive(test: &str) -> Option<Self> {
        Self::with_guard(test, Guard::Exclusive(SCRIPTS.write().await)).await
    }

    async fn with_guard(test: &str, guard: Guard) -> Option<Self> {
        let url = redis_url();
        let prefix = format!("ratescope-test:{test}:{:016x}", rand::random::<u64>());
        let store = match RedisStore::connect(&url, &prefix).await {
            Ok(store) => store,
            Err(err) if err.is_unavailable() && !redis_required() => {
                redis_support::notice(&format!(
                    "skipping Redis tests: {err} (set RATESCOPE_REQUIRE_REDIS=1 to fail instead)"
                ));
                return None;
            }
            Err(err) if err.is_unavailable() => {
                panic!("Redis is required (RATESCOPE_REQUIRE_REDIS=1) but unreachable at {url}: {err}")
            }
            Err(err) => panic!("the store refused the test's settings: {err}"),
        };
        let raw = redis::Client::open(url.as_str())
            .expect("URL already accepted by the store")
            .get_multiplexed_async_connection()
            .await
            .expect("raw connection to the Redis the store just reached");
        Some(Self { store, raw, prefix, _guard: guard })
    }

    async fn acquire(&self, key: &str, budget: &SharedBudget, cost: u64) -> StoreDecision {
        self.store.acquire(key, budget, cost).await.expect("a decision")
    }

    /// Every key under this test's prefix.
    async fn our_keys(&mut self) -> Vec<String> {
        let pattern = format!("{{{}:*", self.prefix);
        let mut keys = Vec::new();
        let mut iter: redis::AsyncIter<String> = self.raw.scan_match(pattern).await.expect("SCAN");
        while let Some(key) = iter.next_item().await {
            keys.push(key.expect("a key name"));
        }
        keys
    }

    async fn cleanup(mut self) {
        let keys = self.our_keys().await;
        if !keys.is_empty() {
            let _: () = self.raw.del(keys).await.expect("DEL");
        }
        assert!(self.our_keys().await.is_empty(), "keys left behind");
    }
}

fn window(limit: u64, window: Duration) -> SharedBudget {
    SharedBudget::sliding_window(limit, window).expect("valid window")
}

fn bucket(capacity: u64, per_token: Duration) -> SharedBudget {
    let budget = SharedBudget::TokenBucket { capacity, per_token };
    budget.validate().expect("valid bucket");
    budget
}

#[tokio::test]
async fn sliding_window_admits_the_limit_and_retry_after_is_exact() {
    let Some(fx) = Fixture::new("window").await else { return };
    let budget = window(5, Duration::from_secs(2));

    let mut decisions = Vec::new();
    for _ in 0..20 {
        decisions.push(fx.acquire("api", &budget, 1).await);
    }
    assert_eq!(decisions.iter().filter(|d| d.allowed).count(), 5, "{decisions:?}");
    for (i, decision) in decisions[..5].iter().enumerate() {
        assert!(decision.allowed);
        assert_eq!(decision.remaining, 4 - i as u64);
        assert_eq!(decision.retry_after, None);
    }
    let sixth = decisions[5];
    assert!(!sixth.allowed);
    assert_eq!(sixth.remaining, 0);
    let wait = sixth.retry_after.expect("a denied call says how long to wait");
    assert!(wait > Duration::ZERO && wait <= Duration::from_secs(2), "{wait:?}");
    assert!(decisions[5..].iter().all(|d| !d.allowed && d.retry_after.is_some()));

    // Just before the promised instant it is still denied; at it, exactly one more fits.
    let last_wait = decisions[19].retry_after.expect("denied");
    tokio::time::sleep(last_wait.saturating_sub(Duration::from_millis(100))).await;
    let early = fx.acquire("api", &budget, 1).await;
    assert!(!early.allowed, "admitted ~100 ms before retry_after: {early:?}");
    let rest = early.retry_after.expect("denied");
    assert!(rest <= Duration::from_millis(110), "{rest:?}");
    tokio::time::sleep(rest).await;
    let after = fx.acquire("api", &budget, 1).await;
    assert!(after.allowed, "not admitted after sleeping retry_after: {after:?}");

    fx.cleanup().await;
}

#[tokio::test]
async fn window_costs_count_units_and_wait_for_the_right_unit() {
    let Some(fx) = Fixture::new("units").await else { return };
    let budget = window(5, Duration::from_secs(1));

    assert!(fx.acquire("k", &budget, 2).await.allowed);
    tokio::time::sleep(Duration::from_millis(60)).await;
    let full = fx.acquire("k", &budget, 3).await;
    assert_eq!((full.allowed, full.remaining), (true, 0));

    // Three units must leave for a cost of 3: the third oldest is from the later batch.
    let three = fx.acquire("k", &budget, 3).await;
    let two = fx.acquire("k", &budget, 2).await;
    assert!(!three.allowed && !two.allowed);
    let (three, two) = (three.retry_after.expect("denied"), two.retry_after.expect("denied"));
    assert!(three >= two + Duration::from_millis(45), "cost 3 waits {three:?}, cost 2 waits {two:?}");

    fx.cleanup().await;
}

#[tokio::test]
async fn denied_calls_write_nothing() {
    let Some(mut fx) = Fixture::new("denied").await else { return };

    let budget = window(5, Duration::from_secs(10));
    for _ in 0..5 {
        assert!(fx.acquire("w", &budget, 1).await.allowed);
    }
    let keys = fx.store.redis_keys("w", &budget);
    let (set, seq) = (&keys[0], &keys[1]);
    let members: Vec<(String, f64)> = fx.raw.zrange_withscores(set, 0, -1).await.expect("ZRANGE");
    let counter: u64 = fx.raw.get(seq).await.expect("GET");
    let ttl: i64 = fx.raw.pttl(set).await.expect("PTTL");
    tokio::time::sleep(Duration::from_millis(30)).await;
    for _ in 0..100 {
        assert!(!fx.acquire("w", &budget, 1).await.allowed);
    }
    let zcard: u64 = fx.raw.zcard(set).await.expect("ZCARD");
    assert_eq!(zcard, 5);
    let members_after: Vec<(String, f64)> = fx.raw.zrange_withscores(set, 0, -1).await.expect("ZRANGE");
    assert_eq!(members_after, members);
    let counter_after: u64 = fx.raw.get(seq).await.expect("GET");
    assert_eq!(counter_after, counter);
    let ttl_after: i64 = fx.raw.pttl(set).await.expect("PTTL");
    assert!(ttl_after <= ttl - 25, "a denied call refreshed the TTL: {ttl} -> {ttl_after}");

    let budget = bucket(3, Duration::from_secs(1));
    for _ in 0..3 {
        assert!(fx.acquire("b", &budget, 1).await.allowed);
    }
    let tat_key = &fx.store.redis_keys("b", &budget)[0];
    let tat: String = fx.raw.get(tat_key).await.expect("GET");
    let ttl: i64 = fx.raw.pttl(tat_key).await.expect("PTTL");
    tokio::time::sleep(Duration::from_millis(30)).await;
    for _ in 0..100 {
        assert!(!fx.acquire("b", &budget, 1).await.allowed);
    }
    let tat_after: String = fx.raw.get(tat_key).await.expect("GET");
    assert_eq!(tat_after, tat);
    let ttl_after: i64 = fx.raw.pttl(tat_key).await.expect("PTTL");
    assert!(ttl_after <= ttl - 25, "a denied call refreshed the TTL: {ttl} -> {ttl_after}");

    fx.cleanup().await;
}

#[tokio::test]
async fn gcra_bucket_admits_capacity_then_one_per_token() {
    let Some(fx) = Fixture::new("gcra").await else { return };
    let budget = bucket(3, Duration::from_millis(200));

    for expected in [2, 1, 0] {
        let decision = fx.acquire("api", &budget, 1).await;
        assert_eq!(decision, StoreDecision { allowed: true, remaining: expected, retry_after: None, blocked_by: None });
    }
    let fourth = fx.acquire("api", &budget, 1).await;
    assert!(!fourth.allowed);
    assert_eq!(fourth.remaining, 0);
    let wait = fourth.retry_after.expect("denied");
    assert!(wait >= Duration::from_millis(180) && wait <= Duration::from_millis(220), "retry_after {wait:?}");

    tokio::time::sleep(wait).await;
    let next = fx.acquire("api", &budget, 1).await;
    assert!(next.allowed, "{next:?}");
    assert!(!fx.acquire("api", &budget, 1).await.allowed, "only one token refilled");

    fx.cleanup().await;
}

#[tokio::test]
async fn cost_larger_than_the_budget_is_refused_up_front() {
    let Some(mut fx) = Fixture::new("cost").await else { return };
    let budget = window(5, Duration::from_secs(2));
    let err = fx.store.acquire("k", &budget, 6).await.expect_err("cost 6 in a budget of 5");
    assert!(matches!(err, StoreError::CostTooLarge { cost: 6, capacity: 5 }), "{err}");
    let err = fx.store.acquire("k", &bucket(3, Duration::from_secs(1)), 4).await.expect_err("cost 4 in 3");
    assert!(matches!(err, StoreError::CostTooLarge { cost: 4, capacity: 3 }), "{err}");
    assert!(fx.our_keys().await.is_empty(), "a refused cost wrote keys");
    fx.cleanup().await;
}

/// Needs no Redis: a store pointed at a closed port proves which errors happen before any I/O.
#[tokio::test]
async fn refusals_happen_before_io_and_an_absent_server_is_unavailable() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("free port").port();
    let url = format!("redis://127.0.0.1:{port}");
    let options = RedisStoreOptions { command_timeout: Duration::from_millis(800), ..RedisStoreOptions::default() };

    let lazy = RedisStore::connect_lazy(&url, "ratescope-test", options).expect("lazy store");
    let budget = window(5, Duration::from_secs(2));
    let err = lazy.acquire("k", &budget, 6).await.expect_err("too large");
    assert!(matches!(err, StoreError::CostTooLarge { cost: 6, capacity: 5 }), "{err}");
    let err = lazy.acquire("k", &budget, 0).await.expect_err("zero cost");
    assert!(matches!(err, StoreError::InvalidSettings(_)), "{err}");
    let bad = SharedBudget::SlidingWindow { limit: 0, window: Duration::from_secs(1) };
    assert!(matches!(lazy.acquire("k", &bad, 1).await, Err(StoreError::InvalidSettings(_))));

    let started = Instant::now();
    let err = lazy.acquire("k", &budget, 1).await.expect_err("nothing listens there");
    assert!(err.is_unavailable(), "{err}");
    assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());

    let started = Instant::now();
    let err = RedisStore::connect(&url, "ratescope-test").await.expect_err("nothing listens there");
    assert!(err.is_unavailable(), "{err}");
    assert!(started.elapsed() < Duration::from_secs(3), "{:?}", started.elapsed());

    assert!(matches!(RedisStore::connect("not a url", "p").await, Err(StoreError::InvalidSettings(_))));
    assert!(matches!(RedisStore::connect(&url, "a{b}").await, Err(StoreError::InvalidSettings(_))));
}

#[tokio::test]
async fn every_key_has_a_ttl() {
    let Some(mut fx) = Fixture::new("ttl").await else { return };

    let budget = window(5, Duration::from_secs(2));
    assert!(fx.acquire("w", &budget, 1).await.allowed);
    for key in fx.store.redis_keys("w", &budget) {
        assert!(key.starts_with(&format!("{{{}:w}}:", fx.prefix)), "{key} is not hash-tagged");
        let ttl: i64 = fx.raw.pttl(&key).await.expect("PTTL");
        assert!(ttl > 0 && ttl <= 2000, "{key}: PTTL {ttl}");
    }

    let budget = bucket(3, Duration::from_millis(200));
    assert!(fx.acquire("b", &budget, 1).await.allowed);
    for key in fx.store.redis_keys("b", &budget) {
        let ttl: i64 = fx.raw.pttl(&key).await.expect("PTTL");
        assert!(ttl > 0 && ttl <= 200, "{key}: PTTL {ttl} (one token spent: full again in 200 ms)");
    }

    fx.cleanup().await;
}

#[tokio::test]
async fn script_flush_between_calls_reloads_the_script() {
    let Some(mut fx) = Fixture::exclusive("flush").await else { return };
    let hashes = [redis::Script::new(ratescope::store::DECIDE_SCRIPT).get_hash().to_owned()];
    let window_budget = window(5, Duration::from_secs(2));
    let bucket_budget = bucket(3, Duration::from_secs(1));

    assert_eq!(fx.acquire("w", &window_budget, 1).await.remaining, 4);
    assert_eq!(fx.acquire("b", &bucket_budget, 1).await.remaining, 2);
    let _: () = redis::cmd("SCRIPT").arg("FLUSH").query_async(&mut fx.raw).await.expect("SCRIPT FLUSH");
    let exists: Vec<bool> =
        redis::cmd("SCRIPT").arg("EXISTS").arg(&hashes).query_async(&mut fx.raw).await.expect("SCRIPT EXISTS");
    assert_eq!(exists, [false]);

    assert_eq!(fx.acquire("w", &window_budget, 1).await.remaining, 3);
    assert_eq!(fx.acquire("b", &bucket_budget, 1).await.remaining, 1);
    let exists: Vec<bool> =
        redis::cmd("SCRIPT").arg("EXISTS").arg(&hashes).query_async(&mut fx.raw).await.expect("SCRIPT EXISTS");
    assert_eq!(exists, [true]);

    fx.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_tasks_share_one_window_exactly() {
    let Some(mut fx) = Fixture::new("concurrent").await else { return };
    let budget = window(10, Duration::from_secs(30));

    let mut tasks = tokio::task::JoinSet::new();
    for task in 0..4 {
        // Half the tasks share the fixture's connection, half open their own, like separate processes.
        let store = if task % 2 == 0 {
            fx.store.clone()
        } else {
            RedisStore::connect(&redis_url(), fx.store.prefix()).await.expect("second store")
        };
        tasks.spawn(async move {
            let mut admitted = 0u64;
            for _ in 0..25 {
                if store.acquire("shared", &budget, 1).await.expect("a decision").allowed {
                    admitted += 1;
                }
            }
            admitted
        });
    }
    let admitted: u64 = tasks.join_all().await.into_iter().sum();
    assert_eq!(admitted, 10);
    let zcard: u64 = fx.raw.zcard(&fx.store.redis_keys("shared", &budget)[0]).await.expect("ZCARD");
    assert_eq!(zcard, 10);

    fx.cleanup().await;
}
