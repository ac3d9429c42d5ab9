//! The app's state and its frame: drains the background's updates, lays out the panels,
//! and turns clicks and shortcuts into commands.

use std::time::Duration;

use egui::{Key, KeyboardShortcut, Modifiers};
use tokio::sync::mpsc;
use url::Url;

use super::backend::{Backend, Command, Update};
use super::charts::{ChartView, EMPTY_TEXT, PROXY_EMPTY_TEXT, charts_ui_in};
use super::composer::Composer;
use super::discover::{Discover, DiscoverAction};
use super::editor::{Editor, EditorAction};
use super::log::{details_ui, log_ui};
use super::proxy::{ProxyAction, ProxyPanel, ProxyStatus, proxy_ui};
use super::server::server_ui;
use super::simulator::SimulatorTab;
use super::summary::{SummaryAction, summary_ui};
use super::toasts::Toasts;
use crate::http::Event;
use crate::profile::{Profile, SecretStore};
use crate::run::{BurstProgress, RequestResult, Summary, write_csv};
use crate::store::SharedReport;
use crate::telemetry::Telemetry;

/// Points kept per chart series (an hour at 100 samples a second) and rows kept in the request log.
const SERIES_CAPACITY: usize = 400_000;
const LOG_CAPACITY: usize = 50_000;
/// Events folded into the charts per frame at most, so one frame never stalls on a flood.
const EVENTS_PER_FRAME: usize = 20_000;

/// The embedded demo API as the app knows it.
#[derive(Debug, Clone, PartialEq)]
pub enum DemoStatus {
    Starting,
    Running { url: Url, routes: String },
    Failed(String),
}

/// A burst as the app knows it.
#[derive(Debug, Default)]
pub enum RunStatus {
    #[default]
    Idle,
    Running {
        progress: BurstProgress,
    },
    Done {
        summary: Box<Summary>,
        results: Vec<RequestResult>,
    },
}

/// The view in the central panel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Tab {
    #[default]
    Burst,
    Simulator,
    Proxy,
}

/// How the app starts.
#[derive(Debug, Clone)]
pub struct AppOptions {
    /// The demo API's preferred port (0: any free port).
    pub demo_port: u16,
    /// Where profiles and secrets live; `None` for the platform's config directory.
    pub config_dir: Option<std::path::PathBuf>,
    /// Close the window by itself after this long (`RATESCOPE_SMOKE_SECONDS`, for a window smoke test).
    pub close_after: Option<Duration>,
    /// Fire the demo burst, save a PNG of the window to this file after the delay, and exit.
    pub screenshot: Option<(std::path::PathBuf, Duration)>,
    /// The profile selected when the app last closed.
    pub last_profile: Option<String>,
}

/// Storage key of the last selected profile.
pub const LAST_PROFILE_KEY: &str = "ratescope.last_profile";

/// The whole app.
pub struct App {
    pub tab: Tab,
    pub simulator: SimulatorTab,
    pub discover: Discover,
    backend: Backend,
    pub editor: Editor,
    pub composer: Composer,
    pub demo: DemoStatus,
    pub run: RunStatus,
    pub telemetry: Telemetry,
    pub chart_view: ChartView,
    pub selected_row: Option<(u64, u32)>,
    pub toasts: Toasts,
    /// The shared store's last reported state, when budgets are shared through Redis.
    pub shared_report: Option<SharedReport>,
    pub proxy: ProxyPanel,
    events: Option<mpsc::Receiver<Event>>,
    /// Close by itself after this long (a smoke test of the real window), counting frames.
    smoke: Option<(std::time::Instant, Duration, u64)>,
    screenshot: Option<super::screenshot::ScreenshotMode>,
}

