//! Black-box tests of the `mtproto` tier (`--mtproto-proxy HOST:PORT:SECRET`, docs/protocol.md
//! §4.4): two instances of our own binary chained on loopback — client → front (tier
//! `mtproto`) → upstream (tier `tcp`) → fake DC — with plain, `dd` and `ee` upstream secrets;
//! the upstream dying puts the route down and the background probe brings it back once it is
//! restarted on the same port; `check` lists the route with its verdict; a chain to our own
//! listener is refused; through `--outbound-proxy` (microsocks, tinyproxy) the `ee` hello runs
//! after the SOCKS5 / CONNECT stage, and `socks5h://` hands the upstream's name to the proxy; a
//! reload adding
//! and then removing `mtproto-proxy` changes where new sessions go.
//!
//! Owns only this file; the rig is tests/common. Loopback only. No fixed sleeps.

mod common;

use std::path::Path;
use std::time::Duration;

use common::balancer::Balancer;
use common::ctl::Ctl;
use common::fakedc::{DcConfig, FakeDc};
use common::{client_opts, os_rng, run_bin, temp_dir, wait_until, Proxy, SECRET};
use tg_ws_proxy::applet::probe::MtClient;
use tg_ws_proxy::mtproto::obfs2::Tag;
use tg_ws_proxy::mtproto::packet;
use tg_ws_proxy::rng::Rng;

/// Bound on waits for something that should happen within a few round trips.
const WAIT: Duration = Duration::from_secs(10);

/// The upstream's own secret key (distinct from the front's client secret).
const UP_KEY: &str = "fedcba9876543210fedcba9876543210";

/// `ee` + [`UP_KEY`] + hex(domain).
fn ee_up_secret() -> String {
    let dom: String = b"up.example".iter().map(|b| format!("{b:02x}")).collect();
    format!("ee{UP_KEY}{dom}")
}

/// The upstream: tier `tcp` to `dc` for DC 2 (and test DC 2), its secret `secret`, on `port`
/// (0 = any).
fn upstream(dc: &FakeDc, secret: &str, port: u16) -> Proxy {
    let route = format!("2:{},10002:{}", dc.addr(), dc.addr());
    let port = port.to_string();
    Proxy::start(&[
        "--secret",
        secret,
        "--tcp-dc-ip",
        &route,
        "--tier-order",
        "tcp",
        "--no-mask",
        "--port",
        &port,
        "-v",
    ])
}

/// The front: tier `mtproto` only, toward `up` with `up_secret`, plus `extra`.
fn front(up_port: u16, up_secret: &str, extra: &[&str]) -> Proxy {
    let chain = format!("127.0.0.1:{up_port}:{up_secret}");
    let mut args = vec![
        "--secret",
        SECRET,
        "--tier-order",
        "mtproto",
        "--mtproto-proxy",
        &chain,
        "-v",
    ];
    args.extend_from_slice(extra);
    Proxy::start(&args)
}

/// One client session through `p`: `resPQ` for our nonce, then a 40 000-byte packet echoed
/// back whole (more than two fake-TLS records each way on an `ee` hop).
fn session(p: &Proxy, tag: Tag, dc: i16, rng: &mut Rng) -> Result<(), String> {
    let opts = client_opts(p.addr(), SECRET, tag, dc);
    let mut c = MtClient::connect_with(&opts, rng).map_err(|e| format!("connect: {e}"))?;
    let mut nonce = [0u8; 16];
    rng.fill(&mut nonce);
    let req = packet::req_pq_multi(&nonce, packet::msg_id(1_700_000_000_000));
    c.send_packet(&req)
        .map_err(|e| format!("send req_pq_multi: {e}"))?;
    let reply = c
        .recv_packet()
        .map_err(|e| format!("waiting for resPQ: {e}"))?;
    packet::parse_res_pq(&reply, &nonce).map_err(|e| format!("bad resPQ: {e:?}"))?;
    let big: Vec<u8> = (0..40_000u32).map(|i| (i * 7 + 3) as u8).collect();
    c.send_packet(&big).map_err(|e| format!("send big: {e}"))?;
    let echo = c
        .recv_packet()
        .map_err(|e| format!("waiting for echo: {e}"))?;
    if echo.len() < big.len() || echo[..big.len()] != big[..] {
        return Err(format!("echo of {} bytes differs", echo.len()));
    }
    Ok(())
}

