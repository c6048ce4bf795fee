use serde_json::{Value, json};

use super::*;

/// A root schema with `spec` as given.
fn schema(spec: Value) -> Schema {
    let root = json!({"type": "object", "properties": {"spec": spec, "status": {
        "type": "object", "properties": {"ready": {"type": "boolean"}}}}});
    Schema::compile(&root).unwrap_or_else(|e| panic!("schema refused: {e:?}"))
}

fn spec_of(props: Value) -> Schema {
    schema(json!({"type": "object", "properties": props}))
}

/// `field: message` of each error of `obj`.
fn errors(s: &Schema, obj: Value) -> Vec<String> {
    texts(&s.validate(&obj, None, Part::Whole))
}

fn texts(errors: &[FieldError]) -> Vec<String> {
    errors
        .iter()
        .map(|e| format!("{}: {}", e.field, e.message()))
        .collect()
}

fn refused(raw: Value) -> Vec<String> {
    match Schema::compile(&raw) {
        Ok(_) => panic!("schema accepted: {raw}"),
        Err(errors) => texts(&errors),
    }
}

#[test]
fn a_string_where_an_integer_belongs_is_a_type_error_naming_the_field() {
    let s = spec_of(json!({"replicas": {"type": "integer"}}));
    let got = s.validate(&json!({"spec": {"replicas": "two"}}), None, Part::Whole);
    assert_eq!(got[0].field, "spec.replicas");
    assert_eq!(got[0].reason(), "FieldValueTypeInvalid");
    assert_eq!(
        got[0].message(),
        "Invalid value: \"string\": spec.replicas in body must be of type integer: \"string\""
    );
}

#[test]
fn every_type_is_checked_and_null_only_passes_when_nullable() {
    let s = spec_of(json!({
        "o": {"type": "object"}, "a": {"type": "array", "items": {"type": "string"}},
        "s": {"type": "string"}, "n": {"type": "number"}, "b": {"type": "boolean"},
        "i": {"type": "integer"}, "maybe": {"type": "string", "nullable": true},
    }));
    let obj = json!({"spec": {"o": 1, "a": {}, "s": 2, "n": "x", "b": "true", "i": 1.5,
        "maybe": null}});
    let got = errors(&s, obj);
    let fields: Vec<&str> = got.iter().map(|e| e.split(':').next().unwrap()).collect();
    assert_eq!(
        fields,
        [
            "spec.a", "spec.b", "spec.i", "spec.n", "spec.o", "spec.s", "<nil>"
        ]
    );
    assert!(errors(&s, json!({"spec": {"i": 2.0, "n": 3}})).is_empty());
    assert!(
        errors(&s, json!({"spec": {"s": null}}))[0].contains("must be of type string: \"null\"")
    );
}

#[test]
fn missing_required_fields_are_each_reported() {
    let s = schema(json!({"type": "object", "required": ["a", "b"],
        "properties": {"a": {"type": "string"}, "b": {"type": "string"}}}));
    let got = s.validate(&json!({"spec": {}}), None, Part::Whole);
    assert_eq!(
        texts(&got),
        ["spec.a: Required value", "spec.b: Required value"]
    );
    assert_eq!(got[0].reason(), "FieldValueRequired");
}

#[test]
fn numbers_are_bounded_by_minimum_maximum_and_multiple_of() {
    let s = spec_of(json!({
        "r": {"type": "integer", "minimum": 1, "maximum": 10},
        "x": {"type": "number", "minimum": 0, "exclusiveMinimum": true,
              "maximum": 1, "exclusiveMaximum": true},
        "m": {"type": "integer", "multipleOf": 5},
        "small": {"type": "integer", "format": "int32"},
    }));
    let got = errors(
        &s,
        json!({"spec": {"r": 11, "x": 0, "m": 7, "small": 3_000_000_000_i64}}),
    );
    assert_eq!(
        got,
        [
            "spec.m: Invalid value: 7: spec.m in body should be a multiple of 5",
            "spec.r: Invalid value: 11: spec.r in body should be less than or equal to 10",
            "spec.small: Invalid value: 3000000000: spec.small in body must be of type int32: 3000000000",
            "spec.x: Invalid value: 0: spec.x in body should be greater than 0",
        ]
    );
    assert!(errors(&s, json!({"spec": {"r": 0}}))[0].contains("greater than or equal to 1"));
    assert!(errors(&s, json!({"spec": {"x": 1}}))[0].contains("should be less than 1"));
}

