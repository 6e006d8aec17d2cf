//! Operator actions on the ladder, as the control socket asks for them (`ctl pin`, `ctl unpin`,
//! `ctl probe`), and the read-only per-route snapshot `ctl status` shows ([`RouteStatus`]).
//!
//! Sans-IO like the rest of the ladder: time is a parameter. A pin only reorders the plans of
//! new sessions ([`Ladder::plan`] puts the pinned tier's or route's usable routes first); routes
//! in cooldown are still left out (clients never pay for health checks), health is still
//! tracked for every route, and sessions already relaying never consult the ladder again. A
//! manual probe is scheduled like a doubt probe, through the same pacing, budgets and job slots
//! as any background work. Routes a reload retired are listed with state `retired` and refuse
//! a pin or a probe.

use std::fmt;

use log::info;

use crate::config::Tier;
use crate::error::Failure;
use crate::mtproto::dc::DcId;
use crate::route::health::State;
use crate::route::pool::Pooled;

use super::{Ladder, RouteId, Sched};

/// What new sessions prefer while pinned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pin {
    /// Every usable route of this tier first.
    Tier(Tier),
    /// This route first (for its DC's sessions).
    Route(RouteId),
}

impl fmt::Display for Pin {
    /// `tier ws` or `route #3`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Pin::Tier(t) => write!(f, "tier {}", t.name()),
            Pin::Route(id) => write!(f, "route #{id}"),
        }
    }
}

/// What [`Ladder::probe_now`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProbeNow {
    /// The route's probe is due now; the background work hands it out on the next turn.
    Scheduled,
    /// A probe of the route is already running; its result is the answer.
    AlreadyRunning,
}

/// One route as `ctl status` shows it. Times are ms.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RouteStatus {
    /// The route id (`#N` in `ctl`).
    pub id: RouteId,
    /// The route's log label (`ws:DC2 kws2.web.telegram.org@…`; private names redacted).
    pub label: String,
    /// Its tier.
    pub tier: Tier,
    /// Its DC.
    pub dc: DcId,
    /// `unknown`, `up`, `suspect`, `down`, or `retired` (no longer configured after a reload:
    /// kept for the ids live sessions hold, never planned, probed or filled again).
    pub state: &'static str,
    /// Cooldown left (ms); 0 unless `down` and cooling (a `down` route at 0 waits for its
    /// recovery probe).
    pub cooldown_left_ms: u64,
    /// 95th percentile of the recent connect RTTs (ms), once enough samples exist.
    pub rtt_p95_ms: Option<u64>,
    /// The last failure that counted against the route and how long ago (ms).
    pub last_failure: Option<(Failure, u64)>,
    /// `idle`, `due`, `doubt` (due whatever the traffic) or `running`.
    pub probe: &'static str,
    /// Warm pooled upstreams and fills in flight.
    pub pool: (usize, usize),
    /// Sessions started on the route since start.
    pub sessions: u64,
    /// The current pin selects this route (its tier or itself); never a retired one.
    pub pinned: bool,
    /// Retired by a reload ([`Ladder::reconfigure`]); `state` is then `retired`.
    pub retired: bool,
    /// Sessions on the route that froze since start (docs/design.md §4 rule 7).
    pub frozen: u64,
    /// The latest freeze: how, the bytes down before it (the freeze's size), how long ago (ms).
    pub last_freeze: Option<(crate::error::Freeze, u64, u64)>,
}

impl<U: Pooled> Ladder<U> {
    /// Pins `p` for new sessions (logged). Errors: a route id that does not exist, or one a
    /// reload retired.
    pub fn pin(&mut self, p: Pin) -> Result<(), String> {
        if let Pin::Route(id) = p {
            if id >= self.table.routes.len() {
                return Err(format!(
                    "no route #{id} ({} exist)",
                    self.table.routes.len()
                ));
            }
            if self.table.routes[id].retired {
                return Err(format!("route #{id} was retired by a reload"));
            }
        }
        self.pinned = Some(p);
        match p {
            Pin::Tier(t) => info!("pin: new sessions prefer tier {}", t.name()),
            Pin::Route(id) => info!(
                "pin: new sessions prefer route #{id} {}",
                self.table.routes[id].label()
            ),
        }
        Ok(())
    }

