//! Warm pools under fire (issue 10, item 3): pooled upstreams that died without a sign (a NAT or
//! conntrack flush: established on our side, no RST, nothing ever comes back). A client that
//! takes one must not hang: after `--pool-first-byte-timeout` its request is replayed on a fresh
//! route and it only sees its answer; the dead entry's siblings are flushed; a request too large
//! to replay ends cleanly at the deadline.
mod common;

use std::io::{ErrorKind, Read, Write};
use std::time::{Duration, Instant};

use common::ctl::Ctl;
use common::fakedc::{DcConfig, DcHandle, FakeDc, Fault};
use common::mtsession::MtSession;
use common::socks5;
use common::{client_opts, wait_until, Proxy, SECRET};
use tg_ws_proxy::applet::probe::{probe_once, ClientOptions, MtClient, Outcome};
use tg_ws_proxy::mtproto::obfs2::Tag;
use tg_ws_proxy::mtproto::packet;
use tg_ws_proxy::rng::Rng;

/// `--pool-first-byte-timeout` of these tests.
const FIRST_BYTE: Duration = Duration::from_millis(1000);
/// What a retry may add on top of it on a loaded machine (a fresh dial over loopback).
const MARGIN: Duration = Duration::from_millis(2000);

fn start(ws: &DcHandle, extra: &[&str]) -> Proxy {
    let ws = format!("2:{}", ws.addr());
    let mut args = vec![
        "-v",
        "--secret",
        SECRET,
        "--dc-ip",
        &ws,
        "--pool-size",
        "2",
        "--pool-max-age",
        "30",
        "--pool-first-byte-timeout",
        "1s",
    ];
    args.extend_from_slice(extra);
    Proxy::start(&args)
}

/// Two sessions over the ws front: the route is proven, demand is 2, and two warm upstreams
/// wait in its pool.
fn warm(proxy: &Proxy, rng: &mut Rng) {
    let opts = client_opts(proxy.addr(), SECRET, Tag::Intermediate, 2);
    assert_eq!(probe_once(&opts, rng).outcome, Outcome::Ok);
    assert!(
        proxy
            .wait_event("pool_ready", Duration::from_secs(5), |_| true)
            .is_some(),
        "no fill\n{}",
        proxy.logs().join("\n")
    );
    assert_eq!(probe_once(&opts, rng).outcome, Outcome::Ok);
    assert!(proxy
        .wait_event("session", Duration::from_secs(5), |e| pooled(e, ""))
        .is_some());
    assert!(
        wait_until(Duration::from_secs(5), || proxy.events("pool_ready").len()
            >= 3),
        "pool not refilled to two\n{}",
        proxy.logs().join("\n")
    );
}

/// A proxy with `extra` over a fresh ws front, its pool warmed ([`warm`]), then the front's
/// live flows frozen: every pooled upstream is dead without a sign.
fn dead_pool(extra: &[&str]) -> (FakeDc, Proxy, Rng) {
    let dc = FakeDc::start_tls_ws(DcConfig::default());
    let proxy = start(&dc, extra);
    let mut rng = Rng::new().unwrap();
    warm(&proxy, &mut rng);
    dc.freeze_live();
    (dc, proxy, rng)
}

/// Client options that outwait the first-byte deadline (a 10 s client timeout).
fn patient_opts(proxy: &Proxy) -> ClientOptions {
    let mut opts = client_opts(proxy.addr(), SECRET, Tag::Intermediate, 2);
    opts.timeout = Duration::from_secs(10);
    opts
}

/// `got` is the end of a session on a frozen front: an error, and not the client's own
/// timeout (the proxy closed it; it did not hang).
fn assert_ended_not_hung(got: std::io::Result<Vec<u8>>, logs: impl Fn() -> String) {
    let err = got.expect_err("a frozen front never answers");
    assert_ne!(
        err.kind(),
        ErrorKind::TimedOut,
        "hung past the deadline\n{}",
        logs()
    );
}

/// The session record `e` is of a session served from a warm pool, its target ending with
/// `suffix` (`""`: ` (pooled)`; `", retried"`: replayed on a fresh route after a silent one).
fn pooled(e: &serde_json::Value, suffix: &str) -> bool {
    let want = format!(" (pooled{suffix})");
    e["target"].as_str().is_some_and(|t| t.ends_with(&want))
}

/// The proxy replayed a request on a fresh route (a `replay` event) within 3 s.
fn assert_replayed(proxy: &Proxy) {
    assert!(
        proxy
            .wait_event("replay", Duration::from_secs(3), |_| true)
            .is_some(),
        "no replay\n{}",
        proxy.dump()
    );
}

