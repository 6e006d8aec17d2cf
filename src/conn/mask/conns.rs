//! Our own live mask connections, by both ends, for the loop check: a connection that reaches
//! our listener is one of our own mask connections looping back only when its two ends are that
//! mask connection's two ends — its peer our mask socket's local address and port, its local
//! address our mask socket's remote. An address alone is not enough: the kernel hands the same
//! local port to connections toward different destinations, so behind a balancer on the same
//! host (every client arriving from 127.0.0.1) a real client's port often equals a live mask
//! connection's (35–37 of 200 clients were refused as loops when this was keyed by the local
//! address only, issue 19).
//!
//! Owns the table only: the accept shell (`reactor::accept`) asks it with the accepted socket's
//! ends (and, behind a NAT rewrite on this host, the destination before the rewrite), the
//! PROXY header step (`conn::proxy_step`) with the ends a balancer's header names. Sans-IO;
//! capacity fixed at start (one entry per session at most); lookups are O(1).

use std::collections::HashMap;
use std::net::SocketAddr;

/// The two ends of a TCP connection as the side that opened it sees them. IPv4-mapped IPv6
/// addresses are kept as IPv4 (a dual-stack listener reports IPv4 peers mapped), and an IPv6
/// scope or flow label is not part of the identity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Ends {
    /// Its own address and port.
    pub local: SocketAddr,
    /// The address and port it connected to.
    pub remote: SocketAddr,
}

impl Ends {
    /// The ends `local` → `remote`, canonical.
    pub fn new(local: SocketAddr, remote: SocketAddr) -> Ends {
        Ends {
            local: canon(local),
            remote: canon(remote),
        }
    }
}

fn canon(a: SocketAddr) -> SocketAddr {
    SocketAddr::new(a.ip().to_canonical(), a.port())
}

/// Live mask connections → (slot, connection id) of their sessions. See the module docs.
pub struct MaskConns {
    by_ends: HashMap<Ends, (u32, u32)>,
    /// Live mask connections per local address: the first, cheap check at accept, so that a
    /// client is looked at further (its socket's own address, a system call) only when its
    /// address is one of ours.
    locals: HashMap<SocketAddr, u32>,
    capacity: usize,
}

impl MaskConns {
    /// Room for `capacity` mask connections, allocated now.
    pub fn new(capacity: usize) -> MaskConns {
        MaskConns {
            by_ends: HashMap::with_capacity(capacity),
            locals: HashMap::with_capacity(capacity),
            capacity,
        }
    }

    /// Remembers the mask connection `ends` of session (`slot`, `id`); false when the table is
    /// full (that connection is then not recognised if it loops back: the pre-connect check,
    /// `mask::is_loop`, still stops a target that is our own listener).
    pub fn insert(&mut self, ends: Ends, slot: usize, id: u32) -> bool {
        if let Some(v) = self.by_ends.get_mut(&ends) {
            *v = (slot as u32, id);
            return true;
        }
        if self.by_ends.len() >= self.capacity {
            return false;
        }
        self.by_ends.insert(ends, (slot as u32, id));
        *self.locals.entry(ends.local).or_insert(0) += 1;
        true
    }

    /// Forgets the mask connection `ends` (its session closed); unknown ends are ignored.
    pub fn remove(&mut self, ends: Ends) {
        if self.by_ends.remove(&ends).is_none() {
            return;
        }
        if let Some(n) = self.locals.get_mut(&ends.local) {
            *n -= 1;
            if *n == 0 {
                self.locals.remove(&ends.local);
            }
        }
    }

    /// True when some live mask connection has the local address and port `addr`: only then
    /// can a connection from `addr` be one of ours.
    pub fn has_local(&self, addr: SocketAddr) -> bool {
        !self.locals.is_empty() && self.locals.contains_key(&canon(addr))
    }

    /// The session whose mask connection a connection arriving from `peer` at our address
    /// `local` is: the one opened from `peer` to `local`.
    pub fn owner(&self, peer: SocketAddr, local: SocketAddr) -> Option<(usize, u32)> {
        if self.by_ends.is_empty() {
            return None;
        }
        let (slot, id) = *self.by_ends.get(&Ends::new(peer, local))?;
        Some((slot as usize, id))
    }

