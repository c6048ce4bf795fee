//! `GET /metrics/resource` in the Prometheus text format (version 0.0.4), as the kubelet's
//! resource metrics collector writes it: each sample carries its measurement's time in
//! milliseconds, labels are sorted by name, a failed scrape is `resource_scrape_error 1`
//! (and the deprecated `scrape_error 1`) with no other sample. Written by hand because the
//! prometheus-client crate writes OpenMetrics and cannot put a timestamp on a sample.

use std::fmt::Write;

use super::types::{CpuStats, MemoryStats, Summary};

/// The content type of the text this writes.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// One metric family: name, type, help (with its stability level, as the kubelet writes it).
struct Family {
    name: &'static str,
    kind: &'static str,
    help: &'static str,
}

const FAMILIES: [Family; 9] = [
    Family {
        name: "container_cpu_usage_seconds_total",
        kind: "counter",
        help: "[STABLE] Cumulative cpu time consumed by the container in core-seconds",
    },
    Family {
        name: "container_memory_working_set_bytes",
        kind: "gauge",
        help: "[STABLE] Current working set of the container in bytes",
    },
    Family {
        name: "container_start_time_seconds",
        kind: "gauge",
        help: "[STABLE] Start time of the container since unix epoch in seconds",
    },
    Family {
        name: "node_cpu_usage_seconds_total",
        kind: "counter",
        help: "[STABLE] Cumulative cpu time consumed by the node in core-seconds",
    },
    Family {
        name: "node_memory_working_set_bytes",
        kind: "gauge",
        help: "[STABLE] Current working set of the node in bytes",
    },
    Family {
        name: "pod_cpu_usage_seconds_total",
        kind: "counter",
        help: "[STABLE] Cumulative cpu time consumed by the pod in core-seconds",
    },
    Family {
        name: "pod_memory_working_set_bytes",
        kind: "gauge",
        help: "[STABLE] Current working set of the pod in bytes",
    },
    Family {
        name: "resource_scrape_error",
        kind: "gauge",
        help: "[STABLE] 1 if there was an error while getting container metrics, 0 otherwise",
    },
    Family {
        name: "scrape_error",
        kind: "gauge",
        help: "[ALPHA] (Deprecated since 1.29.0) 1 if there was an error while getting container metrics, 0 otherwise",
    },
];

/// One sample: labels (sorted by name), value, time in milliseconds since the epoch.
type Sample = (Vec<(&'static str, String)>, f64, Option<i64>);

/// The text for `summary`, or for a failed scrape when it is `None`.
pub fn render(summary: Option<&Summary>) -> String {
    let mut samples: Vec<Vec<Sample>> = vec![Vec::new(); FAMILIES.len()];
    let error = f64::from(u8::from(summary.is_none()));
    samples[7].push((vec![], error, None));
    samples[8].push((vec![], error, None));
    if let Some(summary) = summary {
        collect(summary, &mut samples);
    }
    let mut out = String::new();
    for (family, samples) in FAMILIES.iter().zip(samples) {
        if samples.is_empty() {
            continue;
        }
        let _ = writeln!(out, "# HELP {} {}", family.name, family.help);
        let _ = writeln!(out, "# TYPE {} {}", family.name, family.kind);
        for (labels, value, millis) in samples {
            out.push_str(family.name);
            write_labels(&mut out, &labels);
            let _ = write!(out, " {}", float(value));
            if let Some(ms) = millis {
                let _ = write!(out, " {ms}");
            }
            out.push('\n');
        }
    }
    out
}

/// The samples of the node, each container and each pod, by family.
fn collect(summary: &Summary, samples: &mut [Vec<Sample>]) {
    cpu(&mut samples[3], vec![], summary.node.cpu.as_ref());
    memory(&mut samples[4], vec![], summary.node.memory.as_ref());
    for pod in &summary.pods {
        let (ns, name) = (&pod.pod_ref.namespace, &pod.pod_ref.name);
        for c in &pod.containers {
            let labels = vec![
                ("container", c.name.clone()),
                ("namespace", ns.clone()),
                ("pod", name.clone()),
            ];
            cpu(&mut samples[0], labels.clone(), c.cpu.as_ref());
            memory(&mut samples[1], labels.clone(), c.memory.as_ref());
            let start = c.start_time.0;
            let seconds = start.as_nanosecond() as f64 / 1e9;
            samples[2].push((labels, seconds, Some(start.as_millisecond())));
        }
        let labels = vec![("namespace", ns.clone()), ("pod", name.clone())];
        cpu(&mut samples[5], labels.clone(), pod.cpu.as_ref());
        memory(&mut samples[6], labels, pod.memory.as_ref());
    }
}

fn cpu(into: &mut Vec<Sample>, labels: Vec<(&'static str, String)>, cpu: Option<&CpuStats>) {
    if let Some(c) = cpu
        && let Some(used) = c.usage_core_nano_seconds
    {
        into.push((labels, used as f64 / 1e9, Some(c.time.0.as_millisecond())));
    }
}

fn memory(into: &mut Vec<Sample>, labels: Vec<(&'static str, String)>, m: Option<&MemoryStats>) {
    if let Some(m) = m
        && let Some(ws) = m.working_set_bytes
    {
        into.push((labels, ws as f64, Some(m.time.0.as_millisecond())));
    }
}

/// `{a="x",b="y"}` with the values escaped; nothing for no labels.
fn write_labels(out: &mut String, labels: &[(&str, String)]) {
    if labels.is_empty() {
        return;
    }
    out.push('{');
    for (i, (name, value)) in labels.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let escaped = value
            .replace('\\', "\\\\")
            .replace('"', "\\\"")
            .replace('\n', "\\n");
        let _ = write!(out, "{name}=\"{escaped}\"");
    }
    out.push('}');
}

/// A sample value: integers without a fraction, others as Rust's shortest round-trip form.
fn float(v: f64) -> String {
    if v.is_finite() && v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}
