//! The route table: every concrete way to reach a DC and what each one is.
//!
//! A route is (tier, endpoint, DC) where the DC id carries media and test flags
//! ([`DcId`] is the one normalisation: test offset removed, sign → media, DC 203 kept as 203;
//! only `kws` host names map 203 → 2). Owns: route creation on first use of a DC (a client's,
//! or the ladder's startup probes of DCs 1–5), targets, dial specs, labels and redaction, the
//! self-loop check, and what a reload does to the routes ([`Table::reconfigure`]: unchanged
//! ones kept, removed ones retired, new ones created); the dial specs of a route are
//! `table/spec.rs`. Must not touch: health decisions, schedules, pools, sockets — those are
//! `route::ladder`'s (policy) and `route::prober`'s (I/O). The tier facts it encodes are in docs/protocol.md §3–§4.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};

use crate::config::{CfEndpoint, Config, Tier};
use crate::mtproto::dc::DcId;
use crate::mtproto::upstream::MtprotoProxy;
use crate::net::dial::{DialKind, DialSpec};
use crate::route::edges::Edges;
use crate::route::health::Health;

mod spec;

/// `Origin` sent on upgrades to Telegram's web front (what Telegram Web sends).
pub const WEB_ORIGIN: &str = "https://web.telegram.org";

/// Where a route goes.
#[derive(Clone, Debug, PartialEq, Eq)]
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
        /// The Cloudflare edge dialled (`--cf-ip`), else `None`: the name's DNS answer.
        edge: Option<IpAddr>,
    },
    /// Telegram's front through a Cloudflare-proxied domain: `kwsN.<domain>`, and for a media
    /// DC `kwsN-1.<domain>` first (media order, as on the ws tier; docs/protocol.md §4.3).
    CfProxy {
        /// `kwsN.<domain>` and the port.
        ep: CfEndpoint,
        /// `kwsN-1.<domain>` for a media DC (tried before `ep.host`; skipped while it does not
        /// resolve), `None` for a non-media one. Built by [`cf_proxy_target`].
        media_host: Option<String>,
        /// `/apiws` or `/apiws_test`.
        path: &'static str,
        /// A domain of the shared list (`--cf-domain-list`): published, so its names are shown
        /// in full; a `--cf-domain` of the user's own is redacted.
        shared: bool,
        /// The Cloudflare edge dialled (`--cf-ip`), else `None`: the names' DNS answers.
        edge: Option<IpAddr>,
        /// `ws://` without TLS (the `cfproxy-ws` tier; `ep.port` is then `--cf-ws-port`).
        plain: bool,
    },
    /// Another MTProto proxy, reached as its client (docs/protocol.md §4.4); the init names
    /// the route's DC. Its label never shows the secret, and a name is redacted.
    Mtproto {
        /// The upstream proxy (host, port, secret).
        proxy: MtprotoProxy,
    },
    /// Domain fronting (docs/protocol.md §4.6): TCP to the DC's WS front `addr`, TLS SNI `sni`
    /// (a `--fronting-domain`, the certificate verified against it), `Host` one of `hosts`.
    Front {
        /// Front address (the DC's `--dc-ip` address, as for `ws`).
        addr: SocketAddr,
        /// The fronting name put in the SNI.
        sni: String,
        /// `kwsN` names in the order to try (media order, as `ws`).
        hosts: [String; 2],
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
    /// Sessions that started on this route (stats).
    pub sessions: u64,
    /// No longer configured (a reload removed its tier, DC entry, Worker or domain): never
    /// planned, probed or filled again; its id stays valid for the sessions still on it.
    pub retired: bool,
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
            Target::Front {
                addr, sni, hosts, ..
            } => format!("{sni}/{}@{addr}", hosts[0]),
            Target::Worker { ep, edge, .. } => at_edge(redact(&ep.host), ep.port, *edge),
            Target::CfProxy {
                ep,
                shared,
                edge,
                plain,
                ..
            } => {
                let name = if *shared {
                    ep.host.clone()
                } else {
                    redact_kws(&ep.host)
                };
                let scheme = if *plain { "ws://" } else { "" };
                format!("{scheme}{}", at_edge(name, ep.port, *edge))
            }
            Target::Mtproto { proxy } => mtproto_label(proxy),
            Target::Tcp { addr } => addr.to_string(),
        }
    }

    /// [`spec_label`] of one of this route's dial specs: a shared-list domain (public) in
    /// full, a private name redacted.
    pub fn spec_label(&self, spec: &DialSpec) -> String {
        match (&self.target, &spec.kind) {
            (Target::CfProxy { shared: true, .. }, DialKind::Ws { host, plain, .. }) => {
                let scheme = if *plain { "ws://" } else { "" };
                format!("{scheme}{host}@{}", spec.addr)
            }
            _ => spec_label(spec, self.tier),
        }
    }

    /// The Cloudflare edge this route dials (`--cf-ip`), if any.
    pub fn edge(&self) -> Option<IpAddr> {
        match &self.target {
            Target::Worker { edge, .. } | Target::CfProxy { edge, .. } => *edge,
            _ => None,
        }
    }

    /// The host name this route dials through (for DNS), if any: a Worker's, or a cfproxy
    /// route's `kwsN.<domain>` (see [`Route::hosts`] for its media name too). A route through
    /// a `--cf-ip` edge needs no DNS for its name: `None`.
    pub fn host(&self) -> Option<&str> {
        match &self.target {
            Target::Worker { edge: Some(_), .. } | Target::CfProxy { edge: Some(_), .. } => None,
            Target::Worker { ep, .. } | Target::CfProxy { ep, .. } => Some(&ep.host),
            Target::Mtproto { proxy } if proxy.ip().is_none() => Some(&proxy.host),
            _ => None,
        }
    }

    /// Every host name this route dials through (for DNS), in the order they are tried: a
    /// media cfproxy route's `kwsN-1.<domain>` then `kwsN.<domain>`; else [`Route::host`]. A
    /// media cfproxy route through an edge asks DNS only whether `kwsN-1.<domain>` exists.
    pub fn hosts(&self) -> Vec<&str> {
        match &self.target {
            Target::CfProxy {
                media_host: Some(m),
                edge: Some(_),
                ..
            } => vec![m.as_str()],
            Target::CfProxy {
                ep,
                media_host: Some(m),
                ..
            } => vec![m.as_str(), ep.host.as_str()],
            _ => self.host().into_iter().collect(),
        }
    }
}

