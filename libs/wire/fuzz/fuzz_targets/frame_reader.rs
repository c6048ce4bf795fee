//! Arbitrary bytes, pushed in arbitrary pieces, into the stream reader: it must never panic and
//! never hold more bytes than it was given.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&split, rest)) = data.split_first() else {
        return;
    };
    let mut reader = wire::FrameReader::new(64 * 1024);
    for piece in rest.chunks(usize::from(split).max(1)) {
        reader.push(piece);
        while let Ok(Some(_)) = reader.next_frame() {}
        assert!(reader.buffered() <= rest.len());
    }
});
