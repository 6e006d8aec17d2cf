//! Hashed timer wheel with injected time: every method takes `now_ms` (milliseconds on the
//! caller's monotonic clock); nothing here reads a clock.
//!
//! Owns timer storage only: a slab of entries linked into per-bucket intrusive doubly-linked
//! lists, so insert and cancel are O(1). It does not know what a timer means — the value `T`
//! carries identity (slot, connection id, kind) and the reactor drops stale ones. Deadlines more
//! than one rotation away stay in their bucket and are compared against their absolute deadline.

use slab::Slab;

const NIL: usize = usize::MAX;

/// Handle for [`Wheel::cancel`]. Carries the slab index and a generation, so a stale id (fired,
/// cancelled, or whose slab slot was reused) never cancels another timer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimerId {
    index: usize,
    gen: u64,
}

#[derive(Debug)]
struct Entry<T> {
    at_ms: u64,
    gen: u64,
    bucket: usize,
    prev: usize,
    next: usize,
    value: T,
}

/// Timer wheel of `slots` buckets of `tick_ms` each. See the module docs.
#[derive(Debug)]
pub struct Wheel<T> {
    tick_ms: u64,
    /// Bucket list heads (slab keys, `NIL` when empty).
    heads: Vec<usize>,
    entries: Slab<Entry<T>>,
    /// Ticks before this one have been fully expired; its bucket may still hold entries.
    cur_tick: u64,
    next_gen: u64,
    /// Lower bound of every live deadline (exact after `expire`, may be early after `cancel`).
    earliest: Option<u64>,
    /// Scratch for `expire`: (deadline, generation, slab key) of due entries.
    due: Vec<(u64, u64, usize)>,
}

impl<T> Wheel<T> {
    /// A wheel of `slots` buckets (at least 1) of `tick_ms` milliseconds (at least 1), whose
    /// clock starts at `now_ms`.
    pub fn new(tick_ms: u64, slots: usize, now_ms: u64) -> Wheel<T> {
        let tick_ms = tick_ms.max(1);
        Wheel {
            tick_ms,
            heads: vec![NIL; slots.max(1)],
            entries: Slab::new(),
            cur_tick: now_ms / tick_ms,
            next_gen: 0,
            earliest: None,
            due: Vec::new(),
        }
    }

