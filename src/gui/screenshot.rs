//! Screenshot mode: fire the demo burst, capture the window as a PNG after a delay, then close.
//! With `RATESCOPE_SCREENSHOT_COMPARE=1` it first fires the burst with the limiter off, then
//! (once that run is done) with it on, draws the first under the second, and captures that.

use std::io::Write as _;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Where a screenshot callback (on the renderer's side) leaves its outcome for the next frame.
pub type CaptureSlot<T> = Arc<Mutex<Option<Result<T, String>>>>;

/// What the app should do for a screenshot run this frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScreenshotStep {
    Wait,
    Fire {
        limiter: bool,
    },
    /// Fire with the limiter on and draw run `compare_with` under it.
    FireAndCompare {
        compare_with: u32,
    },
}

/// Where a screenshot run is.
#[derive(Debug)]
pub struct ScreenshotMode {
    path: PathBuf,
    after: Duration,
    started: Instant,
    fired: bool,
    /// The compare mode's first run was fired.
    first_fired: bool,
    /// Two runs, the first without the limiter, compared on the capture.
    compare: bool,
    requested: bool,
    /// Set by the capture callback: `Ok(())` when the file was written, or why not.
    done: CaptureSlot<()>,
}

impl ScreenshotMode {
    pub fn new(path: PathBuf, after: Duration) -> Self {
        let compare = std::env::var("RATESCOPE_SCREENSHOT_COMPARE").is_ok_and(|value| value == "1");
        Self {
            path,
            after,
            started: Instant::now(),
            fired: false,
            first_fired: false,
            compare,
            requested: false,
            done: Arc::default(),
        }
    }

    /// What to do this frame, given whether the app is ready and how many runs have finished.
    pub fn step(&mut self, ready: bool, finished_runs: usize) -> ScreenshotStep {
        if !ready {
            return ScreenshotStep::Wait;
        }
        if !self.fired && !self.compare {
            self.fired = true;
            self.started = Instant::now();
            return ScreenshotStep::Fire { limiter: true };
        }
        if self.compare && !self.fired {
            // The first run, without the limiter, is fired once and not counted as "fired".
            if self.requested_first() {
                if finished_runs >= 1 {
                    self.fired = true;
                    self.started = Instant::now();
                    return ScreenshotStep::FireAndCompare { compare_with: 1 };
                }
                return ScreenshotStep::Wait;
            }
            return ScreenshotStep::Fire { limiter: false };
        }
        ScreenshotStep::Wait
    }

    /// Marks the compare mode's first run as fired; true when it was already.
    fn requested_first(&mut self) -> bool {
        let already = self.first_fired;
        self.first_fired = true;
        already
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
                // A closed stderr loses the line, not the exit status (eprintln! would panic).
                let _ = writeln!(std::io::stderr(), "error: the screenshot was not saved: {err}");
                std::process::exit(1);
            }
            None => {}
        }
    }
}

/// Writes `image` as an RGBA PNG, whole or not at all ([`crate::files::write_bytes`]).
fn save_png(path: &std::path::Path, image: &egui::ColorImage) -> Result<(), String> {
    let bytes = png_bytes(image)?;
    crate::files::write_bytes(path, &bytes, crate::files::WriteOptions::default())
        .map(drop)
        .map_err(|err| err.to_string())
}

/// `image` encoded as an RGBA PNG.
pub fn png_bytes(image: &egui::ColorImage) -> Result<Vec<u8>, String> {
    let [width, height] = image.size;
    let width = u32::try_from(width).map_err(|err| err.to_string())?;
    let height = u32::try_from(height).map_err(|err| err.to_string())?;
    let pixels: Vec<u8> = image.pixels.iter().flat_map(|pixel| pixel.to_srgba_unmultiplied()).collect();
    let mut out = Vec::new();
    let mut encoder = png::Encoder::new(&mut out, width, height);
    encoder.set_color(png::ColorType::Rgba);
    encoder.set_depth(png::BitDepth::Eight);
    let mut writer = encoder.write_header().map_err(|err| err.to_string())?;
    writer.write_image_data(&pixels).map_err(|err| err.to_string())?;
    writer.finish().map_err(|err| err.to_string())?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_region_of_the_window_becomes_a_png_of_its_size() {
        let image = egui::ColorImage::new([6, 4], vec![egui::Color32::from_rgb(10, 20, 30); 24]);
        let region = image.region(&egui::Rect::from_min_size(egui::pos2(1.0, 1.0), egui::vec2(3.0, 2.0)), None);
        let png = png_bytes(&region).unwrap();
        let decoder = png::Decoder::new(std::io::Cursor::new(png));
        let reader = decoder.read_info().unwrap();
        let info = reader.info();
        assert_eq!((info.width, info.height), (3, 2));
    }
}
