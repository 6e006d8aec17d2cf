//! Black-box ladder health tests (docs/design.md §4): clients never pay for health checks, dead
//! routes are left out until the background prober brings them back, cooldowns grow, hedged
//! losers count as cancelled, Retry-After and redirect TTLs hold a route down, running sessions
//! ignore state changes, a silent Worker is found by the probe, and Worker probes stay within
//! the request budget.
//!
//! Owns only this file; the rig is tests/common. Loopback only; time is compressed through
//! flags; every wait polls a condition against a deadline.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::blackhole::BlackHole;
use common::ctl::Ctl;
use common::fakedc::{DcConfig, FakeDc, Fault};
use common::{client_opts, closed_port, os_rng, wait_until, Proxy, SECRET};
use tg_ws_proxy::applet::probe::{probe_once, Attempt, MtClient, Outcome};
use tg_ws_proxy::mtproto::obfs2::Tag;

/// Bound on waits for a condition that should hold almost at once.
const WAIT: Duration = Duration::from_secs(5);
/// The Worker's host name (in the test hosts file).
const WORKER: &str = "w.workers.dev";

fn s(v: &str) -> String {
    v.to_string()
}

/// A proxy with the rig's compressed-time ladder flags, then `extra` (a later flag wins).
fn proxy(extra: &[String]) -> Proxy {
    common::ladder_proxy(&[WORKER], extra)
}

/// A [`proxy`] with a control socket, for tests that read its counters.
fn proxy_ctl(extra: &[String]) -> (Proxy, Ctl) {
    let ctl = Ctl::new();
    let mut args = extra.to_vec();
    args.extend(ctl.args());
    (proxy(&args), ctl)
}

fn ws_flag(addr: SocketAddr) -> [String; 2] {
    [s("--dc-ip"), format!("2:{addr}")]
}

fn tcp_flag(dc: &FakeDc) -> [String; 2] {
    [s("--tcp-dc-ip"), format!("2:{}", dc.addr())]
}

fn worker_flag(w: &FakeDc) -> [String; 2] {
    [s("--cf-worker-domain"), format!("{WORKER}:{}", w.port())]
}

fn probe(p: &Proxy) -> Attempt {
    probe_once(
        &client_opts(p.addr(), SECRET, Tag::Intermediate, 2),
        &mut os_rng(),
    )
}

fn assert_ok(a: &Attempt, p: &Proxy) {
    assert_eq!(a.outcome, Outcome::Ok, "{a:?}\nproxy log:\n{}", p.dump());
}

/// The seconds in a `… down for 1.2s: …` line.
fn down_secs(down: &serde_json::Value) -> f64 {
    down["cooldown_ms"].as_u64().expect("a down event") as f64 / 1000.0
}

/// The most probes a route can have started within `window` after it first went down, with
/// cooldowns `base × 2^k` capped at `max`, each at least 80 % of nominal (±20 % jitter).
fn probe_bound(window: Duration, base: f64, max: f64) -> usize {
    let (mut t, mut k, mut n) = (0.0, 0, 0);
    loop {
        t += 0.8 * (base * 2f64.powi(k)).min(max);
        if t > window.as_secs_f64() {
            return n;
        }
        n += 1;
        k += 1;
    }
}

/// A tier's client-path attempts in `ctl status --json`: started, ok, failed, cancelled.
fn attempts(status: &serde_json::Value, tier: &str) -> [u64; 4] {
    let a = &status["counters"]["attempts"][tier];
    ["started", "ok", "failed", "cancelled"].map(|k| a[k].as_u64().expect("a count"))
}

/// Counter `name` of a `ctl status --json`.
fn counter(status: &serde_json::Value, name: &str) -> u64 {
    status["counters"][name].as_u64().expect("a counter")
}

// ---- the pit is gone -------------------------------------------------------------------------

/// Fake DC, healthy Worker, ws front black-holed; `--hedge-delay 0.25`, `extra` after.
struct Pit {
    p: Proxy,
    dc: FakeDc,
    _w: FakeDc,
    _hole: BlackHole,
}

