//! The ladder: every rule that decides which route a client gets and what background work runs.
//!
//! Sans-IO, in the style of `dns`: facts in, decisions out, time as a parameter (`now`, u64 ms on
//! the caller's monotonic clock), randomness owned (seeded by the caller). Owns: the route table,
//! per-route health and its logging, the Worker request budgets and how sessions spread over
//! several Workers (`spread.rs`), handshake pacing, the probe
//! schedule (and a probe's byte goal), pool policy and the pools' entries (generic over
//! [`Pooled`]), and whether a route's sessions may be pinged ([`Ladder::pings_allowed`]). Must not touch:
//! sockets, clocks, the timer wheel — `route::prober` runs the work this hands out and `conn`
//! reports what sessions saw. The `front` tier's planning rule (domain fronting: only after the
//! direct ws route failed at TLS or upgrade) is `front.rs`; which proof may end a flap quarantine
//! (only a probe begun after it) is `quarantine.rs`; what a frozen session does to its route is
//! `freeze.rs`. `--cf-ip` edges (the pool, replacing a spent sampled edge in the background,
//! their status) are `edges.rs`. How each observation reaches its rule ([`Ladder::observe`]) is `observe.rs`.
//! Failures that are a dependency's, not a route's — the path to an address, the
//! outbound proxy — are kept and said by `deps.rs` (over `route::reach` and `route::outproxy`),
//! and so is the verdict whether Telegram is reachable at all (`route::verdict`).
//! The rules are docs/design.md §4;
//! each one is a unit test in
//! `tests/` (client-path rules in `tests/mod.rs`, background rules in `tests/background.rs`,
//! the field faults' rules 6 and 7, pings and a dead network in `tests/under_fire.rs`).
//!
//! Interface:
//! * [`Ladder::plan`] orders a client's candidates; [`Ladder::take_pooled`] hands a warm upstream
//!   of the best route; [`Ladder::pace`] says when a client's handshake may start.
//! * [`Ladder::observe`] takes what a session or the prober saw ([`Observation`]).
//! * [`Ladder::next_work`] hands out background work ([`Work`]) that is due;
//!   [`Ladder::next_deadline`] says when to ask again.
//! * Operator actions and the status snapshot (`ops.rs`): [`Ladder::pin`], [`Ladder::unpin`],
//!   [`Ladder::probe_now`], [`Ladder::snapshot`].

use std::net::{IpAddr, SocketAddr};

use log::{debug, info};

use crate::config::Config;
use crate::mtproto::dc::DcId;
use crate::net::outbound::Active;
use crate::rng::Rng;
use crate::route::budget::Budget;
use crate::route::health::{State, Use};
use crate::route::outproxy::ProxyDep;
use crate::route::pace::{PacePolicy, Pacer};
use crate::route::pool::{Pool, Pooled, Swept};
use crate::route::quota::{Accounts, GroupStatus};
use crate::route::reach::Reach;
use crate::route::table::{Route, Table};
use crate::route::verdict::Verdict;

/// Index of a route in the table (stable for the process lifetime).
pub type RouteId = usize;

/// Background jobs (probes and pool fills) in flight at once, at most.
pub const MAX_BACKGROUND: usize = 16;

/// Retry delay when background work cannot start yet (DNS pending, job slots full), ms.
pub const RETRY_MS: u64 = 1_000;

/// Lowest hedge delay derived from a route's RTT (ms).
pub const HEDGE_FLOOR_MS: u64 = 50;

/// DCs whose routes are probed once at start (`--startup-probes`): the production DCs.
pub const STARTUP_DCS: [u16; 5] = [1, 2, 3, 4, 5];

/// Largest reply (bytes down) of a short session (docs/design.md §4 rule 6): a `resPQ` or a
/// short error, not a working session.
pub const SHORT_REPLY_MAX: u64 = 1024;

