//! Masking: a client that is not ours (a TLS hello no `ee` secret accepts, or non-TLS bytes on a
//! port whose secrets are all `ee`) is relayed byte for byte to the mask host, so a prober sees
//! the real site (docs/protocol.md §2.4: what the other
//! implementations do; ours adds the loop checks and fixed bounds).
//!
//! Owns [`Conn::start_mask`] (the entry point the handshake calls), the `Phase::Mask` splice
//! (two relay buffers that hold a block of the session buffer pool only while bytes wait to be
//! written, so an idle or trickling masked session holds none; edge-triggered like the relay,
//! half-close: each direction is a `Flow`, open → ended (its source sent EOF) → shut (the other
//! side got its `shutdown(Write)` once the bytes went out); the session
//! ends when both ended, on an error, or after `--mask-idle-timeout` without a byte), the target
//! choice ([`mask_target`]) and the loop checks ([`is_loop`] before connecting; [`MaskConns`],
//! `mask/conns.rs`, for a connection that is one of our own mask connections by both ends, at
//! accept or by its PROXY header). The mask host's name comes from
//! the resolver's cache (watched from the start by the reactor); the connect is bounded by
//! `--mask-connect-timeout`. One line per masked session at close, folded per close reason.
//! The mask socket uses the session's `Role::Up(0)` token.

use std::fmt;
use std::net::{IpAddr, SocketAddr};

use log::{info, warn};
use mio::net::TcpStream;
use mio::Interest;

use super::{Conn, Ctx, Phase, Ready, SessionTimer, Status, Step};
use crate::buf::RelayBuf;
use crate::config::Config;
use crate::error::CloseReason;
use crate::mtproto::faketls::gate::Reject;
use crate::mtproto::obfs2::SecretKind;
use crate::net::dial::set_keepalive;
use crate::net::io::{read_once, write_once, Endpoint, Io};
use crate::net::tcp::{self, check_connected, ConnectState};
use crate::relay::Scratch;
use crate::stats::{human_bytes, MASK_WHY_NAMES};
use crate::token::{self, Role};

mod conns;

pub use conns::{Ends, MaskConns};

/// Each direction's splice buffer without a pool, bytes (one TLS record and some); with the
/// reactor's pool (always in `run`) a block of `--buf-kb`.
pub const MASK_BUF: usize = 16 * 1024;

/// Why a client is masked: a fake-TLS verdict, non-TLS bytes on a port whose secrets are all
/// `ee`, or a connection over a per-client limit (`conn::per_ip`: masked whatever it sent).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MaskWhy {
    Hello(Reject),
    NotTls,
    OverLimit,
    /// A transparent client's TLS or HTTP to a Telegram web address: relayed untouched to that
    /// address (its original destination), not to the mask host.
    NotMtproto(SocketAddr),
}

impl MaskWhy {
    /// The close line's first word: `masked` for a client that is not ours, `web` for a
    /// transparent client's web traffic relayed to its own destination.
    pub fn verb(self) -> &'static str {
        match self {
            MaskWhy::NotMtproto(_) => "web",
            _ => "masked",
        }
    }

    /// Index into `stats::MASK_WHY_NAMES` (and `Stats::masked`).
    pub fn index(self) -> usize {
        match self {
            MaskWhy::NotTls => 0,
            MaskWhy::Hello(Reject::Malformed) => 1,
            MaskWhy::Hello(Reject::WrongKey) => 2,
            MaskWhy::Hello(Reject::WrongSni) => 3,
            MaskWhy::Hello(Reject::Stale) => 4,
            MaskWhy::Hello(Reject::Replay) => 5,
            MaskWhy::OverLimit => 6,
            MaskWhy::NotMtproto(_) => 7,
        }
    }
}

impl fmt::Display for MaskWhy {
    /// `not-tls`, or the gate's reason (`malformed`, `wrong-key`, ...).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(MASK_WHY_NAMES[self.index()])
    }
}

/// The mask target for a client whose hello named `sni`: `--mask-host` if set; else the `ee`
/// secret whose domain equals `sni` (ASCII case-insensitive), else the first `ee` secret's
/// domain; port 443. `None` when there is neither a `--mask-host` nor an `ee` secret.
pub fn mask_target(cfg: &Config, sni: Option<&[u8]>) -> Option<(String, u16)> {
    if let Some(h) = &cfg.mask_host {
        return Some(h.clone());
    }
    let domains = cfg.secrets.iter().filter_map(|s| match &s.kind {
        SecretKind::Ee(d) => Some(d),
        _ => None,
    });
    let mut first = None;
    for d in domains {
        if sni.is_some_and(|n| n.eq_ignore_ascii_case(d.as_bytes())) {
            return Some((d.clone(), 443));
        }
        first = first.or(Some(d));
    }
    first.map(|d| (d.clone(), 443))
}

