//! The one duration grammar every applet uses (`run`, `link` and `check` through the option
//! table, `probe` for `--interval` / `--timeout`), and its one-paragraph description for `--help`.
//!
//! Pure text → [`Duration`]; no clock, no I/O. Range rules beyond the grammar's own ceiling
//! (for example "must be greater than 0") belong to the flag that reads the value.

use std::time::Duration;

/// Longest duration any flag accepts.
pub const MAX_DURATION: Duration = Duration::from_secs(24 * 3600);

/// The grammar in words, for every applet's `--help` (two lines, no trailing newline).
pub const DURATION_HELP: &str = "\
Durations (D): a decimal number of seconds, or with a unit ms, s, m or h: 10, 0.5, .25, 250ms,
2s, 1.5m, 1h; at most 9 decimals and 24h; no sign, exponent or inner spaces.";

/// Duration syntax shared by every applet: a decimal number with an optional unit `ms`, `s`
/// (default), `m` or `h`: `10`, `0.5`, `.25`, `250ms`, `2s`, `1.5m`, `1h`. At most
/// [`MAX_DURATION`] and 9 decimals; exact (no float rounding); surrounding whitespace is
/// ignored. Rejected: a sign, an exponent, inner spaces, a trailing dot (`1.`), other units.
/// Errors: a message quoting the text, without the flag's name.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let bad = || format!("'{s}' is not a duration (examples: 10, 0.5, 250ms, 2s, 1m)");
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let unit_ns: u128 = match unit {
        "" | "s" => 1_000_000_000,
        "ms" => 1_000_000,
        "m" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        _ => return Err(bad()),
    };
    let (int, frac) = num.split_once('.').unwrap_or((num, ""));
    let dotted = num.contains('.');
    let bad_shape = (int.is_empty() && frac.is_empty()) || (dotted && frac.is_empty());
    if bad_shape || frac.contains('.') || frac.len() > 9 {
        return Err(bad());
    }
    let too_large = || format!("'{s}' is too large (at most 24h)");
    let int: u128 = if int.is_empty() {
        0
    } else {
        int.parse().map_err(|_| too_large())?
    };
    let frac_ns = if frac.is_empty() {
        0
    } else {
        // 9 digits at most: < 10^9, times < 3.6·10^12, fits u128 easily.
        let digits: u128 = frac.parse().map_err(|_| bad())?;
        digits * unit_ns / 10u128.pow(frac.len() as u32)
    };
    let total = int
        .checked_mul(unit_ns)
        .and_then(|n| n.checked_add(frac_ns))
        .ok_or_else(too_large)?;
    if total > MAX_DURATION.as_nanos() {
        return Err(too_large());
    }
    Ok(Duration::from_nanos(total as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `probe` once had a grammar of its own (no `h`, a trailing dot allowed, up to 10^9 s);
    /// every form both grammars accepted still parses to the same value.
    #[test]
    fn forms_probe_used_to_accept() {
        let ms = |n| Ok(Duration::from_millis(n));
        assert_eq!(parse_duration("3"), ms(3000));
        assert_eq!(parse_duration("0.5"), ms(500));
        assert_eq!(parse_duration(".25"), ms(250));
        assert_eq!(parse_duration("250ms"), ms(250));
        assert_eq!(parse_duration("2s"), ms(2000));
        assert_eq!(parse_duration("1.5m"), ms(90_000));
        assert_eq!(parse_duration("0.0015s"), Ok(Duration::from_micros(1500)));
        assert_eq!(parse_duration("5h"), ms(5 * 3_600_000));
        for bad in [
            "",
            "s",
            "-1",
            "1e3",
            "1.2.3",
            "abc",
            "1.0000000001",
            "9999999999999",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn durations() {
        let ms = |n| Ok(Duration::from_millis(n));
        assert_eq!(parse_duration("10"), ms(10_000));
        assert_eq!(parse_duration("0.5"), ms(500));
        assert_eq!(parse_duration("250ms"), ms(250));
        assert_eq!(parse_duration("2s"), ms(2_000));
        assert_eq!(parse_duration("1m"), ms(60_000));
        assert_eq!(parse_duration("1.5m"), ms(90_000));
        assert_eq!(parse_duration("24h"), ms(86_400_000));
        assert_eq!(parse_duration(".25"), ms(250));
        assert_eq!(parse_duration(" 3 "), ms(3_000));
        assert_eq!(parse_duration("0"), ms(0));
        assert_eq!(parse_duration("0.0015ms"), Ok(Duration::from_nanos(1_500)));
        for bad in "s -1 1. 1..2 1.2.3 1e3 5d 10sec . ms 1.0000000001 2_s".split(' ') {
            assert!(parse_duration(bad).is_err(), "{bad:?} accepted");
        }
        assert!(parse_duration("").is_err() && parse_duration("2 s").is_err());
        assert!(parse_duration("25h").unwrap_err().contains("too large"));
        assert!(parse_duration(&"9".repeat(40))
            .unwrap_err()
            .contains("too large"));
    }
}
