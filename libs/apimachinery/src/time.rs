//! `metav1.Time` values: RFC 3339 in UTC with second precision, and `kubectl get`'s ages.

use std::time::{SystemTime, UNIX_EPOCH};

/// Now, as `2006-01-02T15:04:05Z` (UTC, seconds).
pub fn now_rfc3339() -> String {
    format_rfc3339(now_unix())
}

/// Now, as a `metav1.MicroTime` (`2006-01-02T15:04:05.000000Z`), as Lease `renewTime` and
/// events.k8s.io `eventTime` carry it.
pub fn now_rfc3339_micros() -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let secs = i64::try_from(now.as_secs()).unwrap_or(i64::MAX);
    let base = format_rfc3339(secs);
    format!("{}.{:06}Z", base.trim_end_matches('Z'), now.subsec_micros())
}

/// Seconds since the Unix epoch, now.
pub fn now_unix() -> i64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(now.as_secs()).unwrap_or(i64::MAX)
}

/// Seconds since the Unix epoch as `2006-01-02T15:04:05Z`.
pub fn format_rfc3339(secs: i64) -> String {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    let (hour, min, sec) = (rem / 3600, rem / 60 % 60, rem % 60);
    format!("{year:04}-{month:02}-{day:02}T{hour:02}:{min:02}:{sec:02}Z")
}

/// Seconds since the Unix epoch of an RFC 3339 time, if it parses.
///
/// Accepts `YYYY-MM-DDTHH:MM:SS`, an optional fraction (dropped), and `Z` or `±HH:MM`.
pub fn parse_rfc3339(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    if b[13] != b':' || b[16] != b':' {
        return None;
    }
    let year = digits(&b[0..4])?;
    let month = digits(&b[5..7])?;
    let day = digits(&b[8..10])?;
    let (hour, min, sec) = (
        digits(&b[11..13])?,
        digits(&b[14..16])?,
        digits(&b[17..19])?,
    );
    let valid = (1..=12).contains(&month)
        && day >= 1
        && day <= days_in_month(year, month)
        && hour < 24
        && min < 60
        && sec <= 60;
    if !valid {
        return None;
    }
    let offset = parse_offset(skip_fraction(&b[19..])?)?;
    let days = days_from_civil(year, month, day);
    Some(days * 86_400 + hour * 3600 + min * 60 + sec - offset)
}

/// `kubectl get`'s age format (`5s`, `3m`, `2d`, ...), as k8s.io/apimachinery's
/// `duration.HumanDuration`: seconds under 2 minutes, `XmYs` under 10 minutes, minutes under
/// 3 hours, `XhYm` under 8 hours, hours under 48 hours, `XdYh` under 8 days, days under 2
/// years, `XyYd` under 8 years, then years. Slightly negative values (clock skew) give `0s`.
pub fn human_age(seconds: i64) -> String {
    if seconds < -1 {
        return "<invalid>".to_owned();
    }
    if seconds < 0 {
        return "0s".to_owned();
    }
    if seconds < 120 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        return with_remainder(minutes, "m", seconds % 60, "s");
    }
    if minutes < 180 {
        return format!("{minutes}m");
    }
    let hours = seconds / 3600;
    if hours < 8 {
        return with_remainder(hours, "h", minutes % 60, "m");
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        return with_remainder(hours / 24, "d", hours % 24, "h");
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        return with_remainder(hours / 24 / 365, "y", (hours / 24) % 365, "d");
    }
    format!("{}y", hours / 24 / 365)
}

/// The age of an object created at `timestamp` (RFC 3339) as of `now`, or `<unknown>` when the
/// timestamp is missing or malformed (kubectl's `translateTimestampSince`).
pub fn age_since(timestamp: Option<&str>, now: i64) -> String {
    match timestamp.and_then(parse_rfc3339) {
        Some(t) => human_age(now - t),
        None => "<unknown>".to_owned(),
    }
}

fn with_remainder(major: i64, major_unit: &str, minor: i64, minor_unit: &str) -> String {
    if minor == 0 {
        format!("{major}{major_unit}")
    } else {
        format!("{major}{major_unit}{minor}{minor_unit}")
    }
}

fn digits(b: &[u8]) -> Option<i64> {
    b.iter().try_fold(0i64, |acc, c| {
        c.is_ascii_digit().then(|| acc * 10 + i64::from(c - b'0'))
    })
}

fn skip_fraction(rest: &[u8]) -> Option<&[u8]> {
    match rest.first() {
        Some(b'.') => {
            let n = rest[1..].iter().take_while(|c| c.is_ascii_digit()).count();
            (n > 0).then(|| &rest[1 + n..])
        }
        _ => Some(rest),
    }
}

fn parse_offset(rest: &[u8]) -> Option<i64> {
    match rest {
        [b'Z' | b'z'] => Some(0),
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
            let (h, m) = (digits(&[*h1, *h2])?, digits(&[*m1, *m2])?);
            if h > 23 || m > 59 {
                return None;
            }
            let offset = h * 3600 + m * 60;
            Some(if *sign == b'-' { -offset } else { offset })
        }
        _ => None,
    }
}

fn is_leap(year: i64) -> bool {
    (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date of a day count since 1970-01-01.
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests;
