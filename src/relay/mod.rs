//! The relay core: two fixed buffers, obfuscated2 re-encryption in place, the WebSocket link
//! streamed, over any [`Endpoint`] pair (docs/design.md §5; docs/protocol.md §3.2, §3.5, §7.3).
//!
//! ```text
//! client ─read─► up buf: client-decrypt ─► [wslink: split, header] ─► relay-encrypt ─► mask ─► upstream
//! client ◄─write─ down buf: client-encrypt ◄─ relay-decrypt ◄─ [wslink: strip, ping/close] ◄─ upstream
//! ```
//! That is [`RelayMode::Reencrypt`]. A plain client has no client cipher ([`RelayMode::Plain`]);
//! a secretless direct client's own init goes upstream with its DC patched and its bytes pass
//! unchanged both ways, only packet headers decrypted from a look at the keystream
//! ([`RelayMode::PassThrough`], docs/protocol.md §1.9); the client's side and the modes are
//! `side`'s.
//! Sans-IO in the smoltcp sense: it owns no socket, reads no clock (`now` is passed in, ms) and is
//! driven by [`Relay::step`] over the two endpoints the caller holds — mio sockets in the session
//! shell (`conn::relay`), in-memory pipes in the unit tests (`tests`). Payload streams through the
//! buffers, so a packet or frame of any size costs no extra memory; a full buffer stops reads from
//! its source (backpressure). A direction whose own buffer is empty runs through the reactor's
//! one large [`Scratch`] (fewer, larger reads and writes); a WS data header is put in front of its
//! payload so both leave in one write (one TLS record, not a tiny one). Framing, masking and
//! control frames are `net::wslink`'s; the end of the session is `end`'s one state machine; the
//! replayable prefix of a session on a pooled upstream (kept until the upstream's first byte, and
//! handed back by [`Relay::rewind`]) is `replay`'s; whether what comes down is MTProto (and
//! whether a reply is half-delivered) is `reply`'s; whether the upstream stalled is `stall`'s;
//! timers, logging and route health are the shell's. This file has the types, the order of a
//! step and its ends; the data movement of a step (the reads, the two pumps, the half-close) is
//! `pump`'s.

pub mod end;
#[cfg(test)]
pub(crate) mod pipe;
mod pump;
pub mod replay;
pub mod reply;
mod scratch;
pub mod side;
pub mod stall;
#[cfg(test)]
mod tests;

use crate::buf::RelayBuf;
use crate::error::CloseReason;
use crate::mtproto::direct::patch_dc;
use crate::mtproto::obfs2::{self, Accepted, Cipher, Tag, INIT_LEN};
use crate::net::io::Endpoint;
use crate::net::wslink::{Decoder, Encoder, Split, MAX_SMALL};
use crate::rng::Rng;

use end::{End, EndAction, EndEvent};
use replay::Replay;
use reply::{BadReply, Replies};
pub use scratch::Scratch;
pub use side::{ClientSide, RelayMode};
pub use stall::StallWatch;

/// Read/process/write rounds per direction in one [`Relay::step`] before yielding.
pub const PUMP_ROUNDS: usize = 64;

/// The least free room a client read is made into while the up buffer already holds this much
/// to send (the buffer counts as full below it).
const MIN_READ: usize = 512;

/// Small outgoing bytes that precede or sit between payload: a frame header, a whole control
/// frame or small message, or the raw relay init.
const SMALL_CAP: usize = if MAX_SMALL > INIT_LEN {
    MAX_SMALL
} else {
    INIT_LEN
};

/// Readiness remembered between edges (mio is edge-triggered).
#[derive(Default, Clone, Copy, Debug)]
pub struct Ready {
    /// Readable edge seen and not yet drained to `WouldBlock`.
    pub read: bool,
    /// Writable edge seen and no `WouldBlock` since.
    pub write: bool,
}

/// Payload counters of one session, kept by the caller across phases.
#[derive(Default, Clone, Copy, Debug)]
pub struct Meter {
    /// Bytes read from the client (after the 64-byte init).
    pub bytes_up: u64,
    /// Payload bytes relayed toward the client (WS headers and control frames excluded).
    pub bytes_down: u64,
    /// When the first byte was written to the client (ms), if yet.
    pub first_down_ms: Option<u64>,
}

