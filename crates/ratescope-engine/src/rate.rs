//! Quantities of a limit: `Rate` ("10/1s", "1000/1h") and readable durations.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use super::ConfigError;

/// `amount` units per `per`: the refill of a token bucket or the allowance of a window.
///
/// Stored as an exact integer ratio in lowest terms so the engine's arithmetic never drifts;
/// fractional amounts are scaled and reduced: `2.5/1s` is `5/2s`, `0.5/1s` is `1/2s`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rate {
    amount: u64,
    per: Duration,
}

impl Rate {
    /// A rate of `amount` per `per`. Both must be positive.
    pub fn new(amount: u64, per: Duration) -> Result<Self, ConfigError> {
        if amount == 0 {
            return Err(ConfigError::ZeroRate);
        }
        if per.is_zero() {
            return Err(ConfigError::ZeroDuration);
        }
        if per.as_nanos() > MAX_PERIOD_NANOS {
            return Err(ConfigError::DurationTooLong(per));
        }
        if amount > MAX_AMOUNT {
            return Err(ConfigError::CountTooLarge(amount));
        }
        Ok(Self { amount, per })
    }

    /// A rate from a floating-point amount: refuses NaN, infinities, zero and negatives.
    pub fn from_f64(amount: f64, per: Duration) -> Result<Self, ConfigError> {
        if !amount.is_finite() {
            return Err(ConfigError::NotFinite(amount));
        }
        if amount <= 0.0 {
            return Err(ConfigError::NotPositive(amount));
        }
        if amount > MAX_AMOUNT as f64 {
            return Err(ConfigError::AmountTooLarge(amount));
        }
        // Scale by powers of ten until the amount is (close to) whole.
        let mut scale: u32 = 1;
        while scale < 10u32.pow(MAX_DECIMALS) && (amount * f64::from(scale)).fract().abs() > 1e-9 {
            scale *= 10;
        }
        let scaled = (amount * f64::from(scale)).round();
        if scaled < 1.0 {
            return Err(ConfigError::TooFine { amount, per });
        }
        // Only the scaling is taken back out: 2.5/1s is 25/10s, then 5/2s; 10/1s stays 10/1s.
        let (amount, scale) = lowest_terms(scaled as u64, scale);
        let per = per.checked_mul(scale).ok_or(ConfigError::DurationTooLong(per))?;
        Self::new(amount, per)
    }

    /// Units per interval (numerator).
    pub fn amount(&self) -> u64 {
        self.amount
    }

    /// The interval (denominator).
    pub fn per(&self) -> Duration {
        self.per
    }

    /// Units per second as a float, for display and charts.
    pub fn per_second(&self) -> f64 {
        self.amount as f64 / self.per.as_secs_f64()
    }
}

/// `amount/scale` with their common factor taken out (`25/10` → `5/2`).
fn lowest_terms(amount: u64, scale: u32) -> (u64, u32) {
    let (mut a, mut b) = (amount, u64::from(scale));
    while b != 0 {
        (a, b) = (b, a % b);
    }
    let common = a.max(1);
    (amount / common, (u64::from(scale) / common) as u32)
}

/// The most decimals an amount keeps (`0.000001/1s` is one per 11.6 days; a slower rate is
/// written over a longer period).
const MAX_DECIMALS: u32 = 6;

/// Why `amount` per `per` is refused as rounding to zero, with the slowest rate that is
/// accepted and the same rate written so that it is (`1/116d`), when it fits in ten years.
pub(super) fn too_fine(amount: f64, per: Duration) -> String {
    let smallest = format!("0.{}1", "0".repeat(MAX_DECIMALS as usize - 1));
    // One per `period` seconds, in the largest unit that counts at least 100 of them (rounded
    // up, it is then at most 1% slower).
    let period = per.as_secs_f64() / amount;
    let units = [(86_400.0, "d"), (3600.0, "h"), (60.0, "m"), (1.0, "s")];
    let (unit, name) = units.into_iter().find(|(unit, _)| period / unit >= 100.0).unwrap_or((1.0, "s"));
    let count = (period / unit).ceil();
    let rewrite = if period.is_finite() && count * unit * 1e9 <= MAX_PERIOD_NANOS as f64 {
        format!("; about this rate, written over a longer period: 1/{count}{name}")
    } else {
        String::new()
    };
    format!(
        "{}/{} is less than one per {} and rounds to zero (an amount keeps {MAX_DECIMALS} decimals): the smallest is {smallest}/{}{rewrite}",
        format_amount(amount),
        format_period(per),
        format_period(per.saturating_mul(10u32.pow(MAX_DECIMALS))),
        format_period(per)
    )
}