/// `name:port`, or `name@edge:port` for a route through a `--cf-ip` edge.
fn at_edge(name: String, port: u16, edge: Option<IpAddr>) -> String {
    match edge {
        Some(ip) => format!("{name}@{}", SocketAddr::new(ip, port)),
        None => format!("{name}:{port}"),
    }
}

/// `kws2.web.telegram.org@149.154.167.220:443`, `149.154.167.50:443` or, without TLS, `ws://kws2.e…@IP:80` (Worker/CF names are
/// redacted).
pub fn spec_label(spec: &DialSpec, tier: Tier) -> String {
    match &spec.kind {
        DialKind::Tcp | DialKind::Mtproto { .. } => spec.addr.to_string(),
        DialKind::Tls { host } => format!("{}@{}", redact(host), spec.addr),
        DialKind::Ws {
            host, sni, plain, ..
        } => {
            let host = match tier {
                Tier::CfProxy | Tier::CfProxyWs => redact_kws(host),
                t if t.is_cloudflare() => redact(host),
                _ => host.clone(),
            };
            // `ws://` marks a dial without TLS (the cfproxy-ws tier).
            let scheme = if *plain { "ws://" } else { "" };
            match sni {
                // Fronting: `SNI/Host@addr` (the fronting name is public, not redacted).
                Some(sni) => format!("{scheme}{sni}/{host}@{}", spec.addr),
                None => format!("{scheme}{host}@{}", spec.addr),
            }
        }
    }
}

/// The private names of `cfg` (`--cf-worker-domain`, `--cf-domain`) with their [`redact`]
/// forms, for `logging::set_redactions` (`run` for its log, `check` for its output too).
pub fn private_names(cfg: &Config) -> Vec<(String, String)> {
    cfg.worker_domains
        .iter()
        .chain(&cfg.cf_domains)
        .map(|e| (e.host.clone(), redact(&e.host)))
        .chain(
            cfg.mtproto_proxies
                .iter()
                .filter(|p| p.ip().is_none())
                .map(|p| (p.host.clone(), redact(&p.host))),
        )
        .collect()
}

