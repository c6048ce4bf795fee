//! The kubelet's `/metrics/resource` (Prometheus text format 0.0.4) read into one node's
//! [`Scrape`]: the node's cumulative CPU seconds and working set, and each container's, each
//! with the millisecond timestamp the kubelet took it at. Only the four series the resource
//! metrics pipeline uses are kept (and `container_start_time_seconds`, which tells a restarted
//! container's counter from a continuing one); everything else is skipped after it parses.
//!
//! The text is read line by line with no dependency: a sample is `name{labels} value
//! [timestamp]`, label values are quoted with `\\`, `\"` and `\n` escapes. A line that does
//! not parse is an error naming its line number and what was wrong: the node's scrape ends
//! there.

use std::collections::BTreeMap;

/// A sample's identity within a node: namespace, pod, container.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct ContainerKey {
    pub(crate) namespace: String,
    pub(crate) pod: String,
    pub(crate) container: String,
}

/// One reading of a cumulative CPU counter and a working set.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Point {
    /// Core-seconds used since the start.
    pub(crate) cpu_seconds: f64,
    /// Working set, bytes.
    pub(crate) memory_bytes: f64,
    /// When the kubelet took the CPU reading (Unix milliseconds).
    pub(crate) at_ms: i64,
    /// When the container started (Unix seconds), if the kubelet said.
    pub(crate) started: Option<f64>,
}

/// What one `/metrics/resource` answer says.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Scrape {
    pub(crate) node: Option<Point>,
    pub(crate) containers: BTreeMap<ContainerKey, Point>,
}

/// Why a `/metrics/resource` body could not be read.
#[derive(Debug, thiserror::Error, PartialEq)]
pub(crate) enum ParseError {
    /// The body is not UTF-8.
    #[error("the metrics text is not UTF-8")]
    NotUtf8,
    /// One line is not a sample.
    #[error("line {line}: {reason}")]
    Line { line: usize, reason: String },
}

/// One parsed sample line.
#[derive(Debug, PartialEq)]
struct Sample<'a> {
    name: &'a str,
    labels: BTreeMap<&'a str, String>,
    value: f64,
    timestamp_ms: Option<i64>,
}

/// Partial readings, before both halves of a [`Point`] are known.
#[derive(Default)]
struct Partial {
    cpu: Option<(f64, Option<i64>)>,
    memory: Option<f64>,
    started: Option<f64>,
}

/// Reads `body`; samples without a timestamp are taken as of `now_ms`.
pub(crate) fn parse(body: &[u8], now_ms: i64) -> Result<Scrape, ParseError> {
    let text = std::str::from_utf8(body).map_err(|_| ParseError::NotUtf8)?;
    let mut node = Partial::default();
    let mut containers: BTreeMap<ContainerKey, Partial> = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let sample = sample(line).map_err(|reason| ParseError::Line {
            line: i + 1,
            reason,
        })?;
        let target = match sample.name {
            "node_cpu_usage_seconds_total" | "node_memory_working_set_bytes" => &mut node,
            "container_cpu_usage_seconds_total"
            | "container_memory_working_set_bytes"
            | "container_start_time_seconds" => {
                let key = container_key(&sample.labels).ok_or_else(|| ParseError::Line {
                    line: i + 1,
                    reason: format!(
                        "{} without container, pod and namespace labels",
                        sample.name
                    ),
                })?;
                containers.entry(key).or_default()
            }
            _ => continue,
        };
        match sample.name {
            "node_cpu_usage_seconds_total" | "container_cpu_usage_seconds_total" => {
                target.cpu = Some((sample.value, sample.timestamp_ms));
            }
            "container_start_time_seconds" => target.started = Some(sample.value),
            _ => target.memory = Some(sample.value),
        }
    }
    Ok(Scrape {
        node: node.point(now_ms),
        containers: containers
            .into_iter()
            .filter_map(|(k, p)| Some((k, p.point(now_ms)?)))
            .collect(),
    })
}

