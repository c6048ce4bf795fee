//! Watch streams: one compact JSON event per line, flushed as it is produced.
//!
//! Start: `resourceVersion` unset or `"0"` sends the current state as ADDED events, then the
//! changes after that snapshot; `N` sends the changes after `N` (a revision the store has not
//! reached within [`TOO_LARGE_WAIT_SECS`], or one older than its change log, is reported as an
//! in-stream ERROR with a 410 `Expired` Status so that kube-rs and client-go both relist).
//! `sendInitialEvents=true` (streaming lists) sends the snapshot as ADDED events, then a
//! BOOKMARK annotated `k8s.io/initial-events-end` at the snapshot revision, then changes; a
//! legacy watch from the current state that allows bookmarks gets that BOOKMARK too.
//!
//! Bookmarks (`allowWatchBookmarks=true`) go out every [`BOOKMARK_INTERVAL`] and when the
//! watch times out. Their revision never claims more than was delivered: the store revision
//! when the watcher is known to be live and drained, else the last revision handed out.
//!
//! The stream is pulled by the HTTP body, so a slow client stops pulling; the store then ends
//! the lagging watcher (it never waits for one) and the stream ends after what was buffered.
//! The client re-watches from the last resourceVersion it saw. Dropping the body (client
//! gone) drops the store watcher at once. At server shutdown the body ends after a whole
//! event ([`crate::serve::Endless`]).

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use apimachinery::{ApiError, ResourceInfo};
use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use bytes::Bytes;
use futures::{FutureExt, Stream, StreamExt};
use objstore::{EventKind, StoreError, StoredObject, WatchEvent, WatchOptions, Watcher};
use tokio::time::{Instant, sleep_until};

use super::Target;
use super::error::{TOO_LARGE_WAIT_SECS, from_store};
use super::negotiate::Output;
use super::query::{Params, ReadParams};
use super::read::{reached, select_all};
use super::render::{self, JSON};
use crate::Api;

/// How often a watch that asked for bookmarks gets one.
pub(crate) const BOOKMARK_INTERVAL: Duration = Duration::from_secs(60);

/// Live events a watch may have pending before the store ends it as lagging.
const WATCH_BUFFER: usize = 1024;

/// Without `timeoutSeconds` a watch lasts between this and twice this (as apiserver's
/// `--min-request-timeout` default).
const MIN_REQUEST_TIMEOUT: Duration = Duration::from_secs(1800);

/// GET with `watch=true` (or the `/watch/` prefix).
pub(crate) async fn serve(
    api: &Api,
    target: &Target,
    params: &Params,
    output: Output,
) -> Result<Response, ApiError> {
    let read = ReadParams::parse(params, true)?;
    let info = target.info.clone();
    let ns = target.namespace.as_deref();
    let name = target.name.as_deref();
    // Refuse bad selectors with a plain 400 before the stream starts.
    let filter = super::select::filter(&info, ns, name, &read)?;
    let requested = read.revision()?;
    let mut initial = VecDeque::new();
    let mut end_bookmark = None;
    let from = match (read.send_initial_events, requested) {
        (Some(true), rv) | (None, rv @ None) => {
            if let Some(rv) = rv
                && !reached(&api.store, rv).await
            {
                return Ok(expired_stream(output, too_new(rv, api.store.revision())));
            }
            let snapshot = select_all(api, &info, ns, name, &read).await?;
            initial.extend(snapshot.items);
            // Streaming lists need the end marker; legacy watches that asked for bookmarks get
            // it too, as from kube-apiserver with the WatchList feature on.
            if read.send_initial_events == Some(true) || read.allow_bookmarks {
                end_bookmark = Some(snapshot.revision);
            }
            snapshot.revision
        }
        (Some(false), None) => api.store.revision(),
        (_, Some(rv)) => {
            if !reached(&api.store, rv).await {
                return Ok(expired_stream(output, too_new(rv, api.store.revision())));
            }
            rv
        }
    };
    let opts = WatchOptions {
        from_revision: from,
        resource: Some(info.store_resource()),
        filter,
        buffer: WATCH_BUFFER,
    };
    let now = Instant::now();
    let mut session = Session {
        store: api.store.clone(),
        info,
        output,
        include: read.include_object,
        initial,
        end_bookmark,
        opts: Some(opts),
        watcher: None,
        bookmarks: read.allow_bookmarks,
        next_bookmark: now + BOOKMARK_INTERVAL,
        deadline: now + read.timeout.unwrap_or_else(default_timeout),
        live_floor: from,
        caught_up: false,
        done: false,
    };
    if session.initial.is_empty() {
        match session.start() {
            Ok(()) => {}
            Err(e) if e.code == 410 => return Ok(expired_stream(output, e)),
            Err(e) => return Err(e),
        }
    }
    Ok(stream_response(output, session.into_stream().boxed()))
}

