//! Numbers and times in rate-limit headers: plain numbers, Go-style durations,
//! RFC 3339 and HTTP dates, and the clock-skew correction for absolute resets.
//!
//! # How a reset value is read
//!
//! Each dialect picks the [`ResetKind`] its provider documents (the dialect
//! modules name the document). For vendors nobody documented for us,
//! [`ResetKind::Auto`] applies this rule:
//!
//! - a bare number greater than 10^12 is epoch **milliseconds**;
//! - a bare number greater than 10^9 is epoch **seconds** (10^9 s after the
//!   epoch is September 2001, and no server means "reset in 31 years");
//! - any other bare number is **delta seconds**;
//! - anything else is tried as a Go duration (`6m0s`), then an RFC 3339
//!   timestamp, then an HTTP-date.
//!
//! # Clock skew
//!
//! Absolute instants (epoch numbers, timestamps, HTTP-dates) are measured
//! against the server's clock: the response's `Date` header when it is present
//! and valid, otherwise the client's `now`. A server whose clock runs an hour
//! ahead and says "reset at Date + 60 s" therefore yields 60 s, not 3660 s.
//! Instants in the past clamp to zero.
//!
//! `Date` has whole seconds: a clock in step with the client's writes the floor of the same
//! instant, up to a second (and a trip) behind it. A `Date` that far behind, and no more,
//! ([`SKEW_NOISE`]) is taken as agreement and the client's own, finer clock is used; any
//! other `Date` is skew, and used.
//!
//! # Precision
//!
//! [`precision`] says how coarsely a reset was written (a whole number of seconds: one
//! second; `1.25`: a hundredth), so a caller can tell a reset that may be rounded from an
//! exact one. Servers round resets up (the true reset may be up to that much earlier).

use std::borrow::Cow;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::quoted;

/// Bare numbers above this are epoch seconds under [`ResetKind::Auto`].
const EPOCH_SECONDS_FLOOR: f64 = 1e9;
/// Bare numbers above this are epoch milliseconds wherever an epoch is read.
const EPOCH_MILLIS_FLOOR: f64 = 1e12;

/// The server's idea of "now", against which absolute resets are measured.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Clock {
    pub(crate) server_now: SystemTime,
}

/// A `Date` at most this far behind the client's clock (and not ahead) is read as "no skew".
pub(crate) const SKEW_NOISE: Duration = Duration::from_millis(1500);

impl Clock {
    /// The clock for a response stamped `date` (if it had one), read by a client at `client_now`.
    pub(crate) fn new(client_now: SystemTime, date: Option<SystemTime>) -> Self {
        let server_now = match date {
            Some(date) => match client_now.duration_since(date) {
                Ok(behind) if behind <= SKEW_NOISE => client_now,
                _ => date,
            },
            None => client_now,
        };
        Self { server_now }
    }

    /// Time from the server's now until `instant`, zero if it has passed.
    pub(crate) fn until(&self, instant: SystemTime) -> Duration {
        instant.duration_since(self.server_now).unwrap_or(Duration::ZERO)
    }
}

/// How a dialect writes its reset value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ResetKind {
    /// Seconds from now, possibly fractional.
    Delta,
    /// Seconds since the Unix epoch, possibly fractional (milliseconds above 10^12).
    Epoch,
    /// A Go duration (`1h2m3.5s`, `20ms`, `0s`) or a bare number of seconds.
    Duration,
    /// An RFC 3339 timestamp, an HTTP-date, or a bare epoch number.
    Timestamp,
    /// Unknown vendor: the magnitude rule in the module docs.
    Auto,
}

/// A finite, non-negative number written as text.
pub(crate) fn parse_number(text: &str) -> Result<f64, String> {
    let n: f64 = text.trim().parse().map_err(|_| format!("{} is not a number", quoted(text)))?;
    non_negative(n, text)
}

/// `n` if it is finite and non-negative (`-0.0` becomes `0.0`); `shown` names it.
pub(crate) fn non_negative(n: f64, shown: &str) -> Result<f64, String> {
    if !n.is_finite() {
        Err(format!("{} is not a finite number", quoted(shown)))
    } else if n < 0.0 {
        Err(format!("{} is negative", quoted(shown)))
    } else {
        Ok(n + 0.0)
    }
}

