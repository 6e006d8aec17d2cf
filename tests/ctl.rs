//! Black-box tests of the control socket (`run --control-socket PATH`) and the `ctl` applet:
//! `status` (table and JSON) and `metrics` against sessions the test made, `pin`/`unpin`
//! steering new sessions between fake DCs, `probe` reaching a fake DC, the socket's mode, a
//! stale socket file replaced, a second instance refused, garbage requests answered with an
//! error while the proxy carries on, the connection cap and deadline, `ctl` with no daemon,
//! `ctl` giving up at `--timeout` on a socket whose backlog is full, and a route retired by a
//! reload (status, metrics, pin and probe refused).
//!
//! Owns only this file; the rig is tests/common. Loopback only (127.0.0.1 and unix sockets in
//! the test's temp dir). No fixed sleeps: every wait polls a condition against a deadline.

mod common;

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::fakedc::{DcConfig, FakeDc};
use common::{client_opts, os_rng, run_bin, tcp_tier_proxy, temp_dir, wait_until, Proxy, SECRET};
use tg_ws_proxy::applet::probe::MtClient;
use tg_ws_proxy::mtproto::obfs2::Tag;

/// Bound on waits for something that should happen almost at once.
const WAIT: Duration = Duration::from_secs(5);

/// A fresh socket path in a fresh temp dir.
fn sock_path() -> PathBuf {
    temp_dir().join("ctl.sock")
}

fn sock_str(p: &Path) -> &str {
    p.to_str().expect("UTF-8 temp path")
}

/// `tg-ws-proxy ctl <args> --control-socket SOCK`.
fn ctl(sock: &Path, args: &[&str]) -> common::Run {
    let mut all = vec!["ctl"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--control-socket", sock_str(sock)]);
    run_bin(&all, &[], Duration::from_secs(10))
}

/// `ctl` that must succeed; returns its stdout.
fn ctl_ok(p: &Proxy, sock: &Path, args: &[&str]) -> String {
    let r = ctl(sock, args);
    assert_eq!(
        r.code,
        Some(0),
        "ctl {args:?}: {r:?}\nproxy log:\n{}",
        p.dump()
    );
    r.stdout
}

fn status_json(p: &Proxy, sock: &Path) -> serde_json::Value {
    let out = ctl_ok(p, sock, &["status", "--json"]);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("status --json is not JSON: {e}\n{out}"))
}

/// One raw request over the socket (then EOF); the whole reply.
fn raw(sock: &Path, request: &[u8]) -> String {
    let mut s = UnixStream::connect(sock).expect("connect to the control socket");
    s.set_read_timeout(Some(WAIT)).unwrap();
    s.write_all(request).expect("send request");
    s.shutdown(std::net::Shutdown::Write)
        .expect("shutdown write");
    let mut reply = String::new();
    s.read_to_string(&mut reply).expect("read reply");
    reply
}

/// A session through the proxy to DC 2 that has relayed one echo; dropped = closed.
fn session(p: &Proxy) -> MtClient {
    let opts = client_opts(p.addr(), SECRET, Tag::Intermediate, 2);
    let mut c = MtClient::connect_with(&opts, &mut os_rng()).expect("connect to the proxy");
    c.send_packet(b"ping through the proxy")
        .expect("send a packet");
    let echo = c
        .recv_packet()
        .unwrap_or_else(|e| panic!("no echo: {e}\nproxy log:\n{}", p.dump()));
    assert_eq!(echo, b"ping through the proxy");
    c
}

/// A tcp-tier proxy to a fake DC 2 with a control socket.
fn tcp_bed(extra: &[&str]) -> (FakeDc, Proxy, PathBuf) {
    let dc = FakeDc::start_tcp(DcConfig::default());
    let sock = sock_path();
    let mut args = vec!["--control-socket", sock_str(&sock)];
    args.extend_from_slice(extra);
    // The socket path outlives this borrow: tcp_tier_proxy copies the arguments.
    let p = tcp_tier_proxy(&format!("2:{}", dc.addr()), &args);
    (dc, p, sock)
}

