//! Relay phase: two fixed buffers, obfuscated2 re-encryption in place, WebSocket frames
//! streamed (docs/design.md §5; docs/protocol.md §3.2, §3.5, §7.3).
//!
//! ```text
//! client ─read─► up buf: client-decrypt ─► [split packets] ─► relay-encrypt ─► mask ─► upstream
//! client ◄─write─ down buf: client-encrypt ◄─ relay-decrypt ◄─ [strip frame headers] ◄─ upstream
//! ```
//! Toward Telegram's front every MTProto transport packet becomes one binary WS message whose
//! header carries the packet length; the payload streams through the buffer as it arrives, so a
//! packet or frame of any size costs no extra memory. Backpressure is by interest: a full buffer
//! stops reads from its source. Also owns the upstream's control frames (pong for ping, the
//! keepalive ping the session asks for, close) and the ends: half-close toward the upstream
//! after client EOF, and flushing the surviving side under the linger timer. Route health is
//! never consulted here: a running session is not affected by later route state.

use mio::net::TcpStream;

use super::{Ctx, Ready, SessionInfo, Step};
use crate::buf::RelayBuf;
use crate::config::Tier;
use crate::error::CloseReason;
use crate::mtproto::dc::DcId;
use crate::mtproto::framing::{self, next_packet};
use crate::mtproto::obfs2::{self, Accepted, Cipher, Tag, INIT_LEN};
use crate::net::dial::Upstream;
use crate::net::io::{read_once, write_once, Io};
use crate::net::wsframe::{apply_mask, format_header, parse_header, Header, Opcode, MAX_HEADER};
use crate::rng::Rng;

/// Largest WS message sent in stream mode (Worker tier, or after an unsplittable packet):
/// Cloudflare closes received messages over 1 MiB.
pub const MAX_STREAM_MESSAGE: usize = 1 << 20;

/// Largest control-frame payload (RFC 6455 §5.5).
const MAX_CONTROL: usize = 125;

/// Small outgoing bytes that precede or sit between payload: a frame header, a whole control
/// frame, or the relay init.
const SMALL_CAP: usize = MAX_HEADER + INIT_LEN + MAX_CONTROL;

/// How client→upstream bytes are cut into WS messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Framing {
    /// No WebSocket: a plain byte stream.
    Raw,
    /// One transport packet per binary message (Telegram's front, CF-proxied domains).
    Packet,
    /// Whatever has arrived, up to [`MAX_STREAM_MESSAGE`] per message (Worker tier, or after a
    /// zero-length packet header made the stream unsplittable).
    Stream,
}

/// A control frame waiting for a frame boundary on the upstream side.
#[derive(Clone, Copy)]
struct Control {
    opcode: Opcode,
    payload: [u8; MAX_CONTROL],
    len: u8,
}

/// Relay state of one session.
pub struct Relay {
    upstream: Upstream,
    up_ready: Ready,
    framing: Framing,
    tag: Tag,
    client_dec: Cipher,
    client_enc: Cipher,
    relay_enc: Cipher,
    relay_dec: Cipher,
    /// Client → upstream. Unprocessed bytes are client-decrypted plaintext.
    up: RelayBuf,
    /// Upstream → client. Unprocessed bytes are as received (frames or relay ciphertext).
    down: RelayBuf,
    small: [u8; SMALL_CAP],
    small_len: usize,
    small_sent: usize,
    /// Payload bytes left in the current upstream frame (`u64::MAX` in raw mode once started).
    up_left: u64,
    up_mask: [u8; 4],
    up_mask_off: u64,
    /// Payload bytes left in the current downstream data frame.
    down_left: u64,
    control: Option<Control>,
    /// A Close was queued or sent upstream: no further control frames.
    close_out: bool,
    client_eof: bool,
    /// Set when the upstream ended; the session closes once `down` is flushed.
    up_end: Option<CloseReason>,
    /// Half-close toward upstream was sent (after client EOF).
    up_shut: bool,
    /// Linger timer wanted (one side ended; flushing the other).
    pub(super) linger: bool,
}

