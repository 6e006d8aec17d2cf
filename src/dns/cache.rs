//! Sans-IO resolver cache: the positive/negative cache, queries in flight, retries, failover
//! and background refresh. Time is a parameter (ms on the reactor's monotonic clock).
//!
//! Owns every decision about names; it must not touch sockets or read a clock. It emits
//! [`Send`]s for the `dns` shell to put on the UDP socket and takes datagrams back through
//! [`Core::on_datagram`]. Wire details live in `dns::wire`, text parsing in `dns::conf`.
//!
//! Per name there is one [`Entry`]: what a lookup gets (its [`Answer`]) and at most one
//! [`Query`] in flight. A query keeps one id across its tries; try `k` goes to upstream
//! `k mod n`, `attempts × n` tries in all, each waiting `timeout_ms` (`doh_timeout_ms` for a
//! DoH server).
//!
//! Upstreams ([`Upstream`]) are plain nameservers over UDP or DoH servers (`--doh`, whose
//! exchanges the reactor runs: answers come back through [`Core::on_doh_reply`]). With DoH
//! configured a name is asked of the DoH servers only — then of the plain nameservers too when
//! `doh_fallback` is on — except the DoH servers' own host names (`doh_bootstrap`), which only
//! the plain nameservers are asked (a DoH server cannot resolve its own name).

use std::net::{IpAddr, SocketAddr};

use super::conf::canonical_name;
use super::wire::{self, RCODE_NOERROR, RCODE_NXDOMAIN, TYPE_A};
use super::{Counters, Lookup, ResolverConfig};
use crate::rng::Rng;

/// Lowest TTL used whatever the server and the configuration say (ms): keeps a watched name
/// with TTL 0 from being re-queried in a tight loop.
const TTL_FLOOR_MS: u64 = 1_000;

/// Where a query goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Upstream {
    /// A plain nameserver over UDP.
    Udp(SocketAddr),
    /// DoH server `i` (index into `--doh`): the shell runs an HTTPS exchange.
    Doh(u8),
}

/// A query for the shell to send: a datagram, or a DoH exchange.
#[derive(Debug)]
pub struct Send {
    pub to: Upstream,
    pub id: u16,
    pub packet: Vec<u8>,
}

/// What a lookup of one name gets.
#[derive(Debug)]
enum Answer {
    /// Nothing yet: the first query is in flight (or about to be started by a tick).
    Unknown,
    /// A good answer. Served until `expires_at`, or up to one `negative_ttl_ms` longer while a
    /// query for it runs or after a refresh failed (`last_error` set).
    Addr {
        ip: IpAddr,
        refresh_at: u64,
        expires_at: u64,
        last_error: Option<String>,
    },
    /// Negative cache: NXDOMAIN, NODATA, or every try failed.
    Failed { reason: String, until: u64 },
}

/// A query in flight.
#[derive(Debug)]
struct Query {
    id: u16,
    packet: Vec<u8>,
    /// Tries sent so far.
    tries: u32,
    /// Bit `i` set once upstream `i` of the query's list has been asked (answers are accepted
    /// only from these).
    asked: u32,
    /// Asked of the plain nameservers only (a DoH server's own name).
    plain: bool,
    deadline: u64,
    /// Why the last try failed, reported if it was the last one.
    last_error: String,
}

#[derive(Debug)]
struct Entry {
    /// Canonical name (see `conf::canonical_name`).
    name: String,
    answer: Answer,
    query: Option<Query>,
    /// Refreshed forever, never evicted (configured Worker/CF domains).
    watched: bool,
    /// Last lookup (ms).
    used_at: u64,
}

/// The resolver state machine. See the module docs. Names are few (≤ `max_names`, 256 by
/// default), so entries and hosts are plain vectors searched linearly: less code in the
/// binary than hash maps, and no hashing of peer-chosen ids.
pub struct Core {
    cfg: ResolverConfig,
    /// Upstreams for names: the DoH servers (then, with fallback, the nameservers), or the
    /// nameservers when no DoH server is configured.
    servers: Vec<Upstream>,
    /// The plain nameservers: for the DoH servers' own names.
    plain: Vec<Upstream>,
    hosts: Vec<(String, IpAddr)>,
    entries: Vec<Entry>,
    rng: Rng,
    pub counters: Counters,
}

