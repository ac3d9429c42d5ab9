//! The exports: what each format says, the errors, and "never more permissive" checked against
//! the engine's own budget arithmetic (`BudgetMeter`) for greedy schedules through a model of
//! each target's limiter.

use std::time::Duration;

use proptest::prelude::*;

use super::*;
use crate::engine::{BudgetKind, BudgetMeter, BudgetSpec, Rate, duration_nanos};
use crate::profile::{BudgetEntry, HostProfile, PathOverride};

fn one_host(budgets: Vec<BudgetEntry>, concurrency: Option<usize>) -> Profile {
    let mut host = HostProfile::new("api", "https://api.example.com");
    host.budgets = budgets;
    host.concurrency = concurrency;
    let mut profile = Profile::new("shop");
    profile.hosts.push(host);
    profile
}

fn code_formats() -> [ExportFormat; 4] {
    [ExportFormat::Bottleneck, ExportFormat::Aiolimiter, ExportFormat::Governor, ExportFormat::Go]
}

#[test]
fn every_format_names_the_profile_host_version_and_each_budget() {
    let profile = Profile::demo().unwrap();
    for format in code_formats() {
        let text = render(&profile, Selection::default(), format).unwrap();
        assert!(text.contains("profile 'demo'") && text.contains("host 'demo API'"), "{format}: {text}");
        assert!(text.contains(&format!("ratescope {}", env!("CARGO_PKG_VERSION"))), "{format}: {text}");
        for budget in &profile.hosts[0].budgets {
            assert!(text.contains(&format!("Budget '{}'", budget.name)), "{format} names '{}': {text}", budget.name);
        }
        assert!(text.contains("--path /search"), "{format} says how to export the path: {text}");
        assert_eq!(text, render(&profile, Selection::default(), format).unwrap(), "{format} is deterministic");
    }
}

#[test]
fn the_formats_use_the_libraries_own_words() {
    let profile = one_host(
        vec![BudgetEntry::token_bucket("rate", 5, "5/1s"), BudgetEntry::sliding_window("minute", 100, "1m")],
        Some(4),
    );
    let js = render(&profile, Selection::default(), ExportFormat::Bottleneck).unwrap();
    assert!(js.contains("new Bottleneck({ maxConcurrent: 4 })"), "{js}");
    assert!(js.contains("reservoir: 3,") && js.contains("reservoirIncreaseInterval: 200,"), "{js}");
    assert!(js.contains("new Bottleneck({ minTime: 600 })"), "{js}");
    assert!(js.contains("module.exports = inFlight.chain(budget1.chain(budget2));"), "{js}");
    let py = render(&profile, Selection::default(), ExportFormat::Aiolimiter).unwrap();
    assert!(py.contains("AsyncLimiter(4, 0.800000004)") && py.contains("AsyncLimiter(1, 0.600000001)"), "{py}");
    assert!(py.contains("_IN_FLIGHT = 4") && py.contains("\nlimiter = _Limits()\n"), "{py}");
    let rs = render(&profile, Selection::default(), ExportFormat::Governor).unwrap();
    assert!(rs.contains("limiter(200_000_000, 4),") && rs.contains("limiter(600_000_000, 1),"), "{rs}");
    let go = render(&profile, Selection::default(), ExportFormat::Go).unwrap();
    assert!(go.contains("rate.NewLimiter(rate.Every(200000001*time.Nanosecond), 4)"), "{go}");
    assert!(go.contains("limits.inFlight = make(chan struct{}, 4)"), "{go}");
}

#[test]
fn a_host_without_limits_exports_a_limiter_that_says_so() {
    let profile = one_host(Vec::new(), None);
    for format in code_formats() {
        let text = render(&profile, Selection::default(), format).unwrap();
        assert!(text.contains("no request limits in the profile"), "{format}: {text}");
    }
}