/// True when connecting to `target` would reach our own listener at `listen`: the same address,
/// or `listen` is unspecified (0.0.0.0 / ::) and `target` has our port and a loopback address
/// or one of this host's (`is_local`). IPv4-mapped IPv6 counts as IPv4.
pub fn is_loop(
    target: SocketAddr,
    listen: SocketAddr,
    is_local: &mut dyn FnMut(IpAddr) -> bool,
) -> bool {
    let canon = |ip: IpAddr| ip.to_canonical();
    let (t_ip, l_ip) = (canon(target.ip()), canon(listen.ip()));
    if target.port() != listen.port() {
        return false;
    }
    if t_ip == l_ip {
        return true;
    }
    l_ip.is_unspecified() && (t_ip.is_loopback() || t_ip.is_unspecified() || is_local(t_ip))
}

/// True when `ip` is one of this host's addresses (a socket can be bound to it).
fn host_has(ip: IpAddr) -> bool {
    std::net::UdpSocket::bind(SocketAddr::new(ip, 0)).is_ok()
}

/// One direction of the splice: the bytes captured before masking began (client → mask host
/// only; sent first, then freed), then a relay buffer that holds a pool block only while bytes
/// wait to be written (`buf::RelayBuf`, from the session buffer pool: a masked session is a slot
/// like any other, so its two blocks are within the pool's bound of two per slot).
struct Splice {
    prefix: Vec<u8>,
    /// Bytes of `prefix` written so far.
    sent: usize,
    buf: RelayBuf,
    /// Where this direction is: open, its source ended, or its sink's write half shut.
    flow: Flow,
}

/// One direction of the splice, from its source's read half to its sink's write half.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Flow {
    /// Bytes flow.
    Open,
    /// The source's read half ended; what is buffered still goes out.
    Ended,
    /// Everything went out and the sink's write half is shut (sticky).
    Shut,
}

/// Whether the mask connection's connect finished.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Link {
    /// The non-blocking connect runs (`--mask-connect-timeout` bounds it).
    Connecting,
    /// Connected: bytes are spliced (`--mask-idle-timeout` bounds a silence).
    Up,
}

impl Splice {
    /// A splice that sends `prefix` first; its buffer takes no memory until a read needs room.
    fn with(prefix: Vec<u8>, scratch: &Scratch) -> Splice {
        Splice {
            prefix,
            sent: 0,
            buf: scratch.own_buffer(MASK_BUF),
            flow: Flow::Open,
        }
    }

    fn is_empty(&self) -> bool {
        self.sent == self.prefix.len() && self.buf.is_empty()
    }

    /// What to write next: the rest of the prefix, else the buffer's bytes.
    fn pending(&self) -> &[u8] {
        if self.sent < self.prefix.len() {
            &self.prefix[self.sent..]
        } else {
            self.buf.ready()
        }
    }

    /// `n` bytes of [`Splice::pending`] were written. A prefix fully sent is freed; an empty
    /// buffer gives its block back.
    fn consume(&mut self, n: usize) {
        if self.sent < self.prefix.len() {
            self.sent += n;
            if self.sent == self.prefix.len() {
                self.prefix = Vec::new();
                self.sent = 0;
            }
        } else {
            self.buf.consume(n);
        }
        self.buf.detach_if_empty();
    }
}

/// One side of the splice.
struct Side<'a> {
    /// The socket (the client's stream is any `Endpoint`, so the splice does not care what
    /// wraps it).
    sock: &'a mut dyn Endpoint,
    ready: &'a mut Ready,
}

