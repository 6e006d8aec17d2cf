//! The route table: every concrete way to reach a DC, its health, its probe schedule.
//!
//! A route is (tier, endpoint, DC) where the DC id carries media and test flags
//! ([`DcId`] is the one normalisation: test offset removed, sign → media, DC 203 kept as 203;
//! only `kws` host names map 203 → 2). Routes are created the first time a DC is asked for, so
//! only DCs in use are probed. The table is pure bookkeeping: it never opens sockets. The
//! connect engine asks it for an ordered plan and reports outcomes; the prober asks it which
//! routes are due.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};

use log::{info, warn};

use crate::config::{CfEndpoint, Config, Tier};
use crate::error::Failure;
use crate::mtproto::dc::DcId;
use crate::net::dial::{DialKind, DialSpec};
use crate::rng::Rng;
use crate::route::budget::Budget;
use crate::route::health::{Change, Health, State, Use};
use crate::timer::TimerId;

/// `Origin` sent on upgrades to Telegram's web front (what Telegram Web sends).
pub const WEB_ORIGIN: &str = "https://web.telegram.org";

/// Where a route goes.
#[derive(Clone, Debug)]
pub enum Target {
    /// Telegram's WS front: TCP to `addr`, SNI/Host one of `hosts` (media order).
    Ws {
        /// Front address.
        addr: SocketAddr,
        /// `kwsN` names in the order to try.
        hosts: [String; 2],
        /// `/apiws` or `/apiws_test`.
        path: &'static str,
    },
    /// A Cloudflare Worker tunnelling to the DC's table address.
    Worker {
        /// Worker endpoint.
        ep: CfEndpoint,
        /// `/apiws?dst=…&dc=…&media=…`.
        path: String,
    },
    /// Telegram's front through a Cloudflare-proxied domain: `kwsN.<domain>`.
    CfProxy {
        /// `kwsN.<domain>` and the port.
        ep: CfEndpoint,
        /// `/apiws` or `/apiws_test`.
        path: &'static str,
    },
    /// Raw obfuscated2 to the DC address.
    Tcp {
        /// DC address.
        addr: SocketAddr,
    },
}

/// One route and everything learned about it.
pub struct Route {
    /// Tier.
    pub tier: Tier,
    /// DC (with media/test flags).
    pub dc: DcId,
    /// Where it goes.
    pub target: Target,
    /// Health state machine.
    pub health: Health,
    /// Last time a real session or probe proved the route (ms).
    pub last_ok: u64,
    /// Pending probe timer, if scheduled, and when it fires (ms).
    pub probe_timer: Option<(TimerId, u64)>,
    /// A probe is running now.
    pub probing: bool,
    /// Sessions that started on this route (stats).
    pub sessions: u64,
    /// Warm upstreams (TLS + upgrade done).
    pub pool: crate::route::pool::Pool,
}

impl Route {
    /// `ws:DC2 kws2.web.telegram.org@149.154.167.220:443`-style label for logs. Worker and CF
    /// domains are redacted to their first label's first letters (users paste private names).
    pub fn label(&self) -> String {
        format!("{}:{} {}", self.tier.name(), self.dc, self.target_label())
    }

    /// The target part of [`Route::label`]: `kws2.web.telegram.org@149.154.167.220:443`,
    /// a redacted Worker/CF name, or a TCP address.
    pub fn target_label(&self) -> String {
        match &self.target {
            Target::Ws { addr, hosts, .. } => format!("{}@{addr}", hosts[0]),
            Target::Worker { ep, .. } | Target::CfProxy { ep, .. } => {
                format!("{}:{}", redact(&ep.host), ep.port)
            }
            Target::Tcp { addr } => addr.to_string(),
        }
    }

    /// Host names this route dials through (for DNS), if any.
    pub fn host(&self) -> Option<&str> {
        match &self.target {
            Target::Worker { ep, .. } | Target::CfProxy { ep, .. } => Some(&ep.host),
            _ => None,
        }
    }

