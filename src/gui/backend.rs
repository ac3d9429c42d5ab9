//! The app's background: a tokio runtime on its own thread that runs the demo API and bursts.
//! The UI sends `Command`s and drains `Update`s each frame; it never awaits and never blocks.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc as std_mpsc;
use std::time::Duration;

use tokio::sync::mpsc;
use url::Url;

use super::body_file::read_body_file;
use super::simulator::{ReplayRequest, ReplayResult, SideResult, SimRequest, run_both, run_replay};
use super::tune_view::TuneRequest;
use crate::engine::{LimitKey, LimiterConfig, Registry, Snapshot};
use crate::http::{ClientBuilder, Event, EventSink, LimitedClient};
use crate::mock::{MockConfig, MockServer};
use crate::probe::{ProbeOptions, ProbeReport, probe};
use crate::profile::{Profile, ProfileStore, SecretStore};
use crate::proxy::{ProxyConfig, ProxyServer};
use crate::run::{Burst, BurstProgress, BurstSpec, RequestResult, Summary};
use crate::store::SharedReport;
use crate::tune::{TuneReport, tune};

/// How many client events may wait for the UI before newer ones are dropped (and counted).
pub const EVENT_BUFFER: usize = 16_384;
/// How often a running burst is sampled (snapshots, progress) and the UI asked to repaint.
pub const SAMPLE_EVERY: Duration = Duration::from_millis(50);

/// What the UI asks of the background.
#[derive(Debug)]
pub enum Command {
    /// Start the embedded demo API on `port` (0 for any free port).
    StartDemo {
        /// The port; 0 for any free one.
        port: u16,
    },
    /// Fire a burst: the spec (its limits applied to every key before the first request) and
    /// the client builder it is sent with.
    Fire(Box<FireRequest>),
    /// Cancel the running burst.
    Cancel,
    /// Change the limits of a key now (the running burst feels it at once).
    SetLimits {
        /// The key.
        key: LimitKey,
        /// Its new limits.
        config: LimiterConfig,
    },
    /// Load every profile of the store (writing the demo profile first if there is none).
    LoadProfiles,
    /// Save a profile and the secret store.
    Save {
        /// The profile.
        profile: Box<Profile>,
        /// The secret store, saved beside it.
        secrets: Box<SecretStore>,
    },
    /// Move a saved profile aside (`.bak`).
    Delete {
        /// The profile's name.
        name: String,
    },
    /// Ask for a file and import the profile in it.
    Import,
    /// Ask for a file and export a profile to it (never with secret values).
    Export {
        /// The profile.
        profile: Box<Profile>,
    },
    /// The text exporting `profile` writes (its file's comments kept), for the Save as window.
    ExportText {
        /// The profile.
        profile: Box<Profile>,
    },
    /// Ask for a file and write `contents` to it (a JSON summary or a CSV of attempts).
    SaveFile {
        /// The file dialog's title.
        title: String,
        /// The file name offered.
        default_name: String,
        /// The bytes to write.
        contents: Vec<u8>,
    },
    /// Write `contents` (`what`, for the message) to the path typed in the app's Save as window.
    WriteFile {
        /// Where to write.
        path: PathBuf,
        /// The bytes to write.
        contents: Vec<u8>,
        /// What it is, for the message (`summary`, `CSV`, ...).
        what: String,
    },
    /// Run the Simulator tab's two simulations (in virtual time, off the runtime's threads).
    Simulate(Box<SimRequest>),
    /// Run the Simulator tab's sweep (in virtual time, off the runtime's threads).
    Tune(Box<TuneRequest>),
    /// Replay a recording with the limiter on and off (in virtual time, off the runtime's threads).
    Replay(Box<ReplayRequest>),
    /// Ask for a recording's file.
    PickRecording,
    /// Probe `url` for its limits with at most `max_requests` requests.
    Probe {
        /// The URL.
        url: Url,
        /// The most requests the probe may send.
        max_requests: usize,
    },
    /// Start a proxy (its traffic arrives as events, like a burst's).
    StartProxy(Box<ProxyConfig>),
    /// Stop the proxy, letting requests in flight finish.
    StopProxy,
    /// Read a request body from this file (Load body), answered by [`Update::BodyFile`].
    ReadBodyFile {
        /// The file, as typed.
        path: PathBuf,
    },
}

