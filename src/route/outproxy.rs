//! The outbound proxy (`--outbound-proxy`) as a dependency with its own state (docs/design.md
//! §4 "A dead dependency is not a storm"): up, or down since a failure of the proxy itself
//! ([`Failure::is_proxy`]: unreachable, credentials refused, protocol garbage), re-checked
//! with a jittered exponential backoff. Sans-IO: facts in (a dial through the proxy failed at
//! the proxy, or got past it), decisions out (may a dial through it start now), time as a
//! parameter (`now`, u64 ms on the caller's monotonic clock), randomness the caller's.
//!
//! While it is down every dial through it — background work (probes, pool fills, the shared
//! list's fetch) and a client's alike — asks [`ProxyDep::may_dial`]: one dial per backoff step
//! is let through as the re-check (whoever asks first once it is due), the others do not dial
//! (background work waits for the next step; a client's candidate is skipped). The step starts
//! at `--outbound-proxy-backoff` and doubles per re-check up to `--outbound-proxy-backoff-max`,
//! each wait taken uniformly from its upper fifth downwards (80–100 %), so a proxy that stays
//! down gets at most one dial per 0.8 × the cap, and one that comes back is found within the
//! cap. Any dial that gets past the proxy (its handshake done, whatever the destination then
//! did) brings it back up. Owns no log, socket or clock: the ladder (`ladder::deps`) says the
//! one line when it goes and the one when it is back.

use crate::error::Failure;
use crate::rng::Rng;

/// The proxy is down: since when, why, and when the next re-check may dial.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Down {
    /// When it went down (ms).
    pub since: u64,
    /// The latest failure of the proxy itself.
    pub failure: Failure,
    /// The next dial through it may start at this time (ms).
    pub next_try: u64,
    /// Re-checks let through so far (the backoff's exponent).
    pub tries: u32,
    /// Dials through it that failed at the proxy while down (the re-checks' and stragglers').
    pub failures: u64,
    /// Dials through it that were not started because it is down.
    pub held: u64,
}

/// The proxy is back: what its outage looked like.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Back {
    /// How long it was down (ms).
    pub down_ms: u64,
    /// Re-checks let through while it was down.
    pub tries: u32,
    /// Dials that failed at the proxy while it was down.
    pub failures: u64,
    /// Dials not started because it was down.
    pub held: u64,
}

/// The outbound proxy's state. See the module docs.
#[derive(Clone, Debug)]
pub struct ProxyDep {
    base_ms: u64,
    max_ms: u64,
    down: Option<Down>,
}

impl ProxyDep {
    /// An up proxy whose re-checks, once down, wait `base_ms` doubling to `max_ms` (both at
    /// least 1 ms; the cap at least the base).
    pub fn new(base_ms: u64, max_ms: u64) -> ProxyDep {
        let base_ms = base_ms.max(1);
        ProxyDep {
            base_ms,
            max_ms: max_ms.max(base_ms),
            down: None,
        }
    }

    /// New backoff bounds (a reload); a running outage keeps its next re-check time.
    pub fn set_backoff(&mut self, base_ms: u64, max_ms: u64) {
        self.base_ms = base_ms.max(1);
        self.max_ms = max_ms.max(self.base_ms);
    }

    /// Forgets an outage (another proxy is configured now).
    pub fn reset(&mut self) {
        self.down = None;
    }

    /// The outage, while the proxy is down.
    pub fn down(&self) -> Option<&Down> {
        self.down.as_ref()
    }

    /// A dial through the proxy failed at the proxy itself at `now` (`failure` is
    /// [`Failure::is_proxy`]). True when this put it down (the caller says so once); while it
    /// is down, only counted.
    pub fn failed(&mut self, failure: Failure, now: u64, rng: &mut Rng) -> bool {
        if let Some(d) = &mut self.down {
            d.failures += 1;
            d.failure = failure;
            return false;
        }
        let wait = self.wait(0, rng);
        self.down = Some(Down {
            since: now,
            failure,
            next_try: now + wait,
            tries: 0,
            failures: 1,
            held: 0,
        });
        true
    }

    /// A dial through the proxy that began at `started` got past it (its handshake was done,
    /// whatever the destination did next), reported at `now`. `Some` when this ended an
    /// outage (the caller says so once). A dial begun at or before the outage's start proves
    /// nothing about it: it may have passed the proxy before the proxy died, and its end
    /// (a reset mid-TLS when the proxy's process went away) would lift a fresh outage at once.
    pub fn worked(&mut self, now: u64, started: u64) -> Option<Back> {
        if self.down.as_ref().is_some_and(|d| started <= d.since) {
            return None;
        }
        self.down.take().map(|d| Back {
            down_ms: now.saturating_sub(d.since),
            tries: d.tries,
            failures: d.failures,
            held: d.held,
        })
    }

