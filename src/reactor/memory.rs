//! The reactor's memory hook: after each loop iteration the trim policy (`mem::trim`, sans-IO)
//! learns how many sessions are live; when it says a burst has ended, the reactor lets its own
//! lists shrink, gives freed memory back to the OS (`mem::release`) and counts it
//! (`Stats::memory_trims`). The policy's deadline is one of the poll timeout's inputs
//! (`Reactor::poll_timeout`). Holds no policy of its own.

use super::{Reactor, ACCEPT_BATCH};

impl Reactor {
    /// Feeds the trim policy (O(1)); trims when it says so.
    pub(super) fn trim_memory(&mut self) {
        if !self.trim.step(self.slab.len(), self.now) {
            return;
        }
        let before = crate::stats::rss_kib();
        self.again.shrink_to(ACCEPT_BATCH);
        self.expired.shrink_to(ACCEPT_BATCH);
        self.finished.shrink_to(ACCEPT_BATCH);
        crate::mem::release();
        self.s.stats.memory_trims += 1;
        log::debug!(
            "burst ended ({} sessions live): freed memory given back, rss {} -> {} KiB",
            self.slab.len(),
            before.unwrap_or(0),
            crate::stats::rss_kib().unwrap_or(0)
        );
    }
}
