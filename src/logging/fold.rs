//! Folding repeated log lines (docs/design.md §7 "Logs"): [`RateLimited`] lets one line of a
//! kind through per interval and counts the rest; [`Folds`] keeps one such limiter per kind
//! (a call site, a tier and failure class, …), so a flood of one kind neither hides another
//! kind's line nor mixes its count in. Pure: time is a parameter (ms on the caller's monotonic
//! clock); what a kind is and what the interval is are the callers' (`conn`, `reactor`).

/// Folds repeated identical warnings: at most one line per `interval_ms`, and the line that is
/// let through reports how many were swallowed since the previous one.
///
/// Pure: time is a parameter (milliseconds on the caller's monotonic clock).
#[derive(Clone, Debug)]
pub struct RateLimited {
    interval_ms: u64,
    /// When the last line was allowed; `None` before the first.
    last_ms: Option<u64>,
    suppressed: u64,
}

impl RateLimited {
    /// A limiter allowing one line per `interval_ms` milliseconds (0 = allow every line).
    pub fn new(interval_ms: u64) -> RateLimited {
        RateLimited {
            interval_ms,
            last_ms: None,
            suppressed: 0,
        }
    }

    /// Asks whether a line may be logged at `now_ms`. `Some(n)`: log it, mentioning `n` lines
    /// suppressed since the last one (the counter is reset); `None`: stay quiet (counted).
    /// The first call is always allowed. A clock that steps backwards only delays the next line.
    pub fn allow(&mut self, now_ms: u64) -> Option<u64> {
        let due = match self.last_ms {
            None => true,
            Some(last) => now_ms.saturating_sub(last) >= self.interval_ms,
        };
        if due {
            self.last_ms = Some(now_ms);
            Some(std::mem::take(&mut self.suppressed))
        } else {
            self.suppressed = self.suppressed.saturating_add(1);
            None
        }
    }

    /// Lines swallowed since the last allowed one (for a periodic flush in the stats line).
    pub fn suppressed(&self) -> u64 {
        self.suppressed
    }

    /// A new interval (a reload); the count and the last line's time are kept.
    pub fn set_interval(&mut self, interval_ms: u64) {
        self.interval_ms = interval_ms;
    }
}

/// Folds repeated warnings per kind: one [`RateLimited`] per key (a call site, a failure
/// class…), so a flood of one kind neither swallows another kind's line nor mixes its count
/// with theirs. At most `cap` keys are kept (keys come from code or from a small set of
/// classes); further keys share one overflow limiter.
///
/// Pure: time is a parameter (milliseconds on the caller's monotonic clock).
#[derive(Clone, Debug)]
pub struct Folds {
    interval_ms: u64,
    cap: usize,
    kinds: Vec<(u64, RateLimited)>,
    overflow: RateLimited,
}

impl Folds {
    /// One line per kind per `interval_ms` (0 = every line), for up to `cap` kinds.
    pub fn new(interval_ms: u64, cap: usize) -> Folds {
        Folds {
            interval_ms,
            cap,
            kinds: Vec::new(),
            overflow: RateLimited::new(interval_ms),
        }
    }

    /// [`RateLimited::allow`] for the kind `key` at `now_ms`.
    pub fn allow(&mut self, key: u64, now_ms: u64) -> Option<u64> {
        if let Some((_, r)) = self.kinds.iter_mut().find(|(k, _)| *k == key) {
            return r.allow(now_ms);
        }
        if self.kinds.len() >= self.cap {
            return self.overflow.allow(now_ms);
        }
        let mut r = RateLimited::new(self.interval_ms);
        let first = r.allow(now_ms);
        self.kinds.push((key, r));
        first
    }

    /// A new interval (a reload); counts and times so far are kept.
    pub fn set_interval(&mut self, interval_ms: u64) {
        self.interval_ms = interval_ms;
        for (_, r) in &mut self.kinds {
            r.interval_ms = interval_ms;
        }
        self.overflow.interval_ms = interval_ms;
    }
}

/// A fold key for `text` (FNV-1a): a kind named by a string.
pub fn fold_key(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_limited_folds_and_reports_the_count() {
        let mut r = RateLimited::new(1000);
        assert_eq!(r.allow(5_000), Some(0));
        assert_eq!(r.allow(5_001), None);
        assert_eq!(r.allow(5_999), None);
        assert_eq!(r.suppressed(), 2);
        assert_eq!(r.allow(6_000), Some(2));
        assert_eq!(r.suppressed(), 0);
        assert_eq!(r.allow(6_500), None);
        assert_eq!(r.allow(9_000), Some(1));
        assert_eq!(r.allow(20_000), Some(0));
    }

    #[test]
    fn rate_limited_backwards_clock_only_delays() {
        let mut r = RateLimited::new(100);
        assert_eq!(r.allow(1_000), Some(0));
        assert_eq!(r.allow(10), None);
        assert_eq!(r.allow(1_100), Some(1));
    }

    /// Issue 19 §4: every per-client warning shared one 1 s limiter (and a flood of one kind
    /// folded the others away, their count mixed in). Per kind now: each kind its own line
    /// and count, at most one per interval, and kinds past the cap share one.
    #[test]
    fn folds_are_per_kind_and_bounded() {
        let mut f = Folds::new(6_000, 2);
        let (a, b, c, d) = (fold_key("a"), fold_key("b"), fold_key("c"), fold_key("d"));
        assert_ne!(a, b);
        assert_eq!(f.allow(a, 0), Some(0));
        assert_eq!(
            f.allow(b, 1),
            Some(0),
            "another kind is not folded into the first"
        );
        assert_eq!(f.allow(a, 2), None);
        // A minute of one kind every ms: 10 lines at most, each with the count.
        let mut f = Folds::new(6_000, 2);
        let lines: Vec<u64> = (0..60_000).filter_map(|t| f.allow(a, t)).collect();
        assert_eq!(lines.len(), 10);
        assert_eq!(lines[1], 5_999);
        // Kinds past the cap share the overflow limiter.
        assert_eq!(f.allow(b, 60_000), Some(0));
        assert_eq!(f.allow(c, 60_001), Some(0));
        assert_eq!(f.allow(d, 60_002), None);
        f.set_interval(0);
        assert_eq!(
            f.allow(a, 60_003),
            Some(5_999),
            "the count carries over a reload"
        );
        assert_eq!(f.allow(a, 60_003), Some(0));
    }

    #[test]
    fn rate_limited_zero_interval_allows_all() {
        let mut r = RateLimited::new(0);
        for t in [0, 0, 1, 1] {
            assert_eq!(r.allow(t), Some(0));
        }
    }
}
