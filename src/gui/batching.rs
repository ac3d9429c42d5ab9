//! The composer's batching control for an endpoint with a batch template: off, or on with a
//! max size and a max wait. Drawn from its state; returns what the user changed.

use crate::engine::parse_duration;
use crate::http::BatchPlan;
use crate::profile::BatchEntry;

/// An endpoint's batching as the composer edits it (the template's parameter and separator
/// come from the profile; size and wait are typed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchDraft {
    /// The template's query parameter (`ids`).
    pub param: String,
    /// The template's separator, when not a comma.
    pub separator: Option<String>,
    /// Items go in batches; off sends one request per item request.
    pub on: bool,
    /// The most items per batch.
    pub max_size: usize,
    /// How long a batch waits after its first item, as typed.
    pub max_wait: String,
}

/// A change made in [`batch_ui`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BatchAction {
    /// Batching switched on or off.
    Switch(bool),
    /// A new max size.
    Size(usize),
    /// The max wait as now typed.
    Wait(String),
}

impl BatchDraft {
    /// The draft of a profile endpoint's batch template, switched on.
    pub fn from_entry(entry: &BatchEntry) -> Self {
        Self {
            param: entry.param.clone(),
            separator: entry.separator.clone(),
            on: true,
            max_size: entry.max_size,
            max_wait: entry.max_wait.clone(),
        }
    }

    /// The template as a profile writes it (kept whether batching is on or off).
    pub fn entry(&self) -> BatchEntry {
        BatchEntry {
            param: self.param.clone(),
            max_size: self.max_size,
            max_wait: self.max_wait.trim().to_owned(),
            separator: self.separator.clone(),
        }
    }

    /// The plan a burst fires with: `None` when off, an error naming the bad field otherwise.
    pub fn plan(&self) -> Result<Option<BatchPlan>, String> {
        if !self.on {
            return Ok(None);
        }
        let wait = parse_duration(&self.max_wait).map_err(|err| format!("batch max wait: {err}"))?;
        BatchPlan::new(&self.param, self.separator.as_deref(), self.max_size, wait)
            .map(Some)
            .map_err(|err| format!("batch: {err}"))
    }

    /// Applies a change from [`batch_ui`].
    pub fn apply(&mut self, action: BatchAction) {
        match action {
            BatchAction::Switch(on) => self.on = on,
            BatchAction::Size(size) => self.max_size = size,
            BatchAction::Wait(text) => self.max_wait = text,
        }
    }
}

/// The control: a checkbox naming the parameter, then size and wait while on.
pub fn batch_ui(ui: &mut egui::Ui, draft: &BatchDraft) -> Option<BatchAction> {
    let mut action = None;
    let mut on = draft.on;
    let label = format!("batch ?{}=", draft.param);
    let switch = ui.checkbox(&mut on, label).on_hover_text(
        "send the item requests in batches: one GET carries many ids, each request gets its own item back",
    );
    if switch.changed() {
        action = Some(BatchAction::Switch(on));
    }
    if draft.on {
        let mut size = draft.max_size;
        let size_edit = ui
            .add(egui::DragValue::new(&mut size).range(1..=crate::http::batch::MAX_BATCH_SIZE).prefix("max "))
            .accessible_name("batch max size")
            .on_hover_text("the most ids in one request");
        if size_edit.changed() {
            action = Some(BatchAction::Size(size));
        }
        let mut wait = draft.max_wait.clone();
        let wait_edit = ui
            .add(egui::TextEdit::singleline(&mut wait).desired_width(50.0).hint_text("20ms"))
            .accessible_name("batch max wait")
            .on_hover_text("how long a batch waits for more ids after its first");
        if wait_edit.changed() {
            action = Some(BatchAction::Wait(wait));
        }
        if let Err(err) = parse_duration(&draft.max_wait) {
            ui.label(egui::RichText::new("wait?").color(super::palette::status_colors(ui.visuals()).error).small())
                .on_hover_text(format!("batch max wait: {err}"));
        }
    }
    action
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_draft_becomes_the_plan_it_shows() {
        let entry = BatchEntry { param: "ids".into(), max_size: 50, max_wait: "20ms".into(), separator: None };
        let mut draft = BatchDraft::from_entry(&entry);
        assert_eq!(draft.plan().unwrap().unwrap().settings.max_size, 50);
        draft.apply(BatchAction::Size(7));
        draft.apply(BatchAction::Wait("1s".into()));
        let plan = draft.plan().unwrap().unwrap();
        assert_eq!((plan.settings.max_size, plan.settings.max_wait), (7, Duration::from_secs(1)));
        draft.apply(BatchAction::Wait("later".into()));
        assert!(draft.plan().unwrap_err().contains("batch max wait"));
        draft.apply(BatchAction::Switch(false));
        assert_eq!(draft.plan(), Ok(None));
        assert_eq!(draft.entry().max_wait, "later");
    }
}
