//! Dialling an upstream: non-blocking TCP connect, then (for WebSocket routes) TLS and the
//! upgrade, as one resumable state machine.
//!
//! Used by client sessions (`conn::connect`) and by probes and pool fills (`route::probe`, also
//! run by the `check` applet) alike, so all see the same failure classes. Also owns
//! [`Upstream`], the connected socket (raw TCP or upgraded TLS) the relay and the pool hold, and
//! TCP keepalive ([`set_keepalive`]). The caller owns the deadline (timer wheel) and the token;
//! this module only registers the socket it creates (or moves it to another token) and advances
//! on readiness.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use mio::net::TcpStream;
use mio::{Interest, Registry, Token};

use crate::error::Failure;
use crate::net::io::{is_reset, read_once, write_once, Endpoint, Io};
use crate::net::tcp::{self, ConnectState};
use crate::net::tls::{is_tls_error, TlsStream};
use crate::net::ws::{self, Upgrade, UpgradeError};

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
    /// TLS with SNI/Host `host`, then `GET path` upgrade.
    Ws {
        /// SNI and `Host`.
        host: String,
        /// Path and query (`/apiws`, `/apiws?dst=…`).
        path: String,
        /// Ask for the `binary` subprotocol (not toward a Worker).
        subprotocol: bool,
        /// `Origin` header, if any.
        origin: Option<&'static str>,
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

/// A connected upstream socket, ready for the relay init.
pub enum Upstream {
    /// Raw obfuscated2 over TCP.
    Tcp(TcpStream),
    /// WebSocket over TLS, after the upgrade (or bare TLS for [`DialKind::Tls`]).
    Ws(Box<TlsStream>),
}

impl Upstream {
    /// Reads once (TLS plaintext for WS). A TLS peer closing TCP without close_notify is an
    /// ordinary end here.
    pub fn read(&mut self, buf: &mut [u8]) -> Io {
        match self {
            Upstream::Tcp(s) => read_once(s, buf),
            Upstream::Ws(t) => match read_once(t.as_mut(), buf) {
                Io::Failed(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Io::Eof,
                other => other,
            },
        }
    }

    /// Writes once.
    pub fn write(&mut self, buf: &[u8]) -> Io {
        match self {
            Upstream::Tcp(s) => write_once(s, buf),
            Upstream::Ws(t) => write_once(t.as_mut(), buf),
        }
    }

    /// Flushes TLS records queued by rustls. `Ok(false)` = socket full.
    pub fn flush(&mut self) -> std::io::Result<bool> {
        match self {
            Upstream::Tcp(_) => Ok(true),
            Upstream::Ws(t) => t.flush_tls(),
        }
    }

    /// True while TLS records wait for the socket.
    pub fn has_backlog(&self) -> bool {
        match self {
            Upstream::Tcp(_) => false,
            Upstream::Ws(t) => t.wants_write(),
        }
    }

    /// The TCP socket.
    pub fn sock(&mut self) -> &mut TcpStream {
        match self {
            Upstream::Tcp(s) => s,
            Upstream::Ws(t) => &mut t.sock,
        }
    }

    /// For a pooled upstream that should be silent: `true` if nothing arrived and the peer has
    /// not closed (a read would block). Anything else — data, EOF, an error — means it is not
    /// fit to hand to a client.
    pub fn idle_and_alive(&mut self) -> bool {
        let mut probe = [0u8; 64];
        matches!(self.read(&mut probe), Io::Blocked)
    }

    /// Best-effort goodbye: TLS close_notify, then shutdown.
    pub fn shutdown(&mut self) {
        match self {
            Upstream::Tcp(s) => {
                let _ = s.shutdown(std::net::Shutdown::Both);
            }
            Upstream::Ws(t) => {
                t.send_close_notify();
                let _ = t.flush_tls();
                let _ = t.sock.shutdown(std::net::Shutdown::Both);
            }
        }
    }
}

/// The relay's view: TLS plaintext for WS; a TLS peer closing TCP without close_notify is an
/// ordinary end (`Ok(0)`).
impl std::io::Read for Upstream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Upstream::Tcp(s) => s.read(buf),
            Upstream::Ws(t) => match t.read(buf) {
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(0),
                other => other,
            },
        }
    }
}

impl std::io::Write for Upstream {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Upstream::Tcp(s) => s.write(buf),
            Upstream::Ws(t) => t.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Upstream::Tcp(s) => s.flush(),
            Upstream::Ws(t) => t.flush(),
        }
    }
}

