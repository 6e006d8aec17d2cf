//! The connect race's rules, one test each, with explicit time and a fake [`Routes`].

use std::collections::HashMap;
use std::net::SocketAddr;

use super::*;
use crate::net::dial::DialKind;

const BUDGET: u64 = 5_000;
const ATTEMPT: u64 = 1_000;
const HEDGE: u64 = 300;

/// Route facts set by each test: every route is `ws` unless listed in `tiers`.
#[derive(Default)]
struct Fake {
    tiers: HashMap<RouteId, Tier>,
    /// Pacing: when a handshake to an address may start.
    pace: HashMap<SocketAddr, u64>,
    /// Addresses behind a down outbound proxy, re-checked at the value.
    proxy_down: HashMap<SocketAddr, u64>,
    /// Routes whose cut at the budget is evidence.
    evidence: Vec<RouteId>,
    /// What a fresh plan holds (`None`: no `front` tier configured).
    fresh: Option<Vec<Candidate>>,
}

impl Routes for Fake {
    fn tier(&self, route: RouteId) -> Tier {
        self.tiers.get(&route).copied().unwrap_or(Tier::Ws)
    }
    fn attempt_timeout(&self, _: RouteId) -> u64 {
        ATTEMPT
    }
    fn pace(&mut self, addr: SocketAddr, now: u64) -> u64 {
        self.pace.get(&addr).copied().unwrap_or(now)
    }
    fn hedge_delay(&self, _: RouteId) -> u64 {
        HEDGE
    }
    fn proxy_gate(&mut self, spec: &DialSpec, _: u64) -> Result<(), u64> {
        self.proxy_down
            .get(&spec.addr)
            .map_or(Ok(()), |at| Err(*at))
    }
    fn budget_cut_is_evidence(&self, route: RouteId, _: u64, _: u64) -> bool {
        self.evidence.contains(&route)
    }
    fn fresh_plan(&mut self, _: u64) -> Option<Vec<Candidate>> {
        self.fresh.clone()
    }
}

