//! Arbitrary bytes into the frame decoder: it must return, never panic, and anything it accepts
//! must encode back to bytes that decode to the same frame.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(frame) = wire::decode(data, wire::DEFAULT_MAX_FRAME) {
        let again = wire::decode(&wire::encode(&frame), wire::DEFAULT_MAX_FRAME);
        assert_eq!(again.ok(), Some(frame));
    }
});