/// Everything a burst needs: what to send, and the client (limits, retry, headers) to send it with.
#[derive(Debug)]
pub struct FireRequest {
    /// What to send.
    pub spec: BurstSpec,
    /// The client to send it with.
    pub builder: ClientBuilder,
}

/// What the background tells the UI.
#[derive(Debug)]
pub enum Update {
    /// The demo API listens.
    DemoStarted {
        /// Its base URL.
        url: Url,
        /// Its routes and their limits, in words.
        description: String,
    },
    /// The demo API could not start; the message says why.
    DemoFailed(String),
    /// A burst started: its events arrive on `events`.
    BurstStarted {
        /// The burst's client events.
        events: mpsc::Receiver<Event>,
        /// Requests it will send.
        planned: usize,
    },
    /// The running burst's counters.
    Progress(BurstProgress),
    /// The shared store's state and counters (while a burst with shared budgets runs).
    Shared(SharedReport),
    /// Every limiter's state, sampled while a burst runs.
    Snapshots(Vec<Snapshot>),
    /// The burst ended (finished or cancelled).
    Finished {
        /// Its summary.
        summary: Box<Summary>,
        /// Every request's result.
        results: Vec<RequestResult>,
    },
    /// A command failed; the message says why.
    Error(String),
    /// The profiles in the store, what could not be read, and the secret store.
    Profiles {
        /// The profiles that loaded.
        profiles: Vec<Profile>,
        /// One message per file that did not.
        problems: Vec<String>,
        /// The secret store.
        secrets: Box<SecretStore>,
    },
    /// Something finished that the user should hear about.
    Info(String),
    /// A profile was saved (any error about saving it is over).
    Saved {
        /// The profile as written.
        profile: Box<Profile>,
        /// Where, in words.
        message: String,
    },
    /// A profile could not be saved; it keeps its unsaved marker.
    SaveFailed {
        /// The profile's name.
        name: String,
        /// Why, in words.
        error: String,
    },
    /// A profile was imported from a file.
    Imported(Box<Profile>),
    /// What exporting the profile `name` writes, read off the UI thread.
    ExportText {
        /// The profile's name.
        name: String,
        /// The TOML, comments of its saved file kept.
        text: String,
    },
    /// The Simulator tab's two results.
    Simulated(Result<Box<[SideResult; 2]>, String>),
    /// The Simulator tab's sweep.
    Tuned(Result<Box<TuneReport>, String>),
    /// The Simulator tab's replay.
    Replayed(Result<Box<ReplayResult>, String>),
    /// The recording file chosen (to replay).
    RecordingPicked(std::path::PathBuf),
    /// What a probe found.
    Probed(Box<Result<ProbeReport, String>>),
    /// The proxy listens at `url`; `routes` are (caller URL, upstream) pairs; its traffic
    /// arrives on `events`.
    ProxyStarted {
        /// Where callers send requests.
        url: Url,
        /// (caller URL, upstream) pairs.
        routes: Vec<(String, String)>,
        /// The proxy's client events.
        events: mpsc::Receiver<Event>,
    },
    /// The proxy stopped; the message says how it went.
    ProxyStopped(String),
    /// The proxy could not start or stopped on an error.
    ProxyFailed(String),
    /// A body file asked for by [`Command::ReadBodyFile`]: its text, or why it was not read.
    BodyFile {
        /// The file, as asked for.
        path: PathBuf,
        /// Its text, or why not in words (missing, not a file, not UTF-8, over 16 MiB).
        read: Result<String, String>,
    },
}

/// The UI's handle on the background.
#[derive(Debug)]
pub struct Backend {
    commands: mpsc::UnboundedSender<Command>,
    updates: std_mpsc::Receiver<Update>,
    _thread: std::thread::JoinHandle<()>,
}

