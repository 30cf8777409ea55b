//! Human units at the edges: Kubernetes resource quantities (`500m`, `16Gi`) and durations
//! (`90s`, `1h30m`), parsed into the core's integer units.

use std::time::Duration;

use thiserror::Error;

/// A quantity or duration string that could not be understood.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum ParseUnitError {
    /// The CPU quantity is not a Kubernetes quantity.
    #[error("invalid CPU quantity {0:?}: expected cores like \"2\", \"0.5\" or millicores like \"500m\"")]
    Cpu(String),
    /// The memory quantity is not a Kubernetes quantity.
    #[error("invalid memory quantity {0:?}: expected bytes with an optional suffix like \"512Mi\", \"16Gi\", \"1G\"")]
    Memory(String),
    /// The duration is not a sequence of number+unit pairs.
    #[error("invalid duration {0:?}: expected number+unit pairs like \"90s\", \"5m\", \"1h30m\", \"250ms\"")]
    Duration(String),
    /// The duration is longer than any setting of the booster can mean.
    #[error("duration {0:?} is longer than the longest accepted, 365d")]
    DurationTooLong(String),
}

/// The longest duration accepted anywhere (flags, environment, scenarios).
pub(crate) const MAX_DURATION: Duration = Duration::from_secs(365 * 86_400);

/// Parses a CPU quantity into millicores, rounding fractions of a millicore up (as Kubernetes does).
/// Every form the API accepts is read exactly: `500m`, `0.5`, `100u`, `1e3`, `2k`, `10P`.
pub fn parse_cpu_millis(text: &str) -> Result<u64, ParseUnitError> {
    parse_quantity(text, 3).ok_or_else(|| ParseUnitError::Cpu(text.to_string()))
}

/// Parses a memory quantity (binary `Ki`…`Ei`, decimal `n`…`E`, exponent `e`, or plain bytes)
/// into bytes, rounding fractions up.
pub fn parse_memory_bytes(text: &str) -> Result<u64, ParseUnitError> {
    parse_quantity(text, 0).ok_or_else(|| ParseUnitError::Memory(text.to_string()))
}

/// A Kubernetes quantity (`<number><suffix>`, the API's grammar) times `10^scale`, rounded up,
/// in exact integer arithmetic: no float ever rounds `1.1` cores to 1,101 millicores. Values past
/// `u64::MAX` saturate; negative ones are refused (no request is negative).
fn parse_quantity(text: &str, scale: u32) -> Option<u64> {
    let t = text.trim();
    let t = t.strip_prefix('+').unwrap_or(t);
    let digits_end = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (number, suffix) = t.split_at(digits_end);
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && fraction.is_empty() || fraction.contains('.') {
        return None;
    }
    // value = mantissa × 10^exp10 × 2^exp2
    let mut exp10 = i64::from(scale) - i64::try_from(fraction.len()).ok()?;
    let mut exp2 = 0u32;
    match suffix {
        "" => {}
        "Ki" | "Mi" | "Gi" | "Ti" | "Pi" | "Ei" => {
            exp2 = 10 * (1 + "KMGTPE".find(suffix.chars().next()?)? as u32);
        }
        "n" => exp10 -= 9,
        "u" => exp10 -= 6,
        "m" => exp10 -= 3,
        "k" => exp10 += 3,
        "M" => exp10 += 6,
        "G" => exp10 += 9,
        "T" => exp10 += 12,
        "P" => exp10 += 15,
        "E" => exp10 += 18,
        _ => {
            let exponent = suffix.strip_prefix(['e', 'E'])?;
            let digits = exponent.strip_prefix(['+', '-']).unwrap_or(exponent);
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            // Far beyond any u64 either way: clamp so the arithmetic below stays bounded.
            exp10 +=
                exponent.parse::<i64>().unwrap_or(if exponent.starts_with('-') { -100 } else { 100 }).clamp(-100, 100);
        }
    }
    let mut mantissa: u128 = 0;
    for b in whole.bytes().chain(fraction.bytes()) {
        // Past 37 digits only the magnitude still matters: later digits are dropped into the
        // exponent (by less than one part in 10^36).
        if mantissa > u128::MAX / 100 {
            exp10 += 1;
            continue;
        }
        mantissa = mantissa * 10 + u128::from(b - b'0');
    }
    let mut value = mantissa.checked_shl(exp2).filter(|v| v >> exp2 == mantissa).unwrap_or(u128::MAX);
    if exp10 >= 0 {
        for _ in 0..exp10 {
            value = value.saturating_mul(10);
        }
    } else {
        for _ in 0..(-exp10) {
            // Ceiling division keeps any fraction of the unit as one whole unit.
            value = value.div_ceil(10);
        }
    }
    Some(u64::try_from(value).unwrap_or(u64::MAX))
}

