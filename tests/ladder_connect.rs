//! Black-box regression tests of the rewritten connect path (docs/design.md §4, "Connect
//! engine"), one per failure it must never show again: token-bucket pacing never closes a burst
//! of clients and leaves nothing behind after one (`route::pace`), startup probes spare the first
//! client the hedge over a dead first tier, a total outage behind a warm pool moves sessions to
//! the next tier, and a pool fill never proves a route (`route::ladder`, `route::pool`).
//!
//! Owns only this file; the rig is tests/common (the outage switch is
//! [`DcHandle::set_outage`](common::fakedc::DcHandle::set_outage)). Loopback only; every wait
//! polls a condition against a deadline; time is compressed through the proxy's own flags.

mod common;

use std::net::SocketAddr;
use std::sync::{Arc, Barrier};
use std::time::Duration;

use common::blackhole::BlackHole;
use common::ctl::Ctl;
use common::fakedc::{DcConfig, FakeDc, Fault};
use common::{client_opts, os_rng, wait_until, Proxy, SECRET};
use tg_ws_proxy::applet::probe::{probe_once, Attempt, ClientOptions, MtClient, Outcome};
use tg_ws_proxy::mtproto::obfs2::Tag;
use tg_ws_proxy::mtproto::packet;

/// Bound on waits for a condition that should hold almost at once.
const WAIT: Duration = Duration::from_secs(5);
/// The close reason of a client the proxy gave up on (no route ready within the connect
/// budget, or every route failed).
const UNREACHABLE: &str = "upstream-unreachable";

fn s(v: &str) -> String {
    v.to_string()
}

/// A proxy for `--secret SECRET` and `args` (after the rig's own; a later flag wins).
fn proxy(args: &[String]) -> Proxy {
    let mut all = vec![s("--secret"), s(SECRET)];
    all.extend(args.iter().cloned());
    let refs: Vec<&str> = all.iter().map(String::as_str).collect();
    Proxy::start(&refs)
}

/// A proxy whose only tier is ws toward `front` (DC 2), with `extra` flags after.
fn ws_proxy(front: &FakeDc, extra: &[&str]) -> Proxy {
    let mut args = vec![
        s("--dc-ip"),
        format!("2:{}", front.addr()),
        s("--tier-order"),
        s("ws"),
    ];
    args.extend(extra.iter().map(|a| s(a)));
    proxy(&args)
}

fn opts(p: &Proxy, timeout: Duration) -> ClientOptions {
    ClientOptions {
        timeout,
        ..client_opts(p.addr(), SECRET, Tag::Intermediate, 2)
    }
}

fn probe(p: &Proxy) -> Attempt {
    probe_once(&opts(p, WAIT), &mut os_rng())
}

/// Sessions the proxy gave up on ([`UNREACHABLE`]) so far.
fn unreachable(p: &Proxy) -> usize {
    let sessions = p.sessions().into_iter();
    sessions.filter(|e| e["reason"] == UNREACHABLE).count()
}

/// Waits for the record of a session of DC 2 that won an upstream (→ it).
fn dc2_session(p: &Proxy) -> serde_json::Value {
    p.wait_event("session", WAIT, |e| {
        e["dc"] == "DC2" && !e["tier"].is_null()
    })
    .unwrap_or_else(|| panic!("no session record\n{}", p.dump()))
}

/// Sessions so far that were served from a warm pool (replayed or not).
fn pooled_sessions(p: &Proxy) -> usize {
    let sessions = p.sessions().into_iter();
    sessions
        .filter(|e| e["target"].as_str().is_some_and(|t| t.contains(" (pooled")))
        .count()
}

fn assert_ok(a: &Attempt, p: &Proxy) {
    assert_eq!(a.outcome, Outcome::Ok, "{a:?}\nproxy log:\n{}", p.dump());
}

/// Counter `name` of a `ctl status --json` (`accepted`, `hedges`, `pool_fills`…).
fn counter(status: &serde_json::Value, name: &str) -> u64 {
    status["counters"][name]
        .as_u64()
        .unwrap_or_else(|| panic!("no counter {name} in {status}"))
}

/// Runs `n` probes at once (threads released together), each bounded by `timeout`.
fn probe_burst(p: &Proxy, n: usize, timeout: Duration) -> Vec<Attempt> {
    let o = opts(p, timeout);
    let gate = Arc::new(Barrier::new(n));
    let threads: Vec<_> = (0..n)
        .map(|_| {
            let (o, gate) = (o.clone(), gate.clone());
            std::thread::spawn(move || {
                gate.wait();
                probe_once(&o, &mut os_rng())
            })
        })
        .collect();
    threads
        .into_iter()
        .map(|t| t.join().expect("client thread panicked"))
        .collect()
}

