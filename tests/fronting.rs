//! Black-box tests of domain fronting, the `front` tier (`--fronting-domain`, docs/design.md §4
//! "Domain fronting", docs/protocol.md §4.6): a fake WS front whose certificate covers only the
//! fronting name (tests/data/mask.pem, `mask.example.org`) makes the direct `ws` route fail at
//! TLS (its `kws2.web.telegram.org` SNI is not covered); the session then goes over `front`
//! with SNI = the fronting name and `Host: kws2.web.telegram.org`, both asserted as the fake
//! saw them, and `resPQ` comes back. An SNI-filtering "DPI box" (a loopback relay that reads
//! the plain-text SNI of the ClientHello) stalls or resets the `kwsN` handshakes and passes the
//! fronted one: `handshake-timeout` and `reset` are fronted too. A fronting name the
//! certificate does not cover is refused (verification is never off for fronting). A direct
//! route failing at TCP connect (a black hole, a refused port) never plans fronting. `check`
//! lists the front routes with their verdict and `ctl status` shows them. A front route is
//! probed at start and pooled once hot; a reload adding `fronting-domain` fronts new sessions;
//! through `--outbound-proxy` (microsocks, tinyproxy) the fronted TLS keeps its SNI and Host.
//!
//! Owns only this file; the rig is tests/common. Loopback only, no name is ever resolved (the
//! fronting name is only an SNI; the front is dialled by its `--dc-ip` address). No fixed
//! sleeps: waits are on log lines and counters with deadlines.

mod common;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::time::Duration;

use common::blackhole::BlackHole;
use common::ctl::Ctl;
use common::fakedc::{DcConfig, FakeDc};
use common::{
    client_opts, closed_port, data_path, os_rng, run_bin, temp_dir, wait_until, Proxy, SECRET,
};
use tg_ws_proxy::applet::probe::{probe_once, Attempt, Outcome};
use tg_ws_proxy::mtproto::obfs2::Tag;

/// Bound on waits for a condition that should hold almost at once.
const WAIT: Duration = Duration::from_secs(5);
/// The fronting name: the only name the fake front's certificate covers.
const FRONTING: &str = "mask.example.org";
/// The Host a DC 2 (non-media) session sends.
const KWS2: &str = "kws2.web.telegram.org";
/// tests/data/mask.pem and its key (SAN `mask.example.org` only, signed by the test CA).
const FRONT_PEM: &[u8] = include_bytes!("data/mask.pem");
const FRONT_KEY: &[u8] = include_bytes!("data/mask.key");

fn s(v: &str) -> String {
    v.to_string()
}

/// A proxy with the rig's compressed-time ladder flags, then `extra`.
fn proxy(extra: &[String]) -> Proxy {
    common::ladder_proxy(&[], extra)
}

/// Waits for the route labelled `prefix …` to go down for `failure` (→ the event).
fn down_for(p: &Proxy, prefix: &str, failure: &str) -> serde_json::Value {
    p.wait_route_down(prefix, Some(failure), WAIT)
        .unwrap_or_else(|| panic!("{prefix} did not go down for {failure}\n{}", p.dump()))
}

/// The attempts counters of `tier` in `ctl status --json` (`started`, `ok`, …).
fn attempts(v: &serde_json::Value, tier: &str) -> serde_json::Value {
    v["counters"]["attempts"][tier].clone()
}

fn probe(p: &Proxy, dc: i16) -> Attempt {
    probe_once(
        &client_opts(p.addr(), SECRET, Tag::Intermediate, dc),
        &mut os_rng(),
    )
}

