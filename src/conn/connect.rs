//! Connect phase: the I/O shell of the connect race (`race`), which decides.
//!
//! The ladder orders the candidates and may hand a warm pooled upstream of the best route: it is
//! taken first. Otherwise the race ([`Race`]) says which candidate to dial in which of the two
//! attempt slots, when to hedge, pace, skip a candidate behind a down outbound proxy, append
//! `front` routes (domain fronting), cut at `--connect-budget`, and what happens to the loser.
//! This module performs its [`Effect`]s: it owns the dials ([`Dial`]) and their readiness, the
//! session timers of the phase, the stats and the per-client log lines, and answers the race's
//! route questions from the ladder ([`Routes`]). A WebSocket loser finishes in the background as
//! a pool fill (`Prober::take_loser`); every dial through the outbound proxy that got past it
//! reports that the proxy works. Client bytes that arrive meanwhile are decrypted into the
//! session's upstream buffer. A session whose pooled upstream stayed silent comes back here
//! once ([`Connecting::retry`], from `timers`): a fresh plan without the pool, its replayed
//! request in the buffer. On a winner the session switches to the relay phase (`relay`). This
//! module reports what happened ([`Observation`]); it decides nothing about health.

use std::net::SocketAddr;

use log::debug;

use crate::relay::StallWatch;

mod effects;

use super::race::{self, Effect, Origin, Race, Winner};
use super::relay::Relaying;
use super::{Conn, Ctx, Phase, Ready, SessionTimer, Step, TimerEv};
use crate::buf::RelayBuf;
use crate::error::CloseReason;
use crate::mtproto::dc::DcId;
use crate::net::dial::{Dial, DialStep, Upstream};
use crate::net::io::{read_once, Io};
use crate::relay::end::client_read_failure;
use crate::relay::ClientSide;
use crate::relay::Scratch;
use crate::route::ladder::{Observation, RouteId};
use crate::timer::TimerId;
use crate::token::{self, Role};
use effects::{cancel, View};

/// A dial in flight and its remembered readiness (boxed in its slot: a dial is ~300 bytes).
struct Attempt {
    dial: Dial,
    ready: Ready,
}

/// A warm upstream taken from the best route's pool, with when its dial began.
struct Pooled {
    route: RouteId,
    up: Upstream,
    dial_started: u64,
}

/// Whose timers and log lines these are: the session's slab slot, id and client address.
#[derive(Clone, Copy)]
struct Who {
    slot: u32,
    id: u32,
    peer: SocketAddr,
}

impl Who {
    fn ev(&self, kind: SessionTimer) -> TimerEv {
        TimerEv {
            slot: self.slot,
            conn_id: self.id,
            kind,
        }
    }
}

/// State of the connect phase: the race and what the shell holds for it.
pub struct Connecting {
    /// The client's side as its handshake found it (a proxy client's ciphers, or a direct
    /// client's own init or plain transport: `relay::ClientSide`).
    side: ClientSide,
    dc: DcId,
    who: Who,
    race: Race,
    /// The dial of each attempt slot (while the race says it dials).
    dials: [Option<Box<Attempt>>; 2],
    /// Each attempt slot's timer: its pacing slot or its dial's deadline.
    timers: [Option<TimerId>; 2],
    hedge_timer: Option<TimerId>,
    budget_timer: Option<TimerId>,
    /// Client plaintext (already decrypted) waiting for an upstream.
    up: RelayBuf,
    /// The client half-closed after sending a request: deliver it, then half-close upstream.
    client_eof: bool,
    pooled: Option<Pooled>,
    /// The session's freeze watch, handed to the relay when it starts (nothing feeds it
    /// before: it starts at the session's start, or at a replay past the bytes so far).
    watch: StallWatch,
}