/// An upstream proxy's label: its host (a name redacted), port and secret form, never the
/// key: `pr…example.net:443/ee`, `[::1]:443/dd`.
pub fn mtproto_label(proxy: &MtprotoProxy) -> String {
    let host = match proxy.ip() {
        Some(std::net::IpAddr::V6(ip)) => format!("[{ip}]"),
        Some(ip) => ip.to_string(),
        None => redact(&proxy.host),
    };
    format!("{host}:{}/{}", proxy.port, proxy.form())
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

/// [`redact`] for a cfproxy name that keeps its `kwsN` / `kwsN-1` label, which is Telegram's
/// and tells the media name from the base one: `kws2-1.mydomain.com` → `kws2-1.my…`. Any
/// other name is [`redact`]ed whole.
pub fn redact_kws(host: &str) -> String {
    match host.split_once('.') {
        Some((first, rest)) if first.starts_with("kws") && !rest.is_empty() => {
            format!("{first}.{}", redact(rest))
        }
        _ => redact(host),
    }
}

/// All routes, created on first use of a DC.
pub struct Table {
    /// Routes by index (stable for the process lifetime).
    pub routes: Vec<Route>,
    by_dc: BTreeMap<DcId, Vec<usize>>,
    /// The Cloudflare edges in use (`--cf-ip`): each Worker and cfproxy target gets one route
    /// per edge. Set by the ladder ([`Table::set_edges`]); empty: the names' DNS answers.
    edges: Edges,
}

impl Table {
    /// An empty table.
    pub fn new() -> Table {
        Table {
            routes: Vec::new(),
            by_dc: BTreeMap::new(),
            edges: Edges::default(),
        }
    }

    /// The Cloudflare edges in use.
    pub fn edges(&self) -> &Edges {
        &self.edges
    }

    /// Puts a new set of edges in force and re-derives every DC's routes for it (as a reload
    /// does: the routes of an edge no longer in use are retired, those of a new edge created).
    /// Returns the ids retired now.
    pub fn set_edges(&mut self, edges: Edges, cfg: &Config, listen: SocketAddr) -> Vec<usize> {
        self.edges = edges;
        self.reconfigure(cfg, listen)
    }

    /// Replaces the sampled edge `ip` with a fresh sample of its range and re-derives the
    /// routes (its routes retired, the new edge's created). Returns the new address and the
    /// ids retired; `None` when the edge is not replaceable (given, or its range is spent).
    pub fn replace_edge(
        &mut self,
        ip: IpAddr,
        rng: &mut crate::rng::Rng,
        cfg: &Config,
        listen: SocketAddr,
    ) -> Option<(IpAddr, Vec<usize>)> {
        let new = self.edges.replace(ip, rng)?;
        Some((new, self.reconfigure(cfg, listen)))
    }

    /// Route indices for `dc` in tier order, creating them on first use. Our own listen
    /// address is never a target. A DC that is not [`known_dc`] gets no routes and leaves no
    /// entry behind, so the table holds at most two entries (non-media, media) per DC the
    /// built-in table or the configuration names, whatever DC indices clients send.
    pub fn routes_for(&mut self, dc: DcId, cfg: &Config, listen: SocketAddr) -> Vec<usize> {
        if let Some(ids) = self.by_dc.get(&dc) {
            return ids.clone();
        }
        if !known_dc(dc, cfg) {
            return Vec::new();
        }
        let ids = self.derive(dc, cfg, listen);
        self.by_dc.insert(dc, ids.clone());
        ids
    }

    /// Re-derives the routes of every DC with entries for a new `cfg` (a reload), in its tier
    /// order. A route whose (tier, DC, target) is still configured keeps its index and all it
    /// learned (a retired one with that key is brought back); one no longer configured is
    /// retired (it stays in `routes`, so the ids live sessions hold stay valid); new ones are
    /// appended. A DC that is no longer known loses its entry. Returns the ids retired now.
    /// Routes are only ever added for targets not seen before, so repeated reloads between the
    /// same configurations do not grow the table.
    pub fn reconfigure(&mut self, cfg: &Config, listen: SocketAddr) -> Vec<usize> {
        let old = std::mem::take(&mut self.by_dc);
        let mut retired = Vec::new();
        for (dc, old_ids) in old {
            let ids = if known_dc(dc, cfg) {
                self.derive(dc, cfg, listen)
            } else {
                Vec::new()
            };
            for id in old_ids {
                if !ids.contains(&id) {
                    self.routes[id].retired = true;
                    retired.push(id);
                }
            }
            if known_dc(dc, cfg) {
                self.by_dc.insert(dc, ids);
            }
        }
        retired
    }

    /// The route ids `dc` gets under `cfg`, reusing (and un-retiring) a route with the same
    /// tier and target, appending the others.
    fn derive(&mut self, dc: DcId, cfg: &Config, listen: SocketAddr) -> Vec<usize> {
        let mut ids = Vec::new();
        for &tier in cfg.tier_order_for(dc) {
            for target in with_edges(targets(tier, dc, cfg), &self.edges.ips()) {
                if let Target::Ws { addr, .. } | Target::Front { addr, .. } | Target::Tcp { addr } =
                    &target
                {
                    if is_self(*addr, listen) {
                        continue;
                    }
                }
                if let Target::Mtproto { proxy } = &target {
                    let ip = proxy.ip();
                    if ip.is_some_and(|ip| is_self(SocketAddr::new(ip, proxy.port), listen)) {
                        continue; // a chain to ourselves (a name is checked when resolved)
                    }
                }
                let same = self
                    .routes
                    .iter()
                    .position(|r| r.dc == dc && r.tier == tier && r.target == target);
                let id = match same {
                    Some(id) => {
                        self.routes[id].retired = false;
                        id
                    }
                    None => {
                        self.routes.push(Route {
                            tier,
                            dc,
                            target,
                            health: Health::new(),
                            last_ok: 0,
                            sessions: 0,
                            retired: false,
                        });
                        self.routes.len() - 1
                    }
                };
                if !ids.contains(&id) {
                    ids.push(id);
                }
            }
        }
        ids
    }

    /// DCs (with media and test flags) that have entries.
    pub fn dc_count(&self) -> usize {
        self.by_dc.len()
    }

    /// Index of this route's endpoint among the configured Workers (for its budget).
    pub fn worker_index(&self, id: usize, cfg: &Config) -> Option<usize> {
        match &self.routes[id].target {
            Target::Worker { ep, .. } => cfg.worker_domains.iter().position(|w| w == ep),
            _ => None,
        }
    }
}

impl Default for Table {
    fn default() -> Table {
        Table::new()
    }
}

/// The key of `dc` in the `--dc-ip` / `--tcp-dc-ip` maps: the DC number for a production DC,
/// the init's test index (10000 + N, e.g. `--tcp-dc-ip 10002:IP`) for test DC N. `None` for a
/// test DC whose index does not fit the init's i16 (no override can name it).
pub fn override_key(dc: DcId) -> Option<u16> {
    if !dc.test {
        return Some(dc.dc);
    }
    dc.dc.checked_add(10_000).filter(|&k| k <= 32_767)
}

/// The DC's own address: its `--tcp-dc-ip` override, else the built-in table (port 443). A
/// test DC is looked up by its test index only, so `--tcp-dc-ip 2:…` (production DC 2) never
/// sends test-DC 2 sessions (index 10002) to a production address — neither over the tcp tier
/// nor as a Worker's `dst` (docs/design.md §4, issue 10 item 6).
pub fn dc_addr(dc: DcId, cfg: &Config) -> Option<SocketAddr> {
    override_key(dc)
        .and_then(|k| cfg.tcp_addrs.get(&k).copied())
        .or_else(|| dc.table_ip().map(|ip| SocketAddr::from((ip, 443))))
}

/// True if `dc` is a DC this proxy knows: a production DC of the built-in table (1–5, 203) or
/// named by `--dc-ip` / `--tcp-dc-ip`; a test DC of the built-in test table (1–3), named by its
/// test index (`1000N:`), or whose DC N has a WS front (the front serves test DCs too). Media
/// follows its DC. Any other index a client sends is refused at the init (`unknown-dc`).
pub fn known_dc(dc: DcId, cfg: &Config) -> bool {
    if dc.table_ip().is_some() {
        return true;
    }
    let named = |k: u16| cfg.ws_addrs.contains_key(&k) || cfg.tcp_addrs.contains_key(&k);
    match override_key(dc) {
        Some(k) if named(k) => true,
        _ => dc.test && cfg.ws_addrs.contains_key(&dc.dc),
    }
}

/// The concrete targets of one tier for one DC.
fn targets(tier: Tier, dc: DcId, cfg: &Config) -> Vec<Target> {
    let table_addr = || dc_addr(dc, cfg);
    // Telegram's WS front serves test DCs too (the path `/apiws_test` picks them, the `kwsN`
    // names are the same), so a test DC uses its own `--dc-ip 1000N:` front if one is given,
    // else DC N's front.
    let ws_addr = override_key(dc)
        .and_then(|k| cfg.ws_addrs.get(&k))
        .or_else(|| cfg.ws_addrs.get(&dc.dc));
    match tier {
        Tier::Ws => match ws_addr {
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
                    edge: None,
                })
                .collect(),
            None => Vec::new(),
        },
        Tier::CfProxy => {
            if dc.test {
                return Vec::new(); // test DCs have no CF records
            }
            let own = cfg
                .cf_domains
                .iter()
                .map(|ep| cf_proxy_target(dc, ep, false));
            let shared = cfg.cf_shared_domains.iter();
            own.chain(shared.map(|ep| cf_proxy_target(dc, ep, true)))
                .collect()
        }
        // The same names over plain `ws://` on `--cf-ws-port` (docs/protocol.md §4.3).
        Tier::CfProxyWs => {
            if !cfg.cfproxy_ws {
                return Vec::new();
            }
            let mut ts = targets(Tier::CfProxy, dc, cfg);
            for t in &mut ts {
                if let Target::CfProxy { ep, plain, .. } = t {
                    ep.port = cfg.cf_ws_port;
                    *plain = true;
                }
            }
            ts
        }
        Tier::Tcp => match table_addr() {
            Some(addr) => vec![Target::Tcp { addr }],
            None => Vec::new(),
        },
        Tier::Mtproto => cfg
            .mtproto_proxies
            .iter()
            .map(|proxy| Target::Mtproto {
                proxy: MtprotoProxy {
                    hello: cfg.mtproto_hello,
                    ..proxy.clone()
                },
            })
            .collect(),
        // One route per fronting name toward the DC's WS front (docs/protocol.md §4.6); its
        // planning rule (after the ws route failed at TLS/upgrade) is route::ladder::front's.
        Tier::Front => match ws_addr {
            Some(&addr) => cfg
                .fronting_domains
                .iter()
                .map(|sni| Target::Front {
                    addr,
                    sni: sni.clone(),
                    hosts: dc.ws_hosts(),
                    path: dc.ws_path(),
                })
                .collect(),
            None => Vec::new(),
        },
    }
}

