//! The ladder's dependencies: failures that are not a route's, and the lines that say them
//! (docs/design.md §4 "A dead dependency is not a storm"). Two of them, each a sans-IO core
//! with its own state: the network path to each address a route dials (`route::reach`: one
//! address without a path is that address's fact, said once; this host's network is down
//! only when every address tried fails and none works) and the outbound proxy
//! (`route::outproxy`: down since a failure of its own, re-checked with a jittered backoff,
//! said once when it goes and once when it is back). No route is cooled down for either.
//!
//! Reached from `rules.rs` ([`Ladder::fail`] hands a failure here first; [`Ladder::succeed`]
//! reports the route's address as working), from `rules.rs`'s `background_spec` (background
//! work through a down proxy waits), and from the shells: a client's dial asks
//! [`Ladder::proxy_may_dial`], and every dial through the proxy that got past it reports
//! [`Ladder::proxy_worked`]. The outbound setting itself is its owner's (the reactor's
//! `Shared`), handed here by [`Ladder::set_outbound`] at start, on reload and when the
//! proxy's name resolves.

use std::net::SocketAddr;

use log::{debug, info, warn};

use super::{ms, Ladder, RouteId, Sched};
use crate::error::Failure;
use crate::net::dial::DialSpec;
use crate::net::outbound::Active;
use crate::route::outproxy::Down;
use crate::route::pool::Pooled;
use crate::route::reach::{Dest, News};
use crate::route::table::Target;
use crate::route::verdict::{self, State as VerdictState, Tried};

impl<U: Pooled> Ladder<U> {
    /// A failure of `route` that is a dependency's: the path to its address (network-class)
    /// or the outbound proxy itself. Kept by that dependency (said when it changes) and true:
    /// the caller cools no route for it. False for a failure of the route.
    pub(super) fn dependency_failed(&mut self, route: RouteId, f: Failure, now: u64) -> bool {
        if f.is_network() {
            let dest = dest_of(&self.table.routes[route].target);
            let label = self.dest_label(route, &dest);
            let known = self.known_dests();
            let mut news = Vec::new();
            self.reach.failed(dest, &label, f, (known, now), &mut news);
            self.say(route, news);
            return true;
        }
        if f.is_proxy() {
            let label = self.table.routes[route].label();
            self.proxy_failed(f, &format!("route {label}"), now);
            return true;
        }
        false
    }

    /// `route` worked at `now`: its address has a path (and, if the network was down, it is
    /// back).
    pub(super) fn dependency_worked(&mut self, route: RouteId, now: u64) {
        let dest = dest_of(&self.table.routes[route].target);
        let label = self.dest_label(route, &dest);
        let mut news = Vec::new();
        self.reach.worked(&dest, &label, now, &mut news);
        self.say(route, news);
    }

    /// `route` failed with `f` at `now` (any class): the verdict whether Telegram is reachable
    /// at all hears it, and says *unreachable* once no route works and none is pending.
    pub(super) fn verdict_failed(&mut self, route: RouteId, f: Failure, now: u64) {
        let tier = self.table.routes[route].tier;
        self.verdict.failed(route, tier, f, now);
        if self.verdict.state() == VerdictState::Unreachable {
            return;
        }
        // Pending: a live route scheduled or running with no result yet (at start, the
        // startup probes not done yet).
        let pending = (self.table.routes.iter().enumerate()).any(|(id, r)| {
            !r.retired && self.slots[id].sched != Sched::Idle && !self.verdict.has_result(id)
        });
        let hold = ms(self.cfg.probe_timeout);
        if let Some(n) = self.verdict.judge(pending, hold, now) {
            self.say_verdict(n);
        }
    }

    /// `route` worked at `now`: the verdict is *reachable* (said on a change).
    pub(super) fn verdict_worked(&mut self, route: RouteId, now: u64) {
        let r = &self.table.routes[route];
        if let Some(n) = self.verdict.worked(route, r.tier, &r.label(), now) {
            self.say_verdict(n);
        }
    }

    /// The line and the `telegram` event of a verdict change.
    fn say_verdict(&mut self, n: verdict::News) {
        let event = || crate::logging::events::Event::new("telegram");
        match n {
            verdict::News::Reachable { label } => {
                info!("Telegram reachable: route {label} works");
                crate::logging::events::emit(|| {
                    event().str("to", "reachable").str("route", &label)
                });
            }
            verdict::News::Back { label, down_ms } => {
                info!(
                    "Telegram reachable again after {:.1}s: route {label} works",
                    down_ms as f64 / 1000.0
                );
                crate::logging::events::emit(|| {
                    event()
                        .str("to", "reachable")
                        .str("route", &label)
                        .num("down_ms", down_ms)
                });
            }
            verdict::News::Unreachable { tried } => {
                let list: Vec<String> = tried.iter().map(Tried::to_string).collect();
                warn!(
                    "Telegram unreachable: every route tried failed: {}; {}; still listening: \
                     clients get no session until a route works, re-checked in the background; \
                     said again when one works",
                    list.join(", "),
                    verdict::hint(&tried)
                );
                crate::logging::events::emit(|| {
                    event()
                        .str("to", "unreachable")
                        .str("tiers", &list.join(", "))
                });
            }
        }
    }

