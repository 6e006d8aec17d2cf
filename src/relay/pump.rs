//! The data movement of one [`Relay::step`]: reading each endpoint into its buffer (the
//! reactor's scratch lent when ours is empty), the up pump (write what is ready, then frame,
//! encrypt and mask more), the down pump (write what is ready, then strip frame headers, answer
//! control frames and re-encrypt more) and the half-close toward the upstream. The order of a
//! step and the ends are `mod.rs`'s; framing is `net::wslink`'s; the end states are `end`'s.

use crate::error::CloseReason;
use crate::mtproto::framing::{next_packet, Step};
use crate::mtproto::obfs2::Cipher;
use crate::net::io::{read_once, write_once, Endpoint, Io};
use crate::net::wslink::{self, Event, LinkError, Next};
use crate::rng::Rng;

use super::end::{self, EndEvent};
use super::replay::Replay;
use super::side::{self, RelayMode};
use super::{Down, Link, Meter, Ready, Relay, Scratch, MIN_READ, PUMP_ROUNDS};

/// How one write toward the upstream went.
enum UpWrite {
    /// Bytes went; more may follow.
    Wrote,
    /// Bytes went and the upstream is full now.
    WroteFull,
    /// The upstream took nothing (its readiness is cleared).
    Blocked,
    /// Nothing is ready to write: process more.
    Idle,
}

impl Relay {
    /// Client → up buffer, until `WouldBlock`, a full buffer or the round cap. The up buffer
    /// borrows the scratch when it is empty and the upstream is writable (`up_writable`).
    /// `Ok(true)` on progress.
    pub(super) fn read_client<C: Endpoint>(
        &mut self,
        client: &mut C,
        client_ready: &mut Ready,
        up_writable: bool,
        meter: &mut Meter,
        scratch: &mut Scratch,
    ) -> Result<bool, CloseReason> {
        let mut progress = false;
        if client_ready.read && self.end.reads_client() {
            // An exhausted pool leaves no room: the client is not read (backpressure).
            let lent = up_writable && scratch.lend(&mut self.up);
            if !lent {
                scratch.attach(&mut self.up);
            }
        }
        for _ in 0..PUMP_ROUNDS {
            if !client_ready.read || !self.end.reads_client() {
                break;
            }
            let held = self.up.len();
            let space = self.up.space();
            // Nearly full is full: a read into a sliver (a 64 KiB read of fake-TLS records
            // leaves 20 bytes, its four headers) is a system call for nothing. What is held goes
            // upstream first, as from a full buffer (pump_up can process all of it but a partial
            // packet header, < MIN_READ), and the client is read again after (`read` stays set).
            if space.is_empty() || (space.len() < MIN_READ && held >= MIN_READ) {
                break;
            }
            match read_once(client, space) {
                Io::Done(n) => {
                    match (self.mode, &mut self.client_dec, &mut self.replies) {
                        // The client's ciphertext stays as it is; the reply check follows it.
                        (RelayMode::PassThrough, Some(c), Some(r)) => {
                            let _ = side::follow(c, &space[..n], &mut side::Up(r));
                        }
                        (RelayMode::PassThrough, Some(c), None) => c.skip(n as u64),
                        (_, dec, replies) => {
                            if let Some(c) = dec {
                                c.apply(&mut space[..n]);
                            }
                            if let Some(r) = replies {
                                r.client_sent(&space[..n]);
                            }
                        }
                    }
                    if self.replay.armed() {
                        self.replay = Replay::keep(scratch.replay_buffer(), &[]);
                    }
                    self.replay.client_read(&space[..n]);
                    self.up.fill(n);
                    meter.bytes_up += n as u64;
                    progress = true;
                }
                Io::Blocked => client_ready.read = false,
                Io::Eof => {
                    self.end = self.end.on(EndEvent::ClientEof).0;
                    progress = true;
                }
                Io::Failed(e) => return Err(end::client_read_failure(&e)),
            }
        }
        Ok(progress)
    }