impl Connecting {
    /// Starts the phase for a client whose init was accepted: asks the ladder for a plan (and a
    /// pooled upstream), arms the budget.
    pub fn new(
        (mut side, extra): (ClientSide, &[u8]),
        dc: DcId,
        (slot, id, peer): (usize, u32, SocketAddr),
        watch: StallWatch,
        ctx: &mut Ctx<'_>,
    ) -> Connecting {
        let mut up = ctx.scratch.own_buffer(ctx.cfg.buf_size);
        if !extra.is_empty() {
            // What a direct client sent past its init (pipelined after SOCKS5): plaintext in
            // `up`, like every byte read while connecting. At most a SOCKS5 message's size.
            // With the pool exhausted the bytes still get a (heap) buffer: never dropped.
            if !ctx.scratch.attach(&mut up) {
                up = RelayBuf::new(ctx.cfg.buf_size);
            }
            let space = up.space();
            let n = extra.len().min(space.len());
            space[..n].copy_from_slice(&extra[..n]);
            side.client_read(&mut space[..n]);
            up.fill(n);
        }
        let who = Who {
            slot: slot as u32,
            id,
            peer,
        };
        Connecting::start(side, dc, who, (up, false), (Origin::Client, watch), ctx)
    }

    /// Starts the phase again for a session whose pooled upstream stayed silent
    /// ([`crate::relay::Resume`]): a fresh plan, never the pool; `up` holds the client's
    /// plaintext since the start of its stream, replayed after the new upstream's init.
    pub fn retry(
        resume: crate::relay::Resume,
        dc: DcId,
        slot: usize,
        id: u32,
        peer: SocketAddr,
        watch: StallWatch,
        ctx: &mut Ctx<'_>,
    ) -> Connecting {
        let crate::relay::Resume {
            side,
            up,
            client_eof,
        } = resume;
        let who = Who {
            slot: slot as u32,
            id,
            peer,
        };
        let start = (Origin::Retry, watch);
        Connecting::start(side, dc, who, (up, client_eof), start, ctx)
    }

    fn start(
        side: ClientSide,
        dc: DcId,
        who: Who,
        (up, client_eof): (RelayBuf, bool),
        (origin, watch): (Origin, StallWatch),
        ctx: &mut Ctx<'_>,
    ) -> Connecting {
        let now = ctx.now;
        let (dns, outbound) = (&mut *ctx.dns, ctx.outbound);
        let plan = ctx.ladder.plan(dc, now, &mut |h| {
            // A name the outbound proxy resolves (`socks5h://`) needs no local answer.
            crate::net::outbound::remote_name(outbound, h)
                .or_else(|| crate::dns::cached(dns, h, now))
        });
        let budget_ms = ctx.cfg.connect_budget.as_millis() as u64;
        let mut fx = Vec::new();
        let race = Race::new(plan, origin, now, budget_ms, &mut fx);
        let pooled = race.pool_route().and_then(|route| {
            let (up, dial_started) = ctx.ladder.take_pooled(route, now)?;
            Some(Pooled {
                route,
                up,
                dial_started,
            })
        });
        let mut c = Connecting {
            side,
            dc,
            who,
            race,
            dials: [None, None],
            timers: [None, None],
            hedge_timer: None,
            budget_timer: None,
            up,
            client_eof,
            pooled,
            watch,
        };
        // Only the budget's timer: nothing can end the race yet.
        let _ = c.perform(fx, ctx);
        c
    }

    /// Remembers a readiness edge for attempt `i`.
    pub fn mark_ready(&mut self, i: u8, readable: bool, writable: bool) {
        if let Some(a) = &mut self.dials[i as usize & 1] {
            a.ready.read |= readable;
            a.ready.write |= writable;
        }
    }

    /// Ends the race (session closing or connected): timers cancelled, dials in flight given up
    /// as losers. WebSocket losers finish in the background as pool fills: the client does not
    /// wait for them, but their outcome still teaches the ladder.
    pub fn cancel_all(&mut self, ctx: &mut Ctx<'_>) {
        let mut fx = Vec::new();
        self.race.cancel_all(&mut fx);
        let _ = self.perform(fx, ctx);
    }

    /// Asks the race with `ask` (given `now`, the route view and the effect list), then
    /// performs what it said. `Some(step)` ends the connect step (the race gave up).
    fn ask(
        &mut self,
        ctx: &mut Ctx<'_>,
        ask: impl FnOnce(&mut Race, u64, &mut View<'_, '_>, &mut Vec<Effect>),
    ) -> Option<Step> {
        let mut fx = Vec::new();
        let now = ctx.now;
        let mut view = View { ctx, dc: self.dc };
        ask(&mut self.race, now, &mut view, &mut fx);
        self.perform(fx, ctx)
    }
}

