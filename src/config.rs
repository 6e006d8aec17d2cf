//! Validated, immutable run configuration and its defaults.
//!
//! `cli` turns argv/env into a [`Config`]; nothing here touches sockets. Derived limits (slab
//! capacity from `RLIMIT_NOFILE`) are computed here so the reactor only reads numbers. The
//! defaults that lower cores apply are here too (route health's knobs in [`health`], the Worker
//! budget, the shared list's URL), so that `config` imports nothing above it. The tier and
//! way-in names live in `config/tier.rs` (re-exported here).

pub mod cf_ip;
pub mod health;
mod tier;

pub use tier::{Tier, WayIn};

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use crate::logging::LogTime;
use crate::mtproto::dc::DcId;
use crate::mtproto::obfs2::Secret;
use crate::net::tls::CipherPref;

/// A Cloudflare endpoint given by the user: a host name (or IP literal) and a port (443 unless
/// a test gives another one).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CfEndpoint {
    /// Normalised host (lower case, no scheme/path/trailing dot).
    pub host: String,
    /// TCP port, 443 by default.
    pub port: u16,
}

/// Default source of Telegram's address ranges (`--tg-ranges-url`): the published cidr.txt
/// (docs/protocol.md §1.9).
pub const DEFAULT_TG_RANGES_URL: &str = "https://core.telegram.org/resources/cidr.txt";

/// The LAN interface redirected when no `--lan-iface` is given: OpenWrt's LAN bridge.
pub const DEFAULT_LAN_IFACE: &str = "br-lan";

