//! `Conv`: one k8s-openapi type and its k8s-pb message, each way. The generated impls
//! (`generated.rs`) call the helpers here; the leaves whose two forms differ (times,
//! quantities, int-or-string, embedded JSON) are written out below.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, MicroTime, Time};
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;
use serde_json::Value;

/// A k8s-openapi type with a protobuf message of the same shape.
pub trait Conv: Sized {
    type Pb: Default;
    fn to_pb(self) -> Self::Pb;
    fn from_pb(p: Self::Pb) -> Self;
    /// Whether a decoded value is Go's zero value, which `omitempty` leaves out of the JSON
    /// a real API server stores (Go encodes non-pointer fields even when zero).
    fn is_zero(_p: &Self::Pb) -> bool {
        false
    }
}

pub fn to_pb<T: Conv>(t: T) -> T::Pb {
    t.to_pb()
}

pub fn from_pb<T: Conv>(p: T::Pb) -> T {
    T::from_pb(p)
}

/// An optional field: absent when the sender encoded its zero value.
pub fn from_pb_nz<T: Conv>(p: T::Pb) -> Option<T> {
    (!T::is_zero(&p)).then(|| T::from_pb(p))
}

/// A list that JSON leaves out when empty (protobuf cannot tell empty from absent).
pub fn non_empty<T>(v: Vec<T>) -> Option<Vec<T>> {
    (!v.is_empty()).then_some(v)
}

pub fn non_empty_map<T>(m: BTreeMap<String, T>) -> Option<BTreeMap<String, T>> {
    (!m.is_empty()).then_some(m)
}

macro_rules! identity {
    ($($t:ty => $zero:expr),* $(,)?) => {$(
        impl Conv for $t {
            type Pb = $t;
            fn to_pb(self) -> Self::Pb {
                self
            }
            fn from_pb(p: Self::Pb) -> Self {
                p
            }
            fn is_zero(p: &Self::Pb) -> bool {
                #[allow(clippy::redundant_closure_call)]
                ($zero)(p)
            }
        }
    )*};
}

identity!(
    String => |s: &String| s.is_empty(),
    bool => |b: &bool| !*b,
    i32 => |n: &i32| *n == 0,
    i64 => |n: &i64| *n == 0,
    f64 => |n: &f64| *n == 0.0,
);

impl Conv for ByteString {
    type Pb = Vec<u8>;
    fn to_pb(self) -> Self::Pb {
        self.0
    }
    fn from_pb(p: Self::Pb) -> Self {
        ByteString(p)
    }
    fn is_zero(p: &Self::Pb) -> bool {
        p.is_empty()
    }
}

impl Conv for Quantity {
    type Pb = k8s_pb::apimachinery::pkg::api::resource::Quantity;
    fn to_pb(self) -> Self::Pb {
        Self::Pb {
            string: Some(self.0),
        }
    }
    fn from_pb(p: Self::Pb) -> Self {
        Quantity(p.string.unwrap_or_default())
    }
}

/// Seconds and nanoseconds of a time; the zero message is Go's zero time (which JSON omits).
fn timestamp(seconds: Option<i64>, nanos: Option<i32>) -> Timestamp {
    Timestamp::new(seconds.unwrap_or(0), nanos.unwrap_or(0)).unwrap_or(Timestamp::UNIX_EPOCH)
}

/// `Time` and `MicroTime`: both are seconds and nanoseconds on the wire.
macro_rules! time {
    ($($t:ident),*) => {$(
        impl Conv for $t {
            type Pb = k8s_pb::apimachinery::pkg::apis::meta::v1::$t;
            fn to_pb(self) -> Self::Pb {
                Self::Pb {
                    seconds: Some(self.0.as_second()),
                    nanos: Some(self.0.subsec_nanosecond()).filter(|n| *n != 0),
                }
            }
            fn from_pb(p: Self::Pb) -> Self {
                $t(timestamp(p.seconds, p.nanos))
            }
            fn is_zero(p: &Self::Pb) -> bool {
                p.seconds.unwrap_or(0) == 0 && p.nanos.unwrap_or(0) == 0
            }
        }
    )*};
}

time!(Time, MicroTime);

impl Conv for IntOrString {
    type Pb = k8s_pb::apimachinery::pkg::util::intstr::IntOrString;
    fn to_pb(self) -> Self::Pb {
        match self {
            IntOrString::Int(n) => Self::Pb {
                r#type: Some(0),
                int_val: Some(n),
                str_val: None,
            },
            IntOrString::String(s) => Self::Pb {
                r#type: Some(1),
                int_val: None,
                str_val: Some(s),
            },
        }
    }
    fn from_pb(p: Self::Pb) -> Self {
        match p.r#type {
            Some(1) => IntOrString::String(p.str_val.unwrap_or_default()),
            _ => IntOrString::Int(p.int_val.unwrap_or(0)),
        }
    }
    fn is_zero(p: &Self::Pb) -> bool {
        p.r#type.unwrap_or(0) == 0 && p.int_val.unwrap_or(0) == 0
    }
}

