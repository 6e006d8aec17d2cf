//! Non-blocking DNS inside the reactor (docs/design.md §6): `/etc/hosts`, `/etc/resolv.conf`, A
//! queries over one UDP socket, a positive and negative cache refreshed in the background.
//!
//! Owns the resolver's one `mio::net::UdpSocket` and its I/O shell; it must not create a
//! `Poll`, read a clock or block — the reactor registers [`Resolver::socket`] under its own
//! token, passes `now` (ms on its monotonic clock) and calls [`Resolver::on_readable`] and
//! [`Resolver::on_tick`]. Decisions live in `cache` (sans-IO), the wire format in `wire`, text
//! parsing in `conf`. `oneshot` is a blocking one-time lookup over the same files and wire code
//! for applets (`genkey`), never for the reactor.
//!
//! How the reactor drives it today:
//! ```text
//! let mut dns = Resolver::new(ResolverConfig { hosts_path, resolv_path, .. })?;
//! registry.register(dns.socket(), token::DNS, Interest::READABLE)?;
//! for name in worker domains, kwsN.<cf-domain> for N in 1..5, 203 { dns.watch(name); lookup }
//! loop {
//!     timeout = min(wheel.next_deadline(), dns.next_deadline()) - now
//!     poll(timeout); now = clock()
//!     if event.token() == token::DNS { dns.on_readable(now) }
//!     if dns.next_deadline() <= now { dns.on_tick(now) }
//! }
//! ```
//! Nobody waits on a name: sessions and probes call [`Resolver::lookup`] when they build dial
//! specs; a session skips a route whose name is not resolved yet and a probe is retried later.
//! So the names that `on_readable` / `on_tick` return are not used by the reactor.
//!
//! DNS over HTTPS (`--doh`, RFC 8484): with DoH servers configured, the cache asks them instead
//! of (or, with `--doh-fallback on`, before) the nameservers. The HTTPS exchanges are not run
//! here: a try for a DoH server is queued ([`Resolver::take_doh`], which the reactor's
//! `reactor::doh` drains into HTTPS GETs) and its end comes back through
//! [`Resolver::on_doh_reply`]; the query's wire form and the answer's check are `doh`'s.
//!
//! Limits (documented, not bugs): A records only (IPv6-only upstreams go unresolved); no
//! search list; no TCP fallback — a truncated (TC) answer counts as a failed try; nameservers
//! are asked one after another, not in parallel; one socket, so nameservers of the other
//! address family than the first are skipped.

mod cache;
mod conf;
pub mod doh;
pub mod oneshot;
// Public for the fuzz target (fuzz/fuzz_targets/dns_reply.rs); the resolver is its only user.
pub mod wire;

use std::fs;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;

use mio::net::UdpSocket;

use self::cache::{Core, Send, Upstream};
pub use self::conf::{canonical_name, normalize_host};

/// Resolves `host` from the cache without waiting: `None` while a query runs or after a
/// negative answer (the caller skips whatever needed it for now; a query is started if none
/// runs).
pub fn cached(dns: &mut Resolver, host: &str, now: u64) -> Option<std::net::IpAddr> {
    match dns.lookup(host, now) {
        Lookup::Ready(ip) => Some(ip),
        Lookup::Pending | Lookup::Failed(_) => None,
    }
}
use crate::rng::Rng;

/// Datagrams read per [`Resolver::on_readable`] call before yielding; the rest are read by the
/// next [`Resolver::on_tick`] (its deadline becomes 0).
const READ_BATCH: usize = 64;
/// Receive buffer: plain DNS over UDP is ≤ 512 bytes; larger datagrams are cut and rejected.
const RECV_BUF: usize = 1_500;
/// Most nameservers taken from the override list.
const MAX_OVERRIDE: usize = 8;
/// Most DoH servers used (`--doh` values past this are ignored).
pub const MAX_DOH: usize = 8;

