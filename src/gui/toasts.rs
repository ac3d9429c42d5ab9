//! The status bar's messages: one line at the window's foot that never covers a control, where
//! notices expire by themselves and go once what they were about is settled.

use std::time::{Duration, Instant};

use egui::RichText;

/// How long a notice stays.
const INFO_FOR: Duration = Duration::from_secs(6);
/// How long an error stays unless clicked away or settled sooner: long enough to read and act
/// on, short enough that it does not linger on other tabs for minutes.
const ERROR_FOR: Duration = Duration::from_secs(30);
const MAX_KEPT: usize = 5;

/// What a message is about, so it goes once that is settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Topic {
    /// Saving the profile: goes when it is saved.
    Save,
    /// A change that waits for Ctrl+S: goes when the profile is saved.
    Unsaved,
    /// Firing a burst: goes when one starts.
    Fire,
    /// The proxy: goes when it starts, stops, or its tab is left.
    Proxy,
}

#[derive(Debug, Clone, PartialEq)]
struct Toast {
    text: String,
    error: bool,
    topic: Option<Topic>,
    since: Instant,
}

impl Toast {
    fn expired(&self, now: Instant) -> bool {
        now.duration_since(self.since) >= if self.error { ERROR_FOR } else { INFO_FOR }
    }
}

/// The messages kept, newest last.
#[derive(Debug, Default)]
pub struct Toasts {
    shown: Vec<Toast>,
    /// The bar lists every message instead of the newest.
    expanded: bool,
}

impl Toasts {
    /// Shows a notice that goes after a few seconds.
    pub fn info(&mut self, text: impl Into<String>) {
        self.push(text.into(), false, None);
    }

    /// A notice about `topic` that goes after a few seconds or once the topic is settled.
    pub fn info_about(&mut self, topic: Topic, text: impl Into<String>) {
        self.push(text.into(), false, Some(topic));
    }

    /// Shows an error that stays until clicked away or it expires.
    pub fn error(&mut self, text: impl Into<String>) {
        self.push(text.into(), true, None);
    }

    /// An error about `topic` that goes once it is clicked away, expires or [`Self::resolve`]d.
    pub fn error_about(&mut self, topic: Topic, text: impl Into<String>) {
        self.push(text.into(), true, Some(topic));
    }

    /// `topic` is settled (the profile saved, a burst fired): its messages go.
    pub fn resolve(&mut self, topic: Topic) {
        self.shown.retain(|toast| toast.topic != Some(topic));
    }

    fn push(&mut self, text: String, error: bool, topic: Option<Topic>) {
        self.shown.retain(|toast| toast.text != text);
        self.shown.push(Toast { text, error, topic, since: Instant::now() });
        if self.shown.len() > MAX_KEPT {
            self.shown.remove(0);
        }
    }

    /// The texts kept now, oldest first.
    pub fn texts(&self) -> Vec<&str> {
        self.shown.iter().map(|toast| toast.text.as_str()).collect()
    }

    /// The bar's message part: the newest message on one line (elided, the whole text on
    /// hover), an `x` that dismisses it, and `+N` that lists the others. It lives in a panel of
    /// its own, so it takes its own room instead of lying over buttons.
    pub fn toasts_ui(&mut self, ui: &mut egui::Ui) {
        let now = Instant::now();
        self.shown.retain(|toast| !toast.expired(now));
        let Some(newest) = self.shown.len().checked_sub(1) else {
            self.expanded = false;
            return;
        };
        let mut dismissed = None;
        if self.expanded {
            ui.vertical(|ui| {
                for (index, toast) in self.shown.iter().enumerate().rev() {
                    ui.horizontal_top(|ui| {
                        if ui.small_button("x").on_hover_text("Dismiss").clicked() {
                            dismissed = Some(index);
                        }
                        ui.add(egui::Label::new(toast_text(ui, toast)).wrap());
                    });
                }
                if ui.small_button("fewer").clicked() {
                    self.expanded = false;
                }
            });
        } else {
            ui.horizontal(|ui| {
                if ui.small_button("x").on_hover_text("Dismiss").clicked() {
                    dismissed = Some(newest);
                }
                let others = newest;
                if others > 0 && ui.small_button(format!("+{others}")).on_hover_text("Show every message").clicked() {
                    self.expanded = true;
                }
                ui.add(egui::Label::new(toast_text(ui, &self.shown[newest])).truncate());
            });
        }
        if let Some(index) = dismissed {
            self.shown.remove(index);
        }
        // Wakes the app when the soonest message expires; nothing to wake for once none is left.
        if let Some(left) = self
            .shown
            .iter()
            .map(|toast| {
                let stays = if toast.error { ERROR_FOR } else { INFO_FOR };
                stays.saturating_sub(now.duration_since(toast.since))
            })
            .min()
        {
            ui.ctx().request_repaint_after(left + Duration::from_millis(10));
        }
    }
}

fn toast_text(ui: &egui::Ui, toast: &Toast) -> RichText {
    let text = RichText::new(&toast.text);
    if toast.error { text.color(super::palette::status_colors(ui.visuals()).error) } else { text }
}

#[cfg(test)]
mod tests {
    use egui_kittest::Harness;
    use egui_kittest::kittest::Queryable;

    use super::*;

    fn bar(toasts: Toasts, width: f32) -> Harness<'static, Toasts> {
        Harness::builder().with_size(egui::vec2(width, 300.0)).build_ui_state(
            |ui, toasts: &mut Toasts| {
                egui::Panel::bottom("status").show(ui, |ui| toasts.toasts_ui(ui));
            },
            toasts,
        )
    }

    #[test]
    fn a_long_error_is_one_line_inside_the_window_and_x_dismisses_it() {
        let long = format!("batch max wait: 'x' is not a duration ({}); try 1s, 500ms", "a unit ".repeat(30));
        let mut toasts = Toasts::default();
        toasts.error(long.clone());
        let mut harness = bar(toasts, 1024.0);
        harness.run_steps(2);
        let shown = harness.get_by_label(&long).rect();
        assert!(shown.left() >= 0.0 && shown.right() <= 1024.0, "the message runs off the window: {shown:?}");
        assert!(shown.height() < 24.0, "one line, elided: {shown:?}");
        harness.get_by_label("x").click();
        harness.run_steps(2);
        assert!(harness.state().texts().is_empty(), "a click on x dismisses it");
    }

    #[test]
    fn others_are_listed_on_request() {
        let mut toasts = Toasts::default();
        toasts.info("first");
        toasts.error("second");
        let mut harness = bar(toasts, 800.0);
        harness.run_steps(2);
        assert!(harness.query_by_label("first").is_none(), "the newest only, until asked");
        harness.get_by_label("+1").click();
        harness.run_steps(2);
        harness.get_by_label("first");
        harness.get_by_label("second");
    }

    #[test]
    fn messages_expire_and_go_with_their_topic() {
        let mut toasts = Toasts::default();
        toasts.info_about(Topic::Unsaved, "added 'x' (unsaved: Ctrl+S keeps it)");
        toasts.error_about(Topic::Proxy, "the proxy did not start");
        toasts.error("kept");
        toasts.resolve(Topic::Unsaved);
        assert_eq!(toasts.texts(), ["the proxy did not start", "kept"]);
        let old = Instant::now() - ERROR_FOR - Duration::from_millis(1);
        for toast in &mut toasts.shown {
            toast.since = old;
        }
        toasts.info("new");
        let mut harness = bar(toasts, 800.0);
        harness.run_steps(1);
        assert_eq!(harness.state().texts(), ["new"], "errors expire too");
    }
}