/// The upstream's transport, chosen by the caller from the route.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkKind {
    /// Raw obfuscated2 over TCP.
    Raw,
    /// WebSocket, one transport packet per message (Telegram's front, Cloudflare-proxied domains).
    WsPackets,
    /// WebSocket, a plain stream in messages of at most 1 MiB (a Worker).
    WsStream,
}

/// Outcome of one [`Relay::step`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Nothing more can move until an endpoint becomes ready (or a timer fires).
    Wait,
    /// Bytes moved or state changed; call again (the round cap may have been hit).
    Progress,
    /// The session is over, for this reason.
    Close(CloseReason),
}

enum Link {
    Raw,
    Ws(Encoder, Decoder),
}

/// How the downstream pump stopped.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Down {
    /// The client cannot take more now.
    Blocked,
    /// Everything that can be relayed was; what is left is an incomplete frame header or part
    /// of a control frame (or nothing).
    Starved,
    /// Round cap hit.
    Capped,
}

/// Relay state of one session (no sockets: see [`Relay::step`]).
///
/// The four ciphers by [`RelayMode`]: re-encryption uses all four as named; plain has no client
/// ciphers (`None`). Pass-through keeps the client's (`client_dec` follows the bytes read for
/// the reply check, `client_enc` waits unused for a fall-back) and uses `relay_enc` as the
/// client→DC keystream at the start of the unprocessed bytes (for packet headers) and
/// `relay_dec` as the DC→client keystream (for reply headers): the DC decrypts what the client
/// encrypted, so nothing is re-encrypted.
pub struct Relay {
    link: Link,
    mode: RelayMode,
    client_dec: Option<Cipher>,
    client_enc: Option<Cipher>,
    relay_enc: Cipher,
    relay_dec: Cipher,
    /// Client → upstream. Unprocessed bytes are client-decrypted plaintext (pass-through: the
    /// client's ciphertext as read).
    up: RelayBuf,
    /// Upstream → client. Unprocessed bytes are as received (frames or relay ciphertext).
    down: RelayBuf,
    small: [u8; SMALL_CAP],
    small_len: usize,
    small_sent: usize,
    end: End,
    /// The client's plaintext kept for a replay until the upstream's first byte (pooled
    /// upstreams only; see [`Relay::keep_replay`]).
    replay: Replay,
    /// Client bytes written to the upstream so far (WS headers included).
    up_written: u64,
    /// What [`Relay::rewind`] needs to rebuild the client's side: its init's tag, DC index and
    /// secret.
    tag: Tag,
    init_dc: i16,
    secret_index: usize,
    /// The DC index the relay init names (a fall-back's fresh init names it too).
    dc_index: i16,
    /// The downstream's framing and the first-reply check (`reply`); `None` when switched off
    /// ([`Relay::trust_replies`]).
    replies: Option<Replies>,
    /// Why the downstream was found not to be MTProto ([`CloseReason::BadReply`]).
    bad_reply: Option<BadReply>,
}

/// What [`Relay::rewind`] hands back to replay a session on a fresh upstream.
pub struct Resume {
    /// The client's side: a re-encrypting relay's client as [`ClientSide::Proxy`], its tag and
    /// ciphers advanced over everything relayed so far (the client→proxy one over every byte
    /// read; the proxy→client one untouched, since no byte went down); a plain transport's as
    /// [`ClientSide::Plain`] (no ciphers to carry).
    pub side: ClientSide,
    /// Every client byte since the start of its stream, plaintext, unprocessed: the `up` buffer
    /// of the next relay.
    pub up: RelayBuf,
    /// The client had already half-closed.
    pub client_eof: bool,
}

impl Relay {
    /// Builds the relay toward DC index `dc_index` and queues a fresh relay init
    /// (docs/protocol.md §3.1) as the first upstream bytes (its own message on a WS link).
    /// `up` may already hold client plaintext read while connecting (client-decrypted), and
    /// `client_eof` says whether the client already ended. [`Relay::with_client`] with
    /// [`ClientSide::Proxy`].
    pub fn new(
        accepted: Accepted,
        dc_index: i16,
        kind: LinkKind,
        up: RelayBuf,
        down: RelayBuf,
        client_eof: bool,
        rng: &mut Rng,
    ) -> Relay {
        let side = ClientSide::Proxy(accepted);
        Relay::with_client(side, dc_index, kind, up, down, client_eof, rng)
    }