/// Smallest reply (bytes down) of a short session: anything shorter is a transport error code
/// (4 bytes in the client's framing, at most 23 with padded intermediate), the DC's verdict on
/// the client (-404: an auth key it does not know), which a broken client may loop on at once
/// forever. Such a session neither counts as short nor resets the count.
pub const SHORT_REPLY_MIN: u64 = 24;

/// Short sessions in a row on one route, with no normal session in between and within
/// [`SHORT_WINDOW_SESSIONS`] × `--short-session`, that put it down as `closed-after-reply`.
/// One alone is not enough: a DC legitimately closes a client with a bad key after a short error.
pub const SHORT_ENDS_TO_FAIL: u8 = 3;

/// The window of [`SHORT_ENDS_TO_FAIL`], in units of `--short-session` (60 s at the default).
pub const SHORT_WINDOW_SESSIONS: u64 = 20;

/// When a route's next probe runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sched {
    /// Nothing scheduled (a route no client has used and no failure has touched).
    Idle,
    /// A probe is due at this time (ms); recent real traffic on the route postpones it.
    Due(u64),
    /// A session cast doubt on the route (it asked and got nothing): a probe is due at this
    /// time (ms) whatever traffic the route carried lately.
    Doubt(u64),
    /// A probe is running; its result schedules the next one.
    Running,
}

impl Sched {
    /// When the next probe is due, if one is scheduled and not running.
    pub fn at(self) -> Option<u64> {
        match self {
            Sched::Due(at) | Sched::Doubt(at) => Some(at),
            Sched::Idle | Sched::Running => None,
        }
    }
}

/// How a route's pool is refilled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Refill {
    /// Kept at its target while hot.
    Continuous,
    /// Only as many fills as sessions started since the last fill (a Worker: every fill is a
    /// request against its daily quota).
    OnSessionStart(u32),
}

/// What the ladder keeps per route beside the table entry.
struct Slot<U> {
    sched: Sched,
    pool: Pool<U>,
    refill: Refill,
    /// A fill was deferred; do not try again before this time (ms).
    fill_retry_at: u64,
    /// A client dialled this route (won, lost or failed): it gets liveness probes once Up.
    dialled: bool,
    /// When the last doubt probe was handed out (ms; 0 = never): doubts are answered at most
    /// once per `--cooldown-base`.
    doubt_probed_at: u64,
    /// Short sessions in a row (rule 6) and when the first of them ended (ms).
    short_ends: u8,
    short_since: u64,
    /// A session on this route was ended by the upstream right after our WS ping: its
    /// sessions are not pinged before this time (ms; 0 = pings allowed), `--pings-off-for`.
    pings_off_until: u64,
    /// The route's last failure was `stalled`, or a session on it froze: its probes must pull
    /// `--stall-probe-bytes` (rule 7) until one succeeds.
    stall_probe: bool,
    /// Its frozen sessions (`freeze.rs`).
    freezes: freeze::Freezes,
    /// When the route's last probe was handed out (ms): a probe begun before a flap
    /// quarantine ended proves nothing about it (rule 3).
    probe_started: u64,
    /// The probe handed out last had to pull `--stall-probe-bytes`: only such a probe's
    /// success pays a pull the route owes (rule 7).
    probe_pulls: bool,
}

pub use facts::{Candidate, Counters, Observation, Plan, SessionEnd, Work};

mod deps;
mod edges;
mod facts;
mod freeze;
mod front;
mod observe;
mod quarantine;
mod reconfigure;
mod rules;
mod spread;

pub use edges::EdgeStatus;
pub use ops::{Pin, ProbeNow, RouteStatus};

mod ops;

