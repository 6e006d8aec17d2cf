//! The masked half of the "memory returned" scenario (`bench/returned.rs`): a stand-in for the
//! real site a proxy masks to ([`Site`]), and slow probers that are not our clients
//! ([`Probers`]).
//!
//! [`Site`] is one mio loop on its own thread, 127.0.0.1 only: every connection gets
//! [`SITE_ANSWER`] bytes once its first bytes arrive (a TLS server's first flight and a page),
//! then an echo of whatever else it sends; an end of stream from the proxy is answered with a
//! close. It counts connections accepted and live.
//!
//! [`Probers`] are plain blocking-then-non-blocking sockets driven from the caller's thread:
//! prober `i` connects from 127.0.0.(2 + i / 50) (the per-address limits of a default proxy
//! never bite), sends a TLS ClientHello that is not ours (a real rustls hello: its digest is no
//! secret's) when `i` is even, an HTTP request line when odd (not TLS on an `ee`-only port), and
//! then trickles one byte per prober per [`Probers::trickle`] call, reading what the site sends
//! back. Bench code: every loop is bounded, errors are returned as text.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};

/// What the site sends each connection once its first bytes arrived (a first TLS flight and a
/// small page).
pub const SITE_ANSWER: usize = 16 * 1024;
/// Probers per loopback source address.
const PER_SOURCE: usize = 50;
/// Bound on one prober's connect and first write.
const OP_TIMEOUT: Duration = Duration::from_secs(10);
const LISTENER: Token = Token(usize::MAX);