/// Everything `run` needs, validated. Durations are wall-clock spans on the monotonic clock.
/// Each field names the flag that sets it; flag names, ranges and the defaults users see are
/// declared in `cli`'s option table, whose tests check those defaults against
/// [`Config::with_secrets`].
#[derive(Clone, Debug)]
pub struct Config {
    /// Listen address (`--host`, `--port`); default `127.0.0.1:1443`. Port 0 picks a free port.
    pub listen: SocketAddr,
    /// Accepted client secrets (`--secret a,b`, `--secret-file`, `TG_SECRET`), at least one.
    pub secrets: Vec<Secret>,
    /// WS-tier target per DC number (`--dc-ip DC:IP[:PORT]`, port default 443).
    /// Default: [`default_ws_addrs`] (docs/protocol.md §3.4).
    pub ws_addrs: BTreeMap<u16, SocketAddr>,
    /// TCP-tier target overrides per DC number (`--tcp-dc-ip DC:IP[:PORT]`); DCs not listed use
    /// the built-in table (`mtproto::dc`) on port 443.
    pub tcp_addrs: BTreeMap<u16, SocketAddr>,
    /// Exact destination address → DC entries for direct-transport clients (`--dc-addr IP=DC`,
    /// DC in the init's signed form, docs/protocol.md §1.4), added to the built-in table
    /// (`route::dc_table`) and winning over it; IPv4-mapped IPv6 addresses stored as IPv4.
    pub dc_addrs: BTreeMap<IpAddr, DcId>,
    /// Transparent-mode listener (`--transparent HOST:PORT`, off by default): LAN TCP to
    /// Telegram's ranges redirected here by our nftables table; the original destination is
    /// read with `SO_ORIGINAL_DST` (docs/protocol.md §1.9).
    pub transparent: Option<SocketAddr>,
    /// Telegram's address ranges for the transparent guard and the firewall sets
    /// (`--tg-ranges FILE`, cidr.txt format); `None` = the cache if it parses, else built in.
    pub tg_ranges_file: Option<PathBuf>,
    /// Where the proxy refreshes the ranges from while `--transparent` is set
    /// (`--tg-ranges-url`, `off` = never; default cidr.txt on core.telegram.org).
    pub tg_ranges_url: Option<String>,
    /// How often the ranges are refreshed (`--tg-ranges-refresh`, 24 h).
    pub tg_ranges_refresh: Duration,
    /// Where the last good refreshed list is kept (`--tg-ranges-cache FILE`, none).
    pub tg_ranges_cache: Option<PathBuf>,
    /// First wait after a failed or refused refresh (`--tg-ranges-retry`, 60 s); doubles per
    /// failure in a row up to `tg_ranges_refresh`.
    pub tg_ranges_retry: Duration,
    /// Bound on one range fetch and on the `nft` run after it (`--tg-ranges-timeout`, 10 s).
    pub tg_ranges_timeout: Duration,
    /// The `nft` binary of the `firewall` applet and the range refresh (`--nft`, `nft` from
    /// `PATH`).
    pub nft: PathBuf,
    /// LAN interfaces whose TCP to Telegram is redirected (`--lan-iface`); empty = `br-lan`
    /// ([`Config::lan_ifaces`]).
    pub lan_ifaces: Vec<String>,
    /// LAN hosts or prefixes never redirected (`--transparent-skip ADDR[/LEN]`).
    pub transparent_skip: Vec<(IpAddr, u8)>,
    /// SOCKS5 listener (`--socks5 HOST:PORT`, off by default; RFC 1928 CONNECT to Telegram DC
    /// addresses only).
    pub socks5: Option<SocketAddr>,
    /// `user:password` lines required of SOCKS5 clients (`--socks5-auth FILE`, RFC 1929); `None`
    /// = method 00 (no authentication).
    pub socks5_auth: Option<PathBuf>,
    /// Allow `--socks5` on an address that is neither loopback nor private
    /// (`--socks5-public`).
    pub socks5_public: bool,
    /// The users read from `--socks5-auth` (by `cli` at start and at each reload); `None`
    /// without the flag.
    pub socks5_users: Option<crate::net::socks5_server::Users>,
    /// Ordered tiers to try (`--tier-order`, default every tier:
    /// `ws,front,worker,cfproxy,mtproto,cfproxy-ws,tcp`).
    pub tier_order: Vec<Tier>,
    /// Ordered tiers for media DCs (`--media-tier-order`); `None` = the same as `tier_order`.
    /// Media downloads are the heavy traffic: a router owner may send them down another tier
    /// (a Worker's quota, a CF domain's throttling) than the control traffic.
    pub media_tier_order: Option<Vec<Tier>>,
    /// Bound on TCP connect + TLS + WS upgrade for one `ws` attempt (`--ws-connect-timeout`, 10 s).
    pub ws_connect_timeout: Duration,
    /// Bound on a `tcp` tier connect (`--tcp-connect-timeout`, 10 s).
    pub tcp_connect_timeout: Duration,
    /// Total deadline for a client's 64-byte init, PROXY header and fake-TLS hello included
    /// (`--handshake-timeout`, 10 s).
    pub handshake_timeout: Duration,
    /// Close a session with no payload either way for this long (`--idle-timeout`, 600 s).
    pub idle_timeout: Duration,
    /// How long a rejected client is drained before close (`--bad-client-drain`, 2 s).
    pub bad_client_drain: Duration,
    /// Slab capacity: concurrent client sessions (`--max-connections`, default from RLIMIT_NOFILE).
    pub max_connections: usize,
    /// Per relay buffer size in bytes (`--buf-kb`, default 16 KiB): the buffer pool's block size
    /// (up to two per session, only while data waits); the shared scratch is 4 × this. Also the
    /// bound of a pooled upstream's replayable request (one block of a separate replay pool).
    pub buf_size: usize,
    /// After a burst of sessions ended, give freed memory back to the OS this much later
    /// (`--mem-trim-delay`, 10 s; 0 = never; `mem::trim`).
    pub mem_trim_delay: Duration,
    /// Extra trust anchors in PEM (`--ca-file`), added to the bundled web PKI roots.
    pub ca_file: Option<PathBuf>,
    /// Skip certificate verification (`--danger-accept-invalid-certs`); logged as a warning.
    pub accept_invalid_certs: bool,
    /// Which TLS cipher family the client offers first (`--tls-cipher`, `auto`: AES-GCM if the
    /// CPU has AES instructions, else ChaCha20-Poly1305).
    pub tls_cipher: CipherPref,
    /// Interval of the periodic stats line (`--stats-interval`, 300 s; 0 disables).
    pub stats_interval: Duration,
    /// Cloudflare Workers (`--cf-worker-domain`, repeatable), in order.
    pub worker_domains: Vec<CfEndpoint>,
    /// The account groups named with `--cf-worker-domain NAME@GROUP` (`route::quota`): a
    /// Worker without an entry is grouped by its `workers.dev` account label, else alone.
    pub worker_groups: Vec<(CfEndpoint, String)>,
    /// Cloudflare-proxied domains (`--cf-domain`, repeatable): `kwsN.<domain>`.
    pub cf_domains: Vec<CfEndpoint>,
    /// The `cfproxy-ws` tier is on (`--cfproxy-ws`, off): the cfproxy names also over plain
    /// `ws://` to [`Config::cf_ws_port`], after the TLS tiers.
    pub cfproxy_ws: bool,
    /// TCP port of the `cfproxy-ws` tier (`--cf-ws-port`, 80; Cloudflare proxies plain HTTP on
    /// 80, 8080, 8880, 2052, 2082, 2086 and 2095).
    pub cf_ws_port: u16,
    /// Cloudflare edge addresses and ranges the Worker and cfproxy routes dial instead of
    /// their name's DNS answer (`--cf-ip`, repeatable; `config::cf_ip`, `route::edges`). Empty: DNS.
    pub cf_ips: Vec<cf_ip::CfIp>,
    /// Edges sampled from the `--cf-ip` ranges at once (`--cf-ip-count`, 3; at most
    /// [`cf_ip::MAX_EDGES`] edges in all).
    pub cf_ip_count: usize,
    /// Bound on one worker/cfproxy attempt (`--cf-connect-timeout`, 10 s).
    pub cf_connect_timeout: Duration,
    /// Start the next route in parallel if the first is not ready by then (`--hedge-delay`,
    /// 250 ms; a route's own 2 × p95 once known).
    pub hedge_delay: Duration,
    /// One handshake per address is earned every `handshake_pace` (`--handshake-pace`, 20 ms;
    /// 0 = off); see `route::pace`.
    pub handshake_pace: Duration,
    /// Handshakes an idle address may start at once (`--handshake-burst`, 8).
    pub handshake_burst: u32,
    /// Longest pacing ever delays a client's handshake (`--pace-max-wait`, 50 ms).
    pub pace_max_wait: Duration,
    /// Probe the production DCs' routes once at start (`--startup-probes`, on).
    pub startup_probes: bool,
    /// Bound on a client's whole connect phase (`--connect-budget`, 3 s).
    pub connect_budget: Duration,
    /// Route health policy (`--cooldown-base`, `--cooldown-max`, `--flap-quarantine`,
    /// `--redirect-ttl`).
    pub health: health::Policy,
    /// Liveness probe interval for Up routes without recent traffic (`--probe-interval`, 300 s).
    pub probe_interval: Duration,
    /// Bound on one background probe (`--probe-timeout`, 5 s).
    pub probe_timeout: Duration,
    /// Probe + pool requests per day allowed toward each Worker (`--worker-budget`, 5000).
    pub worker_budget: u32,
    /// Most warm upstreams per hot route, sized by demand (`--pool-size`, 4; Workers at most 1;
    /// 0 disables).
    pub pool_size: usize,
    /// Pooled upstreams are dropped after this age (`--pool-max-age`, 50 s: Telegram's front
    /// closes idle WebSockets after about 60 s).
    pub pool_max_age: Duration,
    /// Bound on the wait for a pooled upstream's first byte, counted from the client's first
    /// bytes written to it (`--pool-first-byte-timeout`, 2 s; 0 = never): past it the upstream is
    /// taken for dead and the client's request is replayed on a fresh route, once (a request
    /// too large to replay is closed instead, counted from the last bytes the upstream took).
    pub pool_first_byte_timeout: Duration,
    /// WS ping interval of idle sessions toward Telegram's front, directly (ws) or through a
    /// Cloudflare-proxied domain (cfproxy), which passes pings on to it
    /// (`--ws-ping-interval`, 0 = never, the default: that front reportedly closes on them).
    pub ws_ping_interval: Duration,
    /// WS ping interval of idle sessions toward a Worker, where the ping ends at Cloudflare's
    /// edge (`--cf-ping-interval`, 30 s; 0 = never).
    pub cf_ping_interval: Duration,
    /// How long a route stays unpinged after a session the upstream ended right after our WS
    /// ping (`--pings-off-for`, 1 h; docs/design.md §5 keepalive). Not for good: one coincidental
    /// close (an edge restart cutting every session, one just pinged) would otherwise cost a
    /// router that runs for months its Worker keepalive; a front that really closes on pings is
    /// learned again at the price of one session per expiry.
    pub pings_off_for: Duration,
    /// TCP keepalive idle time on every socket (`--tcp-keepalive`, 60 s; 0 = off).
    pub tcp_keepalive: Duration,
    /// How long a session may keep flushing after one side closed (`--close-linger`, 2 s).
    pub close_linger: Duration,
    /// Hosts file read by the resolver (`--hosts-file`, /etc/hosts).
    pub hosts_file: PathBuf,
    /// Resolver configuration (`--resolv-conf`, /etc/resolv.conf).
    pub resolv_conf: PathBuf,
    /// DNS-over-HTTPS resolvers for our own lookups (`--doh`, repeatable; none by default):
    /// `https://HOST[:PORT]/PATH` URLs as `cli::values::parse_doh_url` normalised them (so
    /// `route::cflist::parse_url` takes each), tried in order (docs/design.md §6).
    pub doh: Vec<String>,
    /// With `doh` set, ask the plain nameservers once every DoH server failed
    /// (`--doh-fallback`, off).
    pub doh_fallback: bool,
    /// Bound on one DoH query to one server (`--doh-timeout`, 5 s).
    pub doh_timeout: Duration,
    /// Most verbose level logged (`-q` → Warn, default Info, `-v` → Debug, `-v -v` → Trace).
    pub log_level: log::LevelFilter,
    /// Whether stderr lines carry the UTC time stamp (`--log-time auto|on|off`, auto: only on
    /// a terminal, since logd and journald stamp lines themselves). The log file always does.
    pub log_time: LogTime,
    /// Append log lines to this file instead of stderr (`--log-file`); `None` = stderr.
    pub log_file: Option<PathBuf>,
    /// Size cap of `log_file` in bytes before its one rotation to `PATH.1` (`--log-max-kb`,
    /// default 1024 KiB).
    pub log_max_bytes: u64,
    /// A repeatable line (per-client warnings per call site, attempt failures per tier and
    /// class, close lines of sessions that never reached an upstream per reason, descriptor
    /// exhaustion on accept) is written at most once per this, with the count of the ones
    /// folded since (`--log-fold-interval`, 6 s: at most 10 lines a minute per kind; 0 = every
    /// line).
    pub log_fold_interval: Duration,
    /// Host (IP address or DNS name) put in printed links (`--link-ip`); `None` = detect.
    pub link_ip: Option<String>,
    /// An upstream close this soon after a session started, after a reply of
    /// `route::ladder::SHORT_REPLY_MIN..=SHORT_REPLY_MAX` bytes, is a short session (`--short-session`, 3 s;
    /// docs/design.md §4 rule 6).
    pub short_session: Duration,
    /// The application-level freeze bound (`--stall-timeout`, 8 s; 0 = never; docs/design.md
    /// §4 rule 7): nothing down for this long inside a reply, or after the client's latest of
    /// two sends (twice this since the first of them for re-asks) ends the session as frozen.
    pub stall_timeout: Duration,
    /// The kernel-level freeze bound (`--stall-ack-timeout`, 5 s; 0 = never): something of
    /// ours in flight to the upstream and no ACK for this long while the client waits.
    pub stall_ack_timeout: Duration,
    /// A client that closes after waiting this long inside a reply counts as a frozen session
    /// (`--stall-give-up`, 2 s; 0 = never).
    pub stall_give_up: Duration,
    /// Two frozen sessions on one route within this window put it down as `stalled`
    /// (`--stall-window`, 120 s).
    pub stall_window: Duration,
    /// Bytes a probe of a route whose last failure was `stalled` must pull down
    /// (`--stall-probe-bytes`, 32 KiB: more than the ~16–20 KB a freeze lets through).
    pub stall_probe_bytes: u32,
    /// Where a client that is not ours is relayed (`--mask-host HOST[:PORT]`, port 443);
    /// `None` = the matched `ee` secret's domain (by SNI), else the first `ee` secret's, on 443.
    pub mask_host: Option<(String, u16)>,
    /// Close a client that is not ours instead of masking it (`--no-mask`, off).
    pub no_mask: bool,
    /// Bound on the TCP connect to the mask host (`--mask-connect-timeout`, 5 s).
    pub mask_connect_timeout: Duration,
    /// Close a masked session with no byte either way for this long (`--mask-idle-timeout`, 60 s).
    pub mask_idle_timeout: Duration,
    /// Require a PROXY protocol v1 or v2 header before the client's bytes (`--proxy-protocol`,
    /// off); its address replaces the peer's for logs and per-client limits.
    pub proxy_protocol: bool,
    /// Concurrent sessions per client address, IPv6 per /64 (`--max-per-ip`, 128; 0 = no cap).
    pub max_per_ip: usize,
    /// New connections per second one client address earns (`--per-ip-rate`, 20; 0 = off).
    pub per_ip_rate: u32,
    /// New connections an idle client address may open at once (`--per-ip-burst`, 64).
    pub per_ip_burst: u32,
    /// Connections over `max_per_ip` or the rate that are handled like clients that are not
    /// ours (masked) at once, over every address together, while an `ee` secret is configured
    /// (`--per-ip-mask`, 64; 0 = every one closed at once); past it they are closed.
    pub per_ip_mask: u32,
    /// A fake-TLS ClientHello whose timestamp is further than this from the wall clock is
    /// refused as stale, once the clock is trusted (`--tls-time-window`, 120 s; 0 = timestamps
    /// never checked; `mtproto::faketls::clock` has the trust rule).
    pub tls_time_window: Duration,
    /// Entries of the fake-TLS anti-replay cache of accepted client randoms
    /// (`--replay-cache`, 8192; 0 = off, which lets a recorded hello be replayed).
    pub replay_cache: usize,
    /// On SIGTERM/SIGINT, let open sessions finish for at most this long after accepting stops
    /// and the final stats line is written, then exit (`--drain-timeout`, 5 s; 0 = exit at once).
    pub drain_timeout: Duration,
    /// Unix socket for `tg-ws-proxy ctl` (`--control-socket PATH`, mode 0600); `None` = off.
    pub control_socket: Option<PathBuf>,
    /// While the listen address cannot be bound (not assigned yet at boot, `EADDRNOTAVAIL`),
    /// keep running and retry the bind this often (`--bind-retry`, 0 = exit with an error at
    /// once, as before).
    pub bind_retry: Duration,
    /// Time a control-socket client has to send its request and take the reply, after which
    /// the connection is closed (`--control-timeout`, 2 s; never 0).
    pub control_timeout: Duration,
    /// Upstream MTProto proxies (`--mtproto-proxy HOST:PORT:SECRET`, repeatable), in order: the
    /// `mtproto` tier's routes.
    pub mtproto_proxies: Vec<crate::mtproto::upstream::MtprotoProxy>,
    /// The ClientHello the `mtproto` tier's `ee` hops send (`--mtproto-hello`, `classic`):
    /// Chrome's without the post-quantum share (517 bytes, every server takes it) or Chrome's
    /// as shipped (`chrome`, ~1.7 KB; the official MTProxy refuses it; docs/protocol.md §2.6).
    pub mtproto_hello: crate::mtproto::faketls::client::Shape,
    /// Every upstream TCP connection (all tiers, probes, pool fills, list fetches) goes through
    /// this proxy (`--outbound-proxy`); `None` = direct.
    pub outbound_proxy: Option<crate::net::outbound::OutboundProxy>,
    /// Destinations reached directly despite `--outbound-proxy` (`--no-outbound-proxy-for`).
    pub no_outbound_proxy_for: Vec<String>,
    /// While the outbound proxy is down, the first wait before a dial re-checks it
    /// (`--outbound-proxy-backoff`, 500 ms); doubled per re-check (`route::outproxy`).
    pub outbound_proxy_backoff: Duration,
    /// Cap of that doubling (`--outbound-proxy-backoff-max`, 1.5 s; at least the base): a
    /// proxy that comes back is found within it.
    pub outbound_proxy_backoff_max: Duration,
    /// Names put in the TLS SNI of the `front` tier (`--fronting-domain`, repeatable).
    pub fronting_domains: Vec<String>,
    /// Where the shared Cloudflare domain list comes from (`--cf-domain-list URL|FILE`, checked
    /// by `route::cflist::parse_source`); `None` = off (`--cf-domain-list off`). Default: the
    /// original's published list, [`DEFAULT_CF_DOMAIN_LIST`].
    pub cf_domain_list: Option<String>,
    /// Refresh interval of the shared list after a success (`--cf-domain-list-refresh`, 1 h,
    /// jittered ± 20 %).
    pub cf_domain_list_refresh: Duration,
    /// First wait after a failed fetch (`--cf-domain-list-retry`, 60 s; doubles per failure in
    /// a row, up to the refresh interval).
    pub cf_domain_list_retry: Duration,
    /// Bound on one whole fetch: DNS, TCP, TLS, request, response, redirects
    /// (`--cf-domain-list-timeout`, 10 s).
    pub cf_domain_list_timeout: Duration,
    /// TCP port the shared list's domains are dialled on (`--cf-domain-list-port`, 443).
    pub cf_domain_list_port: u16,
    /// The last accepted shared list, kept on disk (`--cf-domain-cache FILE`); `None` = none.
    pub cf_domain_cache: Option<PathBuf>,
    /// The shared list's domains in use: not a flag, filled at run time from the list (or its
    /// cache); tried after `cf_domains`.
    pub cf_shared_domains: Vec<CfEndpoint>,
}

