//! Black-box tests of docs/design.md §7 "Logs" (issue 19 §4: logs a router's logread ring
//! survives), where the log lines are the feature, so they are counted:
//! * out of descriptors (`RLIMIT_NOFILE` 64) with 40 clients looping, every repeatable line
//!   folds per kind to at most one per `--log-fold-interval` (6 s: 10 a minute), with counts;
//! * one DC address without a path (IPv6 in a network namespace where only loopback exists,
//!   so it fails at once with `ENETUNREACH`) is said once with the address and reason, never
//!   as "network unreachable", while the working DC's session lines go on.
//! * a route whose recovery probes keep failing the same way is warned about once, not once per
//!   cooldown (each time is still a `route` event).
//!
//! Owns only this file; the rig is tests/common (netns.rs for the namespace; skipped loudly
//! where namespaces are refused). Loopback only. No fixed sleeps but the measured windows.

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::fakedc::{DcConfig, FakeDc};
use common::{client_opts, os_rng, Proxy, SECRET};
use tg_ws_proxy::applet::probe::{probe_once, Outcome};
use tg_ws_proxy::mtproto::obfs2::Tag;

/// The default `--log-fold-interval`.
const FOLD: Duration = Duration::from_secs(6);

/// The kind of a log line: its message with the fold count cut off and every number made `#`
/// (addresses, ports, times). `None` for lines that are not repeatable warnings: the close
/// line of a session that relayed (one per real session, by design) and the stats line.
fn kind(line: &str) -> Option<String> {
    let msg = line.split_once("] ").map_or(line, |(_, m)| m);
    if msg.starts_with("stats:") || (msg.starts_with("session ") && !msg.contains("connect=-")) {
        return None;
    }
    let msg = match msg.rfind(" similar ") {
        Some(i) => msg[..i].rsplit_once(" (").map_or(msg, |(m, _)| m),
        None => msg,
    };
    let mut out = String::new();
    let mut in_digits = false;
    for c in msg.chars() {
        if c.is_ascii_digit() {
            if !in_digits {
                out.push('#');
            }
            in_digits = true;
        } else {
            out.push(c);
            in_digits = false;
        }
    }
    Some(out)
}

/// Lines per kind among `lines`.
fn per_kind(lines: &[String]) -> BTreeMap<String, usize> {
    let mut kinds = BTreeMap::new();
    for l in lines {
        if let Some(k) = kind(l) {
            *kinds.entry(k).or_insert(0) += 1;
        }
    }
    kinds
}

