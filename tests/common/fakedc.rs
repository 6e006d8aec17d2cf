//! A fake Telegram DC for black-box tests and `examples/demo.rs`: a TLS + WebSocket front like
//! `kwsN.web.telegram.org/apiws` ([`FakeDc::start_tls_ws`]), a raw obfuscated2 DC port
//! ([`FakeDc::start_tcp`]), or a Cloudflare Worker look-alike that tunnels to a TCP `dst`
//! ([`FakeDc::start_worker`], docs/protocol.md §4.2), on 127.0.0.1 with an ephemeral port (a TLS
//! front may sit on another loopback address: [`FakeDc::try_start_tls_ws_at`]).
//!
//! Blocking and thread-per-connection (test code). It reads the relay init with
//! `obfs2::accept_raw`, decodes transport packets with `framing`, answers `req_pq_multi` with a
//! `resPQ`, serves `BULK` requests, swallows `SINK` packets (no reply: upload benchmarks), echoes
//! anything else, and records what it saw (SNI, Host,
//! path, subprotocol, per-message framing) so tests can assert the proxy's wire behaviour.
//! Faults are settable at runtime: [`DcHandle::set_fault`] for connections accepted from then on,
//! [`DcHandle::set_outage`] for every session, already-upgraded ones included,
//! [`DcHandle::freeze_live`] for the connections open at that moment only. It must stay
//! self-contained (only std, rustls, tungstenite, socket2 and the `tg_ws_proxy` lib): the demo
//! includes this file by path.
#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::ops::Deref;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ServerConfig, ServerConnection, StreamOwned};
use tungstenite::handshake::server::{ErrorResponse, Request, Response};
use tungstenite::http::{HeaderValue, StatusCode};
use tungstenite::protocol::WebSocketConfig;
use tungstenite::{Message, WebSocket};

use tg_ws_proxy::mtproto::framing::{self, Decoder, Step};
use tg_ws_proxy::mtproto::obfs2::{self, Cipher, Tag, INIT_LEN};
use tg_ws_proxy::mtproto::packet;
use tg_ws_proxy::rng::Rng;

// Relative to this file's directory whether it is loaded as `common::fakedc` or by `#[path]`.
#[path = "fakedc_worker.rs"]
mod worker;

/// The test-only leaf certificate and key served by the TLS front (see tests/data/README.md).
pub const SERVER_PEM: &[u8] = include_bytes!("../data/server.pem");
pub const SERVER_KEY: &[u8] = include_bytes!("../data/server.key");

/// Bound on TLS + upgrade + init reading for one connection.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Socket read size on the raw TCP DC.
const READ_CHUNK: usize = 64 * 1024;

/// What the fake DC does wrong, decided per connection when it is accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Behave.
    None,
    /// Accept the TCP connection and close it at once.
    Refuse,
    /// Answer the WS upgrade with this HTTP status (302/303/307/308 carry a `Location`).
    /// On the raw TCP DC this acts as `Refuse`.
    HttpStatus(u16),
    /// Answer the WS upgrade with `status` and `Retry-After: secs` (e.g. 429). TCP DC: `Refuse`.
    HttpRetryAfter { status: u16, secs: u32 },
    /// Answer 101, then close (TLS close_notify + FIN). TCP DC: close right after the init.
    CloseAfterUpgrade,
    /// Answer 101, then read and discard everything and never answer.
    SilentAfterUpgrade,
    /// Close once at least this many bytes came in after the upgrade (the 64-byte init
    /// included; WS counts message payload bytes). The packet that crosses it gets no reply.
    CloseAfterBytes(usize),
    /// Close once at least this many bytes went out (whole packets; the one that crosses it is
    /// sent complete, then the connection closes).
    CloseAfterSent(usize),
    /// WS front: close (WS close + TLS close_notify) once nothing arrived for this long, like
    /// an intermediary's idle timeout.
    CloseWhenIdle(Duration),
    /// WS front and Worker: close the session at the first WS ping received (counted in
    /// `pings`), like a front that does not take client pings (docs/protocol.md §6.4).
    CloseOnPing,
    /// WS front, Worker and TCP DC: once at least this many bytes went out (whole packets or
    /// messages, the one that crosses it sent complete), the connection goes silent: it reads and discards,
    /// never answers, never closes (the "16 KB freeze").
    StallAfterSent(usize),
    /// WS front, Worker (payload bytes) and TCP DC: the middlebox form of the "16 KB freeze"
    /// cut where it falls: once
    /// this many bytes of its output went out (WS frames with their headers; raw bytes on
    /// TCP), the rest is never sent — the frame and the transport packet it was in stay
    /// half-delivered — and the connection reads and discards, never answers, never closes.
    /// The kernel still ACKs everything (counted in `freezes`).
    FreezeAfterBytes(usize),
    /// Worker: after the 101, well-formed binary WS frames of random bytes (4 KiB each, every
    /// 20 ms, 64 of them), never connecting to `dst`: a "Worker" that is not MTProto.
    Garbage,
    /// WS front: after the first reply, a hand-made Close frame with this status code (e.g. a
    /// forbidden 999), then the end of the connection.
    CloseCodeAfterReply(u16),
    /// TCP DC: slow to take what it is sent, like a slow uplink seen from the proxy (our
    /// bytes wait in the proxy's own socket, unacknowledged): a 4 KiB receive buffer read at
    /// this many bytes a second. Answers as usual.
    SlowRead(usize),
    /// WS front: after the first reply, a Close (1000) and then, against RFC 6455 §5.5.1, a
    /// binary frame holding one more transport packet (`AFTER-CLOSE!`), then the end.
    DataAfterClose,
}

/// Start-up settings of a [`FakeDc`].
#[derive(Debug, Clone)]
pub struct DcConfig {
    pub fault: Fault,
    /// WS: wait this long before answering the upgrade; TCP: before reading the init.
    /// Interrupted by `stop`.
    pub delay: Duration,
}

