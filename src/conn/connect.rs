//! Connect phase: reach the session's DC over the best route, hedging across routes.
//!
//! The route table orders usable routes (Up/Unknown first, Suspect next, Down ones left out:
//! clients never pay for health checks). The first route is dialled; if it is not ready within
//! the hedge delay (the route's 2 × p95 once known, else `--hedge-delay`) the next one starts in
//! parallel. The first to finish wins; the other is cancelled (counted as cancelled, not as a
//! failure). A failure starts the next route at once. `--connect-budget` bounds the whole phase:
//! past it the client is closed so it reconnects instead of waiting. Client bytes that arrive
//! meanwhile are decrypted into the session's upstream buffer.

use std::net::SocketAddr;

use log::debug;

use super::relay::Relay;
use super::{Conn, Ctx, Phase, Ready, Step, TimerEv, TimerKind};
use crate::buf::RelayBuf;
use crate::config::Tier;
use crate::error::{CloseReason, Failure};
use crate::mtproto::dc::DcId;
use crate::mtproto::obfs2::Accepted;
use crate::net::dial::{Dial, DialSpec, DialStep, Upstream};
use crate::net::io::{read_once, Io};
use crate::route::health::State;
use crate::timer::TimerId;
use crate::token::{self, Role};

/// Lowest hedge delay derived from a route's RTT (ms).
const HEDGE_FLOOR_MS: u64 = 50;

/// One dial option: a route and one of its dial specs (a `ws` route has two host names).
struct Candidate {
    route: usize,
    spec: DialSpec,
}

struct Attempt {
    cand: usize,
    dial: Dial,
    ready: Ready,
    timer: TimerId,
    started: u64,
}

/// State of the connect phase.
pub struct Connecting {
    accepted: Accepted,
    dc: DcId,
    cands: Vec<Candidate>,
    /// Candidates already dialled or skipped.
    used: Vec<bool>,
    attempts: [Option<Attempt>; 2],
    hedge_timer: Option<TimerId>,
    budget_timer: Option<TimerId>,
    /// Client plaintext (already decrypted) waiting for an upstream.
    up: RelayBuf,
    /// The client half-closed after sending a request: deliver it, then half-close upstream.
    client_eof: bool,
    /// A warm upstream taken from the best route's pool (route index).
    pooled: Option<(usize, Upstream)>,
    /// A candidate waiting for its pacing slot: (candidate, attempt slot).
    paced: Option<(usize, usize)>,
    pace_timer: Option<TimerId>,
}

impl Connecting {
    /// Starts the phase for a client whose init was accepted: plans routes, arms the budget.
    pub fn new(
        accepted: Accepted,
        dc: DcId,
        slot: usize,
        id: u32,
        ctx: &mut Ctx<'_>,
    ) -> Connecting {
        let ids = ctx.routes.routes_for(dc, ctx.cfg, ctx.listen);
        let (plan, _usable) = ctx.routes.plan(&ids, ctx.now);
        // A warm upstream of the best route, if it is Up and has one, skips the connect.
        let mut pooled = None;
        if let Some(&best) = plan.first() {
            let r = &mut ctx.routes.routes[best];
            if matches!(
                r.health.usable(ctx.now),
                crate::route::health::Use::Preferred
            ) && !r.pool.is_empty()
            {
                let (up, dropped) = r
                    .pool
                    .take(ctx.now, ctx.cfg.pool_max_age.as_millis() as u64);
                if dropped > 0 {
                    debug!("pool {}: dropped {dropped} stale upstream(s)", r.label());
                }
                pooled = up.map(|u| (best, u));
            }
        }
        let mut cands = Vec::new();
        for route in plan {
            let specs = {
                let dns = &mut *ctx.dns;
                let now = ctx.now;
                ctx.routes.routes[route]
                    .specs_for(&mut |h| super::resolve_now(dns, h, now), ctx.listen)
            };
            for spec in specs {
                cands.push(Candidate { route, spec });
            }
        }
        let budget_at = ctx.now + ctx.cfg.connect_budget.as_millis() as u64;
        let budget_timer = ctx.wheel.insert(
            budget_at,
            TimerEv {
                slot: slot as u32,
                conn_id: id,
                kind: TimerKind::Budget,
            },
        );
        Connecting {
            accepted,
            dc,
            used: vec![false; cands.len()],
            cands,
            attempts: [None, None],
            hedge_timer: None,
            budget_timer: Some(budget_timer),
            up: RelayBuf::new(ctx.cfg.buf_size),
            client_eof: false,
            pooled,
            paced: None,
            pace_timer: None,
        }
    }

