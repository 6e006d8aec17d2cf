//! Performing the connect race's effects ([`Effect`]): the dials, the phase's session timers,
//! the attempt counters, the ladder's observations and the per-client log lines; and the route
//! view the race asks ([`View`], from the ladder and the configuration). The decisions are the
//! race's (`conn::race`), the phase's state `connect`'s.

use std::net::SocketAddr;

use log::debug;

use super::super::race::{Effect, GiveUp, Routes};
use super::super::{Ctx, Ready, SessionTimer, Step};
use super::{Attempt, Connecting};
use crate::config::Tier;
use crate::error::{CloseReason, Failure};
use crate::mtproto::dc::DcId;
use crate::net::dial::{Dial, DialSpec};
use crate::route::ladder::{Candidate, Observation, RouteId};
use crate::timer::TimerId;
use crate::token::{self, Role};

/// The race's route questions, answered from the ladder and the configuration.
pub(super) struct View<'c, 'a> {
    pub(super) ctx: &'c mut Ctx<'a>,
    pub(super) dc: DcId,
}

impl Routes for View<'_, '_> {
    fn tier(&self, route: RouteId) -> Tier {
        self.ctx.ladder.route(route).tier
    }

    fn attempt_timeout(&self, route: RouteId) -> u64 {
        attempt_timeout(self.tier(route), self.ctx)
    }

    fn pace(&mut self, addr: SocketAddr, now: u64) -> u64 {
        self.ctx.ladder.pace(addr, now)
    }

    fn hedge_delay(&self, route: RouteId) -> u64 {
        self.ctx.ladder.hedge_delay(route)
    }

    fn proxy_gate(&mut self, spec: &DialSpec, now: u64) -> Result<(), u64> {
        let outbound = self.ctx.outbound;
        if !crate::net::outbound::goes_via_proxy(outbound, spec.addr, spec.kind.host()) {
            return Ok(());
        }
        self.ctx.ladder.proxy_may_dial(now)
    }

    fn budget_cut_is_evidence(&self, route: RouteId, started: u64, now: u64) -> bool {
        self.ctx.ladder.budget_cut_is_evidence(route, started, now)
    }

    fn fresh_plan(&mut self, now: u64) -> Option<Vec<Candidate>> {
        if !self.ctx.cfg.tier_configured(Tier::Front) {
            return None;
        }
        Some(self.ctx.ladder.plan(self.dc, now, &mut |_| None).cands)
    }
}

impl Connecting {
    /// Performs the race's effects in order (a dial's outcome is told back to the race, whose
    /// further effects follow). `Some(step)` ends the connect step (the race gave up).
    pub(super) fn perform(&mut self, mut fx: Vec<Effect>, ctx: &mut Ctx<'_>) -> Option<Step> {
        let who = self.who;
        let mut i = 0;
        while let Some(&effect) = fx.get(i) {
            i += 1;
            match effect {
                Effect::ArmBudget { at } => {
                    let ev = who.ev(SessionTimer::Budget);
                    self.budget_timer = Some(ctx.wheel.insert(at, ev));
                }
                Effect::ArmPace { slot, at, .. } => {
                    let ev = who.ev(SessionTimer::Pace(slot as u8));
                    self.timers[slot] = Some(ctx.wheel.insert(at, ev));
                }
                Effect::Dial { slot, cand } => self.dial(slot, cand, &mut fx, ctx),
                Effect::ArmAttempt { slot, at } => {
                    let ev = who.ev(SessionTimer::Attempt(slot as u8));
                    self.timers[slot] = Some(ctx.wheel.insert(at, ev));
                    if let Some((cand, _)) = self.race.dialing(slot) {
                        let tier = ctx.ladder.route(self.race.cands()[cand].route).tier;
                        ctx.stats.attempts[tier.index()] += 1;
                    }
                }
                Effect::ArmHedge { at } => {
                    let ev = who.ev(SessionTimer::Hedge);
                    self.hedge_timer = Some(ctx.wheel.insert(at, ev));
                }
                Effect::Hedging => {
                    debug!("client {} {}: hedging to the next route", who.peer, self.dc);
                    ctx.stats.hedges += 1;
                }
                Effect::ProxyDown { cand, wait } => {
                    // The outbound proxy is down and its re-check is not due: this candidate is
                    // not dialled (a client's dial may be the re-check, never more than one per
                    // step).
                    let label = ctx.ladder.route(self.race.cands()[cand].route).label();
                    ctx.warn_client(
                        who.peer,
                        format_args!(
                            "{}: {label} not dialled: the outbound proxy is down (re-checked in {wait}ms)",
                            self.dc
                        ),
                    );
                }
                Effect::Fronting => {
                    debug!("{}: direct route failed at TLS/upgrade: fronting", self.dc)
                }
                Effect::CancelSlotTimer { slot } => cancel(&mut self.timers[slot], ctx),
                Effect::CancelHedge => cancel(&mut self.hedge_timer, ctx),
                Effect::CancelBudget => cancel(&mut self.budget_timer, ctx),
                Effect::Abandon {
                    slot,
                    cand,
                    started,
                } => {
                    if let Some(a) = self.end_slot(slot, ctx) {
                        abandon(self.race.cands()[cand].route, a.dial, started, ctx);
                    }
                }
                Effect::Cut {
                    slot,
                    cand,
                    started,
                } => {
                    if let Some(a) = self.end_slot(slot, ctx) {
                        let f = a.dial.timeout_failure();
                        let why = "connect budget spent";
                        self.report_failure(cand, &a.dial, started, (f, None, why), ctx);
                    }
                }
                Effect::GiveUp(why) => return Some(self.give_up(why, ctx)),
            }
        }
        None
    }

