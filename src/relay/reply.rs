//! What comes down must be MTProto (docs/design.md §4 rule 7, docs/protocol.md §3.7): the
//! downstream's transport framing, followed on the plaintext the relay decrypts with the relay
//! keys (after the WS link stripped frame headers). Sans-IO, allocation-free, no clock.
//!
//! Two facts come out of it:
//! * **Mid-reply** ([`Replies::mid_packet`]): a reply packet has begun and not ended. A
//!   Telegram server writes each transport packet whole, so a silence inside one is the path's,
//!   not the server's thinking time: the stall watch (`stall`) uses it to tell "the client waits
//!   for the rest of a reply" from an idle session.
//! * **Not MTProto** ([`BadReply`]): a declared length of 0 or above
//!   [`crate::mtproto::framing::MAX_PACKET`], or a first reply that is no plausible answer to
//!   what the client sent: its first 8 payload bytes (the `auth_key_id`) are neither 0 (an
//!   unencrypted message such as `resPQ`) nor the `auth_key_id` of one of the client's packets
//!   so far, and it is not a transport error code (shorter than [`SHORTEST_MESSAGE`]). Random bytes pass the first check
//!   rarely and the second about once in 2^64. The relay ends such a session and the shell
//!   blames the route (`Failure::BadReply`).
//!
//! Downstream quick acks (TG docs, "Quick ack"): a server answers a client's quick-ack request
//! with a bare 4-byte token whose top bit is set: in abridged its first byte has `0x80` set (the
//! token is sent byte-swapped), in intermediate the 4-byte length word has bit 31 set. A token
//! carries no length and no payload.
//!
//! The client's packets are followed only until the first reply is judged (their headers and the
//! first 8 bytes of at most [`KEYS`] of them), so the upload path does no work after that.

use crate::mtproto::framing::MAX_PACKET;
use crate::mtproto::obfs2::Tag;

/// Distinct client `auth_key_id`s remembered before the first reply (a client may send with a
/// temporary and a permanent key).
pub const KEYS: usize = 4;

/// Reply packets shorter than this (payload bytes) are not judged: a transport error code
/// (4 bytes, with up to 15 bytes of padding in padded intermediate). The shortest message is
/// longer: `auth_key_id` 8 + `msg_key` 16 + at least one 16-byte block when encrypted, 8 + 8 +
/// 4 + its body when not.
pub const SHORTEST_MESSAGE: u32 = 24;

/// Why a downstream is not MTProto.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BadReply {
    /// A reply packet declared this payload length: 0, or above `MAX_PACKET`.
    Length(u32),
    /// The first reply's `auth_key_id` is neither 0 nor one the client used.
    FirstReply,
}

impl std::fmt::Display for BadReply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BadReply::Length(n) => write!(f, "a reply packet declared {n} bytes"),
            BadReply::FirstReply => f.write_str("the first reply answers no request"),
        }
    }
}

/// Where a packet stream parser is.
#[derive(Clone, Copy, Debug)]
enum Framing {
    /// Collecting a length header: `n` of its bytes so far in `hdr`.
    Header { hdr: [u8; 4], n: u8 },
    /// Inside a packet: `left` payload bytes to go, `seen` of it so far.
    Body { left: u32, seen: u32 },
    /// A quick-ack token: `left` bytes of it to go.
    Token { left: u8 },
    /// No longer followed (a zero-length or oversize client packet: the client streams, §3.5).
    Off,
}

impl Framing {
    const START: Framing = Framing::Header { hdr: [0; 4], n: 0 };
}

/// One step of a parser over `data`: how many bytes it took and what it found.
enum Found {
    /// Nothing complete yet (all of `data` taken).
    More,
    /// A packet header: its declared payload length (quick-ack bit masked off).
    Packet(u32),
    /// A downstream quick-ack token started.
    Token,
}

/// Header bytes a tag's header needs once its first byte is known.
fn header_len(tag: Tag, first: u8) -> u8 {
    match tag {
        Tag::Abridged if first & 0x7f == 0x7f => 4,
        Tag::Abridged => 1,
        Tag::Intermediate | Tag::PaddedIntermediate => 4,
    }
}

