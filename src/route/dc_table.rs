//! Which DC a direct-transport client means, from the address it dialled (docs/protocol.md
//! §1.9, §3.4): an *exact* address → DC table — built in from the clients' own DC lists, extended
//! by `--dc-addr IP=DC`, and by addresses learned from repeated agreement — with the init's DC
//! index (bytes 60–61) used only where the table has no answer and only when it can be trusted.
//!
//! Android writes bytes 60–61 only with a proxy secret: on a direct connection they are random
//! and look like a valid DC about once in 5,500 connections. So a table answer always wins over
//! them, and no subnet is ever guessed (DC 2 and DC 4 share 149.154.167.0/24). On a miss the
//! packet's DC is used if it names DC 1–5 and the address is not *contested*; each such use is an
//! observation, and an address is learned after [`LEARN_AFTER`] agreeing observations from at
//! least two client addresses. Any disagreement clears it and marks it contested (no packet DC
//! is trusted there again until `--dc-addr` says or the entry is evicted). At most
//! [`LEARNER_CAP`] addresses are tracked; the least recently seen is evicted first.
//!
//! Sans-IO: addresses and time (`now_ms`, the caller's monotonic clock) in, answers out. The
//! flag is parsed by `cli`; the session that asks is `conn`'s.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::mtproto::dc::DcId;

/// Agreeing observations (packet DC on a table miss) that make an address learned.
pub const LEARN_AFTER: u8 = 3;

/// Addresses the learner tracks at most (pending, contested and learned together).
pub const LEARNER_CAP: usize = 256;

/// Highest DC number a packet's DC index may name to be used on a table miss.
pub const MAX_PACKET_DC: u16 = 5;

/// Where a [`DcTable::choose`] answer came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DcSource {
    /// The built-in table ([`builtin`]).
    Table,
    /// A `--dc-addr` entry.
    Flag,
    /// An address the learner promoted.
    Learned,
    /// The init's bytes 60–61, on a table miss.
    Packet,
}

impl DcSource {
    /// Short name for session lines and status: `table`, `flag`, `learned`, `packet`.
    pub fn name(self) -> &'static str {
        match self {
            DcSource::Table => "table",
            DcSource::Flag => "flag",
            DcSource::Learned => "learned",
            DcSource::Packet => "packet",
        }
    }
}

/// One built-in entry: address, DC number, test DC.
type Builtin = (IpAddr, u16, bool);

const fn v4(a: u8, b: u8, c: u8, d: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(a, b, c, d))
}

const fn v6(a: u16, b: u16, c: u16, d: u16, last: u16) -> IpAddr {
    IpAddr::V6(Ipv6Addr::new(a, b, c, d, 0, 0, 0, last))
}

/// The built-in exact addresses (docs/protocol.md §3.4, with sources): the DC addresses the
/// official clients ship with — tdlib `ConnectionCreator::get_default_dc_options`, Telegram
/// Android `ConnectionsManager::initDatacenters`, Telegram Desktop `kBuiltInDcs*`. None of them
/// ships a media-only address; media addresses come from `help.getConfig` and are taught by
/// `--dc-addr` or learned.
const BUILTIN: &[Builtin] = &[
    // Production, IPv4.
    (v4(149, 154, 175, 50), 1, false),
    (v4(149, 154, 167, 51), 2, false),
    (v4(95, 161, 76, 100), 2, false),
    (v4(149, 154, 175, 100), 3, false),
    (v4(149, 154, 167, 91), 4, false),
    (v4(149, 154, 171, 5), 5, false),
    // Production, IPv6.
    (v6(0x2001, 0x0b28, 0xf23d, 0xf001, 0xa), 1, false),
    (v6(0x2001, 0x067c, 0x04e8, 0xf002, 0xa), 2, false),
    (v6(0x2001, 0x0b28, 0xf23d, 0xf003, 0xa), 3, false),
    (v6(0x2001, 0x067c, 0x04e8, 0xf004, 0xa), 4, false),
    (v6(0x2001, 0x0b28, 0xf23f, 0xf005, 0xa), 5, false),
    // Test, IPv4 (DC 1 has two: tdlib/Desktop .10, Android .40).
    (v4(149, 154, 175, 10), 1, true),
    (v4(149, 154, 175, 40), 1, true),
    (v4(149, 154, 167, 40), 2, true),
    (v4(149, 154, 175, 117), 3, true),
    // Test, IPv6.
    (v6(0x2001, 0x0b28, 0xf23d, 0xf001, 0xe), 1, true),
    (v6(0x2001, 0x067c, 0x04e8, 0xf002, 0xe), 2, true),
    (v6(0x2001, 0x0b28, 0xf23d, 0xf003, 0xe), 3, true),
];

