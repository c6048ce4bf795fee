use std::time::Duration;

use beehive::{Running, Runtime};
use objstore::{ObjKey, Store, StoreConfig, Writer};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::*;
use crate::HUB_MODULE;

/// Stands in for a module that talks to metamanager; forwards what it receives to the test.
struct Probe {
    name: &'static str,
    out: mpsc::UnboundedSender<Message>,
}

#[beehive::async_trait]
impl Module for Probe {
    fn name(&self) -> &str {
        self.name
    }
    fn group(&self) -> &str {
        "probe"
    }
    async fn run(
        &self,
        _: Context,
        mb: &mut Mailbox,
        shutdown: CancellationToken,
    ) -> Result<(), ModuleError> {
        loop {
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => return Ok(()),
                m = mb.recv() => match m {
                    Some(m) => { let _ = self.out.send(m); }
                    None => return Ok(()),
                },
            }
        }
    }
}

struct Edge {
    _dir: tempfile::TempDir,
    path: std::path::PathBuf,
    handle: Handle,
    store: Store,
    /// The link's way in, as edgehub holds it.
    downstream: Downstream,
    running: Running,
    /// What reaches the module named edgehub (commit reports).
    acks: mpsc::UnboundedReceiver<Message>,
}

fn edge() -> Edge {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("edge.db");
    let handle = Handle::new(Writer::open(&path, StoreConfig::default()).unwrap());
    let (out, acks) = mpsc::unbounded_channel();
    let mut rt = Runtime::new();
    let meta = MetaManager::new(Config::default(), handle.clone());
    let downstream = meta.downstream();
    rt.register(meta);
    rt.register(Probe {
        name: HUB_MODULE,
        out,
    });
    let running = rt.start(CancellationToken::new()).unwrap();
    Edge {
        _dir: dir,
        path,
        store: handle.reader(),
        handle,
        downstream,
        running,
        acks,
    }
}

fn pod(name: &str, uid: &str, rv: &str, node: &str) -> Message {
    let obj = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": uid, "resourceVersion": rv, "labels": {"app": "web"}},
        "spec": {"nodeName": node},
    });
    Message::new()
        .route(
            HUB_MODULE,
            GROUP,
            format!("default/pods/{name}"),
            Operation::Update,
        )
        .with_resource_version(rv)
        .with_content(serde_json::to_vec(&obj).unwrap())
}

fn deletion(name: &str, uid: &str, rv: &str) -> Message {
    let mut m = pod(name, uid, rv, "n1");
    m.router.operation = Operation::Delete;
    m
}

impl Edge {
    /// Sends `msg` the way the link does.
    async fn send(&self, msg: Message) {
        self.downstream.send(msg).await.unwrap();
    }

    async fn next_ack(&mut self) -> Message {
        tokio::time::timeout(Duration::from_secs(5), self.acks.recv())
            .await
            .expect("an answer within 5 s")
            .unwrap()
    }

    async fn held(&self, name: &str) -> Option<std::sync::Arc<StoredObject>> {
        self.store
            .get(&ObjKey::new("pods", "default", name))
            .await
            .unwrap()
    }
}

#[tokio::test]
async fn a_downstream_object_is_acked_only_once_it_is_on_disk() {
    let mut edge = edge();
    let msg = pod("web-1", "u1", "100", "n1");
    let id = msg.id();
    edge.send(msg).await;
    let ack = edge.next_ack().await;
    assert_eq!(ack.parent_id(), Some(id));
    assert_eq!(ack.router.operation, Operation::Response);
    // A second, independent connection to the file sees the object as soon as the ack exists.
    let other = Writer::open(&edge.path, StoreConfig::default()).unwrap();
    let held = other
        .get(&ObjKey::new("pods", "default", "web-1"))
        .await
        .unwrap()
        .expect("acked object on disk");
    assert_eq!(held.resource_version, "100", "the cloud's version is kept");
    assert_eq!(held.field("spec.nodeName"), Some("n1"));
    let json: Value = serde_json::from_slice(&held.value).unwrap();
    assert_eq!(
        json["metadata"]["resourceVersion"],
        held.revision.to_string(),
        "clients see the local revision"
    );
}

