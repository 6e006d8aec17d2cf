//! Client sessions: one slab slot each, a hand-written state machine per session.
//!
//! ```text
//! accept ─► Pre ─► Handshake ─► Connecting ─► Relay ─► (closed, one log line)
//!   │        │ │       │ bad init  ▲  │ all attempts failed
//!   │        │ │       ├─► Mask ───┼──┼────────────────► closed (masked, one log line)
//!   │        │ ├─► Direct ─────────┤  (transparent: its original destination; web → Mask)
//!   │        │ └─► Socks ─► Direct ┘  (SOCKS5: CONNECT to a DC address only)
//!   ▼        ▼         ▼           ▼
//! refused  closed   Draining ───► closed
//! ```
//! `proxy_step` reads the PROXY header (`--proxy-protocol`, proxy listener only) and admits the
//! client's address (`per_ip`, released once at close; shared by every way in); `mask` relays a
//! client that is not ours (a fake-TLS hello not ours, not TLS on an ee-only port) to the mask
//! host, and a transparent client's web traffic untouched to its destination. `handshake` reads
//! and checks a proxy client's 64-byte init (after the fake-TLS handshake for `ee` secrets);
//! `direct_hs` a direct client's first bytes (transparent mode, SOCKS5: no secret, the DC from
//! the destination) and `socks_step` the SOCKS5 exchange before them; all three hand over to
//! connecting with the client's side (`relay::ClientSide`: a direct client gets the cheap
//! relay). `race` is the sans-IO core
//! of the connect phase (which candidate of the ladder's plan is dialled when, the hedge, the
//! budget, the losers' fate) and `connect` its shell; `relay` is the shell around the sans-IO
//! relay core (`crate::relay`); a session whose pooled upstream stays silent goes back from
//! Relay to Connecting, once (`relay`, `timers`). Each phase owns only its own state (boxed,
//! but for `Pre`, `Draining` and `Closed`: the slab entry stays small) and ends its own way
//! (`Phase::end`). `client_io` is the client stream every phase reads and writes:
//! the socket, plain or with the fake-TLS record layer once the handshake switched it. This
//! module owns the session struct, its timer kinds ([`SessionTimer`]), event dispatch and the
//! close path; `timers` what each timer does when it fires and how it is armed. The reactor
//! owns the slab, the poll and the clock; everything reaches a session through [`Ctx`].
//! Sessions report facts to the ladder ([`Observation`]) and decide nothing about route health;
//! existing sessions never consult route state after they are connected.

mod client_io;
mod connect;
mod direct_hs;
mod freeze;
mod handshake;
pub mod mask;
pub mod per_ip;
mod proxy_step;
mod race;
mod record;
mod relay;
mod socks_step;
mod timers;

use std::net::SocketAddr;
use std::sync::Arc;

use log::info;
use mio::net::TcpStream;
use mio::{Interest, Registry};

use crate::config::{Config, Tier, WayIn};
use crate::dns::Resolver;
use crate::error::{CloseReason, Failure, Freeze};
use crate::logging::{fold_key, Folds, RateLimited};
use crate::mtproto::dc::DcId;
use crate::mtproto::faketls::gate::{EeKey, Gate};
use crate::net::dial::{set_keepalive, Upstream};
use crate::net::outbound::Outbound;
use crate::relay::stall::StallBounds;
use crate::relay::{Meter, RelayMode, Scratch, StallWatch};
use crate::rng::Rng;
use crate::route::dc_table::{DcSource, DcTable, UnknownDsts};
use crate::route::ladder::{Ladder, Observation, SessionEnd};
use crate::route::prober::Prober;
use crate::stats::{human_bytes, Stats};
use crate::timer::{TimerId, Wheel};
use crate::token::{self, Role};

use client_io::ClientIo;
use connect::Connecting;
pub use handshake::log_clock_events;
use relay::Relaying;

/// Rounds of read/process/write per wake-up before yielding to other sessions.
pub const PUMP_ROUNDS: usize = 16;

