//! Handshake pacing per destination address: a token bucket that never makes a client wait long.
//!
//! Some DPI boxes drop bursts of parallel TLS handshakes to one address, so handshakes toward one
//! address are spread out — but a client must never be closed because of our own pacing
//! (docs/design.md §4, "Connect engine"). Owns: one bucket per address and the two rules below.
//! Must not touch: sockets, clocks (time is a `u64` ms parameter), routes or health.
//!
//! * Each address earns one handshake every `pace_ms` and may save up `burst` of them, so a
//!   burst of `burst` handshakes starts at once and the next few are spaced `pace_ms` apart, as
//!   far as `max_wait_ms` allows.
//! * **Clients** always get a start time at most `max_wait_ms` away: when the bucket is empty
//!   they go into debt and wait for their handshake's turn, but a client whose turn is further
//!   away than `max_wait_ms` starts at once (waiting would space nothing out under a sustained
//!   overload, only delay it) — pacing degrades to "at most `max_wait_ms` later", never to a
//!   queue. Such clients are counted ([`Pacer::unpaced`], the stats line's `unpaced=N`): they
//!   are the handshakes pacing could not spread, the number to watch if a DPI box drops bursts.
//!   Debt left by a client that went away decays on its own within `max_wait_ms`: nothing is
//!   reserved, nothing can leak.
//! * **Background work** (probes, pool fills) starts only while at least half the burst is
//!   saved for clients, and is otherwise told when to try again.

use std::collections::BTreeMap;
use std::net::SocketAddr;

/// Buckets kept before idle (full) ones are pruned.
const PRUNE_ABOVE: usize = 64;

/// Pacing knobs (ms and handshake counts).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PacePolicy {
    /// One handshake is earned every `pace_ms` per address; 0 disables pacing.
    pub pace_ms: u64,
    /// Handshakes an idle address may start at once (at least 1).
    pub burst: u32,
    /// Longest a client start is ever delayed, ms.
    pub max_wait_ms: u64,
}

/// One address's bucket: `credit` in ms of earned time, `last` the time it was computed at.
#[derive(Clone, Copy, Debug)]
struct Bucket {
    credit: i64,
    last: u64,
}

/// Buckets for every address in use. See the module docs for the rules.
#[derive(Debug)]
pub struct Pacer {
    policy: PacePolicy,
    buckets: BTreeMap<SocketAddr, Bucket>,
    unpaced: u64,
}

impl Pacer {
    /// A pacer with no history: every address starts with a full burst.
    pub fn new(policy: PacePolicy) -> Pacer {
        Pacer {
            policy: PacePolicy {
                burst: policy.burst.max(1),
                ..policy
            },
            buckets: BTreeMap::new(),
            unpaced: 0,
        }
    }

    /// A reload's new policy; every address's bucket is kept (capped at the new burst on its
    /// next use).
    pub fn set_policy(&mut self, policy: PacePolicy) {
        self.policy = PacePolicy {
            burst: policy.burst.max(1),
            ..policy
        };
    }

    /// Client handshakes since start that started at once because their pacing turn was more
    /// than `max_wait_ms` away (sustained overload toward one address).
    pub fn unpaced(&self) -> u64 {
        self.unpaced
    }

    fn cap(&self) -> i64 {
        (self.policy.pace_ms as i64).saturating_mul(i64::from(self.policy.burst))
    }

    /// The bucket of `addr` brought up to `now` (created full).
    fn bucket(&mut self, addr: SocketAddr, now: u64) -> &mut Bucket {
        let cap = self.cap();
        if self.buckets.len() > PRUNE_ABOVE {
            // A full bucket is the same as no bucket.
            self.buckets
                .retain(|_, b| b.credit.saturating_add(now.saturating_sub(b.last) as i64) < cap);
        }
        let b = self.buckets.entry(addr).or_insert(Bucket {
            credit: cap,
            last: now,
        });
        let earned = now.saturating_sub(b.last) as i64;
        b.credit = b.credit.saturating_add(earned).min(cap);
        b.last = b.last.max(now);
        b
    }

    /// When a client's handshake toward `addr` may start: `now` while the bucket has a saved
    /// handshake, otherwise up to `max_wait_ms` later (never more). Takes the handshake.
    pub fn client(&mut self, addr: SocketAddr, now: u64) -> u64 {
        let PacePolicy {
            pace_ms,
            max_wait_ms,
            ..
        } = self.policy;
        if pace_ms == 0 {
            return now;
        }
        let b = self.bucket(addr, now);
        let after = b.credit - pace_ms as i64;
        let wait = (-after).max(0) as u64;
        if wait > max_wait_ms {
            // Overloaded past the bound: waiting would space nothing out, only delay this
            // client. It starts now, is counted, and leaves the bucket as it was.
            self.unpaced += 1;
            return now;
        }
        b.credit = after;
        now + wait
    }