fn dump(front: &Proxy, up: &Proxy) -> String {
    format!("front log:\n{}\nupstream log:\n{}", front.dump(), up.dump())
}

/// Sessions through a chain with `up_secret`, for each transport and a media index; the DC
/// sees the client's transport and DC index, the front's session records say tier `mtproto`,
/// and no line of the front shows the upstream's key.
fn chain_carries_sessions(up_secret: &str, tls: bool) {
    let dc = FakeDc::start_tcp(DcConfig::default());
    let up = upstream(&dc, up_secret, 0);
    let ctl = Ctl::new();
    let [c0, c1] = ctl.args();
    let fr = front(up.port(), up_secret, &[&c0, &c1]);
    let mut rng = os_rng();
    let mut want = Vec::new();
    for (tag, idx) in [
        (Tag::Intermediate, 2i16),
        (Tag::PaddedIntermediate, -2),
        (Tag::Abridged, 2),
    ] {
        if let Err(e) = session(&fr, tag, idx, &mut rng) {
            panic!("{tag:?} DC {idx}: {e}\n{}", dump(&fr, &up));
        }
        want.push((tag, idx));
    }
    assert_eq!(dc.init_dcs(), want, "{}", dump(&fr, &up));
    assert!(dc.violations().is_empty(), "{:?}", dc.violations());
    assert!(
        wait_until(WAIT, || fr
            .sessions()
            .iter()
            .filter(|e| e["tier"] == "mtproto")
            .count()
            >= 3),
        "the front's session records\n{}",
        dump(&fr, &up)
    );
    // The tier's attempts: 3 started, 3 connected, none failed or cancelled.
    let counted = |st: &serde_json::Value| {
        let a = &st["counters"]["attempts"]["mtproto"];
        [&a["started"], &a["ok"], &a["failed"], &a["cancelled"]] == [3, 3, 0, 0]
    };
    assert!(
        ctl.wait(&fr, WAIT, counted).is_some(),
        "{}\n{}",
        ctl.status(&fr),
        fr.dump()
    );
    // The upstream saw our hop as its client: fake-TLS on `ee`, plain obfuscated2 otherwise.
    assert!(
        wait_until(WAIT, || up.sessions().len() >= 3),
        "{}",
        up.dump()
    );
    let up_tls = up
        .sessions()
        .iter()
        .filter(|e| e["fake_tls"] == true)
        .count();
    assert_eq!(up_tls > 0, tls, "{}", up.dump());
    // The log line is the feature here: the upstream's key is masked in every line.
    assert!(
        fr.logs().iter().all(|l| !l.contains(UP_KEY)),
        "the upstream key leaked into the front's log\n{}",
        fr.dump()
    );
}

#[test]
fn chain_with_a_plain_upstream_secret() {
    chain_carries_sessions(UP_KEY, false);
}

#[test]
fn chain_with_a_dd_upstream_secret() {
    chain_carries_sessions(&format!("dd{UP_KEY}"), false);
}

#[test]
fn chain_with_an_ee_upstream_secret_wraps_the_hop_in_fake_tls() {
    chain_carries_sessions(&ee_up_secret(), true);
}

/// `--mtproto-hello` (issue 22 part 1, docs/protocol.md §2.6): by default the `ee` hop's hello
/// is the 517-byte classic shape (record header `16 03 01 02 00`, what the official MTProxy
/// requires); with `chrome` it is Chrome's post-quantum hello, one record over 1.5 KB, and our
/// own `ee` inbound takes it — sessions relay through both. The record headers are read on
/// the wire by a forwarder between the two instances.
#[test]
fn mtproto_hello_chrome_sends_the_post_quantum_hello_and_classic_the_517_byte_one() {
    let dc = FakeDc::start_tcp(DcConfig::default());
    let up = upstream(&dc, &ee_up_secret(), 0);
    let wire = Balancer::recording(up.addr());
    let mut rng = os_rng();
    for (shape, extra) in [
        ("classic", &[][..]),
        ("chrome", &["--mtproto-hello", "chrome"][..]),
    ] {
        let fr = front(wire.addr().port(), &ee_up_secret(), extra);
        if let Err(e) = session(&fr, Tag::Intermediate, 2, &mut rng) {
            panic!("{shape}: {e}\n{}", dump(&fr, &up));
        }
        let heads = wire.heads();
        let head = heads.last().expect("a connection through the forwarder");
        assert_eq!(
            head[..3],
            [0x16, 0x03, 0x01],
            "{shape}: a TLS handshake record"
        );
        let len = u16::from_be_bytes([head[3], head[4]]);
        match shape {
            "classic" => assert_eq!(len, 512, "517 bytes with the header"),
            _ => assert!(len > 1500, "post-quantum share: {len}"),
        }
    }
}

