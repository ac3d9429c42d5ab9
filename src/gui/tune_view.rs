//! The Simulator tab's Tune mode: bucket capacity × rate swept for the tab's workload against a
//! model of the server (the demo API's, or one enforcing the host's limits), drawn as a heatmap of makespan with refused settings marked; hover for the
//! numbers, click a cell (or "Apply best") to put that setting into the host being edited.

use egui::{Color32, RichText, Ui};
use egui_plot::{Heatmap, Plot, PlotPoint, PlotPoints, Polygon};

use crate::engine::{LimiterConfig, format_number};
use crate::mock::MockConfig;
use crate::run::BurstSpec;
use crate::tune::{GridOptions, Outcome, TuneOptions, TuneReport};

/// A sweep to run: the workload, the model and the axes.
#[derive(Debug)]
pub struct TuneRequest {
    /// The server model.
    pub server: MockConfig,
    /// The workload (its limits are what is swept).
    pub spec: BurstSpec,
    /// The axes and threads.
    pub options: TuneOptions,
}

/// What the person asked for in the Tune mode.
#[derive(Debug)]
pub enum TuneAction {
    /// Run this sweep.
    Run(Box<TuneRequest>),
    /// Put this setting into the host being edited (which offers Undo).
    Apply(Box<LimiterConfig>),
}

/// The Tune mode's state.
#[derive(Debug)]
pub struct TuneView {
    /// Values per axis.
    pub steps: usize,
    /// The share the model is tightened by, in percent.
    pub margin_percent: f64,
    /// Sweep against the demo API's model instead of a server enforcing the host's limits.
    pub against_demo: bool,
    /// A sweep is running.
    pub running: bool,
    /// The last sweep's report, or why it failed.
    pub report: Option<Result<Box<TuneReport>, String>>,
}

impl Default for TuneView {
    fn default() -> Self {
        let grid = GridOptions::default();
        Self {
            steps: grid.steps,
            margin_percent: grid.margin * 100.0,
            against_demo: true,
            running: false,
            report: None,
        }
    }
}

/// The numbers of one setting, as the hover and the best line show them.
fn outcome_text(outcome: &Outcome) -> String {
    let refused = match outcome.throttled {
        0 => "no 429".to_owned(),
        n => format!("{n} × 429"),
    };
    format!(
        "{}: {:.2} s, {refused}, p50 {:.0} ms, p99 {:.0} ms",
        outcome.limits.describe(),
        outcome.elapsed_s,
        outcome.p50_ms,
        outcome.p99_ms
    )
}

