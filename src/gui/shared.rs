//! The "share via Redis" row: the toggle, the store's URL and shared key, the fail policy, and the connection indicator.

use crate::profile::Profile;
use crate::store::{FailPolicy, SharedReport, SharedSettings};

const POLICIES: [(&str, &str); 3] = [
    ("fail-closed", "wait until Redis answers again: never over the shared budget"),
    ("fail-open", "send anyway (counted): keeps working, may overrun"),
    ("local/2", "pace by half of each budget in-process (two instances expected)"),
];

/// What the row edits.
#[derive(Debug, Clone, PartialEq)]
pub struct SharedDraft {
    pub on: bool,
    pub url: String,
    pub key: String,
    pub policy: String,
    /// The profile's CA file for `rediss://`, kept as adopted (not edited in the row).
    pub ca_file: Option<String>,
}

impl Default for SharedDraft {
    fn default() -> Self {
        Self {
            on: false,
            url: "redis://127.0.0.1:6379".into(),
            key: String::new(),
            policy: "fail-closed".into(),
            ca_file: None,
        }
    }
}

impl SharedDraft {
    /// The settings to fire with: `None` when sharing is off. An empty key takes the profile's name.
    pub fn settings(&self, profile: &Profile) -> Result<Option<SharedSettings>, String> {
        if !self.on {
            return Ok(None);
        }
        let key = if self.key.trim().is_empty() { profile.name.clone() } else { self.key.trim().to_owned() };
        let policy: FailPolicy = self.policy.parse().map_err(|err| format!("on Redis failure: {err}"))?;
        let mut settings = SharedSettings::new(self.url.trim(), key)
            .and_then(|settings| settings.with_policy(policy))
            .map_err(|err| format!("share via Redis: {err}"))?;
        settings.ca_file = self.ca_file.as_ref().map(Into::into);
        Ok(Some(settings))
    }

    /// Takes the profile's `[shared]` table, if it has one (URL references stay as written).
    pub fn adopt(&mut self, profile: &Profile) {
        if let Some(shared) = &profile.shared {
            self.on = true;
            self.url.clone_from(&shared.redis);
            self.key.clone_from(&shared.key);
            self.policy = shared.on_failure.clone().unwrap_or_else(|| "fail-closed".into());
            self.ca_file.clone_from(&shared.ca_file);
        }
    }
}

/// The row: toggle, URL, key, policy, and the indicator of the last known store state.
pub fn shared_ui(ui: &mut egui::Ui, draft: &mut SharedDraft, report: Option<&SharedReport>, profile_name: &str) {
    ui.horizontal_wrapped(|ui| {
        ui.checkbox(&mut draft.on, "share budgets via Redis")
            .on_hover_text("decide this profile's budgets in Redis, shared with every process using the same key");
        ui.add_enabled_ui(draft.on, |ui| {
            ui.add(egui::TextEdit::singleline(&mut draft.url).desired_width(170.0).hint_text("redis://host:6379"))
                .on_hover_text("redis://, rediss:// (TLS), redis+cluster://host:port,host:port (Cluster)")
                .accessible_name("Redis URL");
            ui.label("key");
            ui.add(egui::TextEdit::singleline(&mut draft.key).desired_width(110.0).hint_text(profile_name))
                .accessible_name("shared key")
                .on_hover_text("every process sharing the budget uses this name (default: the profile's name)");
            let combo =
                egui::ComboBox::from_id_salt("fail policy").selected_text(draft.policy.clone()).show_ui(ui, |ui| {
                    for (name, help) in POLICIES {
                        ui.selectable_value(&mut draft.policy, name.to_owned(), name).on_hover_text(help);
                    }
                });
            let _ = combo
                .response
                .accessible_name("on Redis failure")
                .on_hover_text("what to do while Redis is unreachable");
        });
        if draft.on {
            indicator_ui(ui, report);
        }
    });
}

/// A coloured dot and the store's state, with the counters on hover.
fn indicator_ui(ui: &mut egui::Ui, report: Option<&SharedReport>) {
    let (color, text) = match report {
        None => (egui::Color32::GRAY, "not connected yet: fire a burst".to_owned()),
        Some(report) if report.state == "connected" => {
            // A failover or restart shows as connected again, with how often it happened.
            let text = match report.counts.recoveries {
                0 => "connected".to_owned(),
                n => format!("connected again ({n} recoveries)"),
            };
            (egui::Color32::from_rgb(80, 190, 100), text)
        }
        Some(report) if report.state.starts_with("degraded") => {
            (egui::Color32::from_rgb(235, 150, 50), report.state.clone())
        }
        Some(report) => (egui::Color32::GRAY, report.state.clone()),
    };
    // A painted dot: the default fonts have no filled-circle glyph.
    let (dot, _) = ui.allocate_exact_size(egui::vec2(10.0, 10.0), egui::Sense::hover());
    ui.painter().circle_filled(dot.center(), 4.5, color);
    let label = ui.label(egui::RichText::new(text).color(color));
    if let Some(report) = report {
        label.on_hover_text(format!(
            "{}
{}",
            report.keys.join(", "),
            report.counts
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_come_from_the_draft_or_the_profile() {
        let profile = Profile::new("partner");
        let mut draft = SharedDraft::default();
        assert_eq!(draft.settings(&profile).unwrap(), None, "off: nothing shared");
        draft.on = true;
        let settings = draft.settings(&profile).unwrap().unwrap();
        assert_eq!(settings.name, "partner", "an empty key takes the profile's name");
        assert_eq!(settings.policy, FailPolicy::Closed);
        draft.policy = "sometimes".into();
        assert!(draft.settings(&profile).unwrap_err().contains("fail policy"));
        draft.policy = "local/2".into();
        draft.url = "http://nope".into();
        assert!(draft.settings(&profile).unwrap_err().contains("not a Redis URL"));
    }
}