    /// Dial specs for this route, in the order to try (two `kws` names for `ws`). `resolve`
    /// maps a host name to an address from the DNS cache; `None` = not known yet (the route is
    /// skipped for now, never waited on).
    pub fn dial_specs(&self, resolve: &mut dyn FnMut(&str) -> Option<IpAddr>) -> Vec<DialSpec> {
        match &self.target {
            Target::Ws { addr, hosts, path } => hosts
                .iter()
                .map(|h| DialSpec {
                    addr: *addr,
                    kind: DialKind::Ws {
                        host: h.clone(),
                        path: (*path).to_string(),
                        subprotocol: true,
                        origin: Some(WEB_ORIGIN),
                    },
                })
                .collect(),
            Target::Worker { ep, path } => match resolve(&ep.host) {
                Some(ip) => vec![DialSpec {
                    addr: SocketAddr::new(ip, ep.port),
                    kind: DialKind::Ws {
                        host: ep.host.clone(),
                        path: path.clone(),
                        subprotocol: false,
                        origin: None,
                    },
                }],
                None => Vec::new(),
            },
            Target::CfProxy { ep, path } => match resolve(&ep.host) {
                Some(ip) => vec![DialSpec {
                    addr: SocketAddr::new(ip, ep.port),
                    kind: DialKind::Ws {
                        host: ep.host.clone(),
                        path: (*path).to_string(),
                        subprotocol: true,
                        origin: Some(WEB_ORIGIN),
                    },
                }],
                None => Vec::new(),
            },
            Target::Tcp { addr } => vec![DialSpec {
                addr: *addr,
                kind: DialKind::Tcp,
            }],
        }
    }
}

impl Route {
    /// [`Route::dial_specs`] without any spec that would dial our own listener (a Worker or CF
    /// name can resolve to it).
    pub fn specs_for(
        &self,
        resolve: &mut dyn FnMut(&str) -> Option<IpAddr>,
        listen: SocketAddr,
    ) -> Vec<DialSpec> {
        let mut specs = self.dial_specs(resolve);
        specs.retain(|s| !is_self(s.addr, listen));
        specs
    }
}

/// Shortens a private host name for logs: `myproxy.example.workers.dev` → `my…workers.dev`.
pub fn redact(host: &str) -> String {
    if host.parse::<IpAddr>().is_ok() {
        return host.to_string();
    }
    let labels: Vec<&str> = host.split('.').collect();
    if labels.len() <= 2 {
        let first: String = labels[0].chars().take(2).collect();
        return format!("{first}…");
    }
    let first: String = labels[0].chars().take(2).collect();
    format!("{first}…{}", labels[labels.len() - 2..].join("."))
}

/// All routes.
pub struct Table {
    /// Routes by index (stable for the process lifetime).
    pub routes: Vec<Route>,
    by_dc: BTreeMap<DcId, Vec<usize>>,
    /// Request budget per Worker endpoint (index as in `cfg.worker_domains`).
    pub worker_budgets: Vec<Budget>,
    /// Next free handshake slot per destination address (pacing).
    pace: BTreeMap<SocketAddr, u64>,
}

impl Table {
    /// An empty table with one budget per configured Worker.
    pub fn new(cfg: &Config, now: u64) -> Table {
        let burst = (cfg.worker_budget / 50).clamp(1, 100);
        Table {
            routes: Vec::new(),
            by_dc: BTreeMap::new(),
            worker_budgets: cfg
                .worker_domains
                .iter()
                .map(|_| Budget::new(cfg.worker_budget, burst, now))
                .collect(),
            pace: BTreeMap::new(),
        }
    }

    /// Route indices for `dc` in tier order, creating them on first use. Our own listen
    /// address is never a target.
    pub fn routes_for(&mut self, dc: DcId, cfg: &Config, listen: SocketAddr) -> Vec<usize> {
        if let Some(ids) = self.by_dc.get(&dc) {
            return ids.clone();
        }
        let mut ids = Vec::new();
        for &tier in &cfg.tier_order {
            for target in targets(tier, dc, cfg) {
                if let Target::Ws { addr, .. } | Target::Tcp { addr } = &target {
                    if is_self(*addr, listen) {
                        continue;
                    }
                }
                ids.push(self.routes.len());
                self.routes.push(Route {
                    tier,
                    dc,
                    target,
                    health: Health::new(),
                    last_ok: 0,
                    probe_timer: None,
                    probing: false,
                    sessions: 0,
                    pool: Default::default(),
                });
            }
        }
        self.by_dc.insert(dc, ids.clone());
        ids
    }

    /// Index of this route's endpoint among the configured Workers (for its budget).
    pub fn worker_index(&self, id: usize, cfg: &Config) -> Option<usize> {
        match &self.routes[id].target {
            Target::Worker { ep, .. } => cfg.worker_domains.iter().position(|w| w == ep),
            _ => None,
        }
    }

