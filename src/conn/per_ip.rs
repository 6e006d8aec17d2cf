//! Per-client-address limits (sans-IO, time injected): concurrent sessions per address
//! (`--max-per-ip`) and a token bucket for new connections per address (`--per-ip-rate`,
//! `--per-ip-burst`).
//!
//! The session path admits a client once ([`PerIp::admit`], after the PROXY header when
//! `--proxy-protocol` is on, at accept otherwise) and releases the returned [`Key`] exactly once
//! when the session closes ([`PerIp::release`]); the close path in `conn` owns that pairing.
//! Addresses are grouped by [`Key`]: an IPv4 address (IPv4-mapped IPv6 counts as the IPv4
//! address), or an IPv6 /64 — one subscriber line or host gets a whole /64 (SLAAC, privacy
//! addresses rotate inside it), so per-address IPv6 limits would cost an attacker nothing.
//! The table is a map with its capacity reserved at start (the session capacity): an entry
//! exists only while its address has live sessions or a bucket still refilling; when the table
//! is full, refilled entries are dropped, then the fullest idle bucket, so hostile input never
//! grows it. Nothing here logs or counts closes; the caller does (`CloseReason::PerIpLimit`,
//! `CloseReason::PerIpRate`).
//!
//! Over a limit, a connection is not always closed ([`PerIp::admit_or_mask`]): with an `ee`
//! secret, closing before the first byte gives the proxy away (a site answers every
//! connection), so it is handled like a client that is not ours — its hello read, then masked —
//! while fewer than `--per-ip-mask` such connections are open (a separate budget, so the
//! limits still bound what one address costs us); past it, closed as before. The session holds
//! what it was given ([`Held`]) and gives it back exactly once ([`PerIp::end`]).

use std::collections::HashMap;
use std::net::IpAddr;

use crate::config::Config;

/// A bucket's contents are kept in thousandths of a connection, so refill needs no division:
/// `rate` connections per second = `rate` milli-connections per millisecond.
const MILLI: u64 = 1000;

/// The unit an address is limited by: IPv4 address, or IPv6 /64 prefix (upper 64 bits).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Key {
    V4(u32),
    V6Net(u64),
}

impl Key {
    /// The key of `ip`: IPv4-mapped IPv6 (`::ffff:a.b.c.d`) is the IPv4 address.
    pub fn of(ip: IpAddr) -> Key {
        match ip {
            IpAddr::V4(v4) => Key::V4(u32::from(v4)),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => Key::V4(u32::from(v4)),
                None => Key::V6Net((u128::from(v6) >> 64) as u64),
            },
        }
    }
}

/// Why [`PerIp::admit`] refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The address already has `--max-per-ip` live sessions.
    Limit,
    /// The address's bucket is empty (`--per-ip-rate` / `--per-ip-burst`).
    Rate,
}

/// Limits settings: `max_per_ip` sessions (0 = no cap), `rate` connections per second earned
/// (0 = no rate limit), `burst` the bucket size in connections (≥ 1 when `rate` > 0),
/// `mask_budget` connections over a limit that may be masked at once, over every address
/// together (0 = every one is closed).
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub max_per_ip: u32,
    pub rate: u32,
    pub burst: u32,
    pub mask_budget: u32,
}

impl Limits {
    /// The limits `cfg` sets (`--max-per-ip`, `--per-ip-rate`, `--per-ip-burst`,
    /// `--per-ip-mask`).
    pub fn of(cfg: &Config) -> Limits {
        Limits {
            max_per_ip: cfg.max_per_ip.min(u32::MAX as usize) as u32,
            rate: cfg.per_ip_rate,
            burst: cfg.per_ip_burst,
            mask_budget: cfg.per_ip_mask,
        }
    }
}

/// What [`PerIp::admit_or_mask`] decided for a new connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    /// Within the limits: a session, holding this until it ends.
    Admitted(Held),
    /// Over a limit (this one), within the mask budget: handled like a client that is not
    /// ours; the session holds [`Held::MaskSlot`].
    Masked(Refusal),
    /// Over a limit, and the mask budget is spent or masking is off: close now.
    Refused(Refusal),
}

