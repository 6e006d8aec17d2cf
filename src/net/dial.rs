//! Dialling an upstream: non-blocking TCP connect, then (for WebSocket routes) TLS and the
//! upgrade, or (toward an `ee` upstream MTProto proxy) the fake-TLS client handshake
//! (`mtproto::upstream::hello`), as one resumable state machine. Reads no clock and no global
//! state: the caller passes the outbound setting to [`Dial::start`] and the wall clock and its
//! random generator to [`Dial::drive`] (the hello's timestamp and random, the WebSocket key).
//! The caller owns the deadline (timer wheel) and the token.
//!
//! Used by client sessions (`conn::connect`) and by probes and pool fills (`route::probe`, also
//! run by the `check` applet) alike, so all see the same failure classes. Re-exports
//! [`Upstream`], the connected socket (raw TCP or upgraded TLS) the relay and the pool hold, and
//! TCP keepalive ([`set_keepalive`]), both from `net::upstream`. This module only registers the
//! socket it creates (or moves it to another token) and advances on readiness. With an
//! outbound proxy given (`net::outbound::Active`, `--outbound-proxy`) the TCP connect goes to
//! the proxy and its SOCKS5 / CONNECT handshake runs as one more stage before TLS (or before
//! the raw stream for `tcp`); the caller's deadline covers it too.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use mio::net::TcpStream;
use mio::{Interest, Registry, Token};

use crate::error::Failure;
use crate::mtproto::faketls::client::Shape;
use crate::mtproto::obfs2::{Secret, SecretKind};
use crate::mtproto::upstream::hello::{HelloError, TlsHello};
use crate::net::faketls_stream::FakeTlsStream;
use crate::net::io::{is_reset, read_once, write_once, Io};
use crate::net::outbound::{self, Handshake, Outbound, Progress, Via};
use crate::net::tcp::{self, ConnectState};
use crate::net::tls::{is_tls_error, TlsStream};
pub use crate::net::upstream::{set_keepalive, Upstream};
use crate::net::ws::{self, Upgrade, UpgradeError};
use crate::rng::Rng;

/// What to dial.
#[derive(Clone, Debug)]
pub struct DialSpec {
    /// TCP target.
    pub addr: SocketAddr,
    /// Plain TCP, or TLS + WebSocket upgrade.
    pub kind: DialKind,
}

/// Transport of a dial.
#[derive(Clone, Debug)]
pub enum DialKind {
    /// Raw TCP (obfuscated2 straight to a DC).
    Tcp,
    /// TLS with SNI `sni` (or `host`), then `GET path` upgrade with `Host: host`.
    Ws {
        /// `Host` (and the SNI unless `sni` is set).
        host: String,
        /// TLS SNI when it differs from `host` (domain fronting, docs/protocol.md §4.6): the
        /// certificate is verified against this name, never switched off (only
        /// `--danger-accept-invalid-certs` does that, for every tier alike).
        sni: Option<String>,
        /// Path and query (`/apiws`, `/apiws?dst=…`).
        path: String,
        /// Ask for the `binary` subprotocol (not toward a Worker).
        subprotocol: bool,
        /// `Origin` header, if any.
        origin: Option<&'static str>,
        /// `ws://`: the upgrade and everything after it over plain TCP, no TLS at all (the
        /// `cfproxy-ws` tier, docs/protocol.md §4.3). `sni` is then unused.
        plain: bool,
    },
    /// Raw TCP to an upstream MTProto proxy (docs/protocol.md §4.4); for an `ee` secret the
    /// fake-TLS handshake follows and the upstream is [`Upstream::FakeTls`]. The relay init
    /// (hashed with the secret's key) is the relay's or the probe's, as on `Tcp`.
    Mtproto {
        /// The upstream's host as given (name or IP literal): what a `socks5h://` outbound
        /// proxy is asked to resolve and what `--no-outbound-proxy-for` names match.
        host: String,
        /// The upstream's secret (`Debug` masks the key).
        secret: Secret,
        /// The ClientHello an `ee` secret's handshake sends (`--mtproto-hello`).
        hello: Shape,
    },
    /// TLS only, with SNI `host` (verified like every dial), no upgrade: the caller speaks
    /// plain HTTP/1.1 over it (the shared CF domain list fetch, `reactor::cflist`). Ready as
    /// [`Upstream::Ws`] before the handshake has run: it completes on the caller's first
    /// write and reads.
    Tls {
        /// SNI and the name the certificate must carry.
        host: String,
    },
}

