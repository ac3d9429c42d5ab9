//! Live charts of a burst: tokens, queue, outcomes, retries and latency, stacked on one shared time axis.
//!
//! Every series is decimated to about one point per pixel column of the plot before it is
//! handed to `egui_plot`, so a long run costs the same per frame as a short one.

use egui::{Color32, Id, RichText, Ui, Vec2b};
use egui_plot::{
    Bar, BarChart, GridInput, GridMark, HoverPosition, Line, LineStyle, Plot, PlotPoints, PlotUi, uniform_grid_spacer,
};

use super::value_axis::{GRID_SPACING_MIN, value_axis_label, value_axis_steps};
use crate::telemetry::{OutcomeRates, PerSecond, RetryRates, Series, Telemetry};

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
        if let (Some(first), Some(last)) = (series.first_time(), series.last()) {
            Self::include(extent, first, last[0]);
        }
    }
}

/// How a chart's y values read: plain counts, a share of capacity, or milliseconds on a log scale.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scale {
    Count,
    Percent,
    LogMs,
}

/// One entry of a chart's legend, drawn outside the plot: its colour, whether its line is
/// dashed, its name and the newest real value.
#[derive(Debug, Clone, PartialEq)]
struct LegendEntry {
    color: Color32,
    dashed: bool,
    text: String,
}

/// One chart of the stack: what it is called, what it draws and how its values read.
struct Chart {
    title: &'static str,
    build: BuildFn,
    scale: Scale,
    /// A line under the title that says how to read it.
    note: Option<&'static str>,
}

/// Adds one chart's items to its plot, for the live run and (faded) the run compared with;
/// returns its legend.
type BuildFn = fn(&mut PlotUi<'_>, &Frame<'_>, Source<'_>) -> Vec<LegendEntry>;

/// Whose data a chart draws: the live run's, or the earlier run's it is compared with.
#[derive(Clone, Copy)]
struct Source<'t> {
    telemetry: &'t Telemetry,
    /// The earlier run's lines are drawn fainter, named "<prefix>…".
    previous: bool,
}

impl Source<'_> {
    fn name(&self, name: &str) -> String {
        if self.previous { format!("{PREVIOUS_PREFIX}{name}") } else { name.to_owned() }
    }

    fn color(&self, color: Color32) -> Color32 {
        if self.previous { color.gamma_multiply(0.45) } else { color }
    }
}

/// What a series of the run compared with is called on the charts.
pub const PREVIOUS_PREFIX: &str = "before · ";

/// Colours of the line series, in order.
const PALETTE: [Color32; 6] = [
    Color32::from_rgb(66, 133, 244),
    Color32::from_rgb(156, 39, 176),
    Color32::from_rgb(0, 150, 136),
    Color32::from_rgb(121, 85, 72),
    Color32::from_rgb(233, 30, 99),
    Color32::from_rgb(96, 125, 139),
];

/// What the dashed and solid lines of the Tokens chart are.
pub const TOKENS_NOTE: &str = "solid: tokens left in ratescope's limiter (\"server:…\" ones are its adaptive copy of a \
     server budget) · dashed: what the server's headers say is left · all as % of capacity";

/// What one frame of charts needs besides the telemetry itself.
struct Frame<'t> {
    telemetry: &'t Telemetry,
    /// An earlier run drawn under the live one, to compare.
    previous: Option<&'t Telemetry>,
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
    compare_charts_ui(ui, telemetry, None, view, stack, empty_text);
}

/// [`charts_ui_in`] with an earlier run's series drawn fainter under the live ones.
pub fn compare_charts_ui(
    ui: &mut Ui,
    telemetry: &Telemetry,
    previous: Option<&Telemetry>,
    view: &mut ChartView,
    stack: Id,
    empty_text: &str,
) {
    let options = StackOptions { id: stack, empty_text, previous, ranges: None };
    stack_ui(ui, telemetry, view, &options);
}

/// How a stack of charts is shown besides its data.
#[derive(Clone, Copy)]
pub struct StackOptions<'t> {
    /// Keeps the stack's plot ids and linked time axis apart from other stacks'.
    pub id: Id,
    /// What the stack says before it has data.
    pub empty_text: &'t str,
    /// An earlier run, drawn fainter under the live one.
    pub previous: Option<&'t Telemetry>,
    /// The y range each chart includes at least (see [`chart_ranges`]): stacks side by side
    /// given the same ranges read on the same scales.
    pub ranges: Option<ChartRanges>,
}

/// Each chart's (lowest, highest) y value, in the chart's own units, in stack order.
pub type ChartRanges = [(f64, f64); CHARTS];

/// How many charts a stack holds.
pub const CHARTS: usize = 5;

