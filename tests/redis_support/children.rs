//! Child processes that share one budget: the test binary started again in its `child_role` test, each asking a gate for admissions and printing what it got.
//!
//! A test file that uses this declares
//! `#[test] #[ignore] fn child_role() { redis_support::children::child_main() }` and calls
//! [`run_children`]. A child that does not finish in its time plus a margin is killed and
//! fails the test: "no process hangs" is asserted, not hoped for.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ratescope::engine::{BudgetSpec, Rate};
use ratescope::store::{
    AdmittedVia, FailPolicy, RedisStore, RedisStoreOptions, SHARED_PREFIX, SharedGate, StoreAddress, StoreHealth,
};

/// What one child does.
#[derive(Debug, Clone)]
pub struct ChildPlan {
    pub url: String,
    pub ca_file: Option<PathBuf>,
    pub key: String,
    /// `window:LIMIT:SECONDS` or `bucket:CAPACITY:PER_SECOND`.
    pub budget: String,
    pub want: usize,
    /// Stop asking after this long (what is still waiting then is given up).
    pub seconds: f64,
    /// Ask at most once per this many milliseconds (0: back to back).
    pub pace_ms: u64,
    pub policy: FailPolicy,
}

/// What one child got, by the gate's own counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChildCounts {
    pub store: u64,
    pub open: u64,
    pub local: u64,
    pub unavailable: u64,
    pub recoveries: u64,
}

impl ChildCounts {
    /// Requests that went through, by any way.
    pub fn through(&self) -> u64 {
        self.store + self.open + self.local
    }
}

/// The budget a plan names, the same in every process.
pub fn budget_of(text: &str) -> BudgetSpec {
    let parts: Vec<&str> = text.split(':').collect();
    match parts.as_slice() {
        ["window", limit, seconds] => {
            BudgetSpec::sliding_window("window", limit.parse().unwrap(), Duration::from_secs(seconds.parse().unwrap()))
                .unwrap()
        }
        ["bucket", capacity, per_second] => BudgetSpec::token_bucket(
            "bucket",
            capacity.parse().unwrap(),
            Rate::new(per_second.parse().unwrap(), Duration::from_secs(1)).unwrap(),
        )
        .unwrap(),
        _ => panic!("not a budget: {text}"),
    }
}

/// The body of `child_role`: reads the plan from the environment, prints `COUNTS …`.
pub fn child_main() {
    let var = |name: &str| std::env::var(name).unwrap_or_else(|_| panic!("{name} is set by the parent test"));
    let url = var("CHILD_URL");
    let ca_file = std::env::var_os("CHILD_CA").map(PathBuf::from);
    let key = var("CHILD_KEY");
    let budget = budget_of(&var("CHILD_BUDGET"));
    let want: usize = var("CHILD_WANT").parse().unwrap();
    let seconds: f64 = var("CHILD_SECONDS").parse().unwrap();
    let pace = Duration::from_millis(var("CHILD_PACE_MS").parse().unwrap());
    let policy: FailPolicy = var("CHILD_POLICY").parse().unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let counts = runtime.block_on(async {
        let mut address = StoreAddress::parse(&url).unwrap();
        if let Some(ca) = &ca_file {
            address = address.with_ca_file(ca).unwrap();
        }
        let store = RedisStore::connect_lazy_to(&address, SHARED_PREFIX, RedisStoreOptions::default()).unwrap();
        let gate = SharedGate::new(store, StoreHealth::new(), key, &[budget], policy).unwrap();
        let start = tokio::time::Instant::now();
        let deadline = start + Duration::from_secs_f64(seconds);
        for i in 0..want {
            let turn = start + pace * u32::try_from(i).unwrap();
            if turn >= deadline {
                break;
            }
            tokio::time::sleep_until(turn).await;
            match tokio::time::timeout_at(deadline, gate.admit(1)).await {
                Ok(Ok(admission)) => assert!(matches!(
                    admission.via,
                    AdmittedVia::Store | AdmittedVia::FailOpen | AdmittedVia::LocalFallback
                )),
                Ok(Err(err)) => panic!("the gate failed: {err}"),
                Err(_) => break,
            }
        }
        gate.health().counts()
    });
    println!(
        "COUNTS {} {} {} {} {}",
        counts.admitted, counts.failed_open, counts.local_fallback, counts.unavailable, counts.recoveries
    );
}

