//! MTProto transport packet boundaries on the decrypted (plaintext) client stream
//! (docs/protocol.md §3.5): abridged, intermediate and padded intermediate length headers.
//!
//! Sans-IO and allocation-free on the relay path ([`next_packet`] only looks at a header).
//! It does not decrypt (`obfs2`), send WebSocket frames (`net::wslink`), or decide which routes
//! split (the relay does). [`Decoder`] buffers whole packets and is meant for tools and tests.

use std::fmt;

use crate::mtproto::obfs2::Tag;
use crate::rng::Rng;

/// Largest accepted declared payload length in bytes (16 MiB); anything above is a protocol error.
pub const MAX_PACKET: usize = 1 << 24;

/// What the start of the plaintext stream says about the next packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The length header is incomplete.
    NeedMore,
    /// Total packet length in bytes, header included. The body may not have arrived yet.
    Packet(usize),
    /// Declared payload length 0: stop splitting and stream the rest as is (§3.5).
    Unsplittable,
    /// Declared payload length (bytes) above [`MAX_PACKET`].
    TooLong(usize),
}

/// Header length and declared payload length, or `None` if the header is incomplete.
/// The payload length is at most 2^31 − 1, so it fits `u32` and a 32-bit `usize`.
fn header(tag: Tag, plain: &[u8]) -> Option<(usize, u32)> {
    match tag {
        Tag::Abridged => {
            let b = *plain.first()?;
            if b & 0x7f != 0x7f {
                Some((1, u32::from(b & 0x7f) * 4))
            } else {
                let h = plain.get(..4)?;
                Some((4, u32::from_le_bytes([h[1], h[2], h[3], 0]) * 4))
            }
        }
        Tag::Intermediate | Tag::PaddedIntermediate => {
            let h = plain.get(..4)?;
            // The top bit is the quick-ack flag (§3.5), not part of the length.
            Some((
                4,
                u32::from_le_bytes([h[0], h[1], h[2], h[3]]) & 0x7fff_ffff,
            ))
        }
    }
}

/// Classifies the packet starting at `plain[0]` for transport `tag` (§3.5). Pure; never panics.
/// abridged: 1-byte header `b` → payload `(b & 0x7f) × 4`, or `b & 0x7f == 0x7f` → 3-byte LE
/// length × 4 after it; intermediate/padded: 4-byte LE length with the quick-ack bit masked.
pub fn next_packet(tag: Tag, plain: &[u8]) -> Step {
    let Some((hdr, len)) = header(tag, plain) else {
        return Step::NeedMore;
    };
    if len == 0 {
        return Step::Unsplittable;
    }
    // Compare in u32 before converting: MAX_PACKET fits u32, len ≤ 2^31 − 1 fits any usize ≥ 32.
    if len > MAX_PACKET as u32 {
        return Step::TooLong(len as usize);
    }
    Step::Packet(hdr + len as usize)
}

/// Builds one transport packet carrying `payload` (no quick-ack bits are set).
/// abridged: short form below 0x7f words, else `0x7f` + 3-byte LE word count; the payload must be
/// a multiple of 4 bytes (MTProto messages are) — otherwise it is zero-padded up to one so the
/// stream stays framed. intermediate: 4-byte LE length. padded: 0–15 random bytes appended and
/// counted in the length. `payload` must not exceed [`MAX_PACKET`] (local invariant).
pub fn encode(tag: Tag, payload: &[u8], rng: &mut Rng) -> Vec<u8> {
    debug_assert!(
        payload.len() <= MAX_PACKET,
        "encode: payload over MAX_PACKET"
    );
    match tag {
        Tag::Abridged => {
            debug_assert!(
                payload.len() % 4 == 0,
                "abridged payload not a multiple of 4"
            );
            let words = payload.len().div_ceil(4);
            let mut out = Vec::with_capacity(4 + words * 4);
            if words < 0x7f {
                out.push(words as u8);
            } else {
                let w = (words as u32).to_le_bytes();
                out.extend_from_slice(&[0x7f, w[0], w[1], w[2]]);
            }
            out.extend_from_slice(payload);
            out.resize(out.len() + (words * 4 - payload.len()), 0);
            out
        }
        Tag::Intermediate => {
            let mut out = Vec::with_capacity(4 + payload.len());
            out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
            out.extend_from_slice(payload);
            out
        }
        Tag::PaddedIntermediate => {
            let pad = rng.below(16) as usize;
            let mut out = Vec::with_capacity(4 + payload.len() + pad);
            out.extend_from_slice(&((payload.len() + pad) as u32).to_le_bytes());
            out.extend_from_slice(payload);
            let start = out.len();
            out.resize(start + pad, 0);
            rng.fill(&mut out[start..]);
            out
        }
    }
}

