//! What a burst did: counts, rates and latency percentiles (hdrhistogram), as a table or JSON.
//!
//! JSON schema (`Summary` serialized): `requests`, `sent` (HTTP attempts), `succeeded`
//! (final status below 400), `failed` (final status 400+ or no response), `cancelled`,
//! `status_counts` (status code as a string → attempts), `retries`, `cache_hits`, `coalesced`,
//! `batched_items` (requests whose item went upstream in a batch), `batches` (the upstream
//! requests that carried them), `saved_by_batching` (`batched_items - batches`),
//! `elapsed_s`, `achieved_rps` (finished requests per second), `service_ms` (send to
//! response, every attempt), `queue_wait_ms` (time in the limiter, per request) and
//! `total_ms` (first queued to final response, per request), each
//! `{min, mean, p50, p90, p95, p99, max}`, `service_histogram` (`[{up_to_ms, count}]`, ten
//! equal slices from the fastest to the slowest attempt), `errors` (cause in a few stable words →
//! requests), `error_examples` (cause → the first full message), `limiter` (the limits, or
//! `"none"`), and with cost rules `units` (unit → `{reserved, settled, refunded, charged_more,
//! capped}`, `capped` counting answers that said more than the unit's largest budget holds).

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

use super::batched::BatchRole;
use super::runner::{RequestOutcome, RequestResult};
use crate::http::Settlement;
use crate::store::SharedReport;

/// Latency figures in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Default)]
pub struct Percentiles {
    /// The lowest.
    pub min: f64,
    /// The mean.
    pub mean: f64,
    /// The median.
    pub p50: f64,
    /// The 90th percentile.
    pub p90: f64,
    /// The 95th percentile.
    pub p95: f64,
    /// The 99th percentile.
    pub p99: f64,
    /// The highest.
    pub max: f64,
}

/// One slice of [`Summary::service_histogram`]: attempts that took at most `up_to_ms` (and more
/// than the slice before).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct HistogramBucket {
    pub up_to_ms: f64,
    pub count: u64,
}

/// The slices of a latency histogram.
const HISTOGRAM_SLICES: u64 = 10;

/// Microsecond resolution up to one day, 3 significant figures.
fn histogram_of(values: impl Iterator<Item = Duration>) -> Option<Histogram<u64>> {
    let mut histogram = Histogram::<u64>::new_with_bounds(1, 86_400_000_000, 3).ok()?;
    for value in values {
        let micros = u64::try_from(value.as_micros()).unwrap_or(u64::MAX).clamp(1, 86_400_000_000);
        let _ = histogram.record(micros);
    }
    (!histogram.is_empty()).then_some(histogram)
}

fn ms(micros: u64) -> f64 {
    micros as f64 / 1000.0
}

impl Percentiles {
    fn of(values: impl Iterator<Item = Duration>) -> Self {
        let Some(histogram) = histogram_of(values) else { return Self::default() };
        Self {
            min: ms(histogram.min()),
            mean: histogram.mean() / 1000.0,
            p50: ms(histogram.value_at_quantile(0.50)),
            p90: ms(histogram.value_at_quantile(0.90)),
            p95: ms(histogram.value_at_quantile(0.95)),
            p99: ms(histogram.value_at_quantile(0.99)),
            max: ms(histogram.max()),
        }
    }
}

/// Ten equal slices from the smallest value to the largest, as oha and hey print them.
fn slices(values: impl Iterator<Item = Duration>) -> Vec<HistogramBucket> {
    let Some(histogram) = histogram_of(values) else { return Vec::new() };
    let (low, high) = (histogram.min(), histogram.max());
    // `span` microseconds from low to high, both included; fewer slices when that is narrow.
    let span = high - low + 1;
    let count = if histogram.equivalent(low, high) { 1 } else { HISTOGRAM_SLICES.min(span) };
    let width = span.div_ceil(count);
    let mut buckets: Vec<HistogramBucket> =
        (1..=count).map(|i| HistogramBucket { up_to_ms: ms(low + width * i - 1), count: 0 }).collect();
    for value in histogram.iter_recorded() {
        let slice = (value.value_iterated_to().saturating_sub(low) / width).min(count - 1);
        buckets[slice as usize].count += value.count_at_value();
    }
    buckets
}

