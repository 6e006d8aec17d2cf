//! Reviewer's regression tests for engine defects (docs/design.md §4, §6). Each test is named after
//! the defect it pinned; the defects are fixed and the tests keep them fixed.
//!
//! Owns only this file; the rig is tests/common. Loopback only; every wait polls a condition
//! against a deadline.

mod common;

use std::time::Duration;

use common::blackhole::BlackHole;
use common::ctl::Ctl;
use common::fakedc::{DcConfig, FakeDc};
use common::{client_opts, name_args, os_rng, Proxy, SECRET};
use tg_ws_proxy::applet::probe::{probe_once, Attempt, Outcome};
use tg_ws_proxy::mtproto::obfs2::Tag;

fn probe(p: &Proxy) -> Attempt {
    probe_once(
        &client_opts(p.addr(), SECRET, Tag::Intermediate, 2),
        &mut os_rng(),
    )
}

/// ws front black-holed, raw TCP healthy, every other knob at its DEFAULT (hedge 250 ms,
/// ws connect timeout 10 s, connect budget 3 s). The hedge must reach the healthy tier.
///
/// Defect: the plan lists the ws route twice (kws2 and kws2-1, same address), so the hedge at
/// 250 ms dials the same black hole under the second SNI; the healthy tier is never started and
/// the client is closed at the 3 s budget.
#[test]
fn review_hedge_goes_to_the_same_dead_address_under_the_second_kws_name() {
    let hole = BlackHole::new();
    let dc = FakeDc::start_tcp(DcConfig::default());
    let ws = format!("2:{}", hole.addr());
    let tcp = format!("2:{}", dc.addr());
    let p = Proxy::start(&[
        "--secret",
        SECRET,
        "--tier-order",
        "ws,tcp",
        "--dc-ip",
        &ws,
        "--tcp-dc-ip",
        &tcp,
        "-v",
    ]);
    let a = probe(&p);
    assert!(
        a.outcome == Outcome::Ok && a.ms < 1_000,
        "client did not get through the healthy tcp tier within 1 s: {a:?}\n{}",
        p.dump()
    );
}

/// Same pit with a budget shorter than the ws connect timeout (the default shape: 3 s < 10 s).
/// After clients ran into the black-holed route it must be learned Down (docs/design.md §4: dead
/// routes are learned, then left to the prober).
///
/// Defect: attempts still running at the budget were only *cancelled* (`cancel_all`), never
/// reported to route health, so a route whose connect timeout exceeds the budget never went
/// Down and no recovery probe was ever scheduled; every client kept paying.
///
/// Now: the losing ws dial is counted cancelled, finishes in the background as a pool fill and
/// is reported when its own deadline passes (here `--ws-connect-timeout 2`), which puts the
/// route Down; meanwhile the next client is not made to pay, because the proven tcp route is
/// planned before the untried ws one.
#[test]
fn review_attempts_cut_by_the_connect_budget_never_mark_the_route_down() {
    let hole = BlackHole::new();
    let dc = FakeDc::start_tcp(DcConfig::default());
    let ws = format!("2:{}", hole.addr());
    let tcp = format!("2:{}", dc.addr());
    let ctl = Ctl::new();
    let ca = ctl.args();
    let p = Proxy::start(&[
        "--secret",
        SECRET,
        "--tier-order",
        "ws,tcp",
        "--dc-ip",
        &ws,
        "--tcp-dc-ip",
        &tcp,
        "--connect-budget",
        "1",
        "--ws-connect-timeout",
        "2",
        "-v",
        &ca[0],
        &ca[1],
    ]);
    for _ in 0..2 {
        let _ = probe(&p);
    }
    assert_eq!(
        ctl.status(&p)["counters"]["hedges"],
        1,
        "only the first client paid the hedge\n{}",
        p.dump()
    );
    let down = p.wait_route_down("ws:DC2", None, Duration::from_secs(5));
    assert!(
        down.is_some(),
        "ws route never learned down after two clients hit it\n{}",
        p.dump()
    );
}

