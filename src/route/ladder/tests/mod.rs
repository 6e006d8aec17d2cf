//! Unit tests of `route::ladder`: every ladder rule, with injected time and no sockets. This file
//! holds the shared fixtures and the client-path rules (plans, proofs, hedging, what counts
//! against a route); `background.rs` the background rules (probe schedule, pools, budgets);
//! `under_fire.rs` the rules of the field faults (issue 10: closed after reply, pings, the 16 KB
//! freeze, a dead network); `reconfigure.rs` a reload's and a shutdown's rules; `ops.rs` the
//! operator actions (pin, unpin, probe now, snapshot); `workers.rs` how sessions spread over
//! several Workers; `deps.rs` the dependencies (one address without a path, a down outbound
//! proxy).

mod background;
mod cflist;
mod deps;
mod edges;
mod front;
mod outbound;
mod reconfigure;
mod under_fire;
mod workers;

mod ops;

use super::*;
use crate::config::{CfEndpoint, Tier};
use crate::error::Failure;
use crate::route::health::{Change, State};
use crate::route::pool::tests::Fake;

const DC2: DcId = DcId::plain(2);

/// ws (127.0.0.2) → worker (w.example.workers.dev, resolved to 127.0.0.3) → tcp (127.0.0.4),
/// pool cap 2, no startup probes unless asked.
fn cfg() -> Config {
    let mut c = Config::with_secrets(Vec::new());
    c.ws_addrs.clear();
    c.ws_addrs.insert(2, "127.0.0.2:443".parse().unwrap());
    c.tcp_addrs.insert(2, "127.0.0.4:443".parse().unwrap());
    c.worker_domains = vec![CfEndpoint {
        host: "w.example.workers.dev".into(),
        port: 443,
    }];
    c.tier_order = vec![Tier::Ws, Tier::Worker, Tier::Tcp];
    c.listen = "127.0.0.1:1443".parse().unwrap();
    c.startup_probes = false;
    c.pool_size = 2;
    c
}

fn ladder(c: &Config) -> Ladder<Fake> {
    Ladder::new(c, Rng::from_seed([9; 48]), 0)
}

fn resolve(_: &str) -> Option<IpAddr> {
    Some("127.0.0.3".parse().unwrap())
}

fn plan(l: &mut Ladder<Fake>, now: u64) -> Vec<RouteId> {
    let p = l.plan(DC2, now, &mut resolve);
    let mut ids: Vec<RouteId> = p.cands.iter().map(|c| c.route).collect();
    ids.dedup();
    ids
}

/// Ids of DC 2's ws, worker and tcp routes.
fn ids(l: &mut Ladder<Fake>) -> (RouteId, RouteId, RouteId) {
    let v = l.routes_for(DC2);
    (v[0], v[1], v[2])
}

fn fail(l: &mut Ladder<Fake>, route: RouteId, failure: Failure, now: u64) -> Option<Change> {
    l.observe(
        Observation::AttemptFailed {
            route,
            failure,
            retry_after: None,
        },
        now,
    )
}

fn probe_ok(l: &mut Ladder<Fake>, route: RouteId, now: u64) -> Option<Change> {
    l.observe(
        Observation::ProbeDone {
            route,
            result: Ok(30),
        },
        now,
    )
}

fn first_byte(l: &mut Ladder<Fake>, route: RouteId, dial_started: u64, now: u64) {
    l.observe(
        Observation::FirstByte {
            route,
            dial_started,
            rtt_ms: Some(20),
        },
        now,
    );
}

/// Runs `next_work` until it has nothing at `now`.
fn drain(l: &mut Ladder<Fake>, now: u64) -> Vec<Work> {
    let mut out = Vec::new();
    while let Some(w) = l.next_work(now, &mut resolve) {
        out.push(w);
        assert!(out.len() < 100, "next_work does not settle");
    }
    out
}

fn probes_of(work: &[Work]) -> Vec<RouteId> {
    work.iter()
        .filter_map(|w| match w {
            Work::Probe { route, .. } => Some(*route),
            _ => None,
        })
        .collect()
}

