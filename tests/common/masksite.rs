//! A fake "real site" for the fake-TLS masking tests: what a proxy hands a hello that is not
//! its own to (`--mask-host`). [`MaskSite::start_tls`] is a rustls server on 127.0.0.1 with the
//! test-only `tests/data/mask.pem` (SAN `mask.example.org`, signed by the test CA) answering any
//! request with [`PAGE`]; [`MaskSite::start_plain`] is a plain-TCP recorder that answers the
//! same page once it has read a request head. Both record, per accepted connection
//! ([`Visit`]), the first bytes received (up to [`RECORD_CAP`], so a test can check the proxy
//! replayed a client's hello byte for byte) and the SNI seen (in the hello, and by rustls once
//! a handshake completed).
//!
//! Also [`tls_get`], a real TLS client (rustls trusting tests/data/ca.pem) that fetches a page
//! and returns the certificate it was shown. Blocking, thread per connection (test code).

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConnection, ServerConfig, ServerConnection, StreamOwned};

/// The mask site's test-only certificate and key (tests/data/README.md).
pub const MASK_PEM: &[u8] = include_bytes!("../data/mask.pem");
pub const MASK_KEY: &[u8] = include_bytes!("../data/mask.key");
/// The only name the mask certificate is valid for.
pub const MASK_DOMAIN: &str = "mask.example.org";
/// The body of every answer.
pub const PAGE: &str = "mask site page";
/// Bytes recorded per connection.
pub const RECORD_CAP: usize = 64 * 1024;
/// Bound on each socket operation of a visit.
const IO_TIMEOUT: Duration = Duration::from_secs(10);
/// Bound on a request head.
const MAX_HEAD: usize = 8 * 1024;

/// One accepted connection, as seen so far.
#[derive(Clone, Debug, Default)]
pub struct Visit {
    /// The first bytes received (≤ [`RECORD_CAP`]), raw: over TLS, the ClientHello onwards.
    pub first_bytes: Vec<u8>,
    /// TLS: the SNI of a completed handshake (`None` without one).
    pub sni: Option<String>,
    /// TLS: the handshake completed.
    pub tls_ok: bool,
    /// Pages served.
    pub pages: usize,
    /// What ended the visit early (TLS error, bad request), if anything did.
    pub error: Option<String>,
    /// The connection ended.
    pub closed: bool,
}

impl Visit {
    /// The SNI of the ClientHello the visit began with (parsed from [`Visit::first_bytes`], so
    /// known even when the handshake never completed); None if absent or not a hello.
    pub fn hello_sni(&self) -> Option<String> {
        super::faketls::hello_sni(&self.first_bytes)
    }
}

#[derive(Default)]
struct State {
    visits: Vec<Visit>,
    /// A clone of each visit's socket (index = visit), to end it on stop; taken and shut down
    /// when the visit ends, so a kept clone never holds a finished connection open.
    socks: Vec<Option<TcpStream>>,
    threads: Vec<JoinHandle<()>>,
    stopping: bool,
}

type Shared = Arc<Mutex<State>>;

fn lock(s: &Shared) -> MutexGuard<'_, State> {
    s.lock().unwrap_or_else(|e| e.into_inner())
}

/// A running mask site; dropping it stops it.
pub struct MaskSite {
    addr: SocketAddr,
    shared: Shared,
    accept: Option<JoinHandle<()>>,
    listener: Option<TcpListener>,
}

impl MaskSite {
    /// The TLS site (mask.pem) on 127.0.0.1, ephemeral port.
    pub fn start_tls() -> MaskSite {
        MaskSite::start(Some(server_config()))
    }

    /// The plain-TCP recorder on 127.0.0.1, ephemeral port.
    pub fn start_plain() -> MaskSite {
        MaskSite::start(None)
    }

