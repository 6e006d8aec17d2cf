//! Cloudflare edge addresses as routes (`--cf-ip`, docs/design.md §4 "edges"): which edge
//! addresses the Worker and cfproxy routes dial instead of the DNS answer for their name.
//!
//! Sans-IO. Owns: the ranges the items sample from ([`ranges`]), the pool of
//! edges in use ([`Edges`]: given addresses kept, sampled ones replaced by fresh samples of the
//! same range) and the rule that says what an edge's routes make of it ([`edge_state`],
//! [`Edges::should_replace`]). Must not touch: routes, health, sockets — the table makes one
//! route per (edge, Worker or domain, DC) from [`Edges::ips`], and the ladder runs the
//! replacement in the background through the table's retire/create machinery.
//!
//! An edge is only a TCP address: the TLS SNI and the HTTP `Host` stay the Worker's or the
//! domain's name, and Cloudflare's anycast edges serve every proxied name on every edge
//! address (docs/protocol.md §4.8). The items themselves (an address, a CIDR range, `auto`,
//! `auto6`; [`parse_cf_ip`], [`Cidr::sample`], the built-in [`CF_RANGES_V4`] /
//! [`CF_RANGES_V6`]) are `config::cf_ip`'s, re-exported here, since `Config` holds them.

use std::net::IpAddr;

use crate::error::Failure;
use crate::rng::Rng;
use crate::route::health::State;

pub use crate::config::cf_ip::{
    parse_cf_ip, CfIp, Cidr, CF_RANGES_V4, CF_RANGES_V6, DEFAULT_COUNT, MAX_EDGES,
};

/// The ranges `items` sample from, in order, each once (`auto` expands to [`CF_RANGES_V4`],
/// `auto6` to [`CF_RANGES_V6`]).
pub fn ranges(items: &[CfIp]) -> Vec<Cidr> {
    let mut out: Vec<Cidr> = Vec::new();
    let mut add = |c: Cidr| {
        if !out.contains(&c) {
            out.push(c);
        }
    };
    for item in items {
        match item {
            CfIp::Range(c) => add(*c),
            CfIp::Auto => CF_RANGES_V4.iter().for_each(|r| add(builtin(r))),
            CfIp::Auto6 => CF_RANGES_V6.iter().for_each(|r| add(builtin(r))),
            CfIp::Addr(_) => {}
        }
    }
    out
}

fn builtin(r: &str) -> Cidr {
    Cidr::parse(r).expect("built-in range parses") // a unit test parses every one
}

/// Where an edge came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// A `--cf-ip` address.
    Given,
    /// Sampled from this range.
    Sampled(Cidr),
}

impl Source {
    /// `given` or `sampled from 104.16.0.0/13` (status and `check`).
    pub fn describe(&self) -> String {
        match self {
            Source::Given => "given".into(),
            Source::Sampled(c) => format!("sampled from {c}"),
        }
    }
}

/// One edge in use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Edge {
    /// The address dialled (port from the Worker or domain).
    pub ip: IpAddr,
    /// Given or sampled.
    pub source: Source,
}

/// The edges in use: the given addresses (at most [`MAX_EDGES`]), then up to `count` samples
/// from the ranges (the total capped at [`MAX_EDGES`]).
#[derive(Clone, Debug, Default)]
pub struct Edges {
    list: Vec<Edge>,
    ranges: Vec<Cidr>,
    /// Sampled edges replaced so far (status).
    pub replaced: u64,
}

impl Edges {
    /// The pool for `items` with `count` sampled edges (none without a range). Returns the
    /// pool and how many given addresses were left out over the cap.
    pub fn new(items: &[CfIp], count: usize, rng: &mut Rng) -> (Edges, usize) {
        let mut list: Vec<Edge> = Vec::new();
        let mut dropped = 0;
        for item in items {
            if let CfIp::Addr(ip) = item {
                if list.iter().any(|e| e.ip == *ip) {
                    continue;
                }
                if list.len() < MAX_EDGES {
                    list.push(Edge {
                        ip: *ip,
                        source: Source::Given,
                    });
                } else {
                    dropped += 1;
                }
            }
        }
        let ranges = ranges(items);
        let mut e = Edges {
            list,
            ranges,
            replaced: 0,
        };
        let want = count.min(MAX_EDGES.saturating_sub(e.list.len()));
        if !e.ranges.is_empty() {
            for _ in 0..want {
                let range = e.pick_range(rng);
                if let Some(ip) = e.fresh(range, None, rng) {
                    e.list.push(Edge {
                        ip,
                        source: Source::Sampled(range),
                    });
                }
            }
        }
        (e, dropped)
    }

