//! The burst composer: endpoints, method, count, arrival pattern, priority mix, limiter on/off,
//! Fire and Cancel; and turning it into what the background runs.

use std::path::{Path, PathBuf};

use http::{HeaderMap, Method};
use url::Url;

use super::backend::FireRequest;
use super::batching::{BatchDraft, batch_ui};
use super::editor::Editor;
use super::request::{CurlPanel, RequestDraft, request_ui};
use super::shared::{SharedDraft, shared_ui};
use crate::engine::{Rate, parse_duration};
use crate::http::LimitedClient;
use crate::profile::EndpointEntry;
use crate::run::{ArrivalPattern, BurstSpec, Endpoint, PriorityMix};
use crate::store::SharedReport;

/// How requests arrive, as the composer edits it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArrivalChoice {
    /// Every request at once.
    AllAtOnce,
    /// At the composer's rate.
    FixedRate,
    /// A ramp from one rate to another.
    Ramp,
    /// At the composer's rate for its duration.
    ForDuration,
}

/// One endpoint row: its path, weight, and the headers and body it sends.
#[derive(Debug, Clone, PartialEq)]
pub struct EndpointDraft {
    /// The path (and query) under the host's base URL.
    pub path: String,
    /// Its share of the burst.
    pub weight: u32,
    /// Its method, headers, body and cost rules as typed.
    pub request: RequestDraft,
    /// Its request editor is shown under the row.
    pub open: bool,
    /// Its batching, when the profile gives it a batch template.
    pub batch: Option<BatchDraft>,
}

impl EndpointDraft {
    /// A path with weight 1 and no headers or body.
    pub fn new(path: &str) -> Self {
        Self { path: path.to_owned(), weight: 1, request: RequestDraft::default(), open: false, batch: None }
    }

    /// The endpoint a profile (or an imported curl command) describes.
    pub fn from_entry(entry: &EndpointEntry) -> Self {
        Self {
            weight: entry.weight.unwrap_or(1),
            request: RequestDraft::from_entry(entry),
            batch: entry.batch.as_ref().map(BatchDraft::from_entry),
            ..Self::new(&entry.path)
        }
    }
}

/// What the composer shows.
#[derive(Debug, Clone)]
pub struct Composer {
    /// The endpoints a burst spreads over.
    pub endpoints: Vec<EndpointDraft>,
    /// The burst's method (an endpoint may name its own).
    pub method: Method,
    /// Requests to send.
    pub count: usize,
    /// How they arrive.
    pub arrival: ArrivalChoice,
    /// The arrival rate as typed, such as `10/1s`.
    pub rate: String,
    /// How long requests arrive, as typed (for a rate over a duration).
    pub duration: String,
    /// A ramp's start, in requests per second.
    pub ramp_from: f64,
    /// A ramp's end, in requests per second.
    pub ramp_to: f64,
    /// A ramp's length, as typed.
    pub ramp_over: String,
    /// Share of requests in the high lane.
    pub high: f64,
    /// Share of requests in the low lane.
    pub low: f64,
    /// Pace by the limits (off: the burst goes raw).
    pub limiter_on: bool,
    /// Answer from a response cache where HTTP caching allows.
    pub cache_on: bool,
    /// Identical GETs in flight share one exchange.
    pub coalesce_on: bool,
    /// Share the budgets through Redis.
    pub shared: SharedDraft,
    /// The "Import curl" window.
    pub curl: CurlPanel,
}

impl Default for Composer {
    fn default() -> Self {
        Self {
            endpoints: vec![EndpointDraft::new("/items")],
            method: Method::GET,
            count: 50,
            arrival: ArrivalChoice::AllAtOnce,
            rate: "20/1s".into(),
            duration: "10s".into(),
            ramp_from: 1.0,
            ramp_to: 20.0,
            ramp_over: "10s".into(),
            high: 0.0,
            low: 0.0,
            limiter_on: true,
            cache_on: false,
            coalesce_on: false,
            shared: SharedDraft::default(),
            curl: CurlPanel::default(),
        }
    }
}

/// Buttons pressed this frame.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Pressed {
    pub fire: bool,
    pub cancel: bool,
    pub discover: bool,
    pub save_png: bool,
    /// "Keep in profile": the endpoints should become the host's `[[hosts.endpoints]]`.
    pub keep_endpoints: bool,
}

