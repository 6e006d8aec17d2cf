//! The ladder's private rules: what a failure, a proof, a session's end (short sessions, rule
//! 6; an end right after our WS ping) and a probe's result do to a route and its schedule, which
//! probes must pull bytes (rule 7), and how background work gets its job slot, pacing slot and
//! budget. Reached only through `Ladder::observe` and `Ladder::next_work` (`mod.rs`).

use std::net::IpAddr;

use log::{debug, info, warn};

use super::facts::SessionEnd;
use super::{
    ms, Ladder, Refill, RouteId, Sched, Work, MAX_BACKGROUND, RETRY_MS, SHORT_ENDS_TO_FAIL,
    SHORT_REPLY_MAX, SHORT_REPLY_MIN, SHORT_WINDOW_SESSIONS,
};
use crate::config::Tier;
use crate::error::Failure;
use crate::logging::events::{emit, Event};
use crate::net::dial::DialSpec;
use crate::route::health::{Change, State, Use};
use crate::route::pool::Pooled;

/// The private rules behind [`Ladder::observe`] and [`Ladder::next_work`].
impl<U: Pooled> Ladder<U> {
    /// A background request (probe or fill) of `route` got a 429: that Worker's request budget
    /// backs off (a client's 429 is the health rule's alone: the budget governs background
    /// requests).
    pub(super) fn throttle(
        &mut self,
        route: RouteId,
        f: Failure,
        retry_after: Option<u32>,
        now: u64,
    ) {
        if f == Failure::Http(429) {
            if let Some(w) = self.table.worker_index(route, &self.cfg) {
                // The quota is the account's: every Worker on it stops background requests.
                for &s in self.accounts.siblings(w) {
                    if let Some(b) = self.budgets.get_mut(s) {
                        b.on_throttled(now, retry_after);
                    }
                }
            }
        }
    }

    /// A failure of `route`: health applies its table, and a Down route gets its recovery probe
    /// at the end of the cooldown. Logs a state change once.
    pub(super) fn fail(
        &mut self,
        route: RouteId,
        f: Failure,
        retry_after: Option<u32>,
        now: u64,
    ) -> Option<Change> {
        // While the network is down every open session goes silent (its upstream stalls, a
        // pooled one never answers): that silence is the outage's, not the route's.
        if self.network_down && matches!(f, Failure::Stalled | Failure::SilentPooled) {
            debug!(
                "route {}: {f} while the network is down, not counted",
                self.table.routes[route].label()
            );
            return None;
        }
        self.verdict_failed(route, f, now);
        if f == Failure::Stalled {
            // Its probes must pull past the freeze size, and its warm upstreams meet the same
            // freeze: dropped now, not at the next sweep.
            self.slots[route].stall_probe = true;
            self.slots[route].pool.flush();
        }
        // The path to the route's address, or the outbound proxy: a dependency's failure, kept
        // and said by that dependency (`deps.rs`); no route is cooled down for it.
        if self.dependency_failed(route, f, now) {
            return None;
        }
        if f == Failure::Http(429) {
            self.account_throttled(route, retry_after, now);
        }
        let r = &mut self.table.routes[route];
        let before = r.health.last_failure().map(|(f, _)| f);
        let change = r
            .health
            .on_failure(now, f, retry_after, &self.cfg.health, &mut self.rng)?;
        match change.to {
            State::Down { until } => {
                // A recovery probe failing as the route went down is a repeat, not news: said
                // at debug (the event still goes out), so a dead network does not log a line
                // per route per cooldown; a new failure class is said again.
                let repeat = matches!(change.from, State::Down { .. }) && before == Some(f);
                let level = if repeat {
                    log::Level::Debug
                } else {
                    log::Level::Warn
                };
                log::log!(
                    level,
                    "route {} down for {:.1}s: {f}{}{}",
                    r.label(),
                    change.cooldown_ms as f64 / 1000.0,
                    if r.health.is_redirect() {
                        " (no WS front for this DC; re-probed when the TTL ends)"
                    } else {
                        ""
                    },
                    if change.quarantined {
                        " (flapping: quarantined)"
                    } else {
                        ""
                    }
                );
                emit(|| {
                    route_event(r.label(), "down", Some(f), None, change.cooldown_ms)
                        .bool("redirect", r.health.is_redirect())
                        .bool("quarantined", change.quarantined)
                });
                self.due_at_most(route, until);
                if f == Failure::Http(429) {
                    self.hold_on_429(route, until);
                }
            }
            _ => {
                info!("route {} suspect: {f}", r.label());
                emit(|| route_event(r.label(), "suspect", Some(f), None, 0));
            }
        }
        Some(change)
    }

