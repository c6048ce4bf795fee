//! Site-local services (traffic closure), filtered at the edge: a real cloudcore (embedded
//! control plane, its EndpointSlice controller, edgecontroller) and three real edgecores (no
//! edged: pods are bound with `spec.nodeName` and their status written as edged would) in two
//! NodeGroups. Through each node's lwproxy, as kube-proxy lists and watches (the `kube`
//! watcher in JSON, raw requests in protobuf), a Service annotated
//! `apps.kubeedge.io/service-topology: range-nodegroup` shows only its group's endpoints, an
//! unannotated one all of them; a node moved to the other group sees the other group's
//! endpoints (its open watch relists); with the cloud stopped the filtered view still serves.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use e2e::{Cloud, Edge, Pki, Ports, edge, edge_config, k8s_cloud};
use futures::StreamExt;
use http::Request;
use k8s_openapi::api::core::v1::{Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use serde_json::{Value, json};
use testkit::eventually;

/// Long enough for edgecontroller's NodeGroup watch, which backs off (up to 30s) while the
/// CRD is not installed yet.
const WAIT: Duration = Duration::from_secs(90);
const PB: &str = "application/vnd.kubernetes.protobuf";
const CLOSED: &str = "closed";
const OPEN: &str = "open";
const GROUP_LABEL: &str = "apps.kubeedge.io/belonging-to";

fn group_resource() -> ApiResource {
    ApiResource {
        group: "apps.kubeedge.io".into(),
        version: "v1alpha1".into(),
        api_version: "apps.kubeedge.io/v1alpha1".into(),
        kind: "NodeGroup".into(),
        plural: "nodegroups".into(),
    }
}

/// The minimal NodeGroup CRD (the site controllers apply the full one when enabled).
async fn install_node_group_crd(client: &kube::Client) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    if crds
        .get_opt("nodegroups.apps.kubeedge.io")
        .await
        .unwrap()
        .is_some()
    {
        return;
    }
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "metadata": {"name": "nodegroups.apps.kubeedge.io"},
        "spec": {
            "group": "apps.kubeedge.io", "scope": "Cluster",
            "names": {"plural": "nodegroups", "singular": "nodegroup", "kind": "NodeGroup", "listKind": "NodeGroupList"},
            "versions": [{"name": "v1alpha1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}],
        },
    }))
    .unwrap();
    match crds.create(&PostParams::default(), &crd).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => panic!("creating the NodeGroup CRD: {e}"),
    }
}

/// Makes NodeGroup `name` list `members` (spec and status), as the NodeGroup controller does.
async fn set_group(client: &kube::Client, name: &str, members: &[&str]) {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &group_resource());
    let statuses: Vec<Value> = members
        .iter()
        .map(|m| json!({"nodeName": m, "readyStatus": "Ready", "selectionStatus": "Succeeded"}))
        .collect();
    let body = json!({
        "apiVersion": "apps.kubeedge.io/v1alpha1", "kind": "NodeGroup",
        "metadata": {"name": name},
        "spec": {"nodes": members},
    });
    let params = PatchParams::apply("sites-closure-test").force();
    eventually("the NodeGroup API serves", WAIT, || async {
        api.patch(name, &params, &Patch::Apply(&body)).await.is_ok()
    })
    .await;
    let status = json!({"status": {"nodeStatuses": statuses}});
    // With a status subresource (the full CRD) status goes there; without, on the object.
    if api
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .is_err()
    {
        api.patch(name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .unwrap();
    }
}

async fn label_group(nodes: &Api<Node>, node: &str, group: &str) {
    let patch = json!({"metadata": {"labels": {GROUP_LABEL: group}}});
    nodes
        .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

/// A running pod of `app` on `node` with `ip`, Ready (its status written as edged would).
async fn ready_pod(pods: &Api<Pod>, name: &str, app: &str, node: &str, ip: &str) {
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": app}},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]},
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let status = json!({"status": {
        "phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}],
        "conditions": [{"type": "Ready", "status": "True"}],
    }});
    pods.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
}

async fn service(services: &Api<Service>, name: &str, annotations: Value) {
    let svc: Service = serde_json::from_value(json!({
        "metadata": {"name": name, "annotations": annotations},
        "spec": {"selector": {"app": name}, "ports": [{"port": 80}]},
    }))
    .unwrap();
    services.create(&PostParams::default(), &svc).await.unwrap();
}

/// The nodes of the endpoints in `slices`.
fn nodes_of<'a>(slices: impl IntoIterator<Item = &'a EndpointSlice>) -> BTreeSet<String> {
    slices
        .into_iter()
        .flat_map(|s| s.endpoints.iter())
        .filter_map(|e| e.node_name.clone())
        .collect()
}