/// Attempts that did not end with `resPQ`, for assertion messages.
fn failures(attempts: &[Attempt]) -> Vec<&Attempt> {
    attempts
        .iter()
        .filter(|a| a.outcome != Outcome::Ok)
        .collect()
}

// ---- pacing ----------------------------------------------------------------------------------

/// Before the rewrite every handshake toward one address was queued `--handshake-pace` (20 ms)
/// after the previous one: 80 clients at once needed 1.6 s of pacing alone, so the later ones
/// ran into a 1 s connect budget and were closed. Now a burst starts at once and no client waits
/// more than `--pace-max-wait`. Default pacing flags; the front takes 200 ms per upgrade.
#[test]
fn pacing_never_closes_a_burst_of_clients() {
    const CLIENTS: usize = 80;
    let dc = FakeDc::start_tls_ws(DcConfig {
        delay: Duration::from_millis(200),
        ..DcConfig::default()
    });
    let p = ws_proxy(&dc, &["--connect-budget", "1"]);
    let attempts = probe_burst(&p, CLIENTS, WAIT);
    let bad = failures(&attempts);
    assert!(
        bad.is_empty(),
        "{} of {CLIENTS} clients got no resPQ: {bad:?}\nproxy log:\n{}",
        bad.len(),
        p.dump()
    );
    assert_eq!(unreachable(&p), 0, "{}", p.dump());
    // No pool: every client had a handshake of its own.
    assert_eq!(dc.upgrades(), CLIENTS, "{}", p.dump());
    let slowest = attempts.iter().map(|a| a.ms).max().unwrap_or(0);
    eprintln!("pacing: {CLIENTS} clients at once, the slowest served in {slowest} ms");
}

/// Issue 10, item 4: pace slots reserved by clients that went away before their handshake were
/// never given back, so after a burst of a few hundred such clients the next ones were still
/// queued seconds behind them (400 × 20 ms = 8 s) and closed by the connect budget. The burst's
/// clients send the init and `req_pq_multi` while the front holds its upgrades, then reset the
/// connection; once the proxy has closed them all, new clients must be served within the budget
/// (the default 3 s).
#[test]
fn pace_slots_leak_after_a_burst() {
    const BURST: usize = 400;
    const AFTER: usize = 8;
    const BUDGET_MS: u64 = 3_000;
    let dc = FakeDc::start_tls_ws(DcConfig {
        // Longer than the burst lasts: no burst client gets an upstream before it leaves.
        delay: Duration::from_secs(3),
        ..DcConfig::default()
    });
    let ctl = Ctl::new();
    let [c0, c1] = ctl.args();
    let p = ws_proxy(&dc, &[&c0, &c1]);
    let o = opts(&p, WAIT);
    let mut rng = os_rng();
    let req = packet::req_pq_multi(&[7; 16], packet::msg_id(1));
    let burst: Vec<MtClient> = (0..BURST)
        .map(|i| {
            let mut c = MtClient::connect_with(&o, &mut rng)
                .unwrap_or_else(|e| panic!("burst client {i}: {e}\n{}", p.dump()));
            c.send_packet(&req)
                .unwrap_or_else(|e| panic!("burst client {i}: {e}\n{}", p.dump()));
            c
        })
        .collect();
    // Every burst client reached the proxy (with a request pending, each one goes on to its
    // connect phase and asks for a pace slot even if it has left by then) …
    let reached = |st: &serde_json::Value| counter(st, "accepted") >= BURST as u64;
    assert!(
        ctl.wait(&p, Duration::from_secs(10), reached).is_some(),
        "the burst never reached the proxy\n{}",
        p.dump()
    );
    // … then all of them reset before any upstream is ready.
    for c in burst {
        let _ = socket2::SockRef::from(c.stream()).set_linger(Some(Duration::ZERO));
    }
    let idle = |st: &serde_json::Value| st["sessions"]["active"] == 0;
    let status = ctl
        .wait(&p, Duration::from_secs(10), idle)
        .unwrap_or_else(|| panic!("the burst's sessions were not closed\n{}", p.dump()));
    // They all left on their own (none was closed by the budget).
    assert_eq!(
        status["counters"]["closed_by_reason"]["client-reset"], BURST as u64,
        "{status}"
    );

    // With the burst gone (well inside the 8 s its slots would once have held), new clients
    // start at once.
    dc.set_delay(Duration::ZERO);
    let attempts = probe_burst(&p, AFTER, WAIT);
    let bad = failures(&attempts);
    assert!(
        bad.is_empty(),
        "{} of {AFTER} clients after the burst got no resPQ: {bad:?}\nproxy log:\n{}",
        bad.len(),
        p.dump()
    );
    let slowest = attempts.iter().map(|a| a.ms).max().unwrap_or(0);
    assert!(
        slowest < BUDGET_MS,
        "slowest client after the burst took {slowest} ms\n{}",
        p.dump()
    );
    assert_eq!(unreachable(&p), 0, "{}", p.dump());
    eprintln!("burst: {BURST} clients left; after them the slowest of {AFTER} took {slowest} ms");
}

