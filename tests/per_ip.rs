//! Black-box: per-client-address limits. Over `--max-per-ip` a new connection from the same
//! address is refused at once (`per-ip-limit`) while another address (a client bound to
//! 127.0.0.2) is still served; once sessions end their slots come back (no leak: a second full
//! burst is served again); a burst over `--per-ip-burst` is refused as `per-ip-rate`; behind
//! `--proxy-protocol` the header's address is the one limited.
//!
//! Real sockets on 127.0.0.0/8 only, against a fake DC on the tcp tier; no fixed sleeps.

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use socket2::{Domain, Socket, Type};

use common::plainrig::res_pq_after;
use common::{tcp_dc2_proxy, Proxy};
use tg_ws_proxy::applet::probe::MtClient;

const WAIT: Duration = Duration::from_secs(10);
/// Refusals must come well before this (`--handshake-timeout` below).
const AT_ONCE: Duration = Duration::from_secs(4);

/// A TCP connection to `to` from `from` (port chosen by the OS).
fn connect_from(from: [u8; 4], to: SocketAddr) -> TcpStream {
    let s = Socket::new(Domain::IPV4, Type::STREAM, None).expect("socket");
    s.bind(&SocketAddr::from((from, 0)).into())
        .expect("bind client address");
    s.connect(&to.into()).expect("connect");
    s.into()
}

/// A session from `from` that got its `resPQ`, kept open.
fn session_from(proxy: &Proxy, from: [u8; 4], prefix: &[u8]) -> Result<MtClient, String> {
    res_pq_after(connect_from(from, proxy.addr()), proxy.addr(), prefix)
}

/// Connects from `from` (after `prefix`) and waits for the proxy to close it without a byte:
/// how long it took, or None if it stayed open for `WAIT`.
fn refused_from(proxy: &Proxy, from: [u8; 4], prefix: &[u8]) -> Option<Duration> {
    let mut s = connect_from(from, proxy.addr());
    let start = Instant::now();
    s.write_all(prefix).expect("write");
    s.set_read_timeout(Some(WAIT)).unwrap();
    match s.read(&mut [0u8; 16]) {
        Ok(0) => Some(start.elapsed()),
        Ok(n) => panic!("{n} bytes sent to a refused client"),
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => None,
        Err(_) => Some(start.elapsed()),
    }
}

/// Waits until exactly `n` session records ended for `reason` (at least `n` within `WAIT`,
/// then no more than `n`).
fn ended_for(proxy: &Proxy, reason: &str, n: usize) -> bool {
    proxy
        .wait_sessions(n, WAIT, |e| e["reason"] == reason)
        .len()
        == n
}

#[test]
fn ninth_session_refused_other_address_served_and_slots_come_back() {
    let (dc, proxy) = tcp_dc2_proxy(&[
        "--max-per-ip",
        "8",
        "--per-ip-rate",
        "0",
        "--handshake-timeout",
        "8",
    ]);
    let held: Vec<MtClient> = (0..8)
        .map(|i| session_from(&proxy, [127, 0, 0, 1], b"").unwrap_or_else(|e| panic!("{i}: {e}")))
        .collect();
    let took = refused_from(&proxy, [127, 0, 0, 1], b"").expect("9th still open");
    assert!(took < AT_ONCE, "9th closed after {took:?}");
    assert!(ended_for(&proxy, "per-ip-limit", 1), "{}", proxy.dump());
    // Another address has its own count.
    let other = session_from(&proxy, [127, 0, 0, 2], b"").expect("127.0.0.2 served");
    assert_eq!(dc.inits(), 9);
    // All eight end: their slots are released, and a second burst of eight is served.
    drop(held);
    drop(other);
    assert!(ended_for(&proxy, "client-eof", 9), "{}", proxy.dump());
    let again: Vec<MtClient> = (0..8)
        .map(|i| {
            session_from(&proxy, [127, 0, 0, 1], b"").unwrap_or_else(|e| panic!("again {i}: {e}"))
        })
        .collect();
    assert!(refused_from(&proxy, [127, 0, 0, 1], b"").is_some_and(|t| t < AT_ONCE));
    assert!(ended_for(&proxy, "per-ip-limit", 2), "{}", proxy.dump());
    drop(again);
}