    /// Removes the pin (logged if there was one) and returns it.
    pub fn unpin(&mut self) -> Option<Pin> {
        let old = self.pinned.take();
        if let Some(p) = old {
            info!("pin: {p} released, new sessions follow the tier order again");
        }
        old
    }

    /// The current pin.
    pub fn pinned(&self) -> Option<Pin> {
        self.pinned
    }

    /// 0 if the pin selects `id` (planned first), else 1.
    pub(super) fn pin_rank(&self, id: RouteId) -> u8 {
        let hit = match self.pinned {
            Some(Pin::Tier(t)) => self.table.routes[id].tier == t,
            Some(Pin::Route(r)) => r == id,
            None => false,
        };
        u8::from(!hit)
    }

    /// Routes that exist so far.
    pub fn route_count(&self) -> usize {
        self.table.routes.len()
    }

    /// The routes of `tier` toward `dc` (created on first use, like a client's would be);
    /// empty when that tier is not configured.
    pub fn select(&mut self, tier: Tier, dc: DcId) -> Vec<RouteId> {
        let ids = self.routes_for(dc);
        ids.into_iter()
            .filter(|&id| self.table.routes[id].tier == tier)
            .collect()
    }

    /// Makes `id`'s probe due at `now` whatever its recent traffic (like a doubt). Errors: no
    /// such route, a route a reload retired, or the route is in cooldown (no probe may run
    /// before it ends; its recovery probe is due then).
    pub fn probe_now(&mut self, id: RouteId, now: u64) -> Result<ProbeNow, String> {
        let Some(route) = self.table.routes.get(id) else {
            return Err(format!(
                "no route #{id} ({} exist)",
                self.table.routes.len()
            ));
        };
        if route.retired {
            return Err(format!("route #{id} was retired by a reload"));
        }
        if let State::Down { until } = route.health.state() {
            if now < until {
                return Err(format!(
                    "route #{id} is in cooldown for {}ms more; its recovery probe runs then",
                    until - now
                ));
            }
        }
        if self.slots[id].sched == Sched::Running {
            return Ok(ProbeNow::AlreadyRunning);
        }
        self.slots[id].sched = Sched::Doubt(now);
        info!("probe {} requested", route.label());
        Ok(ProbeNow::Scheduled)
    }

    /// Every route as `ctl status` shows it, at `now`, in id order; retired routes are listed
    /// with state `retired` (no cooldown, never pinned).
    pub fn snapshot(&self, now: u64) -> Vec<RouteStatus> {
        self.table
            .routes
            .iter()
            .enumerate()
            .map(|(id, r)| {
                let (state, cooldown_left_ms) = match r.health.state() {
                    _ if r.retired => ("retired", 0),
                    State::Unknown => ("unknown", 0),
                    State::Up => ("up", 0),
                    State::Suspect => ("suspect", 0),
                    State::Down { until } => ("down", until.saturating_sub(now)),
                };
                let probe = match self.slots[id].sched {
                    Sched::Idle => "idle",
                    Sched::Due(_) => "due",
                    Sched::Doubt(_) => "doubt",
                    Sched::Running => "running",
                };
                RouteStatus {
                    id,
                    label: r.label(),
                    tier: r.tier,
                    dc: r.dc,
                    state,
                    cooldown_left_ms,
                    rtt_p95_ms: r.health.rtt_p95(),
                    last_failure: r
                        .health
                        .last_failure()
                        .map(|(f, at)| (f, now.saturating_sub(at))),
                    probe,
                    pool: self.pool_len(id),
                    sessions: r.sessions,
                    pinned: !r.retired && self.pin_rank(id) == 0,
                    retired: r.retired,
                    frozen: self.slots[id].freezes.total,
                    last_freeze: self.slots[id]
                        .freezes
                        .last
                        .map(|(f, bytes, at)| (f, bytes, now.saturating_sub(at))),
                }
            })
            .collect()
    }
}
