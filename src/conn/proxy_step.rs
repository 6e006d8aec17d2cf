//! The pre-handshake step of a session: the PROXY header (`--proxy-protocol`) and the
//! per-client-address admission (`--max-per-ip`, `--per-ip-rate`).
//!
//! With `--proxy-protocol` the header is required: the socket is peeked and only bytes known to
//! be header are consumed (into a `net::proxy_header::MAX_HEADER` buffer held while the header
//! is read), so the client's own first bytes stay in the socket for the handshake. Its source address replaces the peer's for logs and limits. A missing,
//! malformed or oversize header, an end of stream inside it, or no complete header within
//! `--handshake-timeout` (the same deadline the init has) closes at once as `proxy-header`, with
//! one rate-limited line saying what was wrong. Then (or at once, without the flag) the address
//! is admitted by `conn::per_ip`; a refusal closes at once as `per-ip-limit` / `per-ip-rate`,
//! unless an `ee` secret is configured and `--per-ip-mask` has a slot free: then the client
//! goes on to the handshake as one that is not ours (`per_ip::Held::MaskSlot`: masked whatever
//! it sends, `handshake` and `mask`).
//! A header whose two ends are one of our own mask connections' (`mask::MaskConns`: the mask
//! host is a balancer in front of this listener) closes at once as `mask-loop`.
//! What the admission gave is given back by `Conn::close`, exactly once. Hands over to
//! `Phase::Handshake(Box::new(Handshake::new()))`.

use std::net::SocketAddr;

use super::direct_hs::Direct;
use super::handshake::Handshake;
use super::per_ip::{Admission, Held, Refusal};
use super::socks_step::Socks;
use super::{Conn, Ctx, Phase, Step};
use crate::config::WayIn;
use crate::error::CloseReason;
use crate::net::io::{read_once, Io};
use crate::net::proxy_header::{self, Parsed, MAX_HEADER};

/// The pre-handshake phase's state.
pub struct PreHandshake {
    /// A PROXY header must still be read.
    header: bool,
    /// The header bytes consumed so far (`MAX_HEADER` bytes while `header`, else empty).
    buf: Box<[u8]>,
    got: usize,
}

impl PreHandshake {
    /// The first phase of a session: a header is awaited when `--proxy-protocol` is on.
    pub fn new(proxy_protocol: bool) -> PreHandshake {
        let size = if proxy_protocol { MAX_HEADER } else { 0 };
        PreHandshake {
            header: proxy_protocol,
            buf: vec![0; size].into_boxed_slice(),
            got: 0,
        }
    }
}

impl Conn {
    pub(super) fn step_pre(&mut self, ctx: &mut Ctx<'_>) -> Step {
        let Phase::Pre(pre) = &mut self.phase else {
            return Step::Wait;
        };
        if pre.header {
            if !self.client_ready.read {
                return Step::Wait;
            }
            match self.read_proxy_header(ctx) {
                Ok(true) => {}
                Ok(false) => return Step::Wait,
                Err(step) => return step,
            }
        }
        self.admit(ctx)
    }

    /// A PROXY header whose two ends are one of our own mask connections' (`source` its local
    /// address, `dest` the one it connected to): the mask host is a balancer that leads back
    /// to this listener. Closed as `mask-loop` at once, before anything is masked again; the
    /// mask session it came from ends when the balancer closes its side.
    fn header_mask_loop(
        &mut self,
        source: SocketAddr,
        dest: SocketAddr,
        ctx: &mut Ctx<'_>,
    ) -> Option<Step> {
        ctx.mask_conns.owner(source, dest)?;
        let reason = CloseReason::MaskLoop;
        ctx.warn_client(
            self.peer,
            format_args!(
                "refused: {reason}: its PROXY header names our own mask connection {source} → \
                 {dest} (the mask host leads back to this listener through the balancer)"
            ),
        );
        Some(Step::Close(reason))
    }

