//! The gnostic `openapi.v2.Document` protobuf (`openapiv2/OpenAPIv2.proto`), the form
//! `kubectl` asks `/openapi/v2` for: the subset of its messages the documents use, defined
//! by hand with their field numbers, and the conversion from the JSON document.

use serde_json::{Map, Value};

/// `openapi.v2.Document`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Document {
    #[prost(string, tag = "1")]
    pub(crate) swagger: String,
    #[prost(message, optional, tag = "2")]
    pub(crate) info: Option<Info>,
    #[prost(message, optional, tag = "8")]
    pub(crate) paths: Option<Paths>,
    #[prost(message, optional, tag = "9")]
    pub(crate) definitions: Option<Definitions>,
}

/// `openapi.v2.Info`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Info {
    #[prost(string, tag = "1")]
    pub(crate) title: String,
    #[prost(string, tag = "2")]
    pub(crate) version: String,
}

/// `openapi.v2.Paths`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Paths {
    #[prost(message, repeated, tag = "2")]
    pub(crate) path: Vec<NamedPathItem>,
}

/// `openapi.v2.NamedPathItem`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct NamedPathItem {
    #[prost(string, tag = "1")]
    pub(crate) name: String,
    #[prost(message, optional, tag = "2")]
    pub(crate) value: Option<PathItem>,
}

/// `openapi.v2.PathItem`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct PathItem {
    #[prost(message, optional, tag = "2")]
    pub(crate) get: Option<Operation>,
    #[prost(message, optional, tag = "3")]
    pub(crate) put: Option<Operation>,
    #[prost(message, optional, tag = "4")]
    pub(crate) post: Option<Operation>,
    #[prost(message, optional, tag = "5")]
    pub(crate) delete: Option<Operation>,
    #[prost(message, optional, tag = "6")]
    pub(crate) options: Option<Operation>,
    #[prost(message, optional, tag = "7")]
    pub(crate) head: Option<Operation>,
    #[prost(message, optional, tag = "8")]
    pub(crate) patch: Option<Operation>,
}

/// `openapi.v2.Operation`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Operation {
    #[prost(string, tag = "5")]
    pub(crate) operation_id: String,
    #[prost(message, repeated, tag = "8")]
    pub(crate) parameters: Vec<ParametersItem>,
    #[prost(message, optional, tag = "9")]
    pub(crate) responses: Option<Responses>,
    #[prost(message, repeated, tag = "13")]
    pub(crate) vendor_extension: Vec<NamedAny>,
}

/// `openapi.v2.ParametersItem` with its `parameter` case.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ParametersItem {
    #[prost(message, optional, tag = "1")]
    pub(crate) parameter: Option<Parameter>,
}

/// `openapi.v2.Parameter` with its `non_body_parameter` case.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Parameter {
    #[prost(message, optional, tag = "2")]
    pub(crate) non_body_parameter: Option<NonBodyParameter>,
}

/// `openapi.v2.NonBodyParameter` with its query and path cases.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct NonBodyParameter {
    #[prost(message, optional, tag = "3")]
    pub(crate) query_parameter_sub_schema: Option<SimpleParameter>,
    #[prost(message, optional, tag = "4")]
    pub(crate) path_parameter_sub_schema: Option<SimpleParameter>,
}

/// The common head of `QueryParameterSubSchema` and `PathParameterSubSchema` (same numbers
/// for `required`, `in`, `description`, `name`; `type` differs, so it is left out).
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct SimpleParameter {
    #[prost(bool, tag = "1")]
    pub(crate) required: bool,
    #[prost(string, tag = "2")]
    pub(crate) r#in: String,
    #[prost(string, tag = "4")]
    pub(crate) name: String,
}

/// `openapi.v2.Responses`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Responses {
    #[prost(message, repeated, tag = "1")]
    pub(crate) response_code: Vec<NamedResponseValue>,
}

/// `openapi.v2.NamedResponseValue`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct NamedResponseValue {
    #[prost(string, tag = "1")]
    pub(crate) name: String,
    #[prost(message, optional, tag = "2")]
    pub(crate) value: Option<ResponseValue>,
}

/// `openapi.v2.ResponseValue` with its `response` case.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ResponseValue {
    #[prost(message, optional, tag = "1")]
    pub(crate) response: Option<Response>,
}

/// `openapi.v2.Response`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Response {
    #[prost(string, tag = "1")]
    pub(crate) description: String,
}

/// `openapi.v2.Definitions`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Definitions {
    #[prost(message, repeated, tag = "1")]
    pub(crate) additional_properties: Vec<NamedSchema>,
}