/// Why a [`Decoder`] stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FramingError {
    /// Declared payload length (bytes) above [`MAX_PACKET`].
    TooLong(usize),
    /// Declared payload length 0.
    ZeroLength,
}

impl fmt::Display for FramingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FramingError::TooLong(n) => write!(f, "transport packet too long ({n} bytes)"),
            FramingError::ZeroLength => f.write_str("transport packet of length 0"),
        }
    }
}

impl std::error::Error for FramingError {}

/// Buffering packet decoder for tools and tests (the relay uses [`next_packet`] instead).
/// Errors are sticky in the sense that the offending header stays buffered.
#[derive(Debug)]
pub struct Decoder {
    tag: Tag,
    buf: Vec<u8>,
}

impl Decoder {
    pub fn new(tag: Tag) -> Decoder {
        Decoder {
            tag,
            buf: Vec::new(),
        }
    }

    /// Appends plaintext stream bytes.
    pub fn push(&mut self, data: &[u8]) {
        self.buf.extend_from_slice(data);
    }

    /// The payload of the next complete packet, without its length header, or `Ok(None)` until
    /// one has fully arrived. For padded intermediate the payload still includes the 0–15
    /// padding bytes (the header cannot tell them apart); `packet::` parsers tolerate them.
    #[allow(clippy::should_implement_trait)] // the API name is fixed; errors do not fit Iterator
    pub fn next(&mut self) -> Result<Option<Vec<u8>>, FramingError> {
        match next_packet(self.tag, &self.buf) {
            Step::NeedMore => Ok(None),
            Step::Unsplittable => Err(FramingError::ZeroLength),
            Step::TooLong(n) => Err(FramingError::TooLong(n)),
            Step::Packet(total) => {
                if self.buf.len() < total {
                    return Ok(None);
                }
                // header() succeeded inside next_packet, so it succeeds here too.
                let hdr = header(self.tag, &self.buf).map_or(0, |(h, _)| h);
                let payload = self.buf[hdr..total].to_vec();
                self.buf.drain(..total);
                Ok(Some(payload))
            }
        }
    }

    /// Bytes buffered and not yet returned.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TAGS: [Tag; 3] = [Tag::Abridged, Tag::Intermediate, Tag::PaddedIntermediate];

    #[test]
    fn abridged_short_and_long_headers() {
        let t = Tag::Abridged;
        assert_eq!(next_packet(t, &[0x01]), Step::Packet(5));
        assert_eq!(next_packet(t, &[0x7e]), Step::Packet(1 + 0x7e * 4));
        // Quick-ack bit on the short form is ignored for the length.
        assert_eq!(next_packet(t, &[0x81]), Step::Packet(5));
        assert_eq!(
            next_packet(t, &[0x7f, 0x7f, 0, 0]),
            Step::Packet(4 + 0x7f * 4)
        );
        assert_eq!(
            next_packet(t, &[0xff, 0x00, 0x01, 0x00]),
            Step::Packet(4 + 0x400)
        );
        assert_eq!(
            next_packet(t, &[0x7f, 1, 2, 3, 99]),
            Step::Packet(4 + 0x030201 * 4)
        );
        assert_eq!(next_packet(t, &[0x00]), Step::Unsplittable);
        assert_eq!(next_packet(t, &[0x80]), Step::Unsplittable);
        assert_eq!(next_packet(t, &[0x7f, 0, 0, 0]), Step::Unsplittable);
        assert_eq!(
            next_packet(t, &[0x7f, 0, 0, 0x40]),
            Step::Packet(4 + MAX_PACKET)
        );
        assert_eq!(
            next_packet(t, &[0x7f, 1, 0, 0x40]),
            Step::TooLong(MAX_PACKET + 4)
        );
        assert_eq!(
            next_packet(t, &[0x7f, 0xff, 0xff, 0xff]),
            Step::TooLong(0xff_ffff * 4)
        );
    }

    #[test]
    fn intermediate_headers() {
        for t in [Tag::Intermediate, Tag::PaddedIntermediate] {
            assert_eq!(next_packet(t, &[8, 0, 0, 0]), Step::Packet(12));
            assert_eq!(next_packet(t, &[9, 1, 0, 0x80, 5]), Step::Packet(4 + 0x109));
            assert_eq!(next_packet(t, &[0, 0, 0, 0x80]), Step::Unsplittable);
            assert_eq!(next_packet(t, &[0, 0, 0, 1]), Step::Packet(4 + MAX_PACKET));
            assert_eq!(next_packet(t, &[1, 0, 0, 1]), Step::TooLong(MAX_PACKET + 1));
            // Largest declared length: must not overflow a 32-bit usize.
            assert_eq!(
                next_packet(t, &[0xff, 0xff, 0xff, 0xff]),
                Step::TooLong(0x7fff_ffff)
            );
        }
    }