impl Partial {
    /// The point, when CPU and memory are both known and usable numbers.
    fn point(&self, now_ms: i64) -> Option<Point> {
        let (cpu_seconds, at) = self.cpu?;
        let memory_bytes = self.memory?;
        let usable = |v: f64| v.is_finite() && v >= 0.0;
        (usable(cpu_seconds) && usable(memory_bytes)).then_some(Point {
            cpu_seconds,
            memory_bytes,
            at_ms: at.unwrap_or(now_ms),
            started: self.started,
        })
    }
}

fn container_key(labels: &BTreeMap<&str, String>) -> Option<ContainerKey> {
    Some(ContainerKey {
        namespace: labels.get("namespace")?.clone(),
        pod: labels.get("pod")?.clone(),
        container: labels.get("container")?.clone(),
    })
}

/// One sample line: `name{k="v",...} value [timestamp]`.
fn sample(line: &str) -> Result<Sample<'_>, String> {
    let name_end = line
        .find(|c: char| c == '{' || c.is_ascii_whitespace())
        .ok_or("a sample without a value")?;
    let name = &line[..name_end];
    if !is_metric_name(name) {
        return Err(format!("{name:?} is not a metric name"));
    }
    let mut rest = &line[name_end..];
    let mut labels = BTreeMap::new();
    if let Some(inner) = rest.strip_prefix('{') {
        rest = label_set(inner, &mut labels)?;
    }
    let mut fields = rest.split_ascii_whitespace();
    let value = fields.next().ok_or("a sample without a value")?;
    let value = number(value).ok_or_else(|| format!("{value:?} is not a sample value"))?;
    let timestamp_ms = match fields.next() {
        None => None,
        Some(t) => Some(
            t.parse::<i64>()
                .map_err(|_| format!("{t:?} is not a timestamp in milliseconds"))?,
        ),
    };
    if let Some(extra) = fields.next() {
        return Err(format!("unexpected {extra:?} after the timestamp"));
    }
    Ok(Sample {
        name,
        labels,
        value,
        timestamp_ms,
    })
}

/// Reads `k="v",...}` into `labels`; returns what follows the `}`.
fn label_set<'a>(
    mut rest: &'a str,
    labels: &mut BTreeMap<&'a str, String>,
) -> Result<&'a str, String> {
    loop {
        rest = rest.trim_start();
        if let Some(after) = rest.strip_prefix('}') {
            return Ok(after);
        }
        let eq = rest.find('=').ok_or("a label without a value")?;
        let key = rest[..eq].trim();
        if !is_label_name(key) {
            return Err(format!("{key:?} is not a label name"));
        }
        let quoted = rest[eq + 1..].trim_start();
        let quoted = quoted
            .strip_prefix('"')
            .ok_or_else(|| format!("the value of label {key} is not quoted"))?;
        let (value, after) =
            quoted_value(quoted).ok_or_else(|| format!("label {key} is not closed"))?;
        labels.insert(key, value);
        rest = after.trim_start();
        if let Some(after) = rest.strip_prefix(',') {
            rest = after;
        } else if !rest.starts_with('}') {
            return Err("labels not separated by commas".into());
        }
    }
}

/// The unescaped value up to the closing quote, and what follows it.
fn quoted_value(s: &str) -> Option<(String, &str)> {
    let mut value = String::new();
    let mut chars = s.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Some((value, &s[i + 1..])),
            '\\' => match chars.next()?.1 {
                'n' => value.push('\n'),
                other => value.push(other),
            },
            c => value.push(c),
        }
    }
    None
}

/// A sample value: a float, `NaN`, `+Inf` or `-Inf`.
fn number(s: &str) -> Option<f64> {
    match s {
        "+Inf" | "Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        "NaN" => Some(f64::NAN),
        s => s.parse().ok(),
    }
}

fn is_metric_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

fn is_label_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a kubelet serves, abridged.
    const KUBELET: &str = r#"# HELP container_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the container in core-seconds
