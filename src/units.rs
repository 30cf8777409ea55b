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
pub const MAX_DURATION: Duration = Duration::from_secs(365 * 86_400);

/// Parses a CPU quantity into millicores, rounding fractions of a millicore up (as Kubernetes does).
pub fn parse_cpu_millis(text: &str) -> Result<u64, ParseUnitError> {
    let err = || ParseUnitError::Cpu(text.to_string());
    let t = text.trim();
    if let Some(m) = t.strip_suffix('m') {
        return m.parse::<u64>().map_err(|_| err());
    }
    // The API server canonicalises large quantities with a suffix (`10000000000000000` → `10P`).
    let (number, suffix) = split_decimal_suffix(t).ok_or_else(err)?;
    if suffix.is_some_and(|s| s.ends_with('i')) {
        // Binary suffixes are for bytes; a CPU request written that way is a mistake to report.
        return Err(err());
    }
    let multiplier = suffix.map_or(Some(1.0), multiplier).ok_or_else(err)?;
    let value: f64 = number.parse().map_err(|_| err())?;
    if !value.is_finite() || value < 0.0 {
        return Err(err());
    }
    // Float-to-int casts saturate: an absurd request becomes u64::MAX millicores, never a panic.
    Ok((value * multiplier * 1000.0).ceil() as u64)
}

/// What a quantity suffix multiplies by: binary `Ki`…`Ei`, decimal `k`…`E`, milli `m`.
fn multiplier(suffix: &str) -> Option<f64> {
    Some(match suffix {
        "Ki" => 1024f64,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        // Milli-bytes exist in the quantity grammar (kubectl shows them after rounding errors).
        "m" => 1e-3,
        _ => return None,
    })
}

/// Parses a memory quantity (binary `Ki`…`Ei`, decimal `k`…`E`, exponent `e`, or plain bytes) into bytes.
pub fn parse_memory_bytes(text: &str) -> Result<u64, ParseUnitError> {
    let err = || ParseUnitError::Memory(text.to_string());
    let t = text.trim();
    let (number, suffix) = split_decimal_suffix(t).ok_or_else(err)?;
    let multiplier = suffix.map_or(Some(1.0), multiplier).ok_or_else(err)?;
    let value: f64 = number.parse().map_err(|_| err())?;
    if !value.is_finite() || value < 0.0 {
        return Err(err());
    }
    Ok((value * multiplier).ceil() as u64)
}

/// Splits `"16Gi"` into `("16", Some("Gi"))`; `"1e3"` stays a plain number.
fn split_decimal_suffix(t: &str) -> Option<(&str, Option<&str>)> {
    if t.is_empty() {
        return None;
    }
    let end = t
        .char_indices()
        .find(|(i, c)| !(c.is_ascii_digit() || *c == '.' || ((*c == 'e' || *c == 'E') && is_exponent(t, *i))))
        .map(|(i, _)| i)
        .unwrap_or(t.len());
    if end == 0 {
        return None;
    }
    let (number, suffix) = t.split_at(end);
    Some((number, (!suffix.is_empty()).then_some(suffix)))
}

fn is_exponent(t: &str, i: usize) -> bool {
    i > 0 && t[i + 1..].chars().next().is_some_and(|c| c.is_ascii_digit() || c == '-' || c == '+')
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
pub fn format_duration(d: Duration) -> String {
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
        assert!(parse_cpu_millis("2Gi").is_err());
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