/// What a session timer is for. Every session timer carries slot and connection id
/// ([`TimerEv`]); stale ones are dropped by the reactor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SessionTimer {
    /// The client's init deadline.
    Handshake,
    /// Upstream attempt `i`'s deadline.
    Attempt(u8),
    /// Start the next route in parallel (hedge).
    Hedge,
    /// The whole connect phase's deadline.
    Budget,
    /// Attempt slot `i`'s paced handshake may start now.
    Pace(u8),
    /// Send a WS keepalive ping if the session is still idle (see `Conn::arm_ping`).
    Ping,
    /// Idle check (lazily re-armed).
    Idle,
    /// End of a bad client's drain, or of the post-close linger.
    Linger,
    /// A pooled upstream's first byte is overdue (`--pool-first-byte-timeout`).
    FirstByte,
    /// The stall watch's deadline: check whether the upstream stalled (`relay::StallWatch`).
    Stall,
    /// A masked session's connect deadline, then its idle check (`mask`).
    Mask,
}

/// A timer entry of the wheel: which session armed it and what for.
#[derive(Clone, Copy, Debug)]
pub struct TimerEv {
    /// Slab slot.
    pub slot: u32,
    /// Connection id of the session that armed it.
    pub conn_id: u32,
    /// What it is for.
    pub kind: SessionTimer,
}

/// Borrows of reactor-owned state a session may use while handling one event.
pub struct Ctx<'a> {
    /// Milliseconds on the reactor's monotonic clock, read once per loop iteration.
    pub now: u64,
    /// Run configuration.
    pub cfg: &'a Config,
    /// Raw 16-byte keys of `cfg.secrets`, in order.
    pub keys: &'a [[u8; 16]],
    /// For registering upstream sockets.
    pub registry: &'a Registry,
    /// Session timers.
    pub wheel: &'a mut Wheel<TimerEv>,
    /// Randomness for relay inits and WS masks.
    pub rng: &'a mut Rng,
    /// Shared TLS client config.
    pub tls: &'a Arc<rustls::ClientConfig>,
    /// Counters.
    pub stats: &'a mut Stats,
    /// Folds repeated bad-client log lines.
    pub bad_log: &'a mut RateLimited,
    /// Our own listen address (never dialled).
    pub listen: SocketAddr,
    /// Every route decision; sessions report what they saw to it.
    pub ladder: &'a mut Ladder<Upstream>,
    /// Background jobs (a hedge loser is handed over to finish there).
    pub prober: &'a mut Prober,
    /// Non-blocking resolver (cache lookups only on a client's path).
    pub dns: &'a mut Resolver,
    /// The outbound setting every dial takes (`--outbound-proxy`; `None` = direct).
    pub outbound: Option<&'a Outbound>,
    /// Folds repeated attempt-failure lines, per tier and failure class.
    pub attempt_log: &'a mut Folds,
    /// Folds every other per-client warning (could not start, budget, every route failed),
    /// per call site ([`Ctx::warn_client`]).
    pub client_log: &'a mut Folds,
    /// The reactor's large relay buffer, lent to one session step at a time.
    pub scratch: &'a mut Scratch,
    /// Folds the close lines of sessions that never reached an upstream (the storm cases:
    /// every route failed, the connect budget, no descriptors, clients that leave while we
    /// connect), one limiter per [`CloseReason::index`].
    pub unserved_log: &'a mut [RateLimited; CloseReason::ALL.len()],
    /// Per-client-address limits (`per_ip`): admitted after the PROXY header / at accept,
    /// released at close.
    pub per_ip: &'a mut per_ip::PerIp,
    /// Our live mask connections by both ends, for the loop checks at accept and after a
    /// PROXY header (`mask::MaskConns`).
    pub mask_conns: &'a mut mask::MaskConns,
    /// Unix seconds on the wall clock, read by the reactor once per loop iteration (like `now`)
    /// while an `ee` secret of ours or an `ee` upstream proxy is configured; only fake-TLS
    /// timestamps use it (the gate's checks, the hello a dial signs).
    pub wall_s: u64,
    /// The fake-TLS gate (replay cache, clock trust, `--tls-time-window`), one per process.
    pub gate: &'a mut Gate,
    /// The `ee` secrets of `cfg.secrets` as the gate sees them, in order (empty: no fake-TLS).
    pub ee_keys: &'a [EeKey],
    /// Exact address → DC for direct-transport clients (`route::dc_table`), with its learner.
    pub dc_table: &'a mut DcTable,
    /// Destinations direct clients meant that found no DC, for `ctl status`.
    pub unknown_dsts: &'a mut UnknownDsts,
}

