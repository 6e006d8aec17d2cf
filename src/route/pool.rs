//! Warm upstreams of one route (TLS + WebSocket upgrade done, relay init not sent yet) and the
//! demand that sizes them.
//!
//! Taking one saves a client the whole connect (docs/design.md §4 "Pools"). Owns: the entries
//! (generic over [`Pooled`], so the ladder's unit tests hold plain values), their age-out
//! (`max_age`, set below an intermediary's idle close: Telegram's front closes idle WS after
//! about 60 s), the liveness check on take, the flush of a dead entry's siblings as old or older
//! (a taken entry that proved silent), and the demand window that decides how many entries a
//! route wants: the session starts seen in the last window, at least one while the route is hot,
//! at most the cap. Must not touch: health, budgets, sockets beyond [`Pooled`], clocks (time is a
//! `u64` ms parameter). The ladder decides when to fill; the prober does the dialling.

use std::collections::VecDeque;

/// How long a route stays hot after a session started on it (ms): pools are kept only then.
pub const HOT_MS: u64 = 10 * 60 * 1000;

/// What a pool can hold: something that can say whether it is still silent and open, and be
/// closed. `Upstream` implements it with one non-blocking read.
pub trait Pooled {
    /// `true` while nothing arrived and the peer has not closed.
    fn idle_and_alive(&mut self) -> bool;
    /// Closes it (best effort).
    fn close(&mut self);
}

/// One warm entry: the upstream, when its dial began and when it was ready (ms).
struct Entry<U> {
    up: U,
    dial_started: u64,
    ready: u64,
}

/// What a sweep found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Swept {
    /// Entries kept.
    pub kept: usize,
    /// Entries dropped because the peer had closed or sent something.
    pub dead: usize,
    /// Entries dropped by age or because demand fell below what was held.
    pub aged: usize,
}

/// One route's pool.
pub struct Pool<U> {
    entries: VecDeque<Entry<U>>,
    /// Fills in flight.
    filling: usize,
    /// The route is hot until this time (ms).
    hot_until: u64,
    /// Session starts in the current demand window and in the one before.
    starts: [u32; 2],
    /// Start of the current demand window (ms).
    window_start: u64,
}

impl<U> Default for Pool<U> {
    fn default() -> Pool<U> {
        Pool {
            entries: VecDeque::new(),
            filling: 0,
            hot_until: 0,
            starts: [0, 0],
            window_start: 0,
        }
    }
}

impl<U: Pooled> Pool<U> {
    /// Number of warm entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when no entry is held.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Fills in flight.
    pub fn filling(&self) -> usize {
        self.filling
    }

    /// True while a session started within [`HOT_MS`].
    pub fn is_hot(&self, now: u64) -> bool {
        now < self.hot_until
    }

    /// A session started on the route at `now`: it is hot, and the demand window counts it.
    /// `window_ms` is the demand window (the pool's max age).
    pub fn note_start(&mut self, now: u64, window_ms: u64) {
        self.hot_until = now + HOT_MS;
        self.roll(now, window_ms);
        self.starts[0] = self.starts[0].saturating_add(1);
    }

    fn roll(&mut self, now: u64, window_ms: u64) {
        let w = window_ms.max(1);
        let elapsed = now.saturating_sub(self.window_start);
        if elapsed >= 2 * w {
            self.starts = [0, 0];
            self.window_start = now;
        } else if elapsed >= w {
            self.starts = [0, self.starts[0]];
            self.window_start += w;
        }
    }

    /// Entries this route should hold at `now`: none when cold; else the session starts of the
    /// last demand window, at least 1, at most `cap`.
    pub fn target(&mut self, now: u64, window_ms: u64, cap: usize) -> usize {
        if cap == 0 || !self.is_hot(now) {
            return 0;
        }
        self.roll(now, window_ms);
        let demand = self.starts[0].max(self.starts[1]) as usize;
        demand.clamp(1, cap)
    }

    /// How many fills to start to reach `target`.
    pub fn wanted(&self, target: usize) -> usize {
        target.saturating_sub(self.entries.len() + self.filling)
    }

    /// A fill was started.
    pub fn fill_started(&mut self) {
        self.filling += 1;
    }

    /// A fill finished (either way).
    pub fn fill_ended(&mut self) {
        self.filling = self.filling.saturating_sub(1);
    }

    /// Adds a fresh entry whose dial began at `dial_started` and was ready at `now`.
    pub fn put(&mut self, up: U, dial_started: u64, now: u64) {
        self.entries.push_back(Entry {
            up,
            dial_started,
            ready: now,
        });
    }