    fn start(tls: Option<Arc<ServerConfig>>) -> MaskSite {
        let listener = TcpListener::bind("127.0.0.1:0").expect("mask site: bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("mask site: local_addr");
        let shared: Shared = Arc::default();
        let l2 = listener.try_clone().expect("mask site: clone listener");
        let sh = shared.clone();
        let accept = std::thread::spawn(move || accept_loop(l2, sh, tls));
        MaskSite {
            addr,
            shared,
            accept: Some(accept),
            listener: Some(listener),
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Every connection so far, in accept order.
    pub fn visits(&self) -> Vec<Visit> {
        lock(&self.shared).visits.clone()
    }

    /// Connections accepted.
    pub fn connections(&self) -> usize {
        lock(&self.shared).visits.len()
    }

    /// Waits until visit `i` exists and has recorded at least `len` bytes (→ that visit) or
    /// `timeout` passes (→ None).
    pub fn wait_bytes(&self, i: usize, len: usize, timeout: Duration) -> Option<Visit> {
        let mut got = None;
        super::wait_until(timeout, || {
            got = lock(&self.shared)
                .visits
                .get(i)
                .filter(|v| v.first_bytes.len() >= len)
                .cloned();
            got.is_some()
        });
        got
    }

    /// Waits until visit `i` has ended (→ it) or `timeout` passes (→ None).
    pub fn wait_closed(&self, i: usize, timeout: Duration) -> Option<Visit> {
        let mut got = None;
        super::wait_until(timeout, || {
            got = lock(&self.shared)
                .visits
                .get(i)
                .filter(|v| v.closed)
                .cloned();
            got.is_some()
        });
        got
    }

    /// Closes the listener and every connection, joins the threads. Idempotent.
    pub fn stop(&mut self) {
        let Some(accept) = self.accept.take() else {
            return;
        };
        lock(&self.shared).stopping = true;
        if let Some(l) = self.listener.take() {
            let _ = socket2::SockRef::from(&l).shutdown(Shutdown::Both);
            let _ = TcpStream::connect_timeout(&self.addr, Duration::from_millis(200));
        }
        let _ = accept.join();
        let threads = {
            let mut s = lock(&self.shared);
            for sock in s.socks.iter().flatten() {
                let _ = sock.shutdown(Shutdown::Both);
            }
            std::mem::take(&mut s.threads)
        };
        for t in threads {
            let _ = t.join();
        }
    }
}

impl Drop for MaskSite {
    fn drop(&mut self) {
        self.stop();
    }
}

fn accept_loop(listener: TcpListener, shared: Shared, tls: Option<Arc<ServerConfig>>) {
    loop {
        let accepted = listener.accept();
        if lock(&shared).stopping {
            return;
        }
        let Ok((sock, _)) = accepted else {
            std::thread::sleep(Duration::from_millis(20)); // EMFILE: back off, do not spin
            continue;
        };
        let idx = {
            let mut s = lock(&shared);
            s.visits.push(Visit::default());
            s.socks.push(sock.try_clone().ok());
            s.visits.len() - 1
        };
        let sh = shared.clone();
        let tls = tls.clone();
        let t = std::thread::spawn(move || {
            let _ = sock.set_read_timeout(Some(IO_TIMEOUT));
            let _ = sock.set_write_timeout(Some(IO_TIMEOUT));
            let rec = Recorder {
                sock,
                shared: sh.clone(),
                idx,
            };
            let end = match tls {
                Some(cfg) => serve_tls(rec, cfg, &sh, idx),
                None => serve_plain(rec, &sh, idx),
            };
            let mut s = lock(&sh);
            if let Some(sock) = s.socks[idx].take() {
                let _ = sock.shutdown(Shutdown::Both);
            }
            let v = &mut s.visits[idx];
            v.closed = true;
            if let Err(e) = end {
                v.error.get_or_insert(e);
            }
        });
        lock(&shared).threads.push(t);
    }
}

/// The socket, recording the first [`RECORD_CAP`] bytes read into its visit.
struct Recorder {
    sock: TcpStream,
    shared: Shared,
    idx: usize,
}

impl Read for Recorder {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.sock.read(buf)?;
        let mut s = lock(&self.shared);
        let rec = &mut s.visits[self.idx].first_bytes;
        let keep = n.min(RECORD_CAP - rec.len());
        rec.extend_from_slice(&buf[..keep]);
        Ok(n)
    }
}

impl Write for Recorder {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.sock.write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.sock.flush()
    }
}

/// The HTTP answer to any request.
pub fn page_response() -> String {
    format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{PAGE}",
        PAGE.len()
    )
}

/// Reads a request head (to the blank line, ≤ [`MAX_HEAD`]).
fn read_head(r: &mut impl Read) -> Result<(), String> {
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if head.len() >= MAX_HEAD {
            return Err("request head too long".into());
        }
        match r.read(&mut b) {
            Ok(0) => return Err("eof before a request head".into()),
            Ok(_) => head.push(b[0]),
            Err(e) => return Err(format!("reading the request: {e}")),
        }
    }
    Ok(())
}