/// Resolver settings. Times are milliseconds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolverConfig {
    /// hosts(5) file, read once at start (default `/etc/hosts`; missing file = empty).
    pub hosts_path: PathBuf,
    /// resolv.conf(5) file, read once at start (default `/etc/resolv.conf`); with no usable
    /// `nameserver` line, 127.0.0.1:53 is used, as musl does.
    pub resolv_path: PathBuf,
    /// Test seam: use these nameservers (any port) instead of resolv.conf's. Default `None`.
    pub nameservers_override: Option<Vec<SocketAddr>>,
    /// Wait for one try (default 2000).
    pub timeout_ms: u64,
    /// Rounds over the nameserver list per query (default 2); each round tries every server.
    pub attempts: u32,
    /// TTL floor (default 30 s). Never below 1 s whatever is configured.
    pub min_ttl_ms: u64,
    /// TTL ceiling (default 1 h).
    pub max_ttl_ms: u64,
    /// How long NXDOMAIN / NODATA / all-tries-failed is remembered (default 60 s) — an NXDOMAIN
    /// or NODATA whose authority section carries the zone's SOA is remembered for the zone's
    /// own negative TTL instead (RFC 2308 §5, 1 s to 3 h); also the grace an old answer is
    /// served past its expiry while a refresh runs or after it failed.
    pub negative_ttl_ms: u64,
    /// Refresh an answer once this share of its TTL has passed (default 80; clamped to 10–100).
    pub refresh_ahead_pct: u32,
    /// An unwatched name not looked up for this long before its refresh time is left to expire
    /// instead of being refreshed (default 6 h).
    pub idle_ms: u64,
    /// Names cached at most (default 256); the least recently used unwatched name is evicted.
    pub max_names: usize,
    /// DoH servers configured (`--doh`, ≤ [`MAX_DOH`]; default 0: plain DNS only). Server `i`
    /// is the `i`-th `--doh` URL; the shell that runs the exchanges knows the URLs.
    pub doh_servers: usize,
    /// With DoH servers: ask the nameservers too once every DoH server was tried
    /// (`--doh-fallback`, default false).
    pub doh_fallback: bool,
    /// Wait for one DoH try (`--doh-timeout`, default 5000).
    pub doh_timeout_ms: u64,
    /// Canonical host names of the DoH servers given by name: asked of the nameservers only.
    pub doh_bootstrap: Vec<String>,
}

impl Default for ResolverConfig {
    fn default() -> Self {
        ResolverConfig {
            hosts_path: PathBuf::from("/etc/hosts"),
            resolv_path: PathBuf::from("/etc/resolv.conf"),
            nameservers_override: None,
            timeout_ms: 2_000,
            attempts: 2,
            min_ttl_ms: 30_000,
            max_ttl_ms: 3_600_000,
            negative_ttl_ms: 60_000,
            refresh_ahead_pct: 80,
            idle_ms: 6 * 3_600_000,
            max_names: 256,
            doh_servers: 0,
            doh_fallback: false,
            doh_timeout_ms: 5_000,
            doh_bootstrap: Vec::new(),
        }
    }
}

/// Result of [`Resolver::lookup`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    /// Use this address now.
    Ready(IpAddr),
    /// A query is in flight; wait until `on_readable`/`on_tick` report the name.
    Pending,
    /// Negative answer or failure; a one-line reason (`"NXDOMAIN"`, `"no A record"`,
    /// `"no answer within 2000 ms"`, `"invalid label …"`, …). Cached for `negative_ttl_ms`.
    Failed(String),
}

/// Resolver counters (for the stats line and tests).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Query datagrams handed to the socket (every try).
    pub queries: u64,
    /// Datagrams accepted as answers to a query in flight.
    pub answers: u64,
    /// Datagrams dropped: malformed, unknown id, wrong name/type, or wrong source address.
    pub ignored: u64,
    /// Queries that ended in a failure or a negative answer.
    pub failures: u64,
}

/// A DoH try for the shell to run: a GET of [`doh::get_path`]`(path, packet)` on DoH server
/// `server`, whose end goes back to [`Resolver::on_doh_reply`] with `server` and `id`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DohQuery {
    /// Index of the `--doh` URL.
    pub server: u8,
    /// The query's id (the wire form sent carries 0).
    pub id: u16,
    /// The query in wire form.
    pub packet: Vec<u8>,
}

/// The resolver: one non-blocking UDP socket plus the cache. See the module docs.
pub struct Resolver {
    core: Core,
    socket: UdpSocket,
    buf: Vec<u8>,
    sends: Vec<Send>,
    /// DoH tries waiting for the shell ([`Resolver::take_doh`]).
    doh_out: Vec<DohQuery>,
    /// `on_readable` stopped at [`READ_BATCH`] before `WouldBlock`.
    backlog: bool,
}