    /// Upstream → down buffer, until `WouldBlock`, a full buffer or the round cap. The down
    /// buffer borrows the scratch when it is empty and the client is writable
    /// (`client_writable`). `Ok(true)` on progress.
    pub(super) fn read_upstream<U: Endpoint>(
        &mut self,
        upstream: &mut U,
        up_ready: &mut Ready,
        client_writable: bool,
        scratch: &mut Scratch,
    ) -> Result<bool, CloseReason> {
        let mut progress = false;
        if up_ready.read && self.end.reads_upstream() {
            let lent = client_writable && scratch.lend(&mut self.down);
            if !lent {
                scratch.attach(&mut self.down);
            }
        }
        for _ in 0..PUMP_ROUNDS {
            if !up_ready.read || !self.end.reads_upstream() {
                break;
            }
            let space = self.down.space();
            if space.is_empty() {
                break;
            }
            match read_once(upstream, space) {
                Io::Done(n) => {
                    self.down.fill(n);
                    self.replay.upstream_spoke();
                    progress = true;
                }
                Io::Blocked => up_ready.read = false,
                Io::Eof => {
                    self.end = self
                        .end
                        .on(EndEvent::UpstreamEnded(CloseReason::UpstreamEof))
                        .0;
                    self.replay.upstream_spoke();
                    progress = true;
                }
                Io::Failed(_) => return Err(CloseReason::UpstreamReset),
            }
        }
        Ok(progress)
    }

    /// True when the client's bytes stopped inside a WS frame, or inside the length header of
    /// the next packet, and everything before that was handed over: nothing is left to complete
    /// it (so nothing would ever flush).
    pub(super) fn client_ended_mid_packet<U: Endpoint>(&self, upstream: &U) -> bool {
        match &self.link {
            Link::Raw => false,
            Link::Ws(enc, _) => {
                let sent = self.up.ready().is_empty() && self.small_len == 0;
                let mut peek = [0u8; 4];
                let start = match self.mode {
                    RelayMode::PassThrough => {
                        peek_header(&self.relay_enc, self.up.unprocessed(), &mut peek)
                    }
                    _ => self.up.unprocessed(),
                };
                let stuck = (self.up.is_empty() && enc.in_frame()) || enc.header_incomplete(start);
                sent && stuck && !upstream.has_backlog()
            }
        }
    }

    /// Half-close toward the upstream: a FIN on raw TCP; our Close (1000) on a WS link.
    pub(super) fn shut_upstream<U: Endpoint>(
        &mut self,
        upstream: &mut U,
        up_ready: &mut Ready,
        rng: &mut Rng,
    ) -> Result<(), CloseReason> {
        match &mut self.link {
            Link::Raw => {
                let _ = upstream.shutdown_write();
            }
            Link::Ws(enc, _) => {
                enc.queue_close(Some(wslink::CLOSE_NORMAL));
                self.pump_up(upstream, up_ready, rng)?;
            }
        }
        Ok(())
    }

    /// Client → upstream: write what is ready, then process more. `Ok(true)` on progress.
    pub(super) fn pump_up<U: Endpoint>(
        &mut self,
        upstream: &mut U,
        up_ready: &mut Ready,
        rng: &mut Rng,
    ) -> Result<bool, CloseReason> {
        let mut progress = false;
        for _ in 0..PUMP_ROUNDS * 4 {
            if !up_ready.write {
                break;
            }
            match self.write_up(upstream, up_ready)? {
                UpWrite::Wrote => {
                    progress = true;
                    continue;
                }
                UpWrite::WroteFull => {
                    progress = true;
                    break;
                }
                UpWrite::Blocked => break,
                UpWrite::Idle => {}
            }
            // Nothing waiting: process more plaintext.
            if !self.process_up(rng)? {
                break;
            }
            progress = true;
        }
        Ok(progress)
    }