/// Default listen port, as in the other implementations.
pub const DEFAULT_PORT: u16 = 1443;

/// Default `--log-max-kb`: the log file is rotated once it would exceed 1 MiB.
pub const DEFAULT_LOG_MAX_KB: u64 = 1024;

/// Default `--worker-budget`: background requests per day to one Worker (well under its ~100k/day
/// quota; the bucket is `route::budget`'s).
pub const DEFAULT_WORKER_PER_DAY: u32 = 5_000;

/// Default `--cf-domain-list`: the list the original implementation publishes.
pub const DEFAULT_CF_DOMAIN_LIST: &str =
    "https://raw.githubusercontent.com/Flowseal/tg-ws-proxy/main/.github/cfproxy-domains.txt";

impl Config {
    /// The listen address of `way`, if that way in is configured (`--host`/`--port`,
    /// `--transparent`, `--socks5`).
    pub fn listen_of(&self, way: WayIn) -> Option<SocketAddr> {
        match way {
            WayIn::Proxy => Some(self.listen),
            WayIn::Transparent => self.transparent,
            WayIn::Socks5 => self.socks5,
        }
    }

    /// The account group named for Worker `ep` with `--cf-worker-domain NAME@GROUP`, if any
    /// (`route::quota::account_of` decides the rest).
    pub fn worker_group(&self, ep: &CfEndpoint) -> Option<&str> {
        self.worker_groups
            .iter()
            .rev()
            .find(|(e, _)| e == ep)
            .map(|(_, g)| g.as_str())
    }

