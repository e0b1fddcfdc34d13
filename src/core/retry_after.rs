//! Server-requested waits before retrying a request.
//!
//! When an LLM provider answers 429 or 503 it usually says how long to back
//! off, but every vendor says it differently: `retry-after-ms`, the standard
//! `retry-after` (seconds or an HTTP-date), or per-bucket reset hints such as
//! OpenAI's `x-ratelimit-reset-tokens: 6m0s` and Anthropic's
//! `anthropic-ratelimit-requests-reset: 2026-11-29T18:30:00Z`. This module
//! turns whichever of those is present into one [`Duration`], so the retry
//! policy can honour the server instead of guessing.
//!
//! Absolute times (an HTTP-date `retry-after`, a timestamp reset hint) are
//! written against the server's clock, so they are read against the
//! response's own `Date` header when it has one (see [`server_clock`]).
//!
//! Header values come from the network and are untrusted: every parser here
//! returns `None` for garbage or negative values, clamps absurdly large ones to
//! [`MAX_SERVER_DELAY`], and never panics.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::HeaderMap;

/// Upper bound on any delay this module returns.
///
/// Servers occasionally send absurd values (twenty-digit second counts, dates
/// in the year 9999). Clamping keeps the result representable and lets callers
/// treat it as "a very long wait" instead of tripping over arithmetic overflow.
pub const MAX_SERVER_DELAY: Duration = Duration::from_secs(365 * 24 * 60 * 60);

const NANOS_PER_MICRO: u128 = 1_000;
const NANOS_PER_MILLI: u128 = 1_000_000;
const NANOS_PER_SEC: u128 = 1_000_000_000;
const NANOS_PER_MIN: u128 = 60 * NANOS_PER_SEC;
const NANOS_PER_HOUR: u128 = 60 * NANOS_PER_MIN;

/// A bare number in a reset hint above this many seconds (about 31 years) is
/// read as a Unix timestamp: no server asks for a relative wait that long,
/// while every current timestamp is larger.
const UNIX_TIMESTAMP_THRESHOLD_NANOS: u128 = 1_000_000_000 * NANOS_PER_SEC;

/// Reset-hint headers, each paired with the header that says whether its
/// bucket is exhausted.
const RESET_HINTS: [(&str, &str); 7] = [
    ("x-ratelimit-reset-requests", "x-ratelimit-remaining-requests"),
    ("x-ratelimit-reset-tokens", "x-ratelimit-remaining-tokens"),
    ("x-ratelimit-reset", "x-ratelimit-remaining"),
    ("anthropic-ratelimit-requests-reset", "anthropic-ratelimit-requests-remaining"),
    ("anthropic-ratelimit-tokens-reset", "anthropic-ratelimit-tokens-remaining"),
    ("anthropic-ratelimit-input-tokens-reset", "anthropic-ratelimit-input-tokens-remaining"),
    ("anthropic-ratelimit-output-tokens-reset", "anthropic-ratelimit-output-tokens-remaining"),
];

/// Where a server-requested delay came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DelaySource {
    /// The non-standard `retry-after-ms` header (milliseconds, may be fractional).
    RetryAfterMs,
    /// `retry-after` holding a number of seconds.
    RetryAfterSeconds,
    /// `retry-after` holding an HTTP-date.
    RetryAfterDate,
    /// A vendor rate-limit reset header.
    ResetHint {
        /// Lower-case name of the header the delay was read from.
        header: String,
    },
}

/// A delay the server asked for, with enough provenance to log and debug it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerDelay {
    /// How long to wait from `now`, at most [`MAX_SERVER_DELAY`].
    pub delay: Duration,
    /// Which header the delay came from.
    pub source: DelaySource,
    /// The header value exactly as received.
    pub raw: String,
}

impl DelaySource {
    /// The header a delay from this source is read from.
    pub fn header(&self) -> String {
        match self {
            DelaySource::RetryAfterMs => "retry-after-ms".to_owned(),
            DelaySource::RetryAfterSeconds | DelaySource::RetryAfterDate => "retry-after".to_owned(),
            DelaySource::ResetHint { header } => header.clone(),
        }
    }
}

