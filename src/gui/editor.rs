//! Profiles and hosts: the profile bar, the host list and the host editor, every field
//! validated as it is typed, with changes applied live to a running burst.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use egui::RichText;
use url::Url;

use super::app::SaveRequest;
use super::draft;
use crate::engine::{LimitKey, LimiterConfig, Rate, parse_duration};
use crate::profile::{
    BudgetEntry, BudgetEntryKind, CurlImport, EndpointEntry, HostProfile, PathOverride, Profile, RetryEntry,
    SecretStatus, SecretStore,
};

/// What the editor asks the app to do.
#[derive(Debug)]
pub enum EditorAction {
    /// Nothing.
    None,
    /// Valid limits changed: apply them to these keys now.
    LiveLimits(Vec<(LimitKey, LimiterConfig)>),
    /// Save the current profile.
    Save,
    /// Import a profile from a file.
    Import,
    /// Export this profile to a file.
    Export(Box<Profile>),
    /// Delete the profile of this name (kept as `.bak`).
    Delete(String),
    /// Tell the user this.
    Message(String),
    /// A change made that waits for a save: tell the user this until it is saved.
    Unsaved(String),
}

/// A profile being edited and what is on disk.
#[derive(Debug, Clone)]
pub struct ProfileDoc {
    /// The profile as edited.
    pub profile: Profile,
    /// The profile as on disk; `None` when never saved.
    pub saved: Option<Profile>,
}

impl ProfileDoc {
    /// Whether it has edits not saved.
    pub fn is_dirty(&self) -> bool {
        self.saved.as_ref() != Some(&self.profile)
    }
}

/// Something deleted that can be brought back.
#[derive(Debug, Clone)]
enum Undo {
    Profile(Box<ProfileDoc>, usize),
    Host(usize, Box<HostProfile>, usize),
    /// A catalogue entry added to profile `.0`: the profile as it was, and the entry's title.
    Catalog(usize, Box<Profile>, String),
    /// Limits put into host `.1` of profile `.0`: the host as it was.
    Limits(usize, usize, Box<HostProfile>),
}

/// The editing state.
#[derive(Default)]
pub struct Editor {
    /// Every loaded profile.
    pub profiles: Vec<ProfileDoc>,
    /// The index of the profile shown.
    pub current: usize,
    /// The index of the selected host in it.
    pub host: usize,
    /// The secret store the profiles' secret headers come from.
    pub secrets: SecretStore,
    /// Whether the profiles have been loaded.
    pub loaded: bool,
    /// The profile to select once profiles are loaded (the one selected last time).
    pub preferred: Option<String>,
    rename: Option<String>,
    confirm_delete_profile: bool,
    confirm_delete_host: bool,
    undo: Option<(Undo, Instant)>,
    new_header: (String, String),
    new_secret_name: String,
    secret_drafts: BTreeMap<String, String>,
    catalog: super::catalog::CatalogPicker,
}

/// How long an undo offer stays.
const UNDO_FOR: Duration = Duration::from_secs(15);

fn error_label(ui: &mut egui::Ui, error: Option<String>) {
    if let Some(error) = error {
        ui.label(RichText::new(error).color(super::palette::status_colors(ui.visuals()).error).small());
    }
}

fn rate_error(text: &str) -> Option<String> {
    text.parse::<Rate>().err().map(|err| err.to_string())
}

fn duration_error(text: &str) -> Option<String> {
    match parse_duration(text) {
        Ok(duration) if duration.is_zero() => Some("must be longer than zero".into()),
        Ok(_) => None,
        Err(err) => Some(err.to_string()),
    }
}

fn base_url_error(text: &str) -> Option<String> {
    match Url::parse(text.trim()) {
        Ok(url) if !matches!(url.scheme(), "http" | "https") => Some("use http:// or https://".into()),
        Ok(url) if url.host_str().is_none() => Some("a base URL needs a host".into()),
        Ok(_) => None,
        Err(err) => Some(format!("not a URL: {err}")),
    }
}

/// A `limit/window` pair such as `100/1m`.
fn parse_window(text: &str) -> Result<(u64, String), String> {
    let (limit, window) = text.split_once('/').ok_or("write it as LIMIT/WINDOW, e.g. 1000/1h")?;
    let limit: u64 = limit.trim().parse().map_err(|_| format!("'{}' is not a whole number", limit.trim()))?;
    if limit == 0 {
        return Err("a limit of 0 lets nothing through".into());
    }
    if let Some(error) = duration_error(window) {
        return Err(error);
    }
    Ok((limit, window.trim().to_owned()))
}

/// The budgets of a host or path override. Returns whether anything changed.
fn budgets_ui(ui: &mut egui::Ui, budgets: &mut Vec<BudgetEntry>, salt: &str) -> bool {
    let mut changed = false;
    let mut remove = None;
    for (index, budget) in budgets.iter_mut().enumerate() {
        ui.push_id((salt, index), |ui| {
            let (edited, removed) = budget_header_ui(ui, budget);
            changed |= edited;
            if removed {
                remove = Some(index);
            }
            changed |= match budget.kind {
                BudgetEntryKind::TokenBucket => token_bucket_ui(ui, budget),
                BudgetEntryKind::SlidingWindow => sliding_window_ui(ui, budget),
            };
            ui.add_space(4.0);
        });
    }
    if let Some(index) = remove {
        budgets.remove(index);
        changed = true;
    }
    changed |= add_budget_ui(ui, budgets);
    changed
}