    /// Reserves a handshake start toward `addr` at least `pace_ms` after the previous one and
    /// returns its time (≥ `now`). `pace_ms` 0 disables pacing. The map is pruned of past slots
    /// so it stays small.
    pub fn pace_slot(&mut self, addr: SocketAddr, now: u64, pace_ms: u64) -> u64 {
        if pace_ms == 0 {
            return now;
        }
        if self.pace.len() > 64 {
            self.pace.retain(|_, next| *next > now);
        }
        let next = self.pace.entry(addr).or_insert(now);
        let at = (*next).max(now);
        *next = at + pace_ms;
        at
    }

    /// Every DC that has routes so far.
    pub fn dcs(&self) -> Vec<DcId> {
        self.by_dc.keys().copied().collect()
    }

    /// Orders `ids` for a client: usable routes (Up, Unknown, then Suspect) in tier order;
    /// routes in cooldown or waiting for a recovery probe are left out — clients never pay for
    /// health checks. If nothing is usable, every route is returned in tier order as a last
    /// resort (the connect budget still bounds the wait).
    pub fn plan(&self, ids: &[usize], now: u64) -> (Vec<usize>, bool) {
        let mut good: Vec<(u8, usize, usize)> = Vec::new();
        for (pos, &id) in ids.iter().enumerate() {
            let rank = match self.routes[id].health.usable(now) {
                Use::Preferred | Use::Untested => 0,
                Use::Degraded => 1,
                Use::Cooling { .. } | Use::Expired => continue,
            };
            good.push((rank, pos, id));
        }
        if good.is_empty() {
            return (ids.to_vec(), false);
        }
        good.sort();
        (good.into_iter().map(|(_, _, id)| id).collect(), true)
    }

    /// Records a success (real session's first byte, or a probe's resPQ). Logs a state change.
    pub fn on_success(&mut self, id: usize, now: u64, rtt_ms: u64, via: &str) -> Option<Change> {
        let r = &mut self.routes[id];
        r.last_ok = now;
        let change = r.health.on_success(now, rtt_ms);
        if let Some(c) = change {
            let from = match c.from {
                State::Unknown => "unknown",
                State::Up => "up",
                State::Suspect => "suspect",
                State::Down { .. } => "down",
            };
            info!("route {} {from} → up ({via}, {rtt_ms}ms)", r.label());
        }
        change
    }

    /// Records a failure. Returns the change (Down: the caller schedules a recovery probe at
    /// `until`). Logs state changes once; repeated failures during a cooldown are silent.
    pub fn on_failure(
        &mut self,
        id: usize,
        now: u64,
        f: Failure,
        retry_after: Option<u32>,
        cfg: &Config,
        rng: &mut Rng,
    ) -> Option<Change> {
        let r = &mut self.routes[id];
        let change = r.health.on_failure(now, f, retry_after, &cfg.health, rng);
        if let Some(c) = change {
            match c.to {
                State::Down { .. } => warn!(
                    "route {} down for {:.1}s: {}{}{}",
                    r.label(),
                    c.cooldown_ms as f64 / 1000.0,
                    f,
                    if r.health.is_redirect() {
                        " (no WS front for this DC; re-probed when the TTL ends)"
                    } else {
                        ""
                    },
                    if c.quarantined {
                        " (flapping: quarantined)"
                    } else {
                        ""
                    }
                ),
                _ => info!("route {} suspect: {f}", r.label()),
            }
        }
        change
    }
}

/// The concrete targets of one tier for one DC.
fn targets(tier: Tier, dc: DcId, cfg: &Config) -> Vec<Target> {
    let table_addr = || {
        cfg.tcp_addrs
            .get(&dc.dc)
            .copied()
            .or_else(|| dc.table_ip().map(|ip| SocketAddr::from((ip, 443))))
    };
    match tier {
        Tier::Ws => match cfg.ws_addrs.get(&dc.dc) {
            Some(&addr) => vec![Target::Ws {
                addr,
                hosts: dc.ws_hosts(),
                path: dc.ws_path(),
            }],
            None => Vec::new(),
        },
        Tier::Worker => match table_addr() {
            Some(dst) => cfg
                .worker_domains
                .iter()
                .map(|ep| Target::Worker {
                    ep: ep.clone(),
                    path: worker_path(dst, dc),
                })
                .collect(),
            None => Vec::new(),
        },
        Tier::CfProxy => {
            if dc.test {
                return Vec::new(); // test DCs have no CF records
            }
            cfg.cf_domains
                .iter()
                .map(|ep| Target::CfProxy {
                    ep: CfEndpoint {
                        host: format!("kws{}.{}", dc.dc, ep.host),
                        port: ep.port,
                    },
                    path: dc.ws_path(),
                })
                .collect()
        }
        Tier::Tcp => match table_addr() {
            Some(addr) => vec![Target::Tcp { addr }],
            None => Vec::new(),
        },
    }
}