/// What a session holds from the table until it ends; [`PerIp::end`] gives it back, once.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Held {
    /// Nothing (the limits are off, or nothing was admitted yet).
    #[default]
    Nothing,
    /// One live session of this key.
    Session(Key),
    /// One slot of the mask budget: over a limit, masked.
    MaskSlot,
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    live: u32,
    /// Bucket contents in milli-connections at `at` (ms).
    tokens: u64,
    at: u64,
}

/// The per-address table. See the module docs.
pub struct PerIp {
    limits: Limits,
    capacity: usize,
    table: HashMap<Key, Entry>,
    /// Over-limit connections being masked now (≤ `limits.mask_budget`, unless a reload
    /// lowered it).
    masked: u32,
}

impl PerIp {
    /// A table for at most `capacity` addresses (the session capacity, ≥ 1), allocated now.
    pub fn new(limits: Limits, capacity: usize) -> PerIp {
        let capacity = capacity.max(1);
        let on = limits.max_per_ip > 0 || limits.rate > 0;
        PerIp {
            limits,
            capacity,
            table: HashMap::with_capacity(if on { capacity } else { 0 }),
            masked: 0,
        }
    }

    /// A reload's new limits, for admissions from now on: live sessions stay admitted (and are
    /// released as usual); buckets keep what they hold, capped by the new burst on next use.
    pub fn set_limits(&mut self, limits: Limits) {
        let on = limits.max_per_ip > 0 || limits.rate > 0;
        if on && self.table.capacity() < self.capacity {
            self.table.reserve(self.capacity - self.table.len());
        }
        self.limits = limits;
    }

    /// Admits a new connection from `ip` at `now_ms`: `Ok(Some(key))` — release `key` once when
    /// the session ends; `Ok(None)` — limits off, nothing to release.
    ///
    /// Errors: [`Refusal::Limit`] (checked first: no connection is charged for it) or
    /// [`Refusal::Rate`].
    pub fn admit(&mut self, ip: IpAddr, now_ms: u64) -> Result<Option<Key>, Refusal> {
        let l = self.limits;
        if l.max_per_ip == 0 && l.rate == 0 {
            return Ok(None);
        }
        let key = Key::of(ip);
        if !self.table.contains_key(&key) && self.table.len() >= self.capacity {
            self.make_room(now_ms);
        }
        let full = self.full();
        if !self.table.contains_key(&key) && self.table.len() >= self.capacity {
            // Every entry has live sessions: more sessions than the capacity the caller
            // promised. Refuse rather than grow.
            return Err(Refusal::Limit);
        }
        let e = self.table.entry(key).or_insert(Entry {
            live: 0,
            tokens: full,
            at: now_ms,
        });
        refill(e, l.rate, full, now_ms);
        if l.max_per_ip > 0 && e.live >= l.max_per_ip {
            return Err(Refusal::Limit);
        }
        if l.rate > 0 {
            if e.tokens < MILLI {
                // The entry stays (its bucket refills): that is the state that refuses.
                return Err(Refusal::Rate);
            }
            e.tokens -= MILLI;
        }
        e.live += 1;
        Ok(Some(key))
    }

    /// [`PerIp::admit`], and over a limit the choice between masking and closing: a
    /// connection that `can_mask` (an `ee` secret is configured and masking is on) takes a slot
    /// of the mask budget while one is free. A refused attempt still costs no token.
    pub fn admit_or_mask(&mut self, ip: IpAddr, now_ms: u64, can_mask: bool) -> Admission {
        match self.admit(ip, now_ms) {
            Ok(Some(key)) => Admission::Admitted(Held::Session(key)),
            Ok(None) => Admission::Admitted(Held::Nothing),
            Err(r) if can_mask && self.masked < self.limits.mask_budget => {
                self.masked += 1;
                Admission::Masked(r)
            }
            Err(r) => Admission::Refused(r),
        }
    }

    /// Gives back what a session held (its end at `now_ms`): a session of its key, or a slot
    /// of the mask budget.
    pub fn end(&mut self, held: Held, now_ms: u64) {
        match held {
            Held::Nothing => {}
            Held::Session(key) => self.release(key, now_ms),
            Held::MaskSlot => self.masked = self.masked.saturating_sub(1),
        }
    }

