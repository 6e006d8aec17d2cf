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

/// Three Workers on two accounts (`a`, `b` on alice's, `c` alone)
/// in front of one fake DC, with `ctl` and `extra`.
fn three_workers_two_accounts(
    ctl: &common::ctl::Ctl,
    extra: &[&str],
) -> (FakeDc, [FakeDc; 3], Proxy) {
    let dc = FakeDc::start_tcp(DcConfig::default());
    let ws = [(); 3].map(|_| FakeDc::start_worker(DcConfig::default()));
    let names = [A_ALICE, B_ALICE, C_BOB];
    let mut args = vec![
        s("--tier-order"),
        s("worker"),
        s("--startup-probes"),
        s("off"),
        s("--tcp-dc-ip"),
        format!("2:{}", dc.addr()),
    ];
    for ((n, w), group) in names.iter().zip(&ws).zip(["@alice", "@Alice", ""]) {
        args.push(s("--cf-worker-domain"));
        args.push(format!("{n}:{}{group}", w.port()));
    }
    args.extend(ctl.args());
    args.extend(extra.iter().map(|a| s(a)));
    let p = common::ladder_proxy(&names, &args);
    (dc, ws, p)
}

// Custom domains (the test certificate covers `*.example.com`, one label deep): alice's two are
// grouped with `@alice`, `c` is an account of its own. The `NAME.ACCOUNT.workers.dev` grouping
// is `route::quota`'s unit test.
const A_ALICE: &str = "a.example.com";
const B_ALICE: &str = "b.example.com";
const C_BOB: &str = "c.example.com";

/// The `accounts` entry of `ctl status --json` whose name starts with `prefix`.
fn account(st: &serde_json::Value, prefix: &str) -> serde_json::Value {
    st["accounts"]
        .as_array()
        .and_then(|a| {
            a.iter()
                .find(|x| x["account"].as_str().is_some_and(|n| n.starts_with(prefix)))
        })
        .cloned()
        .unwrap_or_else(|| panic!("no account {prefix}: {st}"))
}

/// Issue 22 part 5: a Worker's 429 is its account's daily quota. Both of alice's Workers stop
/// getting sessions at once (the sibling is never dialled into the same wall), bob's Worker
/// takes them all, the hold is said once, and `ctl status` shows each account's state and the
/// requests it was sent today.
#[test]
fn a_429_holds_every_worker_of_the_account_and_the_other_account_serves() {
    let ctl = common::ctl::Ctl::new();
    let (_dc, [a, b, c], p) = three_workers_two_accounts(&ctl, &[]);
    sessions(&p, 6);
    assert!(
        a.upgrades() >= 1 && b.upgrades() >= 1 && c.upgrades() >= 1,
        "all three served before the 429: {} {} {}\n{}",
        a.upgrades(),
        b.upgrades(),
        c.upgrades(),
        p.dump()
    );
    let st = ctl.status(&p);
    assert_eq!(account(&st, "al")["state"], "serving", "{st}");
    let sent_alice = account(&st, "al")["requests_today"].as_u64().unwrap_or(0);
    assert!(
        sent_alice >= (a.requests() + b.requests()) as u64,
        "alice's requests counted: {sent_alice} < {} + {}\n{st}",
        a.requests(),
        b.requests()
    );
    // Alice's quota is spent; `a` says so with a 429 and no Retry-After. `b` would say the
    // same when asked (the quota is the account's); here it still answers, so a session that
    // reaches it shows that the hold did not cover it.
    a.set_fault(Fault::HttpStatus(429));
    let (ra, ub, uc) = (a.requests(), b.upgrades(), c.upgrades());
    sessions(&p, 10);
    assert!(a.requests() - ra >= 1, "a was asked\n{}", p.dump());
    // Only the plan that met the 429 may have gone on to `b` (it was planned before the hold).
    assert!(
        b.upgrades() - ub <= 1,
        "b got sessions after its account's 429: {}\n{}",
        b.upgrades() - ub,
        p.dump()
    );
    assert!(c.upgrades() - uc >= 9, "c served the rest\n{}", p.dump());
    let st = ctl.status(&p);
    let alice = account(&st, "al");
    assert_eq!(alice["state"], "held", "{st}");
    assert_eq!(alice["why"], "daily-quota", "{st}");
    assert_eq!(alice["workers"].as_array().map(Vec::len), Some(2), "{st}");
    let left = alice["held_for_ms"].as_u64().unwrap_or(0);
    assert!(
        left > 0 && left <= 86_400_000,
        "held until 00:00 UTC: {left} ms\n{st}"
    );
    let bob = account(&st, "c…");
    assert_eq!(bob["state"], "serving", "{st}");
    // Said once: one `account held` event for alice whatever the number of 429s.
    let holds = p
        .events("account")
        .iter()
        .filter(|e| e["state"] == "held")
        .count();
    assert_eq!(holds, 1, "{}", p.dump());
}

/// A 429 that says `Retry-After: 1` holds the account for that second only, not until
/// 00:00 UTC: then its other Worker takes sessions again.
#[test]
fn an_accounts_hold_follows_retry_after_and_ends() {
    let ctl = common::ctl::Ctl::new();
    let (_dc, [a, b, _c], p) = three_workers_two_accounts(&ctl, &[]);
    a.set_fault(Fault::HttpRetryAfter {
        status: 429,
        secs: 1,
    });
    // Until a plan meets `a`'s 429 (the round robin reaches it within three sessions).
    sessions(&p, 3);
    assert!(a.requests() >= 1, "{}", p.dump());
    let st = ctl.status(&p);
    let alice = account(&st, "al");
    assert_eq!(
        (&alice["state"], &alice["why"]),
        (&"held".into(), &"retry-after".into()),
        "{st}"
    );
    assert!(
        alice["held_for_ms"].as_u64().is_some_and(|ms| ms <= 1_000),
        "{st}"
    );
    // The limit is over (a 429 again would hold the account again, said anew).
    a.set_fault(Fault::None);
    assert!(
        wait_until(WAIT, || account(&ctl.status(&p), "al")["state"]
            == "serving"),
        "the hold ends after Retry-After\n{}",
        p.dump()
    );
    let ub = b.upgrades();
    sessions(&p, 6);
    assert!(b.upgrades() > ub, "b serves again\n{}", p.dump());
}
