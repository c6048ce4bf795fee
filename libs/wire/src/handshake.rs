//! The opening exchange: `Hello` → `Welcome` (or `Refuse`), then the first resync step.
//!
//! The cloud answers a `Hello` with [`answer_hello`]: the claimed node id must equal the one in
//! the client certificate (KubeEdge leaves that check off by default), and the two ends must
//! share a protocol version. The digest comparison decides the first resync step. The edge reads
//! the answer with [`read_welcome`].

use std::time::Duration;

use crate::digest::Digest;
use crate::error::HandshakeError;
use crate::frame::{Frame, Hello, Limits, Welcome, choose_version};

/// What the cloud knows when a `Hello` arrives.
#[derive(Clone, Debug)]
pub struct HelloCheck<'a> {
    /// The node name taken from the verified client certificate.
    pub certified_node_id: &'a str,
    /// Protocol versions the cloud speaks, best first.
    pub supported: &'a [u16],
    /// The id for the new session.
    pub session_id: u64,
    /// What the cloud accepts.
    pub limits: Limits,
    /// The digest of what this node should hold.
    pub desired_digest: Digest,
}

/// A `Hello` the cloud accepts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Accepted {
    /// The frame to send first.
    pub welcome: Welcome,
    /// The first resync step, sent right after the welcome.
    pub resync: ResyncStart,
}

/// How the resync starts, from the digest comparison.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResyncStart {
    /// Digests are equal: send `ResyncDone { 0, 0 }`, nothing to do.
    UpToDate,
    /// Digests differ: send `InventoryRequest`.
    NeedInventory,
}

/// Checks a `Hello` and builds the answer.
pub fn answer_hello(hello: &Hello, check: &HelloCheck<'_>) -> Result<Accepted, HandshakeError> {
    if hello.node_id != check.certified_node_id {
        return Err(HandshakeError::NodeMismatch {
            claimed: hello.node_id.clone(),
            certified: check.certified_node_id.to_owned(),
        });
    }
    let protocol_version =
        choose_version(&hello.protocol_versions, check.supported).ok_or_else(|| {
            HandshakeError::NoCommonVersion {
                offered: hello.protocol_versions.clone(),
            }
        })?;
    let welcome = Welcome {
        protocol_version,
        session_id: check.session_id,
        limits: check.limits,
    };
    let resync = if hello.inventory_digest == check.desired_digest {
        ResyncStart::UpToDate
    } else {
        ResyncStart::NeedInventory
    };
    Ok(Accepted { welcome, resync })
}

/// Reads the cloud's answer to our `Hello` (which offered `offered`).
pub fn read_welcome(frame: Frame, offered: &[u16]) -> Result<Welcome, HandshakeError> {
    match frame {
        Frame::Welcome(w) if offered.contains(&w.protocol_version) => Ok(w),
        Frame::Welcome(w) => Err(HandshakeError::NoCommonVersion {
            offered: vec![w.protocol_version],
        }),
        Frame::Refuse {
            reason,
            retry_after_ms,
        } => Err(HandshakeError::Refused {
            reason,
            retry_after: retry_after_ms.map(|ms| Duration::from_millis(u64::from(ms))),
        }),
        other => Err(HandshakeError::Unexpected { kind: other.kind() }),
    }
}

// === impl ResyncStart ===

impl ResyncStart {
    /// The frame that starts the resync.
    pub fn frame(self) -> Frame {
        match self {
            ResyncStart::UpToDate => Frame::ResyncDone {
                upserts: 0,
                deletes: 0,
            },
            ResyncStart::NeedInventory => Frame::InventoryRequest,
        }
    }
}

// === impl HandshakeError ===

impl HandshakeError {
    /// The `Refuse` frame telling the edge why (for errors the cloud detects).
    pub fn to_refuse(&self) -> Frame {
        Frame::Refuse {
            reason: self.to_string(),
            retry_after_ms: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::digest::digest;
    use crate::frame::PROTOCOL_VERSION;

    fn hello(node: &str, digest: Digest) -> Hello {
        Hello {
            protocol_versions: vec![PROTOCOL_VERSION],
            node_id: node.into(),
            inventory_digest: digest,
            limits: Limits::default(),
            resume: None,
        }
    }

    fn check(desired: Digest) -> HelloCheck<'static> {
        HelloCheck {
            certified_node_id: "edge-1",
            supported: &[PROTOCOL_VERSION],
            session_id: 7,
            limits: Limits::default(),
            desired_digest: desired,
        }
    }

    #[test]
    fn equal_digests_need_no_inventory() {
        let d = digest([("pod/default/a", "1")]);
        let accepted = answer_hello(&hello("edge-1", d), &check(d)).unwrap();
        assert_eq!(accepted.resync, ResyncStart::UpToDate);
        assert_eq!(
            accepted.resync.frame(),
            Frame::ResyncDone {
                upserts: 0,
                deletes: 0
            }
        );
        assert_eq!(accepted.welcome.session_id, 7);
    }

    #[test]
    fn different_digests_ask_for_the_inventory() {
        let accepted = answer_hello(
            &hello("edge-1", Digest::EMPTY),
            &check(digest([("k", "1")])),
        );
        assert_eq!(accepted.unwrap().resync.frame(), Frame::InventoryRequest);
    }

    #[test]
    fn node_cannot_claim_another_name_than_its_certificate() {
        let err = answer_hello(&hello("edge-2", Digest::EMPTY), &check(Digest::EMPTY)).unwrap_err();
        assert!(matches!(err, HandshakeError::NodeMismatch { .. }));
        assert!(
            matches!(err.to_refuse(), Frame::Refuse { reason, .. } if reason.contains("edge-2"))
        );
    }

    #[test]
    fn no_common_version_is_refused() {
        let mut h = hello("edge-1", Digest::EMPTY);
        h.protocol_versions = vec![99];
        let err = answer_hello(&h, &check(Digest::EMPTY)).unwrap_err();
        assert_eq!(err, HandshakeError::NoCommonVersion { offered: vec![99] });
    }

    #[test]
    fn edge_reads_refusal_with_retry_hint() {
        let refuse = Frame::Refuse {
            reason: "busy".into(),
            retry_after_ms: Some(1500),
        };
        let err = read_welcome(refuse, &[PROTOCOL_VERSION]).unwrap_err();
        assert_eq!(
            err,
            HandshakeError::Refused {
                reason: "busy".into(),
                retry_after: Some(Duration::from_millis(1500))
            }
        );
    }

    #[test]
    fn edge_rejects_a_version_it_did_not_offer() {
        let welcome = Welcome {
            protocol_version: 9,
            session_id: 1,
            limits: Limits::default(),
        };
        assert!(read_welcome(Frame::Welcome(welcome), &[1]).is_err());
        assert!(matches!(
            read_welcome(Frame::Ping { nonce: 1 }, &[1]),
            Err(HandshakeError::Unexpected { kind: "ping" })
        ));
    }
}
