//! The direct-transport handshake (docs/protocol.md §1.9): a client that reached us by
//! transparent redirection or a SOCKS5 CONNECT sends Telegram's *direct* transport — no proxy
//! secret — meant for the DC address `dst`. This phase reads its first bytes within the
//! handshake deadline (only as many as `mtproto::direct::classify` asks for, so nothing past an
//! init or a plain transport's marker is taken from the socket), classifies them, chooses the DC
//! from the destination (`route::dc_table`: the exact table first, the init's DC index only on a
//! miss and only where it can be trusted) and hands the session to the ladder exactly like a
//! proxy client (`handshake::Conn::start_connecting`):
//!
//! ```text
//! Direct ─ secretless obfuscated2 ─► Connecting (ClientSide::Direct: the cheap relay)
//!        ─ plain ef / ee×4 / dd×4 ──► Connecting (ClientSide::Plain)
//!        ─ TLS or HTTP (transparent) ► relayed untouched to `dst` (`mask`, why `not-mtproto`)
//!        ─ no DC for `dst` ─────────► closed `unknown-dst` (counted per address for `ctl status`)
//!        ─ anything else ───────────► closed `bad-init`
//! ```
//! At the handshake deadline a transparent client whose few bytes start like HTTP or a TLS
//! record (a short request waiting for its answer) is relayed to its destination too.
//! Owns [`Direct`] (the phase's state) and the steps above; the classification is
//! `mtproto::direct`'s, the DC choice `route::dc_table`'s.

use std::net::SocketAddr;

use log::debug;

use super::mask::MaskWhy;
use super::{Conn, Ctx, Phase, Step};
use crate::config::WayIn;
use crate::error::CloseReason;
use crate::mtproto::direct::{classify, plain_marker_len, Classified};
use crate::mtproto::obfs2::INIT_LEN;
use crate::mtproto::sniff;
use crate::net::io::{read_once, Io};
use crate::relay::end::client_read_failure;
use crate::relay::ClientSide;

/// The direct handshake's state: the destination the client meant and its first bytes.
pub struct Direct {
    /// The destination: `SO_ORIGINAL_DST` (transparent) or the CONNECT request's (SOCKS5).
    dst: SocketAddr,
    /// The client's first bytes (at most an init).
    buf: [u8; INIT_LEN],
    got: usize,
    /// Bytes the client sent before this phase (pipelined after a SOCKS5 request), not yet
    /// classified: taken before the socket is read; what classification leaves of them goes
    /// to the relay.
    carry: Vec<u8>,
}

impl Direct {
    /// The phase for a client that meant `dst`, nothing read yet.
    pub fn new(dst: SocketAddr) -> Direct {
        Direct::with_carry(dst, Vec::new())
    }

    /// The phase for a client that meant `dst` and already sent `carry` (SOCKS5).
    pub fn with_carry(dst: SocketAddr, carry: Vec<u8>) -> Direct {
        Direct {
            dst,
            buf: [0; INIT_LEN],
            got: 0,
            carry,
        }
    }
}

