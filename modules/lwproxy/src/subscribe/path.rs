//! Which kind a read names: `GET /api/v1/[namespaces/<ns>/]<resource>[/<name>[/<sub>]]` and
//! `GET /apis/<group>/<version>/...` (also under the legacy `watch/` prefix). Discovery paths
//! name none.

use apimachinery::subscribe::Subscription;

/// A read of a kind the node rules do not deliver, and whether it is a watch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Read {
    pub subscription: Subscription,
    pub watch: bool,
}

/// The subscribable kind `path` (with `query`) reads, if any.
pub(crate) fn read_of(path: &str, query: Option<&str>) -> Option<Read> {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, version, rest) = match parts.as_slice() {
        ["api", version, rest @ ..] => ("", *version, rest),
        ["apis", group, version, rest @ ..] => (*group, *version, rest),
        _ => return None,
    };
    let (legacy_watch, rest) = match rest {
        ["watch", rest @ ..] => (true, rest),
        rest => (false, rest),
    };
    let resource = match rest {
        [] => return None,
        ["namespaces", _, "status" | "finalize"] => "namespaces",
        ["namespaces", _, resource, ..] => resource,
        [resource, ..] => resource,
    };
    if apimachinery::subscribe::is_always_delivered(group, resource) {
        return None;
    }
    let subscription = Subscription::new(group, version, resource).ok()?;
    let watch = legacy_watch
        || query.is_some_and(|q| {
            q.split('&')
                .any(|p| matches!(p, "watch=true" | "watch=1" | "watch=True"))
        });
    Some(Read {
        subscription,
        watch,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resource(path: &str) -> Option<String> {
        read_of(path, None).map(|r| r.subscription.store_resource())
    }

    #[test]
    fn lists_gets_and_watches_name_their_kind_and_delivered_kinds_and_discovery_none() {
        let np = Some("networkpolicies.networking.k8s.io".to_owned());
        assert_eq!(resource("/apis/networking.k8s.io/v1/networkpolicies"), np);
        assert_eq!(
            resource("/apis/networking.k8s.io/v1/namespaces/default/networkpolicies/a"),
            np
        );
        assert_eq!(
            resource("/apis/networking.k8s.io/v1/watch/namespaces/default/networkpolicies"),
            np
        );
        assert_eq!(resource("/api/v1/namespaces"), Some("namespaces".into()));
        assert_eq!(
            resource("/api/v1/namespaces/kube-system"),
            Some("namespaces".into())
        );
        assert_eq!(
            resource("/api/v1/namespaces/a/status"),
            Some("namespaces".into())
        );
        assert_eq!(
            resource("/api/v1/namespaces/a/events"),
            Some("events".into())
        );
        assert_eq!(resource("/api/v1/namespaces/a/pods"), None);
        assert_eq!(resource("/api/v1/namespaces/a/pods/p/log"), None);
        assert_eq!(resource("/api/v1/secrets"), None);
        assert_eq!(resource("/apis/networking.k8s.io/v1"), None);
        assert_eq!(resource("/api"), None);
        assert_eq!(resource("/version"), None);
        assert_eq!(resource("/apis/Bad/v1/foos"), None, "not a kind name");
        assert!(
            read_of("/api/v1/namespaces", Some("watch=true&rv=1"))
                .unwrap()
                .watch
        );
        assert!(
            !read_of("/api/v1/namespaces", Some("limit=1"))
                .unwrap()
                .watch
        );
    }
}