/// One watch in progress.
struct Session {
    store: objstore::Store,
    info: Arc<ResourceInfo>,
    output: Output,
    include: apimachinery::table::IncludeObject,
    /// Synthetic ADDED events still to send.
    initial: VecDeque<Arc<StoredObject>>,
    /// The `k8s.io/initial-events-end` bookmark to send after them.
    end_bookmark: Option<u64>,
    /// What to watch, until the store watcher is registered.
    opts: Option<WatchOptions>,
    /// Registered after the initial events (if any) went out, so that changes made while they
    /// were sent come from the change log, not from the bounded live buffer.
    watcher: Option<Watcher>,
    bookmarks: bool,
    next_bookmark: Instant,
    deadline: Instant,
    /// The start revision, then the store revision right after the watcher registered.
    live_floor: u64,
    /// The watcher has finished replaying history: an empty watcher means "nothing pending".
    caught_up: bool,
    done: bool,
}

/// What one step of the event loop produced.
enum Step {
    Line(Bytes),
    End,
}

// === impl Session ===

impl Session {
    /// Registers the store watcher, once.
    fn start(&mut self) -> Result<(), ApiError> {
        let Some(opts) = self.opts.take() else {
            return Ok(());
        };
        let from = opts.from_revision;
        self.watcher = Some(self.store.watch(opts).map_err(from_store)?);
        // Every change up to this revision has been offered to the watcher or is in its replay
        // range; an event after it is live, so the replay is over.
        self.live_floor = self.store.revision();
        self.caught_up = from >= self.live_floor;
        Ok(())
    }

    fn into_stream(self) -> impl Stream<Item = Result<Bytes, Infallible>> + Send {
        futures::stream::unfold(self, |mut s| async move {
            s.next_line().await.map(|line| (Ok(line), s))
        })
    }

    async fn next_line(&mut self) -> Option<Bytes> {
        if self.done {
            return None;
        }
        if let Some(obj) = self.initial.pop_front() {
            return Some(self.event_line(EventKind::Added, &obj, None));
        }
        if let Some(rv) = self.end_bookmark.take() {
            return Some(render::watch_event_json(
                self.output,
                "BOOKMARK",
                render::bookmark(&self.info, rv, true),
            ));
        }
        if let Err(e) = self.start() {
            self.done = true;
            return Some(error_line(self.output, &e));
        }
        let step = tokio::select! {
            biased;
            _ = sleep_until(self.deadline) => self.timed_out(),
            _ = sleep_until(self.next_bookmark), if self.bookmarks => self.bookmark_due(),
            item = next_event(&mut self.watcher) => self.on_item(item),
        };
        match step {
            Step::Line(line) => Some(line),
            Step::End => {
                self.done = true;
                None
            }
        }
    }

    /// The deadline passed: a last bookmark (if wanted), then the end of the body.
    fn timed_out(&mut self) -> Step {
        if !self.bookmarks {
            return Step::End;
        }
        match self.bookmark_or_event() {
            Ok(rv) => {
                self.done = true;
                Step::Line(self.bookmark_line(rv))
            }
            // Deliver what is waiting first; the deadline fires again right after.
            Err(step) => step,
        }
    }

    /// A bookmark is due: send it unless an event is waiting (that goes first, and the
    /// bookmark stays due).
    fn bookmark_due(&mut self) -> Step {
        match self.bookmark_or_event() {
            Ok(rv) => {
                self.next_bookmark = Instant::now() + BOOKMARK_INTERVAL;
                Step::Line(self.bookmark_line(rv))
            }
            Err(step) => step,
        }
    }