impl Ctx<'_> {
    /// Logs a per-client warning `client PEER MSG` at most once per `--log-fold-interval` per
    /// kind; the ones folded in between are counted in the next line. The kind is the call
    /// site (each site writes one kind of line), so a flood of one kind never hides another.
    #[track_caller]
    pub fn warn_client(&mut self, peer: SocketAddr, msg: std::fmt::Arguments<'_>) {
        let site = std::panic::Location::caller();
        let key = fold_key(site.file()) ^ (u64::from(site.line()) << 20 | u64::from(site.column()));
        if let Some(folded) = self.client_log.allow(key, self.now) {
            if folded > 0 {
                log::warn!("client {peer} {msg} ({folded} similar suppressed)");
            } else {
                log::warn!("client {peer} {msg}");
            }
        }
    }
}

/// Result of handling an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Waiting for I/O or timers.
    Idle,
    /// Has more work (fairness cap hit); the reactor calls [`Conn::resume`] soon.
    Again,
    /// Finished: remove from the slab (the close line was already logged).
    Closed,
}

enum Phase {
    /// Reading and checking the init (boxed: its buffers are ~128 bytes; a held relaying
    /// session's slab entry does not carry them).
    Handshake(Box<handshake::Handshake>),
    Draining(CloseReason),
    Connecting(Box<Connecting>),
    Relay(Box<Relaying>),
    Closed,
    /// Before the handshake: the PROXY header, the per-client-address admission (`proxy_step`).
    Pre(proxy_step::PreHandshake),
    /// Relayed to the mask host (`mask`), or untouched to a transparent client's destination.
    Mask(Box<mask::Masking>),
    /// A direct-transport client's first bytes (`direct_hs`): transparent mode, or SOCKS5
    /// after its CONNECT.
    Direct(Box<direct_hs::Direct>),
    /// A SOCKS5 client's exchange (`socks_step`), before its direct transport.
    Socks(Box<socks_step::Socks>),
}

impl Phase {
    /// Ends a closing session's phase, each its own way: a connect race is cancelled (losers
    /// finish as pool fills), a relay cancels its own timers, gives its large buffer back and
    /// says goodbye upstream, a
    /// masked session is handed back for its own close (`mask_closed`).
    fn end(self, ctx: &mut Ctx<'_>) -> Option<Box<mask::Masking>> {
        match self {
            Phase::Mask(m) => return Some(m),
            Phase::Connecting(mut c) => c.cancel_all(ctx),
            Phase::Relay(mut r) => {
                r.cancel_timers(ctx);
                r.release(ctx.scratch);
                r.shutdown();
            }
            Phase::Handshake(_)
            | Phase::Draining(_)
            | Phase::Closed
            | Phase::Pre(_)
            | Phase::Direct(_)
            | Phase::Socks(_) => {}
        }
        None
    }
}

pub use crate::relay::Ready;

