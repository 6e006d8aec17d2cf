//! Black-box tests of `tg-ws-proxy check` (docs/design.md §7) against the fake peers on loopback:
//! every route answering, the `ws` tier black-holed with `tcp` alive, everything dead, a Worker
//! look-alike tunnelling to a fake TCP DC, and the flag errors. Only `--dc 2` is checked, so a
//! run is six probes at most (ws × 2 host names, tcp; non-media and media). The `diagnosis:`
//! lines of `check` and of `probe` (issue 23 §6) are tested here too: network down, nothing
//! answering, an init answered by a close, a freezing tier.
//!
//! No secret is ever given: `check` must not need one. No real network: every address is
//! 127.0.0.1, and names resolve through a test hosts file with an empty resolv.conf.

mod common;

use std::time::{Duration, Instant};

use common::blackhole::BlackHole;
use common::fakedc::{DcConfig, FakeDc, Fault};
use common::{data_path, hosts_file, name_args, run_bin, temp_dir, Run};

/// Bound on one `check` run in these tests (the probe timeout is 1–3 s).
const RUN_TIMEOUT: Duration = Duration::from_secs(30);

/// Runs `check --dc 2 --ca-file tests/data/ca.pem <args>` without any secret.
fn check(args: &[&str]) -> Run {
    let ca = data_path("ca.pem").display().to_string();
    let mut all = vec!["check", "--dc", "2", "--ca-file", &ca];
    all.extend_from_slice(args);
    run_bin(&all, &[], RUN_TIMEOUT)
}

/// `check` on the worker tier only, through the fake `worker` reached as `name` and its tunnel
/// to the fake `dc` as DC 2, `--probe-timeout 3`, then `extra`.
fn check_worker_tier(dc: &FakeDc, worker: &FakeDc, name: &str, extra: &[&str]) -> Run {
    let mut args: Vec<String> = vec![
        "--cf-worker-domain".into(),
        format!("{name}:{}", worker.port()),
        "--tcp-dc-ip".into(),
        format!("2:{}", dc.addr()),
        "--tier-order".into(),
        "worker".into(),
        "--probe-timeout".into(),
        "3".into(),
    ];
    args.extend(extra.iter().map(|a| a.to_string()));
    args.extend(name_args(&[name]));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    check(&args)
}

/// Table lines whose route column is `route` (`ws:DC2`, `tcp:DC2m`…; the target follows it).
fn lines<'a>(out: &'a str, route: &str) -> Vec<&'a str> {
    out.lines()
        .filter(|l| l.split_whitespace().nth(1) == Some(route))
        .collect()
}

/// Table lines of every route of `tier`, both media flags.
fn tier_lines<'a>(out: &'a str, tier: &str) -> Vec<&'a str> {
    let mut v = lines(out, &format!("{tier}:DC2"));
    v.extend(lines(out, &format!("{tier}:DC2m")));
    v
}

/// The result column of a table line (after DC, route tier:DC, route target).
fn result(line: &str) -> Option<&str> {
    line.split_whitespace().nth(3)
}

/// A loopback port with nothing listening (connects are refused; `common::closed_port`).
fn closed_port() -> u16 {
    common::closed_port().port()
}

