//! `containerLogs`: a container's CRI log file (`<RFC3339Nano> <stdout|stderr> <F|P> <text>`
//! per line, written by containerd) turned back into the container's output. The decoding and
//! the options (sinceTime, tailLines, timestamps, limitBytes) are pure ([`Decoder`],
//! [`Render`]); [`body`] reads the file in a task that feeds a bounded channel, so a slow
//! client slows the reading instead of filling memory, and with `follow` it polls the file
//! for new lines at a modest interval until the container exits or the client goes.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use k8s_openapi::jiff::Timestamp;
use tokio::io::AsyncReadExt;
use tokio::sync::mpsc;

use super::params::LogOptions;

/// How often a followed file is read again for new lines.
const POLL: Duration = Duration::from_millis(200);
/// How often a follow asks the runtime whether the container still runs.
const ALIVE_CHECK: Duration = Duration::from_secs(1);
/// How much of the file one read takes.
const READ_CHUNK: usize = 64 * 1024;
/// How many chunks may wait for a slow client.
const CHANNEL_CHUNKS: usize = 8;
/// The longest line rebuilt from partial (`P`) entries; a longer one is cut there.
const MAX_LINE: usize = 1024 * 1024;

/// One line of the container's output, rebuilt from its entries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    /// The time of the line's first entry, as written.
    pub stamp: String,
    /// That time, parsed.
    pub time: Timestamp,
    /// Whether it went to stderr.
    pub stderr: bool,
    /// The text, without the line break.
    pub text: Vec<u8>,
}

/// Decodes CRI log bytes into lines: strips each entry's prefix, joins partial entries per
/// stream, keeps the order in which lines completed, and skips entries it cannot parse.
#[derive(Debug, Default)]
pub struct Decoder {
    /// Bytes of an entry whose line break has not been read yet.
    raw: Vec<u8>,
    /// A line under construction from partial entries, per stream (stdout, stderr).
    partial: [Option<Line>; 2],
    /// Entries skipped as malformed.
    pub skipped: u64,
}

/// Turns lines into output as the options ask: since, timestamps, then the byte limit.
#[derive(Debug)]
pub struct Render {
    since: Option<Timestamp>,
    timestamps: bool,
    left: Option<u64>,
}

/// The container a follow watches: reading ends once it no longer runs.
pub struct Alive {
    /// The runtime.
    pub cri: Arc<dyn cri::Runtime>,
    /// The container's id.
    pub id: String,
}

// === impl Decoder ===

impl Decoder {
    /// Decodes `bytes`, appending the lines they complete to `out`.
    pub fn push(&mut self, bytes: &[u8], out: &mut Vec<Line>) {
        let mut rest = bytes;
        while let Some(at) = rest.iter().position(|&b| b == b'\n') {
            let (entry, tail) = rest.split_at(at);
            rest = &tail[1..];
            if self.raw.is_empty() {
                self.entry(entry, out);
            } else {
                let mut whole = std::mem::take(&mut self.raw);
                whole.extend_from_slice(entry);
                self.entry(&whole, out);
            }
        }
        if self.raw.len() + rest.len() <= MAX_LINE {
            self.raw.extend_from_slice(rest);
        } else {
            // An entry longer than any containerd writes: not a CRI log.
            self.raw.clear();
            self.skipped += 1;
        }
    }

    fn entry(&mut self, entry: &[u8], out: &mut Vec<Line>) {
        let Some((stamp, time, stderr, partial, text)) = parse_entry(entry) else {
            self.skipped += 1;
            return;
        };
        let slot = &mut self.partial[usize::from(stderr)];
        let line = slot.get_or_insert_with(|| Line {
            stamp: stamp.to_owned(),
            time,
            stderr,
            text: Vec::new(),
        });
        line.text.extend_from_slice(text);
        if !partial || line.text.len() >= MAX_LINE {
            out.extend(slot.take());
        }
    }
}

