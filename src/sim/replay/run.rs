//! The replay itself: a recording becomes a scripted [`BurstSpec`] (each request at its
//! offset, to its own method and URL) and runs through [`simulate`], so the limiter, the retry
//! policy and the server model are the ones a burst meets. What comes back says, per request,
//! whether it was served, refused or failed, and how much later than recorded it was sent.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use http::Method;
use serde::Serialize;
use url::Url;

use super::super::{SimError, SimOptions, Simulation, simulate};
use super::{Format, Recording};
use crate::engine::LimiterConfig;
use crate::http::RetryPolicy;
use crate::mock::MockConfig;
use crate::run::{
    ArrivalPattern, BurstSpec, Endpoint, Percentiles, RequestOutcome, RequestResult, Scheduled, SpecError, Summary,
};

/// How the recorded requests are sent.
#[derive(Debug, Clone, Default)]
pub struct ReplaySettings {
    /// The limiter on the replayed host; `None` sends each request at its recorded time, as
    /// the recording did (the raw side of a comparison).
    pub limits: Option<LimiterConfig>,
    /// With `limits: None`: the most requests in flight (as `burst --no-limit -c`).
    pub raw_concurrency: Option<usize>,
    /// How refused and failed attempts are retried.
    pub retry: RetryPolicy,
    /// Also follow the budgets the server model publishes in its headers.
    pub adaptive: bool,
}

/// How one recorded request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Fate {
    /// A final answer below 400.
    Served,
    /// A final 429 or 503, after what the retry policy allowed: the server's limits refused it.
    Refused,
    /// Anything else: another error status (a path the model has no route for is a 404), no
    /// answer, a limiter that could never admit it.
    Failed,
}

/// One recorded request, replayed.
#[derive(Debug, Clone)]
pub struct Replayed {
    /// When it was recorded, from the first request.
    pub recorded_at: Duration,
    /// Its method.
    pub method: Method,
    /// Its path (no query: it may hold secrets).
    pub path: Arc<str>,
    /// How it ended.
    pub fate: Fate,
    /// Its final status, when it had an answer.
    pub status: Option<u16>,
    /// How much later than recorded the attempt that got its final answer was sent: the wait
    /// in the limiter, and for a retried request the earlier attempts and the waits before each
    /// retry. Zero for a request sent at its recorded time and answered on its first attempt;
    /// for a request never sent, the time until it gave up.
    pub added_delay: Duration,
    /// HTTP attempts sent.
    pub attempts: usize,
}

/// What a replay met, in `burst`'s JSON schema plus what only a replay has.
///
/// JSON: every field of [`Summary`] (`requests`, `status_counts`, `service_ms`,
/// `queue_wait_ms`, …) and `host` (the host replayed), `format` (`har`, `jsonl` or
/// `access-log`), `recorded_span_s` (first to last recorded start), `served`, `refused`,
/// `failed_other`, `delayed` (requests whose `added_delay` is above zero), `added_delay_ms`
/// (`{min, mean, p50, p90, p95, p99, max}` over every request, zero included), and `skipped`:
/// `{other_hosts, unreadable, schemes}` (requests to other hosts, entries or lines that could
/// not be read, requests not `http`/`https` by scheme).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReplaySummary {
    /// The burst's own summary.
    #[serde(flatten)]
    pub burst: Summary,
    /// The host replayed.
    pub host: String,
    /// The format of the recording.
    pub format: Format,
    /// First to last recorded start, in seconds.
    pub recorded_span_s: f64,
    /// Requests served.
    pub served: u64,
    /// Requests refused by the server's limits (final 429 or 503).
    pub refused: u64,
    /// Requests that failed otherwise.
    pub failed_other: u64,
    /// Requests sent later than recorded.
    pub delayed: u64,
    /// How much later than recorded, over every request.
    pub added_delay_ms: Percentiles,
    /// What of the file was not replayed.
    pub skipped: Skipped,
}

/// What of a recording a replay left out.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Skipped {
    /// Requests to the other hosts.
    pub other_hosts: usize,
    /// Entries or lines that could not be read.
    pub unreadable: usize,
    /// Requests to URLs that are not `http` or `https`, by scheme.
    pub schemes: std::collections::BTreeMap<String, usize>,
}

/// A replay's outcome.
#[derive(Debug)]
pub struct Replay {
    /// The figures.
    pub summary: ReplaySummary,
    /// Every request, in recorded order.
    pub requests: Vec<Replayed>,
    /// The simulation underneath: results per request, the server's arrivals, and with
    /// [`SimOptions::record`] the events and limiter snapshots the charts draw.
    pub simulation: Simulation,
}

/// Snapshots kept at most by a recorded replay: a long recording samples less often.
const MAX_SNAPSHOTS: u32 = 20_000;

