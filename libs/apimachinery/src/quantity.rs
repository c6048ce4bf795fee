//! Kubernetes resource quantities (`500m`, `2`, `128Mi`, `1G`, `1e3`) as numbers: CPU in
//! millicores, everything else in units.

/// `q` in thousandths of a unit (CPU millicores), rounded up; `None` if it is not a quantity.
pub fn milli(q: &str) -> Option<i64> {
    let (number, scale) = split(q)?;
    Some((number * scale * 1000.0).ceil() as i64)
}

/// `q` in units (bytes for memory), rounded up; `None` if it is not a quantity.
pub fn units(q: &str) -> Option<i64> {
    let (number, scale) = split(q)?;
    Some((number * scale).ceil() as i64)
}

fn split(q: &str) -> Option<(f64, f64)> {
    let q = q.trim();
    let end = q
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(q.len());
    let (number, suffix) = q.split_at(end);
    let number: f64 = number.parse().ok()?;
    let scale = match suffix {
        "" => 1.0,
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024.0,
        "Mi" => 1024.0 * 1024.0,
        "Gi" => 1024.0 * 1024.0 * 1024.0,
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        s if s.starts_with(['e', 'E']) => 10f64.powi(s[1..].parse().ok()?),
        _ => return None,
    };
    (number >= 0.0).then_some((number, scale))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_parse_as_kubernetes_writes_them() {
        assert_eq!(milli("500m"), Some(500));
        assert_eq!(milli("2"), Some(2000));
        assert_eq!(milli("0.1"), Some(100));
        assert_eq!(units("128Mi"), Some(128 << 20));
        assert_eq!(units("1G"), Some(1_000_000_000));
        assert_eq!(units("1e3"), Some(1000));
        assert_eq!(units("12x"), None);
        assert_eq!(units("-1"), None);
    }
}