/// `(stamp, time, stderr, partial, text)` of one entry, `None` if it is not a CRI entry.
fn parse_entry(entry: &[u8]) -> Option<(&str, Timestamp, bool, bool, &[u8])> {
    let mut fields = entry.splitn(4, |&b| b == b' ');
    let stamp = std::str::from_utf8(fields.next()?).ok()?;
    let time = stamp.parse::<Timestamp>().ok()?;
    let stderr = match fields.next()? {
        b"stdout" => false,
        b"stderr" => true,
        _ => return None,
    };
    // Tags are ':'-separated; the first says whether the entry ends its line.
    let tags = fields.next()?;
    let partial = match tags.split(|&b| b == b':').next()? {
        b"P" => true,
        b"F" => false,
        _ => return None,
    };
    Some((
        stamp,
        time,
        stderr,
        partial,
        fields.next().unwrap_or_default(),
    ))
}

// === impl Render ===

impl Render {
    /// The rendering the options ask for.
    pub fn new(options: &LogOptions) -> Render {
        Render {
            since: options.since,
            timestamps: options.timestamps,
            left: options.limit_bytes,
        }
    }

    /// Whether `line` is shown at all (not before `sinceTime`).
    pub fn wanted(&self, line: &Line) -> bool {
        self.since.is_none_or(|since| line.time >= since)
    }

    /// Whether the byte limit is used up.
    pub fn done(&self) -> bool {
        self.left == Some(0)
    }

    /// Appends `line` to `out` as shown, cut at the byte limit.
    pub fn write(&mut self, line: &Line, out: &mut Vec<u8>) {
        let start = out.len();
        if self.timestamps {
            out.extend_from_slice(line.stamp.as_bytes());
            out.push(b' ');
        }
        out.extend_from_slice(&line.text);
        out.push(b'\n');
        if let Some(left) = &mut self.left {
            let written = (out.len() - start) as u64;
            if written > *left {
                out.truncate(start + *left as usize);
            }
            *left -= written.min(*left);
        }
    }
}

/// The response body of a log request on `path`: the lines the options select, then, with
/// `alive`, new lines as they are written until the container stops or the client goes.
pub fn body(path: PathBuf, options: LogOptions, alive: Option<Alive>) -> Body {
    let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(CHANNEL_CHUNKS);
    tokio::spawn(async move {
        if let Err(e) = pump(&path, &options, alive, &tx).await {
            tracing::debug!(path = %path.display(), error = %e, "reading a container log ended");
            let _ = tx.send(Err(e)).await;
        }
    });
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|chunk| (chunk, rx))
    });
    Body::from_stream(stream)
}

/// Reads the file into the channel; returns when done, or the client is gone.
async fn pump(
    path: &PathBuf,
    options: &LogOptions,
    alive: Option<Alive>,
    tx: &mpsc::Sender<Result<Bytes, std::io::Error>>,
) -> Result<(), std::io::Error> {
    let mut file = match tokio::fs::File::open(path).await {
        Ok(f) => f,
        // Nothing written yet: the container has printed nothing.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && alive.is_none() => return Ok(()),
        Err(e) => return Err(e),
    };
    let mut decoder = Decoder::default();
    let mut render = Render::new(options);
    let mut chunk = vec![0; READ_CHUNK];
    let mut lines = Vec::new();
    // The file as it is now: with tailLines, only its last lines.
    let mut tail = options.tail_lines.map(|n| (n, VecDeque::new()));
    loop {
        let n = file.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        decoder.push(&chunk[..n], &mut lines);
        match &mut tail {
            Some((keep, kept)) => {
                kept.extend(lines.drain(..).filter(|l| render.wanted(l)));
                let excess = kept.len().saturating_sub(*keep as usize);
                kept.drain(..excess);
            }
            None => {
                if !send(&mut render, &mut lines, tx).await {
                    return Ok(());
                }
            }
        }
    }
    if let Some((_, kept)) = tail {
        lines.extend(kept);
        if !send(&mut render, &mut lines, tx).await {
            return Ok(());
        }
    }
    let Some(alive) = alive else { return Ok(()) };
    follow(file, decoder, render, alive, tx).await
}