    /// True when no `--cf-ip` is configured (routes dial the DNS answer).
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// The edges in use, given ones first.
    pub fn list(&self) -> &[Edge] {
        &self.list
    }

    /// The edge addresses in use, in [`Edges::list`] order.
    pub fn ips(&self) -> Vec<IpAddr> {
        self.list.iter().map(|e| e.ip).collect()
    }

    /// A range to sample from: by size among IPv4 ranges when their sizes add up within u32
    /// (so a /13 gets 128 times the samples of a /20), else uniformly.
    fn pick_range(&self, rng: &mut Rng) -> Cidr {
        let total: u64 = self
            .ranges
            .iter()
            .map(|c| c.size())
            .fold(0, u64::saturating_add);
        if let Ok(total) = u32::try_from(total) {
            let mut at = u64::from(rng.below(total));
            for c in &self.ranges {
                if at < c.size() {
                    return *c;
                }
                at -= c.size();
            }
        }
        self.ranges[rng.below(self.ranges.len() as u32) as usize]
    }

    /// A sample of `range` that is not in use and is not `avoid` (a few draws; `None` when the
    /// range has nothing else to give).
    fn fresh(&self, range: Cidr, avoid: Option<IpAddr>, rng: &mut Rng) -> Option<IpAddr> {
        (0..16)
            .map(|_| range.sample(rng))
            .find(|ip| Some(*ip) != avoid && self.list.iter().all(|e| e.ip != *ip))
    }

    /// Replaces the sampled edge `ip` by a fresh sample of its range; returns the new address.
    /// A given edge is never replaced (`None`), nor one whose range has no other address.
    pub fn replace(&mut self, ip: IpAddr, rng: &mut Rng) -> Option<IpAddr> {
        let i = self.list.iter().position(|e| e.ip == ip)?;
        let Source::Sampled(range) = self.list[i].source else {
            return None;
        };
        let new = self.fresh(range, Some(ip), rng)?;
        self.list[i].ip = new;
        self.replaced += 1;
        Some(new)
    }

    /// Whether the edge `ip` is due for replacement, given what its routes say ([`EdgeView`]):
    /// only a sampled edge, only when none of its routes works ([`EdgeState::Frozen`] or
    /// [`EdgeState::Cooling`]), and only once a failed route's cooldown has run out and no probe
    /// of its routes is running — the cooldown bounds how fast a range is explored, and a
    /// running probe gets to say its piece first.
    pub fn should_replace(&self, ip: IpAddr, view: &EdgeView) -> bool {
        let sampled = self
            .list
            .iter()
            .any(|e| e.ip == ip && matches!(e.source, Source::Sampled(_)));
        sampled
            && matches!(view.state, EdgeState::Frozen | EdgeState::Cooling)
            && view.expired
            && !view.probing
    }
}

/// What an edge's routes make of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EdgeState {
    /// A route through it is Up or Suspect.
    Ok,
    /// None works; a route is Down for a frozen transfer (`stalled`).
    Frozen,
    /// None works; a route is Down (cooling or waiting for its recovery probe).
    Cooling,
    /// Nothing is known yet.
    Untested,
}

impl EdgeState {
    /// `ok`, `frozen`, `cooling`, `untested`.
    pub fn name(self) -> &'static str {
        match self {
            EdgeState::Ok => "ok",
            EdgeState::Frozen => "frozen",
            EdgeState::Cooling => "cooling",
            EdgeState::Untested => "untested",
        }
    }
}