enum State {
    Connecting(TcpStream),
    /// TCP to the outbound proxy is up; its handshake runs.
    Proxying(TcpStream, Box<Handshake>),
    /// Boxed: the WS upgrade's TLS state is ~1.3 KiB, and every dial in flight would carry it.
    Upgrading(Box<Upgrade>),
    /// The fake-TLS handshake toward an `ee` upstream proxy.
    Hello(TcpStream, Box<TlsHello>),
    Moved,
}

/// A dial in progress.
pub struct Dial {
    state: State,
    kind: DialKind,
    /// The outbound proxy hop, if this dial goes through one.
    via: Option<Via>,
}

/// Progress of a dial.
pub enum DialStep {
    /// Waiting for readiness.
    Pending,
    /// Failed; `retry_after` is a 429's `Retry-After` in seconds.
    Failed {
        /// Failure class.
        failure: Failure,
        /// `Retry-After` seconds, if the server sent one.
        retry_after: Option<u32>,
        /// Human detail for the log line.
        detail: String,
    },
    /// Connected (and upgraded for WS).
    Ready(Upstream),
}

impl Dial {
    /// Starts the TCP connect and registers the socket with `token` (readable + writable):
    /// through the outbound proxy of `outbound` unless it bypasses `spec` (`None` = direct).
    ///
    /// Errors: `Failure::Local` when no socket can be made (descriptors), or the class of an
    /// immediate connect error.
    pub fn start(
        spec: &DialSpec,
        outbound: Option<&Outbound>,
        registry: &Registry,
        token: Token,
        keepalive: Duration,
    ) -> Result<Dial, Failure> {
        let via = outbound.and_then(|o| o.via(spec.addr, spec.kind.host()));
        if via.is_none() && spec.addr.ip() == outbound::UNRESOLVED {
            // Planned for the proxy to resolve, and the setting changed since: nothing to dial.
            return Err(Failure::Local);
        }
        let to = via.as_ref().map_or(spec.addr, |v| v.proxy.addr);
        if via.is_some() && to.ip() == outbound::UNRESOLVED {
            // A proxy given by name that has no address yet: the proxy's failure, not the
            // route's (see `outbound::resolve_proxy`).
            return Err(Failure::ProxyUnreachable);
        }
        let mut sock = tcp::start(to).map_err(|e| classify_connect(&e, to, via.is_some()))?;
        set_keepalive(&sock, keepalive);
        registry
            .register(&mut sock, token, Interest::READABLE | Interest::WRITABLE)
            .map_err(|_| Failure::Local)?;
        Ok(Dial {
            state: State::Connecting(sock),
            kind: spec.kind.clone(),
            via,
        })
    }

    /// Moves the dial's socket to another token (a session's losing attempt handed to the
    /// background). Errors: the dial already finished.
    pub fn retoken(&mut self, registry: &Registry, token: Token) -> std::io::Result<()> {
        let sock = match &mut self.state {
            State::Connecting(s) | State::Hello(s, _) | State::Proxying(s, _) => s,
            State::Upgrading(u) => match u.sock() {
                Some(s) => s,
                None => return Err(std::io::ErrorKind::NotConnected.into()),
            },
            State::Moved => return Err(std::io::ErrorKind::NotConnected.into()),
        };
        registry.reregister(sock, token, Interest::READABLE | Interest::WRITABLE)
    }

    /// True once TCP is up (TLS/upgrade running): a failure after this point is not a
    /// connect-level failure.
    pub fn tcp_done(&self) -> bool {
        matches!(self.state, State::Upgrading(_) | State::Hello(..))
    }

    /// The failure class of this dial running out of time: `ProxyUnreachable` while the TCP
    /// connect to an outbound proxy is still pending or the proxy has not given its own answer
    /// (SOCKS5's method choice or credentials status: a stopped or wedged proxy process whose
    /// listen queue still completes TCP handshakes); `HandshakeTimeout` once TCP to the
    /// destination is up (TLS, the upgrade or an `ee` hello stalled: what makes the `front`
    /// tier eligible); else `Timeout` (the TCP connect, or the proxy still reaching the
    /// destination).
    pub fn timeout_failure(&self) -> Failure {
        match (&self.state, &self.via) {
            (State::Connecting(_), Some(_)) => Failure::ProxyUnreachable,
            (State::Proxying(_, hs), Some(_)) if hs.awaits_proxy() => Failure::ProxyUnreachable,
            _ if self.tcp_done() => Failure::HandshakeTimeout,
            _ => Failure::Timeout,
        }
    }

