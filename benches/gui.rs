//! Frame time of the live charts holding a run recorded at 100 samples per second on every
//! chart (one hour, and a whole day): layout plus tessellation on the CPU, what a frame costs
//! before the GPU draws it. The day's memory (the process's peak resident set once it is
//! recorded) is printed before the frames are timed.

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use egui_plot::{PlotBounds, PlotMemory};
use ratescope::gui::charts::{ChartView, chart_plot_ids, charts_ui};
use ratescope::telemetry::{Series, Telemetry};

// The app's allocator (`src/main.rs`): a frame's meshes are large, short-lived allocations.
#[global_allocator]
static ALLOCATOR: ratescope::allocator::Mimalloc = ratescope::allocator::Mimalloc;

const PER_SECOND: usize = 100;
const HOUR: usize = 3600;
const DAY: usize = 24 * HOUR;
/// Points each series keeps in full, as the app does (`SERIES_CAPACITY`); older ones are kept
/// as summaries. `RATESCOPE_BENCH_CAPACITY` overrides it (to hold a whole day in full).
const APP_CAPACITY: usize = 400_000;

fn capacity() -> usize {
    std::env::var("RATESCOPE_BENCH_CAPACITY").ok().and_then(|text| text.parse().ok()).unwrap_or(APP_CAPACITY)
}

/// `seconds` of data at 100 Hz on every chart: two client budgets and one server budget, the
/// queue's three lines, both latencies, outcomes and retries per second.
fn recorded(seconds: usize) -> Telemetry {
    let points = seconds * PER_SECOND;
    let capacity = capacity();
    let mut telemetry = Telemetry::new(tokio::time::Instant::now(), capacity, 1000);
    let wave = |i: usize, scale: f64| scale * (0.5 + 0.5 * ((i as f64) / 500.0).sin());
    for name in ["demo · rate", "demo · minute"] {
        let mut series = Series::new(capacity);
        for i in 0..points {
            series.push(i as f64 / PER_SECOND as f64, wave(i, 100.0));
        }
        telemetry.tokens.insert(name.to_owned(), series);
    }
    let mut remaining = Series::new(capacity);
    for i in 0..points {
        let t = i as f64 / PER_SECOND as f64;
        remaining.push(t, wave(i + 50, 100.0));
        telemetry.queued.push(t, wave(i, 40.0));
        telemetry.in_flight.push(t, wave(i + 7, 8.0));
        telemetry.open.push(t, wave(i + 3, 50.0));
        if i % 20 == 0 {
            telemetry
                .retries
                .record_cause(t, if i % 60 == 0 { "503 Service Unavailable" } else { "429 Too Many Requests" });
        }
        telemetry.service_ms.push(t, 20.0 + wave(i, 10.0));
        telemetry.total_ms.push(t, 40.0 + wave(i, 400.0));
        telemetry.outcomes.record(t, Some(if i % 50 == 0 { 429 } else { 200 }));
    }
    telemetry.server_remaining.insert("minute".to_owned(), remaining);
    telemetry
}

/// A line of `/proc/self/status` (`VmRSS`, the resident set now; `VmHWM`, its peak), in MB.
fn resident_mb(field: &str) -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|line| line.starts_with(field))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

/// Times frames of `telemetry` in each `(name, view)`: a view is following the newest
/// `window` seconds, or (not following) showing the range the plots were last panned to.
/// A benchmark's name, how the charts follow, and the range panned to (when not following).
type View<'a> = (&'a str, ChartView, Option<(f64, f64)>);

fn frames(c: &mut Criterion, group: &str, telemetry: &Telemetry, views: &[View<'_>]) {
    let mut group = c.benchmark_group(group);
    group.measurement_time(Duration::from_secs(8));
    let input = || egui::RawInput {
        screen_rect: Some(egui::Rect::from_min_size(egui::Pos2::ZERO, egui::vec2(1360.0, 860.0))),
        ..Default::default()
    };
    for (name, view, range) in views {
        // A fresh context per view: plot memories (the panned range) do not leak between views.
        let ctx = egui::Context::default();
        let mut view = *view;
        let mut frame = || {
            let output = ctx.run_ui(input(), |ui| {
                egui::CentralPanel::default().show(ui, |ui| charts_ui(ui, telemetry, &mut view));
            });
            ctx.tessellate(output.shapes, output.pixels_per_point)
        };
        frame();
        if let Some((from, to)) = *range {
            // As if the user had panned there: every plot's memory holds the range (and no
            // link group remembers the old one), so the charts decimate what it shows.
            let ids = chart_plot_ids(egui::Id::NULL);
            let memories: Vec<_> = ids.iter().filter_map(|id| PlotMemory::load(&ctx, *id).map(|m| (*id, m))).collect();
            ctx.data_mut(|data| data.clear());
            for (id, mut memory) in memories {
                let bounds = *memory.bounds();
                memory.set_bounds(PlotBounds::from_min_max([from, bounds.min()[1]], [to, bounds.max()[1]]));
                memory.auto_bounds.x = false;
                memory.store(&ctx, id);
            }
            frame();
            let shown = PlotMemory::load(&ctx, ids[0]).map(|memory| memory.bounds().range_x());
            assert_eq!(shown, Some(from..=to), "the bench shows the range it names");
        }
        group.bench_function(*name, |b| b.iter(|| black_box(frame())));
    }
    group.finish();
}

fn charts(c: &mut Criterion) {
    let whole = ChartView { follow: false, window_s: f64::INFINITY };
    let minute = ChartView { follow: true, window_s: 60.0 };
    let hour = recorded(HOUR);
    frames(
        c,
        "charts_frame",
        &hour,
        &[("hour_of_data_whole_hour", whole, None), ("hour_of_data_following_1min", minute, None)],
    );
    drop(hour);
    let before = resident_mb("VmRSS:").unwrap_or(f64::NAN);
    let day = recorded(DAY);
    let after = resident_mb("VmRSS:").unwrap_or(f64::NAN);
    let peak = resident_mb("VmHWM:").unwrap_or(f64::NAN);
    eprintln!(
        "a day at 100 Hz on every chart: resident {before:.0} MB before, {after:.0} MB after (the day's data: {:.0} MB), peak {peak:.0} MB",
        after - before
    );
    let noon = (12 * HOUR) as f64;
    frames(
        c,
        "charts_frame_day",
        &day,
        &[
            ("day_of_data_whole_day", whole, None),
            ("day_of_data_an_hour_at_noon", whole, Some((noon, noon + HOUR as f64))),
            ("day_of_data_following_1min", minute, None),
        ],
    );
}

criterion_group!(benches, charts);
criterion_main!(benches);
