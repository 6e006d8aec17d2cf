//! The second half of the option table: the flags of the `Ladder`, `Clients` and `Logging`
//! sections of `run --help`, in table order ([`LADDER_CLIENTS_LOGGING`]); `table` joins it
//! after the first half into `RUN_OPTIONS`. Same rules as `table`: one entry per flag.

use std::net::IpAddr;

use super::opt::MAX_CONNECTIONS_LIMIT;
use super::opt::{duration, positive, positive_ms, tls_window, Group, Kind, Opt, Reload};
use super::values::{
    parse_bool, parse_cf_endpoint, parse_doh_url, parse_iface, parse_in_range, parse_ip,
    parse_link_host, parse_listen_addr, parse_prefix, parse_url_or_off,
};
use crate::mtproto::dc::DcId;
use crate::route::dc_table::normalise;

use Group::{Clients, Ladder, Listen, Logging};
use Kind::{Count, List, Path, Switch, Value};
use Reload::{Live, Restart};

/// The `run` flags after the upstream ones, in table order.
#[rustfmt::skip]
pub(super) const LADDER_CLIENTS_LOGGING: &[Opt] = &[
    // Ladder.
    Opt {
        reload: Live, long: "--hedge-delay", short: None, aliases: &[], env: &["TG_HEDGE_DELAY"],
        meta: "D", default: "250ms", group: Ladder,
        help: "start the next route in parallel if the first is not ready by then; a route's \
               2 x p95 once known (2 x its slowest sample before that)",
        kind: Value(|d, s| positive(s).map(|v| d.config.hedge_delay = v)),
    },
    Opt {
        reload: Live, long: "--connect-budget", short: None, aliases: &[], env: &["TG_CONNECT_BUDGET"],
        meta: "D", default: "3s", group: Ladder,
        help: "bound on a client's whole connect phase; past it the client is closed so it \
               reconnects",
        kind: Value(|d, s| positive(s).map(|v| d.config.connect_budget = v)),
    },
    Opt {
        reload: Live, long: "--handshake-pace", short: None, aliases: &[], env: &["TG_HANDSHAKE_PACE"],
        meta: "D", default: "20ms", group: Ladder,
        help: "one handshake per address is earned every D (a burst of --handshake-burst \
               starts at once), 0 = off",
        kind: Value(|d, s| duration(s).map(|v| d.config.handshake_pace = v)),
    },
    Opt {
        reload: Live, long: "--handshake-burst", short: None, aliases: &[], env: &["TG_HANDSHAKE_BURST"],
        meta: "N", default: "8", group: Ladder,
        help: "handshakes an idle address may start at once, 1-1000; background work leaves \
               half of them to clients",
        kind: Value(|d, s| {
            parse_in_range(s, 1, 1_000).map(|n| d.config.handshake_burst = n as u32)
        }),
    },
    Opt {
        reload: Live, long: "--pace-max-wait", short: None, aliases: &[], env: &["TG_PACE_MAX_WAIT"],
        meta: "D", default: "50ms", group: Ladder,
        help: "longest pacing ever delays a client's handshake",
        kind: Value(|d, s| duration(s).map(|v| d.config.pace_max_wait = v)),
    },
    Opt {
        reload: Live, long: "--startup-probes", short: None, aliases: &[], env: &["TG_STARTUP_PROBES"],
        meta: "on|off", default: "on", group: Ladder,
        help: "probe the routes of DCs 1-5 once at start (paced, within the budgets), so the \
               first client finds a proven route",
        kind: Value(|d, s| parse_bool(s).map(|v| d.config.startup_probes = v)),
    },
    Opt {
        reload: Live, long: "--cooldown-base", short: None, aliases: &["--ip-fail-cooldown"],
        env: &["TG_COOLDOWN_BASE", "TG_IP_FAIL_COOLDOWN"], meta: "D", default: "10s",
        group: Ladder,
        help: "first cooldown of a failed route, doubled per failure, +-20% jitter",
        kind: Value(|d, s| positive_ms(s).map(|v| d.config.health.base_ms = v)),
    },
    Opt {
        reload: Live, long: "--cooldown-max", short: None, aliases: &[], env: &["TG_COOLDOWN_MAX"],
        meta: "D", default: "600s", group: Ladder,
        help: "cap of the doubling before the +-20% jitter (at least --cooldown-base)",
        kind: Value(|d, s| positive_ms(s).map(|v| d.config.health.max_ms = v)),
    },
    Opt {
        reload: Live, long: "--flap-quarantine", short: None, aliases: &[], env: &["TG_FLAP_QUARANTINE"],
        meta: "D", default: "1800s", group: Ladder,
        help: "minimum cooldown of a route that went down 3 times in 10 min",
        kind: Value(|d, s| positive_ms(s).map(|v| d.config.health.quarantine_ms = v)),
    },
    Opt {
        reload: Live, long: "--redirect-ttl", short: None, aliases: &["--ws-redirect-cooldown"],
        env: &["TG_REDIRECT_TTL", "TG_WS_REDIRECT_COOLDOWN"], meta: "D", default: "3600s",
        group: Ladder,
        help: "how long a 30x from a WS front keeps its route down",
        kind: Value(|d, s| positive_ms(s).map(|v| d.config.health.redirect_ttl_ms = v)),
    },
    Opt {
        reload: Live, long: "--probe-interval", short: None, aliases: &[], env: &["TG_PROBE_INTERVAL"],
        meta: "D", default: "300s", group: Ladder,
        help: "liveness probe of an Up route that clients have dialled, when it carried no \
               traffic for D",
        kind: Value(|d, s| positive(s).map(|v| d.config.probe_interval = v)),
    },
    Opt {
        reload: Live, long: "--probe-timeout", short: None, aliases: &[], env: &["TG_PROBE_TIMEOUT"],
        meta: "D", default: "5s", group: Ladder,
        help: "bound on one background probe",
        kind: Value(|d, s| positive(s).map(|v| d.config.probe_timeout = v)),
    },
    Opt {
        reload: Live, long: "--worker-budget", short: None, aliases: &[], env: &["TG_WORKER_BUDGET"],
        meta: "N", default: "5000", group: Ladder,
        help: "probe + pool requests per day per Worker, 1-100000",
        kind: Value(|d, s| {
            parse_in_range(s, 1, 100_000).map(|n| d.config.worker_budget = n as u32)
        }),
    },
    Opt {
        reload: Live, long: "--pool-size", short: None, aliases: &[], env: &["TG_POOL_SIZE"],
        meta: "N", default: "4", group: Ladder,
        help: "most warm upstreams (TLS + upgrade done) per hot route, 0-16: as many as sessions \
               started there in the last --pool-max-age, at least 1; 0 = no pools; Workers at \
               most 1, none for tcp",
        kind: Value(|d, s| parse_in_range(s, 0, 16).map(|n| d.config.pool_size = n as usize)),
    },
    Opt {
        reload: Live, long: "--pool-max-age", short: None, aliases: &[], env: &["TG_POOL_MAX_AGE"],
        meta: "D", default: "50s", group: Ladder,
        help: "drop a warm upstream after D, before the front's idle close",
        kind: Value(|d, s| positive(s).map(|v| d.config.pool_max_age = v)),
    },
    Opt {
        reload: Live, long: "--pool-first-byte-timeout", short: None, aliases: &[],
        env: &["TG_POOL_FIRST_BYTE_TIMEOUT"],
        meta: "D", default: "2s", group: Ladder,
        help: "a pooled upstream that sends nothing for D after the client's first bytes is \
               taken for dead (a NAT flush leaves no RST): the client's request (up to one \
               --buf-kb) is replayed once on a freshly dialled route, a larger one is closed D \
               after the last bytes the upstream took; 2s is several slow round trips, well under a client's patience; 0 = never",
        kind: Value(|d, s| duration(s).map(|v| d.config.pool_first_byte_timeout = v)),
    },
    Opt {
        reload: Live, long: "--ws-ping-interval", short: None, aliases: &[], env: &["TG_WS_PING_INTERVAL"],
        meta: "D", default: "0", group: Ladder,
        help: "WS ping of a session idle for D toward Telegram's front, directly (ws) or \
               through a Cloudflare-proxied domain (cfproxy, which passes it on); 0 = never: \
               that front reportedly closes on client pings",
        kind: Value(|d, s| duration(s).map(|v| d.config.ws_ping_interval = v)),
    },
    Opt {
        reload: Live, long: "--cf-ping-interval", short: None, aliases: &[], env: &["TG_CF_PING_INTERVAL"],
        meta: "D", default: "30s", group: Ladder,
        help: "WS ping of a session idle for D toward a Worker (it ends at Cloudflare's edge, \
               which closes WS idle for ~100 s); 0 = never. A route whose sessions end right \
               after a ping is not pinged for --pings-off-for",
        kind: Value(|d, s| duration(s).map(|v| d.config.cf_ping_interval = v)),
    },
    Opt {
        reload: Live, long: "--pings-off-for", short: None, aliases: &[], env: &["TG_PINGS_OFF_FOR"],
        meta: "D", default: "1h", group: Ladder,
        help: "a route whose session the upstream ended right after our WS ping is not pinged \
               for D (then tried again)",
        kind: Value(|d, s| positive(s).map(|v| d.config.pings_off_for = v)),
    },
    Opt {
        reload: Live, long: "--tcp-keepalive", short: None, aliases: &[], env: &["TG_TCP_KEEPALIVE"],
        meta: "D", default: "60s", group: Ladder,
        help: "TCP keepalive idle time on every socket, 0 = off",
        kind: Value(|d, s| duration(s).map(|v| d.config.tcp_keepalive = v)),
    },
    Opt {
        reload: Restart, long: "--hosts-file", short: None, aliases: &[], env: &["TG_HOSTS_FILE"],
        meta: "PATH", default: "/etc/hosts", group: Ladder,
        help: "hosts file for the resolver",
        kind: Path(|d, p| { d.config.hosts_file = p; Ok(()) }),
    },
    Opt {
        reload: Restart, long: "--resolv-conf", short: None, aliases: &[], env: &["TG_RESOLV_CONF"],
        meta: "PATH", default: "/etc/resolv.conf", group: Ladder,
        help: "nameservers for the resolver",
        kind: Path(|d, p| { d.config.resolv_conf = p; Ok(()) }),
    },
    Opt {
        reload: Restart, long: "--doh", short: None, aliases: &[], env: &["TG_DOH"],
        meta: "URL", default: "none", group: Ladder,
        help: "DNS-over-HTTPS resolver for our own lookups (RFC 8484, https://IP[:PORT]/PATH; \
               a host name is looked up once over the plain resolver); repeatable, comma \
               list, tried in order",
        kind: List(|d, s| parse_doh_url(s).map(|u| d.config.doh.push(u.to_string()))),
    },
    Opt {
        reload: Restart, long: "--doh-fallback", short: None, aliases: &[], env: &["TG_DOH_FALLBACK"],
        meta: "on|off", default: "off", group: Ladder,
        help: "with --doh: when every DoH server failed, ask the plain nameservers too (off: a \
               name DoH cannot resolve stays unresolved, so a poisoned plain answer never wins)",
        kind: Value(|d, s| parse_bool(s).map(|v| d.config.doh_fallback = v)),
    },
    Opt {
        reload: Restart, long: "--doh-timeout", short: None, aliases: &[], env: &["TG_DOH_TIMEOUT"],
        meta: "D", default: "5s", group: Ladder,
        help: "bound on one DoH query to one server (connect, TLS, request, answer)",
        kind: Value(|d, s| positive(s).map(|v| d.config.doh_timeout = v)),
    },
    Opt {
        reload: Live, long: "--short-session", short: None, aliases: &[], env: &["TG_SHORT_SESSION"],
        meta: "D", default: "3s", group: Ladder,
        help: "a session the upstream ends within D after 24 B to 1 KiB down is short; 3 in a \
               row on one route put it down as closed-after-reply. An upstream close within D \
               after our WS ping turns pings off for the route for --pings-off-for",
        kind: Value(|d, s| positive(s).map(|v| d.config.short_session = v)),
    },
    Opt {
        reload: Live, long: "--closed-after-reply-cooldown", short: None, aliases: &[],
        env: &["TG_CLOSED_AFTER_REPLY_COOLDOWN"], meta: "D", default: "60s", group: Ladder,
        help: "minimum cooldown of a route down for closed-after-reply",
        kind: Value(|d, s| positive_ms(s).map(|v| d.config.health.closed_after_reply_ms = v)),
    },
    Opt {
        reload: Live, long: "--stall-timeout", short: None, aliases: &[], env: &["TG_STALL_TIMEOUT"],
        meta: "D", default: "8s", group: Ladder,
        help: "a session whose upstream sends nothing for D while the client waits (inside a \
               reply, or after it asked twice; twice D for re-asks) froze: it is ended so the \
               client reconnects; 0 = never",
        kind: Value(|d, s| duration(s).map(|v| d.config.stall_timeout = v)),
    },
    Opt {
        reload: Live, long: "--stall-ack-timeout", short: None, aliases: &[], env: &["TG_STALL_ACK_TIMEOUT"],
        meta: "D", default: "5s", group: Ladder,
        help: "a session whose upstream socket ACKs nothing of ours for D while the client \
               waits (a short keepalive is armed then) froze: it is ended; 0 = never",
        kind: Value(|d, s| duration(s).map(|v| d.config.stall_ack_timeout = v)),
    },
    Opt {
        reload: Live, long: "--stall-give-up", short: None, aliases: &[], env: &["TG_STALL_GIVE_UP"],
        meta: "D", default: "2s", group: Ladder,
        help: "a client that closes after waiting D inside a reply counts as a frozen \
               session; 0 = never",
        kind: Value(|d, s| duration(s).map(|v| d.config.stall_give_up = v)),
    },
    Opt {
        reload: Live, long: "--stall-window", short: None, aliases: &[], env: &["TG_STALL_WINDOW"],
        meta: "D", default: "120s", group: Ladder,
        help: "one frozen session makes its route suspect (a probe that must pull \
               --stall-probe-bytes runs at once); a second within D puts it down as stalled",
        kind: Value(|d, s| positive(s).map(|v| d.config.stall_window = v)),
    },
    Opt {
        reload: Live, long: "--stall-probe-bytes", short: None, aliases: &[], env: &["TG_STALL_PROBE_BYTES"],
        meta: "N", default: "32768", group: Ladder,
        help: "a probe of a route that stalled must pull N bytes down (pipelined resPQ \
               replies) within --probe-timeout, 1024-1048576",
        kind: Value(|d, s| {
            parse_in_range(s, 1024, 1 << 20).map(|n| d.config.stall_probe_bytes = n as u32)
        }),
    },
    // Clients and resources.
    Opt {
        reload: Live, long: "--handshake-timeout", short: None, aliases: &[], env: &["TG_HANDSHAKE_TIMEOUT"],
        meta: "D", default: "10s", group: Clients,
        help: "deadline for a client's 64-byte init, its PROXY header and fake-TLS hello \
               included (a TLS start still incomplete then is masked)",
        kind: Value(|d, s| positive(s).map(|v| d.config.handshake_timeout = v)),
    },
    Opt {
        reload: Live, long: "--idle-timeout", short: None, aliases: &[], env: &["TG_IDLE_TIMEOUT"],
        meta: "D", default: "600s", group: Clients,
        help: "close a session with no payload either way for D",
        kind: Value(|d, s| positive(s).map(|v| d.config.idle_timeout = v)),
    },
    Opt {
        reload: Live, long: "--bad-client-drain", short: None, aliases: &[], env: &["TG_BAD_CLIENT_DRAIN"],
        meta: "D", default: "2s", group: Clients,
        help: "read and discard a rejected client for D, 0 = close at once",
        kind: Value(|d, s| duration(s).map(|v| d.config.bad_client_drain = v)),
    },
    Opt {
        reload: Live, long: "--close-linger", short: None, aliases: &[], env: &["TG_CLOSE_LINGER"],
        meta: "D", default: "2s", group: Clients,
        help: "after one side closes, keep flushing the other for at most D",
        kind: Value(|d, s| duration(s).map(|v| d.config.close_linger = v)),
    },
    Opt {
        reload: Restart, long: "--max-connections", short: None, aliases: &[], env: &["TG_MAX_CONNECTIONS"],
        meta: "N", default: "from the open-files limit", group: Clients,
        help: "concurrent client sessions, 1-65536; the default fits the open-files limit (3 \
               per session, 32 spare), at least 4, or 512 when the limit is unknown",
        kind: Value(|d, s| {
            parse_in_range(s, 1, MAX_CONNECTIONS_LIMIT as u64)
                .map(|n| d.config.max_connections = n as usize)
        }),
    },
    Opt {
        reload: Restart, long: "--buf-kb", short: None, aliases: &[], env: &["TG_BUF_KB"],
        meta: "N", default: "16", group: Clients,
        help: "relay buffer size in KiB (up to two per session, from a pool, only while data waits; \
               one more until a pooled upstream's first byte), 4-1024",
        kind: Value(|d, s| {
            parse_in_range(s, 4, 1024).map(|n| d.config.buf_size = n as usize * 1024)
        }),
    },
    Opt {
        reload: Live, long: "--mem-trim-delay", short: None, aliases: &[], env: &["TG_MEM_TRIM_DELAY"],
        meta: "D", default: "10s", group: Clients,
        help: "once a burst of sessions has ended (at most half as many left, at least 32 gone),                give the memory they freed back to the OS D later, 0 = never",
        kind: Value(|d, s| duration(s).map(|v| d.config.mem_trim_delay = v)),
    },
    Opt {
        reload: Live, long: "--proxy-protocol", short: None, aliases: &[], env: &["TG_PROXY_PROTOCOL"],
        meta: "", default: "off", group: Clients,
        help: "require a PROXY protocol v1 or v2 header first (behind nginx ssl_preread or \
               HAProxy); its client address is used for logs and per-client limits, a \
               connection without a valid one is refused",
        kind: Switch(|d, on| d.config.proxy_protocol = on),
    },
    Opt {
        reload: Live, long: "--max-per-ip", short: None, aliases: &[], env: &["TG_MAX_PER_IP"],
        meta: "N", default: "128", group: Clients,
        help: "concurrent sessions per client address (IPv6: per /64), 0 = no cap, 0-65536",
        kind: Value(|d, s| {
            parse_in_range(s, 0, MAX_CONNECTIONS_LIMIT as u64)
                .map(|n| d.config.max_per_ip = n as usize)
        }),
    },
    Opt {
        reload: Live, long: "--per-ip-rate", short: None, aliases: &[], env: &["TG_PER_IP_RATE"],
        meta: "N", default: "20", group: Clients,
        help: "new connections per second a client address earns (a token bucket of \
               --per-ip-burst), 0 = off, 0-100000",
        kind: Value(|d, s| parse_in_range(s, 0, 100_000).map(|n| d.config.per_ip_rate = n as u32)),
    },
    Opt {
        reload: Live, long: "--per-ip-burst", short: None, aliases: &[], env: &["TG_PER_IP_BURST"],
        meta: "N", default: "64", group: Clients,
        help: "new connections an idle client address may open at once, 1-100000",
        kind: Value(|d, s| parse_in_range(s, 1, 100_000).map(|n| d.config.per_ip_burst = n as u32)),
    },
    Opt {
        reload: Live, long: "--per-ip-mask", short: None, aliases: &[], env: &["TG_PER_IP_MASK"],
        meta: "N", default: "64", group: Clients,
        help: "with an ee secret, a connection over --max-per-ip or the rate is masked like a \
               client that is not ours (a prober sees the site, not a refusal) while fewer \
               than N such are open, all addresses together; past N, or N = 0: closed at once, \
               0-65536",
        kind: Value(|d, s| {
            parse_in_range(s, 0, MAX_CONNECTIONS_LIMIT as u64).map(|n| d.config.per_ip_mask = n as u32)
        }),
    },
    Opt {
        reload: Live, long: "--mask-host", short: None, aliases: &[], env: &["TG_MASK_HOST"],
        meta: "HOST[:PORT]", default: "none", group: Clients,
        help: "relay a client that is not ours (not a fake-TLS hello of any secret, or not TLS \
               on an ee-only port) byte for byte to HOST (port 443 unless given); default the \
               ee secret's domain matching the hello's SNI, else the first ee secret's",
        kind: Value(|d, s| {
            parse_cf_endpoint(s).map(|e| d.config.mask_host = Some((e.host, e.port)))
        }),
    },
    Opt {
        reload: Live, long: "--no-mask", short: None, aliases: &[], env: &["TG_NO_MASK"],
        meta: "", default: "off", group: Clients,
        help: "close a client that is not ours instead of masking it",
        kind: Switch(|d, on| d.config.no_mask = on),
    },
    Opt {
        reload: Live, long: "--mask-connect-timeout", short: None, aliases: &[],
        env: &["TG_MASK_CONNECT_TIMEOUT"], meta: "D", default: "5s", group: Clients,
        help: "bound on the TCP connect to the mask host",
        kind: Value(|d, s| positive(s).map(|v| d.config.mask_connect_timeout = v)),
    },
    Opt {
        reload: Live, long: "--mask-idle-timeout", short: None, aliases: &[], env: &["TG_MASK_IDLE_TIMEOUT"],
        meta: "D", default: "60s", group: Clients,
        help: "close a masked session with no byte either way for D (a transparent client's \
               web traffic idles like a session: --idle-timeout)",
        kind: Value(|d, s| positive(s).map(|v| d.config.mask_idle_timeout = v)),
    },
    Opt {
        reload: Live, long: "--tls-time-window", short: None, aliases: &[], env: &["TG_TLS_TIME_WINDOW"],
        meta: "D", default: "120s", group: Clients,
        help: "refuse a fake-TLS (ee) hello whose timestamp is more than D off the clock, whole \
               seconds, 0 = never check; only once the clock is trusted (past this release's date and \
               stepped by NTP or agreeing with a client's hello), so a router without a \
               real-time clock still lets clients in",
        kind: Value(|d, s| tls_window(s).map(|v| d.config.tls_time_window = v)),
    },
    Opt {
        reload: Restart, long: "--replay-cache", short: None, aliases: &[], env: &["TG_REPLAY_CACHE"],
        meta: "N", default: "8192", group: Clients,
        help: "fake-TLS hellos remembered to refuse a replayed one (32 bytes each, allocated at \
               start), 1-1048576; 0 = off, unsafe: a recorded hello is answered again; until an \
               ee secret is in use a reload may still set it",
        kind: Value(|d, s| {
            parse_in_range(s, 0, 1 << 20).map(|n| d.config.replay_cache = n as usize)
        }),
    },
    // Logging.
    Opt {
        reload: Live, long: "--verbose", short: Some("-v"), aliases: &[], env: &["TG_VERBOSE"],
        meta: "", default: "off", group: Logging,
        help: "debug lines; twice for trace",
        kind: Count(|d, n| d.verbose = n),
    },
    Opt {
        reload: Live, long: "--quiet", short: Some("-q"), aliases: &[], env: &["TG_QUIET"],
        meta: "", default: "off", group: Logging,
        help: "warnings and errors only",
        kind: Count(|d, n| d.quiet = n),
    },
    Opt {
        reload: Live, long: "--log-time", short: None, aliases: &[], env: &["TG_LOG_TIME"],
        meta: "auto|on|off", default: "auto", group: Logging,
        help: "UTC time stamp on stderr lines: auto = only when stderr is a terminal (logd \
               and journald stamp lines themselves), on, off; --log-file lines always have it",
        kind: Value(|d, s| crate::logging::LogTime::parse(s).map(|v| d.config.log_time = v)),
    },
    Opt {
        reload: Restart, long: "--log-file", short: None, aliases: &[], env: &["TG_LOG_FILE"],
        meta: "PATH", default: "stderr", group: Logging,
        help: "append to PATH instead of stderr",
        kind: Path(|d, p| { d.config.log_file = Some(p); Ok(()) }),
    },
    Opt {
        reload: Restart, long: "--log-max-kb", short: None, aliases: &[], env: &["TG_LOG_MAX_KB"],
        meta: "N", default: "1024", group: Logging,
        help: "past N KiB, PATH is renamed to PATH.1 (one rotation), 1-4194304",
        kind: Value(|d, s| {
            parse_in_range(s, 1, 4 * 1024 * 1024).map(|n| d.config.log_max_bytes = n * 1024)
        }),
    },
    Opt {
        reload: Live, long: "--log-fold-interval", short: None, aliases: &[],
        env: &["TG_LOG_FOLD_INTERVAL"], meta: "D", default: "6s", group: Logging,
        help: "a repeatable warning (per kind) is written at most once per D, with the count \
               of the ones folded since; 0 = every line",
        kind: Value(|d, s| duration(s).map(|v| d.config.log_fold_interval = v)),
    },
    Opt {
        reload: Live, long: "--stats-interval", short: None, aliases: &[], env: &["TG_STATS_INTERVAL"],
        meta: "D", default: "300s", group: Logging,
        help: "period of the stats line, 0 = never",
        kind: Value(|d, s| duration(s).map(|v| d.config.stats_interval = v)),
    },
    Opt {
        reload: Live, long: "--link-ip", short: None, aliases: &[], env: &["TG_LINK_IP"],
        meta: "HOST", default: "detected", group: Logging,
        help: "host name or IP put in `tg-ws-proxy link` output",
        kind: Value(|d, s| parse_link_host(s).map(|h| d.config.link_ip = Some(h))),
    },
    Opt {
        reload: Live, long: "--drain-timeout", short: None, aliases: &[], env: &["TG_DRAIN_TIMEOUT"],
        meta: "D", default: "5s", group: Clients,
        help: "on SIGTERM/SIGINT stop accepting, write the stats line, let sessions finish for \
               at most D, then exit (a second signal exits at once; 0 = exit at once)",
        kind: Value(|d, s| duration(s).map(|v| d.config.drain_timeout = v)),
    },
    Opt {
        reload: Live, long: "--bind-retry", short: None, aliases: &[], env: &["TG_BIND_RETRY"],
        meta: "D", default: "0", group: Listen,
        help: "while the listen address is not assigned yet (boot), retry the bind every D \
               instead of exiting (0 = exit at once)",
        kind: Value(|d, s| duration(s).map(|v| d.config.bind_retry = v)),
    },
    Opt {
        reload: Restart, long: "--control-socket", short: None, aliases: &[], env: &["TG_CONTROL_SOCKET"],
        meta: "PATH", default: "none", group: Logging,
        help: "unix socket (mode 0600) for `tg-ws-proxy ctl`: status, metrics, pin, probe, reload",
        kind: Path(|d, p| { d.config.control_socket = Some(p); Ok(()) }),
    },
    Opt {
        reload: Live, long: "--config", short: None, aliases: &[], env: &["TG_CONFIG"],
        meta: "FILE", default: "none", group: Listen,
        help: "read settings from FILE (at most 64 KiB): one `NAME VALUE` per line, NAME a long \
               flag without --, # comment lines; flags and TG_* variables win over it; \
               SIGHUP re-reads it and the secret files for new sessions (an invalid one is \
               refused and the running settings stay)",
        // Read by the driver before every other option (`parse::load_config`).
        kind: Path(|_, _| Ok(())),
    },
    Opt {
        reload: Live, long: "--control-timeout", short: None, aliases: &[], env: &["TG_CONTROL_TIMEOUT"],
        meta: "D", default: "2s", group: Logging,
        help: "a control-socket client has D to send its request and take the reply, then \
               the connection is closed (more than 0)",
        kind: Value(|d, s| {
            let v = duration(s)?;
            if v.is_zero() {
                return Err("must be more than 0".into());
            }
            d.config.control_timeout = v;
            Ok(())
        }),
    },
    // Direct transports (transparent mode, SOCKS5: docs/protocol.md §1.9).
    Opt {
        reload: Live, long: "--dc-addr", short: None, aliases: &[], env: &["TG_DC_ADDR"],
        meta: "IP=DC", default: "none", group: Clients,
        help: "a direct client (transparent or SOCKS5) dialling exactly IP means DC (the \
               init's signed form: 2, -2 media, 10002 test), over the built-in address table; \
               repeatable, comma list",
        kind: List(|d, s| parse_ip_dc(s).map(|(ip, dc)| { d.config.dc_addrs.insert(ip, dc); })),
    },
    // Ways in: transparent mode and SOCKS5 (docs/protocol.md §1.9).
    Opt {
        reload: Live, long: "--transparent", short: None, aliases: &[], env: &["TG_TRANSPARENT"],
        meta: "HOST:PORT", default: "off", group: Listen,
        help: "transparent-mode listener: LAN TCP to Telegram's ranges, redirected here by our \
               nftables table (`firewall install`), goes down the ladder; off = none",
        kind: Value(|d, s| parse_listen_addr(s).map(|a| d.config.transparent = a)),
    },
    Opt {
        reload: Live, long: "--tg-ranges", short: None, aliases: &[], env: &["TG_TG_RANGES"],
        meta: "PATH", default: "built in", group: Listen,
        help: "Telegram's address ranges (cidr.txt format) for the transparent guard and the \
               firewall sets, instead of the refreshed cache or the built-in copy",
        kind: Path(|d, p| { d.config.tg_ranges_file = Some(p); Ok(()) }),
    },
    Opt {
        reload: Live, long: "--tg-ranges-url", short: None, aliases: &[], env: &["TG_TG_RANGES_URL"],
        meta: "URL", default: "Telegram's cidr.txt", group: Listen,
        help: "where the proxy refreshes Telegram's ranges from while --transparent is set \
               (https or http URL); off = never",
        kind: Value(|d, s| parse_url_or_off(s).map(|u| d.config.tg_ranges_url = u)),
    },
    Opt {
        reload: Live, long: "--tg-ranges-refresh", short: None, aliases: &[], env: &["TG_TG_RANGES_REFRESH"],
        meta: "D", default: "24h", group: Listen,
        help: "how often Telegram's ranges are refreshed (a list with too few entries is refused)",
        kind: Value(|d, s| positive(s).map(|v| d.config.tg_ranges_refresh = v)),
    },
    Opt {
        reload: Live, long: "--tg-ranges-cache", short: None, aliases: &[], env: &["TG_TG_RANGES_CACHE"],
        meta: "PATH", default: "none", group: Listen,
        help: "keep the last good refreshed range list in PATH (read at start and by `firewall`)",
        kind: Path(|d, p| { d.config.tg_ranges_cache = Some(p); Ok(()) }),
    },
    Opt {
        reload: Live, long: "--tg-ranges-retry", short: None, aliases: &[], env: &["TG_TG_RANGES_RETRY"],
        meta: "D", default: "60s", group: Listen,
        help: "first wait after a failed or refused range refresh; doubles up to \
               --tg-ranges-refresh",
        kind: Value(|d, s| positive(s).map(|v| d.config.tg_ranges_retry = v)),
    },
    Opt {
        reload: Live, long: "--tg-ranges-timeout", short: None, aliases: &[], env: &["TG_TG_RANGES_TIMEOUT"],
        meta: "D", default: "10s", group: Listen,
        help: "bound on one range fetch (DNS, TLS, GET, redirects) and on the nft run that \
               updates the firewall sets after it",
        kind: Value(|d, s| positive(s).map(|v| d.config.tg_ranges_timeout = v)),
    },
    Opt {
        reload: Live, long: "--nft", short: None, aliases: &[], env: &["TG_NFT"],
        meta: "PATH", default: "nft", group: Listen,
        help: "the nft binary `firewall` and the range refresh run (looked up in PATH unless \
               it has a /)",
        kind: Path(|d, p| { d.config.nft = p; Ok(()) }),
    },
    Opt {
        reload: Live, long: "--lan-iface", short: None, aliases: &[], env: &["TG_LAN_IFACE"],
        meta: "NAME", default: "br-lan", group: Listen,
        help: "LAN interface whose TCP to Telegram our firewall table redirects; repeatable, \
               comma list",
        kind: List(|d, s| parse_iface(s).map(|n| {
            if !d.config.lan_ifaces.contains(&n) { d.config.lan_ifaces.push(n); }
        })),
    },
    Opt {
        reload: Live, long: "--transparent-skip", short: None, aliases: &[], env: &["TG_TRANSPARENT_SKIP"],
        meta: "ADDR[/LEN]", default: "none", group: Listen,
        help: "a LAN host or prefix whose Telegram traffic is never redirected; repeatable, \
               comma list",
        kind: List(|d, s| parse_prefix(s).map(|p| d.config.transparent_skip.push(p))),
    },
    Opt {
        reload: Live, long: "--socks5", short: None, aliases: &[], env: &["TG_SOCKS5"],
        meta: "HOST:PORT", default: "off", group: Listen,
        help: "SOCKS5 listener (RFC 1928 CONNECT to Telegram DC addresses only); refused on an \
               address that is not loopback or private (0.0.0.0 and :: too) unless \
               --socks5-public; off = none",
        kind: Value(|d, s| parse_listen_addr(s).map(|a| d.config.socks5 = a)),
    },
    Opt {
        reload: Live, long: "--socks5-auth", short: None, aliases: &[], env: &["TG_SOCKS5_AUTH"],
        meta: "PATH", default: "none", group: Listen,
        help: "user:password lines SOCKS5 clients must give (RFC 1929; no-auth is then never \
               chosen); mode 0600 like the secret file",
        kind: Path(|d, p| { d.config.socks5_auth = Some(p); Ok(()) }),
    },
    Opt {
        reload: Live, long: "--socks5-public", short: None, aliases: &[], env: &["TG_SOCKS5_PUBLIC"],
        meta: "", default: "off", group: Listen,
        help: "allow --socks5 on an address that is not loopback or private (needs --socks5-auth)",
        kind: Switch(|d, on| d.config.socks5_public = on),
    },
];