impl Default for DcConfig {
    fn default() -> DcConfig {
        DcConfig {
            fault: Fault::None,
            delay: Duration::ZERO,
        }
    }
}

impl DcConfig {
    pub fn with_fault(fault: Fault) -> DcConfig {
        DcConfig {
            fault,
            ..DcConfig::default()
        }
    }
}

/// One binary WS message received after the init message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MsgRecord {
    /// Payload length in bytes.
    pub len: usize,
    /// True if it held exactly one complete transport packet: nothing was pending from earlier
    /// messages and the packet header's length covers the message exactly.
    pub one_packet: bool,
}

/// The first 8 bytes of a `BULK` request and of every packet of its reply: where a real
/// message carries its `auth_key_id`, which a real DC's reply repeats (the proxy checks that a
/// first reply answers a key the client used, docs/protocol.md §3.7).
pub const BULK_KEY: [u8; 8] = *b"BULKBULK";

/// A `BULK` request payload: [`BULK_KEY`] ‖ count u32 LE ‖ size u32 LE. The DC answers with
/// `count` packets of `size` bytes (rounded up to a multiple of 4, at least 12), each
/// [`bulk_payload`].
pub fn bulk_request(count: u32, size: u32) -> Vec<u8> {
    let mut p = BULK_KEY.to_vec();
    p.extend_from_slice(&count.to_le_bytes());
    p.extend_from_slice(&size.to_le_bytes());
    p
}

/// Packet `index` of a `BULK` reply (`size` ≥ 12): [`BULK_KEY`], index u32 LE, then byte `i` =
/// `(i·31 + index·7) mod 256`.
pub fn bulk_payload(index: u32, size: usize) -> Vec<u8> {
    let mut p: Vec<u8> = (0..size)
        .map(|i| {
            (i as u32)
                .wrapping_mul(31)
                .wrapping_add(index.wrapping_mul(7)) as u8
        })
        .collect();
    let n = size.min(8);
    p[..n].copy_from_slice(&BULK_KEY[..n]);
    if size >= 12 {
        p[8..12].copy_from_slice(&index.to_le_bytes());
    }
    p
}

/// A payload starting with this makes the DC close the session (after sending nothing more).
pub const QUIT: &[u8; 4] = b"QUIT";
/// A packet starting with these bytes is read and dropped without a reply (upload benchmarks:
/// the client sends `SINK` packets, then an echo whose reply proves every one arrived).
pub const SINK: &[u8; 4] = b"SINK";

#[derive(Default)]
struct State {
    fault: Option<Fault>,
    delay: Duration,
    outage: bool,
    outage_closes: usize,
    stopping: bool,
    connections: usize,
    upgrades: usize,
    inits: Vec<(Tag, i16)>,
    messages: Vec<MsgRecord>,
    snis: Vec<String>,
    failed_snis: Vec<String>,
    suites: Vec<String>,
    hosts: Vec<String>,
    paths: Vec<String>,
    protocols: Vec<Option<String>>,
    requests: usize,
    queries: Vec<String>,
    dsts: Vec<String>,
    dst_connects: usize,
    pings: usize,
    raw_messages: Vec<usize>,
    accepted_at: Vec<Instant>,
    violations: Vec<String>,
    bytes_in: u64,
    bytes_out: u64,
    max_sent: u64,
    live: usize,
    next_id: usize,
    socks: HashMap<usize, TcpStream>,
    threads: Vec<JoinHandle<()>>,
    /// Connections with an id up to this are frozen (see [`DcHandle::freeze_live`]).
    frozen_upto: usize,
    /// WS messages read and dropped by frozen connections.
    frozen_reads: usize,
    /// Connections frozen by [`Fault::FreezeAfterBytes`].
    freezes: usize,
    /// Connections served [`Fault::Garbage`].
    garbage: usize,
}

struct Shared {
    state: Mutex<State>,
    wake: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panicking session thread must not hide the counters from the test.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn violation(&self, what: String) {
        self.lock().violations.push(what);
    }

    /// True (and counted) if the outage switch closes a session whose init just arrived.
    fn outage_hit(&self) -> bool {
        let mut s = self.lock();
        if s.outage {
            s.outage_closes += 1;
        }
        s.outage
    }

    /// Sleeps `d` unless stopping; returns false if stopping.
    fn pause(&self, d: Duration) -> bool {
        let g = self.lock();
        let (g, _) = self
            .wake
            .wait_timeout_while(g, d, |s| !s.stopping)
            .unwrap_or_else(|e| e.into_inner());
        !g.stopping
    }
}

/// Cloneable view of a running [`FakeDc`]: fault control and counters, usable from any thread.
#[derive(Clone)]
pub struct DcHandle {
    shared: Arc<Shared>,
    addr: SocketAddr,
}

