//! Unit tests of the ladder's rules for the faults met in the field (docs/design.md §4 rules 6 and
//! 7, §5 keepalive): sessions that the upstream ends right after a tiny reply
//! (`closed-after-reply`), routes that close on our WS ping, the "16 KB freeze" (`stalled`, and
//! the pulling probe that proves recovery), and a dead network that must cool no route.

use super::*;

/// A session on `route` that started at `start` and ended at `end_at`.
fn ended(
    l: &mut Ladder<Fake>,
    route: RouteId,
    (start, end_at): (u64, u64),
    bytes_down: u64,
    by_upstream: bool,
) -> Option<Change> {
    let end = SessionEnd {
        connected_at: start,
        bytes_up: 72,
        bytes_down,
        by_upstream,
        after_ping: false,
        pooled: false,
    };
    l.observe(Observation::SessionEnded { route, end }, end_at)
}

#[test]
fn reconnect_storm_on_a_front_that_answers_then_closes_fails_the_route_as_closed_after_reply() {
    // Issue 10, item 2: every session got ~100 bytes and was then closed by the front; the
    // first byte counted as a success and only a 0-byte close was blamed.
    let c = cfg();
    let mut l = ladder(&c);
    let (ws, worker, _) = ids(&mut l);
    let mut t = 0;
    for i in 0..SHORT_ENDS_TO_FAIL {
        first_byte(&mut l, ws, t, t + 20);
        let change = ended(&mut l, ws, (t, t + 500), 100, true);
        if i + 1 < SHORT_ENDS_TO_FAIL {
            assert!(
                change.is_none(),
                "session {i}: one short end alone is no verdict"
            );
            assert!(is_up(&l, ws));
        } else {
            let change = change.expect("the route goes down");
            assert_eq!(change.failure, Some(Failure::ClosedAfterReply));
            assert!(change.cooldown_ms >= 48_000, "its own floor: {change:?}");
        }
        t += 600;
    }
    assert_eq!(plan(&mut l, t)[0], worker, "new sessions move on");
}

#[test]
fn a_normal_session_resets_the_short_session_count_and_client_ends_never_count() {
    let c = cfg();
    let mut l = ladder(&c);
    let (ws, _, _) = ids(&mut l);
    first_byte(&mut l, ws, 0, 10);
    let mut t = 100;
    let short = |l: &mut Ladder<Fake>, t: &mut u64| {
        let r = ended(l, ws, (*t, *t + 200), 100, true);
        *t += 300;
        r
    };
    for _ in 0..10 {
        assert!(short(&mut l, &mut t).is_none());
        assert!(short(&mut l, &mut t).is_none());
        // Long, or lots of bytes down: normal, the count starts over.
        if t % 2 == 0 {
            assert!(ended(&mut l, ws, (t, t + 10_000), 100, true).is_none());
        } else {
            assert!(ended(&mut l, ws, (t, t + 200), 64 * 1024, true).is_none());
        }
        t += 10_100;
    }
    // Client-ended short sessions and 0-byte ones (rule 1's business) do not count.
    for _ in 0..10 {
        assert!(ended(&mut l, ws, (t, t + 200), 100, false).is_none());
        t += 300;
    }
    assert!(is_up(&l, ws));
    // Short ends spread wider than the window do not add up either.
    for _ in 0..5 {
        assert!(ended(&mut l, ws, (t, t + 200), 100, true).is_none());
        t += 40_000;
    }
    assert!(is_up(&l, ws));
    t += 100_000;
    assert!(short(&mut l, &mut t).is_none());
    assert!(short(&mut l, &mut t).is_none());
    assert!(short(&mut l, &mut t).is_some(), "three within the window");
}

