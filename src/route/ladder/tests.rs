//! Unit tests of `route::ladder`: every ladder rule, with injected time and no sockets.

use super::*;
use crate::config::CfEndpoint;
use crate::route::health::State;
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
fn budget_exhaustion_stops_probes_and_fills() {
    let mut c = cfg();
    c.worker_budget = 50; // one request per ~29 min, burst 1
    c.tier_order = vec![Tier::Worker];
    let mut l = ladder(&c);
    let worker = l.routes_for(DC2)[0];
    let interval = c.probe_interval.as_millis() as u64;
    l.observe(Observation::SessionStarted { route: worker }, 5);
    first_byte(&mut l, worker, 0, 10);
    assert_eq!(
        l.sched(worker),
        Sched::Due(5 + interval),
        "liveness from the first dial"
    );
    let t = 10 + 2 * interval; // no traffic since: the liveness probe is wanted
    assert_eq!(
        probes_of(&drain(&mut l, t)),
        vec![worker],
        "the one request"
    );
    probe_ok(&mut l, worker, t + 50);
    let t2 = t + 50 + 2 * interval;
    l.observe(Observation::SessionStarted { route: worker }, t2);
    let work = drain(&mut l, t2);
    assert!(
        probes_of(&work).is_empty() && fills_of(&work).is_empty(),
        "budget spent: no probe, no fill: {work:?}"
    );
    assert!(l.counters.deferred >= 1);
    assert!(matches!(l.sched(worker), Sched::Due(at) if at > t2));
}

#[test]
fn worker_pools_refill_only_when_sessions_start() {
    let c = cfg();
    let mut l = ladder(&c);
    let (_, worker, _) = ids(&mut l);
    probe_ok(&mut l, worker, 0);
    assert!(fills_of(&drain(&mut l, 1)).is_empty(), "cold");
    l.observe(Observation::SessionStarted { route: worker }, 10);
    assert_eq!(fills_of(&drain(&mut l, 10)), vec![worker]);
    l.fill_ready(worker, Fake::default(), 10, 50);
    l.take_pooled(worker, 60).unwrap();
    // The route is hot and the pool empty, but no session started since the fill.
    assert!(fills_of(&drain(&mut l, 70)).is_empty());
}

#[test]
fn pool_entries_age_out() {
    let c = cfg();
    let max_age = c.pool_max_age.as_millis() as u64;
    let mut l = ladder(&c);
    let (ws, _, _) = ids(&mut l);
    probe_ok(&mut l, ws, 0);
    l.observe(Observation::SessionStarted { route: ws }, 10);
    assert_eq!(fills_of(&drain(&mut l, 10)), vec![ws]);
    l.fill_ready(ws, Fake::default(), 10, 20);
    assert!(
        l.take_pooled(ws, 20 + max_age).is_none(),
        "too old to hand out"
    );
    assert_eq!(l.pool_len(ws), (0, 0));
    // And the sweep closes old entries the same way.
    assert_eq!(fills_of(&drain(&mut l, 20 + max_age)), vec![ws]);
    l.fill_ready(ws, Fake::default(), 20 + max_age, 30 + max_age);
    let s = l.sweep_pools(30 + 2 * max_age, false);
    assert_eq!((s.kept, s.aged), (0, 1));
}

#[test]
fn pools_grow_with_demand_up_to_the_cap() {
    let mut c = cfg();
    c.pool_size = 3;
    let mut l = ladder(&c);
    let (ws, _, _) = ids(&mut l);
    probe_ok(&mut l, ws, 0);
    l.observe(Observation::SessionStarted { route: ws }, 10);
    assert_eq!(
        fills_of(&drain(&mut l, 10)).len(),
        1,
        "one while demand is low"
    );
    for i in 0..5 {
        l.observe(Observation::SessionStarted { route: ws }, 20 + i);
    }
    assert_eq!(fills_of(&drain(&mut l, 30)).len(), 2, "up to the cap of 3");
    assert_eq!(l.pool_len(ws), (0, 3));
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
    };
    assert!(l
        .observe(Observation::SessionEnded { route: ws, end }, 120_000)
        .is_none());
    assert!(is_up(&l, ws));
}

#[test]
fn startup_probes_cover_the_production_dcs_paced_per_address() {
    let mut c = cfg();
    c.startup_probes = true;
    c.worker_domains.clear();
    c.ws_addrs.insert(4, "127.0.0.2:443".parse().unwrap());
    c.handshake_burst = 2; // background may start one at a time on an idle address
    let mut l = ladder(&c);
    let work = drain(&mut l, 0);
    let probed = probes_of(&work);
    // DCs 1–5 have a tcp route each; DCs 2 and 4 share one ws address, so only one of those
    // two ws probes starts now and the other waits for its pacing slot.
    let ws_now = probed
        .iter()
        .filter(|&&r| l.route(r).tier == Tier::Ws)
        .count();
    assert_eq!(ws_now, 1, "{probed:?}");
    assert_eq!(probed.len(), 6);
    let later = probes_of(&drain(&mut l, 20));
    assert_eq!(later.len(), 1);
    assert_eq!(l.route(later[0]).tier, Tier::Ws);
}

