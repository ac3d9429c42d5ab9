//! The request log: one row per attempt in a virtualized table, and the details of a selected attempt.

use egui::{Color32, Label, RichText, Sense, Ui};
use egui_extras::{Column, TableBuilder};

use super::palette::{StatusColors, status_colors};
use crate::engine::{format_period, format_wait};
use crate::telemetry::{LogRow, Telemetry};

/// What the log shows before the first attempt.
pub const EMPTY_TEXT: &str = "No requests yet";

/// The log of attempts, oldest first, sticking to the newest row until scrolled up. Clicking a row
/// selects it as `(request_id, attempt)`; the selected row is highlighted.
pub fn log_ui(ui: &mut Ui, telemetry: &Telemetry, selected: &mut Option<(u64, u32)>) {
    let colors = status_colors(ui.visuals());
    if telemetry.log.is_empty() {
        ui.weak(EMPTY_TEXT);
        return;
    }
    let row_height = ui.text_style_height(&egui::TextStyle::Body).max(ui.spacing().interact_size.y);
    let mut clicked: Option<(u64, u32)> = None;
    let widths = column_widths(ui.available_width(), ui.spacing().item_spacing.x);
    let mut table = TableBuilder::new(ui)
        .id_salt("ratescope_request_log")
        .striped(true)
        .sense(Sense::click())
        .stick_to_bottom(true)
        .auto_shrink([false, false]);
    // Every column shares the width there is: a narrow window elides cells (the whole text on
    // hover) instead of pushing the last columns out of sight.
    for width in widths {
        table = table.column(Column::exact(width).clip(true));
    }
    table
        .header(row_height + 4.0, |mut header| {
            for (title, hint) in [
                ("time (s)", "Seconds since the burst started, when the attempt ended"),
                ("method", "HTTP method"),
                ("path", "Request path (the query string is never recorded)"),
                ("status", "Response status, or \"error\" when no response came"),
                ("service ms", "From sending the request to its response"),
                ("queue ms", "Time the attempt waited in the client-side limiter"),
                ("attempt", "1 for the first try, then one more per retry"),
                ("remaining", "What the server says is left of its tightest budget, and that budget's name; hover a cell for every budget"),
                ("retry-after", "How long the server asked to wait, in seconds"),
            ] {
                header.col(|ui| {
                    ui.add(Label::new(RichText::new(title).strong()).truncate()).on_hover_text(hint);
                });
            }
        })
        .body(|body| {
            body.rows(row_height, telemetry.log.len(), |mut row| {
                let Some(entry) = telemetry.log.get(row.index()) else { return };
                let id = (entry.request_id, entry.attempt);
                row.set_selected(*selected == Some(id));
                let (status_text, status_color) = status_style(entry, colors);
                let cells: [(String, Option<Color32>); COLUMNS] = [
                    (format!("{:.3}", entry.at), None),
                    (entry.method.clone(), None),
                    (entry.path.clone(), None),
                    (status_text, Some(status_color)),
                    (optional(entry.service_ms, |ms| format!("{ms:.1}")), None),
                    (format!("{:.1}", entry.queue_wait_ms), None),
                    (entry.attempt.to_string(), None),
                    (remaining_text(entry), None),
                    (optional(entry.retry_after_s, |s| format!("{s:.1}")), None),
                ];
                let every_budget = every_budget_text(entry);
                let mut row_clicked = false;
                for (column, (text, color)) in cells.into_iter().enumerate() {
                    let (_, response) = row.col(|ui| {
                        let text = match color {
                            Some(color) => RichText::new(text).color(color),
                            None => RichText::new(text),
                        };
                        ui.add(Label::new(text).selectable(false).truncate());
                    });
                    let response = match (&entry.error, &every_budget) {
                        (Some(error), _) => response.on_hover_text(error.as_str()),
                        (None, Some(budgets)) if column == REMAINING_COLUMN => response.on_hover_text(budgets),
                        _ => response,
                    };
                    row_clicked |= response.clicked();
                }
                if row_clicked {
                    clicked = Some(id);
                }
            });
        });
    if clicked.is_some() {
        *selected = clicked;
    }
}