impl DcHandle {
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
    pub fn port(&self) -> u16 {
        self.addr.port()
    }
    /// Applies to connections accepted from now on; running sessions keep theirs.
    pub fn set_fault(&self, fault: Fault) {
        let mut s = self.shared.lock();
        s.fault = Some(fault);
        s.max_sent = 0;
    }
    pub fn set_delay(&self, delay: Duration) {
        self.shared.lock().delay = delay;
    }
    /// Total outage switch. While on, every session is closed as soon as its relay init
    /// arrives, with nothing sent back (WS front: WS close + TLS close_notify; TCP DC: FIN) —
    /// unlike [`DcHandle::set_fault`] this also hits sessions accepted and upgraded before the
    /// switch, such as the proxy's warm pooled upstreams. The upgrade itself still succeeds.
    /// The Worker look-alike only pipes bytes and ignores it.
    pub fn set_outage(&self, on: bool) {
        self.shared.lock().outage = on;
    }
    /// Freezes every connection open now, like a NAT or conntrack flush that leaves them
    /// established on our side: each reads and discards whatever arrives (the relay init
    /// included), never answers (not a WS Close or Ping either: from one of those on it only
    /// drains raw bytes), never closes on its own. Connections accepted later behave.
    /// TLS + WS front only.
    pub fn freeze_live(&self) {
        let mut s = self.shared.lock();
        s.frozen_upto = s.next_id;
    }
    /// WS messages read and dropped by connections frozen by [`DcHandle::freeze_live`].
    pub fn frozen_reads(&self) -> usize {
        self.shared.lock().frozen_reads
    }
    /// Connections frozen by [`Fault::FreezeAfterBytes`] so far.
    pub fn freezes(&self) -> usize {
        self.shared.lock().freezes
    }
    /// Worker connections served [`Fault::Garbage`] so far.
    pub fn garbage(&self) -> usize {
        self.shared.lock().garbage
    }
    /// Sessions closed by [`DcHandle::set_outage`] right after their relay init.
    pub fn outage_closes(&self) -> usize {
        self.shared.lock().outage_closes
    }
    /// TCP connections accepted.
    pub fn connections(&self) -> usize {
        self.shared.lock().connections
    }
    /// When each TCP connection was accepted, in order (`connections()` entries).
    pub fn accept_times(&self) -> Vec<Instant> {
        self.shared.lock().accepted_at.clone()
    }
    /// WS upgrades answered with 101.
    pub fn upgrades(&self) -> usize {
        self.shared.lock().upgrades
    }
    /// Valid relay inits received.
    pub fn inits(&self) -> usize {
        self.shared.lock().inits.len()
    }
    /// (tag, signed DC index) of every valid relay init, in arrival order.
    pub fn init_dcs(&self) -> Vec<(Tag, i16)> {
        self.shared.lock().inits.clone()
    }
    /// Binary WS messages after the init message, all sessions, arrival order.
    pub fn messages(&self) -> Vec<MsgRecord> {
        self.shared.lock().messages.clone()
    }
    /// TLS SNI of every handshake (`""` when none was sent).
    pub fn snis(&self) -> Vec<String> {
        self.shared.lock().snis.clone()
    }
    /// TLS SNI of every handshake that failed after the ClientHello (e.g. the client refused
    /// the certificate), `""` when none was sent; not in [`DcHandle::snis`].
    pub fn failed_snis(&self) -> Vec<String> {
        self.shared.lock().failed_snis.clone()
    }
    /// The negotiated cipher suite of every completed TLS handshake, in order (IANA names,
    /// `TLS13_CHACHA20_POLY1305_SHA256`). The front follows the client's suite order.
    pub fn suites(&self) -> Vec<String> {
        self.shared.lock().suites.clone()
    }
    /// HTTP `Host` of every upgrade request.
    pub fn hosts(&self) -> Vec<String> {
        self.shared.lock().hosts.clone()
    }
    /// Request path of every upgrade request.
    pub fn paths(&self) -> Vec<String> {
        self.shared.lock().paths.clone()
    }
    /// `Sec-WebSocket-Protocol` of every upgrade request (`None` = header absent).
    pub fn protocols(&self) -> Vec<Option<String>> {
        self.shared.lock().protocols.clone()
    }
    /// Protocol rule breaks seen (bad init message, unmasked frame, text message, bad framing…).
    pub fn violations(&self) -> Vec<String> {
        self.shared.lock().violations.clone()
    }
    /// Application bytes received (WS payloads / raw TCP bytes), init included.
    pub fn bytes_in(&self) -> u64 {
        self.shared.lock().bytes_in
    }
    /// Application bytes sent (encoded packets).
    pub fn bytes_out(&self) -> u64 {
        self.shared.lock().bytes_out
    }
    /// The most application bytes one session sent since start or the last
    /// [`DcHandle::set_fault`] (WS front and TCP DC; encoded packets).
    pub fn max_sent(&self) -> u64 {
        self.shared.lock().max_sent
    }
    /// Connections currently open.
    pub fn live_sessions(&self) -> usize {
        self.shared.lock().live
    }
    /// HTTP requests seen: on the Worker every request head read completely (upgrade or not,
    /// refused or not); on the TLS + WS front every well-formed upgrade request.
    pub fn requests(&self) -> usize {
        self.shared.lock().requests
    }
    /// Worker: raw query string (after `?`, `""` if none) of every request, arrival order.
    pub fn queries(&self) -> Vec<String> {
        self.shared.lock().queries.clone()
    }
    /// Worker: the `dst` parameter of every request that carried one (`IP` or `IP:PORT`).
    pub fn dsts(&self) -> Vec<String> {
        self.shared.lock().dsts.clone()
    }
    /// Worker: TCP connections to `dst` that succeeded.
    pub fn dst_connects(&self) -> usize {
        self.shared.lock().dst_connects
    }
    /// WS pings received (all sessions; both the TLS+WS front and the Worker count them).
    pub fn pings(&self) -> usize {
        self.shared.lock().pings
    }
    /// Worker: payload length of every binary message received after the 101, arrival order
    /// (the relay init included; the Worker does not look inside).
    pub fn raw_messages(&self) -> Vec<usize> {
        self.shared.lock().raw_messages.clone()
    }
}

/// The value of query parameter `name` in a raw query string (`a=1&b=2`), undecoded.
pub fn query_param<'a>(query: &'a str, name: &str) -> Option<&'a str> {
    query.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        (k == name).then_some(v)
    })
}

/// A running fake DC. Dropping it stops it.
pub struct FakeDc {
    handle: DcHandle,
    accept: Option<JoinHandle<()>>,
    listener: Option<TcpListener>,
}

#[derive(Clone)]
enum Kind {
    TlsWs(Arc<ServerConfig>),
    /// `ws://`: the WebSocket front without TLS (the `cfproxy-ws` tier's far end).
    PlainWs,
    Tcp,
    Worker(Arc<ServerConfig>),
}