fn endpoint_url(base: &str, path: &str) -> Result<Url, String> {
    let path = path.trim();
    let joined = format!("{}/{}", base.trim().trim_end_matches('/'), path.trim_start_matches('/'));
    let url = Url::parse(&joined).map_err(|err| format!("'{joined}' is not a URL: {err}"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!("'{joined}' is not http or https"));
    }
    Ok(url)
}

impl Composer {
    fn arrival(&self) -> Result<ArrivalPattern, String> {
        let rate = || self.rate.parse::<Rate>().map_err(|err| format!("arrival rate: {err}"));
        let duration = |text: &str, what: &str| parse_duration(text).map_err(|err| format!("{what}: {err}"));
        Ok(match self.arrival {
            ArrivalChoice::AllAtOnce => ArrivalPattern::AllAtOnce,
            ArrivalChoice::FixedRate => ArrivalPattern::FixedRate(rate()?),
            ArrivalChoice::ForDuration => {
                ArrivalPattern::ForDuration { rate: rate()?, duration: duration(&self.duration, "duration")? }
            }
            ArrivalChoice::Ramp => ArrivalPattern::Ramp {
                from: self.ramp_from,
                to: self.ramp_to,
                over: duration(&self.ramp_over, "ramp length")?,
            },
        })
    }

    /// What a burst was fired with, in one line for the run history: method, paths, count,
    /// arrival and limits.
    pub fn describe(&self, spec: &BurstSpec) -> String {
        let paths: Vec<&str> = spec.endpoints.iter().map(|endpoint| endpoint.url.path()).collect();
        let arrival = match self.arrival {
            ArrivalChoice::AllAtOnce => "all at once".to_owned(),
            ArrivalChoice::FixedRate => format!("at {}", self.rate),
            ArrivalChoice::Ramp => format!("ramp {}→{}/s over {}", self.ramp_from, self.ramp_to, self.ramp_over),
            ArrivalChoice::ForDuration => format!("at {} for {}", self.rate, self.duration),
        };
        let limits = spec.limits.as_ref().map_or_else(|| "limiter off".to_owned(), |limits| limits.describe());
        format!("{} {} ×{} · {arrival} · {limits}", spec.method, paths.join(", "), spec.requests)
    }

    /// Everything the background needs to fire at the editor's selected host.
    pub fn fire_request(&self, editor: &Editor) -> Result<FireRequest, String> {
        let profile = editor.profile().ok_or("select or create a profile first")?;
        let host = editor.selected_host().ok_or("select a host first (or add one with + host)")?;
        let endpoints = self
            .endpoints
            .iter()
            .map(|endpoint| {
                let own = endpoint.request.own_method.clone();
                let method = own.clone().unwrap_or_else(|| self.method.clone());
                let request = RequestDraft { method, ..endpoint.request.clone() };
                let parts = request.parts().map_err(|err| format!("{}: {err}", endpoint.path))?;
                let mut target = Endpoint::new(endpoint_url(&host.base_url, &endpoint.path)?, endpoint.weight);
                target.method = own;
                target.headers = parts.headers;
                target.body = parts.body;
                target.cost_rules = parts.cost_rules;
                if let Some(batch) = &endpoint.batch {
                    target.batch = batch.plan().map_err(|err| format!("{}: {err}", endpoint.path))?;
                }
                Ok(target)
            })
            .collect::<Result<Vec<_>, String>>()?;
        let config = host.limiter_config().map_err(|err| err.to_string())?;
        let retry = host.retry_policy().map_err(|err| err.to_string())?;
        // Paced: the profile's own client (every host's limits, retry, headers, secrets, adaptive).
        // Raw: the same host's retry policy and headers, but no limiter.
        let builder = if self.limiter_on {
            profile.client_builder(&editor.secrets).map_err(|err| err.to_string())?
        } else {
            let mut headers: HeaderMap = host.default_headers().map_err(|err| err.to_string())?;
            headers.extend(editor.secrets.headers_for(&profile.name, host).map_err(|err| err.to_string())?);
            let key = host.key().map_err(|err| err.to_string())?;
            LimitedClient::builder().retry(retry.clone()).host_headers(&key.host, headers)
        };
        let spec = BurstSpec {
            endpoints,
            method: self.method.clone(),
            headers: HeaderMap::new(),
            requests: self.count,
            arrival: self.arrival()?,
            priorities: PriorityMix { high: self.high, normal: (1.0 - self.high - self.low).max(0.0), low: self.low },
            limits: self.limiter_on.then_some(config),
            raw_concurrency: None,
            retry,
            adaptive: host.adaptive && self.limiter_on,
            shared: if self.limiter_on { self.shared.settings(profile)? } else { None },
            timeout: None,
            cache: self.cache_on,
            coalesce: self.coalesce_on,
        };
        spec.validate().map_err(|err| err.to_string())?;
        Ok(FireRequest { spec, builder })
    }

