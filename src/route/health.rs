//! Health of ONE route (tier, endpoint, DC, media): state machine, cooldown math, RTT samples.
//!
//! Implements docs/design.md §4 rules 2, 3 and 5 and replaces the fixed, unjittered cooldowns
//! of docs/protocol.md §5.1 / §6.3. Owns: the `State` of one route, exponential jittered
//! cooldowns, `Retry-After` and redirect TTLs, flap quarantine, the RTT ring and the hedge delay
//! derived from it. Must not touch: sockets, clocks, logs, or any other route — every `Health`
//! is an independent value, so success on one route can never clear another (rule 2). Time is a
//! parameter (`now`, u64 ms on the caller's monotonic clock); randomness is the caller's `Rng`.
//! The arithmetic only: what counts as a failure or a proof is `route::ladder`'s.
//!
//! Rule 1 ("clients never pay for health checks", the field investigation in docs/design.md §1)
//! is expressed by [`Use::Expired`]: a `Down` route whose cooldown ran out is not handed back to
//! clients; the ladder's plan skips it and its probe schedule re-tests it. Only a probe success
//! or a real session's first downstream byte ([`Health::on_proof`]) brings it back to `Up`; a
//! route in a flap quarantine ([`Health::quarantine_end`]) only a probe begun after the
//! quarantine ended (rule 3, the ladder's check).
//!
//! Failure classes (see [`classify`]) and transitions made by [`Health::on_failure`]:
//!
//! | failure                                   | class    | Unknown | Up      | Suspect | Down, cooling | Down, expired  |
//! |-------------------------------------------|----------|---------|---------|---------|---------------|----------------|
//! | `Timeout`, `HandshakeTimeout`, `Refused`, `Tls`, `Http(!5xx)` | hard     | Down    | Down    | Down    | unchanged     | Down (longer)  |
//! | `Reset`, `Http(5xx)`, `ClosedEarly`       | soft     | Down    | Suspect | Down    | unchanged     | Down (longer)  |
//! | `Local`, `LocalPorts`                     | not ours | —       | —       | —       | —             | —              |
//! | `ClosedAfterReply`                        | hard     | Down ≥ floor | Down ≥ floor | Down ≥ floor | unchanged | Down (longer) |
//! | `Stalled`, `BadReply`                     | hard     | Down    | Down    | Down    | unchanged     | Down (longer)  |
//! | `NetUnreachable`, `HostUnreachable`, `AddrUnavailable` | not ours | — | — | —   | —             | —              |
//! | `ProxyUnreachable`, `ProxyAuth`, `ProxyProtocol` | not ours | — | —     | —       | —             | —              |
//! | `ProxySocks(_)`, `ProxyHttp(_)`           | hard     | Down    | Down    | Down    | unchanged     | Down (longer)  |
//!
//! `Http(!5xx)` covers 3xx (redirect TTL), 403/404, 429 (honours `Retry-After`) and any other
//! non-101 status. `ClosedEarly` is soft; a caller that knows the route answered 101 and then
//! stayed silent (a Worker that cannot reach Telegram) reports `Timeout` to make it hard.
//! `Local` (descriptors exhausted…) and `LocalPorts` (no free local port toward one address)
//! say nothing about the route and are ignored; so do the network-class failures
//! ([`Failure::is_network`]: network or host unreachable, no local address, from the OS or a
//! SOCKS5 proxy's reply): a dead WAN link, or one address without a path, is not a dead route,
//! and cooling routes down for it would keep clients off them after the path returns (the
//! ladder keeps such a failure as a fact of the address, `route::reach`).
//! `ClosedAfterReply` is already the ladder's verdict over several sessions (a front that
//! answers and then closes every session), so it is hard, and its cooldown is at least
//! `Policy::closed_after_reply_ms` (jittered): a plain `resPQ` probe cannot see this fault, so
//! a short cooldown would only hand the route back to the next storm of reconnects.
//! `Stalled` (sessions on the route froze while their clients waited, or a probe that had to
//! pull past the freeze size did not) is hard: every transfer on such a route hangs, and its
//! recovery is proven only by a probe that pulls more than the freeze threshold. A single
//! frozen session only doubts the route ([`Health::doubt`]: Up → Suspect); the ladder decides
//! when freezes add up to `Stalled`. `BadReply` (what came down was not MTProto) is hard too.

use crate::config::health::Policy;
use crate::error::Failure;
use crate::rng::Rng;

/// RTT samples kept per route (a fixed ring; the oldest is overwritten).
pub const RTT_SAMPLES: usize = 32;
/// Samples needed before [`Health::rtt_p95`] answers.
pub const RTT_MIN_P95: usize = 4;
/// Down-entry timestamps kept for flap detection; `Policy::flap_count` is clamped to this.
pub const FLAP_RING: usize = 8;

