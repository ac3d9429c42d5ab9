//! A bounded series of `(seconds, value)` points with min/max decimation, and per-second counts
//! (outcomes, retries by cause).

use std::collections::VecDeque;

/// Points summarised per block: a bucket spanning whole blocks reads their extremes instead
/// of every point, so decimating an hour at 100 Hz costs about its buckets, not its points.
const BLOCK: usize = 16;

/// The lowest and the highest of some points (each with its time).
type Extremes = ([f64; 2], [f64; 2]);

/// A ring buffer of points in time order; the oldest are dropped past `capacity`.
#[derive(Debug, Clone)]
pub struct Series {
    points: VecDeque<[f64; 2]>,
    capacity: usize,
    /// Points ever pushed: the absolute index of the next one.
    pushed: usize,
    /// The lowest and highest point of each block of `BLOCK` absolute indices still (partly)
    /// held, the first being block `first_block`; a block's summary is used only while all of
    /// its points are held.
    blocks: VecDeque<Extremes>,
    first_block: usize,
}

impl Series {
    /// An empty series that keeps the newest `capacity` points (at least 2).
    pub fn new(capacity: usize) -> Self {
        Self {
            points: VecDeque::with_capacity(capacity.min(4096)),
            capacity: capacity.max(2),
            pushed: 0,
            blocks: VecDeque::new(),
            first_block: 0,
        }
    }

    /// Appends a point; a point earlier than the last is clamped to keep time order.
    pub fn push(&mut self, t: f64, value: f64) {
        if !t.is_finite() || !value.is_finite() {
            return;
        }
        let t = self.points.back().map_or(t, |last| t.max(last[0]));
        if self.points.len() == self.capacity {
            self.points.pop_front();
            if self.front_index().is_multiple_of(BLOCK) {
                self.blocks.pop_front();
                self.first_block += 1;
            }
        }
        let point = [t, value];
        if self.pushed.is_multiple_of(BLOCK) {
            self.blocks.push_back((point, point));
        } else if let Some(block) = self.blocks.back_mut() {
            *block = widen(*block, (point, point));
        }
        self.points.push_back(point);
        self.pushed += 1;
    }

    /// The absolute index of the oldest point held.
    fn front_index(&self) -> usize {
        self.pushed - self.points.len()
    }

    /// The lowest and highest of the points held at positions `from..to`: whole blocks by their
    /// summaries, the ragged ends point by point.
    fn extremes(&self, from: usize, to: usize) -> Option<Extremes> {
        let front = self.front_index();
        let (mut at, end) = (front + from, front + to);
        let mut found: Option<Extremes> = None;
        let mut take = |pair| found = Some(found.map_or(pair, |seen| widen(seen, pair)));
        while at < end {
            let block = at / BLOCK;
            let (block_start, block_end) = (block * BLOCK, block * BLOCK + BLOCK);
            // `at >= front`, so a block entered at its start is wholly held.
            if at == block_start && block_end <= end {
                if let Some(summary) = self.blocks.get(block - self.first_block) {
                    take(*summary);
                }
                at = block_end;
            } else {
                let stop = block_end.min(end);
                for point in self.points.range(at - front..stop - front) {
                    take((*point, *point));
                }
                at = stop;
            }
        }
        found
    }

    /// The first position in `from..to` where `after` holds (it holds for every later one):
    /// galloping from `from`, so a short run costs a few steps, then bisecting.
    fn first_where(&self, mut from: usize, mut to: usize, after: impl Fn(&[f64; 2]) -> bool) -> usize {
        let mut step = 1;
        while from + step < to {
            if after(&self.points[from + step]) {
                to = from + step;
                break;
            }
            from += step;
            step *= 2;
        }
        while from < to {
            let middle = from + (to - from) / 2;
            if after(&self.points[middle]) {
                to = middle;
            } else {
                from = middle + 1;
            }
        }
        from
    }

    /// Points held.
    pub fn len(&self) -> usize {
        self.points.len()
    }

    /// Whether no point is held.
    pub fn is_empty(&self) -> bool {
        self.points.is_empty()
    }

    /// The newest point, `[t, value]`.
    pub fn last(&self) -> Option<[f64; 2]> {
        self.points.back().copied()
    }

