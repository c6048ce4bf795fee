//! `metav1.Time` values.

/// Now, as `2006-01-02T15:04:05Z` (UTC, seconds).
pub fn now_rfc3339() -> String {
    todo!()
}

/// Seconds since the Unix epoch of an RFC 3339 time, if it parses.
pub fn parse_rfc3339(s: &str) -> Option<i64> {
    let _ = s;
    todo!()
}

/// `kubectl get`'s age format (`5s`, `3m`, `2d`, ...).
pub fn human_age(seconds: i64) -> String {
    let _ = seconds;
    todo!()
}