    /// Ends attempt slot `slot`: cancels its timer and hands its dial (if any) to the caller,
    /// which abandons or blames it.
    fn end_slot(&mut self, slot: usize, ctx: &mut Ctx<'_>) -> Option<Box<Attempt>> {
        cancel(&mut self.timers[slot], ctx);
        self.dials[slot].take()
    }

    /// Dials candidate `cand` in attempt slot `slot` ([`Effect::Dial`]) and tells the race
    /// whether it started.
    fn dial(&mut self, slot: usize, cand: usize, fx: &mut Vec<Effect>, ctx: &mut Ctx<'_>) {
        let token = token::encode(self.who.slot as usize, self.who.id, Role::Up(slot as u8));
        let spec = &self.race.cands()[cand].spec;
        let now = ctx.now;
        match Dial::start(
            spec,
            ctx.outbound,
            ctx.registry,
            token,
            ctx.cfg.tcp_keepalive,
        ) {
            Ok(dial) => {
                let route = self.race.cands()[cand].route;
                ctx.ladder.note_dial(route);
                let ready = Ready::default();
                self.dials[slot] = Some(Box::new(Attempt { dial, ready }));
                let mut view = View { ctx, dc: self.dc };
                self.race.dialled(slot, now, &mut view, fx);
            }
            Err(f) => {
                self.not_started(cand, f, ctx);
                let mut view = View { ctx, dc: self.dc };
                self.race.not_started(slot, f, now, &mut view, fx);
            }
        }
    }