    /// Points held, oldest first, as `[t, value]`.
    pub fn iter(&self) -> impl Iterator<Item = &[f64; 2]> {
        self.points.iter()
    }

    /// The points with `from <= t <= to`, reduced to at most about `2 * buckets` points: per
    /// bucket of time, its minimum and its maximum (in time order), so spikes survive.
    pub fn decimated(&self, from: f64, to: f64, buckets: usize) -> Vec<[f64; 2]> {
        let start = self.points.partition_point(|p| p[0] < from);
        let end = self.points.partition_point(|p| p[0] <= to);
        let count = end.saturating_sub(start);
        let buckets = buckets.max(1);
        if count <= 2 * buckets || to <= from {
            return self.points.range(start..end).copied().collect();
        }
        let width = (to - from) / buckets as f64;
        let bucket_of = |point: &[f64; 2]| (((point[0] - from) / width) as usize).min(buckets - 1);
        let mut out = Vec::with_capacity(2 * buckets + 2);
        let mut at = start;
        while at < end {
            // Buckets grow with time, so each one's points are a run found by bisection.
            let bucket = bucket_of(&self.points[at]);
            let stop = self.first_where(at, end, |point| bucket_of(point) > bucket);
            if let Some((low, high)) = self.extremes(at, stop) {
                let (first, second) = if low[0] <= high[0] { (low, high) } else { (high, low) };
                out.push(first);
                if second != first {
                    out.push(second);
                }
            }
            at = stop;
        }
        out
    }
}

/// Both extremes of two runs, the earlier run's point kept on a tie (as a scan in time order would).
fn widen(earlier: Extremes, later: Extremes) -> Extremes {
    let low = if later.0[1] < earlier.0[1] { later.0 } else { earlier.0 };
    let high = if later.1[1] > earlier.1[1] { later.1 } else { earlier.1 };
    (low, high)
}

/// Counts per second of `N` kinds, in a bounded window of seconds.
#[derive(Debug, Clone)]
pub struct PerSecond<const N: usize> {
    seconds: VecDeque<(i64, [u32; N])>,
    capacity: usize,
}

/// Outcomes per second: 2xx/3xx, 429, and other errors.
pub type OutcomeRates = PerSecond<3>;

/// Retries scheduled per second, by what the attempt before ended with.
pub type RetryRates = PerSecond<5>;

impl<const N: usize> PerSecond<N> {
    /// Empty counts that keep the last `capacity_seconds` seconds (at least 1).
    pub fn new(capacity_seconds: usize) -> Self {
        Self { seconds: VecDeque::new(), capacity: capacity_seconds.max(1) }
    }

    /// Counts one of `kind` (below `N`) at `t` seconds.
    pub fn count(&mut self, t: f64, kind: usize) {
        let kind = kind.min(N - 1);
        let second = t.floor() as i64;
        match self.seconds.back_mut() {
            Some((last, counts)) if *last == second => counts[kind] += 1,
            Some((last, _)) if *last > second => {
                if let Some((_, counts)) = self.seconds.iter_mut().rev().find(|(s, _)| *s == second) {
                    counts[kind] += 1;
                }
            }
            _ => {
                let mut counts = [0; N];
                counts[kind] = 1;
                self.seconds.push_back((second, counts));
                if self.seconds.len() > self.capacity {
                    self.seconds.pop_front();
                }
            }
        }
    }

    /// `(second, count)` points of one kind, for a bar or step chart.
    pub fn series(&self, kind: usize) -> Vec<[f64; 2]> {
        let kind = kind.min(N - 1);
        self.seconds.iter().map(|(second, counts)| [*second as f64, f64::from(counts[kind])]).collect()
    }

    /// Totals per kind over the window.
    pub fn totals(&self) -> [u64; N] {
        self.seconds.iter().fold([0; N], |mut sum, (_, counts)| {
            for (total, count) in sum.iter_mut().zip(counts) {
                *total += u64::from(*count);
            }
            sum
        })
    }
}

impl PerSecond<3> {
    /// Index of responses below 400.
    pub const OK: usize = 0;
    /// Index of 429s.
    pub const THROTTLED: usize = 1;
    /// Index of other statuses of 400 or more and transport errors.
    pub const ERROR: usize = 2;