    /// The outbound proxy this dial goes through, if any.
    pub fn via(&self) -> Option<&Via> {
        self.via.as_ref()
    }

    /// Advances as far as the socket allows. `wall_s` (Unix seconds) signs the fake-TLS hello
    /// toward an `ee` upstream; `rng` salts that hello and makes the WebSocket key.
    pub fn drive(
        &mut self,
        tls: &Arc<rustls::ClientConfig>,
        wall_s: u64,
        rng: &mut Rng,
    ) -> DialStep {
        let env = &mut Env { tls, wall_s, rng };
        loop {
            match &mut self.state {
                State::Connecting(_) => {
                    if let Some(step) = self.connecting(env) {
                        return step;
                    }
                }
                State::Proxying(..) => {
                    let State::Proxying(mut sock, mut hs) =
                        std::mem::replace(&mut self.state, State::Moved)
                    else {
                        return local("state moved");
                    };
                    match proxy_step(&mut sock, &mut hs) {
                        Ok(Progress::More) => {
                            self.state = State::Proxying(sock, hs);
                            return DialStep::Pending;
                        }
                        Ok(Progress::Done) => {
                            if let Some(done) = self.tunnel_up(sock, env) {
                                return done;
                            }
                        }
                        Err((failure, why)) => {
                            let proxy = self.via.as_ref().map(|v| v.proxy.to_string());
                            return DialStep::Failed {
                                failure,
                                retry_after: None,
                                detail: format!("{why} (via {})", proxy.unwrap_or_default()),
                            };
                        }
                    }
                }
                State::Upgrading(u) => {
                    return match u.advance() {
                        ws::Step::Pending => DialStep::Pending,
                        ws::Step::Failed(e) => failed_upgrade(e),
                        ws::Step::Done(tls) => DialStep::Ready(Upstream::Ws(tls)),
                    };
                }
                State::Hello(sock, hello) => {
                    return match hello.drive(sock) {
                        Ok(false) => DialStep::Pending,
                        Ok(true) => {
                            let State::Hello(sock, _) =
                                std::mem::replace(&mut self.state, State::Moved)
                            else {
                                return local("state moved");
                            };
                            DialStep::Ready(Upstream::FakeTls(Box::new(FakeTlsStream::new(sock))))
                        }
                        Err(e) => failed_hello(e),
                    };
                }
                State::Moved => return local("state moved"),
            }
        }
    }
}

/// What [`Dial::drive`] was given for the stages after the TCP connect.
struct Env<'a, 'r> {
    tls: &'a Arc<rustls::ClientConfig>,
    /// Unix seconds.
    wall_s: u64,
    rng: &'r mut Rng,
}

/// The fake-TLS handshake an `ee` upstream needs (`None` for plain and `dd`), with the hello
/// of `shape`, signed at the env's `wall_s` and salted by its `rng`.
fn start_hello(secret: &Secret, shape: Shape, env: &mut Env) -> Result<Option<TlsHello>, DialStep> {
    let SecretKind::Ee(domain) = &secret.kind else {
        return Ok(None);
    };
    TlsHello::new(&secret.key, domain, shape, env.wall_s, env.rng)
        .map(Some)
        .ok_or_else(|| local("ee secret domain over 253 bytes"))
}

/// The failure class of a fake-TLS handshake: the socket's own error as it is, an early close,
/// or a TLS-level refusal (wrong secret, not a proxy).
fn failed_hello(e: HelloError) -> DialStep {
    let failure = match &e {
        HelloError::Io(io) => classify_io(io),
        HelloError::Eof => Failure::ClosedEarly,
        HelloError::Answer(_) | HelloError::Early | HelloError::TooLong => Failure::Tls,
    };
    DialStep::Failed {
        failure,
        retry_after: None,
        detail: e.to_string(),
    }
}

impl Dial {
    /// The TCP connect stage: `Some` step to return (pending, failed, or a finished tunnel),
    /// `None` when the dial moved on to the proxy handshake or the TLS upgrade.
    fn connecting(&mut self, env: &mut Env) -> Option<DialStep> {
        let State::Connecting(sock) = &mut self.state else {
            return Some(local("state moved"));
        };
        match tcp::check_connected(sock) {
            ConnectState::Pending => Some(DialStep::Pending),
            ConnectState::Failed(e) => Some(match &self.via {
                Some(v) => DialStep::Failed {
                    failure: Failure::ProxyUnreachable,
                    retry_after: None,
                    detail: format!("outbound proxy {}: {e}", v.proxy),
                },
                None => DialStep::Failed {
                    failure: classify_io(&e),
                    retry_after: None,
                    detail: e.to_string(),
                },
            }),
            ConnectState::Connected => {
                let State::Connecting(sock) = std::mem::replace(&mut self.state, State::Moved)
                else {
                    return Some(local("state moved"));
                };
                match &self.via {
                    Some(v) => {
                        self.state = State::Proxying(sock, Box::new(Handshake::new(v)));
                        None
                    }
                    None => self.tunnel_up(sock, env),
                }
            }
        }
    }

