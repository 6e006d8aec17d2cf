//! The [`Status`] snapshot `ctl status` and `ctl metrics` render: plain data, gathered by the
//! reactor's shell at one instant (`now`), owned, so rendering borrows nothing of the reactor.

use std::net::{IpAddr, SocketAddr};

use crate::config::Tier;
use crate::error::CloseReason;
use crate::route::ladder::{EdgeStatus, RouteStatus};
use crate::stats::{FrozenSession, Stats, MASK_WHY_NAMES};

/// Everything `ctl status` shows.
#[derive(Clone, Debug)]
pub struct Status {
    /// The binary's version (`CARGO_PKG_VERSION`).
    pub version: &'static str,
    /// Time since start, ms.
    pub uptime_ms: u64,
    /// The address clients connect to.
    pub listen: SocketAddr,
    /// The operator's pin (`tier tcp`, `route #3`), if any.
    pub pin: Option<String>,
    /// Sessions in the slab now (connecting or relaying).
    pub sessions_active: usize,
    /// Slab size (`--max-connections`, capped).
    pub sessions_capacity: usize,
    /// Sessions relaying now over each tier, in [`Tier::index`] order; the rest of
    /// `sessions_active` are still connecting (or closing).
    pub sessions_per_tier: [usize; Tier::COUNT],
    /// Sessions relaying now whose relay holds upstream bytes the client has not taken yet (a
    /// slow reader: what the freeze watch counts as bytes down, `relay::stall`).
    pub sessions_waiting_on_client: usize,
    /// Every route created so far.
    pub routes: Vec<RouteStatus>,
    /// Requests left today per Worker (`--cf-worker-domain` order): (redacted host:port, left).
    pub budgets: Vec<(String, u32)>,
    /// Each Worker account (`route::quota`), in the order of its first Worker.
    pub accounts: Vec<AccountStatus>,
    /// Open file descriptors of the process, if `/proc/self/fd` was readable.
    pub fds_used: Option<u64>,
    /// The soft `RLIMIT_NOFILE`, if known (`None` also for "unlimited").
    pub fds_limit: Option<u64>,
    /// Resident set size, KiB (`stats::rss_kib`).
    pub rss_kib: Option<u64>,
    /// Reloads applied and rejected, once the stats carry them (`None` until then).
    pub reloads: Option<(u64, u64)>,
    /// The stats line's counters.
    pub counters: Counters,
    /// The shared CF domain list (`--cf-domain-list`), `None` when it is off.
    pub shared_list: Option<SharedList>,
    /// The resolver: its counters and the DoH servers' state (`--doh`).
    pub dns: DnsStatus,
    /// Telegram's range list (transparent mode), `None` without `--transparent`.
    pub tg_ranges: Option<RangesStatus>,
    /// The most recent frozen sessions (docs/design.md §4 rule 7), oldest first, with how long
    /// ago each froze (ms).
    pub frozen: Vec<(FrozenSession, u64)>,
    /// Each way in ([`crate::config::WayIn::ALL`] order): its listener's address (`None`: off) and the
    /// sessions that came in by it now.
    pub ways: [(Option<SocketAddr>, usize); 3],
    /// Sessions past their handshake per DC (`DC2`, `DC-4` media, `DC10002` test…), by label.
    pub dcs: Vec<(String, usize)>,
    /// Destinations direct clients meant that found no DC (`unknown-dst`): address, closes,
    /// ms since the last; most closes first (`route::dc_table::UnknownDsts`).
    pub unknown_destinations: Vec<(IpAddr, u64, u64)>,
    /// The Cloudflare edges in use (`--cf-ip`), empty without it.
    pub edges: Vec<EdgeStatus>,
    /// Addresses the DC table learned from agreeing clients, with their DC's label.
    pub learned_dcs: Vec<(IpAddr, String)>,
    /// Whether Telegram is reachable at all (`route::verdict`).
    pub telegram: TelegramStatus,
}

