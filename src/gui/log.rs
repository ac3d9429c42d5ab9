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
    TableBuilder::new(ui)
        .id_salt("ratescope_request_log")
        .striped(true)
        .resizable(true)
        .sense(Sense::click())
        .stick_to_bottom(true)
        .auto_shrink([false, false])
        .column(Column::initial(72.0).at_least(48.0))
        .column(Column::initial(56.0).at_least(40.0))
        .column(Column::initial(160.0).at_least(60.0).clip(true))
        .column(Column::initial(52.0).at_least(40.0))
        .columns(Column::initial(78.0).at_least(48.0), 2)
        .column(Column::initial(56.0).at_least(40.0))
        .column(Column::initial(78.0).at_least(48.0))
        .column(Column::remainder().at_least(72.0))
        .header(row_height + 4.0, |mut header| {
            for (title, hint) in [
                ("time (s)", "Seconds since the burst started, when the attempt ended"),
                ("method", "HTTP method"),
                ("path", "Request path (the query string is never recorded)"),
                ("status", "Response status, or \"error\" when no response came"),
                ("service ms", "From sending the request to its response"),
                ("queue ms", "Time the attempt waited in the client-side limiter"),
                ("attempt", "1 for the first try, then one more per retry"),
                ("remaining", "What the server says is left of its most restrictive budget"),
                ("retry-after", "How long the server asked to wait, in seconds"),
            ] {
                header.col(|ui| {
                    ui.strong(title).on_hover_text(hint);
                });
            }
        })
        .body(|body| {
            body.rows(row_height, telemetry.log.len(), |mut row| {
                let Some(entry) = telemetry.log.get(row.index()) else { return };
                let id = (entry.request_id, entry.attempt);
                row.set_selected(*selected == Some(id));
                let (status_text, status_color) = status_style(entry, colors);
                let cells: [(String, Option<Color32>); 9] = [
                    (format!("{:.3}", entry.at), None),
                    (entry.method.clone(), None),
                    (entry.path.clone(), None),
                    (status_text, Some(status_color)),
                    (optional(entry.service_ms, |ms| format!("{ms:.1}")), None),
                    (format!("{:.1}", entry.queue_wait_ms), None),
                    (entry.attempt.to_string(), None),
                    (optional(entry.remaining, number), None),
                    (optional(entry.retry_after_s, |s| format!("{s:.1}")), None),
                ];
                let mut row_clicked = false;
                for (text, color) in cells {
                    let (_, response) = row.col(|ui| {
                        let text = match color {
                            Some(color) => RichText::new(text).color(color),
                            None => RichText::new(text),
                        };
                        ui.add(Label::new(text).selectable(false).truncate());
                    });
                    let response = match &entry.error {
                        Some(error) => response.on_hover_text(error.as_str()),
                        None => response,
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
}
