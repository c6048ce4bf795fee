//! Integration tests of the object store on real SQLite files in temp dirs.

mod common;
mod corrupt;
mod crash;
mod inventory;
mod outbox;
mod store;
mod watch;
