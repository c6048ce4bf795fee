//! A stub kubelet API on a loopback listener, and node dialers for it: what the API server's
//! kubelet streams are tested against.
//!
//! - `/containerLogs/...` answers `line 1\n` (with `previous=true`, then cuts the
//!   connection at [`StubKubelet::end_log`]); followed (once), then each line the test sends
//!   with [`StubKubelet::write_log`], until [`StubKubelet::end_log`];
//! - `/exec/...`, `/attach/...`, `/portForward/...` with an upgrade answer `101` with the
//!   upgrade asked for and echo every byte; with `command=fail` they answer `400`, with
//!   `command=hangup` they close after the first bytes;
//! - anything else answers `kubelet <path>`.
//!
//! Every request is recorded (method, path and query, headers).
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::Response;
use hyper_util::rt::TokioIo;
use kapi::nodes::{DialError, NodeDialer, NodeStream};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

/// One request the stub kubelet received.
#[derive(Clone, Debug)]
pub struct Seen {
    pub method: Method,
    pub path: String,
    pub headers: HeaderMap,
}

/// The stub kubelet: where it listens and what it was asked.
#[derive(Clone)]
pub struct StubKubelet {
    pub addr: SocketAddr,
    state: Arc<Stub>,
}

struct Stub {
    seen: Mutex<Vec<Seen>>,
    log_tx: Mutex<Option<mpsc::Sender<String>>>,
    log_rx: Mutex<Option<mpsc::Receiver<String>>>,
}

/// Dials `node` by TCP to a stub kubelet; any other node is not connected.
pub struct TestDialer {
    pub node: String,
    pub kubelet: SocketAddr,
    pub dials: AtomicUsize,
}

/// Answers every dial with `NotConnected`, counting them.
#[derive(Default)]
pub struct NotConnected {
    pub dials: AtomicUsize,
}

// === impl StubKubelet ===

impl StubKubelet {
    pub async fn start() -> StubKubelet {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        let addr = listener.local_addr().expect("an address");
        let (tx, rx) = mpsc::channel(16);
        let state = Arc::new(Stub {
            seen: Mutex::new(Vec::new()),
            log_tx: Mutex::new(Some(tx)),
            log_rx: Mutex::new(Some(rx)),
        });
        let app = axum::Router::new()
            .fallback(answer)
            .with_state(state.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        StubKubelet { addr, state }
    }

    /// The requests received so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.state.seen.lock().expect("lock").clone()
    }

    /// The paths (with queries) received so far.
    pub fn paths(&self) -> Vec<String> {
        self.seen().into_iter().map(|s| s.path).collect()
    }

    /// Writes one more line to the log being streamed.
    pub async fn write_log(&self, line: &str) {
        let tx = self.state.log_tx.lock().expect("lock").clone();
        tx.expect("the log is still open")
            .send(line.to_owned())
            .await
            .expect("the log stream is read");
    }

    /// Ends the log being streamed.
    pub fn end_log(&self) {
        self.state.log_tx.lock().expect("lock").take();
    }

    /// A dialer reaching this kubelet as the API of `node`.
    pub fn dialer(&self, node: &str) -> Arc<TestDialer> {
        Arc::new(TestDialer {
            node: node.to_owned(),
            kubelet: self.addr,
            dials: AtomicUsize::new(0),
        })
    }
}

async fn answer(State(stub): State<Arc<Stub>>, mut req: Request) -> Response {
    let path = req
        .uri()
        .path_and_query()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_default();
    stub.seen.lock().expect("lock").push(Seen {
        method: req.method().clone(),
        path: path.clone(),
        headers: req.headers().clone(),
    });
    if path.starts_with("/containerLogs/") && path.contains("previous=true") {
        return cut_log(&stub);
    }
    if path.starts_with("/containerLogs/") {
        return log(&stub, path.contains("follow=true"));
    }
    let stream = ["/exec/", "/attach/", "/portForward/"]
        .iter()
        .any(|p| path.starts_with(p));
    if !stream {
        return Response::new(Body::from(format!("kubelet {path}")));
    }
    if path.contains("command=fail") {
        let mut resp = Response::new(Body::from("container not found (\"nope\")"));
        *resp.status_mut() = StatusCode::BAD_REQUEST;
        return resp;
    }
    let Some(upgrade) = req.headers().get(header::UPGRADE).cloned() else {
        let mut resp = Response::new(Body::from("an upgrade is needed"));
        *resp.status_mut() = StatusCode::BAD_REQUEST;
        return resp;
    };
    let on_upgrade = hyper::upgrade::on(&mut req);
    let hangup = path.contains("command=hangup");
    tokio::spawn(async move {
        let Ok(upgraded) = on_upgrade.await else {
            return;
        };
        echo(TokioIo::new(upgraded), hangup).await;
    });
    Response::builder()
        .status(StatusCode::SWITCHING_PROTOCOLS)
        .header(header::CONNECTION, "Upgrade")
        .header(header::UPGRADE, upgrade)
        .header("x-stream-protocol-version", "v4.channel.k8s.io")
        .body(Body::empty())
        .expect("a response")
}

/// `line 1\n`, then (when followed) the lines the test writes.
fn log(stub: &Stub, follow: bool) -> Response {
    let rx = follow
        .then(|| stub.log_rx.lock().expect("lock").take())
        .flatten();
    let Some(rx) = rx else {
        return Response::new(Body::from("line 1\n"));
    };
    let first = futures::stream::once(async { Ok::<_, std::io::Error>("line 1\n".to_owned()) });
    let rest = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|line| (Ok(line), rx))
    });
    use futures::StreamExt;
    Response::new(Body::from_stream(first.chain(rest)))
}

/// `line 1\n`, then, once the test ends the log, the connection is cut (the node went away).
fn cut_log(stub: &Stub) -> Response {
    let mut rx = stub.log_rx.lock().expect("lock").take();
    let line = futures::stream::once(async { Ok("line 1\n".to_owned()) });
    let cut = futures::stream::once(async move {
        if let Some(rx) = rx.as_mut() {
            while rx.recv().await.is_some() {}
        }
        Err(std::io::Error::other("node gone"))
    });
    use futures::StreamExt;
    Response::new(Body::from_stream(line.chain(cut)))
}

/// Echoes every byte until the peer ends; with `hangup`, closes after the first read.
async fn echo<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(mut io: S, hangup: bool) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match io.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if io.write_all(&buf[..n]).await.is_err() || hangup {
            break;
        }
    }
    let _ = io.shutdown().await;
}

// === impl TestDialer ===

#[async_trait::async_trait]
impl NodeDialer for TestDialer {
    async fn dial(&self, node: &str) -> Result<Box<dyn NodeStream>, DialError> {
        self.dials.fetch_add(1, Ordering::SeqCst);
        if node != self.node {
            return Err(DialError::NotConnected {
                node: node.to_owned(),
            });
        }
        let tcp = TcpStream::connect(self.kubelet)
            .await
            .map_err(|e| DialError::Failed {
                node: node.to_owned(),
                reason: e.to_string(),
            })?;
        Ok(Box::new(tcp))
    }
}

// === impl NotConnected ===

#[async_trait::async_trait]
impl NodeDialer for NotConnected {
    async fn dial(&self, node: &str) -> Result<Box<dyn NodeStream>, DialError> {
        self.dials.fetch_add(1, Ordering::SeqCst);
        Err(DialError::NotConnected {
            node: node.to_owned(),
        })
    }
}
