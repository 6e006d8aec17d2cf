//! The ladder's vocabulary: what a client's plan is ([`Plan`]), what sessions and the prober
//! report ([`Observation`], [`SessionEnd`]), what background work it hands out ([`Work`]) and
//! the counters it keeps. Data only; the rules are in `mod.rs` and `rules.rs`.

use crate::error::{Failure, Freeze};
use crate::net::dial::DialSpec;

use super::RouteId;

/// One dial option for a client: a route and one of its dial specs.
#[derive(Clone, Debug)]
pub struct Candidate {
    /// The route.
    pub route: RouteId,
    /// How to dial it.
    pub spec: DialSpec,
}

/// A client's plan.
#[derive(Debug)]
pub struct Plan {
    /// Candidates in the order to try.
    pub cands: Vec<Candidate>,
    /// The best route is Up and holds warm upstreams: try [`Ladder::take_pooled`] first.
    pub pooled: Option<RouteId>,
    /// False when nothing was usable and every route is listed as a last resort.
    pub usable: bool,
}

impl Plan {
    /// The next candidate to dial: the first one not `used` whose route is not in `busy` (a
    /// hedge must go to a different route, not the same address under its other host name).
    pub fn next(&self, used: &[bool], busy: &[Option<RouteId>]) -> Option<usize> {
        (0..self.cands.len()).find(|&i| {
            !used.get(i).copied().unwrap_or(true) && !busy.contains(&Some(self.cands[i].route))
        })
    }
}

/// Background work that is due. The ladder has already paced it and spent its budget.
#[derive(Clone, Debug)]
pub enum Work {
    /// Probe `route` over `spec` to `resPQ`, giving up at `deadline` (ms).
    Probe {
        /// The route.
        route: RouteId,
        /// How to dial it.
        spec: DialSpec,
        /// Give up at this time (ms).
        deadline: u64,
        /// Bytes the probe must pull down (pipelined `resPQ` replies) before it counts as a
        /// success: `--stall-probe-bytes` when the route's last failure was `stalled`, else 0
        /// (one `resPQ`).
        pull_bytes: u32,
    },
    /// Dial `route` over `spec` to the upgrade and report the upstream with
    /// [`Ladder::fill_ready`] (or [`Observation::FillFailed`]).
    Fill {
        /// The route.
        route: RouteId,
        /// How to dial it.
        spec: DialSpec,
        /// Give up at this time (ms).
        deadline: u64,
    },
    /// Pool upkeep is due: check the clocks for a suspend and call [`Ladder::sweep_pools`].
    Sweep,
}

/// How a session ended, as far as its route is concerned.
#[derive(Clone, Copy, Debug)]
pub struct SessionEnd {
    /// When the session started relaying (ms).
    pub connected_at: u64,
    /// Client → Telegram payload bytes.
    pub bytes_up: u64,
    /// Telegram → client payload bytes.
    pub bytes_down: u64,
    /// The upstream ended it (EOF, reset, WS close); false when the client or we did.
    pub by_upstream: bool,
    /// The upstream ended it within `--short-session` after our WS ping, before any further
    /// downstream byte (docs/design.md §5 keepalive: the route's front closes on pings).
    pub after_ping: bool,
    /// The upstream came from the route's warm pool (its relay init went out at handover).
    pub pooled: bool,
}

/// A fact the ladder learns from.
#[derive(Clone, Debug)]
pub enum Observation {
    /// A client's dial of `route` failed.
    AttemptFailed {
        /// The route.
        route: RouteId,
        /// Failure class.
        failure: Failure,
        /// `Retry-After`, seconds, if the response had one.
        retry_after: Option<u32>,
    },
    /// A client's dial was abandoned: another route won the race, or the client left. Counted
    /// as cancelled, never as a failure (a WS loser finishes as an adopted fill and teaches its
    /// outcome then).
    AttemptCancelled {
        /// The route.
        route: RouteId,
    },
    /// A session started relaying over `route` (a fresh dial or a pooled upstream).
    SessionStarted {
        /// The route.
        route: RouteId,
    },
    /// A session on `route` got its first downstream byte: the whole path works.
    FirstByte {
        /// The route.
        route: RouteId,
        /// When the upstream's dial began (for a pooled one, the fill's), ms.
        dial_started: u64,
        /// Connect RTT sample (none for a pooled upstream).
        rtt_ms: Option<u64>,
    },
    /// A session on `route` ended.
    SessionEnded {
        /// The route.
        route: RouteId,
        /// What its end looked like.
        end: SessionEnd,
    },
    /// A probe of `route` finished: `Ok(rtt)` with `resPQ`, or the failure.
    ProbeDone {
        /// The route.
        route: RouteId,
        /// `Ok(ms)` or `Err((failure, retry_after))`.
        result: Result<u64, (Failure, Option<u32>)>,
    },
    /// A pool fill (or an adopted hedge loser) of `route` failed.
    FillFailed {
        /// The route.
        route: RouteId,
        /// Failure class.
        failure: Failure,
        /// `Retry-After`, seconds.
        retry_after: Option<u32>,
        /// It was a client's adopted dial, not background work: a 429 on it is health's
        /// alone and does not block the background budget.
        client_dial: bool,
    },
    /// Work handed out could not start (no socket, DNS gone, job slots full).
    NotStarted {
        /// The route.
        route: RouteId,
        /// It was a probe (else a fill).
        probe: bool,
        /// Why, when the connect itself failed at once (network unreachable…): a probe that
        /// cannot start for a route's reason is a failed probe (health and backoff apply);
        /// `None` or `Failure::Local` only retry later.
        failure: Option<Failure>,
    },
    /// A session's pooled upstream of `route` sent nothing within `--pool-first-byte-timeout`
    /// of the client's first bytes: taken for dead (the session is replayed elsewhere or
    /// closed). Blames the entry: the route is doubted (a soft failure and a probe now) and its
    /// pool's entries as old or older are flushed, since they died with it.
    PooledSilent {
        /// The route.
        route: RouteId,
        /// When the session took the dead entry (ms). It was the newest then, so every entry
        /// ready by this time is as old or older.
        taken_at: u64,
    },
    /// A session on `route` froze while its client waited (`relay::stall`): the kernel saw
    /// nothing of ours acknowledged, or nothing came down for `--stall-timeout`, or the client
    /// gave up inside a reply. The session was ended (a frozen session is dead; rule 4 protects
    /// healthy ones). See `freeze.rs` for what it does to the route.
    SessionFrozen {
        /// The route.
        route: RouteId,
        /// How it froze.
        freeze: Freeze,
        /// Payload bytes down before it froze (the freeze's size: ~16 KB in the field).
        after_bytes: u64,
    },
    /// A session on `route` failed after it started relaying for a reason that is the route's
    /// (`Failure::BadReply`: what came down was not MTProto).
    SessionFailed {
        /// The route.
        route: RouteId,
        /// Failure class.
        failure: Failure,
    },
}

/// Counts of the ladder's own decisions since start.
#[derive(Clone, Copy, Debug, Default)]
pub struct Counters {
    /// Probes and fills put off because a Worker's request budget was spent (the stats line's
    /// deferred count).
    pub deferred: u64,
    /// Client attempts the ladder counted as cancelled rather than failed.
    pub cancelled: u64,
    /// Attempts, probes and fills that failed at the outbound proxy itself
    /// ([`crate::error::Failure::is_proxy`]: unreachable, credentials refused, protocol error);
    /// no route was cooled down for them (the stats line's `proxy-fail=N`).
    pub proxy_failures: u64,
}