    /// Whether background work may start a handshake toward `addr` now: `Ok(())` (and the
    /// handshake is taken) while at least half the burst stays saved for clients, else
    /// `Err(at)`, the earliest time worth asking again (ms).
    pub fn background(&mut self, addr: SocketAddr, now: u64) -> Result<(), u64> {
        let pace_ms = self.policy.pace_ms as i64;
        if pace_ms == 0 {
            return Ok(());
        }
        let reserve = pace_ms * i64::from(self.policy.burst / 2);
        let b = self.bucket(addr, now);
        let need = pace_ms + reserve;
        if b.credit >= need {
            b.credit -= pace_ms;
            Ok(())
        } else {
            Err(now + (need - b.credit) as u64)
        }
    }

    /// Addresses tracked now (for tests and the size bound).
    pub fn len(&self) -> usize {
        self.buckets.len()
    }

    /// True when no address is tracked.
    pub fn is_empty(&self) -> bool {
        self.buckets.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pacer(pace_ms: u64, burst: u32, max_wait_ms: u64) -> Pacer {
        Pacer::new(PacePolicy {
            pace_ms,
            burst,
            max_wait_ms,
        })
    }

    fn a() -> SocketAddr {
        "10.0.0.1:443".parse().unwrap()
    }

    #[test]
    fn a_burst_starts_at_once_then_handshakes_are_spaced() {
        let mut p = pacer(20, 4, 1_000);
        for _ in 0..4 {
            assert_eq!(p.client(a(), 100), 100);
        }
        assert_eq!(p.client(a(), 100), 120);
        assert_eq!(p.client(a(), 100), 140);
        // Time pays the debt back: 60 ms later one handshake is saved again.
        assert_eq!(p.client(a(), 160), 160);
    }

    #[test]
    fn a_client_never_waits_longer_than_the_bound() {
        let mut p = pacer(20, 2, 50);
        let mut worst = 0;
        for i in 0..1_000u64 {
            // 1,000 clients in 1 s: five times what pacing alone would allow.
            let now = i;
            let at = p.client(a(), now);
            assert!(at >= now);
            worst = worst.max(at - now);
        }
        assert!(worst <= 50, "worst wait {worst} ms");
        assert_eq!(worst, 50, "the bound is reached under overload");
    }

    #[test]
    fn under_overload_a_client_past_the_bound_starts_at_once() {
        // Regression (review): with the debt pinned at the bound, every client of a sustained
        // burst waited the whole bound, which spaced nothing out.
        let mut p = pacer(20, 2, 50);
        let waits: Vec<u64> = (0..100u64).map(|i| p.client(a(), i) - i).collect();
        let waited = waits.iter().filter(|&&w| w > 0).count();
        assert!(waited < 20, "{waited} of 100 waited: {waits:?}");
        assert!(waits.iter().all(|&w| w <= 50));
        assert_eq!(
            p.unpaced(),
            100 - waited as u64 - 2,
            "the ones pacing could not spread"
        );
    }

    #[test]
    fn pace_slot_leak_a_client_that_went_away_leaves_no_reservation() {
        // Regression (issue 10, item 4): slots reserved by clients that were later closed were
        // never released, so new clients after a burst still waited into the connect budget.
        let mut p = pacer(20, 4, 50);
        for _ in 0..600 {
            p.client(a(), 1_000);
        }
        // The burst is over; its clients are gone. Well within a second, new clients start now.
        let later = 1_000 + 50 + 4 * 20;
        for _ in 0..4 {
            assert_eq!(p.client(a(), later), later);
        }
    }

    #[test]
    fn background_work_leaves_half_the_burst_to_clients() {
        let mut p = pacer(20, 4, 50);
        assert_eq!(p.background(a(), 0), Ok(()));
        assert_eq!(p.background(a(), 0), Ok(()));
        // Two saved handshakes left: they are the clients'.
        let retry = p.background(a(), 0).unwrap_err();
        assert_eq!(retry, 20);
        assert_eq!(p.client(a(), 0), 0);
        assert_eq!(p.client(a(), 0), 0);
        assert_eq!(p.background(a(), 20).unwrap_err(), 60);
        assert_eq!(p.background(a(), 60), Ok(()));
    }

    #[test]
    fn addresses_are_independent_and_zero_disables() {
        let mut p = pacer(20, 1, 50);
        let b: SocketAddr = "10.0.0.2:443".parse().unwrap();
        assert_eq!(p.client(a(), 0), 0);
        assert_eq!(p.client(a(), 0), 20);
        assert_eq!(p.client(b, 0), 0);
        let mut off = pacer(0, 1, 50);
        for _ in 0..10 {
            assert_eq!(off.client(a(), 5), 5);
            assert_eq!(off.background(a(), 5), Ok(()));
        }
        assert!(off.is_empty());
    }

    #[test]
    fn idle_buckets_are_pruned() {
        let mut p = pacer(20, 2, 50);
        for i in 0..200u32 {
            let addr = SocketAddr::from(([10, 0, (i / 256) as u8, (i % 256) as u8], 443));
            p.client(addr, 0);
        }
        assert!(p.len() > PRUNE_ABOVE);
        p.client(a(), 10_000);
        assert!(p.len() <= 2, "{} buckets left", p.len());
    }
}
