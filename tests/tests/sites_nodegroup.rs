//! NodeGroup (KubeEdge's `apps.kubeedge.io/v1alpha1`) end to end: a cloudcore with the embedded
//! control plane and six real edgecores, whose Nodes edgecontroller registers; three groups
//! label their members, report them (and `kubectl get nodegroups` shows the counts), a node
//! moved between groups by a label change loses the old group's pods, a second claim is
//! reported Failed, a deleted group releases its nodes; and the controller also runs in
//! cloudcore against a real cluster (another cloudcore's control plane).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use e2e::{Cloud, Edge, Pki, Ports, edge, edge_config, k8s_cloud, k8s_cloud_with};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use sites::BELONGING_TO;
use sites::nodegroup::{NodeGroup, NodeGroupSpec, ReadyStatus, SelectionStatus, TOPOLOGY_ZONE};
use testkit::eventually;

const WAIT: Duration = Duration::from_secs(30);

/// The NodeGroups of KubeEdge's node group proposal (`docs/proposals/node-group-management.md`),
/// as a user would apply them.
const KUBEEDGE_EXAMPLE: &str = "apiVersion: apps.kubeedge.io/v1alpha1
kind: NodeGroup
metadata:
  name: hangzhou
spec:
  matchLabels:
    location: hangzhou
---
apiVersion: apps.kubeedge.io/v1alpha1
kind: NodeGroup
metadata:
  name: beijing 
