//! Reachability of the addresses routes dial (docs/design.md §4 "A dead dependency is not a
//! storm"): which destinations have no network path now, and whether this host's network as a
//! whole is down. Sans-IO: facts in (a network-class failure toward a destination, a route on
//! a destination that worked), news out (what to say), time as a parameter (`now`, u64 ms on
//! the caller's monotonic clock). Owns no log, socket or clock: the ladder (`ladder::deps`)
//! feeds it and writes the lines; health never sees these failures (they cool no route).
//!
//! The rules:
//! * A network-class failure ([`Failure::is_network`]: network or host unreachable, no local
//!   address; from the OS or from a SOCKS5 proxy's reply) toward a destination marks it
//!   unreachable.
//! * An unreachable destination becomes *its own fact* when another destination works while
//!   it is unreachable, or when the network comes back: one address without a path (IPv6 on a
//!   router without IPv6, an ISP's net-unreachable for one range). It is said once, on its
//!   next failure (a confirmation: one failure racing a recovery says nothing), with the
//!   address and the reason; again only when the reason changes, and once when it works again.
//! * This host's network is down when at least two destinations (every known one, if fewer
//!   are known) are unreachable and none of them is its own fact (nothing worked since they
//!   failed), and either something had worked before or the oldest of those failures is at
//!   least `grace_ms` old: at start nothing has worked yet, and the instant failure of one
//!   address must not beat the first answers from the others. Said once per outage; any
//!   destination that works ends it. Only this is [`Reach::network_down`]: the flag under
//!   which a silent session says nothing about its route.

use std::fmt;
use std::net::SocketAddr;

use crate::error::Failure;

/// Where a route's dials go, as far as reachability is concerned: an address and port, or a
/// host name the resolver answers for (a Worker, a Cloudflare-proxied domain, an upstream
/// proxy's name).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Dest {
    /// A fixed address (a DC's WS front or TCP address, an upstream proxy's IP).
    Addr(SocketAddr),
    /// A host name (its address comes from the resolver).
    Name(String),
}

/// What the caller should say about a fact (one line each).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum News {
    /// This host's network went down: every address tried is unreachable. `label` names the
    /// destination whose failure decided it, `failure` its class.
    NetworkDown {
        /// The deciding destination, as the caller labelled it.
        label: String,
        /// Its failure class.
        failure: Failure,
    },
    /// A destination worked again after the network was down for `down_ms`.
    NetworkBack {
        /// How long it was down (ms).
        down_ms: u64,
        /// The destination that worked.
        label: String,
    },
    /// One destination has no path while others work (said once).
    AddressDown {
        /// The destination.
        label: String,
        /// Its failure class.
        failure: Failure,
    },
    /// A destination already said to be unreachable fails for another reason now.
    AddressChanged {
        /// The destination.
        label: String,
        /// The new failure class.
        failure: Failure,
    },
    /// A destination said to be unreachable worked again after `down_ms`.
    AddressBack {
        /// The destination.
        label: String,
        /// How long it was unreachable (ms).
        down_ms: u64,
    },
}

/// The unreachable state of one destination.
#[derive(Clone, Debug)]
struct Unreach {
    failure: Failure,
    since: u64,
    /// Its own fact: another destination worked (or the network came back) while it was
    /// unreachable.
    own: bool,
    /// Said (News::AddressDown).
    said: bool,
}

#[derive(Clone, Debug)]
struct Entry {
    dest: Dest,
    /// How the caller names it in lines (first label given).
    label: String,
    unreach: Unreach,
}

/// Per-destination reachability and the network-down flag. See the module docs.
#[derive(Clone, Debug)]
pub struct Reach {
    /// Unreachable destinations only (a destination that works has no entry).
    entries: Vec<Entry>,
    /// When the network went down (ms), while it is.
    down_since: Option<u64>,
    /// Some destination has worked since start.
    any_ok: bool,
    grace_ms: u64,
}

impl Reach {
    /// Nothing known yet; at start a network-down needs its oldest failure `grace_ms` old.
    pub fn new(grace_ms: u64) -> Reach {
        Reach {
            entries: Vec::new(),
            down_since: None,
            any_ok: false,
            grace_ms,
        }
    }