    /// Takes the newest entry younger than `max_age` ms that is still silent and open, with the
    /// time its dial began. Stale or dead entries met on the way are closed; returns how many.
    pub fn take(&mut self, now: u64, max_age: u64) -> (Option<(U, u64)>, usize) {
        let mut dropped = 0;
        while let Some(mut e) = self.entries.pop_back() {
            if now.saturating_sub(e.ready) < max_age && e.up.idle_and_alive() {
                return (Some((e.up, e.dial_started)), dropped);
            }
            e.up.close();
            dropped += 1;
        }
        (None, dropped)
    }

    /// Drops entries older than `max_age`, no longer alive, or beyond `target` (oldest first).
    pub fn sweep(&mut self, now: u64, max_age: u64, target: usize) -> Swept {
        let mut s = Swept::default();
        let mut keep = VecDeque::with_capacity(self.entries.len());
        while let Some(mut e) = self.entries.pop_front() {
            if now.saturating_sub(e.ready) >= max_age {
                e.up.close();
                s.aged += 1;
            } else if !e.up.idle_and_alive() {
                e.up.close();
                s.dead += 1;
            } else {
                keep.push_back(e);
            }
        }
        while keep.len() > target {
            if let Some(mut e) = keep.pop_front() {
                e.up.close();
                s.aged += 1;
            }
        }
        self.entries = keep;
        s.kept = self.entries.len();
        s
    }

    /// Closes the entries that were ready at or before `at` (ms): the siblings of a dead entry
    /// taken at `at` (the newest then) are as old or older. Returns how many.
    pub fn flush_ready_by(&mut self, at: u64) -> usize {
        let before = self.entries.len();
        self.entries.retain_mut(|e| {
            let old = e.ready <= at;
            if old {
                e.up.close();
            }
            !old
        });
        before - self.entries.len()
    }

    /// Closes every entry (network change, or the route stopped being Up). Returns how many.
    pub fn flush(&mut self) -> usize {
        let n = self.entries.len();
        for mut e in self.entries.drain(..) {
            e.up.close();
        }
        n
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A pooled value for tests: alive until told otherwise.
    #[derive(Debug, Default)]
    pub struct Fake {
        pub dead: bool,
        pub closed: bool,
    }

    impl Pooled for Fake {
        fn idle_and_alive(&mut self) -> bool {
            !self.dead
        }
        fn close(&mut self) {
            self.closed = true;
        }
    }

    #[test]
    fn hot_pools_want_fills_cold_ones_do_not() {
        let mut p: Pool<Fake> = Pool::default();
        assert_eq!(p.target(0, 50_000, 4), 0, "cold");
        p.note_start(1_000, 50_000);
        assert_eq!(p.target(1_000, 50_000, 4), 1);
        p.fill_started();
        assert_eq!(p.wanted(1), 0);
        assert_eq!(p.target(1_000 + HOT_MS, 50_000, 4), 0, "cooled down");
        assert!(p.is_empty());
        assert!(p.take(0, 1000).0.is_none());
    }

    #[test]
    fn pool_grows_with_demand_up_to_the_cap_and_shrinks_when_it_falls() {
        let mut p: Pool<Fake> = Pool::default();
        for i in 0..10 {
            p.note_start(1_000 + i, 50_000);
        }
        assert_eq!(p.target(2_000, 50_000, 4), 4, "capped");
        assert_eq!(p.target(2_000, 50_000, 16), 10);
        // Two windows without a start: demand is gone, but the route is still hot.
        assert_eq!(p.target(1_000 + 120_000, 50_000, 16), 1);
        for _ in 0..6 {
            p.put(Fake::default(), 0, 1_000 + 120_000);
        }
        let s = p.sweep(1_000 + 121_000, 50_000, 1);
        assert_eq!((s.kept, s.aged, s.dead), (1, 5, 0));
    }

    #[test]
    fn take_skips_stale_and_dead_entries() {
        let mut p: Pool<Fake> = Pool::default();
        p.put(Fake::default(), 0, 0); // will be stale
        p.put(
            Fake {
                dead: true,
                ..Fake::default()
            },
            10,
            40_000,
        );
        p.put(Fake::default(), 45_000, 45_500);
        let (got, dropped) = p.take(60_000, 50_000);
        assert_eq!(got.map(|(_, t)| t), Some(45_000));
        assert_eq!(dropped, 0);
        let (got, dropped) = p.take(60_000, 50_000);
        assert!(got.is_none());
        assert_eq!(dropped, 2, "the dead one and the stale one");
    }
}
