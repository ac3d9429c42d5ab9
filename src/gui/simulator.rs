//! The Simulator tab: one workload against the demo API's model, through two limiter settings
//! side by side, in virtual time: 429s, completion time, goodput and the charts of a live run.

use std::time::Duration;

use egui::{RichText, Ui};

use super::charts::{ChartRanges, ChartView, EMPTY_TEXT, StackOptions, chart_ranges, stack_ui, widest_ranges};
use super::tune_view::{TuneAction, TuneRequest, TuneView};
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

/// A recording to replay with the limiter on and off.
#[derive(Debug)]
pub struct ReplayRequest {
    /// The recording's file (HAR, JSON lines or an access log).
    pub file: std::path::PathBuf,
    /// The host to replay; `None` for the busiest.
    pub host: Option<String>,
    /// The limiter of the "on" side.
    pub limits: LimiterConfig,
    /// Both sides' retry policy.
    pub retry: RetryPolicy,
    /// The server model.
    pub server: MockConfig,
    /// What the model is, in a few words.
    pub model_name: String,
}

/// A replay's two sides (on, off) and a line saying what was replayed.
#[derive(Debug)]
pub struct ReplayResult {
    /// Limiter on, limiter off.
    pub sides: Box<[SideResult; 2]>,
    /// `42 requests to api.example.com over 3.2 s (HAR); on: 0 refused, p99 added delay 510 ms; off: 7 refused`.
    pub description: String,
}

/// Reads and replays a recording on both sides (blocking: the backend calls it off its runtime).
pub fn run_replay(request: ReplayRequest) -> Result<ReplayResult, String> {
    use crate::sim::replay::{MAX_RECORDING_BYTES, ReadOptions, ReplaySettings, read, replay};
    let bytes = crate::files::read_capped(&request.file, MAX_RECORDING_BYTES).map_err(|err| err.to_string())?;
    let base = url::Url::parse(DEFAULT_BASE_URL).map_err(|err| err.to_string())?;
    let parsed = read(&bytes, &ReadOptions { format: None, base }).map_err(|err| err.to_string())?;
    let recording = parsed.select(request.host.as_deref()).map_err(|err| err.to_string())?;
    let options = SimOptions { record: true, ..SimOptions::default() };
    let side = |limits: Option<LimiterConfig>| {
        let settings = ReplaySettings { limits, raw_concurrency: None, retry: request.retry.clone(), adaptive: false };
        replay(&recording, &settings, &request.server, &options).map_err(|err| err.to_string())
    };
    let (on, off) = (side(Some(request.limits.clone()))?, side(None)?);
    let description = format!(
        "{} requests to {} over {:.1} s ({}) against {} · limiter on: {} refused, added delay p99 {:.0} ms · off: {} refused",
        recording.requests.len(),
        recording.host,
        on.summary.recorded_span_s,
        on.summary.format.name(),
        request.model_name,
        on.summary.refused,
        on.summary.added_delay_ms.p99,
        off.summary.refused,
    );
    Ok(ReplayResult { sides: Box::new([side_result(on.simulation), side_result(off.simulation)]), description })
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

/// What the Simulator tab asks the app for.
#[derive(Debug)]
pub enum SimAction {
    /// Run both sides.
    Simulate(Box<SimRequest>),
    /// Run a sweep.
    Tune(Box<TuneRequest>),
    /// Put a swept setting into the host being edited.
    Apply(Box<LimiterConfig>),
    /// Replay a recording with the limiter on and off.
    Replay(Box<ReplayRequest>),
    /// Ask for a recording's file (then replay it).
    PickRecording,
}

/// The tab's modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SimMode {
    /// Two limits side by side.
    #[default]
    Compare,
    /// A sweep of settings, as a heatmap.
    Tune,
    /// A recording replayed with the limiter on and off.
    Replay,
}

/// The Replay mode's state.
#[derive(Debug, Default)]
pub struct ReplayForm {
    /// The recording's path as typed (or picked).
    pub file: String,
    /// The host to replay; empty for the busiest.
    pub host: String,
    /// Replay against the demo API's model instead of the host's limits.
    pub against_demo: bool,
    /// A replay is running.
    pub running: bool,
    /// The last replay, or why it failed.
    pub result: Option<Result<ReplayResult, String>>,
}