    /// The composer row. Returns the buttons pressed.
    pub fn composer_ui(
        &mut self,
        ui: &mut egui::Ui,
        editor: &Editor,
        running: bool,
        shared: Option<&SharedReport>,
    ) -> Pressed {
        let mut pressed = Pressed::default();
        let base = editor.selected_host().map(|host| host.base_url.clone()).unwrap_or_default();
        let saved: Vec<EndpointEntry> = editor.selected_host().map(|host| host.endpoints.clone()).unwrap_or_default();
        fire_target_ui(ui, editor, self.limiter_on);
        ui.horizontal_wrapped(|ui| {
            // Fire and Cancel come first, so wrapping never moves them.
            let fire = ui.add_enabled(!running, egui::Button::new(egui::RichText::new("Fire").strong()));
            pressed.fire = fire.on_hover_text("Ctrl+Enter").clicked();
            pressed.cancel = ui.add_enabled(running, egui::Button::new("Cancel")).on_hover_text("Esc").clicked();
            ui.separator();
            self.method_ui(ui);
            self.endpoints_ui(ui, &base);
            ui.separator();
            ui.label("n");
            ui.add(egui::DragValue::new(&mut self.count).range(1..=1_000_000).speed(5.0))
                .accessible_name("request count");
            ui.separator();
            self.arrival_ui(ui);
            ui.separator();
            lane_share_ui(ui, "high", &mut self.high).on_hover_text("share of the high lane");
            lane_share_ui(ui, "low", &mut self.low).on_hover_text("share of the low lane");
            if self.high + self.low > 1.0 {
                self.low = 1.0 - self.high;
            }
            ui.separator();
            ui.checkbox(&mut self.limiter_on, "limiter").on_hover_text("off: send raw, to compare paced with unpaced");
            ui.checkbox(&mut self.cache_on, "cache")
                .on_hover_text("answer from a response cache where the server's caching headers allow");
            ui.checkbox(&mut self.coalesce_on, "coalesce")
                .on_hover_text("identical GETs in flight at once share one request");
            ui.separator();
            let discover =
                ui.button("Discover…").on_hover_text("Probe the first endpoint for its limits and suggest settings");
            pressed.discover = discover.clicked();
            pressed.save_png = ui.button("Charts PNG…").on_hover_text("Save the charts as a PNG image").clicked();
            if ui
                .button("Import curl…")
                .on_hover_text("Paste a curl command: its host and endpoint join the profile")
                .clicked()
            {
                self.curl.open = true;
            }
            if !saved.is_empty() {
                self.profile_endpoints_ui(ui, &saved);
            }
            let keep = ui
                .button("Keep in profile")
                .on_hover_text("Save these endpoints (method, headers, body) under the host");
            pressed.keep_endpoints = keep.clicked();
        });
        self.requests_ui(ui);
        if self.limiter_on {
            let profile_name = editor.profile().map(|profile| profile.name.clone()).unwrap_or_default();
            shared_ui(ui, &mut self.shared, shared, &profile_name);
        }
        if let Err(err) = self.arrival() {
            ui.label(egui::RichText::new(err).color(super::palette::status_colors(ui.visuals()).error).small());
        }
        pressed
    }

    fn method_ui(&mut self, ui: &mut egui::Ui) {
        let method =
            egui::ComboBox::from_id_salt("method").width(70.0).selected_text(self.method.as_str()).show_ui(ui, |ui| {
                for method in [Method::GET, Method::HEAD, Method::POST, Method::PUT, Method::PATCH, Method::DELETE] {
                    let label = method.to_string();
                    ui.selectable_value(&mut self.method, method, label);
                }
            });
        let _ = method.response.accessible_name("method");
    }