/// A budget's name, kind and remove button. Returns whether it changed and whether it is to go.
fn budget_header_ui(ui: &mut egui::Ui, budget: &mut BudgetEntry) -> (bool, bool) {
    let mut changed = false;
    let mut remove = false;
    ui.horizontal(|ui| {
        changed |= ui
            .add(egui::TextEdit::singleline(&mut budget.name).desired_width(70.0))
            .accessible_name("budget name")
            .changed();
        let kind = egui::ComboBox::from_id_salt("kind")
            .width(110.0)
            .selected_text(match budget.kind {
                BudgetEntryKind::TokenBucket => "token bucket",
                BudgetEntryKind::SlidingWindow => "sliding window",
            })
            .show_ui(ui, |ui| {
                changed |=
                    ui.selectable_value(&mut budget.kind, BudgetEntryKind::TokenBucket, "token bucket").changed();
                changed |=
                    ui.selectable_value(&mut budget.kind, BudgetEntryKind::SlidingWindow, "sliding window").changed();
            });
        let _ = kind.response.accessible_name("budget kind");
        remove = ui.small_button("x").on_hover_text("remove this budget").clicked();
    });
    (changed, remove)
}

/// A token bucket's burst and refill rate. Returns whether it changed.
fn token_bucket_ui(ui: &mut egui::Ui, budget: &mut BudgetEntry) -> bool {
    let mut changed = false;
    let mut capacity = budget.capacity.unwrap_or(1);
    ui.horizontal(|ui| {
        ui.label("burst");
        // A drag value whose step grows with the value: a few points move 5 to 6 or 7, not to
        // 400 as a logarithmic slider over 1–10,000 did; a double-click types a number.
        let speed = (capacity as f64 * 0.02).max(0.05);
        if ui
            .add(egui::DragValue::new(&mut capacity).range(1..=1_000_000).speed(speed))
            .accessible_name("burst capacity")
            .on_hover_text("capacity: how many go through at once (drag, or double-click to type)")
            .changed()
        {
            budget.capacity = Some(capacity);
            changed = true;
        }
    });
    let mut rate = budget.rate.clone().unwrap_or_default();
    ui.horizontal(|ui| {
        ui.label("refill");
        if ui
            .add(egui::TextEdit::singleline(&mut rate).desired_width(90.0).hint_text("10/1s"))
            .accessible_name("refill rate")
            .on_hover_text("AMOUNT/DURATION: 10/1s, 600/1m, 2.5/1s")
            .changed()
        {
            budget.rate = Some(rate.clone());
            changed = true;
        }
        if let Ok(parsed) = rate.parse::<Rate>() {
            ui.weak(format!("{:.2}/s", parsed.per_second()));
        }
    });
    error_label(ui, rate_error(&rate));
    if budget.capacity.is_none() {
        budget.capacity = Some(capacity);
    }
    changed
}

/// A sliding window's limit and length. Returns whether it changed.
fn sliding_window_ui(ui: &mut egui::Ui, budget: &mut BudgetEntry) -> bool {
    let mut changed = false;
    let mut limit = budget.limit.unwrap_or(1);
    ui.horizontal(|ui| {
        ui.label("limit");
        let slider =
            ui.add(egui::Slider::new(&mut limit, 1..=1_000_000).logarithmic(true)).accessible_name("window limit");
        if slider.changed() {
            budget.limit = Some(limit);
            changed = true;
        }
    });
    let model = || format!("{}/{}", limit, budget.window.as_deref().unwrap_or("1m"));
    let (typed, error) = ui
        .horizontal(|ui| {
            ui.label("per").on_hover_text("LIMIT/WINDOW: 100/1m, 1000/1h, 10000/1d");
            draft::parsed_text_ui(ui, "window, as limit/length", 90.0, model, parse_window)
        })
        .inner;
    if let Some((limit, window)) = typed {
        budget.limit = Some(limit);
        budget.window = Some(window);
        changed = true;
    }
    error_label(ui, error);
    if budget.limit.is_none() || budget.window.is_none() {
        budget.limit = Some(limit);
        budget.window.get_or_insert_with(|| "1m".to_owned());
    }
    changed
}

/// The buttons that add a budget. Returns whether one was added.
fn add_budget_ui(ui: &mut egui::Ui, budgets: &mut Vec<BudgetEntry>) -> bool {
    let mut changed = false;
    ui.horizontal(|ui| {
        let fresh_name = |prefix: &str, budgets: &[BudgetEntry]| {
            (1..)
                .map(|i| format!("{prefix}{i}"))
                .find(|name| budgets.iter().all(|b| &b.name != name))
                .unwrap_or_default()
        };
        if ui.button("+ token bucket").clicked() {
            let name = fresh_name("rate", budgets);
            budgets.push(BudgetEntry::token_bucket(name, 10, "10/1s"));
            changed = true;
        }
        if ui.button("+ sliding window").clicked() {
            let name = fresh_name("window", budgets);
            budgets.push(BudgetEntry::sliding_window(name, 1000, "1h"));
            changed = true;
        }
    });
    changed
}

fn concurrency_ui(ui: &mut egui::Ui, concurrency: &mut Option<usize>) -> bool {
    let mut changed = false;
    ui.horizontal(|ui| {
        let mut capped = concurrency.is_some();
        if ui.checkbox(&mut capped, "cap in flight").changed() {
            *concurrency = capped.then_some(concurrency.unwrap_or(4));
            changed = true;
        }
        if let Some(limit) = concurrency {
            changed |= ui
                .add(egui::Slider::new(limit, 1..=1000).logarithmic(true))
                .accessible_name("most requests in flight")
                .changed();
        }
    });
    changed
}

