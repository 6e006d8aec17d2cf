//! A local TCP balancer for black-box tests: what docs/ways-in.md's PROXY protocol layout puts in front of the proxy on
//! the same host (nginx `stream`, HAProxy in `mode tcp`). Every connection it accepts on
//! 127.0.0.1 is forwarded to one backend from 127.0.0.1 (a port the kernel picks, like nginx's),
//! optionally after a PROXY protocol v1 header naming the client's address and the address it
//! connected to. Blocking, threads per connection (test code); it runs until the process ends.
//! [`Balancer::recording`] also keeps the first 5 bytes each client sent (a TLS record header:
//! what a test asserts about a hello's size on the wire).

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;

/// A running balancer.
pub struct Balancer {
    addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
    heads: Arc<Mutex<Vec<Vec<u8>>>>,
}

/// Bytes of each client's stream [`Balancer::recording`] keeps.
const HEAD: usize = 5;

impl Balancer {
    /// Listens on 127.0.0.1 (ephemeral port) and forwards to `backend`, with a PROXY v1 header
    /// first when `proxy_header`.
    pub fn start(backend: SocketAddr, proxy_header: bool) -> Balancer {
        Balancer::run(backend, proxy_header, false)
    }

    /// [`Balancer::start`] without a PROXY header that keeps the first 5 bytes of what each
    /// client sent ([`Balancer::heads`]) before forwarding them.
    pub fn recording(backend: SocketAddr) -> Balancer {
        Balancer::run(backend, false, true)
    }

    fn run(backend: SocketAddr, proxy_header: bool, record: bool) -> Balancer {
        let l = TcpListener::bind("127.0.0.1:0").expect("balancer: bind");
        let addr = l.local_addr().unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let heads = Arc::new(Mutex::new(Vec::new()));
        let (n, h) = (accepted.clone(), heads.clone());
        thread::spawn(move || {
            for c in l.incoming() {
                let Ok(mut c) = c else { continue };
                n.fetch_add(1, Ordering::SeqCst);
                let h = h.clone();
                thread::spawn(move || {
                    let mut head = Vec::new();
                    if record {
                        let mut b = [0u8; HEAD];
                        if c.read_exact(&mut b).is_err() {
                            return;
                        }
                        h.lock().unwrap().push(b.to_vec());
                        head = b.to_vec();
                    }
                    forward(c, backend, proxy_header, head)
                });
            }
        });
        Balancer {
            addr,
            accepted,
            heads,
        }
    }

    /// The first 5 bytes of each client's stream, in accept order ([`Balancer::recording`]).
    pub fn heads(&self) -> Vec<Vec<u8>> {
        self.heads.lock().unwrap().clone()
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

/// Forwards `client` to `backend` both ways; `head` (bytes already read from the client) goes
/// first, after the PROXY header if any.
fn forward(client: TcpStream, backend: SocketAddr, proxy_header: bool, head: Vec<u8>) {
    let Ok(mut up) = TcpStream::connect(backend) else {
        return;
    };
    if proxy_header {
        let (src, dst) = (client.peer_addr().unwrap(), client.local_addr().unwrap());
        let fam = if src.is_ipv4() { "TCP4" } else { "TCP6" };
        let line = format!(
            "PROXY {fam} {} {} {} {}\r\n",
            src.ip(),
            dst.ip(),
            src.port(),
            dst.port()
        );
        if up.write_all(line.as_bytes()).is_err() {
            return;
        }
    }
    if up.write_all(&head).is_err() {
        return;
    }
    let (c2, u2) = (client.try_clone().unwrap(), up.try_clone().unwrap());
    let t = thread::spawn(move || pump(c2, u2));
    pump(up, client);
    let _ = t.join();
}

/// Copies `from` → `to` until an end or an error, then passes the end on (half-close).
fn pump(mut from: TcpStream, mut to: TcpStream) {
    let mut buf = [0u8; 16 * 1024];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}
