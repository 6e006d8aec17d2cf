//! Black-box tests of the SOCKS5 inbound (`--socks5`, issue 21 part 3, docs/protocol.md §1.10):
//! curl (Debian's, a real SOCKS5 client) for the method, credential and destination refusals;
//! a hand-written client for the byte-exact REP codes curl never asks for (BIND, UDP
//! ASSOCIATE, an unknown address type, the reserved byte, a name that is not an IP literal) and
//! for SOCKS4; and a direct MTProto client (no secret) through a CONNECT to a DC address, its
//! init pipelined behind the request, answered by a fake DC on the tcp tier.
//!
//! Loopback only: the proxy, its SOCKS5 listener and the fake DC bind 127.0.0.1; "Telegram's DC
//! address" is 127.0.0.2 made DC 2 by `--dc-addr`, and no test connects to it: the proxy dials
//! the fake DC that `--tcp-dc-ip` names. A destination outside the DC table is a listener of
//! this test's own, which must see no connection.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::Command;
use std::time::Duration;

use common::fakedc::{DcConfig, FakeDc};
use common::mtsession::MtSession;
use common::socks5;
use common::{temp_dir, wait_until, Proxy, SECRET};
use tg_ws_proxy::mtproto::obfs2::Tag;
use tg_ws_proxy::rng::Rng;

const T: Duration = Duration::from_secs(10);

/// The address `--dc-addr` makes DC 2 (never dialled: the tcp tier goes to the fake DC).
const DC2: &str = "127.0.0.2";

/// A proxy with a SOCKS5 listener on 127.0.0.1 (free port) and `extra` flags; its SOCKS5
/// address read from the `socks5 listener on ADDR` line.
fn start(extra: &[&str]) -> (Proxy, SocketAddr) {
    let dc_addr = format!("{DC2}=2");
    let mut args = vec![
        "--secret",
        SECRET,
        "--socks5",
        "127.0.0.1:0",
        "--dc-addr",
        &dc_addr,
    ];
    args.extend(extra);
    let proxy = Proxy::start(&args);
    let line = proxy
        .wait_line(&["socks5 listener on "], T)
        .unwrap_or_else(|| panic!("no socks5 listener line: {}", proxy.dump()));
    let addr = line
        .rsplit("socks5 listener on ")
        .next()
        .and_then(|a| a.trim().parse().ok())
        .unwrap_or_else(|| panic!("no address in {line:?}"));
    (proxy, addr)
}

/// `curl -sS --max-time 10 ARGS`: (exit code, stderr).
fn curl(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "10"])
        .args(args)
        .output()
        .expect("curl (Debian package curl) installed");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// CURLE_PROXY: curl's exit code for a SOCKS5 handshake the proxy refused.
const CURLE_PROXY: i32 = 97;

/// A listener of our own that stands for "anywhere else": it must never be connected to.
fn elsewhere() -> TcpListener {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    l.set_nonblocking(true).expect("nonblocking");
    l
}

fn never_connected(l: &TcpListener) {
    match l.accept() {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        other => panic!("the refused destination was connected to: {other:?}"),
    }
}

/// How many sessions ended as `reason` so far.
fn closed_as(proxy: &Proxy, reason: &str) -> usize {
    proxy
        .sessions()
        .iter()
        .filter(|e| e["reason"] == reason)
        .count()
}

#[test]
fn curl_without_users_a_destination_outside_the_dc_table_gets_rep_02_and_nothing_is_relayed() {
    let (proxy, socks) = start(&[]);
    let other = elsewhere();
    let url = format!("http://{}/", other.local_addr().unwrap());
    let (code, err) = curl(&["--socks5", &socks.to_string(), &url]);
    assert_eq!(code, Some(CURLE_PROXY), "{err}");
    assert!(err.contains("(2)"), "REP 02 not allowed by ruleset: {err}");
    assert!(wait_until(T, || closed_as(&proxy, "socks5-refused") == 1));
    never_connected(&other);
    // A name is never resolved: REP 04 even for one that names this machine.
    let (code, err) = curl(&[
        "--socks5-hostname",
        &socks.to_string(),
        "http://localhost:1/",
    ]);
    assert_eq!(code, Some(CURLE_PROXY), "{err}");
    assert!(err.contains("(4)"), "REP 04 host unreachable: {err}");
    assert!(wait_until(T, || closed_as(&proxy, "socks5-refused") == 2));
    // An IP literal given as a name is an address: 127.0.0.1 is not a DC either.
    let (code, err) = curl(&["--socks5-hostname", &socks.to_string(), &url]);
    assert_eq!(code, Some(CURLE_PROXY), "{err}");
    assert!(err.contains("(2)"), "{err}");
    never_connected(&other);
}