fn optional_text_ui(ui: &mut egui::Ui, label: &str, value: &mut Option<String>, default: &str) -> bool {
    let mut text = value.clone().unwrap_or_else(|| default.to_owned());
    let mut changed = false;
    ui.horizontal(|ui| {
        ui.label(label);
        if ui.add(egui::TextEdit::singleline(&mut text).desired_width(80.0)).accessible_name(label).changed() {
            *value = Some(text.clone());
            changed = true;
        }
    });
    error_label(ui, duration_error(&text));
    changed
}

fn retry_ui(ui: &mut egui::Ui, retry: &mut Option<RetryEntry>) -> bool {
    let entry = retry.get_or_insert_with(RetryEntry::default);
    let mut changed = false;
    let mut attempts = entry.max_attempts.unwrap_or(5);
    ui.horizontal(|ui| {
        ui.label("attempts");
        if ui
            .add(egui::Slider::new(&mut attempts, 1..=20))
            .accessible_name("attempts")
            .on_hover_text("1 = never retry")
            .changed()
        {
            entry.max_attempts = Some(attempts);
            changed = true;
        }
    });
    changed |= optional_text_ui(ui, "base", &mut entry.base, "300ms");
    changed |= optional_text_ui(ui, "cap", &mut entry.cap, "20s");
    changed |= optional_text_ui(ui, "longest Retry-After", &mut entry.max_retry_after, "5m");
    let mut jitter = entry.jitter.clone().unwrap_or_else(|| "full".to_owned());
    egui::ComboBox::from_label("jitter").selected_text(&jitter).show_ui(ui, |ui| {
        for option in ["full", "equal", "decorrelated", "none"] {
            if ui.selectable_value(&mut jitter, option.to_owned(), option).changed() {
                entry.jitter = Some(jitter.clone());
                changed = true;
            }
        }
    });
    let mut connection = entry.retry_connection_errors.unwrap_or(false);
    if ui.checkbox(&mut connection, "retry connection errors").changed() {
        entry.retry_connection_errors = Some(connection);
        changed = true;
    }
    let mut non_idempotent = entry.retry_non_idempotent.unwrap_or(false);
    if ui.checkbox(&mut non_idempotent, "retry POST/PATCH too").changed() {
        entry.retry_non_idempotent = Some(non_idempotent);
        changed = true;
    }
    changed
}

impl Editor {
    /// Takes the profiles read from the store.
    pub fn load(&mut self, profiles: Vec<Profile>, secrets: SecretStore) {
        self.profiles =
            profiles.into_iter().map(|profile| ProfileDoc { saved: Some(profile.clone()), profile }).collect();
        self.secrets = secrets;
        if self.profiles.is_empty()
            && let Ok(demo) = Profile::demo()
        {
            self.profiles.push(ProfileDoc { profile: demo, saved: None });
        }
        let preferred = self.preferred.take().unwrap_or_else(|| "demo".to_owned());
        self.current = self
            .profiles
            .iter()
            .position(|doc| doc.profile.name == preferred)
            .or_else(|| self.profiles.iter().position(|doc| doc.profile.name == "demo"))
            .unwrap_or(0);
        self.host = 0;
        self.loaded = true;
    }

    /// Adds a profile that is already on disk (imported) and selects it.
    pub fn add_saved(&mut self, profile: Profile) {
        self.profiles.retain(|doc| doc.profile.name != profile.name);
        self.profiles.push(ProfileDoc { saved: Some(profile.clone()), profile });
        self.current = self.profiles.len() - 1;
        self.host = 0;
    }

    /// Adds a profile made here (not on disk until the background confirms its save) in place
    /// of any of the same name, and selects it.
    pub fn add_unsaved(&mut self, profile: Profile) {
        self.profiles.retain(|doc| doc.profile.name != profile.name);
        self.profiles.push(ProfileDoc { saved: None, profile });
        self.current = self.profiles.len() - 1;
        self.host = 0;
    }

    /// Whether a profile open here is named `name`, or would be saved to the same file.
    pub fn has_profile_like(&self, name: &str) -> bool {
        let file = crate::profile::slug(name).ok();
        self.profiles.iter().any(|doc| {
            doc.profile.name == name || (file.is_some() && crate::profile::slug(&doc.profile.name).ok() == file)
        })
    }

    /// The profile shown, if any.
    pub fn profile(&self) -> Option<&Profile> {
        self.profiles.get(self.current).map(|doc| &doc.profile)
    }

    /// The selected host of the profile shown, if any.
    pub fn selected_host(&self) -> Option<&HostProfile> {
        self.profile()?.hosts.get(self.host)
    }

    /// The demo profile's hosts at the default demo address follow where the demo API really runs.
    pub fn point_demo_at(&mut self, url: &Url) {
        for doc in self.profiles.iter_mut().filter(|doc| doc.profile.name == "demo") {
            for profile in std::iter::once(&mut doc.profile).chain(doc.saved.as_mut()) {
                profile.point_demo_at(url);
            }
        }
    }

