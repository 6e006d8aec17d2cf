//! Black-box: falling back from the ws tier to the tcp tier when the WS front refuses, black-holes,
//! answers an HTTP error, or presents an untrusted certificate — the client still gets its
//! `resPQ` and the proxy log names the failure class. Also: every tier failing closes the client
//! without bytes, and a running ws session is unaffected when the front starts refusing new
//! connections (docs/design.md §4 rule 4).
//!
//! Owns only this file; the rig lives in tests/common (not edited here). Real sockets on
//! 127.0.0.1, no fixed sleeps.

mod common;

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::blackhole::BlackHole;
use common::fakedc::{DcConfig, FakeDc, Fault};
use common::{client_opts, closed_port, data_path, wait_until, Proxy, SECRET};
use tg_ws_proxy::applet::probe::{probe_once, Attempt, MtClient, Outcome};
use tg_ws_proxy::mtproto::framing::{self, Decoder};
use tg_ws_proxy::mtproto::obfs2::Tag;
use tg_ws_proxy::rng::Rng;

/// How long to wait for an expected log line.
const LOG_WAIT: Duration = Duration::from_secs(5);

fn os_rng() -> Rng {
    Rng::new().expect("OS randomness")
}

/// A proxy with the ws tier at `ws` and the tcp tier at `tcp`, tried in that order.
fn ladder(ws: SocketAddr, tcp: SocketAddr, extra: &[&str]) -> Proxy {
    let ws = format!("2:{ws}");
    let tcp = format!("2:{tcp}");
    let mut args = vec![
        "--secret",
        SECRET,
        "--dc-ip",
        &ws,
        "--tcp-dc-ip",
        &tcp,
        "--tier-order",
        "ws,tcp",
    ];
    args.extend_from_slice(extra);
    Proxy::start(&args)
}

fn probe(proxy: &Proxy, tag: Tag, dc: i16) -> Attempt {
    probe_once(&client_opts(proxy.addr(), SECRET, tag, dc), &mut os_rng())
}

/// Waits until a ws route went down (or suspect) for `failure`.
fn wait_ws_failed(proxy: &Proxy, failure: &str) -> bool {
    proxy
        .wait_event("route", LOG_WAIT, |e| {
            e["label"].as_str().is_some_and(|l| l.starts_with("ws:"))
                && e["to"] != "up"
                && e["failure"] == failure
        })
        .is_some()
}

/// Probes through a ladder whose ws tier fails, and checks the tcp tier carried the session and
/// the log names `reason` on a ws line.
fn assert_falls_back(proxy: &Proxy, tcp: &FakeDc, reason: &str) -> Attempt {
    let a = probe(proxy, Tag::Intermediate, 2);
    assert_eq!(
        a.outcome,
        Outcome::Ok,
        "{a:?}\nproxy log:\n{}",
        proxy.logs().join("\n")
    );
    assert_eq!(
        tcp.init_dcs(),
        vec![(Tag::Intermediate, 2)],
        "tcp tier carried it"
    );
    assert!(
        // The ws route went down (or suspect) for that failure, whether the client's own
        // attempt failed or — when a hedge served it — the attempt finished in the background.
        wait_ws_failed(proxy, reason),
        "the ws route never failed as `{reason}`:\n{}",
        proxy.logs().join("\n")
    );
    a
}

#[test]
fn ws_refused_falls_back_to_tcp() {
    let tcp = FakeDc::start_tcp(DcConfig::default());
    let proxy = ladder(closed_port(), tcp.addr(), &[]);
    assert_falls_back(&proxy, &tcp, "refused");
}

#[test]
fn ws_black_holed_falls_back_to_tcp_after_the_connect_timeout() {
    let hole = BlackHole::new();
    let tcp = FakeDc::start_tcp(DcConfig::default());
    let proxy = ladder(hole.addr(), tcp.addr(), &["--ws-connect-timeout", "0.5"]);
    let t = Instant::now();
    let a = assert_falls_back(&proxy, &tcp, "timeout");
    // It did wait for the ws attempt up to the hedge delay (250 ms; no instant failure was
    // mistaken for a timeout), then the tcp hedge carried it while the ws attempt timed out
    // in the background.
    assert!(t.elapsed() >= Duration::from_millis(200), "{a:?}");
    assert!(a.ms < 4_000, "{a:?}");
}

