//! Unit tests of a reload's rules (`Ladder::reconfigure`) and of shutdown (`Ladder::stop`):
//! unchanged routes keep what they learned, removed ones are retired, new ones are created,
//! Worker budgets follow their endpoint, and a stopped ladder hands out nothing. Injected
//! time, no sockets.

use super::*;

/// A route that is Up with a warm upstream in its pool at `now`.
fn warm(l: &mut Ladder<Fake>, route: RouteId, now: u64) {
    probe_ok(l, route, now);
    l.observe(Observation::SessionStarted { route }, now);
    let fills = fills_of(&drain(l, now));
    assert!(fills.contains(&route), "{fills:?}");
    l.fill_ready(route, Fake::default(), now, now + 5);
    assert_eq!(l.pool_len(route).0, 1);
}

#[test]
fn an_unchanged_route_keeps_its_health_schedule_and_pool_across_a_reload() {
    let c = cfg();
    let mut l = ladder(&c);
    let (ws, worker, tcp) = ids(&mut l);
    warm(&mut l, ws, 0);
    let State::Down { until } = fail(&mut l, tcp, Failure::Refused, 10).unwrap().to else {
        panic!("tcp not down")
    };
    let sched = l.sched(tcp);
    let mut c2 = c.clone();
    c2.hedge_delay = std::time::Duration::from_millis(900); // a change that touches no route
    assert_eq!(l.reconfigure(&c2, 20), 0);
    assert_eq!(ids(&mut l), (ws, worker, tcp), "same ids");
    assert!(is_up(&l, ws));
    assert_eq!(l.pool_len(ws).0, 1, "pool kept");
    assert_eq!(l.route(tcp).health.state(), State::Down { until });
    assert_eq!(l.sched(tcp), sched);
    assert_eq!(plan(&mut l, 30), vec![ws, worker]);
}

#[test]
fn a_removed_route_is_retired_never_planned_probed_or_filled_and_its_news_is_ignored() {
    let c = cfg();
    let mut l = ladder(&c);
    let (ws, worker, tcp) = ids(&mut l);
    warm(&mut l, worker, 0);
    let mut c2 = c.clone();
    c2.worker_domains.clear();
    assert_eq!(l.reconfigure(&c2, 100), 1);
    assert!(l.retired(worker) && !l.retired(ws) && !l.retired(tcp));
    assert_eq!(plan(&mut l, 110), vec![ws, tcp]);
    assert_eq!(l.pool_len(worker), (0, 0), "its pool is closed");
    assert!(l.take_pooled(worker, 110).is_none());
    // A live session still on it reports: nothing changes, nothing gets scheduled.
    let before = l.route(worker).health.state();
    l.observe(Observation::SessionStarted { route: worker }, 120);
    first_byte(&mut l, worker, 120, 130);
    fail(&mut l, worker, Failure::Timeout, 140);
    l.observe(
        Observation::SessionFailed {
            route: worker,
            failure: Failure::Stalled,
        },
        150,
    );
    assert_eq!(l.route(worker).health.state(), before);
    assert_eq!(l.sched(worker), Sched::Idle);
    for now in [200, 400_000, 10_000_000] {
        let work = drain(&mut l, now);
        assert!(!probes_of(&work).contains(&worker), "probed at {now}");
        assert!(!fills_of(&work).contains(&worker), "filled at {now}");
    }
}

#[test]
fn a_retired_routes_running_probe_frees_its_job_slot_when_it_reports() {
    let mut c = cfg();
    c.startup_probes = true;
    let mut l = ladder(&c);
    let (_, worker, _) = ids(&mut l);
    let work = drain(&mut l, 0);
    assert!(probes_of(&work).contains(&worker));
    let running = l.in_flight();
    let mut c2 = c.clone();
    c2.worker_domains.clear();
    l.reconfigure(&c2, 10);
    l.observe(
        Observation::ProbeDone {
            route: worker,
            result: Ok(30),
        },
        20,
    );
    assert_eq!(l.in_flight(), running - 1);
    assert_eq!(l.sched(worker), Sched::Idle);
}

