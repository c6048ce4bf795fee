//! Arbitrary bytes as a protobuf request body (`application/vnd.kubernetes.protobuf`): the
//! envelope, every built-in kind's message and its conversion to JSON must decode or give an
//! error, never panic or exhaust the stack; what decodes encodes again.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(value) = kpb::decode(data) {
        // Decoded objects may be any shape k8s-openapi writes; encoding them back must not
        // panic (an error is allowed: the JSON form may be one its type does not read).
        let _ = kpb::encode(value);
    }
    let _ = kpb::read_watch_frames(data);
});