/// Moves bytes `from` → `to` through `buf` once each way it can; `Ok(true)` on progress. A
/// read needs a pool block (`scratch`); with none free the side is not read (backpressure, as
/// in the relay). Errors: which side failed, and the OS error.
fn pump(
    from: &mut Side<'_>,
    to: &mut Side<'_>,
    buf: &mut Splice,
    scratch: &Scratch,
    moved: &mut u64,
) -> Result<bool, (bool, std::io::Error)> {
    let mut progress = false;
    if buf.flow == Flow::Open && from.ready.read && scratch.attach(&mut buf.buf) {
        let room = buf.buf.space();
        if !room.is_empty() {
            match read_once(from.sock, room) {
                Io::Done(n) => {
                    buf.buf.fill(n);
                    buf.buf.advance(n);
                    progress = true;
                }
                Io::Blocked => from.ready.read = false,
                Io::Eof => {
                    buf.flow = Flow::Ended;
                    progress = true;
                }
                Io::Failed(e) => {
                    buf.buf.detach_if_empty();
                    return Err((true, e));
                }
            }
        }
        buf.buf.detach_if_empty();
    }
    if !buf.is_empty() && to.ready.write {
        match write_once(to.sock, buf.pending()) {
            Io::Done(n) => {
                buf.consume(n);
                *moved += n as u64;
                progress = true;
            }
            Io::Blocked => to.ready.write = false,
            Io::Eof => {}
            Io::Failed(e) => return Err((false, e)),
        }
    }
    if buf.flow == Flow::Ended && buf.is_empty() {
        let _ = to.sock.shutdown_write();
        buf.flow = Flow::Shut;
        progress = true;
    }
    Ok(progress)
}

/// A masked session's state (`Phase::Mask`).
pub struct Masking {
    up: TcpStream,
    up_ready: Ready,
    link: Link,
    /// Client → mask host, starting with the captured bytes.
    c2u: Splice,
    /// Mask host → client.
    u2c: Splice,
    why: MaskWhy,
    /// `HOST:PORT (ADDR)` for the close line.
    target: String,
    /// The mask connection's ends, while it is in [`MaskConns`].
    ends: Option<Ends>,
    /// How it ended, for the close line.
    end: String,
    bytes_up: u64,
    bytes_down: u64,
}

impl Masking {
    /// Why the client was masked and the `HOST:PORT (ADDR)` it was relayed to: the session
    /// record's `mask_why` and `mask_target` (`conn::record`).
    pub fn why_target(&self) -> (MaskWhy, &str) {
        (self.why, &self.target)
    }

    /// Remembers a readiness edge of the mask socket.
    pub fn mark_up(&mut self, readable: bool, writable: bool) {
        self.up_ready.read |= readable;
        self.up_ready.write |= writable;
    }
}

impl Conn {
    /// Hands this client to the mask host: `why` is logged and counted (as `over-limit` for a
    /// client over a per-client limit, whatever it sent); `captured` is every byte
    /// read from the client so far (replayed first, byte for byte; the caller bounds it, e.g.
    /// by its largest hello record); `sni` the hello's SNI if it parsed. Target: see
    /// [`mask_target`]. With `--no-mask`: one rate-limited bad-client line and a close as
    /// `bad-init` (nothing is dialled). A name not in the resolver's cache, a target that is
    /// our own listener, or a connect that fails at once: closed as `mask-unreachable` /
    /// `mask-loop` with one (folded) line.
    pub(super) fn start_mask(
        &mut self,
        why: MaskWhy,
        captured: Vec<u8>,
        sni: Option<&[u8]>,
        ctx: &mut Ctx<'_>,
    ) -> Step {
        let to_dst = matches!(why, MaskWhy::NotMtproto(_));
        if ctx.cfg.no_mask && !to_dst {
            return self.refuse_unmasked(why, ctx);
        }
        let why = if self.over_limit() {
            MaskWhy::OverLimit
        } else {
            why
        };
        ctx.stats.masked[why.index()] += 1;
        let (label, addr, target) = match self.mask_addr(why, sni, ctx) {
            Ok(found) => found,
            Err(step) => return step,
        };
        let mut up = match tcp::start(addr) {
            Ok(s) => s,
            Err(e) => {
                let what = format!("connect to {addr}: {e}");
                return self.mask_failed(why, &label, CloseReason::MaskUnreachable, &what, ctx);
            }
        };
        set_keepalive(&up, ctx.cfg.tcp_keepalive);
        let tok = token::encode(self.slot, self.id, Role::Up(0));
        if let Err(e) = ctx
            .registry
            .register(&mut up, tok, Interest::READABLE | Interest::WRITABLE)
        {
            let what = format!("cannot register the mask socket: {e}");
            return self.mask_failed(why, &label, CloseReason::MaskUnreachable, &what, ctx);
        }
        let ends = up
            .local_addr()
            .ok()
            .map(|l| Ends::new(l, addr))
            .filter(|&e| ctx.mask_conns.insert(e, self.slot, self.id));
        self.phase = Phase::Mask(Box::new(Masking {
            up,
            up_ready: Ready::default(),
            link: Link::Connecting,
            c2u: Splice::with(captured, ctx.scratch),
            u2c: Splice::with(Vec::new(), ctx.scratch),
            why,
            target,
            ends,
            end: String::new(),
            bytes_up: 0,
            bytes_down: 0,
        }));
        let at = ctx.now + ctx.cfg.mask_connect_timeout.as_millis() as u64;
        self.arm(at, SessionTimer::Mask, ctx);
        Step::Progress
    }