/// docs/design.md §6: never dial our own listen address (a port scan would loop into itself).
/// A Worker (or cfproxy) name that resolves to our own listen address is dialled anyway:
/// `is_self` is applied only to literal `ws`/`tcp` targets, never to DNS-resolved ones.
#[test]
fn review_worker_name_resolving_to_our_listen_address_is_dialled() {
    // A free port we then bind the proxy to (the later --port wins over the rig's --port 0).
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    };
    let port_s = port.to_string();
    let worker = format!("self.workers.dev:{port}");
    let mut args: Vec<String> = vec![
        "--secret".into(),
        SECRET.into(),
        "--port".into(),
        port_s,
        "--tier-order".into(),
        "worker".into(),
        "--cf-worker-domain".into(),
        worker,
        "-v".into(),
    ];
    args.extend(name_args(&["self.workers.dev"]));
    let ctl = Ctl::new();
    args.extend(ctl.args());
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let p = Proxy::start(&refs);
    assert_eq!(p.port(), port, "rig did not honour --port");
    let _ = probe(&p);
    // A dial of our own listener would be a second session (a TLS hello on a plain port):
    // within 2 s there is only the client's.
    let ended = p.wait_sessions(2, Duration::from_secs(2), |_| true);
    assert_eq!(
        ended.len(),
        1,
        "the proxy dialled its own listener through the Worker name: {ended:?}\n{}",
        p.dump()
    );
    assert!(ended[0]["tier"].is_null(), "connected: {}", ended[0]);
    let worker = &ctl.status(&p)["counters"]["attempts"]["worker"];
    assert_eq!(
        worker["started"],
        0,
        "a route to our own listen address was attempted: {worker}\n{}",
        p.dump()
    );
}

/// A LAN client that opens a session, sends only its init and then idles (Telegram apps keep
/// spare connections) is cut by the upstream's idle timeout with zero bytes down. That is not
/// the route's fault, yet `Conn::close` books it as `ClosedEarly` on the route: two such idle
/// clients put a healthy route Down (docs/design.md §6: bad or idle client input must have no
/// effect on any other session).
#[test]
fn review_idle_client_cut_by_the_upstream_puts_a_healthy_route_down() {
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use tg_ws_proxy::mtproto::obfs2::{initiate, Secret};

    // A raw-TCP "DC" that reads the 64-byte init and closes after 300 ms of silence, like a
    // front's idle timeout (scaled down).
    let dc = TcpListener::bind("127.0.0.1:0").expect("bind");
    let dc_addr = dc.local_addr().expect("addr");
    std::thread::spawn(move || {
        for s in dc.incoming() {
            let Ok(mut s) = s else { return };
            std::thread::spawn(move || {
                let mut init = [0u8; 64];
                if s.read_exact(&mut init).is_err() {
                    return;
                }
                let _ = s.set_read_timeout(Some(Duration::from_millis(300)));
                let mut b = [0u8; 1024];
                let _ = s.read(&mut b); // idle: times out, then close
            });
        }
    });
    let tcp = format!("2:{dc_addr}");
    let p = Proxy::start(&[
        "--secret",
        SECRET,
        "--tier-order",
        "tcp",
        "--tcp-dc-ip",
        &tcp,
        "-v",
    ]);
    let key = Secret::parse(SECRET).expect("secret").key;
    for _ in 0..2 {
        let init = initiate(Tag::Intermediate, 2, Some(&key), &mut os_rng());
        let mut c = TcpStream::connect(p.addr()).expect("connect");
        c.write_all(&init.init).expect("send init");
        c.set_read_timeout(Some(Duration::from_secs(3)))
            .expect("timeout");
        let mut b = [0u8; 16];
        let _ = c.read(&mut b); // the proxy closes us when the DC idles out
    }
    // Both sessions ended (the ladder heard of each end before its record was written).
    let ended = p.wait_sessions(2, Duration::from_secs(5), |_| true);
    assert_eq!(ended.len(), 2, "{}", p.dump());
    let down = p.route_events("tcp:DC2", "down");
    assert!(
        down.is_empty(),
        "idle clients put a healthy route down: {down:?}\n{}",
        p.dump()
    );
}