/// One read (of up to 16 bytes) of `s`, retried when a signal interrupts it.
fn read_retrying(s: &mut UnixStream) -> std::io::Result<usize> {
    let mut buf = [0u8; 16];
    loop {
        match s.read(&mut buf) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            r => return r,
        }
    }
}

/// The value of the one sample `series` (exact name and labels) in an exposition.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

#[test]
fn status_shows_the_serving_route_up_with_an_rtt_and_counts_live_sessions() {
    let (dc, p, sock) = tcp_bed(&[]);
    // Four sessions give the route its RTT p95 (4 samples): every one counts, also one whose
    // dial began in the very ms the route came up.
    let closed: u64 = 4;
    for _ in 0..closed {
        drop(session(&p));
    }
    let live = session(&p);
    let mut v = serde_json::Value::Null;
    let settled = wait_until(WAIT, || {
        v = status_json(&p, &sock);
        v["sessions"]["per_tier"]["tcp"] == 1 && v["counters"]["closed"] == closed
    });
    assert!(settled, "{v:#}\n{}", p.dump());
    assert_eq!(v["listen"], p.addr().to_string());
    assert_eq!(v["sessions"]["active"], 1);
    assert_eq!(v["counters"]["accepted"], closed + 1);
    let routes = v["routes"].as_array().expect("routes");
    let tcp: Vec<_> = routes.iter().filter(|r| r["tier"] == "tcp").collect();
    assert_eq!(tcp.len(), 1, "{v:#}");
    let r = tcp[0];
    assert_eq!(r["dc"], "DC2");
    assert_eq!(r["state"], "up", "{v:#}");
    assert_eq!(r["sessions"], closed + 1);
    assert!(
        r["rtt_p95_ms"].is_u64(),
        "an RTT p95 after {closed} sessions: {r:#}"
    );
    assert!(r["last_failure"].is_null());
    assert!(r["label"]
        .as_str()
        .unwrap()
        .contains(&dc.addr().to_string()));
    assert!(v["fds"]["used"].as_u64().unwrap() > 3);
    assert!(v["rss_kib"].as_u64().unwrap() > 0);

    let table = ctl_ok(&p, &sock, &["status"]);
    assert!(table.starts_with("tg-ws-proxy "), "{table}");
    assert!(
        table.contains(&format!("listening on {}", p.addr())),
        "{table}"
    );
    assert!(table.contains("tcp 1"), "{table}");
    let row = table
        .lines()
        .find(|l| l.contains("tcp:DC2"))
        .unwrap_or_else(|| panic!("no tcp:DC2 row:\n{table}"));
    assert!(
        row.contains(" up ") && row.trim_start().starts_with('#'),
        "{row}"
    );
    drop(live);
}

/// A client that sent its init and left having received nothing is a zero-byte close (the field
/// investigation's signal of a client giving up); the fd limit is the proxy's own soft limit.
#[test]
fn status_counts_a_zero_byte_close_and_shows_the_open_files_limit() {
    let (_dc, p, sock) = tcp_bed(&[]);
    drop(session(&p)); // got its echo: not a zero-byte close
    let opts = client_opts(p.addr(), SECRET, Tag::Intermediate, 2);
    let c = MtClient::connect_with(&opts, &mut os_rng()).expect("connect to the proxy");
    drop(c); // init sent, nothing received
    let mut v = serde_json::Value::Null;
    let settled = wait_until(WAIT, || {
        v = status_json(&p, &sock);
        v["counters"]["closed"] == 2
    });
    assert!(settled, "{v:#}\n{}", p.dump());
    assert_eq!(v["zero_byte_closes"], 1, "{v:#}");
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", p.pid())).unwrap();
    let soft: u64 = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(3))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no open-files limit in:\n{limits}"));
    assert_eq!(v["fds"]["limit"], soft, "{v:#}");
    assert!(v["fds"]["used"].as_u64().unwrap() < soft);
}