    /// Sets the start grace (a reload).
    pub fn set_grace(&mut self, grace_ms: u64) {
        self.grace_ms = grace_ms;
    }

    /// True while this host's network is down (see the module docs): not merely one address
    /// without a path.
    pub fn network_down(&self) -> bool {
        self.down_since.is_some()
    }

    /// True when some destination is unreachable now.
    pub fn any_unreachable(&self) -> bool {
        !self.entries.is_empty()
    }

    /// True when `dest` is unreachable as its own, confirmed fact (it failed again while
    /// others worked; said): worth trying last. A destination that only failed during an
    /// outage is not, until it fails again.
    pub fn unreachable_alone(&self, dest: &Dest) -> bool {
        self.find(dest)
            .is_some_and(|e| e.unreach.own && e.unreach.said)
    }

    /// Destinations unreachable now: (label, failure class, since ms, own fact).
    pub fn unreachable(&self) -> impl Iterator<Item = (&str, Failure, u64, bool)> {
        self.entries.iter().map(|e| {
            let u = &e.unreach;
            (e.label.as_str(), u.failure, u.since, u.own)
        })
    }

    fn find(&self, dest: &Dest) -> Option<&Entry> {
        self.entries.iter().find(|e| &e.dest == dest)
    }

    /// A dial toward `dest` (named `label` in lines) failed at `now` with `failure`, a
    /// network-class failure ([`Failure::is_network`]; other classes are ignored). `known`
    /// is the number of distinct destinations the routes dial. Appends what to say to `out`.
    pub fn failed(
        &mut self,
        dest: Dest,
        label: &str,
        failure: Failure,
        (known, now): (usize, u64),
        out: &mut Vec<News>,
    ) {
        if !failure.is_network() {
            return;
        }
        let network_up = self.down_since.is_none();
        match self.entries.iter_mut().find(|e| e.dest == dest) {
            None => self.entries.push(Entry {
                dest,
                label: label.to_string(),
                unreach: Unreach {
                    failure,
                    since: now,
                    own: false,
                    said: false,
                },
            }),
            Some(e) => {
                let u = &mut e.unreach;
                if u.failure != failure {
                    u.failure = failure;
                    if u.said {
                        out.push(News::AddressChanged {
                            label: e.label.clone(),
                            failure,
                        });
                    }
                }
                // Unreachable again while others work: confirmed, said once.
                if u.own && !u.said && network_up {
                    u.said = true;
                    out.push(News::AddressDown {
                        label: e.label.clone(),
                        failure,
                    });
                }
            }
        }
        if network_up {
            self.check_down(known, label, failure, now, out);
        }
    }

    /// The network is down when enough destinations failed with nothing working since.
    fn check_down(
        &mut self,
        known: usize,
        label: &str,
        failure: Failure,
        now: u64,
        out: &mut Vec<News>,
    ) {
        let open = self.entries.iter().filter(|e| !e.unreach.own);
        let (count, oldest) = open.fold((0usize, u64::MAX), |(n, o), e| {
            (n + 1, o.min(e.unreach.since))
        });
        let need = known.clamp(1, 2);
        let settled = self.any_ok || now.saturating_sub(oldest) >= self.grace_ms;
        if count >= need && settled {
            self.down_since = Some(now);
            out.push(News::NetworkDown {
                label: label.to_string(),
                failure,
            });
        }
    }

    /// A route on `dest` (named `label`) worked at `now`. Appends what to say to `out`.
    pub fn worked(&mut self, dest: &Dest, label: &str, now: u64, out: &mut Vec<News>) {
        self.any_ok = true;
        if let Some(i) = self.entries.iter().position(|e| &e.dest == dest) {
            let e = self.entries.swap_remove(i);
            if e.unreach.said {
                out.push(News::AddressBack {
                    label: e.label,
                    down_ms: now.saturating_sub(e.unreach.since),
                });
            }
        }
        if let Some(since) = self.down_since.take() {
            out.push(News::NetworkBack {
                down_ms: now.saturating_sub(since),
                label: label.to_string(),
            });
        }
        // Whatever is still unreachable was so while this worked: its own fact (said when it
        // fails again, if it does).
        for e in &mut self.entries {
            e.unreach.own = true;
        }
    }

