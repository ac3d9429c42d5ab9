//! The help overlay (F1 or ?): every keyboard shortcut; and the theme choice (the system's by default).

/// The help overlay's title.
pub const HELP_TITLE: &str = "Keyboard shortcuts";

/// Every shortcut the app knows, as (keys, what they do).
pub const SHORTCUTS: [(&str, &str); 6] = [
    ("Ctrl+Enter", "fire the composed burst"),
    ("Esc", "cancel the running burst (or close this help)"),
    ("Ctrl+S", "save the current profile and its secrets"),
    ("F1 or ?", "show or hide this help"),
    ("drag a chart", "pan through time (stops following; every chart moves together)"),
    ("Ctrl+scroll on a chart", "zoom the time axis"),
];

/// The overlay; `open` turns false when it is closed.
pub fn help_ui(ctx: &egui::Context, open: &mut bool) {
    egui::Window::new(HELP_TITLE)
        .open(open)
        .collapsible(false)
        .resizable(false)
        .anchor(egui::Align2::CENTER_CENTER, egui::Vec2::ZERO)
        .show(ctx, |ui| {
            egui::Grid::new("ratescope_shortcuts").num_columns(2).striped(true).show(ui, |ui| {
                for (keys, what) in SHORTCUTS {
                    ui.monospace(keys);
                    ui.label(what);
                    ui.end_row();
                }
            });
        });
}

/// Light, dark, or the system's theme (the default): one small button that steps through them.
pub fn theme_ui(ui: &mut egui::Ui) {
    let preference = ui.ctx().options(|options| options.theme_preference);
    let (icon, next, what) = match preference {
        egui::ThemePreference::System => ("Auto", egui::ThemePreference::Light, "theme: the system's"),
        egui::ThemePreference::Light => ("Light", egui::ThemePreference::Dark, "theme: light"),
        egui::ThemePreference::Dark => ("Dark", egui::ThemePreference::System, "theme: dark"),
    };
    let button = ui.button(icon).on_hover_text(format!("{what} (click for the next)")).accessible_name(what);
    if button.clicked() {
        ui.ctx().set_theme(next);
        // The new visuals apply from the next frame: draw it now, not at the next mouse move.
        ui.ctx().request_repaint();
    }
}