impl Core {
    /// `servers` (the plain nameservers) must be non-empty and at most 8 (the shell passes ≤ 3
    /// from resolv.conf, or the override list truncated to 8); `cfg.doh_servers` at most
    /// [`MAX_DOH`](super::MAX_DOH). `hosts` as from `conf::parse_hosts`.
    pub fn new(
        cfg: ResolverConfig,
        servers: Vec<SocketAddr>,
        hosts: Vec<(String, IpAddr)>,
        rng: Rng,
    ) -> Core {
        debug_assert!(!servers.is_empty() && servers.len() <= 8);
        debug_assert!(cfg.doh_servers <= super::MAX_DOH);
        let plain: Vec<Upstream> = servers.into_iter().map(Upstream::Udp).collect();
        let mut list: Vec<Upstream> = (0..cfg.doh_servers as u8).map(Upstream::Doh).collect();
        if list.is_empty() || cfg.doh_fallback {
            list.extend(plain.iter().copied());
        }
        Core {
            cfg,
            servers: list,
            plain,
            hosts,
            entries: Vec::new(),
            rng,
            counters: Counters::default(),
        }
    }

    /// See `Resolver::lookup`. May push one [`Send`].
    pub fn lookup(&mut self, name: &str, now: u64, out: &mut Vec<Send>) -> Lookup {
        if let Some(ip) = ip_literal(name) {
            return Lookup::Ready(ip);
        }
        let key = match canonical_name(name) {
            Ok(k) => k,
            Err(e) => return Lookup::Failed(e),
        };
        if let Some(ip) = self.host(&key) {
            return Lookup::Ready(ip);
        }
        let Some(i) = self.find_or_insert(key) else {
            return Lookup::Failed("dns cache full".into());
        };
        let e = &mut self.entries[i];
        e.used_at = now;
        let start = match &e.answer {
            Answer::Addr { refresh_at, .. } if servable(e, now, self.cfg.negative_ttl_ms) => {
                now >= *refresh_at
            }
            Answer::Failed { until, .. } => now >= *until,
            _ => true,
        };
        if start && e.query.is_none() {
            self.start_query(i, now, out);
        }
        self.peek(i, now)
    }

    /// Marks `name` as in use forever: never evicted, refreshed before expiry, retried after
    /// a failure. A new name gets its first query at the next [`Core::on_tick`]. IP literals,
    /// hosts entries and invalid names are ignored (nothing to refresh).
    pub fn watch(&mut self, name: &str) {
        if ip_literal(name).is_some() {
            return;
        }
        let Ok(key) = canonical_name(name) else {
            return;
        };
        if self.host(&key).is_some() {
            return;
        }
        // With the cache full of watched names there is no room; a later lookup reports it.
        if let Some(i) = self.find_or_insert(key) {
            self.entries[i].watched = true;
        }
    }

    /// The last good answer for `name`, whatever its age; IP literals and hosts entries too.
    pub fn cached(&self, name: &str) -> Option<IpAddr> {
        if let Some(ip) = ip_literal(name) {
            return Some(ip);
        }
        let key = canonical_name(name).ok()?;
        if let Some(ip) = self.host(&key) {
            return Some(ip);
        }
        match self.entries.iter().find(|e| e.name == key)?.answer {
            Answer::Addr { ip, .. } => Some(ip),
            _ => None,
        }
    }

