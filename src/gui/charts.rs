//! Live charts of a burst: tokens, queue, outcomes, retries and latency, stacked on one shared time axis.
//!
//! Every series is decimated to about one point per pixel column of the plot before it is
//! handed to `egui_plot`, so a long run costs the same per frame as a short one.

use egui::{Color32, Id, RichText, Ui, Vec2b};
use egui_plot::{Bar, BarChart, Legend, Line, LineStyle, Plot, PlotPoints, PlotUi, Points, uniform_grid_spacer};

use super::value_axis::{GRID_SPACING_MIN, value_axis_label, value_axis_steps};
use crate::telemetry::{OutcomeRates, Series, Telemetry};

/// Colour of successful (2xx/3xx) outcomes.
const OK_COLOR: Color32 = Color32::from_rgb(46, 160, 67);
/// Colour of throttled (429) outcomes.
const THROTTLED_COLOR: Color32 = Color32::from_rgb(235, 140, 20);
/// Colour of other errors.
const ERROR_COLOR: Color32 = Color32::from_rgb(215, 58, 73);

/// Plots below this height scroll instead of shrinking further.
const MIN_PLOT_HEIGHT: f32 = 80.0;
/// Room for the y-axis tick labels, the same on every plot so their time axes line up.
const Y_AXIS_WIDTH: f32 = 56.0;
/// The shortest time span shown, in seconds.
const MIN_SPAN_S: f64 = 1.0;
/// Each side of the visible range, this fraction of it is decimated too, so lines leave the frame
/// instead of stopping short of its edges while the view pans.
const EDGE_FRACTION: f64 = 0.1;
/// The choices of the window-length combo box; an infinite window shows the whole run.
const WINDOWS: [(f64, &str); 4] = [(10.0, "10 s"), (60.0, "1 min"), (300.0, "5 min"), (f64::INFINITY, "all")];
/// The message shown until the first data point of a burst arrives.
pub const EMPTY_TEXT: &str = "Fire a burst to see live charts";
/// The message shown on the Proxy tab until the first proxied request arrives.
pub const PROXY_EMPTY_TEXT: &str = "Start the proxy and send requests through it to see live charts";

/// How the charts are scrolled and zoomed; kept by the caller between frames.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ChartView {
    /// Keep the newest `window_s` seconds in view as data arrives.
    pub follow: bool,
    /// Seconds shown while following; not finite (or not positive) for the whole run.
    pub window_s: f64,
}

impl Default for ChartView {
    fn default() -> Self {
        Self { follow: true, window_s: 60.0 }
    }
}

impl ChartView {
    /// The x range to show while following, given the data's time extent.
    fn follow_range(&self, extent: Extent) -> (f64, f64) {
        let from = if self.window_s.is_finite() && self.window_s > 0.0 {
            (extent.newest - self.window_s).max(extent.earliest)
        } else {
            extent.earliest
        };
        (from, extent.newest.max(from + MIN_SPAN_S))
    }
}

/// The first and last instants with data, in seconds since the run started.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Extent {
    earliest: f64,
    newest: f64,
}

impl Extent {
    fn include(extent: &mut Option<Self>, first: f64, last: f64) {
        let (first, last) = (first.min(last), first.max(last));
        *extent = Some(match *extent {
            Some(known) => Self { earliest: known.earliest.min(first), newest: known.newest.max(last) },
            None => Self { earliest: first, newest: last },
        });
    }

    fn include_series(extent: &mut Option<Self>, series: &Series) {
        if let (Some(first), Some(last)) = (series.iter().next(), series.last()) {
            Self::include(extent, first[0], last[0]);
        }
    }

    fn include_points(extent: &mut Option<Self>, points: &[[f64; 2]]) {
        if let (Some(first), Some(last)) = (points.first(), points.last()) {
            // The newest second is still being counted: its start is the newest instant known.
            Self::include(extent, first[0], last[0]);
        }
    }
}

