//! Table column widths that fit the room there is: in a narrow panel every column shrinks alike
//! (cells elide, the whole text on hover), in a wide one the stretching column takes the rest,
//! so no table ever scrolls sideways or pushes a column out of sight.

/// The narrowest a column gets, whatever the room.
pub const FLOOR: f32 = 28.0;

/// Widths for columns that would like `wanted`, in `available` points with `spacing` between
/// columns; column `stretch` takes any room left over.
pub fn fit_columns<const N: usize>(available: f32, spacing: f32, wanted: [f32; N], stretch: usize) -> [f32; N] {
    let room = (available - spacing * N as f32).max(FLOOR * N as f32);
    let mut widths = wanted.map(|width| width.max(FLOOR));
    let total: f32 = widths.iter().sum();
    if room < total {
        // Shrink in proportion, then take what the floors added back from the widest columns.
        let scale = room / total;
        for width in &mut widths {
            *width = (*width * scale).max(FLOOR);
        }
        let mut over: f32 = widths.iter().sum::<f32>() - room;
        while over > 0.01 {
            let Some(widest) = (0..N).filter(|&i| widths[i] > FLOOR).max_by(|&a, &b| widths[a].total_cmp(&widths[b]))
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
