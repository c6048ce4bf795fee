//! Site-local services at lwproxy: a closed Service's slices are trimmed to this node's
//! NodeGroup, and a change of the group ends the open watches and sends a watch resuming from
//! before it back to relist (410).

mod support;

use std::collections::BTreeSet;

use futures::StreamExt;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Api;
use kube::api::{ListParams, WatchEvent, WatchParams};
use serde_json::{Value, json};

use support::{Edge, Node, WAIT};

fn node(labels: Value, rv: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Node",
           "metadata": {"name": "n1", "uid": "uid-n1", "resourceVersion": rv, "labels": labels}})
}

fn group(members: &[&str], rv: &str) -> Value {
    let statuses: Vec<Value> = members
        .iter()
        .map(|m| json!({"nodeName": m, "selectionStatus": "Succeeded"}))
        .collect();
    json!({"apiVersion": "apps.kubeedge.io/v1alpha1", "kind": "NodeGroup",
           "metadata": {"name": "g", "uid": "uid-g", "resourceVersion": rv},
           "status": {"nodeStatuses": statuses}})
}

async fn seed(edge: &Edge) {
    let closed = json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "s", "namespace": "default", "uid": "uid-s", "resourceVersion": "3",
                     "annotations": {"apps.kubeedge.io/service-topology": "range-nodegroup"}},
        "spec": {"ports": [{"port": 80}]}});
    edge.downstream("services", closed).await;
    let eps: Vec<Value> = ["n1", "n2", "n3"]
        .iter()
        .map(|n| json!({"addresses": ["10.0.0.1"], "nodeName": n}))
        .collect();
    let slice = json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "s-1", "namespace": "default", "uid": "uid-s1", "resourceVersion": "4",
                     "labels": {"kubernetes.io/service-name": "s"}},
        "addressType": "IPv4", "endpoints": eps});
    edge.downstream("endpointslices.discovery.k8s.io", slice)
        .await;
}

fn nodes(slices: &[EndpointSlice]) -> BTreeSet<String> {
    slices
        .iter()
        .flat_map(|s| &s.endpoints)
        .filter_map(|e| e.node_name.clone())
        .collect()
}

fn set(n: &[&str]) -> BTreeSet<String> {
    n.iter().map(|s| s.to_string()).collect()
}

#[tokio::test]
async fn a_node_in_no_group_sees_only_its_own_endpoints_of_a_closed_service() {
    let edge = Node::new().start(true).await;
    edge.downstream("nodes", node(json!({}), "1")).await;
    seed(&edge).await;
    let api: Api<EndpointSlice> = Api::namespaced(edge.client(), "default");
    let list = api.list(&ListParams::default()).await.unwrap();
    assert_eq!(nodes(&list.items), set(&["n1"]));
    // The resourceVersion is the one served unfiltered (metadata-only answers pass as they are).
    let meta = api.list_metadata(&ListParams::default()).await.unwrap();
    assert_eq!(
        list.items[0].metadata.resource_version,
        meta.items[0].metadata.resource_version
    );
}

#[tokio::test]
async fn a_group_change_ends_open_watches_and_sends_stale_resumes_back_to_relist() {
    let edge = Node::new().start(true).await;
    let labels = json!({"apps.kubeedge.io/belonging-to": "g"});
    edge.downstream("nodes", node(labels, "1")).await;
    edge.downstream("nodegroups.apps.kubeedge.io", group(&["n1", "n2"], "2"))
        .await;
    seed(&edge).await;
    let api: Api<EndpointSlice> = Api::namespaced(edge.client(), "default");
    let list = api.list(&ListParams::default()).await.unwrap();
    assert_eq!(nodes(&list.items), set(&["n1", "n2"]));
    let rv = list.metadata.resource_version.unwrap();

    let mut open = api
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();
    edge.downstream("nodegroups.apps.kubeedge.io", group(&["n1"], "5"))
        .await;
    match tokio::time::timeout(WAIT, open.next()).await {
        Ok(None) => {}
        other => panic!("the open watch should end, got {other:?}"),
    }
    let mut stale = api
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();
    match tokio::time::timeout(WAIT, stale.next()).await {
        Ok(Some(Ok(WatchEvent::Error(e)))) => assert_eq!(e.code, 410, "{e:?}"),
        other => panic!("a stale resume should get 410, got {other:?}"),
    }
    let list = api.list(&ListParams::default()).await.unwrap();
    assert_eq!(nodes(&list.items), set(&["n1"]));
}