    /// Remembers a readiness edge for attempt `i`.
    pub fn mark_ready(&mut self, i: u8, readable: bool, writable: bool) {
        if let Some(a) = self.attempts[i as usize & 1].as_mut() {
            a.ready.read |= readable;
            a.ready.write |= writable;
        }
    }

    /// Cancels every running attempt and timer (session closing or connected).
    pub fn cancel_all(&mut self, ctx: &mut Ctx<'_>) {
        for slot in self.attempts.iter_mut() {
            if let Some(a) = slot.take() {
                ctx.wheel.cancel(a.timer);
                let route = self.cands[a.cand].route;
                let r = &ctx.routes.routes[route];
                ctx.stats.attempts_cancelled[r.tier.index()] += 1;
                // A WebSocket loser finishes in the background (pool fill): the client does not
                // wait for it, but its outcome still teaches the route's health.
                // A loser that has not even connected TCP after a hedge delay, while another
                // route finished its whole handshake, is presumed down until its background
                // finish proves otherwise (a late success brings the route straight back).
                let hedge_ms = ctx.cfg.hedge_delay.as_millis() as u64;
                if !a.dial.tcp_done() && ctx.now.saturating_sub(a.started) >= hedge_ms {
                    if let Some(c) = ctx.routes.on_failure(
                        route,
                        ctx.now,
                        Failure::Timeout,
                        None,
                        ctx.cfg,
                        ctx.rng,
                    ) {
                        if let crate::route::health::State::Down { until } = c.to {
                            ctx.probe_due.push((route, until));
                        }
                    }
                }
                let r = &ctx.routes.routes[route];
                if r.tier != Tier::Tcp {
                    let timeout = match r.tier {
                        Tier::Ws => ctx.cfg.ws_connect_timeout,
                        _ => ctx.cfg.cf_connect_timeout,
                    };
                    let deadline = a.started + timeout.as_millis() as u64;
                    ctx.adopt.push((route, a.dial, a.started, deadline));
                }
            }
        }
        self.paced = None;
        for t in [
            self.hedge_timer.take(),
            self.budget_timer.take(),
            self.pace_timer.take(),
        ]
        .into_iter()
        .flatten()
        {
            ctx.wheel.cancel(t);
        }
    }

    /// The next candidate to dial: the first unused one whose route has no attempt running (a
    /// hedge must go to a different route, not the same address under its other host name).
    fn pick(&self) -> Option<usize> {
        let busy = |route: usize| {
            self.attempts
                .iter()
                .flatten()
                .any(|a| self.cands[a.cand].route == route)
                || self
                    .paced
                    .is_some_and(|(i, _)| self.cands[i].route == route)
        };
        (0..self.cands.len()).find(|&i| !self.used[i] && !busy(self.cands[i].route))
    }

    /// Attempts in flight, counting one waiting for its pacing slot.
    fn running(&self) -> usize {
        self.attempts.iter().filter(|a| a.is_some()).count() + usize::from(self.paced.is_some())
    }
}

