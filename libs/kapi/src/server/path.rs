//! Request paths: what a URL names, before and after looking at the registry.

use apimachinery::ApiError;
use percent_encoding::percent_decode_str;

use super::Target;
use super::error::not_found_path;
use super::health::Endpoint;
use crate::Registry;

/// What a request path names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Route {
    /// `/version`
    Version,
    /// `/api`
    ApiVersions,
    /// `/apis`
    GroupList,
    /// `/apis/<group>`
    Group(String),
    /// `/api/v1`, `/apis/<group>/<version>`
    ResourceList { group: String, version: String },
    /// `/openapi/v2`
    OpenApiV2,
    /// `/openapi/v3`
    OpenApiRoot,
    /// `/openapi/v3/api/v1`, `/openapi/v3/apis/<group>/<version>`: the part after `v3/`.
    OpenApiGroupVersion(String),
    /// Anything below a group version.
    Resource(ResourcePath),
    /// `/healthz`, `/livez`, `/readyz`, and one check below them (`/readyz/etcd`).
    Health {
        endpoint: Endpoint,
        check: Option<String>,
    },
}

/// The segments below `/api/v1` or `/apis/<group>/<version>`, not yet checked against the
/// registry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ResourcePath {
    pub(crate) group: String,
    pub(crate) version: String,
    /// `true` when the segments started with the legacy `watch` prefix (already removed).
    pub(crate) watch_prefix: bool,
    /// Decoded, non-empty.
    pub(crate) segments: Vec<String>,
}

/// Parses a raw (percent-encoded) path. A single trailing slash is ignored; empty segments
/// elsewhere name nothing.
pub(crate) fn parse(raw: &str) -> Result<Route, ApiError> {
    let trimmed = raw
        .strip_suffix('/')
        .filter(|s| !s.is_empty())
        .unwrap_or(raw);
    let Some(rest) = trimmed.strip_prefix('/') else {
        return Err(not_found_path());
    };
    let segments = rest.split('/').map(decode).collect::<Result<Vec<_>, _>>()?;
    let segs: Vec<&str> = segments.iter().map(String::as_str).collect();
    let route = match segs.as_slice() {
        ["version"] => Route::Version,
        ["api"] => Route::ApiVersions,
        ["apis"] => Route::GroupList,
        ["apis", group] => Route::Group(group.to_string()),
        ["api", version] => Route::ResourceList {
            group: String::new(),
            version: version.to_string(),
        },
        ["apis", group, version] => Route::ResourceList {
            group: group.to_string(),
            version: version.to_string(),
        },
        [first, check @ ..] if Endpoint::from_segment(first).is_some() => Route::Health {
            endpoint: Endpoint::from_segment(first).unwrap_or(Endpoint::Healthz),
            check: (!check.is_empty()).then(|| check.join("/")),
        },
        ["openapi", "v2"] => Route::OpenApiV2,
        ["openapi", "v3"] => Route::OpenApiRoot,
        ["openapi", "v3", "api", _] | ["openapi", "v3", "apis", _, _] => {
            Route::OpenApiGroupVersion(segs[2..].join("/"))
        }
        ["api", version, rest @ ..] => resource_path("", version, rest),
        ["apis", group, version, rest @ ..] => resource_path(group, version, rest),
        _ => return Err(not_found_path()),
    };
    Ok(route)
}