    /// The byte stream to the destination is open on `sock` (directly or through the proxy):
    /// a raw dial is ready; a TLS-only dial is ready with its handshake still to run; an `ee` upstream starts its fake-TLS hello; a WS dial starts TLS
    /// (SNI = the fronting name if any, else the host) and the upgrade (`None`: keep driving).
    fn tunnel_up(&mut self, sock: TcpStream, env: &mut Env) -> Option<DialStep> {
        let tls = env.tls;
        match &self.kind {
            DialKind::Tcp => Some(DialStep::Ready(Upstream::Tcp(sock))),
            DialKind::Tls { host } => Some(match TlsStream::new(tls, host, sock) {
                Ok(t) => DialStep::Ready(Upstream::Ws(Box::new(t))),
                Err(e) => DialStep::Failed {
                    failure: Failure::Tls,
                    retry_after: None,
                    detail: e.to_string(),
                },
            }),
            DialKind::Mtproto { secret, hello, .. } => match start_hello(secret, *hello, env) {
                Ok(None) => Some(DialStep::Ready(Upstream::Tcp(sock))),
                Ok(Some(h)) => {
                    self.state = State::Hello(sock, Box::new(h));
                    None
                }
                Err(step) => Some(step),
            },
            DialKind::Ws {
                host,
                sni,
                path,
                subprotocol,
                origin,
                plain,
            } => {
                let name = sni.as_deref().unwrap_or(host);
                let made = if *plain {
                    Ok(TlsStream::plain(sock))
                } else {
                    TlsStream::new(tls, name, sock)
                };
                let tls = match made {
                    Ok(t) => t,
                    Err(e) => {
                        return Some(DialStep::Failed {
                            failure: Failure::Tls,
                            retry_after: None,
                            detail: e.to_string(),
                        })
                    }
                };
                let key = ws::key(env.rng);
                match Upgrade::start(tls, host, path, *subprotocol, *origin, &key) {
                    Ok(u) => {
                        self.state = State::Upgrading(Box::new(u));
                        None
                    }
                    Err(e) => Some(failed_upgrade(e)),
                }
            }
        }
    }
}

impl DialKind {
    /// The host name this dial presents (SNI / `Host`; an upstream MTProto proxy's host), if
    /// any: what the outbound proxy's bypass list matches names against, and the name a
    /// `socks5h://` proxy is asked for when the spec's address is `outbound::UNRESOLVED`.
    pub fn host(&self) -> Option<&str> {
        match self {
            DialKind::Tcp => None,
            DialKind::Ws { host, .. } | DialKind::Tls { host } | DialKind::Mtproto { host, .. } => {
                Some(host)
            }
        }
    }
}

/// Moves the outbound proxy handshake on `sock` as far as the socket allows: writes what the
/// core queued, reads at most what it wants. Errors: the failure class and a line saying why
/// (a dropped connection mid-handshake is the proxy's protocol error, with the OS error named).
fn proxy_step(sock: &mut TcpStream, hs: &mut Handshake) -> Result<Progress, (Failure, String)> {
    let mut buf = [0u8; 64];
    loop {
        if !hs.pending().is_empty() {
            match write_once(sock, hs.pending()) {
                Io::Done(n) => {
                    hs.sent(n);
                    continue;
                }
                Io::Blocked => return Ok(Progress::More),
                Io::Eof => {}
                Io::Failed(e) => {
                    return Err((
                        Failure::ProxyProtocol,
                        format!("outbound proxy dropped the handshake: {e}"),
                    ))
                }
            }
        }
        let want = hs.want().min(buf.len());
        if want == 0 {
            return Ok(Progress::Done);
        }
        match read_once(sock, &mut buf[..want]) {
            Io::Done(n) => match hs.feed(&buf[..n]) {
                Ok(Progress::Done) => return Ok(Progress::Done),
                Ok(Progress::More) => {}
                Err(e) => return Err((e.failure(), e.to_string())),
            },
            Io::Blocked => return Ok(Progress::More),
            Io::Eof => {
                return Err((
                    Failure::ProxyProtocol,
                    "outbound proxy closed the connection during its handshake".into(),
                ))
            }
            Io::Failed(e) => {
                return Err((
                    Failure::ProxyProtocol,
                    format!("outbound proxy dropped the handshake: {e}"),
                ))
            }
        }
    }
}