    /// The current profile and secrets to save, if the profile is valid. It counts as saved
    /// once the background confirms ([`mark_saved`](Self::mark_saved)).
    pub fn save_request(&self) -> Result<SaveRequest, String> {
        let doc = self.profiles.get(self.current).ok_or("there is no profile to save")?;
        doc.profile.validate().map_err(|err| format!("not saved: {err}"))?;
        Ok((doc.profile.clone(), self.secrets.clone()))
    }

    /// Every profile with unsaved edits and the secrets, to save them all; or the first that
    /// is invalid (then selected, so its error is in view) and why.
    pub fn save_all_requests(&mut self) -> Result<Vec<SaveRequest>, String> {
        let mut requests = Vec::new();
        for (index, doc) in self.profiles.iter().enumerate().filter(|(_, doc)| doc.is_dirty()) {
            if let Err(err) = doc.profile.validate() {
                let name = doc.profile.name.clone();
                self.select(index);
                return Err(format!("'{name}' not saved: {err}"));
            }
            requests.push((doc.profile.clone(), self.secrets.clone()));
        }
        Ok(requests)
    }

    /// The names of the profiles with edits not on disk.
    pub fn unsaved(&self) -> Vec<String> {
        self.profiles.iter().filter(|doc| doc.is_dirty()).map(|doc| doc.profile.name.clone()).collect()
    }

    /// The background wrote `profile`: that version is now the one on disk.
    pub fn mark_saved(&mut self, profile: Profile) {
        if let Some(doc) = self.profiles.iter_mut().find(|doc| doc.profile.name == profile.name) {
            doc.saved = Some(profile);
        }
    }

    fn select(&mut self, index: usize) {
        if index != self.current {
            self.current = index;
            self.host = 0;
        }
    }

    /// Adds a pasted curl command's host and endpoint to the current profile (the host with
    /// its base URL, or a new one, then selected) and its credentials to the secret store;
    /// both are kept on the next save. A different value the store holds already is kept, and
    /// the message says so (the Secrets panel replaces it).
    pub fn import_curl(&mut self, import: &CurlImport) -> Result<String, String> {
        let current = self.current;
        let doc = self.profiles.get_mut(current).ok_or("select or create a profile first")?;
        let added = doc.profile.add_curl_import(import);
        let profile_name = doc.profile.name.clone();
        self.host = doc.profile.hosts.iter().position(|host| host.name == added.host).unwrap_or(self.host);
        let filed = self.secrets.file_import(&profile_name, &added.host, &import.secrets, false);
        let host = if added.new_host { "new host" } else { "host" };
        let mut secrets = String::new();
        if !filed.added.is_empty() {
            secrets.push_str(&format!("; {} kept in the secret store", filed.added.join(", ")));
        }
        if !filed.kept.is_empty() {
            secrets.push_str(&format!(
                "; the secret store already holds a different {}: kept it (replace it under Secrets)",
                filed.kept.join(", ")
            ));
        }
        Ok(format!("added '{}' to {host} '{}'{secrets} (unsaved: Ctrl+S keeps it)", added.endpoint, added.host))
    }

    /// Keeps `entries` as the selected host's endpoints (replacing those of the same name).
    pub fn keep_endpoints(&mut self, entries: Vec<EndpointEntry>) -> Result<String, String> {
        let host = self
            .profiles
            .get_mut(self.current)
            .and_then(|doc| doc.profile.hosts.get_mut(self.host))
            .ok_or("select a host first")?;
        let names: Vec<String> = entries.iter().map(|entry| entry.name.clone()).collect();
        for entry in entries {
            host.put_endpoint(entry);
        }
        Ok(format!("'{}' keeps {} (unsaved: Ctrl+S keeps it)", host.name, names.join(", ")))
    }

    /// Puts `config`'s budgets and concurrency cap in place of the selected host's, with an Undo
    /// offer in the hosts panel; says what changed, or why nothing did.
    pub fn apply_limits(&mut self, config: &LimiterConfig) -> Result<String, String> {
        let (profile, index) = (self.current, self.host);
        let Some(host) = self.profiles.get_mut(profile).and_then(|doc| doc.profile.hosts.get_mut(index)) else {
            return Err("select a host first: the suggestion goes into the host being edited".to_owned());
        };
        let before = Box::new(host.clone());
        host.set_limits(config);
        let message = format!(
            "'{}' now has {} (unsaved: Ctrl+S keeps it; Undo in the hosts panel)",
            host.name,
            config.describe()
        );
        self.undo = Some((Undo::Limits(profile, index, before), Instant::now()));
        Ok(message)
    }

    /// Turns the server's reported budgets into the selected host's limits.
    pub fn apply_server_limits(&mut self, config: &LimiterConfig) -> String {
        let Some(host) = self.profiles.get_mut(self.current).and_then(|doc| doc.profile.hosts.get_mut(self.host))
        else {
            return "select a host first".to_owned();
        };
        let mut merged = host.limiter_config().unwrap_or_default();
        merged.budgets.retain(|budget| config.budgets.iter().all(|new| new.name != budget.name));
        merged.budgets.extend(config.budgets.iter().cloned());
        host.set_limits(&merged);
        format!("'{}' now has {} (unsaved: Ctrl+S to keep it)", host.name, merged.describe())
    }

