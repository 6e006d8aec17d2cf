//! Black-box tests of `--outbound-proxy` (docs/protocol.md §4.7) through real proxies from
//! Debian's packages: `microsocks` (SOCKS5, with and without user/password) and `tinyproxy`
//! (HTTP CONNECT). `resPQ` comes back through every tier (ws, worker, cfproxy, tcp) via each;
//! a wrong password, a proxy that is down or black-holed, a CONNECT the proxy refuses (403) and
//! a destination the SOCKS5 proxy cannot reach each give their own failure class in the log,
//! in `check` and in `ctl status`; the proxy's own failures cool no route, a refused
//! destination cools that route, and the ladder moves on either way (to a route exempted by
//! `--no-outbound-proxy-for`, or to one the proxy does allow). `socks5h://` hands a Worker's
//! name to the proxy unresolved; a reload switches proxies for new connections; bad URLs are
//! refused at start; `TG_OUTBOUND_PROXY` is read.
//!
//! Owns only this file; the rig is tests/common (tests/common/outproxy.rs starts the real
//! proxies). Loopback only: every peer is on 127.0.0.1, host names resolve through a test hosts
//! file with an empty resolv.conf. No fixed sleeps.

mod common;

use std::path::Path;
use std::time::Duration;

use common::blackhole::BlackHole;
use common::ctl::Ctl;
use common::fakedc::{DcConfig, FakeDc};
use common::outproxy::OutProxy;
use common::{client_opts, closed_port, data_path, os_rng, run_bin, temp_dir, Proxy, SECRET};
use tg_ws_proxy::applet::probe::{probe_once, Attempt, Outcome};
use tg_ws_proxy::mtproto::obfs2::Tag;

/// Bound on waits for a condition that should hold almost at once.
const WAIT: Duration = Duration::from_secs(5);
/// The Worker's host name (in the test hosts file).
const WORKER: &str = "w.workers.dev";
/// The Cloudflare-proxied domain; DC 2 is reached as `kws2.example.com`.
const CF_DOMAIN: &str = "example.com";
/// Names the proxies here resolve (all → 127.0.0.1).
const NAMES: [&str; 2] = [WORKER, "kws2.example.com"];

fn s(v: &str) -> String {
    v.to_string()
}

/// One tier rigged to its fake peers: the flags that point the proxy at them and the port the
/// outbound proxy must be asked to reach.
struct Rig {
    tier: &'static str,
    args: Vec<String>,
    /// What the outbound proxy connects to (the front, the Worker, the DC).
    port: u16,
    _peers: Vec<FakeDc>,
}

fn rigs() -> Vec<Rig> {
    let ws = FakeDc::start_tls_ws(DcConfig::default());
    let worker = FakeDc::start_worker(DcConfig::default());
    let behind_worker = FakeDc::start_tcp(DcConfig::default());
    let cf = FakeDc::start_tls_ws(DcConfig::default());
    let tcp = FakeDc::start_tcp(DcConfig::default());
    vec![
        Rig {
            tier: "ws",
            args: vec![s("--dc-ip"), format!("2:{}", ws.addr())],
            port: ws.port(),
            _peers: vec![ws],
        },
        Rig {
            tier: "worker",
            args: vec![
                s("--cf-worker-domain"),
                format!("{WORKER}:{}", worker.port()),
                s("--tcp-dc-ip"),
                format!("2:{}", behind_worker.addr()),
            ],
            port: worker.port(),
            _peers: vec![worker, behind_worker],
        },
        Rig {
            tier: "cfproxy",
            args: vec![s("--cf-domain"), format!("{CF_DOMAIN}:{}", cf.port())],
            port: cf.port(),
            _peers: vec![cf],
        },
        Rig {
            tier: "tcp",
            args: vec![s("--tcp-dc-ip"), format!("2:{}", tcp.addr())],
            port: tcp.port(),
            _peers: vec![tcp],
        },
    ]
}

/// A proxy with the rig's compressed-time ladder flags and test names, then `extra`.
fn proxy(extra: &[String]) -> Proxy {
    common::ladder_proxy(&NAMES, extra)
}

fn probe(p: &Proxy) -> Attempt {
    probe_once(
        &client_opts(p.addr(), SECRET, Tag::Intermediate, 2),
        &mut os_rng(),
    )
}

