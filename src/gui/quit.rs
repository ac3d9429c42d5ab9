//! Leaving the app with unsaved work: a close request is held while any profile has edits not
//! on disk, and a prompt asks to save them all, discard them, or stay.
//!
//! The window closes only once every save the prompt asked for is confirmed by the background
//! (a failed save keeps the window open and says why), or after "Quit without saving".

/// The prompt's title.
pub const QUIT_TITLE: &str = "Unsaved changes";

/// Where leaving stands.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Quit {
    /// No close asked for.
    #[default]
    Staying,
    /// A close was held: these profiles have unsaved edits, and the prompt is open.
    Asking {
        /// The profiles' names.
        unsaved: Vec<String>,
    },
    /// "Save and quit": waiting for the background to confirm these saves.
    Saving {
        /// The profiles not yet confirmed saved.
        waiting: Vec<String>,
    },
    /// Closing: nothing is held any more.
    Leaving,
}

/// What the prompt asks the app to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuitAction {
    /// Nothing pressed.
    None,
    /// Save every profile with unsaved edits, then close.
    SaveAll,
    /// Close and lose the edits.
    Discard,
    /// Stay.
    Cancel,
}

impl Quit {
    /// A close was requested while `unsaved` profiles have edits: whether to let it happen now.
    pub fn close_requested(&mut self, unsaved: Vec<String>) -> bool {
        match self {
            Self::Leaving => true,
            // Asked again while saving or asking (a second click on the window's ✕): keep waiting.
            Self::Saving { .. } | Self::Asking { .. } => false,
            Self::Staying if unsaved.is_empty() => {
                *self = Self::Leaving;
                true
            }
            Self::Staying => {
                *self = Self::Asking { unsaved };
                false
            }
        }
    }

    /// A save the prompt waits for was confirmed; true when it was the last one (close now).
    pub fn saved(&mut self, name: &str) -> bool {
        let Self::Saving { waiting } = self else { return false };
        waiting.retain(|waiting| waiting != name);
        if waiting.is_empty() {
            *self = Self::Leaving;
            return true;
        }
        false
    }

    /// A save failed: quitting stops (the window stays open with the error shown).
    pub fn save_failed(&mut self) {
        if matches!(self, Self::Saving { .. }) {
            *self = Self::Staying;
        }
    }
}

/// The prompt, while a close is held; returns what was pressed (Esc is Cancel).
pub fn quit_prompt_ui(ctx: &egui::Context, quit: &Quit) -> QuitAction {
    let (unsaved, saving) = match quit {
        Quit::Asking { unsaved } => (unsaved, false),
        Quit::Saving { waiting } => (waiting, true),
        Quit::Staying | Quit::Leaving => return QuitAction::None,
    };
    let mut action = QuitAction::None;
    let modal = egui::Modal::new(egui::Id::unique(QUIT_TITLE)).show(ctx, |ui| {
        ui.set_max_width(420.0);
        ui.heading(QUIT_TITLE);
        let names: Vec<String> = unsaved.iter().map(|name| format!("'{name}'")).collect();
        if saving {
            ui.horizontal(|ui| {
                ui.spinner();
                ui.label(format!("Saving {}…", names.join(", ")));
            });
            return;
        }
        let which = if names.len() == 1 { "The profile" } else { "The profiles" };
        ui.label(format!("{which} {} {} changes that are not saved.", names.join(", "), has(names.len())));
        ui.add_space(8.0);
        ui.horizontal(|ui| {
            if ui.button("Save and quit").clicked() {
                action = QuitAction::SaveAll;
            }
            if ui.button("Quit without saving").clicked() {
                action = QuitAction::Discard;
            }
            if ui.button("Cancel").clicked() {
                action = QuitAction::Cancel;
            }
        });
    });
    if modal.should_close() && action == QuitAction::None && !saving {
        action = QuitAction::Cancel;
    }
    action
}

fn has(count: usize) -> &'static str {
    if count == 1 { "has" } else { "have" }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_close_with_nothing_unsaved_goes_through_at_once() {
        let mut quit = Quit::default();
        assert!(quit.close_requested(Vec::new()));
        assert_eq!(quit, Quit::Leaving);
    }

    #[test]
    fn a_close_with_unsaved_work_waits_for_every_save() {
        let mut quit = Quit::default();
        assert!(!quit.close_requested(vec!["demo".into(), "gh".into()]));
        assert_eq!(quit, Quit::Asking { unsaved: vec!["demo".into(), "gh".into()] });
        assert!(!quit.close_requested(vec!["demo".into()]), "a second ✕ while asking is held too");
        quit = Quit::Saving { waiting: vec!["demo".into(), "gh".into()] };
        assert!(!quit.saved("demo"));
        assert!(!quit.close_requested(Vec::new()), "held while saves are on their way");
        assert!(quit.saved("gh"), "the last confirmation closes");
        assert_eq!(quit, Quit::Leaving);
        assert!(quit.close_requested(vec!["anything".into()]));
    }

    #[test]
    fn a_failed_save_stops_quitting() {
        let mut quit = Quit::Saving { waiting: vec!["demo".into()] };
        quit.save_failed();
        assert_eq!(quit, Quit::Staying);
        assert!(!quit.saved("demo"), "a late confirmation does not close");
    }
}
