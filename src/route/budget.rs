//! Per-tier request budget: a token bucket for background requests (probes, pool refills).
//!
//! docs/design.md §4 (background prober, pools): a Cloudflare Worker allows ~100k requests/day per
//! account (docs/protocol.md §4.2), so background traffic to one Worker is held to a small daily share
//! (`config::DEFAULT_WORKER_PER_DAY`) and stops on a 429. Owns: the bucket arithmetic and the 429
//! backoff. Must not touch: sockets, clocks, route health (a 429 on a real session is also a
//! `route::health` failure, recorded there by the caller). Time is a parameter (`now`, u64 ms on
//! the caller's monotonic clock). Integer math only: credit is kept in token·ms/day units, so a
//! day of refill is exactly `per_day` tokens with no rounding drift. Client sessions do not
//! spend it (never made to wait for background bookkeeping); with several Workers the tokens
//! each has left weigh how sessions spread over them (`route::ladder::spread`).

/// Milliseconds per day: one token is `DAY_MS` credit units.
pub const DAY_MS: u64 = 86_400_000;
/// First backoff after a 429, ms.
pub const THROTTLE_BASE_MS: u64 = 60_000;
/// Longest block after a 429 (backoff and `Retry-After` alike), ms.
pub const THROTTLE_MAX_MS: u64 = 3_600_000;

/// Token bucket: `burst` tokens at most, refilled at `per_day` tokens per day, blocked after a
/// 429. Spending a token means "one request may be sent now".
#[derive(Clone, Debug)]
pub struct Budget {
    /// Credit added per elapsed ms (= `per_day`; one token is `DAY_MS` units).
    per_day: u64,
    /// Bucket size in credit units (`burst × DAY_MS`).
    cap: u64,
    /// Current credit, units.
    credit: u64,
    /// Credit is accrued up to this time (ms); never decreases. While blocked it is the end of
    /// the block, so nothing accrues during a block.
    last: u64,
    /// No spending before this time (ms).
    blocked_until: u64,
    /// 429 backoff exponent: the next block is `THROTTLE_BASE_MS × 2^level` (capped).
    level: u32,
    /// A successful spend at or after this time (ms) ends the 429 episode (level back to 0).
    calm_at: u64,
}

impl Budget {
    /// A full bucket at `now`: `burst` tokens (at least 1), refilled at `per_day` tokens per day
    /// (0 = never refilled). Over any 24 h window at most `per_day + burst` tokens are spent.
    pub fn new(per_day: u32, burst: u32, now: u64) -> Budget {
        let cap = u64::from(burst.max(1)) * DAY_MS;
        Budget {
            per_day: u64::from(per_day),
            cap,
            credit: cap,
            last: now,
            blocked_until: 0,
            level: 0,
            calm_at: 0,
        }
    }

    /// A reload's new `per_day` and `burst` (as in [`Budget::new`]) at `now`: what was earned
    /// so far is kept up to the new burst; a running 429 block and its backoff stay.
    pub fn set_rate(&mut self, per_day: u32, burst: u32, now: u64) {
        self.credit = self.credit_at(now);
        self.last = self.last.max(now);
        self.per_day = u64::from(per_day);
        self.cap = u64::from(burst.max(1)) * DAY_MS;
        self.credit = self.credit.min(self.cap);
    }

    /// Takes one token at `now` if one is available and no 429 block is running. A successful
    /// spend after a calm period as long as the last block resets the 429 backoff.
    pub fn try_spend(&mut self, now: u64) -> bool {
        self.credit = self.credit_at(now);
        self.last = self.last.max(now);
        if now < self.blocked_until || self.credit < DAY_MS {
            return false;
        }
        self.credit -= DAY_MS;
        if self.level > 0 && now >= self.calm_at {
            self.level = 0;
        }
        true
    }

    /// The intermediary answered 429 at `now`. Spending stops until the later of `Retry-After`
    /// (seconds) and the backoff (`THROTTLE_BASE_MS × 2^k`, k = 429s in this episode), both
    /// capped at [`THROTTLE_MAX_MS`]. Nothing accrues during the block and at most one token is
    /// kept, so the first request after it tests whether the throttle is over. A 429 arriving
    /// while a block runs (other requests already in flight) does not grow the backoff; it can
    /// only push the end later if its `Retry-After` asks for that.
    pub fn on_throttled(&mut self, now: u64, retry_after_s: Option<u32>) {
        let asked = retry_after_s
            .map(|s| u64::from(s).saturating_mul(1000))
            .unwrap_or(0)
            .min(THROTTLE_MAX_MS);
        if now < self.blocked_until {
            let end = self.blocked_until.max(now.saturating_add(asked));
            self.calm_at = self.calm_at.max(end);
            self.blocked_until = end;
            self.last = self.last.max(end);
            return;
        }
        let backoff = backoff(self.level);
        let block = backoff.max(asked);
        let end = now.saturating_add(block);
        self.credit = self.credit_at(now).min(DAY_MS);
        self.blocked_until = end;
        self.last = self.last.max(end);
        self.calm_at = end.saturating_add(block);
        self.level = self.level.saturating_add(1);
    }