impl Deref for FakeDc {
    type Target = DcHandle;
    fn deref(&self) -> &DcHandle {
        &self.handle
    }
}

impl FakeDc {
    /// TLS (tests/data/server.pem) + WebSocket front answering `GET /apiws` and `/apiws_test`.
    pub fn start_tls_ws(cfg: DcConfig) -> FakeDc {
        FakeDc::start(cfg, Kind::TlsWs(server_tls_config()))
    }

    /// [`FakeDc::start_tls_ws`] serving another test-only certificate (PEM chain and PKCS#8
    /// key, e.g. tests/data/mask.pem): a front whose certificate covers only a fronting name.
    pub fn start_tls_ws_with_cert(cfg: DcConfig, cert_pem: &[u8], key_pem: &[u8]) -> FakeDc {
        FakeDc::start(cfg, Kind::TlsWs(tls_config_for(cert_pem, key_pem)))
    }

    /// [`FakeDc::start_tls_ws_with_cert`] listening on `bind` (a loopback address, port 0 for
    /// an ephemeral one), so fronts that share a port can sit on 127.0.0.2, 127.0.0.3, …;
    /// `Err` if the address cannot be bound (e.g. the port is taken there).
    pub fn try_start_tls_ws_at(
        bind: SocketAddr,
        cfg: DcConfig,
        cert_pem: &[u8],
        key_pem: &[u8],
    ) -> io::Result<FakeDc> {
        let listener = TcpListener::bind(bind)?;
        Ok(FakeDc::start_on(
            listener,
            cfg,
            Kind::TlsWs(tls_config_for(cert_pem, key_pem)),
        ))
    }

    /// [`FakeDc::start_tls_ws`] without TLS: a `ws://` front (what a Cloudflare-proxied
    /// domain's plain-HTTP port looks like to the `cfproxy-ws` tier). Records no SNI.
    pub fn start_plain_ws(cfg: DcConfig) -> FakeDc {
        FakeDc::start(cfg, Kind::PlainWs)
    }

    /// Raw obfuscated2 DC port (what the `tcp` tier connects to).
    pub fn start_tcp(cfg: DcConfig) -> FakeDc {
        FakeDc::start(cfg, Kind::Tcp)
    }

    /// [`FakeDc::start_tcp`] listening on `bind` (e.g. a DC's own address inside a test's
    /// network namespace).
    pub fn start_tcp_at(bind: SocketAddr, cfg: DcConfig) -> io::Result<FakeDc> {
        let listener = TcpListener::bind(bind)?;
        Ok(FakeDc::start_on(listener, cfg, Kind::Tcp))
    }

    /// Cloudflare Worker look-alike (docs/protocol.md §4.2): TLS with tests/data/server.pem (valid
    /// for `*.workers.dev` and 127.0.0.1), then one HTTP request: no `Upgrade: websocket` →
    /// 426, path other than `/apiws` → 404, missing/unparsable `dst` → 400; else faults apply,
    /// then 101 **without** a subprotocol, TCP connect to `dst` (`IP` → `IP:443`, or
    /// `IP:PORT`), and a byte pipe: each binary message → TCP, each TCP read → one binary
    /// message; either side ending closes both. `HttpStatus`/`HttpRetryAfter` answer the
    /// request; `CloseAfterUpgrade` = 101 then close; `SilentAfterUpgrade` = 101 then read and
    /// discard, never connecting to `dst`; `CloseAfterBytes`/`CloseAfterSent` count payload
    /// bytes in/out of the WS side; `delay` holds the answer to the request.
    pub fn start_worker(cfg: DcConfig) -> FakeDc {
        FakeDc::start(cfg, Kind::Worker(server_tls_config()))
    }

    /// [`FakeDc::start_worker`] listening on `bind` (a loopback address such as 127.0.0.2,
    /// port 0 for an ephemeral one), so several "Cloudflare edges" can share one port; `Err`
    /// if the address cannot be bound (e.g. the port is taken there).
    pub fn try_start_worker_at(bind: SocketAddr, cfg: DcConfig) -> io::Result<FakeDc> {
        let listener = TcpListener::bind(bind)?;
        Ok(FakeDc::start_on(
            listener,
            cfg,
            Kind::Worker(server_tls_config()),
        ))
    }

    fn start(cfg: DcConfig, kind: Kind) -> FakeDc {
        let listener = TcpListener::bind("127.0.0.1:0").expect("fake DC: bind 127.0.0.1:0");
        FakeDc::start_on(listener, cfg, kind)
    }

    fn start_on(listener: TcpListener, cfg: DcConfig, kind: Kind) -> FakeDc {
        let addr = listener.local_addr().expect("fake DC: local_addr");
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                fault: Some(cfg.fault),
                delay: cfg.delay,
                ..State::default()
            }),
            wake: Condvar::new(),
        });
        let l2 = listener.try_clone().expect("fake DC: clone listener");
        let sh = shared.clone();
        let accept = std::thread::Builder::new()
            .name(format!("fakedc-{}", addr.port()))
            .spawn(move || accept_loop(l2, sh, kind))
            .expect("fake DC: spawn");
        FakeDc {
            handle: DcHandle { shared, addr },
            accept: Some(accept),
            listener: Some(listener),
        }
    }

    /// A cloneable handle for other threads.
    pub fn handle(&self) -> DcHandle {
        self.handle.clone()
    }

    /// Closes the listener and every session, and joins all threads. Idempotent.
    pub fn stop(&mut self) {
        let Some(accept) = self.accept.take() else {
            return;
        };
        let shared = &self.handle.shared;
        shared.lock().stopping = true;
        shared.wake.notify_all();
        if let Some(l) = self.listener.take() {
            // shutdown() on a listening socket wakes a blocked accept() on Linux; the connect
            // covers platforms where it does not.
            let _ = socket2::SockRef::from(&l).shutdown(Shutdown::Both);
            let _ = TcpStream::connect_timeout(&self.handle.addr, Duration::from_millis(200));
        }
        let _ = accept.join();
        let threads = {
            let mut s = shared.lock();
            for sock in s.socks.values() {
                let _ = sock.shutdown(Shutdown::Both);
            }
            std::mem::take(&mut s.threads)
        };
        for t in threads {
            let _ = t.join();
        }
    }
}