impl App {
    /// The app with its background started; `repaint` wakes the UI when news arrives.
    pub fn new(repaint: impl Fn() + Send + Sync + 'static, options: AppOptions) -> std::io::Result<Self> {
        let backend = Backend::start(repaint, options.config_dir)?;
        backend.send(Command::LoadProfiles);
        backend.send(Command::StartDemo { port: options.demo_port });
        Ok(Self {
            tab: Tab::default(),
            simulator: SimulatorTab::default(),
            discover: Discover::default(),
            backend,
            editor: Editor::default(),
            composer: Composer::default(),
            demo: DemoStatus::Starting,
            run: RunStatus::Idle,
            telemetry: Telemetry::new(tokio::time::Instant::now(), SERIES_CAPACITY, LOG_CAPACITY),
            chart_view: ChartView::default(),
            selected_row: None,
            toasts: Toasts::default(),
            shared_report: None,
            proxy: ProxyPanel::default(),
            events: None,
            smoke: options.close_after.map(|after| (std::time::Instant::now(), after, 0)),
            screenshot: options.screenshot.map(|(path, after)| super::screenshot::ScreenshotMode::new(path, after)),
        }
        .with_last_profile(options.last_profile))
    }

    fn with_last_profile(mut self, name: Option<String>) -> Self {
        self.editor.preferred = name;
        self
    }

    /// Whether a burst is running.
    pub fn is_running(&self) -> bool {
        matches!(self.run, RunStatus::Running { .. })
    }

    /// The last finished burst's summary.
    pub fn summary(&self) -> Option<&Summary> {
        match &self.run {
            RunStatus::Done { summary, .. } => Some(summary),
            _ => None,
        }
    }

    /// Applies everything the background sent since the last frame.
    fn drain(&mut self) {
        for update in self.backend.drain() {
            match update {
                Update::DemoStarted { url, description } => {
                    self.editor.point_demo_at(&url);
                    self.demo = DemoStatus::Running { url, routes: description };
                }
                Update::DemoFailed(err) => {
                    self.toasts.error(format!("the demo API did not start: {err}"));
                    self.demo = DemoStatus::Failed(err);
                }
                Update::BurstStarted { events, planned } => {
                    self.watch(events);
                    self.run = RunStatus::Running { progress: BurstProgress { planned, ..BurstProgress::default() } };
                }
                Update::Progress(progress) => {
                    if let RunStatus::Running { progress: current } = &mut self.run {
                        *current = progress;
                    }
                }
                Update::Snapshots(snapshots) => self.telemetry.sample(&snapshots),
                Update::Shared(report) => self.shared_report = Some(report),
                Update::Finished { summary, results } => {
                    if let Some(report) = &summary.shared {
                        self.shared_report = Some(report.clone());
                    }
                    self.drain_events(usize::MAX);
                    self.events = None;
                    self.run = RunStatus::Done { summary, results };
                }
                Update::Error(err) => self.toasts.error(err),
                Update::Info(text) => self.toasts.info(text),
                Update::Profiles { profiles, problems, secrets } => self.profiles_loaded(profiles, problems, *secrets),
                Update::Imported(profile) => {
                    self.toasts.info(format!("imported '{}'", profile.name));
                    self.editor.add_saved(*profile);
                }
                Update::Simulated(done) => {
                    self.simulator.running = false;
                    match done {
                        Ok(results) => self.simulator.results = Some(results),
                        Err(err) => self.simulator.error = Some(err),
                    }
                }
                Update::Probed(found) => {
                    self.discover.running = false;
                    self.discover.report = Some(*found);
                }
                Update::ProxyStarted { url, routes, events } => {
                    self.watch(events);
                    self.proxy.status = ProxyStatus::Running { url, routes };
                }
                Update::ProxyStopped(message) => {
                    self.drain_events(usize::MAX);
                    self.proxy.status = ProxyStatus::Stopped;
                    self.toasts.info(message);
                }
                Update::ProxyFailed(err) => {
                    self.toasts.error(format!("the proxy did not start: {err}"));
                    self.proxy.status = ProxyStatus::Failed(err);
                }
            }
        }
        self.drain_events(EVENTS_PER_FRAME);
    }

    /// A new stream of client events (a burst's or the proxy's) takes over the charts and log.
    fn watch(&mut self, events: mpsc::Receiver<Event>) {
        self.telemetry.clear(tokio::time::Instant::now());
        self.selected_row = None;
        self.events = Some(events);
    }