fn local(detail: &str) -> DialStep {
    DialStep::Failed {
        failure: Failure::Local,
        retry_after: None,
        detail: detail.to_string(),
    }
}

fn failed_upgrade(e: UpgradeError) -> DialStep {
    let (failure, retry_after) = match &e {
        UpgradeError::Status { code, retry_after } => (Failure::Http(*code), *retry_after),
        UpgradeError::Io(io) => (classify_io(io), None),
        UpgradeError::Protocol(_) => (Failure::ClosedEarly, None),
    };
    DialStep::Failed {
        failure,
        retry_after,
        detail: e.to_string(),
    }
}

/// The class of a `connect()` to `to` that failed at once (`via_proxy`: `to` is the outbound
/// proxy). Descriptors exhausted is [`Failure::Local`]. `EADDRNOTAVAIL` toward an IPv4 address
/// or the proxy is [`Failure::LocalPorts`]: a connect without a bound address gets it only
/// when no ephemeral port is free for that destination (IPv4 source selection fails as
/// unreachable instead); toward IPv6 it may also mean no usable local address, so it stays
/// the path's [`Failure::AddrUnavailable`]. Anything else toward the proxy is the proxy's
/// failure; toward a destination, [`classify_io`].
pub fn classify_connect(e: &std::io::Error, to: SocketAddr, via_proxy: bool) -> Failure {
    match e.raw_os_error() {
        Some(libc::EMFILE) | Some(libc::ENFILE) => Failure::Local,
        Some(libc::EADDRNOTAVAIL) if to.is_ipv4() || via_proxy => Failure::LocalPorts,
        _ if via_proxy => Failure::ProxyUnreachable,
        _ => classify_io(e),
    }
}

