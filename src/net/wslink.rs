//! The WebSocket link after the upgrade, as a sans-IO codec over the caller's buffers
//! (RFC 6455 §5; docs/design.md §5; docs/protocol.md §3.2, §3.5).
//!
//! ```text
//! client→front  Encoder: plain bytes ─► [frame header | masked payload]… + queued control frames
//! front→client  Decoder: frames ─► payload ranges, pings answered, close echoed (nothing after
//!               it is payload), bad frames and forbidden close codes refused
//! ```
//! Toward Telegram's front (and Cloudflare-proxied domains) every MTProto transport packet is one
//! binary message whose header carries the packet length ([`Split::Packets`]); toward a Worker,
//! whatever has arrived, up to [`MAX_STREAM_MESSAGE`] per message ([`Split::Stream`]). Payload is
//! never copied or assembled: the codec says how many of the caller's bytes belong to the current
//! frame and masks them in place; the caller applies its ciphers around that. Control frames wait
//! for a frame boundary; a Close is sent once and nothing follows it. Used by the relay
//! (`relay`) and the prober (`route::probe`). Header bytes are `wsframe`'s; no sockets here.

use std::fmt;

use crate::mtproto::framing::{self, next_packet};
use crate::mtproto::obfs2::Tag;
use crate::net::wsframe::{
    apply_mask, format_header, parse_header, FrameError, Header, Opcode, MAX_HEADER,
};
use crate::rng::Rng;

/// Largest message sent in stream mode (bytes): Cloudflare closes received messages over 1 MiB.
pub const MAX_STREAM_MESSAGE: usize = 1 << 20;

/// Largest control-frame payload in bytes (RFC 6455 §5.5).
pub const MAX_CONTROL: usize = 125;

/// Largest [`Small`]: a header plus a control-sized payload.
pub const MAX_SMALL: usize = MAX_HEADER + MAX_CONTROL;

/// Close status code we send when the client ended (RFC 6455 §7.4.1 "normal closure").
pub const CLOSE_NORMAL: u16 = 1000;

/// Close status code we send when the front broke the protocol (RFC 6455 §7.4.1).
pub const CLOSE_PROTOCOL_ERROR: u16 = 1002;

/// True if `code` may appear in a Close frame (RFC 6455 §7.4.1–§7.4.2 and the IANA registry):
/// 1000–1003, 1007–1014, and 3000–4999 (registered and private use). 1004–1006 and 1015 are
/// reserved and never sent; everything below 1000, the rest of 1000–2999 and 5000 and up are
/// invalid.
pub fn close_code_valid(code: u16) -> bool {
    matches!(code, 1000..=1003 | 1007..=1014 | 3000..=4999)
}

/// How client→front bytes are cut into binary messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Split {
    /// One MTProto transport packet (of transport `Tag`) per message.
    Packets(Tag),
    /// Whatever has arrived, up to [`MAX_STREAM_MESSAGE`] bytes per message.
    Stream,
}

/// Why the link must end (the relay reports it as a protocol error).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkError {
    /// The front sent a header that breaks RFC 6455 §5.2 / §5.5.
    Frame(FrameError),
    /// The front masked a frame (servers never mask, §5.1).
    MaskedByServer,
    /// The front sent a text frame (this link carries binary only).
    Text,
    /// The client declared a transport packet longer than `framing::MAX_PACKET` (bytes).
    PacketTooLong(usize),
    /// The front's Close breaks RFC 6455 §5.5.1 / §7.4: a status code no endpoint may send
    /// (this code; 0 for a one-byte body), or a reason that is not UTF-8. Our Close 1002
    /// (protocol error) is queued in answer.
    BadClose(u16),
}

impl fmt::Display for LinkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LinkError::Frame(e) => e.fmt(f),
            LinkError::MaskedByServer => f.write_str("ws server frame is masked"),
            LinkError::Text => f.write_str("ws text frame on a binary link"),
            LinkError::PacketTooLong(n) => write!(f, "transport packet of {n} bytes is too long"),
            LinkError::BadClose(code) => write!(f, "ws close with an invalid status ({code})"),
        }
    }
}

impl std::error::Error for LinkError {}

/// A short run of bytes to send as is: a data frame header, or a whole masked frame (control
/// frame, or a small message such as the relay init). At most [`MAX_SMALL`] bytes.
#[derive(Clone, Copy)]
pub struct Small {
    bytes: [u8; MAX_SMALL],
    len: u8,
}

impl Small {
    /// The bytes to send.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }
}

/// A control frame waiting for a frame boundary.
#[derive(Clone, Copy)]
struct Control {
    opcode: Opcode,
    payload: [u8; MAX_CONTROL],
    len: u8,
}

