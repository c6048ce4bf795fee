//! The kubelet API's inputs, checked before anything is looked up (pure): path segments are
//! Kubernetes names, numbers are numbers in range, a command is bounded. Each failure is a
//! [`BadRequest`] naming the parameter and what was wrong with it.

use k8s_openapi::jiff::{SignedDuration, Timestamp};

/// The most arguments an exec command may have.
const MAX_COMMAND_ARGS: usize = 1024;
/// The most bytes an exec command may have, all arguments together.
const MAX_COMMAND_BYTES: usize = 64 * 1024;
/// The most ports one port-forward request may name.
const MAX_PORTS: usize = 64;

/// A parameter that is not acceptable; the text says which and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BadRequest(pub String);

/// Which pod (and, for containers, which container) a request is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The pod's namespace.
    pub namespace: String,
    /// The pod's name.
    pub pod: String,
    /// The pod uid the caller expects, when the path carries one.
    pub uid: Option<String>,
    /// The container, for logs, exec and attach.
    pub container: Option<String>,
}

/// What `containerLogs` was asked for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogOptions {
    /// Keep streaming until the container exits or the client goes.
    pub follow: bool,
    /// Only the last `n` lines.
    pub tail_lines: Option<u64>,
    /// Only lines at or after this time.
    pub since: Option<Timestamp>,
    /// Prefix each line with its time.
    pub timestamps: bool,
    /// The previous (terminated) instance of the container.
    pub previous: bool,
    /// Stop after this many bytes.
    pub limit_bytes: Option<u64>,
}

/// What `exec` and `attach` were asked for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StreamOptions {
    /// The command (exec only).
    pub command: Vec<String>,
    /// Streams the client wants.
    pub stdin: bool,
    /// Standard output.
    pub stdout: bool,
    /// Standard error.
    pub stderr: bool,
    /// A terminal.
    pub tty: bool,
}

// === impl Target ===

impl Target {
    /// A pod target from path segments `namespace`, `pod` and an optional `uid`.
    pub fn pod(namespace: &str, pod: &str, uid: Option<&str>) -> Result<Target, BadRequest> {
        dns_label("namespace", namespace)?;
        dns_subdomain("pod name", pod)?;
        if let Some(uid) = uid {
            pod_uid(uid)?;
        }
        Ok(Target {
            namespace: namespace.to_owned(),
            pod: pod.to_owned(),
            uid: uid.map(str::to_owned),
            container: None,
        })
    }

    /// A container target.
    pub fn container(
        namespace: &str,
        pod: &str,
        uid: Option<&str>,
        container: &str,
    ) -> Result<Target, BadRequest> {
        dns_label("container name", container)?;
        let mut target = Target::pod(namespace, pod, uid)?;
        target.container = Some(container.to_owned());
        Ok(target)
    }

    /// `<namespace>/<pod>`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.pod)
    }
}

// === impl LogOptions ===

impl LogOptions {
    /// The options of a `containerLogs` query (`now` resolves `sinceSeconds`).
    pub fn parse(query: &[(String, String)], now: Timestamp) -> Result<LogOptions, BadRequest> {
        let mut options = LogOptions::default();
        let mut since_seconds = None;
        for (key, value) in query {
            match key.as_str() {
                "follow" => options.follow = boolean(key, value)?,
                "timestamps" => options.timestamps = boolean(key, value)?,
                "previous" => options.previous = boolean(key, value)?,
                "tailLines" => options.tail_lines = Some(number(key, value, 0)?),
                "limitBytes" => options.limit_bytes = Some(number(key, value, 1)?),
                "sinceSeconds" => since_seconds = Some(number(key, value, 1)?),
                "sinceTime" => {
                    let time = value.parse::<Timestamp>().map_err(|e| {
                        BadRequest(format!("sinceTime {value:?} is not an RFC 3339 time: {e}"))
                    })?;
                    options.since = Some(time);
                }
                _ => {}
            }
        }
        if let Some(seconds) = since_seconds {
            if options.since.is_some() {
                return Err(BadRequest(
                    "at most one of sinceTime or sinceSeconds may be specified".into(),
                ));
            }
            let seconds = i64::try_from(seconds).unwrap_or(i64::MAX);
            let back = now.checked_sub(SignedDuration::from_secs(seconds));
            options.since = Some(back.unwrap_or(Timestamp::MIN));
        }
        Ok(options)
    }
}

