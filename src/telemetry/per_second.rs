//! Counts per second of a few kinds (outcomes, retries by cause) over a bounded window of
//! seconds, with running totals and per-block peaks, so a day of seconds draws in about as
//! many steps as the chart has pixel columns.

use std::collections::VecDeque;

use super::series::first_where_near;

/// Seconds whose peaks one block keeps: a pixel column of a day's chart is about a minute, so
/// its peak reads a few blocks and at most two ragged ends.
const BLOCK: usize = 8;

/// Counts per second of `N` kinds, in a bounded window of seconds.
#[derive(Debug, Clone)]
pub struct PerSecond<const N: usize> {
    /// `(second, counts)`, seconds increasing; the first is entry number `front` of all ever added.
    seconds: VecDeque<(i64, [u32; N])>,
    capacity: usize,
    front: usize,
    /// Each kind's highest count in each block of `BLOCK` entry numbers; the first is block
    /// number `first_block`. A block is read only while all of its entries are held.
    peaks: VecDeque<[u32; N]>,
    first_block: usize,
    /// Each kind's count over the window.
    totals: [u64; N],
}

/// Outcomes per second: 2xx/3xx, 429, and other errors.
pub type OutcomeRates = PerSecond<3>;

/// Retries scheduled per second, by what the attempt before ended with.
pub type RetryRates = PerSecond<5>;

impl<const N: usize> PerSecond<N> {
    /// Empty counts that keep the last `capacity_seconds` seconds (at least 1).
    pub fn new(capacity_seconds: usize) -> Self {
        Self {
            seconds: VecDeque::new(),
            capacity: capacity_seconds.max(1),
            front: 0,
            peaks: VecDeque::new(),
            first_block: 0,
            totals: [0; N],
        }
    }

    /// Counts one of `kind` (below `N`) at `t` seconds. A second older than the window's
    /// oldest, or one never counted before a later one was, is not counted.
    pub fn count(&mut self, t: f64, kind: usize) {
        let kind = kind.min(N - 1);
        let second = t.floor() as i64;
        let position = match self.seconds.back() {
            Some((last, _)) if *last == second => self.seconds.len() - 1,
            Some((last, _)) if *last > second => match self.seconds.binary_search_by_key(&second, |(s, _)| *s) {
                Ok(position) => position,
                Err(_) => return,
            },
            _ => {
                self.append(second);
                self.seconds.len() - 1
            }
        };
        let number = self.front + position;
        if let Some((_, counts)) = self.seconds.get_mut(position) {
            counts[kind] += 1;
            self.totals[kind] += 1;
            if let Some(peak) =
                number.checked_sub(self.first_block * BLOCK).and_then(|at| self.peaks.get_mut(at / BLOCK))
            {
                peak[kind] = peak[kind].max(counts[kind]);
            }
        }
    }

    /// Starts a new second at the end of the window, letting the oldest go when it is full.
    fn append(&mut self, second: i64) {
        if self.seconds.len() == self.capacity {
            if let Some((_, counts)) = self.seconds.pop_front() {
                for (total, count) in self.totals.iter_mut().zip(counts) {
                    *total -= u64::from(count);
                }
            }
            self.front += 1;
            if self.front.is_multiple_of(BLOCK) {
                self.peaks.pop_front();
                self.first_block += 1;
            }
        }
        if (self.front + self.seconds.len()).is_multiple_of(BLOCK) {
            self.peaks.push_back([0; N]);
        }
        self.seconds.push_back((second, [0; N]));
    }

    /// `(second, count)` points of one kind, for a bar or step chart.
    pub fn series(&self, kind: usize) -> Vec<[f64; 2]> {
        let kind = kind.min(N - 1);
        self.seconds.iter().map(|(second, counts)| [*second as f64, f64::from(counts[kind])]).collect()
    }

    /// Totals per kind over the window.
    pub fn totals(&self) -> [u64; N] {
        self.totals
    }

    /// The first and the last second counted, in seconds.
    pub fn extent(&self) -> Option<(f64, f64)> {
        Some((self.seconds.front()?.0 as f64, self.seconds.back()?.0 as f64))
    }

    /// The highest count of `kind` in one second over the window.
    pub fn peak(&self, kind: usize) -> u32 {
        self.peak_between(kind.min(N - 1), 0, self.seconds.len())
    }

    /// The highest count of `kind` in the held seconds at positions `at..end`: whole blocks by
    /// their peaks, the ragged ends second by second.
    fn peak_between(&self, kind: usize, at: usize, end: usize) -> u32 {
        let (mut number, end) = (self.front + at, self.front + end);
        let mut peak = 0;
        while number < end {
            let block = number / BLOCK;
            let whole = number.is_multiple_of(BLOCK) && number + BLOCK <= end;
            match self.peaks.get(block.wrapping_sub(self.first_block)).filter(|_| whole) {
                Some(peaks) => {
                    peak = peak.max(peaks[kind]);
                    number += BLOCK;
                }
                None => {
                    peak = peak.max(self.seconds[number - self.front].1[kind]);
                    number += 1;
                }
            }
        }
        peak
    }