/// Reads the delay a response asks the client to wait before retrying.
///
/// Precedence is `retry-after-ms`, then `retry-after`, then reset hints. A
/// header whose value cannot be parsed is skipped rather than ending the
/// search, so a malformed `retry-after-ms` still lets a valid `retry-after`
/// through.
///
/// Among reset hints, only buckets reported exhausted (`…-remaining: 0`) are
/// considered when any is, and the longest of those wins: the request is
/// blocked until every exhausted bucket refills, whereas the reset of a bucket
/// with capacity left is merely when it will be *full* again, and waiting for
/// it would waste time. When no bucket is known to be exhausted the longest
/// hint wins, since that is the only wait certain to clear whichever bucket
/// caused the refusal.
///
/// `now` is the wall clock (injected so tests are deterministic); absolute
/// times are read against [`server_clock`], which falls back to it.
pub fn server_delay(headers: &HeaderMap, now: SystemTime) -> Option<ServerDelay> {
    let now = server_clock(headers, now);
    if let Some(raw) = header_str(headers, "retry-after-ms")
        && let Some(delay) = parse_retry_after_ms(raw)
    {
        return Some(ServerDelay { delay, source: DelaySource::RetryAfterMs, raw: raw.to_owned() });
    }
    if let Some(raw) = header_str(headers, "retry-after")
        && let Some((delay, source)) = parse_retry_after(raw, now)
    {
        return Some(ServerDelay { delay, source, raw: raw.to_owned() });
    }
    longest_reset_hint(headers, now)
}

/// The server's clock when it made the response: its `Date` header if that
/// is a valid HTTP-date, else `now`.
///
/// An absolute time in a response is "the server's now plus the wait", so
/// reading it against our clock adds the clocks' skew to the wait: a server
/// five minutes ahead that asks for its now + 30 s would cost us 5 min 30 s,
/// and one five minutes behind would get no wait at all. Against `Date` the
/// skew cancels out. `Date` carries whole seconds, rounded down, so a wait
/// read against it is at most a second longer than the server meant, never
/// shorter.
pub fn server_clock(headers: &HeaderMap, now: SystemTime) -> SystemTime {
    header_str(headers, "date").and_then(|value| httpdate::parse_http_date(value.trim()).ok()).unwrap_or(now)
}

/// Parses a `retry-after-ms` value: non-negative milliseconds, fractions allowed.
pub fn parse_retry_after_ms(value: &str) -> Option<Duration> {
    parse_plain_number(value, NANOS_PER_MILLI).map(clamp_nanos)
}

/// Parses a `retry-after` value: non-negative seconds (integer or decimal) or
/// an HTTP-date. A date in the past yields [`Duration::ZERO`].
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<(Duration, DelaySource)> {
    if let Some(nanos) = parse_plain_number(value, NANOS_PER_SEC) {
        return Some((clamp_nanos(nanos), DelaySource::RetryAfterSeconds));
    }
    let date = httpdate::parse_http_date(value.trim()).ok()?;
    Some((delay_until(epoch_nanos(date), now), DelaySource::RetryAfterDate))
}

/// Parses a rate-limit reset hint.
///
/// Accepts a Go-style duration (`6m0s`, `1.5s`, `250ms`), a plain number of
/// seconds (or a Unix timestamp in seconds when above 1 000 000 000), or an
/// RFC 3339 timestamp. Timestamps in the past yield [`Duration::ZERO`].
pub fn parse_reset_hint(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if let Some(nanos) = parse_plain_number(value, NANOS_PER_SEC) {
        if nanos > UNIX_TIMESTAMP_THRESHOLD_NANOS {
            return Some(delay_until(i128::try_from(nanos).unwrap_or(i128::MAX), now));
        }
        return Some(clamp_nanos(nanos));
    }
    parse_go_duration(value).or_else(|| parse_rfc3339(value).map(|at| delay_until(at, now)))
}

/// Parses a Go `time.Duration` string such as `6m0s`, `1h2m3.5s`, `0.5s`,
/// `20ms` or `0`. Negative durations yield `None`.
pub fn parse_go_duration(value: &str) -> Option<Duration> {
    let mut rest = value.trim().as_bytes();
    if let Some(unsigned) = rest.strip_prefix(b"+") {
        rest = unsigned;
    }
    // Go prints a zero duration as a bare "0", the only unitless form it accepts.
    if rest == b"0" {
        return Some(Duration::ZERO);
    }
    if rest.is_empty() {
        return None;
    }
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let (number, after_number) = split_decimal(rest)?;
        let (unit, after_unit) = split_go_unit(after_number)?;
        total = total.saturating_add(number.to_nanos(unit));
        rest = after_unit;
    }
    Some(clamp_nanos(total))
}

/// Returns the header's value when it is visible ASCII; anything else cannot be
/// a number or date we understand, so it is treated as absent.
fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|value| value.to_str().ok())
}

fn longest_reset_hint(headers: &HeaderMap, now: SystemTime) -> Option<ServerDelay> {
    let hints: Vec<(bool, ServerDelay)> = RESET_HINTS
        .iter()
        .filter_map(|&(reset, remaining)| {
            let raw = header_str(headers, reset)?;
            let delay = parse_reset_hint(raw, now)?;
            let exhausted =
                header_str(headers, remaining).and_then(|count| count.trim().parse::<u64>().ok()) == Some(0);
            Some((
                exhausted,
                ServerDelay { delay, source: DelaySource::ResetHint { header: reset.to_owned() }, raw: raw.to_owned() },
            ))
        })
        .collect();
    let any_exhausted = hints.iter().any(|(exhausted, _)| *exhausted);
    hints
        .into_iter()
        .filter(|(exhausted, _)| *exhausted || !any_exhausted)
        .map(|(_, hint)| hint)
        .max_by_key(|hint| hint.delay)
}