/// The verdict whether Telegram is reachable (`route::verdict`), for `ctl status`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TelegramStatus {
    /// `checking`, `reachable` or `unreachable` (`route::verdict::State::name`).
    pub verdict: &'static str,
    /// ms since the verdict last changed (since start while it never did).
    pub for_ms: u64,
    /// Unless reachable: each tier tried, its failed routes and their commonest failure.
    pub tried: Vec<(&'static str, u32, String)>,
}

/// One Worker account in `ctl status` (`route::quota::GroupStatus`, names redacted).
#[derive(Clone, Debug, Default)]
pub struct AccountStatus {
    /// The account (`route::quota::redact_account`).
    pub name: String,
    /// Its Workers, redacted `host:port`.
    pub workers: Vec<String>,
    /// `None` while serving; else why it is held (`daily-quota`, `retry-after`) and the ms left.
    pub held: Option<(&'static str, u64)>,
    /// Requests sent to its Workers since the last 00:00 UTC.
    pub requests_today: u32,
}

/// Telegram's range list in force and its refresh (`reactor::tgranges`), for `ctl status`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RangesStatus {
    /// Where the list in force came from: `built-in`, `cache PATH`, `file PATH` or the URL.
    pub source: String,
    /// The refresh URL, `None` when the list is not refreshed (`off`, or `--tg-ranges FILE`).
    pub url: Option<String>,
    /// IPv4 and IPv6 prefixes in force.
    pub v4: usize,
    /// Of the list in force.
    pub v6: usize,
    /// Fetches finished, and how many failed or were refused.
    pub fetches: u64,
    /// Of `fetches`.
    pub failures: u64,
    /// The last fetch: accepted, what (`accepted …` or why not), age in ms.
    pub last: Option<(bool, String, u64)>,
    /// The last update of the firewall sets by `nft`: done, what (nft's message), age in ms.
    pub nft: Option<(bool, String, u64)>,
}

/// The resolver in `ctl status`.
#[derive(Clone, Debug, Default)]
pub struct DnsStatus {
    /// Resolver counters since start (every try, UDP or DoH).
    pub counters: crate::dns::Counters,
    /// `--doh-fallback` (meaningful with DoH servers only).
    pub doh_fallback: bool,
    /// One per `--doh` URL, in order (empty: plain DNS only).
    pub doh: Vec<DohServerStatus>,
}

/// One DoH server in `ctl status`.
#[derive(Clone, Debug, Default)]
pub struct DohServerStatus {
    /// The URL as configured (`https://…`).
    pub url: String,
    /// `unknown` (not asked yet), `up` (its last exchange gave a usable answer) or `down` (its
    /// last exchange failed: `last_error` says why).
    pub state: &'static str,
    /// Exchanges finished, and of them usable answers and failures.
    pub queries: u64,
    /// Of `queries`.
    pub answers: u64,
    /// Of `queries`.
    pub failures: u64,
    /// The latest failure and how long ago (ms).
    pub last_error: Option<(String, u64)>,
}

/// The shared CF domain list's state, for `ctl status`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SharedList {
    /// Where it comes from (URL or file).
    pub source: String,
    /// Shared domains in use.
    pub in_use: usize,
    /// Names the last accepted list gave (at most `route::cflist::MAX_DOMAINS`), and valid
    /// names it had past that cap, dropped (0 before any list was accepted this run).
    pub kept: usize,
    /// Of the last accepted list.
    pub dropped: usize,
    /// Fetches finished, and how many failed or were rejected.
    pub fetches: u64,
    /// Of `fetches`.
    pub failures: u64,
    /// The last result (`accepted N domains` or why not) and its age in ms.
    pub last: Option<(String, u64)>,
}