impl Conn {
    pub(super) fn step_connecting(&mut self, ctx: &mut Ctx<'_>) -> Step {
        if let Some(step) = self.read_client_while_connecting() {
            return step;
        }
        let (slot, id, peer) = (self.slot, self.id, self.peer);
        let Phase::Connecting(c) = &mut self.phase else {
            return Step::Wait;
        };

        if let Some((route, mut up)) = c.pooled.take() {
            let token = token::encode(slot, id, Role::Up(0));
            let registered = ctx.registry.register(
                up.sock(),
                token,
                mio::Interest::READABLE | mio::Interest::WRITABLE,
            );
            if registered.is_ok() {
                ctx.stats.pool_hits += 1;
                let target = format!("{} (pooled)", ctx.routes.routes[route].target_label());
                return self.start_relay(route, target, None, up, ctx);
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
            let Some(a) = c.attempts[i].as_mut() else {
                continue;
            };
            if !a.ready.read && !a.ready.write {
                continue;
            }
            a.ready = Ready::default();
            progressed = true;
            match a.dial.drive(ctx.tls) {
                DialStep::Pending => {}
                DialStep::Failed {
                    failure,
                    retry_after,
                    detail,
                } => {
                    let a = c.attempts[i]
                        .take()
                        .expect("attempt present: checked above");
                    ctx.wheel.cancel(a.timer);
                    attempt_failed(c, a, failure, retry_after, &detail, &peer, ctx);
                    if c.running() == 0 {
                        if let Some(step) = start_next(c, slot, id, &peer, ctx) {
                            return step;
                        }
                    }
                }
                DialStep::Ready(up) => {
                    let a = c.attempts[i]
                        .take()
                        .expect("attempt present: checked above");
                    ctx.wheel.cancel(a.timer);
                    let route = c.cands[a.cand].route;
                    let tier = ctx.routes.routes[route].tier;
                    let target = target_label(&c.cands[a.cand].spec, tier);
                    return self.start_relay(route, target, Some(a.started), up, ctx);
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
    fn read_client_while_connecting(&mut self) -> Option<Step> {
        let Phase::Connecting(c) = &mut self.phase else {
            return None;
        };
        while self.client_ready.read && !c.client_eof {
            let space = c.up.space();
            if space.is_empty() {
                break; // backpressure: wait for the upstream
            }
            match read_once(&mut self.client, space) {
                Io::Done(n) => {
                    c.accepted.decrypt.apply(&mut space[..n]);
                    c.up.fill(n);
                    self.info.bytes_up += n as u64;
                }
                Io::Blocked => self.client_ready.read = false,
                Io::Eof if c.up.is_empty() => return Some(Step::Close(CloseReason::ClientEof)),
                Io::Eof => {
                    // Half-close with a request pending: still connect and deliver it.
                    c.client_eof = true;
                    self.client_ready.read = false;
                }
                Io::Failed(_) => return Some(Step::Close(CloseReason::ClientReset)),
            }
        }
        None
    }

    /// Timers of the connect phase: attempt deadline, hedge start, connect budget.
    pub(super) fn connect_timer(&mut self, kind: TimerKind, ctx: &mut Ctx<'_>) -> Step {
        let (slot, id, peer) = (self.slot, self.id, self.peer);
        let Phase::Connecting(c) = &mut self.phase else {
            return Step::Progress;
        };
        match kind {
            TimerKind::Attempt(i) => {
                if let Some(a) = c.attempts[i as usize & 1].take() {
                    attempt_failed(c, a, Failure::Timeout, None, "deadline", &peer, ctx);
                    if c.running() == 0 {
                        if let Some(step) = start_next(c, slot, id, &peer, ctx) {
                            return step;
                        }
                    }
                }
                Step::Progress
            }
            TimerKind::Hedge => {
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
            TimerKind::Pace => {
                c.pace_timer = None;
                if let Some((idx, free)) = c.paced.take() {
                    if let Err(f) = dial_candidate(c, idx, free, slot, id, ctx) {
                        log::warn!(
                            "client {peer} {}: {} could not start: {f}",
                            c.dc,
                            ctx.routes.routes[c.cands[idx].route].label()
                        );
                        if f == Failure::Local {
                            return Step::Close(CloseReason::LocalResource);
                        }
                        if c.running() == 0 {
                            if let Some(step) = start_next(c, slot, id, &peer, ctx) {
                                return step;
                            }
                        }
                    }
                }
                Step::Progress
            }
            TimerKind::Budget => {
                c.budget_timer = None;
                // Attempts that ran longer than a hedge delay and still had nothing are evidence
                // against their route (else a black hole slower than the budget never goes Down);
                // younger ones were only racing and count as cancelled.
                let hedge_ms = ctx.cfg.hedge_delay.as_millis() as u64;
                for i in 0..2 {
                    if let Some(a) = c.attempts[i].take() {
                        if ctx.now.saturating_sub(a.started) >= hedge_ms {
                            ctx.wheel.cancel(a.timer);
                            attempt_failed(
                                c,
                                a,
                                Failure::Timeout,
                                None,
                                "connect budget spent",
                                &peer,
                                ctx,
                            );
                        } else {
                            c.attempts[i] = Some(a);
                        }
                    }
                }
                log::warn!(
                    "client {peer} {}: no route ready within the connect budget ({}ms), closing so the client retries",
                    c.dc,
                    ctx.cfg.connect_budget.as_millis()
                );
                Step::Close(CloseReason::UpstreamUnreachable)
            }
            _ => Step::Progress,
        }
    }

    /// Switches to relaying over `up`. `started` is when its dial began; `None` for a pooled
    /// upstream (no fresh RTT sample, and its health was already proven).
    fn start_relay(
        &mut self,
        route: usize,
        target: String,
        started: Option<u64>,
        up: Upstream,
        ctx: &mut Ctx<'_>,
    ) -> Step {
        let Phase::Connecting(c) = std::mem::replace(&mut self.phase, Phase::Closed) else {
            return Step::Wait;
        };
        let mut c = *c;
        c.cancel_all(ctx);
        let r = &mut ctx.routes.routes[route];
        r.sessions += 1;
        r.pool.touch(ctx.now);
        let tier = r.tier;
        ctx.pool_due.push(route);
        if started.is_some() {
            ctx.stats.attempts_ok[tier.index()] += 1;
        }
        self.info.tier = Some(tier);
        self.info.route = Some(route);
        self.info.target = target;
        self.info.connected_ms = Some(ctx.now);
        self.info.connect_rtt = started.map_or(0, |t| ctx.now.saturating_sub(t));
        self.info.route_reported = started.is_none();
        debug!(
            "client {} {} connected via {} in {}ms",
            self.peer, c.dc, self.info.target, self.info.connect_rtt
        );
        let relay = Relay::new(c.accepted, c.dc, tier, up, c.up, c.client_eof, ctx);
        self.phase = Phase::Relay(Box::new(relay));
        self.arm_ping(tier, ctx);
        Step::Progress
    }
}

/// `kws2.web.telegram.org@149.154.167.220:443` or `149.154.167.50:443` (Worker/CF names are
/// redacted).
fn target_label(spec: &DialSpec, tier: Tier) -> String {
    match &spec.kind {
        crate::net::dial::DialKind::Tcp => spec.addr.to_string(),
        crate::net::dial::DialKind::Ws { host, .. } => {
            let host = if tier.is_cloudflare() {
                crate::route::table::redact(host)
            } else {
                host.clone()
            };
            format!("{host}@{}", spec.addr)
        }
    }
}

/// Starts the next candidate in a free attempt slot. `Some(step)` ends the connect step (no
/// candidate left and nothing running).
fn start_next(
    c: &mut Connecting,
    slot: usize,
    id: u32,
    peer: &SocketAddr,
    ctx: &mut Ctx<'_>,
) -> Option<Step> {
    if c.paced.is_some() {
        return None; // one start is already waiting for its pacing slot
    }
    let free = c.attempts.iter().position(|a| a.is_none())?;
    while let Some(idx) = c.pick() {
        c.used[idx] = true;
        // Handshakes to one address are spaced by `--handshake-pace` (a DPI pattern drops
        // bursts of parallel handshakes): wait for this one's slot if it is not now.
        let pace = ctx.cfg.handshake_pace.as_millis() as u64;
        let at = ctx.routes.pace_slot(c.cands[idx].spec.addr, ctx.now, pace);
        if at > ctx.now {
            c.paced = Some((idx, free));
            let ev = TimerEv {
                slot: slot as u32,
                conn_id: id,
                kind: TimerKind::Pace,
            };
            c.pace_timer = Some(ctx.wheel.insert(at, ev));
            return None;
        }
        match dial_candidate(c, idx, free, slot, id, ctx) {
            Ok(()) => return None,
            Err(f) => {
                let route = c.cands[idx].route;
                log::warn!(
                    "client {peer} {}: {} could not start: {f}",
                    c.dc,
                    ctx.routes.routes[route].label()
                );
                if f == Failure::Local {
                    return Some(Step::Close(CloseReason::LocalResource));
                }
            }
        }
    }
    if c.running() == 0 {
        log::warn!(
            "client {peer} {}: every route failed, closing so the client retries",
            c.dc
        );
        return Some(Step::Close(CloseReason::UpstreamUnreachable));
    }
    None
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
    let route = c.cands[idx].route;
    let tier = ctx.routes.routes[route].tier;
    let token = token::encode(slot, id, Role::Up(free as u8));
    let dial = Dial::start(
        &c.cands[idx].spec,
        ctx.registry,
        token,
        ctx.cfg.tcp_keepalive,
    )?;
    let timeout = match tier {
        Tier::Ws => ctx.cfg.ws_connect_timeout,
        Tier::Worker | Tier::CfProxy => ctx.cfg.cf_connect_timeout,
        Tier::Tcp => ctx.cfg.tcp_connect_timeout,
    };
    let timer = ctx.wheel.insert(
        ctx.now + timeout.as_millis() as u64,
        TimerEv {
            slot: slot as u32,
            conn_id: id,
            kind: TimerKind::Attempt(free as u8),
        },
    );
    ctx.stats.attempts[tier.index()] += 1;
    c.attempts[free] = Some(Attempt {
        cand: idx,
        dial,
        ready: Ready::default(),
        timer,
        started: ctx.now,
    });
    if c.hedge_timer.is_none() && c.pick().is_some() {
        let delay = ctx.routes.routes[route]
            .health
            .hedge_delay(ctx.cfg.hedge_delay.as_millis() as u64, HEDGE_FLOOR_MS);
        c.hedge_timer = Some(ctx.wheel.insert(
            ctx.now + delay,
            TimerEv {
                slot: slot as u32,
                conn_id: id,
                kind: TimerKind::Hedge,
            },
        ));
    }
    Ok(())
}

/// Accounts a failed attempt: stats, route health (which may schedule a recovery probe), and
/// skipping the route's other host name after a connect-level failure.
fn attempt_failed(
    c: &mut Connecting,
    a: Attempt,
    f: Failure,
    retry_after: Option<u32>,
    detail: &str,
    peer: &SocketAddr,
    ctx: &mut Ctx<'_>,
) {
    let route = c.cands[a.cand].route;
    let tier = ctx.routes.routes[route].tier;
    ctx.stats.attempts_failed[tier.index()] += 1;
    let ms = ctx.now.saturating_sub(a.started);
    if let Some(folded) = ctx.attempt_log.allow(ctx.now) {
        log::warn!(
            "client {peer} {}: {} {} failed after {ms}ms: {f} ({detail}){}",
            c.dc,
            tier.name(),
            target_label(&c.cands[a.cand].spec, tier),
            if folded > 0 {
                format!(" ({folded} similar suppressed)")
            } else {
                String::new()
            }
        );
    }
    if let Some(change) = ctx
        .routes
        .on_failure(route, ctx.now, f, retry_after, ctx.cfg, ctx.rng)
    {
        if let State::Down { until } = change.to {
            ctx.probe_due.push((route, until));
        }
    }
    if matches!(f, Failure::Timeout | Failure::Refused) || !a.dial.tcp_done() {
        // Same address, same outcome: skip this route's other host name.
        for (i, cand) in c.cands.iter().enumerate() {
            if cand.route == route {
                c.used[i] = true;
            }
        }
    }
}
