//! "New host from catalogue…": pick a known API (its tier, documentation page and retry advice
//! shown) and add its host and limits to the open profile, or make a new profile of it.

use egui::RichText;

use crate::profile::catalog::{self, CatalogEntry};
use crate::profile::{BudgetEntry, Profile, SecretStore};

/// An entry picked, and where it goes.
pub struct Picked {
    pub entry: CatalogEntry,
    /// A profile of its own, rather than the open one.
    pub as_new_profile: bool,
}

/// The picker's state: open or not, the entries (read once) and the one chosen.
#[derive(Default)]
pub struct CatalogPicker {
    open: bool,
    chosen: usize,
    entries: Option<Result<Vec<CatalogEntry>, String>>,
}

impl CatalogPicker {
    /// The button, and while open the list of entries with the chosen one's details; returns
    /// the entry when "Add to profile" or "As a new profile" is clicked.
    pub fn catalog_ui(&mut self, ui: &mut egui::Ui) -> Option<Picked> {
        if !self.open {
            self.open = ui.button("New host from catalogue…").clicked();
            return None;
        }
        let entries = self.entries.get_or_insert_with(|| catalog::entries().map_err(|err| err.to_string()));
        let entries = match entries {
            Ok(entries) => entries,
            Err(err) => {
                ui.label(
                    RichText::new(format!("the catalogue cannot be read: {err}")).color(ui.visuals().error_fg_color),
                );
                self.open = !ui.button("Close").clicked();
                return None;
            }
        };
        let mut picked = None;
        egui::Frame::group(ui.style()).show(ui, |ui| {
            ui.label(RichText::new("New host from catalogue").strong());
            egui::ScrollArea::vertical().max_height(180.0).id_salt("catalogue entries").show(ui, |ui| {
                for (index, entry) in entries.iter().enumerate() {
                    let text = format!("{}  ({})", entry.info.title, entry.id);
                    if ui.selectable_label(index == self.chosen, text).clicked() {
                        self.chosen = index;
                    }
                }
            });
            let Some(entry) = entries.get(self.chosen) else { return };
            entry_details_ui(ui, entry);
            ui.horizontal(|ui| {
                for (label, as_new_profile) in [("Add to profile", false), ("As a new profile", true)] {
                    if ui.button(label).clicked() {
                        picked = Some(Picked { entry: entry.clone(), as_new_profile });
                        self.open = false;
                    }
                }
                if ui.button("Cancel").clicked() {
                    self.open = false;
                }
            });
        });
        picked
    }
}

/// What the entry assumes, where its numbers come from, and what it asks after a refusal.
fn entry_details_ui(ui: &mut egui::Ui, entry: &CatalogEntry) {
    let host = entry.host();
    ui.label(format!("{} · {}", host.base_url, limits_text(entry)));
    ui.label(format!("assumes: {}", entry.info.tier));
    ui.horizontal(|ui| {
        ui.label("from:");
        ui.hyperlink(&entry.info.docs);
    });
    ui.label(format!("headers: {} · on refusal: {}", entry.info.dialect, entry.info.retry));
    let vars: Vec<String> = entry.env_vars().iter().map(|var| format!("${var}")).collect();
    ui.label(RichText::new(format!("credentials from {} (Secrets below)", vars.join(", "))).italics());
}

/// `window 5000/1h, window 900/1m, concurrency 100` and each path's limits.
fn limits_text(entry: &CatalogEntry) -> String {
    let host = entry.host();
    let mut parts = Vec::new();
    if let Ok(config) = host.limiter_config()
        && (!config.budgets.is_empty() || config.concurrency.is_some())
    {
        parts.push(config.describe());
    }
    for path in &host.paths {
        if let Ok(budgets) = path.budgets.iter().map(BudgetEntry::to_budget).collect::<Result<Vec<_>, _>>() {
            let described: Vec<String> = budgets.iter().map(|budget| budget.describe()).collect();
            parts.push(format!("{}: {}", path.prefix, described.join(", ")));
        }
    }
    parts.join("; ")
}