/// Issue 19 §4: under `ulimit -n 64` with 40 clients looping, local errors (EMFILE on accept,
/// dials that cannot get a socket) wrote a line a second per kind (31-42 lines a minute, plus
/// the unserved close lines). Now each kind writes at most one line per fold interval (10 a
/// minute), and the lines let through say how many were folded.
#[test]
fn local_errors_under_a_low_nofile_limit_fold_per_kind_to_10_a_minute() {
    const WINDOW: Duration = Duration::from_secs(15);
    let dc = FakeDc::start_tcp(DcConfig::default());
    let route = format!("2:{}", dc.addr());
    let p = Proxy::start_with_nofile(
        &[
            "--secret",
            SECRET,
            "--tcp-dc-ip",
            &route,
            "--tier-order",
            "tcp",
            "--max-connections",
            "64",
            "--stats-interval",
            "0",
        ],
        64,
    );
    let before = p.logs().len();
    let stop = AtomicBool::new(false);
    let served = AtomicUsize::new(0);
    let began = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..40 {
            let (addr, stop, served) = (p.addr(), &stop, &served);
            s.spawn(move || {
                let mut rng = os_rng();
                while !stop.load(Ordering::Relaxed) {
                    let opts = client_opts(addr, SECRET, Tag::Intermediate, 2);
                    if probe_once(&opts, &mut rng).outcome == Outcome::Ok {
                        served.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
        // The measured window itself.
        std::thread::sleep(WINDOW);
        stop.store(true, Ordering::Relaxed);
    });
    let window = began.elapsed();
    let lines = p.logs()[before..].to_vec();
    let kinds = per_kind(&lines);
    let bound = (window.as_secs_f64() / FOLD.as_secs_f64()).ceil() as usize + 1;
    let report: Vec<String> = kinds.iter().map(|(k, n)| format!("{n:4}  {k}")).collect();
    eprintln!(
        "{:.1}s, {} sessions served, lines per kind (bound {bound}):\n{}",
        window.as_secs_f64(),
        served.load(Ordering::Relaxed),
        report.join("\n")
    );
    let local = |k: &&String| k.contains("local-error") || k.contains("Too many open files");
    assert!(
        kinds.keys().any(|k| local(&k)),
        "no local error at all: the test did not exhaust descriptors\n{}",
        lines.join("\n")
    );
    for (k, n) in &kinds {
        assert!(
            *n <= bound,
            "{n} lines of one kind in {window:?} (bound {bound}): {k}"
        );
    }
    assert!(
        lines
            .iter()
            .any(|l| l.contains(" similar suppressed)") || l.contains(" similar folded)")),
        "a folded line says how many it stands for\n{}",
        lines.join("\n")
    );
}

/// Issue 19 §4: one DC address without a path (IPv6 on a router without IPv6) flipped the
/// global network-down flag and wrote a "network unreachable" / "reachable again" pair at
/// every probe of it (every `--cooldown-base`, ~760 lines an hour at the default 10 s), while
/// the other DCs worked. Now it is said once, with the address and the reason, and never as
/// the network; the working DC's session lines go on. Time is compressed: 0.2 s cooldowns
/// over 6 s are 30 probe rounds, five minutes at the default.
#[test]
fn one_unreachable_dc_address_is_said_once_and_never_as_the_network() {
    common::netns::run_inside(
        "one_unreachable_dc_address_is_said_once_and_never_as_the_network",
        || {
            const WINDOW: Duration = Duration::from_secs(6);
            const V6: &str = "[2001:db8::4]:443";
            let dc = FakeDc::start_tcp(DcConfig::default());
            let dc2 = format!("2:{}", dc.addr());
            let dc4 = format!("4:{V6}");
            let p = common::tcp_tier_proxy(
                &dc2,
                &[
                    "--tcp-dc-ip",
                    &dc4,
                    "--startup-probes",
                    "on",
                    "--cooldown-base",
                    "0.2",
                    "--probe-timeout",
                    "1",
                    "--stats-interval",
                    "0",
                ],
            );
            let mut sessions = 0;
            let began = Instant::now();
            // The measured window: DC 2's clients keep working while DC 4's address is probed
            // every cooldown base.
            while began.elapsed() < WINDOW {
                let opts = client_opts(p.addr(), SECRET, Tag::Intermediate, 2);
                assert_eq!(probe_once(&opts, &mut os_rng()).outcome, Outcome::Ok);
                sessions += 1;
                std::thread::sleep(Duration::from_millis(100));
            }
            let said = p.lines_with(&[V6, "unreachable (network-unreachable)"]);
            let network = p.lines_with(&["network unreachable ("]).len()
                + p.lines_with(&["network reachable again"]).len();
            eprintln!(
                "{:.1}s: {} line(s) about {V6}, {network} network line(s), {sessions} DC2 \
                 sessions\n{}",
                began.elapsed().as_secs_f64(),
                said.len(),
                said.join("\n")
            );
            assert_eq!(said.len(), 1, "said once with the address\n{}", p.dump());
            assert_eq!(network, 0, "one address is not the network\n{}", p.dump());
            assert!(
                p.lines_with(&["] route tcp:DC4", " down for "]).is_empty(),
                "cooled down\n{}",
                p.dump()
            );
            // The working DC's lines stay: one per session.
            let dc2_lines = p.lines_with(&["session 127.0.0.1:", " DC2 via tcp "]).len();
            assert!(
                common::wait_until(Duration::from_secs(5), || {
                    p.lines_with(&["session 127.0.0.1:", " DC2 via tcp "]).len() >= sessions
                }),
                "{dc2_lines} of {sessions} DC2 session lines\n{}",
                p.dump()
            );
        },
    );
}

/// A route whose recovery probes keep failing the same way (its DC refuses every connection)
/// goes down again after each cooldown: every time is an event, but the WARN line is said once
/// — the first time — and again only if the failure class changes (a dead network would
/// otherwise log a line per route per cooldown, ~1,000 a day: the new-user trial's finding).
#[test]
fn a_route_that_keeps_failing_the_same_way_is_warned_once() {
    let dead = common::closed_port();
    let mut args: Vec<String> = vec!["--secret".into(), SECRET.into()];
    args.extend(common::LADDER_FAST.iter().map(|a| a.to_string()));
    args.extend([
        "--tier-order".to_string(),
        "tcp".into(),
        "--tcp-dc-ip".into(),
        format!("2:{dead}"),
        "--startup-probes".into(),
        "on".into(),
        "--probe-interval".into(),
        "0.2".into(),
    ]);
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let p = Proxy::start(&refs);
    let label = "tcp:DC2";
    let downs = |p: &Proxy| {
        p.events("route")
            .iter()
            .filter(|e| {
                e["to"] == "down" && e["label"].as_str().is_some_and(|l| l.starts_with(label))
            })
            .count()
    };
    assert!(
        common::wait_until(Duration::from_secs(20), || downs(&p) >= 4),
        "the route went down again after each cooldown: {} down events\n{}",
        downs(&p),
        p.dump()
    );
    let warned = p.lines_with(&["WARN", &format!("route {label}"), " down for "]);
    assert_eq!(warned.len(), 1, "said once, not per cooldown\n{}", p.dump());
}
