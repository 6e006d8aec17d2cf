//! Black-box: bad clients (wrong secret, garbage, HTTP, TLS ClientHello, slow-drip handshake) get
//! no bytes, are closed within the bounded drain / handshake deadline, are logged with a distinct
//! reason, never dial upstream, and do not disturb a session already relaying or a new client
//! (docs/design.md §6).
//!
//! Owns only this file; the rig lives in tests/common (not edited here). Real sockets on
//! 127.0.0.1, no fixed sleeps (the drip writer paces its bytes; nothing waits for correctness).

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::ServerName;
use rustls::ClientConnection;

use common::fakedc::{DcConfig, FakeDc};
use common::{client_opts, test_client_tls, Proxy, SECRET};
use tg_ws_proxy::applet::probe::{probe_once, MtClient, Outcome};
use tg_ws_proxy::mtproto::obfs2::{self, Secret, Tag};
use tg_ws_proxy::mtproto::packet;
use tg_ws_proxy::rng::Rng;

/// `--bad-client-drain` used here (seconds, as passed on the command line).
const DRAIN: &str = "0.5";
const DRAIN_DUR: Duration = Duration::from_millis(500);
/// `--handshake-timeout` for the slow-drip case.
const HANDSHAKE: &str = "0.5";
const HANDSHAKE_DUR: Duration = Duration::from_millis(500);
/// Slack on top of a configured deadline for the close to reach the client.
const MARGIN: Duration = Duration::from_millis(2000);
/// Longest the test client waits for anything (a hang past this is a failure).
const CLIENT_WAIT: Duration = Duration::from_secs(10);
const LOG_WAIT: Duration = Duration::from_secs(5);

/// A secret the proxy does not know.
const WRONG: &str = "fedcba9876543210fedcba9876543210";

fn os_rng() -> Rng {
    Rng::new().expect("OS randomness")
}

/// A proxy in front of a WS fake DC, plus one good session already relaying through it.
struct Bed {
    dc: FakeDc,
    proxy: Proxy,
    held: MtClient,
    rng: Rng,
    round: u32,
}

impl Bed {
    fn new(extra: &[&str]) -> Bed {
        let dc = FakeDc::start_tls_ws(DcConfig::default());
        let ws = format!("2:{}", dc.addr());
        let mut args = vec![
            "--secret",
            SECRET,
            "--dc-ip",
            &ws,
            "--tier-order",
            "ws",
            "--bad-client-drain",
            DRAIN,
        ];
        args.extend_from_slice(extra);
        let proxy = Proxy::start(&args);
        let mut rng = os_rng();
        let opts = client_opts(proxy.addr(), SECRET, Tag::Intermediate, 2);
        let held = MtClient::connect_with(&opts, &mut rng).expect("connect held session");
        let mut bed = Bed {
            dc,
            proxy,
            held,
            rng,
            round: 0,
        };
        bed.echo_held();
        bed
    }

    /// One echo on the held session.
    fn echo_held(&mut self) {
        self.round += 1;
        let p: Vec<u8> = (0..256u32).map(|j| (j + self.round) as u8 | 0x80).collect();
        self.held.send_packet(&p).expect("held session: send");
        match self.held.recv_packet() {
            Ok(back) => assert_eq!(back, p, "held session echo {}", self.round),
            Err(e) => panic!(
                "held session echo {}: {e}\nproxy log:\n{}",
                self.round,
                self.logs()
            ),
        }
    }

    fn logs(&self) -> String {
        self.proxy.logs().join("\n")
    }

    /// The held session still relays and a new client gets its `resPQ`.
    fn assert_unaffected(&mut self) {
        self.echo_held();
        let opts = client_opts(self.proxy.addr(), SECRET, Tag::Abridged, -2);
        let a = probe_once(&opts, &mut self.rng);
        assert_eq!(a.outcome, Outcome::Ok, "{a:?}\nproxy log:\n{}", self.logs());
    }
}

/// How a bad client's connection ended.
#[derive(Debug)]
struct Ending {
    /// Bytes the proxy sent us (must be none).
    received: usize,
    /// From the first byte written to EOF/reset.
    after: Duration,
    /// "eof", "reset", or an unexpected error text.
    how: String,
}

/// Reads until EOF or error, counting bytes; `start` is when the client began talking.
fn read_to_end(mut s: TcpStream, start: Instant) -> Ending {
    s.set_read_timeout(Some(CLIENT_WAIT)).expect("read timeout");
    let mut buf = [0u8; 4096];
    let mut received = 0;
    let how = loop {
        match s.read(&mut buf) {
            Ok(0) => break "eof".to_string(),
            Ok(n) => received += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted
                ) =>
            {
                break "reset".to_string()
            }
            Err(e) => break format!("error: {e}"),
        }
    };
    Ending {
        received,
        after: start.elapsed(),
        how,
    }
}