/// Half-close is a TCP FIN (a WS link half-closes with a Close frame, which is the relay's).
impl Endpoint for Upstream {
    fn shutdown_write(&mut self) -> std::io::Result<()> {
        self.sock().shutdown(std::net::Shutdown::Write)
    }

    fn flush_backlog(&mut self) -> std::io::Result<bool> {
        Upstream::flush(self)
    }

    fn has_backlog(&self) -> bool {
        Upstream::has_backlog(self)
    }
}

enum State {
    Connecting(TcpStream),
    Upgrading(Upgrade),
    Moved,
}

/// A dial in progress.
pub struct Dial {
    state: State,
    kind: DialKind,
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

/// Sets TCP keepalive (`idle` before the first probe; zero = leave off).
pub fn set_keepalive(sock: &TcpStream, idle: Duration) {
    if idle.is_zero() {
        return;
    }
    let ka = socket2::TcpKeepalive::new()
        .with_time(idle)
        .with_interval(Duration::from_secs(idle.as_secs().clamp(5, 30)));
    let _ = socket2::SockRef::from(sock).set_tcp_keepalive(&ka);
}

impl Dial {
    /// Starts the TCP connect and registers the socket with `token` (readable + writable).
    ///
    /// Errors: `Failure::Local` when no socket can be made (descriptors), or the class of an
    /// immediate connect error.
    pub fn start(
        spec: &DialSpec,
        registry: &Registry,
        token: Token,
        keepalive: Duration,
    ) -> Result<Dial, Failure> {
        let mut sock = tcp::start(spec.addr).map_err(|e| {
            if matches!(e.raw_os_error(), Some(23) | Some(24)) {
                Failure::Local
            } else {
                classify_io(&e)
            }
        })?;
        set_keepalive(&sock, keepalive);
        registry
            .register(&mut sock, token, Interest::READABLE | Interest::WRITABLE)
            .map_err(|_| Failure::Local)?;
        Ok(Dial {
            state: State::Connecting(sock),
            kind: spec.kind.clone(),
        })
    }

    /// Moves the dial's socket to another token (a session's losing attempt handed to the
    /// background). Errors: the dial already finished.
    pub fn retoken(&mut self, registry: &Registry, token: Token) -> std::io::Result<()> {
        let sock = match &mut self.state {
            State::Connecting(s) => s,
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
        matches!(self.state, State::Upgrading(_))
    }

    /// Advances as far as the socket allows.
    pub fn drive(&mut self, tls: &Arc<rustls::ClientConfig>) -> DialStep {
        loop {
            match &mut self.state {
                State::Connecting(sock) => match tcp::check_connected(sock) {
                    ConnectState::Pending => return DialStep::Pending,
                    ConnectState::Failed(e) => {
                        return DialStep::Failed {
                            failure: classify_io(&e),
                            retry_after: None,
                            detail: e.to_string(),
                        }
                    }
                    ConnectState::Connected => {
                        let State::Connecting(sock) =
                            std::mem::replace(&mut self.state, State::Moved)
                        else {
                            return local("state moved");
                        };
                        match &self.kind {
                            DialKind::Tcp => return DialStep::Ready(Upstream::Tcp(sock)),
                            DialKind::Tls { host } => {
                                return match TlsStream::new(tls, host, sock) {
                                    Ok(t) => DialStep::Ready(Upstream::Ws(Box::new(t))),
                                    Err(e) => DialStep::Failed {
                                        failure: Failure::Tls,
                                        retry_after: None,
                                        detail: e.to_string(),
                                    },
                                }
                            }
                            DialKind::Ws {
                                host,
                                path,
                                subprotocol,
                                origin,
                            } => {
                                let tls = match TlsStream::new(tls, host, sock) {
                                    Ok(t) => t,
                                    Err(e) => {
                                        return DialStep::Failed {
                                            failure: Failure::Tls,
                                            retry_after: None,
                                            detail: e.to_string(),
                                        }
                                    }
                                };
                                match Upgrade::start(tls, host, path, *subprotocol, *origin) {
                                    Ok(u) => self.state = State::Upgrading(u),
                                    Err(e) => return failed_upgrade(e),
                                }
                            }
                        }
                    }
                },
                State::Upgrading(u) => {
                    return match u.advance() {
                        ws::Step::Pending => DialStep::Pending,
                        ws::Step::Failed(e) => failed_upgrade(e),
                        ws::Step::Done(tls) => DialStep::Ready(Upstream::Ws(tls)),
                    };
                }
                State::Moved => return local("state moved"),
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
}
