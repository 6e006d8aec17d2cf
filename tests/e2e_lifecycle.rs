//! Black-box: session lifecycle and resources through the built binary — a full slab refuses at
//! once and recovers, an upstream close reaches the client promptly after what was sent, a client
//! close frees the DC session promptly, a half-closed client still gets its reply, hundreds of
//! mixed or abandoned sessions leak no descriptors, a burst larger than one accept batch is
//! served, and the idle reaper closes idle sessions but spares active ones (docs/design.md §3,
//! §5, §6).
//!
//! Owns only this file; the rig lives in tests/common (not edited here). Real sockets on
//! 127.0.0.1, no fixed sleeps (the ping loop paces its packets; nothing waits for correctness).

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::fakedc::{bulk_payload, bulk_request, DcConfig, FakeDc, Fault};
use common::{client_opts, wait_until, Proxy, SECRET};
use tg_ws_proxy::applet::probe::{probe_once, MtClient, Outcome};
use tg_ws_proxy::mtproto::obfs2::{self, Secret, Tag};
use tg_ws_proxy::mtproto::packet;
use tg_ws_proxy::rng::Rng;

const MIB: usize = 1 << 20;

/// "Promptly": well under the engine's 2 s post-close linger (`conn::LINGER_MS`), so a close
/// that only happens when the linger timer fires fails these tests.
const PROMPT: Duration = Duration::from_millis(1500);

const LOG_WAIT: Duration = Duration::from_secs(5);

fn os_rng() -> Rng {
    Rng::new().expect("OS randomness")
}

fn ws_proxy(dc: &FakeDc, extra: &[&str]) -> Proxy {
    let ws = format!("2:{}", dc.addr());
    let mut args = vec!["--secret", SECRET, "--dc-ip", &ws, "--tier-order", "ws"];
    args.extend_from_slice(extra);
    Proxy::start(&args)
}

fn tcp_proxy(dc: &FakeDc, extra: &[&str]) -> Proxy {
    common::tcp_tier_proxy(&format!("2:{}", dc.addr()), extra)
}

fn connect(proxy: &Proxy, rng: &mut Rng) -> MtClient {
    let opts = client_opts(proxy.addr(), SECRET, Tag::Intermediate, 2);
    MtClient::connect_with(&opts, rng).expect("connect to proxy")
}

/// Sends a recognisable packet and checks the echo.
fn echo(c: &mut MtClient, proxy: &Proxy, i: u32) {
    let p: Vec<u8> = (0..512u32).map(|j| (j + i) as u8 | 0x80).collect();
    c.send_packet(&p).expect("send");
    match c.recv_packet() {
        Ok(back) => assert_eq!(back, p, "echo {i}"),
        Err(e) => panic!("echo {i}: {e}\nproxy log:\n{}", proxy.logs().join("\n")),
    }
}

fn probe_ok(proxy: &Proxy, rng: &mut Rng) -> bool {
    let opts = client_opts(proxy.addr(), SECRET, Tag::Abridged, 2);
    probe_once(&opts, rng).outcome == Outcome::Ok
}

/// Reads until EOF/reset; returns (bytes received, how it ended).
fn read_to_end(s: &mut TcpStream, wait: Duration) -> (usize, String) {
    s.set_read_timeout(Some(wait)).expect("read timeout");
    let mut buf = [0u8; 4096];
    let mut n = 0;
    loop {
        match s.read(&mut buf) {
            Ok(0) => return (n, "eof".into()),
            Ok(k) => n += k,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted
                ) =>
            {
                return (n, "reset".into())
            }
            Err(e) => return (n, format!("error: {e}")),
        }
    }
}

#[test]
fn full_slab_refuses_at_once_and_recovers() {
    let dc = FakeDc::start_tls_ws(DcConfig::default());
    let proxy = ws_proxy(&dc, &["--max-connections", "2"]);
    let mut rng = os_rng();
    let mut a = connect(&proxy, &mut rng);
    let mut b = connect(&proxy, &mut rng);
    echo(&mut a, &proxy, 1);
    echo(&mut b, &proxy, 2);

    // A third, valid client: closed at once, no bytes, nothing dialled. (Its init may meet an
    // already closed socket, so a write error is fine.)
    let key = Secret::parse(SECRET).expect("secret").key;
    let init = obfs2::initiate(Tag::Intermediate, 2, Some(&key), &mut rng).init;
    let mut third = TcpStream::connect(proxy.addr()).expect("TCP connect is the kernel's");
    let t = Instant::now();
    let _ = third.write_all(&init);
    let (got, how) = read_to_end(&mut third, Duration::from_secs(10));
    assert!(how == "eof" || how == "reset", "{how}\n{:#?}", proxy.logs());
    assert_eq!(got, 0);
    assert!(t.elapsed() < PROMPT, "refused after {:?}", t.elapsed());
    assert!(
        proxy
            .wait_event("refused", LOG_WAIT, |e| e["reason"] == "slab-full")
            .is_some(),
        "{:#?}",
        proxy.logs()
    );
    assert_eq!(dc.connections(), 2);

    // Free one slot: a new client gets through (the slot frees once the session closes).
    drop(a);
    assert!(
        wait_until(Duration::from_secs(5), || probe_ok(&proxy, &mut rng)),
        "no recovery after a slot was freed:\n{}",
        proxy.logs().join("\n")
    );
    echo(&mut b, &proxy, 3);
}

