//! get and list.
//!
//! Lists read one page in one store read transaction. `resourceVersion` semantics: unset and
//! `"0"` read the latest state; `NotOlderThan N` waits up to [`TOO_LARGE_WAIT_SECS`] for the
//! store to reach `N`, then fails with 504 `ResourceVersionTooLarge`; `Exact N` is served only
//! when `N` is the store's current revision, anything older is 410 `Expired` (the store keeps
//! no old snapshots). A continue token carries the first page's revision and the last key:
//! the next page reads the current state after that key and reports the first page's
//! revision, so a client that watches from it replays every change since (each item carries
//! its own resourceVersion, so list+watch clients converge). A token older than the store's
//! change-log retention is 410 `Expired`, like an etcd compaction.

use std::time::Duration;

use apimachinery::{ApiError, ResourceInfo};
use axum::http::StatusCode;
use axum::response::Response;
use bytes::Bytes;
use objstore::{ListOptions, ObjKey, Store};
use tokio::time::Instant;

use super::Target;
use super::error::{TOO_LARGE_WAIT_SECS, from_store};
use super::negotiate::Output;
use super::query::{Params, ReadParams, Start};
use super::render::{self, Page};
use super::select;
use super::token::ContinueToken;

/// JSON lists of at least this many stored bytes are streamed ([`render::json_list_body`]).
const STREAM_LIST_BYTES: usize = 256 * 1024;

/// Renders in `output`; a protobuf answer that cannot be made (a stored object its type does
/// not read) is made in JSON, which clients decode by the response's content type.
fn with_json_fallback(
    output: Output,
    render: impl Fn(Output) -> Result<Bytes, ApiError>,
) -> Result<(Output, Bytes), ApiError> {
    match render(output) {
        Err(e) if output == Output::Protobuf => {
            tracing::warn!(error = %e.message, "answering in JSON: no protobuf form");
            Ok((Output::Json, render(Output::Json)?))
        }
        rendered => Ok((output, rendered?)),
    }
}

/// GET of one object (or of a subresource that reads as its parent, like `status`).
pub(crate) async fn get(
    api: &crate::Api,
    target: &Target,
    params: &Params,
    output: Output,
) -> Result<Response, ApiError> {
    let info = &target.info;
    let name = target.name.as_deref().unwrap_or_default();
    let read = ReadParams::parse(params, false)?;
    if let Some(rv) = read.revision()? {
        wait_for_revision(&api.store, rv).await?;
    }
    let key = ObjKey::new(
        info.store_resource(),
        target.namespace.clone().unwrap_or_default(),
        name,
    );
    let obj = api
        .store
        .get(&key)
        .await
        .map_err(from_store)?
        .ok_or_else(|| ApiError::not_found(&info.group, &info.plural, name))?;
    let single = |output| render::single(info, output, read.include_object, &obj, None);
    let (output, body) = with_json_fallback(output, single)?;
    Ok(render::bytes_response(
        StatusCode::OK,
        output.media_type(),
        render::body_of(output, body),
    ))
}

/// GET of a collection.
pub(crate) async fn list(
    api: &crate::Api,
    target: &Target,
    params: &Params,
    output: Output,
) -> Result<Response, ApiError> {
    let info = &target.info;
    let read = ReadParams::parse(params, false)?;
    let filter = select::filter(info, target.namespace.as_deref(), None, &read)?;
    let token = continuation(&api.store, &read)?;
    let start = read.list_start()?;
    if let Start::NotOlderThan(rv) | Start::Exact(rv) = start {
        wait_for_revision(&api.store, rv).await?;
    }
    let opts = ListOptions {
        resource: info.store_resource(),
        filter,
        limit: read.limit,
        continue_after: token.as_ref().map(|t| (t.ns.clone(), t.name.clone())),
    };
    let result = api.store.list(opts).await.map_err(from_store)?;
    if let Start::Exact(rv) = start
        && rv != result.revision
    {
        return Err(ApiError::too_old_resource_version(rv, result.revision));
    }
    let resource_version = token.as_ref().map_or(result.revision, |t| t.rv);
    let continue_token = result.continue_after.map(|(ns, name)| {
        ContinueToken {
            rv: resource_version,
            ns,
            name,
        }
        .encode()
    });
    // A big JSON list streams; a small one goes whole, with its length.
    let stored: usize = result.items.iter().map(|o| o.value.len()).sum();
    if output == Output::Json && stored >= STREAM_LIST_BYTES {
        let body = render::json_list_body(
            info,
            result.items,
            resource_version,
            continue_token.as_deref(),
        );
        return Ok(render::body_response(StatusCode::OK, render::JSON, body));
    }
    let page = Page {
        items: &result.items,
        resource_version,
        continue_token,
    };
    let list = |output| render::list(info, output, read.include_object, &page);
    let (output, body) = with_json_fallback(output, list)?;
    Ok(render::bytes_response(
        StatusCode::OK,
        output.media_type(),
        render::body_of(output, body),
    ))
}

/// Every object the selectors pick (no paging), with the snapshot revision.
pub(crate) async fn select_all(
    api: &crate::Api,
    info: &ResourceInfo,
    namespace: Option<&str>,
    name: Option<&str>,
    read: &ReadParams,
) -> Result<objstore::ListResult, ApiError> {
    let filter = select::filter(info, namespace, name, read)?;
    let opts = ListOptions {
        resource: info.store_resource(),
        filter,
        limit: None,
        continue_after: None,
    };
    api.store.list(opts).await.map_err(from_store)
}

/// Waits (briefly) until the store has reached `rv`; a revision it does not reach is 504
/// `ResourceVersionTooLarge`, which makes client-go relist from scratch.
pub(crate) async fn wait_for_revision(store: &Store, rv: u64) -> Result<(), ApiError> {
    if reached(store, rv).await {
        Ok(())
    } else {
        Err(ApiError::too_large_resource_version(rv, store.revision()))
    }
}

/// Polls the store revision for up to [`TOO_LARGE_WAIT_SECS`].
pub(crate) async fn reached(store: &Store, rv: u64) -> bool {
    let deadline = Instant::now() + Duration::from_secs(TOO_LARGE_WAIT_SECS);
    while store.revision() < rv {
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    true
}

/// The continue token, refused when it is malformed, combined with a resourceVersion, or
/// older than the change log (410: the client relists from scratch).
fn continuation(store: &Store, read: &ReadParams) -> Result<Option<ContinueToken>, ApiError> {
    let Some(raw) = read.continue_token.as_deref() else {
        return Ok(None);
    };
    if read.revision()?.is_some() {
        return Err(ApiError::bad_request(
            "specifying resource version is not allowed when using continue",
        ));
    }
    let token = ContinueToken::decode(raw)?;
    if token.rv < store.compacted_revision() {
        return Err(ApiError::expired(
            "The provided continue parameter is too old to display a consistent list result. \
             You can start a new list without the continue parameter.",
        ));
    }
    Ok(Some(token))
}
