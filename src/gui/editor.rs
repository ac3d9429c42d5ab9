//! Profiles and hosts: the profile bar, the host list and the host editor, every field
//! validated as it is typed, with changes applied live to a running burst.

use std::time::{Duration, Instant};

use egui::RichText;
use url::Url;

use super::app::SaveRequest;
use super::catalog::Picked;
use super::host_edit::{self, HostDrafts, HostEdit};
use crate::engine::{LimitKey, LimiterConfig};
use crate::profile::export::ExportFormat;
use crate::profile::{CurlImport, EndpointEntry, HostProfile, Profile, SecretStore};

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
    /// Export the selected host's limits of this profile as code for another stack.
    ExportFor {
        /// The profile.
        profile: Box<Profile>,
        /// The host being edited (by name), when one is.
        host: Option<String>,
        /// What to write.
        format: ExportFormat,
    },
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

/// One change asked for by the editor's widgets this frame; [`Editor::apply`] makes it after
/// the UI pass, the one place profiles, hosts and the selection change.
enum Edit {
    SelectProfile(usize),
    NewProfile,
    DuplicateProfile,
    RenameProfile(String),
    /// The profile shown goes (confirmed).
    DeleteProfile,
    /// Bring back what the undo offer holds.
    Undo,
    SelectHost(usize),
    AddHost,
    DuplicateHost,
    /// The selected host goes (confirmed).
    DeleteHost,
    /// A catalogue entry joins the profile shown, or becomes a profile of its own.
    Catalog(Picked),
    /// A change to the selected host.
    Host(HostEdit),
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
    drafts: HostDrafts,
    catalog: super::catalog::CatalogPicker,
}

