//! The aiolimiter (Python asyncio) export: a module defining `limiter`, an async context manager
//! that takes a place in flight (an `asyncio.Semaphore`) and then one `AsyncLimiter` per budget,
//! one request at a time (an `asyncio.Lock`).
//!
//! Checked against aiolimiter 1.3's `AsyncLimiter(max_rate, time_period)`: a leaky bucket whose
//! level drains at `max_rate / time_period` per second and admits while `level + 1 <= max_rate`,
//! which is a token bucket of `max_rate` refilled one every `time_period / max_rate` seconds. The
//! period is written a little long (see `float_safe`) so its float arithmetic can only be slower.

use super::{Export, float_safe, seconds_literal};

pub(super) fn render(export: &Export) -> String {
    let mut out = String::new();
    for line in &export.header {
        push_comment(&mut out, line);
    }
    push_comment(&mut out, "");
    push_comment(&mut out, "Needs Python 3.10 or later and aiolimiter (pip install aiolimiter).");
    push_comment(&mut out, "Use: from this_module import limiter; then `async with limiter:` around each request.");
    out.push_str("\nimport asyncio\n");
    if !export.plan.stages.is_empty() {
        out.push_str("\nfrom aiolimiter import AsyncLimiter\n");
    }
    out.push('\n');
    out.push_str("# One AsyncLimiter(max_rate, time_period) per budget, in the order each request waits on them.\n");
    out.push_str("_BUDGETS = (\n");
    for stage in &export.plan.stages {
        let period = u128::from(float_safe(stage.interval_ns)) * u128::from(stage.capacity);
        out.push_str(&format!("    # Budget '{}' ({}): {}.\n", stage.budget, stage.source, stage.describe()));
        out.push_str(&format!("    AsyncLimiter({}, {}),\n", stage.capacity, seconds_literal(period)));
    }
    out.push_str(")\n");
    let cap = match export.plan.concurrency {
        Some(limit) => format!("{limit}"),
        None => "None".to_owned(),
    };
    out.push_str(&format!("# Requests in flight at most (None: no cap).\n_IN_FLIGHT = {cap}\n"));
    out.push_str(CLASS);
    out
}

fn push_comment(out: &mut String, line: &str) {
    super::comment_line(out, "#", line);
}

/// The context manager, the same for every export.
const CLASS: &str = r#"

class _Limits:
    """Every limit above: a place in flight first, then each budget in turn, one request at a time."""

    def __init__(self):
        self._in_flight = None if _IN_FLIGHT is None else asyncio.Semaphore(_IN_FLIGHT)
        self._gate = asyncio.Lock()

    async def __aenter__(self):
        if self._in_flight is not None:
            await self._in_flight.acquire()
        try:
            async with self._gate:
                for budget in _BUDGETS:
                    await budget.acquire()
        except BaseException:
            if self._in_flight is not None:
                self._in_flight.release()
            raise

    async def __aexit__(self, exc_type, exc, traceback):
        if self._in_flight is not None:
            self._in_flight.release()
        return False


limiter = _Limits()
"#;
