//! "What the server says": the newest budgets a server advertised, and a button to adopt them as limits.

use egui::{Color32, ProgressBar, RichText, Ui};

use crate::engine::{BudgetSpec, LimiterConfig, format_period, format_wait};
use crate::http::RateLimitInfo;
use crate::telemetry::Telemetry;

/// What the panel shows before any response carried rate-limit information.
pub const EMPTY_TEXT: &str = "The server has not advertised any limits yet.";
/// The heading over what adaptive mode learned.
pub const ADAPTIVE_TITLE: &str = "Adaptive mode learned";
/// How many of adaptive mode's newest notes the panel shows.
const ADAPTIVE_SHOWN: usize = 4;
/// What a budget whose reset has passed shows instead of its bar.
pub const RESET_TEXT: &str = "reset";
/// The label of the button that adopts the server's budgets.
pub const APPLY_TEXT: &str = "Apply to profile";

/// Shows the newest rate-limit information a server sent; returns a limiter config made of its
/// budgets when the user clicks "Apply to profile".
pub fn server_ui(ui: &mut Ui, telemetry: &Telemetry) -> Option<LimiterConfig> {
    let Some((key, info)) = &telemetry.latest_server else {
        ui.weak(EMPTY_TEXT);
        return None;
    };
    // Waits count down from when the response arrived.
    let since = telemetry.seconds(tokio::time::Instant::now()) - telemetry.latest_server_at;
    let elapsed = std::time::Duration::from_secs_f64(since.max(0.0));
    let left = |wait: std::time::Duration| wait.saturating_sub(elapsed);
    let passed = |wait: std::time::Duration| wait <= elapsed;
    // Countdowns move only while one runs: once every reset has passed the panel sleeps.
    let counting = info.retry_after.is_some_and(|wait| !passed(wait))
        || info.budgets.iter().any(|budget| budget.reset_after.is_some_and(|wait| !passed(wait)));
    if counting {
        ui.ctx().request_repaint_after(std::time::Duration::from_millis(250));
    }
    ui.horizontal_wrapped(|ui| {
        match key {
            Some(key) => ui.label(format!("key {key}")),
            None => ui.weak("no limiter key"),
        };
        if let Some(status) = info.status {
            ui.weak(format!("status {status}"));
        }
        if info.throttled {
            ui.label(RichText::new("throttled").color(super::palette::status_colors(ui.visuals()).warn));
        }
        match info.retry_after {
            Some(wait) if passed(wait) => {
                ui.weak("retry-after passed");
            }
            Some(wait) => {
                ui.label(format!("retry after {}", format_wait(left(wait))));
            }
            None => {}
        }
    });

    if info.budgets.is_empty() {
        ui.weak("No budget in the newest response, only a retry hint.");
    } else {
        egui::Grid::new("ratescope_server_budgets").striped(true).num_columns(5).show(ui, |ui| {
            for title in ["budget", "remaining / limit", "", "resets in", "window"] {
                ui.strong(title);
            }
            ui.end_row();
            for budget in &info.budgets {
                ui.label(budget.name.as_str()).on_hover_text(format!("{} · from {}", budget.unit, budget.source));
                let remaining = budget.remaining.map_or_else(|| "?".to_owned(), number);
                let limit = budget.limit.map_or_else(|| "?".to_owned(), number);
                if budget.reset_after.is_some_and(passed) {
                    // What was left before a reset that has passed says nothing about now.
                    ui.weak(format!("{remaining} / {limit} {} before its reset", budget.unit));
                    ui.weak(RESET_TEXT);
                    ui.weak("passed");
                    ui.label(budget.window.map_or_else(|| "-".to_owned(), format_period));
                    ui.end_row();
                    continue;
                }
                ui.monospace(format!("{remaining} / {limit} {}", budget.unit));
                match (budget.remaining, budget.limit) {
                    (Some(remaining), Some(limit)) if limit > 0.0 => {
                        let fraction = (remaining / limit).clamp(0.0, 1.0) as f32;
                        ui.add(ProgressBar::new(fraction).desired_width(80.0).fill(fill_color(fraction)));
                    }
                    _ => {
                        ui.weak("-");
                    }
                }
                ui.label(budget.reset_after.map_or_else(|| "-".to_owned(), |wait| format_wait(left(wait))));
                ui.label(budget.window.map_or_else(|| "-".to_owned(), format_period));
                ui.end_row();
            }
        });
    }

    adaptive_notes_ui(ui, telemetry);
    let config = config_from_server(info);
    let hover = "Replaces the limits of this key in the current profile with one exact sliding window per \
                 budget counting requests whose limit and window the server published (e.g. 100 per 1m), \
                 so the client never sends more than the server allows in any window. Budgets in other units \
                 (tokens, points) or without a window are left out.";
    let response =
        ui.add_enabled(config.is_some(), egui::Button::new(APPLY_TEXT)).on_hover_text(hover).on_disabled_hover_text(
            format!("Nothing to apply: no budget counting requests has both a limit and a window.\n\n{hover}"),
        );
    if response.clicked() { config } else { None }
}