# TYPE container_cpu_usage_seconds_total counter
container_cpu_usage_seconds_total{container="web",namespace="default",pod="web-1"} 12.5 1700000000123
container_cpu_usage_seconds_total{container="side\"car",namespace="default",pod="web-1",} 0.25 1700000000124
# HELP container_memory_working_set_bytes [STABLE] Current working set of the container in bytes
# TYPE container_memory_working_set_bytes gauge
container_memory_working_set_bytes{container="web",namespace="default",pod="web-1"} 1.048576e+07 1700000000123
container_memory_working_set_bytes{container="side\"car",namespace="default",pod="web-1"} 2048 1700000000124
container_start_time_seconds{container="web",namespace="default",pod="web-1"} 1.6999e+09 1699900000000
# TYPE node_cpu_usage_seconds_total counter
node_cpu_usage_seconds_total 357.35 1700000000100
node_memory_working_set_bytes 1.6e+09 1700000000100
pod_cpu_usage_seconds_total{namespace="default",pod="web-1"} 12.75 1700000000123
resource_scrape_error 0
"#;

    #[test]
    fn a_kubelet_answer_gives_the_node_and_each_container_with_their_timestamps() {
        let scrape = parse(KUBELET.as_bytes(), 0).unwrap();
        let node = scrape.node.unwrap();
        assert_eq!(node.cpu_seconds, 357.35);
        assert_eq!(node.memory_bytes, 1.6e9);
        assert_eq!(node.at_ms, 1_700_000_000_100);
        let key = |c: &str| ContainerKey {
            namespace: "default".into(),
            pod: "web-1".into(),
            container: c.into(),
        };
        let web = scrape.containers[&key("web")];
        assert_eq!(web.cpu_seconds, 12.5);
        assert_eq!(web.memory_bytes, 10_485_760.0);
        assert_eq!(web.at_ms, 1_700_000_000_123);
        assert_eq!(web.started, Some(1.6999e9));
        let sidecar = scrape.containers[&key("side\"car")];
        assert_eq!((sidecar.cpu_seconds, sidecar.memory_bytes), (0.25, 2048.0));
        assert_eq!(scrape.containers.len(), 2);
    }

    #[test]
    fn a_sample_without_a_timestamp_is_taken_as_of_the_scrape() {
        let text = "node_cpu_usage_seconds_total 1\nnode_memory_working_set_bytes 2\n";
        assert_eq!(parse(text.as_bytes(), 42).unwrap().node.unwrap().at_ms, 42);
    }

    #[test]
    fn a_container_with_only_cpu_or_a_negative_value_is_left_out() {
        let text = "container_cpu_usage_seconds_total{container=\"a\",namespace=\"n\",pod=\"p\"} 1 5\n\
                    container_cpu_usage_seconds_total{container=\"b\",namespace=\"n\",pod=\"p\"} -1 5\n\
                    container_memory_working_set_bytes{container=\"b\",namespace=\"n\",pod=\"p\"} 1 5\n";
        assert!(parse(text.as_bytes(), 0).unwrap().containers.is_empty());
    }

    #[test]
    fn broken_lines_are_errors_naming_the_line_and_the_fault() {
        let cases = [
            ("node_cpu_usage_seconds_total", "a sample without a value"),
            (
                "node_cpu_usage_seconds_total abc",
                "\"abc\" is not a sample value",
            ),
            (
                "node_cpu_usage_seconds_total 1 1.5",
                "\"1.5\" is not a timestamp",
            ),
            ("x{a=\"b\" 1", "labels not separated by commas"),
            ("x{a=b} 1", "the value of label a is not quoted"),
            ("x{a=\"b} 1", "label a is not closed"),
            ("9x 1", "\"9x\" is not a metric name"),
            ("x 1 2 3", "unexpected \"3\""),
            (
                "container_cpu_usage_seconds_total{pod=\"p\"} 1",
                "without container",
            ),
        ];
        for (line, want) in cases {
            let text = format!("# ok\n{line}\n");
            match parse(text.as_bytes(), 0) {
                Err(ParseError::Line { line: 2, reason }) => {
                    assert!(reason.contains(want), "{line:?}: {reason}")
                }
                other => panic!("{line:?}: {other:?}"),
            }
        }
        assert_eq!(parse(&[0xff, 0xfe], 0), Err(ParseError::NotUtf8));
    }
}