impl Backend {
    /// Starts the runtime thread. `repaint` is called (throttled) whenever the UI has news.
    pub fn start(repaint: impl Fn() + Send + Sync + 'static, config_dir: Option<PathBuf>) -> std::io::Result<Self> {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
        let (commands, command_rx) = mpsc::unbounded_channel();
        let (update_tx, updates) = std_mpsc::channel();
        let repaint: Arc<dyn Fn() + Send + Sync> = Arc::new(repaint);
        let thread = std::thread::Builder::new()
            .name("ratescope-backend".into())
            .spawn(move || runtime.block_on(serve(command_rx, update_tx, repaint, Locations { config_dir })))?;
        Ok(Self { commands, updates, _thread: thread })
    }

    /// Sends a command; never blocks. A closed backend is reported by the next `drain`.
    pub fn send(&self, command: Command) {
        let _ = self.commands.send(command);
    }

    /// Every update that arrived since the last call.
    pub fn drain(&self) -> Vec<Update> {
        let mut updates = Vec::new();
        loop {
            match self.updates.try_recv() {
                Ok(update) => updates.push(update),
                Err(std_mpsc::TryRecvError::Empty) => break,
                Err(std_mpsc::TryRecvError::Disconnected) => {
                    updates.push(Update::Error("the background stopped; restart ratescope".into()));
                    break;
                }
            }
        }
        updates
    }
}

struct Running {
    burst: Burst,
    registry: Arc<Registry>,
}

/// Where profiles and secrets live: the platform's config directory unless told otherwise.
#[derive(Debug, Clone)]
struct Locations {
    config_dir: Option<PathBuf>,
}

impl Locations {
    fn store(&self) -> Result<ProfileStore, String> {
        match &self.config_dir {
            Some(dir) => Ok(ProfileStore::at(dir.join("profiles"))),
            None => ProfileStore::default_location().map_err(|err| err.to_string()),
        }
    }

    fn secrets(&self) -> Result<SecretStore, String> {
        let opened = match &self.config_dir {
            Some(dir) => SecretStore::open(&dir.join("secrets.toml")),
            None => SecretStore::open_default(),
        };
        opened.map_err(|err| err.to_string())
    }
}

/// The background's state: what runs, and how to tell the UI. Every command is handled at
/// once; anything that waits on a person or on a drain (file dialogs, the end of a burst,
/// stopping the proxy) runs in a task of its own, so sampling and Cancel never stall.
struct Service {
    updates: std_mpsc::Sender<Update>,
    repaint: Arc<dyn Fn() + Send + Sync>,
    locations: Locations,
    demo: Option<MockServer>,
    running: Option<Running>,
    proxy: Option<(ProxyServer, Arc<Registry>)>,
}

async fn serve(
    mut commands: mpsc::UnboundedReceiver<Command>,
    updates: std_mpsc::Sender<Update>,
    repaint: Arc<dyn Fn() + Send + Sync>,
    locations: Locations,
) {
    let mut service = Service { updates, repaint, locations, demo: None, running: None, proxy: None };
    let mut ticker = tokio::time::interval(SAMPLE_EVERY);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            command = commands.recv() => match command {
                Some(command) => service.handle(command).await,
                None => break,
            },
            _ = ticker.tick(), if service.running.is_some() || service.proxy.is_some() => service.sample(),
        }
    }
    service.stop().await;
}

impl Service {
    fn send(&self, update: Update) {
        let _ = self.updates.send(update);
        (self.repaint)();
    }

    /// Runs `work` in a task of its own and sends its update, if any, when it is done.
    fn spawn_update(&self, work: impl Future<Output = Option<Update>> + Send + 'static) {
        let (updates, repaint) = (self.updates.clone(), Arc::clone(&self.repaint));
        tokio::spawn(async move {
            if let Some(update) = work.await {
                let _ = updates.send(update);
                repaint();
            }
        });
    }