/// The newest things adaptive mode learned about the server (scouting, windows, paces).
fn adaptive_notes_ui(ui: &mut Ui, telemetry: &Telemetry) {
    if telemetry.adaptive_notes.is_empty() {
        return;
    }
    ui.add_space(4.0);
    ui.strong(ADAPTIVE_TITLE);
    for (at, key, note) in telemetry.adaptive_notes.iter().rev().take(ADAPTIVE_SHOWN) {
        let key = key.as_deref().map_or_else(String::new, |key| format!("{key}: "));
        ui.label(format!("{at:.1}s  {key}{note}"));
    }
}

/// One exact sliding window per budget counting requests with a limit and a window (limits rounded
/// down; invalid or duplicate budgets skipped), or `None` when no budget qualifies.
pub fn config_from_server(info: &RateLimitInfo) -> Option<LimiterConfig> {
    let mut config = LimiterConfig::new();
    for budget in &info.budgets {
        let (Some(limit), Some(window)) = (budget.limit, budget.window) else { continue };
        if !budget.unit.eq_ignore_ascii_case("requests") || !limit.is_finite() || limit < 1.0 {
            continue;
        }
        if config.budgets.iter().any(|existing| existing.name == budget.name) {
            continue;
        }
        if let Ok(spec) = BudgetSpec::sliding_window(budget.name.as_str(), limit.floor() as u64, window) {
            config = config.with_budget(spec);
        }
    }
    (!config.budgets.is_empty() && config.validate().is_ok()).then_some(config)
}

/// Green while plenty is left, orange when low, red when (nearly) exhausted.
fn fill_color(fraction: f32) -> Color32 {
    if fraction <= 0.1 {
        Color32::from_rgb(215, 58, 73)
    } else if fraction <= 0.3 {
        Color32::from_rgb(235, 140, 20)
    } else {
        Color32::from_rgb(46, 160, 67)
    }
}