    /// Whole tokens spendable at `now` (0 while blocked).
    pub fn available(&self, now: u64) -> u32 {
        if now < self.blocked_until {
            return 0;
        }
        u32::try_from(self.credit_at(now) / DAY_MS).unwrap_or(u32::MAX)
    }

    /// Earliest time (ms, ≥ `now`) at which [`Budget::try_spend`] will succeed, assuming no
    /// spends or 429s in between; `None` if the bucket is empty and never refills (`per_day` 0).
    pub fn next_available(&self, now: u64) -> Option<u64> {
        let start = now.max(self.blocked_until);
        let credit = self.credit_at(start);
        if credit >= DAY_MS {
            return Some(start);
        }
        if self.per_day == 0 {
            return None;
        }
        // Credit accrues from `last` if that is later (a block end, or a clock that went back).
        let wait = (DAY_MS - credit).div_ceil(self.per_day);
        Some(start.max(self.last).saturating_add(wait))
    }

    /// Credit (units) the bucket holds at `now`, accrued from `last`, capped at the burst.
    fn credit_at(&self, now: u64) -> u64 {
        let elapsed = now.saturating_sub(self.last);
        self.credit
            .saturating_add(elapsed.saturating_mul(self.per_day))
            .min(self.cap)
    }
}

/// `THROTTLE_BASE_MS × 2^level`, capped at `THROTTLE_MAX_MS`, without overflow.
fn backoff(level: u32) -> u64 {
    if level >= 16 {
        THROTTLE_MAX_MS
    } else {
        (THROTTLE_BASE_MS << level).min(THROTTLE_MAX_MS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: u64 = 1_000_000;

    #[test]
    fn starts_full_and_burst_caps() {
        let mut b = Budget::new(5_000, 4, T0);
        assert_eq!(b.available(T0), 4);
        assert_eq!(b.next_available(T0), Some(T0));
        for _ in 0..4 {
            assert!(b.try_spend(T0));
        }
        assert!(!b.try_spend(T0));
        assert_eq!(b.available(T0), 0);
        // A week idle still holds only `burst`.
        assert_eq!(b.available(T0 + 7 * DAY_MS), 4);
        // burst 0 behaves as 1.
        let mut one = Budget::new(10, 0, T0);
        assert!(one.try_spend(T0));
        assert!(!one.try_spend(T0));
    }

    #[test]
    fn refills_at_the_daily_rate_exactly() {
        // 5000/day: one token per 17.28 s.
        let mut b = Budget::new(5_000, 1, T0);
        assert!(b.try_spend(T0));
        assert_eq!(b.next_available(T0), Some(T0 + 17_280));
        assert!(!b.try_spend(T0 + 17_279));
        assert_eq!(b.available(T0 + 17_279), 0);
        assert!(b.try_spend(T0 + 17_280));
        // Rates that do not divide a day: 7/day → 12_342_857.14… ms per token.
        let mut b = Budget::new(7, 1, 0);
        assert!(b.try_spend(0));
        assert_eq!(b.next_available(0), Some(12_342_858));
        assert!(!b.try_spend(12_342_857));
        assert!(b.try_spend(12_342_858));
        // per_day 0: the initial burst and nothing more.
        let mut b = Budget::new(0, 2, 0);
        assert!(b.try_spend(0) && b.try_spend(0));
        assert_eq!(b.next_available(DAY_MS), None);
        assert!(!b.try_spend(10 * DAY_MS));
    }

    #[test]
    fn a_day_of_greedy_spending_never_exceeds_per_day_plus_burst() {
        for (per_day, burst) in [(5_000, 20), (7, 3), (100_000, 50), (86_401, 1), (1, 1)] {
            let mut b = Budget::new(per_day, burst, T0);
            let mut spent = 0u64;
            let mut t = T0;
            while t <= T0 + DAY_MS {
                while b.try_spend(t) {
                    spent += 1;
                }
                t += 1_000;
            }
            let most = u64::from(per_day) + u64::from(burst);
            assert!(spent <= most, "{per_day}/{burst}: {spent} > {most}");
            // And it is not stingy: at most one token lost to the 1 s sampling.
            assert!(
                spent + 1 >= most,
                "{per_day}/{burst}: only {spent} of {most}"
            );
        }
    }

    #[test]
    fn next_available_is_exact() {
        let mut b = Budget::new(1_000, 1, 0);
        assert!(b.try_spend(0));
        let at = b.next_available(5_000).expect("refills");
        assert_eq!(at, 86_400);
        assert!(!b.try_spend(at - 1));
        assert!(b.try_spend(at));
        // Time going backwards neither refills nor panics.
        assert!(!b.try_spend(10));
        assert_eq!(b.available(10), 0);
        assert_eq!(b.next_available(10), Some(86_400 + 86_400));
    }

    #[test]
    fn throttle_blocks_and_backoff_grows_to_the_cap() {
        let mut b = Budget::new(1_000_000, 10, 0);
        let mut now = 0;
        let mut blocks = Vec::new();
        for i in 0..9 {
            assert!(b.try_spend(now), "first request after the block at {now}");
            b.on_throttled(now, None);
            assert!(!b.try_spend(now));
            assert_eq!(b.available(now), 0);
            blocks.push((b.blocked_until - now) / 1000);
            // The first block keeps one of the 9 tokens left; later ones follow a test request
            // that emptied the bucket, so the next token comes one refill (86.4 ms) after the block.
            let next = b.next_available(now).expect("block ends");
            if i == 0 {
                assert_eq!(next, b.blocked_until);
            } else {
                // The fractional leftover of the previous refill may shave a millisecond.
                assert!((b.blocked_until + 86..=b.blocked_until + 87).contains(&next));
            }
            assert!(!b.try_spend(next - 1));
            now = next;
        }
        assert_eq!(blocks, [60, 120, 240, 480, 960, 1920, 3600, 3600, 3600]);
    }

    #[test]
    fn throttle_keeps_at_most_one_token_and_accrues_nothing_while_blocked() {
        let mut b = Budget::new(1_000_000, 10, 0);
        assert_eq!(b.available(0), 10);
        b.on_throttled(0, None);
        assert_eq!(b.available(60_000), 1, "one token for the test request");
        assert!(b.try_spend(60_000));
        assert!(!b.try_spend(60_000));
        // Refill resumes after the block at the normal rate (1e6/day = 86.4 ms per token).
        assert_eq!(b.next_available(60_000), Some(60_087));
    }

    #[test]
    fn retry_after_is_honoured_and_capped() {
        let mut b = Budget::new(5_000, 5, 0);
        b.on_throttled(0, Some(300));
        assert_eq!(b.next_available(0), Some(300_000));
        let mut b = Budget::new(5_000, 5, 0);
        b.on_throttled(0, Some(10));
        assert_eq!(
            b.next_available(0),
            Some(60_000),
            "backoff beats a short Retry-After"
        );
        let mut b = Budget::new(5_000, 5, 0);
        b.on_throttled(0, Some(u32::MAX));
        assert_eq!(b.next_available(0), Some(THROTTLE_MAX_MS));
    }

    #[test]
    fn in_flight_429s_do_not_grow_the_backoff() {
        let mut b = Budget::new(100_000, 10, 0);
        b.on_throttled(0, None);
        b.on_throttled(5, None);
        b.on_throttled(9, Some(30));
        assert_eq!(b.next_available(9), Some(60_000));
        b.on_throttled(10, Some(90));
        assert_eq!(
            b.next_available(10),
            Some(90_010),
            "a later Retry-After extends"
        );
        assert!(b.try_spend(90_010));
        b.on_throttled(90_011, None);
        assert_eq!(b.blocked_until, 90_011 + 120_000, "level 1, not 4");
    }

    #[test]
    fn backoff_resets_after_a_calm_spending_period() {
        let mut b = Budget::new(1_000_000, 10, 0);
        b.on_throttled(0, None); // block 60 s, calm from 120 s
        assert!(b.try_spend(60_000)); // too early to call it over
        b.on_throttled(60_000, None); // 120 s block: 60_000..180_000, calm from 300_000
        assert_eq!(b.blocked_until, 180_000);
        assert!(b.try_spend(180_087)); // first refill after the block
        assert!(b.try_spend(250_000));
        assert_eq!(
            b.level, 2,
            "spends inside the calm period do not end the episode"
        );
        assert!(b.try_spend(300_000)); // calm period over: episode ends
        assert_eq!(b.level, 0);
        b.on_throttled(400_000, None);
        assert_eq!(b.blocked_until, 460_000, "back to 60 s");
    }
}