/// Feeds header bytes from `data` into `hdr`/`n`; returns the bytes taken and, once the
/// header is whole, what it declares. `down`: the server's direction (quick-ack tokens).
fn take_header(tag: Tag, hdr: &mut [u8; 4], n: &mut u8, data: &[u8], down: bool) -> (usize, Found) {
    let mut took = 0;
    while took < data.len() {
        hdr[*n as usize] = data[took];
        *n += 1;
        took += 1;
        if down && *n == 1 && tag == Tag::Abridged && hdr[0] & 0x80 != 0 {
            return (took, Found::Token);
        }
        if *n == header_len(tag, hdr[0]) {
            let len = match tag {
                Tag::Abridged if *n == 1 => u32::from(hdr[0] & 0x7f) * 4,
                Tag::Abridged => u32::from_le_bytes([hdr[1], hdr[2], hdr[3], 0]) * 4,
                _ => {
                    let word = u32::from_le_bytes(*hdr);
                    if down && word & 0x8000_0000 != 0 {
                        return (took, Found::Token);
                    }
                    word & 0x7fff_ffff
                }
            };
            return (took, Found::Packet(len));
        }
    }
    (took, Found::More)
}

/// The downstream's framing and the first-reply check of one session. See the module docs.
#[derive(Clone, Debug)]
pub struct Replies {
    tag: Tag,
    down: Framing,
    /// Payload bytes of the current reply packet collected for the first-reply check.
    first: [u8; 8],
    /// True until the first reply packet has been judged.
    judging: bool,
    up: Framing,
    /// The current client packet's first payload bytes.
    up_key: [u8; 8],
    keys: [[u8; 8]; KEYS],
    nkeys: usize,
    /// More distinct keys than [`KEYS`], or a client stream no longer followed: any key passes.
    keys_lost: bool,
    /// Reply packets completed.
    packets: u64,
}

impl Replies {
    /// A tracker for a session whose client speaks `tag` (the DC answers in the same framing).
    pub fn new(tag: Tag) -> Replies {
        Replies {
            tag,
            down: Framing::START,
            first: [0; 8],
            judging: true,
            up: Framing::START,
            up_key: [0; 8],
            keys: [[0; 8]; KEYS],
            nkeys: 0,
            keys_lost: false,
            packets: 0,
        }
    }

    /// True while a reply packet (or quick-ack token) has begun and not ended.
    pub fn mid_packet(&self) -> bool {
        match self.down {
            Framing::Header { n, .. } => n > 0,
            Framing::Body { .. } | Framing::Token { .. } => true,
            Framing::Off => false,
        }
    }

    /// Reply packets completed so far (quick-ack tokens not counted).
    pub fn packets(&self) -> u64 {
        self.packets
    }

    /// Follows client plaintext (after client-decrypt) until the first reply is judged: the
    /// `auth_key_id`s the first reply may carry.
    pub fn client_sent(&mut self, mut plain: &[u8]) {
        while self.judging && !plain.is_empty() {
            let (took, next) = match self.up {
                Framing::Off | Framing::Token { .. } => return,
                Framing::Header { mut hdr, mut n } => {
                    let (took, found) = take_header(self.tag, &mut hdr, &mut n, plain, false);
                    let next = match found {
                        Found::Packet(len) if len == 0 || len as usize > MAX_PACKET => {
                            self.keys_lost = true;
                            Framing::Off
                        }
                        Found::Packet(len) => Framing::Body { left: len, seen: 0 },
                        Found::More | Found::Token => Framing::Header { hdr, n },
                    };
                    (took, next)
                }
                Framing::Body { left, mut seen } => {
                    let take = plain.len().min(left as usize);
                    let key_part = take.min(8usize.saturating_sub(seen as usize));
                    for &b in &plain[..key_part] {
                        self.up_key[seen as usize] = b;
                        seen += 1;
                    }
                    if key_part > 0 && seen == 8 {
                        self.note_key();
                    }
                    let left = left - take as u32;
                    let next = if left == 0 {
                        Framing::START
                    } else {
                        Framing::Body { left, seen }
                    };
                    (take, next)
                }
            };
            self.up = next;
            plain = &plain[took..];
        }
    }

