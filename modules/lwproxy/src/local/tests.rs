use apimachinery::ResourceInfo;
use apimachinery::catalog::builtins;
use apimachinery::patch::PatchType;
use bytes::Bytes;
use objstore::ObjKey;
use serde_json::json;

use super::*;
use crate::envelope::Change;

fn info(plural: &str) -> ResourceInfo {
    builtins().into_iter().find(|r| r.plural == plural).unwrap()
}

/// `obj` held at local revision 7 (its JSON says so), cloud resourceVersion 100.
fn held(obj: Value) -> StoredObject {
    let mut obj = obj;
    obj["metadata"]["resourceVersion"] = json!("7");
    StoredObject {
        key: ObjKey::new("pods", "default", "p"),
        uid: "u1".into(),
        resource_version: "100".into(),
        revision: 7,
        labels: Default::default(),
        fields: Default::default(),
        value: serde_json::to_vec(&obj).unwrap().into(),
    }
}

fn pod() -> Value {
    json!({
        "kind": "Pod", "apiVersion": "v1",
        "metadata": {"name": "p", "namespace": "default", "uid": "u1", "labels": {"app": "web"}},
        "spec": {"nodeName": "n1"},
        "status": {"phase": "Pending"},
    })
}

fn status_of(plural: &str, held: &StoredObject, change: Change) -> Result<Value, ApiError> {
    let info = info(plural);
    let subject = Subject {
        info: &info,
        namespace: "default",
        name: "p",
    };
    next_object(LocalWrite::Status, &subject, Some(held), &change)
}

fn merge(patch: Value) -> Change {
    Change::Patch(
        PatchType::Merge,
        Bytes::from(serde_json::to_vec(&patch).unwrap()),
    )
}

#[test]
fn only_status_and_lease_writes_are_local() {
    let update = Change::Update(json!({}));
    let create = Change::Create(json!({}));
    let (pods, leases, services) = (info("pods"), info("leases"), info("services"));
    assert_eq!(
        LocalWrite::of(&pods, Some("status"), &update),
        Some(LocalWrite::Status)
    );
    assert_eq!(
        LocalWrite::of(&info("nodes"), Some("status"), &merge(json!({}))),
        Some(LocalWrite::Status)
    );
    assert_eq!(
        LocalWrite::of(&leases, None, &create),
        Some(LocalWrite::Lease)
    );
    assert_eq!(LocalWrite::of(&pods, None, &update), None);
    assert_eq!(LocalWrite::of(&pods, None, &create), None);
    assert_eq!(
        LocalWrite::of(&pods, Some("status"), &Change::Delete(Default::default())),
        None
    );
    assert_eq!(LocalWrite::of(&services, Some("status"), &update), None);
}

#[test]
fn a_status_patch_changes_what_it_changes_online_status_labels_and_annotations() {
    let patch = merge(
        json!({"metadata": {"uid": "u1", "labels": {"app": "db"}}, "spec": {"nodeName": "n2"}, "status": {"phase": "Running"}}),
    );
    let next = status_of("pods", &held(pod()), patch).unwrap();
    assert_eq!(next["status"]["phase"], "Running");
    assert_eq!(next["spec"]["nodeName"], "n1");
    assert_eq!(next["metadata"]["uid"], "u1");
    // As the API applies a status write (apimachinery::statuswrite), online or offline.
    assert_eq!(next["metadata"]["labels"]["app"], "db");
    assert_eq!(
        next["metadata"].get("resourceVersion"),
        None,
        "the store sets it"
    );
    assert_eq!(
        (next["kind"].as_str(), next["apiVersion"].as_str()),
        (Some("Pod"), Some("v1"))
    );
}

#[test]
fn a_status_update_must_name_the_held_version_and_uid() {
    let held = held(pod());
    let with = |rv: &str, uid: &str| {
        let mut obj = pod();
        obj["metadata"]["resourceVersion"] = json!(rv);
        obj["metadata"]["uid"] = json!(uid);
        obj["status"]["phase"] = json!("Running");
        Change::Update(obj)
    };
    for rv in ["", "7", "100"] {
        let next = status_of("pods", &held, with(rv, "u1")).unwrap();
        assert_eq!(next["status"]["phase"], "Running", "rv {rv:?}");
    }
    let stale = status_of("pods", &held, with("6", "u1")).unwrap_err();
    assert_eq!((stale.code, stale.reason.as_str()), (409, "Conflict"));
    let other = status_of("pods", &held, with("7", "u2")).unwrap_err();
    assert!(
        other.message.contains("UID in precondition: u2"),
        "{}",
        other.message
    );
}

#[test]
fn a_status_write_for_an_object_not_held_is_not_found() {
    let info = info("nodes");
    let subject = Subject {
        info: &info,
        namespace: "",
        name: "n1",
    };
    let e = next_object(
        LocalWrite::Status,
        &subject,
        None,
        &merge(json!({"status": {}})),
    )
    .unwrap_err();
    assert_eq!(e.code, 404);
}

