//! Unit tests of the ladder's background rules: the probe schedule (startup, recovery, doubt,
//! liveness), pools and their demand, Worker budgets and the job cap.

use super::*;

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
        after_ping: false,
        pooled: false,
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
        after_ping: false,
        pooled: false,
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

#[test]
fn a_silent_pooled_upstream_doubts_its_route_and_flushes_its_siblings_as_old_or_older() {
    // Issue 10, item 3: a NAT flush killed the pooled flows without an RST; a client took one,
    // asked, and waited for nothing.
    let mut c = cfg();
    c.pool_size = 4;
    let mut l = ladder(&c);
    let (ws, worker, tcp) = ids(&mut l);
    probe_ok(&mut l, ws, 0);
    for i in 0..3 {
        l.observe(Observation::SessionStarted { route: ws }, 10 + i);
    }
    assert_eq!(fills_of(&drain(&mut l, 20)).len(), 3);
    l.fill_ready(ws, Fake::default(), 20, 60); // the oldest sibling
    l.fill_ready(ws, Fake::default(), 26, 61); // dialled later, ready earlier: older
    l.fill_ready(ws, Fake::default(), 25, 62); // taken below (the newest)
    assert_eq!(l.plan(DC2, 100, &mut resolve).pooled, Some(ws));
    let (_, dial_started) = l.take_pooled(ws, 100).unwrap();
    assert_eq!(dial_started, 25, "the newest");
    // A younger sibling filled after the take: it did not live through the flush.
    l.observe(Observation::SessionStarted { route: ws }, 150);
    assert!(fills_of(&drain(&mut l, 150)).contains(&ws));
    l.fill_ready(ws, Fake::default(), 150, 190);
    assert_eq!(l.pool_len(ws).0, 3);
    let ch = l.observe(
        Observation::PooledSilent {
            route: ws,
            taken_at: 100,
        },
        2_100,
    );
    assert_eq!(
        ch.map(|c| c.to),
        Some(State::Suspect),
        "doubted, not taken down"
    );
    assert_eq!(
        l.pool_len(ws).0,
        1,
        "the two as old or older are closed, the younger kept"
    );
    // A second client that took a sibling before the blame: the same flush, not counted again.
    let again = Observation::PooledSilent {
        route: ws,
        taken_at: 100,
    };
    assert!(l.observe(again, 2_105).is_none());
    assert_eq!(l.route(ws).health.state(), State::Suspect);
    // Clients get no pooled upstream of it now and prefer a route not in doubt…
    let p = l.plan(DC2, 2_101, &mut resolve);
    assert_eq!(p.pooled, None);
    let order: Vec<RouteId> = p.cands.iter().map(|c| c.route).collect();
    assert_eq!(order.first(), Some(&worker));
    assert_eq!(order.last(), Some(&ws), "still planned as a last resort");
    assert!(order.contains(&tcp));
    // …and the prober looks at it now, although it carried a session a moment ago.
    assert_eq!(l.sched(ws), Sched::Doubt(2_105));
    assert_eq!(probes_of(&drain(&mut l, 2_105)), vec![ws]);
    // A probe that gets resPQ brings it back: fresh connections work.
    probe_ok(&mut l, ws, 2_200);
    assert!(is_up(&l, ws));
}

/// docs/design.md §4 rule 3: a quarantined route stays out for the whole quarantine. Neither a
/// session's first byte (a last-resort plan dialled it after it went down) nor a probe that was
/// already running when the quarantine began brings it back; the recovery probe handed out
/// after the quarantine ends does.
#[test]
fn flap_quarantine_is_lifted_only_by_a_probe_after_it_ends() {
    let mut c = cfg();
    c.health.jitter_pct = 0;
    c.health.quarantine_ms = 60_000;
    let mut l = ladder(&c);
    let (ws, _, _) = ids(&mut l);
    // Two flaps: down, proven again by a probe.
    for t in [1_000, 30_000] {
        assert!(!fail(&mut l, ws, Failure::Timeout, t).unwrap().quarantined);
        probe_ok(&mut l, ws, t + 11_000);
    }
    // A liveness probe is in flight when the third failure quarantines the route.
    l.probe_now(ws, 50_000).unwrap();
    assert_eq!(probes_of(&drain(&mut l, 50_000)), vec![ws]);
    let ch = fail(&mut l, ws, Failure::Timeout, 50_100).unwrap();
    assert!(ch.quarantined, "{ch:?}");
    let State::Down { until } = ch.to else {
        panic!("not down: {ch:?}")
    };
    assert_eq!(until, 50_100 + 60_000);
    // ~1 s later a session dialled after the change gets its first byte: no proof.
    first_byte(&mut l, ws, 50_500, 51_100);
    assert!(
        !is_up(&l, ws),
        "a session's first byte lifted the quarantine"
    );
    // The probe started before the quarantine succeeds: no proof either.
    assert_eq!(probe_ok(&mut l, ws, 51_200), None);
    assert!(!is_up(&l, ws), "an early probe lifted the quarantine");
    assert!(!plan(&mut l, 51_300).contains(&ws));
    // Nothing is probed during the quarantine; at its end the recovery probe runs.
    assert!(probes_of(&drain(&mut l, until - 1)).is_empty());
    first_byte(&mut l, ws, until - 500, until + 10);
    assert!(!is_up(&l, ws), "a session after the end is still no probe");
    assert_eq!(probes_of(&drain(&mut l, until + 20)), vec![ws]);
    let ch = probe_ok(&mut l, ws, until + 50).unwrap();
    assert_eq!(ch.to, State::Up);
    assert!(plan(&mut l, until + 60).contains(&ws));
}
