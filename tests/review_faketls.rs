//! Black-box review checks of the fake-TLS inbound: a client that completed the `ee`
//! handshake and then floods change_cipher_spec records must not take the reactor from the
//! other sessions (the record layer's read loop runs until the socket is drained, so records
//! that carry no payload must be bounded). Real sockets on 127.0.0.1; the client side of the
//! handshake is `mtproto::faketls::client`.

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::plainrig::mask_server;
use common::{client_opts, os_rng, tcp_dc2_proxy, Proxy, SECRET};
use tg_ws_proxy::applet::probe::{probe_once, MtClient, Outcome};
use tg_ws_proxy::mtproto::faketls::client::{
    check_server_hello, client_hello, Shape, MAX_CLIENT_HELLO,
};
use tg_ws_proxy::mtproto::obfs2::{self, Secret, Tag};
use tg_ws_proxy::mtproto::packet;

/// `ee` + a key + hex("example.com").
const EE: &str = "eefedcba9876543210fedcba98765432106578616d706c652e636f6d";
/// Longest the test waits for an answer or a probe.
const WAIT: Duration = Duration::from_secs(10);
/// A probe slower than this during the flood counts as starved (it takes a few ms unloaded).
const SLOW_MS: u64 = 2000;

/// Connects to `addr` and completes the fake-TLS handshake for [`EE`] (our ServerHello
/// verified); returns the socket at a record boundary.
fn tls_client(addr: std::net::SocketAddr) -> TcpStream {
    tls_client_in(addr, MAX_CLIENT_HELLO)
}

/// [`tls_client`] writing the hello `chunk` bytes at a time (each its own segment).
fn tls_client_in(addr: std::net::SocketAddr, chunk: usize) -> TcpStream {
    let secret = Secret::parse(EE).expect("EE parses");
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(WAIT)).unwrap();
    let (hello, random) = signed_hello(&secret.key, "example.com");
    assert!(
        hello.len() > 1200,
        "Chrome's hello with its post-quantum share"
    );
    s.set_nodelay(true).unwrap();
    for part in hello.chunks(chunk) {
        s.write_all(part).unwrap();
    }
    let mut answer = Vec::new();
    let deadline = Instant::now() + WAIT;
    loop {
        match check_server_hello(&answer, &secret.key, &random) {
            Ok(n) => {
                assert_eq!(n, answer.len(), "nothing past our answer before the init");
                return s;
            }
            Err(e) if Instant::now() > deadline => panic!("no valid answer: {e:?}"),
            Err(_) => {}
        }
        let mut buf = [0u8; 4096];
        let n = s.read(&mut buf).expect("read the answer");
        assert!(n > 0, "closed before the answer");
        answer.extend(&buf[..n]);
    }
}

#[test]
fn a_ccs_flood_after_the_handshake_does_not_starve_other_clients() {
    let (_dc, proxy) = tcp_dc2_proxy(&["--secret", EE, "--handshake-timeout", "30"]);
    let addr = proxy.addr();
    let mut flood = tls_client(addr);
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let stop = stop.clone();
        let mut flood = flood.try_clone().unwrap();
        std::thread::spawn(move || {
            let ccs: Vec<u8> = [0x14, 0x03, 0x03, 0x00, 0x01, 0x01].repeat(10_000);
            let mut sent = 0u64;
            while !stop.load(Ordering::Relaxed) {
                match flood.write(&ccs) {
                    Ok(n) => sent += n as u64,
                    Err(_) => break,
                }
            }
            sent
        })
    };
    // Another client on the same reactor, while the flood runs.
    let opts = client_opts(addr, SECRET, Tag::Intermediate, 2);
    let attempt = probe_once(&opts, &mut os_rng());
    let flooder_closed = {
        // The flooding session is ended (a bounded run of CCS records), so the writer stops.
        flood.set_read_timeout(Some(WAIT)).unwrap();
        let mut buf = [0u8; 256];
        match flood.read(&mut buf) {
            Ok(0) => true,
            Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
            Ok(_) => false,
        }
    };
    stop.store(true, Ordering::Relaxed);
    let _ = flood.shutdown(std::net::Shutdown::Both);
    let sent = writer.join().unwrap();
    eprintln!("probe during the flood: {}ms", attempt.ms);
    assert_eq!(
        attempt.outcome,
        Outcome::Ok,
        "probe during a CCS flood ({sent} bytes sent): {} in {}ms\n{}",
        attempt.detail,
        attempt.ms,
        proxy.dump()
    );
    // Before the bound a probe took seconds here (the reactor sat in the flooder's read loop).
    assert!(
        attempt.ms < SLOW_MS,
        "probe took {}ms during the flood",
        attempt.ms
    );
    assert!(flooder_closed, "the flooding client is closed");
}

