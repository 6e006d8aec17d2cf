//! The connect race as a sans-IO core: which candidate of the ladder's plan is dialled in
//! which of the two attempt slots and when, the hedge, the connect budget, the pacing slot, the
//! outbound-proxy gate, domain fronting within one connect, the winner and the losers' fate.
//!
//! Facts come in as method calls with the time (`now`, ms) injected: a dial started or could
//! not start, an attempt failed or won, a timer fired. Route questions (tier, pacing, hedge
//! delay, the proxy's state, a fresh plan) go to a [`Routes`], which the shell answers from the
//! ladder and the configuration. What to do comes out as [`Effect`]s, in the order the shell
//! must perform them; the shell (`connect`) owns the dials, the timers, the stats and the log
//! lines. No randomness is used. Route health is the ladder's: this core only reports.

use std::net::SocketAddr;

use crate::config::Tier;
use crate::error::Failure;
use crate::net::dial::DialSpec;
use crate::route::ladder::{Candidate, Plan, RouteId};

/// Route facts the race asks about; the shell answers from the ladder and the configuration.
pub trait Routes {
    /// The tier of `route`.
    fn tier(&self, route: RouteId) -> Tier;
    /// Bound on one dial of `route` (`--attempt-timeout` of its tier), ms.
    fn attempt_timeout(&self, route: RouteId) -> u64;
    /// When a handshake to `addr` may start (the ladder's pacing), ms; `<= now` is at once.
    fn pace(&mut self, addr: SocketAddr, now: u64) -> u64;
    /// How long to wait for an attempt on `route` before hedging to the next one, ms.
    fn hedge_delay(&self, route: RouteId) -> u64;
    /// `Err(at)` when `spec` goes through the outbound proxy, the proxy is down and its next
    /// re-check is at `at` (ms), not now (`Ladder::proxy_may_dial`).
    fn proxy_gate(&mut self, spec: &DialSpec, now: u64) -> Result<(), u64>;
    /// Whether cutting `route`'s attempt begun at `started` at the budget is evidence against
    /// it (`Ladder::budget_cut_is_evidence`).
    fn budget_cut_is_evidence(&self, route: RouteId, started: u64, now: u64) -> bool;
    /// A fresh plan's candidates for this client's DC when the `front` tier is configured
    /// (`None` otherwise), for domain fronting within one connect.
    fn fresh_plan(&mut self, now: u64) -> Option<Vec<Candidate>>;
}

/// Why a session is connecting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// Its init was just accepted.
    Client,
    /// Its pooled upstream stayed silent: its request is replayed on a fresh route (never the
    /// pool, at most once).
    Retry,
}

/// Why the race gave up (the shell logs and closes the session).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GiveUp {
    /// Every candidate failed and nothing runs.
    EveryRouteFailed,
    /// `--connect-budget` ran out.
    Budget,
    /// A dial could not start for a local resource (descriptors, ports): `Failure::Local`.
    LocalResource,
}

/// What the shell must do, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Effect {
    /// Arm the connect budget's timer at `at` (ms).
    ArmBudget { at: u64 },
    /// Candidate `cand` waits for its pacing slot: arm slot `slot`'s timer at `at`.
    ArmPace { slot: usize, cand: usize, at: u64 },
    /// Start dialling candidate `cand` in slot `slot`; answer with [`Race::dialled`] or
    /// [`Race::not_started`] before performing the effects after it (there are none).
    Dial { slot: usize, cand: usize },
    /// The dial in `slot` started: arm its deadline at `at` (ms), count the attempt.
    ArmAttempt { slot: usize, at: u64 },
    /// Arm the hedge timer at `at` (ms).
    ArmHedge { at: u64 },
    /// The hedge fired with a candidate left: count and log the hedge (a dial follows).
    Hedging,
    /// Candidate `cand` was not dialled: the outbound proxy is down, re-checked in `wait` ms.
    ProxyDown { cand: usize, wait: u64 },
    /// The plan ran out and `front` routes were appended (domain fronting): log it.
    Fronting,
    /// Cancel slot `slot`'s timer (pacing or deadline).
    CancelSlotTimer { slot: usize },
    /// Cancel the hedge timer.
    CancelHedge,
    /// Cancel the budget timer.
    CancelBudget,
    /// Give up the dial in `slot` (candidate `cand`, begun at `started`) without blaming its
    /// route: counted cancelled; a WebSocket dial finishes in the background as a pool fill.
    Abandon {
        slot: usize,
        cand: usize,
        started: u64,
    },
    /// The budget cut the dial in `slot` and that is evidence against its route: report it as
    /// a timed-out attempt ("connect budget spent").
    Cut {
        slot: usize,
        cand: usize,
        started: u64,
    },
    /// End the race and close the session.
    GiveUp(GiveUp),
}