impl Resolver {
    /// Reads the hosts file and resolv.conf once and binds the UDP socket to an ephemeral port
    /// (`0.0.0.0:0`, or `[::]:0` if the first nameserver is IPv6).
    ///
    /// Errors: the socket cannot be bound, or the OS has no randomness for query ids. Missing
    /// or unreadable files are not errors (no hosts entries / the 127.0.0.1 default).
    pub fn new(cfg: ResolverConfig) -> io::Result<Resolver> {
        let hosts = fs::read_to_string(&cfg.hosts_path)
            .map(|t| conf::parse_hosts(&t))
            .unwrap_or_default();
        let mut servers: Vec<SocketAddr> = match &cfg.nameservers_override {
            Some(list) => list.iter().take(MAX_OVERRIDE).copied().collect(),
            None => fs::read_to_string(&cfg.resolv_path)
                .map(|t| conf::parse_resolv(&t))
                .unwrap_or_default(),
        };
        if servers.is_empty() {
            servers.push(SocketAddr::from((Ipv4Addr::LOCALHOST, 53)));
        }
        let v6 = servers[0].is_ipv6();
        servers.retain(|s| s.is_ipv6() == v6);
        let bind = if v6 {
            SocketAddr::from((Ipv6Addr::UNSPECIFIED, 0))
        } else {
            SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0))
        };
        let socket = UdpSocket::bind(bind)?;
        let mut cfg = cfg;
        cfg.doh_servers = cfg.doh_servers.min(MAX_DOH);
        let rng = Rng::new().map_err(|e| io::Error::other(format!("randomness: {e}")))?;
        Ok(Resolver {
            core: Core::new(cfg, servers, hosts, rng),
            socket,
            buf: vec![0; RECV_BUF],
            sends: Vec::new(),
            doh_out: Vec::new(),
            backlog: false,
        })
    }

    /// The UDP socket, for `registry.register(socket, token, Interest::READABLE)` once.
    pub fn socket(&mut self) -> &mut UdpSocket {
        &mut self.socket
    }

    /// Resolves `name` (case-insensitive, one trailing dot ignored) at `now`:
    /// IP literal (IPv6 optionally in brackets) → `Ready` at once; hosts entry → `Ready`;
    /// cached answer (fresh, or stale while a refresh runs) → `Ready`, starting a background
    /// refresh if one is due; negative cache → `Failed`; otherwise a query is sent (unless one
    /// is in flight) → `Pending`. An invalid name → `Failed` (nothing is sent).
    pub fn lookup(&mut self, name: &str, now: u64) -> Lookup {
        let r = self.core.lookup(name, now, &mut self.sends);
        self.flush();
        r
    }

    /// Drains the socket (at most [`READ_BATCH`] datagrams) and returns the names whose query
    /// completed: a `lookup` of each now gives `Ready` or `Failed`. Datagrams that do not
    /// answer a query in flight (id, question, source address) are ignored.
    pub fn on_readable(&mut self, now: u64) -> Vec<String> {
        let mut done = Vec::new();
        self.backlog = true;
        for _ in 0..READ_BATCH {
            match self.socket.recv_from(&mut self.buf) {
                Ok((n, from)) => {
                    let name = self
                        .core
                        .on_datagram(from, &self.buf[..n], now, &mut self.sends);
                    done.extend(name);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.backlog = false;
                    break;
                }
                // Interrupted, or an ICMP error surfaced on the socket: read on.
                Err(_) => continue,
            }
        }
        self.flush();
        done
    }

    /// Timeouts, failover, background refreshes and retries due at `now` (call when
    /// [`Resolver::next_deadline`] has passed). Returns the names whose query completed.
    pub fn on_tick(&mut self, now: u64) -> Vec<String> {
        let mut done = if self.backlog {
            self.on_readable(now)
        } else {
            Vec::new()
        };
        done.extend(self.core.on_tick(now, &mut self.sends));
        self.flush();
        done
    }

    /// When [`Resolver::on_tick`] next has work (ms, same clock as `now`; 0 = at once), or
    /// `None` when idle.
    pub fn next_deadline(&self) -> Option<u64> {
        if self.backlog || !self.doh_out.is_empty() {
            return Some(0);
        }
        self.core.next_deadline()
    }

    /// Marks `name` as in use: resolved at the next tick if unknown (the deadline becomes 0),
    /// refreshed before every expiry, retried after failures, never evicted. For configured
    /// Worker/CF domains. IP literals, hosts entries and invalid names are ignored.
    pub fn watch(&mut self, name: &str) {
        self.core.watch(name);
    }

    /// The last good answer for `name` whatever its age (or an IP literal / hosts entry); no
    /// I/O, no cache update.
    pub fn cached(&self, name: &str) -> Option<IpAddr> {
        self.core.cached(name)
    }

    /// The DoH tries queued since the last call, for the shell to run (see [`DohQuery`]).
    /// Non-empty makes [`Resolver::next_deadline`] 0.
    pub fn take_doh(&mut self) -> Vec<DohQuery> {
        std::mem::take(&mut self.doh_out)
    }

    /// The end of a DoH try (see [`DohQuery`]): the `200` body of the right media type, or
    /// why the exchange failed. Returns the name whose query completed, if any, and what the
    /// reply says about the server (`Err(reason)`: a transport failure, or an answer that is
    /// garbage, for another name, truncated or an error RCODE). The next upstream is asked at
    /// once when this was the query's latest try.
    pub fn on_doh_reply(
        &mut self,
        server: u8,
        id: u16,
        reply: Result<&[u8], String>,
        now: u64,
    ) -> (Option<String>, Result<(), String>) {
        let r = self
            .core
            .on_doh_reply(server, id, reply, now, &mut self.sends);
        self.flush();
        r
    }

    /// Counters since start.
    pub fn counters(&self) -> Counters {
        self.core.counters
    }

    /// Puts queued queries on the socket. A failed send loses that try (it times out as
    /// usual) and its error becomes the reason if it was the last try.
    fn flush(&mut self) {
        for s in self.sends.drain(..) {
            match s.to {
                Upstream::Udp(to) => {
                    if let Err(e) = self.socket.send_to(&s.packet, to) {
                        self.core.note_send_error(s.id, &e.to_string());
                    }
                }
                Upstream::Doh(server) => self.doh_out.push(DohQuery {
                    server,
                    id: s.id,
                    packet: s.packet,
                }),
            }
        }
    }
}
