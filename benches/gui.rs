//! Frame time of the live charts holding one hour of data at 100 samples per second on every
//! chart: layout plus tessellation on the CPU (what a frame costs before the GPU draws it).

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use ratescope::gui::charts::{ChartView, charts_ui};
use ratescope::telemetry::{Series, Telemetry};

const SECONDS: usize = 3600;
const PER_SECOND: usize = 100;

fn hour_of_data() -> Telemetry {
    let points = SECONDS * PER_SECOND;
    let mut telemetry = Telemetry::new(tokio::time::Instant::now(), points, 1000);
    let wave = |i: usize, scale: f64| scale * (0.5 + 0.5 * ((i as f64) / 500.0).sin());
    for name in ["demo · rate", "demo · minute"] {
        let mut series = Series::new(points);
        for i in 0..points {
            series.push(i as f64 / PER_SECOND as f64, wave(i, 100.0));
        }
        telemetry.tokens.insert(name.to_owned(), series);
    }
    let mut remaining = Series::new(points);
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

fn frame(c: &mut Criterion) {
    let telemetry = hour_of_data();
    let ctx = egui::Context::default();
    let mut view = ChartView { follow: false, window_s: f64::INFINITY };
    let input = || egui::RawInput {
        screen_rect: Some(egui::Rect::from_min_size(egui::Pos2::ZERO, egui::vec2(1360.0, 860.0))),
        ..Default::default()
    };
    let mut group = c.benchmark_group("charts_frame");
    group.measurement_time(Duration::from_secs(8));
    for (name, window) in [("hour_of_data_whole_hour", f64::INFINITY), ("hour_of_data_following_1min", 60.0)] {
        view.follow = window.is_finite();
        view.window_s = window;
        group.bench_function(name, |b| {
            b.iter(|| {
                let output = ctx.run_ui(input(), |ui| {
                    egui::CentralPanel::default().show(ui, |ui| charts_ui(ui, &telemetry, &mut view));
                });
                black_box(ctx.tessellate(output.shapes, output.pixels_per_point))
            });
        });
    }
    group.finish();
}

criterion_group!(benches, frame);
criterion_main!(benches);
