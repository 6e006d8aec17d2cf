//! The outbound proxy (`--outbound-proxy`): SOCKS5 or HTTP CONNECT between our TCP connect and
//! whatever a route speaks next (TLS + upgrade, or raw obfuscated2), docs/protocol.md §4.7.
//!
//! Owns: the proxy URL grammar ([`OutboundProxy::parse`]), the choice per dial ([`Outbound::via`]),
//! the setting in force ([`Active`]: built by [`activate`], kept by its owner — the reactor's
//! `Shared`, the `check` applet — and passed to `net::dial` for every dial: sessions, probes,
//! pool fills, `check` alike) and the address of a proxy given by name ([`resolve_proxy`], fed
//! by the caller's resolver). No global state: every question takes the setting as a
//! parameter. The handshakes are sans-IO cores in
//! the submodules [`socks5`] (RFC 1928, RFC 1929) and [`http`] (RFC 9110 §9.3.6 CONNECT);
//! [`Handshake`] joins them for the dialler; the bypass list (`--no-outbound-proxy-for`,
//! [`Bypass`]) is the submodule `bypass`. Nothing here touches a socket.

mod bypass;
pub mod http;
pub mod socks5;

pub use bypass::{check_bypass_item, Bypass};

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::rc::Rc;

use crate::error::Failure;

/// The protocol spoken to the outbound proxy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scheme {
    /// `socks5://`: SOCKS5 (RFC 1928) with the destination as an IP address.
    Socks5,
    /// `socks5h://`: SOCKS5 where the proxy resolves names: a Worker's or CF domain's host
    /// name is sent to the proxy as is (ATYP 3), and needs no local DNS answer.
    Socks5h,
    /// `http://`: HTTP/1.1 `CONNECT host:port` (RFC 9110 §9.3.6).
    Http,
}

impl Scheme {
    /// The URL scheme, as written.
    pub fn name(self) -> &'static str {
        match self {
            Scheme::Socks5 => "socks5",
            Scheme::Socks5h => "socks5h",
            Scheme::Http => "http",
        }
    }
}

/// An outbound proxy every upstream TCP connection goes through (docs/protocol.md §4.7).
#[derive(Clone, PartialEq, Eq)]
pub struct OutboundProxy {
    /// Protocol spoken to it.
    pub scheme: Scheme,
    /// Its address: the URL's IP literal (`localhost` means 127.0.0.1), or for a proxy given
    /// by name [`UNRESOLVED`] with the URL's port until [`resolve_proxy`] sets the answer.
    pub addr: SocketAddr,
    /// The URL's host name (canonical: lower case, no trailing dot) when it is not an IP
    /// literal or `localhost`; resolved by the reactor's own non-blocking resolver.
    pub host: Option<String>,
    /// `user:pass` from the URL, percent-decoded (SOCKS5 RFC 1929 or HTTP Basic).
    pub auth: Option<(String, String)>,
}

/// The password never appears in logs or `Debug` output.
impl fmt::Debug for OutboundProxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

/// `scheme://[user@]addr` (or `host:port` for a proxy given by name) with the password left
/// out.
impl fmt::Display for OutboundProxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://", self.scheme.name())?;
        if let Some((user, _)) = &self.auth {
            write!(f, "{user}:***@")?;
        }
        match &self.host {
            Some(h) => write!(f, "{h}:{}", self.addr.port()),
            None => write!(f, "{}", self.addr),
        }
    }
}