#[test]
fn burst_over_the_bucket_is_refused_as_rate() {
    let (_dc, proxy) = tcp_dc2_proxy(&[
        "--max-per-ip",
        "0",
        "--per-ip-rate",
        "1",
        "--per-ip-burst",
        "3",
        "--handshake-timeout",
        "8",
    ]);
    // Three at once are admitted (they wait in the handshake, so they stay open) …
    let admitted: Vec<TcpStream> = (0..3)
        .map(|_| connect_from([127, 0, 0, 1], proxy.addr()))
        .collect();
    // … the fourth of the burst is refused at once.
    let took = refused_from(&proxy, [127, 0, 0, 1], b"").expect("4th still open");
    assert!(took < AT_ONCE, "4th closed after {took:?}");
    assert!(ended_for(&proxy, "per-ip-rate", 1), "{}", proxy.dump());
    for mut s in admitted {
        s.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        match s.read(&mut [0u8; 4]) {
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            other => panic!("an admitted client was closed: {other:?}\n{}", proxy.dump()),
        }
    }
    // Another address has its own bucket.
    session_from(&proxy, [127, 0, 0, 2], b"").expect("127.0.0.2 served");
    assert!(ended_for(&proxy, "per-ip-rate", 1), "{}", proxy.dump());
}

#[test]
fn behind_proxy_protocol_the_header_address_is_limited() {
    let (_dc, proxy) = tcp_dc2_proxy(&[
        "--proxy-protocol",
        "--max-per-ip",
        "1",
        "--per-ip-rate",
        "0",
        "--handshake-timeout",
        "8",
    ]);
    let a = b"PROXY TCP4 192.0.2.10 127.0.0.1 1000 443\r\n";
    let b = b"PROXY TCP4 192.0.2.11 127.0.0.1 1001 443\r\n";
    let _first = session_from(&proxy, [127, 0, 0, 1], a).expect("first of 192.0.2.10");
    // Same socket address, another header address: served.
    let _second = session_from(&proxy, [127, 0, 0, 1], b).expect("192.0.2.11 served");
    let took = refused_from(&proxy, [127, 0, 0, 1], a).expect("second of 192.0.2.10 open");
    assert!(took < AT_ONCE, "closed after {took:?}");
    let rec = proxy.wait_session_reason("per-ip-limit", WAIT);
    let rec = rec.unwrap_or_else(|| panic!("no per-ip-limit record\n{}", proxy.dump()));
    assert_eq!(rec["peer"], "192.0.2.10:1000", "{rec}");
}

#[test]
fn every_way_a_session_ends_gives_its_slot_back() {
    let (_dc, proxy) = tcp_dc2_proxy(&[
        "--max-per-ip",
        "2",
        "--per-ip-rate",
        "0",
        "--handshake-timeout",
        "0.5",
        "--bad-client-drain",
        "0",
    ]);
    let local = [127, 0, 0, 1];
    for round in 0..3 {
        // A bad init (closed at once) and an end of stream inside the init.
        let mut bad = connect_from(local, proxy.addr());
        bad.write_all(&[0xef; 64]).unwrap();
        bad.set_read_timeout(Some(WAIT)).unwrap();
        let _ = bad.read(&mut [0u8; 4]);
        let mut eof = connect_from(local, proxy.addr());
        eof.write_all(&[0xef; 10]).unwrap();
        eof.shutdown(std::net::Shutdown::Write).unwrap();
        eof.set_read_timeout(Some(WAIT)).unwrap();
        let _ = eof.read(&mut [0u8; 4]);
        // Two silent ones held to the handshake deadline.
        let held: Vec<_> = (0..2).map(|_| connect_from(local, proxy.addr())).collect();
        for mut s in held {
            s.set_read_timeout(Some(WAIT)).unwrap();
            assert!(
                matches!(s.read(&mut [0u8; 4]), Ok(0) | Err(_)),
                "round {round}"
            );
        }
        // A relayed session, ended by the client.
        drop(session_from(&proxy, local, b"").unwrap_or_else(|e| panic!("round {round}: {e}")));
    }
    assert!(ended_for(&proxy, "client-eof", 3), "{}", proxy.dump());
    // Nothing leaked: both slots are free again, and only those two.
    let _a = session_from(&proxy, local, b"").expect("first");
    let _b = session_from(&proxy, local, b"").expect("second");
    assert!(
        refused_from(&proxy, local, b"").is_some_and(|t| t < AT_ONCE),
        "{}",
        proxy.dump()
    );
}