    /// The host's saved endpoints; picking one makes it the burst's only endpoint.
    fn profile_endpoints_ui(&mut self, ui: &mut egui::Ui, saved: &[EndpointEntry]) {
        let mut picked = None;
        let menu = egui::ComboBox::from_id_salt("profile endpoints").selected_text("endpoints of this host").show_ui(
            ui,
            |ui| {
                for entry in saved {
                    if ui.selectable_label(false, &entry.name).clicked() {
                        picked = Some(entry);
                    }
                }
            },
        );
        let _ = menu.response.accessible_name("profile endpoints");
        if let Some(entry) = picked {
            self.endpoints = vec![EndpointDraft::from_entry(entry)];
        }
    }

    /// The body files Load body asked for since the last call, for the backend to read; each
    /// endpoint that asked then waits for its answer ([`body_file_read`](Self::body_file_read)).
    pub fn wanted_body_files(&mut self) -> Vec<PathBuf> {
        self.endpoints.iter_mut().filter_map(|endpoint| endpoint.request.take_wanted()).collect()
    }

    /// The backend read `path`: every endpoint waiting for it takes the body, or the error.
    pub fn body_file_read(&mut self, path: &Path, read: &Result<String, String>) {
        for endpoint in &mut self.endpoints {
            endpoint.request.body_read(path, read);
        }
    }

    /// The endpoints as profile entries (named `METHOD /path`), checked as they would fire.
    pub fn endpoint_entries(&self) -> Result<Vec<EndpointEntry>, String> {
        self.endpoints
            .iter()
            .map(|endpoint| {
                let method = endpoint.request.own_method.clone().unwrap_or_else(|| self.method.clone());
                let draft = RequestDraft { method: method.clone(), ..endpoint.request.clone() };
                draft.parts().map_err(|err| format!("{}: {err}", endpoint.path))?;
                let headers = draft
                    .headers
                    .lines()
                    .filter_map(|line| line.split_once(':'))
                    .map(|(name, value)| (name.trim().to_owned(), value.trim().to_owned()))
                    .collect();
                Ok(EndpointEntry {
                    name: format!("{method} {}", endpoint.path.trim()),
                    method: (method != Method::GET).then(|| method.to_string()),
                    headers,
                    body: (!draft.body.is_empty()).then(|| draft.body.clone()),
                    weight: (endpoint.weight != 1).then_some(endpoint.weight),
                    costs: draft.cost_lines(),
                    batch: endpoint.batch.as_ref().map(BatchDraft::entry),
                    ..EndpointEntry::get(endpoint.path.trim())
                })
            })
            .collect()
    }

    /// The request editors of the endpoints whose … is pressed: headers and body.
    fn requests_ui(&mut self, ui: &mut egui::Ui) {
        let method = self.method.clone();
        for (index, endpoint) in self.endpoints.iter_mut().enumerate().filter(|(_, endpoint)| endpoint.open) {
            ui.push_id(("request", index), |ui| {
                ui.group(|ui| {
                    ui.horizontal(|ui| {
                        let shown = endpoint.request.own_method.as_ref().unwrap_or(&method);
                        ui.strong(format!("{shown} {}", endpoint.path));
                        if ui.small_button("close").clicked() {
                            endpoint.open = false;
                        }
                    });
                    request_ui(ui, &mut endpoint.request, &method);
                });
            });
        }
    }

    /// The endpoints' paths (and weights, when there are several), with add and remove.
    fn endpoints_ui(&mut self, ui: &mut egui::Ui, base: &str) {
        let mut remove = None;
        let many = self.endpoints.len() > 1;
        for (index, endpoint) in self.endpoints.iter_mut().enumerate() {
            ui.push_id(("endpoint", index), |ui| {
                ui.add(egui::TextEdit::singleline(&mut endpoint.path).desired_width(110.0).hint_text("/path"))
                    .accessible_name("endpoint path")
                    .on_hover_text(format!("{}{}", base.trim_end_matches('/'), endpoint.path));
                let summary = endpoint.request.summary();
                let toggle =
                    ui.selectable_label(endpoint.open, "…").on_hover_text(format!("headers and body ({summary})"));
                if toggle.accessible_name(format!("request of {}", endpoint.path)).clicked() {
                    endpoint.open = !endpoint.open;
                }
                if let Some(batch) = &mut endpoint.batch
                    && let Some(action) = batch_ui(ui, batch)
                {
                    batch.apply(action);
                }
                if many {
                    ui.add(egui::DragValue::new(&mut endpoint.weight).range(0..=100).prefix("×"))
                        .accessible_name("endpoint weight")
                        .on_hover_text("weight: share of requests to this endpoint");
                    if ui.small_button("x").clicked() {
                        remove = Some(index);
                    }
                }
            });
        }
        if let Some(index) = remove {
            self.endpoints.remove(index);
        }
        if ui.small_button("+").on_hover_text("add an endpoint").clicked() {
            self.endpoints.push(EndpointDraft::new("/search"));
        }
    }

