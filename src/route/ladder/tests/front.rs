//! The `front` tier's planning rule (`front.rs`, docs/design.md §4 "Domain fronting"): fronting
//! is planned only after the direct ws route failed at TLS or upgrade, never after a TCP-level
//! failure; otherwise a front route is a route like any other (probed, cooled down, pooled).

use super::*;
use crate::net::dial::DialKind;
use crate::route::ladder::front::blocked_after_connect;

/// ws (127.0.0.2) → front (SNI allowed.example.org, same address) → tcp (127.0.0.4).
fn front_cfg() -> Config {
    let mut c = cfg();
    c.worker_domains.clear();
    c.fronting_domains = vec!["allowed.example.org".into()];
    c.tier_order = vec![Tier::Ws, Tier::Front, Tier::Tcp];
    c
}

/// Ids of DC 2's ws, front and tcp routes.
fn front_ids(l: &mut Ladder<Fake>) -> (RouteId, RouteId, RouteId) {
    let v = l.routes_for(DC2);
    assert_eq!(v.len(), 3, "ws, front, tcp");
    assert_eq!(l.route(v[1]).tier, Tier::Front);
    (v[0], v[1], v[2])
}

#[test]
fn front_routes_dial_the_ws_address_with_the_fronting_sni_and_kws_hosts() {
    let c = front_cfg();
    let mut l = ladder(&c);
    let (ws, front, _) = front_ids(&mut l);
    let specs = l.route(front).dial_specs(&mut resolve);
    let ws_specs = l.route(ws).dial_specs(&mut resolve);
    assert_eq!(specs.len(), 2, "both kws names, media order");
    for (f, w) in specs.iter().zip(&ws_specs) {
        assert_eq!(f.addr, w.addr, "the DC's WS front address");
        let (
            DialKind::Ws { host, sni, .. },
            DialKind::Ws {
                host: ws_host,
                sni: ws_sni,
                ..
            },
        ) = (&f.kind, &w.kind)
        else {
            panic!("not ws dials: {f:?} {w:?}")
        };
        assert_eq!(host, ws_host, "Host stays kwsN");
        assert_eq!(sni.as_deref(), Some("allowed.example.org"));
        assert_eq!(*ws_sni, None, "the direct route sends its own name");
    }
    assert_eq!(
        l.route(front).label(),
        "front:DC2 allowed.example.org/kws2.web.telegram.org@127.0.0.2:443"
    );
}

#[test]
fn front_is_not_planned_while_the_direct_route_is_usable() {
    let c = front_cfg();
    let mut l = ladder(&c);
    let (ws, front, tcp) = front_ids(&mut l);
    // Unknown ws: no fronting.
    assert_eq!(plan(&mut l, 0), vec![ws, tcp]);
    // Up ws: no fronting, even with the front route proven.
    probe_ok(&mut l, ws, 10);
    probe_ok(&mut l, front, 10);
    assert_eq!(plan(&mut l, 20), vec![ws, tcp]);
    // Suspect ws (a soft failure from Up) is still usable (after the untested tcp): no
    // fronting.
    fail(&mut l, ws, Failure::Reset, 30);
    assert_eq!(l.route(ws).health.state(), State::Suspect);
    assert_eq!(plan(&mut l, 40), vec![tcp, ws]);
}

#[test]
fn front_is_planned_after_the_direct_route_failed_at_tls_or_upgrade() {
    for f in [
        Failure::Tls,
        Failure::HandshakeTimeout,
        Failure::Reset,
        Failure::ClosedEarly,
        Failure::Http(403),
    ] {
        let c = front_cfg();
        let mut l = ladder(&c);
        let (ws, front, tcp) = front_ids(&mut l);
        let ch = fail(&mut l, ws, f, 1_000).unwrap();
        let State::Down { until } = ch.to else {
            panic!("{f}: not down: {ch:?}")
        };
        // Unknown front: planned before tcp (tier order), for as long as ws is out — its
        // cooldown and the wait for its recovery probe after it.
        for now in [1_001, until - 1, until + 1] {
            assert_eq!(plan(&mut l, now), vec![front, tcp], "{f} at {now}");
        }
        // The direct route recovers (its probe): fronting stops at once.
        probe_ok(&mut l, ws, until + 2);
        assert_eq!(plan(&mut l, until + 3), vec![ws, tcp], "{f}: ws back");
    }
}

