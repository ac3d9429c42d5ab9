//! A series of `(seconds, value)` points for the charts, the newest held in full and older ones
//! as a pyramid of min/max summaries.
//!
//! A day at 100 Hz is 8.6 million points a series: held in full that is 138 MB a series and
//! millions of points to look at per frame. The charts need only each pixel column's lowest
//! and highest value, so past the newest `capacity` points a series keeps summaries: the
//! extremes of every 16 points, of every 64, 256 and so on, each level a bounded ring. A view
//! reads, per column, a few summaries of the coarsest level that fits inside it.

use std::collections::VecDeque;
use std::ops::Range;

/// Points summarised by one summary of the finest level.
const BLOCK: usize = 16;
/// Summaries of one level summed up by one of the next coarser level.
const FAN: usize = 4;
/// Levels of summaries: the coarsest sums up 16 × 4⁷ = 262,144 points (44 min at 100 Hz).
const LEVELS: usize = 8;
/// Summaries kept per level (2.5 MiB each at most): the finest level reaches 2^20 points back
/// (2.9 h at 100 Hz), each coarser one four times as far, the coarsest over a year.
const LEVEL_CAPACITY: usize = 1 << 16;

// `span` and `coarsest_block` count in powers of two: 16 = 2^4 points, 4 = 2^2 blocks.
const _: () = assert!(BLOCK == 1 << 4 && FAN == 1 << 2);

/// How many points one summary of `level` sums up.
const fn span(level: usize) -> usize {
    BLOCK << (2 * level)
}

/// The lowest and the highest of a run of points (each with its time), and the run's first time.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Summary {
    start: f64,
    low: [f64; 2],
    high: [f64; 2],
}

impl Summary {
    fn of(point: [f64; 2]) -> Self {
        Self { start: point[0], low: point, high: point }
    }

    /// This run followed by `later`: on a tie the earlier run's point is kept, as a scan in
    /// time order would.
    fn then(self, later: Self) -> Self {
        Self {
            start: self.start,
            low: if later.low[1] < self.low[1] { later.low } else { self.low },
            high: if later.high[1] > self.high[1] { later.high } else { self.high },
        }
    }

    /// The extremes in time order, once when they are the same point.
    fn push_extremes(&self, out: &mut Vec<[f64; 2]>) {
        let (first, second) = if self.low[0] <= self.high[0] { (self.low, self.high) } else { (self.high, self.low) };
        out.push(first);
        if second != first {
            out.push(second);
        }
    }
}

/// One level of the pyramid: the summaries of its whole blocks still kept, and the block filling.
#[derive(Debug, Clone, Default)]
struct Level {
    /// Summaries of whole blocks, oldest first; the first is the level's block number `first`.
    done: VecDeque<Summary>,
    first: usize,
    filling: Option<Summary>,
}

impl Level {
    fn get(&self, block: usize) -> Option<&Summary> {
        block.checked_sub(self.first).and_then(|index| self.done.get(index))
    }

    /// The block number after the newest whole one.
    fn end(&self) -> usize {
        self.first + self.done.len()
    }
}

/// A series of points in time order: the newest `capacity` in full, older ones summarised.
#[derive(Debug, Clone)]
pub struct Series {
    points: VecDeque<[f64; 2]>,
    /// A whole number of blocks.
    capacity: usize,
    /// Points ever pushed: the absolute index of the next one.
    pushed: usize,
    /// Level `k` sums up blocks of `span(k)` absolute indices; block `b` is `b * span(k)..`.
    levels: [Level; LEVELS],
}

impl Series {
    /// An empty series that keeps at least the newest `capacity` points in full (at most a
    /// block of 16 more: they are let go a block at a time, so the full points start where a
    /// summary does).
    pub fn new(capacity: usize) -> Self {
        Self {
            points: VecDeque::with_capacity(capacity.min(4096)),
            capacity: capacity.max(1).div_ceil(BLOCK) * BLOCK + BLOCK,
            pushed: 0,
            levels: Default::default(),
        }
    }