impl TuneView {
    /// The mode. `workload` gives the server model (the demo API's when asked, else one
    /// enforcing the host's limits) and the tab's workload, or what is wrong with them; `host`
    /// is the host being edited (a click applies to it).
    pub fn tune_ui(
        &mut self,
        ui: &mut Ui,
        workload: impl FnOnce(bool) -> Result<(MockConfig, BurstSpec), String>,
        host: Option<&str>,
    ) -> Option<TuneAction> {
        let mut action = None;
        ui.horizontal_wrapped(|ui| {
            ui.label("steps per axis");
            ui.add(egui::DragValue::new(&mut self.steps).range(2..=40)).accessible_name("tune steps per axis");
            ui.label("margin %");
            ui.add(egui::DragValue::new(&mut self.margin_percent).range(0.0..=50.0).speed(0.5))
                .accessible_name("tune margin percent")
                .on_hover_text(
                    "The model is judged this much stricter, so the best setting keeps that margin for real",
                );
            ui.checkbox(&mut self.against_demo, "against the demo API").on_hover_text(
                "The server model: the demo API's routes; unticked, a server enforcing the selected host's limits",
            );
            let run = ui.add_enabled(!self.running, egui::Button::new("Run sweep"));
            if run.on_hover_text("Sweep bucket capacity × rate for this workload, in virtual time").clicked() {
                match workload(self.against_demo) {
                    Ok((server, spec)) => {
                        let grid = GridOptions {
                            steps: self.steps,
                            margin: self.margin_percent / 100.0,
                            ..GridOptions::default()
                        };
                        self.running = true;
                        action = Some(TuneAction::Run(Box::new(TuneRequest {
                            server,
                            spec,
                            options: TuneOptions { grid, ..TuneOptions::default() },
                        })));
                    }
                    Err(err) => self.report = Some(Err(err)),
                }
            }
            if self.running {
                ui.spinner();
            }
        });
        let report = match &self.report {
            None => {
                ui.label(
                    RichText::new(
                        "Tune sweeps the bucket's capacity × rate for this workload against a model of the server (the \
                         demo API, or one enforcing the host's limits), in virtual time: settings with no 429 first, \
                         then the shortest makespan, then the lowest p99.",
                    )
                    .weak(),
                );
                return action;
            }
            Some(Err(err)) => {
                ui.colored_label(super::palette::status_colors(ui.visuals()).error, err);
                return action;
            }
            Some(Ok(report)) => report,
        };
        ui.label(format!(
            "model {} · tightened by {}% · {} settings × {} requests in {:.2} s",
            report.model,
            format_number(report.margin * 100.0),
            report.candidates.len(),
            report.requests,
            report.real_time_s
        ));
        let apply_to = host.map_or_else(|| "the host being edited".to_owned(), |name| format!("'{name}'"));
        match report.best() {
            Some(best) => {
                ui.horizontal_wrapped(|ui| {
                    ui.strong("best");
                    ui.label(outcome_text(best));
                    let apply = ui.add_enabled(host.is_some(), egui::Button::new("Apply best"));
                    if apply
                        .on_hover_text(format!("Put this setting into {apply_to} (Undo in the hosts panel)"))
                        .clicked()
                    {
                        action = setting_config(best).map(|config| TuneAction::Apply(Box::new(config)));
                    }
                });
            }
            None => {
                let warn = super::palette::status_colors(ui.visuals()).warn;
                ui.colored_label(
                    warn,
                    "No setting met zero 429s: every cell is refused; try a slower workload or more steps.",
                );
            }
        }
        ui.horizontal_wrapped(|ui| {
            ui.label(RichText::new("makespan:").weak());
            swatch_ui(ui, FASTEST, true, "fastest");
            swatch_ui(ui, SLOWEST, true, "slowest");
            swatch_ui(ui, REFUSED, true, "met 429s");
            swatch_ui(ui, BEST, false, "the best");
            ui.label(RichText::new("· hover a cell for its numbers, click it to apply").weak());
        });
        if let Some(clicked) = heatmap_ui(ui, report) {
            if host.is_some() {
                action = setting_config(clicked).map(|config| TuneAction::Apply(Box::new(config)));
            } else {
                self.report =
                    Some(Err("select a host first: a clicked setting goes into the host being edited".into()));
            }
        }
        action
    }
}

/// The limiter of a swept setting (every swept setting is a valid one).
fn setting_config(outcome: &Outcome) -> Option<LimiterConfig> {
    outcome.limits.limiter_config().ok()
}

/// The heatmap plot's id (its memory holds the transform tests click through).
pub fn heatmap_id() -> egui::Id {
    egui::Id::NULL.with("ratescope tune heatmap")
}

/// A refused cell's fill.
const REFUSED: Color32 = Color32::from_rgb(150, 40, 40);
/// The fastest clean cell's fill; the slowest's; the best cell's outline.
const FASTEST: Color32 = Color32::from_rgb(120, 220, 190);
const SLOWEST: Color32 = Color32::from_rgb(25, 50, 120);
const BEST: Color32 = Color32::from_rgb(255, 210, 40);

/// A legend entry: a small square (filled, or outlined) and its label.
fn swatch_ui(ui: &mut Ui, color: Color32, filled: bool, label: &str) {
    let (rect, _) = ui.allocate_exact_size(egui::vec2(12.0, 12.0), egui::Sense::hover());
    if filled {
        ui.painter().rect_filled(rect, 2.0, color);
    } else {
        ui.painter().rect_stroke(rect, 2.0, egui::Stroke::new(2.0, color), egui::StrokeKind::Inside);
    }
    ui.label(label);
}

