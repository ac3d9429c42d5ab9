//! "Save as": where an export goes, typed as a path (the desktop's file dialog is optional:
//! without a portal it cannot open, and the path field still works), and what the app then says.

use std::path::PathBuf;

/// The title of the save window.
pub const SAVE_AS_TITLE: &str = "Save as";

/// An export waiting for its path.
#[derive(Debug, Clone)]
pub struct SaveAs {
    /// What is being saved, as the window's first line says it: "the summary as JSON".
    pub what: String,
    /// Where it goes; edited freely (a path, not a parsed value).
    pub path: String,
    /// The file's bytes, made when the export was asked for.
    contents: Vec<u8>,
}

/// What the save window asks the app to do.
#[derive(Debug, PartialEq)]
pub enum SaveAsAction {
    None,
    /// Write `contents` to `path` (the backend says where the file went, or why not).
    Write {
        path: PathBuf,
        contents: Vec<u8>,
        what: String,
    },
    /// Open the desktop's file dialog instead.
    Browse {
        title: String,
        default_name: String,
        contents: Vec<u8>,
    },
    Cancel,
}

impl SaveAs {
    /// Offers to save `contents` as `default_name` in the current directory.
    pub fn offer(what: impl Into<String>, default_name: &str, contents: Vec<u8>) -> Self {
        let directory = std::env::current_dir().unwrap_or_default();
        Self { what: what.into(), path: directory.join(default_name).display().to_string(), contents }
    }

    /// The window; returns what was pressed.
    pub fn save_as_ui(&mut self, ctx: &egui::Context) -> SaveAsAction {
        let mut action = SaveAsAction::None;
        let window = egui::Window::new(SAVE_AS_TITLE).collapsible(false).resizable(false);
        // In the middle of the window, where the eye is after a click, not over the top bar.
        let window = window.pivot(egui::Align2::CENTER_CENTER).default_pos(ctx.content_rect().center());
        window.show(ctx, |ui| {
            ui.label(format!("Save {} to:", self.what));
            let field =
                ui.add(egui::TextEdit::singleline(&mut self.path).desired_width(380.0)).accessible_name("save to path");
            let entered = field.lost_focus() && ui.input(|input| input.key_pressed(egui::Key::Enter));
            ui.weak("Type a path, or browse with the desktop's file dialog (when one is installed).");
            ui.horizontal(|ui| {
                let path = self.path.trim();
                let save = ui.add_enabled(!path.is_empty(), egui::Button::new("Save"));
                if (save.clicked() || entered) && !path.is_empty() {
                    action = SaveAsAction::Write {
                        path: PathBuf::from(path),
                        contents: self.contents.clone(),
                        what: self.what.clone(),
                    };
                }
                if ui.button("Browse…").clicked() {
                    let default_name = PathBuf::from(path)
                        .file_name()
                        .map(|name| name.to_string_lossy().into_owned())
                        .unwrap_or_default();
                    action = SaveAsAction::Browse {
                        title: format!("Save {}", self.what),
                        default_name,
                        contents: self.contents.clone(),
                    };
                }
                if ui.button("Cancel").clicked() {
                    action = SaveAsAction::Cancel;
                }
            });
        });
        action
    }
}

#[cfg(test)]
mod tests {
    use egui_kittest::Harness;
    use egui_kittest::kittest::Queryable;

    use super::*;

    #[test]
    fn a_typed_path_is_where_the_file_goes() {
        let mut harness = Harness::builder().with_size(egui::vec2(800.0, 400.0)).build_ui_state(
            |ui, (save, action): &mut (SaveAs, Option<SaveAsAction>)| {
                let pressed = save.save_as_ui(ui.ctx());
                if pressed != SaveAsAction::None {
                    *action = Some(pressed);
                }
            },
            (SaveAs::offer("the summary as JSON", "summary.json", b"{}".to_vec()), None),
        );
        harness.run();
        harness.get_by_label("Save the summary as JSON to:");
        assert!(harness.state().0.path.ends_with("summary.json"), "a default path is offered");
        harness.get_by_label("save to path").focus();
        harness.key_press_modifiers(egui::Modifiers::COMMAND, egui::Key::A);
        harness.key_press(egui::Key::Backspace);
        harness.get_by_label("save to path").type_text("/tmp/x.json");
        harness.run();
        harness.get_by_label("Save").click();
        harness.run();
        let Some(SaveAsAction::Write { path, contents, .. }) = &harness.state().1 else {
            panic!("no write: {:?}", harness.state().1)
        };
        assert_eq!((path.as_path(), contents.as_slice()), (std::path::Path::new("/tmp/x.json"), &b"{}"[..]));
    }
}