fn fills_of(work: &[Work]) -> Vec<RouteId> {
    work.iter()
        .filter_map(|w| match w {
            Work::Fill { route, .. } => Some(*route),
            _ => None,
        })
        .collect()
}

fn is_up(l: &Ladder<Fake>, r: RouteId) -> bool {
    l.route(r).health.state() == State::Up
}

#[test]
fn a_down_route_is_never_planned_for_a_client() {
    let c = cfg();
    let mut l = ladder(&c);
    let (ws, worker, tcp) = ids(&mut l);
    assert_eq!(plan(&mut l, 0), vec![ws, worker, tcp], "tier order");
    let ch = fail(&mut l, ws, Failure::Timeout, 1_000).unwrap();
    let State::Down { until } = ch.to else {
        panic!("not down: {ch:?}")
    };
    for now in [1_001, until - 1, until, until + 1, until + 3_600_000] {
        assert_eq!(plan(&mut l, now), vec![worker, tcp], "at {now}");
    }
}

#[test]
fn a_cooldown_expiry_schedules_a_probe_and_gives_the_client_nothing() {
    let c = cfg();
    let mut l = ladder(&c);
    let (ws, worker, tcp) = ids(&mut l);
    let State::Down { until } = fail(&mut l, ws, Failure::Refused, 100).unwrap().to else {
        panic!()
    };
    assert_eq!(l.sched(ws), Sched::Due(until));
    assert!(l.next_deadline().is_some_and(|d| d <= until));
    assert!(
        probes_of(&drain(&mut l, until - 1)).is_empty(),
        "not before the end"
    );
    let work = drain(&mut l, until);
    assert_eq!(probes_of(&work), vec![ws]);
    assert_eq!(l.sched(ws), Sched::Running);
    // The client at that very moment still does not get it.
    assert_eq!(plan(&mut l, until), vec![worker, tcp]);
    probe_ok(&mut l, ws, until + 40);
    assert_eq!(plan(&mut l, until + 41), vec![ws, worker, tcp]);
}

#[test]
fn only_a_probe_or_a_first_downstream_byte_brings_a_route_up() {
    let c = cfg();
    let mut l = ladder(&c);
    let (ws, _, tcp) = ids(&mut l);
    // A session starting, an upgrade in the background, a cancelled race: none is proof.
    l.observe(Observation::SessionStarted { route: ws }, 10);
    l.adopt(ws);
    l.fill_ready(ws, Fake::default(), 5, 20);
    l.observe(Observation::AttemptCancelled { route: ws }, 30);
    assert_eq!(l.route(ws).health.state(), State::Unknown);
    first_byte(&mut l, ws, 5, 40);
    assert!(is_up(&l, ws));
    assert!(probe_ok(&mut l, tcp, 50).is_some());
    assert!(is_up(&l, tcp));
}

#[test]
fn total_outage_through_a_warm_pool_pooled_sessions_teach_their_route() {
    // Regression (issue 10, item 1): pooled sessions never reported on their route, and every
    // refill counted as a success, so a front closing every session after the init stayed Up.
    let c = cfg();
    let mut l = ladder(&c);
    let (ws, worker, _) = ids(&mut l);
    probe_ok(&mut l, ws, 0);
    l.observe(Observation::SessionStarted { route: ws }, 10);
    let fills = fills_of(&drain(&mut l, 10));
    assert_eq!(fills, vec![ws]);
    l.fill_ready(ws, Fake::default(), 10, 60);
    assert_eq!(l.pool_len(ws), (1, 0));
    // A refill proves nothing: last_ok stays at the probe.
    assert_eq!(l.route(ws).last_ok, 0);
    let p = l.plan(DC2, 100, &mut resolve);
    assert_eq!(p.pooled, Some(ws));
    let (_, dial_started) = l.take_pooled(ws, 100).unwrap();
    assert_eq!(dial_started, 10);
    // The front closes right after the init, nothing came down.
    let end = SessionEnd {
        connected_at: 100,
        bytes_up: 72,
        bytes_down: 0,
        by_upstream: true,
        after_ping: false,
        pooled: false,
    };
    l.observe(Observation::SessionEnded { route: ws, end }, 120);
    assert_eq!(l.route(ws).health.state(), State::Suspect);
    assert_eq!(
        l.sched(ws),
        Sched::Doubt(120),
        "and a probe looks at it now"
    );
    l.observe(Observation::SessionEnded { route: ws, end }, 130);
    assert!(matches!(l.route(ws).health.state(), State::Down { .. }));
    assert_eq!(plan(&mut l, 140)[0], worker, "new sessions move on");
}