/// Health state of one route (docs/design.md §4: `Unknown → Up ↔ Suspect → Down{until, level}`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// Never tried since start.
    Unknown,
    /// Last outcome was a success.
    Up,
    /// Up, then one soft failure; a second failure of any kind puts it Down.
    Suspect,
    /// Failed; clients avoid it until `until` (ms, caller's clock), then only the prober tests it.
    Down {
        /// End of the cooldown, ms on the caller's monotonic clock.
        until: u64,
    },
}

/// What planning may do with a route right now ([`Health::usable`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Use {
    /// `Up`: first choice.
    Preferred,
    /// `Unknown`: may be tried by a client (nothing says it is dead).
    Untested,
    /// `Suspect`: usable, after the preferred routes.
    Degraded,
    /// `Down`, cooldown running until `until`: not for clients, not for probes.
    Cooling {
        /// End of the cooldown, ms.
        until: u64,
    },
    /// `Down`, cooldown over: only the background prober may test it (rule 1).
    Expired,
}

/// How a failure counts against a route (module table).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// Puts the route Down from any non-Down state.
    Hard,
    /// Takes `Up` to `Suspect`; from `Unknown`/`Suspect` puts it Down.
    Soft,
    /// Not the route's fault (`Failure::Local`); ignored.
    NotRoute,
}

/// Classifies a failure for health purposes (module table).
pub fn classify(f: Failure) -> Class {
    match f {
        Failure::Timeout | Failure::Refused | Failure::Tls => Class::Hard,
        Failure::HandshakeTimeout => Class::Hard,
        Failure::Http(code) if (500..=599).contains(&code) => Class::Soft,
        Failure::Http(_) => Class::Hard,
        Failure::Reset | Failure::ClosedEarly => Class::Soft,
        // Old flows died (a NAT flush), the route may well be fine: doubt, and a probe.
        Failure::SilentPooled => Class::Soft,
        Failure::Local | Failure::LocalPorts => Class::NotRoute,
        Failure::ClosedAfterReply | Failure::Stalled | Failure::BadReply => Class::Hard,
        // The path to the address, not the route: the ladder keeps it per address.
        Failure::NetUnreachable | Failure::HostUnreachable | Failure::AddrUnavailable => {
            Class::NotRoute
        }
        // The outbound proxy's own failures are not the route's; its refusing the destination
        // (a SOCKS reply code, a CONNECT status) is, like a refused connect.
        Failure::ProxyUnreachable | Failure::ProxyAuth | Failure::ProxyProtocol => Class::NotRoute,
        Failure::ProxySocks(_) | Failure::ProxyHttp(_) => Class::Hard,
    }
}

/// True for the HTTP redirect statuses that mean "no WS front here" (301, 302, 303, 307, 308).
pub fn is_redirect_status(code: u16) -> bool {
    matches!(code, 301 | 302 | 303 | 307 | 308)
}

/// A state transition, returned for logging and stats (one log line per change).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Change {
    /// State before.
    pub from: State,
    /// State after.
    pub to: State,
    /// The failure that caused it; `None` for a success.
    pub failure: Option<Failure>,
    /// Cooldown started, ms (0 unless `to` is `Down`).
    pub cooldown_ms: u64,
    /// The cooldown was raised to the flap quarantine.
    pub quarantined: bool,
}

/// Health of one route. About 200 bytes; no heap.
#[derive(Clone, Debug)]
pub struct Health {
    state: State,
    /// Consecutive Down entries since the last success (the cooldown exponent).
    level: u32,
    last_change: u64,
    /// The current Down was caused by a redirect.
    redirect: bool,
    /// Ring of timestamps of Down entries from a non-Down state (flap history).
    flaps: [u64; FLAP_RING],
    flap_len: u8,
    flap_next: u8,
    /// Ring of RTT samples, ms (saturated to u32).
    rtt: [u32; RTT_SAMPLES],
    rtt_len: u8,
    rtt_next: u8,
    /// The last failure that counted against the route and when it was seen (ms).
    last_failure: Option<(Failure, u64)>,
    /// End (ms) of the flap quarantine the route sits in: set by a quarantined Down entry,
    /// cleared only by a proof (docs/design.md §4 rule 3).
    quarantine: Option<u64>,
}

impl Health {
    /// A fresh route: `Unknown`, level 0, no samples, `last_change` 0.
    pub fn new() -> Health {
        Health {
            state: State::Unknown,
            level: 0,
            last_change: 0,
            redirect: false,
            flaps: [0; FLAP_RING],
            flap_len: 0,
            flap_next: 0,
            rtt: [0; RTT_SAMPLES],
            rtt_len: 0,
            rtt_next: 0,
            last_failure: None,
            quarantine: None,
        }
    }

    /// The last failure that counted against the route (any class but [`Class::NotRoute`],
    /// also one seen while a cooldown was running) and when (ms); `None` if none yet.
    pub fn last_failure(&self) -> Option<(Failure, u64)> {
        self.last_failure
    }