/// A non-negative decimal literal split at its point; both parts are ASCII digits.
struct Decimal<'a> {
    whole: &'a [u8],
    frac: &'a [u8],
}

impl Decimal<'_> {
    /// The value in nanoseconds when one unit is `unit_nanos`. Saturates rather
    /// than overflowing so that absurd inputs become "very long" and are then
    /// clamped, instead of being rejected or wrapping.
    fn to_nanos(&self, unit_nanos: u128) -> u128 {
        let whole =
            self.whole.iter().fold(0u128, |acc, digit| acc.saturating_mul(10).saturating_add(u128::from(digit - b'0')));
        // Eighteen fractional digits resolve far below a nanosecond even for
        // hours, and keep numerator * unit_nanos well inside u128.
        let (numerator, denominator) = self
            .frac
            .iter()
            .take(18)
            .fold((0u128, 1u128), |(num, den), digit| (num * 10 + u128::from(digit - b'0'), den * 10));
        whole.saturating_mul(unit_nanos).saturating_add(numerator * unit_nanos / denominator)
    }
}

/// Splits a leading decimal number (`12`, `1.5`, `.5`, `5.`) off `bytes`,
/// returning it and the unparsed remainder.
fn split_decimal(bytes: &[u8]) -> Option<(Decimal<'_>, &[u8])> {
    let (whole, rest) = split_digits(bytes);
    let (frac, rest) = match rest.strip_prefix(b".") {
        Some(after_point) => split_digits(after_point),
        None => (&rest[..0], rest),
    };
    if whole.is_empty() && frac.is_empty() {
        return None;
    }
    Some((Decimal { whole, frac }, rest))
}

fn split_digits(bytes: &[u8]) -> (&[u8], &[u8]) {
    bytes.split_at(bytes.iter().take_while(|b| b.is_ascii_digit()).count())
}

/// Parses a value that must be nothing but a non-negative decimal number.
fn parse_plain_number(value: &str, unit_nanos: u128) -> Option<u128> {
    let (number, rest) = split_decimal(value.trim().as_bytes())?;
    rest.is_empty().then(|| number.to_nanos(unit_nanos))
}

fn split_go_unit(bytes: &[u8]) -> Option<(u128, &[u8])> {
    // "ms" must be tried before "m", or "20ms" would read as minutes followed
    // by a stray "s".
    const UNITS: [(&[u8], u128); 8] = [
        (b"ns", 1),
        (b"us", NANOS_PER_MICRO),
        ("\u{b5}s".as_bytes(), NANOS_PER_MICRO),
        ("\u{3bc}s".as_bytes(), NANOS_PER_MICRO),
        (b"ms", NANOS_PER_MILLI),
        (b"s", NANOS_PER_SEC),
        (b"m", NANOS_PER_MIN),
        (b"h", NANOS_PER_HOUR),
    ];
    UNITS.iter().find_map(|&(name, nanos)| bytes.strip_prefix(name).map(|rest| (nanos, rest)))
}

/// Parses an RFC 3339 timestamp into nanoseconds since the Unix epoch.
fn parse_rfc3339(value: &str) -> Option<i128> {
    let b = value.as_bytes();
    let number = |from: usize, to: usize| -> Option<u32> {
        b.get(from..to)?.iter().try_fold(0u32, |acc, &c| c.is_ascii_digit().then(|| acc * 10 + u32::from(c - b'0')))
    };
    let is_one_of = |at: usize, allowed: &[u8]| b.get(at).is_some_and(|c| allowed.contains(c));
    // RFC 3339 lets the date/time separator be a space or lower-case "t".
    if !(is_one_of(4, b"-")
        && is_one_of(7, b"-")
        && is_one_of(10, b"Tt ")
        && is_one_of(13, b":")
        && is_one_of(16, b":"))
    {
        return None;
    }
    let year = number(0, 4)?;
    let month = number(5, 7)?;
    let day = number(8, 10)?;
    let hour = number(11, 13)?;
    let minute = number(14, 16)?;
    // 60 is a leap second; it simply rolls into the next minute.
    let second = number(17, 19)?;
    if !(1..=12).contains(&month)
        || day == 0
        || day > days_in_month(year, month)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }

    let mut rest = b.get(19..)?;
    let mut frac_nanos: u128 = 0;
    if let Some(after_point) = rest.strip_prefix(b".") {
        let (frac, after_frac) = split_digits(after_point);
        if frac.is_empty() {
            return None;
        }
        frac_nanos = Decimal { whole: &[], frac }.to_nanos(NANOS_PER_SEC);
        rest = after_frac;
    }
    let offset_secs: i64 = match rest {
        b"Z" | b"z" => 0,
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
            let digit = |c: u8| c.is_ascii_digit().then(|| i64::from(c - b'0'));
            let hours = digit(*h1)? * 10 + digit(*h2)?;
            let minutes = digit(*m1)? * 10 + digit(*m2)?;
            if hours > 23 || minutes > 59 {
                return None;
            }
            let offset = hours * 3600 + minutes * 60;
            if *sign == b'-' { -offset } else { offset }
        }
        _ => return None,
    };

    let secs = days_from_civil(i64::from(year), month, day) * 86_400
        + i64::from(hour) * 3600
        + i64::from(minute) * 60
        + i64::from(second)
        - offset_secs;
    Some(i128::from(secs) * NANOS_PER_SEC as i128 + frac_nanos as i128)
}

