//! When to give freed memory back to the OS ([`Trim`]): after a burst of sessions has ended.
//! Sans-IO, time injected (ms); the reactor feeds it the number of live sessions and calls
//! `mem::release` when it says so.
//!
//! The rule: the peak is the most sessions live since the last trim (or the start). A burst has
//! ended when the sessions live are at most half the peak and at least [`MIN_DROP`] fewer; a
//! trim is then due `--mem-trim-delay` later (so a burst that is still closing is not trimmed
//! in its middle, and a trim costs nothing on the sessions' paths). When it is due and the
//! sessions have not come back above half the peak, trim, and the peak starts again from the
//! sessions live then. A new burst before the deadline cancels it. So each trim needs the
//! sessions halved since the last one: a few per burst at most, none while the load is steady.
//! A delay of 0 turns trimming off.

/// Sessions that must have ended since the peak before a trim is worth its time: below this
/// what they freed is small against the 2 MiB a burst may leave (docs/design.md §8).
pub const MIN_DROP: usize = 32;

/// The trim policy (module header).
#[derive(Debug)]
pub struct Trim {
    /// `--mem-trim-delay` in ms; 0 = never trim.
    delay_ms: u64,
    /// Most sessions live since the last trim.
    peak: usize,
    /// Sessions live at the last [`Trim::step`].
    seen: usize,
    /// When the pending trim is due.
    due: Option<u64>,
}

impl Trim {
    /// A policy that trims `delay_ms` after a burst ended (0: never).
    pub fn new(delay_ms: u64) -> Trim {
        Trim {
            delay_ms,
            peak: 0,
            seen: 0,
            due: None,
        }
    }

    /// A new delay (a reload); a pending trim keeps its deadline, 0 cancels it.
    pub fn set_delay(&mut self, delay_ms: u64) {
        self.delay_ms = delay_ms;
        if delay_ms == 0 {
            self.due = None;
        }
    }

    /// When the pending trim is due (ms), if one is.
    pub fn next_deadline(&self) -> Option<u64> {
        self.due
    }

    /// `live` sessions at `now`: `true` when memory should be given back now. O(1); only a
    /// change of `live` or a passed deadline moves anything.
    pub fn step(&mut self, live: usize, now: u64) -> bool {
        if live != self.seen {
            self.seen = live;
            self.peak = self.peak.max(live);
            if self.delay_ms > 0 && self.ended(live) {
                self.due.get_or_insert(now + self.delay_ms);
            } else {
                self.due = None;
            }
        }
        match self.due {
            Some(at) if now >= at => {
                self.due = None;
                self.peak = live;
                true
            }
            _ => false,
        }
    }

    fn ended(&self, live: usize) -> bool {
        self.peak - live >= MIN_DROP && live <= self.peak / 2
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `counts` one a millisecond from `t0`; the times (ms) `step` said trim.
    fn run(t: &mut Trim, t0: u64, counts: impl IntoIterator<Item = usize>) -> Vec<u64> {
        let mut trims = Vec::new();
        for (i, live) in counts.into_iter().enumerate() {
            let now = t0 + i as u64;
            if t.step(live, now) {
                trims.push(now);
            }
        }
        trims
    }

    #[test]
    fn a_burst_that_ended_is_trimmed_once_after_the_delay() {
        let mut t = Trim::new(10_000);
        assert!(run(&mut t, 1, 0..=600).is_empty(), "growing: nothing");
        // All 600 leave within 600 ms; the deadline is set when half had gone.
        assert!(run(&mut t, 1000, (0..=600).rev()).is_empty());
        let due = t.next_deadline().expect("a trim is pending");
        assert_eq!(due, 1000 + 300 + 10_000);
        assert!(!t.step(0, due - 1));
        assert!(t.step(0, due), "due: trim");
        assert_eq!(t.next_deadline(), None);
        assert!(!t.step(0, due + 60_000), "once");
    }

    #[test]
    fn a_new_burst_before_the_deadline_cancels_it() {
        let mut t = Trim::new(10_000);
        run(&mut t, 1, (0..=200).chain((0..=200).rev()));
        assert!(t.next_deadline().is_some());
        // Sessions come back above half the peak: no trim in the middle of the load.
        run(&mut t, 500, 0..=150);
        assert_eq!(t.next_deadline(), None);
        assert!(!t.step(150, 1_000_000));
        // They leave again: a new deadline from then.
        assert!(run(&mut t, 2_000_000, (0..=150).rev()).is_empty());
        let due = t.next_deadline().expect("pending again");
        assert!(t.step(0, due));
    }

    #[test]
    fn steady_load_and_small_drops_never_trim() {
        let mut t = Trim::new(1_000);
        // Churn around 100 sessions: never below half the peak.
        let churn = (0..10_000).map(|i| 100 + (i % 40) - 20);
        assert!(run(&mut t, 1, (0..100).chain(churn)).is_empty());
        // A small burst that ended (20 sessions gone) is not worth a trim.
        let mut small = Trim::new(1_000);
        run(&mut small, 1, (0..=20).chain((0..=20).rev()));
        assert_eq!(small.next_deadline(), None, "a drop below MIN_DROP");
    }

    #[test]
    fn after_a_trim_the_peak_restarts_from_what_is_live() {
        let mut t = Trim::new(1_000);
        run(&mut t, 1, 0..=400);
        // Half leave; trimmed while 200 are still live.
        run(&mut t, 1_000, (200..=400).rev());
        assert!(t.step(200, 1_200 + 1_000));
        // The other half leave later: a second trim (200 → 0 is a burst that ended).
        run(&mut t, 5_000, (0..=200).rev());
        let due = t.next_deadline().expect("second trim");
        assert!(t.step(0, due));
        assert!(!t.step(0, due + 100_000));
    }

    #[test]
    fn a_delay_of_zero_never_trims() {
        let mut t = Trim::new(0);
        assert!(run(&mut t, 1, (0..=600).chain((0..=600).rev())).is_empty());
        assert_eq!(t.next_deadline(), None);
        let mut t = Trim::new(50);
        run(&mut t, 1, (0..=600).chain((0..=600).rev()));
        t.set_delay(0);
        assert_eq!(t.next_deadline(), None, "a reload to 0 cancels");
    }
}