/// The y range of each chart of a stack showing `telemetry`.
pub fn chart_ranges(telemetry: &Telemetry) -> ChartRanges {
    let ranges = |series: &[&Series]| series.iter().filter_map(|series| series.value_range()).collect::<Vec<_>>();
    let highest = |series: &[&Series]| ranges(series).iter().map(|(_, high)| *high).fold(0.0, f64::max);
    let peak_of = |counts: &[u32]| f64::from(counts.iter().copied().max().unwrap_or(0));
    let outcomes =
        [OutcomeRates::OK, OutcomeRates::THROTTLED, OutcomeRates::ERROR].map(|kind| telemetry.outcomes.peak(kind));
    let retries: Vec<u32> = (0..RetryRates::NAMES.len()).map(|kind| telemetry.retries.peak(kind)).collect();
    let latencies = [&telemetry.service_ms, &telemetry.total_ms];
    let fastest = ranges(&latencies).iter().map(|(low, _)| *low).fold(f64::INFINITY, f64::min);
    let slowest = highest(&latencies);
    let latency = if fastest.is_finite() { (log_ms(fastest), log_ms(slowest)) } else { (0.0, 1.0) };
    [
        (0.0, 100.0),
        (0.0, highest(&[&telemetry.open, &telemetry.queued, &telemetry.in_flight])),
        (0.0, peak_of(&outcomes)),
        (0.0, peak_of(&retries)),
        latency,
    ]
}

/// The wider of two stacks' ranges, chart by chart.
pub fn widest_ranges(a: &ChartRanges, b: &ChartRanges) -> ChartRanges {
    std::array::from_fn(|index| (a[index].0.min(b[index].0), a[index].1.max(b[index].1)))
}

/// A stack of charts with `options`.
pub fn stack_ui(ui: &mut Ui, telemetry: &Telemetry, view: &mut ChartView, options: &StackOptions<'_>) {
    let StackOptions { id: stack, empty_text, previous, ranges } = *options;
    let reset = chart_toolbar_ui(ui, view);
    let Some(extent) = data_extent(telemetry) else {
        ui.centered_and_justified(|ui| {
            ui.label(RichText::new(empty_text).weak().size(16.0));
        });
        return;
    };
    let charts = stack_charts();
    let row_height = ui.text_style_height(&egui::TextStyle::Body) + ui.spacing().item_spacing.y;
    // Each chart: its title, its legend below the plot, and the plot with its own time axis.
    // Title, legend (its entries widget-tall) and the spacing between them and the plot: about
    // three text rows, as measured on screen.
    let per_chart_text = 3.0 * row_height + ui.spacing().item_spacing.y;
    let notes = charts.iter().filter(|chart| chart.note.is_some()).count() as f32 * row_height;
    // As many whole charts as fit share the height (the rest scroll into view), so every
    // point of room the panels leave, or give back when folded or dragged, goes to the plots.
    let room = ui.available_height() - notes;
    let fits = (room / (MIN_PLOT_HEIGHT + per_chart_text)).floor().clamp(1.0, charts.len() as f32);
    let plot_height = (room / fits - per_chart_text).max(MIN_PLOT_HEIGHT);
    egui::ScrollArea::vertical().id_salt("ratescope_charts_scroll").auto_shrink(Vec2b::FALSE).show(ui, |ui| {
        let width = (ui.available_width() - Y_AXIS_WIDTH).max(1.0) * ui.pixels_per_point();
        let mut frame = Frame {
            telemetry,
            previous,
            extent,
            follow: view.follow.then(|| view.follow_range(extent)),
            buckets: (width.round() as usize).clamp(16, 8192),
            stack,
        };
        for (index, chart) in charts.iter().enumerate() {
            ui.label(RichText::new(chart.title).strong());
            if let Some(note) = chart.note {
                ui.add(egui::Label::new(RichText::new(note).weak().small()).truncate());
            }
            let range = ranges.map(|ranges| ranges[index]);
            let interacted = chart_ui(ui, &frame, chart, (plot_height, range), reset);
            if interacted && view.follow {
                // The user took over the time axis: stop following, keep their view.
                view.follow = false;
                frame.follow = None;
            }
        }
    });
}

/// The charts of a stack, top to bottom.
fn stack_charts() -> [Chart; CHARTS] {
    [
        Chart { title: "Tokens", build: tokens_ui, scale: Scale::Percent, note: Some(TOKENS_NOTE) },
        Chart { title: "Queue", build: queue_ui, scale: Scale::Count, note: None },
        Chart { title: "Outcomes / s", build: outcomes_ui, scale: Scale::Count, note: None },
        Chart { title: "Retries / s", build: retries_ui, scale: Scale::Count, note: None },
        Chart { title: "Latency (ms)", build: latency_ui, scale: Scale::LogMs, note: None },
    ]
}