    /// A proof of `route` (probe `resPQ` or a session's first downstream byte).
    pub(super) fn succeed(
        &mut self,
        route: RouteId,
        rtt_ms: Option<u64>,
        via: &str,
        now: u64,
    ) -> Option<Change> {
        self.verdict_worked(route, now);
        self.dependency_worked(route, now);
        let r = &mut self.table.routes[route];
        r.last_ok = now;
        let change = r.health.on_proof(now, rtt_ms)?;
        let from = match change.from {
            State::Unknown => "unknown",
            State::Up => "up",
            State::Suspect => "suspect",
            State::Down { .. } => "down",
        };
        let rtt = rtt_ms.map_or(String::new(), |ms| format!(", {ms}ms"));
        info!("route {} {from} → up ({via}{rtt})", r.label());
        emit(|| route_event(r.label(), "up", None, Some(via), 0).str("from", from));
        Some(change)
    }

    pub(super) fn session_ended(
        &mut self,
        route: RouteId,
        end: SessionEnd,
        now: u64,
    ) -> Option<Change> {
        if end.after_ping && now >= self.slots[route].pings_off_until {
            let off = ms(self.cfg.pings_off_for);
            self.slots[route].pings_off_until = now + off;
            warn!(
                "route {} closes sessions after a WS ping: pings off for it for {}s",
                self.table.routes[route].label(),
                off / 1000
            );
        }
        if let Some(change) = self.count_short(route, end, now) {
            return Some(change);
        }
        // A pooled upstream the front hung up on at handover counts as asked even before the
        // client's first bytes were relayed: our relay init was its request (under load the
        // hang-up can be read before the client's request, which then never goes up).
        let asked = end.bytes_up > 0 || (end.pooled && end.by_upstream);
        let asked_got_nothing = asked && end.bytes_down == 0;
        if !asked_got_nothing {
            return None;
        }
        // A client that asked and got nothing, whoever hung up, casts doubt on the route (a
        // Worker answers 101 before it reaches Telegram): the prober looks at it now, even if
        // the route carried traffic a moment ago.
        // At most one doubt probe per route per --cooldown-base: a storm of such sessions
        // must not spend a Worker's budget probe by probe.
        let slot = &mut self.slots[route];
        let recent = slot.doubt_probed_at > 0
            && now.saturating_sub(slot.doubt_probed_at) < self.cfg.health.base_ms;
        if slot.sched != Sched::Running && !recent {
            slot.sched = Sched::Doubt(now);
        }
        // Only a prompt upstream hang-up counts against the route: an idle client cut by the
        // front, or one whose garbage made the DC close, says nothing about it.
        let prompt = now.saturating_sub(end.connected_at) <= ms(self.cfg.probe_timeout);
        if end.by_upstream && prompt {
            return self.fail(route, Failure::ClosedEarly, None, now);
        }
        None
    }