/// The counters of the stats line (`stats::Stats`), copied.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Client connections accepted.
    pub accepted: u64,
    /// Sessions closed, per close reason name (`client-eof`, …), every reason listed.
    pub closed: Vec<(&'static str, u64)>,
    /// Sessions the client closed after receiving zero bytes.
    pub zero_byte_closes: u64,
    /// Payload bytes client → Telegram and Telegram → client.
    pub bytes_up: u64,
    /// Payload bytes Telegram → client.
    pub bytes_down: u64,
    /// Hedges started.
    pub hedges: u64,
    /// Background probes started, succeeded, failed.
    pub probes: [u64; 3],
    /// Probes and fills put off by a spent Worker budget.
    pub probes_deferred: u64,
    /// Client handshakes pacing could not spread.
    pub unpaced: u64,
    /// Failures of the outbound proxy itself (unreachable, auth refused, protocol error).
    pub proxy_failures: u64,
    /// Sessions served from a warm pool, and pool fills started.
    pub pool_hits: u64,
    /// Pool fills started.
    pub pool_fills: u64,
    /// Sessions replayed after a silent pooled upstream.
    pub pool_retries: u64,
    /// Times freed memory was given back to the OS after a burst (`mem::trim`).
    pub memory_trims: u64,
    /// Upstream attempts per tier ([`Tier::index`] order): started, won, failed, cancelled.
    pub attempts: [[u64; 4]; Tier::COUNT],
    /// Clients handed to the mask host, per reason (`not-tls`, …), every reason listed.
    pub masked: Vec<(&'static str, u64)>,
    /// Fake-TLS hellos: accepted, replays, stale, accepted unchecked, replay-cache evictions.
    pub tls: [u64; 5],
    /// Frozen sessions per form (`crate::error::Freeze::ALL` order).
    pub frozen: [u64; 3],
}

impl Counters {
    /// A copy of `s`'s counters.
    pub fn from_stats(s: &Stats) -> Counters {
        let mut attempts = [[0; 4]; Tier::COUNT];
        for t in Tier::ALL {
            let i = t.index();
            attempts[i] = [
                s.attempts[i],
                s.attempts_ok[i],
                s.attempts_failed[i],
                s.attempts_cancelled[i],
            ];
        }
        Counters {
            accepted: s.accepted,
            closed: CloseReason::ALL
                .iter()
                .map(|r| (r.name(), s.closed[r.index()]))
                .collect(),
            zero_byte_closes: s.zero_byte_closes,
            bytes_up: s.bytes_up,
            bytes_down: s.bytes_down,
            hedges: s.hedges,
            probes: s.probes,
            probes_deferred: s.probes_deferred,
            unpaced: s.unpaced,
            proxy_failures: s.proxy_failures,
            pool_hits: s.pool_hits,
            pool_fills: s.pool_fills,
            pool_retries: s.pool_retries,
            memory_trims: s.memory_trims,
            attempts,
            masked: MASK_WHY_NAMES.iter().copied().zip(s.masked).collect(),
            tls: [
                s.tls_accepted,
                s.tls_replays,
                s.tls_stale,
                s.tls_unchecked,
                s.tls_replay_evicted,
            ],
            frozen: s.frozen,
        }
    }

    /// Total closed sessions.
    pub fn closed_total(&self) -> u64 {
        self.closed.iter().map(|(_, n)| n).sum()
    }
}

impl Status {
    /// Sessions in the slab that are not relaying over any tier yet.
    pub fn sessions_connecting(&self) -> usize {
        self.sessions_active
            .saturating_sub(self.sessions_per_tier.iter().sum())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::error::Failure;
    use crate::mtproto::dc::DcId;

    /// A status with two routes, one Worker budget and a few counters, for render and metrics
    /// tests.
    pub(crate) fn sample() -> Status {
        let mut s = Stats {
            accepted: 5,
            ..Stats::default()
        };
        s.record_close(CloseReason::ClientEof, true);
        s.record_close(CloseReason::ClientEof, false);
        s.bytes_up = 1000;
        s.bytes_down = 2000;
        s.probes = [3, 2, 1];
        s.attempts[Tier::Ws.index()] = 4;
        s.attempts_ok[Tier::Ws.index()] = 3;
        s.masked[0] = 1;
        let route = |id, tier, state| RouteStatus {
            id,
            label: format!("{}:DC2 \"x\\y\"@127.0.0.1:443", Tier::name(tier)),
            tier,
            dc: DcId::plain(2),
            state,
            cooldown_left_ms: if state == "down" { 1500 } else { 0 },
            rtt_p95_ms: (state == "up").then_some(41),
            last_failure: (state == "down").then_some((Failure::Http(502), 2500)),
            probe: "idle",
            pool: (1, 0),
            sessions: 7,
            pinned: tier == Tier::Tcp,
            retired: false,
            frozen: if state == "down" { 2 } else { 0 },
            last_freeze: (state == "down").then_some((crate::error::Freeze::NoAck, 16_384, 900)),
        };
        Status {
            version: "0.1.0",
            uptime_ms: 3_723_000,
            listen: "127.0.0.1:1443".parse().unwrap(),
            pin: Some("tier tcp".into()),
            sessions_active: 3,
            sessions_capacity: 100,
            sessions_per_tier: [2, 0, 0, 0, 0, 0, 0],
            sessions_waiting_on_client: 1,
            routes: vec![route(0, Tier::Ws, "up"), route(1, Tier::Tcp, "down")],
            budgets: vec![("w…workers.dev:443".into(), 99_000)],
            accounts: vec![AccountStatus {
                name: "al…".into(),
                workers: vec!["w…workers.dev:443".into()],
                held: Some(("daily-quota", 7_200_000)),
                requests_today: 1_000,
            }],
            fds_used: Some(12),
            fds_limit: Some(1024),
            rss_kib: Some(3000),
            reloads: None,
            counters: Counters::from_stats(&s),
            shared_list: None,
            dns: DnsStatus {
                counters: crate::dns::Counters {
                    queries: 9,
                    answers: 7,
                    ignored: 1,
                    failures: 2,
                },
                doh_fallback: false,
                doh: vec![DohServerStatus {
                    url: "https://127.0.0.1:8443/dns-query".into(),
                    state: "down",
                    queries: 3,
                    answers: 2,
                    failures: 1,
                    last_error: Some(("HTTP 502".into(), 1_500)),
                }],
            },
            tg_ranges: None,
            frozen: vec![(
                FrozenSession {
                    peer: "192.168.1.20:50000".parse().unwrap(),
                    route: 0,
                    freeze: crate::error::Freeze::NoAck,
                    after_bytes: 16_384,
                    at_ms: 1_000,
                },
                900,
            )],
            ways: [
                (Some("127.0.0.1:1443".parse().unwrap()), 2),
                (Some("0.0.0.0:1444".parse().unwrap()), 1),
                (None, 0),
            ],
            dcs: vec![("DC2".into(), 2), ("DC4".into(), 1)],
            unknown_destinations: vec![("149.154.175.99".parse().unwrap(), 3, 1_200)],
            edges: vec![EdgeStatus {
                ip: "104.16.1.2".parse().unwrap(),
                source: "sampled from 104.16.0.0/13".into(),
                state: "frozen",
                why: Some("stalled".into()),
                routes: vec![1],
            }],
            learned_dcs: vec![("149.154.175.77".parse().unwrap(), "DC1".into())],
            telegram: TelegramStatus {
                verdict: "unreachable",
                for_ms: 2_500,
                tried: vec![("tcp", 5, "network-unreachable".into())],
            },
        }
    }

    #[test]
    fn counters_copy_the_stats_and_connecting_is_the_rest() {
        let st = sample();
        let c = &st.counters;
        assert_eq!(c.accepted, 5);
        assert_eq!(c.closed_total(), 2);
        assert_eq!(c.zero_byte_closes, 1);
        assert!(c.closed.contains(&("client-eof", 2)));
        assert_eq!(c.closed.len(), CloseReason::ALL.len());
        assert_eq!(c.attempts[Tier::Ws.index()], [4, 3, 0, 0]);
        assert_eq!(c.masked[0], ("not-tls", 1));
        assert_eq!(st.sessions_connecting(), 1);
    }
}
