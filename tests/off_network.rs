//! Black-box test of issue 23 §3 "Off-network trial": `tg-ws-proxy run --secret-file s` on a
//! machine without Telegram access. Run inside a user and network namespace of the test's own
//! that has only `lo` (tests/common/netns.rs): the embedded defaults (Telegram's public DC
//! addresses, the shared CF domain list on GitHub) are dialled as they would be on a laptop,
//! and every such dial fails at once with "network unreachable" — nothing leaves the machine.
//!
//! Asserted: the listening socket accepts within a second of the spawn; the link and its QR
//! code are printed on the terminal (stdout is a pseudo-terminal here, as on a laptop); the
//! verdict "Telegram unreachable" is one event and one line naming the tiers tried, and stays
//! so while every route is re-probed and the list fetch retried; `ctl status --json` shows the
//! verdict. Owns only this file. Skipped loudly where namespaces are refused.

mod common;

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::net::TcpStream;
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{netns, wait_until};

/// Bound on waits for what should happen within a few seconds.
const WAIT: Duration = Duration::from_secs(15);

/// The port `run` listens on by default (`--port`).
const DEFAULT_PORT: u16 = 1443;

/// A pseudo-terminal: (master, slave). The slave is `run`'s stdout, as a terminal would be.
fn pty() -> (File, File) {
    // SAFETY: plain libc calls on a descriptor we own; ptsname_r writes into our buffer.
    unsafe {
        let master = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY);
        assert!(master >= 0, "posix_openpt failed");
        assert_eq!(libc::grantpt(master), 0, "grantpt");
        assert_eq!(libc::unlockpt(master), 0, "unlockpt");
        let mut name = [0 as libc::c_char; 128];
        assert_eq!(libc::ptsname_r(master, name.as_mut_ptr(), name.len()), 0);
        let path = std::ffi::CStr::from_ptr(name.as_ptr())
            .to_string_lossy()
            .into_owned();
        let slave = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .expect("open the pty's slave");
        (File::from(OwnedFd::from_raw_fd(master)), slave)
    }
}

/// Collects the lines of `r` (a pipe or a pty master) into `into` on a thread of its own.
fn collect(r: impl Read + Send + 'static, into: Arc<Mutex<Vec<String>>>) {
    std::thread::spawn(move || {
        for l in BufReader::new(r).lines().map_while(Result::ok) {
            into.lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(l.trim_end_matches('\r').to_string());
        }
    });
}

fn snapshot(lines: &Arc<Mutex<Vec<String>>>) -> Vec<String> {
    lines.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// `ctl status --json` over `sock`.
fn status(sock: &Path) -> serde_json::Value {
    let r = common::run_bin(
        &[
            "ctl",
            "status",
            "--json",
            "--control-socket",
            sock.to_str().unwrap(),
        ],
        &[],
        WAIT,
    );
    assert_eq!(r.code, Some(0), "ctl status: {r:?}");
    serde_json::from_str(&r.stdout).unwrap_or_else(|e| panic!("not JSON: {e}\n{}", r.stdout))
}

/// The event stream's events of kind `kind`.
fn events(path: &Path, kind: &str) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["event"] == kind)
        .collect()
}