    async fn handle(&mut self, command: Command) {
        match command {
            Command::StartDemo { port } => self.start_demo(port).await,
            Command::Fire(request) => self.fire(*request),
            Command::Cancel => {
                if let Some(current) = &self.running {
                    current.burst.cancel();
                }
            }
            Command::SetLimits { key, config } => {
                if let Some(current) = &self.running
                    && let Err(err) = current.burst.client().set_limits(key, config)
                {
                    self.send(Update::Error(format!("limits not applied: {err}")));
                }
            }
            Command::LoadProfiles => self.send(load_profiles(&self.locations)),
            Command::Save { profile, secrets } => self.send(save(&self.locations, &profile, &secrets)),
            Command::WriteFile { path, contents, what } => self.send(write_file(&path, &contents, &what)),
            Command::Delete { name } => self.send(delete(&self.locations, &name)),
            Command::ExportText { profile } => {
                let text =
                    self.locations.store().and_then(|store| store.text_for(&profile).map_err(|err| err.to_string()));
                self.send(match text {
                    Ok(text) => Update::ExportText { name: profile.name.clone(), text },
                    Err(err) => Update::Error(format!("not exported: {err}")),
                });
            }
            Command::Import | Command::Export { .. } | Command::SaveFile { .. } | Command::PickRecording => {
                self.ask_for_file(command)
            }
            Command::Replay(request) => self.spawn_update(async move {
                let done = tokio::task::spawn_blocking(move || run_replay(*request).map(Box::new)).await;
                Some(Update::Replayed(done.unwrap_or_else(|err| Err(err.to_string()))))
            }),
            Command::Simulate(request) => self.spawn_update(async move {
                let done = tokio::task::spawn_blocking(move || run_both(*request)).await;
                Some(Update::Simulated(done.unwrap_or_else(|err| Err(err.to_string()))))
            }),
            Command::Tune(request) => self.spawn_update(async move {
                let done = tokio::task::spawn_blocking(move || {
                    tune(&request.server, &request.spec, &request.options).map(Box::new).map_err(|err| err.to_string())
                })
                .await;
                Some(Update::Tuned(done.unwrap_or_else(|err| Err(err.to_string()))))
            }),
            Command::Probe { url, max_requests } => self.spawn_update(async move {
                let options = ProbeOptions { max_requests, ..ProbeOptions::default() };
                let found = probe(LimitedClient::builder(), &url, &options).await.map_err(|err| err.to_string());
                Some(Update::Probed(Box::new(found)))
            }),
            Command::StartProxy(config) => self.start_proxy(*config).await,
            Command::StopProxy => self.stop_proxy(),
            // A disk (or a network share) may be slow: the read waits on a blocking thread.
            Command::ReadBodyFile { path } => self.spawn_update(async move {
                let asked = path.clone();
                let read = tokio::task::spawn_blocking(move || read_body_file(&asked).map_err(|err| err.to_string()));
                let read = read.await.unwrap_or_else(|err| Err(format!("the body file was not read: {err}")));
                Some(Update::BodyFile { path, read })
            }),
        }
    }

    async fn start_demo(&mut self, port: u16) {
        if let Some(server) = &self.demo {
            self.send(Update::DemoStarted { url: server.url(), description: describe(server) });
            return;
        }
        match start_demo(port).await {
            Ok(server) => {
                self.send(Update::DemoStarted { url: server.url(), description: describe(&server) });
                self.demo = Some(server);
            }
            Err(err) => self.send(Update::DemoFailed(err)),
        }
    }

    /// Starts a burst; one still running is cancelled and left to wind down in the background.
    fn fire(&mut self, request: FireRequest) {
        if let Some(previous) = self.running.take() {
            previous.burst.cancel();
            tokio::spawn(async move { drop(previous.burst.finish().await) });
        }
        match fire(request) {
            Ok((started, events, planned)) => {
                self.send(Update::BurstStarted { events, planned });
                self.running = Some(started);
            }
            Err(err) => self.send(Update::Error(err)),
        }
    }