    /// The mask target's address for this client (`sni`: its hello's), with its label
    /// (`host:port`) and the target the close line names (`host:port (ip)` for a name); `Err`:
    /// the session closes (no target, a name not resolved, our own listener).
    fn mask_addr(
        &mut self,
        why: MaskWhy,
        sni: Option<&[u8]>,
        ctx: &mut Ctx<'_>,
    ) -> Result<(String, SocketAddr, String), Step> {
        if let MaskWhy::NotMtproto(dst) = why {
            // Checked at accept: inside Telegram's ranges and none of our listeners.
            return Ok((dst.to_string(), dst, dst.to_string()));
        }
        let Some((host, port)) = mask_target(ctx.cfg, sni) else {
            return Err(self.mask_failed(
                why,
                "-",
                CloseReason::MaskUnreachable,
                "no --mask-host and no ee secret",
                ctx,
            ));
        };
        let label = format!("{host}:{port}");
        let ip = match ctx.dns.lookup(&host, ctx.now) {
            crate::dns::Lookup::Ready(ip) => ip,
            crate::dns::Lookup::Pending => {
                let what = "name not resolved yet (a query was started)";
                return Err(self.mask_failed(why, &label, CloseReason::MaskUnreachable, what, ctx));
            }
            crate::dns::Lookup::Failed(e) => {
                return Err(self.mask_failed(why, &label, CloseReason::MaskUnreachable, &e, ctx));
            }
        };
        let addr = SocketAddr::new(ip, port);
        if is_loop(addr, ctx.listen, &mut host_has) {
            let what = format!("{addr} is our own listener");
            return Err(self.mask_failed(why, &label, CloseReason::MaskLoop, &what, ctx));
        }
        let target = if host == ip.to_string() {
            label.clone()
        } else {
            format!("{label} ({ip})")
        };
        Ok((label, addr, target))
    }

    /// `--no-mask`: the client is refused like a bad init.
    fn refuse_unmasked(&mut self, why: MaskWhy, ctx: &mut Ctx<'_>) -> Step {
        self.log_bad(
            CloseReason::BadInit,
            format_args!("not ours ({why}), closed (--no-mask)"),
            ctx,
        );
        Step::Close(CloseReason::BadInit)
    }

    /// Masking could not start: the close line now (folded per reason), then the close.
    fn mask_failed(
        &mut self,
        why: MaskWhy,
        target: &str,
        reason: CloseReason,
        what: &str,
        ctx: &mut Ctx<'_>,
    ) -> Step {
        if let Some(n) = ctx.unserved_log[reason.index()].allow(ctx.now) {
            let folded = if n > 0 {
                format!(" ({n} similar folded)")
            } else {
                String::new()
            };
            warn!(
                "{} {} why={why} to {target}: {what} reason={reason}{folded}",
                why.verb(),
                self.peer
            );
        }
        Step::Close(reason)
    }