/// Adds one chart's items to its plot.
type BuildFn = fn(&mut PlotUi<'_>, &Frame<'_>);

/// What one frame of charts needs besides the telemetry itself.
struct Frame<'t> {
    telemetry: &'t Telemetry,
    /// Outcomes per second: ok, throttled, errors.
    outcomes: [Vec<[f64; 2]>; 3],
    extent: Extent,
    /// The x range forced while following.
    follow: Option<(f64, f64)>,
    /// About one bucket per pixel column of a plot.
    buckets: usize,
    /// Which stack of charts (see [`charts_ui_in`]).
    stack: Id,
}

impl Frame<'_> {
    /// The time range to decimate for a plot, and its bucket count: what is in view (following,
    /// or as the plot last showed it), widened a little so lines run off the frame's edges.
    fn decimation_range(&self, plot_ui: &PlotUi<'_>) -> (f64, f64, usize) {
        let (from, to) = match self.follow {
            Some(range) => range,
            None => {
                let bounds = plot_ui.plot_bounds();
                if plot_ui.auto_bounds().x || !bounds.is_valid_x() {
                    (self.extent.earliest, self.extent.newest)
                } else {
                    (bounds.min()[0], bounds.max()[0])
                }
            }
        };
        let pad = (to - from).max(0.0) * EDGE_FRACTION;
        let buckets = ((self.buckets as f64) * (1.0 + 2.0 * EDGE_FRACTION)).ceil() as usize;
        (from - pad, to + pad, buckets.max(1))
    }
}

/// The live charts: a toolbar (follow, window length, reset zoom) and five plots sharing one time axis.
pub fn charts_ui(ui: &mut Ui, telemetry: &Telemetry, view: &mut ChartView) {
    charts_ui_in(ui, telemetry, view, Id::NULL, EMPTY_TEXT);
}

/// [`charts_ui`] for one of several stacks on screen (the simulator's sides) or another
/// source of traffic: `stack` keeps its plots' ids and linked time axis apart from the
/// others', and `empty_text` says how to get data into it.
pub fn charts_ui_in(ui: &mut Ui, telemetry: &Telemetry, view: &mut ChartView, stack: Id, empty_text: &str) {
    let mut reset = false;
    ui.horizontal(|ui| {
        ui.checkbox(&mut view.follow, "follow")
            .on_hover_text("Keep the newest data in view; panning or zooming a chart stops following.");
        let selected = WINDOWS
            .iter()
            .find(|(seconds, _)| same_window(*seconds, view.window_s))
            .map_or("custom", |(_, label)| *label);
        egui::ComboBox::new("ratescope_chart_window", "window")
            .selected_text(selected)
            .show_ui(ui, |ui| {
                for (seconds, label) in WINDOWS {
                    if ui.selectable_label(same_window(seconds, view.window_s), label).clicked() {
                        view.window_s = seconds;
                    }
                }
            })
            .response
            .on_hover_text("How many seconds the charts show while following.");
        if ui
            .button("reset zoom")
            .on_hover_text("Fit every chart's values again (and, when not following, the whole run).")
            .clicked()
        {
            reset = true;
        }
    });

    let outcomes =
        [OutcomeRates::OK, OutcomeRates::THROTTLED, OutcomeRates::ERROR].map(|kind| telemetry.outcomes.series(kind));
    let Some(extent) = data_extent(telemetry, &outcomes) else {
        ui.centered_and_justified(|ui| {
            ui.label(RichText::new(empty_text).weak().size(16.0));
        });
        return;
    };

    let title_height = ui.text_style_height(&egui::TextStyle::Body) + ui.spacing().item_spacing.y;
    let plot_height =
        ((ui.available_height() - 5.0 * (title_height + ui.spacing().item_spacing.y)) / 5.0).max(MIN_PLOT_HEIGHT);
    egui::ScrollArea::vertical().id_salt("ratescope_charts_scroll").auto_shrink(Vec2b::FALSE).show(ui, |ui| {
        let width = (ui.available_width() - Y_AXIS_WIDTH).max(1.0) * ui.pixels_per_point();
        let mut frame = Frame {
            telemetry,
            outcomes,
            extent,
            follow: view.follow.then(|| view.follow_range(extent)),
            buckets: (width.round() as usize).clamp(16, 8192),
            stack,
        };
        let charts: [(&str, BuildFn); 5] = [
            ("Tokens", tokens_ui),
            ("Queue", queue_ui),
            ("Outcomes / s", outcomes_ui),
            ("Retries", retries_ui),
            ("Latency (ms)", latency_ui),
        ];
        let last = charts.len() - 1;
        for (index, (title, build)) in charts.into_iter().enumerate() {
            ui.label(RichText::new(title).strong());
            let interacted = chart_ui(ui, &frame, title, index == last, plot_height, reset, build);
            if interacted && view.follow {
                // The user took over the time axis: stop following, keep their view.
                view.follow = false;
                frame.follow = None;
            }
        }
    });
}