/// Longest period accepted: about 10 years, enough for any real budget and far from overflow.
const MAX_PERIOD_NANOS: u128 = 10 * 366 * 24 * 3600 * 1_000_000_000;
/// Largest amount accepted; keeps every product of the engine's integer math in range.
pub(crate) const MAX_AMOUNT: u64 = 1 << 40;

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.amount, format_period(self.per))
    }
}

impl FromStr for Rate {
    type Err = ConfigError;

    /// Parses `10/1s`, `10/s`, `1000/1h`, `2.5/500ms`, `100 per minute` is not accepted:
    /// the form is always `AMOUNT/DURATION`, with a bare unit meaning one of it.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let (amount, per) = text
            .split_once('/')
            .ok_or_else(|| ConfigError::Syntax(format!("'{text}' is not of the form AMOUNT/DURATION, e.g. 10/1s")))?;
        let typed = amount.trim();
        let amount: f64 = typed.parse().map_err(|_| ConfigError::Syntax(format!("'{typed}' is not a number")))?;
        if amount.is_finite() && amount > MAX_AMOUNT as f64 {
            // Echoed as typed: the float would print another number (2^64 - 1 as ...552000).
            return Err(ConfigError::Syntax(format!(
                "'{typed}' is too large: a rate's amount is at most 2^40 ({MAX_AMOUNT})"
            )));
        }
        let per = parse_duration(per)?;
        Self::from_f64(amount, per)
    }
}

/// Parses a duration such as `1s`, `500ms`, `1h`, `1m30s`; a bare unit (`s`, `min`, `h`, `d`) means one of it.
pub fn parse_duration(text: &str) -> Result<Duration, ConfigError> {
    let text = text.trim();
    let with_count =
        if text.starts_with(|c: char| c.is_ascii_alphabetic()) { format!("1{text}") } else { text.to_owned() };
    humantime::parse_duration(&with_count)
        .map_err(|err| ConfigError::Syntax(format!("'{text}' is not a duration ({err}); try 1s, 500ms, 1m, 1h, 1d")))
}

/// A period in its most natural single unit when it has one (`1s`, `1h`, `500ms`), else humantime's form.
pub fn format_period(per: Duration) -> String {
    const UNITS: [(u128, &str); 5] = [
        (86_400_000_000_000, "d"),
        (3_600_000_000_000, "h"),
        (60_000_000_000, "m"),
        (1_000_000_000, "s"),
        (1_000_000, "ms"),
    ];
    let nanos = per.as_nanos();
    // humantime reads `Nms` as N * 10^6 ns in a u64, so past about 584 years whole
    // milliseconds are written in its mixed form instead, which [`parse_duration`] reads back.
    let readable = |unit: u128| unit >= 1_000_000_000 || nanos <= u128::from(u64::MAX);
    for (unit, name) in UNITS {
        if nanos >= unit && nanos.is_multiple_of(unit) && readable(unit) {
            return format!("{}{name}", nanos / unit);
        }
    }
    humantime::format_duration(per).to_string()
}

/// A number as it was given, compactly: whole numbers without a fraction (`5`), others in the
/// shortest form that reads back (`0.5`, `1e-7`, `1e308`, `NaN`), never hundreds of digits.
pub fn format_amount(value: f64) -> String {
    if value.fract() == 0.0 && value.abs() < 1e15 { format!("{value:.0}") } else { format!("{value:?}") }
}

/// A number for people: at most three decimals without trailing zeros (`596.5`, `0.125`, `100`),
/// and in exponent form from 10^15 on (`1e308`), where every further digit is noise.
pub fn format_number(value: f64) -> String {
    if !value.is_finite() {
        return format!("{value:?}");
    }
    if value.abs() >= 1e15 {
        return format!("{value:e}");
    }
    let text = format!("{:.3}", (value * 1000.0).round() / 1000.0);
    let text = text.trim_end_matches('0').trim_end_matches('.');
    if text == "-0" { "0".to_owned() } else { text.to_owned() }
}