/// The figures of one burst.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    /// Requests in the burst.
    pub requests: usize,
    /// HTTP attempts sent, retries included.
    pub sent: u64,
    /// Requests that ended with a status below 400.
    pub succeeded: u64,
    /// Requests that ended with 400 or above, or without a response.
    pub failed: u64,
    /// Requests cancelled before they ended.
    pub cancelled: u64,
    /// Final statuses, counted by code (`"200"`, `"429"`, ...).
    pub status_counts: BTreeMap<String, u64>,
    /// Attempts beyond each request's first.
    pub retries: u64,
    /// Requests answered from the response cache.
    pub cache_hits: u64,
    /// Requests answered with a copy of an identical request in flight (coalescing).
    pub coalesced: u64,
    /// Requests whose item went upstream in a batch (an endpoint with a batch template).
    pub batched_items: u64,
    /// The upstream requests (batches) that carried those items.
    pub batches: u64,
    /// Requests batching saved: batched items that needed no request of their own.
    pub saved_by_batching: u64,
    /// First arrival to last end, in seconds.
    pub elapsed_s: f64,
    /// Finished requests per second of `elapsed_s`.
    pub achieved_rps: f64,
    /// Send to response, per attempt.
    pub service_ms: Percentiles,
    /// Time in the limiter, per request.
    pub queue_wait_ms: Percentiles,
    /// First queued to final response, per request.
    pub total_ms: Percentiles,
    /// How many attempts' service times fall in each bucket.
    pub service_histogram: Vec<HistogramBucket>,
    /// Failed requests by a stable cause (`final status`, `could not connect`, ...).
    pub errors: BTreeMap<String, u64>,
    /// One full message per cause.
    pub error_examples: BTreeMap<String, String>,
    /// The limits the burst ran under, in words (or that it ran raw).
    pub limiter: String,
    /// Shared budgets: store, keys, state and counts; absent when budgets were in-process.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shared: Option<SharedReport>,
    /// Units other than requests (tokens, points) reserved and settled, by unit; absent
    /// without cost rules.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub units: BTreeMap<String, UnitTotals>,
}