    /// Counts an outcome at `t` seconds; `status` None is a transport error.
    pub fn record(&mut self, t: f64, status: Option<u16>) {
        let kind = match status {
            Some(429) => Self::THROTTLED,
            Some(status) if status < 400 => Self::OK,
            _ => Self::ERROR,
        };
        self.count(t, kind);
    }
}

impl PerSecond<5> {
    /// Index of retries after a 429.
    pub const THROTTLED: usize = 0;
    /// Index of retries after a 503.
    pub const UNAVAILABLE: usize = 1;
    /// Index of retries after a timeout.
    pub const TIMEOUT: usize = 2;
    /// Index of retries after a connection error.
    pub const CONNECTION: usize = 3;
    /// Index of retries after anything else.
    pub const OTHER: usize = 4;
    /// The kinds' names, in index order, for legends.
    pub const NAMES: [&'static str; 5] = ["429", "503", "timeout", "connection", "other"];

    /// Counts a retry at `t` whose attempt before ended with `cause` (the client's wording:
    /// "429 Too Many Requests", "no response in time", "connection error: ...").
    pub fn record_cause(&mut self, t: f64, cause: &str) {
        let kind = if cause.starts_with("429") {
            Self::THROTTLED
        } else if cause.starts_with("503") {
            Self::UNAVAILABLE
        } else if cause.starts_with("no response in time") || cause.contains("timed out") {
            Self::TIMEOUT
        } else if cause.starts_with("connection") {
            Self::CONNECTION
        } else {
            Self::OTHER
        };
        self.count(t, kind);
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

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
        /// Whatever was evicted and wherever the range falls, the summaries give what a scan gives.
        #[test]
        fn block_summaries_decimate_exactly_as_a_scan_of_every_point(
            capacity in 2usize..300,
            steps in proptest::collection::vec((0u8..3, -3i32..3), 1..1500),
            range in (0u32..1500, 0u32..1500),
            buckets in 1usize..8,
            every in 1usize..7,
        ) {
            let mut series = Series::new(capacity);
            let mut t = 0.0;
            let (from, to) = (f64::from(range.0.min(range.1)) / 4.0, f64::from(range.0.max(range.1)) / 4.0);
            for (pushed, (step, value)) in steps.into_iter().enumerate() {
                t += f64::from(step) * 0.25;
                series.push(t, f64::from(value));
                if pushed % every == 0 {
                    let held: Vec<[f64; 2]> = series.iter().copied().collect();
                    prop_assert_eq!(series.decimated(from, to, buckets), scanned(&held, from, to, buckets));
                }
            }
        }
    }

    #[test]
    fn the_ring_buffer_keeps_memory_bounded() {
        let mut series = Series::new(100);
        for i in 0..10_000 {
            series.push(i as f64, 1.0);
        }
        assert_eq!(series.len(), 100);
        assert_eq!(series.iter().next().unwrap()[0], 9_900.0);
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

    #[test]
    fn outcomes_are_counted_per_second() {
        let mut rates = OutcomeRates::new(60);
        for (t, status) in [(0.1, Some(200)), (0.5, Some(429)), (0.9, None), (1.2, Some(200)), (0.95, Some(503))] {
            rates.record(t, status);
        }
        assert_eq!(rates.series(OutcomeRates::OK), vec![[0.0, 1.0], [1.0, 1.0]]);
        assert_eq!(rates.series(OutcomeRates::THROTTLED), vec![[0.0, 1.0], [1.0, 0.0]]);
        assert_eq!(rates.totals(), [2, 1, 2]);
    }

    #[test]
    fn retries_are_counted_per_second_by_cause() {
        let mut retries = RetryRates::new(60);
        for (t, cause) in [
            (0.1, "429 Too Many Requests"),
            (0.2, "429 Too Many Requests"),
            (0.3, "503 Service Unavailable"),
            (1.5, "no response in time"),
            (1.6, "connection error: connection refused"),
            (1.7, "502 Bad Gateway"),
        ] {
            retries.record_cause(t, cause);
        }
        assert_eq!(retries.series(RetryRates::THROTTLED), vec![[0.0, 2.0], [1.0, 0.0]]);
        assert_eq!(retries.totals(), [2, 1, 1, 1, 1]);
    }
}
