//! Sessions spread over several Workers (`spread.rs`, docs/design.md §4 "Several Workers"):
//! weighted round robin by budget left, nothing to a Worker that is cooling down, spent or
//! answered 429, hedges to the next Worker.

use super::*;
use crate::route::quota::Hold;

const DC4: DcId = DcId::plain(4);

/// Workers w1 and w2 on two accounts (alice, bob; both resolved to 127.0.0.3), then tcp;
/// `--worker-budget` 200/day (burst 4, one token per 432 s).
fn cfg2() -> Config {
    let mut c = cfg();
    c.worker_domains = vec![
        CfEndpoint {
            host: "w1.alice.workers.dev".into(),
            port: 443,
        },
        CfEndpoint {
            host: "w2.bob.workers.dev".into(),
            port: 443,
        },
    ];
    c.tcp_addrs.insert(4, "127.0.0.4:443".parse().unwrap());
    c.tier_order = vec![Tier::Worker, Tier::Tcp];
    c.worker_budget = 200;
    c
}

/// The routes of `dc` in a fresh plan at `now` (each call is one client's plan).
fn plan_dc(l: &mut Ladder<Fake>, dc: DcId, now: u64) -> Vec<RouteId> {
    let p = l.plan(dc, now, &mut resolve);
    let mut ids: Vec<RouteId> = p.cands.iter().map(|c| c.route).collect();
    ids.dedup();
    ids
}

/// The first route of `n` plans of `dc` at `now`.
fn firsts(l: &mut Ladder<Fake>, dc: DcId, n: usize, now: u64) -> Vec<RouteId> {
    (0..n).map(|_| plan_dc(l, dc, now)[0]).collect()
}

fn count(v: &[RouteId], r: RouteId) -> usize {
    v.iter().filter(|&&x| x == r).count()
}

/// DC `dc`'s (w1, w2, tcp) routes.
fn trio(l: &mut Ladder<Fake>, dc: DcId) -> (RouteId, RouteId, RouteId) {
    let v = l.routes_for(dc);
    assert_eq!(v.len(), 3);
    (v[0], v[1], v[2])
}

#[test]
fn two_healthy_workers_with_equal_budgets_alternate_and_hedge_to_each_other() {
    let c = cfg2();
    let mut l = ladder(&c);
    let (a, b, tcp) = trio(&mut l, DC2);
    probe_ok(&mut l, a, 0);
    probe_ok(&mut l, b, 0);
    let plans: Vec<Vec<RouteId>> = (0..8).map(|_| plan_dc(&mut l, DC2, 10)).collect();
    let firsts: Vec<RouteId> = plans.iter().map(|p| p[0]).collect();
    assert_eq!(firsts, [a, b, a, b, a, b, a, b]);
    // The other Worker is next in every plan: a hedge starts it.
    for p in &plans {
        let other = if p[0] == a { b } else { a };
        assert_eq!(p, &vec![p[0], other, tcp]);
    }
    // Both never proven (a media DC: no startup probe) spread the same way.
    let m = DcId::from_index(-2).unwrap();
    let (ma, mb, _) = trio(&mut l, m);
    assert_eq!(firsts_of(&mut l, m, 4), [ma, mb, ma, mb]);
    // One proven by a session, the other still unknown: still both, not all to the proven one.
    first_byte(&mut l, ma, 10, 20);
    assert!(is_up(&l, ma));
    let f = firsts_of(&mut l, m, 8);
    assert_eq!((count(&f, ma), count(&f, mb)), (4, 4), "{f:?}");
}

fn firsts_of(l: &mut Ladder<Fake>, dc: DcId, n: usize) -> Vec<RouteId> {
    firsts(l, dc, n, 30)
}

#[test]
fn sessions_follow_the_budget_left_in_proportion() {
    let c = cfg2();
    let mut l = ladder(&c);
    let (a, b, _) = trio(&mut l, DC2);
    assert_eq!(l.budgets_left(0), vec![4, 4]);
    // Background work spent 1 of w1's requests and 3 of w2's: 3 : 1 left.
    assert!(l.budgets[0].try_spend(0));
    for _ in 0..3 {
        assert!(l.budgets[1].try_spend(0));
    }
    assert_eq!(l.budgets_left(0), vec![3, 1]);
    let f = firsts(&mut l, DC2, 8, 0);
    assert_eq!((count(&f, a), count(&f, b)), (6, 2), "{f:?}");
    // Sessions do not spend the background budget.
    assert_eq!(l.budgets_left(0), vec![3, 1]);
}

