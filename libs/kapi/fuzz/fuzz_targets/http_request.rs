//! Arbitrary bytes as one HTTP/1.1 connection's input to the Kubernetes REST routes over the real
//! local backend (SQLite store): parsing of the request line, headers, paths, query parameters,
//! selectors, content types and bodies (JSON, patches) must answer or close, never panic, and
//! never answer 500.
#![no_main]

use std::sync::OnceLock;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use libfuzzer_sys::fuzz_target;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

struct World {
    rt: tokio::runtime::Runtime,
    api: kapi::Api,
    _dir: tempfile::TempDir,
}

static WORLD: OnceLock<World> = OnceLock::new();

fuzz_target!(|data: &[u8]| {
    let world = WORLD.get_or_init(World::new);
    if let Some(status) = world.rt.block_on(world.exchange(data)) {
        assert!(status != 500, "500 for input {:?}", String::from_utf8_lossy(data));
    }
});

impl World {
    fn new() -> World {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        let dir = tempfile::TempDir::new().expect("a temp dir");
        let writer = objstore::Writer::open(dir.path().join("fuzz.db"), Default::default())
            .expect("the store opens");
        let store = writer.reader();
        let registry = kapi::Registry::new(apimachinery::catalog::builtins());
        let backend = kapi::local::LocalBackend::new(writer, registry.clone(), Default::default());
        rt.block_on(backend.ensure_namespaces(&["default", "kube-system"]))
            .expect("namespaces");
        let api = kapi::Api {
            registry,
            store,
            backend,
            version: serde_json::json!({"major": "1", "minor": "34", "gitVersion": "v1.34.0-fuzz"}),
            authorizer: None,
            default_user: Some(kapi::User {
                name: "admin".into(),
                groups: vec!["system:masters".into()],
            }),
        };
        World { rt, api, _dir: dir }
    }

    /// Writes `input` to a fresh connection, closes the writing side and reads the first
    /// response's status (`None`: the server closed without a response, or it streams).
    async fn exchange(&self, input: &[u8]) -> Option<u16> {
        let (mut client, server) = tokio::io::duplex(1 << 20);
        let service = TowerToHyperService::new(kapi::router(self.api.clone()));
        // The client closes its writing side after the request: a half-closed connection
        // still gets its answers.
        let conn = hyper::server::conn::http1::Builder::new()
            .half_close(true)
            .serve_connection(TokioIo::new(server), service);
        let talk = async {
            client.write_all(input).await.ok()?;
            client.shutdown().await.ok()?;
            let read = read_status(&mut client);
            tokio::time::timeout(Duration::from_secs(5), read).await.ok()?
        };
        let (mut conn, mut talk) = (Box::pin(conn), Box::pin(talk));
        // A watch streams on: its head is all that is read.
        let answered = tokio::select! {
            status = &mut talk => Some(status),
            _ = &mut conn => None,
        };
        match answered {
            Some(status) => status,
            None => {
                // The server's end goes with the connection: the rest reads to its EOF.
                drop(conn);
                talk.await
            }
        }
    }
}

/// The status code of the first response head on `io`.
async fn read_status(io: &mut tokio::io::DuplexStream) -> Option<u16> {
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = io.read(&mut buf).await.ok()?;
        if n == 0 {
            return None;
        }
        head.extend_from_slice(&buf[..n]);
    }
    let line = head.split(|b| *b == b'\n').next()?;
    std::str::from_utf8(line.get(9..12)?).ok()?.parse().ok()
}