#[test]
fn front_is_not_planned_after_tcp_level_failures() {
    for f in [Failure::Timeout, Failure::Refused, Failure::Http(302)] {
        let c = front_cfg();
        let mut l = ladder(&c);
        let (ws, front, tcp) = front_ids(&mut l);
        probe_ok(&mut l, front, 10);
        fail(&mut l, ws, f, 1_000).unwrap();
        assert_eq!(plan(&mut l, 1_001), vec![tcp], "{f}");
        // Nothing else usable: the last-resort list still leaves fronting out.
        fail(&mut l, tcp, Failure::Refused, 1_002);
        fail(&mut l, front, Failure::Refused, 1_002);
        let all = plan(&mut l, 1_003);
        assert!(!all.contains(&front), "{f}: {all:?}");
        assert!(all.contains(&ws) && all.contains(&tcp), "{f}: {all:?}");
    }
}

#[test]
fn the_latest_failure_of_the_direct_route_decides() {
    let c = front_cfg();
    let mut l = ladder(&c);
    let (ws, front, tcp) = front_ids(&mut l);
    let ch = fail(&mut l, ws, Failure::Tls, 1_000).unwrap();
    let State::Down { until } = ch.to else {
        panic!("not down")
    };
    assert_eq!(plan(&mut l, 1_001), vec![front, tcp]);
    // Its recovery probe finds the address black-holed now: fronting cannot help any more.
    l.observe(
        Observation::ProbeDone {
            route: ws,
            result: Err((Failure::Timeout, None)),
        },
        until + 1,
    );
    assert_eq!(plan(&mut l, until + 2), vec![tcp]);
}

#[test]
fn a_front_route_cools_down_on_its_own_failures() {
    let c = front_cfg();
    let mut l = ladder(&c);
    let (ws, front, tcp) = front_ids(&mut l);
    fail(&mut l, ws, Failure::Tls, 1_000);
    // The fronting name is refused too (a certificate that does not cover it): Down like any
    // route, clients no longer get it, and its recovery probe is scheduled.
    let ch = fail(&mut l, front, Failure::Tls, 1_100).unwrap();
    let State::Down { until } = ch.to else {
        panic!("front not down: {ch:?}")
    };
    assert_eq!(plan(&mut l, 1_200), vec![tcp]);
    assert_eq!(l.route(front).health.usable(1_200), Use::Cooling { until });
    assert!(matches!(l.sched(front), Sched::Due(at) if at <= until));
    // The ws route is untouched by the front's failure (rule 2).
    assert!(matches!(l.route(ws).health.state(), State::Down { .. }));
}

#[test]
fn without_a_ws_tier_fronting_is_planned_like_any_route() {
    let mut c = front_cfg();
    c.tier_order = vec![Tier::Front, Tier::Tcp];
    let mut l = ladder(&c);
    let v = l.routes_for(DC2);
    assert_eq!(plan(&mut l, 0), v);
    assert_eq!(l.route(v[0]).tier, Tier::Front);
}

#[test]
fn a_pin_on_the_front_tier_plans_it_first() {
    let c = front_cfg();
    let mut l = ladder(&c);
    let (ws, front, tcp) = front_ids(&mut l);
    l.pin(Pin::Tier(Tier::Front)).unwrap();
    assert_eq!(plan(&mut l, 0), vec![front, ws, tcp]);
}

#[test]
fn front_routes_are_probed_at_start_and_pooled_once_used() {
    let mut c = front_cfg();
    c.startup_probes = true;
    let mut l: Ladder<Fake> = Ladder::new(&c, Rng::from_seed([9; 48]), 0);
    let (_, front, _) = front_ids(&mut l);
    // Probed at start like any route (pacing may move it behind the ws probe to the same
    // address).
    let probed = (0..50u64).any(|i| probes_of(&drain(&mut l, i * 100)).contains(&front));
    assert!(probed, "no startup probe of the front route");
    assert_eq!(l.pool_cap(front), c.pool_size);
}

#[test]
fn the_fronting_failure_classes() {
    for f in [
        Failure::Tls,
        Failure::Reset,
        Failure::ClosedEarly,
        Failure::HandshakeTimeout,
        Failure::Http(403),
        Failure::Http(429),
        Failure::Http(503),
    ] {
        assert!(blocked_after_connect(f), "{f}");
    }
    for f in [
        Failure::Timeout,
        Failure::Refused,
        Failure::HostUnreachable,
        Failure::NetUnreachable,
        Failure::AddrUnavailable,
        Failure::Local,
        Failure::Http(302),
        Failure::Http(301),
        Failure::ClosedAfterReply,
        Failure::Stalled,
        Failure::SilentPooled,
    ] {
        assert!(!blocked_after_connect(f), "{f}");
    }
}
