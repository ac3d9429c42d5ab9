//! The summary after a burst: the CLI summary's figures in grids, and buttons to export the results.

use egui::{Color32, Label, RichText, Ui};

use super::palette::{StatusColors, status_colors};
use crate::run::{Percentiles, Summary};

/// The label of the JSON export button.
pub const EXPORT_JSON_TEXT: &str = "Export JSON…";
/// The label of the CSV export button.
pub const EXPORT_CSV_TEXT: &str = "Export CSV…";

/// What the user asked for in the summary; the caller opens the file dialog off the UI thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SummaryAction {
    /// Nothing.
    #[default]
    None,
    /// Export the summary as JSON.
    ExportJson,
    /// Export every attempt as CSV.
    ExportCsv,
}

/// Shows `summary`; returns the export the user clicked, if any.
pub fn summary_ui(ui: &mut Ui, summary: &Summary) -> SummaryAction {
    egui::Grid::new("ratescope_summary_counts").num_columns(2).spacing([16.0, 4.0]).show(ui, |ui| {
        counts_ui(ui, summary);
        units_ui(ui, summary);
    });
    ui.add_space(8.0);
    latency_ui(ui, summary);
    errors_ui(ui, summary);
    ui.add_space(8.0);
    export_ui(ui)
}

/// The rows of counts: requests, attempts, statuses, time, rate and the shared store.
fn counts_ui(ui: &mut Ui, summary: &Summary) {
    figure_row_ui(ui, "limiter", |ui| {
        ui.add(Label::new(summary.limiter.as_str()).wrap());
    });
    figure_row_ui(ui, "requests", |ui| {
        ui.label(RichText::new(summary.requests.to_string()).strong());
        ui.label(RichText::new(format!("{} succeeded", summary.succeeded)).color(status_colors(ui.visuals()).ok));
        let failed = RichText::new(format!("{} failed", summary.failed));
        ui.label(if summary.failed > 0 { failed.color(status_colors(ui.visuals()).error) } else { failed });
        ui.label(format!("{} cancelled", summary.cancelled));
    });
    figure_row_ui(ui, "HTTP attempts", |ui| {
        ui.label(RichText::new(summary.sent.to_string()).strong());
        ui.label(format!("{} retries", summary.retries));
        ui.label(format!("{} cache hits", summary.cache_hits));
    });
    if summary.cache_hits + summary.coalesced > 0 {
        figure_row_ui(ui, "saved", |ui| {
            ui.label(format!("{} by cache", summary.cache_hits));
            ui.label(format!("{} by coalescing", summary.coalesced));
        });
    }
    if summary.batched_items > 0 {
        figure_row_ui(ui, "saved by batching", |ui| {
            ui.label(RichText::new(summary.saved_by_batching.to_string()).strong());
            let requests = if summary.batches == 1 { "request" } else { "requests" };
            ui.label(format!("{} items in {} upstream {requests}", summary.batched_items, summary.batches));
        });
    }
    figure_row_ui(ui, "statuses", |ui| {
        if summary.status_counts.is_empty() {
            ui.label("-");
        }
        for (status, count) in &summary.status_counts {
            ui.label(
                RichText::new(format!("{status}×{count}"))
                    .monospace()
                    .color(status_color(status, status_colors(ui.visuals()))),
            );
        }
    });
    figure_row_ui(ui, "elapsed", |ui| {
        ui.label(format!("{:.3} s", summary.elapsed_s));
    });
    figure_row_ui(ui, "achieved", |ui| {
        ui.label(format!("{:.2} req/s", summary.achieved_rps));
    });
    if let Some(shared) = &summary.shared {
        figure_row_ui(ui, "shared (Redis)", |ui| {
            ui.add(Label::new(format!("{}: {} (on failure {})", shared.state, shared.counts, shared.policy)).wrap());
        });
    }
}