/// One plot of the stack; true when the user panned or zoomed it.
fn chart_ui(
    ui: &mut Ui,
    frame: &Frame<'_>,
    title: &str,
    bottom: bool,
    height: f32,
    reset: bool,
    build: BuildFn,
) -> bool {
    let time_axis = frame.stack.with("ratescope_charts_time_axis");
    let mut plot = Plot::new(("ratescope_chart", title))
        .id(plot_id(frame.stack, title))
        .height(height)
        .legend(Legend::default().background_alpha(0.6))
        .link_axis(time_axis, [true, false])
        .link_cursor(time_axis, [true, false])
        .allow_drag([true, false])
        .allow_zoom([true, false])
        .allow_scroll(false)
        .y_axis_min_width(Y_AXIS_WIDTH)
        .grid_spacing(GRID_SPACING_MIN..=300.0)
        .y_grid_spacer(uniform_grid_spacer(value_axis_steps))
        .y_axis_formatter(value_axis_label)
        // Every series is a count, a level or a duration: never below zero, and an empty
        // chart spans 0–1 instead of egui_plot's default around zero.
        .include_y(0.0)
        .include_y(1.0)
        .include_x(frame.extent.earliest)
        .include_x(frame.extent.newest);
    plot = if bottom { plot.x_axis_label("seconds since the burst started") } else { plot.show_axes([false, true]) };
    if reset {
        plot = plot.reset();
    }
    let response = plot
        .show(ui, |plot_ui| {
            if let Some((from, to)) = frame.follow {
                plot_ui.set_auto_bounds([false, true]);
                plot_ui.set_plot_bounds_x(from..=to);
            }
            build(plot_ui, frame);
        })
        .response;
    let zoomed = response.contains_pointer() && ui.input(|input| input.zoom_delta_2d() != egui::Vec2::splat(1.0));
    response.dragged() || zoomed
}

fn tokens_ui(plot_ui: &mut PlotUi<'_>, frame: &Frame<'_>) {
    let (from, to, buckets) = frame.decimation_range(plot_ui);
    for (name, series) in &frame.telemetry.tokens {
        plot_ui.line(Line::new(name.clone(), series.decimated(from, to, buckets)));
    }
    for (name, series) in &frame.telemetry.server_remaining {
        let points = staircase(&series.decimated(from, to, buckets));
        plot_ui.line(Line::new(format!("server: {name}"), points).style(LineStyle::dashed_dense()).width(2.0));
    }
}

fn queue_ui(plot_ui: &mut PlotUi<'_>, frame: &Frame<'_>) {
    let (from, to, buckets) = frame.decimation_range(plot_ui);
    let telemetry = frame.telemetry;
    plot_ui.line(Line::new("queued", staircase(&telemetry.queued.decimated(from, to, buckets))));
    plot_ui.line(Line::new("in flight", staircase(&telemetry.in_flight.decimated(from, to, buckets))));
}