    /// The counts of `kind` over `from..=to` as `(start, end, value)` segments: each second
    /// its own, or, with more seconds than `buckets`, each bucket of time the busiest second
    /// inside it, so spikes survive zooming out.
    pub fn segments(&self, kind: usize, from: f64, to: f64, buckets: usize) -> Vec<(f64, f64, f64)> {
        let kind = kind.min(N - 1);
        let start = self.seconds.partition_point(|(second, _)| (*second as f64) + 1.0 < from);
        let end = self.seconds.partition_point(|(second, _)| (*second as f64) <= to);
        let buckets = buckets.max(1);
        if end.saturating_sub(start) <= buckets || to <= from {
            let visible = self.seconds.range(start..end.max(start));
            return visible
                .map(|(second, counts)| (*second as f64, *second as f64 + 1.0, f64::from(counts[kind])))
                .collect();
        }
        let width = (to - from) / buckets as f64;
        let bucket_of = |position: usize| ((self.seconds[position].0 as f64 - from).max(0.0) / width) as usize;
        let mut segments = Vec::with_capacity(buckets + 1);
        let (mut at, mut run) = (start, 1);
        while at < end {
            let bucket = bucket_of(at);
            let stop = first_where_near(at + 1, end, at + run, |position| bucket_of(position) > bucket);
            run = stop - at;
            let begin = from + bucket as f64 * width;
            segments.push((begin, begin + width, f64::from(self.peak_between(kind, at, stop))));
            at = stop;
        }
        segments
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

    /// Segments by scanning every second in range: what the block peaks must reproduce.
    fn scanned(per_second: &[[f64; 2]], from: f64, to: f64, buckets: usize) -> Vec<(f64, f64, f64)> {
        let visible: Vec<[f64; 2]> =
            per_second.iter().copied().filter(|[second, _]| *second + 1.0 >= from && *second <= to).collect();
        if visible.len() <= buckets || to <= from {
            return visible.iter().map(|&[second, count]| (second, second + 1.0, count)).collect();
        }
        let width = (to - from) / buckets as f64;
        let mut runs: Vec<(usize, f64)> = Vec::new();
        for [second, count] in visible {
            let bucket = ((second - from).max(0.0) / width) as usize;
            match runs.last_mut() {
                Some((index, peak)) if *index == bucket => *peak = peak.max(count),
                _ => runs.push((bucket, count)),
            }
        }
        runs.into_iter()
            .map(|(index, peak)| {
                let begin = from + index as f64 * width;
                (begin, begin + width, peak)
            })
            .collect()
    }

    proptest! {
        /// Whatever was let go and wherever the range falls, the block peaks and running totals
        /// give what a scan of the seconds held gives.
        #[test]
        fn peaks_and_totals_read_as_a_scan_of_every_second(
            capacity in 1usize..400,
            counts in proptest::collection::vec((0u32..40, 0usize..3, 0u8..4), 1..2000),
            range in (0u32..3000, 0u32..3000),
            buckets in 1usize..40,
        ) {
            let mut rates = OutcomeRates::new(capacity);
            let mut t = 0.0;
            let (from, to) = (f64::from(range.0.min(range.1)) / 2.0, f64::from(range.0.max(range.1)) / 2.0);
            for (index, (step, kind, back)) in counts.into_iter().enumerate() {
                t += f64::from(step) / 10.0;
                // Now and then a count lands in a second already passed.
                rates.count(t - f64::from(back), kind);
                if index % 7 != 0 {
                    continue;
                }
                for kind in 0..3 {
                    let held = rates.series(kind);
                    prop_assert_eq!(rates.segments(kind, from, to, buckets), scanned(&held, from, to, buckets));
                    prop_assert_eq!(f64::from(rates.peak(kind)), held.iter().map(|p| p[1]).fold(0.0, f64::max));
                    prop_assert_eq!(rates.totals()[kind] as f64, held.iter().map(|p| p[1]).sum::<f64>());
                }
            }
        }
    }

    #[test]
    fn a_day_of_seconds_becomes_a_segment_a_column() {
        let mut rates = OutcomeRates::new(86_400);
        for second in 0..86_400 {
            for _ in 0..second % 5 {
                rates.record(f64::from(second), Some(200));
            }
        }
        let segments = rates.segments(OutcomeRates::OK, 0.0, 86_400.0, 1_300);
        assert!(segments.len() <= 1_301, "{}", segments.len());
        assert!(segments.iter().all(|(_, _, value)| *value == 4.0), "each bucket keeps its peak");
        assert_eq!(rates.extent(), Some((1.0, 86_399.0)), "second 0 counted nothing");
        let few = rates.segments(OutcomeRates::OK, 2.0, 5.0, 100);
        assert_eq!(
            few,
            vec![(1.0, 2.0, 1.0), (2.0, 3.0, 2.0), (3.0, 4.0, 3.0), (4.0, 5.0, 4.0)],
            "a second without counts has no bar"
        );
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