    /// The tiers a session of `dc` tries, in order: `--media-tier-order` for a media DC when it
    /// is set, else `--tier-order`.
    pub fn tier_order_for(&self, dc: DcId) -> &[Tier] {
        match &self.media_tier_order {
            Some(order) if dc.media => order,
            _ => &self.tier_order,
        }
    }

    /// The LAN interfaces our firewall table redirects: `--lan-iface`, or `br-lan` (OpenWrt's
    /// LAN bridge) when none is given.
    pub fn lan_ifaces(&self) -> Vec<String> {
        if self.lan_ifaces.is_empty() {
            vec![DEFAULT_LAN_IFACE.to_string()]
        } else {
            self.lan_ifaces.clone()
        }
    }

    /// Bound on one dial (TCP + TLS + upgrade) of a route of `tier`: `--ws-connect-timeout`,
    /// `--cf-connect-timeout` (worker, cfproxy, cfproxy-ws) or `--tcp-connect-timeout`.
    pub fn attempt_timeout(&self, tier: Tier) -> Duration {
        match tier {
            Tier::Ws | Tier::Front => self.ws_connect_timeout,
            Tier::Worker | Tier::CfProxy | Tier::CfProxyWs => self.cf_connect_timeout,
            Tier::Mtproto | Tier::Tcp => self.tcp_connect_timeout,
        }
    }