/// Charts `which` of a stack for a picture: no toolbar, no scrolling, each plot `plot_height`
/// tall at the full width, over the time range the stack `on_screen` shows now. Its plots have
/// ids of their own, so drawing them leaves the zoom of the ones on screen alone.
pub fn image_charts_ui(
    ui: &mut Ui,
    telemetry: &Telemetry,
    previous: Option<&Telemetry>,
    view: &ChartView,
    on_screen: Id,
    which: std::ops::Range<usize>,
    plot_height: f32,
) {
    let Some(extent) = data_extent(telemetry) else { return };
    let shown = egui_plot::PlotMemory::load(ui.ctx(), plot_id(on_screen, "Tokens"))
        .map(|memory| memory.bounds().range_x())
        .map(|range| (*range.start(), *range.end()))
        .filter(|(from, to)| from.is_finite() && to.is_finite() && to > from);
    let range = if view.follow { view.follow_range(extent) } else { shown.unwrap_or((extent.earliest, extent.newest)) };
    let width = (ui.available_width() - Y_AXIS_WIDTH).max(1.0) * ui.pixels_per_point();
    let frame = Frame {
        telemetry,
        previous,
        extent,
        follow: Some(range),
        buckets: (width.round() as usize).clamp(16, 8192),
        stack: on_screen.with("ratescope_picture"),
    };
    for chart in stack_charts().iter().skip(which.start).take(which.len()) {
        ui.label(RichText::new(chart.title).strong());
        if let Some(note) = chart.note {
            ui.add(egui::Label::new(RichText::new(note).weak().small()).wrap());
        }
        chart_ui(ui, &frame, chart, (plot_height, None), false);
    }
}

/// Follow, window length and reset zoom; true when reset zoom was clicked.
fn chart_toolbar_ui(ui: &mut Ui, view: &mut ChartView) -> bool {
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
        reset = ui
            .button("reset zoom")
            .on_hover_text("Fit every chart's values again (and, when not following, the whole run).")
            .clicked();
    });
    reset
}

/// One plot of the stack with its time axis and, below it, its legend; true when the user
/// panned or zoomed it.
fn chart_ui(ui: &mut Ui, frame: &Frame<'_>, chart: &Chart, size: (f32, Option<(f64, f64)>), reset: bool) -> bool {
    let (height, range) = size;
    let time_axis = frame.stack.with("ratescope_charts_time_axis");
    let telemetry = frame.telemetry;
    let scale = chart.scale;
    let mut plot = Plot::new(("ratescope_chart", chart.title))
        .id(plot_id(frame.stack, chart.title))
        .height(height)
        .link_axis(time_axis, [true, false])
        .link_cursor(time_axis, [true, false])
        .allow_drag([true, false])
        .allow_zoom([true, false])
        .allow_scroll(false)
        .y_axis_min_width(Y_AXIS_WIDTH)
        .grid_spacing(GRID_SPACING_MIN..=300.0)
        .x_axis_formatter(|mark, _| format!("{}s", value_axis_label(mark, &(0.0..=0.0))))
        .label_formatter(move |position| hover_text(telemetry, scale, position))
        .include_x(frame.extent.earliest)
        .include_x(frame.extent.newest);
    plot = match scale {
        // Every series is a count, a level or a duration: never below zero, and an empty
        // chart spans 0–1 instead of egui_plot's default around zero.
        Scale::Count => plot
            .y_grid_spacer(uniform_grid_spacer(value_axis_steps))
            .y_axis_formatter(value_axis_label)
            .include_y(0.0)
            .include_y(1.0),
        Scale::Percent => plot
            .y_grid_spacer(uniform_grid_spacer(value_axis_steps))
            .y_axis_formatter(|mark, range| format!("{}%", value_axis_label(mark, range)))
            .include_y(0.0)
            .include_y(100.0),
        Scale::LogMs => plot.y_grid_spacer(log_ms_marks).y_axis_formatter(|mark, _| format_ms(10f64.powf(mark.value))),
    };
    if let Some((low, high)) = range {
        plot = plot.include_y(low).include_y(high);
    }
    if reset {
        plot = plot.reset();
    }
    let build = chart.build;
    let shown = plot.show(ui, |plot_ui| {
        if let Some((from, to)) = frame.follow {
            plot_ui.set_auto_bounds([false, true]);
            plot_ui.set_plot_bounds_x(from..=to);
        }
        let mut legend = match frame.previous {
            Some(previous) => build(plot_ui, frame, Source { telemetry: previous, previous: true }),
            None => Vec::new(),
        };
        let live = build(plot_ui, frame, Source { telemetry, previous: false });
        legend.splice(0..0, live);
        legend
    });
    legend_ui(ui, &shown.inner);
    let response = shown.response;
    let zoomed = response.contains_pointer() && ui.input(|input| input.zoom_delta_2d() != egui::Vec2::splat(1.0));
    response.dragged() || zoomed
}