// ---- startup probes --------------------------------------------------------------------------

/// The address a route dials, from its label (`ws:DC1 kws1…@127.0.0.1:9` or
/// `tcp:DC1 127.0.0.1:9`).
fn route_addr(label: &str) -> SocketAddr {
    let target = label.rsplit(' ').next().unwrap_or("");
    let addr = target.rsplit('@').next().unwrap_or(target);
    addr.parse()
        .unwrap_or_else(|e| panic!("{addr:?} in {label:?}: {e}"))
}

/// A client already in the listen backlog when the reactor starts (a phone retrying while the
/// router boots) is planned after the startup probes went out: it finds the dead first tier's
/// first probe in flight and hedges at once, instead of waiting a whole hedge delay on it.
/// (With the old order the client was planned before the probes went out whenever the reactor
/// read its init in its first loop: this test failed 1 run in 3 here, never with the fix.)
#[test]
fn a_client_waiting_at_start_does_not_pay_the_hedge_on_a_dead_first_tier() {
    let hole = BlackHole::new();
    let tcp = FakeDc::start_tcp(DcConfig::default());
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    // The client knocks from before the proxy exists until the listener takes it.
    let client = std::thread::spawn(move || {
        let opts = ClientOptions {
            timeout: Duration::from_secs(10),
            ..client_opts(addr, SECRET, Tag::Intermediate, 2)
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            let a = probe_once(&opts, &mut os_rng());
            if a.outcome != Outcome::ConnectFailed || std::time::Instant::now() > deadline {
                return a;
            }
            std::thread::yield_now();
        }
    });
    let p = proxy(&[
        s("-v"),
        s("--port"),
        port.to_string(),
        s("--startup-probes"),
        s("on"),
        s("--hedge-delay"),
        s("3"),
        s("--dc-ip"),
        format!("2:{}", hole.addr()),
        s("--tcp-dc-ip"),
        format!("2:{}", tcp.addr()),
    ]);
    let a = client.join().unwrap();
    assert_ok(&a, &p);
    let session = dc2_session(&p);
    assert_eq!(session["tier"], "tcp", "{session}");
    assert!(
        a.ms < 1500,
        "the client waited {} ms (the hedge delay is 3 s)\n{}",
        a.ms,
        p.dump()
    );
}

/// Before startup probes the first client after a start dialled the first tier blind: with the
/// ws front black-holed it waited out the hedge delay before the tcp tier was tried. Now the
/// startup probe has proven tcp by then, the client goes there first and never hedges. The
/// probes of DCs 1-5 only ever reach 127.0.0.1 (the rig maps every DC to a closed loopback port).
#[test]
fn cold_start_first_client_does_not_pay_the_hedge_on_a_dead_first_tier() {
    let hole = BlackHole::new();
    let tcp = FakeDc::start_tcp(DcConfig::default());
    let ctl = Ctl::new();
    let [c0, c1] = ctl.args();
    let p = proxy(&[
        s("-v"),
        c0,
        c1,
        s("--startup-probes"),
        s("on"),
        s("--dc-ip"),
        format!("2:{}", hole.addr()),
        s("--tcp-dc-ip"),
        format!("2:{}", tcp.addr()),
    ]);
    let up = p
        .wait_route_up("tcp:DC2", Some("probe"), Duration::from_secs(10))
        .unwrap_or_else(|| panic!("the startup probe never proved tcp:DC2\n{}", p.dump()));
    assert_eq!(up["label"], format!("tcp:DC2 {}", tcp.addr()), "{up}");

    assert_ok(&probe(&p), &p);
    let session = dc2_session(&p);
    assert_eq!(session["tier"], "tcp", "{session}\n{}", p.dump());
    assert_eq!(session["target"], tcp.addr().to_string(), "{session}");
    assert_eq!(tcp.inits(), 2, "the probe and the client, nothing else");
    let status = ctl.status(&p);
    assert_eq!(counter(&status, "hedges"), 0, "{status}\n{}", p.dump());

    // Every route of DCs 1-5 is probed (paced: the ones toward the shared closed port start
    // one by one), and every route the probes made dials the loopback: a route's label ends
    // with the address it dials.
    let want: Vec<String> = (1..=5)
        .flat_map(|dc| [format!("ws:DC{dc} "), format!("tcp:DC{dc} ")])
        .collect();
    let labels = |st: &serde_json::Value| -> Vec<String> {
        let routes = st["routes"].as_array().cloned().unwrap_or_default();
        let label = |r: &serde_json::Value| r["label"].as_str().unwrap_or("").to_string();
        routes.iter().map(label).collect()
    };
    let probed = |st: &serde_json::Value| {
        counter(st, "probes_started") >= want.len() as u64
            && want
                .iter()
                .all(|w| labels(st).iter().any(|l| l.starts_with(w)))
    };
    let status = ctl
        .wait(&p, WAIT, probed)
        .unwrap_or_else(|| panic!("not every startup probe ran\n{}", p.dump()));
    for l in labels(&status) {
        assert!(route_addr(&l).ip().is_loopback(), "{l}\n{status}");
    }
}

