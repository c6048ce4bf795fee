//! The proxy subresources of the embedded control plane, over real TLS: a kubelet-shaped node
//! reports its pod at 127.0.0.1 with a small HTTP server on a port-0 port; `services/<name>:<port
//! name>/proxy/...` reaches it through the EndpointSlice the controllers write, `pods/<name>:<port>/proxy`
//! directly, each method authorized as its verb on the subresource; a pod that does not take the
//! connection (as an edge pod behind NAT) is a 503 naming its node.

use std::time::Duration;

use e2e::{Cloud, Pki, Ports, k8s_cloud_with, kubectl};
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{Node, Pod, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use testkit::eventually;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const WAIT: Duration = Duration::from_secs(30);
const NODE: &str = "edge-px";

fn obj<T: DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).unwrap()
}

/// A one-answer-per-connection HTTP server on 127.0.0.1:0 that answers
/// `<method> <path> auth=<whether an Authorization header came>`; returns its port.
async fn echo_server() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match conn.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
                let line: Vec<&str> = head.lines().next().unwrap_or("").split(' ').collect();
                let auth = head.contains("\r\nauthorization:");
                let body = format!("{} {} auth={auth}", line[0], line.get(1).unwrap_or(&""));
                let answer = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\n\
                     connection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = conn.write_all(answer.as_bytes()).await;
            });
        }
    });
    port
}

/// A port on 127.0.0.1 nothing listens on.
async fn closed_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    listener.local_addr().unwrap().port()
}

/// The node registers itself, and reports pod `name` (declaring `port` as `http`) running and
/// ready at 127.0.0.1, as a kubelet does.
async fn running_pod(cloud: &Cloud, node: &kube::Client, name: &str, port: u16) {
    let pods: Api<Pod> = Api::namespaced(cloud.kube().await, "default");
    let pod = obj(json!({
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {"nodeName": NODE, "containers": [{"name": "c", "image": "registry.local/web:1",
                 "ports": [{"name": "http", "containerPort": port}]}]},
    }));
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let status = json!({"status": {"phase": "Running", "podIP": "127.0.0.1",
        "podIPs": [{"ip": "127.0.0.1"}],
        "conditions": [{"type": "Ready", "status": "True"}]}});
    Api::<Pod>::namespaced(node.clone(), "default")
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
}

