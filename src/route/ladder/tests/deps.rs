//! Ladder rules for dependencies (issue 19 §3, §4; `deps.rs`): one address without a path is
//! that address's fact (never the network's, planned last, no route cooled); a down outbound
//! proxy holds background work to one re-check per backoff step, bounds clients the same way,
//! and comes back on the first dial that gets past it.

use super::*;
use std::rc::Rc;

use crate::net::outbound::{Bypass, Outbound, OutboundProxy};

/// Issue 19 §4: one unreachable address (the tcp route's, as IPv6 on a router without IPv6)
/// set the global network-down flag at every probe and cleared it at every session on the
/// working routes: stall facts were ignored half the time. Now an hour of it leaves the flag
/// clear, cools nothing, and plans the address last once confirmed.
#[test]
fn one_unreachable_address_never_takes_the_network_down_and_is_planned_last() {
    let c = cfg();
    let mut l = ladder(&c);
    let (ws, worker, tcp) = ids(&mut l);
    assert!(fail(&mut l, tcp, Failure::NetUnreachable, 5).is_none());
    assert!(!l.network_down(), "one address is not the network");
    first_byte(&mut l, ws, 10, 40);
    for i in 1..=360u64 {
        let now = i * 10_000;
        let probe = Observation::ProbeDone {
            route: tcp,
            result: Err((Failure::NetUnreachable, None)),
        };
        assert!(l.observe(probe, now).is_none(), "no route cooled");
        assert!(!l.network_down(), "at {now}");
        first_byte(&mut l, ws, now + 1, now + 30);
        // The unreachable route's probes stay on their schedule (one per cooldown base).
        assert!(l.sched(tcp).at().is_some_and(|t| t <= now + 10_000));
    }
    assert_eq!(l.route(tcp).health.state(), State::Unknown, "never cooled");
    assert_eq!(plan(&mut l, 3_700_000), vec![ws, worker, tcp], "tried last");
    let probe = Observation::ProbeDone {
        route: tcp,
        result: Err((Failure::NetUnreachable, None)),
    };
    l.observe(probe, 3_700_001);
    assert_eq!(l.unreachable_addresses().len(), 1);
    // When it works again it is planned in its place.
    first_byte(&mut l, tcp, 3_700_010, 3_700_050);
    assert!(l.unreachable_addresses().is_empty());
    assert_eq!(
        plan(&mut l, 3_700_100),
        vec![ws, tcp, worker],
        "Up before Unknown again"
    );
}

/// `l` with an outbound proxy every route of [`cfg`] goes through.
fn with_proxy(mut l: Ladder<Fake>) -> Ladder<Fake> {
    let proxy = OutboundProxy::parse("socks5://127.0.0.9:1080").unwrap();
    l.set_outbound(Some(Rc::new(Outbound {
        proxy,
        bypass: Bypass::default(),
    })));
    l
}

/// Issue 19 §3: with the proxy stopped, pool refills and probes dialled it ~50 times a second.
/// Now background work through it waits: over 40 s of asking every 10 ms, with every
/// re-check failing, at most one piece of work per backoff step goes out (500 ms doubling to
/// 1.5 s, 80-100 % of each), and the first dial that gets past the proxy brings it back.
#[test]
fn background_work_waits_for_a_down_outbound_proxy_one_recheck_per_step() {
    let c = cfg();
    let mut l = with_proxy(ladder(&c));
    let (ws, _, _) = ids(&mut l);
    probe_ok(&mut l, ws, 0);
    l.observe(Observation::SessionStarted { route: ws }, 5);
    assert_eq!(fills_of(&drain(&mut l, 5)), vec![ws]);
    let down = Observation::FillFailed {
        route: ws,
        failure: Failure::ProxyUnreachable,
        retry_after: None,
        client_dial: false,
    };
    assert!(l.observe(down, 10).is_none());
    assert!(l.proxy_down().is_some());
    let mut out = Vec::new();
    for now in (10..40_010).step_by(10) {
        for w in drain(&mut l, now) {
            let obs = match w {
                Work::Fill { route, .. } => Observation::FillFailed {
                    route,
                    failure: Failure::ProxyUnreachable,
                    retry_after: None,
                    client_dial: false,
                },
                Work::Probe { route, .. } => Observation::ProbeDone {
                    route,
                    result: Err((Failure::ProxyUnreachable, None)),
                },
                Work::Sweep => continue,
            };
            out.push(now);
            l.observe(obs, now);
        }
    }
    assert!(
        out.len() <= 40_000 / 1_200 + 2,
        "{} dials in 40 s",
        out.len()
    );
    assert!(out.len() >= 40_000 / 1_500 - 2, "re-checked: {}", out.len());
    for w in out.windows(2) {
        assert!(w[1] - w[0] >= 400, "{w:?}");
    }
    assert!(
        out.windows(2).all(|w| w[1] - w[0] <= 1_510),
        "re-checked within the cap"
    );
    assert_eq!(l.route(ws).health.state(), State::Up, "no route cooled");
    // A client's dial through it is one of the re-checks, not one more.
    let next = l.proxy_down().unwrap().next_try;
    assert_eq!(l.proxy_may_dial(next - 1), Err(next));
    assert_eq!(l.proxy_may_dial(next), Ok(()));
    assert!(l.proxy_may_dial(next + 1).is_err());
    assert!(drain(&mut l, next + 1)
        .iter()
        .all(|w| matches!(w, Work::Sweep)));
    // That dial got past the proxy: it is back, and the pool refills at once.
    l.proxy_worked(next + 20, next);
    assert!(l.proxy_down().is_none());
    assert_eq!(fills_of(&drain(&mut l, next + 21)), vec![ws]);
}