    /// docs/design.md §4 rule 6: a session the upstream ended within `--short-session` of its
    /// start after a tiny reply ([`SHORT_REPLY_MIN`]..=[`SHORT_REPLY_MAX`] bytes down) is
    /// short; the [`SHORT_ENDS_TO_FAIL`]th short session in a row on `route` within the window
    /// fails it as `closed-after-reply`. A normal session (longer, or more bytes down) resets
    /// the count; one the client or we ended that was short, one our WS ping ended, or one
    /// whose reply was only a transport error code (below [`SHORT_REPLY_MIN`]) neither counts
    /// nor resets.
    fn count_short(&mut self, route: RouteId, end: SessionEnd, now: u64) -> Option<Change> {
        if end.after_ping {
            return None;
        }
        let short_ms = ms(self.cfg.short_session);
        let quick = now.saturating_sub(end.connected_at) <= short_ms;
        let tiny = (SHORT_REPLY_MIN..=SHORT_REPLY_MAX).contains(&end.bytes_down);
        let slot = &mut self.slots[route];
        if !(quick && end.bytes_down <= SHORT_REPLY_MAX) {
            slot.short_ends = 0;
            return None;
        }
        if !(tiny && end.by_upstream) {
            return None;
        }
        let window = short_ms.saturating_mul(SHORT_WINDOW_SESSIONS);
        if slot.short_ends == 0 || now.saturating_sub(slot.short_since) > window {
            slot.short_ends = 0;
            slot.short_since = now;
        }
        slot.short_ends += 1;
        if slot.short_ends < SHORT_ENDS_TO_FAIL {
            return None;
        }
        slot.short_ends = 0;
        self.fail(route, Failure::ClosedAfterReply, None, now)
    }

    pub(super) fn probe_done(
        &mut self,
        route: RouteId,
        result: Result<u64, (Failure, Option<u32>)>,
        now: u64,
    ) -> Option<Change> {
        self.job_ended();
        self.slots[route].sched = Sched::Idle;
        let interval = ms(self.cfg.probe_interval);
        match result {
            Ok(rtt) => {
                let pulled = std::mem::take(&mut self.slots[route].stall_probe);
                let via = if pulled {
                    format!("probe pulled {} bytes", self.cfg.stall_probe_bytes)
                } else {
                    "probe".to_string()
                };
                let change = self.succeed(route, Some(rtt), &via, now);
                // Liveness probes only for routes clients dial (winning, losing or failing): a
                // route proven at start that no client has tried stays Up without costing a
                // request every interval (a Worker's quota); its first dial puts it back on the
                // schedule.
                if self.slots[route].dialled {
                    let at = now + self.rng.jitter(interval, 20);
                    self.due(route, at);
                }
                change
            }
            Err((f, retry_after)) => {
                self.throttle(route, f, retry_after, now);
                let change = self.fail(route, f, retry_after, now);
                let at = match self.table.routes[route].health.usable(now) {
                    Use::Cooling { until } => until,
                    // Still usable after a soft failure (Suspect): look again soon.
                    _ => now + self.cfg.health.base_ms.min(interval),
                };
                self.due_at_most(route, at);
                change
            }
        }
    }

    /// A client dialled `route`: from now on it gets liveness probes; if nothing is scheduled
    /// for it yet, the first comes one `--probe-interval` from now.
    pub(super) fn note_dialled(&mut self, route: RouteId, now: u64) {
        let slot = &mut self.slots[route];
        slot.dialled = true;
        if slot.sched == Sched::Idle {
            slot.sched = Sched::Due(now + ms(self.cfg.probe_interval));
        }
    }

    pub(super) fn job_ended(&mut self) {
        self.in_flight = self.in_flight.saturating_sub(1);
    }

    /// Schedules a probe of `route` at `at`, replacing any schedule (not a running probe).
    pub(super) fn due(&mut self, route: RouteId, at: u64) {
        let s = &mut self.slots[route].sched;
        if *s != Sched::Running {
            *s = Sched::Due(at);
        }
    }

