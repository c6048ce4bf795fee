//! The HTTP side of the site filter: a layer over lwproxy's routes that rewrites what GETs of
//! EndpointSlices and Endpoints answer (an object, a list, a watch stream; JSON or protobuf),
//! ends their watches when the epoch moves, and answers a watch resuming from before the epoch
//! with a `410 Expired` ERROR event. Tables and metadata-only answers pass unchanged.

use std::collections::VecDeque;
use std::sync::Arc;

use apimachinery::ApiError;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;
use futures::StreamExt;
use serde_json::Value;
use tokio::sync::watch;

use super::{Closure, Served};

/// The most a filtered (non-watch) answer may hold.
const MAX_BODY: usize = 256 * 1024 * 1024;

/// `app` with its EndpointSlices and Endpoints filtered by `closure`.
pub(crate) fn layer(closure: Arc<Closure>, app: axum::Router) -> axum::Router {
    app.layer(axum::middleware::from_fn_with_state(closure, serve))
}

/// One GET this layer rewrites.
#[derive(Debug, PartialEq, Eq)]
struct Read {
    served: Served,
    watch: bool,
    /// A watch resuming from this resourceVersion (not a fresh start).
    resume: Option<u64>,
}

async fn serve(State(closure): State<Arc<Closure>>, req: Request, next: Next) -> Response {
    let Some(read) = classify(req.method(), req.uri().path(), req.uri().query()) else {
        return next.run(req).await;
    };
    let protobuf = accepts_protobuf(req.headers());
    if read.watch {
        // Notice a change the follower has not seen yet before deciding on the resume.
        if let Err(e) = closure.refresh().await {
            return error(ApiError::internal(format!(
                "reading the site filter's inputs: {e}"
            )));
        }
        let epoch = closure.epoch();
        if read.resume.is_some_and(|rv| rv < epoch) {
            return expired(protobuf, epoch);
        }
        let resp = next.run(req).await;
        return watch_response(closure, read.served, epoch, resp);
    }
    let resp = next.run(req).await;
    match body_response(&closure, read.served, resp).await {
        Ok(resp) => resp,
        Err(e) => error(e),
    }
}

/// Which GETs are of EndpointSlices or Endpoints, from the path and query.
fn classify(method: &Method, path: &str, query: Option<&str>) -> Option<Read> {
    if method != Method::GET {
        return None;
    }
    let rest = path
        .strip_prefix("/apis/discovery.k8s.io/v1/")
        .map(|r| (Served::EndpointSlices, r, "endpointslices"))
        .or_else(|| {
            path.strip_prefix("/api/v1/")
                .map(|r| (Served::Endpoints, r, "endpoints"))
        });
    let (served, rest, plural) = rest?;
    let (watch_prefix, rest) = match rest.strip_prefix("watch/") {
        Some(r) => (true, r),
        None => (false, rest),
    };
    let parts: Vec<&str> = rest.split('/').collect();
    match parts.as_slice() {
        [p] | ["namespaces", _, p] | ["namespaces", _, p, _] if *p == plural => {}
        _ => return None,
    }
    let param = |k: &str| {
        query
            .unwrap_or("")
            .split('&')
            .filter_map(|kv| kv.split_once('=').or(Some((kv, ""))))
            .find(|(key, _)| *key == k)
            .map(|(_, v)| v)
    };
    let watch = watch_prefix || matches!(param("watch"), Some("true" | "1"));
    let resume = match (param("resourceVersion"), param("sendInitialEvents")) {
        (_, Some("true")) => None,
        (Some(rv), _) => rv.parse::<u64>().ok().filter(|rv| *rv > 0),
        (None, _) => None,
    };
    Some(Read {
        served,
        watch,
        resume,
    })
}

fn accepts_protobuf(headers: &axum::http::HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with(kpb::MEDIA_TYPE))
}