/// Everything about one attempt: its response headers as received, and what they mean.
pub fn details_ui(ui: &mut Ui, row: &LogRow) {
    ui.horizontal_wrapped(|ui| {
        ui.strong(format!("request #{} · attempt {}", row.request_id, row.attempt));
        let (status_text, status_color) = status_style(row, status_colors(ui.visuals()));
        ui.label(RichText::new(status_text).color(status_color).strong());
        ui.weak(format!("{} {}", row.method, row.path));
        if let Some(key) = &row.key {
            ui.weak(format!("key {key}"));
        }
    });
    ui.weak(format!(
        "at {:.3}s · queue wait {:.1} ms · service {}",
        row.at,
        row.queue_wait_ms,
        optional(row.service_ms, |ms| format!("{ms:.1} ms"))
    ));
    if let Some(error) = &row.error {
        ui.add_space(4.0);
        ui.label(RichText::new("The attempt failed without a response:").color(status_colors(ui.visuals()).error));
        ui.add(Label::new(RichText::new(error).monospace()).selectable(true).wrap());
    }

    headers_ui(ui, row);
    let Some(info) = &row.info else { return };
    ui.add_space(6.0);
    ui.strong("What they mean");
    if info.budgets.is_empty() {
        ui.weak("No rate-limit budget was advertised.");
    } else {
        egui::Grid::new(("ratescope_log_budgets", row.request_id, row.attempt)).striped(true).num_columns(7).show(
            ui,
            |ui| {
                for title in ["budget", "limit", "remaining", "resets in", "window", "unit", "source"] {
                    ui.strong(title);
                }
                ui.end_row();
                for budget in &info.budgets {
                    ui.label(budget.name.as_str());
                    ui.label(optional(budget.limit, number));
                    ui.label(optional(budget.remaining, number));
                    ui.label(optional(budget.reset_after, format_wait));
                    ui.label(optional(budget.window, format_period));
                    ui.label(budget.unit.as_str());
                    ui.weak(budget.source.as_str());
                    ui.end_row();
                }
            },
        );
    }
    egui::Grid::new(("ratescope_log_meaning", row.request_id, row.attempt)).num_columns(2).show(ui, |ui| {
        ui.label("retry after");
        ui.label(optional(info.retry_after, format_wait));
        ui.end_row();
        ui.label("throttled");
        if info.throttled {
            ui.label(RichText::new("yes").color(status_colors(ui.visuals()).warn));
        } else {
            ui.label("no");
        }
        ui.end_row();
    });
    if !info.warnings.is_empty() {
        ui.label(
            RichText::new(format!("{} header value(s) ignored:", info.warnings.len()))
                .color(status_colors(ui.visuals()).warn),
        );
        for warning in &info.warnings {
            ui.add(Label::new(RichText::new(warning).monospace()).selectable(true).wrap());
        }
    }
}

/// The response's headers, as received, selectable for copying.
fn headers_ui(ui: &mut Ui, row: &LogRow) {
    ui.add_space(6.0);
    ui.strong("Response headers");
    if row.headers.is_empty() {
        ui.weak("none");
    } else {
        egui::Grid::new(("ratescope_log_headers", row.request_id, row.attempt)).striped(true).num_columns(2).show(
            ui,
            |ui| {
                for (name, value) in &row.headers {
                    ui.add(Label::new(RichText::new(format!("{}:", name.as_str())).monospace()).selectable(true));
                    let value = String::from_utf8_lossy(value.as_bytes());
                    ui.add(Label::new(RichText::new(value.as_ref()).monospace()).selectable(true).wrap());
                    ui.end_row();
                }
            },
        );
    }
}

/// The log's columns, and the one saying what is left of the server's budgets.
const COLUMNS: usize = 9;
const REMAINING_COLUMN: usize = 7;

/// Each column's width: the path takes what the others leave, and in a narrow log every
/// column shrinks alike rather than some leaving the view.
fn column_widths(available: f32, spacing: f32) -> [f32; COLUMNS] {
    // time, method, path, status, service, queue, attempt, remaining, retry-after
    const WANTED: [f32; COLUMNS] = [64.0, 56.0, 160.0, 50.0, 76.0, 70.0, 56.0, 130.0, 78.0];
    super::columns::fit_columns(available, spacing, WANTED, 2)
}

