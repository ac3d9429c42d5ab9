//! The Simulator tab: one workload against the demo API's model, through two limiter settings
//! side by side, in virtual time: 429s, completion time, goodput and the charts of a live run.

use std::time::Duration;

use egui::{RichText, Ui};

use super::charts::{ChartRanges, ChartView, EMPTY_TEXT, StackOptions, chart_ranges, stack_ui, widest_ranges};
use crate::engine::{LimiterConfig, Rate};
use crate::http::RetryPolicy;
use crate::mock::MockConfig;
use crate::run::{ArrivalPattern, BurstSpec, Summary};
use crate::sim::{DEFAULT_BASE_URL, SimOptions, Simulation, simulate};
use crate::telemetry::Telemetry;

/// Points per chart series and rows of the request log kept for each side.
const SERIES_CAPACITY: usize = 200_000;
const LOG_CAPACITY: usize = 20_000;

/// Two simulations to run: the same workload through each side's limits.
#[derive(Debug)]
pub struct SimRequest {
    /// The server model both sides run against.
    pub server: MockConfig,
    /// Side A's and side B's bursts.
    pub specs: [BurstSpec; 2],
}

/// One side's outcome, with its charts' data.
#[derive(Debug)]
pub struct SideResult {
    /// Its summary.
    pub summary: Summary,
    /// Its charts' data.
    pub telemetry: Telemetry,
    /// The wall-clock time the simulation took.
    pub real_time: Duration,
    /// Each chart's y range, so both sides are drawn on the same scales.
    pub ranges: ChartRanges,
}

/// Runs both sides (blocking: the backend calls it off its runtime).
pub fn run_both(request: SimRequest) -> Result<Box<[SideResult; 2]>, String> {
    let options = SimOptions { record: true, ..SimOptions::default() };
    let [a, b] = request.specs;
    let side = |spec: BurstSpec| -> Result<SideResult, String> {
        let simulation = simulate(&request.server, spec, &options).map_err(|err| err.to_string())?;
        Ok(side_result(simulation))
    };
    Ok(Box::new([side(a)?, side(b)?]))
}

fn side_result(simulation: Simulation) -> SideResult {
    let mut telemetry = Telemetry::new(simulation.origin, SERIES_CAPACITY, LOG_CAPACITY);
    let mut snapshots = simulation.snapshots.iter().peekable();
    // Interleave by time, as a live run would have them.
    for event in &simulation.events {
        while let Some(batch) = snapshots.next_if(|batch| batch.first().is_some_and(|s| s.at <= event.at)) {
            telemetry.sample(batch);
        }
        telemetry.ingest(event);
    }
    for batch in snapshots {
        telemetry.sample(batch);
    }
    let ranges = chart_ranges(&telemetry);
    SideResult { summary: simulation.summary, telemetry, real_time: simulation.real_time, ranges }
}

/// The tab's state: the workload, the two settings, the last results.
#[derive(Debug)]
pub struct SimulatorTab {
    /// The path requests go to.
    pub path: String,
    /// Requests per side.
    pub count: usize,
    /// Arrival rate such as `10/1s`; empty for all at once.
    pub arrival_rate: String,
    /// Retries per request (attempts beyond the first).
    pub retries: u32,
    /// Each side's limits in the one-line form: `bucket 5 @ 5/1s, window 100/1m, concurrency 4`.
    pub limits: [String; 2],
    /// Limits A were typed by hand: they no longer follow the selected host's.
    pub limits_a_typed: bool,
    /// A simulation is running.
    pub running: bool,
    /// Both sides' results, once run.
    pub results: Option<Box<[SideResult; 2]>>,
    /// Why the last run could not start or failed.
    pub error: Option<String>,
    views: [ChartView; 2],
}

