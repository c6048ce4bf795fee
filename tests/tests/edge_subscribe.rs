//! Kinds the node rules never send a node (networkpolicies, namespaces, custom resources) read
//! through lwproxy: subscribed at the first read and authorized by the API's RBAC for the node,
//! never an empty list. A real cloudcore (embedded control plane) and a real edgecore on
//! loopback.

use std::sync::atomic::Ordering;
use std::time::Duration;

use e2e::{Cloud, Edge, Pki, edge, edge_config, k8s_cloud};
use futures::TryStreamExt;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::api::{Api, ApiResource, DynamicObject, ListParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;
use testkit::eventually;

const WAIT: Duration = Duration::from_secs(30);
const NODE: &str = "edge-1";
const POLICY_KEY: &str = "networkpolicies.networking.k8s.io/default/np1";

/// Lets every node list and watch NetworkPolicies (a ClusterRole bound to `system:nodes`).
async fn let_nodes_read_policies(cloud: &Cloud) {
    let_nodes_read(
        cloud,
        "node-policy-reader",
        "networking.k8s.io",
        "networkpolicies",
    )
    .await;
}

/// Lets every node list and watch `group`'s `resource`: ClusterRole and ClusterRoleBinding
/// `name`, bound to the group `system:nodes`.
async fn let_nodes_read(cloud: &Cloud, name: &str, group: &str, resource: &str) {
    let roles: Api<ClusterRole> = Api::all(cloud.kube().await);
    let role = serde_json::from_value(json!({
        "metadata": {"name": name},
        "rules": [{"apiGroups": [group], "resources": [resource],
                   "verbs": ["get", "list", "watch"]}],
    }))
    .unwrap();
    roles.create(&PostParams::default(), &role).await.unwrap();
    let bindings: Api<ClusterRoleBinding> = Api::all(cloud.kube().await);
    let binding = serde_json::from_value(json!({
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:nodes"}],
    }))
    .unwrap();
    bindings
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
}

async fn create_policy(cloud: &Cloud, name: &str) {
    let policies: Api<NetworkPolicy> = Api::namespaced(cloud.kube().await, "default");
    let policy = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"podSelector": {}, "policyTypes": ["Ingress"]},
    }))
    .unwrap();
    policies
        .create(&PostParams::default(), &policy)
        .await
        .unwrap();
}

async fn linked(edge: &Edge) {
    eventually("the edge is linked", WAIT, || async {
        matches!(
            *edge.running.hub().unwrap().state().borrow(),
            edgehub::LinkState::Connected { .. }
        )
    })
    .await;
}

/// A cloud with policy `np1` and an edge linked to it, with lwproxy's settings tweaked.
async fn site(
    pki: &Pki,
    dir: &std::path::Path,
    tweak: impl Fn(&mut lwproxy::Config),
) -> (Cloud, Edge) {
    let cloud = k8s_cloud(pki, e2e::Ports::default()).await;
    create_policy(&cloud, "np1").await;
    let transport = link::Transport::WebSocket;
    let mut config = edge_config(
        &pki.node(NODE),
        cloud.addr(transport),
        transport,
        &dir.join("edge.db"),
    );
    tweak(&mut config.modules.lw_proxy);
    let edge = edge(config).await;
    linked(&edge).await;
    (cloud, edge)
}

/// The edge's NetworkPolicies, once its first list (which subscribes) answered the cloud's one.
async fn policies_synced(edge: &Edge) -> Api<NetworkPolicy> {
    let policies: Api<NetworkPolicy> = Api::all(edge.lwproxy_client());
    let listed = policies.list(&ListParams::default()).await.unwrap();
    assert_eq!(listed.items.len(), 1, "the cloud's one policy");
    policies
}

fn api_code(e: &kube::Error) -> u16 {
    match e {
        kube::Error::Api(status) => status.code,
        other => panic!("not an API error: {other}"),
    }
}