/// A row per unit the requests' cost rules counted: reserved before sending, settled from the
/// answers, and the difference given back or charged.
fn units_ui(ui: &mut Ui, summary: &Summary) {
    for (unit, totals) in &summary.units {
        figure_row_ui(ui, unit, |ui| {
            ui.label(RichText::new(format!("{} reserved", totals.reserved)).strong())
                .on_hover_text("Estimated before sending, and held in the budgets");
            ui.label(format!("{} settled", totals.settled)).on_hover_text("What the answers said was spent");
            ui.label(RichText::new(format!("{} refunded", totals.refunded)).color(status_colors(ui.visuals()).ok))
                .on_hover_text("Estimates above the spend, given back to the budgets");
            let more = RichText::new(format!("{} charged more", totals.charged_more));
            ui.label(if totals.charged_more > 0 { more.color(status_colors(ui.visuals()).warn) } else { more })
                .on_hover_text("Spends above the estimate, charged afterwards");
            if totals.capped > 0 {
                ui.label(RichText::new(format!("{} capped", totals.capped)).color(status_colors(ui.visuals()).warn)).on_hover_text(
                    "Answers that said more than the unit's largest budget holds: counted as that much (a broken or lying server)",
                );
            }
        });
    }
}

/// Service, queue wait and total time as percentiles.
fn latency_ui(ui: &mut Ui, summary: &Summary) {
    egui::Grid::new("ratescope_summary_latency").num_columns(5).striped(true).spacing([16.0, 4.0]).show(ui, |ui| {
        ui.strong("ms");
        for title in ["p50", "p90", "p99", "max"] {
            ui.strong(title);
        }
        ui.end_row();
        let rows: [(&str, Percentiles, &str); 3] = [
            ("service", summary.service_ms, "From sending a request to its response, every attempt"),
            ("queue wait", summary.queue_wait_ms, "Time a request spent waiting in the client-side limiter"),
            ("total", summary.total_ms, "From first queued to the final response, per request"),
        ];
        for (name, p, hint) in rows {
            ui.label(name).on_hover_text(hint);
            for value in [p.p50, p.p90, p.p99, p.max] {
                ui.monospace(format!("{value:.1}"));
            }
            ui.end_row();
        }
    });
}

/// Why requests failed, with an example of each cause on hover.
fn errors_ui(ui: &mut Ui, summary: &Summary) {
    if summary.errors.is_empty() {
        return;
    }
    ui.add_space(8.0);
    for (cause, count) in &summary.errors {
        let line = ui.add(
            Label::new(RichText::new(format!("failed ×{count}: {cause}")).color(status_colors(ui.visuals()).error))
                .wrap(),
        );
        if let Some(example) = summary.error_examples.get(cause) {
            line.on_hover_text(format!("e.g. {example}"));
        }
    }
}

/// The export buttons.
fn export_ui(ui: &mut Ui) -> SummaryAction {
    let mut action = SummaryAction::None;
    ui.horizontal(|ui| {
        if ui.button(EXPORT_JSON_TEXT).on_hover_text("Save this summary and every request as JSON").clicked() {
            action = SummaryAction::ExportJson;
        }
        if ui.button(EXPORT_CSV_TEXT).on_hover_text("Save one line per attempt as CSV").clicked() {
            action = SummaryAction::ExportCsv;
        }
    });
    action
}

/// One grid row: a name, then `values` side by side.
fn figure_row_ui(ui: &mut Ui, name: &str, values: impl FnOnce(&mut Ui)) {
    ui.weak(name);
    ui.horizontal_wrapped(values);
    ui.end_row();
}