impl OutboundProxy {
    /// Parses `socks5://[user:pass@]host:port`, `socks5h://…` or `http://[user:pass@]host:port`
    /// (a trailing `/` is allowed). `host` is an IP literal (IPv6 in brackets), `localhost`
    /// (127.0.0.1) or a host name, which the reactor resolves without blocking (hosts file,
    /// then the nameservers; never through the proxy) and keeps fresh: until it has an answer,
    /// dials that need the proxy fail as `proxy-unreachable`. `user` and `pass` are
    /// percent-decoded, each at most 255 bytes (the SOCKS5 limit, RFC 1929).
    ///
    /// Errors: a message naming what is wrong (`https://` is refused: TLS to the proxy is not
    /// supported).
    pub fn parse(url: &str) -> Result<OutboundProxy, String> {
        let (scheme, rest) = url.split_once("://").ok_or_else(|| {
            format!(
                "{:?}: expected socks5://, socks5h:// or http://",
                without_credentials(url)
            )
        })?;
        let scheme = match scheme.to_ascii_lowercase().as_str() {
            "socks5" => Scheme::Socks5,
            "socks5h" => Scheme::Socks5h,
            "http" => Scheme::Http,
            "https" => {
                return Err(
                    "https:// proxies are not supported (TLS to the proxy); use \
                            http:// (CONNECT) or socks5://"
                        .into(),
                )
            }
            other => {
                return Err(format!(
                    "unknown proxy scheme {other:?}: expected socks5, socks5h or http"
                ))
            }
        };
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        if rest.contains('/') || rest.contains('?') || rest.contains('#') {
            return Err("the proxy URL takes no path: scheme://[user:pass@]host:port".into());
        }
        let (auth, hostport) = match rest.rsplit_once('@') {
            Some((cred, hp)) => {
                let (user, pass) = cred
                    .split_once(':')
                    .ok_or("credentials must be user:pass")?;
                let user = percent_decode(user)?;
                let pass = percent_decode(pass)?;
                if user.is_empty() || user.len() > 255 || pass.len() > 255 {
                    return Err("user must be 1 to 255 bytes and pass at most 255".into());
                }
                (Some((user, pass)), hp)
            }
            None => (None, rest),
        };
        let (host, port) = hostport
            .rsplit_once(':')
            .ok_or("the proxy needs a port: host:port")?;
        let port: u16 = port
            .parse()
            .ok()
            .filter(|&p| p != 0)
            .ok_or_else(|| format!("bad proxy port {port:?}"))?;
        let bracketed = host.strip_prefix('[').and_then(|h| h.strip_suffix(']'));
        let host = bracketed.unwrap_or(host);
        let (ip, name) = if host.eq_ignore_ascii_case("localhost") && bracketed.is_none() {
            (IpAddr::V4(Ipv4Addr::LOCALHOST), None)
        } else if let Ok(ip) = host.parse::<IpAddr>() {
            (ip, None)
        } else if bracketed.is_some() {
            return Err(format!("the proxy's host [{host}] is not an IPv6 address"));
        } else if host.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
            // `192.168.1.300`, `10.0.0`: a mistyped address, never a name to look up.
            return Err(format!(
                "the proxy's host {host:?} is not a valid IP address"
            ));
        } else {
            let name = crate::dns::canonical_name(host)
                .map_err(|e| format!("the proxy's host {host:?}: {e}"))?;
            (UNRESOLVED, Some(name))
        };
        if ip.is_unspecified() && name.is_none() {
            return Err(format!(
                "the proxy's host {host:?} is not an address to connect to"
            ));
        }
        Ok(OutboundProxy {
            scheme,
            addr: SocketAddr::new(ip, port),
            host: name,
            auth,
        })
    }
}

/// `url` for an error message, anything before its last `@` shown as `***` (never the
/// password).
fn without_credentials(url: &str) -> String {
    match url.rsplit_once('@') {
        Some((_, rest)) => format!("***@{rest}"),
        None => url.to_string(),
    }
}

/// Decodes `%XX` escapes (RFC 3986 §2.1) into UTF-8. Errors: a bad escape or invalid UTF-8.
fn percent_decode(s: &str) -> Result<String, String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = b
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or("bad percent escape in the credentials (%XX, two hex digits)")?;
            out.push(hex);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| "credentials are not UTF-8 after decoding".into())
}

/// The outbound setting of a run: the proxy and its exceptions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outbound {
    /// The proxy.
    pub proxy: OutboundProxy,
    /// Destinations dialled directly.
    pub bypass: Bypass,
}

/// How one dial goes through the proxy: connect to `proxy.addr`, then ask for `target`.
#[derive(Clone, Debug)]
pub struct Via {
    /// The proxy.
    pub proxy: OutboundProxy,
    /// The destination the proxy is asked to connect to.
    pub target: Target,
}

