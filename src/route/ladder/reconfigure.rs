//! What a reload and a shutdown do to the ladder: [`Ladder::reconfigure`] (new configuration
//! for new plans, live sessions untouched) and [`Ladder::stop`] (drain: no more background
//! work). Also the rule for observations about retired routes (ignored, job accounting
//! kept) and slot creation for new routes. The route-level part of a reload (which routes are
//! kept, retired, created) is `route::table`'s [`Table::reconfigure`](crate::route::table::Table::reconfigure).

use log::info;

use super::{ms, sweep_every, Ladder, Observation, Refill, RouteId, Sched, Slot};
use crate::config::{Config, Tier};
use crate::route::budget::Budget;
use crate::route::pace::PacePolicy;
use crate::route::pool::{Pool, Pooled};

impl<U: Pooled> Ladder<U> {
    /// The slots of routes just retired (by a reload or an edge replacement): pools closed,
    /// no probe or refill scheduled again (a running probe finishes and is ignored).
    pub(super) fn retire_slots(&mut self, retired: &[RouteId]) {
        for &id in retired {
            let slot = &mut self.slots[id];
            slot.pool.flush();
            if slot.sched != Sched::Running {
                slot.sched = Sched::Idle;
            }
            slot.fill_retry_at = 0;
        }
    }

    /// Applies a reloaded `cfg` at `now` (ms) to new plans and background work only:
    /// * a route whose (tier, DC, target) is unchanged keeps its health, RTT, probe schedule
    ///   and pool; one no longer configured is retired (never planned, probed or filled again,
    ///   its pool closed; its id stays valid and later observations about it are ignored);
    ///   new routes are created as on first use;
    /// * Worker request budgets are carried over by Worker endpoint (host and port), with the
    ///   new `--worker-budget` rate; a new Worker starts with a full burst; an account that
    ///   keeps its name keeps its hold and its count for the day (`route::quota`);
    ///   * the outbound proxy's outage is forgotten when another proxy (or none) is configured,
    ///     and addresses no route dials any more are forgotten;
    /// * pacing, health policy, timeouts, pool size and probe interval come from `cfg` from
    ///   now on (a running probe keeps its deadline).
    ///
    /// `cfg.listen` must be the address actually listened on (as for [`Ladder::new`]).
    /// Returns the number of routes retired now.
    pub fn reconfigure(&mut self, cfg: &Config, now: u64) -> usize {
        let burst = worker_burst(cfg);
        let mut old: Vec<Option<Budget>> = std::mem::take(&mut self.budgets)
            .into_iter()
            .map(Some)
            .collect();
        self.budgets = cfg
            .worker_domains
            .iter()
            .map(|ep| {
                let carried = self
                    .cfg
                    .worker_domains
                    .iter()
                    .position(|old_ep| old_ep == ep)
                    .and_then(|i| old.get_mut(i).and_then(Option::take));
                match carried {
                    Some(mut b) => {
                        b.set_rate(cfg.worker_budget, burst, now);
                        b
                    }
                    None => Budget::new(cfg.worker_budget, burst, now),
                }
            })
            .collect();
        self.spread
            .reconfigure(&self.cfg.worker_domains, &cfg.worker_domains);
        self.accounts.reconfigure(cfg);
        self.pacer.set_policy(PacePolicy {
            pace_ms: ms(cfg.handshake_pace),
            burst: cfg.handshake_burst,
            max_wait_ms: ms(cfg.pace_max_wait),
        });
        if cfg.outbound_proxy != self.cfg.outbound_proxy {
            self.outproxy.reset(); // another proxy (or none): its outage is not this one's
        }
        self.outproxy.set_backoff(
            ms(cfg.outbound_proxy_backoff),
            ms(cfg.outbound_proxy_backoff_max),
        );
        self.reach.set_grace(cfg.health.base_ms);
        let new_edges = cfg.cf_ips != self.cfg.cf_ips || cfg.cf_ip_count != self.cfg.cf_ip_count;
        self.cfg = cfg.clone();
        let mut retired = self.table.reconfigure(cfg, cfg.listen);
        if new_edges {
            // Another edge list: a fresh pool (the routes of edges no longer in it retired).
            for id in self.build_edges(cfg) {
                if !retired.contains(&id) {
                    retired.push(id);
                }
            }
        }
        // A route the second pass brought back (its edge kept) is live again.
        retired.retain(|&id| self.table.routes[id].retired);
        let routes = &self.table.routes;
        self.reach.retain(|d| {
            routes
                .iter()
                .any(|r| !r.retired && super::deps::dest_of(&r.target) == *d)
        });
        self.grow_slots();
        self.retire_slots(&retired);
        if cfg.pool_size == 0 {
            self.sweep_at = None;
            for slot in &mut self.slots {
                slot.pool.flush();
            }
        } else if self.sweep_at.is_none() {
            self.sweep_at = Some(now + sweep_every(cfg));
        }
        if !retired.is_empty() {
            info!("reload: {} route(s) retired", retired.len());
        }
        retired.len()
    }