/// `openapi.v2.NamedSchema`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct NamedSchema {
    #[prost(string, tag = "1")]
    pub(crate) name: String,
    #[prost(message, optional, tag = "2")]
    pub(crate) value: Option<Schema>,
}

/// `openapi.v2.NamedAny`: vendor extensions, their values as YAML (JSON text here).
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct NamedAny {
    #[prost(string, tag = "1")]
    pub(crate) name: String,
    #[prost(message, optional, tag = "2")]
    pub(crate) value: Option<Any>,
}

/// `openapi.v2.Any`, its `yaml` field only.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Any {
    #[prost(string, tag = "2")]
    pub(crate) yaml: String,
}

/// `openapi.v2.Schema`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Schema {
    #[prost(string, tag = "1")]
    pub(crate) _ref: String,
    #[prost(string, tag = "2")]
    pub(crate) format: String,
    #[prost(string, tag = "3")]
    pub(crate) title: String,
    #[prost(string, tag = "4")]
    pub(crate) description: String,
    #[prost(message, optional, tag = "5")]
    pub(crate) default: Option<Any>,
    #[prost(double, tag = "7")]
    pub(crate) maximum: f64,
    #[prost(double, tag = "9")]
    pub(crate) minimum: f64,
    #[prost(int64, tag = "11")]
    pub(crate) max_length: i64,
    #[prost(int64, tag = "12")]
    pub(crate) min_length: i64,
    #[prost(string, tag = "13")]
    pub(crate) pattern: String,
    #[prost(int64, tag = "14")]
    pub(crate) max_items: i64,
    #[prost(int64, tag = "15")]
    pub(crate) min_items: i64,
    #[prost(string, repeated, tag = "19")]
    pub(crate) required: Vec<String>,
    #[prost(message, repeated, tag = "20")]
    pub(crate) r#enum: Vec<Any>,
    #[prost(message, optional, tag = "21")]
    pub(crate) additional_properties: Option<AdditionalPropertiesItem>,
    #[prost(message, optional, tag = "22")]
    pub(crate) r#type: Option<TypeItem>,
    #[prost(message, optional, tag = "23")]
    pub(crate) items: Option<ItemsItem>,
    #[prost(message, repeated, tag = "24")]
    pub(crate) all_of: Vec<Schema>,
    #[prost(message, optional, tag = "25")]
    pub(crate) properties: Option<Properties>,
    #[prost(bool, tag = "27")]
    pub(crate) read_only: bool,
    #[prost(message, repeated, tag = "31")]
    pub(crate) vendor_extension: Vec<NamedAny>,
}

/// `openapi.v2.AdditionalPropertiesItem`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct AdditionalPropertiesItem {
    #[prost(oneof = "AdditionalProperties", tags = "1, 2")]
    pub(crate) oneof: Option<AdditionalProperties>,
}

/// The `oneof` of [`AdditionalPropertiesItem`].
#[derive(Clone, PartialEq, prost::Oneof)]
pub(crate) enum AdditionalProperties {
    #[prost(message, boxed, tag = "1")]
    Schema(Box<Schema>),
    #[prost(bool, tag = "2")]
    Boolean(bool),
}

/// `openapi.v2.TypeItem`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct TypeItem {
    #[prost(string, repeated, tag = "1")]
    pub(crate) value: Vec<String>,
}

/// `openapi.v2.ItemsItem`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ItemsItem {
    #[prost(message, repeated, tag = "1")]
    pub(crate) schema: Vec<Schema>,
}

/// `openapi.v2.Properties`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Properties {
    #[prost(message, repeated, tag = "1")]
    pub(crate) additional_properties: Vec<NamedSchema>,
}

// === conversion ===

/// The protobuf form of a JSON Swagger 2.0 document (`swagger`, `info`, `paths`,
/// `definitions`).
pub(crate) fn document(doc: &Value) -> Document {
    let str_at = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
    let info = doc.get("info").map(|i| Info {
        title: str_at(i, "title"),
        version: str_at(i, "version"),
    });
    let paths = doc
        .get("paths")
        .and_then(Value::as_object)
        .map(|paths| Paths {
            path: paths
                .iter()
                .map(|(name, item)| NamedPathItem {
                    name: name.clone(),
                    value: Some(path_item(item)),
                })
                .collect(),
        });
    let definitions = doc
        .get("definitions")
        .and_then(Value::as_object)
        .map(|defs| Definitions {
            additional_properties: named_schemas(defs),
        });
    Document {
        swagger: str_at(doc, "swagger"),
        info,
        paths,
        definitions,
    }
}

fn path_item(item: &Value) -> PathItem {
    let op = |method: &str| item.get(method).map(operation);
    PathItem {
        get: op("get"),
        put: op("put"),
        post: op("post"),
        delete: op("delete"),
        options: op("options"),
        head: op("head"),
        patch: op("patch"),
    }
}