// ---- pools -----------------------------------------------------------------------------------

/// Issue 10, item 1: a session on a pooled upstream that the front closed right after the relay
/// init, with nothing sent down, taught the ladder nothing, and refills kept the route Up: in the
/// field 60 of 60 sessions failed on pooled upstreams while a healthy tier waited. Now the first
/// such session casts the ws route out and the next ones go to the tcp tier (the second session
/// is served; three are allowed).
#[test]
fn total_outage_through_a_warm_pool_moves_sessions_to_the_next_tier() {
    const MAX_LOST: usize = 3;
    let ws = FakeDc::start_tls_ws(DcConfig::default());
    let tcp = FakeDc::start_tcp(DcConfig::default());
    let ctl = Ctl::new();
    let [c0, c1] = ctl.args();
    let p = proxy(&[
        s("-v"),
        c0,
        c1,
        s("--dc-ip"),
        format!("2:{}", ws.addr()),
        s("--tcp-dc-ip"),
        format!("2:{}", tcp.addr()),
        s("--tier-order"),
        s("ws,tcp"),
        s("--pool-size"),
        s("2"),
    ]);
    // Two sessions make the route Up and hot; the pool fills to two warm upstreams, the only
    // sessions the front holds once the clients are gone.
    for _ in 0..2 {
        assert_ok(&probe(&p), &p);
    }
    assert!(
        wait_until(WAIT, || ws.live_sessions() == 2
            && p.events("pool_ready").len() >= 2),
        "pool never warmed: {} live at the front\n{}",
        ws.live_sessions(),
        p.dump()
    );
    let idle = |st: &serde_json::Value| st["sessions"]["active"] == 0;
    assert!(ctl.wait(&p, WAIT, idle).is_some(), "{}", p.dump());
    assert_eq!(tcp.inits(), 0, "tcp used while ws was healthy");

    ws.set_outage(true);
    let pooled_before = pooled_sessions(&p);
    let mut outcomes = Vec::new();
    let mut served_by_tcp = None;
    for i in 0..MAX_LOST {
        let a = probe(&p);
        outcomes.push(a.outcome);
        if a.outcome == Outcome::Ok {
            served_by_tcp = Some(i);
            break;
        }
    }
    let Some(first) = served_by_tcp else {
        panic!(
            "{MAX_LOST} sessions after the outage all failed: {outcomes:?}\n{}",
            p.dump()
        );
    };
    assert!(
        pooled_sessions(&p) > pooled_before,
        "no session after the outage used a pooled upstream\n{}",
        p.dump()
    );
    assert!(ws.outage_closes() >= 1, "the front never cut a session");
    assert!(
        tcp.inits() >= 1,
        "served, but not by the tcp tier\n{}",
        p.dump()
    );
    // The ws route is out: the sessions that follow are all served, by tcp.
    let tcp_before = tcp.inits();
    for _ in 0..3 {
        assert_ok(&probe(&p), &p);
    }
    assert_eq!(tcp.inits(), tcp_before + 3, "{}", p.dump());
    let ws_out = !p.route_events("ws:DC2", "suspect").is_empty()
        || !p.route_events("ws:DC2", "down").is_empty();
    assert!(ws_out, "ws route never went suspect/down\n{}", p.dump());
    eprintln!("outage: first served by tcp at session {}", first + 1);
}

