//! Relay phase of a session: the shell around the sans-IO core (`crate::relay`).
//!
//! Owns the connected [`Upstream`] and its remembered readiness, picks the link kind from the
//! route's tier (raw TCP; one packet per message toward Telegram's front and Cloudflare-proxied
//! domains; a 1 MiB-message stream toward a Worker; raw, in fake-TLS records for `ee`, toward
//! an upstream MTProto proxy, whose init the core re-makes with its secret), and maps the core's
//! outcome to the session's [`Step`]. Byte moving, framing and the end of the session are the core's; timers (linger,
//! ping, idle) and the close line are `conn`'s. Route health is never consulted here: a running
//! session is not affected by later route state.
//!
//! One exception before the first byte: a session on a pooled upstream keeps its client's
//! request replayable (`relay::replay`) and arms `--pool-first-byte-timeout` once the client's
//! first bytes went out; if the upstream is still silent then, the ladder is told
//! ([`Observation::PooledSilent`]) and the session goes back to connecting on a fresh route with
//! the request replayed ([`Overdue::Replay`]; `timers` starts the connect phase again), or, when the request outgrew its bound, is
//! closed so the client reconnects. At most once: a retried session never takes the pool.

use super::client_io::ClientIo;
use super::{Conn, Ctx, Phase, Ready, SessionInfo, SessionTimer, Step};
use crate::buf::RelayBuf;
use crate::config::Tier;
use crate::error::CloseReason;
use crate::logging::events::Event;
use crate::mtproto::dc::DcId;
use crate::net::dial::Upstream;
use crate::relay::stall::{Effect, TcpView};
use crate::relay::{ClientSide, LinkKind, Outcome, Relay, RelayMode, Scratch, StallWatch};
use crate::rng::Rng;
use crate::route::ladder::Observation;
use crate::timer::TimerId;
use log::debug;

/// The relay phase: core, upstream socket, upstream readiness.
pub struct Relaying {
    core: Relay,
    upstream: Upstream,
    up_ready: Ready,
    /// The upstream's keepalive probe count before the freeze watch raised it, while raised
    /// (given back on relax).
    keepcnt: Option<u32>,
    /// The WS keepalive ping's timer (`timers`).
    pub(super) ping_timer: Option<TimerId>,
    /// Deadline for a pooled upstream's first byte (`--pool-first-byte-timeout`).
    first_byte_timer: Option<TimerId>,
    /// Our last WS ping: when (ms) and the bytes down then (a close right after it, before any
    /// further downstream byte, is reported to the ladder).
    pub(super) ping_sent: Option<(u64, u64)>,
    /// Watches for the upstream freezing while the client waits (docs/design.md §4 rule 7;
    /// the shell is `freeze`).
    pub(super) stall: StallWatch,
    /// The stall check's timer and the time it is armed for (re-armed when the watch's next
    /// check moves earlier).
    pub(super) stall_timer: Option<(TimerId, u64)>,
}

impl Relaying {
    /// Builds the relay for a connected upstream; the core queues the fresh relay init
    /// (docs/protocol.md §3.1) as the first bytes (its own WS message on WS tiers). `up` holds
    /// what the client sent while connecting (client-decrypted), `client_eof` whether it
    /// half-closed since; `stall` is the session's freeze watch (started with the connect).
    pub fn new(
        side: ClientSide,
        dc: DcId,
        tier: Tier,
        upstream: Upstream,
        (up, client_eof): (RelayBuf, bool),
        stall: StallWatch,
        ctx: &mut Ctx<'_>,
    ) -> Relaying {
        let kind = match (&upstream, tier) {
            (Upstream::Tcp(_) | Upstream::FakeTls(_), _) => LinkKind::Raw,
            (Upstream::Ws(_), Tier::Worker) => LinkKind::WsStream,
            (Upstream::Ws(_), _) => LinkKind::WsPackets,
        };
        let down = ctx.scratch.own_buffer(ctx.cfg.buf_size);
        let core = Relay::with_client(side, dc.relay_index(), kind, up, down, client_eof, ctx.rng);
        Relaying {
            core,
            upstream,
            up_ready: Ready {
                read: true,
                write: true,
            },
            keepcnt: None,
            ping_timer: None,
            first_byte_timer: None,
            ping_sent: None,
            stall,
            stall_timer: None,
        }
    }

    /// How the relay treats the client's bytes (`relay::RelayMode`).
    pub(super) fn mode(&self) -> RelayMode {
        self.core.mode()
    }

