//! MessagePack encoding of [`Message`], prefixed by a one-byte format version.
//!
//! Layout: `[FORMAT_VERSION][msgpack(Message) as an array]`. Decoding checks the version and the
//! size before parsing, and never panics on arbitrary input.

use crate::error::DecodeError;
use crate::message::Message;

/// The format version written by this build.
pub const FORMAT_VERSION: u8 = 1;

/// Largest encoded message accepted by [`decode`] (32 MiB, KubeEdge's frame limit).
pub const MAX_ENCODED_LEN: usize = 32 << 20;

/// Encodes a message, version byte first.
pub fn encode(msg: &Message) -> Vec<u8> {
    let mut buf = Vec::with_capacity(64 + msg.content.len());
    encode_into(msg, &mut buf);
    buf
}

/// Appends the encoding of `msg` to `buf`.
pub fn encode_into(msg: &Message, buf: &mut Vec<u8>) {
    buf.push(FORMAT_VERSION);
    // Writing into a Vec cannot fail, and every field of Message is serializable.
    rmp_serde::encode::write(buf, msg).expect("encoding a Message into a Vec is infallible");
}

/// Decodes a message produced by [`encode`].
pub fn decode(bytes: &[u8]) -> Result<Message, DecodeError> {
    if bytes.len() > MAX_ENCODED_LEN {
        return Err(DecodeError::TooLarge {
            len: bytes.len(),
            max: MAX_ENCODED_LEN,
        });
    }
    let (&version, body) = bytes.split_first().ok_or(DecodeError::Empty)?;
    if version != FORMAT_VERSION {
        return Err(DecodeError::UnsupportedVersion {
            found: version,
            supported: FORMAT_VERSION,
        });
    }
    // A cursor reader grows buffers as bytes actually arrive, so a forged length cannot make
    // it allocate more than the input holds.
    let mut de = rmp_serde::Deserializer::new(std::io::Cursor::new(body));
    let msg: Message = serde::Deserialize::deserialize(&mut de).map_err(DecodeError::Malformed)?;
    let left = body.len() - de.position() as usize;
    if left != 0 {
        return Err(DecodeError::TrailingBytes { count: left });
    }
    Ok(msg)
}

#[cfg(test)]
mod tests;