fn pit(extra: &[&str]) -> Pit {
    let hole = BlackHole::new();
    let dc = FakeDc::start_tcp(DcConfig::default());
    let w = FakeDc::start_worker(DcConfig::default());
    let mut args = vec![
        s("--tier-order"),
        s("ws,worker"),
        s("--hedge-delay"),
        s("0.25"),
        s("--cooldown-base"),
        s("2"),
        s("-v"),
    ];
    args.extend(extra.iter().map(|a| s(a)));
    args.extend(ws_flag(hole.addr()));
    args.extend(worker_flag(&w));
    args.extend(tcp_flag(&dc));
    Pit {
        p: proxy(&args),
        dc,
        _w: w,
        _hole: hole,
    }
}

#[test]
fn black_holed_ws_costs_the_first_client_at_most_the_hedge_delay() {
    let Pit { p, dc, _w, _hole } = pit(&["--ws-connect-timeout", "1"]);
    let first = probe(&p);
    assert_ok(&first, &p);
    // 250 ms hedge + a loopback Worker round trip; far below the 1 s ws connect timeout.
    assert!(
        first.ms < 600,
        "first client paid more than the hedge delay: {first:?}\n{}",
        p.dump()
    );
    assert_eq!(dc.inits(), 1);
}

#[test]
fn black_holed_ws_goes_down_and_later_clients_go_straight_to_the_worker() {
    let Pit { p, dc, _w, _hole } = pit(&["--ws-connect-timeout", "1"]);
    assert_ok(&probe(&p), &p);
    // The ws route is learned dead without any later client waiting for it.
    let down = p.wait_route_down("ws:DC2", None, Duration::from_secs(3));
    assert!(
        down.is_some(),
        "the black-holed ws route never went down\n{}",
        p.dump()
    );
    for i in 0..5 {
        let a = probe(&p);
        assert_ok(&a, &p);
        assert!(
            a.ms < 300,
            "client {i} paid for the dead route: {a:?}\n{}",
            p.dump()
        );
    }
    assert_eq!(dc.inits(), 6, "every client went through the Worker");
}

#[test]
fn black_holed_ws_slower_than_the_connect_budget_still_lets_clients_through() {
    // The ws connect timeout (5 s) is beyond the connect budget (1.5 s): the hedge must still
    // reach the Worker, and the dead route must still be learned.
    let Pit { p, dc, _w, _hole } = pit(&["--ws-connect-timeout", "5", "--connect-budget", "1.5"]);
    let runs: Vec<Attempt> = (0..3).map(|_| probe(&p)).collect();
    assert!(
        runs.iter()
            .all(|a| a.outcome == Outcome::Ok && a.ms < 1_000),
        "clients: {runs:#?}\n{}",
        p.dump()
    );
    assert_eq!(dc.inits(), 3);
}

#[test]
fn refused_ws_is_dialled_once_then_left_to_the_prober() {
    let dc = FakeDc::start_tcp(DcConfig::default());
    let w = FakeDc::start_worker(DcConfig::default());
    let mut args = vec![s("--tier-order"), s("ws,worker")];
    args.extend(ws_flag(closed_port()));
    args.extend(worker_flag(&w));
    args.extend(tcp_flag(&dc));
    let (p, ctl) = proxy_ctl(&args);
    assert_ok(&probe(&p), &p);
    for _ in 0..8 {
        let a = probe(&p);
        assert_ok(&a, &p);
        assert!(a.ms < 300, "{a:?}");
    }
    let st = ctl.status(&p);
    // A refused connect skips the route's other host name: one client-path ws attempt in all.
    assert_eq!(attempts(&st, "ws"), [1, 0, 1, 0], "{st}");
    assert_eq!(attempts(&st, "worker"), [9, 9, 0, 0], "{st}");
}

#[test]
fn ws_front_answering_503_sees_only_probes_after_the_first_client() {
    let ws = FakeDc::start_tls_ws(DcConfig::with_fault(Fault::HttpStatus(503)));
    let dc = FakeDc::start_tcp(DcConfig::default());
    let w = FakeDc::start_worker(DcConfig::default());
    let mut args = vec![s("--tier-order"), s("ws,worker")];
    args.extend(ws_flag(ws.addr()));
    args.extend(worker_flag(&w));
    args.extend(tcp_flag(&dc));
    let (p, ctl) = proxy_ctl(&args);
    assert_ok(&probe(&p), &p);
    let after_first = ws.connections();
    let failed_at = Instant::now();
    assert!(
        (1..=2).contains(&after_first),
        "one try per kws name: {after_first}"
    );
    let mut n = 0;
    while failed_at.elapsed() < Duration::from_secs(2) {
        let a = probe(&p);
        assert_ok(&a, &p);
        n += 1;
    }
    let st = ctl.status(&p);
    let window = failed_at.elapsed();
    assert_eq!(
        attempts(&st, "ws")[0],
        after_first as u64,
        "{n} later clients dialled the 503 front: {st}"
    );
    let probes = ws.connections() - after_first;
    let bound = probe_bound(window, 0.3, 2.0) + 1;
    assert!(
        probes <= bound,
        "{probes} probe connections in {window:?} (bound {bound})\n{}",
        p.dump()
    );
    assert!(probes >= 1, "the prober never re-checked the route");
    assert!(ws.paths().iter().all(|p| p == "/apiws"), "{:?}", ws.paths());
}