#[test]
fn a_test_dc_index_reaches_the_upstream_with_its_test_offset() {
    let dc = FakeDc::start_tcp(DcConfig::default());
    let up = upstream(&dc, UP_KEY, 0);
    let fr = front(up.port(), UP_KEY, &["--tcp-dc-ip", "10002:127.0.0.1:9"]);
    let mut rng = os_rng();
    if let Err(e) = session(&fr, Tag::Intermediate, -10002, &mut rng) {
        panic!("test DC: {e}\n{}", dump(&fr, &up));
    }
    // Only the upstream's test-DC entry points at the fake DC's port: it was asked for test
    // DC 2 (media); toward the DC the offset is dropped (docs/protocol.md §3.1).
    assert_eq!(dc.init_dcs(), vec![(Tag::Intermediate, -2)]);
}

#[test]
fn a_wrong_upstream_secret_fails_the_route_and_the_client_is_closed() {
    let dc = FakeDc::start_tcp(DcConfig::default());
    let up = upstream(&dc, &ee_up_secret(), 0);
    // Same domain, another key: the upstream takes our hello for a stranger's.
    let dom: String = b"up.example".iter().map(|b| format!("{b:02x}")).collect();
    let wrong = format!("ee{SECRET}{dom}");
    let fr = front(up.port(), &wrong, &["--connect-budget", "2s"]);
    let mut rng = os_rng();
    assert!(session(&fr, Tag::Intermediate, 2, &mut rng).is_err());
    // The dial failed in the fake-TLS handshake: the hop connected (`started`), the upstream
    // refused our hello as not its own (`bad-init`) and closed before its server hello.
    let failed = fr.wait_event("attempt", WAIT, |e| {
        e["label"]
            .as_str()
            .is_some_and(|l| l.starts_with("mtproto:"))
    });
    let failed = failed.unwrap_or_else(|| panic!("no failed attempt\n{}", dump(&fr, &up)));
    assert_eq!(failed["failure"], "closed-early", "{failed}");
    assert_eq!(failed["started"], true, "{failed}");
    let refused = up.wait_session_reason("bad-init", WAIT);
    assert!(
        refused.is_some(),
        "the upstream never refused the hello\n{}",
        dump(&fr, &up)
    );
    assert_eq!(dc.connections(), 0);
}

fn ctl_status(p: &Proxy, sock: &Path) -> serde_json::Value {
    let s = sock.to_str().expect("utf-8 path");
    let r = run_bin(
        &["ctl", "status", "--json", "--control-socket", s],
        &[],
        Duration::from_secs(10),
    );
    assert_eq!(r.code, Some(0), "ctl status: {r:?}\n{}", p.dump());
    serde_json::from_str(&r.stdout).unwrap_or_else(|e| panic!("not JSON: {e}\n{}", r.stdout))
}

/// The state `ctl status` gives the front's mtproto route of DC 2 (non-media).
fn route_state(p: &Proxy, sock: &Path) -> String {
    let v = ctl_status(p, sock);
    let routes = v["routes"].as_array().cloned().unwrap_or_default();
    let r = routes
        .iter()
        .find(|r| {
            r["tier"] == "mtproto" && r["label"].as_str().is_some_and(|l| l.contains(":DC2 "))
        })
        .unwrap_or_else(|| panic!("no mtproto:DC2 route in {v:#}"));
    let label = r["label"].as_str().unwrap_or("");
    assert!(!label.contains(UP_KEY), "{label}");
    r["state"].as_str().unwrap_or("").to_string()
}