    /// The profile selector, its actions and the save button.
    pub fn profile_bar_ui(&mut self, ui: &mut egui::Ui) -> EditorAction {
        let mut action = EditorAction::None;
        if !self.loaded {
            ui.spinner();
            ui.label("loading profiles…");
            return action;
        }
        let label = |doc: &ProfileDoc| {
            if doc.is_dirty() { format!("{} •", doc.profile.name) } else { doc.profile.name.clone() }
        };
        let selected = self.profiles.get(self.current).map(label).unwrap_or_else(|| "no profile".to_owned());
        let picker = egui::ComboBox::from_id_salt("profile").selected_text(selected).show_ui(ui, |ui| {
            for (index, doc) in self.profiles.iter().enumerate() {
                if ui.selectable_label(index == self.current, label(doc)).clicked() {
                    self.current = index;
                    self.host = 0;
                    self.rename = None;
                }
            }
        });
        let _ = picker.response.on_hover_text("the profile being edited").accessible_name("profile");
        if ui.button("New").clicked() {
            let name = (1..).map(|i| format!("profile {i}")).find(|name| self.name_free(name)).unwrap_or_default();
            self.profiles.push(ProfileDoc { profile: Profile::new(name), saved: None });
            self.current = self.profiles.len() - 1;
            self.host = 0;
        }
        if let Some(doc) = self.profiles.get(self.current).cloned() {
            if ui.button("Duplicate").clicked() {
                let name = (2..)
                    .map(|i| format!("{} {i}", doc.profile.name))
                    .find(|name| self.name_free(name))
                    .unwrap_or_default();
                self.profiles.push(ProfileDoc { profile: Profile { name, ..doc.profile.clone() }, saved: None });
                self.current = self.profiles.len() - 1;
            }
            self.rename_ui(ui, &doc);
            if let Some(deleted) = self.delete_profile_ui(ui, &doc) {
                action = deleted;
            }
            ui.separator();
            let save = ui.add_enabled(doc.is_dirty(), egui::Button::new("Save"));
            if save.on_hover_text("Ctrl+S").clicked() {
                action = EditorAction::Save;
            }
            if ui.button("Export…").clicked() {
                action = EditorAction::Export(Box::new(doc.profile.clone()));
            }
        }
        if ui.button("Import…").clicked() {
            action = EditorAction::Import;
        }
        self.undo_ui(ui);
        action
    }

    /// Rename: a button, then a field that refuses a blank or taken name until it is fixed;
    /// Enter or OK applies it.
    fn rename_ui(&mut self, ui: &mut egui::Ui, doc: &ProfileDoc) {
        let Some(mut name) = self.rename.take() else {
            if ui.button("Rename").clicked() {
                self.rename = Some(doc.profile.name.clone());
            }
            return;
        };
        let response =
            ui.add(egui::TextEdit::singleline(&mut name).desired_width(120.0)).accessible_name("new profile name");
        let taken = name.trim() != doc.profile.name && !self.name_free_except(&name, self.current);
        let blank = name.trim().is_empty();
        let confirmed = response.lost_focus() && ui.input(|i| i.key_pressed(egui::Key::Enter));
        if taken || blank {
            ui.label(
                RichText::new(if blank { "needs a name" } else { "name taken" })
                    .color(super::palette::status_colors(ui.visuals()).error),
            );
            self.rename = Some(name);
        } else if ui.button("OK").clicked() || confirmed {
            if let Some(current) = self.profiles.get_mut(self.current) {
                current.profile.name = name.trim().to_owned();
            }
        } else {
            self.rename = Some(name);
        }
    }

    /// Delete, after a confirmation, with an undo offer; a saved profile's file is moved aside
    /// (the returned action).
    fn delete_profile_ui(&mut self, ui: &mut egui::Ui, doc: &ProfileDoc) -> Option<EditorAction> {
        if !self.confirm_delete_profile {
            self.confirm_delete_profile = ui.button("Delete").clicked();
            return None;
        }
        let mut action = None;
        ui.label(format!("Delete '{}'?", doc.profile.name));
        if ui.button(RichText::new("Delete").color(super::palette::status_colors(ui.visuals()).error)).clicked() {
            self.confirm_delete_profile = false;
            let removed = self.profiles.remove(self.current);
            if removed.saved.is_some() {
                action = Some(EditorAction::Delete(removed.profile.name.clone()));
            }
            self.undo = Some((Undo::Profile(Box::new(removed), self.current), Instant::now()));
            self.current = self.current.saturating_sub(1);
            self.host = 0;
        }
        if ui.button("Keep").clicked() {
            self.confirm_delete_profile = false;
        }
        action
    }

    fn name_free(&self, name: &str) -> bool {
        self.profiles.iter().all(|doc| doc.profile.name != name)
    }

    fn name_free_except(&self, name: &str, except: usize) -> bool {
        self.profiles.iter().enumerate().all(|(index, doc)| index == except || doc.profile.name != name.trim())
    }

