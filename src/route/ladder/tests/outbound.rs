//! Ladder rules for failures seen through an outbound proxy (`--outbound-proxy`): the proxy's
//! own failures cool no route down and are counted; its refusing a destination is the route's.

use super::*;

#[test]
fn a_dead_outbound_proxy_cools_no_route_and_is_counted() {
    let c = cfg();
    let mut l = ladder(&c);
    let (ws, worker, tcp) = ids(&mut l);
    probe_ok(&mut l, ws, 0);
    for (now, f) in [
        (10, Failure::ProxyUnreachable),
        (20, Failure::ProxyAuth),
        (30, Failure::ProxyProtocol),
    ] {
        for r in [ws, worker, tcp] {
            assert_eq!(fail(&mut l, r, f, now), None, "{f} cooled a route");
        }
    }
    assert_eq!(l.counters.proxy_failures, 9);
    assert!(is_up(&l, ws));
    assert_eq!(
        plan(&mut l, 40),
        vec![ws, worker, tcp],
        "every route still planned"
    );
    // Not the network's outage either: the network flag stays clear.
    assert!(!l.network_down());
}

#[test]
fn a_destination_the_proxy_refuses_counts_against_that_route_and_the_ladder_moves_on() {
    let c = cfg();
    let mut l = ladder(&c);
    let (ws, worker, tcp) = ids(&mut l);
    // CONNECT 403 (an ACL) on ws, SOCKS5 reply 5 (refused) on the worker: both go Down.
    let ch = fail(&mut l, ws, Failure::ProxyHttp(403), 10).expect("ws not cooled");
    assert!(matches!(ch.to, State::Down { .. }), "{ch:?}");
    assert_eq!(plan(&mut l, 20), vec![worker, tcp]);
    let ch = fail(&mut l, worker, Failure::ProxySocks(5), 30).expect("worker not cooled");
    assert!(matches!(ch.to, State::Down { .. }), "{ch:?}");
    assert_eq!(plan(&mut l, 40), vec![tcp]);
    assert_eq!(
        l.counters.proxy_failures, 0,
        "the route's failures, not the proxy's"
    );
}