impl Control {
    fn new(opcode: Opcode, payload: &[u8]) -> Control {
        let len = payload.len().min(MAX_CONTROL);
        let mut c = Control {
            opcode,
            payload: [0; MAX_CONTROL],
            len: len as u8,
        };
        c.payload[..len].copy_from_slice(&payload[..len]);
        c
    }
}

/// The outgoing control slot (RFC 6455 §5.5.1: nothing after a Close).
#[derive(Clone, Copy)]
enum Slot {
    Empty,
    /// A ping or pong waits for the next frame boundary.
    Pending(Control),
    /// Our Close waits for the next frame boundary.
    Closing(Control),
    /// Our Close was handed out: the link sends nothing more.
    Closed,
}

/// What the encoder wants sent next.
pub enum Next {
    /// Send these bytes (a header or a whole small frame) before anything else.
    Frame(Small),
    /// The first `n` bytes of the input belong to the current frame: encrypt them, then pass
    /// them to [`Encoder::mask`] and send them.
    Payload(usize),
    /// Nothing to send until more input arrives (or a packet header is incomplete).
    Idle,
}

/// Client→front half: frames and masks, queues control frames (one client link per session).
pub struct Encoder {
    split: Split,
    /// Payload bytes (of the current data frame) not yet handed out.
    left: u64,
    mask: [u8; 4],
    mask_off: u64,
    slot: Slot,
}

impl Encoder {
    /// An encoder at a frame boundary with nothing queued.
    pub fn new(split: Split) -> Encoder {
        Encoder {
            split,
            left: 0,
            mask: [0; 4],
            mask_off: 0,
            slot: Slot::Empty,
        }
    }

    /// True inside a data frame whose payload has not all been handed out.
    pub fn in_frame(&self) -> bool {
        self.left > 0
    }

    /// True at a frame boundary when `plain` (non-empty) starts a transport packet whose length
    /// header is incomplete: only more input can make a frame of it. Always false in stream mode.
    pub fn header_incomplete(&self, plain: &[u8]) -> bool {
        match self.split {
            Split::Packets(tag) => {
                self.left == 0
                    && !plain.is_empty()
                    && matches!(next_packet(tag, plain), framing::Step::NeedMore)
            }
            Split::Stream => false,
        }
    }

    /// True at a frame boundary of a packet-split link: the next data frame's length comes from
    /// the next transport packet header, the only bytes of `plain` [`Encoder::next`] reads
    /// there (at most 4). Inside a frame or in stream mode only the length of `plain` counts.
    pub fn wants_header(&self) -> bool {
        self.left == 0 && matches!(self.split, Split::Packets(_))
    }

    /// Streams from here on, as a zero-length packet header makes [`Encoder::next`] do
    /// (docs/protocol.md §3.5): for a caller that read that header itself.
    pub fn unsplit(&mut self) {
        self.split = Split::Stream;
    }

    /// True once a Close was queued or sent.
    pub fn closing(&self) -> bool {
        matches!(self.slot, Slot::Closing(_) | Slot::Closed)
    }

    /// True while a control frame waits for a frame boundary.
    pub fn has_control(&self) -> bool {
        matches!(self.slot, Slot::Pending(_) | Slot::Closing(_))
    }

    /// Queues a ping with `payload` (≤ 125 bytes, longer is cut) unless a control frame is
    /// already waiting or a Close was queued.
    pub fn queue_ping(&mut self, payload: &[u8]) {
        if let Slot::Empty = self.slot {
            self.slot = Slot::Pending(Control::new(Opcode::Ping, payload));
        }
    }

    /// Queues the pong answering a ping's `payload`; it replaces an older waiting ping or pong
    /// (§5.5.3) and is dropped after a Close.
    pub fn queue_pong(&mut self, payload: &[u8]) {
        if let Slot::Empty | Slot::Pending(_) = self.slot {
            self.slot = Slot::Pending(Control::new(Opcode::Pong, payload));
        }
    }

    /// Queues our Close with status `code` (`None` = empty body), once: it replaces a waiting
    /// ping or pong, and later calls do nothing.
    pub fn queue_close(&mut self, code: Option<u16>) {
        if let Slot::Empty | Slot::Pending(_) = self.slot {
            let body = code.map(u16::to_be_bytes);
            let payload: &[u8] = match &body {
                Some(b) => b,
                None => &[],
            };
            self.slot = Slot::Closing(Control::new(Opcode::Close, payload));
        }
    }