/// Connects, writes `bytes` (a write error after an early close is fine), reads to the end.
fn send_bad(bed: &Bed, bytes: &[u8]) -> Ending {
    let mut s = TcpStream::connect(bed.proxy.addr()).expect("connect to proxy");
    let start = Instant::now();
    let _ = s.write_all(bytes);
    read_to_end(s, start)
}

/// Common checks after a rejected client: no bytes, closed within drain + margin, exactly one
/// session record with `reason`, no upstream dialled, everything else still works.
fn assert_rejected(bed: &mut Bed, end: Ending, reason: &str, dials_before: usize) {
    assert!(
        end.how == "eof" || end.how == "reset",
        "{end:?}\nproxy log:\n{}",
        bed.logs()
    );
    assert_eq!(end.received, 0, "{end:?}");
    assert!(end.after <= DRAIN_DUR + MARGIN, "closed too late: {end:?}");
    assert!(
        bed.proxy.wait_session_reason(reason, LOG_WAIT).is_some(),
        "no `{reason}` session:\n{}",
        bed.logs()
    );
    let sessions = bed.proxy.sessions().into_iter();
    let n = sessions.filter(|e| e["reason"] == reason).count();
    assert_eq!(n, 1, "{}", bed.logs());
    assert_eq!(
        bed.dc.connections(),
        dials_before,
        "a bad client dialled upstream"
    );
    bed.assert_unaffected();
}

#[test]
fn wrong_secret_gets_nothing_and_is_closed_after_the_drain() {
    let mut bed = Bed::new(&[]);
    let dials = bed.dc.connections();
    let opts = client_opts(bed.proxy.addr(), WRONG, Tag::Intermediate, 2);
    let start = Instant::now();
    let mut c = MtClient::connect_with(&opts, &mut bed.rng).expect("connect");
    let _ = c.send_packet(&packet::req_pq_multi(
        &[7; 16],
        packet::msg_id(1_700_000_000_000),
    ));
    let end = read_to_end(c.into_stream(), start);
    assert_rejected(&mut bed, end, "bad-init", dials);
}

#[test]
fn garbage_init_is_a_bad_init() {
    let mut bed = Bed::new(&[]);
    let dials = bed.dc.connections();
    let mut garbage = [0u8; 64];
    Rng::from_seed([0x33; 48]).fill(&mut garbage);
    // Not something the proxy classifies more specifically (HTTP verb, TLS record).
    assert!(garbage[0] != 0x16 && !garbage[..4].iter().all(u8::is_ascii_uppercase));
    let end = send_bad(&bed, &garbage);
    assert_rejected(&mut bed, end, "bad-init", dials);
}

#[test]
fn http_request_is_closed_quickly() {
    let mut bed = Bed::new(&[]);
    let dials = bed.dc.connections();
    let end = send_bad(&bed, b"GET / HTTP/1.1\r\n\r\n");
    assert_rejected(&mut bed, end, "http-request", dials);
}

#[test]
fn tls_client_hello_to_the_plain_port() {
    let mut bed = Bed::new(&[]);
    let dials = bed.dc.connections();
    // A real ClientHello, as a browser or an `ee` client pointed at the wrong port sends.
    let name = ServerName::try_from("kws2.web.telegram.org").expect("server name");
    let mut conn = ClientConnection::new(test_client_tls(), name).expect("TLS client");
    let mut hello = Vec::new();
    conn.write_tls(&mut hello).expect("ClientHello");
    assert!(
        hello.len() >= 64 && hello[0] == 0x16,
        "{} bytes",
        hello.len()
    );
    let end = send_bad(&bed, &hello);
    assert_rejected(&mut bed, end, "tls-to-plain-port", dials);
}

#[test]
fn slow_drip_handshake_is_closed_at_the_deadline() {
    let mut bed = Bed::new(&["--handshake-timeout", HANDSHAKE]);
    let dials = bed.dc.connections();
    // A VALID init with our secret, so only the deadline can end it: 64 bytes at 1 per 100 ms
    // would take 6.4 s.
    let key = Secret::parse(SECRET).expect("secret").key;
    let init = obfs2::initiate(Tag::Intermediate, 2, Some(&key), &mut bed.rng).init;
    let s = TcpStream::connect(bed.proxy.addr()).expect("connect to proxy");
    s.set_nodelay(true).expect("nodelay");
    let mut w = s.try_clone().expect("clone");
    let stop = Arc::new(AtomicBool::new(false));
    let stop_w = stop.clone();
    let start = Instant::now();
    let drip = std::thread::spawn(move || {
        let mut sent = 0;
        for b in init {
            if stop_w.load(Ordering::Relaxed) || w.write_all(&[b]).is_err() {
                break;
            }
            sent += 1;
            // Pacing of the drip itself, not a wait for a condition.
            std::thread::sleep(Duration::from_millis(100));
        }
        sent
    });
    let end = read_to_end(s, start);
    stop.store(true, Ordering::Relaxed);
    let sent = drip.join().expect("drip thread");
    assert!(
        end.how == "eof" || end.how == "reset",
        "{end:?}\n{}",
        bed.logs()
    );
    assert_eq!(end.received, 0, "{end:?}");
    assert!(sent < 64, "the whole init went out ({sent} bytes)");
    // Closed by the deadline: not before it, and not long after.
    assert!(
        end.after >= HANDSHAKE_DUR - Duration::from_millis(50),
        "{end:?}"
    );
    assert!(end.after <= HANDSHAKE_DUR + MARGIN, "{end:?}");
    assert_eq!(
        bed.dc.connections(),
        dials,
        "an incomplete init dialled upstream"
    );
    bed.assert_unaffected();
}