/// The ladder. See the module docs.
pub struct Ladder<U> {
    cfg: Config,
    table: Table,
    slots: Vec<Slot<U>>,
    budgets: Vec<Budget>,
    pacer: Pacer,
    rng: Rng,
    in_flight: usize,
    sweep_at: Option<u64>,
    /// What the stats line shows.
    pub counters: Counters,
    /// This host's network is down: every address tried is unreachable and none works
    /// (`reach`'s flag, mirrored after each of its facts; `deps.rs`).
    network_down: bool,
    /// The path to each address the routes dial, and the network as a whole (`deps.rs`).
    reach: Reach,
    /// Whether Telegram is reachable at all (`route::verdict`; fed and said by `deps.rs`).
    verdict: Verdict,
    /// The network-down line was folded into the unreachable verdict's (said by it), so its
    /// "reachable again" line is folded too (`deps.rs`).
    network_folded: bool,
    /// The outbound proxy's own state (`deps.rs`).
    outproxy: ProxyDep,
    /// The outbound setting in force (`deps.rs`): a copy of its owner's, handed over by
    /// [`Ladder::set_outbound`] whenever it changes.
    outbound: Active,
    /// Shutting down (drain): no background work is handed out any more.
    stopped: bool,
    /// The operator's pin (`ctl pin`): its routes are planned first ([`Ladder::pin`]).
    pinned: Option<Pin>,
    /// How sessions are spread over several Workers (`spread.rs`).
    spread: spread::Spread,
    /// The Workers' accounts: a 429 holds every Worker of the account (`route::quota`).
    accounts: Accounts,
    /// Unix time (ms, UTC) at the caller's last [`Ladder::set_wall_ms`]: where the day's
    /// quota resets and which day requests count for.
    wall_ms: u64,
}

impl<U: Pooled> Ladder<U> {
    /// A ladder for `cfg` starting at `now`. With `cfg.startup_probes`, the routes of the
    /// production DCs are created and their probes are due at once (paced and budgeted like any
    /// background work), so the first client already finds a proven route.
    pub fn new(cfg: &Config, rng: Rng, now: u64) -> Ladder<U> {
        let burst = reconfigure::worker_burst(cfg);
        let mut l = Ladder {
            cfg: cfg.clone(),
            table: Table::new(),
            slots: Vec::new(),
            budgets: cfg
                .worker_domains
                .iter()
                .map(|_| Budget::new(cfg.worker_budget, burst, now))
                .collect(),
            pacer: Pacer::new(PacePolicy {
                pace_ms: ms(cfg.handshake_pace),
                burst: cfg.handshake_burst,
                max_wait_ms: ms(cfg.pace_max_wait),
            }),
            rng,
            in_flight: 0,
            sweep_at: (cfg.pool_size > 0).then(|| now + sweep_every(cfg)),
            counters: Counters::default(),
            network_down: false,
            reach: Reach::new(cfg.health.base_ms),
            verdict: Verdict::new(),
            network_folded: false,
            outproxy: ProxyDep::new(
                ms(cfg.outbound_proxy_backoff),
                ms(cfg.outbound_proxy_backoff_max),
            ),
            outbound: None,
            stopped: false,
            pinned: None,
            spread: spread::Spread::new(cfg.worker_domains.len()),
            accounts: Accounts::new(cfg),
            wall_ms: 0,
        };
        l.build_edges(cfg);
        if cfg.startup_probes {
            for dc in STARTUP_DCS {
                for r in l.routes_for(DcId::plain(dc)) {
                    l.due(r, now);
                }
            }
        }
        l
    }

    /// The route `id` (label, tier, health) for logs and stats.
    pub fn route(&self, id: RouteId) -> &Route {
        &self.table.routes[id]
    }

    /// The probe schedule of `id`.
    pub fn sched(&self, id: RouteId) -> Sched {
        self.slots[id].sched
    }

    /// Warm entries and fills in flight of `id`'s pool.
    pub fn pool_len(&self, id: RouteId) -> (usize, usize) {
        let p = &self.slots[id].pool;
        (p.len(), p.filling())
    }

    /// True while this host's network is really down: at least two addresses (every known one,
    /// if fewer) are unreachable and none works since they failed (`route::reach`). One
    /// address without a path (IPv6 on a router without IPv6, an ISP's net-unreachable for one
    /// range) is that address's fact and never sets this.
    pub fn network_down(&self) -> bool {
        self.network_down
    }