#[test]
fn metrics_count_the_sessions_the_test_made() {
    let (_dc, p, sock) = tcp_bed(&[]);
    for _ in 0..3 {
        drop(session(&p));
    }
    let mut text = String::new();
    let closed = wait_until(WAIT, || {
        text = ctl_ok(&p, &sock, &["metrics"]);
        let sum: f64 = text
            .lines()
            .filter(|l| l.starts_with("tgwsproxy_closed_total{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum();
        sum == 3.0
    });
    assert!(closed, "{text}\n{}", p.dump());
    assert_eq!(
        sample(&text, "tgwsproxy_accepted_total"),
        Some(3.0),
        "{text}"
    );
    assert_eq!(sample(&text, "tgwsproxy_sessions_active"), Some(0.0));
    assert_eq!(
        sample(&text, "tgwsproxy_attempts_ok_total{tier=\"tcp\"}"),
        Some(3.0),
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            "tgwsproxy_route_sessions_total{route=\"0\",tier=\"tcp\",dc=\"DC2\"}"
        ),
        Some(3.0),
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            "tgwsproxy_route_state{route=\"0\",tier=\"tcp\",dc=\"DC2\",state=\"up\"}"
        ),
        Some(1.0)
    );
    // Every line is a comment or `name[{labels}] value`.
    for l in text.lines().filter(|l| !l.starts_with('#')) {
        let value = l.rsplit(' ').next().unwrap();
        assert!(
            l.starts_with("tgwsproxy_") && value.parse::<f64>().is_ok(),
            "{l}"
        );
    }
}

#[test]
fn pin_tcp_sends_the_next_session_over_tcp_and_unpin_restores_the_tier_order() {
    let ws = FakeDc::start_tls_ws(DcConfig::default());
    let tcp = FakeDc::start_tcp(DcConfig::default());
    let sock = sock_path();
    let (ws_ip, tcp_ip) = (format!("2:{}", ws.addr()), format!("2:{}", tcp.addr()));
    let p = Proxy::start(&[
        "--secret",
        SECRET,
        "--dc-ip",
        &ws_ip,
        "--tcp-dc-ip",
        &tcp_ip,
        "--tier-order",
        "ws,tcp",
        // No hedges: each session dials exactly one route.
        "--hedge-delay",
        "5",
        "--control-socket",
        sock_str(&sock),
    ]);
    drop(session(&p));
    assert_eq!((ws.inits(), tcp.inits()), (1, 0), "tier order: ws first");

    let out = ctl_ok(&p, &sock, &["pin", "tcp"]);
    assert!(out.contains("pinned tier tcp"), "{out}");
    assert_eq!(status_json(&p, &sock)["pin"], "tier tcp");
    drop(session(&p));
    assert_eq!((ws.inits(), tcp.inits()), (1, 1), "pinned: over tcp");
    assert!(
        p.wait_event("session", WAIT, |e| e["tier"] == "tcp")
            .is_some(),
        "the session record names the tier: {}",
        p.dump()
    );

    let out = ctl_ok(&p, &sock, &["unpin"]);
    assert!(out.contains("unpinned tier tcp"), "{out}");
    assert!(status_json(&p, &sock)["pin"].is_null());
    drop(session(&p));
    assert_eq!((ws.inits(), tcp.inits()), (2, 1), "unpinned: ws again");
    assert!(ctl_ok(&p, &sock, &["unpin"]).contains("nothing was pinned"));
    // A tier that can carry nothing here is refused, and the pin stays off.
    let r = ctl(&sock, &["pin", "worker"]);
    assert_eq!(r.code, Some(1), "{r:?}");
    assert!(
        r.stderr
            .contains("pin worker: the tier is not in --tier-order (ws,tcp)"),
        "{r:?}"
    );
    assert!(status_json(&p, &sock)["pin"].is_null());

    // A route, as `TIER:DCn`: the same switch for that DC's route only.
    let out = ctl_ok(&p, &sock, &["pin", "tcp:DC2"]);
    assert!(
        out.contains("pinned route #") && out.contains(" tcp:DC2 "),
        "{out}"
    );
    drop(session(&p));
    assert_eq!((ws.inits(), tcp.inits()), (2, 2), "route pinned: over tcp");
    ctl_ok(&p, &sock, &["unpin"]);
    drop(session(&p));
    assert_eq!((ws.inits(), tcp.inits()), (3, 2), "unpinned: ws again");
}

