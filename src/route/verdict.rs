//! Whether Telegram is reachable at all (issue 23 §3 "Off-network trial"): the one verdict a
//! new user needs when `run` starts on a machine without Telegram access — said once, with the
//! tiers tried and what they met, and said once more when a route works again. Sans-IO: facts
//! in (a route's proof, a route's failure), news out, time as a parameter (`now`, u64 ms on the
//! caller's monotonic clock). Owns no log, socket or clock: the ladder (`ladder::deps`) feeds
//! it, tells it which routes still await their first result, and writes the lines, the
//! `telegram` event and the `ctl status` field.
//!
//! The rules:
//! * Each route's last result counts: a proof (`resPQ` from a probe, a session's first byte
//!   down) or a failure of any class — network-class ones included (they cool no route, but
//!   they are exactly what an off-network machine meets).
//! * *Reachable* as soon as any route's last result is a proof. Said once at the first proof
//!   ("reachable via …"), and once when it follows an *unreachable* verdict ("again after …").
//! * *Unreachable* when no route's last result is a proof, at least one route failed, and no
//!   route is pending (scheduled or running without a result yet: the caller knows): at start
//!   that is the moment the startup probes have all failed, not the first failure. A pending
//!   route holds the verdict back for at most `hold_ms` (the caller's probe timeout) after the
//!   first failure: a probe put off (paced, budgeted) must not keep an outage unsaid. Said once
//!   per outage, with each tier tried, its routes and their commonest failure.
//! * Until then *checking* (nothing said).
//!
//! A route whose last result is an old proof keeps the verdict *reachable*: a later outage is
//! this verdict's only once the routes clients use fail (the network-down line of
//! `route::reach` says the rest).

use std::fmt;

use crate::config::Tier;
use crate::error::Failure;

/// The verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// No route has a result yet, or some still await theirs.
    Checking,
    /// Some route's last result is a proof.
    Reachable,
    /// Every route tried failed, none works, none is pending.
    Unreachable,
}

impl State {
    /// `checking`, `reachable`, `unreachable` (status and events).
    pub fn name(self) -> &'static str {
        match self {
            State::Checking => "checking",
            State::Reachable => "reachable",
            State::Unreachable => "unreachable",
        }
    }
}

/// One tier's routes that failed, for the unreachable line and `ctl status`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tried {
    /// The tier.
    pub tier: Tier,
    /// Its routes whose last result is a failure.
    pub routes: u32,
    /// Their commonest failure (the earliest tier order's on a tie).
    pub failure: Failure,
}

impl fmt::Display for Tried {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = if self.routes == 1 { "" } else { "s" };
        write!(
            f,
            "{} ({} route{s}: {})",
            self.tier.name(),
            self.routes,
            self.failure
        )
    }
}

/// What the caller should say (one line and one event each).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum News {
    /// The first proof since start: `label` is the route that answered.
    Reachable {
        /// The route's label.
        label: String,
    },
    /// A proof after an unreachable verdict that lasted `down_ms`.
    Back {
        /// The route's label.
        label: String,
        /// How long the unreachable verdict stood (ms).
        down_ms: u64,
    },
    /// Every route tried failed; `tried` per tier (tier order).
    Unreachable {
        /// The tiers tried.
        tried: Vec<Tried>,
    },
}

/// The verdict and each route's last result. See the module docs.
#[derive(Clone, Debug)]
pub struct Verdict {
    state: State,
    /// When the state last changed (ms).
    since: u64,
    /// The first failure since the verdict was last *reachable* (or since start), ms.
    first_fail: Option<u64>,
    /// Per route id: `None` no result yet, `Some(Ok(()))` a proof, `Some(Err(f))` a failure;
    /// with the route's tier.
    last: Vec<Option<(Tier, Result<(), Failure>)>>,
}

impl Default for Verdict {
    fn default() -> Self {
        Verdict::new()
    }
}

impl Verdict {
    /// Nothing known yet (*checking*).
    pub fn new() -> Verdict {
        Verdict {
            state: State::Checking,
            since: 0,
            first_fail: None,
            last: Vec::new(),
        }
    }

    /// The verdict now.
    pub fn state(&self) -> State {
        self.state
    }

    /// When the verdict last changed (ms; 0 while it never did).
    pub fn since(&self) -> u64 {
        self.since
    }

    /// True when `route` has a result (proof or failure) since start.
    pub fn has_result(&self, route: usize) -> bool {
        self.last.get(route).is_some_and(Option::is_some)
    }

    /// Route `route` of `tier` failed with `f` (any class) at `now`. Judge afterwards with
    /// [`Verdict::judge`].
    pub fn failed(&mut self, route: usize, tier: Tier, f: Failure, now: u64) {
        self.set(route, tier, Err(f));
        self.first_fail.get_or_insert(now);
    }