/// One unit over a burst: what the attempts reserved, what their answers settled, and the
/// difference both ways.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct UnitTotals {
    /// What the attempts reserved before sending.
    pub reserved: u64,
    /// What their answers said was spent (the estimate where they said nothing).
    pub settled: u64,
    /// Given back: estimates above what was spent.
    pub refunded: u64,
    /// Charged on top: answers that spent more than their estimate.
    pub charged_more: u64,
    /// Answers that said more than the largest budget of the unit holds, counted as that much
    /// (a broken or lying server).
    pub capped: u64,
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
            coalesced: 0,
            batched_items: 0,
            batches: 0,
            saved_by_batching: 0,
            elapsed_s: elapsed.as_secs_f64(),
            achieved_rps: 0.0,
            service_ms: Percentiles::of(results.iter().flat_map(|r| r.attempts.iter().map(|a| a.service_time))),
            queue_wait_ms: Percentiles::of(results.iter().filter(|r| r.finished()).map(RequestResult::queue_wait)),
            total_ms: Percentiles::of(results.iter().filter(|r| r.finished()).map(|r| r.total)),
            service_histogram: slices(results.iter().flat_map(|r| r.attempts.iter().map(|a| a.service_time))),
            errors: BTreeMap::new(),
            error_examples: BTreeMap::new(),
            limiter,
            shared: None,
            units: BTreeMap::new(),
        };
        for result in results {
            summary.sent += result.attempts.len() as u64;
            summary.retries += result.attempts.len().saturating_sub(1) as u64;
            summary.cache_hits += u64::from(result.from_cache);
            summary.coalesced += u64::from(result.coalesced);
            summary.batched_items += u64::from(result.batch.is_some());
            summary.batches += u64::from(result.batch == Some(BatchRole::Leader));
            for attempt in &result.attempts {
                let key = attempt.status.map_or_else(|| "error".to_owned(), |status| status.to_string());
                *summary.status_counts.entry(key).or_default() += 1;
                if let Some(settlement) = &attempt.settlement {
                    summary.add_settlement(settlement);
                }
            }
            match &result.outcome {
                RequestOutcome::Succeeded { .. } => summary.succeeded += 1,
                RequestOutcome::Failed { status, kind, error } => {
                    summary.failed += 1;
                    let cause = kind.counted_as(*status);
                    summary.error_examples.entry(cause.clone()).or_insert_with(|| error.clone());
                    *summary.errors.entry(cause).or_default() += 1;
                }
                RequestOutcome::Cancelled => summary.cancelled += 1,
            }
        }
        summary.saved_by_batching = summary.batched_items.saturating_sub(summary.batches);
        let finished = summary.succeeded + summary.failed;
        summary.achieved_rps = if summary.elapsed_s > 0.0 { finished as f64 / summary.elapsed_s } else { 0.0 };
        summary
    }

    /// Adds one settlement, each unit once (however many entries name it), saturating.
    fn add_settlement(&mut self, settlement: &Settlement) {
        let units = settlement.reserved.units.iter().chain(&settlement.actual.units).map(|(unit, _)| unit);
        let mut seen: Vec<&crate::engine::Unit> = Vec::new();
        for unit in units {
            if seen.contains(&unit) {
                continue;
            }
            seen.push(unit);
            let (reserved, actual) = (settlement.reserved.of(unit), settlement.actual.of(unit));
            let totals = self.units.entry(unit.to_string()).or_default();
            totals.reserved = totals.reserved.saturating_add(reserved);
            totals.settled = totals.settled.saturating_add(actual);
            totals.refunded = totals.refunded.saturating_add(reserved.saturating_sub(actual));
            totals.charged_more = totals.charged_more.saturating_add(actual.saturating_sub(reserved));
            totals.capped += u64::from(settlement.capped.iter().any(|(capped, _)| capped == unit));
        }
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
        if self.batched_items > 0 {
            let requests = if self.batches == 1 { "request" } else { "requests" };
            writeln!(
                f,
                "batching:      {} items in {} upstream {requests} ({} saved)",
                self.batched_items, self.batches, self.saved_by_batching
            )?;
        }
        if self.cache_hits + self.coalesced + self.saved_by_batching > 0 {
            write!(f, "saved:         {} by cache, {} by coalescing", self.cache_hits, self.coalesced)?;
            if self.saved_by_batching > 0 {
                write!(f, ", {} by batching", self.saved_by_batching)?;
            }
            writeln!(f)?;
        }
        let statuses: Vec<String> = self.status_counts.iter().map(|(status, n)| format!("{status}×{n}")).collect();
        writeln!(f, "statuses:      {}", if statuses.is_empty() { "-".to_owned() } else { statuses.join("  ") })?;
        writeln!(f, "elapsed:       {:.3}s   achieved: {:.2} req/s", self.elapsed_s, self.achieved_rps)?;
        writeln!(f, "                  min      mean       p50       p95       p99       max   (ms)")?;
        for (name, p) in [("service", self.service_ms), ("queue wait", self.queue_wait_ms), ("total", self.total_ms)] {
            writeln!(
                f,
                "{name:<12} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1}",
                p.min, p.mean, p.p50, p.p95, p.p99, p.max
            )?;
        }
        histogram_lines(f, &self.service_histogram)?;
        if let Some(shared) = &self.shared {
            writeln!(f, "{shared}")?;
        }
        for (unit, totals) in &self.units {
            let UnitTotals { reserved, settled, refunded, charged_more, capped } = totals;
            write!(
                f,
                "{unit}:{:pad$}reserved {reserved}, settled {settled} (refunded {refunded}, charged {charged_more} more)",
                "",
                pad = 14usize.saturating_sub(unit.len() + 1).max(1)
            )?;
            match capped {
                0 => writeln!(f)?,
                1 => writeln!(f, "; 1 answer said more than its budget holds and was capped")?,
                n => writeln!(f, "; {n} answers said more than their budget holds and were capped")?,
            }
        }
        for (cause, n) in &self.errors {
            match self.error_examples.get(cause) {
                Some(example) if example != cause => writeln!(f, "failed ×{n}: {cause} (e.g. {example})")?,
                _ => writeln!(f, "failed ×{n}: {cause}")?,
            }
        }
        Ok(())
    }
}