    /// Appends a point; a point earlier than the last is clamped to keep time order, one that
    /// is not finite is skipped.
    pub fn push(&mut self, t: f64, value: f64) {
        if !t.is_finite() || !value.is_finite() {
            return;
        }
        let t = self.points.back().map_or(t, |last| t.max(last[0]));
        let point = [t, value];
        if self.points.len() == self.capacity {
            self.points.drain(..BLOCK);
        }
        self.points.push_back(point);
        self.pushed += 1;
        // The point joins the finest level's block; a block it completes joins the next
        // level's, and so on up.
        let mut summary = Summary::of(point);
        for (level, ring) in self.levels.iter_mut().enumerate() {
            let filled = ring.filling.take().map_or(summary, |filling| filling.then(summary));
            if !self.pushed.is_multiple_of(span(level)) {
                ring.filling = Some(filled);
                break;
            }
            if ring.done.len() == LEVEL_CAPACITY {
                ring.done.pop_front();
                ring.first += 1;
            }
            ring.done.push_back(filled);
            summary = filled;
        }
    }

    /// The absolute index of the oldest point held in full: a block's first.
    fn front_index(&self) -> usize {
        self.pushed - self.points.len()
    }

    /// The summary of the coarsest block of level `min_level` or above that starts at absolute
    /// index `at`, ends by `end`, and is still kept; with the points it sums up.
    fn coarsest_block(&self, at: usize, end: usize, min_level: usize) -> Option<(Summary, usize)> {
        let length = end.checked_sub(at)? / BLOCK;
        if length == 0 || !at.is_multiple_of(BLOCK) {
            return None;
        }
        // A block of level k is 16 · 4^k = 2^(4 + 2k) points: the coarsest that starts at `at`
        // divides it, and the coarsest that ends by `end` is at most `length` blocks of 16.
        let by_alignment = at.checked_ilog2().map_or(LEVELS, |_| (at.trailing_zeros() as usize - 4) / 2);
        let by_length = length.ilog2() as usize / 2;
        let top = by_alignment.min(by_length).min(LEVELS - 1);
        (min_level..=top).rev().find_map(|level| {
            let summary = self.levels[level].get(at >> (4 + 2 * level))?;
            Some((*summary, span(level)))
        })
    }

    /// The extremes of the points with absolute indices `at..end`: whole blocks by the coarsest
    /// summary kept, the rest point by point (every point from `min_level`'s blocks down must
    /// be held in full or summed up by a block of `min_level` or coarser).
    fn extremes(&self, mut at: usize, end: usize, min_level: usize) -> Option<Summary> {
        let front = self.front_index();
        let mut found: Option<Summary> = None;
        while at < end {
            let (piece, span) = match self.coarsest_block(at, end, min_level) {
                Some(block) => block,
                None => match self.points.get(at.wrapping_sub(front)) {
                    Some(point) => (Summary::of(*point), 1),
                    None => break,
                },
            };
            found = Some(found.map_or(piece, |seen| seen.then(piece)));
            at += span;
        }
        found
    }

    /// The stretches of history held only as summaries, oldest first: (level, its blocks).
    /// Each level's stretch ends where a finer level's (or the full points) begins.
    fn summarised(&self) -> Vec<(usize, Range<usize>)> {
        let mut boundary = self.front_index();
        let mut stretches = Vec::new();
        for (level, ring) in self.levels.iter().enumerate() {
            let end = (boundary / span(level)).min(ring.end());
            if ring.first < end {
                stretches.push((level, ring.first..end));
                boundary = ring.first * span(level);
            }
        }
        stretches.reverse();
        stretches
    }

    /// Points held in full.
    pub fn len(&self) -> usize {
        self.points.len()
    }

    /// Whether nothing was ever pushed.
    pub fn is_empty(&self) -> bool {
        self.points.is_empty()
    }

    /// The newest point, `[t, value]`.
    pub fn last(&self) -> Option<[f64; 2]> {
        self.points.back().copied()
    }

    /// The time of the oldest point kept, in full or summed up.
    pub fn first_time(&self) -> Option<f64> {
        match self.summarised().first() {
            Some((level, blocks)) => self.levels[*level].get(blocks.start).map(|summary| summary.start),
            None => self.points.front().map(|point| point[0]),
        }
    }

    /// The lowest and highest value kept, in full or summed up.
    pub fn value_range(&self) -> Option<(f64, f64)> {
        let summed = self
            .summarised()
            .into_iter()
            .filter_map(|(level, blocks)| self.extremes(blocks.start * span(level), blocks.end * span(level), level));
        let all = summed.chain(self.extremes(self.front_index(), self.pushed, 0));
        all.reduce(Summary::then).map(|summary| (summary.low[1], summary.high[1]))
    }

