//! Black-box tests of several Workers (issue 11, docs/design.md §4 "Several Workers"): two
//! Worker look-alikes on loopback share the sessions; one answering 429, or one whose request
//! budget a probe spent, gets no new sessions and the other takes the load. And the cfproxy
//! tier's media order (docs/protocol.md §4.3): a media session tries `kwsN-1.<domain>` first,
//! the base name when there is no `-1` record; a non-media one only `kwsN.<domain>`.
//!
//! Owns only this file; the rig is tests/common. Loopback only: host names reach 127.0.0.1
//! through a test hosts file and an empty resolv.conf. No startup probes (a Worker's `dst`
//! for DCs 1, 3-5 would be Telegram's real addresses), so every request the look-alikes count
//! is a session's or the one probe a test asks for. No fixed sleeps.

mod common;

use std::path::Path;
use std::time::Duration;

use common::fakedc::{DcConfig, FakeDc, Fault};
use common::{client_opts, os_rng, run_bin, temp_dir, wait_until, Proxy, SECRET};
use tg_ws_proxy::applet::probe::{probe_once, Attempt, Outcome};
use tg_ws_proxy::mtproto::obfs2::Tag;

/// Bound on waits for a condition that should hold almost at once.
const WAIT: Duration = Duration::from_secs(5);
/// The two Workers' host names (in the test hosts file).
const W1: &str = "w1.workers.dev";
const W2: &str = "w2.workers.dev";

fn s(v: &str) -> String {
    v.to_string()
}

/// Two Worker look-alikes in front of one fake DC, and a proxy with tier order `worker` and
/// `extra` (a later flag wins).
fn two_workers(extra: &[String]) -> (FakeDc, FakeDc, FakeDc, Proxy) {
    let dc = FakeDc::start_tcp(DcConfig::default());
    let w1 = FakeDc::start_worker(DcConfig::default());
    let w2 = FakeDc::start_worker(DcConfig::default());
    let mut args = vec![
        s("--tier-order"),
        s("worker"),
        s("--startup-probes"),
        s("off"),
        s("--cf-worker-domain"),
        format!("{W1}:{}", w1.port()),
        s("--cf-worker-domain"),
        format!("{W2}:{}", w2.port()),
        s("--tcp-dc-ip"),
        format!("2:{}", dc.addr()),
    ];
    args.extend(extra.iter().cloned());
    let p = common::ladder_proxy(&[W1, W2], &args);
    (dc, w1, w2, p)
}

fn probe(p: &Proxy, dc: i16) -> Attempt {
    probe_once(
        &client_opts(p.addr(), SECRET, Tag::Intermediate, dc),
        &mut os_rng(),
    )
}

/// `n` sessions to DC 2 one after another, each to `resPQ`.
fn sessions(p: &Proxy, n: usize) {
    for i in 0..n {
        let a = probe(p, 2);
        assert_eq!(a.outcome, Outcome::Ok, "session {i}: {a:?}\n{}", p.dump());
    }
}

#[test]
fn two_healthy_workers_share_the_sessions() {
    let (dc, w1, w2, p) = two_workers(&[]);
    sessions(&p, 8);
    let (u1, u2) = (w1.upgrades(), w2.upgrades());
    // Alternating plans give 4 and 4; a hedge under load may add a loser's upgrade.
    assert!(
        u1 >= 3 && u2 >= 3 && u1 + u2 >= 8,
        "upgrades w1={u1} w2={u2}\n{}",
        p.dump()
    );
    assert_eq!(dc.inits(), 8, "every session reached the DC once");
    assert!(w1.violations().is_empty() && w2.violations().is_empty());
}

#[test]
fn a_worker_answering_429_gets_no_new_sessions_and_the_other_takes_the_load() {
    let (_dc, w1, w2, p) = two_workers(&[]);
    sessions(&p, 4);
    assert!(
        w1.upgrades() >= 1 && w2.upgrades() >= 1,
        "both served before the 429: w1={} w2={}\n{}",
        w1.upgrades(),
        w2.upgrades(),
        p.dump()
    );
    w1.set_fault(Fault::HttpRetryAfter {
        status: 429,
        secs: 60,
    });
    let (u1, r1, u2) = (w1.upgrades(), w1.requests(), w2.upgrades());
    sessions(&p, 8);
    assert_eq!(w1.upgrades(), u1, "no session upgraded on w1\n{}", p.dump());
    // At most the one session whose plan had w1 first saw the 429 (it moved on to w2); a
    // hedge may have tried w1 as a last resort once more.
    assert!(
        w1.requests() - r1 <= 2,
        "w1 kept getting requests: {}\n{}",
        w1.requests() - r1,
        p.dump()
    );
    assert!(w2.upgrades() - u2 >= 8, "{}", p.dump());
    let throttled = p.wait_event("route", WAIT, |e| {
        e["label"]
            .as_str()
            .is_some_and(|l| l.starts_with("worker:DC2"))
            && e["failure"].as_str().is_some_and(|f| f.contains("429"))
    });
    assert!(throttled.is_some(), "{}", p.dump());
}

