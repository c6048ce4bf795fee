//! The roles and bindings kube-apiserver creates at start (its `bootstrappolicy`), and how an
//! existing copy is reconciled with them: a missing object is created; one annotated
//! `rbac.authorization.kubernetes.io/autoupdate: "true"` gets the labels, annotations, rules,
//! aggregation selectors and subjects it is missing (nothing is taken away); any other is left
//! as the administrator made it.
//!
//! The rules follow kube-apiserver 1.32's for the parts of Kubernetes this control plane
//! serves or will serve; rules for kinds it does not serve are kept so that the roles read as
//! they do on any cluster.

use serde_json::{Map, Value, json};

use super::{GROUP, PolicyRule};

/// The annotation that lets the server add to a bootstrap object at start.
pub const AUTOUPDATE: &str = "rbac.authorization.kubernetes.io/autoupdate";
/// The label of every bootstrap object.
pub const BOOTSTRAPPING: &str = "kubernetes.io/bootstrapping";
/// Its value.
pub const RBAC_DEFAULTS: &str = "rbac-defaults";
/// Labels selecting the ClusterRoles aggregated into `admin`, `edit` and `view`.
pub const AGGREGATE_TO_ADMIN: &str = "rbac.authorization.k8s.io/aggregate-to-admin";
pub const AGGREGATE_TO_EDIT: &str = "rbac.authorization.k8s.io/aggregate-to-edit";
pub const AGGREGATE_TO_VIEW: &str = "rbac.authorization.k8s.io/aggregate-to-view";

/// What to do with one bootstrap object.
#[derive(Clone, Debug, PartialEq)]
pub enum Reconcile {
    /// It is missing: create this.
    Create(Value),
    /// It lacks something: write this (the existing object, added to).
    Update(Value),
    /// Its `roleRef` differs (which cannot be updated): delete it and create this.
    Recreate(Value),
    Unchanged,
}

const READ: &[&str] = &["get", "list", "watch"];
const WRITE: &[&str] = &["create", "delete", "deletecollection", "patch", "update"];
const ALL: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];
const EVENTS: &[&str] = &["create", "patch", "update"];

/// The controllers of kube-controller-manager with a `system:controller:<name>` role, bound to
/// the service account `kube-system/<name>`.
pub const CONTROLLERS: &[&str] = &[
    "clusterrole-aggregation-controller",
    "cronjob-controller",
    "daemon-set-controller",
    "deployment-controller",
    "endpoint-controller",
    "endpointslice-controller",
    "garbage-collector",
    "job-controller",
    "namespace-controller",
    "node-controller",
    "pod-garbage-collector",
    "replicaset-controller",
    "root-ca-cert-publisher",
    "service-account-controller",
    "statefulset-controller",
    "ttl-after-finished-controller",
];

/// Every bootstrap ClusterRole.
pub fn cluster_roles() -> Vec<Value> {
    let mut roles = vec![
        cluster_role(
            "cluster-admin",
            &[],
            vec![
                PolicyRule::resource(&["*"], &["*"], &["*"]),
                PolicyRule::urls(&["*"], &["*"]),
            ],
        ),
        aggregated("admin", AGGREGATE_TO_ADMIN, &[]),
        aggregated("edit", AGGREGATE_TO_EDIT, &[AGGREGATE_TO_ADMIN]),
        aggregated("view", AGGREGATE_TO_VIEW, &[AGGREGATE_TO_EDIT]),
        cluster_role(
            "system:aggregate-to-admin",
            &[AGGREGATE_TO_ADMIN],
            to_admin(),
        ),
        cluster_role("system:aggregate-to-edit", &[AGGREGATE_TO_EDIT], to_edit()),
        cluster_role("system:aggregate-to-view", &[AGGREGATE_TO_VIEW], to_view()),
        cluster_role("system:basic-user", &[], basic_user()),
        cluster_role("system:discovery", &[], discovery()),
        cluster_role("system:public-info-viewer", &[], public_info()),
        cluster_role("system:monitoring", &[], monitoring()),
        cluster_role("system:auth-delegator", &[], auth_delegator()),
        cluster_role("system:node-proxier", &[], node_proxier()),
        cluster_role("system:node", &[], node()),
        cluster_role("system:node-bootstrapper", &[], node_bootstrapper()),
        cluster_role(
            "system:kube-dns",
            &[],
            vec![r(&["list", "watch"], &[""], &["endpoints", "services"])],
        ),
        cluster_role("system:kube-scheduler", &[], scheduler()),
        cluster_role("system:kube-controller-manager", &[], controller_manager()),
        cluster_role(
            "system:service-account-issuer-discovery",
            &[],
            issuer_discovery(),
        ),
    ];
    roles.extend(certificate_roles());
    roles.extend(
        CONTROLLERS
            .iter()
            .map(|c| cluster_role(&format!("system:controller:{c}"), &[], controller(c))),
    );
    roles
}

