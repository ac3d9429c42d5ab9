//! The governor (Rust) export: `host_limits()` returns the configured limiters, one
//! `DefaultDirectRateLimiter` per budget, with `HostLimits::until_ready` taking a place in flight
//! and then each limiter in turn, one request at a time (tokio's `Mutex` and `Semaphore`).
//!
//! Checked against governor 0.10: `Quota::with_period(p).allow_burst(b)` is a GCRA with emission
//! interval `p` and tolerance `p·(b − 1)`, i.e. a token bucket of `b` refilled one every `p`,
//! counted in whole nanoseconds: exact. A burst is a `NonZeroU32`, so a larger capacity is held at
//! `u32::MAX` (a smaller burst, never a larger one).

use super::{Export, Stage};

pub(super) fn render(export: &Export) -> String {
    let mut out = String::new();
    for line in &export.header {
        push_comment(&mut out, line);
    }
    push_comment(&mut out, "");
    push_comment(&mut out, "Needs the crates governor (0.10) and tokio (feature \"sync\"). Use:");
    push_comment(&mut out, "    let limits = std::sync::Arc::new(host_limits());");
    push_comment(&mut out, "    let _permit = limits.until_ready().await; // held until the answer is read");
    push_comment(&mut out, "Put this file in a module of its own (`mod limits;`) so its names stay apart.");
    if export.plan.stages.is_empty() {
        out.push_str("\nuse governor::DefaultDirectRateLimiter;\n");
    } else {
        out.push_str(
            "\nuse std::num::NonZeroU32;\nuse std::time::Duration;\n\nuse governor::{DefaultDirectRateLimiter, Quota, RateLimiter};\n",
        );
    }
    out.push_str(
        "\n/// Every limit above. Share one (in an `Arc`) among all the tasks that call this host.\n\
         pub struct HostLimits {\n    \
         /// One limiter per budget, in the order each request waits on them.\n    \
         pub limiters: Vec<DefaultDirectRateLimiter>,\n    \
         /// Requests in flight at most (`None`: no cap).\n    \
         pub in_flight: Option<tokio::sync::Semaphore>,\n    \
         gate: tokio::sync::Mutex<()>,\n}\n",
    );
    out.push_str("\n/// The configured limiters.\npub fn host_limits() -> HostLimits {\n    HostLimits {\n");
    if export.plan.stages.is_empty() {
        out.push_str("        // No budget: nothing to wait for.\n        limiters: Vec::new(),\n");
    } else {
        out.push_str("        limiters: vec![\n");
        for stage in &export.plan.stages {
            out.push_str(&limiter(stage));
        }
        out.push_str("        ],\n");
    }
    match export.plan.concurrency {
        Some(limit) => out.push_str(&format!(
            "        // At most {limit} requests in flight.\n        in_flight: Some(tokio::sync::Semaphore::new({limit})),\n"
        )),
        None => out.push_str("        in_flight: None,\n"),
    }
    out.push_str("        gate: tokio::sync::Mutex::const_new(()),\n    }\n}\n");
    out.push_str(UNTIL_READY);
    if !export.plan.stages.is_empty() {
        out.push_str(LIMITER);
    }
    out
}

fn push_comment(out: &mut String, line: &str) {
    super::comment_line(out, "//", line);
}

fn limiter(stage: &Stage) -> String {
    let burst = u32::try_from(stage.capacity).unwrap_or(u32::MAX);
    let mut out = format!("            // Budget '{}' ({}): {}.\n", stage.budget, stage.source, stage.describe());
    if u64::from(burst) < stage.capacity {
        out.push_str(&format!(
            "            // A burst of {} is held at governor's largest, {burst}.\n",
            stage.capacity
        ));
    }
    out.push_str(&format!("            limiter({}, {burst}),\n", group(stage.interval_ns)));
    out
}

/// `200_000_000`: digits grouped as rustfmt and clippy like them.
fn group(value: u64) -> String {
    let digits = value.to_string();
    let mut out = String::new();
    for (index, digit) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index).is_multiple_of(3) {
            out.push('_');
        }
        out.push(digit);
    }
    out
}

/// The same for every export.
const UNTIL_READY: &str = r#"
impl HostLimits {
    /// Waits for a place in flight, then for every limiter in turn, one request at a time;
    /// hold what it returns until the answer has been read (`None` when there is no cap).
    pub async fn until_ready(&self) -> Option<tokio::sync::SemaphorePermit<'_>> {
        let permit = match &self.in_flight {
            Some(in_flight) => in_flight.acquire().await.ok(),
            None => None,
        };
        let _gate = self.gate.lock().await;
        for limiter in &self.limiters {
            limiter.until_ready().await;
        }
        permit
    }
}
"#;

/// The same for every export with a budget.
const LIMITER: &str = r#"
/// A token bucket of `burst` refilled one every `interval_ns` nanoseconds.
fn limiter(interval_ns: u64, burst: u32) -> DefaultDirectRateLimiter {
    let period = Duration::from_nanos(interval_ns.max(1));
    let quota = Quota::with_period(period).expect("a period of at least one nanosecond");
    RateLimiter::direct(quota.allow_burst(NonZeroU32::new(burst).unwrap_or(NonZeroU32::MIN)))
}
"#;
