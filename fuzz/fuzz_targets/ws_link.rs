//! The WS link codec (src/net/wslink.rs), both directions of peer bytes.
//!
//! Input: `[mode, split seed, bytes…]`. `mode` bit 0 chooses the direction:
//! * 0 — front→client: the bytes are what Telegram's front sends; `Decoder` runs over them as
//!   they arrive in chunks (the relay keeps unconsumed bytes). Every event consumes what it says
//!   and no more than it has; the payload, close codes and error must be the same for every
//!   split (the seed-0 run, the whole input at once, is the reference); a Close queues ours.
//! * 1 — client→front: the bytes are the client's decrypted stream; `Encoder` frames it
//!   (bits 1–2: abridged / intermediate / padded packets, or stream mode; bit 3: a ping queued
//!   half-way). Its output, parsed back as masked frames and unmasked, must be exactly the input
//!   it consumed, in packets-mode one frame per transport packet, with only our ping between
//!   frames.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tg_ws_proxy::mtproto::framing::{next_packet, Step};
use tg_ws_proxy::mtproto::obfs2::Tag;
use tg_ws_proxy::net::wsframe::{apply_mask, parse_header, Opcode};
use tg_ws_proxy::net::wslink::{Decoder, Encoder, Event, LinkError, Next, Split};
use tg_ws_proxy_fuzz::{chunks, rng_from, Input};

fuzz_target!(|raw: &[u8]| {
    let Some(inp) = Input::parse(raw) else { return };
    if inp.mode & 1 == 0 {
        let reference = decode(inp.data, 0);
        let split = decode(inp.data, inp.seed);
        assert_eq!(reference, split, "the split changed what the decoder saw");
    } else {
        encode(&inp);
    }
});

/// What the decoder made of a stream: payload bytes, close codes, pongs queued, the error.
#[derive(Debug, PartialEq)]
struct Seen {
    payload: Vec<u8>,
    closes: Vec<u16>,
    error: Option<LinkError>,
}

fn decode(data: &[u8], seed: u8) -> Seen {
    let mut dec = Decoder::new();
    let mut enc = Encoder::new(Split::Stream);
    let mut pending: Vec<u8> = Vec::new();
    let mut seen = Seen {
        payload: Vec::new(),
        closes: Vec::new(),
        error: None,
    };
    for c in chunks(data, seed) {
        pending.extend_from_slice(c);
        loop {
            let ev = match dec.next(&pending, &mut enc) {
                Ok(ev) => ev,
                Err(e) => {
                    seen.error = Some(e);
                    return seen;
                }
            };
            let used = match ev {
                Event::NeedMore => break,
                Event::Payload(n) => {
                    assert!(n > 0 && n <= pending.len());
                    seen.payload.extend_from_slice(&pending[..n]);
                    n
                }
                Event::Header(n) => {
                    assert!((2..=14).contains(&n) && n <= pending.len());
                    n
                }
                Event::Control(n) => {
                    assert!((2..=14 + 125).contains(&n) && n <= pending.len());
                    n
                }
                Event::Closed(code, n) => {
                    assert!((2..=14 + 125).contains(&n) && n <= pending.len());
                    assert!(enc.closing(), "a Close from the front queues ours");
                    seen.closes.push(code);
                    n
                }
                Event::AfterClose(n) => {
                    // Only after a Close, and never relayed: nothing may follow a Close.
                    assert!(!seen.closes.is_empty(), "bytes after a Close that never came");
                    assert!(n > 0 && n <= pending.len());
                    n
                }
            };
            pending.drain(..used);
        }
    }
    seen
}

const SPLITS: [Split; 4] = [
    Split::Packets(Tag::Abridged),
    Split::Packets(Tag::Intermediate),
    Split::Packets(Tag::PaddedIntermediate),
    Split::Stream,
];

fn encode(inp: &Input) {
    let split = SPLITS[usize::from(inp.mode >> 1) & 3];
    let ping_at = (inp.mode & 8 != 0).then_some(inp.data.len() / 2);
    let mut enc = Encoder::new(split);
    let mut rng = rng_from(&[inp.mode, inp.seed]);
    let mut pending: Vec<u8> = Vec::new();
    let mut fed = 0usize;
    let mut consumed = 0usize;
    let mut out: Vec<u8> = Vec::new();
    let mut failed = false;
    'feed: for c in chunks(inp.data, inp.seed) {
        pending.extend_from_slice(c);
        fed += c.len();
        if ping_at.is_some_and(|p| fed >= p && fed - c.len() < p.max(1)) {
            enc.queue_ping(b"fuzz");
        }
        loop {
            match enc.next(&pending, &mut rng) {
                Ok(Next::Idle) => break,
                Ok(Next::Frame(s)) => out.extend_from_slice(s.as_bytes()),
                Ok(Next::Payload(n)) => {
                    assert!(n > 0 && n <= pending.len());
                    let mut p: Vec<u8> = pending.drain(..n).collect();
                    enc.mask(&mut p);
                    out.extend_from_slice(&p);
                    consumed += n;
                }
                Err(LinkError::PacketTooLong(_)) => {
                    failed = true;
                    break 'feed;
                }
                Err(e) => panic!("encoder error {e:?}"),
            }
        }
    }
    // Parse our own output back as a server would.
    let mut at = 0;
    let mut back = Vec::new();
    let mut mode = split;
    while at < out.len() {
        let (h, hl) = parse_header(&out[at..])
            .expect("our frame header is valid")
            .expect("our frame header is complete");
        let mask = h.mask.expect("client frames are masked");
        assert!(h.fin);
        at += hl;
        let end = (at as u64 + h.len).min(out.len() as u64) as usize;
        let mut body = out[at..end].to_vec();
        apply_mask(&mut body, mask, 0);
        match h.opcode {
            Opcode::Ping => assert_eq!(body, b"fuzz"),
            Opcode::Binary => {
                if let Split::Packets(tag) = mode {
                    match next_packet(tag, &inp.data[back.len()..]) {
                        Step::Packet(len) => assert_eq!(h.len, len as u64),
                        Step::Unsplittable => {
                            mode = Split::Stream;
                        }
                        other => panic!("frame for a packet the walk calls {other:?}"),
                    }
                }
                back.extend_from_slice(&body);
            }
            other => panic!("unexpected {other:?} frame from the encoder"),
        }
        at = end;
    }
    assert_eq!(back.len(), consumed);
    assert_eq!(
        back.as_slice(),
        &inp.data[..consumed],
        "framing changed the bytes"
    );
    if !failed {
        assert_eq!(consumed + pending.len(), fed);
    }
}
