use apimachinery::ResourceInfo;
use apimachinery::catalog::builtins;
use kapi::{DeleteOptions, User};
use objstore::ObjKey;
use serde_json::json;

use super::*;

fn info(plural: &str) -> ResourceInfo {
    builtins().into_iter().find(|r| r.plural == plural).unwrap()
}

fn user() -> User {
    User {
        name: "a".into(),
        groups: vec![],
    }
}

fn request<'a>(
    info: &'a ResourceInfo,
    user: &'a User,
    name: &'a str,
    subresource: Option<&'a str>,
) -> WriteRequest<'a> {
    WriteRequest {
        info,
        namespace: "default",
        name,
        subresource,
        user,
        dry_run: false,
        owner: Default::default(),
        collection: false,
    }
}

fn pod(extra: Value) -> Value {
    let mut pod = json!({"kind": "Pod", "apiVersion": "v1",
        "metadata": {"name": "p", "namespace": "default", "uid": "u1", "resourceVersion": "100"}});
    if let (Some(meta), Some(more)) = (pod["metadata"].as_object_mut(), extra.as_object()) {
        meta.extend(more.clone());
    }
    pod
}

fn held(resource_version: &str, revision: u64) -> StoredObject {
    StoredObject {
        key: ObjKey::new("pods", "default", "p"),
        uid: "u1".into(),
        resource_version: resource_version.into(),
        revision,
        labels: Default::default(),
        fields: Default::default(),
        value: Default::default(),
    }
}

#[test]
fn a_created_object_is_stored_under_the_name_the_cloud_gave_it() {
    let (pods, user) = (info("pods"), user());
    let req = request(&pods, &user, "", None);
    let mut body = pod(json!({}));
    body["metadata"]["name"] = json!("web-x7k2p");
    let (name, answer) = stored_as(&req, &Change::Create(json!({})), 201, &body).expect("stored");
    assert_eq!(name, "web-x7k2p");
    assert_eq!(answer, CloudAnswer::Created(body.clone()));
    // An update's answer is stored only over the object held (metamanager's rule).
    let update = Change::Update(json!({}));
    let (_, answer) = stored_as(&req, &update, 200, &body).expect("stored");
    assert_eq!(answer, CloudAnswer::Present(body));
}

#[test]
fn dry_runs_events_and_other_subresources_are_not_stored() {
    let (pods, events, user) = (info("pods"), info("events"), user());
    let update = Change::Update(json!({}));
    let mut dry = request(&pods, &user, "p", None);
    dry.dry_run = true;
    assert!(stored_as(&dry, &update, 200, &pod(json!({}))).is_none());
    let event = request(&events, &user, "p", None);
    assert!(stored_as(&event, &update, 200, &pod(json!({}))).is_none());
    let eviction = request(&pods, &user, "p", Some("eviction"));
    assert!(stored_as(&eviction, &Change::Create(json!({})), 200, &pod(json!({}))).is_none());
    let status = request(&pods, &user, "p", Some("status"));
    assert!(stored_as(&status, &update, 200, &pod(json!({}))).is_some());
    let unversioned = json!({"kind": "TokenReview", "metadata": {"name": "p"}});
    assert!(stored_as(&status, &update, 200, &unversioned).is_none());
}

#[test]
fn a_delete_answer_removes_the_object_unless_it_is_only_marked() {
    let (pods, user) = (info("pods"), user());
    let req = request(&pods, &user, "p", None);
    let delete = Change::Delete(DeleteOptions::default());
    let gone = |uid: &str, rv: &str| CloudAnswer::Gone {
        uid: uid.into(),
        resource_version: rv.into(),
    };
    let removed = pod(json!({}));
    assert_eq!(
        stored_as(&req, &delete, 200, &removed).unwrap().1,
        gone("u1", "100")
    );
    let status = json!({"kind": "Status", "status": "Success"});
    assert_eq!(
        stored_as(&req, &delete, 200, &status).unwrap().1,
        gone("", "")
    );
    let marked = pod(json!({"deletionTimestamp": "2024-01-01T00:00:00Z",
        "deletionGracePeriodSeconds": 30}));
    assert_eq!(
        stored_as(&req, &delete, 200, &marked).unwrap().1,
        CloudAnswer::Present(marked.clone())
    );
    let finalized = pod(json!({"deletionTimestamp": "2024-01-01T00:00:00Z",
        "deletionGracePeriodSeconds": 0, "finalizers": ["x"]}));
    assert!(matches!(
        stored_as(&req, &delete, 200, &finalized).unwrap().1,
        CloudAnswer::Present(_)
    ));
}

#[test]
fn an_answer_not_stored_carries_a_local_revision_or_none() {
    let body = pod(json!({}));
    let same = localize(body.clone(), Some(&held("100", 7)));
    assert_eq!(same["metadata"]["resourceVersion"], "7");
    let other = localize(body.clone(), Some(&held("99", 7)));
    assert!(other["metadata"].get("resourceVersion").is_none());
    assert!(
        localize(body, None)["metadata"]
            .get("resourceVersion")
            .is_none()
    );
    let status = json!({"kind": "Status", "status": "Success"});
    assert_eq!(localize(status.clone(), None), status);
}