    /// End (ms) of the flap quarantine this route is in, if it is in one: from a quarantined
    /// Down entry until the next proof, whatever happens in between (a failed recovery probe
    /// keeps it). Which proof may lift it is the ladder's rule (only a probe begun at or after
    /// this time, docs/design.md §4 rule 3).
    pub fn quarantine_end(&self) -> Option<u64> {
        self.quarantine
    }

    /// Current state.
    pub fn state(&self) -> State {
        self.state
    }

    /// Consecutive-failure level: the exponent of the next cooldown (`base × 2^level`). Reset to
    /// 0 by a success, incremented after every Down entry.
    pub fn level(&self) -> u32 {
        self.level
    }

    /// Time (ms) of the last state change; 0 if the state never changed.
    pub fn last_change(&self) -> u64 {
        self.last_change
    }

    /// True while the current `Down` was caused by a redirect (301/302/303/307/308); the caller
    /// logs the redirect once per TTL, on the [`Change`] that set it.
    pub fn is_redirect(&self) -> bool {
        self.redirect && matches!(self.state, State::Down { .. })
    }

    /// What planning may do with this route at `now` (ms).
    pub fn usable(&self, now: u64) -> Use {
        match self.state {
            State::Up => Use::Preferred,
            State::Unknown => Use::Untested,
            State::Suspect => Use::Degraded,
            State::Down { until } if now < until => Use::Cooling { until },
            State::Down { .. } => Use::Expired,
        }
    }

    /// A probe or real session proved the route at `now` with round trip `rtt_ms`. Any state
    /// becomes `Up`, the level returns to 0 and the redirect flag clears; flap history is kept
    /// (so a flapping route still reaches quarantine). The RTT sample is always recorded.
    /// Returns `Some` only if the state changed.
    pub fn on_success(&mut self, now: u64, rtt_ms: u64) -> Option<Change> {
        self.on_proof(now, Some(rtt_ms))
    }

    /// [`Health::on_success`] where the proof may carry no RTT sample (a session on a pooled
    /// upstream did not dial, so its connect time says nothing about the route's RTT).
    pub fn on_proof(&mut self, now: u64, rtt_ms: Option<u64>) -> Option<Change> {
        if let Some(rtt) = rtt_ms {
            self.push_rtt(rtt);
        }
        self.level = 0;
        self.redirect = false;
        self.quarantine = None;
        if self.state == State::Up {
            return None;
        }
        let from = self.state;
        self.state = State::Up;
        self.last_change = now;
        Some(Change {
            from,
            to: State::Up,
            failure: None,
            cooldown_ms: 0,
            quarantined: false,
        })
    }

    /// An attempt on this route failed at `now` with `f`; `retry_after_s` is the response's
    /// `Retry-After` in seconds, if any. Applies the module table and, on a Down entry, the
    /// cooldown: `min(base × 2^level, max)` ± `jitter_pct`; a redirect uses `redirect_ttl_ms`
    /// (jittered) instead; a 429/503 waits at least `min(Retry-After, max_retry_after_ms)`; a
    /// quarantined route waits at least `quarantine_ms` (jittered). A failure while the cooldown
    /// is still running changes nothing (rule 2: a repeated mark never extends a running
    /// cooldown). Returns `Some` only if the state changed.
    pub fn on_failure(
        &mut self,
        now: u64,
        f: Failure,
        retry_after_s: Option<u32>,
        policy: &Policy,
        rng: &mut Rng,
    ) -> Option<Change> {
        let class = classify(f);
        if class == Class::NotRoute {
            return None;
        }
        self.last_failure = Some((f, now));
        let from = self.state;
        match from {
            State::Down { until } if now < until => return None,
            State::Up if class == Class::Soft => return self.doubt(now, f),
            _ => {}
        }
        // A failed recovery probe (Down, expired) is not a new flap: its growth comes from the
        // level, which a success resets. Only entries from a working state count as flaps.
        let fresh = !matches!(from, State::Down { .. });
        let quarantined = fresh && self.note_flap(now, policy);

        let mut cooldown = {
            let nominal = backoff(policy.base_ms, policy.max_ms, self.level);
            rng.jitter(nominal, policy.jitter_pct)
        };
        let redirect = matches!(f, Failure::Http(code) if is_redirect_status(code));
        if redirect {
            cooldown = rng.jitter(policy.redirect_ttl_ms, policy.jitter_pct);
        }
        if let (Failure::Http(429 | 503), Some(s)) = (f, retry_after_s) {
            let asked = u64::from(s).saturating_mul(1000);
            cooldown = cooldown.max(asked.min(policy.max_retry_after_ms));
        }
        if f == Failure::ClosedAfterReply {
            cooldown = cooldown.max(rng.jitter(policy.closed_after_reply_ms, policy.jitter_pct));
        }
        if quarantined {
            cooldown = cooldown.max(rng.jitter(policy.quarantine_ms, policy.jitter_pct));
        }

        let until = now.saturating_add(cooldown);
        if quarantined {
            self.quarantine = Some(until);
        }
        let to = State::Down { until };
        self.state = to;
        self.level = self.level.saturating_add(1);
        self.redirect = redirect;
        self.last_change = now;
        Some(Change {
            from,
            to,
            failure: Some(f),
            cooldown_ms: cooldown,
            quarantined,
        })
    }