/// Maps an I/O error during connect/TLS/upgrade to a failure class: an OS error is named as
/// what it is (network unreachable, host unreachable, no address, refused, timeout, reset);
/// only errors without such a class count as `ClosedEarly`.
pub fn classify_io(e: &std::io::Error) -> Failure {
    use std::io::ErrorKind;
    if is_tls_error(e) {
        Failure::Tls
    } else if e.kind() == ErrorKind::ConnectionRefused {
        Failure::Refused
    } else if e.kind() == ErrorKind::TimedOut {
        Failure::Timeout
    } else if matches!(
        e.kind(),
        ErrorKind::NetworkUnreachable | ErrorKind::NetworkDown
    ) {
        Failure::NetUnreachable
    } else if e.kind() == ErrorKind::HostUnreachable {
        Failure::HostUnreachable
    } else if e.kind() == ErrorKind::AddrNotAvailable {
        Failure::AddrUnavailable
    } else if is_reset(e) {
        Failure::Reset
    } else {
        Failure::ClosedEarly
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn os_errors_are_named_as_what_they_are() {
        let class = |errno: i32| classify_io(&std::io::Error::from_raw_os_error(errno));
        assert_eq!(class(libc::ENETUNREACH), Failure::NetUnreachable);
        assert_eq!(class(libc::ENETDOWN), Failure::NetUnreachable);
        assert_eq!(class(libc::EHOSTUNREACH), Failure::HostUnreachable);
        assert_eq!(class(libc::EADDRNOTAVAIL), Failure::AddrUnavailable);
        // At connect: ephemeral ports exhausted toward an IPv4 address (or the proxy) is a
        // local resource, named as such; toward IPv6 it may be no usable address.
        let at = |errno: i32, to: &str, via: bool| {
            classify_connect(
                &std::io::Error::from_raw_os_error(errno),
                to.parse().unwrap(),
                via,
            )
        };
        assert_eq!(
            at(libc::EADDRNOTAVAIL, "10.0.0.1:443", false),
            Failure::LocalPorts
        );
        assert_eq!(
            at(libc::EADDRNOTAVAIL, "10.0.0.1:1080", true),
            Failure::LocalPorts
        );
        assert_eq!(
            at(libc::EADDRNOTAVAIL, "[2001:db8::1]:443", false),
            Failure::AddrUnavailable
        );
        assert_eq!(at(libc::EMFILE, "10.0.0.1:443", true), Failure::Local);
        assert_eq!(
            at(libc::ECONNREFUSED, "10.0.0.1:1080", true),
            Failure::ProxyUnreachable
        );
        assert_eq!(
            at(libc::ENETUNREACH, "10.0.0.1:443", false),
            Failure::NetUnreachable
        );
        assert_eq!(class(libc::ECONNREFUSED), Failure::Refused);
        assert_eq!(class(libc::ETIMEDOUT), Failure::Timeout);
        assert_eq!(class(libc::ECONNRESET), Failure::Reset);
        assert_eq!(class(libc::EPIPE), Failure::Reset);
        // Only what has no class of its own is "closed early".
        assert_eq!(
            classify_io(&std::io::Error::other("upgrade cut short")),
            Failure::ClosedEarly
        );
    }

    /// Drives `dial` (a raw TCP dial through a SOCKS5 proxy at a listener of this test) until
    /// the proxy has taken `greeting` bytes of it, then returns what a deadline now would say.
    fn timed_out_through(answer: &[u8], greeting: usize) -> Failure {
        use std::io::{Read, Write};
        let proxy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("socks5://{}", proxy.local_addr().unwrap());
        let outbound = Outbound {
            proxy: outbound::OutboundProxy::parse(&url).unwrap(),
            bypass: outbound::Bypass::default(),
        };
        let poll = mio::Poll::new().unwrap();
        let rng = &mut Rng::from_seed([7; 48]);
        let spec = DialSpec {
            addr: "127.0.0.1:9".parse().unwrap(),
            kind: DialKind::Tcp,
        };
        let mut dial = Dial::start(
            &spec,
            Some(&outbound),
            poll.registry(),
            Token(1),
            Duration::ZERO,
        )
        .unwrap();
        let (mut side, _) = proxy.accept().unwrap();
        side.set_nonblocking(true).unwrap();
        let tls = crate::net::tls::client_config(None, false).unwrap();
        let mut got = vec![0u8; greeting];
        let (mut read, mut rounds) = (0, 0);
        while read < greeting {
            rounds += 1;
            assert!(rounds < 5_000, "the greeting never came");
            assert!(matches!(dial.drive(&tls, 0, rng), DialStep::Pending));
            match side.read(&mut got[read..]) {
                Ok(n) => read += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(1))
                }
                Err(e) => panic!("{e}"),
            }
        }
        side.write_all(answer).unwrap();
        // The answer (if any) is taken, and the dial waits for what comes next.
        for _ in 0..50 {
            assert!(matches!(dial.drive(&tls, 0, rng), DialStep::Pending));
            std::thread::sleep(Duration::from_millis(1));
        }
        dial.timeout_failure()
    }

    /// Drives `dial` until `side` (the accepted end of its TCP connection) has received `len`
    /// bytes, each drive with the clock `wall_s` and `rng`; returns them.
    fn received(
        dial: &mut Dial,
        side: &mut std::net::TcpStream,
        len: usize,
        (wall_s, rng): (u64, &mut Rng),
    ) -> Vec<u8> {
        use std::io::Read;
        let tls = crate::net::tls::client_config(None, false).unwrap();
        side.set_nonblocking(true).unwrap();
        let mut got = vec![0u8; len];
        let (mut read, mut rounds) = (0, 0);
        while read < len {
            rounds += 1;
            assert!(rounds < 5_000, "only {read} of {len} bytes came");
            assert!(matches!(dial.drive(&tls, wall_s, rng), DialStep::Pending));
            match side.read(&mut got[read..]) {
                Ok(0) => panic!("closed after {read} bytes"),
                Ok(n) => read += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(1))
                }
                Err(e) => panic!("{e}"),
            }
        }
        got
    }

    /// Issue 20: the dialler reads no clock and no generator of its own. A dial toward an `ee`
    /// upstream given a wall clock and a seeded generator sends exactly the hello those make
    /// (`TlsHello::new` with the same inputs), so the bytes on the wire are a function of
    /// what the caller passed; another clock gives another hello.
    #[test]
    fn an_ee_dial_signs_its_hello_with_the_clock_and_generator_it_is_given() {
        const WALL_S: u64 = 1_700_000_000;
        let upstream = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let key_hex = "0123456789abcdef0123456789abcdef";
        let domain_hex: String = b"a.example".iter().map(|b| format!("{b:02x}")).collect();
        let proxy = crate::mtproto::upstream::MtprotoProxy::parse(&format!(
            "{}:ee{key_hex}{domain_hex}",
            upstream.local_addr().unwrap()
        ))
        .unwrap();
        let spec = DialSpec {
            addr: upstream.local_addr().unwrap(),
            kind: DialKind::Mtproto {
                host: proxy.host.clone(),
                secret: proxy.secret.clone(),
                hello: proxy.hello,
            },
        };
        let poll = mio::Poll::new().unwrap();
        let expected = TlsHello::new(
            &proxy.secret.key,
            "a.example",
            proxy.hello,
            WALL_S,
            &mut Rng::from_seed([1; 48]),
        )
        .unwrap();
        // the hello's length follows the generator, not the clock
        let len = expected.hello().len();
        let hello_at = |wall_s: u64| {
            let mut dial =
                Dial::start(&spec, None, poll.registry(), Token(1), Duration::ZERO).unwrap();
            assert!(dial.via().is_none(), "no outbound setting given: direct");
            let (mut side, _) = upstream.accept().unwrap();
            let rng = &mut Rng::from_seed([1; 48]);
            received(&mut dial, &mut side, len, (wall_s, rng))
        };
        let sent = hello_at(WALL_S);
        assert_eq!(sent, expected.hello());
        assert_eq!(hello_at(WALL_S), sent, "the same inputs, the same bytes");
        assert_ne!(
            hello_at(WALL_S + 1),
            sent,
            "the clock given is the one signed"
        );
    }

    /// Issue 20: the outbound setting is the caller's value, not a per-thread global. Two
    /// dials on one thread, one given a proxy and one given a proxy that bypasses the
    /// destination, each do what their own setting says.
    #[test]
    fn each_dial_takes_the_outbound_setting_it_is_given() {
        let dest = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let proxy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("socks5://{}", proxy.local_addr().unwrap());
        let setting = |bypass: &[String]| {
            Outbound::new(Some(&outbound::OutboundProxy::parse(&url).unwrap()), bypass)
                .unwrap()
                .unwrap()
        };
        let (via_proxy, bypassed) = (setting(&[]), setting(&["127.0.0.0/8".to_string()]));
        let spec = DialSpec {
            addr: dest.local_addr().unwrap(),
            kind: DialKind::Tcp,
        };
        let poll = mio::Poll::new().unwrap();
        let start = |o: &Outbound| {
            Dial::start(&spec, Some(o), poll.registry(), Token(1), Duration::ZERO).unwrap()
        };
        let mut proxied = start(&via_proxy);
        let mut direct = start(&bypassed);
        let target = proxied.via().map(|v| v.target.clone());
        assert_eq!(target, Some(outbound::Target::Addr(spec.addr)));
        assert!(direct.via().is_none());
        let rng = &mut Rng::from_seed([2; 48]);
        // The proxied dial greets the proxy (SOCKS5, no auth); the bypassed one connected to
        // the destination itself and, raw TCP, is ready at once.
        let (mut at_proxy, _) = proxy.accept().unwrap();
        let greeting = received(&mut proxied, &mut at_proxy, 3, (0, rng));
        assert_eq!(greeting, [5, 1, 0]);
        let _at_dest = dest.accept().unwrap();
        let tls = crate::net::tls::client_config(None, false).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while !matches!(
            direct.drive(&tls, 0, rng),
            DialStep::Ready(Upstream::Tcp(_))
        ) {
            assert!(
                std::time::Instant::now() < deadline,
                "the direct dial never connected"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Review finding (issue 19 §3): a SOCKS5 proxy that takes the TCP connection but never
    /// answers its greeting (a stopped or wedged proxy process: the kernel still completes
    /// the handshake into its listen queue) timed out as `timeout`, the route's failure: each
    /// route was cooled in turn, and since it is not the proxy's failure every such dial told
    /// the ladder the proxy works, so it was never taken down. Silence before the proxy's own
    /// answer is the proxy's; silence after it took the CONNECT is the destination's.
    #[test]
    fn a_socks5_proxy_silent_before_its_own_answer_is_the_proxys_timeout() {
        // Greeting `05 01 00` taken, never answered.
        assert_eq!(timed_out_through(&[], 3), Failure::ProxyUnreachable);
        // Method chosen (`05 00`), then the CONNECT request (10 bytes) waits for the
        // destination: the route's timeout, as before.
        assert_eq!(timed_out_through(&[5, 0], 3), Failure::Timeout);
    }

    /// Drives a plain `ws://` dial (the `cfproxy-ws` tier) to the listener `front`, which
    /// reads the upgrade request and answers with `answer(request)` in one write, then closes
    /// its end if `close`. Returns the dial's end: the upstream ready, or its failure.
    fn plain_ws_dial(
        answer: impl FnOnce(&str) -> Vec<u8>,
        close: bool,
    ) -> Result<Upstream, Failure> {
        use std::io::{Read, Write};
        let front = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let spec = DialSpec {
            addr: front.local_addr().unwrap(),
            kind: DialKind::Ws {
                host: "kws2.example.com".into(),
                sni: None,
                path: "/apiws".into(),
                subprotocol: true,
                origin: None,
                plain: true,
            },
        };
        let poll = mio::Poll::new().unwrap();
        let tls = crate::net::tls::client_config(None, false).unwrap();
        let rng = &mut Rng::from_seed([3; 48]);
        let mut dial = Dial::start(&spec, None, poll.registry(), Token(1), Duration::ZERO).unwrap();
        let (mut side, _) = front.accept().unwrap();
        side.set_nonblocking(true).unwrap();
        let mut req = Vec::new();
        let mut rounds = 0;
        while !req.ends_with(b"\r\n\r\n") {
            rounds += 1;
            assert!(rounds < 5_000, "no upgrade request: {req:?}");
            assert!(matches!(dial.drive(&tls, 0, rng), DialStep::Pending));
            let mut buf = [0u8; 1024];
            match side.read(&mut buf) {
                Ok(0) => panic!("closed"),
                Ok(n) => req.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(1))
                }
                Err(e) => panic!("{e}"),
            }
        }
        let req = String::from_utf8(req).unwrap();
        side.write_all(&answer(&req)).unwrap();
        if close {
            side.shutdown(std::net::Shutdown::Both).unwrap();
        }
        for _ in 0..5_000 {
            match dial.drive(&tls, 0, rng) {
                DialStep::Pending => std::thread::sleep(Duration::from_millis(1)),
                DialStep::Ready(up) => {
                    // `side` lives until here, so the stream is still open.
                    drop(side);
                    return Ok(up);
                }
                DialStep::Failed { failure, .. } => return Err(failure),
            }
        }
        panic!("the dial never ended");
    }

    /// The `101` for the upgrade request `req` (its `Sec-WebSocket-Key` accepted).
    fn switching(req: &str) -> Vec<u8> {
        let key = req
            .lines()
            .find_map(|l| {
                l.strip_prefix("sec-websocket-key: ")
                    .or(l.strip_prefix("Sec-WebSocket-Key: "))
            })
            .expect("a key");
        let accept = tungstenite::handshake::derive_accept_key(key.trim().as_bytes());
        format!(
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Accept: {accept}\r\nSec-WebSocket-Protocol: binary\r\n\r\n"
        )
        .into_bytes()
    }

    /// Review (issue 22 part 4): a `ws://` front whose first bytes come in the same segment
    /// as its `101` (nothing in between to make two reads of them, as no TLS record cuts the
    /// stream here). The plain request carries no TLS, and those bytes reach the relay
    /// through the upstream, not tungstenite's buffer that the upgrade drops.
    #[test]
    fn a_plain_ws_front_sending_data_with_its_101_loses_none_of_it() {
        let data = [0x82u8, 0x04, b'd', b'a', b't', b'a'];
        let up = plain_ws_dial(
            |req| {
                assert!(req.starts_with("GET /apiws HTTP/1.1\r\n"), "{req}");
                assert!(req.contains("kws2.example.com"), "{req}");
                let mut a = switching(req);
                a.extend_from_slice(&data);
                a
            },
            true,
        );
        let mut up = up.expect("upgraded");
        assert!(matches!(&up, Upstream::Ws(t) if t.is_plain()));
        let mut got = Vec::new();
        let mut buf = [0u8; 64];
        for _ in 0..5_000 {
            match std::io::Read::read(&mut up, &mut buf) {
                Ok(0) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(1))
                }
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!(got, data);
    }

    /// Review (issue 22 part 4): a `ws://` front that closes in the middle of its answer (half
    /// a status line, or a head without its blank line) fails the dial as `closed-early`, as
    /// the same close does over TLS; it is never taken for an upgraded stream.
    #[test]
    fn a_plain_ws_front_closing_mid_upgrade_is_closed_early() {
        for cut in [
            b"HTTP/1.1 10".to_vec(),
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n".to_vec(),
        ] {
            let r = plain_ws_dial(|_| cut.clone(), true);
            assert_eq!(
                r.err(),
                Some(Failure::ClosedEarly),
                "{:?}",
                String::from_utf8_lossy(&cut)
            );
        }
        // Nothing at all before the close.
        assert_eq!(
            plain_ws_dial(|_| Vec::new(), true).err(),
            Some(Failure::ClosedEarly)
        );
    }
}