/// What is left of the tightest budget, named, and of how much when the server said:
/// `3/5 burst`. One column holds every row, so a bare number would mix budgets.
fn remaining_text(row: &LogRow) -> String {
    let Some(tightest) = row.info.as_ref().and_then(|info| info.most_restrictive()) else {
        return optional(row.remaining, number);
    };
    let Some(remaining) = tightest.remaining else { return "-".to_owned() };
    match tightest.limit {
        Some(limit) => format!("{}/{} {}", number(remaining), number(limit), tightest.name),
        None => format!("{} {}", number(remaining), tightest.name),
    }
}

/// Every budget the response advertised, one a line, for the remaining column's tooltip.
fn every_budget_text(row: &LogRow) -> Option<String> {
    let info = row.info.as_ref()?;
    let lines: Vec<String> = info
        .budgets
        .iter()
        .filter_map(|budget| {
            let remaining = budget.remaining?;
            let of = budget.limit.map(|limit| format!(" of {}", number(limit))).unwrap_or_default();
            Some(format!("{}: {}{of} {} left", budget.name, number(remaining), budget.unit))
        })
        .collect();
    (!lines.is_empty()).then(|| lines.join("\n"))
}

/// The status as shown, and its colour: 2xx green, 429 orange, other 4xx/5xx and errors red.
fn status_style(row: &LogRow, colors: StatusColors) -> (String, Color32) {
    match row.status {
        None => ("error".to_owned(), colors.error),
        Some(429) => ("429".to_owned(), colors.warn),
        Some(status @ 200..=299) => (status.to_string(), colors.ok),
        Some(status) if status >= 400 => (status.to_string(), colors.error),
        Some(status) => (status.to_string(), Color32::GRAY),
    }
}

fn optional<T>(value: Option<T>, show: impl FnOnce(T) -> String) -> String {
    value.map_or_else(|| "-".to_owned(), show)
}