#[test]
fn every_route_answering_exits_0_with_one_ok_line_per_route() {
    let ws = FakeDc::start_tls_ws(DcConfig::default());
    let tcp = FakeDc::start_tcp(DcConfig::default());
    let r = check(&[
        "--dc-ip",
        &format!("2:{}", ws.addr()),
        "--tcp-dc-ip",
        &format!("2:{}", tcp.addr()),
        "--tier-order",
        "ws,tcp",
        "--probe-timeout",
        "3",
        "--count",
        "2",
    ]);
    assert_eq!(
        r.code,
        Some(0),
        "stdout:\n{}\nstderr:\n{}",
        r.stdout,
        r.stderr
    );
    let header = r.stdout.lines().next().unwrap_or("");
    assert!(
        header.starts_with("DC") && header.contains("result"),
        "{}",
        r.stdout
    );
    for (prefix, n) in [
        ("ws:DC2", 2),
        ("ws:DC2m", 2),
        ("tcp:DC2", 1),
        ("tcp:DC2m", 1),
    ] {
        let got = lines(&r.stdout, prefix);
        assert_eq!(got.len(), n, "{prefix}: {}", r.stdout);
        for l in got {
            assert!(result(l) == Some("OK"), "{l}\n{}", r.stdout);
        }
    }
    for host in ["kws2.web.telegram.org", "kws2-1.web.telegram.org"] {
        assert_eq!(
            lines(&r.stdout, "ws:DC2")
                .iter()
                .filter(|l| l.contains(host))
                .count(),
            1
        );
    }
    assert!(r
        .stdout
        .lines()
        .any(|l| l.starts_with("DC2 ") && l.contains("ok via ws, tcp")));
    assert!(r
        .stdout
        .lines()
        .any(|l| l.starts_with("DC2m ") && l.contains("ok via ws, tcp")));
    // Two rounds: each ws host name twice per media flag, tcp twice per media flag; every probe
    // carried a relay init (media ones with a negative DC index).
    assert_eq!(ws.inits(), 8, "{:?}", ws.init_dcs());
    assert_eq!(tcp.inits(), 4, "{:?}", tcp.init_dcs());
    assert_eq!(ws.init_dcs().iter().filter(|(_, dc)| *dc == -2).count(), 4);
    assert!(ws.violations().is_empty(), "{:?}", ws.violations());
}

#[test]
fn black_holed_ws_shows_timeout_and_tcp_carries_the_verdict() {
    let hole = BlackHole::new();
    let tcp = FakeDc::start_tcp(DcConfig::default());
    let started = Instant::now();
    let r = check(&[
        "--dc-ip",
        &format!("2:{}", hole.addr()),
        "--tcp-dc-ip",
        &format!("2:{}", tcp.addr()),
        "--tier-order",
        "ws,tcp",
        "--probe-timeout",
        "1",
    ]);
    let took = started.elapsed();
    assert_eq!(
        r.code,
        Some(0),
        "stdout:\n{}\nstderr:\n{}",
        r.stdout,
        r.stderr
    );
    let ws = tier_lines(&r.stdout, "ws");
    assert_eq!(ws.len(), 4, "{}", r.stdout);
    for l in ws {
        assert_eq!(result(l), Some("timeout"), "{l}");
        assert!(l.contains("no resPQ within 1000ms"), "{l}");
    }
    for l in tier_lines(&r.stdout, "tcp") {
        assert_eq!(result(l), Some("OK"), "{l}");
    }
    assert!(r
        .stdout
        .lines()
        .any(|l| l.starts_with("DC2 ") && l.contains("ok via tcp")));
    assert!(r
        .stdout
        .lines()
        .any(|l| l.starts_with("DC2m ") && l.contains("ok via tcp")));
    // Probes run in parallel: the whole check is one probe timeout, not four.
    assert!(took < Duration::from_secs(3), "check took {took:?}");
}

#[test]
fn ways_in_lines_say_what_each_listener_needs() {
    let refused = closed_port();
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let busy_addr = busy.local_addr().unwrap().to_string();
    let dir = temp_dir();
    let users = dir.join("users");
    std::fs::write(&users, "alice:secret1\nbob:secret2\n").unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&users, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let r = check(&[
        "--tcp-dc-ip",
        &format!("2:127.0.0.1:{refused}"),
        "--tier-order",
        "tcp",
        "--probe-timeout",
        "1",
        "--transparent",
        "127.0.0.1:0",
        "--nft",
        "/nonexistent/nft",
        "--lan-iface",
        "eth1,br-guest",
        "--socks5",
        &busy_addr,
        "--socks5-auth",
        users.to_str().unwrap(),
    ]);
    let line = |way: &str| {
        r.stdout
            .lines()
            .find(|l| l.starts_with(&format!("way in {way}: ")))
            .unwrap_or_else(|| panic!("no {way} line:\n{}\n{}", r.stdout, r.stderr))
            .to_string()
    };
    assert!(line("proxy").contains("(free)"));
    let t = line("transparent");
    assert!(t.contains("LAN eth1,br-guest"), "{t}");
    assert!(t.contains("ranges: built-in, 9 IPv4 + 5 IPv6"), "{t}");
    assert!(t.contains("PROBLEM nft: /nonexistent/nft"), "{t}");
    let s = line("socks5");
    assert!(s.contains("cannot bind now"), "the address is taken: {s}");
    assert!(s.contains("user/password required (2 users)"), "{s}");
    assert!(!r.stdout.contains("secret1"), "no password is printed");
    assert_eq!(
        r.code,
        Some(1),
        "the exit status is the routes' (all dead here)"
    );
    drop(busy);
}