    /// Route `route` of `tier`, labelled `label`, worked at `now`: the news, if the verdict
    /// changes to *reachable*.
    pub fn worked(&mut self, route: usize, tier: Tier, label: &str, now: u64) -> Option<News> {
        self.set(route, tier, Ok(()));
        let news = match self.state {
            State::Reachable => return None,
            State::Checking => News::Reachable {
                label: label.to_string(),
            },
            State::Unreachable => News::Back {
                label: label.to_string(),
                down_ms: now.saturating_sub(self.since),
            },
        };
        self.state = State::Reachable;
        self.since = now;
        self.first_fail = None;
        Some(news)
    }

    /// Whether the verdict is now *unreachable*, at `now`; `pending` says some route still
    /// awaits its first result (the caller's schedule knows), which holds the verdict back for
    /// at most `hold_ms` after the first failure. The news once, on the change.
    pub fn judge(&mut self, pending: bool, hold_ms: u64, now: u64) -> Option<News> {
        if self.state == State::Unreachable {
            return None;
        }
        let held = self
            .first_fail
            .is_some_and(|at| now < at.saturating_add(hold_ms));
        if pending && held {
            return None;
        }
        let mut any_failed = false;
        for (_, r) in self.last.iter().flatten() {
            match r {
                Ok(()) => return None,
                Err(_) => any_failed = true,
            }
        }
        if !any_failed {
            return None;
        }
        self.state = State::Unreachable;
        self.since = now;
        Some(News::Unreachable {
            tried: self.tried(),
        })
    }

    /// The tiers whose routes' last result is a failure, in tier order, each with its count and
    /// commonest failure.
    pub fn tried(&self) -> Vec<Tried> {
        let mut out = Vec::new();
        for tier in Tier::ALL {
            let fails: Vec<Failure> = (self.last.iter().flatten())
                .filter(|(t, _)| *t == tier)
                .filter_map(|(_, r)| r.err())
                .collect();
            let Some(commonest) = fails.iter().copied().max_by_key(|f| {
                (
                    fails.iter().filter(|g| *g == f).count(),
                    first_pos(&fails, *f),
                )
            }) else {
                continue;
            };
            out.push(Tried {
                tier,
                routes: fails.len() as u32,
                failure: commonest,
            });
        }
        out
    }

    /// Drops `route`'s result (a retired route): it no longer counts either way.
    pub fn forget(&mut self, route: usize) {
        if let Some(r) = self.last.get_mut(route) {
            *r = None;
        }
    }

    fn set(&mut self, route: usize, tier: Tier, r: Result<(), Failure>) {
        if self.last.len() <= route {
            self.last.resize(route + 1, None);
        }
        self.last[route] = Some((tier, r));
    }
}

/// A ranking key that prefers the failure seen first among equals (`max_by_key` keeps the last
/// maximum, so earlier positions rank higher).
fn first_pos(fails: &[Failure], f: Failure) -> std::cmp::Reverse<usize> {
    std::cmp::Reverse(fails.iter().position(|g| *g == f).unwrap_or(usize::MAX))
}

