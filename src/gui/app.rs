//! The app's state and its frame: drains the background's updates, lays out the panels,
//! and turns clicks and shortcuts into commands.

use std::sync::Arc;
use std::time::Duration;

use egui::{Key, KeyboardShortcut, Modifiers};
use tokio::sync::mpsc;
use url::Url;

use super::backend::{Backend, Command, Update};
use super::chart_image::{CaptureState, ChartImage};
use super::charts::{ChartView, EMPTY_TEXT, PROXY_EMPTY_TEXT, compare_charts_ui};
use super::composer::{Composer, EndpointDraft};
use super::discover::{Discover, DiscoverAction};
use super::editor::{Editor, EditorAction};
use super::history::{History, history_ui};
use super::log::{details_ui, log_ui};
use super::proxy::{ProxyAction, ProxyPanel, ProxyStatus, proxy_ui};
use super::quit::{Quit, QuitAction, quit_prompt_ui};
use super::save_as::{SaveAs, SaveAsAction};
use super::screenshot::ScreenshotStep;
use super::server::server_ui;
use super::simulator::{SimAction, SimulatorTab};
use super::summary::{SummaryAction, summary_ui};
use super::toasts::{Toasts, Topic};
use crate::http::Event;
use crate::profile::{Profile, SecretStore};
use crate::run::{BurstProgress, RequestResult, Summary, write_csv};
use crate::store::SharedReport;
use crate::telemetry::Telemetry;

/// Points kept in full per chart series (an hour at 100 samples a second; older ones are kept
/// as min/max summaries, see `telemetry::Series`) and rows kept in the request log.
const SERIES_CAPACITY: usize = 400_000;
const LOG_CAPACITY: usize = 50_000;
/// Events folded into the charts per frame at most, so one frame never stalls on a flood.
const EVENTS_PER_FRAME: usize = 20_000;

/// The embedded demo API as the app knows it.
#[derive(Debug, Clone, PartialEq)]
pub enum DemoStatus {
    /// The app asked the backend to start it.
    Starting,
    /// Listening.
    Running {
        /// Its base URL.
        url: Url,
        /// Its routes and their limits, in words.
        routes: String,
    },
    /// It could not start; the message says why.
    Failed(String),
}

/// A burst as the app knows it.
#[derive(Debug, Default)]
pub enum RunStatus {
    /// Nothing fired yet.
    #[default]
    Idle,
    /// Firing.
    Running {
        /// Requests planned, launched and done so far.
        progress: BurstProgress,
    },
    /// Finished or cancelled.
    Done {
        /// Its summary.
        summary: Box<Summary>,
        /// Every request's result.
        results: Vec<RequestResult>,
    },
}

/// The view in the central panel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Tab {
    /// Fire a burst and watch its charts.
    #[default]
    Burst,
    /// One workload through two limit settings in virtual time.
    Simulator,
    /// Run a proxy from the current profile.
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

/// The name of the button that folds and unfolds the lower panel.
pub const LOWER_PANEL: &str = "lower panel";

/// Storage key of the last selected profile.
pub const LAST_PROFILE_KEY: &str = "ratescope.last_profile";

