//! `metrics.k8s.io` through the REST router (`oneshot`): discovery, lists with selectors, gets,
//! 404s, 405s and the authorizer.

use std::sync::Arc;

use apimachinery::ApiError;
use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use kapi::local::LocalBackend;
use kapi::{Api, Authorizer, ReadRequest, Registry, User};
use serde_json::{Value, json};
use tower::ServiceExt;

use super::parse::{ContainerKey, Point, Scrape};
use super::{Service, Shared, resources, serve};

/// Refuses every read of user `jane`, naming what she asked.
struct NotJane;

#[async_trait::async_trait]
impl Authorizer for NotJane {
    async fn authorize_read(&self, req: &ReadRequest<'_>) -> Result<(), ApiError> {
        if req.user.name != "jane" {
            return Ok(());
        }
        let why = format!(
            "User \"jane\" cannot {} resource \"{}\"",
            req.verb, req.info.plural
        );
        Err(ApiError::forbidden(
            &req.info.group,
            &req.info.plural,
            req.name,
            &why,
        ))
    }
}

struct Fixture {
    _dir: tempfile::TempDir,
    app: axum::Router,
    storage: Shared,
}

async fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let writer = objstore::Writer::open(dir.path().join("api.db"), Default::default()).unwrap();
    let registry = Registry::new(apimachinery::catalog::builtins());
    registry.upsert(resources());
    let store = writer.reader();
    let backend = LocalBackend::new(writer, registry.clone(), Default::default());
    backend.ensure_namespaces(&["default"]).await.unwrap();
    let api = Api {
        registry,
        store,
        backend,
        version: json!({}),
        default_user: None,
        authorizer: Some(Arc::new(NotJane)),
    };
    let storage = Shared::default();
    let service = Service {
        api: api.clone(),
        storage: storage.clone(),
    };
    let app = kapi::router(api).layer(axum::middleware::from_fn_with_state(service, serve));
    Fixture {
        _dir: dir,
        app,
        storage,
    }
}

impl Fixture {
    async fn call(
        &self,
        method: Method,
        user: &str,
        uri: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let mut req = Request::builder().method(method).uri(uri);
        if body.is_some() {
            req = req.header("content-type", "application/json");
        }
        let mut req = req
            .body(body.map_or(Body::empty(), |b| Body::from(b.to_string())))
            .unwrap();
        let groups = if user == "admin" {
            vec!["system:masters".into()]
        } else {
            vec![]
        };
        req.extensions_mut().insert(User {
            name: user.into(),
            groups,
        });
        let resp = self.app.clone().oneshot(req).await.unwrap();
        let status = resp.status();
        let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20)
            .await
            .unwrap();
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        )
    }

    async fn get(&self, uri: &str) -> (StatusCode, Value) {
        self.call(Method::GET, "admin", uri, None).await
    }

    async fn create(&self, uri: &str, body: Value) {
        let (code, body) = self.call(Method::POST, "admin", uri, Some(body)).await;
        assert_eq!(code, StatusCode::CREATED, "{body}");
    }

    /// Node `n1` with pods `web` (app=web, containers a and b) and `db` (app=db) on it, and two
    /// scrapes 10 s apart.
    async fn with_objects_and_two_scrapes(&self) {
        self.create(
            "/api/v1/nodes",
            json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "n1", "labels": {"zone": "a"}}}),
        )
        .await;
        self.create(
            "/api/v1/nodes",
            json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "n2"}}),
        )
        .await;
        for (pod, app) in [("web", "web"), ("db", "db")] {
            self.create(
                "/api/v1/namespaces/default/pods",
                json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": pod, "labels": {"app": app}},
                "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "x"}]}}),
            )
            .await;
        }
        let point = |cpu, mem: f64, at_ms| Point {
            cpu_seconds: cpu,
            memory_bytes: mem,
            at_ms,
            started: None,
        };
        let key = |pod: &str, c: &str| ContainerKey {
            namespace: "default".into(),
            pod: pod.into(),
            container: c.into(),
        };
        let scrape = |t: i64, k: f64| Scrape {
            node: Some(point(100.0 + 2.5 * k, 1_048_576.0, t)),
            containers: [
                (key("web", "a"), point(1.0 + k, 4096.0, t)),
                (key("web", "b"), point(0.1 * k, 2048.0, t)),
                (key("db", "pg"), point(0.5 * k, 8192.0, t)),
            ]
            .into_iter()
            .collect(),
        };
        let mut storage = self.storage.write();
        storage.store("n1", scrape(1_700_000_000_000, 0.0), 0);
        storage.store("n1", scrape(1_700_000_010_000, 1.0), 0);
    }
}

#[tokio::test]
async fn discovery_lists_nodes_and_pods_with_get_and_list() {
    let fx = fixture().await;
    let (code, doc) = fx.get("/apis/metrics.k8s.io/v1beta1").await;
    assert_eq!(code, StatusCode::OK);
    let resources = doc["resources"].as_array().unwrap();
    let entry = |name: &str| {
        resources
            .iter()
            .find(|r| r["name"] == name)
            .cloned()
            .unwrap()
    };
    assert_eq!(entry("nodes")["kind"], "NodeMetrics");
    assert_eq!(entry("nodes")["namespaced"], false);
    assert_eq!(entry("pods")["kind"], "PodMetrics");
    assert_eq!(entry("pods")["verbs"], json!(["get", "list"]));
    let (_, groups) = fx.get("/apis").await;
    assert!(
        groups["groups"]
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["name"] == "metrics.k8s.io")
    );
}