/// Reads what is appended to the file until the container stops (then reads the rest once
/// more) or the client goes.
async fn follow(
    mut file: tokio::fs::File,
    mut decoder: Decoder,
    mut render: Render,
    alive: Alive,
    tx: &mpsc::Sender<Result<Bytes, std::io::Error>>,
) -> Result<(), std::io::Error> {
    let mut chunk = vec![0; READ_CHUNK];
    let mut lines = Vec::new();
    let mut checked = tokio::time::Instant::now();
    let mut running = true;
    loop {
        let n = file.read(&mut chunk).await?;
        if n > 0 {
            decoder.push(&chunk[..n], &mut lines);
            if !send(&mut render, &mut lines, tx).await {
                return Ok(());
            }
            continue;
        }
        if !running {
            return Ok(());
        }
        tokio::select! {
            _ = tx.closed() => return Ok(()),
            _ = tokio::time::sleep(POLL) => {}
        }
        if checked.elapsed() >= ALIVE_CHECK {
            checked = tokio::time::Instant::now();
            running = still_running(&alive).await;
        }
    }
}

async fn still_running(alive: &Alive) -> bool {
    match alive.cri.container_status(&alive.id).await {
        Ok(s) => s.state == cri::api::ContainerState::ContainerRunning as i32,
        Err(e) => {
            tracing::debug!(container = %alive.id, error = %e, "container gone: follow ends");
            false
        }
    }
}

/// Renders `lines` (draining them) into one chunk and sends it; false once the client is
/// gone or the byte limit is reached.
async fn send(
    render: &mut Render,
    lines: &mut Vec<Line>,
    tx: &mpsc::Sender<Result<Bytes, std::io::Error>>,
) -> bool {
    let mut out = Vec::new();
    for line in lines.drain(..) {
        if render.done() {
            break;
        }
        if render.wanted(&line) {
            render.write(&line, &mut out);
        }
    }
    if !out.is_empty() && tx.send(Ok(Bytes::from(out))).await.is_err() {
        return false;
    }
    !render.done()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(chunks: &[&str]) -> Vec<(bool, String)> {
        let mut decoder = Decoder::default();
        let mut out = Vec::new();
        for c in chunks {
            decoder.push(c.as_bytes(), &mut out);
        }
        out.into_iter()
            .map(|l| (l.stderr, String::from_utf8(l.text).unwrap()))
            .collect()
    }

    #[test]
    fn entries_lose_their_prefix_and_partials_join_per_stream_in_completion_order() {
        let lines = decode(&[
            "2026-01-01T00:00:00.000000001Z stdout P hel",
            "lo\n2026-01-01T00:00:00.1Z stderr F oops\n",
            "2026-01-01T00:00:00.2Z stdout F  world\n",
            "2026-01-01T00:00:00.3Z stdout F\n",
            "garbage line\n2026-01-01T00:00:00.4Z stdout F:x tagged\n",
            "2026-01-01T00:00:00.5Z stdout F incomplete",
        ]);
        assert_eq!(
            lines,
            [
                (true, "oops".to_string()),
                (false, "hello world".to_string()),
                (false, String::new()),
                (false, "tagged".to_string()),
            ]
        );
    }

    #[test]
    fn render_filters_by_time_stamps_and_cuts_at_the_limit() {
        let mut out = Vec::new();
        let mut decoder = Decoder::default();
        decoder.push(
            b"2026-01-01T00:00:00Z stdout F old\n2026-01-01T00:00:02Z stdout F new\n",
            &mut out,
        );
        let options = LogOptions {
            since: Some("2026-01-01T00:00:01Z".parse().unwrap()),
            timestamps: true,
            limit_bytes: Some(24),
            ..Default::default()
        };
        let mut render = Render::new(&options);
        let mut shown = Vec::new();
        for line in &out {
            if render.wanted(line) {
                render.write(line, &mut shown);
            }
        }
        assert_eq!(
            String::from_utf8(shown).unwrap(),
            "2026-01-01T00:00:02Z new"
        );
        assert!(render.done());
    }
}