/// The whole app.
pub struct App {
    pub(crate) tab: Tab,
    pub(crate) simulator: SimulatorTab,
    pub(crate) discover: Discover,
    backend: Backend,
    pub(crate) editor: Editor,
    pub(crate) composer: Composer,
    pub(crate) demo: DemoStatus,
    pub(crate) run: RunStatus,
    pub(crate) telemetry: Arc<Telemetry>,
    pub(crate) chart_view: ChartView,
    pub(crate) selected_row: Option<(u64, u32)>,
    pub(crate) toasts: Toasts,
    /// The shared store's last reported state, when budgets are shared through Redis.
    pub(crate) shared_report: Option<SharedReport>,
    pub(crate) proxy: ProxyPanel,
    /// The session's finished runs, and the one compared with.
    pub(crate) history: History,
    /// The run on the charts now (its number once it is in the history).
    shown_run: Option<u32>,
    /// What the running burst was fired with, for the history.
    firing: Option<String>,
    /// An export waiting for its path.
    pub(crate) save_as: Option<SaveAs>,
    /// The left panel (hosts and limits) is open.
    pub(crate) hosts_open: bool,
    /// The lower panel (request log, what the server says, runs) is open.
    pub(crate) lower_open: bool,
    /// The keyboard shortcuts overlay is open.
    pub(crate) help_open: bool,
    /// Whether a close of the window is held for unsaved work.
    pub(crate) quit: Quit,
    /// Close the window on the next frame (every save the quit prompt asked for is done).
    close_now: bool,
    /// A PNG of the charts being captured, page by page.
    chart_capture: Option<ChartImage>,
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
            telemetry: Arc::new(Telemetry::new(tokio::time::Instant::now(), SERIES_CAPACITY, LOG_CAPACITY)),
            chart_view: ChartView::default(),
            selected_row: None,
            toasts: Toasts::default(),
            shared_report: None,
            proxy: ProxyPanel::default(),
            history: History::default(),
            shown_run: None,
            firing: None,
            save_as: None,
            hosts_open: true,
            lower_open: true,
            help_open: false,
            quit: Quit::default(),
            close_now: false,
            chart_capture: None,
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

    /// The tab on screen.
    pub fn tab(&self) -> Tab {
        self.tab
    }

    /// The profiles and the host being edited.
    pub fn editor(&self) -> &Editor {
        &self.editor
    }

    /// The burst as composed now.
    pub fn composer(&self) -> &Composer {
        &self.composer
    }

    /// The simulator tab: its workload, both limits and the last results.
    pub fn simulator(&self) -> &SimulatorTab {
        &self.simulator
    }

    /// The Discover window: its URL and the probe's report.
    pub fn discover(&self) -> &Discover {
        &self.discover
    }

    /// The embedded demo API.
    pub fn demo(&self) -> &DemoStatus {
        &self.demo
    }

    /// The burst: idle, running or done with its summary.
    pub fn run(&self) -> &RunStatus {
        &self.run
    }

    /// What the charts and the request log show.
    pub fn telemetry(&self) -> &Telemetry {
        &self.telemetry
    }

    /// The proxy panel and its status.
    pub fn proxy(&self) -> &ProxyPanel {
        &self.proxy
    }

    /// The session's finished runs.
    pub fn history(&self) -> &History {
        &self.history
    }

    /// The notices on screen.
    pub fn toasts(&self) -> &Toasts {
        &self.toasts
    }

