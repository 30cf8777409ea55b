//! The time formats spots-booster reads: Go's `Time.String()` (CA status, NTH queue messages),
//! RFC 3339 (Kubernetes, CA ≥ 1.30 YAML, NTH IMDS messages) and the IMDS scheduled-event format
//! (`21 Jan 2019 09:00:43 GMT`). The layouts are taken apart here; the calendar is jiff's, and the
//! core's `Timestamp` stays plain milliseconds.

use thiserror::Error;

use crate::core::Timestamp;

/// A timestamp that none of the accepted layouts matched.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[error("invalid {layout} time {text:?}")]
pub struct ParseTimeError {
    /// Which layout was expected.
    pub(crate) layout: &'static str,
    /// The text that did not match it.
    pub text: String,
}

/// Parses Go's `Time.String()` layout `2006-01-02 15:04:05.999999999 -0700 MST`, ignoring a trailing
/// monotonic-clock reading (`m=+86410.276113590`). Go's zero time (year 1) yields `None`.
pub fn parse_go_time(text: &str) -> Result<Option<Timestamp>, ParseTimeError> {
    let err = || ParseTimeError { layout: "Go", text: text.to_string() };
    let mut parts = text.split_whitespace();
    let (date, clock, offset) = (parts.next(), parts.next(), parts.next());
    let (Some(date), Some(clock), Some(offset)) = (date, clock, offset) else {
        return Err(err());
    };
    // What follows is the zone abbreviation and maybe `m=±…`; both carry nothing the offset lacks.
    for rest in parts {
        let is_zone = rest.chars().all(|c| c.is_ascii_alphanumeric() || c == '+' || c == '-');
        if !(is_zone || rest.starts_with("m=")) {
            return Err(err());
        }
    }
    let (year, month, day) = parse_date(date).ok_or_else(err)?;
    if year == 1 && month == 1 && day == 1 && clock.starts_with("00:00:00") {
        return Ok(None);
    }
    let millis_of_day = parse_clock(clock).ok_or_else(err)?;
    let offset_minutes = parse_numeric_offset(offset).ok_or_else(err)?;
    assemble(year, month, day, millis_of_day, offset_minutes).map(Some).ok_or_else(err)
}

/// Parses RFC 3339 (`2024-09-03T14:05:12.431095283Z`, `2024-05-14T09:12:29+02:00`).
pub fn parse_rfc3339(text: &str) -> Result<Timestamp, ParseTimeError> {
    let err = || ParseTimeError { layout: "RFC 3339", text: text.to_string() };
    let t = text.trim();
    let (date, rest) = t.split_once(['T', 't', ' ']).ok_or_else(err)?;
    let (year, month, day) = parse_date(date).ok_or_else(err)?;
    let (clock, offset_minutes) = if let Some(clock) = rest.strip_suffix(['Z', 'z']) {
        (clock, 0)
    } else {
        let split = rest.rfind(['+', '-']).ok_or_else(err)?;
        let (clock, offset) = rest.split_at(split);
        (clock, parse_colon_offset(offset).ok_or_else(err)?)
    };
    let millis_of_day = parse_clock(clock).ok_or_else(err)?;
    assemble(year, month, day, millis_of_day, offset_minutes).ok_or_else(err)
}

/// Parses the IMDS scheduled-event layout `21 Jan 2019 09:00:43 GMT` (always UTC).
pub fn parse_imds_time(text: &str) -> Result<Timestamp, ParseTimeError> {
    let err = || ParseTimeError { layout: "IMDS", text: text.to_string() };
    let parts: Vec<&str> = text.split_whitespace().collect();
    let [day, month, year, clock, zone] = parts.as_slice() else {
        return Err(err());
    };
    if !matches!(*zone, "GMT" | "UTC") {
        return Err(err());
    }
    const MONTHS: [&str; 12] = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
    let month = MONTHS.iter().position(|m| m == month).ok_or_else(err)? as u32 + 1;
    let day: u32 = day.parse().map_err(|_| err())?;
    let year: i64 = year.parse().map_err(|_| err())?;
    if !(1..=31).contains(&day) || !YEARS.contains(&year) {
        return Err(err());
    }
    let millis_of_day = parse_clock(clock).ok_or_else(err)?;
    assemble(year, month, day, millis_of_day, 0).ok_or_else(err)
}

