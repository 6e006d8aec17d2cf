//! The planning rule of the `front` tier (domain fronting, docs/design.md §4 "Domain fronting",
//! docs/protocol.md §4.6): a `front` route of a DC is offered to clients only while the direct
//! `ws` route(s) of that DC are out (Down, cooling or waiting for their recovery probe) and the
//! failure that put them there happened after TCP connected — at TLS or at the upgrade. A
//! refused, unreachable or black-holed address (TCP never came up) says the front's IP is
//! blocked; a different SNI toward the same IP cannot help there, so fronting is not planned.
//!
//! Owns only that predicate ([`blocked_after_connect`], [`Ladder::front_allowed`]). Must not
//! touch: health, schedules, pools — a `front` route is probed (startup probe, recovery probes
//! when Down, liveness probes once a client dialled it), cooled down, pooled and hedged like
//! any route by the rules in `rules.rs` and `mod.rs`; this file decides only whether `plan`
//! lists it. Reached from [`Ladder::plan`].

use super::{Ladder, RouteId};
use crate::config::Tier;
use crate::error::Failure;
use crate::route::health::{is_redirect_status, Use};
use crate::route::pool::Pooled;

/// True for the failures of a direct `ws` route that fronting may get around: the TLS
/// handshake failed or was cut (`tls-error`, `reset`, `closed-early`), stalled
/// (`handshake-timeout`), or the upgrade got a non-101 answer other than a redirect (a
/// redirect is a routing fact about the `Host`, which fronting keeps). Not: `timeout`
/// (TCP connect), `refused`, `host-unreachable`, network-class failures, nor the faults of a
/// session after its upgrade (closed after reply, stalled, a silent pooled upstream).
pub fn blocked_after_connect(f: Failure) -> bool {
    match f {
        Failure::Tls | Failure::Reset | Failure::ClosedEarly | Failure::HandshakeTimeout => true,
        Failure::Http(code) => !is_redirect_status(code),
        _ => false,
    }
}

impl<U: Pooled> Ladder<U> {
    /// Whether `route` may be planned for a client at `now`, given the route ids of its DC
    /// (`dc_routes`, tier order). Every non-`front` route may. A `front` route may when the
    /// operator pinned it or its tier (`ctl pin`), when its DC has no `ws` route (no `ws` in
    /// `--tier-order`: fronting is then the user's chosen way in), or when every `ws` route of
    /// its DC is out ([`Use::Cooling`] / [`Use::Expired`]) with a last failure that
    /// [`blocked_after_connect`] accepts.
    pub(super) fn front_allowed(&self, route: RouteId, dc_routes: &[RouteId], now: u64) -> bool {
        if self.table.routes[route].tier != Tier::Front || self.pin_rank(route) == 0 {
            return true;
        }
        let mut ws = dc_routes
            .iter()
            .map(|&id| &self.table.routes[id])
            .filter(|r| r.tier == Tier::Ws && !r.retired)
            .peekable();
        if ws.peek().is_none() {
            return true;
        }
        ws.all(|r| {
            matches!(r.health.usable(now), Use::Cooling { .. } | Use::Expired)
                && r.health
                    .last_failure()
                    .is_some_and(|(f, _)| blocked_after_connect(f))
        })
    }
}
