//! The SOCKS5 inbound's session phase (`--socks5`, docs/protocol.md §1.10): reads the client's
//! RFC 1928 / RFC 1929 exchange within the handshake deadline and writes our answers
//! (`net::socks5_server` decides them, sans-IO). A CONNECT is allowed only to an address the
//! exact DC table knows (`route::dc_table::DcTable::lookup`: flag, built-in or learned; never a
//! packet's word and never a subnet); any other destination gets REP 02 and is never relayed.
//! An allowed one gets the success reply at once, before anything is dialled, and the session
//! goes on as a direct-transport client of that destination (a table address of a DC we have
//! no route for gets REP 03 and a close as `unknown-dc` instead) (`direct_hs`), with the bytes the
//! client pipelined after its request carried over. Every refusal is one rate-limited line and
//! a close as `socks5-refused`.
//! Owns [`Socks`] (the phase's state) and [`Conn::step_socks`].

use std::net::SocketAddr;

use super::direct_hs::Direct;
use super::{Conn, Ctx, Phase, Step};
use crate::error::CloseReason;
use crate::net::io::{read_once, write_once, Io};
use crate::net::socks5_server::{reply, Rep, Reply, Socks5, Socks5Step, MAX_MESSAGE};
use crate::relay::end::client_read_failure;
use crate::route::table::known_dc;

/// After our reply is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Then {
    /// Read the client's next message.
    Read,
    /// Close for this reason.
    Close(CloseReason),
    /// The CONNECT to this destination was allowed: the direct handshake starts.
    Direct(SocketAddr),
}

/// The SOCKS5 phase's state: the exchange, the unconsumed client bytes, our pending reply.
pub struct Socks {
    core: Socks5,
    buf: [u8; MAX_MESSAGE],
    got: usize,
    out: Reply,
    sent: usize,
    then: Then,
}

impl Socks {
    /// A fresh exchange; `auth`: `--socks5-auth` is configured (RFC 1929 required).
    pub fn new(auth: bool) -> Socks {
        Socks {
            core: Socks5::new(auth),
            buf: [0; MAX_MESSAGE],
            got: 0,
            out: Reply::EMPTY,
            sent: 0,
            then: Then::Read,
        }
    }
}

impl Conn {
    /// Writes our pending reply, feeds the exchange, reads more; hands over to `direct_hs`
    /// after an allowed CONNECT.
    pub(super) fn step_socks(&mut self, ctx: &mut Ctx<'_>) -> Step {
        loop {
            let Phase::Socks(s) = &mut self.phase else {
                return Step::Wait;
            };
            while s.sent < s.out.as_bytes().len() {
                if !self.client_ready.write {
                    return Step::Wait;
                }
                match write_once(self.client.tcp(), &s.out.as_bytes()[s.sent..]) {
                    Io::Done(n) => s.sent += n,
                    Io::Blocked => {
                        self.client_ready.write = false;
                        return Step::Wait;
                    }
                    Io::Eof => return Step::Close(CloseReason::ClientEof),
                    Io::Failed(e) => return Step::Close(client_read_failure(&e)),
                }
            }
            match s.then {
                Then::Read => {}
                Then::Close(reason) => return Step::Close(reason),
                Then::Direct(dst) => {
                    let carry = s.buf[..s.got].to_vec();
                    self.info.dst = Some(dst);
                    self.phase = Phase::Direct(Box::new(Direct::with_carry(dst, carry)));
                    return Step::Progress;
                }
            }
            let (used, step) = s
                .core
                .advance(&s.buf[..s.got], ctx.cfg.socks5_users.as_ref());
            s.buf.copy_within(used..s.got, 0);
            s.got -= used;
            let (out, then) = match step {
                Socks5Step::Need => {
                    if !self.client_ready.read {
                        return Step::Wait;
                    }
                    match read_once(self.client.tcp(), &mut s.buf[s.got..]) {
                        Io::Done(n) => s.got += n,
                        Io::Blocked => self.client_ready.read = false,
                        Io::Eof => return Step::Close(CloseReason::HandshakeEof),
                        Io::Failed(e) => return Step::Close(client_read_failure(&e)),
                    }
                    continue;
                }
                Socks5Step::Send(r) => (r, Then::Read),
                Socks5Step::Connect(dst) => {
                    let dc = ctx.dc_table.lookup(dst.ip());
                    if dc.is_some_and(|dc| known_dc(dc, ctx.cfg)) {
                        (reply(Rep::Succeeded, None), Then::Direct(dst))
                    } else if let Some(dc) = dc {
                        // A DC address of a DC we have no route for (a test DC, say): refused
                        // before the success reply, not after it.
                        self.log_bad(
                            CloseReason::UnknownDc,
                            format_args!("CONNECT to {dst}: {dc} is not a known DC (REP 03)"),
                            ctx,
                        );
                        let close = Then::Close(CloseReason::UnknownDc);
                        (reply(Rep::NetUnreachable, None), close)
                    } else {
                        ctx.unknown_dsts.record(dst.ip(), ctx.now);
                        self.log_bad(
                            CloseReason::Socks5Refused,
                            format_args!("CONNECT to {dst}: not a Telegram DC address (REP 02)"),
                            ctx,
                        );
                        let close = Then::Close(CloseReason::Socks5Refused);
                        (reply(Rep::NotAllowed, None), close)
                    }
                }
                Socks5Step::Refuse(r, why) => {
                    self.log_bad(CloseReason::Socks5Refused, format_args!("{why}"), ctx);
                    (r, Then::Close(CloseReason::Socks5Refused))
                }
            };
            let Phase::Socks(s) = &mut self.phase else {
                return Step::Wait;
            };
            (s.out, s.sent, s.then) = (out, 0, then);
        }
    }
}