spec:
  matchLabels:
    location: beijing
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_groups_label_report_move_and_release_their_nodes() {
    let pki = Pki::new();
    let dir = tempfile::tempdir().unwrap();
    let cloud = k8s_cloud(&pki, Ports::default()).await;
    let names = ["n1", "n2", "n3", "n4", "n5", "n6"];
    let edges = start_edges(&pki, &cloud, dir.path(), &names).await;
    let admin = cloud.kube().await;
    let nodes: Api<Node> = Api::all(admin.clone());
    let groups: Api<NodeGroup> = Api::all(admin.clone());
    eventually("edgecontroller registers the six Nodes", WAIT, || async {
        let listed = nodes.list(&Default::default()).await.unwrap();
        names.iter().all(|n| {
            listed
                .items
                .iter()
                .any(|i| i.metadata.name.as_deref() == Some(n))
        })
    })
    .await;
    for (node, site) in [("n3", "b"), ("n4", "b"), ("n5", "c"), ("n6", "c")] {
        set_label(&nodes, node, "site", Some(site)).await;
    }
    // n1 reports itself Ready, as a kubelet does, through its edge.
    let ready = json!({"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]}});
    Api::<Node>::all(edges[0].lwproxy_client())
        .patch_status("n1", &PatchParams::default(), &Patch::Strategic(&ready))
        .await
        .unwrap();

    // Three groups: by name (with topology), and two by label.
    let mut by_name = spec(&["n1", "n2"], &[]);
    by_name.topology_enabled = true;
    create(&groups, "shop-a", by_name).await;
    create(&groups, "shop-b", spec(&[], &[("site", "b")])).await;
    create(&groups, "shop-c", spec(&[], &[("site", "c")])).await;
    let want = [
        ("n1", "shop-a"),
        ("n2", "shop-a"),
        ("n3", "shop-b"),
        ("n4", "shop-b"),
        ("n5", "shop-c"),
        ("n6", "shop-c"),
    ];
    eventually("every node carries its group label", WAIT, || async {
        let labels = group_labels(&nodes).await;
        want.iter()
            .all(|(n, g)| labels.get(*n).map(|l| l.0.as_deref()) == Some(Some(g)))
    })
    .await;
    let labels = group_labels(&nodes).await;
    assert_eq!(labels["n1"].1.as_deref(), Some("shop-a"), "topology zone");
    assert_eq!(labels["n3"].1, None, "no zone without topologyEnabled");
    eventually("shop-a reports two members, one Ready", WAIT, || async {
        members(&groups, "shop-a").await
            == [
                ("n1".to_owned(), ReadyStatus::Ready),
                ("n2".to_owned(), ReadyStatus::Unknown),
            ]
    })
    .await;
    let status = groups.get("shop-a").await.unwrap().status.unwrap();
    assert_eq!((status.node_num, status.ready_node_num), (2, 1));
    if e2e::recent_kubectl() {
        let kubeconfig = cloud.running.kubeconfig().unwrap();
        let table = e2e::kubectl_ok(kubeconfig, &["get", "nodegroups"]);
        let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
        assert_eq!(header, ["NAME", "NODES", "READY", "AGE"], "{table}");
        let row = table.lines().find(|l| l.starts_with("shop-a ")).unwrap();
        let cells: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(cells[..3], ["shop-a", "2", "1"], "{table}");
        let short = e2e::kubectl_ok(kubeconfig, &["get", "ng", "shop-c", "-o", "name"]);
        assert_eq!(short.trim(), "nodegroup.apps.kubeedge.io/shop-c");
    }

    // n4 moves from shop-b to shop-c by a label change: shop-b's pod on it goes, others stay.
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "default");
    let pinned = |name: &str, node: &str, group: &str| {
        let mut pod = e2e::plain_pod(name, node);
        let selector = BTreeMap::from([(BELONGING_TO.to_owned(), group.to_owned())]);
        pod.spec.as_mut().unwrap().node_selector = Some(selector);
        pod
    };
    for pod in [
        pinned("b-app", "n4", "shop-b"),
        pinned("c-app", "n5", "shop-c"),
        e2e::plain_pod("plain", "n4"),
    ] {
        pods.create(&PostParams::default(), &pod).await.unwrap();
    }
    set_label(&nodes, "n4", "site", Some("c")).await;
    eventually("n4 is relabelled for shop-c", WAIT, || async {
        group_labels(&nodes).await["n4"].0.as_deref() == Some("shop-c")
    })
    .await;
    eventually("shop-b's pod on n4 is deleted", WAIT, || async {
        deleted(&pods, "b-app").await
    })
    .await;
    assert!(
        !deleted(&pods, "plain").await,
        "a pod not pinned to the group stays"
    );
    assert!(!deleted(&pods, "c-app").await, "shop-c's pod on n5 stays");
    eventually("the statuses follow the move", WAIT, || async {
        names_of(&members(&groups, "shop-b").await) == ["n3"]
            && names_of(&members(&groups, "shop-c").await) == ["n4", "n5", "n6"]
    })
    .await;

    // A second group claiming n1 does not take it: its status says who holds it.
    create(&groups, "rival", spec(&["n1"], &[])).await;
    eventually("rival reports its claim on n1 Failed", WAIT, || async {
        let status = groups
            .get("rival")
            .await
            .unwrap()
            .status
            .unwrap_or_default();
        status.node_statuses.iter().any(|s| {
            s.node_name == "n1"
                && s.selection_status == SelectionStatus::Failed
                && s.selection_status_reason.contains("shop-a")
        })
    })
    .await;
    assert_eq!(
        group_labels(&nodes).await["n1"].0.as_deref(),
        Some("shop-a")
    );

    // Deleting shop-a releases n1 and n2 (both labels); rival then gets n1.
    groups
        .delete("shop-a", &DeleteParams::default())
        .await
        .unwrap();
    eventually(
        "shop-a is gone and n2 has no group labels",
        WAIT,
        || async {
            let labels = group_labels(&nodes).await;
            groups.get_opt("shop-a").await.unwrap().is_none() && labels["n2"] == (None, None)
        },
    )
    .await;
    eventually("rival takes the released n1", WAIT, || async {
        group_labels(&nodes).await["n1"] == (Some("rival".to_owned()), None)
    })
    .await;

    // KubeEdge's own NodeGroup manifests apply unchanged.
    let kubeconfig = cloud.running.kubeconfig().unwrap();
    let applied = e2e::kubectl_stdin(kubeconfig, &["apply", "-f", "-"], KUBEEDGE_EXAMPLE);
    assert!(
        applied.status.success(),
        "{}",
        String::from_utf8_lossy(&applied.stderr)
    );
    set_label(&nodes, "n2", "location", Some("hangzhou")).await;
    eventually("hangzhou takes n2 by its location label", WAIT, || async {
        group_labels(&nodes).await["n2"].0.as_deref() == Some("hangzhou")
    })
    .await;

    for edge in edges {
        edge.stop().await;
    }
    cloud.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cloudcore_on_a_real_cluster_labels_node_group_members() {
    let pki = Pki::new();
    // The "real cluster": a cloudcore's embedded control plane, its own site controllers off.
    let cluster = k8s_cloud_with(&pki, Ports::default(), |c| c.modules.sites.enable = false).await;
    let kubeconfig = cluster.running.kubeconfig().unwrap().to_path_buf();
    let cloud = k8s_cloud_with(&pki, Ports::default(), |c| {
        c.kube_api_config.kube_config = kubeconfig.clone();
    })
    .await;
    assert!(cloud.running.api().is_none(), "no embedded control plane");
    let admin = cluster.kube().await;
    let nodes: Api<Node> = Api::all(admin.clone());
    for (name, labels) in [("r1", json!({"site": "x"})), ("r2", json!({}))] {
        let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}});
        let node: Node = serde_json::from_value(node).unwrap();
        nodes.create(&PostParams::default(), &node).await.unwrap();
    }
    let groups: Api<NodeGroup> = Api::all(admin);
    eventually(
        "the cloudcore applied the NodeGroup CRD to the cluster",
        WAIT,
        || async { groups.list(&Default::default()).await.is_ok() },
    )
    .await;
    create(&groups, "site-x", spec(&[], &[("site", "x")])).await;
    eventually("r1 is labelled and reported, r2 is not", WAIT, || async {
        let labels = group_labels(&nodes).await;
        labels["r1"].0.as_deref() == Some("site-x")
            && labels["r2"].0.is_none()
            && names_of(&members(&groups, "site-x").await) == ["r1"]
    })
    .await;
    cloud.stop().await;
    cluster.stop().await;
}

