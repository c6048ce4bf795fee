//! The message every module exchanges: a header (identity, correlation, time), a router (who sent
//! it, where it goes, what it does to which resource) and opaque content bytes.

use std::fmt;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use smol_str::SmolStr;

/// A message: header, router and content, as in KubeEdge's model.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    pub header: Header,
    pub router: Router,
    pub content: Bytes,
}

/// Identity and correlation of a message.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Header {
    /// Unique id of this message.
    pub id: MsgId,
    /// Id of the message this one answers, set on responses.
    pub parent_id: Option<MsgId>,
    /// Milliseconds since the Unix epoch when the message was built.
    pub timestamp: i64,
    /// The resourceVersion of the object carried, if any (opaque).
    pub resource_version: Option<SmolStr>,
    /// True when the sender waits for a response (`send_sync`).
    pub sync: bool,
}

/// Where a message comes from, where it goes and what it means.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Router {
    /// The module that built the message.
    pub source: SmolStr,
    /// The module the message is addressed to, if addressed to one.
    pub destination: SmolStr,
    /// The group the message is addressed to, if addressed to a group.
    pub group: SmolStr,
    pub operation: Operation,
    /// The resource the operation applies to, e.g. `default/pod/nginx`.
    pub resource: SmolStr,
}

/// A message id: 128 bits, unique within a process run and random across runs.
///
/// The high 64 bits are drawn once per process, the low 64 bits count up, so making an id costs
/// one atomic increment instead of a random draw.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MsgId(u128);

/// What a message does. The KubeEdge operation set, plus `Other` for names this build does not
/// know (kept verbatim so they pass through).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Operation {
    Insert,
    Update,
    Patch,
    Delete,
    Query,
    Response,
    Error,
    Keepalive,
    Upload,
    Connect,
    Connected,
    Disconnected,
    Subscribe,
    Unsubscribe,
    Publish,
    Message,
    Get,
    List,
    Watch,
    Other(SmolStr),
}

// === impl Message ===

impl Message {
    /// A new message with a fresh id and the current time, no route and no content.
    pub fn new() -> Self {
        Message {
            header: Header {
                id: MsgId::next(),
                parent_id: None,
                timestamp: now_millis(),
                resource_version: None,
                sync: false,
            },
            router: Router {
                source: SmolStr::default(),
                destination: SmolStr::default(),
                group: SmolStr::default(),
                operation: Operation::Message,
                resource: SmolStr::default(),
            },
            content: Bytes::new(),
        }
    }

    /// Sets source, group, resource and operation (KubeEdge's `BuildRouter`).
    pub fn route(
        mut self,
        source: impl Into<SmolStr>,
        group: impl Into<SmolStr>,
        resource: impl Into<SmolStr>,
        operation: Operation,
    ) -> Self {
        self.router.source = source.into();
        self.router.group = group.into();
        self.router.resource = resource.into();
        self.router.operation = operation;
        self
    }

    /// Sets the destination module.
    pub fn to(mut self, destination: impl Into<SmolStr>) -> Self {
        self.router.destination = destination.into();
        self
    }

    /// Sets the content bytes.
    pub fn with_content(mut self, content: impl Into<Bytes>) -> Self {
        self.content = content.into();
        self
    }

    /// Sets the carried resourceVersion.
    pub fn with_resource_version(mut self, rv: impl Into<SmolStr>) -> Self {
        self.header.resource_version = Some(rv.into());
        self
    }

    /// A response to `self` from `source`: new id, parent set to this message's id, operation
    /// `response`, same resource and group, addressed back to the sender.
    pub fn response(&self, source: impl Into<SmolStr>, content: impl Into<Bytes>) -> Self {
        self.reply(source, Operation::Response, content)
    }

    /// Like [`Message::response`] with operation `error`.
    pub fn error_response(&self, source: impl Into<SmolStr>, content: impl Into<Bytes>) -> Self {
        self.reply(source, Operation::Error, content)
    }

    /// The id this message is a response to, if it is one.
    pub fn parent_id(&self) -> Option<MsgId> {
        self.header.parent_id
    }

    pub fn id(&self) -> MsgId {
        self.header.id
    }

    pub fn operation(&self) -> &Operation {
        &self.router.operation
    }

    pub fn resource(&self) -> &str {
        &self.router.resource
    }

