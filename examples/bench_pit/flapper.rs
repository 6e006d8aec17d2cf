//! TCP forwarders for `make bench-pit`, on 127.0.0.1 in front of a fake peer.
//!
//! * [`Flapper::start`]: the flapping direct tier (docs/design.md §8 "flapping" row). Each accepted
//!   connection is, with probability one half (a fixed-seed xorshift, so runs are comparable),
//!   either forwarded byte-for-byte or held: read and discarded, never answered, until the peer
//!   gives up. A held connection looks to the proxy like a black-holed front after the SYN: its
//!   attempt ends at the connect timeout.
//! * [`Flapper::lazy`]: forwards every connection, but opens the upstream connection only when
//!   the first byte arrives. In front of the fake TCP DC (which closes a connection that sent
//!   no init within 10 s) it stands for a DC that keeps idle connections open, so a pooled
//!   Worker upstream lives until the proxy ages it out.
//!
//! Why not drop SYNs: on loopback without firewall rules only a full accept queue drops SYNs
//! (the black hole), and that cannot be switched per connection. The proxy's attempt deadline
//! covers TCP + TLS + upgrade, so a stalled TLS handshake costs a client the same time.
//! Thread per connection, bench code, loopback only.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Read timeout of the pump threads: how often they look at the stop flag.
const TICK: Duration = Duration::from_millis(200);

/// Counters shared with the bench.
#[derive(Default)]
pub struct Counts {
    pub forwarded: AtomicUsize,
    pub held: AtomicUsize,
}

/// A running forwarder; dropping it stops accepting (running pumps end at their next tick).
pub struct Flapper {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    pub counts: Arc<Counts>,
}

impl Flapper {
    /// Listens on 127.0.0.1:0 and forwards half of the connections to `front`.
    /// Errors: bind failure.
    pub fn start(front: SocketAddr, seed: u64) -> std::io::Result<Flapper> {
        Flapper::spawn(front, Some(seed))
    }

    /// Listens on 127.0.0.1:0 and forwards every connection to `front`, connecting upstream
    /// only once the first byte came in. Errors: bind failure.
    pub fn lazy(front: SocketAddr) -> std::io::Result<Flapper> {
        Flapper::spawn(front, None)
    }

    /// `seed`: `Some` = hold half the connections, `None` = lazy forwarding of all.
    fn spawn(front: SocketAddr, seed: Option<u64>) -> std::io::Result<Flapper> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let counts = Arc::new(Counts::default());
        let (s, c) = (stop.clone(), counts.clone());
        std::thread::spawn(move || accept_loop(listener, front, seed, s, c));
        Ok(Flapper { addr, stop, counts })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for Flapper {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wake the blocked accept.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_millis(200));
    }
}

fn accept_loop(
    listener: TcpListener,
    front: SocketAddr,
    seed: Option<u64>,
    stop: Arc<AtomicBool>,
    counts: Arc<Counts>,
) {
    let lazy = seed.is_none();
    let mut x = seed.unwrap_or(1) | 1;
    for sock in listener.incoming() {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let Ok(sock) = sock else { continue };
        // xorshift64
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let hold = !lazy && x & 1 == 1;
        let stop = stop.clone();
        if hold {
            counts.held.fetch_add(1, Ordering::Relaxed);
            std::thread::spawn(move || swallow(sock, &stop));
            continue;
        }
        counts.forwarded.fetch_add(1, Ordering::Relaxed);
        std::thread::spawn(move || {
            let first = if lazy {
                match first_bytes(&sock, &stop) {
                    Some(b) => b,
                    None => return,
                }
            } else {
                Vec::new()
            };
            let Ok(mut up) = TcpStream::connect_timeout(&front, Duration::from_secs(2)) else {
                return;
            };
            if !first.is_empty() && up.write_all(&first).is_err() {
                return;
            }
            let _ = sock.set_nodelay(true);
            let _ = up.set_nodelay(true);
            let (Ok(a2), Ok(b2)) = (sock.try_clone(), up.try_clone()) else {
                return;
            };
            let s2 = stop.clone();
            let t = std::thread::spawn(move || pump(a2, b2, &s2));
            pump(up, sock, &stop);
            let _ = t.join();
        });
    }
}

/// Reads and discards until EOF, error or stop: the "held" half.
fn swallow(mut sock: TcpStream, stop: &AtomicBool) {
    let _ = sock.set_read_timeout(Some(TICK));
    let mut buf = [0u8; 4096];
    while !stop.load(Ordering::Relaxed) {
        match sock.read(&mut buf) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) if is_tick(&e) => {}
            Err(_) => return,
        }
    }
}

/// Waits (without limit, until stop) for the first bytes from `sock`; `None` on EOF or error.
fn first_bytes(mut sock: &TcpStream, stop: &AtomicBool) -> Option<Vec<u8>> {
    let _ = sock.set_read_timeout(Some(TICK));
    let mut buf = [0u8; 4096];
    while !stop.load(Ordering::Relaxed) {
        match sock.read(&mut buf) {
            Ok(0) => return None,
            Ok(n) => return Some(buf[..n].to_vec()),
            Err(e) if is_tick(&e) => {}
            Err(_) => return None,
        }
    }
    None
}

/// Copies `from` → `to` until EOF, error or stop, then half-closes `to`.
fn pump(mut from: TcpStream, mut to: TcpStream, stop: &AtomicBool) {
    let _ = from.set_read_timeout(Some(TICK));
    let mut buf = [0u8; 16 * 1024];
    while !stop.load(Ordering::Relaxed) {
        match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
            Err(e) if is_tick(&e) => {}
            Err(_) => break,
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}

fn is_tick(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    )
}