    /// Doubt without a cooldown (one frozen session, the ladder's call): `Up` → `Suspect`, the
    /// failure `f` remembered; any other state is left as it is. Returns the change, if any.
    pub fn doubt(&mut self, now: u64, f: Failure) -> Option<Change> {
        self.last_failure = Some((f, now));
        if self.state != State::Up {
            return None;
        }
        let from = self.state;
        self.state = State::Suspect;
        self.last_change = now;
        Some(Change {
            from,
            to: State::Suspect,
            failure: Some(f),
            cooldown_ms: 0,
            quarantined: false,
        })
    }

    /// 95th percentile (nearest rank) of the last [`RTT_SAMPLES`] RTTs, ms; `None` until
    /// [`RTT_MIN_P95`] samples exist.
    pub fn rtt_p95(&self) -> Option<u64> {
        let n = usize::from(self.rtt_len);
        if n < RTT_MIN_P95 {
            return None;
        }
        // Nearest rank: ceil(0.95 n), 1-based.
        let rank = (95 * n).div_ceil(100);
        Some(u64::from(self.sorted_rtt()[rank - 1]))
    }

    /// Lower median of the recorded RTTs, ms; `None` with no samples.
    pub fn rtt_median(&self) -> Option<u64> {
        let n = usize::from(self.rtt_len);
        if n == 0 {
            return None;
        }
        Some(u64::from(self.sorted_rtt()[(n - 1) / 2]))
    }

    /// Delay before hedging a connect on this route with the next one (docs/design.md §4 connect
    /// engine): `2 × p95` clamped to `[floor_ms, 4 × default_ms]` once p95 is known (the floor
    /// wins if the two conflict); with fewer samples than a p95 needs, `2 ×` the slowest sample
    /// so far, clamped the same way and never above `default_ms` (one sample is already better
    /// than the guess); with none, `default_ms`.
    pub fn hedge_delay(&self, default_ms: u64, floor_ms: u64) -> u64 {
        let ceiling = default_ms.saturating_mul(4).max(floor_ms);
        match self.rtt_p95() {
            Some(p95) => p95.saturating_mul(2).clamp(floor_ms, ceiling),
            None => match self.rtt_max() {
                Some(max) => max
                    .saturating_mul(2)
                    .clamp(floor_ms.min(default_ms), default_ms),
                None => default_ms,
            },
        }
    }

    /// The slowest recorded RTT, ms; `None` with no samples.
    fn rtt_max(&self) -> Option<u64> {
        let n = usize::from(self.rtt_len);
        self.rtt[..n].iter().max().map(|&v| u64::from(v))
    }

    /// Records an RTT sample (ms) and nothing else: no state, level or redirect change (a
    /// proof that adds no news, e.g. a session dialled before the route came up).
    pub fn note_rtt(&mut self, rtt_ms: u64) {
        self.push_rtt(rtt_ms);
    }

    fn push_rtt(&mut self, rtt_ms: u64) {
        let v = u32::try_from(rtt_ms).unwrap_or(u32::MAX);
        self.rtt[usize::from(self.rtt_next)] = v;
        self.rtt_next = ((usize::from(self.rtt_next) + 1) % RTT_SAMPLES) as u8;
        if usize::from(self.rtt_len) < RTT_SAMPLES {
            self.rtt_len += 1;
        }
    }

    /// The recorded samples sorted ascending, in a fixed array (first `rtt_len` valid).
    fn sorted_rtt(&self) -> [u32; RTT_SAMPLES] {
        let n = usize::from(self.rtt_len);
        let mut copy = self.rtt;
        copy[..n].sort_unstable();
        copy
    }

    /// Records a Down entry at `now`; true if it makes `flap_count` entries within the window.
    fn note_flap(&mut self, now: u64, policy: &Policy) -> bool {
        self.flaps[usize::from(self.flap_next)] = now;
        self.flap_next = ((usize::from(self.flap_next) + 1) % FLAP_RING) as u8;
        if usize::from(self.flap_len) < FLAP_RING {
            self.flap_len += 1;
        }
        if policy.flap_count == 0 {
            return false;
        }
        let need = (policy.flap_count as usize).min(FLAP_RING);
        let recent = self.flaps[..usize::from(self.flap_len)]
            .iter()
            .filter(|&&t| now.saturating_sub(t) < policy.flap_window_ms)
            .count();
        recent >= need
    }
}

