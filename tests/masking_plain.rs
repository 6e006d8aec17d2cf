//! Black-box: masking without fake-TLS. On a port whose secrets are all `ee`, a client whose
//! first bytes are not TLS is relayed byte for byte to `--mask-host` (a loopback fake server
//! here): the server gets exactly the client's bytes, the client gets the server's reply, the
//! half-close passes both ways, and the session is logged and counted as masked. A mask host
//! that refuses → `mask-unreachable` quickly; `--no-mask` → closed; a mask host that is our own
//! listener → `mask-loop`, and the proxy keeps handling clients; a silent masked session ends at
//! `--mask-idle-timeout` and gives its per-address slot back.
//!
//! Real sockets on 127.0.0.1 only; no fixed sleeps. The fake-TLS masking cases (a real TLS
//! "site" behind) are tests/faketls_*.rs's.

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use common::ctl::Ctl;
use common::plainrig::mask_server;
use common::{closed_port, Proxy};

const WAIT: Duration = Duration::from_secs(10);

/// An `ee` secret (key `0123…ef`, domain `mask.invalid`): the port is ee-only.
fn ee_secret() -> String {
    let hex: String = b"mask.invalid".iter().map(|b| format!("{b:02x}")).collect();
    format!("ee0123456789abcdef0123456789abcdef{hex}")
}

/// The proxy (ee-only port, tcp tier) with `extra` flags and its control socket.
fn proxy(extra: &[&str]) -> (Proxy, Ctl) {
    let secret = ee_secret();
    let ctl = Ctl::new();
    let ca = ctl.args();
    let mut args = vec!["--secret", &secret, "--tier-order", "tcp", &ca[0], &ca[1]];
    args.extend_from_slice(extra);
    (Proxy::start(&args), ctl)
}

/// Sends `bytes`, half-closes, reads to the end: (what came back, how long the close took), or
/// None if nothing ended within `WAIT`.
fn exchange(addr: SocketAddr, bytes: &[u8]) -> Option<(Vec<u8>, Duration)> {
    let mut s = TcpStream::connect(addr).expect("connect");
    let start = Instant::now();
    s.write_all(bytes).expect("write");
    // A proxy that closes at once (`--no-mask`) may have reset the connection already, on a
    // busy host before this half-close: then there is nothing to half-close (ENOTCONN).
    if let Err(e) = s.shutdown(std::net::Shutdown::Write) {
        assert_eq!(e.kind(), ErrorKind::NotConnected, "shutdown: {e}");
    }
    s.set_read_timeout(Some(WAIT)).unwrap();
    let mut got = Vec::new();
    match s.read_to_end(&mut got) {
        Ok(_) => Some((got, start.elapsed())),
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => None,
        Err(_) => Some((got, start.elapsed())),
    }
}

/// Waits until `ctl status --json`'s `counters.GROUP.KEY` (`closed_by_reason`, `masked`) is
/// `n`; false after `WAIT`.
fn counted(p: &Proxy, ctl: &Ctl, group: &str, key: &str, n: u64) -> bool {
    common::wait_until(WAIT, || {
        ctl.status(p)["counters"][group][key].as_u64().unwrap_or(0) == n
    })
}

/// A session record: handed to the mask host for `why`, closed for `reason`.
fn masked_for(e: &serde_json::Value, why: &str, reason: &str) -> bool {
    e["masked"] == true && e["mask_why"] == why && e["reason"] == reason
}

