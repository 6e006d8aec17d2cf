//! Why things ended: [`CloseReason`] (and the [`Side`] that ended it) for sessions, and
//! [`Failure`] for upstream attempts and probes.
//!
//! One `Copy` vocabulary shared by the session close line, the stats counters, the dialler
//! (`net::dial` classifies I/O errors into a `Failure`) and route health (`route::health` decides
//! what each class means for a route). Nothing here does I/O.

use std::fmt;

/// Which side ended a session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// The Telegram client on the LAN.
    Client,
    /// The upstream (Telegram DC, front, or intermediary).
    Upstream,
    /// The proxy itself (deadline, limit, protocol error).
    Proxy,
}

impl Side {
    /// Lower-case name for logs.
    pub fn name(self) -> &'static str {
        match self {
            Side::Client => "client",
            Side::Upstream => "upstream",
            Side::Proxy => "proxy",
        }
    }
}

/// Why a session was closed. Logged once per session, counted in stats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CloseReason {
    /// Orderly end of stream from the client.
    ClientEof,
    /// Client reset or vanished.
    ClientReset,
    /// Orderly end of stream (or WS close) from upstream.
    UpstreamEof,
    /// Upstream reset, TLS failure or vanished mid-session.
    UpstreamReset,
    /// The WebSocket peer sent a close frame with this code (0 = none given).
    WsClose(u16),
    /// The client did not complete its 64-byte init before `--handshake-timeout`.
    HandshakeTimeout,
    /// The client closed before completing its init.
    HandshakeEof,
    /// The init did not decrypt to a known tag with any secret (wrong secret or garbage).
    BadInit,
    /// The client spoke HTTP to the MTProto port.
    HttpRequest,
    /// The client spoke TLS to the plain MTProto port.
    TlsClientHello,
    /// The DC index in the init is unusable (0) or has no route.
    NoRoute,
    /// Every upstream attempt failed; the client is closed so it can reconnect.
    UpstreamUnreachable,
    /// No payload either way for `--idle-timeout`.
    IdleTimeout,
    /// A transport packet or WS frame broke the protocol (too long, bad opcode…).
    ProtocolError,
    /// The slab was full when the client connected.
    SlabFull,
    /// Socket could not be created (e.g. out of descriptors).
    LocalResource,
    /// A pooled upstream sent nothing within `--pool-first-byte-timeout` and the client's
    /// request was too large to replay; the client is closed so it reconnects.
    UpstreamSilent,
    /// The init's DC index names a DC that is neither in the built-in table nor configured
    /// (`--dc-ip`, `--tcp-dc-ip`): refused at the init, so client input never grows per-DC
    /// state (`route::table::known_dc`).
    UnknownDc,
    /// `--proxy-protocol` is on and the connection did not start with a valid PROXY v1/v2
    /// header within `--handshake-timeout` (missing, malformed, oversize, or cut short).
    ProxyHeader,
    /// The client's address already had `--max-per-ip` sessions.
    PerIpLimit,
    /// The client's address opened connections faster than `--per-ip-rate` allows.
    PerIpRate,
    /// A masked session (a client that is not ours, relayed to the mask host) ended.
    Masked,
    /// A client to be masked could not be: the mask host did not resolve, refused, or did not
    /// answer within `--mask-connect-timeout`.
    MaskUnreachable,
    /// Masking would connect to our own listener (or a connection from one of our own mask
    /// sockets arrived): refused so a client cannot make the proxy loop.
    MaskLoop,
    /// After a fake-TLS handshake the client sent a record we do not relay: a type other than
    /// application_data or change_cipher_spec, an empty application_data record, one over
    /// 16640 bytes, or more than 8 change_cipher_spec records in a row
    /// (`mtproto::faketls::record`).
    TlsRecord,
    /// What came down is not MTProto (`relay::reply`): a reply packet of length 0 or over the
    /// maximum, or a first reply that answers no request of the client's.
    BadReply,
    /// The upstream froze while the client waited for it (`relay::stall`): the session is dead,
    /// and ending it lets the client reconnect (docs/design.md §4 rule 7).
    UpstreamFrozen,
    /// A transparent-mode connection whose original destination is outside Telegram's ranges
    /// (`route::tgranges`): a redirect we did not ask for, or a scan; closed unread.
    NotTelegram,
    /// A transparent-mode connection whose original destination is one of our own listeners
    /// (or that reached the port with no redirect at all): closed so nothing loops.
    DstLoop,
    /// A transparent-mode connection the kernel has no original destination for
    /// (`SO_ORIGINAL_DST` failed: no NAT redirect led it here).
    NoOriginalDst,
    /// A direct-transport client (transparent, SOCKS5) to an address that is in no DC table and
    /// whose init names no DC that can be trusted there (`route::dc_table`).
    UnknownDst,
    /// A SOCKS5 client refused during its exchange (RFC 1928/1929: no acceptable method, wrong
    /// credentials, an unsupported command or address type, a destination outside the DC
    /// table, garbage).
    Socks5Refused,
}