impl Drop for FakeDc {
    fn drop(&mut self) {
        self.stop();
    }
}

fn accept_loop(listener: TcpListener, shared: Arc<Shared>, kind: Kind) {
    let mut seed_counter: u32 = 0;
    loop {
        let accepted = listener.accept();
        if shared.lock().stopping {
            return;
        }
        let sock = match accepted {
            Ok((s, _)) => s,
            Err(_) => {
                // EMFILE and friends: back off briefly (or until stop) instead of spinning.
                shared.pause(Duration::from_millis(20));
                continue;
            }
        };
        seed_counter = seed_counter.wrapping_add(1);
        let mut seed = [0x5au8; 48];
        seed[..4].copy_from_slice(&seed_counter.to_le_bytes());
        seed[4..6].copy_from_slice(&listener_port(&listener).to_le_bytes());
        let (id, fault) = {
            let mut s = shared.lock();
            s.connections += 1;
            s.accepted_at.push(Instant::now());
            s.live += 1;
            s.next_id += 1;
            let id = s.next_id;
            if let Ok(c) = sock.try_clone() {
                s.socks.insert(id, c);
            }
            s.threads.retain(|t| !t.is_finished());
            (id, s.fault.unwrap_or(Fault::None))
        };
        let sh = shared.clone();
        let kind = kind.clone();
        let t = std::thread::spawn(move || {
            let _guard = SessionGuard {
                shared: sh.clone(),
                id,
            };
            let rng = Rng::from_seed(seed);
            match kind {
                Kind::TlsWs(cfg) => serve_ws(&sh, sock, Some(cfg), fault, rng, id),
                Kind::PlainWs => serve_ws(&sh, sock, None, fault, rng, id),
                Kind::Tcp => serve_tcp(&sh, sock, fault, rng),
                Kind::Worker(cfg) => worker::serve(&sh, sock, cfg, fault),
            }
        });
        shared.lock().threads.push(t);
    }
}

fn listener_port(l: &TcpListener) -> u16 {
    l.local_addr().map_or(0, |a| a.port())
}

/// Decrements `live` and forgets the socket when a session thread ends (even by panic).
struct SessionGuard {
    shared: Arc<Shared>,
    id: usize,
}

impl Drop for SessionGuard {
    fn drop(&mut self) {
        let mut s = self.shared.lock();
        s.live -= 1;
        s.socks.remove(&self.id);
    }
}

fn server_tls_config() -> Arc<ServerConfig> {
    tls_config_for(SERVER_PEM, SERVER_KEY)
}

/// A TLS server config for the chain `pem` and key `key` (PEM).
pub fn tls_config_for(pem: &[u8], key: &[u8]) -> Arc<ServerConfig> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<_, _>>()
        .expect("fake DC: certificate PEM");
    let key = PrivateKeyDer::from_pem_slice(key).expect("fake DC: key PEM");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cfg = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("fake DC: protocol versions")
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .expect("fake DC: server cert");
    Arc::new(cfg)
}

/// What one decoded packet asks of the DC.
enum Reply {
    Packet(Vec<u8>),
    Bulk {
        count: u32,
        size: usize,
    },
    Quit,
    /// A [`SINK`] packet: nothing to send.
    Nothing,
}

/// The obfuscated2 session after a valid relay init: ciphers, packet decoder, reply builder.
struct Session {
    tag: Tag,
    decrypt: Cipher,
    encrypt: Cipher,
    decoder: Decoder,
    rng: Rng,
    bytes_in: usize,
    bytes_out: usize,
}

impl Session {
    fn new(init: &[u8; INIT_LEN], shared: &Shared, rng: Rng) -> Option<Session> {
        match obfs2::accept_raw(init) {
            Ok(a) => {
                shared.lock().inits.push((a.tag, a.dc));
                Some(Session {
                    tag: a.tag,
                    decrypt: a.decrypt,
                    encrypt: a.encrypt,
                    decoder: Decoder::new(a.tag),
                    rng,
                    bytes_in: INIT_LEN,
                    bytes_out: 0,
                })
            }
            Err(e) => {
                shared.violation(format!("relay init refused: {e}"));
                None
            }
        }
    }

    /// Decrypts `data` in place; returns whether it was exactly one whole packet on its own.
    fn decrypt_chunk(&mut self, data: &mut [u8]) -> bool {
        self.decrypt.apply(data);
        self.bytes_in += data.len();
        self.decoder.buffered() == 0
            && matches!(framing::next_packet(self.tag, data), Step::Packet(n) if n == data.len())
    }

    /// Feeds decrypted bytes; returns the replies for every packet completed, or an error text.
    fn replies(&mut self, plain: &[u8]) -> Result<Vec<Reply>, String> {
        self.decoder.push(plain);
        let mut out = Vec::new();
        while let Some(p) = self.decoder.next().map_err(|e| format!("framing: {e}"))? {
            out.push(reply_to(&p, &mut self.rng));
        }
        Ok(out)
    }

    /// One encoded, encrypted packet carrying `payload`.
    fn wire(&mut self, payload: &[u8]) -> Vec<u8> {
        let mut w = framing::encode(self.tag, payload, &mut self.rng);
        self.encrypt.apply(&mut w);
        self.bytes_out += w.len();
        w
    }
}

