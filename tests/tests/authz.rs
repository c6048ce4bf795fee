//! Reads on the embedded control plane are authorized, over real TLS through the `kube` crate:
//! a node certificate reads only what the Node authorizer lets a kubelet read, a
//! service-account token reads only what RBAC grants it (nothing, until bound), the admin reads
//! everything.

use e2e::controller::Desired;
use e2e::{Pki, Ports, cloud};
use futures::TryStreamExt;
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Pod, Secret, ServiceAccount};
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;

/// The status of a refused request.
fn refusal<T: std::fmt::Debug>(r: Result<T, kube::Error>) -> kube::core::Status {
    match r {
        Err(kube::Error::Api(status)) => *status,
        other => panic!("expected an API error, got {other:?}"),
    }
}

fn code_of<T: std::fmt::Debug>(r: Result<T, kube::Error>) -> u16 {
    refusal(r).code
}

fn secret(name: &str) -> Secret {
    serde_json::from_value(json!({"metadata": {"name": name}, "stringData": {"k": "v"}})).unwrap()
}

/// A pod bound to `node` that reads secret `secret` into its environment.
fn pod_reading(name: &str, node: &str, secret: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox",
            "env": [{"name": "K", "valueFrom": {"secretKeyRef": {"name": secret, "key": "k"}}}]}]},
    }))
    .unwrap()
}

/// Nodes n1 and n2; in `default`, secret `mine` read by pod `p1` on n1 and secret `theirs` read
/// by pod `p2` on n2; secret `hidden` in namespace `other`.
async fn two_nodes(admin: &kube::Client) {
    for name in ["n1", "n2"] {
        let node: Node = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
        Api::<Node>::all(admin.clone())
            .create(&PostParams::default(), &node)
            .await
            .unwrap();
    }
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "other"}})).unwrap();
    Api::<Namespace>::all(admin.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    let pp = PostParams::default();
    let secrets: Api<Secret> = Api::namespaced(admin.clone(), "default");
    for name in ["mine", "theirs"] {
        secrets.create(&pp, &secret(name)).await.unwrap();
    }
    let other: Api<Secret> = Api::namespaced(admin.clone(), "other");
    other.create(&pp, &secret("hidden")).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "default");
    pods.create(&pp, &pod_reading("p1", "n1", "mine"))
        .await
        .unwrap();
    pods.create(&pp, &pod_reading("p2", "n2", "theirs"))
        .await
        .unwrap();
}