impl Default for Health {
    fn default() -> Health {
        Health::new()
    }
}

/// `base × 2^level`, capped at `max`, without overflow.
fn backoff(base: u64, max: u64, level: u32) -> u64 {
    if level >= 64 || base > (max >> level) {
        max
    } else {
        (base << level).min(max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HARD: [Failure; 8] = [
        Failure::Stalled,
        Failure::Timeout,
        Failure::Refused,
        Failure::Tls,
        Failure::Http(302),
        Failure::Http(403),
        Failure::Http(429),
        Failure::Http(404),
    ];
    const SOFT: [Failure; 4] = [
        Failure::Reset,
        Failure::ClosedEarly,
        Failure::Http(500),
        Failure::Http(503),
    ];
    const TIMEOUT: Failure = Failure::Timeout;

    /// One route under test with its policy and a seeded Rng.
    struct Rig {
        h: Health,
        p: Policy,
        r: Rng,
    }

    impl Rig {
        /// Jitter-free default policy, so cooldowns are exact.
        fn exact(seed: u8) -> Rig {
            Rig::with(
                Policy {
                    jitter_pct: 0,
                    ..Policy::default()
                },
                seed,
            )
        }

        fn with(p: Policy, seed: u8) -> Rig {
            Rig {
                h: Health::new(),
                p,
                r: Rng::from_seed([seed; 48]),
            }
        }

        fn up(mut self, now: u64) -> Rig {
            self.h.on_success(now, 50);
            self
        }

        fn fail_ra(&mut self, now: u64, f: Failure, ra: Option<u32>) -> Option<Change> {
            self.h.on_failure(now, f, ra, &self.p, &mut self.r)
        }

        fn fail(&mut self, now: u64, f: Failure) -> Option<Change> {
            self.fail_ra(now, f, None)
        }

        /// Fails and returns the change, which must exist.
        fn change(&mut self, now: u64, f: Failure, ra: Option<u32>) -> Change {
            self.fail_ra(now, f, ra).expect("a state change")
        }

        fn until(&self) -> u64 {
            match self.h.state() {
                State::Down { until } => until,
                s => panic!("expected Down, got {s:?}"),
            }
        }
    }

    #[test]
    fn new_route_is_unknown_and_untested() {
        let h = Health::default();
        assert_eq!((h.state(), h.usable(0)), (State::Unknown, Use::Untested));
        assert_eq!((h.level(), h.last_change(), h.is_redirect()), (0, 0, false));
        assert_eq!((h.rtt_p95(), h.rtt_median()), (None, None));
    }

    #[test]
    fn hard_failures_go_down_at_once_from_every_working_state() {
        for f in HARD {
            assert_eq!(classify(f), Class::Hard, "{f}");
            for start in 0..3 {
                let mut t = Rig::exact(1);
                if start > 0 {
                    t = t.up(0);
                }
                if start > 1 {
                    assert_eq!(t.change(1, Failure::Reset, None).to, State::Suspect);
                }
                let from = t.h.state();
                let c = t.change(1000, f, None);
                assert_eq!((c.from, c.to, c.failure), (from, t.h.state(), Some(f)));
                assert_eq!(t.until(), 1000 + c.cooldown_ms, "{f} from {from:?}");
                assert_eq!((t.h.last_change(), t.h.level()), (1000, 1));
            }
        }
    }

    #[test]
    fn soft_failures_take_up_to_suspect_then_down() {
        for f in SOFT {
            assert_eq!(classify(f), Class::Soft, "{f}");
            let mut t = Rig::exact(2).up(0);
            let c = t.change(5, f, None);
            assert_eq!(
                (c.from, c.to, c.cooldown_ms),
                (State::Up, State::Suspect, 0)
            );
            assert_eq!(
                (t.h.usable(5), t.h.level(), t.h.last_change()),
                (Use::Degraded, 0, 5)
            );
            assert_eq!(t.change(9, f, None).from, State::Suspect);
            assert_eq!(t.h.state(), State::Down { until: 9 + 10_000 });
            // From Unknown one soft failure is enough.
            let mut fresh = Rig::exact(2);
            fresh.fail(0, f);
            assert_eq!(fresh.h.state(), State::Down { until: 10_000 });
        }
    }

    #[test]
    fn local_failures_do_not_touch_the_route() {
        let mut t = Rig::exact(3).up(0);
        assert_eq!(classify(Failure::Local), Class::NotRoute);
        for now in 0..5 {
            assert_eq!(t.fail(now, Failure::Local), None);
        }
        assert_eq!((t.h.state(), t.h.level()), (State::Up, 0));
    }

    #[test]
    fn path_and_local_failures_do_not_cool_routes() {
        for f in [
            Failure::NetUnreachable,
            Failure::HostUnreachable,
            Failure::AddrUnavailable,
            Failure::LocalPorts,
        ] {
            assert_eq!(classify(f), Class::NotRoute);
            for mut t in [Rig::exact(3), Rig::exact(3).up(0)] {
                let before = t.h.state();
                for now in 0..5 {
                    assert_eq!(t.fail(now, f), None);
                }
                assert_eq!((t.h.state(), t.h.level()), (before, 0));
            }
        }
    }

    #[test]
    fn success_restores_up_and_reports_only_real_changes() {
        let mut t = Rig::exact(4);
        t.fail(0, TIMEOUT);
        t.fail(20_000, TIMEOUT);
        assert_eq!(t.h.level(), 2);
        let c = t.h.on_success(25_000, 80).expect("Down → Up is a change");
        assert_eq!((c.to, c.failure), (State::Up, None));
        assert_eq!(
            (t.h.state(), t.h.level(), t.h.last_change()),
            (State::Up, 0, 25_000)
        );
        assert_eq!(t.h.on_success(26_000, 90), None, "Up → Up is not a change");
        assert_eq!((t.h.last_change(), t.h.rtt_median()), (25_000, Some(80)));
    }

    #[test]
    fn success_on_one_route_never_touches_another() {
        let (mut a, mut b) = (Rig::exact(5), Rig::exact(5));
        a.fail(0, TIMEOUT);
        b.fail(0, TIMEOUT);
        let b_before = b.h.state();
        a.h.on_success(1, 40);
        assert_eq!(a.h.state(), State::Up);
        assert_eq!(
            (b.h.state(), b.h.level(), b.h.rtt_median()),
            (b_before, 1, None)
        );
        assert_eq!(b.h.usable(1), Use::Cooling { until: 10_000 });
    }

    #[test]
    fn failure_during_running_cooldown_never_extends_it() {
        let mut t = Rig::with(Policy::default(), 6).up(0);
        t.change(1_000, TIMEOUT, None);
        let (end, level) = (t.until(), t.h.level());
        for now in (1_000..end).step_by(997).chain([end - 1]) {
            for f in [
                TIMEOUT,
                Failure::Http(429),
                Failure::Http(302),
                Failure::Reset,
            ] {
                assert_eq!(t.fail_ra(now, f, Some(3000)), None);
            }
        }
        assert_eq!(
            (t.until(), t.h.level(), t.h.last_change()),
            (end, level, 1_000)
        );
        assert!(!t.h.is_redirect());
    }

    #[test]
    fn cooling_then_expired_at_the_boundary() {
        let mut t = Rig::exact(7);
        t.fail(100, Failure::Refused);
        assert_eq!(t.h.usable(100), Use::Cooling { until: 10_100 });
        assert_eq!(t.h.usable(10_099), Use::Cooling { until: 10_100 });
        assert_eq!(t.h.usable(10_100), Use::Expired);
    }

    /// Seed 000: a fixed cooldown on a dead direct tier made the next client after each expiry
    /// wait N × connect-timeout. An expired cooldown must not make the route client-usable.
    #[test]
    fn regression_expired_cooldown_is_not_handed_to_the_next_client() {
        let mut t = Rig::with(Policy::default(), 8).up(0);
        t.fail(0, TIMEOUT);
        let end = t.until();
        for now in [end, end + 1, end + 3_600_000] {
            assert_eq!(t.h.usable(now), Use::Expired);
        }
        assert_eq!(
            t.h.state(),
            State::Down { until: end },
            "only a success revives it"
        );
    }

    #[test]
    fn failed_recovery_probes_grow_the_cooldown_to_the_cap() {
        let mut t = Rig::exact(9).up(0);
        let mut now = 0;
        let mut seen = Vec::new();
        for _ in 0..10 {
            let c = t.change(now, TIMEOUT, None);
            assert!(!c.quarantined, "failed probes are not flaps");
            seen.push(c.cooldown_ms / 1000);
            now = t.until(); // the prober retries exactly at expiry
        }
        assert_eq!(seen, [10, 20, 40, 80, 160, 320, 600, 600, 600, 600]);
        assert_eq!(t.h.level(), 10);
        // A success resets the exponent.
        t.h.on_success(now, 30);
        t.fail(now + 1, TIMEOUT);
        assert_eq!(t.until(), now + 1 + 10_000);
        // No overflow at absurd levels or bases.
        assert_eq!(backoff(10_000, 600_000, 63), 600_000);
        assert_eq!(backoff(10_000, 600_000, u32::MAX), 600_000);
        assert_eq!(backoff(u64::MAX, 600_000, 0), 600_000);
    }

    #[test]
    fn jitter_stays_within_twenty_percent_over_many_seeds() {
        let (mut lo, mut hi) = (u64::MAX, 0u64);
        for seed in 0..=255u8 {
            let mut t = Rig::with(Policy::default(), seed);
            let mut now = 0;
            for level in 0..8u32 {
                let got = t.change(now, TIMEOUT, None).cooldown_ms;
                let nominal = backoff(t.p.base_ms, t.p.max_ms, level);
                let ok = got >= nominal * 4 / 5 && got <= nominal * 6 / 5;
                assert!(ok, "seed {seed} level {level}: {got} vs {nominal}");
                if level == 0 {
                    (lo, hi) = (lo.min(got), hi.max(got));
                }
                now = t.until();
            }
        }
        assert!(lo < 8_500 && hi > 11_500, "jitter too narrow: {lo}..{hi}");
    }

    #[test]
    fn retry_after_is_honoured_and_capped() {
        let cooldown =
            |f: Failure, ra: u32| Rig::exact(10).up(0).change(0, f, Some(ra)).cooldown_ms;
        assert_eq!(
            cooldown(Failure::Http(429), 120),
            120_000,
            "longer than computed"
        );
        assert_eq!(
            cooldown(Failure::Http(429), 2),
            10_000,
            "shorter: computed stands"
        );
        assert_eq!(cooldown(Failure::Http(429), u32::MAX), 3_600_000, "capped");
        assert_eq!(cooldown(Failure::Http(403), 300), 10_000, "403 ignores it");
        // 503 is soft: Up → Suspect ignores it, Suspect → Down honours it.
        let mut t = Rig::exact(10).up(0);
        assert_eq!(t.change(0, Failure::Http(503), Some(300)).cooldown_ms, 0);
        assert_eq!(
            t.change(1, Failure::Http(503), Some(300)).cooldown_ms,
            300_000
        );
    }

    #[test]
    fn redirect_uses_its_ttl_and_is_flagged_until_cleared() {
        for seed in 0..50u8 {
            let mut t = Rig::with(Policy::default(), seed).up(0);
            let got = t.change(0, Failure::Http(302), None).cooldown_ms;
            assert!((2_880_000..=4_320_000).contains(&got), "{got}");
            assert!(t.h.is_redirect());
            // The prober retries at expiry and gets a plain timeout: no longer a redirect.
            let end = t.until();
            t.fail(end, TIMEOUT);
            assert!(!t.h.is_redirect());
        }
        for code in [301, 303, 307, 308] {
            let mut t = Rig::exact(1);
            let c = t.change(0, Failure::Http(code), None);
            assert_eq!(
                (c.cooldown_ms, t.h.is_redirect()),
                (3_600_000, true),
                "{code}"
            );
            t.h.on_success(3_600_000, 20);
            assert!(!t.h.is_redirect());
        }
        assert!(!is_redirect_status(304) && !is_redirect_status(300));
    }

    #[test]
    fn flapping_route_is_quarantined_and_history_survives_success() {
        let mut t = Rig::exact(11);
        let mut cooldowns = Vec::new();
        // Up → Down → (probe ok) Up → Down … three times within the 600 s window.
        for now in [0u64, 100_000, 200_000] {
            t.h.on_success(now, 30);
            let c = t.change(now + 1, TIMEOUT, None);
            cooldowns.push((c.cooldown_ms, c.quarantined));
        }
        assert_eq!(
            cooldowns,
            [(10_000, false), (10_000, false), (1_800_000, true)]
        );
        assert_eq!(t.until(), 200_001 + 1_800_000);
        // The quarantine is remembered until a proof, a failed recovery probe included.
        assert_eq!(t.h.quarantine_end(), Some(200_001 + 1_800_000));
        let c = t.change(t.until(), TIMEOUT, None);
        assert!(!c.quarantined, "a failed recovery probe is not a flap");
        assert_eq!(t.h.quarantine_end(), Some(200_001 + 1_800_000));
        t.h.on_success(t.until(), 30);
        assert_eq!(t.h.quarantine_end(), None);
    }

    #[test]
    fn spread_out_flaps_are_not_quarantined() {
        let mut t = Rig::exact(12);
        for i in 0..20u64 {
            let now = i * 400_000; // at most 2 entries in any 600 s window
            t.h.on_success(now, 30);
            let c = t.change(now + 1, TIMEOUT, None);
            assert_eq!((c.cooldown_ms, c.quarantined), (10_000, false), "entry {i}");
        }
    }

    #[test]
    fn quarantine_is_jittered_disableable_and_the_ring_is_bounded() {
        let mut t = Rig::with(Policy::default(), 13);
        for i in 0..100u64 {
            let now = i * 60_000;
            t.h.on_success(now, 30);
            // Two soft failures: Up → Suspect → Down.
            assert_eq!(t.change(now, Failure::Reset, None).to, State::Suspect);
            let c = t.change(now + 1, Failure::Reset, None);
            assert_eq!(c.quarantined, i >= 2, "entry {i}");
            if i >= 2 {
                assert!(
                    (1_440_000..=2_160_000).contains(&c.cooldown_ms),
                    "{}",
                    c.cooldown_ms
                );
            }
        }
        assert_eq!(usize::from(t.h.flap_len), FLAP_RING);
        // flap_count above the ring size still triggers (clamped); 0 disables.
        let quarantines = |flap_count: u32| {
            let mut t = Rig::with(
                Policy {
                    flap_count,
                    jitter_pct: 0,
                    ..Policy::default()
                },
                14,
            );
            (0..FLAP_RING as u64)
                .filter(|i| {
                    t.h.on_success(i * 10_000, 30);
                    t.change(i * 10_000 + 1, TIMEOUT, None).quarantined
                })
                .count()
        };
        assert_eq!(
            (quarantines(50), quarantines(0), quarantines(1)),
            (1, 0, FLAP_RING)
        );
    }

    #[test]
    fn closed_after_reply_is_hard_with_its_own_cooldown_floor() {
        assert_eq!(classify(Failure::ClosedAfterReply), Class::Hard);
        let mut t = Rig::exact(15).up(0);
        let c = t.change(1_000, Failure::ClosedAfterReply, None);
        assert_eq!(
            (c.from, c.cooldown_ms),
            (State::Up, 60_000),
            "the floor, not the base"
        );
        // A doubled cooldown above the floor wins.
        let mut t = Rig::with(
            Policy {
                jitter_pct: 0,
                closed_after_reply_ms: 5_000,
                ..Policy::default()
            },
            15,
        );
        t.fail(0, TIMEOUT);
        let end = t.until();
        assert_eq!(
            t.change(end, Failure::ClosedAfterReply, None).cooldown_ms,
            20_000
        );
    }

    #[test]
    fn p95_and_median_math() {
        let mut h = Health::new();
        for v in [30, 10, 20] {
            h.on_success(0, v);
        }
        assert_eq!((h.rtt_p95(), h.rtt_median()), (None, Some(20)));
        h.on_success(0, 40);
        assert_eq!((h.rtt_p95(), h.rtt_median()), (Some(40), Some(20)));
        // 1..=20 in reverse: nearest rank ceil(0.95 × 20) = 19.
        let mut h = Health::new();
        for v in (1..=20).rev() {
            h.on_success(0, v);
        }
        assert_eq!((h.rtt_p95(), h.rtt_median()), (Some(19), Some(10)));
        // The ring keeps only the last 32: old slow samples age out.
        let mut h = Health::new();
        for v in std::iter::repeat_n(5_000, RTT_SAMPLES).chain(1..=RTT_SAMPLES as u64) {
            h.on_success(0, v);
        }
        assert_eq!((h.rtt_p95(), h.rtt_median()), (Some(31), Some(16)));
        // One outlier among 32 is the 32nd value; p95 is the 31st (ceil(0.95 × 32)).
        h.on_success(0, 1_000_000);
        assert_eq!(h.rtt_p95(), Some(32));
        h.on_success(0, u64::MAX);
        assert_eq!(h.rtt_p95(), Some(1_000_000));
    }

    #[test]
    fn hedge_delay_uses_p95_when_known_and_clamps() {
        let (mut fast, mut slow) = (Health::new(), Health::new());
        assert_eq!(fast.hedge_delay(250, 50), 250, "no samples: the default");
        let mut one = Health::new();
        one.on_success(0, 3);
        assert_eq!(
            one.hedge_delay(250, 50),
            50,
            "one fast sample: 2 × it, floored"
        );
        one.on_success(0, 90);
        assert_eq!(one.hedge_delay(250, 50), 180, "2 × the slowest so far");
        one.on_success(0, 900);
        assert_eq!(
            one.hedge_delay(250, 50),
            250,
            "never above the default before a p95"
        );
        for _ in 0..RTT_MIN_P95 {
            fast.on_success(0, 100);
            slow.on_success(0, 5_000);
        }
        assert_eq!(fast.hedge_delay(250, 50), 200);
        assert_eq!(fast.hedge_delay(250, 300), 300, "floor");
        assert_eq!(slow.hedge_delay(250, 50), 1_000, "ceiling 4 × default");
        assert_eq!(slow.hedge_delay(250, 2_000), 2_000, "floor beats ceiling");
    }

    #[test]
    fn last_failure_remembers_the_class_and_time_of_failures_that_count() {
        let mut g = Rig::exact(7);
        assert_eq!(g.h.last_failure(), None);
        g.fail(100, Failure::Local);
        assert_eq!(
            g.h.last_failure(),
            None,
            "not the route's fault: not recorded"
        );
        g.fail(200, Failure::Refused);
        assert_eq!(g.h.last_failure(), Some((Failure::Refused, 200)));
        // During the cooldown nothing changes state, but the failure is still the last seen.
        assert_eq!(g.fail(300, Failure::Http(502)), None);
        assert_eq!(g.h.last_failure(), Some((Failure::Http(502), 300)));
        g.h.on_success(400_000, 20);
        assert_eq!(
            g.h.last_failure(),
            Some((Failure::Http(502), 300)),
            "a success does not erase the history"
        );
    }
}