    /// Background jobs handed out and not reported yet.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// The wall clock (Unix ms, UTC) now: the reactor hands it over each loop iteration while
    /// Workers are configured (a 429's hold ends at the next 00:00 UTC; requests count per UTC
    /// day).
    pub fn set_wall_ms(&mut self, wall_ms: u64) {
        self.wall_ms = wall_ms;
    }

    /// A client's dial of `route` started: one request to a Worker's account, if it is one.
    pub fn note_dial(&mut self, route: RouteId) {
        if let Some(w) = self.table.worker_index(route, &self.cfg) {
            self.accounts.note_request(w, self.wall_ms);
        }
    }

    /// Each Worker account's state at `now` (`route::quota`), in the order of its first Worker.
    pub fn accounts(&self, now: u64) -> Vec<GroupStatus> {
        self.accounts.status(now, self.wall_ms)
    }

    /// Requests left today in each Worker's budget.
    pub fn budgets_left(&self, now: u64) -> Vec<u32> {
        self.budgets.iter().map(|b| b.available(now)).collect()
    }

    /// Route ids of `dc` in tier order, created on first use.
    pub fn routes_for(&mut self, dc: DcId) -> Vec<RouteId> {
        let ids = self.table.routes_for(dc, &self.cfg, self.cfg.listen);
        self.grow_slots();
        ids
    }

    /// A client's plan for `dc` at `now`: usable routes — the pinned ones first
    /// ([`Ladder::pin`]), then Up, then Unknown, then Suspect, tier order within each — with their dial specs (`resolve` maps a host name to a
    /// cached address; an unresolved route is skipped, never waited on). Routes in cooldown, or
    /// whose cooldown ended and wait for their recovery probe, are left out: clients never pay
    /// for health checks. If nothing is usable every route is listed (the connect budget still
    /// bounds the wait). With several Workers, the one this plan tries first is spread by
    /// weighted round robin over the healthy ones (`spread.rs`; each call advances it). A
    /// `front` route is listed only while fronting is allowed for its DC (`front.rs`: the
    /// direct ws route failed at TLS or upgrade).
    pub fn plan(
        &mut self,
        dc: DcId,
        now: u64,
        resolve: &mut dyn FnMut(&str) -> Option<IpAddr>,
    ) -> Plan {
        let ids = self.routes_for(dc);
        let spots = self.spread_workers(&ids, now);
        let mut ranked: Vec<(u8, u8, usize, RouteId)> = Vec::new();
        for (pos, &id) in ids.iter().enumerate() {
            if !self.front_allowed(id, &ids, now) {
                continue; // fronting only after the direct route failed at TLS/upgrade
            }
            let mut rank = match self.table.routes[id].health.usable(now) {
                Use::Preferred => 0,
                Use::Untested => 1,
                Use::Degraded => 2,
                Use::Cooling { .. } | Use::Expired => continue,
            };
            if self.unreachable_alone(id) {
                rank = 3; // its address has no path while others work: last (`deps.rs`)
            }
            let mut pos = pos;
            if let Some(spot) = spots.iter().find(|s| s.route == id) {
                pos = spot.pos;
                rank = spot.rank.unwrap_or(rank);
            }
            // The operator's pin (`ctl pin`) goes before rank order.
            ranked.push((self.pin_rank(id), rank, pos, id));
        }
        ranked.sort_unstable();
        let usable = !ranked.is_empty();
        let order: Vec<RouteId> = if usable {
            ranked.into_iter().map(|(_, _, _, id)| id).collect()
        } else {
            let allowed = |id: &RouteId| self.front_allowed(*id, &ids, now);
            ids.iter().copied().filter(allowed).collect()
        };
        let pooled = order.first().copied().filter(|&best| {
            self.table.routes[best].health.usable(now) == Use::Preferred
                && !self.slots[best].pool.is_empty()
        });
        let listen = self.cfg.listen;
        let mut cands = Vec::new();
        for route in order {
            for spec in self.table.routes[route].specs_for(resolve, listen) {
                cands.push(Candidate { route, spec });
            }
        }
        Plan {
            cands,
            pooled,
            usable,
        }
    }