    fn note_key(&mut self) {
        let k = self.up_key;
        if self.keys[..self.nkeys].contains(&k) {
            return;
        }
        if self.nkeys == KEYS {
            self.keys_lost = true;
        } else {
            self.keys[self.nkeys] = k;
            self.nkeys += 1;
        }
    }

    /// Follows reply plaintext (after relay-decrypt, WS headers stripped). `Err` once the
    /// downstream is proven not MTProto (see [`BadReply`]); the caller ends the session.
    pub fn server_sent(&mut self, mut plain: &[u8]) -> Result<(), BadReply> {
        while !plain.is_empty() {
            let (took, next) = match self.down {
                Framing::Off => return Ok(()),
                Framing::Token { left } => {
                    let take = plain.len().min(left as usize);
                    let left = left - take as u8;
                    let next = if left == 0 {
                        Framing::START
                    } else {
                        Framing::Token { left }
                    };
                    (take, next)
                }
                Framing::Header { mut hdr, mut n } => {
                    let (took, found) = take_header(self.tag, &mut hdr, &mut n, plain, true);
                    let next = match found {
                        Found::More => Framing::Header { hdr, n },
                        // Abridged tokens are 4 bytes including the first; an intermediate
                        // one was the whole header.
                        Found::Token if self.tag == Tag::Abridged => Framing::Token { left: 3 },
                        Found::Token => Framing::START,
                        Found::Packet(len) if len == 0 || len as usize > MAX_PACKET => {
                            return Err(BadReply::Length(len));
                        }
                        Found::Packet(len) => {
                            if self.judging && len < SHORTEST_MESSAGE {
                                // A transport error code (-404…, padded or not).
                                self.judging = false;
                            }
                            Framing::Body { left: len, seen: 0 }
                        }
                    };
                    (took, next)
                }
                Framing::Body { left, mut seen } => {
                    let take = plain.len().min(left as usize);
                    if self.judging {
                        let key_part = take.min(8usize.saturating_sub(seen as usize));
                        for &b in &plain[..key_part] {
                            self.first[seen as usize] = b;
                            seen += 1;
                        }
                        if seen >= 8 || take == left as usize {
                            self.judging = false;
                            if !self.plausible(seen as usize) {
                                return Err(BadReply::FirstReply);
                            }
                        }
                    }
                    let left = left - take as u32;
                    let next = if left == 0 {
                        self.packets += 1;
                        Framing::START
                    } else {
                        Framing::Body { left, seen }
                    };
                    (take, next)
                }
            };
            self.down = next;
            plain = &plain[took..];
        }
        Ok(())
    }

    /// Client bytes that can pass next without being looked at (the cheap relay follows the
    /// client's packets by decrypting only what this does not cover): everything once the
    /// first reply is judged or the stream is no longer followed, the rest of a packet's body
    /// after its first 8 bytes; 0 where a header or key byte is next.
    pub fn up_skippable(&self) -> usize {
        match self.up {
            _ if !self.judging => usize::MAX,
            Framing::Off | Framing::Token { .. } => usize::MAX,
            Framing::Body { left, seen } if seen >= 8 => left as usize,
            Framing::Body { .. } | Framing::Header { .. } => 0,
        }
    }

    /// Passes `n` client bytes (at most [`Replies::up_skippable`]) as if they were followed.
    pub fn up_skip(&mut self, n: usize) {
        if let Framing::Body { left, seen } = self.up {
            if self.judging {
                let left = left - (n as u32).min(left);
                self.up = if left == 0 {
                    Framing::START
                } else {
                    Framing::Body { left, seen }
                };
            }
        }
    }

    /// Reply bytes that can pass next without being looked at: the rest of a packet's body
    /// (once the first reply's first 8 bytes were judged) or of a quick-ack token; 0 where a
    /// header or the first reply's key bytes are next. Everything once framing is off.
    pub fn down_skippable(&self) -> usize {
        match self.down {
            Framing::Off => usize::MAX,
            Framing::Token { left } => usize::from(left),
            Framing::Body { left, .. } if !self.judging => left as usize,
            Framing::Body { .. } | Framing::Header { .. } => 0,
        }
    }