#[test]
fn a_direct_front_failing_at_tls_sends_the_session_over_the_fronting_sni() {
    let front = FakeDc::start_tls_ws_with_cert(DcConfig::default(), FRONT_PEM, FRONT_KEY);
    let ctl = Ctl::new();
    let [_, sock] = ctl.args();
    let sock = sock.as_str();
    let p = proxy(&[
        s("--dc-ip"),
        format!("2:{}", front.addr()),
        s("--fronting-domain"),
        s(FRONTING),
        s("--tier-order"),
        s("ws,front"),
        s("--control-socket"),
        s(sock),
    ]);
    // The startup line an operator reads: the fronting name in use.
    assert!(
        p.wait_log(&format!("fronting: SNI [{FRONTING}]"), WAIT),
        "{}",
        p.dump()
    );
    // The first client: the direct route is untested, so its plan has no fronting; its ws
    // attempts fail at TLS (the certificate does not cover kws2… nor kws2-1…), which makes
    // fronting plannable, and the same connect goes on over the front route: resPQ.
    let first = probe(&p, 2);
    assert_eq!(first.outcome, Outcome::Ok, "{first:?}\n{}", p.dump());
    let down = down_for(&p, "ws:DC2", "tls-error");
    assert!(!down["label"].to_string().contains(FRONTING), "{down}");
    assert!(
        p.route_events("front:DC2", "down").is_empty(),
        "{}",
        p.dump()
    );
    let direct = front.failed_snis();
    assert_eq!(
        direct,
        vec![s(KWS2), s("kws2-1.web.telegram.org")],
        "the direct attempts came first, with their own SNI"
    );
    assert_eq!(front.snis(), vec![s(FRONTING)], "SNI = the fronting name");
    assert_eq!(front.hosts(), vec![s(KWS2)], "Host stays kwsN");
    assert_eq!(front.paths(), vec!["/apiws"]);
    assert_eq!(front.init_dcs(), vec![(Tag::Intermediate, 2)]);

    // The next client's plan goes straight to the front route (ws is down after a TLS
    // failure): no direct attempt this time.
    let a = probe(&p, 2);
    assert_eq!(a.outcome, Outcome::Ok, "{a:?}\n{}", p.dump());
    assert_eq!(front.failed_snis(), direct, "no second direct attempt");
    assert_eq!(front.snis(), vec![s(FRONTING), s(FRONTING)]);
    assert_eq!(front.hosts(), vec![s(KWS2), s(KWS2)]);
    assert_eq!(
        front.init_dcs(),
        vec![(Tag::Intermediate, 2), (Tag::Intermediate, 2)]
    );
    let session = p
        .wait_event("session", WAIT, |e| e["tier"] == "front")
        .unwrap_or_else(|| panic!("no session via front\n{}", p.dump()));
    assert!(
        session["target"]
            .as_str()
            .is_some_and(|t| t.contains(&format!("{FRONTING}/{KWS2}@{}", front.addr()))),
        "{session}"
    );
    // Counted per tier.
    let v = ctl.status(&p);
    let front_attempts = attempts(&v, "front");
    assert!(
        front_attempts["started"].as_u64() >= Some(1) && front_attempts["ok"].as_u64() >= Some(1),
        "{v}"
    );
    // `ctl status` shows the front route up and the direct one down for its TLS failure.
    let r = run_bin(
        &["ctl", "status", "--control-socket", sock],
        &[],
        Duration::from_secs(10),
    );
    assert_eq!(r.code, Some(0), "{r:?}");
    let row = |needle: &str| {
        r.stdout
            .lines()
            .find(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("no {needle} row:\n{}", r.stdout))
            .to_string()
    };
    let fr = row(&format!("front:DC2 {FRONTING}/{KWS2}@"));
    assert!(fr.contains(" up "), "{fr}\n{}", r.stdout);
    let ws = row("ws:DC2 kws2");
    assert!(
        ws.contains("down") && ws.contains("tls-error"),
        "{ws}\n{}",
        r.stdout
    );
}

/// What the [`SniFilter`] does to a connection whose ClientHello names the blocked SNI.
#[derive(Clone, Copy)]
enum Block {
    /// Swallow it: never forward, never answer, never close (a handshake that stalls).
    Stall,
    /// Reset the connection (SO_LINGER 0, then close): a DPI box's RST.
    Reset,
}

