//! The shared CF domain list's ladder rules (issue 11): its domains are cfproxy routes after
//! `--cf-domain`'s, each with its own health (a 429 or a 5xx on one domain cools that domain
//! down, not the others), and a new list keeps unchanged domains' routes, retires removed ones
//! and creates routes for new ones.

use super::*;
use crate::route::table::Target;

fn ep(host: &str) -> CfEndpoint {
    CfEndpoint {
        host: host.into(),
        port: 443,
    }
}

fn shared_cfg(shared: &[&str]) -> Config {
    let mut c = cfg();
    c.tier_order = vec![Tier::CfProxy];
    c.cf_domains = vec![ep("user.example.org")];
    c.cf_shared_domains = shared.iter().map(|h| ep(h)).collect();
    c
}

fn host_of(l: &Ladder<Fake>, id: RouteId) -> String {
    match &l.route(id).target {
        Target::CfProxy { ep, .. } => ep.host.clone(),
        other => panic!("not cfproxy: {other:?}"),
    }
}

fn planned_hosts(l: &mut Ladder<Fake>, now: u64) -> Vec<String> {
    plan(l, now).into_iter().map(|id| host_of(l, id)).collect()
}

#[test]
fn shared_domains_follow_the_users_and_back_off_one_by_one() {
    let c = shared_cfg(&["a.co.uk", "b.co.uk", "c.co.uk"]);
    let mut l = ladder(&c);
    let routes = l.routes_for(DC2);
    let hosts: Vec<String> = routes.iter().map(|&id| host_of(&l, id)).collect();
    assert_eq!(
        hosts,
        [
            "kws2.user.example.org",
            "kws2.a.co.uk",
            "kws2.b.co.uk",
            "kws2.c.co.uk"
        ]
    );
    // b answers 429, c answers 503: each cools down alone.
    fail(&mut l, routes[2], Failure::Http(429), 100);
    fail(&mut l, routes[3], Failure::Http(503), 100);
    let planned = planned_hosts(&mut l, 200);
    assert!(
        planned.contains(&"kws2.user.example.org".to_string()),
        "{planned:?}"
    );
    assert!(planned.contains(&"kws2.a.co.uk".to_string()), "{planned:?}");
    assert!(
        !planned.contains(&"kws2.b.co.uk".to_string()),
        "{planned:?}"
    );
    // c's 5xx is soft: from Unknown it is Down too, never touching a.
    assert!(
        !planned.contains(&"kws2.c.co.uk".to_string()),
        "{planned:?}"
    );
    assert!(l.route(routes[1]).health.state() == State::Unknown);
}

#[test]
fn a_new_list_keeps_unchanged_domains_retires_removed_and_adds_new() {
    let c = shared_cfg(&["a.co.uk", "b.co.uk", "c.co.uk"]);
    let mut l = ladder(&c);
    let before = l.routes_for(DC2);
    probe_ok(&mut l, before[1], 50);
    fail(&mut l, before[2], Failure::Http(429), 50);
    let c2 = shared_cfg(&["a.co.uk", "d.co.uk", "b.co.uk"]);
    l.reconfigure(&c2, 100);
    assert!(!l.retired(before[0]), "the user's domain stays");
    assert!(!l.retired(before[1]), "a is unchanged");
    assert!(!l.retired(before[2]), "b is unchanged");
    assert!(l.retired(before[3]), "c was removed");
    assert!(
        l.route(before[1]).health.state() == State::Up,
        "a keeps its health"
    );
    assert!(
        matches!(l.route(before[2]).health.state(), State::Down { .. }),
        "b keeps its cooldown"
    );
    let after: Vec<String> = l
        .routes_for(DC2)
        .iter()
        .map(|&id| host_of(&l, id))
        .collect();
    assert!(after.contains(&"kws2.d.co.uk".to_string()), "{after:?}");
    assert!(!after.contains(&"kws2.c.co.uk".to_string()), "{after:?}");
}