    /// Import, export and save-as: the desktop's file dialog, in a task of its own.
    fn ask_for_file(&self, command: Command) {
        let locations = self.locations.clone();
        self.spawn_update(async move {
            match command {
                Command::Import => {
                    let dialog =
                        rfd::AsyncFileDialog::new().set_title("Import a profile").add_filter("profile", &["toml"]);
                    dialog.pick_file().await.map(|file| import(&locations, file.path()))
                }
                Command::Export { profile } => {
                    let dialog = rfd::AsyncFileDialog::new()
                        .set_title("Export the profile (without secrets)")
                        .set_file_name(format!("{}.toml", profile.name));
                    dialog.save_file().await.map(|file| export(&locations, &profile, file.path()))
                }
                Command::PickRecording => {
                    let dialog = rfd::AsyncFileDialog::new()
                        .set_title("Replay a recording")
                        .add_filter("HAR, JSON lines or access log", &["har", "json", "jsonl", "ndjson", "log", "txt"])
                        .add_filter("any file", &["*"]);
                    Some(dialog.pick_file().await.map_or_else(
                        || {
                            Update::Info(
                                "no file chosen (or no file dialog here): type the recording's path instead".into(),
                            )
                        },
                        |file| Update::RecordingPicked(file.path().to_owned()),
                    ))
                }
                Command::SaveFile { title, default_name, contents } => {
                    let dialog = rfd::AsyncFileDialog::new().set_title(title).set_file_name(default_name);
                    let chosen = dialog.save_file().await;
                    Some(chosen.map_or_else(
                        || Update::Info("no file chosen (or no file dialog here): type a path instead".into()),
                        |file| write_atomically(file.path(), &contents),
                    ))
                }
                _ => None,
            }
        });
    }

    async fn start_proxy(&mut self, config: ProxyConfig) {
        if self.proxy.is_some() {
            self.send(Update::ProxyFailed("a proxy is already running: stop it first".into()));
            return;
        }
        match start_proxy(config).await {
            Ok((server, registry, update)) => {
                self.proxy = Some((server, registry));
                self.send(update);
            }
            Err(err) => self.send(Update::ProxyFailed(err)),
        }
    }

    /// Stops accepting at once; the drain of requests in flight runs in a task of its own.
    fn stop_proxy(&mut self) {
        let Some((server, _)) = self.proxy.take() else { return };
        self.spawn_update(async move {
            Some(match server.shutdown().await {
                Ok(drained) if drained.cut_off > 0 => Update::ProxyStopped(format!(
                    "proxy stopped; {} request(s) were cut off at the deadline",
                    drained.cut_off
                )),
                Ok(_) => Update::ProxyStopped("proxy stopped; every request in flight finished".into()),
                Err(err) => Update::ProxyStopped(format!("proxy stopped: {err}")),
            })
        });
    }

    /// Snapshots of the running burst's (or the proxy's) limiters, the burst's progress and
    /// shared-store state; a finished burst's summary is made in a task of its own.
    fn sample(&mut self) {
        let Some(current) = self.running.take() else {
            if let Some((_, registry)) = &self.proxy {
                let snapshots = registry.active().iter().map(|limiter| limiter.snapshot()).collect();
                self.send(Update::Snapshots(snapshots));
            }
            return;
        };
        let snapshots: Vec<Snapshot> = current.registry.active().iter().map(|limiter| limiter.snapshot()).collect();
        let _ = self.updates.send(Update::Snapshots(snapshots));
        let _ = self.updates.send(Update::Progress(current.burst.progress()));
        if let Some(shared) = current.burst.client().shared() {
            let _ = self.updates.send(Update::Shared(shared.report()));
        }
        if current.burst.is_finished() {
            self.spawn_update(async move {
                let (summary, results) = current.burst.finish().await;
                Some(Update::Finished { summary: Box::new(summary), results })
            });
        } else {
            (self.repaint)();
            self.running = Some(current);
        }
    }