/// The Worker URL path (PROTOCOL.md §4.2): `dst` is the DC's table address (with `:port` only
/// when a test moved it off 443), `dc` the DC number, `media` 0/1.
pub fn worker_path(dst: SocketAddr, dc: DcId) -> String {
    let dst = if dst.port() == 443 {
        dst.ip().to_string()
    } else {
        dst.to_string()
    };
    format!("/apiws?dst={dst}&dc={}&media={}", dc.dc, u8::from(dc.media))
}

/// True if dialling `addr` would loop back into our own listener.
pub fn is_self(addr: SocketAddr, listen: SocketAddr) -> bool {
    if addr.port() != listen.port() {
        return false;
    }
    addr.ip() == listen.ip() || (listen.ip().is_unspecified() && addr.ip().is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn dc2() -> DcId {
        DcId::from_index(2).unwrap()
    }

    #[test]
    fn routes_follow_tier_order_and_skip_unconfigured_tiers() {
        let mut cfg = Config::with_secrets(Vec::new());
        cfg.worker_domains = vec![CfEndpoint {
            host: "w.example.workers.dev".into(),
            port: 443,
        }];
        let mut t = Table::new(&cfg, 0);
        let ids = t.routes_for(dc2(), &cfg, "127.0.0.1:1443".parse().unwrap());
        let tiers: Vec<Tier> = ids.iter().map(|&i| t.routes[i].tier).collect();
        assert_eq!(tiers, vec![Tier::Ws, Tier::Worker, Tier::Tcp]);
        // Asking again returns the same routes.
        assert_eq!(
            t.routes_for(dc2(), &cfg, "127.0.0.1:1443".parse().unwrap()),
            ids
        );
        match &t.routes[ids[1]].target {
            Target::Worker { path, .. } => {
                assert_eq!(path, "/apiws?dst=149.154.167.51&dc=2&media=0")
            }
            _ => panic!("not a worker"),
        }
    }

    #[test]
    fn down_routes_are_left_out_of_client_plans() {
        let cfg = Config::with_secrets(Vec::new());
        let mut t = Table::new(&cfg, 0);
        let ids = t.routes_for(dc2(), &cfg, "127.0.0.1:1443".parse().unwrap());
        let mut rng = Rng::from_seed([7; 48]);
        let c = t
            .on_failure(ids[0], 1000, Failure::Timeout, None, &cfg, &mut rng)
            .unwrap();
        assert!(matches!(c.to, State::Down { .. }));
        let (plan, usable) = t.plan(&ids, 1001);
        assert!(usable);
        assert_eq!(plan, vec![ids[1]]);
        // Even after the cooldown ends, only a probe may bring it back.
        let (plan, _) = t.plan(&ids, 10_000_000);
        assert_eq!(plan, vec![ids[1]]);
        t.on_success(ids[0], 10_000_001, 40, "probe");
        assert_eq!(t.plan(&ids, 10_000_002).0, ids);
    }

    #[test]
    fn handshakes_to_one_address_are_paced() {
        let cfg = Config::with_secrets(Vec::new());
        let mut t = Table::new(&cfg, 0);
        let a: SocketAddr = "10.0.0.1:443".parse().unwrap();
        let b: SocketAddr = "10.0.0.2:443".parse().unwrap();
        assert_eq!(t.pace_slot(a, 100, 20), 100);
        assert_eq!(t.pace_slot(a, 100, 20), 120);
        assert_eq!(t.pace_slot(a, 105, 20), 140);
        assert_eq!(
            t.pace_slot(b, 105, 20),
            105,
            "other addresses are independent"
        );
        assert_eq!(
            t.pace_slot(a, 500, 20),
            500,
            "an idle address starts at once"
        );
        assert_eq!(t.pace_slot(a, 500, 0), 500, "0 disables pacing");
    }

    #[test]
    fn self_address_is_never_a_route() {
        let mut cfg = Config::with_secrets(Vec::new());
        cfg.ws_addrs.insert(2, "127.0.0.1:1443".parse().unwrap());
        let mut t = Table::new(&cfg, 0);
        let ids = t.routes_for(dc2(), &cfg, "0.0.0.0:1443".parse().unwrap());
        assert!(ids.iter().all(|&i| t.routes[i].tier != Tier::Ws));
    }

    #[test]
    fn redaction_hides_private_names() {
        assert_eq!(redact("myproxy.someone.workers.dev"), "my…workers.dev");
        assert_eq!(redact("127.0.0.1"), "127.0.0.1");
        assert_eq!(redact("localhost"), "lo…");
    }
}