    /// Over-limit connections being masked now.
    pub fn masked(&self) -> u32 {
        self.masked
    }

    /// Ends one session admitted under `key` at `now_ms`. An entry with no live session and a
    /// full bucket is dropped. Releasing a key with no live session is ignored.
    pub fn release(&mut self, key: Key, now_ms: u64) {
        let (rate, full) = (self.limits.rate, self.full());
        let Some(e) = self.table.get_mut(&key) else {
            return;
        };
        e.live = e.live.saturating_sub(1);
        refill(e, rate, full, now_ms);
        if e.live == 0 && e.tokens >= full {
            self.table.remove(&key);
        }
    }

    /// Live sessions of `ip`'s key.
    pub fn live(&self, ip: IpAddr) -> u32 {
        self.table.get(&Key::of(ip)).map_or(0, |e| e.live)
    }

    /// Entries in the table.
    pub fn len(&self) -> usize {
        self.table.len()
    }

    /// True when no address has an entry.
    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    /// The most entries the table ever holds.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// A full bucket, in milli-connections (0 when the rate limit is off).
    fn full(&self) -> u64 {
        if self.limits.rate == 0 {
            0
        } else {
            u64::from(self.limits.burst.max(1)) * MILLI
        }
    }

    /// Drops every idle entry whose bucket refilled; if none did, the idle entry closest to
    /// full (the one whose loss forgives least). O(capacity), only when the table is full.
    fn make_room(&mut self, now_ms: u64) {
        let (rate, full) = (self.limits.rate, self.full());
        self.table.retain(|_, e| {
            refill(e, rate, full, now_ms);
            e.live > 0 || e.tokens < full
        });
        if self.table.len() < self.capacity {
            return;
        }
        let victim = self
            .table
            .iter()
            .filter(|(_, e)| e.live == 0)
            .max_by_key(|(_, e)| e.tokens)
            .map(|(k, _)| *k);
        if let Some(k) = victim {
            self.table.remove(&k);
        }
    }
}

