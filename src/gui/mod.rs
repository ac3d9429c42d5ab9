//! The desktop app (eframe/egui, glow renderer): hosts and limits on the left, a burst
//! composer (or the Proxy tab: a proxy from the profile) and live charts in the middle, the
//! request log and what the server says below.
//! The UI thread never awaits: it sends commands to a background tokio runtime and drains
//! its updates each frame.

mod app;
mod backend;
mod batching;
mod body_file;
mod catalog;
mod chart_image;
pub mod charts;
mod columns;
mod composer;
pub mod discover;
mod draft;
mod editor;
mod help;
pub mod history;
mod host_edit;
pub mod log;
pub mod palette;
pub mod proxy;
pub mod quit;
mod request;
mod save_as;
mod screenshot;
pub mod server;
mod shared;
pub mod simulator;
pub mod summary;
mod toasts;
pub mod tune_view;
mod value_axis;

pub use app::{App, AppOptions, DemoStatus, LOWER_PANEL, RunStatus, Tab};
pub use backend::{Backend, Command, FireRequest, Update};
pub use composer::{ArrivalChoice, Composer, EndpointDraft, FIRE_TARGET};
pub use editor::{Editor, EditorAction, ProfileDoc, no_limits_text};
pub use proxy::{ProxyAction, ProxyPanel, ProxyStatus, proxy_ui};
pub use toasts::Toasts;

/// The port the demo API prefers (any free one is taken when it is busy).
pub const DEMO_PORT: u16 = 8787;

/// The window's icon: the 256-pixel PNG of `assets/icons` (the desktop file's `Icon=ratescope`),
/// decoded once at start; an icon that cannot be decoded leaves the window manager's default.
fn window_icon() -> egui::IconData {
    const ICON: &[u8] = include_bytes!("../../assets/icons/hicolor/256x256/apps/ratescope.png");
    eframe::icon_data::from_png_bytes(ICON).unwrap_or_else(|err| {
        tracing::warn!("the window icon could not be decoded: {err}");
        egui::IconData::default()
    })
}

/// Opens the window and runs until it is closed. With `screenshot`, fires the demo burst,
/// saves a PNG of the window after the delay and exits.
pub fn run(screenshot: Option<(std::path::PathBuf, std::time::Duration)>) -> anyhow::Result<()> {
    // A library user's start: the command line has set it already.
    crate::telemetry::process_start();
    let size = window_size();
    let state = StateLocation::new(
        screenshot.is_some(),
        size.is_some(),
        std::env::var_os(crate::profile::CONFIG_DIR_ENV).map(std::path::PathBuf::from),
    );
    let options = eframe::NativeOptions {
        renderer: eframe::Renderer::Glow,
        viewport: egui::ViewportBuilder::default()
            .with_title("ratescope")
            .with_app_id("ratescope")
            .with_inner_size(size.unwrap_or([1360.0, 860.0]))
            .with_min_inner_size([800.0, 560.0])
            .with_icon(window_icon()),
        persist_window: state.persist_window,
        persistence_path: state.file,
        ..Default::default()
    };
    let close_after = std::env::var("RATESCOPE_SMOKE_SECONDS")
        .ok()
        .and_then(|seconds| seconds.parse::<f64>().ok())
        .filter(|seconds| seconds.is_finite() && *seconds > 0.0)
        .map(std::time::Duration::from_secs_f64);
    eframe::run_native(
        "ratescope",
        options,
        Box::new(|cc| {
            let ctx = cc.egui_ctx.clone();
            let last_profile = if screenshot.is_some() {
                None
            } else {
                cc.storage.and_then(|storage| storage.get_string(app::LAST_PROFILE_KEY))
            };
            let options = AppOptions { demo_port: DEMO_PORT, config_dir: None, close_after, screenshot, last_profile };
            let app = App::new(move || ctx.request_repaint(), options)?;
            Ok(Box::new(app))
        }),
    )
    .map_err(|err| anyhow::anyhow!("the window could not open: {err}"))
}

/// Where the window's own state (size, panel widths, theme, last profile) is kept, and whether
/// the window's size and place are restored from it.
#[derive(Debug, PartialEq)]
struct StateLocation {
    persist_window: bool,
    /// The state file; `None` for eframe's per-user default (`~/.local/share/ratescope/app.ron`).
    file: Option<std::path::PathBuf>,
}

impl StateLocation {
    /// A screenshot run starts from the default layout, whatever the user left last time: its
    /// state goes to a file of its own. `RATESCOPE_WINDOW_SIZE` wins over a saved size. With
    /// `RATESCOPE_CONFIG_DIR` set, the state lives there beside the profiles, so a fresh config
    /// directory is a fresh app.
    fn new(screenshot: bool, size_given: bool, config_dir: Option<std::path::PathBuf>) -> Self {
        let file = if screenshot {
            Some(std::env::temp_dir().join(format!("ratescope-screenshot-{}.ron", std::process::id())))
        } else {
            config_dir.filter(|dir| !dir.as_os_str().is_empty()).map(|dir| dir.join("app.ron"))
        };
        Self { persist_window: !screenshot && !size_given, file }
    }
}

/// The window's size from `RATESCOPE_WINDOW_SIZE=WIDTHxHEIGHT` (for screenshots at a given size).
fn window_size() -> Option<[f32; 2]> {
    let text = std::env::var("RATESCOPE_WINDOW_SIZE").ok()?;
    let (width, height) = text.split_once('x')?;
    let size = [width.trim().parse::<f32>().ok()?, height.trim().parse::<f32>().ok()?];
    size.iter().all(|side| side.is_finite() && *side >= 200.0).then_some(size)
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::StateLocation;

    #[test]
    fn the_window_icon_is_the_256_pixel_png_decoded() {
        let icon = super::window_icon();
        assert_eq!((icon.width, icon.height), (256, 256));
        assert_eq!(icon.rgba.len(), 256 * 256 * 4);
        assert!(icon.rgba.chunks(4).any(|pixel| pixel[3] == 0), "its corners are transparent");
    }

    #[test]
    fn a_given_size_wins_and_a_config_dir_holds_the_window_state() {
        let plain = StateLocation::new(false, false, None);
        assert_eq!(plain, StateLocation { persist_window: true, file: None });
        let sized = StateLocation::new(false, true, Some(PathBuf::from("/cfg")));
        assert_eq!(sized, StateLocation { persist_window: false, file: Some(PathBuf::from("/cfg/app.ron")) });
        assert_eq!(StateLocation::new(false, false, Some(PathBuf::new())).file, None, "an empty variable is unset");
        let shot = StateLocation::new(true, false, Some(PathBuf::from("/cfg")));
        assert!(!shot.persist_window);
        assert!(shot.file.is_some_and(|file| file.starts_with(std::env::temp_dir())));
    }
}