/// The same outage seen under load: the front's hang-up on a pooled upstream is read before
/// the client's request was relayed (0 bytes up). Still a failure of the route — our relay init
/// was the request — so the first such session makes it suspect; a dialled upstream ended by
/// the client before asking anything stays no evidence, as before.
#[test]
fn a_pooled_upstream_hung_up_before_the_clients_request_still_counts() {
    let c = cfg();
    let mut l = ladder(&c);
    let (ws, _, _) = ids(&mut l);
    probe_ok(&mut l, ws, 0);
    let end = |pooled, by_upstream| SessionEnd {
        connected_at: 100,
        bytes_up: 0,
        bytes_down: 0,
        by_upstream,
        after_ping: false,
        pooled,
    };
    l.observe(
        Observation::SessionEnded {
            route: ws,
            end: end(false, true),
        },
        110,
    );
    assert!(
        is_up(&l, ws),
        "a dialled upstream, nothing asked: no evidence"
    );
    l.observe(
        Observation::SessionEnded {
            route: ws,
            end: end(true, false),
        },
        115,
    );
    assert!(is_up(&l, ws), "the client left: no evidence");
    l.observe(
        Observation::SessionEnded {
            route: ws,
            end: end(true, true),
        },
        120,
    );
    assert_eq!(l.route(ws).health.state(), State::Suspect);
}

#[test]
fn hedge_delay_is_zero_while_the_first_probe_runs_then_the_default_then_twice_the_p95() {
    let c = cfg();
    let mut l = ladder(&c);
    let (ws, _, _) = ids(&mut l);
    assert_eq!(l.hedge_delay(ws), 250);
    // Its first probe is in flight and nothing is known yet: a client races at once.
    l.observe(
        Observation::SessionEnded {
            route: ws,
            end: SessionEnd {
                connected_at: 0,
                bytes_up: 1,
                bytes_down: 0,
                by_upstream: false,
                after_ping: false,
                pooled: false,
            },
        },
        0,
    );
    assert_eq!(probes_of(&drain(&mut l, 0)), vec![ws]);
    assert_eq!(l.hedge_delay(ws), 0);
    for i in 0..8 {
        l.observe(
            Observation::ProbeDone {
                route: ws,
                result: Ok(40 + i),
            },
            i * 10,
        );
    }
    assert_eq!(l.hedge_delay(ws), 2 * 47);
}

#[test]
fn a_hedge_goes_to_a_different_route() {
    let mut c = cfg();
    c.worker_domains.clear();
    let mut l = ladder(&c);
    let (ws, tcp) = {
        let v = l.routes_for(DC2);
        (v[0], v[1])
    };
    let p = l.plan(DC2, 0, &mut resolve);
    // ws has two host names (kws2, kws2-1) on one address, then tcp.
    let routes: Vec<RouteId> = p.cands.iter().map(|c| c.route).collect();
    assert_eq!(routes, vec![ws, ws, tcp]);
    let mut used = vec![false; 3];
    assert_eq!(p.next(&used, &[None, None]), Some(0));
    used[0] = true;
    assert_eq!(
        p.next(&used, &[Some(ws), None]),
        Some(2),
        "not ws's other name"
    );
    assert_eq!(
        p.next(&used, &[None, None]),
        Some(1),
        "after ws failed, its other name"
    );
}

