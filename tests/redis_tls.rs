//! Shared budgets over TLS with an ACL user: a redis-server of the test's own with a CA made at start, the default user off, one user limited to the decision script's commands.
//!
//! Without `redis-server` or `openssl` the tests print a NOTICE and pass, unless
//! `RATESCOPE_REQUIRE_REDIS=1` makes them fail.

mod redis_support;

use std::time::Duration;

use ratescope::engine::BudgetSpec;
use ratescope::store::{
    FailPolicy, RedisStore, RedisStoreOptions, SHARED_PREFIX, SharedGate, SharedSettings, StoreAddress, StoreError,
    StoreHealth,
};
use redis::AsyncCommands;
use redis_support::children::{ChildCounts, ChildPlan, run_children};
use redis_support::topology::{ACL_PASSWORD, ACL_USER, TlsRedis};

#[test]
#[ignore = "the body of the child processes that the other tests start"]
fn child_role() {
    redis_support::children::child_main();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_sharing_one_window_over_tls_as_an_acl_user_admit_exactly_its_allowance() {
    let Some(server) = TlsRedis::start().await else { return };
    let key = format!("tls-{:016x}/api.example.com", rand::random::<u64>());
    let plan = ChildPlan {
        url: server.url(),
        ca_file: Some(server.ca_file.clone()),
        key: key.clone(),
        budget: "window:12:60".to_owned(),
        want: 6,
        seconds: 2.0,
        pace_ms: 0,
        policy: FailPolicy::Closed,
    };
    let plans = vec![plan; 4];
    let counts = tokio::task::spawn_blocking(move || run_children(&plans)).await.unwrap();
    let admitted: u64 = counts.iter().map(ChildCounts::through).sum();
    assert_eq!(admitted, 12, "per process: {counts:?}");
    assert!(counts.iter().all(|c| c.unavailable == 0), "{counts:?}");
    let mut admin = server.admin().await;
    let members: u64 = admin.zcard(format!("{{{SHARED_PREFIX}:{key}}}:window:window")).await.unwrap();
    assert_eq!(members, 12);
}

fn window() -> [BudgetSpec; 1] {
    [BudgetSpec::sliding_window("window", 5, Duration::from_secs(60)).unwrap()]
}

async fn admit_once(url: &str, ca: Option<&std::path::Path>) -> Result<(), StoreError> {
    let mut address = StoreAddress::parse(url)?;
    if let Some(ca) = ca {
        address = address.with_ca_file(ca)?;
    }
    let store = RedisStore::connect_lazy_to(&address, SHARED_PREFIX, RedisStoreOptions::default())?;
    let gate = SharedGate::new(store, StoreHealth::new(), "tls-refusals/api", &window(), FailPolicy::Closed)?;
    tokio::time::timeout(Duration::from_secs(10), gate.admit(1)).await.expect("an answer, not a wait").map(drop)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_credentials_an_unknown_ca_or_plaintext_are_refused_at_once() {
    let Some(server) = TlsRedis::start().await else { return };
    let ca = server.ca_file.as_path();
    admit_once(&server.url(), Some(ca)).await.expect("the right user, password and CA");

    let wrong_password = format!("rediss://{ACL_USER}:not-{ACL_PASSWORD}@127.0.0.1:{}", server.port);
    let err = admit_once(&wrong_password, Some(ca)).await.unwrap_err();
    assert!(matches!(err, StoreError::Refused(_)), "{err}");
    assert!(!err.to_string().contains(ACL_PASSWORD), "the password leaked: {err}");

    // The default user is off: no user, no entry.
    let no_user = format!("rediss://127.0.0.1:{}", server.port);
    assert!(matches!(admit_once(&no_user, Some(ca)).await.unwrap_err(), StoreError::Refused(_)));

    // The system's roots do not know the test CA: the certificate is not trusted. That is not
    // a passing outage but a setting to fix, so it must not be waited out either.
    let err = admit_once(&server.url(), None).await.unwrap_err();
    assert!(matches!(err, StoreError::Refused(_)), "an untrusted certificate: {err}");
    assert!(err.to_string().contains("certificate"), "{err}");

    // A plaintext client at a TLS port: the server hangs up, which looks like an outage.
    let plaintext = format!("redis://{ACL_USER}:{ACL_PASSWORD}@127.0.0.1:{}", server.port);
    let store = RedisStore::connect_lazy(&plaintext, SHARED_PREFIX, RedisStoreOptions::default()).unwrap();
    let budget = ratescope::store::SharedBudget::try_from(window()[0].kind).unwrap();
    let err = store.acquire("tls-refusals/api", &budget, 1).await.unwrap_err();
    assert!(err.is_unavailable(), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acl_user_without_the_scripts_is_refused_not_waited_for() {
    let Some(server) = TlsRedis::start().await else { return };
    let mut admin = server.admin().await;
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("reader")
        .arg("on")
        .arg(">reader-pw")
        .arg("~*")
        .arg("+get")
        .arg("+ping")
        .arg("+hello")
        .query_async(&mut admin)
        .await
        .unwrap();
    let url = format!("rediss://reader:reader-pw@127.0.0.1:{}", server.port);
    let err = admit_once(&url, Some(&server.ca_file)).await.unwrap_err();
    assert!(matches!(err, StoreError::Refused(_)), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_settings_with_a_ca_file_reach_the_tls_server() {
    let Some(server) = TlsRedis::start().await else { return };
    let settings = SharedSettings::new(server.url(), "tls-settings").unwrap().with_ca_file(&server.ca_file).unwrap();
    assert!(!format!("{settings:?}").contains(ACL_PASSWORD));
    let store = RedisStore::connect_to(&settings.address().unwrap(), SHARED_PREFIX, settings.options).await.unwrap();
    let budget = ratescope::store::SharedBudget::try_from(window()[0].kind).unwrap();
    assert!(store.acquire("tls-settings/api", &budget, 1).await.unwrap().allowed);
    let plain = SharedSettings::new("redis://127.0.0.1:6379", "x").unwrap();
    assert!(plain.with_ca_file(&server.ca_file).unwrap_err().to_string().contains("only used with TLS"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_line_shares_budgets_over_tls_with_a_ca_file() {
    let Some(server) = TlsRedis::start().await else { return };
    let api = redis_support::children::items_api().await;
    let key = format!("cli-tls-{:08x}", rand::random::<u32>());
    let ca = server.ca_file.display().to_string();
    let target = format!("{}items", api.url());
    let common = [target.as_str(), "-n", "3", "--window", "3/1m", "--shared-key", key.as_str(), "--json"];
    let mut args: Vec<String> = common.iter().map(|arg| (*arg).to_owned()).collect();
    args.extend(["--redis".to_owned(), server.url(), "--redis-ca".to_owned(), ca.clone()]);
    args.insert(0, "burst".to_owned());
    let (code, stdout, stderr) = redis_support::children::ratescope_cli(args).await;
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let json: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(json["shared"]["counts"]["admitted"].as_u64(), Some(3), "{json}");
    assert_eq!(json["shared"]["state"], "connected");
    assert!(!stdout.contains(ACL_PASSWORD) && !stderr.contains(ACL_PASSWORD), "the password leaked");

    // A CA file for a plaintext URL is a usage error, said before anything is sent.
    let mut args: Vec<String> = common.iter().map(|arg| (*arg).to_owned()).collect();
    args.extend(["--redis".to_owned(), "redis://127.0.0.1:6379".to_owned(), "--redis-ca".to_owned(), ca]);
    args.insert(0, "burst".to_owned());
    let (code, _, stderr) = redis_support::children::ratescope_cli(args).await;
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("only used with TLS"), "{stderr}");
    assert!(api.arrivals().len() == 3, "the refused run sent nothing");
}