#[test]
fn a_spent_worker_gets_no_new_sessions_until_its_budget_refills() {
    let c = cfg2();
    let mut l = ladder(&c);
    let (a, b, tcp) = trio(&mut l, DC2);
    for _ in 0..4 {
        assert!(l.budgets[1].try_spend(0));
    }
    assert_eq!(l.budgets_left(0), vec![4, 0]);
    for _ in 0..8 {
        assert_eq!(
            plan_dc(&mut l, DC2, 0),
            vec![a, b, tcp],
            "w2 only as a hedge"
        );
    }
    // One token back (200/day: 432 s): w2 takes sessions again, in proportion (4 : 1).
    let at = 432_000;
    assert_eq!(l.budgets_left(at), vec![4, 1]);
    let f = firsts(&mut l, DC2, 5, at);
    assert_eq!((count(&f, a), count(&f, b)), (4, 1), "{f:?}");
    // Both spent: they share the load alike (sessions never wait for the background budget).
    for _ in 0..4 {
        assert!(l.budgets[0].try_spend(at));
    }
    assert!(l.budgets[1].try_spend(at));
    assert_eq!(l.budgets_left(at), vec![0, 0]);
    let f = firsts(&mut l, DC2, 8, at);
    assert_eq!((count(&f, a), count(&f, b)), (4, 4), "{f:?}");
}

#[test]
fn a_worker_429_on_background_work_blocks_it_for_every_dc() {
    let c = cfg2();
    let mut l = ladder(&c);
    let (a2, b2, _) = trio(&mut l, DC2);
    let (a4, b4, tcp4) = trio(&mut l, DC4);
    // w2's probe toward DC 2 gets a 429: that route is down, w2's budget is blocked and w2 is
    // held, so its DC 4 route (healthy as far as anyone knows) is planned after everything.
    l.observe(
        Observation::ProbeDone {
            route: b2,
            result: Err((Failure::Http(429), None)),
        },
        1_000,
    );
    assert_eq!(l.budgets_left(1_001), vec![4, 0]);
    for _ in 0..6 {
        assert_eq!(plan_dc(&mut l, DC2, 1_001)[0], a2);
        assert_eq!(plan_dc(&mut l, DC4, 1_001), vec![a4, tcp4, b4]);
    }
}

#[test]
fn a_429_holds_every_worker_of_the_account_until_midnight_utc() {
    let mut c = cfg2();
    c.worker_domains[1].host = "w2.alice.workers.dev".into();
    let mut l = ladder(&c);
    // 2026-12-05 23:00 UTC: an hour to the reset.
    l.set_wall_ms(1_796_511_600_000);
    let (a2, b2, tcp2) = trio(&mut l, DC2);
    let (a4, b4, tcp4) = trio(&mut l, DC4);
    probe_ok(&mut l, a2, 0);
    probe_ok(&mut l, b2, 0);
    // w1's client dial toward DC 4 meets the daily quota (no Retry-After).
    l.observe(
        Observation::AttemptFailed {
            route: a4,
            failure: Failure::Http(429),
            retry_after: None,
        },
        1_000,
    );
    // Both of alice's Workers are held on every DC: planned after everything else.
    for now in [1_001, 1_000 + 3_600_000 - 1] {
        assert_eq!(plan_dc(&mut l, DC2, now)[0], tcp2, "w2 is held too");
        assert_eq!(plan_dc(&mut l, DC4, now)[0], tcp4);
    }
    let acc = l.accounts(1_001);
    assert_eq!(acc.len(), 1);
    assert_eq!(acc[0].held, Some((Hold::DailyQuota, 3_600_000 - 1)));
    // A background 429 would have blocked both budgets; this client's one did not.
    assert_eq!(l.budgets_left(1_001), vec![4, 4]);
    // 00:00 UTC: the quota is back and both serve again.
    let f = firsts(&mut l, DC2, 4, 1_000 + 3_600_000);
    assert_eq!((count(&f, a2), count(&f, b2)), (2, 2), "{f:?}");
    // A background 429 blocks every budget of the account; a probe that gets through ends the
    // hold at once.
    l.observe(
        Observation::ProbeDone {
            route: b4,
            result: Err((Failure::Http(429), Some(600))),
        },
        4_000_000,
    );
    assert_eq!(l.budgets_left(4_000_001), vec![0, 0]);
    assert_eq!(plan_dc(&mut l, DC2, 4_000_001)[0], tcp2);
    probe_ok(&mut l, a2, 4_000_002);
    assert_ne!(plan_dc(&mut l, DC2, 4_000_003)[0], tcp2, "serving again");
}