    /// Builds the relay for any [`ClientSide`] toward DC index `dc_index` (§3.1's form):
    /// `Proxy` → [`RelayMode::Reencrypt`] with a fresh relay init, exactly [`Relay::new`];
    /// `Plain` → [`RelayMode::Plain`], a fresh relay init and no client cipher; `Direct` →
    /// [`RelayMode::PassThrough`]: the client's own init, bytes 60–61 patched to `dc_index`
    /// (`mtproto::direct::patch_dc`), goes first. Pass-through is for a fresh upstream that
    /// carries a raw MTProto transport to the DC; the relay falls back to re-encryption by itself
    /// on [`Relay::init_toward_proxy`] and on a replay ([`Relay::keep_replay`],
    /// [`Relay::arm_replay`]), and the caller can ask with [`Relay::reencrypt`].
    /// `up` holds what the client sent while connecting, as plaintext
    /// ([`ClientSide::client_read`]; a plain client's bytes after its marker).
    pub fn with_client(
        side: ClientSide,
        dc_index: i16,
        kind: LinkKind,
        mut up: RelayBuf,
        down: RelayBuf,
        client_eof: bool,
        rng: &mut Rng,
    ) -> Relay {
        let tag = side.tag();
        let mut fresh = || {
            let f = obfs2::initiate(tag, dc_index, None, rng);
            (f.init, (f.encrypt, f.decrypt))
        };
        // Pass-through only: the client→DC keystream at the start of `up` (reply check).
        let mut follow = None;
        let (mode, first, client, relay, init_dc, secret_index) = match side {
            ClientSide::Proxy(a) => {
                let (init, relay) = fresh();
                let client = (Some(a.decrypt), Some(a.encrypt));
                (
                    RelayMode::Reencrypt,
                    init,
                    client,
                    relay,
                    a.dc,
                    a.secret_index,
                )
            }
            ClientSide::Plain(_) => {
                let (init, relay) = fresh();
                (RelayMode::Plain, init, (None, None), relay, 0, 0)
            }
            ClientSide::Direct {
                mut init,
                accepted: a,
            } => match passthrough(&init) {
                // The init opened once, so it opens again; if not, re-encrypt.
                None => {
                    let (init, relay) = fresh();
                    let client = (Some(a.decrypt), Some(a.encrypt));
                    (RelayMode::Reencrypt, init, client, relay, a.dc, 0)
                }
                Some((mut to_cipher, relay)) => {
                    follow = Some(to_cipher.clone());
                    // Back to the client's ciphertext: the upstream decrypts it as sent.
                    let n = up.unprocessed().len();
                    to_cipher.apply(up.unprocessed_mut(n));
                    patch_dc(&mut init, &a, dc_index);
                    let client = (Some(a.decrypt), Some(a.encrypt));
                    (RelayMode::PassThrough, init, client, relay, a.dc, 0)
                }
            },
        };
        let link = match kind {
            LinkKind::Raw => Link::Raw,
            LinkKind::WsPackets => Link::Ws(Encoder::new(Split::Packets(tag)), Decoder::new()),
            LinkKind::WsStream => Link::Ws(Encoder::new(Split::Stream), Decoder::new()),
        };
        let mut r = Relay {
            link,
            mode,
            client_dec: client.0,
            client_enc: client.1,
            relay_enc: relay.0,
            relay_dec: relay.1,
            up,
            down,
            small: [0; SMALL_CAP],
            small_len: 0,
            small_sent: 0,
            end: End::Open,
            replay: Replay::Off,
            up_written: 0,
            tag,
            init_dc,
            secret_index,
            dc_index,
            replies: Some(Replies::new(tag)),
            bad_reply: None,
        };
        if let Some(replies) = &mut r.replies {
            if let Some(mut c) = follow {
                // Ciphertext again: followed with the keystream of its start.
                let _ = side::follow(&mut c, r.up.unprocessed(), &mut side::Up(replies));
            } else {
                replies.client_sent(r.up.unprocessed());
            }
        }
        r.queue_init(&first, rng);
        if client_eof {
            r.end = r.end.on(EndEvent::ClientEof).0;
        }
        r
    }