/// How long an undo offer stays.
const UNDO_FOR: Duration = Duration::from_secs(15);

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
        if !self.loaded {
            ui.spinner();
            ui.label("loading profiles…");
            return EditorAction::None;
        }
        let mut edits = Vec::new();
        let mut action = EditorAction::None;
        let label = |doc: &ProfileDoc| {
            if doc.is_dirty() { format!("{} •", doc.profile.name) } else { doc.profile.name.clone() }
        };
        let selected = self.profiles.get(self.current).map(label).unwrap_or_else(|| "no profile".to_owned());
        let picker = egui::ComboBox::from_id_salt("profile").selected_text(selected).show_ui(ui, |ui| {
            for (index, doc) in self.profiles.iter().enumerate() {
                if ui.selectable_label(index == self.current, label(doc)).clicked() {
                    edits.push(Edit::SelectProfile(index));
                }
            }
        });
        let _ = picker.response.on_hover_text("the profile being edited").accessible_name("profile");
        if ui.button("New").clicked() {
            edits.push(Edit::NewProfile);
        }
        let shown = self.profiles.get(self.current).map(|doc| (doc.profile.name.clone(), doc.is_dirty()));
        if let Some((name, dirty)) = shown {
            if ui.button("Duplicate").clicked() {
                edits.push(Edit::DuplicateProfile);
            }
            edits.extend(self.rename_ui(ui, &name));
            edits.extend(delete_profile_ui(ui, &name, &mut self.confirm_delete_profile));
            ui.separator();
            let save = ui.add_enabled(dirty, egui::Button::new("Save"));
            if save.on_hover_text("Ctrl+S").clicked() {
                action = EditorAction::Save;
            }
            if ui.button("Export…").clicked()
                && let Some(doc) = self.profiles.get(self.current)
            {
                action = EditorAction::Export(Box::new(doc.profile.clone()));
            }
            if let Some(format) = export_for_ui(ui)
                && let Some(doc) = self.profiles.get(self.current)
            {
                let host = doc.profile.hosts.get(self.host).map(|host| host.name.clone());
                action = EditorAction::ExportFor { profile: Box::new(doc.profile.clone()), host, format };
            }
        }
        if ui.button("Import…").clicked() {
            action = EditorAction::Import;
        }
        edits.extend(self.undo_ui(ui));
        match self.apply_all(ui.ctx(), edits, false) {
            EditorAction::None => action,
            applied => applied,
        }
    }

    /// Rename: a button, then a field that refuses a blank or taken name until it is fixed;
    /// Enter or OK asks for it.
    fn rename_ui(&mut self, ui: &mut egui::Ui, current: &str) -> Option<Edit> {
        let Some(mut name) = self.rename.take() else {
            if ui.button("Rename").clicked() {
                self.rename = Some(current.to_owned());
            }
            return None;
        };
        let response =
            ui.add(egui::TextEdit::singleline(&mut name).desired_width(120.0)).accessible_name("new profile name");
        let taken = name.trim() != current && !self.name_free_except(&name, self.current);
        let blank = name.trim().is_empty();
        let confirmed = response.lost_focus() && ui.input(|i| i.key_pressed(egui::Key::Enter));
        if taken || blank {
            ui.label(
                RichText::new(if blank { "needs a name" } else { "name taken" })
                    .color(super::palette::status_colors(ui.visuals()).error),
            );
        } else if ui.button("OK").clicked() || confirmed {
            return Some(Edit::RenameProfile(name.trim().to_owned()));
        }
        self.rename = Some(name);
        None
    }

    fn name_free(&self, name: &str) -> bool {
        self.profiles.iter().all(|doc| doc.profile.name != name)
    }

    fn name_free_except(&self, name: &str, except: usize) -> bool {
        self.profiles.iter().enumerate().all(|(index, doc)| index == except || doc.profile.name != name.trim())
    }

    /// The undo offer while it lasts: what it brings back, and Undo.
    fn undo_ui(&mut self, ui: &mut egui::Ui) -> Option<Edit> {
        let (undo, when) = self.undo.as_ref()?;
        if when.elapsed() > UNDO_FOR {
            self.undo = None;
            return None;
        }
        let what = match undo {
            Undo::Profile(doc, _) => format!("deleted profile '{}'", doc.profile.name),
            Undo::Host(_, host, _) => format!("deleted host '{}'", host.name),
            Undo::Catalog(_, _, title) => format!("added {title}"),
            Undo::Limits(_, _, host) => format!("new limits for '{}'", host.name),
        };
        ui.label(RichText::new(what).italics());
        let pressed = ui.button("Undo").clicked();
        ui.ctx().request_repaint_after(Duration::from_secs(1));
        pressed.then_some(Edit::Undo)
    }

    /// The host list and the selected host's editor.
    pub fn editor_ui(&mut self, ui: &mut egui::Ui, running: bool) -> EditorAction {
        let Some(doc) = self.profiles.get(self.current) else {
            ui.label("No profile yet: press New above.");
            return EditorAction::None;
        };
        ui.heading("Hosts");
        let mut edits = host_list_ui(ui, &doc.profile.hosts, self.host, &mut self.confirm_delete_host);
        edits.extend(self.catalog.catalog_ui(ui).map(Edit::Catalog));
        ui.separator();
        match doc.profile.hosts.get(self.host) {
            Some(host) => {
                let changes = host_edit::host_ui(ui, host, &doc.profile.name, &self.secrets, &mut self.drafts);
                edits.extend(changes.into_iter().map(Edit::Host));
                ui.separator();
                validity_ui(ui, host);
            }
            None => {
                ui.label("This profile has no host yet: add one with + host.");
            }
        }
        self.apply_all(ui.ctx(), edits, running)
    }

    /// Makes the edits the widgets asked for this frame, in order, then asks for another
    /// frame to show them. With `running`, limits they changed go to the burst at once.
    fn apply_all(&mut self, ctx: &egui::Context, edits: Vec<Edit>, running: bool) -> EditorAction {
        if edits.is_empty() {
            return EditorAction::None;
        }
        let limits_changed = edits.iter().any(|edit| matches!(edit, Edit::Host(edit) if edit.touches_limits()));
        let mut action = EditorAction::None;
        for edit in edits {
            match self.apply(edit) {
                EditorAction::None => {}
                applied => action = applied,
            }
        }
        ctx.request_repaint();
        match (&action, self.selected_host()) {
            (EditorAction::None, Some(host)) if limits_changed && running => live_limits(host),
            _ => action,
        }
    }

    /// The one place the editor's widgets change profiles, hosts and the selection.
    fn apply(&mut self, edit: Edit) -> EditorAction {
        let current = self.current;
        match edit {
            Edit::SelectProfile(index) => {
                (self.current, self.host) = (index, 0);
                self.rename = None;
            }
            Edit::NewProfile => {
                let name = (1..).map(|i| format!("profile {i}")).find(|name| self.name_free(name)).unwrap_or_default();
                self.profiles.push(ProfileDoc { profile: Profile::new(name), saved: None });
                (self.current, self.host) = (self.profiles.len() - 1, 0);
            }
            Edit::DuplicateProfile => {
                let Some(doc) = self.profiles.get(current) else { return EditorAction::None };
                let name = (2..)
                    .map(|i| format!("{} {i}", doc.profile.name))
                    .find(|name| self.name_free(name))
                    .unwrap_or_default();
                let profile = Profile { name, ..doc.profile.clone() };
                self.profiles.push(ProfileDoc { profile, saved: None });
                self.current = self.profiles.len() - 1;
            }
            Edit::RenameProfile(name) => {
                if let Some(doc) = self.profiles.get_mut(current) {
                    doc.profile.name = name;
                }
            }
            Edit::DeleteProfile => return self.delete_profile(),
            Edit::Undo => self.undo(),
            Edit::SelectHost(index) => {
                self.host = index;
                self.confirm_delete_host = false;
            }
            Edit::AddHost | Edit::DuplicateHost | Edit::DeleteHost => self.change_hosts(&edit),
            Edit::Catalog(picked) => return self.add_from_catalog(picked),
            Edit::Host(edit) => {
                let Some(doc) = self.profiles.get_mut(current) else { return EditorAction::None };
                if let Some(host) = doc.profile.hosts.get_mut(self.host) {
                    edit.apply(host, &mut self.secrets, &doc.profile.name);
                }
            }
        }
        EditorAction::None
    }

    /// Deletes the profile shown, with an undo offer; a saved one's file is moved aside (the
    /// returned action).
    fn delete_profile(&mut self) -> EditorAction {
        if self.current >= self.profiles.len() {
            return EditorAction::None;
        }
        self.confirm_delete_profile = false;
        let removed = self.profiles.remove(self.current);
        let action = if removed.saved.is_some() {
            EditorAction::Delete(removed.profile.name.clone())
        } else {
            EditorAction::None
        };
        self.undo = Some((Undo::Profile(Box::new(removed), self.current), Instant::now()));
        self.current = self.current.saturating_sub(1);
        self.host = 0;
        action
    }

    /// Brings back what the undo offer holds.
    fn undo(&mut self) {
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
                if let Some(host) = self.profiles.get_mut(profile).and_then(|doc| doc.profile.hosts.get_mut(index)) {
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

    /// Adds a host, duplicates the selected one, or deletes it (with an undo offer).
    fn change_hosts(&mut self, edit: &Edit) {
        let (profile, selected) = (self.current, self.host);
        let Some(hosts) = self.profiles.get_mut(profile).map(|doc| &mut doc.profile.hosts) else { return };
        match edit {
            Edit::AddHost => {
                let name = fresh_host_name(hosts, (1..).map(|i| format!("host {i}")));
                // With no limits known yet, following what the server publishes is the useful start.
                hosts.push(HostProfile { adaptive: true, ..HostProfile::new(name, "https://api.example.com") });
                self.host = hosts.len() - 1;
            }
            Edit::DuplicateHost => {
                let Some(host) = hosts.get(selected) else { return };
                let name = fresh_host_name(hosts, (2..).map(|i| format!("{} {i}", host.name)));
                let copy = HostProfile { name, ..host.clone() };
                hosts.push(copy);
                self.host = hosts.len() - 1;
            }
            Edit::DeleteHost if selected < hosts.len() => {
                let removed = hosts.remove(selected);
                self.undo = Some((Undo::Host(profile, Box::new(removed), selected), Instant::now()));
                self.host = selected.saturating_sub(1);
                self.confirm_delete_host = false;
            }
            _ => {}
        }
    }

    /// A catalogue entry as a profile of its own, or added to the profile shown (with an undo
    /// offer).
    fn add_from_catalog(&mut self, picked: super::catalog::Picked) -> EditorAction {
        let entry = picked.entry;
        if picked.as_new_profile {
            let taken = |name: &str| self.profiles.iter().any(|doc| doc.profile.name == name);
            let (profile, message) = super::catalog::new_profile(taken, &mut self.secrets, &entry);
            self.profiles.push(ProfileDoc { profile, saved: None });
            (self.current, self.host) = (self.profiles.len() - 1, 0);
            return EditorAction::Unsaved(message);
        }
        let Some(doc) = self.profiles.get_mut(self.current) else { return EditorAction::None };
        let before = Box::new(doc.profile.clone());
        match super::catalog::add_entry(&mut doc.profile, &mut self.secrets, &entry) {
            Ok((host, message)) => {
                self.undo = Some((Undo::Catalog(self.current, before, entry.info.title), Instant::now()));
                self.host = host;
                EditorAction::Unsaved(message)
            }
            Err(message) => EditorAction::Message(message),
        }
    }
}

/// Delete, after a confirmation: the edit when the red button is pressed.
fn delete_profile_ui(ui: &mut egui::Ui, name: &str, confirm: &mut bool) -> Option<Edit> {
    if !*confirm {
        *confirm = ui.button("Delete").clicked();
        return None;
    }
    ui.label(format!("Delete '{name}'?"));
    let delete = ui.button(RichText::new("Delete").color(super::palette::status_colors(ui.visuals()).error)).clicked();
    if ui.button("Keep").clicked() {
        *confirm = false;
    }
    delete.then_some(Edit::DeleteProfile)
}

/// The host list, and adding, duplicating and (after a confirmation) deleting hosts.
fn host_list_ui(ui: &mut egui::Ui, hosts: &[HostProfile], selected: usize, confirm_delete: &mut bool) -> Vec<Edit> {
    let mut edits = Vec::new();
    for (index, host) in hosts.iter().enumerate() {
        let text = format!("{}  ·  {}", host.name, host.base_url);
        if ui.selectable_label(index == selected, text).clicked() {
            edits.push(Edit::SelectHost(index));
        }
    }
    ui.horizontal(|ui| {
        if ui.button("+ host").clicked() {
            edits.push(Edit::AddHost);
        }
        let Some(host) = hosts.get(selected) else { return };
        if ui.button("duplicate").clicked() {
            edits.push(Edit::DuplicateHost);
        }
        if !*confirm_delete {
            *confirm_delete = ui.button("delete").clicked();
            return;
        }
        let delete =
            RichText::new(format!("delete '{}'", host.name)).color(super::palette::status_colors(ui.visuals()).error);
        if ui.button(delete).clicked() {
            edits.push(Edit::DeleteHost);
        }
        if ui.button("keep").clicked() {
            *confirm_delete = false;
        }
    });
    edits
}

/// The first of `names` no host has yet.
fn fresh_host_name(hosts: &[HostProfile], mut names: impl Iterator<Item = String>) -> String {
    names.find(|name| hosts.iter().all(|host| &host.name != name)).unwrap_or_default()
}

/// What a host without budgets or a concurrency cap does, said under its limits.
pub fn no_limits_text(adaptive: bool) -> &'static str {
    if adaptive {
        "No limits set: requests are paced by what the server publishes (rate-limit headers, 429s with Retry-After)."
    } else {
        "No limits set and adaptive off: requests go out unpaced."
    }
}