/// A destination as the proxy is asked for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// An address we resolved (or a route's fixed address).
    Addr(SocketAddr),
    /// A host name and port the proxy resolves (`socks5h://`).
    Name(String, u16),
}

/// `ip:port` (IPv6 in brackets) or `name:port`, as in a CONNECT request line.
impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Addr(a) => write!(f, "{a}"),
            Target::Name(h, p) => write!(f, "{h}:{p}"),
        }
    }
}

/// The address a route's dial spec carries for a host name left for the proxy to resolve
/// ([`remote_name`]): `0.0.0.0` (never a real destination).
pub const UNRESOLVED: IpAddr = IpAddr::V4(Ipv4Addr::UNSPECIFIED);

/// For route planning: `Some(UNRESOLVED)` when the outbound proxy `active` resolves names
/// (`socks5h://`) and `host` is not bypassed, so the route needs no local DNS answer and the
/// dial sends the proxy the name; `None` otherwise (resolve locally as usual).
pub fn remote_name(active: Option<&Outbound>, host: &str) -> Option<IpAddr> {
    let o = active?;
    (o.proxy.scheme == Scheme::Socks5h && !o.bypass.matches_name(host)).then_some(UNRESOLVED)
}

impl Outbound {
    /// The outbound setting of `proxy` with the bypass items `no_proxy_for`; `None` without a
    /// proxy. Errors: a bad bypass item (`Bypass::parse`).
    pub fn new(
        proxy: Option<&OutboundProxy>,
        no_proxy_for: &[String],
    ) -> Result<Option<Outbound>, String> {
        let bypass = Bypass::parse(no_proxy_for)?;
        Ok(proxy.map(|p| Outbound {
            proxy: p.clone(),
            bypass,
        }))
    }

    /// The hop for a dial to `target` (SNI name `host`), or `None` when it goes direct: it is
    /// bypassed, or it is the proxy's own address (never looped through the proxy). A target
    /// of [`UNRESOLVED`] with a `host` asks the proxy for the name (`socks5h://`).
    pub fn via(&self, target: SocketAddr, host: Option<&str>) -> Option<Via> {
        let to_proxy = target == self.proxy.addr && target.ip() != UNRESOLVED;
        if to_proxy || self.bypass.matches(target.ip(), host) {
            return None;
        }
        let target = match host {
            Some(h) if target.ip() == UNRESOLVED => Target::Name(h.to_string(), target.port()),
            _ => Target::Addr(target),
        };
        Some(Via {
            proxy: self.proxy.clone(),
            target,
        })
    }
}

/// The outbound setting in force: `None` = direct. Its owner (the reactor's `Shared`, the
/// `check` applet) replaces it whole ([`activate`], [`resolve_proxy`]) and hands it to every
/// dial; a copy held elsewhere (the ladder's) is refreshed by the owner with the new value.
pub type Active = Option<Rc<Outbound>>;

/// Makes the outbound setting `proxy` (`--outbound-proxy`) with the `bypass` items
/// (`--no-outbound-proxy-for`) the one in `active` (at start and on reload), and says so in the
/// log when it changed. The bypass items were checked when the configuration was parsed; one
/// that still fails is dropped with a warning. Takes the two settings, not the `Config`, so
/// the configuration imports this module and not the other way round. Returns whether the
/// setting changed.
pub fn activate(
    active: &mut Active,
    proxy: Option<&OutboundProxy>,
    no_proxy_for: &[String],
) -> bool {
    let bypass = Bypass::parse(no_proxy_for).unwrap_or_else(|e| {
        log::warn!("--no-outbound-proxy-for ignored: {e}");
        Bypass::default()
    });
    let mut out = proxy.map(|p| Outbound {
        proxy: p.clone(),
        bypass,
    });
    let old = active.as_deref();
    if let (Some(new), Some(old)) = (out.as_mut(), old) {
        // Same proxy name: keep the address already resolved (a reload does not unlearn it).
        if new.proxy.host.is_some() && new.proxy.host == old.proxy.host {
            new.proxy.addr.set_ip(old.proxy.addr.ip());
        }
    }
    if old == out.as_ref() {
        return false;
    }
    if let Some(o) = &out {
        log::info!(
            "outbound proxy {}: every upstream connection goes through it{}",
            o.proxy,
            if no_proxy_for.is_empty() {
                String::new()
            } else {
                format!(" except to {}", no_proxy_for.join(","))
            }
        );
    } else {
        log::info!("outbound proxy off: upstream connections are direct");
    }
    *active = out.map(Rc::new);
    true
}

