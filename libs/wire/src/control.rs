//! The protocol between cloudhub and the controller module (edgecontroller), as beehive
//! [`Message`]s inside the cloud.
//!
//! Every resource on this path is scoped to one node ([`NodeResource`]): `node/<node>` or
//! `node/<node>/<rest>`, with a non-empty node name.
//!
//! | message | resource | operation | content | answer content |
//! |---|---|---|---|---|
//! | [`ToController::Digest`] | `node/<node>/digest` | `query` | none | the 16-byte big-endian [`Digest`] of what the node should hold ([`digest_answer`]) |
//! | [`ToController::Resync`] | `node/<node>/resync` | `query` | msgpack `Vec<(key, resourceVersion)>`: what the edge holds | msgpack `Vec<Message>`: the upserts and deletes that bring the edge to what it should hold ([`resync_answer`]) |
//! | [`ToController::Connected`] | `node/<node>` | `connected` | none | none (an event) |
//! | [`ToController::Disconnected`] | `node/<node>` | `disconnected` | none | none (an event) |
//! | downstream object | `node/<node>/<namespace>/<resource>/<name>` | `update` / `delete` | the object / its identity | none |
//! | upstream message | `node/<node>/<resource as the edge sent it>` | any | as the edge sent it | the answer, resource as sent |
//!
//! Keys are [`ObjectRef::key`](crate::ObjectRef::key) strings and downstream object resources
//! [`ObjectRef::message_resource`](crate::ObjectRef::message_resource) strings, behind the
//! `node/<node>/` prefix.

use std::fmt;

use beehive::{Message, Operation};

use crate::digest::Digest;
use crate::error::{ControlError, ResourceError};
use crate::resync::Inventory;

/// A resource scoped to one node: `node/<node>` or `node/<node>/<rest>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeResource<'a> {
    /// Never empty when parsed.
    pub node: &'a str,
    /// What follows `node/<node>/`; `None` for the bare `node/<node>`.
    pub rest: Option<&'a str>,
}

/// What cloudhub asks or tells the controller about one node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToController {
    /// What is the digest of what `node` should hold? Asked when the node's session opens.
    Digest { node: String },
    /// `node` holds `held` (key → resourceVersion): which messages bring it to what it should
    /// hold?
    Resync { node: String, held: Inventory },
    /// `node`'s session is up.
    Connected { node: String },
    /// `node`'s session ended (also after a digest question whose session never got up).
    Disconnected { node: String },
}

const DIGEST: &str = "digest";
const RESYNC: &str = "resync";

/// The controller's answer to [`ToController::Digest`]: the digest's 16 bytes, big-endian.
pub fn digest_answer(question: &Message, source: &str, digest: Digest) -> Message {
    question.response(source, digest.to_bytes().to_vec())
}

/// Reads the controller's answer to [`ToController::Digest`].
pub fn read_digest_answer(answer: &Message) -> Result<Digest, ControlError> {
    let bytes: [u8; 16] = answer.content[..].try_into().map_err(|_| {
        bad_content(
            answer,
            format!("a digest of {} bytes, expected 16", answer.content.len()),
        )
    })?;
    Ok(Digest::from_bytes(bytes))
}

/// The controller's answer to [`ToController::Resync`]: the messages, msgpack-encoded.
pub fn resync_answer(question: &Message, source: &str, diff: &[Message]) -> Message {
    // Encoding messages into a Vec cannot fail.
    let content = rmp_serde::to_vec(diff).expect("messages encode");
    question.response(source, content)
}

/// Reads the controller's answer to [`ToController::Resync`].
pub fn read_resync_answer(answer: &Message) -> Result<Vec<Message>, ControlError> {
    rmp_serde::from_slice(&answer.content).map_err(|e| bad_content(answer, e.to_string()))
}

// === impl NodeResource ===

impl<'a> NodeResource<'a> {
    /// `node/<node>/<rest>`.
    pub fn new(node: &'a str, rest: &'a str) -> Self {
        NodeResource {
            node,
            rest: Some(rest),
        }
    }