/// Asks for 1 MiB packets from a DC that closes after `keep` of them, checks every byte that
/// arrives and that EOF follows the last one promptly.
fn upstream_close_after_sent(proxy: &Proxy, dc: &FakeDc, keep: usize) {
    let mut rng = os_rng();
    let mut c = connect(proxy, &mut rng);
    c.send_packet(&bulk_request(8, MIB as u32))
        .expect("send BULK");
    for i in 0..keep as u32 {
        match c.recv_packet() {
            Ok(p) => assert!(p == bulk_payload(i, MIB), "packet {i} corrupted"),
            Err(e) => panic!("packet {i}: {e}\nproxy log:\n{}", proxy.logs().join("\n")),
        }
    }
    let t = Instant::now();
    let e = c.recv_packet().expect_err("nothing after the DC closed");
    assert!(
        matches!(
            e.kind(),
            ErrorKind::UnexpectedEof | ErrorKind::ConnectionReset
        ),
        "{e:?}"
    );
    assert!(
        t.elapsed() < PROMPT,
        "EOF {:?} after the last packet",
        t.elapsed()
    );
    eprintln!("EOF {:?} after the last packet", t.elapsed());
    assert!(
        wait_until(LOG_WAIT, || dc.live_sessions() == 0),
        "DC session still open"
    );
    assert!(
        proxy
            .wait_event("session", LOG_WAIT, |e| e["closed_by"] == "upstream")
            .is_some(),
        "{:#?}",
        proxy.logs()
    );
}

#[test]
fn upstream_close_reaches_the_client_after_what_was_sent_ws() {
    // 3 packets of 4 + 1 MiB cross 3 MiB on the third; the DC sends it whole, then closes.
    let dc = FakeDc::start_tls_ws(DcConfig::with_fault(Fault::CloseAfterSent(3 * MIB)));
    let proxy = ws_proxy(&dc, &[]);
    upstream_close_after_sent(&proxy, &dc, 3);
}

#[test]
fn upstream_close_reaches_the_client_after_what_was_sent_tcp() {
    let dc = FakeDc::start_tcp(DcConfig::with_fault(Fault::CloseAfterSent(2 * MIB)));
    let proxy = tcp_proxy(&dc, &[]);
    upstream_close_after_sent(&proxy, &dc, 2);
}

#[test]
fn upstream_close_after_bytes_closes_the_client() {
    // 64 init + one 516-byte echo request crosses 500: no reply, the DC closes.
    let dc = FakeDc::start_tls_ws(DcConfig::with_fault(Fault::CloseAfterBytes(500)));
    let proxy = ws_proxy(&dc, &[]);
    let mut c = connect(&proxy, &mut os_rng());
    c.send_packet(&[0x81; 512]).expect("send");
    let t = Instant::now();
    let e = c.recv_packet().expect_err("no reply from a closing DC");
    assert!(
        matches!(
            e.kind(),
            ErrorKind::UnexpectedEof | ErrorKind::ConnectionReset
        ),
        "{e:?}\n{:#?}",
        proxy.logs()
    );
    assert!(t.elapsed() < PROMPT, "EOF after {:?}", t.elapsed());
}

fn client_close_frees_the_dc_session(dc: &FakeDc, proxy: &Proxy) {
    let mut rng = os_rng();
    let mut c = connect(proxy, &mut rng);
    echo(&mut c, proxy, 1);
    assert_eq!(dc.live_sessions(), 1);
    let t = Instant::now();
    drop(c);
    assert!(
        wait_until(PROMPT, || dc.live_sessions() == 0),
        "DC session still open {:?} after the client closed\nproxy log:\n{}",
        t.elapsed(),
        proxy.logs().join("\n")
    );
    eprintln!("DC session freed {:?} after the client closed", t.elapsed());
    assert!(
        proxy.wait_event("session", LOG_WAIT, |_| true).is_some(),
        "no session record: {:#?}",
        proxy.logs()
    );
}