/// The cfproxy target of `dc` through `domain` (docs/protocol.md §4.3): `kwsN.<domain>` with
/// the raw DC number (203 stays 203), and for a media DC `kwsN-1.<domain>` tried first;
/// `shared` for a domain of the shared list (shown in full in labels).
pub fn cf_proxy_target(dc: DcId, domain: &CfEndpoint, shared: bool) -> Target {
    Target::CfProxy {
        ep: CfEndpoint {
            host: format!("kws{}.{}", dc.dc, domain.host),
            port: domain.port,
        },
        media_host: dc.media.then(|| format!("kws{}-1.{}", dc.dc, domain.host)),
        path: dc.ws_path(),
        shared,
        edge: None,
        plain: false,
    }
}

/// `targets` with each Worker and cfproxy target multiplied by the `edges` (one target per
/// edge, in edge order, instead of the DNS-resolved one); unchanged without edges.
fn with_edges(targets: Vec<Target>, edges: &[IpAddr]) -> Vec<Target> {
    if edges.is_empty() {
        return targets;
    }
    let mut out = Vec::new();
    for t in targets {
        match t {
            Target::Worker { .. } | Target::CfProxy { .. } => {
                for &ip in edges {
                    let mut t = t.clone();
                    if let Target::Worker { edge, .. } | Target::CfProxy { edge, .. } = &mut t {
                        *edge = Some(ip);
                    }
                    out.push(t);
                }
            }
            other => out.push(other),
        }
    }
    out
}