    /// Passes `n` reply bytes (at most [`Replies::down_skippable`]) as if they were followed:
    /// a body or token that ends counts as [`Replies::server_sent`] would count it.
    pub fn down_skip(&mut self, n: usize) {
        match self.down {
            Framing::Token { left } => {
                let left = left - (n.min(usize::from(left)) as u8);
                self.down = if left == 0 {
                    Framing::START
                } else {
                    Framing::Token { left }
                };
            }
            Framing::Body { left, seen } => {
                let left = left - (n as u32).min(left);
                self.down = if left == 0 {
                    self.packets += 1;
                    Framing::START
                } else {
                    Framing::Body { left, seen }
                };
            }
            Framing::Off | Framing::Header { .. } => {}
        }
    }

    /// Whether the first reply's first `n` (≤ 8) payload bytes can answer the client.
    fn plausible(&self, n: usize) -> bool {
        if n < 8 || self.keys_lost {
            return true;
        }
        let key = self.first;
        key == [0; 8] || self.keys[..self.nkeys].contains(&key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mtproto::framing::encode;
    use crate::rng::Rng;

    const TAGS: [Tag; 3] = [Tag::Abridged, Tag::Intermediate, Tag::PaddedIntermediate];

    /// A message with `auth_key_id` `key` and `len` bytes in all (a multiple of 4, ≥ 8).
    fn msg(key: u8, len: usize) -> Vec<u8> {
        let mut m = vec![key; 8];
        m.extend((8..len).map(|i| i as u8));
        m
    }

    fn rng() -> Rng {
        Rng::from_seed([7; 48])
    }

    #[test]
    fn an_echo_of_the_request_is_a_plausible_first_reply_in_every_framing() {
        for tag in TAGS {
            let mut r = Replies::new(tag);
            let req = encode(tag, &msg(0x5a, 40), &mut rng());
            r.client_sent(&req);
            let reply = encode(tag, &msg(0x5a, 1000), &mut rng());
            // Byte by byte: every split of header and key must work.
            for (i, b) in reply.iter().enumerate() {
                assert_eq!(
                    r.server_sent(std::slice::from_ref(b)),
                    Ok(()),
                    "{tag:?} {i}"
                );
                assert_eq!(r.mid_packet(), i + 1 < reply.len(), "{tag:?} {i}");
            }
            assert_eq!(r.packets(), 1);
        }
    }

    #[test]
    fn an_unencrypted_reply_and_a_transport_error_are_plausible() {
        for tag in TAGS {
            let mut r = Replies::new(tag);
            r.client_sent(&encode(tag, &msg(0, 40), &mut rng()));
            assert_eq!(r.server_sent(&encode(tag, &msg(0, 84), &mut rng())), Ok(()));
            // A client with a key the DC does not know gets -404 (4 bytes).
            let mut r = Replies::new(tag);
            r.client_sent(&encode(tag, &msg(9, 40), &mut rng()));
            let err = (-404i32).to_le_bytes();
            assert_eq!(r.server_sent(&encode(tag, &err, &mut rng())), Ok(()));
            assert!(!r.mid_packet() || tag == Tag::PaddedIntermediate);
        }
    }

    #[test]
    fn a_first_reply_with_a_key_the_client_never_used_is_not_mtproto() {
        for tag in TAGS {
            let mut r = Replies::new(tag);
            r.client_sent(&encode(tag, &msg(1, 40), &mut rng()));
            r.client_sent(&encode(tag, &msg(2, 40), &mut rng()));
            let mut ok = r.clone();
            assert_eq!(
                ok.server_sent(&encode(tag, &msg(2, 64), &mut rng())),
                Ok(())
            );
            assert_eq!(
                r.server_sent(&encode(tag, &msg(3, 64), &mut rng())),
                Err(BadReply::FirstReply),
                "{tag:?}"
            );
        }
    }

    #[test]
    fn only_the_first_reply_is_judged() {
        let tag = Tag::Intermediate;
        let mut r = Replies::new(tag);
        r.client_sent(&encode(tag, &msg(1, 40), &mut rng()));
        assert_eq!(r.server_sent(&encode(tag, &msg(1, 40), &mut rng())), Ok(()));
        // Later packets: any content (server pushes use the key, but their bytes are not read).
        r.client_sent(&encode(tag, &msg(7, 40), &mut rng()));
        assert_eq!(r.server_sent(&encode(tag, &msg(8, 40), &mut rng())), Ok(()));
        assert_eq!(r.packets(), 2);
    }

    #[test]
    fn lengths_out_of_bounds_are_not_mtproto() {
        let mut r = Replies::new(Tag::Intermediate);
        assert_eq!(r.server_sent(&[0, 0, 0, 0]), Err(BadReply::Length(0)));
        let mut r = Replies::new(Tag::Intermediate);
        let big = (MAX_PACKET as u32 + 4).to_le_bytes();
        assert_eq!(
            r.server_sent(&big),
            Err(BadReply::Length(MAX_PACKET as u32 + 4))
        );
        let mut r = Replies::new(Tag::Abridged);
        assert_eq!(r.server_sent(&[0x00]), Err(BadReply::Length(0)));
        let mut r = Replies::new(Tag::Abridged);
        assert_eq!(
            r.server_sent(&[0x7f, 0xff, 0xff, 0xff]),
            Err(BadReply::Length(0xff_ffff * 4))
        );
    }

    #[test]
    fn quick_ack_tokens_carry_no_length() {
        // Abridged: 4 bytes, the first with 0x80 set; intermediate: bit 31 of the word.
        let mut r = Replies::new(Tag::Abridged);
        r.client_sent(&encode(Tag::Abridged, &msg(1, 40), &mut rng()));
        assert_eq!(r.server_sent(&[0x80 | 0x12, 0x34]), Ok(()));
        assert!(r.mid_packet(), "half a token");
        assert_eq!(r.server_sent(&[0x56, 0x78]), Ok(()));
        assert!(!r.mid_packet());
        assert_eq!(r.packets(), 0);
        assert_eq!(
            r.server_sent(&encode(Tag::Abridged, &msg(1, 40), &mut rng())),
            Ok(())
        );
        let mut r = Replies::new(Tag::Intermediate);
        r.client_sent(&encode(Tag::Intermediate, &msg(1, 40), &mut rng()));
        assert_eq!(r.server_sent(&[1, 2, 3, 0x80]), Ok(()));
        assert!(!r.mid_packet());
        assert_eq!(
            r.server_sent(&encode(Tag::Intermediate, &msg(1, 40), &mut rng())),
            Ok(())
        );
    }

    #[test]
    fn random_downstream_bytes_are_caught_and_never_panic() {
        let mut rng = rng();
        let mut caught = [0usize; 3];
        for round in 0..300 {
            for (t, tag) in TAGS.into_iter().enumerate() {
                let mut r = Replies::new(tag);
                r.client_sent(&encode(tag, &msg(round as u8 | 1, 40), &mut rng));
                let mut junk = vec![0u8; 16 * 1024];
                rng.fill(&mut junk);
                let mut bad = false;
                for chunk in junk.chunks(1 + round % 700) {
                    if r.server_sent(chunk).is_err() {
                        bad = true;
                        break;
                    }
                }
                caught[t] += usize::from(bad);
            }
        }
        // Everything but the rare junk whose first packet is as short as an error code.
        for (t, &n) in caught.iter().enumerate() {
            assert!(n >= 290, "{:?}: {n} of 300 caught", TAGS[t]);
        }
    }

    #[test]
    fn a_client_that_streams_unframed_lets_any_first_reply_pass() {
        let mut r = Replies::new(Tag::Intermediate);
        r.client_sent(&[0, 0, 0, 0, 1, 2, 3]);
        assert_eq!(
            r.server_sent(&encode(Tag::Intermediate, &msg(3, 40), &mut rng())),
            Ok(())
        );
    }
}