/// The tab's state: the workload, the two settings, the last results.
#[derive(Debug)]
pub struct SimulatorTab {
    /// Compare two limits, or tune.
    pub mode: SimMode,
    /// The Tune mode's state.
    pub tune: TuneView,
    /// The Replay mode's state.
    pub replay: ReplayForm,
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
    /// The selected host's limits (the Replay mode's server model), as last followed.
    pub host_limits: Option<LimiterConfig>,
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
            mode: SimMode::default(),
            tune: TuneView::default(),
            replay: ReplayForm::default(),
            path: "/items".into(),
            count: 150,
            arrival_rate: String::new(),
            retries: 9,
            limits: ["bucket 5 @ 5/1s, window 100/1m".into(), "bucket 8 @ 8/1s".into()],
            limits_a_typed: false,
            host_limits: None,
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
        let Ok(config) = host.limiter_config() else { return };
        if !self.limits_a_typed {
            self.limits[0] = config.describe();
        }
        self.host_limits = Some(config);
    }

    /// The workload without limits (what Tune sweeps limits for), or what is wrong with the form.
    pub fn workload(&self) -> Result<BurstSpec, String> {
        let mut spec = self.side_spec(None)?;
        spec.limits = None;
        Ok(spec)
    }

    /// The two bursts to simulate, or what is wrong with the form.
    pub fn request(&self) -> Result<SimRequest, String> {
        let server = MockConfig::demo().map_err(|err| err.to_string())?;
        Ok(SimRequest { server, specs: [self.side_spec(Some(0))?, self.side_spec(Some(1))?] })
    }

    /// The workload through side `index`'s limits (none: no limits).
    fn side_spec(&self, index: Option<usize>) -> Result<BurstSpec, String> {
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
        let side = index.map_or("workload", |index| SIDES[index]);
        let limits = match index.map(|index| self.limits[index].trim()) {
            None => None,
            Some(text) if text.eq_ignore_ascii_case("none") => None,
            Some(text) => Some(LimiterConfig::parse_described(text).map_err(|err| format!("{side}: {err}"))?),
        };
        let spec = BurstSpec { arrival, limits, retry, ..BurstSpec::get(url, self.count) };
        spec.validate().map_err(|err| format!("{side}: {err}"))?;
        Ok(spec)
    }

    /// The tab. Returns what was asked for: two simulations ("Run both"), a sweep ("Tune"), or
    /// a swept setting to put into `host`, the host being edited.
    pub fn simulator_ui(&mut self, ui: &mut Ui, host: Option<&str>) -> Option<SimAction> {
        let mut wanted = None;
        ui.horizontal(|ui| {
            ui.selectable_value(&mut self.mode, SimMode::Compare, "Compare two limits")
                .on_hover_text("The workload through limits A and B, side by side");
            ui.selectable_value(&mut self.mode, SimMode::Tune, "Tune")
                .on_hover_text("Sweep the bucket's capacity × rate and find the best setting for the workload");
            ui.selectable_value(&mut self.mode, SimMode::Replay, "Replay")
                .on_hover_text("Replay recorded traffic (HAR, JSON lines, access log) with the limiter on and off");
        });
        if self.mode == SimMode::Replay {
            return self.replay_ui(ui);
        }
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
        if self.mode == SimMode::Tune {
            // The view is taken out while it draws, so the workload closure can read the form.
            let mut view = std::mem::take(&mut self.tune);
            let workload = |against_demo: bool| {
                let server = match (&self.host_limits, against_demo) {
                    (Some(limits), false) => crate::sim::model::from_limits(limits).map_err(|err| err.to_string())?,
                    _ => MockConfig::demo().map_err(|err| err.to_string())?,
                };
                Ok((server, self.workload()?))
            };
            let action = view.tune_ui(ui, workload, host);
            self.tune = view;
            return match action? {
                TuneAction::Run(request) => Some(SimAction::Tune(request)),
                TuneAction::Apply(config) => Some(SimAction::Apply(config)),
            };
        }
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
                        wanted = Some(SimAction::Simulate(Box::new(request)));
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
        sides_ui(ui, results, SIDES, &mut self.views);
        wanted
    }

    /// The Replay mode: a recording's path (typed, or picked with Replay…), the host, the
    /// limiter of the "on" side; then both sides' charts.
    fn replay_ui(&mut self, ui: &mut Ui) -> Option<SimAction> {
        let mut wanted = None;
        ui.horizontal_wrapped(|ui| {
            ui.strong("Recording");
            ui.add(
                egui::TextEdit::singleline(&mut self.replay.file)
                    .desired_width(300.0)
                    .hint_text("a .har, JSON lines or access log"),
            )
            .accessible_name("recording file");
            let pick = ui.add_enabled(!self.replay.running, egui::Button::new("Replay…"));
            if pick.on_hover_text("Choose a recording and replay it").clicked() {
                wanted = Some(SimAction::PickRecording);
            }
            ui.label("host");
            ui.add(egui::TextEdit::singleline(&mut self.replay.host).desired_width(140.0).hint_text("the busiest"))
                .accessible_name("replayed host");
            ui.strong("limiter on");
            let field = ui
                .add(egui::TextEdit::singleline(&mut self.limits[0]).desired_width(220.0))
                .accessible_name("replay limits")
                .on_hover_text("limits A: the selected host's until you type here");
            if field.changed() {
                self.limits_a_typed = true;
            }
            ui.label("retries");
            ui.add(egui::DragValue::new(&mut self.retries).range(0..=50)).accessible_name("replay retries");
            ui.checkbox(&mut self.replay.against_demo, "against the demo API").on_hover_text(
                "The server model: the demo API's routes; unticked, the selected host's limits on every path",
            );
            let run = ui.add_enabled(!self.replay.running, egui::Button::new("Run replay"));
            if run.on_hover_text("Replay the recording at its recorded times, limiter on and off").clicked() {
                wanted = self.replay_request().map(|request| SimAction::Replay(Box::new(request)));
            }
            if self.replay.running {
                ui.spinner();
            }
        });
        ui.separator();
        match &self.replay.result {
            None => {
                ui.label(
                    RichText::new(
                        "Replay what your app sent (a HAR file saved by a browser's developer tools, JSON lines, \
                         or an access log), each request at its recorded time, through the limiter and without \
                         it, against a server enforcing the selected host's limits (or the demo API's routes).",
                    )
                    .weak(),
                );
            }
            Some(Err(err)) => {
                ui.colored_label(super::palette::status_colors(ui.visuals()).error, err);
            }
            Some(Ok(result)) => {
                ui.label(&result.description);
                sides_ui(ui, &result.sides, ["limiter on", "limiter off"], &mut self.views);
            }
        }
        wanted
    }

    /// The replay the form describes; on a bad form, says why (in the result) and returns `None`.
    pub fn replay_request(&mut self) -> Option<ReplayRequest> {
        let request = (|| {
            let file = self.replay.file.trim();
            if file.is_empty() {
                return Err("type a recording's path, or choose one with Replay…".to_owned());
            }
            let limits =
                LimiterConfig::parse_described(self.limits[0].trim()).map_err(|err| format!("limiter: {err}"))?;
            let host = Some(self.replay.host.trim().to_owned()).filter(|host| !host.is_empty());
            let retry = RetryPolicy { max_attempts: self.retries.saturating_add(1), ..RetryPolicy::default() };
            let (server, model_name) = match (&self.host_limits, self.replay.against_demo) {
                (Some(limits), false) => (
                    crate::sim::model::from_limits(limits).map_err(|err| err.to_string())?,
                    format!("a server enforcing the host's limits ({})", limits.describe()),
                ),
                _ => (MockConfig::demo().map_err(|err| err.to_string())?, "the demo API".to_owned()),
            };
            Ok(ReplayRequest { file: file.into(), host, limits, retry, server, model_name })
        })();
        match request {
            Ok(request) => {
                self.replay.running = true;
                Some(request)
            }
            Err(err) => {
                self.replay.result = Some(Err(err));
                None
            }
        }
    }
}

/// Two sides' summaries and charts in two columns, on the same y scales.
fn sides_ui(ui: &mut Ui, results: &[SideResult; 2], labels: [&str; 2], views: &mut [ChartView; 2]) {
    // Both sides on the same y scales, or side by side misleads.
    let ranges = widest_ranges(&results[0].ranges, &results[1].ranges);
    ui.columns(2, |columns| {
        for (index, (ui, result)) in columns.iter_mut().zip(results.iter()).enumerate() {
            ui.push_id(("simulated side", index), |ui| {
                side_ui(ui, labels[index], result, &mut views[index], ranges);
            });
        }
    });
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
            let _ = tab.simulator_ui(ui, None);
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