/// The colour of a `status_counts` key: a status code, or `error`.
fn status_color(status: &str, colors: StatusColors) -> Color32 {
    match status.parse::<u16>() {
        Ok(429) => colors.warn,
        Ok(code) if code < 400 => colors.ok,
        _ => colors.error,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use egui_kittest::Harness;
    use egui_kittest::kittest::Queryable;

    use super::*;
    use crate::run::UnitTotals;

    fn summary() -> Summary {
        let percentiles = |base: f64| Percentiles {
            min: base / 2.0,
            mean: base * 1.2,
            p50: base,
            p90: base * 2.0,
            p95: base * 2.5,
            p99: base * 3.0,
            max: base * 4.0,
        };
        Summary {
            requests: 50,
            sent: 57,
            succeeded: 45,
            failed: 3,
            cancelled: 2,
            status_counts: BTreeMap::from([("200".into(), 45), ("429".into(), 9), ("error".into(), 3)]),
            retries: 7,
            cache_hits: 1,
            coalesced: 0,
            batched_items: 0,
            batches: 0,
            saved_by_batching: 0,
            elapsed_s: 12.5,
            achieved_rps: 3.84,
            service_ms: percentiles(10.0),
            queue_wait_ms: percentiles(250.0),
            total_ms: percentiles(333.3),
            service_histogram: Vec::new(),
            errors: BTreeMap::from([("could not connect".into(), 3)]),
            error_examples: BTreeMap::from([("could not connect".into(), "connection refused".into())]),
            limiter: "bucket 5 @ 3/1s".into(),
            shared: None,
            units: BTreeMap::new(),
        }
    }

    #[test]
    fn requests_saved_by_batching_get_their_row() {
        let batched = Summary { batched_items: 40, batches: 4, saved_by_batching: 36, ..summary() };
        let harness = shown(batched);
        for text in ["saved by batching", "36", "40 items in 4 upstream requests"] {
            assert!(harness.query_by_label(text).is_some(), "{text:?} is not shown");
        }
        assert!(shown(summary()).query_by_label("saved by batching").is_none(), "no row without batching");
        let one_batch = Summary { batched_items: 50, batches: 1, saved_by_batching: 49, ..summary() };
        let harness = shown(one_batch);
        assert!(harness.query_by_label("50 items in 1 upstream request").is_some(), "one request, singular");
    }

    /// `summary` drawn once, in a window the size of the app's panel.
    fn shown(summary: Summary) -> Harness<'static, Summary> {
        let mut harness = Harness::builder().with_size(egui::vec2(1000.0, 700.0)).build_ui_state(
            |ui, summary: &mut Summary| {
                summary_ui(ui, summary);
            },
            summary,
        );
        harness.run();
        harness
    }

    #[test]
    fn the_figures_show_and_csv_export_is_requested() {
        let mut harness = Harness::builder().with_size(egui::vec2(1000.0, 700.0)).build_ui_state(
            |ui, (summary, action): &mut (Summary, SummaryAction)| {
                let clicked = summary_ui(ui, summary);
                if clicked != SummaryAction::None {
                    *action = clicked;
                }
            },
            (summary(), SummaryAction::None),
        );
        harness.run();
        for text in [
            "bucket 5 @ 3/1s",
            "50",
            "45 succeeded",
            "3 failed",
            "2 cancelled",
            "57",
            "7 retries",
            "1 cache hits",
            "429×9",
            "12.500 s",
            "3.84 req/s",
            "p99",
            "queue wait",
            "750.0",
            "1333.2",
            "failed ×3: could not connect",
        ] {
            assert!(harness.query_by_label(text).is_some(), "{text:?} is not shown");
        }
        assert_eq!(harness.state().1, SummaryAction::None);
        harness.get_by_label(EXPORT_CSV_TEXT).click();
        harness.run();
        assert_eq!(harness.state().1, SummaryAction::ExportCsv);
        harness.get_by_label(EXPORT_JSON_TEXT).click();
        harness.run();
        assert_eq!(harness.state().1, SummaryAction::ExportJson);
        assert!(harness.query_by_label("tokens").is_none(), "no unit rows without cost rules");
    }

    #[test]
    fn every_unit_shows_what_was_reserved_settled_and_given_back() {
        let mut with_units = summary();
        with_units.units = BTreeMap::from([
            (
                "tokens".into(),
                UnitTotals { reserved: 9000, settled: 6100, refunded: 3200, charged_more: 300, capped: 0 },
            ),
            ("points".into(), UnitTotals { reserved: 40, settled: 40, refunded: 0, charged_more: 0, capped: 0 }),
        ]);
        let mut harness = Harness::builder()
            .with_size(egui::vec2(1000.0, 700.0))
            .build_ui_state(|ui, summary: &mut Summary| _ = summary_ui(ui, summary), with_units);
        harness.run();
        for text in
            ["tokens", "9000 reserved", "6100 settled", "3200 refunded", "300 charged more", "points", "40 reserved"]
        {
            assert!(harness.query_by_label(text).is_some(), "{text:?} is not shown");
        }
    }
}