    /// Whether a dial through the proxy may start at `now`: always while it is up; while it
    /// is down, once per backoff step (this dial is the re-check, and the next step starts
    /// now). `Err(at)`: not before `at` (ms); counted as held.
    pub fn may_dial(&mut self, now: u64, rng: &mut Rng) -> Result<(), u64> {
        let tries = match &self.down {
            None => return Ok(()),
            Some(d) => d.tries,
        };
        let wait = self.wait(tries.saturating_add(1), rng);
        let Some(d) = &mut self.down else {
            return Ok(());
        };
        if now < d.next_try {
            d.held += 1;
            return Err(d.next_try);
        }
        d.tries = d.tries.saturating_add(1);
        d.next_try = now + wait;
        Ok(())
    }

    /// Whether [`ProxyDep::may_dial`] would let a dial start at `now`, without taking the
    /// re-check. `Err(at)` as there.
    pub fn ready(&self, now: u64) -> Result<(), u64> {
        match &self.down {
            Some(d) if now < d.next_try => Err(d.next_try),
            _ => Ok(()),
        }
    }

    /// The wait before the re-check after `tries` of them: `base × 2^tries`, capped, then
    /// 80–100 % of that (uniform).
    fn wait(&self, tries: u32, rng: &mut Rng) -> u64 {
        let step = self
            .base_ms
            .saturating_mul(1u64 << tries.min(32))
            .min(self.max_ms);
        let fifth = (step / 5).min(u64::from(u32::MAX - 1)) as u32;
        step - u64::from(rng.below(fifth + 1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rng() -> Rng {
        Rng::from_seed([7; 48])
    }

    #[test]
    fn an_up_proxy_is_dialled_freely() {
        let mut p = ProxyDep::new(500, 1_500);
        let mut r = rng();
        for now in 0..100 {
            assert_eq!(p.may_dial(now, &mut r), Ok(()));
        }
        assert!(p.down().is_none());
        assert_eq!(p.worked(100, 50), None, "nothing to say while up");
    }

    /// Issue 19 §3: a stopped proxy was dialled by every pool refill and probe, ~50 a second.
    /// Down, it lets one dial through per backoff step (500 ms doubling to the 1.5 s cap, less
    /// up to a fifth): over ten minutes of callers asking every 10 ms, at most one dial per
    /// 1.2 s once at the cap, and never two within 400 ms.
    #[test]
    fn a_down_proxy_gets_one_dial_per_backoff_step() {
        let mut p = ProxyDep::new(500, 1_500);
        let mut r = rng();
        assert!(
            p.failed(Failure::ProxyUnreachable, 1_000, &mut r),
            "said once"
        );
        assert!(
            !p.failed(Failure::ProxyUnreachable, 1_001, &mut r),
            "only counted"
        );
        let mut dials = Vec::new();
        for now in (1_000..601_000).step_by(10) {
            if p.may_dial(now, &mut r).is_ok() {
                dials.push(now);
                // The re-check fails too.
                assert!(!p.failed(Failure::ProxyUnreachable, now + 1, &mut r));
            }
        }
        assert!(dials[0] >= 1_400 && dials[0] <= 1_500, "{:?}", &dials[..3]);
        for w in dials.windows(2) {
            assert!(w[1] - w[0] >= 800, "{w:?}");
            assert!(w[1] - w[0] <= 1_510, "found within the cap: {w:?}");
        }
        let at_cap = dials.windows(2).skip(2).map(|w| w[1] - w[0]);
        assert!(at_cap.clone().all(|gap| gap >= 1_200));
        let rate = dials.len() as f64 / 600.0;
        assert!(rate <= 1.0 / 1.2 + 0.01, "{rate} dials/s");
        let d = p.down().unwrap().clone();
        assert_eq!(d.tries as usize, dials.len());
        assert!(
            d.held > 50_000,
            "callers were held, not dialled: {}",
            d.held
        );
    }

    #[test]
    fn the_first_dial_past_it_brings_it_back_once() {
        let mut p = ProxyDep::new(500, 1_500);
        let mut r = rng();
        p.failed(Failure::ProxyAuth, 0, &mut r);
        let at = p.may_dial(10, &mut r).unwrap_err();
        assert!((400..=500).contains(&at), "{at}");
        assert_eq!(p.ready(at - 1), Err(at));
        assert_eq!(p.ready(at), Ok(()));
        assert_eq!(p.may_dial(at, &mut r), Ok(()));
        assert!(p.ready(at + 1).is_err(), "the re-check was taken");
        assert_eq!(p.worked(at + 20, 0), None, "a dial from before the outage");
        assert!(p.down().is_some(), "still down");
        let back = p.worked(at + 20, at).expect("back");
        assert_eq!(
            (back.down_ms, back.tries, back.failures, back.held),
            (at + 20, 1, 1, 1)
        );
        assert_eq!(p.worked(at + 30, at + 25), None);
        assert_eq!(p.may_dial(at + 30, &mut r), Ok(()));
        // Down again later: the backoff starts from the base again.
        assert!(p.failed(Failure::ProxyUnreachable, 10_000, &mut r));
        assert!(p.down().unwrap().next_try <= 10_500);
    }

    #[test]
    fn a_reset_forgets_the_outage() {
        let mut p = ProxyDep::new(1, 0);
        let mut r = rng();
        p.failed(Failure::ProxyProtocol, 5, &mut r);
        p.reset();
        assert!(p.down().is_none());
        assert_eq!(p.may_dial(5, &mut r), Ok(()));
    }
}