#[test]
fn oversized_packet_header_closes_the_session() {
    // Past the init, a declared length above the protocol maximum (16 MiB) ends the session
    // (docs/design.md §5); nothing of it reaches the DC and other sessions carry on.
    let mut bed = Bed::new(&[]);
    let opts = client_opts(bed.proxy.addr(), SECRET, Tag::Intermediate, 2);
    let mut c = MtClient::connect_with(&opts, &mut bed.rng).expect("connect");
    let nonce = [0x5a; 16];
    c.send_packet(&packet::req_pq_multi(
        &nonce,
        packet::msg_id(1_700_000_000_000),
    ))
    .expect("send");
    let reply = c.recv_packet().expect("resPQ first");
    packet::parse_res_pq(&reply, &nonce).expect("resPQ for our nonce");
    let messages = bed.dc.messages().len();
    let start = Instant::now();
    // Intermediate header: 32 MiB, little-endian.
    c.send_raw_plain(&(32u32 << 20).to_le_bytes())
        .expect("send header");
    c.send_raw_plain(&[0x42; 1024]).expect("send some body");
    let end = read_to_end(c.into_stream(), start);
    assert!(
        end.how == "eof" || end.how == "reset",
        "{end:?}\n{}",
        bed.logs()
    );
    assert_eq!(end.received, 0, "{end:?}");
    assert!(end.after <= MARGIN, "{end:?}");
    assert!(
        bed.proxy
            .wait_session_reason("protocol-error", LOG_WAIT)
            .is_some(),
        "{}",
        bed.logs()
    );
    assert_eq!(
        bed.dc.messages().len(),
        messages,
        "bytes of the bad packet reached the DC"
    );
    // Only the held session is left at the DC.
    assert!(
        common::wait_until(LOG_WAIT, || bed.dc.live_sessions() == 1),
        "DC live sessions: {}",
        bed.dc.live_sessions()
    );
    bed.assert_unaffected();
}

#[test]
fn dc_index_zero_is_refused_without_dialling() {
    let mut bed = Bed::new(&[]);
    let dials = bed.dc.connections();
    let opts = client_opts(bed.proxy.addr(), SECRET, Tag::Intermediate, 0);
    let start = Instant::now();
    let c = MtClient::connect_with(&opts, &mut bed.rng).expect("connect");
    let end = read_to_end(c.into_stream(), start);
    assert!(
        end.how == "eof" || end.how == "reset",
        "{end:?}\n{}",
        bed.logs()
    );
    assert_eq!(end.received, 0, "{end:?}");
    assert!(end.after <= MARGIN, "{end:?}");
    let closed = bed.proxy.wait_session_reason("no-route", LOG_WAIT);
    assert!(closed.is_some(), "{}", bed.logs());
    assert_eq!(bed.dc.connections(), dials);
    bed.assert_unaffected();
}

#[test]
fn flooding_bad_client_is_still_closed_at_the_drain_deadline() {
    // The drain is bounded by time, not by the client going quiet: a client that never stops
    // sending is cut off at the deadline.
    let mut bed = Bed::new(&[]);
    let dials = bed.dc.connections();
    let s = TcpStream::connect(bed.proxy.addr()).expect("connect to proxy");
    let mut w = s.try_clone().expect("clone");
    let start = Instant::now();
    let flood = std::thread::spawn(move || {
        let chunk = [0x41u8; 16 * 1024];
        let mut sent = 0usize;
        // Until the proxy closes (write error) or a hard cap well past the deadline.
        while sent < 512 * 1024 * 1024 && w.write_all(&chunk).is_ok() {
            sent += chunk.len();
        }
        sent
    });
    let end = read_to_end(s, start);
    let sent = flood.join().expect("flood thread");
    assert!(
        end.how == "eof" || end.how == "reset",
        "{end:?}\n{}",
        bed.logs()
    );
    assert_eq!(end.received, 0, "{end:?}");
    assert!(
        end.after <= DRAIN_DUR + MARGIN,
        "drain not bounded: {end:?}, {sent} B sent"
    );
    let closed = bed.proxy.wait_session_reason("bad-init", LOG_WAIT);
    assert!(closed.is_some(), "{}", bed.logs());
    assert_eq!(bed.dc.connections(), dials);
    bed.assert_unaffected();
}