async fn register_node(node: &kube::Client) {
    let me: Node = obj(json!({
        "metadata": {"name": NODE},
        "status": {"conditions": [{"type": "Ready", "status": "True"}],
                   "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}]},
    }));
    Api::<Node>::all(node.clone())
        .create(&PostParams::default(), &me)
        .await
        .unwrap();
}

/// `GET`/`POST` `path` as `client`: the status code and the body.
async fn send(client: &kube::Client, method: &str, path: &str) -> (u16, String) {
    let req = http::Request::builder()
        .method(method)
        .uri(path)
        .body(b"ping".to_vec())
        .unwrap();
    let answer = tokio::time::timeout(Duration::from_secs(10), client.request_text(req)).await;
    let answer = answer.unwrap_or_else(|_| panic!("{method} {path}: no answer within 10s"));
    match answer {
        Ok(text) => (200, text),
        Err(kube::Error::Api(status)) => (status.code, status.message),
        Err(e) => panic!("{method} {path}: {e}"),
    }
}

/// The admin's client, without kube's retries: a 503 is the answer under test.
async fn admin(cloud: &Cloud) -> kube::Client {
    let path = cloud.running.kubeconfig().unwrap();
    let kubeconfig = kube::config::Kubeconfig::read_from(path).unwrap();
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    config.default_retry = false;
    kube::Client::try_from(config).unwrap()
}

async fn proxy_cloud(pki: &Pki) -> Cloud {
    k8s_cloud_with(pki, Ports::default(), |c| {
        c.modules.api_server.proxy_to_loopback = true;
        c.modules.api_server.proxy_dial_timeout = Duration::from_millis(500);
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn services_and_pods_are_proxied_to_the_pod_and_an_unreachable_pod_names_its_node() {
    let pki = Pki::new();
    let cloud = proxy_cloud(&pki).await;
    let admin = admin(&cloud).await;
    let node = cloud.kube_as_node(NODE).await;
    register_node(&node).await;
    let port = echo_server().await;
    running_pod(&cloud, &node, "web", port).await;
    let svc: Service = obj(json!({
        "metadata": {"name": "web"},
        "spec": {"selector": {"app": "web"},
                 "ports": [{"name": "http", "port": 80, "targetPort": "http"}]},
    }));
    Api::<Service>::namespaced(admin.clone(), "default")
        .create(&PostParams::default(), &svc)
        .await
        .unwrap();

    // Through the Service, by port name and by port number, once its EndpointSlice lists the pod.
    let by_name = "/api/v1/namespaces/default/services/web:http/proxy/x";
    eventually("the service proxy reaches the pod", WAIT, || async {
        send(&admin, "GET", by_name).await == (200, "get /x auth=false".into())
    })
    .await;
    let by_number = "/api/v1/namespaces/default/services/web:80/proxy/a/b?q=1";
    assert_eq!(
        send(&admin, "POST", by_number).await,
        (200, "post /a/b?q=1 auth=false".into())
    );
    let (code, message) = send(
        &admin,
        "GET",
        "/api/v1/namespaces/default/services/web:81/proxy/",
    )
    .await;
    assert_eq!(code, 503, "{message}");
    assert!(message.contains("no service port 81"), "{message}");

    // Straight to the pod, at the port named or its first declared one.
    let pod_path = format!("/api/v1/namespaces/default/pods/web:{port}/proxy/y/");
    assert_eq!(
        send(&admin, "GET", &pod_path).await,
        (200, "get /y/ auth=false".into())
    );
    let first_port = "/api/v1/namespaces/default/pods/web/proxy";
    assert_eq!(
        send(&admin, "GET", first_port).await,
        (200, "get / auth=false".into())
    );
    let (code, message) = send(
        &admin,
        "GET",
        "/api/v1/namespaces/default/pods/a:b:c:d/proxy",
    )
    .await;
    assert_eq!(
        (code, message.as_str()),
        (400, "invalid pod request \"a:b:c:d\"")
    );

    // A pod that does not take the connection: 503 naming its node.
    running_pod(&cloud, &node, "edge-only", closed_port().await).await;
    let (code, message) = send(
        &admin,
        "GET",
        "/api/v1/namespaces/default/pods/edge-only/proxy/",
    )
    .await;
    assert_eq!(code, 503, "{message}");
    assert!(message.contains(&format!("node \"{NODE}\"")), "{message}");

    // kubectl, as a user would.
    if std::process::Command::new("kubectl")
        .arg("version")
        .arg("--client")
        .output()
        .is_ok()
    {
        let kubeconfig = cloud.running.kubeconfig().unwrap();
        let out = kubectl(kubeconfig, &["get", "--raw", by_name]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(String::from_utf8_lossy(&out.stdout), "get /x auth=false");
    }
    cloud.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_method_is_authorized_as_its_verb_on_the_proxy_subresource() {
    let pki = Pki::new();
    let cloud = proxy_cloud(&pki).await;
    let admin = admin(&cloud).await;
    let node = cloud.kube_as_node(NODE).await;
    register_node(&node).await;
    running_pod(&cloud, &node, "web", echo_server().await).await;
    let pp = PostParams::default();
    let accounts: Api<ServiceAccount> = Api::namespaced(admin.clone(), "default");
    accounts
        .create(&pp, &obj(json!({"metadata": {"name": "bot"}})))
        .await
        .unwrap();
    let role: Role = obj(json!({
        "metadata": {"name": "proxy-get"},
        "rules": [{"apiGroups": [""], "resources": ["pods/proxy"], "verbs": ["get"]}],
    }));
    Api::<Role>::namespaced(admin.clone(), "default")
        .create(&pp, &role)
        .await
        .unwrap();
    let binding: RoleBinding = obj(json!({
        "metadata": {"name": "bot-proxy-get"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "proxy-get"},
        "subjects": [{"kind": "ServiceAccount", "name": "bot", "namespace": "default"}],
    }));
    Api::<RoleBinding>::namespaced(admin.clone(), "default")
        .create(&pp, &binding)
        .await
        .unwrap();
    let issued = accounts
        .create_token_request(
            "bot",
            &pp,
            &obj::<TokenRequest>(json!({"spec": {"audiences": []}})),
        )
        .await
        .unwrap();
    let bot = cloud.kube_with_token(&issued.status.unwrap().token).await;

    let path = "/api/v1/namespaces/default/pods/web/proxy/z";
    // The bot's bearer token authenticated it here; it is not sent on to the pod.
    assert_eq!(
        send(&bot, "GET", path).await,
        (200, "get /z auth=false".into())
    );
    let (code, message) = send(&bot, "POST", path).await;
    assert_eq!(code, 403, "{message}");
    assert!(
        message.contains("cannot create resource \"pods/proxy\""),
        "{message}"
    );
    let (code, _) = send(
        &bot,
        "GET",
        "/api/v1/namespaces/default/services/web/proxy/",
    )
    .await;
    assert_eq!(code, 403);
    // A node may not proxy to pods through the API, even its own.
    let (code, _) = send(&node, "GET", path).await;
    assert_eq!(code, 403);
    cloud.stop().await;
}