impl CloseReason {
    /// Stable lower-case name for logs and stats.
    pub fn name(self) -> &'static str {
        match self {
            CloseReason::ClientEof => "client-eof",
            CloseReason::ClientReset => "client-reset",
            CloseReason::UpstreamEof => "upstream-eof",
            CloseReason::UpstreamReset => "upstream-reset",
            CloseReason::WsClose(_) => "ws-close",
            CloseReason::HandshakeTimeout => "handshake-timeout",
            CloseReason::HandshakeEof => "handshake-eof",
            CloseReason::BadInit => "bad-init",
            CloseReason::HttpRequest => "http-request",
            CloseReason::TlsClientHello => "tls-to-plain-port",
            CloseReason::NoRoute => "no-route",
            CloseReason::UpstreamUnreachable => "upstream-unreachable",
            CloseReason::IdleTimeout => "idle-timeout",
            CloseReason::ProtocolError => "protocol-error",
            CloseReason::SlabFull => "slab-full",
            CloseReason::LocalResource => "local-resource",
            CloseReason::UpstreamSilent => "upstream-silent",
            CloseReason::UnknownDc => "unknown-dc",
            CloseReason::ProxyHeader => "proxy-header",
            CloseReason::PerIpLimit => "per-ip-limit",
            CloseReason::PerIpRate => "per-ip-rate",
            CloseReason::Masked => "masked",
            CloseReason::MaskUnreachable => "mask-unreachable",
            CloseReason::MaskLoop => "mask-loop",
            CloseReason::TlsRecord => "tls-record",
            CloseReason::BadReply => "bad-reply",
            CloseReason::UpstreamFrozen => "upstream-frozen",
            CloseReason::NotTelegram => "not-telegram",
            CloseReason::DstLoop => "dst-loop",
            CloseReason::NoOriginalDst => "no-original-dst",
            CloseReason::UnknownDst => "unknown-dst",
            CloseReason::Socks5Refused => "socks5-refused",
        }
    }

    /// Which side caused it.
    pub fn side(self) -> Side {
        match self {
            CloseReason::ClientEof
            | CloseReason::ClientReset
            | CloseReason::HandshakeEof
            | CloseReason::BadInit
            | CloseReason::HttpRequest
            | CloseReason::TlsClientHello
            | CloseReason::UnknownDc
            | CloseReason::ProxyHeader
            | CloseReason::TlsRecord
            | CloseReason::NotTelegram
            | CloseReason::DstLoop
            | CloseReason::NoOriginalDst
            | CloseReason::UnknownDst
            | CloseReason::Socks5Refused => Side::Client,
            CloseReason::UpstreamEof
            | CloseReason::UpstreamReset
            | CloseReason::WsClose(_)
            | CloseReason::BadReply => Side::Upstream,
            _ => Side::Proxy,
        }
    }

    /// All reasons, for stats tables (`WsClose` represented once).
    pub const ALL: [CloseReason; 32] = [
        CloseReason::ClientEof,
        CloseReason::ClientReset,
        CloseReason::UpstreamEof,
        CloseReason::UpstreamReset,
        CloseReason::WsClose(0),
        CloseReason::HandshakeTimeout,
        CloseReason::HandshakeEof,
        CloseReason::BadInit,
        CloseReason::HttpRequest,
        CloseReason::TlsClientHello,
        CloseReason::NoRoute,
        CloseReason::UpstreamUnreachable,
        CloseReason::IdleTimeout,
        CloseReason::ProtocolError,
        CloseReason::SlabFull,
        CloseReason::LocalResource,
        CloseReason::UpstreamSilent,
        CloseReason::UnknownDc,
        CloseReason::ProxyHeader,
        CloseReason::PerIpLimit,
        CloseReason::PerIpRate,
        CloseReason::Masked,
        CloseReason::MaskUnreachable,
        CloseReason::MaskLoop,
        CloseReason::TlsRecord,
        CloseReason::BadReply,
        CloseReason::UpstreamFrozen,
        CloseReason::NotTelegram,
        CloseReason::DstLoop,
        CloseReason::NoOriginalDst,
        CloseReason::UnknownDst,
        CloseReason::Socks5Refused,
    ];

    /// Index into [`CloseReason::ALL`].
    pub fn index(self) -> usize {
        let name = self.name();
        CloseReason::ALL
            .iter()
            .position(|r| r.name() == name)
            .unwrap_or(0)
    }
}