/// `resPQ` through every tier via `out`, and `out` really carried each tier's connection.
fn every_tier_through(out: &OutProxy) {
    for rig in rigs() {
        let mut args = vec![
            s("--tier-order"),
            s(rig.tier),
            s("--outbound-proxy"),
            out.url(),
        ];
        args.extend(rig.args.iter().cloned());
        let p = proxy(&args);
        let a = probe(&p);
        assert_eq!(
            a.outcome,
            Outcome::Ok,
            "{} via {}: {a:?}\nproxy log:\n{}\noutbound proxy log:\n{}",
            rig.tier,
            out.url(),
            p.dump(),
            out.dump()
        );
        assert!(
            out.wait_connects(rig.port, 1, WAIT),
            "{}: the outbound proxy never connected to port {}:\n{}",
            rig.tier,
            rig.port,
            out.dump()
        );
        // The startup line an operator reads ("every upstream connection goes through it").
        assert!(p.wait_log("outbound proxy ", WAIT), "{}", p.dump());
    }
}

/// Background work goes through the outbound proxy too, not only client dials: the startup
/// probe that proves the ws route before any client came, and the warm pool fill once a
/// session made the route hot. Every connection the fake front saw came through microsocks.
#[test]
fn startup_probes_and_pool_fills_go_through_the_outbound_proxy() {
    let out = OutProxy::microsocks(None);
    let ws = FakeDc::start_tls_ws(DcConfig::default());
    let p = proxy(&[
        s("--tier-order"),
        s("ws"),
        s("--dc-ip"),
        format!("2:{}", ws.addr()),
        s("--outbound-proxy"),
        out.url(),
        s("--startup-probes"),
        s("on"),
        s("--pool-size"),
        s("2"),
        s("--pool-max-age"),
        s("30"),
    ]);
    assert!(
        p.wait_route_up("ws:DC2", Some("probe"), WAIT).is_some(),
        "no startup probe proved the route\n{}",
        p.dump()
    );
    assert!(ws.upgrades() >= 1, "the probe reached the front");
    // Every TCP connection the front accepted is one microsocks opened (its log line may trail
    // the accept, or lead it: wait until the two counts meet).
    let all_via_proxy = || out.connects_to(ws.port()) == ws.connections();
    assert!(
        common::wait_until(WAIT, all_via_proxy),
        "the startup probe went around the outbound proxy: {} accepted, {} via it\n{}",
        ws.connections(),
        out.connects_to(ws.port()),
        out.dump()
    );
    assert_eq!(probe(&p).outcome, Outcome::Ok, "{}", p.dump());
    assert!(pool_ready(&p, "ws:DC2"), "no pool fill\n{}", p.dump());
    assert!(
        ws.upgrades() >= 3,
        "probe, session and fill reached the front"
    );
    assert!(
        common::wait_until(WAIT, all_via_proxy),
        "a session or pool fill went around the outbound proxy: {} accepted, {} via it\n{}",
        ws.connections(),
        out.connects_to(ws.port()),
        out.dump()
    );
}

#[test]
fn respq_through_every_tier_via_microsocks_without_auth() {
    every_tier_through(&OutProxy::microsocks(None));
}

#[test]
fn respq_through_every_tier_via_microsocks_with_user_and_password() {
    every_tier_through(&OutProxy::microsocks(Some(("tg", "s3cret"))));
}

#[test]
fn respq_through_every_tier_via_tinyproxy_connect() {
    // No ConnectPort line: tinyproxy allows CONNECT to any port (the 403 case is below).
    every_tier_through(&OutProxy::tinyproxy(&[], None));
}

#[test]
fn respq_through_tinyproxy_with_basic_auth() {
    let out = OutProxy::tinyproxy(&[], Some(("tg", "s3cret")));
    let dc = FakeDc::start_tcp(DcConfig::default());
    let p = proxy(&[
        s("--tier-order"),
        s("tcp"),
        s("--tcp-dc-ip"),
        format!("2:{}", dc.addr()),
        s("--outbound-proxy"),
        out.url(),
    ]);
    let a = probe(&p);
    assert_eq!(
        a.outcome,
        Outcome::Ok,
        "{a:?}\n{}\n{}",
        p.dump(),
        out.dump()
    );
    assert_eq!(dc.init_dcs(), vec![(Tag::Intermediate, 2)]);
    assert!(out.wait_connects(dc.port(), 1, WAIT), "{}", out.dump());
}

