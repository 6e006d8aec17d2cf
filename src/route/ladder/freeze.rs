//! The ladder's freeze rule (docs/design.md §4 rule 7): what a frozen session
//! ([`Observation::SessionFrozen`](super::Observation)) does to its route. Reached only through
//! `Ladder::observe`.
//!
//! * A freeze seen while this host's network is down is the outage's, not the route's: ignored.
//! * The first frozen session on a route in `--stall-window` makes it doubtful: Up → Suspect
//!   (new sessions prefer a proven route), its warm pool is dropped (those flows meet the same
//!   freeze), and a probe runs at once that must pull `--stall-probe-bytes` past the freeze
//!   size; its failure puts the route down as `stalled`.
//! * The [`FROZEN_TO_FAIL`]th within the window puts it down as `stalled` at once (hard), the
//!   pool dropped again.
//! * Until a pulling probe succeeds, a session's first byte on the route proves nothing (the
//!   freeze lets the first ~16 KB through): see `Ladder::observe`, `FirstByte`. Nor does a
//!   plain probe handed out before the pull was owed (a liveness probe running when a session
//!   froze): its result is dropped and the pulling probe is due ([`Ladder::plain_probe`]).
//!
//! The window is `--stall-window` (120 s): real clients that give up reconnect within seconds
//! and back off to tens of seconds, so two of their sessions fall well inside it, while two
//! unrelated blips on a healthy route rarely come that close together — and one alone only
//! costs a probe.

use log::{debug, warn};

use super::{Ladder, RouteId, Sched};
use crate::error::{Failure, Freeze};
use crate::route::health::{Change, State, Use};
use crate::route::pool::Pooled;

/// Frozen sessions on one route within `--stall-window` that put it down as `stalled`.
pub const FROZEN_TO_FAIL: u8 = 2;

/// A route's record of frozen sessions.
#[derive(Clone, Copy, Debug, Default)]
pub struct Freezes {
    /// Frozen sessions since start.
    pub total: u64,
    /// The latest: how, the bytes down before it, and when (ms).
    pub last: Option<(Freeze, u64, u64)>,
    /// Frozen sessions in the current window, and when the window began (ms).
    in_window: u8,
    since: u64,
}

impl<U: Pooled> Ladder<U> {
    /// A session on `route` froze (`freeze`) after `after_bytes` down, at `now`.
    pub(super) fn session_frozen(
        &mut self,
        route: RouteId,
        freeze: Freeze,
        after_bytes: u64,
        now: u64,
    ) -> Option<Change> {
        let label = self.table.routes[route].label();
        if self.network_down {
            debug!(
                "route {label}: a session froze ({freeze}) while the network is down, not counted"
            );
            return None;
        }
        let window = super::ms(self.cfg.stall_window);
        let slot = &mut self.slots[route];
        let f = &mut slot.freezes;
        f.total += 1;
        f.last = Some((freeze, after_bytes, now));
        if f.in_window == 0 || now.saturating_sub(f.since) > window {
            f.in_window = 0;
            f.since = now;
        }
        f.in_window += 1;
        let count = f.in_window;
        slot.stall_probe = true;
        let flushed = slot.pool.flush();
        if flushed > 0 {
            debug!("pool {label}: {flushed} warm upstream(s) dropped (a session froze)");
        }
        if count >= FROZEN_TO_FAIL {
            self.slots[route].freezes.in_window = 0;
            warn!(
                "route {label}: {count} sessions froze within {}s (the latest after {} bytes down, \
                 {freeze})",
                window / 1000,
                after_bytes
            );
            return self.fail(route, Failure::Stalled, None, now);
        }
        // The first one: doubt, and a pulling probe now (at most one doubt probe per
        // --cooldown-base, like every doubt).
        let slot = &mut self.slots[route];
        let recent = slot.doubt_probed_at > 0
            && now.saturating_sub(slot.doubt_probed_at) < self.cfg.health.base_ms;
        if slot.sched != Sched::Running && !recent {
            slot.sched = Sched::Doubt(now);
        }
        let r = &mut self.table.routes[route];
        let change = r.health.doubt(now, Failure::Stalled);
        if change.is_some() {
            warn!(
                "route {label} suspect: a session froze after {after_bytes} bytes down ({freeze}); \
                 a probe must pull {} bytes",
                self.cfg.stall_probe_bytes
            );
        }
        change
    }

    /// True while `route` owes a pulling probe (a freeze) and is not Up: a session's first
    /// byte proves nothing then.
    pub(super) fn owes_pull(&self, route: RouteId) -> bool {
        self.slots[route].stall_probe
            && matches!(
                self.table.routes[route].health.state(),
                State::Down { .. } | State::Suspect
            )
    }

    /// True when `route` owes a pull and the probe that just succeeded was handed out without
    /// that goal (before a session froze): its `resPQ` comes before any freeze.
    pub(super) fn plain_probe_owing_pull(&self, route: RouteId) -> bool {
        self.slots[route].stall_probe && !self.slots[route].probe_pulls
    }

    /// A plain probe of `route`, which owes a pull, succeeded at `now`: it proves nothing; the
    /// pulling probe is due now (at the end of a cooldown for a route down as stalled).
    pub(super) fn plain_probe(&mut self, route: RouteId, now: u64) {
        self.job_ended();
        self.slots[route].sched = match self.table.routes[route].health.usable(now) {
            Use::Cooling { until } => Sched::Due(until),
            _ => Sched::Doubt(now),
        };
        debug!(
            "probe {}: a plain resPQ proves nothing while the route owes a pull",
            self.table.routes[route].label()
        );
    }
}