/// A non-negative number of seconds as a [`Duration`], rounded to the nanosecond.
pub(crate) fn seconds(secs: f64) -> Result<Duration, String> {
    if !secs.is_finite() || secs < 0.0 {
        return Err(format!("{secs} seconds is not a valid duration"));
    }
    let nanos = (secs * 1e9).round();
    if nanos < u64::MAX as f64 {
        // In range, so the cast is exact up to rounding already done.
        Ok(Duration::from_nanos(nanos as u64))
    } else {
        Duration::try_from_secs_f64(secs).map_err(|_| format!("{secs} seconds is out of range"))
    }
}

/// A non-negative number of seconds written as text. Plain decimals
/// (`1470173023.123`) are read exactly to the nanosecond, which `f64` cannot
/// do for epoch-sized values; other notations (`1e3`) go through `f64`.
pub(crate) fn text_seconds(text: &str) -> Result<Duration, String> {
    let n = parse_number(text)?;
    match exact_decimal(text.trim()) {
        Some(d) => Ok(d),
        None => seconds(n),
    }
}

fn exact_decimal(text: &str) -> Option<Duration> {
    let t = text.strip_prefix('+').unwrap_or(text);
    let (int, frac) = t.split_once('.').unwrap_or((t, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if (int.is_empty() && frac.is_empty()) || !digits(int) || !digits(frac) {
        return None;
    }
    let secs = if int.is_empty() { 0 } else { int.parse().ok()? };
    let nanos = (frac.bytes().take(9).enumerate()).map(|(i, b)| u32::from(b - b'0') * 10u32.pow(8 - i as u32)).sum();
    Some(Duration::new(secs, nanos))
}

/// Interprets a reset value as "time until reset".
pub(crate) fn reset_after(text: &str, kind: ResetKind, clock: &Clock) -> Result<Duration, String> {
    let t = text.trim();
    let numeric = t.parse::<f64>().is_ok();
    let until = |at: SystemTime| clock.until(at);
    match kind {
        ResetKind::Delta => text_seconds(t),
        ResetKind::Epoch => epoch_instant(text_seconds(t)?).map(until),
        ResetKind::Duration if numeric => text_seconds(t),
        ResetKind::Duration => parse_go_duration(t),
        ResetKind::Timestamp if numeric => epoch_instant(text_seconds(t)?).map(until),
        ResetKind::Timestamp => parse_timestamp(t).map(until),
        ResetKind::Auto if numeric => {
            let n = text_seconds(t)?;
            if n.as_secs_f64() > EPOCH_SECONDS_FLOOR { epoch_instant(n).map(until) } else { Ok(n) }
        }
        ResetKind::Auto => parse_go_duration(t)
            .or_else(|_| parse_timestamp(t).map(until))
            .map_err(|_| format!("{} is not a number, duration or timestamp", quoted(t))),
    }
}

/// How coarsely a reset value is written: the true reset may be up to this much earlier than
/// the value says (servers round up). Whole seconds for integers, HTTP-dates, timestamps
/// without a fraction and durations ending in seconds or larger units; the last digit's
/// place for decimals; a millisecond for epoch milliseconds and `ms` durations.
pub(crate) fn precision(text: &str) -> Duration {
    let t = text.trim();
    if t.parse::<f64>().is_ok() {
        if let Some((_, fraction)) = t.split_once('.') {
            let digits = fraction.bytes().take_while(u8::is_ascii_digit).count().min(9) as u32;
            return Duration::from_nanos(10u64.pow(9 - digits));
        }
        let big = t.parse::<f64>().is_ok_and(|n| n > EPOCH_MILLIS_FLOOR);
        return if big { Duration::from_millis(1) } else { Duration::from_secs(1) };
    }
    for (suffix, unit) in [("ns", 1), ("us", 1_000), ("µs", 1_000), ("μs", 1_000), ("ms", 1_000_000)] {
        if t.ends_with(suffix) {
            return Duration::from_nanos(unit);
        }
    }
    match t.rfind('.') {
        Some(dot) => {
            let digits = t[dot + 1..].bytes().take_while(u8::is_ascii_digit).count().min(9) as u32;
            Duration::from_nanos(10u64.pow(9 - digits))
        }
        None => Duration::from_secs(1),
    }
}

/// The instant `n` seconds (or milliseconds, above 10^12) after the epoch.
fn epoch_instant(n: Duration) -> Result<SystemTime, String> {
    let since_epoch = if n.as_secs_f64() > EPOCH_MILLIS_FLOOR { n / 1000 } else { n };
    UNIX_EPOCH.checked_add(since_epoch).ok_or_else(|| format!("epoch {} is out of range", n.as_secs_f64()))
}

/// An RFC 3339 timestamp or an HTTP-date (IMF-fixdate, RFC 850 or asctime).
pub(crate) fn parse_timestamp(text: &str) -> Result<SystemTime, String> {
    let t = text.trim();
    parse_rfc3339(t)
        .or_else(|| httpdate::parse_http_date(t).ok())
        .ok_or_else(|| format!("{} is not a timestamp", quoted(t)))
}

/// A Go `time.Duration` string: `300ms`, `1.5h`, `2h45m`, `6m0s`, `0`.
/// Units: ns, us/µs, ms, s, m, h. Negative durations are rejected.
pub(crate) fn parse_go_duration(text: &str) -> Result<Duration, String> {
    let invalid = || format!("{} is not a duration", quoted(text));
    let mut rest = text.trim();
    if let Some(unsigned) = rest.strip_prefix('-') {
        return match parse_go_duration(unsigned) {
            Ok(d) if d.is_zero() => Ok(d),
            Ok(_) => Err(format!("{} is negative", quoted(text))),
            Err(_) => Err(invalid()),
        };
    }
    rest = rest.strip_prefix('+').unwrap_or(rest);
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    if rest.is_empty() {
        return Err(invalid());
    }
    let mut total = 0.0;
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
        let (number, tail) = rest.split_at(digits);
        let unit_len = tail.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_len);
        let value: f64 = number.parse().map_err(|_| invalid())?;
        let scale = match unit {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(invalid()),
        };
        total += value * scale;
        rest = tail;
    }
    seconds(total)
}