fn outcomes_ui(plot_ui: &mut PlotUi<'_>, frame: &Frame<'_>) {
    let (from, to, buckets) = frame.decimation_range(plot_ui);
    let kinds = [("2xx", OK_COLOR), ("429", THROTTLED_COLOR), ("other errors", ERROR_COLOR)];
    for (slot, ((name, color), per_second)) in kinds.into_iter().zip(&frame.outcomes).enumerate() {
        // Three thin bars per second (or per bucket when zoomed out), side by side.
        let bars: Vec<Bar> = per_second_segments(per_second, from, to, buckets)
            .into_iter()
            .filter(|(_, _, value)| *value > 0.0)
            .map(|(begin, finish, value)| {
                let width = (finish - begin) / 3.0;
                Bar::new(begin + width * (slot as f64 + 0.5), value).width(width * 0.9)
            })
            .collect();
        plot_ui.bar_chart(BarChart::new(name, bars).color(color));
    }
}

fn retries_ui(plot_ui: &mut PlotUi<'_>, frame: &Frame<'_>) {
    let (from, to, buckets) = frame.decimation_range(plot_ui);
    let points = frame.telemetry.retries.decimated(from, to, buckets);
    plot_ui.points(Points::new("backoff delay (s)", points).radius(2.5).color(THROTTLED_COLOR));
}

fn latency_ui(plot_ui: &mut PlotUi<'_>, frame: &Frame<'_>) {
    let (from, to, buckets) = frame.decimation_range(plot_ui);
    let telemetry = frame.telemetry;
    plot_ui.line(Line::new("service", telemetry.service_ms.decimated(from, to, buckets)));
    plot_ui.line(Line::new("total", telemetry.total_ms.decimated(from, to, buckets)));
}

/// A plot's global id: its zoom survives the surrounding layout changing.
fn plot_id(stack: Id, title: &str) -> Id {
    stack.with(("ratescope_chart", title))
}

/// The time extent of everything recorded, or `None` when nothing has been.
fn data_extent(telemetry: &Telemetry, outcomes: &[Vec<[f64; 2]>; 3]) -> Option<Extent> {
    let mut extent = None;
    for series in telemetry.tokens.values().chain(telemetry.server_remaining.values()) {
        Extent::include_series(&mut extent, series);
    }
    for series in
        [&telemetry.queued, &telemetry.in_flight, &telemetry.retries, &telemetry.service_ms, &telemetry.total_ms]
    {
        Extent::include_series(&mut extent, series);
    }
    for points in outcomes {
        Extent::include_points(&mut extent, points);
    }
    extent
}

fn same_window(a: f64, b: f64) -> bool {
    let all = |seconds: f64| !seconds.is_finite() || seconds <= 0.0;
    (all(a) && all(b)) || a == b
}

/// A staircase through `points`: each value holds until the next point's time.
fn staircase(points: &[[f64; 2]]) -> PlotPoints<'static> {
    let mut out = Vec::with_capacity(points.len() * 2);
    let mut previous: Option<f64> = None;
    for &[t, value] in points {
        if let Some(held) = previous {
            out.push([t, held]);
        }
        out.push([t, value]);
        previous = Some(value);
    }
    out.into()
}

