//! Tune's sweep: 400 settings × 1,000 requests against a model in virtual time, on every core.
//!
//! Run: `cargo bench --bench tune`. The model and workload are `benches/tune-server.toml` and
//! `benches/tune-1000.toml` (the same as `ratescope tune --burst benches/tune-1000.toml --server
//! benches/tune-server.toml`); the goal is under 5 s on this 2-core machine.

use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use ratescope::mock::MockConfig;
use ratescope::sim::burst_from_file;
use ratescope::tune::{TuneOptions, tune};

fn sweep(c: &mut Criterion) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("benches");
    let server = MockConfig::from_file(dir.join("tune-server.toml")).expect("the benchmark's server model");
    let spec = burst_from_file(&dir.join("tune-1000.toml")).expect("the benchmark's workload");
    let options = TuneOptions::default();
    let report = tune(&server, &spec, &options).expect("the sweep runs");
    assert_eq!(report.candidates.len(), 400, "the issue's 400 settings");
    assert!(report.best().is_some(), "a setting meets no refusal");
    let mut group = c.benchmark_group("tune");
    group.sample_size(10).measurement_time(Duration::from_secs(40));
    group.bench_function("400 settings x 1000 requests", |b| b.iter(|| tune(&server, &spec, &options)));
    group.finish();
}

criterion_group!(benches, sweep);
criterion_main!(benches);