/// Routes gone up that no probe or session proved.
fn unearned_ups(p: &Proxy) -> Vec<String> {
    p.events("route")
        .into_iter()
        .filter(|e| e["to"] == "up")
        .filter(|e| {
            let via = e["via"].as_str().unwrap_or("");
            !via.starts_with("probe") && via != "session"
        })
        .map(|e| e.to_string())
        .collect()
}

fn assert_unearned_none(p: &Proxy) {
    let unearned = unearned_ups(p);
    assert!(
        unearned.is_empty(),
        "a route went up without a probe or a session:\n{}\n\nproxy log:\n{}",
        unearned.join("\n"),
        p.dump()
    );
}

/// Waits until `cond`, or until the proxy logged an unearned `→ up` (the failure, shown below).
fn wait_or_up(p: &Proxy, timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    wait_until(timeout, || cond() || !unearned_ups(p).is_empty())
}

/// Before the rewrite a background dial that reached the upgrade counted as a success of its
/// route: a front that upgrades but never answers `resPQ` was logged `→ up (background dial)`
/// and kept in the plans. A fill (a demand refill, or a client's dial finished in the
/// background) proves nothing; only probes and sessions may log a route `→ up`.
#[test]
fn a_pool_refill_does_not_prove_a_route() {
    let dc = FakeDc::start_tls_ws(DcConfig {
        fault: Fault::SilentAfterUpgrade,
        delay: Duration::from_millis(300),
    });
    let ctl = Ctl::new();
    let [c0, c1] = ctl.args();
    let p = ws_proxy(
        &dc,
        &["-v", "--pool-size", "1", "--connect-budget", "1", &c0, &c1],
    );

    // 1. A client's dial finished in the background: the client sends its init and leaves
    // while the front holds the upgrade; the proxy keeps the dial as a fill, which reaches the
    // upgrade of a front that will never answer.
    let c = MtClient::connect_with(&opts(&p, WAIT), &mut os_rng()).expect("connect");
    assert!(wait_until(WAIT, || dc.connections() == 1), "{}", p.dump());
    drop(c);
    assert!(wait_or_up(&p, WAIT, || dc.upgrades() == 1), "{}", p.dump());
    // The proxy closes it: the route is not Up, so nothing is kept.
    wait_or_up(&p, WAIT, || dc.live_sessions() == 0);
    assert_unearned_none(&p);
    assert_eq!(
        dc.live_sessions(),
        0,
        "a silent upstream was kept\n{}",
        p.dump()
    );

    // 2. Demand refills: a real session proves the route and it fills its pool …
    dc.set_fault(Fault::None);
    dc.set_delay(Duration::ZERO);
    assert_ok(&probe(&p), &p);
    assert!(
        wait_until(WAIT, || !p.events("pool_ready").is_empty()),
        "{}",
        p.dump()
    );
    // … then the front turns silent and slow. The next client takes the warm upstream and
    // starts a refill that the front holds for 2 s; the one after dials, is cut by the 1 s
    // budget and takes the route down while that refill is still running.
    dc.set_fault(Fault::SilentAfterUpgrade);
    dc.set_delay(Duration::from_secs(2));
    let upgrades = dc.upgrades();
    assert_ok(&probe(&p), &p);
    assert!(
        wait_until(WAIT, || pooled_sessions(&p) >= 1),
        "the client did not take the warm upstream\n{}",
        p.dump()
    );
    let cut = probe(&p);
    assert_ne!(cut.outcome, Outcome::Ok, "{cut:?}");
    assert!(
        p.wait_route_down("ws:DC2", None, WAIT).is_some(),
        "{}",
        p.dump()
    );
    // The refill reaches the upgrade after the route went down, and is closed.
    assert!(
        wait_or_up(&p, WAIT, || dc.upgrades() > upgrades),
        "the refill never reached the upgrade\n{}",
        p.dump()
    );
    wait_or_up(&p, WAIT, || dc.live_sessions() == 0);

    assert_unearned_none(&p);
    let ups: Vec<_> = p
        .events("route")
        .into_iter()
        .filter(|e| e["to"] == "up")
        .collect();
    assert_eq!(
        ups.len(),
        1,
        "only the real session proved the route: {ups:?}"
    );
    assert_eq!(
        dc.live_sessions(),
        0,
        "a silent upstream was kept\n{}",
        p.dump()
    );
    let status = ctl.status(&p);
    let fills = counter(&status, "pool_fills");
    assert!(fills >= 2, "the refills never ran: {status}");
}