fn reply_to(p: &[u8], rng: &mut Rng) -> Reply {
    if let Some(nonce) = packet::parse_req_pq_multi(p) {
        let mut server_nonce = [0u8; 16];
        rng.fill(&mut server_nonce);
        let ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        // Server message ids are odd (≡ 1 mod 4); the client msg_id scheme gives ≡ 0.
        let msg_id = packet::msg_id(ms) | 1;
        return Reply::Packet(packet::res_pq(&nonce, &server_nonce, msg_id));
    }
    if p.starts_with(QUIT) {
        return Reply::Quit;
    }
    if p.starts_with(SINK) {
        return Reply::Nothing;
    }
    if p.len() >= 16 && p.starts_with(&BULK_KEY) {
        let count = u32::from_le_bytes([p[8], p[9], p[10], p[11]]);
        let size = u32::from_le_bytes([p[12], p[13], p[14], p[15]]) as usize;
        let size = size
            .div_ceil(4)
            .saturating_mul(4)
            .clamp(12, framing::MAX_PACKET);
        return Reply::Bulk { count, size };
    }
    Reply::Packet(p.to_vec())
}

/// Sends the replies through `send`; returns false when the session must end
/// (QUIT, `CloseAfterSent`, or a send error).
fn answer(
    s: &mut Session,
    replies: Vec<Reply>,
    fault: Fault,
    shared: &Shared,
    send: &mut dyn FnMut(Vec<u8>) -> io::Result<()>,
) -> bool {
    let mut emit = |s: &mut Session, payload: &[u8]| -> bool {
        if matches!(fault, Fault::StallAfterSent(limit) if s.bytes_out >= limit) {
            return true;
        }
        let w = s.wire(payload);
        let n = w.len() as u64;
        if send(w).is_err() {
            return false;
        }
        let mut st = shared.lock();
        st.bytes_out += n;
        st.max_sent = st.max_sent.max(s.bytes_out as u64);
        drop(st);
        !matches!(fault, Fault::CloseAfterSent(limit) if s.bytes_out >= limit)
    };
    for r in replies {
        let go_on = match r {
            Reply::Packet(p) => emit(s, &p),
            Reply::Quit => false,
            Reply::Nothing => true,
            Reply::Bulk { count, size } => (0..count).all(|i| emit(s, &bulk_payload(i, size))),
        };
        if !go_on {
            return false;
        }
    }
    true
}

type TlsStream = StreamOwned<ServerConnection, TcpStream>;

/// The byte stream a WS session runs on: TLS ([`TlsStream`]) or, for a `ws://` front, the
/// TCP socket itself.
trait WsIo: Read + Write {
    /// The TCP socket under it.
    fn tcp(&mut self) -> &mut TcpStream;
    /// Ends the stream (close_notify first over TLS), then shuts the socket down.
    fn close(&mut self);
}

impl WsIo for TlsStream {
    fn tcp(&mut self) -> &mut TcpStream {
        &mut self.sock
    }
    fn close(&mut self) {
        close_tls(self);
    }
}

impl WsIo for TcpStream {
    fn tcp(&mut self) -> &mut TcpStream {
        self
    }
    fn close(&mut self) {
        let _ = self.shutdown(Shutdown::Both);
    }
}

/// Server-side TLS handshake with handshake-bounded timeouts; records the SNI and the suite.
/// `None` (and a violation named `what`) if the handshake fails.
fn accept_tls(
    shared: &Shared,
    sock: TcpStream,
    cfg: Arc<ServerConfig>,
    what: &str,
) -> Option<TlsStream> {
    let _ = sock.set_nodelay(true);
    let _ = sock.set_read_timeout(Some(HANDSHAKE_TIMEOUT));
    let _ = sock.set_write_timeout(Some(HANDSHAKE_TIMEOUT));
    let conn = ServerConnection::new(cfg).ok()?;
    let mut tls = StreamOwned::new(conn, sock);
    while tls.conn.is_handshaking() {
        if let Err(e) = tls.conn.complete_io(&mut tls.sock) {
            let sni = tls.conn.server_name().unwrap_or("").to_string();
            shared.lock().failed_snis.push(sni);
            shared.violation(format!("{what}: {e}"));
            return None;
        }
    }
    let sni = tls.conn.server_name().unwrap_or("").to_string();
    let suite = tls
        .conn
        .negotiated_cipher_suite()
        .map(|s| format!("{:?}", s.suite()))
        .unwrap_or_default();
    let mut st = shared.lock();
    st.snis.push(sni);
    st.suites.push(suite);
    drop(st);
    Some(tls)
}

// tungstenite's callback type fixes the large `ErrorResponse` error variant.
#[allow(clippy::result_large_err)]
fn serve_ws(
    shared: &Shared,
    sock: TcpStream,
    cfg: Option<Arc<ServerConfig>>,
    fault: Fault,
    rng: Rng,
    id: usize,
) {
    if matches!(fault, Fault::Refuse) {
        return;
    }
    match cfg {
        Some(cfg) => {
            if let Some(tls) = accept_tls(shared, sock, cfg, "TLS handshake") {
                serve_ws_on(shared, tls, fault, rng, id);
            }
        }
        None => {
            let _ = sock.set_nodelay(true);
            let _ = sock.set_read_timeout(Some(HANDSHAKE_TIMEOUT));
            let _ = sock.set_write_timeout(Some(HANDSHAKE_TIMEOUT));
            serve_ws_on(shared, sock, fault, rng, id);
        }
    }
}