    /// Forgets destinations `live` no longer accepts (a reload retired their routes).
    pub fn retain(&mut self, mut live: impl FnMut(&Dest) -> bool) {
        self.entries.retain(|e| live(&e.dest));
    }
}

/// An address as `IP:PORT` (IPv6 in brackets), a name as given.
impl fmt::Display for Dest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dest::Addr(a) => write!(f, "{a}"),
            Dest::Name(n) => f.write_str(n),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const V6: &str = "[2001:db8::4]:443";
    const V6B: &str = "[2001:db8::2]:443";

    fn ip(s: &str) -> Dest {
        Dest::Addr(s.parse().unwrap())
    }

    fn fail(r: &mut Reach, d: &str, f: Failure, known: usize, now: u64) -> Vec<News> {
        let mut out = Vec::new();
        r.failed(ip(d), d, f, (known, now), &mut out);
        out
    }

    fn ok(r: &mut Reach, d: &str, now: u64) -> Vec<News> {
        let mut out = Vec::new();
        r.worked(&ip(d), d, now, &mut out);
        out
    }

    /// Issue 19 §4: an IPv6 DC address on a router without IPv6 flipped the global flag and
    /// wrote a network-unreachable / reachable-again pair every probe, forever, while the other
    /// DCs worked. Now: one line with the address and reason (on its confirmation), the global
    /// flag never set, and nothing more while nothing changes.
    #[test]
    fn one_address_without_a_path_is_said_once_and_never_takes_the_network_down() {
        let mut r = Reach::new(10_000);
        let mut lines = Vec::new();
        // At start the IPv6 address fails at once; the IPv4 ones answer a moment later.
        lines.extend(fail(&mut r, V6, Failure::NetUnreachable, 3, 1));
        assert!(!r.network_down(), "one address is not the network");
        lines.extend(ok(&mut r, "149.154.167.51:443", 40));
        assert!(!r.unreachable_alone(&ip(V6)), "not yet confirmed");
        // An hour of probes every 10 s, sessions on the working DCs in between.
        for i in 1..=360u64 {
            let now = i * 10_000;
            lines.extend(fail(&mut r, V6, Failure::NetUnreachable, 3, now));
            lines.extend(ok(&mut r, "149.154.175.50:443", now + 5));
            assert!(!r.network_down());
            assert!(r.unreachable_alone(&ip(V6)));
        }
        assert_eq!(
            lines,
            vec![News::AddressDown {
                label: V6.into(),
                failure: Failure::NetUnreachable
            }]
        );
        // A change of reason is said; working again is said once.
        let changed = fail(&mut r, V6, Failure::HostUnreachable, 3, 4_000_000);
        assert!(matches!(changed[..], [News::AddressChanged { .. }]));
        let back = ok(&mut r, V6, 4_000_100);
        assert!(matches!(
            back[..],
            [News::AddressBack {
                down_ms: 4_000_099,
                ..
            }]
        ));
        assert!(!r.unreachable_alone(&ip(V6)));
    }

    #[test]
    fn the_network_is_down_when_every_address_tried_fails_and_none_works() {
        let mut r = Reach::new(10_000);
        assert!(ok(&mut r, "10.0.0.1:443", 0).is_empty());
        assert!(fail(&mut r, "10.0.0.1:443", Failure::NetUnreachable, 3, 100).is_empty());
        assert!(!r.network_down(), "one destination so far");
        let down = fail(&mut r, "10.0.0.2:443", Failure::NetUnreachable, 3, 110);
        assert!(matches!(down[..], [News::NetworkDown { .. }]));
        assert!(r.network_down());
        // More failures during the outage say nothing.
        assert!(fail(&mut r, "10.0.0.3:443", Failure::HostUnreachable, 3, 120).is_empty());
        assert!(fail(&mut r, "10.0.0.1:443", Failure::NetUnreachable, 3, 130).is_empty());
        // One that works ends it, once; the outage's victims are not said (they may work).
        let back = ok(&mut r, "10.0.0.2:443", 5_000);
        assert!(matches!(
            back[..],
            [News::NetworkBack { down_ms: 4_890, .. }]
        ));
        assert!(!r.network_down());
        assert!(ok(&mut r, "10.0.0.1:443", 5_010).is_empty());
        // A victim still unreachable afterwards is its own fact, said on its next failure.
        let own = fail(&mut r, "10.0.0.3:443", Failure::HostUnreachable, 3, 6_000);
        assert!(matches!(own[..], [News::AddressDown { .. }]));
        assert!(!r.network_down());
    }

    #[test]
    fn at_start_the_network_is_down_only_after_the_grace() {
        // Two IPv6 addresses fail at once at start, before any IPv4 answer: not yet down.
        let mut r = Reach::new(10_000);
        assert!(fail(&mut r, V6, Failure::NetUnreachable, 4, 1).is_empty());
        assert!(fail(&mut r, V6B, Failure::NetUnreachable, 4, 2).is_empty());
        assert!(!r.network_down());
        // The IPv4 answers: both are their own facts; their next failures are said, and the
        // network is never down for them.
        assert!(ok(&mut r, "149.154.167.51:443", 50).is_empty());
        assert_eq!(
            fail(&mut r, V6, Failure::NetUnreachable, 4, 10_001).len(),
            1
        );
        assert_eq!(
            fail(&mut r, V6B, Failure::NetUnreachable, 4, 10_002).len(),
            1
        );
        assert!(!r.network_down());
        // With nothing working at all (no WAN at boot), the outage is said after the grace.
        let mut r = Reach::new(10_000);
        assert!(fail(&mut r, "10.0.0.1:443", Failure::NetUnreachable, 2, 1).is_empty());
        assert!(fail(&mut r, "10.0.0.2:443", Failure::NetUnreachable, 2, 2).is_empty());
        let down = fail(&mut r, "10.0.0.1:443", Failure::NetUnreachable, 2, 10_001);
        assert!(matches!(down[..], [News::NetworkDown { .. }]));
    }

    #[test]
    fn with_one_destination_known_its_failure_is_the_network() {
        let mut r = Reach::new(100);
        assert!(ok(&mut r, "127.0.0.1:443", 0).is_empty());
        let down = fail(&mut r, "127.0.0.1:443", Failure::NetUnreachable, 1, 10);
        assert!(matches!(down[..], [News::NetworkDown { .. }]));
    }

    #[test]
    fn an_outage_while_one_address_is_already_unreachable_is_still_seen() {
        let mut r = Reach::new(10_000);
        fail(&mut r, V6, Failure::NetUnreachable, 3, 0);
        ok(&mut r, "10.0.0.1:443", 10);
        assert_eq!(fail(&mut r, V6, Failure::NetUnreachable, 3, 20).len(), 1);
        // The IPv4 WAN goes: the known-unreachable IPv6 address does not count, two others do.
        assert!(fail(&mut r, "10.0.0.1:443", Failure::NetUnreachable, 3, 1_000).is_empty());
        let down = fail(&mut r, "10.0.0.2:443", Failure::NetUnreachable, 3, 1_001);
        assert!(matches!(down[..], [News::NetworkDown { .. }]));
        // Back: the IPv6 address stays its own fact and is not said again.
        assert_eq!(ok(&mut r, "10.0.0.2:443", 2_000).len(), 1);
        assert!(fail(&mut r, V6, Failure::NetUnreachable, 3, 2_010).is_empty());
        assert!(r.unreachable_alone(&ip(V6)));
    }

    #[test]
    fn other_classes_are_not_reachability_facts() {
        let mut r = Reach::new(0);
        for f in [
            Failure::Refused,
            Failure::Timeout,
            Failure::LocalPorts,
            Failure::Local,
        ] {
            assert!(fail(&mut r, "10.0.0.1:443", f, 1, 5).is_empty());
        }
        assert!(!r.network_down());
        assert_eq!(r.unreachable().count(), 0);
    }
}