// === impl StreamOptions ===

impl StreamOptions {
    /// The options of an `exec` (`exec` true: a command is required) or `attach` query.
    pub fn parse(query: &[(String, String)], exec: bool) -> Result<StreamOptions, BadRequest> {
        let mut options = StreamOptions::default();
        let mut bytes = 0;
        for (key, value) in query {
            match key.as_str() {
                "command" if exec => {
                    bytes += value.len();
                    options.command.push(value.clone());
                }
                "stdin" | "input" => options.stdin = boolean(key, value)?,
                "stdout" | "output" => options.stdout = boolean(key, value)?,
                "stderr" | "error" => options.stderr = boolean(key, value)?,
                "tty" => options.tty = boolean(key, value)?,
                _ => {}
            }
        }
        if exec && options.command.is_empty() {
            return Err(BadRequest("you must specify at least one command".into()));
        }
        if options.command.len() > MAX_COMMAND_ARGS || bytes > MAX_COMMAND_BYTES {
            return Err(BadRequest(format!(
                "the command is too long: {} arguments, {bytes} bytes \
                 (at most {MAX_COMMAND_ARGS} arguments, {MAX_COMMAND_BYTES} bytes)",
                options.command.len()
            )));
        }
        if !(options.stdin || options.stdout || options.stderr) {
            return Err(BadRequest(
                "you must specify at least one of stdin, stdout, stderr".into(),
            ));
        }
        if options.tty && options.stderr {
            // A terminal merges stderr into stdout, as the kubelet says.
            options.stderr = false;
        }
        Ok(options)
    }
}

/// The `port` values of a port-forward query.
pub fn ports(query: &[(String, String)]) -> Result<Vec<i32>, BadRequest> {
    let mut ports = Vec::new();
    for (key, value) in query.iter().filter(|(k, _)| k == "port") {
        for part in value.split(',') {
            let port: u16 = number(key, part, 1)?
                .try_into()
                .map_err(|_| BadRequest(format!("port {part:?} is not a port (1-65535)")))?;
            ports.push(i32::from(port));
        }
    }
    if ports.len() > MAX_PORTS {
        return Err(BadRequest(format!(
            "{} ports requested, at most {MAX_PORTS}",
            ports.len()
        )));
    }
    Ok(ports)
}

/// A query boolean as Kubernetes parses them (`true`, `1`, `false`, `0`; empty is true).
fn boolean(key: &str, value: &str) -> Result<bool, BadRequest> {
    match value {
        "" | "true" | "True" | "TRUE" | "1" | "t" | "T" => Ok(true),
        "false" | "False" | "FALSE" | "0" | "f" | "F" => Ok(false),
        _ => Err(BadRequest(format!("{key} {value:?} is not a boolean"))),
    }
}

/// A non-negative decimal integer of at least `min`.
fn number(key: &str, value: &str, min: u64) -> Result<u64, BadRequest> {
    let n: u64 = value
        .parse()
        .map_err(|_| BadRequest(format!("{key} {value:?} is not a non-negative integer")))?;
    if n < min {
        return Err(BadRequest(format!("{key} must be at least {min}, not {n}")));
    }
    Ok(n)
}

/// A DNS-1123 label: 1-63 lowercase alphanumerics or '-', alphanumeric at both ends.
fn dns_label(what: &str, value: &str) -> Result<(), BadRequest> {
    let ok = !value.is_empty()
        && value.len() <= 63
        && value
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !value.starts_with('-')
        && !value.ends_with('-');
    ok.then_some(()).ok_or_else(|| {
        BadRequest(format!(
            "{what} {value:?} is not a valid name (a DNS-1123 label: at most 63 lowercase \
             letters, digits or '-', starting and ending with a letter or digit)"
        ))
    })
}

/// A DNS-1123 subdomain: at most 253 characters of dot-separated labels.
fn dns_subdomain(what: &str, value: &str) -> Result<(), BadRequest> {
    let ok = !value.is_empty()
        && value.len() <= 253
        && value.split('.').all(|l| dns_label(what, l).is_ok());
    ok.then_some(()).ok_or_else(|| {
        BadRequest(format!(
            "{what} {value:?} is not a valid name (a DNS-1123 subdomain: at most 253 \
             characters of lowercase letters, digits, '-' and '.')"
        ))
    })
}

