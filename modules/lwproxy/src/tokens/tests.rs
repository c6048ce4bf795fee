use apimachinery::ResourceInfo;
use apimachinery::catalog::builtins;
use apimachinery::time::format_rfc3339;
use kapi::User;
use serde_json::json;

use super::*;

const NOW: i64 = 1_800_000_000;

fn accounts() -> ResourceInfo {
    builtins()
        .into_iter()
        .find(|r| r.plural == "serviceaccounts")
        .unwrap()
}

fn request<'a>(
    info: &'a ResourceInfo,
    user: &'a User,
    subresource: Option<&'a str>,
) -> WriteRequest<'a> {
    WriteRequest {
        info,
        namespace: "default",
        name: "builder",
        subresource,
        user,
        dry_run: false,
        owner: Default::default(),
        collection: false,
    }
}

fn user() -> User {
    User {
        name: "system:admin".into(),
        groups: vec![],
    }
}

fn token_request(audiences: Value, expiration: Value) -> Value {
    json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "spec": {"audiences": audiences, "expirationSeconds": expiration,
                 "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "web", "uid": "u1"}}})
}

fn ask(audiences: Value, expiration: Value) -> Ask {
    let (info, user) = (accounts(), user());
    let req = request(&info, &user, Some("token"));
    Ask::of(&req, &Change::Create(token_request(audiences, expiration))).expect("a token ask")
}

fn answer(token: &str, expires: i64) -> Value {
    json!({"kind": "TokenRequest", "status": {"token": token,
        "expirationTimestamp": format_rfc3339(expires)}})
}

fn pod(uid: &str, account: Option<&str>) -> Value {
    json!({"metadata": {"name": "web", "namespace": "default", "uid": uid},
        "spec": {"serviceAccountName": account, "nodeName": "edge-1"}})
}

#[test]
fn a_token_request_bound_to_a_pod_is_an_ask_with_its_audiences_sorted() {
    let ask = ask(json!(["b", "a", "b"]), json!(3607));
    assert_eq!(ask.audiences, ["a", "b"]);
    assert_eq!(ask.expiration, Some(3607));
    assert_eq!((ask.pod_name.as_str(), ask.pod_uid.as_str()), ("web", "u1"));
    assert_eq!(ask.key(), ObjKey::new(RESOURCE, "default", "builder.u1"));
    let none = ask_of_null();
    assert!(none.audiences.is_empty() && none.expiration.is_none());
}

fn ask_of_null() -> Ask {
    ask(Value::Null, Value::Null)
}

#[test]
fn other_writes_are_not_token_asks() {
    let (info, user) = (accounts(), user());
    let body = token_request(json!([]), json!(600));
    let not_token = request(&info, &user, None);
    assert_eq!(Ask::of(&not_token, &Change::Create(body.clone())), None);
    let token = request(&info, &user, Some("token"));
    assert_eq!(Ask::of(&token, &Change::Update(body.clone())), None);
    let mut unbound = body.clone();
    unbound["spec"]["boundObjectRef"]["kind"] = json!("Secret");
    assert_eq!(Ask::of(&token, &Change::Create(unbound)), None);
    let mut no_uid = body;
    no_uid["spec"]["boundObjectRef"]["uid"] = json!("");
    assert_eq!(Ask::of(&token, &Change::Create(no_uid)), None);
}

#[test]
fn the_kept_token_answers_the_same_ask_offline_while_it_is_valid() {
    let ask = ask(json!([]), json!(3607));
    let record = ask.remember(None, &answer("t1", NOW + 3600), NOW).unwrap();
    let pod = pod("u1", Some("builder"));
    let answered = ask
        .answer_offline(Some(&record), Some(&pod), NOW + 60)
        .unwrap();
    assert_eq!(answered["status"]["token"], "t1");
    assert_eq!(
        ask.answer_offline(Some(&record), Some(&pod), NOW + 3600),
        Err(Miss::Expired)
    );
}

#[test]
fn a_token_is_kept_only_for_the_audiences_and_lifetime_it_was_issued_for() {
    let first = ask(json!(["api"]), json!(3607));
    let record = first
        .remember(None, &answer("t1", NOW + 3600), NOW)
        .unwrap();
    let pod = pod("u1", Some("builder"));
    for other in [
        ask(json!(["vault"]), json!(3607)),
        ask(json!(["api"]), json!(600)),
    ] {
        assert_eq!(
            other.answer_offline(Some(&record), Some(&pod), NOW),
            Err(Miss::NeverIssued)
        );
    }
    // A second ask adds its own entry; the first one's is kept.
    let second = ask(json!(["vault"]), json!(3607));
    let record = second
        .remember(Some(record), &answer("t2", NOW + 3600), NOW)
        .unwrap();
    assert_eq!(record.issued.len(), 2);
    let got = |a: &Ask| {
        a.answer_offline(Some(&record), Some(&pod), NOW).unwrap()["status"]["token"].clone()
    };
    assert_eq!((got(&first), got(&second)), (json!("t1"), json!("t2")));
}

#[test]
fn a_newer_token_replaces_the_one_kept_and_expired_ones_are_dropped() {
    let first = ask(json!(["api"]), json!(3607));
    let other = ask(json!(["vault"]), json!(600));
    let record = first
        .remember(None, &answer("t1", NOW + 3600), NOW)
        .unwrap();
    let record = other
        .remember(Some(record), &answer("o1", NOW + 600), NOW)
        .unwrap();
    let record = first
        .remember(Some(record), &answer("t2", NOW + 4000), NOW + 700)
        .unwrap();
    assert_eq!(record.issued.len(), 1, "{record:?}");
    assert_eq!(record.issued[0].answer["status"]["token"], "t2");
}

#[test]
fn only_the_pod_the_ask_is_bound_to_running_as_the_account_gets_a_kept_token() {
    let ask = ask(json!([]), json!(3607));
    let record = ask.remember(None, &answer("t1", NOW + 3600), NOW).unwrap();
    let cases = [
        (None, Miss::NoSuchPod),
        (Some(pod("u2", Some("builder"))), Miss::NoSuchPod),
        (Some(pod("u1", Some("other"))), Miss::OtherAccount),
        (Some(pod("u1", None)), Miss::OtherAccount),
    ];
    for (pod, miss) in cases {
        assert_eq!(
            ask.answer_offline(Some(&record), pod.as_ref(), NOW),
            Err(miss)
        );
    }
}

#[test]
fn an_answer_without_a_token_or_expiry_is_not_kept() {
    let ask = ask(json!([]), json!(3607));
    assert_eq!(ask.remember(None, &json!({"status": {}}), NOW), None);
    let no_expiry = json!({"status": {"token": "t"}});
    assert_eq!(ask.remember(None, &no_expiry, NOW), None);
}
