//! The relay under edge-triggered readiness, as mio delivers it: a flag is set only when the
//! peer changed something (bytes arrived, room appeared, an end), never "every round", so a
//! session that forgets readiness after a `WouldBlock`, or waits for an event that never comes,
//! stalls here instead of being rescued by the rig. Seeded random shapes (pipe capacities,
//! buffer sizes, pool or heap, link kind, pings mid-stream, an upstream that keeps a TLS-like
//! backlog). The rig is the parent's.

use super::*;

impl Rig {
    /// Pumps the peers and sets a readiness flag only where a peer changed something: bytes
    /// arrived, room appeared, an end. Returns whether the peers moved.
    pub(super) fn pump_peers_edges(&mut self) -> bool {
        let (c_in, c_out) = (self.client.pending(), self.app.pending());
        let (u_in, u_out) = (self.up.pending(), self.front.pending());
        let (c_eof, u_eof) = (self.client.at_eof(), self.up.at_eof());
        let peers = self.pump_peers();
        self.cr.read |= self.client.pending() > c_in || self.client.at_eof() != c_eof;
        self.cr.write |= self.app.pending() < c_out;
        self.ur.read |= self.up.pending() > u_in || self.up.at_eof() != u_eof;
        self.ur.write |= self.front.pending() < u_out;
        peers
    }

    /// Sets up a seeded case: half the WS cases write upstream like a TLS stream (taken into a
    /// backlog, flushed as the socket allows: a write can succeed with the socket full), and
    /// every endpoint starts ready. Returns the backlog cap (0: none).
    fn start_edges(&mut self, kind: LinkKind, seeds: &mut Rng) -> usize {
        if kind != LinkKind::Raw && seeds.below(2) == 0 {
            self.up.backlog_cap = 1 + seeds.below(3000) as usize;
        }
        self.cr = Ready {
            read: true,
            write: true,
        };
        self.ur = self.cr;
        self.up.backlog_cap
    }

    /// Like `run`, but readiness edges come only from what the peers did.
    fn run_edges(&mut self) -> Option<CloseReason> {
        self.settle(true)
    }
}

#[test]
fn random_shapes_deliver_every_byte_under_edge_triggered_readiness() {
    let mut seeds = Rng::from_seed([7; 48]);
    for case in 0..60 {
        let kind = [LinkKind::Raw, LinkKind::WsPackets, LinkKind::WsStream][case % 3];
        let client_cap = 1 + seeds.below(6000) as usize;
        let up_cap = 1 + seeds.below(6000) as usize;
        let pool;
        let mut rig = match seeds.below(3) {
            0 => Rig::new(kind, client_cap, up_cap, 256 + seeds.below(8000) as usize),
            1 => Rig::new(kind, client_cap, up_cap, 256 + seeds.below(8000) as usize).plain(),
            _ => {
                pool = BufPool::new(
                    2,
                    1024 + seeds.below(8000) as usize,
                    seeds.below(3) as usize,
                );
                let plain = seeds.below(2) == 0;
                Rig::pooled(kind, client_cap, up_cap, &pool, plain)
            }
        };
        let what = format!(
            "case {case}: {kind:?} caps {client_cap}/{up_cap} backlog {}",
            rig.start_edges(kind, &mut seeds)
        );
        assert_eq!(rig.run_edges(), None, "{what}");
        let packets: Vec<Vec<u8>> = (0..30)
            .map(|i| packet(1 + seeds.below(3000) as usize, i as u8))
            .collect();
        let down = bulk(1 + seeds.below(100_000) as usize, case as u8);
        let mut at = 0;
        for (i, p) in packets.iter().enumerate() {
            rig.app_send(p);
            let n = (down.len() / packets.len()).min(down.len() - at);
            if i + 1 == packets.len() {
                rig.front_data(&down[at..]);
            } else {
                rig.front_data(&down[at..at + n]);
                at += n;
            }
            if kind != LinkKind::Raw && seeds.below(4) == 0 {
                rig.front_frame(0x89, b"hi");
            }
            if seeds.below(3) == 0 {
                assert_eq!(rig.run_edges(), None, "{what}");
            }
        }
        assert_eq!(rig.run_edges(), None, "{what}");
        assert_eq!(rig.app_in, down, "{what}: downstream");
        let up: Vec<u8> = packets.concat();
        assert_eq!(rig.front_plain, up, "{what}: upstream");
        if kind == LinkKind::WsPackets {
            assert_eq!(rig.front_messages(), packets, "{what}: one message each");
        }
        // The client ends, the front answers with its own end: the session closes.
        rig.app_shut();
        assert_eq!(rig.run_edges(), None, "{what}: waits for the upstream");
        rig.front_shut();
        assert_eq!(rig.run_edges(), Some(CloseReason::ClientEof), "{what}");
    }
}

#[test]
fn both_ends_closing_at_once_still_deliver_downstream_under_edges() {
    let mut seeds = Rng::from_seed([9; 48]);
    for case in 0..45 {
        let kind = [LinkKind::Raw, LinkKind::WsPackets, LinkKind::WsStream][case % 3];
        let client_cap = 1 + seeds.below(5000) as usize;
        let up_cap = 1 + seeds.below(5000) as usize;
        let pool = BufPool::new(2, 1024 + seeds.below(6000) as usize, 1);
        let mut rig = if case % 2 == 0 {
            Rig::new(kind, client_cap, up_cap, 256 + seeds.below(6000) as usize)
        } else {
            Rig::pooled(kind, client_cap, up_cap, &pool, seeds.below(2) == 0)
        };
        let what = format!(
            "case {case}: {kind:?} caps {client_cap}/{up_cap} backlog {}",
            rig.start_edges(kind, &mut seeds)
        );
        assert_eq!(rig.run_edges(), None, "{what}");
        for i in 0..10 {
            rig.app_send(&packet(1 + seeds.below(2000) as usize, i));
        }
        let down = bulk(1 + seeds.below(60_000) as usize, case as u8);
        rig.front_data(&down);
        rig.app_shut();
        rig.front_shut();
        let end = rig.run_edges();
        assert!(
            matches!(end, Some(CloseReason::ClientEof | CloseReason::UpstreamEof)),
            "{what}: {end:?}"
        );
        assert_eq!(rig.app_in, down, "{what}: everything the upstream sent");
    }
}
