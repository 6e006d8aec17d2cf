//! Inbound handshake: read exactly the 64-byte obfuscated2 init, check it against every
//! secret (docs/protocol.md §1.1–1.3), and either start connecting or drain a bad client.
//!
//! Bad input (wrong secret, HTTP, TLS to a plain port, garbage) gets one rate-limited log line
//! (HTTP as soon as its first bytes show it: `GET `, `POST`, `CONNECT `, the HTTP/2 preface…)
//! with a distinct reason, then a short bounded drain (`--bad-client-drain`) and a close; an
//! init whose DC index names no DC (§1.4) is closed as `no-route` at once, and one naming a DC
//! that is neither in the table nor configured (`route::table::known_dc`) as `unknown-dc`, so
//! client input never creates per-DC state. Only this session is affected. On success it hands
//! over to `connect::Connecting` and arms the idle timer; nothing here dials upstream. On a port
//! whose secrets are all `ee`, first bytes that are not TLS are handed to masking (`mask`).

use log::{debug, warn};

use super::connect::Connecting;
use super::{Conn, Ctx, Phase, SessionTimer, Step};
use crate::error::CloseReason;
use crate::mtproto::dc::DcId;
use crate::mtproto::obfs2::{self, INIT_LEN};
use crate::net::io::{read_once, Io};
use crate::route::table::known_dc;

/// Bytes discarded per drain read.
const DRAIN_CHUNK: usize = 4096;

/// Prefixes a Telegram client never sends as the start of an init (docs/protocol.md §3.1), so they
/// can be rejected before 64 bytes arrive.
const HTTP_PREFIXES: [&[u8; 4]; 4] = [b"GET ", b"POST", b"HEAD", b"OPTI"];

/// Longer starts of HTTP that a client is not barred from sending as the first bytes of an init
/// (an `HTTP CONNECT` and the HTTP/2 connection preface, RFC 9113 §3.4): rejected once this many
/// bytes match, a chance of 2^-64 or less for a random init, instead of holding a slot until the
/// handshake deadline.
const HTTP_STARTS: [&[u8]; 2] = [b"CONNECT ", b"PRI * HTTP/2.0\r\n"];

/// The init being collected.
pub struct Handshake {
    init: [u8; INIT_LEN],
    got: usize,
}

impl Handshake {
    pub fn new() -> Handshake {
        Handshake {
            init: [0; INIT_LEN],
            got: 0,
        }
    }

    /// Reason used when the handshake deadline fires.
    pub fn timeout_reason(&self) -> CloseReason {
        CloseReason::HandshakeTimeout
    }
}

/// True if `prefix` (the first bytes a client sent) is already known to be HTTP.
fn is_http(prefix: &[u8]) -> bool {
    (prefix.len() >= 4 && HTTP_PREFIXES.iter().any(|p| &prefix[..4] == *p))
        || HTTP_STARTS.iter().any(|p| prefix.starts_with(p))
}

/// Classifies bytes that failed (or cannot become) an init.
fn classify_bad(prefix: &[u8]) -> CloseReason {
    if is_http(prefix) {
        CloseReason::HttpRequest
    } else if prefix.len() >= 3 && prefix[0] == 0x16 && prefix[1] == 0x03 && prefix[2] <= 0x04 {
        CloseReason::TlsClientHello
    } else {
        CloseReason::BadInit
    }
}