/// Formats a timestamp as RFC 3339 in UTC with millisecond precision when it has any. Times beyond
/// what the calendar holds (±9999 years; nothing parsed here is) print as milliseconds since 1970.
pub(crate) fn format_rfc3339(ts: Timestamp) -> String {
    let millis = ts.as_millis();
    let epoch = jiff::civil::DateTime::constant(1970, 1, 1, 0, 0, 0, 0);
    let Ok(t) = epoch.checked_add(jiff::SignedDuration::from_millis(millis)) else {
        return format!("{millis}ms since 1970-01-01T00:00:00Z");
    };
    let layout = if millis.rem_euclid(1000) == 0 { "%Y-%m-%dT%H:%M:%SZ" } else { "%Y-%m-%dT%H:%M:%S%.3fZ" };
    t.strftime(layout).to_string()
}

/// Years Kubernetes and Go can write (Go's RFC 3339 marshalling refuses any other): bounding them
/// keeps every later step of the arithmetic far from overflow.
const YEARS: std::ops::RangeInclusive<i64> = 0..=9999;

fn parse_date(date: &str) -> Option<(i64, u32, u32)> {
    let mut it = date.split('-');
    let year: i64 = it.next()?.parse().ok().filter(|y| YEARS.contains(y))?;
    let month: u32 = it.next()?.parse().ok()?;
    let day: u32 = it.next()?.parse().ok()?;
    if it.next().is_some() || !(1..=12).contains(&month) || !(1..=31).contains(&day) {
        return None;
    }
    Some((year, month, day))
}

/// `HH:MM:SS[.fraction]` → milliseconds since midnight (fraction truncated to milliseconds).
fn parse_clock(clock: &str) -> Option<i64> {
    let (hms, fraction) = match clock.split_once('.') {
        Some((hms, f)) => (hms, Some(f)),
        None => (clock, None),
    };
    let mut it = hms.split(':');
    let h: i64 = it.next()?.parse().ok()?;
    let m: i64 = it.next()?.parse().ok()?;
    let s: i64 = it.next()?.parse().ok()?;
    if it.next().is_some() || h > 23 || m > 59 || s > 60 {
        return None;
    }
    let mut ms = 0;
    if let Some(f) = fraction {
        if f.is_empty() || !f.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let digits: String = f.chars().chain("000".chars()).take(3).collect();
        ms = digits.parse().ok()?;
    }
    Some(((h * 60 + m) * 60 + s) * 1000 + ms)
}

/// `+0000` / `-0700` → minutes east of UTC.
fn parse_numeric_offset(offset: &str) -> Option<i64> {
    let (sign, digits) = offset.split_at_checked(1)?;
    let sign = match sign {
        "+" => 1,
        "-" => -1,
        _ => return None,
    };
    if digits.len() != 4 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let hours: i64 = digits[..2].parse().ok()?;
    let minutes: i64 = digits[2..].parse().ok()?;
    Some(sign * (hours * 60 + minutes))
}

/// `+02:00` → minutes east of UTC.
fn parse_colon_offset(offset: &str) -> Option<i64> {
    let compact: String = offset.chars().filter(|c| *c != ':').collect();
    parse_numeric_offset(&compact)
}

