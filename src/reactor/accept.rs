//! Accepting clients: the listener's accept batches (paused on descriptor exhaustion), the
//! slab-full refusal and the mask loop check at accept (a connection whose two ends are one of
//! our own mask connections' two ends, `conn::mask::MaskConns`; through a NAT rewrite on this
//! host, its destination before the rewrite stands for our end). The listener itself (bind,
//! swap, close) is `listen`'s; the sessions are `conn`'s.

use std::io;
use std::net::SocketAddr;

use log::{error, warn};

use super::ways::EXTRA;
use super::{finish, suppressed, Accept, Global, Reactor, ACCEPT_BATCH, ACCEPT_PAUSE_MS};
use crate::config::WayIn;
use crate::conn::Conn;
use crate::error::CloseReason;
use crate::logging::RateLimited;
use crate::net::tcp;
use crate::token::Role;

impl Reactor {
    /// Accepts up to [`ACCEPT_BATCH`] clients on the proxy listener; pauses on descriptor
    /// exhaustion.
    pub(super) fn accept_batch(&mut self) {
        self.accept_on(WayIn::Proxy);
    }

    /// Accepts waiting clients of the extra ways in (`ways`), a batch each.
    pub(super) fn accept_ways(&mut self) {
        for (i, way) in EXTRA.into_iter().enumerate() {
            if self.ways.pending[i] && self.accept != Accept::Paused {
                self.accept_on(way);
            }
        }
    }

    /// Marks `way`'s listener as drained (`WouldBlock`, or gone).
    fn accept_idle(&mut self, way: WayIn) {
        match EXTRA.iter().position(|&w| w == way) {
            Some(i) => self.ways.pending[i] = false,
            None => self.accept = Accept::Idle,
        }
    }

    /// Accepts up to [`ACCEPT_BATCH`] clients on `way`'s listener.
    fn accept_on(&mut self, way: WayIn) {
        let now = self.now;
        let extra = EXTRA.iter().position(|&w| w == way);
        for _ in 0..ACCEPT_BATCH {
            let listener = match extra {
                Some(i) => self.ways.listeners[i].as_ref(),
                None => self.listener.as_ref(),
            };
            let Some(listener) = listener else {
                self.accept_idle(way);
                return;
            };
            let (stream, peer) = match listener.accept() {
                Ok(x) => x,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.accept_idle(way);
                    return;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if matches!(e.raw_os_error(), Some(23) | Some(24)) => {
                    if let Some(n) = self.fd_log.allow(now) {
                        error!(
                            "accept: {e}: out of file descriptors, pausing accepts for {ACCEPT_PAUSE_MS}ms{}",
                            suppressed(n)
                        );
                    }
                    self.accept = Accept::Paused;
                    self.globals[Global::AcceptResume as usize] = Some(now + ACCEPT_PAUSE_MS);
                    return;
                }
                Err(e) => {
                    // Per-client (a peer that reset before we took it): folded.
                    if let Some(n) = self.full_log.allow(now) {
                        warn!("accept: {e}{}", suppressed(n));
                    }
                    self.accept_idle(way);
                    return;
                }
            };
            self.s.stats.accepted += 1;
            if way == WayIn::Proxy {
                if let Some((slot, id)) = self.own_mask_conn(&stream, peer) {
                    self.mask_loop(stream, peer, slot, id);
                    continue;
                }
            }
            let dst = match way {
                WayIn::Transparent => match self.transparent_dst(&stream) {
                    Ok(dst) => Some(dst),
                    Err(why) => {
                        self.refuse_unread(stream, peer, why);
                        continue;
                    }
                },
                _ => None,
            };
            if self.slab.len() >= self.capacity {
                self.s.stats.record_close(CloseReason::SlabFull, false);
                refuse(stream, peer, self.capacity, &mut self.full_log, now);
                continue;
            }
            self.next_id = self.next_id.wrapping_add(1);
            let slot = self.slab.vacant_key();
            let mut ctx = self.s.ctx(self.poll.registry(), now);
            match Conn::accept((slot, self.next_id), stream, peer, (way, dst), &mut ctx) {
                Ok(conn) => {
                    self.slab.insert(conn);
                    // Data may already be waiting: handle it without another edge.
                    let status = self.slab[slot].on_event(Role::Client, true, true, &mut ctx);
                    finish(&mut self.slab, slot, status, &mut self.again);
                }
                Err(e) => ctx.warn_client(peer, format_args!("cannot register: {e}")),
            }
        }
    }

    /// The session whose mask connection the accepted `stream` from `peer` is, if it is one:
    /// opened from `peer` to this socket's own address, or, when a NAT rule on this host
    /// rewrote its destination to our port (an nftables `redirect`), to the destination before
    /// the rewrite. System calls only for a peer that has a live mask connection's address.
    fn own_mask_conn(
        &self,
        stream: &mio::net::TcpStream,
        peer: SocketAddr,
    ) -> Option<(usize, u32)> {
        let conns = &self.s.mask_conns;
        if !conns.has_local(peer) {
            return None;
        }
        let local = stream.local_addr().ok()?;
        conns.owner(peer, local).or_else(|| {
            let before = tcp::original_dst(stream)?;
            (before != local)
                .then(|| conns.owner(peer, before))
                .flatten()
        })
    }

    /// A client that is one of our own mask connections: the mask target leads back to this
    /// listener. Both are closed as `mask-loop`.
    fn mask_loop(&mut self, stream: mio::net::TcpStream, peer: SocketAddr, slot: usize, id: u32) {
        self.s.stats.record_close(CloseReason::MaskLoop, false);
        let _ = stream.shutdown(std::net::Shutdown::Both);
        let now = self.now;
        if let Some(n) = self.full_log.allow(now) {
            warn!(
                "refusing client {peer}: {}: it is our own mask connection (the mask host leads back to this listener){}",
                CloseReason::MaskLoop,
                suppressed(n)
            );
        }
        let Some(conn) = self.slab.get_mut(slot) else {
            return;
        };
        if conn.id != id {
            return;
        }
        let mut ctx = self.s.ctx(self.poll.registry(), now);
        let status = conn.close_mask_loop(&mut ctx);
        finish(&mut self.slab, slot, status, &mut self.again);
    }
}

/// Closes a client at once because the slab is full (rate-limited log line).
fn refuse(
    stream: mio::net::TcpStream,
    peer: SocketAddr,
    capacity: usize,
    log: &mut RateLimited,
    now: u64,
) {
    if let Some(n) = log.allow(now) {
        warn!(
            "refusing client {peer}: {} ({capacity} sessions in use; raise --max-connections or the nofile limit){}",
            CloseReason::SlabFull,
            suppressed(n)
        );
    }
    crate::logging::events::emit(|| refused_event(peer, CloseReason::SlabFull));
    let _ = stream.shutdown(std::net::Shutdown::Both);
}

/// The `refused` event of the structured stream (`logging::events`): `peer` turned away at
/// accept for `reason`, before any session.
fn refused_event(peer: SocketAddr, reason: CloseReason) -> crate::logging::events::Event {
    crate::logging::events::Event::new("refused")
        .str("peer", &peer.to_string())
        .str("reason", reason.name())
}