impl fmt::Display for CloseReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CloseReason::WsClose(code) => write!(f, "ws-close({code})"),
            other => f.write_str(other.name()),
        }
    }
}

/// How a session's upstream froze (docs/design.md §4 rule 7; decided by `relay::stall`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Freeze {
    /// The kernel's proof: something of ours in flight (retransmissions, keepalive probes) and
    /// no ACK for `--stall-ack-timeout` while the client waited. The field's form: every packet
    /// from the server dropped.
    NoAck,
    /// The application's proof: nothing down for `--stall-timeout` while the client waited
    /// (inside a reply, or after asking twice) though the path ACKs: a middlebox that delivers
    /// nothing.
    Silent,
    /// The client closed after waiting `--stall-give-up` inside a reply.
    GaveUp,
}

impl Freeze {
    /// Every form, in index order.
    pub const ALL: [Freeze; 3] = [Freeze::NoAck, Freeze::Silent, Freeze::GaveUp];

    /// Index into [`Freeze::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    /// Stable lower-case name for logs, `ctl status` and metrics.
    pub fn name(self) -> &'static str {
        match self {
            Freeze::NoAck => "no-ack",
            Freeze::Silent => "silent",
            Freeze::GaveUp => "gave-up",
        }
    }
}

impl fmt::Display for Freeze {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why one upstream attempt failed. Distinct classes, each with a non-empty name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// No TCP/TLS/upgrade completion before the attempt deadline.
    Timeout,
    /// TCP connect refused.
    Refused,
    /// Reset or closed during connect/TLS/upgrade.
    Reset,
    /// TLS handshake or certificate failure.
    Tls,
    /// Non-101 HTTP status on the upgrade (302, 403, 429, 5xx…).
    Http(u16),
    /// 101 but a protocol violation, or closed before the response completed.
    ClosedEarly,
    /// Local failure creating the socket (descriptors exhausted…).
    Local,
    /// A pooled upstream sent nothing within `--pool-first-byte-timeout` of a client's request
    /// (a flushed NAT or conntrack entry leaves it silent, no RST).
    SilentPooled,
    /// Sessions the upstream ended soon after a tiny reply, repeatedly, with no normal session
    /// in between (a front that answers `resPQ` and then closes every session; decided by the
    /// ladder, docs/design.md §4 rule 6).
    ClosedAfterReply,
    /// The upstream went silent while the client waited: no byte down for `--stall-timeout`
    /// after the client asked twice (a session), or a probe that got `resPQ` but not its byte
    /// goal in time (the "16 KB freeze", docs/design.md §4 rule 7).
    Stalled,
    /// A session's downstream was not MTProto (`relay::reply`): a Worker or front that streams
    /// well-formed frames of garbage. Hard, like a TLS error.
    BadReply,
    /// `ENETUNREACH` / `ENETDOWN`: this host has no route to the network (a dead WAN link, no
    /// default route). Says nothing about the route ([`Failure::is_network`]).
    NetUnreachable,
    /// `EHOSTUNREACH`: the destination host cannot be reached (ICMP host unreachable, no ARP
    /// answer), or a SOCKS5 proxy's reply 4 saying the same from where it stands. A fact of
    /// the path to that address, not of the route ([`Failure::is_network`]).
    HostUnreachable,
    /// `EADDRNOTAVAIL` toward an IPv6 address: no local address can reach it (no IPv6 address,
    /// the interface went away). Says nothing about the route ([`Failure::is_network`]).
    AddrUnavailable,
    /// `EADDRNOTAVAIL` toward an IPv4 address (or the outbound proxy): no free local port
    /// for another connection to that address and port (the ephemeral port range is used up
    /// by flows toward it). A local resource, like [`Failure::Local`]: says nothing about the
    /// route or the network.
    LocalPorts,
    /// TCP connected, but TLS or the WS upgrade did not complete before the attempt deadline
    /// (a [`Failure::Timeout`] in the handshake phase: a middlebox stalling the handshake, not
    /// a black-holed address). Hard like `Timeout`; it makes the `front` tier eligible
    /// (docs/design.md §4, domain fronting).
    HandshakeTimeout,
    /// The outbound proxy (`--outbound-proxy`) could not be reached: the TCP connect to it
    /// failed or timed out, or a SOCKS5 proxy never gave its own answer (method choice,
    /// credentials status) before the deadline. The proxy's failure, not the route's
    /// ([`Failure::is_proxy`]).
    ProxyUnreachable,
    /// The outbound proxy refused our credentials (SOCKS5 method/RFC 1929 status, HTTP 407).
    /// Not the route's fault.
    ProxyAuth,
    /// The outbound proxy broke its protocol (garbage, oversize head, closed mid-handshake).
    /// Not the route's fault.
    ProxyProtocol,
    /// The SOCKS5 proxy could not or would not reach the destination: its RFC 1928 reply code
    /// (2 ruleset, 5 refused, 6 TTL expired…). Counts against the route. Replies 3 (network
    /// unreachable) and 4 (host unreachable) are not this class: they are the path's facts,
    /// [`Failure::NetUnreachable`] and [`Failure::HostUnreachable`], as from a local connect.
    ProxySocks(u8),
    /// The HTTP proxy answered CONNECT with this status (403 not allowed, 502 cannot connect…).
    /// Counts against the route.
    ProxyHttp(u16),
}