    /// True if `tier` has anything to try: its flags are set (`ws` and `tcp` always are). The
    /// startup line, `ctl pin` and `check` skip tiers that are not.
    pub fn tier_configured(&self, tier: Tier) -> bool {
        match tier {
            Tier::Ws | Tier::Tcp => true,
            Tier::Front => !self.fronting_domains.is_empty(),
            Tier::Worker => !self.worker_domains.is_empty(),
            Tier::CfProxy => !self.cf_domains.is_empty() || !self.cf_shared_domains.is_empty(),
            Tier::CfProxyWs => self.cfproxy_ws && self.tier_configured(Tier::CfProxy),
            Tier::Mtproto => !self.mtproto_proxies.is_empty(),
        }
    }

    /// A config with every default and the given secrets: the shape `cli` starts from.
    pub fn with_secrets(secrets: Vec<Secret>) -> Config {
        Config {
            listen: SocketAddr::from(([127, 0, 0, 1], DEFAULT_PORT)),
            secrets,
            ws_addrs: default_ws_addrs(),
            tcp_addrs: BTreeMap::new(),
            dc_addrs: BTreeMap::new(),
            transparent: None,
            tg_ranges_file: None,
            tg_ranges_url: Some(DEFAULT_TG_RANGES_URL.to_string()),
            tg_ranges_refresh: Duration::from_secs(24 * 3600),
            tg_ranges_cache: None,
            tg_ranges_retry: Duration::from_secs(60),
            tg_ranges_timeout: Duration::from_secs(10),
            nft: PathBuf::from("nft"),
            lan_ifaces: Vec::new(),
            transparent_skip: Vec::new(),
            socks5: None,
            socks5_auth: None,
            socks5_public: false,
            socks5_users: None,
            tier_order: Tier::ALL.to_vec(),
            media_tier_order: None,
            ws_connect_timeout: Duration::from_secs(10),
            tcp_connect_timeout: Duration::from_secs(10),
            handshake_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(600),
            bad_client_drain: Duration::from_secs(2),
            max_connections: default_max_connections(nofile_limit()),
            buf_size: 16 * 1024,
            mem_trim_delay: Duration::from_secs(10),
            ca_file: None,
            accept_invalid_certs: false,
            tls_cipher: CipherPref::Auto,
            stats_interval: Duration::from_secs(300),
            worker_domains: Vec::new(),
            worker_groups: Vec::new(),
            cf_domains: Vec::new(),
            cfproxy_ws: false,
            cf_ws_port: 80,
            cf_ips: Vec::new(),
            cf_ip_count: cf_ip::DEFAULT_COUNT,
            cf_connect_timeout: Duration::from_secs(10),
            hedge_delay: Duration::from_millis(250),
            connect_budget: Duration::from_secs(3),
            handshake_pace: Duration::from_millis(20),
            handshake_burst: 8,
            pace_max_wait: Duration::from_millis(50),
            startup_probes: true,
            health: health::Policy::default(),
            probe_interval: Duration::from_secs(300),
            probe_timeout: Duration::from_secs(5),
            worker_budget: DEFAULT_WORKER_PER_DAY,
            pool_size: 4,
            pool_max_age: Duration::from_secs(50),
            pool_first_byte_timeout: Duration::from_secs(2),
            ws_ping_interval: Duration::ZERO,
            cf_ping_interval: Duration::from_secs(30),
            pings_off_for: Duration::from_secs(3600),
            tcp_keepalive: Duration::from_secs(60),
            close_linger: Duration::from_secs(2),
            hosts_file: PathBuf::from("/etc/hosts"),
            resolv_conf: PathBuf::from("/etc/resolv.conf"),
            doh: Vec::new(),
            doh_fallback: false,
            doh_timeout: Duration::from_secs(5),
            log_level: log::LevelFilter::Info,
            log_time: LogTime::Auto,
            log_file: None,
            log_fold_interval: Duration::from_secs(6),
            log_max_bytes: DEFAULT_LOG_MAX_KB * 1024,
            link_ip: None,
            short_session: Duration::from_secs(3),
            stall_timeout: Duration::from_secs(8),
            stall_ack_timeout: Duration::from_secs(5),
            stall_give_up: Duration::from_secs(2),
            stall_window: Duration::from_secs(120),
            stall_probe_bytes: 32 * 1024,
            mask_host: None,
            no_mask: false,
            mask_connect_timeout: Duration::from_secs(5),
            mask_idle_timeout: Duration::from_secs(60),
            proxy_protocol: false,
            max_per_ip: 128,
            per_ip_rate: 20,
            per_ip_burst: 64,
            per_ip_mask: 64,
            tls_time_window: Duration::from_secs(120),
            replay_cache: 8192,
            drain_timeout: Duration::from_secs(5),
            control_socket: None,
            bind_retry: Duration::ZERO,
            control_timeout: Duration::from_secs(2),
            mtproto_proxies: Vec::new(),
            mtproto_hello: crate::mtproto::faketls::client::Shape::ChromeClassic,
            outbound_proxy: None,
            no_outbound_proxy_for: Vec::new(),
            outbound_proxy_backoff: Duration::from_millis(500),
            outbound_proxy_backoff_max: Duration::from_millis(1500),
            fronting_domains: Vec::new(),
            cf_domain_list: Some(DEFAULT_CF_DOMAIN_LIST.to_string()),
            cf_domain_list_refresh: Duration::from_secs(3600),
            cf_domain_list_retry: Duration::from_secs(60),
            cf_domain_list_timeout: Duration::from_secs(10),
            cf_domain_list_port: 443,
            cf_domain_cache: None,
            cf_shared_domains: Vec::new(),
        }
    }
}