    /// Schedules a probe of `route` at `at` unless one is due earlier or running.
    pub(super) fn due_at_most(&mut self, route: RouteId, at: u64) {
        match self.slots[route].sched {
            Sched::Running => {}
            Sched::Due(t) | Sched::Doubt(t) if t <= at => {}
            Sched::Doubt(_) => self.slots[route].sched = Sched::Doubt(at),
            Sched::Idle | Sched::Due(_) => self.slots[route].sched = Sched::Due(at),
        }
    }

    /// Pool cap of `route`: `--pool-size`, at most 1 toward a Worker (its quota), none for raw
    /// TCP (nothing to save), an upstream MTProto proxy (it closes a connection whose init does
    /// not come within its own handshake timeout, and the init names the DC) or a retired route.
    pub(super) fn pool_cap(&self, route: RouteId) -> usize {
        if self.table.routes[route].retired {
            return 0;
        }
        match self.table.routes[route].tier {
            Tier::Tcp | Tier::Mtproto => 0,
            Tier::Worker => self.cfg.pool_size.min(1),
            _ => self.cfg.pool_size,
        }
    }

    /// A due probe of `route`: rescheduled if it is not needed yet, else handed out.
    pub(super) fn probe_due(
        &mut self,
        route: RouteId,
        now: u64,
        resolve: &mut dyn FnMut(&str) -> Option<IpAddr>,
    ) -> Option<Work> {
        let interval = ms(self.cfg.probe_interval);
        let doubt = matches!(self.slots[route].sched, Sched::Doubt(_));
        let r = &self.table.routes[route];
        match r.health.usable(now) {
            Use::Cooling { until } => {
                // The recovery probe at the cooldown's end answers any doubt as well.
                self.slots[route].sched = Sched::Due(until);
                return None;
            }
            Use::Preferred | Use::Degraded
                if !doubt && now.saturating_sub(r.last_ok) < interval =>
            {
                // Real traffic proved it recently: look again one interval after that.
                let at = r.last_ok + self.rng.jitter(interval, 20);
                self.slots[route].sched = Sched::Due(at.max(now + 1));
                return None;
            }
            _ => {}
        }
        match self.background_spec(route, now, resolve) {
            Ok(spec) => {
                if doubt {
                    self.slots[route].doubt_probed_at = now;
                }
                self.slots[route].sched = Sched::Running;
                debug!("probe {} started", self.table.routes[route].label());
                let pull_bytes = if self.slots[route].stall_probe {
                    self.cfg.stall_probe_bytes
                } else {
                    0
                };
                self.slots[route].probe_pulls = pull_bytes > 0;
                Some(Work::Probe {
                    route,
                    spec,
                    deadline: now + ms(self.cfg.probe_timeout),
                    pull_bytes,
                })
            }
            Err(retry_at) => {
                self.slots[route].sched = if doubt {
                    Sched::Doubt(retry_at)
                } else {
                    Sched::Due(retry_at)
                };
                None
            }
        }
    }

    /// A fill of `route` if its pool wants one now.
    pub(super) fn fill_due(
        &mut self,
        route: RouteId,
        now: u64,
        resolve: &mut dyn FnMut(&str) -> Option<IpAddr>,
    ) -> Option<Work> {
        if self.slots[route].fill_retry_at > now {
            return None;
        }
        self.slots[route].fill_retry_at = 0;
        if self.table.routes[route].health.usable(now) != Use::Preferred {
            return None;
        }
        let cap = self.pool_cap(route);
        let window = ms(self.cfg.pool_max_age);
        let slot = &mut self.slots[route];
        let target = slot.pool.target(now, window, cap);
        let mut wanted = slot.pool.wanted(target);
        if let Refill::OnSessionStart(n) = slot.refill {
            wanted = wanted.min(n as usize);
        }
        if wanted == 0 {
            return None;
        }
        match self.background_spec(route, now, resolve) {
            Ok(spec) => {
                let slot = &mut self.slots[route];
                slot.pool.fill_started();
                if let Refill::OnSessionStart(n) = &mut slot.refill {
                    *n = n.saturating_sub(1);
                }
                let timeout = self.cfg.attempt_timeout(self.table.routes[route].tier);
                Some(Work::Fill {
                    route,
                    spec,
                    deadline: now + ms(timeout),
                })
            }
            Err(retry_at) => {
                self.slots[route].fill_retry_at = retry_at;
                None
            }
        }
    }