    #[test]
    fn need_more_for_every_header_prefix() {
        assert_eq!(next_packet(Tag::Abridged, &[]), Step::NeedMore);
        for n in 1..4 {
            assert_eq!(
                next_packet(Tag::Abridged, &[0x7f, 1, 1][..n]),
                Step::NeedMore
            );
            assert_eq!(
                next_packet(Tag::Abridged, &[0xff, 1, 1][..n]),
                Step::NeedMore
            );
        }
        for t in [Tag::Intermediate, Tag::PaddedIntermediate] {
            for n in 0..4 {
                assert_eq!(next_packet(t, &[4, 0, 0][..n]), Step::NeedMore);
            }
        }
    }

    #[test]
    fn encode_headers() {
        let mut rng = Rng::from_seed([1; 48]);
        let p = encode(Tag::Abridged, &[0u8; 0x7e * 4], &mut rng);
        assert_eq!(p[0], 0x7e);
        assert_eq!(p.len(), 1 + 0x7e * 4);
        let p = encode(Tag::Abridged, &[0u8; 0x7f * 4], &mut rng);
        assert_eq!(&p[..4], &[0x7f, 0x7f, 0, 0]);
        assert_eq!(p.len(), 4 + 0x7f * 4);
        let p = encode(Tag::Intermediate, &[5u8; 13], &mut rng);
        assert_eq!(&p[..4], &[13, 0, 0, 0]);
        assert_eq!(&p[4..], &[5u8; 13]);
        let mut pads = [false; 16];
        for _ in 0..400 {
            let p = encode(Tag::PaddedIntermediate, &[5u8; 8], &mut rng);
            let len = u32::from_le_bytes([p[0], p[1], p[2], p[3]]) as usize;
            assert_eq!(len + 4, p.len());
            assert!((8..=23).contains(&len));
            assert_eq!(&p[4..12], &[5u8; 8]);
            pads[len - 8] = true;
        }
        assert!(
            pads.iter().all(|&x| x),
            "every padding length 0..=15 occurs"
        );
    }

    #[test]
    fn encode_decoder_round_trip() {
        let mut rng = Rng::from_seed([2; 48]);
        let lens = [4usize, 8, 0x7e * 4, 0x7f * 4, 0x80 * 4, 4096, 100_000];
        for tag in TAGS {
            let mut stream = Vec::new();
            for (i, &n) in lens.iter().enumerate() {
                stream.extend(encode(tag, &vec![i as u8 + 1; n], &mut rng));
            }
            let mut dec = Decoder::new(tag);
            let mut got = Vec::new();
            // Feed in awkward chunk sizes.
            for chunk in stream.chunks(1000 + 7) {
                dec.push(chunk);
                while let Some(p) = dec.next().unwrap() {
                    got.push(p);
                }
            }
            assert_eq!(got.len(), lens.len(), "{tag:?}");
            for (i, p) in got.iter().enumerate() {
                assert!(p.len() >= lens[i] && p.len() <= lens[i] + 15);
                assert!(p[..lens[i]].iter().all(|&b| b == i as u8 + 1));
                if tag != Tag::PaddedIntermediate {
                    assert_eq!(p.len(), lens[i]);
                }
            }
            assert_eq!(dec.buffered(), 0);
        }
    }

    #[test]
    fn encode_abridged_pads_unaligned_payload_in_release() {
        if cfg!(debug_assertions) {
            return; // the debug_assert fires by design
        }
        let mut rng = Rng::from_seed([2; 48]);
        let p = encode(Tag::Abridged, &[1, 2, 3], &mut rng);
        assert_eq!(p, vec![1, 1, 2, 3, 0]);
    }

    #[test]
    fn decoder_errors() {
        let mut d = Decoder::new(Tag::Intermediate);
        d.push(&[0, 0, 0, 0]);
        assert_eq!(d.next(), Err(FramingError::ZeroLength));
        let mut d = Decoder::new(Tag::Abridged);
        d.push(&[0x7f, 0xff, 0xff]);
        assert_eq!(d.next(), Ok(None));
        d.push(&[0xff]);
        assert_eq!(d.next(), Err(FramingError::TooLong(0xff_ffff * 4)));
        assert!(FramingError::ZeroLength.to_string().contains("length 0"));
    }

    #[test]
    fn random_bytes_never_panic() {
        let mut rng = Rng::from_seed([3; 48]);
        let mut buf = [0u8; 9];
        for _ in 0..20_000 {
            let n = rng.below(10) as usize;
            rng.fill(&mut buf[..n]);
            for tag in TAGS {
                match next_packet(tag, &buf[..n]) {
                    Step::Packet(total) => assert!(total > 1 && total <= 4 + MAX_PACKET),
                    Step::TooLong(len) => assert!(len > MAX_PACKET),
                    Step::NeedMore => assert!(n < 4),
                    Step::Unsplittable => {}
                }
            }
        }
    }
}