fn addr(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

fn cand(route: RouteId, port: u16) -> Candidate {
    Candidate {
        route,
        spec: DialSpec {
            addr: addr(port),
            kind: DialKind::Tcp,
        },
    }
}

fn plan(cands: Vec<Candidate>) -> Plan {
    Plan {
        cands,
        pooled: None,
        usable: true,
    }
}

/// A race over `cands` started at t=0, its first dial started.
fn racing(cands: Vec<Candidate>, routes: &mut Fake) -> Race {
    let mut fx = Vec::new();
    let mut race = Race::new(plan(cands), Origin::Client, 0, BUDGET, &mut fx);
    race.keep_going(0, routes, &mut fx);
    assert_eq!(fx.last(), Some(&Effect::Dial { slot: 0, cand: 0 }));
    race.dialled(0, 0, routes, &mut fx);
    race
}

#[test]
fn the_first_candidate_dials_at_once_with_its_deadline_the_hedge_and_the_budget() {
    let mut routes = Fake::default();
    let mut fx = Vec::new();
    let mut race = Race::new(
        plan(vec![cand(0, 1), cand(1, 2)]),
        Origin::Client,
        100,
        BUDGET,
        &mut fx,
    );
    race.keep_going(100, &mut routes, &mut fx);
    race.dialled(0, 100, &mut routes, &mut fx);
    assert_eq!(
        fx,
        [
            Effect::ArmBudget { at: 100 + BUDGET },
            Effect::Dial { slot: 0, cand: 0 },
            Effect::ArmAttempt {
                slot: 0,
                at: 100 + ATTEMPT
            },
            Effect::ArmHedge { at: 100 + HEDGE },
        ]
    );
    assert_eq!(race.running(), 1);
}

#[test]
fn the_hedge_fires_at_its_delay_and_starts_a_different_route() {
    let mut routes = Fake::default();
    // Candidate 1 is route 0's other host name: a hedge never goes to the same route.
    let mut race = racing(vec![cand(0, 1), cand(0, 2), cand(1, 3)], &mut routes);
    let mut fx = Vec::new();
    race.hedge_fired(HEDGE, &mut routes, &mut fx);
    assert_eq!(fx, [Effect::Hedging, Effect::Dial { slot: 1, cand: 2 }]);
    fx.clear();
    race.dialled(1, HEDGE, &mut routes, &mut fx);
    // Candidate 1 is left but its route is busy: no second hedge.
    assert_eq!(
        fx,
        [Effect::ArmAttempt {
            slot: 1,
            at: HEDGE + ATTEMPT
        }]
    );
    assert_eq!(race.running(), 2);
}

#[test]
fn no_hedge_when_nothing_else_is_left_to_try() {
    let mut routes = Fake::default();
    let mut fx = Vec::new();
    let mut race = Race::new(plan(vec![cand(0, 1)]), Origin::Client, 0, BUDGET, &mut fx);
    race.keep_going(0, &mut routes, &mut fx);
    race.dialled(0, 0, &mut routes, &mut fx);
    assert!(!fx.iter().any(|e| matches!(e, Effect::ArmHedge { .. })));
    fx.clear();
    race.hedge_fired(HEDGE, &mut routes, &mut fx);
    assert!(fx.is_empty());
}

#[test]
fn the_budget_ends_the_race_cutting_or_abandoning_each_dial() {
    let mut routes = Fake {
        evidence: vec![0],
        ..Fake::default()
    };
    let mut race = racing(vec![cand(0, 1), cand(1, 2)], &mut routes);
    let mut fx = Vec::new();
    race.hedge_fired(HEDGE, &mut routes, &mut fx);
    race.dialled(1, HEDGE, &mut routes, &mut fx);
    fx.clear();
    race.budget_spent(BUDGET, &routes, &mut fx);
    assert_eq!(
        fx,
        [
            Effect::Cut {
                slot: 0,
                cand: 0,
                started: 0
            },
            Effect::Abandon {
                slot: 1,
                cand: 1,
                started: HEDGE
            },
            Effect::GiveUp(GiveUp::Budget),
        ]
    );
    assert_eq!(race.running(), 0);
    // The budget timer fired: nothing left to cancel.
    fx.clear();
    race.cancel_all(&mut fx);
    assert!(fx.is_empty());
}

#[test]
fn the_first_ready_wins_and_the_loser_is_abandoned_to_finish_as_a_fill() {
    let mut routes = Fake::default();
    let mut race = racing(vec![cand(0, 1), cand(1, 2)], &mut routes);
    let mut fx = Vec::new();
    race.hedge_fired(HEDGE, &mut routes, &mut fx);
    race.dialled(1, HEDGE, &mut routes, &mut fx);
    let winner = race.won(1).expect("slot 1 dials");
    assert_eq!(
        winner,
        Winner {
            cand: 1,
            route: 1,
            started: HEDGE,
            retried: false
        }
    );
    fx.clear();
    race.cancel_all(&mut fx);
    assert_eq!(
        fx,
        [
            Effect::Abandon {
                slot: 0,
                cand: 0,
                started: 0
            },
            Effect::CancelBudget
        ]
    );
    assert_eq!(race.won(0), None, "a loser never wins later");
}

#[test]
fn closing_while_the_hedge_waits_cancels_it_and_a_paced_slot() {
    let mut routes = Fake::default();
    routes.pace.insert(addr(2), 700);
    let mut race = racing(vec![cand(0, 1), cand(1, 2)], &mut routes);
    let mut fx = Vec::new();
    race.cancel_all(&mut fx);
    assert_eq!(
        fx,
        [
            Effect::Abandon {
                slot: 0,
                cand: 0,
                started: 0
            },
            Effect::CancelHedge,
            Effect::CancelBudget
        ]
    );
    // A candidate parked for its pacing slot only has a timer to cancel.
    let mut race = racing(vec![cand(0, 1), cand(1, 2)], &mut routes);
    race.hedge_fired(HEDGE, &mut routes, &mut fx);
    let _ = race.won(0);
    fx.clear();
    race.cancel_all(&mut fx);
    assert_eq!(
        fx,
        [Effect::CancelSlotTimer { slot: 1 }, Effect::CancelBudget]
    );
}

#[test]
fn a_failure_starts_the_next_candidate_at_once() {
    let mut routes = Fake::default();
    let mut race = racing(vec![cand(0, 1), cand(0, 2), cand(1, 3)], &mut routes);
    let mut fx = Vec::new();
    // Past TCP, not a connect-level failure: the route's other name is still worth a try.
    race.failed(0, Failure::Tls, true, 50, &mut routes, &mut fx);
    assert_eq!(fx, [Effect::Dial { slot: 0, cand: 1 }]);
}

#[test]
fn a_connect_level_failure_skips_the_other_name_on_the_same_address() {
    for (failure, tcp_done) in [
        (Failure::Timeout, true),
        (Failure::Refused, true),
        (Failure::Tls, false),
    ] {
        let mut routes = Fake::default();
        let two_names = vec![cand(0, 1), cand(0, 1), cand(0, 2), cand(1, 3)];
        let mut race = racing(two_names, &mut routes);
        let mut fx = Vec::new();
        race.failed(0, failure, tcp_done, 50, &mut routes, &mut fx);
        // Same route, other address: still tried.
        assert_eq!(fx, [Effect::Dial { slot: 0, cand: 2 }], "{failure:?}");
    }
}

#[test]
fn when_every_candidate_failed_the_race_gives_up() {
    let mut routes = Fake::default();
    let mut race = racing(vec![cand(0, 1), cand(1, 2)], &mut routes);
    let mut fx = Vec::new();
    race.hedge_fired(HEDGE, &mut routes, &mut fx);
    race.dialled(1, HEDGE, &mut routes, &mut fx);
    fx.clear();
    race.failed(0, Failure::Reset, true, 400, &mut routes, &mut fx);
    assert!(fx.is_empty(), "one still runs: no give-up yet");
    race.failed(1, Failure::Reset, true, 500, &mut routes, &mut fx);
    assert_eq!(fx, [Effect::GiveUp(GiveUp::EveryRouteFailed)]);
}

#[test]
fn a_paced_candidate_waits_for_its_slot_then_dials() {
    let mut routes = Fake::default();
    routes.pace.insert(addr(1), 40);
    let mut fx = Vec::new();
    let mut race = Race::new(plan(vec![cand(0, 1)]), Origin::Client, 0, BUDGET, &mut fx);
    fx.clear();
    race.keep_going(0, &mut routes, &mut fx);
    assert_eq!(
        fx,
        [Effect::ArmPace {
            slot: 0,
            cand: 0,
            at: 40
        }]
    );
    assert_eq!(race.running(), 1, "a paced candidate counts as running");
    fx.clear();
    routes.pace.clear();
    race.pace_due(0, 40, &mut routes, &mut fx);
    assert_eq!(fx, [Effect::Dial { slot: 0, cand: 0 }]);
    assert_eq!(race.dialing(0), Some((0, 40)));
}

#[test]
fn a_candidate_behind_a_down_outbound_proxy_is_skipped() {
    let mut routes = Fake::default();
    routes.proxy_down.insert(addr(1), 900);
    let mut fx = Vec::new();
    let mut race = Race::new(
        plan(vec![cand(0, 1), cand(1, 2)]),
        Origin::Client,
        100,
        BUDGET,
        &mut fx,
    );
    fx.clear();
    race.keep_going(100, &mut routes, &mut fx);
    assert_eq!(
        fx,
        [
            Effect::ProxyDown { cand: 0, wait: 800 },
            Effect::Dial { slot: 0, cand: 1 }
        ]
    );
}

#[test]
fn a_dial_that_cannot_start_moves_on_unless_the_host_ran_out_of_resources() {
    let mut routes = Fake::default();
    let mut fx = Vec::new();
    let mut race = Race::new(
        plan(vec![cand(0, 1), cand(1, 2)]),
        Origin::Client,
        0,
        BUDGET,
        &mut fx,
    );
    race.keep_going(0, &mut routes, &mut fx);
    fx.clear();
    race.not_started(0, Failure::NetUnreachable, 0, &mut routes, &mut fx);
    assert_eq!(fx, [Effect::Dial { slot: 0, cand: 1 }]);
    fx.clear();
    race.not_started(0, Failure::Local, 0, &mut routes, &mut fx);
    assert_eq!(fx, [Effect::GiveUp(GiveUp::LocalResource)]);
    assert_eq!(race.running(), 0);
}

#[test]
fn the_pool_is_taken_first_but_never_by_a_retry() {
    let mut fx = Vec::new();
    let pooled = || Plan {
        pooled: Some(4),
        ..plan(vec![cand(4, 1)])
    };
    let race = Race::new(pooled(), Origin::Client, 0, BUDGET, &mut fx);
    assert_eq!(race.pool_route(), Some(4));
    let mut race = Race::new(pooled(), Origin::Retry, 0, BUDGET, &mut fx);
    assert_eq!(race.pool_route(), None);
    let mut routes = Fake::default();
    race.keep_going(0, &mut routes, &mut fx);
    assert!(race.won(0).expect("dialling").retried);
}

#[test]
fn a_replayed_request_is_kept_only_on_a_pooled_upstream_with_the_timeout_on() {
    assert!(keeps_replay(true, 1_500));
    assert!(!keeps_replay(true, 0));
    assert!(!keeps_replay(false, 1_500));
}

#[test]
fn when_the_plan_runs_out_new_front_routes_are_appended_once() {
    let mut routes = Fake {
        fresh: Some(vec![cand(0, 1), cand(5, 5), cand(6, 6)]),
        ..Fake::default()
    };
    routes.tiers.insert(5, Tier::Front);
    let mut race = racing(vec![cand(0, 1)], &mut routes);
    let mut fx = Vec::new();
    race.failed(0, Failure::Tls, true, 50, &mut routes, &mut fx);
    assert_eq!(fx, [Effect::Fronting, Effect::Dial { slot: 0, cand: 1 }]);
    assert_eq!(race.cands().len(), 2);
    assert_eq!(race.cands()[1].route, 5);
    fx.clear();
    race.failed(0, Failure::Tls, true, 90, &mut routes, &mut fx);
    assert_eq!(fx, [Effect::GiveUp(GiveUp::EveryRouteFailed)]);
}

#[test]
fn without_a_front_tier_an_exhausted_plan_gives_up() {
    let mut routes = Fake::default();
    let mut race = racing(vec![cand(0, 1)], &mut routes);
    let mut fx = Vec::new();
    race.failed(0, Failure::Tls, true, 50, &mut routes, &mut fx);
    assert_eq!(fx, [Effect::GiveUp(GiveUp::EveryRouteFailed)]);
}