/// Every bootstrap ClusterRoleBinding.
pub fn cluster_role_bindings() -> Vec<Value> {
    let mut bindings = vec![
        cluster_binding(
            "cluster-admin",
            "cluster-admin",
            vec![group("system:masters")],
        ),
        cluster_binding(
            "system:basic-user",
            "system:basic-user",
            vec![group(super::AUTHENTICATED)],
        ),
        cluster_binding(
            "system:discovery",
            "system:discovery",
            vec![group(super::AUTHENTICATED)],
        ),
        cluster_binding(
            "system:public-info-viewer",
            "system:public-info-viewer",
            vec![group(super::AUTHENTICATED), group(super::UNAUTHENTICATED)],
        ),
        cluster_binding(
            "system:monitoring",
            "system:monitoring",
            vec![group("system:monitoring")],
        ),
        cluster_binding(
            "system:node-proxier",
            "system:node-proxier",
            vec![user("system:kube-proxy")],
        ),
        cluster_binding("system:node", "system:node", vec![]),
        cluster_binding(
            "system:kube-dns",
            "system:kube-dns",
            vec![service_account("kube-system", "kube-dns")],
        ),
        cluster_binding(
            "system:kube-scheduler",
            "system:kube-scheduler",
            vec![user("system:kube-scheduler")],
        ),
        cluster_binding(
            "system:kube-controller-manager",
            "system:kube-controller-manager",
            vec![user("system:kube-controller-manager")],
        ),
        cluster_binding(
            "system:service-account-issuer-discovery",
            "system:service-account-issuer-discovery",
            vec![group("system:serviceaccounts")],
        ),
    ];
    bindings.extend(CONTROLLERS.iter().map(|c| {
        let name = format!("system:controller:{c}");
        cluster_binding(&name, &name, vec![service_account("kube-system", c)])
    }));
    bindings
}

/// The bootstrap Roles (namespaced).
pub fn roles() -> Vec<Value> {
    vec![
        role(
            "kube-system",
            "extension-apiserver-authentication-reader",
            vec![r(READ, &[""], &["configmaps"]).names(&["extension-apiserver-authentication"])],
        ),
        role(
            "kube-system",
            "system::leader-locking-kube-controller-manager",
            leader_locking("kube-controller-manager"),
        ),
        role(
            "kube-system",
            "system::leader-locking-kube-scheduler",
            leader_locking("kube-scheduler"),
        ),
    ]
}

/// The bootstrap RoleBindings.
pub fn role_bindings() -> Vec<Value> {
    vec![
        role_binding(
            "kube-system",
            "system::extension-apiserver-authentication-reader",
            "extension-apiserver-authentication-reader",
            vec![
                user("system:kube-controller-manager"),
                user("system:kube-scheduler"),
            ],
        ),
        role_binding(
            "kube-system",
            "system::leader-locking-kube-controller-manager",
            "system::leader-locking-kube-controller-manager",
            vec![
                user("system:kube-controller-manager"),
                service_account("kube-system", "kube-controller-manager"),
            ],
        ),
        role_binding(
            "kube-system",
            "system::leader-locking-kube-scheduler",
            "system::leader-locking-kube-scheduler",
            vec![
                user("system:kube-scheduler"),
                service_account("kube-system", "kube-scheduler"),
            ],
        ),
    ]
}

