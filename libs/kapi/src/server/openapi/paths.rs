//! The paths of one resource, as kube-apiserver's documents list them: the collection and the
//! object, the list across all namespaces, the legacy watch paths (`/watch/...`), and each
//! subresource (`/status`, `/scale`, `/log`, `/exec`, `/proxy` and `/proxy/{path}`, ...).
//! Only the verbs the resource serves get an operation. Operation ids follow kube-apiserver's
//! scheme (`readCoreV1NamespacedPodStatus`, `listAppsV1DeploymentForAllNamespaces`,
//! `connectCoreV1GetNamespacedPodExec`), and every operation names its action
//! (`x-kubernetes-action`) and the kind it takes or returns (`x-kubernetes-group-version-kind`).

use apimachinery::ResourceInfo;
use serde_json::{Map, Value, json};

use super::super::subresource;
use super::document::gv_path;
use super::{REF_V2, REF_V3};

/// The document version the paths are written for (parameters and bodies differ).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Version {
    V2,
    V3,
}

/// Adds every path of `r`, whose kind's definition is `definition`, to `paths`.
pub(super) fn add(paths: &mut Map<String, Value>, r: &ResourceInfo, definition: &str, v: Version) {
    let names = Names::of(r);
    let b = Builder {
        r,
        v,
        names: &names,
        definition,
    };
    let gv = format!("/{}", gv_path(r));
    let scope = if r.namespaced {
        "/namespaces/{namespace}"
    } else {
        ""
    };
    let collection = format!("{gv}{scope}/{}", r.plural);
    let object = format!("{collection}/{{name}}");
    b.collection(paths, &collection);
    b.object(paths, &object);
    if r.namespaced && b.serves("list") {
        let op = b.op("list", &names.all_namespaces("list", ""), LIST_PARAMS);
        b.insert(paths, format!("{gv}/{}", r.plural), &[], [("get", op)]);
    }
    if b.serves("watch") {
        b.watches(paths, &gv, scope);
    }
    for sub in &r.subresources {
        b.subresource(paths, &object, sub);
    }
}

/// The parts of a resource's operation ids: `CoreV1`, `Namespaced`, `Pod`.
struct Names {
    group_version: String,
    scope: &'static str,
    kind: String,
}

/// Builds the operations of one resource.
struct Builder<'a> {
    r: &'a ResourceInfo,
    v: Version,
    names: &'a Names,
    /// The definition of the resource's kind, which reads and writes of the object answer.
    definition: &'a str,
}

const LIST_PARAMS: &[&str] = &[
    "allowWatchBookmarks",
    "continue",
    "fieldSelector",
    "labelSelector",
    "limit",
    "resourceVersion",
    "resourceVersionMatch",
    "sendInitialEvents",
    "timeoutSeconds",
    "watch",
];
const WRITE_PARAMS: &[&str] = &["dryRun", "fieldManager", "fieldValidation"];
const PATCH_PARAMS: &[&str] = &["dryRun", "fieldManager", "fieldValidation", "force"];
const DELETE_PARAMS: &[&str] = &["dryRun", "gracePeriodSeconds", "propagationPolicy"];
const LOG_PARAMS: &[&str] = &[
    "container",
    "follow",
    "insecureSkipTLSVerifyBackend",
    "limitBytes",
    "previous",
    "sinceSeconds",
    "tailLines",
    "timestamps",
];
const EXEC_PARAMS: &[&str] = &["command", "container", "stderr", "stdin", "stdout", "tty"];
/// The methods a proxy path takes, in the order kube-apiserver lists them.
const PROXY_METHODS: [&str; 7] = ["delete", "get", "head", "options", "patch", "post", "put"];

// === impl Names ===

impl Names {
    fn of(r: &ResourceInfo) -> Names {
        Names {
            group_version: format!("{}{}", group_name(&r.group), capitalized(&r.version)),
            scope: if r.namespaced { "Namespaced" } else { "" },
            kind: r.kind.clone(),
        }
    }

    /// `readCoreV1NamespacedPod` + `suffix`.
    fn id(&self, verb: &str, suffix: &str) -> String {
        let (gv, scope, kind) = (&self.group_version, self.scope, &self.kind);
        format!("{verb}{gv}{scope}{kind}{suffix}")
    }

    /// `listCoreV1PodForAllNamespaces`, `watchCoreV1PodListForAllNamespaces`.
    fn all_namespaces(&self, verb: &str, list: &str) -> String {
        format!(
            "{verb}{}{}{list}ForAllNamespaces",
            self.group_version, self.kind
        )
    }
}

// === impl Builder ===