/// The instant of a calendar date, a time of day and an offset, or `None` for a date the calendar
/// does not have (30 February).
fn assemble(year: i64, month: u32, day: u32, millis_of_day: i64, offset_minutes: i64) -> Option<Timestamp> {
    let date =
        jiff::civil::Date::new(i16::try_from(year).ok()?, i8::try_from(month).ok()?, i8::try_from(day).ok()?).ok()?;
    // Days rather than jiff's `Timestamp`, whose range stops a day short of 9999-12-31.
    let days = date.duration_since(jiff::civil::date(1970, 1, 1)).as_secs() / 86_400;
    Some(Timestamp::from_millis(days * 86_400_000 + millis_of_day - offset_minutes * 60_000))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(text: &str) -> i64 {
        parse_rfc3339(text).unwrap().as_millis()
    }

    #[test]
    fn go_time_with_monotonic_suffix_and_nanoseconds() {
        let t = parse_go_time("2024-03-11 08:41:17.704412359 +0000 UTC m=+86410.276113590").unwrap().unwrap();
        assert_eq!(t.as_millis(), ms("2024-03-11T08:41:17.704Z"));
        let queue = parse_go_time("2024-05-14 09:12:29 +0000 UTC").unwrap().unwrap();
        assert_eq!(queue.as_millis(), ms("2024-05-14T09:12:29Z"));
    }

    #[test]
    fn go_time_honours_offsets_and_zero_time() {
        let t = parse_go_time("2024-05-14 11:12:29 +0200 CEST").unwrap().unwrap();
        assert_eq!(t.as_millis(), ms("2024-05-14T09:12:29Z"));
        assert_eq!(parse_go_time("0001-01-01 00:00:00 +0000 UTC"), Ok(None));
        assert!(parse_go_time("2024-05-14T09:12:29Z").is_err());
        assert!(parse_go_time("yesterday at noon UTC").is_err());
    }

    #[test]
    fn rfc3339_variants() {
        assert_eq!(ms("1970-01-01T00:00:00Z"), 0);
        assert_eq!(ms("2024-05-14T11:12:29+02:00"), ms("2024-05-14T09:12:29Z"));
        assert_eq!(ms("2024-09-03T14:05:12.431095283Z") % 1000, 431);
        assert!(parse_rfc3339("2024-13-01T00:00:00Z").is_err());
        assert!(parse_rfc3339("not a time").is_err());
    }

    #[test]
    fn imds_scheduled_event_time() {
        assert_eq!(parse_imds_time("21 Jan 2019 09:00:43 GMT").unwrap().as_millis(), ms("2019-01-21T09:00:43Z"));
        assert!(parse_imds_time("21 Foo 2019 09:00:43 GMT").is_err());
    }

    #[test]
    fn formatting_is_the_inverse_of_parsing() {
        for text in ["2024-03-11T08:41:17.704Z", "2000-02-29T00:00:00Z", "2026-11-21T23:59:59Z", "1969-12-31T23:59:59Z"]
        {
            assert_eq!(format_rfc3339(parse_rfc3339(text).unwrap()), text);
        }
    }

    #[test]
    fn dates_the_calendar_does_not_have_are_refused() {
        assert!(parse_rfc3339("2023-02-29T00:00:00Z").is_err());
        assert!(parse_rfc3339("2024-02-29T00:00:00Z").is_ok());
        assert!(parse_go_time("2024-04-31 00:00:00 +0000 UTC").is_err());
        assert!(parse_imds_time("30 Feb 2019 09:00:43 GMT").is_err());
    }

    #[test]
    fn years_beyond_what_kubernetes_writes_are_refused_not_overflowed() {
        for text in ["300000000-01-01T00:00:00Z", "-9223372036854775808-01-01T00:00:00Z", "10000-01-01T00:00:00Z"] {
            assert!(parse_rfc3339(text).is_err(), "{text}");
        }
        assert!(parse_go_time("300000000-01-01 00:00:00 +0000 UTC").is_err());
        assert!(parse_imds_time("1 Jan 300000000 00:00:00 GMT").is_err());
        let last = parse_rfc3339("9999-12-31T23:59:59.999Z").unwrap();
        assert_eq!(format_rfc3339(last), "9999-12-31T23:59:59.999Z");
        assert_eq!(
            format_rfc3339(Timestamp::from_millis(i64::MAX)),
            format!("{}ms since 1970-01-01T00:00:00Z", i64::MAX)
        );
    }
}
