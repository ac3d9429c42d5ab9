//! Tune: limiter settings swept against a model of the server in virtual time, ranked: no
//! refusal first, then the shortest makespan, then the lowest p99.
//!
//! Each setting is a real simulation ([`crate::sim::simulate`]: the real client, limiter and
//! retry policy against the demo API's handler on a paused clock), run on every core. The
//! model is first tightened by the margin ([`crate::sim::model::tightened`]), so the setting that
//! meets no refusal there keeps that margin against the real server (its network jitter, and a
//! probe's measurement a little off). A run that met no refusal never depended on the model's
//! limits, so its makespan is the one predicted for the real server.

pub mod grid;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde::Serialize;
use thiserror::Error;

pub use grid::{Grid, GridError, GridOptions, MAX_CANDIDATES, Setting, Span};

use crate::engine::format_period;
use crate::mock::MockConfig;
use crate::probe::{SuggestedBudget, Suggestion};
use crate::run::BurstSpec;
use crate::sim::model::tightened;
use crate::sim::{SimError, SimOptions, simulate};

/// How a tune runs.
#[derive(Debug, Clone, PartialEq)]
pub struct TuneOptions {
    /// The axes.
    pub grid: GridOptions,
    /// Threads simulating at once (0: one per core).
    pub threads: usize,
    /// Seeds every simulation (the same for each setting, so they differ only by the setting).
    pub seed: u64,
}

impl Default for TuneOptions {
    fn default() -> Self {
        Self { grid: GridOptions::default(), threads: 0, seed: SimOptions::default().seed }
    }
}

/// Why a tune could not run.
#[derive(Debug, Error)]
pub enum TuneError {
    /// The sweep's axes cannot be made.
    #[error(transparent)]
    Grid(#[from] GridError),
    /// The burst's requests go to routes of the model with different limits.
    #[error(
        "the burst's endpoints reach routes with different limits ({0}); tune one route at a time (one endpoint, or endpoints under one prefix)"
    )]
    MixedRoutes(String),
    /// A simulation could not run.
    #[error(transparent)]
    Sim(#[from] SimError),
}

/// What one setting did against the (tightened) model.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Outcome {
    /// The setting, in the shape of `probe --json`'s `suggested`.
    #[serde(flatten)]
    pub limits: Suggestion,
    /// Makespan: first arrival to last answer, seconds.
    pub elapsed_s: f64,
    /// Attempts by status code.
    pub status_counts: BTreeMap<String, u64>,
    /// Attempts refused (429, or 503).
    pub throttled: u64,
    /// Requests that ended without success.
    pub failed: u64,
    /// Median time from arrival to final answer, ms.
    pub p50_ms: f64,
    /// 99th percentile of the same, ms.
    pub p99_ms: f64,
    /// Its place on the grid's capacity axis.
    #[serde(skip)]
    pub capacity_index: usize,
    /// Its place on the grid's rate axis.
    #[serde(skip)]
    pub rate_index: usize,
}

impl Outcome {
    /// Whether it met no refusal and every request succeeded.
    pub fn is_clean(&self) -> bool {
        self.throttled == 0 && self.failed == 0
    }

    /// The bucket's capacity and rate (every setting has one).
    pub fn bucket(&self) -> Option<(u64, f64)> {
        self.limits.budgets.iter().find_map(|budget| match budget {
            SuggestedBudget::TokenBucket { capacity, per_s, .. } => Some((*capacity, *per_s)),
            SuggestedBudget::SlidingWindow { .. } => None,
        })
    }

    /// The order of the ranking: clean first, then fewer refusals and failures, shorter
    /// makespan, lower p99; among equals the gentler setting (lower rate, smaller burst and
    /// window, fewer in flight), which leaves the most room against the real server.
    fn rank_key(&self) -> (bool, u64, u64, u64, u64, Vec<u64>) {
        let micros = |seconds: f64| (seconds * 1e6).round() as u64;
        let mut gentleness: Vec<u64> = Vec::new();
        if let Some((capacity, per_s)) = self.bucket() {
            gentleness.push(micros(per_s));
            gentleness.push(capacity);
        }
        gentleness.extend(self.limits.budgets.iter().filter_map(|budget| match budget {
            SuggestedBudget::SlidingWindow { limit, .. } => Some(*limit),
            SuggestedBudget::TokenBucket { .. } => None,
        }));
        gentleness.push(self.limits.concurrency.map_or(u64::MAX, |c| c as u64));
        (
            !self.is_clean(),
            self.throttled,
            self.failed,
            micros(self.elapsed_s),
            micros(self.p99_ms / 1000.0),
            gentleness,
        )
    }