    /// Handles one datagram from `from`. Anything that is not a well-formed answer to a query
    /// in flight — matching id, question name and type, and coming from a nameserver that
    /// query has asked — is counted in `counters.ignored` and dropped. Returns the name whose
    /// query completed, if any; may push a [`Send`] (failover after SERVFAIL).
    pub fn on_datagram(
        &mut self,
        from: SocketAddr,
        pkt: &[u8],
        now: u64,
        out: &mut Vec<Send>,
    ) -> Option<String> {
        let Some((i, resp)) = self.match_response(Upstream::Udp(from), pkt) else {
            self.counters.ignored += 1;
            return None;
        };
        self.counters.answers += 1;
        if resp.truncated {
            // No TCP fallback (yet): a truncated answer counts as a failed try.
            return self.try_failed(
                i,
                format!("truncated answer from {from} (TC, no TCP fallback)"),
                now,
                out,
            );
        }
        match resp.rcode {
            RCODE_NOERROR => match resp.addrs.first() {
                Some(ip) => Some(self.succeed(i, *ip, resp.ttl, now)),
                None => Some(self.fail_for(i, "no A record".into(), zone_neg(&resp), now)),
            },
            RCODE_NXDOMAIN => Some(self.fail_for(i, "NXDOMAIN".into(), zone_neg(&resp), now)),
            rcode => {
                let what = wire::rcode_name(rcode);
                self.try_failed(i, format!("{what} (rcode {rcode}) from {from}"), now, out)
            }
        }
    }

    /// Takes the end of DoH exchange `id` with DoH server `server`: the `200` body of type
    /// `application/dns-message`, or why the exchange failed (connect, TLS, HTTP status,
    /// content type, deadline). A body that is not a DNS response, answers another name or
    /// type, is truncated or carries an error RCODE other than NXDOMAIN fails the try just as a
    /// transport error does — the next upstream is asked at once if this was the query's
    /// current try (an earlier try's failure changes nothing). No id check: the exchange
    /// itself pairs question and answer (RFC 8484 §4.1 asks for id 0).
    ///
    /// Returns the name whose query completed, if any, and what the reply says about the
    /// server: `Ok` for a usable answer (an address, NXDOMAIN or NODATA), else the reason.
    pub fn on_doh_reply(
        &mut self,
        server: u8,
        id: u16,
        reply: Result<&[u8], String>,
        now: u64,
        out: &mut Vec<Send>,
    ) -> (Option<String>, Result<(), String>) {
        let from = Upstream::Doh(server);
        let Some(i) = self.entries.iter().position(|e| {
            e.query
                .as_ref()
                .is_some_and(|q| q.id == id && q.asked & self.bit(q, from) != 0)
        }) else {
            // The query ended meanwhile (an answer from another upstream, or it gave up).
            let verdict = reply.and_then(|b| super::doh::check_reply(b, None).map(|_| ()));
            return (None, verdict);
        };
        let verdict = reply.and_then(|b| super::doh::check_reply(b, Some(&self.entries[i].name)));
        match verdict {
            Ok(resp) => {
                self.counters.answers += 1;
                let done = match resp.rcode {
                    RCODE_NOERROR => match resp.addrs.first() {
                        Some(ip) => self.succeed(i, *ip, resp.ttl, now),
                        None => self.fail_for(i, "no A record".into(), zone_neg(&resp), now),
                    },
                    _ => self.fail_for(i, "NXDOMAIN".into(), zone_neg(&resp), now),
                };
                (Some(done), Ok(()))
            }
            Err(why) => {
                self.counters.ignored += 1;
                let reason = format!("DoH server {}: {why}", server + 1);
                let q = self.entries[i].query.as_ref();
                let done = if q.and_then(|q| self.current(q)) == Some(from) {
                    self.try_failed(i, reason, now, out)
                } else {
                    None
                };
                (done, Err(why))
            }
        }
    }

    /// Records a local send error for the query with `id`: the try is lost and times out as
    /// usual, but its reason is the one reported if it was the last.
    pub fn note_send_error(&mut self, id: u16, err: &str) {
        if let Some(q) = self
            .entries
            .iter_mut()
            .filter_map(|e| e.query.as_mut())
            .find(|q| q.id == id)
        {
            q.last_error = format!("send: {err}");
        }
    }

