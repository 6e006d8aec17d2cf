//! Relay phase of a session: the shell around the sans-IO core (`crate::relay`).
//!
//! Owns the connected [`Upstream`] and its remembered readiness, picks the link kind from the
//! route's tier (raw TCP; one packet per message toward Telegram's front and Cloudflare-proxied
//! domains; a 1 MiB-message stream toward a Worker), and maps the core's outcome to the session's
//! [`Step`]. Byte moving, framing and the end of the session are the core's; timers (linger,
//! ping, idle) and the close line are `conn`'s. Route health is never consulted here: a running
//! session is not affected by later route state.

use mio::net::TcpStream;

use super::{Ctx, Ready, SessionInfo, Step};
use crate::buf::RelayBuf;
use crate::config::Tier;
use crate::error::CloseReason;
use crate::mtproto::dc::DcId;
use crate::mtproto::obfs2::Accepted;
use crate::net::dial::Upstream;
use crate::relay::{LinkKind, Outcome, Relay, Scratch};
use crate::rng::Rng;

/// The relay phase: core, upstream socket, upstream readiness.
pub struct Relaying {
    core: Relay,
    upstream: Upstream,
    up_ready: Ready,
}

impl Relaying {
    /// Builds the relay for a connected upstream; the core queues the fresh relay init
    /// (docs/protocol.md §3.1) as the first bytes (its own WS message on WS tiers). `up` holds
    /// what the client sent while connecting (client-decrypted).
    pub fn new(
        accepted: Accepted,
        dc: DcId,
        tier: Tier,
        upstream: Upstream,
        up: RelayBuf,
        client_eof: bool,
        ctx: &mut Ctx<'_>,
    ) -> Relaying {
        let kind = match (&upstream, tier) {
            (Upstream::Tcp(_), _) => LinkKind::Raw,
            (Upstream::Ws(_), Tier::Worker) => LinkKind::WsStream,
            (Upstream::Ws(_), _) => LinkKind::WsPackets,
        };
        let down = ctx.scratch.own_buffer(ctx.cfg.buf_size);
        let core = Relay::new(
            accepted,
            dc.relay_index(),
            kind,
            up,
            down,
            client_eof,
            ctx.rng,
        );
        Relaying {
            core,
            upstream,
            up_ready: Ready {
                read: true,
                write: true,
            },
        }
    }

    /// Remembers a readiness edge on the upstream socket.
    pub fn mark_upstream(&mut self, readable: bool, writable: bool) {
        self.up_ready.read |= readable;
        self.up_ready.write |= writable;
    }

    /// True once one side ended: the session arms its linger timer.
    pub fn wants_linger(&self) -> bool {
        self.core.wants_linger()
    }

    /// Reason reported if the linger deadline fires.
    pub fn linger_reason(&self) -> CloseReason {
        self.core.linger_reason()
    }

    /// Hands a large buffer this session kept back to the reactor's scratch (on close).
    pub fn release(&mut self, scratch: &mut Scratch) {
        self.core.release(scratch);
    }

    /// Best-effort goodbye on session close: a TLS close_notify toward the upstream.
    pub fn shutdown(&mut self) {
        self.upstream.shutdown();
    }

    /// Queues a WS keepalive ping (see [`Relay::queue_ping`]); `now` in ms.
    pub fn queue_ping(&mut self, now: u64) {
        self.core.queue_ping(now);
    }

    /// One round of the relay over the client socket and the upstream.
    pub(super) fn step(
        &mut self,
        client: &mut TcpStream,
        client_ready: &mut Ready,
        info: &mut SessionInfo,
        scratch: &mut Scratch,
        now: u64,
        rng: &mut Rng,
    ) -> Step {
        let outcome = self.core.step(
            client,
            client_ready,
            &mut self.upstream,
            &mut self.up_ready,
            &mut info.meter,
            scratch,
            now,
            rng,
        );
        match outcome {
            Outcome::Wait => Step::Wait,
            Outcome::Progress => Step::Progress,
            Outcome::Close(r) => Step::Close(r),
        }
    }
}