/// Per-second counts `(second, count)` as `(start, end, value)` segments over `from..=to`: each
/// count spans its second, and with more seconds than `buckets` each bucket holds the busiest
/// second inside it, so spikes survive zooming out.
fn per_second_segments(per_second: &[[f64; 2]], from: f64, to: f64, buckets: usize) -> Vec<(f64, f64, f64)> {
    let start = per_second.partition_point(|point| point[0] + 1.0 < from);
    let end = per_second.partition_point(|point| point[0] <= to);
    let visible = per_second.get(start..end).unwrap_or_default();
    let buckets = buckets.max(1);
    // Segments (start, end, value) in time order.
    let mut segments: Vec<(f64, f64, f64)> = Vec::with_capacity(visible.len().min(buckets));
    if visible.len() <= buckets || to <= from {
        segments.extend(visible.iter().map(|&[second, count]| (second, second + 1.0, count)));
    } else {
        let width = (to - from) / buckets as f64;
        let mut current: Option<(usize, f64)> = None;
        for &[second, count] in visible {
            let bucket = ((second - from).max(0.0) / width) as usize;
            match &mut current {
                Some((index, peak)) if *index == bucket => *peak = peak.max(count),
                _ => {
                    if let Some((index, peak)) = current.take() {
                        segments.push(bucket_segment(from, width, index, peak));
                    }
                    current = Some((bucket, count));
                }
            }
        }
        if let Some((index, peak)) = current {
            segments.push(bucket_segment(from, width, index, peak));
        }
    }
    segments
}

