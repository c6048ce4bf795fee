//! Replays a node's write against the Kubernetes API and hands back the API's answer as is.

use apimachinery::{ApiError, ForwardedReply, ForwardedWrite};
use kube::Client;
use serde_json::Value;

/// Sends `write` to the API; the reply is its code and body (a `Status` for errors), or a
/// `Status` saying why the API could not be reached.
pub(crate) async fn replay(
    client: &Client,
    write: &ForwardedWrite,
    timeout: std::time::Duration,
) -> ForwardedReply {
    match tokio::time::timeout(timeout, send(client, write)).await {
        Ok(Ok(reply)) => reply,
        Ok(Err(e)) => ForwardedReply::from_error(&ApiError::service_unavailable(format!(
            "the Kubernetes API could not be reached: {e}"
        ))),
        Err(_) => ForwardedReply::from_error(&ApiError::timeout(format!(
            "the Kubernetes API did not answer within {timeout:?}"
        ))),
    }
}

async fn send(client: &Client, write: &ForwardedWrite) -> Result<ForwardedReply, kube::Error> {
    let content_type = write
        .content_type
        .clone()
        .unwrap_or_else(|| "application/json".into());
    let body = match &write.body {
        // Serializing a Value cannot fail.
        Some(b) => serde_json::to_vec(b).expect("a JSON value serializes"),
        None => Vec::new(),
    };
    let request = http::Request::builder()
        .method(write.method())
        .uri(write.path())
        .header(http::header::CONTENT_TYPE, content_type)
        .header(http::header::ACCEPT, "application/json")
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
