//! A bounded series of `(seconds, value)` points with min/max decimation, and per-second outcome counts.

use std::collections::VecDeque;

/// A ring buffer of points in time order; the oldest are dropped past `capacity`.
#[derive(Debug, Clone)]
pub struct Series {
    points: VecDeque<[f64; 2]>,
    capacity: usize,
}

impl Series {
    pub fn new(capacity: usize) -> Self {
        Self { points: VecDeque::with_capacity(capacity.min(4096)), capacity: capacity.max(2) }
    }

    /// Appends a point; a point earlier than the last is clamped to keep time order.
    pub fn push(&mut self, t: f64, value: f64) {
        if !t.is_finite() || !value.is_finite() {
            return;
        }
        let t = self.points.back().map_or(t, |last| t.max(last[0]));
        if self.points.len() == self.capacity {
            self.points.pop_front();
        }
        self.points.push_back([t, value]);
    }

    pub fn len(&self) -> usize {
        self.points.len()
    }

    pub fn is_empty(&self) -> bool {
        self.points.is_empty()
    }

    pub fn last(&self) -> Option<[f64; 2]> {
        self.points.back().copied()
    }

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
        let mut out = Vec::with_capacity(2 * buckets + 2);
        let mut current: Option<(usize, [f64; 2], [f64; 2])> = None;
        let flush = |out: &mut Vec<[f64; 2]>, (_, low, high): (usize, [f64; 2], [f64; 2])| {
            let (first, second) = if low[0] <= high[0] { (low, high) } else { (high, low) };
            out.push(first);
            if second != first {
                out.push(second);
            }
        };
        for &point in self.points.range(start..end) {
            let bucket = (((point[0] - from) / width) as usize).min(buckets - 1);
            match &mut current {
                Some((index, low, high)) if *index == bucket => {
                    if point[1] < low[1] {
                        *low = point;
                    }
                    if point[1] > high[1] {
                        *high = point;
                    }
                }
                _ => {
                    if let Some(done) = current.take() {
                        flush(&mut out, done);
                    }
                    current = Some((bucket, point, point));
                }
            }
        }
        if let Some(done) = current {
            flush(&mut out, done);
        }
        out
    }
}

/// Outcomes per second: 2xx/3xx, 429, and other errors, in a bounded window of seconds.
#[derive(Debug, Clone)]
pub struct OutcomeRates {
    seconds: VecDeque<(i64, [u32; 3])>,
    capacity: usize,
}

impl OutcomeRates {
    pub const OK: usize = 0;
    pub const THROTTLED: usize = 1;
    pub const ERROR: usize = 2;

    pub fn new(capacity_seconds: usize) -> Self {
        Self { seconds: VecDeque::new(), capacity: capacity_seconds.max(1) }
    }

    /// Counts an outcome at `t` seconds; `status` None is a transport error.
    pub fn record(&mut self, t: f64, status: Option<u16>) {
        let kind = match status {
            Some(429) => Self::THROTTLED,
            Some(status) if status < 400 => Self::OK,
            _ => Self::ERROR,
        };
        let second = t.floor() as i64;
        match self.seconds.back_mut() {
            Some((last, counts)) if *last == second => counts[kind] += 1,
            Some((last, _)) if *last > second => {
                if let Some((_, counts)) = self.seconds.iter_mut().rev().find(|(s, _)| *s == second) {
                    counts[kind] += 1;
                }
            }
            _ => {
                let mut counts = [0; 3];
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
        self.seconds.iter().map(|(second, counts)| [*second as f64, f64::from(counts[kind.min(2)])]).collect()
    }

    /// Totals over the window: ok, throttled, errors.
    pub fn totals(&self) -> [u64; 3] {
        self.seconds.iter().fold([0; 3], |mut sum, (_, counts)| {
            for (total, count) in sum.iter_mut().zip(counts) {
                *total += u64::from(*count);
            }
            sum
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
