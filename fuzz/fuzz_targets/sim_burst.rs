//! Fuzzes burst-spec files (`ratescope sim --burst FILE`): text to `burst_from_toml`. A spec
//! that parses must validate, plan between 1 and `MAX_REQUESTS` requests, have a limiter key
//! for every endpoint, schedule its arrivals in order, and never put a request in a lane whose
//! share is zero.
#![no_main]

use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use ratescope::engine::Priority;
use ratescope::run::{ArrivalPattern, arrival_offsets};
use ratescope::sim::burst_from_toml;

/// `run::spec::MAX_REQUESTS`, which the crate does not export.
const MAX_REQUESTS: usize = 10_000_000;
/// Schedules are built and checked only for bursts up to this many requests (speed).
const MAX_SCHEDULED: usize = 4096;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(spec) = burst_from_toml(text) else { return };
    spec.validate().unwrap_or_else(|err| panic!("parsed but does not validate: {err}"));
    let planned = spec.planned_requests();
    assert!((1..=MAX_REQUESTS).contains(&planned), "{planned}");
    // The client finds an endpoint's limiter by its `host:port`: every endpoint has a key.
    let keys = spec.keys();
    for endpoint in &spec.endpoints {
        let (host, port) = (endpoint.url.host_str().unwrap_or_default(), endpoint.url.port_or_known_default());
        let key = format!("{host}:{}", port.unwrap_or_default());
        assert!(keys.iter().any(|k| k.host == key), "no limiter key for {} in {keys:?}", endpoint.url);
    }
    if let Some(limits) = &spec.limits {
        limits.validate().unwrap();
    }
    let mix = spec.priorities;
    assert!(mix.high >= 0.0 && mix.low >= 0.0 && mix.normal >= 0.0, "{mix:?}");

    let count = planned.min(MAX_SCHEDULED);
    let offsets = arrival_offsets(spec.arrival, count);
    assert_eq!(offsets.len(), count);
    assert!(offsets.windows(2).all(|pair| pair[0] <= pair[1]), "{:?}", spec.arrival);
    match spec.arrival {
        ArrivalPattern::AllAtOnce => assert!(offsets.iter().all(Duration::is_zero)),
        ArrivalPattern::FixedRate(rate) | ArrivalPattern::ForDuration { rate, .. } => {
            // Request i arrives at exactly i * per / amount.
            let (per, amount) = (rate.per().as_nanos(), u128::from(rate.amount()));
            for (i, offset) in offsets.iter().enumerate().step_by(97) {
                let expected = (i as u128 * per / amount).min(u128::from(u64::MAX));
                assert_eq!(offset.as_nanos(), expected, "request {i} at {rate}");
            }
        }
        ArrivalPattern::Ramp { .. } => {}
    }
    for index in 0..count {
        match mix.lane(index) {
            Priority::High => assert!(mix.high > 0.0, "request {index} high with {mix:?}"),
            Priority::Low => assert!(mix.low > 0.0, "request {index} low with {mix:?}"),
            _ => {}
        }
    }
});
