use serde_json::json;

use super::*;

#[test]
fn smoke() {
    let s = Schema::compile(
        &json!({"type": "object", "properties": {"spec": {"type": "object",
        "x-kubernetes-validations": [{"rule": "self.min <= self.max"}],
        "properties": {"min": {"type": "integer"}, "max": {"type": "integer"}}}}}),
    )
    .unwrap();
    let errs = s.validate(&json!({"spec": {"min": 3, "max": 1}}), None, Part::Whole);
    assert_eq!(errs.len(), 1, "{errs:?}");
}
