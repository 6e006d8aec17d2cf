//! Spreading sessions over several Workers (docs/design.md §4 "Several Workers"): which of a
//! DC's Worker routes a client's plan tries first.
//!
//! Cloudflare's request quota is per account and owners deploy Workers on several accounts, so
//! plain tier order (the first healthy Worker always wins) would spend one account's quota and
//! leave the others idle. Instead each plan picks one Worker by smooth weighted round robin
//! (deterministic: no randomness, the same sequence of plans gives the same picks), weighted by
//! each Worker's request budget left ([`Budget::available`](crate::route::budget::Budget)):
//! equal budgets alternate, a Worker with less left gets proportionally fewer sessions. A Worker
//! gets no new sessions while it is not healthy for that DC (cooling down, waiting for its
//! recovery probe, or Suspect), while its budget is spent or blocked by a 429 on a background
//! request (weight 0), and after any 429 from it (a client's or a background one) on any DC
//! until that route's cooldown ends ([`Spread::hold`]: Cloudflare's 429 is the account's, not
//! one DC's; a held Worker is planned after the Suspect routes, as a last resort), and while its
//! account is held (`route::quota`: a 429 from any Worker of the account, until 00:00 UTC or
//! `Retry-After`; [`Ladder::account_throttled`], said once). The picked Worker
//! is planned first within its tier (at the best rank among the Workers it was picked from);
//! the others follow, those with budget left first, so a hedge starts the next Worker. If every
//! healthy Worker's budget is spent they are spread with equal weights (sessions never wait for
//! the background budget; they are not counted against it either, see the module docs of
//! `route::budget` and docs/tiers.md "Several Workers").
//!
//! State: one round-robin credit and one hold per configured Worker (the index of
//! `cfg.worker_domains`, as the budgets), shared by all DCs, so the spread is per Worker
//! endpoint whatever DC a session asks for. Sans-IO; time is a parameter (ms). Owns no route.

use log::{info, warn};

use crate::logging::events::{emit, Event};
use crate::route::health::Use;
use crate::route::pool::Pooled;
use crate::route::quota::{redact_account, Hold};

use super::{Ladder, RouteId};
use crate::config::CfEndpoint;

/// Per-Worker spreading state (index = position in `cfg.worker_domains`).
#[derive(Clone, Debug, Default)]
pub(super) struct Spread {
    /// Smooth weighted round-robin credit: each pick adds every candidate's weight to its
    /// credit, picks the highest (the first on a tie) and takes the round's total from it.
    credit: Vec<i64>,
    /// No new sessions before this time (ms): a 429 from this Worker.
    held_until: Vec<u64>,
}

impl Spread {
    /// State for `n` Workers.
    pub(super) fn new(n: usize) -> Spread {
        Spread {
            credit: vec![0; n],
            held_until: vec![0; n],
        }
    }

    /// A reload from Workers `old` to `new`: holds are carried by endpoint, credits start
    /// again at 0 (the first plans after a reload alternate from the first Worker).
    pub(super) fn reconfigure(&mut self, old: &[CfEndpoint], new: &[CfEndpoint]) {
        let held = new
            .iter()
            .map(|ep| {
                old.iter()
                    .position(|o| o == ep)
                    .and_then(|i| self.held_until.get(i).copied())
                    .unwrap_or(0)
            })
            .collect();
        *self = Spread {
            credit: vec![0; new.len()],
            held_until: held,
        };
    }

    /// Worker `w` answered 429: no new sessions before `until` (ms), the end of the route's
    /// cooldown (which honours `Retry-After`). A later hold is never shortened.
    pub(super) fn hold(&mut self, w: usize, until: u64) {
        if let Some(h) = self.held_until.get_mut(w) {
            *h = (*h).max(until);
        }
    }

    /// Whether Worker `w` is held at `now`.
    pub(super) fn held(&self, w: usize, now: u64) -> bool {
        self.held_until.get(w).is_some_and(|&h| now < h)
    }

    /// One smooth weighted round-robin pick among `cands` (Worker index, weight > 0):
    /// returns the position in `cands` of the Worker picked.
    pub(super) fn pick(&mut self, cands: &[(usize, u64)]) -> usize {
        let total: i64 = cands.iter().map(|&(_, wt)| wt as i64).sum();
        let mut best = 0;
        for (k, &(w, wt)) in cands.iter().enumerate() {
            let c = &mut self.credit[w];
            *c = c.saturating_add(wt as i64);
            if *c > self.credit[cands[best].0] {
                best = k;
            }
        }
        let c = &mut self.credit[cands[best].0];
        *c = c.saturating_sub(total);
        best
    }
}

/// A Worker route of a plan in the order the spread tries it.
pub(super) struct Spot {
    /// The route.
    pub route: RouteId,
    /// Its position in the plan's tier order (one of the positions the DC's Worker routes hold).
    pub pos: usize,
    /// The rank to plan it at instead of its health's (0 Up, 1 Unknown, 2 Suspect), if any: the
    /// picked Worker gets the best rank of the Workers it was picked from; a held one at least 2.
    pub rank: Option<u8>,
}

/// One Worker route of a plan, as the spread sees it.
struct W {
    /// Its position in the plan.
    pos: usize,
    route: RouteId,
    /// The Worker's index (`--cf-worker-domain` order).
    w: usize,
    /// Health rank if it may take new sessions (healthy and not held).
    eligible: Option<u8>,
    held: bool,
    /// Requests left in the Worker's budget now.
    left: u64,
}