/// A count without a needless fraction: `42`, `0.5`.
fn number(value: f64) -> String {
    if value.fract() == 0.0 && value.abs() < 1e15 { format!("{value:.0}") } else { format!("{value:.2}") }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use egui_kittest::Harness;
    use egui_kittest::kittest::Queryable;
    use http::HeaderMap;
    use tokio::time::Instant;

    use super::*;
    use crate::engine::BudgetKind;
    use crate::http::{Event, EventKind, ServerBudget};

    /// A telemetry whose newest response carried `pairs` as headers.
    fn telemetry_after(pairs: &[(&'static str, &'static str)]) -> Telemetry {
        telemetry_from(Duration::ZERO, pairs)
    }

    /// [`telemetry_after`] for a response that arrived `ago`.
    fn telemetry_from(ago: Duration, pairs: &[(&'static str, &'static str)]) -> Telemetry {
        let origin = Instant::now() - ago;
        let mut telemetry = Telemetry::new(origin, 100, 100);
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.insert(*name, value.parse().unwrap());
        }
        let info = RateLimitInfo::parse(Some(200), &headers, None, SystemTime::now());
        telemetry.ingest(&Event {
            request_id: 1,
            key: Some("127.0.0.1:8787".into()),
            at: origin,
            kind: EventKind::Response {
                attempt: 1,
                status: 200,
                service_time: Duration::from_millis(5),
                info: Box::new(info),
                headers: Box::new(headers),
            },
        });
        telemetry
    }

    type State = (Telemetry, Option<Option<LimiterConfig>>);

    fn harness(telemetry: Telemetry) -> Harness<'static, State> {
        Harness::builder().with_size(egui::vec2(1000.0, 700.0)).build_ui_state(
            |ui, (telemetry, applied): &mut State| {
                if let Some(config) = server_ui(ui, telemetry) {
                    *applied = Some(Some(config));
                }
            },
            (telemetry, None),
        )
    }

    /// A budget whose reset has passed shows as reset, greyed, not as the old "0 / 5" with a
    /// red bar and "resets in 0ms".
    #[test]
    fn a_budget_whose_reset_has_passed_shows_as_reset() {
        let pairs =
            [("ratelimit-policy", "\"burst\";q=5;w=1"), ("ratelimit", "\"burst\";r=0;t=1"), ("retry-after", "1")];
        let mut fresh = harness(telemetry_from(Duration::ZERO, &pairs));
        fresh.run_steps(1);
        fresh.get_by_label("0 / 5 requests");
        assert!(fresh.query_by_label(RESET_TEXT).is_none());
        let mut stale = harness(telemetry_from(Duration::from_secs(30), &pairs));
        stale.run_steps(1);
        stale.get_by_label("0 / 5 requests before its reset");
        stale.get_by_label(RESET_TEXT);
        stale.get_by_label("retry-after passed");
        assert!(stale.query_by_label_contains("resets in 0").is_none());
    }

    #[test]
    fn applying_turns_request_budgets_into_sliding_windows() {
        // IETF draft: 100 requests per 60 s, 40 left.
        let mut harness = harness(telemetry_after(&[
            ("ratelimit-policy", "\"default\";q=100;w=60"),
            ("ratelimit", "\"default\";r=40;t=30"),
        ]));
        harness.run();
        harness.get_by_label("key 127.0.0.1:8787");
        assert!(harness.state().1.is_none(), "nothing is applied before the click");
        harness.get_by_label(APPLY_TEXT).click();
        harness.run();
        let Some(Some(config)) = &harness.state().1 else { panic!("the click returned no config") };
        assert_eq!(config.budgets.len(), 1);
        let budget = &config.budgets[0];
        assert_eq!(budget.name, "default");
        assert_eq!(budget.kind, BudgetKind::SlidingWindow { limit: 100, window: Duration::from_secs(60) });
    }

    #[test]
    fn nothing_to_apply_without_a_window() {
        // GitHub-style headers give a limit but no window: the button stays disabled.
        let mut harness = harness(telemetry_after(&[("x-ratelimit-limit", "60"), ("x-ratelimit-remaining", "59")]));
        harness.run();
        harness.get_by_label(APPLY_TEXT).click();
        harness.run();
        assert!(harness.state().1.is_none());

        let mut empty = harness_without_data();
        empty.run();
        empty.get_by_label(EMPTY_TEXT);
        assert!(empty.query_by_label(APPLY_TEXT).is_none());
    }

    #[test]
    fn what_adaptive_mode_learned_is_shown_with_its_time_and_key() {
        let mut telemetry = telemetry_after(&[("x-ratelimit-limit", "10"), ("x-ratelimit-remaining", "9")]);
        let origin = Instant::now();
        for (seconds, note) in [
            (0, "the server publishes its budget: default 10, 9 left"),
            (2, "window of 'default' measured from its resets: 10 per 2.0s"),
        ] {
            telemetry.ingest(&Event {
                request_id: 1,
                key: Some("127.0.0.1:8787".into()),
                at: origin + Duration::from_secs(seconds),
                kind: EventKind::Adaptive { note: note.into() },
            });
        }
        let mut learned = harness(telemetry);
        learned.run();
        learned.get_by_label(ADAPTIVE_TITLE);
        learned.get_by_label("2.0s  127.0.0.1:8787: window of 'default' measured from its resets: 10 per 2.0s");
        learned.get_by_label("0.0s  127.0.0.1:8787: the server publishes its budget: default 10, 9 left");
        let mut empty = harness(telemetry_after(&[("x-ratelimit-limit", "10")]));
        empty.run();
        assert!(empty.query_by_label(ADAPTIVE_TITLE).is_none(), "nothing learned, no heading");
    }

    #[tokio::test(start_paused = true)]
    async fn resets_in_counts_down_from_when_the_response_came() {
        let mut harness = harness(telemetry_after(&[
            ("ratelimit-policy", "\"default\";q=100;w=60"),
            ("ratelimit", "\"default\";r=40;t=30"),
            ("retry-after", "12"),
        ]));
        harness.run();
        harness.get_by_label("30.0s");
        harness.get_by_label("retry after 12.0s");
        tokio::time::advance(Duration::from_secs(10)).await;
        harness.run();
        harness.get_by_label("20.0s");
        harness.get_by_label("retry after 2.0s");
        tokio::time::advance(Duration::from_secs(40)).await;
        harness.run();
        // Past its reset the budget shows as reset (it used to read "0ms" forever).
        harness.get_by_label(RESET_TEXT);
        harness.get_by_label("passed");
        assert!(harness.query_by_label("0ms").is_none());
    }

    fn harness_without_data() -> Harness<'static, State> {
        harness(Telemetry::new(Instant::now(), 10, 10))
    }

    #[test]
    fn only_valid_request_budgets_qualify() {
        let budget = |name: &str, limit: Option<f64>, window: Option<u64>, unit: &str| ServerBudget {
            name: name.into(),
            limit,
            remaining: None,
            reset_after: None,
            window: window.map(Duration::from_secs),
            unit: unit.into(),
            source: "test".into(),
            reset_precision: Duration::ZERO,
        };
        let mut info = RateLimitInfo {
            status: Some(200),
            budgets: vec![],
            retry_after: None,
            throttled: false,
            warnings: vec![],
            date_lag: None,
        };
        assert_eq!(config_from_server(&info), None);
        info.budgets = vec![
            budget("tokens", Some(1000.0), Some(60), "tokens"),
            budget("no-window", Some(10.0), None, "requests"),
            budget("fraction", Some(0.5), Some(1), "requests"),
            budget("zero-window", Some(10.0), Some(0), "requests"),
            budget("minute", Some(99.9), Some(60), "requests"),
            budget("minute", Some(5.0), Some(1), "requests"),
        ];
        let config = config_from_server(&info).unwrap();
        let kinds: Vec<(&str, BudgetKind)> = config.budgets.iter().map(|b| (b.name.as_str(), b.kind)).collect();
        assert_eq!(kinds, [("minute", BudgetKind::SlidingWindow { limit: 99, window: Duration::from_secs(60) })]);
        info.budgets.truncate(4);
        assert_eq!(config_from_server(&info), None);
    }
}