    fn reply(&self, source: impl Into<SmolStr>, op: Operation, content: impl Into<Bytes>) -> Self {
        let mut m = Message::new()
            .route(
                source,
                self.router.group.clone(),
                self.router.resource.clone(),
                op,
            )
            .to(self.router.source.clone())
            .with_content(content);
        m.header.parent_id = Some(self.header.id);
        m
    }
}

impl Default for Message {
    fn default() -> Self {
        Message::new()
    }
}

// === impl MsgId ===

impl MsgId {
    /// The next id of this process.
    pub fn next() -> Self {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        static PREFIX: OnceLock<u64> = OnceLock::new();
        let prefix = *PREFIX.get_or_init(rand::random::<u64>);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        MsgId(((prefix as u128) << 64) | n as u128)
    }

    pub const fn from_u128(v: u128) -> Self {
        MsgId(v)
    }

    pub const fn as_u128(self) -> u128 {
        self.0
    }
}

impl fmt::Display for MsgId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&uuid::Uuid::from_u128(self.0), f)
    }
}

impl fmt::Debug for MsgId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl Serialize for MsgId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(&self.0.to_be_bytes())
    }
}

impl<'de> Deserialize<'de> for MsgId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = MsgId;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("16 bytes of message id")
            }
            fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<MsgId, E> {
                let raw: [u8; 16] = v
                    .try_into()
                    .map_err(|_| E::invalid_length(v.len(), &self))?;
                Ok(MsgId(u128::from_be_bytes(raw)))
            }
        }
        d.deserialize_bytes(V)
    }
}

// === impl Operation ===

impl Operation {
    pub fn as_str(&self) -> &str {
        match self {
            Operation::Insert => "insert",
            Operation::Update => "update",
            Operation::Patch => "patch",
            Operation::Delete => "delete",
            Operation::Query => "query",
            Operation::Response => "response",
            Operation::Error => "error",
            Operation::Keepalive => "keepalive",
            Operation::Upload => "upload",
            Operation::Connect => "connect",
            Operation::Connected => "connected",
            Operation::Disconnected => "disconnected",
            Operation::Subscribe => "subscribe",
            Operation::Unsubscribe => "unsubscribe",
            Operation::Publish => "publish",
            Operation::Message => "message",
            Operation::Get => "get",
            Operation::List => "list",
            Operation::Watch => "watch",
            Operation::Other(s) => s,
        }
    }

    pub fn parse(s: &str) -> Self {
        match s {
            "insert" => Operation::Insert,
            "update" => Operation::Update,
            "patch" => Operation::Patch,
            "delete" => Operation::Delete,
            "query" => Operation::Query,
            "response" => Operation::Response,
            "error" => Operation::Error,
            "keepalive" => Operation::Keepalive,
            "upload" => Operation::Upload,
            "connect" => Operation::Connect,
            "connected" => Operation::Connected,
            "disconnected" => Operation::Disconnected,
            "subscribe" => Operation::Subscribe,
            "unsubscribe" => Operation::Unsubscribe,
            "publish" => Operation::Publish,
            "message" => Operation::Message,
            "get" => Operation::Get,
            "list" => Operation::List,
            "watch" => Operation::Watch,
            other => Operation::Other(SmolStr::new(other)),
        }
    }
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Operation {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Operation {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        Ok(Operation::parse(&s))
    }
}

fn now_millis() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_unique_and_increasing_within_a_process() {
        let a = MsgId::next();
        let b = MsgId::next();
        assert_ne!(a, b);
        assert!(b > a);
        assert_eq!(a.as_u128() >> 64, b.as_u128() >> 64);
    }

    #[test]
    fn response_points_back_at_its_request() {
        let req = Message::new()
            .route("edged", "meta", "default/pod/nginx", Operation::Query)
            .to("metamanager");
        let resp = req.response("metamanager", &b"{}"[..]);
        assert_eq!(resp.parent_id(), Some(req.id()));
        assert_eq!(resp.router.destination, "edged");
        assert_eq!(resp.router.operation, Operation::Response);
        assert_eq!(resp.resource(), "default/pod/nginx");
    }

    #[test]
    fn unknown_operations_survive_parsing() {
        assert_eq!(
            Operation::parse("upgrade"),
            Operation::Other("upgrade".into())
        );
        assert_eq!(Operation::parse("upgrade").as_str(), "upgrade");
        assert_eq!(Operation::parse("insert"), Operation::Insert);
    }
}