/// `IP=DC` of `--dc-addr`: an IPv4 or IPv6 address (brackets optional; an IPv4-mapped IPv6
/// address is stored as IPv4) and a DC index in the init's signed form (docs/protocol.md §1.4:
/// negative = media, 10000 + N = test DC N), not naming DC 0.
fn parse_ip_dc(s: &str) -> Result<(IpAddr, DcId), String> {
    let (ip, dc) = s
        .split_once('=')
        .ok_or_else(|| format!("'{s}': expected IP=DC (e.g. 149.154.167.51=2)"))?;
    let ip = normalise(parse_ip(ip.trim())?);
    let dc = dc
        .trim()
        .parse::<i16>()
        .ok()
        .and_then(|i| DcId::from_index(i).ok())
        .ok_or_else(|| {
            format!("'{s}': DC must be a DC index: 1-9999, -N for media, 1000N for test")
        })?;
    Ok((ip, dc))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn dc_addr_values() {
        let dc = |n| DcId::from_index(n).unwrap();
        assert_eq!(
            parse_ip_dc("149.154.167.51=2"),
            Ok((ip("149.154.167.51"), dc(2)))
        );
        assert_eq!(
            parse_ip_dc(" 127.0.0.5 = -4 "),
            Ok((ip("127.0.0.5"), dc(-4)))
        );
        assert_eq!(parse_ip_dc("::1=10002"), Ok((ip("::1"), dc(10002))));
        assert_eq!(parse_ip_dc("[fd00::7]=3"), Ok((ip("fd00::7"), dc(3))));
        assert_eq!(
            parse_ip_dc("::ffff:10.0.0.1=1"),
            Ok((ip("10.0.0.1"), dc(1)))
        );
        for bad in [
            "149.154.167.51",
            "149.154.167.51:2",
            "x=2",
            "10.0.0.1=0",
            "10.0.0.1=10000",
        ] {
            assert!(parse_ip_dc(bad).is_err(), "{bad}");
        }
        assert!(parse_ip_dc("10.0.0.1=40000")
            .unwrap_err()
            .contains("DC index"));
    }

    #[test]
    fn dc_addr_is_a_repeatable_live_list() {
        let o = LADDER_CLIENTS_LOGGING
            .iter()
            .find(|o| o.long == "--dc-addr")
            .expect("declared");
        assert_eq!(o.reload, Reload::Live);
        assert!(matches!(o.kind, Kind::List(_)));
        let mut d = super::super::draft::Draft::new();
        let Kind::List(write) = o.kind else {
            unreachable!()
        };
        write(&mut d, "10.0.0.1=2").unwrap();
        write(&mut d, "10.0.0.1=4").unwrap();
        write(&mut d, "::1=-1").unwrap();
        assert_eq!(d.config.dc_addrs.len(), 2);
        assert_eq!(
            d.config.dc_addrs[&ip("10.0.0.1")],
            DcId::plain(4),
            "last wins"
        );
    }
}
