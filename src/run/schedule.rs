//! Arrival schedules: the offset from the burst's start at which each request arrives.

use std::time::Duration;

use super::spec::ArrivalPattern;

/// Offsets for `count` requests under `pattern`, non-decreasing (a script's own, whatever `count`).
pub fn arrival_offsets(pattern: &ArrivalPattern, count: usize) -> Vec<Duration> {
    match *pattern {
        ArrivalPattern::Scripted(ref script) => script.iter().map(|step| step.at).collect(),
        ArrivalPattern::AllAtOnce => vec![Duration::ZERO; count],
        ArrivalPattern::FixedRate(rate) | ArrivalPattern::ForDuration { rate, .. } => {
            // Exact integer spacing: request i arrives at i * per / amount.
            let (per, amount) = (rate.per().as_nanos(), u128::from(rate.amount()));
            (0..count as u128)
                .map(|i| Duration::from_nanos(u64::try_from(i * per / amount).unwrap_or(u64::MAX)))
                .collect()
        }
        ArrivalPattern::Ramp { from, to, over } => {
            let over_s = over.as_secs_f64();
            let rate_at = |t: f64| if t >= over_s { to } else { from + (to - from) * t / over_s };
            let mut offsets = Vec::with_capacity(count);
            let mut t = 0.0f64;
            for _ in 0..count {
                offsets.push(Duration::from_secs_f64(t.min(1e9)));
                // Step by the inverse of the rate at t; a zero starting rate begins at the first slope.
                let rate = rate_at(t).max(to.min(1.0) * 1e-3).max(1e-6);
                t += 1.0 / rate;
            }
            offsets
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_rate_is_exact() {
        let offsets = arrival_offsets(&ArrivalPattern::FixedRate("3/1s".parse().unwrap()), 4);
        assert_eq!(offsets[3], Duration::from_secs(1));
        assert_eq!(offsets[1], Duration::from_nanos(333_333_333));
    }

    #[test]
    fn ramp_speeds_up() {
        let offsets = arrival_offsets(&ArrivalPattern::Ramp { from: 1.0, to: 10.0, over: Duration::from_secs(10) }, 50);
        let first_gap = offsets[1] - offsets[0];
        let last_gap = offsets[49] - offsets[48];
        assert_eq!(first_gap, Duration::from_secs(1));
        assert!(last_gap < Duration::from_millis(150), "{last_gap:?}");
        assert!(offsets.windows(2).all(|w| w[0] <= w[1]));
    }
}