struct Kill(Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Issue 23: "trying `run` on a laptop without Telegram access needs about six flags; the
/// default run contacts Telegram and fetches the shared CF list and complains until it can."
/// Now the default run serves within a second, prints the link and QR code, and says once
/// that Telegram is unreachable and which tiers it tried — nothing more while every route is
/// re-probed and the list fetch retried.
#[test]
fn off_network_run_serves_in_a_second_prints_the_link_and_says_unreachable_once() {
    netns::run_inside(
        "off_network_run_serves_in_a_second_prints_the_link_and_says_unreachable_once",
        off_network_body,
    );
}

fn off_network_body() {
    // Only loopback here: every public address is unreachable, nothing leaves the machine.
    // (/proc/self/net is this namespace's; /sys/class/net would still be the host's.)
    let links: Vec<String> = std::fs::read_to_string("/proc/self/net/dev")
        .expect("/proc/self/net/dev")
        .lines()
        .filter_map(|l| l.split_once(':').map(|(name, _)| name.trim().to_string()))
        .collect();
    assert_eq!(links, vec!["lo".to_string()], "not an lo-only namespace");
    let dir = common::temp_dir();
    let (secret, sock, events_path) = (
        dir.join("s"),
        dir.join("ctl.sock"),
        dir.join("events.jsonl"),
    );
    let (master, slave) = pty();
    let mut cmd = Command::new(common::bin());
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("TG_") {
            cmd.env_remove(k);
        }
    }
    // The command of the trial, plus what the test reads (the control socket, the event
    // stream) and shorter re-check intervals, so the window below sees every route re-probed
    // and the list fetch retried a few times (neither touches the start).
    cmd.args(["run", "--secret-file"])
        .arg(&secret)
        .arg("--control-socket")
        .arg(&sock)
        .args(["--cooldown-base", "0.3", "--cf-domain-list-retry", "0.3"])
        .env("TG_EVENTS", &events_path)
        .stdin(Stdio::null())
        .stdout(slave)
        .stderr(Stdio::piped());
    let spawned = Instant::now();
    let mut child = cmd.spawn().expect("spawn run");
    // Our copy of the pty's slave goes with the command: the master sees EOF at the exit.
    drop(cmd);
    let (out, err) = (
        Arc::new(Mutex::new(Vec::new())),
        Arc::new(Mutex::new(Vec::new())),
    );
    collect(master, out.clone());
    collect(child.stderr.take().expect("stderr"), err.clone());
    let child = Kill(child);

    // Serving: the default listen address accepts within a second of the spawn.
    let accepted = wait_until(WAIT, || {
        TcpStream::connect(("127.0.0.1", DEFAULT_PORT)).is_ok()
    });
    let startup = spawned.elapsed();
    let log = || snapshot(&err).join("\n");
    assert!(accepted, "never accepted on :{DEFAULT_PORT}\n{}", log());
    eprintln!("startup: spawn to accepting on 127.0.0.1:{DEFAULT_PORT} in {startup:?}");
    assert!(
        startup < Duration::from_secs(1),
        "took {startup:?} to accept\n{}",
        log()
    );

    // The link and its QR code on the terminal.
    let printed = wait_until(WAIT, || {
        let o = snapshot(&out);
        o.iter()
            .any(|l| l.starts_with("https://t.me/proxy?server=127.0.0.1&port=1443&secret="))
            && o.iter().filter(|l| l.contains('█')).count() >= 20
    });
    let stdout = snapshot(&out).join("\n");
    assert!(
        printed,
        "no link and QR code on the terminal:\n{stdout}\n{}",
        log()
    );
    assert!(
        stdout.contains("tg://proxy?server=127.0.0.1&port=1443&secret=dd"),
        "{stdout}"
    );

    // The verdict: state first.
    let unreachable = wait_until(WAIT, || {
        status(&sock)["telegram"]["verdict"] == "unreachable"
    });
    let st = status(&sock);
    assert!(unreachable, "{st}\n{}", log());
    let tried: Vec<&str> = st["telegram"]["tried"]
        .as_array()
        .expect("tried")
        .iter()
        .map(|t| t["tier"].as_str().unwrap())
        .collect();
    assert_eq!(tried, vec!["ws", "tcp"], "{st}");
    for t in st["telegram"]["tried"].as_array().unwrap() {
        assert_eq!(t["failure"], "network-unreachable", "{st}");
        assert!(t["routes"].as_u64().unwrap() >= 1, "{st}");
    }

    // A window in which every route is re-probed several times and the list fetch retried.
    let routes = st["routes"].as_array().map_or(0, Vec::len) as u64;
    let rounds = wait_until(Duration::from_secs(30), || {
        let s = status(&sock);
        s["counters"]["probes_failed"].as_u64().unwrap_or(0) >= 4 * routes
            && s["shared_list"]["failures"].as_u64().unwrap_or(0) >= 2
    });
    let st = status(&sock);
    assert!(rounds, "no re-probes / retries: {st}\n{}", log());
    assert_eq!(st["telegram"]["verdict"], "unreachable", "{st}");
    drop(child);

    // Said once: one event, one line; no warning repeated.
    let said = events(&events_path, "telegram");
    assert_eq!(said.len(), 1, "{said:?}");
    assert_eq!(said[0]["to"], "unreachable", "{said:?}");
    // Said at start: the startup probes fail at once here (the OS refuses to send).
    let at = said[0]["ms"].as_u64().expect("ms");
    eprintln!("verdict: Telegram unreachable said {at} ms after start");
    assert!(at < 1_000, "{said:?}");
    let lines = snapshot(&err);
    let verdict_lines: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("Telegram unreachable"))
        .collect();
    // The line is the feature: it names the tiers tried and what they met.
    assert_eq!(verdict_lines.len(), 1, "{}", log());
    assert!(
        verdict_lines[0].contains("ws (2 routes: network-unreachable)")
            && verdict_lines[0].contains("tcp (5 routes: network-unreachable)"),
        "{}",
        verdict_lines[0]
    );
    // The only other warning is the list fetch's, said once though retried.
    let warns: Vec<&String> = lines.iter().filter(|l| l.contains("WARN")).collect();
    let list_warns = warns
        .iter()
        .filter(|l| l.contains("cf-domain-list"))
        .count();
    assert_eq!(list_warns, 1, "{}", log());
    assert_eq!(
        warns.len(),
        2,
        "more than the verdict and the list fetch:\n{}",
        log()
    );
}