#[test]
fn probe_route_runs_a_probe_now() {
    let (dc, p, sock) = tcp_bed(&[]);
    assert_eq!(dc.connections(), 0, "no startup probes in the rig");
    let out = ctl_ok(&p, &sock, &["probe", "tcp:DC2"]);
    assert!(
        out.contains("probe #0 tcp:DC2") && out.contains("started"),
        "{out}"
    );
    assert!(
        wait_until(WAIT, || dc.connections() == 1),
        "the fake DC saw the probe: {}",
        p.dump()
    );
    let mut v = serde_json::Value::Null;
    assert!(
        wait_until(WAIT, || {
            v = status_json(&p, &sock);
            v["routes"][0]["state"] == "up" && v["counters"]["probes_ok"] == 1
        }),
        "{v:#}"
    );
    assert_eq!(v["counters"]["probes_started"], 1);
    // By id, as status shows it.
    ctl_ok(&p, &sock, &["probe", "#0"]);
    assert!(wait_until(WAIT, || dc.connections() == 2), "{}", p.dump());
    let r = ctl(&sock, &["probe", "#7"]);
    assert_eq!(r.code, Some(1), "{r:?}");
    assert!(r.stderr.contains("no route #7"), "{r:?}");
}

#[test]
fn the_socket_is_0600_and_a_stale_socket_file_is_replaced() {
    let sock = sock_path();
    // A socket file nobody listens on any more: what a killed instance leaves.
    drop(UnixListener::bind(&sock).expect("bind a stale socket"));
    assert!(
        UnixStream::connect(&sock).is_err(),
        "stale: connect refused"
    );
    let dc = FakeDc::start_tcp(DcConfig::default());
    let p = tcp_tier_proxy(
        &format!("2:{}", dc.addr()),
        &["--control-socket", sock_str(&sock)],
    );
    // Replaced: something listens at the path again.
    assert!(
        wait_until(WAIT, || UnixStream::connect(&sock).is_ok()),
        "{}",
        p.dump()
    );
    let mode = std::fs::metadata(&sock).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "mode {mode:o}");
    assert!(ctl_ok(&p, &sock, &["status"]).starts_with("tg-ws-proxy "));
}

#[test]
fn a_second_instance_on_the_same_socket_refuses_to_start() {
    let (_dc, p, sock) = tcp_bed(&[]);
    let mut args = common::run_args();
    args.extend_from_slice(&["--secret", SECRET, "--control-socket", sock_str(&sock)]);
    let r = run_bin(&args, &[], Duration::from_secs(10));
    assert_eq!(r.code, Some(1), "{r:?}");
    let out = format!("{}{}", r.stdout, r.stderr);
    assert!(out.contains("another instance answers there"), "{out}");
    assert!(
        !out.contains("listening on"),
        "it stopped before the listener: {out}"
    );
    // The first one still owns and serves the socket.
    assert!(ctl_ok(&p, &sock, &["status"]).starts_with("tg-ws-proxy "));
}

#[test]
fn a_path_that_is_not_a_socket_is_never_replaced() {
    let path = sock_path();
    std::fs::write(&path, "not a socket\n").unwrap();
    let mut args = common::run_args();
    args.extend_from_slice(&["--secret", SECRET, "--control-socket", sock_str(&path)]);
    let r = run_bin(&args, &[], Duration::from_secs(10));
    assert_eq!(r.code, Some(1), "{r:?}");
    assert!(
        format!("{}{}", r.stdout, r.stderr).contains("exists and is not a socket"),
        "{r:?}"
    );
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        "not a socket\n",
        "left alone"
    );
}