/// Whether the host's limits are valid, said in green or red.
fn validity_ui(ui: &mut egui::Ui, host: &HostProfile) {
    let colors = super::palette::status_colors(ui.visuals());
    match host.limiter_config() {
        Ok(config) => ui.label(RichText::new(format!("valid: {}", config.describe())).color(colors.ok)),
        Err(err) => ui.label(RichText::new(err.to_string()).color(colors.error)),
    };
}

/// The host's limits (its own and its paths') to apply to a running burst at once, when valid.
fn live_limits(host: &HostProfile) -> EditorAction {
    let mut changes = Vec::new();
    if let (Ok(key), Ok(config)) = (host.key(), host.limiter_config()) {
        changes.push((key, config));
    }
    if let Ok(paths) = host.path_limits() {
        changes.extend(paths);
    }
    if changes.is_empty() { EditorAction::None } else { EditorAction::LiveLimits(changes) }
}

/// The "Export for…" menu: the format picked, when one is.
fn export_for_ui(ui: &mut egui::Ui) -> Option<ExportFormat> {
    let mut picked = None;
    ui.menu_button("Export for…", |ui| {
        ui.label(egui::RichText::new("the host being edited, as code for your stack").weak());
        for format in ExportFormat::ALL {
            if ui.button(format.label()).clicked() {
                picked = Some(format);
                ui.close();
            }
        }
    })
    .response
    .on_hover_text("Its limits as a Bottleneck, aiolimiter, governor or Go limiter (never more permissive)");
    picked
}