    /// Number of pending timers.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True if no timer is pending.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn bucket_of(&self, at_ms: u64) -> usize {
        // A deadline in an already expired tick goes to the current bucket: next expire fires it.
        let tick = (at_ms / self.tick_ms).max(self.cur_tick);
        (tick % self.heads.len() as u64) as usize
    }

    /// Schedules `value` to fire at `at_ms`. O(1). A deadline in the past fires at the next
    /// [`expire`](Wheel::expire).
    pub fn insert(&mut self, at_ms: u64, value: T) -> TimerId {
        let bucket = self.bucket_of(at_ms);
        let gen = self.next_gen;
        self.next_gen = self.next_gen.wrapping_add(1);
        let head = self.heads[bucket];
        let index = self.entries.insert(Entry {
            at_ms,
            gen,
            bucket,
            prev: NIL,
            next: head,
            value,
        });
        if head != NIL {
            self.entries[head].prev = index;
        }
        self.heads[bucket] = index;
        self.earliest = Some(self.earliest.map_or(at_ms, |e| e.min(at_ms)));
        TimerId { index, gen }
    }

    fn unlink(&mut self, index: usize) -> Entry<T> {
        let e = self.entries.remove(index);
        if e.prev == NIL {
            self.heads[e.bucket] = e.next;
        } else {
            self.entries[e.prev].next = e.next;
        }
        if e.next != NIL {
            self.entries[e.next].prev = e.prev;
        }
        e
    }

    /// Removes a pending timer and returns its value. O(1). `None` if the id is stale (already
    /// fired or cancelled, even if its slot was reused since).
    pub fn cancel(&mut self, id: TimerId) -> Option<T> {
        match self.entries.get(id.index) {
            Some(e) if e.gen == id.gen => {}
            _ => return None,
        }
        let v = self.unlink(id.index).value;
        if self.entries.is_empty() {
            self.earliest = None;
        }
        Some(v)
    }

    /// Earliest time in ms at which [`expire`](Wheel::expire) may have work; never later than
    /// the true earliest deadline (it may be earlier after a cancel, or a rotation boundary when
    /// every timer is more than one rotation away). `None` if the wheel is empty. O(1).
    pub fn next_deadline(&self) -> Option<u64> {
        self.earliest
    }

    /// Appends to `out` the value of every timer with deadline ≤ `now_ms`, in deadline order
    /// (ties in insertion order), and advances the wheel. Never fires a timer
    /// early. Cost: O(buckets crossed + entries in them), at most one full rotation.
    pub fn expire(&mut self, now_ms: u64, out: &mut Vec<T>) {
        let target = now_ms / self.tick_ms;
        match self.earliest {
            Some(e) if e <= now_ms => {}
            // Nothing can be due: just move the clock forward.
            _ => {
                self.cur_tick = self.cur_tick.max(target);
                return;
            }
        }
        let slots = self.heads.len() as u64;
        let first = self.cur_tick;
        let last = target.max(first);
        let span = (last - first).min(slots - 1);
        self.due.clear();
        for t in first..=first + span {
            let mut i = self.heads[(t % slots) as usize];
            while i != NIL {
                let e = &self.entries[i];
                if e.at_ms <= now_ms {
                    self.due.push((e.at_ms, e.gen, i));
                }
                i = e.next;
            }
        }
        // Generations grow with every insert, so equal deadlines fire in insertion order.
        self.due.sort_unstable_by_key(|&(at, gen, _)| (at, gen));
        let mut due = std::mem::take(&mut self.due);
        for &(_, _, i) in &due {
            out.push(self.unlink(i).value);
        }
        due.clear();
        self.due = due;
        self.cur_tick = last;
        self.earliest = self.scan_earliest();
    }

    /// Recomputes the lower bound after an expire: the exact earliest deadline among entries due
    /// within one rotation from `cur_tick`, else the start of the next rotation.
    fn scan_earliest(&self) -> Option<u64> {
        if self.entries.is_empty() {
            return None;
        }
        let slots = self.heads.len() as u64;
        for t in self.cur_tick..self.cur_tick + slots {
            let mut best: Option<u64> = None;
            let mut i = self.heads[(t % slots) as usize];
            while i != NIL {
                let e = &self.entries[i];
                // Entries of later rounds share the bucket; only this round's count here.
                if e.at_ms / self.tick_ms <= t {
                    best = Some(best.map_or(e.at_ms, |b| b.min(e.at_ms)));
                }
                i = e.next;
            }
            if best.is_some() {
                return best;
            }
        }
        // Every entry is at least one rotation away.
        Some((self.cur_tick + slots).saturating_mul(self.tick_ms))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(w: &mut Wheel<u32>, now: u64) -> Vec<u32> {
        let mut out = Vec::new();
        w.expire(now, &mut out);
        out
    }

    /// Brute-force reference: the true earliest deadline.
    fn true_earliest(w: &Wheel<u32>) -> Option<u64> {
        w.entries.iter().map(|(_, e)| e.at_ms).min()
    }

    #[test]
    fn fires_in_deadline_order_never_early() {
        let mut w = Wheel::new(10, 8, 1000);
        w.insert(1055, 3);
        w.insert(1012, 1);
        w.insert(1050, 2);
        w.insert(1013, 9);
        assert_eq!(w.len(), 4);
        assert_eq!(drain(&mut w, 1011), Vec::<u32>::new());
        assert_eq!(drain(&mut w, 1013), vec![1, 9]);
        assert_eq!(drain(&mut w, 1054), vec![2]);
        assert_eq!(drain(&mut w, 1055), vec![3]);
        assert!(w.is_empty());
        assert_eq!(w.next_deadline(), None);
    }

    #[test]
    fn big_jump_fires_everything_in_order() {
        let mut w = Wheel::new(10, 4, 0);
        for (i, at) in [395u64, 5, 77, 1000, 42, 41].iter().enumerate() {
            w.insert(*at, i as u32);
        }
        assert_eq!(drain(&mut w, 999), vec![1, 5, 4, 2, 0]);
        assert_eq!(drain(&mut w, 1000), vec![3]);
    }

    #[test]
    fn past_deadline_fires_at_next_expire() {
        let mut w = Wheel::new(10, 8, 0);
        drain(&mut w, 5000);
        w.insert(100, 1);
        w.insert(4999, 2);
        assert!(w.next_deadline().unwrap() <= 100);
        assert_eq!(drain(&mut w, 5000), vec![1, 2]);
    }

    #[test]
    fn cancel_and_stale_ids() {
        let mut w = Wheel::new(10, 8, 0);
        let a = w.insert(50, 1);
        let b = w.insert(50, 2);
        let c = w.insert(50, 3);
        assert_eq!(w.cancel(b), Some(2));
        assert_eq!(w.cancel(b), None);
        assert_eq!(drain(&mut w, 50), vec![1, 3]);
        // Cancel after fire.
        assert_eq!(w.cancel(a), None);
        assert_eq!(w.cancel(c), None);
        // Slot reuse: the new entry takes a freed slab index; the old id must not touch it.
        let d = w.insert(80, 4);
        assert!(d.index == a.index || d.index == b.index || d.index == c.index);
        assert_eq!(w.cancel(a), None);
        assert_eq!(w.cancel(b), None);
        assert_eq!(w.cancel(c), None);
        assert_eq!(w.len(), 1);
        assert_eq!(w.cancel(d), Some(4));
        assert!(w.is_empty());
    }

    #[test]
    fn cancel_head_middle_tail_keeps_lists_intact() {
        let mut w = Wheel::new(10, 1, 0);
        let ids: Vec<_> = (0..6).map(|i| w.insert(100 + i, i as u32)).collect();
        assert_eq!(w.cancel(ids[5]), Some(5)); // head (inserted last)
        assert_eq!(w.cancel(ids[0]), Some(0)); // tail
        assert_eq!(w.cancel(ids[2]), Some(2)); // middle
        assert_eq!(drain(&mut w, 200), vec![1, 3, 4]);
    }

    #[test]
    fn long_delays_and_same_bucket_different_rounds() {
        let mut w = Wheel::new(10, 8, 0); // one rotation = 80 ms
        w.insert(15, 1); // bucket 1, round 0
        w.insert(95, 2); // bucket 1, round 1
        w.insert(175, 3); // bucket 1, round 2
        w.insert(10_015, 4); // many rotations later, bucket 1
        let mut fired = Vec::new();
        let mut now = 0;
        while now <= 10_100 {
            let mut out = Vec::new();
            w.expire(now, &mut out);
            for v in out {
                let at = [0, 15, 95, 175, 10_015][v as usize];
                assert!(at <= now, "timer {v} fired early at {now}");
                assert!(now < at + 5, "timer {v} fired late at {now}");
                fired.push(v);
            }
            now += 5;
        }
        assert_eq!(fired, vec![1, 2, 3, 4]);
    }

    #[test]
    fn next_deadline_never_later_than_true_earliest() {
        let mut w: Wheel<u32> = Wheel::new(16, 32, 0);
        let mut rng = crate::rng::Rng::from_seed([9; 48]);
        let mut ids = Vec::new();
        let mut now = 0u64;
        for step in 0..3000u32 {
            match rng.below(4) {
                0 | 1 => {
                    let at = now + u64::from(rng.below(5000));
                    ids.push(w.insert(at, step));
                }
                2 if !ids.is_empty() => {
                    let k = rng.below(ids.len() as u32) as usize;
                    w.cancel(ids.swap_remove(k));
                }
                _ => {
                    now += u64::from(rng.below(300));
                    let mut out = Vec::new();
                    w.expire(now, &mut out);
                    assert!(w.entries.iter().all(|(_, e)| e.at_ms > now), "overdue left");
                }
            }
            match (w.next_deadline(), true_earliest(&w)) {
                (None, None) => {}
                (Some(nd), Some(te)) => assert!(nd <= te, "next {nd} > earliest {te}"),
                other => panic!("next_deadline/emptiness mismatch {other:?}"),
            }
        }
    }

    #[test]
    fn expire_leaves_no_overdue_entries_and_deadline_is_exact_within_rotation() {
        let mut w: Wheel<u32> = Wheel::new(10, 16, 0);
        let mut rng = crate::rng::Rng::from_seed([10; 48]);
        let mut now = 0u64;
        for round in 0..500u32 {
            for k in 0..5 {
                w.insert(now + u64::from(rng.below(400)), round * 10 + k);
            }
            now += u64::from(rng.below(120));
            let mut out = Vec::new();
            w.expire(now, &mut out);
            assert!(w.entries.iter().all(|(_, e)| e.at_ms > now));
            let te = true_earliest(&w);
            if let Some(te) = te {
                let nd = w.next_deadline().unwrap();
                assert!(nd <= te);
                if te < (now / 10 + 16) * 10 {
                    assert_eq!(nd, te, "exact within one rotation");
                }
            }
        }
    }

    #[test]
    fn many_timers() {
        let mut w = Wheel::new(8, 256, 0);
        let mut rng = crate::rng::Rng::from_seed([11; 48]);
        let mut deadlines = Vec::new();
        let mut ids = Vec::new();
        for i in 0..10_000u32 {
            let at = u64::from(rng.below(60_000));
            deadlines.push(at);
            ids.push(w.insert(at, i));
        }
        // Cancel every third.
        for (i, id) in ids.iter().enumerate() {
            if i % 3 == 0 {
                assert_eq!(w.cancel(*id), Some(i as u32));
            }
        }
        let mut fired = Vec::new();
        let mut now = 0;
        while !w.is_empty() {
            now += 1 + u64::from(rng.below(500));
            let mut out = Vec::new();
            w.expire(now, &mut out);
            for v in &out {
                assert!(deadlines[*v as usize] <= now);
            }
            fired.extend(out);
        }
        assert_eq!(fired.len(), 10_000 - 3334);
        assert!(fired.iter().all(|&v| v % 3 != 0));
        // Each expire batch is in deadline order; across batches order is implied by time.
        let ds: Vec<u64> = fired.iter().map(|&v| deadlines[v as usize]).collect();
        assert!(ds.windows(2).all(|p| p[0] <= p[1]));
    }

    #[test]
    fn time_going_backwards_does_not_fire_early() {
        let mut w = Wheel::new(10, 8, 1000);
        w.insert(1200, 1);
        drain(&mut w, 1100);
        assert_eq!(drain(&mut w, 900), Vec::<u32>::new());
        assert_eq!(drain(&mut w, 1200), vec![1]);
    }
}
