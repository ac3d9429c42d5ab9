//! The Go export: `NewHostLimits()` returns the configured `golang.org/x/time/rate` limiters, one
//! per budget, with `Wait` taking a place in flight and then each limiter in turn, one request at
//! a time.
//!
//! Checked against x/time/rate 0.3: `rate.NewLimiter(rate.Every(d), b)` is a token bucket of `b`
//! refilled one every `d`, its tokens a float64, so `d` is written a little long (`float_safe`)
//! and its arithmetic can only be slower. `Wait` reserves a token and sleeps until it is due.

use super::{Export, Stage, float_safe};

pub(super) fn render(export: &Export) -> String {
    let mut out = String::new();
    for line in &export.header {
        push_comment(&mut out, line);
    }
    push_comment(&mut out, "");
    push_comment(&mut out, "Needs golang.org/x/time/rate. Use (rename the package to yours):");
    push_comment(&mut out, "\tlimits := NewHostLimits()");
    push_comment(&mut out, "\trelease, err := limits.Wait(ctx) // then send; call release() once the answer is read");
    out.push_str("\npackage ratelimits\n\nimport (\n\t\"context\"\n");
    if !export.plan.stages.is_empty() {
        out.push_str("\t\"time\"\n\n\t\"golang.org/x/time/rate\"\n");
    } else {
        out.push_str("\n\t\"golang.org/x/time/rate\"\n");
    }
    out.push_str(")\n");
    out.push_str(
        "\n// HostLimits is every limit above. Share one among all the goroutines that call this host.\n\
         type HostLimits struct {\n\
         \t// Limiters holds one limiter per budget, in the order each request waits on them.\n\
         \tLimiters []*rate.Limiter\n\
         \t// inFlight holds a place per request in flight (nil: no cap).\n\
         \tinFlight chan struct{}\n\
         \t// gate lets one request at a time through the limiters.\n\
         \tgate chan struct{}\n}\n",
    );
    out.push_str("\n// NewHostLimits returns the configured limiters.\nfunc NewHostLimits() *HostLimits {\n");
    out.push_str("\tlimits := &HostLimits{gate: make(chan struct{}, 1)}\n");
    if let Some(limit) = export.plan.concurrency {
        out.push_str(&format!(
            "\t// At most {limit} requests in flight.\n\tlimits.inFlight = make(chan struct{{}}, {limit})\n"
        ));
    }
    if export.plan.stages.is_empty() {
        out.push_str("\t// No budget: nothing to wait for.\n\tlimits.Limiters = []*rate.Limiter{}\n");
    } else {
        out.push_str("\tlimits.Limiters = []*rate.Limiter{\n");
        for stage in &export.plan.stages {
            out.push_str(&limiter(stage));
        }
        out.push_str("\t}\n");
    }
    out.push_str("\treturn limits\n}\n");
    out.push_str(TAIL);
    out
}

fn push_comment(out: &mut String, line: &str) {
    super::comment_line(out, "//", line);
}

fn limiter(stage: &Stage) -> String {
    let every = float_safe(stage.interval_ns);
    format!(
        "\t\t// Budget '{}' ({}): {}.\n\t\t// One every {every} ns, a little long so float arithmetic rounds slower.\n\
         \t\trate.NewLimiter(rate.Every({every}*time.Nanosecond), {}),\n",
        stage.budget,
        stage.source,
        stage.describe(),
        stage.capacity
    )
}

/// The same for every export.
const TAIL: &str = r#"
// Wait blocks until a request may go: a place in flight, then every limiter in turn, one
// request at a time. Call release once the answer has been read; on an error nothing is held.
func (l *HostLimits) Wait(ctx context.Context) (release func(), err error) {
	release = func() {}
	if l.inFlight != nil {
		select {
		case l.inFlight <- struct{}{}:
			release = func() { <-l.inFlight }
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	select {
	case l.gate <- struct{}{}:
	case <-ctx.Done():
		release()
		return nil, ctx.Err()
	}
	defer func() { <-l.gate }()
	for _, limiter := range l.Limiters {
		if err := limiter.Wait(ctx); err != nil {
			release()
			return nil, err
		}
	}
	return release, nil
}
"#;