/// A chart's legend as one wrapping row under its plot: a short solid or dashed line in the
/// series' colour, its name and newest value.
fn legend_ui(ui: &mut Ui, entries: &[LegendEntry]) {
    const SWATCH: f32 = 18.0;
    const GAP: f32 = 4.0;
    ui.horizontal_wrapped(|ui| {
        for entry in entries {
            // Swatch and text are one widget at the body's size (legends are read, not glanced
            // at), so the row wraps between entries, never inside one or between its two parts.
            let text_color = ui.visuals().text_color();
            let font = egui::TextStyle::Body.resolve(ui.style());
            let galley = ui.painter().layout_no_wrap(entry.text.clone(), font, text_color);
            let size = egui::vec2(SWATCH + GAP + galley.size().x, galley.size().y.max(10.0));
            let (rect, response) = ui.allocate_exact_size(size, egui::Sense::hover());
            response.widget_info(|| egui::WidgetInfo::labeled(egui::Role::Label, true, &entry.text));
            let stroke = egui::Stroke::new(2.0, entry.color);
            let y = rect.center().y;
            let (left, right) = (egui::pos2(rect.left(), y), egui::pos2(rect.left() + SWATCH, y));
            if entry.dashed {
                ui.painter().add(egui::Shape::dashed_line(&[left, right], stroke, 3.0, 2.0));
            } else {
                ui.painter().line_segment([left, right], stroke);
            }
            ui.painter().galley(egui::pos2(rect.left() + SWATCH + GAP, rect.top()), galley, text_color);
            ui.add_space(6.0);
        }
    });
}

/// The hover text of a chart: the series under the pointer, its real value and the time.
fn hover_text(telemetry: &Telemetry, scale: Scale, position: &HoverPosition<'_>) -> Option<String> {
    let HoverPosition::NearDataPoint { plot_name, position, .. } = position else { return None };
    let name = plot_name.strip_prefix(PREVIOUS_PREFIX).unwrap_or(plot_name);
    let value = match scale {
        Scale::Count => round2(position.y),
        Scale::Percent => {
            let capacity = match name.strip_prefix(SERVER_PREFIX) {
                Some(budget) => telemetry.server_limit.get(budget),
                None => telemetry.token_capacity.get(name),
            };
            match capacity {
                Some(capacity) => {
                    format!("{} of {} ({:.0}%)", round2(position.y / 100.0 * capacity), round2(*capacity), position.y)
                }
                None => format!("{:.0}%", position.y),
            }
        }
        Scale::LogMs => format_ms(10f64.powf(position.y)),
    };
    Some(format!("{plot_name}: {value}\nat {:.2}s", position.x))
}

/// The prefix of the server's own series on the Tokens chart.
/// Distinct from the adaptive copy's `server:NAME` budgets that share the chart.
const SERVER_PREFIX: &str = "server says: ";

