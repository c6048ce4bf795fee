//! The embedded control plane through the `kube` crate: optimistic concurrency, graceful pod
//! deletion, node-scoped authorization, service-account tokens, Status errors, and a watcher
//! that survives a restart of the control plane and relists after a 410.

use std::time::Duration;

use e2e::controller::Desired;
use e2e::{Pki, Ports, cloud, cloud_with};
use futures::StreamExt;
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod, ServiceAccount};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::watcher;
use serde_json::json;
use testkit::eventually;

const WAIT: Duration = Duration::from_secs(30);

fn code_of<T: std::fmt::Debug>(r: Result<T, kube::Error>) -> u16 {
    match r {
        Err(kube::Error::Api(status)) => status.code,
        other => panic!("expected an API error, got {other:?}"),
    }
}

fn pod(name: &str, node: Option<&str>) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]},
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_resource_version_is_a_conflict() {
    let pki = Pki::new();
    let cloud = cloud(&pki, Desired::new(), Ports::default()).await;
    let cms: Api<ConfigMap> = Api::namespaced(cloud.kube().await, "default");
    let mut cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "c"}, "data": {"a": "1"}})).unwrap();
    let created = cms.create(&PostParams::default(), &cm).await.unwrap();
    cm.metadata.resource_version = created.metadata.resource_version.clone();
    cm.data = Some([("a".to_string(), "2".to_string())].into());
    cms.replace("c", &PostParams::default(), &cm).await.unwrap();
    cm.data = Some([("a".to_string(), "3".to_string())].into());
    let stale = cms.replace("c", &PostParams::default(), &cm).await;
    match stale {
        Err(kube::Error::Api(s)) => assert_eq!((s.code, s.reason.as_str()), (409, "Conflict")),
        other => panic!("a stale update was not refused: {other:?}"),
    }
    assert_eq!(cms.get("c").await.unwrap().data.unwrap()["a"], "2");
    cloud.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_answers_a_success_status_except_for_pods_and_services() {
    let pki = Pki::new();
    let cloud = cloud(&pki, Desired::new(), Ports::default()).await;
    let client = cloud.kube().await;
    let pp = PostParams::default();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let cm = serde_json::from_value(json!({"metadata": {"name": "c"}})).unwrap();
    let uid = cms.create(&pp, &cm).await.unwrap().metadata.uid.unwrap();
    let status = cms
        .delete("c", &DeleteParams::default())
        .await
        .unwrap()
        .right()
        .expect("a ConfigMap's delete answers a Status");
    assert!(status.is_success(), "{status:?}");
    let details = status.details.unwrap();
    assert_eq!(
        (
            details.name.as_str(),
            details.kind.as_str(),
            details.uid.as_str()
        ),
        ("c", "configmaps", uid.as_str())
    );
    let leases: Api<Lease> = Api::namespaced(client.clone(), "default");
    let lease = serde_json::from_value(json!({"metadata": {"name": "l"}})).unwrap();
    leases.create(&pp, &lease).await.unwrap();
    let status = leases
        .delete("l", &DeleteParams::default())
        .await
        .unwrap()
        .right()
        .unwrap();
    assert_eq!(status.details.unwrap().group, "coordination.k8s.io");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.create(&pp, &pod("p", None)).await.unwrap();
    let deleted = pods.delete("p", &DeleteParams::default()).await.unwrap();
    assert!(deleted.is_left(), "a pod's delete answers the pod");
    cloud.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_account_and_the_kubernetes_service_come_back_when_deleted() {
    use k8s_openapi::api::core::v1::{Endpoints, Service};
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    let pki = Pki::new();
    let cloud = cloud(&pki, Desired::new(), Ports::default()).await;
    let client = cloud.kube().await;
    let port = cloud.running.api().unwrap().addr().port();
    let endpoints: Api<Endpoints> = Api::namespaced(client.clone(), "default");
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), "default");
    eventually(
        "the kubernetes Service has its Endpoints and EndpointSlice",
        WAIT,
        || async {
            let ep = endpoints.get_opt("kubernetes").await.unwrap();
            let slice = slices.get_opt("kubernetes").await.unwrap();
            let ep_port =
                ep.and_then(|e| e.subsets?.first()?.ports.as_ref()?.first().map(|p| p.port));
            let slice_port = slice.and_then(|s| s.ports?.first()?.port);
            ep_port == Some(i32::from(port)) && slice_port == Some(i32::from(port))
        },
    )
    .await;
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), "default");
    let before = accounts.get("default").await.unwrap().metadata.uid;
    accounts
        .delete("default", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the default ServiceAccount is made again", WAIT, || async {
        let now = accounts.get_opt("default").await.unwrap();
        now.is_some_and(|a| a.metadata.uid != before)
    })
    .await;
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    // The Endpoints first: with the Service, an endpoints controller may take them too.
    endpoints
        .delete("kubernetes", &DeleteParams::default())
        .await
        .unwrap();
    services
        .delete("kubernetes", &DeleteParams::default())
        .await
        .unwrap();
    eventually(
        "the kubernetes Service and its Endpoints are made again",
        WAIT,
        || async {
            services.get_opt("kubernetes").await.unwrap().is_some()
                && endpoints.get_opt("kubernetes").await.unwrap().is_some()
        },
    )
    .await;
    cloud.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bound_pod_is_deleted_gracefully_then_for_good() {
    let pki = Pki::new();
    let cloud = cloud(&pki, Desired::new(), Ports::default()).await;
    let pods: Api<Pod> = Api::namespaced(cloud.kube().await, "default");
    let created = pods
        .create(&PostParams::default(), &pod("bound", Some("edge-1")))
        .await
        .unwrap();
    pods.delete("bound", &DeleteParams::default())
        .await
        .unwrap();
    let terminating = pods.get("bound").await.unwrap();
    assert!(
        terminating.metadata.deletion_timestamp.is_some(),
        "a bound pod waits for its kubelet"
    );
    assert_eq!(terminating.metadata.deletion_grace_period_seconds, Some(30));
    // What kubelet sends once the containers are gone.
    let uid = created.metadata.uid.clone();
    let last = DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: Some(Preconditions {
            uid,
            resource_version: None,
        }),
        ..Default::default()
    };
    pods.delete("bound", &last).await.unwrap();
    assert_eq!(code_of(pods.get("bound").await), 404);
    cloud.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_writes_only_what_a_node_may() {
    let pki = Pki::new();
    let cloud = cloud(&pki, Desired::new(), Ports::default()).await;
    let admin = cloud.kube().await;
    for name in ["n1", "n2"] {
        let node: Node = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
        Api::<Node>::all(admin.clone())
            .create(&PostParams::default(), &node)
            .await
            .unwrap();
    }
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "default");
    pods.create(&PostParams::default(), &pod("mine", Some("n1")))
        .await
        .unwrap();
    pods.create(&PostParams::default(), &pod("theirs", Some("n2")))
        .await
        .unwrap();

    let n1 = cloud.kube_as_node("n1").await;
    let nodes: Api<Node> = Api::all(n1.clone());
    let ready =
        Patch::Merge(json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}}));
    nodes
        .patch_status("n1", &PatchParams::default(), &ready)
        .await
        .unwrap();
    assert_eq!(
        code_of(
            nodes
                .patch_status("n2", &PatchParams::default(), &ready)
                .await
        ),
        403
    );
    let node_pods: Api<Pod> = Api::namespaced(n1.clone(), "default");
    let running = Patch::Merge(json!({"status": {"phase": "Running"}}));
    node_pods
        .patch_status("mine", &PatchParams::default(), &running)
        .await
        .unwrap();
    assert_eq!(
        code_of(
            node_pods
                .patch_status("theirs", &PatchParams::default(), &running)
                .await
        ),
        403
    );
    assert_eq!(
        code_of(
            node_pods
                .patch(
                    "mine",
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}}))
                )
                .await
        ),
        403
    );
    let leases: Api<Lease> = Api::namespaced(n1.clone(), "kube-node-lease");
    let lease = |name: &str| {
        serde_json::from_value::<Lease>(
            json!({"metadata": {"name": name}, "spec": {"holderIdentity": name}}),
        )
        .unwrap()
    };
    leases
        .create(&PostParams::default(), &lease("n1"))
        .await
        .unwrap();
    assert_eq!(
        code_of(leases.create(&PostParams::default(), &lease("n2")).await),
        403
    );
    let cms: Api<ConfigMap> = Api::namespaced(n1, "default");
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "x"}})).unwrap();
    assert_eq!(code_of(cms.create(&PostParams::default(), &cm).await), 403);
    let phase = pods
        .get("theirs")
        .await
        .unwrap()
        .status
        .and_then(|s| s.phase);
    assert_eq!(
        phase.as_deref(),
        Some("Pending"),
        "the refused write changed nothing"
    );
    cloud.stop().await;
}

const ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

fn service_account(name: &str) -> ServiceAccount {
    serde_json::from_value(json!({"metadata": {"name": name}})).unwrap()
}

/// A pod bound to `node` running as service account `account`.
fn pod_as(name: &str, node: &str, account: &str) -> Pod {
    let mut pod = pod(name, Some(node));
    pod.spec.as_mut().unwrap().service_account_name = Some(account.into());
    pod
}

/// A TokenRequest for the API, bound to `pod` if given.
fn token_request(pod: Option<&Pod>) -> TokenRequest {
    let bound = pod.map(|p| {
        json!({"kind": "Pod", "apiVersion": "v1", "name": p.metadata.name, "uid": p.metadata.uid})
    });
    serde_json::from_value(json!({"spec": {"audiences": [], "boundObjectRef": bound}})).unwrap()
}

async fn ask_token(
    accounts: &Api<ServiceAccount>,
    name: &str,
    request: TokenRequest,
) -> Result<TokenRequest, kube::Error> {
    accounts
        .create_token_request(name, &PostParams::default(), &request)
        .await
}

/// The claims of a JWT (not verified).
fn claims(token: &str) -> serde_json::Value {
    use base64::Engine;
    let part = token.split('.').nth(1).expect("a JWT has claims");
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(part)
        .unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_account_token_authenticates_as_the_account_while_it_exists() {
    let pki = Pki::new();
    let cloud = cloud(&pki, Desired::new(), Ports::default()).await;
    let accounts: Api<ServiceAccount> = Api::namespaced(cloud.kube().await, "default");
    let account = accounts
        .create(&PostParams::default(), &service_account("builder"))
        .await
        .unwrap();
    let issued = ask_token(&accounts, "builder", token_request(None))
        .await
        .unwrap();
    assert_eq!(issued.spec.audiences, [ISSUER]);
    assert_eq!(issued.spec.expiration_seconds, Some(3600));
    let status = issued.status.expect("the token is in the status");
    let claims = claims(&status.token);
    assert_eq!(claims["iss"], ISSUER);
    assert_eq!(claims["sub"], "system:serviceaccount:default:builder");
    assert_eq!(claims["aud"], json!([ISSUER]));
    let k = &claims["kubernetes.io"];
    assert_eq!(k["namespace"], "default");
    assert_eq!(
        k["serviceaccount"],
        json!({"name": "builder", "uid": account.metadata.uid})
    );
    assert!(k.get("pod").is_none(), "{k}");
    let (iat, exp) = (
        claims["iat"].as_i64().unwrap(),
        claims["exp"].as_i64().unwrap(),
    );
    assert_eq!((exp - iat, &claims["nbf"]), (3600, &claims["iat"]));
    assert_eq!(status.expiration_timestamp.0.as_second(), exp);

    // The token authenticates as the account, which RBAC grants nothing: reads and writes are
    // 403 (not 401).
    let as_builder = cloud.kube_with_token(&status.token).await;
    let pods: Api<Pod> = Api::namespaced(as_builder.clone(), "default");
    assert_eq!(code_of(pods.list(&Default::default()).await), 403);
    let cms: Api<ConfigMap> = Api::namespaced(as_builder, "default");
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "x"}})).unwrap();
    assert_eq!(code_of(cms.create(&PostParams::default(), &cm).await), 403);

    // No account, no token; a lifetime under ten minutes is invalid.
    let ghost = ask_token(&accounts, "ghost", token_request(None)).await;
    assert_eq!(code_of(ghost), 404);
    let mut short = token_request(None);
    short.spec.expiration_seconds = Some(60);
    assert_eq!(code_of(ask_token(&accounts, "builder", short).await), 422);

    // A forged token, and the token of a deleted account, are refused.
    let forged = Api::<Pod>::namespaced(cloud.kube_with_token("e30.e30.e30").await, "default");
    assert_eq!(code_of(forged.list(&Default::default()).await), 401);
    accounts
        .delete("builder", &DeleteParams::default())
        .await
        .unwrap();
    assert_eq!(code_of(pods.list(&Default::default()).await), 401);
    cloud.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_gets_tokens_only_for_pods_bound_to_it() {
    let pki = Pki::new();
    let cloud = cloud(&pki, Desired::new(), Ports::default()).await;
    let admin = cloud.kube().await;
    Api::<ServiceAccount>::namespaced(admin.clone(), "default")
        .create(&PostParams::default(), &service_account("builder"))
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(admin, "default");
    let pp = PostParams::default();
    let mine = pods.create(&pp, &pod_as("mine", "n1", "builder")).await;
    let theirs = pods.create(&pp, &pod_as("theirs", "n2", "builder")).await;
    let (mine, theirs) = (mine.unwrap(), theirs.unwrap());

    let n1: Api<ServiceAccount> = Api::namespaced(cloud.kube_as_node("n1").await, "default");
    let issued = ask_token(&n1, "builder", token_request(Some(&mine)))
        .await
        .unwrap();
    let token = issued.status.unwrap().token;
    assert_eq!(
        claims(&token)["kubernetes.io"]["pod"],
        json!({"name": "mine", "uid": mine.metadata.uid})
    );
    // It authenticates (403 from RBAC, which grants the account nothing, rather than 401).
    let bound: Api<Pod> = Api::namespaced(cloud.kube_with_token(&token).await, "default");
    assert_eq!(code_of(bound.list(&Default::default()).await), 403);

    let elsewhere = ask_token(&n1, "builder", token_request(Some(&theirs))).await;
    assert_eq!(code_of(elsewhere), 403);
    let unbound = ask_token(&n1, "builder", token_request(None)).await;
    assert_eq!(code_of(unbound), 403);

    // The token ends with its pod.
    let now = DeleteParams {
        grace_period_seconds: Some(0),
        ..Default::default()
    };
    pods.delete("mine", &now).await.unwrap();
    assert_eq!(code_of(pods.get("mine").await), 404);
    assert_eq!(code_of(bound.list(&Default::default()).await), 401);
    cloud.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_the_right_status() {
    let pki = Pki::new();
    let cloud = cloud(&pki, Desired::new(), Ports::default()).await;
    let client = cloud.kube().await;
    let raw = |method: &str, uri: &str, body: &str| {
        http::Request::builder()
            .method(method)
            .uri(uri)
            .header("content-type", "application/json")
            .body(body.as_bytes().to_vec())
            .unwrap()
    };
    let status = |r: Result<String, kube::Error>| match r {
        Err(kube::Error::Api(s)) => (s.code, s.reason),
        other => panic!("expected a Status, got {other:?}"),
    };
    let unknown = client
        .request_text(raw("GET", "/api/v1/namespaces/default/frobs", ""))
        .await;
    assert_eq!(status(unknown), (404, "NotFound".into()));
    let malformed = client
        .request_text(raw(
            "POST",
            "/api/v1/namespaces/default/configmaps",
            "{not json",
        ))
        .await;
    assert_eq!(status(malformed), (400, "BadRequest".into()));
    let selector = client
        .request_text(raw("GET", "/api/v1/pods?labelSelector=a%20in%20(", ""))
        .await;
    assert_eq!(status(selector).0, 400);
    let field = client
        .request_text(raw(
            "GET",
            "/api/v1/pods?fieldSelector=spec.color%3Dred",
            "",
        ))
        .await;
    assert_eq!(status(field).0, 400);
    cloud.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watcher_resumes_across_a_restart_and_relists_after_a_410() {
    let pki = Pki::new();
    let desired = Desired::new();
    let short_log = |c: &mut cloudcore::Config| c.modules.api_server.change_log_retention = 50;
    let cloud1 = cloud_with(&pki, desired.clone(), Ports::default(), short_log).await;
    let client = cloud1.kube().await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let cm = |name: &str| {
        serde_json::from_value::<ConfigMap>(json!({"metadata": {"name": name}})).unwrap()
    };
    cms.create(&PostParams::default(), &cm("before"))
        .await
        .unwrap();

    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let inits = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (seen2, inits2) = (seen.clone(), inits.clone());
    let watching = tokio::spawn(async move {
        let mut events = watcher(cms, watcher::Config::default()).boxed();
        while let Some(event) = events.next().await {
            match event {
                Ok(watcher::Event::Init) => {
                    inits2.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                }
                Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => {
                    seen2.lock().unwrap().push(o.metadata.name.unwrap());
                }
                _ => {}
            }
        }
    });
    eventually("the initial list", WAIT, || {
        std::future::ready(seen.lock().unwrap().contains(&"before".to_string()))
    })
    .await;

    let ports = cloud1.ports();
    cloud1.stop().await;
    let cloud2 = cloud_with(&pki, desired.clone(), ports, short_log).await;
    let writer: Api<ConfigMap> = Api::namespaced(cloud2.kube().await, "default");
    writer
        .create(&PostParams::default(), &cm("after-restart"))
        .await
        .unwrap();
    eventually("the watcher resumes after the restart", WAIT, || {
        std::future::ready(seen.lock().unwrap().contains(&"after-restart".to_string()))
    })
    .await;
    let inits_before = inits.load(std::sync::atomic::Ordering::SeqCst);

    // Stop again; while the watcher cannot reach it (the control plane runs on another port),
    // move the log far past where the watcher was; then bring it back where the watcher looks.
    let ports = cloud2.ports();
    cloud2.stop().await;
    let elsewhere = cloud_with(&pki, desired.clone(), Ports::default(), short_log).await;
    let writer: Api<ConfigMap> = Api::namespaced(elsewhere.kube().await, "default");
    for i in 0..120 {
        writer
            .create(&PostParams::default(), &cm(&format!("churn-{i}")))
            .await
            .unwrap();
    }
    elsewhere.stop().await;
    let cloud3 = cloud_with(&pki, desired.clone(), ports, short_log).await;
    eventually(
        "the watcher relists after 410 and sees everything",
        WAIT,
        || {
            std::future::ready(
                seen.lock().unwrap().contains(&"churn-119".to_string())
                    && inits.load(std::sync::atomic::Ordering::SeqCst) > inits_before,
            )
        },
    )
    .await;
    watching.abort();
    cloud3.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_namespace_holds_the_root_ca_and_gets_it_back_when_it_is_removed() {
    use k8s_openapi::api::core::v1::Namespace;

    let pki = Pki::new();
    let cloud = cloud(&pki, Desired::new(), Ports::default()).await;
    let client = cloud.kube().await;
    let ca_pem = cloud.running.api().unwrap().ca_pem().to_owned();
    let holds_ca = |ns: &'static str| {
        let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
        let ca_pem = ca_pem.clone();
        async move {
            cms.get_opt("kube-root-ca.crt")
                .await
                .unwrap()
                .and_then(|cm| cm.data)
                .is_some_and(|d| d.get("ca.crt") == Some(&ca_pem))
        }
    };
    eventually("default holds kube-root-ca.crt", WAIT, || {
        holds_ca("default")
    })
    .await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "shop"}})).unwrap();
    namespaces
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    eventually("a new namespace gets it", WAIT, || holds_ca("shop")).await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "shop");
    cms.delete("kube-root-ca.crt", &DeleteParams::default())
        .await
        .unwrap();
    eventually("a deleted one comes back", WAIT, || holds_ca("shop")).await;
    let tampered = json!({"data": {"ca.crt": "not a CA"}});
    cms.patch(
        "kube-root-ca.crt",
        &PatchParams::default(),
        &Patch::Merge(&tampered),
    )
    .await
    .unwrap();
    eventually("a changed one is put back", WAIT, || holds_ca("shop")).await;
    cloud.stop().await;
}