    fn undo_ui(&mut self, ui: &mut egui::Ui) {
        let Some((undo, when)) = &self.undo else { return };
        if when.elapsed() > UNDO_FOR {
            self.undo = None;
            return;
        }
        let what = match undo {
            Undo::Profile(doc, _) => format!("deleted profile '{}'", doc.profile.name),
            Undo::Host(_, host, _) => format!("deleted host '{}'", host.name),
            Undo::Catalog(_, _, title) => format!("added {title}"),
            Undo::Limits(_, _, host) => format!("new limits for '{}'", host.name),
        };
        ui.label(RichText::new(what).italics());
        if ui.button("Undo").clicked() {
            match self.undo.take().map(|(undo, _)| undo) {
                Some(Undo::Profile(mut doc, index)) => {
                    // Its file was moved aside: it comes back as unsaved.
                    doc.saved = None;
                    let index = index.min(self.profiles.len());
                    self.profiles.insert(index, *doc);
                    self.current = index;
                }
                Some(Undo::Host(profile, host, index)) => {
                    if let Some(doc) = self.profiles.get_mut(profile) {
                        let index = index.min(doc.profile.hosts.len());
                        doc.profile.hosts.insert(index, *host);
                        self.current = profile;
                        self.host = index;
                    }
                }
                Some(Undo::Limits(profile, index, before)) => {
                    if let Some(host) = self.profiles.get_mut(profile).and_then(|doc| doc.profile.hosts.get_mut(index))
                    {
                        *host = *before;
                        (self.current, self.host) = (profile, index);
                    }
                }
                Some(Undo::Catalog(profile, before, _)) => {
                    if let Some(doc) = self.profiles.get_mut(profile) {
                        doc.profile = *before;
                        self.current = profile;
                        self.host = self.host.min(doc.profile.hosts.len().saturating_sub(1));
                    }
                }
                None => {}
            }
        }
        ui.ctx().request_repaint_after(Duration::from_secs(1));
    }

    /// The host list and the selected host's editor.
    pub fn editor_ui(&mut self, ui: &mut egui::Ui, running: bool) -> EditorAction {
        let Some(doc) = self.profiles.get_mut(self.current) else {
            ui.label("No profile yet: press New above.");
            return EditorAction::None;
        };
        ui.heading("Hosts");
        let selection = HostSelection {
            profile: self.current,
            host: &mut self.host,
            confirm_delete: &mut self.confirm_delete_host,
            undo: &mut self.undo,
        };
        host_list_ui(ui, &mut doc.profile.hosts, selection);
        if let Some(picked) = self.catalog.catalog_ui(ui) {
            let entry = picked.entry;
            if picked.as_new_profile {
                let taken = |name: &str| self.profiles.iter().any(|doc| doc.profile.name == name);
                let (profile, message) = super::catalog::new_profile(taken, &mut self.secrets, &entry);
                self.profiles.push(ProfileDoc { profile, saved: None });
                (self.current, self.host) = (self.profiles.len() - 1, 0);
                return EditorAction::Unsaved(message);
            }
            let before = Box::new(doc.profile.clone());
            return match super::catalog::add_entry(&mut doc.profile, &mut self.secrets, &entry) {
                Ok((host, message)) => {
                    self.undo = Some((Undo::Catalog(self.current, before, entry.info.title), Instant::now()));
                    self.host = host;
                    EditorAction::Unsaved(message)
                }
                Err(message) => EditorAction::Message(message),
            };
        }
        ui.separator();
        let profile_name = doc.profile.name.clone();
        let Some(host) = doc.profile.hosts.get_mut(self.host) else {
            ui.label("This profile has no host yet: add one with + host.");
            return EditorAction::None;
        };
        let mut limits_changed = host_limits_ui(ui, host);
        egui::CollapsingHeader::new("Per-path limits")
            .default_open(!host.paths.is_empty())
            .show(ui, |ui| limits_changed |= paths_ui(ui, &mut host.paths));
        egui::CollapsingHeader::new("Retry").show(ui, |ui| retry_ui(ui, &mut host.retry));
        egui::CollapsingHeader::new("Headers").show(ui, |ui| headers_ui(ui, &mut host.headers, &mut self.new_header));
        egui::CollapsingHeader::new("Secrets").show(ui, |ui| {
            let drafts = SecretDrafts { values: &mut self.secret_drafts, new_name: &mut self.new_secret_name };
            secrets_ui(ui, host, &profile_name, &mut self.secrets, drafts);
        });
        ui.separator();
        validity_ui(ui, host, limits_changed && running)
    }
}

/// The editor's host selection and what deleting a host touches.
struct HostSelection<'a> {
    profile: usize,
    host: &'a mut usize,
    confirm_delete: &'a mut bool,
    undo: &'a mut Option<(Undo, Instant)>,
}

/// The host list, and adding, duplicating and (after a confirmation, with undo) deleting hosts.
fn host_list_ui(ui: &mut egui::Ui, hosts: &mut Vec<HostProfile>, selection: HostSelection<'_>) {
    let HostSelection { profile, host: selected, confirm_delete, undo } = selection;
    for (index, host) in hosts.iter().enumerate() {
        let text = format!("{}  ·  {}", host.name, host.base_url);
        if ui.selectable_label(index == *selected, text).clicked() {
            *selected = index;
            *confirm_delete = false;
        }
    }
    ui.horizontal(|ui| {
        if ui.button("+ host").clicked() {
            let name = fresh_host_name(hosts, (1..).map(|i| format!("host {i}")));
            // With no limits known yet, following what the server publishes is the useful start.
            hosts.push(HostProfile { adaptive: true, ..HostProfile::new(name, "https://api.example.com") });
            *selected = hosts.len() - 1;
        }
        let Some(host) = hosts.get(*selected).cloned() else { return };
        if ui.button("duplicate").clicked() {
            let name = fresh_host_name(hosts, (2..).map(|i| format!("{} {i}", host.name)));
            hosts.push(HostProfile { name, ..host.clone() });
            *selected = hosts.len() - 1;
        }
        if !*confirm_delete {
            *confirm_delete = ui.button("delete").clicked();
            return;
        }
        if ui
            .button(
                RichText::new(format!("delete '{}'", host.name))
                    .color(super::palette::status_colors(ui.visuals()).error),
            )
            .clicked()
        {
            let removed = hosts.remove(*selected);
            *undo = Some((Undo::Host(profile, Box::new(removed), *selected), Instant::now()));
            *selected = selected.saturating_sub(1);
            *confirm_delete = false;
        }
        if ui.button("keep").clicked() {
            *confirm_delete = false;
        }
    });
}