/// One `req_pq_multi` → `resPQ` exchange; its outcome and how long it took.
fn timed_probe(proxy: &Proxy, rng: &mut Rng) -> (Outcome, Duration, String) {
    let opts = client_opts(proxy.addr(), SECRET, Tag::Intermediate, 2);
    let t = Instant::now();
    let a = probe_once(&opts, rng);
    (a.outcome, t.elapsed(), a.detail)
}

/// A [`timed_probe`] that must get its `resPQ` within the first-byte deadline plus a retry's
/// [`MARGIN`]; how long it took.
fn replayed_probe(proxy: &Proxy, rng: &mut Rng) -> Duration {
    let (outcome, took, detail) = timed_probe(proxy, rng);
    let logs = || proxy.logs().join("\n");
    assert_eq!(outcome, Outcome::Ok, "{detail}\n{}", logs());
    assert!(
        took < FIRST_BYTE + MARGIN,
        "resPQ after {took:?}\n{}",
        logs()
    );
    took
}

#[test]
fn dead_pooled_upstream_is_retried_on_a_fresh_route() {
    let ctl = Ctl::new();
    let [c0, c1] = ctl.args();
    let (dc, proxy, mut rng) = dead_pool(&["--tier-order", "ws", &c0, &c1]);
    let took = replayed_probe(&proxy, &mut rng);
    let logs = || proxy.logs().join("\n");
    // It did go to the dead pooled upstream first, and waited for it no longer than the flag.
    assert!(
        took >= FIRST_BYTE,
        "answered in {took:?}: not via the pool?"
    );
    assert!(
        dc.frozen_reads() >= 2,
        "the dead one got the init and the request"
    );
    assert_replayed(&proxy);
    // Its sibling, as old, was flushed with it.
    let flush = proxy.wait_event("pool_flushed", Duration::from_secs(3), |e| {
        e["label"]
            .as_str()
            .is_some_and(|l| l.starts_with("ws:DC2 "))
    });
    let flush = flush.unwrap_or_else(|| panic!("no pool flush\n{}", logs()));
    assert_eq!(flush["flushed"], 1, "{flush}");
    let retried = |st: &serde_json::Value| st["counters"]["pool_retries"] == 1;
    assert!(
        ctl.wait(&proxy, Duration::from_secs(3), retried).is_some(),
        "{}\n{}",
        ctl.status(&proxy),
        logs()
    );
    // The route was doubted, re-proven, and serves the next client at once.
    let (outcome, took, detail) = timed_probe(&proxy, &mut rng);
    assert_eq!(outcome, Outcome::Ok, "{detail}");
    assert!(took < FIRST_BYTE, "{took:?}");
}

#[test]
fn dead_pooled_upstream_of_a_route_gone_bad_is_retried_on_the_next_tier() {
    let ws = FakeDc::start_tls_ws(DcConfig::default());
    let tcp = FakeDc::start_tcp(DcConfig::default());
    let tcp_dc = format!("2:{}", tcp.addr());
    let proxy = start(&ws, &["--tier-order", "ws,tcp", "--tcp-dc-ip", &tcp_dc]);
    let mut rng = Rng::new().unwrap();
    warm(&proxy, &mut rng);
    let tcp_before = tcp.inits();
    // The flows die, and the front takes no new connection either.
    ws.freeze_live();
    ws.set_fault(Fault::Refuse);
    replayed_probe(&proxy, &mut rng);
    let logs = || proxy.logs().join("\n");
    assert_eq!(tcp.inits(), tcp_before + 1, "the replay went over tcp");
    let retried = proxy
        .wait_event("session", Duration::from_secs(3), |e| {
            pooled(e, ", retried")
        })
        .unwrap_or_else(|| panic!("no replayed session\n{}", logs()));
    assert_eq!(retried["tier"], "tcp", "{retried}");
}