/// Writes `parts` one by one (each its own segment), half-closes, reads to the end.
fn exchange(addr: std::net::SocketAddr, parts: &[&[u8]]) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_nodelay(true).unwrap();
    for p in parts {
        s.write_all(p).expect("write");
        s.flush().unwrap();
    }
    s.shutdown(std::net::Shutdown::Write).expect("shutdown");
    s.set_read_timeout(Some(WAIT)).unwrap();
    let mut got = Vec::new();
    s.read_to_end(&mut got).expect("read to the end");
    got
}

/// A signed hello for `key` and `domain` at the current time.
fn hello_for(key: &[u8; 16], domain: &str) -> Vec<u8> {
    signed_hello(key, domain).0
}

/// [`hello_for`] with the client random it carries (to check the server's answer against).
fn signed_hello(key: &[u8; 16], domain: &str) -> (Vec<u8>, [u8; 32]) {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let mut rng = os_rng();
    client_hello(Shape::Chrome, key, domain, now, &mut |b| rng.fill(b)).expect("a hello")
}

/// A masked session as [`mask_server`]`(b"site answer")` saw it: the mask host got exactly
/// `want`, the client got the site's answer back (`reply`), and the proxy recorded a session
/// from `peer` (`ADDR:` or `ADDR:PORT`, a prefix) masked for `why`.
fn assert_masked(
    proxy: &Proxy,
    got: &mpsc::Receiver<Vec<u8>>,
    reply: &[u8],
    want: &[u8],
    (peer, why): (&str, &str),
) {
    assert_eq!(got.recv_timeout(WAIT).expect("mask server got bytes"), want);
    assert_eq!(reply, b"site answer");
    let rec = proxy.wait_event("session", WAIT, |e| {
        e["peer"].as_str().is_some_and(|p| p.starts_with(peer))
            && e["masked"] == true
            && e["mask_why"] == why
            && e["reason"] == "masked"
    });
    assert!(
        rec.is_some(),
        "no {peer} masked for {why}\n{}",
        proxy.dump()
    );
}

#[test]
fn a_wrong_key_hello_split_and_followed_by_bytes_is_replayed_exactly_on_a_mixed_port() {
    let (mask, got) = mask_server(b"site answer");
    let target = mask.to_string();
    let (_dc, proxy) = tcp_dc2_proxy(&["--secret", EE, "--mask-host", &target]);
    let hello = hello_for(&[0x5a; 16], "example.com");
    let after: Vec<u8> = (0..3000u32).map(|i| (i % 253) as u8).collect();
    let reply = exchange(
        proxy.addr(),
        &[&hello[..3], &hello[3..200], &hello[200..], &after],
    );
    let mut want = hello.clone();
    want.extend(&after);
    assert_masked(&proxy, &got, &reply, &want, ("127.0.0.1:", "wrong-key"));
}

#[test]
fn a_replayed_hello_is_masked_with_exactly_its_bytes() {
    let (mask, got) = mask_server(b"site answer");
    let target = mask.to_string();
    let (_dc, proxy) = tcp_dc2_proxy(&["--secret", EE, "--mask-host", &target]);
    let secret = Secret::parse(EE).unwrap();
    let hello = hello_for(&secret.key, "example.com");
    // First time: answered (a ServerHello record comes back).
    let mut first = TcpStream::connect(proxy.addr()).unwrap();
    first.write_all(&hello).unwrap();
    first.set_read_timeout(Some(WAIT)).unwrap();
    let mut head = [0u8; 3];
    first
        .read_exact(&mut head)
        .expect("an answer to the first hello");
    assert_eq!(head, [0x16, 0x03, 0x03]);
    // Second time: a replay, masked.
    let reply = exchange(proxy.addr(), &[&hello]);
    assert_masked(&proxy, &got, &reply, &hello, ("127.0.0.1:", "replay"));
}

/// A fake mask server for one connection: reads exactly `n` bytes, reports them, answers
/// `reply` and closes.
fn mask_server_n(
    n: usize,
    reply: &'static [u8],
) -> (std::net::SocketAddr, mpsc::Receiver<Vec<u8>>) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = l.local_addr().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let (mut s, _) = l.accept().expect("accept");
        s.set_read_timeout(Some(WAIT)).unwrap();
        let mut got = vec![0u8; n];
        let ok = s.read_exact(&mut got).is_ok();
        let _ = tx.send(if ok { got } else { Vec::new() });
        let _ = s.write_all(reply);
    });
    (addr, rx)
}