fn serve_tls(rec: Recorder, cfg: Arc<ServerConfig>, sh: &Shared, idx: usize) -> Result<(), String> {
    let conn = ServerConnection::new(cfg).map_err(|e| e.to_string())?;
    let mut tls = StreamOwned::new(conn, rec);
    while tls.conn.is_handshaking() {
        tls.conn
            .complete_io(&mut tls.sock)
            .map_err(|e| format!("TLS handshake: {e}"))?;
    }
    {
        let mut s = lock(sh);
        let v = &mut s.visits[idx];
        v.tls_ok = true;
        v.sni = tls.conn.server_name().map(str::to_string);
    }
    read_head(&mut tls)?;
    tls.write_all(page_response().as_bytes())
        .and_then(|_| tls.flush())
        .map_err(|e| format!("writing the page: {e}"))?;
    lock(sh).visits[idx].pages += 1;
    tls.conn.send_close_notify();
    let _ = tls.conn.complete_io(&mut tls.sock);
    let _ = tls.sock.sock.shutdown(Shutdown::Write);
    drain(&mut tls.sock);
    Ok(())
}

fn serve_plain(mut rec: Recorder, sh: &Shared, idx: usize) -> Result<(), String> {
    read_head(&mut rec)?;
    rec.write_all(page_response().as_bytes())
        .map_err(|e| format!("writing the page: {e}"))?;
    lock(sh).visits[idx].pages += 1;
    let _ = rec.sock.shutdown(Shutdown::Write);
    drain(&mut rec);
    Ok(())
}

/// Reads (recording) until the peer ends, so what it sent after our answer is seen too.
fn drain(r: &mut Recorder) {
    let mut buf = [0u8; 4096];
    while matches!(r.read(&mut buf), Ok(n) if n > 0) {}
}

fn server_config() -> Arc<ServerConfig> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(MASK_PEM)
        .collect::<Result<_, _>>()
        .expect("mask site: tests/data/mask.pem");
    let key = PrivateKeyDer::from_pem_slice(MASK_KEY).expect("mask site: tests/data/mask.key");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cfg = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("mask site: protocol versions")
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .expect("mask site: certificate");
    Arc::new(cfg)
}

/// The DER of mask.pem's certificate.
pub fn mask_cert_der() -> Vec<u8> {
    CertificateDer::pem_slice_iter(MASK_PEM)
        .next()
        .expect("mask.pem holds a certificate")
        .expect("mask.pem parses")
        .to_vec()
}

/// What [`tls_get`] saw.
#[derive(Debug)]
pub struct Fetched {
    /// DER of the leaf certificate the server presented.
    pub cert: Vec<u8>,
    /// The whole HTTP response (head and body) as text.
    pub response: String,
}

/// A real TLS client: connects to `addr`, handshakes with SNI `sni` verifying against
/// tests/data/ca.pem, sends `GET / HTTP/1.1`, reads the response to the end; everything
/// bounded by `timeout`. Errors as text.
pub fn tls_get(addr: SocketAddr, sni: &str, timeout: Duration) -> Result<Fetched, String> {
    let sock = TcpStream::connect_timeout(&addr, timeout).map_err(|e| format!("connect: {e}"))?;
    let deadline = Instant::now() + timeout;
    sock.set_read_timeout(Some(timeout))
        .and_then(|_| sock.set_write_timeout(Some(timeout)))
        .map_err(|e| e.to_string())?;
    let name = ServerName::try_from(sni.to_string()).map_err(|e| e.to_string())?;
    let conn = ClientConnection::new(super::test_client_tls(), name).map_err(|e| e.to_string())?;
    let mut tls = StreamOwned::new(conn, sock);
    while tls.conn.is_handshaking() {
        tls.conn
            .complete_io(&mut tls.sock)
            .map_err(|e| format!("TLS handshake: {e}"))?;
    }
    let cert = tls
        .conn
        .peer_certificates()
        .and_then(|c| c.first())
        .map(|c| c.to_vec())
        .ok_or("no peer certificate")?;
    let req = format!("GET / HTTP/1.1\r\nHost: {sni}\r\nConnection: close\r\n\r\n");
    tls.write_all(req.as_bytes())
        .map_err(|e| format!("write request: {e}"))?;
    let mut body = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        if Instant::now() >= deadline {
            return Err("response not finished in time".into());
        }
        match tls.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => body.extend_from_slice(&buf[..n]),
            // A peer that closes without close_notify after the whole page: keep what came.
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => break,
            Err(e) => return Err(format!("read response: {e}")),
        }
    }
    Ok(Fetched {
        cert,
        response: String::from_utf8_lossy(&body).into_owned(),
    })
}