#[test]
fn client_close_frees_the_dc_session_ws() {
    let dc = FakeDc::start_tls_ws(DcConfig::default());
    let proxy = ws_proxy(&dc, &[]);
    client_close_frees_the_dc_session(&dc, &proxy);
}

#[test]
fn client_close_frees_the_dc_session_tcp() {
    let dc = FakeDc::start_tcp(DcConfig::default());
    let proxy = tcp_proxy(&dc, &[]);
    client_close_frees_the_dc_session(&dc, &proxy);
}

/// One client of the fd-leak run; `kind` picks the behaviour. Returns false on an unexpected
/// outcome (only the good probe has one).
fn churn_one(addr: SocketAddr, kind: usize, rng: &mut Rng) -> bool {
    let opts = client_opts(addr, SECRET, Tag::Intermediate, 2);
    match kind {
        // Good probe: resPQ, then close.
        0 | 1 => probe_once(&opts, rng).outcome == Outcome::Ok,
        // Wrong secret: rejected, drained, closed.
        2 => {
            let bad = client_opts(
                addr,
                "fedcba9876543210fedcba9876543210",
                Tag::Intermediate,
                2,
            );
            if let Ok(c) = MtClient::connect_with(&bad, rng) {
                let _ = read_to_end(&mut c.into_stream(), Duration::from_secs(10));
            }
            true
        }
        // HTTP request.
        3 => {
            if let Ok(mut s) = TcpStream::connect(addr) {
                let _ = s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
                let _ = read_to_end(&mut s, Duration::from_secs(10));
            }
            true
        }
        // Valid init, then gone while the proxy is still connecting upstream.
        4 => {
            let _ = MtClient::connect_with(&opts, rng);
            true
        }
        // Connected and gone without a byte (handshake EOF).
        5 => {
            let _ = TcpStream::connect(addr);
            true
        }
        // Relaying, then gone in the middle of a packet.
        _ => {
            if let Ok(mut c) = MtClient::connect_with(&opts, rng) {
                let mut nonce = [0u8; 16];
                rng.fill(&mut nonce);
                let _ = c.send_packet(&packet::req_pq_multi(
                    &nonce,
                    packet::msg_id(1_700_000_000_000),
                ));
                let _ = c.recv_packet();
                let _ = c.send_raw_plain(&[0x00, 0x10, 0x00, 0x00, 1, 2, 3]);
            }
            true
        }
    }
}

#[test]
fn hundreds_of_mixed_sessions_leak_no_descriptors() {
    let dc = FakeDc::start_tls_ws(DcConfig::default());
    let proxy = ws_proxy(
        &dc,
        &["--bad-client-drain", "0.1", "--handshake-timeout", "2"],
    );
    let mut rng = os_rng();
    assert!(probe_ok(&proxy, &mut rng), "{:#?}", proxy.logs());
    assert!(wait_until(LOG_WAIT, || dc.live_sessions() == 0));
    let baseline = proxy.fd_count().expect("/proc/PID/fd readable");

    const THREADS: usize = 4;
    const PER_THREAD: usize = 70;
    let addr = proxy.addr();
    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            std::thread::spawn(move || {
                let mut rng = os_rng();
                (0..PER_THREAD)
                    .filter(|i| !churn_one(addr, (i + t) % 7, &mut rng))
                    .count()
            })
        })
        .collect();
    let failed: usize = workers
        .into_iter()
        .map(|w| w.join().expect("worker panicked"))
        .sum();
    assert_eq!(failed, 0, "good probes failed\n{}", proxy.logs().join("\n"));
    let mut now = 0;
    let settled = wait_until(Duration::from_secs(15), || {
        now = proxy.fd_count().unwrap_or(usize::MAX);
        now <= baseline + 3 && dc.live_sessions() == 0
    });
    eprintln!(
        "fd churn: {} sessions, baseline {baseline} fds, settled at {now}",
        THREADS * PER_THREAD
    );
    assert!(
        settled,
        "fds: baseline {baseline}, now {now}; DC live {}\nproxy log:\n{}",
        dc.live_sessions(),
        proxy.logs().join("\n")
    );
    assert!(
        probe_ok(&proxy, &mut rng),
        "proxy still serves after the churn"
    );
}

