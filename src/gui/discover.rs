//! The Discover window: probe a URL for its limits, read the suggestion and why, and turn it
//! into a profile with one click.

use egui::{RichText, Ui};

use crate::engine::LimiterConfig;
use crate::probe::{ProbeOptions, ProbeReport};
use crate::profile::Profile;

/// What the user asked for in the window.
#[derive(Debug)]
pub enum DiscoverAction {
    /// Nothing.
    None,
    /// Probe `url` with at most `max_requests` requests.
    Probe {
        /// The URL.
        url: url::Url,
        /// The most requests the probe may send.
        max_requests: usize,
    },
    /// Keep this profile (made from the suggestion): select it and save it.
    CreateProfile(Box<Profile>),
    /// Keep it in place of the open profile of the same name, as the person confirmed.
    ReplaceProfile(Box<Profile>),
    /// Put the suggested limits into the host being edited (which offers Undo).
    ApplyToHost(Box<LimiterConfig>),
}

/// The window's state.
#[derive(Debug)]
pub struct Discover {
    /// Whether the window is shown.
    pub open: bool,
    /// The URL as typed.
    pub url: String,
    /// The most requests the probe may send.
    pub max_requests: usize,
    /// A probe is running.
    pub running: bool,
    /// The last probe's report, or why it failed.
    pub report: Option<Result<ProbeReport, String>>,
    /// The name the profile made from the suggestion gets.
    pub profile_name: String,
    /// A profile made from the suggestion whose name is taken, waiting for "Replace" or "Cancel".
    pub replacing: Option<Box<Profile>>,
}

impl Default for Discover {
    fn default() -> Self {
        Self {
            open: false,
            url: String::new(),
            max_requests: ProbeOptions::default().max_requests,
            running: false,
            report: None,
            profile_name: "discovered".into(),
            replacing: None,
        }
    }
}

/// The label of the button that makes a profile of the suggestion.
pub const CREATE_PROFILE_TEXT: &str = "Create profile";
/// The label of the button that puts the suggestion into the host being edited.
pub const APPLY_TO_HOST_TEXT: &str = "Apply to this host";
/// The label of the button that confirms replacing a profile of the same name.
pub const REPLACE_PROFILE_TEXT: &str = "Replace it";

impl Discover {
    /// Opens the window on `url` (the selected host and endpoint).
    pub fn open_at(&mut self, url: String) {
        if !self.running {
            self.url = url;
        }
        self.open = true;
    }

    /// The window, when open; `host` names the host being edited, which the suggestion can go into.
    pub fn window_ui(&mut self, ctx: &egui::Context, host: Option<&str>) -> DiscoverAction {
        let mut action = DiscoverAction::None;
        let mut open = self.open;
        // Opens over the charts, a little below the toolbars, instead of over the menu bar.
        let top_center = ctx.content_rect().center_top() + egui::vec2(0.0, 120.0);
        egui::Window::new("Discover the limits")
            .open(&mut open)
            .default_width(520.0)
            .pivot(egui::Align2::CENTER_TOP)
            .default_pos(top_center)
            .show(ctx, |ui| {
                action = self.contents_ui(ui, host);
            });
        self.open = open;
        action
    }

    fn contents_ui(&mut self, ui: &mut Ui, host: Option<&str>) -> DiscoverAction {
        let mut action = DiscoverAction::None;
        ui.label("Ramps carefully, reads every rate-limit header, and stops at the first refusal or as soon as the headers tell the limits.");
        ui.horizontal(|ui| {
            ui.label("URL");
            ui.add(egui::TextEdit::singleline(&mut self.url).desired_width(300.0)).accessible_name("probe URL");
            ui.label("at most");
            ui.add(egui::DragValue::new(&mut self.max_requests).range(2..=10_000)).accessible_name("probe maximum");
            ui.label("requests");
        });
        ui.horizontal(|ui| {
            let probe = ui.add_enabled(!self.running, egui::Button::new("Probe"));
            if probe.clicked() {
                match url::Url::parse(self.url.trim()) {
                    Ok(url) if matches!(url.scheme(), "http" | "https") => {
                        self.running = true;
                        self.report = None;
                        action = DiscoverAction::Probe { url, max_requests: self.max_requests };
                    }
                    _ => self.report = Some(Err(format!("'{}' is not an http(s) URL", self.url.trim()))),
                }
            }
            if self.running {
                ui.spinner();
                ui.label("probing…");
            }
        });
        let mut failed = None;
        let mut cancel_replace = false;
        match &self.report {
            None => {}
            Some(Err(err)) => {
                ui.colored_label(super::palette::status_colors(ui.visuals()).error, err);
            }
            Some(Ok(report)) => {
                ui.separator();
                ui.label(RichText::new(report.to_string()).monospace());
                if report.suggested.budgets.is_empty() && report.suggested.concurrency.is_none() {
                    return action;
                }
                if let Some(host) = host {
                    ui.horizontal(|ui| {
                        let apply = ui.button(APPLY_TO_HOST_TEXT).on_hover_text(format!(
                            "Put these limits into '{host}', the host being edited (Undo in the hosts panel)"
                        ));
                        if apply.clicked() {
                            match report.limiter_config() {
                                Ok(config) => action = DiscoverAction::ApplyToHost(Box::new(config)),
                                Err(err) => failed = Some(err.to_string()),
                            }
                        }
                        ui.weak(format!("into '{host}'"));
                    });
                }
                ui.horizontal(|ui| {
                    ui.label("profile name");
                    ui.add(egui::TextEdit::singleline(&mut self.profile_name).desired_width(140.0))
                        .accessible_name("discovered profile name");
                    let create =
                        ui.button(CREATE_PROFILE_TEXT).on_hover_text("Save the suggestion as a profile and select it");
                    if create.clicked() {
                        match profile_of(report, &self.url, &self.profile_name) {
                            Ok(profile) => action = DiscoverAction::CreateProfile(Box::new(profile)),
                            Err(err) => failed = Some(err),
                        }
                    }
                });
                if let Some(replacing) = &self.replacing {
                    ui.label(format!(
                        "A profile named '{}' exists. Replace it with this suggestion? (Its file is kept as .bak.) \
                         Or type another name.",
                        replacing.name
                    ));
                    ui.horizontal(|ui| {
                        if ui.button(REPLACE_PROFILE_TEXT).clicked() {
                            action = DiscoverAction::ReplaceProfile(replacing.clone());
                        }
                        if ui.button("Keep the old one").clicked() {
                            cancel_replace = true;
                        }
                    });
                }
            }
        }
        if let Some(err) = failed {
            self.report = Some(Err(format!("no profile made: {err}")));
        }
        if cancel_replace || self.replacing.as_ref().is_some_and(|replacing| replacing.name != self.profile_name.trim())
        {
            self.replacing = None;
        }
        action
    }
}

/// The suggestion as a profile named `name`, for the origin of `url`.
fn profile_of(report: &ProbeReport, url: &str, name: &str) -> Result<Profile, String> {
    let base = url::Url::parse(url.trim()).map_err(|err| err.to_string())?.origin().ascii_serialization();
    let profile = report.to_profile(name.trim(), &base).map_err(|err| err.to_string())?;
    profile.validate().map_err(|err| err.to_string())?;
    Ok(profile)
}
