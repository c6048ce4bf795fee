use apimachinery::ResourceInfo;
use apimachinery::catalog::builtins;
use kapi::User;
use objstore::ObjKey;

use super::*;

fn pods() -> ResourceInfo {
    builtins().into_iter().find(|r| r.plural == "pods").unwrap()
}

/// A pod held at local revision 7, cloud resourceVersion 100.
fn held() -> StoredObject {
    StoredObject {
        key: ObjKey::new("pods", "default", "p"),
        uid: "u1".into(),
        resource_version: "100".into(),
        revision: 7,
        labels: Default::default(),
        fields: Default::default(),
        value: Default::default(),
    }
}

fn forwarded(change: &Change, subresource: Option<&str>) -> ForwardedWrite {
    let (info, user) = (
        pods(),
        User {
            name: "a".into(),
            groups: vec![],
        },
    );
    let req = WriteRequest {
        info: &info,
        namespace: "default",
        name: "p",
        subresource,
        user: &user,
        dry_run: false,
        owner: Default::default(),
        collection: false,
    };
    envelope(&req, change)
}

#[test]
fn a_patch_goes_with_its_patch_type_and_subresource() {
    let patch = Change::Patch(
        PatchType::StrategicMerge,
        Bytes::from_static(br#"{"status":{}}"#),
    );
    let w = forwarded(&patch, Some("status"));
    let parts = (w.namespace.as_str(), w.resource.as_str(), w.name.as_str());
    assert_eq!(parts, ("default", "pods", "p"));
    assert_eq!(w.subresource.as_deref(), Some("status"));
    assert_eq!(w.verb, "patch");
    assert_eq!(
        w.content_type.as_deref(),
        Some("application/strategic-merge-patch+json")
    );
    assert_eq!(w.body, Some(json!({"status": {}})));
}

#[test]
fn delete_options_carry_only_what_was_given() {
    let opts = DeleteOptions {
        grace_period_seconds: Some(0),
        uid: Some("u1".into()),
        ..Default::default()
    };
    assert_eq!(
        delete_options(&opts),
        json!({"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0, "preconditions": {"uid": "u1"}})
    );
    assert_eq!(
        delete_options(&DeleteOptions::default()),
        json!({"kind": "DeleteOptions", "apiVersion": "v1"})
    );
}

#[test]
fn a_local_revision_becomes_the_cloud_version_and_a_cloud_version_stays() {
    let update =
        |rv: &str| Change::Update(json!({"metadata": {"name": "p", "resourceVersion": rv}}));
    for rv in ["7", "100"] {
        let mut w = forwarded(&update(rv), None);
        translate(&mut w, &held(), None).unwrap();
        assert_eq!(
            w.body.unwrap()["metadata"]["resourceVersion"],
            "100",
            "from {rv}"
        );
    }
    let mut w = forwarded(&update("6"), None);
    assert_eq!(
        translate(&mut w, &held(), None),
        Err(Stale {
            requested: "6".into()
        })
    );
    let mut w = forwarded(&update("6"), None);
    translate(&mut w, &held(), Some(6)).unwrap();
    assert_eq!(
        w.body.unwrap()["metadata"]["resourceVersion"],
        "100",
        "an alias of the held revision"
    );
    let mut w = forwarded(&update(""), None);
    translate(&mut w, &held(), None).unwrap();
    assert_eq!(
        w.body.unwrap()["metadata"]["resourceVersion"],
        "",
        "no precondition"
    );
}

#[test]
fn preconditions_in_patches_and_delete_options_are_translated() {
    let merge = Change::Patch(
        PatchType::Merge,
        Bytes::from_static(br#"{"metadata":{"resourceVersion":"7"}}"#),
    );
    let mut w = forwarded(&merge, None);
    translate(&mut w, &held(), None).unwrap();
    assert_eq!(w.body.unwrap()["metadata"]["resourceVersion"], "100");

    let test = br#"[{"op":"test","path":"/metadata/resourceVersion","value":"7"},{"op":"replace","path":"/metadata/resourceVersion","value":"7"}]"#;
    let mut w = forwarded(
        &Change::Patch(PatchType::Json, Bytes::from_static(test)),
        None,
    );
    translate(&mut w, &held(), None).unwrap();
    let body = w.body.unwrap();
    assert_eq!(
        (body[0]["value"].as_str(), body[1]["value"].as_str()),
        (Some("100"), Some("7"))
    );

    let opts = DeleteOptions {
        resource_version: Some("5".into()),
        ..Default::default()
    };
    let delete = Change::Delete(opts);
    let mut w = forwarded(&delete, None);
    let stale = translate(&mut w, &held(), None).unwrap_err();
    let (info, user) = (
        pods(),
        User {
            name: "a".into(),
            groups: vec![],
        },
    );
    let req = WriteRequest {
        info: &info,
        namespace: "default",
        name: "p",
        subresource: None,
        user: &user,
        dry_run: false,
        owner: Default::default(),
        collection: false,
    };
    let e = stale.conflict(&req, &delete, &held());
    assert_eq!((e.code, e.reason.as_str()), (409, "Conflict"));
    assert!(
        e.message.contains("ResourceVersion in precondition: 5"),
        "{}",
        e.message
    );
}