impl Conn {
    /// Reads what `classify` needs and acts on its answer.
    pub(super) fn step_direct(&mut self, ctx: &mut Ctx<'_>) -> Step {
        let Phase::Direct(d) = &mut self.phase else {
            return Step::Wait;
        };
        let verdict = loop {
            match classify(&d.buf[..d.got]) {
                Classified::Need(n) => {
                    let want = n.clamp(d.got + 1, INIT_LEN);
                    if !d.carry.is_empty() {
                        let k = (want - d.got).min(d.carry.len());
                        d.buf[d.got..d.got + k].copy_from_slice(&d.carry[..k]);
                        d.carry.drain(..k);
                        d.got += k;
                        continue;
                    }
                    if !self.client_ready.read {
                        return Step::Wait;
                    }
                    match read_once(&mut self.client, &mut d.buf[d.got..want]) {
                        Io::Done(k) => d.got += k,
                        Io::Blocked => {
                            self.client_ready.read = false;
                            return Step::Wait;
                        }
                        Io::Eof => return Step::Close(CloseReason::HandshakeEof),
                        Io::Failed(e) => return Step::Close(client_read_failure(&e)),
                    }
                }
                other => break other,
            }
        };
        let (dst, got) = (d.dst, d.got);
        let first = d.buf;
        let carry = std::mem::take(&mut d.carry);
        match verdict {
            Classified::Need(_) => Step::Wait,
            Classified::Obfs2(accepted) => {
                let packet = Some(accepted.dc);
                let side = ClientSide::Direct {
                    init: first,
                    accepted,
                };
                self.direct_session(dst, (side, carry), packet, ctx)
            }
            Classified::Plain(tag) => {
                debug_assert_eq!(got, plain_marker_len(tag));
                self.direct_session(dst, (ClientSide::Plain(tag), carry), None, ctx)
            }
            Classified::NotMtproto if self.way == WayIn::Transparent => {
                // Web traffic to a Telegram address (its sites share the ranges): relayed
                // untouched to where the client meant it to go.
                let mut captured = first[..got].to_vec();
                captured.extend_from_slice(&carry);
                self.start_mask(MaskWhy::NotMtproto(dst), captured, None, ctx)
            }
            Classified::NotMtproto | Classified::Bad => {
                let what = if matches!(verdict, Classified::Bad) {
                    "init with no valid tag (not a direct MTProto transport)"
                } else {
                    "not MTProto (TLS or HTTP) through SOCKS5"
                };
                self.log_bad(CloseReason::BadInit, format_args!("to {dst}: {what}"), ctx);
                Step::Close(CloseReason::BadInit)
            }
        }
    }

    /// The handshake deadline fired before the first bytes were classified. A transparent
    /// client whose bytes so far start like web traffic (an HTTP method of
    /// `sniff::looks_http`, e.g. a short `PUT` waiting for its answer, or a TLS record header)
    /// is relayed to its destination with them, as `classify` would have at 64 bytes; anything
    /// else closes as `handshake-timeout`.
    pub(super) fn direct_timeout(&mut self, ctx: &mut Ctx<'_>) -> Step {
        let Phase::Direct(d) = &mut self.phase else {
            return Step::Close(CloseReason::HandshakeTimeout);
        };
        let prefix = &d.buf[..d.got];
        let web = sniff::looks_http(prefix) || sniff::tls_record_len(prefix).is_some();
        if self.way != WayIn::Transparent || !web {
            return Step::Close(CloseReason::HandshakeTimeout);
        }
        let mut captured = prefix.to_vec();
        captured.extend_from_slice(&d.carry);
        let dst = d.dst;
        self.start_mask(MaskWhy::NotMtproto(dst), captured, None, ctx)
    }

    /// Chooses the DC for `dst` (the init's DC index `packet`, `None` for a plain transport)
    /// and starts connecting with the client's `side` and the bytes it sent past its init or
    /// marker (`extra`, as sent); no DC: closed as `unknown-dst`, the address counted.
    fn direct_session(
        &mut self,
        dst: SocketAddr,
        (side, extra): (ClientSide, Vec<u8>),
        packet: Option<i16>,
        ctx: &mut Ctx<'_>,
    ) -> Step {
        let peer = self.peer;
        let Some((dc, source)) = ctx.dc_table.choose(dst.ip(), peer.ip(), packet, ctx.now) else {
            ctx.unknown_dsts.record(dst.ip(), ctx.now);
            let what = match packet {
                Some(i) => format!("{dst} is in no DC table and the init's DC index {i} cannot be trusted there (--dc-addr IP=DC adds it)"),
                None => format!("{dst} is in no DC table and a plain transport names no DC (--dc-addr IP=DC adds it)"),
            };
            self.log_bad(CloseReason::UnknownDst, format_args!("{what}"), ctx);
            return Step::Close(CloseReason::UnknownDst);
        };
        debug!(
            "client {peer} {} to {dst}: {dc} from the {}, {}",
            self.way.name(),
            source.name(),
            side.tag().name()
        );
        self.info.dc_source = Some(source);
        self.start_connecting((side, extra), dc, ctx)
    }
}