/// Resolves the segments against the registry: which resource, scope, object and
/// subresource. Unknown resources, wrong scopes and unserved subresources are 404.
pub(crate) fn resolve(registry: &Registry, path: ResourcePath) -> Result<Target, ApiError> {
    let ResourcePath {
        group,
        version,
        watch_prefix,
        segments,
    } = path;
    let is_namespaced = |plural: &str| {
        registry
            .get(&group, &version, plural)
            .is_some_and(|info| info.namespaced)
    };
    let shape = shape(&segments, is_namespaced).ok_or_else(not_found_path)?;
    let info = registry
        .get(&group, &version, &shape.plural)
        .ok_or_else(not_found_path)?;
    let scoped_right = match (&shape.namespace, info.namespaced) {
        (Some(_), namespaced) => namespaced,
        // The all-namespaces form of a namespaced resource names collections only.
        (None, true) => shape.name.is_none(),
        (None, false) => true,
    };
    let sub_served = shape
        .subresource
        .as_ref()
        .is_none_or(|s| info.subresources.iter().any(|x| x == s));
    if !scoped_right || !sub_served {
        return Err(not_found_path());
    }
    Ok(Target {
        info,
        namespace: shape.namespace,
        name: shape.name,
        subresource: shape.subresource,
        watch_prefix,
    })
}

/// The parts of a resource path.
#[derive(Debug, PartialEq, Eq)]
struct Shape {
    namespace: Option<String>,
    plural: String,
    name: Option<String>,
    subresource: Option<String>,
}

/// Splits the segments. `namespaces/<a>/<b>` is the collection `<b>` in namespace `<a>` when
/// `<b>` is a namespaced resource of the group version, else subresource `<b>` of namespace
/// `<a>` (`namespaces/<a>/finalize`).
fn shape(segments: &[String], is_namespaced: impl Fn(&str) -> bool) -> Option<Shape> {
    let owned = |s: &String| Some(s.clone());
    let mut segs: Vec<&str> = segments.iter().map(String::as_str).collect();
    // `.../{name}/proxy/{path...}`: the proxied path is the proxy subresource's business. The
    // subresource sits after `namespaces/<ns>/<plural>/<name>` or `<plural>/<name>` (a pod
    // named `proxy` is no subresource).
    let at = match segs.as_slice() {
        ["namespaces", _, _, _, "proxy", _, ..] => Some(4),
        [_, _, "proxy", _, ..] => Some(2),
        _ => None,
    };
    if let Some(at) = at {
        segs.truncate(at + 1);
    }
    let segments = &segments[..segs.len()];
    let shape = match segs.as_slice() {
        ["namespaces", _, res, ..] if segs.len() <= 5 && (segs.len() > 3 || is_namespaced(res)) => {
            Shape {
                namespace: owned(&segments[1]),
                plural: segments[2].clone(),
                name: segments.get(3).cloned(),
                subresource: segments.get(4).cloned(),
            }
        }
        [_] | [_, _] | [_, _, _] => Shape {
            namespace: None,
            plural: segments[0].clone(),
            name: segments.get(1).cloned(),
            subresource: segments.get(2).cloned(),
        },
        _ => return None,
    };
    Some(shape)
}

fn resource_path(group: &str, version: &str, rest: &[&str]) -> Route {
    let (watch_prefix, rest) = match rest {
        ["watch", rest @ ..] if !rest.is_empty() => (true, rest),
        _ => (false, rest),
    };
    Route::Resource(ResourcePath {
        group: group.to_owned(),
        version: version.to_owned(),
        watch_prefix,
        segments: rest.iter().map(|s| s.to_string()).collect(),
    })
}