    /// Peeks at the socket and consumes what is known to be header: all of the peeked bytes
    /// while they are only a prefix (so the next peek sees an end of stream as such), exactly
    /// the rest once the header is complete. `Ok(true)`: done (the peer may have been
    /// replaced); `Ok(false)`: wait for more bytes; `Err(step)`: close.
    fn read_proxy_header(&mut self, ctx: &mut Ctx<'_>) -> Result<bool, Step> {
        let Phase::Pre(pre) = &mut self.phase else {
            return Ok(false);
        };
        // Each round consumes at least one byte or returns; the header is at most MAX_HEADER.
        let (source, dest, consumed) = loop {
            let len = pre.got;
            let n = loop {
                match self.client.tcp().peek(&mut pre.buf[len..]) {
                    Ok(n) => break n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        self.client_ready.read = false;
                        return Ok(false);
                    }
                    Err(_) => return Err(Step::Close(CloseReason::ClientReset)),
                }
            };
            if n == 0 {
                let what = if len == 0 {
                    "connection ended before any byte"
                } else {
                    "connection ended inside the header"
                };
                return Err(self.bad_header(what, ctx));
            }
            let take = match proxy_header::parse(&pre.buf[..len + n]) {
                Ok(Parsed::NeedMore { .. }) => n,
                Ok(Parsed::Done { consumed, .. }) => consumed - len,
                Err(e) => return Err(self.bad_header(&e.to_string(), ctx)),
            };
            // The peeked bytes are in the socket: this reads exactly them, nothing after.
            let mut got = 0;
            while got < take {
                match read_once(&mut self.client, &mut pre.buf[len + got..len + take]) {
                    Io::Done(k) => got += k,
                    Io::Eof | Io::Blocked => {
                        return Err(self.bad_header("peeked bytes vanished from the socket", ctx))
                    }
                    Io::Failed(_) => return Err(Step::Close(CloseReason::ClientReset)),
                }
            }
            pre.got = len + take;
            if let Ok(Parsed::Done {
                source,
                dest,
                consumed,
            }) = proxy_header::parse(&pre.buf[..pre.got])
            {
                break (source, dest, consumed);
            }
        };
        debug_assert_eq!(consumed, pre.got);
        pre.header = false;
        pre.buf = Box::default();
        if let (Some(src), Some(dst)) = (source, dest) {
            if let Some(step) = self.header_mask_loop(src, dst, ctx) {
                return Err(step);
            }
        }
        if let Some(src) = source {
            log::debug!("client {} is {src} by its PROXY header", self.peer);
            self.peer = src;
        }
        Ok(true)
    }

    /// The handshake deadline fired while the PROXY header was incomplete.
    pub(super) fn proxy_header_timeout(&mut self, ctx: &mut Ctx<'_>) -> Step {
        let secs = ctx.cfg.handshake_timeout.as_secs_f64();
        self.bad_header(&format!("no complete header within {secs:.1}s"), ctx)
    }

    fn bad_header(&mut self, what: &str, ctx: &mut Ctx<'_>) -> Step {
        self.log_bad(
            CloseReason::ProxyHeader,
            format_args!("PROXY header required (--proxy-protocol): {what}"),
            ctx,
        );
        Step::Close(CloseReason::ProxyHeader)
    }

    /// Admits the client's address (`conn::per_ip`) and starts the handshake; over a limit,
    /// with an `ee` secret and a free slot of `--per-ip-mask`, starts it too, for a client that
    /// is not ours (masked whatever it sends: to an observer an over-limit connection must look
    /// like the site, ours included); else refuses at once.
    fn admit(&mut self, ctx: &mut Ctx<'_>) -> Step {
        // A direct client (transparent, SOCKS5) is never masked: over a limit it is refused.
        let can_mask = !ctx.ee_keys.is_empty() && !ctx.cfg.no_mask && self.way == WayIn::Proxy;
        let (held, refusal) = match ctx.per_ip.admit_or_mask(self.peer.ip(), ctx.now, can_mask) {
            Admission::Admitted(held) => (held, None),
            Admission::Masked(r) => (Held::MaskSlot, Some(r)),
            Admission::Refused(r) => {
                let (reason, why) = over_limit(r, ctx);
                let peer = self.peer;
                ctx.warn_client(peer, format_args!("refused: {reason}: {why}"));
                return Step::Close(reason);
            }
        };
        if let Some(r) = refusal {
            let (reason, why) = over_limit(r, ctx);
            let peer = self.peer;
            ctx.warn_client(
                peer,
                format_args!(
                    "over a limit ({reason}: {why}): masked like a client that is not ours"
                ),
            );
        }
        self.per_ip = held;
        self.phase = match (self.way, self.info.dst) {
            (WayIn::Transparent, Some(dst)) => Phase::Direct(Box::new(Direct::new(dst))),
            (WayIn::Socks5, _) => {
                let auth = ctx.cfg.socks5_auth.is_some();
                Phase::Socks(Box::new(Socks::new(auth)))
            }
            _ => Phase::Handshake(Box::new(Handshake::new())),
        };
        Step::Progress
    }
}

/// The close reason of refusal `r` and what it says about the limit.
fn over_limit(r: Refusal, ctx: &Ctx<'_>) -> (CloseReason, String) {
    match r {
        Refusal::Limit => (
            CloseReason::PerIpLimit,
            format!(
                "{} sessions from this address (--max-per-ip)",
                ctx.cfg.max_per_ip
            ),
        ),
        Refusal::Rate => (
            CloseReason::PerIpRate,
            format!(
                "more than {} new connections at once, {}/s after (--per-ip-burst, --per-ip-rate)",
                ctx.cfg.per_ip_burst, ctx.cfg.per_ip_rate
            ),
        ),
    }
}
