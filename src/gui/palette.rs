//! The app's status colours for text (fine, throttled or low, error), one set per theme, each
//! readable on that theme's panels and windows: WCAG AA, a contrast ratio of at least 4.5:1.
//!
//! Text asks for `status_colors(ui.visuals())`; fills and chart lines keep their own colours.

use egui::{Color32, Visuals};

/// Text colours that carry a status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatusColors {
    /// Success, running, valid.
    pub ok: Color32,
    /// 429, throttled, low, a warning.
    pub warn: Color32,
    /// Errors, failures, destructive buttons.
    pub error: Color32,
}

/// On the dark theme's near-black panels.
const DARK: StatusColors = StatusColors {
    ok: Color32::from_rgb(80, 180, 90),
    warn: Color32::from_rgb(235, 140, 20),
    error: Color32::from_rgb(240, 96, 86),
};

/// On the light theme's near-white panels: the same hues, darker.
const LIGHT: StatusColors = StatusColors {
    ok: Color32::from_rgb(20, 112, 40),
    warn: Color32::from_rgb(160, 82, 0),
    error: Color32::from_rgb(190, 30, 40),
};

/// The status colours for the theme `visuals` belong to.
pub fn status_colors(visuals: &Visuals) -> StatusColors {
    if visuals.dark_mode { DARK } else { LIGHT }
}

/// The WCAG 2 contrast ratio of two opaque colours, from 1 (same) to 21 (black on white).
pub fn contrast_ratio(a: Color32, b: Color32) -> f32 {
    let (la, lb) = (relative_luminance(a), relative_luminance(b));
    let (light, dark) = if la > lb { (la, lb) } else { (lb, la) };
    (light + 0.05) / (dark + 0.05)
}

/// WCAG 2's relative luminance of an sRGB colour.
fn relative_luminance(color: Color32) -> f32 {
    let linear = |channel: u8| {
        let c = f32::from(channel) / 255.0;
        if c <= 0.04045 { c / 12.92 } else { ((c + 0.055) / 1.055).powf(2.4) }
    };
    0.2126 * linear(color.r()) + 0.7152 * linear(color.g()) + 0.0722 * linear(color.b())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ratio_matches_wcags_reference_values() {
        assert!((contrast_ratio(Color32::BLACK, Color32::WHITE) - 21.0).abs() < 0.01);
        assert!((contrast_ratio(Color32::WHITE, Color32::WHITE) - 1.0).abs() < 0.001);
        // #767676 on white is the classic just-passing grey: 4.54.
        assert!((contrast_ratio(Color32::from_gray(0x76), Color32::WHITE) - 4.54).abs() < 0.01);
    }

    #[test]
    fn every_status_colour_reads_at_aa_on_its_themes_backgrounds() {
        for visuals in [Visuals::dark(), Visuals::light()] {
            let colors = status_colors(&visuals);
            let backgrounds = [visuals.panel_fill, visuals.window_fill, visuals.extreme_bg_color];
            for (name, color) in [("ok", colors.ok), ("warn", colors.warn), ("error", colors.error)] {
                for background in backgrounds {
                    let ratio = contrast_ratio(color, background);
                    assert!(
                        ratio >= 4.5,
                        "{name} {color:?} on {background:?} (dark mode {}): {ratio:.2}:1",
                        visuals.dark_mode
                    );
                }
            }
        }
    }

    #[test]
    fn the_old_light_theme_green_fails_aa() {
        // What the status line used on both themes (the review's finding): 2.5:1 on light panels.
        let old = Color32::from_rgb(80, 180, 90);
        assert!(contrast_ratio(old, Visuals::light().panel_fill) < 4.5);
    }
}