    /// Timeouts and background work due at `now`: a timed-out try moves to the next
    /// nameserver (or fails the query); due refreshes and watched retries start; entries that
    /// can serve nothing and are not watched are dropped. Returns names whose query completed.
    pub fn on_tick(&mut self, now: u64, out: &mut Vec<Send>) -> Vec<String> {
        let mut done = Vec::new();
        let idle_ms = self.cfg.idle_ms;
        for i in 0..self.entries.len() {
            let e = &self.entries[i];
            match &e.query {
                Some(q) if now >= q.deadline => {
                    // A send error noted for this try explains the silence better.
                    let reason = if q.last_error.is_empty() {
                        format!("no answer within {} ms", self.cfg.timeout_ms)
                    } else {
                        q.last_error.clone()
                    };
                    done.extend(self.try_failed(i, reason, now, out));
                }
                Some(_) => {}
                None if background_at(e, idle_ms).is_some_and(|at| now >= at) => {
                    self.start_query(i, now, out);
                    if self.entries[i].query.is_none() {
                        done.push(self.entries[i].name.clone()); // failed at once
                    }
                }
                None => {}
            }
        }
        let neg = self.cfg.negative_ttl_ms;
        self.entries.retain(|e| {
            e.watched || e.query.is_some() || servable(e, now, neg) || failed_live(e, now)
        });
        done
    }

    /// Earliest time [`Core::on_tick`] has work: a try deadline, a refresh, a watched retry.
    pub fn next_deadline(&self) -> Option<u64> {
        self.entries
            .iter()
            .filter_map(|e| match &e.query {
                Some(q) => Some(q.deadline),
                None => background_at(e, self.cfg.idle_ms),
            })
            .min()
    }

    /// The upstreams query `q` is asked of.
    fn list(&self, q: &Query) -> &[Upstream] {
        if q.plain {
            &self.plain
        } else {
            &self.servers
        }
    }

    /// The upstream `q`'s latest try went to.
    fn current(&self, q: &Query) -> Option<Upstream> {
        let list = self.list(q);
        let k = (q.tries as usize).checked_sub(1)?;
        Some(list[k % list.len()])
    }

    /// `from`'s bit in `q.asked` (0 when `from` is not in `q`'s list).
    fn bit(&self, q: &Query, from: Upstream) -> u32 {
        self.list(q)
            .iter()
            .position(|s| *s == from)
            .map_or(0, |p| 1 << p)
    }

    fn host(&self, key: &str) -> Option<IpAddr> {
        self.hosts.iter().find(|(n, _)| n == key).map(|(_, ip)| *ip)
    }

    /// Index of `key`'s entry, created (evicting if the cache is full) if missing; `None` when
    /// full of watched names or names with a query in flight.
    fn find_or_insert(&mut self, key: String) -> Option<usize> {
        if let Some(i) = self.entries.iter().position(|e| e.name == key) {
            return Some(i);
        }
        if self.entries.len() >= self.cfg.max_names.max(1) {
            // Evict the least recently used unwatched entry with no query in flight.
            let victim = (0..self.entries.len())
                .filter(|&i| !self.entries[i].watched && self.entries[i].query.is_none())
                .min_by_key(|&i| self.entries[i].used_at)?;
            self.entries.swap_remove(victim);
        }
        self.entries.push(Entry {
            name: key,
            answer: Answer::Unknown,
            query: None,
            watched: false,
            used_at: 0,
        });
        Some(self.entries.len() - 1)
    }

    /// Lookup result for entry `i`, without side effects.
    fn peek(&self, i: usize, now: u64) -> Lookup {
        let e = &self.entries[i];
        match &e.answer {
            Answer::Addr { ip, .. } if servable(e, now, self.cfg.negative_ttl_ms) => {
                Lookup::Ready(*ip)
            }
            Answer::Failed { reason, until } if now < *until || e.query.is_none() => {
                Lookup::Failed(reason.clone())
            }
            _ => Lookup::Pending,
        }
    }