#[test]
fn a_client_looping_on_a_transport_error_is_not_a_front_that_closes_after_reply() {
    // A client with an auth key the DC does not know gets -404 (a 4-byte transport error in
    // its framing: 5..23 bytes) and the DC closes; a broken client retries at once, forever.
    // That is the DC's verdict on the client, not on the route: one such client must not take
    // every route down in turn.
    let c = cfg();
    let mut l = ladder(&c);
    let (ws, _, _) = ids(&mut l);
    first_byte(&mut l, ws, 0, 10);
    let mut t = 100;
    for down in [8, 5, 23, 8, 8, 8] {
        assert!(
            ended(&mut l, ws, (t, t + 200), down, true).is_none(),
            "{down} B"
        );
        t += 300;
    }
    assert!(is_up(&l, ws));
    // A resPQ-sized reply still counts.
    for _ in 0..SHORT_ENDS_TO_FAIL - 1 {
        assert!(ended(&mut l, ws, (t, t + 200), 100, true).is_none());
        t += 300;
    }
    assert!(ended(&mut l, ws, (t, t + 200), 100, true).is_some());
}

#[test]
fn a_route_whose_sessions_end_right_after_a_ping_is_not_pinged_again() {
    // Issue 10, item 5: a front that closes on client pings cut every pinged session.
    let c = cfg();
    let mut l = ladder(&c);
    let (ws, worker, _) = ids(&mut l);
    first_byte(&mut l, worker, 0, 10);
    let end = |by_upstream, after_ping| SessionEnd {
        connected_at: 10,
        bytes_up: 500,
        bytes_down: 50_000,
        by_upstream,
        after_ping,
        pooled: false,
    };
    // Ends without a ping before them teach nothing about pings.
    for (by_upstream, t) in [(true, 60_000), (false, 70_000)] {
        let e = end(by_upstream, false);
        l.observe(
            Observation::SessionEnded {
                route: worker,
                end: e,
            },
            t,
        );
        assert!(l.pings_allowed(worker, t));
    }
    let e = end(true, true);
    let change = l.observe(
        Observation::SessionEnded {
            route: worker,
            end: e,
        },
        80_000,
    );
    assert!(
        change.is_none(),
        "not a route failure: the session was idle"
    );
    assert!(!l.pings_allowed(worker, 80_000), "learned");
    assert!(is_up(&l, worker));
    assert!(
        l.pings_allowed(ws, 80_000),
        "another route's pings are untouched"
    );
    // It stays learned, whatever later sessions do, for --pings-off-for.
    first_byte(&mut l, worker, 90_000, 90_010);
    let e = end(false, false);
    l.observe(
        Observation::SessionEnded {
            route: worker,
            end: e,
        },
        200_000,
    );
    assert!(!l.pings_allowed(worker, 200_000));
    assert!(!l.pings_allowed(worker, 80_000 + ms(c.pings_off_for) - 1));
    // Then it is tried again: one coincidental close (an edge restart cutting every session,
    // one of them just pinged) must not cost a months-long router its Worker keepalive for
    // good. A front that really closes on pings is learned again, at one session per expiry.
    let again = 80_000 + ms(c.pings_off_for);
    assert!(l.pings_allowed(worker, again), "expired");
    let e = end(true, true);
    l.observe(
        Observation::SessionEnded {
            route: worker,
            end: e,
        },
        again + 40_000,
    );
    assert!(!l.pings_allowed(worker, again + 40_001), "learned again");
    assert!(l.pings_allowed(worker, again + 40_000 + ms(c.pings_off_for)));
}