#[test]
fn a_request_too_large_to_replay_ends_cleanly_at_the_deadline() {
    // 4 KiB relay buffers bound the replay prefix; the client sends 6 KB before any answer.
    let (_dc, mut proxy, mut rng) = dead_pool(&["--tier-order", "ws", "--buf-kb", "4"]);
    let opts = patient_opts(&proxy);
    let t = Instant::now();
    let mut big = MtClient::connect(&opts).unwrap();
    big.send_packet(&vec![7u8; 6000]).unwrap();
    // Another client meanwhile takes the dead sibling: its small request is replayed.
    let (outcome, _, detail) = timed_probe(&proxy, &mut rng);
    assert_eq!(
        outcome,
        Outcome::Ok,
        "{detail}\n{}",
        proxy.logs().join("\n")
    );
    let got = big.recv_packet_until(t + FIRST_BYTE + MARGIN);
    let took = t.elapsed();
    let logs = || proxy.logs().join("\n");
    assert_ended_not_hung(got, logs);
    assert!(
        took >= FIRST_BYTE,
        "closed after {took:?}, before the deadline"
    );
    // Closed as silent, not replayed (the request was too large to keep).
    let silent = proxy
        .wait_session_reason("upstream-silent", Duration::from_secs(3))
        .unwrap_or_else(|| panic!("no upstream-silent close\n{}", logs()));
    assert!(pooled(&silent, ""), "{silent}");
    let replays = proxy.events("replay");
    assert!(
        replays.iter().all(|r| r["peer"] != silent["peer"]),
        "{replays:?}\n{}",
        logs()
    );
    // The proxy carries on.
    assert_eq!(timed_probe(&proxy, &mut rng).0, Outcome::Ok);
    assert!(proxy.try_wait().is_none(), "the proxy exited");
}

#[test]
fn a_request_too_large_to_replay_waits_from_its_last_bytes_then_ends() {
    // A large request still going out (a slow uplink sends it in parts) says nothing against
    // the upstream: the deadline counts from the last bytes it took, and it still fires.
    let (dc, proxy, _) = dead_pool(&["--tier-order", "ws", "--buf-kb", "4"]);
    let opts = patient_opts(&proxy);
    let mut big = MtClient::connect(&opts).unwrap();
    big.send_packet(&vec![7u8; 6000]).unwrap();
    let first = Instant::now();
    // The second part, well inside the deadline of the first: once the frozen front has read
    // the first one (init, then the part).
    assert!(
        wait_until(Duration::from_secs(5), || dc.frozen_reads() >= 2),
        "the dead one never got the first part"
    );
    std::thread::sleep(FIRST_BYTE / 2);
    big.send_packet(&vec![8u8; 6000]).unwrap();
    let second = Instant::now();
    assert!(second < first + FIRST_BYTE, "the test was too slow to tell");
    let got = big.recv_packet_until(second + FIRST_BYTE + MARGIN);
    let closed = Instant::now();
    let logs = || proxy.logs().join("\n");
    assert_ended_not_hung(got, logs);
    // The proxy's clock counts in whole ms and its wheel in 10 ms ticks.
    assert!(
        closed + Duration::from_millis(20) >= second + FIRST_BYTE,
        "closed {:?} after the last part, before the deadline\n{}",
        closed - second,
        logs()
    );
    let silent = proxy.wait_session_reason("upstream-silent", Duration::from_secs(3));
    assert!(
        silent.is_some(),
        "no upstream-silent close\n{}",
        proxy.dump()
    );
}

#[test]
fn a_half_closed_client_on_a_dead_pooled_upstream_is_replayed_not_lingered_out() {
    // The client asks and half-closes at once. The linger that bounds the other side's flush
    // (here as long as the first-byte deadline, as at the defaults) must not close the session
    // before the deadline can replay the request on a fresh route.
    let (_dc, proxy, _) = dead_pool(&["--tier-order", "ws", "--close-linger", "1s"]);
    let opts = patient_opts(&proxy);
    let t = Instant::now();
    let mut c = MtClient::connect(&opts).unwrap();
    let nonce = [0x29; 16];
    let req = packet::req_pq_multi(&nonce, packet::msg_id(1_700_000_000_000));
    c.send_packet(&req).unwrap();
    c.shutdown_write().unwrap();
    let logs = || proxy.logs().join("\n");
    let reply = c
        .recv_packet_until(t + FIRST_BYTE + MARGIN)
        .unwrap_or_else(|e| {
            proxy.wait_event("session", Duration::from_secs(3), |_| true);
            panic!("no reply after {:?}: {e}\n{}", t.elapsed(), logs())
        });
    packet::parse_res_pq(&reply, &nonce).expect("resPQ for our nonce");
    assert_replayed(&proxy);
}

