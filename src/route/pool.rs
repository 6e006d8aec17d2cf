//! Warm upstreams for one route: TLS + WebSocket upgrade done, relay init not sent yet.
//!
//! Taking one saves a client the whole connect (DESIGN.md §4 "Pools"). Entries are aged out
//! before an intermediary's idle timeout (`--pool-max-age`; Telegram's front closes idle WS after
//! about 60 s), checked for liveness when taken, refilled in the background by the reactor
//! (spending the tier's request budget) only while the route is hot, and flushed when the
//! network changes. Pooled sockets are not registered with the poll; the taker registers them.

use std::collections::VecDeque;

use crate::net::dial::Upstream;

/// How long a route stays hot after a session started on it (ms): pools are kept only then.
pub const HOT_MS: u64 = 10 * 60 * 1000;

/// One route's pool.
#[derive(Default)]
pub struct Pool {
    entries: VecDeque<(Upstream, u64)>,
    /// Fills in flight.
    pub filling: usize,
    /// The route is hot until this time (ms).
    pub hot_until: u64,
}

impl Pool {
    /// Number of warm entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when no entry is held.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Marks the route hot (a session started on it).
    pub fn touch(&mut self, now: u64) {
        self.hot_until = now + HOT_MS;
    }

    /// How many fills to start so the pool reaches `size` (0 when cold or full).
    pub fn wanted(&self, now: u64, size: usize) -> usize {
        if now >= self.hot_until {
            return 0;
        }
        size.saturating_sub(self.entries.len() + self.filling)
    }

    /// Adds a fresh entry created at `now`.
    pub fn put(&mut self, up: Upstream, now: u64) {
        self.entries.push_back((up, now));
    }

    /// Takes the newest entry younger than `max_age` ms that is still silent and open.
    /// Stale or dead entries met on the way are dropped (closed). Returns the entry and how
    /// many were dropped.
    pub fn take(&mut self, now: u64, max_age: u64) -> (Option<Upstream>, usize) {
        let mut dropped = 0;
        while let Some((mut up, created)) = self.entries.pop_back() {
            if now.saturating_sub(created) < max_age && up.idle_and_alive() {
                return (Some(up), dropped);
            }
            up.shutdown();
            dropped += 1;
        }
        (None, dropped)
    }

    /// Drops entries older than `max_age` or no longer alive. Returns (kept, dropped dead,
    /// dropped by age).
    pub fn sweep(&mut self, now: u64, max_age: u64) -> (usize, usize, usize) {
        let (mut dead, mut aged) = (0, 0);
        let mut keep = VecDeque::with_capacity(self.entries.len());
        while let Some((mut up, created)) = self.entries.pop_front() {
            if now.saturating_sub(created) >= max_age {
                up.shutdown();
                aged += 1;
            } else if !up.idle_and_alive() {
                up.shutdown();
                dead += 1;
            } else {
                keep.push_back((up, created));
            }
        }
        self.entries = keep;
        (self.entries.len(), dead, aged)
    }

    /// Closes every entry (network change).
    pub fn flush(&mut self) -> usize {
        let n = self.entries.len();
        for (mut up, _) in self.entries.drain(..) {
            up.shutdown();
        }
        n
    }
}

/// Detects a suspend/resume: the boot-time clock (`/proc/uptime`, which counts suspended time)
/// moved more than the monotonic clock since the last call. Pure arithmetic on the two deltas.
pub fn suspended(prev_uptime_ms: u64, uptime_ms: u64, prev_mono_ms: u64, mono_ms: u64) -> bool {
    let up = uptime_ms.saturating_sub(prev_uptime_ms);
    let mono = mono_ms.saturating_sub(prev_mono_ms);
    up > mono + 5_000
}

/// `/proc/uptime` in ms (boot time including suspend), if readable.
pub fn uptime_ms() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/uptime").ok()?;
    let secs: f64 = text.split_whitespace().next()?.parse().ok()?;
    Some((secs * 1000.0) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hot_pools_want_fills_cold_ones_do_not() {
        let mut p = Pool::default();
        assert_eq!(p.wanted(0, 2), 0, "cold");
        p.touch(1000);
        assert_eq!(p.wanted(1000, 2), 2);
        p.filling = 1;
        assert_eq!(p.wanted(1000, 2), 1);
        assert_eq!(p.wanted(1000 + HOT_MS, 2), 0, "cooled down");
        assert!(p.is_empty());
        assert_eq!(p.take(0, 1000).1, 0);
    }

    #[test]
    fn suspend_is_a_boot_clock_jump() {
        assert!(!suspended(1_000, 11_000, 500, 10_500));
        assert!(suspended(1_000, 70_000, 500, 10_500));
        assert!(!suspended(5_000, 1_000, 0, 10)); // clock oddities never panic
    }

    #[test]
    fn uptime_is_readable_here() {
        assert!(uptime_ms().is_some_and(|u| u > 0));
    }
}