/// The built-in table as (address, DC) pairs, in the order above.
pub fn builtin() -> impl Iterator<Item = (IpAddr, DcId)> {
    BUILTIN.iter().map(|&(ip, dc, test)| {
        (
            ip,
            DcId {
                dc,
                media: false,
                test,
            },
        )
    })
}

/// `ip` with an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`) turned into its IPv4 form; other
/// addresses as they are. Every lookup and observation goes through it.
pub fn normalise(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// The address → DC table of one proxy: built-in, `--dc-addr` and learned entries. One per
/// reactor; `--dc-addr` is replaced on reload ([`DcTable::set_flags`]), the learner is kept.
#[derive(Debug)]
pub struct DcTable {
    builtin: HashMap<IpAddr, DcId>,
    flags: HashMap<IpAddr, DcId>,
    learner: Learner,
}

impl DcTable {
    /// The built-in table, no flags, nothing learned.
    pub fn new() -> DcTable {
        DcTable {
            builtin: builtin().collect(),
            flags: HashMap::new(),
            learner: Learner::default(),
        }
    }

    /// The built-in table plus `flags` (`--dc-addr`).
    pub fn with_flags<'a>(flags: impl IntoIterator<Item = (&'a IpAddr, &'a DcId)>) -> DcTable {
        let mut t = DcTable::new();
        t.set_flags(flags);
        t
    }

    /// Replaces the `--dc-addr` entries (a reload); built-in and learned entries stay. A flag
    /// entry wins over a built-in or learned one for the same address.
    pub fn set_flags<'a>(&mut self, flags: impl IntoIterator<Item = (&'a IpAddr, &'a DcId)>) {
        self.flags = flags
            .into_iter()
            .map(|(ip, dc)| (normalise(*ip), *dc))
            .collect();
    }

    /// The exact answer for `dst` — flag, then built-in, then learned — never from a packet and
    /// never by subnet (what SOCKS5 uses: outside it, REP 02). Media is as the entry says
    /// (built-in entries are never media).
    pub fn lookup(&self, dst: IpAddr) -> Option<DcId> {
        self.lookup_with_source(normalise(dst)).map(|(dc, _)| dc)
    }

    fn lookup_with_source(&self, dst: IpAddr) -> Option<(DcId, DcSource)> {
        if let Some(&dc) = self.flags.get(&dst) {
            return Some((dc, DcSource::Flag));
        }
        if let Some(&dc) = self.builtin.get(&dst) {
            return Some((dc, DcSource::Table));
        }
        self.learner.learned(dst).map(|dc| (dc, DcSource::Learned))
    }

    /// The DC for a direct-transport session from `client` to `dst` whose init carried
    /// `packet_dc` (the signed index of §1.4; `None` for a plain transport, which has none).
    ///
    /// A table answer always wins; the packet only sets the media flag, and only when it names
    /// the same DC (number and test flag). On a miss the packet's DC is used when it decodes to
    /// DC 1–[`MAX_PACKET_DC`] (media and test allowed) and the address is not contested after
    /// this observation is recorded; else `None` (the caller closes as an unknown destination).
    pub fn choose(
        &mut self,
        dst: IpAddr,
        client: IpAddr,
        packet_dc: Option<i16>,
        now_ms: u64,
    ) -> Option<(DcId, DcSource)> {
        let dst = normalise(dst);
        let packet = packet_dc.and_then(|i| DcId::from_index(i).ok());
        if let Some((dc, source)) = self.lookup_with_source(dst) {
            let media = match packet {
                Some(p) if (p.dc, p.test) == (dc.dc, dc.test) => p.media,
                _ => dc.media,
            };
            return Some((DcId { media, ..dc }, source));
        }
        let p = packet.filter(|p| (1..=MAX_PACKET_DC).contains(&p.dc))?;
        self.learner.observe(dst, normalise(client), p, now_ms);
        if self.learner.is_contested(dst) {
            return None;
        }
        Some((p, DcSource::Packet))
    }

    /// Learned addresses and their DCs (media off), in no particular order.
    pub fn learned(&self) -> impl Iterator<Item = (IpAddr, DcId)> + '_ {
        self.learner
            .entries
            .iter()
            .filter_map(|(ip, e)| match e.state {
                State::Learned(dc) => Some((*ip, dc)),
                _ => None,
            })
    }

    /// Addresses the learner saw disagree.
    pub fn contested(&self) -> impl Iterator<Item = IpAddr> + '_ {
        self.learner
            .entries
            .iter()
            .filter(|(_, e)| matches!(e.state, State::Contested))
            .map(|(ip, _)| *ip)
    }

    /// Addresses the learner tracks (pending, contested, learned); at most [`LEARNER_CAP`].
    pub fn tracked(&self) -> usize {
        self.learner.entries.len()
    }
}