#[test]
fn non_tls_bytes_are_relayed_to_the_mask_host_and_back() {
    let (mask, got) = mask_server(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nhi");
    let target = mask.to_string();
    let (p, ctl) = proxy(&["--mask-host", &target]);
    // Larger than one read and than a hello, to cross the splice buffer more than once.
    let mut request = b"GET / HTTP/1.1\r\nHost: mask.invalid\r\n\r\n".to_vec();
    request.extend((0..40_000u32).map(|i| (i % 251) as u8));
    let (reply, _) = exchange(p.addr(), &request).expect("masked exchange ended");
    assert_eq!(
        got.recv_timeout(WAIT).expect("mask server got bytes"),
        request
    );
    assert_eq!(reply, b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nhi");
    let rec = p
        .wait_event("session", WAIT, |e| masked_for(e, "not-tls", "masked"))
        .unwrap_or_else(|| panic!("no masked session:\n{}", p.dump()));
    assert_eq!(rec["mask_target"], target, "{rec}");
    assert_eq!(rec["dc"], serde_json::Value::Null, "{rec}");
    assert!(counted(&p, &ctl, "masked", "not-tls", 1), "{}", p.dump());
    assert!(
        counted(&p, &ctl, "closed_by_reason", "masked", 1),
        "{}",
        p.dump()
    );
}

#[test]
fn mask_host_down_is_unreachable_quickly() {
    let dead = closed_port().to_string();
    let (p, ctl) = proxy(&["--mask-host", &dead, "--mask-connect-timeout", "5"]);
    let (reply, took) = exchange(p.addr(), b"hello, not tls").expect("closed");
    assert!(reply.is_empty());
    assert!(took < Duration::from_secs(4), "closed after {took:?}");
    let rec = p.wait_session_reason("mask-unreachable", WAIT);
    assert!(rec.is_some(), "{}", p.dump());
    assert!(
        counted(&p, &ctl, "closed_by_reason", "mask-unreachable", 1),
        "{}",
        p.dump()
    );
}

#[test]
fn mask_connect_timeout_is_bounded() {
    // A listener whose backlog is full never completes more connects: the mask connect hangs.
    let l = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    l.bind(&SocketAddr::from(([127, 0, 0, 1], 0)).into())
        .unwrap();
    l.listen(0).unwrap();
    let addr: SocketAddr = l.local_addr().unwrap().as_socket().unwrap();
    let _fill: Vec<_> = (0..8)
        .filter_map(|_| {
            let s =
                socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).ok()?;
            s.set_nonblocking(true).ok()?;
            let _ = s.connect(&addr.into());
            Some(s)
        })
        .collect();
    let target = addr.to_string();
    let (p, _ctl) = proxy(&["--mask-host", &target, "--mask-connect-timeout", "0.5"]);
    let (_, took) = exchange(p.addr(), b"hello, not tls").expect("closed");
    // Ended by the 0.5 s connect deadline, not at once and not by the idle timeout.
    assert!(
        took >= Duration::from_millis(400) && took < Duration::from_secs(5),
        "closed after {took:?}"
    );
    let rec = p
        .wait_session_reason("mask-unreachable", WAIT)
        .unwrap_or_else(|| panic!("no unreachable session:\n{}", p.dump()));
    assert_eq!(rec["mask_target"], target, "{rec}");
}

#[test]
fn no_mask_closes_instead() {
    let (mask, got) = mask_server(b"never");
    let target = mask.to_string();
    let (p, _ctl) = proxy(&[
        "--mask-host",
        &target,
        "--no-mask",
        "--bad-client-drain",
        "0",
    ]);
    let (reply, _) = exchange(p.addr(), b"hello, not tls").expect("closed");
    assert!(reply.is_empty());
    let rec = p
        .wait_session_reason("bad-init", WAIT)
        .unwrap_or_else(|| panic!("no bad-init session:\n{}", p.dump()));
    assert_eq!(rec["masked"], false, "{rec}");
    assert!(
        got.recv_timeout(Duration::from_millis(200)).is_err(),
        "the mask host was dialled"
    );
}

#[test]
fn mask_host_equal_to_our_listener_is_a_loop() {
    let port = common::free_port().port();
    let (port_s, target) = (port.to_string(), format!("127.0.0.1:{port}"));
    let (p, ctl) = proxy(&["--port", &port_s, "--mask-host", &target]);
    assert_eq!(p.port(), port);
    for _ in 0..2 {
        let (reply, took) = exchange(p.addr(), b"hello, not tls").expect("closed");
        assert!(
            reply.is_empty() && took < Duration::from_secs(4),
            "{took:?}"
        );
    }
    // Both loop clients were handled (the proxy kept serving), nothing was relayed.
    let loops = p.wait_sessions(2, WAIT, |e| e["reason"] == "mask-loop");
    assert_eq!(loops.len(), 2, "{}", p.dump());
    assert!(
        counted(&p, &ctl, "closed_by_reason", "mask-loop", 2),
        "{}",
        p.dump()
    );
    assert!(
        p.sessions_where(|e| e["reason"] == "masked").is_empty(),
        "{}",
        p.dump()
    );
}

#[test]
fn a_mask_host_name_is_resolved_through_the_resolver() {
    let (mask, got) = mask_server(b"named");
    let target = format!("mask.test:{}", mask.port());
    let secret = ee_secret();
    let p = common::named_proxy(
        &["mask.test"],
        &[
            "--secret",
            &secret,
            "--tier-order",
            "tcp",
            "--mask-host",
            &target,
        ],
    );
    let (reply, _) = exchange(p.addr(), b"plain bytes").expect("masked exchange ended");
    assert_eq!(
        got.recv_timeout(WAIT).expect("mask server got bytes"),
        b"plain bytes"
    );
    assert_eq!(reply, b"named");
    let rec = p
        .wait_event("session", WAIT, |e| e["masked"] == true)
        .unwrap_or_else(|| panic!("no masked session:\n{}", p.dump()));
    assert_eq!(rec["mask_target"], format!("{target} (127.0.0.1)"), "{rec}");
}

#[test]
fn an_idle_masked_session_is_closed_and_gives_its_slot_back() {
    // A mask host that takes connections and never answers.
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let target = l.local_addr().unwrap().to_string();
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        for s in l.incoming().flatten() {
            let _ = tx.send(s); // kept open, silent
        }
    });
    let (p, ctl) = proxy(&[
        "--mask-host",
        &target,
        "--mask-idle-timeout",
        "0.5",
        "--max-per-ip",
        "1",
    ]);
    for round in 0..2 {
        let mut s = TcpStream::connect(p.addr()).expect("connect");
        let start = Instant::now();
        s.write_all(b"hello, not tls").unwrap();
        let _held = rx.recv_timeout(WAIT).expect("the mask host was dialled");
        s.set_read_timeout(Some(WAIT)).unwrap();
        let r = s.read(&mut [0u8; 16]);
        assert!(matches!(r, Ok(0) | Err(_)), "round {round}: {r:?}");
        let took = start.elapsed();
        assert!(
            took >= Duration::from_millis(450) && took < Duration::from_secs(5),
            "round {round}: idle close after {took:?}"
        );
    }
    // Both ended as masked sessions (each record is written, even when a close line folds).
    let ended = p.wait_sessions(2, WAIT, |e| masked_for(e, "not-tls", "masked"));
    assert_eq!(ended.len(), 2, "{}", p.dump());
    assert!(
        counted(&p, &ctl, "closed_by_reason", "masked", 2),
        "{}",
        p.dump()
    );
}