/// A DPI box on 127.0.0.1 in front of `upstream`: TCP is accepted; a connection whose first
/// bytes (the TLS ClientHello, where the SNI is plain text) contain `blocked` gets `block`,
/// any other is piped to `upstream` both ways. Test code: a thread per connection, detached.
struct SniFilter {
    addr: std::net::SocketAddr,
}

impl SniFilter {
    fn start(upstream: std::net::SocketAddr, blocked: &'static str, block: Block) -> SniFilter {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let addr = l.local_addr().expect("local_addr");
        std::thread::spawn(move || {
            for c in l.incoming().flatten() {
                std::thread::spawn(move || filter(c, upstream, blocked, block));
            }
        });
        SniFilter { addr }
    }
}

fn filter(mut c: TcpStream, upstream: std::net::SocketAddr, blocked: &str, block: Block) {
    let mut hello = vec![0u8; 4096];
    let _ = c.set_read_timeout(Some(WAIT));
    let Ok(n) = c.read(&mut hello) else { return };
    hello.truncate(n);
    if hello
        .windows(blocked.len())
        .any(|w| w == blocked.as_bytes())
    {
        match block {
            Block::Stall => {
                // Hold the socket open and silent until the peer gives up.
                let _ = c.set_read_timeout(None);
                let mut sink = [0u8; 1024];
                while matches!(c.read(&mut sink), Ok(n) if n > 0) {}
            }
            Block::Reset => {
                let _ = socket2::SockRef::from(&c).set_linger(Some(Duration::ZERO));
            }
        }
        return;
    }
    let Ok(mut up) = TcpStream::connect(upstream) else {
        return;
    };
    let _ = c.set_read_timeout(None);
    if up.write_all(&hello).is_err() {
        return;
    }
    let (Ok(mut c2), Ok(mut up2)) = (c.try_clone(), up.try_clone()) else {
        return;
    };
    let t = std::thread::spawn(move || {
        let _ = std::io::copy(&mut up2, &mut c2);
        let _ = c2.shutdown(Shutdown::Write);
    });
    let _ = std::io::copy(&mut c, &mut up);
    let _ = up.shutdown(Shutdown::Write);
    let _ = t.join();
}

/// Behind a DPI box that blocks the `kwsN.web.telegram.org` SNIs (`block`), the direct route fails after TCP
/// connected with `class`; the next session goes over `front` through the same box.
fn blocked_sni_is_fronted(block: Block, class: &str) {
    let front = FakeDc::start_tls_ws_with_cert(DcConfig::default(), FRONT_PEM, FRONT_KEY);
    let dpi = SniFilter::start(front.addr(), "web.telegram.org", block);
    let p = proxy(&[
        s("--dc-ip"),
        format!("2:{}", dpi.addr),
        s("--fronting-domain"),
        s(FRONTING),
        s("--tier-order"),
        s("ws,front"),
    ]);
    // The first client's direct attempt is blocked; the same connect goes on over front.
    let a = probe(&p, 2);
    assert_eq!(a.outcome, Outcome::Ok, "{a:?}\n{}", p.dump());
    down_for(&p, "ws:DC2", class);
    assert!(front.failed_snis().is_empty(), "{:?}", front.failed_snis());
    assert_eq!(front.snis(), vec![s(FRONTING)]);
    assert_eq!(front.hosts(), vec![s(KWS2)]);
    assert_eq!(front.init_dcs(), vec![(Tag::Intermediate, 2)]);
    // The next one goes straight to front.
    let b = probe(&p, 2);
    assert_eq!(b.outcome, Outcome::Ok, "{b:?}\n{}", p.dump());
    assert_eq!(front.snis(), vec![s(FRONTING), s(FRONTING)]);
}