/// Defines [`Config::changed`] from one list of `field => "setting"`: the pattern that takes
/// `new` apart names every field, so a field added to [`Config`] and not to the list is a
/// compile error (the reload report cannot silently miss it).
macro_rules! settings {
    ($($field:ident => $name:literal,)*) => {
        impl Config {
            /// The settings that differ between `self` (the running configuration) and `new`,
            /// by the names a reload reports (`reload: applied (…)`: the long flag without
            /// `--`, or the setting several flags share: `listen`, `secrets`, `cooldown`,
            /// `verbose`, `tier-order`), in a fixed order, each once. `cf_shared_domains` is
            /// run-time state, not a setting, and never counts.
            pub fn changed(&self, new: &Config) -> Vec<&'static str> {
                let Config { $($field,)* cf_shared_domains: _ } = new;
                let mut names = Vec::new();
                $(
                    // Two fields may share a setting (the users file's path and content).
                    if self.$field != *$field && !names.contains(&$name) {
                        names.push($name);
                    }
                )*
                names
            }
        }
    };
}

settings! {
    secrets => "secrets",
    listen => "listen",
    tier_order => "tier-order",
    media_tier_order => "media-tier-order",
    ws_addrs => "dc-ip",
    tcp_addrs => "tcp-dc-ip",
    dc_addrs => "dc-addr",
    transparent => "transparent",
    tg_ranges_file => "tg-ranges",
    tg_ranges_url => "tg-ranges-url",
    tg_ranges_refresh => "tg-ranges-refresh",
    tg_ranges_cache => "tg-ranges-cache",
    tg_ranges_retry => "tg-ranges-retry",
    tg_ranges_timeout => "tg-ranges-timeout",
    nft => "nft",
    lan_ifaces => "lan-iface",
    transparent_skip => "transparent-skip",
    socks5 => "socks5",
    socks5_auth => "socks5-auth",
    socks5_public => "socks5-public",
    socks5_users => "socks5-auth",
    worker_domains => "cf-worker-domain",
    worker_groups => "cf-worker-domain",
    cf_domain_list => "cf-domain-list",
    cf_domain_list_refresh => "cf-domain-list-refresh",
    cf_domain_list_retry => "cf-domain-list-retry",
    cf_domain_list_timeout => "cf-domain-list-timeout",
    cf_domain_list_port => "cf-domain-list-port",
    cf_domain_cache => "cf-domain-cache",
    cf_domains => "cf-domain",
    cfproxy_ws => "cfproxy-ws",
    cf_ws_port => "cf-ws-port",
    cf_ips => "cf-ip",
    cf_ip_count => "cf-ip-count",
    mtproto_proxies => "mtproto-proxy",
    mtproto_hello => "mtproto-hello",
    fronting_domains => "fronting-domain",
    ws_connect_timeout => "ws-connect-timeout",
    tcp_connect_timeout => "tcp-connect-timeout",
    cf_connect_timeout => "cf-connect-timeout",
    handshake_timeout => "handshake-timeout",
    idle_timeout => "idle-timeout",
    bad_client_drain => "bad-client-drain",
    ca_file => "ca-file",
    accept_invalid_certs => "danger-accept-invalid-certs",
    tls_cipher => "tls-cipher",
    stats_interval => "stats-interval",
    mem_trim_delay => "mem-trim-delay",
    hedge_delay => "hedge-delay",
    handshake_pace => "handshake-pace",
    handshake_burst => "handshake-burst",
    pace_max_wait => "pace-max-wait",
    startup_probes => "startup-probes",
    connect_budget => "connect-budget",
    health => "cooldown",
    probe_interval => "probe-interval",
    probe_timeout => "probe-timeout",
    worker_budget => "worker-budget",
    pool_size => "pool-size",
    pool_max_age => "pool-max-age",
    pool_first_byte_timeout => "pool-first-byte-timeout",
    ws_ping_interval => "ws-ping-interval",
    cf_ping_interval => "cf-ping-interval",
    pings_off_for => "pings-off-for",
    tcp_keepalive => "tcp-keepalive",
    close_linger => "close-linger",
    log_level => "verbose",
    log_time => "log-time",
    link_ip => "link-ip",
    short_session => "short-session",
    stall_timeout => "stall-timeout",
    stall_ack_timeout => "stall-ack-timeout",
    stall_give_up => "stall-give-up",
    stall_window => "stall-window",
    stall_probe_bytes => "stall-probe-bytes",
    mask_host => "mask-host",
    no_mask => "no-mask",
    mask_connect_timeout => "mask-connect-timeout",
    mask_idle_timeout => "mask-idle-timeout",
    proxy_protocol => "proxy-protocol",
    max_per_ip => "max-per-ip",
    per_ip_rate => "per-ip-rate",
    per_ip_burst => "per-ip-burst",
    per_ip_mask => "per-ip-mask",
    tls_time_window => "tls-time-window",
    replay_cache => "replay-cache",
    drain_timeout => "drain-timeout",
    bind_retry => "bind-retry",
    control_timeout => "control-timeout",
    outbound_proxy => "outbound-proxy",
    no_outbound_proxy_for => "no-outbound-proxy-for",
    outbound_proxy_backoff => "outbound-proxy-backoff",
    outbound_proxy_backoff_max => "outbound-proxy-backoff-max",
    log_fold_interval => "log-fold-interval",
    max_connections => "max-connections",
    buf_size => "buf-kb",
    log_file => "log-file",
    log_max_bytes => "log-max-kb",
    control_socket => "control-socket",
    hosts_file => "hosts-file",
    resolv_conf => "resolv-conf",
    doh => "doh",
    doh_fallback => "doh-fallback",
    doh_timeout => "doh-timeout",
}

/// The default WS fronts (`--dc-ip`): DC 2 and DC 4 → 149.154.167.220:443.
pub fn default_ws_addrs() -> BTreeMap<u16, SocketAddr> {
    let front = SocketAddr::from(([149, 154, 167, 220], 443));
    BTreeMap::from([(2, front), (4, front)])
}

/// Soft `RLIMIT_NOFILE` read from `/proc/self/limits` (no libc needed); `None` if unknown or
/// unlimited.
pub fn nofile_limit() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = text.lines().find(|l| l.starts_with("Max open files"))?;
    let soft = line.split_whitespace().nth(3)?;
    soft.parse().ok()
}

/// Sessions that fit in `nofile` descriptors: each session holds a client socket plus up to two
/// upstream sockets while connecting; 32 are kept for the listener, poll, logs and spares.
/// Unknown limit → 512; never below 4.
pub fn default_max_connections(nofile: Option<u64>) -> usize {
    match nofile {
        None => 512,
        Some(n) => ((n.saturating_sub(32)) / 3).clamp(4, 65_536) as usize,
    }
}