/// The first of `names` no host has yet.
fn fresh_host_name(hosts: &[HostProfile], mut names: impl Iterator<Item = String>) -> String {
    names.find(|name| hosts.iter().all(|host| &host.name != name)).unwrap_or_default()
}

/// The host's name, base URL, budgets, concurrency cap and adaptive switch. Returns whether
/// its limits changed.
fn host_limits_ui(ui: &mut egui::Ui, host: &mut HostProfile) -> bool {
    let mut changed = false;
    ui.heading(format!("Limits · {}", host.name));
    ui.horizontal(|ui| {
        ui.label("name");
        ui.text_edit_singleline(&mut host.name).accessible_name("host name");
    });
    ui.horizontal(|ui| {
        ui.label("base URL");
        changed |= ui.text_edit_singleline(&mut host.base_url).accessible_name("base URL").changed();
    });
    error_label(ui, base_url_error(&host.base_url));
    ui.add_space(4.0);
    changed |= budgets_ui(ui, &mut host.budgets, "host");
    changed |= concurrency_ui(ui, &mut host.concurrency);
    ui.checkbox(&mut host.adaptive, "adaptive: follow the limits the server publishes").on_hover_text(
        "Server budgets tighten these limits, never loosen them; an exhausted budget pauses the host until it resets.",
    );
    if host.budgets.is_empty() && host.concurrency.is_none() {
        ui.weak(no_limits_text(host.adaptive));
    }
    changed
}

/// What a host without budgets or a concurrency cap does, said under its limits.
pub fn no_limits_text(adaptive: bool) -> &'static str {
    if adaptive {
        "No limits set: requests are paced by what the server publishes (rate-limit headers, 429s with Retry-After)."
    } else {
        "No limits set and adaptive off: requests go out unpaced."
    }
}

/// Limits of their own for path prefixes. Returns whether any changed.
fn paths_ui(ui: &mut egui::Ui, paths: &mut Vec<PathOverride>) -> bool {
    let mut changed = false;
    let mut remove = None;
    for (index, path) in paths.iter_mut().enumerate() {
        ui.push_id(("path", index), |ui| {
            ui.horizontal(|ui| {
                ui.label("prefix");
                changed |= ui
                    .add(egui::TextEdit::singleline(&mut path.prefix).desired_width(120.0))
                    .accessible_name("path prefix")
                    .changed();
                if ui.small_button("x").clicked() {
                    remove = Some(index);
                }
            });
            if !path.prefix.starts_with('/') {
                error_label(ui, Some("a prefix starts with /".into()));
            }
            changed |= budgets_ui(ui, &mut path.budgets, "path");
            changed |= concurrency_ui(ui, &mut path.concurrency);
            ui.separator();
        });
    }
    if let Some(index) = remove {
        paths.remove(index);
        changed = true;
    }
    if ui.button("+ path prefix").clicked() {
        paths.push(PathOverride { prefix: "/search".into(), concurrency: None, budgets: Vec::new() });
    }
    changed
}

/// Plain headers sent with every request to the host; a new one is added by name and value.
fn headers_ui(ui: &mut egui::Ui, headers: &mut BTreeMap<String, String>, new_header: &mut (String, String)) {
    let mut remove = None;
    for (name, value) in headers.iter_mut() {
        ui.horizontal(|ui| {
            ui.monospace(name.as_str());
            ui.text_edit_singleline(value).accessible_name(format!("value of {name}"));
            if ui.small_button("x").clicked() {
                remove = Some(name.clone());
            }
        });
    }
    if let Some(name) = remove {
        headers.remove(&name);
    }
    // Sized to the panel: a new header's row never widens it.
    let room = (ui.available_width() - 60.0).max(120.0);
    ui.horizontal(|ui| {
        ui.add(egui::TextEdit::singleline(&mut new_header.0).hint_text("name").desired_width(room * 0.4));
        ui.add(egui::TextEdit::singleline(&mut new_header.1).hint_text("value").desired_width(room * 0.6));
        let valid = http::HeaderName::from_bytes(new_header.0.trim().as_bytes()).is_ok();
        if ui.add_enabled(valid, egui::Button::new("add")).clicked() {
            headers.insert(new_header.0.trim().to_ascii_lowercase(), new_header.1.clone());
            *new_header = Default::default();
        }
    });
}

/// What is being typed in the Secrets section: new values per header, and a new header's name.
struct SecretDrafts<'a> {
    values: &'a mut BTreeMap<String, String>,
    new_name: &'a mut String,
}