/// Brings `e`'s bucket to `now_ms` (a clock that steps back adds nothing).
fn refill(e: &mut Entry, rate: u32, full: u64, now_ms: u64) {
    let dt = now_ms.saturating_sub(e.at);
    e.tokens = e
        .tokens
        .saturating_add(dt.saturating_mul(u64::from(rate)))
        .min(full);
    e.at = e.at.max(now_ms);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn limits(max_per_ip: u32, rate: u32, burst: u32) -> Limits {
        Limits {
            max_per_ip,
            rate,
            burst,
            mask_budget: 0,
        }
    }

    #[test]
    fn over_a_limit_an_ee_port_masks_within_the_budget_then_closes() {
        use Admission::{Masked, Refused};
        use Refusal::{Limit, Rate};
        // Cap 2 per address, burst 3 at 10/s, 2 over-limit connections masked at once.
        let mut t = PerIp::new(
            Limits {
                mask_budget: 2,
                ..limits(2, 10, 3)
            },
            16,
        );
        let a = ip("192.0.2.1");
        let s1 = t.admit_or_mask(a, 0, true);
        let s2 = t.admit_or_mask(a, 0, true);
        assert!(
            matches!(s1, Admission::Admitted(Held::Session(_))),
            "{s1:?}"
        );
        assert!(
            matches!(s2, Admission::Admitted(Held::Session(_))),
            "{s2:?}"
        );
        // Over the cap: masked (a prober sees the site), twice; then the budget is spent.
        assert_eq!(t.admit_or_mask(a, 0, true), Masked(Limit));
        assert_eq!(t.admit_or_mask(a, 0, true), Masked(Limit));
        assert_eq!(t.admit_or_mask(a, 0, true), Refused(Limit));
        assert_eq!(t.masked(), 2);
        // The budget is shared by every address, and without ee (or with --no-mask) nothing
        // is masked.
        let b = ip("192.0.2.2");
        assert!(matches!(
            t.admit_or_mask(b, 0, false),
            Admission::Admitted(_)
        ));
        assert!(matches!(
            t.admit_or_mask(b, 0, false),
            Admission::Admitted(_)
        ));
        assert_eq!(t.admit_or_mask(b, 0, false), Refused(Limit));
        // A masked connection's end frees its slot, not a session of its address.
        t.end(Held::MaskSlot, 1);
        assert_eq!((t.masked(), t.live(a)), (1, 2));
        assert_eq!(t.admit_or_mask(a, 1, true), Masked(Limit));
        // A session's end frees its address; masked connections never took a token: the third
        // token of the burst is still there.
        t.end(held(s1), 2);
        assert!(matches!(
            t.admit_or_mask(a, 2, true),
            Admission::Admitted(Held::Session(_))
        ));
        t.end(Held::MaskSlot, 3);
        assert_eq!(t.admit_or_mask(a, 3, true), Masked(Limit));
        // Under the cap again, but the bucket is empty: over the rate, and no slot is free.
        t.end(held(s2), 4);
        assert_eq!(t.admit_or_mask(a, 4, true), Refused(Rate));
        t.end(Held::MaskSlot, 5);
        assert_eq!(t.admit_or_mask(a, 5, true), Masked(Rate));
        // Ends never underflow.
        for _ in 0..5 {
            t.end(Held::MaskSlot, 6);
            t.end(Held::Nothing, 6);
        }
        assert_eq!(t.masked(), 0);
    }

    fn held(a: Admission) -> Held {
        match a {
            Admission::Admitted(h) => h,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn with_no_mask_budget_over_a_limit_is_closed_as_before() {
        let mut t = PerIp::new(limits(1, 0, 0), 4);
        let a = ip("10.0.0.1");
        assert!(matches!(
            t.admit_or_mask(a, 0, true),
            Admission::Admitted(_)
        ));
        assert_eq!(
            t.admit_or_mask(a, 0, true),
            Admission::Refused(Refusal::Limit)
        );
        assert_eq!(t.masked(), 0);
        // Limits off: nothing held, nothing masked.
        let mut off = PerIp::new(limits(0, 0, 0), 4);
        assert_eq!(
            off.admit_or_mask(a, 0, true),
            Admission::Admitted(Held::Nothing)
        );
    }

    #[test]
    fn cap_per_address_and_release() {
        let mut t = PerIp::new(limits(2, 0, 0), 16);
        let a = t.admit(ip("10.0.0.1"), 0).unwrap().unwrap();
        let b = t.admit(ip("10.0.0.1"), 0).unwrap().unwrap();
        assert_eq!(t.admit(ip("10.0.0.1"), 0), Err(Refusal::Limit));
        // Another address is not affected.
        let c = t.admit(ip("10.0.0.2"), 0).unwrap().unwrap();
        assert_eq!(t.live(ip("10.0.0.1")), 2);
        t.release(a, 1);
        assert!(t.admit(ip("10.0.0.1"), 1).unwrap().is_some());
        t.release(b, 2);
        t.release(c, 2);
        assert_eq!(t.len(), 1);
        // Releasing more than was admitted never underflows or creates entries.
        t.release(c, 3);
        t.release(Key::V4(99), 3);
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn everything_off_keeps_no_state() {
        let mut t = PerIp::new(limits(0, 0, 0), 4);
        for i in 0..100u32 {
            assert_eq!(t.admit(IpAddr::V4(Ipv4Addr::from(i)), 0), Ok(None));
        }
        assert!(t.is_empty());
    }

    #[test]
    fn rate_bucket_refills_with_injected_time() {
        // 10 per second, burst 3: 3 at once, then one per 100 ms.
        let mut t = PerIp::new(limits(0, 10, 3), 16);
        let a = ip("192.0.2.1");
        let mut keys = Vec::new();
        for _ in 0..3 {
            keys.push(t.admit(a, 1000).unwrap().unwrap());
        }
        assert_eq!(t.admit(a, 1000), Err(Refusal::Rate));
        assert_eq!(t.admit(a, 1099), Err(Refusal::Rate));
        assert!(t.admit(a, 1100).is_ok());
        assert_eq!(t.admit(a, 1100), Err(Refusal::Rate));
        // A refused attempt costs nothing: the next earned one still comes at +100 ms.
        assert!(t.admit(a, 1200).is_ok());
        // A clock stepping back earns nothing.
        assert_eq!(t.admit(a, 500), Err(Refusal::Rate));
        // Refills cap at the burst.
        for _ in 0..3 {
            assert!(t.admit(a, 100_000).is_ok());
        }
        assert_eq!(t.admit(a, 100_000), Err(Refusal::Rate));
        // Sessions ended and the bucket full again: the entry goes.
        for k in keys {
            t.release(k, 100_000);
        }
        let b = ip("192.0.2.2");
        let k = t.admit(b, 0).unwrap().unwrap();
        t.release(k, 100);
        assert_eq!(t.live(b), 0);
        t.release(k, 1_000_000);
    }

    #[test]
    fn cap_checked_before_rate_charges() {
        let mut t = PerIp::new(limits(1, 1, 2), 4);
        let a = ip("10.1.1.1");
        let k = t.admit(a, 0).unwrap().unwrap();
        assert_eq!(t.admit(a, 0), Err(Refusal::Limit));
        t.release(k, 0);
        // The refused attempt did not take the second token.
        assert!(t.admit(a, 0).is_ok());
    }

    #[test]
    fn mapped_ipv6_is_ipv4_and_ipv6_is_per_slash_64() {
        let mut t = PerIp::new(limits(1, 0, 0), 8);
        assert!(t.admit(ip("192.0.2.5"), 0).is_ok());
        let mapped = IpAddr::V6(Ipv4Addr::new(192, 0, 2, 5).to_ipv6_mapped());
        assert_eq!(t.admit(mapped, 0), Err(Refusal::Limit));
        assert!(t.admit(ip("2001:db8:1:2::1"), 0).is_ok());
        assert_eq!(t.admit(ip("2001:db8:1:2:ffff::9"), 0), Err(Refusal::Limit));
        assert!(t.admit(ip("2001:db8:1:3::1"), 0).is_ok());
        assert_eq!(Key::of(IpAddr::V6(Ipv6Addr::LOCALHOST)), Key::V6Net(0));
    }

    #[test]
    fn table_is_bounded_under_many_addresses() {
        let cap = 32;
        let mut t = PerIp::new(limits(4, 1, 4), cap);
        let mut live = Vec::new();
        for i in 0..10_000u32 {
            let now = u64::from(i);
            if let Ok(Some(k)) = t.admit(IpAddr::V4(Ipv4Addr::from(i)), now) {
                // Keep a few sessions open, end the rest at once (their buckets still refill).
                if i % 100 == 0 && live.len() < cap / 2 {
                    live.push(k);
                } else {
                    t.release(k, now);
                }
            }
            assert!(t.len() <= cap, "table grew to {}", t.len());
        }
        // Live sessions survived every eviction.
        for k in &live {
            assert!(t.table.get(k).is_some_and(|e| e.live == 1));
        }
        for k in live {
            t.release(k, 10_000_000);
        }
        // Only idle entries remain; once refilled they make room for a full table of new ones.
        assert!(t.table.values().all(|e| e.live == 0));
        for j in 0..cap as u32 {
            let a = IpAddr::V4(Ipv4Addr::new(10, 200, 0, j as u8));
            assert!(t.admit(a, 10_000_000).is_ok());
        }
        assert_eq!(t.len(), cap);
        assert!(t.table.values().all(|e| e.live == 1));
    }

    #[test]
    fn full_table_of_live_sessions_refuses() {
        let mut t = PerIp::new(limits(8, 0, 0), 2);
        assert!(t.admit(ip("10.0.0.1"), 0).is_ok());
        assert!(t.admit(ip("10.0.0.2"), 0).is_ok());
        assert_eq!(t.admit(ip("10.0.0.3"), 0), Err(Refusal::Limit));
        assert!(t.admit(ip("10.0.0.1"), 0).is_ok());
        assert_eq!(t.len(), 2);
    }
}