    /// Points held in full, oldest first, as `[t, value]`.
    pub fn iter(&self) -> impl Iterator<Item = &[f64; 2]> {
        self.points.iter()
    }

    /// What to draw of `from <= t <= to` in `buckets` columns: per bucket of time, its lowest
    /// and its highest point (in time order), so spikes survive; where few points are held in
    /// full, those points as they are. Older than the points held in full, a summary counts
    /// when its stretch of time meets `from..=to`, and lands in the bucket of its first time.
    pub fn decimated(&self, from: f64, to: f64, buckets: usize) -> Vec<[f64; 2]> {
        let buckets = buckets.max(1);
        let width = (to - from) / buckets as f64;
        // A time before `from` (a summary reaching into the range) falls in the first bucket.
        let bucket_of = |t: f64| (((t - from) / width) as usize).min(buckets - 1);
        let mut out = Vec::new();
        let stretches = self.summarised();
        for (index, (level, blocks)) in stretches.iter().enumerate() {
            let (level, blocks) = (*level, blocks.clone());
            let ring = &self.levels[level];
            let start_of = |block: usize| ring.get(block).map_or(f64::INFINITY, |summary| summary.start);
            // Where the stretch's last block ends: where the next stretch, or the full points, begin.
            let stretch_end = match stretches.get(index + 1) {
                Some((next, next_blocks)) => self.levels[*next].get(next_blocks.start).map(|summary| summary.start),
                None => self.points.front().map(|point| point[0]),
            };
            // A block spans from its start to the next one's: the block before the first one
            // starting in range meets the range when the next start is past `from`.
            let after_from = first_where(blocks.start, blocks.end, |block| start_of(block) >= from);
            let reaches = |block: usize| {
                let next = if block + 1 < blocks.end { Some(start_of(block + 1)) } else { stretch_end };
                next.is_none_or(|next| next > from)
            };
            let first = match after_from.checked_sub(1) {
                Some(before) if before >= blocks.start && reaches(before) => before,
                _ => after_from,
            };
            let end = first_where(first, blocks.end, |block| start_of(block) > to);
            let (mut at, mut run) = (first, 1);
            while at < end {
                let stop = if to > from {
                    let bucket = bucket_of(start_of(at));
                    first_where_near(at + 1, end, at + run, |block| bucket_of(start_of(block)) > bucket)
                } else {
                    at + 1
                };
                run = stop - at;
                if let Some(summary) = self.extremes(at * span(level), stop * span(level), level) {
                    summary.push_extremes(&mut out);
                }
                at = stop;
            }
        }
        let time_at = |position: usize| self.points[position][0];
        let start = self.points.partition_point(|p| p[0] < from);
        let end = self.points.partition_point(|p| p[0] <= to);
        if end.saturating_sub(start) <= 2 * buckets || to <= from {
            out.extend(self.points.range(start..end.max(start)));
            return out;
        }
        out.reserve(2 * buckets + 2);
        let front = self.front_index();
        let (mut at, mut run) = (start, 1);
        while at < end {
            // Buckets grow with time, so each one's points are a run, found near where a run as
            // long as the last one would end.
            let bucket = bucket_of(time_at(at));
            let stop = first_where_near(at + 1, end, at + run, |position| bucket_of(time_at(position)) > bucket);
            run = stop - at;
            if let Some(summary) = self.extremes(front + at, front + stop, 0) {
                summary.push_extremes(&mut out);
            }
            at = stop;
        }
        out
    }
}

/// The first position in `from..to` where `after` holds (it holds for every later one):
/// galloping from `from`, so a short run costs a few steps, then bisecting.
pub(super) fn first_where(mut from: usize, mut to: usize, after: impl Fn(usize) -> bool) -> usize {
    let mut step = 1;
    while from + step < to {
        if after(from + step) {
            to = from + step;
            break;
        }
        from += step;
        step *= 2;
    }
    bisect(from, to, after)
}

/// [`first_where`] starting from `guess`, where the answer is expected: galloping down from it
/// when `after` holds there, up from it otherwise. A run about as long as the last one (a
/// bucket of evenly spaced points) costs two or three looks, each near the last.
pub(super) fn first_where_near(from: usize, to: usize, guess: usize, after: impl Fn(usize) -> bool) -> usize {
    if from >= to {
        return from;
    }
    let guess = guess.clamp(from, to - 1);
    if !after(guess) {
        return first_where(guess, to, after);
    }
    let (mut high, mut step) = (guess, 1);
    while high - from > step {
        let probe = high - step;
        if !after(probe) {
            return bisect(probe + 1, high, after);
        }
        high = probe;
        step *= 2;
    }
    bisect(from, high, after)
}

