//! Table column widths that fit the room there is: in a narrow panel every column shrinks alike
//! (cells elide, the whole text on hover), in a wide one the stretching column takes the rest,
//! so no table ever scrolls sideways or pushes a column out of sight.

/// The narrowest a column gets, whatever the room.
pub const FLOOR: f32 = 28.0;

/// Widths for columns that would like `wanted`, in `available` points with `spacing` between
/// columns; column `stretch` takes any room left over.
pub fn fit_columns<const N: usize>(available: f32, spacing: f32, wanted: [f32; N], stretch: usize) -> [f32; N] {
    fit_columns_keeping(available, spacing, wanted, stretch, &[])
}

/// [`fit_columns`] where the columns in `kept` (a button, say) keep their wanted width and the
/// others share what is left.
pub fn fit_columns_keeping<const N: usize>(
    available: f32,
    spacing: f32,
    wanted: [f32; N],
    stretch: usize,
    kept: &[usize],
) -> [f32; N] {
    let kept_width: f32 = kept.iter().filter_map(|&index| wanted.get(index)).map(|width| width.max(FLOOR)).sum();
    let shared = N.saturating_sub(kept.len()) as f32;
    let room = (available - spacing * N as f32 - kept_width).max(FLOOR * shared);
    let mut widths = wanted.map(|width| width.max(FLOOR));
    let free = |index: usize| !kept.contains(&index);
    let total: f32 = (0..N).filter(|&i| free(i)).map(|i| widths[i]).sum();
    if room < total {
        // Shrink in proportion, then take what the floors added back from the widest columns.
        let scale = room / total;
        for index in (0..N).filter(|&i| free(i)) {
            widths[index] = (widths[index] * scale).max(FLOOR);
        }
        let mut over: f32 = (0..N).filter(|&i| free(i)).map(|i| widths[i]).sum::<f32>() - room;
        while over > 0.01 {
            let Some(widest) =
                (0..N).filter(|&i| free(i) && widths[i] > FLOOR).max_by(|&a, &b| widths[a].total_cmp(&widths[b]))
            else {
                break;
            };
            let take = over.min(widths[widest] - FLOOR);
            widths[widest] -= take;
            over -= take;
        }
    } else if let Some(width) = widths.get_mut(stretch) {
        *width += room - total;
    }
    widths
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn a_kept_column_keeps_its_width_in_a_narrow_table() {
        let widths = fit_columns_keeping(200.0, 0.0, [100.0, 70.0, 100.0], 0, &[1]);
        assert_eq!(widths[1], 70.0);
        assert!((widths[0] + widths[2] - 130.0).abs() < 0.01, "{widths:?}");
    }

    #[test]
    fn the_stretching_column_takes_the_room_left() {
        let widths = fit_columns(500.0, 10.0, [50.0, 100.0, 50.0], 1);
        assert_eq!(widths, [50.0, 370.0, 50.0]);
    }

    proptest! {
        #[test]
        fn columns_fit_whenever_the_floors_do(available in 0.0f32..3000.0, wanted in proptest::array::uniform6(1.0f32..400.0)) {
            let widths = fit_columns(available, 8.0, wanted, 2);
            prop_assert!(widths.iter().all(|width| *width >= FLOOR - 0.01));
            let room = available - 8.0 * 6.0;
            if room >= FLOOR * 6.0 {
                prop_assert!(widths.iter().sum::<f32>() <= room + 0.05, "{widths:?} in {room}");
            }
        }
    }
}