    /// The `ratescope burst` flags that fire this setting for real.
    pub fn burst_flags(&self) -> Vec<String> {
        let mut flags = Vec::new();
        for budget in &self.limits.budgets {
            match budget {
                SuggestedBudget::TokenBucket { capacity, per_s, .. } => {
                    flags.extend(["--rate".to_owned(), format!("{}/1s", crate::engine::format_number(*per_s))]);
                    flags.extend(["--burst".to_owned(), capacity.to_string()]);
                }
                SuggestedBudget::SlidingWindow { limit, window_s, .. } => {
                    // Whole milliseconds rounded up, as the window's limiter has it (`to_spec`).
                    let window = Duration::from_millis((window_s * 1000.0).ceil() as u64);
                    flags.extend(["--window".to_owned(), format!("{limit}/{}", format_period(window))]);
                }
            }
        }
        if let Some(concurrency) = self.limits.concurrency {
            flags.extend(["-c".to_owned(), concurrency.to_string()]);
        }
        flags
    }
}

/// What a tune found.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TuneReport {
    /// Every setting swept, best first.
    pub candidates: Vec<Outcome>,
    /// The margin the model was tightened by.
    pub margin: f64,
    /// The model, as the demo API describes its route.
    pub model: String,
    /// Requests per setting.
    pub requests: usize,
    /// Wall-clock seconds the sweep took.
    pub real_time_s: f64,
    /// The capacity axis (for a heatmap).
    #[serde(skip)]
    pub capacities: Vec<u64>,
    /// The rate axis (for a heatmap).
    #[serde(skip)]
    pub rates: Vec<f64>,
}

/// What the best setting is predicted to do against the real server.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Prediction {
    /// Makespan, seconds.
    pub elapsed_s: f64,
    /// Attempts by status code.
    pub status_counts: BTreeMap<String, u64>,
    /// Median arrival-to-answer time, ms.
    pub p50_ms: f64,
    /// 99th percentile of the same, ms.
    pub p99_ms: f64,
}

impl TuneReport {
    /// The JSON form: `{"best": {"budgets": [...], "concurrency": n|null}, "predicted":
    /// {"elapsed_s", "status_counts", "p50_ms", "p99_ms"}, "candidates": [...], "margin",
    /// "model", "requests", "real_time_s", "burst_flags": [...]}`.
    pub fn to_json(&self) -> serde_json::Value {
        let mut value = serde_json::to_value(self).unwrap_or(serde_json::Value::Null);
        if let Some(object) = value.as_object_mut() {
            let best = self.best();
            let limits = best.and_then(|best| serde_json::to_value(&best.limits).ok());
            object.insert("best".into(), limits.unwrap_or_default());
            let predicted = self.predicted().and_then(|predicted| serde_json::to_value(predicted).ok());
            object.insert("predicted".into(), predicted.unwrap_or_default());
            if let Some(best) = best {
                object.insert("burst_flags".into(), best.burst_flags().into());
            }
        }
        value
    }

    /// The best setting (the first of `candidates`), when one met no refusal.
    pub fn best(&self) -> Option<&Outcome> {
        self.candidates.first().filter(|outcome| outcome.is_clean())
    }

    /// What the best setting is predicted to do against the real server.
    pub fn predicted(&self) -> Option<Prediction> {
        self.best().map(|outcome| Prediction {
            elapsed_s: outcome.elapsed_s,
            status_counts: outcome.status_counts.clone(),
            p50_ms: outcome.p50_ms,
            p99_ms: outcome.p99_ms,
        })
    }

    /// The outcome at a place of the capacity × rate heatmap: the best of the settings there
    /// (they differ by window limit or concurrency when those are swept).
    pub fn cell(&self, capacity_index: usize, rate_index: usize) -> Option<&Outcome> {
        self.candidates.iter().find(|o| o.capacity_index == capacity_index && o.rate_index == rate_index)
    }
}

/// Sweeps the grid's settings for `spec` against `server` (tightened by the margin) and ranks them.
/// Blocking, on `options.threads` threads.
pub fn tune(server: &MockConfig, spec: &BurstSpec, options: &TuneOptions) -> Result<TuneReport, TuneError> {
    let started = std::time::Instant::now();
    spec.validate().map_err(SimError::from)?;
    let route = route_of(server, spec)?;
    let grid = Grid::new(&server.routes[route].policies, &options.grid)?;
    let model = tightened(server, options.grid.margin);
    let settings = grid.settings();
    let sim_options = SimOptions { seed: options.seed, ..SimOptions::default() };
    let threads = match options.threads {
        0 => std::thread::available_parallelism().map_or(1, usize::from),
        n => n,
    }
    .min(settings.len())
    .max(1);
    let next = AtomicUsize::new(0);
    let outcomes: Vec<Result<Vec<(usize, Outcome)>, TuneError>> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut done = Vec::new();
                    loop {
                        let index = next.fetch_add(1, Ordering::Relaxed);
                        let Some(setting) = settings.get(index) else { return Ok(done) };
                        done.push((index, run_setting(&model, spec, setting, &sim_options)?));
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|worker| {
                worker.join().unwrap_or_else(|_| Err(SimError::Runtime("a tune worker panicked".into()).into()))
            })
            .collect()
    });
    let mut candidates = Vec::with_capacity(settings.len());
    for outcome in outcomes {
        candidates.extend(outcome?.into_iter().map(|(_, outcome)| outcome));
    }
    candidates.sort_by_cached_key(Outcome::rank_key);
    Ok(TuneReport {
        candidates,
        margin: options.grid.margin,
        model: server.routes[route].describe(),
        requests: spec.planned_requests(),
        real_time_s: started.elapsed().as_secs_f64(),
        capacities: grid.capacities,
        rates: grid.rates,
    })
}