    fn profiles_loaded(&mut self, profiles: Vec<Profile>, problems: Vec<String>, secrets: SecretStore) {
        for problem in problems {
            self.toasts.error(problem);
        }
        self.editor.load(profiles, secrets);
        if let Some(profile) = self.editor.profile() {
            self.composer.shared.adopt(profile);
        }
        if let DemoStatus::Running { url, .. } = &self.demo {
            let url = url.clone();
            self.editor.point_demo_at(&url);
        }
    }

    fn drain_events(&mut self, limit: usize) {
        let Some(events) = &mut self.events else { return };
        for _ in 0..limit {
            match events.try_recv() {
                Ok(event) => self.telemetry.ingest(&event),
                Err(_) => break,
            }
        }
    }

    /// Fires the composed burst at the selected host.
    pub fn fire(&mut self) {
        if self.is_running() {
            self.toasts.info("a burst is already running: cancel it first (Esc)");
            return;
        }
        match self.composer.fire_request(&self.editor) {
            Ok(request) => self.backend.send(Command::Fire(Box::new(request))),
            Err(err) => self.toasts.error(err),
        }
    }

    pub fn cancel(&mut self) {
        if self.is_running() {
            self.backend.send(Command::Cancel);
        }
    }

    fn shortcuts(&mut self, ui: &egui::Ui) {
        let fire = KeyboardShortcut::new(Modifiers::COMMAND, Key::Enter);
        let save = KeyboardShortcut::new(Modifiers::COMMAND, Key::S);
        let (fire_pressed, save_pressed, escape) = ui.ctx().input_mut(|input| {
            (input.consume_shortcut(&fire), input.consume_shortcut(&save), input.key_pressed(Key::Escape))
        });
        if fire_pressed {
            self.fire();
        }
        if save_pressed {
            self.save();
        }
        if escape {
            self.cancel();
        }
    }

    /// Saves the current profile and the secrets.
    pub fn save(&mut self) {
        match self.editor.save_request() {
            Ok((profile, secrets)) => {
                self.backend.send(Command::Save { profile: Box::new(profile), secrets: Box::new(secrets) });
            }
            Err(err) => self.toasts.error(err),
        }
    }

    /// One frame of the whole window.
    pub fn frame_ui(&mut self, ui: &mut egui::Ui) {
        self.drain();
        self.shortcuts(ui);
        egui::Panel::top("top").show(ui, |ui| self.top_bar_ui(ui));
        match self.tab {
            // The proxy's traffic shows on the same charts and log as a burst's.
            Tab::Burst | Tab::Proxy => self.burst_tab_ui(ui),
            Tab::Simulator => {
                egui::CentralPanel::default().show(ui, |ui| {
                    if let Some(request) = self.simulator.simulator_ui(ui) {
                        self.backend.send(Command::Simulate(Box::new(request)));
                    }
                });
            }
        }
        match self.discover.window_ui(ui.ctx()) {
            DiscoverAction::None => {}
            DiscoverAction::Probe { url, max_requests } => self.backend.send(Command::Probe { url, max_requests }),
            DiscoverAction::CreateProfile(profile) => self.keep_discovered(*profile),
        }
        self.toasts.toasts_ui(ui);
    }

    fn burst_tab_ui(&mut self, ui: &mut egui::Ui) {
        egui::Panel::left("hosts").default_size(340.0).resizable(true).show(ui, |ui| {
            egui::ScrollArea::vertical().show(ui, |ui| {
                let action = self.editor.editor_ui(ui, self.is_running());
                self.handle_editor(action);
            });
        });
        egui::Panel::bottom("log").default_size(230.0).resizable(true).show(ui, |ui| self.lower_ui(ui));
        egui::CentralPanel::default().show(ui, |ui| {
            let empty_text = if self.tab == Tab::Proxy {
                self.proxy_tab_ui(ui);
                PROXY_EMPTY_TEXT
            } else {
                self.composer_ui(ui);
                EMPTY_TEXT
            };
            ui.separator();
            charts_ui_in(ui, &self.telemetry, &mut self.chart_view, egui::Id::NULL, empty_text);
        });
    }