/// The WS front's HTTP upgrade and session over `tls` (TLS, or plain TCP for `ws://`).
#[allow(clippy::result_large_err)]
fn serve_ws_on<S: WsIo>(shared: &Shared, tls: S, fault: Fault, rng: Rng, id: usize) {
    let delay = shared.lock().delay;
    if !delay.is_zero() && !shared.pause(delay) {
        return;
    }
    let ws_cfg = WebSocketConfig::default()
        .max_frame_size(None)
        .max_message_size(Some(2 * framing::MAX_PACKET));
    let callback = |req: &Request, mut resp: Response| -> Result<Response, ErrorResponse> {
        let header = |name: &str| {
            req.headers()
                .get(name)
                .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        };
        let path = req.uri().path().to_string();
        let protocol = header("sec-websocket-protocol");
        {
            let mut s = shared.lock();
            s.requests += 1;
            s.hosts.push(header("host").unwrap_or_default());
            s.paths.push(path.clone());
            s.protocols.push(protocol.clone());
        }
        if path != "/apiws" && path != "/apiws_test" {
            return Err(error_response(404));
        }
        match fault {
            Fault::HttpStatus(code) => return Err(error_response(code)),
            Fault::HttpRetryAfter { status, secs } => {
                let mut r = error_response(status);
                if let Ok(v) = HeaderValue::from_str(&secs.to_string()) {
                    r.headers_mut().insert("retry-after", v);
                }
                return Err(r);
            }
            _ => {}
        }
        let wants_binary = protocol
            .as_deref()
            .is_some_and(|p| p.split(',').any(|x| x.trim() == "binary"));
        if wants_binary {
            resp.headers_mut()
                .insert("sec-websocket-protocol", HeaderValue::from_static("binary"));
        }
        // Counted before the 101 goes out, so a client that saw it also sees the count.
        shared.lock().upgrades += 1;
        Ok(resp)
    };
    let mut ws = match tungstenite::accept_hdr_with_config(tls, callback, Some(ws_cfg)) {
        Ok(ws) => ws,
        Err(_) => return, // refused by the callback, or a broken request
    };
    match fault {
        Fault::CloseAfterUpgrade => return ws.get_mut().close(),
        Fault::CloseWhenIdle(idle) => {
            let _ = ws.get_mut().tcp().set_read_timeout(Some(idle));
        }
        _ => {
            let _ = ws.get_mut().tcp().set_read_timeout(None);
        }
    }
    ws_session(shared, &mut ws, fault, rng, id);
    let _ = ws.close(None);
    let _ = ws.flush();
    ws.get_mut().close();
}

/// Reads and discards raw bytes until the peer closes (or resets) the connection.
fn drain_until_closed(sock: &mut TcpStream) {
    let _ = sock.set_read_timeout(None);
    let mut buf = [0u8; 4096];
    while let Ok(1..) = sock.read(&mut buf) {}
}

fn ws_session<S: WsIo>(shared: &Shared, ws: &mut WebSocket<S>, fault: Fault, rng: Rng, id: usize) {
    let mut rng = Some(rng);
    let mut session: Option<Session> = None;
    // Bytes of output so far ([`Fault::FreezeAfterBytes`]).
    let mut wire_out = 0usize;
    loop {
        let msg = ws.read();
        if let Ok(m) = &msg {
            let mut st = shared.lock();
            if id <= st.frozen_upto {
                // A dead flow answers nothing, not even the WS close handshake or a ping
                // (tungstenite would reply to those on the next call): stop speaking WS.
                st.bytes_in += m.len() as u64;
                st.frozen_reads += 1;
                if matches!(m, Message::Close(_) | Message::Ping(_)) {
                    drop(st);
                    drain_until_closed(ws.get_mut().tcp());
                    return;
                }
                continue;
            }
        }
        let mut data: Vec<u8> = match msg {
            Ok(Message::Binary(b)) => b.into(),
            Ok(Message::Text(_)) => {
                shared.violation("text WS message".to_string());
                continue;
            }
            Ok(Message::Ping(_)) => {
                // tungstenite queues the pong itself.
                shared.lock().pings += 1;
                if fault == Fault::CloseOnPing {
                    return;
                }
                continue;
            }
            Ok(_) => continue, // pong, close handshake
            Err(tungstenite::Error::ConnectionClosed) | Err(tungstenite::Error::AlreadyClosed) => {
                return
            }
            Err(tungstenite::Error::Io(_)) => return,
            Err(e) => {
                shared.violation(format!("WS: {e}"));
                return;
            }
        };
        shared.lock().bytes_in += data.len() as u64;
        let s = match session.as_mut() {
            Some(s) => s,
            None => {
                if data.len() != INIT_LEN {
                    let n = data.len();
                    shared.violation(format!(
                        "first WS message is {n} bytes, not the 64-byte init"
                    ));
                }
                let Some(init) = data
                    .get(..INIT_LEN)
                    .and_then(|b| <[u8; 64]>::try_from(b).ok())
                else {
                    return;
                };
                // Taken exactly once: this branch runs only while `session` is None.
                let rng = rng.take().unwrap_or_else(|| Rng::from_seed([1; 48]));
                let Some(s) = Session::new(&init, shared, rng) else {
                    return;
                };
                if shared.outage_hit() {
                    return;
                }
                data.drain(..INIT_LEN);
                let s = session.insert(s);
                if data.is_empty() {
                    if matches!(fault, Fault::CloseAfterBytes(n) if s.bytes_in >= n) {
                        return;
                    }
                    continue;
                }
                s
            }
        };
        let one_packet = s.decrypt_chunk(&mut data);
        shared.lock().messages.push(MsgRecord {
            len: data.len(),
            one_packet,
        });
        let served = serve_chunk(shared, s, &data, fault, &mut |w| match fault {
            Fault::FreezeAfterBytes(limit) => {
                let frame = raw_frame(0x82, &w);
                cut_at(ws.get_mut(), &frame, &mut wire_out, limit)
            }
            _ => ws.send(Message::binary(w)).map_err(io::Error::other),
        });
        if matches!(fault, Fault::FreezeAfterBytes(limit) if wire_out >= limit) {
            return frozen(shared, ws.get_mut().tcp());
        }
        if !served {
            return;
        }
        let raw = match fault {
            Fault::CloseCodeAfterReply(code) => raw_frame(0x88, &code.to_be_bytes()),
            Fault::DataAfterClose => {
                let mut raw = raw_frame(0x88, &1000u16.to_be_bytes());
                raw.extend(raw_frame(0x82, &s.wire(b"AFTER-CLOSE!")));
                raw
            }
            _ => continue,
        };
        let tls = ws.get_mut();
        let _ = tls.write_all(&raw).and_then(|_| tls.flush());
        // Stay until the proxy hangs up, so it meets the frames before our FIN.
        let _ = tls.tcp().set_read_timeout(Some(HANDSHAKE_TIMEOUT));
        let mut sink = [0u8; 1024];
        while matches!(tls.read(&mut sink), Ok(n) if n > 0) {}
        return;
    }
}