fn decode(segment: &str) -> Result<String, ApiError> {
    if segment.is_empty() {
        return Err(not_found_path());
    }
    percent_decode_str(segment)
        .decode_utf8()
        .map(|s| s.into_owned())
        .map_err(|_| not_found_path())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segs(path: &str) -> Vec<String> {
        path.split('/').map(str::to_owned).collect()
    }

    fn resource(path: &str) -> ResourcePath {
        match parse(path).unwrap() {
            Route::Resource(r) => r,
            other => panic!("{path}: {other:?}"),
        }
    }

    #[test]
    fn discovery_paths_parse() {
        assert_eq!(parse("/version").unwrap(), Route::Version);
        assert_eq!(parse("/api").unwrap(), Route::ApiVersions);
        assert_eq!(parse("/api/").unwrap(), Route::ApiVersions);
        assert_eq!(parse("/apis").unwrap(), Route::GroupList);
        assert_eq!(parse("/apis/apps").unwrap(), Route::Group("apps".into()));
        assert_eq!(
            parse("/apis/apps/v1").unwrap(),
            Route::ResourceList {
                group: "apps".into(),
                version: "v1".into()
            }
        );
        assert_eq!(
            parse("/openapi/v3/apis/apps/v1").unwrap(),
            Route::OpenApiGroupVersion("apis/apps/v1".into())
        );
        assert_eq!(parse("/openapi/v2").unwrap(), Route::OpenApiV2);
        assert_eq!(
            parse("/openapi/v3/api/v1").unwrap(),
            Route::OpenApiGroupVersion("api/v1".into())
        );
    }

    #[test]
    fn unknown_and_malformed_paths_are_not_found() {
        for p in ["/", "", "/foo", "/api/v1//pods", "/openapi/v1", "/metricz"] {
            let e = parse(p).unwrap_err();
            assert_eq!(e.code, 404, "{p}");
        }
    }

    #[test]
    fn health_paths_name_the_endpoint_and_check() {
        assert_eq!(
            parse("/readyz").unwrap(),
            Route::Health {
                endpoint: Endpoint::Readyz,
                check: None
            }
        );
        assert_eq!(
            parse("/livez/poststarthook/crd-informer-synced").unwrap(),
            Route::Health {
                endpoint: Endpoint::Livez,
                check: Some("poststarthook/crd-informer-synced".into())
            }
        );
    }

    #[test]
    fn watch_prefix_is_stripped() {
        let r = resource("/api/v1/watch/namespaces/a/pods");
        assert!(r.watch_prefix);
        assert_eq!(r.segments, segs("namespaces/a/pods"));
        let r = resource("/api/v1/watch");
        assert!(!r.watch_prefix, "a resource called watch is not a prefix");
    }

    #[test]
    fn segments_are_percent_decoded() {
        let r = resource("/apis/rbac.authorization.k8s.io/v1/clusterroles/system%3Anode");
        assert_eq!(r.segments, segs("clusterroles/system:node"));
    }

    #[test]
    fn namespaced_shapes_split_by_registry_knowledge() {
        let namespaced = |p: &str| p == "pods";
        let s = shape(&segs("namespaces/a/pods"), namespaced).unwrap();
        assert_eq!(s.namespace.as_deref(), Some("a"));
        assert_eq!(s.plural, "pods");
        let s = shape(&segs("namespaces/a/finalize"), namespaced).unwrap();
        assert_eq!(s.namespace, None);
        assert_eq!(s.plural, "namespaces");
        assert_eq!(s.name.as_deref(), Some("a"));
        assert_eq!(s.subresource.as_deref(), Some("finalize"));
        let s = shape(&segs("namespaces/a/pods/p/status"), namespaced).unwrap();
        assert_eq!(
            (s.name.as_deref(), s.subresource.as_deref()),
            (Some("p"), Some("status"))
        );
        assert!(shape(&segs("namespaces/a/pods/p/status/x"), namespaced).is_none());
        assert!(shape(&segs("nodes/n/status/x"), namespaced).is_none());
        let s = shape(&segs("nodes/n/proxy/metrics/cadvisor"), namespaced).unwrap();
        assert_eq!(
            (
                s.plural.as_str(),
                s.name.as_deref(),
                s.subresource.as_deref()
            ),
            ("nodes", Some("n"), Some("proxy"))
        );
        let s = shape(&segs("namespaces/a/pods/p/proxy/x"), namespaced).unwrap();
        assert_eq!(s.subresource.as_deref(), Some("proxy"));
        let s = shape(&segs("namespaces/a/pods/proxy/proxy/x/proxy"), namespaced).unwrap();
        assert_eq!(
            (s.name.as_deref(), s.subresource.as_deref()),
            (Some("proxy"), Some("proxy"))
        );
        let s = shape(&segs("namespaces"), namespaced).unwrap();
        assert_eq!(s.plural, "namespaces");
    }
}