#[test]
fn idle_session_is_reaped_and_an_active_one_survives() {
    let dc = FakeDc::start_tls_ws(DcConfig::default());
    let proxy = ws_proxy(&dc, &["--idle-timeout", "1"]);
    let mut rng = os_rng();
    let mut idle = connect(&proxy, &mut rng);
    let mut busy = connect(&proxy, &mut rng);
    echo(&mut busy, &proxy, 0);
    let idle_since = Instant::now();
    echo(&mut idle, &proxy, 0);

    // The busy session sends a packet every 200 ms until well past the idle timeout.
    let pinger = std::thread::spawn(move || -> Result<MtClient, String> {
        let start = Instant::now();
        let mut i = 1u32;
        while start.elapsed() < Duration::from_millis(1800) {
            let p = vec![0x80 | (i as u8); 64];
            busy.send_packet(&p)
                .map_err(|e| format!("ping {i}: send: {e}"))?;
            let back = busy
                .recv_packet()
                .map_err(|e| format!("ping {i}: {e} at {:?}", start.elapsed()))?;
            if back != p {
                return Err(format!("ping {i}: wrong echo"));
            }
            i += 1;
            // Pacing of the pings, not a wait for a condition.
            std::thread::sleep(Duration::from_millis(200));
        }
        Ok(busy)
    });

    let e = idle
        .recv_packet_until(Instant::now() + Duration::from_secs(10))
        .expect_err("idle session gets nothing");
    let after = idle_since.elapsed();
    eprintln!("idle session closed {after:?} after its last packet");
    assert!(
        matches!(
            e.kind(),
            ErrorKind::UnexpectedEof | ErrorKind::ConnectionReset
        ),
        "{e:?} after {after:?}\n{:#?}",
        proxy.logs()
    );
    assert!(
        after >= Duration::from_millis(900),
        "reaped too early: {after:?}"
    );
    assert!(
        after <= Duration::from_millis(2500),
        "reaped too late: {after:?}"
    );

    let mut busy = match pinger.join().expect("pinger panicked") {
        Ok(b) => b,
        Err(e) => panic!(
            "active session died: {e}\nproxy log:\n{}",
            proxy.logs().join("\n")
        ),
    };
    echo(&mut busy, &proxy, 99);
    drop(busy); // a client close, so it cannot become a second idle reap
    assert!(
        proxy
            .wait_session_reason("idle-timeout", LOG_WAIT)
            .is_some(),
        "{:#?}",
        proxy.logs()
    );
    let idle = proxy.sessions().into_iter();
    let idle = idle.filter(|e| e["reason"] == "idle-timeout").count();
    assert_eq!(idle, 1, "{:#?}", proxy.logs());
}

#[test]
fn abandoned_connects_to_a_black_hole_leak_no_descriptors() {
    // Clients that leave while the ws attempt hangs, and clients whose attempt times out: every
    // upstream socket in SYN_SENT must be closed with its session.
    let hole = common::blackhole::BlackHole::new();
    let ws = format!("2:{}", hole.addr());
    let proxy = Proxy::start(&[
        "--secret",
        SECRET,
        "--dc-ip",
        &ws,
        "--tier-order",
        "ws",
        "--ws-connect-timeout",
        "0.3",
    ]);
    let baseline = proxy.fd_count().expect("/proc/PID/fd readable");
    let mut rng = os_rng();
    let mut waiting = Vec::new();
    for i in 0..40 {
        let c = connect(&proxy, &mut rng);
        if i % 4 == 0 {
            waiting.push(c); // stays until the proxy gives up on the route
        }
    }
    for c in waiting {
        let mut s = c.into_stream();
        let (got, how) = read_to_end(&mut s, Duration::from_secs(10));
        assert_eq!(got, 0);
        assert!(how == "eof" || how == "reset", "{how}\n{:#?}", proxy.logs());
    }
    let mut now = 0;
    let settled = wait_until(Duration::from_secs(10), || {
        now = proxy.fd_count().unwrap_or(usize::MAX);
        now <= baseline + 3
    });
    assert!(
        settled,
        "fds: baseline {baseline}, now {now}\nproxy log:\n{}",
        proxy.logs().join("\n")
    );
    assert!(
        proxy
            .wait_session_reason("upstream-unreachable", LOG_WAIT)
            .is_some(),
        "{:#?}",
        proxy.logs()
    );
}