#[test]
fn upstream_dying_puts_the_route_down_and_the_probe_brings_it_back() {
    let dc = FakeDc::start_tcp(DcConfig::default());
    let secret = format!("dd{UP_KEY}");
    let mut up = upstream(&dc, &secret, 0);
    let port = up.port();
    let sock = temp_dir().join("ctl.sock");
    let sock_s = sock.to_str().expect("utf-8 path").to_string();
    let fr = front(
        port,
        &secret,
        &[
            "--control-socket",
            &sock_s,
            "--cooldown-base",
            "1s",
            "--cooldown-max",
            "2s",
            "--probe-interval",
            "1s",
            "--connect-budget",
            "2s",
        ],
    );
    let mut rng = os_rng();
    session(&fr, Tag::Intermediate, 2, &mut rng).unwrap_or_else(|e| panic!("{e}\n{}", fr.dump()));
    assert!(
        wait_until(WAIT, || route_state(&fr, &sock) == "up"),
        "{}",
        fr.dump()
    );

    up.kill();
    // The next client finds the upstream gone: refused, the route goes down.
    assert!(session(&fr, Tag::Intermediate, 2, &mut rng).is_err());
    assert!(
        fr.wait_route_down("mtproto:DC2", Some("refused"), WAIT)
            .is_some_and(|e| e["label"]
                .as_str()
                .is_some_and(|l| l.starts_with("mtproto:DC2 127.0.0.1:"))),
        "{}",
        fr.dump()
    );
    assert_eq!(route_state(&fr, &sock), "down", "{}", fr.dump());

    // Back on the same port: the background probe (to resPQ through the chain) proves it.
    let up = upstream(&dc, &secret, port);
    let back = fr.wait_route_up("mtproto:DC2", Some("probe"), WAIT);
    assert!(back.is_some(), "{}", dump(&fr, &up));
    assert_eq!(route_state(&fr, &sock), "up", "{}", fr.dump());
    session(&fr, Tag::Intermediate, 2, &mut rng)
        .unwrap_or_else(|e| panic!("after recovery: {e}\n{}", dump(&fr, &up)));
}

#[test]
fn check_lists_the_mtproto_routes_with_their_verdict() {
    let dc = FakeDc::start_tcp(DcConfig::default());
    let up = upstream(&dc, &ee_up_secret(), 0);
    let chain = format!("127.0.0.1:{}:{}", up.port(), ee_up_secret());
    let r = run_bin(
        &[
            "check",
            "--dc",
            "2",
            "--tier-order",
            "mtproto",
            "--mtproto-proxy",
            &chain,
            "--probe-timeout",
            "5s",
        ],
        &[],
        Duration::from_secs(30),
    );
    let out = format!("{}{}", r.stdout, r.stderr);
    let rows: Vec<&str> = out.lines().filter(|l| l.contains("mtproto:DC2")).collect();
    assert!(!rows.is_empty(), "{out}\nupstream:\n{}", up.dump());
    assert!(
        rows.iter().all(|l| l.contains("/ee") && l.contains("OK")),
        "{out}"
    );
    assert!(!out.contains(UP_KEY), "{out}");
    assert_eq!(r.code, Some(0), "{out}\nupstream:\n{}", up.dump());
}

#[test]
fn a_chain_to_our_own_listener_is_never_a_route() {
    // The front's own port is only known once it listens: use a fixed free one.
    let free = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = free.local_addr().expect("addr").port();
    drop(free);
    let chain = format!("127.0.0.1:{port}:{UP_KEY}");
    let port_s = port.to_string();
    let sock = temp_dir().join("ctl.sock");
    let sock_s = sock.to_str().expect("utf-8 path").to_string();
    let fr = Proxy::start(&[
        "--secret",
        SECRET,
        "--control-socket",
        &sock_s,
        "--port",
        &port_s,
        "--tier-order",
        "mtproto",
        "--mtproto-proxy",
        &chain,
        "--connect-budget",
        "1s",
        "-v",
    ]);
    let mut rng = os_rng();
    assert!(session(&fr, Tag::Intermediate, 2, &mut rng).is_err());
    // The client's session closed without a route: it never looped back in as a second one.
    assert!(
        wait_until(WAIT, || !fr.sessions().is_empty()),
        "{}",
        fr.dump()
    );
    let sessions = fr.sessions();
    assert!(
        sessions.iter().all(|e| e["tier"].is_null()),
        "{sessions:?}\n{}",
        fr.dump()
    );
    assert_eq!(
        fr.events("route"),
        Vec::<serde_json::Value>::new(),
        "{}",
        fr.dump()
    );
    let dc2 = sessions.iter().filter(|e| e["dc"] == "DC2").count();
    assert_eq!(dc2, 1, "{}", fr.dump());
    // DC 2's routes exist now (the client asked for it), and none of them is the loop.
    let v = ctl_status(&fr, &sock);
    let routes = v["routes"].as_array().cloned().unwrap_or_default();
    assert!(routes.iter().all(|r| r["tier"] != "mtproto"), "{v:#}");
}