    /// The spec for a background job on `route`, with a job slot, a pacing slot and (toward a
    /// Worker) a request taken; `Err(retry_at)` when one of them is not available.
    pub(super) fn background_spec(
        &mut self,
        route: RouteId,
        now: u64,
        resolve: &mut dyn FnMut(&str) -> Option<IpAddr>,
    ) -> Result<DialSpec, u64> {
        if self.in_flight >= MAX_BACKGROUND {
            return Err(now + RETRY_MS);
        }
        let worker = self.table.worker_index(route, &self.cfg);
        if let Some(w) = worker {
            if self.budgets[w].available(now) == 0 {
                self.counters.deferred += 1;
                let at = self.budgets[w]
                    .next_available(now)
                    .unwrap_or(now + ms(self.cfg.probe_interval));
                return Err(at.max(now + RETRY_MS));
            }
        }
        let specs = self.table.routes[route].specs_for(resolve, self.cfg.listen);
        let Some(spec) = specs.into_iter().next() else {
            return Err(now + RETRY_MS);
        };
        self.pacer.background(spec.addr, now)?;
        // Through a down outbound proxy only its re-check dials (`deps.rs`).
        self.proxy_gate(&spec, now)?;
        if let Some(w) = worker {
            if !self.budgets[w].try_spend(now) {
                self.counters.deferred += 1;
                return Err(now + RETRY_MS);
            }
            self.accounts.note_request(w, self.wall_ms);
        }
        self.in_flight += 1;
        Ok(spec)
    }

    /// A pooled upstream of `route` taken at `taken_at` stayed silent after a client's request:
    /// its siblings as old or older (ready by then) died with it (the flows a NAT flush
    /// dropped), so they are closed; the route is doubted — a soft failure (Up → Suspect, so
    /// clients stop getting its pool and prefer a proven route) and a probe now (at most one
    /// doubt probe per `--cooldown-base`), which brings it back if fresh connections work. An
    /// entry taken before the route's last state change is as old as one already blamed (two
    /// clients took siblings from one flush): it flushes but is not counted again.
    pub(super) fn pooled_silent(
        &mut self,
        route: RouteId,
        taken_at: u64,
        now: u64,
    ) -> Option<Change> {
        let flushed = self.slots[route].pool.flush_ready_by(taken_at);
        info!(
            "pool {}: a pooled upstream sent nothing after a client's request; {flushed} as old \
             or older flushed",
            self.table.routes[route].label()
        );
        emit(|| {
            Event::new("pool_flushed")
                .str("label", &self.table.routes[route].label())
                .num("flushed", flushed as u64)
        });
        let slot = &mut self.slots[route];
        let recent = slot.doubt_probed_at > 0
            && now.saturating_sub(slot.doubt_probed_at) < self.cfg.health.base_ms;
        if slot.sched != Sched::Running && !recent {
            slot.sched = Sched::Doubt(now);
        }
        let changed = self.table.routes[route].health.last_change();
        if changed > 0 && taken_at <= changed {
            return None;
        }
        self.fail(route, Failure::SilentPooled, None, now)
    }
}

/// The `route` event of the structured stream (`logging::events`): `label` went `to` a state,
/// put there by `failure` or proved up by `via`, cooling down for `cooldown_ms`.
fn route_event(
    label: String,
    to: &str,
    failure: Option<Failure>,
    via: Option<&str>,
    cooldown_ms: u64,
) -> Event {
    Event::new("route")
        .str("label", &label)
        .str("to", to)
        .opt("failure", failure.map(|f| f.to_string()).as_deref())
        .opt("via", via)
        .num("cooldown_ms", cooldown_ms)
}