/// One client session.
pub struct Conn {
    /// Connection id (wrapping counter), carried by tokens and timers.
    pub id: u32,
    slot: usize,
    client: ClientIo,
    client_ready: Ready,
    peer: SocketAddr,
    started: u64,
    phase: Phase,
    timer: Option<TimerId>,
    idle_timer: Option<TimerId>,
    last_activity: u64,
    info: SessionInfo,
    /// What the per-client-address admission gave this session (`per_ip`): given back at
    /// close, once. [`per_ip::Held::MaskSlot`]: over a limit, handled like a client that is
    /// not ours (masked whatever it sends).
    per_ip: per_ip::Held,
    /// Timer settings kept from the start, whatever a reload changes (`timers::Kept`).
    kept: timers::Kept,
    /// How the client reached us (its listener).
    way: WayIn,
}

/// What the close line reports.
#[derive(Default)]
struct SessionInfo {
    dc: Option<DcId>,
    tier: Option<Tier>,
    route: Option<usize>,
    /// The first downstream byte was reported to the ladder.
    first_byte_reported: bool,
    /// When the upstream's dial began (for a pooled upstream, its fill's), ms.
    dial_started: u64,
    /// Connect RTT of a dialled upstream; `None` for a pooled one.
    connect_rtt: Option<u64>,
    target: String,
    connected_ms: Option<u64>,
    /// Payload counters (the relay's, plus what was read while connecting).
    meter: Meter,
    /// The upstream froze (`relay::stall`): how, and the bytes down by then.
    froze: Option<(Freeze, u64)>,
    /// A direct client's destination (transparent: `SO_ORIGINAL_DST`; SOCKS5: its CONNECT).
    dst: Option<SocketAddr>,
    /// Where a direct client's DC came from (`route::dc_table`).
    dc_source: Option<DcSource>,
    /// How the relay treats the client's bytes, once relaying.
    relay_mode: Option<RelayMode>,
}

/// The freeze watch's bounds from `cfg` (`--stall-timeout`, `--stall-ack-timeout`,
/// `--stall-give-up`), ms.
pub(crate) fn stall_bounds(cfg: &Config) -> StallBounds {
    StallBounds {
        silent_ms: cfg.stall_timeout.as_millis() as u64,
        ack_ms: cfg.stall_ack_timeout.as_millis() as u64,
        give_up_ms: cfg.stall_give_up.as_millis() as u64,
    }
}

impl Conn {
    /// Registers a client accepted on `way`'s listener and arms its handshake deadline; `dst`
    /// is a transparent client's original destination (checked by the caller).
    ///
    /// Errors: registration failed (the socket is dropped by the caller's return).
    pub fn accept(
        (slot, id): (usize, u32),
        mut client: TcpStream,
        peer: SocketAddr,
        (way, dst): (WayIn, Option<SocketAddr>),
        ctx: &mut Ctx<'_>,
    ) -> std::io::Result<Conn> {
        let _ = client.set_nodelay(true);
        set_keepalive(&client, ctx.cfg.tcp_keepalive);
        ctx.registry.register(
            &mut client,
            token::encode(slot, id, Role::Client),
            Interest::READABLE | Interest::WRITABLE,
        )?;
        let deadline = ctx.now + ctx.cfg.handshake_timeout.as_millis() as u64;
        let timer = ctx.wheel.insert(
            deadline,
            TimerEv {
                slot: slot as u32,
                conn_id: id,
                kind: SessionTimer::Handshake,
            },
        );
        Ok(Conn {
            id,
            slot,
            client: ClientIo::plain(client),
            client_ready: Ready::default(),
            peer,
            started: ctx.now,
            phase: Phase::Pre(proxy_step::PreHandshake::new(
                ctx.cfg.proxy_protocol && way == WayIn::Proxy,
            )),
            timer: Some(timer),
            idle_timer: None,
            last_activity: ctx.now,
            info: SessionInfo {
                dst,
                ..SessionInfo::default()
            },
            per_ip: per_ip::Held::Nothing,
            kept: timers::Kept::of(ctx.cfg),
            way,
        })
    }