#[test]
fn an_upstream_given_by_name_is_resolved_and_its_name_redacted_in_the_log() {
    let dc = FakeDc::start_tcp(DcConfig::default());
    let up = upstream(&dc, UP_KEY, 0);
    let name = "upstream.friend-abroad.test";
    let chain = format!("{name}:{}:{UP_KEY}", up.port());
    let names = common::name_args(&[name]);
    let mut args = vec![
        "--secret",
        SECRET,
        "--tier-order",
        "mtproto",
        "--mtproto-proxy",
        &chain,
        "-v",
    ];
    args.extend(names.iter().map(String::as_str));
    let fr = Proxy::start(&args);
    let mut rng = os_rng();
    // The name may still be resolving for the first client: wait until a session gets through.
    assert!(
        wait_until(WAIT, || session(&fr, Tag::Intermediate, 2, &mut rng)
            .is_ok()),
        "{}",
        dump(&fr, &up)
    );
    assert_eq!(dc.init_dcs().last(), Some(&(Tag::Intermediate, 2)));
    let route = fr
        .wait_route_up("mtproto:DC2", None, WAIT)
        .unwrap_or_else(|| panic!("{}", fr.dump()));
    let label = route["label"].as_str().unwrap_or("");
    assert!(
        label.contains(&format!("up…friend-abroad.test:{}/plain", up.port())),
        "{route}"
    );
    assert!(
        fr.logs()
            .iter()
            .all(|l| !l.contains(name) && !l.contains(UP_KEY)),
        "{}",
        fr.dump()
    );
}

/// A front whose mtproto hop goes through the outbound proxy `out` (`scheme://addr`), toward
/// the upstream `up_host:port` with `up_secret`.
fn front_via(out: &str, up_host: &str, up_port: u16, up_secret: &str) -> Proxy {
    let chain = format!("{up_host}:{up_port}:{up_secret}");
    Proxy::start(&[
        "--secret",
        SECRET,
        "--tier-order",
        "mtproto",
        "--mtproto-proxy",
        &chain,
        "--outbound-proxy",
        out,
        "-v",
    ])
}

#[test]
fn an_ee_chain_through_a_socks5_outbound_proxy_still_speaks_fake_tls_after_the_socks_stage() {
    let dc = FakeDc::start_tcp(DcConfig::default());
    let secret = ee_up_secret();
    let up = upstream(&dc, &secret, 0);
    let out = common::outproxy::OutProxy::microsocks(None);
    let fr = front_via(&out.url(), "127.0.0.1", up.port(), &secret);
    let mut rng = os_rng();
    if let Err(e) = session(&fr, Tag::Intermediate, 2, &mut rng) {
        panic!("{e}\n{}\nmicrosocks:\n{}", dump(&fr, &up), out.dump());
    }
    assert_eq!(dc.init_dcs(), vec![(Tag::Intermediate, 2)]);
    assert!(
        out.wait_connects(up.port(), 1, WAIT),
        "the hop did not go through the outbound proxy:\n{}",
        out.dump()
    );
}