    /// The verdict whether Telegram is reachable (`route::verdict`), for `ctl status`: its
    /// state, ms since it last changed, and (unless *reachable*) the tiers tried so far.
    pub fn telegram(&self, now: u64) -> (VerdictState, u64, Vec<Tried>) {
        let state = self.verdict.state();
        let tried = if state == VerdictState::Reachable {
            Vec::new()
        } else {
            self.verdict.tried()
        };
        (state, now.saturating_sub(self.verdict.since()), tried)
    }

    /// Writes the lines for `news` (a fact about `route`'s address) and mirrors the
    /// network-down flag.
    fn say(&mut self, route: RouteId, news: Vec<News>) {
        self.network_down = self.reach.network_down();
        let label = self.table.routes[route].label();
        let on = || label.clone();
        for n in news {
            crate::logging::events::emit(|| reach_event(&n));
            match n {
                // The unreachable verdict said it already, with the tiers tried.
                News::NetworkDown { label, failure }
                    if self.verdict.state() == VerdictState::Unreachable =>
                {
                    self.network_folded = true;
                    debug!(
                        "network unreachable ({failure}, first seen on route {}, address \
                         {label}): said by the Telegram unreachable line",
                        on()
                    )
                }
                News::NetworkBack { down_ms, label } if self.network_folded => {
                    self.network_folded = false;
                    debug!(
                        "network reachable again after {:.1}s (route {} works, address {label})",
                        down_ms as f64 / 1000.0,
                        on()
                    )
                }
                News::NetworkDown { label, failure } => warn!(
                    "network unreachable ({failure}, first seen on route {}, address {label}): \
                     every address tried is unreachable and none works; routes are not cooled \
                     down for it; said again when a route works",
                    on()
                ),
                News::NetworkBack { down_ms, label } => info!(
                    "network reachable again after {:.1}s (route {} works, address {label})",
                    down_ms as f64 / 1000.0,
                    on()
                ),
                News::AddressDown { label, failure } => warn!(
                    "address {label} unreachable ({failure}) while other addresses work: its \
                     routes are not cooled down, clients try them last; said again only on a \
                     change"
                ),
                News::AddressChanged { label, failure } => {
                    warn!("address {label} still unreachable, now {failure}")
                }
                News::AddressBack { label, down_ms } => info!(
                    "address {label} reachable again after {:.1}s (route {} works)",
                    down_ms as f64 / 1000.0,
                    on()
                ),
            }
        }
    }

    /// How lines name `route`'s destination: an address as it is; a host name as the route's
    /// target label (Worker and private CF names redacted).
    fn dest_label(&self, route: RouteId, dest: &Dest) -> String {
        match dest {
            Dest::Addr(_) => dest.to_string(),
            Dest::Name(_) => self.table.routes[route].target_label(),
        }
    }

    /// Distinct destinations of the routes in use, counted up to 2 (all `route::reach` needs
    /// to know: one destination, or more): one pass, no allocation past the first.
    fn known_dests(&self) -> usize {
        let mut live = self.table.routes.iter().filter(|r| !r.retired);
        let Some(first) = live.next().map(|r| dest_of(&r.target)) else {
            return 0;
        };
        if live.any(|r| !same_dest(&r.target, &first)) {
            2
        } else {
            1
        }
    }

    /// True when `route`'s address is unreachable as its own fact (others work): planned last.
    /// Nothing to look up (or allocate) while every address works.
    pub(super) fn unreachable_alone(&self, route: RouteId) -> bool {
        self.reach.any_unreachable()
            && self
                .reach
                .unreachable_alone(&dest_of(&self.table.routes[route].target))
    }

    /// A dial through the outbound proxy failed at the proxy itself (`f`,
    /// [`Failure::is_proxy`]) at `now`; `on` names what dialled ("route X", "the shared list
    /// fetch"). Counted; said once when it puts the proxy down.
    pub fn proxy_failed(&mut self, f: Failure, on: &str, now: u64) {
        self.counters.proxy_failures += 1;
        if self.outproxy.failed(f, now, &mut self.rng) {
            let (base, max) = (
                ms(self.cfg.outbound_proxy_backoff),
                ms(self.cfg.outbound_proxy_backoff_max),
            );
            warn!(
                "outbound proxy {} down ({f}, first seen on {on}): routes are not cooled down \
                 for it; background work waits for it and one dial re-checks it every \
                 {base}ms doubling to {max}ms; said again when it is back",
                proxy_name(&self.outbound)
            );
            crate::logging::events::emit(|| {
                crate::logging::events::Event::new("outbound")
                    .str("to", "down")
                    .str("failure", &f.to_string())
                    .str("on", on)
            });
        }
    }