#[test]
fn a_client_429_holds_that_worker_from_new_sessions_until_its_cooldown_ends() {
    let c = cfg2();
    let mut l = ladder(&c);
    let (a2, b2, tcp2) = trio(&mut l, DC2);
    let (a4, b4, tcp4) = trio(&mut l, DC4);
    let ch = l
        .observe(
            Observation::AttemptFailed {
                route: b4,
                failure: Failure::Http(429),
                retry_after: Some(30),
            },
            1_000,
        )
        .unwrap();
    let State::Down { until } = ch.to else {
        panic!("{ch:?}")
    };
    assert!(until >= 31_000, "Retry-After honoured: {until}");
    // The background budget stays open (the recovery probe may run), but no DC gets w2 first:
    // DC 4's route is cooling down, DC 2's is planned after everything else.
    assert_eq!(l.budgets_left(1_001), vec![4, 4]);
    for now in [1_001, until - 1] {
        assert_eq!(plan_dc(&mut l, DC4, now), vec![a4, tcp4]);
        assert_eq!(plan_dc(&mut l, DC2, now), vec![a2, tcp2, b2]);
    }
    // The hold ends with the cooldown: DC 2 spreads again (DC 4's route waits for its probe).
    let f = firsts(&mut l, DC2, 4, until);
    assert_eq!((count(&f, a2), count(&f, b2)), (2, 2), "{f:?}");
}

#[test]
fn a_cooling_worker_gets_nothing_and_comes_back_after_its_probe() {
    let c = cfg2();
    let mut l = ladder(&c);
    let (a, b, tcp) = trio(&mut l, DC2);
    probe_ok(&mut l, a, 0);
    probe_ok(&mut l, b, 0);
    let State::Down { until } = fail(&mut l, a, Failure::Timeout, 100).unwrap().to else {
        panic!()
    };
    for _ in 0..6 {
        assert_eq!(plan_dc(&mut l, DC2, 200), vec![b, tcp]);
    }
    // Cooldown over, recovery probe not back yet: still nothing for w1.
    assert_eq!(plan_dc(&mut l, DC2, until), vec![b, tcp]);
    probe_ok(&mut l, a, until + 10);
    let f = firsts(&mut l, DC2, 8, until + 20);
    assert_eq!((count(&f, a), count(&f, b)), (4, 4), "{f:?}");
    // A Suspect Worker is not spread to either: the healthy one goes first.
    fail(&mut l, b, Failure::Reset, until + 30);
    assert_eq!(l.route(b).health.state(), State::Suspect);
    for _ in 0..4 {
        assert_eq!(plan_dc(&mut l, DC2, until + 40), vec![a, tcp, b]);
    }
}

#[test]
fn the_spread_worker_hands_out_its_own_pool() {
    let mut c = cfg2();
    c.pool_size = 2;
    let mut l = ladder(&c);
    let (a, b, _) = trio(&mut l, DC2);
    probe_ok(&mut l, a, 0);
    probe_ok(&mut l, b, 0);
    l.observe(Observation::SessionStarted { route: b }, 5);
    assert!(l.adopt(b));
    l.fill_ready(b, Fake::default(), 5, 10);
    assert_eq!((l.pool_len(a), l.pool_len(b)), ((0, 0), (1, 0)));
    let p1 = l.plan(DC2, 20, &mut resolve);
    let p2 = l.plan(DC2, 20, &mut resolve);
    assert_eq!(
        (p1.cands[0].route, p1.pooled),
        (a, None),
        "w1's pool is empty"
    );
    assert_eq!((p2.cands[0].route, p2.pooled), (b, Some(b)));
}

#[test]
fn a_reload_keeps_a_hold_by_endpoint() {
    let c = cfg2();
    let mut l = ladder(&c);
    let (_, b4, _) = trio(&mut l, DC4);
    let ch = fail(&mut l, b4, Failure::Http(429), 1_000).unwrap();
    let State::Down { until } = ch.to else {
        panic!()
    };
    assert!(until > 2_001, "{until}");
    // w1 removed: w2 is now index 0, still held.
    let mut c2 = c.clone();
    c2.worker_domains.remove(0);
    c2.worker_domains.push(CfEndpoint {
        host: "w3.example.workers.dev".into(),
        port: 443,
    });
    l.reconfigure(&c2, 2_000);
    let v = l.routes_for(DC2);
    let (b2, c3) = (v[0], v[1]);
    assert!(
        l.route(b2).target_label().starts_with("w2"),
        "{}",
        l.route(b2).label()
    );
    for _ in 0..4 {
        assert_eq!(plan_dc(&mut l, DC2, 2_001)[0], c3);
    }
    // The route's cooldown is over, but w2's account (bob, alone) answered 429 without
    // Retry-After: it stays held until 00:00 UTC (the wall clock here is 1970-01-01 00:00).
    let f = firsts(&mut l, DC2, 4, until);
    assert_eq!((count(&f, b2), count(&f, c3)), (0, 4), "{f:?}");
    let f = firsts(&mut l, DC2, 4, 1_000 + 86_400_000);
    assert_eq!((count(&f, b2), count(&f, c3)), (2, 2), "{f:?}");
}