/// Opens a watch and returns its first event's object name, or the refusal.
async fn first_watched<K>(api: &Api<K>, params: &WatchParams) -> Result<String, kube::Error>
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned,
{
    let stream = api.watch(params, "0").await?;
    futures::pin_mut!(stream);
    match stream.try_next().await? {
        Some(WatchEvent::Added(obj)) => Ok(obj.meta().name.clone().unwrap_or_default()),
        Some(WatchEvent::Error(e)) => Err(kube::Error::Api(e)),
        other => panic!("unexpected first watch event: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_certificate_reads_only_what_its_pods_need() {
    let pki = Pki::new();
    let cloud = cloud(&pki, Desired::new(), Ports::default()).await;
    let admin = cloud.kube().await;
    two_nodes(&admin).await;
    let n1 = cloud.kube_as_node("n1").await;
    let secrets: Api<Secret> = Api::namespaced(n1.clone(), "default");

    // Refused: a secret no pod of n1 reads, by get, narrowed list and narrowed watch.
    let theirs = refusal(secrets.get("theirs").await);
    assert_eq!((theirs.code, theirs.reason.as_str()), (403, "Forbidden"));
    assert_eq!(
        theirs.message,
        "secrets \"theirs\" is forbidden: User \"system:node:n1\" cannot get resource \"secrets\" in API group \"\" in the namespace \"default\": no relationship found between node 'n1' and this object"
    );
    let only_theirs = ListParams::default().fields("metadata.name=theirs");
    assert_eq!(code_of(secrets.list(&only_theirs).await), 403);
    let watch_theirs = WatchParams::default().fields("metadata.name=theirs");
    assert_eq!(code_of(first_watched(&secrets, &watch_theirs).await), 403);
    let hidden: Api<Secret> = Api::namespaced(n1.clone(), "other");
    assert_eq!(code_of(hidden.get("hidden").await), 403);
    // Refused: every secret, here or everywhere; every pod.
    let all = refusal(secrets.list(&ListParams::default()).await);
    assert_eq!(
        all.message,
        "secrets is forbidden: User \"system:node:n1\" cannot list resource \"secrets\" in API group \"\" in the namespace \"default\": can only read individual resources of this type"
    );
    let everywhere: Api<Secret> = Api::all(n1.clone());
    assert_eq!(code_of(everywhere.list(&ListParams::default()).await), 403);
    assert_eq!(
        code_of(first_watched(&everywhere, &WatchParams::default()).await),
        403
    );
    let all_pods: Api<Pod> = Api::all(n1.clone());
    assert_eq!(code_of(all_pods.list(&ListParams::default()).await), 403);
    let their_pods = ListParams::default().fields("spec.nodeName=n2");
    assert_eq!(code_of(all_pods.list(&their_pods).await), 403);
    let nodes: Api<Node> = Api::all(n1.clone());
    assert_eq!(code_of(nodes.get("n2").await), 403);
    assert_eq!(code_of(nodes.list(&ListParams::default()).await), 403);
    let pods: Api<Pod> = Api::namespaced(n1.clone(), "default");
    assert_eq!(code_of(pods.get("p2").await), 403);

    // Allowed: the secret its pod reads (get, narrowed list and watch), its own Node, its pods.
    assert_eq!(
        secrets.get("mine").await.unwrap().metadata.name.as_deref(),
        Some("mine")
    );
    let only_mine = ListParams::default().fields("metadata.name=mine");
    assert_eq!(secrets.list(&only_mine).await.unwrap().items.len(), 1);
    let watch_mine = WatchParams::default().fields("metadata.name=mine");
    assert_eq!(first_watched(&secrets, &watch_mine).await.unwrap(), "mine");
    nodes.get("n1").await.unwrap();
    let own_node = ListParams::default().fields("metadata.name=n1");
    assert_eq!(nodes.list(&own_node).await.unwrap().items.len(), 1);
    let my_pods = ListParams::default().fields("spec.nodeName=n1");
    let listed = all_pods.list(&my_pods).await.unwrap();
    let names: Vec<_> = listed
        .iter()
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    assert_eq!(names, ["p1"]);
    let watch_my_pods = WatchParams::default().fields("spec.nodeName=n1");
    assert_eq!(
        first_watched(&all_pods, &watch_my_pods).await.unwrap(),
        "p1"
    );
    pods.get("p1").await.unwrap();
    // The service account its pod runs as (the default one, which every namespace has) but
    // no other; the cluster-wide kinds.
    let accounts: Api<ServiceAccount> = Api::namespaced(n1.clone(), "default");
    accounts.get("default").await.unwrap();
    assert_eq!(code_of(accounts.get("builder").await), 403);
    let services: Api<k8s_openapi::api::core::v1::Service> = Api::all(n1.clone());
    assert!(
        !services
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    cloud.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_account_token_reads_only_what_rbac_grants_and_the_admin_everything() {
    let pki = Pki::new();
    let cloud = cloud(&pki, Desired::new(), Ports::default()).await;
    let admin = cloud.kube().await;
    two_nodes(&admin).await;
    let accounts: Api<ServiceAccount> = Api::namespaced(admin.clone(), "default");
    let account: ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": "builder"}})).unwrap();
    accounts
        .create(&PostParams::default(), &account)
        .await
        .unwrap();
    let request: TokenRequest = serde_json::from_value(json!({"spec": {"audiences": []}})).unwrap();
    let issued = accounts
        .create_token_request("builder", &PostParams::default(), &request)
        .await
        .unwrap();
    let token = issued.status.expect("the token is in the status").token;
    let builder = cloud.kube_with_token(&token).await;

    let secrets: Api<Secret> = Api::namespaced(builder.clone(), "default");
    let got = refusal(secrets.get("mine").await);
    assert_eq!(
        got.message,
        "secrets \"mine\" is forbidden: User \"system:serviceaccount:default:builder\" cannot get resource \"secrets\" in API group \"\" in the namespace \"default\""
    );
    assert_eq!(code_of(secrets.list(&ListParams::default()).await), 403);
    assert_eq!(
        code_of(first_watched(&secrets, &WatchParams::default()).await),
        403
    );
    let everywhere: Api<Secret> = Api::all(builder.clone());
    assert_eq!(code_of(everywhere.list(&ListParams::default()).await), 403);
    // Nor anything else until RBAC grants it: `view` in default lets it read configmaps and
    // pods there, still not secrets.
    let cms: Api<ConfigMap> = Api::namespaced(builder.clone(), "default");
    assert_eq!(code_of(cms.list(&ListParams::default()).await), 403);
    let binding: k8s_openapi::api::rbac::v1::RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "builder-views"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
        "subjects": [{"kind": "ServiceAccount", "name": "builder", "namespace": "default"}],
    }))
    .unwrap();
    Api::namespaced(admin.clone(), "default")
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
    cms.list(&ListParams::default()).await.unwrap();
    Api::<Pod>::namespaced(builder.clone(), "default")
        .list(&ListParams::default())
        .await
        .unwrap();
    assert_eq!(code_of(secrets.list(&ListParams::default()).await), 403);
    assert_eq!(
        code_of(Api::<Pod>::all(builder).list(&ListParams::default()).await),
        403
    );

    // The admin reads everything.
    let all_secrets = Api::<Secret>::all(admin.clone())
        .list(&ListParams::default())
        .await
        .unwrap();
    let names: Vec<_> = all_secrets
        .iter()
        .filter_map(|s| s.metadata.name.clone())
        .collect();
    for name in ["hidden", "mine", "theirs"] {
        assert!(names.iter().any(|n| n == name), "{names:?}");
    }
    let pods = Api::<Pod>::all(admin.clone())
        .list(&ListParams::default())
        .await
        .unwrap();
    assert_eq!(pods.items.len(), 2);
    assert_eq!(
        first_watched(
            &Api::<Secret>::namespaced(admin, "other"),
            &WatchParams::default()
        )
        .await
        .unwrap(),
        "hidden"
    );
    cloud.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_certificate_creates_only_mirror_pods_that_reference_nothing() {
    let pki = Pki::new();
    let cloud = cloud(&pki, Desired::new(), Ports::default()).await;
    let admin = cloud.kube().await;
    two_nodes(&admin).await;
    let pods: Api<Pod> = Api::namespaced(cloud.kube_as_node("n1").await, "other");
    let mirror = |name: &str, volumes: serde_json::Value| -> Pod {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "annotations": {"kubernetes.io/config.mirror": "x"}},
            "spec": {"nodeName": "n1", "volumes": volumes,
                     "containers": [{"name": "c", "image": "busybox"}]},
        }))
        .unwrap()
    };
    let stealing = mirror(
        "steal",
        json!([{"name": "s", "secret": {"secretName": "hidden"}}]),
    );
    let refused = refusal(pods.create(&PostParams::default(), &stealing).await);
    assert_eq!(
        (refused.code, refused.message.as_str()),
        (
            403,
            "pods \"steal\" is forbidden: node \"n1\" can not create pods that reference secrets"
        )
    );
    let plain = mirror("static-web", json!([{"name": "tmp", "emptyDir": {}}]));
    pods.create(&PostParams::default(), &plain).await.unwrap();
    // Its own mirror pod is bound to it, so the node reads it back; the secret stays hidden.
    pods.get("static-web").await.unwrap();
    let secrets: Api<Secret> = Api::namespaced(cloud.kube_as_node("n1").await, "other");
    assert_eq!(code_of(secrets.get("hidden").await), 403);
    cloud.stop().await;
}