#[test]
fn a_cancelled_loser_is_counted_cancelled_not_failed() {
    let c = cfg();
    let mut l = ladder(&c);
    let (ws, _, _) = ids(&mut l);
    for i in 0..10 {
        assert!(l
            .observe(Observation::AttemptCancelled { route: ws }, i)
            .is_none());
    }
    assert_eq!(l.counters.cancelled, 10);
    assert_eq!(l.route(ws).health.state(), State::Unknown);
    // Cut by the budget before a hedge delay: still only racing (reported cancelled).
    assert!(!l.budget_cut_is_evidence(ws, 2_900, 3_000));
    // Cut after running longer than the hedge delay: evidence against the route.
    assert!(l.budget_cut_is_evidence(ws, 0, 3_000));
    let ch = fail(&mut l, ws, Failure::Timeout, 3_000).unwrap();
    assert!(matches!(ch.to, State::Down { .. }));
}

#[test]
fn http_429_backs_off_the_worker_budget_and_honours_retry_after() {
    let c = cfg();
    let mut l = ladder(&c);
    let (_, worker, _) = ids(&mut l);
    let before = l.budgets_left(0)[0];
    assert!(before > 0);
    let ch = l
        .observe(
            Observation::ProbeDone {
                route: worker,
                result: Err((Failure::Http(429), Some(120))),
            },
            1_000,
        )
        .unwrap();
    let State::Down { until } = ch.to else {
        panic!()
    };
    assert!(until >= 1_000 + 120_000, "Retry-After honoured: {until}");
    assert_eq!(l.budgets_left(1_000), vec![0], "budget blocked");
    // Without Retry-After: the budget's own backoff and the health cooldown.
    let mut l = ladder(&c);
    let (_, worker, _) = ids(&mut l);
    let fill = Observation::FillFailed {
        route: worker,
        failure: Failure::Http(429),
        retry_after: None,
        client_dial: false,
    };
    let ch = l.observe(fill, 1_000).unwrap();
    assert!(matches!(ch.to, State::Down { .. }));
    assert_eq!(l.budgets_left(1_001), vec![0]);
    assert!(l.budgets_left(1_000 + 3_600_000)[0] > 0, "it ends");
    // A client's 429 is health's alone: the background budget is not blocked by it, so the
    // recovery probe can come when Retry-After says.
    let mut l = ladder(&c);
    let (_, worker, _) = ids(&mut l);
    let State::Down { until } = fail(&mut l, worker, Failure::Http(429), 1_000).unwrap().to else {
        panic!()
    };
    assert!(l.budgets_left(1_001)[0] > 0);
    assert_eq!(probes_of(&drain(&mut l, until)), vec![worker]);
    // The same for a client's losing dial that finished in the background with a 429.
    let mut l = ladder(&c);
    let (_, worker, _) = ids(&mut l);
    assert!(l.adopt(worker));
    let loser = Observation::FillFailed {
        route: worker,
        failure: Failure::Http(429),
        retry_after: None,
        client_dial: true,
    };
    assert!(l.observe(loser, 1_000).is_some());
    assert!(
        l.budgets_left(1_001)[0] > 0,
        "a client's 429 does not block the budget"
    );
}

#[test]
fn a_state_change_leaves_existing_sessions_alone() {
    // The ladder holds no session: a route going Down can only change what new clients get.
    let c = cfg();
    let mut l = ladder(&c);
    let (ws, worker, _) = ids(&mut l);
    first_byte(&mut l, ws, 0, 10);
    l.observe(Observation::SessionStarted { route: ws }, 10);
    fail(&mut l, ws, Failure::Timeout, 500);
    assert_eq!(plan(&mut l, 501)[0], worker);
    // The old session keeps relaying; when it ends normally (the client leaves after getting
    // its bytes) nothing more happens to the route.
    let before = l.route(ws).health.clone();
    let end = SessionEnd {
        connected_at: 10,
        bytes_up: 5_000,
        bytes_down: 900_000,
        by_upstream: false,
        after_ping: false,
        pooled: false,
    };
    assert!(l
        .observe(Observation::SessionEnded { route: ws, end }, 60_000)
        .is_none());
    assert_eq!(l.route(ws).health.state(), before.state());
}