#[test]
fn everything_dead_exits_1() {
    let hole = BlackHole::new();
    let refused = closed_port();
    let r = check(&[
        "--dc-ip",
        &format!("2:{}", hole.addr()),
        "--tcp-dc-ip",
        &format!("2:127.0.0.1:{refused}"),
        "--tier-order",
        "ws,tcp",
        "--probe-timeout",
        "1",
    ]);
    assert_eq!(
        r.code,
        Some(1),
        "stdout:\n{}\nstderr:\n{}",
        r.stdout,
        r.stderr
    );
    for l in tier_lines(&r.stdout, "tcp") {
        assert_eq!(result(l), Some("refused"), "{l}");
    }
    for dc in ["DC2 ", "DC2m "] {
        assert!(
            r.stdout
                .lines()
                .any(|l| l.starts_with(dc) && l.contains("FAILED: no working route")),
            "{dc}: {}",
            r.stdout
        );
    }
    // Issue 23 §6: nothing answered on any tier: said as such, each tier with its failure.
    assert_eq!(
        diagnosis(&r.stdout),
        vec![
            "diagnosis: Telegram unreachable on every tier tried: ws (4 route(s): timeout), \
             tcp (2 route(s): refused)"
        ],
        "{}",
        r.stdout
    );
}

/// The `diagnosis:` lines of `check`'s output.
fn diagnosis(out: &str) -> Vec<&str> {
    out.lines()
        .filter(|l| l.starts_with("diagnosis:"))
        .collect()
}

/// Issue 23 §6: `check` could not tell a wrong secret from an unreachable Telegram. A peer
/// that takes the connection and answers our init by a close (an upstream MTProto proxy with
/// another secret does exactly that; here the fake TCP DC closes right after the init) is
/// `init-refused`, and the diagnosis says Telegram's side was reached and refused us — not
/// that it is unreachable — while the black-holed ws tier is plain timeout.
#[test]
fn an_init_answered_by_a_close_is_init_refused_not_unreachable() {
    let hole = BlackHole::new();
    let tcp = FakeDc::start_tcp(DcConfig::with_fault(Fault::CloseAfterUpgrade));
    let r = check(&[
        "--dc-ip",
        &format!("2:{}", hole.addr()),
        "--tcp-dc-ip",
        &format!("2:{}", tcp.addr()),
        "--tier-order",
        "ws,tcp",
        "--probe-timeout",
        "1",
    ]);
    let out = format!("stdout:\n{}\nstderr:\n{}", r.stdout, r.stderr);
    assert_eq!(r.code, Some(1), "{out}");
    for l in tier_lines(&r.stdout, "tcp") {
        assert_eq!(result(l), Some("init-refused"), "{l}\n{out}");
    }
    for l in tier_lines(&r.stdout, "ws") {
        assert_eq!(result(l), Some("timeout"), "{l}\n{out}");
    }
    let d = diagnosis(&r.stdout);
    assert_eq!(d.len(), 2, "{out}");
    assert!(
        d[0].starts_with("diagnosis: tcp: reached, but our init was refused on 2 route(s)"),
        "{out}"
    );
    assert_eq!(
        d[1], "diagnosis: no tier works (see the lines above)",
        "{out}"
    );
    assert!(!r.stdout.contains("unreachable"), "{out}");
}

