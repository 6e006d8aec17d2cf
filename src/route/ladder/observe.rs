//! [`Ladder::observe`]: each [`Observation`] a session or the prober reports, handed to its
//! rule; the small rules live here (a session started, a session's first bytes, a pool fill
//! that failed, a job that never started), the larger ones in `rules.rs`, `freeze.rs`,
//! `quarantine.rs` and `reconfigure.rs` (observations about retired routes).

use super::{ms, Ladder, Observation, Refill, RouteId, Sched, RETRY_MS};
use crate::error::Failure;
use crate::route::health::{Change, State};
use crate::route::pool::Pooled;

impl<U: Pooled> Ladder<U> {
    /// Learns from `obs` at `now`. Returns the route's state change, if any (already logged).
    pub fn observe(&mut self, obs: Observation, now: u64) -> Option<Change> {
        if let Some(route) = self.retired_route(&obs) {
            self.observe_retired(route, obs);
            return None;
        }
        if let Observation::ProbeDone {
            route,
            result: Ok(_),
        } = obs
        {
            self.account_proven(route, now);
        }
        match obs {
            Observation::AttemptFailed {
                route,
                failure,
                retry_after,
            } => {
                self.note_dialled(route, now);
                self.fail(route, failure, retry_after, now)
            }
            Observation::AttemptCancelled { route } => {
                self.note_dialled(route, now);
                self.counters.cancelled += 1;
                None
            }
            Observation::SessionStarted { route } => {
                self.session_started(route, now);
                None
            }
            Observation::FirstByte {
                route,
                dial_started,
                rtt_ms,
            } => self.first_byte(route, dial_started, rtt_ms, now),
            Observation::SessionEnded { route, end } => self.session_ended(route, end, now),
            Observation::ProbeDone {
                route,
                result: Ok(_),
            } if self.probe_predates_quarantine_end(route) => {
                self.early_probe(route, now);
                None
            }
            Observation::ProbeDone {
                route,
                result: Ok(_),
            } if self.plain_probe_owing_pull(route) => {
                self.plain_probe(route, now);
                None
            }
            Observation::ProbeDone { route, result } => self.probe_done(route, result, now),
            Observation::FillFailed {
                route,
                failure,
                retry_after,
                client_dial,
            } => self.fill_failed(route, failure, retry_after, client_dial, now),
            Observation::NotStarted {
                route,
                probe: true,
                failure: Some(f),
            } if f != Failure::Local => self.probe_done(route, Err((f, None)), now),
            Observation::NotStarted { route, probe, .. } => {
                self.not_started(route, probe, now);
                None
            }
            Observation::PooledSilent { route, taken_at } => {
                self.pooled_silent(route, taken_at, now)
            }
            Observation::SessionFrozen {
                route,
                freeze,
                after_bytes,
            } => self.session_frozen(route, freeze, after_bytes, now),
            Observation::SessionFailed { route, failure } => self.fail(route, failure, None, now),
        }
    }

    /// A session started on `route`: counted, the pool's demand noted, and a pool that refills
    /// on session starts owed one more entry (at most `--pool-size`).
    fn session_started(&mut self, route: RouteId, now: u64) {
        self.table.routes[route].sessions += 1;
        self.note_dialled(route, now);
        let window = ms(self.cfg.pool_max_age);
        let slot = &mut self.slots[route];
        slot.pool.note_start(now, window);
        if let Refill::OnSessionStart(n) = &mut slot.refill {
            *n = n.saturating_add(1).min(self.cfg.pool_size as u32);
        }
    }

    /// A session's first bytes from the upstream of `route` (its dial began at
    /// `dial_started`, `rtt_ms` its connect RTT): a proof of the route, unless it predates the
    /// route's last change or the route owes a pulling probe or sits in quarantine.
    fn first_byte(
        &mut self,
        route: RouteId,
        dial_started: u64,
        rtt_ms: Option<u64>,
        now: u64,
    ) -> Option<Change> {
        // A session whose dial began before the route's last state change (or in the
        // same ms) says nothing about the new state: it must not undo a fresh Down or a
        // quarantine. If that change brought the route Up, though, it agrees with the
        // state and undoes nothing: its RTT sample still counts (a burst of sessions
        // dialled together would otherwise give one sample, the first).
        let health = &mut self.table.routes[route].health;
        let changed = health.last_change();
        if changed > 0 && dial_started <= changed {
            if health.state() == State::Up {
                if let Some(rtt) = rtt_ms {
                    health.note_rtt(rtt);
                }
            }
            return None;
        }
        // A route down as stalled (or doubted for a frozen session) lets a session's
        // first bytes through (the freeze comes after ~16 KB): only a pulling probe
        // proves it recovered (rule 7). A session on it goes on, it just proves nothing.
        // Nor does one on a quarantined route (rule 3): a flapping route works now and
        // then, and only the probe after the quarantine may bring it back.
        let health = &self.table.routes[route].health;
        let quarantined =
            matches!(health.state(), State::Down { .. }) && health.quarantine_end().is_some();
        if self.owes_pull(route) || quarantined {
            return None;
        }
        let change = self.succeed(route, rtt_ms, "session", now);
        // Keep an eye on it once real traffic stops: a sparse liveness probe.
        if self.slots[route].sched == Sched::Idle {
            self.due(route, now + ms(self.cfg.probe_interval));
        }
        change
    }

    /// A pool fill of `route` failed: its job slot is freed, the route's background work
    /// throttled unless the dial was a client's, and the failure judged like an attempt's.
    fn fill_failed(
        &mut self,
        route: RouteId,
        failure: Failure,
        retry_after: Option<u32>,
        client_dial: bool,
        now: u64,
    ) -> Option<Change> {
        self.job_ended();
        self.slots[route].pool.fill_ended();
        if !client_dial {
            self.throttle(route, failure, retry_after, now);
        }
        self.fail(route, failure, retry_after, now)
    }

    /// Background work of `route` never started (no failure of the route's own): its job slot
    /// is freed and the work retried after [`RETRY_MS`].
    fn not_started(&mut self, route: RouteId, probe: bool, now: u64) {
        self.job_ended();
        if probe {
            // It was already judged needed when handed out: retry it as such, so the
            // recent-traffic shortcut cannot swallow a doubt.
            self.slots[route].sched = Sched::Doubt(now + RETRY_MS);
        } else {
            self.slots[route].pool.fill_ended();
            self.slots[route].fill_retry_at = now + RETRY_MS;
        }
    }
}