/// How an existing Role or ClusterRole (`None`: missing) is brought up to `wanted`.
pub fn reconcile_role(existing: Option<&Value>, wanted: &Value) -> Reconcile {
    let Some(existing) = existing else {
        return Reconcile::Create(wanted.clone());
    };
    if !autoupdate(existing) {
        return Reconcile::Unchanged;
    }
    let mut merged = existing.clone();
    let mut changed = merge_metadata(&mut merged, wanted);
    let have = PolicyRule::of_role(existing);
    let missing: Vec<Value> = PolicyRule::of_role(wanted)
        .into_iter()
        .filter(|rule| !rule.covered_by(&have))
        .map(|rule| serde_json::to_value(rule).unwrap_or_default())
        .collect();
    // An aggregated role's rules are the aggregation controller's to fill.
    if !missing.is_empty() && wanted.get("aggregationRule").is_none() {
        let rules = merged["rules"].as_array().cloned().unwrap_or_default();
        merged["rules"] = Value::Array(rules.into_iter().chain(missing).collect());
        changed = true;
    }
    if let Some(selectors) = wanted["aggregationRule"]["clusterRoleSelectors"].as_array() {
        changed |= add_missing(
            &mut merged["aggregationRule"]["clusterRoleSelectors"],
            selectors,
        );
    }
    match changed {
        true => Reconcile::Update(merged),
        false => Reconcile::Unchanged,
    }
}

/// How an existing RoleBinding or ClusterRoleBinding (`None`: missing) is brought up to
/// `wanted`.
pub fn reconcile_binding(existing: Option<&Value>, wanted: &Value) -> Reconcile {
    let Some(existing) = existing else {
        return Reconcile::Create(wanted.clone());
    };
    if !autoupdate(existing) {
        return Reconcile::Unchanged;
    }
    if existing["roleRef"] != wanted["roleRef"] {
        return Reconcile::Recreate(wanted.clone());
    }
    let mut merged = existing.clone();
    let mut changed = merge_metadata(&mut merged, wanted);
    if let Some(subjects) = wanted["subjects"].as_array() {
        changed |= add_missing(&mut merged["subjects"], subjects);
    }
    match changed {
        true => Reconcile::Update(merged),
        false => Reconcile::Unchanged,
    }
}

fn autoupdate(obj: &Value) -> bool {
    obj["metadata"]["annotations"][AUTOUPDATE].as_str() == Some("true")
}

/// Adds the labels and annotations of `wanted` that `obj` lacks; whether any were added.
fn merge_metadata(obj: &mut Value, wanted: &Value) -> bool {
    let mut changed = false;
    for field in ["labels", "annotations"] {
        let Some(want) = wanted["metadata"][field].as_object() else {
            continue;
        };
        if !obj["metadata"][field].is_object() {
            obj["metadata"][field] = Value::Object(Map::new());
        }
        let have = obj["metadata"][field]
            .as_object_mut()
            .expect("made an object above");
        for (k, v) in want {
            if !have.contains_key(k) {
                have.insert(k.clone(), v.clone());
                changed = true;
            }
        }
    }
    changed
}

/// Appends the items of `wanted` missing from the array at `slot`; whether any were.
fn add_missing(slot: &mut Value, wanted: &[Value]) -> bool {
    if !slot.is_array() {
        *slot = Value::Array(Vec::new());
    }
    let have = slot.as_array_mut().expect("made an array above");
    let mut changed = false;
    for item in wanted {
        if !have.contains(item) {
            have.push(item.clone());
            changed = true;
        }
    }
    changed
}

