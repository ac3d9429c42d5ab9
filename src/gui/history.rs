//! The session's last runs: what each was (settings) and how it went (429s, goodput, p50/p99,
//! elapsed), and which one the live charts are compared with.

use std::collections::VecDeque;
use std::sync::Arc;

use egui::{RichText, Ui};

use crate::run::Summary;
use crate::telemetry::Telemetry;

/// Runs kept (each with its charts' data).
pub const HISTORY_RUNS: usize = 8;

/// One finished run.
#[derive(Debug, Clone)]
pub struct RunRecord {
    /// Counts from 1 in a session.
    pub number: u32,
    /// What was fired: method, paths, count, limits.
    pub settings: String,
    /// Final 429s.
    pub throttled: u64,
    /// Successful requests per second of the run.
    pub goodput: f64,
    /// Median first-queued-to-response time, in milliseconds.
    pub p50_ms: f64,
    /// 99th percentile of the same.
    pub p99_ms: f64,
    /// How long the run took, in seconds.
    pub elapsed_s: f64,
    /// Whether it was cancelled before every request finished.
    pub cancelled: u64,
    /// Its charts' data, to draw under a later run: shared with the charts showing it, so a
    /// long run is not held twice.
    pub telemetry: Arc<Telemetry>,
}

impl RunRecord {
    /// The record of run `number`, from its summary and charts.
    pub fn new(number: u32, settings: String, summary: &Summary, telemetry: Arc<Telemetry>) -> Self {
        let goodput = if summary.elapsed_s > 0.0 { summary.succeeded as f64 / summary.elapsed_s } else { 0.0 };
        Self {
            number,
            settings,
            throttled: summary.status_counts.get("429").copied().unwrap_or(0),
            goodput,
            p50_ms: summary.total_ms.p50,
            p99_ms: summary.total_ms.p99,
            elapsed_s: summary.elapsed_s,
            cancelled: summary.cancelled,
            telemetry,
        }
    }
}

/// The last runs, newest last, and the one compared with.
#[derive(Debug, Default)]
pub struct History {
    /// The runs kept, oldest first.
    pub runs: VecDeque<RunRecord>,
    /// The number of the run drawn under the live charts.
    pub compare: Option<u32>,
    next: u32,
}

impl History {
    /// Keeps a finished run (the oldest goes past [`HISTORY_RUNS`]).
    pub fn push(&mut self, settings: String, summary: &Summary, telemetry: Arc<Telemetry>) {
        self.next += 1;
        self.runs.push_back(RunRecord::new(self.next, settings, summary, telemetry));
        while self.runs.len() > HISTORY_RUNS {
            self.runs.pop_front();
        }
        if self.compare.is_some_and(|number| self.runs.iter().all(|run| run.number != number)) {
            self.compare = None;
        }
    }

    /// The telemetry of the run compared with, unless it is the one on the charts now.
    pub fn compared(&self, shown: Option<u32>) -> Option<&Telemetry> {
        let number = self.compare.filter(|number| Some(*number) != shown)?;
        self.runs.iter().find(|run| run.number == number).map(|run| &*run.telemetry)
    }
}

/// The label of a run's compare toggle.
pub fn compare_label(number: u32) -> String {
    format!("compare #{number}")
}

/// The runs as a table, newest first, with a toggle to draw one under the live charts. Its
/// columns fit the panel (cells elide, the whole text on hover): the run number and its compare
/// toggle come first, so they stay in view however narrow the panel is.
pub fn history_ui(ui: &mut Ui, history: &mut History) {
    use egui_extras::{Column, TableBuilder};

    if history.runs.is_empty() {
        ui.weak("Finished runs appear here; compare one with the next to tune visually.");
        return;
    }
    // #, compare, 429s, goodput, p50, p99, elapsed, settings
    const WANTED: [f32; 8] = [30.0, 68.0, 40.0, 60.0, 52.0, 52.0, 52.0, 150.0];
    // The compare toggle keeps its width: a button cut to "co…" is no button.
    let spacing = ui.spacing().item_spacing.x;
    let widths = super::columns::fit_columns_keeping(ui.available_width(), spacing, WANTED, 7, &[1]);
    let row_height = ui.text_style_height(&egui::TextStyle::Body).max(ui.spacing().interact_size.y);
    let mut table = TableBuilder::new(ui).id_salt("ratescope_history").striped(true).vscroll(false);
    for width in widths {
        table = table.column(Column::exact(width).clip(true));
    }
    let cell = |ui: &mut Ui, text: String| {
        ui.add(egui::Label::new(RichText::new(text).monospace()).truncate());
    };
    table
        .header(row_height, |mut header| {
            for (title, hint) in [
                ("#", "The run's number in this session"),
                ("", "Draw the run faintly under the live charts"),
                ("429s", "Requests that ended in 429 Too Many Requests"),
                ("goodput", "Successful requests per second of the run"),
                ("p50", "Median time from first queued to response"),
                ("p99", "99th percentile of the same"),
                ("elapsed", "How long the run took"),
                ("settings", "What was fired, and with which limits"),
            ] {
                header.col(|ui| {
                    ui.add(egui::Label::new(RichText::new(title).strong()).truncate()).on_hover_text(hint);
                });
            }
        })
        .body(|mut body| {
            for run in history.runs.iter().rev() {
                body.row(row_height, |mut row| {
                    row.col(|ui| cell(ui, format!("#{}", run.number)));
                    row.col(|ui| {
                        let mut on = history.compare == Some(run.number);
                        if ui
                            .toggle_value(&mut on, "compare")
                            .on_hover_text("Draw this run faintly under the live charts")
                            .accessible_name(compare_label(run.number))
                            .changed()
                        {
                            history.compare = on.then_some(run.number);
                        }
                    });
                    row.col(|ui| cell(ui, run.throttled.to_string()));
                    row.col(|ui| cell(ui, format!("{:.1}/s", run.goodput)));
                    row.col(|ui| cell(ui, compact_ms(run.p50_ms)));
                    row.col(|ui| cell(ui, compact_ms(run.p99_ms)));
                    let elapsed = if run.cancelled > 0 {
                        format!("{:.1}s (cancelled)", run.elapsed_s)
                    } else {
                        format!("{:.1}s", run.elapsed_s)
                    };
                    row.col(|ui| cell(ui, elapsed));
                    row.col(|ui| {
                        ui.add(egui::Label::new(&run.settings).truncate()).on_hover_text(&run.settings);
                    });
                });
            }
        });
}