impl Conn {
    pub(super) fn step_connecting(&mut self, ctx: &mut Ctx<'_>) -> Step {
        if let Some(step) = self.read_client_while_connecting(ctx.scratch) {
            return step;
        }
        let (slot, id) = (self.slot, self.id);
        let Phase::Connecting(c) = &mut self.phase else {
            return Step::Wait;
        };
        if let Some(mut p) = c.pooled.take() {
            let token = token::encode(slot, id, Role::Up(0));
            let registered = ctx.registry.register(
                p.up.sock(),
                token,
                mio::Interest::READABLE | mio::Interest::WRITABLE,
            );
            if registered.is_ok() {
                ctx.stats.pool_hits += 1;
                let label = ctx.ladder.route(p.route).target_label();
                let target = format!("{label} (pooled)");
                return self.start_relay(p.route, target, Start::Pooled(p.dial_started), p.up, ctx);
            }
        }
        // Keep one attempt running; the hedge timer or a failure adds the second.
        if let Some(step) = c.ask(ctx, |race, now, view, fx| race.keep_going(now, view, fx)) {
            return step;
        }
        let mut progressed = false;
        for i in 0..2 {
            let Some(a) = &mut c.dials[i] else {
                continue;
            };
            if !a.ready.read && !a.ready.write {
                continue;
            }
            a.ready = Ready::default();
            progressed = true;
            let step = a.dial.drive(ctx.tls, ctx.wall_s, ctx.rng);
            if matches!(step, DialStep::Pending) {
                continue;
            }
            let Some(a) = c.dials[i].take() else {
                unreachable!("slot {i} dialled just above");
            };
            cancel(&mut c.timers[i], ctx);
            match step {
                DialStep::Pending => {}
                DialStep::Failed {
                    failure,
                    retry_after,
                    detail,
                } => {
                    let why = (failure, retry_after, detail.as_str());
                    if let Some(step) = c.attempt_failed(i, &a, why, ctx) {
                        return step;
                    }
                }
                DialStep::Ready(up) => return self.dial_won(i, &a.dial, up, ctx),
            }
        }
        if progressed {
            Step::Progress
        } else {
            Step::Wait
        }
    }

    /// The dial in attempt slot `i` is ready: it wins the race.
    fn dial_won(&mut self, i: usize, dial: &Dial, up: Upstream, ctx: &mut Ctx<'_>) -> Step {
        let Phase::Connecting(c) = &mut self.phase else {
            return Step::Wait;
        };
        let winner = c.race.won(i);
        if dial.via().is_some() {
            let started = winner.as_ref().map_or(ctx.now, |w| w.started);
            ctx.ladder.proxy_worked(ctx.now, started);
        }
        let Some(Winner {
            cand,
            route,
            started,
            retried,
        }) = winner
        else {
            return Step::Wait;
        };
        let mut target = ctx
            .ladder
            .route(route)
            .spec_label(&c.race.cands()[cand].spec);
        if retried {
            target.push_str(" (pooled, retried)");
        }
        self.start_relay(route, target, Start::Dialled(started), up, ctx)
    }

    /// Reads client bytes into the buffer while connecting. `Some(step)` ends the step.
    fn read_client_while_connecting(&mut self, scratch: &Scratch) -> Option<Step> {
        let Phase::Connecting(c) = &mut self.phase else {
            return None;
        };
        if self.client_ready.read && !c.client_eof {
            scratch.attach(&mut c.up); // pool exhausted: no room, the client waits
        }
        while self.client_ready.read && !c.client_eof {
            let space = c.up.space();
            if space.is_empty() {
                break; // backpressure: wait for the upstream
            }
            match read_once(&mut self.client, space) {
                Io::Done(n) => {
                    c.side.client_read(&mut space[..n]);
                    c.up.fill(n);
                    self.info.meter.bytes_up += n as u64;
                }
                Io::Blocked => self.client_ready.read = false,
                Io::Eof if c.up.is_empty() => return Some(Step::Close(CloseReason::ClientEof)),
                Io::Eof => {
                    // Half-close with a request pending: still connect and deliver it.
                    c.client_eof = true;
                    self.client_ready.read = false;
                }
                Io::Failed(e) => return Some(Step::Close(client_read_failure(&e))),
            }
        }
        None
    }