    /// Cancels the relay phase's own timers (the WS ping, the first-byte deadline, the stall
    /// check): the session closes or the relay is rewound.
    pub(super) fn cancel_timers(&mut self, ctx: &mut Ctx<'_>) {
        let stall = self.stall_timer.take().map(|(t, _)| t);
        for t in [self.ping_timer.take(), self.first_byte_timer.take(), stall]
            .into_iter()
            .flatten()
        {
            ctx.wheel.cancel(t);
        }
    }

    /// The first-byte deadline fired (it is no longer armed).
    pub(super) fn first_byte_fired(&mut self) {
        self.first_byte_timer = None;
    }

    /// Makes the queued init the one toward an upstream MTProto proxy with secret key `key`
    /// for DC index `dc_index` (the `mtproto` tier; see [`Relay::init_toward_proxy`]).
    pub fn toward_proxy(&mut self, key: &[u8; 16], dc_index: i16, rng: &mut Rng) {
        self.core.init_toward_proxy(key, dc_index, rng);
    }

    /// Falls back from pass-through to re-encryption before the first step
    /// ([`Relay::reencrypt`]; a no-op in the other modes).
    pub fn reencrypt(&mut self, rng: &mut Rng) {
        self.core.reencrypt(rng);
    }

    /// Keeps the client's request replayable until the upstream's first byte (a pooled
    /// upstream), in a replay buffer of `scratch` if one is free once the client has sent
    /// something.
    pub fn keep_replay(&mut self, scratch: &Scratch) {
        self.core.arm_replay(scratch);
    }

    /// Remembers a readiness edge on the upstream socket.
    pub fn mark_upstream(&mut self, readable: bool, writable: bool) {
        self.up_ready.read |= readable;
        self.up_ready.write |= writable;
    }

    /// True once one side ended: the session arms its linger timer. Not while a pooled
    /// upstream's first byte is awaited: `--pool-first-byte-timeout` bounds that wait, and only
    /// its deadline replays the request of a client that half-closed after asking.
    pub fn wants_linger(&self) -> bool {
        self.core.wants_linger() && self.core.waiting_since().is_none()
    }

    /// True once the client ended its side (EOF): what it sent is flushed, the upstream's bytes
    /// still delivered during the linger.
    pub fn client_ended(&self) -> bool {
        matches!(
            self.core.end(),
            crate::relay::end::End::ClientDone | crate::relay::end::End::ShutSent
        )
    }

    /// True while upstream bytes wait for the client ([`crate::relay::Relay::waits_on_client`]).
    pub fn waits_on_client(&self) -> bool {
        self.core.waits_on_client()
    }

    /// Reason reported if the linger deadline fires.
    pub fn linger_reason(&self) -> CloseReason {
        self.core.linger_reason()
    }

    /// True while a reply is half-delivered: a packet begun and not ended ([`Relay::mid_reply`]),
    /// or a TLS record begun and not ended on the upstream socket (its bytes never reach the
    /// relay until the record is whole).
    pub fn mid_reply(&self) -> bool {
        self.core.mid_reply() || self.upstream.mid_record()
    }

    /// Ciphertext bytes the upstream's TLS layer read so far ([`Upstream::raw_in`]).
    pub fn upstream_raw_in(&self) -> u64 {
        self.upstream.raw_in()
    }

    /// Why the downstream was not MTProto, once the core found it ([`Relay::bad_reply`]).
    pub fn bad_reply(&self) -> Option<crate::relay::reply::BadReply> {
        self.core.bad_reply()
    }

    /// The kernel's view of the upstream socket (`TCP_INFO`), for the freeze watch.
    pub fn tcp_view(&mut self) -> Option<TcpView> {
        crate::net::tcp::view(self.upstream.sock())
    }