    /// One write toward the upstream: TLS's backlog first, then the small bytes (a frame
    /// header, a control frame, the relay init) or else the up buffer's ready bytes.
    fn write_up<U: Endpoint>(
        &mut self,
        upstream: &mut U,
        up_ready: &mut Ready,
    ) -> Result<UpWrite, CloseReason> {
        if upstream.has_backlog() {
            match upstream.flush_backlog() {
                Ok(true) => {}
                Ok(false) => {
                    up_ready.write = false;
                    return Ok(UpWrite::Blocked);
                }
                Err(_) => return Err(CloseReason::UpstreamReset),
            }
        }
        let pending = if self.small_sent < self.small_len {
            &self.small[self.small_sent..self.small_len]
        } else {
            self.up.ready()
        };
        if pending.is_empty() {
            return Ok(UpWrite::Idle);
        }
        match write_once(upstream, pending) {
            Io::Done(n) => {
                if self.small_len > 0 {
                    self.small_sent += n;
                    if self.small_sent == self.small_len {
                        self.small_sent = 0;
                        self.small_len = 0;
                    }
                } else {
                    self.up.consume(n);
                    self.up_written += n as u64;
                }
                if upstream.has_backlog() {
                    // TLS kept records the socket refused: it is full.
                    up_ready.write = false;
                    return Ok(UpWrite::WroteFull);
                }
                Ok(UpWrite::Wrote)
            }
            Io::Blocked => {
                up_ready.write = false;
                Ok(UpWrite::Blocked)
            }
            Io::Eof | Io::Failed(_) => Err(CloseReason::UpstreamReset),
        }
    }

    /// Processes more of the up buffer's plaintext: relay-encrypts it on a raw link; on a WS
    /// link puts the next frame header in front (in the buffer's headroom, else in the small
    /// bytes) and encrypts and masks payload. `Ok(false)` when there was nothing to process.
    fn process_up(&mut self, rng: &mut Rng) -> Result<bool, CloseReason> {
        match &mut self.link {
            Link::Raw => {
                let n = self.up.unprocessed().len();
                if n == 0 {
                    return Ok(false);
                }
                match self.mode {
                    // The DC decrypts the client's own bytes.
                    RelayMode::PassThrough => self.relay_enc.skip(n as u64),
                    _ => self.relay_enc.apply(self.up.unprocessed_mut(n)),
                }
                self.up.advance(n);
            }
            Link::Ws(enc, _) => {
                let mut next = if self.mode == RelayMode::PassThrough && enc.wants_header() {
                    // The next message's length is in the packet header: decrypt a copy of it.
                    let mut peek = [0u8; 4];
                    let head = peek_header(&self.relay_enc, self.up.unprocessed(), &mut peek);
                    if matches!(next_packet(self.tag, head), Step::Unsplittable) {
                        enc.unsplit();
                        enc.next(self.up.unprocessed(), rng)
                    } else {
                        enc.next(head, rng)
                    }
                } else {
                    enc.next(self.up.unprocessed(), rng)
                };
                let mut framed = false;
                if let Ok(Next::Frame(s)) = &next {
                    // Nothing is ready here, so the frame goes first either way; put in the
                    // buffer's headroom, a data header leaves in one write with its payload.
                    framed = true;
                    let b = s.as_bytes();
                    if self.up.prepend(b) {
                        next = if enc.in_frame() {
                            enc.next(self.up.unprocessed(), rng)
                        } else {
                            Ok(Next::Idle)
                        };
                    } else {
                        self.small[..b.len()].copy_from_slice(b);
                        self.small_len = b.len();
                        self.small_sent = 0;
                        next = Ok(Next::Idle);
                    }
                }
                match next {
                    Ok(Next::Payload(n)) => {
                        let region = self.up.unprocessed_mut(n);
                        match self.mode {
                            RelayMode::PassThrough => self.relay_enc.skip(n as u64),
                            _ => self.relay_enc.apply(region),
                        }
                        enc.mask(region);
                        self.up.advance(n);
                    }
                    Ok(Next::Idle) if framed => {}
                    Ok(Next::Idle) => return Ok(false),
                    // A data header is always followed by payload (wslink invariant).
                    Ok(Next::Frame(_)) | Err(_) => return Err(CloseReason::ProtocolError),
                }
            }
        }
        Ok(true)
    }

