//! Connect phase: run the ladder's plan for one client, hedging across routes.
//!
//! The ladder orders the candidates and may hand a warm pooled upstream of the best route. The
//! first candidate is dialled; if it is not ready within the ladder's hedge delay the next one
//! starts in parallel (always a different route). The first to finish wins; the other is
//! cancelled and, for WebSocket routes, finishes in the background as a pool fill. A failure
//! starts the next candidate at once; when none is left, `front` routes that a TLS/upgrade
//! failure of this connect made plannable are appended (domain fronting, `add_fronting`). `--connect-budget` bounds the whole phase: past it the
//! client is closed so it reconnects instead of waiting. Handshake starts wait for the ladder's
//! pacing (a bounded delay); a candidate through a down outbound proxy is skipped unless this
//! dial is the proxy's re-check (`Ladder::proxy_may_dial`), and every dial through the proxy
//! that got past it reports that the proxy works. Client bytes that arrive meanwhile are
//! decrypted into the session's upstream buffer. A session whose pooled upstream stayed silent comes back here once
//! ([`Connecting::retry`]): a fresh plan without the pool, its replayed request in the buffer.
//! This module reports what happened ([`Observation`]); it decides nothing about health.

use std::net::SocketAddr;

use log::debug;

use super::relay::Relaying;
use super::{Conn, Ctx, Phase, Ready, SessionTimer, Step, TimerEv};
use crate::buf::RelayBuf;
use crate::config::Tier;
use crate::error::{CloseReason, Failure};
use crate::mtproto::dc::DcId;
use crate::mtproto::obfs2::Accepted;
use crate::net::dial::{Dial, DialStep, Upstream};
use crate::net::io::{read_once, Io};
use crate::relay::end::client_read_failure;
use crate::relay::Scratch;
use crate::route::ladder::{Candidate, Observation, Plan, RouteId};
use crate::timer::TimerId;
use crate::token::{self, Role};

/// A dial in flight.
struct Attempt {
    cand: usize,
    dial: Dial,
    ready: Ready,
    timer: TimerId,
    started: u64,
}

/// One of the two attempt slots of a session.
enum Slot {
    /// Nothing running.
    Free,
    /// Candidate `cand` waits for its pacing slot (`timer` fires then).
    Paced { cand: usize, timer: TimerId },
    /// A dial in flight.
    /// A dial in flight (boxed: a dial is ~300 bytes, the other states a few words).
    Dialing(Box<Attempt>),
}

impl Slot {
    fn route(&self, cands: &[Candidate]) -> Option<RouteId> {
        match self {
            Slot::Free => None,
            Slot::Paced { cand, .. } => Some(cands[*cand].route),
            Slot::Dialing(a) => Some(cands[a.cand].route),
        }
    }
}

/// A warm upstream taken from the best route's pool, with when its dial began.
struct Pooled {
    route: RouteId,
    up: Upstream,
    dial_started: u64,
}

/// State of the connect phase.
pub struct Connecting {
    accepted: Accepted,
    dc: DcId,
    plan: Plan,
    /// Candidates already dialled or skipped.
    used: Vec<bool>,
    slots: [Slot; 2],
    hedge_timer: Option<TimerId>,
    budget_timer: Option<TimerId>,
    /// Client plaintext (already decrypted) waiting for an upstream.
    up: RelayBuf,
    /// The client half-closed after sending a request: deliver it, then half-close upstream.
    client_eof: bool,
    pooled: Option<Pooled>,
    origin: Origin,
}

/// Why a session is connecting.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Origin {
    /// Its init was just accepted.
    Client,
    /// Its pooled upstream stayed silent: its request is replayed on a fresh route (never the
    /// pool, at most once).
    Retry,
}