fn metadata(name: &str, namespace: Option<&str>, labels: &[&str]) -> Value {
    let mut all = Map::new();
    all.insert(BOOTSTRAPPING.into(), RBAC_DEFAULTS.into());
    for label in labels {
        all.insert((*label).into(), "true".into());
    }
    let mut meta = json!({
        "name": name,
        "labels": all,
        "annotations": {AUTOUPDATE: "true"},
    });
    if let Some(ns) = namespace {
        meta["namespace"] = ns.into();
    }
    meta
}

fn cluster_role(name: &str, labels: &[&str], rules: Vec<PolicyRule>) -> Value {
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": metadata(name, None, labels),
        "rules": rules,
    })
}

fn aggregated(name: &str, selected_by: &str, labels: &[&str]) -> Value {
    let mut role = cluster_role(name, labels, Vec::new());
    role["aggregationRule"] =
        json!({"clusterRoleSelectors": [{"matchLabels": {selected_by: "true"}}]});
    role
}

fn role(namespace: &str, name: &str, rules: Vec<PolicyRule>) -> Value {
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": metadata(name, Some(namespace), &[]),
        "rules": rules,
    })
}

fn cluster_binding(name: &str, role: &str, subjects: Vec<Value>) -> Value {
    let mut binding = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": metadata(name, None, &[]),
        "roleRef": {"apiGroup": GROUP, "kind": "ClusterRole", "name": role},
    });
    if !subjects.is_empty() {
        binding["subjects"] = Value::Array(subjects);
    }
    binding
}

fn role_binding(namespace: &str, name: &str, role: &str, subjects: Vec<Value>) -> Value {
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": metadata(name, Some(namespace), &[]),
        "roleRef": {"apiGroup": GROUP, "kind": "Role", "name": role},
        "subjects": subjects,
    })
}

fn group(name: &str) -> Value {
    json!({"apiGroup": GROUP, "kind": "Group", "name": name})
}

fn user(name: &str) -> Value {
    json!({"apiGroup": GROUP, "kind": "User", "name": name})
}

fn service_account(namespace: &str, name: &str) -> Value {
    json!({"kind": "ServiceAccount", "name": name, "namespace": namespace})
}

fn r(verbs: &[&str], groups: &[&str], resources: &[&str]) -> PolicyRule {
    PolicyRule::resource(verbs, groups, resources)
}

fn to_admin() -> Vec<PolicyRule> {
    vec![
        r(
            &["create"],
            &["authorization.k8s.io"],
            &["localsubjectaccessreviews"],
        ),
        r(ALL, &[GROUP], &["rolebindings", "roles"]),
    ]
}

fn to_edit() -> Vec<PolicyRule> {
    vec![
        r(&["impersonate"], &[""], &["serviceaccounts"]),
        r(
            WRITE,
            &[""],
            &[
                "pods",
                "pods/attach",
                "pods/proxy",
                "pods/exec",
                "pods/portforward",
            ],
        ),
        r(&["create"], &[""], &["pods/eviction"]),
        r(
            WRITE,
            &[""],
            &[
                "configmaps",
                "events",
                "persistentvolumeclaims",
                "replicationcontrollers",
                "replicationcontrollers/scale",
                "secrets",
                "serviceaccounts",
                "services",
                "services/proxy",
            ],
        ),
        r(&["create"], &[""], &["serviceaccounts/token"]),
        r(
            WRITE,
            &["apps"],
            &[
                "daemonsets",
                "deployments",
                "deployments/rollback",
                "deployments/scale",
                "replicasets",
                "replicasets/scale",
                "statefulsets",
                "statefulsets/scale",
            ],
        ),
        r(WRITE, &["autoscaling"], &["horizontalpodautoscalers"]),
        r(WRITE, &["batch"], &["cronjobs", "jobs"]),
        r(
            WRITE,
            &["networking.k8s.io"],
            &["ingresses", "networkpolicies"],
        ),
        r(WRITE, &["policy"], &["poddisruptionbudgets"]),
        r(WRITE, &["coordination.k8s.io"], &["leases"]),
        r(WRITE, &["discovery.k8s.io"], &["endpointslices"]),
        r(WRITE, &[""], &["endpoints"]),
    ]
}