    /// Handles a readiness edge for one of this session's sockets.
    pub fn on_event(
        &mut self,
        role: Role,
        readable: bool,
        writable: bool,
        ctx: &mut Ctx<'_>,
    ) -> Status {
        match role {
            Role::Client => {
                self.client_ready.read |= readable;
                self.client_ready.write |= writable;
            }
            Role::Up(i) => match &mut self.phase {
                Phase::Connecting(c) => c.mark_ready(i, readable, writable),
                Phase::Relay(r) => r.mark_upstream(readable, writable),
                Phase::Mask(m) => m.mark_up(readable, writable),
                _ => {}
            },
            Role::Probe => {}
        }
        self.resume(ctx)
    }

    /// Runs the state machine until it waits, finishes, or hits the fairness cap.
    pub fn resume(&mut self, ctx: &mut Ctx<'_>) -> Status {
        for _ in 0..PUMP_ROUNDS {
            let step = match &mut self.phase {
                Phase::Handshake(_) => self.step_handshake(ctx),
                Phase::Draining(_) => self.step_drain(ctx),
                Phase::Connecting(_) => self.step_connecting(ctx),
                Phase::Relay(_) => self.step_relay(ctx),
                Phase::Closed => return Status::Closed,
                Phase::Pre(_) => self.step_pre(ctx),
                Phase::Mask(_) => self.step_mask(ctx),
                Phase::Direct(_) => self.step_direct(ctx),
                Phase::Socks(_) => self.step_socks(ctx),
            };
            match step {
                Step::Wait => return Status::Idle,
                Step::Progress => continue,
                Step::Close(reason) => {
                    self.close(reason, ctx);
                    return Status::Closed;
                }
            }
        }
        Status::Again
    }

    /// Tells the ladder the first downstream byte arrived (once): the whole path works.
    fn report_first_byte(&mut self, ctx: &mut Ctx<'_>) {
        if self.info.first_byte_reported || self.info.meter.first_down_ms.is_none() {
            return;
        }
        let Some(route) = self.info.route else { return };
        self.info.first_byte_reported = true;
        let obs = Observation::FirstByte {
            route,
            dial_started: self.info.dial_started,
            rtt_ms: self.info.connect_rtt,
        };
        ctx.ladder.observe(obs, ctx.now);
    }

    /// Ends the session: cancels timers, reports the end to the ladder, ends the phase (each
    /// phase its own way: [`Phase::end`]), updates counters and logs the close line. Sockets
    /// are closed when the `Conn` is dropped by the reactor.
    fn close(&mut self, reason: CloseReason, ctx: &mut Ctx<'_>) {
        if matches!(self.phase, Phase::Closed) {
            return;
        }
        let timers = [self.timer.take(), self.idle_timer.take()];
        for t in timers.into_iter().flatten() {
            ctx.wheel.cancel(t);
        }
        self.session_verdicts(reason, ctx);
        ctx.per_ip.end(std::mem::take(&mut self.per_ip), ctx.now);
        self.report_end(reason, ctx);
        let masked = std::mem::replace(&mut self.phase, Phase::Closed).end(ctx);
        let _ = self.client.tcp().shutdown(std::net::Shutdown::Both);
        let zero = self.info.meter.bytes_down == 0 && reason.side() == crate::error::Side::Client;
        ctx.stats
            .record_close(reason, zero && self.info.dc.is_some());
        ctx.stats.bytes_up += self.info.meter.bytes_up;
        ctx.stats.bytes_down += self.info.meter.bytes_down;
        crate::logging::events::emit(|| self.record(reason, masked.as_deref()));
        if let Some(m) = masked {
            return self.mask_closed(*m, reason, ctx);
        }
        if self.info.dc.is_none() {
            // Never got past the handshake: the bad-client line (if any) was already logged.
            log::debug!("client {} closed before a session: {reason}", self.peer);
            return;
        }
        self.close_line(reason, ctx);
    }