fn round2(value: f64) -> String {
    let text = format!("{value:.2}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    if text == "-0" { "0".to_owned() } else { text.to_owned() }
}

/// `0.8 ms`, `25 ms`, `1.5 s`.
fn format_ms(ms: f64) -> String {
    if ms >= 1000.0 {
        format!("{} s", round2(ms / 1000.0))
    } else if ms >= 10.0 {
        format!("{ms:.0} ms")
    } else {
        format!("{} ms", round2(ms))
    }
}

/// Grid marks of a log10 axis: each decade strong, 2 and 5 of it fainter.
fn log_ms_marks(input: GridInput) -> Vec<GridMark> {
    let (low, high) = input.bounds;
    if !(low.is_finite() && high.is_finite()) || high <= low {
        return Vec::new();
    }
    let mut marks = Vec::new();
    for decade in (low.floor() as i32 - 1)..=(high.ceil() as i32) {
        // Decades count as wide steps so their labels show even when a decade is short.
        for (factor, step_size) in [(1.0f64, 3.0), (2.0, 0.5), (5.0, 0.5)] {
            let value = f64::from(decade) + factor.log10();
            if (low..=high).contains(&value) {
                marks.push(GridMark { value, step_size });
            }
        }
    }
    marks
}

/// `value` in milliseconds as its log10, the latency chart's y (anything under 0.1 ms as 0.1 ms,
/// so a cache hit does not stretch the axis over decades nobody reads).
fn log_ms(value: f64) -> f64 {
    value.max(0.1).log10()
}

/// The newest value of `series`, as a legend shows it.
fn newest(series: &Series) -> Option<f64> {
    series.last().map(|[_, value]| value)
}

fn tokens_ui(plot_ui: &mut PlotUi<'_>, frame: &Frame<'_>, source: Source<'_>) -> Vec<LegendEntry> {
    let (from, to, buckets) = frame.decimation_range(plot_ui);
    let telemetry = source.telemetry;
    let mut legend = Vec::new();
    let share = |points: Vec<[f64; 2]>, capacity: Option<&f64>| -> Vec<[f64; 2]> {
        let capacity = capacity.copied().filter(|capacity| *capacity > 0.0);
        points.into_iter().map(|[t, value]| [t, capacity.map_or(value, |capacity| value / capacity * 100.0)]).collect()
    };
    let mut colors = PALETTE.iter().cycle();
    for (name, series) in &telemetry.tokens {
        let color = source.color(colors.next().copied().unwrap_or(Color32::GRAY));
        let capacity = telemetry.token_capacity.get(name);
        let points = share(series.decimated(from, to, buckets), capacity);
        // Sampled evenly (no gaps): egui_plot may draw its dense columns as a band, cheaply.
        plot_ui.line(Line::new(source.name(name), points).color(color));
        let now = newest_of(series, capacity, telemetry.units.get(name));
        legend.push(LegendEntry { color, dashed: false, text: format!("{}{now}", source.name(name)) });
    }
    for (name, series) in &telemetry.server_remaining {
        let color = source.color(colors.next().copied().unwrap_or(Color32::GRAY));
        let limit = telemetry.server_limit.get(name);
        let points = staircase(&share(series.decimated(from, to, buckets), limit), buckets);
        let label = source.name(&format!("{SERVER_PREFIX}{name}"));
        plot_ui.line(line(label.clone(), points).color(color).style(LineStyle::dashed_dense()).width(2.0));
        let now = newest_of(series, limit, telemetry.server_units.get(name));
        legend.push(LegendEntry { color, dashed: true, text: format!("{label}{now}") });
    }
    legend
}

/// A legend's newest value: ` 40 of 1000`, with the unit when it is not requests
/// (` 900 of 4000 tokens`).
fn newest_of(series: &Series, capacity: Option<&f64>, unit: Option<&String>) -> String {
    let unit = unit.map_or_else(String::new, |unit| format!(" {unit}"));
    newest(series).map_or_else(String::new, |value| match capacity {
        Some(capacity) => format!(" {} of {}{unit}", round2(value), round2(*capacity)),
        None => format!(" {}{unit}", round2(value)),
    })
}

fn queue_ui(plot_ui: &mut PlotUi<'_>, frame: &Frame<'_>, source: Source<'_>) -> Vec<LegendEntry> {
    let (from, to, buckets) = frame.decimation_range(plot_ui);
    let telemetry = source.telemetry;
    let lines = [
        ("open (sent or waiting, not done)", &telemetry.open, PALETTE[0]),
        ("queued in the limiter", &telemetry.queued, THROTTLED_COLOR),
        ("in flight (limiter)", &telemetry.in_flight, PALETTE[2]),
    ];
    let mut legend = Vec::new();
    for (name, series, color) in lines {
        if series.is_empty() {
            continue;
        }
        let (name, color) = (source.name(name), source.color(color));
        plot_ui.line(line(name.clone(), staircase(&series.decimated(from, to, buckets), buckets)).color(color));
        let now = newest(series).map_or_else(String::new, |value| format!(" {}", round2(value)));
        legend.push(LegendEntry { color, dashed: false, text: format!("{name}{now}") });
    }
    legend
}

/// Bars per second (or per bucket when zoomed out) of several kinds side by side; an earlier
/// run's counts as faint steps.
fn per_second_bars_ui<const N: usize>(
    plot_ui: &mut PlotUi<'_>,
    frame: &Frame<'_>,
    source: Source<'_>,
    counts: &PerSecond<N>,
    kinds: &[(&str, Color32, usize)],
) -> Vec<LegendEntry> {
    let (from, to, buckets) = frame.decimation_range(plot_ui);
    let mut legend = Vec::new();
    let shown = kinds.len().max(1) as f64;
    let totals = counts.totals();
    for (slot, (name, color, kind)) in kinds.iter().enumerate() {
        let (label, color) = (source.name(name), source.color(*color));
        legend.push(LegendEntry {
            color,
            dashed: source.previous,
            text: format!("{label} ({} in all)", totals[*kind]),
        });
        let segments = counts.segments(*kind, from, to, buckets);
        if source.previous {
            let steps: Vec<[f64; 2]> =
                segments.iter().flat_map(|&(begin, end, value)| [[begin, value], [end, value]]).collect();
            plot_ui.line(line(label, steps).color(color).style(LineStyle::dashed_loose()));
            continue;
        }
        let bars: Vec<Bar> = segments
            .into_iter()
            .filter(|(_, _, value)| *value > 0.0)
            .map(|(begin, finish, value)| {
                let width = (finish - begin) / shown;
                Bar::new(begin + width * (slot as f64 + 0.5), value).width(width * 0.9).name(&label)
            })
            .collect();
        plot_ui.bar_chart(BarChart::new(label, bars).color(color));
    }
    legend
}

fn outcomes_ui(plot_ui: &mut PlotUi<'_>, frame: &Frame<'_>, source: Source<'_>) -> Vec<LegendEntry> {
    let kinds = [
        ("2xx", OK_COLOR, OutcomeRates::OK),
        ("429", THROTTLED_COLOR, OutcomeRates::THROTTLED),
        ("other errors", ERROR_COLOR, OutcomeRates::ERROR),
    ];
    per_second_bars_ui(plot_ui, frame, source, &source.telemetry.outcomes, &kinds)
}

fn retries_ui(plot_ui: &mut PlotUi<'_>, frame: &Frame<'_>, source: Source<'_>) -> Vec<LegendEntry> {
    let retries = &source.telemetry.retries;
    let colors = [THROTTLED_COLOR, ERROR_COLOR, PALETTE[1], PALETTE[3], Color32::GRAY];
    let totals = retries.totals();
    let kinds: Vec<(&str, Color32, usize)> = RetryRates::NAMES
        .iter()
        .zip(colors)
        .enumerate()
        // A cause that never happened takes no room, but 429 is always named.
        .filter(|(kind, _)| *kind == RetryRates::THROTTLED || totals[*kind] > 0)
        .map(|(kind, (name, color))| (*name, color, kind))
        .collect();
    per_second_bars_ui(plot_ui, frame, source, retries, &kinds)
}

fn latency_ui(plot_ui: &mut PlotUi<'_>, frame: &Frame<'_>, source: Source<'_>) -> Vec<LegendEntry> {
    let (from, to, buckets) = frame.decimation_range(plot_ui);
    let telemetry = source.telemetry;
    let mut legend = Vec::new();
    for (name, series, color) in [
        ("service (one attempt)", &telemetry.service_ms, PALETTE[0]),
        ("total (queue, retries and all)", &telemetry.total_ms, PALETTE[1]),
    ] {
        let (name, color) = (source.name(name), source.color(color));
        let points: Vec<[f64; 2]> =
            series.decimated(from, to, buckets).into_iter().map(|[t, ms]| [t, log_ms(ms)]).collect();
        plot_ui.line(line(name.clone(), points).color(color));
        let now = newest(series).map_or_else(String::new, |ms| format!(" {}", format_ms(ms)));
        legend.push(LegendEntry { color, dashed: false, text: format!("{name}{now}") });
    }
    legend
}

/// A line of the charts with steps or gaps. egui_plot would merge points that share a pixel
/// column into a filled band, drawn as a wedge between two columns far apart (a burst's 50
/// requests queued in one millisecond showed as a triangle); the series are decimated already.
fn line<'a>(name: impl Into<String>, points: impl Into<PlotPoints<'a>>) -> Line<'a> {
    Line::new(name, points).allow_band(false)
}