/// The Worker URL path (docs/protocol.md §4.2): `dst` is the DC's table address (with `:port` only
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
        let mut t = Table::new();
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
    fn self_address_is_never_a_route() {
        let mut cfg = Config::with_secrets(Vec::new());
        cfg.ws_addrs.insert(2, "127.0.0.1:1443".parse().unwrap());
        let mut t = Table::new();
        let ids = t.routes_for(dc2(), &cfg, "0.0.0.0:1443".parse().unwrap());
        assert!(ids.iter().all(|&i| t.routes[i].tier != Tier::Ws));
    }

    #[test]
    fn media_dcs_follow_the_media_tier_order_when_it_is_set() {
        let mut cfg = Config::with_secrets(Vec::new());
        cfg.tier_order = vec![Tier::Ws, Tier::Tcp];
        let listen = "127.0.0.1:1443".parse().unwrap();
        let tiers = |cfg: &Config, dc: i16| {
            let mut t = Table::new();
            let ids = t.routes_for(DcId::from_index(dc).unwrap(), cfg, listen);
            ids.iter().map(|&i| t.routes[i].tier).collect::<Vec<_>>()
        };
        assert_eq!(
            tiers(&cfg, -2),
            vec![Tier::Ws, Tier::Tcp],
            "unset: as --tier-order"
        );
        cfg.media_tier_order = Some(vec![Tier::Tcp]);
        assert_eq!(tiers(&cfg, -2), vec![Tier::Tcp], "media DC 2");
        assert_eq!(
            tiers(&cfg, 2),
            vec![Tier::Ws, Tier::Tcp],
            "non-media keeps its order"
        );
    }

    #[test]
    fn test_dc_never_takes_a_production_override() {
        let test2 = DcId::from_index(10002).unwrap();
        let mut cfg = Config::with_secrets(Vec::new());
        cfg.tier_order = vec![Tier::Worker, Tier::Tcp];
        cfg.worker_domains = vec![CfEndpoint {
            host: "w.example.workers.dev".into(),
            port: 443,
        }];
        cfg.tcp_addrs.insert(2, "10.0.0.2:443".parse().unwrap());
        let listen = "127.0.0.1:1443".parse().unwrap();
        let targets = |cfg: &Config| {
            let mut t = Table::new();
            let ids = t.routes_for(test2, cfg, listen);
            ids.iter()
                .map(|&i| match &t.routes[i].target {
                    Target::Worker { path, .. } => path.clone(),
                    Target::Tcp { addr } => addr.to_string(),
                    _ => panic!("unexpected tier"),
                })
                .collect::<Vec<_>>()
        };
        // Only production DC 2 is overridden: test DC 2 keeps its built-in test address.
        assert_eq!(
            targets(&cfg),
            vec![
                "/apiws?dst=149.154.167.40&dc=2&media=0".to_string(),
                "149.154.167.40:443".to_string()
            ]
        );
        // Its own override (the test index) is honoured.
        cfg.tcp_addrs.insert(10002, "10.0.0.3:443".parse().unwrap());
        assert_eq!(
            targets(&cfg),
            vec![
                "/apiws?dst=10.0.0.3&dc=2&media=0".to_string(),
                "10.0.0.3:443".to_string()
            ]
        );
        // Production DC 2 still uses its own.
        assert_eq!(dc_addr(dc2(), &cfg), Some("10.0.0.2:443".parse().unwrap()));
        assert_eq!(override_key(test2), Some(10002));
        assert_eq!(
            override_key(DcId::from_index(i16::MAX).unwrap()),
            Some(32767)
        );
    }

    #[test]
    fn unknown_dc_indices_leave_no_state() {
        let mut cfg = Config::with_secrets(Vec::new());
        cfg.cf_domains = vec![CfEndpoint {
            host: "example.com".into(),
            port: 443,
        }];
        cfg.tcp_addrs.insert(7, "10.0.0.7:443".parse().unwrap());
        let listen = "127.0.0.1:1443".parse().unwrap();
        let mut t = Table::new();
        // Every index a client can send: only the known DCs get entries.
        for idx in i16::MIN..=i16::MAX {
            if let Ok(dc) = DcId::from_index(idx) {
                let _ = t.routes_for(dc, &cfg, listen);
            }
        }
        // Production 1-5, 203, 7 (configured); test 1-3 (table), 2 and 4 (WS front): × media.
        assert_eq!(
            t.dc_count(),
            2 * (7 + 4),
            "{:?}",
            t.by_dc.keys().collect::<Vec<_>>()
        );
        let id = |i: i16| DcId::from_index(i).unwrap();
        assert!(known_dc(id(203), &cfg) && known_dc(id(-7), &cfg) && known_dc(id(10004), &cfg));
        assert!(!known_dc(id(9999), &cfg) && !known_dc(id(6), &cfg) && !known_dc(id(10005), &cfg));
        assert!(t.routes_for(id(9999), &cfg, listen).is_empty());
        cfg.tcp_addrs.insert(10005, "10.0.0.8:443".parse().unwrap());
        assert!(known_dc(id(-10005), &cfg));
    }

    /// The dial hosts of `dc`'s cfproxy route through `example.com`, with `known` the names
    /// that resolve (each to 127.0.0.5).
    fn cf_hosts(dc: DcId, known: &[&str]) -> Vec<String> {
        let mut cfg = Config::with_secrets(Vec::new());
        cfg.tier_order = vec![Tier::CfProxy];
        cfg.cf_domains = vec![CfEndpoint {
            host: "example.com".into(),
            port: 8443,
        }];
        let mut t = Table::new();
        let ids = t.routes_for(dc, &cfg, "127.0.0.1:1443".parse().unwrap());
        assert_eq!(ids.len(), 1);
        let r = &t.routes[ids[0]];
        let mut resolve = |h: &str| known.contains(&h).then(|| "127.0.0.5".parse().unwrap());
        r.dial_specs(&mut resolve)
            .into_iter()
            .map(|s| match s.kind {
                DialKind::Ws {
                    host,
                    sni: None,
                    path,
                    subprotocol,
                    origin,
                    plain: false,
                } => {
                    assert_eq!(s.addr, "127.0.0.5:8443".parse().unwrap());
                    assert_eq!(path, "/apiws");
                    assert!(subprotocol && origin == Some(WEB_ORIGIN));
                    host
                }
                _ => panic!("cfproxy dials WS without an SNI override"),
            })
            .collect()
    }

    /// `cfproxy-ws` (issue 22 part 4): nothing unless `--cfproxy-ws` is on; then the cfproxy
    /// names (own and shared) at `--cf-ws-port`, dialled as plain `ws://` with the same `Host`,
    /// path, subprotocol and `Origin`, labelled `ws://…`; the TLS cfproxy routes are unchanged.
    #[test]
    fn cfproxy_ws_is_opt_in_and_dials_the_cfproxy_names_over_plain_ws() {
        let ep = |h: &str| CfEndpoint {
            host: h.into(),
            port: 443,
        };
        let mut cfg = Config::with_secrets(Vec::new());
        cfg.tier_order = vec![Tier::CfProxy, Tier::CfProxyWs];
        cfg.cf_domains = vec![ep("mydomain.com")];
        cfg.cf_shared_domains = vec![ep("alpha.co.uk")];
        let listen = "127.0.0.1:1443".parse().unwrap();
        assert!(!cfg.tier_configured(Tier::CfProxyWs), "off by default");
        let mut t = Table::new();
        let ids = t.routes_for(dc2(), &cfg, listen);
        assert!(ids.iter().all(|&i| t.routes[i].tier == Tier::CfProxy));
        assert_eq!(ids.len(), 2);

        cfg.cfproxy_ws = true;
        cfg.cf_ws_port = 8080;
        assert!(cfg.tier_configured(Tier::CfProxyWs));
        let mut t = Table::new();
        let ids = t.routes_for(dc2(), &cfg, listen);
        let labels: Vec<String> = ids.iter().map(|&i| t.routes[i].label()).collect();
        assert_eq!(
            labels,
            vec![
                "cfproxy:DC2 kws2.my…:443",
                "cfproxy:DC2 kws2.alpha.co.uk:443",
                "cfproxy-ws:DC2 ws://kws2.my…:8080",
                "cfproxy-ws:DC2 ws://kws2.alpha.co.uk:8080"
            ]
        );
        let mut resolve = |_: &str| Some("127.0.0.5".parse().unwrap());
        let tls = t.routes[ids[0]].dial_specs(&mut resolve).remove(0);
        let plain = t.routes[ids[2]].dial_specs(&mut resolve).remove(0);
        assert_eq!(tls.addr, "127.0.0.5:443".parse().unwrap());
        assert_eq!(plain.addr, "127.0.0.5:8080".parse().unwrap());
        match (&tls.kind, &plain.kind) {
            (DialKind::Ws { plain: false, .. }, DialKind::Ws { plain: true, .. }) => {}
            other => panic!("{other:?}"),
        }
        // Apart from TLS, the same request: Host, path, subprotocol, Origin.
        let strip = |k: &DialKind| match k {
            DialKind::Ws {
                host,
                sni,
                path,
                subprotocol,
                origin,
                ..
            } => (
                host.clone(),
                sni.clone(),
                path.clone(),
                *subprotocol,
                *origin,
            ),
            other => panic!("{other:?}"),
        };
        assert_eq!(strip(&tls.kind), strip(&plain.kind));
        assert_eq!(
            t.routes[ids[2]].spec_label(&plain),
            "ws://kws2.my…@127.0.0.5:8080"
        );
        let shared = t.routes[ids[3]].dial_specs(&mut resolve).remove(0);
        assert_eq!(
            t.routes[ids[3]].spec_label(&shared),
            "ws://kws2.alpha.co.uk@127.0.0.5:8080"
        );

        // Without a CF domain the switch alone gives nothing.
        cfg.cf_domains.clear();
        cfg.cf_shared_domains.clear();
        assert!(!cfg.tier_configured(Tier::CfProxyWs));
    }

    #[test]
    fn shared_list_domains_are_labelled_in_full_own_domains_redacted() {
        let mut cfg = Config::with_secrets(Vec::new());
        cfg.tier_order = vec![Tier::CfProxy];
        let ep = |h: &str| CfEndpoint {
            host: h.into(),
            port: 443,
        };
        cfg.cf_domains = vec![ep("mydomain.com")];
        cfg.cf_shared_domains = vec![ep("alpha.co.uk"), ep("bravo.co.uk")];
        let mut t = Table::new();
        let ids = t.routes_for(dc2(), &cfg, "127.0.0.1:1443".parse().unwrap());
        let labels: Vec<String> = ids.iter().map(|&i| t.routes[i].label()).collect();
        assert_eq!(
            labels,
            vec![
                "cfproxy:DC2 kws2.my…:443",
                "cfproxy:DC2 kws2.alpha.co.uk:443",
                "cfproxy:DC2 kws2.bravo.co.uk:443"
            ]
        );
        let mut resolve = |_: &str| Some("127.0.0.5".parse().unwrap());
        let mut spec = |i: usize| t.routes[ids[i]].dial_specs(&mut resolve).remove(0);
        assert_eq!(
            t.routes[ids[0]].spec_label(&spec(0)),
            "kws2.my…@127.0.0.5:443"
        );
        assert_eq!(
            t.routes[ids[1]].spec_label(&spec(1)),
            "kws2.alpha.co.uk@127.0.0.5:443"
        );
    }

    #[test]
    fn cfproxy_media_tries_the_dash_one_name_first_non_media_only_the_base() {
        let id = |i: i16| DcId::from_index(i).unwrap();
        let all = [
            "kws2.example.com",
            "kws2-1.example.com",
            "kws203.example.com",
            "kws203-1.example.com",
        ];
        assert_eq!(cf_hosts(id(2), &all), vec!["kws2.example.com"]);
        assert_eq!(
            cf_hosts(id(-2), &all),
            vec!["kws2-1.example.com", "kws2.example.com"]
        );
        // DC 203 keeps its raw number on Cloudflare names (§4.3), media or not.
        assert_eq!(cf_hosts(id(203), &all), vec!["kws203.example.com"]);
        assert_eq!(
            cf_hosts(id(-203), &all),
            vec!["kws203-1.example.com", "kws203.example.com"]
        );
        // No `-1` record: the base name alone; nothing resolved: no spec (skipped, not waited on).
        assert_eq!(
            cf_hosts(id(-2), &["kws2.example.com"]),
            vec!["kws2.example.com"]
        );
        assert_eq!(
            cf_hosts(id(-2), &["kws2-1.example.com"]),
            vec!["kws2-1.example.com"]
        );
        assert!(cf_hosts(id(-2), &[]).is_empty());
    }

    #[test]
    fn cfproxy_routes_name_both_hosts_for_dns_and_keep_kws_in_labels() {
        let mut cfg = Config::with_secrets(Vec::new());
        cfg.tier_order = vec![Tier::CfProxy];
        cfg.cf_domains = vec![CfEndpoint {
            host: "mydomain.com".into(),
            port: 443,
        }];
        let listen = "127.0.0.1:1443".parse().unwrap();
        let mut t = Table::new();
        let media = t.routes_for(DcId::from_index(-4).unwrap(), &cfg, listen)[0];
        let plain = t.routes_for(DcId::from_index(4).unwrap(), &cfg, listen)[0];
        assert_eq!(
            t.routes[media].hosts(),
            vec!["kws4-1.mydomain.com", "kws4.mydomain.com"]
        );
        assert_eq!(t.routes[media].host(), Some("kws4.mydomain.com"));
        assert_eq!(t.routes[plain].hosts(), vec!["kws4.mydomain.com"]);
        assert_eq!(t.routes[plain].label(), "cfproxy:DC4 kws4.my…:443");
        assert_eq!(t.routes[media].label(), "cfproxy:DC4m kws4.my…:443");
        let mut resolve = |_: &str| Some("127.0.0.5".parse().unwrap());
        let labels: Vec<String> = t.routes[media]
            .dial_specs(&mut resolve)
            .iter()
            .map(|s| spec_label(s, Tier::CfProxy))
            .collect();
        assert_eq!(
            labels,
            vec!["kws4-1.my…@127.0.0.5:443", "kws4.my…@127.0.0.5:443"]
        );
        // A test DC has no CF records.
        assert!(t
            .routes_for(DcId::from_index(-10002).unwrap(), &cfg, listen)
            .is_empty());
    }

    #[test]
    fn mtproto_routes_one_per_proxy_per_dc_never_to_ourselves_and_never_showing_the_key() {
        let key = "0123456789abcdef0123456789abcdef";
        let mut cfg = Config::with_secrets(Vec::new());
        cfg.tier_order = vec![Tier::Mtproto];
        cfg.mtproto_proxies = [
            format!("far.someone.example.net:443:dd{key}"),
            format!("[::1]:8443:{key}"),
            format!("127.0.0.1:1443:{key}"), // our own listener
        ]
        .iter()
        .map(|s| MtprotoProxy::parse(s).unwrap())
        .collect();
        let listen = "0.0.0.0:1443".parse().unwrap();
        let mut t = Table::new();
        let ids = t.routes_for(dc2(), &cfg, listen);
        assert_eq!(ids.len(), 2, "the self-loop is not a route");
        let media = t.routes_for(DcId::from_index(-2).unwrap(), &cfg, listen);
        assert_eq!(media.len(), 2, "one per proxy per DC");
        let labels: Vec<String> = ids.iter().map(|&i| t.routes[i].label()).collect();
        assert_eq!(
            labels,
            [
                "mtproto:DC2 fa…example.net:443/dd",
                "mtproto:DC2 [::1]:8443/plain"
            ]
        );
        assert!(labels.iter().all(|l| !l.contains(key)));
        // A name is resolved (and skipped until it is); a literal needs no DNS.
        let named = &t.routes[ids[0]];
        assert_eq!(named.host(), Some("far.someone.example.net"));
        assert!(named.dial_specs(&mut |_| None).is_empty());
        let spec = named.dial_specs(&mut |_| Some("127.0.0.9".parse().unwrap()));
        assert_eq!(spec[0].addr, "127.0.0.9:443".parse().unwrap());
        match &spec[0].kind {
            DialKind::Mtproto { secret, .. } => assert_eq!(secret.key_hex(), key),
            other => panic!("{other:?}"),
        }
        // The dial carries the name: a `socks5h://` outbound proxy is asked for it (the spec's
        // address is then the UNRESOLVED placeholder) and the bypass list matches it.
        assert_eq!(spec[0].kind.host(), Some("far.someone.example.net"));
        assert!(!format!("{:?}", spec[0]).contains(key));
        // `--mtproto-hello`: classic unless said; the setting reaches every mtproto dial.
        let hello = |t: &Table, id: usize| match &t.routes[id].dial_specs(&mut |_| None)[..] {
            [DialSpec {
                kind: DialKind::Mtproto { hello, .. },
                ..
            }, ..] => Some(*hello),
            _ => None,
        };
        use crate::mtproto::faketls::client::Shape;
        assert_eq!(hello(&t, ids[1]), Some(Shape::ChromeClassic));
        cfg.mtproto_hello = Shape::Chrome;
        let mut t = Table::new();
        let ids = t.routes_for(dc2(), &cfg, listen);
        assert_eq!(hello(&t, ids[1]), Some(Shape::Chrome));
        let literal = &t.routes[ids[1]];
        assert_eq!(literal.host(), None);
        assert_eq!(
            literal.dial_specs(&mut |_| None)[0].addr,
            "[::1]:8443".parse().unwrap()
        );
        // A name that resolves to our own listener is dropped at dial time.
        assert!(named
            .specs_for(
                &mut |_| Some("127.0.0.1".parse().unwrap()),
                "0.0.0.0:443".parse().unwrap()
            )
            .is_empty());
        // A name left for a `socks5h://` proxy (the UNRESOLVED placeholder 0.0.0.0) is not our
        // listener, also when we listen on 0.0.0.0 and the same port.
        let unresolved = crate::net::outbound::UNRESOLVED;
        let specs = named.specs_for(&mut |_| Some(unresolved), "0.0.0.0:443".parse().unwrap());
        assert_eq!(specs.len(), 1);
        assert_eq!(specs[0].addr, SocketAddr::new(unresolved, 443));
        let names = private_names(&cfg);
        assert_eq!(
            names,
            vec![(
                "far.someone.example.net".to_string(),
                "fa…example.net".to_string()
            )]
        );
    }

    #[test]
    fn cfproxy_through_an_edge_dials_the_edge_with_the_names_unchanged() {
        let mut cfg = Config::with_secrets(Vec::new());
        cfg.tier_order = vec![Tier::CfProxy];
        cfg.cf_domains = vec![CfEndpoint {
            host: "mydomain.com".into(),
            port: 8443,
        }];
        cfg.cf_ips = vec![crate::route::edges::parse_cf_ip("127.0.0.7").unwrap()];
        let listen = "127.0.0.1:1443".parse().unwrap();
        let mut t = Table::new();
        let mut rng = crate::rng::Rng::from_seed([1; 48]);
        let (edges, _) = Edges::new(&cfg.cf_ips, 3, &mut rng);
        t.set_edges(edges, &cfg, listen);
        let media = t.routes_for(DcId::from_index(-4).unwrap(), &cfg, listen);
        assert_eq!(media.len(), 1, "one route per edge, no DNS route beside it");
        let r = &t.routes[media[0]];
        assert_eq!(r.label(), "cfproxy:DC4m kws4.my…@127.0.0.7:8443");
        assert_eq!(r.edge(), Some("127.0.0.7".parse().unwrap()));
        // DNS is asked only whether the media name exists; the dial goes to the edge.
        assert_eq!(r.hosts(), vec!["kws4-1.mydomain.com"]);
        let hosts = |known: bool| -> Vec<(String, SocketAddr)> {
            let mut resolve = |_: &str| known.then(|| "10.9.9.9".parse().unwrap());
            r.dial_specs(&mut resolve)
                .into_iter()
                .map(|s| match s.kind {
                    DialKind::Ws { host, .. } => (host, s.addr),
                    other => panic!("{other:?}"),
                })
                .collect()
        };
        let at: SocketAddr = "127.0.0.7:8443".parse().unwrap();
        assert_eq!(
            hosts(true),
            vec![
                ("kws4-1.mydomain.com".to_string(), at),
                ("kws4.mydomain.com".to_string(), at)
            ]
        );
        assert_eq!(hosts(false), vec![("kws4.mydomain.com".to_string(), at)]);
    }

    /// Review (issue 22 part 4): `--cf-ip` edges apply to the `cfproxy-ws` tier as to
    /// `cfproxy` (docs/protocol.md §4.3): one route per edge, dialled at the edge on
    /// `--cf-ws-port` as plain `ws://`, the names unchanged; labelled `ws://…@edge:port`.
    #[test]
    fn cfproxy_ws_through_an_edge_dials_the_edge_on_the_ws_port() {
        let mut cfg = Config::with_secrets(Vec::new());
        cfg.tier_order = vec![Tier::CfProxy, Tier::CfProxyWs];
        cfg.cfproxy_ws = true;
        cfg.cf_ws_port = 8080;
        cfg.cf_domains = vec![CfEndpoint {
            host: "mydomain.com".into(),
            port: 443,
        }];
        cfg.cf_ips = vec![crate::route::edges::parse_cf_ip("127.0.0.7").unwrap()];
        let listen = "127.0.0.1:1443".parse().unwrap();
        let mut t = Table::new();
        let mut rng = crate::rng::Rng::from_seed([1; 48]);
        let (edges, _) = Edges::new(&cfg.cf_ips, 3, &mut rng);
        t.set_edges(edges, &cfg, listen);
        let ids = t.routes_for(dc2(), &cfg, listen);
        let labels: Vec<String> = ids.iter().map(|&i| t.routes[i].label()).collect();
        assert_eq!(
            labels,
            vec![
                "cfproxy:DC2 kws2.my…@127.0.0.7:443",
                "cfproxy-ws:DC2 ws://kws2.my…@127.0.0.7:8080"
            ]
        );
        let r = &t.routes[ids[1]];
        assert_eq!(r.edge(), Some("127.0.0.7".parse().unwrap()));
        let specs = r.dial_specs(&mut |_| None);
        assert_eq!(specs.len(), 1, "the edge needs no DNS answer: {specs:?}");
        assert_eq!(specs[0].addr, "127.0.0.7:8080".parse().unwrap());
        match &specs[0].kind {
            DialKind::Ws {
                host,
                sni: None,
                plain: true,
                ..
            } => assert_eq!(host, "kws2.mydomain.com"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn redaction_hides_private_names() {
        assert_eq!(redact("myproxy.someone.workers.dev"), "my…workers.dev");
        assert_eq!(redact("127.0.0.1"), "127.0.0.1");
        assert_eq!(redact("localhost"), "lo…");
        assert_eq!(redact_kws("kws2-1.my.example.org"), "kws2-1.my…example.org");
        assert_eq!(redact_kws("kws2.mydomain.com"), "kws2.my…");
        assert_eq!(redact_kws("other.mydomain.com"), "ot…mydomain.com");
    }
}