/// The byte goal of the probe of `route` handed out at `now` (it must be handed out).
fn probe_pull(l: &mut Ladder<Fake>, route: RouteId, now: u64) -> u32 {
    drain(l, now)
        .iter()
        .find_map(|w| match w {
            Work::Probe {
                route: r,
                pull_bytes,
                ..
            } if *r == route => Some(*pull_bytes),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no probe of {route} at {now}"))
}

/// A session on `r` froze at `now` after 16 KiB down (the kernel's proof).
fn froze(l: &mut Ladder<Fake>, r: RouteId, now: u64) -> Option<crate::route::health::Change> {
    let obs = Observation::SessionFrozen {
        route: r,
        freeze: crate::error::Freeze::NoAck,
        after_bytes: 16_384,
    };
    l.observe(obs, now)
}

fn down_until(l: &Ladder<Fake>, r: RouteId) -> u64 {
    match l.route(r).health.state() {
        State::Down { until } => until,
        s => panic!("expected Down, got {s:?}"),
    }
}

#[test]
fn sixteen_kb_freeze_two_frozen_sessions_put_the_route_down_and_only_a_pulling_probe_revives_it() {
    // Issue 10, item 11: the first downstream byte marked the route good, so a route that
    // answered resPQ and then froze every transfer stayed Up. Issue 19: at most two frozen
    // sessions, whatever the client does, before new sessions go elsewhere for good.
    let c = cfg();
    let mut l = ladder(&c);
    let (ws, worker, _) = ids(&mut l);
    l.observe(Observation::SessionStarted { route: ws }, 0);
    first_byte(&mut l, ws, 0, 10);
    // The first: doubt (Suspect), new sessions prefer the proven routes, a pulling probe now.
    let change = froze(&mut l, ws, 9_000).expect("the route leaves Up");
    assert_eq!(change.to, State::Suspect);
    assert_eq!(change.failure, Some(Failure::Stalled));
    assert_eq!(plan(&mut l, 9_001)[0], worker, "new sessions go elsewhere");
    assert_eq!(probe_pull(&mut l, ws, 9_001), c.stall_probe_bytes);
    // A later session's first byte on it proves nothing (the freeze lets ~16 KB through).
    first_byte(&mut l, ws, 9_100, 9_200);
    assert_eq!(l.route(ws).health.state(), State::Suspect);
    // The second within --stall-window: down as stalled.
    let change = froze(&mut l, ws, 12_000).expect("down");
    assert!(matches!(change.to, State::Down { .. }), "{change:?}");
    assert_eq!(change.failure, Some(Failure::Stalled));
    let status = &l.snapshot(12_000)[ws];
    assert_eq!(status.frozen, 2);
    assert_eq!(
        status.last_freeze,
        Some((crate::error::Freeze::NoAck, 16_384, 0))
    );
    // The recovery probe must pull more than the freeze lets through.
    let failed = Observation::ProbeDone {
        route: ws,
        result: Err((Failure::Stalled, None)),
    };
    l.observe(failed, 12_500);
    let until = down_until(&l, ws);
    assert_eq!(probe_pull(&mut l, ws, until), c.stall_probe_bytes);
    // A timeout of the pulling probe does not make the next one plain either.
    let failed = Observation::ProbeDone {
        route: ws,
        result: Err((Failure::Timeout, None)),
    };
    l.observe(failed, until + 500);
    let until = down_until(&l, ws);
    assert_eq!(probe_pull(&mut l, ws, until), c.stall_probe_bytes);
    // Thawed: the pulling probe succeeds, the route is Up, later probes are plain again.
    probe_ok(&mut l, ws, until + 50);
    assert!(is_up(&l, ws));
    let later = until + 50 + 2 * ms(c.probe_interval);
    assert_eq!(probe_pull(&mut l, ws, later), 0);
    // A plain route's probes never pull.
    fail(&mut l, worker, Failure::Timeout, later);
    let until = down_until(&l, worker);
    assert_eq!(probe_pull(&mut l, worker, until), 0);
}

#[test]
fn frozen_sessions_far_apart_only_doubt_the_route() {
    let c = cfg();
    let mut l = ladder(&c);
    let (ws, _, _) = ids(&mut l);
    first_byte(&mut l, ws, 0, 10);
    assert_eq!(froze(&mut l, ws, 1_000).map(|c| c.to), Some(State::Suspect));
    // The pulling probe finds it fine: Up again.
    assert_eq!(probe_pull(&mut l, ws, 1_001), c.stall_probe_bytes);
    probe_ok(&mut l, ws, 1_500);
    assert!(is_up(&l, ws));
    // The next freeze comes after the window: a doubt again, not Down.
    let later = 1_000 + ms(c.stall_window) + 1;
    assert_eq!(froze(&mut l, ws, later).map(|c| c.to), Some(State::Suspect));
}

#[test]
fn a_frozen_session_drops_the_routes_warm_pool() {
    let c = cfg();
    let mut l = ladder(&c);
    let (ws, _, _) = ids(&mut l);
    first_byte(&mut l, ws, 0, 10);
    l.observe(Observation::SessionStarted { route: ws }, 20);
    assert!(fills_of(&drain(&mut l, 20)).contains(&ws));
    l.fill_ready(ws, Fake::default(), 20, 40);
    assert_eq!(l.pool_len(ws).0, 1);
    froze(&mut l, ws, 1_000);
    assert_eq!(l.pool_len(ws).0, 0, "dropped at once");
}

#[test]
fn a_dead_network_cools_no_route_and_is_said_once_per_outage() {
    let c = cfg();
    let mut l = ladder(&c);
    let (ws, worker, tcp) = ids(&mut l);
    probe_ok(&mut l, ws, 0);
    assert!(!l.network_down());
    // Every route fails with a network-class error: none is cooled down or leaves the plan.
    for (now, f) in [
        (10, Failure::NetUnreachable),
        (20, Failure::AddrUnavailable),
    ] {
        for r in [ws, worker, tcp] {
            assert_eq!(fail(&mut l, r, f, now), None);
        }
    }
    assert!(l.network_down());
    assert!(is_up(&l, ws));
    assert_eq!(plan(&mut l, 30), vec![ws, worker, tcp]);
    // A route that works ends the outage.
    first_byte(&mut l, tcp, 40, 50);
    assert!(!l.network_down());
    // Host unreachable is the path's fact too (issue 19 §3), not the route's: no cooldown.
    // Failing again while others work confirms it as that address's own: planned last.
    assert!(fail(&mut l, worker, Failure::HostUnreachable, 60).is_none());
    assert!(!l.network_down());
    assert_eq!(plan(&mut l, 70), vec![ws, tcp, worker]);
}

#[test]
fn a_last_resort_sessions_first_byte_does_not_revive_a_stalled_route() {
    // Every route down: clients get them all as a last resort. The frozen route answers the
    // first bytes of such a session (the freeze lets ~16 KB through): that is "just resPQ",
    // not the proof of recovery rule 7 asks for.
    let c = cfg();
    let mut l = ladder(&c);
    let (ws, worker, tcp) = ids(&mut l);
    first_byte(&mut l, ws, 0, 10);
    froze(&mut l, ws, 8_000).expect("suspect");
    froze(&mut l, ws, 9_000).expect("down as stalled");
    fail(&mut l, worker, Failure::Timeout, 9_000);
    fail(&mut l, tcp, Failure::Timeout, 9_000);
    assert_eq!(plan(&mut l, 9_100).len(), 3, "all listed as a last resort");
    first_byte(&mut l, ws, 9_100, 9_150);
    assert!(!is_up(&l, ws), "revived by a session's first byte");
    // Another route's session proof still works as before.
    first_byte(&mut l, tcp, 9_100, 9_150);
    assert!(is_up(&l, tcp));
    // Only the pulling probe brings it back.
    let until = down_until(&l, ws);
    assert_eq!(probe_pull(&mut l, ws, until), c.stall_probe_bytes);
    probe_ok(&mut l, ws, until + 50);
    assert!(is_up(&l, ws));
}

#[test]
fn a_stall_while_the_network_is_down_cools_no_route() {
    // Review finding (items 10 × 11): with the WAN link gone, dials fail as network
    // unreachable (no route is cooled for that), but every session still open goes silent
    // while its client waits: its stall watch fired and the route went Down as stalled,
    // needing a pulling probe to come back, after an outage that was not the route's.
    let c = cfg();
    let mut l = ladder(&c);
    let (ws, worker, tcp) = ids(&mut l);
    first_byte(&mut l, ws, 0, 10);
    assert!(fail(&mut l, worker, Failure::NetUnreachable, 1_000).is_none());
    assert!(
        !l.network_down(),
        "one address is not the network (issue 19 §4)"
    );
    assert!(fail(&mut l, tcp, Failure::NetUnreachable, 1_001).is_none());
    assert!(l.network_down());
    assert!(
        froze(&mut l, ws, 9_000).is_none(),
        "a silence while the network is down says nothing about the route"
    );
    let silent = Observation::PooledSilent {
        route: ws,
        taken_at: 8_000,
    };
    assert!(l.observe(silent, 9_500).is_none());
    assert!(is_up(&l, ws));
    // Once a route worked again, a stall is the route's own again.
    first_byte(&mut l, worker, 9_600, 9_650);
    assert!(!l.network_down());
    first_byte(&mut l, ws, 9_700, 9_750);
    assert!(froze(&mut l, ws, 20_000).is_some());
}

#[test]
fn a_plain_probe_already_running_when_a_session_froze_proves_nothing() {
    // Review finding: the probe result cleared the owed pull whatever probe it was. A liveness
    // probe (a plain resPQ, which the freeze lets through) handed out before a session froze
    // brought the doubted route back Up, logged as "probe pulled N bytes", and one running
    // when the route went down as stalled revived it at once.
    let c = cfg();
    let mut l = ladder(&c);
    let (ws, worker, _) = ids(&mut l);
    l.observe(Observation::SessionStarted { route: ws }, 0);
    first_byte(&mut l, ws, 0, 10);
    let t = 10 + 2 * ms(c.probe_interval);
    assert_eq!(probe_pull(&mut l, ws, t), 0, "the liveness probe is plain");
    froze(&mut l, ws, t + 100).expect("suspect");
    probe_ok(&mut l, ws, t + 200);
    assert_eq!(
        l.route(ws).health.state(),
        State::Suspect,
        "a resPQ probe handed out before the freeze revived the route"
    );
    assert_eq!(plan(&mut l, t + 201)[0], worker);
    // The pulling probe it owes runs now, and only its success proves the route.
    assert_eq!(probe_pull(&mut l, ws, t + 300), c.stall_probe_bytes);
    probe_ok(&mut l, ws, t + 400);
    assert!(is_up(&l, ws));
    // The same while the route goes down as stalled: a plain probe running then is no proof.
    let t = t + 400 + 2 * ms(c.probe_interval);
    assert_eq!(probe_pull(&mut l, ws, t), 0);
    froze(&mut l, ws, t + 100).expect("suspect");
    froze(&mut l, ws, t + 150).expect("down as stalled");
    probe_ok(&mut l, ws, t + 200);
    assert!(
        matches!(l.route(ws).health.state(), State::Down { .. }),
        "a resPQ probe handed out before the freeze revived a stalled route"
    );
    let until = down_until(&l, ws);
    assert_eq!(probe_pull(&mut l, ws, until), c.stall_probe_bytes);
}

#[test]
fn one_unreachable_address_does_not_hide_the_freezes_of_a_working_route() {
    // Issue 19 §1: "one unreachable built-in DC address flips that flag every ~10 s ... one
    // address without a route is that address's fact, not the network's". The tcp route's
    // address has no route (its probe fails as network unreachable every 10 s) while the ws
    // route works and freezes every transfer: each freeze lands while the flag is up.
    let c = cfg();
    let mut l = ladder(&c);
    let (ws, _, tcp) = ids(&mut l);
    first_byte(&mut l, ws, 0, 10);
    for round in 0..3u64 {
        let t = 1_000 + round * 10_000;
        assert!(fail(&mut l, tcp, Failure::NetUnreachable, t).is_none());
        // A session on ws got its first bytes (clearing the flag as before), then the next
        // one froze after the address failed again.
        froze(&mut l, ws, t + 4_000);
        first_byte(&mut l, ws, t + 5_000, t + 5_050);
    }
    assert!(
        matches!(l.route(ws).health.state(), State::Down { .. }),
        "three frozen sessions on a working network, the route still {:?}",
        l.route(ws).health.state()
    );
}
