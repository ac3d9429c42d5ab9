//! The Bottleneck (Node) export: a CommonJS module whose `module.exports` is a Bottleneck
//! limiter, chained to one limiter per budget, so `limiter.schedule(fn)` keeps them all.
//!
//! Checked against Bottleneck 2.19.5's `LocalDatastore`:
//! - `minTime` spaces job starts at least that many milliseconds apart: a bucket of one, exact.
//! - `reservoir` with `reservoirIncreaseAmount`/`Interval`/`Maximum` is a bucket refilled by a
//!   heartbeat (every `heartbeatInterval` ms, 250 by default): at the first beat at least
//!   `Interval` after the last increase it adds `min(Amount, Maximum − reservoir)` and restarts
//!   the clock from that beat, full or not. Because the clock runs while the reservoir is full,
//!   a request can take the last token just before an increase and another right after it: in
//!   any span `T` it admits at most `Maximum + 1 + ⌊T/Interval⌋`. A bucket of `C` therefore gets
//!   `Maximum = C − 1` (and starts with `C − 1`), never more than the bucket allows.
//! - `reservoirRefresh*` is a fixed window from the limiter's creation (up to twice the limit
//!   across a boundary), so it is not used.
//! - `chain(next)` runs a job admitted here through `next.schedule` with the same weight: the
//!   first limiter's `maxConcurrent` counts a request until the whole chain has run it.
//! - Node's timers overflow past 2^31 − 1 ms (about 24.8 days) and fire at once, so a `minTime`
//!   beyond that is refused rather than written.

use super::{Export, ExportError, ExportFormat, Stage};

/// Node's longest timer (`setTimeout` with more fires after 1 ms).
const MAX_TIMER_MS: u64 = (1 << 31) - 1;
/// Bottleneck's default heartbeat; shorter ones are used for refills shorter than this.
const DEFAULT_HEARTBEAT_MS: u64 = 250;

pub(super) fn render(export: &Export) -> Result<String, ExportError> {
    let mut out = String::new();
    for line in &export.header {
        push_comment(&mut out, line);
    }
    push_comment(&mut out, "");
    push_comment(&mut out, "Use: const limiter = require('./this-file'); await limiter.schedule(() => fetch(url));");
    out.push_str("'use strict';\n\nconst Bottleneck = require('bottleneck');\n\n");
    let mut names = Vec::new();
    if let Some(limit) = export.plan.concurrency {
        out.push_str(&format!(
            "// At most {limit} requests in flight; a request holds its place while it waits below.\n"
        ));
        out.push_str(&format!("const inFlight = new Bottleneck({{ maxConcurrent: {limit} }});\n"));
        names.push("inFlight".to_owned());
    }
    for (index, stage) in export.plan.stages.iter().enumerate() {
        let name = format!("budget{}", index + 1);
        out.push_str(&limiter(&name, stage)?);
        names.push(name);
    }
    if names.is_empty() {
        out.push_str("// No limits: a limiter that runs every job at once.\n");
        out.push_str("module.exports = new Bottleneck();\n");
        return Ok(out);
    }
    out.push('\n');
    // a.chain(b) returns a: the head runs each job through the rest, in order.
    let mut chain = names.pop().unwrap_or_default();
    while let Some(name) = names.pop() {
        chain = format!("{name}.chain({chain})");
    }
    out.push_str(&format!("module.exports = {chain};\n"));
    Ok(out)
}

fn push_comment(out: &mut String, line: &str) {
    super::comment_line(out, "//", line);
}

/// One budget's limiter: `minTime` for a bucket of one, a reservoir for a burst.
fn limiter(name: &str, stage: &Stage) -> Result<String, ExportError> {
    let interval_ms = stage.interval_in(1_000_000);
    let rounded = if interval_ms * 1_000_000 == stage.interval_ns {
        String::new()
    } else {
        format!(" ({} rounded up to whole milliseconds)", super::period(stage.interval_ns))
    };
    let mut out = format!("// Budget '{}' ({}): {}.\n", stage.budget, stage.source, stage.describe());
    if stage.capacity == 1 {
        if interval_ms > MAX_TIMER_MS {
            return Err(ExportError::Target {
                format: ExportFormat::Bottleneck,
                budget: stage.budget.clone(),
                reason: format!(
                    "would wait {} between requests, longer than Node's timers can (about 24.8 days); \
                     export it --as go, governor or aiolimiter, or pace it yourself",
                    super::period(stage.interval_ns)
                ),
            });
        }
        out.push_str(&format!("// Job starts at least {interval_ms} ms apart{rounded}.\n"));
        out.push_str(&format!("const {name} = new Bottleneck({{ minTime: {interval_ms} }});\n"));
        return Ok(out);
    }
    // Beats at most DEFAULT_HEARTBEAT_MS apart that divide the interval (rounded up to a multiple).
    let beats = interval_ms.div_ceil(DEFAULT_HEARTBEAT_MS).max(1);
    let heartbeat = interval_ms.div_ceil(beats);
    let increase = heartbeat * beats;
    let held = stage.capacity - 1;
    out.push_str(&format!(
        "// A reservoir of {held} plus one added every {increase} ms{rounded}: Bottleneck's refill clock runs while \
         the reservoir is full, so one of the burst is held back.\n"
    ));
    out.push_str(&format!(
        "const {name} = new Bottleneck({{\n  reservoir: {held},\n  reservoirIncreaseAmount: 1,\n  \
         reservoirIncreaseInterval: {increase},\n  reservoirIncreaseMaximum: {held},\n  heartbeatInterval: {heartbeat},\n}});\n"
    ));
    Ok(out)
}