#[tokio::test]
async fn a_module_that_names_itself_edgehub_cannot_write_as_the_cloud() {
    let edge = edge();
    // Through the mailbox, as any local module sends, claiming to come from edgehub.
    let forged = pod("forged", "u1", "100", "n1");
    assert_eq!(forged.router.source, HUB_MODULE);
    let resp = edge
        .running
        .context()
        .send_sync(NAME, forged, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(resp.router.operation, Operation::Response);
    assert!(
        edge.held("forged").await.is_none(),
        "a local message was applied as the cloud's object"
    );
    let queued = edge.store.outbox_peek(10).await.unwrap();
    assert_eq!(queued.len(), 1, "it is a local write, queued for the cloud");
    assert_eq!(queued[0].key, "update:default/pods/forged");
}

#[tokio::test]
async fn a_downstream_write_can_be_awaited_until_it_is_on_disk() {
    let edge = edge();
    let msg = pod("p", "u1", "7", "n1");
    let id = msg.id();
    let report = edge.downstream.apply(msg).await.unwrap();
    assert_eq!(
        (report.router.operation.clone(), report.parent_id()),
        (Operation::Response, Some(id))
    );
    assert_eq!(edge.held("p").await.unwrap().resource_version, "7");
    let mut refused = pod("q", "u2", "1", "n1");
    refused.content = Bytes::from_static(b"{not json");
    let report = edge.downstream.apply(refused).await.unwrap();
    assert_eq!(report.router.operation, Operation::Error);
}

#[tokio::test]
async fn duplicates_and_older_versions_are_acked_without_changing_anything() {
    let mut edge = edge();
    edge.send(pod("p", "u1", "10", "n1")).await;
    edge.next_ack().await;
    let first = edge.held("p").await.unwrap();
    for rv in ["10", "9", "2"] {
        edge.send(pod("p", "u1", rv, "other")).await;
        assert_eq!(edge.next_ack().await.router.operation, Operation::Response);
    }
    let now = edge.held("p").await.unwrap();
    assert_eq!(
        (now.revision, now.resource_version.as_str()),
        (first.revision, "10")
    );
    assert_eq!(now.field("spec.nodeName"), Some("n1"));
    edge.send(pod("p", "u1", "11", "n2")).await;
    edge.next_ack().await;
    assert_eq!(
        edge.held("p").await.unwrap().field("spec.nodeName"),
        Some("n2")
    );
}

#[tokio::test]
async fn a_stale_delete_does_not_remove_a_recreated_object() {
    let mut edge = edge();
    edge.send(pod("p", "u-new", "20", "n1")).await;
    edge.next_ack().await;
    edge.send(deletion("p", "u-old", "15")).await;
    edge.next_ack().await;
    assert!(
        edge.held("p").await.is_some(),
        "a delete of the old uid removed the new object"
    );
    edge.send(deletion("p", "u-new", "21")).await;
    edge.next_ack().await;
    assert!(edge.held("p").await.is_none());
}

#[tokio::test]
async fn a_malformed_message_gets_an_error_and_the_rest_of_the_batch_applies() {
    let mut edge = edge();
    let mut bad = pod("bad", "u", "1", "n1");
    bad.content = Bytes::from_static(b"{not json");
    let bad_id = bad.id();
    let mut no_name = pod("x", "u", "1", "n1");
    no_name.router.resource = "default/pods".into();
    edge.send(bad).await;
    edge.send(no_name).await;
    edge.send(pod("good", "u2", "1", "n1")).await;
    let mut errors = 0;
    for _ in 0..3 {
        let ack = edge.next_ack().await;
        if ack.router.operation == Operation::Error {
            errors += 1;
            if ack.parent_id() == Some(bad_id) {
                assert!(String::from_utf8_lossy(&ack.content).contains("default/pods/bad"));
            }
        }
    }
    assert_eq!(errors, 2);
    assert!(edge.held("good").await.is_some());
}

#[tokio::test]
async fn queries_are_answered_from_the_store() {
    let mut edge = edge();
    for (name, node) in [("a", "n1"), ("b", "n2"), ("c", "n1")] {
        edge.send(pod(name, name, "1", node)).await;
        edge.next_ack().await;
    }
    let ctx = edge.running.context();
    let query = |resource: &str, content: &'static str| {
        Message::new()
            .route("edged", GROUP, resource.to_string(), Operation::Query)
            .with_content(content)
    };
    let resp = ctx
        .send_sync(
            NAME,
            query("default/pods", r#"{"fieldSelector":"spec.nodeName=n1"}"#),
            Duration::from_secs(5),
        )
        .await
        .unwrap();
    let items: Vec<Value> = serde_json::from_slice(&resp.content).unwrap();
    let names: Vec<_> = items
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["a", "c"]);
    let resp = ctx
        .send_sync(NAME, query("default/pods/b", ""), Duration::from_secs(5))
        .await
        .unwrap();
    let item: Value = serde_json::from_slice(&resp.content).unwrap();
    assert_eq!(item["spec"]["nodeName"], "n2");
    let resp = ctx
        .send_sync(NAME, query("default/pods/zzz", ""), Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(&resp.content[..], b"null");
    let resp = ctx
        .send_sync(NAME, query("nonsense", ""), Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(resp.router.operation, Operation::Error);
}

#[tokio::test]
async fn local_writes_go_to_the_outbox_coalesced_by_target() {
    let edge = edge();
    let ctx = edge.running.context();
    let status = |phase: &str| {
        Message::new()
            .route("edged", GROUP, "default/pods/web-1", Operation::Update)
            .with_content(format!(r#"{{"status":{{"phase":"{phase}"}}}}"#))
    };
    for phase in ["Pending", "Running"] {
        let resp = ctx
            .send_sync(NAME, status(phase), Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(resp.router.operation, Operation::Response);
    }
    let queued = edge.store.outbox_peek(10).await.unwrap();
    assert_eq!(
        queued.len(),
        1,
        "the newer status replaced the unsent older one"
    );
    let msg = beehive::codec::decode(&queued[0].payload).unwrap();
    assert!(String::from_utf8_lossy(&msg.content).contains("Running"));
    assert!(
        !msg.header.sync,
        "the queued copy expects no reply from the cloud"
    );
    assert!(
        edge.store
            .get(&ObjKey::new("pods", "default", "web-1"))
            .await
            .unwrap()
            .is_none(),
        "local writes are not applied as cloud state"
    );
}

/// A pod of about 8 KiB, so a few of them need new pages in the file.
fn big_pod(name: &str, rv: &str) -> Message {
    let mut msg = pod(name, &format!("uid-{name}"), rv, "n1");
    let mut obj: Value = serde_json::from_slice(&msg.content).unwrap();
    obj["metadata"]["annotations"] = json!({ "filler": "x".repeat(8 * 1024) });
    msg.content = serde_json::to_vec(&obj).unwrap().into();
    msg
}

#[tokio::test]
async fn writes_the_store_cannot_take_are_held_unacked_and_applied_once_there_is_room() {
    let mut edge = edge();
    let handle = edge.handle.clone();
    edge.send(pod("first", "u0", "1", "n1")).await;
    assert_eq!(edge.next_ack().await.router.operation, Operation::Response);
    // The file may not grow: exactly what a full disk does to SQLite (SQLITE_FULL).
    handle.writer().set_max_page_count(1).await.unwrap();
    let names: Vec<String> = (0..20).map(|i| format!("big-{i}")).collect();
    for name in &names {
        edge.send(big_pod(name, "10")).await;
    }
    testkit::eventually(
        "the store reports it cannot write",
        Duration::from_secs(5),
        || async { handle.ready().is_err() },
    )
    .await;
    let reason = handle.ready().unwrap_err();
    assert!(
        reason.starts_with("edge store cannot write: ") && reason.contains("full"),
        "{reason}"
    );
    // Whatever was acked so far is on disk; what is not on disk was not acked.
    let mut acked = std::collections::BTreeSet::new();
    while let Ok(ack) = edge.acks.try_recv() {
        assert_eq!(ack.router.operation, Operation::Response);
        acked.insert(ack.parent_id().unwrap());
    }
    let on_disk = held_names(&edge, &names).await;
    assert!(on_disk.len() < names.len(), "the cap stopped some writes");
    assert!(
        acked.len() <= on_disk.len(),
        "{acked:?} acked, {on_disk:?} stored"
    );
    // Reads are still answered while writes are held.
    let query = Message::new()
        .route("edged", GROUP, "default/pods/first", Operation::Query)
        .with_content("");
    let resp = edge
        .running
        .context()
        .send_sync(NAME, query, Duration::from_secs(2))
        .await
        .expect("a read answered while the disk is full");
    let item: Value = serde_json::from_slice(&resp.content).unwrap();
    assert_eq!(item["metadata"]["name"], "first");

    handle.writer().set_max_page_count(1 << 30).await.unwrap();
    // Within a few seconds, with no restart and nothing resent: every write is applied and
    // acked once, and the store is ready again.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
    while acked.len() < names.len() {
        let ack = tokio::time::timeout_at(deadline, edge.acks.recv())
            .await
            .expect("every held write acked within 3 s of the disk having room")
            .unwrap();
        assert_eq!(ack.router.operation, Operation::Response);
        assert!(acked.insert(ack.parent_id().unwrap()), "acked twice");
    }
    assert_eq!(held_names(&edge, &names).await.len(), names.len());
    assert_eq!(handle.ready(), Ok(()));
    assert!(matches!(
        edge.running.state(NAME),
        Some(beehive::ModuleState::Running { starts: 1 })
    ));
}

async fn held_names(edge: &Edge, names: &[String]) -> Vec<String> {
    let mut held = Vec::new();
    for name in names {
        if edge.held(name).await.is_some() {
            held.push(name.clone());
        }
    }
    held
}
