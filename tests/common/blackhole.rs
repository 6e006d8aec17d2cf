//! A loopback address where TCP connects hang (SYN dropped) instead of being refused: the
//! "black-holed DC" of docs/design.md §8, without touching firewall rules.
//!
//! How: a socket2 listener with backlog 0 that never accepts, plus filler connections that fill
//! its accept queue; Linux then drops further SYNs (listen overflow), so a client's connect
//! times out. Owns only its own sockets; test code (panics on local setup failure).
#![allow(dead_code)]

use std::io;
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use socket2::{Domain, Protocol, SockAddr, Socket, Type};

/// Longest a filler may take to connect (the queue still has room, so it is immediate).
const FILL_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a check connect waits before we call the address black-holed.
const CHECK_TIMEOUT: Duration = Duration::from_millis(150);
/// Fillers tried before giving up (kernels count the queue bound slightly differently).
const MAX_FILLERS: usize = 8;

/// A listening socket whose accept queue is full. Keep it alive for as long as the address
/// must stay black-holed; dropping it closes everything.
pub struct BlackHole {
    addr: SocketAddr,
    _listener: Socket,
    _fillers: Vec<TcpStream>,
}

impl BlackHole {
    /// Binds 127.0.0.1:0 and fills the queue until a connect with a short timeout times out.
    /// Panics if the platform refuses or accepts instead (the rig cannot work there).
    pub fn new() -> BlackHole {
        BlackHole::try_new().expect("black hole: could not make connects hang on 127.0.0.1")
    }

    /// [`BlackHole::new`] returning the reason instead of panicking.
    pub fn try_new() -> io::Result<BlackHole> {
        let listener = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP))?;
        let any: SocketAddr = ([127, 0, 0, 1], 0).into();
        listener.bind(&SockAddr::from(any))?;
        listener.listen(0)?;
        let addr = listener
            .local_addr()?
            .as_socket()
            .ok_or_else(|| io::Error::other("black hole: not an inet address"))?;
        let mut fillers = Vec::new();
        loop {
            match TcpStream::connect_timeout(&addr, CHECK_TIMEOUT) {
                // Still room in the queue: keep this one as a filler and try again.
                Ok(s) if fillers.len() < MAX_FILLERS => fillers.push(s),
                Ok(_) => return Err(io::Error::other("black hole: accept queue never fills")),
                Err(e) if is_timeout(&e) && !fillers.is_empty() => break,
                Err(e) if is_timeout(&e) => {
                    // The very first connect should fit; retry once with a generous bound.
                    fillers.push(TcpStream::connect_timeout(&addr, FILL_TIMEOUT)?);
                }
                Err(e) => return Err(e),
            }
        }
        Ok(BlackHole {
            addr,
            _listener: listener,
            _fillers: fillers,
        })
    }

    /// Connects to this address hang until the caller's timeout.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }
}

impl Default for BlackHole {
    fn default() -> BlackHole {
        BlackHole::new()
    }
}

/// Connect timeouts surface as `TimedOut` (or `WouldBlock` on some platforms).
pub fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
    )
}