#[test]
fn a_lease_is_created_here_without_a_uid_and_updated_keeping_its_identity() {
    let info = info("leases");
    let subject = Subject {
        info: &info,
        namespace: "kube-node-lease",
        name: "",
    };
    let lease =
        json!({"metadata": {"name": "n1", "uid": "mine"}, "spec": {"holderIdentity": "n1"}});
    let created = next_object(
        LocalWrite::Lease,
        &subject,
        None,
        &Change::Create(lease.clone()),
    )
    .unwrap();
    assert_eq!(created["metadata"]["namespace"], "kube-node-lease");
    assert_eq!(created["metadata"].get("uid"), None);
    assert!(created["metadata"]["creationTimestamp"].is_string());
    assert_eq!(created["kind"], "Lease");

    let held = held(
        json!({"metadata": {"name": "n1", "namespace": "kube-node-lease", "uid": "u1", "creationTimestamp": "2024-01-01T00:00:00Z"}, "spec": {}}),
    );
    let again = next_object(
        LocalWrite::Lease,
        &subject,
        Some(&held),
        &Change::Create(lease),
    )
    .unwrap_err();
    assert_eq!(again.reason, "AlreadyExists");

    let subject = Subject {
        info: &info,
        namespace: "kube-node-lease",
        name: "n1",
    };
    let renew = json!({"metadata": {"name": "n1", "resourceVersion": "7"}, "spec": {"renewTime": "2024-01-01T00:00:10.000000Z"}});
    let next = next_object(
        LocalWrite::Lease,
        &subject,
        Some(&held),
        &Change::Update(renew),
    )
    .unwrap();
    assert_eq!(next["spec"]["renewTime"], "2024-01-01T00:00:10.000000Z");
    assert_eq!(next["metadata"]["uid"], "u1");
    assert_eq!(
        next["metadata"]["creationTimestamp"],
        "2024-01-01T00:00:00Z"
    );
}

fn subject(info: &ResourceInfo) -> Subject<'_> {
    Subject {
        info,
        namespace: "default",
        name: "p",
    }
}

#[test]
fn a_queued_status_write_is_a_merge_patch_of_what_the_client_changed() {
    let held = held(pod());
    let mut obj = pod();
    obj["status"] = json!({"phase": "Running"});
    obj["spec"]["nodeName"] = json!("n2");
    let info = info("pods");
    let key = ObjKey::new("pods", "default", "p");
    let next = next_object(
        LocalWrite::Status,
        &subject(&info),
        Some(&held),
        &Change::Update(obj),
    )
    .unwrap();
    let write = upstream(
        LocalWrite::Status,
        &subject(&info),
        &key,
        Some(&held),
        &next,
    )
    .unwrap();
    assert_eq!(
        (
            write.verb.as_str(),
            write.subresource.as_deref(),
            write.name.as_str()
        ),
        ("patch", Some("status"), "p")
    );
    assert_eq!(
        write.content_type.as_deref(),
        Some("application/merge-patch+json")
    );
    // Labels unchanged by the client: not in the patch, so a cloud change to them survives.
    assert_eq!(write.body, Some(json!({"status": {"phase": "Running"}})));
}

fn lease(holder: &str, renew: &str) -> Value {
    json!({
        "kind": "Lease", "apiVersion": "coordination.k8s.io/v1",
        "metadata": {"name": "p", "namespace": "default", "labels": {"from": "edge"}},
        "spec": {"holderIdentity": holder, "renewTime": renew, "leaseDurationSeconds": 40},
    })
}

#[test]
fn a_queued_lease_renewal_patches_the_renew_fields_only() {
    let held = held(lease("n1", "t1"));
    let mut renewed = lease("n1", "t2");
    renewed["metadata"]["labels"] = json!({"changed": "here"});
    let info = info("leases");
    let key = ObjKey::new("leases", "default", "p");
    let write = upstream(
        LocalWrite::Lease,
        &subject(&info),
        &key,
        Some(&held),
        &renewed,
    )
    .unwrap();
    assert_eq!((write.verb.as_str(), write.subresource), ("patch", None));
    assert_eq!(
        write.body,
        Some(
            json!({"spec": {"holderIdentity": "n1", "renewTime": "t2", "leaseDurationSeconds": 40}})
        )
    );
}

#[test]
fn a_lease_the_cloud_never_sent_is_queued_as_its_create() {
    let info = info("leases");
    let key = ObjKey::new("leases", "default", "p");
    let mut made_here = lease("n1", "t1");
    made_here["metadata"]["creationTimestamp"] = json!("2026-01-01T00:00:00Z");
    for held in [
        None,
        Some(StoredObject {
            resource_version: String::new(),
            ..held(lease("n1", "t0"))
        }),
    ] {
        let write = upstream(
            LocalWrite::Lease,
            &subject(&info),
            &key,
            held.as_ref(),
            &made_here,
        )
        .unwrap();
        assert_eq!((write.verb.as_str(), write.name.as_str()), ("create", ""));
        assert_eq!(write.object_name(), "p");
        let body = write.body.unwrap();
        assert_eq!(body["spec"]["renewTime"], "t1");
        assert!(body["metadata"].get("creationTimestamp").is_none());
        assert!(body["metadata"].get("resourceVersion").is_none());
    }
}

#[test]
fn an_offline_status_write_that_makes_the_object_too_large_is_413() {
    let held = held(pod());
    let big = "x".repeat(kapi::MAX_OBJECT_BYTES);
    let err = status_of("pods", &held, merge(json!({"status": {"message": big}}))).unwrap_err();
    assert_eq!(
        (err.code, err.reason.as_str()),
        (413, "RequestEntityTooLarge")
    );
    assert!(err.message.contains("pods \"p\""), "{}", err.message);
    let small = status_of("pods", &held, merge(json!({"status": {"message": "ok"}})));
    assert!(small.is_ok());
}