#[test]
fn ws_http_403_and_502_fall_back_to_tcp() {
    for code in [403u16, 502] {
        let ws = FakeDc::start_tls_ws(DcConfig::with_fault(Fault::HttpStatus(code)));
        let tcp = FakeDc::start_tcp(DcConfig::default());
        let proxy = ladder(ws.addr(), tcp.addr(), &[]);
        assert_falls_back(&proxy, &tcp, &format!("http-{code}"));
        assert!(ws.connections() >= 1, "the ws front was tried");
        assert_eq!(ws.upgrades(), 0);
        assert!(ws.paths().iter().all(|p| p == "/apiws"), "{:?}", ws.paths());
    }
}

#[test]
fn ws_untrusted_certificate_falls_back_to_tcp() {
    let ws = FakeDc::start_tls_ws(DcConfig::default());
    let tcp = FakeDc::start_tcp(DcConfig::default());
    // The rig passes --ca-file tests/data/ca.pem first; a later --ca-file wins, and the leaf
    // certificate alone is no trust anchor for itself, so the fake front is untrusted.
    let leaf = data_path("server.pem");
    let leaf = leaf.to_str().expect("UTF-8 path");
    let proxy = ladder(ws.addr(), tcp.addr(), &["--ca-file", leaf]);
    assert_falls_back(&proxy, &tcp, "tls-error");
    assert!(ws.connections() >= 1, "the ws front was tried");
    assert_eq!(ws.upgrades(), 0, "no upgrade over an untrusted TLS session");
}

#[test]
fn every_tier_failing_closes_the_client_without_bytes() {
    let proxy = ladder(closed_port(), closed_port(), &[]);
    let t = Instant::now();
    let a = probe(&proxy, Tag::Intermediate, 2);
    assert_eq!(
        a.outcome,
        Outcome::ClosedEarly,
        "{a:?}\n{:#?}",
        proxy.logs()
    );
    assert_eq!(a.bytes_down, 0);
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    assert!(
        proxy
            .wait_session_reason("upstream-unreachable", LOG_WAIT)
            .is_some(),
        "{:#?}",
        proxy.logs()
    );
}

#[test]
fn running_ws_session_survives_the_front_refusing_new_connections() {
    let ws = FakeDc::start_tls_ws(DcConfig::default());
    let tcp = FakeDc::start_tcp(DcConfig::default());
    let proxy = ladder(ws.addr(), tcp.addr(), &[]);
    let mut rng = os_rng();
    let opts = client_opts(proxy.addr(), SECRET, Tag::Intermediate, 2);
    let mut c = MtClient::connect_with(&opts, &mut rng).expect("connect");
    let echo = |c: &mut MtClient, i: u32| {
        let p: Vec<u8> = (0..4096u32).map(|j| (j * 7 + i) as u8 | 0x80).collect();
        c.send_packet(&p).expect("send");
        let back = c
            .recv_packet()
            .unwrap_or_else(|e| panic!("echo {i}: {e}\nproxy log:\n{}", proxy.logs().join("\n")));
        assert_eq!(back, p, "echo {i}");
    };
    echo(&mut c, 0);
    assert_eq!((ws.inits(), ws.live_sessions()), (1, 1));

    // From now on the front accepts and drops every NEW connection.
    ws.set_fault(Fault::Refuse);
    let a = probe(&proxy, Tag::Intermediate, 2);
    assert_eq!(a.outcome, Outcome::Ok, "new client falls back: {a:?}");
    assert_eq!(tcp.inits(), 1, "the new client went via tcp");
    assert!(ws.connections() >= 2, "the new client tried ws first");

    // The existing ws session keeps relaying on its own connection.
    for i in 1..=20 {
        echo(&mut c, i);
    }
    assert_eq!(ws.inits(), 1);
    // Refused connections end at once; only the running session stays.
    assert!(
        wait_until(LOG_WAIT, || ws.live_sessions() == 1),
        "live {}",
        ws.live_sessions()
    );
    assert!(ws.violations().is_empty(), "{:?}", ws.violations());
}