    /// At the end: the proxy drains, the demo API stops.
    async fn stop(self) {
        if let Some((server, _)) = self.proxy {
            let _ = server.shutdown().await;
        }
        if let Some(server) = self.demo {
            let _ = server.shutdown().await;
        }
    }
}

/// Starts a proxy whose events go to the UI; the registry is kept for snapshots.
async fn start_proxy(mut config: ProxyConfig) -> Result<(ProxyServer, Arc<Registry>, Update), String> {
    let (sink, events) = EventSink::channel(EVENT_BUFFER);
    config.policy.events = sink;
    let registry = Arc::clone(&config.policy.registry);
    let server = ProxyServer::start(config).await.map_err(|err| err.to_string())?;
    let base = server.url();
    let routes = server
        .routes()
        .iter()
        .map(|route| (format!("{}{}/", base.as_str().trim_end_matches('/'), route.prefix), route.upstream.to_string()))
        .collect();
    let update = Update::ProxyStarted { url: base, routes, events };
    Ok((server, registry, update))
}

async fn start_demo(port: u16) -> Result<MockServer, String> {
    let config = MockConfig::demo().map_err(|err| err.to_string())?;
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    match MockServer::start(config.clone(), addr).await {
        Ok(server) => Ok(server),
        // The preferred port is taken (another ratescope?): any free port will do.
        Err(_) if port != 0 => {
            MockServer::start(config, SocketAddr::from((Ipv4Addr::LOCALHOST, 0))).await.map_err(|err| err.to_string())
        }
        Err(err) => Err(err.to_string()),
    }
}

fn describe(server: &MockServer) -> String {
    server.config().routes.iter().map(|route| route.prefix.clone()).collect::<Vec<_>>().join("  ")
}

fn fire(request: FireRequest) -> Result<(Running, mpsc::Receiver<Event>, usize), String> {
    let (sink, events) = EventSink::channel(EVENT_BUFFER);
    let mut builder = request.spec.savings(request.builder.events(sink));
    if let Some(shared) = &request.spec.shared {
        // Connects lazily: an unreachable Redis shows in the indicator, as the fail policy acts.
        builder = builder.share_budgets(shared).map_err(|err| err.to_string())?.0;
    }
    let client = builder.build().map_err(|err| err.to_string())?;
    let registry = Arc::clone(client.registry());
    let planned = request.spec.planned_requests();
    let burst = Burst::start(request.spec, client).map_err(|err| err.to_string())?;
    Ok((Running { burst, registry }, events, planned))
}

fn load_profiles(locations: &Locations) -> Update {
    let store = match locations.store() {
        Ok(store) => store,
        Err(err) => return Update::Error(err),
    };
    let mut problems = Vec::new();
    if let Err(err) = store.ensure_demo() {
        problems.push(format!("the demo profile could not be written: {err}"));
    }
    let mut profiles = Vec::new();
    match store.list() {
        Ok(entries) => {
            for entry in entries {
                match entry.and_then(|summary| store.load(&summary.name)) {
                    Ok(profile) => profiles.push(profile),
                    Err(err) => problems.push(err.to_string()),
                }
            }
        }
        Err(err) => problems.push(err.to_string()),
    }
    let secrets = locations.secrets().unwrap_or_else(|err| {
        problems.push(format!("secrets not loaded: {err}"));
        SecretStore::in_memory()
    });
    Update::Profiles { profiles, problems, secrets: Box::new(secrets) }
}

/// Writes the profile, then its secrets: the secret file as it is on disk, with this profile's
/// part taken from the app's copy (its hosts' secret headers only), so secrets follow their
/// host and other profiles' unsaved secrets stay unwritten until those profiles are saved.
fn save(locations: &Locations, profile: &Profile, secrets: &SecretStore) -> Update {
    let saved = locations.store().and_then(|store| store.save(profile).map_err(|err| err.to_string()));
    let failed = |error: String| Update::SaveFailed { name: profile.name.clone(), error };
    let write_secrets = || -> Result<(), String> {
        let mut stored = locations.secrets()?;
        if stored.adopt_profile(secrets, profile) {
            stored.save().map_err(|err| err.to_string())?;
        }
        Ok(())
    };
    match saved {
        Ok(path) => match write_secrets() {
            Ok(()) => Update::Saved {
                profile: Box::new(profile.clone()),
                message: format!("saved '{}' to {}", profile.name, path.display()),
            },
            Err(err) => failed(format!("'{}' saved, but the secrets were not: {err}", profile.name)),
        },
        Err(err) => failed(format!("'{}' not saved: {err}", profile.name)),
    }
}

