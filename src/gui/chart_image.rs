//! The charts as one PNG: every chart at the window's full width and without its controls,
//! drawn a page at a time over the window, captured page by page and stitched top to bottom.

use std::sync::Arc;

use egui::{ColorImage, Id, Rect};

use super::charts::{CHARTS, ChartView, image_charts_ui};
use super::screenshot::CaptureSlot;
use crate::telemetry::Telemetry;

/// A plot in the picture is at least this tall (points), more when the window has the room.
const MIN_PLOT_HEIGHT: f32 = 170.0;
/// Room per chart besides its plot: title, legend rows, spacing (a note adds a row or two).
const CHART_TEXT_HEIGHT: f32 = 90.0;

/// What a frame of the capture came to.
#[derive(Debug)]
pub enum CaptureState {
    /// Pages still to draw or capture.
    Working,
    /// The PNG, every page stitched.
    Done(Vec<u8>),
    /// It could not be captured; the message says why.
    Failed(String),
}

/// A picture of the charts on its way.
#[derive(Debug)]
pub struct ChartImage {
    per_page: usize,
    page: usize,
    captured: Vec<ColorImage>,
    /// The screenshot of the current page, filled by the renderer's callback.
    slot: CaptureSlot<Arc<ColorImage>>,
    requested: bool,
    /// Where this page's charts were drawn last frame (the part of the screenshot kept).
    drawn: Option<Rect>,
}

impl ChartImage {
    /// A capture of every chart, as many to a page as fit `screen_height` at a readable size.
    pub fn new(screen_height: f32) -> Self {
        let fit = ((screen_height - 16.0) / (MIN_PLOT_HEIGHT + CHART_TEXT_HEIGHT)).floor();
        let per_page = if fit.is_finite() { (fit as usize).clamp(1, CHARTS) } else { 1 };
        Self { per_page, page: 0, captured: Vec::new(), slot: Arc::default(), requested: false, drawn: None }
    }

    /// Pages the capture takes.
    pub fn pages(&self) -> usize {
        CHARTS.div_ceil(self.per_page)
    }

    /// Draws this page's charts over the whole window, asks for its screenshot once they have
    /// been laid out, and keeps each page as it arrives.
    pub fn capture_ui(
        &mut self,
        ctx: &egui::Context,
        telemetry: &Telemetry,
        previous: Option<&Telemetry>,
        view: &ChartView,
    ) -> CaptureState {
        let screen = ctx.content_rect();
        let first = self.page * self.per_page;
        let which = first..(first + self.per_page).min(CHARTS);
        // Every page is laid out for a full page of charts, so the last one's plots (fewer
        // of them) are as tall as the others'.
        let text = CHART_TEXT_HEIGHT * self.per_page as f32;
        let plot_height = ((screen.height() - 16.0 - text) / self.per_page as f32).max(MIN_PLOT_HEIGHT);
        let area = egui::Area::new(Id::unique("ratescope_chart_picture"))
            .order(egui::Order::Foreground)
            .fixed_pos(screen.min)
            .interactable(false)
            .show(ctx, |ui| {
                // Opaque, so nothing of the window under the page shows through.
                egui::Frame::new().fill(ui.visuals().panel_fill.to_opaque()).inner_margin(8.0).show(ui, |ui| {
                    ui.set_width(screen.width() - 16.0);
                    image_charts_ui(ui, telemetry, previous, view, Id::NULL, which, plot_height);
                });
            });
        let drawn = area.response.rect.intersect(screen);
        if !self.requested {
            // The first frame lays the page out; the screenshot is of the next, drawn the same.
            if self.drawn.replace(drawn).is_some() {
                self.requested = true;
                let (slot, waker) = (Arc::clone(&self.slot), ctx.clone());
                ctx.request_screenshot(move |image| {
                    if let Ok(mut slot) = slot.lock() {
                        *slot = Some(Ok(image));
                    }
                    waker.request_repaint();
                });
            }
            ctx.request_repaint();
            return CaptureState::Working;
        }
        let Some(arrived) = self.slot.lock().ok().and_then(|mut slot| slot.take()) else {
            return CaptureState::Working;
        };
        let image = match arrived {
            Ok(image) => image,
            Err(err) => return CaptureState::Failed(err),
        };
        let region = self.drawn.unwrap_or(drawn);
        self.captured.push(image.region(&region, Some(ctx.pixels_per_point())));
        self.page += 1;
        self.requested = false;
        self.drawn = None;
        if self.page < self.pages() {
            ctx.request_repaint();
            return CaptureState::Working;
        }
        match super::screenshot::png_bytes(&stitch(&self.captured)) {
            Ok(png) => CaptureState::Done(png),
            Err(err) => CaptureState::Failed(err),
        }
    }
}

/// The pages one under the other, as wide as the widest (narrower ones padded on the right
/// with transparent pixels).
fn stitch(pages: &[ColorImage]) -> ColorImage {
    let width = pages.iter().map(|page| page.size[0]).max().unwrap_or(0);
    let height = pages.iter().map(|page| page.size[1]).sum();
    let mut pixels = Vec::with_capacity(width * height);
    for page in pages {
        for row in page.pixels.chunks(page.size[0].max(1)) {
            pixels.extend_from_slice(row);
            pixels.resize(pixels.len() + (width - row.len()), egui::Color32::TRANSPARENT);
        }
    }
    ColorImage::new([width, height], pixels)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_are_stitched_top_to_bottom_at_the_widest_width() {
        let red = ColorImage::new([3, 2], vec![egui::Color32::RED; 6]);
        let blue = ColorImage::new([2, 1], vec![egui::Color32::BLUE; 2]);
        let both = stitch(&[red, blue]);
        assert_eq!(both.size, [3, 3]);
        assert_eq!(both.pixels[0], egui::Color32::RED);
        assert_eq!(both.pixels[6], egui::Color32::BLUE);
        assert_eq!(both.pixels[8], egui::Color32::TRANSPARENT, "the narrow page is padded");
    }

    #[test]
    fn a_picture_page_holds_its_charts_and_none_of_their_controls() {
        use egui_kittest::Harness;
        use egui_kittest::kittest::Queryable;

        let mut telemetry = Telemetry::new(tokio::time::Instant::now(), 1000, 100);
        for i in 0..200 {
            let t = f64::from(i) / 10.0;
            telemetry.queued.push(t, f64::from(i % 7));
            telemetry.outcomes.record(t, Some(if i % 9 == 0 { 429 } else { 200 }));
        }
        let mut harness = Harness::builder().with_size(egui::vec2(1024.0, 1400.0)).build_ui_state(
            |ui, telemetry: &mut Telemetry| {
                image_charts_ui(ui, telemetry, None, &ChartView::default(), Id::NULL, 0..CHARTS, 170.0);
            },
            telemetry,
        );
        harness.run_steps(2);
        for title in ["Tokens", "Queue", "Outcomes / s", "Retries / s", "Latency (ms)"] {
            harness.get_by_label(title);
        }
        for control in ["follow", "reset zoom", "window"] {
            assert!(harness.query_by_label(control).is_none(), "'{control}' is not part of the picture");
        }
    }

    #[test]
    fn a_short_window_takes_more_pages_and_a_tall_one_fewer() {
        assert_eq!(ChartImage::new(700.0).pages(), 3);
        assert_eq!(ChartImage::new(1400.0).pages(), 1);
        assert_eq!(ChartImage::new(100.0).pages(), CHARTS, "one chart a page, never none");
        assert_eq!(ChartImage::new(f32::NAN).pages(), CHARTS);
    }
}
