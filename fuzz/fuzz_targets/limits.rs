//! Fuzzes the small text forms of limits the CLI, profiles and burst specs share: rates
//! (`5/1s`), durations (`1m30s`), windows (`--window 1000/1h`), ramps (`1:50:30s`) and the
//! one-line limiter form (`bucket 5 @ 3/1s, window 100/1m, concurrency 4`). Every value that
//! parses must be in range and print as text that parses back to the same value.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ratescope::cli::LimitArgs;
use ratescope::engine::{BudgetKind, LimiterConfig, Rate, format_period, format_wait, parse_duration};
use ratescope::run::ArrivalPattern;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    rate(text);
    duration(text);
    window(text);
    ramp(text);
    described(text);
});

/// `--rate` (clap uses `Rate::from_str`) and every `rate = "..."` in the files.
fn rate(text: &str) {
    let Ok(rate) = text.parse::<Rate>() else { return };
    assert!(rate.amount() >= 1 && !rate.per().is_zero(), "{text:?} -> {rate:?}");
    assert!(rate.per_second().is_finite() && rate.per_second() > 0.0, "{text:?} -> {rate:?}");
    let printed = rate.to_string();
    assert_eq!(printed.parse::<Rate>().ok(), Some(rate), "{text:?} printed as {printed:?}");
    // `--rate` alone (the burst defaults to the amount) always makes a valid limiter.
    let args = LimitArgs { rate: Some(rate), burst: None, windows: Vec::new(), concurrency: None };
    args.to_config().unwrap_or_else(|err| panic!("--rate {text:?}: {err:#}"));
}

/// Every duration flag and field: `format_period` is how the tools print them back.
fn duration(text: &str) {
    let Ok(duration) = parse_duration(text) else { return };
    let printed = format_period(duration);
    assert_eq!(parse_duration(&printed).ok(), Some(duration), "{text:?} printed as {printed:?}");
    let _ = format_wait(duration);
}

/// `--window N/DURATION`: one sliding window of exactly that size, described and read back.
fn window(text: &str) {
    let args = LimitArgs { rate: None, burst: None, windows: vec![text.to_owned()], concurrency: None };
    let Ok(config) = args.to_config() else { return };
    let [budget] = config.budgets.as_slice() else { panic!("{text:?} -> {config:?}") };
    let BudgetKind::SlidingWindow { limit, window } = budget.kind else { panic!("{text:?} -> {budget:?}") };
    let (amount, per) = text.split_once('/').unwrap_or_else(|| panic!("{text:?} accepted without '/'"));
    assert_eq!(amount.trim().parse::<u64>().ok(), Some(limit), "{text:?}");
    assert_eq!(parse_duration(per).ok(), Some(window), "{text:?}");
    round_trip(&config, text);
}

/// `--ramp FROM:TO:OVER` and `ramp = "..."`.
fn ramp(text: &str) {
    let Ok(pattern) = ArrivalPattern::parse_ramp(text) else { return };
    let ArrivalPattern::Ramp { from, to, over } = pattern else { panic!("{text:?} -> {pattern:?}") };
    if from.is_nan() || to.is_nan() {
        return; // parsed, and refused later by `BurstSpec::validate`; NaN never equals itself
    }
    let printed = format!("{from}:{to}:{}", format_period(over));
    assert_eq!(ArrivalPattern::parse_ramp(&printed).ok(), Some(pattern), "{text:?} printed as {printed:?}");
}

/// The one-line form the GUI and `describe` use.
fn described(text: &str) {
    let Ok(config) = LimiterConfig::parse_described(text) else { return };
    config.validate().unwrap_or_else(|err| panic!("{text:?} parsed but does not validate: {err}"));
    round_trip(&config, text);
}

fn round_trip(config: &LimiterConfig, text: &str) {
    let line = config.describe();
    let again = LimiterConfig::parse_described(&line).unwrap_or_else(|err| panic!("{text:?} -> {line:?}: {err}"));
    assert_eq!(&again, config, "{text:?} described as {line:?}");
}