/// Adds `entry` to `profile` and files its `${ENV}` references in `secrets`; returns the host's
/// index and what happened, or why nothing did.
pub fn add_entry(
    profile: &mut Profile,
    secrets: &mut SecretStore,
    entry: &CatalogEntry,
) -> Result<(usize, String), String> {
    let added = profile.add_catalog_entry(entry).map_err(|err| format!("'{}' not added: {err}", entry.info.title))?;
    let filed = entry.file_secrets(secrets, &profile.name, &added.host);
    let index = profile.hosts.iter().position(|host| host.name == added.host).unwrap_or_default();
    let into = if added.new_host { "new host" } else { "host" };
    let secrets =
        if filed.is_empty() { String::new() } else { format!("; {} read from the environment", filed.join(", ")) };
    Ok((index, format!("added {} to {into} '{}'{secrets} (unsaved: Ctrl+S keeps it)", entry.info.title, added.host)))
}

/// A new profile of `entry`, named by its id (or the first of `id 2`, `id 3`, ... that
/// `taken` refuses), its `${ENV}` references filed in `secrets`; and what happened.
pub fn new_profile(taken: impl Fn(&str) -> bool, secrets: &mut SecretStore, entry: &CatalogEntry) -> (Profile, String) {
    let mut names = std::iter::once(entry.id.to_owned()).chain((2..).map(|n| format!("{} {n}", entry.id)));
    let name = names.find(|name| !taken(name)).unwrap_or_default();
    let profile = entry.to_profile(&name);
    entry.file_secrets(secrets, &profile.name, &profile.hosts[0].name);
    let message = format!("new profile '{name}' from {} (unsaved: Ctrl+S keeps it)", entry.info.title);
    (profile, message)
}

#[cfg(test)]
mod tests {
    use egui_kittest::Harness;
    use egui_kittest::kittest::Queryable;

    use super::super::editor::Editor;
    use super::super::editor::tests::harness;
    use crate::profile::SecretStatus;

    /// The editor holding the demo profile, with the picker opened by its button.
    fn picker() -> Harness<'static, Editor> {
        let mut harness = harness();
        harness.get_by_label("New host from catalogue…").click();
        harness.run();
        harness
    }

    #[test]
    fn an_entry_is_picked_added_to_the_open_profile_and_undone() {
        let mut harness = picker();
        harness.get_by_label("Stripe API  (stripe)").click();
        harness.run();
        harness.get_by_label("https://docs.stripe.com/rate-limits");
        assert!(harness.query_by_label_contains("live mode: 100 operations a second").is_some());
        harness.get_by_label("Add to profile").click();
        harness.run();
        let profile = &harness.state().profiles[0].profile;
        let names: Vec<&str> = profile.hosts.iter().map(|host| host.name.as_str()).collect();
        assert_eq!(names, ["demo API", "Stripe"]);
        assert_eq!(profile.hosts[1].budgets[0].limit, Some(100));
        assert_eq!(harness.state().host, 1, "the added host is selected");
        assert!(harness.state().profiles[0].is_dirty());
        assert_eq!(
            harness.state().secrets.status("demo", "Stripe", "authorization"),
            SecretStatus::FromEnv(vec!["STRIPE_SECRET_KEY".into()])
        );
        assert!(harness.query_by_label("Add to profile").is_none(), "the picker closed");
        harness.get_by_label("Undo").click();
        harness.run();
        let profile = &harness.state().profiles[0].profile;
        assert_eq!(profile.hosts.len(), 1, "undo takes the added host away");
        assert!(!harness.state().profiles[0].is_dirty());
    }

    #[test]
    fn an_entry_becomes_a_new_profile_of_its_own() {
        let mut harness = picker();
        harness.get_by_label("OpenAI API  (openai)").click();
        harness.run();
        harness.get_by_label("As a new profile").click();
        harness.run();
        let state = harness.state();
        assert_eq!(state.profiles.len(), 2);
        assert_eq!(state.profiles[0].profile.hosts.len(), 1, "the open profile is untouched");
        let made = &state.profiles[1];
        assert_eq!((made.profile.name.as_str(), state.current), ("openai", 1), "the new one is selected");
        assert_eq!(made.profile.hosts, crate::profile::catalog::entry("openai").unwrap().profile.hosts);
        assert!(made.is_dirty(), "not saved until Ctrl+S");
        assert_eq!(
            state.secrets.status("openai", "OpenAI", "authorization"),
            SecretStatus::FromEnv(vec!["OPENAI_API_KEY".into()])
        );
    }

    #[test]
    fn cancel_adds_nothing() {
        let mut harness = picker();
        harness.get_by_label("Cancel").click();
        harness.run();
        assert_eq!(harness.state().profiles[0].profile.hosts.len(), 1);
        harness.get_by_label("New host from catalogue…");
    }
}
