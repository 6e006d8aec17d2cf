//! Black-box tests of issue 10's ladder items ("under fire"): faults the ladder did not
//! survive, each pinned by a test named after it — a front that answers and then closes every
//! session (docs/design.md §4 rule 6).
//!
//! Owns only this file; the rig is tests/common. Loopback only; time is compressed through
//! flags; every wait polls a condition against a deadline.

mod common;

use std::time::{Duration, Instant};

use common::fakedc::{DcConfig, FakeDc, Fault};
use common::{client_opts, name_args, os_rng, Proxy, SECRET};
use tg_ws_proxy::applet::probe::MtClient;
use tg_ws_proxy::mtproto::obfs2::Tag;

/// Bound on waits for a condition that should hold almost at once.
const WAIT: Duration = Duration::from_secs(5);
/// The Worker's host name and the Cloudflare-proxied domain's names (test hosts file).
const WORKER: &str = "w.workers.dev";
const CF_NAMES: [&str; 3] = [WORKER, "kws2.example.com", "kws2-1.example.com"];

fn s(v: &str) -> String {
    v.to_string()
}

/// A proxy with compressed-time ladder flags, then `extra` (a later flag wins).
fn proxy(extra: &[String]) -> Proxy {
    let mut args: Vec<String> = [
        "--secret",
        SECRET,
        "--cooldown-base",
        "0.3",
        "--cooldown-max",
        "2",
        "--probe-timeout",
        "0.5",
        "--probe-interval",
        "30",
        "--hedge-delay",
        "0.1",
        "--connect-budget",
        "2",
        "--ws-connect-timeout",
        "0.3",
        "--pool-size",
        "0",
    ]
    .iter()
    .map(|a| a.to_string())
    .collect();
    args.extend(name_args(&CF_NAMES));
    args.extend(extra.iter().cloned());
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    Proxy::start(&refs)
}

fn ws_flag(dc: &FakeDc) -> [String; 2] {
    [s("--dc-ip"), format!("2:{}", dc.addr())]
}

fn tcp_flag(dc: &FakeDc) -> [String; 2] {
    [s("--tcp-dc-ip"), format!("2:{}", dc.addr())]
}

fn connect(p: &Proxy) -> MtClient {
    let opts = client_opts(p.addr(), SECRET, Tag::Intermediate, 2);
    MtClient::connect_with(&opts, &mut os_rng())
        .unwrap_or_else(|e| panic!("connect: {e}\n{}", p.dump()))
}

/// Sends one packet and checks that it comes back unchanged.
fn echo(c: &mut MtClient, p: &Proxy, i: u32, len: u32) {
    let pk: Vec<u8> = (0..len).map(|j| (j * 7 + i) as u8 | 0x40).collect();
    c.send_packet(&pk)
        .unwrap_or_else(|e| panic!("send {i}: {e}\n{}", p.dump()));
    let back = c
        .recv_packet_until(Instant::now() + WAIT)
        .unwrap_or_else(|e| panic!("echo {i}: {e}\n{}", p.dump()));
    assert_eq!(back, pk, "echo {i}");
}

// ---- item 2: a front that answers and then closes --------------------------------------------

#[test]
fn reconnect_storm_on_front_that_answers_then_closes_moves_to_next_tier() {
    // The front echoes one ~100-byte packet and closes every session, like the "phone
    // reconnects every half second" report; the tcp DC is healthy.
    let ws = FakeDc::start_tls_ws(DcConfig::with_fault(Fault::CloseAfterSent(1)));
    let dc = FakeDc::start_tcp(DcConfig::default());
    let mut args = vec![s("--tier-order"), s("ws,tcp")];
    args.extend(ws_flag(&ws));
    args.extend(tcp_flag(&dc));
    let p = proxy(&args);
    let mut sessions = 0;
    while sessions < 8 {
        sessions += 1;
        let mut c = connect(&p);
        echo(&mut c, &p, sessions, 96);
        if dc.inits() > 0 {
            break;
        }
        // The front closes; the proxy passes the close on.
        let end = c.recv_packet_until(Instant::now() + WAIT);
        let kind = end.as_ref().map_err(std::io::Error::kind);
        assert!(
            matches!(kind, Err(std::io::ErrorKind::UnexpectedEof)),
            "session {sessions} was not closed: {kind:?}"
        );
    }
    assert!(
        dc.inits() >= 1,
        "{sessions} sessions, none reached the tcp DC\n{}",
        p.dump()
    );
    assert!(
        sessions <= 4,
        "{sessions} sessions before the move\n{}",
        p.dump()
    );
    assert_eq!(ws.inits(), 3, "three short sessions made the verdict");
    let line = p
        .wait_line(&["route ws:DC2", "down for", "closed-after-reply"], WAIT)
        .unwrap_or_else(|| panic!("no closed-after-reply line\n{}", p.dump()));
    assert!(!line.contains("closed-early"), "{line}");
    assert_eq!(p.count_log("closed-after-reply"), 1, "{}", p.dump());
    // The next sessions stay on tcp and work.
    let mut c = connect(&p);
    for i in 0..3 {
        echo(&mut c, &p, i, 2048);
    }
    assert_eq!(ws.inits(), 3, "{}", p.dump());
}
