//! Screenshot mode: fire the demo burst, capture the window as a PNG after a delay, then close.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Where a screenshot run is.
#[derive(Debug)]
pub struct ScreenshotMode {
    path: PathBuf,
    after: Duration,
    started: Instant,
    fired: bool,
    requested: bool,
    /// Set by the capture callback: `Ok(())` when the file was written, or why not.
    done: Arc<Mutex<Option<Result<(), String>>>>,
}

impl ScreenshotMode {
    pub fn new(path: PathBuf, after: Duration) -> Self {
        Self { path, after, started: Instant::now(), fired: false, requested: false, done: Arc::default() }
    }

    /// Whether to fire the demo burst now (once, as soon as the app is ready).
    pub fn should_fire(&mut self, ready: bool) -> bool {
        if ready && !self.fired {
            self.fired = true;
            self.started = Instant::now();
            return true;
        }
        false
    }

    /// Asks for the capture when the delay has passed, and closes once the file is written.
    pub fn drive(&mut self, ctx: &egui::Context) {
        ctx.request_repaint_after(Duration::from_millis(50));
        if !self.fired || self.started.elapsed() < self.after {
            return;
        }
        if !self.requested {
            self.requested = true;
            let (path, done, waker) = (self.path.clone(), Arc::clone(&self.done), ctx.clone());
            ctx.request_screenshot(move |image| {
                let result = save_png(&path, &image);
                if let Ok(mut slot) = done.lock() {
                    *slot = Some(result);
                }
                waker.request_repaint();
            });
            return;
        }
        let finished = self.done.lock().ok().and_then(|mut slot| slot.take());
        match finished {
            Some(Ok(())) => {
                println!("screenshot saved to {}", self.path.display());
                ctx.send_viewport_cmd(egui::ViewportCommand::Close);
            }
            Some(Err(err)) => {
                eprintln!("error: the screenshot was not saved: {err}");
                std::process::exit(1);
            }
            None => {}
        }
    }
}

/// Writes `image` as an RGBA PNG, whole or not at all ([`crate::files::write_with`]).
fn save_png(path: &std::path::Path, image: &egui::ColorImage) -> Result<(), String> {
    let [width, height] = image.size;
    let width = u32::try_from(width).map_err(|err| err.to_string())?;
    let height = u32::try_from(height).map_err(|err| err.to_string())?;
    let bytes: Vec<u8> = image.pixels.iter().flat_map(|pixel| pixel.to_srgba_unmultiplied()).collect();
    crate::files::write_with(path, crate::files::WriteOptions::default(), |out| {
        let mut encoder = png::Encoder::new(out, width, height);
        encoder.set_color(png::ColorType::Rgba);
        encoder.set_depth(png::BitDepth::Eight);
        let mut writer = encoder.write_header().map_err(std::io::Error::other)?;
        writer.write_image_data(&bytes).map_err(std::io::Error::other)?;
        writer.finish().map_err(std::io::Error::other)
    })
    .map(drop)
    .map_err(|err| err.to_string())
}