    /// The revision a bookmark may claim now, or the event that must go out before it.
    fn bookmark_or_event(&mut self) -> Result<u64, Step> {
        if !self.caught_up && self.watcher.as_ref().is_some_and(Watcher::replayed) {
            // The replay is over and nothing it selected is left: a watch that matched none of
            // the replayed changes (a namespaced, field-selected one) has seen them all too.
            self.caught_up = true;
        }
        let rv = self.bookmark_revision();
        if self.caught_up {
            // Live: an empty channel now means every change up to `rv` was delivered.
            if let Some(item) = next_event(&mut self.watcher).now_or_never() {
                return Err(self.on_item(item));
            }
        }
        Ok(rv)
    }

    /// The highest revision a bookmark may claim. Read before polling the watcher: changes
    /// up to the store revision were offered to it before that revision became visible.
    fn bookmark_revision(&self) -> u64 {
        let last = self
            .watcher
            .as_ref()
            .map_or(self.live_floor, Watcher::last_revision);
        if self.caught_up {
            self.store.revision().max(last)
        } else {
            last
        }
    }

    fn bookmark_line(&self, rv: u64) -> Bytes {
        render::watch_event_json(
            self.output,
            "BOOKMARK",
            render::bookmark(&self.info, rv, false),
        )
    }

    fn on_item(&mut self, item: Option<Result<WatchEvent, StoreError>>) -> Step {
        match item {
            Some(Ok(event)) => {
                if event.revision > self.live_floor {
                    self.caught_up = true;
                }
                let rv = (event.kind == EventKind::Deleted).then_some(event.revision);
                Step::Line(self.event_line(event.kind, &event.object, rv))
            }
            // The client fell behind: end the stream; it re-watches from its last RV.
            Some(Err(StoreError::WatcherLagged { .. })) => {
                tracing::debug!(resource = %self.info.plural, "watcher lagged; ending the stream");
                Step::End
            }
            Some(Err(e)) => {
                self.done = true;
                Step::Line(error_line(self.output, &from_store(e)))
            }
            None => Step::End,
        }
    }

    /// An event line; an object that cannot be rendered ends the stream with an ERROR.
    fn event_line(&mut self, kind: EventKind, obj: &StoredObject, rv: Option<u64>) -> Bytes {
        match render::single(&self.info, self.output, self.include, obj, rv) {
            Ok(object) => render::watch_event(self.output, kind.as_str(), object),
            Err(e) => {
                self.done = true;
                self.initial.clear();
                error_line(self.output, &e)
            }
        }
    }
}

/// The next store event; `None` (the end) when there is no watcher.
async fn next_event(watcher: &mut Option<Watcher>) -> Option<Result<WatchEvent, StoreError>> {
    match watcher {
        Some(w) => w.next().await,
        None => None,
    }
}

/// A 200 watch response whose body is `stream`.
fn stream_response(
    output: Output,
    stream: futures::stream::BoxStream<'static, Result<Bytes, Infallible>>,
) -> Response {
    let mut resp = Response::new(Body::from_stream(stream));
    *resp.status_mut() = StatusCode::OK;
    let media_type = match output {
        Output::Protobuf => kpb::WATCH_MEDIA_TYPE,
        _ => JSON,
    };
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(media_type));
    resp.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    // Ended at a frame boundary when the server shuts down.
    resp.extensions_mut().insert(crate::serve::Endless);
    resp
}

/// A 200 watch response with one ERROR event, as apiserver reports watch failures.
fn expired_stream(output: Output, error: ApiError) -> Response {
    let line = error_line(output, &error);
    stream_response(
        output,
        futures::stream::once(async move { Ok(line) }).boxed(),
    )
}

fn error_line(output: Output, error: &ApiError) -> Bytes {
    render::watch_event_json(output, "ERROR", render::to_bytes(&error.to_status()))
}

/// A resourceVersion the store did not reach in time. Reported as 410 so that both kube-rs
/// (which relists only on 410) and client-go relist from scratch.
fn too_new(requested: u64, current: u64) -> ApiError {
    ApiError::expired(format!(
        "too large resource version: {requested}, current: {current} (waited {TOO_LARGE_WAIT_SECS}s)"
    ))
}

/// Between [`MIN_REQUEST_TIMEOUT`] and twice that, spread so that watches do not all end
/// together.
fn default_timeout() -> Duration {
    let jitter = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos() as u64)
        .unwrap_or(0)
        % MIN_REQUEST_TIMEOUT.as_secs();
    MIN_REQUEST_TIMEOUT + Duration::from_secs(jitter)
}