/// Issue 23 §6, the field's case: an upstream MTProto proxy (a second instance of ours, no
/// masking, no drain) given with another secret than its own. It takes the connection and
/// answers our init by a close: `init-refused` and "reached, but our init was refused" —
/// where the same upstream with its own secret carries the probe.
#[test]
fn an_upstream_proxy_with_another_secret_is_init_refused() {
    let dc = FakeDc::start_tcp(DcConfig::default());
    let route = format!("2:{}", dc.addr());
    let up = common::Proxy::start(&[
        "--secret",
        common::SECRET,
        "--tcp-dc-ip",
        &route,
        "--tier-order",
        "tcp",
        "--no-mask",
        "--bad-client-drain",
        "0",
    ]);
    let wrong = "fedcba9876543210fedcba9876543210";
    let run = |secret: &str| {
        let chain = format!("127.0.0.1:{}:{secret}", up.addr().port());
        check(&[
            "--tier-order",
            "mtproto",
            "--mtproto-proxy",
            &chain,
            "--probe-timeout",
            "2",
        ])
    };
    let r = run(wrong);
    let out = format!(
        "stdout:\n{}\nstderr:\n{}\n{}",
        r.stdout,
        r.stderr,
        up.dump()
    );
    assert_eq!(r.code, Some(1), "{out}");
    let rows = tier_lines(&r.stdout, "mtproto");
    assert_eq!(rows.len(), 2, "{out}");
    for l in rows {
        assert_eq!(result(l), Some("init-refused"), "{l}\n{out}");
    }
    let d = diagnosis(&r.stdout);
    assert!(
        d[0].starts_with("diagnosis: mtproto: reached, but our init was refused on 2 route(s)"),
        "{out}"
    );
    // The same upstream with its own secret works: the secret was the fault.
    let r = run(common::SECRET);
    assert_eq!(r.code, Some(0), "stdout:\n{}\n{}", r.stdout, up.dump());
    assert_eq!(
        diagnosis(&r.stdout),
        vec!["diagnosis: Telegram reachable via mtproto"]
    );
}

/// Issue 23 §6: the local network down. In a user and network namespace whose loopback is
/// down, every connect fails in the OS with "network unreachable": the diagnosis blames this
/// host's network and names the OS error, not Telegram or the routes. Skipped loudly where
/// namespaces are refused.
#[test]
fn the_local_network_down_is_named_with_the_os_error() {
    let ok = std::process::Command::new("unshare")
        .args(["-rn", "true"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!("SKIPPED the_local_network_down_is_named_with_the_os_error: unshare -rn refused");
        return;
    }
    let ca = data_path("ca.pem").display().to_string();
    let mut cmd = std::process::Command::new("unshare");
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("TG_") {
            cmd.env_remove(k);
        }
    }
    // Loopback is down in the fresh namespace: 127.0.0.1 has no route either.
    let out = cmd
        .arg("-rn")
        .arg(common::bin())
        .args([
            "check",
            "--dc",
            "2",
            "--ca-file",
            &ca,
            "--tier-order",
            "ws,tcp",
        ])
        .args(["--dc-ip", "2:127.0.0.1:9", "--tcp-dc-ip", "2:127.0.0.1:9"])
        .args(["--probe-timeout", "1", "--cf-domain-list", "off"])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run check in a namespace");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    let d = diagnosis(&text);
    assert_eq!(d.len(), 1, "{text}");
    assert!(
        d[0].starts_with("diagnosis: this host's network is down: all 6 route(s)")
            && d[0].contains("ENETUNREACH"),
        "{text}"
    );
}

#[test]
fn worker_route_is_proved_by_a_res_pq_through_the_tunnel() {
    let dc = FakeDc::start_tcp(DcConfig::default());
    let worker = FakeDc::start_worker(DcConfig::default());
    let name = "check.workers.dev";
    let r = check_worker_tier(&dc, &worker, name, &[]);
    assert_eq!(
        r.code,
        Some(0),
        "stdout:\n{}\nstderr:\n{}",
        r.stdout,
        r.stderr
    );
    let w = tier_lines(&r.stdout, "worker");
    assert_eq!(w.len(), 2, "{}", r.stdout);
    for l in &w {
        assert_eq!(result(l), Some("OK"), "{l}");
        assert!(!l.contains(name), "Worker names are redacted: {l}");
    }
    assert_eq!(worker.requests(), 2);
    assert_eq!(
        dc.inits(),
        2,
        "each probe's relay init reached the DC through the tunnel"
    );
}