    /// Replaces the queued relay init, before anything went upstream, by the one a client of an
    /// upstream MTProto proxy sends (docs/protocol.md §4.4): the client's own tag, DC index
    /// `dc_index` as a client writes it (test offset kept), key and IV hashed with the proxy's
    /// secret `key`. The upstream ciphers follow the new init; nothing else changes.
    pub fn init_toward_proxy(&mut self, key: &[u8; 16], dc_index: i16, rng: &mut Rng) {
        debug_assert!(self.up_written == 0 && self.small_sent == 0);
        // An MTProto proxy needs an init keyed with its secret: never the client's own.
        self.reencrypt(rng);
        let init = obfs2::initiate(self.tag, dc_index, Some(key), rng);
        self.relay_enc = init.encrypt;
        self.relay_dec = init.decrypt;
        self.queue_init(&init.init, rng);
    }

    /// Queues `init` as the first upstream bytes (its own message on a WS link).
    fn queue_init(&mut self, init: &[u8; INIT_LEN], rng: &mut Rng) {
        match &mut self.link {
            Link::Raw => self.set_small(init),
            Link::Ws(enc, _) => {
                let s = enc.small_message(init, rng);
                self.set_small(s.as_bytes());
            }
        }
    }

    /// How this relay treats the client's bytes (for the session record).
    pub fn mode(&self) -> RelayMode {
        self.mode
    }

    /// Falls back from [`RelayMode::PassThrough`] to re-encryption before anything went
    /// upstream (a tier or start that cannot take the client's own init): a fresh relay init
    /// toward the same DC is queued instead, the client's bytes read so far are decrypted, and
    /// the relay goes on as [`Relay::new`]'s. No-op in the other modes, or once a step processed
    /// bytes (a debug assertion: call it before the first step).
    pub fn reencrypt(&mut self, rng: &mut Rng) {
        let untouched = self.up_written == 0 && self.small_sent == 0 && self.up.ready().is_empty();
        if self.mode != RelayMode::PassThrough || !untouched {
            debug_assert!(
                self.mode != RelayMode::PassThrough,
                "fall-back after a step"
            );
            return;
        }
        // `relay_enc` is the client's keystream at the start of the unprocessed bytes, and
        // nothing was processed yet (no step ran).
        let n = self.up.unprocessed().len();
        self.relay_enc.apply(self.up.unprocessed_mut(n));
        let init = obfs2::initiate(self.tag, self.dc_index, None, rng);
        self.relay_enc = init.encrypt;
        self.relay_dec = init.decrypt;
        self.mode = RelayMode::Reencrypt;
        self.queue_init(&init.init, rng);
    }

    /// Switches the downstream framing check off (`reply`): for tests that move arbitrary
    /// bytes. [`Relay::mid_reply`] is then always false.
    pub fn trust_replies(&mut self) {
        self.replies = None;
    }

    /// True while a reply packet has begun and not ended: the client waits for the rest of it
    /// (`reply`; the stall watch's strongest sign of a frozen path).
    pub fn mid_reply(&self) -> bool {
        self.replies.as_ref().is_some_and(Replies::mid_packet)
    }

    /// Reply packets completed so far (0 with the check off).
    pub fn replies(&self) -> u64 {
        self.replies.as_ref().map_or(0, Replies::packets)
    }

    /// Why the session ended with [`CloseReason::BadReply`], once it did.
    pub fn bad_reply(&self) -> Option<BadReply> {
        self.bad_reply
    }

    /// Keeps the client's plaintext for a replay until the upstream's first byte (a pooled
    /// upstream, which may be dead without a sign: docs/design.md §4 "Pools"). Call right after
    /// [`Relay::new`]. `buf` is an empty buffer with memory that bounds the prefix (`None`: none
    /// was free, so there is nothing to replay with; the wait is still tracked).
    ///
    /// Pass-through keeps none (the replay holds plaintext and would need the client's whole
    /// stream re-sent from its init): call [`Relay::reencrypt`] first on a start that may be
    /// replayed (a pooled upstream). Plain keeps one like re-encryption (its `up` is plaintext
    /// too, and a replay needs no client cipher).
    pub fn keep_replay(&mut self, buf: Option<RelayBuf>) {
        if self.mode == RelayMode::PassThrough {
            return;
        }
        self.replay = Replay::keep(buf, self.up.unprocessed());
    }