#[test]
fn a_stalled_tls_handshake_is_a_handshake_timeout_and_is_fronted() {
    blocked_sni_is_fronted(Block::Stall, "handshake-timeout");
}

#[test]
fn a_reset_at_the_client_hello_is_fronted() {
    blocked_sni_is_fronted(Block::Reset, "reset");
}

#[test]
fn a_front_whose_certificate_does_not_cover_the_fronting_name_is_refused() {
    // The front's certificate covers neither kws2… nor the configured fronting name: the
    // fronted dial verifies against the fronting name and refuses the certificate like the
    // direct one (verification is never switched off for fronting); nothing is relayed.
    let front = FakeDc::start_tls_ws_with_cert(DcConfig::default(), FRONT_PEM, FRONT_KEY);
    let p = proxy(&[
        s("--dc-ip"),
        format!("2:{}", front.addr()),
        s("--fronting-domain"),
        s("other.example.org"),
        s("--tier-order"),
        s("ws,front"),
    ]);
    let _ = probe(&p, 2);
    down_for(&p, "ws:DC2", "tls-error");
    let a = probe(&p, 2);
    assert_ne!(a.outcome, Outcome::Ok, "{a:?}\n{}", p.dump());
    down_for(&p, "front:DC2", "tls-error");
    assert!(front.snis().is_empty(), "{:?}", front.snis());
    assert!(
        front.failed_snis().iter().any(|n| n == "other.example.org"),
        "{:?}",
        front.failed_snis()
    );
    assert!(front.init_dcs().is_empty());
}

/// A ws route that fails at TCP connect (`addr`), a fronting name, and a working tcp tier:
/// the first client is served by tcp after the ws attempt fails with `class`, and so is the
/// second, with the ws route down: fronting is never planned (no front attempt counted, no
/// front attempt logged).
fn tcp_level_failure_never_plans_fronting(addr: std::net::SocketAddr, class: &str) {
    let tcp = FakeDc::start_tcp(DcConfig::default());
    let ctl = Ctl::new();
    let [c0, c1] = ctl.args();
    let p = proxy(&[
        c0,
        c1,
        s("--dc-ip"),
        format!("2:{addr}"),
        s("--tcp-dc-ip"),
        format!("2:{}", tcp.addr()),
        s("--fronting-domain"),
        s(FRONTING),
        s("--tier-order"),
        s("ws,front,tcp"),
    ]);
    let a = probe(&p, 2);
    assert_eq!(a.outcome, Outcome::Ok, "{a:?}\n{}", p.dump());
    down_for(&p, "ws:DC2", class);
    let b = probe(&p, 2);
    assert_eq!(b.outcome, Outcome::Ok, "{b:?}\n{}", p.dump());
    assert!(
        wait_until(WAIT, || tcp.init_dcs().len() == 2),
        "{:?}",
        tcp.init_dcs()
    );
    assert!(
        wait_until(WAIT, || p
            .sessions()
            .iter()
            .filter(|e| e["tier"] == "tcp")
            .count()
            == 2),
        "{:?}\n{}",
        p.sessions(),
        p.dump()
    );
    let v = ctl.status(&p);
    assert!(attempts(&v, "tcp")["ok"].as_u64() >= Some(2), "{v}");
    assert_eq!(
        attempts(&v, "front")["started"],
        0,
        "fronting was planned: {v}"
    );
    let fronted: Vec<_> = ["route", "attempt", "pool_ready"]
        .iter()
        .flat_map(|k| p.events(k))
        .filter(|e| e["label"].as_str().is_some_and(|l| l.starts_with("front:")))
        .collect();
    assert!(fronted.is_empty(), "{fronted:?}");
}

#[test]
fn a_black_holed_direct_front_never_plans_fronting() {
    let hole = BlackHole::new();
    tcp_level_failure_never_plans_fronting(hole.addr(), "timeout");
}

