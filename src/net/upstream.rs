//! [`Upstream`], a connected upstream socket (raw TCP, TLS after the WS upgrade, or fake-TLS
//! records toward an `ee` upstream MTProto proxy) as the relay and the pool hold it, and TCP
//! keepalive ([`set_keepalive`]) on every socket. `net::dial` makes an `Upstream` and re-exports
//! both; nothing here dials.

use std::time::Duration;

use mio::net::TcpStream;

use crate::net::faketls_stream::FakeTlsStream;
use crate::net::io::{read_once, write_once, Endpoint, Io};
use crate::net::tls::TlsStream;

/// A connected upstream socket, ready for the relay init.
pub enum Upstream {
    /// Raw obfuscated2 over TCP.
    Tcp(TcpStream),
    /// WebSocket over TLS, after the upgrade (or bare TLS for [`DialKind::Tls`](crate::net::dial::DialKind::Tls)).
    Ws(Box<TlsStream>),
    /// Fake-TLS application_data records over TCP (an `ee` upstream proxy, after its
    /// ServerHello), carrying the obfuscated2 stream.
    FakeTls(Box<FakeTlsStream<TcpStream>>),
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
            Upstream::FakeTls(t) => read_once(t.as_mut(), buf),
        }
    }

    /// Writes once.
    pub fn write(&mut self, buf: &[u8]) -> Io {
        match self {
            Upstream::Tcp(s) => write_once(s, buf),
            Upstream::Ws(t) => write_once(t.as_mut(), buf),
            Upstream::FakeTls(t) => write_once(t.as_mut(), buf),
        }
    }

    /// Flushes TLS records queued by rustls. `Ok(false)` = socket full.
    pub fn flush(&mut self) -> std::io::Result<bool> {
        match self {
            Upstream::Tcp(_) => Ok(true),
            Upstream::Ws(t) => t.flush_tls(),
            Upstream::FakeTls(t) => t.flush_backlog(),
        }
    }

    /// True while TLS records wait for the socket.
    pub fn has_backlog(&self) -> bool {
        match self {
            Upstream::Tcp(_) => false,
            Upstream::Ws(t) => t.wants_write(),
            Upstream::FakeTls(t) => Endpoint::has_backlog(t.as_ref()),
        }
    }

    /// True when what was read from the socket ends inside a TLS record (WS upstreams; see
    /// `TlsStream::mid_record`): a reply under way that has not reached the relay yet. Raw TCP
    /// and fake-TLS upstreams hand bytes on as they come, so the relay sees those itself.
    pub fn mid_record(&self) -> bool {
        match self {
            Upstream::Ws(t) => t.mid_record(),
            Upstream::Tcp(_) | Upstream::FakeTls(_) => false,
        }
    }

    /// Ciphertext bytes read from the socket so far (WS upstreams, where TLS holds a record's
    /// bytes until it is whole; 0 for the others, whose bytes the relay sees as they come).
    pub fn raw_in(&self) -> u64 {
        match self {
            Upstream::Ws(t) => t.raw_in(),
            Upstream::Tcp(_) | Upstream::FakeTls(_) => 0,
        }
    }

    /// The TCP socket.
    pub fn sock(&mut self) -> &mut TcpStream {
        match self {
            Upstream::Tcp(s) => s,
            Upstream::Ws(t) => &mut t.sock,
            Upstream::FakeTls(t) => &mut t.inner,
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
            Upstream::FakeTls(t) => {
                let _ = t.flush_backlog();
                let _ = t.inner.shutdown(std::net::Shutdown::Both);
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
            Upstream::FakeTls(t) => t.read(buf),
        }
    }
}

impl std::io::Write for Upstream {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Upstream::Tcp(s) => s.write(buf),
            Upstream::Ws(t) => t.write(buf),
            Upstream::FakeTls(t) => t.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Upstream::Tcp(s) => s.flush(),
            Upstream::Ws(t) => t.flush(),
            Upstream::FakeTls(t) => t.flush(),
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