/// Runs one child per plan at once; returns their counts, in order. Panics if one fails or
/// is still running 30 s after its time is up.
pub fn run_children(plans: &[ChildPlan]) -> Vec<ChildCounts> {
    let exe = std::env::current_exe().unwrap();
    let mut children: Vec<_> = plans
        .iter()
        .map(|plan| {
            let mut command = Command::new(&exe);
            command
                .args(["child_role", "--exact", "--ignored", "--nocapture", "--test-threads=1"])
                .env("CHILD_URL", &plan.url)
                .env("CHILD_KEY", &plan.key)
                .env("CHILD_BUDGET", &plan.budget)
                .env("CHILD_WANT", plan.want.to_string())
                .env("CHILD_SECONDS", plan.seconds.to_string())
                .env("CHILD_PACE_MS", plan.pace_ms.to_string())
                .env("CHILD_POLICY", policy_arg(plan.policy))
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            if let Some(ca) = &plan.ca_file {
                command.env("CHILD_CA", ca);
            }
            (command.spawn().unwrap(), plan.seconds)
        })
        .collect();
    let started = Instant::now();
    let mut counts = Vec::new();
    for (child, seconds) in &mut children {
        let limit = Duration::from_secs_f64(*seconds) + Duration::from_secs(30);
        loop {
            if child.try_wait().unwrap().is_some() {
                break;
            }
            if started.elapsed() > limit {
                let _ = child.kill();
                panic!("a child process hung: still running {limit:?} after it started");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    for (child, _) in children {
        let output = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(output.status.success(), "child failed: {stdout}\n{}", String::from_utf8_lossy(&output.stderr));
        let line = stdout.lines().find_map(|line| line.split("COUNTS ").nth(1)).expect("a COUNTS line");
        let numbers: Vec<u64> = line.split_whitespace().map(|n| n.parse().unwrap()).collect();
        let [store, open, local, unavailable, recoveries] = numbers[..] else { panic!("bad COUNTS line {line}") };
        counts.push(ChildCounts { store, open, local, unavailable, recoveries });
    }
    counts
}

/// The policy as `--on-redis-failure` takes it.
fn policy_arg(policy: FailPolicy) -> String {
    match policy {
        FailPolicy::Local { instances } => format!("local/{instances}"),
        other => other.name().to_owned(),
    }
}

/// The built `ratescope` binary run with `args` and a config directory of its own: (exit code, stdout, stderr).
pub async fn ratescope_cli(args: Vec<String>) -> (i32, String, String) {
    let config = tempfile::tempdir().unwrap();
    tokio::task::spawn_blocking(move || {
        let output = Command::new(env!("CARGO_BIN_EXE_ratescope"))
            .args(&args)
            .env("RATESCOPE_CONFIG_DIR", config.path())
            .output()
            .unwrap();
        let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
        (output.status.code().unwrap_or(-1), text(&output.stdout), text(&output.stderr))
    })
    .await
    .unwrap()
}

/// The demo API with one unlimited route, `/items`, on a free loopback port.
pub async fn items_api() -> ratescope::mock::MockServer {
    let config =
        ratescope::mock::MockConfig::from_toml("[[routes]]\nprefix = \"/items\"\ndialect = \"none\"\n").unwrap();
    ratescope::mock::MockServer::start(config, std::net::SocketAddr::from(([127, 0, 0, 1], 0))).await.unwrap()
}