#[test]
fn budgets_in_other_units_are_left_out_and_named() {
    let tokens = BudgetEntry { unit: Some("tokens".into()), ..BudgetEntry::sliding_window("tpm", 90_000, "1m") };
    let profile = one_host(vec![tokens, BudgetEntry::token_bucket("rate", 2, "2/1s")], None);
    for format in code_formats() {
        let text = render(&profile, Selection::default(), format).unwrap();
        assert!(text.contains("Left out: budget 'tpm'") && text.contains("counts tokens"), "{format}: {text}");
        assert!(!text.contains("Budget 'tpm'"), "{format}: {text}");
    }
}

#[test]
fn hosts_are_picked_by_name_and_a_wrong_or_missing_one_lists_them() {
    let mut profile = Profile::demo().unwrap();
    profile.hosts.push(HostProfile::new("other", "https://other.example"));
    let err = render(&profile, Selection::default(), ExportFormat::Go).unwrap_err();
    assert!(matches!(err, ExportError::HostNeeded { .. }), "{err:?}");
    assert_eq!(err.to_string(), "profile 'demo' has 2 hosts; pick one with --host: 'demo API', 'other'");
    let err = render(&profile, Selection::host("nope"), ExportFormat::Go).unwrap_err();
    assert_eq!(err.to_string(), "profile 'demo' has no host 'nope'; its hosts: 'demo API', 'other'");
    let text = render(&profile, Selection::host("other"), ExportFormat::Go).unwrap();
    assert!(text.contains("host 'other'"), "{text}");
    let empty = Profile::new("empty");
    let err = render(&empty, Selection::default(), ExportFormat::Go).unwrap_err();
    assert!(matches!(err, ExportError::NoHosts { .. }), "{err:?}");
}

#[test]
fn a_path_override_exports_its_own_limits() {
    let mut profile = one_host(vec![BudgetEntry::token_bucket("rate", 5, "5/1s")], None);
    profile.hosts[0].paths.push(PathOverride {
        prefix: "/search".into(),
        concurrency: Some(1),
        budgets: vec![BudgetEntry::sliding_window("search", 2, "1s")],
    });
    let selection = Selection { host: None, path: Some("/search/") };
    let text = render(&profile, selection, ExportFormat::Governor).unwrap();
    assert!(text.contains("requests under '/search' of host 'api'") && text.contains("Budget 'search'"), "{text}");
    assert!(!text.contains("Budget 'rate'"), "{text}");
    let err = render(&profile, Selection { host: None, path: Some("/x") }, ExportFormat::Go).unwrap_err();
    assert_eq!(err.to_string(), "host 'api' has no path override '/x'; its paths: '/search'");
}

#[test]
fn toml_is_the_whole_profile_and_takes_no_selection() {
    let profile = Profile::demo().unwrap();
    let text = render(&profile, Selection::default(), ExportFormat::Toml).unwrap();
    assert_eq!(Profile::from_toml(&text).unwrap(), profile);
    assert!(matches!(
        render(&profile, Selection::host("demo API"), ExportFormat::Toml),
        Err(ExportError::SelectionForToml)
    ));
}

#[test]
fn names_cannot_break_out_of_a_comment_and_headers_are_never_written() {
    let mut profile = one_host(vec![BudgetEntry::token_bucket("rate\nprocess.exit(1)", 2, "2/1s")], None);
    profile.hosts[0].name = "api\r\nimport os\u{2028}x".into();
    profile.hosts[0].headers.insert("accept".into(), "application/vnd.secretive+json".into());
    profile.hosts[0].secret_headers = vec!["x-api-key".into()];
    for format in code_formats() {
        let text = render(&profile, Selection::default(), format).unwrap();
        assert!(!text.contains("\nprocess.exit") && !text.contains("\nimport os"), "{format}: {text}");
        assert!(!text.contains('\u{2028}') && !text.contains('\r'), "{format}");
        assert!(!text.contains("x-api-key") && !text.contains("vnd.secretive"), "{format}: {text}");
    }
}

#[test]
fn bottleneck_refuses_a_spacing_longer_than_node_timers() {
    let profile = one_host(vec![BudgetEntry::sliding_window("month", 1, "30d")], None);
    let err = render(&profile, Selection::default(), ExportFormat::Bottleneck).unwrap_err();
    assert!(err.to_string().contains("longer than Node's timers") && err.to_string().contains("--as go"), "{err}");
    assert!(render(&profile, Selection::default(), ExportFormat::Go).is_ok());
}