/// The mask site: see the module header. Stopped and joined on drop.
pub struct Site {
    addr: SocketAddr,
    live: Arc<AtomicUsize>,
    accepted: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// One site connection: bytes queued for it, and whether its answer went out.
struct Visit {
    sock: TcpStream,
    out: Vec<u8>,
    answered: bool,
}

impl Site {
    /// Binds 127.0.0.1 on an ephemeral port and starts serving.
    pub fn start() -> Result<Site, String> {
        let mut listener = TcpListener::bind(([127, 0, 0, 1], 0).into())
            .map_err(|e| format!("site: bind: {e}"))?;
        let addr = listener
            .local_addr()
            .map_err(|e| format!("site: addr: {e}"))?;
        let poll = Poll::new().map_err(|e| format!("site: poll: {e}"))?;
        poll.registry()
            .register(&mut listener, LISTENER, Interest::READABLE)
            .map_err(|e| format!("site: register: {e}"))?;
        let live = Arc::new(AtomicUsize::new(0));
        let accepted = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (l2, a2, s2) = (live.clone(), accepted.clone(), stop.clone());
        let thread = std::thread::spawn(move || serve(poll, listener, &l2, &a2, &s2));
        Ok(Site {
            addr,
            live,
            accepted,
            stop,
            thread: Some(thread),
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Connections open now.
    pub fn live(&self) -> usize {
        self.live.load(Ordering::Relaxed)
    }

    /// Connections accepted since start.
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::Relaxed)
    }
}

impl Drop for Site {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The site's loop: until `stop`, polling every 50 ms at most.
fn serve(
    mut poll: Poll,
    listener: TcpListener,
    live: &AtomicUsize,
    accepted: &AtomicUsize,
    stop: &AtomicBool,
) {
    let mut events = Events::with_capacity(1024);
    let mut visits: HashMap<usize, Visit> = HashMap::new();
    let mut next = 0usize;
    let answer: Vec<u8> = (0..SITE_ANSWER).map(|i| (i % 251) as u8).collect();
    while !stop.load(Ordering::Relaxed) {
        if poll
            .poll(&mut events, Some(Duration::from_millis(50)))
            .is_err()
        {
            continue;
        }
        for ev in events.iter() {
            if ev.token() == LISTENER {
                while let Ok((mut sock, _)) = listener.accept() {
                    let tok = Token(next);
                    next += 1;
                    let both = Interest::READABLE | Interest::WRITABLE;
                    if poll.registry().register(&mut sock, tok, both).is_ok() {
                        let out = Vec::new();
                        visits.insert(
                            tok.0,
                            Visit {
                                sock,
                                out,
                                answered: false,
                            },
                        );
                        accepted.fetch_add(1, Ordering::Relaxed);
                        live.fetch_add(1, Ordering::Relaxed);
                    }
                }
                continue;
            }
            let Some(v) = visits.get_mut(&ev.token().0) else {
                continue;
            };
            if !pump(v, &answer) {
                let _ = v.sock.shutdown(Shutdown::Both);
                let _ = poll.registry().deregister(&mut v.sock);
                visits.remove(&ev.token().0);
                live.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }
}

/// Reads what is there (answering the first bytes, echoing the rest) and writes what is
/// queued; false once the visit is over (end of stream or an error).
fn pump(v: &mut Visit, answer: &[u8]) -> bool {
    let mut buf = [0u8; 4096];
    loop {
        match v.sock.read(&mut buf) {
            Ok(0) => return false,
            Ok(n) => {
                if !v.answered {
                    v.answered = true;
                    v.out.extend_from_slice(answer);
                } else {
                    v.out.extend_from_slice(&buf[..n]);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return false,
        }
    }
    while !v.out.is_empty() {
        match v.sock.write(&v.out) {
            Ok(0) => return false,
            Ok(n) => {
                v.out.drain(..n);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return false,
        }
    }
    true
}

/// Slow probers that are not our clients (module header).
pub struct Probers {
    socks: Vec<std::net::TcpStream>,
    /// Bytes each prober received so far.
    got: Vec<usize>,
}

impl Probers {
    /// Opens `n` probers to `proxy` (first bytes sent, see the module header), numbered from
    /// `first` (their source addresses follow the number).
    pub fn open(proxy: SocketAddr, first: usize, n: usize) -> Result<Probers, String> {
        let mut socks = Vec::with_capacity(n);
        for i in first..first + n {
            let src = SocketAddr::from(([127, 0, 0, (2 + (i / PER_SOURCE) % 250) as u8], 0));
            let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
                .map_err(|e| format!("prober {i}: socket: {e}"))?;
            sock.bind(&src.into())
                .map_err(|e| format!("prober {i}: bind {src}: {e}"))?;
            sock.connect_timeout(&proxy.into(), OP_TIMEOUT)
                .map_err(|e| format!("prober {i}: connect: {e}"))?;
            let mut s: std::net::TcpStream = sock.into();
            let _ = s.set_write_timeout(Some(OP_TIMEOUT));
            let first_bytes = if i % 2 == 0 {
                foreign_hello()?
            } else {
                b"GET / HTTP/1.1\r\nHost: localhost\r\n".to_vec()
            };
            s.write_all(&first_bytes)
                .map_err(|e| format!("prober {i}: first bytes: {e}"))?;
            s.set_nonblocking(true)
                .map_err(|e| format!("prober {i}: nonblocking: {e}"))?;
            socks.push(s);
        }
        let got = vec![0; socks.len()];
        Ok(Probers { socks, got })
    }

    /// Each prober sends one more byte (a header character) and reads what arrived.
    pub fn trickle(&mut self) {
        for s in &mut self.socks {
            let _ = s.write(b"x");
        }
        self.read_all();
    }

    /// Reads what arrived for every prober (non-blocking).
    pub fn read_all(&mut self) {
        let mut buf = [0u8; 16 * 1024];
        for (s, got) in self.socks.iter_mut().zip(&mut self.got) {
            for _ in 0..16 {
                match s.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => *got += n,
                    Err(_) => break,
                }
            }
        }
    }

    /// Probers that received at least the site's answer.
    pub fn answered(&self) -> usize {
        self.got.iter().filter(|&&g| g >= SITE_ANSWER).count()
    }

    pub fn len(&self) -> usize {
        self.socks.len()
    }
}

/// A TLS 1.3 ClientHello from rustls for `localhost`: well-formed, but its random is no
/// secret's digest, so the proxy's gate refuses it and masks the connection.
fn foreign_hello() -> Result<Vec<u8>, String> {
    let roots = rustls::RootCertStore::empty();
    let cfg = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name =
        rustls::pki_types::ServerName::try_from("localhost").map_err(|e| format!("hello: {e}"))?;
    let mut c =
        rustls::ClientConnection::new(Arc::new(cfg), name).map_err(|e| format!("hello: {e}"))?;
    let mut out = Vec::new();
    c.write_tls(&mut out).map_err(|e| format!("hello: {e}"))?;
    Ok(out)
}