    /// A dial through the outbound proxy begun at `started` got past it (its handshake done,
    /// whatever the destination did next), reported at `now`: it works; if it was down, that
    /// is said once. A dial begun before the outage proves nothing about it (`ProxyDep::worked`).
    pub fn proxy_worked(&mut self, now: u64, started: u64) {
        if let Some(back) = self.outproxy.worked(now, started) {
            // Fills it held go out now, not at the re-check they were waiting for.
            for slot in &mut self.slots {
                slot.fill_retry_at = 0;
            }
            info!(
                "outbound proxy {} back after {:.1}s ({} re-check(s), {} failed dial(s), {} \
                 dial(s) held while it was down)",
                proxy_name(&self.outbound),
                back.down_ms as f64 / 1000.0,
                back.tries,
                back.failures,
                back.held
            );
            crate::logging::events::emit(|| {
                crate::logging::events::Event::new("outbound")
                    .str("to", "up")
                    .num("down_ms", back.down_ms)
            });
        }
    }

    /// Whether a dial through the outbound proxy may start at `now`: always while it works;
    /// while it is down, one re-check per backoff step (this dial is it). `Err(at)`: not
    /// before `at` (ms) — a client's candidate is skipped, background work waits.
    pub fn proxy_may_dial(&mut self, now: u64) -> Result<(), u64> {
        self.outproxy.may_dial(now, &mut self.rng)
    }

    /// The outbound proxy's outage, while it is down (for `ctl status`).
    pub fn proxy_down(&self) -> Option<&Down> {
        self.outproxy.down()
    }

    /// Addresses without a path now: (label, failure, since ms, its own fact), for `ctl
    /// status`.
    pub fn unreachable_addresses(&self) -> Vec<(String, Failure, u64, bool)> {
        self.reach
            .unreachable()
            .map(|(l, f, since, own)| (l.to_string(), f, since, own))
            .collect()
    }

    /// The outbound setting dials use from now on (`None` = direct): what background work
    /// waits for ([`Ladder::proxy_gate`]) and the proxy lines name.
    pub fn set_outbound(&mut self, outbound: Active) {
        self.outbound = outbound;
    }

    /// Background work over `spec` at `now`: `Err(at)` while the outbound proxy it goes
    /// through is down and no re-check is due (or this was not it), so the work waits.
    pub(super) fn proxy_gate(&mut self, spec: &DialSpec, now: u64) -> Result<(), u64> {
        let outbound = self.outbound.as_deref();
        if !crate::net::outbound::goes_via_proxy(outbound, spec.addr, spec.kind.host()) {
            return Ok(());
        }
        self.outproxy.may_dial(now, &mut self.rng)
    }
}

/// The `reach` event (`logging::events`) for `n`.
fn reach_event(n: &News) -> crate::logging::events::Event {
    let (scope, to, label, failure) = match n {
        News::NetworkDown { label, failure } => ("network", "down", label, Some(*failure)),
        News::NetworkBack { label, .. } => ("network", "up", label, None),
        News::AddressDown { label, failure } => ("address", "down", label, Some(*failure)),
        News::AddressChanged { label, failure } => ("address", "down", label, Some(*failure)),
        News::AddressBack { label, .. } => ("address", "up", label, None),
    };
    crate::logging::events::Event::new("reach")
        .str("scope", scope)
        .str("to", to)
        .str("label", label)
        .opt("failure", failure.map(|f| f.to_string()).as_deref())
}

/// The destination `target`'s dials go to: its fixed address, or the host name it resolves.
pub(super) fn dest_of(target: &Target) -> Dest {
    match target {
        Target::Ws { addr, .. } | Target::Front { addr, .. } | Target::Tcp { addr } => {
            Dest::Addr(*addr)
        }
        Target::Worker {
            ep, edge: Some(ip), ..
        }
        | Target::CfProxy {
            ep, edge: Some(ip), ..
        } => Dest::Addr(SocketAddr::new(*ip, ep.port)),
        Target::Worker { ep, .. } | Target::CfProxy { ep, .. } => Dest::Name(ep.host.clone()),
        Target::Mtproto { proxy } => match proxy.ip() {
            Some(ip) => Dest::Addr(SocketAddr::new(ip, proxy.port)),
            None => Dest::Name(proxy.host.clone()),
        },
    }
}

/// True when `target` dials `dest` (as [`dest_of`] would say, without building it).
fn same_dest(target: &Target, dest: &Dest) -> bool {
    match (target, dest) {
        (
            Target::Ws { addr, .. } | Target::Front { addr, .. } | Target::Tcp { addr },
            Dest::Addr(a),
        ) => addr == a,
        (Target::Worker { edge: Some(_), .. } | Target::CfProxy { edge: Some(_), .. }, _) => {
            dest_of(target) == *dest
        }
        (Target::Worker { ep, .. } | Target::CfProxy { ep, .. }, Dest::Name(n)) => ep.host == *n,
        (Target::Mtproto { .. }, _) => dest_of(target) == *dest,
        _ => false,
    }
}

/// The outbound proxy of `outbound` as lines show it (password masked), or `-`.
fn proxy_name(outbound: &Active) -> String {
    outbound
        .as_deref()
        .map_or_else(|| "-".into(), |o| o.proxy.to_string())
}