    /// Performs the freeze watch's `effect` on the upstream socket: the short keepalive armed
    /// with at least `count` probes ([`crate::relay::stall::StallBounds::probe_count`]), or
    /// the configured one (`keepalive`, `--tcp-keepalive`) and the probe count restored.
    pub fn probe_effect(&mut self, effect: Effect, keepalive: std::time::Duration, count: u32) {
        match effect {
            Effect::None => {}
            Effect::ArmProbe => {
                let had = crate::net::tcp::arm_probe(self.upstream.sock(), count);
                self.keepcnt = self.keepcnt.or(had);
            }
            Effect::Relax => {
                let had = self.keepcnt.take();
                crate::net::tcp::relax_probe(self.upstream.sock(), keepalive, had);
            }
        }
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
        client: &mut ClientIo,
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

impl Conn {
    /// After a relay step: arms the first-byte deadline once a pooled upstream got the client's
    /// first bytes, and cancels it once the upstream spoke.
    pub(super) fn watch_first_byte(&mut self, ctx: &mut Ctx<'_>) {
        let ev = self.timer_ev(SessionTimer::FirstByte);
        let Phase::Relay(r) = &mut self.phase else {
            return;
        };
        match (r.core.waiting_since(), r.first_byte_timer) {
            (Some(since), None) => {
                let at = since + ctx.cfg.pool_first_byte_timeout.as_millis() as u64;
                r.first_byte_timer = Some(ctx.wheel.insert(at, ev));
            }
            (None, Some(t)) => {
                ctx.wheel.cancel(t);
                r.first_byte_timer = None;
            }
            _ => {}
        }
    }

    /// The first-byte deadline fired: if the pooled upstream is still silent, blame it and
    /// hand the request back for a replay on a fresh route (or close when it cannot be
    /// replayed).
    pub(super) fn first_byte_overdue(&mut self, ctx: &mut Ctx<'_>) -> Overdue {
        let timeout = ctx.cfg.pool_first_byte_timeout.as_millis() as u64;
        let (Phase::Relay(r), Some(route), Some(dc)) = (&self.phase, self.info.route, self.info.dc)
        else {
            return Overdue::Step(Step::Progress);
        };
        if !r.core.silent_past(timeout, ctx.now) {
            return Overdue::Step(Step::Progress);
        }
        let obs = Observation::PooledSilent {
            route,
            taken_at: self.info.connected_ms.unwrap_or(ctx.now),
        };
        ctx.ladder.observe(obs, ctx.now);
        if !r.core.replayable() {
            let sent = self.info.meter.bytes_up;
            ctx.warn_client(
                self.peer,
                format_args!(
                    "{dc}: pooled upstream {} sent nothing within {timeout}ms and the request \
                     ({sent} bytes) is too large to replay, closing so the client retries",
                    self.info.target.trim_end_matches(" (pooled)")
                ),
            );
            return Overdue::Step(Step::Close(CloseReason::UpstreamSilent));
        }
        match self.rewind_relay(timeout, dc, ctx) {
            Some(resume) => Overdue::Replay(Box::new(resume), dc),
            None => Overdue::Step(Step::Close(CloseReason::UpstreamSilent)),
        }
    }

    /// Drops the silent pooled upstream and the old relay's timers and watches; returns the
    /// client's request to replay (`None`: nothing can be replayed after all).
    fn rewind_relay(
        &mut self,
        timeout: u64,
        dc: crate::mtproto::dc::DcId,
        ctx: &mut Ctx<'_>,
    ) -> Option<crate::relay::Resume> {
        let peer = self.peer;
        let Phase::Relay(r) = std::mem::replace(&mut self.phase, Phase::Closed) else {
            unreachable!("the phase was Relay just above");
        };
        let mut r = *r;
        // Its ping timer (its first-byte deadline just fired) and last ping go with it.
        r.cancel_timers(ctx);
        let Relaying {
            core, mut upstream, ..
        } = r;
        let resume = core.rewind(ctx.scratch);
        upstream.shutdown();
        drop(upstream);
        // `replayable` said yes a moment ago; `None`: nothing can be replayed after all.
        let resume = resume?;
        // A linger begun by a half-close is not the new relay's (the old relay's own timers —
        // ping, first byte, stall check — went with it above; its freeze watch too: the caller
        // starts a fresh one, the silence so far was the dead upstream's).
        if let Some(t) = self.timer.take() {
            ctx.wheel.cancel(t);
        }
        ctx.stats.pool_retries += 1;
        ctx.warn_client(
            peer,
            format_args!(
                "{dc}: pooled upstream {} sent nothing within {timeout}ms, replaying the request \
                 ({} bytes) on a fresh route",
                self.info.target.trim_end_matches(" (pooled)"),
                resume.up.len()
            ),
        );
        debug!("client {peer} {dc}: retrying after a silent pooled upstream");
        crate::logging::events::emit(|| Event::new("replay").str("peer", &peer.to_string()));
        // Until the retry connects (start_relay names the new upstream), the close line says so.
        let label = self.info.target.trim_end_matches(" (pooled)").to_string();
        self.info.target = format!("{label} (pooled, retrying)");
        self.info.route = None;
        self.info.connected_ms = None;
        self.info.connect_rtt = None;
        Some(resume)
    }
}

/// What a pooled upstream's overdue first byte leads to.
pub(super) enum Overdue {
    /// Go on (not silent after all) or close.
    Step(Step),
    /// The request of the session on DC `.1`, to replay on a fresh route: the session goes
    /// back to connecting (`Connecting::retry`). Boxed: the client's keys are ~2 KiB.
    Replay(Box<crate::relay::Resume>, crate::mtproto::dc::DcId),
}