    /// Takes a warm upstream of `route` (newest first; stale or dead entries are closed on the
    /// way) and when its dial began. `None` when the route is not Up or holds nothing alive.
    pub fn take_pooled(&mut self, route: RouteId, now: u64) -> Option<(U, u64)> {
        if self.table.routes[route].retired
            || self.table.routes[route].health.usable(now) != Use::Preferred
        {
            return None;
        }
        let (got, dropped) = self.slots[route].pool.take(now, ms(self.cfg.pool_max_age));
        if dropped > 0 {
            debug!(
                "pool {}: dropped {dropped} stale upstream(s)",
                self.table.routes[route].label()
            );
        }
        got
    }

    /// Whether sessions on `route` may send WS keepalive pings at `now`: false for
    /// `--pings-off-for` after a session on it was ended by the upstream right after our ping
    /// (docs/design.md §5 keepalive).
    pub fn pings_allowed(&self, route: RouteId, now: u64) -> bool {
        self.slots
            .get(route)
            .is_none_or(|s| now >= s.pings_off_until)
    }

    /// Client handshakes that pacing could not spread (see `route::pace`).
    pub fn unpaced(&self) -> u64 {
        self.pacer.unpaced()
    }

    /// When a client's handshake toward `addr` may start (≥ `now`, at most `--pace-max-wait`
    /// later): see `route::pace`.
    pub fn pace(&mut self, addr: SocketAddr, now: u64) -> u64 {
        self.pacer.client(addr, now)
    }

    /// The delay before a client hedges from `route` to the next one: 0 while nothing is known
    /// about the route and its first probe is still in flight (a client that arrives just after
    /// start races instead of waiting on what the ladder is finding out); otherwise 2 × the
    /// route's p95 once known, 2 × its slowest sample while fewer are known (clamped, see
    /// `Health::hedge_delay`), else `--hedge-delay`.
    pub fn hedge_delay(&self, route: RouteId) -> u64 {
        let health = &self.table.routes[route].health;
        if health.state() == State::Unknown && self.slots[route].sched == Sched::Running {
            return 0;
        }
        health.hedge_delay(ms(self.cfg.hedge_delay), HEDGE_FLOOR_MS)
    }

    /// Whether a client's dial of `route` begun at `started` and still running when its
    /// connect budget ran out at `now` is evidence against the route (report it as a timeout):
    /// one that ran longer than the route's own hedge delay is (a black hole slower than the
    /// budget must still go Down); a younger one was only racing (report it cancelled).
    pub fn budget_cut_is_evidence(&self, route: RouteId, started: u64, now: u64) -> bool {
        // The route's own hedge delay (its p95 or slowest sample), not the at-once rule of a
        // first probe in flight: a dial is judged against what this route normally needs.
        let own = self.table.routes[route]
            .health
            .hedge_delay(ms(self.cfg.hedge_delay), HEDGE_FLOOR_MS);
        now.saturating_sub(started) >= own
    }

    /// A fill (or an adopted hedge loser) of `route` reached the upgrade at `now`; its dial
    /// began at `dial_started`. The entry is kept if the route is still Up and wants it, else
    /// closed. Reaching the upgrade proves nothing about `resPQ` (a Worker answers 101 before
    /// it reaches Telegram), so health is not touched.
    pub fn fill_ready(&mut self, route: RouteId, mut up: U, dial_started: u64, now: u64) {
        self.job_ended();
        let cap = self.pool_cap(route);
        let window = ms(self.cfg.pool_max_age);
        let up_now = self.table.routes[route].health.usable(now) == Use::Preferred;
        let slot = &mut self.slots[route];
        slot.pool.fill_ended();
        let target = slot.pool.target(now, window, cap);
        if up_now && slot.pool.len() < target {
            debug!(
                "pool {}: warm upstream ready in {}ms",
                self.table.routes[route].label(),
                now.saturating_sub(dial_started)
            );
            slot.pool.put(up, dial_started, now);
            crate::logging::events::emit(|| {
                crate::logging::events::Event::new("pool_ready")
                    .str("label", &self.table.routes[route].label())
                    .num("dial_ms", now.saturating_sub(dial_started))
            });
        } else {
            up.close();
        }
    }