fn to_view() -> Vec<PolicyRule> {
    vec![
        r(
            READ,
            &[""],
            &[
                "configmaps",
                "endpoints",
                "persistentvolumeclaims",
                "persistentvolumeclaims/status",
                "pods",
                "replicationcontrollers",
                "replicationcontrollers/scale",
                "serviceaccounts",
                "services",
                "services/status",
            ],
        ),
        r(
            READ,
            &[""],
            &[
                "bindings",
                "events",
                "limitranges",
                "namespaces/status",
                "pods/log",
                "pods/status",
                "replicationcontrollers/status",
                "resourcequotas",
                "resourcequotas/status",
            ],
        ),
        r(READ, &[""], &["namespaces"]),
        r(READ, &["discovery.k8s.io"], &["endpointslices"]),
        r(
            READ,
            &["apps"],
            &[
                "controllerrevisions",
                "daemonsets",
                "daemonsets/status",
                "deployments",
                "deployments/scale",
                "deployments/status",
                "replicasets",
                "replicasets/scale",
                "replicasets/status",
                "statefulsets",
                "statefulsets/scale",
                "statefulsets/status",
            ],
        ),
        r(
            READ,
            &["autoscaling"],
            &[
                "horizontalpodautoscalers",
                "horizontalpodautoscalers/status",
            ],
        ),
        r(
            READ,
            &["batch"],
            &["cronjobs", "cronjobs/status", "jobs", "jobs/status"],
        ),
        r(READ, &["events.k8s.io"], &["events"]),
        r(
            READ,
            &["networking.k8s.io"],
            &["ingresses", "ingresses/status", "networkpolicies"],
        ),
        r(
            READ,
            &["policy"],
            &["poddisruptionbudgets", "poddisruptionbudgets/status"],
        ),
        r(READ, &["coordination.k8s.io"], &["leases"]),
    ]
}