impl Relay {
    /// Builds the relay for a connected upstream and queues the fresh relay init
    /// (docs/protocol.md §3.1) as the first bytes (its own WS message on WS tiers).
    pub fn new(
        accepted: Accepted,
        dc: DcId,
        tier: Tier,
        upstream: Upstream,
        up: RelayBuf,
        client_eof: bool,
        ctx: &mut Ctx<'_>,
    ) -> Relay {
        let init = obfs2::initiate(accepted.tag, dc.relay_index(), None, ctx.rng);
        let framing = match (&upstream, tier) {
            (Upstream::Tcp(_), _) => Framing::Raw,
            (Upstream::Ws(_), Tier::Worker) => Framing::Stream,
            (Upstream::Ws(_), _) => Framing::Packet,
        };
        let mut r = Relay {
            upstream,
            up_ready: Ready {
                read: true,
                write: true,
            },
            framing,
            tag: accepted.tag,
            client_dec: accepted.decrypt,
            client_enc: accepted.encrypt,
            relay_enc: init.encrypt,
            relay_dec: init.decrypt,
            up,
            down: RelayBuf::new(ctx.cfg.buf_size),
            small: [0; SMALL_CAP],
            small_len: 0,
            small_sent: 0,
            up_left: 0,
            up_mask: [0; 4],
            up_mask_off: 0,
            down_left: 0,
            control: None,
            close_out: false,
            client_eof,
            up_end: None,
            up_shut: false,
            linger: false,
        };
        match r.framing {
            Framing::Raw => {
                r.small[..INIT_LEN].copy_from_slice(&init.init);
                r.small_len = INIT_LEN;
            }
            _ => {
                let mut payload = init.init;
                r.queue_frame(Opcode::Binary, &mut payload, ctx.rng);
            }
        }
        r
    }

    /// Remembers a readiness edge on the upstream socket.
    pub fn mark_upstream(&mut self, readable: bool, writable: bool) {
        self.up_ready.read |= readable;
        self.up_ready.write |= writable;
    }

    /// Reason reported if the linger deadline fires.
    pub fn linger_reason(&self) -> CloseReason {
        match self.up_end {
            Some(r) if !self.client_eof => r,
            _ => CloseReason::ClientEof,
        }
    }

    /// Best-effort goodbye on session close: a TLS close_notify toward the upstream.
    pub fn shutdown(&mut self) {
        self.upstream.shutdown();
    }

    /// Queues a WS ping (keepalive toward Cloudflare) unless a control frame is already
    /// waiting. The payload is the low 4 bytes of `now` so pongs can be told apart.
    pub fn queue_ping(&mut self, now: u64) {
        if self.framing == Framing::Raw || self.control.is_some() || self.up_end.is_some() {
            return;
        }
        let mut c = Control {
            opcode: Opcode::Ping,
            payload: [0; MAX_CONTROL],
            len: 4,
        };
        c.payload[..4].copy_from_slice(&(now as u32).to_be_bytes());
        self.queue_control(c);
    }

    /// Queues a control frame for the next upstream frame boundary. A Close wins over
    /// everything and is sent once; after it nothing else is queued (RFC 6455 §5.5.1); a newer
    /// Pong replaces an older one (§5.5.3).
    fn queue_control(&mut self, c: Control) {
        if self.close_out {
            return;
        }
        if c.opcode == Opcode::Close {
            self.close_out = true;
        }
        self.control = Some(c);
    }

    /// Queues a whole small frame (masked, as a client must) into `small`. Only called when
    /// `small` is empty and the upstream is at a frame boundary.
    fn queue_frame(&mut self, opcode: Opcode, payload: &mut [u8], rng: &mut Rng) {
        let mut mask = [0u8; 4];
        rng.fill(&mut mask);
        let h = Header {
            fin: true,
            opcode,
            mask: Some(mask),
            len: payload.len() as u64,
        };
        let mut hdr = [0u8; MAX_HEADER];
        let hl = format_header(&h, &mut hdr);
        apply_mask(payload, mask, 0);
        self.small[..hl].copy_from_slice(&hdr[..hl]);
        self.small[hl..hl + payload.len()].copy_from_slice(payload);
        self.small_len = hl + payload.len();
        self.small_sent = 0;
    }

    /// Starts a binary data frame of `len` payload bytes; the payload follows from `up`.
    fn start_data_frame(&mut self, len: usize, rng: &mut Rng) {
        rng.fill(&mut self.up_mask);
        let h = Header {
            fin: true,
            opcode: Opcode::Binary,
            mask: Some(self.up_mask),
            len: len as u64,
        };
        let mut hdr = [0u8; MAX_HEADER];
        let hl = format_header(&h, &mut hdr);
        self.small[..hl].copy_from_slice(&hdr[..hl]);
        self.small_len = hl;
        self.small_sent = 0;
        self.up_left = len as u64;
        self.up_mask_off = 0;
    }

    /// True when everything read from the client has been handed to the upstream socket and no
    /// frame is half-sent.
    fn up_flushed(&self) -> bool {
        self.up.is_empty()
            && self.small_sent == self.small_len
            && (self.framing == Framing::Raw || self.up_left == 0)
            && !self.upstream.has_backlog()
    }