/// The service-time histogram as bars, the longest 40 wide.
fn histogram_lines(f: &mut fmt::Formatter<'_>, buckets: &[HistogramBucket]) -> fmt::Result {
    let Some(most) = buckets.iter().map(|bucket| bucket.count).max().filter(|&most| most > 0) else {
        return Ok(());
    };
    writeln!(f, "service time histogram (attempts up to each time):")?;
    for bucket in buckets {
        let bar = "■".repeat((bucket.count * 40).div_ceil(most) as usize);
        writeln!(f, "  {:>9.1} ms [{:>6}] {bar}", bucket.up_to_ms, bucket.count)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tokio::time::Instant;

    use super::*;
    use crate::engine::Priority;
    use crate::http::AttemptRecord;
    use crate::run::Failure;

    fn result(index: usize, service_ms: u64, outcome: RequestOutcome) -> RequestResult {
        let now = Instant::now();
        let attempt = AttemptRecord {
            attempt: 1,
            sent_at: now,
            queue_wait: Duration::ZERO,
            service_time: Duration::from_millis(service_ms),
            status: Some(200),
            error: None,
            retry_delay: None,
            server_remaining: None,
            retry_after: None,
            settlement: None,
        };
        RequestResult {
            index,
            method: http::Method::GET,
            path: Arc::from("/"),
            priority: Priority::Normal,
            burst_start: now,
            arrived: now,
            total: Duration::from_millis(service_ms),
            attempts: vec![attempt],
            from_cache: false,
            coalesced: false,
            batch: None,
            outcome,
        }
    }

    #[test]
    fn latency_figures_and_histogram_cover_every_attempt() {
        let results: Vec<_> =
            (1..=100).map(|ms| result(ms as usize, ms, RequestOutcome::Succeeded { status: 200 })).collect();
        let summary = Summary::from_results(100, &results, Duration::from_secs(1), "none".into());
        let service = summary.service_ms;
        // Three significant figures: the histogram's values are within 0.1% of the recorded ones.
        assert_eq!(service.min, 1.0);
        assert!((100.0..100.1).contains(&service.max), "{service:?}");
        assert!((service.mean - 50.5).abs() < 0.1, "{service:?}");
        assert!((94.0..=96.0).contains(&service.p95), "{service:?}");
        let counted: u64 = summary.service_histogram.iter().map(|bucket| bucket.count).sum();
        assert_eq!(counted, 100);
        assert_eq!(summary.service_histogram.len(), 10);
        assert!(summary.service_histogram.iter().all(|bucket| (9..=11).contains(&bucket.count)));
        let text = summary.to_string();
        assert!(text.contains("service time histogram") && text.contains("■"), "{text}");
        // All alike: one slice, not a panic.
        let same: Vec<_> = (0..3).map(|i| result(i, 7, RequestOutcome::Succeeded { status: 200 })).collect();
        let summary = Summary::from_results(3, &same, Duration::from_secs(1), "none".into());
        assert_eq!(summary.service_histogram.len(), 1);
        assert_eq!(summary.service_histogram[0].count, 3);
    }

    #[test]
    fn a_settlement_adds_each_unit_once_saturating_and_counts_capped_answers() {
        use crate::engine::{Cost, Unit};
        use crate::http::Settlement;
        let settled = |reserved: Cost, actual: Cost, capped: Vec<(Unit, u64)>| {
            let mut result = result(0, 5, RequestOutcome::Succeeded { status: 200 });
            result.attempts[0].settlement = Some(Settlement { reserved, actual, capped });
            result
        };
        // Two entries for tokens (as two rules for one unit made): counted once, not squared.
        let twice = Cost::requests(1).with(Unit::tokens(), 5).with(Unit::tokens(), 6);
        let huge = Cost::requests(1).with(Unit::tokens(), u64::MAX);
        let results = [
            settled(twice.clone(), twice, Vec::new()),
            settled(Cost::requests(1).with(Unit::tokens(), 10), huge.clone(), vec![(Unit::tokens(), u64::MAX)]),
            settled(Cost::requests(1).with(Unit::tokens(), 10), huge, Vec::new()),
        ];
        let summary = Summary::from_results(3, &results, Duration::from_secs(1), "none".into());
        let tokens = &summary.units["tokens"];
        assert_eq!((tokens.reserved, tokens.settled, tokens.capped), (31, u64::MAX, 1));
        assert_eq!((tokens.refunded, tokens.charged_more), (0, u64::MAX));
        assert!(summary.to_string().contains("1 answer said more than its budget holds and was capped"));
    }

    #[test]
    fn failures_count_by_cause_not_by_message() {
        let failed = |error: &str, kind: Failure, status: Option<u16>| RequestOutcome::Failed {
            status,
            kind,
            error: error.to_owned(),
        };
        let results = vec![
            result(
                0,
                5,
                failed(
                    "gave up after 3 attempts; last: connection error: took 1.000000213s",
                    Failure::Cause("gave up after retries"),
                    None,
                ),
            ),
            result(
                1,
                5,
                failed(
                    "gave up after 3 attempts; last: connection error: took 1.000000987s",
                    Failure::Cause("gave up after retries"),
                    None,
                ),
            ),
            result(2, 5, failed("final status 404 Not Found", Failure::FinalStatus, Some(404))),
        ];
        let summary = Summary::from_results(3, &results, Duration::from_secs(1), "none".into());
        assert_eq!(summary.errors.len(), 2, "{:?}", summary.errors);
        assert_eq!(summary.errors["gave up after retries"], 2);
        assert_eq!(summary.errors["final status 404"], 1);
        assert!(summary.error_examples["gave up after retries"].ends_with("1.000000213s"));
        assert!(summary.to_string().contains("failed ×2: gave up after retries (e.g. gave up after 3 attempts"));
    }
}