/// The first position in `from..to` where `after` holds, or `to`.
fn bisect(mut from: usize, mut to: usize, after: impl Fn(usize) -> bool) -> usize {
    while from < to {
        let middle = from + (to - from) / 2;
        if after(middle) {
            to = middle;
        } else {
            from = middle + 1;
        }
    }
    from
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// The lowest and the highest of some points.
    type Extremes = ([f64; 2], [f64; 2]);

    /// Decimation by scanning every point in range: what the block summaries must reproduce.
    fn scanned(points: &[[f64; 2]], from: f64, to: f64, buckets: usize) -> Vec<[f64; 2]> {
        let in_range: Vec<[f64; 2]> = points.iter().copied().filter(|p| p[0] >= from && p[0] <= to).collect();
        let buckets = buckets.max(1);
        if in_range.len() <= 2 * buckets || to <= from {
            return in_range;
        }
        let width = (to - from) / buckets as f64;
        let mut runs: Vec<(usize, Extremes)> = Vec::new();
        for point in in_range {
            let bucket = (((point[0] - from) / width) as usize).min(buckets - 1);
            match runs.last_mut() {
                Some((index, (low, high))) if *index == bucket => {
                    if point[1] < low[1] {
                        *low = point;
                    }
                    if point[1] > high[1] {
                        *high = point;
                    }
                }
                _ => runs.push((bucket, (point, point))),
            }
        }
        let mut out = Vec::new();
        for (_, (low, high)) in runs {
            let (first, second) = if low[0] <= high[0] { (low, high) } else { (high, low) };
            out.push(first);
            if second != first {
                out.push(second);
            }
        }
        out
    }

    proptest! {
        /// Wherever the range falls, what is held in full decimates as a scan of its points
        /// does; older points show through their summaries: in time order, every point shown a
        /// real one, the range's highest and lowest never lost, and about two points a bucket.
        #[test]
        fn decimation_reads_full_points_exactly_and_summaries_faithfully(
            capacity in 2usize..300,
            steps in proptest::collection::vec((0u8..3, -3i32..3), 1..2500),
            range in (0u32..2500, 0u32..2500),
            buckets in 1usize..8,
            every in 3usize..9,
        ) {
            let mut series = Series::new(capacity);
            let mut all: Vec<[f64; 2]> = Vec::new();
            let mut real = std::collections::HashSet::new();
            let mut t = 0.0;
            let (from, to) = (f64::from(range.0.min(range.1)) / 4.0, f64::from(range.0.max(range.1)) / 4.0);
            for (pushed, (step, value)) in steps.into_iter().enumerate() {
                t += f64::from(step) * 0.25;
                series.push(t, f64::from(value));
                all.push([t, f64::from(value)]);
                real.insert([t.to_bits(), f64::from(value).to_bits()]);
                if pushed % every != 0 {
                    continue;
                }
                let shown = series.decimated(from, to, buckets);
                let held: Vec<[f64; 2]> = series.iter().copied().collect();
                prop_assert!(held.len() >= capacity.min(all.len()), "at least `capacity` points in full");
                if held.first().is_some_and(|front| front[0] <= from) {
                    prop_assert_eq!(&shown, &scanned(&held, from, to, buckets));
                }
                prop_assert!(shown.windows(2).all(|pair| pair[0][0] <= pair[1][0]), "time order: {:?}", shown);
                prop_assert!(
                    shown.iter().all(|point| real.contains(&[point[0].to_bits(), point[1].to_bits()])),
                    "only real points: {:?}",
                    shown
                );
                let in_range = all.iter().filter(|point| (from..=to).contains(&point[0])).map(|point| point[1]);
                let (low, high) = in_range.fold((f64::INFINITY, f64::NEG_INFINITY), |(low, high), value| {
                    (low.min(value), high.max(value))
                });
                if low.is_finite() {
                    prop_assert!(shown.iter().any(|point| point[1] >= high), "the highest survives: {:?}", shown);
                    prop_assert!(shown.iter().any(|point| point[1] <= low), "the lowest survives: {:?}", shown);
                }
                if to > from {
                    prop_assert!(shown.len() <= 4 * buckets + 2 * LEVELS + 2, "{} points", shown.len());
                }
                prop_assert_eq!(series.first_time(), all.first().map(|point| point[0]));
                let values = all.iter().map(|point| point[1]);
                let whole = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(low, high), v| (low.min(v), high.max(v)));
                prop_assert_eq!(series.value_range(), Some(whole));
            }
        }
    }

    #[test]
    fn a_day_at_100_hz_keeps_its_oldest_spike_in_a_few_megabytes() {
        let day = 24 * 3600 * 100;
        let mut series = Series::new(400_000);
        for i in 0..day {
            let value = match i {
                1_000 => 900.0,
                5_000_000 => -900.0,
                _ => (i % 7) as f64,
            };
            series.push(i as f64 / 100.0, value);
        }
        let summaries: usize = series.levels.iter().map(|level| level.done.len()).sum();
        let bytes = summaries * std::mem::size_of::<Summary>() + series.len() * 16;
        assert!(bytes < 16_000_000, "{bytes} bytes for a day (8.6 million points, 138 MB in full)");
        assert_eq!(series.first_time(), Some(0.0), "the first second is still there");
        assert_eq!(series.value_range(), Some((-900.0, 900.0)));
        let whole = series.decimated(0.0, 86_400.0, 1_300);
        assert!(whole.len() <= 2 * 1_300 + 2 * LEVELS, "{} points for 1,300 columns", whole.len());
        assert!(whole.iter().any(|point| point == &[10.0, 900.0]), "the spike at 10 s shows across the day");
        assert!(whole.iter().any(|point| point == &[50_000.0, -900.0]), "and the dip at 50,000 s");
        let hour = series.decimated(48_000.0, 51_600.0, 1_300);
        assert!(hour.iter().any(|point| point == &[50_000.0, -900.0]), "an hour around the dip shows it");
        assert!(
            hour.first().is_some_and(|point| point[0] >= 47_990.0),
            "from about the hour's start: {:?}",
            hour.first()
        );
        assert!(hour.last().is_some_and(|point| point[0] <= 51_600.0));
    }

    proptest! {
        /// Wherever the search starts, it finds what a bisection of the whole range finds.
        #[test]
        fn a_search_from_a_guess_finds_the_first_position_that_holds(
            from in 0usize..50, length in 0usize..200, answer in 0usize..260, guess in 0usize..300,
        ) {
            let to = from + length;
            let expected = answer.clamp(from, to);
            prop_assert_eq!(first_where_near(from, to, guess, |position| position >= answer), expected);
            prop_assert_eq!(first_where(from, to, |position| position >= answer), expected);
        }
    }

    #[test]
    fn the_ring_buffer_keeps_memory_bounded() {
        let mut series = Series::new(100);
        for i in 0..10_000 {
            series.push(i as f64, 1.0);
        }
        assert!((100..=132).contains(&series.len()), "{} points in full", series.len());
        assert!(series.iter().next().unwrap()[0] <= 9_900.0);
        assert_eq!(series.first_time(), Some(0.0), "the rest in summaries");
        series.push(f64::NAN, 1.0);
        series.push(5.0, 2.0);
        assert_eq!(series.last(), Some([9_999.0, 2.0]), "out-of-order time is clamped, NaN skipped");
    }

    #[test]
    fn decimation_keeps_spikes_and_bounds_the_point_count() {
        let mut series = Series::new(1_000_000);
        for i in 0..100_000 {
            let value = if i == 54_321 {
                1000.0
            } else if i == 12_345 {
                -5.0
            } else {
                (i % 7) as f64
            };
            series.push(i as f64 / 1000.0, value);
        }
        let shown = series.decimated(0.0, 100.0, 500);
        assert!(shown.len() <= 1000, "{} points", shown.len());
        assert!(shown.iter().any(|p| p[1] == 1000.0), "the maximum survives");
        assert!(shown.iter().any(|p| p[1] == -5.0), "the minimum survives");
        assert!(shown.windows(2).all(|w| w[0][0] <= w[1][0]), "time order");
        let zoomed = series.decimated(10.0, 10.5, 1000);
        assert_eq!(zoomed.len(), 501, "few points in range are returned as they are");
    }
}