/// Starts in-process edgecores named `names`, linked to `cloud` over WebSocket.
async fn start_edges(pki: &Pki, cloud: &Cloud, dir: &Path, names: &[&str]) -> Vec<Edge> {
    let transport = link::Transport::WebSocket;
    let mut edges = Vec::new();
    for name in names {
        let db = dir.join(format!("{name}.db"));
        let config = edge_config(&pki.node(name), cloud.addr(transport), transport, &db);
        let edge = edge(config).await;
        edge.linked().await;
        edges.push(edge);
    }
    edges
}

fn spec(nodes: &[&str], labels: &[(&str, &str)]) -> NodeGroupSpec {
    NodeGroupSpec {
        nodes: nodes.iter().map(|n| (*n).to_owned()).collect(),
        match_labels: labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        topology_enabled: false,
    }
}

async fn create(groups: &Api<NodeGroup>, name: &str, spec: NodeGroupSpec) {
    groups
        .create(&PostParams::default(), &NodeGroup::new(name, spec))
        .await
        .unwrap();
}

async fn set_label(nodes: &Api<Node>, node: &str, key: &str, value: Option<&str>) {
    let patch = json!({"metadata": {"labels": {key: value}}});
    nodes
        .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

/// Node → (group label, zone label).
async fn group_labels(nodes: &Api<Node>) -> BTreeMap<String, (Option<String>, Option<String>)> {
    let listed = nodes.list(&Default::default()).await.unwrap();
    listed
        .items
        .into_iter()
        .map(|n| {
            let labels = n.metadata.labels.unwrap_or_default();
            let name = n.metadata.name.unwrap_or_default();
            (
                name,
                (
                    labels.get(BELONGING_TO).cloned(),
                    labels.get(TOPOLOGY_ZONE).cloned(),
                ),
            )
        })
        .collect()
}

/// The members a group reports (Succeeded), with their readiness.
async fn members(groups: &Api<NodeGroup>, name: &str) -> Vec<(String, ReadyStatus)> {
    let group = groups.get(name).await.unwrap();
    let statuses = group.status.unwrap_or_default().node_statuses;
    statuses
        .into_iter()
        .filter(|s| s.selection_status == SelectionStatus::Succeeded)
        .map(|s| (s.node_name, s.ready_status))
        .collect()
}

fn names_of(members: &[(String, ReadyStatus)]) -> Vec<&str> {
    members.iter().map(|(n, _)| n.as_str()).collect()
}

/// Whether the pod is gone or being deleted (a bound pod is only marked until its node
/// confirms).
async fn deleted(pods: &Api<Pod>, name: &str) -> bool {
    match pods.get_opt(name).await.unwrap() {
        None => true,
        Some(pod) => pod.metadata.deletion_timestamp.is_some(),
    }
}