fn basic_user() -> Vec<PolicyRule> {
    vec![
        r(
            &["create"],
            &["authentication.k8s.io"],
            &["selfsubjectreviews"],
        ),
        r(
            &["create"],
            &["authorization.k8s.io"],
            &["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
        ),
    ]
}

fn discovery() -> Vec<PolicyRule> {
    vec![PolicyRule::urls(
        &["get"],
        &[
            "/api",
            "/api/*",
            "/apis",
            "/apis/*",
            "/healthz",
            "/livez",
            "/openapi",
            "/openapi/*",
            "/readyz",
            "/version",
            "/version/",
        ],
    )]
}

fn public_info() -> Vec<PolicyRule> {
    vec![PolicyRule::urls(
        &["get"],
        &["/healthz", "/livez", "/readyz", "/version", "/version/"],
    )]
}

fn monitoring() -> Vec<PolicyRule> {
    vec![PolicyRule::urls(
        &["get"],
        &[
            "/healthz",
            "/healthz/*",
            "/livez",
            "/livez/*",
            "/metrics",
            "/metrics/slis",
            "/readyz",
            "/readyz/*",
        ],
    )]
}

fn auth_delegator() -> Vec<PolicyRule> {
    vec![
        r(&["create"], &["authentication.k8s.io"], &["tokenreviews"]),
        r(
            &["create"],
            &["authorization.k8s.io"],
            &["subjectaccessreviews"],
        ),
    ]
}

fn node_proxier() -> Vec<PolicyRule> {
    vec![
        r(&["list", "watch"], &[""], &["endpoints", "services"]),
        r(READ, &[""], &["nodes"]),
        r(EVENTS, &["", "events.k8s.io"], &["events"]),
        r(
            &["list", "watch"],
            &["discovery.k8s.io"],
            &["endpointslices"],
        ),
    ]
}

fn node() -> Vec<PolicyRule> {
    vec![
        r(&["create"], &["authentication.k8s.io"], &["tokenreviews"]),
        r(
            &["create"],
            &["authorization.k8s.io"],
            &["localsubjectaccessreviews", "subjectaccessreviews"],
        ),
        r(READ, &[""], &["services"]),
        r(&["create", "get", "list", "watch"], &[""], &["nodes"]),
        r(&["patch", "update"], &[""], &["nodes/status"]),
        r(&["patch", "update"], &[""], &["nodes"]),
        r(EVENTS, &["", "events.k8s.io"], &["events"]),
        r(READ, &[""], &["pods"]),
        r(&["create", "delete"], &[""], &["pods"]),
        r(&["patch", "update"], &[""], &["pods/status"]),
        r(&["create"], &[""], &["pods/eviction"]),
        r(&["get"], &[""], &["configmaps", "secrets"]),
        r(
            &["get"],
            &[""],
            &["persistentvolumeclaims", "persistentvolumes"],
        ),
        r(&["get"], &[""], &["endpoints"]),
        r(
            &["create", "delete", "get", "patch", "update"],
            &["coordination.k8s.io"],
            &["leases"],
        ),
        r(&["get"], &["storage.k8s.io"], &["volumeattachments"]),
        r(&["create"], &[""], &["serviceaccounts/token"]),
        r(READ, &["storage.k8s.io"], &["csidrivers"]),
        r(
            &["create", "delete", "get", "patch", "update"],
            &["storage.k8s.io"],
            &["csinodes"],
        ),
        r(READ, &["node.k8s.io"], &["runtimeclasses"]),
    ]
}

fn node_bootstrapper() -> Vec<PolicyRule> {
    vec![r(
        &["create", "get", "list", "watch"],
        &["certificates.k8s.io"],
        &["certificatesigningrequests"],
    )]
}

fn scheduler() -> Vec<PolicyRule> {
    vec![
        r(EVENTS, &["", "events.k8s.io"], &["events"]),
        r(&["create"], &["coordination.k8s.io"], &["leases"]),
        r(&["get", "update"], &["coordination.k8s.io"], &["leases"]).names(&["kube-scheduler"]),
        r(READ, &[""], &["nodes"]),
        r(&["delete", "get", "list", "watch"], &[""], &["pods"]),
        r(&["create"], &[""], &["bindings", "pods/binding"]),
        r(&["patch", "update"], &[""], &["pods/status"]),
        r(READ, &[""], &["replicationcontrollers", "services"]),
        r(READ, &["apps", "extensions"], &["replicasets"]),
        r(READ, &["apps"], &["statefulsets"]),
        r(READ, &["policy"], &["poddisruptionbudgets"]),
        r(
            READ,
            &[""],
            &["persistentvolumeclaims", "persistentvolumes"],
        ),
        r(&["create"], &["authentication.k8s.io"], &["tokenreviews"]),
        r(
            &["create"],
            &["authorization.k8s.io"],
            &["subjectaccessreviews"],
        ),
        r(READ, &["storage.k8s.io"], &["csinodes"]),
        r(READ, &[""], &["namespaces"]),
        r(
            READ,
            &["storage.k8s.io"],
            &["csidrivers", "csistoragecapacities", "storageclasses"],
        ),
    ]
}

fn controller_manager() -> Vec<PolicyRule> {
    vec![
        r(EVENTS, &["", "events.k8s.io"], &["events"]),
        r(&["create"], &["coordination.k8s.io"], &["leases"]),
        r(&["get", "update"], &["coordination.k8s.io"], &["leases"])
            .names(&["kube-controller-manager"]),
        r(&["create"], &[""], &["secrets", "serviceaccounts"]),
        r(&["delete"], &[""], &["secrets"]),
        r(
            &["get"],
            &[""],
            &["configmaps", "namespaces", "secrets", "serviceaccounts"],
        ),
        r(&["update"], &[""], &["secrets", "serviceaccounts"]),
        r(&["create"], &["authentication.k8s.io"], &["tokenreviews"]),
        r(
            &["create"],
            &["authorization.k8s.io"],
            &["subjectaccessreviews"],
        ),
        r(&["list", "watch"], &["*"], &["*"]),
        r(&["create"], &[""], &["serviceaccounts/token"]),
    ]
}

fn issuer_discovery() -> Vec<PolicyRule> {
    vec![PolicyRule::urls(
        &["get"],
        &[
            "/.well-known/openid-configuration",
            "/.well-known/openid-configuration/",
            "/openid/v1/jwks",
            "/openid/v1/jwks/",
        ],
    )]
}

fn certificate_roles() -> Vec<Value> {
    let csr = "certificatesigningrequests";
    let approver = |name: &str, signer: &str| {
        cluster_role(
            &format!("system:certificates.k8s.io:{name}"),
            &[],
            vec![r(&["approve"], &["certificates.k8s.io"], &["signers"]).names(&[signer])],
        )
    };
    vec![
        cluster_role(
            "system:certificates.k8s.io:certificatesigningrequests:nodeclient",
            &[],
            vec![r(
                &["create"],
                &["certificates.k8s.io"],
                &[&format!("{csr}/nodeclient")],
            )],
        ),
        cluster_role(
            "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
            &[],
            vec![r(
                &["create"],
                &["certificates.k8s.io"],
                &[&format!("{csr}/selfnodeclient")],
            )],
        ),
        approver(
            "kube-apiserver-client-approver",
            "kubernetes.io/kube-apiserver-client",
        ),
        approver(
            "kube-apiserver-client-kubelet-approver",
            "kubernetes.io/kube-apiserver-client-kubelet",
        ),
        approver("kubelet-serving-approver", "kubernetes.io/kubelet-serving"),
        approver("legacy-unknown-approver", "kubernetes.io/legacy-unknown"),
    ]
}

fn leader_locking(name: &str) -> Vec<PolicyRule> {
    vec![
        r(&["watch"], &[""], &["configmaps"]),
        r(&["get", "update"], &[""], &["configmaps"]).names(&[name]),
    ]
}

/// The rules of controller `name`'s `system:controller:<name>` role.
fn controller(name: &str) -> Vec<PolicyRule> {
    let events = r(EVENTS, &["", "events.k8s.io"], &["events"]);
    let mut rules = match name {
        "clusterrole-aggregation-controller" => {
            vec![r(
                &["escalate", "get", "list", "patch", "update", "watch"],
                &[GROUP],
                &["clusterroles"],
            )]
        }
        "cronjob-controller" => vec![
            r(
                &["get", "list", "update", "watch"],
                &["batch"],
                &["cronjobs"],
            ),
            r(
                &[
                    "create", "delete", "get", "list", "patch", "update", "watch",
                ],
                &["batch"],
                &["jobs"],
            ),
            r(&["update"], &["batch"], &["cronjobs/status"]),
            r(&["update"], &["batch"], &["cronjobs/finalizers"]),
            r(&["delete", "list"], &[""], &["pods"]),
        ],
        "daemon-set-controller" => vec![
            r(READ, &["apps", "extensions"], &["daemonsets"]),
            r(&["update"], &["apps", "extensions"], &["daemonsets/status"]),
            r(
                &["update"],
                &["apps", "extensions"],
                &["daemonsets/finalizers"],
            ),
            r(&["list", "watch"], &[""], &["nodes"]),
            r(
                &["create", "delete", "list", "patch", "watch"],
                &[""],
                &["pods"],
            ),
            r(&["create"], &[""], &["pods/binding"]),
            r(
                &["create", "delete", "list", "patch", "update", "watch"],
                &["apps"],
                &["controllerrevisions"],
            ),
        ],
        "deployment-controller" => vec![
            r(
                &["get", "list", "update", "watch"],
                &["apps", "extensions"],
                &["deployments"],
            ),
            r(
                &["update"],
                &["apps", "extensions"],
                &["deployments/status"],
            ),
            r(
                &["update"],
                &["apps", "extensions"],
                &["deployments/finalizers"],
            ),
            r(
                &[
                    "create", "delete", "get", "list", "patch", "update", "watch",
                ],
                &["apps", "extensions"],
                &["replicasets"],
            ),
            r(&["get", "list", "update", "watch"], &[""], &["pods"]),
        ],
        "endpoint-controller" => vec![
            r(&["get", "list", "watch"], &[""], &["pods", "services"]),
            r(
                &["create", "delete", "get", "list", "update"],
                &[""],
                &["endpoints"],
            ),
            r(&["create"], &[""], &["endpoints/restricted"]),
        ],
        "endpointslice-controller" => vec![
            r(
                &["get", "list", "watch"],
                &[""],
                &["nodes", "pods", "services"],
            ),
            r(&["update"], &[""], &["services/finalizers"]),
            r(
                &["create", "delete", "get", "list", "update"],
                &["discovery.k8s.io"],
                &["endpointslices"],
            ),
        ],
        "garbage-collector" => vec![r(
            &["delete", "get", "list", "patch", "update", "watch"],
            &["*"],
            &["*"],
        )],
        "job-controller" => vec![
            r(
                &["get", "list", "patch", "update", "watch"],
                &["batch"],
                &["jobs"],
            ),
            r(&["update"], &["batch"], &["jobs/status"]),
            r(&["update"], &["batch"], &["jobs/finalizers"]),
            r(
                &["create", "delete", "list", "patch", "watch"],
                &[""],
                &["pods"],
            ),
        ],
        "namespace-controller" => vec![
            r(&["delete", "get", "list", "watch"], &[""], &["namespaces"]),
            r(
                &["update"],
                &[""],
                &["namespaces/finalize", "namespaces/status"],
            ),
            r(
                &["delete", "deletecollection", "get", "list"],
                &["*"],
                &["*"],
            ),
        ],
        "node-controller" => vec![
            r(
                &["delete", "get", "list", "patch", "update"],
                &[""],
                &["nodes"],
            ),
            r(&["patch", "update"], &[""], &["nodes/status"]),
            r(&["patch", "update"], &[""], &["pods/status"]),
            r(&["delete", "list"], &[""], &["pods"]),
            r(&["get"], &[""], &["pods"]),
        ],
        "pod-garbage-collector" => vec![
            r(&["delete", "list", "watch"], &[""], &["pods"]),
            r(&["get", "list"], &[""], &["nodes"]),
            r(&["patch"], &[""], &["pods/status"]),
        ],
        "replicaset-controller" => vec![
            r(
                &["get", "list", "update", "watch"],
                &["apps", "extensions"],
                &["replicasets"],
            ),
            r(
                &["update"],
                &["apps", "extensions"],
                &["replicasets/status"],
            ),
            r(
                &["update"],
                &["apps", "extensions"],
                &["replicasets/finalizers"],
            ),
            r(
                &["create", "delete", "list", "patch", "watch"],
                &[""],
                &["pods"],
            ),
        ],
        "root-ca-cert-publisher" => vec![r(&["create", "update"], &[""], &["configmaps"])],
        "service-account-controller" => vec![r(&["create"], &[""], &["serviceaccounts"])],
        "statefulset-controller" => vec![
            r(&["list", "watch"], &[""], &["pods"]),
            r(&["list", "watch"], &["apps"], &["statefulsets"]),
            r(&["update"], &["apps"], &["statefulsets/status"]),
            r(&["update"], &["apps"], &["statefulsets/finalizers"]),
            r(
                &["create", "delete", "get", "patch", "update"],
                &[""],
                &["pods"],
            ),
            r(
                &[
                    "create", "delete", "get", "list", "patch", "update", "watch",
                ],
                &["apps"],
                &["controllerrevisions"],
            ),
            r(&["create", "get"], &[""], &["persistentvolumeclaims"]),
        ],
        "ttl-after-finished-controller" => vec![r(
            &["delete", "get", "list", "watch"],
            &["batch"],
            &["jobs"],
        )],
        _ => Vec::new(),
    };
    rules.push(events);
    rules
}
