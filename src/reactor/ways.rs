//! The extra ways in (docs/protocol.md §1.9): the transparent-mode listener (`--transparent`)
//! and the SOCKS5 listener (`--socks5`), beside the proxy listener (`listen`). Owns their
//! lifecycle — bound at start (an error is fatal and names the address), added, moved or
//! removed by a reload (a new address is bound before the old listener closes; live sessions
//! are untouched), closed by the drain — and the transparent guard at accept: the original
//! destination (`SO_ORIGINAL_DST` / `IP6T_SO_ORIGINAL_DST`, `net::tcp::original_dst`) must
//! exist, must not be one of our own listeners (a loop, or a connection that reached the port
//! with no redirect) and must be inside Telegram's ranges (`route::tgranges`: a scan or a
//! redirect we did not ask for is closed unread). Accepting itself is `accept`'s.

use std::io;
use std::net::SocketAddr;

use log::{info, warn};
use mio::net::TcpListener;
use mio::{Interest, Registry};

use super::{suppressed, Reactor};
use crate::config::{Config, WayIn};
use crate::conn::mask::is_loop;
use crate::error::CloseReason;
use crate::net::tcp;
use crate::token::WAY_LISTENERS;

/// The extra ways in, in the order of their listeners' tokens (`token::WAY_LISTENERS`).
pub(super) const EXTRA: [WayIn; 2] = [WayIn::Transparent, WayIn::Socks5];

/// The extra listeners and whether each has connections waiting.
#[derive(Default)]
pub(super) struct Ways {
    /// `[0]` transparent, `[1]` SOCKS5 ([`EXTRA`]); `None` when off or draining.
    pub(super) listeners: [Option<TcpListener>; 2],
    /// Each listener's bound address (a port 0 resolved).
    pub(super) bound: [Option<SocketAddr>; 2],
    /// Readable, or the last batch ran out before `WouldBlock`.
    pub(super) pending: [bool; 2],
}

/// A reload's new listeners, bound before anything changes: per extra way, `None` = keep as
/// is, `Some(None)` = close, `Some(Some(l))` = replace with `l`.
pub(super) type Prepared = [Option<Option<TcpListener>>; 2];

/// Binds extra way `i` at `addr`. Errors: a failed bind as `listen::bind_error` words it (the
/// kind kept), or a failed registration.
fn bind(i: usize, addr: SocketAddr, registry: &Registry) -> io::Result<TcpListener> {
    let way = EXTRA[i].name();
    let (flag, what) = match EXTRA[i] {
        WayIn::Transparent => ("--transparent", " (transparent)"),
        _ => ("--socks5", " (socks5)"),
    };
    let flags = super::listen::ListenFlags {
        host: flag,
        port: flag,
        what,
    };
    let mut l = TcpListener::bind(addr).map_err(|e| super::listen::bind_error(&e, addr, flags))?;
    registry
        .register(&mut l, WAY_LISTENERS[i], Interest::READABLE)
        .map_err(|e| io::Error::other(format!("cannot register the {way} listener: {e}")))?;
    Ok(l)
}

impl Ways {
    /// Binds the configured extra listeners at start.
    ///
    /// Errors: a bind failure (`AddrInUse`, `PermissionDenied`, …), said with the address.
    pub(super) fn start(cfg: &Config, registry: &Registry) -> io::Result<Ways> {
        let mut w = Ways::default();
        for (i, way) in EXTRA.into_iter().enumerate() {
            if let Some(addr) = cfg.listen_of(way) {
                let l = bind(i, addr, registry)?;
                w.set(i, l);
            }
        }
        Ok(w)
    }

    fn set(&mut self, i: usize, l: TcpListener) {
        let addr = l.local_addr().ok();
        if let Some(a) = addr {
            info!("{} listener on {a}", EXTRA[i].name());
        }
        self.bound[i] = addr;
        self.listeners[i] = Some(l);
        self.pending[i] = true;
    }

    fn close(&mut self, i: usize, registry: &Registry) {
        if let Some(mut l) = self.listeners[i].take() {
            let _ = registry.deregister(&mut l);
            if let Some(a) = self.bound[i] {
                info!("{} listener on {a} closed", EXTRA[i].name());
            }
        }
        self.bound[i] = None;
        self.pending[i] = false;
    }