    /// [`Relay::keep_replay`] with a buffer of `scratch`'s replay pool, taken only once there
    /// is something to keep: now if client bytes were read while connecting, else with the
    /// first ones [`Relay::step`] reads (a client that sends nothing holds none).
    pub fn arm_replay(&mut self, scratch: &Scratch) {
        if self.mode == RelayMode::PassThrough {
            return;
        }
        if self.up.unprocessed().is_empty() {
            self.replay = Replay::Armed;
        } else {
            self.keep_replay(scratch.replay_buffer());
        }
    }

    /// When the wait for the upstream's first byte began (ms): `Some` on a relay that keeps a
    /// replay (or overflowed it), once client bytes went out and until the upstream speaks.
    pub fn waiting_since(&self) -> Option<u64> {
        self.replay.waiting_since()
    }

    /// True when the upstream stayed silent for `timeout_ms` since the client's first bytes went
    /// out to it, at `now` (ms).
    pub fn silent_past(&self, timeout_ms: u64, now: u64) -> bool {
        self.replay.silent_past(timeout_ms, now)
    }

    /// True while the client's bytes can still be replayed on another upstream.
    pub fn replayable(&self) -> bool {
        self.replay.replayable() && self.end.reads_upstream()
    }

    /// Gives up this relay's upstream before its first byte and hands back what a fresh one
    /// needs to carry on ([`Resume`]); buffers go back to `scratch`. `None` when the prefix
    /// cannot be replayed ([`Relay::replayable`] is false).
    pub fn rewind(mut self, scratch: &mut Scratch) -> Option<Resume> {
        if !self.replayable() {
            self.release(scratch);
            return None;
        }
        let up = self.replay.take()?;
        let client_eof = !self.end.reads_client();
        self.release(scratch);
        // Only a re-encrypting relay (both client ciphers) or a plain one keeps a replay.
        let side = match (self.mode, self.client_dec, self.client_enc) {
            (RelayMode::Plain, _, _) => ClientSide::Plain(self.tag),
            (RelayMode::Reencrypt, Some(decrypt), Some(encrypt)) => ClientSide::Proxy(Accepted {
                tag: self.tag,
                dc: self.init_dc,
                secret_index: self.secret_index,
                decrypt,
                encrypt,
            }),
            _ => return None,
        };
        Some(Resume {
            side,
            up,
            client_eof,
        })
    }

    /// The end-of-session state.
    pub fn end(&self) -> End {
        self.end
    }

    /// True once one side ended: the caller arms the linger timer.
    pub fn wants_linger(&self) -> bool {
        self.end.lingers()
    }

    /// True while upstream bytes wait for the client to take them (the client is the slow
    /// side, not the upstream: see `stall`).
    pub fn waits_on_client(&self) -> bool {
        !self.down.ready().is_empty()
    }

    /// Reason reported if the linger deadline fires.
    pub fn linger_reason(&self) -> CloseReason {
        self.end.linger_reason()
    }

    /// Queues a WS ping (keepalive toward a Worker, docs/design.md §5) unless a control frame is already waiting
    /// or the upstream ended. The payload is the low 4 bytes of `now` (ms) so pongs can be told
    /// apart. No-op on raw TCP.
    pub fn queue_ping(&mut self, now: u64) {
        if let (Link::Ws(enc, _), true) = (&mut self.link, self.end.reads_upstream()) {
            enc.queue_ping(&(now as u32).to_be_bytes());
        }
    }

    fn set_small(&mut self, bytes: &[u8]) {
        self.small[..bytes.len()].copy_from_slice(bytes);
        self.small_len = bytes.len();
        self.small_sent = 0;
    }

    /// True when everything read from the client has been handed to the upstream endpoint and
    /// no frame is half-sent.
    fn up_flushed<U: Endpoint>(&self, upstream: &U) -> bool {
        let in_frame = match &self.link {
            Link::Raw => false,
            Link::Ws(enc, _) => enc.in_frame(),
        };
        self.up.is_empty() && self.small_len == 0 && !in_frame && !upstream.has_backlog()
    }