    /// Opens the Discover window on the selected host's first endpoint.
    pub fn open_discover(&mut self) {
        let base = self.editor.selected_host().map(|host| host.base_url.clone()).unwrap_or_default();
        let path = self.composer.endpoints.first().map(|endpoint| endpoint.path.clone()).unwrap_or_default();
        self.discover.open_at(format!("{}{}", base.trim_end_matches('/'), path));
    }

    /// A profile made from a probe's suggestion: selected, and saved at once.
    fn keep_discovered(&mut self, profile: Profile) {
        self.editor.add_saved(profile.clone());
        let secrets = self.editor.secrets.clone();
        self.backend.send(Command::Save { profile: Box::new(profile), secrets: Box::new(secrets) });
        self.discover.open = false;
    }

    fn proxy_tab_ui(&mut self, ui: &mut egui::Ui) {
        let profile = self.editor.profile().map(|profile| profile.name.clone());
        match proxy_ui(ui, &mut self.proxy, profile.as_deref()) {
            ProxyAction::None => {}
            ProxyAction::Start => self.start_proxy(),
            ProxyAction::Stop => {
                self.proxy.status = ProxyStatus::Stopping;
                self.backend.send(Command::StopProxy);
            }
        }
    }

    /// Starts a proxy from the selected profile (its traffic replaces the charts' contents).
    pub fn start_proxy(&mut self) {
        let Some(profile) = self.editor.profile() else {
            self.toasts.error("select a profile first");
            return;
        };
        match self.proxy.config(profile, &self.editor.secrets) {
            Ok(config) => {
                self.proxy.status = ProxyStatus::Starting;
                self.backend.send(Command::StartProxy(Box::new(config)));
            }
            Err(err) => {
                self.toasts.error(format!("the proxy cannot start: {err}"));
                self.proxy.status = ProxyStatus::Failed(err);
            }
        }
    }

    fn handle_editor(&mut self, action: EditorAction) {
        match action {
            EditorAction::None => {}
            EditorAction::LiveLimits(changes) => {
                for (key, config) in changes {
                    self.backend.send(Command::SetLimits { key, config });
                }
            }
            EditorAction::Save => self.save(),
            EditorAction::Import => self.backend.send(Command::Import),
            EditorAction::Export(profile) => self.backend.send(Command::Export { profile }),
            EditorAction::Delete(name) => self.backend.send(Command::Delete { name }),
            EditorAction::Message(text) => self.toasts.info(text),
        }
    }

    fn top_bar_ui(&mut self, ui: &mut egui::Ui) {
        ui.horizontal(|ui| {
            ui.heading("ratescope");
            ui.separator();
            for (tab, label) in [(Tab::Burst, "Burst"), (Tab::Simulator, "Simulator"), (Tab::Proxy, "Proxy")] {
                ui.selectable_value(&mut self.tab, tab, label);
            }
            ui.separator();
            let action = self.editor.profile_bar_ui(ui);
            self.handle_editor(action);
            ui.with_layout(egui::Layout::right_to_left(egui::Align::Center), |ui| match &self.demo {
                DemoStatus::Starting => {
                    ui.spinner();
                    ui.label("starting the demo API…");
                }
                DemoStatus::Running { url, routes } => {
                    // Truncated rather than drawn over the profile buttons when the window is narrow.
                    let status = egui::RichText::new(format!("demo API running at {url}"))
                        .color(egui::Color32::from_rgb(80, 180, 90));
                    ui.add(egui::Label::new(status).truncate()).on_hover_text(format!(
                        "demo API running at {url}\nThe embedded rate-limited API, on loopback only.\nRoutes: {routes}"
                    ));
                }
                DemoStatus::Failed(err) => {
                    ui.label(egui::RichText::new("demo API down").color(egui::Color32::RED)).on_hover_text(err);
                }
            });
        });
    }

