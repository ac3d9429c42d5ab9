//! Short messages in a corner of the window that fade by themselves: errors inline, never a blocking modal.

use std::time::{Duration, Instant};

use egui::RichText;

const SHOW_FOR: Duration = Duration::from_secs(6);
const MAX_SHOWN: usize = 5;

#[derive(Debug, Clone, PartialEq)]
struct Toast {
    text: String,
    error: bool,
    /// What the message is about, so it goes once that is settled (e.g. "save").
    topic: Option<&'static str>,
    since: Instant,
}

/// The messages on screen.
#[derive(Debug, Default)]
pub struct Toasts {
    shown: Vec<Toast>,
}

impl Toasts {
    /// Shows a message that fades after a few seconds.
    pub fn info(&mut self, text: impl Into<String>) {
        self.push(text.into(), false, None);
    }

    /// Shows an error that stays until clicked away.
    pub fn error(&mut self, text: impl Into<String>) {
        self.push(text.into(), true, None);
    }

    /// An error about `topic` that stays until it is clicked away or [`Self::resolve`]d.
    pub fn error_about(&mut self, topic: &'static str, text: impl Into<String>) {
        self.push(text.into(), true, Some(topic));
    }

    /// `topic` is settled (the profile saved, a burst fired): its errors go.
    pub fn resolve(&mut self, topic: &'static str) {
        self.shown.retain(|toast| toast.topic != Some(topic));
    }

    fn push(&mut self, text: String, error: bool, topic: Option<&'static str>) {
        self.shown.retain(|toast| toast.text != text);
        self.shown.push(Toast { text, error, topic, since: Instant::now() });
        if self.shown.len() > MAX_SHOWN {
            self.shown.remove(0);
        }
    }

    /// The texts currently shown, oldest first.
    pub fn texts(&self) -> Vec<&str> {
        self.shown.iter().map(|toast| toast.text.as_str()).collect()
    }

    /// Draws the messages shown; a click removes one.
    pub fn toasts_ui(&mut self, ui: &mut egui::Ui) {
        // Errors stay until clicked away; information fades.
        self.shown.retain(|toast| toast.error || toast.since.elapsed() < SHOW_FOR);
        if self.shown.is_empty() {
            return;
        }
        let mut dismissed = None;
        egui::Area::new(egui::Id::unique("ratescope-toasts"))
            .anchor(egui::Align2::RIGHT_BOTTOM, egui::vec2(-12.0, -12.0))
            .show(ui.ctx(), |ui| {
                for (index, toast) in self.shown.iter().enumerate() {
                    egui::Frame::popup(ui.style()).show(ui, |ui| {
                        ui.set_max_width(420.0);
                        // The close button first, then the text wrapped in what is left: a long
                        // message grows downwards instead of past the window's left edge.
                        ui.horizontal_top(|ui| {
                            if ui.small_button("x").clicked() {
                                dismissed = Some(index);
                            }
                            let text = RichText::new(&toast.text);
                            let text = if toast.error {
                                text.color(super::palette::status_colors(ui.visuals()).error)
                            } else {
                                text
                            };
                            ui.add(egui::Label::new(text).wrap());
                        });
                    });
                }
            });
        if let Some(index) = dismissed {
            self.shown.remove(index);
        }
        ui.ctx().request_repaint_after(Duration::from_millis(500));
    }
}

#[cfg(test)]
mod tests {
    use egui_kittest::Harness;
    use egui_kittest::kittest::Queryable;

    use super::*;

    #[test]
    fn a_long_error_wraps_inside_the_window() {
        let long = format!("batch max wait: 'x' is not a duration ({}); try 1s, 500ms", "a unit ".repeat(30));
        let mut toasts = Toasts::default();
        toasts.error(long.clone());
        let mut harness = Harness::builder()
            .with_size(egui::vec2(1024.0, 700.0))
            .build_ui_state(|ui, toasts: &mut Toasts| toasts.toasts_ui(ui), toasts);
        harness.run_steps(2);
        let shown = harness.get_by_label(&long).rect();
        assert!(shown.left() >= 0.0 && shown.right() <= 1024.0, "the message runs off the window: {shown:?}");
        assert!(shown.width() <= 420.0, "{shown:?}");
        harness.get_by_label("x").click();
        harness.run_steps(2);
        assert!(harness.state().texts().is_empty(), "a click on x dismisses it");
    }
}