/// An RFC 3339 `date-time` (`2024-05-01T12:00:00Z`, `...T12:00:00.5+02:00`),
/// read by jiff's Temporal parser, which also takes `t`/space as separator,
/// lower-case `z` and `+0200`. Two gaps between jiff and RFC 3339 are closed
/// here: RFC 3339 allows any number of fraction digits (jiff reads at most
/// nine, so the rest are cut off first), and caps an offset's hour at 23
/// (jiff accepts up to ±25:59:59, so larger offsets are rejected).
pub(crate) fn parse_rfc3339(text: &str) -> Option<SystemTime> {
    let text = clip_fraction(text.trim());
    let pieces = jiff::fmt::temporal::Pieces::parse(text.as_ref()).ok()?;
    let offset = pieces.to_numeric_offset().filter(|o| o.seconds().unsigned_abs() < 24 * 3600)?;
    let timestamp = offset.to_timestamp(pieces.date().to_datetime(pieces.time()?)).ok()?;
    SystemTime::try_from(timestamp).ok()
}

/// `text` with any seconds fraction cut to nanoseconds (nine digits).
fn clip_fraction(text: &str) -> Cow<'_, str> {
    let Some(dot) = text.find('.') else { return Cow::Borrowed(text) };
    let digits = text[dot + 1..].bytes().take_while(u8::is_ascii_digit).count();
    if digits <= 9 {
        return Cow::Borrowed(text);
    }
    Cow::Owned(format!("{}{}", &text[..dot + 10], &text[dot + 1 + digits..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    fn clock(secs: u64) -> Clock {
        Clock { server_now: at(secs) }
    }

    #[test]
    fn precision_follows_how_the_value_is_written() {
        assert_eq!(precision("5"), Duration::from_secs(1));
        assert_eq!(precision(" 1700000005 "), Duration::from_secs(1));
        assert_eq!(precision("1.25"), Duration::from_millis(10));
        assert_eq!(precision("1700000005123"), Duration::from_millis(1));
        assert_eq!(precision("6m0s"), Duration::from_secs(1));
        assert_eq!(precision("1m30.5s"), Duration::from_millis(100));
        assert_eq!(precision("20ms"), Duration::from_millis(1));
        assert_eq!(precision("Wed, 21 Oct 2015 07:28:00 GMT"), Duration::from_secs(1));
        assert_eq!(precision("2024-05-01T12:00:00.250Z"), Duration::from_millis(1));
    }

    #[test]
    fn a_date_within_its_own_rounding_defers_to_the_client_clock() {
        let client = at(1000) + Duration::from_millis(700);
        assert_eq!(Clock::new(client, Some(at(1000))).server_now, client, "Date is the floor of the same second");
        assert_eq!(Clock::new(client, Some(at(999))).server_now, at(999), "1.7 s behind is skew");
        let early = at(1000) + Duration::from_millis(200);
        assert_eq!(Clock::new(early, Some(at(999))).server_now, early, "1.2 s behind: floor and a slow trip");
        assert_eq!(Clock::new(client, Some(at(1001))).server_now, at(1001), "ahead is skew: Date errs late");
        assert_eq!(Clock::new(client, Some(at(990))).server_now, at(990), "ten seconds behind is skew");
        assert_eq!(Clock::new(client, Some(at(1060))).server_now, at(1060), "a minute ahead is skew");
        assert_eq!(Clock::new(client, None).server_now, client);
    }

    #[test]
    fn numbers_reject_nan_infinity_negative_and_text() {
        assert_eq!(parse_number(" 42.5 "), Ok(42.5));
        assert_eq!(parse_number("-0"), Ok(0.0));
        assert!(parse_number("-0").unwrap().is_sign_positive());
        assert_eq!(parse_number("abc"), Err(r#""abc" is not a number"#.into()));
        assert_eq!(parse_number("NaN"), Err(r#""NaN" is not a finite number"#.into()));
        assert_eq!(parse_number("inf"), Err(r#""inf" is not a finite number"#.into()));
        assert_eq!(parse_number("1e999"), Err(r#""1e999" is not a finite number"#.into()));
        assert_eq!(parse_number("-3"), Err(r#""-3" is negative"#.into()));
    }

    #[test]
    fn go_durations_as_openai_writes_them() {
        let cases = [
            ("1s", 1_000),
            ("6m0s", 360_000),
            ("20ms", 20),
            ("1h2m3.5s", 3_723_500),
            ("0s", 0),
            ("0", 0),
            ("2m59.56s", 179_560),
            ("1.5h", 5_400_000),
        ];
        for (text, millis) in cases {
            assert_eq!(parse_go_duration(text), Ok(Duration::from_millis(millis)), "{text}");
        }
        assert_eq!(parse_go_duration("1500us"), Ok(Duration::from_micros(1500)));
        assert_eq!(parse_go_duration("1µs"), Ok(Duration::from_micros(1)));
        assert_eq!(parse_go_duration("7ns"), Ok(Duration::from_nanos(7)));
        for bad in ["", "s", "5", "1x", "1.2.3s", "abc", "1h-2m", "."] {
            assert!(parse_go_duration(bad).is_err(), "{bad:?} should be rejected");
        }
        assert_eq!(parse_go_duration("-1s"), Err(r#""-1s" is negative"#.into()));
        assert_eq!(parse_go_duration("-0s"), Ok(Duration::ZERO));
    }

    #[test]
    fn rfc3339_with_zulu_offsets_and_fractions() {
        // 2025-08-21T12:40:59Z = 1755780059 (from Anthropic's documented header shape).
        assert_eq!(parse_rfc3339("2025-08-21T12:40:59Z"), Some(at(1_755_780_059)));
        assert_eq!(parse_rfc3339("2025-08-21T14:40:59+02:00"), Some(at(1_755_780_059)));
        assert_eq!(parse_rfc3339("2025-08-21T07:10:59-05:30"), Some(at(1_755_780_059)));
        assert_eq!(parse_rfc3339("2025-08-21t12:40:59z"), Some(at(1_755_780_059)));
        assert_eq!(parse_rfc3339("2025-08-21T14:40:59+0200"), Some(at(1_755_780_059)));
        assert_eq!(parse_rfc3339("2025-08-21T12:40:59.25Z"), Some(at(1_755_780_059) + Duration::from_millis(250)));
        assert_eq!(
            parse_rfc3339("1970-01-01T00:00:00.123456789123Z"),
            Some(UNIX_EPOCH + Duration::from_nanos(123_456_789))
        );
        assert_eq!(parse_rfc3339("2024-02-29T00:00:00Z"), Some(at(1_709_164_800)));
        for bad in [
            "2023-02-29T00:00:00Z",
            "2025-13-01T00:00:00Z",
            "2025-08-21T24:00:00Z",
            "2025-08-21T12:40:59",
            "2025-08-21T12:40:59Zjunk",
            "2025-08-21T12:40:59.Z",
            "2025-08-21T12:40:59+25:00",
            "25-08-21T12:40:59Z",
            "",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad:?} should be rejected");
        }
        assert!(parse_rfc3339("1969-12-31T23:59:59Z").is_some());
    }

    #[test]
    fn http_dates_in_all_three_forms() {
        // RFC 9110 §5.6.7 example instant: Sun, 06 Nov 1994 08:49:37 GMT.
        let expected = at(784_111_777);
        for text in ["Sun, 06 Nov 1994 08:49:37 GMT", "Sunday, 06-Nov-94 08:49:37 GMT", "Sun Nov  6 08:49:37 1994"] {
            assert_eq!(parse_timestamp(text), Ok(expected), "{text}");
        }
    }

    #[test]
    fn reset_kinds() {
        let c = clock(1_700_000_000);
        assert_eq!(reset_after("30", ResetKind::Delta, &c), Ok(Duration::from_secs(30)));
        assert_eq!(reset_after("1.5", ResetKind::Delta, &c), Ok(Duration::from_millis(1500)));
        assert_eq!(reset_after("1700000060", ResetKind::Epoch, &c), Ok(Duration::from_secs(60)));
        assert_eq!(reset_after("1700000060500", ResetKind::Epoch, &c), Ok(Duration::from_millis(60_500)));
        assert_eq!(reset_after("6m0s", ResetKind::Duration, &c), Ok(Duration::from_secs(360)));
        assert_eq!(reset_after("12", ResetKind::Duration, &c), Ok(Duration::from_secs(12)));
        assert_eq!(reset_after("2023-11-14T22:14:20Z", ResetKind::Timestamp, &c), Ok(Duration::from_secs(60)));
        assert_eq!(reset_after("1700000005", ResetKind::Timestamp, &c), Ok(Duration::from_secs(5)));
        // The magnitude rule for unknown vendors.
        assert_eq!(reset_after("60", ResetKind::Auto, &c), Ok(Duration::from_secs(60)));
        assert_eq!(reset_after("1700000090", ResetKind::Auto, &c), Ok(Duration::from_secs(90)));
        assert_eq!(reset_after("1700000090000", ResetKind::Auto, &c), Ok(Duration::from_secs(90)));
        assert_eq!(reset_after("1m30s", ResetKind::Auto, &c), Ok(Duration::from_secs(90)));
        assert_eq!(reset_after("Tue, 14 Nov 2023 22:15:00 GMT", ResetKind::Auto, &c), Ok(Duration::from_secs(100)));
        assert_eq!(
            reset_after("soon", ResetKind::Auto, &c),
            Err(r#""soon" is not a number, duration or timestamp"#.into())
        );
    }

    #[test]
    fn past_resets_clamp_to_zero() {
        let c = clock(1_700_000_000);
        assert_eq!(reset_after("1600000000", ResetKind::Epoch, &c), Ok(Duration::ZERO));
        assert_eq!(reset_after("2001-01-01T00:00:00Z", ResetKind::Timestamp, &c), Ok(Duration::ZERO));
    }

    #[test]
    fn out_of_range_values_are_errors_not_panics() {
        let c = clock(0);
        assert!(reset_after("1e300", ResetKind::Epoch, &c).is_err());
        assert!(reset_after("1e300", ResetKind::Delta, &c).is_err());
        assert!(parse_go_duration("99999999999999999999999h").is_err());
        assert!(seconds(f64::NAN).is_err());
        assert!(seconds(-1.0).is_err());
        assert!(text_seconds("99999999999999999999999").is_err());
        // u64::MAX is read as epoch milliseconds: far away, but no overflow.
        assert!(reset_after("18446744073709551615", ResetKind::Epoch, &c).is_ok());
    }

    #[test]
    fn decimal_text_is_exact() {
        assert_eq!(text_seconds("1470173023.123"), Ok(Duration::new(1_470_173_023, 123_000_000)));
        assert_eq!(text_seconds(".5"), Ok(Duration::from_millis(500)));
        assert_eq!(text_seconds("2."), Ok(Duration::from_secs(2)));
        assert_eq!(text_seconds("1e3"), Ok(Duration::from_secs(1000)));
        assert_eq!(text_seconds("0.1234567891"), Ok(Duration::from_nanos(123_456_789)));
    }
}