impl Conn {
    pub(super) fn step_handshake(&mut self, ctx: &mut Ctx<'_>) -> Step {
        let Phase::Handshake(h) = &mut self.phase else {
            return Step::Wait;
        };
        if !self.client_ready.read {
            return Step::Wait;
        }
        match read_once(&mut self.client, &mut h.init[h.got..]) {
            Io::Blocked => {
                self.client_ready.read = false;
                return Step::Wait;
            }
            Io::Eof => return Step::Close(CloseReason::HandshakeEof),
            Io::Failed(_) => return Step::Close(CloseReason::ClientReset),
            Io::Done(n) => h.got += n,
        }
        if super::mask::ee_only_not_tls(&h.init[..h.got], ctx.cfg) {
            let captured = h.init[..h.got].to_vec();
            return self.start_mask(super::mask::MaskWhy::NotTls, captured, None, ctx);
        }
        if h.got >= 4 && h.got < INIT_LEN && is_http(&h.init[..h.got]) {
            return self.reject(CloseReason::HttpRequest, ctx);
        }
        if h.got < INIT_LEN {
            return Step::Progress;
        }
        let init = h.init;
        let accepted = match obfs2::accept(&init, ctx.keys) {
            Ok(a) => a,
            Err(_) => return self.reject(classify_bad(&init), ctx),
        };
        let dc = match DcId::from_index(accepted.dc) {
            Ok(dc) => dc,
            Err(_) => {
                self.log_bad(
                    CloseReason::NoRoute,
                    &format!("DC index {}", accepted.dc),
                    ctx,
                );
                return Step::Close(CloseReason::NoRoute);
            }
        };
        if !known_dc(dc, ctx.cfg) {
            self.log_bad(
                CloseReason::UnknownDc,
                &format!("DC index {} ({dc}) is not a known DC", accepted.dc),
                ctx,
            );
            return Step::Close(CloseReason::UnknownDc);
        }
        if let Some(t) = self.timer.take() {
            ctx.wheel.cancel(t);
        }
        self.info.dc = Some(dc);
        debug!(
            "client {} init ok: {} {} secret #{}",
            self.peer,
            dc,
            accepted.tag.name(),
            accepted.secret_index
        );
        let connecting = Connecting::new(accepted, dc, self.slot, self.id, ctx);
        self.phase = Phase::Connecting(Box::new(connecting));
        let idle_at = ctx.now + ctx.cfg.idle_timeout.as_millis() as u64;
        self.arm_idle(idle_at, ctx);
        Step::Progress
    }

    /// Logs a bad client once (rate-limited) and starts the bounded drain.
    fn reject(&mut self, reason: CloseReason, ctx: &mut Ctx<'_>) -> Step {
        let detail = match reason {
            CloseReason::HttpRequest => "HTTP request on the MTProto port",
            CloseReason::TlsClientHello => "TLS ClientHello on the plain MTProto port",
            _ => "init matches no secret (wrong secret or not MTProto)",
        };
        self.log_bad(reason, detail, ctx);
        let drain_ms = ctx.cfg.bad_client_drain.as_millis() as u64;
        if drain_ms == 0 {
            return Step::Close(reason);
        }
        self.arm(ctx.now + drain_ms, SessionTimer::Linger, ctx);
        self.phase = Phase::Draining(reason);
        Step::Progress
    }

    fn log_bad(&mut self, reason: CloseReason, detail: &str, ctx: &mut Ctx<'_>) {
        match ctx.bad_log.allow(ctx.now) {
            Some(suppressed) => {
                let more = if suppressed > 0 {
                    format!(" ({suppressed} similar suppressed)")
                } else {
                    String::new()
                };
                warn!("bad client {}: {}: {}{}", self.peer, reason, detail, more);
            }
            None => ctx.stats.bad_suppressed += 1,
        }
    }

    /// Reads and discards until EOF, error, or the drain deadline (armed by `reject`).
    pub(super) fn step_drain(&mut self, _ctx: &mut Ctx<'_>) -> Step {
        let Phase::Draining(reason) = self.phase else {
            return Step::Wait;
        };
        if !self.client_ready.read {
            return Step::Wait;
        }
        let mut sink = [0u8; DRAIN_CHUNK];
        match read_once(&mut self.client, &mut sink) {
            Io::Done(_) => Step::Progress,
            Io::Blocked => {
                self.client_ready.read = false;
                Step::Wait
            }
            Io::Eof | Io::Failed(_) => Step::Close(reason),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_input_is_classified() {
        assert_eq!(
            classify_bad(b"GET / HTTP/1.1\r\n"),
            CloseReason::HttpRequest
        );
        assert_eq!(classify_bad(b"POST /x"), CloseReason::HttpRequest);
        assert_eq!(
            classify_bad(&[0x16, 0x03, 0x01, 0x02, 0x00]),
            CloseReason::TlsClientHello
        );
        assert_eq!(classify_bad(&[0u8; 64]), CloseReason::BadInit);
        assert_eq!(classify_bad(b"GE"), CloseReason::BadInit);
        assert_eq!(
            classify_bad(b"CONNECT kws2.web.telegram.org:443 HTTP/1.1\r\n"),
            CloseReason::HttpRequest
        );
        assert_eq!(
            classify_bad(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"),
            CloseReason::HttpRequest
        );
        // Too short to tell from a random init yet.
        assert!(!is_http(b"CONNECT") && !is_http(b"PRI * HTTP/2.0\r"));
    }
}