    /// Gives a large buffer this session kept back to `scratch`, dropping what it held: call it
    /// when the session closes.
    pub fn release(&mut self, scratch: &mut Scratch) {
        scratch.reclaim(&mut self.up);
        scratch.reclaim(&mut self.down);
    }

    /// One round of the relay: read both sides, pump both directions, advance the end state.
    /// `client_ready` / `up_ready` are the remembered readiness of the two endpoints; a
    /// `WouldBlock` clears the flag concerned. Counters go to `meter`. A direction whose own
    /// buffer is empty and whose destination is writable runs through `scratch`.
    #[allow(clippy::too_many_arguments)]
    pub fn step<C: Endpoint, U: Endpoint>(
        &mut self,
        client: &mut C,
        client_ready: &mut Ready,
        upstream: &mut U,
        up_ready: &mut Ready,
        meter: &mut Meter,
        scratch: &mut Scratch,
        now: u64,
        rng: &mut Rng,
    ) -> Outcome {
        match self.step_inner(
            client,
            client_ready,
            upstream,
            up_ready,
            meter,
            scratch,
            now,
            rng,
        ) {
            Ok(true) => Outcome::Progress,
            Ok(false) => Outcome::Wait,
            Err(r) => Outcome::Close(r),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn step_inner<C: Endpoint, U: Endpoint>(
        &mut self,
        client: &mut C,
        client_ready: &mut Ready,
        upstream: &mut U,
        up_ready: &mut Ready,
        meter: &mut Meter,
        scratch: &mut Scratch,
        now: u64,
        rng: &mut Rng,
    ) -> Result<bool, CloseReason> {
        // Client → up buffer (the scratch if ours is empty and the upstream can take bytes).
        let mut progress =
            self.read_client(client, client_ready, up_ready.write, meter, scratch)?;
        let written = self.up_written;
        let pumped = self.pump_up(upstream, up_ready, rng);
        scratch.take_back(&mut self.up);
        progress |= pumped?;
        if self.up_written > written {
            self.replay.client_sent(now);
        }
        // Upstream → down buffer (the scratch if ours is empty and the client can take bytes).
        progress |= self.read_upstream(upstream, up_ready, client_ready.write, scratch)?;
        let pumped = self.pump_down(client, client_ready, meter, now);
        scratch.take_back(&mut self.down);
        let (down, p) = pumped?;
        progress |= p;
        progress |= self.settle_end(upstream, up_ready, down, rng)?;
        Ok(progress)
    }

    /// The ends, after both pumps: a finished upstream closes once what it sent is delivered;
    /// a finished client half-closes the upstream once its bytes are flushed. `Ok(true)` when
    /// the end state moved.
    fn settle_end<U: Endpoint>(
        &mut self,
        upstream: &mut U,
        up_ready: &mut Ready,
        down: Down,
        rng: &mut Rng,
    ) -> Result<bool, CloseReason> {
        match self.end {
            End::Open | End::ShutSent => {}
            End::UpstreamDone(reason) => {
                // Deliver what the upstream sent (the header of a half-received frame is dropped
                // with it), then close.
                if down == Down::Starved {
                    // Best effort: our answer to the front's Close, if one is queued.
                    let _ = self.pump_up(upstream, up_ready, rng);
                    return Err(reason);
                }
            }
            End::ClientDone => {
                if self.up_flushed(upstream) {
                    let (next, action) = self.end.on(EndEvent::UpFlushed);
                    self.end = next;
                    if action == EndAction::ShutUpstream {
                        self.shut_upstream(upstream, up_ready, rng)?;
                    }
                    return Ok(true);
                } else if self.client_ended_mid_packet(upstream) {
                    // The frame can never be completed.
                    return Err(CloseReason::ClientEof);
                }
            }
        }
        Ok(false)
    }
}

/// The two keystreams of a pass-through relay from the client's init (raw keys, §1.9): the
/// client→DC one at position 64 (the first byte after the init) and the DC→client one at 0.
/// `None` if the init does not open (it did once: not expected).
fn passthrough(init: &[u8; INIT_LEN]) -> Option<(Cipher, (Cipher, Cipher))> {
    let a = obfs2::accept_raw(init).ok()?;
    Some((a.decrypt.clone(), (a.decrypt, a.encrypt)))
}