/// tcp (through the outbound proxy) first, then ws (the fake front), with `extra` flags.
/// Returns the proxy and both fakes.
fn tcp_then_ws(tcp_addr: Option<String>, extra: &[String]) -> (Proxy, FakeDc, FakeDc) {
    let ws = FakeDc::start_tls_ws(DcConfig::default());
    let tcp = FakeDc::start_tcp(DcConfig::default());
    let mut args = vec![
        s("--tier-order"),
        s("tcp,ws"),
        s("--dc-ip"),
        format!("2:{}", ws.addr()),
        s("--tcp-dc-ip"),
        tcp_addr.unwrap_or_else(|| format!("2:{}", tcp.addr())),
    ];
    args.extend(extra.iter().cloned());
    (proxy(&args), ws, tcp)
}

/// The proxy's own failure `class`: the session carried by the exempted ws route, the tcp
/// attempt's failure taken as the proxy's (first seen on the tcp route), counted, the tcp route
/// not cooled.
fn assert_proxy_failure_moves_on(p: &Proxy, ctl: &Ctl, ws: &FakeDc, tcp: &FakeDc, class: &str) {
    let a = probe(p);
    assert_eq!(a.outcome, Outcome::Ok, "{a:?}\n{}", p.dump());
    assert_eq!(ws.init_dcs(), vec![(Tag::Intermediate, 2)], "{}", p.dump());
    assert_eq!(tcp.inits(), 0, "{}", p.dump());
    let session = p
        .wait_event("session", WAIT, |e| e["tier"] == "ws")
        .unwrap_or_else(|| panic!("no session record\n{}", p.dump()));
    assert_eq!(session["reason"], "client-eof", "{session}");
    let failed = tcp_attempts(p, class);
    assert_eq!(failed.len(), 1, "the class {class} is named:\n{}", p.dump());
    let down = assert_counted_as_the_proxys_failure(p, ctl, class);
    assert!(
        down["on"]
            .as_str()
            .is_some_and(|on| on.starts_with("route tcp:DC2 ")),
        "first seen on the tcp route: {down}"
    );
}

/// The proxy's own failure `class` put the outbound proxy down once (→ that `outbound` event),
/// was counted in `ctl status`, and cooled no route down.
fn assert_counted_as_the_proxys_failure(p: &Proxy, ctl: &Ctl, class: &str) -> serde_json::Value {
    let down = wait_outbound_down(p, class)
        .unwrap_or_else(|| panic!("not taken as the proxy's failure:\n{}", p.dump()));
    assert_eq!(outbound_downs(p).len(), 1, "{}", p.dump());
    assert!(
        p.route_events("tcp:DC2", "down").is_empty(),
        "the route was cooled down for the proxy's failure:\n{}",
        p.dump()
    );
    let v = ctl.status(p);
    assert_eq!(v["counters"]["proxy_failures"], 1, "{v}");
    down
}

/// The `attempt` events so far of the tcp:DC2 route that failed with `class`.
fn tcp_attempts(p: &Proxy, class: &str) -> Vec<serde_json::Value> {
    p.events("attempt")
        .into_iter()
        .filter(|e| {
            e["label"]
                .as_str()
                .is_some_and(|l| l.starts_with("tcp:DC2 "))
                && e["failure"] == class
        })
        .collect()
}

/// Waits for the outbound proxy to go down for `class` (→ the `outbound` event).
fn wait_outbound_down(p: &Proxy, class: &str) -> Option<serde_json::Value> {
    p.wait_event("outbound", WAIT, |e| {
        e["to"] == "down" && e["failure"] == class
    })
}

/// The `outbound` events so far that put the outbound proxy down.
fn outbound_downs(p: &Proxy) -> Vec<serde_json::Value> {
    p.events("outbound")
        .into_iter()
        .filter(|e| e["to"] == "down")
        .collect()
}

/// Waits for a warm upstream to join the pool of the route labelled `prefix …`.
fn pool_ready(p: &Proxy, prefix: &str) -> bool {
    let prefix = format!("{prefix} ");
    p.wait_event("pool_ready", WAIT, |e| {
        e["label"].as_str().is_some_and(|l| l.starts_with(&prefix))
    })
    .is_some()
}