/// A count without a needless fraction: `42`, `0.5`.
fn number(value: f64) -> String {
    if value.fract() == 0.0 && value.abs() < 1e15 { format!("{value:.0}") } else { format!("{value:.2}") }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use egui_kittest::Harness;
    use egui_kittest::kittest::Queryable;
    use http::HeaderMap;
    use tokio::time::Instant;

    use super::*;
    use crate::http::{Event, EventKind, RateLimitInfo};

    fn telemetry_with_rows() -> Telemetry {
        let origin = Instant::now();
        let mut telemetry = Telemetry::new(origin, 1000, 1000);
        let event = |id: u64, kind| Event { request_id: id, key: Some("api".into()), at: origin, kind };
        for id in 1..=3u64 {
            let path = format!("/items/{id}");
            telemetry.ingest(&event(id, EventKind::Sent { attempt: 1, method: "GET".into(), path }));
            let status = if id == 2 { 429 } else { 200 };
            let mut headers = HeaderMap::new();
            headers.insert("x-ratelimit-limit", "10".parse().unwrap());
            headers.insert("x-ratelimit-remaining", "7".parse().unwrap());
            let info = RateLimitInfo::parse(Some(status), &headers, None, std::time::SystemTime::now());
            telemetry.ingest(&event(
                id,
                EventKind::Response {
                    attempt: 1,
                    status,
                    service_time: Duration::from_millis(12),
                    info: Box::new(info),
                    headers: Box::new(headers),
                },
            ));
        }
        telemetry.ingest(&event(4, EventKind::Failed { error: "connection refused".into(), attempts: 1 }));
        telemetry
    }

    #[test]
    fn rows_are_listed_and_a_click_selects_one() {
        let mut harness = Harness::builder().with_size(egui::vec2(1000.0, 700.0)).build_ui_state(
            |ui, (telemetry, selected): &mut (Telemetry, Option<(u64, u32)>)| log_ui(ui, telemetry, selected),
            (telemetry_with_rows(), None),
        );
        harness.run();
        harness.get_by_label("/items/1");
        harness.get_by_label("/items/3");
        harness.get_by_label("error");
        assert!(harness.query_by_label(EMPTY_TEXT).is_none());
        harness.get_by_label("/items/2").click();
        harness.run();
        assert_eq!(harness.state().1, Some((2, 1)));
    }

    #[test]
    fn an_empty_log_says_so() {
        let mut harness = Harness::builder().with_size(egui::vec2(1000.0, 700.0)).build_ui_state(
            |ui, (telemetry, selected): &mut (Telemetry, Option<(u64, u32)>)| log_ui(ui, telemetry, selected),
            (Telemetry::new(Instant::now(), 10, 10), None),
        );
        harness.run();
        harness.get_by_label(EMPTY_TEXT);
    }

    #[test]
    fn details_show_headers_and_their_meaning() {
        let telemetry = telemetry_with_rows();
        let rows: Vec<LogRow> = telemetry.log.iter().cloned().collect();
        let mut harness = Harness::builder()
            .with_size(egui::vec2(1000.0, 700.0))
            .build_ui_state(|ui, rows: &mut Vec<LogRow>| details_ui(ui, &rows[1]), rows);
        harness.run();
        harness.get_by_label("x-ratelimit-remaining:");
        harness.get_by_label("remaining");
        harness.get_by_label("yes");

        let mut failed = Harness::builder().with_size(egui::vec2(1000.0, 700.0)).build_ui_state(
            |ui, rows: &mut Vec<LogRow>| details_ui(ui, &rows[3]),
            telemetry.log.iter().cloned().collect(),
        );
        failed.run();
        failed.get_by_label("connection refused");
    }

    fn two_budget_row(telemetry: &mut Telemetry, id: u64, requests_left: &str, tokens_left: &str) {
        let origin = Instant::now();
        let event = |kind| Event { request_id: id, key: Some("api".into()), at: origin, kind };
        telemetry.ingest(&event(EventKind::Sent { attempt: 1, method: "GET".into(), path: format!("/r/{id}") }));
        let mut headers = HeaderMap::new();
        for (name, value) in [
            ("x-ratelimit-limit-requests", "100"),
            ("x-ratelimit-remaining-requests", requests_left),
            ("x-ratelimit-reset-requests", "1s"),
            ("x-ratelimit-limit-tokens", "1000"),
            ("x-ratelimit-remaining-tokens", tokens_left),
            ("x-ratelimit-reset-tokens", "6m0s"),
        ] {
            headers.insert(name, value.parse().unwrap());
        }
        let info = RateLimitInfo::parse(Some(200), &headers, None, std::time::SystemTime::now());
        telemetry.ingest(&event(EventKind::Response {
            attempt: 1,
            status: 200,
            service_time: Duration::from_millis(5),
            info: Box::new(info),
            headers: Box::new(headers),
        }));
    }

    #[test]
    fn the_remaining_column_names_the_tightest_budget_and_fits_a_narrow_log() {
        let mut telemetry = Telemetry::new(Instant::now(), 100, 100);
        // 10 % of requests left beside 90 % of tokens, then the other way round: a bare
        // number would put 10 and 100 in one column without saying they count different things.
        two_budget_row(&mut telemetry, 1, "10", "900");
        two_budget_row(&mut telemetry, 2, "90", "100");
        let mut harness = Harness::builder().with_size(egui::vec2(560.0, 300.0)).build_ui_state(
            |ui, (telemetry, selected): &mut (Telemetry, Option<(u64, u32)>)| log_ui(ui, telemetry, selected),
            (telemetry, None),
        );
        harness.run();
        harness.get_by_label("10/100 requests");
        harness.get_by_label("100/1000 tokens");
        // At 560 px the last column is still inside the log, not scrolled out of view.
        let last = harness.get_by_label("retry-after").rect();
        assert!(last.right() <= 560.0 + 0.5, "retry-after ends at {}", last.right());
        let every = every_budget_text(&harness.state().0.log[0]).unwrap();
        assert!(every.contains("requests: 10 of 100") && every.contains("tokens: 900 of 1000"), "{every}");
    }

    #[test]
    fn columns_share_a_narrow_width_and_the_path_takes_a_wide_one() {
        let narrow = column_widths(500.0, 8.0);
        assert!(narrow.iter().sum::<f32>() + 8.0 * COLUMNS as f32 <= 500.0 + 0.01, "{narrow:?}");
        let wide = column_widths(1600.0, 8.0);
        assert!(wide[2] > 800.0, "the path takes the room: {wide:?}");
        assert!(column_widths(50.0, 8.0).iter().all(|width| *width >= 28.0));
    }
}
