use super::*;

#[test]
fn formats_and_parses_known_instants() {
    assert_eq!(format_rfc3339(0), "1970-01-01T00:00:00Z");
    assert_eq!(format_rfc3339(951_782_400), "2000-02-29T00:00:00Z");
    assert_eq!(parse_rfc3339("2000-02-29T00:00:00Z"), Some(951_782_400));
    assert_eq!(parse_rfc3339("2026-05-01T10:00:00Z"), Some(1_777_629_600));
    assert_eq!(format_rfc3339(1_777_629_600), "2026-05-01T10:00:00Z");
    assert_eq!(format_rfc3339(-1), "1969-12-31T23:59:59Z");
}

#[test]
fn parse_accepts_fractions_and_offsets() {
    let base = parse_rfc3339("2026-05-01T10:00:00Z").unwrap();
    assert_eq!(parse_rfc3339("2026-05-01T10:00:00.123456Z"), Some(base));
    assert_eq!(parse_rfc3339("2026-05-01T12:00:00+02:00"), Some(base));
    assert_eq!(parse_rfc3339("2026-05-01T09:30:00-00:30"), Some(base));
}

#[test]
fn parse_rejects_malformed_times() {
    for bad in [
        "",
        "2026-05-01",
        "2026-13-01T00:00:00Z",
        "2026-02-30T00:00:00Z",
        "2026-05-01T24:00:00Z",
        "2026-05-01T10:00:00",
        "2026-05-01T10:00:00.Z",
        "2026-05-01T10:00:00+2:00",
        "2026-05-01T10:00:00Zjunk",
    ] {
        assert_eq!(parse_rfc3339(bad), None, "{bad}");
    }
}

#[test]
fn format_round_trips_through_parse() {
    for secs in [0, 59, 86_399, 1_000_000_000, 4_102_444_800, -86_400 * 400] {
        assert_eq!(parse_rfc3339(&format_rfc3339(secs)), Some(secs));
    }
}

#[test]
fn now_has_the_metav1_time_shape() {
    let now = now_rfc3339();
    assert_eq!(now.len(), 20);
    assert!(parse_rfc3339(&now).is_some());
    let micros = now_rfc3339_micros();
    assert_eq!(micros.len(), 27, "{micros}");
    assert!(parse_rfc3339(&micros).is_some());
}

#[test]
fn human_age_follows_human_duration() {
    let cases = [
        (-5, "<invalid>"),
        (-1, "0s"),
        (0, "0s"),
        (45, "45s"),
        (119, "119s"),
        (120, "2m"),
        (125, "2m5s"),
        (300, "5m"),
        (599, "9m59s"),
        (600, "10m"),
        (90 * 60, "90m"),
        (179 * 60, "179m"),
        (3 * 3600, "3h"),
        (3 * 3600 + 25 * 60, "3h25m"),
        (2 * 3600 + 59 * 60 + 59, "179m"),
        (8 * 3600, "8h"),
        (47 * 3600, "47h"),
        (48 * 3600, "2d"),
        (3 * 86_400 + 5 * 3600, "3d5h"),
        (8 * 86_400, "8d"),
        (400 * 86_400, "400d"),
        (730 * 86_400, "2y"),
        (800 * 86_400, "2y70d"),
        (9 * 365 * 86_400, "9y"),
    ];
    for (secs, want) in cases {
        assert_eq!(human_age(secs), want, "{secs}s");
    }
}

#[test]
fn age_since_reports_unknown_without_a_timestamp() {
    assert_eq!(age_since(None, 100), "<unknown>");
    assert_eq!(age_since(Some("nonsense"), 100), "<unknown>");
    assert_eq!(age_since(Some("1970-01-01T00:00:00Z"), 100), "100s");
}