impl Connecting {
    /// Starts the phase for a client whose init was accepted: asks the ladder for a plan (and a
    /// pooled upstream), arms the budget.
    pub fn new(
        accepted: Accepted,
        dc: DcId,
        slot: usize,
        id: u32,
        ctx: &mut Ctx<'_>,
    ) -> Connecting {
        let up = ctx.scratch.own_buffer(ctx.cfg.buf_size);
        Connecting::start(accepted, dc, (slot, id), up, false, Origin::Client, ctx)
    }

    /// Starts the phase again for a session whose pooled upstream stayed silent
    /// ([`crate::relay::Resume`]): a fresh plan, never the pool; `up` holds the client's
    /// plaintext since the start of its stream, replayed after the new upstream's init.
    pub fn retry(
        resume: crate::relay::Resume,
        dc: DcId,
        slot: usize,
        id: u32,
        ctx: &mut Ctx<'_>,
    ) -> Connecting {
        let crate::relay::Resume {
            accepted,
            up,
            client_eof,
        } = resume;
        Connecting::start(accepted, dc, (slot, id), up, client_eof, Origin::Retry, ctx)
    }

    fn start(
        accepted: Accepted,
        dc: DcId,
        (slot, id): (usize, u32),
        up: RelayBuf,
        client_eof: bool,
        origin: Origin,
        ctx: &mut Ctx<'_>,
    ) -> Connecting {
        let now = ctx.now;
        let dns = &mut *ctx.dns;
        let mut plan = ctx.ladder.plan(dc, now, &mut |h| {
            // A name the outbound proxy resolves (`socks5h://`) needs no local answer.
            crate::net::outbound::remote_name(h).or_else(|| crate::dns::cached(dns, h, now))
        });
        if origin == Origin::Retry {
            plan.pooled = None;
        }
        let pooled = plan.pooled.and_then(|route| {
            let (up, dial_started) = ctx.ladder.take_pooled(route, now)?;
            Some(Pooled {
                route,
                up,
                dial_started,
            })
        });
        let budget_at = now + ctx.cfg.connect_budget.as_millis() as u64;
        let budget_timer = ctx.wheel.insert(
            budget_at,
            TimerEv {
                slot: slot as u32,
                conn_id: id,
                kind: SessionTimer::Budget,
            },
        );
        Connecting {
            accepted,
            dc,
            used: vec![false; plan.cands.len()],
            plan,
            slots: [Slot::Free, Slot::Free],
            hedge_timer: None,
            budget_timer: Some(budget_timer),
            up,
            client_eof,
            pooled,
            origin,
        }
    }

    /// Remembers a readiness edge for attempt `i`.
    pub fn mark_ready(&mut self, i: u8, readable: bool, writable: bool) {
        if let Slot::Dialing(a) = &mut self.slots[i as usize & 1] {
            a.ready.read |= readable;
            a.ready.write |= writable;
        }
    }

    /// Cancels every running attempt and timer (session closing or connected). WebSocket
    /// losers finish in the background as pool fills: the client does not wait for them, but
    /// their outcome still teaches the ladder.
    pub fn cancel_all(&mut self, ctx: &mut Ctx<'_>) {
        for i in 0..2 {
            match std::mem::replace(&mut self.slots[i], Slot::Free) {
                Slot::Free => {}
                Slot::Paced { timer, .. } => {
                    ctx.wheel.cancel(timer);
                }
                Slot::Dialing(a) => abandon(self.plan.cands[a.cand].route, *a, ctx),
            }
        }
        for t in [self.hedge_timer.take(), self.budget_timer.take()]
            .into_iter()
            .flatten()
        {
            ctx.wheel.cancel(t);
        }
    }

    /// The next candidate to dial ([`Plan::next`]): never a route that already has an attempt.
    fn pick(&self) -> Option<usize> {
        let busy = [
            self.slots[0].route(&self.plan.cands),
            self.slots[1].route(&self.plan.cands),
        ];
        self.plan.next(&self.used, &busy)
    }

    /// Attempts in flight or waiting for their pacing slot.
    fn running(&self) -> usize {
        self.slots
            .iter()
            .filter(|s| !matches!(s, Slot::Free))
            .count()
    }
}

