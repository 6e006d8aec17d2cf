//! The ladder's part in `--cf-ip` edges (`route::edges`): the pool is built from the
//! configuration ([`Ladder::new`], [`Ladder::reconfigure`]), and a sampled edge none of whose
//! routes works is replaced in the background ([`Ladder::replace_edges`], run by
//! [`Ladder::next_work`] before any probe is handed out, never on a client's time): its routes
//! are retired through the table's retire/create machinery, the new edge's routes created and
//! probed for the DCs the old edge had been tried on. Also what `ctl status` shows of each edge
//! ([`Ladder::edges_status`]).

use std::net::IpAddr;

use log::{info, warn};

use super::{Ladder, RouteId, Sched};
use crate::config::Config;
use crate::route::edges::{edge_state, EdgeView, Edges, RouteView};
use crate::route::health::State;
use crate::route::pool::Pooled;

/// One edge as `ctl status` and `check` show it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EdgeStatus {
    /// The edge address.
    pub ip: IpAddr,
    /// `given` or `sampled from RANGE`.
    pub source: String,
    /// `ok`, `frozen`, `cooling`, `untested`.
    pub state: &'static str,
    /// The last failure of a failed route through it.
    pub why: Option<String>,
    /// The live routes through it.
    pub routes: Vec<RouteId>,
}

impl<U: Pooled> Ladder<U> {
    /// Builds the edge pool for `cfg` and re-derives the routes for it (start, or a reload
    /// that changed `--cf-ip` / `--cf-ip-count`). Returns the route ids retired.
    pub(super) fn build_edges(&mut self, cfg: &Config) -> Vec<RouteId> {
        let (edges, dropped) = Edges::new(&cfg.cf_ips, cfg.cf_ip_count, &mut self.rng);
        if dropped > 0 {
            warn!(
                "--cf-ip: {dropped} address(es) past the cap of {} edges ignored",
                crate::route::edges::MAX_EDGES
            );
        }
        if !edges.is_empty() {
            let list: Vec<String> = edges.list().iter().map(|e| e.ip.to_string()).collect();
            info!("cloudflare edges in use: {}", list.join(", "));
        }
        let retired = self.table.set_edges(edges, cfg, cfg.listen);
        self.grow_slots();
        retired
    }

    /// The live routes through `ip` and what they make of it at `now`.
    fn edge_view(&self, ip: IpAddr, now: u64) -> (Vec<RouteId>, EdgeView) {
        let ids: Vec<RouteId> = (0..self.table.routes.len())
            .filter(|&i| !self.table.routes[i].retired && self.table.routes[i].edge() == Some(ip))
            .collect();
        let views: Vec<RouteView> = ids
            .iter()
            .map(|&i| {
                let h = &self.table.routes[i].health;
                RouteView {
                    state: h.state(),
                    last_failure: h.last_failure().map(|(f, _)| f),
                    probing: self.slots[i].sched == Sched::Running,
                }
            })
            .collect();
        (ids, edge_state(&views, now))
    }

    /// Replaces each sampled edge the rule says is spent (`Edges::should_replace`: none of
    /// its routes works, a failed route's cooldown is over, no probe of it is running). The old
    /// edge's routes are retired (their pools closed), the new edge's routes are created, and
    /// those of the DCs the old edge had been tried on are probed at once. Returns how many
    /// edges were replaced.
    pub(super) fn replace_edges(&mut self, now: u64) -> usize {
        let mut n = 0;
        for ip in self.table.edges().ips() {
            let (ids, view) = self.edge_view(ip, now);
            if !self.table.edges().should_replace(ip, &view) {
                continue;
            }
            let tried: Vec<_> = ids
                .iter()
                .filter(|&&i| self.table.routes[i].health.state() != State::Unknown)
                .map(|&i| self.table.routes[i].dc)
                .collect();
            let before = self.table.routes.len();
            let cfg = self.cfg.clone();
            let Some((new, retired)) = self.table.replace_edge(ip, &mut self.rng, &cfg, cfg.listen)
            else {
                continue;
            };
            self.grow_slots();
            self.retire_slots(&retired);
            for id in before..self.table.routes.len() {
                if tried.contains(&self.table.routes[id].dc) {
                    self.due(id, now);
                }
            }
            let why = view.why.map_or("failed".to_string(), |f| f.to_string());
            info!(
                "cloudflare edge {ip} {} ({why}): replaced by {new}",
                view.state.name()
            );
            crate::logging::events::emit(|| {
                crate::logging::events::Event::new("edge_replaced")
                    .str("old", &ip.to_string())
                    .str("new", &new.to_string())
                    .str("why", &why)
            });
            n += 1;
        }
        n
    }

    /// Every edge in use and what its routes say of it at `now` (`ctl status`).
    pub fn edges_status(&self, now: u64) -> Vec<EdgeStatus> {
        self.table
            .edges()
            .list()
            .iter()
            .map(|e| {
                let (routes, view) = self.edge_view(e.ip, now);
                EdgeStatus {
                    ip: e.ip,
                    source: e.source.describe(),
                    state: view.state.name(),
                    why: view.why.map(|f| f.to_string()),
                    routes,
                }
            })
            .collect()
    }

    /// Sampled edges replaced since start.
    pub fn edges_replaced(&self) -> u64 {
        self.table.edges().replaced
    }
}