#[test]
fn client_bytes_sent_while_connecting_survive_the_fallback() {
    // The client talks at once; the proxy holds its bytes (more than one 16 KiB buffer, so
    // backpressure is involved) while the ws attempt hangs, then relays them all via tcp.
    let hole = BlackHole::new();
    let tcp = FakeDc::start_tcp(DcConfig::default());
    let proxy = ladder(hole.addr(), tcp.addr(), &["--ws-connect-timeout", "0.5"]);
    let mut rng = os_rng();
    let opts = client_opts(proxy.addr(), SECRET, Tag::Abridged, -2);
    let c = MtClient::connect_with(&opts, &mut rng).expect("connect");
    let (sock, mut enc, mut dec) = c.into_parts();
    let mut wsock = sock.try_clone().expect("clone");
    const N: u32 = 40;
    let packet = |i: u32| -> Vec<u8> { (0..4096u32).map(|j| (j ^ i) as u8 | 0x80).collect() };
    let writer = std::thread::spawn(move || {
        let mut pad = Rng::from_seed([9; 48]);
        for i in 0..N {
            let mut w = framing::encode(Tag::Abridged, &packet(i), &mut pad);
            enc.apply(&mut w);
            wsock.write_all(&w).expect("write while connecting");
        }
    });
    let mut decoder = Decoder::new(Tag::Abridged);
    let mut rsock = sock;
    rsock
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let mut buf = vec![0u8; 65536];
    for i in 0..N {
        let p = loop {
            if let Some(p) = decoder.next().expect("framing") {
                break p;
            }
            let n = rsock.read(&mut buf).unwrap_or_else(|e| {
                panic!("echo {i}: {e}\nproxy log:\n{}", proxy.logs().join("\n"))
            });
            assert!(n > 0, "EOF before echo {i}\n{}", proxy.logs().join("\n"));
            dec.apply(&mut buf[..n]);
            decoder.push(&buf[..n]);
        };
        assert!(p == packet(i), "echo {i} differs");
    }
    writer.join().expect("writer");
    assert_eq!(tcp.init_dcs(), vec![(Tag::Abridged, -2)]);
    assert!(wait_ws_failed(&proxy, "timeout"), "{:#?}", proxy.logs());
}

#[test]
fn never_dials_its_own_listen_address() {
    // The ws tier points at the proxy itself (a port-scan or misconfiguration self-loop).
    let port = common::free_port().port().to_string();
    let me = format!("2:127.0.0.1:{port}");
    let proxy = Proxy::start(&[
        "--port",
        &port,
        "--secret",
        SECRET,
        "--dc-ip",
        &me,
        "--tier-order",
        "ws",
    ]);
    assert_eq!(
        proxy.port().to_string(),
        port,
        "the later --port wins over the rig's 0"
    );
    let t = Instant::now();
    let a = probe(&proxy, Tag::Intermediate, 2);
    assert_eq!(
        a.outcome,
        Outcome::ClosedEarly,
        "{a:?}\n{:#?}",
        proxy.logs()
    );
    assert_eq!(a.bytes_down, 0);
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    assert!(
        proxy
            .wait_session_reason("upstream-unreachable", LOG_WAIT)
            .is_some(),
        "{:#?}",
        proxy.logs()
    );
    // Had it dialled itself, its own TLS ClientHello would show up as a bad client.
    let bad: Vec<_> = proxy
        .sessions()
        .into_iter()
        .filter(|e| e["dc"].is_null())
        .collect();
    assert!(bad.is_empty(), "{bad:?}\n{:#?}", proxy.logs());
}