#[cfg(test)]
pub(super) mod tests {
    use egui_kittest::Harness;
    use egui_kittest::kittest::Queryable;

    use super::*;
    use crate::profile::{BudgetEntry, PathOverride, RetryEntry, SecretStatus};

    /// An editor holding the demo profile (saved), shown as the app shows it.
    pub(in crate::gui) fn harness() -> Harness<'static, Editor> {
        harness_with(Profile::demo().unwrap())
    }

    /// An editor holding `profile` as saved, shown as the app shows it.
    fn harness_with(profile: Profile) -> Harness<'static, Editor> {
        let editor = Editor {
            profiles: vec![ProfileDoc { profile: profile.clone(), saved: Some(profile) }],
            loaded: true,
            secrets: SecretStore::in_memory(),
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

    /// A saved profile whose host leaves out everything it may: no retry policy, no headers, a
    /// token bucket without a capacity, a sliding window without a window, a path budget
    /// without a limit, and a secret header with no value stored.
    fn sparse_profile() -> Profile {
        let mut host = HostProfile::new("sparse", "http://127.0.0.1:9");
        let bucket = BudgetEntry { capacity: None, ..BudgetEntry::token_bucket("rate", 1, "5/1s") };
        let window = BudgetEntry { window: None, ..BudgetEntry::sliding_window("hour", 100, "1h") };
        host.budgets = vec![bucket, window];
        let path_budget = BudgetEntry { limit: None, ..BudgetEntry::sliding_window("search", 2, "1s") };
        host.paths = vec![PathOverride { prefix: "/search".into(), concurrency: Some(2), budgets: vec![path_budget] }];
        host.secret_headers = vec!["authorization".into()];
        Profile { hosts: vec![host], ..Profile::new("sparse") }
    }

    /// Opens every section of the host editor (and the catalogue picker, then cancels it).
    fn open_every_section(harness: &mut Harness<'static, Editor>) {
        assert!(harness.get_all_by_label("path prefix").next().is_some(), "Per-path limits is open with its paths");
        for section in ["Retry", "Headers", "Secrets"] {
            harness.get_by_label(section).click_accesskit();
            harness.run();
        }
        harness.get_by_label("New host from catalogue…").click();
        harness.run();
        harness.get_by_label("Cancel").click();
        harness.run();
        for shown in ["attempts", "add", "add secret header"] {
            assert!(harness.get_all_by_label(shown).next().is_some(), "{shown} is shown: its section is open");
        }
    }

    /// Issue #33 item 5: drawing never writes the model. Opening Retry used to give the host
    /// a retry policy, and a budget missing a value had it filled in while being drawn.
    #[test]
    fn opening_every_section_of_a_saved_profile_leaves_it_saved() {
        for profile in [Profile::demo().unwrap(), sparse_profile()] {
            let name = profile.name.clone();
            let mut harness = harness_with(profile.clone());
            harness.run();
            open_every_section(&mut harness);
            harness.run_steps(3);
            assert!(harness.state().unsaved().is_empty(), "{name}: {:?}", harness.state().unsaved());
            assert_eq!(harness.state().profile(), Some(&profile), "{name}: the model is as loaded");
            assert!(harness.query_all_by_label_contains(" •").next().is_none(), "{name}: no unsaved marker");
            let disabled_save = egui_kittest::kittest::By::new().label("Save").predicate(|node| node.is_disabled());
            assert!(harness.query(disabled_save).is_some(), "{name}: nothing to save");
        }
    }

    /// Each button that removes something still does, through the one place edits are made,
    /// and the profile is marked unsaved.
    #[test]
    fn removing_a_budget_a_path_or_a_header_by_its_button_marks_the_profile_unsaved() {
        type Check = fn(&HostProfile) -> bool;
        let cases: [(Option<&str>, &str, Check); 4] = [
            (None, "remove budget minute", |host| host.budgets.iter().map(|b| b.name.as_str()).eq(["rate"])),
            (None, "remove path /slow", |host| host.paths.len() == 6 && host.paths.iter().all(|p| p.prefix != "/slow")),
            (Some("Headers"), "remove header accept", |host| host.headers.is_empty()),
            (None, "remove budget search", |host| host.paths[0].budgets.is_empty() && host.budgets.len() == 2),
        ];
        for (section, button, removed) in cases {
            let mut harness = harness();
            if let Some(section) = section {
                harness.get_by_label(section).click_accesskit();
                harness.run();
            }
            // The host's own budget comes before any path's of the same name. (Headers lies
            // below the window with the demo's paths open: clicked as a screen reader does.)
            harness.get_all_by_label(button).next().unwrap_or_else(|| panic!("no {button}")).click_accesskit();
            harness.run();
            let host = harness.state().selected_host().unwrap().clone();
            assert!(removed(&host), "{button}: {host:?}");
            assert_eq!(harness.state().unsaved(), ["demo"], "{button}");
        }
    }

    #[test]
    fn a_retry_edit_gives_a_host_without_a_policy_its_own() {
        let mut harness = harness_with(sparse_profile());
        harness.get_by_label("Retry").click_accesskit();
        harness.run();
        assert_eq!(harness.state().selected_host().unwrap().retry, None, "opened, not edited");
        harness.get_by_label("retry connection errors").click();
        harness.run();
        let retry = harness.state().selected_host().unwrap().retry.clone().unwrap();
        assert_eq!(retry, RetryEntry { retry_connection_errors: Some(true), ..RetryEntry::default() });
        assert_eq!(harness.state().unsaved(), ["sparse"]);
    }

    #[test]
    fn a_budget_switched_to_the_other_kind_takes_that_kinds_numbers_and_stays_valid() {
        let mut profile = sparse_profile();
        profile.hosts[0].budgets =
            vec![BudgetEntry { unit: Some("tokens".into()), ..profile.hosts[0].budgets[0].clone() }];
        profile.hosts[0].paths.clear();
        let mut harness = harness_with(profile);
        harness.get_by_label("budget kind").click();
        harness.run();
        harness.get_by_label("sliding window").click();
        harness.run();
        let host = harness.state().selected_host().unwrap().clone();
        let expected = BudgetEntry { unit: Some("tokens".into()), ..BudgetEntry::sliding_window("rate", 1000, "1h") };
        assert_eq!(host.budgets, [expected], "no token-bucket field is left behind");
        host.limiter_config().unwrap();
    }

    #[test]
    fn a_secret_value_is_set_and_a_secret_header_removed_with_it() {
        let mut harness = harness_with(sparse_profile());
        harness.get_by_label("Secrets").click_accesskit();
        harness.run();
        harness.get_by_label("new secret value of authorization").focus();
        harness.run();
        harness.get_by_label("new secret value of authorization").type_text("Bearer s3cret");
        harness.run();
        harness.get_by_label("set").click();
        harness.run();
        let status = |editor: &Editor| editor.secrets.status("sparse", "sparse", "authorization");
        assert_eq!(status(harness.state()), SecretStatus::Stored);
        assert!(harness.state().unsaved().is_empty(), "a value lives in the secret store, not the profile");
        harness.get_by_label("remove secret header authorization").click();
        harness.run();
        assert!(harness.state().selected_host().unwrap().secret_headers.is_empty());
        assert_eq!(status(harness.state()), SecretStatus::Missing, "its value went with it");
        assert_eq!(harness.state().unsaved(), ["sparse"]);
    }

    #[test]
    fn a_deleted_profile_comes_back_with_undo_as_unsaved() {
        let mut harness = harness();
        harness.get_by_label("Delete").click();
        harness.run();
        harness.get_by_label("Delete 'demo'?");
        harness.get_by_label("Delete").click();
        harness.run();
        assert!(harness.state().profiles.is_empty());
        harness.get_by_label("Undo").click();
        harness.run();
        assert_eq!(harness.state().profile().map(|p| p.name.as_str()), Some("demo"));
        assert_eq!(harness.state().unsaved(), ["demo"], "its file was moved aside: it is unsaved");
    }

    /// During a burst, an edit to the limits goes to the burst in the same frame.
    #[test]
    fn a_limit_edit_during_a_burst_is_applied_live() {
        let demo = Profile::demo().unwrap();
        let editor = Editor {
            profiles: vec![ProfileDoc { profile: demo.clone(), saved: Some(demo) }],
            loaded: true,
            ..Editor::default()
        };
        let mut harness = Harness::builder().with_size(egui::vec2(900.0, 1400.0)).build_ui_state(
            |ui, (editor, live): &mut (Editor, Vec<Vec<(LimitKey, LimiterConfig)>>)| {
                if let EditorAction::LiveLimits(changes) = editor.editor_ui(ui, true) {
                    live.push(changes);
                }
            },
            (editor, Vec::new()),
        );
        harness.get_by_label("Headers").click_accesskit();
        harness.run();
        assert!(harness.state().1.is_empty(), "opening a section changes no limit");
        harness.get_all_by_label("remove budget minute").next().unwrap().click();
        harness.run();
        let live = &harness.state().1;
        assert_eq!(live.len(), 1, "one change, sent once");
        let (key, config) = &live[0][0];
        assert_eq!(key, &harness.state().0.selected_host().unwrap().key().unwrap());
        let names: Vec<&str> = config.budgets.iter().map(|budget| budget.name.as_str()).collect();
        assert_eq!(names, ["rate"], "the host's limits without the removed budget");
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
