use serde_json::json;

use super::*;

#[test]
fn not_found_names_the_plural_and_qualifies_groups() {
    let err = ApiError::not_found("", "pods", "web-0");
    assert_eq!(
        err.to_status(),
        json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "pods \"web-0\" not found", "reason": "NotFound",
            "details": {"name": "web-0", "kind": "pods"}, "code": 404
        })
    );
    let err = ApiError::not_found("coordination.k8s.io", "leases", "n1");
    assert_eq!(err.message, "leases.coordination.k8s.io \"n1\" not found");
    assert_eq!(err.details.unwrap()["group"], "coordination.k8s.io");
}

#[test]
fn already_exists_is_a_409() {
    let err = ApiError::already_exists("", "nodes", "n1");
    assert_eq!((err.code, err.reason.as_str()), (409, "AlreadyExists"));
    assert_eq!(err.message, "nodes \"n1\" already exists");
}

#[test]
fn conflict_wraps_the_optimistic_lock_message() {
    let err = ApiError::conflict("", "pods", "x", OPTIMISTIC_LOCK_MSG);
    assert_eq!(
        err.message,
        "Operation cannot be fulfilled on pods \"x\": the object has been modified; please apply \
         your changes to the latest version and try again"
    );
    assert_eq!((err.code, err.reason.as_str()), (409, "Conflict"));
}

#[test]
fn invalid_lists_each_cause() {
    let err = ApiError::invalid("", "Pod", "x", &[("spec.containers", "Required value")]);
    assert_eq!(err.code, 422);
    assert_eq!(
        err.message,
        "Pod \"x\" is invalid: spec.containers: Required value"
    );
    assert_eq!(
        err.details.unwrap(),
        json!({"name": "x", "kind": "Pod", "causes": [
            {"reason": "FieldValueRequired", "message": "Required value", "field": "spec.containers"}
        ]})
    );
    let err = ApiError::invalid(
        "apps",
        "Deployment",
        "d",
        &[("a", "Invalid value: 1: bad"), ("b", "worse")],
    );
    assert_eq!(
        err.message,
        "Deployment.apps \"d\" is invalid: [a: Invalid value: 1: bad, b: worse]"
    );
    assert_eq!(
        err.details.unwrap()["causes"][1]["reason"],
        "FieldValueInvalid"
    );
}

#[test]
fn forbidden_without_a_name_omits_it() {
    let err = ApiError::forbidden("", "pods", "", "User \"u\" cannot list resource \"pods\"");
    assert_eq!(
        err.message,
        "pods is forbidden: User \"u\" cannot list resource \"pods\""
    );
    assert_eq!(err.code, 403);
}

#[test]
fn simple_errors_carry_their_codes_and_reasons() {
    let cases = [
        (ApiError::bad_request("bad"), 400, "BadRequest"),
        (ApiError::unauthorized(), 401, "Unauthorized"),
        (
            ApiError::method_not_supported("create", "nodes"),
            405,
            "MethodNotAllowed",
        ),
        (ApiError::not_acceptable("no"), 406, "NotAcceptable"),
        (
            ApiError::expired("too old resource version: 1 (5)"),
            410,
            "Expired",
        ),
        (
            ApiError::unsupported_media_type("text/plain"),
            415,
            "UnsupportedMediaType",
        ),
        (
            ApiError::too_many_requests("slow down", 1),
            429,
            "TooManyRequests",
        ),
        (ApiError::internal("boom"), 500, "InternalError"),
        (
            ApiError::service_unavailable("later"),
            503,
            "ServiceUnavailable",
        ),
        (ApiError::timeout("slow"), 504, "Timeout"),
    ];
    for (err, code, reason) in cases {
        assert_eq!((err.code, err.reason.as_str()), (code, reason), "{err}");
        assert_eq!(err.to_status()["code"], code);
    }
}

#[test]
fn messages_follow_kube_apiserver_wording() {
    assert_eq!(
        ApiError::method_not_supported("create", "nodes").message,
        "create is not supported on resources of kind \"nodes\""
    );
    assert_eq!(
        ApiError::internal("boom").message,
        "Internal error occurred: boom"
    );
    assert_eq!(ApiError::timeout("slow").message, "Timeout: slow");
    assert_eq!(
        ApiError::too_old_resource_version(1, 5).message,
        "too old resource version: 1 (5)"
    );
    assert_eq!(
        ApiError::unsupported_media_type("application/foo-patch+json").message,
        "the body of the request was in an unknown format - accepted media types include: \
         application/json-patch+json, application/merge-patch+json, \
         application/strategic-merge-patch+json"
    );
}

#[test]
fn too_large_resource_version_names_its_cause() {
    let status = ApiError::too_large_resource_version(10, 7).to_status();
    assert_eq!(
        status["message"],
        "Timeout: Too large resource version: 10, current: 7"
    );
    assert_eq!(
        status["details"]["causes"][0]["reason"],
        "ResourceVersionTooLarge"
    );
    assert_eq!(status["code"], 504);
}

#[test]
fn success_status_carries_details() {
    assert_eq!(
        success(Some(json!({"name": "cm1", "kind": "configmaps"}))),
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
               "details": {"name": "cm1", "kind": "configmaps"}})
    );
    assert!(success(None).get("details").is_none());
}

#[test]
fn patch_errors_become_statuses() {
    let err = ApiError::from(PatchError::Unsupported("nope".into()));
    assert_eq!(
        (err.code, err.reason.as_str()),
        (415, "UnsupportedMediaType")
    );
    assert_eq!(ApiError::from(PatchError::BadRequest("x".into())).code, 400);
    assert_eq!(ApiError::from(PatchError::Invalid("x".into())).code, 422);
}

#[test]
fn names_are_quoted_like_go() {
    assert_eq!(go_quote("a\"b\\c\n"), "\"a\\\"b\\\\c\\n\"");
}

#[test]
fn a_timeout_after_has_the_shape_of_new_timeout_error() {
    let status =
        ApiError::timeout_after("request did not complete within requested timeout", 0).to_status();
    assert_eq!(status["code"], 504);
    assert_eq!(status["reason"], "Timeout");
    assert_eq!(
        status["message"],
        "Timeout: request did not complete within requested timeout"
    );
    assert_eq!(
        status["details"],
        json!({}),
        "retryAfterSeconds 0 is left out"
    );
    let status = ApiError::timeout_after("slow", 2).to_status();
    assert_eq!(status["details"], json!({ "retryAfterSeconds": 2 }));
}