/// The heatmap: rate across, capacity up; colour from fast (light) to slow (dark), refused cells
/// red; the best cell outlined. Returns the cell clicked.
fn heatmap_ui<'a>(ui: &mut Ui, report: &'a TuneReport) -> Option<&'a Outcome> {
    let (cols, rows) = (report.rates.len(), report.capacities.len());
    let clean = report.candidates.iter().filter(|o| o.is_clean()).map(|o| o.elapsed_s);
    let (fastest, slowest) = clean.fold((f64::MAX, f64::MIN), |(low, high), e| (low.min(e), high.max(e)));
    let span = (slowest - fastest).max(1e-9);
    // One pass over the ranked candidates: the first to reach a cell is that cell's best
    // (several share a cell when window limits or concurrency are swept). Refused: -1.
    let mut values: Vec<Option<f64>> = vec![None; cols * rows];
    for outcome in &report.candidates {
        let place = outcome.capacity_index * cols + outcome.rate_index;
        if let Some(slot @ None) = values.get_mut(place) {
            *slot = Some(if outcome.is_clean() { (outcome.elapsed_s - fastest) / span } else { -1.0 });
        }
    }
    let values: Vec<f64> = values.into_iter().map(|value| value.unwrap_or(-1.0)).collect();
    let label = |values: &[f64], mark: f64| -> String {
        let index = mark.floor();
        if mark - index > 0.45 && mark - index < 0.55 && index >= 0.0 {
            values.get(index as usize).map(|v| format_number(*v)).unwrap_or_default()
        } else {
            String::new()
        }
    };
    let rate_labels: Vec<f64> = report.rates.clone();
    let capacity_labels: Vec<f64> = report.capacities.iter().map(|&c| c as f64).collect();
    let best = report.best().map(|best| (best.capacity_index, best.rate_index));
    let response = Plot::new("tune heatmap")
        .id(heatmap_id())
        .height(ui.available_height().max(160.0))
        .allow_drag(false)
        .allow_zoom(false)
        .allow_scroll(false)
        .show_grid(false)
        .x_axis_label("bucket rate (requests/s)")
        .y_axis_label("bucket capacity")
        .x_grid_spacer(half_steps)
        .y_grid_spacer(half_steps)
        .x_axis_formatter(move |mark, _| label(&rate_labels, mark.value))
        .y_axis_formatter(move |mark, _| label(&capacity_labels, mark.value))
        .label_formatter(|_| None)
        .show(ui, |plot_ui| {
            let heatmap = Heatmap::new(values, cols)
                .show_labels(false)
                .custom_mapping(Box::new(|value| {
                    if value < 0.0 {
                        REFUSED
                    } else {
                        // Light teal (fast) to deep blue (slow).
                        let t = value.clamp(0.0, 1.0) as f32;
                        let mix = |from: u8, to: u8| (from as f32 + (to as f32 - from as f32) * t).round() as u8;
                        Color32::from_rgb(
                            mix(FASTEST.r(), SLOWEST.r()),
                            mix(FASTEST.g(), SLOWEST.g()),
                            mix(FASTEST.b(), SLOWEST.b()),
                        )
                    }
                }))
                .name("makespan");
            plot_ui.heatmap(heatmap);
            if let Some((capacity, rate)) = best {
                let (x, y) = (rate as f64, capacity as f64);
                let outline = vec![[x, y], [x + 1.0, y], [x + 1.0, y + 1.0], [x, y + 1.0]];
                plot_ui.polygon(
                    Polygon::new("best", PlotPoints::from(outline))
                        .fill_color(Color32::TRANSPARENT)
                        .stroke(egui::Stroke::new(3.0, BEST)),
                );
            }
            let hovered = plot_ui.pointer_coordinate().and_then(|point| cell_at(point, cols, rows));
            (hovered, plot_ui.response().clicked())
        });
    let (hovered, clicked) = response.inner;
    let outcome = hovered.and_then(|(capacity, rate)| report.cell(capacity, rate));
    if let Some(outcome) = outcome {
        response
            .response
            .clone()
            .on_hover_text_at_pointer(format!("{}\nclick: apply to the host being edited", outcome_text(outcome)));
    }
    if clicked { outcome } else { None }
}

/// The heatmap cell under a plot point: (capacity index, rate index).
fn cell_at(point: PlotPoint, cols: usize, rows: usize) -> Option<(usize, usize)> {
    let (x, y) = (point.x.floor(), point.y.floor());
    (x >= 0.0 && y >= 0.0 && (x as usize) < cols && (y as usize) < rows).then_some((y as usize, x as usize))
}

/// One grid mark at the middle of each cell (where its label goes).
fn half_steps(input: egui_plot::GridInput) -> Vec<egui_plot::GridMark> {
    let (low, high) = input.bounds;
    let first = low.floor().max(0.0) as i64;
    let last = high.ceil().min(1000.0) as i64;
    let every = (((last - first) as f64) / 12.0).ceil().max(1.0) as i64;
    (first..=last)
        .step_by(every as usize)
        .map(|i| egui_plot::GridMark { value: i as f64 + 0.5, step_size: every as f64 })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_point_maps_to_its_cell_and_outside_to_none() {
        assert_eq!(cell_at(PlotPoint::new(0.2, 0.9), 4, 3), Some((0, 0)));
        assert_eq!(cell_at(PlotPoint::new(3.99, 2.5), 4, 3), Some((2, 3)));
        assert_eq!(cell_at(PlotPoint::new(4.0, 1.0), 4, 3), None);
        assert_eq!(cell_at(PlotPoint::new(-0.1, 1.0), 4, 3), None);
        assert_eq!(cell_at(PlotPoint::new(f64::NAN, 1.0), 4, 3), None);
    }
}