// ---- cooldowns and recovery ------------------------------------------------------------------

#[test]
fn down_route_comes_back_only_through_a_probe_and_clients_use_it_again() {
    let ws = FakeDc::start_tls_ws(DcConfig::with_fault(Fault::HttpStatus(503)));
    let dc = FakeDc::start_tcp(DcConfig::default());
    let mut args = vec![s("--tier-order"), s("ws,tcp"), s("-v")];
    args.extend(ws_flag(ws.addr()));
    args.extend(tcp_flag(&dc));
    let p = proxy(&args);
    assert_ok(&probe(&p), &p);
    assert_eq!(dc.inits(), 1, "503 → tcp");
    assert!(
        p.wait_route_down("ws:DC2", Some("http-503"), WAIT)
            .is_some(),
        "{}",
        p.dump()
    );
    ws.set_fault(Fault::None);
    let up = p
        .wait_route_up("ws:DC2", None, WAIT)
        .unwrap_or_else(|| panic!("the ws route never came back\n{}", p.dump()));
    let via = up["via"].as_str().unwrap_or("");
    assert!(via.starts_with("probe"), "came back without a probe: {up}");
    let inits = ws.inits();
    assert_ok(&probe(&p), &p);
    assert_eq!(
        ws.inits(),
        inits + 1,
        "the client used ws again\n{}",
        p.dump()
    );
    assert_eq!(dc.inits(), 1, "and not tcp");
}

#[test]
fn probe_gaps_grow_while_the_route_stays_down() {
    let ws = FakeDc::start_tls_ws(DcConfig::with_fault(Fault::HttpStatus(503)));
    let dc = FakeDc::start_tcp(DcConfig::default());
    let mut args = vec![
        s("--tier-order"),
        s("ws,tcp"),
        s("--cooldown-base"),
        s("0.2"),
        s("--cooldown-max"),
        s("1.6"),
    ];
    args.extend(ws_flag(ws.addr()));
    args.extend(tcp_flag(&dc));
    let p = proxy(&args);
    assert_ok(&probe(&p), &p);
    let first = ws.connections();
    // Cooldowns 0.2, 0.4, 0.8, 1.6 (±20 %): four probes within ~3 s (+ probe time).
    assert!(
        wait_until(Duration::from_secs(6), || ws.connections() >= first + 4),
        "probes: {}\n{}",
        ws.connections() - first,
        p.dump()
    );
    // The first gap runs from the client's first connection (the 503 that put the route down
    // came just after it; a second kws name may have been tried after the route was down).
    let t = ws.accept_times();
    let mut marks = vec![t[0]];
    marks.extend_from_slice(&t[first..first + 4]);
    let gaps: Vec<Duration> = marks.windows(2).map(|w| w[1] - w[0]).collect();
    for g in gaps.windows(2) {
        assert!(g[1] > g[0], "probe gaps did not grow: {gaps:?}");
    }
    assert!(
        gaps[0] >= Duration::from_millis(150),
        "first probe came before the cooldown: {gaps:?}"
    );
    assert!(
        gaps[3] <= Duration::from_millis(2_400),
        "cap exceeded: {gaps:?}"
    );
    assert_eq!(dc.inits(), 1, "no client was involved");
}

// ---- hedging ---------------------------------------------------------------------------------