/// A duration in milliseconds, short enough for a narrow column: `850ms`, `1.29s`.
fn compact_ms(ms: f64) -> String {
    if ms < 1000.0 { format!("{ms:.0}ms") } else { format!("{:.2}s", ms / 1000.0) }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use egui_kittest::Harness;
    use egui_kittest::kittest::Queryable;
    use tokio::time::Instant;

    use super::*;
    use crate::run::Percentiles;

    fn summary(throttled: u64, elapsed_s: f64) -> Summary {
        let percentiles =
            |p50: f64| Percentiles { min: 1.0, mean: p50, p50, p90: p50, p95: p50, p99: p50 * 4.0, max: p50 * 5.0 };
        Summary {
            requests: 50,
            sent: 50 + throttled,
            succeeded: 50,
            failed: 0,
            cancelled: 0,
            status_counts: BTreeMap::from([("200".into(), 50), ("429".into(), throttled)]),
            retries: throttled,
            cache_hits: 0,
            coalesced: 0,
            batched_items: 0,
            batches: 0,
            saved_by_batching: 0,
            elapsed_s,
            achieved_rps: 50.0 / elapsed_s,
            service_ms: percentiles(10.0),
            queue_wait_ms: percentiles(0.0),
            total_ms: percentiles(100.0),
            service_histogram: Vec::new(),
            errors: BTreeMap::new(),
            error_examples: BTreeMap::new(),
            limiter: "none".into(),
            shared: None,
            units: Default::default(),
        }
    }

    #[test]
    fn runs_are_listed_with_their_outcome_and_one_is_chosen_to_compare() {
        let mut history = History::default();
        let telemetry = Telemetry::new(Instant::now(), 10, 10);
        history.push("GET /items ×50 · limiter off".into(), &summary(37, 10.0), Arc::new(telemetry.clone()));
        history.push("GET /items ×50 · bucket 5 @ 5/1s".into(), &summary(0, 12.5), Arc::new(telemetry));
        let mut harness = Harness::builder()
            .with_size(egui::vec2(900.0, 300.0))
            .build_ui_state(|ui, history: &mut History| history_ui(ui, history), history);
        harness.run();
        for text in ["#1", "#2", "37", "5.0/s", "4.0/s", "10.0s", "12.5s"] {
            assert!(harness.query_by_label(text).is_some(), "{text:?} is not shown");
        }
        assert_eq!(harness.query_all_by_label("100ms").count(), 2, "p50 of each run");
        assert_eq!(harness.query_all_by_label("400ms").count(), 2, "p99 of each run");
        harness.get_by_label("GET /items ×50 · limiter off");
        assert!(harness.state().compared(Some(2)).is_none(), "nothing compared yet");
        harness.get_by_label(&compare_label(1)).click();
        harness.run();
        assert_eq!(harness.state().compare, Some(1));
        assert!(harness.state().compared(Some(2)).is_some(), "run 1 drawn under run 2");
        assert!(harness.state().compared(Some(1)).is_none(), "a run is not compared with itself");
        harness.get_by_label(&compare_label(1)).click();
        harness.run();
        assert_eq!(harness.state().compare, None, "clicked again: off");
    }

    #[test]
    fn only_the_last_runs_are_kept() {
        let mut history = History::default();
        for _ in 0..HISTORY_RUNS + 3 {
            history.push(String::new(), &summary(0, 1.0), Arc::new(Telemetry::new(Instant::now(), 10, 10)));
        }
        assert_eq!(history.runs.len(), HISTORY_RUNS);
        assert_eq!(history.runs.front().map(|run| run.number), Some(4));
    }

    #[test]
    fn a_narrow_panel_keeps_every_column_and_the_compare_toggles_in_view() {
        let mut history = History::default();
        let telemetry = Telemetry::new(Instant::now(), 10, 10);
        history.push(
            "GET /items/{id} ×50 · bucket 5 @ 5/1s · minute 100".into(),
            &summary(0, 12.5),
            Arc::new(telemetry),
        );
        let width = 380.0;
        let mut harness = Harness::builder()
            .with_size(egui::vec2(width, 200.0))
            .build_ui_state(|ui, history: &mut History| history_ui(ui, history), history);
        harness.run();
        for label in [compare_label(1).as_str(), "#1", "settings", "elapsed"] {
            let rect = harness.get_by_label(label).rect();
            assert!(rect.left() >= 0.0 && rect.right() <= width + 0.5, "'{label}' at {rect:?}");
        }
        // The toggle is as wide as its word, not cut to "co…".
        let toggle = harness.get_by_label(&compare_label(1)).rect();
        assert!(toggle.width() >= 60.0, "{toggle:?}");
        harness.get_by_label(&compare_label(1)).click();
        harness.run();
        assert_eq!(harness.state().compare, Some(1));
    }
}
