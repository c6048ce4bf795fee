//! The DNS-rebinding guard of a loopback listener: a request is served only when its `Host`
//! (or HTTP/2 `:authority`) names loopback (`localhost`, `127.0.0.0/8`, `::1`), as the node's
//! own components send. A web page in a browser on the edge host reaches `127.0.0.1:10550`
//! under its own domain's name, so its requests are refused with a `Status` before anything
//! reads or writes.

use std::net::IpAddr;

use apimachinery::ApiError;
use axum::extract::Request;
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// `app` serving only requests that name a loopback host.
pub(crate) fn loopback_only(app: axum::Router) -> axum::Router {
    app.layer(axum::middleware::from_fn(guard))
}

async fn guard(req: Request, next: Next) -> Response {
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .map(str::to_owned)
        .or_else(|| req.uri().authority().map(|a| a.as_str().to_owned()));
    match host.as_deref() {
        Some(host) if is_loopback_host(host) => next.run(req).await,
        named => {
            let shown = named.unwrap_or("");
            tracing::warn!(host = shown, path = %req.uri().path(), "request naming a host that is not loopback refused");
            refusal(shown)
        }
    }
}

fn refusal(host: &str) -> Response {
    let e = ApiError::new(
        403,
        "Forbidden",
        format!(
            "host {host:?} is not a loopback name: lwproxy on a loopback address serves only \
             requests to localhost, 127.0.0.0/8 or [::1]"
        ),
    );
    let code = StatusCode::from_u16(e.code).unwrap_or(StatusCode::FORBIDDEN);
    (code, axum::Json(e.to_status())).into_response()
}

/// Whether `host` (`name[:port]`, `[v6][:port]`) is a loopback name or address.
pub(crate) fn is_loopback_host(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or_default(),
        None => host.rsplit_once(':').map_or(host, |(name, port)| {
            match port.bytes().all(|b| b.is_ascii_digit()) {
                true => name,
                false => host,
            }
        }),
    };
    name.eq_ignore_ascii_case("localhost")
        || name.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_names_and_addresses_pass_and_other_hosts_do_not() {
        for ok in [
            "127.0.0.1:10550",
            "127.0.0.1",
            "127.8.9.10:1",
            "localhost:10550",
            "LOCALHOST",
            "[::1]:10550",
            "[::1]",
        ] {
            assert!(is_loopback_host(ok), "{ok}");
        }
        for bad in [
            "evil.example:10550",
            "localhost.evil.example",
            "127.0.0.1.nip.io:10550",
            "10.0.0.1:10550",
            "[::2]:1",
            "",
            "::1",
        ] {
            assert!(!is_loopback_host(bad), "{bad}");
        }
    }
}