impl Failure {
    /// True for failures of the outbound proxy itself (unreachable, credentials refused,
    /// protocol garbage): like [`Failure::is_network`], no route is cooled down for them; the
    /// ladder logs the proxy's failure once and counts it.
    pub fn is_proxy(self) -> bool {
        matches!(
            self,
            Failure::ProxyUnreachable | Failure::ProxyAuth | Failure::ProxyProtocol
        )
    }

    /// True for failures of the network path to an address rather than of the route (network
    /// unreachable, host unreachable, no local address for it; from the OS or from a SOCKS5
    /// proxy's reply): health does not cool a route down for them; the ladder keeps them as a
    /// fact of that address (said once), and only when every address tried is unreachable as
    /// the host's network being down (said once per outage).
    pub fn is_network(self) -> bool {
        matches!(
            self,
            Failure::NetUnreachable | Failure::HostUnreachable | Failure::AddrUnavailable
        )
    }

    /// True for failures of this host's own resources (descriptors, local ports): neither the
    /// route's nor the network's.
    pub fn is_local(self) -> bool {
        matches!(self, Failure::Local | Failure::LocalPorts)
    }

    /// Why a class happened, for a log line, where its name alone would leave the reader
    /// guessing (empty otherwise).
    pub fn hint(self) -> &'static str {
        match self {
            Failure::LocalPorts => {
                " (no free local port toward that address: too many connections to one address \
                 and port; see net.ipv4.ip_local_port_range)"
            }
            _ => "",
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Timeout => f.write_str("timeout"),
            Failure::Refused => f.write_str("refused"),
            Failure::Reset => f.write_str("reset"),
            Failure::Tls => f.write_str("tls-error"),
            Failure::Http(code) => write!(f, "http-{code}"),
            Failure::ClosedEarly => f.write_str("closed-early"),
            Failure::Local => f.write_str("local-error"),
            Failure::SilentPooled => f.write_str("pooled-silent"),
            Failure::ClosedAfterReply => f.write_str("closed-after-reply"),
            Failure::Stalled => f.write_str("stalled"),
            Failure::BadReply => f.write_str("bad-reply"),
            Failure::NetUnreachable => f.write_str("network-unreachable"),
            Failure::HostUnreachable => f.write_str("host-unreachable"),
            Failure::AddrUnavailable => f.write_str("no-address"),
            Failure::LocalPorts => f.write_str("local-ports"),
            Failure::HandshakeTimeout => f.write_str("handshake-timeout"),
            Failure::ProxyUnreachable => f.write_str("proxy-unreachable"),
            Failure::ProxyAuth => f.write_str("proxy-auth-refused"),
            Failure::ProxyProtocol => f.write_str("proxy-protocol-error"),
            Failure::ProxySocks(code) => write!(f, "proxy-socks-{code}"),
            Failure::ProxyHttp(code) => write!(f, "proxy-http-{code}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_distinct_and_indexed() {
        for (i, r) in CloseReason::ALL.iter().enumerate() {
            assert_eq!(r.index(), i);
            assert!(!r.name().is_empty());
        }
        let mut names: Vec<_> = CloseReason::ALL.iter().map(|r| r.name()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), CloseReason::ALL.len());
        assert_eq!(CloseReason::WsClose(1000).to_string(), "ws-close(1000)");
        assert_eq!(
            CloseReason::WsClose(1000).index(),
            CloseReason::WsClose(0).index()
        );
        assert_eq!(Failure::Http(302).to_string(), "http-302");
        assert_eq!(Failure::ClosedAfterReply.to_string(), "closed-after-reply");
        assert_eq!(Failure::Stalled.to_string(), "stalled");
        assert_eq!(Failure::HandshakeTimeout.to_string(), "handshake-timeout");
        assert_eq!(Failure::NetUnreachable.to_string(), "network-unreachable");
        assert!(Failure::NetUnreachable.is_network() && Failure::AddrUnavailable.is_network());
        assert!(Failure::HostUnreachable.is_network() && !Failure::Refused.is_network());
        assert_eq!(Failure::LocalPorts.to_string(), "local-ports");
        assert!(Failure::LocalPorts.is_local() && !Failure::LocalPorts.is_network());
        assert!(Failure::LocalPorts
            .hint()
            .contains("too many connections to one address"));
        assert_eq!(Failure::ProxyHttp(403).to_string(), "proxy-http-403");
        assert_eq!(Failure::ProxySocks(5).to_string(), "proxy-socks-5");
        assert!(Failure::ProxyUnreachable.is_proxy() && Failure::ProxyAuth.is_proxy());
        assert!(Failure::ProxyProtocol.is_proxy() && !Failure::ProxyHttp(403).is_proxy());
        assert!(!Failure::ProxySocks(5).is_proxy() && !Failure::Refused.is_proxy());
    }
}
