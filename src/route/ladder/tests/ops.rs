//! Unit tests of the operator actions (`ladder/ops.rs`): a pin reorders new plans only and
//! never brings back a route in cooldown, unpin restores the tier order, a manual probe is
//! scheduled like a doubt, the snapshot reports what health and the schedule know, and a route
//! a reload retired shows as `retired` and refuses pin and probe.

use super::*;
use crate::route::ladder::{Pin, ProbeNow};

#[test]
fn a_pinned_tier_is_planned_first_and_unpin_restores_the_tier_order() {
    let c = cfg();
    let mut l = ladder(&c);
    let (ws, worker, tcp) = ids(&mut l);
    assert_eq!(plan(&mut l, 0), vec![ws, worker, tcp]);
    l.pin(Pin::Tier(Tier::Tcp)).unwrap();
    assert_eq!(l.pinned(), Some(Pin::Tier(Tier::Tcp)));
    assert_eq!(plan(&mut l, 10), vec![tcp, ws, worker], "pinned tier first");
    // Even over a proven route: the pin goes before rank order.
    probe_ok(&mut l, ws, 20);
    assert!(is_up(&l, ws));
    assert_eq!(plan(&mut l, 30), vec![tcp, ws, worker]);
    assert_eq!(l.unpin(), Some(Pin::Tier(Tier::Tcp)));
    assert_eq!(l.unpin(), None, "nothing left to release");
    assert_eq!(plan(&mut l, 40), vec![ws, worker, tcp], "tier order again");
}

#[test]
fn a_pinned_route_in_cooldown_is_skipped_and_health_is_still_tracked() {
    let c = cfg();
    let mut l = ladder(&c);
    let (ws, worker, tcp) = ids(&mut l);
    l.pin(Pin::Route(worker)).unwrap();
    assert_eq!(plan(&mut l, 0), vec![worker, ws, tcp]);
    let State::Down { until } = fail(&mut l, worker, Failure::Refused, 100).unwrap().to else {
        panic!("worker not down")
    };
    assert_eq!(
        plan(&mut l, 101),
        vec![ws, tcp],
        "clients never pay for health checks, pinned or not"
    );
    assert_eq!(
        plan(&mut l, until + 1),
        vec![ws, tcp],
        "waits for its probe"
    );
    probe_ok(&mut l, worker, until + 2);
    assert_eq!(plan(&mut l, until + 3), vec![worker, ws, tcp], "back first");
    assert!(l.pin(Pin::Route(99)).is_err(), "no such route");
    assert_eq!(
        l.pinned(),
        Some(Pin::Route(worker)),
        "a refused pin changes nothing"
    );
}

#[test]
fn probe_now_schedules_a_probe_at_once_unless_one_runs_or_the_route_cools() {
    let c = cfg();
    let mut l = ladder(&c);
    let (ws, _worker, tcp) = ids(&mut l);
    // Proven a moment ago by traffic: a normal due probe would be postponed; a manual one not.
    first_byte(&mut l, ws, 0, 10);
    assert!(probes_of(&drain(&mut l, 20)).is_empty(), "nothing due yet");
    assert_eq!(l.probe_now(ws, 30), Ok(ProbeNow::Scheduled));
    assert_eq!(l.sched(ws), Sched::Doubt(30));
    assert_eq!(probes_of(&drain(&mut l, 30)), vec![ws]);
    assert_eq!(l.probe_now(ws, 31), Ok(ProbeNow::AlreadyRunning));
    assert_eq!(
        l.sched(ws),
        Sched::Running,
        "the running probe is left alone"
    );
    fail(&mut l, tcp, Failure::Refused, 40);
    let e = l.probe_now(tcp, 41).unwrap_err();
    assert!(e.contains("cooldown"), "{e}");
    assert!(l.probe_now(99, 41).is_err());
}

#[test]
fn snapshot_shows_state_cooldown_rtt_last_failure_and_the_pin() {
    let c = cfg();
    let mut l = ladder(&c);
    let (ws, worker, tcp) = ids(&mut l);
    for i in 0..10 {
        probe_ok(&mut l, ws, 10 + i);
    }
    fail(&mut l, tcp, Failure::Timeout, 1_000);
    l.pin(Pin::Tier(Tier::Ws)).unwrap();
    let snap = l.snapshot(1_500);
    assert_eq!(snap.len(), 3);
    let w = &snap[ws];
    assert_eq!(
        (w.id, w.tier, w.state, w.cooldown_left_ms),
        (ws, Tier::Ws, "up", 0)
    );
    assert_eq!(w.rtt_p95_ms, Some(30));
    assert!(w.pinned && !snap[worker].pinned && !snap[tcp].pinned);
    assert_eq!(w.dc, DC2);
    assert!(w.label.starts_with("ws:DC2 "), "{}", w.label);
    assert_eq!(snap[worker].state, "unknown");
    assert_eq!(snap[worker].last_failure, None);
    let t = &snap[tcp];
    assert_eq!(t.state, "down");
    assert!(t.cooldown_left_ms > 0, "{t:?}");
    let State::Down { until } = l.route(tcp).health.state() else {
        panic!("tcp not down")
    };
    assert_eq!(t.cooldown_left_ms, until - 1_500);
    assert_eq!(
        t.last_failure,
        Some((Failure::Timeout, 500)),
        "class and how long ago"
    );
    assert_eq!(l.snapshot(until + 1)[tcp].cooldown_left_ms, 0);
}

#[test]
fn select_finds_the_routes_of_one_tier_and_dc() {
    let c = cfg();
    let mut l = ladder(&c);
    assert_eq!(l.route_count(), 0);
    let tcp = l.select(Tier::Tcp, DC2);
    assert_eq!(l.route_count(), 3, "created like a client's first use");
    assert_eq!(tcp.len(), 1);
    assert_eq!(l.route(tcp[0]).tier, Tier::Tcp);
    assert!(l.select(Tier::CfProxy, DC2).is_empty(), "not configured");
}

#[test]
fn a_retired_route_shows_as_retired_and_refuses_pin_and_probe() {
    let c = cfg();
    let mut l = ladder(&c);
    let (ws, worker, tcp) = ids(&mut l);
    probe_ok(&mut l, worker, 0);
    l.pin(Pin::Tier(Tier::Worker)).unwrap();
    let mut c2 = c.clone();
    c2.worker_domains.clear();
    assert_eq!(l.reconfigure(&c2, 100), 1);
    let snap = l.snapshot(110);
    assert_eq!(
        snap.len(),
        3,
        "a retired route stays listed (ids stay stable)"
    );
    let w = &snap[worker];
    assert!(w.retired, "{w:?}");
    assert_eq!(w.state, "retired", "not its last health state");
    assert_eq!(w.cooldown_left_ms, 0);
    assert!(
        !w.pinned,
        "a pin of its tier does not select a retired route"
    );
    for r in [ws, tcp] {
        assert!(
            !snap[r].retired && snap[r].state != "retired",
            "{:?}",
            snap[r]
        );
    }
    let err = l.pin(Pin::Route(worker)).unwrap_err();
    assert!(err.contains("retired"), "{err}");
    assert_eq!(
        l.pinned(),
        Some(Pin::Tier(Tier::Worker)),
        "a refused pin changes nothing"
    );
    let err = l.probe_now(worker, 120).unwrap_err();
    assert!(err.contains("retired"), "{err}");
    assert_eq!(l.sched(worker), Sched::Idle, "no probe scheduled");
    // Live routes still take both.
    assert!(l.pin(Pin::Route(tcp)).is_ok());
    assert_eq!(l.probe_now(ws, 130), Ok(ProbeNow::Scheduled));
}