    /// Decides what to send next given the unsent plain bytes `plain` (client-decrypted, so
    /// packet headers can be read). At a frame boundary a queued control frame goes first, then
    /// the header of the next data frame; inside a frame, payload. After our Close: `Idle`.
    ///
    /// Errors: [`LinkError::PacketTooLong`] for a declared packet over `framing::MAX_PACKET`.
    pub fn next(&mut self, plain: &[u8], rng: &mut Rng) -> Result<Next, LinkError> {
        if self.left > 0 {
            if plain.is_empty() {
                return Ok(Next::Idle);
            }
            return Ok(Next::Payload(clamp(self.left, plain.len())));
        }
        match self.slot {
            Slot::Pending(c) => {
                self.slot = Slot::Empty;
                return Ok(Next::Frame(small_frame(
                    c.opcode,
                    &c.payload[..c.len as usize],
                    rng,
                )));
            }
            Slot::Closing(c) => {
                self.slot = Slot::Closed;
                return Ok(Next::Frame(small_frame(
                    c.opcode,
                    &c.payload[..c.len as usize],
                    rng,
                )));
            }
            Slot::Closed => return Ok(Next::Idle),
            Slot::Empty => {}
        }
        if plain.is_empty() {
            return Ok(Next::Idle);
        }
        let len = loop {
            match self.split {
                Split::Stream => break plain.len().min(MAX_STREAM_MESSAGE),
                Split::Packets(tag) => match next_packet(tag, plain) {
                    framing::Step::Packet(len) => break len,
                    framing::Step::NeedMore => return Ok(Next::Idle),
                    // A zero-length header makes the stream unsplittable (§3.5): stream the rest.
                    framing::Step::Unsplittable => self.split = Split::Stream,
                    framing::Step::TooLong(n) => return Err(LinkError::PacketTooLong(n)),
                },
            }
        };
        rng.fill(&mut self.mask);
        let s = masked_header(Opcode::Binary, len as u64, self.mask);
        self.left = len as u64;
        self.mask_off = 0;
        Ok(Next::Frame(s))
    }

    /// Masks `payload` in place as the next bytes of the current frame. `payload.len()` must not
    /// exceed what [`Next::Payload`] allowed (local invariant; excess bytes are left unmasked).
    pub fn mask(&mut self, payload: &mut [u8]) {
        let n = clamp(self.left, payload.len());
        debug_assert_eq!(n, payload.len(), "wslink: payload beyond the frame");
        apply_mask(&mut payload[..n], self.mask, self.mask_off);
        self.mask_off += n as u64;
        self.left -= n as u64;
    }

    /// One whole binary message of at most [`MAX_CONTROL`] bytes (e.g. the relay init) as a
    /// [`Small`]. Only at a frame boundary (local invariant). Longer payloads are cut.
    pub fn small_message(&mut self, payload: &[u8], rng: &mut Rng) -> Small {
        debug_assert!(self.left == 0 && payload.len() <= MAX_CONTROL);
        small_frame(
            Opcode::Binary,
            &payload[..payload.len().min(MAX_CONTROL)],
            rng,
        )
    }

    /// Appends one whole masked binary message carrying `payload` to `out` (tools and the
    /// prober, whose messages are small). Only at a frame boundary (local invariant).
    pub fn push_message(&mut self, out: &mut Vec<u8>, payload: &[u8], rng: &mut Rng) {
        debug_assert_eq!(self.left, 0);
        rng.fill(&mut self.mask);
        let h = Header {
            fin: true,
            opcode: Opcode::Binary,
            mask: Some(self.mask),
            len: payload.len() as u64,
        };
        let mut hdr = [0u8; MAX_HEADER];
        let hl = format_header(&h, &mut hdr);
        out.extend_from_slice(&hdr[..hl]);
        let start = out.len();
        out.extend_from_slice(payload);
        apply_mask(&mut out[start..], self.mask, 0);
    }

    /// Appends a queued control frame, if any, to `out` (the prober's way of answering pings).
    pub fn push_control(&mut self, out: &mut Vec<u8>, rng: &mut Rng) {
        if self.left == 0 && self.has_control() {
            if let Ok(Next::Frame(s)) = self.next(&[], rng) {
                out.extend_from_slice(s.as_bytes());
            }
        }
    }
}

/// What the decoder found at the start of the input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// The first `n` input bytes are payload of a binary (or continuation) frame: the caller
    /// takes all of them.
    Payload(usize),
    /// The first `n` input bytes are a data frame header: drop them.
    Header(usize),
    /// The first `n` input bytes are a whole ping (its pong is queued) or pong: drop them.
    Control(usize),
    /// The first `n` input bytes are the front's Close with this status (0 = none given); our
    /// Close is queued in answer. Drop them.
    Closed(u16, usize),
    /// An incomplete header or control frame: wait for more bytes.
    NeedMore,
    /// The first `n` input bytes arrived after the front's Close: nothing may follow a Close
    /// (RFC 6455 §5.5.1), so they are never relayed. Drop them.
    AfterClose(usize),
}