    /// Starts a query for entry `i` (which has none in flight) and sends its first try.
    fn start_query(&mut self, i: usize, now: u64, out: &mut Vec<Send>) {
        let mut id = self.rng.u32() as u16;
        for _ in 0..16 {
            if !self.id_in_use(id) {
                break;
            }
            id = self.rng.u32() as u16;
        }
        if self.id_in_use(id) {
            // 16 collisions in a row: needs tens of thousands of queries in flight.
            self.fail(i, "too many queries in flight".into(), now);
            return;
        }
        let packet = match wire::encode_query(id, &self.entries[i].name, TYPE_A) {
            Ok(p) => p,
            Err(e) => {
                self.fail(i, format!("cannot encode query: {e}"), now);
                return;
            }
        };
        let plain = self.cfg.doh_bootstrap.contains(&self.entries[i].name);
        self.entries[i].query = Some(Query {
            id,
            packet,
            tries: 0,
            asked: 0,
            plain,
            deadline: now,
            last_error: String::new(),
        });
        self.send_next(i, now, out);
    }

    fn id_in_use(&self, id: u16) -> bool {
        self.entries
            .iter()
            .any(|e| e.query.as_ref().is_some_and(|q| q.id == id))
    }

    /// Sends the next try of entry `i`'s query.
    fn send_next(&mut self, i: usize, now: u64, out: &mut Vec<Send>) {
        let Some(q) = self.entries[i].query.as_mut() else {
            return;
        };
        let list = if q.plain { &self.plain } else { &self.servers };
        let s = q.tries as usize % list.len();
        let to = list[s];
        q.tries += 1;
        q.asked |= 1 << s;
        let wait = match to {
            Upstream::Udp(_) => self.cfg.timeout_ms,
            Upstream::Doh(_) => self.cfg.doh_timeout_ms,
        };
        q.deadline = now + wait.max(1);
        q.last_error.clear();
        self.counters.queries += 1;
        out.push(Send {
            to,
            id: q.id,
            packet: q.packet.clone(),
        });
    }

    /// The index of the entry whose query in flight a datagram answers, and the response.
    fn match_response(&self, from: Upstream, pkt: &[u8]) -> Option<(usize, wire::Response)> {
        let resp = wire::parse_response(pkt).ok()?;
        let i = self
            .entries
            .iter()
            .position(|e| e.query.as_ref().is_some_and(|q| q.id == resp.id))?;
        let e = &self.entries[i];
        let q = e.query.as_ref()?;
        if q.asked & self.bit(q, from) == 0 || resp.qname != e.name || resp.qtype != TYPE_A {
            return None;
        }
        Some((i, resp))
    }

    /// One try of entry `i` failed: next try if any are left, else the query fails.
    fn try_failed(
        &mut self,
        i: usize,
        reason: String,
        now: u64,
        out: &mut Vec<Send>,
    ) -> Option<String> {
        let q = self.entries[i].query.as_ref()?;
        let total = self
            .cfg
            .attempts
            .max(1)
            .saturating_mul(self.list(q).len() as u32);
        if q.tries < total {
            self.send_next(i, now, out);
            return None;
        }
        Some(self.fail(i, reason, now))
    }

    /// Ends entry `i`'s query with an answer; returns its name.
    fn succeed(&mut self, i: usize, ip: IpAddr, ttl_s: u32, now: u64) -> String {
        let ttl_ms = (u64::from(ttl_s) * 1000)
            .max(self.cfg.min_ttl_ms)
            .min(self.cfg.max_ttl_ms)
            .max(TTL_FLOOR_MS);
        let pct = u64::from(self.cfg.refresh_ahead_pct.clamp(10, 100));
        let e = &mut self.entries[i];
        e.query = None;
        e.answer = Answer::Addr {
            ip,
            refresh_at: now + ttl_ms * pct / 100,
            expires_at: now + ttl_ms,
            last_error: None,
        };
        e.name.clone()
    }

