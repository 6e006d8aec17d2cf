//! Black-box: `--proxy-protocol`. A valid PROXY v1 or v2 header is consumed (the client's init
//! right behind it is served, and the session line names the header's address; v2 LOCAL and v1
//! UNKNOWN keep the socket's peer); a truncated, garbage, oversize or missing header is refused
//! at once as `proxy-header` (an incomplete one at the handshake deadline), counted in the stats
//! line, while other clients are still served.
//!
//! Real sockets on 127.0.0.1 against a fake DC on the tcp tier; no fixed sleeps (waits poll a
//! condition against a deadline).

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv6Addr, TcpStream};
use std::time::{Duration, Instant};

use common::ctl::Ctl;
use common::plainrig::res_pq_after;
use common::{os_rng, tcp_dc2_proxy, Proxy};

/// `--handshake-timeout` here: long enough that "at once" is clearly before it.
const HANDSHAKE: &str = "3";
const HANDSHAKE_DUR: Duration = Duration::from_secs(3);
const WAIT: Duration = Duration::from_secs(10);

/// Sends `prefix` then an MTProto session (init, `req_pq_multi`) on one connection and checks
/// the `resPQ`; the connection is closed on return.
/// Waits for the session record of client `peer` (as the PROXY header gave it), of DC `dc`
/// if given.
fn peer_session(proxy: &Proxy, peer: &str, dc: Option<&str>) -> bool {
    proxy
        .wait_event("session", WAIT, |e| {
            e["peer"] == peer && dc.is_none_or(|d| e["dc"] == d)
        })
        .is_some()
}

/// Session records so far of clients seen as 127.0.0.1 (no PROXY header applied).
fn local_sessions(proxy: &Proxy) -> usize {
    let sessions = proxy.sessions().into_iter();
    sessions
        .filter(|e| {
            e["peer"]
                .as_str()
                .is_some_and(|p| p.starts_with("127.0.0.1:"))
        })
        .count()
}

fn served_after(proxy: &Proxy, prefix: &[u8]) -> Result<(), String> {
    let s = TcpStream::connect(proxy.addr()).map_err(|e| e.to_string())?;
    res_pq_after(s, proxy.addr(), prefix).map(drop)
}

/// Writes `bytes` (then half-closes if `eof`) and waits for the proxy to close: returns how
/// long that took, or None if it stayed open for `WAIT`. Nothing is ever sent back.
fn closed_after(proxy: &Proxy, bytes: &[u8], eof: bool) -> Option<Duration> {
    let mut s = TcpStream::connect(proxy.addr()).expect("connect");
    let start = Instant::now();
    s.write_all(bytes).expect("write");
    if eof {
        s.shutdown(std::net::Shutdown::Write).expect("shutdown");
    }
    s.set_read_timeout(Some(WAIT)).unwrap();
    let mut buf = [0u8; 64];
    match s.read(&mut buf) {
        Ok(0) => Some(start.elapsed()),
        Ok(n) => panic!("the proxy sent {n} bytes to a refused client"),
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => None,
        Err(_) => Some(start.elapsed()), // reset: closed too
    }
}

fn v2(cmd: u8, fam: u8, addr: &[u8]) -> Vec<u8> {
    let mut h = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
    h.extend_from_slice(&[0x20 | cmd, fam]);
    h.extend_from_slice(&(addr.len() as u16).to_be_bytes());
    h.extend_from_slice(addr);
    h
}

fn proxy_on() -> (common::fakedc::FakeDc, Proxy, Ctl) {
    let ctl = Ctl::new();
    let [c0, c1] = ctl.args();
    let (dc, proxy) = tcp_dc2_proxy(&[
        "--proxy-protocol",
        "--handshake-timeout",
        HANDSHAKE,
        &c0,
        &c1,
    ]);
    (dc, proxy, ctl)
}

/// Sessions closed for a bad or missing PROXY header so far, from `ctl status --json`.
fn header_closes(proxy: &Proxy, ctl: &Ctl) -> serde_json::Value {
    ctl.status(proxy)["counters"]["closed_by_reason"]["proxy-header"].clone()
}