    /// Reports a dial of candidate `cand` that could not start with `f`: one folded line; a
    /// failure of the outbound proxy or of the network path is counted and told to the ladder
    /// like one found later in the dial.
    fn not_started(&mut self, cand: usize, f: Failure, ctx: &mut Ctx<'_>) {
        let route = self.race.cands()[cand].route;
        let label = ctx.ladder.route(route).label();
        let peer = self.who.peer;
        crate::logging::events::emit(|| attempt_event(peer, &label, f, None));
        // One fold per kind: a local resource running out (descriptors, local ports)
        // repeats for every client while it lasts.
        if f.is_local() {
            ctx.warn_client(
                peer,
                format_args!("{}: {label} could not start: {f}{}", self.dc, f.hint()),
            );
        } else {
            ctx.warn_client(
                peer,
                format_args!("{}: {label} could not start: {f}", self.dc),
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
    }

    /// The race gave up: the line a client's operator sees, and the close reason.
    fn give_up(&mut self, why: GiveUp, ctx: &mut Ctx<'_>) -> Step {
        match why {
            GiveUp::LocalResource => Step::Close(CloseReason::LocalResource),
            GiveUp::EveryRouteFailed => {
                ctx.warn_client(
                    self.who.peer,
                    format_args!(
                        "{}: every route failed, closing so the client retries",
                        self.dc
                    ),
                );
                Step::Close(CloseReason::UpstreamUnreachable)
            }
            GiveUp::Budget => {
                ctx.warn_client(
                    self.who.peer,
                    format_args!(
                        "{}: no route ready within the connect budget ({}ms), closing so the client retries",
                        self.dc,
                        ctx.cfg.connect_budget.as_millis()
                    ),
                );
                Step::Close(CloseReason::UpstreamUnreachable)
            }
        }
    }

    /// Reports a failed attempt of candidate `cand` begun at `started` (stats, the ladder, one
    /// folded log line): `(failure, retry_after, detail)`.
    fn report_failure(
        &self,
        cand: usize,
        dial: &Dial,
        started: u64,
        (f, retry_after, detail): (Failure, Option<u32>, &str),
        ctx: &mut Ctx<'_>,
    ) {
        let spec = &self.race.cands()[cand].spec;
        let route = self.race.cands()[cand].route;
        let tier = ctx.ladder.route(route).tier;
        ctx.stats.attempts_failed[tier.index()] += 1;
        if dial.via().is_some() && !f.is_proxy() {
            // It got past the outbound proxy: the proxy works, whatever the destination did.
            ctx.ladder.proxy_worked(ctx.now, started);
        }
        let ms = ctx.now.saturating_sub(started);
        crate::logging::events::emit(|| {
            attempt_event(self.who.peer, &ctx.ladder.route(route).label(), f, Some(ms))
        });
        // One fold per tier and class: a flood of one failure (local ports, say) never hides
        // another.
        let kind = crate::logging::fold_key(&format!("{}:{f}", tier.name()));
        if let Some(folded) = ctx.attempt_log.allow(kind, ctx.now) {
            log::warn!(
                "client {} {}: {} {} failed after {ms}ms: {f}{} ({detail}){}",
                self.who.peer,
                self.dc,
                tier.name(),
                ctx.ladder.route(route).spec_label(spec),
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
    }

    /// Attempt slot `slot`'s dial failed (its timer already gone): reported, then the race
    /// moves on.
    pub(super) fn attempt_failed(
        &mut self,
        slot: usize,
        a: &Attempt,
        (f, retry_after, detail): (Failure, Option<u32>, &str),
        ctx: &mut Ctx<'_>,
    ) -> Option<Step> {
        let (cand, started) = self.race.dialing(slot)?;
        self.report_failure(cand, &a.dial, started, (f, retry_after, detail), ctx);
        let tcp_done = a.dial.tcp_done();
        self.ask(ctx, |race, now, view, fx| {
            race.failed(slot, f, tcp_done, now, view, fx)
        })
    }
}

/// Cancels the timer in `t`, if one is armed.
pub(super) fn cancel(t: &mut Option<TimerId>, ctx: &mut Ctx<'_>) {
    if let Some(t) = t.take() {
        ctx.wheel.cancel(t);
    }
}

/// Gives up `dial` of `route` (begun at `started`) without blaming the route: counted
/// cancelled, and a WebSocket dial finishes in the background as a fill, so its outcome still
/// teaches the ladder.
fn abandon(route: RouteId, dial: Dial, started: u64, ctx: &mut Ctx<'_>) {
    let tier = ctx.ladder.route(route).tier;
    ctx.stats.attempts_cancelled[tier.index()] += 1;
    ctx.ladder
        .observe(Observation::AttemptCancelled { route }, ctx.now);
    // Not pooled, so nothing for a loser to fill: raw TCP and upstream proxies (which close a
    // connection that sends no init, docs/design.md §4 "Pools").
    if !matches!(tier, Tier::Tcp | Tier::Mtproto) {
        let deadline = started + attempt_timeout(tier, ctx);
        let times = (started, deadline);
        ctx.prober
            .take_loser(ctx.ladder, ctx.registry, route, dial, times, ctx.now);
    }
}

/// Bound on one dial of a route of `tier`, ms.
fn attempt_timeout(tier: Tier, ctx: &Ctx<'_>) -> u64 {
    ctx.cfg.attempt_timeout(tier).as_millis() as u64
}

/// The `attempt` event (`logging::events`): a client's dial of route `label` failed with `f`
/// after `after_ms`, or (`None`) could not start.
fn attempt_event(
    peer: std::net::SocketAddr,
    label: &str,
    f: Failure,
    after_ms: Option<u64>,
) -> crate::logging::events::Event {
    crate::logging::events::Event::new("attempt")
        .str("peer", &peer.to_string())
        .str("label", label)
        .str("failure", &f.to_string())
        .bool("started", after_ms.is_some())
        .num("after_ms", after_ms.unwrap_or(0))
}