#[test]
fn strings_are_bounded_by_length_pattern_format_and_enum() {
    let s = spec_of(json!({
        "name": {"type": "string", "minLength": 3, "maxLength": 5},
        "id": {"type": "string", "pattern": "^[a-z]+$"},
        "when": {"type": "string", "format": "date-time"},
        "color": {"type": "string", "enum": ["red", "green"]},
    }));
    let got = s.validate(
        &json!({"spec": {"name": "ab", "id": "A1", "when": "yesterday", "color": "pink"}}),
        None,
        Part::Whole,
    );
    assert_eq!(
        texts(&got),
        [
            "spec.color: Unsupported value: \"pink\": supported values: \"red\", \"green\"",
            "spec.id: Invalid value: \"A1\": spec.id in body should match '^[a-z]+$'",
            "spec.name: Invalid value: \"ab\": spec.name in body should be at least 3 chars long",
            "spec.when: Invalid value: \"yesterday\": spec.when in body must be of type date-time: \"yesterday\"",
        ]
    );
    assert_eq!(got[0].reason(), "FieldValueNotSupported");
    let long = errors(&s, json!({"spec": {"name": "abcdef"}}));
    assert_eq!(long, ["spec.name: Too long: may not be more than 5 bytes"]);
    assert!(
        errors(
            &s,
            json!({"spec": {"when": "2024-01-02T03:04:05Z", "id": "ab"}})
        )
        .is_empty()
    );
}

#[test]
fn lists_are_bounded_and_set_and_map_lists_refuse_duplicates() {
    let s = spec_of(json!({
        "few": {"type": "array", "minItems": 1, "maxItems": 2, "items": {"type": "integer"}},
        "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
        "ports": {"type": "array", "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["name"],
            "items": {"type": "object", "required": ["name"], "properties": {
                "name": {"type": "string"}, "port": {"type": "integer"}}}},
    }));
    let obj = json!({"spec": {"few": [1, 2, 3], "tags": ["a", "b", "a"],
        "ports": [{"name": "x", "port": 1}, {"name": "x", "port": 2}]}});
    assert_eq!(
        errors(&s, obj),
        [
            "spec.few: Too many: 3: must have at most 2 items",
            "spec.ports[1]: Duplicate value: map[string]interface {}{\"name\":\"x\"}",
            "spec.tags[2]: Duplicate value: \"a\"",
        ]
    );
    let none = errors(&s, json!({"spec": {"few": []}}));
    assert_eq!(
        none,
        ["spec.few: Invalid value: 0: spec.few in body should have at least 1 items"]
    );
}

#[test]
fn maps_follow_additional_properties_and_property_counts() {
    let s = spec_of(json!({"labels": {"type": "object", "maxProperties": 1,
        "additionalProperties": {"type": "string", "maxLength": 2}}}));
    let got = errors(&s, json!({"spec": {"labels": {"a": "long", "b": "x"}}}));
    assert_eq!(
        got,
        [
            "spec.labels: Too many: 2: must have at most 1 items",
            "spec.labels.a: Too long: may not be more than 2 bytes",
        ]
    );
}

#[test]
fn int_or_string_takes_either_and_nothing_else() {
    let spelled = json!({"x-kubernetes-int-or-string": true,
        "anyOf": [{"type": "integer"}, {"type": "string"}]});
    let s = spec_of(json!({"port": {"x-kubernetes-int-or-string": true}, "p2": spelled}));
    assert!(errors(&s, json!({"spec": {"p2": "http"}})).is_empty());
    assert!(errors(&s, json!({"spec": {"port": 80}})).is_empty());
    assert!(errors(&s, json!({"spec": {"port": "http"}})).is_empty());
    let got = errors(&s, json!({"spec": {"port": true}}));
    assert!(
        got[0].starts_with("spec.port: Invalid value: \"boolean\""),
        "{got:?}"
    );
}

