//! A route's dial specs ([`Route::dial_specs`], [`Route::specs_for`]): for each route, the
//! addresses and per-dial parameters (WS `Host`, SNI, path, subprotocol, `Origin`; the upstream
//! proxy's secret) in the order to try, names resolved from the caller's DNS cache and never
//! our own listener; a route through a `--cf-ip` edge dials the edge with its name unchanged.
//! What a route is, its labels and redaction are `table.rs`'s.

use std::net::{IpAddr, SocketAddr};

use crate::net::dial::{DialKind, DialSpec};

use super::{is_self, Route, Target, WEB_ORIGIN};

impl Route {
    /// Dial specs for this route, in the order to try (two `kws` names for `ws`; for a media
    /// cfproxy route `kwsN-1.<domain>` then `kwsN.<domain>`). `resolve` maps a host name to an
    /// address from the DNS cache; `None` = not known yet or no such record (that name is
    /// skipped for now, never waited on: a media route whose `-1` name does not resolve dials
    /// the base name only).
    pub fn dial_specs(&self, resolve: &mut dyn FnMut(&str) -> Option<IpAddr>) -> Vec<DialSpec> {
        match &self.target {
            Target::Ws { addr, hosts, path } => hosts
                .iter()
                .map(|h| ws_spec(*addr, h, None, path, true, false))
                .collect(),
            Target::Worker { ep, path, edge } => match edge.or_else(|| resolve(&ep.host)) {
                Some(ip) => vec![ws_spec(
                    SocketAddr::new(ip, ep.port),
                    &ep.host,
                    None,
                    path,
                    false,
                    false,
                )],
                None => Vec::new(),
            },
            // Through an edge: both names dialled at the edge (SNI/Host unchanged); the media
            // `-1` name only once DNS says it exists (a domain without it would fail there).
            Target::CfProxy {
                ep,
                media_host,
                path,
                edge: Some(edge),
                plain,
                ..
            } => media_host
                .iter()
                .filter(|m| resolve(m).is_some())
                .chain(std::iter::once(&ep.host))
                .map(|h| ws_spec(SocketAddr::new(*edge, ep.port), h, None, path, true, *plain))
                .collect(),
            Target::CfProxy {
                ep,
                media_host,
                path,
                plain,
                ..
            } => media_host
                .iter()
                .chain(std::iter::once(&ep.host))
                .filter_map(|h| {
                    let ip = resolve(h)?;
                    let addr = SocketAddr::new(ip, ep.port);
                    Some(ws_spec(addr, h, None, path, true, *plain))
                })
                .collect(),
            Target::Mtproto { proxy } => match proxy.ip().or_else(|| resolve(&proxy.host)) {
                Some(ip) => vec![DialSpec {
                    addr: SocketAddr::new(ip, proxy.port),
                    kind: DialKind::Mtproto {
                        host: proxy.host.clone(),
                        secret: proxy.secret.clone(),
                        hello: proxy.hello,
                    },
                }],
                None => Vec::new(),
            },
            Target::Front {
                addr,
                sni,
                hosts,
                path,
            } => hosts
                .iter()
                .map(|h| ws_spec(*addr, h, Some(sni.clone()), path, true, false))
                .collect(),
            Target::Tcp { addr } => vec![DialSpec {
                addr: *addr,
                kind: DialKind::Tcp,
            }],
        }
    }

    /// [`Route::dial_specs`] without any spec that would dial our own listener (a Worker or CF
    /// name can resolve to it).
    pub fn specs_for(
        &self,
        resolve: &mut dyn FnMut(&str) -> Option<IpAddr>,
        listen: SocketAddr,
    ) -> Vec<DialSpec> {
        let mut specs = self.dial_specs(resolve);
        // A name left for a `socks5h://` outbound proxy carries the placeholder address
        // (`outbound::UNRESOLVED`, 0.0.0.0): not our listener even when we listen on 0.0.0.0
        // and the same port.
        specs.retain(|s| {
            s.addr.ip() == crate::net::outbound::UNRESOLVED || !is_self(s.addr, listen)
        });
        specs
    }
}

/// A WebSocket dial of `host` at `addr` (SNI `sni` when fronting, else the host). Toward
/// Telegram's front (`telegram`: the `ws`, `front` and cfproxy tiers) it asks for the `binary`
/// subprotocol and sends Telegram Web's `Origin`; toward a Worker, neither. `plain`: `ws://`,
/// no TLS (the `cfproxy-ws` tier).
fn ws_spec(
    addr: SocketAddr,
    host: &str,
    sni: Option<String>,
    path: &str,
    telegram: bool,
    plain: bool,
) -> DialSpec {
    DialSpec {
        addr,
        kind: DialKind::Ws {
            host: host.to_string(),
            sni,
            path: path.to_string(),
            subprotocol: telegram,
            origin: telegram.then_some(WEB_ORIGIN),
            plain,
        },
    }
}