/// One of the two attempt slots.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Slot {
    /// Nothing running.
    Free,
    /// Candidate `cand` waits for its pacing slot.
    Paced { cand: usize },
    /// Candidate `cand` dials since `started` (ms).
    Dialing { cand: usize, started: u64 },
}

/// The winner of a race.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Winner {
    /// Index of the winning candidate in [`Race::cands`].
    pub cand: usize,
    /// Its route.
    pub route: RouteId,
    /// When its dial began, ms.
    pub started: u64,
    /// The session is a retry after a silent pooled upstream (its close line says so).
    pub retried: bool,
}

/// State of one client's connect race.
#[derive(Debug)]
pub struct Race {
    plan: Plan,
    /// Candidates already dialled or skipped.
    used: Vec<bool>,
    slots: [Slot; 2],
    hedge_armed: bool,
    budget_armed: bool,
    origin: Origin,
}

impl Race {
    /// Starts a race over `plan` at `now` with a budget of `budget_ms`: a retry never takes
    /// the pool. Pushes [`Effect::ArmBudget`].
    pub fn new(
        mut plan: Plan,
        origin: Origin,
        now: u64,
        budget_ms: u64,
        fx: &mut Vec<Effect>,
    ) -> Race {
        if origin == Origin::Retry {
            plan.pooled = None;
        }
        fx.push(Effect::ArmBudget {
            at: now + budget_ms,
        });
        Race {
            used: vec![false; plan.cands.len()],
            plan,
            slots: [Slot::Free, Slot::Free],
            hedge_armed: false,
            budget_armed: true,
            origin,
        }
    }

    /// The route whose pool to take a warm upstream from before dialling (the plan's best
    /// route when it holds some; never for a retry).
    pub fn pool_route(&self) -> Option<RouteId> {
        self.plan.pooled
    }

    /// The candidates, in plan order (fronting ones appended).
    pub fn cands(&self) -> &[Candidate] {
        &self.plan.cands
    }

    /// Attempts in flight or waiting for their pacing slot.
    pub fn running(&self) -> usize {
        self.slots.iter().filter(|s| **s != Slot::Free).count()
    }

    /// Whether `slot` holds a candidate waiting for its pacing slot.
    pub fn paced(&self, slot: usize) -> bool {
        matches!(self.slots[slot & 1], Slot::Paced { .. })
    }

    /// The candidate dialling in `slot` and when it began, if one does.
    pub fn dialing(&self, slot: usize) -> Option<(usize, u64)> {
        match self.slots[slot & 1] {
            Slot::Dialing { cand, started } => Some((cand, started)),
            _ => None,
        }
    }

    /// Keeps one attempt running: starts the next candidate when nothing runs.
    pub fn keep_going(&mut self, now: u64, routes: &mut impl Routes, fx: &mut Vec<Effect>) {
        if self.running() == 0 {
            self.start_next(now, routes, fx);
        }
    }

    /// The dial of [`Effect::Dial`] in `slot` started: arms its deadline and, when another
    /// candidate remains and no hedge is armed, the hedge.
    pub fn dialled(
        &mut self,
        slot: usize,
        now: u64,
        routes: &mut impl Routes,
        fx: &mut Vec<Effect>,
    ) {
        let Some((cand, _)) = self.dialing(slot) else {
            return;
        };
        let route = self.plan.cands[cand].route;
        let at = now + routes.attempt_timeout(route);
        fx.push(Effect::ArmAttempt { slot, at });
        if !self.hedge_armed && self.pick().is_some() {
            self.hedge_armed = true;
            let at = now + routes.hedge_delay(route);
            fx.push(Effect::ArmHedge { at });
        }
    }