/// A wait in at most its two most significant units: `12m 3s`, `1.2s`, `250ms`, `3h 5m`.
pub fn format_wait(wait: Duration) -> String {
    let secs = wait.as_secs();
    if secs >= 86_400 {
        format!("{}d {}h", secs / 86_400, secs % 86_400 / 3600)
    } else if secs >= 3600 {
        format!("{}h {}m", secs / 3600, secs % 3600 / 60)
    } else if secs >= 60 {
        format!("{}m {}s", secs / 60, secs % 60)
    } else if secs >= 1 {
        format!("{:.1}s", wait.as_secs_f64())
    } else {
        format!("{}ms", wait.as_millis())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_common_forms() {
        let rate: Rate = "10/1s".parse().unwrap();
        assert_eq!((rate.amount(), rate.per()), (10, Duration::from_secs(1)));
        let rate: Rate = "1000/h".parse().unwrap();
        assert_eq!((rate.amount(), rate.per()), (1000, Duration::from_secs(3600)));
        let rate: Rate = " 2.5 / 500ms ".parse().unwrap();
        assert_eq!(rate.per_second(), 5.0);
        assert_eq!(rate.to_string(), "5/1s");
        assert_eq!("10/1s".parse::<Rate>().unwrap().to_string(), "10/1s");
        assert_eq!("2.5/1s".parse::<Rate>().unwrap().to_string(), "5/2s");
        assert_eq!("0.5/1s".parse::<Rate>().unwrap().to_string(), "1/2s");
        assert_eq!("0.125/1ms".parse::<Rate>().unwrap().to_string(), "1/8ms");
        assert_eq!("100/1d".parse::<Rate>().unwrap().to_string(), "100/1d");
    }

    #[test]
    fn refuses_absurd_rates() {
        for bad in ["0/1s", "-1/1s", "NaN/1s", "inf/1s", "5/0s", "5", "x/1s", "5/fortnight", "1e30/1s"] {
            assert!(bad.parse::<Rate>().is_err(), "{bad} should be refused");
        }
        assert!(Rate::from_f64(f64::NAN, Duration::from_secs(1)).is_err());
        assert!(Rate::new(1, Duration::from_secs(400 * 365 * 86_400)).is_err());
    }

    #[test]
    fn refusals_echo_what_was_typed_and_say_what_is_accepted() {
        let huge = "18446744073709551615/1s".parse::<Rate>().unwrap_err().to_string();
        assert!(huge.contains("'18446744073709551615' is too large") && huge.contains("1099511627776"), "{huge}");
        let fine = "0.0000001/1s".parse::<Rate>().unwrap_err().to_string();
        assert!(!fine.contains("greater than zero"), "{fine}");
        assert!(fine.contains("1e-7/1s is less than one per 1000000s and rounds to zero"), "{fine}");
        assert!(fine.contains("the smallest is 0.000001/1s") && fine.contains("1/116d"), "{fine}");
        assert_eq!("1/116d".parse::<Rate>().unwrap().to_string(), "1/116d", "the suggestion is accepted");
        let fast = "0.0000001/1ms".parse::<Rate>().unwrap_err().to_string();
        assert!(fast.contains("the smallest is 0.000001/1ms") && fast.ends_with("1/167m"), "{fast}");
        assert_eq!("0.000001/1s".parse::<Rate>().unwrap().to_string(), "1/1000000s", "so is the smallest");
        let never = "1e-300/1s".parse::<Rate>().unwrap_err().to_string();
        assert!(never.len() < 200 && !never.contains("longer period"), "{never}");
        let big = Rate::from_f64(1e308, Duration::from_secs(1)).unwrap_err().to_string();
        assert!(big.starts_with("1e308 is too large"), "{big}");
    }

    #[test]
    fn numbers_for_people_have_three_decimals_or_an_exponent() {
        let cases = [(100.0, "100"), (596.5, "596.5"), (0.1234, "0.123"), (-0.0001, "0"), (1e308, "1e308")];
        for (value, shown) in cases {
            assert_eq!(format_number(value), shown);
        }
        assert_eq!(format_number(99999999999999999999999.0), "1e23");
        assert_eq!(format_number(f64::NAN), "NaN");
    }

    #[test]
    fn formats_waits_readably() {
        assert_eq!(format_wait(Duration::from_secs(12 * 60 + 3)), "12m 3s");
        assert_eq!(format_wait(Duration::from_millis(250)), "250ms");
        assert_eq!(format_wait(Duration::from_millis(1500)), "1.5s");
        assert_eq!(format_wait(Duration::from_secs(3 * 3600 + 5 * 60)), "3h 5m");
        assert_eq!(format_period(Duration::from_secs(3600)), "1h");
        assert_eq!(format_period(Duration::from_millis(1500)), "1500ms");
    }

    #[test]
    fn every_parsed_duration_prints_as_text_that_reads_back() {
        // Found by fuzz/limits ("ms910y"): 910 years and 1 ms was printed as whole
        // milliseconds, a count humantime cannot read back.
        for text in ["ms910y", "1ms 600y", "83440006510y 25ms", "1s 900y", "584y 1ms"] {
            let duration = parse_duration(text).unwrap();
            let printed = format_period(duration);
            assert_eq!(parse_duration(&printed).ok(), Some(duration), "{text} printed as {printed}");
        }
        assert_eq!(format_period(Duration::from_secs(400 * 365 * 86_400)), "146000d");
    }
}