/// Moves the profile's file aside and removes its secrets from the secret file (the app keeps
/// both in memory for Undo; saving the restored profile writes them again).
fn delete(locations: &Locations, name: &str) -> Update {
    match locations.store().and_then(|store| store.delete(name).map_err(|err| err.to_string())) {
        Ok(path) => {
            let forgotten = locations.secrets().and_then(|mut stored| {
                if stored.remove_profile(name) { stored.save().map_err(|err| err.to_string()) } else { Ok(()) }
            });
            match forgotten {
                Ok(()) => Update::Info(format!("'{name}' moved aside to {}", path.display())),
                Err(err) => Update::Error(format!("'{name}' moved aside, but its secrets were not removed: {err}")),
            }
        }
        Err(err) => Update::Error(format!("not deleted: {err}")),
    }
}

fn import(locations: &Locations, path: &std::path::Path) -> Update {
    match locations.store().and_then(|store| store.import(path, false).map_err(|err| err.to_string())) {
        Ok(profile) => Update::Imported(Box::new(profile)),
        Err(err) => Update::Error(format!("not imported: {err}")),
    }
}

/// Writes the profile as its saved file would say it: the file's comments kept
/// ([`ProfileStore::text_for`]).
fn export(locations: &Locations, profile: &Profile, path: &std::path::Path) -> Update {
    let text = match locations.store() {
        Ok(store) => store.text_for(profile),
        Err(_) => profile.to_toml(),
    };
    match text {
        Ok(text) => match write_atomically(path, text.as_bytes()) {
            Update::Info(_) => {
                Update::Info(format!("exported '{}' to {} (no secret values)", profile.name, path.display()))
            }
            other => other,
        },
        Err(err) => Update::Error(format!("not exported: {err}")),
    }
}

/// Writes `what` to a typed path and says where it went, as an absolute path.
fn write_file(path: &std::path::Path, contents: &[u8], what: &str) -> Update {
    let path = std::path::absolute(path).unwrap_or_else(|_| path.to_owned());
    match crate::files::write_bytes(&path, contents, crate::files::WriteOptions::default()) {
        Ok(_) => Update::Info(format!("saved {what} to {}", path.display())),
        Err(err) => Update::Error(format!("{what} not saved: {err}")),
    }
}