fn set(nodes: &[&str]) -> BTreeSet<String> {
    nodes.iter().map(|n| n.to_string()).collect()
}

/// What an edge's lwproxy lists (JSON) of Service `svc`'s endpoints.
async fn listed(edge: &Edge, svc: &str) -> BTreeSet<String> {
    let api: Api<EndpointSlice> = Api::namespaced(edge.lwproxy_client(), "default");
    let lp = ListParams::default().labels(&format!("kubernetes.io/service-name={svc}"));
    match api.list(&lp).await {
        Ok(list) => nodes_of(&list.items),
        Err(_) => BTreeSet::new(),
    }
}

/// The same list in protobuf: (resourceVersion, the nodes of the endpoints).
async fn listed_protobuf(edge: &Edge, svc: &str) -> (String, BTreeSet<String>) {
    let uri = format!(
        "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices?labelSelector=kubernetes.io%2Fservice-name%3D{svc}"
    );
    let req = Request::builder()
        .uri(uri)
        .header("accept", PB)
        .body(kube::client::Body::empty())
        .unwrap();
    let resp = edge.lwproxy_client().send(req).await.unwrap();
    assert_eq!(resp.headers()["content-type"], PB);
    let body = http_body_util::BodyExt::collect(resp.into_body())
        .await
        .unwrap()
        .to_bytes();
    let list = kpb::decode(&body).unwrap();
    let slices: Vec<EndpointSlice> = serde_json::from_value(list["items"].clone()).unwrap();
    let rv = list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    (rv, nodes_of(&slices))
}

/// A protobuf watch of `svc`'s slices at an edge from `rv`: every event's (type, nodes), sent
/// on as they come, until the stream ends (then `("END", {})`).
fn watch_protobuf(
    edge: &Edge,
    svc: &str,
    rv: &str,
) -> tokio::sync::mpsc::UnboundedReceiver<(String, BTreeSet<String>)> {
    let uri = format!(
        "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices?watch=true&resourceVersion={rv}&labelSelector=kubernetes.io%2Fservice-name%3D{svc}"
    );
    let client = edge.lwproxy_client();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let req = Request::builder()
            .uri(uri)
            .header("accept", "application/vnd.kubernetes.protobuf;stream=watch")
            .body(kube::client::Body::empty())
            .unwrap();
        let resp = client.send(req).await.unwrap();
        assert_eq!(
            resp.headers()["content-type"],
            "application/vnd.kubernetes.protobuf;stream=watch"
        );
        let mut body = resp.into_body();
        let mut buf = Vec::new();
        while let Some(Ok(frame)) = http_body_util::BodyExt::frame(&mut body).await {
            if let Ok(data) = frame.into_data() {
                buf.extend_from_slice(&data);
            }
            let (events, used) = kpb::read_watch_frames(&buf).expect("protobuf frames");
            buf.drain(..used);
            for (kind, object) in events {
                let nodes = match serde_json::from_value::<EndpointSlice>(object) {
                    Ok(slice) => nodes_of([&slice]),
                    Err(_) => BTreeSet::new(),
                };
                let _ = tx.send((kind, nodes));
            }
        }
        let _ = tx.send(("END".to_owned(), BTreeSet::new()));
    });
    rx
}

/// A `kube` reflector over lwproxy's slices of `svc` (JSON), as kube-proxy keeps one.
fn reflect(edge: &Edge, svc: &str) -> reflector::Store<EndpointSlice> {
    let api: Api<EndpointSlice> = Api::namespaced(edge.lwproxy_client(), "default");
    let config = watcher::Config::default().labels(&format!("kubernetes.io/service-name={svc}"));
    let (store, writer) = reflector::store();
    let stream = reflector(writer, watcher(api, config)).default_backoff();
    tokio::spawn(stream.for_each(|_| async {}));
    store
}

struct Sites {
    _pki: Pki,
    _dir: tempfile::TempDir,
    cloud: Cloud,
    edges: BTreeMap<&'static str, Edge>,
}