/// Parses a Go-style duration (`90s`, `5m`, `1h30m`, `250ms`, `1.5h`). A bare `0` is zero.
pub fn parse_duration(text: &str) -> Result<Duration, ParseUnitError> {
    let err = || ParseUnitError::Duration(text.to_string());
    let t = text.trim();
    if t == "0" {
        return Ok(Duration::ZERO);
    }
    let mut rest = t;
    let mut total = 0f64;
    if rest.is_empty() {
        return Err(err());
    }
    while !rest.is_empty() {
        let num_len = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).ok_or_else(err)?;
        if num_len == 0 {
            return Err(err());
        }
        let value: f64 = rest[..num_len].parse().map_err(|_| err())?;
        rest = &rest[num_len..];
        let unit_len = rest.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(rest.len());
        let seconds = match &rest[..unit_len] {
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            "d" => 86400.0,
            _ => return Err(err()),
        };
        total += value * seconds;
        rest = &rest[unit_len..];
    }
    // Checked before `from_secs_f64`, which panics past u64 seconds.
    if !total.is_finite() || total > MAX_DURATION.as_secs_f64() {
        return Err(ParseUnitError::DurationTooLong(text.to_string()));
    }
    Ok(Duration::from_secs_f64(total))
}

/// Formats a duration compactly for reports: `90s` → `1m30s`, `0.25s` → `250ms`.
pub(crate) fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let secs = d.as_secs();
    let (h, m, s) = (secs / 3600, (secs % 3600) / 60, secs % 60);
    let mut out = String::new();
    if h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if m > 0 {
        out.push_str(&format!("{m}m"));
    }
    if s > 0 || out.is_empty() {
        out.push_str(&format!("{s}s"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_quantities() {
        assert_eq!(parse_cpu_millis("500m"), Ok(500));
        assert_eq!(parse_cpu_millis("2"), Ok(2000));
        assert_eq!(parse_cpu_millis("0.5"), Ok(500));
        assert_eq!(parse_cpu_millis("0.0001"), Ok(1));
        assert_eq!(parse_cpu_millis("1Ki"), Ok(1_024_000), "the API accepts binary suffixes on CPU too");
        assert!(parse_cpu_millis("").is_err());
        assert!(parse_cpu_millis("abc").is_err());
    }

    #[test]
    fn memory_quantities() {
        assert_eq!(parse_memory_bytes("16Gi"), Ok(16 << 30));
        assert_eq!(parse_memory_bytes("512Mi"), Ok(512 << 20));
        assert_eq!(parse_memory_bytes("1G"), Ok(1_000_000_000));
        assert_eq!(parse_memory_bytes("1e3"), Ok(1000));
        assert_eq!(parse_memory_bytes("128974848"), Ok(128_974_848));
        assert_eq!(parse_memory_bytes("1.5Gi"), Ok(1536 << 20));
        assert!(parse_memory_bytes("16GB").is_err());
        assert!(parse_memory_bytes("Gi").is_err());
    }

    #[test]
    fn every_form_the_api_accepts_is_read_exactly() {
        // Floats would make 1.1 cores 1,101 millicores and drop `100u` altogether.
        for (text, millis) in [
            ("100u", 1),
            ("1500u", 2),
            ("250000n", 1),
            ("1e3", 1_000_000),
            ("1E3", 1_000_000),
            ("1e-3", 1),
            ("0.1", 100),
            ("1.1", 1_100),
            ("2.675", 2_675),
            ("+2", 2_000),
            (".5", 500),
            ("5.", 5_000),
        ] {
            assert_eq!(parse_cpu_millis(text), Ok(millis), "{text}");
        }
        for (text, bytes) in [("1.5Gi", 1_610_612_736), ("0.1Ki", 103), ("1e3", 1_000), ("1.2e2", 120), ("3m", 1)] {
            assert_eq!(parse_memory_bytes(text), Ok(bytes), "{text}");
        }
        assert_eq!(parse_memory_bytes("8Ei"), Ok(1 << 63));
        assert_eq!(parse_memory_bytes("16Ei"), Ok(u64::MAX), "saturates, never wraps");
        assert_eq!(parse_memory_bytes(&"9".repeat(60)), Ok(u64::MAX));
        assert_eq!(parse_cpu_millis("1e-200"), Ok(1), "any positive amount is at least one unit");
        for bad in ["-1", "1..2", ".", "1e", "1e+", "1ee3", "1Ki2", "1 Gi", "1.5.5"] {
            assert!(parse_memory_bytes(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("1.5m"), Ok(Duration::from_secs(90)));
        for bad in ["", "10", "5x", "m5", "-5s"] {
            assert!(parse_duration(bad).is_err(), "{bad:?} must be rejected");
        }
    }

    #[test]
    fn formatting_round_trips() {
        assert_eq!(format_duration(Duration::from_secs(90)), "1m30s");
        assert_eq!(format_duration(Duration::from_secs(3600)), "1h");
        assert_eq!(format_duration(Duration::from_millis(250)), "250ms");
    }

    #[test]
    fn durations_past_a_year_are_refused_not_overflowed() {
        for text in ["99999999999999999999999h", "1e400s", "366d"] {
            assert!(parse_duration(text).is_err(), "{text}");
        }
        assert!(matches!(parse_duration("99999999999999999999999h"), Err(ParseUnitError::DurationTooLong(_))));
        assert_eq!(parse_duration("365d").unwrap(), MAX_DURATION);
    }

    #[test]
    fn cpu_as_the_api_server_canonicalises_it() {
        assert_eq!(parse_cpu_millis("10P").unwrap(), 10_000_000_000_000_000_000);
        assert_eq!(parse_cpu_millis("2k").unwrap(), 2_000_000);
        assert_eq!(parse_cpu_millis("10E").unwrap(), u64::MAX, "saturates, never panics");
        assert_eq!(parse_cpu_millis("100m").unwrap(), 100);
        assert!(parse_cpu_millis("3X").is_err());
    }
}