/// The global ids of the plots of `stack`, top to bottom: what their memories (zoom, pan)
/// are kept under.
pub fn chart_plot_ids(stack: Id) -> [Id; CHARTS] {
    stack_charts().map(|chart| plot_id(stack, chart.title))
}

/// A plot's global id: its zoom survives the surrounding layout changing.
pub(crate) fn plot_id(stack: Id, title: &str) -> Id {
    stack.with(("ratescope_chart", title))
}

/// The time extent of everything recorded, or `None` when nothing has been.
fn data_extent(telemetry: &Telemetry) -> Option<Extent> {
    let mut extent = None;
    for series in telemetry.tokens.values().chain(telemetry.server_remaining.values()) {
        Extent::include_series(&mut extent, series);
    }
    for series in [&telemetry.queued, &telemetry.in_flight, &telemetry.open, &telemetry.service_ms, &telemetry.total_ms]
    {
        Extent::include_series(&mut extent, series);
    }
    if let Some((first, last)) = telemetry.outcomes.extent() {
        // The newest second is still being counted: its start is the newest instant known.
        Extent::include(&mut extent, first, last);
    }
    extent
}

fn same_window(a: f64, b: f64) -> bool {
    let all = |seconds: f64| !seconds.is_finite() || seconds <= 0.0;
    (all(a) && all(b)) || a == b
}

