//! The desktop app (eframe/egui, glow renderer): hosts and limits on the left, a burst
//! composer (or the Proxy tab: a proxy from the profile) and live charts in the middle, the
//! request log and what the server says below.
//! The UI thread never awaits: it sends commands to a background tokio runtime and drains
//! its updates each frame.

mod app;
mod backend;
mod batching;
mod catalog;
pub mod charts;
mod composer;
pub mod discover;
mod draft;
mod editor;
mod help;
pub mod history;
pub mod log;
pub mod proxy;
mod request;
mod save_as;
mod screenshot;
pub mod server;
mod shared;
pub mod simulator;
pub mod summary;
mod toasts;
mod value_axis;

pub use app::{App, AppOptions, DemoStatus, RunStatus, Tab};
pub use backend::{Backend, Command, FireRequest, Update};
pub use composer::{ArrivalChoice, Composer, EndpointDraft};
pub use editor::{Editor, EditorAction, ProfileDoc};
pub use proxy::{ProxyAction, ProxyPanel, ProxyStatus, proxy_ui};
pub use toasts::Toasts;

/// The port the demo API prefers (any free one is taken when it is busy).
pub const DEMO_PORT: u16 = 8787;

/// Opens the window and runs until it is closed. With `screenshot`, fires the demo burst,
/// saves a PNG of the window after the delay and exits.
pub fn run(screenshot: Option<(std::path::PathBuf, std::time::Duration)>) -> anyhow::Result<()> {
    // A library user's start: the command line has set it already.
    crate::telemetry::process_start();
    let options = eframe::NativeOptions {
        renderer: eframe::Renderer::Glow,
        viewport: egui::ViewportBuilder::default()
            .with_title("ratescope")
            .with_app_id("ratescope")
            .with_inner_size(window_size().unwrap_or([1360.0, 860.0]))
            .with_min_inner_size([800.0, 560.0]),
        // A screenshot run starts from the default layout, whatever the user left last time
        // (window size, panel widths): its state goes to a directory of its own.
        persist_window: screenshot.is_none(),
        persistence_path: screenshot
            .is_some()
            .then(|| std::env::temp_dir().join(format!("ratescope-screenshot-{}", std::process::id()))),
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

/// The window's size from `RATESCOPE_WINDOW_SIZE=WIDTHxHEIGHT` (for screenshots at a given size).
fn window_size() -> Option<[f32; 2]> {
    let text = std::env::var("RATESCOPE_WINDOW_SIZE").ok()?;
    let (width, height) = text.split_once('x')?;
    let size = [width.trim().parse::<f32>().ok()?, height.trim().parse::<f32>().ok()?];
    size.iter().all(|side| side.is_finite() && *side >= 200.0).then_some(size)
}
