//! What each subresource accepts and returns (for discovery and for routing its verbs).

/// The verbs and response kind of a subresource.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Spec {
    pub(crate) verbs: &'static [&'static str],
    /// `(group, version, kind)` when it is not the parent's kind.
    pub(crate) kind: Option<(&'static str, &'static str, &'static str)>,
}

/// The subresources kube-apiserver serves, by name; unknown ones behave like `status`.
pub(crate) fn spec(name: &str) -> Spec {
    const GET_UPDATE_PATCH: &[&str] = &["get", "patch", "update"];
    let (verbs, kind): (&'static [&'static str], _) = match name {
        "binding" => (&["create"], Some(("", "v1", "Binding"))),
        "eviction" => (&["create"], Some(("policy", "v1", "Eviction"))),
        "token" => (
            &["create"],
            Some(("authentication.k8s.io", "v1", "TokenRequest")),
        ),
        "scale" => (GET_UPDATE_PATCH, Some(("autoscaling", "v1", "Scale"))),
        "finalize" => (&["update"], None),
        "log" => (&["get"], None),
        "exec" | "attach" | "portforward" => (&["create", "get"], None),
        "proxy" => (&["create", "delete", "get", "patch", "update"], None),
        _ => (GET_UPDATE_PATCH, None),
    };
    Spec { verbs, kind }
}

/// Whether a GET of the subresource is the parent object (`status`, `ephemeralcontainers`,
/// `resize`, `approval`); other subresource reads (logs, scale, proxies) are not served here.
pub(crate) fn reads_parent(name: &str) -> bool {
    spec(name).kind.is_none() && spec(name).verbs.contains(&"patch") && name != "proxy"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_reads_the_parent_and_binding_only_creates() {
        assert!(reads_parent("status"));
        assert!(!reads_parent("binding"));
        assert!(!reads_parent("log"));
        assert!(!reads_parent("scale"));
        assert_eq!(spec("binding").verbs, &["create"]);
        assert_eq!(spec("binding").kind, Some(("", "v1", "Binding")));
    }
}
