//! Black-box tests of the memory trim after a burst (`--mem-trim-delay`, issue 19 §5): the
//! proxy gives freed memory back once a burst of sessions has ended (`counters.memory_trims`
//! in `ctl status --json`), not while the sessions are live, not after a burst too small to
//! matter, and never with `--mem-trim-delay 0`. How much comes back is a benchmark
//! (`make bench-returned`, BENCHMARKS.md), not a test: these assert the decision and its
//! effect on the counters.
//!
//! Owns only this file; the rig is tests/common. Loopback only (127.0.0.1 and a unix socket in
//! the test's temp dir). No fixed sleeps: waits poll a condition (the proxy's own uptime
//! included) against a deadline.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::fakedc::{DcConfig, FakeDc};
use common::{client_opts, os_rng, run_bin, tcp_tier_proxy, temp_dir, wait_until, Proxy, SECRET};
use tg_ws_proxy::applet::probe::MtClient;
use tg_ws_proxy::mtproto::obfs2::Tag;

/// The trim delay the tests run with, ms.
const DELAY_MS: u64 = 300;
/// Bound on every wait.
const WAIT: Duration = Duration::from_secs(15);

/// A tcp-tier proxy to a fake DC 2 with a control socket and `--mem-trim-delay delay`.
fn bed(delay: &str) -> (FakeDc, Proxy, PathBuf) {
    let dc = FakeDc::start_tcp(DcConfig::default());
    let sock = temp_dir().join("ctl.sock");
    let args = [
        "--control-socket",
        sock.to_str().expect("UTF-8 temp path"),
        "--mem-trim-delay",
        delay,
    ];
    let p = tcp_tier_proxy(&format!("2:{}", dc.addr()), &args);
    (dc, p, sock)
}

fn status(p: &Proxy, sock: &Path) -> serde_json::Value {
    let sock = sock.to_str().expect("UTF-8 temp path");
    let r = run_bin(
        &["ctl", "status", "--json", "--control-socket", sock],
        &[],
        Duration::from_secs(10),
    );
    assert_eq!(
        r.code,
        Some(0),
        "ctl status: {r:?}\nproxy log:\n{}",
        p.dump()
    );
    serde_json::from_str(&r.stdout).expect("status --json is JSON")
}

fn trims(p: &Proxy, sock: &Path) -> u64 {
    status(p, sock)["counters"]["memory_trims"]
        .as_u64()
        .expect("counters.memory_trims")
}

/// `n` sessions through the proxy, each having relayed one echo.
fn sessions(p: &Proxy, n: usize) -> Vec<MtClient> {
    let opts = client_opts(p.addr(), SECRET, Tag::Intermediate, 2);
    let mut rng = os_rng();
    (0..n)
        .map(|i| {
            let mut c = MtClient::connect_with(&opts, &mut rng)
                .unwrap_or_else(|e| panic!("session {i}: {e}\nproxy log:\n{}", p.dump()));
            c.send_packet(b"burst").expect("send");
            assert_eq!(c.recv_packet().expect("echo"), b"burst");
            c
        })
        .collect()
}

/// Waits until the proxy has `active` sessions, then until its own clock has run `ms` past
/// that moment; the status then.
fn after_quiet(p: &Proxy, sock: &Path, active: u64, ms: u64) -> serde_json::Value {
    let mut since = None;
    let ok = wait_until(WAIT, || {
        let s = status(p, sock);
        let up = s["uptime_ms"].as_u64().expect("uptime_ms");
        if s["sessions"]["active"].as_u64() != Some(active) {
            since = None;
            return false;
        }
        up >= *since.get_or_insert(up) + ms
    });
    assert!(
        ok,
        "never {active} sessions for {ms} ms\nproxy log:\n{}",
        p.dump()
    );
    status(p, sock)
}

#[test]
fn a_burst_that_ended_is_trimmed_once_and_a_live_one_never() {
    let (_dc, p, sock) = bed(&format!("{DELAY_MS}ms"));
    let burst = sessions(&p, 80);
    // All 80 live for more than the delay: no trim under load.
    let s = after_quiet(&p, &sock, 80, 3 * DELAY_MS);
    assert_eq!(s["counters"]["memory_trims"].as_u64(), Some(0), "{s}");
    drop(burst);
    assert!(
        wait_until(WAIT, || trims(&p, &sock) == 1),
        "no trim after the burst ended\nproxy log:\n{}",
        p.dump()
    );
    // Idle afterwards: once only.
    let s = after_quiet(&p, &sock, 0, 3 * DELAY_MS);
    assert_eq!(s["counters"]["memory_trims"].as_u64(), Some(1), "{s}");
    // A burst too small to matter (20 < 32 sessions gone) is not trimmed.
    drop(sessions(&p, 20));
    let s = after_quiet(&p, &sock, 0, 3 * DELAY_MS);
    assert_eq!(s["counters"]["memory_trims"].as_u64(), Some(1), "{s}");
}

#[test]
fn a_trim_delay_of_zero_never_trims() {
    let (_dc, p, sock) = bed("0");
    drop(sessions(&p, 80));
    let s = after_quiet(&p, &sock, 0, 3 * DELAY_MS);
    assert_eq!(s["counters"]["memory_trims"].as_u64(), Some(0), "{s}");
}
