//! Flap quarantine's proof rule (docs/design.md §4 rule 3): a route that went Down
//! `--flap-quarantine`'s K times within the window sits out the whole quarantine. The cooldown
//! math and the quarantine's end are `route::health`'s; here is what may end it: only a probe
//! handed out at or after the end. A session's first byte on such a route (a last-resort plan
//! dialled it) is no proof (`Ladder::observe`), nor is a probe that was already running when
//! the quarantine began.

use log::debug;

use super::{Ladder, RouteId, Sched};
use crate::route::health::State;
use crate::route::pool::Pooled;

impl<U: Pooled> Ladder<U> {
    /// True when `route` is in a flap quarantine that its last probe began before the end of
    /// (rule 3): that probe's success proves nothing.
    pub(super) fn probe_predates_quarantine_end(&self, route: RouteId) -> bool {
        let health = &self.table.routes[route].health;
        matches!(health.state(), State::Down { .. })
            && health
                .quarantine_end()
                .is_some_and(|end| self.slots[route].probe_started < end)
    }

    /// A probe of a quarantined `route` that began before the quarantine ended succeeded at
    /// `now` (it was running when the route went down): ignored, and the recovery probe is due
    /// when the quarantine ends.
    pub(super) fn early_probe(&mut self, route: RouteId, now: u64) {
        self.job_ended();
        let end = self.table.routes[route].health.quarantine_end();
        self.slots[route].sched = Sched::Due(end.unwrap_or(now).max(now));
        debug!(
            "probe {}: began before its flap quarantine ends, proves nothing",
            self.table.routes[route].label()
        );
    }
}