/// Replays `recording` against the server modelled by `server`, in virtual time.
///
/// Each request arrives at its recorded offset and goes through the limiter of `settings`
/// (none: at once), the retry policy, and the server model; see [`Replay`]. For the two
/// sides of a comparison, call it twice: with limits and with `limits: None`. With
/// `options.record`, limiter snapshots are taken at least every `sample_every`, and no more
/// than 20,000 over the recording's span.
///
/// Blocking, like [`simulate`]: from async code call it through `spawn_blocking`.
pub fn replay(
    recording: &Recording,
    settings: &ReplaySettings,
    server: &MockConfig,
    options: &SimOptions,
) -> Result<Replay, SimError> {
    let spec = spec_of(recording, settings)?;
    let mut options = options.clone();
    if options.record {
        options.sample_every = options.sample_every.max(recording.span() / MAX_SNAPSHOTS);
    }
    let simulation = simulate(server, spec, &options)?;
    let requests: Vec<Replayed> = simulation
        .results
        .iter()
        .map(|result| replayed(result, recording.requests.get(result.index).map_or(Duration::ZERO, |r| r.offset)))
        .collect();
    let summary = summarise(recording, &simulation.summary, &requests);
    Ok(Replay { summary, requests, simulation })
}

/// The scripted burst of `recording`: one endpoint per distinct method and URL.
fn spec_of(recording: &Recording, settings: &ReplaySettings) -> Result<BurstSpec, SimError> {
    let mut endpoints: Vec<Endpoint> = Vec::new();
    let mut places: HashMap<(&Method, &Url), usize> = HashMap::new();
    let script: Arc<[Scheduled]> = recording
        .requests
        .iter()
        .map(|request| {
            let endpoint = *places.entry((&request.method, &request.url)).or_insert_with(|| {
                let mut endpoint = Endpoint::new(request.url.clone(), 1);
                endpoint.method = Some(request.method.clone());
                endpoints.push(endpoint);
                endpoints.len() - 1
            });
            Scheduled { at: request.offset, endpoint }
        })
        .collect();
    let Some(url) = endpoints.first().map(|endpoint| endpoint.url.clone()) else {
        return Err(SimError::Spec(SpecError::NoRequests));
    };
    Ok(BurstSpec {
        endpoints,
        arrival: ArrivalPattern::Scripted(script),
        limits: settings.limits.clone(),
        raw_concurrency: settings.raw_concurrency,
        retry: settings.retry.clone(),
        adaptive: settings.adaptive,
        ..BurstSpec::get(url, recording.requests.len())
    })
}

fn replayed(result: &RequestResult, recorded_at: Duration) -> Replayed {
    let (fate, status) = match &result.outcome {
        RequestOutcome::Succeeded { status } => (Fate::Served, Some(*status)),
        RequestOutcome::Failed { status: Some(status @ (429 | 503)), .. } => (Fate::Refused, Some(*status)),
        RequestOutcome::Failed { status, .. } => (Fate::Failed, *status),
        RequestOutcome::Cancelled => (Fate::Failed, None),
    };
    let added_delay = match result.attempts.last() {
        Some(last) => last.sent_at.saturating_duration_since(result.arrived),
        None => result.total,
    };
    Replayed {
        recorded_at,
        method: result.method.clone(),
        path: Arc::clone(&result.path),
        fate,
        status,
        added_delay,
        attempts: result.attempts.len(),
    }
}

fn summarise(recording: &Recording, burst: &Summary, requests: &[Replayed]) -> ReplaySummary {
    let count = |fate: Fate| requests.iter().filter(|request| request.fate == fate).count() as u64;
    ReplaySummary {
        burst: burst.clone(),
        host: recording.host.clone(),
        format: recording.format,
        recorded_span_s: recording.span().as_secs_f64(),
        served: count(Fate::Served),
        refused: count(Fate::Refused),
        failed_other: count(Fate::Failed),
        delayed: requests.iter().filter(|request| !request.added_delay.is_zero()).count() as u64,
        added_delay_ms: exact_percentiles(requests.iter().map(|request| request.added_delay).collect()),
        skipped: Skipped {
            other_hosts: recording.other_hosts.iter().map(|host| host.requests).sum(),
            unreadable: recording.problems.count,
            schemes: recording.skipped.clone(),
        },
    }
}

/// Percentiles of `values` in milliseconds, exact (nearest rank): a replay holds every request,
/// and a delay of zero stays zero (the burst's histograms count from one microsecond).
fn exact_percentiles(mut values: Vec<Duration>) -> Percentiles {
    if values.is_empty() {
        return Percentiles::default();
    }
    values.sort_unstable();
    let ms = |value: Duration| value.as_secs_f64() * 1000.0;
    let rank = |quantile: f64| {
        let index = (quantile * values.len() as f64).ceil() as usize;
        ms(values[index.clamp(1, values.len()) - 1])
    };
    let total: f64 = values.iter().map(|value| ms(*value)).sum();
    Percentiles {
        min: ms(values[0]),
        mean: total / values.len() as f64,
        p50: rank(0.50),
        p90: rank(0.90),
        p95: rank(0.95),
        p99: rank(0.99),
        max: ms(values[values.len() - 1]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_percentiles_keep_zero_and_take_the_nearest_rank() {
        let values: Vec<Duration> = (0..100).map(Duration::from_millis).collect();
        let p = exact_percentiles(values);
        assert_eq!((p.min, p.p50, p.p90, p.p99, p.max), (0.0, 49.0, 89.0, 98.0, 99.0));
        assert!((p.mean - 49.5).abs() < 1e-9);
        assert_eq!(exact_percentiles(vec![Duration::ZERO; 3]).p99, 0.0);
        assert_eq!(exact_percentiles(Vec::new()), Percentiles::default());
    }
}