#[test]
fn a_session_that_began_before_the_last_state_change_cannot_undo_it() {
    let c = cfg();
    let mut l = ladder(&c);
    let (ws, _, _) = ids(&mut l);
    fail(&mut l, ws, Failure::Timeout, 1_000);
    // Its dial began at 900 (before the Down at 1 000) and its first byte arrives later.
    first_byte(&mut l, ws, 900, 1_200);
    assert!(matches!(l.route(ws).health.state(), State::Down { .. }));
    // One dialled in the same millisecond as the change cannot either.
    first_byte(&mut l, ws, 1_000, 1_300);
    assert!(matches!(l.route(ws).health.state(), State::Down { .. }));
    // One dialled after it can.
    first_byte(&mut l, ws, 1_001, 1_400);
    assert!(is_up(&l, ws));
}

#[test]
fn a_prompt_close_by_a_client_that_got_bytes_is_not_a_route_failure() {
    let c = cfg();
    let mut l = ladder(&c);
    let (ws, _, _) = ids(&mut l);
    first_byte(&mut l, ws, 0, 10);
    let sched = l.sched(ws);
    for (by_upstream, down) in [(false, 100), (true, 100), (false, 0)] {
        let end = SessionEnd {
            connected_at: 10,
            bytes_up: 72,
            bytes_down: down,
            by_upstream,
            after_ping: false,
            pooled: false,
        };
        assert!(l
            .observe(Observation::SessionEnded { route: ws, end }, 20)
            .is_none());
    }
    assert!(is_up(&l, ws));
    // The client that asked and got nothing still makes the prober look now.
    assert_ne!(l.sched(ws), sched);
    assert_eq!(l.sched(ws), Sched::Doubt(20));
    // An upstream hang-up long after the start is an idle close, not a failure.
    let end = SessionEnd {
        connected_at: 10,
        bytes_up: 72,
        bytes_down: 0,
        by_upstream: true,
        after_ping: false,
        pooled: false,
    };
    assert!(l
        .observe(Observation::SessionEnded { route: ws, end }, 120_000)
        .is_none());
    assert!(is_up(&l, ws));
}

#[test]
fn a_budget_cut_is_judged_against_the_routes_own_hedge_delay() {
    // 668fa2a: a dial still running at the connect budget is a Timeout (Hard: one is enough
    // for Down) once it ran --hedge-delay (250 ms), whatever the route's own connect time. A
    // healthy route whose dials take ~400 ms (hedge delay 800 ms), started late in a client's
    // budget after earlier candidates failed, is taken Down by one client.
    let c = cfg();
    let mut l = ladder(&c);
    let (_, worker, _) = ids(&mut l);
    for t in 0..4u64 {
        l.observe(
            Observation::ProbeDone {
                route: worker,
                result: Ok(400),
            },
            t * 10,
        );
    }
    assert!(is_up(&l, worker));
    assert_eq!(
        l.hedge_delay(worker),
        800,
        "this route normally needs ~400 ms"
    );
    // A dial of it begun 300 ms before the budget ran out: normal for this route.
    assert!(
        !l.budget_cut_is_evidence(worker, 2_700, 3_000),
        "300 ms into a dial that normally takes 400 ms is called a timeout (Hard: Down)"
    );
}

#[test]
fn the_hedge_delay_never_exceeds_a_small_hedge_delay_flag_before_a_p95() {
    // bfcd23b says "never above --hedge-delay" before a p95 exists; the 50 ms floor wins over
    // a smaller flag, so --hedge-delay 10ms becomes 50 ms after the first proof.
    let mut c = cfg();
    c.hedge_delay = std::time::Duration::from_millis(10);
    let mut l = ladder(&c);
    let (ws, _, _) = ids(&mut l);
    assert_eq!(l.hedge_delay(ws), 10);
    probe_ok(&mut l, ws, 0);
    assert!(
        l.hedge_delay(ws) <= 10,
        "never above --hedge-delay: {}",
        l.hedge_delay(ws)
    );
}