#[test]
fn socks5h_hands_an_upstream_name_to_the_outbound_proxy() {
    // With socks5h:// the name is the proxy's to resolve (as for Worker and CF names): the
    // outbound proxy must be asked for `localhost:PORT`, never for the placeholder 0.0.0.0.
    let dc = FakeDc::start_tcp(DcConfig::default());
    let up = upstream(&dc, UP_KEY, 0);
    let out = common::outproxy::OutProxy::microsocks(None);
    let fr = front_via(
        &format!("socks5h://{}", out.addr()),
        "localhost",
        up.port(),
        UP_KEY,
    );
    let mut rng = os_rng();
    if let Err(e) = session(&fr, Tag::Intermediate, 2, &mut rng) {
        panic!("{e}\n{}\nmicrosocks:\n{}", dump(&fr, &up), out.dump());
    }
    assert_eq!(dc.init_dcs(), vec![(Tag::Intermediate, 2)]);
    assert!(
        out.dump()
            .contains(&format!("connected to localhost:{}", up.port())),
        "the outbound proxy was not asked for the name:\n{}",
        out.dump()
    );
}

/// A config file for `run --config`: tier `mtproto` only, then `extra` lines.
fn write_mt_config(path: &Path, extra: &str) {
    let text = format!(
        "secret {SECRET}\nhost 127.0.0.1\nport 0\nstartup-probes off\nmax-per-ip 0\n\
         per-ip-rate 0\ntier-order mtproto\n{extra}\n"
    );
    std::fs::write(path, text).expect("write config file");
}

fn sighup(p: &Proxy) {
    // SAFETY: kill(2) on our own child's pid; no memory is shared.
    assert_eq!(
        unsafe { libc::kill(p.pid() as libc::pid_t, libc::SIGHUP) },
        0
    );
}

/// Waits for `n` applied reloads that changed `mtproto-proxy` live (→ how many there are).
fn mtproto_reloads(p: &Proxy, n: usize) -> usize {
    let changed = |e: &serde_json::Value| {
        e["result"] == "applied"
            && e["changed"]
                .as_str()
                .is_some_and(|c| c.split(',').any(|o| o.trim() == "mtproto-proxy"))
    };
    wait_until(WAIT, || {
        p.events("reload").iter().filter(|e| changed(e)).count() >= n
    });
    p.events("reload").iter().filter(|e| changed(e)).count()
}

#[test]
fn a_reload_adding_then_removing_mtproto_proxy_changes_new_sessions() {
    let dc = FakeDc::start_tcp(DcConfig::default());
    let up = upstream(&dc, UP_KEY, 0);
    let config = temp_dir().join("front.conf");
    write_mt_config(&config, "");
    let fr = Proxy::start_argv(&["run", "--config", config.to_str().unwrap(), "-v"]);
    let mut rng = os_rng();
    assert!(session(&fr, Tag::Intermediate, 2, &mut rng).is_err());

    let line = format!("mtproto-proxy 127.0.0.1:{}:{UP_KEY}", up.port());
    write_mt_config(&config, &line);
    sighup(&fr);
    assert_eq!(mtproto_reloads(&fr, 1), 1, "{}", fr.dump());
    if let Err(e) = session(&fr, Tag::Intermediate, 2, &mut rng) {
        panic!("after adding: {e}\n{}", dump(&fr, &up));
    }
    assert_eq!(dc.init_dcs().len(), 1);

    write_mt_config(&config, "");
    sighup(&fr);
    assert_eq!(mtproto_reloads(&fr, 2), 2, "{}", fr.dump());
    assert!(session(&fr, Tag::Intermediate, 2, &mut rng).is_err());
    assert_eq!(
        dc.init_dcs().len(),
        1,
        "a session still reached the upstream"
    );
    // The log line is the feature here: the upstream's key is masked in every line.
    assert!(!fr.dump().contains(UP_KEY), "{}", fr.dump());
}

#[test]
fn an_ee_chain_through_an_http_connect_proxy() {
    let dc = FakeDc::start_tcp(DcConfig::default());
    let secret = ee_up_secret();
    let up = upstream(&dc, &secret, 0);
    let out = common::outproxy::OutProxy::tinyproxy(&[up.port()], None);
    let fr = front_via(&out.url(), "127.0.0.1", up.port(), &secret);
    let mut rng = os_rng();
    if let Err(e) = session(&fr, Tag::Intermediate, 2, &mut rng) {
        panic!("{e}\n{}\ntinyproxy:\n{}", dump(&fr, &up), out.dump());
    }
    assert_eq!(dc.init_dcs(), vec![(Tag::Intermediate, 2)]);
    assert!(out.wait_connects(up.port(), 1, WAIT), "{}", out.dump());
}