#[test]
fn a_refused_direct_front_never_plans_fronting() {
    tcp_level_failure_never_plans_fronting(closed_port(), "refused");
}

#[test]
fn check_lists_front_routes_with_their_verdict() {
    let front = FakeDc::start_tls_ws_with_cert(DcConfig::default(), FRONT_PEM, FRONT_KEY);
    let ca = data_path("ca.pem").display().to_string();
    let dc_ip = format!("2:{}", front.addr());
    let r = run_bin(
        &[
            "check",
            "--dc",
            "2",
            "--ca-file",
            &ca,
            "--dc-ip",
            &dc_ip,
            "--fronting-domain",
            FRONTING,
            "--tier-order",
            "ws,front",
            "--probe-timeout",
            "2",
        ],
        &[],
        Duration::from_secs(30),
    );
    assert_eq!(
        r.code,
        Some(0),
        "stdout:\n{}\nstderr:\n{}",
        r.stdout,
        r.stderr
    );
    let rows = |route: &str| -> Vec<&str> {
        r.stdout
            .lines()
            .filter(|l| l.split_whitespace().nth(1) == Some(route))
            .collect()
    };
    // Two kws names per media flag, for both tiers; ws refused at TLS, front OK.
    for dc in ["DC2", "DC2m"] {
        let ws = rows(&format!("ws:{dc}"));
        let fr = rows(&format!("front:{dc}"));
        assert_eq!((ws.len(), fr.len()), (2, 2), "{}", r.stdout);
        for l in ws {
            assert_eq!(l.split_whitespace().nth(3), Some("tls-error"), "{l}");
        }
        for l in fr {
            assert!(l.contains(&format!("{FRONTING}/kws2")), "{l}");
            assert_eq!(l.split_whitespace().nth(3), Some("OK"), "{l}");
        }
    }
    assert!(
        r.stdout
            .lines()
            .any(|l| l.starts_with("DC2 ") && l.contains("ok via front")),
        "{}",
        r.stdout
    );
    let mut hosts = front.hosts();
    hosts.sort();
    hosts.dedup();
    assert_eq!(hosts, vec![s("kws2-1.web.telegram.org"), s(KWS2)]);
    assert!(
        front.snis().iter().all(|n| n == FRONTING),
        "{:?}",
        front.snis()
    );
}

#[test]
fn a_hot_front_route_is_probed_at_start_and_pooled() {
    let front = FakeDc::start_tls_ws_with_cert(DcConfig::default(), FRONT_PEM, FRONT_KEY);
    let p = proxy(&[
        s("--dc-ip"),
        format!("2:{}", front.addr()),
        s("--fronting-domain"),
        s(FRONTING),
        s("--tier-order"),
        s("ws,front"),
        s("--startup-probes"),
        s("on"),
        s("--pool-size"),
        s("2"),
        s("--pool-max-age"),
        s("30"),
    ]);
    // Startup probes: the ws route fails at TLS, the front route is proven to resPQ before any
    // client came (probed always once configured).
    assert!(
        p.wait_route_up("front:DC2", Some("probe"), WAIT).is_some(),
        "{}",
        p.dump()
    );
    down_for(&p, "ws:DC2", "tls-error");
    // A session makes it hot: a warm fronted upstream follows, and the next client takes it.
    // (The fill may finish before the session's own close: wait on its event, not on a
    // count of the front's upgrades read after the session.)
    let before = front.upgrades();
    assert_eq!(probe(&p, 2).outcome, Outcome::Ok, "{}", p.dump());
    assert!(
        p.wait_event("pool_ready", WAIT, |e| e["label"]
            .as_str()
            .is_some_and(|l| l.starts_with("front:DC2 ")))
            .is_some(),
        "no pool fill of the front route\n{}",
        p.dump()
    );
    assert!(
        front.upgrades() >= before + 2,
        "session + fill reached the front"
    );
    let a = probe(&p, 2);
    assert_eq!(a.outcome, Outcome::Ok, "{a:?}\n{}", p.dump());
    let pooled = p
        .wait_event("session", WAIT, |e| {
            e["tier"] == "front"
                && e["target"]
                    .as_str()
                    .is_some_and(|t| t.ends_with(" (pooled)"))
        })
        .unwrap_or_else(|| panic!("the next client did not take the pool\n{}", p.dump()));
    assert!(pooled["target"].to_string().contains(FRONTING), "{pooled}");
    assert!(
        front.snis().iter().all(|n| n == FRONTING),
        "every fronted TLS (probe, session, fill) sent the fronting name: {:?}",
        front.snis()
    );
}