    /// One splice step: finishes the connect, then moves bytes both ways.
    pub(super) fn step_mask(&mut self, ctx: &mut Ctx<'_>) -> Step {
        let Phase::Mask(m) = &mut self.phase else {
            return Step::Wait;
        };
        let mut just_connected = false;
        if m.link == Link::Connecting {
            if !m.up_ready.write {
                return Step::Wait;
            }
            match check_connected(&m.up) {
                ConnectState::Connected => {
                    m.link = Link::Up;
                    just_connected = true;
                }
                ConnectState::Pending => {
                    m.up_ready.write = false;
                    return Step::Wait;
                }
                ConnectState::Failed(e) => {
                    m.end = format!("connect failed: {e}");
                    return Step::Close(CloseReason::MaskUnreachable);
                }
            }
        }
        let mut client = Side {
            sock: &mut self.client,
            ready: &mut self.client_ready,
        };
        let mut up = Side {
            sock: &mut m.up,
            ready: &mut m.up_ready,
        };
        let scratch = &*ctx.scratch;
        let a = pump(&mut client, &mut up, &mut m.c2u, scratch, &mut m.bytes_up);
        let b = a
            .as_ref()
            .ok()
            .map(|_| pump(&mut up, &mut client, &mut m.u2c, scratch, &mut m.bytes_down));
        let progress = match (a, b) {
            (Err((from_side, e)), _) => {
                m.end = format!("{}: {e}", if from_side { "client" } else { "mask host" });
                return Step::Close(CloseReason::Masked);
            }
            (_, Some(Err((from_side, e)))) => {
                m.end = format!("{}: {e}", if from_side { "mask host" } else { "client" });
                return Step::Close(CloseReason::Masked);
            }
            (Ok(p), Some(Ok(q))) => p || q,
            (Ok(p), None) => p,
        };
        let ended = |s: &Splice| s.flow != Flow::Open && s.is_empty();
        if ended(&m.c2u) && ended(&m.u2c) {
            m.end = "both ended".into();
            return Step::Close(CloseReason::Masked);
        }
        if progress || just_connected {
            self.last_activity = ctx.now;
        }
        if just_connected {
            let at = ctx.now + self.mask_idle_ms(ctx);
            self.arm(at, SessionTimer::Mask, ctx);
        }
        if progress || just_connected {
            Step::Progress
        } else {
            Step::Wait
        }
    }

    /// How long a masked session may stay silent, ms: `--mask-idle-timeout` for a client that
    /// is not ours; a transparent client's web traffic (`MaskWhy::NotMtproto`) is the user's
    /// own, relayed untouched, and idles like a session (`--idle-timeout`, kept from its start).
    fn mask_idle_ms(&self, ctx: &Ctx<'_>) -> u64 {
        match &self.phase {
            Phase::Mask(m) if matches!(m.why, MaskWhy::NotMtproto(_)) => self.kept.idle_ms(),
            _ => ctx.cfg.mask_idle_timeout.as_millis() as u64,
        }
    }

    /// [`SessionTimer::Mask`] fired: the connect deadline, or the (lazily re-armed) idle one.
    pub(super) fn mask_timer(&mut self, ctx: &mut Ctx<'_>) -> Step {
        let idle_ms = self.mask_idle_ms(ctx);
        let last = self.last_activity;
        let Phase::Mask(m) = &mut self.phase else {
            return Step::Progress;
        };
        if m.link == Link::Connecting {
            let secs = ctx.cfg.mask_connect_timeout.as_secs_f64();
            m.end = format!("no connect within {secs:.1}s");
            return Step::Close(CloseReason::MaskUnreachable);
        }
        if ctx.now.saturating_sub(last) >= idle_ms {
            m.end = format!("idle for {:.1}s", idle_ms as f64 / 1000.0);
            return Step::Close(CloseReason::Masked);
        }
        self.arm(last + idle_ms, SessionTimer::Mask, ctx);
        Step::Progress
    }

    /// Ends this session's masking as a loop (its mask connection reached our own listener).
    pub fn close_mask_loop(&mut self, ctx: &mut Ctx<'_>) -> Status {
        if let Phase::Mask(m) = &mut self.phase {
            m.end = "our own listener accepted this mask connection".into();
        }
        self.close(CloseReason::MaskLoop, ctx);
        Status::Closed
    }

    /// The close path's part for a masked session: forgets its mask connection's ends and
    /// writes its close line (folded per close reason).
    pub(super) fn mask_closed(&mut self, m: Masking, reason: CloseReason, ctx: &mut Ctx<'_>) {
        if let Some(e) = m.ends {
            ctx.mask_conns.remove(e);
        }
        let _ = m.up.shutdown(std::net::Shutdown::Both);
        let folded = match ctx.unserved_log[reason.index()].allow(ctx.now) {
            None => return,
            Some(0) => String::new(),
            Some(n) => format!(" ({n} similar folded)"),
        };
        let dur = ctx.now.saturating_sub(self.started) as f64 / 1000.0;
        let end = if m.end.is_empty() { "-" } else { &m.end };
        info!(
            "{} {} why={} to {} up={} down={} dur={dur:.1}s end={end} reason={reason}{folded}",
            m.why.verb(),
            self.peer,
            m.why,
            m.target,
            human_bytes(m.bytes_up),
            human_bytes(m.bytes_down),
        );
    }
}

#[cfg(test)]
mod tests;
