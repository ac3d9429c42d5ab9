//! `RedisStore` against a real Redis (`RATESCOPE_REDIS_URL`, default redis://127.0.0.1:6379).
//!
//! Without a reachable server each test prints a NOTICE and passes, unless
//! `RATESCOPE_REQUIRE_REDIS=1`, when it fails instead. Every test uses its own random key
//! prefix and deletes its keys at the end (keys left by a failed test expire on their own).

use std::time::{Duration, Instant};

use ratescope::engine::{Cost, Unit};
use ratescope::store::{
    RedisStore, RedisStoreOptions, Reservation, Settled, SharedBudget, SharedSpec, StoreDecision, StoreError,
};
use redis::AsyncCommands;
use redis::aio::MultiplexedConnection;
use tokio::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

/// `SCRIPT FLUSH` is server-wide: the test that flushes holds this for writing, every other test for reading.
static SCRIPTS: RwLock<()> = RwLock::const_new(());

mod redis_support;

use redis_support::{redis_required, redis_url};

enum Guard {
    Concurrent(#[allow(dead_code)] RwLockReadGuard<'static, ()>),
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
        Self::with_guard(test, Guard::Concurrent(SCRIPTS.read().await)).await
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

/// A budget named `name` counting tokens.
fn tokens_budget(name: &str, budget: SharedBudget) -> SharedSpec {
    SharedSpec::new(name, budget).expect("a valid budget").with_unit(Unit::tokens()).expect("a valid unit")
}

/// One request spending `amount` tokens.
fn tokens(amount: u64) -> Cost {
    Cost::requests(1).with(Unit::tokens(), amount)
}

impl Fixture {
    async fn reserve(&self, key: &str, specs: &[SharedSpec], cost: &Cost) -> (StoreDecision, Option<Reservation>) {
        self.store.reserve_all(key, specs, cost).await.expect("a decision")
    }

    async fn settle(&self, reservation: &mut Reservation, actual: &Cost) -> Settled {
        self.store.settle(reservation, actual).await.expect("a settlement")
    }

    /// Members of `spec`'s window under `key`, by the admission (time and number) they belong to.
    async fn members_of(&mut self, key: &str, spec: &SharedSpec, reservation: &Reservation) -> usize {
        let window = self.store.spec_keys(key, spec)[0].clone();
        let members: Vec<String> = self.raw.zrange(&window, 0, -1).await.expect("ZRANGE");
        let own = format!("{}:{}:", reservation.at_micros(), reservation.number());
        members.iter().filter(|member| member.starts_with(&own)).count()
    }
}

#[tokio::test]
async fn a_window_refund_admits_what_fits_only_after_it_and_a_charge_is_debt() {
    let Some(mut fx) = Fixture::new("settle-window").await else { return };
    let tpm = [tokens_budget("tpm", window(100, Duration::from_secs(60)))];

    let (first, reservation) = fx.reserve("chat", &tpm, &tokens(100)).await;
    assert!(first.allowed);
    let mut first = reservation.expect("an admission has a reservation");
    let (denied, none) = fx.reserve("chat", &tpm, &tokens(60)).await;
    assert!(!denied.allowed && none.is_none(), "60 more do not fit before the refund");

    // The answer said 40: 60 come back, and exactly 60 more fit.
    assert!(matches!(fx.settle(&mut first, &tokens(40)).await, Settled::Applied { .. }));
    assert_eq!(first.units("tpm", &Unit::tokens()), Some(40));
    let (second, reservation) = fx.reserve("chat", &tpm, &tokens(60)).await;
    assert_eq!((second.allowed, second.remaining), (true, 0), "{second:?}");
    let second = reservation.expect("admitted");
    assert_eq!(second.number(), first.number() + 1, "admissions are numbered in order");

    // The first settles again, now at 150: counted at its own time, a debt. One request counts at
    // most one unit above the limit in a window: that holds it shut until the request leaves.
    fx.settle(&mut first, &tokens(150)).await;
    assert_eq!(fx.members_of("chat", &tpm[0], &first).await, 101);
    assert_eq!(fx.members_of("chat", &tpm[0], &second).await, 60, "the other admission is untouched");
    let (in_debt, _) = fx.reserve("chat", &tpm, &tokens(1)).await;
    let wait = in_debt.retry_after.expect("the debt delays the next admission");
    assert!(wait > Duration::from_secs(59), "only the first admission leaving frees the window: {wait:?}");
    let (nothing, _) = fx.reserve("chat", &tpm, &tokens(0)).await;
    assert!(!nothing.allowed, "a window in debt holds even a request that spends none of it");

    // Settling what is already counted sends nothing.
    assert_eq!(fx.settle(&mut first, &tokens(150)).await, Settled::Unchanged);
    assert_eq!(first.units("tpm", &Unit::tokens()), Some(101));
    fx.cleanup().await;
}

#[tokio::test]
async fn a_bucket_refund_refills_never_past_full_and_a_charge_delays_the_next_admission() {
    let Some(fx) = Fixture::new("settle-bucket").await else { return };
    // 100 tokens, one back per second: nothing refills noticeably while the test runs.
    let tpm = [tokens_budget("tpm", bucket(100, Duration::from_secs(1)))];

    let (_, reservation) = fx.reserve("chat", &tpm, &tokens(100)).await;
    let mut first = reservation.expect("admitted");
    assert!(!fx.reserve("chat", &tpm, &tokens(60)).await.0.allowed);
    fx.settle(&mut first, &tokens(40)).await;
    let (second, reservation) = fx.reserve("chat", &tpm, &tokens(60)).await;
    assert!(second.allowed, "the refund refilled 60: {second:?}");
    let mut second = reservation.expect("admitted");

    // 150 instead of 60, counted as the whole bucket (100; a bucket of 100 would have refused
    // more): a debt of 40 tokens; the next token is 41 seconds away, not one (nor 91).
    fx.settle(&mut second, &tokens(150)).await;
    let (in_debt, _) = fx.reserve("chat", &tpm, &tokens(1)).await;
    let wait = in_debt.retry_after.expect("the debt delays the next admission");
    assert!(wait > Duration::from_secs(40) && wait <= Duration::from_secs(41), "{wait:?}");
    assert!(!fx.reserve("chat", &tpm, &Cost::requests(1)).await.0.allowed, "a bucket in debt holds everyone");

    // Both settled to nothing: the bucket is full again, and holds 100, not more.
    fx.settle(&mut first, &tokens(0)).await;
    fx.settle(&mut second, &tokens(0)).await;
    assert!(fx.reserve("chat", &tpm, &tokens(100)).await.0.allowed);
    assert!(!fx.reserve("chat", &tpm, &tokens(1)).await.0.allowed);

    // A refund to a bucket that refilled meanwhile adds nothing: full is full.
    let fast = [tokens_budget("fast", bucket(100, Duration::from_millis(1)))];
    let (_, reservation) = fx.reserve("refill", &fast, &tokens(100)).await;
    tokio::time::sleep(Duration::from_millis(150)).await;
    fx.settle(&mut reservation.expect("admitted"), &tokens(0)).await;
    assert!(fx.reserve("refill", &fast, &tokens(100)).await.0.allowed);
    assert!(!fx.reserve("refill", &fast, &tokens(50)).await.0.allowed, "the refund did not overfill the bucket");
    fx.cleanup().await;
}

#[tokio::test]
async fn a_reservation_never_settled_keeps_its_estimate_and_units_keep_their_own_keys() {
    let Some(mut fx) = Fixture::new("settle-never").await else { return };
    let minute = window(100, Duration::from_secs(60));
    let specs = [SharedSpec::new("minute", minute).unwrap(), tokens_budget("minute", minute)];

    let (admitted, reservation) = fx.reserve("chat", &specs, &tokens(70)).await;
    assert!(admitted.allowed);
    let reservation = reservation.expect("admitted");
    drop(reservation);
    let (denied, _) = fx.reserve("chat", &specs, &tokens(40)).await;
    assert_eq!((denied.allowed, denied.blocked_by), (false, Some(1)), "70 tokens still counted");

    // One requests budget and one tokens budget of the same name: separate keys, separate counts.
    let requests_window = fx.store.spec_keys("chat", &specs[0])[0].clone();
    let tokens_window = fx.store.spec_keys("chat", &specs[1])[0].clone();
    assert_ne!(requests_window, tokens_window);
    assert!(tokens_window.ends_with(":minute:tokens:window"), "{tokens_window}");
    assert_eq!(fx.raw.zcard::<_, u64>(&requests_window).await.unwrap(), 1);
    assert_eq!(fx.raw.zcard::<_, u64>(&tokens_window).await.unwrap(), 70);
    fx.cleanup().await;
}

#[tokio::test]
async fn lying_settlements_of_admissions_together_leave_a_budget_at_most_one_capacity_in_debt() {
    let Some(mut fx) = Fixture::new("settle-lies").await else { return };
    // A bucket of 100 tokens, one back per second, and a window of 100 a minute: three
    // requests of 10 fit in each, and each answer says a million.
    let tpm = [tokens_budget("tpm", bucket(100, Duration::from_secs(1)))];
    let tpw = [tokens_budget("tpw", window(100, Duration::from_secs(60)))];
    for specs in [&tpm, &tpw] {
        let mut admitted = Vec::new();
        for _ in 0..3 {
            admitted.push(fx.reserve("chat", specs, &tokens(10)).await.1.expect("admitted"));
        }
        for reservation in &mut admitted {
            fx.settle(reservation, &tokens(1_000_000)).await;
        }
        let (in_debt, _) = fx.reserve("chat", specs, &tokens(1)).await;
        let wait = in_debt.retry_after.expect("the debt delays the next admission");
        // The bucket: one capacity owed (100 s) and the token itself, not 200 s more.
        assert!(wait <= Duration::from_secs(101), "{wait:?}");
    }
    let members: u64 = fx.raw.zcard(&fx.store.spec_keys("chat", &tpw[0])[0]).await.expect("ZCARD");
    assert_eq!(members, 200, "the window holds at most twice its limit, not 3 × 101 members");
    fx.cleanup().await;
}