    /// An export waiting for its typed path.
    pub fn save_as(&self) -> Option<&SaveAs> {
        self.save_as.as_ref()
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
                    self.toasts.resolve(Topic::Fire);
                    self.watch(events);
                    self.run = RunStatus::Running { progress: BurstProgress { planned, ..BurstProgress::default() } };
                }
                Update::Progress(progress) => {
                    if let RunStatus::Running { progress: current } = &mut self.run {
                        *current = progress;
                    }
                }
                Update::Snapshots(snapshots) => Arc::make_mut(&mut self.telemetry).sample(&snapshots),
                Update::Shared(report) => self.shared_report = Some(report),
                Update::Finished { summary, results } => {
                    if let Some(report) = &summary.shared {
                        self.shared_report = Some(report.clone());
                    }
                    self.drain_events(usize::MAX);
                    self.events = None;
                    let settings = self.firing.take().unwrap_or_else(|| summary.limiter.clone());
                    self.history.push(settings, &summary, Arc::clone(&self.telemetry));
                    self.shown_run = self.history.runs.back().map(|run| run.number);
                    self.run = RunStatus::Done { summary, results };
                }
                Update::Error(err) => self.toasts.error(err),
                Update::Info(text) => self.toasts.info(text),
                Update::Saved { profile, message } => {
                    self.toasts.resolve(Topic::Save);
                    self.toasts.resolve(Topic::Unsaved);
                    self.toasts.info(message);
                    let name = profile.name.clone();
                    self.editor.mark_saved(*profile);
                    self.close_now |= self.quit.saved(&name);
                }
                Update::SaveFailed { name: _, error } => {
                    if matches!(self.quit, Quit::Saving { .. }) {
                        self.quit.save_failed();
                        self.toasts.error_about(Topic::Save, format!("{error}; the window stays open"));
                    } else {
                        self.toasts.error_about(Topic::Save, error);
                    }
                }
                Update::Profiles { profiles, problems, secrets } => self.profiles_loaded(profiles, problems, *secrets),
                Update::ExportText { name, text } => {
                    let what = format!("the profile '{name}' (no secret values)");
                    self.save_as = Some(SaveAs::offer(what, &format!("{name}.toml"), text.into_bytes()));
                }
                Update::Imported(profile) => {
                    self.toasts.info(format!("imported '{}'", profile.name));
                    self.editor.add_saved(*profile);
                }
                Update::Replayed(done) => {
                    self.simulator.replay.running = false;
                    self.simulator.replay.result = Some(done.map(|result| *result));
                }
                Update::RecordingPicked(path) => {
                    self.simulator.replay.file = path.display().to_string();
                    if let Some(request) = self.simulator.replay_request() {
                        self.backend.send(Command::Replay(Box::new(request)));
                    }
                }
                Update::Tuned(done) => {
                    self.simulator.tune.running = false;
                    self.simulator.tune.report = Some(done);
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
                    self.toasts.resolve(Topic::Proxy);
                    self.watch(events);
                    self.proxy.status = ProxyStatus::Running { url, routes };
                }
                Update::ProxyStopped(message) => {
                    self.drain_events(usize::MAX);
                    self.proxy.status = ProxyStatus::Stopped;
                    self.toasts.resolve(Topic::Proxy);
                    self.toasts.info(message);
                }
                Update::ProxyFailed(err) => {
                    self.toasts.error_about(Topic::Proxy, format!("the proxy did not start: {err}"));
                    self.proxy.status = ProxyStatus::Failed(err);
                }
                Update::BodyFile { path, read } => self.composer.body_file_read(&path, &read),
            }
        }
        self.drain_events(EVENTS_PER_FRAME);
    }

    /// A new stream of client events (a burst's or the proxy's) takes over the charts and log.
    fn watch(&mut self, events: mpsc::Receiver<Event>) {
        // A new recorder rather than clearing: the finished run's data may be shared with the
        // history, and clearing would copy it first.
        self.telemetry = Arc::new(self.telemetry.fresh(tokio::time::Instant::now()));
        self.shown_run = None;
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
                Ok(event) => Arc::make_mut(&mut self.telemetry).ingest(&event),
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
            Ok(request) => {
                self.firing = Some(self.composer.describe(&request.spec));
                self.backend.send(Command::Fire(Box::new(request)));
            }
            Err(err) => self.toasts.error_about(Topic::Fire, err),
        }
    }

    /// Cancels the running burst, if any; what it did so far is summarised.
    pub fn cancel(&mut self) {
        if self.is_running() {
            self.backend.send(Command::Cancel);
        }
    }

    fn shortcuts(&mut self, ui: &egui::Ui) {
        let fire = KeyboardShortcut::new(Modifiers::COMMAND, Key::Enter);
        let save = KeyboardShortcut::new(Modifiers::COMMAND, Key::S);
        // `?` is help only while no field takes the text.
        let typing = ui.ctx().memory(|memory| memory.focused().is_some());
        let (fire_pressed, save_pressed, escape, help) = ui.ctx().input_mut(|input| {
            let help = input.key_pressed(Key::F1) || (!typing && input.key_pressed(Key::Questionmark));
            (input.consume_shortcut(&fire), input.consume_shortcut(&save), input.key_pressed(Key::Escape), help)
        });
        if help {
            self.help_open = !self.help_open;
        }
        if fire_pressed {
            self.fire();
        }
        if save_pressed {
            self.save();
        }
        if escape {
            if self.help_open {
                self.help_open = false;
            } else {
                self.cancel();
            }
        }
    }

    /// Saves the current profile and the secrets.
    pub fn save(&mut self) {
        match self.editor.save_request() {
            Ok((profile, secrets)) => {
                self.backend.send(Command::Save { profile: Box::new(profile), secrets: Box::new(secrets) });
            }
            Err(err) => self.toasts.error_about(Topic::Save, err),
        }
    }

    /// Where leaving the app stands (a close held for unsaved work, saves awaited).
    pub fn quit(&self) -> &Quit {
        &self.quit
    }

    /// The window's close button (or the desktop's) was pressed: it closes at once when
    /// nothing is unsaved, and otherwise is held while the prompt asks what to do.
    fn close_requested_ui(&mut self, ctx: &egui::Context) {
        if ctx.input(|input| input.viewport().close_requested()) && !self.quit.close_requested(self.editor.unsaved()) {
            ctx.send_viewport_cmd(egui::ViewportCommand::CancelClose);
        }
        match quit_prompt_ui(ctx, &self.quit) {
            QuitAction::None => {}
            QuitAction::Cancel => self.quit = Quit::Staying,
            QuitAction::Discard => {
                self.quit = Quit::Leaving;
                self.close_now = true;
            }
            QuitAction::SaveAll => match self.editor.save_all_requests() {
                Ok(requests) => {
                    let waiting = requests.iter().map(|(profile, _)| profile.name.clone()).collect();
                    self.quit = Quit::Saving { waiting };
                    for (profile, secrets) in requests {
                        self.backend.send(Command::Save { profile: Box::new(profile), secrets: Box::new(secrets) });
                    }
                }
                Err(err) => {
                    self.quit = Quit::Staying;
                    self.toasts.error_about(Topic::Save, format!("{err}; fix it, or quit without saving"));
                }
            },
        }
        if std::mem::take(&mut self.close_now) {
            ctx.send_viewport_cmd(egui::ViewportCommand::Close);
        }
    }

    /// One frame of the whole window.
    pub fn frame_ui(&mut self, ui: &mut egui::Ui) {
        self.drain();
        self.close_requested_ui(ui.ctx());
        self.shortcuts(ui);
        egui::Panel::top("top").show(ui, |ui| self.top_bar_ui(ui));
        // The status bar comes before every other panel, so it is the window's last line and
        // its messages take their own room instead of lying over buttons.
        egui::Panel::bottom("status").show(ui, |ui| self.status_bar_ui(ui));
        if self.tab != Tab::Proxy {
            self.toasts.resolve(Topic::Proxy);
        }
        match self.tab {
            // The proxy's traffic shows on the same charts and log as a burst's.
            Tab::Burst | Tab::Proxy => self.burst_tab_ui(ui),
            Tab::Simulator => {
                if let Some(host) = self.editor.selected_host() {
                    self.simulator.follow_profile(host);
                }
                let host = self.editor.selected_host().map(|host| host.name.clone());
                let action =
                    egui::CentralPanel::default().show(ui, |ui| self.simulator.simulator_ui(ui, host.as_deref())).inner;
                match action {
                    None => {}
                    Some(SimAction::Simulate(request)) => self.backend.send(Command::Simulate(request)),
                    Some(SimAction::Tune(request)) => self.backend.send(Command::Tune(request)),
                    Some(SimAction::Replay(request)) => self.backend.send(Command::Replay(request)),
                    Some(SimAction::PickRecording) => self.backend.send(Command::PickRecording),
                    Some(SimAction::Apply(config)) => {
                        self.apply_limits_to_host(&config);
                    }
                }
            }
        }
        let host = self.editor.selected_host().map(|host| host.name.clone());
        match self.discover.window_ui(ui.ctx(), host.as_deref()) {
            DiscoverAction::None => {}
            DiscoverAction::ApplyToHost(config) => {
                if self.apply_limits_to_host(&config) {
                    self.discover.open = false;
                }
            }
            DiscoverAction::Probe { url, max_requests } => self.backend.send(Command::Probe { url, max_requests }),
            DiscoverAction::CreateProfile(profile) if self.editor.has_profile_like(&profile.name) => {
                // Asked first: a profile of that name would be replaced.
                self.discover.replacing = Some(profile);
            }
            DiscoverAction::CreateProfile(profile) | DiscoverAction::ReplaceProfile(profile) => {
                self.discover.replacing = None;
                self.keep_discovered(*profile);
            }
        }
        self.save_as_ui(ui.ctx());
        self.capture_charts(ui.ctx());
        if self.help_open {
            super::help::help_ui(ui.ctx(), &mut self.help_open);
        }
        // Body files asked for this frame (Load body, a profile endpoint, a curl import) are
        // read by the backend; their text comes back as an update.
        for path in self.composer.wanted_body_files() {
            self.backend.send(Command::ReadBodyFile { path });
        }
    }

    /// The window's foot: the demo API's state on the left, then the newest message.
    fn status_bar_ui(&mut self, ui: &mut egui::Ui) {
        ui.horizontal(|ui| {
            self.demo_status_ui(ui);
            ui.separator();
            self.toasts.toasts_ui(ui);
        });
    }

    fn save_as_ui(&mut self, ctx: &egui::Context) {
        let Some(save_as) = &mut self.save_as else { return };
        match save_as.save_as_ui(ctx) {
            SaveAsAction::None => {}
            SaveAsAction::Cancel => self.save_as = None,
            SaveAsAction::Write { path, contents, what } => {
                self.backend.send(Command::WriteFile { path, contents, what });
                self.save_as = None;
            }
            SaveAsAction::Browse { title, default_name, contents } => {
                self.backend.send(Command::SaveFile { title, default_name, contents });
            }
        }
    }

    /// Asks for a PNG of every chart (drawn a page at a time over the window, then the Save
    /// as window opens).
    pub fn export_charts_png(&mut self, ctx: &egui::Context) {
        if self.telemetry.log.is_empty() && self.telemetry.open.is_empty() {
            self.toasts.info("fire a burst first: there are no charts to save yet");
            return;
        }
        self.chart_capture = Some(ChartImage::new(ctx.content_rect().height()));
    }

    fn capture_charts(&mut self, ctx: &egui::Context) {
        let Some(capture) = &mut self.chart_capture else { return };
        let previous = self.history.compared(self.shown_run);
        match capture.capture_ui(ctx, &self.telemetry, previous, &self.chart_view) {
            CaptureState::Working => {}
            CaptureState::Done(png) => {
                self.chart_capture = None;
                self.save_as = Some(SaveAs::offer("the charts as PNG", "ratescope-charts.png", png));
            }
            CaptureState::Failed(err) => {
                self.chart_capture = None;
                self.toasts.error(format!("the charts were not captured: {err}"));
            }
        }
    }

    fn burst_tab_ui(&mut self, ui: &mut egui::Ui) {
        let width = ui.available_width();
        // The log spans the whole width, under the hosts panel too, so it keeps its columns
        // in a narrow window.
        if self.lower_open {
            egui::Panel::bottom("log")
                .default_size(230.0)
                .size_range(96.0..=(ui.available_height() * 0.7).max(96.0))
                .resizable(true)
                .show(ui, |ui| self.lower_ui(ui));
        } else {
            egui::Panel::bottom("log_folded").resizable(false).show(ui, |ui| self.lower_folded_ui(ui));
        }
        let panel = egui::Panel::left("hosts")
            .default_size((width * 0.3).clamp(220.0, 340.0))
            .size_range(220.0..=(width * 0.4).clamp(220.0, 460.0))
            .resizable(true);
        let running = self.is_running();
        let mut open = self.hosts_open;
        panel.show_collapsible(ui, &mut open, |ui| {
            // The fields are sized to the panel and text wraps at its width; a row still too
            // wide scrolls sideways instead of widening the panel.
            let width = ui.available_width();
            ui.spacing_mut().text_edit_width = (width - 90.0).max(80.0);
            egui::ScrollArea::both().auto_shrink(false).show(ui, |ui| {
                ui.set_max_width(width);
                let action = self.editor.editor_ui(ui, running);
                self.handle_editor(action);
            });
        });
        self.hosts_open = open;
        egui::CentralPanel::default().show(ui, |ui| {
            let empty_text = if self.tab == Tab::Proxy {
                self.proxy_tab_ui(ui);
                PROXY_EMPTY_TEXT
            } else {
                self.composer_ui(ui);
                EMPTY_TEXT
            };
            ui.separator();
            let previous = self.history.compared(self.shown_run);
            compare_charts_ui(ui, &self.telemetry, previous, &mut self.chart_view, egui::Id::NULL, empty_text);
        });
    }

    /// Opens the Discover window on the selected host's first endpoint.
    pub fn open_discover(&mut self) {
        let base = self.editor.selected_host().map(|host| host.base_url.clone()).unwrap_or_default();
        let path = self.composer.endpoints.first().map(|endpoint| endpoint.path.clone()).unwrap_or_default();
        self.discover.open_at(format!("{}{}", base.trim_end_matches('/'), path));
    }

    /// A profile made from a probe's suggestion: selected, and saved at once.
    /// Puts `config` into the host being edited, opening the hosts panel where its Undo offer
    /// is; says what happened in a toast. Returns whether it was applied.
    fn apply_limits_to_host(&mut self, config: &crate::engine::LimiterConfig) -> bool {
        match self.editor.apply_limits(config) {
            Ok(message) => {
                self.hosts_open = true;
                self.toasts.info_about(Topic::Unsaved, message);
                true
            }
            Err(err) => {
                self.toasts.error(err);
                false
            }
        }
    }

    /// Offers `profile`'s limits for `host` as code in `format` in the Save as window, or says
    /// why they cannot be exported.
    fn offer_export(&mut self, profile: &Profile, host: Option<&str>, format: crate::profile::export::ExportFormat) {
        use crate::profile::export::{Selection, render};
        let selection = Selection { host, path: None };
        match render(profile, selection, format) {
            Ok(text) => {
                let what = format!("'{}' as {}", host.unwrap_or(&profile.name), format.label());
                let file = export_file_name(&profile.name, format.extension());
                self.save_as = Some(SaveAs::offer(what, &file, text.into_bytes()));
            }
            Err(err) => self.toasts.error(format!("not exported: {err}")),
        }
    }

    fn keep_discovered(&mut self, profile: Profile) {
        self.editor.add_unsaved(profile.clone());
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
            Ok((config, skipped)) => {
                for warning in skipped {
                    self.toasts.error_about(Topic::Proxy, format!("the proxy starts without a host: {warning}"));
                }
                self.proxy.status = ProxyStatus::Starting;
                self.backend.send(Command::StartProxy(Box::new(config)));
            }
            Err(err) => {
                self.toasts.error_about(Topic::Proxy, format!("the proxy cannot start: {err}"));
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
            // The text comes from the backend: it reads the saved file to keep its comments.
            EditorAction::Export(profile)
            | EditorAction::ExportFor { profile, format: crate::profile::export::ExportFormat::Toml, .. } => {
                self.backend.send(Command::ExportText { profile })
            }
            EditorAction::ExportFor { profile, host, format } => self.offer_export(&profile, host.as_deref(), format),
            EditorAction::Delete(name) => self.backend.send(Command::Delete { name }),
            EditorAction::Message(text) => self.toasts.info(text),
            EditorAction::Unsaved(text) => self.toasts.info_about(Topic::Unsaved, text),
        }
    }

    fn top_bar_ui(&mut self, ui: &mut egui::Ui) {
        /// Room the theme switch and the help button take at the top bar's right end.
        const RIGHT_END_WIDTH: f32 = 110.0;
        ui.horizontal_wrapped(|ui| {
            let arrow = if self.hosts_open { "«" } else { "»" };
            let toggle = ui.button(arrow).on_hover_text("Show or hide the hosts and limits");
            if toggle.accessible_name("hosts panel").clicked() {
                self.hosts_open = !self.hosts_open;
            }
            ui.strong("ratescope");
            ui.separator();
            for (tab, label) in [(Tab::Burst, "Burst"), (Tab::Simulator, "Simulator"), (Tab::Proxy, "Proxy")] {
                ui.selectable_value(&mut self.tab, tab, label);
            }
            ui.separator();
            let action = self.editor.profile_bar_ui(ui);
            self.handle_editor(action);
            // The theme switch and help sit at the right end; on a narrow window they follow
            // on the next row rather than lie over the profile's buttons.
            if ui.available_size_before_wrap().x < RIGHT_END_WIDTH {
                ui.end_row();
                super::help::theme_ui(ui);
                self.help_button_ui(ui);
            } else {
                ui.with_layout(egui::Layout::right_to_left(egui::Align::Center), |ui| {
                    self.help_button_ui(ui);
                    super::help::theme_ui(ui);
                });
            }
        });
    }

    fn help_button_ui(&mut self, ui: &mut egui::Ui) {
        if ui.button("?").on_hover_text("Keyboard shortcuts (F1)").accessible_name("help").clicked() {
            self.help_open = !self.help_open;
        }
    }

    fn demo_status_ui(&self, ui: &mut egui::Ui) {
        match &self.demo {
            DemoStatus::Starting => {
                ui.spinner();
                ui.label("starting the demo API…");
            }
            DemoStatus::Running { url, routes } => {
                // Truncated rather than drawn over the profile buttons when the window is narrow.
                let status = egui::RichText::new(format!("demo API running at {url}"))
                    .color(super::palette::status_colors(ui.visuals()).ok);
                ui.add(egui::Label::new(status).truncate()).on_hover_text(format!(
                    "demo API running at {url}\nThe embedded rate-limited API, on loopback only.\nRoutes: {routes}"
                ));
            }
            DemoStatus::Failed(err) => {
                ui.label(egui::RichText::new("demo API down").color(super::palette::status_colors(ui.visuals()).error))
                    .on_hover_text(err);
            }
        }
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
        if pressed.save_png {
            self.export_charts_png(ui.ctx());
        }
        if pressed.keep_endpoints {
            match self.composer.endpoint_entries().and_then(|entries| self.editor.keep_endpoints(entries)) {
                Ok(message) => self.toasts.info_about(Topic::Unsaved, message),
                Err(err) => self.toasts.error(err),
            }
        }
        if let Some(import) = self.composer.curl.curl_ui(ui.ctx()) {
            match self.editor.import_curl(&import) {
                Ok(message) => {
                    self.composer.endpoints = vec![EndpointDraft::from_entry(&import.endpoint)];
                    if let Some(method) = import.endpoint.method.as_deref().and_then(|m| m.parse().ok()) {
                        self.composer.method = method;
                    }
                    self.toasts.info_about(Topic::Unsaved, message);
                }
                Err(err) => self.toasts.error(err),
            }
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

    /// The folded lower panel: one line saying what is in it, and the button that unfolds it.
    fn lower_folded_ui(&mut self, ui: &mut egui::Ui) {
        ui.horizontal(|ui| {
            if ui
                .button("show")
                .on_hover_text("Show the request log, what the server says and the runs")
                .accessible_name(LOWER_PANEL)
                .clicked()
            {
                self.lower_open = true;
            }
            let rows = self.telemetry.log.len();
            let runs = self.history.runs.len();
            ui.add(
                egui::Label::new(format!("Request log ({rows} attempts) · What the server says · Runs ({runs})"))
                    .truncate(),
            );
        });
    }

    fn lower_ui(&mut self, ui: &mut egui::Ui) {
        let width = ui.available_width();
        egui::Panel::right("server")
            .default_size((width * 0.4).clamp(240.0, 420.0))
            .size_range(200.0..=(width * 0.45).max(200.0))
            .resizable(true)
            .show(ui, |ui| {
                egui::ScrollArea::vertical()
                    .id_salt("server_scroll")
                    .auto_shrink(false)
                    .show(ui, |ui| self.server_side_ui(ui));
            });
        egui::CentralPanel::default().show(ui, |ui| {
            ui.horizontal(|ui| {
                let fold = ui.button("hide").on_hover_text("Fold this panel away: the charts take its room");
                if fold.accessible_name(LOWER_PANEL).clicked() {
                    self.lower_open = false;
                }
                ui.add(egui::Label::new(egui::RichText::new("Request log").heading()).truncate());
            });
            log_ui(ui, &self.telemetry, &mut self.selected_row);
        });
    }

    /// What the server says (first: it is what a person tunes by), the runs so far, the
    /// summary of the last one, and the selected response.
    fn server_side_ui(&mut self, ui: &mut egui::Ui) {
        // Each section folds, so in a short window the runs are a click away.
        let server = egui::CollapsingHeader::new(egui::RichText::new("What the server says").heading())
            .id_salt("server_says")
            .default_open(true)
            .show(ui, |ui| server_ui(ui, &self.telemetry));
        if let Some(Some(config)) = server.body_returned {
            let message = self.editor.apply_server_limits(&config);
            self.toasts.info_about(Topic::Unsaved, message);
        }
        if let Some(selected) = self.selected_row
            && let Some(row) = self.telemetry.log.iter().rev().find(|row| (row.request_id, row.attempt) == selected)
        {
            ui.separator();
            ui.heading("Selected response");
            details_ui(ui, row);
        }
        ui.separator();
        egui::CollapsingHeader::new(egui::RichText::new("Runs").heading()).id_salt("runs").default_open(true).show(
            ui,
            |ui| {
                history_ui(ui, &mut self.history);
            },
        );
        let RunStatus::Done { summary, results } = &self.run else { return };
        ui.separator();
        ui.heading("Summary");
        let offer = match summary_ui(ui, summary) {
            SummaryAction::None => None,
            SummaryAction::ExportJson => Some(
                serde_json::to_vec_pretty(&summary.to_json())
                    .map(|contents| SaveAs::offer("the summary as JSON", "ratescope-summary.json", contents))
                    .map_err(|err| format!("JSON not made: {err}")),
            ),
            SummaryAction::ExportCsv => {
                let mut contents = Vec::new();
                Some(
                    write_csv(&mut contents, results)
                        .map(|()| SaveAs::offer("every attempt as CSV", "ratescope-attempts.csv", contents))
                        .map_err(|err| format!("CSV not written: {err}")),
                )
            }
        };
        match offer {
            Some(Ok(save_as)) => self.save_as = Some(save_as),
            Some(Err(err)) => self.toasts.error(err),
            None => {}
        }
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
        let finished_runs = self.history.runs.len();
        match self.screenshot.as_mut().map(|mode| mode.step(ready, finished_runs)) {
            Some(ScreenshotStep::Fire { limiter }) => {
                self.composer.limiter_on = limiter;
                self.fire();
            }
            Some(ScreenshotStep::FireAndCompare { compare_with }) => {
                self.composer.limiter_on = true;
                self.history.compare = Some(compare_with);
                self.fire();
            }
            Some(ScreenshotStep::Wait) | None => {}
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

/// A file name for an export: `PROFILE_limits.EXT`, with what a module name cannot hold (a
/// Python import, a Go or Rust file) turned into `_`.
fn export_file_name(profile: &str, extension: &str) -> String {
    let stem: String =
        profile.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '_' }).collect();
    let stem =
        if stem.starts_with(|c: char| c.is_ascii_digit()) || stem.is_empty() { format!("p{stem}") } else { stem };
    format!("{stem}_limits.{extension}")
}