fn content_type(resp: &Response) -> &str {
    resp.headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

/// A get or list answer, filtered.
async fn body_response(
    closure: &Closure,
    served: Served,
    resp: Response,
) -> Result<Response, ApiError> {
    if resp.status() != StatusCode::OK {
        return Ok(resp);
    }
    let protobuf = content_type(&resp).starts_with(kpb::MEDIA_TYPE);
    let (mut parts, body) = resp.into_parts();
    let bytes = axum::body::to_bytes(body, MAX_BODY)
        .await
        .map_err(|e| ApiError::internal(format!("reading the answer to filter: {e}")))?;
    let decoded = match protobuf {
        true => kpb::decode(&bytes).ok(),
        false => serde_json::from_slice::<Value>(&bytes).ok(),
    };
    let Some(mut value) = decoded else {
        return Ok(Response::from_parts(parts, Body::from(bytes)));
    };
    if !filter_value(closure, served, &mut value).await? {
        return Ok(Response::from_parts(parts, Body::from(bytes)));
    }
    let out = match protobuf {
        true => kpb::encode(value)
            .map_err(|e| ApiError::internal(format!("encoding the filtered answer: {e}")))?,
        // A Value always serializes.
        false => serde_json::to_vec(&value).expect("a JSON value serializes"),
    };
    parts.headers.remove(header::CONTENT_LENGTH);
    Ok(Response::from_parts(parts, Body::from(out)))
}

/// Filters an object or a list of them; true when something was removed (false for anything
/// else: a Table, metadata, a Status), so that an untouched answer goes out as it was.
async fn filter_value(
    closure: &Closure,
    served: Served,
    value: &mut Value,
) -> Result<bool, ApiError> {
    let kind = value["kind"].as_str().unwrap_or("");
    let (item, list) = match served {
        Served::EndpointSlices => ("EndpointSlice", "EndpointSliceList"),
        Served::Endpoints => ("Endpoints", "EndpointsList"),
    };
    let mut place = None;
    if kind == item {
        let removed = closure.filter(served, value, &mut place).await;
        return removed.map_err(inputs_error);
    }
    if kind != list {
        return Ok(false);
    }
    let mut removed = false;
    if let Some(items) = value["items"].as_array_mut() {
        for obj in items {
            removed |= closure
                .filter(served, obj, &mut place)
                .await
                .map_err(inputs_error)?;
        }
    }
    Ok(removed)
}

/// A watch stream, filtered event by event and ended when the epoch moves past `epoch`.
fn watch_response(closure: Arc<Closure>, served: Served, epoch: u64, resp: Response) -> Response {
    if resp.status() != StatusCode::OK {
        return resp;
    }
    let protobuf = content_type(&resp).starts_with(kpb::MEDIA_TYPE);
    let (mut parts, body) = resp.into_parts();
    parts.headers.remove(header::CONTENT_LENGTH);
    let stream = Stream {
        epochs: closure.epochs(),
        closure,
        served,
        protobuf,
        start: epoch,
        body: body.into_data_stream(),
        buf: Vec::new(),
        ready: VecDeque::new(),
        done: false,
    };
    let body = futures::stream::unfold(stream, |mut s| async move {
        let chunk = s.next().await?;
        Some((Ok::<_, std::convert::Infallible>(chunk), s))
    });
    Response::from_parts(parts, Body::from_stream(body))
}

/// One filtered watch in progress.
struct Stream {
    closure: Arc<Closure>,
    epochs: watch::Receiver<u64>,
    served: Served,
    protobuf: bool,
    /// The epoch the watch started in.
    start: u64,
    body: axum::body::BodyDataStream,
    /// Bytes of an event not complete yet.
    buf: Vec<u8>,
    /// Filtered events to send.
    ready: VecDeque<Bytes>,
    done: bool,
}

impl Stream {
    /// The next chunk to send; `None` ends the stream.
    async fn next(&mut self) -> Option<Bytes> {
        loop {
            if let Some(chunk) = self.ready.pop_front() {
                return Some(chunk);
            }
            if self.done {
                return None;
            }
            tokio::select! {
                changed = self.epochs.changed() => {
                    if changed.is_err() || *self.epochs.borrow_and_update() > self.start {
                        self.done = true;
                    }
                }
                chunk = self.body.next() => match chunk {
                    Some(Ok(bytes)) => {
                        self.buf.extend_from_slice(&bytes);
                        self.take_events().await;
                    }
                    // The inner stream ended (or failed): so does this one.
                    _ => self.done = true,
                },
            }
        }
    }

    /// Filters the complete events in `buf` into `ready`; ends the stream instead when the
    /// epoch moved.
    async fn take_events(&mut self) {
        while let Some(frame) = self.split() {
            let out = match filter_frame(&self.closure, self.served, self.protobuf, &frame).await {
                Ok(out) => out,
                Err(e) => {
                    tracing::warn!(error = %e, "filtering a watch event failed; ending the watch");
                    self.done = true;
                    return;
                }
            };
            if self.closure.epoch() > self.start {
                self.done = true;
                return;
            }
            self.ready.push_back(out);
        }
    }

    /// The next complete event in `buf` (a JSON line, or a length-prefixed protobuf frame).
    fn split(&mut self) -> Option<Vec<u8>> {
        let end = match self.protobuf {
            true => {
                let len: [u8; 4] = self.buf.get(..4)?.try_into().ok()?;
                let end = 4 + u32::from_be_bytes(len) as usize;
                (self.buf.len() >= end).then_some(end)?
            }
            false => self.buf.iter().position(|b| *b == b'\n')? + 1,
        };
        Some(self.buf.drain(..end).collect())
    }
}

/// One event, filtered (unchanged unless it carries an object of the served kind).
async fn filter_frame(
    closure: &Closure,
    served: Served,
    protobuf: bool,
    frame: &[u8],
) -> Result<Bytes, ApiError> {
    let decoded = match protobuf {
        true => kpb::read_watch_frames(frame)
            .ok()
            .and_then(|(mut events, _)| events.pop()),
        false => serde_json::from_slice::<Value>(frame).ok().map(|mut v| {
            let kind = v["type"].as_str().unwrap_or("").to_owned();
            (kind, v["object"].take())
        }),
    };
    let Some((kind, mut object)) = decoded else {
        return Ok(Bytes::copy_from_slice(frame));
    };
    if !matches!(kind.as_str(), "ADDED" | "MODIFIED" | "DELETED") {
        // A bookmark's resourceVersion is a resume point: the epoch is brought up to date
        // first, so that one past a change is never handed out on a stale stream.
        closure.refresh().await.map_err(inputs_error)?;
        return Ok(Bytes::copy_from_slice(frame));
    }
    if !filter_value(closure, served, &mut object).await? {
        return Ok(Bytes::copy_from_slice(frame));
    }
    match protobuf {
        true => kpb::watch_frame(&kind, object)
            .map(Bytes::from)
            .map_err(|e| ApiError::internal(format!("encoding a filtered event: {e}"))),
        false => {
            let event = serde_json::json!({"type": kind, "object": object});
            let mut line = serde_json::to_vec(&event).expect("a JSON value serializes");
            line.push(b'\n');
            Ok(Bytes::from(line))
        }
    }
}

/// A 200 watch answer with one ERROR event: 410 Expired, so that the client relists.
fn expired(protobuf: bool, epoch: u64) -> Response {
    let status = ApiError::expired(format!(
        "the site filter changed at resourceVersion {epoch}; list again"
    ))
    .to_status();
    let (media, body) = match protobuf {
        true => match kpb::watch_frame("ERROR", status.clone()) {
            Ok(frame) => (kpb::WATCH_MEDIA_TYPE, frame),
            Err(_) => ("application/json", json_line(status)),
        },
        false => ("application/json", json_line(status)),
    };
    let mut resp = Response::new(Body::from(body));
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(media));
    resp
}

