//! Router tests over `oneshot`: discovery and OpenAPI, get/list, watch streams, writes.

#[path = "../support/mod.rs"]
mod support;

mod discovery;
mod list;
mod watch;
mod writes;