/// Writes a whole file or nothing ([`crate::files::write_bytes`]).
fn write_atomically(path: &std::path::Path, contents: &[u8]) -> Update {
    match crate::files::write_bytes(path, contents, crate::files::WriteOptions::default()) {
        Ok(_) => Update::Info(format!("wrote {}", path.display())),
        Err(err) => Update::Error(format!("could not write: {err}")),
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;
    use std::time::Instant;

    use super::*;
    use crate::proxy::Route;

    /// A backend whose every repaint (sent with each update) wakes `wait_for`.
    fn backend(config_dir: &std::path::Path) -> (Backend, std_mpsc::Receiver<()>) {
        let (repainted, repaints) = std_mpsc::channel();
        let backend = Backend::start(
            move || {
                let _ = repainted.send(());
            },
            Some(config_dir.to_owned()),
        )
        .unwrap();
        (backend, repaints)
    }

    /// Drains `backend` at each repaint until `wanted` matches an update (returning every
    /// update seen), or gives up after `limit` of real time (a hang, not a measurement).
    fn wait_for(
        backend: &Backend,
        repaints: &std_mpsc::Receiver<()>,
        limit: Duration,
        wanted: impl Fn(&Update) -> bool,
    ) -> Vec<Update> {
        let deadline = Instant::now() + limit;
        let mut seen = Vec::new();
        loop {
            for update in backend.drain() {
                let found = wanted(&update);
                seen.push(update);
                if found {
                    return seen;
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || repaints.recv_timeout(left).is_err() {
                panic!("no such update within {limit:?}; saw {} others", seen.len());
            }
        }
    }

    /// The app's Save and Export go through the store: a saved file keeps its comments and
    /// layout (#34 item 3), and an export says what the saved file would.
    #[test]
    fn saving_and_exporting_in_the_app_keep_the_files_comments() {
        let config_dir = tempfile::tempdir().unwrap();
        let locations = Locations { config_dir: Some(config_dir.path().to_owned()) };
        let store = locations.store().unwrap();
        assert!(store.ensure_demo().unwrap());
        let mut demo = store.load("demo").unwrap();
        demo.hosts[0].adaptive = false;
        demo.hosts[0].budgets[1].limit = Some(90);

        let update = save(&locations, &demo, &SecretStore::in_memory());
        assert!(matches!(update, Update::Saved { .. }), "{update:?}");
        let text = std::fs::read_to_string(store.path_of("demo").unwrap()).unwrap();
        assert_eq!(Profile::from_toml(&text).unwrap(), demo);
        let comments = |text: &str| -> Vec<String> {
            text.lines().filter(|line| line.starts_with('#')).map(str::to_owned).collect()
        };
        let mut expected = comments(crate::profile::DEMO_TOML);
        // `adaptive = true` is gone, and the comment that explained it with it.
        expected.retain(|line| !line.contains("Also follow the budgets the server publishes"));
        assert_eq!(comments(&text), expected, "{text}");
        assert!(text.contains("limit = 90, window = \"1m\""), "{text}");

        demo.hosts[0].budgets[1].limit = Some(80);
        let exported = config_dir.path().join("exported.toml");
        let update = export(&locations, &demo, &exported);
        assert!(matches!(update, Update::Info(_)), "{update:?}");
        let copy = std::fs::read_to_string(&exported).unwrap();
        assert_eq!(copy, text.replacen("limit = 90", "limit = 80", 1), "the edited profile, comments kept");
    }

    /// Stopping a proxy whose request hangs upstream drains for the whole deadline; meanwhile
    /// the backend keeps answering (it used to await the drain inside its loop, so loading the
    /// profiles waited 30 s behind it).
    #[test]
    fn a_draining_proxy_does_not_hold_up_other_commands() {
        let upstream = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let upstream_url = format!("http://{}", upstream.local_addr().unwrap());
        let held = std::thread::spawn(move || upstream.accept().map(|(stream, _)| stream));
        let config_dir = tempfile::tempdir().unwrap();
        let (backend, repaints) = backend(config_dir.path());
        let mut config = ProxyConfig::new(vec![Route::new("/api", &upstream_url).unwrap()]);
        config.listen = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
        config.drain_deadline = Duration::from_secs(30);
        backend.send(Command::StartProxy(Box::new(config)));
        let seen = wait_for(&backend, &repaints, Duration::from_secs(10), |update| {
            matches!(update, Update::ProxyStarted { .. })
        });
        let Some(Update::ProxyStarted { url, .. }) = seen.last() else { unreachable!() };
        let address = format!("{}:{}", url.host_str().unwrap(), url.port().unwrap());
        let mut caller = std::net::TcpStream::connect(address).unwrap();
        caller.write_all(b"GET /api/hang HTTP/1.1\r\nhost: x\r\n\r\n").unwrap();
        let _upstream_side = held.join().unwrap().unwrap();

        backend.send(Command::StopProxy);
        backend.send(Command::LoadProfiles);
        let seen =
            wait_for(&backend, &repaints, Duration::from_secs(10), |update| matches!(update, Update::Profiles { .. }));
        assert!(
            !seen.iter().any(|update| matches!(update, Update::ProxyStopped(_))),
            "the profiles came only after the drain"
        );
    }
}