impl Conn {
    pub(super) fn step_connecting(&mut self, ctx: &mut Ctx<'_>) -> Step {
        if let Some(step) = self.read_client_while_connecting(ctx.scratch) {
            return step;
        }
        let (slot, id, peer) = (self.slot, self.id, self.peer);
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
        if c.running() == 0 {
            if let Some(step) = start_next(c, slot, id, &peer, ctx) {
                return step;
            }
        }

        let mut progressed = false;
        for i in 0..2 {
            let Slot::Dialing(a) = &mut c.slots[i] else {
                continue;
            };
            if !a.ready.read && !a.ready.write {
                continue;
            }
            a.ready = Ready::default();
            progressed = true;
            let step = a.dial.drive(ctx.tls);
            if matches!(step, DialStep::Pending) {
                continue;
            }
            let Slot::Dialing(a) = std::mem::replace(&mut c.slots[i], Slot::Free) else {
                unreachable!("slot {i} was Dialing just above");
            };
            ctx.wheel.cancel(a.timer);
            match step {
                DialStep::Pending => {}
                DialStep::Failed {
                    failure,
                    retry_after,
                    detail,
                } => {
                    attempt_failed(c, &a, failure, retry_after, &detail, &peer, ctx);
                    if c.running() == 0 {
                        if let Some(step) = start_next(c, slot, id, &peer, ctx) {
                            return step;
                        }
                    }
                }
                DialStep::Ready(up) => {
                    if a.dial.via().is_some() {
                        ctx.ladder.proxy_worked(ctx.now);
                    }
                    let route = c.plan.cands[a.cand].route;
                    let mut target = ctx
                        .ladder
                        .route(route)
                        .spec_label(&c.plan.cands[a.cand].spec);
                    if c.origin == Origin::Retry {
                        target.push_str(" (pooled, retried)");
                    }
                    return self.start_relay(route, target, Start::Dialled(a.started), up, ctx);
                }
            }
        }
        if progressed {
            Step::Progress
        } else {
            Step::Wait
        }
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
                    c.accepted.decrypt.apply(&mut space[..n]);
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
        let (slot, id, peer) = (self.slot, self.id, self.peer);
        let Phase::Connecting(c) = &mut self.phase else {
            return Step::Progress;
        };
        match kind {
            SessionTimer::Attempt(i) => {
                let i = i as usize & 1;
                if let Slot::Dialing(a) = std::mem::replace(&mut c.slots[i], Slot::Free) {
                    let f = a.dial.timeout_failure();
                    attempt_failed(c, &a, f, None, "deadline", &peer, ctx);
                    if c.running() == 0 {
                        if let Some(step) = start_next(c, slot, id, &peer, ctx) {
                            return step;
                        }
                    }
                }
                Step::Progress
            }
            SessionTimer::Hedge => {
                c.hedge_timer = None;
                if c.running() == 1 && c.pick().is_some() {
                    debug!("client {peer} {}: hedging to the next route", c.dc);
                    ctx.stats.hedges += 1;
                    if let Some(step) = start_next(c, slot, id, &peer, ctx) {
                        return step;
                    }
                }
                Step::Progress
            }
            SessionTimer::Pace(i) => {
                let i = i as usize & 1;
                if let Slot::Paced { cand, .. } = std::mem::replace(&mut c.slots[i], Slot::Free) {
                    if let Some(step) = dial_or_next(c, cand, i, slot, id, &peer, ctx) {
                        return step;
                    }
                }
                Step::Progress
            }
            SessionTimer::Budget => {
                c.budget_timer = None;
                for i in 0..2 {
                    if let Slot::Dialing(a) = std::mem::replace(&mut c.slots[i], Slot::Free) {
                        let route = c.plan.cands[a.cand].route;
                        if ctx.ladder.budget_cut_is_evidence(route, a.started, ctx.now) {
                            ctx.wheel.cancel(a.timer);
                            let why = "connect budget spent";
                            let f = a.dial.timeout_failure();
                            attempt_failed(c, &a, f, None, why, &peer, ctx);
                        } else {
                            abandon(route, *a, ctx);
                        }
                    }
                }
                ctx.warn_client(
                    peer,
                    format_args!(
                        "{}: no route ready within the connect budget ({}ms), closing so the client retries",
                        c.dc,
                        ctx.cfg.connect_budget.as_millis()
                    ),
                );
                Step::Close(CloseReason::UpstreamUnreachable)
            }
            SessionTimer::Handshake
            | SessionTimer::Ping
            | SessionTimer::Idle
            | SessionTimer::Linger
            | SessionTimer::FirstByte
            | SessionTimer::Stall
            | SessionTimer::Mask => Step::Progress,
        }
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
        let mut relay = Relaying::new(c.accepted, c.dc, tier, up, c.up, c.client_eof, ctx);
        let proxy_key = match &ctx.ladder.route(route).target {
            crate::route::table::Target::Mtproto { proxy } => Some(proxy.secret.key),
            _ => None,
        };
        if let Some(key) = proxy_key {
            relay.toward_proxy(&key, crate::mtproto::upstream::client_index(c.dc), ctx.rng);
        }
        if pooled_start && !ctx.cfg.pool_first_byte_timeout.is_zero() {
            relay.keep_replay(ctx.scratch);
        }
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

/// Gives up attempt `a` of `route` without blaming the route: counted cancelled, and a
/// WebSocket dial finishes in the background as a fill, so its outcome still teaches the ladder.
fn abandon(route: RouteId, a: Attempt, ctx: &mut Ctx<'_>) {
    ctx.wheel.cancel(a.timer);
    let tier = ctx.ladder.route(route).tier;
    ctx.stats.attempts_cancelled[tier.index()] += 1;
    ctx.ladder
        .observe(Observation::AttemptCancelled { route }, ctx.now);
    // Not pooled, so nothing for a loser to fill: raw TCP and upstream proxies (which close a
    // connection that sends no init, docs/design.md §4 "Pools").
    if !matches!(tier, Tier::Tcp | Tier::Mtproto) {
        let deadline = a.started + attempt_timeout(tier, ctx);
        let times = (a.started, deadline);
        ctx.prober
            .take_loser(ctx.ladder, ctx.registry, route, a.dial, times, ctx.now);
    }
}

/// Bound on one dial of a route of `tier`, ms.
fn attempt_timeout(tier: Tier, ctx: &Ctx<'_>) -> u64 {
    ctx.cfg.attempt_timeout(tier).as_millis() as u64
}

/// Starts the next candidate in a free attempt slot (or parks it until its pacing slot).
/// `Some(step)` ends the connect step (nothing left to try and nothing running).
fn start_next(
    c: &mut Connecting,
    slot: usize,
    id: u32,
    peer: &SocketAddr,
    ctx: &mut Ctx<'_>,
) -> Option<Step> {
    let free = c.slots.iter().position(|s| matches!(s, Slot::Free))?;
    let Some(idx) = c.pick().or_else(|| add_fronting(c, ctx)) else {
        return nothing_left(c, peer, ctx);
    };
    c.used[idx] = true;
    let at = ctx.ladder.pace(c.plan.cands[idx].spec.addr, ctx.now);
    if at > ctx.now {
        let ev = TimerEv {
            slot: slot as u32,
            conn_id: id,
            kind: SessionTimer::Pace(free as u8),
        };
        let timer = ctx.wheel.insert(at, ev);
        c.slots[free] = Slot::Paced { cand: idx, timer };
        return None;
    }
    dial_or_next(c, idx, free, slot, id, peer, ctx)
}

/// Dials candidate `idx` in attempt slot `free`; if it cannot start, moves on to the next.
fn dial_or_next(
    c: &mut Connecting,
    idx: usize,
    free: usize,
    slot: usize,
    id: u32,
    peer: &SocketAddr,
    ctx: &mut Ctx<'_>,
) -> Option<Step> {
    if let Err(at) = proxy_gate(c, idx, ctx) {
        // The outbound proxy is down and its re-check is not due: this candidate is not
        // dialled (a client's dial may be the re-check, never more than one per step).
        let label = ctx.ladder.route(c.plan.cands[idx].route).label();
        let wait = at.saturating_sub(ctx.now);
        ctx.warn_client(
            *peer,
            format_args!(
                "{}: {label} not dialled: the outbound proxy is down (re-checked in {wait}ms)",
                c.dc
            ),
        );
        if c.running() == 0 {
            return start_next(c, slot, id, peer, ctx);
        }
        return None;
    }
    match dial_candidate(c, idx, free, slot, id, ctx) {
        Ok(()) => None,
        Err(f) => {
            let route = c.plan.cands[idx].route;
            let label = ctx.ladder.route(route).label();
            // One fold per kind: a local resource running out (descriptors, local ports)
            // repeats for every client while it lasts.
            if f.is_local() {
                ctx.warn_client(
                    *peer,
                    format_args!("{}: {label} could not start: {f}{}", c.dc, f.hint()),
                );
            } else {
                ctx.warn_client(
                    *peer,
                    format_args!("{}: {label} could not start: {f}", c.dc),
                );
            }
            if f.is_proxy() || f.is_network() {
                // The outbound proxy's own failure (a proxy name with no address yet, or its
                // connect refused at once), or no path to the address (network unreachable at
                // once): counted and said like one found later in the dial, and the ladder
                // cools no route for it.
                let tier = ctx.ladder.route(route).tier;
                ctx.stats.attempts[tier.index()] += 1;
                ctx.stats.attempts_failed[tier.index()] += 1;
                let obs = Observation::AttemptFailed {
                    route,
                    failure: f,
                    retry_after: None,
                };
                ctx.ladder.observe(obs, ctx.now);
            }
            if f == Failure::Local {
                return Some(Step::Close(CloseReason::LocalResource));
            }
            if c.running() == 0 {
                return start_next(c, slot, id, peer, ctx);
            }
            None
        }
    }
}

/// Whether candidate `idx` may be dialled now: `Err(at)` when it goes through the outbound
/// proxy, the proxy is down and its next re-check is at `at` (ms), not now.
fn proxy_gate(c: &Connecting, idx: usize, ctx: &mut Ctx<'_>) -> Result<(), u64> {
    let spec = &c.plan.cands[idx].spec;
    if !crate::net::outbound::goes_via_proxy(spec.addr, spec.kind.host()) {
        return Ok(());
    }
    ctx.ladder.proxy_may_dial(ctx.now)
}

/// Domain fronting within one connect (docs/design.md §4): when a client's plan has run out,
/// the `front` routes that a failure during this connect made plannable (the direct ws route
/// failed at TLS or upgrade) are appended from a fresh plan, so this client is not turned away
/// for what its own attempt just taught the ladder. Each route is appended at most once, so this
/// cannot loop. Returns the first new candidate to dial.
fn add_fronting(c: &mut Connecting, ctx: &mut Ctx<'_>) -> Option<usize> {
    if !ctx.cfg.tier_configured(Tier::Front) {
        return None;
    }
    let fresh = ctx.ladder.plan(c.dc, ctx.now, &mut |_| None);
    let before = c.plan.cands.len();
    for cand in fresh.cands {
        let new = !c.plan.cands.iter().any(|k| k.route == cand.route);
        if new && ctx.ladder.route(cand.route).tier == Tier::Front {
            c.plan.cands.push(cand);
            c.used.push(false);
        }
    }
    if c.plan.cands.len() == before {
        return None;
    }
    debug!("{}: direct route failed at TLS/upgrade: fronting", c.dc);
    c.pick()
}

/// Nothing left to dial: closes the session if nothing runs either.
fn nothing_left(c: &Connecting, peer: &SocketAddr, ctx: &mut Ctx<'_>) -> Option<Step> {
    if c.running() > 0 {
        return None;
    }
    ctx.warn_client(
        *peer,
        format_args!(
            "{}: every route failed, closing so the client retries",
            c.dc
        ),
    );
    Some(Step::Close(CloseReason::UpstreamUnreachable))
}

/// Dials candidate `idx` in attempt slot `free`, arms its deadline and (if more candidates
/// remain) the hedge.
fn dial_candidate(
    c: &mut Connecting,
    idx: usize,
    free: usize,
    slot: usize,
    id: u32,
    ctx: &mut Ctx<'_>,
) -> Result<(), Failure> {
    let route = c.plan.cands[idx].route;
    let tier = ctx.ladder.route(route).tier;
    let token = token::encode(slot, id, Role::Up(free as u8));
    let dial = Dial::start(
        &c.plan.cands[idx].spec,
        ctx.registry,
        token,
        ctx.cfg.tcp_keepalive,
    )?;
    let timer = ctx.wheel.insert(
        ctx.now + attempt_timeout(tier, ctx),
        TimerEv {
            slot: slot as u32,
            conn_id: id,
            kind: SessionTimer::Attempt(free as u8),
        },
    );
    ctx.stats.attempts[tier.index()] += 1;
    c.slots[free] = Slot::Dialing(Box::new(Attempt {
        cand: idx,
        dial,
        ready: Ready::default(),
        timer,
        started: ctx.now,
    }));
    if c.hedge_timer.is_none() && c.pick().is_some() {
        let delay = ctx.ladder.hedge_delay(route);
        c.hedge_timer = Some(ctx.wheel.insert(
            ctx.now + delay,
            TimerEv {
                slot: slot as u32,
                conn_id: id,
                kind: SessionTimer::Hedge,
            },
        ));
    }
    Ok(())
}

/// Reports a failed attempt (stats, the ladder, one folded log line) and skips the route's
/// other host name on the same address after a connect-level failure (same outcome).
fn attempt_failed(
    c: &mut Connecting,
    a: &Attempt,
    f: Failure,
    retry_after: Option<u32>,
    detail: &str,
    peer: &SocketAddr,
    ctx: &mut Ctx<'_>,
) {
    let route = c.plan.cands[a.cand].route;
    let tier = ctx.ladder.route(route).tier;
    ctx.stats.attempts_failed[tier.index()] += 1;
    if a.dial.via().is_some() && !f.is_proxy() {
        // It got past the outbound proxy: the proxy works, whatever the destination did.
        ctx.ladder.proxy_worked(ctx.now);
    }
    let ms = ctx.now.saturating_sub(a.started);
    // One fold per tier and class: a flood of one failure (local ports, say) never hides
    // another.
    let kind = crate::logging::fold_key(&format!("{}:{f}", tier.name()));
    if let Some(folded) = ctx.attempt_log.allow(kind, ctx.now) {
        log::warn!(
            "client {peer} {}: {} {} failed after {ms}ms: {f}{} ({detail}){}",
            c.dc,
            tier.name(),
            ctx.ladder
                .route(route)
                .spec_label(&c.plan.cands[a.cand].spec),
            f.hint(),
            if folded > 0 {
                format!(" ({folded} similar suppressed)")
            } else {
                String::new()
            }
        );
    }
    let obs = Observation::AttemptFailed {
        route,
        failure: f,
        retry_after,
    };
    ctx.ladder.observe(obs, ctx.now);
    if matches!(
        f,
        Failure::Timeout | Failure::HandshakeTimeout | Failure::Refused
    ) || !a.dial.tcp_done()
    {
        // A media cfproxy route's two names may resolve to different addresses.
        let addr = c.plan.cands[a.cand].spec.addr;
        for (i, cand) in c.plan.cands.iter().enumerate() {
            if cand.route == route && cand.spec.addr == addr {
                c.used[i] = true;
            }
        }
    }
}