#[test]
fn unresolvable_worker_is_a_dns_failure_not_a_hang() {
    let worker = FakeDc::start_worker(DcConfig::default());
    let mut args: Vec<String> = vec![
        "--cf-worker-domain".into(),
        format!("nowhere.workers.dev:{}", worker.port()),
        "--tier-order".into(),
        "worker".into(),
        "--probe-timeout".into(),
        "1".into(),
    ];
    // The hosts file knows another name only, and the one nameserver is an unused loopback
    // address: the lookup fails or runs out of the probe timeout, and nothing leaves the host.
    let resolv = temp_dir().join("resolv.conf");
    std::fs::write(&resolv, "nameserver 127.0.0.9\n").expect("write resolv.conf");
    args.extend([
        "--hosts-file".to_string(),
        hosts_file(&["other.workers.dev"]).display().to_string(),
        "--resolv-conf".to_string(),
        resolv.display().to_string(),
    ]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let started = Instant::now();
    let r = check(&args);
    assert_eq!(
        r.code,
        Some(1),
        "stdout:\n{}\nstderr:\n{}",
        r.stdout,
        r.stderr
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    for l in tier_lines(&r.stdout, "worker") {
        assert_eq!(result(l), Some("dns"), "{l}");
    }
    assert_eq!(worker.requests(), 0);
}

#[test]
fn flags_help_and_usage_errors() {
    let r = run_bin(&["check", "--help"], &[], RUN_TIMEOUT);
    assert_eq!(r.code, Some(0));
    for word in ["--count", "--dc", "--probe-timeout", "Exit status"] {
        assert!(r.stdout.contains(word), "{word}: {}", r.stdout);
    }
    let r = run_bin(&["help", "check"], &[], RUN_TIMEOUT);
    assert_eq!(r.code, Some(0));
    assert!(r.stdout.contains("--count"));
    for (args, prefix) in [
        (&["check", "--count", "0"][..], "tg-ws-proxy: --count: "),
        (&["check", "--dc", "two"][..], "tg-ws-proxy: --dc: "),
        (
            &["check", "--frobnicate"][..],
            "tg-ws-proxy: unknown flag '--frobnicate'",
        ),
        (
            &["check", "--probe-timeout", "0"][..],
            "tg-ws-proxy: --probe-timeout: ",
        ),
    ] {
        let r = run_bin(args, &[], RUN_TIMEOUT);
        assert_eq!(r.code, Some(2), "{args:?}: {}", r.stderr);
        assert!(r.stderr.starts_with(prefix), "{args:?}: {}", r.stderr);
        assert!(r.stdout.is_empty(), "{args:?}: {}", r.stdout);
    }
}

/// `check` output is pasted into bug reports: like the logs, it must never show a Worker's
/// name, also not inside a passed-on error text (rustls names the host a certificate is "not
/// valid for") nor in a dependency's trace at `-v -v`.
#[test]
fn check_output_never_shows_the_worker_host() {
    let dc = FakeDc::start_tcp(DcConfig::default());
    let worker = FakeDc::start_worker(DcConfig::default());
    // The test certificate covers *.workers.dev only: this name fails TLS, named by rustls.
    let name = "secret.someone.workers.dev";
    let r = check_worker_tier(&dc, &worker, name, &["-v", "-v"]);
    let all = format!("stdout:\n{}\nstderr:\n{}", r.stdout, r.stderr);
    assert_eq!(r.code, Some(1), "{all}");
    assert!(all.contains("not valid for name"), "{all}");
    assert!(!all.contains(name), "{all}");
    assert!(!all.contains("someone"), "{all}");
}

#[test]
fn cfproxy_media_is_checked_under_both_names_in_media_order() {
    let front = FakeDc::start_tls_ws(DcConfig::default());
    let mut args: Vec<String> = vec![
        "--cf-domain".into(),
        format!("example.com:{}", front.port()),
        "--tier-order".into(),
        "cfproxy".into(),
        "--probe-timeout".into(),
        "3".into(),
    ];
    args.extend(name_args(&["kws2.example.com", "kws2-1.example.com"]));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let r = check(&args);
    assert_eq!(
        r.code,
        Some(0),
        "stdout:\n{}\nstderr:\n{}",
        r.stdout,
        r.stderr
    );
    let port = front.port();
    let targets = |route: &str| -> Vec<String> {
        lines(&r.stdout, route)
            .iter()
            .map(|l| {
                assert_eq!(result(l), Some("OK"), "{l}");
                l.split_whitespace().nth(2).unwrap_or_default().to_string()
            })
            .collect()
    };
    assert_eq!(
        targets("cfproxy:DC2"),
        vec![format!("kws2.ex…@127.0.0.1:{port}")],
        "{}",
        r.stdout
    );
    assert_eq!(
        targets("cfproxy:DC2m"),
        vec![
            format!("kws2-1.ex…@127.0.0.1:{port}"),
            format!("kws2.ex…@127.0.0.1:{port}")
        ],
        "{}",
        r.stdout
    );
    assert_eq!(front.snis().len(), 3, "one probe per name");
    assert!(!r.stdout.contains("example.com"), "{}", r.stdout);
}

/// `check --cfproxy-ws` lists the `cfproxy-ws` routes (`ws://` targets at `--cf-ws-port`) and
/// proves them over plain WebSocket, no TLS; without the switch the tier has no rows.
#[test]
fn cfproxy_ws_routes_are_checked_over_plain_ws_only_when_switched_on() {
    let front = FakeDc::start_plain_ws(DcConfig::default());
    let port = front.port().to_string();
    let mut args: Vec<String> = vec![
        "--cf-domain".into(),
        "example.com".into(),
        "--cf-ws-port".into(),
        port.clone(),
        "--tier-order".into(),
        "cfproxy-ws,tcp".into(),
        "--tcp-dc-ip".into(),
        format!("2:127.0.0.1:{}", closed_port()),
        "--probe-timeout".into(),
        "3".into(),
    ];
    args.extend(name_args(&["kws2.example.com"]));
    let off: Vec<&str> = args.iter().map(String::as_str).collect();
    let r = check(&off);
    assert!(
        tier_lines(&r.stdout, "cfproxy-ws").is_empty(),
        "{}",
        r.stdout
    );
    assert_eq!(front.connections(), 0);

    args.push("--cfproxy-ws".into());
    let on: Vec<&str> = args.iter().map(String::as_str).collect();
    let r = check(&on);
    let rows = lines(&r.stdout, "cfproxy-ws:DC2");
    assert_eq!(
        rows.len(),
        1,
        "stdout:\n{}\nstderr:\n{}",
        r.stdout,
        r.stderr
    );
    assert_eq!(result(rows[0]), Some("OK"), "{}", r.stdout);
    assert_eq!(
        rows[0].split_whitespace().nth(2),
        Some(format!("ws://kws2.ex…@127.0.0.1:{port}").as_str()),
        "{}",
        r.stdout
    );
    assert!(front.snis().is_empty(), "no TLS");
    assert!(front.upgrades() >= 1);
}

#[test]
fn a_route_that_freezes_after_16_kib_shows_as_stalled_with_the_bytes_it_let_through() {
    // Issue 19 §1: check pulls past the freeze size (--stall-probe-bytes), so a front that
    // answers resPQ and then freezes every connection is no longer reported OK.
    let ws = FakeDc::start_tls_ws(DcConfig::with_fault(Fault::FreezeAfterBytes(16 * 1024)));
    let tcp = FakeDc::start_tcp(DcConfig::default());
    let r = check(&[
        "--dc-ip",
        &format!("2:{}", ws.addr()),
        "--tcp-dc-ip",
        &format!("2:{}", tcp.addr()),
        "--tier-order",
        "ws,tcp",
        "--probe-timeout",
        "1.5",
    ]);
    let out = format!("stdout:\n{}\nstderr:\n{}", r.stdout, r.stderr);
    let ws_lines = tier_lines(&r.stdout, "ws");
    assert_eq!(ws_lines.len(), 4, "{out}");
    for l in &ws_lines {
        assert_eq!(result(l), Some("stalled"), "{l}\n{out}");
        let after: u64 = l
            .split("stalled after ")
            .nth(1)
            .and_then(|t| t.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no byte count in {l}\n{out}"));
        assert!((1..16 * 1024).contains(&after), "{l}");
    }
    for l in tier_lines(&r.stdout, "tcp") {
        assert_eq!(result(l), Some("OK"), "{l}\n{out}");
    }
    // The tcp route still carries both DCs.
    assert_eq!(r.code, Some(0), "{out}");
    // Issue 23 §6: the freezing tier is its own finding.
    let d = diagnosis(&r.stdout);
    assert_eq!(d.len(), 2, "{out}");
    assert!(
        d[0].starts_with("diagnosis: ws: freezes on 4 route(s)"),
        "{out}"
    );
    assert_eq!(d[1], "diagnosis: Telegram reachable via tcp", "{out}");
}

/// Issue 23 §6 for `probe`: a proxy reached with another secret answers the init by a close
/// (ours with no drain and no masking): CLOSED with nothing down, and the diagnosis says the
/// init was refused; the right secret gets its resPQ.
#[test]
fn probe_says_the_init_was_refused_for_a_wrong_secret() {
    let dc = FakeDc::start_tcp(DcConfig::default());
    let route = format!("2:{}", dc.addr());
    let p = common::Proxy::start(&[
        "--secret",
        common::SECRET,
        "--tcp-dc-ip",
        &route,
        "--tier-order",
        "tcp",
        "--no-mask",
        "--bad-client-drain",
        "0",
    ]);
    let server = p.addr().to_string();
    let probe = |secret: &str| {
        run_bin(
            &["probe", &server, "--secret", secret, "--timeout", "2"],
            &[],
            RUN_TIMEOUT,
        )
    };
    let r = probe("fedcba9876543210fedcba9876543210");
    assert_eq!(r.code, Some(1), "{r:?}");
    assert!(
        r.stdout.contains(" CLOSED ") && r.stdout.contains("down=0B"),
        "{r:?}"
    );
    assert_eq!(diagnosis(&r.stdout).len(), 1, "{}", r.stdout);
    assert!(
        diagnosis(&r.stdout)[0]
            .starts_with("diagnosis: reached, but our init was answered by a close"),
        "{}",
        r.stdout
    );
    let r = probe(common::SECRET);
    assert_eq!(r.code, Some(0), "{r:?}\n{}", p.dump());
    assert!(diagnosis(&r.stdout).is_empty(), "{}", r.stdout);
}

/// Issue 23 §6 for `probe`: with the local network down (a namespace whose loopback is down)
/// the connect fails in the OS: NETWORK_DOWN, and the diagnosis names the OS error as it is.
#[test]
fn probe_names_the_local_network_down_with_the_os_error() {
    let ok = std::process::Command::new("unshare")
        .args(["-rn", "true"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!(
            "SKIPPED probe_names_the_local_network_down_with_the_os_error: unshare -rn refused"
        );
        return;
    }
    let out = std::process::Command::new("unshare")
        .arg("-rn")
        .arg(common::bin())
        .args(["probe", "127.0.0.1:9", "--raw", "--timeout", "1"])
        .env_remove("TG_SECRET")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run probe in a namespace");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains(" NETWORK_DOWN "), "{text}");
    let d = diagnosis(&text);
    assert_eq!(d.len(), 1, "{text}");
    assert!(
        d[0].starts_with("diagnosis: this host's network is down")
            && d[0].contains("(os error 101)"),
        "{text}"
    );
}