/// Parses an `--outbound-proxy` value: a URL ([`OutboundProxy::parse`]) or `none` / `direct` /
/// `off` for no proxy (to override a configuration file).
///
/// Errors: the URL's.
pub fn parse_flag(s: &str) -> Result<Option<OutboundProxy>, String> {
    if ["none", "direct", "off"]
        .iter()
        .any(|w| s.eq_ignore_ascii_case(w))
    {
        return Ok(None);
    }
    OutboundProxy::parse(s).map(Some)
}

/// True when a dial to `target` (SNI name `host`) would go through the outbound proxy
/// `active` and that proxy, given by name, has no address yet: background work waits for it
/// (as for a route name not resolved yet) instead of failing.
pub fn waits_for_proxy(active: Option<&Outbound>, target: SocketAddr, host: Option<&str>) -> bool {
    active.is_some_and(|o| {
        o.proxy.host.is_some() && o.proxy.addr.ip() == UNRESOLVED && o.via(target, host).is_some()
    })
}

/// True when a dial to `target` (SNI name `host`) goes through the outbound proxy `active`
/// (one is set and the destination is not bypassed).
pub fn goes_via_proxy(active: Option<&Outbound>, target: SocketAddr, host: Option<&str>) -> bool {
    active.is_some_and(|o| o.via(target, host).is_some())
}

/// The host name of the outbound proxy `active`, when it was given by name (for the caller's
/// resolver to watch).
pub fn proxy_host(active: Option<&Outbound>) -> Option<String> {
    active.and_then(|o| o.proxy.host.clone())
}

/// Gives the outbound proxy in `active`, when it was given by name, the address `lookup` has
/// for that name now (the caller's resolver cache: no I/O here). A new address applies to
/// later dials (those in flight keep theirs) and is logged once; no answer keeps the last
/// one. Returns whether the address changed.
pub fn resolve_proxy(active: &mut Active, mut lookup: impl FnMut(&str) -> Option<IpAddr>) -> bool {
    let Some(o) = active.as_deref() else {
        return false;
    };
    let Some(host) = o.proxy.host.as_deref() else {
        return false;
    };
    match lookup(host) {
        Some(ip) if ip != o.proxy.addr.ip() && !ip.is_unspecified() => {
            let mut next = o.clone();
            next.proxy.addr.set_ip(ip);
            log::info!("outbound proxy {host} is at {ip}");
            crate::logging::events::emit(|| {
                crate::logging::events::Event::new("outbound_resolved")
                    .str("host", host)
                    .str("ip", &ip.to_string())
            });
            *active = Some(Rc::new(next));
            true
        }
        _ => false,
    }
}

/// A handshake with the outbound proxy failed. Each maps to a [`Failure`] class.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProxyError {
    /// The proxy refused our credentials (SOCKS5 method 0xFF or RFC 1929 status ≠ 0, HTTP 407).
    Auth(String),
    /// SOCKS5 reply code ≠ 0 (RFC 1928 §6): the proxy could not or would not reach the target.
    Socks(u8),
    /// HTTP status of the CONNECT other than 2xx and 407.
    Http(u16),
    /// The proxy broke the protocol (wrong version, oversize response, closed mid-handshake).
    Protocol(String),
}