    /// How requests arrive: all at once, at a fixed rate (for a count or a duration), or a ramp.
    fn arrival_ui(&mut self, ui: &mut egui::Ui) {
        let arrival = egui::ComboBox::from_id_salt("arrival")
            .selected_text(match self.arrival {
                ArrivalChoice::AllAtOnce => "all at once",
                ArrivalChoice::FixedRate => "fixed rate",
                ArrivalChoice::Ramp => "ramp",
                ArrivalChoice::ForDuration => "for a duration",
            })
            .show_ui(ui, |ui| {
                ui.selectable_value(&mut self.arrival, ArrivalChoice::AllAtOnce, "all at once");
                ui.selectable_value(&mut self.arrival, ArrivalChoice::FixedRate, "fixed rate");
                ui.selectable_value(&mut self.arrival, ArrivalChoice::Ramp, "ramp");
                ui.selectable_value(&mut self.arrival, ArrivalChoice::ForDuration, "for a duration");
            });
        let _ = arrival.response.accessible_name("arrival pattern");
        match self.arrival {
            ArrivalChoice::AllAtOnce => {}
            ArrivalChoice::FixedRate | ArrivalChoice::ForDuration => {
                ui.add(egui::TextEdit::singleline(&mut self.rate).desired_width(60.0))
                    .accessible_name("arrival rate")
                    .on_hover_text("e.g. 20/1s");
                if self.arrival == ArrivalChoice::ForDuration {
                    ui.label("for");
                    ui.add(egui::TextEdit::singleline(&mut self.duration).desired_width(50.0))
                        .accessible_name("arrival duration");
                }
            }
            ArrivalChoice::Ramp => {
                ui.add(egui::DragValue::new(&mut self.ramp_from).range(0.0..=10_000.0).suffix("/s"))
                    .accessible_name("ramp start rate");
                ui.label("→");
                ui.add(egui::DragValue::new(&mut self.ramp_to).range(0.1..=10_000.0).suffix("/s"))
                    .accessible_name("ramp end rate");
                ui.label("over");
                ui.add(egui::TextEdit::singleline(&mut self.ramp_over).desired_width(45.0))
                    .accessible_name("ramp length");
            }
        }
    }
}

/// A labelled share slider that wraps to the next row as one piece. (A bare `Slider` lays
/// itself out in a nested row that the wrapping toolbar cannot move, so at the end of a
/// narrow row it was drawn past the window's edge, apart from its label.)
fn lane_share_ui(ui: &mut egui::Ui, label: &str, share: &mut f64) -> egui::Response {
    let font = egui::TextStyle::Body.resolve(ui.style());
    let label_width = ui.painter().layout_no_wrap(label.to_owned(), font, egui::Color32::PLACEHOLDER).size().x;
    let spacing = ui.spacing();
    let size = egui::vec2(label_width + spacing.item_spacing.x + spacing.slider_width, spacing.interact_size.y);
    ui.allocate_ui_with_layout(size, egui::Layout::left_to_right(egui::Align::Center), |ui| {
        ui.label(label);
        ui.add(egui::Slider::new(share, 0.0..=1.0).show_value(false))
    })
    .inner
}

/// Where Fire sends the burst, one line above the buttons: the host's name and base URL, and
/// whether its limits pace it.
fn fire_target_ui(ui: &mut egui::Ui, editor: &Editor, limiter_on: bool) {
    let text = match (editor.profile(), editor.selected_host()) {
        (_, Some(host)) => {
            let pacing = if limiter_on { "paced by its limits" } else { "limiter off: sent raw" };
            format!("{FIRE_TARGET} {}  {} · {pacing}", host.name, host.base_url)
        }
        (Some(_), None) => format!("{FIRE_TARGET} no host: add one with + host"),
        (None, None) => format!("{FIRE_TARGET} no profile yet"),
    };
    ui.add(egui::Label::new(text).truncate());
}