fn json_line(status: Value) -> Vec<u8> {
    let event = serde_json::json!({"type": "ERROR", "object": status});
    let mut line = serde_json::to_vec(&event).expect("a JSON value serializes");
    line.push(b'\n');
    line
}

fn inputs_error(e: objstore::StoreError) -> ApiError {
    ApiError::internal(format!("reading the site filter's inputs: {e}"))
}

fn error(e: ApiError) -> Response {
    let mut resp = Response::new(Body::from(
        serde_json::to_vec(&e.to_status()).expect("a JSON value serializes"),
    ));
    *resp.status_mut() = StatusCode::from_u16(e.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(path: &str, query: Option<&str>) -> Option<Read> {
        classify(&Method::GET, path, query)
    }

    #[test]
    fn endpoint_slice_and_endpoints_reads_are_recognised_with_their_resume_point() {
        let r = read(
            "/apis/discovery.k8s.io/v1/namespaces/d/endpointslices",
            Some("watch=true&resourceVersion=12"),
        )
        .unwrap();
        assert_eq!(
            r,
            Read {
                served: Served::EndpointSlices,
                watch: true,
                resume: Some(12)
            }
        );
        let r = read("/api/v1/watch/namespaces/d/endpoints/s", None).unwrap();
        assert_eq!(
            r,
            Read {
                served: Served::Endpoints,
                watch: true,
                resume: None
            }
        );
        let r = read(
            "/apis/discovery.k8s.io/v1/endpointslices",
            Some("watch=1&resourceVersion=0"),
        )
        .unwrap();
        assert_eq!(r.resume, None, "resourceVersion 0 starts afresh");
        let r = read(
            "/apis/discovery.k8s.io/v1/endpointslices",
            Some("watch=1&resourceVersion=5&sendInitialEvents=true"),
        )
        .unwrap();
        assert_eq!(r.resume, None, "a streaming list starts afresh");
        let r = read("/api/v1/endpoints", Some("resourceVersion=5")).unwrap();
        assert!(!r.watch);
    }

    #[test]
    fn other_reads_and_writes_pass_untouched() {
        assert!(read("/api/v1/pods", None).is_none());
        assert!(read("/api/v1/namespaces/d/services/endpoints", None).is_none());
        assert!(read("/apis/discovery.k8s.io/v1beta1/endpointslices", None).is_none());
        assert!(classify(&Method::POST, "/api/v1/namespaces/d/endpoints", None).is_none());
    }
}