    /// Upstream → client: write what is ready, then process more (strip frame headers, answer
    /// control frames, re-encrypt payload).
    pub(super) fn pump_down<C: Endpoint>(
        &mut self,
        client: &mut C,
        client_ready: &mut Ready,
        meter: &mut Meter,
        now: u64,
    ) -> Result<(Down, bool), CloseReason> {
        let mut progress = false;
        for _ in 0..PUMP_ROUNDS * 4 {
            if !self.down.ready().is_empty() {
                if !client_ready.write {
                    return Ok((Down::Blocked, progress));
                }
                match write_once(client, self.down.ready()) {
                    Io::Done(n) => {
                        self.down.consume(n);
                        meter.first_down_ms.get_or_insert(now);
                        progress = true;
                        continue;
                    }
                    Io::Blocked => {
                        client_ready.write = false;
                        return Ok((Down::Blocked, progress));
                    }
                    Io::Eof => return Err(CloseReason::ClientEof),
                    Io::Failed(_) => return Err(CloseReason::ClientReset),
                }
            }
            // Nothing waiting (so a header can be skipped in place): process more.
            let avail = self.down.unprocessed().len();
            if avail == 0 {
                return Ok((Down::Starved, progress));
            }
            let n = match &mut self.link {
                Link::Raw => avail,
                Link::Ws(enc, dec) => match dec.next(self.down.unprocessed(), enc) {
                    Ok(Event::Payload(n)) => n,
                    Ok(Event::Header(n) | Event::Control(n) | Event::AfterClose(n)) => {
                        self.down.skip(n);
                        progress = true;
                        continue;
                    }
                    Ok(Event::Closed(code, n)) => {
                        self.down.skip(n);
                        let ev = EndEvent::UpstreamEnded(CloseReason::WsClose(code));
                        self.end = self.end.on(ev).0;
                        // Nothing the front sends after its Close is relayed (RFC 6455 §5.5.1).
                        return Ok((Down::Starved, true));
                    }
                    Ok(Event::NeedMore) => return Ok((Down::Starved, progress)),
                    Err(LinkError::BadClose(_)) => {
                        // The front's Close broke RFC 6455 §7.4: our Close 1002 (queued by the
                        // decoder) leaves under the linger like an echo would, what came
                        // before is delivered, and the session ends as a protocol error.
                        let ev = EndEvent::UpstreamEnded(CloseReason::ProtocolError);
                        self.end = self.end.on(ev).0;
                        return Ok((Down::Starved, true));
                    }
                    Err(e) => return Err(link_error(e)),
                },
            };
            let region = self.down.unprocessed_mut(n);
            let checked = match (self.mode, &mut self.replies) {
                // What the DC sent is what the client decrypts: only reply headers are looked at.
                (RelayMode::PassThrough, Some(r)) => {
                    side::follow(&mut self.relay_dec, region, &mut side::Down(r))
                }
                (RelayMode::PassThrough, None) => {
                    self.relay_dec.skip(n as u64);
                    Ok(())
                }
                (_, replies) => {
                    self.relay_dec.apply(region);
                    let checked = replies.as_mut().map_or(Ok(()), |r| r.server_sent(region));
                    if let Some(c) = &mut self.client_enc {
                        c.apply(region);
                    }
                    checked
                }
            };
            if let Err(bad) = checked {
                self.bad_reply = Some(bad);
                return Err(CloseReason::BadReply);
            }
            self.down.advance(n);
            meter.bytes_down += n as u64;
            progress = true;
        }
        Ok((Down::Capped, progress))
    }
}

/// Every link error ends the session as a protocol error.
fn link_error(_: LinkError) -> CloseReason {
    CloseReason::ProtocolError
}

/// The plaintext of the first (at most 4) of `data`'s bytes, decrypted into `out` with a look
/// at `cipher`'s keystream (not advanced): a pass-through relay's view of a packet header.
fn peek_header<'a>(cipher: &Cipher, data: &[u8], out: &'a mut [u8; 4]) -> &'a [u8] {
    let k = data.len().min(4);
    out[..k].copy_from_slice(&data[..k]);
    cipher.peek(&mut out[..k]);
    &out[..k]
}