    /// Client → upstream: write what is ready, then process more.
    fn pump_up(&mut self, rng: &mut Rng) -> Result<bool, CloseReason> {
        let mut progress = false;
        for _ in 0..super::PUMP_ROUNDS * 4 {
            if !self.up_ready.write {
                break;
            }
            if self.upstream.has_backlog() {
                match self.upstream.flush() {
                    Ok(true) => {}
                    Ok(false) => {
                        self.up_ready.write = false;
                        break;
                    }
                    Err(_) => return Err(CloseReason::UpstreamReset),
                }
            }
            if self.small_sent < self.small_len {
                match self
                    .upstream
                    .write(&self.small[self.small_sent..self.small_len])
                {
                    Io::Done(n) => {
                        self.small_sent += n;
                        if self.small_sent == self.small_len {
                            self.small_sent = 0;
                            self.small_len = 0;
                        }
                        progress = true;
                        continue;
                    }
                    Io::Blocked => {
                        self.up_ready.write = false;
                        break;
                    }
                    Io::Eof | Io::Failed(_) => return Err(CloseReason::UpstreamReset),
                }
            }
            if !self.up.ready().is_empty() {
                match self.upstream.write(self.up.ready()) {
                    Io::Done(n) => {
                        self.up.consume(n);
                        progress = true;
                        continue;
                    }
                    Io::Blocked => {
                        self.up_ready.write = false;
                        break;
                    }
                    Io::Eof | Io::Failed(_) => return Err(CloseReason::UpstreamReset),
                }
            }
            // Nothing waiting: process more plaintext.
            let avail = self.up.unprocessed().len();
            if self.up_left > 0 && avail > 0 {
                let n = if self.up_left >= avail as u64 {
                    avail
                } else {
                    self.up_left as usize
                };
                let region = self.up.unprocessed_mut(n);
                self.relay_enc.apply(region);
                if self.framing != Framing::Raw {
                    apply_mask(region, self.up_mask, self.up_mask_off);
                    self.up_mask_off += n as u64;
                    self.up_left -= n as u64;
                }
                self.up.advance(n);
                progress = true;
                continue;
            }
            if self.up_left == 0 {
                if let Some(mut c) = self.control.take() {
                    let len = c.len as usize;
                    self.queue_frame(c.opcode, &mut c.payload[..len], rng);
                    progress = true;
                    continue;
                }
                if avail == 0 {
                    break;
                }
                match self.framing {
                    Framing::Raw => self.up_left = u64::MAX,
                    Framing::Stream => self.start_data_frame(avail.min(MAX_STREAM_MESSAGE), rng),
                    Framing::Packet => match next_packet(self.tag, self.up.unprocessed()) {
                        framing::Step::Packet(len) => self.start_data_frame(len, rng),
                        framing::Step::NeedMore => break,
                        framing::Step::Unsplittable => self.framing = Framing::Stream,
                        framing::Step::TooLong(_) => return Err(CloseReason::ProtocolError),
                    },
                }
                progress = true;
                continue;
            }
            break;
        }
        Ok(progress)
    }

    /// Upstream → client: write what is ready, then process more (strip frame headers, answer
    /// control frames, re-encrypt payload).
    fn pump_down(
        &mut self,
        client: &mut TcpStream,
        client_ready: &mut Ready,
        info: &mut SessionInfo,
        now: u64,
    ) -> Result<bool, CloseReason> {
        let mut progress = false;
        for _ in 0..super::PUMP_ROUNDS * 4 {
            if !self.down.ready().is_empty() {
                if !client_ready.write {
                    break;
                }
                match write_once(client, self.down.ready()) {
                    Io::Done(n) => {
                        self.down.consume(n);
                        info.first_down_ms.get_or_insert(now);
                        progress = true;
                        continue;
                    }
                    Io::Blocked => {
                        client_ready.write = false;
                        break;
                    }
                    Io::Eof => return Err(CloseReason::ClientEof),
                    Io::Failed(_) => return Err(CloseReason::ClientReset),
                }
            }
            let avail = self.down.unprocessed().len();
            if avail == 0 {
                break;
            }
            if self.framing == Framing::Raw || self.down_left > 0 {
                let n = if self.framing == Framing::Raw || self.down_left >= avail as u64 {
                    avail
                } else {
                    self.down_left as usize
                };
                let region = self.down.unprocessed_mut(n);
                self.relay_dec.apply(region);
                self.client_enc.apply(region);
                self.down.advance(n);
                if self.framing != Framing::Raw {
                    self.down_left -= n as u64;
                }
                info.bytes_down += n as u64;
                progress = true;
                continue;
            }
            // At a frame boundary with nothing waiting: the header can be skipped in place.
            let (h, hl) = match parse_header(self.down.unprocessed()) {
                Err(_) => return Err(CloseReason::ProtocolError),
                Ok(None) => break,
                Ok(Some(x)) => x,
            };
            if h.mask.is_some() {
                return Err(CloseReason::ProtocolError); // servers never mask (RFC 6455 §5.1)
            }
            match h.opcode {
                Opcode::Binary | Opcode::Continuation => {
                    self.down.skip(hl);
                    self.down_left = h.len;
                }
                Opcode::Text => return Err(CloseReason::ProtocolError),
                Opcode::Ping | Opcode::Pong | Opcode::Close => {
                    let len = h.len as usize; // ≤ 125, checked by parse_header
                    if avail < hl + len {
                        break; // wait for the whole control frame
                    }
                    let payload = &self.down.unprocessed()[hl..hl + len];
                    match h.opcode {
                        Opcode::Ping => {
                            let mut c = Control {
                                opcode: Opcode::Pong,
                                payload: [0; MAX_CONTROL],
                                len: len as u8,
                            };
                            c.payload[..len].copy_from_slice(payload);
                            self.queue_control(c);
                        }
                        Opcode::Close => {
                            let code = if len >= 2 {
                                u16::from_be_bytes([payload[0], payload[1]])
                            } else {
                                0
                            };
                            let mut c = Control {
                                opcode: Opcode::Close,
                                payload: [0; MAX_CONTROL],
                                len: 0,
                            };
                            if len >= 2 {
                                c.payload[..2].copy_from_slice(&payload[..2]);
                                c.len = 2;
                            }
                            self.queue_control(c);
                            self.up_end.get_or_insert(CloseReason::WsClose(code));
                        }
                        _ => {}
                    }
                    self.down.skip(hl + len);
                }
            }
            progress = true;
        }
        Ok(progress)
    }