#[test]
fn a_capacity_beyond_governors_u32_is_held_at_its_largest() {
    let profile = one_host(vec![BudgetEntry::token_bucket("huge", 1 << 40, "1000/1s")], None);
    let text = render(&profile, Selection::default(), ExportFormat::Governor).unwrap();
    assert!(text.contains(&format!("limiter(1_000_000, {})", u32::MAX)), "{text}");
}

// ---- never more permissive -------------------------------------------------------------

/// A greedy token bucket (GCRA) of `capacity`, one more every `interval` ns: the earliest instant
/// at or after `now` it admits one, taking it.
struct Gcra {
    capacity: u64,
    interval: u64,
    tat: u64,
}

impl Gcra {
    fn new(capacity: u64, interval: u64) -> Self {
        Self { capacity, interval, tat: 0 }
    }

    fn admit(&mut self, now: u64) -> u64 {
        let tolerance = (self.capacity - 1).saturating_mul(self.interval);
        let at = now.max(self.tat.saturating_sub(tolerance));
        self.tat = self.tat.max(at) + self.interval;
        at
    }
}

/// Bottleneck's reservoir (`LocalDatastore` 2.19.5): a heartbeat every `heartbeat` ms from
/// creation; at a beat at least `interval` after the last increase, one is added up to `maximum`
/// and the clock restarts from that beat. Jobs start in order as soon as the reservoir holds one.
fn bottleneck_reservoir(maximum: u64, interval: u64, heartbeat: u64, arrivals: &[u64]) -> Vec<u64> {
    let (mut reservoir, mut last_increase, mut beat) = (maximum, 0, 0);
    let mut starts = Vec::new();
    for &arrival in arrivals {
        let mut now = arrival.max(starts.last().copied().unwrap_or(0));
        loop {
            // Beats up to `now` first.
            while beat + heartbeat <= now {
                beat += heartbeat;
                if beat >= last_increase + interval {
                    last_increase = beat;
                    if reservoir < maximum {
                        reservoir += 1;
                    }
                }
            }
            if reservoir >= 1 {
                reservoir -= 1;
                starts.push(now);
                break;
            }
            now = beat + heartbeat;
        }
    }
    starts
}

/// Whether `kind` (each request spending `cost`) admits every instant of `times`, in order.
fn admits_all(kind: &BudgetKind, cost: u64, times: &[u64]) -> Result<(), String> {
    let mut meter = BudgetMeter::new(kind);
    for (index, &at) in times.iter().enumerate() {
        let ready = meter.ready_at(cost, at);
        if ready != at {
            return Err(format!("request {index} at {at} ns is early: {kind:?} admits it at {ready} ns; {times:?}"));
        }
        meter.consume(cost, at);
    }
    Ok(())
}

fn budget_strategy() -> impl Strategy<Value = BudgetSpec> {
    let bucket = (1u64..12, 1u64..12, 1u64..3000).prop_map(|(capacity, amount, per_ms)| {
        BudgetSpec::token_bucket("bucket", capacity, Rate::new(amount, Duration::from_millis(per_ms)).unwrap()).unwrap()
    });
    let window = (1u64..12, 1u64..3000).prop_map(|(limit, window_ms)| {
        BudgetSpec::sliding_window("window", limit, Duration::from_millis(window_ms)).unwrap()
    });
    (prop_oneof![bucket, window], 1u64..4).prop_map(|(spec, cost)| {
        let cost = cost.min(spec.capacity());
        spec.with_cost(cost).unwrap()
    })
}

/// Arrival instants (ns): bunches and gaps, in order.
fn arrivals_strategy() -> impl Strategy<Value = Vec<u64>> {
    prop::collection::vec(prop_oneof![Just(0u64), 0u64..50_000_000, 0u64..2_000_000_000], 1..60).prop_map(|gaps| {
        gaps.iter()
            .scan(0u64, |at, gap| {
                *at += gap;
                Some(*at)
            })
            .collect()
    })
}