#[tokio::test]
async fn node_and_pod_metrics_are_the_rates_of_the_last_two_scrapes() {
    let fx = fixture().await;
    fx.with_objects_and_two_scrapes().await;
    let (code, node) = fx.get("/apis/metrics.k8s.io/v1beta1/nodes/n1").await;
    assert_eq!(code, StatusCode::OK, "{node}");
    assert_eq!(node["kind"], "NodeMetrics");
    assert_eq!(node["metadata"]["labels"], json!({"zone": "a"}));
    assert_eq!(
        node["usage"],
        json!({"cpu": "250000000n", "memory": "1024Ki"})
    );
    assert_eq!(node["window"], "10s");
    assert_eq!(node["timestamp"], "2023-11-14T22:13:30Z");

    let (_, nodes) = fx.get("/apis/metrics.k8s.io/v1beta1/nodes").await;
    assert_eq!(nodes["kind"], "NodeMetricsList");
    assert_eq!(
        nodes["items"].as_array().unwrap().len(),
        1,
        "n2 has no metrics: {nodes}"
    );

    let (code, web) = fx
        .get("/apis/metrics.k8s.io/v1beta1/namespaces/default/pods/web")
        .await;
    assert_eq!(code, StatusCode::OK, "{web}");
    assert_eq!(web["metadata"]["namespace"], "default");
    assert_eq!(
        web["containers"],
        json!([
            {"name": "a", "usage": {"cpu": "100000000n", "memory": "4Ki"}},
            {"name": "b", "usage": {"cpu": "10000000n", "memory": "2Ki"}},
        ])
    );
    let names = |list: &Value| -> Vec<String> {
        list["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["metadata"]["name"].as_str().unwrap().to_owned())
            .collect()
    };
    let (_, all) = fx.get("/apis/metrics.k8s.io/v1beta1/pods").await;
    assert_eq!(all["kind"], "PodMetricsList");
    assert_eq!(names(&all), ["db", "web"]);
    let (_, selected) = fx
        .get("/apis/metrics.k8s.io/v1beta1/namespaces/default/pods?labelSelector=app%3Dweb")
        .await;
    assert_eq!(names(&selected), ["web"]);
    let (_, by_field) = fx
        .get("/apis/metrics.k8s.io/v1beta1/pods?fieldSelector=metadata.name%3Ddb")
        .await;
    assert_eq!(names(&by_field), ["db"]);
    let (_, zone) = fx
        .get("/apis/metrics.k8s.io/v1beta1/nodes?labelSelector=zone%20in%20(b)")
        .await;
    assert!(names(&zone).is_empty());
}

#[tokio::test]
async fn unknown_objects_are_404_writes_and_watches_405_and_bad_selectors_400() {
    let fx = fixture().await;
    fx.with_objects_and_two_scrapes().await;
    let (code, status) = fx.get("/apis/metrics.k8s.io/v1beta1/nodes/nope").await;
    assert_eq!(code, StatusCode::NOT_FOUND);
    assert_eq!(status["kind"], "Status");
    assert_eq!(status["message"], "nodes.metrics.k8s.io \"nope\" not found");
    let (code, _) = fx.get("/apis/metrics.k8s.io/v1beta1/nodes/n2").await;
    assert_eq!(code, StatusCode::NOT_FOUND, "a node without metrics");
    let (code, status) = fx
        .get("/apis/metrics.k8s.io/v1beta1/namespaces/other/pods/web")
        .await;
    assert_eq!(
        (code, status["reason"].as_str()),
        (StatusCode::NOT_FOUND, Some("NotFound"))
    );
    let (code, _) = fx.get("/apis/metrics.k8s.io/v1beta1/nodes/n1/status").await;
    assert_eq!(code, StatusCode::NOT_FOUND);
    let (code, _) = fx
        .get("/apis/metrics.k8s.io/v1beta1/nodes?watch=true")
        .await;
    assert_eq!(code, StatusCode::METHOD_NOT_ALLOWED);
    let (code, _) = fx
        .call(
            Method::DELETE,
            "admin",
            "/apis/metrics.k8s.io/v1beta1/nodes/n1",
            None,
        )
        .await;
    assert_eq!(code, StatusCode::METHOD_NOT_ALLOWED);
    let (code, status) = fx
        .get("/apis/metrics.k8s.io/v1beta1/pods?labelSelector=a%20in%20(")
        .await;
    assert_eq!(code, StatusCode::BAD_REQUEST, "{status}");
}

#[tokio::test]
async fn reads_are_put_to_the_authorizer_as_get_and_list_of_the_metrics_resources() {
    let fx = fixture().await;
    fx.with_objects_and_two_scrapes().await;
    let (code, status) = fx
        .call(
            Method::GET,
            "jane",
            "/apis/metrics.k8s.io/v1beta1/nodes",
            None,
        )
        .await;
    assert_eq!(code, StatusCode::FORBIDDEN);
    assert_eq!(
        status["message"],
        "nodes.metrics.k8s.io is forbidden: User \"jane\" cannot list resource \"nodes\""
    );
    let (code, status) = fx
        .call(
            Method::GET,
            "jane",
            "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods/web",
            None,
        )
        .await;
    assert_eq!(code, StatusCode::FORBIDDEN);
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .contains("cannot get resource \"pods\"")
    );
    let (code, _) = fx
        .call(
            Method::GET,
            "bob",
            "/apis/metrics.k8s.io/v1beta1/pods",
            None,
        )
        .await;
    assert_eq!(code, StatusCode::OK);
}