#[test]
fn valid_v1_and_v2_headers_are_consumed_and_name_the_client() {
    let (_dc, proxy, ctl) = proxy_on();
    served_after(&proxy, b"PROXY TCP4 192.0.2.7 127.0.0.1 51000 443\r\n").expect("v1 TCP4");
    assert!(
        peer_session(&proxy, "192.0.2.7:51000", Some("DC2")),
        "no session line for the v1 address:\n{}",
        proxy.dump()
    );
    served_after(&proxy, b"PROXY TCP6 2001:db8::9 ::1 40000 443\r\n").expect("v1 TCP6");
    assert!(
        peer_session(&proxy, "[2001:db8::9]:40000", Some("DC2")),
        "{}",
        proxy.dump()
    );

    let mut a = vec![198, 51, 100, 23, 127, 0, 0, 1];
    a.extend_from_slice(&6000u16.to_be_bytes());
    a.extend_from_slice(&443u16.to_be_bytes());
    // A TLV after the address block is skipped.
    a.extend_from_slice(&[0x04, 0x00, 0x03, b'a', b'b', b'c']);
    served_after(&proxy, &v2(1, 0x11, &a)).expect("v2 INET");
    assert!(
        peer_session(&proxy, "198.51.100.23:6000", Some("DC2")),
        "{}",
        proxy.dump()
    );

    let src: Ipv6Addr = "2001:db8:5::1".parse().unwrap();
    let mut a = src.octets().to_vec();
    a.extend_from_slice(&Ipv6Addr::LOCALHOST.octets());
    a.extend_from_slice(&7000u16.to_be_bytes());
    a.extend_from_slice(&443u16.to_be_bytes());
    served_after(&proxy, &v2(1, 0x21, &a)).expect("v2 INET6");
    assert!(
        peer_session(&proxy, "[2001:db8:5::1]:7000", Some("DC2")),
        "{}",
        proxy.dump()
    );

    // LOCAL and UNKNOWN: served, under the socket's own address.
    let before = local_sessions(&proxy);
    served_after(&proxy, &v2(0, 0x00, &[])).expect("v2 LOCAL");
    served_after(&proxy, b"PROXY UNKNOWN\r\n").expect("v1 UNKNOWN");
    assert!(
        common::wait_until(WAIT, || local_sessions(&proxy) >= before + 2),
        "{}",
        proxy.dump()
    );
    assert_eq!(header_closes(&proxy, &ctl), 0, "{}", proxy.dump());
}

#[test]
fn bad_or_missing_headers_are_refused_and_others_still_served() {
    let (dc, proxy, ctl) = proxy_on();
    let at_once = HANDSHAKE_DUR - Duration::from_millis(500);
    let mut too_long = v2(1, 0x11, &[0; 12]);
    too_long[14..16].copy_from_slice(&2000u16.to_be_bytes());
    let mut init = [0u8; 64];
    os_rng().fill(&mut init);
    init[0] = 0xef; // never a PROXY start
    let cases: [(&str, &[u8], bool); 6] = [
        ("garbage", b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", false),
        (
            "bad v1 address",
            b"PROXY TCP4 1.2.3 127.0.0.1 1 2\r\n",
            false,
        ),
        ("v2 length over the bound", &too_long, false),
        ("missing (an init straight away)", &init, false),
        (
            "truncated v1, then EOF",
            b"PROXY TCP4 192.0.2.1 127.0",
            true,
        ),
        ("truncated v2, then EOF", &too_long[..13], true),
    ];
    for (what, bytes, eof) in cases {
        let took = closed_after(&proxy, bytes, eof)
            .unwrap_or_else(|| panic!("{what}: still open\n{}", proxy.dump()));
        assert!(took < at_once, "{what}: closed only after {took:?}");
    }
    // Incomplete and held open: closed at the handshake deadline.
    let took = closed_after(&proxy, b"PROXY TCP4 192.0.2.1", false).expect("held: still open");
    assert!(
        took >= HANDSHAKE_DUR - Duration::from_millis(50) && took < HANDSHAKE_DUR + WAIT,
        "held incomplete header closed after {took:?}"
    );
    assert!(
        proxy.wait_session_reason("proxy-header", WAIT).is_some(),
        "{}",
        proxy.dump()
    );
    // Nobody reached the DC, and a good client is still served.
    assert_eq!(dc.inits(), 0);
    served_after(&proxy, b"PROXY TCP4 203.0.113.5 127.0.0.1 1234 443\r\n").expect("good client");
    assert!(
        peer_session(&proxy, "203.0.113.5:1234", None),
        "{}",
        proxy.dump()
    );
    let ok = common::wait_until(WAIT, || header_closes(&proxy, &ctl) == 7);
    assert!(ok, "proxy-header count:\n{}", proxy.dump());
}

#[test]
fn without_the_flag_a_header_is_not_consumed() {
    // Off by default: the header's bytes are the init's and fail it.
    let (dc, proxy) = tcp_dc2_proxy(&["--bad-client-drain", "0"]);
    assert!(served_after(&proxy, b"PROXY TCP4 192.0.2.7 127.0.0.1 1 2\r\n").is_err());
    let bad = proxy.wait_session_reason("bad-init", WAIT);
    assert!(bad.is_some(), "{}", proxy.dump());
    assert_eq!(dc.inits(), 0);
    served_after(&proxy, b"").expect("a plain client is served");
}