/// A hint for the unreachable line from what the tiers met: the local network, a blocked
/// network (every attempt timed out), or refusals.
pub fn hint(tried: &[Tried]) -> &'static str {
    let all = |p: fn(Failure) -> bool| tried.iter().all(|t| p(t.failure));
    if all(Failure::is_network) {
        "this host has no network path to Telegram's addresses (the OS answers unreachable: \
         offline, or no route to them)"
    } else if all(|f| matches!(f, Failure::Timeout | Failure::HandshakeTimeout)) {
        "every attempt timed out: Telegram's addresses look blocked on this network; a fallback \
         tier helps (--cf-worker-domain, --cf-domain, --mtproto-proxy)"
    } else {
        "`tg-ws-proxy check` probes each route and says why it failed"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The caller's hold (its probe timeout), ms.
    const HOLD: u64 = 5_000;

    /// A route put off for good (its probe paced away, a spent budget) holds the verdict back
    /// only `hold_ms` after the first failure: the next failure after that says it.
    #[test]
    fn a_route_that_never_gets_its_probe_holds_the_verdict_back_only_briefly() {
        let mut v = Verdict::new();
        v.failed(0, Tier::Tcp, Failure::NetUnreachable, 100);
        assert_eq!(v.judge(true, HOLD, 100), None);
        v.failed(1, Tier::Ws, Failure::NetUnreachable, 4_000);
        assert_eq!(v.judge(true, HOLD, 4_000), None, "within the hold");
        v.failed(0, Tier::Tcp, Failure::NetUnreachable, 5_100);
        assert!(matches!(
            v.judge(true, HOLD, 5_100),
            Some(News::Unreachable { .. })
        ));
    }

    /// Issue 23 §3: off the network, the startup probes of 7 routes (ws DC2/DC4, tcp DC1-5) all
    /// fail at once. The verdict is said once, after the last of them, naming both tiers; more
    /// failures (every re-probe) say nothing; the first proof says it is back, once.
    #[test]
    fn unreachable_once_after_every_pending_route_failed_and_back_once() {
        let mut v = Verdict::new();
        let routes = [
            (0, Tier::Ws),
            (1, Tier::Ws),
            (2, Tier::Tcp),
            (3, Tier::Tcp),
            (4, Tier::Tcp),
        ];
        let mut said = Vec::new();
        for (i, (id, tier)) in routes.iter().enumerate() {
            v.failed(*id, *tier, Failure::NetUnreachable, 10 + i as u64);
            let pending = i + 1 < routes.len();
            said.extend(v.judge(pending, HOLD, 10 + i as u64));
            assert_eq!(v.state() == State::Unreachable, !pending);
        }
        assert_eq!(
            said,
            vec![News::Unreachable {
                tried: vec![
                    Tried {
                        tier: Tier::Ws,
                        routes: 2,
                        failure: Failure::NetUnreachable
                    },
                    Tried {
                        tier: Tier::Tcp,
                        routes: 3,
                        failure: Failure::NetUnreachable
                    },
                ]
            }]
        );
        assert_eq!(v.since(), 14);
        // An hour of re-probes: nothing more.
        for n in 0..360u64 {
            let (id, tier) = routes[(n % 5) as usize];
            v.failed(id, tier, Failure::NetUnreachable, 1_000 + n * 10_000);
            assert_eq!(v.judge(false, HOLD, 1_000 + n * 10_000), None);
        }
        // The network comes back: said once.
        let back = v.worked(3, Tier::Tcp, "tcp:DC2", 4_000_014);
        assert_eq!(
            back,
            Some(News::Back {
                label: "tcp:DC2".into(),
                down_ms: 4_000_000
            })
        );
        assert_eq!(v.worked(0, Tier::Ws, "ws:DC2", 4_000_020), None);
        assert_eq!(v.state(), State::Reachable);
    }

    /// One route failing while another's last result is a proof is no outage; the first proof
    /// at start is said once as `Reachable`.
    #[test]
    fn a_failure_beside_a_working_route_is_no_verdict() {
        let mut v = Verdict::new();
        v.failed(0, Tier::Ws, Failure::Timeout, 5);
        assert_eq!(v.judge(true, HOLD, 5), None, "others pending");
        assert_eq!(
            v.worked(1, Tier::Tcp, "tcp:DC2", 40),
            Some(News::Reachable {
                label: "tcp:DC2".into()
            })
        );
        v.failed(0, Tier::Ws, Failure::Timeout, 50);
        assert_eq!(v.judge(false, HOLD, 50), None);
        assert_eq!(v.state(), State::Reachable);
        // Every route that worked fails later: unreachable then.
        v.failed(1, Tier::Tcp, Failure::Reset, 60);
        assert!(matches!(
            v.judge(false, HOLD, 60),
            Some(News::Unreachable { .. })
        ));
    }

    /// A retired route's old proof does not keep the verdict reachable.
    #[test]
    fn a_forgotten_route_counts_no_more() {
        let mut v = Verdict::new();
        v.worked(0, Tier::Ws, "ws:DC2", 10);
        v.failed(1, Tier::Tcp, Failure::Timeout, 20);
        assert_eq!(v.judge(false, HOLD, 20), None);
        v.forget(0);
        assert!(!v.has_result(0));
        v.failed(1, Tier::Tcp, Failure::Timeout, 30);
        assert!(matches!(
            v.judge(false, HOLD, 30),
            Some(News::Unreachable { .. })
        ));
        v.forget(7);
    }

    /// Nothing tried is no verdict; the commonest failure of a tier is the one shown; the hint
    /// tells a dead local network from a blocked one.
    #[test]
    fn tried_shows_the_commonest_failure_and_the_hint_reads_it() {
        let mut v = Verdict::new();
        assert_eq!(v.judge(false, HOLD, 1), None, "nothing failed yet");
        v.failed(0, Tier::Tcp, Failure::Timeout, 1);
        v.failed(1, Tier::Tcp, Failure::Refused, 1);
        v.failed(2, Tier::Tcp, Failure::Refused, 1);
        v.failed(3, Tier::Ws, Failure::Timeout, 1);
        let tried = v.tried();
        assert_eq!(tried[0].tier, Tier::Ws);
        assert_eq!(tried[1].failure, Failure::Refused);
        assert_eq!(tried[1].to_string(), "tcp (3 routes: refused)");
        assert!(hint(&tried).contains("check"));
        let blocked = [Tried {
            tier: Tier::Ws,
            routes: 2,
            failure: Failure::Timeout,
        }];
        assert!(hint(&blocked).contains("blocked"));
        let offline = [Tried {
            tier: Tier::Tcp,
            routes: 5,
            failure: Failure::NetUnreachable,
        }];
        assert!(hint(&offline).contains("no network path"));
    }
}