/// How the composer's target line starts.
pub const FIRE_TARGET: &str = "Fire at";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_urls_join_base_and_path() {
        assert_eq!(endpoint_url("http://127.0.0.1:8787/", "/items").unwrap().as_str(), "http://127.0.0.1:8787/items");
        assert_eq!(endpoint_url("http://h/api", "v1/x?q=1").unwrap().as_str(), "http://h/api/v1/x?q=1");
        assert!(endpoint_url("ftp://h", "/x").is_err());
        assert!(endpoint_url("not a url", "/x").is_err());
    }

    fn demo_editor() -> Editor {
        let mut editor = Editor::default();
        editor.load(vec![crate::profile::Profile::demo().unwrap()], crate::profile::SecretStore::in_memory());
        editor
    }

    #[test]
    fn an_endpoints_headers_and_body_typed_in_its_editor_are_what_fires() {
        use egui_kittest::Harness;
        use egui_kittest::kittest::Queryable;

        let editor = demo_editor();
        let composer = Composer { method: Method::POST, ..Composer::default() };
        let mut harness = Harness::builder().with_size(egui::vec2(1200.0, 600.0)).build_ui_state(
            move |ui, composer: &mut Composer| {
                composer.composer_ui(ui, &editor, false, None);
            },
            composer,
        );
        harness.get_by_label("request of /items").click();
        harness.run();
        harness.get_by_label("request headers").focus();
        harness.run();
        for key in "Accept: text/csv".chars() {
            harness.get_by_label("request headers").type_text(&key.to_string());
            harness.run();
        }
        harness.get_by_label("request body").focus();
        harness.run();
        for key in r#"{"n": 1}"#.chars() {
            harness.get_by_label("request body").type_text(&key.to_string());
            harness.run();
        }
        let composer = harness.state().clone();
        let fire = composer.fire_request(&demo_editor()).unwrap();
        let endpoint = &fire.spec.endpoints[0];
        assert_eq!(fire.spec.method, Method::POST);
        assert_eq!(endpoint.headers["accept"], "text/csv");
        assert_eq!(endpoint.headers["content-type"], "application/json");
        assert_eq!(endpoint.body.as_deref(), Some(br#"{"n": 1}"#.as_slice()));

        let get = Composer { method: Method::GET, ..composer };
        let err = get.fire_request(&demo_editor()).unwrap_err();
        assert!(err.contains("/items") && err.contains("sends no body"), "{err}");

        // The endpoint picks its own method: the burst's GET no longer applies to it.
        harness.get_by_label("endpoint method").click();
        harness.run();
        harness.get_by_label("PATCH").click();
        harness.run();
        let patched = Composer { method: Method::GET, ..harness.state().clone() };
        let fire = patched.fire_request(&demo_editor()).unwrap();
        assert_eq!(fire.spec.method, Method::GET);
        assert_eq!(fire.spec.endpoints[0].method, Some(Method::PATCH));
        assert_eq!(fire.spec.endpoints[0].body.as_deref(), Some(br#"{"n": 1}"#.as_slice()));
    }

    #[test]
    fn a_hosts_saved_endpoint_is_picked_and_the_composers_are_kept_in_the_profile() {
        use egui_kittest::Harness;
        use egui_kittest::kittest::Queryable;

        let mut editor = demo_editor();
        let base = editor.selected_host().unwrap().base_url.clone();
        let command = format!("curl -X PUT {base}/items/7 -H 'Accept: text/csv' -d 'a,b'");
        editor.import_curl(&crate::profile::parse_curl(&command).unwrap()).unwrap();
        let mut harness = Harness::builder().with_size(egui::vec2(1200.0, 600.0)).build_ui_state(
            move |ui, composer: &mut Composer| {
                composer.composer_ui(ui, &editor, false, None);
            },
            Composer::default(),
        );
        harness.get_by_label("profile endpoints").click();
        harness.run();
        harness.get_by_label("PUT /items/7").click();
        harness.run();
        let composer = harness.state().clone();
        assert_eq!(composer.endpoints.len(), 1);
        let picked = &composer.endpoints[0];
        assert_eq!((picked.path.as_str(), picked.request.own_method.clone()), ("/items/7", Some(Method::PUT)));
        assert_eq!((picked.request.headers.as_str(), picked.request.body.as_str()), ("Accept: text/csv\n", "a,b"));

        let entries = composer.endpoint_entries().unwrap();
        assert_eq!(entries[0].name, "PUT /items/7");
        assert_eq!(entries[0].headers.get("Accept").map(String::as_str), Some("text/csv"));
        let mut other = demo_editor();
        let message = other.keep_endpoints(entries).unwrap();
        assert!(message.contains("PUT /items/7"), "{message}");
        assert_eq!(
            other.selected_host().unwrap().endpoint_names(),
            "items, chat, products, PUT /items/7",
            "kept beside the demo's own"
        );
        other.profile().unwrap().validate().unwrap();
    }

    #[test]
    fn an_imported_curl_command_joins_the_profile_and_its_secret_the_store() {
        let mut editor = demo_editor();
        let base = editor.selected_host().unwrap().base_url.clone();
        let command = format!("curl -X POST {base}/items -H 'Authorization: Bearer t0k' -d '{{\"a\": 1}}'");
        let import = crate::profile::parse_curl(&command).unwrap();
        let message = editor.import_curl(&import).unwrap();
        assert!(message.contains("'POST /items'") && message.contains("authorization"), "{message}");
        let host = editor.selected_host().unwrap();
        assert_eq!(host.endpoint_names(), "items, chat, products, POST /items", "joins the demo's own endpoints");
        assert!(host.secret_headers.contains(&"authorization".to_owned()));
        let profile = editor.profile().unwrap().name.clone();
        assert_eq!(editor.secrets.status(&profile, &host.name, "authorization"), crate::profile::SecretStatus::Stored);
        let draft = EndpointDraft::from_entry(&import.endpoint);
        assert_eq!(draft.path, "/items");
        assert_eq!(draft.request.body, "{\"a\": 1}");
    }

    #[test]
    fn a_second_import_keeps_the_stored_secret_and_says_so() {
        let mut editor = demo_editor();
        let base = editor.selected_host().unwrap().base_url.clone();
        let first = crate::profile::parse_curl(&format!("curl {base}/a -H 'Authorization: Bearer TOKEN_A'")).unwrap();
        editor.import_curl(&first).unwrap();
        let dropped = crate::profile::parse_curl(&format!("curl {base}/b -H 'Authorization:'")).unwrap();
        editor.import_curl(&dropped).unwrap();
        let other = crate::profile::parse_curl(&format!("curl {base}/c -H 'Authorization: Bearer TOKEN_B'")).unwrap();
        let message = editor.import_curl(&other).unwrap();
        assert!(message.contains("already holds a different authorization: kept it"), "{message}");
        assert!(!message.contains("TOKEN"), "{message}");
        let profile = editor.profile().unwrap().name.clone();
        let host = editor.selected_host().unwrap().clone();
        let headers = editor.secrets.headers_for_with_env(&profile, &host, |_| None).unwrap();
        assert_eq!(headers["authorization"], "Bearer TOKEN_A");
    }

    #[test]
    fn an_endpoint_with_a_batch_template_gets_a_batching_control() {
        use egui_kittest::Harness;
        use egui_kittest::kittest::Queryable;

        let (editor, fired) = (demo_editor(), demo_editor());
        let mut harness = Harness::builder().with_size(egui::vec2(1400.0, 600.0)).build_ui_state(
            move |ui, composer: &mut Composer| {
                composer.composer_ui(ui, &editor, false, None);
            },
            Composer::default(),
        );
        harness.get_by_label("profile endpoints").click();
        harness.run();
        harness.get_by_label("items").click();
        harness.run();
        let batch = harness.state().endpoints[0].batch.clone().unwrap();
        assert!(batch.on, "a template is on as the profile says");
        let plan = harness.state().fire_request(&fired).unwrap().spec.endpoints[0].batch.clone().unwrap();
        assert_eq!((plan.query.param.as_str(), plan.settings.max_size), ("ids", 50));
        harness.get_by_label("batch max wait").click();
        harness.run();
        harness.get_by_label("batch max wait").type_text("x");
        harness.run();
        assert!(harness.state().fire_request(&fired).unwrap_err().contains("batch"), "20xms is not a duration");
        // The red mark says why when the pointer rests on it.
        harness.get_by_label("wait?").hover();
        // A tooltip waits for the pointer to rest (egui's delay, half a second of frames).
        harness.run_steps(60);
        assert!(
            harness.query_by_label_contains("is not a duration (unknown time unit").is_some(),
            "the mark's tooltip names the error"
        );
        harness.get_by_label("batch ?ids=").click();
        harness.run();
        assert_eq!(harness.state().fire_request(&fired).unwrap().spec.endpoints[0].batch, None, "switched off");
        assert!(harness.query_by_label("batch max size").is_none(), "size and wait hide while off");
    }
}