#[test]
fn garbage_requests_get_an_error_and_the_proxy_carries_on() {
    let (_dc, p, sock) = tcp_bed(&[]);
    let reply = raw(&sock, b"\x00\xff\xfegarbage\n");
    assert!(reply.starts_with("error "), "{reply:?}");
    assert_eq!(reply.lines().count(), 1, "{reply:?}");
    let reply = raw(&sock, b"frobnicate --json\n");
    assert!(reply.starts_with("error "), "{reply:?}");
    let reply = raw(&sock, &[b'a'; 300]);
    assert_eq!(reply, "error request longer than 256 bytes\n");
    // A request without its newline, then EOF, is still answered.
    assert!(raw(&sock, b"status").starts_with("ok\ntg-ws-proxy "));
    // Still serving clients and requests.
    drop(session(&p));
    assert!(ctl_ok(&p, &sock, &["status"]).contains("accepted=1"));
}

#[test]
fn connections_past_the_cap_are_closed_at_once_and_idle_ones_at_the_deadline() {
    // 2 s, not less: on a loaded machine the 16 connects and the fd-count polls below must all
    // fit before the first deadline closes one (at 600 ms a CI run under load saw them closing
    // before the 16th was counted).
    let (_dc, p, sock) = tcp_bed(&["--control-timeout", "2s"]);
    let base = p.fd_count().expect("/proc/PID/fd");
    let started = Instant::now();
    let idle: Vec<UnixStream> = (0..16)
        .map(|_| UnixStream::connect(&sock).expect("connect"))
        .collect();
    // Make sure all 16 were accepted before the 17th comes.
    assert!(
        wait_until(WAIT, || p.fd_count().is_some_and(|n| n >= base + 16)),
        "{:?}",
        p.fd_count()
    );
    let mut extra = UnixStream::connect(&sock).expect("connect the 17th");
    extra.set_read_timeout(Some(WAIT)).unwrap();
    let mut reply = String::new();
    extra
        .read_to_string(&mut reply)
        .expect("closed, not timed out");
    assert!(
        reply.starts_with("error busy: 16 control connections are open"),
        "the 17th is told why: {reply:?}"
    );
    let mut buf = [0u8; 16];
    let first = &idle[0];
    first.set_nonblocking(true).unwrap();
    let still_open = matches!(
        (&*first).read(&mut buf),
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock
    );
    if started.elapsed() < Duration::from_millis(1800) {
        assert!(
            still_open,
            "the 16 within the cap are kept until their deadline"
        );
    }
    // Every idle one is closed at its deadline (--control-timeout 2s), not kept forever.
    first.set_nonblocking(false).unwrap();
    for mut c in idle {
        c.set_read_timeout(Some(WAIT)).unwrap();
        assert_eq!(read_retrying(&mut c).expect("closed by the deadline"), 0);
    }
    assert!(
        started.elapsed() >= Duration::from_millis(1950),
        "{:?}",
        started.elapsed()
    );
    assert!(ctl_ok(&p, &sock, &["status"]).starts_with("tg-ws-proxy "));
}

#[test]
fn reload_answers_with_the_reload_line() {
    let (_dc, p, sock) = tcp_bed(&[]);
    let r = ctl(&sock, &["reload"]);
    match r.code {
        Some(0) => assert!(r.stdout.starts_with("reload: applied"), "{r:?}"),
        Some(1) => assert!(r.stderr.contains("ctl: reload: rejected: "), "{r:?}"),
        _ => panic!("{r:?}"),
    }
    assert!(
        wait_until(WAIT, || {
            let r = &status_json(&p, &sock)["reloads"];
            r["applied"].as_u64().unwrap_or(0) + r["rejected"].as_u64().unwrap_or(0) == 1
        }),
        "counted: {}",
        p.dump()
    );
    // The line is the feature here: the reload report an operator reads in the log.
    assert!(
        p.wait_log("reload: ", WAIT),
        "the reactor logs it: {}",
        p.dump()
    );
}