    /// Shutdown: closes every pooled upstream and hands out no more background work (probes,
    /// fills, sweeps); [`Ladder::next_deadline`] is `None` from now on. Jobs in flight may
    /// still report. Returns the number of pooled upstreams closed.
    pub fn stop(&mut self) -> usize {
        self.stopped = true;
        self.sweep_at = None;
        self.slots.iter_mut().map(|s| s.pool.flush()).sum()
    }

    /// Whether the route `id` is retired (see [`Ladder::reconfigure`]).
    pub fn retired(&self, id: RouteId) -> bool {
        self.table.routes[id].retired
    }

    /// The route `obs` is about, if that route is retired.
    pub(super) fn retired_route(&self, obs: &Observation) -> Option<RouteId> {
        let route = match *obs {
            Observation::AttemptFailed { route, .. }
            | Observation::AttemptCancelled { route }
            | Observation::SessionStarted { route }
            | Observation::FirstByte { route, .. }
            | Observation::SessionEnded { route, .. }
            | Observation::ProbeDone { route, .. }
            | Observation::FillFailed { route, .. }
            | Observation::NotStarted { route, .. }
            | Observation::PooledSilent { route, .. }
            | Observation::SessionFrozen { route, .. }
            | Observation::SessionFailed { route, .. } => route,
        };
        self.table.routes[route].retired.then_some(route)
    }

    /// An observation about a retired route: health, schedule and pool demand are left alone;
    /// only a background job's end is accounted for (its job slot and fill count).
    pub(super) fn observe_retired(&mut self, route: RouteId, obs: Observation) {
        match obs {
            Observation::ProbeDone { .. } => {
                self.job_ended();
                self.slots[route].sched = Sched::Idle;
            }
            Observation::FillFailed { .. } => {
                self.job_ended();
                self.slots[route].pool.fill_ended();
            }
            Observation::NotStarted { probe, .. } => {
                self.job_ended();
                if probe {
                    self.slots[route].sched = Sched::Idle;
                } else {
                    self.slots[route].pool.fill_ended();
                }
            }
            _ => {}
        }
    }

    /// Creates the slots of routes the table added. A route through a `--cf-ip` edge owes a
    /// pulling probe from the start (`stall_probe`): edges freeze selectively after ~16 KiB
    /// (issue 22 part 2), so its first background proof must pull past that size, and a frozen
    /// edge is found by a probe (startup probes, a replacement's probe) before any client.
    pub(super) fn grow_slots(&mut self) {
        while self.slots.len() < self.table.routes.len() {
            let route = &self.table.routes[self.slots.len()];
            let (tier, through_edge) = (route.tier, route.edge().is_some());
            self.slots.push(Slot {
                sched: Sched::Idle,
                pool: Pool::default(),
                refill: if tier == Tier::Worker {
                    Refill::OnSessionStart(0)
                } else {
                    Refill::Continuous
                },
                fill_retry_at: 0,
                dialled: false,
                doubt_probed_at: 0,
                short_ends: 0,
                short_since: 0,
                pings_off_until: 0,
                stall_probe: through_edge,
                freezes: Default::default(),
                probe_started: 0,
                probe_pulls: false,
            });
        }
    }
}

/// The Worker budget's burst for `cfg`: 1/50 of the daily budget, 1..=100.
pub(super) fn worker_burst(cfg: &Config) -> u32 {
    (cfg.worker_budget / 50).clamp(1, 100)
}
