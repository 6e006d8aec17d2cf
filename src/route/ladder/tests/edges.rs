//! `--cf-ip` edges in the ladder (`edges.rs`): one Worker route per edge, dialled at the edge
//! with the Worker's name; a sampled edge whose routes all failed is replaced in the background
//! once the cooldown ran out (old routes retired, the new edge's routes created and probed); a
//! given edge is only cooled; the status says which edge is frozen and why.

use super::*;
use crate::route::edges::parse_cf_ip;

fn edge_cfg(items: &[&str], count: usize) -> Config {
    let mut c = cfg();
    c.tier_order = vec![Tier::Worker];
    c.cf_ips = items.iter().map(|s| parse_cf_ip(s).unwrap()).collect();
    c.cf_ip_count = count;
    c
}

#[test]
fn each_edge_is_a_worker_route_dialled_at_the_edge_with_the_workers_name() {
    let c = edge_cfg(&["127.0.0.2", "127.0.0.3"], 3);
    let mut l = ladder(&c);
    let ids = l.routes_for(DC2);
    let labels: Vec<String> = ids.iter().map(|&i| l.route(i).label()).collect();
    assert_eq!(
        labels,
        [
            "worker:DC2 w…workers.dev@127.0.0.2:443",
            "worker:DC2 w…workers.dev@127.0.0.3:443"
        ]
    );
    // No DNS needed: the name is never asked for.
    let p = l.plan(DC2, 0, &mut |_| panic!("an edge route asked DNS"));
    let addrs: Vec<String> = p.cands.iter().map(|c| c.spec.addr.to_string()).collect();
    assert_eq!(addrs, ["127.0.0.2:443", "127.0.0.3:443"]);
    match &p.cands[0].spec.kind {
        crate::net::dial::DialKind::Ws { host, sni, .. } => {
            assert_eq!((host.as_str(), sni), ("w.example.workers.dev", &None))
        }
        other => panic!("{other:?}"),
    }
    assert!(l.route(ids[0]).host().is_none());
}

#[test]
fn a_frozen_sampled_edge_is_replaced_in_the_background_a_given_one_only_cooled() {
    let c = edge_cfg(&["127.0.0.2", "127.9.0.0/16"], 1);
    let mut l = ladder(&c);
    let ids = l.routes_for(DC2);
    assert_eq!(ids.len(), 2);
    let sampled = l.route(ids[1]).edge().unwrap();
    assert!(sampled.to_string().starts_with("127.9."));
    // Both edges freeze (a stalled session each: the route goes Down).
    for &id in &ids {
        fail(&mut l, id, Failure::Stalled, 100);
    }
    let st = l.edges_status(100);
    assert_eq!(st[0].state, "frozen");
    assert_eq!(st[0].why.as_deref(), Some("stalled"));
    assert_eq!(st[1].source, "sampled from 127.9.0.0/16");
    // Still cooling: nothing replaced, nothing planned for a client from a frozen edge.
    drain(&mut l, 101);
    assert_eq!(l.edges_replaced(), 0);
    // The cooldown ran out: the sampled edge is replaced before its recovery probe.
    let later = 100 + 60_000;
    let work = drain(&mut l, later);
    assert_eq!(l.edges_replaced(), 1);
    assert!(l.retired(ids[1]), "the old edge's route is retired");
    assert!(!l.retired(ids[0]), "a given edge stays (only cooled)");
    let now_ids = l.routes_for(DC2);
    assert_eq!(now_ids.len(), 2);
    let new = l.route(now_ids[1]).edge().unwrap();
    assert!(new != sampled && new.to_string().starts_with("127.9."));
    let probed = probes_of(&work);
    assert!(
        probed.contains(&now_ids[1]),
        "the new edge is probed: {work:?}"
    );
    assert!(
        probed.contains(&ids[0]),
        "the given edge gets its recovery probe"
    );
    assert!(!probed.contains(&ids[1]), "no probe of a retired route");
    let st = l.edges_status(later);
    assert_eq!((st[1].ip, st[1].state), (new, "untested"));
    assert_eq!(st[1].routes, vec![now_ids[1]]);
}

/// An edge route's first background probe pulls `--stall-probe-bytes` past the freeze size
/// (edges freeze selectively after ~16 KiB): a frozen edge fails its probe as `stalled`
/// before a client meets it; once pulled, later probes are plain again. A route without an
/// edge is probed plain.
#[test]
fn an_edge_routes_first_probe_pulls_past_the_freeze_size() {
    let mut c = edge_cfg(&["127.0.0.2"], 3);
    c.startup_probes = true;
    let mut l = ladder(&c);
    let pulls = |work: &[Work]| -> Vec<(RouteId, u32)> {
        work.iter()
            .filter_map(|w| match w {
                Work::Probe {
                    route, pull_bytes, ..
                } => Some((*route, *pull_bytes)),
                _ => None,
            })
            .collect()
    };
    let work = drain(&mut l, 1);
    let id = l.routes_for(DC2)[0];
    assert!(
        pulls(&work).contains(&(id, c.stall_probe_bytes)),
        "the edge route's startup probe pulls: {work:?}"
    );
    // It pulled through: Up, and the next probe (once dialled by a client) is plain.
    l.observe(
        Observation::ProbeDone {
            route: id,
            result: Ok(20),
        },
        2,
    );
    assert_eq!(l.route(id).health.state(), State::Up);
    let mut plain = cfg();
    plain.tier_order = vec![Tier::Worker];
    plain.startup_probes = true;
    let mut l2 = ladder(&plain);
    let work = drain(&mut l2, 1);
    let id2 = l2.routes_for(DC2)[0];
    assert!(pulls(&work).contains(&(id2, 0)), "no edge: plain {work:?}");
}

#[test]
fn a_reload_with_other_edges_retires_the_old_edges_routes() {
    let c = edge_cfg(&["127.0.0.2", "127.0.0.3"], 3);
    let mut l = ladder(&c);
    let before = l.routes_for(DC2);
    let c2 = edge_cfg(&["127.0.0.3"], 3);
    assert_eq!(l.reconfigure(&c2, 10), 1);
    assert!(l.retired(before[0]) && !l.retired(before[1]));
    assert_eq!(l.routes_for(DC2), vec![before[1]]);
    // No edges: back to the DNS answer.
    l.reconfigure(&edge_cfg(&[], 3), 20);
    let ids = l.routes_for(DC2);
    assert_eq!(ids.len(), 1);
    assert_eq!(l.route(ids[0]).edge(), None);
    assert!(l.edges_status(20).is_empty());
}