/// An unmasked server frame (FIN set) with `first` as its first byte (FIN | opcode), for the
/// faults that write frames by hand (RFC 6455 §5.2 lengths: 7-bit, 16-bit or 64-bit).
fn raw_frame(first: u8, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![first];
    if payload.len() < 126 {
        f.push(payload.len() as u8);
    } else if payload.len() <= 0xffff {
        f.push(126);
        f.extend_from_slice(&(payload.len() as u16).to_be_bytes());
    } else {
        f.push(127);
        f.extend_from_slice(&(payload.len() as u64).to_be_bytes());
    }
    f.extend_from_slice(payload);
    f
}

/// Writes `bytes` to `w` unless that takes the output past `limit` bytes ([`Fault::
/// FreezeAfterBytes`]): then only the part up to it, and an error so nothing more is sent.
fn cut_at(w: &mut impl Write, bytes: &[u8], out: &mut usize, limit: usize) -> io::Result<()> {
    let room = limit.saturating_sub(*out);
    let n = bytes.len().min(room);
    *out += n;
    w.write_all(&bytes[..n])?;
    w.flush()?;
    if n < bytes.len() {
        return Err(io::Error::other("frozen"));
    }
    Ok(())
}

/// A connection frozen by [`Fault::FreezeAfterBytes`]: counted, then it only reads until the
/// peer gives up (the kernel keeps ACKing).
fn frozen(shared: &Shared, sock: &mut TcpStream) {
    shared.lock().freezes += 1;
    drain_until_closed(sock);
}

/// Handles decrypted bytes for either transport; false = end the session.
fn serve_chunk(
    shared: &Shared,
    s: &mut Session,
    plain: &[u8],
    fault: Fault,
    send: &mut dyn FnMut(Vec<u8>) -> io::Result<()>,
) -> bool {
    if matches!(fault, Fault::CloseAfterBytes(n) if s.bytes_in >= n) {
        return false;
    }
    let replies = match s.replies(plain) {
        Ok(r) => r,
        Err(e) => {
            shared.violation(e);
            return false;
        }
    };
    if matches!(fault, Fault::SilentAfterUpgrade) {
        return true;
    }
    answer(s, replies, fault, shared, send)
}

fn close_tls(tls: &mut TlsStream) {
    tls.conn.send_close_notify();
    let _ = tls.conn.complete_io(&mut tls.sock);
    let _ = tls.sock.shutdown(Shutdown::Both);
}

fn error_response(code: u16) -> ErrorResponse {
    let mut r = ErrorResponse::new(None);
    *r.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    if matches!(code, 301 | 302 | 303 | 307 | 308) {
        r.headers_mut().insert(
            "location",
            HeaderValue::from_static("https://web.telegram.org/"),
        );
    }
    r
}

fn serve_tcp(shared: &Shared, mut sock: TcpStream, fault: Fault, rng: Rng) {
    if matches!(
        fault,
        Fault::Refuse | Fault::HttpStatus(_) | Fault::HttpRetryAfter { .. }
    ) {
        return;
    }
    let _ = sock.set_nodelay(true);
    let delay = shared.lock().delay;
    if !delay.is_zero() && !shared.pause(delay) {
        return;
    }
    let _ = sock.set_read_timeout(Some(HANDSHAKE_TIMEOUT));
    let mut init = [0u8; INIT_LEN];
    if sock.read_exact(&mut init).is_err() {
        return;
    }
    shared.lock().bytes_in += INIT_LEN as u64;
    let Some(mut s) = Session::new(&init, shared, rng) else {
        return;
    };
    if shared.outage_hit()
        || matches!(fault, Fault::CloseAfterUpgrade)
        || matches!(fault, Fault::CloseAfterBytes(n) if n <= INIT_LEN)
    {
        let _ = sock.shutdown(Shutdown::Both);
        return;
    }
    let _ = sock.set_read_timeout(None);
    let mut writer = match sock.try_clone() {
        Ok(w) => w,
        Err(_) => return,
    };
    let mut buf = vec![0u8; READ_CHUNK];
    let mut wire_out = 0usize;
    // SlowRead: a tenth of the rate every 100 ms.
    let slow = match fault {
        Fault::SlowRead(rate) => {
            let _ = socket2::SockRef::from(&sock).set_recv_buffer_size(4096);
            Some((rate / 10).clamp(1, READ_CHUNK))
        }
        _ => None,
    };
    loop {
        if slow.is_some() && !shared.pause(Duration::from_millis(100)) {
            break;
        }
        let want = slow.unwrap_or(READ_CHUNK);
        let n = match sock.read(&mut buf[..want]) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        shared.lock().bytes_in += n as u64;
        let chunk = &mut buf[..n];
        s.decrypt_chunk(chunk);
        let served = serve_chunk(shared, &mut s, chunk, fault, &mut |w| match fault {
            Fault::FreezeAfterBytes(limit) => cut_at(&mut writer, &w, &mut wire_out, limit),
            _ => writer.write_all(&w),
        });
        if matches!(fault, Fault::FreezeAfterBytes(limit) if wire_out >= limit) {
            return frozen(shared, &mut sock);
        }
        if !served {
            break;
        }
    }
    let _ = sock.shutdown(Shutdown::Both);
}