/// A staircase through `points`: each value holds until the next point's time. With a point
/// for every pixel column or more (`columns`), the steps cannot be seen and would only double
/// the line's cost: the points are drawn as they are.
fn staircase(points: &[[f64; 2]], columns: usize) -> PlotPoints<'static> {
    if points.len() >= columns {
        return points.to_vec().into();
    }
    let mut out = Vec::with_capacity(points.len() * 2);
    let mut previous: Option<f64> = None;
    // Points at one instant (many changes in a millisecond) would repeat the held value:
    // a repeated point adds nothing to the line, so it is pushed once.
    let push = |out: &mut Vec<[f64; 2]>, point: [f64; 2]| {
        if out.last() != Some(&point) {
            out.push(point);
        }
    };
    for &[t, value] in points {
        if let Some(held) = previous {
            push(&mut out, [t, held]);
        }
        push(&mut out, [t, value]);
        previous = Some(value);
    }
    out.into()
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
        Harness::builder().with_size(egui::vec2(1000.0, 800.0)).build_ui_state(
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
        for title in ["Tokens", "Queue", "Outcomes / s", "Retries / s", "Latency (ms)"] {
            let memory = egui_plot::PlotMemory::load(&harness.ctx, plot_id(Id::NULL, title)).unwrap();
            let bounds = *memory.transform().bounds();
            assert!((bounds.min()[0] - (newest - 60.0)).abs() < 1e-6, "{title}: {bounds:?}");
            assert!((bounds.max()[0] - newest).abs() < 1e-6, "{title}: {bounds:?}");
            if title != "Latency (ms)" {
                assert!(bounds.min()[1] <= 0.0, "{title}: the y axis includes 0");
            }
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
        for title in ["Tokens", "Outcomes / s", "Retries / s", "Latency (ms)"] {
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

    fn plot_memory(harness: &Harness<'_, (Telemetry, ChartView)>, title: &str) -> egui_plot::PlotMemory {
        egui_plot::PlotMemory::load(&harness.ctx, plot_id(Id::NULL, title)).unwrap()
    }

    /// A telemetry of one key with a 5-token bucket (2 left) and a 1000-per-hour window
    /// (997 left), a server budget, service times of 25 ms and totals of 9 s, retries for
    /// 429 and 503, and 50 requests sent without an answer yet.
    fn busy_telemetry() -> Telemetry {
        let origin = Instant::now();
        let config = LimiterConfig::new()
            .with_budget(BudgetSpec::token_bucket("burst", 5, "5/1s".parse().unwrap()).unwrap())
            .with_budget(BudgetSpec::sliding_window("hour", 1000, Duration::from_secs(3600)).unwrap())
            .with_budget(
                BudgetSpec::sliding_window("tpm", 4000, Duration::from_secs(60))
                    .unwrap()
                    .with_unit(crate::engine::Unit::tokens()),
            );
        let limiter = Limiter::new("api", config).unwrap();
        let _held = limiter.try_acquire(3).unwrap();
        let mut telemetry = Telemetry::new(origin, 1000, 100);
        let mut headers = HeaderMap::new();
        headers.insert("x-ratelimit-limit", "100".parse().unwrap());
        headers.insert("x-ratelimit-remaining", "60".parse().unwrap());
        headers.insert("x-ratelimit-limit-tokens", "1000".parse().unwrap());
        headers.insert("x-ratelimit-remaining-tokens", "900".parse().unwrap());
        for step in 0..4u32 {
            let at = origin + Duration::from_millis(500) * step;
            let mut snapshot = limiter.snapshot();
            snapshot.at = at;
            telemetry.sample(&[snapshot]);
            let event = |id: u64, kind| Event { request_id: id, key: Some("api".into()), at, kind };
            let info = RateLimitInfo::parse(Some(200), &headers, None, std::time::SystemTime::now());
            telemetry.ingest(&event(
                u64::from(step),
                EventKind::Response {
                    attempt: 1,
                    status: 200,
                    service_time: Duration::from_millis(25),
                    info: Box::new(info),
                    headers: Box::default(),
                },
            ));
            let total = Duration::from_secs(9);
            telemetry.ingest(&event(u64::from(step), EventKind::Finished { status: 200, attempts: 1, total }));
            for cause in ["429 Too Many Requests", "429 Too Many Requests", "503 Service Unavailable"] {
                let reason = RetryReason::Backoff;
                let delay = Duration::from_secs(1);
                telemetry
                    .ingest(&event(9, EventKind::RetryScheduled { attempt: 1, delay, reason, cause: cause.into() }));
            }
        }
        for id in 100..150 {
            let sent = EventKind::Sent { attempt: 1, method: "GET".into(), path: "/items".into() };
            telemetry.ingest(&Event {
                request_id: id,
                key: None,
                at: origin + Duration::from_millis(1500),
                kind: sent,
            });
        }
        telemetry
    }

    #[tokio::test(start_paused = true)]
    async fn every_budget_reads_at_its_own_scale_with_real_values_on_hover() {
        let mut harness = harness(busy_telemetry());
        harness.run();
        let memory = plot_memory(&harness, "Tokens");
        let bounds = *memory.transform().bounds();
        assert!(bounds.max()[1] < 150.0, "a share of capacity, not 0–1000 tokens: {bounds:?}");
        // The 5-token bucket with 2 left sits at 40%, not flat at the bottom under a 1000 window.
        let at = memory.transform().position_from_point(&egui_plot::PlotPoint::new(1.0, 40.0));
        harness.hover_at(at);
        harness.run();
        harness.get_by_label_contains("api · burst: 2 of 5 (40%)");
        // The legend names the real values too.
        harness.get_by_label("api · burst 2 of 5");
        harness.get_by_label("api · hour 997 of 1000");
        harness.get_by_label("server says: default 60 of 100");
        // Budgets in other units say so.
        harness.get_by_label("api · tpm 4000 of 4000 tokens");
        harness.get_by_label("server says: tokens 900 of 1000 tokens");
        // Legends read at the body's size (they were small text, about 9 px), swatch and
        // text in one piece.
        let body = harness.ctx.global_style().text_styles[&egui::TextStyle::Body].size;
        let entry = harness.get_by_label("server says: default 60 of 100").rect();
        assert!(entry.height() >= body, "{entry:?} for a {body} px body font");
    }

    #[tokio::test(start_paused = true)]
    async fn latency_reads_25_ms_beside_9_s() {
        let mut harness = harness(busy_telemetry());
        harness.run();
        let memory = plot_memory(&harness, "Latency (ms)");
        let frame = *memory.transform().frame();
        let service = memory.transform().position_from_point(&egui_plot::PlotPoint::new(1.0, log_ms(25.0)));
        let total = memory.transform().position_from_point(&egui_plot::PlotPoint::new(1.0, log_ms(9000.0)));
        assert!(service.y - total.y > frame.height() * 0.5, "25 ms and 9 s lie far apart: {service:?} {total:?}");
        assert!(frame.bottom() - service.y >= 0.0, "25 ms is inside the plot");
        harness.hover_at(service);
        harness.run();
        harness.get_by_label_contains("service (one attempt): 25 ms");
    }

    #[tokio::test(start_paused = true)]
    async fn legends_sit_outside_the_plots_and_say_what_dashed_and_solid_mean() {
        let mut harness = harness(busy_telemetry());
        harness.run();
        harness.get_by_label(TOKENS_NOTE);
        let plots: Vec<egui::Rect> = ["Tokens", "Queue", "Outcomes / s", "Retries / s", "Latency (ms)"]
            .map(|title| *plot_memory(&harness, title).transform().frame())
            .to_vec();
        for text in ["api · burst 2 of 5", "server says: default 60 of 100", "2xx (4 in all)", "429 (8 in all)"] {
            let legend = harness.get_by_label(text).rect();
            for plot in &plots {
                assert!(!legend.intersects(*plot), "{text:?} at {legend:?} covers a plot at {plot:?}");
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn every_chart_has_its_time_axis_and_retries_count_per_second_by_cause() {
        let mut harness = harness(busy_telemetry());
        harness.run();
        let heights: Vec<f32> = ["Tokens", "Queue", "Outcomes / s", "Retries / s", "Latency (ms)"]
            .map(|title| plot_memory(&harness, title).transform().frame().height())
            .to_vec();
        assert!(
            heights.windows(2).all(|pair| (pair[0] - pair[1]).abs() < 0.5),
            "each plot keeps room for its own time axis: {heights:?}"
        );
        // 2 retries after a 429 and 1 after a 503 each half second: counts per second.
        harness.get_by_label("429 (8 in all)");
        harness.get_by_label("503 (4 in all)");
        assert!(harness.query_by_label_contains("timeout").is_none(), "a cause that never happened is left out");
        let memory = plot_memory(&harness, "Retries / s");
        assert!(memory.transform().bounds().max()[1] >= 4.0, "four 429 retries in a second: a count, not a delay");
    }

    #[tokio::test(start_paused = true)]
    async fn the_queue_chart_counts_open_requests_without_a_limiter() {
        let mut telemetry = Telemetry::new(Instant::now(), 1000, 100);
        for id in 0..50 {
            let sent = EventKind::Sent { attempt: 1, method: "GET".into(), path: "/items".into() };
            telemetry.ingest(&Event { request_id: id, key: None, at: Instant::now(), kind: sent });
        }
        let mut harness = harness(telemetry);
        harness.run();
        harness.get_by_label("open (sent or waiting, not done) 50");
        let bounds = *plot_memory(&harness, "Queue").transform().bounds();
        assert!(bounds.max()[1] >= 50.0, "{bounds:?}");
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