#[test]
fn background_work_is_capped_and_retried() {
    let mut c = cfg();
    c.handshake_pace = std::time::Duration::ZERO;
    for w in ["a", "b"] {
        c.worker_domains.push(CfEndpoint {
            host: format!("{w}.example.workers.dev"),
            port: 443,
        });
    }
    let mut l = ladder(&c);
    let mut routes = Vec::new();
    for dc in 1..=5u16 {
        for media in [false, true] {
            let mut id = DcId::plain(dc);
            id.media = media;
            routes.extend(l.routes_for(id));
        }
    }
    assert!(routes.len() > MAX_BACKGROUND);
    for &r in &routes {
        fail(&mut l, r, Failure::Refused, 0);
    }
    let far = 10_000_000;
    let work = drain(&mut l, far);
    assert_eq!(probes_of(&work).len(), MAX_BACKGROUND);
    assert_eq!(l.in_flight(), MAX_BACKGROUND);
    l.observe(
        Observation::NotStarted {
            route: probes_of(&work)[0],
            probe: true,
            failure: None,
        },
        far,
    );
    assert_eq!(l.in_flight(), MAX_BACKGROUND - 1);
    // The ones that found no slot were put off by RETRY_MS, not dropped; one slot is free.
    assert!(probes_of(&drain(&mut l, far)).is_empty());
    assert_eq!(probes_of(&drain(&mut l, far + RETRY_MS)).len(), 1);
    assert_eq!(l.in_flight(), MAX_BACKGROUND);
}

#[test]
fn a_probe_that_cannot_connect_at_all_is_a_failed_probe_and_backs_off() {
    // Review finding: a probe whose connect failed at once (network unreachable) was only
    // retried every second, never marked the route, and spent the Worker budget each time.
    let c = cfg();
    let mut l = ladder(&c);
    let (_, worker, _) = ids(&mut l);
    fail(&mut l, worker, Failure::Timeout, 0);
    let State::Down { until } = l.route(worker).health.state() else {
        panic!()
    };
    assert_eq!(probes_of(&drain(&mut l, until)), vec![worker]);
    let obs = Observation::NotStarted {
        route: worker,
        probe: true,
        failure: Some(Failure::Refused),
    };
    l.observe(obs, until);
    assert_eq!(l.in_flight(), 0);
    let State::Down { until: next } = l.route(worker).health.state() else {
        panic!("{:?}", l.route(worker).health.state())
    };
    assert!(next > until + 10_000, "the cooldown grew: {until} → {next}");
    assert_eq!(l.sched(worker), Sched::Due(next));
}

#[test]
fn asked_and_got_nothing_probes_a_route_that_carried_traffic_a_moment_ago() {
    // Review finding: the probe a doubtful session asked for was postponed by the
    // recent-traffic shortcut (the route had just been proven), so a Worker answering 101 but
    // no longer reaching Telegram kept getting sessions for up to --probe-interval.
    let c = cfg();
    let mut l = ladder(&c);
    let (_, worker, _) = ids(&mut l);
    l.observe(Observation::SessionStarted { route: worker }, 900);
    first_byte(&mut l, worker, 0, 1_000);
    let end = SessionEnd {
        connected_at: 1_500,
        bytes_up: 72,
        bytes_down: 0,
        by_upstream: false,
    };
    l.observe(Observation::SessionEnded { route: worker, end }, 2_000);
    assert_eq!(probes_of(&drain(&mut l, 2_000)), vec![worker]);
    // A plain liveness schedule is still postponed by recent traffic.
    l.observe(
        Observation::ProbeDone {
            route: worker,
            result: Ok(30),
        },
        2_050,
    );
    let interval = c.probe_interval.as_millis() as u64;
    // Sessions keep it busy: when the liveness probe falls due, the recent traffic postpones
    // it (the shortcut a doubt skips).
    let due = l.sched(worker).at().expect("liveness scheduled");
    l.observe(Observation::SessionStarted { route: worker }, due - 100);
    first_byte(&mut l, worker, due - 100, due - 90);
    assert!(
        probes_of(&drain(&mut l, due)).is_empty(),
        "postponed by traffic"
    );
    let Some(at) = l.sched(worker).at() else {
        panic!("{:?}", l.sched(worker))
    };
    assert!(at > due + interval / 2, "liveness is sparse: {at}");
}