#[test]
fn ctl_without_a_daemon_exits_1_and_says_why() {
    let missing = sock_path();
    let r = ctl(&missing, &["status"]);
    assert_eq!(r.code, Some(1), "{r:?}");
    assert!(r.stderr.contains("no such socket"), "{r:?}");
    assert!(
        r.stderr.contains(sock_str(&missing)),
        "names the path: {r:?}"
    );

    let stale = sock_path();
    drop(UnixListener::bind(&stale).expect("bind"));
    let r = ctl(&stale, &["status"]);
    assert_eq!(r.code, Some(1), "{r:?}");
    assert!(r.stderr.contains("connection refused"), "{r:?}");

    let r = ctl(&missing, &["frobnicate"]);
    assert_eq!(r.code, Some(2), "bad usage: {r:?}");
    assert!(r.stderr.contains("unknown verb"), "{r:?}");
    let r = run_bin(
        &["ctl", "status"],
        &[("TG_CONTROL_SOCKET", sock_str(&missing))],
        Duration::from_secs(10),
    );
    assert_eq!(r.code, Some(1));
    assert!(
        r.stderr.contains(sock_str(&missing)),
        "TG_CONTROL_SOCKET is used: {r:?}"
    );
    let help = run_bin(&["ctl", "--help"], &[], Duration::from_secs(10));
    assert_eq!(help.code, Some(0));
    assert!(
        help.stdout.contains("pin TIER|ROUTE")
            && help.stdout.contains("/var/run/tg-ws-proxy/ctl.sock")
    );
}

#[test]
fn ctl_connect_to_a_socket_with_a_full_backlog_gives_up_at_the_timeout() {
    use socket2::{Domain, SockAddr, Socket, Type};
    // A listener that never accepts, its backlog filled: a blocking unix connect to it waits
    // for an accept that never comes.
    let path = sock_path();
    let listener = Socket::new(Domain::UNIX, Type::STREAM, None).expect("socket");
    listener
        .bind(&SockAddr::unix(&path).expect("unix address"))
        .expect("bind");
    listener.listen(0).expect("listen");
    let mut queued = Vec::new();
    loop {
        let c = Socket::new(Domain::UNIX, Type::STREAM, None).expect("socket");
        c.set_nonblocking(true).unwrap();
        match c.connect(&SockAddr::unix(&path).unwrap()) {
            Ok(()) => queued.push(c),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(e) => panic!("filling the backlog: {e}"),
        }
        assert!(queued.len() < 64, "the backlog never filled");
    }
    let started = Instant::now();
    let r = ctl(&path, &["status", "--timeout", "500ms"]);
    let took = started.elapsed();
    assert_eq!(r.code, Some(1), "ctl must give up, not hang: {r:?}");
    assert!(r.stderr.contains("not accepted within"), "{r:?}");
    assert!(r.stderr.contains(sock_str(&path)), "names the path: {r:?}");
    assert!(
        took >= Duration::from_millis(450),
        "waited its timeout: {took:?}"
    );
    assert!(
        took < Duration::from_secs(5),
        "bounded by --timeout: {took:?}"
    );
    drop(queued);
}