/// A pod uid: at most 128 letters, digits or '-'.
fn pod_uid(value: &str) -> Result<(), BadRequest> {
    let ok = !value.is_empty()
        && value.len() <= 128
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-');
    ok.then_some(()).ok_or_else(|| {
        BadRequest(format!(
            "pod uid {value:?} is not a valid uid (at most 128 letters, digits or '-')"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn names_must_be_dns_labels_and_uids_plain() {
        assert!(Target::container("default", "web-1.a", Some("u-1"), "c").is_ok());
        for (ns, pod, uid, c) in [
            ("Default", "web", None, "c"),
            ("default", "web..x", None, "c"),
            ("default", "web", Some("../etc"), "c"),
            ("default", "web", None, "-c"),
            ("default", "web", None, ""),
        ] {
            let err = Target::container(ns, pod, uid, c).unwrap_err();
            assert!(err.0.contains("is not a valid"), "{err}");
        }
    }

    #[test]
    fn log_options_parse_every_parameter_and_reject_bad_values() {
        let now: Timestamp = "2026-01-01T00:01:00Z".parse().unwrap();
        let q = query(&[
            ("follow", "true"),
            ("tailLines", "3"),
            ("sinceSeconds", "60"),
            ("timestamps", "1"),
            ("previous", "false"),
            ("limitBytes", "10"),
        ]);
        let o = LogOptions::parse(&q, now).unwrap();
        assert_eq!(
            o,
            LogOptions {
                follow: true,
                tail_lines: Some(3),
                since: Some("2026-01-01T00:00:00Z".parse().unwrap()),
                timestamps: true,
                previous: false,
                limit_bytes: Some(10),
            }
        );
        let bad = [
            (query(&[("tailLines", "-1")]), "tailLines"),
            (query(&[("limitBytes", "0")]), "limitBytes"),
            (query(&[("sinceTime", "yesterday")]), "sinceTime"),
            (query(&[("follow", "maybe")]), "follow"),
            (
                query(&[("sinceSeconds", "5"), ("sinceTime", "2026-01-01T00:00:00Z")]),
                "sinceTime or sinceSeconds",
            ),
        ];
        for (q, named) in bad {
            let err = LogOptions::parse(&q, now).unwrap_err();
            assert!(err.0.contains(named), "{err} should name {named}");
        }
    }

    #[test]
    fn exec_needs_a_bounded_command_and_a_stream() {
        let q = query(&[
            ("command", "sh"),
            ("command", "-c"),
            ("stdout", "1"),
            ("tty", "1"),
        ]);
        let o = StreamOptions::parse(&q, true).unwrap();
        assert_eq!(o.command, ["sh", "-c"]);
        assert!(o.stdout && o.tty && !o.stdin);
        let none = StreamOptions::parse(&query(&[("stdout", "1")]), true).unwrap_err();
        assert!(none.0.contains("command"), "{none}");
        let silent = StreamOptions::parse(&query(&[("command", "ls")]), true).unwrap_err();
        assert!(silent.0.contains("stdin, stdout, stderr"), "{silent}");
        let long = "x".repeat(MAX_COMMAND_BYTES + 1);
        let q = query(&[("command", &long), ("stdout", "1")]);
        assert!(
            StreamOptions::parse(&q, true)
                .unwrap_err()
                .0
                .contains("too long")
        );
        let attach = StreamOptions::parse(&query(&[("command", "x"), ("stdin", "1")]), false);
        assert!(
            attach.unwrap().command.is_empty(),
            "attach takes no command"
        );
    }

    #[test]
    fn ports_are_numbers_in_range() {
        let q = query(&[("port", "80"), ("port", "8080,9090")]);
        assert_eq!(ports(&q).unwrap(), [80, 8080, 9090]);
        for bad in ["0", "65536", "http", "-1"] {
            let err = ports(&query(&[("port", bad)])).unwrap_err();
            assert!(err.0.contains("port"), "{err}");
        }
    }
}