fn plan_of(budgets: &[BudgetSpec]) -> Plan {
    let config = budgets.iter().enumerate().fold(LimiterConfig::new(), |config, (index, budget)| {
        config.with_budget(BudgetSpec { name: format!("b{index}"), ..budget.clone() })
    });
    plan::plan(&config).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    /// One budget: its stage, greedy, is never early for the budget.
    #[test]
    fn a_stage_never_admits_what_its_budget_would_not(budget in budget_strategy(), arrivals in arrivals_strategy()) {
        let plan = plan_of(std::slice::from_ref(&budget));
        let stage = &plan.stages[0];
        let mut gcra = Gcra::new(stage.capacity, stage.interval_ns);
        let times: Vec<u64> = arrivals.iter().map(|&at| gcra.admit(at)).collect();
        admits_all(&budget.kind, budget.cost, &times).map_err(TestCaseError::fail)?;
    }

    /// Several budgets: stages waited on one after another, one request at a time, never let a
    /// request go before every budget would.
    #[test]
    fn stacked_stages_never_admit_what_any_budget_would_not(
        budgets in prop::collection::vec(budget_strategy(), 1..4),
        arrivals in arrivals_strategy(),
    ) {
        let plan = plan_of(&budgets);
        let mut stages: Vec<Gcra> = plan.stages.iter().map(|stage| Gcra::new(stage.capacity, stage.interval_ns)).collect();
        let mut sent: Vec<u64> = Vec::new();
        for &arrival in &arrivals {
            let mut at = arrival.max(sent.last().copied().unwrap_or(0));
            for stage in &mut stages {
                at = stage.admit(at);
            }
            sent.push(at);
        }
        for budget in &budgets {
            admits_all(&budget.kind, budget.cost, &sent).map_err(TestCaseError::fail)?;
        }
    }

    /// Bottleneck: `minTime` for a stage of one, the reservoir (one held back) for a burst, both
    /// in whole milliseconds as `bottleneck.rs` writes them.
    #[test]
    fn bottleneck_never_admits_what_the_budget_would_not(budget in budget_strategy(), arrivals in arrivals_strategy()) {
        let plan = plan_of(std::slice::from_ref(&budget));
        let stage = &plan.stages[0];
        let ms = 1_000_000;
        let interval_ms = stage.interval_in(ms);
        let times: Vec<u64> = if stage.capacity == 1 {
            let mut gcra = Gcra::new(1, interval_ms * ms);
            arrivals.iter().map(|&at| gcra.admit(at)).collect()
        } else {
            let beats = interval_ms.div_ceil(250).max(1);
            let heartbeat = interval_ms.div_ceil(beats);
            bottleneck_reservoir(stage.capacity - 1, heartbeat * beats * ms, heartbeat * ms, &arrivals)
        };
        admits_all(&budget.kind, budget.cost, &times).map_err(TestCaseError::fail)?;
    }
}

#[test]
fn the_models_are_not_vacuous() {
    // A window converted as a bucket of its whole limit would let a second burst through.
    let window = BudgetKind::SlidingWindow { limit: 3, window: Duration::from_secs(1) };
    let mut gcra = Gcra::new(3, 333_333_334);
    let times: Vec<u64> = (0..6).map(|_| gcra.admit(0)).collect();
    assert!(admits_all(&window, 1, &times).is_err(), "{times:?}");
    // Bottleneck's reservoir with the whole capacity as its maximum lets one more through.
    let bucket = BudgetKind::TokenBucket { capacity: 2, refill: Rate::new(1, Duration::from_secs(1)).unwrap() };
    let arrivals = [999_000_000, 999_000_000, 1_000_000_000];
    let starts = bottleneck_reservoir(2, 1_000_000_000, 250_000_000, &arrivals);
    assert!(admits_all(&bucket, 1, &starts).is_err(), "{starts:?}");
    let starts = bottleneck_reservoir(1, 1_000_000_000, 250_000_000, &arrivals);
    assert!(admits_all(&bucket, 1, &starts).is_ok(), "{starts:?}");
    assert_eq!(duration_nanos(Duration::from_millis(1)), 1_000_000);
}