/// The one route of `server` the burst's endpoints reach (with limits).
fn route_of(server: &MockConfig, spec: &BurstSpec) -> Result<usize, TuneError> {
    let mut routes: Vec<usize> =
        spec.endpoints.iter().filter_map(|endpoint| server.route_for(endpoint.url.path())).collect();
    routes.sort_unstable();
    routes.dedup();
    let limited: Vec<usize> = routes.iter().copied().filter(|&i| !server.routes[i].policies.is_empty()).collect();
    match limited.as_slice() {
        [] => Err(GridError::NoLimits.into()),
        [one] => Ok(*one),
        many => Err(TuneError::MixedRoutes(
            many.iter()
                .map(|&i| format!("{}: {}", server.routes[i].prefix, server.routes[i].describe()))
                .collect::<Vec<_>>()
                .join("; "),
        )),
    }
}

/// One simulation of `spec` with `setting`'s limits.
fn run_setting(
    model: &MockConfig,
    spec: &BurstSpec,
    setting: &Setting,
    options: &SimOptions,
) -> Result<Outcome, TuneError> {
    let mut spec = spec.clone();
    spec.limits = Some(setting.limits.limiter_config().map_err(|err| SimError::Spec(err.into()))?);
    let simulation = simulate(model, spec, options)?;
    let summary = simulation.summary;
    let count = |status: &str| summary.status_counts.get(status).copied().unwrap_or(0);
    Ok(Outcome {
        limits: setting.limits.clone(),
        elapsed_s: summary.elapsed_s,
        throttled: count("429") + count("503"),
        failed: summary.failed + summary.cancelled,
        p50_ms: summary.total_ms.p50,
        p99_ms: summary.total_ms.p99,
        status_counts: summary.status_counts,
        capacity_index: setting.capacity_index,
        rate_index: setting.rate_index,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::BurstSpec;

    fn model() -> MockConfig {
        MockConfig::from_toml(
            "[[routes]]\nprefix = \"/items\"\nlatency = { fixed = \"3ms\", jitter = \"4ms\" }\n\
             [[routes.policies]]\nkind = \"token_bucket\"\ncapacity = 6\nrate = \"10/1s\"\n",
        )
        .unwrap()
    }

    fn spec(requests: usize) -> BurstSpec {
        BurstSpec::get("http://127.0.0.1:8787/items".parse().unwrap(), requests)
    }

    fn options(steps: usize, threads: usize) -> TuneOptions {
        TuneOptions { grid: GridOptions { steps, ..GridOptions::default() }, threads, ..TuneOptions::default() }
    }

    #[test]
    fn the_prediction_is_what_the_best_setting_does_against_the_untightened_model() {
        let report = tune(&model(), &spec(50), &options(8, 0)).unwrap();
        let best = report.best().expect("a clean setting");
        let mut real = spec(50);
        real.limits = Some(best.limits.limiter_config().unwrap());
        let simulated = simulate(&model(), real, &SimOptions::default()).unwrap().summary;
        assert_eq!(simulated.status_counts.get("429"), None, "no refusal from the model itself");
        let predicted = report.predicted().unwrap();
        assert!((simulated.elapsed_s - predicted.elapsed_s).abs() < 1e-9, "{simulated:?} vs {predicted:?}");
        // And nothing clean is faster: the best is first among the clean.
        let fastest = report.candidates.iter().filter(|o| o.is_clean()).map(|o| o.elapsed_s).fold(f64::MAX, f64::min);
        assert_eq!(best.elapsed_s, fastest);
    }

    #[test]
    fn a_sweep_is_the_same_on_one_thread_or_many() {
        let strip = |mut report: TuneReport| {
            report.real_time_s = 0.0;
            report
        };
        let one = strip(tune(&model(), &spec(30), &options(5, 1)).unwrap());
        let many = strip(tune(&model(), &spec(30), &options(5, 3)).unwrap());
        assert_eq!(one, many);
        assert_eq!(one.candidates.len(), 25);
    }

    #[test]
    fn every_cell_of_the_heatmap_has_its_setting() {
        let report = tune(&model(), &spec(20), &options(4, 0)).unwrap();
        for capacity in 0..report.capacities.len() {
            for rate in 0..report.rates.len() {
                let cell = report.cell(capacity, rate).expect("a setting per cell");
                assert_eq!(cell.bucket().map(|(c, _)| c), Some(report.capacities[capacity]));
            }
        }
    }

    #[test]
    fn endpoints_reaching_routes_with_different_limits_are_refused() {
        let server = MockConfig::demo().unwrap();
        let mut burst = spec(10);
        burst.endpoints.push(crate::run::Endpoint::new("http://127.0.0.1:8787/search".parse().unwrap(), 1));
        let err = tune(&server, &burst, &options(2, 1)).unwrap_err().to_string();
        assert!(err.contains("different limits") && err.contains("/items") && err.contains("/search"), "{err}");
    }
}