/// Sends `bytes` and keeps the connection open (no half-close): what comes back until the
/// proxy closes, or None if nothing ended within `WAIT`.
fn send_and_wait(addr: std::net::SocketAddr, bytes: &[u8]) -> Option<Vec<u8>> {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.write_all(bytes).expect("write");
    s.set_read_timeout(Some(WAIT)).unwrap();
    let mut got = Vec::new();
    match s.read_to_end(&mut got) {
        Ok(_) => Some(got),
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => Some(got),
        Err(_) => None,
    }
}

#[test]
fn a_tls_start_that_never_completes_is_masked_at_the_handshake_deadline() {
    let mut short = vec![0x16, 0x03, 0x01, 0x00, 0x08];
    short.extend([1, 2, 3, 4, 5, 6, 7, 8]); // a record too short to be a hello: not an init
    let mut partial = hello_for(&[0x5a; 16], "example.com");
    partial.truncate(100); // a hello cut short, the rest never sent
    for bytes in [short, partial] {
        let n = bytes.len();
        let (mask, got) = mask_server_n(n, b"site alert");
        let target = mask.to_string();
        let (_dc, proxy) = tcp_dc2_proxy(&[
            "--secret",
            EE,
            "--mask-host",
            &target,
            "--handshake-timeout",
            "0.5",
        ]);
        let reply = send_and_wait(proxy.addr(), &bytes);
        let sent = got.recv_timeout(WAIT).unwrap_or_default();
        assert_eq!(sent, bytes, "{n} bytes at the mask host\n{}", proxy.dump());
        assert_eq!(
            reply.as_deref(),
            Some(&b"site alert"[..]),
            "{}",
            proxy.dump()
        );
        let rec = proxy.wait_event("session", WAIT, |e| e["mask_why"] == "malformed");
        assert!(rec.is_some(), "{}", proxy.dump());
    }
}

#[test]
fn behind_proxy_protocol_a_masked_hello_reaches_the_mask_host_without_the_header() {
    let (mask, got) = mask_server(b"site answer");
    let target = mask.to_string();
    let (_dc, proxy) = tcp_dc2_proxy(&["--secret", EE, "--mask-host", &target, "--proxy-protocol"]);
    let hello = hello_for(&[0x5a; 16], "example.com");
    let mut segment = b"PROXY TCP4 198.51.100.7 127.0.0.1 40000 443\r\n".to_vec();
    segment.extend(&hello);
    let reply = exchange(proxy.addr(), &[&segment]);
    assert_masked(
        &proxy,
        &got,
        &reply,
        &hello,
        ("198.51.100.7:40000", "wrong-key"),
    );
}

#[test]
fn a_hello_dripped_byte_by_byte_is_answered_and_the_session_served() {
    let (_dc, proxy) = tcp_dc2_proxy(&["--secret", EE]);
    // our Chrome hello is about 1.7 KB: 1448 splits it as a full-size TCP segment would
    for chunk in [1, 5, 6, 43, 44, 1448] {
        let s = tls_client_in(proxy.addr(), chunk);
        drop(s);
    }
    // A whole probe after them: the gate still answers.
    let opts = client_opts(proxy.addr(), EE, Tag::Intermediate, 2);
    let attempt = probe_once(&opts, &mut os_rng());
    assert_eq!(attempt.outcome, Outcome::Ok, "{}", attempt.detail);
}

/// A mask server for any number of connections: each gets `bye` and is closed at once.
fn closing_mask_server() -> std::net::SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for mut s in l.incoming().flatten() {
            let _ = s.write_all(b"bye");
        }
    });
    addr
}

/// Reads until the proxy closes: true if it did within `WAIT`.
fn closed_by_proxy(s: &mut TcpStream) -> bool {
    s.set_read_timeout(Some(WAIT)).unwrap();
    let mut sink = Vec::new();
    match s.read_to_end(&mut sink) {
        Ok(_) => true,
        Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
    }
}