impl Builder<'_> {
    fn serves(&self, verb: &str) -> bool {
        self.r.verbs.iter().any(|v| v == verb)
    }

    /// `.../{plural}`: list, create, deletecollection.
    fn collection(&self, paths: &mut Map<String, Value>, path: &str) {
        let n = self.names;
        let mut ops = Vec::new();
        if self.serves("list") {
            ops.push(("get", self.op("list", &n.id("list", ""), LIST_PARAMS)));
        }
        if self.serves("create") {
            let op = self.op("post", &n.id("create", ""), WRITE_PARAMS);
            ops.push(("post", self.answers_object(op)));
        }
        if self.serves("deletecollection") {
            let id = format!("delete{}Collection{}{}", n.group_version, n.scope, n.kind);
            let mut params = DELETE_PARAMS.to_vec();
            params.extend_from_slice(LIST_PARAMS);
            ops.push(("delete", self.op("deletecollection", &id, &params)));
        }
        self.insert(paths, path.to_owned(), &self.scope_params(), ops);
    }

    /// `.../{plural}/{name}`: get, update, patch, delete.
    fn object(&self, paths: &mut Map<String, Value>, path: &str) {
        let n = self.names;
        let mut ops = Vec::new();
        if self.serves("get") {
            let op = self.op("get", &n.id("read", ""), &[]);
            ops.push(("get", self.answers_object(op)));
        }
        if self.serves("update") {
            let op = self.op("put", &n.id("replace", ""), WRITE_PARAMS);
            ops.push(("put", self.answers_object(op)));
        }
        if self.serves("patch") {
            ops.push(("patch", self.answers_object(self.patch(&n.id("patch", "")))));
        }
        if self.serves("delete") {
            ops.push((
                "delete",
                self.op("delete", &n.id("delete", ""), DELETE_PARAMS),
            ));
        }
        self.insert(paths, path.to_owned(), &self.object_params(), ops);
    }

    /// `/watch/...`: the collection, one object, and (namespaced) all namespaces.
    fn watches(&self, paths: &mut Map<String, Value>, gv: &str, scope: &str) {
        let n = self.names;
        let collection = format!("{gv}/watch{scope}/{}", self.r.plural);
        let op = self.op("watchlist", &n.id("watch", "List"), LIST_PARAMS);
        self.insert(
            paths,
            collection.clone(),
            &self.scope_params(),
            [("get", op)],
        );
        let op = self.op("watch", &n.id("watch", ""), LIST_PARAMS);
        let object = format!("{collection}/{{name}}");
        self.insert(paths, object, &self.object_params(), [("get", op)]);
        if self.r.namespaced {
            let op = self.op("watchlist", &n.all_namespaces("watch", "List"), LIST_PARAMS);
            let all = format!("{gv}/watch/{}", self.r.plural);
            self.insert(paths, all, &[], [("get", op)]);
        }
    }

    /// `.../{name}/{sub}` with the operations the subresource serves.
    fn subresource(&self, paths: &mut Map<String, Value>, object: &str, sub: &str) {
        let path = format!("{object}/{sub}");
        let suffix = capitalized(sub);
        let n = self.names;
        let params = self.object_params();
        match sub {
            "log" => {
                let op = self.op("get", &n.id("read", &suffix), LOG_PARAMS);
                self.insert(paths, path, &params, [("get", op)]);
            }
            "exec" | "attach" | "portforward" => {
                let query = match sub {
                    "portforward" => &["ports"][..],
                    _ => EXEC_PARAMS,
                };
                let kind = connect_kind(&self.r.kind, sub);
                let ops = ["get", "post"].map(|m| (m, self.connect(m, &suffix, &kind, query)));
                self.insert(paths, path, &params, ops);
            }
            "proxy" => {
                let kind = connect_kind(&self.r.kind, sub);
                let query: &[&str] = &["path"];
                let ops = PROXY_METHODS.map(|m| (m, self.connect(m, &suffix, &kind, query)));
                self.insert(paths, path.clone(), &params, ops);
                let with_path = format!("{suffix}WithPath");
                let ops = PROXY_METHODS.map(|m| (m, self.connect(m, &with_path, &kind, &[])));
                let mut params = params;
                params.push("path");
                self.insert(paths, format!("{path}/{{path}}"), &params, ops);
            }
            _ => {
                let spec = subresource::spec(sub);
                let kind = spec
                    .kind
                    .map(|(g, v, k)| (g.to_owned(), v.to_owned(), k.to_owned()));
                let mut ops = Vec::new();
                for verb in spec.verbs {
                    let (method, action, prefix, query) = match *verb {
                        "get" => ("get", "get", "read", &[][..]),
                        "update" => ("put", "put", "replace", WRITE_PARAMS),
                        "create" => ("post", "post", "create", WRITE_PARAMS),
                        "patch" => ("patch", "patch", "patch", PATCH_PARAMS),
                        _ => continue,
                    };
                    let id = n.id(prefix, &suffix);
                    let mut op = match method {
                        "patch" => self.patch(&id),
                        _ => self.op(action, &id, query),
                    };
                    match &kind {
                        Some((g, v, k)) => op["x-kubernetes-group-version-kind"] = gvk(g, v, k),
                        // `status` and its like read and write the object itself.
                        None => op = self.answers_object(op),
                    }
                    ops.push((method, op));
                }
                self.insert(paths, path, &params, ops);
            }
        }
    }

    /// A `connect` operation: `connectCoreV1GetNamespacedPodExec`.
    fn connect(&self, method: &str, suffix: &str, kind: &str, query: &[&str]) -> Value {
        let n = self.names;
        let id = format!(
            "connect{}{}{}{}{suffix}",
            n.group_version,
            capitalized(method),
            n.scope,
            n.kind
        );
        let mut op = self.op("connect", &id, query);
        op["x-kubernetes-group-version-kind"] = gvk(&self.r.group, &self.r.version, kind);
        op
    }

    /// A PATCH operation with the patch types the resource takes.
    fn patch(&self, id: &str) -> Value {
        let mut op = self.op("patch", id, PATCH_PARAMS);
        let types = patch_types(self.r);
        match self.v {
            Version::V2 => op["consumes"] = json!(types),
            Version::V3 => {
                let content: Map<String, Value> = types
                    .iter()
                    .map(|t| (t.to_string(), json!({ "schema": { "type": "object" } })))
                    .collect();
                op["requestBody"] = json!({ "content": content, "required": true });
            }
        }
        op
    }

    /// `op` with its `200` answer typed as the resource's kind.
    fn answers_object(&self, mut op: Value) -> Value {
        let ok = &mut op["responses"]["200"];
        match self.v {
            Version::V2 => {
                ok["schema"] = json!({ "$ref": format!("{REF_V2}{}", self.definition) });
            }
            Version::V3 => {
                let schema = json!({ "$ref": format!("{REF_V3}{}", self.definition) });
                ok["content"] = json!({ "application/json": { "schema": schema } });
            }
        }
        op
    }

    fn op(&self, action: &str, id: &str, query: &[&str]) -> Value {
        let params: Vec<Value> = query.iter().map(|n| param(n, "query", self.v)).collect();
        json!({
            "operationId": id,
            "parameters": params,
            "responses": { "200": { "description": "OK" } },
            "x-kubernetes-action": action,
            "x-kubernetes-group-version-kind": gvk(&self.r.group, &self.r.version, &self.r.kind),
        })
    }

    /// Adds a path with its path parameters, when it has any operation.
    fn insert<'m>(
        &self,
        paths: &mut Map<String, Value>,
        path: String,
        params: &[&str],
        ops: impl IntoIterator<Item = (&'m str, Value)>,
    ) {
        let mut item: Map<String, Value> = ops
            .into_iter()
            .map(|(method, op)| (method.to_owned(), op))
            .collect();
        if item.is_empty() {
            return;
        }
        let params: Vec<Value> = params.iter().map(|n| param(n, "path", self.v)).collect();
        item.insert("parameters".into(), Value::Array(params));
        paths.insert(path, Value::Object(item));
    }

    fn scope_params(&self) -> Vec<&'static str> {
        if self.r.namespaced {
            vec!["namespace"]
        } else {
            Vec::new()
        }
    }

    fn object_params(&self) -> Vec<&'static str> {
        let mut params = vec!["name"];
        params.extend(self.scope_params());
        params
    }
}