    /// Tells the ladder how a connected session ended ([`Observation::SessionEnded`]): by the
    /// upstream or not, and right after our WS ping or not.
    fn report_end(&mut self, reason: CloseReason, ctx: &mut Ctx<'_>) {
        let (Some(route), Some(connected_at)) = (self.info.route, self.info.connected_ms) else {
            return;
        };
        let by_upstream = matches!(
            reason,
            CloseReason::UpstreamEof | CloseReason::UpstreamReset | CloseReason::WsClose(_)
        );
        let short_ms = ctx.cfg.short_session.as_millis() as u64;
        let after_ping = by_upstream
            && self.ping_sent().is_some_and(|(at, down)| {
                down == self.info.meter.bytes_down && ctx.now.saturating_sub(at) <= short_ms
            });
        let end = SessionEnd {
            connected_at,
            bytes_up: self.info.meter.bytes_up,
            bytes_down: self.info.meter.bytes_down,
            by_upstream,
            after_ping,
            pooled: self.info.connect_rtt.is_none(),
        };
        ctx.ladder
            .observe(Observation::SessionEnded { route, end }, ctx.now);
    }

    /// The close line of a session that got past the handshake: always for one that relayed,
    /// folded for one that never reached an upstream.
    fn close_line(&mut self, reason: CloseReason, ctx: &mut Ctx<'_>) {
        let dur = ctx.now.saturating_sub(self.started);
        let ttfb = match self.info.meter.first_down_ms {
            Some(t) => format!("{}ms", t.saturating_sub(self.started)),
            None => "-".to_string(),
        };
        let connect = match self.info.connected_ms {
            Some(t) => format!("{}ms", t.saturating_sub(self.started)),
            None => "-".to_string(),
        };
        // A session that relayed is logged always (one line per real session); one that never
        // reached an upstream is a storm case a client can repeat at will: folded, and counted
        // per reason in the stats line anyway.
        let mut folded = String::new();
        if self.info.connected_ms.is_none() {
            match ctx.unserved_log[reason.index()].allow(ctx.now) {
                Some(0) => {}
                Some(n) => folded = format!(" ({n} similar folded)"),
                None => return,
            }
        }
        let froze = match self.info.froze {
            Some((f, at)) => format!(" froze={f}@{}", human_bytes(at)),
            None => String::new(),
        };
        let way = match (self.way, self.info.dst) {
            (WayIn::Proxy, _) => String::new(),
            (w, Some(dst)) => format!(" {} to {dst}", w.name()),
            (w, None) => format!(" {}", w.name()),
        };
        // The `cfproxy-ws` tier's leg had no TLS of ours: said on the line itself.
        let plain = match self.info.tier {
            Some(t) if t.is_plain() => " (ws://, no TLS)",
            _ => "",
        };
        info!(
            "session {}{}{way} {} via {} {}{plain} connect={} ttfb={} up={} down={} dur={:.1}s closed-by={} reason={}{froze}{folded}",
            self.peer,
            if self.client.is_fake_tls() { " fake-TLS" } else { "" },
            self.info.dc.map(|d| d.label()).unwrap_or_else(|| "-".into()),
            self.info.tier.map(|t| t.name()).unwrap_or("-"),
            if self.info.target.is_empty() { "-" } else { &self.info.target },
            connect,
            ttfb,
            human_bytes(self.info.meter.bytes_up),
            human_bytes(self.info.meter.bytes_down),
            dur as f64 / 1000.0,
            reason.side().name(),
            reason,
        );
    }
}

