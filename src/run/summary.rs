//! What a burst did: counts, rates and latency percentiles (hdrhistogram), as a table or JSON.
//!
//! JSON schema (`Summary` serialized): `requests`, `sent` (HTTP attempts), `succeeded`
//! (final status below 400), `failed` (final status 400+ or no response), `cancelled`,
//! `status_counts` (status code as a string → attempts), `retries`, `cache_hits`,
//! `elapsed_s`, `achieved_rps` (finished requests per second), `service_ms` (send to
//! response, every attempt), `queue_wait_ms` (time in the limiter, per request) and
//! `total_ms` (first queued to final response, per request), each `{p50, p90, p99, max}`,
//! `errors` (message → requests), and `limiter` (the limits, or `"none"`).

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

use super::runner::{RequestOutcome, RequestResult};
use crate::store::SharedReport;

/// Latency percentiles in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Default)]
pub struct Percentiles {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
}

impl Percentiles {
    fn of(values: impl Iterator<Item = Duration>) -> Self {
        // Microsecond resolution up to one day, 3 significant figures.
        let Ok(mut histogram) = Histogram::<u64>::new_with_bounds(1, 86_400_000_000, 3) else {
            return Self::default();
        };
        for value in values {
            let micros = u64::try_from(value.as_micros()).unwrap_or(u64::MAX).clamp(1, 86_400_000_000);
            let _ = histogram.record(micros);
        }
        if histogram.is_empty() {
            return Self::default();
        }
        let ms = |micros: u64| micros as f64 / 1000.0;
        Self {
            p50: ms(histogram.value_at_quantile(0.50)),
            p90: ms(histogram.value_at_quantile(0.90)),
            p99: ms(histogram.value_at_quantile(0.99)),
            max: ms(histogram.max()),
        }
    }
}

/// The figures of one burst.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    pub requests: usize,
    pub sent: u64,
    pub succeeded: u64,
    pub failed: u64,
    pub cancelled: u64,
    pub status_counts: BTreeMap<String, u64>,
    pub retries: u64,
    pub cache_hits: u64,
    pub elapsed_s: f64,
    pub achieved_rps: f64,
    pub service_ms: Percentiles,
    pub queue_wait_ms: Percentiles,
    pub total_ms: Percentiles,
    pub errors: BTreeMap<String, u64>,
    pub limiter: String,
    /// Shared budgets: store, keys, state and counts; absent when budgets were in-process.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shared: Option<SharedReport>,
}

impl Summary {
    /// Summarises `results` of a burst that planned `requests` and ran for `elapsed`.
    pub fn from_results(requests: usize, results: &[RequestResult], elapsed: Duration, limiter: String) -> Self {
        let mut summary = Self {
            requests,
            sent: 0,
            succeeded: 0,
            failed: 0,
            cancelled: (requests.saturating_sub(results.len())) as u64,
            status_counts: BTreeMap::new(),
            retries: 0,
            cache_hits: 0,
            elapsed_s: elapsed.as_secs_f64(),
            achieved_rps: 0.0,
            service_ms: Percentiles::of(results.iter().flat_map(|r| r.attempts.iter().map(|a| a.service_time))),
            queue_wait_ms: Percentiles::of(results.iter().filter(|r| r.finished()).map(RequestResult::queue_wait)),
            total_ms: Percentiles::of(results.iter().filter(|r| r.finished()).map(|r| r.total)),
            errors: BTreeMap::new(),
            limiter,
            shared: None,
        };
        for result in results {
            summary.sent += result.attempts.len() as u64;
            summary.retries += result.attempts.len().saturating_sub(1) as u64;
            summary.cache_hits += u64::from(result.from_cache);
            for attempt in &result.attempts {
                let key = attempt.status.map_or_else(|| "error".to_owned(), |status| status.to_string());
                *summary.status_counts.entry(key).or_default() += 1;
            }
            match &result.outcome {
                RequestOutcome::Succeeded { .. } => summary.succeeded += 1,
                RequestOutcome::Failed { error, .. } => {
                    summary.failed += 1;
                    *summary.errors.entry(error.clone()).or_default() += 1;
                }
                RequestOutcome::Cancelled => summary.cancelled += 1,
            }
        }
        let finished = summary.succeeded + summary.failed;
        summary.achieved_rps = if summary.elapsed_s > 0.0 { finished as f64 / summary.elapsed_s } else { 0.0 };
        summary
    }

    /// The JSON form (the documented schema).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "limiter:       {}", self.limiter)?;
        writeln!(
            f,
            "requests:      {} ({} succeeded, {} failed, {} cancelled)",
            self.requests, self.succeeded, self.failed, self.cancelled
        )?;
        writeln!(f, "HTTP attempts: {} ({} retries, {} cache hits)", self.sent, self.retries, self.cache_hits)?;
        let statuses: Vec<String> = self.status_counts.iter().map(|(status, n)| format!("{status}×{n}")).collect();
        writeln!(f, "statuses:      {}", if statuses.is_empty() { "-".to_owned() } else { statuses.join("  ") })?;
        writeln!(f, "elapsed:       {:.3}s   achieved: {:.2} req/s", self.elapsed_s, self.achieved_rps)?;
        writeln!(f, "                  p50       p90       p99       max   (ms)")?;
        for (name, p) in [("service", self.service_ms), ("queue wait", self.queue_wait_ms), ("total", self.total_ms)] {
            writeln!(f, "{name:<12} {:>9.1} {:>9.1} {:>9.1} {:>9.1}", p.p50, p.p90, p.p99, p.max)?;
        }
        if let Some(shared) = &self.shared {
            writeln!(f, "{shared}")?;
        }
        for (error, n) in &self.errors {
            writeln!(f, "failed ×{n}: {error}")?;
        }
        Ok(())
    }
}