/// A cloud and edges `a1`, `a2` (group `shop-a`) and `b1` (group `shop-b`), with a closed and
/// an open Service whose pods run on every node (closed) or on `a1` and `b1` (open).
async fn sites() -> Sites {
    let pki = Pki::new();
    let dir = tempfile::tempdir().unwrap();
    let cloud = k8s_cloud(&pki, Ports::default()).await;
    let client = cloud.kube().await;
    install_node_group_crd(&client).await;
    let transport = link::Transport::WebSocket;
    let mut edges = BTreeMap::new();
    for name in ["a1", "a2", "b1"] {
        let db = dir.path().join(format!("{name}.db"));
        let config = edge_config(&pki.node(name), cloud.addr(transport), transport, &db);
        let e = edge(config).await;
        e.linked().await;
        edges.insert(name, e);
    }
    let nodes: Api<Node> = Api::all(client.clone());
    for name in ["a1", "a2", "b1"] {
        eventually("the edge node is registered", WAIT, || async {
            nodes.get_opt(name).await.unwrap().is_some()
        })
        .await;
    }
    label_group(&nodes, "a1", "shop-a").await;
    label_group(&nodes, "a2", "shop-a").await;
    label_group(&nodes, "b1", "shop-b").await;
    set_group(&client, "shop-a", &["a1", "a2"]).await;
    set_group(&client, "shop-b", &["b1"]).await;

    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let range = json!({"apps.kubeedge.io/service-topology": "range-nodegroup"});
    service(&services, CLOSED, range).await;
    service(&services, OPEN, json!({})).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    ready_pod(&pods, "closed-a1", CLOSED, "a1", "10.1.0.1").await;
    ready_pod(&pods, "closed-a2", CLOSED, "a2", "10.1.0.2").await;
    ready_pod(&pods, "closed-b1", CLOSED, "b1", "10.1.0.3").await;
    ready_pod(&pods, "open-a1", OPEN, "a1", "10.1.0.4").await;
    ready_pod(&pods, "open-b1", OPEN, "b1", "10.1.0.5").await;
    Sites {
        _pki: pki,
        _dir: dir,
        cloud,
        edges,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_site_sees_only_its_own_endpoints_of_a_closed_service_and_keeps_them_offline() {
    let s = sites().await;
    let a1 = &s.edges["a1"];
    let a2 = &s.edges["a2"];
    let b1 = &s.edges["b1"];
    let a2_view = reflect(a2, CLOSED);

    // The cloud holds every endpoint; each edge serves its group's, in JSON and protobuf.
    let cloud_slices: Api<EndpointSlice> = Api::namespaced(s.cloud.kube().await, "default");
    let lp = ListParams::default().labels("kubernetes.io/service-name=closed");
    eventually(
        "the cloud's slice holds all three endpoints",
        WAIT,
        || async {
            nodes_of(&cloud_slices.list(&lp).await.unwrap().items) == set(&["a1", "a2", "b1"])
        },
    )
    .await;
    for (edge, want) in [
        (a1, set(&["a1", "a2"])),
        (a2, set(&["a1", "a2"])),
        (b1, set(&["b1"])),
    ] {
        eventually("an edge lists its group's endpoints", WAIT, || async {
            listed(edge, CLOSED).await == want
        })
        .await;
        assert_eq!(listed(edge, OPEN).await, set(&["a1", "b1"]), "open: all");
    }
    // b1 alone is also what a node that does not hold its group yet sees: wait for shop-b.
    eventually("b1 holds its NodeGroup", WAIT, || async {
        b1.held()
            .await
            .contains_key("nodegroups.apps.kubeedge.io//shop-b")
    })
    .await;
    let (rv, pb_nodes) = listed_protobuf(b1, CLOSED).await;
    assert_eq!(pb_nodes, set(&["b1"]), "protobuf list");
    let name = cloud_slices.list(&lp).await.unwrap().items[0]
        .metadata
        .name
        .clone()
        .unwrap();
    let b1_slices: Api<EndpointSlice> = Api::namespaced(b1.lwproxy_client(), "default");
    let got = b1_slices.get(&name).await.unwrap();
    assert_eq!(nodes_of([&got]), set(&["b1"]), "get");
    eventually(
        "the JSON watcher holds the group's endpoints",
        WAIT,
        || async { nodes_of(a2_view.state().iter().map(|s| &**s)) == set(&["a1", "a2"]) },
    )
    .await;

    // A protobuf watch at b1 sees a new endpoint in shop-a filtered away.
    let mut b1_events = watch_protobuf(b1, CLOSED, &rv);
    let pods: Api<Pod> = Api::namespaced(s.cloud.kube().await, "default");
    ready_pod(&pods, "closed-a1-second", CLOSED, "a1", "10.1.0.6").await;
    eventually("a1 sees the new endpoint", WAIT, || async {
        let api: Api<EndpointSlice> = Api::namespaced(a1.lwproxy_client(), "default");
        let list = api.list(&lp).await.unwrap();
        list.items
            .iter()
            .flat_map(|s| &s.endpoints)
            .any(|e| e.addresses.contains(&"10.1.0.6".to_owned()))
    })
    .await;
    let (kind, nodes) = tokio::time::timeout(WAIT, b1_events.recv())
        .await
        .expect("b1's protobuf watch sees the change")
        .unwrap();
    assert_eq!((kind.as_str(), nodes), ("MODIFIED", set(&["b1"])));

    // a2 moves to shop-b: its open watch relists, and it sees shop-b's endpoints; the others
    // see the new membership too, and b1's open protobuf watch ends so that it relists.
    let client = s.cloud.kube().await;
    let nodes: Api<Node> = Api::all(client.clone());
    label_group(&nodes, "a2", "shop-b").await;
    set_group(&client, "shop-a", &["a1"]).await;
    set_group(&client, "shop-b", &["b1", "a2"]).await;
    for (edge, want) in [
        (a1, set(&["a1"])),
        (a2, set(&["a2", "b1"])),
        (b1, set(&["a2", "b1"])),
    ] {
        eventually("an edge lists its new group's endpoints", WAIT, || async {
            listed(edge, CLOSED).await == want
        })
        .await;
    }
    eventually("a2's open JSON watcher follows the move", WAIT, || async {
        nodes_of(a2_view.state().iter().map(|s| &**s)) == set(&["a2", "b1"])
    })
    .await;
    loop {
        let (kind, nodes) = tokio::time::timeout(WAIT, b1_events.recv())
            .await
            .expect("b1's protobuf watch ends after the move")
            .unwrap();
        match kind.as_str() {
            "END" => break,
            // Nothing filtered the new way goes out on the old stream.
            _ => assert_eq!(nodes, set(&["b1"]), "{kind} before the end"),
        }
    }
    let stale = watch_protobuf(b1, CLOSED, &rv).recv().await.unwrap();
    assert_eq!(
        stale.0, "ERROR",
        "resuming from before the move: 410, relist"
    );

    // The cloud goes away: each edge still serves its filtered view, in both encodings.
    let Sites {
        cloud,
        edges,
        _pki,
        _dir,
    } = s;
    cloud.stop().await;
    assert_eq!(listed(&edges["a1"], CLOSED).await, set(&["a1"]));
    assert_eq!(listed(&edges["a2"], CLOSED).await, set(&["a2", "b1"]));
    assert_eq!(listed(&edges["a2"], OPEN).await, set(&["a1", "b1"]));
    assert_eq!(
        listed_protobuf(&edges["b1"], CLOSED).await.1,
        set(&["a2", "b1"])
    );
    for (_, e) in edges {
        e.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zone_hints_keep_a_prefer_close_service_in_the_clients_zone_and_fall_back_to_all() {
    let s = sites().await;
    let client = s.cloud.kube().await;
    let nodes: Api<Node> = Api::all(client.clone());
    for (node, zone) in [("a1", "zone-a"), ("a2", "zone-a"), ("b1", "zone-b")] {
        let patch = json!({"metadata": {"labels": {"topology.kubernetes.io/zone": zone}}});
        nodes
            .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
    }
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let near: Service = serde_json::from_value(json!({
        "metadata": {"name": "near"},
        "spec": {"selector": {"app": "near"}, "ports": [{"port": 80}], "trafficDistribution": "PreferClose"},
    }))
    .unwrap();
    services
        .create(&PostParams::default(), &near)
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    ready_pod(&pods, "near-a1", "near", "a1", "10.2.0.1").await;
    ready_pod(&pods, "near-b1", "near", "b1", "10.2.0.2").await;

    // The embedded EndpointSlice controller fills zones and hints from the nodes' labels.
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), "default");
    let lp = ListParams::default().labels("kubernetes.io/service-name=near");
    eventually("the cloud's slice has zones and hints", WAIT, || async {
        let list = slices.list(&lp).await.unwrap();
        let eps: Vec<_> = list.items.iter().flat_map(|s| &s.endpoints).collect();
        eps.len() == 2
            && eps.iter().all(|e| {
                let hinted = e.hints.as_ref().and_then(|h| h.for_zones.as_ref());
                let first = hinted.and_then(|z| z.first()).map(|z| z.name.clone());
                e.zone.is_some() && first == e.zone
            })
    })
    .await;
    // Each edge serves the endpoints hinted for its zone.
    for (edge, want) in [("a2", set(&["a1"])), ("b1", set(&["b1"]))] {
        eventually("an edge lists its zone's endpoints", WAIT, || async {
            listed(&s.edges[edge], "near").await == want
        })
        .await;
    }
    // A node in a zone no endpoint is hinted for gets them all, as kube-proxy does.
    let patch = json!({"metadata": {"labels": {"topology.kubernetes.io/zone": "zone-c"}}});
    nodes
        .patch("a2", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    eventually(
        "a node of another zone lists every endpoint",
        WAIT,
        || async { listed(&s.edges["a2"], "near").await == set(&["a1", "b1"]) },
    )
    .await;
    s.cloud.stop().await;
    for (_, e) in s.edges {
        e.stop().await;
    }
}