async fn take_cloud_away(cloud: Cloud, edge: &Edge) {
    cloud.stop().await;
    eventually("the edge notices the link is down", WAIT, || async {
        *edge.running.hub().unwrap().state().borrow() == edgehub::LinkState::Disconnected
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_allowed_by_rbac_lists_the_clouds_policies_and_watches_new_ones_arrive() {
    let (pki, dir) = (Pki::new(), tempfile::tempdir().unwrap());
    let (cloud, edge1) = site(&pki, dir.path(), |_| {}).await;
    let_nodes_read_policies(&cloud).await;
    let at_edge: Api<NetworkPolicy> = Api::all(edge1.lwproxy_client());
    let list = at_edge.list(&ListParams::default()).await.expect("listed");
    let names: Vec<_> = list
        .items
        .iter()
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    assert_eq!(
        names,
        ["np1"],
        "the first list waits for the cloud's objects"
    );
    let rv = list.metadata.resource_version.unwrap();
    let stream = at_edge.watch(&WatchParams::default(), &rv).await.unwrap();
    futures::pin_mut!(stream);
    create_policy(&cloud, "np2").await;
    let event = tokio::time::timeout(WAIT, stream.try_next())
        .await
        .expect("an event within the wait")
        .unwrap()
        .expect("the watch stays open");
    match event {
        WatchEvent::Added(p) => assert_eq!(p.metadata.name.as_deref(), Some("np2")),
        other => panic!("expected np2 added, got {other:?}"),
    }
    let metrics = edge1.running.lwproxy().unwrap();
    let mut registry = prometheus_client::registry::Registry::default();
    metrics.register_metrics(&mut registry);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    assert!(
        text.contains("lwproxy_subscriptions{state=\"synced\"} 1"),
        "{text}"
    );
    edge1.stop().await;
    cloud.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kind_the_node_may_not_read_is_403_and_a_kind_not_served_is_404() {
    let (pki, dir) = (Pki::new(), tempfile::tempdir().unwrap());
    let (cloud, edge1) = site(&pki, dir.path(), |_| {}).await;
    let at_edge: Api<NetworkPolicy> = Api::all(edge1.lwproxy_client());
    let e = at_edge.list(&ListParams::default()).await.unwrap_err();
    assert_eq!(api_code(&e), 403, "{e}");
    assert!(e.to_string().contains("system:node:edge-1"), "{e}");
    assert!(!edge1.held().await.contains_key(POLICY_KEY));

    let foos = ApiResource {
        group: "example.com".into(),
        version: "v1".into(),
        api_version: "example.com/v1".into(),
        kind: "Foo".into(),
        plural: "foos".into(),
    };
    let at_edge: Api<DynamicObject> = Api::all_with(edge1.lwproxy_client(), &foos);
    let e = at_edge.list(&ListParams::default()).await.unwrap_err();
    assert_eq!(api_code(&e), 404, "{e}");

    let secrets: Api<DynamicObject> = Api::all_with(
        edge1.lwproxy_client(),
        &ApiResource::erase::<k8s_openapi::api::core::v1::Secret>(&()),
    );
    let listed = secrets.list(&ListParams::default()).await;
    assert!(
        listed.is_ok(),
        "secrets keep their node-scoped list: {listed:?}"
    );
    edge1.stop().await;
    cloud.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offline_a_kind_never_synced_is_503_and_a_synced_one_is_served_after_a_restart() {
    let (pki, dir) = (Pki::new(), tempfile::tempdir().unwrap());
    let (cloud, edge1) = site(&pki, dir.path(), |_| {}).await;
    let_nodes_read_policies(&cloud).await;
    policies_synced(&edge1).await;

    take_cloud_away(cloud, &edge1).await;
    let namespaces: Api<Namespace> = Api::all(edge1.lwproxy_client());
    let e = namespaces.list(&ListParams::default()).await.unwrap_err();
    assert_eq!(api_code(&e), 503, "{e}");
    assert!(
        e.to_string()
            .contains("namespaces was never synced to this node and the cloud is not reachable"),
        "{e}"
    );

    let config = edge1.config();
    edge1.stop().await;
    let edge2 = edge(config).await;
    let policies: Api<NetworkPolicy> = Api::all(edge2.lwproxy_client());
    let list = policies
        .list(&ListParams::default())
        .await
        .expect("served from the store");
    let names: Vec<_> = list
        .items
        .iter()
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    assert_eq!(names, ["np1"]);
    edge2.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_subscription_is_dropped_and_the_cloud_stops_sending_the_kind() {
    let (pki, dir) = (Pki::new(), tempfile::tempdir().unwrap());
    let idle = Duration::from_secs(2);
    let (cloud, edge1) = site(&pki, dir.path(), |c| c.subscription_idle_timeout = idle).await;
    let_nodes_read_policies(&cloud).await;
    policies_synced(&edge1).await;
    assert!(edge1.held().await.contains_key(POLICY_KEY));

    eventually("the idle kind leaves the edge store", WAIT, || async {
        !edge1.held().await.contains_key(POLICY_KEY)
    })
    .await;
    // A policy made now would reach the node before a pod made after it, were it still sent.
    create_policy(&cloud, "np2").await;
    let pods: Api<Pod> = Api::namespaced(cloud.kube().await, "default");
    pods.create(&PostParams::default(), &e2e::plain_pod("after", NODE))
        .await
        .unwrap();
    eventually("the pod made after the policy arrives", WAIT, || async {
        edge1.held().await.contains_key("pods/default/after")
    })
    .await;
    let held = edge1.held().await;
    assert!(
        !held.keys().any(|k| k.starts_with("networkpolicies.")),
        "no policy is sent any more: {held:?}"
    );
    edge1.stop().await;
    cloud.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_custom_resource_the_node_may_read_is_served_with_its_definition() {
    let (pki, dir) = (Pki::new(), tempfile::tempdir().unwrap());
    let (cloud, edge1) = site(&pki, dir.path(), |_| {}).await;
    let crd_kind = ApiResource {
        group: "apiextensions.k8s.io".into(),
        version: "v1".into(),
        api_version: "apiextensions.k8s.io/v1".into(),
        kind: "CustomResourceDefinition".into(),
        plural: "customresourcedefinitions".into(),
    };
    let crds: Api<DynamicObject> = Api::all_with(cloud.kube().await, &crd_kind);
    let crd = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "gadgets.example.org"},
        "spec": {"group": "example.org", "scope": "Namespaced",
                 "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
                 "versions": [{"name": "v1", "served": true, "storage": true,
                               "schema": {"openAPIV3Schema": {"type": "object",
                                          "x-kubernetes-preserve-unknown-fields": true}}}]},
    }))
    .unwrap();
    crds.create(&PostParams::default(), &crd).await.unwrap();
    let gadget_kind = ApiResource {
        group: "example.org".into(),
        version: "v1".into(),
        api_version: "example.org/v1".into(),
        kind: "Gadget".into(),
        plural: "gadgets".into(),
    };
    let gadgets: Api<DynamicObject> =
        Api::namespaced_with(cloud.kube().await, "default", &gadget_kind);
    let gadget: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "example.org/v1", "kind": "Gadget",
        "metadata": {"name": "g1"}, "spec": {"x": 1},
    }))
    .unwrap();
    eventually("the CRD is served in the cloud", WAIT, || async {
        gadgets
            .create(&PostParams::default(), &gadget)
            .await
            .is_ok()
    })
    .await;
    let_nodes_read(&cloud, "node-gadget-reader", "example.org", "gadgets").await;

    let at_edge: Api<DynamicObject> = Api::all_with(edge1.lwproxy_client(), &gadget_kind);
    let list = at_edge.list(&ListParams::default()).await.expect("listed");
    let specs: Vec<_> = list
        .items
        .iter()
        .map(|g| g.data["spec"]["x"].clone())
        .collect();
    assert_eq!(specs, [json!(1)]);
    edge1.stop().await;
    cloud.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_removed_in_the_cloud_takes_the_kind_away_at_the_next_renewal() {
    let (pki, dir) = (Pki::new(), tempfile::tempdir().unwrap());
    let renew = Duration::from_millis(500);
    let (cloud, edge1) = site(&pki, dir.path(), |c| c.subscription_renew_interval = renew).await;
    let_nodes_read_policies(&cloud).await;
    let policies = policies_synced(&edge1).await;
    let controller = cloud.running.controller().unwrap();
    let delivered = || controller.stats().subscriptions.load(Ordering::Relaxed);
    assert_eq!(delivered(), 1);

    let bindings: Api<ClusterRoleBinding> = Api::all(cloud.kube().await);
    bindings
        .delete("node-policy-reader", &Default::default())
        .await
        .unwrap();
    eventually("the renewal is refused", WAIT, || async {
        matches!(policies.list(&ListParams::default()).await, Err(kube::Error::Api(s)) if s.code == 403)
    })
    .await;
    assert!(!edge1.held().await.contains_key(POLICY_KEY));
    assert_eq!(delivered(), 0, "the cloud stopped sending the kind");
    edge1.stop().await;
    cloud.stop().await;
}
