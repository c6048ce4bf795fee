//! Serde for `Duration` config fields: `"30s"`, `"500ms"`, `"2m"`, `"1h"`, or a bare number of
//! seconds (KubeEdge's configs use bare seconds).

use std::time::Duration;

use serde::{Deserialize, Deserializer, Serializer};

/// Serde for a `Duration` field: `#[serde(with = "daemon::duration")]`. A type rather than a
/// module so that the same attribute also names the field's schema (schemars reads `with` as a
/// type): a string such as `30s`.
#[allow(non_camel_case_types)]
pub struct duration;

impl duration {
    /// Parses `"250ms"`, `"30s"`, `"5m"`, `"1h"` or `"12"` (seconds).
    pub fn parse(s: &str) -> Result<Duration, String> {
        let s = s.trim();
        let split = s
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(s.len());
        let (num, unit) = s.split_at(split);
        let value: f64 = num.parse().map_err(|_| {
            format!("invalid duration {s:?}: expected a number with unit ms, s, m or h")
        })?;
        let secs = match unit.trim() {
            "ms" => value / 1000.0,
            "" | "s" => value,
            "m" => value * 60.0,
            "h" => value * 3600.0,
            other => {
                return Err(format!(
                    "invalid duration {s:?}: unknown unit {other:?} (use ms, s, m or h)"
                ));
            }
        };
        Duration::try_from_secs_f64(secs).map_err(|e| format!("invalid duration {s:?}: {e}"))
    }

    /// Formats as the shortest exact form among ms, s, m and h.
    pub fn format(d: Duration) -> String {
        let ms = d.as_millis();
        match ms {
            ms if ms % 3_600_000 == 0 && ms > 0 => format!("{}h", ms / 3_600_000),
            ms if ms % 60_000 == 0 && ms > 0 => format!("{}m", ms / 60_000),
            ms if ms % 1000 == 0 => format!("{}s", ms / 1000),
            ms => format!("{ms}ms"),
        }
    }

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&Self::format(*d))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Secs(u64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Secs(n) => Ok(Duration::from_secs(n)),
            Raw::Text(t) => Self::parse(&t).map_err(serde::de::Error::custom),
        }
    }
}

impl schemars::JsonSchema for duration {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Duration".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "description": "A duration: a number with unit ms, s, m or h (`30s`), or bare seconds",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Duration, String> {
        duration::parse(s)
    }

    fn format(d: Duration) -> String {
        duration::format(d)
    }

    #[test]
    fn units_parse_and_format_back() {
        for (text, d) in [
            ("250ms", Duration::from_millis(250)),
            ("30s", Duration::from_secs(30)),
            ("12", Duration::from_secs(12)),
            ("2m", Duration::from_secs(120)),
            ("1h", Duration::from_secs(3600)),
            ("1.5s", Duration::from_millis(1500)),
        ] {
            assert_eq!(parse(text).unwrap(), d, "{text}");
            assert_eq!(parse(&format(d)).unwrap(), d);
        }
        assert!(parse("5 parsecs").unwrap_err().contains("unknown unit"));
        assert!(parse("fast").is_err());
    }
}