/// Work that does not go through the proxy (bypassed, or no proxy at all) never waits for it.
#[test]
fn a_down_proxy_holds_only_what_goes_through_it() {
    let proxy = OutboundProxy::parse("socks5://127.0.0.9:1080").unwrap();
    let c = cfg();
    let mut l = ladder(&c);
    l.set_outbound(Some(Rc::new(Outbound {
        proxy,
        bypass: Bypass::parse(&["127.0.0.2".to_string()]).unwrap(),
    })));
    let (ws, _, tcp) = ids(&mut l);
    probe_ok(&mut l, ws, 0);
    let State::Down { until } = fail(&mut l, tcp, Failure::Refused, 1).unwrap().to else {
        panic!("tcp not down")
    };
    l.proxy_failed(Failure::ProxyUnreachable, "test", until - 100);
    // ws (127.0.0.2) is bypassed: its fill goes out; tcp's recovery probe through the proxy
    // waits for the re-check.
    l.observe(Observation::SessionStarted { route: ws }, until - 5);
    let work = drain(&mut l, until);
    assert_eq!(fills_of(&work), vec![ws]);
    assert!(probes_of(&work).is_empty(), "{work:?}");
    let next = l.proxy_down().unwrap().next_try;
    assert!(next > until, "the re-check was not due yet");
    assert_eq!(probes_of(&drain(&mut l, next)), vec![tcp]);
}

/// Issue 23 §3: off the network every route fails. The Telegram verdict is *unreachable* only
/// once the last of them failed (naming each tier), the network-down line of `route::reach`
/// that follows is folded into it, and the first route that works makes it *reachable* again
/// (the folded network line's return is folded too).
#[test]
fn the_telegram_verdict_waits_for_every_route_and_folds_the_network_line() {
    use crate::route::verdict::State as V;
    let c = cfg();
    let mut l = ladder(&c);
    let (ws, worker, tcp) = ids(&mut l);
    // Every route awaits its first result (as the startup probes leave them).
    for r in [ws, worker, tcp] {
        l.slots[r].sched = Sched::Due(0);
    }
    assert_eq!(l.telegram(0).0, V::Checking);
    fail(&mut l, ws, Failure::NetUnreachable, 1);
    fail(&mut l, worker, Failure::Timeout, 2);
    assert_eq!(l.telegram(2).0, V::Checking, "tcp still pending");
    fail(&mut l, tcp, Failure::NetUnreachable, 3);
    let (state, _, tried) = l.telegram(3);
    assert_eq!(state, V::Unreachable);
    let names: Vec<&str> = tried.iter().map(|t| t.tier.name()).collect();
    assert_eq!(names, vec!["ws", "worker", "tcp"]);
    // Re-checks after the start grace take the network down: said by the verdict already.
    fail(&mut l, ws, Failure::NetUnreachable, 20_000);
    fail(&mut l, tcp, Failure::NetUnreachable, 20_001);
    assert!(l.network_down());
    assert!(
        l.network_folded,
        "the network-down line was folded into the verdict"
    );
    assert_eq!(l.telegram(20_001).0, V::Unreachable);
    first_byte(&mut l, tcp, 30_000, 30_040);
    assert_eq!(l.telegram(30_040).0, V::Reachable);
    assert!(!l.network_down() && !l.network_folded);
}