/// How deep embedded protobuf objects are decoded (a ControllerRevision's data holds one; a
/// body nesting envelopes deeper is not a Kubernetes object, and must not exhaust the stack).
const MAX_EMBEDDED: u32 = 4;

thread_local! {
    static EMBEDDED: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// Embedded JSON: the raw bytes are the JSON text (an embedded protobuf object, which starts
/// with the `k8s\0` magic, is decoded to its JSON form, up to [`MAX_EMBEDDED`] deep).
fn raw_to_json(raw: Option<Vec<u8>>) -> Value {
    match raw {
        None => Value::Null,
        Some(raw) if raw.starts_with(crate::MAGIC) => {
            let depth = EMBEDDED.get();
            if depth >= MAX_EMBEDDED {
                return Value::Null;
            }
            EMBEDDED.set(depth + 1);
            let decoded = crate::decode(&raw).unwrap_or(Value::Null);
            EMBEDDED.set(depth);
            decoded
        }
        Some(raw) => serde_json::from_slice(&raw).unwrap_or(Value::Null),
    }
}

fn json_to_raw(v: Value) -> Option<Vec<u8>> {
    (!v.is_null()).then(|| serde_json::to_vec(&v).expect("a JSON value serializes"))
}

impl Conv for RawExtension {
    type Pb = k8s_pb::apimachinery::pkg::runtime::RawExtension;
    fn to_pb(self) -> Self::Pb {
        Self::Pb {
            raw: json_to_raw(self.0),
        }
    }
    fn from_pb(p: Self::Pb) -> Self {
        RawExtension(raw_to_json(p.raw))
    }
}

impl Conv for FieldsV1 {
    type Pb = k8s_pb::apimachinery::pkg::apis::meta::v1::FieldsV1;
    fn to_pb(self) -> Self::Pb {
        Self::Pb {
            raw: json_to_raw(self.0),
        }
    }
    fn from_pb(p: Self::Pb) -> Self {
        FieldsV1(raw_to_json(p.raw))
    }
}

/// CustomResourceDefinition schemas: the JSON values and the either-or types.
mod schema {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as ext;
    use k8s_pb::apiextensions_apiserver::pkg::apis::apiextensions::v1 as pb;
    use serde_json::json;

    use super::{Conv, from_pb, json_to_raw, raw_to_json, to_pb};

    impl Conv for ext::JSON {
        type Pb = pb::Json;
        fn to_pb(self) -> Self::Pb {
            Self::Pb {
                raw: json_to_raw(self.0),
            }
        }
        fn from_pb(p: Self::Pb) -> Self {
            ext::JSON(raw_to_json(p.raw))
        }
    }

    impl Conv for ext::CustomResourceSubresourceStatus {
        type Pb = pb::CustomResourceSubresourceStatus;
        fn to_pb(self) -> Self::Pb {
            Self::Pb {}
        }
        fn from_pb(_: Self::Pb) -> Self {
            ext::CustomResourceSubresourceStatus(json!({}))
        }
    }

    impl Conv for ext::JSONSchemaPropsOrArray {
        type Pb = pb::JsonSchemaPropsOrArray;
        fn to_pb(self) -> Self::Pb {
            match self {
                Self::Schema(s) => Self::Pb {
                    schema: Some(Box::new(to_pb(*s))),
                    j_son_schemas: Vec::new(),
                },
                Self::Schemas(v) => Self::Pb {
                    schema: None,
                    j_son_schemas: v.into_iter().map(to_pb).collect(),
                },
            }
        }
        fn from_pb(p: Self::Pb) -> Self {
            if p.j_son_schemas.is_empty() {
                Self::Schema(Box::new(from_pb(*p.schema.unwrap_or_default())))
            } else {
                Self::Schemas(p.j_son_schemas.into_iter().map(from_pb).collect())
            }
        }
    }

    impl Conv for ext::JSONSchemaPropsOrBool {
        type Pb = pb::JsonSchemaPropsOrBool;
        fn to_pb(self) -> Self::Pb {
            match self {
                // A schema allows (as Go's unmarshalling of an object sets it).
                Self::Schema(s) => Self::Pb {
                    allows: Some(true),
                    schema: Some(Box::new(to_pb(*s))),
                },
                Self::Bool(b) => Self::Pb {
                    allows: Some(b),
                    schema: None,
                },
            }
        }
        fn from_pb(p: Self::Pb) -> Self {
            match p.schema {
                Some(s) => Self::Schema(Box::new(from_pb(*s))),
                None => Self::Bool(p.allows.unwrap_or(false)),
            }
        }
    }

    impl Conv for ext::JSONSchemaPropsOrStringArray {
        type Pb = pb::JsonSchemaPropsOrStringArray;
        fn to_pb(self) -> Self::Pb {
            match self {
                Self::Schema(s) => Self::Pb {
                    schema: Some(to_pb(*s)),
                    property: Vec::new(),
                },
                Self::Strings(v) => Self::Pb {
                    schema: None,
                    property: v,
                },
            }
        }
        fn from_pb(p: Self::Pb) -> Self {
            match p.schema {
                Some(s) => Self::Schema(Box::new(from_pb(s))),
                None => Self::Strings(p.property),
            }
        }
    }
}