#[test]
fn a_reload_adding_a_fronting_domain_fronts_new_sessions() {
    let front = FakeDc::start_tls_ws_with_cert(DcConfig::default(), FRONT_PEM, FRONT_KEY);
    let config = temp_dir().join("proxy.conf");
    let ctl = Ctl::new();
    std::fs::write(&config, "# no fronting yet\n").expect("write config");
    let [c0, c1] = ctl.args();
    let p = proxy(&[
        c0,
        c1,
        s("--config"),
        config.display().to_string(),
        s("--dc-ip"),
        format!("2:{}", front.addr()),
        s("--tier-order"),
        s("ws,front"),
    ]);
    // Without a fronting name the TLS-blocked direct route is all there is.
    let a = probe(&p, 2);
    assert_ne!(a.outcome, Outcome::Ok, "{a:?}\n{}", p.dump());
    assert!(front.snis().is_empty(), "{:?}", front.snis());
    std::fs::write(&config, format!("fronting-domain {FRONTING}\n")).expect("write config");
    common::signals::signal(&p, libc::SIGHUP);
    assert!(
        wait_until(WAIT, || ctl.status(&p)["reloads"]["applied"] == 1),
        "{}",
        p.dump()
    );
    let b = probe(&p, 2);
    assert_eq!(b.outcome, Outcome::Ok, "{b:?}\n{}", p.dump());
    assert_eq!(front.snis(), vec![s(FRONTING)]);
    assert_eq!(front.hosts(), vec![s(KWS2)]);
}

/// The TLS after the outbound proxy's stage still carries SNI = the fronting name, Host = kwsN.
fn front_through(out: &common::outproxy::OutProxy, front: &FakeDc) {
    let p = proxy(&[
        s("--dc-ip"),
        format!("2:{}", front.addr()),
        s("--fronting-domain"),
        s(FRONTING),
        s("--tier-order"),
        s("front"),
        s("--outbound-proxy"),
        out.url(),
    ]);
    let a = probe(&p, 2);
    assert_eq!(
        a.outcome,
        Outcome::Ok,
        "{a:?}\n{}\noutbound proxy:\n{}",
        p.dump(),
        out.dump()
    );
    let snis = front.snis();
    assert!(
        !snis.is_empty() && snis.iter().all(|n| n == FRONTING),
        "{snis:?}"
    );
    assert!(front.hosts().contains(&s(KWS2)), "{:?}", front.hosts());
    assert!(
        out.wait_connects(front.port(), 1, WAIT),
        "the front route did not go through the outbound proxy:\n{}",
        out.dump()
    );
}

#[test]
fn a_front_route_through_a_socks5_outbound_proxy_keeps_the_fronting_sni() {
    let front = FakeDc::start_tls_ws_with_cert(DcConfig::default(), FRONT_PEM, FRONT_KEY);
    front_through(&common::outproxy::OutProxy::microsocks(None), &front);
}

#[test]
fn a_front_route_through_an_http_connect_proxy_keeps_the_fronting_sni() {
    let front = FakeDc::start_tls_ws_with_cert(DcConfig::default(), FRONT_PEM, FRONT_KEY);
    front_through(
        &common::outproxy::OutProxy::tinyproxy(&[front.port()], None),
        &front,
    );
}