#[test]
fn curl_with_users_must_authenticate_and_wrong_credentials_are_refused() {
    let dir = temp_dir();
    let users = dir.join("socks5.users");
    std::fs::write(&users, "# users\nalice:s3cret\n").unwrap();
    let path = users.to_str().unwrap();
    let (proxy, socks) = start(&["--socks5-auth", path]);
    let other = elsewhere();
    let url = format!("http://{}/", other.local_addr().unwrap());
    // No credentials: curl offers only "no authentication", which is never chosen (05 FF).
    let (code, err) = curl(&["--proxy", &format!("socks5://{socks}"), &url]);
    assert_eq!(code, Some(CURLE_PROXY), "{err}");
    assert!(
        err.contains("No authentication method was acceptable"),
        "{err}"
    );
    // Wrong password, then an unknown user: 01 01.
    for cred in ["alice:wrong", "bob:s3cret"] {
        let (code, err) = curl(&["--proxy", &format!("socks5://{cred}@{socks}"), &url]);
        assert_eq!(code, Some(CURLE_PROXY), "{cred}: {err}");
        assert!(
            err.contains("User was rejected by the SOCKS5 server"),
            "{cred}: {err}"
        );
    }
    assert!(wait_until(T, || closed_as(&proxy, "socks5-refused") == 3));
    // Right credentials: authenticated, then REP 02 for the destination outside the table.
    let (code, err) = curl(&["--proxy", &format!("socks5://alice:s3cret@{socks}"), &url]);
    assert_eq!(code, Some(CURLE_PROXY), "{err}");
    assert!(err.contains("(2)"), "{err}");
    never_connected(&other);
    // ... and a DC address is accepted (REP 00): what follows is curl's HTTP, not MTProto,
    // which the direct handshake closes; curl sees the tunnel open and an empty reply.
    let dc_url = format!("http://{DC2}:443/");
    let (code, err) = curl(&[
        "--proxy",
        &format!("socks5://alice:s3cret@{socks}"),
        &dc_url,
    ]);
    assert_ne!(code, Some(CURLE_PROXY), "the CONNECT was refused: {err}");
    assert!(
        proxy.logs().iter().all(|l| !l.contains("s3cret")),
        "a password in the log"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Connects, sends `05 01 00` (answered `05 00`) and `request`; returns everything the proxy
/// wrote after the method choice until it closed.
fn raw_request(socks: SocketAddr, request: &[u8]) -> Vec<u8> {
    let mut c = TcpStream::connect(socks).expect("connect");
    c.set_read_timeout(Some(T)).unwrap();
    c.write_all(&[5, 1, 0]).unwrap();
    let mut method = [0u8; 2];
    c.read_exact(&mut method).expect("method choice");
    assert_eq!(method, [5, 0]);
    c.write_all(request).unwrap();
    let mut got = Vec::new();
    c.read_to_end(&mut got)
        .expect("the proxy closes after a refusal");
    got
}

/// `05 REP 00 01 0.0.0.0:0`.
fn rep(code: u8) -> Vec<u8> {
    vec![5, code, 0, 1, 0, 0, 0, 0, 0, 0]
}

#[test]
fn byte_exact_refusals_for_what_curl_never_asks() {
    let (proxy, socks) = start(&[]);
    let mut name = vec![5, 1, 0, 3, 14];
    name.extend_from_slice(b"tg.example.org");
    name.extend_from_slice(&443u16.to_be_bytes());
    let cases: [(&str, Vec<u8>, Vec<u8>); 6] = [
        ("BIND", vec![5, 2, 0, 1, 127, 0, 0, 2, 1, 187], rep(7)),
        (
            "UDP ASSOCIATE",
            vec![5, 3, 0, 1, 127, 0, 0, 2, 1, 187],
            rep(7),
        ),
        (
            "address type 5",
            vec![5, 1, 0, 5, 127, 0, 0, 2, 1, 187],
            rep(8),
        ),
        (
            "reserved byte",
            vec![5, 1, 1, 1, 127, 0, 0, 2, 1, 187],
            rep(1),
        ),
        ("a name", name, rep(4)),
        (
            "version 4 request",
            vec![4, 1, 0, 1, 127, 0, 0, 2, 1, 187],
            vec![],
        ),
    ];
    for (i, (what, request, want)) in cases.iter().enumerate() {
        assert_eq!(raw_request(socks, request), *want, "{what}");
        assert!(
            wait_until(T, || closed_as(&proxy, "socks5-refused") == i + 1),
            "{what}: {}",
            proxy.dump()
        );
    }
    // A SOCKS4 client (or TLS, or HTTP) gets nothing at all.
    let mut c = TcpStream::connect(socks).expect("connect");
    c.set_read_timeout(Some(T)).unwrap();
    c.write_all(&[4, 1, 1, 187, 127, 0, 0, 2, 0]).unwrap();
    let mut got = Vec::new();
    c.read_to_end(&mut got).expect("closed");
    assert!(got.is_empty(), "{got:?}");
    // The proxy listener is untouched by all of it.
    assert!(wait_until(T, || closed_as(&proxy, "socks5-refused") == 7));
    assert!(TcpStream::connect(proxy.addr()).is_ok());
}

#[test]
fn a_dc_address_of_a_dc_without_a_route_gets_rep_03_before_any_success() {
    // 127.0.0.9 means DC 7: in the DC table (by --dc-addr) but no DC we have a route for.
    let (proxy, socks) = start(&["--dc-addr", "127.0.0.9=7"]);
    let request = [5, 1, 0, 1, 127, 0, 0, 9, 1, 187];
    assert_eq!(
        raw_request(socks, &request),
        rep(3),
        "REP 03, never REP 00 first"
    );
    assert!(
        wait_until(T, || closed_as(&proxy, "unknown-dc") == 1),
        "{}",
        proxy.dump()
    );
}

#[test]
fn a_direct_client_through_socks5_reaches_its_dc_with_the_init_pipelined() {
    let dc = FakeDc::start_tcp(DcConfig::default());
    let tcp_dc = format!("2:{}", dc.addr());
    let (proxy, socks) = start(&["--tier-order", "tcp", "--tcp-dc-ip", &tcp_dc]);
    let mut rng = Rng::new().expect("OS randomness");
    for tag in [Tag::Abridged, Tag::Intermediate] {
        let c = TcpStream::connect(socks).expect("connect");
        c.set_read_timeout(Some(T)).unwrap();
        // Greeting, CONNECT 127.0.0.2:443 and the direct init in one go, before any answer.
        (&c).write_all(&socks5::noauth_connect(socks5::dc2()))
            .unwrap();
        let mut s = MtSession::direct(&c, tag, 2, &mut rng);
        s.send_init().unwrap();
        let mut answers = [0u8; 12];
        (&c).read_exact(&mut answers)
            .expect("method choice and reply");
        assert_eq!(answers[..2], [5, 0]);
        assert_eq!(answers[2..], rep(0)[..], "REP 00");
        s.req_pq()
            .unwrap_or_else(|e| panic!("{tag:?}: {e}\n{}", proxy.dump()));
    }
    assert!(wait_until(T, || dc.inits() == 2), "{}", proxy.dump());
    assert_eq!(closed_as(&proxy, "socks5-refused"), 0);
}

/// The SOCKS5 listener's address from `proxy`'s `socks5 listener on ADDR` line.
fn socks_addr(proxy: &Proxy) -> SocketAddr {
    let line = proxy
        .wait_line(&["socks5 listener on "], T)
        .unwrap_or_else(|| panic!("no socks5 listener line: {}", proxy.dump()));
    line.rsplit("socks5 listener on ")
        .next()
        .and_then(|a| a.trim().parse().ok())
        .unwrap_or_else(|| panic!("no address in {line:?}"))
}

/// A direct client (`plain`: unobfuscated intermediate) whose greeting, CONNECT to DC 2's
/// address, init and `req_pq_multi` go in one write, before any answer: the request must reach
/// the DC intact behind the init and its `resPQ` come back.
fn pipelined_session(proxy: &Proxy, socks: SocketAddr, plain: bool, rng: &mut Rng) {
    let c = TcpStream::connect(socks).expect("connect");
    c.set_read_timeout(Some(T)).unwrap();
    let mut s = if plain {
        MtSession::plain(&c, Tag::Intermediate, rng)
    } else {
        MtSession::direct(&c, Tag::Intermediate, 2, rng)
    };
    let mut hello = socks5::noauth_connect(socks5::dc2());
    hello.extend_from_slice(s.init_bytes());
    let (req, nonce) = s.wire_req_pq();
    hello.extend_from_slice(&req);
    (&c).write_all(&hello).unwrap();
    let mut answers = [0u8; 12];
    (&c).read_exact(&mut answers)
        .unwrap_or_else(|e| panic!("plain={plain}: no answers: {e}\n{}", proxy.dump()));
    assert_eq!(answers[..2], [5, 0]);
    assert_eq!(answers[2..], rep(0)[..], "REP 00");
    s.expect_res_pq(&nonce)
        .unwrap_or_else(|e| panic!("plain={plain}: {e}\n{}", proxy.dump()));
}

#[test]
fn a_request_pipelined_behind_the_init_reaches_the_dc_on_every_tier() {
    let mut rng = Rng::new().expect("OS randomness");
    let dc_addr = format!("{DC2}=2");
    let base = ["--socks5", "127.0.0.1:0", "--dc-addr", dc_addr.as_str()];
    // tcp.
    let dc = FakeDc::start_tcp(DcConfig::default());
    let tcp_dc = format!("2:{}", dc.addr());
    let (proxy, socks) = start(&["--tier-order", "tcp", "--tcp-dc-ip", &tcp_dc]);
    for plain in [false, true] {
        pipelined_session(&proxy, socks, plain, &mut rng);
    }
    drop(proxy);
    // ws (Telegram's front), no pool.
    let ws = FakeDc::start_tls_ws(DcConfig::default());
    let ws_dc = format!("2:{}", ws.addr());
    let (proxy, socks) = start(&["--tier-order", "ws", "--dc-ip", &ws_dc, "--pool-size", "0"]);
    for plain in [false, true] {
        pipelined_session(&proxy, socks, plain, &mut rng);
    }
    assert_eq!(ws.upgrades(), 2, "both went over ws\n{}", proxy.dump());
    drop(proxy);
    // worker.
    let worker = FakeDc::start_worker(DcConfig::default());
    let mut args: Vec<String> = [
        "--tier-order",
        "worker",
        "--startup-probes",
        "off",
        "--pool-size",
        "0",
        "--tcp-dc-ip",
        &tcp_dc,
    ]
    .iter()
    .chain(base.iter())
    .map(|s| s.to_string())
    .collect();
    args.push("--cf-worker-domain".into());
    args.push(format!("w1.workers.dev:{}", worker.port()));
    let proxy = common::ladder_proxy(&["w1.workers.dev"], &args);
    let socks = socks_addr(&proxy);
    for plain in [false, true] {
        pipelined_session(&proxy, socks, plain, &mut rng);
    }
    assert_eq!(
        worker.upgrades(),
        2,
        "both went over the worker\n{}",
        proxy.dump()
    );
    drop(proxy);
    // mtproto: an upstream proxy of ours (tcp to the fake DC) behind the front.
    let up_secret = "fedcba9876543210fedcba9876543210";
    let up = Proxy::start(&[
        "--secret",
        up_secret,
        "--tcp-dc-ip",
        &tcp_dc,
        "--tier-order",
        "tcp",
        "--no-mask",
    ]);
    let chain = format!("127.0.0.1:{}:{up_secret}", up.port());
    let (proxy, socks) = start(&["--tier-order", "mtproto", "--mtproto-proxy", &chain]);
    for plain in [false, true] {
        pipelined_session(&proxy, socks, plain, &mut rng);
    }
    assert!(
        wait_until(T, || dc.inits() == 6),
        "tcp, worker and mtproto sessions: {}\n{}",
        dc.inits(),
        up.dump()
    );
}