impl ProxyError {
    /// The failure class: auth and protocol errors are the proxy's own; a refused destination
    /// counts against the route. SOCKS5 replies 3 (network unreachable) and 4 (host
    /// unreachable) are the same facts as a local `ENETUNREACH` / `EHOSTUNREACH` (the path's
    /// network, seen from the proxy), so they get the same classes: no route is cooled for
    /// them.
    pub fn failure(&self) -> Failure {
        match self {
            ProxyError::Auth(_) => Failure::ProxyAuth,
            ProxyError::Socks(3) => Failure::NetUnreachable,
            ProxyError::Socks(4) => Failure::HostUnreachable,
            ProxyError::Socks(code) => Failure::ProxySocks(*code),
            ProxyError::Http(code) => Failure::ProxyHttp(*code),
            ProxyError::Protocol(_) => Failure::ProxyProtocol,
        }
    }
}

impl fmt::Display for ProxyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProxyError::Auth(why) => write!(f, "outbound proxy refused the credentials: {why}"),
            ProxyError::Socks(code) => write!(
                f,
                "outbound proxy could not connect: SOCKS5 reply {code} ({})",
                socks5::reply_name(*code)
            ),
            ProxyError::Http(code) => write!(f, "outbound proxy answered CONNECT with {code}"),
            ProxyError::Protocol(why) => write!(f, "outbound proxy protocol error: {why}"),
        }
    }
}

/// Progress of a handshake core.
#[derive(Debug, PartialEq, Eq)]
pub enum Progress {
    /// Needs more bytes from the proxy (at most [`Handshake::want`]) or has bytes to send.
    More,
    /// The tunnel is open: what follows on the socket is the destination's.
    Done,
}

/// A SOCKS5 or HTTP CONNECT handshake in progress (sans-IO: the dialler moves the bytes).
#[derive(Debug)]
pub enum Handshake {
    /// SOCKS5.
    Socks5(socks5::Socks5),
    /// HTTP CONNECT.
    Http(http::Connect),
}

impl Handshake {
    /// The handshake `via` needs, its first bytes queued.
    pub fn new(via: &Via) -> Handshake {
        let auth = via
            .proxy
            .auth
            .as_ref()
            .map(|(u, p)| (u.as_str(), p.as_str()));
        match via.proxy.scheme {
            Scheme::Socks5 | Scheme::Socks5h => {
                Handshake::Socks5(socks5::Socks5::new(&via.target, auth))
            }
            Scheme::Http => Handshake::Http(http::Connect::new(&via.target, auth)),
        }
    }

    /// Bytes waiting to be written to the proxy (empty = none).
    pub fn pending(&self) -> &[u8] {
        match self {
            Handshake::Socks5(s) => s.pending(),
            Handshake::Http(h) => h.pending(),
        }
    }

    /// Marks `n` bytes of [`Handshake::pending`] as written.
    pub fn sent(&mut self, n: usize) {
        match self {
            Handshake::Socks5(s) => s.sent(n),
            Handshake::Http(h) => h.sent(n),
        }
    }

    /// How many bytes the core can take now without reading past the end of the proxy's
    /// answer (0 while it has nothing to read for). Reading at most this much keeps the
    /// destination's first bytes on the socket.
    pub fn want(&self) -> usize {
        match self {
            Handshake::Socks5(s) => s.want(),
            Handshake::Http(h) => h.want(),
        }
    }

    /// True while the answer awaited is the proxy's own, before it has been asked to reach
    /// the destination (SOCKS5's method choice and credentials status): silence then is the
    /// proxy's failure. HTTP CONNECT has no such answer (the proxy replies once the
    /// destination answered), so it is never.
    pub fn awaits_proxy(&self) -> bool {
        match self {
            Handshake::Socks5(s) => s.awaits_proxy(),
            Handshake::Http(_) => false,
        }
    }

    /// Feeds bytes read from the proxy (at most [`Handshake::want`]).
    ///
    /// Errors: the class of the refusal or protocol error.
    pub fn feed(&mut self, bytes: &[u8]) -> Result<Progress, ProxyError> {
        match self {
            Handshake::Socks5(s) => s.feed(bytes),
            Handshake::Http(h) => h.feed(bytes),
        }
    }
}

#[cfg(test)]
mod tests;