/// The client sends `req_pq_multi` and half-closes at once: the reply still arrives, then EOF
/// (docs/design.md §5: an upstream close closes the client promptly, after flushing what was
/// received, and the other way round). `relay_first`: one echo before, so the half-close meets
/// the relay phase; otherwise it meets the connect phase (init, request and FIN arrive together).
fn half_closed_client_still_gets_its_reply(proxy: &Proxy, dc: &FakeDc, relay_first: bool) {
    let mut rng = os_rng();
    let mut c = connect(proxy, &mut rng);
    if relay_first {
        echo(&mut c, proxy, 1);
    }
    let nonce = [0x17; 16];
    c.send_packet(&packet::req_pq_multi(
        &nonce,
        packet::msg_id(1_700_000_000_000),
    ))
    .expect("send");
    c.shutdown_write().expect("half-close");
    let reply = c.recv_packet().unwrap_or_else(|e| {
        // Let the close line arrive for the report.
        proxy.wait_event("session", LOG_WAIT, |_| true);
        panic!(
            "no reply after half-close: {e}; DC saw {} init(s)\nproxy log:\n{}",
            dc.inits(),
            proxy.logs().join("\n")
        )
    });
    packet::parse_res_pq(&reply, &nonce).expect("resPQ for our nonce");
    let e = c.recv_packet().expect_err("EOF after the reply");
    assert!(
        matches!(
            e.kind(),
            ErrorKind::UnexpectedEof | ErrorKind::ConnectionReset
        ),
        "{e:?}"
    );
    assert!(
        wait_until(LOG_WAIT, || dc.live_sessions() == 0),
        "DC session still open"
    );
}

#[test]
fn half_closed_client_in_relay_still_gets_its_reply_ws() {
    let dc = FakeDc::start_tls_ws(DcConfig::default());
    let proxy = ws_proxy(&dc, &[]);
    half_closed_client_still_gets_its_reply(&proxy, &dc, true);
}

#[test]
fn half_closed_client_in_relay_still_gets_its_reply_tcp() {
    let dc = FakeDc::start_tcp(DcConfig::default());
    let proxy = tcp_proxy(&dc, &[]);
    half_closed_client_still_gets_its_reply(&proxy, &dc, true);
}

/// Regression: a client EOF during the connect phase closed the session at once and dropped the
/// bytes already buffered (`conn/connect.rs` `read_client_while_connecting`, at 7ac7a4c), while
/// the relay phase flushes them and lingers for the reply.
#[test]
fn client_eof_while_connecting_still_delivers_its_request_ws() {
    let dc = FakeDc::start_tls_ws(DcConfig::default());
    let proxy = ws_proxy(&dc, &[]);
    half_closed_client_still_gets_its_reply(&proxy, &dc, false);
}

/// Same regression as [`client_eof_while_connecting_still_delivers_its_request_ws`], tcp tier.
#[test]
fn client_eof_while_connecting_still_delivers_its_request_tcp() {
    let dc = FakeDc::start_tcp(DcConfig::default());
    let proxy = tcp_proxy(&dc, &[]);
    half_closed_client_still_gets_its_reply(&proxy, &dc, false);
}

#[test]
fn burst_of_clients_larger_than_one_accept_batch_is_served() {
    // More clients than one accept batch (64) wait in the listen queue at once; every one is
    // accepted and answered.
    const CLIENTS: usize = 150;
    let dc = FakeDc::start_tcp(DcConfig::default());
    let proxy = tcp_proxy(&dc, &[]);
    let socks: Vec<TcpStream> = (0..CLIENTS)
        .map(|_| TcpStream::connect(proxy.addr()).expect("connect"))
        .collect();
    let mut rng = os_rng();
    let mut clients = Vec::new();
    let mut nonces = Vec::new();
    for s in socks {
        let mut opts = client_opts(proxy.addr(), SECRET, Tag::Intermediate, 2);
        opts.timeout = Duration::from_secs(15);
        let mut c = MtClient::handshake(s, &opts, &mut rng).expect("send init");
        let mut nonce = [0u8; 16];
        rng.fill(&mut nonce);
        c.send_packet(&packet::req_pq_multi(
            &nonce,
            packet::msg_id(1_700_000_000_000),
        ))
        .expect("send req_pq_multi");
        clients.push(c);
        nonces.push(nonce);
    }
    for (i, (c, nonce)) in clients.iter_mut().zip(&nonces).enumerate() {
        let reply = c
            .recv_packet()
            .unwrap_or_else(|e| panic!("client {i}: {e}\nproxy log:\n{}", proxy.logs().join("\n")));
        packet::parse_res_pq(&reply, nonce).expect("resPQ for our nonce");
    }
    assert_eq!(dc.inits(), CLIENTS);
}