/// One route's part in [`edge_state`]: its health state, last failure and whether its probe
/// is running.
#[derive(Clone, Copy, Debug)]
pub struct RouteView {
    /// Health state.
    pub state: State,
    /// Last failure, if any.
    pub last_failure: Option<Failure>,
    /// A probe of it is running.
    pub probing: bool,
}

/// The sum of an edge's routes ([`edge_state`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EdgeView {
    /// The edge's state.
    pub state: EdgeState,
    /// The last failure of a failed route (why it is frozen or cooling).
    pub why: Option<Failure>,
    /// A failed route's cooldown has run out.
    pub expired: bool,
    /// A probe of one of its routes is running.
    pub probing: bool,
}

/// What the (live) routes of one edge say about it at `now`: Ok if any route is Up or
/// Suspect; else Frozen if a Down route last failed `stalled`; else Cooling if one is Down;
/// else Untested.
pub fn edge_state(routes: &[RouteView], now: u64) -> EdgeView {
    let mut v = EdgeView {
        state: EdgeState::Untested,
        why: None,
        expired: false,
        probing: routes.iter().any(|r| r.probing),
    };
    if routes
        .iter()
        .any(|r| matches!(r.state, State::Up | State::Suspect))
    {
        v.state = EdgeState::Ok;
        return v;
    }
    for r in routes {
        if let State::Down { until } = r.state {
            v.expired |= now >= until;
            let stalled = r.last_failure == Some(Failure::Stalled);
            if stalled || v.why.is_none() {
                v.why = r.last_failure;
            }
            if stalled {
                v.state = EdgeState::Frozen;
            } else if v.state != EdgeState::Frozen {
                v.state = EdgeState::Cooling;
            }
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rng() -> Rng {
        Rng::from_seed([7; 48])
    }

    #[test]
    fn items_parse_and_bad_ones_name_themselves() {
        assert_eq!(
            parse_cf_ip("104.16.1.2").unwrap(),
            CfIp::Addr("104.16.1.2".parse().unwrap())
        );
        assert_eq!(
            parse_cf_ip("[2606:4700::1]").unwrap(),
            CfIp::Addr("2606:4700::1".parse().unwrap())
        );
        assert_eq!(
            parse_cf_ip(" 104.16.0.0/13 ").unwrap(),
            CfIp::Range(Cidr {
                base: "104.16.0.0".parse().unwrap(),
                len: 13
            })
        );
        assert_eq!(
            parse_cf_ip("127.0.0.2/32").unwrap(),
            CfIp::Addr("127.0.0.2".parse().unwrap())
        );
        assert_eq!(parse_cf_ip("AUTO").unwrap(), CfIp::Auto);
        assert_eq!(parse_cf_ip("auto6").unwrap(), CfIp::Auto6);
        for bad in [
            "104.16.0.1/13",
            "104.16.0.0/33",
            "1.2.3",
            "cf.example",
            "",
            "1.2.3.4/x",
        ] {
            let e = parse_cf_ip(bad).unwrap_err();
            assert!(e.contains(bad), "{e:?} names {bad:?}");
        }
    }

    #[test]
    fn every_built_in_range_parses() {
        let r = ranges(&[CfIp::Auto, CfIp::Auto6, CfIp::Auto]);
        assert_eq!(
            r.len(),
            CF_RANGES_V4.len() + CF_RANGES_V6.len(),
            "each once"
        );
        assert!(r[..CF_RANGES_V4.len()].iter().all(|c| c.base.is_ipv4()));
    }

    #[test]
    fn samples_stay_inside_the_range_and_skip_network_and_broadcast() {
        let mut rng = rng();
        let c = Cidr::parse("127.0.0.0/30").unwrap();
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..200 {
            let ip = c.sample(&mut rng);
            assert!(c.contains(ip));
            seen.insert(ip);
        }
        let want: std::collections::BTreeSet<IpAddr> = ["127.0.0.1", "127.0.0.2"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        assert_eq!(seen, want);
        let big = Cidr::parse("104.16.0.0/13").unwrap();
        let v6 = Cidr::parse("2a06:98c0::/29").unwrap();
        for _ in 0..200 {
            assert!(big.contains(big.sample(&mut rng)));
            assert!(v6.contains(v6.sample(&mut rng)));
        }
        assert!(!big.contains("104.24.0.1".parse().unwrap()));
        assert!(!big.contains("::1".parse().unwrap()));
        let one = Cidr::parse("127.0.0.9/31").unwrap_err(); // host bit set
        assert!(one.contains("host bits"));
    }

    #[test]
    fn pool_keeps_given_addresses_first_samples_the_rest_and_caps_the_count() {
        let mut rng = rng();
        let items = vec![
            parse_cf_ip("127.0.0.2").unwrap(),
            parse_cf_ip("127.1.0.0/16").unwrap(),
            parse_cf_ip("127.0.0.2").unwrap(),
        ];
        let (e, dropped) = Edges::new(&items, 3, &mut rng);
        assert_eq!(dropped, 0);
        assert_eq!(e.list().len(), 4);
        assert_eq!(e.list()[0].source, Source::Given);
        let range = Cidr::parse("127.1.0.0/16").unwrap();
        assert!(e.list()[1..]
            .iter()
            .all(|x| x.source == Source::Sampled(range) && range.contains(x.ip)));
        let mut ips = e.ips();
        ips.dedup();
        assert_eq!(ips.len(), 4, "no edge twice");
        // The cap: ten given addresses keep eight, and nothing is sampled beside them.
        let mut many: Vec<CfIp> = (1..=10)
            .map(|i| CfIp::Addr(format!("127.0.0.{i}").parse().unwrap()))
            .collect();
        many.push(CfIp::Auto);
        let (e, dropped) = Edges::new(&many, 3, &mut rng);
        assert_eq!((e.list().len(), dropped), (MAX_EDGES, 2));
        assert!(Edges::new(&[], 3, &mut rng).0.is_empty());
    }

    #[test]
    fn only_sampled_edges_are_replaced_and_only_after_a_cooldown_with_no_probe_running() {
        let mut rng = rng();
        let items = [
            parse_cf_ip("127.0.0.2").unwrap(),
            parse_cf_ip("127.2.0.0/16").unwrap(),
        ];
        let (mut e, _) = Edges::new(&items, 1, &mut rng);
        let given: IpAddr = "127.0.0.2".parse().unwrap();
        let sampled = e.list()[1].ip;
        let down = |until, f| RouteView {
            state: State::Down { until },
            last_failure: Some(f),
            probing: false,
        };
        let frozen = edge_state(
            &[down(1_000, Failure::Stalled), down(1_000, Failure::Timeout)],
            1_000,
        );
        assert_eq!(frozen.state, EdgeState::Frozen);
        assert_eq!(frozen.why, Some(Failure::Stalled));
        assert!(e.should_replace(sampled, &frozen));
        assert!(
            !e.should_replace(given, &frozen),
            "a given edge is only cooled"
        );
        // Still cooling: not yet.
        let cooling = edge_state(&[down(5_000, Failure::Timeout)], 1_000);
        assert_eq!(
            (cooling.state, cooling.expired),
            (EdgeState::Cooling, false)
        );
        assert!(!e.should_replace(sampled, &cooling));
        // One route of the edge works: kept.
        let up = RouteView {
            state: State::Up,
            last_failure: None,
            probing: false,
        };
        let ok = edge_state(&[down(0, Failure::Timeout), up], 1_000);
        assert_eq!(ok.state, EdgeState::Ok);
        assert!(!e.should_replace(sampled, &ok));
        // A probe running: it speaks first.
        let mut probing = down(0, Failure::Timeout);
        probing.probing = true;
        assert!(!e.should_replace(sampled, &edge_state(&[probing], 1_000)));
        assert_eq!(edge_state(&[], 0).state, EdgeState::Untested);
        // Replacing: a fresh address of the same range, the given one untouched.
        let new = e.replace(sampled, &mut rng).unwrap();
        assert_ne!(new, sampled);
        assert!(Cidr::parse("127.2.0.0/16").unwrap().contains(new));
        assert_eq!(e.ips(), vec![given, new]);
        assert_eq!(e.replace(given, &mut rng), None);
        assert_eq!(e.replaced, 1);
    }
}