    /// The dial of [`Effect::Dial`] in `slot` could not start (`failure`, already reported by
    /// the shell): a local resource ends the race, anything else moves on when nothing runs.
    pub fn not_started(
        &mut self,
        slot: usize,
        failure: Failure,
        now: u64,
        routes: &mut impl Routes,
        fx: &mut Vec<Effect>,
    ) {
        self.slots[slot & 1] = Slot::Free;
        if failure == Failure::Local {
            fx.push(Effect::GiveUp(GiveUp::LocalResource));
            return;
        }
        self.keep_going(now, routes, fx);
    }

    /// The dial in `slot` failed with `failure` (reported by the shell; its deadline timer
    /// already gone). After a connect-level failure (a timeout, a refusal, or any failure
    /// before TCP was up: `tcp_done` false) the route's other host names on the same address
    /// are skipped (same outcome). Starts the next candidate when nothing runs.
    pub fn failed(
        &mut self,
        slot: usize,
        failure: Failure,
        tcp_done: bool,
        now: u64,
        routes: &mut impl Routes,
        fx: &mut Vec<Effect>,
    ) {
        let Slot::Dialing { cand, .. } = std::mem::replace(&mut self.slots[slot & 1], Slot::Free)
        else {
            return;
        };
        let connect_level = matches!(
            failure,
            Failure::Timeout | Failure::HandshakeTimeout | Failure::Refused
        );
        if connect_level || !tcp_done {
            // A media cfproxy route's two names may resolve to different addresses.
            let (route, addr) = (self.plan.cands[cand].route, self.plan.cands[cand].spec.addr);
            for (i, c) in self.plan.cands.iter().enumerate() {
                if c.route == route && c.spec.addr == addr {
                    self.used[i] = true;
                }
            }
        }
        self.keep_going(now, routes, fx);
    }

    /// The dial in `slot` is ready: it wins. The shell then ends the race ([`Race::cancel_all`]).
    pub fn won(&mut self, slot: usize) -> Option<Winner> {
        let Slot::Dialing { cand, started } =
            std::mem::replace(&mut self.slots[slot & 1], Slot::Free)
        else {
            return None;
        };
        Some(Winner {
            cand,
            route: self.plan.cands[cand].route,
            started,
            retried: self.origin == Origin::Retry,
        })
    }

    /// The hedge timer fired: with one attempt running and another candidate left, the next
    /// one starts in parallel (always a different route).
    pub fn hedge_fired(&mut self, now: u64, routes: &mut impl Routes, fx: &mut Vec<Effect>) {
        self.hedge_armed = false;
        if self.running() == 1 && self.pick().is_some() {
            fx.push(Effect::Hedging);
            self.start_next(now, routes, fx);
        }
    }

    /// Slot `slot`'s pacing slot came: its candidate is dialled (or the next one).
    pub fn pace_due(
        &mut self,
        slot: usize,
        now: u64,
        routes: &mut impl Routes,
        fx: &mut Vec<Effect>,
    ) {
        let slot = slot & 1;
        if let Slot::Paced { cand } = std::mem::replace(&mut self.slots[slot], Slot::Free) {
            self.dial_or_next(cand, slot, now, routes, fx);
        }
    }

    /// The connect budget ran out: each dial in flight is cut (evidence against its route) or
    /// abandoned (no blame), then the race gives up.
    pub fn budget_spent(&mut self, now: u64, routes: &impl Routes, fx: &mut Vec<Effect>) {
        self.budget_armed = false;
        for slot in 0..2 {
            if let Slot::Dialing { cand, started } =
                std::mem::replace(&mut self.slots[slot], Slot::Free)
            {
                let route = self.plan.cands[cand].route;
                if routes.budget_cut_is_evidence(route, started, now) {
                    fx.push(Effect::Cut {
                        slot,
                        cand,
                        started,
                    });
                } else {
                    fx.push(Effect::Abandon {
                        slot,
                        cand,
                        started,
                    });
                }
            }
        }
        fx.push(Effect::GiveUp(GiveUp::Budget));
    }