#[test]
fn a_replayed_request_does_not_carry_the_dead_upstreams_wait_into_a_stall_of_the_fresh_route() {
    // The client asked twice on the dead pooled upstream; the fresh route that gets the replay
    // answers a second later. The silence before the rewind was the dead upstream's: the fresh
    // route must not be put down as stalled for it.
    let ws = FakeDc::start_tls_ws(DcConfig::default());
    let tcp = FakeDc::start_tcp(DcConfig::default());
    let tcp_dc = format!("2:{}", tcp.addr());
    let proxy = start(
        &ws,
        &[
            "--tier-order",
            "ws,tcp",
            "--tcp-dc-ip",
            &tcp_dc,
            "--stall-timeout",
            "1.5",
        ],
    );
    let mut rng = Rng::new().unwrap();
    warm(&proxy, &mut rng);
    ws.freeze_live();
    ws.set_fault(Fault::Refuse);
    tcp.set_delay(Duration::from_millis(1000));
    let logs = || proxy.logs().join("\n");
    let opts = client_opts(proxy.addr(), SECRET, Tag::Intermediate, 2);
    let mut c = MtClient::connect_with(&opts, &mut rng).expect("connect");
    c.send_packet(&[0x41; 64]).expect("send");
    wait_until(Duration::from_millis(100), || false);
    c.send_packet(&[0x42; 64]).expect("send");
    for i in 0..2 {
        c.recv_packet_until(Instant::now() + Duration::from_secs(5))
            .unwrap_or_else(|e| panic!("echo {i}: {e}\n{}", logs()));
    }
    assert_eq!(proxy.events("replay").len(), 1, "{}", logs());
    let stalled = proxy.events("route").into_iter();
    let stalled: Vec<_> = stalled.filter(|e| e["failure"] == "stalled").collect();
    assert!(stalled.is_empty(), "{stalled:?}\n{}", logs());
}

#[test]
fn a_direct_client_on_a_dead_pooled_upstream_is_replayed() {
    // A direct client (SOCKS5, no secret) takes a dead pooled upstream: its pass-through relay
    // keeps no replay, so a pooled start must fall back to re-encryption (`Relay::reencrypt`)
    // for its request to be replayed on a fresh route like a proxy client's. The greeting, the
    // CONNECT, the init and the request go in one write (the request pipelined past the init).
    direct_on_a_dead_pool(false);
}

#[test]
fn a_plain_client_on_a_dead_pooled_upstream_is_replayed() {
    // The same for a plain (unobfuscated) transport: no client cipher, and still a replay.
    direct_on_a_dead_pool(true);
}

/// A SOCKS5 client with a direct (`plain`: unobfuscated) transport on a dead pool: its
/// pipelined `req_pq_multi` is answered through a replay on a fresh route.
fn direct_on_a_dead_pool(plain: bool) {
    let dc = FakeDc::start_tls_ws(DcConfig::default());
    let proxy = start(
        &dc,
        &[
            "--tier-order",
            "ws",
            "--socks5",
            "127.0.0.1:0",
            "--dc-addr",
            "127.0.0.2=2",
        ],
    );
    let line = proxy
        .wait_line(&["socks5 listener on "], Duration::from_secs(5))
        .unwrap_or_else(|| panic!("no socks5 listener line: {}", proxy.dump()));
    let socks: std::net::SocketAddr = line
        .rsplit("socks5 listener on ")
        .next()
        .and_then(|a| a.trim().parse().ok())
        .unwrap_or_else(|| panic!("no address in {line:?}"));
    let mut rng = Rng::new().unwrap();
    warm(&proxy, &mut rng);
    dc.freeze_live();
    let t = Instant::now();
    let c = std::net::TcpStream::connect(socks).expect("connect");
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut s = if plain {
        MtSession::plain(&c, Tag::Intermediate, &mut rng)
    } else {
        MtSession::direct(&c, Tag::Intermediate, 2, &mut rng)
    };
    let mut hello = socks5::noauth_connect(socks5::dc2());
    hello.extend_from_slice(s.init_bytes());
    let (req, nonce) = s.wire_req_pq();
    hello.extend_from_slice(&req);
    (&c).write_all(&hello).unwrap();
    let mut answers = [0u8; 12];
    (&c).read_exact(&mut answers)
        .expect("method choice and reply");
    assert_eq!(answers[..3], [5, 0, 5], "{answers:?}");
    assert_eq!(answers[3], 0, "REP 00: {answers:?}");
    let logs = || proxy.logs().join("\n");
    s.expect_res_pq(&nonce)
        .unwrap_or_else(|e| panic!("after {:?}: {e}\n{}", t.elapsed(), logs()));
    assert!(
        dc.frozen_reads() >= 1,
        "the dead pooled upstream was not taken"
    );
    assert_replayed(&proxy);
}