impl Conn {
    /// One relay step: moves bytes both ways, arms the linger when one side ended, reports
    /// the first downstream byte.
    fn step_relay(&mut self, ctx: &mut Ctx<'_>) -> Step {
        let Phase::Relay(r) = &mut self.phase else {
            return Step::Wait;
        };
        let before = self.info.meter.bytes_up + self.info.meter.bytes_down;
        let step = r.step(
            &mut self.client,
            &mut self.client_ready,
            &mut self.info,
            ctx.scratch,
            ctx.now,
            ctx.rng,
        );
        let wants_linger = r.wants_linger();
        if self.info.meter.bytes_up + self.info.meter.bytes_down != before {
            self.last_activity = ctx.now;
        }
        // Downstream progress for the freeze watch: payload relayed, plus ciphertext the TLS
        // layer read (a reply crawling in on a slow path is not a silence, though no whole
        // record has reached the relay yet).
        let up = self.info.meter.bytes_up;
        let down = self.info.meter.bytes_down + r.upstream_raw_in();
        let (mid_reply, on_client) = (r.mid_reply(), r.waits_on_client());
        let effect = r.stall.observe(ctx.now, (up, down), mid_reply, on_client);
        let probes = r.stall.bounds().probe_count();
        r.probe_effect(effect, ctx.cfg.tcp_keepalive, probes);
        let client_ended = r.client_ended();
        self.arm_stall(ctx);
        if wants_linger && self.timer.is_none() {
            self.arm(ctx.now + self.kept.linger_ms(), SessionTimer::Linger, ctx);
            if client_ended {
                // The client left: whether it gave up on a frozen upstream is judged now, not
                // a linger later (its reconnect must already find the route doubted).
                self.client_left(ctx);
            }
        }
        self.report_first_byte(ctx);
        self.watch_first_byte(ctx);
        step
    }
}

/// Outcome of one state-machine step.
enum Step {
    /// Blocked on I/O or a timer.
    Wait,
    /// Made progress; run another round.
    Progress,
    /// Close the session for this reason.
    Close(CloseReason),
}

impl Conn {
    /// Over a per-client limit and handled like a client that is not ours (`per_ip`,
    /// `--per-ip-mask`).
    fn over_limit(&self) -> bool {
        self.per_ip == per_ip::Held::MaskSlot
    }

    /// How the client reached us.
    pub fn way(&self) -> WayIn {
        self.way
    }

    /// The DC of a session past its handshake (`None` before).
    pub fn dc(&self) -> Option<DcId> {
        self.info.dc
    }

    /// The tier this session is relaying over now; `None` while it is still connecting.
    pub fn relaying_tier(&self) -> Option<Tier> {
        self.info.connected_ms.and(self.info.tier)
    }

    /// True while this session relays and holds upstream bytes its client has not taken yet
    /// (a slow reader; `relay::Relay::waits_on_client`), for `ctl status`.
    pub fn waits_on_client(&self) -> bool {
        matches!(&self.phase, Phase::Relay(r) if r.waits_on_client())
    }
}

#[cfg(test)]
mod size_tests {
    /// The slab holds one `Conn` per session: prints its size (and its phases') for the
    /// memory-per-session budget (`cargo test --lib conn_sizes -- --nocapture`).
    #[test]
    fn conn_sizes() {
        use std::mem::size_of;
        println!(
            "size_of Conn={} Phase={} Connecting={} Relaying={}",
            size_of::<super::Conn>(),
            size_of::<super::Phase>(),
            size_of::<super::Connecting>(),
            size_of::<super::Relaying>()
        );
        println!(
            "size_of Handshake={} Pre={} ClientIo={} SessionInfo={} StallWatch={} Kept={} Held={}",
            size_of::<super::handshake::Handshake>(),
            size_of::<super::proxy_step::PreHandshake>(),
            size_of::<super::ClientIo>(),
            size_of::<super::SessionInfo>(),
            size_of::<super::StallWatch>(),
            size_of::<super::timers::Kept>(),
            size_of::<super::per_ip::Held>(),
        );
        // Every slab slot is a `Conn`, whatever its phase: each phase's large state is boxed
        // (`Phase` is a tag and a pointer, or `Pre`'s few words), so a slot stays small. 64-bit
        // sizes at issue 20: Conn 464, Phase 32; 32-bit targets are smaller.
        assert!(
            size_of::<super::Phase>() <= 32,
            "a phase's state is not boxed"
        );
        assert!(size_of::<super::Conn>() <= 512, "the slab entry grew");
    }
}
