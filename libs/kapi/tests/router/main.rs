//! Router tests over `oneshot`: discovery and OpenAPI, get/list, watch streams, writes (with a
//! test backend, and end to end with the local backend).

#[path = "../support/mod.rs"]
mod support;

mod discovery;
mod list;
mod list_bodies;
mod local;
mod protobuf;
mod proxy;
mod sizes;
mod surface;
mod validation;
mod watch;
mod writes;
