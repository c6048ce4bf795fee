//! The `format`s kube-apiserver checks on custom resources. Formats it does not know, and
//! the ones it only documents (`password`), accept any value.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use base64::Engine;
use serde_json::Value;

/// Whether string `s` has format `format`.
pub(crate) fn string_ok(format: &str, s: &str) -> bool {
    match format {
        "date-time" | "datetime" => date_time(s),
        "date" => date(s),
        "uuid" | "uuid3" | "uuid4" | "uuid5" => uuid(format, s),
        "ipv4" => s.parse::<Ipv4Addr>().is_ok(),
        "ipv6" => s.parse::<Ipv6Addr>().is_ok(),
        "cidr" => cidr(s),
        "mac" => mac(s),
        "hostname" => hostname(s),
        "byte" => base64::engine::general_purpose::STANDARD.decode(s).is_ok(),
        "email" => email(s),
        "hexcolor" => {
            s.len() == 7 && s.starts_with('#') && s[1..].bytes().all(|b| b.is_ascii_hexdigit())
        }
        "duration" => duration(s),
        "uri" => s
            .split_once(':')
            .is_some_and(|(scheme, _)| scheme_ok(scheme)),
        _ => true,
    }
}

/// Whether number `value` has format `format` (`int32`, `int64`).
pub(crate) fn number_ok(format: &str, value: &Value) -> bool {
    match format {
        "int32" => value.as_i64().is_none_or(|n| i32::try_from(n).is_ok()),
        "int64" => !value.is_u64() || value.is_i64(),
        _ => true,
    }
}

/// RFC 3339 (`2006-01-02T15:04:05Z`, fractions and offsets allowed).
fn date_time(s: &str) -> bool {
    let Some((day, time)) = s.split_once(['T', 't', ' ']) else {
        return false;
    };
    if !date(day) {
        return false;
    }
    let (clock, zone) = match time.find(['Z', 'z', '+', '-']) {
        Some(i) => time.split_at(i),
        None => return false,
    };
    let clock = clock.split('.').next().unwrap_or("");
    let hms: Vec<&str> = clock.split(':').collect();
    let in_range = |p: &str, max: u32| p.len() == 2 && p.parse::<u32>().is_ok_and(|n| n <= max);
    let clock_ok =
        hms.len() == 3 && in_range(hms[0], 23) && in_range(hms[1], 59) && in_range(hms[2], 60);
    let zone_ok = matches!(zone, "Z" | "z")
        || zone[1..]
            .split_once(':')
            .is_some_and(|(h, m)| in_range(h, 23) && in_range(m, 59));
    clock_ok && zone_ok
}

/// `2006-01-02`.
fn date(s: &str) -> bool {
    let parts: Vec<&str> = s.split('-').collect();
    let [y, m, d] = parts.as_slice() else {
        return false;
    };
    let num = |p: &str, len: usize| {
        (p.len() == len && p.bytes().all(|b| b.is_ascii_digit())).then(|| p.parse::<u32>().ok())
    };
    matches!(
        (num(y, 4), num(m, 2), num(d, 2)),
        (Some(Some(_)), Some(Some(1..=12)), Some(Some(1..=31)))
    )
}

fn uuid(format: &str, s: &str) -> bool {
    let Ok(id) = uuid_parts(s) else {
        return false;
    };
    match format
        .strip_prefix("uuid")
        .and_then(|v| v.parse::<u8>().ok())
    {
        Some(version) => id == version,
        None => true,
    }
}

/// The version digit of a `8-4-4-4-12` hex UUID.
fn uuid_parts(s: &str) -> Result<u8, ()> {
    let groups: Vec<&str> = s.split('-').collect();
    let lens = [8, 4, 4, 4, 12];
    if groups.len() != 5
        || groups
            .iter()
            .zip(lens)
            .any(|(g, l)| g.len() != l || !g.bytes().all(|b| b.is_ascii_hexdigit()))
    {
        return Err(());
    }
    groups[2][..1].parse::<u8>().map_err(|_| ())
}

fn cidr(s: &str) -> bool {
    let Some((ip, bits)) = s.split_once('/') else {
        return false;
    };
    let max = match ip.parse::<IpAddr>() {
        Ok(IpAddr::V4(_)) => 32,
        Ok(IpAddr::V6(_)) => 128,
        Err(_) => return false,
    };
    bits.parse::<u8>().is_ok_and(|b| b <= max)
}

fn mac(s: &str) -> bool {
    let groups: Vec<&str> = s.split([':', '-']).collect();
    matches!(groups.len(), 6 | 8 | 20)
        && groups
            .iter()
            .all(|g| g.len() == 2 && g.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// An RFC 1123 host name.
fn hostname(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

fn email(s: &str) -> bool {
    s.rsplit_once('@')
        .is_some_and(|(local, domain)| !local.is_empty() && hostname(domain))
}

/// A Go duration (`1h30m`, `300ms`, `-1.5s`) or `0`.
fn duration(s: &str) -> bool {
    let s = s.strip_prefix(['-', '+']).unwrap_or(s);
    if s == "0" {
        return true;
    }
    let mut rest = s;
    let mut any = false;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if digits == 0 {
            return false;
        }
        rest = &rest[digits..];
        let unit = ["ns", "us", "µs", "ms", "s", "m", "h"]
            .into_iter()
            .find(|u| rest.starts_with(u));
        let Some(unit) = unit else {
            return false;
        };
        rest = &rest[unit.len()..];
        any = true;
    }
    any
}

fn scheme_ok(scheme: &str) -> bool {
    let mut chars = scheme.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
}