    /// Takes over a client's losing dial of `route` as a fill; false when the job slots are
    /// full (the caller drops it).
    pub fn adopt(&mut self, route: RouteId) -> bool {
        if self.in_flight >= MAX_BACKGROUND {
            return false;
        }
        self.in_flight += 1;
        self.slots[route].pool.fill_started();
        true
    }

    /// Pool upkeep at `now` (after [`Work::Sweep`]): everything is flushed after a suspend
    /// (`slept`); otherwise entries are aged out, liveness-checked and trimmed to demand, and
    /// the pools of routes that are no longer Up are emptied.
    pub fn sweep_pools(&mut self, now: u64, slept: bool) -> Swept {
        let max_age = ms(self.cfg.pool_max_age);
        let mut total = Swept::default();
        for id in 0..self.slots.len() {
            let cap = self.pool_cap(id);
            let up = self.table.routes[id].health.usable(now) == Use::Preferred;
            let pool = &mut self.slots[id].pool;
            if slept || !up {
                total.aged += pool.flush();
                continue;
            }
            let target = pool.target(now, max_age, cap);
            let s = pool.sweep(now, max_age, target);
            total.kept += s.kept;
            total.dead += s.dead;
            total.aged += s.aged;
        }
        if slept {
            info!("suspend detected (boot clock jumped): warm pools flushed");
        } else if total.dead > 1 && total.kept == 0 {
            debug!("every pooled upstream was dead ({}): refilling", total.dead);
        }
        total
    }

    /// The earliest time (ms) at which [`Ladder::next_work`] may have something new.
    pub fn next_deadline(&self) -> Option<u64> {
        if self.stopped {
            return None;
        }
        let mut next = self.sweep_at;
        let mut consider = |t: u64| next = Some(next.map_or(t, |n: u64| n.min(t)));
        for s in &self.slots {
            if let Some(at) = s.sched.at() {
                consider(at);
            }
            if s.fill_retry_at > 0 {
                consider(s.fill_retry_at);
            }
        }
        next
    }

    /// The next piece of background work due at `now`, if any; call until `None`. `resolve`
    /// maps a host name to a cached address (`None` = not known yet: retried later).
    pub fn next_work(
        &mut self,
        now: u64,
        resolve: &mut dyn FnMut(&str) -> Option<IpAddr>,
    ) -> Option<Work> {
        if self.stopped {
            return None;
        }
        if self.sweep_at.is_some_and(|t| t <= now) {
            self.sweep_at = Some(now + sweep_every(&self.cfg));
            return Some(Work::Sweep);
        }
        // A spent sampled edge is replaced before its routes' recovery probes are handed out.
        self.replace_edges(now);
        for id in 0..self.slots.len() {
            if let Some(at) = self.slots[id].sched.at() {
                if at <= now {
                    if let Some(w) = self.probe_due(id, now, resolve) {
                        self.slots[id].probe_started = now;
                        return Some(w);
                    }
                }
            }
        }
        for id in 0..self.slots.len() {
            if let Some(w) = self.fill_due(id, now, resolve) {
                return Some(w);
            }
        }
        None
    }
}

/// Pool upkeep interval: half the pool's max age, at least 1 s.
fn sweep_every(cfg: &Config) -> u64 {
    (ms(cfg.pool_max_age) / 2).max(1_000)
}

/// A duration in whole ms.
fn ms(d: std::time::Duration) -> u64 {
    d.as_millis() as u64
}

#[cfg(test)]
mod tests;
