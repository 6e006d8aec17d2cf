//! Transport framing (src/mtproto/framing.rs): abridged, intermediate and padded intermediate
//! length headers on the decrypted client stream.
//!
//! Input: `[mode, split seed, stream…]`; `mode % 3` picks the transport. The stream is pushed
//! into a `Decoder` in chunks (the seed picks the split) and must decode exactly as a walk of
//! `next_packet` over the whole stream says: the same packets, the same error, the rest left
//! buffered. Then an encode → decode round trip of the stream as one payload.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tg_ws_proxy::mtproto::framing::{self, Decoder, FramingError, Step, MAX_PACKET};
use tg_ws_proxy::mtproto::obfs2::Tag;
use tg_ws_proxy_fuzz::{chunks, rng_from, Input};

const TAGS: [Tag; 3] = [Tag::Abridged, Tag::Intermediate, Tag::PaddedIntermediate];

fuzz_target!(|raw: &[u8]| {
    let Some(inp) = Input::parse(raw) else { return };
    let tag = TAGS[usize::from(inp.mode) % 3];
    let data = inp.data;

    // The streaming decoder, fed in chunks.
    let mut dec = Decoder::new(tag);
    let mut got: Vec<Vec<u8>> = Vec::new();
    let mut err = None;
    'feed: for c in chunks(data, inp.seed) {
        dec.push(c);
        loop {
            match dec.next() {
                Ok(Some(p)) => got.push(p),
                Ok(None) => break,
                Err(e) => {
                    err = Some(e);
                    break 'feed;
                }
            }
        }
    }

    // The reference: next_packet over the whole stream.
    let mut at = 0;
    let mut want_err = None;
    let mut n = 0;
    loop {
        let step = framing::next_packet(tag, &data[at..]);
        match step {
            Step::NeedMore => break,
            Step::Unsplittable => {
                want_err = Some(FramingError::ZeroLength);
                break;
            }
            Step::TooLong(len) => {
                assert!(len > MAX_PACKET);
                want_err = Some(FramingError::TooLong(len));
                break;
            }
            Step::Packet(total) => {
                assert!(total >= 2, "a packet of {total} bytes with its header");
                if at + total > data.len() {
                    break;
                }
                let p = got
                    .get(n)
                    .expect("decoder returned fewer packets than the walk");
                let hdr = total - p.len();
                assert!(hdr == 1 || hdr == 4, "header of {hdr} bytes");
                assert_eq!(p.as_slice(), &data[at + hdr..at + total]);
                if tag != Tag::Abridged {
                    assert_eq!(hdr, 4);
                }
                n += 1;
                at += total;
            }
        }
    }
    assert_eq!(got.len(), n, "decoder returned more packets than the walk");
    assert_eq!(err, want_err);
    if err.is_none() {
        assert_eq!(dec.buffered(), data.len() - at);
    }

    // Round trip: the stream (cut to whole words, as MTProto payloads are) as one payload.
    let payload = &data[..data.len() / 4 * 4];
    if payload.is_empty() {
        return;
    }
    let mut rng = rng_from(&[inp.seed]);
    let wire = framing::encode(tag, payload, &mut rng);
    assert_eq!(framing::next_packet(tag, &wire), Step::Packet(wire.len()));
    let mut dec = Decoder::new(tag);
    dec.push(&wire);
    let back = dec
        .next()
        .expect("own packet decodes")
        .expect("whole packet");
    match tag {
        Tag::PaddedIntermediate => {
            assert!(back.starts_with(payload) && back.len() - payload.len() < 16);
        }
        _ => assert_eq!(back, payload),
    }
    assert_eq!(dec.buffered(), 0);
});
