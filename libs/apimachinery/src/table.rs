//! `meta.k8s.io/v1` Table responses, as `kubectl get` asks for them.

use serde_json::Value;

use crate::catalog::ResourceInfo;

/// What each row carries in `object` (the `includeObject` query parameter).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum IncludeObject {
    None,
    /// `PartialObjectMetadata` (kubectl's default).
    #[default]
    Metadata,
    Object,
}

/// A Table of `objects` with the resource's columns (`kind: Table`, `apiVersion:
/// meta.k8s.io/v1`, `columnDefinitions`, `rows`); the caller sets `metadata` (resourceVersion,
/// continue). Ages are computed against `now` (seconds since the Unix epoch).
pub fn render(info: &ResourceInfo, objects: &[Value], include: IncludeObject, now: i64) -> Value {
    let _ = (info, objects, include, now);
    todo!()
}