    /// One round of the relay: read both sides, pump both directions, handle ends.
    pub(super) fn step(
        &mut self,
        client: &mut TcpStream,
        client_ready: &mut Ready,
        info: &mut SessionInfo,
        now: u64,
        rng: &mut Rng,
    ) -> Step {
        let mut progress = false;
        // Client → up buffer.
        while client_ready.read && !self.client_eof && self.up_end.is_none() {
            let space = self.up.space();
            if space.is_empty() {
                break;
            }
            match read_once(client, space) {
                Io::Done(n) => {
                    self.client_dec.apply(&mut space[..n]);
                    self.up.fill(n);
                    info.bytes_up += n as u64;
                    progress = true;
                }
                Io::Blocked => client_ready.read = false,
                Io::Eof => {
                    self.client_eof = true;
                    progress = true;
                }
                Io::Failed(_) => return Step::Close(CloseReason::ClientReset),
            }
        }
        match self.pump_up(rng) {
            Ok(p) => progress |= p,
            Err(r) => return Step::Close(r),
        }
        // Upstream → down buffer.
        while self.up_ready.read && self.up_end.is_none() {
            let space = self.down.space();
            if space.is_empty() {
                break;
            }
            match self.upstream.read(space) {
                Io::Done(n) => {
                    self.down.fill(n);
                    progress = true;
                }
                Io::Blocked => self.up_ready.read = false,
                Io::Eof => {
                    self.up_end = Some(CloseReason::UpstreamEof);
                    progress = true;
                }
                Io::Failed(_) => return Step::Close(CloseReason::UpstreamReset),
            }
        }
        match self.pump_down(client, client_ready, info, now) {
            Ok(p) => progress |= p,
            Err(r) => return Step::Close(r),
        }
        // Ends.
        if let Some(up_reason) = self.up_end {
            // After the client's EOF, the upstream's close is just the answer to ours.
            let reason = if self.client_eof {
                CloseReason::ClientEof
            } else {
                up_reason
            };
            // Upstream finished: deliver what it sent (headers of a half-received frame are
            // dropped with it), then close.
            if self.down.ready().is_empty()
                && (self.down.unprocessed().is_empty() || self.down_left == 0)
            {
                return Step::Close(reason);
            }
            self.linger = true;
        } else if self.client_eof {
            if !self.up_shut && self.up_flushed() {
                self.up_shut = true;
                match &mut self.upstream {
                    Upstream::Tcp(s) => {
                        let _ = s.shutdown(std::net::Shutdown::Write);
                    }
                    Upstream::Ws(_) => {
                        self.queue_control(Control {
                            opcode: Opcode::Close,
                            payload: close_payload(1000),
                            len: 2,
                        });
                        let _ = self.pump_up(rng);
                    }
                }
                self.linger = true;
                progress = true;
            } else if !self.up_shut
                && self.up.unprocessed().is_empty()
                && self.up.ready().is_empty()
                && self.small_len == 0
                && self.framing != Framing::Raw
                && self.up_left > 0
            {
                // The client ended inside a packet: the frame can never be completed.
                return Step::Close(CloseReason::ClientEof);
            } else {
                self.linger = true;
            }
        }
        if progress {
            Step::Progress
        } else {
            Step::Wait
        }
    }
}

fn close_payload(code: u16) -> [u8; MAX_CONTROL] {
    let mut p = [0u8; MAX_CONTROL];
    p[..2].copy_from_slice(&code.to_be_bytes());
    p
}
