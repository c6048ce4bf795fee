//! Authentication in front of the REST routes: each request's user comes from its bearer token
//! (the admin token or a service-account token), else from the client certificate of its
//! connection ([`kapi::PeerCertificate`]), else anonymous; a bad token is a 401 `Status`. The
//! `Impersonate-User`/`Impersonate-Group` headers then switch to another user, if RBAC lets the
//! caller impersonate it. The connection counts under the user who authenticated (not the one
//! impersonated), and requests in flight under the user acting ([`kapi::fair_share`]: shares by
//! priority level, `429` over them). Serving itself is [`kapi::serve`].

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{Response, header};
use axum::middleware::Next;

use crate::auth::{Authenticator, user_from_cert};

/// `app` behind the authenticator.
pub(crate) fn authenticated(app: Router, auth: Arc<Authenticator>) -> Router {
    app.layer(axum::middleware::from_fn(kapi::fair_share))
        .layer(axum::middleware::from_fn_with_state(auth, authenticate))
}

async fn authenticate(
    State(auth): State<Arc<Authenticator>>,
    mut req: Request,
    next: Next,
) -> Response<Body> {
    let cert_user = req
        .extensions()
        .get::<kapi::PeerCertificate>()
        .and_then(|c| user_from_cert(&c.0));
    let authorization = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let user = match auth.user(authorization, cert_user.as_ref()).await {
        Ok(user) => {
            if let Some(connection) = req.extensions().get::<kapi::Connection>()
                && let Err(why) = connection.identify(&user)
            {
                connection.close_soon();
                return kapi::serve::too_many_requests(why, req.version(), true);
            }
            auth.acting_as(user, req.headers()).await
        }
        Err(e) => Err(e),
    };
    match user {
        Ok(user) => {
            req.extensions_mut().insert(user);
            next.run(req).await
        }
        Err(e) => status_response(&e),
    }
}

fn status_response(e: &apimachinery::ApiError) -> Response<Body> {
    // A Status always serializes.
    let body = serde_json::to_vec(&e.to_status()).expect("a Status serializes");
    Response::builder()
        .status(e.code)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body))
        .expect("a valid response")
}

/// A JSON answer with status `code` (the built-in APIs served beside kapi's routes).
pub(crate) fn json_response(
    code: axum::http::StatusCode,
    body: &serde_json::Value,
) -> Response<Body> {
    // A JSON value always serializes.
    let bytes = serde_json::to_vec(body).expect("a JSON value serializes");
    Response::builder()
        .status(code)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(bytes))
        .expect("a valid response")
}