/// Secret headers: their state (stored, from the environment, missing), new values, and
/// adding or removing one. Values go to the secret store, never into the profile.
fn secrets_ui(
    ui: &mut egui::Ui,
    host: &mut HostProfile,
    profile: &str,
    secrets: &mut SecretStore,
    drafts: SecretDrafts,
) {
    ui.weak("Kept apart from the profile, in a file only you can read; never exported.");
    let mut remove = None;
    for name in &host.secret_headers {
        ui.horizontal(|ui| {
            ui.monospace(name.as_str());
            let status = match secrets.status(profile, &host.name, name) {
                SecretStatus::Missing => {
                    RichText::new("missing").color(super::palette::status_colors(ui.visuals()).error)
                }
                SecretStatus::Stored => RichText::new("••••••••"),
                SecretStatus::FromEnv(vars) => RichText::new(format!("from ${}", vars.join(", $"))),
            };
            ui.label(status);
            let draft = drafts.values.entry(name.clone()).or_default();
            ui.add(
                egui::TextEdit::singleline(draft).password(true).hint_text("new value or ${VAR}").desired_width(120.0),
            )
            .accessible_name(format!("new secret value of {name}"));
            if ui.add_enabled(!draft.is_empty(), egui::Button::new("set")).clicked() {
                secrets.set(profile, &host.name, name, std::mem::take(draft));
            }
            if ui.small_button("x").clicked() {
                remove = Some(name.clone());
            }
        });
    }
    if let Some(name) = remove {
        host.secret_headers.retain(|existing| *existing != name);
        secrets.remove(profile, &host.name, &name);
    }
    ui.horizontal_wrapped(|ui| {
        let room = (ui.available_width() - 140.0).max(100.0);
        ui.add(egui::TextEdit::singleline(drafts.new_name).hint_text("e.g. authorization").desired_width(room));
        let valid = http::HeaderName::from_bytes(drafts.new_name.trim().as_bytes()).is_ok();
        if ui.add_enabled(valid, egui::Button::new("add secret header")).clicked() {
            host.secret_headers.push(drafts.new_name.trim().to_ascii_lowercase());
            drafts.new_name.clear();
        }
    });
}

/// Whether the host's limits are valid (said in green or red); when they changed during a
/// burst, the new limits to apply at once.
fn validity_ui(ui: &mut egui::Ui, host: &HostProfile, apply_now: bool) -> EditorAction {
    let config = host.limiter_config();
    match &config {
        Ok(config) => {
            ui.label(
                RichText::new(format!("valid: {}", config.describe()))
                    .color(super::palette::status_colors(ui.visuals()).ok),
            );
        }
        Err(err) => {
            ui.label(RichText::new(err.to_string()).color(super::palette::status_colors(ui.visuals()).error));
        }
    }
    if !apply_now {
        return EditorAction::None;
    }
    let mut changes = Vec::new();
    if let (Ok(key), Ok(config)) = (host.key(), config) {
        changes.push((key, config));
    }
    if let Ok(paths) = host.path_limits() {
        changes.extend(paths);
    }
    if changes.is_empty() { EditorAction::None } else { EditorAction::LiveLimits(changes) }
}

#[cfg(test)]
pub(super) mod tests {
    use egui_kittest::Harness;
    use egui_kittest::kittest::Queryable;

    use super::*;

    /// An editor holding the demo profile (saved), shown as the app shows it.
    pub(in crate::gui) fn harness() -> Harness<'static, Editor> {
        let demo = Profile::demo().unwrap();
        let editor = Editor {
            profiles: vec![ProfileDoc { profile: demo.clone(), saved: Some(demo) }],
            loaded: true,
            ..Editor::default()
        };
        Harness::builder().with_size(egui::vec2(900.0, 1400.0)).build_ui_state(
            |ui, editor: &mut Editor| {
                ui.horizontal(|ui| editor.profile_bar_ui(ui));
                editor.editor_ui(ui, false);
            },
            editor,
        )
    }

    #[test]
    fn a_deleted_host_needs_a_confirmation_and_comes_back_with_undo() {
        let mut harness = harness();
        harness.get_by_label("duplicate").click();
        harness.run();
        assert_eq!(harness.state().profiles[0].profile.hosts.len(), 2);
        assert_eq!(harness.state().host, 1, "the copy is selected");
        harness.get_by_label("delete").click();
        harness.run();
        assert_eq!(harness.state().profiles[0].profile.hosts.len(), 2, "nothing goes before the confirmation");
        harness.get_by_label("delete 'demo API 2'").click();
        harness.run();
        assert_eq!(harness.state().profiles[0].profile.hosts.len(), 1);
        harness.get_by_label("Undo").click();
        harness.run();
        let hosts: Vec<&str> = harness.state().profiles[0].profile.hosts.iter().map(|h| h.name.as_str()).collect();
        assert_eq!(hosts, ["demo API", "demo API 2"]);
        assert!(harness.state().profiles[0].is_dirty(), "the changes are not saved yet");
    }

    #[test]
    fn a_rename_refuses_a_blank_or_taken_name_until_it_is_fixed() {
        let mut harness = harness();
        harness.get_by_label("New").click();
        harness.run();
        assert_eq!(harness.state().profiles[1].profile.name, "profile 1");
        harness.get_by_label("Rename").click();
        harness.run();
        harness.get_by_label("new profile name").focus();
        harness.run();
        harness.key_press_modifiers(egui::Modifiers::COMMAND, egui::Key::A);
        harness.key_press(egui::Key::Backspace);
        harness.run();
        harness.get_by_label("needs a name");
        for key in "demo".chars() {
            harness.get_by_label("new profile name").type_text(&key.to_string());
            harness.run();
        }
        harness.get_by_label("name taken");
        assert_eq!(harness.state().profiles[1].profile.name, "profile 1", "nothing applied while refused");
        harness.get_by_label("new profile name").type_text("2");
        harness.run();
        harness.get_by_label("OK").click();
        harness.run();
        assert_eq!(harness.state().profiles[1].profile.name, "demo2");
        assert!(harness.state().rename.is_none());
    }
}