#[test]
fn a_slow_worker_is_hedged_to_the_other_worker() {
    let (dc, w1, w2, p) = two_workers(&[]);
    // The first plan has w1 first; its upgrade waits 2 s, past the 0.1 s hedge delay.
    w1.set_delay(Duration::from_secs(2));
    let a = probe(&p, 2);
    assert_eq!(a.outcome, Outcome::Ok, "{a:?}\n{}", p.dump());
    assert!(a.ms < 1_500, "not hedged: {} ms\n{}", a.ms, p.dump());
    assert_eq!(w2.upgrades(), 1, "{}", p.dump());
    assert_eq!(dc.inits(), 1);
    assert!(
        wait_until(WAIT, || w1.requests() == 1),
        "w1 was dialled first: {}\n{}",
        w1.requests(),
        p.dump()
    );
}

/// `tg-ws-proxy ctl ARGS --control-socket SOCK`; its stdout (exit 0 asserted).
fn ctl(p: &Proxy, sock: &Path, args: &[&str]) -> String {
    let mut all = vec!["ctl"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--control-socket", sock.to_str().expect("UTF-8 path")]);
    let r = run_bin(&all, &[], Duration::from_secs(10));
    assert_eq!(r.code, Some(0), "ctl {args:?}: {r:?}\n{}", p.dump());
    r.stdout
}

fn status(p: &Proxy, sock: &Path) -> serde_json::Value {
    let out = ctl(p, sock, &["status", "--json"]);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("not JSON: {e}\n{out}"))
}

#[test]
fn a_worker_whose_budget_a_probe_spent_gets_no_new_sessions() {
    let sock = temp_dir().join("ctl.sock");
    // 50 requests/day: a burst of 1, the next one in ~29 min.
    let (_dc, w1, w2, p) = two_workers(&[
        s("--worker-budget"),
        s("50"),
        s("--control-socket"),
        sock.display().to_string(),
    ]);
    sessions(&p, 2);
    assert_eq!(
        (w1.upgrades(), w2.upgrades()),
        (1, 1),
        "alternating\n{}",
        p.dump()
    );
    // Route #0 is w1's DC 2 route (the first Worker, first in tier order).
    let v = status(&p, &sock);
    let label = v["routes"][0]["label"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(label.starts_with("worker:DC2 w1"), "{v:#}");
    assert_eq!(v["budgets"][0]["left"], 1, "{v:#}");
    ctl(&p, &sock, &["probe", "#0"]);
    assert!(
        wait_until(WAIT, || w1.upgrades() == 2),
        "the probe reached w1\n{}",
        p.dump()
    );
    let mut v = serde_json::Value::Null;
    assert!(
        wait_until(WAIT, || {
            v = status(&p, &sock);
            v["counters"]["probes_ok"] == 1
        }),
        "{v:#}"
    );
    assert_eq!(v["budgets"][0]["left"], 0, "w1's budget is spent: {v:#}");
    assert_eq!(v["budgets"][1]["left"], 1, "{v:#}");
    sessions(&p, 6);
    assert_eq!(w1.upgrades(), 2, "no session went to w1\n{}", p.dump());
    assert_eq!(w2.upgrades(), 7, "{}", p.dump());
}

/// A proxy with only the cfproxy tier through `example.com` at `front`, resolving `names`.
fn cf_proxy(front: &FakeDc, names: &[&str]) -> Proxy {
    let args = vec![
        s("--tier-order"),
        s("cfproxy"),
        s("--startup-probes"),
        s("off"),
        s("--cf-domain"),
        format!("example.com:{}", front.port()),
    ];
    common::ladder_proxy(names, &args)
}

#[test]
fn cfproxy_media_sessions_use_the_dash_one_name_first() {
    let front = FakeDc::start_tls_ws(DcConfig::default());
    let p = cf_proxy(&front, &["kws2.example.com", "kws2-1.example.com"]);
    let media = probe(&p, -2);
    assert_eq!(media.outcome, Outcome::Ok, "{media:?}\n{}", p.dump());
    let plain = probe(&p, 2);
    assert_eq!(plain.outcome, Outcome::Ok, "{plain:?}\n{}", p.dump());
    assert_eq!(
        front.snis(),
        vec!["kws2-1.example.com", "kws2.example.com"],
        "{}",
        p.dump()
    );
    let hosts: Vec<String> = front
        .hosts()
        .iter()
        .map(|h| h.split(':').next().unwrap_or_default().to_string())
        .collect();
    assert_eq!(hosts, vec!["kws2-1.example.com", "kws2.example.com"]);
    assert_eq!(
        front.init_dcs(),
        vec![(Tag::Intermediate, -2), (Tag::Intermediate, 2)]
    );
    // The session record names the media host (the private domain redacted).
    let rec = p.wait_event("session", WAIT, |e| {
        e["tier"] == "cfproxy"
            && e["target"]
                .as_str()
                .is_some_and(|t| t.contains("kws2-1.ex"))
    });
    assert!(rec.is_some(), "{:?}\n{}", p.sessions(), p.dump());
}

#[test]
fn cfproxy_media_without_a_dash_one_record_uses_the_base_name() {
    let front = FakeDc::start_tls_ws(DcConfig::default());
    let p = cf_proxy(&front, &["kws2.example.com"]);
    let media = probe(&p, -2);
    assert_eq!(media.outcome, Outcome::Ok, "{media:?}\n{}", p.dump());
    assert_eq!(front.snis(), vec!["kws2.example.com"], "{}", p.dump());
    assert_eq!(front.init_dcs(), vec![(Tag::Intermediate, -2)]);
}