fn days_in_month(year: u32, month: u32) -> u32 {
    match month {
        2 if year.is_multiple_of(4) && (!year.is_multiple_of(100) || year.is_multiple_of(400)) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
/// `days_from_civil`), which avoids pulling in a date library for one formula.
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    // Counting years from March puts the leap day last, so month lengths
    // follow a fixed pattern.
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year.rem_euclid(400);
    let shifted_month = i64::from((month + 9) % 12);
    let day_of_year = (153 * shifted_month + 2) / 5 + i64::from(day) - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// Nanoseconds since the Unix epoch, negative for earlier instants.
fn epoch_nanos(at: SystemTime) -> i128 {
    match at.duration_since(UNIX_EPOCH) {
        Ok(after) => i128::try_from(after.as_nanos()).unwrap_or(i128::MAX),
        Err(before) => i128::try_from(before.duration().as_nanos()).map_or(i128::MIN, |n| -n),
    }
}

/// Time from `now` until an instant given as nanoseconds since the epoch;
/// zero when that instant has passed.
fn delay_until(target_epoch_nanos: i128, now: SystemTime) -> Duration {
    let remaining = target_epoch_nanos.saturating_sub(epoch_nanos(now));
    u128::try_from(remaining).map_or(Duration::ZERO, clamp_nanos)
}

fn clamp_nanos(nanos: u128) -> Duration {
    let capped = nanos.min(MAX_SERVER_DELAY.as_nanos());
    u64::try_from(capped).map_or(MAX_SERVER_DELAY, Duration::from_nanos)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;
    use proptest::prelude::*;

    /// 2026-11-29T18:13:20Z, 1000 s before the timestamps used below.
    const NOW_SECS: u64 = 1_795_976_000;

    fn now() -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(NOW_SECS)
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for &(name, value) in pairs {
            map.insert(name, HeaderValue::from_str(value).expect("test value"));
        }
        map
    }

    #[test]
    fn retry_after_ms_forms() {
        assert_eq!(parse_retry_after_ms("1500"), Some(Duration::from_millis(1500)));
        assert_eq!(parse_retry_after_ms("1500.5"), Some(Duration::from_micros(1_500_500)));
        assert_eq!(parse_retry_after_ms(" 20 "), Some(Duration::from_millis(20)));
        assert_eq!(parse_retry_after_ms("0"), Some(Duration::ZERO));
        for bad in ["", "-1", "abc", "1e3", "NaN", "inf", "1.2.3", "1 2", "."] {
            assert_eq!(parse_retry_after_ms(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn retry_after_seconds_and_dates() {
        assert_eq!(parse_retry_after("120", now()), Some((Duration::from_secs(120), DelaySource::RetryAfterSeconds)));
        assert_eq!(
            parse_retry_after("1.25", now()),
            Some((Duration::from_millis(1250), DelaySource::RetryAfterSeconds))
        );
        assert_eq!(
            parse_retry_after("Sun, 29 Nov 2026 18:30:00 GMT", now()),
            Some((Duration::from_secs(1000), DelaySource::RetryAfterDate))
        );
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", now()),
            Some((Duration::ZERO, DelaySource::RetryAfterDate))
        );
        for bad in ["", "-5", "-0.5", "soon", "NaN", "Infinity", "+-1"] {
            assert_eq!(parse_retry_after(bad, now()), None, "{bad:?}");
        }
    }

    #[test]
    fn huge_values_clamp_instead_of_overflowing() {
        let huge = "99999999999999999999";
        assert_eq!(parse_retry_after_ms(huge), Some(MAX_SERVER_DELAY));
        assert_eq!(parse_retry_after(huge, now()), Some((MAX_SERVER_DELAY, DelaySource::RetryAfterSeconds)));
        assert_eq!(parse_reset_hint(huge, now()), Some(MAX_SERVER_DELAY));
        assert_eq!(parse_go_duration("99999999999999999999999999999999999999999h"), Some(MAX_SERVER_DELAY));
        assert_eq!(parse_reset_hint("9999-12-31T23:59:59Z", now()), Some(MAX_SERVER_DELAY));
        let long_digits = "9".repeat(10_000);
        assert_eq!(parse_retry_after_ms(&long_digits), Some(MAX_SERVER_DELAY));
        assert_eq!(parse_retry_after_ms(&format!("1.{long_digits}")), Some(Duration::from_nanos(1_999_999)));
    }

    #[test]
    fn go_durations() {
        let cases = [
            ("6m0s", Duration::from_secs(360)),
            ("1s", Duration::from_secs(1)),
            ("20ms", Duration::from_millis(20)),
            ("1h2m3.5s", Duration::from_millis(3_723_500)),
            ("0.5s", Duration::from_millis(500)),
            ("1.5s", Duration::from_millis(1500)),
            ("250ms", Duration::from_millis(250)),
            ("0", Duration::ZERO),
            ("+5s", Duration::from_secs(5)),
            (".5s", Duration::from_millis(500)),
            ("3us", Duration::from_micros(3)),
            ("3\u{b5}s", Duration::from_micros(3)),
            ("3\u{3bc}s", Duration::from_micros(3)),
            ("7ns", Duration::from_nanos(7)),
            ("1m1ms", Duration::from_millis(60_001)),
        ];
        for (text, expected) in cases {
            assert_eq!(parse_go_duration(text), Some(expected), "{text:?}");
        }
        for bad in ["", "-1s", "5", "1x", "s", "1s2", "1.s.", "1 s", "++1s", "-0"] {
            assert_eq!(parse_go_duration(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn reset_hint_forms() {
        let hint = |v| parse_reset_hint(v, now());
        assert_eq!(hint("6m0s"), Some(Duration::from_secs(360)));
        assert_eq!(hint("30"), Some(Duration::from_secs(30)));
        assert_eq!(hint("0.5"), Some(Duration::from_millis(500)));
        assert_eq!(hint("1795977000"), Some(Duration::from_secs(1000)));
        assert_eq!(hint("1795977000.5"), Some(Duration::from_millis(1_000_500)));
        assert_eq!(hint("1700000000"), Some(Duration::ZERO));
        // Exactly the threshold is still a relative wait (and clamps).
        assert_eq!(hint("1000000000"), Some(MAX_SERVER_DELAY));
        assert_eq!(hint("2026-11-29T18:30:00Z"), Some(Duration::from_secs(1000)));
        assert_eq!(hint("2026-11-29T20:30:00+02:00"), Some(Duration::from_secs(1000)));
        assert_eq!(hint("2026-11-29T18:00:00-00:30"), Some(Duration::from_secs(1000)));
        assert_eq!(hint("2026-11-29t18:30:00.250z"), Some(Duration::from_millis(1_000_250)));
        assert_eq!(hint("2026-11-29 18:30:00.123456789123Z"), Some(Duration::from_nanos(1_000_123_456_789)));
        assert_eq!(hint("2020-01-01T00:00:00Z"), Some(Duration::ZERO));
        for bad in [
            "",
            "-1",
            "-1s",
            "soon",
            "2026-13-01T00:00:00Z",
            "2026-02-29T00:00:00Z",
            "2026-11-29T24:00:00Z",
            "2026-11-29T18:30:00",
            "2026-11-29T18:30:00.Z",
            "2026-11-29T18:30:00+2:00",
            "2026-11-29T18:30:00+24:00",
            "2026-11-29",
            "NaN",
        ] {
            assert_eq!(hint(bad), None, "{bad:?}");
        }
        let leap_eve = UNIX_EPOCH + Duration::from_secs(1_709_164_740);
        assert_eq!(parse_reset_hint("2024-02-29T00:00:00Z", leap_eve), Some(Duration::from_secs(60)));
    }

    #[test]
    fn days_from_civil_matches_known_dates() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        assert_eq!(days_from_civil(1969, 12, 31), -1);
        assert_eq!(days_from_civil(2026, 11, 29) * 86_400 + 66_600, 1_795_977_000);
        assert_eq!(days_from_civil(0, 3, 1), -719_468);
    }

    #[test]
    fn precedence_and_provenance() {
        let all = headers(&[("retry-after-ms", "250"), ("retry-after", "7"), ("x-ratelimit-reset-requests", "9s")]);
        assert_eq!(
            server_delay(&all, now()),
            Some(ServerDelay {
                delay: Duration::from_millis(250),
                source: DelaySource::RetryAfterMs,
                raw: "250".into(),
            })
        );
        let bad_ms = headers(&[("retry-after-ms", "soon"), ("retry-after", "7")]);
        assert_eq!(server_delay(&bad_ms, now()).map(|d| d.source), Some(DelaySource::RetryAfterSeconds));
        let date = headers(&[("Retry-After", "Sun, 29 Nov 2026 18:30:00 GMT")]);
        let got = server_delay(&date, now()).expect("date");
        assert_eq!(got.delay, Duration::from_secs(1000));
        assert_eq!(got.raw, "Sun, 29 Nov 2026 18:30:00 GMT");
        assert_eq!(server_delay(&HeaderMap::new(), now()), None);
        assert_eq!(server_delay(&headers(&[("retry-after", "-3")]), now()), None);
    }

    /// `now()` moved by `secs`, either way.
    fn shifted(secs: i64) -> SystemTime {
        let by = Duration::from_secs(secs.unsigned_abs());
        if secs < 0 { now() - by } else { now() + by }
    }

    fn http_date(secs_from_now: i64) -> String {
        httpdate::fmt_http_date(shifted(secs_from_now))
    }

    #[test]
    fn absolute_times_are_read_against_the_servers_date() {
        let delay = |pairs: &[(&'static str, &str)]| server_delay(&headers(pairs), now()).map(|d| d.delay);
        let secs = Duration::from_secs;
        // Five minutes ahead and five minutes behind: the server asks for 30 s
        // (or 45 s) from its own now either way.
        for skew in [300, -300] {
            let date = http_date(skew);
            assert_eq!(delay(&[("date", &date), ("retry-after", &http_date(skew + 30))]), Some(secs(30)), "{skew}");
            let reset_at = (NOW_SECS as i64 + skew + 45).to_string();
            let hint = [("date", date.as_str()), ("x-ratelimit-reset", &reset_at)];
            assert_eq!(delay(&hint), Some(secs(45)), "{skew}");
            // Relative waits need no clock.
            assert_eq!(delay(&[("date", &date), ("retry-after", "30")]), Some(secs(30)), "{skew}");
        }
        // No usable `Date`: the wall clock, skew and all.
        let ahead = http_date(330);
        assert_eq!(delay(&[("retry-after", &ahead)]), Some(secs(330)));
        for bad in ["", "yesterday", "Sun, 32 Nov 2026 18:13:20 GMT", "1795976300"] {
            assert_eq!(delay(&[("date", bad), ("retry-after", &ahead)]), Some(secs(330)), "{bad:?}");
        }
        let mut non_ascii = headers(&[("retry-after", &ahead)]);
        non_ascii.insert("date", HeaderValue::from_bytes(b"Sun, 29 Nov 2026 18:1\xff:20 GMT").expect("obs-text"));
        assert_eq!(server_delay(&non_ascii, now()).map(|d| d.delay), Some(secs(330)));
    }

    #[test]
    fn longest_hint_wins_when_none_exhausted() {
        let map = headers(&[
            ("x-ratelimit-reset-requests", "1s"),
            ("x-ratelimit-reset-tokens", "6m0s"),
            ("anthropic-ratelimit-requests-reset", "garbage"),
        ]);
        assert_eq!(
            server_delay(&map, now()),
            Some(ServerDelay {
                delay: Duration::from_secs(360),
                source: DelaySource::ResetHint { header: "x-ratelimit-reset-tokens".into() },
                raw: "6m0s".into(),
            })
        );
    }

    #[test]
    fn exhausted_buckets_outrank_longer_hints() {
        let map = headers(&[
            ("x-ratelimit-remaining-requests", "0"),
            ("x-ratelimit-reset-requests", "2s"),
            ("x-ratelimit-remaining-tokens", "5000"),
            ("x-ratelimit-reset-tokens", "6m0s"),
            ("anthropic-ratelimit-input-tokens-remaining", "0"),
            ("anthropic-ratelimit-input-tokens-reset", "2026-11-29T18:13:25Z"),
        ]);
        let got = server_delay(&map, now()).expect("hint");
        assert_eq!(got.delay, Duration::from_secs(5));
        assert_eq!(got.source, DelaySource::ResetHint { header: "anthropic-ratelimit-input-tokens-reset".into() });
    }

    #[test]
    fn non_ascii_header_values_are_ignored() {
        let mut map = HeaderMap::new();
        map.insert("retry-after-ms", HeaderValue::from_bytes(b"15\xff").expect("obs-text is a legal header byte"));
        map.insert("retry-after", HeaderValue::from_static("3"));
        assert_eq!(server_delay(&map, now()).map(|d| d.source), Some(DelaySource::RetryAfterSeconds));
    }

    const ALL_HEADERS: [&str; 16] = [
        "retry-after-ms",
        "retry-after",
        "x-ratelimit-reset-requests",
        "x-ratelimit-remaining-requests",
        "x-ratelimit-reset-tokens",
        "x-ratelimit-remaining-tokens",
        "x-ratelimit-reset",
        "x-ratelimit-remaining",
        "anthropic-ratelimit-requests-reset",
        "anthropic-ratelimit-requests-remaining",
        "anthropic-ratelimit-tokens-reset",
        "anthropic-ratelimit-tokens-remaining",
        "anthropic-ratelimit-input-tokens-reset",
        "anthropic-ratelimit-input-tokens-remaining",
        "anthropic-ratelimit-output-tokens-reset",
        "anthropic-ratelimit-output-tokens-remaining",
    ];

    fn check_all_headers(value: HeaderValue, now: SystemTime) {
        let mut map = HeaderMap::new();
        for name in ALL_HEADERS {
            map.insert(name, value.clone());
        }
        if let Some(found) = server_delay(&map, now) {
            assert!(found.delay <= MAX_SERVER_DELAY);
        }
    }

    fn any_now() -> impl Strategy<Value = SystemTime> {
        prop_oneof![
            Just(now()),
            Just(UNIX_EPOCH),
            (0u64..=253_402_300_799, 0u32..1_000_000_000).prop_map(|(s, n)| UNIX_EPOCH + Duration::new(s, n)),
        ]
    }

    proptest! {
        #[test]
        fn integer_seconds_round_trip(secs in any::<u64>()) {
            let expected = Duration::from_secs(secs).min(MAX_SERVER_DELAY);
            prop_assert_eq!(
                parse_retry_after(&secs.to_string(), now()),
                Some((expected, DelaySource::RetryAfterSeconds))
            );
        }

        #[test]
        fn small_integer_seconds_are_exact(secs in 0..=MAX_SERVER_DELAY.as_secs()) {
            prop_assert_eq!(
                parse_retry_after(&secs.to_string(), now()).map(|(d, _)| d),
                Some(Duration::from_secs(secs))
            );
        }

        #[test]
        fn millis_round_trip(ms in 0u64..=31_536_000_000, micros in 0u64..1000) {
            prop_assert_eq!(
                parse_retry_after_ms(&ms.to_string()),
                Some(Duration::from_millis(ms))
            );
            let expected = (Duration::from_millis(ms) + Duration::from_micros(micros))
                .min(MAX_SERVER_DELAY);
            prop_assert_eq!(
                parse_retry_after_ms(&format!("{ms}.{micros:03}")),
                Some(expected)
            );
        }

        #[test]
        fn http_date_round_trips(
            base in 0u64..=200_000_000_000,
            sub in 0u32..1_000_000_000,
            secs in 0..=MAX_SERVER_DELAY.as_secs(),
        ) {
            let whole_now = UNIX_EPOCH + Duration::from_secs(base);
            let date = httpdate::fmt_http_date(whole_now + Duration::from_secs(secs));
            prop_assert_eq!(
                parse_retry_after(&date, whole_now),
                Some((Duration::from_secs(secs), DelaySource::RetryAfterDate))
            );
            // Dates carry whole seconds, so a fractional `now` loses under a second.
            let (got, _) = parse_retry_after(&date, whole_now + Duration::new(0, sub))
                .expect("valid date");
            prop_assert!(got <= Duration::from_secs(secs));
            prop_assert!(Duration::from_secs(secs) - got < Duration::from_secs(1));
        }

        /// Whatever the skew between the clocks, a date read against the
        /// response's `Date` is the wait the server meant; without `Date`
        /// the skew lands in the wait.
        #[test]
        fn clock_skew_cancels_out_against_date(skew in -100_000_000i64..=100_000_000, wait in 0i64..=1_000_000) {
            let retry_at = http_date(skew + wait);
            let with_date = headers(&[("date", &http_date(skew)), ("retry-after", &retry_at)]);
            prop_assert_eq!(
                server_delay(&with_date, now()).map(|d| d.delay),
                Some(Duration::from_secs(wait.unsigned_abs()))
            );
            let without = headers(&[("retry-after", &retry_at)]);
            prop_assert_eq!(
                server_delay(&without, now()).map(|d| d.delay),
                Some(Duration::from_secs((skew + wait).max(0).unsigned_abs()).min(MAX_SERVER_DELAY))
            );
        }

        #[test]
        fn past_dates_give_zero(base in 1_000_000_000u64..=200_000_000_000, ago in 1u64..1_000_000_000) {
            let now = UNIX_EPOCH + Duration::from_secs(base);
            let date = httpdate::fmt_http_date(now - Duration::from_secs(ago));
            prop_assert_eq!(
                parse_retry_after(&date, now),
                Some((Duration::ZERO, DelaySource::RetryAfterDate))
            );
        }

        #[test]
        fn arbitrary_strings_never_panic(value in ".*", now in any_now()) {
            for parsed in [
                parse_retry_after_ms(&value),
                parse_retry_after(&value, now).map(|(d, _)| d),
                parse_reset_hint(&value, now),
                parse_go_duration(&value),
            ]
            .into_iter()
            .flatten()
            {
                prop_assert!(parsed <= MAX_SERVER_DELAY);
            }
            if let Ok(header) = HeaderValue::from_str(&value) {
                check_all_headers(header, now);
            }
        }

        #[test]
        fn numeric_looking_strings_never_panic(value in "[-+0-9.eEinfINFaAsmhuµTZtz:]{0,40}", now in any_now()) {
            let _ = (
                parse_retry_after_ms(&value),
                parse_retry_after(&value, now),
                parse_reset_hint(&value, now),
                parse_go_duration(&value),
            );
        }

        #[test]
        fn timestamp_shaped_strings_never_panic(
            value in "[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:[0-9]{2}(\\.[0-9]{0,30})?([Zz]|[+-][0-9]{2}:[0-9]{2})?",
            now in any_now(),
        ) {
            if let Some(d) = parse_reset_hint(&value, now) {
                prop_assert!(d <= MAX_SERVER_DELAY);
            }
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64), now in any_now()) {
            if let Ok(header) = HeaderValue::from_bytes(&bytes) {
                check_all_headers(header, now);
            }
        }

        #[test]
        fn negative_numbers_give_none(int in any::<u64>(), float in 0.0f64..1e30) {
            for text in [format!("-{int}"), format!("-{float}"), format!("-{int}s"), format!("-{float}ms")] {
                prop_assert_eq!(parse_retry_after_ms(&text), None);
                prop_assert_eq!(parse_retry_after(&text, now()), None);
                prop_assert_eq!(parse_reset_hint(&text, now()), None);
                prop_assert_eq!(parse_go_duration(&text), None);
            }
        }

        #[test]
        fn precedence_holds(
            ms in proptest::option::of(0u64..1_000_000),
            secs in proptest::option::of(0u64..1_000_000),
            hint in proptest::option::of(0u64..1_000_000),
        ) {
            let mut map = HeaderMap::new();
            if let Some(ms) = ms {
                map.insert("retry-after-ms", HeaderValue::from(ms));
            }
            if let Some(secs) = secs {
                map.insert("retry-after", HeaderValue::from(secs));
            }
            if let Some(hint) = hint {
                map.insert("x-ratelimit-reset-tokens", HeaderValue::from_str(&format!("{hint}s")).expect("ascii"));
            }
            let expected = match (ms, secs, hint) {
                (Some(ms), _, _) => Some((Duration::from_millis(ms), DelaySource::RetryAfterMs)),
                (None, Some(s), _) => Some((Duration::from_secs(s), DelaySource::RetryAfterSeconds)),
                (None, None, Some(h)) => Some((
                    Duration::from_secs(h),
                    DelaySource::ResetHint { header: "x-ratelimit-reset-tokens".into() },
                )),
                (None, None, None) => None,
            };
            prop_assert_eq!(server_delay(&map, now()).map(|d| (d.delay, d.source)), expected);
        }

        #[test]
        fn go_durations_round_trip(
            h in proptest::option::of(0u64..20_000),
            m in proptest::option::of(0u64..60),
            s in proptest::option::of(0u64..60),
            frac in proptest::option::of(0u64..1000),
            ms in proptest::option::of(0u64..1000),
        ) {
            prop_assume!(h.is_some() || m.is_some() || s.is_some() || ms.is_some());
            let mut text = String::new();
            let mut expected = Duration::ZERO;
            if let Some(h) = h {
                text += &format!("{h}h");
                expected += Duration::from_secs(h * 3600);
            }
            if let Some(m) = m {
                text += &format!("{m}m");
                expected += Duration::from_secs(m * 60);
            }
            if let Some(s) = s {
                match frac {
                    Some(frac) => text += &format!("{s}.{frac:03}s"),
                    None => text += &format!("{s}s"),
                }
                expected += Duration::from_secs(s) + Duration::from_millis(frac.unwrap_or(0));
            }
            if let Some(ms) = ms {
                text += &format!("{ms}ms");
                expected += Duration::from_millis(ms);
            }
            prop_assert_eq!(parse_go_duration(&text), Some(expected.min(MAX_SERVER_DELAY)));
            prop_assert_eq!(parse_reset_hint(&text, now()), Some(expected.min(MAX_SERVER_DELAY)));
        }
    }
}