#[test]
fn hedged_loser_is_counted_cancelled_not_failed() {
    let ws = FakeDc::start_tls_ws(DcConfig {
        fault: Fault::None,
        delay: Duration::from_millis(600),
    });
    let dc = FakeDc::start_tcp(DcConfig::default());
    let mut args = vec![
        s("--tier-order"),
        s("ws,tcp"),
        s("--ws-connect-timeout"),
        s("2"),
        s("-v"),
    ];
    args.extend(ws_flag(ws.addr()));
    args.extend(tcp_flag(&dc));
    let (p, ctl) = proxy_ctl(&args);
    let a = probe(&p);
    assert_ok(&a, &p);
    assert!(a.ms < 500, "the hedge did not win: {a:?}\n{}", p.dump());
    assert_eq!(dc.inits(), 1);
    let st = ctl.status(&p);
    assert_eq!(attempts(&st, "ws"), [1, 0, 0, 1], "{st}");
    assert_eq!(attempts(&st, "tcp"), [1, 1, 0, 0], "{st}");
    assert_eq!(counter(&st, "hedges"), 1, "{st}");
    assert_eq!(
        p.route_events("ws:DC2", "down"),
        Vec::<serde_json::Value>::new()
    );
}

// ---- Retry-After and redirects ---------------------------------------------------------------

#[test]
fn worker_429_with_retry_after_keeps_the_route_down_at_least_that_long() {
    let w = FakeDc::start_worker(DcConfig::with_fault(Fault::HttpRetryAfter {
        status: 429,
        secs: 2,
    }));
    let dc = FakeDc::start_tcp(DcConfig::default());
    let mut args = vec![s("--tier-order"), s("worker,tcp")];
    args.extend(worker_flag(&w));
    args.extend(tcp_flag(&dc));
    let p = proxy(&args);
    assert_ok(&probe(&p), &p);
    let line = p
        .wait_route_down("worker:DC2", Some("http-429"), WAIT)
        .unwrap_or_else(|| panic!("never down\n{}", p.dump()));
    assert!(down_secs(&line) >= 2.0, "{line}");
    // Clients during the window go to tcp without touching the Worker.
    let t0 = w.accept_times()[0];
    while t0.elapsed() < Duration::from_millis(1_500) {
        assert_ok(&probe(&p), &p);
    }
    assert_eq!(w.requests(), 1, "{}", p.dump());
    // The recovery probe comes no earlier than Retry-After.
    assert!(
        wait_until(WAIT, || w.connections() >= 2),
        "no recovery probe\n{}",
        p.dump()
    );
    let t = w.accept_times();
    assert!(
        t[1] - t[0] >= Duration::from_millis(1_950),
        "probe after {:?}",
        t[1] - t[0]
    );
}

#[test]
fn redirect_on_both_kws_names_is_a_routing_fact_logged_once() {
    let ws = FakeDc::start_tls_ws(DcConfig::with_fault(Fault::HttpStatus(302)));
    let dc = FakeDc::start_tcp(DcConfig::default());
    let mut args = vec![s("--tier-order"), s("ws,tcp"), s("--redirect-ttl"), s("5")];
    args.extend(ws_flag(ws.addr()));
    args.extend(tcp_flag(&dc));
    let p = proxy(&args);
    assert_ok(&probe(&p), &p);
    let hosts: Vec<String> = ws
        .hosts()
        .iter()
        .map(|h| h.split(':').next().unwrap_or("").to_string())
        .collect();
    assert_eq!(
        hosts,
        vec!["kws2.web.telegram.org", "kws2-1.web.telegram.org"],
        "both kws names asked"
    );
    let line = p
        .wait_route_down("ws:DC2", Some("http-302"), WAIT)
        .unwrap_or_else(|| panic!("never down\n{}", p.dump()));
    assert_eq!(line["redirect"], true, "{line}");
    let secs = down_secs(&line);
    assert!(
        (4.0..=6.0).contains(&secs),
        "redirect TTL 5 s ±20 %: {line}"
    );
    for _ in 0..3 {
        assert_ok(&probe(&p), &p);
    }
    assert_eq!(
        ws.connections(),
        2,
        "no client went back to the redirecting front"
    );
    let redirects = p.route_events("ws:DC2", "down").into_iter();
    let redirects = redirects.filter(|e| e["redirect"] == true).count();
    assert_eq!(redirects, 1, "{}", p.dump());
}

// ---- sessions and state changes --------------------------------------------------------------