#[test]
fn a_changed_target_is_a_new_route_and_going_back_reuses_the_old_one() {
    let c = cfg();
    let mut l = ladder(&c);
    let (ws, worker, tcp) = ids(&mut l);
    fail(&mut l, tcp, Failure::Refused, 10);
    let mut c2 = c.clone();
    c2.tcp_addrs.insert(2, "127.0.0.5:443".parse().unwrap());
    c2.tier_order = vec![Tier::Tcp, Tier::Ws, Tier::Worker];
    l.reconfigure(&c2, 20);
    let now_ids = l.routes_for(DC2);
    assert_eq!(now_ids.len(), 3);
    let (tcp2, worker2) = (now_ids[0], now_ids[2]);
    assert!(tcp2 != tcp && l.retired(tcp));
    assert_eq!(l.route(tcp2).health.state(), State::Unknown, "a new route");
    assert_eq!(now_ids[1], ws, "ws unchanged, new tier order");
    // The Worker tunnels to the DC's address (`dst`), so its target moved with it.
    assert!(worker2 != worker && l.retired(worker));
    // Back to the first configuration: the old tcp route returns with what it learned.
    l.reconfigure(&c, 30);
    assert_eq!(ids(&mut l), (ws, worker, tcp));
    assert!(l.retired(tcp2) && l.retired(worker2) && !l.retired(tcp));
    assert!(matches!(l.route(tcp).health.state(), State::Down { .. }));
    // Toggling again creates nothing new.
    let total = l.table.routes.len();
    l.reconfigure(&c2, 40);
    l.reconfigure(&c, 50);
    assert_eq!(l.table.routes.len(), total);
}

#[test]
fn a_dc_no_longer_named_loses_its_routes() {
    let mut c = cfg();
    c.tcp_addrs.insert(7, "127.0.0.7:443".parse().unwrap());
    let mut l = ladder(&c);
    let dc7 = DcId::plain(7);
    let seven = l.routes_for(dc7);
    assert!(!seven.is_empty());
    let mut c2 = c.clone();
    c2.tcp_addrs.remove(&7);
    l.reconfigure(&c2, 10);
    assert!(seven.iter().all(|&r| l.retired(r)));
    assert!(l.routes_for(dc7).is_empty());
    assert!(l.plan(dc7, 20, &mut resolve).cands.is_empty());
}

#[test]
fn worker_budgets_follow_their_endpoint_and_a_new_worker_starts_full() {
    let c = cfg();
    let mut l = ladder(&c);
    let (_, worker, _) = ids(&mut l);
    let full = l.budgets_left(0)[0];
    assert!(full > 0);
    // A 429 on a background request blocks the Worker's budget for an hour.
    l.observe(
        Observation::ProbeDone {
            route: worker,
            result: Err((Failure::Http(429), Some(3600))),
        },
        50,
    );
    let spent = l.budgets_left(100)[0];
    assert_eq!(spent, 0, "blocked");
    let mut c2 = c.clone();
    c2.worker_domains.insert(
        0,
        CfEndpoint {
            host: "v.example.workers.dev".into(),
            port: 443,
        },
    );
    l.reconfigure(&c2, 100);
    let left = l.budgets_left(100);
    assert_eq!(left.len(), 2);
    assert_eq!(left[1], spent, "carried by host");
    assert_eq!(left[0], full, "new Worker");
    assert!(!l.retired(worker), "same Worker, same route");
}

#[test]
fn a_reload_to_pool_size_zero_closes_every_pool_and_stops_fills() {
    let c = cfg();
    let mut l = ladder(&c);
    let (ws, _, _) = ids(&mut l);
    warm(&mut l, ws, 0);
    let mut c2 = c.clone();
    c2.pool_size = 0;
    l.reconfigure(&c2, 10);
    assert_eq!(l.pool_len(ws), (0, 0));
    l.observe(Observation::SessionStarted { route: ws }, 20);
    assert!(fills_of(&drain(&mut l, 20)).is_empty());
}

#[test]
fn a_stopped_ladder_closes_its_pools_and_hands_out_nothing() {
    let mut c = cfg();
    c.startup_probes = true;
    let mut l = ladder(&c);
    let (ws, _, _) = ids(&mut l);
    warm(&mut l, ws, 0);
    assert_eq!(l.stop(), 1);
    assert_eq!(l.pool_len(ws), (0, 0));
    // Sessions still report; nothing is handed out and no deadline asks for a wake-up.
    fail(&mut l, ws, Failure::Timeout, 20);
    l.observe(
        Observation::SessionFailed {
            route: ws,
            failure: Failure::Stalled,
        },
        30,
    );
    assert_eq!(l.next_deadline(), None);
    for now in [40, 1_000_000] {
        assert!(drain(&mut l, now).is_empty());
    }
}