    /// Ends entry `i`'s query with a failure; returns its name. A still-servable answer is
    /// kept (refresh retried in half a negative TTL); otherwise the name is negatively cached
    /// for `negative_ttl_ms`.
    fn fail(&mut self, i: usize, reason: String, now: u64) -> String {
        self.fail_for(i, reason, None, now)
    }

    /// [`Core::fail`] with the zone's own negative TTL (`zone_ms`, from the SOA of an
    /// NXDOMAIN / NODATA answer, RFC 2308 §5) in place of `negative_ttl_ms` where it was given.
    fn fail_for(&mut self, i: usize, reason: String, zone_ms: Option<u64>, now: u64) -> String {
        let neg = zone_ms.unwrap_or(self.cfg.negative_ttl_ms);
        self.counters.failures += 1;
        let e = &mut self.entries[i];
        // Judged while the query still counts as running, so the grace period applies.
        let keep = servable(e, now, neg);
        e.query = None;
        match &mut e.answer {
            Answer::Addr {
                refresh_at,
                last_error,
                ..
            } if keep => {
                *refresh_at = now + (neg / 2).max(TTL_FLOOR_MS);
                *last_error = Some(reason);
            }
            _ => {
                e.answer = Answer::Failed {
                    reason,
                    until: now + neg.max(TTL_FLOOR_MS),
                }
            }
        }
        e.name.clone()
    }
}

/// Longest negative TTL a zone's SOA may set (ms): RFC 2308 §5 suggests at most 3 hours; a
/// zone asking for more gets this.
const MAX_ZONE_NEGATIVE_MS: u64 = 3 * 3600 * 1000;

/// The negative TTL (ms) a negative answer's SOA gives, floored and capped.
fn zone_neg(resp: &wire::Response) -> Option<u64> {
    resp.negative_ttl
        .map(|s| (u64::from(s) * 1000).clamp(TTL_FLOOR_MS, MAX_ZONE_NEGATIVE_MS))
}

/// Whether `e`'s address answer may be served at `now` (see [`Answer::Addr`]).
fn servable(e: &Entry, now: u64, grace_ms: u64) -> bool {
    match &e.answer {
        Answer::Addr {
            expires_at,
            last_error,
            ..
        } => {
            let grace = e.query.is_some() || last_error.is_some();
            now < *expires_at || (grace && now < expires_at.saturating_add(grace_ms))
        }
        _ => false,
    }
}

/// A negative answer still inside its negative TTL.
fn failed_live(e: &Entry, now: u64) -> bool {
    matches!(e.answer, Answer::Failed { until, .. } if now < until)
}

/// When a query-less entry wants a background query: a refresh of an answer that is watched
/// or was used within `idle_ms` of its refresh time; a watched name's retry after its negative
/// TTL; a watched name never resolved (at once). `None` for entries left to expire.
fn background_at(e: &Entry, idle_ms: u64) -> Option<u64> {
    if e.query.is_some() {
        return None;
    }
    match &e.answer {
        Answer::Addr { refresh_at, .. }
            if e.watched || *refresh_at < e.used_at.saturating_add(idle_ms) =>
        {
            Some(*refresh_at)
        }
        Answer::Failed { until, .. } if e.watched => Some(*until),
        Answer::Unknown if e.watched => Some(0),
        _ => None,
    }
}

/// `name` as an IP literal (IPv6 optionally in brackets, one trailing dot tolerated on IPv4).
fn ip_literal(name: &str) -> Option<IpAddr> {
    let s = name
        .strip_prefix('[')
        .and_then(|s| s.strip_suffix(']'))
        .unwrap_or(name);
    s.parse().ok().or_else(|| {
        s.strip_suffix('.')?
            .parse::<std::net::Ipv4Addr>()
            .ok()
            .map(IpAddr::V4)
    })
}

#[cfg(test)]
#[path = "cache_tests.rs"]
mod tests;