    /// Mask connections remembered.
    pub fn len(&self) -> usize {
        self.by_ends.len()
    }

    /// True when none is remembered.
    pub fn is_empty(&self) -> bool {
        self.by_ends.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn a_real_client_sharing_a_mask_connections_port_is_not_a_loop() {
        // Our mask connection 127.0.0.1:40000 → the web server 127.0.0.1:8443; a local
        // balancer connects to our listener 127.0.0.1:1443 from the same port.
        let mut m = MaskConns::new(4);
        assert!(m.insert(Ends::new(a("127.0.0.1:40000"), a("127.0.0.1:8443")), 3, 77));
        assert!(m.has_local(a("127.0.0.1:40000")));
        assert_eq!(m.owner(a("127.0.0.1:40000"), a("127.0.0.1:1443")), None);
        // The mask connection itself arriving at its target is the loop.
        assert_eq!(
            m.owner(a("127.0.0.1:40000"), a("127.0.0.1:8443")),
            Some((3, 77))
        );
        // Other ports and addresses are not looked at further.
        assert!(!m.has_local(a("127.0.0.1:40001")));
        assert!(!m.has_local(a("127.0.0.2:40000")));
    }

    #[test]
    fn mapped_ipv6_ends_are_the_ipv4_ends() {
        let mut m = MaskConns::new(4);
        m.insert(Ends::new(a("127.0.0.1:40000"), a("127.0.0.1:443")), 1, 5);
        // A dual-stack listener reports the peer and its own address mapped.
        let peer = a("[::ffff:127.0.0.1]:40000");
        assert!(m.has_local(peer));
        assert_eq!(m.owner(peer, a("[::ffff:127.0.0.1]:443")), Some((1, 5)));
    }

    #[test]
    fn one_local_port_toward_two_targets_is_two_connections() {
        let mut m = MaskConns::new(4);
        let to_a = Ends::new(a("10.0.0.1:40000"), a("192.0.2.1:443"));
        let to_b = Ends::new(a("10.0.0.1:40000"), a("192.0.2.2:443"));
        m.insert(to_a, 1, 10);
        m.insert(to_b, 2, 20);
        assert_eq!(
            m.owner(a("10.0.0.1:40000"), a("192.0.2.2:443")),
            Some((2, 20))
        );
        m.remove(to_b);
        assert!(m.has_local(a("10.0.0.1:40000")), "to_a is still live");
        assert_eq!(
            m.owner(a("10.0.0.1:40000"), a("192.0.2.1:443")),
            Some((1, 10))
        );
        m.remove(to_a);
        m.remove(to_a); // twice: ignored
        assert!(!m.has_local(a("10.0.0.1:40000")));
        assert!(m.is_empty() && m.locals.is_empty());
    }

    #[test]
    fn the_table_is_bounded() {
        let mut m = MaskConns::new(2);
        let e = |p: u16| Ends::new(SocketAddr::from(([127, 0, 0, 1], p)), a("127.0.0.1:443"));
        assert!(m.insert(e(1), 0, 0));
        assert!(m.insert(e(2), 1, 1));
        assert!(!m.insert(e(3), 2, 2), "over capacity: not kept");
        // The same ends again replace the owner (a slot reused after a missed remove).
        assert!(m.insert(e(2), 5, 9));
        assert_eq!(m.len(), 2);
        assert_eq!(m.locals.len(), 2);
        assert_eq!(
            m.owner(SocketAddr::from(([127, 0, 0, 1], 2)), a("127.0.0.1:443")),
            Some((5, 9))
        );
        assert_eq!(
            m.owner(SocketAddr::from(([127, 0, 0, 1], 3)), a("127.0.0.1:443")),
            None
        );
        m.remove(e(1));
        assert!(m.insert(e(3), 2, 2));
        assert!(m.by_ends.capacity() >= 2 && m.len() <= 2);
    }
}