impl<U: Pooled> Ladder<U> {
    /// The spread of `ids`' Worker routes for one plan at `now` (see the module docs); empty
    /// when the DC has fewer than two Worker routes or none of them may take a session now
    /// (health's order then stands), unless one is held: a held Worker is always planned after
    /// the Suspect routes. Advances the round robin.
    pub(super) fn spread_workers(&mut self, ids: &[RouteId], now: u64) -> Vec<Spot> {
        let ws = self.worker_routes(ids, now);
        let any_held = ws.iter().any(|x| x.held);
        if ws.len() < 2 && !any_held {
            return Vec::new();
        }
        let funded = ws.iter().any(|x| x.eligible.is_some() && x.left > 0);
        // (index in ws, weight): the Workers with budget left, else every eligible one alike.
        let pool: Vec<(usize, u64)> = ws
            .iter()
            .enumerate()
            .filter(|(_, x)| x.eligible.is_some() && (!funded || x.left > 0))
            .map(|(i, x)| (i, if funded { x.left } else { 1 }))
            .collect();
        if pool.is_empty() {
            if !any_held {
                return Vec::new();
            }
            // Nobody may take a session: health's order, but a held Worker (its account's
            // quota is spent) still goes after the Suspect routes.
            return ws
                .iter()
                .map(|x| Spot {
                    route: x.route,
                    pos: x.pos,
                    rank: x.held.then_some(2),
                })
                .collect();
        }
        let cands: Vec<(usize, u64)> = pool.iter().map(|&(i, wt)| (ws[i].w, wt)).collect();
        let picked = pool[self.spread.pick(&cands)].0;
        let best = pool
            .iter()
            .filter_map(|&(i, _)| ws[i].eligible)
            .min()
            .unwrap_or(1);
        // The picked one, then the other Workers that may take sessions (budget left first),
        // then the rest, each group in configured order.
        let class = |x: &W| match (x.eligible, x.left > 0) {
            (Some(_), true) => 0,
            (Some(_), false) => 1,
            (None, _) => 2,
        };
        let mut order: Vec<usize> = (0..ws.len()).filter(|&i| i != picked).collect();
        order.sort_by_key(|&i| class(&ws[i]));
        order.insert(0, picked);
        order
            .into_iter()
            .enumerate()
            .map(|(k, i)| {
                let x = &ws[i];
                let rank = if k == 0 {
                    Some(best)
                } else if x.held {
                    Some(2)
                } else {
                    None
                };
                Spot {
                    route: x.route,
                    pos: ws[k].pos,
                    rank,
                }
            })
            .collect()
    }

    /// The Worker routes among `ids` with their rank, hold and budget at `now`.
    fn worker_routes(&self, ids: &[RouteId], now: u64) -> Vec<W> {
        let mut ws: Vec<W> = Vec::new();
        for (pos, &route) in ids.iter().enumerate() {
            let Some(w) = self.table.worker_index(route, &self.cfg) else {
                continue;
            };
            let held = self.spread.held(w, now) || self.accounts.held(w, now);
            let rank = match self.table.routes[route].health.usable(now) {
                Use::Preferred => Some(0),
                Use::Untested => Some(1),
                Use::Degraded | Use::Cooling { .. } | Use::Expired => None,
            };
            ws.push(W {
                pos,
                route,
                w,
                eligible: rank.filter(|_| !held),
                held,
                left: self
                    .budgets
                    .get(w)
                    .map_or(0, |b| u64::from(b.available(now))),
            });
        }
        ws
    }

    /// `route` answered 429 at `now`: if it is a Worker's, its whole account is held from new
    /// sessions until the next 00:00 UTC or the answer's `Retry-After` (`route::quota`), said
    /// once when the hold begins.
    pub(super) fn account_throttled(&mut self, route: RouteId, retry_after: Option<u32>, now: u64) {
        let Some(w) = self.table.worker_index(route, &self.cfg) else {
            return;
        };
        let Some(b) = self.accounts.on_429(w, now, self.wall_ms, retry_after) else {
            return;
        };
        let why = match b.hold {
            Hold::DailyQuota => "the daily quota (until 00:00 UTC)".to_string(),
            Hold::RetryAfter(s) => format!("Retry-After {s}s"),
        };
        let name = redact_account(&b.group);
        warn!(
            "worker account {name}: 429, {} worker(s) held from new sessions for {:.0} min: {why}",
            b.members.len(),
            b.for_ms as f64 / 60_000.0
        );
        emit(|| {
            Event::new("account")
                .str("account", &name)
                .str("state", "held")
                .str("why", &why)
                .num("for_ms", b.for_ms)
        });
    }

    /// A probe of `route` got `resPQ` at `now`: a hold on its Worker's account ends early (the
    /// 429 was a short limit, or the plan changed). Said once. Only probes count: a session
    /// whose plan predates the hold may still reach a sibling once, and that proves nothing
    /// about the quota's reset.
    pub(super) fn account_proven(&mut self, route: RouteId, now: u64) {
        let Some(w) = self.table.worker_index(route, &self.cfg) else {
            return;
        };
        if let Some(group) = self.accounts.on_success(w, now) {
            let name = redact_account(&group);
            info!("worker account {name}: serving again (a Worker answered)");
            emit(|| {
                Event::new("account")
                    .str("account", &name)
                    .str("state", "serving")
            });
        }
    }

    /// A 429 put `route` Down until `until`: if it is a Worker's, every route of that Worker
    /// is held from new sessions until then ([`Spread::hold`]).
    pub(super) fn hold_on_429(&mut self, route: RouteId, until: u64) {
        if let Some(w) = self.table.worker_index(route, &self.cfg) {
            self.spread.hold(w, until);
        }
    }
}