#[test]
fn fake_tls_and_masked_sessions_give_their_per_address_slot_back() {
    let mask = closing_mask_server().to_string();
    let (_dc, proxy) = tcp_dc2_proxy(&[
        "--secret",
        EE,
        "--mask-host",
        &mask,
        "--max-per-ip",
        "2",
        "--per-ip-rate",
        "0",
        "--handshake-timeout",
        "0.5",
        "--bad-client-drain",
        "0",
    ]);
    let addr = proxy.addr();
    for round in 0..2 {
        // Masked: a wrong-key hello, and a hello cut short (masked at the deadline).
        let hello = hello_for(&[0x5a; 16], "example.com");
        for bytes in [&hello[..], &hello[..100]] {
            let mut s = TcpStream::connect(addr).unwrap();
            s.write_all(bytes).unwrap();
            assert!(closed_by_proxy(&mut s), "round {round}");
        }
        // Accepted, then a record stream we do not relay (tls-record).
        let mut s = tls_client(addr);
        s.write_all(&[0x14, 0x03, 0x03, 0x00, 0x01, 0x01].repeat(9))
            .unwrap();
        assert!(closed_by_proxy(&mut s), "round {round}");
        // Accepted and served.
        let opts = client_opts(addr, EE, Tag::Intermediate, 2);
        let attempt = probe_once(&opts, &mut os_rng());
        assert_eq!(
            attempt.outcome,
            Outcome::Ok,
            "round {round}: {}",
            attempt.detail
        );
    }
    // Every slot came back: two sessions held at once, the third refused.
    let opts = client_opts(addr, EE, Tag::Intermediate, 2);
    // Past their init (no handshake deadline any more): held until dropped.
    // The last session's slot comes back when the proxy has closed it, a moment after the
    // client left: retry within the deadline rather than race that close.
    let mut held: Vec<MtClient> = Vec::new();
    let all_held = common::wait_until(WAIT, || {
        if let Ok(c) = MtClient::connect_with(&opts, &mut os_rng()) {
            held.push(c);
        }
        held.len() == 2
    });
    assert!(all_held, "two sessions held at once\n{}", proxy.dump());
    let attempt = probe_once(&opts, &mut os_rng());
    assert_ne!(attempt.outcome, Outcome::Ok, "a third session refused");
    // Over the limit: masked like a client that is not ours (`--per-ip-mask` default).
    let rec = proxy.wait_event("session", WAIT, |e| e["mask_why"] == "over-limit");
    assert!(rec.is_some(), "{}", proxy.dump());
    drop(held);
}

#[test]
fn an_init_pipelined_with_the_hello_before_our_answer_is_read_is_accepted() {
    let (dc, proxy) = tcp_dc2_proxy(&["--secret", EE]);
    let secret = Secret::parse(EE).unwrap();
    let mut rng = os_rng();
    let started = obfs2::initiate(Tag::Intermediate, 2, Some(&secret.key), &mut rng);
    // Hello, CCS, then the init split over two application-data records, in one write.
    let mut wire = hello_for(&secret.key, "example.com");
    wire.extend([0x14, 0x03, 0x03, 0x00, 0x01, 0x01]);
    for part in started.init.chunks(40) {
        wire.extend([0x17, 0x03, 0x03, 0x00, part.len() as u8]);
        wire.extend(part);
    }
    let mut s = TcpStream::connect(proxy.addr()).unwrap();
    s.write_all(&wire).unwrap();
    s.set_read_timeout(Some(WAIT)).unwrap();
    let mut head = [0u8; 3];
    s.read_exact(&mut head).expect("our answer");
    assert_eq!(head, [0x16, 0x03, 0x03]);
    // The init was accepted: an upstream is dialled only after an init opened.
    assert!(
        common::wait_until(WAIT, || dc.connections() >= 1),
        "no upstream dialled:\n{}",
        proxy.dump()
    );
    let ended = proxy.sessions();
    assert!(ended.is_empty(), "the pipelined session ended: {ended:?}");
}

#[test]
fn a_proxy_header_dripped_byte_by_byte_then_fake_tls_is_served_under_its_address() {
    let (_dc, proxy) = tcp_dc2_proxy(&["--secret", EE, "--proxy-protocol"]);
    let header = b"PROXY TCP4 203.0.113.9 127.0.0.1 41000 443\r\n";
    let mut s = TcpStream::connect(proxy.addr()).unwrap();
    s.set_nodelay(true).unwrap();
    for b in header.chunks(1) {
        s.write_all(b).unwrap();
    }
    let opts = client_opts(proxy.addr(), EE, Tag::Intermediate, 2);
    let mut rng = os_rng();
    let mut c = MtClient::handshake(s, &opts, &mut rng).expect("fake-TLS handshake");
    let mut nonce = [0u8; 16];
    rng.fill(&mut nonce);
    c.send_packet(&packet::req_pq_multi(
        &nonce,
        packet::msg_id(1_700_000_000_000),
    ))
    .expect("send");
    let reply = c.recv_packet().expect("reply");
    packet::parse_res_pq(&reply, &nonce).expect("resPQ");
    drop(c);
    let rec = proxy.wait_event("session", WAIT, |e| e["peer"] == "203.0.113.9:41000");
    let rec =
        rec.unwrap_or_else(|| panic!("no record under the header's address\n{}", proxy.dump()));
    assert_eq!(rec["fake_tls"], true, "{rec}");
    assert_eq!(rec["dc"], "DC2", "{rec}");
}