/// Front→client half: strips data frame headers and recognises control frames.
pub struct Decoder {
    /// Payload bytes left in the current data frame.
    left: u64,
    /// The front's Close was seen: everything after it is [`Event::AfterClose`] (sticky).
    closed: bool,
}

impl Decoder {
    /// A decoder at a frame boundary.
    pub fn new() -> Decoder {
        Decoder {
            left: 0,
            closed: false,
        }
    }

    /// True inside a data frame's payload.
    pub fn in_frame(&self) -> bool {
        self.left > 0
    }

    /// Looks at the start of `input` (bytes as received from the front). Pings and closes are
    /// answered through `enc`; they may arrive between any two frames, also mid-packet.
    ///
    /// Errors: a bad header, a masked frame, a text frame, a Close with a forbidden status or a
    /// reason that is not UTF-8 (our Close 1002 is queued).
    pub fn next(&mut self, input: &[u8], enc: &mut Encoder) -> Result<Event, LinkError> {
        if self.closed {
            return Ok(match input.len() {
                0 => Event::NeedMore,
                n => Event::AfterClose(n),
            });
        }
        if self.left > 0 {
            if input.is_empty() {
                return Ok(Event::NeedMore);
            }
            let n = clamp(self.left, input.len());
            self.left -= n as u64;
            return Ok(Event::Payload(n));
        }
        let (h, hl) = match parse_header(input) {
            Err(e) => return Err(LinkError::Frame(e)),
            Ok(None) => return Ok(Event::NeedMore),
            Ok(Some(x)) => x,
        };
        if h.mask.is_some() {
            return Err(LinkError::MaskedByServer);
        }
        match h.opcode {
            Opcode::Binary | Opcode::Continuation => {
                self.left = h.len;
                Ok(Event::Header(hl))
            }
            Opcode::Text => Err(LinkError::Text),
            Opcode::Ping | Opcode::Pong | Opcode::Close => {
                let len = h.len as usize; // ≤ 125, checked by parse_header
                let Some(payload) = input.get(hl..hl + len) else {
                    return Ok(Event::NeedMore);
                };
                match h.opcode {
                    Opcode::Ping => {
                        enc.queue_pong(payload);
                        Ok(Event::Control(hl + len))
                    }
                    Opcode::Close => {
                        let code = match payload {
                            [] => None,
                            [a, b, reason @ ..] => {
                                let code = u16::from_be_bytes([*a, *b]);
                                if !close_code_valid(code) || std::str::from_utf8(reason).is_err() {
                                    enc.queue_close(Some(CLOSE_PROTOCOL_ERROR));
                                    self.closed = true;
                                    return Err(LinkError::BadClose(code));
                                }
                                Some(code)
                            }
                            [_] => {
                                enc.queue_close(Some(CLOSE_PROTOCOL_ERROR));
                                self.closed = true;
                                return Err(LinkError::BadClose(0));
                            }
                        };
                        enc.queue_close(code);
                        self.closed = true;
                        Ok(Event::Closed(code.unwrap_or(0), hl + len))
                    }
                    _ => Ok(Event::Control(hl + len)),
                }
            }
        }
    }
}

impl Default for Decoder {
    fn default() -> Decoder {
        Decoder::new()
    }
}

/// `min(left, avail)` without truncating `left` on 32-bit targets.
fn clamp(left: u64, avail: usize) -> usize {
    if left >= avail as u64 {
        avail
    } else {
        left as usize
    }
}

/// The header of a final, masked frame of `len` payload bytes (RFC 6455 §5.2), alone in a
/// [`Small`]; its payload follows, masked with `mask` from offset 0.
fn masked_header(opcode: Opcode, len: u64, mask: [u8; 4]) -> Small {
    let h = Header {
        fin: true,
        opcode,
        mask: Some(mask),
        len,
    };
    let mut hdr = [0u8; MAX_HEADER];
    let hl = format_header(&h, &mut hdr);
    let mut s = Small {
        bytes: [0; MAX_SMALL],
        len: hl as u8,
    };
    s.bytes[..hl].copy_from_slice(&hdr[..hl]);
    s
}

/// A whole masked frame with a payload of at most [`MAX_CONTROL`] bytes.
fn small_frame(opcode: Opcode, payload: &[u8], rng: &mut Rng) -> Small {
    let mut mask = [0u8; 4];
    rng.fill(&mut mask);
    let mut s = masked_header(opcode, payload.len() as u64, mask);
    let hl = s.len as usize;
    let end = hl + payload.len();
    s.bytes[hl..end].copy_from_slice(payload);
    apply_mask(&mut s.bytes[hl..end], mask, 0);
    s.len = end as u8;
    s
}

#[cfg(test)]
mod tests;
