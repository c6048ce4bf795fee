//! The link transports over real sockets on 127.0.0.1, with real TLS and certificates made at
//! test time.

mod common;
mod garbage;
mod identity;
mod proxy;
mod roundtrip;
mod timeouts;
mod tunnels;