#[test]
fn a_route_retired_by_a_reload_shows_as_retired_and_refuses_pin_and_probe() {
    use common::LOOPBACK_DEAD_DCS;
    let (old_dc, new_dc) = (
        FakeDc::start_tcp(DcConfig::default()),
        FakeDc::start_tcp(DcConfig::default()),
    );
    let sock = sock_path();
    let config = sock.with_file_name("proxy.conf");
    // Settings from the file only: a flag would override the file's tcp-dc-ip list.
    let write = |dc: &FakeDc| {
        let text = format!(
            "host 127.0.0.1\nport 0\npool-size 0\nstartup-probes off\nmax-per-ip 0\n\
             per-ip-rate 0\ndc-ip {LOOPBACK_DEAD_DCS}\ntier-order tcp\ntcp-dc-ip 2:{}\n\
             secret {SECRET}\ncontrol-socket {}\n",
            dc.addr(),
            sock.display()
        );
        std::fs::write(&config, text).expect("write config");
        std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o600)).unwrap();
    };
    write(&old_dc);
    let p = Proxy::start_argv(&["run", "--config", config.to_str().unwrap()]);
    drop(session(&p));
    write(&new_dc);
    let reply = ctl_ok(&p, &sock, &["reload"]);
    assert!(reply.contains("reload: applied"), "{reply}");
    let v = status_json(&p, &sock);
    let routes = v["routes"].as_array().expect("routes");
    let old = routes
        .iter()
        .find(|r| {
            r["label"]
                .as_str()
                .unwrap()
                .contains(&old_dc.addr().to_string())
        })
        .unwrap_or_else(|| panic!("the old route is still listed: {v:#}"));
    assert_eq!(old["state"], "retired", "{v:#}");
    assert_eq!(old["retired"], true);
    let id = old["id"].as_u64().unwrap().to_string();
    let table = ctl_ok(&p, &sock, &["status"]);
    assert!(
        table
            .lines()
            .any(|l| l.trim_start().starts_with(&format!("#{id} ")) && l.contains("retired")),
        "{table}"
    );
    let metrics = ctl_ok(&p, &sock, &["metrics"]);
    assert!(
        metrics.contains(&format!("route=\"{id}\"")) && metrics.contains("state=\"retired\""),
        "{metrics}"
    );
    for verb in ["pin", "probe"] {
        let r = ctl(&sock, &[verb, &id]);
        assert_eq!(r.code, Some(1), "{verb} #{id}: {r:?}");
        assert!(r.stderr.contains("retired"), "{verb}: {r:?}");
    }
    // New sessions go to the new route.
    drop(session(&p));
    assert_eq!((old_dc.inits(), new_dc.inits()), (1, 1));
}

/// Issue 23 traps: `ctl` refused `--config`, so the socket path had to be repeated; and a proxy
/// started without `--host` listened on loopback only and said nothing. Now `ctl --config FILE`
/// finds the socket in the file `run` reads, and the status says the listener is loopback only
/// (the start said so once, with the flag that opens the LAN).
#[test]
fn ctl_reads_the_socket_from_the_config_file_and_status_says_loopback_only() {
    let sock = sock_path();
    let conf = sock.with_file_name("proxy.conf");
    std::fs::write(
        &conf,
        format!(
            "# the proxy's settings\ncontrol-socket = {}\n",
            sock_str(&sock)
        ),
    )
    .expect("write config");
    let c = conf.to_str().expect("UTF-8 temp path");
    // The rig's flags (--host 127.0.0.1, …) and the file's control socket.
    let p = Proxy::start(&["--secret", SECRET, "--config", c]);
    let r = run_bin(&["ctl", "status", "--json", "--config", c], &[], WAIT);
    assert_eq!(r.code, Some(0), "{r:?}\nproxy log:\n{}", p.dump());
    let v: serde_json::Value = serde_json::from_str(&r.stdout).expect("status --json is JSON");
    assert_eq!(v["listen"], p.addr().to_string());
    assert_eq!(v["listen_loopback_only"], true, "{v:#}");
    let said: Vec<String> = p
        .logs()
        .into_iter()
        .filter(|l| l.contains("loopback only"))
        .collect();
    assert_eq!(said.len(), 1, "said once at start:\n{}", p.dump());
    assert!(said[0].contains("--host"), "{}", said[0]);
    // A file without the socket: exit 2, the reason names the file.
    let bare = sock.with_file_name("bare.conf");
    std::fs::write(&bare, "port 1443\n").expect("write config");
    let b = bare.to_str().unwrap();
    let r = run_bin(&["ctl", "status", "--config", b], &[], WAIT);
    assert_eq!(r.code, Some(2), "{r:?}");
    assert!(
        r.stderr.contains(b) && r.stderr.contains("control-socket"),
        "{r:?}"
    );
}