    fn composer_ui(&mut self, ui: &mut egui::Ui) {
        let running = self.is_running();
        let pressed = self.composer.composer_ui(ui, &self.editor, running, self.shared_report.as_ref());
        if pressed.fire {
            self.fire();
        }
        if pressed.cancel {
            self.cancel();
        }
        if pressed.discover {
            self.open_discover();
        }
        if let RunStatus::Running { progress } = &self.run {
            let fraction = progress.done as f32 / progress.planned.max(1) as f32;
            ui.add(egui::ProgressBar::new(fraction).show_percentage().text(format!(
                "{}/{} done · {} queued or in flight · {} failed",
                progress.done,
                progress.planned,
                progress.launched.saturating_sub(progress.done),
                progress.failed
            )));
        }
    }

    fn lower_ui(&mut self, ui: &mut egui::Ui) {
        egui::Panel::right("server").default_size(330.0).resizable(true).show(ui, |ui| {
            egui::ScrollArea::vertical().id_salt("server_scroll").show(ui, |ui| {
                if let RunStatus::Done { summary, results } = &self.run {
                    ui.heading("Summary");
                    match summary_ui(ui, summary) {
                        SummaryAction::None => {}
                        SummaryAction::ExportJson => {
                            let contents = serde_json::to_vec_pretty(&summary.to_json()).unwrap_or_default();
                            self.backend.send(Command::SaveFile {
                                title: "Export the summary as JSON".into(),
                                default_name: "ratescope-summary.json".into(),
                                contents,
                            });
                        }
                        SummaryAction::ExportCsv => {
                            let mut contents = Vec::new();
                            match write_csv(&mut contents, results) {
                                Ok(()) => self.backend.send(Command::SaveFile {
                                    title: "Export every attempt as CSV".into(),
                                    default_name: "ratescope-attempts.csv".into(),
                                    contents,
                                }),
                                Err(err) => self.toasts.error(format!("CSV not written: {err}")),
                            }
                        }
                    }
                    ui.separator();
                }
                ui.heading("What the server says");
                if let Some(config) = server_ui(ui, &self.telemetry) {
                    let message = self.editor.apply_server_limits(&config);
                    self.toasts.info(message);
                }
                if let Some(selected) = self.selected_row
                    && let Some(row) =
                        self.telemetry.log.iter().rev().find(|row| (row.request_id, row.attempt) == selected)
                {
                    ui.separator();
                    ui.heading("Selected response");
                    details_ui(ui, row);
                }
            });
        });
        egui::CentralPanel::default().show(ui, |ui| {
            ui.heading("Request log");
            log_ui(ui, &self.telemetry, &mut self.selected_row);
        });
    }
}

impl eframe::App for App {
    fn save(&mut self, storage: &mut dyn eframe::Storage) {
        if let Some(profile) = self.editor.profile() {
            storage.set_string(LAST_PROFILE_KEY, profile.name.clone());
        }
    }

    fn ui(&mut self, ui: &mut egui::Ui, _frame: &mut eframe::Frame) {
        self.frame_ui(ui);
        let ready = matches!(self.demo, DemoStatus::Running { .. }) && self.editor.loaded;
        if self.screenshot.as_mut().is_some_and(|mode| mode.should_fire(ready)) {
            self.fire();
        }
        if let Some(mode) = &mut self.screenshot {
            mode.drive(ui.ctx());
        }
        if let Some((since, after, frames)) = &mut self.smoke {
            *frames += 1;
            if *frames == 1 {
                let start = crate::telemetry::process_start();
                println!("smoke: first frame {:.0} ms after start", start.elapsed().as_secs_f64() * 1000.0);
            }
            if since.elapsed() >= *after {
                let demo = match &self.demo {
                    DemoStatus::Running { url, .. } => url.to_string(),
                    other => format!("{other:?}"),
                };
                println!("smoke: {frames} frames drawn; demo API: {demo}");
                ui.ctx().send_viewport_cmd(egui::ViewportCommand::Close);
            }
            ui.ctx().request_repaint_after(Duration::from_millis(50));
        }
        if self.is_running() {
            // The background also asks for repaints; this keeps the progress moving if it lags.
            ui.ctx().request_repaint_after(Duration::from_millis(100));
        }
    }
}

/// Secrets and profiles as the editor hands them to be saved.
pub type SaveRequest = (Profile, SecretStore);