impl Default for SimulatorTab {
    fn default() -> Self {
        Self {
            path: "/items".into(),
            count: 150,
            arrival_rate: String::new(),
            retries: 9,
            limits: ["bucket 5 @ 5/1s, window 100/1m".into(), "bucket 8 @ 8/1s".into()],
            limits_a_typed: false,
            running: false,
            results: None,
            error: None,
            views: [ChartView { window_s: f64::INFINITY, ..ChartView::default() }; 2],
        }
    }
}

/// Side labels.
const SIDES: [&str; 2] = ["A", "B"];

impl SimulatorTab {
    /// Limits A are the selected host's current limits until they are typed over.
    pub fn follow_profile(&mut self, host: &crate::profile::HostProfile) {
        if self.limits_a_typed {
            return;
        }
        if let Ok(config) = host.limiter_config() {
            self.limits[0] = config.describe();
        }
    }

    /// The two bursts to simulate, or what is wrong with the form.
    pub fn request(&self) -> Result<SimRequest, String> {
        let url = url::Url::parse(DEFAULT_BASE_URL)
            .and_then(|base| base.join(self.path.trim()))
            .map_err(|err| format!("path '{}': {err}", self.path))?;
        let arrival = match self.arrival_rate.trim() {
            "" => ArrivalPattern::AllAtOnce,
            text => {
                ArrivalPattern::FixedRate(text.parse::<Rate>().map_err(|err| format!("arrival rate '{text}': {err}"))?)
            }
        };
        let retry = RetryPolicy { max_attempts: self.retries.saturating_add(1), ..RetryPolicy::default() };
        let spec = |index: usize| -> Result<BurstSpec, String> {
            let text = self.limits[index].trim();
            let limits = if text.eq_ignore_ascii_case("none") {
                None
            } else {
                Some(LimiterConfig::parse_described(text).map_err(|err| format!("{}: {err}", SIDES[index]))?)
            };
            let spec = BurstSpec {
                arrival: arrival.clone(),
                limits,
                retry: retry.clone(),
                ..BurstSpec::get(url.clone(), self.count)
            };
            spec.validate().map_err(|err| format!("{}: {err}", SIDES[index]))?;
            Ok(spec)
        };
        let server = MockConfig::demo().map_err(|err| err.to_string())?;
        Ok(SimRequest { server, specs: [spec(0)?, spec(1)?] })
    }

    /// The tab. Returns the request to simulate when "Run both" was pressed and the form is valid.
    pub fn simulator_ui(&mut self, ui: &mut Ui) -> Option<SimRequest> {
        let mut wanted = None;
        ui.horizontal_wrapped(|ui| {
            ui.strong("Workload");
            ui.label("demo API path");
            ui.add(egui::TextEdit::singleline(&mut self.path).desired_width(90.0)).accessible_name("simulated path");
            ui.label("n");
            ui.add(egui::DragValue::new(&mut self.count).range(1..=1_000_000).speed(5.0))
                .accessible_name("simulated request count");
            ui.label("arrival rate");
            ui.add(egui::TextEdit::singleline(&mut self.arrival_rate).desired_width(90.0).hint_text("all at once"))
                .accessible_name("simulated arrival rate")
                .on_hover_text("e.g. 10/1s; empty: every request at once");
            ui.label("retries");
            ui.add(egui::DragValue::new(&mut self.retries).range(0..=50)).accessible_name("simulated retries");
        });
        ui.horizontal_wrapped(|ui| {
            for (index, label) in SIDES.iter().enumerate() {
                ui.strong(format!("Limits {label}"));
                let field = ui
                    .add(egui::TextEdit::singleline(&mut self.limits[index]).desired_width(260.0))
                    .accessible_name(format!("limits {label}"))
                    .on_hover_text(if index == 0 {
                        "the selected host's limits until you type here; \
                         bucket 5 @ 5/1s, window 100/1m, concurrency 4 (comma-separated), or none"
                    } else {
                        "bucket 5 @ 5/1s, window 100/1m, concurrency 4 (comma-separated), or none"
                    });
                if index == 0 && field.changed() {
                    self.limits_a_typed = true;
                }
            }
            let run = ui.add_enabled(!self.running, egui::Button::new("Run both"));
            if run.on_hover_text("Simulate the workload through both limits, in virtual time").clicked() {
                match self.request() {
                    Ok(request) => {
                        self.error = None;
                        self.running = true;
                        wanted = Some(request);
                    }
                    Err(err) => self.error = Some(err),
                }
            }
            if self.running {
                ui.spinner();
            }
        });
        if let Some(err) = &self.error {
            ui.colored_label(super::palette::status_colors(ui.visuals()).error, err);
        }
        ui.separator();
        let Some(results) = &self.results else {
            ui.label(RichText::new("Run both to compare the two limits on the same workload.").weak());
            return wanted;
        };
        // Both sides on the same y scales, or side by side misleads.
        let ranges = widest_ranges(&results[0].ranges, &results[1].ranges);
        ui.columns(2, |columns| {
            for (index, (ui, result)) in columns.iter_mut().zip(results.iter()).enumerate() {
                ui.push_id(("simulated side", index), |ui| {
                    side_ui(ui, SIDES[index], result, &mut self.views[index], ranges);
                });
            }
        });
        wanted
    }
}