fn bucket_segment(from: f64, width: f64, index: usize, peak: f64) -> (f64, f64, f64) {
    let begin = from + index as f64 * width;
    (begin, begin + width, peak)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use egui_kittest::Harness;
    use egui_kittest::kittest::Queryable;
    use http::HeaderMap;
    use tokio::time::Instant;

    use super::*;
    use crate::engine::{BudgetSpec, Limiter, LimiterConfig};
    use crate::http::retry::RetryReason;
    use crate::http::{Event, EventKind, RateLimitInfo};

    fn harness(telemetry: Telemetry) -> Harness<'static, (Telemetry, ChartView)> {
        Harness::builder().with_size(egui::vec2(1000.0, 700.0)).build_ui_state(
            |ui, (telemetry, view): &mut (Telemetry, ChartView)| charts_ui(ui, telemetry, view),
            (telemetry, ChartView::default()),
        )
    }

    #[test]
    fn without_data_the_empty_state_shows() {
        let mut harness = harness(Telemetry::new(Instant::now(), 1000, 100));
        harness.run();
        harness.get_by_label(EMPTY_TEXT);
        harness.get_by_label("follow");
        assert!(harness.query_by_label("Tokens").is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn a_hundred_thousand_points_are_drawn_without_panic() {
        let origin = Instant::now();
        let mut telemetry = Telemetry::new(origin, 200_000, 100);
        let limiter = Limiter::new(
            "api",
            LimiterConfig::new().with_budget(BudgetSpec::token_bucket("rate", 10, "5/1s".parse().unwrap()).unwrap()),
        )
        .unwrap();
        let response = |attempt: u32, status: u16| EventKind::Response {
            attempt,
            status,
            service_time: Duration::from_millis(20),
            info: Box::new(RateLimitInfo::parse(
                Some(status),
                &{
                    let mut headers = HeaderMap::new();
                    headers.insert("x-ratelimit-limit", "100".parse().unwrap());
                    headers.insert("x-ratelimit-remaining", "42".parse().unwrap());
                    headers
                },
                None,
                std::time::SystemTime::now(),
            )),
            headers: Box::new(HeaderMap::new()),
        };
        for i in 0..100_000u64 {
            tokio::time::advance(Duration::from_millis(10)).await;
            let now = Instant::now();
            telemetry.sample(&[limiter.snapshot()]);
            let status = if i % 10 == 0 { 429 } else { 200 };
            let event = |kind| Event { request_id: i, key: Some("api".into()), at: now, kind };
            telemetry.ingest(&event(response(1, status)));
            telemetry.ingest(&event(EventKind::Finished { status, attempts: 1, total: Duration::from_millis(30) }));
            if status == 429 {
                telemetry.ingest(&event(EventKind::RetryScheduled {
                    attempt: 1,
                    delay: Duration::from_millis(500),
                    reason: RetryReason::Backoff,
                    cause: "429".into(),
                }));
            }
        }
        assert_eq!(telemetry.service_ms.len(), 100_000);
        let newest = telemetry.service_ms.last().unwrap()[0];
        let mut harness = harness(telemetry);
        harness.run();
        harness.get_by_label("Tokens");
        harness.get_by_label("Latency (ms)");
        assert!(harness.query_by_label(EMPTY_TEXT).is_none());
        // Following: every plot shows the same last minute.
        for title in ["Tokens", "Queue", "Outcomes / s", "Retries", "Latency (ms)"] {
            let memory = egui_plot::PlotMemory::load(&harness.ctx, plot_id(Id::NULL, title)).unwrap();
            let bounds = *memory.transform().bounds();
            assert!((bounds.min()[0] - (newest - 60.0)).abs() < 1e-6, "{title}: {bounds:?}");
            assert!((bounds.max()[0] - newest).abs() < 1e-6, "{title}: {bounds:?}");
            assert!(bounds.min()[1] <= 0.0, "{title}: the y axis includes 0");
        }

        // Panning a chart stops following; the time axis stays shared.
        let frame = *egui_plot::PlotMemory::load(&harness.ctx, plot_id(Id::NULL, "Queue")).unwrap().transform().frame();
        harness.hover_at(frame.center());
        harness.drag_at(frame.center());
        harness.step();
        for step in 1..=4 {
            harness.hover_at(frame.center() + egui::vec2(50.0 * step as f32, 0.0));
            harness.step();
        }
        harness.drop_at(frame.center() + egui::vec2(200.0, 0.0));
        harness.run();
        assert!(!harness.state().1.follow, "panning stops following");
        let x_range = |title| {
            let memory = egui_plot::PlotMemory::load(&harness.ctx, plot_id(Id::NULL, title)).unwrap();
            let bounds = *memory.transform().bounds();
            (bounds.min()[0], bounds.max()[0])
        };
        let panned = x_range("Queue");
        assert!(panned.1 < newest - 1.0, "panned into the past: {panned:?}");
        for title in ["Tokens", "Outcomes / s", "Retries", "Latency (ms)"] {
            let (from, to) = x_range(title);
            assert!((from - panned.0).abs() < 1e-9 && (to - panned.1).abs() < 1e-9, "{title} is linked");
        }

        // The whole run at once, not following: still decimated, still no panic.
        harness.state_mut().1 = ChartView { follow: false, window_s: f64::INFINITY };
        harness.get_by_label("reset zoom").click();
        harness.run();
        assert!(!harness.state().1.follow);
        let bounds =
            *egui_plot::PlotMemory::load(&harness.ctx, plot_id(Id::NULL, "Queue")).unwrap().transform().bounds();
        assert!(bounds.min()[0] <= 0.01 && bounds.max()[0] >= newest, "the whole run: {bounds:?}");
    }

    #[test]
    fn per_second_counts_become_bounded_segments() {
        let counts: Vec<[f64; 2]> = (0..10_000).map(|s| [s as f64, (s % 5) as f64]).collect();
        let segments = per_second_segments(&counts, 0.0, 10_000.0, 100);
        assert!(segments.len() <= 100, "{}", segments.len());
        assert!(segments.iter().all(|(_, _, value)| *value == 4.0), "each bucket keeps its peak");
        let few = per_second_segments(&[[2.0, 3.0], [5.0, 1.0]], 0.0, 10.0, 100);
        assert_eq!(few, vec![(2.0, 3.0, 3.0), (5.0, 6.0, 1.0)]);
    }

    #[test]
    fn following_shows_the_newest_window() {
        let view = ChartView { follow: true, window_s: 10.0 };
        assert_eq!(view.follow_range(Extent { earliest: 0.0, newest: 100.0 }), (90.0, 100.0));
        assert_eq!(view.follow_range(Extent { earliest: 0.0, newest: 4.0 }), (0.0, 4.0));
        let all = ChartView { follow: true, window_s: f64::INFINITY };
        assert_eq!(all.follow_range(Extent { earliest: 2.0, newest: 2.0 }), (2.0, 3.0));
    }
}