/// A proxy given by name is resolved by the reactor's own resolver (here from the test hosts
/// file) and carries sessions; the name and its answer are logged once.
#[test]
fn a_proxy_given_by_name_is_resolved_and_carries_sessions() {
    let out = OutProxy::microsocks(None);
    let dc = FakeDc::start_tcp(DcConfig::default());
    let p = common::ladder_proxy(
        &["outproxy.test"],
        &[
            s("--tier-order"),
            s("tcp"),
            s("--tcp-dc-ip"),
            format!("2:{}", dc.addr()),
            s("--outbound-proxy"),
            format!("socks5://outproxy.test:{}", out.addr().port()),
        ],
    );
    assert!(
        p.wait_event("outbound_resolved", WAIT, |e| e["host"] == "outproxy.test"
            && e["ip"] == "127.0.0.1")
            .is_some(),
        "{}",
        p.dump()
    );
    let a = probe(&p);
    assert_eq!(a.outcome, Outcome::Ok, "{a:?}\n{}", p.dump());
    assert!(out.wait_connects(dc.port(), 1, WAIT), "{}", out.dump());
    assert_eq!(
        dc.connections(),
        out.connects_to(dc.port()),
        "a dial went around it"
    );
}

/// A nameserver on 127.0.0.1 that answers every A query with 127.0.0.1, but holds the answers
/// back until [`HeldDns::release`] (a slow first answer at boot).
struct HeldDns {
    port: u16,
    released: std::sync::Arc<std::sync::atomic::AtomicBool>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Queries received (held or answered).
    queries: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl HeldDns {
    fn start() -> HeldDns {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::Arc;
        let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        sock.set_read_timeout(Some(Duration::from_millis(20)))
            .unwrap();
        let port = sock.local_addr().unwrap().port();
        let released = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let queries = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (rel, st, asked) = (released.clone(), stop.clone(), queries.clone());
        std::thread::spawn(move || {
            let mut held: Vec<(Vec<u8>, std::net::SocketAddr)> = Vec::new();
            let mut q = [0u8; 512];
            while !st.load(Ordering::Relaxed) {
                if let Ok((n, from)) = sock.recv_from(&mut q) {
                    held.push((q[..n].to_vec(), from));
                    asked.fetch_add(1, Ordering::Relaxed);
                }
                if rel.load(Ordering::Relaxed) {
                    for (q, from) in held.drain(..) {
                        let r = common::dnsreply::reply(&q, 0, Some(([127, 0, 0, 1], 60)));
                        let _ = sock.send_to(&r, from);
                    }
                }
            }
        });
        HeldDns {
            port,
            released,
            stop,
            queries,
        }
    }

    fn queries(&self) -> usize {
        self.queries.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn release(&self) {
        self.released
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// A resolv.conf naming it.
    fn resolv_conf(&self) -> String {
        let path = temp_dir().join("resolv.conf");
        std::fs::write(&path, format!("nameserver 127.0.0.1:{}\n", self.port)).unwrap();
        path.display().to_string()
    }
}

impl Drop for HeldDns {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// The proxy's name answered by a nameserver only after start: the startup probes wait for the
/// answer (nothing counted as failed, no "outbound proxy … down" warning) and then go through
/// it, and the route comes up.
#[test]
fn startup_probes_wait_for_the_proxy_name_then_go_through_it() {
    let out = OutProxy::microsocks(None);
    let ws = FakeDc::start_tls_ws(DcConfig::default());
    let dns = HeldDns::start();
    let p = common::ladder_proxy(
        &[],
        &[
            s("--tier-order"),
            s("ws"),
            s("--dc-ip"),
            format!("2:{}", ws.addr()),
            s("--startup-probes"),
            s("on"),
            s("--outbound-proxy"),
            format!("socks5://outproxy.test:{}", out.addr().port()),
            s("--resolv-conf"),
            dns.resolv_conf(),
        ],
    );
    // The proxy asked for the name; while the answer is held, the startup probe has nothing
    // to dial: the route stays unproved and nothing is counted as failed.
    assert!(
        common::wait_until(WAIT, || dns.queries() >= 1),
        "{}",
        p.dump()
    );
    assert!(p.events("route").is_empty(), "{}", p.dump());
    dns.release();
    assert!(
        p.wait_event("outbound_resolved", WAIT, |e| e["host"] == "outproxy.test"
            && e["ip"] == "127.0.0.1")
            .is_some(),
        "{}",
        p.dump()
    );
    assert!(
        p.wait_route_up("ws:DC2", Some("probe"), WAIT).is_some(),
        "the probe did not go out once the name resolved\n{}",
        p.dump()
    );
    assert!(out.wait_connects(ws.port(), 1, WAIT), "{}", out.dump());
    assert!(
        outbound_downs(&p).is_empty(),
        "waiting for the proxy's name is no failure:\n{}",
        p.dump()
    );
    assert!(p.route_events("ws:DC2", "down").is_empty(), "{}", p.dump());
    assert_eq!(p.events("outbound_resolved").len(), 1, "{}", p.dump());
}

/// A proxy name with no answer: dials that need the proxy fail as the proxy's failure
/// (`proxy-unreachable`), cool no route, and the exempted route carries the session.
#[test]
fn a_proxy_name_that_does_not_resolve_is_proxy_unreachable_not_a_dead_route() {
    let ctl = Ctl::new();
    let mut extra = vec![s("--outbound-proxy"), s("socks5://nowhere.test:1080")];
    extra.extend(bypass_ws());
    extra.extend(ctl.args());
    let (p, ws, tcp) = tcp_then_ws(None, &extra);
    let a = probe(&p);
    assert_eq!(a.outcome, Outcome::Ok, "{a:?}\n{}", p.dump());
    assert_eq!(ws.init_dcs(), vec![(Tag::Intermediate, 2)], "{}", p.dump());
    assert_eq!(tcp.connections(), 0, "{}", p.dump());
    assert_counted_as_the_proxys_failure(&p, &ctl, "proxy-unreachable");
}

fn bypass_ws() -> [String; 2] {
    [s("--no-outbound-proxy-for"), s(".web.telegram.org")]
}

#[test]
fn wrong_socks5_password_is_proxy_auth_refused_and_the_exempted_route_carries_the_session() {
    let out = OutProxy::microsocks(Some(("tg", "right")));
    let mut extra = vec![s("--outbound-proxy"), out.url_with("tg", "wrong")];
    extra.extend(bypass_ws());
    let ctl = Ctl::new();
    extra.extend(ctl.args());
    let (p, ws, tcp) = tcp_then_ws(None, &extra);
    assert_proxy_failure_moves_on(&p, &ctl, &ws, &tcp, "proxy-auth-refused");
    assert_eq!(out.connects_to(tcp.port()), 0);
}

#[test]
fn wrong_http_password_is_proxy_auth_refused() {
    let out = OutProxy::tinyproxy(&[], Some(("tg", "right")));
    let mut extra = vec![s("--outbound-proxy"), out.url_with("tg", "wrong")];
    extra.extend(bypass_ws());
    let ctl = Ctl::new();
    extra.extend(ctl.args());
    let (p, ws, tcp) = tcp_then_ws(None, &extra);
    assert_proxy_failure_moves_on(&p, &ctl, &ws, &tcp, "proxy-auth-refused");
}

#[test]
fn a_proxy_that_is_down_is_proxy_unreachable_not_a_dead_route() {
    let dead = closed_port();
    let mut extra = vec![s("--outbound-proxy"), format!("socks5://{dead}")];
    extra.extend(bypass_ws());
    let ctl = Ctl::new();
    extra.extend(ctl.args());
    let (p, ws, tcp) = tcp_then_ws(None, &extra);
    assert_proxy_failure_moves_on(&p, &ctl, &ws, &tcp, "proxy-unreachable");
}

#[test]
fn a_black_holed_proxy_times_out_as_proxy_unreachable() {
    let hole = BlackHole::new();
    let mut extra = vec![
        s("--outbound-proxy"),
        format!("http://{}", hole.addr()),
        s("--tcp-connect-timeout"),
        s("0.3"),
        // No hedge before the tcp attempt's deadline: it must time out, not be cancelled.
        s("--hedge-delay"),
        s("5"),
    ];
    extra.extend(bypass_ws());
    let ctl = Ctl::new();
    extra.extend(ctl.args());
    let (p, ws, tcp) = tcp_then_ws(None, &extra);
    assert_proxy_failure_moves_on(&p, &ctl, &ws, &tcp, "proxy-unreachable");
}

#[test]
fn connect_refused_by_tinyproxy_is_http_403_against_that_route_and_the_allowed_route_works() {
    let ws = FakeDc::start_tls_ws(DcConfig::default());
    let tcp = FakeDc::start_tcp(DcConfig::default());
    // Only the ws front's port may be CONNECTed to: the tcp DC's port gets 403.
    let out = OutProxy::tinyproxy(&[ws.port()], None);
    let p = proxy(&[
        s("--tier-order"),
        s("tcp,ws"),
        s("--dc-ip"),
        format!("2:{}", ws.addr()),
        s("--tcp-dc-ip"),
        format!("2:{}", tcp.addr()),
        s("--outbound-proxy"),
        out.url(),
    ]);
    let a = probe(&p);
    assert_eq!(
        a.outcome,
        Outcome::Ok,
        "{a:?}\n{}\n{}",
        p.dump(),
        out.dump()
    );
    assert_eq!(ws.init_dcs(), vec![(Tag::Intermediate, 2)]);
    assert_eq!(
        tcp.connections(),
        0,
        "tinyproxy let the tcp DC's port through"
    );
    assert!(out.wait_connects(ws.port(), 1, WAIT), "{}", out.dump());
    assert!(
        p.wait_route_down("tcp:DC2", Some("proxy-http-403"), WAIT)
            .is_some(),
        "a refused destination cools its route:\n{}",
        p.dump()
    );
    let session = p
        .wait_event("session", WAIT, |e| e["tier"] == "ws")
        .unwrap_or_else(|| panic!("no session record\n{}", p.dump()));
    assert_eq!(session["reason"], "client-eof", "{session}");
    assert_eq!(tcp_attempts(&p, "proxy-http-403").len(), 1, "{}", p.dump());
    assert!(outbound_downs(&p).is_empty(), "{}", p.dump());
}

#[test]
fn a_destination_microsocks_cannot_reach_is_socks_reply_5_against_that_route() {
    let out = OutProxy::microsocks(None);
    let dead = closed_port();
    let (p, ws, _tcp) = tcp_then_ws(
        Some(format!("2:{dead}")),
        &[s("--outbound-proxy"), out.url()],
    );
    let a = probe(&p);
    assert_eq!(
        a.outcome,
        Outcome::Ok,
        "{a:?}\n{}\n{}",
        p.dump(),
        out.dump()
    );
    assert_eq!(ws.init_dcs(), vec![(Tag::Intermediate, 2)]);
    assert!(
        out.wait_connects(ws.port(), 1, WAIT),
        "ws went through it:\n{}",
        out.dump()
    );
    assert!(
        p.wait_route_down("tcp:DC2", Some("proxy-socks-5"), WAIT)
            .is_some(),
        "{}",
        p.dump()
    );
    assert!(outbound_downs(&p).is_empty(), "{}", p.dump());
    // The words are the feature here: the operator reads the SOCKS5 reply code's meaning.
    assert!(
        !p.lines_with(&["proxy-socks-5", "connection refused"])
            .is_empty(),
        "the SOCKS5 reply is named:\n{}",
        p.dump()
    );
}

#[test]
fn bad_outbound_proxy_urls_are_refused_at_start() {
    for (url, says) in [
        (
            "https://127.0.0.1:3128",
            "https:// proxies are not supported",
        ),
        ("socks5://bad..name:1080", "invalid label"),
        ("ftp://127.0.0.1:21", "unknown proxy scheme"),
    ] {
        let err = Proxy::try_start(&["--secret", SECRET, "--outbound-proxy", url], &[])
            .err()
            .unwrap_or_else(|| panic!("{url} accepted"));
        assert!(err.contains(says), "{url}: {err}");
        assert!(err.contains("--outbound-proxy"), "{err}");
    }
    let err = Proxy::try_start(
        &["--secret", SECRET, "--no-outbound-proxy-for", "10.0.0.0/99"],
        &[],
    )
    .err()
    .expect("bad CIDR accepted");
    assert!(err.contains("CIDR"), "{err}");
}

#[test]
fn the_env_variable_sets_the_proxy() {
    let out = OutProxy::microsocks(None);
    let dc = FakeDc::start_tcp(DcConfig::default());
    let url = out.url();
    let p = Proxy::start_with_env(
        &[
            "--secret",
            SECRET,
            "--tier-order",
            "tcp",
            "--tcp-dc-ip",
            &format!("2:{}", dc.addr()),
        ],
        &[("TG_OUTBOUND_PROXY", &url)],
    );
    let a = probe(&p);
    assert_eq!(a.outcome, Outcome::Ok, "{a:?}\n{}", p.dump());
    assert!(out.wait_connects(dc.port(), 1, WAIT), "{}", out.dump());
}

/// `check --dc 2 --tier-order tcp` toward `tcp` through `url`; returns stdout.
fn check_tcp(tcp: &str, url: &str) -> String {
    check_tcp_with(tcp, url, &[])
}

/// [`check_tcp`] with `extra` arguments after the others.
fn check_tcp_with(tcp: &str, url: &str, extra: &[String]) -> String {
    let ca = data_path("ca.pem").display().to_string();
    let mut args: Vec<String> = [
        "check",
        "--dc",
        "2",
        "--ca-file",
        &ca,
        "--tier-order",
        "tcp",
        "--tcp-dc-ip",
        &format!("2:{tcp}"),
        "--probe-timeout",
        "2",
        "--outbound-proxy",
        url,
    ]
    .iter()
    .map(|a| a.to_string())
    .collect();
    args.extend(extra.iter().cloned());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let r = run_bin(&args, &[], Duration::from_secs(30));
    format!("{}\n{}", r.stdout, r.stderr)
}

#[test]
fn check_goes_through_the_proxy_and_names_each_failure_class() {
    let dc = FakeDc::start_tcp(DcConfig::default());
    let socks = OutProxy::microsocks(Some(("tg", "right")));
    let out = check_tcp(&dc.addr().to_string(), &socks.url());
    assert!(out.contains("ok via tcp"), "{out}");
    assert!(socks.wait_connects(dc.port(), 1, WAIT), "{}", socks.dump());

    let out = check_tcp(&dc.addr().to_string(), &socks.url_with("tg", "wrong"));
    assert!(out.contains("proxy-auth-refused"), "{out}");
    assert!(out.contains("FAILED: the outbound proxy failed"), "{out}");

    let out = check_tcp(
        &dc.addr().to_string(),
        &format!("socks5://{}", closed_port()),
    );
    assert!(out.contains("proxy-unreachable"), "{out}");

    let http = OutProxy::tinyproxy(&[1], None);
    let out = check_tcp(&dc.addr().to_string(), &http.url());
    assert!(out.contains("proxy-http-403"), "{out}");

    // The proxy by name: resolved by check itself (here from the test hosts file).
    let by_name = format!("socks5://tg:right@outproxy.test:{}", socks.addr().port());
    let names = common::name_args(&["outproxy.test"]);
    let out = check_tcp_with(&dc.addr().to_string(), &by_name, &names);
    assert!(out.contains("ok via tcp"), "{out}");
    assert!(socks.wait_connects(dc.port(), 2, WAIT), "{}", socks.dump());
    let out = check_tcp_with(&dc.addr().to_string(), "socks5://nowhere.test:1080", &names);
    assert!(out.contains("outbound proxy nowhere.test:"), "{out}");
    assert!(out.contains("FAILED: the outbound proxy failed"), "{out}");

    let out = check_tcp(&closed_port().to_string(), &socks.url());
    assert!(out.contains("proxy-socks-5"), "{out}");
    assert!(
        out.contains("FAILED: no working route"),
        "the route's fault: {out}"
    );
}

/// `tg-ws-proxy ctl status --control-socket SOCK`, stdout.
fn ctl_status(sock: &Path) -> String {
    let r = run_bin(
        &["ctl", "status", "--control-socket", sock.to_str().unwrap()],
        &[],
        Duration::from_secs(10),
    );
    assert_eq!(r.code, Some(0), "{r:?}");
    r.stdout
}

#[test]
fn ctl_status_shows_the_proxy_failures_and_the_refused_route_class() {
    let sock = temp_dir().join("ctl.sock");
    let ws = FakeDc::start_tls_ws(DcConfig::default());
    let tcp = FakeDc::start_tcp(DcConfig::default());
    let out = OutProxy::tinyproxy(&[ws.port()], None);
    let p = proxy(&[
        s("--tier-order"),
        s("tcp,ws"),
        s("--dc-ip"),
        format!("2:{}", ws.addr()),
        s("--tcp-dc-ip"),
        format!("2:{}", tcp.addr()),
        s("--outbound-proxy"),
        out.url(),
        s("--control-socket"),
        sock.display().to_string(),
    ]);
    assert_eq!(probe(&p).outcome, Outcome::Ok, "{}", p.dump());
    let status = ctl_status(&sock);
    assert!(
        status
            .lines()
            .any(|l| l.contains("tcp:DC2") && l.contains("proxy-http-403")),
        "{status}"
    );
    drop(p);

    // A dead proxy: the counter and its line.
    let dead = closed_port();
    let mut extra = vec![
        s("--outbound-proxy"),
        format!("socks5://{dead}"),
        s("--control-socket"),
        sock.display().to_string(),
    ];
    extra.extend(bypass_ws());
    let (p, _ws, _tcp) = tcp_then_ws(None, &extra);
    assert_eq!(probe(&p).outcome, Outcome::Ok, "{}", p.dump());
    let status = ctl_status(&sock);
    assert!(
        status.contains("outbound proxy: 1 failures of the proxy itself"),
        "{status}"
    );
}

#[test]
fn socks5h_sends_the_worker_name_to_the_proxy_without_a_local_dns_answer() {
    // `localhost` is not in the test hosts file and the resolv.conf is empty, so only the
    // proxy (microsocks, which asks the system: /etc/hosts) can resolve the Worker's name.
    let out = OutProxy::microsocks(None);
    let dc = FakeDc::start_tcp(DcConfig::default());
    let w = FakeDc::start_worker(DcConfig::default());
    let worker = [
        s("--tier-order"),
        s("worker"),
        s("--cf-worker-domain"),
        format!("localhost:{}", w.port()),
        s("--tcp-dc-ip"),
        format!("2:{}", dc.addr()),
    ];
    let mut args = worker.to_vec();
    args.extend([s("--outbound-proxy"), format!("socks5h://{}", out.addr())]);
    let p = proxy(&args);
    let a = probe(&p);
    assert_eq!(
        a.outcome,
        Outcome::Ok,
        "{a:?}\n{}\n{}",
        p.dump(),
        out.dump()
    );
    assert_eq!(w.snis(), vec!["localhost"]);
    assert!(
        out.dump()
            .contains(&format!("connected to localhost:{}", w.port())),
        "the proxy was not asked for the name:\n{}",
        out.dump()
    );
    drop(p);

    // The control: socks5:// resolves locally, and here nothing locally knows the name.
    let mut args = worker.to_vec();
    args.extend([s("--outbound-proxy"), out.url()]);
    let p = proxy(&args);
    assert_ne!(probe(&p).outcome, Outcome::Ok, "{}", p.dump());
    assert_eq!(w.snis().len(), 1, "{}", p.dump());
}

/// A config file for `run --config` only: the tcp tier toward `dc`, then `extra` lines.
fn write_config(path: &Path, dc: &FakeDc, extra: &str) {
    let text = format!(
        "secret {SECRET}\nhost 127.0.0.1\nport 0\npool-size 0\nstartup-probes off\n\
         max-per-ip 0\nper-ip-rate 0\ntier-order tcp\ntcp-dc-ip 2:{}\n{extra}\n",
        dc.addr()
    );
    std::fs::write(path, text).expect("write config file");
}

#[test]
fn a_reload_switches_the_proxy_for_new_connections() {
    let a = OutProxy::microsocks(None);
    let b = OutProxy::tinyproxy(&[], None);
    let dc = FakeDc::start_tcp(DcConfig::default());
    let config = temp_dir().join("proxy.conf");
    let ctl = Ctl::new();
    let ctl_line = format!("control-socket {}", ctl.args()[1]);
    write_config(
        &config,
        &dc,
        &format!("outbound-proxy {}\n{ctl_line}", a.url()),
    );
    let p = Proxy::start_argv(&["run", "--config", config.to_str().unwrap()]);
    let applied = |n: u64| common::wait_until(WAIT, || ctl.status(&p)["reloads"]["applied"] == n);
    assert_eq!(probe(&p).outcome, Outcome::Ok, "{}", p.dump());
    assert!(a.wait_connects(dc.port(), 1, WAIT), "{}", a.dump());

    write_config(
        &config,
        &dc,
        &format!("outbound-proxy {}\n{ctl_line}", b.url()),
    );
    // SAFETY: kill(2) on our own child's pid; no memory is shared.
    assert_eq!(
        unsafe { libc::kill(p.pid() as libc::pid_t, libc::SIGHUP) },
        0
    );
    assert!(applied(1), "{}", p.dump());
    assert_eq!(probe(&p).outcome, Outcome::Ok, "{}", p.dump());
    assert!(b.wait_connects(dc.port(), 1, WAIT), "{}", b.dump());
    assert_eq!(
        a.connects_to(dc.port()),
        1,
        "the old proxy got a new connection"
    );

    write_config(&config, &dc, &format!("outbound-proxy none\n{ctl_line}"));
    // SAFETY: as above.
    assert_eq!(
        unsafe { libc::kill(p.pid() as libc::pid_t, libc::SIGHUP) },
        0
    );
    assert!(applied(2), "{}", p.dump());
    assert_eq!(probe(&p).outcome, Outcome::Ok, "{}", p.dump());
    assert_eq!(dc.init_dcs().len(), 3);
    assert_eq!(
        b.connects_to(dc.port()),
        1,
        "direct now, not through the proxy"
    );
}