#[test]
fn running_ws_session_keeps_echoing_while_its_route_is_marked_down() {
    let ws = FakeDc::start_tls_ws(DcConfig::default());
    let dc = FakeDc::start_tcp(DcConfig::default());
    let mut args = vec![s("--tier-order"), s("ws,tcp")];
    args.extend(ws_flag(ws.addr()));
    args.extend(tcp_flag(&dc));
    let p = proxy(&args);
    let opts = client_opts(p.addr(), SECRET, Tag::Intermediate, 2);
    let mut c = MtClient::connect_with(&opts, &mut os_rng()).expect("connect");
    let mut echo = |i: u32| {
        let pk: Vec<u8> = (0..2048u32).map(|j| (j * 5 + i) as u8 | 0x40).collect();
        c.send_packet(&pk).expect("send");
        let back = c
            .recv_packet()
            .unwrap_or_else(|e| panic!("echo {i}: {e}\n{}", p.dump()));
        assert_eq!(back, pk, "echo {i}");
    };
    echo(0);
    assert!(
        p.wait_route_up("ws:DC2", Some("session"), WAIT).is_some(),
        "{}",
        p.dump()
    );
    ws.set_fault(Fault::HttpStatus(403));
    assert_ok(&probe(&p), &p);
    assert_eq!(dc.inits(), 1, "the second client fell to tcp");
    assert!(
        p.wait_route_down("ws:DC2", Some("http-403"), WAIT)
            .is_some(),
        "{}",
        p.dump()
    );
    for i in 1..=20 {
        echo(i);
    }
    assert_eq!(ws.inits(), 1);
    assert!(wait_until(WAIT, || ws.live_sessions() == 1));
}

#[test]
fn upgraded_then_silent_worker_is_marked_down_by_the_probe() {
    let w = FakeDc::start_worker(DcConfig::with_fault(Fault::SilentAfterUpgrade));
    let dc = FakeDc::start_tcp(DcConfig::default());
    let mut args = vec![s("--tier-order"), s("worker,tcp"), s("-v")];
    args.extend(worker_flag(&w));
    args.extend(tcp_flag(&dc));
    let (p, ctl) = proxy_ctl(&args);
    // The first client may land in the silence (the 101 looks fine); it gives up quickly.
    let mut opts = client_opts(p.addr(), SECRET, Tag::Intermediate, 2);
    opts.timeout = Duration::from_millis(1_500);
    let _ = probe_once(&opts, &mut os_rng());
    // A probe found the silence: it failed, and the route went down for a `timeout` (on
    // loopback a probe times out only after the upgrade: a dial still connecting would be
    // refused, one stuck in TLS or the upgrade is a `handshake-timeout`).
    assert!(
        p.wait_route_down("worker:DC2", Some("timeout"), WAIT)
            .is_some(),
        "{}",
        p.dump()
    );
    let st = ctl.status(&p);
    assert!(counter(&st, "probes_failed") >= 1, "{st}\n{}", p.dump());
    assert!(w.upgrades() >= 1, "the Worker never upgraded\n{}", p.dump());
    let a = probe(&p);
    assert_ok(&a, &p);
    assert!(a.ms < 300, "{a:?}");
    assert!(dc.inits() >= 1, "the next tier carried it");
    assert_eq!(w.dst_connects(), 0);
}

// ---- request budget --------------------------------------------------------------------------

#[test]
fn worker_probes_and_pool_fills_stay_within_the_request_budget() {
    let w = FakeDc::start_worker(DcConfig::default());
    let dc = FakeDc::start_tcp(DcConfig::default());
    // 20 per day → a bucket of one token and no refill within the test.
    let mut args = vec![
        s("--tier-order"),
        s("worker"),
        s("--worker-budget"),
        s("20"),
        s("--probe-interval"),
        s("0.2"),
        s("--pool-size"),
        s("2"),
    ];
    args.extend(worker_flag(&w));
    args.extend(tcp_flag(&dc));
    let (p, ctl) = proxy_ctl(&args);
    let start = Instant::now();
    let mut ok = 0;
    // Steady load with gaps longer than the probe interval, so liveness probes are wanted.
    while start.elapsed() < Duration::from_secs(3) {
        let a = probe(&p);
        assert_ok(&a, &p);
        ok += 1;
        let pause = Instant::now();
        wait_until(Duration::from_millis(300), || false);
        assert!(pause.elapsed() >= Duration::from_millis(300));
    }
    let st = ctl.status(&p);
    let probes = counter(&st, "probes_started");
    let fills = counter(&st, "pool_fills");
    assert!(probes + fills <= 1, "budget burst is 1: {st}\n{}", p.dump());
    let extra = w.requests().saturating_sub(ok);
    assert!(
        extra <= 1,
        "{} requests for {ok} client sessions: {st}",
        w.requests()
    );
}