/// Destinations that found no DC (`unknown-dst` closes), for `ctl status`: at most
/// [`UNKNOWN_CAP`] addresses, each with its count and last time (ms); the least recently seen
/// is dropped first. Client input cannot grow it past the cap.
#[derive(Debug, Default)]
pub struct UnknownDsts {
    entries: HashMap<IpAddr, (u64, u64)>,
}

/// Unknown destinations kept at most.
pub const UNKNOWN_CAP: usize = 32;

impl UnknownDsts {
    /// Counts one `unknown-dst` close for `dst` at `now_ms`.
    pub fn record(&mut self, dst: IpAddr, now_ms: u64) {
        let dst = normalise(dst);
        if !self.entries.contains_key(&dst) && self.entries.len() >= UNKNOWN_CAP {
            let oldest = self
                .entries
                .iter()
                .min_by_key(|(_, v)| v.1)
                .map(|(k, _)| *k);
            if let Some(k) = oldest {
                self.entries.remove(&k);
            }
        }
        let e = self.entries.entry(dst).or_insert((0, now_ms));
        e.0 += 1;
        e.1 = now_ms;
    }

    /// (address, closes, last time ms), most closes first.
    pub fn list(&self) -> Vec<(IpAddr, u64, u64)> {
        let mut v: Vec<_> = self.entries.iter().map(|(k, v)| (*k, v.0, v.1)).collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        v
    }
}

impl Default for DcTable {
    fn default() -> DcTable {
        DcTable::new()
    }
}

/// One tracked address.
#[derive(Debug, Clone, Copy)]
struct Entry {
    state: State,
    /// Last observation, for eviction.
    last_ms: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Agreeing observations so far of `dc` (media off), the first client, and whether another
    /// client address agreed.
    Pending {
        dc: DcId,
        seen: u8,
        first: IpAddr,
        second: bool,
    },
    /// Promoted: answers `lookup`.
    Learned(DcId),
    /// Observations disagreed: no packet DC is used for this address.
    Contested,
}

/// The packet-DC observations on table misses.
#[derive(Debug, Default)]
struct Learner {
    entries: HashMap<IpAddr, Entry>,
}

impl Learner {
    fn learned(&self, dst: IpAddr) -> Option<DcId> {
        match self.entries.get(&dst)?.state {
            State::Learned(dc) => Some(dc),
            _ => None,
        }
    }

    fn is_contested(&self, dst: IpAddr) -> bool {
        matches!(
            self.entries.get(&dst).map(|e| e.state),
            Some(State::Contested)
        )
    }

    /// Records that `client` reached `dst` with an init naming `dc`.
    fn observe(&mut self, dst: IpAddr, client: IpAddr, dc: DcId, now_ms: u64) {
        let dc = DcId { media: false, ..dc };
        if !self.entries.contains_key(&dst) && self.entries.len() >= LEARNER_CAP {
            self.evict_oldest();
        }
        let e = self.entries.entry(dst).or_insert(Entry {
            state: State::Pending {
                dc,
                seen: 0,
                first: client,
                second: false,
            },
            last_ms: now_ms,
        });
        e.last_ms = now_ms;
        e.state = match e.state {
            State::Pending {
                dc: was,
                seen,
                first,
                second,
            } if was == dc => {
                let seen = seen.saturating_add(1);
                let second = second || client != first;
                if seen >= LEARN_AFTER && second {
                    State::Learned(dc)
                } else {
                    State::Pending {
                        dc,
                        seen,
                        first,
                        second,
                    }
                }
            }
            State::Learned(was) if was == dc => State::Learned(was),
            State::Pending { .. } | State::Learned(_) | State::Contested => State::Contested,
        };
    }

    fn evict_oldest(&mut self) {
        let oldest = self
            .entries
            .iter()
            .min_by_key(|(_, e)| e.last_ms)
            .map(|(ip, _)| *ip);
        if let Some(ip) = oldest {
            self.entries.remove(&ip);
        }
    }
}

#[cfg(test)]
mod tests;