    /// `node/<node>`.
    pub fn bare(node: &'a str) -> Self {
        NodeResource { node, rest: None }
    }

    /// Parses `node/<node>` or `node/<node>/<rest>`; refuses a missing prefix or an empty node.
    pub fn parse(resource: &'a str) -> Result<Self, ResourceError> {
        let refused = || ResourceError::NotNodeScoped(resource.to_owned());
        let scoped = resource.strip_prefix("node/").ok_or_else(refused)?;
        let parsed = match scoped.split_once('/') {
            Some((node, rest)) => NodeResource::new(node, rest),
            None => NodeResource::bare(scoped),
        };
        match parsed.node.is_empty() {
            true => Err(refused()),
            false => Ok(parsed),
        }
    }

    /// What follows `node/<node>/` (empty for the bare form).
    pub fn rest(&self) -> &'a str {
        self.rest.unwrap_or("")
    }
}

impl fmt::Display for NodeResource<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.rest {
            Some(rest) => write!(f, "node/{}/{rest}", self.node),
            None => write!(f, "node/{}", self.node),
        }
    }
}

// === impl ToController ===

impl ToController {
    /// The node it is about.
    pub fn node(&self) -> &str {
        match self {
            ToController::Digest { node }
            | ToController::Resync { node, .. }
            | ToController::Connected { node }
            | ToController::Disconnected { node } => node,
        }
    }

    /// The message that carries it, from module `source` of `group`.
    pub fn to_message(&self, source: &str, group: &str) -> Message {
        let node = self.node();
        let (resource, operation) = match self {
            ToController::Digest { .. } => (NodeResource::new(node, DIGEST), Operation::Query),
            ToController::Resync { .. } => (NodeResource::new(node, RESYNC), Operation::Query),
            ToController::Connected { .. } => (NodeResource::bare(node), Operation::Connected),
            ToController::Disconnected { .. } => {
                (NodeResource::bare(node), Operation::Disconnected)
            }
        };
        let msg = Message::new().route(source, group, resource.to_string(), operation);
        match self {
            ToController::Resync { held, .. } => msg.with_content(encode_held(held)),
            _ => msg,
        }
    }

    /// Reads a message cloudhub sent; the error names the message's resource and operation.
    pub fn from_message(msg: &Message) -> Result<ToController, ControlError> {
        let scoped =
            NodeResource::parse(msg.resource()).map_err(|_| ControlError::NotNodeScoped {
                resource: msg.resource().to_owned(),
                operation: msg.operation().clone(),
            })?;
        let node = scoped.node.to_owned();
        match (msg.operation(), scoped.rest()) {
            (Operation::Query, DIGEST) => Ok(ToController::Digest { node }),
            (Operation::Query, RESYNC) => {
                let held = decode_held(msg)?;
                Ok(ToController::Resync { node, held })
            }
            (Operation::Connected, "") => Ok(ToController::Connected { node }),
            (Operation::Disconnected, "") => Ok(ToController::Disconnected { node }),
            (operation, _) => Err(ControlError::Unknown {
                resource: msg.resource().to_owned(),
                operation: operation.clone(),
            }),
        }
    }
}

/// An inventory as msgpack `Vec<(key, resourceVersion)>`.
fn encode_held(held: &Inventory) -> Vec<u8> {
    let pairs: Vec<(&String, &String)> = held.iter().collect();
    // Encoding string pairs into a Vec cannot fail.
    rmp_serde::to_vec(&pairs).expect("an inventory encodes")
}

fn decode_held(msg: &Message) -> Result<Inventory, ControlError> {
    let pairs: Vec<(String, String)> =
        rmp_serde::from_slice(&msg.content).map_err(|e| bad_content(msg, e.to_string()))?;
    Ok(pairs.into_iter().collect())
}

fn bad_content(msg: &Message, reason: String) -> ControlError {
    ControlError::BadContent {
        resource: msg.resource().to_owned(),
        operation: msg.operation().clone(),
        reason,
    }
}

#[cfg(test)]
mod tests;
