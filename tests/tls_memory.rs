//! Heap held by one `net::tls::TlsStream` (issue 7, "bound rustls' buffers"): a counting global
//! allocator tracks the live heap bytes of this test's thread, where the client stream lives
//! and does all its work, while a rustls server thread on 127.0.0.1 sends it 4 MiB in writes of
//! mixed sizes and then takes 256 KiB from it (so the client's upload waits, queued, while it
//! reads). Measured: the peak of steady traffic while reading into a 16 KiB buffer (the relay's
//! default), what the stream holds once it has carried that traffic and gone idle (its socket
//! would block), and that dropping it gives everything back. The numbers are printed
//! (`--nocapture`) and held to bounds derived from the design: the 16 KiB send cap, one record
//! in flight beyond the caller's buffer, rustls' 4 KiB deframer buffer when idle.
//!
//! Owns only this file. Real sockets on 127.0.0.1, no fixed sleeps (mio readiness with a
//! deadline).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::io::{self, Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::{Events, Interest, Poll, Token};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tg_ws_proxy::net::tls::{client_config_with, CipherPref, TlsStream, SCRATCH_LEN};

struct Counting;

thread_local! {
    /// Live heap bytes allocated minus freed by this thread.
    static LIVE: Cell<isize> = const { Cell::new(0) };
    /// Highest `LIVE` since the last reset.
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

fn add(n: isize) {
    let _ = LIVE.try_with(|l| {
        let v = l.get() + n;
        l.set(v);
        let _ = PEAK.try_with(|p| p.set(p.get().max(v)));
    });
}

// SAFETY: forwards to `System` unchanged; the counters are plain thread-local cells without
// destructors, so touching them never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let p = System.alloc(l);
        if !p.is_null() {
            add(l.size() as isize);
        }
        p
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        let p = System.alloc_zeroed(l);
        if !p.is_null() {
            add(l.size() as isize);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        System.dealloc(p, l);
        add(-(l.size() as isize));
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        let q = System.realloc(p, l, new);
        if !q.is_null() {
            add(new as isize - l.size() as isize);
        }
        q
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn live() -> isize {
    LIVE.with(|l| l.get())
}

fn reset_peak() {
    PEAK.with(|p| p.set(live()));
}

fn peak() -> isize {
    PEAK.with(|p| p.get())
}

const DOWN: usize = 4 << 20;
const UP: usize = 256 << 10;
/// Bytes received before the traffic peak is tracked: the handshake and its first flight
/// (plaintext queued before the handshake finished, certificates) are over by then.
const SETTLED: usize = 256 << 10;
/// The server's write sizes, in turn: small, odd, exactly one record, several records.
const WRITES: [usize; 5] = [1000, 16 * 1024, 70_000, 5, 33_333];

fn byte(i: usize) -> u8 {
    (i.wrapping_mul(31) ^ (i >> 11)) as u8
}

fn server_config() -> Arc<rustls::ServerConfig> {
    let certs: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(include_bytes!("data/server.pem"))
            .collect::<Result<_, _>>()
            .expect("tests/data/server.pem");
    let key = PrivateKeyDer::from_pem_slice(include_bytes!("data/server.key"))
        .expect("tests/data/server.key");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .expect("server cert");
    Arc::new(cfg)
}

/// Serves one connection: sends `DOWN` bytes, reads `UP` bytes (checked), then waits for the
/// client to close. Errors as text.
fn serve(listener: &TcpListener, cfg: Arc<rustls::ServerConfig>) -> Result<(), String> {
    let (sock, _) = listener.accept().map_err(|e| e.to_string())?;
    sock.set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    sock.set_write_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    let conn = rustls::ServerConnection::new(cfg).map_err(|e| e.to_string())?;
    let mut tls = rustls::StreamOwned::new(conn, sock);
    let data: Vec<u8> = (0..DOWN).map(byte).collect();
    let (mut off, mut k) = (0, 0);
    while off < DOWN {
        let n = WRITES[k % WRITES.len()].min(DOWN - off);
        tls.write_all(&data[off..off + n])
            .map_err(|e| format!("server write: {e}"))?;
        off += n;
        k += 1;
    }
    tls.flush().map_err(|e| e.to_string())?;
    let mut up = vec![0u8; UP];
    tls.read_exact(&mut up)
        .map_err(|e| format!("server read: {e}"))?;
    if up.iter().enumerate().any(|(i, b)| *b != byte(i + 7)) {
        return Err("upload corrupted".into());
    }
    let mut sink = [0u8; 64];
    // The client closes without close_notify: any end is fine.
    let _ = tls.read(&mut sink);
    Ok(())
}

/// What one session measured (bytes, relative to the live heap just before the stream was
/// created).
struct Held {
    /// Highest from creation until [`SETTLED`] bytes arrived (handshake, first flight).
    setup_peak: isize,
    /// Highest from then on (steady traffic both ways, the upload blocked by the server).
    peak: isize,
    idle: isize,
    after_drop: isize,
}

/// One client session against a fresh server thread, reading with `buf[..sizes[k]]` for the
/// k-th read in turn; every byte is checked.
fn session(
    poll: &mut Poll,
    events: &mut Events,
    buf: &mut [u8],
    sizes: &[usize],
    up: &[u8],
) -> Held {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    let addr = listener.local_addr().expect("local_addr");
    let scfg = server_config();
    let server = std::thread::spawn(move || serve(&listener, scfg));
    let ca = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/ca.pem");
    let ccfg = client_config_with(Some(&ca), false, CipherPref::Auto).expect("client config");
    let std_sock = std::net::TcpStream::connect(addr).expect("connect");
    std_sock.set_nonblocking(true).expect("nonblocking");

    let base = live();
    reset_peak();
    let mut s = Box::new(
        TlsStream::new(
            &ccfg,
            "kws2.web.telegram.org",
            mio::net::TcpStream::from_std(std_sock),
        )
        .expect("TlsStream::new"),
    );
    poll.registry()
        .register(
            &mut s.sock,
            Token(0),
            Interest::READABLE | Interest::WRITABLE,
        )
        .expect("register");
    let deadline = Instant::now() + Duration::from_secs(20);
    let (mut sent, mut got, mut reads) = (0, 0, 0);
    let mut setup_peak = None;
    while got < DOWN || sent < UP || s.wants_write() {
        let mut blocked = true;
        if sent < UP {
            match s.write(&up[sent..]) {
                Ok(n) => {
                    sent += n;
                    blocked = false;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("client write: {e}"),
            }
        } else if s.wants_write() {
            match s.flush_tls() {
                Ok(true) => blocked = false,
                Ok(false) => {}
                Err(e) => panic!("client flush: {e}"),
            }
        }
        if got < DOWN {
            let len = sizes[reads % sizes.len()];
            reads += 1;
            match s.read(&mut buf[..len]) {
                Ok(0) => panic!("server ended early at {got}"),
                Ok(n) => {
                    if setup_peak.is_none() && got >= SETTLED {
                        setup_peak = Some(peak() - base);
                        reset_peak();
                    }
                    for (i, b) in buf[..n].iter().enumerate() {
                        assert_eq!(*b, byte(got + i), "byte {}", got + i);
                    }
                    got += n;
                    blocked = false;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("client read: {e}"),
            }
        }
        if blocked {
            assert!(Instant::now() < deadline, "stuck: got {got}, sent {sent}");
            poll.poll(events, Some(Duration::from_millis(100)))
                .expect("poll");
        }
    }
    // Everything arrived: the next read finds an empty socket and the stream goes idle.
    match s.read(buf) {
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
        other => panic!("expected WouldBlock once idle, got {other:?}"),
    }
    let idle = live() - base;
    let peak = peak() - base;
    let _ = poll.registry().deregister(&mut s.sock);
    drop(s);
    let after_drop = live() - base;
    server
        .join()
        .expect("server thread")
        .expect("server side of the session");
    Held {
        setup_peak: setup_peak.unwrap_or(0),
        peak,
        idle,
        after_drop,
    }
}

#[test]
fn an_idle_stream_that_carried_traffic_holds_little_and_a_busy_one_one_record_beyond() {
    let mut poll = Poll::new().expect("poll");
    let mut events = Events::with_capacity(16);
    let mut buf = vec![0u8; 16 * 1024];
    let up: Vec<u8> = (0..UP).map(|i| byte(i + 7)).collect();
    // The first session also allocates this thread's ciphertext scratch (64 KiB, shared by
    // every stream on the thread) and rustls' one-time state; the second is the measurement.
    let relay = [buf.len()];
    let warm = session(&mut poll, &mut events, &mut buf, &relay, &up);
    let h = session(&mut poll, &mut events, &mut buf, &relay, &up);
    eprintln!(
        "TlsStream heap (bytes; size_of TlsStream {}): first session setup peak {} \
         traffic peak {} idle {} after drop {}; measured session setup peak {} \
         traffic peak {} idle {} after drop {}",
        std::mem::size_of::<TlsStream>(),
        warm.setup_peak,
        warm.peak,
        warm.idle,
        warm.after_drop,
        h.setup_peak,
        h.peak,
        h.idle,
        h.after_drop
    );
    // Idle: rustls' 4 KiB deframer buffer, its connection state and queue capacities.
    assert!(h.idle <= 12 * 1024, "idle stream holds {} B", h.idle);
    // Busy, reading and writing at once: the fixed state, the 16 KiB send cap
    // (`TLS_BUFFER_LIMIT`) and its record, the deframer holding a partial record (≤ 18 KiB),
    // one record's plaintext that did not fit the 16 KiB buffer, one record being decrypted.
    assert!(h.peak <= 80 * 1024, "traffic peak {} B", h.peak);
    // Nothing stays behind per stream; the config's resumption cache keeps the server's
    // tickets (shared, bounded by rustls per server name).
    assert!(h.after_drop <= 4 * 1024, "after drop {} B", h.after_drop);
}

#[test]
fn reads_of_any_size_get_every_byte_in_order() {
    let mut poll = Poll::new().expect("poll");
    let mut events = Events::with_capacity(16);
    let mut buf = vec![0u8; 200 * 1024];
    let up: Vec<u8> = (0..UP).map(|i| byte(i + 7)).collect();
    // Tiny reads make rustls' plaintext buffer fill while ciphertext is still in hand (the
    // per-stream stash); huge ones read the full scratch at once.
    let sizes = [1, 100, 16 * 1024, 200 * 1024, 4095, 7, 64 * 1024, 18_437];
    let h = session(&mut poll, &mut events, &mut buf, &sizes, &up);
    // This thread's first stream: its scratch buffer stays for the thread's next streams.
    assert!(
        h.after_drop <= (SCRATCH_LEN + 4 * 1024) as isize,
        "after drop {} B",
        h.after_drop
    );
}