#[test]
fn embedded_resources_need_api_version_and_kind_and_keep_their_metadata() {
    let s = spec_of(
        json!({"template": {"type": "object", "x-kubernetes-embedded-resource": true,
        "properties": {"spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}),
    );
    let mut obj = json!({"spec": {"template": {"metadata": {"name": "x"}, "junk": 1,
        "spec": {"anything": 1}}}});
    assert_eq!(s.prune(&mut obj), ["spec.template.junk"]);
    assert_eq!(obj["spec"]["template"]["metadata"]["name"], "x");
    assert_eq!(obj["spec"]["template"]["spec"]["anything"], 1);
    assert_eq!(
        errors(&s, obj),
        [
            "spec.template.apiVersion: Required value: must not be empty",
            "spec.template.kind: Required value: must not be empty",
        ]
    );
}

#[test]
fn metadata_is_checked_only_for_name_and_generate_name() {
    let root = json!({"type": "object", "properties": {"metadata": {"type": "object",
        "properties": {"name": {"type": "string", "maxLength": 3}}}}});
    let s = Schema::compile(&root).unwrap();
    let got = errors(
        &s,
        json!({"metadata": {"name": "toolong", "labels": {"a": "b"}}}),
    );
    assert_eq!(
        got,
        ["metadata.name: Too long: may not be more than 3 bytes"]
    );
}

#[test]
fn unknown_fields_are_pruned_unless_preserved() {
    let s = spec_of(json!({"known": {"type": "string"},
        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
        "items": {"type": "array", "items": {"type": "object", "properties": {
            "a": {"type": "string"}}}}}));
    let mut obj = json!({"apiVersion": "x/v1", "kind": "W", "metadata": {"name": "w"},
        "extra": 1, "spec": {"known": "k", "unknown": 1, "free": {"x": 1},
        "items": [{"a": "1", "b": 2}]}});
    let pruned = s.prune(&mut obj);
    assert_eq!(pruned, ["extra", "spec.items[0].b", "spec.unknown"]);
    assert_eq!(
        obj,
        json!({"apiVersion": "x/v1", "kind": "W", "metadata": {"name": "w"},
            "spec": {"known": "k", "free": {"x": 1}, "items": [{"a": "1"}]}})
    );
}

#[test]
fn defaults_fill_missing_and_null_fields_at_every_depth() {
    let s = spec_of(json!({
        "replicas": {"type": "integer", "default": 1},
        "mode": {"type": "string", "default": "fast"},
        "opt": {"type": "string", "nullable": true, "default": "x"},
        "ports": {"type": "array", "items": {"type": "object", "properties": {
            "protocol": {"type": "string", "default": "TCP"}}}},
    }));
    assert!(s.has_defaults());
    let mut obj = json!({"spec": {"mode": null, "opt": null, "ports": [{}]}});
    s.default(&mut obj);
    assert_eq!(
        obj["spec"],
        json!({"replicas": 1, "mode": "fast", "opt": null, "ports": [{"protocol": "TCP"}]})
    );
}

#[test]
fn cel_rules_refuse_with_their_message_field_path_and_reason() {
    let s = schema(json!({"type": "object",
    "properties": {"min": {"type": "integer"}, "max": {"type": "integer"}},
    "x-kubernetes-validations": [
        {"rule": "self.min <= self.max"},
        {"rule": "self.max < 100", "message": "max is too big", "fieldPath": ".max"},
        {"rule": "has(self.min)", "reason": "FieldValueRequired",
         "messageExpression": "'min is needed, max is ' + string(self.max)"},
    ]}));
    let got = s.validate(&json!({"spec": {"min": 3, "max": 1}}), None, Part::Whole);
    assert_eq!(
        texts(&got),
        ["spec: Invalid value: \"object\": failed rule: self.min <= self.max"]
    );
    let got = s.validate(&json!({"spec": {"max": 200}}), None, Part::Whole);
    assert_eq!(
        texts(&got),
        [
            "spec: Invalid value: \"object\": No such key: min evaluating rule: self.min <= self.max",
            "spec.max: Invalid value: \"object\": max is too big",
            "spec: Required value: min is needed, max is 200",
        ]
    );
    assert_eq!(got[2].reason(), "FieldValueRequired");
}

#[test]
fn transition_rules_run_only_on_updates_with_old_self() {
    let s = spec_of(json!({"size": {"type": "integer",
        "x-kubernetes-validations": [{"rule": "self >= oldSelf", "message": "may not shrink"}]}}));
    let new = json!({"spec": {"size": 1}});
    assert!(errors(&s, new.clone()).is_empty(), "no oldSelf on create");
    let old = json!({"spec": {"size": 5}});
    let got = s.validate(&new, Some(&old), Part::Whole);
    assert_eq!(
        texts(&got),
        ["spec.size: Invalid value: \"integer\": may not shrink"]
    );
    assert!(s.validate(&old, Some(&new), Part::Whole).is_empty());
}

#[test]
fn rules_on_list_items_see_each_item_and_map_items_correlate_to_old_ones() {
    let s = spec_of(
        json!({"ports": {"type": "array", "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["name"],
        "items": {"type": "object", "required": ["name"], "properties": {
            "name": {"type": "string"}, "port": {"type": "integer"}},
            "x-kubernetes-validations": [
                {"rule": "self.port > 0"},
                {"rule": "self.port == oldSelf.port", "message": "port is immutable"}]}}}),
    );
    let old = json!({"spec": {"ports": [{"name": "a", "port": 1}]}});
    let new = json!({"spec": {"ports": [{"name": "b", "port": 0}, {"name": "a", "port": 2}]}});
    assert_eq!(
        texts(&s.validate(&new, Some(&old), Part::Whole)),
        [
            "spec.ports[0]: Invalid value: \"object\": failed rule: self.port > 0",
            "spec.ports[1]: Invalid value: \"object\": port is immutable",
        ]
    );
}

#[test]
fn unchanged_values_are_not_validated_again_on_update() {
    let s = spec_of(json!({"name": {"type": "string", "maxLength": 2}, "n": {"type": "integer"}}));
    let old = json!({"spec": {"name": "toolong", "n": 1}});
    let new = json!({"spec": {"name": "toolong", "n": 2}});
    assert!(s.validate(&new, Some(&old), Part::Whole).is_empty());
    assert_eq!(errors(&s, new).len(), 1);
}

#[test]
fn a_status_write_answers_only_for_the_status() {
    let s = spec_of(json!({"n": {"type": "integer"}}));
    let obj = json!({"spec": {"n": "x"}, "status": {"ready": "yes"}});
    let got = s.validate(&obj, None, Part::Status);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].field, "status.ready");
}

#[test]
fn type_errors_hold_back_the_cel_rules() {
    let s = schema(
        json!({"type": "object", "properties": {"n": {"type": "integer"}},
        "x-kubernetes-validations": [{"rule": "self.n > 0"}]}),
    );
    let got = errors(&s, json!({"spec": {"n": "x"}}));
    assert_eq!(got.len(), 2);
    assert!(
        got[1]
            .starts_with("<nil>: Invalid value: \"null\": some validation rules were not checked")
    );
}

#[test]
fn a_rule_over_the_per_call_cost_limit_is_refused_without_running() {
    let s = spec_of(json!({"xs": {"type": "array", "items": {"type": "integer"},
        "x-kubernetes-validations": [
            {"rule": "self.all(a, self.all(b, self.all(c, a + b + c >= 0)))"}]}}));
    let small = json!({"spec": {"xs": [1, 2, 3]}});
    assert!(errors(&s, small).is_empty());
    let big: Vec<i64> = (0..200).collect();
    let got = errors(&s, json!({"spec": {"xs": big}}));
    assert_eq!(got.len(), 1);
    assert!(
        got[0].contains("call cost exceeds limit for rule"),
        "{got:?}"
    );
}

#[test]
fn the_runtime_budget_stops_further_rules() {
    let rule = json!({"rule": "self.all(a, self.all(b, a + b >= 0))"});
    let s = spec_of(json!({"xs": {"type": "array", "items": {"type": "array",
        "items": {"type": "integer"}, "x-kubernetes-validations": [rule]}}}));
    let row: Vec<i64> = (0..60).collect();
    let rows: Vec<Value> = (0..300).map(|_| json!(row)).collect();
    let got = errors(&s, json!({"spec": {"xs": rows}}));
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(got[0].contains("running out of cost budget"));
}

#[test]
fn non_structural_schemas_are_refused_with_paths() {
    let got = refused(json!({"type": "object", "properties": {
        "spec": {"properties": {"a": {"type": "array"}}},
        "m": {"type": "object", "additionalProperties": false},
        "u": {"type": "array", "uniqueItems": true, "items": {"type": "string"}},
        "r": {"$ref": "#/definitions/x", "type": "string"},
        "j": {"type": "string", "anyOf": [{"type": "string"}]},
    }}));
    assert_eq!(
        got,
        [
            "properties[j].anyOf[0].type: Forbidden: must be empty to be structural",
            "properties[m].additionalProperties: Forbidden: additionalProperties cannot be set to false",
            "properties[r].$ref: Forbidden: $ref is not supported",
            "properties[spec].type: Required value: must not be empty for specified object fields",
            "properties[spec].properties[a].items: Required value: must be specified",
            "properties[u].uniqueItems: Forbidden: uniqueItems cannot be set to true since the runtime complexity becomes quadratic",
        ]
    );
    let root = refused(json!({"type": "string"}));
    assert_eq!(
        root,
        ["type: Unsupported value: \"string\": supported values: \"object\""]
    );
}

#[test]
fn schemas_with_bad_patterns_defaults_list_keys_or_metadata_are_refused() {
    let got = refused(json!({"type": "object", "properties": {
        "metadata": {"type": "object", "properties": {"labels": {"type": "object"}}},
        "p": {"type": "string", "pattern": "(unclosed"},
        "d": {"type": "integer", "default": "two"},
        "l": {"type": "array", "x-kubernetes-list-type": "map", "items": {"type": "object"}},
    }}));
    assert_eq!(got.len(), 4, "{got:?}");
    assert!(got[0].starts_with("properties[d].default: Invalid value: \"string\""));
    assert!(got[1].starts_with("properties[l].x-kubernetes-list-map-keys: Required value"));
    assert!(got[2].starts_with("properties[p].pattern: Invalid value: \"(unclosed\""));
    assert!(got[3].starts_with("properties[metadata]: Forbidden"));
}

#[test]
fn rules_that_do_not_compile_or_are_too_long_are_refused_naming_the_rule() {
    let long = format!("self.a == '{}'", "x".repeat(MAX_RULE_BYTES));
    let got = refused(json!({"type": "object", "x-kubernetes-validations": [
        {"rule": "self.min <= "}, {"rule": long}, {"rule": "true", "reason": "Nope"},
        {"rule": "true", "fieldPath": "spec[0]"}]}));
    assert_eq!(got.len(), 4, "{got:#?}");
    assert!(got[0].starts_with(
        "x-kubernetes-validations[0].rule: Invalid value: \"self.min <= \": compilation failed"
    ));
    assert!(got[1].contains("longer than 4096 bytes"));
    assert!(got[2].starts_with("x-kubernetes-validations[2].reason: Unsupported value: \"Nope\""));
    assert!(got[3].starts_with("x-kubernetes-validations[3].fieldPath: Invalid value"));
}

#[test]
fn the_422_lists_every_error_with_its_cause() {
    let s = spec_of(
        json!({"replicas": {"type": "integer"}, "name": {"type": "string",
        "minLength": 3}}),
    );
    let errs = s.validate(
        &json!({"spec": {"replicas": "two", "name": "a"}}),
        None,
        Part::Whole,
    );
    let errs: Vec<FieldError> = errs.into_iter().filter(|e| e.field != "<nil>").collect();
    let e = invalid("example.com", "Widget", "w1", &errs);
    assert_eq!(e.code, 422);
    assert_eq!(
        e.message,
        "Widget.example.com \"w1\" is invalid: [spec.name: Invalid value: \"a\": spec.name in \
         body should be at least 3 chars long, spec.replicas: Invalid value: \"string\": \
         spec.replicas in body must be of type integer: \"string\"]"
    );
    let details = e.details.unwrap();
    assert_eq!(details["causes"][1]["field"], "spec.replicas");
    assert_eq!(details["causes"][1]["reason"], "FieldValueTypeInvalid");
    assert_eq!(details["kind"], "Widget");
}
