//! Per-attempt CSV export: one row per HTTP attempt, with a header row. Never holds secrets:
//! paths only (no query strings), no header values.

use std::io::Write;

use super::runner::{RequestOutcome, RequestResult};

/// The CSV columns.
pub const CSV_HEADER: [&str; 14] = [
    "request",
    "attempt",
    "method",
    "path",
    "priority",
    "sent_at_ms",
    "status",
    "error",
    "queue_wait_ms",
    "service_ms",
    "retry_delay_ms",
    "server_remaining",
    "retry_after_s",
    "final",
];

fn ms(duration: std::time::Duration) -> String {
    format!("{:.3}", duration.as_secs_f64() * 1000.0)
}

/// Writes every attempt of `results` as CSV.
pub fn write_csv(out: impl Write, results: &[RequestResult]) -> Result<(), csv::Error> {
    let mut writer = csv::Writer::from_writer(out);
    writer.write_record(CSV_HEADER)?;
    for result in results {
        let last = result.attempts.len();
        for (i, attempt) in result.attempts.iter().enumerate() {
            let is_final = i + 1 == last && !matches!(result.outcome, RequestOutcome::Cancelled);
            writer.write_record([
                result.index.to_string(),
                attempt.attempt.to_string(),
                result.method.to_string(),
                result.path.to_string(),
                result.priority.to_string(),
                ms(attempt.sent_at.saturating_duration_since(result.burst_start)),
                attempt.status.map(|s| s.to_string()).unwrap_or_default(),
                attempt.error.clone().unwrap_or_default(),
                ms(attempt.queue_wait),
                ms(attempt.service_time),
                attempt.retry_delay.map(ms).unwrap_or_default(),
                // Compact, as it reads back: a server's 1e308 is not 309 digits.
                attempt.server_remaining.map(crate::engine::format_amount).unwrap_or_default(),
                attempt.retry_after.map(|r| format!("{:.3}", r.as_secs_f64())).unwrap_or_default(),
                is_final.to_string(),
            ])?;
        }
    }
    writer.flush()?;
    Ok(())
}