fn operation(op: &Value) -> Operation {
    let parameters = op
        .get("parameters")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|p| {
            let simple = SimpleParameter {
                required: p.get("required").and_then(Value::as_bool).unwrap_or(false),
                r#in: p.get("in").and_then(Value::as_str).unwrap_or("").to_owned(),
                name: p
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned(),
            };
            let non_body = if simple.r#in == "path" {
                NonBodyParameter {
                    path_parameter_sub_schema: Some(simple),
                    ..Default::default()
                }
            } else {
                NonBodyParameter {
                    query_parameter_sub_schema: Some(simple),
                    ..Default::default()
                }
            };
            ParametersItem {
                parameter: Some(Parameter {
                    non_body_parameter: Some(non_body),
                }),
            }
        })
        .collect();
    let responses = op
        .get("responses")
        .and_then(Value::as_object)
        .map(|rs| Responses {
            response_code: rs
                .iter()
                .map(|(code, r)| NamedResponseValue {
                    name: code.clone(),
                    value: Some(ResponseValue {
                        response: Some(Response {
                            description: r
                                .get("description")
                                .and_then(Value::as_str)
                                .unwrap_or("")
                                .to_owned(),
                        }),
                    }),
                })
                .collect(),
        });
    Operation {
        operation_id: op
            .get("operationId")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned(),
        parameters,
        responses,
        vendor_extension: op.as_object().map(vendor_extensions).unwrap_or_default(),
    }
}

fn named_schemas(map: &Map<String, Value>) -> Vec<NamedSchema> {
    map.iter()
        .map(|(name, s)| NamedSchema {
            name: name.clone(),
            value: Some(schema(s)),
        })
        .collect()
}

/// The protobuf form of one JSON schema (keywords outside the subset are dropped).
pub(crate) fn schema(value: &Value) -> Schema {
    let Value::Object(map) = value else {
        return Schema::default();
    };
    let string = |k: &str| map.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
    let int = |k: &str| map.get(k).and_then(Value::as_i64).unwrap_or(0);
    let float = |k: &str| map.get(k).and_then(Value::as_f64).unwrap_or(0.0);
    let r#type = match map.get("type") {
        Some(Value::String(t)) => Some(TypeItem {
            value: vec![t.clone()],
        }),
        Some(Value::Array(ts)) => Some(TypeItem {
            value: ts
                .iter()
                .filter_map(|t| t.as_str().map(str::to_owned))
                .collect(),
        }),
        _ => None,
    };
    let items = match map.get("items") {
        Some(Value::Array(list)) => Some(ItemsItem {
            schema: list.iter().map(schema).collect(),
        }),
        Some(one @ Value::Object(_)) => Some(ItemsItem {
            schema: vec![schema(one)],
        }),
        _ => None,
    };
    let additional_properties = match map.get("additionalProperties") {
        Some(Value::Bool(b)) => Some(AdditionalProperties::Boolean(*b)),
        Some(s @ Value::Object(_)) => Some(AdditionalProperties::Schema(Box::new(schema(s)))),
        _ => None,
    }
    .map(|oneof| AdditionalPropertiesItem { oneof: Some(oneof) });
    Schema {
        _ref: string("$ref"),
        format: string("format"),
        title: string("title"),
        description: string("description"),
        default: map.get("default").map(any),
        maximum: float("maximum"),
        minimum: float("minimum"),
        max_length: int("maxLength"),
        min_length: int("minLength"),
        pattern: string("pattern"),
        max_items: int("maxItems"),
        min_items: int("minItems"),
        required: map
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|r| r.as_str().map(str::to_owned))
            .collect(),
        r#enum: map
            .get("enum")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(any)
            .collect(),
        additional_properties,
        r#type,
        items,
        all_of: map
            .get("allOf")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(schema)
            .collect(),
        properties: map
            .get("properties")
            .and_then(Value::as_object)
            .map(|props| Properties {
                additional_properties: named_schemas(props),
            }),
        read_only: map
            .get("readOnly")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        vendor_extension: vendor_extensions(map),
    }
}

/// The `x-*` keys, each value as JSON text (which is YAML, as gnostic's `Any.yaml` wants).
fn vendor_extensions(map: &Map<String, Value>) -> Vec<NamedAny> {
    map.iter()
        .filter(|(k, _)| k.starts_with("x-"))
        .map(|(k, v)| NamedAny {
            name: k.clone(),
            value: Some(any(v)),
        })
        .collect()
}

fn any(v: &Value) -> Any {
    Any {
        yaml: v.to_string(),
    }
}
