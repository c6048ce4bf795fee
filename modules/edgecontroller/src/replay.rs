//! Replays a write against the Kubernetes API and hands back the API's answer as is. A node's
//! write is made as that node: the request impersonates `system:node:<name>` in the groups
//! `system:nodes` and `system:authenticated`, so the API's own authorizer (the Node authorizer
//! and NodeRestriction admission on a real cluster and on the embedded control plane) is the
//! last gate, whatever the node sent. Only the cloud's own writes (a Node it registers) go
//! with cloudcore's rights.

use apimachinery::forward::NodeRequest;
use apimachinery::noderules::{AUTHENTICATED_GROUP, NODE_USER_PREFIX, NODES_GROUP};
use apimachinery::{ApiError, ForwardedReply};
use kube::Client;
use serde_json::Value;

/// Who a replayed write is made as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Caller<'a> {
    /// The edge node of this name.
    Node(&'a str),
    /// cloudcore itself.
    Cloud,
}

/// The user name of node `node`, as its certificate names it.
pub(crate) fn node_user(node: &str) -> String {
    format!("{NODE_USER_PREFIX}{node}")
}

/// Sends `write` to the API as `caller`; the reply is its code and body (a `Status` for
/// errors), or a `Status` saying why the API could not be reached.
pub(crate) async fn replay(
    client: &Client,
    caller: Caller<'_>,
    write: &NodeRequest,
    timeout: std::time::Duration,
) -> ForwardedReply {
    match tokio::time::timeout(timeout, send(client, caller, write)).await {
        Ok(Ok(reply)) => reply,
        Ok(Err(e)) => ForwardedReply::from_error(&ApiError::service_unavailable(format!(
            "the Kubernetes API could not be reached: {e}"
        ))),
        Err(_) => ForwardedReply::from_error(&ApiError::timeout(format!(
            "the Kubernetes API did not answer within {timeout:?}"
        ))),
    }
}

async fn send(
    client: &Client,
    caller: Caller<'_>,
    write: &NodeRequest,
) -> Result<ForwardedReply, kube::Error> {
    let body = match &write.body {
        // Serializing a Value cannot fail.
        Some(b) => serde_json::to_vec(b).expect("a JSON value serializes"),
        None => Vec::new(),
    };
    let mut request = http::Request::builder()
        .method(write.method())
        .uri(write.path())
        .header(http::header::CONTENT_TYPE, write.content_type())
        .header(http::header::ACCEPT, "application/json");
    if let Caller::Node(node) = caller {
        request = request
            .header("Impersonate-User", node_user(node))
            .header("Impersonate-Group", NODES_GROUP)
            .header("Impersonate-Group", AUTHENTICATED_GROUP);
    }
    let request = request
        .body(kube::client::Body::from(body))
        .map_err(kube::Error::HttpError)?;
    let response = client.send(request).await?;
    let code = response.status().as_u16();
    let bytes = response.into_body().collect_bytes().await?;
    let body = serde_json::from_slice::<Value>(&bytes).unwrap_or_else(|_| {
        let text = String::from_utf8_lossy(&bytes).into_owned();
        ApiError::new(code, "Unknown", text).to_status()
    });
    Ok(ForwardedReply { code, body })
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use apimachinery::forward::{BodyType, Subresource, Verb};
    use axum::extract::Request;
    use serde_json::json;

    use super::*;

    /// What the API saw of one request: method, path and query as sent, impersonation headers.
    #[derive(Debug, Default, PartialEq)]
    struct Seen {
        line: String,
        user: Vec<String>,
        groups: Vec<String>,
    }

    /// An HTTP server on loopback that records each request and answers 201 with `{}`.
    async fn recording_api() -> (Client, Arc<Mutex<Vec<Seen>>>) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let record = seen.clone();
        let app = axum::Router::new().fallback(move |req: Request| {
            let record = record.clone();
            async move {
                let values = |name: &str| -> Vec<String> {
                    let all = req.headers().get_all(name).iter();
                    all.filter_map(|v| v.to_str().ok().map(str::to_owned))
                        .collect()
                };
                let line = format!("{} {}", req.method(), req.uri());
                let entry = Seen {
                    line,
                    user: values("impersonate-user"),
                    groups: values("impersonate-group"),
                };
                record.lock().unwrap().push(entry);
                (http::StatusCode::CREATED, axum::Json(json!({})))
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        let client = Client::try_from(kube::Config::new(url.parse().unwrap())).unwrap();
        (client, seen)
    }

    fn token_request() -> NodeRequest {
        NodeRequest {
            verb: Verb::Create,
            group: String::new(),
            version: "v1".into(),
            resource: "serviceaccounts".into(),
            namespace: Some("default".into()),
            name: Some("builder".into()),
            subresource: Some(Subresource::Token),
            body_type: BodyType::Json,
            body: Some(json!({"spec": {}})),
            dry_run: false,
        }
    }

    #[tokio::test]
    async fn a_nodes_write_reaches_the_api_as_that_node() {
        let (client, seen) = recording_api().await;
        let reply = replay(
            &client,
            Caller::Node("n1"),
            &token_request(),
            Duration::from_secs(5),
        )
        .await;
        assert_eq!(reply.code, 201);
        let seen = seen.lock().unwrap();
        assert_eq!(
            *seen,
            [Seen {
                line: "POST /api/v1/namespaces/default/serviceaccounts/builder/token".into(),
                user: vec!["system:node:n1".into()],
                groups: vec!["system:nodes".into(), "system:authenticated".into()],
            }]
        );
    }

    #[tokio::test]
    async fn the_clouds_own_write_impersonates_nobody() {
        let (client, seen) = recording_api().await;
        let mut node = token_request();
        (node.resource, node.namespace, node.name, node.subresource) =
            ("nodes".into(), None, None, None);
        replay(&client, Caller::Cloud, &node, Duration::from_secs(5)).await;
        let seen = seen.lock().unwrap();
        assert_eq!(seen[0].line, "POST /api/v1/nodes");
        assert!(
            seen[0].user.is_empty() && seen[0].groups.is_empty(),
            "{seen:?}"
        );
    }
}