/// The patch types a resource takes: strategic merge for built-ins only, as kube-apiserver
/// (`kubectl apply` computes a JSON merge patch for a kind without it).
fn patch_types(r: &ResourceInfo) -> Vec<&'static str> {
    let mut types = vec![
        "application/json-patch+json",
        "application/merge-patch+json",
    ];
    if !r.custom {
        types.push("application/strategic-merge-patch+json");
    }
    types.push("application/apply-patch+yaml");
    types
}

/// The options kind of a connect subresource: `PodExecOptions`, `ServiceProxyOptions`.
fn connect_kind(kind: &str, sub: &str) -> String {
    let options = match sub {
        "portforward" => "PortForward",
        other => return format!("{kind}{}Options", capitalized(other)),
    };
    format!("{kind}{options}Options")
}

/// A group as operation ids spell it: `Core` for the core group, else each dot- or
/// dash-separated word capitalized, with `.k8s.io` left out (`RbacAuthorization`,
/// `StableExampleCom`).
pub(super) fn group_name(group: &str) -> String {
    if group.is_empty() {
        return "Core".into();
    }
    let group = group.strip_suffix(".k8s.io").unwrap_or(group);
    group
        .split(['.', '-'])
        .map(capitalized)
        .collect::<Vec<_>>()
        .concat()
}

fn capitalized(word: &str) -> String {
    let mut chars = word.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

fn gvk(group: &str, version: &str, kind: &str) -> Value {
    json!({ "group": group, "version": version, "kind": kind })
}

fn param(name: &str, place: &str, v: Version) -> Value {
    let mut p = json!({ "name": name, "in": place });
    if place == "path" {
        p["required"] = json!(true);
    }
    let kind = match name {
        "limit" | "timeoutSeconds" | "gracePeriodSeconds" | "tailLines" | "sinceSeconds"
        | "limitBytes" => "integer",
        "allowWatchBookmarks"
        | "watch"
        | "sendInitialEvents"
        | "force"
        | "follow"
        | "previous"
        | "timestamps"
        | "insecureSkipTLSVerifyBackend"
        | "stderr"
        | "stdin"
        | "stdout"
        | "tty" => "boolean",
        _ => "string",
    };
    match v {
        Version::V2 => p["type"] = json!(kind),
        Version::V3 => p["schema"] = json!({ "type": kind }),
    }
    p
}

#[cfg(test)]
mod tests;