#[test]
fn doubt_probes_are_answered_at_most_once_per_cooldown_base() {
    // Review finding: every session that asked and got nothing forced a probe, so a storm of
    // them spent a Worker's budget probe by probe.
    let c = cfg();
    let base = c.health.base_ms;
    let mut l = ladder(&c);
    let (_, worker, _) = ids(&mut l);
    l.observe(Observation::SessionStarted { route: worker }, 900);
    first_byte(&mut l, worker, 900, 1_000);
    let mut probes = 0;
    let mut t = 2_000;
    while t < 2_000 + base {
        doubt_end(&mut l, worker, t - 500, t);
        for w in drain(&mut l, t) {
            if let Work::Probe { route, .. } = w {
                probes += 1;
                l.observe(
                    Observation::ProbeDone {
                        route,
                        result: Ok(30),
                    },
                    t + 10,
                );
            }
        }
        t += 1_000;
    }
    assert_eq!(probes, 1, "one doubt probe per --cooldown-base");
    doubt_end(&mut l, worker, t - 500, t);
    assert_eq!(
        probes_of(&drain(&mut l, t)),
        vec![worker],
        "and again after it"
    );
}

#[test]
fn a_route_no_client_uses_gets_no_liveness_probes() {
    // Review finding: every route the startup probes proved got a liveness probe every
    // --probe-interval forever, whether a client ever used it or not (Worker requests/day).
    let c = cfg();
    let mut l = ladder(&c);
    let (ws, worker, _) = ids(&mut l);
    probe_ok(&mut l, worker, 0);
    assert_eq!(
        l.sched(worker),
        Sched::Idle,
        "proven, unused: nothing scheduled"
    );
    // Once a session used it, the sparse liveness probe comes back.
    l.observe(Observation::SessionStarted { route: worker }, 10);
    first_byte(&mut l, worker, 10, 20);
    assert!(matches!(l.sched(worker), Sched::Due(_)));
    // A Down route still gets its recovery probe, used or not (else it would never return).
    fail(&mut l, ws, Failure::Refused, 30);
    assert!(matches!(l.sched(ws), Sched::Due(_)));
}

// ---- review 2: defects in the follow-ups to 05d263e (expected to FAIL until fixed) ----

fn doubt_end(l: &mut Ladder<Fake>, route: RouteId, connected_at: u64, now: u64) {
    let end = SessionEnd {
        connected_at,
        bytes_up: 72,
        bytes_down: 0,
        by_upstream: false,
    };
    l.observe(Observation::SessionEnded { route, end }, now);
}

#[test]
fn a_doubt_survives_a_probe_that_could_not_start() {
    // The doubt's probe is handed out, but the shell cannot start it (no socket: Local).
    // It is retried a second later — as a plain Due, so the recent-traffic shortcut
    // postpones it by up to --probe-interval and the doubt is lost.
    let c = cfg();
    let mut l = ladder(&c);
    let (_, worker, _) = ids(&mut l);
    l.observe(Observation::SessionStarted { route: worker }, 900);
    first_byte(&mut l, worker, 900, 1_000);
    doubt_end(&mut l, worker, 1_500, 2_000);
    assert_eq!(probes_of(&drain(&mut l, 2_000)), vec![worker]);
    let not_started = Observation::NotStarted {
        route: worker,
        probe: true,
        failure: Some(Failure::Local),
    };
    l.observe(not_started, 2_000);
    assert_eq!(
        probes_of(&drain(&mut l, 3_000)),
        vec![worker],
        "the doubt's probe is retried: {:?}",
        l.sched(worker)
    );
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
fn a_route_that_only_ever_loses_its_race_still_gets_liveness_probes() {
    // --tier-order tcp,ws. The tcp route is proven at start (startup probe), then black-holed.
    // Every client dials it first, hedges to ws, ws wins; a raw TCP loser is not adopted,
    // so nothing ever reports on the tcp route. Without a session it gets no liveness probe:
    // it stays Up and first in every plan for ever, and every client pays the hedge.
    let mut c = cfg();
    c.tier_order = vec![Tier::Tcp, Tier::Ws];
    let mut l = ladder(&c);
    let v = l.routes_for(DC2);
    let (tcp, ws) = (v[0], v[1]);
    probe_ok(&mut l, tcp, 0);
    probe_ok(&mut l, ws, 0);
    let interval = c.probe_interval.as_millis() as u64;
    let mut probed_tcp = false;
    let mut t = 1_000;
    while t < 4 * interval && !probed_tcp {
        assert_eq!(plan(&mut l, t)[0], tcp);
        let hedge = l.hedge_delay(tcp);
        l.observe(Observation::AttemptCancelled { route: tcp }, t + hedge + 20);
        l.observe(Observation::SessionStarted { route: ws }, t + hedge + 20);
        first_byte(&mut l, ws, t + hedge, t + hedge + 20);
        for w in drain(&mut l, t + hedge + 20) {
            if let Work::Probe { route, .. } = w {
                probed_tcp |= route == tcp;
                let r = if route == tcp {
                    Err((Failure::Timeout, None))
                } else {
                    Ok(20)
                };
                l.observe(Observation::ProbeDone { route, result: r }, t + hedge + 30);
            }
        }
        t += 10_000;
    }
    assert!(
        probed_tcp,
        "the tcp route, first in every plan and losing every race for {} s, was never probed",
        4 * interval / 1000
    );
}
