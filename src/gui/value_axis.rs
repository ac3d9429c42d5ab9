//! The value (y) axis of the short live charts: 1-2-5 grid steps sized in screen points, and compact labels.
//!
//! `egui_plot`'s default spacer steps by powers of ten and hides a label closer than 20
//! points to the next, so a chart 90 points high showing 0–69,000 ms labels nothing but 0.
//! Here the labelled step is the smallest 1, 2 or 5 × 10ⁿ that lies at least
//! [`LABEL_SPACING`] points from the next, so every chart reads at a glance.

use egui_plot::{GridInput, GridMark};

/// The plots' smallest grid spacing in points: `GridInput::base_step_size` is this many
/// points' worth of value.
pub(crate) const GRID_SPACING_MIN: f32 = 8.0;
/// Labelled grid lines lie at least this far apart (egui_plot paints labels at full
/// strength from 30 points apart).
const LABEL_SPACING: f64 = 30.0;

/// Three step sizes for `egui_plot::uniform_grid_spacer`: the labelled step, a step that
/// divides it (labelled too when there is room), and a tenth of it for the faint lines.
pub(crate) fn value_axis_steps(input: GridInput) -> [f64; 3] {
    let value_per_point = input.base_step_size / f64::from(GRID_SPACING_MIN);
    let large = nice_at_least(value_per_point * LABEL_SPACING);
    let medium = if mantissa(large) >= 5.0 { large / 5.0 } else { large / 2.0 };
    [large / 10.0, medium, large]
}

/// A tick label: `0`, `2.5`, `750`, `1.5k`, `60k`, `2M`.
pub(crate) fn value_axis_label(mark: GridMark, _range: &std::ops::RangeInclusive<f64>) -> String {
    compact_number(mark.value)
}

fn compact_number(value: f64) -> String {
    let (scaled, suffix) = match value.abs() {
        magnitude if magnitude >= 1e9 => (value / 1e9, "G"),
        magnitude if magnitude >= 1e6 => (value / 1e6, "M"),
        magnitude if magnitude >= 1e3 => (value / 1e3, "k"),
        _ => (value, ""),
    };
    let text = format!("{scaled:.2}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    // Rounding can leave "-0" for a tiny negative value.
    let text = if text == "-0" { "0" } else { text };
    format!("{text}{suffix}")
}

/// The smallest of 1, 2 or 5 × 10ⁿ that is at least `value`; 1 when `value` is not a
/// positive finite number.
fn nice_at_least(value: f64) -> f64 {
    if !(value.is_finite() && value > 0.0) {
        return 1.0;
    }
    let decade = 10f64.powf(value.log10().floor());
    // A hair of tolerance so that 2.0000000001 × 10ⁿ from float noise still counts as 2.
    [1.0, 2.0, 5.0].into_iter().map(|m| m * decade).find(|step| *step >= value * (1.0 - 1e-9)).unwrap_or(10.0 * decade)
}

/// The leading digit of a 1-2-5 step.
fn mantissa(step: f64) -> f64 {
    (step / 10f64.powf(step.log10().floor())).round()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The grid input egui_plot builds for a chart `height` points high showing `low..high`.
    fn input(low: f64, high: f64, height: f64) -> GridInput {
        GridInput { bounds: (low, high), base_step_size: (high - low) / height * f64::from(GRID_SPACING_MIN) }
    }

    #[test]
    fn a_short_chart_of_large_values_gets_labelled_lines() {
        // The latency chart that labelled only 0: 0–69,000 ms in 90 points.
        let [small, medium, large] = value_axis_steps(input(0.0, 69_000.0, 90.0));
        assert_eq!(large, 50_000.0);
        assert_eq!(medium, 10_000.0);
        assert_eq!(small, 5_000.0);
    }

    #[test]
    fn the_labelled_step_is_one_two_or_five_and_fits_two_labels_in_a_short_chart() {
        for height in [80.0, 90.0, 150.0, 400.0] {
            for exponent in -3..10 {
                for leading in [1.0, 1.3, 2.0, 2.7, 4.99, 5.0, 7.5, 9.9] {
                    let span = leading * 10f64.powi(exponent);
                    let [small, medium, large] = value_axis_steps(input(0.0, span, height));
                    let points = large / span * height;
                    assert!(
                        (LABEL_SPACING - 1e-6..=2.5 * LABEL_SPACING + 1e-6).contains(&points),
                        "span {span} in {height} points: labelled step {large} is {points} points apart"
                    );
                    assert!([1.0, 2.0, 5.0].contains(&mantissa(large)), "step {large} is not 1-2-5");
                    for divisor in [small, medium] {
                        let parts = large / divisor;
                        assert!((parts - parts.round()).abs() < 1e-9, "{divisor} does not divide {large}");
                    }
                }
            }
        }
    }

    #[test]
    fn degenerate_ranges_fall_back_to_unit_steps() {
        for base_step_size in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let steps = value_axis_steps(GridInput { bounds: (0.0, 0.0), base_step_size });
            assert_eq!(steps, [0.1, 0.5, 1.0]);
        }
    }

    #[test]
    fn labels_are_compact() {
        let cases = [
            (0.0, "0"),
            (-0.0001, "0"),
            (2.5, "2.5"),
            (750.0, "750"),
            (1_500.0, "1.5k"),
            (60_000.0, "60k"),
            (-20_000.0, "-20k"),
            (2_000_000.0, "2M"),
            (0.25, "0.25"),
            (3e9, "3G"),
        ];
        for (value, expected) in cases {
            assert_eq!(compact_number(value), expected, "{value}");
        }
    }
}
