//! Black-box tests of issue 22 part 2, Cloudflare edge addresses as routes (`--cf-ip`,
//! docs/design.md §4 "edges"): two fake Cloudflare edges on 127.0.0.2 and 127.0.0.3 (one port,
//! as real edges share 443) serve the same Worker name, which does not resolve at all (the
//! routes dial the edges, SNI and Host unchanged). The edge at 127.0.0.2 freezes every session
//! after 16 KiB; sessions must end up on 127.0.0.3 and `ctl status --json` must show the first
//! edge frozen with its reason and the second one ok; with startup probes the frozen edge is
//! found by a pulling probe before any client. A bad `--cf-ip` stops the start.

mod common;

use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use common::ctl::Ctl;
use common::fakedc::{DcConfig, FakeDc, Fault};
use common::freezeclient::{self, Client};
use common::{data_path, name_args, run_bin, wait_until, SECRET};

/// The Worker's name: in no hosts file, so it never resolves.
const WORKER: &str = "w.workers.dev";
/// The freeze's size: bytes from the edge before everything stops.
const FREEZE: usize = 16 * 1024;

/// Two fake edges on one port: 127.0.0.2 (freezing) and 127.0.0.3 (healthy).
fn edges() -> (FakeDc, FakeDc) {
    edges_with(Fault::FreezeAfterBytes(FREEZE))
}

/// Two fake edges on one port: 127.0.0.2 with `fault`, 127.0.0.3 healthy.
fn edges_with(fault: Fault) -> (FakeDc, FakeDc) {
    for _ in 0..20 {
        let frozen = FakeDc::try_start_worker_at(
            "127.0.0.2:0".parse().unwrap(),
            DcConfig::with_fault(fault),
        )
        .expect("bind 127.0.0.2");
        let at: SocketAddr = format!("127.0.0.3:{}", frozen.port()).parse().unwrap();
        if let Ok(ok) = FakeDc::try_start_worker_at(at, DcConfig::default()) {
            return (frozen, ok);
        }
    }
    panic!("no port free on both 127.0.0.2 and 127.0.0.3");
}