#[test]
fn sessions_dialled_before_a_route_came_up_still_give_their_rtt_samples() {
    // Five sessions dial an unknown route at once (same ms, as a burst of clients does); the
    // first first byte brings it up at 1 050; the other four dialled before (or in the same
    // ms as) that change. They cannot undo anything — the route is already Up — so their RTT
    // samples count: a proven route must not lose them.
    let c = cfg();
    let mut l = ladder(&c);
    let (_, _, tcp) = ids(&mut l);
    let rtt = |l: &mut Ladder<Fake>, dial, now, rtt_ms| {
        l.observe(
            Observation::FirstByte {
                route: tcp,
                dial_started: dial,
                rtt_ms: Some(rtt_ms),
            },
            now,
        )
    };
    assert!(rtt(&mut l, 1_000, 1_050, 40).is_some(), "unknown → up");
    assert_eq!(l.route(tcp).health.last_change(), 1_050);
    for (i, at) in [1_051, 1_052, 1_053].into_iter().enumerate() {
        assert!(rtt(&mut l, 1_000, at, 41 + i as u64).is_none());
    }
    assert!(is_up(&l, tcp));
    assert_eq!(
        l.route(tcp).health.rtt_p95(),
        Some(43),
        "all four samples counted"
    );
    // One dialled in the very ms of the change counts as well.
    rtt(&mut l, 1_050, 1_090, 90);
    assert_eq!(l.route(tcp).health.rtt_p95(), Some(90));
    // A stale one on a route that went Down since still proves nothing, sample included.
    fail(&mut l, tcp, Failure::Refused, 2_000);
    rtt(&mut l, 1_990, 2_100, 500);
    assert!(matches!(l.route(tcp).health.state(), State::Down { .. }));
    assert_eq!(
        l.route(tcp).health.rtt_p95(),
        Some(90),
        "no sample from a stale session"
    );
}

/// The `mtproto` tier (issue 11): its route is planned with a dial to the upstream proxy, and
/// never pooled, however hot (an upstream closes a connection that sends no init in time).
#[test]
fn an_mtproto_route_is_planned_probed_and_never_pooled() {
    let mut c = cfg();
    c.mtproto_proxies = vec![crate::mtproto::upstream::MtprotoProxy::parse(
        "127.0.0.5:443:dd0123456789abcdef0123456789abcdef",
    )
    .unwrap()];
    c.tier_order = vec![Tier::Ws, Tier::Mtproto];
    let mut l = ladder(&c);
    let v = l.routes_for(DC2);
    let (ws, mt) = (v[0], v[1]);
    assert_eq!(l.route(mt).tier, Tier::Mtproto);
    probe_ok(&mut l, ws, 0);
    probe_ok(&mut l, mt, 0);
    let p = l.plan(DC2, 5, &mut resolve);
    let spec = &p
        .cands
        .iter()
        .find(|c| c.route == mt)
        .expect("planned")
        .spec;
    assert_eq!(spec.addr, "127.0.0.5:443".parse().unwrap());
    assert!(matches!(
        spec.kind,
        crate::net::dial::DialKind::Mtproto { .. }
    ));
    l.observe(Observation::SessionStarted { route: mt }, 10);
    l.observe(Observation::SessionStarted { route: ws }, 10);
    assert_eq!(
        fills_of(&drain(&mut l, 10)),
        vec![ws],
        "ws is filled, mtproto never"
    );
    // A failure cools it down like any route; the probe after the cooldown brings it back.
    fail(&mut l, mt, Failure::Refused, 20);
    assert!(matches!(l.route(mt).health.state(), State::Down { .. }));
    assert!(!plan(&mut l, 21).contains(&mt));
    probe_ok(&mut l, mt, 30_000);
    assert!(is_up(&l, mt));
}