    /// Which extra way a token is the listener of.
    pub(super) fn of_token(t: mio::Token) -> Option<usize> {
        WAY_LISTENERS.iter().position(|&w| w == t)
    }

    /// Whether any extra listener has connections waiting.
    pub(super) fn any_pending(&self) -> bool {
        self.pending.iter().any(|&p| p)
    }
}

impl Reactor {
    /// Reload, step 1: binds every extra listener whose address changed (before anything
    /// changes, so a failure rejects the reload whole).
    ///
    /// Errors: the first bind failure, naming the address.
    pub(super) fn prepare_ways(&self, new: &Config) -> Result<Prepared, String> {
        let mut p: Prepared = [None, None];
        for (i, way) in EXTRA.into_iter().enumerate() {
            let (old, want) = (self.s.cfg.listen_of(way), new.listen_of(way));
            let live = self.ways.listeners[i].is_some();
            if old == want && (live || want.is_none()) {
                continue;
            }
            p[i] = Some(match want {
                None => None,
                Some(addr) => Some(bind(i, addr, self.poll.registry()).map_err(|e| e.to_string())?),
            });
        }
        Ok(p)
    }

    /// Reload, step 2: the prepared listeners replace (or close) the old ones.
    pub(super) fn swap_ways(&mut self, p: Prepared) {
        for (i, change) in p.into_iter().enumerate() {
            let Some(new) = change else { continue };
            self.ways.close(i, self.poll.registry());
            if let Some(l) = new {
                self.ways.set(i, l);
            }
        }
    }

    /// Closes every extra listener (the drain).
    pub(super) fn close_ways(&mut self) {
        for i in 0..EXTRA.len() {
            self.ways.close(i, self.poll.registry());
        }
    }

    /// The address `way`'s listener is bound to (`None`: off, draining, or not bound yet).
    pub(super) fn way_listen(&self, way: WayIn) -> Option<SocketAddr> {
        match EXTRA.iter().position(|&w| w == way) {
            Some(i) => self.ways.bound[i],
            None => self.listener.is_some().then_some(self.s.listen),
        }
    }

    /// Every address a client can reach us on (the proxy listener and the extra ones).
    fn own_listeners(&self) -> impl Iterator<Item = SocketAddr> + '_ {
        std::iter::once(self.s.listen).chain(self.ways.bound.iter().flatten().copied())
    }

    /// The transparent guard for a connection accepted on the transparent listener: its
    /// original destination, or why it is closed unread.
    pub(super) fn transparent_dst(
        &self,
        stream: &mio::net::TcpStream,
    ) -> Result<SocketAddr, (CloseReason, String)> {
        let Some(dst) = tcp::original_dst(stream) else {
            let what = "no original destination (no NAT redirect led here)".to_string();
            return Err((CloseReason::NoOriginalDst, what));
        };
        let local = stream.local_addr().ok();
        let host_has = &mut |ip| std::net::UdpSocket::bind(SocketAddr::new(ip, 0)).is_ok();
        if Some(dst) == local || self.own_listeners().any(|l| is_loop(dst, l, host_has)) {
            let what = format!("destination {dst} is our own listener");
            return Err((CloseReason::DstLoop, what));
        }
        if !self.s.tg_ranges.contains(dst.ip()) {
            let what = format!("destination {dst} is outside Telegram's ranges");
            return Err((CloseReason::NotTelegram, what));
        }
        Ok(dst)
    }

    /// Closes a connection the transparent guard refused (one folded line, counted).
    pub(super) fn refuse_unread(
        &mut self,
        stream: mio::net::TcpStream,
        peer: SocketAddr,
        (reason, what): (CloseReason, String),
    ) {
        self.s.stats.record_close(reason, false);
        if let Some(n) = self.s.unserved_log[reason.index()].allow(self.now) {
            warn!(
                "refusing transparent client {peer}: {reason}: {what}{}",
                suppressed(n)
            );
        }
        let _ = stream.shutdown(std::net::Shutdown::Both);
    }
}