/// The id of a side's stack of charts.
fn side_id(label: &str) -> egui::Id {
    egui::Id::NULL.with(("ratescope_simulated_side", label))
}

fn side_ui(ui: &mut Ui, label: &str, result: &SideResult, view: &mut ChartView, ranges: ChartRanges) {
    let summary = &result.summary;
    let refused = summary.status_counts.get("429").copied().unwrap_or(0);
    let goodput = if summary.elapsed_s > 0.0 { summary.succeeded as f64 / summary.elapsed_s } else { 0.0 };
    ui.heading(format!("{label}: {}", summary.limiter));
    ui.label(
        RichText::new(format!(
            "{refused} × 429 · done in {:.1}s · goodput {goodput:.2}/s · simulated in {:.0} ms",
            summary.elapsed_s,
            result.real_time.as_secs_f64() * 1000.0
        ))
        .strong(),
    );
    egui::CollapsingHeader::new("summary").id_salt("summary").show(ui, |ui| {
        ui.label(RichText::new(summary.to_string()).monospace());
    });
    let options = StackOptions { id: side_id(label), empty_text: EMPTY_TEXT, previous: None, ranges: Some(ranges) };
    stack_ui(ui, &result.telemetry, view, &options);
}

#[cfg(test)]
mod tests {
    use egui_kittest::Harness;

    use super::*;
    use crate::gui::charts::plot_id;

    #[test]
    fn both_sides_share_their_y_scales() {
        let tab = SimulatorTab {
            count: 60,
            limits: ["bucket 5 @ 5/1s".into(), "bucket 50 @ 50/1s".into()],
            ..SimulatorTab::default()
        };
        let results = run_both(tab.request().unwrap()).unwrap();
        let peaks = [&results[0].ranges, &results[1].ranges].map(|ranges| ranges[2].1);
        assert!((peaks[0] - peaks[1]).abs() >= 2.0, "the sides' outcomes peak apart: {peaks:?}");
        let mut tab = SimulatorTab { results: Some(results), ..tab };
        let mut harness = Harness::builder().with_size(egui::vec2(1600.0, 1200.0)).build_ui(|ui| {
            let _ = tab.simulator_ui(ui);
        });
        harness.run();
        for title in ["Queue", "Outcomes / s", "Retries / s", "Latency (ms)"] {
            let top = |side: &str| {
                let memory = egui_plot::PlotMemory::load(&harness.ctx, plot_id(side_id(side), title)).unwrap();
                let bounds = *memory.transform().bounds();
                (bounds.min()[1], bounds.max()[1])
            };
            let (a, b) = (top("A"), top("B"));
            assert!((a.0 - b.0).abs() < 1e-6 && (a.1 - b.1).abs() < 1e-6, "{title}: A {a:?} and B {b:?} differ");
        }
    }
}