#[test]
fn sessions_move_to_the_working_edge_and_status_shows_the_frozen_one() {
    let dc = FakeDc::start_tcp(DcConfig::default());
    let (frozen, ok) = edges();
    let ctl = Ctl::new();
    let mut args: Vec<String> = [
        "--tier-order",
        "worker",
        "--tcp-dc-ip",
        &format!("2:{}", dc.addr()),
        "--cf-worker-domain",
        &format!("{WORKER}:{}", frozen.port()),
        "--cf-ip",
        "127.0.0.2",
        "--cf-ip",
        "127.0.0.3",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(ctl.args());
    let p = common::ladder_proxy(&[], &args);
    let s = ctl.status(&p);
    let labels: Vec<String> = s["routes"]
        .as_array()
        .map(|r| r.iter().map(|r| r["label"].to_string()).collect())
        .unwrap_or_default();
    let runs = freezeclient::attempts(
        p.addr(),
        SECRET,
        Client::AskOnce(Duration::from_secs(30)),
        4,
        Duration::ZERO,
        true,
    )
    .unwrap_or_else(|e| panic!("{e}\n{}", p.dump()));
    let log = || format!("{labels:?}\n{runs:#?}\n{}", p.dump());
    let frozen_runs = runs.iter().filter(|a| !a.complete).count();
    assert!(frozen_runs <= 2, "{}", log());
    assert!(
        runs.iter().skip(frozen_runs).all(|a| a.complete),
        "a transfer after the edge was left did not complete: {}",
        log()
    );
    assert!(
        frozen.upgrades() >= 1,
        "the first edge was never tried: {}",
        log()
    );
    assert!(ok.upgrades() >= 1, "{}", log());
    // Status: the frozen edge frozen (its routes through 127.0.0.2), the other ok.
    let mut last = serde_json::Value::Null;
    let shown = wait_until(Duration::from_secs(10), || {
        last = ctl.status(&p);
        let e = &last["edges"];
        e[0]["address"] == "127.0.0.2"
            && e[0]["state"] == "frozen"
            && e[0]["why"] == "stalled"
            && e[0]["source"] == "given"
            && e[1]["address"] == "127.0.0.3"
            && e[1]["state"] == "ok"
    });
    assert!(shown, "{last}\n{}", log());
    let route = Ctl::route(&last, "worker:DC2 w…workers.dev@127.0.0.3");
    assert!(route["sessions"].as_u64().unwrap_or(0) >= 1, "{last}");
    let id = route["id"].clone();
    assert!(
        last["edges"][1]["routes"]
            .as_array()
            .is_some_and(|r| r.contains(&id)),
        "{last}"
    );
}

/// With startup probes on (the default outside this rig), an edge route's first probe pulls
/// past the freeze size: the freezing edge is found and shown frozen (`stalled`) before any
/// client arrives, and then no client session freezes at all — the edge was left without a
/// client paying for it.
#[test]
fn startup_probes_find_the_frozen_edge_before_any_client_pays() {
    let dc = FakeDc::start_tcp(DcConfig::default());
    let (frozen, ok) = edges();
    let ctl = Ctl::new();
    // Every production DC's Worker `dst` is the fake DC (startup probes try them all).
    let dsts: Vec<String> = [1, 2, 3, 4, 5, 203]
        .iter()
        .map(|n| format!("{n}:{}", dc.addr()))
        .collect();
    let mut args: Vec<String> = [
        "--tier-order",
        "worker",
        "--tcp-dc-ip",
        &dsts.join(","),
        "--cf-worker-domain",
        &format!("{WORKER}:{}", frozen.port()),
        "--cf-ip",
        "127.0.0.2,127.0.0.3",
        "--startup-probes",
        "on",
        "--probe-timeout",
        "3",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(ctl.args());
    let p = common::ladder_proxy(&[], &args);
    let mut last = serde_json::Value::Null;
    let found = wait_until(Duration::from_secs(20), || {
        last = ctl.status(&p);
        let e = &last["edges"];
        e[0]["state"] == "frozen" && e[0]["why"] == "stalled" && e[1]["state"] == "ok"
    });
    assert!(found, "{last}\n{}", p.dump());
    assert!(
        frozen.upgrades() >= 1,
        "probes reached the freezing edge: {}",
        p.dump()
    );
    assert_eq!(
        last["counters"]["accepted"].as_u64().unwrap_or(u64::MAX),
        0,
        "no client yet: {last}"
    );
    let runs = freezeclient::attempts(
        p.addr(),
        SECRET,
        Client::AskOnce(Duration::from_secs(30)),
        3,
        Duration::ZERO,
        true,
    )
    .unwrap_or_else(|e| panic!("{e}\n{}", p.dump()));
    assert!(
        runs.iter().all(|a| a.complete),
        "no session froze: {runs:#?}\n{}",
        p.dump()
    );
    assert!(ok.upgrades() >= 3, "{}", p.dump());
}

#[test]
fn a_bad_cf_ip_stops_the_start_naming_the_item() {
    for (bad, want) in [
        (
            "104.16.0.1/13",
            "--cf-ip: \"104.16.0.1/13\": host bits are set",
        ),
        ("cf.example", "--cf-ip: \"cf.example\": not an IP address"),
        (
            "1.2.3.4/40",
            "--cf-ip: \"1.2.3.4/40\": prefix length must be 0-32",
        ),
    ] {
        let o = Command::new(env!("CARGO_BIN_EXE_tg-ws-proxy"))
            .args([
                "run",
                "--secret",
                SECRET,
                "--cf-ip",
                "127.0.0.2",
                "--cf-ip",
                bad,
            ])
            .env_remove("TG_CF_IP")
            .output()
            .expect("spawn");
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{bad}: {err}");
        assert!(
            err.starts_with(&format!("tg-ws-proxy: {want}")),
            "{bad}: {err}"
        );
    }
}

#[test]
fn check_lists_the_routes_through_each_edge_and_which_edges_work() {
    let dc = FakeDc::start_tcp(DcConfig::default());
    let (bad, _ok) = edges_with(Fault::HttpStatus(403));
    let ca = data_path("ca.pem").display().to_string();
    let mut args: Vec<String> = [
        "check",
        "--dc",
        "2",
        "--ca-file",
        &ca,
        "--tier-order",
        "worker",
        "--tcp-dc-ip",
        &format!("2:{}", dc.addr()),
        "--cf-worker-domain",
        &format!("{WORKER}:{}", bad.port()),
        "--cf-ip",
        "127.0.0.2,127.0.0.3",
        "--probe-timeout",
        "3",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(name_args(&[])); // the Worker's name resolves nowhere
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let run = run_bin(&refs, &[], Duration::from_secs(30));
    let out = &run.stdout;
    let log = format!("{out}\n{}", run.stderr);
    let port = bad.port();
    for edge in ["127.0.0.2", "127.0.0.3"] {
        let route = format!("w…workers.dev@{edge}:{port}");
        assert!(
            out.lines()
                .any(|l| l.contains("worker:DC2 ") && l.contains(&route)),
            "no row for {route}: {log}"
        );
    }
    assert!(
        out.contains("cf edge 127.0.0.3: works (2 of 2 routes)"),
        "{log}"
    );
    assert!(
        out.lines()
            .any(|l| l.starts_with("cf edge 127.0.0.2: failed: ") && l.contains("403")),
        "{log}"
    );
    assert_eq!(run.code, Some(0), "DC 2 works through one edge: {log}");
}