    /// Ends the race (a winner, or the session closing): paced slots are dropped, dials in
    /// flight abandoned (losers), the hedge and budget timers cancelled.
    pub fn cancel_all(&mut self, fx: &mut Vec<Effect>) {
        for slot in 0..2 {
            match std::mem::replace(&mut self.slots[slot], Slot::Free) {
                Slot::Free => {}
                Slot::Paced { .. } => fx.push(Effect::CancelSlotTimer { slot }),
                Slot::Dialing { cand, started } => fx.push(Effect::Abandon {
                    slot,
                    cand,
                    started,
                }),
            }
        }
        if std::mem::take(&mut self.hedge_armed) {
            fx.push(Effect::CancelHedge);
        }
        if std::mem::take(&mut self.budget_armed) {
            fx.push(Effect::CancelBudget);
        }
    }

    /// The next candidate to dial ([`Plan::next`]): never a route that already has an attempt.
    fn pick(&self) -> Option<usize> {
        let route = |s: &Slot| match *s {
            Slot::Free => None,
            Slot::Paced { cand } | Slot::Dialing { cand, .. } => Some(self.plan.cands[cand].route),
        };
        let busy = [route(&self.slots[0]), route(&self.slots[1])];
        self.plan.next(&self.used, &busy)
    }

    /// Starts the next candidate in a free slot, or parks it until its pacing slot; with
    /// nothing left to try and nothing running, gives up.
    fn start_next(&mut self, now: u64, routes: &mut impl Routes, fx: &mut Vec<Effect>) {
        let Some(free) = self.slots.iter().position(|s| *s == Slot::Free) else {
            return;
        };
        let Some(cand) = self.pick().or_else(|| self.add_fronting(now, routes, fx)) else {
            if self.running() == 0 {
                fx.push(Effect::GiveUp(GiveUp::EveryRouteFailed));
            }
            return;
        };
        self.used[cand] = true;
        let at = routes.pace(self.plan.cands[cand].spec.addr, now);
        if at > now {
            self.slots[free] = Slot::Paced { cand };
            fx.push(Effect::ArmPace {
                slot: free,
                cand,
                at,
            });
            return;
        }
        self.dial_or_next(cand, free, now, routes, fx);
    }

    /// Dials candidate `cand` in slot `free` unless the outbound proxy it goes through is down
    /// (then moves on when nothing runs; a client's dial may be the proxy's re-check).
    fn dial_or_next(
        &mut self,
        cand: usize,
        free: usize,
        now: u64,
        routes: &mut impl Routes,
        fx: &mut Vec<Effect>,
    ) {
        if let Err(at) = routes.proxy_gate(&self.plan.cands[cand].spec, now) {
            let wait = at.saturating_sub(now);
            fx.push(Effect::ProxyDown { cand, wait });
            self.keep_going(now, routes, fx);
            return;
        }
        self.slots[free] = Slot::Dialing { cand, started: now };
        fx.push(Effect::Dial { slot: free, cand });
    }

    /// Domain fronting within one connect (docs/design.md §4): when the plan has run out, the
    /// `front` routes that a failure during this connect made plannable (the direct ws route
    /// failed at TLS or upgrade) are appended from a fresh plan, so this client is not turned
    /// away for what its own attempt just taught the ladder. Each route is appended at most
    /// once, so this cannot loop. Returns the first new candidate to dial.
    fn add_fronting(
        &mut self,
        now: u64,
        routes: &mut impl Routes,
        fx: &mut Vec<Effect>,
    ) -> Option<usize> {
        let fresh = routes.fresh_plan(now)?;
        let before = self.plan.cands.len();
        for cand in fresh {
            let new = !self.plan.cands.iter().any(|k| k.route == cand.route);
            if new && routes.tier(cand.route) == Tier::Front {
                self.plan.cands.push(cand);
                self.used.push(false);
            }
        }
        if self.plan.cands.len() == before {
            return None;
        }
        fx.push(Effect::Fronting);
        self.pick()
    }
}

/// Whether a session starting its relay keeps the client's request replayable until the
/// upstream's first byte: only on a pooled upstream, and only while
/// `--pool-first-byte-timeout` (`first_byte_timeout_ms`) is on.
pub fn keeps_replay(pooled: bool, first_byte_timeout_ms: u64) -> bool {
    pooled && first_byte_timeout_ms != 0
}

#[cfg(test)]
mod tests;