    /// Timers of the connect phase: attempt deadline, hedge start, pacing slot, connect budget.
    pub(super) fn connect_timer(&mut self, kind: SessionTimer, ctx: &mut Ctx<'_>) -> Step {
        let Phase::Connecting(c) = &mut self.phase else {
            return Step::Progress;
        };
        let ended = match kind {
            SessionTimer::Attempt(i) => {
                let i = i as usize & 1;
                match c.dials[i].take() {
                    Some(a) => {
                        c.timers[i] = None;
                        let f = a.dial.timeout_failure();
                        c.attempt_failed(i, &a, (f, None, "deadline"), ctx)
                    }
                    None => None,
                }
            }
            SessionTimer::Hedge => {
                c.hedge_timer = None;
                c.ask(ctx, |race, now, view, fx| race.hedge_fired(now, view, fx))
            }
            SessionTimer::Pace(i) => {
                let i = i as usize & 1;
                if c.race.paced(i) {
                    c.timers[i] = None;
                }
                c.ask(ctx, |race, now, view, fx| race.pace_due(i, now, view, fx))
            }
            SessionTimer::Budget => {
                c.budget_timer = None;
                c.ask(ctx, |race, now, view, fx| race.budget_spent(now, view, fx))
            }
            SessionTimer::Handshake
            | SessionTimer::Ping
            | SessionTimer::Idle
            | SessionTimer::Linger
            | SessionTimer::FirstByte
            | SessionTimer::Stall
            | SessionTimer::Mask => None,
        };
        ended.unwrap_or(Step::Progress)
    }

    /// Switches to relaying over `up` of `route`.
    fn start_relay(
        &mut self,
        route: RouteId,
        target: String,
        start: Start,
        up: Upstream,
        ctx: &mut Ctx<'_>,
    ) -> Step {
        let Phase::Connecting(c) = std::mem::replace(&mut self.phase, Phase::Closed) else {
            return Step::Wait;
        };
        let mut c = *c;
        c.cancel_all(ctx);
        ctx.ladder
            .observe(Observation::SessionStarted { route }, ctx.now);
        let tier = ctx.ladder.route(route).tier;
        let pooled_start = matches!(start, Start::Pooled(_));
        let (dial_started, rtt) = match start {
            Start::Dialled(t) => {
                ctx.stats.attempts_ok[tier.index()] += 1;
                (t, Some(ctx.now.saturating_sub(t)))
            }
            Start::Pooled(t) => (t, None),
        };
        self.info.tier = Some(tier);
        self.info.route = Some(route);
        self.info.target = target;
        self.info.connected_ms = Some(ctx.now);
        self.info.dial_started = dial_started;
        self.info.connect_rtt = rtt;
        debug!(
            "client {} {} connected via {} in {}ms",
            self.peer,
            c.dc,
            self.info.target,
            rtt.unwrap_or(0)
        );
        let client = (c.up, c.client_eof);
        let mut relay = Relaying::new(c.side, c.dc, tier, up, client, c.watch, ctx);
        let proxy_key = match &ctx.ladder.route(route).target {
            crate::route::table::Target::Mtproto { proxy } => Some(proxy.secret.key),
            _ => None,
        };
        if let Some(key) = proxy_key {
            relay.toward_proxy(&key, crate::mtproto::upstream::client_index(c.dc), ctx.rng);
        }
        let first_byte_ms = ctx.cfg.pool_first_byte_timeout.as_millis() as u64;
        if race::keeps_replay(pooled_start, first_byte_ms) {
            // A pooled upstream may be dead without a sign: the request must stay replayable,
            // and a pass-through keeps no replay (`Relay::keep_replay`), so it re-encrypts.
            relay.reencrypt(ctx.rng);
            relay.keep_replay(ctx.scratch);
        }
        self.info.relay_mode = Some(relay.mode());
        self.phase = Phase::Relay(Box::new(relay));
        self.arm_ping(tier, ctx);
        Step::Progress
    }
}

/// Where a session's upstream came from, with when its dial began (ms).
enum Start {
    /// Dialled for this client.
    Dialled(u64),
    /// Taken warm from the pool.
    Pooled(u64),
}
